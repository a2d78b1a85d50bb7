//! The pipeline end to end on the memory store: order, modes, failure policies, refusals,
//! leases under concurrency.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use floodgate::algorithm::spec::{AnyAlgorithm, AnyState};
use floodgate::limiter::concurrency::ConcurrencyLimiter;
use floodgate::limiter::fleet::FleetShedder;
use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
use floodgate::limiter::utilization::{
    ControllerSettings, SettableUtilization, UtilizationShedder,
};
use floodgate::limiter::{LimiterKind, Mode, OnStoreError, Priority};
use floodgate::pipeline::{Descriptor, Pipeline, Verdict};
use floodgate::store::{MemoryStore, Request, Store};
use floodgate::{Decision, ManualClock, Nanos, Op, StoreError};
use proptest::prelude::*;

type Mem = MemoryStore<String, AnyState, ManualClock>;

/// The real memory store, with a switch that makes it fail as a store that went down would,
/// and one that makes it answer a poll late, as a remote store does.
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
        requests: &[Request<'_, str, AnyAlgorithm>],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        let result = requests
            .iter()
            .map(|r| self.store.apply_now(r.algorithm, r.key, r.op))
            .collect();
        std::future::ready(result)
    }
}

fn poll<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("the memory store answers at once"),
    }
}

struct Rig {
    pipeline: Pipeline<Switchable>,
    clock: ManualClock,
    down: Arc<AtomicBool>,
    slow: Arc<AtomicBool>,
    utilization: Arc<SettableUtilization>,
}

fn rig(concurrency: u64, fleet: u64, reserved: f64) -> Rig {
    let clock = ManualClock::new(Nanos::from_secs(1_000));
    let down = Arc::new(AtomicBool::new(false));
    let slow = Arc::new(AtomicBool::new(false));
    let store = || Switchable {
        store: MemoryStore::builder()
            .clock(clock.clone())
            .build()
            .expect("valid store"),
        down: down.clone(),
        slow: slow.clone(),
    };
    let utilization = Arc::new(SettableUtilization::new(0.0));
    let ttl = Duration::from_secs(60);
    let pipeline = Pipeline::builder()
        .request_rate(RequestRateLimiter::new(Plan::examples(), "free", store()).unwrap())
        .concurrency(ConcurrencyLimiter::new(concurrency, ttl, store()).unwrap())
        .fleet(FleetShedder::new(fleet, reserved, ttl, store()).unwrap())
        .utilization(
            UtilizationShedder::new(
                ControllerSettings::default(),
                Duration::ZERO,
                1,
                utilization.clone(),
                Arc::new(clock.clone()),
            )
            .unwrap(),
        )
        .build();
    Rig {
        pipeline,
        clock,
        down,
        slow,
        utilization,
    }
}

fn get(user: &str) -> Descriptor<'_> {
    Descriptor::new(user, "free", Priority::Get)
}

fn in_flight(rig: &Rig, kind: LimiterKind, key: &str) -> u64 {
    let (algorithm, store) = match kind {
        LimiterKind::Concurrency => {
            let c = rig.pipeline.concurrency().unwrap();
            (c.algorithm(), c.store())
        }
        _ => {
            let f = rig.pipeline.fleet().unwrap();
            (f.algorithm(), f.store())
        }
    };
    let probe = store
        .store
        .apply_now(algorithm, key, Op::Check { cost: 0 })
        .unwrap();
    probe.limit - probe.remaining
}

#[test]
fn a_rate_refusal_is_actionable() {
    let rig = rig(1000, 100_000, 0.2);
    let mut last = Verdict::default();
    for _ in 0..101 {
        last = poll(rig.pipeline.evaluate(&get("alice")));
    }
    let refusal = last
        .refusal
        .as_ref()
        .expect("the 101st request in a burst is refused");
    assert_eq!(refusal.limiter, LimiterKind::RequestRate);
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
            ("ratelimit-policy", "\"requests\";q=50;w=1".to_string()),
            ("ratelimit", "\"requests\";r=0;t=1".to_string()),
        ]
    );
    assert!(last.leases.is_empty());
    // Other users are not affected.
    assert!(poll(rig.pipeline.evaluate(&get("bob"))).allowed());
    assert_eq!(rig.pipeline.stats().refused, [1, 0, 0, 0]);
}

