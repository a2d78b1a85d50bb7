//! The Redis store against real `redis-server` processes that the tests start on free loopback
//! ports and stop afterwards (never the shared Redis on 6379).
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
use floodgate::store::{MemoryStore, RedisStore, Store};
use floodgate::{Clock, LeaseId, ManualClock, Nanos, Op, OpKind, StoreError, SystemClock};
use floodgate_redis_harness::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// A plain connection to `server`, to look at what the store wrote.
async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn check(cost: u64) -> Op {
    Op::Check { cost }
}

/// 2024-01-01T00:00:00Z, in nanoseconds: realistic instants, far beyond 2⁵³ ns.
const START: u64 = 1_704_067_200_000_000_000;

/// An algorithm that runs on Redis, with random small parameters (durations in odd
/// nanoseconds, so that instants off the microsecond grid are exercised).
fn algorithm() -> impl Strategy<Value = AnyAlgorithm> {
    prop_oneof![
        (0u64..20, 1u64..100, 1_000u64..60_000_000_000).prop_map(|(burst, count, period)| {
            Gcra::new(burst, count, Duration::from_nanos(period))
                .unwrap()
                .into()
        }),
        (1u64..30, 1_000u64..10_000_000_000).prop_map(|(limit, window)| {
            FixedWindow::new(limit, Duration::from_nanos(window))
                .unwrap()
                .into()
        }),
        (
            prop_oneof![0.5f64..1000.0, (1u32..200).prop_map(f64::from)],
            1u64..50
        )
            .prop_map(|(rate, capacity)| TokenBucket::new(rate, capacity).unwrap().into()),
        (
            prop_oneof![0.5f64..1000.0, (1u32..200).prop_map(f64::from)],
            1u64..50
        )
            .prop_map(|(rate, capacity)| LeakyBucket::new(rate, capacity).unwrap().into()),
        (1u64..6, 1_000u64..30_000_000_000).prop_map(|(capacity, ttl)| {
            Concurrency::new(capacity, Duration::from_nanos(ttl))
                .unwrap()
                .into()
        }),
        (
            1u64..8,
            prop_oneof![Just(0.0), Just(0.5), Just(0.9), Just(1.0), 0.0f64..=1.0],
            1_000u64..30_000_000_000
        )
            .prop_map(|(capacity, reserved, ttl)| {
                Fleet::new(capacity, reserved, Duration::from_nanos(ttl))
                    .unwrap()
                    .into()
            }),
        (1u64..30, window()).prop_map(|(limit, window)| {
            SlidingLog::new(limit, Duration::from_nanos(window))
                .unwrap()
                .into()
        }),
        sliding_window(),
        (
            prop_oneof![0.5f64..1000.0, (1u32..200).prop_map(f64::from)],
            0u64..10
        )
            .prop_map(|(rate, queue)| LeakyQueue::new(rate, queue).unwrap().into()),
        smooth(),
    ]
}

/// A window (ns) at the scale of the test's steps: odd nanoseconds, or whole milliseconds or
/// seconds (whose boundaries the whole-millisecond and whole-second steps hit exactly).
fn window() -> impl Strategy<Value = u64> {
    prop_oneof![
        1_000u64..10_000_000_000,
        1_000u64..5_000_000,
        1u64..3_000,
        (1u64..10_000).prop_map(|ms| ms * 1_000_000),
        (1u64..5).prop_map(|s| s * 1_000_000_000),
    ]
}

/// Both sliding-window modes, with limits small enough to be reached by the costs (and huge
/// ones, whose costs `cost_scale` makes comparable: products far beyond 2⁵³), windows of odd
/// nanoseconds and bucket counts that divide them or not.
fn sliding_window() -> impl Strategy<Value = AnyAlgorithm> {
    let limit = prop_oneof![4 => 1u64..30, 1 => (1u64 << 40)..(1u64 << 50)];
    let buckets = prop_oneof![1 => Just(None), 1 => (1u32..12).prop_map(Some)];
    (limit, window(), buckets).prop_map(|(limit, window, buckets)| {
        let buckets = buckets.map(|n| n.min(u32::try_from(window).unwrap_or(u32::MAX)));
        SlidingWindow::new(limit, Duration::from_nanos(window), buckets)
            .unwrap()
            .into()
    })
}

/// Guava's limiters: bursty with no, the default or some burst; warming up over odd warmups.
fn smooth() -> impl Strategy<Value = AnyAlgorithm> {
    let rate = || prop_oneof![0.5f64..1000.0, (1u32..200).prop_map(f64::from)];
    prop_oneof![
        (rate(), prop_oneof![Just(0.0), Just(1.0), 0.0f64..10.0])
            .prop_map(|(rate, burst)| { SmoothBursty::new(rate, burst).unwrap().into() }),
        (
            rate(),
            1_000u64..20_000_000_000,
            prop_oneof![Just(3.0), 1.0f64..10.0]
        )
            .prop_map(|(rate, warmup, cold)| {
                SmoothWarmingUp::new(rate, Duration::from_nanos(warmup), cold)
                    .unwrap()
                    .into()
            }),
    ]
}

