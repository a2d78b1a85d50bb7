//! The pipeline end to end on the memory store: order, modes, failure policies, refusals,
//! leases under concurrency.

use floodgate::store::LocalStore;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::sliding_log::SlidingLog;
use floodgate::algorithm::spec::{AnyAlgorithm, AnyState};
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::limiter::concurrency::ConcurrencyLimiter;
use floodgate::limiter::fleet::FleetShedder;
use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
use floodgate::limiter::utilization::{SettableUtilization, UtilizationShedder};
use floodgate::limiter::{KeyedLimit, Lease, LeaseHandle, LimiterKind, Priority};
use floodgate::pipeline::{
    Limiter, LimiterState, Pipeline, ReleaseError, Request, Stage, StageStats, Verdict,
};
use floodgate::pipeline::{Mode, OnStoreError};
use floodgate::store::{self, Key, MemoryStore, Namespace, Store};
use floodgate::{Decision, LeaseId, ManualClock, Nanos, Op, StoreError};
use proptest::prelude::*;

type Mem = MemoryStore<Key, AnyState, ManualClock>;

/// The real memory store, with a switch that makes it fail as a store that went down would,
/// and one that makes it answer a poll late, as a remote store does.
#[derive(Debug)]
struct Switchable {
    store: Mem,
    down: Arc<AtomicBool>,
    slow: Arc<AtomicBool>,
}

/// A future that is pending on its first poll (waking itself), then ready.
struct Late<T> {
    value: Option<T>,
    waited: bool,
}

impl<T: Unpin> Future for Late<T> {
    type Output = T;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<T> {
        if !self.waited {
            self.waited = true;
            cx.waker().wake_by_ref();
            return std::task::Poll::Pending;
        }
        std::task::Poll::Ready(self.value.take().expect("polled after completion"))
    }
}

impl Store<str, AnyAlgorithm> for Switchable {
    fn apply(
        &self,
        algorithm: &AnyAlgorithm,
        key: &str,
        op: Op,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        let result = if self.down.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable("connection refused".into()))
        } else {
            self.store.apply_now(algorithm, key, op)
        };
        Late {
            value: Some(result),
            waited: !self.slow.load(Ordering::SeqCst),
        }
    }

    /// As a remote store sends a detached operation in the background.
    fn apply_detached(&self, algorithm: &AnyAlgorithm, key: &str, op: Op) {
        if !self.down.load(Ordering::SeqCst) {
            let _ = self.store.apply_now(algorithm, key, op);
        }
    }

    fn apply_many(
        &self,
        requests: &[store::KeyedOp<'_, str, AnyAlgorithm>],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        let result = requests
            .iter()
            .map(|r| self.store.apply_now(r.algorithm, r.key, r.op))
            .collect();
        std::future::ready(result)
    }
}

struct Rig {
    pipeline: Pipeline<Arc<Switchable>>,
    store: Arc<Switchable>,
    clock: ManualClock,
    down: Arc<AtomicBool>,
    slow: Arc<AtomicBool>,
    utilization: Arc<SettableUtilization>,
}

/// Stripe's four limiters on one shared store, each in its own namespace.
fn rig(concurrency: u64, fleet: u64, reserved: f64) -> Rig {
    let clock = ManualClock::new(Nanos::from_secs(1_000));
    let down = Arc::new(AtomicBool::new(false));
    let slow = Arc::new(AtomicBool::new(false));
    let store = Arc::new(Switchable {
        store: MemoryStore::builder()
            .clock(clock.clone())
            .build()
            .expect("valid store"),
        down: down.clone(),
        slow: slow.clone(),
    });
    let utilization = Arc::new(SettableUtilization::new(0.0));
    let ttl = Duration::from_secs(60);
    let pipeline = Pipeline::stripe(
        RequestRateLimiter::builder()
            .plans(Plan::examples())
            .default_plan("free")
            .build(store.clone())
            .unwrap(),
        ConcurrencyLimiter::builder()
            .capacity(concurrency)
            .lease_ttl(ttl)
            .build(store.clone())
            .unwrap(),
        FleetShedder::builder()
            .capacity(fleet)
            .reserved_for_critical(reserved)
            .lease_ttl(ttl)
            .build(store.clone())
            .unwrap(),
        UtilizationShedder::builder()
            .sample_interval(Duration::ZERO)
            .seed(1)
            .source(utilization.clone())
            .clock(Arc::new(clock.clone()))
            .build()
            .unwrap(),
    )
    .unwrap();
    Rig {
        pipeline,
        store,
        clock,
        down,
        slow,
        utilization,
    }
}

