//! Guava's `RateLimiter` in both flavours, as keyed pure transitions: [`SmoothBursty`] (name
//! `"smooth_bursty"`) and [`SmoothWarmingUp`] (name `"smooth_warming_up"`).
//!
//! Each key holds one Guava limiter, created when the key is first seen. The arithmetic is
//! Guava's (`SmoothRateLimiter`, checked against Guava 31.1-jre): instants are whole
//! microseconds in `i64`, permits and intervals are `f64`, with Guava's order of operations, its
//! truncating `(long)` casts and its saturating addition, so that every wait equals Guava's to
//! the microsecond for the same call sequence. The tests replay sequences recorded from the real
//! Guava (see `smooth/guava_cases.rs` and `tests/data/guava_smooth_random.txt`).
//!
//! # Time
//!
//! An instant `now` (nanoseconds) is read as `t = ⌊now / 1000⌋` microseconds, as Guava's
//! stopwatch counts whole microseconds; a `timeout` is read as `⌊timeout / 1 µs⌋`, as
//! `TimeUnit.toMicros` does. Guava measures time from its stopwatch's start and we from the
//! clock's epoch; the rule only ever uses differences of instants, so the two agree exactly
//! (the one exception: the saturation of `next_free` at `i64::MAX` µs, about 292 000 years).
//!
//! # The rule
//!
//! Let `r` be the key's rate (permits per second) and `I = 1e6 / r` its stable interval (µs per
//! permit). A key's state is `stored` (permits saved while idle), `next_free` (the instant from
//! which the next request may proceed, `N`), the rate in force, and the latest instant seen.
//!
//! - **Bursty**: at most `M = max_burst_seconds × r` permits are stored; they refill one per
//!   `C = I` µs while the key is idle, and taking them costs no time.
//! - **Warming up** (`w` = warmup in µs, `cold = I × cold_factor`):
//!   `threshold = 0.5 × w / I`, `M = threshold + 2 × w / (I + cold)`,
//!   `slope = (cold − I) / (M − threshold)`, refill one per `C = w / M` µs (a full refill takes
//!   exactly the warmup). Stored permits are *not* free: with `p` stored, the next one costs
//!   `I + slope × max(p − threshold, 0)` µs, so a full (cold) limiter starts near the cold
//!   interval and speeds up to `I` as it spends its stored permits. The cost of taking `k` of
//!   them is Guava's trapezoid for the part above `threshold` plus `I` per permit below it, each
//!   part truncated to whole µs.
//! - **resync(t)**: if `t > N` (strictly): `stored = min(M, stored + (t − N) / C)`, `N = t`.
//! - **reserve(n) at t** (`Op::Reserve`, Guava's `acquire(n)` without the sleep): resync(t);
//!   `start = N`; `spend = min(n, stored)`; `N += stored_cost(spend) + ⌊(n − spend) × I⌋`
//!   (saturating at `i64::MAX`); `stored −= spend`; the caller waits `max(start − t, 0)` µs
//!   ([`Decision::wait`]). A request's wait depends only on *earlier* requests: a big request
//!   proceeds at once and the next caller pays for it. Always allowed.
//! - **try_acquire(n, timeout) at t** (`Op::TryAcquire`): passes iff `N − timeout ≤ t`
//!   (inclusive), then reserves as above and reports the wait (at most `timeout`); otherwise it
//!   is denied and changes nothing. As in Guava, `n` does not change whether it passes.
//! - **check(n)** (`Op::Check`) is `try_acquire(n, 0)`: passes iff `N ≤ t`, with no wait.
//! - **set_rate(r′) at t** (`Op::SetRate`, for this key only): resync(t) with the old values,
//!   then the interval, `M` (and threshold, slope, `C`) are recomputed from `r′`, and
//!   `stored = stored × M′ / M` (Guava's `doSetRate`; `N` is kept, so a debt keeps its old
//!   length). Allowed when `r′` is finite, above 0 and gives finite derived values; otherwise
//!   denied with `retry_after: None` and nothing changes (Guava throws for `r′ ≤ 0` or NaN;
//!   it accepts `+∞`, which we refuse).
//! - **First request** (`fresh(now)`): `N = t`. Warming up starts *cold* (`stored = M`), as
//!   Guava's `doSetRate` does when the previous maximum is 0. Bursty starts as its
//!   [`BurstyStart`] says: *full* (`stored = M`, the default: a key first seen now behaves as if
//!   it had been idle since forever, like a token bucket that starts full), or *empty*
//!   (`stored = 0`, the limiter Guava's `RateLimiter.create` builds at that instant). The two
//!   differ only in that first burst; from the same state they decide alike.
//!
//! # Decision fields
//!
//! All are for the key's current rate, evaluated at `t` after the operation, without changing
//! the state for a denial or a probe:
//! - `limit = ⌊M⌋`, the most permits the key can store;
//! - `remaining = ⌊stored⌋` (after a resync at `t`) when there is no debt (`N ≤ t`), else 0.
//!   For bursty these permits are free: that many unit requests get no wait. For warming up
//!   they measure how *cold* the key is: each still costs between `I` and `cold` µs;
//! - `reset_after`: the time until the key is at rest: debt paid and `stored = M` (rounded up
//!   to the microsecond; 1 µs when a `set_rate` rescale left `stored` one ulp above `M`, which
//!   the next resync clamps). That is exactly back to fresh for warming up (cold) and for
//!   bursty starting full; bursty starting empty never returns to its fresh state by waiting,
//!   so for it this is the time until it is full;
//! - `retry_after` (denied `try_acquire`/`check`): the time until `t` reaches `N − timeout`,
//!   exact to the nanosecond; `None` when that instant is beyond the last representable
//!   [`Nanos`] (a key whose `N` saturated), and for a refused `set_rate`;
//! - `wait`: the reservation's wait, zero for denials and for `set_rate`.
//!
//! # Admission bound
//!
//! A reservation *starts* when its caller may proceed, `t + wait`. For a key whose rate `r`
//! does not change, in any interval of length `T` (µs) in which `k` reservations start, the
//! permits `P` they take satisfy:
//! - bursty: `P ≤ M + r × (T + (k − 1) µs) + n_last`;
//! - warming up: `P ≤ r × (T + 3 (k − 1) µs) + n_last` (it never bursts above `r`: even stored
//!   permits cost at least `I` each);
//!
//! where `n_last` is the size of the last request starting in the interval (it proceeds at once
//! and the next caller pays for it) and the `(k − 1)` terms are Guava's truncation of each wait
//! to whole microseconds (one truncation per wait for bursty, up to three for warming up). At
//! rates above 10⁶/s the interval is below 1 µs, and the truncation can let many small
//! requests through with no wait at all, exactly as in Guava.
//!
//! # Edge cases
//!
//! - **Long idle**: bursty fills up to `M` (free burst); warming up goes back to cold.
//! - **Cost 0** (Guava rejects 0 permits): a read-only probe. The state is untouched and the
//!   decision is what the operation would answer for any cost (the cost does not change whether
//!   a request passes nor its wait).
//! - **Cost above anything storable**: there is none; any cost can be reserved and the next
//!   caller waits for it, up to the saturation of `N` at `i64::MAX` µs, after which a key waits
//!   forever (`retry_after: None`). Costs above `i32::MAX` have no Guava equivalent (Guava's
//!   permits are `int`); they are converted to `f64` like smaller ones.
//! - **Clock going backwards**: counts as no time passed: the instant used is
//!   `max(t, latest instant seen by a state-changing operation)`. Guava's stopwatch never goes
//!   backwards, so this never changes a Guava-comparable result.
//! - **Huge values**: never a panic or an overflow. Float-to-integer casts saturate (Java's and
//!   Rust's `as` agree, NaN giving 0). Two deviations from Guava, only where Guava itself
//!   overflows: where it adds two `long`s without saturation (two wait parts of an
//!   astronomically large request) we saturate instead of wrapping, and where `set_rate`'s
//!   `stored × M′ / M` overflows `f64` (maxima near `f64::MAX`) we divide first. Parameters are
//!   validated so that every derived value is finite.
//!
//! # State and eviction
//!
//! [`SmoothState`] is 32 bytes: stored permits (`f64`), the rate in force (`f64`), `N` and the
//! latest instant seen (`i64` µs each). Guava's other fields (interval, `M`, threshold, slope)
//! are pure functions of the rate: they are precomputed for the configured rate and recomputed
//! only for keys whose rate `set_rate` changed.
//!
//! [`Algorithm::is_fresh`] must guarantee that dropping the key and creating it again later
//! changes no decision, and a new key starts from `fresh` at the instant it is seen again. That
//! holds for any idle key back at rest when the fresh state is the resting one (`stored = M`):
//! configured rate, no debt, and `stored` back to `M` (after a resync at `now`). So warming-up
//! keys and bursty keys starting full become evictable once idle long enough to refill, and a
//! store (memory or Redis) drops them then. A bursty key starting *empty* rests full, which is
//! not its fresh state (a fresh key that idles fills up while a re-created one would start
//! empty), so for it `is_fresh` is true only when `M = 0` (`max_burst_seconds = 0`) and the key
//! has no debt: with `M > 0` such keys are never evictable, and a store bounds them only by
//! refusing new keys when full (`refuse_new`). A key whose rate `set_rate` changed is never
//! fresh either. Both guarantees are for operations at instants from `now` on: a clock that goes
//! back before the eviction instant meets a new key that knows nothing of the instants the old
//! one had seen.

