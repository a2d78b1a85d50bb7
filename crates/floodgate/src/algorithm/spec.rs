//! Choosing an algorithm at run time: [`AlgorithmSpec`] is what a user writes (in a replay
//! `--limiter` spec or a config file), [`AnyAlgorithm`] the validated algorithm it builds.
//!
//! A spec is an object tagged by `algorithm`, with these parameters:
//!
//! | `algorithm` | parameters |
//! |---|---|
//! | `token_bucket` | `rate`, `capacity` |
//! | `leaky_bucket` | `rate`, `capacity` |
//! | `leaky_queue` | `rate`, `queue` |
//! | `fixed_window` | `limit`, `window` |
//! | `sliding_log` | `limit`, `window` |
//! | `sliding_window` | `limit`, `window`, optional `buckets` |
//! | `gcra` | `max_burst`, `count`, `period` |
//! | `smooth_bursty` | `rate`, optional `max_burst_seconds` (default 1), optional `starts`: `full` (default) or `empty` |
//! | `smooth_warming_up` | `rate`, `warmup`, optional `cold_factor` (default 3) |
//!
//! Rates are per second; counts are whole numbers; durations are seconds (a JSON number) or a
//! string with a unit: `"250us"`, `"500ms"`, `"1.5s"`, `"2m"`, `"1h"`, `"1d"`, `"1w"`, or
//! several of them from the largest unit down, `"1h30m"`, `"1m30s"`, `"2d12h"` ([`parse_duration`]).

use std::time::Duration;

use serde::Deserialize;

use super::concurrency::{Concurrency, Fleet};
use super::fixed_window::FixedWindow;
use super::gcra::Gcra;
use super::leaky_bucket::LeakyBucket;
use super::leaky_queue::LeakyQueue;
use super::sliding_log::SlidingLog;
use super::sliding_window::SlidingWindow;
use super::smooth::{BurstyStart, SmoothBursty, SmoothWarmingUp};
use super::token_bucket::TokenBucket;
use super::Algorithm;
use crate::{ConfigError, Decision, Nanos, Op, OpKind};

/// A duration as users write it: seconds as a number, or a string with a unit (see the
/// [module documentation](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "DurationRepr")]
pub struct SpecDuration(pub Duration);

#[derive(Deserialize)]
#[serde(untagged)]
enum DurationRepr {
    Seconds(f64),
    Text(String),
}

impl TryFrom<DurationRepr> for SpecDuration {
    type Error = DurationError;
    fn try_from(repr: DurationRepr) -> Result<Self, DurationError> {
        match repr {
            DurationRepr::Seconds(s) => seconds_to_duration(s, || s.to_string()),
            DurationRepr::Text(t) => parse_duration(&t),
        }
        .map(SpecDuration)
    }
}

/// Why a duration was refused; each variant carries the text as written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurationError {
    /// No number where one was expected.
    #[error("`{0}` is not a duration such as \"500ms\", \"1s\" or \"1h\"")]
    NotANumber(String),
    /// A unit that is not one of ns, us, ms, s, m, h, d, w.
    #[error("`{text}` has an unknown unit `{unit}` (use ns, us, ms, s, m, h, d or w)")]
    UnknownUnit {
        /// The duration as written.
        text: String,
        /// The unit as written.
        unit: String,
    },
    /// Negative, not finite, or too large for a `Duration`.
    #[error("`{0}` is not a duration: expected a non-negative number of seconds")]
    OutOfRange(String),
    /// Several parts whose units do not go from the largest down (`"30m1h"`, `"1m1m"`).
    #[error("`{0}` is not a duration: write its parts from the largest unit down, each unit once, e.g. \"1h30m\"")]
    OutOfOrder(String),
}

fn seconds_to_duration(
    secs: f64,
    text: impl FnOnce() -> String,
) -> Result<Duration, DurationError> {
    Duration::try_from_secs_f64(secs).map_err(|_| DurationError::OutOfRange(text()))
}