#[test]
fn leases_are_held_while_the_request_runs_and_given_back_after() {
    let rig = rig(2, 100, 0.0);
    let a = poll(rig.pipeline.evaluate(&get("u")));
    let b = poll(rig.pipeline.evaluate(&get("u")));
    assert!(a.allowed() && b.allowed());
    assert_eq!(a.leases.len(), 2, "a concurrency lease and a fleet lease");
    let c = poll(rig.pipeline.evaluate(&get("u")));
    let refusal = c.refusal.as_ref().unwrap();
    assert_eq!(refusal.limiter, LimiterKind::Concurrency);
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
    assert_eq!(in_flight(&rig, LimiterKind::Fleet, "fleet"), 2);
    drop(a);
    assert_eq!(in_flight(&rig, LimiterKind::Concurrency, "u"), 1);
    assert!(poll(rig.pipeline.evaluate(&get("u"))).allowed());
}

#[test]
fn a_later_refusal_gives_back_earlier_leases() {
    // Fleet: 10 places, 50% reserved: 5 non-critical at most.
    let rig = rig(100, 10, 0.5);
    let held: Vec<Verdict> = (0..5)
        .map(|i| poll(rig.pipeline.evaluate(&get(&format!("user{i}")))))
        .collect();
    assert!(held.iter().all(Verdict::allowed));
    let refused = poll(rig.pipeline.evaluate(&get("late")));
    assert_eq!(
        refused.refusal.as_ref().unwrap().limiter,
        LimiterKind::Fleet
    );
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()[0], ("retry-after", "1".to_string()));
    // The concurrency lease "late" took was returned when the fleet refused.
    assert_eq!(in_flight(&rig, LimiterKind::Concurrency, "late"), 0);
    // Critical requests still get through, beyond the non-critical allowance.
    for i in 0..20 {
        let user = format!("vip{i}");
        let v = poll(
            rig.pipeline
                .evaluate(&Descriptor::new(&user, "pro", Priority::Critical)),
        );
        assert!(v.allowed(), "critical request {i} refused: {:?}", v.refusal);
    }
}

#[test]
fn shadow_mode_counts_and_reports_but_lets_through_and_off_skips() {
    let rig = rig(1, 100, 0.0);
    rig.pipeline
        .set_mode(LimiterKind::Concurrency, Mode::Shadow);
    let first = poll(rig.pipeline.evaluate(&get("u")));
    let second = poll(rig.pipeline.evaluate(&get("u")));
    assert!(first.allowed() && second.allowed());
    assert_eq!(second.shadow_refusals, [LimiterKind::Concurrency]);
    assert_eq!(rig.pipeline.stats().shadow_refused[1], 1);
    assert_eq!(rig.pipeline.stats().refused, [0; 4]);
    // The refused-in-shadow request took no concurrency lease, only a fleet lease.
    assert_eq!(second.leases.len(), 1);
    rig.pipeline.set_mode(LimiterKind::Concurrency, Mode::Off);
    assert_eq!(rig.pipeline.mode(LimiterKind::Concurrency), Some(Mode::Off));
    let third = poll(rig.pipeline.evaluate(&get("u")));
    assert!(third.allowed() && third.shadow_refusals.is_empty());
    rig.pipeline
        .set_mode(LimiterKind::Concurrency, Mode::Enforce);
    assert!(!poll(rig.pipeline.evaluate(&get("u"))).allowed());
}

#[test]
fn a_store_outage_fails_open_by_default_and_closed_when_asked() {
    let rig = rig(1, 100, 0.0);
    rig.down.store(true, Ordering::SeqCst);
    let v = poll(rig.pipeline.evaluate(&get("u")));
    assert!(v.allowed());
    assert_eq!(
        v.fail_opens,
        [
            LimiterKind::RequestRate,
            LimiterKind::Concurrency,
            LimiterKind::Fleet
        ]
    );
    assert_eq!(rig.pipeline.stats().fail_open, [1, 1, 1, 0]);

    let closed = Rig {
        pipeline: {
            let clock = ManualClock::new(Nanos::ZERO);
            let store = Switchable {
                store: MemoryStore::builder().clock(clock).build().unwrap(),
                down: rig.down.clone(),
                slow: rig.slow.clone(),
            };
            Pipeline::builder()
                .request_rate(RequestRateLimiter::new(Plan::examples(), "free", store).unwrap())
                .on_store_error(LimiterKind::RequestRate, OnStoreError::FailClosed)
                .build()
        },
        clock: rig.clock.clone(),
        down: rig.down.clone(),
        slow: rig.slow.clone(),
        utilization: rig.utilization.clone(),
    };
    let v = poll(closed.pipeline.evaluate(&get("u")));
    assert_eq!(v.status(), 503);
    assert!(v
        .refusal
        .unwrap()
        .message
        .contains("cannot reach its store"));
    rig.down.store(false, Ordering::SeqCst);
    assert!(poll(closed.pipeline.evaluate(&get("u"))).allowed());
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
    assert_eq!(in_flight(&rig, LimiterKind::Concurrency, "u"), 1);
    assert_eq!(in_flight(&rig, LimiterKind::Fleet, "fleet"), 1);
    drop(evaluation);
    assert_eq!(in_flight(&rig, LimiterKind::Concurrency, "u"), 0);
    assert_eq!(in_flight(&rig, LimiterKind::Fleet, "fleet"), 0);
    // Polled to the end, a slow store gives the same verdict as a fast one.
    let mut evaluation = Box::pin(rig.pipeline.evaluate(&request));
    let verdict = loop {
        if let std::task::Poll::Ready(v) = evaluation.as_mut().poll(&mut cx) {
            break v;
        }
    };
    assert!(verdict.allowed());
    assert_eq!(verdict.leases.len(), 2);
}