use std::time::Duration;

use serde::Deserialize;

use crate::algorithm::{param, Algorithm, Parameters};
use crate::{ConfigError, Decision, Nanos, Op, OpKind};

#[cfg(feature = "redis")]
mod twin;

#[cfg(test)]
mod guava_cases;
#[cfg(feature = "file")]
mod parts;
#[cfg(test)]
mod tests;
mod warming_up;
pub use warming_up::{SmoothWarmingUp, SmoothWarmingUpSpec};

/// Guava's `SECONDS.toMicros(1L)`, as the `double` it divides.
const MICROS_PER_SECOND: f64 = 1_000_000.0;

/// The last microsecond a [`Nanos`] can name.
const LAST_MICROS: i64 = (u64::MAX / 1000) as i64;

/// One key's Guava limiter: 32 bytes.
///
/// Build it with [`Algorithm::fresh`]; the fields are private so that every change goes through
/// [`Algorithm::apply`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SmoothState {
    /// Guava's `storedPermits`.
    stored: f64,
    /// The permits per second in force: the configured rate, or the last `set_rate`.
    rate: f64,
    /// Guava's `nextFreeTicketMicros`: from when the next request may proceed.
    next_free: i64,
    /// The latest instant (µs) applied by a state-changing operation.
    seen: i64,
}