fn get(user: &str) -> Request<'_> {
    Request::new(user, "free", Priority::Get)
}

/// Requests in flight on `key` of the stage `stage`, read from the store itself.
fn in_flight(rig: &Rig, stage: &str, key: &str) -> u64 {
    let algorithm = match rig.pipeline.stage(stage).unwrap().limiter() {
        Limiter::Concurrency(c) => c.algorithm(),
        Limiter::Fleet(f) => f.algorithm(),
        other => panic!("{other:?} takes no leases"),
    };
    let key = format!("{stage}:{key}");
    let probe = rig
        .store
        .store
        .apply_now(algorithm, key.as_str(), Op::Check { cost: 0 })
        .unwrap();
    probe.limit - probe.remaining
}

fn stats(rig: &Rig, stage: &str) -> StageStats {
    rig.pipeline.stage(stage).unwrap().stats()
}

#[test]
fn a_rate_refusal_is_actionable() {
    let rig = rig(1000, 100_000, 0.2);
    let first = rig.pipeline.evaluate_blocking(&get("alice"));
    // Plan free: 50/s with bursts of 100, announced as the burst over the 2 s that earn it back,
    // so what is left (99) is never above the quota.
    assert_eq!(
        first.headers(),
        [
            ("ratelimit-policy", "\"requests\";q=100;w=2".to_string()),
            ("ratelimit", "\"requests\";r=99;t=1".to_string()),
        ]
    );
    let mut last = first;
    for _ in 1..101 {
        last = rig.pipeline.evaluate_blocking(&get("alice"));
    }
    let refusal = last
        .refusal
        .as_ref()
        .expect("the 101st request in a burst is refused");
    assert_eq!(refusal.stage, "request_rate");
    assert_eq!(refusal.kind, LimiterKind::RequestRate);
    assert_eq!(last.status(), 429);
    assert_eq!(
        refusal.message,
        "plan free allows 50 requests per second; retry in 0.02 s"
    );
    assert_eq!(refusal.retry_after, Some(Duration::from_millis(20)));
    assert_eq!(
        last.headers(),
        [
            ("retry-after", "1".to_string()),
            ("ratelimit-policy", "\"requests\";q=100;w=2".to_string()),
            ("ratelimit", "\"requests\";r=0;t=1".to_string()),
        ]
    );
    assert!(last.leases.is_empty());
    // Other users are not affected.
    assert!(rig.pipeline.evaluate_blocking(&get("bob")).allowed());
    let refused: Vec<u64> = rig.pipeline.stats().iter().map(|s| s.refused).collect();
    assert_eq!(refused, [1, 0, 0, 0]);
}

#[test]
fn leases_are_held_while_the_request_runs_and_given_back_after() {
    let rig = rig(2, 100, 0.0);
    let a = rig.pipeline.evaluate_blocking(&get("u"));
    let b = rig.pipeline.evaluate_blocking(&get("u"));
    assert!(a.allowed() && b.allowed());
    assert_eq!(a.leases.len(), 2, "a concurrency lease and a fleet lease");
    let c = rig.pipeline.evaluate_blocking(&get("u"));
    let refusal = c.refusal.as_ref().unwrap();
    assert_eq!(refusal.kind, LimiterKind::Concurrency);
    assert_eq!(c.status(), 429);
    assert!(
        refusal
            .message
            .contains("user u already has 2 requests in flight"),
        "{}",
        refusal.message
    );
    assert!(c.headers().contains(&(
        "ratelimit-policy",
        "\"concurrency\";q=2;qu=\"concurrent-requests\"".into()
    )));
    assert_eq!(in_flight(&rig, "fleet", "fleet"), 2);
    drop(a);
    assert_eq!(in_flight(&rig, "concurrency", "u"), 1);
    assert!(rig.pipeline.evaluate_blocking(&get("u")).allowed());
}

