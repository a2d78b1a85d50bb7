//! The worker utilization load shedder's controller: how much traffic to shed, and from whom,
//! given a stream of utilization samples.
//!
//! Stripe's rule, with its constants as defaults: each sample `u` (busy workers /
//! workers, clamped to 0..=1) sets a derivative
//! - `u / end_of_good − 1` below `end_of_good` (0.7): recovering, faster the idler we are;
//! - `0` in the dead zone `end_of_good..start_of_bad` (0.7–0.8): hold;
//! - `(u − start_of_bad) / (1 − start_of_bad)` from `start_of_bad` (0.8) up: shed more;
//!
//! clamped to −1..=1 and divided by `seconds_to_shed_all` (120 s). The shed amount then moves by
//! `derivative × min(seconds since the previous sample, seconds_before_shedding)` and is clamped
//! to `[resting, 1]`, where `resting = −seconds_before_shedding / seconds_to_shed_all`
//! (−28/120 ≈ −0.233): from rest, 28 s of full overload pass before anything is shed, and
//! nothing ever changes faster than 1/120 of all traffic per second, so shedding and recovery
//! are gradual and do not flap.
//!
//! The controller starts at rest; the first sample only starts its clock; each later sample
//! applies its own derivative over the time since the previous sample (a clock that went
//! backwards counts as no time). Classes are shed in order, each over a third of the range,
//! with `s = max(shed_amount, 0)`: test mode `clamp(3s, 0, 1)`, GET `clamp(3s − 1, 0, 1)`,
//! POST `clamp(3s − 2, 0, 1)`, critical never.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::limiter::{Lease, LeaseHandle};
use crate::store::Namespace;
use crate::{Clock, ConfigError, Nanos};

pub mod workers;
pub use workers::{BusyWorker, WorkerGauge};

/// How important a request is to the load shedders, least important last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Priority {
    /// Must get through (creating charges, moving money): never shed.
    Critical,
    /// Writes: shed last of the sheddable classes.
    Post,
    /// Reads: shed after test mode.
    Get,
    /// Test-mode traffic: shed first.
    Test,
}

impl Priority {
    /// The name used in specs, traces and metrics: `critical`, `post`, `get`, `test`.
    pub fn name(self) -> &'static str {
        match self {
            Priority::Critical => "critical",
            Priority::Post => "post",
            Priority::Get => "get",
            Priority::Test => "test",
        }
    }

    /// Parses [`Priority::name`]'s output (case-insensitive).
    pub fn from_name(name: &str) -> Option<Priority> {
        [
            Priority::Critical,
            Priority::Post,
            Priority::Get,
            Priority::Test,
        ]
        .into_iter()
        .find(|p| p.name().eq_ignore_ascii_case(name))
    }
}

/// The controller's constants; [`Default`] gives Stripe's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ControllerSettings {
    /// Below this utilization the shed amount decreases (default 0.7).
    pub end_of_good: f64,
    /// From this utilization up the shed amount increases (default 0.8).
    pub start_of_bad: f64,
    /// Seconds of full overload, from rest, before anything is shed; also the longest gap
    /// between samples that counts (default 28).
    pub seconds_before_shedding: f64,
    /// Seconds of full overload to go from shedding nothing to shedding all (default 120).
    pub seconds_to_shed_all: f64,
}

impl Default for ControllerSettings {
    fn default() -> Self {
        ControllerSettings {
            end_of_good: 0.7,
            start_of_bad: 0.8,
            seconds_before_shedding: 28.0,
            seconds_to_shed_all: 120.0,
        }
    }
}

