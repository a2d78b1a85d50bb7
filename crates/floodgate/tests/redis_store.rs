//! The Redis store against real `redis-server` processes that the tests start on free loopback
//! ports and stop afterwards (never the shared Redis on 6379). The random comparison of every
//! Lua twin with its Rust algorithm is in `redis_conformance.rs`.
#![cfg(feature = "redis")]

use std::time::Duration;

use floodgate::algorithm::concurrency::{Concurrency, Fleet};
use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::gcra::Gcra;
use floodgate::algorithm::leaky_bucket::LeakyBucket;
use floodgate::algorithm::leaky_queue::LeakyQueue;
use floodgate::algorithm::sliding_log::SlidingLog;
use floodgate::algorithm::sliding_window::SlidingWindow;
use floodgate::algorithm::smooth::{SmoothBursty, SmoothWarmingUp};
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::algorithm::Algorithm;
use floodgate::store::redis::redis_key;
use floodgate::store::{RedisStore, Store};
use floodgate::{Clock, LeaseId, ManualClock, Nanos, Op, StoreError, SystemClock};
use floodgate_harness::RedisServer;

mod redis_common;
use redis_common::{check, raw, runtime, store_on_clock, SCHEDULING_SLACK, START};

/// Hand-written cases, with Redis `TIME` as the clock: the numbers the algorithms' own tests give.
#[test]
fn decides_with_redis_time() {
    let server = RedisServer::start();
    let rt = runtime();
    rt.block_on(async {
        let store = RedisStore::builder(server.url())
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let fw: AnyAlgorithm = FixedWindow::new(3, Duration::from_secs(3600))
            .unwrap()
            .into();
        let mut allowed = 0;
        for _ in 0..5 {
            let d = store.apply(&fw, "fw:alice", check(1)).await.unwrap();
            allowed += u64::from(d.allowed);
            assert_eq!(d.limit, 3);
        }
        assert_eq!(allowed, 3);
        let d = store.apply(&fw, "fw:alice", check(1)).await.unwrap();
        assert!(!d.allowed && d.remaining == 0 && d.retry_after.is_some());

        let gcra: AnyAlgorithm = Gcra::new(4, 1, Duration::from_secs(1)).unwrap().into();
        let d = store.apply(&gcra, "g:bob", check(5)).await.unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, 0);
        let d = store.apply(&gcra, "g:bob", check(6)).await.unwrap();
        assert_eq!((d.allowed, d.retry_after), (false, None));
    });
}

/// Each write's TTL is the time until the state is fresh again, rounded up to the millisecond;
/// a probe writes nothing.
#[test]
fn ttl_is_the_time_until_fresh() {
    let server = RedisServer::start();
    let rt = runtime();
    rt.block_on(async {
        let clock = ManualClock::new(Nanos(START + 123_456_000));
        let store = RedisStore::builder(server.url())
            .clock(clock.clone())
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let mut raw = raw(&server).await;
        let cases: [(AnyAlgorithm, &str); 4] = [
            (
                Gcra::new(9, 10, Duration::from_secs(7)).unwrap().into(),
                "ttl:gcra",
            ),
            (
                FixedWindow::new(5, Duration::from_secs(60)).unwrap().into(),
                "ttl:fw",
            ),
            (TokenBucket::new(0.25, 8).unwrap().into(), "ttl:tb"),
            (LeakyBucket::new(0.3, 8).unwrap().into(), "ttl:lb"),
        ];
        for (algorithm, key) in &cases {
            let d = store.apply(algorithm, key, check(0)).await.unwrap();
            assert!(d.allowed);
            let exists: bool = redis::cmd("EXISTS")
                .arg(redis_key(key))
                .query_async(&mut raw)
                .await
                .unwrap();
            assert!(!exists, "{key}: a probe wrote state");

            let d = store.apply(algorithm, key, check(3)).await.unwrap();
            assert!(d.allowed);
            let pttl: i64 = redis::cmd("PTTL")
                .arg(redis_key(key))
                .query_async(&mut raw)
                .await
                .unwrap();
            let ceil_ms = d.reset_after.as_nanos().div_ceil(1_000_000) as i64;
            assert!(
                pttl > 0 && pttl <= ceil_ms,
                "{key}: PTTL {pttl} ms, fresh in {ceil_ms} ms"
            );
            assert!(
                ceil_ms - pttl < 1_000,
                "{key}: PTTL {pttl} ms, fresh in {ceil_ms} ms"
            );
            let value: String = redis::cmd("GET")
                .arg(redis_key(key))
                .query_async(&mut raw)
                .await
                .unwrap();
            assert!(value.len() < 40, "{key}: {value}");
        }
    });
}