#[test]
fn a_later_refusal_gives_back_earlier_leases() {
    // Fleet: 10 places, 50% reserved: 5 non-critical at most.
    let rig = rig(100, 10, 0.5);
    let held: Vec<Verdict> = (0..5)
        .map(|i| rig.pipeline.evaluate_blocking(&get(&format!("user{i}"))))
        .collect();
    assert!(held.iter().all(Verdict::allowed));
    let refused = rig.pipeline.evaluate_blocking(&get("late"));
    assert_eq!(refused.refusal.as_ref().unwrap().stage, "fleet");
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()[0], ("retry-after", "1".to_string()));
    // The concurrency lease "late" took was returned when the fleet refused.
    assert_eq!(in_flight(&rig, "concurrency", "late"), 0);
    // Critical requests still get through, beyond the non-critical allowance.
    for i in 0..20 {
        let user = format!("vip{i}");
        let v = rig
            .pipeline
            .evaluate_blocking(&Request::new(&user, "pro", Priority::Critical));
        assert!(v.allowed(), "critical request {i} refused: {:?}", v.refusal);
    }
}

#[test]
fn shadow_mode_counts_and_reports_but_lets_through_and_off_skips() {
    let rig = rig(1, 100, 0.0);
    assert!(rig.pipeline.set_mode("concurrency", Mode::Shadow));
    let first = rig.pipeline.evaluate_blocking(&get("u"));
    let second = rig.pipeline.evaluate_blocking(&get("u"));
    assert!(first.allowed() && second.allowed());
    assert_eq!(second.shadow_refusals, ["concurrency"]);
    assert_eq!(stats(&rig, "concurrency").shadow_refused, 1);
    assert!(rig.pipeline.stats().iter().all(|s| s.refused == 0));
    // The refused-in-shadow request took no concurrency lease, only a fleet lease.
    assert_eq!(second.leases.len(), 1);
    rig.pipeline.set_mode("concurrency", Mode::Off);
    assert_eq!(rig.pipeline.mode("concurrency"), Some(Mode::Off));
    let third = rig.pipeline.evaluate_blocking(&get("u"));
    assert!(third.allowed() && third.shadow_refusals.is_empty());
    rig.pipeline.set_mode("concurrency", Mode::Enforce);
    assert!(!rig.pipeline.evaluate_blocking(&get("u")).allowed());
    assert!(!rig.pipeline.set_mode("nope", Mode::Off));
    assert_eq!(rig.pipeline.mode("nope"), None);
}

/// A pipeline built to replace another (a reload) goes on counting where each stage of the
/// same name and kind left off, and what runs on the old one still counts; a stage new to it
/// starts at 0.
#[test]
fn a_replacing_pipeline_goes_on_counting() {
    let rig = rig(10, 100, 0.0);
    for _ in 0..3 {
        assert!(rig.pipeline.evaluate_blocking(&get("u")).allowed());
    }
    let concurrency = |namespace: &str| {
        ConcurrencyLimiter::builder()
            .namespace(namespace)
            .capacity(5)
            .lease_ttl(Duration::from_secs(60))
            .build(rig.store.clone())
            .unwrap()
    };
    let next = Pipeline::builder()
        .limiter(concurrency("concurrency"))
        .limiter(concurrency("per_user"))
        .counting_on_from(&rig.pipeline)
        .build()
        .unwrap();
    let counted = |p: &Pipeline<_>, stage| p.stage(stage).unwrap().stats().decided;
    assert_eq!(counted(&next, "concurrency"), 3);
    assert_eq!(counted(&next, "per_user"), 0);
    assert!(next.evaluate_blocking(&get("v")).allowed());
    assert!(rig.pipeline.evaluate_blocking(&get("w")).allowed());
    assert_eq!(counted(&next, "concurrency"), 5);
    assert_eq!(counted(&rig.pipeline, "concurrency"), 5);
    assert_eq!(counted(&next, "per_user"), 1);
}