impl SmoothState {
    /// Permits stored (Guava's `storedPermits`), as of the last state-changing operation.
    pub fn stored_permits(&self) -> f64 {
        self.stored
    }

    /// The key's rate in permits per second: the configured one, or the last `set_rate`.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The instant, in microseconds since the clock's epoch, from which the next request may
    /// proceed (Guava's `nextFreeTicketMicros`).
    pub fn next_free_micros(&self) -> i64 {
        self.next_free
    }
}

/// Guava's fields that follow from the rate (`doSetRate`), in its units.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Derived {
    /// `stableIntervalMicros`: µs per permit at the stable rate.
    interval: f64,
    /// `maxPermits`.
    max_permits: f64,
    /// `thresholdPermits` (warming up; 0 for bursty).
    threshold: f64,
    /// `slope` (warming up; 0 for bursty).
    slope: f64,
    /// `coolDownIntervalMicros()`: µs to store one permit while idle.
    cool_down: f64,
}

/// What differs between the two flavours, as in Guava's two subclasses.
trait Flavour {
    /// The configured rate.
    fn configured_rate(&self) -> f64;
    /// The derived values for the configured rate, precomputed.
    fn configured(&self) -> &Derived;
    /// The derived values for `rate`, or `None` if one is not finite or out of its domain.
    fn derive(&self, rate: f64) -> Option<Derived>;
    /// Stored permits right after creation (`doSetRate` with a previous maximum of 0).
    fn initial_stored(&self, d: &Derived) -> f64;
    /// `storedPermitsToWaitTime`: the µs that taking `take` of the `stored` permits costs.
    fn stored_cost(&self, d: &Derived, stored: f64, take: f64) -> i64;
}

