//! The memcached store against real `memcached` processes the tests start on free loopback
//! ports and stop afterwards: the fixed window decides as the memory store does, exactly under
//! concurrency across nodes, keys where gomemcache puts them, failures bounded, and
//! envoyproxy/ratelimit's memcache cases at the counter level.
#![cfg(feature = "memcached")]

use std::sync::Arc;
use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::gcra::Gcra;
use floodgate::algorithm::sliding_window::SlidingWindow;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::store::{
    BreakerState, CounterIncrement, KeyedOp, MemcachedStore, MemoryStore, Store,
};
use floodgate::{Clock, ManualClock, Nanos, Op, OpKind, StoreError, SystemClock};
use floodgate_harness::MemcachedServer;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

mod memcached;
// The suite every store runs lives with the Redis tests' helpers, which need the `redis` feature.
#[cfg(feature = "redis")]
mod conformance;
#[cfg(feature = "redis")]
mod redis_common;

/// The suite every store runs (`conformance::store_agrees_with_the_memory_store`): memcached
/// decides the fixed window as the memory store does, and refuses every other algorithm
/// before anything is sent.
#[cfg(feature = "redis")]
#[test]
fn the_store_conformance_suite_passes() {
    use floodgate::store::Capabilities;
    let server = MemcachedServer::start();
    let clock = clock_at_now();
    let rt = runtime();
    let store = {
        let _guard = rt.enter();
        store(&[&server], &clock)
    };
    assert_eq!(store.kind(), "memcached");
    assert!(store.is_shared() && !store.chains_atomically());
    conformance::store_agrees_with_the_memory_store(&rt, &clock, &store);
}

/// A runtime of two workers, with timers and I/O.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A manual clock at the real Unix time, to the second: memcached expires counters on its own
/// clock, and a window over 30 days is given its end as a Unix time.
fn clock_at_now() -> ManualClock {
    let now = SystemClock::new().now().0;
    ManualClock::new(Nanos(now - now % 1_000_000_000))
}

/// A store on `servers` at `clock`, with a timeout generous for a loaded machine.
fn store(servers: &[&MemcachedServer], clock: &ManualClock) -> MemcachedStore {
    MemcachedStore::builder(servers.iter().map(|s| s.address()).collect())
        .timeout(Duration::from_secs(2))
        .clock(clock.clone())
        .build()
        .unwrap()
}

fn check(cost: u64) -> Op {
    Op::Check { cost }
}

/// A random sequence: before each op, the clock moves on (often not at all, sometimes across
/// a boundary); ops of every kind the fixed window takes, on two keys.
fn steps() -> impl Strategy<Value = Vec<(u64, bool, u8, u64)>> {
    proptest::collection::vec((0u64..5, any::<bool>(), 0u8..4, 0u64..9), 1..40)
}

/// The fixed window on memcached decides as on the memory store, op for op, at the same
/// instants: checks of every cost (0, within, above the limit), refunds, charges, window
/// boundaries, and a 31-day window (an absolute expiry).
#[test]
fn the_fixed_window_decides_as_in_memory() {
    let server = MemcachedServer::start();
    let rt = runtime();
    let windows = [
        Duration::from_secs(1),
        Duration::from_secs(60),
        Duration::from_secs(31 * 86_400),
    ];
    let mut runner = TestRunner::new(Config::with_cases(48));
    let case = std::sync::atomic::AtomicU64::new(0);
    let strategy = (1u64..6, 0usize..3, steps());
    runner
        .run(&strategy, |(limit, w, steps)| {
            let clock = clock_at_now();
            let memory = MemoryStore::builder().clock(clock.clone()).build().unwrap();
            let remote = {
                let _guard = rt.enter();
                store(&[&server], &clock)
            };
            let window = windows[w];
            let fw: AnyAlgorithm = FixedWindow::new(limit, window).unwrap().into();
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            for (i, (jump, second_key, kind, cost)) in steps.into_iter().enumerate() {
                // 0: stay; 1: a millisecond (after 3, into a window's first instants, where a
                // 31-day window's expiry is absolute); 2: a third of a window; 3: to just before
                // the next boundary; 4: a whole window on.
                let step = match jump {
                    0 => Duration::ZERO,
                    1 => Duration::from_millis(1),
                    2 => window / 3,
                    3 => {
                        let w = window.as_nanos() as u64;
                        let into = clock.now().0 % w;
                        Duration::from_nanos(w - into - 1)
                    }
                    _ => window,
                };
                clock.advance(step);
                let key = format!("case{n}:{}", u8::from(second_key));
                let op = match kind {
                    0 | 1 => check(cost),
                    2 => Op::Refund { cost },
                    _ => Op::Charge { cost },
                };
                let expected = rt.block_on(memory.apply(&fw, key.as_str(), op)).unwrap();
                let got = rt.block_on(remote.apply(&fw, key.as_str(), op)).unwrap();
                prop_assert_eq!(got, expected, "step {} {:?} on {}", i, op, key);
            }
            Ok(())
        })
        .unwrap();
}