#[test]
fn a_store_outage_fails_open_by_default_and_closed_when_asked() {
    let rig = rig(1, 100, 0.0);
    rig.down.store(true, Ordering::SeqCst);
    let v = rig.pipeline.evaluate_blocking(&get("u"));
    assert!(v.allowed());
    assert_eq!(v.fail_opens, ["request_rate", "concurrency", "fleet"]);
    let fail_open: Vec<u64> = rig.pipeline.stats().iter().map(|s| s.fail_open).collect();
    assert_eq!(fail_open, [1, 1, 1, 0]);

    let closed = Pipeline::builder()
        .stage(
            Stage::new(
                RequestRateLimiter::builder()
                    .plans(Plan::examples())
                    .build(rig.store.clone())
                    .unwrap(),
            )
            .on_store_error(OnStoreError::FailClosed),
        )
        .build()
        .unwrap();
    let v = closed.evaluate_blocking(&get("u"));
    assert_eq!(v.status(), 503);
    assert!(v
        .refusal
        .unwrap()
        .message
        .contains("cannot reach its store"));
    assert_eq!(closed.stats()[0].fail_closed, 1);
    rig.down.store(false, Ordering::SeqCst);
    assert!(closed.evaluate_blocking(&get("u")).allowed());
}

/// With the `local` policy a stage whose store is down decides on the node's own memory store
/// at the node's share of its limits (here 1/5 of a bucket of 20 and of 10 places in flight),
/// and its leases are given back there; once the store is back, it counts there again.
#[test]
fn a_store_outage_decides_locally_at_the_nodes_share() {
    let rig = rig(1, 100, 0.0);
    let rate = RequestRateLimiter::builder()
        .plan(Plan::token_bucket("all", 0.001, 20).unwrap())
        .build(rig.store.clone())
        .unwrap();
    let concurrency = ConcurrencyLimiter::builder()
        .capacity(10)
        .build(rig.store.clone())
        .unwrap();
    let local = Pipeline::builder()
        .stage(Stage::new(rate).on_store_error(OnStoreError::Local))
        .stage(Stage::new(concurrency).on_store_error(OnStoreError::Local))
        .nodes(5)
        .local_clock(Arc::new(rig.clock.clone()))
        .build()
        .unwrap();
    rig.down.store(true, Ordering::SeqCst);
    let first = local.evaluate_blocking(&get("u"));
    let second = local.evaluate_blocking(&get("u"));
    assert!(first.allowed() && second.allowed());
    assert!(first.fail_opens.is_empty());
    // The third request finds the node's two places taken (and took its third token).
    let third = local.evaluate_blocking(&get("u"));
    assert_eq!(
        third.refusal.as_ref().unwrap().stage.as_str(),
        "concurrency"
    );
    // A lease kept as a handle is given back locally by the pipeline.
    let handle = first.leases.into_iter().next().unwrap().keep();
    assert!(local.release_blocking(&handle).unwrap());
    let fourth = local.evaluate_blocking(&get("u"));
    assert!(fourth.allowed());
    // The node's share of the bucket, 4 tokens, is used up.
    let fifth = local.evaluate_blocking(&get("u"));
    assert_eq!(
        fifth.refusal.as_ref().unwrap().stage.as_str(),
        "request_rate"
    );
    let locally: Vec<u64> = local.stats().iter().map(|s| s.decided_locally).collect();
    assert_eq!(locally, [5, 4]);
    // The bucket still refuses while the store is down.
    drop((second, fourth));
    let sixth = local.evaluate_blocking(&get("u"));
    assert_eq!(
        sixth.refusal.as_ref().unwrap().stage.as_str(),
        "request_rate"
    );
    assert_eq!(local.stats()[1].decided_locally, 4);
    // The store is back: counting there again (its bucket is full).
    rig.down.store(false, Ordering::SeqCst);
    assert!(local.evaluate_blocking(&get("u")).allowed());
    assert_eq!(local.stats()[0].decided_locally, 6);
}