/// The newer twins: a write's TTL runs until the state is fresh (rounded up to the
/// millisecond), a probe on a missing key writes nothing, except for a bursty smooth key that
/// stores permits, which is never fresh and is kept without a TTL; each one's key is a conflict
/// for another algorithm, and back.
#[test]
fn newer_twins_ttl_and_conflicts() {
    let server = RedisServer::start();
    let rt = runtime();
    rt.block_on(async {
        let clock = ManualClock::new(Nanos(START + 123_456_000));
        let store = RedisStore::builder(server.url())
            .clock(clock.clone())
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let mut raw = raw(&server).await;
        let seconds = Duration::from_secs;
        let cases: [(AnyAlgorithm, &str, Op); 8] = [
            (
                SlidingLog::new(5, Duration::from_nanos(7_000_000_500))
                    .unwrap()
                    .into(),
                "ttl:log",
                check(3),
            ),
            (
                SlidingWindow::new(5, Duration::from_nanos(7_000_000_500), None)
                    .unwrap()
                    .into(),
                "ttl:sw",
                check(3),
            ),
            (
                SlidingWindow::new(5, seconds(7), Some(6)).unwrap().into(),
                "ttl:swb",
                check(3),
            ),
            (LeakyQueue::new(0.3, 4).unwrap().into(), "ttl:lq", check(3)),
            (
                SmoothWarmingUp::new(2.0, Duration::from_millis(5_500), 3.0)
                    .unwrap()
                    .into(),
                "ttl:warm",
                Op::Reserve { cost: 3 },
            ),
            (
                SmoothBursty::new(2.0, 0.0).unwrap().into(),
                "ttl:bursty0",
                Op::Reserve { cost: 3 },
            ),
            (
                SmoothBursty::new(2.0, 1.0).unwrap().into(),
                "ttl:bursty_full",
                Op::Reserve { cost: 3 },
            ),
            (
                SmoothBursty::guava(2.0, 1.0).unwrap().into(),
                "ttl:bursty",
                Op::Reserve { cost: 3 },
            ),
        ];
        let conn = raw.clone();
        let pttl = move |key: &'static str| {
            let mut raw = conn.clone();
            async move {
                redis::cmd("PTTL")
                    .arg(redis_key(key))
                    .query_async::<i64>(&mut raw)
                    .await
                    .unwrap()
            }
        };
        for (algorithm, key, op) in &cases {
            let never_fresh = *key == "ttl:bursty";
            let d = store.apply(algorithm, key, check(0)).await.unwrap();
            assert!(d.allowed, "{key}: {d:?}");
            if never_fresh {
                assert_eq!(pttl(key).await, -1, "{key}: created, without a TTL");
            } else {
                assert_eq!(pttl(key).await, -2, "{key}: a probe wrote state");
            }
            let d = store.apply(algorithm, key, *op).await.unwrap();
            assert!(d.allowed, "{key}: {d:?}");
            let ttl = pttl(key).await;
            if never_fresh {
                assert_eq!(ttl, -1, "{key}: never fresh, kept without a TTL");
            } else {
                let ceil_ms = d.reset_after.as_nanos().div_ceil(1_000_000) as i64;
                assert!(
                    ttl > 0 && ttl <= ceil_ms && ceil_ms - ttl < 1_000,
                    "{key}: PTTL {ttl} ms, fresh in {ceil_ms} ms"
                );
            }
            let kind: String = redis::cmd("TYPE")
                .arg(redis_key(key))
                .query_async(&mut raw)
                .await
                .unwrap();
            if kind == "string" {
                let value: String = redis::cmd("GET")
                    .arg(redis_key(key))
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                assert!(value.len() < 60, "{key}: {value}");
            } else {
                assert_eq!((*key, kind.as_str()), ("ttl:log", "list"));
            }

            // Another algorithm's key is a conflict, both ways, and both states are kept.
            let gcra: AnyAlgorithm = Gcra::new(1, 1, Duration::from_secs(60)).unwrap().into();
            let name = algorithm.name();
            let err = store.apply(&gcra, key, check(1)).await.unwrap_err();
            assert!(
                matches!(err, StoreError::StateConflict { algorithm: "gcra", found } if found == name),
                "{key}: {err}"
            );
            let other = format!("{key}:gcra");
            assert!(store.apply(&gcra, other.as_str(), check(1)).await.unwrap().allowed);
            let err = store.apply(algorithm, other.as_str(), *op).await.unwrap_err();
            assert!(
                matches!(err, StoreError::StateConflict { algorithm, found: "gcra" } if algorithm == name),
                "{key}: {err}"
            );
            let exists: bool = redis::cmd("EXISTS")
                .arg(redis_key(key))
                .query_async(&mut raw)
                .await
                .unwrap();
            assert!(exists, "{key}: kept after the conflict");
        }
    });
}