/// `SmoothBursty`: stored permits (up to `max_burst_seconds` of them) are free.
///
/// See the [module documentation](self) for the exact rule.
#[derive(Debug, Clone)]
pub struct SmoothBursty {
    rate: f64,
    max_burst_seconds: f64,
    start: BurstyStart,
    derived: Derived,
}

/// How many permits a [`SmoothBursty`] key holds when it is first seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BurstyStart {
    /// `stored = M`: the key behaves as if idle since forever, and an idle key that refilled is
    /// a fresh one again (evictable). The default.
    #[default]
    Full,
    /// `stored = 0`: exactly the limiter Guava's `RateLimiter.create` builds when the key is
    /// first seen. An idle key fills up and never looks fresh again (never evictable when
    /// `max_burst_seconds > 0`).
    Empty,
}

impl SmoothBursty {
    /// Guava's default (`RateLimiter.create(rate)`): one second of permits may be stored.
    pub const DEFAULT_MAX_BURST_SECONDS: f64 = 1.0;

    /// A bursty limiter of `rate` permits per second that stores up to
    /// `max_burst_seconds × rate` permits while idle; a new key starts full
    /// ([`BurstyStart::Full`]).
    ///
    /// `rate` must be finite and above 0, `max_burst_seconds` finite and at least 0, and
    /// `1e6 / rate` and `max_burst_seconds × rate` must be finite.
    pub fn new(rate: f64, max_burst_seconds: f64) -> Result<SmoothBursty, ConfigError> {
        SmoothBursty::starting(rate, max_burst_seconds, BurstyStart::Full)
    }

    /// Guava's `SmoothBursty` exactly: as [`SmoothBursty::new`], but a new key starts empty
    /// ([`BurstyStart::Empty`]), as `RateLimiter.create(rate)` does.
    pub fn guava(rate: f64, max_burst_seconds: f64) -> Result<SmoothBursty, ConfigError> {
        SmoothBursty::starting(rate, max_burst_seconds, BurstyStart::Empty)
    }

    /// As [`SmoothBursty::new`], with new keys starting as `start` says.
    pub fn starting(
        rate: f64,
        max_burst_seconds: f64,
        start: BurstyStart,
    ) -> Result<SmoothBursty, ConfigError> {
        let rate = param::rate("rate", rate)?;
        if !(max_burst_seconds.is_finite() && max_burst_seconds >= 0.0) {
            return Err(ConfigError::invalid(
                "max_burst_seconds",
                max_burst_seconds,
                "must be a finite number of at least 0",
            ));
        }
        if !(MICROS_PER_SECOND / rate).is_finite() {
            return Err(ConfigError::invalid(
                "rate",
                rate,
                "is too small: 1e6 / rate µs per permit must be finite",
            ));
        }
        let derived = bursty_derive(max_burst_seconds, rate).ok_or_else(|| {
            ConfigError::invalid(
                "max_burst_seconds",
                max_burst_seconds,
                "times the rate must be finite",
            )
        })?;
        Ok(SmoothBursty {
            rate,
            max_burst_seconds,
            start,
            derived,
        })
    }

    /// The configured rate, permits per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The configured burst, in seconds of permits.
    pub fn max_burst_seconds(&self) -> f64 {
        self.max_burst_seconds
    }

    /// How a new key starts.
    pub fn start(&self) -> BurstyStart {
        self.start
    }

    /// The most permits a key stores at the configured rate (Guava's `maxPermits`).
    pub fn max_permits(&self) -> f64 {
        self.derived.max_permits
    }