#[test]
fn a_cancelled_evaluation_gives_back_the_leases_it_took() {
    let rig = rig(1, 100, 0.0);
    rig.slow.store(true, Ordering::SeqCst);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    // Poll until the concurrency lease is taken and the fleet's store has granted one whose
    // answer is still on its way, then drop the future, as a client that disconnects makes a
    // server do.
    let request = get("u");
    let mut evaluation = Box::pin(rig.pipeline.evaluate(&request));
    for _ in 0..3 {
        assert!(evaluation.as_mut().poll(&mut cx).is_pending());
    }
    assert_eq!(in_flight(&rig, "concurrency", "u"), 1);
    assert_eq!(in_flight(&rig, "fleet", "fleet"), 1);
    drop(evaluation);
    assert_eq!(in_flight(&rig, "concurrency", "u"), 0);
    assert_eq!(in_flight(&rig, "fleet", "fleet"), 0);
    // Run to the end (the blocking facade parks and polls again), a slow store gives the same
    // verdict as a fast one.
    let verdict = rig.pipeline.evaluate_blocking(&request);
    assert!(verdict.allowed());
    assert_eq!(verdict.leases.len(), 2);
}

#[test]
fn expired_leases_are_reclaimed() {
    let rig = rig(1, 100, 0.0);
    let held = rig.pipeline.evaluate_blocking(&get("crashy"));
    // The caller crashes: its leases are never returned.
    for lease in held.leases {
        let _ = lease.keep();
    }
    assert!(!rig.pipeline.evaluate_blocking(&get("crashy")).allowed());
    rig.clock.advance(Duration::from_secs(60));
    assert!(rig.pipeline.evaluate_blocking(&get("crashy")).allowed());
}

/// A lease records the stage that issued it, so users whose names look like other keys
/// (`fleet`, the fleet shedder's own key) or hold any characters get their places back.
#[test]
fn kept_leases_go_back_to_the_stage_that_issued_them_whatever_the_user() {
    let rig = rig(1, 100, 0.0);
    for user in ["svc", "fleet", "a.b.c", "request_rate:x", "é ü/..:{}", ""] {
        let v = rig.pipeline.evaluate_blocking(&get(user));
        assert!(v.allowed(), "{user:?}: {:?}", v.refusal);
        let kept: Vec<LeaseHandle> = v.leases.into_iter().map(Lease::keep).collect();
        let stages: Vec<&str> = kept.iter().map(|h| h.limiter().as_str()).collect();
        assert_eq!(stages, ["concurrency", "fleet"]);
        assert_eq!(kept[0].key(), user);
        assert_eq!(in_flight(&rig, "concurrency", user), 1);
        assert!(!rig.pipeline.evaluate_blocking(&get(user)).allowed());
        for handle in &kept {
            assert!(rig.pipeline.release_blocking(handle).unwrap(), "{handle:?}");
            assert!(
                !rig.pipeline.release_blocking(handle).unwrap(),
                "released twice"
            );
        }
        assert_eq!(in_flight(&rig, "concurrency", user), 0, "{user:?}");
        assert_eq!(in_flight(&rig, "fleet", "fleet"), 0, "{user:?}");
    }
    // A guessed id on a real stage releases nothing; an unknown stage is an error.
    let v = rig.pipeline.evaluate_blocking(&get("victim"));
    let real = v.leases.into_iter().next().unwrap().keep();
    let guess = LeaseHandle::new(real.limiter().clone(), "victim", LeaseId(real.id().0 ^ 1));
    assert!(!rig.pipeline.release_blocking(&guess).unwrap());
    assert_eq!(in_flight(&rig, "concurrency", "victim"), 1);
    let elsewhere = LeaseHandle::new(Namespace::new("other").unwrap(), "victim", real.id());
    assert!(matches!(
        rig.pipeline.release_blocking(&elsewhere),
        Err(ReleaseError::UnknownLimiter(_))
    ));
    let not_leasing =
        LeaseHandle::new(Namespace::new("request_rate").unwrap(), "victim", real.id());
    assert!(rig.pipeline.release_blocking(&not_leasing).is_err());
    assert!(rig.pipeline.release_blocking(&real).unwrap());
}