/// `apply_many` decides each request as `apply` would, in order, across servers.
#[test]
fn apply_many_decides_each_in_order() {
    let (a, b) = (MemcachedServer::start(), MemcachedServer::start());
    let rt = runtime();
    let clock = clock_at_now();
    let memory = MemoryStore::builder().clock(clock.clone()).build().unwrap();
    let remote = {
        let _guard = rt.enter();
        store(&[&a, &b], &clock)
    };
    let fw: AnyAlgorithm = FixedWindow::new(3, Duration::from_secs(60)).unwrap().into();
    let keys: Vec<String> = (0..12).map(|i| format!("many:{i}")).collect();
    for round in 0..3 {
        let requests: Vec<KeyedOp<'_, str, AnyAlgorithm>> = keys
            .iter()
            .enumerate()
            .map(|(i, key)| KeyedOp {
                algorithm: &fw,
                key: key.as_str(),
                op: check((i as u64 + round) % 3),
            })
            .collect();
        let expected = rt.block_on(memory.apply_many(&requests)).unwrap();
        let got = rt.block_on(remote.apply_many(&requests)).unwrap();
        assert_eq!(got, expected, "round {round}");
    }
}

/// Three nodes (three stores) on two memcached servers, many tasks on many keys at one
/// instant: exactly `limit` admitted per key, none more, none fewer.
#[test]
fn exact_under_concurrency_across_nodes() {
    let (a, b) = (MemcachedServer::start(), MemcachedServer::start());
    let rt = runtime();
    let clock = clock_at_now();
    let nodes: Vec<MemcachedStore> = {
        let _guard = rt.enter();
        (0..3).map(|_| store(&[&a, &b], &clock)).collect()
    };
    let limit = 7;
    let fw = Arc::new(AnyAlgorithm::from(
        FixedWindow::new(limit, Duration::from_secs(3600)).unwrap(),
    ));
    let keys = 12;
    let admitted = rt.block_on(async {
        let mut tasks = Vec::new();
        for (n, node) in nodes.iter().enumerate() {
            for t in 0..8 {
                let (node, fw) = (node.clone(), fw.clone());
                tasks.push(tokio::spawn(async move {
                    let mut admitted = vec![0u64; keys];
                    for i in 0..keys * 3 {
                        let k = (i + t + n) % keys;
                        let d = node
                            .apply(&fw, &format!("race:{k}"), check(1))
                            .await
                            .unwrap();
                        admitted[k] += u64::from(d.allowed);
                    }
                    admitted
                }));
            }
        }
        let mut total = vec![0u64; keys];
        for task in tasks {
            for (k, n) in task.await.unwrap().into_iter().enumerate() {
                total[k] += n;
            }
        }
        total
    });
    assert_eq!(admitted, vec![limit; keys]);
    // Every refusal gave its unit back: each counter stands at the limit.
    let names: Vec<String> = (0..keys).map(|k| format!("race:{k}")).collect();
    let probes: Vec<KeyedOp<'_, str, AnyAlgorithm>> = names
        .iter()
        .map(|key| KeyedOp {
            algorithm: &*fw,
            key: key.as_str(),
            op: check(0),
        })
        .collect();
    let counts = rt.block_on(nodes[0].apply_many(&probes)).unwrap();
    assert!(counts.iter().all(|d| d.remaining == 0 && d.allowed));
}

/// Hundreds of calls at once on one key of one server share its two connections: they wait
/// for the next batch (one write for all) rather than open connections of their own, and the
/// batches decide exactly, as one call at a time would.
#[test]
fn overlapping_calls_go_in_batches_on_the_servers_connections() {
    let server = MemcachedServer::start();
    let rt = runtime();
    let clock = clock_at_now();
    let node = {
        let _guard = rt.enter();
        MemcachedStore::builder(vec![server.address()])
            .timeout(Duration::from_secs(5))
            .max_idle(2)
            .clock(clock.clone())
            .build()
            .unwrap()
    };
    let limit = 300;
    let fw = Arc::new(AnyAlgorithm::from(
        FixedWindow::new(limit, Duration::from_secs(3600)).unwrap(),
    ));
    let before = server.stat("total_connections").expect("stats");
    let admitted = rt.block_on(async {
        let calls = (0..1000).map(|_| node.apply(&fw, "crowd", check(1)));
        let decisions = futures_util::future::join_all(calls).await;
        decisions
            .into_iter()
            .map(|d| u64::from(d.unwrap().allowed))
            .sum::<u64>()
    });
    assert_eq!(admitted, limit);
    // Every refusal gave its unit back: the count stands at the limit.
    let count = rt.block_on(node.apply(&fw, "crowd", check(0))).unwrap();
    assert!(count.allowed && count.remaining == 0, "{count:?}");
    // This reading's own connection, and the store's two.
    let opened = server.stat("total_connections").expect("stats") - before;
    assert!(opened <= 3, "{opened} connections opened for 1000 calls");
}