/// Parses a duration as users write it, the same in every command, flag and file: a bare
/// number of seconds (`"1.5"`), a number with a unit (`"10ns"`, `"250us"`, `"500ms"`,
/// `"1.5s"`, `"2m"`, `"1h"`, `"1d"`, `"1w"`; `µs` and `min` too), or several of those from the
/// largest unit down, with no space between them (`"1h30m"`, `"1m30s"`, `"2d12h"`,
/// `"1s500ms"`), which add up. Negative, non-finite and out-of-range values are refused, and
/// so is a part whose unit is not smaller than the one before it (`"30m1h"`, `"1m1m"`).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(DurationError::NotANumber(text.to_string()));
    }
    let mut rest = t;
    let mut total = 0.0;
    // The last part's unit, as seconds: each part's must be smaller.
    let mut previous = f64::INFINITY;
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(split);
        let value: f64 = number
            .parse()
            .map_err(|_| DurationError::NotANumber(text.to_string()))?;
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let unit_secs = match unit.trim() {
            // A bare number is seconds, alone only.
            "" if total == 0.0 && previous.is_infinite() => 1.0,
            "s" => 1.0,
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            "d" => 86_400.0,
            "w" => 604_800.0,
            other => {
                return Err(DurationError::UnknownUnit {
                    text: text.to_string(),
                    unit: other.to_string(),
                })
            }
        };
        if unit_secs >= previous {
            return Err(DurationError::OutOfOrder(text.to_string()));
        }
        previous = unit_secs;
        total += value * unit_secs;
        rest = next;
    }
    seconds_to_duration(total, || text.to_string())
}

/// `d` as [`parse_duration`] reads it back, in the largest units that write it exactly:
/// `"1h30m"`, `"2d"`, `"1m30s"`, `"1.5s"`, `"500ms"`, `"250us"`, `"10ns"`, `"0s"`. For
/// messages that quote a duration as a config would write it.
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    let nanos = d.subsec_nanos();
    if secs == 0 {
        return match nanos {
            0 => "0s".to_string(),
            n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
            n if n % 1_000 == 0 => format!("{}us", n / 1_000),
            n => format!("{n}ns"),
        };
    }
    let mut out = String::new();
    let mut left = secs;
    for (unit, size) in [("w", 604_800), ("d", 86_400), ("h", 3_600), ("m", 60)] {
        if left >= size {
            out.push_str(&format!("{}{unit}", left / size));
            left %= size;
        }
    }
    if left > 0 || nanos > 0 {
        out.push_str(&left.to_string());
        if nanos > 0 {
            let fraction = format!("{nanos:09}");
            out.push('.');
            out.push_str(fraction.trim_end_matches('0'));
        }
        out.push('s');
    }
    out
}