    /// Microseconds per permit at the configured rate (Guava's `stableIntervalMicros`).
    pub fn stable_interval_micros(&self) -> f64 {
        self.derived.interval
    }
}

fn bursty_derive(max_burst_seconds: f64, rate: f64) -> Option<Derived> {
    let interval = MICROS_PER_SECOND / rate;
    let max_permits = max_burst_seconds * rate;
    let ok = interval.is_finite() && interval > 0.0 && max_permits.is_finite();
    ok.then_some(Derived {
        interval,
        max_permits,
        threshold: 0.0,
        slope: 0.0,
        cool_down: interval,
    })
}

impl Flavour for SmoothBursty {
    #[inline]
    fn configured_rate(&self) -> f64 {
        self.rate
    }

    #[inline]
    fn configured(&self) -> &Derived {
        &self.derived
    }

    fn derive(&self, rate: f64) -> Option<Derived> {
        bursty_derive(self.max_burst_seconds, rate)
    }

    #[inline]
    fn initial_stored(&self, d: &Derived) -> f64 {
        match self.start {
            BurstyStart::Full => d.max_permits,
            BurstyStart::Empty => 0.0,
        }
    }

    #[inline]
    fn stored_cost(&self, _d: &Derived, _stored: f64, _take: f64) -> i64 {
        0
    }
}

/// Java's `Math.min(double, double)`: NaN wins, and −0.0 is below 0.0.
#[inline]
fn java_min(a: f64, b: f64) -> f64 {
    if a.is_nan() {
        a
    } else if a == 0.0 && b == 0.0 && b.is_sign_negative() {
        b
    } else if a <= b {
        a
    } else {
        b
    }
}

/// `now` in whole microseconds (floored), as Guava's stopwatch reads it.
#[inline]
fn micros(now: Nanos) -> i64 {
    // u64::MAX / 1000 < i64::MAX: the cast is exact.
    (now.0 / 1000) as i64
}

/// The time from `now` until the first nanosecond of microsecond `at`, zero if it has passed.
fn until(now: Nanos, at: i64) -> Duration {
    let target = u128::from(at.max(0).unsigned_abs()) * 1000;
    let ns = target.saturating_sub(u128::from(now.0));
    // ns ≤ i64::MAX × 1000 < 2^73, so the seconds fit in a u64.
    Duration::new((ns / 1_000_000_000) as u64, (ns % 1_000_000_000) as u32)
}

/// Guava's `resync`: store the permits earned since `next_free`.
#[inline]
fn resync(st: &mut SmoothState, d: &Derived, at: i64) {
    if at > st.next_free {
        let new_permits = at.saturating_sub(st.next_free) as f64 / d.cool_down;
        st.stored = java_min(d.max_permits, st.stored + new_permits);
        st.next_free = at;
    }
}

/// Guava's `reserveEarliestAvailable` + `reserveAndGetWaitLength`: reserves `cost` permits at
/// `at` and returns the wait in µs.
#[inline]
fn reserve<F: Flavour>(f: &F, st: &mut SmoothState, d: &Derived, cost: u64, at: i64) -> i64 {
    resync(st, d, at);
    let start = st.next_free;
    let permits = cost as f64;
    let spend = java_min(permits, st.stored);
    let fresh = permits - spend;
    let wait = f
        .stored_cost(d, st.stored, spend)
        .saturating_add((fresh * d.interval) as i64);
    st.next_free = st.next_free.saturating_add(wait);
    st.stored -= spend;
    st.seen = at;
    start.saturating_sub(at).max(0)
}