#[test]
fn expired_leases_are_reclaimed() {
    let rig = rig(1, 100, 0.0);
    let held = poll(rig.pipeline.evaluate(&get("crashy")));
    // The caller crashes: its leases are never returned.
    for lease in held.leases {
        lease.keep();
    }
    assert!(!poll(rig.pipeline.evaluate(&get("crashy"))).allowed());
    rig.clock.advance(Duration::from_secs(60));
    assert!(poll(rig.pipeline.evaluate(&get("crashy"))).allowed());
}

#[test]
fn kept_leases_are_released_by_id() {
    let rig = rig(1, 100, 0.0);
    let v = poll(rig.pipeline.evaluate(&get("svc")));
    let mut kept = Vec::new();
    for lease in v.leases {
        let key = lease.key().to_string();
        kept.push((key, lease.keep()));
    }
    let (key, id) = &kept[0];
    assert!(poll(rig.pipeline.release(LimiterKind::Concurrency, key, *id)).unwrap());
    assert!(!poll(rig.pipeline.release(LimiterKind::Concurrency, key, *id)).unwrap());
    assert_eq!(in_flight(&rig, LimiterKind::Concurrency, "svc"), 0);
}

#[test]
fn utilization_sheds_test_mode_first_and_never_critical() {
    let rig = rig(1_000_000, 1_000_000, 0.0);
    rig.utilization.set(1.0);
    // 28 s of overload from rest, then 40 s more: test mode is fully shed.
    for t in 0..=68 {
        rig.clock.set(Nanos::from_secs(2_000 + t));
        let _ = poll(
            rig.pipeline
                .evaluate(&Descriptor::new("c", "pro", Priority::Critical)),
        );
    }
    let test = poll(
        rig.pipeline
            .evaluate(&Descriptor::new("t", "pro", Priority::Test)),
    );
    let refusal = test.refusal.as_ref().expect("test mode is shed");
    assert_eq!(refusal.limiter, LimiterKind::Utilization);
    assert!(
        refusal.message.contains("shedding test requests"),
        "{}",
        refusal.message
    );
    assert!(poll(
        rig.pipeline
            .evaluate(&Descriptor::new("p", "pro", Priority::Post))
    )
    .allowed());
    assert!(poll(
        rig.pipeline
            .evaluate(&Descriptor::new("c", "pro", Priority::Critical))
    )
    .allowed());
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
                rig.pipeline.set_mode(LimiterKind::Fleet, mode);
                std::thread::yield_now();
            }
            rig.pipeline.set_mode(LimiterKind::Fleet, Mode::Enforce);
        })
    };
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (rig, holding) = (rig.clone(), holding.clone());
            std::thread::spawn(move || {
                for i in 0..3_000 {
                    let v = poll(rig.pipeline.evaluate(&Descriptor::new(
                        "shared",
                        "pro",
                        Priority::Get,
                    )));
                    if v.allowed()
                        && rig.pipeline.mode(LimiterKind::Concurrency) == Some(Mode::Enforce)
                    {
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
    assert_eq!(in_flight(&rig, LimiterKind::Concurrency, "shared"), 0);
    assert_eq!(in_flight(&rig, LimiterKind::Fleet, "fleet"), 0);
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
            let v = poll(rig.pipeline.evaluate(&Descriptor::new(&user, "pro", priority)));
            if priority == Priority::Critical {
                let by_shedder = v.refusal.as_ref().map(|r| matches!(r.limiter, LimiterKind::Fleet | LimiterKind::Utilization));
                prop_assert_ne!(by_shedder, Some(true));
            }
            if keep {
                held.push(v);
            } else if held.len() > 4 {
                held.remove(0);
            }
        }
    }
}
