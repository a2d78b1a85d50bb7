//! Guava's `SmoothWarmingUp`: the smooth limiter that starts slow after an idle spell and
//! warms up to its stable rate (see the [parent module](super) for the rule it shares with the
//! bursty one, and for its time, decisions, bound and state).

use std::time::Duration;

use serde::Deserialize;

use super::{
    apply_smooth, fresh_state, is_fresh_smooth, java_min, Derived, Flavour, SmoothState,
    MICROS_PER_SECOND,
};
use crate::algorithm::{param, Algorithm, Parameters};
use crate::duration::SpecDuration;
use crate::{ConfigError, Decision, Nanos, Op, OpKind};

/// `SmoothWarmingUp`: a key idle for the warmup period goes cold and then serves at
/// `cold_factor` times the stable interval, speeding up to the stable rate over the warmup.
///
/// See the [module documentation](super) for the exact rule.
#[derive(Debug, Clone)]
pub struct SmoothWarmingUp {
    rate: f64,
    warmup: Duration,
    warmup_micros: i64,
    cold_factor: f64,
    derived: Derived,
}

impl SmoothWarmingUp {
    /// Guava's cold factor (`RateLimiter.create(rate, warmupPeriod)`): a cold key serves at a
    /// third of its rate.
    pub const DEFAULT_COLD_FACTOR: f64 = 3.0;

    /// A warming-up limiter of `rate` permits per second whose warmup period is `warmup`
    /// (counted in whole microseconds, as Guava does) and whose cold interval is `cold_factor`
    /// times the stable one.
    ///
    /// `rate` must be finite and above 0, `warmup` at least 1 µs, `cold_factor` finite and at
    /// least 1, and Guava's derived values (interval, threshold, max permits, slope) finite.
    pub fn new(
        rate: f64,
        warmup: Duration,
        cold_factor: f64,
    ) -> Result<SmoothWarmingUp, ConfigError> {
        let rate = param::rate("rate", rate)?;
        param::period("warmup", warmup)?;
        // `period` caps the warmup at u64::MAX ns, so its microseconds fit in an i64.
        let warmup_micros = i64::try_from(warmup.as_micros()).unwrap_or(i64::MAX);
        if warmup_micros < 1 {
            return Err(ConfigError::invalid(
                "warmup",
                format!("{warmup:?}"),
                "must be at least 1µs (Guava counts whole microseconds)",
            ));
        }
        if !(cold_factor.is_finite() && cold_factor >= 1.0) {
            return Err(ConfigError::invalid(
                "cold_factor",
                cold_factor,
                "must be a finite number of at least 1",
            ));
        }
        let derived = warming_derive(warmup_micros, cold_factor, rate).ok_or_else(|| {
            ConfigError::invalid(
                "rate",
                rate,
                "is out of range for this warmup and cold_factor (Guava's derived interval, \
                 threshold, max permits or slope would not be finite)",
            )
        })?;
        Ok(SmoothWarmingUp {
            rate,
            warmup,
            warmup_micros,
            cold_factor,
            derived,
        })
    }

    /// The configured rate, permits per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The warmup period, as given (the rule uses its whole microseconds).
    pub fn warmup(&self) -> Duration {
        self.warmup
    }

    /// The cold factor: the cold interval over the stable interval.
    pub fn cold_factor(&self) -> f64 {
        self.cold_factor
    }

    /// The most permits a key stores at the configured rate (Guava's `maxPermits`); a fresh key
    /// holds that many (cold).
    pub fn max_permits(&self) -> f64 {
        self.derived.max_permits
    }

    /// Stored permits below which the key serves at the stable rate (Guava's
    /// `thresholdPermits`).
    pub fn threshold_permits(&self) -> f64 {
        self.derived.threshold
    }

    /// Microseconds per permit at the configured rate (Guava's `stableIntervalMicros`).
    pub fn stable_interval_micros(&self) -> f64 {
        self.derived.interval
    }
}

fn warming_derive(warmup_micros: i64, cold_factor: f64, rate: f64) -> Option<Derived> {
    let interval = MICROS_PER_SECOND / rate;
    let cold_interval = interval * cold_factor;
    let w = warmup_micros as f64;
    let threshold = 0.5 * w / interval;
    let max_permits = threshold + 2.0 * w / (interval + cold_interval);
    let slope = (cold_interval - interval) / (max_permits - threshold);
    let cool_down = w / max_permits;
    let ok = interval.is_finite()
        && interval > 0.0
        && cold_interval.is_finite()
        && threshold.is_finite()
        && max_permits.is_finite()
        && max_permits > 0.0
        && slope.is_finite()
        && slope >= 0.0
        && cool_down.is_finite()
        && cool_down > 0.0;
    ok.then_some(Derived {
        interval,
        max_permits,
        threshold,
        slope,
        cool_down,
    })
}