/// The decision's numbers for `st` seen at `at`, without changing it.
#[inline]
fn report(
    st: &SmoothState,
    d: &Derived,
    at: i64,
    now: Nanos,
    allowed: bool,
    wait: i64,
    retry_after: Option<Duration>,
) -> Decision {
    let mut view = *st;
    resync(&mut view, d, at);
    let remaining = if view.next_free <= at {
        view.stored as u64
    } else {
        0
    };
    let full_at = if view.stored == d.max_permits {
        view.next_free
    } else if view.stored > d.max_permits {
        // A rescale by `set_rate` can leave an ulp above the maximum: the next resync, one
        // microsecond on, clamps it.
        view.next_free.saturating_add(1)
    } else {
        // Counted from the real (not resynced) state, so that a resync at `full_at` really
        // reaches `max_permits`: the smallest such microsecond, up to one rounding.
        let missing = d.max_permits - st.stored;
        let mut refill = (missing * d.cool_down).ceil() as i64;
        if st.stored + refill as f64 / d.cool_down < d.max_permits {
            refill = refill.saturating_add(1);
        }
        st.next_free.saturating_add(refill).max(at)
    };
    Decision {
        allowed,
        limit: d.max_permits as u64,
        remaining,
        reset_after: until(now, full_at),
        retry_after,
        wait: Duration::from_micros(wait.max(0).unsigned_abs()),
    }
}

/// The derived values for the key's rate: precomputed unless `set_rate` changed it.
#[inline]
fn derived_for<F: Flavour>(f: &F, rate: f64) -> Derived {
    if rate.to_bits() == f.configured_rate().to_bits() {
        *f.configured()
    } else {
        // A state's rate always passed `derive` in `set_rate`; the fallback is unreachable.
        f.derive(rate).unwrap_or(*f.configured())
    }
}

fn fresh_state<F: Flavour>(f: &F, now: Nanos) -> SmoothState {
    let t = micros(now);
    SmoothState {
        stored: f.initial_stored(f.configured()),
        rate: f.configured_rate(),
        next_free: t,
        seen: t,
    }
}

/// Guava's `tryAcquire(cost, timeout)`; cost 0 probes.
#[inline]
fn try_acquire<F: Flavour>(
    f: &F,
    st: &mut SmoothState,
    d: &Derived,
    cost: u64,
    timeout: i64,
    at: i64,
    now: Nanos,
) -> Decision {
    let earliest = st.next_free.saturating_sub(timeout);
    if earliest > at {
        let retry = (earliest <= LAST_MICROS).then(|| until(now, earliest));
        return report(st, d, at, now, false, 0, retry);
    }
    let wait = if cost == 0 {
        st.next_free.saturating_sub(at).max(0)
    } else {
        reserve(f, st, d, cost, at)
    };
    report(st, d, at, now, true, wait, None)
}

#[inline]
fn apply_smooth<F: Flavour>(f: &F, st: &mut SmoothState, now: Nanos, op: Op) -> Decision {
    let at = micros(now).max(st.seen);
    let d = derived_for(f, st.rate);
    match op {
        Op::Reserve { cost: 0 } => {
            let wait = st.next_free.saturating_sub(at).max(0);
            report(st, &d, at, now, true, wait, None)
        }
        Op::Reserve { cost } => {
            let wait = reserve(f, st, &d, cost, at);
            report(st, &d, at, now, true, wait, None)
        }
        Op::Check { cost } => try_acquire(f, st, &d, cost, 0, at, now),
        Op::TryAcquire { cost, timeout } => {
            let timeout = i64::try_from(timeout.as_micros()).unwrap_or(i64::MAX);
            try_acquire(f, st, &d, cost, timeout, at, now)
        }
        Op::SetRate { rate } => {
            let new = if rate.is_finite() && rate > 0.0 {
                f.derive(rate)
            } else {
                None
            };
            let Some(new) = new else {
                return report(st, &d, at, now, false, 0, None);
            };
            resync(st, &d, at);
            st.stored = if d.max_permits == 0.0 {
                f.initial_stored(&new)
            } else {
                let scaled = st.stored * new.max_permits / d.max_permits;
                if scaled.is_finite() {
                    scaled
                } else {
                    // Guava's product overflowed (maxima near f64::MAX); divide first instead.
                    new.max_permits * (st.stored / d.max_permits)
                }
            };
            st.rate = rate;
            st.seen = at;
            report(st, &new, at, now, true, 0, None)
        }
        // Not supported (leases, refunds, charges): a read-only probe.
        Op::Acquire { .. } | Op::Release { .. } | Op::Refund { .. } | Op::Charge { .. } => {
            let wait = st.next_free.saturating_sub(at).max(0);
            report(st, &d, at, now, true, wait, None)
        }
    }
}