/// A multiplier for check costs: 1, or for the huge sliding-window limits a sixteenth of the
/// limit, so that their costs reach the limit.
fn cost_scale(algorithm: &AnyAlgorithm) -> u64 {
    match algorithm {
        AnyAlgorithm::SlidingWindow(w) if w.limit() > 1 << 30 => w.limit() / 16 + 1,
        _ => 1,
    }
}

/// `op` as sent to `algorithm`: the operations it supports as they are, the others as checks
/// of their cost.
fn op_for(algorithm: &AnyAlgorithm, op: Op) -> Op {
    let kind = op.kind();
    let supported = match algorithm {
        AnyAlgorithm::Concurrency(_) | AnyAlgorithm::Fleet(_) => {
            matches!(kind, OpKind::Check | OpKind::Acquire | OpKind::Release)
        }
        AnyAlgorithm::SmoothBursty(_) | AnyAlgorithm::SmoothWarmingUp(_) => matches!(
            kind,
            OpKind::Check | OpKind::Reserve | OpKind::TryAcquire | OpKind::SetRate
        ),
        AnyAlgorithm::LeakyQueue(_) => matches!(kind, OpKind::Check | OpKind::Reserve),
        _ => kind == OpKind::Check,
    };
    match op {
        Op::Check { cost } => check(cost.saturating_mul(cost_scale(algorithm))),
        _ if supported => op,
        other => check(other.cost()),
    }
}

/// Whether the Lua twin keeps the latest instant its key has seen, as the Rust algorithm does,
/// so that the test may move the clock backwards (every algorithm but the first four).
fn goes_back(algorithm: &AnyAlgorithm) -> bool {
    !matches!(
        algorithm,
        AnyAlgorithm::Gcra(_)
            | AnyAlgorithm::FixedWindow(_)
            | AnyAlgorithm::TokenBucket(_)
            | AnyAlgorithm::LeakyBucket(_)
    )
}

/// An operation: a check of a cost, (for leases) an acquire or release of one of a few ids, or
/// (for shapers) a reservation, a try_acquire with a timeout, a set_rate (sometimes refused).
fn op() -> impl Strategy<Value = Op> {
    let lease = (0u64..6).prop_map(|i| LeaseId(u128::from(i) << 100 | 0xabc));
    prop_oneof![
        6 => prop_oneof![6 => 0u64..4, 1 => 0u64..60].prop_map(check),
        4 => (lease.clone(), any::<bool>())
            .prop_map(|(lease, critical)| Op::Acquire { lease, critical }),
        2 => lease.prop_map(|lease| Op::Release { lease }),
        2 => prop_oneof![0u64..4, 0u64..2_000].prop_map(|cost| Op::Reserve { cost }),
        2 => (0u64..6, 0u64..5_000_000_000).prop_map(|(cost, timeout)| Op::TryAcquire {
            cost,
            timeout: Duration::from_nanos(timeout),
        }),
        1 => prop_oneof![
            4 => 0.5f64..1000.0,
            1 => Just(0.0),
            1 => Just(-1.0),
            1 => Just(f64::NAN),
            1 => Just(f64::INFINITY),
        ]
        .prop_map(|rate| Op::SetRate { rate }),
    ]
}

/// Steps in whole microseconds (0, tiny, up to 20 s, whole milliseconds up to 3 s or
/// seconds up to 4 s, sometimes back up to 5 s) and operations
/// (checks of mostly small costs, sometimes above any limit; acquires and releases).
fn ops() -> impl Strategy<Value = Vec<(i64, Op)>> {
    let step = prop_oneof![
        2 => Just(0i64),
        3 => 0i64..2_000,
        3 => 0i64..20_000_000,
        2 => (0i64..3_000).prop_map(|ms| ms * 1_000),
        1 => (0i64..5).prop_map(|s| s * 1_000_000),
        1 => -5_000_000i64..0,
    ];
    proptest::collection::vec((step, op()), 1..60)
}

