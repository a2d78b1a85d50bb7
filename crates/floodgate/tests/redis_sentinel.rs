//! The Redis store behind Sentinel (`redis-sentinel://`), against a master, a replica and three
//! `redis-server --sentinel` processes of the test's own, passwords on both: the Lua twins
//! agree with the memory store through the sentinels' master, and failovers (one the
//! sentinels run on request, which demotes the master, and a master killed) are followed
//! without rebuilding the store, every call bounded by the timeout meanwhile.
#![cfg(feature = "redis")]

mod conformance;
mod redis_common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::store::{RedisStore, Store};
use floodgate::{Clock, StoreError, SystemClock};
use floodgate_harness::{RedisSentinels, SentinelOptions};
use redis_common::{check, runtime};

fn options() -> SentinelOptions {
    SentinelOptions {
        password: Some("master-secret".into()),
        sentinel_password: Some("sentinel-secret".into()),
        ..SentinelOptions::default()
    }
}

/// A plain connection to the current master, to look at what the store wrote.
async fn raw(set: &RedisSentinels) -> redis::aio::MultiplexedConnection {
    let port = set.master_port().expect("a master");
    redis::Client::open(format!("redis://:master-secret@127.0.0.1:{port}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[test]
fn lua_twins_agree_with_the_memory_store_through_sentinels() {
    let set = RedisSentinels::start(options());
    let rt = runtime();
    let raw = rt.block_on(raw(&set));
    conformance::lua_twins_agree_with_the_memory_store(&rt, &set.url(), raw);
    conformance::long_fixed_windows_agree_at_their_boundaries(&rt, &set.url());
}

#[test]
fn failovers_under_load_are_followed_and_every_call_is_bounded() {
    let mut set = RedisSentinels::start(options());
    let rt = runtime();
    let timeout = Duration::from_millis(200);
    let slack = redis_common::SCHEDULING_SLACK;
    let wall = SystemClock::new();
    let store = {
        let _guard = rt.enter();
        RedisStore::builder(set.url())
            .timeout(timeout)
            .breaker(3, Duration::from_millis(100))
            .build()
            .unwrap()
    };
    let big: AnyAlgorithm = FixedWindow::new(1_000_000, Duration::from_secs(3600))
        .unwrap()
        .into();
    // Calls in a loop until `done`, then until `after` more succeed: the slowest call and how
    // many failed.
    let hammer = |done: &AtomicBool, after: usize| {
        rt.block_on(async {
            let (mut slowest, mut ok_after, mut errors, mut i) = (Duration::ZERO, 0, 0, 0u64);
            while ok_after < after {
                let finished = done.load(Ordering::Acquire);
                i += 1;
                let key = format!("load:u{}", i % 8);
                let start = wall.now();
                let result = store.apply(&big, key.as_str(), check(1)).await;
                let took = wall.now().saturating_since(start);
                slowest = slowest.max(took);
                assert!(took < timeout + slack, "call {i} took {took:?}: {result:?}");
                match result {
                    Ok(_) => ok_after += usize::from(finished),
                    Err(e) => {
                        assert!(e.is_transient(), "{e}");
                        errors += 1;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
                assert!(i < 200_000, "calls never succeeded again");
            }
            (slowest, errors)
        })
    };

    // 1. The sentinels fail over on request: the old master is demoted (READONLY).
    let first = set.master_port().unwrap();
    let done = AtomicBool::new(false);
    let (slowest, errors) = std::thread::scope(|s| {
        let set = &set;
        let done = &done;
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let port = set.sentinel_ports()[0];
            let ok = std::process::Command::new("redis-cli")
                .args([
                    "-p",
                    &port.to_string(),
                    "-a",
                    "sentinel-secret",
                    "--no-auth-warning",
                ])
                .args(["SENTINEL", "FAILOVER", "floodgate-master"])
                .output()
                .unwrap();
            assert!(String::from_utf8_lossy(&ok.stdout).contains("OK"));
            set.wait_for_new_master(first);
            done.store(true, Ordering::Release);
        });
        hammer(done, 200)
    });
    eprintln!("requested failover: slowest call {slowest:?}, {errors} errors");
    let second = set.master_port().unwrap();
    assert_ne!(second, first);

    // 2. The master killed: the sentinels promote the replica after down-after-milliseconds.
    let done = AtomicBool::new(false);
    let (slowest, errors) = std::thread::scope(|s| {
        let set = &mut set;
        let done = &done;
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            set.server_mut(second).kill();
            set.wait_for_new_master(second);
            done.store(true, Ordering::Release);
        });
        hammer(done, 200)
    });
    eprintln!("master killed: slowest call {slowest:?}, {errors} errors");
    assert!(
        errors > 0,
        "the dead master's calls failed until the sentinels moved it"
    );

    // Exact counting on the same store, on the new master.
    rt.block_on(async {
        let limited: AnyAlgorithm = FixedWindow::new(5, Duration::from_secs(3600))
            .unwrap()
            .into();
        let mut allowed = 0;
        for _ in 0..8 {
            let d = store.apply(&limited, "after:u", check(1)).await.unwrap();
            allowed += u64::from(d.allowed);
        }
        assert_eq!(allowed, 5);
    });
}

#[tokio::test]
async fn wrong_sentinel_credentials_fail_as_auth_and_show_no_password() {
    let set = RedisSentinels::start(SentinelOptions {
        replicas: 0,
        sentinels: 1,
        ..options()
    });
    let url = set.url().replace("sentinel-secret", "wrong-secret");
    let store = RedisStore::builder(url)
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let big: AnyAlgorithm = FixedWindow::new(5, Duration::from_secs(3600))
        .unwrap()
        .into();
    let error = store.apply(&big, "k", check(1)).await.unwrap_err();
    let text = error.to_string();
    assert!(
        !text.contains("wrong-secret") && !text.contains("master-secret"),
        "{text}"
    );
    assert!(
        matches!(
            error,
            StoreError::Auth(_) | StoreError::Refused(_) | StoreError::Protocol(_)
        ),
        "{error:?}"
    );
}
