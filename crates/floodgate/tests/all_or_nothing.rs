//! All or nothing means all or nothing: a request refused by any stage — a store stage, or one
//! deciding on this node (the utilization shedder, the adaptive concurrency limit) — leaves
//! every all-or-nothing stage and every level of a hierarchical stage as it was, whatever the
//! pipeline's kinds, order and modes; so does a refusal by a limit stage that fails closed
//! because its key cannot be decided (it holds another algorithm's state). A shadow
//! hierarchical stage's levels count together, as they would enforcing. A property test over random pipelines, on the memory
//! store and on a real Redis (a `redis-server` of the test's own), against a model of what
//! each stage takes.

use std::sync::Arc;
use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::spec::{AnyAlgorithm, AnyState};
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::limiter::adaptive::{Adaptive, AdaptiveConcurrencyLimiter, Gradient2};
use floodgate::limiter::concurrency::ConcurrencyLimiter;
use floodgate::limiter::fleet::FleetShedder;
use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
use floodgate::limiter::utilization::{SettableUtilization, UtilizationShedder};
use floodgate::limiter::{Lease, Priority};
use floodgate::pipeline::scope::KeyTemplate;
use floodgate::pipeline::{Mode, OnStoreError};
use floodgate::pipeline::{Pipeline, Request, Scope, Stage};
use floodgate::store::{Key, MemoryStore, Store};
use floodgate::{ManualClock, Nanos, Op, StoreError};
use proptest::prelude::*;

/// Each limit stage's quota (and its level's): requests per hour.
const QUOTA: u64 = 2;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// A fixed window on `{user}`; `level`: with a second level on `{user}/l`, which makes the
    /// stage all or nothing.
    Limit {
        aon: bool,
        level: bool,
    },
    Concurrency,
    Fleet,
    Utilization,
    Adaptive,
}

#[derive(Clone, Debug)]
struct Case {
    stages: Vec<(Kind, Mode)>,
    /// The stage set up to refuse the request, if any.
    refusing: Option<usize>,
    /// For a refusing limit stage with a level: whether the level is the full one.
    full_level: bool,
    /// For a refusing limit stage: it fails closed, and refuses because its key (or its
    /// level's, with `full_level`) holds another algorithm's state rather than a full window.
    failing: bool,
}

fn case() -> impl Strategy<Value = Case> {
    let kind = prop_oneof![
        4 => (any::<bool>(), any::<bool>()).prop_map(|(aon, level)| Kind::Limit { aon, level }),
        1 => Just(Kind::Concurrency),
        1 => Just(Kind::Fleet),
        1 => Just(Kind::Utilization),
        1 => Just(Kind::Adaptive),
    ];
    let mode = prop_oneof![6 => Just(Mode::Enforce), 1 => Just(Mode::Shadow), 1 => Just(Mode::Off)];
    prop::collection::vec((kind, mode), 1..6)
        .prop_filter("one stage of each node-wide kind", |stages| {
            [Kind::Fleet, Kind::Utilization, Kind::Adaptive]
                .iter()
                .all(|k| stages.iter().filter(|(s, _)| s == k).count() <= 1)
        })
        .prop_flat_map(|stages| {
            let n = stages.len();
            (
                Just(stages),
                prop::option::weighted(0.8, 0..n),
                any::<bool>(),
                any::<bool>(),
            )
        })
        .prop_map(|(stages, refusing, full_level, failing)| Case {
            stages,
            refusing,
            full_level,
            failing,
        })
}

fn window() -> AnyAlgorithm {
    FixedWindow::new(QUOTA, Duration::from_secs(3600))
        .unwrap()
        .into()
}

fn limit<S: Store<str, AnyAlgorithm>>(namespace: &str, store: S) -> RequestRateLimiter<S> {
    RequestRateLimiter::builder()
        .namespace(namespace)
        .plan(Plan::limit("quota", window()).unwrap())
        .default_plan("quota")
        .build(store)
        .unwrap()
}

fn template(text: &str) -> KeyTemplate {
    KeyTemplate::parse(text).unwrap()
}

/// A case's pipeline, its state set up so that the refusing stage (and no other) refuses, and
/// what holds that state (leases kept for the length of the case).
struct Rig<S> {
    pipeline: Pipeline<S>,
    /// Per limit stage (by index): its key and its level's key, as the store writes them.
    limits: Vec<(usize, String, Option<String>)>,
    _held: Vec<Lease>,
}

const USER: &str = "u";