/// Every algorithm but the fixed window is refused with `NotOnStore`, and an op the fixed
/// window lacks with `Unsupported`, before anything is sent: with no server listening at all,
/// the refusal is still that one, and a batch holding one such request counts nothing.
#[test]
fn other_algorithms_are_refused_before_anything_is_sent() {
    let mut server = MemcachedServer::start();
    let rt = runtime();
    let clock = clock_at_now();
    let live = {
        let _guard = rt.enter();
        store(&[&server], &clock)
    };
    let fw: AnyAlgorithm = FixedWindow::new(3, Duration::from_secs(60)).unwrap().into();
    let others: Vec<AnyAlgorithm> = vec![
        Gcra::new(4, 1, Duration::from_secs(1)).unwrap().into(),
        TokenBucket::new(1.0, 5).unwrap().into(),
        SlidingWindow::new(4, Duration::from_secs(10), None)
            .unwrap()
            .into(),
    ];
    rt.block_on(async {
        for other in &others {
            assert!(matches!(
                live.runs(other),
                Err(StoreError::NotOnStore {
                    store: "memcached",
                    ..
                })
            ));
            assert!(!live.takes_refunds(other) && !live.supports(other));
            let batch = [
                KeyedOp {
                    algorithm: &fw,
                    key: "mixed",
                    op: check(1),
                },
                KeyedOp {
                    algorithm: other,
                    key: "mixed2",
                    op: check(1),
                },
            ];
            let refused = live.apply_many(&batch).await;
            assert!(
                matches!(
                    refused,
                    Err(StoreError::NotOnStore {
                        store: "memcached",
                        ..
                    })
                ),
                "{refused:?}"
            );
        }
        let unsupported = live.apply(&fw, "mixed", Op::Reserve { cost: 1 }).await;
        assert!(matches!(
            unsupported,
            Err(StoreError::Unsupported {
                algorithm: "fixed_window",
                op: OpKind::Reserve
            })
        ));
        assert!(live.runs(&fw).is_ok() && live.takes_refunds(&fw) && live.takes_charges(&fw));
    });
    assert_eq!(
        server.get(&format!("mixed:{}", clock.now().0 / 60_000_000_000)),
        None
    );
    server.kill();
    rt.block_on(async {
        for other in &others {
            let refused = live.apply(other, "k", check(1)).await;
            assert!(
                matches!(refused, Err(StoreError::NotOnStore { .. })),
                "{refused:?}"
            );
        }
        // The fixed window does reach for the server, and finds none.
        assert!(matches!(
            live.apply(&fw, "k", check(1)).await,
            Err(StoreError::Refused(_))
        ));
    });
}

/// Keys memcached refuses are refused with a clear error, never a panic, before anything is
/// sent.
#[test]
fn keys_memcached_refuses_are_refused() {
    let server = MemcachedServer::start();
    let rt = runtime();
    let clock = clock_at_now();
    let store = {
        let _guard = rt.enter();
        store(&[&server], &clock)
    };
    let fw: AnyAlgorithm = FixedWindow::new(3, Duration::from_secs(60)).unwrap().into();
    let long = "k".repeat(251);
    rt.block_on(async {
        for key in [
            "with space",
            "tab\tkey",
            "new\nline",
            long.as_str(),
            &"k".repeat(245),
        ] {
            let refused = store.apply(&fw, key, check(1)).await;
            assert!(
                matches!(refused, Err(StoreError::NotOnStore { .. })),
                "{key:?}: {refused:?}"
            );
            let increment = CounterIncrement {
                key,
                by: 1,
                refund: false,
                ttl_seconds: 60,
            };
            let refused = store.increment_counters(&[increment]).await;
            if key.len() <= 250 && !key.contains(char::is_whitespace) {
                assert!(refused.is_ok(), "{key:?}");
            } else {
                assert!(
                    matches!(refused, Err(StoreError::NotOnStore { .. })),
                    "{key:?}: {refused:?}"
                );
            }
        }
        assert!(matches!(
            store.read_counters(&["a b"]).await,
            Err(StoreError::NotOnStore { .. })
        ));
    });
}