/// Leases: each acquire sets the TTL until the last lease expires; releasing the last lease
/// drops the key; a lease set under a key is a conflict for other algorithms, and back.
#[test]
fn lease_ttl_is_until_the_last_lease_expires() {
    let server = RedisServer::start();
    let rt = runtime();
    rt.block_on(async {
        let clock = ManualClock::new(Nanos(START + 123_456_000));
        let store = RedisStore::builder(server.url())
            .clock(clock.clone())
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let mut raw = raw(&server).await;
        let cases: [(AnyAlgorithm, &str); 2] = [
            (
                Concurrency::new(2, Duration::from_nanos(7_000_000_500))
                    .unwrap()
                    .into(),
                "ttl:conc",
            ),
            (
                Fleet::new(4, 0.5, Duration::from_secs(30)).unwrap().into(),
                "ttl:fleet",
            ),
        ];
        let (a, b) = (LeaseId(1), LeaseId(u128::MAX));
        for (algorithm, key) in &cases {
            let pttl = |raw: &mut redis::aio::MultiplexedConnection| {
                let mut raw = raw.clone();
                async move {
                    redis::cmd("PTTL")
                        .arg(redis_key(key))
                        .query_async::<i64>(&mut raw)
                        .await
                        .unwrap()
                }
            };
            let d = store.apply(algorithm, key, check(1)).await.unwrap();
            assert!(d.allowed);
            assert_eq!(pttl(&mut raw).await, -2, "{key}: a probe wrote state");

            let acquire = |lease| Op::Acquire {
                lease,
                critical: false,
            };
            assert!(
                store
                    .apply(algorithm, key, acquire(a))
                    .await
                    .unwrap()
                    .allowed
            );
            clock.advance(Duration::from_secs(2));
            let d = store.apply(algorithm, key, acquire(b)).await.unwrap();
            assert!(d.allowed && d.remaining == 0, "{key}: {d:?}");
            let ceil_ms = d.reset_after.as_nanos().div_ceil(1_000_000) as i64;
            let ttl = pttl(&mut raw).await;
            assert!(
                ttl > 0 && ttl <= ceil_ms && ceil_ms - ttl < 1_000,
                "{key}: {ttl} ms"
            );
            let d = store
                .apply(algorithm, key, acquire(LeaseId(7)))
                .await
                .unwrap();
            assert!(!d.allowed && d.retry_after.is_some(), "{key}: {d:?}");

            let release = |lease| Op::Release { lease };
            assert!(
                store
                    .apply(algorithm, key, release(b))
                    .await
                    .unwrap()
                    .allowed
            );
            assert!(
                !store
                    .apply(algorithm, key, release(b))
                    .await
                    .unwrap()
                    .allowed
            );
            assert!(
                store
                    .apply(algorithm, key, release(a))
                    .await
                    .unwrap()
                    .allowed
            );
            assert_eq!(pttl(&mut raw).await, -2, "{key}: a fresh state was kept");
        }

        let gcra: AnyAlgorithm = Gcra::new(1, 1, Duration::from_secs(60)).unwrap().into();
        let (conc, fleet) = (&cases[0].0, &cases[1].0);
        assert!(store.apply(&gcra, "k:g", check(1)).await.unwrap().allowed);
        let err = store.apply(conc, "k:g", check(1)).await.unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::StateConflict {
                    algorithm: "concurrency",
                    found: "gcra"
                }
            ),
            "{err}"
        );
        let lease = Op::Acquire {
            lease: a,
            critical: true,
        };
        assert!(store.apply(fleet, "k:l", lease).await.unwrap().allowed);
        let err = store.apply(&gcra, "k:l", check(1)).await.unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::StateConflict {
                    algorithm: "gcra",
                    found: "fleet"
                }
            ),
            "{err}"
        );
        let err = store.apply(conc, "k:l", lease).await.unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::StateConflict {
                    algorithm: "concurrency",
                    found: "fleet"
                }
            ),
            "{err}"
        );
        // Both states are intact.
        assert_eq!(
            store.apply(&gcra, "k:g", check(0)).await.unwrap().remaining,
            1
        );
        assert!(
            !store
                .apply(fleet, "k:l", Op::Release { lease: b })
                .await
                .unwrap()
                .allowed
        );
        assert!(
            store
                .apply(fleet, "k:l", Op::Release { lease: a })
                .await
                .unwrap()
                .allowed
        );
    });
}