async fn rig<S>(case: &Case, store: S, prefix: &str, clock: &ManualClock) -> Rig<S>
where
    S: Store<str, AnyAlgorithm> + Clone + 'static,
{
    let mut builder = Pipeline::builder();
    let mut limits = Vec::new();
    let mut held = Vec::new();
    for (i, &(kind, mode)) in case.stages.iter().enumerate() {
        let name = format!("{prefix}s{i}");
        let refuses = case.refusing == Some(i);
        let stage = match kind {
            Kind::Limit { aon, level } => {
                let key = format!("{name}:{USER}");
                let level_key = level.then(|| format!("{name}l:{USER}/l"));
                if refuses {
                    let full = match (&level_key, case.full_level) {
                        (Some(level_key), true) => level_key.clone(),
                        _ => key.clone(),
                    };
                    let filler = if case.failing { other() } else { window() };
                    let d = store
                        .apply(&filler, &full, Op::Check { cost: QUOTA })
                        .await
                        .unwrap();
                    assert!(d.allowed);
                }
                limits.push((i, key, level_key));
                let mut stage = Stage::new(limit(&name, store.clone()))
                    .scope(Scope::all().key(template("{user}")))
                    .all_or_nothing(aon);
                if refuses && case.failing {
                    stage = stage.on_store_error(OnStoreError::FailClosed);
                }
                if level {
                    stage = stage.level(
                        template("{user}/l"),
                        limit(&format!("{name}l"), store.clone()),
                    );
                }
                stage
            }
            Kind::Concurrency => {
                let limiter = ConcurrencyLimiter::builder()
                    .namespace(&name)
                    .capacity(1)
                    .lease_ttl(Duration::from_secs(3600))
                    .build(store.clone())
                    .unwrap();
                if refuses {
                    held.push(limiter.acquire(USER).await.unwrap().lease.expect("a place"));
                }
                Stage::new(limiter)
            }
            Kind::Fleet => {
                let shedder = FleetShedder::builder()
                    .namespace(&name)
                    .capacity(1)
                    .reserved_for_critical(0.0)
                    .lease_ttl(Duration::from_secs(3600))
                    .build(store.clone())
                    .unwrap();
                if refuses {
                    held.push(
                        shedder
                            .acquire(false)
                            .await
                            .unwrap()
                            .lease
                            .expect("a place"),
                    );
                }
                Stage::new(shedder)
            }
            Kind::Utilization => {
                let load = Arc::new(SettableUtilization::new(0.0));
                let shedder = UtilizationShedder::builder()
                    .name(&name)
                    .sample_interval(Duration::ZERO)
                    .source(load.clone())
                    .clock(Arc::new(clock.clone()))
                    .build()
                    .unwrap();
                if refuses {
                    // Long enough at full utilization that test-mode traffic is all shed.
                    load.set(1.0);
                    for _ in 0..4 {
                        shedder.check(Priority::Test);
                        clock.advance(Duration::from_secs(28));
                    }
                    shedder.check(Priority::Test);
                }
                Stage::new(shedder)
            }
            Kind::Adaptive => {
                let adaptive = AdaptiveConcurrencyLimiter::builder()
                    .name(&name)
                    .algorithm(Adaptive::Gradient2(Gradient2 {
                        initial_limit: 1.0,
                        min_limit: 1.0,
                        ..Gradient2::default()
                    }))
                    .clock(Arc::new(clock.clone()))
                    .build()
                    .unwrap();
                if refuses {
                    held.push(adaptive.try_acquire().lease.expect("a place"));
                }
                Stage::new(adaptive)
            }
        };
        builder = builder.stage(stage.mode(mode));
    }
    Rig {
        pipeline: builder.build().unwrap(),
        limits,
        _held: held,
    }
}

/// Another algorithm than the stages': its state on a stage's key makes that key fail.
fn other() -> AnyAlgorithm {
    TokenBucket::new(1.0, QUOTA).unwrap().into()
}

/// What is left under `key` of its quota (a read-only probe); `None` when the key holds
/// [`other`]'s state.
async fn left<S: Store<str, AnyAlgorithm>>(store: &S, key: &str) -> Option<u64> {
    match store.apply(&window(), key, Op::Check { cost: 0 }).await {
        Ok(d) => Some(d.remaining),
        Err(StoreError::StateConflict { .. }) => None,
        Err(e) => panic!("probing {key}: {e}"),
    }
}