/// Whether `st` at `now` is a key at rest that a fresh key would replace without changing any
/// decision: configured rate, no debt, no later instant seen, and `stored` (resynced at `now`)
/// equal to the fresh value.
fn is_fresh_smooth<F: Flavour>(f: &F, st: &SmoothState, now: Nanos) -> bool {
    let t = micros(now);
    if st.rate.to_bits() != f.configured_rate().to_bits() || st.next_free > t || st.seen > t {
        return false;
    }
    let d = f.configured();
    let mut view = *st;
    resync(&mut view, d, t);
    view.stored == f.initial_stored(d)
}

impl Algorithm for SmoothBursty {
    type State = SmoothState;

    fn name(&self) -> &'static str {
        "smooth_bursty"
    }

    fn fresh(&self, now: Nanos) -> SmoothState {
        fresh_state(self, now)
    }

    #[inline]
    fn apply(&self, state: &mut SmoothState, now: Nanos, op: Op) -> Decision {
        apply_smooth(self, state, now, op)
    }

    /// True for a key at rest (configured rate, no debt, full again) when new keys start full;
    /// when they start empty, only if `max_burst_seconds` is 0 (see the module
    /// documentation): such a key that stores permits never becomes a fresh (empty) one by
    /// waiting.
    fn is_fresh(&self, state: &SmoothState, now: Nanos) -> bool {
        let rests_fresh = self.start == BurstyStart::Full || self.derived.max_permits == 0.0;
        rests_fresh && is_fresh_smooth(self, state, now)
    }

    fn supports(&self, op: OpKind) -> bool {
        matches!(
            op,
            OpKind::Check | OpKind::Reserve | OpKind::TryAcquire | OpKind::SetRate
        )
    }
}

/// Guava's bursty limiter as a user writes it: `{"algorithm": "smooth_bursty", "rate": 5}`
/// ([`crate::algorithm::spec::AlgorithmSpec`]).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmoothBurstySpec {
    /// Permits per second, from [`MIN_SPEC_RATE`](crate::algorithm::MIN_SPEC_RATE) to
    /// [`MAX_SPEC_RATE`](crate::algorithm::MAX_SPEC_RATE).
    pub rate: f64,
    /// Seconds of unused permits that may be saved up (default
    /// [`SmoothBursty::DEFAULT_MAX_BURST_SECONDS`]).
    #[serde(default = "default_max_burst_seconds")]
    pub max_burst_seconds: f64,
    /// How a new key starts: `full` (the default; idle keys become evictable) or `empty`
    /// (exactly Guava's `RateLimiter.create`).
    #[serde(default)]
    pub starts: BurstyStart,
}

fn default_max_burst_seconds() -> f64 {
    SmoothBursty::DEFAULT_MAX_BURST_SECONDS
}

impl SmoothBurstySpec {
    /// Validates the parameters and builds the limiter ([`SmoothBursty::starting`]).
    pub fn build(&self) -> Result<SmoothBursty, ConfigError> {
        let rate = param::spec_rate(self.rate)?;
        SmoothBursty::starting(rate, self.max_burst_seconds, self.starts)
    }
}

impl Parameters for SmoothBursty {
    fn fingerprint(&self) -> [u64; 2] {
        [
            self.rate().to_bits(),
            param::mix(self.max_burst_seconds().to_bits(), self.start() as u64),
        ]
    }

    /// `rate` per second.
    fn quota(&self) -> Option<(f64, Duration)> {
        Some((self.rate(), Duration::from_secs(1)))
    }

    fn share(&self, nodes: u32) -> Result<SmoothBursty, ConfigError> {
        SmoothBursty::starting(
            self.rate() / f64::from(nodes),
            self.max_burst_seconds(),
            self.start(),
        )
    }
}