#[test]
fn another_algorithms_key_is_a_conflict_and_is_kept() {
    let server = RedisServer::start();
    let rt = runtime();
    rt.block_on(async {
        let store = RedisStore::builder(server.url())
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let gcra: AnyAlgorithm = Gcra::new(1, 1, Duration::from_secs(60)).unwrap().into();
        let fw: AnyAlgorithm = FixedWindow::new(1, Duration::from_secs(60)).unwrap().into();
        assert!(
            store
                .apply(&gcra, "shared:k", check(1))
                .await
                .unwrap()
                .allowed
        );
        let err = store.apply(&fw, "shared:k", check(1)).await.unwrap_err();
        assert!(matches!(
            err,
            StoreError::StateConflict {
                algorithm: "fixed_window",
                found: "gcra"
            }
        ));
        // The GCRA state is intact: one unit of the burst of two is left.
        let d = store.apply(&gcra, "shared:k", check(0)).await.unwrap();
        assert_eq!(d.remaining, 1);

        // A value Floodgate did not write (here a hash) is a conflict for every twin, and kept.
        let mut raw = raw(&server).await;
        let _: () = redis::cmd("HSET")
            .arg(redis_key("foreign"))
            .arg("f")
            .arg("v")
            .query_async(&mut raw)
            .await
            .unwrap();
        let log: AnyAlgorithm = SlidingLog::new(2, Duration::from_secs(60)).unwrap().into();
        let conc: AnyAlgorithm = Concurrency::new(2, Duration::from_secs(60)).unwrap().into();
        for algorithm in [&gcra, &log, &conc] {
            let err = store
                .apply(algorithm, "foreign", check(1))
                .await
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    StoreError::StateConflict {
                        found: "a value Floodgate did not write",
                        ..
                    }
                ),
                "{err}"
            );
        }
        let kind: String = redis::cmd("TYPE")
            .arg(redis_key("foreign"))
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(kind, "hash");
    });
}