impl ControllerSettings {
    /// Checks `0 < end_of_good ≤ start_of_bad < 1` and positive finite durations.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.end_of_good > 0.0 && self.end_of_good < 1.0) {
            return Err(ConfigError::invalid(
                "end_of_good",
                self.end_of_good,
                "must be above 0 and below 1",
            ));
        }
        if !(self.start_of_bad >= self.end_of_good && self.start_of_bad < 1.0) {
            return Err(ConfigError::invalid(
                "start_of_bad",
                self.start_of_bad,
                "must be at least end_of_good and below 1",
            ));
        }
        for (field, value) in [
            ("seconds_before_shedding", self.seconds_before_shedding),
            ("seconds_to_shed_all", self.seconds_to_shed_all),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(ConfigError::invalid(
                    field,
                    value,
                    "must be a number of seconds above 0",
                ));
            }
        }
        Ok(())
    }

    /// The amount the controller rests at: `−seconds_before_shedding / seconds_to_shed_all`.
    pub fn resting_amount(&self) -> f64 {
        -self.seconds_before_shedding / self.seconds_to_shed_all
    }
}

/// The shed controller's state: a pure function of its samples (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct ShedController {
    settings: ControllerSettings,
    shed_amount: f64,
    last_sample: Option<Nanos>,
    last_utilization: Option<f64>,
}

impl ShedController {
    /// A controller at rest.
    pub fn new(settings: ControllerSettings) -> Result<ShedController, ConfigError> {
        settings.validate()?;
        Ok(ShedController {
            shed_amount: settings.resting_amount(),
            settings,
            last_sample: None,
            last_utilization: None,
        })
    }

    /// The constants in use.
    pub fn settings(&self) -> &ControllerSettings {
        &self.settings
    }

    /// The derivative (shed amount per second) a utilization sample sets.
    pub fn derivative(&self, utilization: f64) -> f64 {
        let s = &self.settings;
        let u = clamp_utilization(utilization);
        let amount = if u < s.end_of_good {
            u / s.end_of_good - 1.0
        } else if u < s.start_of_bad {
            0.0
        } else {
            (u - s.start_of_bad) / (1.0 - s.start_of_bad)
        };
        amount.clamp(-1.0, 1.0) / s.seconds_to_shed_all
    }

    /// Takes a utilization sample at `now` and returns the new shed amount. Utilization is
    /// clamped to 0..=1; a NaN sample counts as 1 (a broken gauge must not hide overload).
    pub fn sample(&mut self, utilization: f64, now: Nanos) -> f64 {
        if let Some(last) = self.last_sample {
            let cap = Duration::from_secs_f64(self.settings.seconds_before_shedding);
            let elapsed = now.saturating_since(last).min(cap).as_secs_f64();
            let moved = self.shed_amount + self.derivative(utilization) * elapsed;
            self.shed_amount = moved.clamp(self.settings.resting_amount(), 1.0);
        }
        // Keep the latest instant seen, so that a clock going backwards adds no time later.
        self.last_sample = Some(self.last_sample.map_or(now, |last| last.max(now)));
        self.last_utilization = Some(clamp_utilization(utilization));
        self.shed_amount
    }

    /// The current shed amount, in `[resting, 1]`.
    pub fn shed_amount(&self) -> f64 {
        self.shed_amount
    }

    /// The instant of the latest sample, if any.
    pub fn last_sample(&self) -> Option<Nanos> {
        self.last_sample
    }

    /// The latest utilization sample as the controller used it (clamped to 0..=1, NaN read as
    /// 1), if any.
    pub fn last_utilization(&self) -> Option<f64> {
        self.last_utilization
    }

    /// The probability that a request of `priority` is shed at the current amount.
    pub fn drop_probability(&self, priority: Priority) -> f64 {
        drop_probability(self.shed_amount, priority)
    }
}

/// Each class is shed over its own third of the amount's range; critical never.
fn drop_probability(shed_amount: f64, priority: Priority) -> f64 {
    let s = shed_amount.max(0.0) * 3.0;
    let offset = match priority {
        Priority::Critical => return 0.0,
        Priority::Test => 0.0,
        Priority::Get => 1.0,
        Priority::Post => 2.0,
    };
    (s - offset).clamp(0.0, 1.0)
}

fn clamp_utilization(u: f64) -> f64 {
    if u.is_nan() {
        1.0
    } else {
        u.clamp(0.0, 1.0)
    }
}