/// Runs `case` on `store`: one request, then every limit stage's keys against the model.
async fn run_case<S>(
    case: &Case,
    store: S,
    prefix: &str,
    clock: &ManualClock,
) -> Result<(), TestCaseError>
where
    S: Store<str, AnyAlgorithm> + Clone + 'static,
{
    let rig = rig(case, store.clone(), prefix, clock).await;
    let mut before = Vec::new();
    for (_, key, level) in &rig.limits {
        let level_left = match level {
            Some(level) => Some(left(&store, level).await),
            None => None,
        };
        before.push((left(&store, key).await, level_left));
    }
    let verdict = rig
        .pipeline
        .evaluate(&Request::new(USER, "quota", Priority::Test))
        .await;
    // The model: the refusing stage refuses when it enforces; a shadow one lets it through.
    let refused_at = case.refusing.filter(|&i| case.stages[i].1 == Mode::Enforce);
    let refusal = verdict
        .refusal
        .as_ref()
        .map(|r| r.stage.as_str().to_string());
    prop_assert_eq!(
        refusal,
        refused_at.map(|i| format!("{prefix}s{i}")),
        "{:?}",
        verdict
    );
    for ((i, key, level), (was, level_was)) in rig.limits.iter().zip(before) {
        let (kind, mode) = case.stages[*i];
        let Kind::Limit {
            aon,
            level: has_level,
        } = kind
        else {
            unreachable!()
        };
        let aon = aon || has_level;
        // What the request takes from one of this stage's keys, `full` when the case filled
        // it: an off stage is not run, a denial takes nothing, and a refused request takes
        // nothing from the stages at and after the refusal, nor from all-or-nothing ones.
        // A shadow stage that refuses lets the request on, but its levels decide together,
        // as enforcing: a full level leaves the other as it was. (A level that fails lets
        // the other take, as failing open would.)
        let refusing = case.refusing == Some(*i);
        let shadow_refused = refusing && has_level && mode == Mode::Shadow && !case.failing;
        let took = |full: bool| -> u64 {
            let refused_here = refused_at.is_some_and(|k| *i >= k || aon);
            u64::from(mode != Mode::Off && !full && !refused_here && !shadow_refused)
        };
        let level_full = refusing && has_level && case.full_level;
        let now = left(&store, key).await;
        prop_assert_eq!(
            now,
            was.map(|was| was.saturating_sub(took(refusing && !level_full))),
            "stage {} ({:?}) key {}",
            i,
            kind,
            key
        );
        if let (Some(level), Some(level_was)) = (level, level_was) {
            let now = left(&store, level).await;
            prop_assert_eq!(
                now,
                level_was.map(|was| was.saturating_sub(took(level_full))),
                "stage {} level {}",
                i,
                level
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_refused_request_leaves_every_all_or_nothing_stage_as_it_was_on_memory(case in case()) {
        let clock = ManualClock::new(Nanos::from_secs(1_000));
        let store: Arc<MemoryStore<Key, AnyState, ManualClock>> =
            Arc::new(MemoryStore::builder().clock(clock.clone()).build_typed().unwrap());
        floodgate::blocking::block_on(run_case(&case, store, "", &clock))?;
    }
}

#[cfg(feature = "redis")]
mod redis_common;

#[cfg(feature = "redis")]
#[test]
fn a_refused_request_leaves_every_all_or_nothing_stage_as_it_was_on_redis() {
    use floodgate_harness::RedisServer;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let server = RedisServer::start();
    let rt = redis_common::runtime();
    let clock = ManualClock::new(Nanos(redis_common::START));
    let store = redis_common::store_on_clock(&rt, &server.url(), &clock);
    let cases = AtomicUsize::new(0);
    // The cases each part of the script's undoing was written for, then random ones.
    let limit = |aon, level, mode| (Kind::Limit { aon, level }, mode);
    let fixed = [
        // A failing fail-closed stage after an all-or-nothing one.
        Case {
            stages: vec![
                limit(true, false, Mode::Enforce),
                limit(false, false, Mode::Enforce),
            ],
            refusing: Some(1),
            full_level: false,
            failing: true,
        },
        // A shadow hierarchical stage whose first, then second level is full.
        Case {
            stages: vec![
                limit(false, false, Mode::Enforce),
                limit(false, true, Mode::Shadow),
            ],
            refusing: Some(1),
            full_level: false,
            failing: false,
        },
        Case {
            stages: vec![
                limit(false, true, Mode::Shadow),
                limit(true, false, Mode::Enforce),
            ],
            refusing: Some(0),
            full_level: true,
            failing: false,
        },
    ];
    for case in &fixed {
        let prefix = format!("c{}", cases.fetch_add(1, Ordering::Relaxed));
        if let Err(e) = rt.block_on(run_case(case, store.clone(), &prefix, &clock)) {
            panic!("{case:?}: {e}");
        }
    }
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(128));
    runner
        .run(&case(), |case| {
            // Each case in namespaces of its own.
            let prefix = format!("c{}", cases.fetch_add(1, Ordering::Relaxed));
            rt.block_on(run_case(&case, store.clone(), &prefix, &clock))
        })
        .unwrap();
}