/// Operations without a Redis twin, and parameters beyond the twins' exact limits, are refused
/// before anything is sent: here nothing even listens on the port.
#[test]
fn unsupported_is_refused_before_touching_redis() {
    let port = {
        let gone = RedisServer::start();
        gone.port()
    };
    let rt = runtime();
    rt.block_on(async {
        let store = RedisStore::builder(format!("redis://127.0.0.1:{port}"))
            .build()
            .unwrap();
        // A window beyond 2^50 ns (13 days): the twin could not be exact.
        let log: AnyAlgorithm = SlidingLog::new(5, Duration::from_secs(30 * 86_400))
            .unwrap()
            .into();
        assert!(!store.supports(&log));
        let minute: AnyAlgorithm = SlidingLog::new(5, Duration::from_secs(60)).unwrap().into();
        assert!(store.supports(&minute));
        // Filling up takes 2^50 µs and more: beyond the smooth twin's exact range.
        let burst: AnyAlgorithm = SmoothBursty::new(1.0, 2e9).unwrap().into();
        assert!(!store.supports(&burst));
        let err = store.apply(&log, "k", check(1)).await.unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::NotOnStore {
                    store: "redis",
                    algorithm: "sliding_log",
                    ..
                }
            ),
            "{err}"
        );
        let fw: AnyAlgorithm = FixedWindow::new(1, Duration::from_secs(1)).unwrap().into();
        let err = store
            .apply(&fw, "k", Op::Reserve { cost: 1 })
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Unsupported { .. }), "{err}");
        // Beyond the twin's exact range: a window over 2^50 µs (40 years).
        let huge: AnyAlgorithm = FixedWindow::new(1, Duration::from_secs(40 * 365 * 86_400))
            .unwrap()
            .into();
        let err = store.apply(&huge, "k", check(1)).await.unwrap_err();
        assert!(matches!(err, StoreError::NotOnStore { .. }), "{err}");
    });
}

/// Redis killed: every call fails within the timeout; Redis restarted (empty, without the
/// scripts): calls succeed again by themselves, the scripts reloaded after `NOSCRIPT`.
#[test]
fn a_dead_redis_fails_fast_and_a_restarted_one_is_used_again() {
    let mut server = RedisServer::start();
    let rt = runtime();
    let timeout = Duration::from_millis(50);
    let wall = SystemClock::new();
    rt.block_on(async {
        let store = RedisStore::builder(server.url())
            .timeout(timeout)
            .build()
            .unwrap();
        let tb: AnyAlgorithm = TokenBucket::new(10.0, 100).unwrap().into();
        // The first call connects and loads the script: give it a few tries.
        let mut ok = false;
        for _ in 0..100 {
            if store.apply(&tb, "fault:k", check(1)).await.is_ok() {
                ok = true;
                break;
            }
        }
        assert!(ok, "the store never answered");

        server.kill();
        for _ in 0..5 {
            let start = wall.now();
            let result = store.apply(&tb, "fault:k", check(1)).await;
            let took = wall.now().saturating_since(start);
            let err = result.expect_err("Redis is down");
            assert!(err.is_transient(), "{err}");
            assert!(took < timeout + SCHEDULING_SLACK, "took {took:?}");
        }

        server.restart();
        // Waits (boundedly) for the connection to be remade.
        let mut back = None;
        for _ in 0..200 {
            match store.apply(&tb, "fault:k", check(1)).await {
                Ok(d) => {
                    back = Some(d);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(25)).await,
            }
        }
        let d = back.expect("the store works again after the restart");
        // A new, empty Redis: a full bucket minus this request.
        assert_eq!((d.allowed, d.remaining), (true, 99));
    });
}