impl std::fmt::Display for SpecDuration {
    /// As [`format_duration`] writes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

fn default_max_burst_seconds() -> f64 {
    1.0
}

fn default_cold_factor() -> f64 {
    3.0
}

/// An algorithm and its parameters, as written by a user; [`AlgorithmSpec::build`] validates it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "algorithm", rename_all = "snake_case", deny_unknown_fields)]
pub enum AlgorithmSpec {
    /// [`TokenBucket`]
    TokenBucket {
        /// Tokens per second.
        rate: f64,
        /// Bucket size (the burst).
        capacity: u64,
    },
    /// [`LeakyBucket`] (meter)
    LeakyBucket {
        /// Drain rate per second.
        rate: f64,
        /// Bucket size.
        capacity: u64,
    },
    /// [`LeakyQueue`] (shaper)
    LeakyQueue {
        /// Release rate per second.
        rate: f64,
        /// Places in the queue.
        queue: u64,
    },
    /// [`FixedWindow`]
    FixedWindow {
        /// Cost allowed per window.
        limit: u64,
        /// Window length.
        window: SpecDuration,
    },
    /// [`SlidingLog`]
    SlidingLog {
        /// Cost allowed in any window.
        limit: u64,
        /// Window length.
        window: SpecDuration,
    },
    /// [`SlidingWindow`]
    SlidingWindow {
        /// Cost allowed per window.
        limit: u64,
        /// Window length.
        window: SpecDuration,
        /// Sub-buckets; absent for the two-window weighted estimate.
        #[serde(default)]
        buckets: Option<u32>,
    },
    /// [`Gcra`], with redis-cell's parameters.
    Gcra {
        /// Burst beyond the first request (`limit` = `max_burst` + 1).
        max_burst: u64,
        /// Requests per `period`.
        count: u64,
        /// The period `count` is measured over.
        period: SpecDuration,
    },
    /// [`SmoothBursty`] (Guava)
    SmoothBursty {
        /// Permits per second.
        rate: f64,
        /// Seconds of unused permits that may be saved up.
        #[serde(default = "default_max_burst_seconds")]
        max_burst_seconds: f64,
        /// How a new key starts: `full` (the default; idle keys become evictable) or `empty`
        /// (exactly Guava's `RateLimiter.create`).
        #[serde(default)]
        starts: BurstyStart,
    },
    /// [`SmoothWarmingUp`] (Guava)
    SmoothWarmingUp {
        /// Stable permits per second.
        rate: f64,
        /// Time to go from cold to the stable rate.
        warmup: SpecDuration,
        /// How much slower than stable the cold rate is.
        #[serde(default = "default_cold_factor")]
        cold_factor: f64,
    },
}

/// The slowest rate a spec takes, per second: one a nanosecond short of 32 years.
pub const MIN_SPEC_RATE: f64 = 1e-9;
/// The fastest rate a spec takes, per second: one a nanosecond, the clock's resolution.
pub const MAX_SPEC_RATE: f64 = 1e9;

impl AlgorithmSpec {
    /// Validates the parameters and builds the algorithm. A spec's `rate` (the buckets', the
    /// leaky queue's, the smooth limiters') is also bounded to what a clock in nanoseconds can
    /// express, from [`MIN_SPEC_RATE`] to [`MAX_SPEC_RATE`] per second: beyond them a bucket
    /// would refill more than once a nanosecond, or less than once in 32 years, and the quota
    /// it announces (`RateLimit-Policy`) would be meaningless. The algorithms themselves take
    /// any finite positive rate.
    pub fn build(&self) -> Result<AnyAlgorithm, ConfigError> {
        if let AlgorithmSpec::TokenBucket { rate, .. }
        | AlgorithmSpec::LeakyBucket { rate, .. }
        | AlgorithmSpec::LeakyQueue { rate, .. }
        | AlgorithmSpec::SmoothBursty { rate, .. }
        | AlgorithmSpec::SmoothWarmingUp { rate, .. } = *self
        {
            if rate.is_finite() && !(MIN_SPEC_RATE..=MAX_SPEC_RATE).contains(&rate) {
                // Debug writes 1e300 as such, where Display would write 301 digits.
                return Err(ConfigError::invalid(
                    "rate",
                    format!("{rate:?}"),
                    "must be from 1e-9 to 1e9 per second: at most one a nanosecond, the clock's resolution",
                ));
            }
        }
        Ok(match *self {
            AlgorithmSpec::TokenBucket { rate, capacity } => {
                AnyAlgorithm::TokenBucket(TokenBucket::new(rate, capacity)?)
            }
            AlgorithmSpec::LeakyBucket { rate, capacity } => {
                AnyAlgorithm::LeakyBucket(LeakyBucket::new(rate, capacity)?)
            }
            AlgorithmSpec::LeakyQueue { rate, queue } => {
                AnyAlgorithm::LeakyQueue(LeakyQueue::new(rate, queue)?)
            }
            AlgorithmSpec::FixedWindow { limit, window } => {
                AnyAlgorithm::FixedWindow(FixedWindow::new(limit, window.0)?)
            }
            AlgorithmSpec::SlidingLog { limit, window } => {
                AnyAlgorithm::SlidingLog(SlidingLog::new(limit, window.0)?)
            }
            AlgorithmSpec::SlidingWindow {
                limit,
                window,
                buckets,
            } => AnyAlgorithm::SlidingWindow(SlidingWindow::new(limit, window.0, buckets)?),
            AlgorithmSpec::Gcra {
                max_burst,
                count,
                period,
            } => AnyAlgorithm::Gcra(Gcra::new(max_burst, count, period.0)?),
            AlgorithmSpec::SmoothBursty {
                rate,
                max_burst_seconds,
                starts,
            } => {
                AnyAlgorithm::SmoothBursty(SmoothBursty::starting(rate, max_burst_seconds, starts)?)
            }
            AlgorithmSpec::SmoothWarmingUp {
                rate,
                warmup,
                cold_factor,
            } => AnyAlgorithm::SmoothWarmingUp(SmoothWarmingUp::new(rate, warmup.0, cold_factor)?),
        })
    }
}

impl AnyAlgorithm {
    /// A fingerprint of the algorithm and all its parameters: equal for equal parameters,
    /// different (but for a 2⁻⁶⁴ chance) otherwise. A few multiplications, no allocation.
    pub(crate) fn params(&self) -> u64 {
        fn mix(h: u64, x: u64) -> u64 {
            (h ^ x)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .rotate_left(31)
                .wrapping_mul(0xBF58_476D_1CE4_E5B9)
        }
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let fields: [u64; 3] = match self {
            AnyAlgorithm::TokenBucket(a) => [1, a.rate().to_bits(), a.capacity()],
            AnyAlgorithm::LeakyBucket(a) => [2, a.rate().to_bits(), a.capacity()],
            AnyAlgorithm::LeakyQueue(a) => [3, a.rate().to_bits(), a.queue()],
            AnyAlgorithm::FixedWindow(a) => [4, a.limit(), nanos(a.window())],
            AnyAlgorithm::SlidingLog(a) => [5, a.limit(), nanos(a.window())],
            AnyAlgorithm::SlidingWindow(a) => [
                6,
                a.limit(),
                mix(
                    nanos(a.window()),
                    a.buckets().map_or(0, |b| u64::from(b) + 1),
                ),
            ],
            AnyAlgorithm::Gcra(a) => [7, a.max_burst(), mix(a.count(), nanos(a.period()))],
            AnyAlgorithm::SmoothBursty(a) => [
                8,
                a.rate().to_bits(),
                mix(a.max_burst_seconds().to_bits(), a.start() as u64),
            ],
            AnyAlgorithm::SmoothWarmingUp(a) => [
                9,
                a.rate().to_bits(),
                mix(nanos(a.warmup()), a.cold_factor().to_bits()),
            ],
            AnyAlgorithm::Concurrency(a) => [10, a.capacity(), nanos(a.lease_ttl())],
            AnyAlgorithm::Fleet(a) => [
                11,
                a.capacity(),
                mix(nanos(a.lease_ttl()), a.reserved_for_critical().to_bits()),
            ],
        };
        fields.into_iter().fold(0, mix)
    }