/// Where the shedder reads utilization from: a number in 0..=1 (busy workers / workers).
pub trait UtilizationSource: Send + Sync {
    /// The current utilization, 0 (idle) to 1 (every worker busy).
    fn utilization(&self) -> f64;
}

/// A utilization set from outside (tests, or a signal the application computes itself).
#[derive(Debug, Default)]
pub struct SettableUtilization(AtomicU64);

impl SettableUtilization {
    /// Starts at `value`.
    pub fn new(value: f64) -> Self {
        SettableUtilization(AtomicU64::new(value.to_bits()))
    }

    /// Sets the utilization.
    pub fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }
}

impl UtilizationSource for SettableUtilization {
    fn utilization(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

/// What the utilization shedder decided for one request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShedDecision {
    /// Whether the request is shed (refused with 503).
    pub shed: bool,
    /// The controller's shed amount after this request's sample.
    pub shed_amount: f64,
    /// The probability with which this request's class is shed.
    pub drop_probability: f64,
}

/// The worker utilization load shedder: a [`ShedController`] fed by a [`UtilizationSource`],
/// and a seedable random draw per request.
///
/// The controller is sampled at most once per `sample_interval` (default 1 s; Stripe's
/// constants assume samples a few seconds apart, and more frequent samples change nothing but
/// the granularity). Between samples a request only reads the current amount: the hot path
/// takes no lock unless the request's class is being shed or a sample is due.
pub struct UtilizationShedder {
    name: Namespace,
    controller: Mutex<ShedController>,
    /// The controller's amount, readable without the lock (f64 bits).
    amount: AtomicU64,
    /// The instant the next sample is due (nanoseconds).
    next_sample: AtomicU64,
    sample_interval: u64,
    rng: Mutex<SplitMix64>,
    source: Arc<dyn UtilizationSource>,
    /// The gauge whose worker leases admitted requests take, if any.
    workers: Option<Arc<WorkerGauge>>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for UtilizationShedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UtilizationShedder")
            .field("shed_amount", &self.shed_amount())
            .field("sample_interval_ns", &self.sample_interval)
            .finish_non_exhaustive()
    }
}

/// Builds a [`UtilizationShedder`]: the utilization `source` is required; the controller's
/// constants default to Stripe's ([`ControllerSettings::default`]), `sample_interval` to 1 s,
/// the drop draw's `seed` to 0, the `clock` to [`crate::CoarseClock::shared`] and the `name` to
/// `utilization`.
#[must_use]
pub struct UtilizationShedderBuilder {
    settings: ControllerSettings,
    sample_interval: Duration,
    seed: u64,
    source: Option<Arc<dyn UtilizationSource>>,
    workers: Option<Arc<WorkerGauge>>,
    clock: Option<Arc<dyn Clock>>,
    name: Option<String>,
}

impl std::fmt::Debug for UtilizationShedderBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UtilizationShedderBuilder")
            .field("settings", &self.settings)
            .field("sample_interval", &self.sample_interval)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

