#![allow(dead_code)] // each test binary uses a different part
//! The conformance cases every Redis test file runs (a single Redis and a Redis Cluster):
//! random operation sequences give the same decisions from the Lua twins as from the memory
//! store, for every algorithm and the operations it supports. Test files that use it declare
//! `mod redis_common;` too.

use std::time::Duration;

use floodgate::algorithm::concurrency::{Concurrency, Fleet};
use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::gcra::Gcra;
use floodgate::algorithm::leaky_bucket::LeakyBucket;
use floodgate::algorithm::leaky_queue::LeakyQueue;
use floodgate::algorithm::sliding_log::SlidingLog;
use floodgate::algorithm::sliding_window::SlidingWindow;
use floodgate::algorithm::smooth::{BurstyStart, SmoothBursty, SmoothWarmingUp};
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::algorithm::Algorithm;
use floodgate::store::redis::{redis_key, RedisStoreBuilder};
use floodgate::store::{Capabilities, MemoryStore, Store};
use floodgate::{Clock, LeaseId, ManualClock, Nanos, Op, OpKind, StoreError};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::redis_common::{check, store_on_clock, store_on_clock_with, START};

/// An algorithm that runs on Redis, with random small parameters (durations in odd
/// nanoseconds, so that instants off the microsecond grid are exercised).
fn algorithm() -> impl Strategy<Value = AnyAlgorithm> {
    prop_oneof![
        (0u64..20, 1u64..100, 1_000u64..60_000_000_000).prop_map(|(burst, count, period)| {
            Gcra::new(burst, count, Duration::from_nanos(period))
                .unwrap()
                .into()
        }),
        (1u64..30, fixed_window()).prop_map(|(limit, window)| {
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
        // Limits up to 100: logs longer than the twin's first reads (16, then 32 entries).
        (prop_oneof![1u64..30, 30u64..100], window()).prop_map(|(limit, window)| {
            SlidingLog::new(limit, Duration::from_nanos(window))
                .unwrap()
                .into()
        }),
        sliding_window(),
        (
            prop_oneof![
                8 => 0.5f64..1000.0,
                8 => (1u32..200).prop_map(f64::from),
                // Slots of minutes to hours: a queue up to its exact limit.
                1 => 0.001f64..0.01,
            ],
            0u64..10
        )
            .prop_map(|(rate, queue)| LeakyQueue::new(rate, queue).unwrap().into()),
        smooth(),
    ]
}

/// A fixed window (ns): at the scale of the test's steps, or long (Envoy's 30-day month and
/// 365-day year, and odd nanoseconds beyond 2⁵⁰, where the twin finds a window's start by an
/// exact quotient).
fn fixed_window() -> impl Strategy<Value = u64> {
    const DAY: u64 = 86_400_000_000_000;
    prop_oneof![
        8 => 1_000u64..10_000_000_000,
        1 => prop_oneof![Just(30 * DAY), Just(365 * DAY), (1u64 << 50)..(1u64 << 56)],
    ]
}

/// Long fixed windows (a 30-day month, a 365-day year, odd nanoseconds beyond 2⁵⁰ ns) decide
/// on Redis as in memory around their boundaries: just before one, at it, just after, and the
/// next window.
pub fn long_fixed_windows_agree_at_their_boundaries(rt: &tokio::runtime::Runtime, url: &str) {
    const DAY: u64 = 86_400_000_000_000;
    let clock = ManualClock::new(Nanos(START));
    let redis = store_on_clock(rt, url, &clock);
    let memory = MemoryStore::builder().clock(clock.clone()).build().unwrap();
    for (i, window) in [30 * DAY, 365 * DAY, (1 << 50) + 7, (1 << 55) + 123_456_789]
        .into_iter()
        .enumerate()
    {
        let algorithm: AnyAlgorithm = FixedWindow::new(3, Duration::from_nanos(window))
            .unwrap()
            .into();
        // The first boundary after START, in whole microseconds around it.
        let boundary = (START / window + 1) * window;
        let at = boundary / 1000 * 1000;
        let key = format!("long:{i}");
        for (step, instant) in [
            at - 2_000_000,
            at - 1_000,
            at,
            at + 1_000,
            at + 2_000,
            at + window / 2,
            at + window + 1_000,
        ]
        .into_iter()
        .enumerate()
        {
            // Redis takes an explicit clock's instants in whole microseconds.
            let instant = instant / 1000 * 1000;
            clock.set(Nanos(instant));
            for cost in [1, 2, 0] {
                let expected = rt.block_on(memory.apply(&algorithm, key.as_str(), check(cost)));
                let got = rt.block_on(redis.apply(&algorithm, key.as_str(), check(cost)));
                assert_eq!(
                    got.unwrap(),
                    expected.unwrap(),
                    "window {window} ns, step {step} at {instant} ns, cost {cost}"
                );
            }
        }
    }
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
/// nanoseconds (up to 2⁵⁰) and bucket counts (up to 3600) that divide them or not.
fn sliding_window() -> impl Strategy<Value = AnyAlgorithm> {
    let limit = prop_oneof![4 => 1u64..30, 1 => (1u64 << 40)..(1u64 << 50)];
    let buckets = prop_oneof![
        4 => Just(None),
        4 => (1u32..12).prop_map(Some),
        1 => (1u32..=3600).prop_map(Some),
    ];
    // Windows up to the exact limit too (2^50 ns), whose bucket arithmetic is the largest.
    let window = prop_oneof![8 => window(), 1 => (1u64 << 49)..=(1u64 << 50)];
    (limit, window, buckets).prop_map(|(limit, window, buckets)| {
        let buckets = buckets.map(|n| n.min(u32::try_from(window).unwrap_or(u32::MAX)));
        SlidingWindow::new(limit, Duration::from_nanos(window), buckets)
            .unwrap()
            .into()
    })
}

/// Guava's limiters: bursty with no, the default or some burst, starting full or empty; warming
/// up over odd warmups.
fn smooth() -> impl Strategy<Value = AnyAlgorithm> {
    let rate = || prop_oneof![0.5f64..1000.0, (1u32..200).prop_map(f64::from)];
    prop_oneof![
        (
            rate(),
            prop_oneof![Just(0.0), Just(1.0), 0.0f64..10.0],
            prop_oneof![Just(BurstyStart::Full), Just(BurstyStart::Empty)]
        )
            .prop_map(|(rate, burst, start)| {
                SmoothBursty::starting(rate, burst, start).unwrap().into()
            }),
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
        AnyAlgorithm::SlidingWindow(_) => matches!(kind, OpKind::Check | OpKind::Refund),
        // The twins that take refunds and charges.
        AnyAlgorithm::FixedWindow(_)
        | AnyAlgorithm::TokenBucket(_)
        | AnyAlgorithm::LeakyBucket(_)
        | AnyAlgorithm::Gcra(_) => {
            matches!(kind, OpKind::Check | OpKind::Refund | OpKind::Charge)
        }
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

/// An operation: a check of a cost, a refund of one, a charge of one (sometimes far past any
/// limit here), (for leases) an acquire or release of one
/// of a few ids, or (for shapers) a reservation, a try_acquire with a timeout, a set_rate (sometimes refused).
fn op() -> impl Strategy<Value = Op> {
    let lease = (0u64..6).prop_map(|i| LeaseId(u128::from(i) << 100 | 0xabc));
    prop_oneof![
        6 => prop_oneof![6 => 0u64..4, 1 => 0u64..60].prop_map(check),
        4 => (lease.clone(), any::<bool>())
            .prop_map(|(lease, critical)| Op::Acquire { lease, critical }),
        2 => lease.prop_map(|lease| Op::Release { lease }),
        2 => prop_oneof![0u64..4, 0u64..60].prop_map(|cost| Op::Refund { cost }),
        2 => prop_oneof![4 => 0u64..4, 2 => 0u64..60, 1 => 0u64..1_000]
            .prop_map(|cost| Op::Charge { cost }),
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
///
/// `url` is the store's Redis (or Redis Cluster) and `raw` a plain connection to it, for
/// looking at what the store wrote; `rt` runs both. `FLOODGATE_CASES=<n>` runs more cases,
/// `FLOODGATE_TWIN=<algorithm name>` checks that twin only.
pub fn lua_twins_agree_with_the_memory_store<C>(rt: &tokio::runtime::Runtime, url: &str, raw: C)
where
    C: redis::aio::ConnectionLike + Clone + Send + 'static,
{
    lua_twins_agree_with_the_memory_store_with(rt, url, &|b| b, raw)
}

/// [`lua_twins_agree_with_the_memory_store`], the store's builder configured by `configure`
/// (TLS files, say).
pub fn lua_twins_agree_with_the_memory_store_with<C>(
    rt: &tokio::runtime::Runtime,
    url: &str,
    configure: &dyn Fn(RedisStoreBuilder) -> RedisStoreBuilder,
    raw: C,
) where
    C: redis::aio::ConnectionLike + Clone + Send + 'static,
{
    let clock = ManualClock::new(Nanos(START));
    let redis = store_on_clock_with(rt, url, &clock, configure);
    let memory = MemoryStore::builder().clock(clock.clone()).build().unwrap();
    let case = std::sync::atomic::AtomicU64::new(0);
    let seen = std::sync::Mutex::new(std::collections::BTreeSet::new());
    // FLOODGATE_CASES=<n> for a longer run.
    let cases = std::env::var("FLOODGATE_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(192);
    let mut runner = TestRunner::new(Config {
        cases,
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
                seen.lock().unwrap().insert(algorithm.name());
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
    // Every algorithm has a twin, so every one must be in `algorithm()`: a new one left out
    // would pass here untested (192 cases miss one of eleven arms with odds below 10⁻⁷).
    if cases >= 192 && std::env::var("FLOODGATE_TWIN").is_err() {
        let seen = seen.into_inner().unwrap();
        let missing: Vec<_> = AnyAlgorithm::NAMES
            .iter()
            .filter(|name| !seen.contains(*name))
            .collect();
        assert!(missing.is_empty(), "not in algorithm(): {missing:?}");
    }
}

/// One step of a shared limit's claims: which (0 or 1 report, 2 leave), by which node, with
/// which groups (count, demand, margin) and what its clients hold, after how many
/// microseconds.
#[allow(clippy::type_complexity)]
fn claim_steps() -> impl Strategy<Value = Vec<(u8, u8, Vec<(u64, u64, u64)>, u64, u64)>> {
    let group = (
        prop_oneof![1u64..20, Just(1u64 << 21)],
        prop_oneof![0u64..400, Just(u64::MAX)],
        0u64..50,
    );
    prop::collection::vec(
        (
            0u8..3,
            0u8..4,
            prop::collection::vec(group, 0..4),
            prop_oneof![0u64..400, Just(u64::MAX)],
            prop_oneof![0u64..3_000_000, 0u64..25_000_000],
        ),
        1..60,
    )
}

/// The nodes' claims on a shared limit (`floodgate::quota`) kept in Redis by their Lua twin
/// answer as `Claims::apply` does for the same steps at the same whole-microsecond instants:
/// every grant, the sum of demands, the grants in force (those of nodes that left included),
/// the clients and the nodes, after every step. Nodes are named as the service names them
/// (hex digits, of several lengths, so that the order of names matters), and each case claims
/// a limit of its own. `FLOODGATE_CASES=<n>` runs more cases.
pub fn quota_claims_agree_with_their_rust_model(rt: &tokio::runtime::Runtime, url: &str) {
    use floodgate::quota::{ClaimStep, ClaimTerms, Claims, Group};
    let clock = ManualClock::new(Nanos(START));
    let redis = store_on_clock(rt, url, &clock);
    let case = std::sync::atomic::AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        cases: std::env::var("FLOODGATE_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(96),
        failure_persistence: None,
        ..Config::default()
    });
    // First a history random steps seldom take: a shrink counted until the node reports
    // holding less, then both nodes going quiet while what they hold is in force, and one
    // coming back (what it held before is covered by what it reports holding).
    let scripted: [(u8, u8, u64, u64); 7] = [
        (0, 0, 0, 0),
        (0, 1, 0, 1),
        (0, 0, 100, 1),
        (0, 0, 50, 1),
        (0, 1, 0, 0),
        (0, 0, 50, 6),
        (1, 0, 0, 1),
    ];
    let mut model = Claims::new();
    let terms = ClaimTerms {
        capacity: 100,
        ttl: Duration::from_secs(10),
        idle: Duration::from_secs(5),
    };
    let hot = [Group::one(100, 0)];
    let mut now = START;
    let mut in_force = Vec::new();
    for (kind, who, held, after_s) in scripted {
        now += after_s * 1_000_000_000;
        clock.set(Nanos(now));
        let claimant = ["a", "b"][usize::from(who)];
        let step = match kind {
            0 => ClaimStep::Report {
                claimant,
                groups: &hot,
                held,
                wanted: 0,
            },
            _ => ClaimStep::Leave { claimant },
        };
        let expected = model.apply(step, &terms, Nanos(now));
        let got = rt.block_on(redis.claim("conformance scripted", step, &terms));
        assert_eq!(got.unwrap(), expected, "{step:?}");
        in_force.push(expected.in_force);
    }
    assert_eq!(in_force, [100, 100, 100, 50, 100, 100, 100]);
    let terms = (
        prop_oneof![0u64..1_000, Just(1u64 << 41)],
        1u64..20_000_000,
        1u64..30_000_000,
    );
    runner
        .run(
            &(terms, claim_steps()),
            |((capacity, ttl_us, idle_us), steps)| {
                let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let limit = format!("conformance {{limit}} {n}");
                let terms = ClaimTerms {
                    capacity,
                    ttl: Duration::from_micros(ttl_us),
                    idle: Duration::from_micros(idle_us),
                };
                let mut model = Claims::new();
                let mut now = START;
                for (i, (kind, who, groups, held, step_us)) in steps.into_iter().enumerate() {
                    now += step_us * 1000;
                    clock.set(Nanos(now));
                    let claimant = format!("{:x}", u64::from(who) * 0x9e37 + 0xa);
                    let groups: Vec<Group> = groups
                        .into_iter()
                        .map(|(count, demand, margin)| Group {
                            count,
                            demand,
                            margin,
                        })
                        .collect();
                    let step = match kind {
                        0 | 1 => ClaimStep::Report {
                            claimant: &claimant,
                            groups: &groups,
                            held,
                            // Now and then room asked for newcomers.
                            wanted: if kind == 1 { held % 97 } else { 0 },
                        },
                        _ => ClaimStep::Leave {
                            claimant: &claimant,
                        },
                    };
                    let expected = model.apply(step, &terms, Nanos(now));
                    let got = rt
                        .block_on(redis.claim(&limit, step, &terms))
                        .map_err(|e| TestCaseError::fail(format!("step {i}: {e}")))?;
                    prop_assert_eq!(got, expected, "step {}: {:?}", i, step);
                }
                Ok(())
            },
        )
        .unwrap();
}

/// The suite every store runs, whatever it is: for random algorithms (every family), keys
/// and operations at the instants of one manual clock, moving forward, a store that
/// [runs](Capabilities::runs) the algorithm decides exactly as the memory store does, and a
/// store that does not refuses every operation with [`StoreError::NotOnStore`] or
/// [`StoreError::Unsupported`] before anything is applied (and keeps refusing: a refusal
/// changes no state). `make` builds the store under test on `clock`; `rt` runs it.
/// `FLOODGATE_CASES=<n>` runs more cases.
pub fn store_agrees_with_the_memory_store<S>(
    rt: &tokio::runtime::Runtime,
    clock: &ManualClock,
    store: &S,
) where
    S: Store<str, AnyAlgorithm> + Capabilities,
{
    let memory = MemoryStore::builder().clock(clock.clone()).build().unwrap();
    let case = std::sync::atomic::AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        cases: std::env::var("FLOODGATE_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(128),
        failure_persistence: None,
        ..Config::default()
    });
    let every_family = prop_oneof![
        4 => algorithm(),
        1 => sliding_window(),
        1 => smooth(),
        1 => (1u64..30, window()).prop_map(|(limit, window)| {
            SlidingLog::new(limit, Duration::from_nanos(window)).unwrap().into()
        }),
    ];
    runner
        .run(&(every_family, ops()), |(algorithm, ops)| {
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let key = format!("generic-conformance:{}:{n}", std::process::id());
            let runs = store.runs(&algorithm);
            let mut now = clock.now().0;
            for (i, (step_us, op)) in ops.into_iter().enumerate() {
                now = now.saturating_add(step_us.unsigned_abs() * 1000);
                clock.set(Nanos(now));
                let op = op_for(&algorithm, op);
                let got = rt.block_on(store.apply(&algorithm, key.as_str(), op));
                if runs.is_err() {
                    prop_assert!(
                        matches!(
                            got,
                            Err(StoreError::NotOnStore { .. } | StoreError::Unsupported { .. })
                        ),
                        "the {} store refuses {:?} ({:?}) but answered {:?}",
                        store.kind(),
                        algorithm,
                        runs,
                        got
                    );
                    continue;
                }
                let expected = rt.block_on(memory.apply(&algorithm, key.as_str(), op));
                prop_assert_eq!(
                    got,
                    expected,
                    "the {} store on {:?}, op {} at {} ns: {:?}",
                    store.kind(),
                    algorithm,
                    i,
                    now,
                    op
                );
            }
            Ok(())
        })
        .unwrap();
}