    /// What the algorithm allows, as `(units, window)`: `rate` per second for the buckets, the
    /// leaky queue and the smooth limiters, `limit` per `window` for the windows, `count` per
    /// `period` for GCRA; `None` for the in-flight limits (concurrency, fleet), which have no
    /// window. For messages ("50 requests per second") and `RateLimit-Policy`.
    pub fn quota(&self) -> Option<(f64, Duration)> {
        let second = Duration::from_secs(1);
        Some(match self {
            AnyAlgorithm::TokenBucket(a) => (a.rate(), second),
            AnyAlgorithm::LeakyBucket(a) => (a.rate(), second),
            AnyAlgorithm::LeakyQueue(a) => (a.rate(), second),
            AnyAlgorithm::FixedWindow(a) => (a.limit() as f64, a.window()),
            AnyAlgorithm::SlidingLog(a) => (a.limit() as f64, a.window()),
            AnyAlgorithm::SlidingWindow(a) => (a.limit() as f64, a.window()),
            AnyAlgorithm::Gcra(a) => (a.count() as f64, a.period()),
            AnyAlgorithm::SmoothBursty(a) => (a.rate(), second),
            AnyAlgorithm::SmoothWarmingUp(a) => (a.rate(), second),
            AnyAlgorithm::Concurrency(_) | AnyAlgorithm::Fleet(_) => return None,
        })
    }
}

macro_rules! any_algorithm {
    ($($variant:ident($ty:ty) = $name:literal),* $(,)?) => {
        /// Any of Floodgate's algorithms, chosen at run time (for example from a spec).
        #[derive(Clone, Debug)]
        pub enum AnyAlgorithm {
            $(
                #[doc = concat!("[`", stringify!($ty), "`]")]
                $variant($ty),
            )*
        }

        /// The state of an [`AnyAlgorithm`] key: the state of the algorithm that wrote it,
        /// tagged with a fingerprint of the parameters that last wrote it (see
        /// [`AnyAlgorithm::is_fresh`](Algorithm::is_fresh)).
        #[derive(Clone, Debug)]
        pub struct AnyState {
            pub(crate) params: u64,
            pub(crate) kind: StateKind,
        }

        #[derive(Clone, Debug)]
        pub(crate) enum StateKind {
            $($variant(<$ty as Algorithm>::State),)*
        }

        $(
            impl From<$ty> for AnyAlgorithm {
                fn from(algorithm: $ty) -> AnyAlgorithm {
                    AnyAlgorithm::$variant(algorithm)
                }
            }
        )*

        impl AnyState {
            /// The name of the algorithm this state belongs to (`"token_bucket"`, …).
            pub fn algorithm(&self) -> &'static str {
                match self.kind {
                    $(StateKind::$variant(_) => $name,)*
                }
            }
        }

        impl Algorithm for AnyAlgorithm {
            type State = AnyState;

            fn name(&self) -> &'static str {
                match self {
                    $(AnyAlgorithm::$variant(a) => a.name(),)*
                }
            }

            fn fresh(&self, now: Nanos) -> AnyState {
                let kind = match self {
                    $(AnyAlgorithm::$variant(a) => StateKind::$variant(a.fresh(now)),)*
                };
                AnyState { params: self.params(), kind }
            }

            /// A state written by another algorithm is left as it is and the operation is
            /// denied (`retry_after: None`); stores never get here, since they check
            /// [`Algorithm::owns`] first and answer [`crate::StoreError::StateConflict`].
            fn apply(&self, state: &mut AnyState, now: Nanos, op: Op) -> Decision {
                let decision = match (self, &mut state.kind) {
                    $((AnyAlgorithm::$variant(a), StateKind::$variant(s)) => a.apply(s, now, op),)*
                    _ => return Decision::deny(0, 0, std::time::Duration::ZERO, None),
                };
                state.params = self.params();
                decision
            }

            /// Whether the state is fresh for these parameters. A state last written under
            /// other parameters (another plan of the same kind, another limit in a shared
            /// store), or by another algorithm, is never fresh for this one: whether it is
            /// fresh depends on its own rate, capacity or window, which only its writer
            /// knows, so keeping it is the lossless choice.
            fn is_fresh(&self, state: &AnyState, now: Nanos) -> bool {
                if state.params != self.params() {
                    return false;
                }
                match (self, &state.kind) {
                    $((AnyAlgorithm::$variant(a), StateKind::$variant(s)) => a.is_fresh(s, now),)*
                    _ => false,
                }
            }

            fn owns(&self, state: &AnyState) -> bool {
                matches!(
                    (self, &state.kind),
                    $((AnyAlgorithm::$variant(_), StateKind::$variant(_)))|*
                )
            }

            fn state_name(&self, state: &AnyState) -> &'static str {
                state.algorithm()
            }