impl UtilizationShedderBuilder {
    /// The controller's constants.
    pub fn settings(mut self, settings: ControllerSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The least time between two samples of the source.
    pub fn sample_interval(mut self, interval: Duration) -> Self {
        self.sample_interval = interval;
        self
    }

    /// The seed of the drop draw's generator (same seed, same draws).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Where utilization comes from (a [`WorkerGauge`], a [`SettableUtilization`], …).
    pub fn source(mut self, source: Arc<dyn UtilizationSource>) -> Self {
        self.source = Some(source);
        self.workers = None;
        self
    }

    /// Utilization from `gauge`'s busy workers, and, when the gauge takes worker leases
    /// ([`WorkerGauge::with_leases`]), every request the shedder admits takes one: the
    /// request is a busy worker until its lease is given back (see [`workers`]). For a service
    /// deciding for workers elsewhere; in process, enter the gauge around each request instead.
    pub fn workers(mut self, gauge: Arc<WorkerGauge>) -> Self {
        self.source = Some(gauge.clone());
        self.workers = Some(gauge);
        self
    }

    /// The clock samples are timed by.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The shedder's name, which is its stage's name in a pipeline (see [`Namespace::new`]).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Validates the settings (errors name the field) and builds a shedder at rest.
    pub fn build(self) -> Result<UtilizationShedder, ConfigError> {
        let source = self
            .source
            .ok_or(ConfigError::Missing { field: "source" })?;
        let controller = ShedController::new(self.settings)?;
        Ok(UtilizationShedder {
            name: Namespace::new(self.name.as_deref().unwrap_or("utilization"))?,
            amount: AtomicU64::new(controller.shed_amount().to_bits()),
            controller: Mutex::new(controller),
            next_sample: AtomicU64::new(0),
            sample_interval: crate::clock::duration_nanos(self.sample_interval),
            rng: Mutex::new(SplitMix64(self.seed)),
            source,
            workers: self.workers,
            clock: self
                .clock
                .unwrap_or_else(|| Arc::new(crate::CoarseClock::shared())),
        })
    }
}

impl UtilizationShedder {
    /// A builder (see [`UtilizationShedderBuilder`]).
    pub fn builder() -> UtilizationShedderBuilder {
        UtilizationShedderBuilder {
            settings: ControllerSettings::default(),
            sample_interval: Duration::from_secs(1),
            seed: 0,
            source: None,
            workers: None,
            clock: None,
            name: None,
        }
    }

    /// A worker lease for a request this shedder admitted, when its gauge takes them
    /// ([`UtilizationShedderBuilder::workers`]).
    pub fn lease_worker(&self) -> Option<Lease> {
        self.workers.as_ref()?.lease(&self.name)
    }

    /// Gives back a worker lease this shedder's gauge issued; `false` when it is not held
    /// (released already, expired, taken on another node, or no gauge takes leases).
    pub fn release(&self, lease: &LeaseHandle) -> bool {
        lease.limiter() == &self.name && self.workers.as_ref().is_some_and(|g| g.release(lease))
    }

    /// The shedder's name (its stage's name in a pipeline).
    pub fn name(&self) -> &Namespace {
        &self.name
    }

    /// Decides for one request of `priority`, sampling the source if a sample is due.
    pub fn check(&self, priority: Priority) -> ShedDecision {
        let now = self.clock.now();
        if now.0 >= self.next_sample.load(Ordering::Relaxed) {
            self.sample(self.source.utilization(), now);
        }
        self.decide(priority)
    }

    /// Samples `utilization` now, whatever the interval (for replays and tests), then decides
    /// for one request of `priority`.
    pub fn check_with(&self, priority: Priority, utilization: f64) -> ShedDecision {
        self.sample(utilization, self.clock.now());
        self.decide(priority)
    }

    fn sample(&self, utilization: f64, now: Nanos) {
        let mut controller = lock(&self.controller);
        let amount = controller.sample(utilization, now);
        self.amount.store(amount.to_bits(), Ordering::Relaxed);
        self.next_sample.store(
            now.0.saturating_add(self.sample_interval),
            Ordering::Relaxed,
        );
    }

    fn decide(&self, priority: Priority) -> ShedDecision {
        let shed_amount = self.shed_amount();
        let drop_probability = drop_probability(shed_amount, priority);
        let shed = drop_probability > 0.0 && {
            let draw = lock(&self.rng).next_f64();
            draw < drop_probability
        };
        ShedDecision {
            shed,
            shed_amount,
            drop_probability,
        }
    }

    /// The current shed amount (see the module documentation).
    pub fn shed_amount(&self) -> f64 {
        f64::from_bits(self.amount.load(Ordering::Relaxed))
    }