/// Redis paused (SIGSTOP): the first calls time out within the timeout, then the breaker opens
/// and calls fail at once without touching the network; after the cool-down (on the store's
/// clock) one call probes. Redis resumed (SIGCONT): past the cool-down, calls succeed and the
/// breaker closes.
#[test]
fn the_breaker_opens_on_a_paused_redis_and_closes_when_it_is_back() {
    use floodgate::store::redis::BreakerState;
    let server = RedisServer::start();
    let rt = runtime();
    let timeout = Duration::from_millis(100);
    let cool_down = Duration::from_secs(1);
    let wall = SystemClock::new();
    let clock = ManualClock::new(Nanos(START));
    rt.block_on(async {
        let store = RedisStore::builder(server.url())
            .clock(clock.clone())
            .min_ttl(Duration::from_secs(3600))
            .timeout(timeout)
            .breaker(3, cool_down)
            .build()
            .unwrap();
        let fw: AnyAlgorithm = FixedWindow::new(100, Duration::from_secs(60))
            .unwrap()
            .into();
        // The first call connects and loads the script: give it a few tries.
        let mut ok = false;
        for _ in 0..100 {
            if store.apply(&fw, "breaker:k", check(1)).await.is_ok() {
                ok = true;
                break;
            }
        }
        assert!(ok, "the store never answered");
        assert_eq!(store.breaker_state(), BreakerState::Closed);

        server.signal("STOP");
        for i in 0..3 {
            assert_eq!(store.breaker_state(), BreakerState::Closed, "call {i}");
            let start = wall.now();
            let err = store
                .apply(&fw, "breaker:k", check(1))
                .await
                .expect_err("Redis is paused");
            let took = wall.now().saturating_since(start);
            assert!(
                matches!(err, StoreError::Timeout(t) if t == timeout),
                "{err}"
            );
            assert!(took < timeout + SCHEDULING_SLACK, "took {took:?}");
        }
        // Open: refused by the breaker itself, however often, until the cool-down has passed.
        assert_eq!(store.breaker_state(), BreakerState::Open);
        for _ in 0..100 {
            let err = store.apply(&fw, "breaker:k", check(1)).await.unwrap_err();
            assert!(
                matches!(&err, StoreError::BreakerOpen { failures: 3 }),
                "{err}"
            );
            assert!(err.to_string().contains("circuit breaker open"), "{err}");
        }
        clock.advance(cool_down - Duration::from_millis(1));
        assert_eq!(store.breaker_state(), BreakerState::Open);
        clock.advance(Duration::from_millis(1));
        assert_eq!(store.breaker_state(), BreakerState::HalfOpen);
        // The probe goes to the still paused Redis, times out, and opens the breaker again.
        let err = store.apply(&fw, "breaker:k", check(1)).await.unwrap_err();
        assert!(matches!(err, StoreError::Timeout(_)), "{err}");
        assert_eq!(store.breaker_state(), BreakerState::Open);

        server.signal("CONT");
        // Still open: Redis is not called before the cool-down has passed.
        let err = store.apply(&fw, "breaker:k", check(1)).await.unwrap_err();
        assert!(matches!(err, StoreError::BreakerOpen { .. }), "{err}");
        clock.advance(cool_down);
        // The probe succeeds (a few tries, boundedly, while the connection recovers).
        let mut back = None;
        for _ in 0..50 {
            clock.advance(cool_down);
            if let Ok(d) = store.apply(&fw, "breaker:k", check(1)).await {
                back = Some(d);
                break;
            }
        }
        let d = back.expect("calls succeed again once Redis is back");
        assert!(d.allowed);
        assert_eq!(store.breaker_state(), BreakerState::Closed);
    });
}