            fn supports(&self, op: OpKind) -> bool {
                match self {
                    $(AnyAlgorithm::$variant(a) => a.supports(op),)*
                }
            }
        }
    };
}

any_algorithm! {
    TokenBucket(TokenBucket) = "token_bucket",
    LeakyBucket(LeakyBucket) = "leaky_bucket",
    LeakyQueue(LeakyQueue) = "leaky_queue",
    FixedWindow(FixedWindow) = "fixed_window",
    SlidingLog(SlidingLog) = "sliding_log",
    SlidingWindow(SlidingWindow) = "sliding_window",
    Gcra(Gcra) = "gcra",
    SmoothBursty(SmoothBursty) = "smooth_bursty",
    SmoothWarmingUp(SmoothWarmingUp) = "smooth_warming_up",
    Concurrency(Concurrency) = "concurrency",
    Fleet(Fleet) = "fleet",
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> Result<AlgorithmSpec, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn durations_accept_numbers_and_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1w"), Ok(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("1 fortnight")
            .unwrap_err()
            .to_string()
            .contains("unknown unit"));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn durations_of_several_parts_add_up_from_the_largest_unit_down() {
        let secs = Duration::from_secs;
        assert_eq!(parse_duration("1h30m"), Ok(secs(5400)));
        assert_eq!(parse_duration("1m30s"), Ok(secs(90)));
        assert_eq!(parse_duration("2d12h"), Ok(secs(216_000)));
        assert_eq!(parse_duration("1h 30m"), Ok(secs(5400)));
        assert_eq!(parse_duration("1s500ms"), Ok(Duration::from_millis(1500)));
        for bad in ["30m1h", "1m1m", "1h30", "1h-5m", "h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_duration("30m1h")
            .unwrap_err()
            .to_string()
            .contains("largest unit down"));
    }

    #[test]
    fn durations_are_written_as_they_are_read() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(10), "10ns"),
            (Duration::from_micros(250), "250us"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(5400), "1h30m"),
            (Duration::from_secs(86_400 * 30), "4w2d"),
            (Duration::from_secs(86_400 * 365), "52w1d"),
            (Duration::from_nanos(90_000_000_001), "1m30.000000001s"),
        ];
        for (d, text) in cases {
            assert_eq!(format_duration(d), text);
            assert_eq!(SpecDuration(d).to_string(), text);
            assert_eq!(parse_duration(text), Ok(d), "{text}");
        }
    }

    #[test]
    fn every_algorithm_builds_from_its_spec() {
        let specs = [
            r#"{"algorithm":"token_bucket","rate":100,"capacity":500}"#,
            r#"{"algorithm":"leaky_bucket","rate":2.5,"capacity":10}"#,
            r#"{"algorithm":"leaky_queue","rate":10,"queue":5}"#,
            r#"{"algorithm":"fixed_window","limit":10,"window":"1m"}"#,
            r#"{"algorithm":"sliding_log","limit":10,"window":60}"#,
            r#"{"algorithm":"sliding_window","limit":10,"window":"1m"}"#,
            r#"{"algorithm":"sliding_window","limit":10,"window":"1m","buckets":6}"#,
            r#"{"algorithm":"gcra","max_burst":15,"count":30,"period":60}"#,
            r#"{"algorithm":"smooth_bursty","rate":5}"#,
            r#"{"algorithm":"smooth_warming_up","rate":2,"warmup":"4s"}"#,
        ];
        for json in specs {
            let alg = spec(json).unwrap().build().unwrap();
            let expected = json.split('"').nth(3).unwrap();
            assert_eq!(alg.name(), expected);
        }
    }

    #[test]
    fn a_bursty_spec_starts_full_unless_told_empty() {
        let start = |json: &str| match spec(json).unwrap().build().unwrap() {
            AnyAlgorithm::SmoothBursty(b) => b.start(),
            other => panic!("{other:?}"),
        };
        let full = r#"{"algorithm":"smooth_bursty","rate":5}"#;
        let empty = r#"{"algorithm":"smooth_bursty","rate":5,"starts":"empty"}"#;
        assert_eq!(start(full), BurstyStart::Full);
        assert_eq!(
            start(r#"{"algorithm":"smooth_bursty","rate":5,"starts":"full"}"#),
            BurstyStart::Full
        );
        assert_eq!(start(empty), BurstyStart::Empty);
        let params = |json: &str| spec(json).unwrap().build().unwrap().params();
        assert_ne!(params(full), params(empty));
        let bad = spec(r#"{"algorithm":"smooth_bursty","rate":5,"starts":"half"}"#).unwrap_err();
        assert!(bad.contains("half") && bad.contains("empty"), "{bad}");
    }

    #[test]
    fn bad_specs_name_the_problem() {
        assert!(spec(r#"{"algorithm":"magic","rate":1}"#)
            .unwrap_err()
            .contains("magic"));
        assert!(spec(r#"{"algorithm":"token_bucket","rate":1}"#)
            .unwrap_err()
            .contains("capacity"));
        assert!(
            spec(r#"{"algorithm":"token_bucket","rate":1,"capacity":2,"burst":3}"#)
                .unwrap_err()
                .contains("burst")
        );
        let zero = spec(r#"{"algorithm":"token_bucket","rate":0,"capacity":2}"#)
            .unwrap()
            .build()
            .unwrap_err();
        assert!(zero.to_string().contains("`rate`"), "{zero}");
        let neg = spec(r#"{"algorithm":"gcra","max_burst":1,"count":-3,"period":1}"#).unwrap_err();
        assert!(neg.contains("-3"), "{neg}");
    }

    #[test]
    fn a_state_from_another_algorithm_is_not_owned_and_left_alone() {
        let fw = spec(r#"{"algorithm":"fixed_window","limit":1,"window":1}"#)
            .unwrap()
            .build()
            .unwrap();
        let tb = spec(r#"{"algorithm":"token_bucket","rate":1,"capacity":3}"#)
            .unwrap()
            .build()
            .unwrap();
        let mut state = fw.fresh(Nanos(0));
        assert!(fw.owns(&state));
        assert!(!tb.owns(&state));
        assert_eq!(tb.state_name(&state), "fixed_window");
        assert!(
            !tb.is_fresh(&state, Nanos(0)),
            "only its own algorithm may drop it"
        );
        let d = tb.apply(&mut state, Nanos(0), Op::Check { cost: 1 });
        assert!(!d.allowed);
        assert_eq!(state.algorithm(), "fixed_window");
    }

    /// Two token buckets in one store: a state that looks full to the small bucket is not
    /// full for the big one that wrote it, so the small one must not call it fresh (an idle
    /// sweep would drop it and hand its user a whole new burst).
    #[test]
    fn a_state_is_judged_fresh_only_by_the_parameters_that_wrote_it() {
        let bucket = |json: &str| spec(json).unwrap().build().unwrap();
        let big = bucket(r#"{"algorithm":"token_bucket","rate":1,"capacity":100}"#);
        let small = bucket(r#"{"algorithm":"token_bucket","rate":1,"capacity":10}"#);
        let mut state = big.fresh(Nanos(0));
        let d = big.apply(&mut state, Nanos(0), Op::Check { cost: 50 });
        assert_eq!(d.remaining, 50);
        assert!(!big.is_fresh(&state, Nanos(0)));
        assert!(
            big.owns(&state) && small.owns(&state),
            "same kind: plans may change"
        );
        assert!(
            !small.is_fresh(&state, Nanos(0)),
            "50 tokens would look full to it"
        );
        // Fifty seconds later the big bucket is full again: fresh for its writer, and for the
        // same parameters built again.
        assert!(big.is_fresh(&state, Nanos::from_secs(50)));
        let again = bucket(r#"{"algorithm":"token_bucket","rate":1,"capacity":100}"#);
        assert!(again.is_fresh(&state, Nanos::from_secs(50)));
        // A plan change on the key: the new writer's parameters judge it from then on.
        let _ = small.apply(&mut state, Nanos::from_secs(50), Op::Check { cost: 0 });
        assert!(small.is_fresh(&state, Nanos::from_secs(50)));
        assert!(!big.is_fresh(&state, Nanos::from_secs(50)));
    }
}