/// With two servers, a key lives on the server gomemcache picks: CRC-32 (IEEE) of the key
/// modulo 2, in the order given. Replacing the list (reversed) moves the keys with it.
#[test]
fn keys_live_where_gomemcache_puts_them() {
    let (a, b) = (MemcachedServer::start(), MemcachedServer::start());
    let rt = runtime();
    let clock = clock_at_now();
    let store = {
        let _guard = rt.enter();
        store(&[&a, &b], &clock)
    };
    // crc32: "123456789" 0xCBF43926 (even), "a" 0xE8B7BE43 (odd), "domain_key_value_1234"
    // 0xB5EA4EC5 (odd), "domain_key3_value3_997200" 0x3DA2FCA8 (even).
    let cases = [
        ("123456789", 0),
        ("a", 1),
        ("domain_key_value_1234", 1),
        ("domain_key3_value3_997200", 0),
    ];
    let servers = [&a, &b];
    rt.block_on(async {
        let increments: Vec<CounterIncrement<'_>> = cases
            .iter()
            .map(|(key, _)| CounterIncrement {
                key,
                by: 3,
                refund: false,
                ttl_seconds: 60,
            })
            .collect();
        assert_eq!(
            store.increment_counters(&increments).await.unwrap(),
            vec![3; 4]
        );
    });
    for (key, at) in cases {
        assert_eq!(servers[at].get(key).as_deref(), Some("3"), "{key}");
        assert_eq!(servers[1 - at].get(key), None, "{key}");
    }
    store.set_servers(vec![b.address(), a.address()]);
    assert_eq!(store.servers(), vec![b.address(), a.address()]);
    rt.block_on(async {
        let keys: Vec<&str> = cases.iter().map(|(k, _)| *k).collect();
        // Each key is now looked for on the other server, where it is not.
        assert_eq!(store.read_counters(&keys).await.unwrap(), vec![0; 4]);
    });
}

/// The nodes' shared secret: the first `add` wins, every node reads it back.
#[test]
fn get_or_set_keeps_the_first_value() {
    let (a, b) = (MemcachedServer::start(), MemcachedServer::start());
    let rt = runtime();
    let clock = clock_at_now();
    let (one, two) = {
        let _guard = rt.enter();
        (store(&[&a, &b], &clock), store(&[&a, &b], &clock))
    };
    rt.block_on(async {
        assert_eq!(
            one.get_or_set("floodgate:secret", "first").await.unwrap(),
            "first"
        );
        assert_eq!(
            two.get_or_set("floodgate:secret", "second").await.unwrap(),
            "first"
        );
        one.probe().await.unwrap();
        assert!(matches!(
            one.get_or_set("bad key", "x").await,
            Err(StoreError::NotOnStore { .. })
        ));
    });
    assert_eq!(one.breaker_state(), BreakerState::Closed);
}

/// Bad settings are typed errors naming the field and value.
#[test]
fn bad_settings_name_their_field() {
    let field = |servers: Vec<&str>| match MemcachedStore::builder(
        servers.into_iter().map(String::from).collect(),
    )
    .build()
    {
        Err(floodgate::ConfigError::Invalid { field, value, .. }) => (field, value),
        other => panic!("{other:?}"),
    };
    assert_eq!(field(vec![]), ("servers", String::new()));
    for bad in [
        "localhost",
        "localhost:",
        ":11211",
        "h:0",
        "h:70000",
        "h:port",
        "a b:1",
    ] {
        assert_eq!(
            field(vec!["127.0.0.1:11211", bad]),
            ("servers", bad.to_owned())
        );
    }
    let err = MemcachedStore::builder(vec!["127.0.0.1:1".into()])
        .timeout(Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(matches!(
        err,
        floodgate::ConfigError::Invalid {
            field: "timeout",
            ..
        }
    ));
    let err = MemcachedStore::builder(vec!["127.0.0.1:1".into()])
        .tls(true)
        .tls_ca_file("/nonexistent/ca.pem")
        .build()
        .unwrap_err();
    assert!(matches!(
        err,
        floodgate::ConfigError::Invalid {
            field: "tls_ca_file",
            ..
        }
    ));
    assert!(
        MemcachedStore::builder(vec!["[::1]:11211".into(), "cache.local:11211".into()])
            .build()
            .is_ok()
    );
}