#[test]
fn utilization_sheds_test_mode_first_and_never_critical() {
    let rig = rig(1_000_000, 1_000_000, 0.0);
    rig.utilization.set(1.0);
    // 28 s of overload from rest, then 40 s more: test mode is fully shed.
    for t in 0..=68 {
        rig.clock.set(Nanos::from_secs(2_000 + t));
        let _ = rig
            .pipeline
            .evaluate_blocking(&Request::new("c", "pro", Priority::Critical));
    }
    let test = rig
        .pipeline
        .evaluate_blocking(&Request::new("t", "pro", Priority::Test));
    let refusal = test.refusal.as_ref().expect("test mode is shed");
    assert_eq!(refusal.kind, LimiterKind::Utilization);
    assert!(
        refusal.message.contains("shedding test requests"),
        "{}",
        refusal.message
    );
    let post = Request::new("p", "pro", Priority::Post);
    assert!(rig.pipeline.evaluate_blocking(&post).allowed());
    let critical = Request::new("c", "pro", Priority::Critical);
    assert!(rig.pipeline.evaluate_blocking(&critical).allowed());
}

/// Any number of stages, of any kinds, in any order, with their own statuses: here two request
/// rate limits of different algorithms on the same users of one store, which keep separate
/// counts because each has its own namespace.
#[test]
fn stages_are_a_list_and_limits_on_one_key_keep_separate_counts() {
    let rig = rig(1, 1, 0.0);
    let per_second = RequestRateLimiter::builder()
        .plan(Plan::token_bucket("all", 10.0, 10).unwrap())
        .namespace("per_second")
        .build(rig.store.clone())
        .unwrap();
    let window = AnyAlgorithm::from(SlidingLog::new(3, Duration::from_secs(3600)).unwrap());
    let per_hour = RequestRateLimiter::builder()
        .plan(Plan::new("all", window).unwrap())
        .namespace("per_hour")
        .build(rig.store.clone())
        .unwrap();
    let pipeline = Pipeline::builder()
        .stage(Stage::new(per_second))
        .stage(Stage::new(per_hour).status(403))
        .build()
        .unwrap();
    let names: Vec<&str> = pipeline.stages().map(|s| s.name().as_str()).collect();
    assert_eq!(names, ["per_second", "per_hour"]);
    for _ in 0..3 {
        assert!(pipeline.evaluate_blocking(&get("u")).allowed());
    }
    let fourth = pipeline.evaluate_blocking(&get("u"));
    let refusal = fourth.refusal.unwrap();
    assert_eq!((refusal.stage.as_str(), refusal.status), ("per_hour", 403));
    // The per-second bucket counted its own four (it ran before the per-hour stage refused
    // the fourth), untouched by the per-hour log's state under the same user: six left of ten.
    rig.clock.advance(Duration::from_millis(1));
    let probe = rig.store.store.apply_now(
        &AnyAlgorithm::from(TokenBucket::new(10.0, 10).unwrap()),
        "per_second:u",
        Op::Check { cost: 0 },
    );
    assert_eq!(probe.unwrap().remaining, 6);

    // Duplicate names and statuses that are not errors are refused with the value.
    let twice = Pipeline::builder()
        .limiter(
            ConcurrencyLimiter::builder()
                .capacity(1)
                .build(rig.store.clone())
                .unwrap(),
        )
        .limiter(
            ConcurrencyLimiter::builder()
                .capacity(2)
                .build(rig.store.clone())
                .unwrap(),
        )
        .build()
        .unwrap_err();
    assert!(twice.to_string().contains("concurrency"), "{twice}");
    let ok_status = Pipeline::builder()
        .stage(
            Stage::new(
                ConcurrencyLimiter::builder()
                    .capacity(1)
                    .build(rig.store.clone())
                    .unwrap(),
            )
            .status(200),
        )
        .build()
        .unwrap_err();
    assert!(ok_status.to_string().contains("200"), "{ok_status}");
}

