//! The conformance cases both Redis test files run (a single Redis and a Redis Cluster): random
//! operation sequences, the same decisions from the Lua twins as from the memory store.

use std::time::Duration;

use floodgate::algorithm::concurrency::{Concurrency, Fleet};
use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::gcra::Gcra;
use floodgate::algorithm::leaky_bucket::LeakyBucket;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::store::redis::redis_key;
use floodgate::store::{MemoryStore, RedisStore, Store};
use floodgate::{LeaseId, ManualClock, Nanos, Op};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// 2024-01-01T00:00:00Z, in nanoseconds: realistic instants, far beyond 2⁵³ ns.
pub const START: u64 = 1_704_067_200_000_000_000;

fn check(cost: u64) -> Op {
    Op::Check { cost }
}

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
    ]
}

fn is_lease(algorithm: &AnyAlgorithm) -> bool {
    matches!(
        algorithm,
        AnyAlgorithm::Concurrency(_) | AnyAlgorithm::Fleet(_)
    )
}

/// An operation: a check of a cost, or (for leases) an acquire or release of one of a few ids.
fn op() -> impl Strategy<Value = Op> {
    let lease = (0u64..6).prop_map(|i| LeaseId(u128::from(i) << 100 | 0xabc));
    prop_oneof![
        6 => prop_oneof![6 => 0u64..4, 1 => 0u64..60].prop_map(check),
        4 => (lease.clone(), any::<bool>())
            .prop_map(|(lease, critical)| Op::Acquire { lease, critical }),
        2 => lease.prop_map(|lease| Op::Release { lease }),
    ]
}

/// Steps in whole microseconds (0, tiny, up to 20 s, sometimes back up to 5 s) and operations
/// (checks of mostly small costs, sometimes above any limit; acquires and releases).
fn ops() -> impl Strategy<Value = Vec<(i64, Op)>> {
    let step = prop_oneof![
        2 => Just(0i64),
        3 => 0i64..2_000,
        3 => 0i64..20_000_000,
        1 => -5_000_000i64..0,
    ];
    proptest::collection::vec((step, op()), 1..60)
}

/// For the same whole-microsecond instants and operations, the Lua twin on Redis and the Rust
/// algorithm on the memory store give identical decisions. Instants only go back for the lease
/// algorithms (whose Lua twin keeps the latest instant seen), and never before the instant at
/// which Redis last dropped the key as fresh (the documented difference: a dropped key's last
/// instant is forgotten). Acquires and releases are only sent to the lease algorithms, other
/// algorithms get them as checks of their cost.
///
/// `url` is the store's Redis (or Redis Cluster) and `raw` a plain connection to it, for
/// looking at what the store wrote; `rt` runs both.
pub fn lua_twins_agree_with_the_memory_store<C>(rt: &tokio::runtime::Runtime, url: &str, raw: C)
where
    C: redis::aio::ConnectionLike + Clone + Send + 'static,
{
    let clock = ManualClock::new(Nanos(START));
    let redis = {
        let _guard = rt.enter();
        RedisStore::builder(url)
            .clock(clock.clone())
            .timeout(Duration::from_secs(2))
            .min_ttl(Duration::from_secs(3600))
            .build()
            .unwrap()
    };
    let memory = MemoryStore::builder().clock(clock.clone()).build().unwrap();
    let case = std::sync::atomic::AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(
            &(algorithm(), 0u64..1_000_000_000, ops()),
            |(algorithm, offset_us, ops)| {
                let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let key = format!("conformance:{n}");
                let mut now = START + offset_us * 1000;
                let lease = is_lease(&algorithm);
                let mut raw = raw.clone();
                let mut floor = now;
                for (i, (step_us, op)) in ops.into_iter().enumerate() {
                    let step_us = if lease { step_us } else { step_us.max(0) };
                    now = now.saturating_add_signed(step_us * 1000).max(floor);
                    let op = if lease { op } else { check(op.cost()) };
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
                        .block_on(
                            redis::cmd("EXISTS")
                                .arg(redis_key(&key))
                                .query_async(&mut raw),
                        )
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
