//! The server list from a DNS SRV record (upstream's `MEMCACHE_SRV`), against a real DNS
//! server (dnsmasq) and real memcached processes: the list as upstream builds it (sorted
//! `target:port`), keys counted on the server that list picks, the list following the record
//! on a refresh (asked for, and on the timer), and a failed lookup keeping the list as it was
//! (upstream's `cache_impl_test.go` refresh cases).

use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::store::{MemcachedStore, Store};
use floodgate::{ConfigError, StoreError};
use floodgate_harness::{DnsServer, MemcachedServer, SrvRecord};

use crate::{check, clock_at_now, runtime};

const RECORD: &str = "_memcache._tcp.floodgate.test";

fn records(servers: &[&MemcachedServer]) -> Vec<SrvRecord> {
    servers
        .iter()
        .map(|s| SrvRecord {
            name: RECORD.to_owned(),
            target: "localhost".to_owned(),
            port: s.port(),
        })
        .collect()
}

/// `localhost.:PORT` of each, sorted as strings, as upstream lists an SRV answer.
fn listed(servers: &[&MemcachedServer]) -> Vec<String> {
    let mut list: Vec<String> = servers
        .iter()
        .map(|s| format!("localhost.:{}", s.port()))
        .collect();
    list.sort();
    list
}

#[test]
fn the_servers_are_the_records_and_follow_them() {
    let (a, b) = (MemcachedServer::start(), MemcachedServer::start());
    let mut dns = DnsServer::start(&records(&[&a, &b]));
    let rt = runtime();
    let clock = clock_at_now();
    let store = {
        let _guard = rt.enter();
        MemcachedStore::from_srv(RECORD)
            .srv_nameserver(dns.address())
            .timeout(Duration::from_secs(2))
            .clock(clock.clone())
            .build()
            .unwrap()
    };
    rt.block_on(store.probe()).unwrap();
    assert_eq!(store.servers(), listed(&[&a, &b]));
    let fw: AnyAlgorithm = FixedWindow::new(10, Duration::from_secs(3600))
        .unwrap()
        .into();
    // Keys land on one server each, the one the sorted list picks.
    let on = |key: &str| {
        let counter = format!("{key}:{}", clock_index(&clock));
        [&a, &b].map(|s| s.get(&counter).is_some())
    };
    let mut seen = [false, false];
    for i in 0..16 {
        let key = format!("k{i}");
        assert!(
            rt.block_on(store.apply(&fw, &key, check(1)))
                .unwrap()
                .allowed
        );
        let where_ = on(&key);
        assert_eq!(
            where_.iter().filter(|x| **x).count(),
            1,
            "{key}: {where_:?}"
        );
        seen[usize::from(where_[1])] = true;
    }
    assert_eq!(seen, [true, true], "both servers hold keys");

    // The record now names only b: a refresh makes it the list.
    dns.serve(&records(&[&b]));
    let list = rt.block_on(store.refresh_servers()).unwrap();
    assert_eq!((list, store.servers()), (listed(&[&b]), listed(&[&b])));

    // The record is gone: the lookup fails and the list stays.
    dns.serve(&[]);
    let failed = rt.block_on(store.refresh_servers());
    assert!(
        matches!(&failed, Err(StoreError::Unavailable(m)) if m.contains(RECORD)),
        "{failed:?}"
    );
    assert_eq!(store.servers(), listed(&[&b]));
    assert!(
        rt.block_on(store.apply(&fw, "still", check(1)))
            .unwrap()
            .allowed
    );
}

#[test]
fn the_list_is_refreshed_on_its_interval() {
    let (a, b) = (MemcachedServer::start(), MemcachedServer::start());
    let mut dns = DnsServer::start(&records(&[&a]));
    let rt = runtime();
    let store = {
        let _guard = rt.enter();
        MemcachedStore::from_srv(RECORD)
            .srv_nameserver(dns.address())
            .srv_refresh(Duration::from_millis(50))
            .build()
            .unwrap()
    };
    let until = |want: Vec<String>| {
        // Polls the refresher's progress (every 10 ms, at most 10 s): another task's work.
        for _ in 0..1_000 {
            if store.servers() == want {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the list never became {want:?}: {:?}", store.servers());
    };
    until(listed(&[&a]));
    dns.serve(&records(&[&a, &b]));
    until(listed(&[&a, &b]));
    drop(rt);
}

#[test]
fn a_record_that_names_nothing_fails_the_probe_and_bad_names_are_refused() {
    let dns = DnsServer::start(&[]);
    let rt = runtime();
    let store = {
        let _guard = rt.enter();
        MemcachedStore::from_srv(RECORD)
            .srv_nameserver(dns.address())
            .build()
            .unwrap()
    };
    let probe = rt.block_on(store.probe());
    assert!(
        matches!(&probe, Err(StoreError::Unavailable(m)) if m.contains(RECORD)),
        "{probe:?}"
    );
    for bad in ["memcache.tcp.example.org", "_memcache._tcp", ""] {
        let built = MemcachedStore::from_srv(bad).build();
        assert!(
            matches!(built, Err(ConfigError::Invalid { field: "srv", .. })),
            "{bad}: {built:?}"
        );
    }
}

/// The fixed window's index at the clock's instant, for a one-hour window.
fn clock_index(clock: &floodgate::ManualClock) -> u64 {
    use floodgate::Clock;
    clock.now().0 / 1_000_000_000 / 3600
}