/// `apply_many` (one pipeline) gives the decisions the same operations give one by one, for
/// keys of different algorithms (one key twice), also when Redis has lost some or all of the
/// scripts (`NOSCRIPT`: only the calls that did not run are sent again).
#[test]
fn apply_many_in_one_pipeline_agrees_with_one_by_one() {
    use floodgate::store::KeyedOp;
    let server = RedisServer::start();
    let rt = runtime();
    let clock = ManualClock::new(Nanos(START));
    let store = store_on_clock(&rt, &server.url(), &clock);
    rt.block_on(async {
        let mut raw = raw(&server).await;
        let algorithms: [AnyAlgorithm; 4] = [
            Gcra::new(2, 1, Duration::from_secs(1)).unwrap().into(),
            FixedWindow::new(3, Duration::from_secs(10)).unwrap().into(),
            TokenBucket::new(0.5, 4).unwrap().into(),
            Gcra::new(2, 1, Duration::from_secs(1)).unwrap().into(),
        ];
        // The last request uses the first one's key: the pipeline keeps their order.
        let names = ["gcra", "fw", "tb", "gcra"];
        let costs = [1u64, 2, 1, 1];
        let mut denied = false;
        for round in 0..6 {
            let flush = round % 2 == 1;
            if flush {
                let _: () = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query_async(&mut raw)
                    .await
                    .unwrap();
            }
            let one_keys: Vec<String> = names.iter().map(|n| format!("one:{n}")).collect();
            let many_keys: Vec<String> = names.iter().map(|n| format!("many:{n}")).collect();
            // One by one, the first call first: after a flush, only its script is loaded
            // again before the batch, so the batch sees NOSCRIPT for some calls only.
            let mut expected = Vec::new();
            expected.push(
                store
                    .apply(&algorithms[0], one_keys[0].as_str(), check(costs[0]))
                    .await
                    .unwrap(),
            );
            let requests: Vec<KeyedOp<'_, str, AnyAlgorithm>> = (0..4)
                .map(|i| KeyedOp {
                    algorithm: &algorithms[i],
                    key: many_keys[i].as_str(),
                    op: check(costs[i]),
                })
                .collect();
            let got = store.apply_many(&requests).await.unwrap();
            for i in 1..4 {
                expected.push(
                    store
                        .apply(&algorithms[i], one_keys[i].as_str(), check(costs[i]))
                        .await
                        .unwrap(),
                );
            }
            assert_eq!(got, expected, "round {round}");
            denied |= got.iter().any(|d| !d.allowed);
            clock.advance(Duration::from_millis(700));
        }
        assert!(denied, "the comparison covers denials too");
        assert!(store.apply_many(&[]).await.unwrap().is_empty());
    });
}

/// A smooth key's next free instant must stay below 3 × 2⁵¹ µs for the twin to stay exact: a
/// reservation that would push it further (a debt of centuries) is refused by the script with
/// `NotOnStore`, and the key is left as it was.
#[test]
fn a_smooth_debt_beyond_the_exact_range_is_refused_and_changes_nothing() {
    let server = RedisServer::start();
    let rt = runtime();
    rt.block_on(async {
        let clock = ManualClock::new(Nanos(START));
        let store = RedisStore::builder(server.url())
            .clock(clock.clone())
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let mut raw = raw(&server).await;
        let bursty: AnyAlgorithm = SmoothBursty::guava(1.0, 1.0).unwrap().into();
        let d = store
            .apply(&bursty, "debt", Op::Reserve { cost: 2 })
            .await
            .unwrap();
        assert!(d.allowed);
        let get = |raw: &mut redis::aio::MultiplexedConnection| {
            let mut raw = raw.clone();
            async move {
                redis::cmd("GET")
                    .arg(redis_key("debt"))
                    .query_async::<String>(&mut raw)
                    .await
                    .unwrap()
            }
        };
        let before = get(&mut raw).await;
        // 2^60 permits of 1 s each: a debt far beyond 2^53 µs.
        let err = store
            .apply(&bursty, "debt", Op::Reserve { cost: 1 << 60 })
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::NotOnStore {
                    store: "redis",
                    algorithm: "smooth_bursty",
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(get(&mut raw).await, before);
        // The key still works: the first reservation's debt (2 s) is all it owes.
        let d = store.apply(&bursty, "debt", check(1)).await.unwrap();
        assert!(
            !d.allowed && d.retry_after == Some(Duration::from_secs(2)),
            "{d:?}"
        );
    });
}