/// Two limiters of different algorithms given the same namespace would overwrite each other's
/// state; the store refuses instead, with an error that names both, and the state survives.
#[test]
fn a_state_of_another_algorithm_is_a_typed_error_not_a_reset() {
    let store = Arc::new(MemoryStore::new());
    let bucket =
        KeyedLimit::new("shared", TokenBucket::new(1.0, 2).unwrap(), store.clone()).unwrap();
    let window = KeyedLimit::new(
        "shared",
        FixedWindow::new(100, Duration::from_secs(60)).unwrap(),
        store.clone(),
    )
    .unwrap();
    assert!(bucket.check_blocking("k", 2).unwrap().allowed);
    let err = window.check_blocking("k", 1).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::StateConflict {
                algorithm: "fixed_window",
                found: "token_bucket"
            }
        ),
        "{err}"
    );
    // The bucket was not reset: it is still empty.
    assert!(!bucket.check_blocking("k", 1).unwrap().allowed);
    // In a pipeline, the conflict is a store error: it fails open (and is counted).
    let per_user = RequestRateLimiter::builder()
        .plan(
            Plan::new(
                "p",
                FixedWindow::new(1, Duration::from_secs(60)).unwrap().into(),
            )
            .unwrap(),
        )
        .namespace("shared")
        .build(store.clone())
        .unwrap();
    let pipeline = Pipeline::builder().limiter(per_user).build().unwrap();
    let v = pipeline.evaluate_blocking(&get("k"));
    assert!(v.allowed());
    assert_eq!(v.fail_opens, ["shared"]);
}

/// Two limits of the same algorithm with different parameters in one store: when a full shard
/// is swept for room, a state is judged by the parameters that wrote it, so the sweep of one
/// limit never drops a key the other still counts on (its user would get a whole new burst).
#[test]
fn a_sweep_never_drops_another_limits_live_key() {
    let clock = ManualClock::new(Nanos::from_secs(1_000));
    let store = Arc::new(
        MemoryStore::builder()
            .clock(clock.clone())
            .shards(1)
            .max_keys(4)
            .overflow(floodgate::store::Overflow::RefuseNew)
            .build()
            .unwrap(),
    );
    let big = KeyedLimit::new("big", TokenBucket::new(1.0, 100).unwrap(), store.clone()).unwrap();
    let small =
        KeyedLimit::new("small", TokenBucket::new(1.0, 10).unwrap(), store.clone()).unwrap();
    // 50 of 100 tokens left: not fresh for `big`, though 50 would fill `small`'s bucket.
    assert_eq!(big.check_blocking("a", 50).unwrap().remaining, 50);
    for key in ["k1", "k2", "k3"] {
        assert!(small.check_blocking(key, 1).unwrap().allowed);
    }
    // The shard is full; room is sought by a sweep with `small`'s parameters: nothing is fresh
    // for it, so the new key is refused rather than `big`'s key dropped.
    assert!(!small.check_blocking("k4", 1).unwrap().allowed);
    assert_eq!(store.stats().refused_new, 1);
    assert_eq!(store.stats().evicted_idle, 0);
    assert_eq!(big.check_blocking("a", 1).unwrap().remaining, 49);
    // Once `big`'s key is full again, a sweep by `big` itself may drop it.
    clock.advance(std::time::Duration::from_secs(60));
    assert_eq!(store.sweep(big.algorithm()), 1);
}