impl Flavour for SmoothWarmingUp {
    #[inline]
    fn configured_rate(&self) -> f64 {
        self.rate
    }

    #[inline]
    fn configured(&self) -> &Derived {
        &self.derived
    }

    fn derive(&self, rate: f64) -> Option<Derived> {
        warming_derive(self.warmup_micros, self.cold_factor, rate)
    }

    #[inline]
    fn initial_stored(&self, d: &Derived) -> f64 {
        d.max_permits
    }

    #[inline]
    fn stored_cost(&self, d: &Derived, stored: f64, take: f64) -> i64 {
        let permits_to_time = |permits: f64| d.interval + permits * d.slope;
        let mut take = take;
        let above_threshold = stored - d.threshold;
        let mut micros: i64 = 0;
        if above_threshold > 0.0 {
            let take_above = java_min(above_threshold, take);
            let length =
                permits_to_time(above_threshold) + permits_to_time(above_threshold - take_above);
            micros = (take_above * length / 2.0) as i64;
            take -= take_above;
        }
        micros.saturating_add((d.interval * take) as i64)
    }
}

impl Algorithm for SmoothWarmingUp {
    type State = SmoothState;

    fn name(&self) -> &'static str {
        "smooth_warming_up"
    }

    fn fresh(&self, now: Nanos) -> SmoothState {
        fresh_state(self, now)
    }

    #[inline]
    fn apply(&self, state: &mut SmoothState, now: Nanos, op: Op) -> Decision {
        apply_smooth(self, state, now, op)
    }

    /// True for a key at rest: configured rate, no debt, and cold again (`stored = M`).
    fn is_fresh(&self, state: &SmoothState, now: Nanos) -> bool {
        is_fresh_smooth(self, state, now)
    }

    fn supports(&self, op: OpKind) -> bool {
        matches!(
            op,
            OpKind::Check | OpKind::Reserve | OpKind::TryAcquire | OpKind::SetRate
        )
    }
}

/// Guava's warm-up limiter as a user writes it: `{"algorithm": "smooth_warming_up",
/// "rate": 2, "warmup": "4s"}` ([`crate::algorithm::spec::AlgorithmSpec`]).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmoothWarmingUpSpec {
    /// Stable permits per second, from [`MIN_SPEC_RATE`](crate::algorithm::MIN_SPEC_RATE) to
    /// [`MAX_SPEC_RATE`](crate::algorithm::MAX_SPEC_RATE).
    pub rate: f64,
    /// Time to go from cold to the stable rate: seconds, or a string with a unit.
    pub warmup: SpecDuration,
    /// How much slower than stable the cold rate is (default
    /// [`SmoothWarmingUp::DEFAULT_COLD_FACTOR`]).
    #[serde(default = "default_cold_factor")]
    pub cold_factor: f64,
}

fn default_cold_factor() -> f64 {
    SmoothWarmingUp::DEFAULT_COLD_FACTOR
}

impl SmoothWarmingUpSpec {
    /// Validates the parameters and builds the limiter ([`SmoothWarmingUp::new`]).
    pub fn build(&self) -> Result<SmoothWarmingUp, ConfigError> {
        let rate = param::spec_rate(self.rate)?;
        SmoothWarmingUp::new(rate, self.warmup.0, self.cold_factor)
    }
}

impl Parameters for SmoothWarmingUp {
    fn fingerprint(&self) -> [u64; 2] {
        [
            self.rate().to_bits(),
            param::mix(param::nanos(self.warmup()), self.cold_factor().to_bits()),
        ]
    }

    /// `rate` (the stable rate) per second.
    fn quota(&self) -> Option<(f64, Duration)> {
        Some((self.rate(), Duration::from_secs(1)))
    }

    fn share(&self, nodes: u32) -> Result<SmoothWarmingUp, ConfigError> {
        SmoothWarmingUp::new(
            self.rate() / f64::from(nodes),
            self.warmup(),
            self.cold_factor(),
        )
    }
}