    /// A copy of the controller's state.
    pub fn controller(&self) -> ShedController {
        lock(&self.controller).clone()
    }
}

/// The controller's lock: its state is a few numbers updated together, so a panic elsewhere
/// cannot leave it torn; a poisoned lock is used as is.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// SplitMix64: a tiny, seedable generator, plenty for a drop draw.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at_rest() -> ShedController {
        ShedController::new(ControllerSettings::default()).unwrap()
    }

    /// Samples `u` once a second from `from` to `to` (inclusive) seconds.
    fn hold(c: &mut ShedController, u: f64, from: u64, to: u64) {
        for t in from..=to {
            c.sample(u, Nanos::from_secs(t));
        }
    }

    #[test]
    fn full_overload_sheds_nothing_for_28_s_then_test_then_get_then_post() {
        let mut c = at_rest();
        hold(&mut c, 1.0, 0, 28);
        assert!((c.shed_amount() - 0.0).abs() < 1e-12, "{}", c.shed_amount());
        assert_eq!(c.drop_probability(Priority::Test), 0.0);
        hold(&mut c, 1.0, 29, 48); // 20 s into shedding: test mode half shed
        assert!((c.drop_probability(Priority::Test) - 0.5).abs() < 1e-9);
        assert_eq!(c.drop_probability(Priority::Get), 0.0);
        hold(&mut c, 1.0, 49, 68); // 40 s: test mode fully shed
        assert!((c.drop_probability(Priority::Test) - 1.0).abs() < 1e-9);
        assert!(c.drop_probability(Priority::Get) < 1e-9);
        hold(&mut c, 1.0, 69, 108); // 80 s: GET fully shed
        assert!((c.drop_probability(Priority::Get) - 1.0).abs() < 1e-9);
        assert!(c.drop_probability(Priority::Post) < 1e-9);
        hold(&mut c, 1.0, 109, 147);
        assert!(c.drop_probability(Priority::Post) < 1.0);
        hold(&mut c, 1.0, 148, 148); // 148 s: everything but critical
        assert!((c.drop_probability(Priority::Post) - 1.0).abs() < 1e-9);
        assert_eq!(c.drop_probability(Priority::Critical), 0.0);
        hold(&mut c, 1.0, 149, 400);
        assert_eq!(c.shed_amount(), 1.0);
    }

    #[test]
    fn the_dead_zone_holds_and_recovery_is_gradual() {
        let mut c = at_rest();
        hold(&mut c, 1.0, 0, 88); // 60 s of shedding: amount 0.5
        let amount = c.shed_amount();
        assert!((amount - 0.5).abs() < 1e-9);
        hold(&mut c, 0.75, 89, 200);
        assert_eq!(c.shed_amount(), amount);
        // Idle workers (u = 0) recover at 1/120 per second: never at once.
        let mut previous = c.shed_amount();
        for t in 201..=300 {
            let now = c.sample(0.0, Nanos::from_secs(t));
            assert!(previous - now <= 1.0 / 120.0 + 1e-12);
            previous = now;
        }
        assert!((c.shed_amount() - c.settings().resting_amount()).abs() < 1e-9);
    }

    #[test]
    fn the_first_sample_only_starts_the_clock_and_long_gaps_count_28_s() {
        let mut c = at_rest();
        c.sample(1.0, Nanos::from_secs(1_000));
        assert_eq!(c.shed_amount(), c.settings().resting_amount());
        // A gap of an hour counts as 28 s.
        c.sample(1.0, Nanos::from_secs(4_600));
        assert!(c.shed_amount().abs() < 1e-12);
        // Backwards: no time passes.
        c.sample(1.0, Nanos::from_secs(10));
        assert!(c.shed_amount().abs() < 1e-12);
        c.sample(1.0, Nanos::from_secs(4_606));
        assert!((c.shed_amount() - 6.0 / 120.0).abs() < 1e-12);
    }

    #[test]
    fn derivative_follows_the_three_zones() {
        let c = at_rest();
        assert!((c.derivative(0.35) - (-0.5 / 120.0)).abs() < 1e-15);
        assert_eq!(c.derivative(0.7), 0.0);
        assert_eq!(c.derivative(0.79), 0.0);
        assert!((c.derivative(0.9) - 0.5 / 120.0).abs() < 1e-15);
        assert_eq!(c.derivative(7.0), 1.0 / 120.0);
        assert_eq!(c.derivative(f64::NAN), 1.0 / 120.0);
    }

    #[test]
    fn invalid_settings_name_the_field() {
        let bad = ControllerSettings {
            start_of_bad: 0.5,
            ..Default::default()
        };
        assert!(ShedController::new(bad)
            .unwrap_err()
            .to_string()
            .contains("start_of_bad"));
        let bad = ControllerSettings {
            seconds_to_shed_all: 0.0,
            ..Default::default()
        };
        assert!(ShedController::new(bad)
            .unwrap_err()
            .to_string()
            .contains("seconds_to_shed_all"));
    }

    proptest! {
        #[test]
        fn critical_is_never_shed_and_the_amount_stays_in_range(
            samples in proptest::collection::vec((0.0f64..1.5, 0u64..60_000), 1..200)
        ) {
            let mut c = at_rest();
            let mut t = 0u64;
            for (u, step_ms) in samples {
                t += step_ms;
                let before = c.shed_amount();
                let after = c.sample(u, Nanos::from_millis(t));
                prop_assert_eq!(c.drop_probability(Priority::Critical), 0.0);
                prop_assert!(after >= c.settings().resting_amount() - 1e-12 && after <= 1.0);
                // Never faster than 1/120 per second, over at most 28 s.
                prop_assert!((after - before).abs() <= 28.0 / 120.0 + 1e-9);
                let (p_test, p_get, p_post) = (
                    c.drop_probability(Priority::Test),
                    c.drop_probability(Priority::Get),
                    c.drop_probability(Priority::Post),
                );
                prop_assert!(p_test >= p_get && p_get >= p_post);
            }
        }
    }

    fn shedder(
        sample_interval: Duration,
        seed: u64,
    ) -> (
        UtilizationShedder,
        Arc<SettableUtilization>,
        crate::ManualClock,
    ) {
        let clock = crate::ManualClock::new(Nanos::ZERO);
        let gauge = Arc::new(SettableUtilization::new(0.0));
        let s = UtilizationShedder::builder()
            .sample_interval(sample_interval)
            .seed(seed)
            .source(gauge.clone())
            .clock(Arc::new(clock.clone()))
            .build()
            .unwrap();
        (s, gauge, clock)
    }

    #[test]
    fn shedder_samples_its_source_and_sheds_by_class() {
        let (s, gauge, clock) = shedder(Duration::from_secs(1), 42);
        gauge.set(1.0);
        for t in 0..=68 {
            clock.set(Nanos::from_secs(t));
            assert!(!s.check(Priority::Critical).shed);
        }
        // 40 s into shedding: all test-mode traffic is shed, no GET yet.
        assert!((s.shed_amount() - 40.0 / 120.0).abs() < 1e-9);
        assert!((0..100).all(|_| s.check(Priority::Test).shed));
        assert!((0..100).all(|_| !s.check(Priority::Get).shed));
        assert_eq!(s.controller().shed_amount(), s.shed_amount());
    }

    #[test]
    fn the_draw_is_seeded_and_matches_the_probability() {
        let run = |seed| {
            let (s, _, clock) = shedder(Duration::ZERO, seed);
            for t in [0, 28, 48] {
                // Full load from rest: after 20 s of shedding, test mode is shed half the time.
                clock.set(Nanos::from_secs(t));
                s.check_with(Priority::Critical, 1.0);
            }
            (0..4000)
                .map(|_| s.decide(Priority::Test))
                .collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7));
        assert_ne!(a, run(8));
        assert!((a[0].drop_probability - 0.5).abs() < 1e-9);
        let shed = a.iter().filter(|d| d.shed).count();
        assert!(
            (1800..2200).contains(&shed),
            "{shed} of 4000 shed at p = 0.5"
        );
    }

    #[test]
    fn worker_gauge_counts_busy_workers() {
        let gauge = Arc::new(WorkerGauge::new(4).unwrap());
        let a = gauge.enter();
        let b = gauge.enter();
        assert_eq!(gauge.utilization(), 0.5);
        drop(a);
        assert_eq!(gauge.utilization(), 0.25);
        drop(b);
        assert_eq!(gauge.busy(), 0);
        assert!(WorkerGauge::new(0).is_err());
    }
}