#[test]
fn snapshots_show_every_stage_without_reaching_into_limiters() {
    let rig = rig(3, 10, 0.2);
    let held = rig.pipeline.evaluate_blocking(&get("u"));
    let snapshot = floodgate::blocking::block_on(rig.pipeline.snapshot());
    let names: Vec<&str> = snapshot.iter().map(|s| s.stats.name.as_str()).collect();
    assert_eq!(
        names,
        ["request_rate", "concurrency", "fleet", "utilization"]
    );
    assert!(snapshot.iter().all(|s| s.mode == Mode::Enforce));
    let statuses: Vec<u16> = snapshot.iter().map(|s| s.status).collect();
    assert_eq!(statuses, [429, 429, 503, 503]);
    match &snapshot[0].state {
        LimiterState::RequestRate {
            plans,
            default_plan,
        } => {
            assert_eq!(default_plan, "free");
            let names: Vec<&str> = plans.iter().map(|p| p.name.as_str()).collect();
            assert_eq!(names, ["free", "pro", "standard"]);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        snapshot[1].state,
        LimiterState::Concurrency { capacity: 3, .. }
    ));
    assert!(matches!(
        snapshot[2].state,
        LimiterState::Fleet {
            capacity: 10,
            non_critical_allowance: 8,
            in_flight: Some(1)
        }
    ));
    assert!(matches!(
        snapshot[3].state,
        LimiterState::Utilization { .. }
    ));
    drop(held);
}

#[test]
fn many_threads_never_exceed_the_bounds_and_every_lease_comes_back() {
    const CAPACITY: u64 = 4;
    let rig = Arc::new(rig(CAPACITY, 6, 0.0));
    let holding = Arc::new(AtomicI64::new(0));
    let flips = {
        let rig = rig.clone();
        std::thread::spawn(move || {
            // Switch modes while traffic flows: no lease may be lost or double-counted.
            for i in 0..2_000 {
                let mode = [Mode::Enforce, Mode::Shadow, Mode::Off][i % 3];
                rig.pipeline.set_mode("fleet", mode);
                std::thread::yield_now();
            }
            rig.pipeline.set_mode("fleet", Mode::Enforce);
        })
    };
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (rig, holding) = (rig.clone(), holding.clone());
            std::thread::spawn(move || {
                for i in 0..3_000 {
                    let v = rig.pipeline.evaluate_blocking(&Request::new(
                        "shared",
                        "pro",
                        Priority::Get,
                    ));
                    if v.allowed() && rig.pipeline.mode("concurrency") == Some(Mode::Enforce) {
                        let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                        assert!(now <= CAPACITY as i64, "{now} requests in flight");
                        if i % 7 == 0 {
                            std::thread::yield_now();
                        }
                        holding.fetch_sub(1, Ordering::SeqCst);
                    }
                    drop(v);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("no bound was exceeded");
    }
    flips.join().unwrap();
    assert_eq!(in_flight(&rig, "concurrency", "shared"), 0);
    assert_eq!(in_flight(&rig, "fleet", "fleet"), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Neither shedder ever refuses a critical request, whatever the traffic and load.
    #[test]
    fn critical_is_never_refused_by_a_shedder(
        events in prop::collection::vec((0u8..4, 0.0f64..1.0, 0u64..5_000, any::<bool>()), 1..300)
    ) {
        let rig = rig(1_000_000, 3, 0.34);
        let mut held = Vec::new();
        let mut t = 0;
        for (class, utilization, step_ms, keep) in events {
            t += step_ms;
            rig.clock.set(Nanos::from_millis(2_000_000 + t));
            rig.utilization.set(utilization);
            let priority = [Priority::Critical, Priority::Post, Priority::Get, Priority::Test][class as usize];
            let user = format!("u{class}");
            let v = rig.pipeline.evaluate_blocking(&Request::new(&user, "pro", priority));
            if priority == Priority::Critical {
                let by_shedder = v.refusal.as_ref().map(|r| matches!(r.kind, LimiterKind::Fleet | LimiterKind::Utilization));
                prop_assert_ne!(by_shedder, Some(true));
            }
            if keep {
                held.push(v);
            } else if held.len() > 4 {
                let _ = held.remove(0);
            }
        }
    }
}