/// For the same whole-microsecond instants and operations, the Lua twin on Redis and the Rust
/// algorithm on the memory store give identical decisions. Instants go back only for the
/// algorithms whose Lua twin keeps the latest instant seen, and never before the instant at
/// which Redis last dropped the key as fresh (the documented difference: a dropped key's last
/// instant is forgotten). Each algorithm gets the operations it supports; the others are sent
/// as checks of their cost.
#[test]
fn lua_twins_agree_with_the_memory_store() {
    let server = RedisServer::start();
    let rt = runtime();
    let clock = ManualClock::new(Nanos(START));
    let redis = {
        let _guard = rt.enter();
        RedisStore::builder(server.url())
            .clock(clock.clone())
            .timeout(Duration::from_secs(2))
            .min_ttl(Duration::from_secs(3600))
            .build()
            .unwrap()
    };
    let memory = MemoryStore::builder().clock(clock.clone()).build().unwrap();
    let raw = rt.block_on(raw(&server));
    let case = std::sync::atomic::AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        // FLOODGATE_CASES=<n> for a longer run.
        cases: std::env::var("FLOODGATE_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(192),
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(
            &(algorithm(), 0u64..1_000_000_000, ops()),
            |(algorithm, offset_us, ops)| {
                // FLOODGATE_TWIN=<algorithm name> checks that twin only.
                if std::env::var("FLOODGATE_TWIN").is_ok_and(|name| name != algorithm.name()) {
                    return Ok(());
                }
                let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let key = format!("conformance:{n}");
                let mut now = START + offset_us * 1000;
                let back = goes_back(&algorithm);
                let mut raw = raw.clone();
                let mut floor = now;
                for (i, (step_us, op)) in ops.into_iter().enumerate() {
                    let step_us = if back { step_us } else { step_us.max(0) };
                    now = now.saturating_add_signed(step_us * 1000).max(floor);
                    let op = op_for(&algorithm, op);
                    clock.set(Nanos(now));
                    let expected = rt.block_on(memory.apply(&algorithm, key.as_str(), op));
                    let got = rt.block_on(redis.apply(&algorithm, key.as_str(), op));
                    prop_assert_eq!(
                        got.unwrap(),
                        expected.unwrap(),
                        "{:?}, op {} at {} ns: {:?}",
                        algorithm,
                        i,
                        now,
                        op
                    );
                    let exists: bool = rt
                        .block_on(redis::cmd("EXISTS").arg(&key).query_async(&mut raw))
                        .unwrap();
                    if !exists {
                        floor = now;
                    }
                }
                Ok(())
            },
        )
        .unwrap();
}

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
                .arg(*key)
                .query_async(&mut raw)
                .await
                .unwrap();
            assert!(!exists, "{key}: a probe wrote state");

            let d = store.apply(algorithm, key, check(3)).await.unwrap();
            assert!(d.allowed);
            let pttl: i64 = redis::cmd("PTTL")
                .arg(*key)
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
                .arg(*key)
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
        let cases: [(AnyAlgorithm, &str, Op); 7] = [
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
                "ttl:bursty",
                Op::Reserve { cost: 3 },
            ),
        ];
        let conn = raw.clone();
        let pttl = move |key: &'static str| {
            let mut raw = conn.clone();
            async move {
                redis::cmd("PTTL")
                    .arg(key)
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
                .arg(*key)
                .query_async(&mut raw)
                .await
                .unwrap();
            if kind == "string" {
                let value: String = redis::cmd("GET")
                    .arg(*key)
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
                .arg(*key)
                .query_async(&mut raw)
                .await
                .unwrap();
            assert!(exists, "{key}: kept after the conflict");
        }
    });
}

/// The two sliding-window modes (and two bucket counts) on one key are one algorithm: each
/// treats the other's state as fresh, on Redis as in memory.
#[test]
fn sliding_window_modes_share_a_key_as_in_memory() {
    let server = RedisServer::start();
    let rt = runtime();
    let clock = ManualClock::new(Nanos(START));
    let redis = {
        let _guard = rt.enter();
        RedisStore::builder(server.url())
            .clock(clock.clone())
            .timeout(Duration::from_secs(2))
            .min_ttl(Duration::from_secs(3600))
            .build()
            .unwrap()
    };
    let memory = MemoryStore::builder().clock(clock.clone()).build().unwrap();
    let window = Duration::from_secs(10);
    let modes: [AnyAlgorithm; 3] = [
        SlidingWindow::new(4, window, None).unwrap().into(),
        SlidingWindow::new(4, window, Some(5)).unwrap().into(),
        SlidingWindow::new(4, window, Some(3)).unwrap().into(),
    ];
    for (i, cost) in [3u64, 0, 2, 5, 1, 0, 4, 2, 0, 1].into_iter().enumerate() {
        let algorithm = &modes[i % 3];
        clock.advance(Duration::from_millis(700));
        let expected = rt.block_on(memory.apply(algorithm, "modes", check(cost)));
        let got = rt.block_on(redis.apply(algorithm, "modes", check(cost)));
        assert_eq!(got.unwrap(), expected.unwrap(), "step {i}");
    }
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
                        .arg(*key)
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
        let huge: AnyAlgorithm = FixedWindow::new(1, Duration::from_secs(30 * 86_400))
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
            assert!(took < timeout + Duration::from_millis(25), "took {took:?}");
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
            assert!(took < timeout + Duration::from_millis(50), "took {took:?}");
        }
        // Open: refused by the breaker itself, however often, until the cool-down has passed.
        assert_eq!(store.breaker_state(), BreakerState::Open);
        for _ in 0..100 {
            let err = store.apply(&fw, "breaker:k", check(1)).await.unwrap_err();
            assert!(
                matches!(&err, StoreError::Unavailable(m) if m.contains("circuit breaker")),
                "{err}"
            );
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
        assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
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
    use floodgate::store::Request;
    let server = RedisServer::start();
    let rt = runtime();
    let clock = ManualClock::new(Nanos(START));
    rt.block_on(async {
        let store = RedisStore::builder(server.url())
            .clock(clock.clone())
            .min_ttl(Duration::from_secs(3600))
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
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
            let requests: Vec<Request<'_, str, AnyAlgorithm>> = (0..4)
                .map(|i| Request {
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
