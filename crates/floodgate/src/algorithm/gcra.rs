//! The generic cell rate algorithm (GCRA), with redis-cell's parameters and `CL.THROTTLE` results.
//!
//! # Parameters
//!
//! [`Gcra::new`]`(max_burst, count, period)` takes redis-cell's names: `count` units per `period`,
//! and a burst of `limit = max_burst + 1` units from a fresh key. From them, once, in the
//! constructor:
//!
//! - the **emission interval** `e = trunc(period_ns as f64 / count as f64)` nanoseconds: the
//!   time one unit "occupies". The float division and truncation are redis-cell's; for periods
//!   under 104 days they equal the integer quotient `period_ns / count`. `e = 0` (more than one
//!   unit per nanosecond) is refused, as redis-cell refuses zero rates;
//! - the **delay variation tolerance** `τ = e × limit` nanoseconds: how far ahead of `now` the
//!   schedule may run. (Textbook GCRA uses `e × max_burst`; redis-cell uses one more emission
//!   interval, so that the burst is `max_burst + 1`. We follow redis-cell.)
//!
//! # Rule
//!
//! The state is one instant, the **theoretical arrival time** `tat` (a fresh key has `tat = 0`).
//! A request of cost `n` at instant `now` (all in nanoseconds):
//!
//! ```text
//! ahead = max(tat − now, 0)          time the key is still "occupied" (redis-cell's ttl)
//! after = ahead + n × e              what it would be if this request passed
//! allowed ⇔ after ≤ τ                (equivalently now ≥ max(tat, now) + n·e − τ)
//! if allowed and n > 0: tat = now + after
//! ```
//!
//! The boundary is inclusive: `after == τ` passes. Arithmetic is exact (`u128`), so no cost or
//! instant overflows; a request that would push `tat` past the largest instant (`u64::MAX` ns,
//! year 2554) is denied.
//!
//! # Decision
//!
//! `limit = max_burst + 1`. `remaining = ⌊(τ − ttl) / e⌋` (0 when `ttl > τ`), where `ttl` is
//! `after` when allowed and `ahead` when denied. `reset_after = ttl` (the key is fresh again at
//! `tat`). `retry_after`, when denied, is `after − τ`: the same request passes from
//! `now + retry_after` on. All exact, in nanoseconds.
//!
//! # `CL.THROTTLE` replies
//!
//! [`Gcra::throttle`] returns the five integers redis-cell replies with ([`CellReply`]), computed as
//! its current code (0.4) computes them (early releases truncated seconds instead of rounding
//! them up):
//!
//! - `limited`: 1 when denied, else 0; `limit`: `max_burst + 1`;
//! - `remaining`: `trunc(µs(τ − ttl) as f64 / µs(e) as f64)` where `µs` truncates nanoseconds to
//!   whole microseconds, and 0 when `τ − ttl ≤ −e`. When `e` is not a whole number of
//!   microseconds this can exceed the exact [`Decision::remaining`] (with `e = 333 333 333 ns` and
//!   `limit = 2 000 001`, a fresh key reports 2 000 002), and when `e < 1 µs` redis-cell divides by
//!   zero and reports `i64::MAX` whenever `τ − ttl ≥ 1 µs`. The reply reproduces both; the
//!   [`Decision`] stays exact;
//! - `retry_after`: `-1` when allowed, and when denied because `n > limit`; otherwise whole seconds
//!   of `after − τ`, plus one when the sub-second part is at least one millisecond (so 2.0005 s
//!   gives 2, 2.001 s gives 3, and 0.5 ms gives 0 even though the request was denied);
//! - `reset_after`: whole seconds of `ttl`, rounded up the same way.
//!
//! redis-cell keeps `tat` in a key that expires at `tat` with millisecond precision; inside that
//! last millisecond it may already see a fresh key where we still see up to 1 ms of `ahead`.
//!
//! # State
//!
//! [`GcraState`] is the theoretical arrival time alone: `size_of::<GcraState>() == 8` bytes.
//!
//! # Bound
//!
//! In any closed interval of length `T` (nanoseconds), the admitted cost is at most
//! `limit + ⌊T / e⌋`: after admissions of total cost `C` whose first is at `t₁` and last at `tₖ`,
//! `tat ≥ t₁ + C·e` and `tat − tₖ ≤ τ = limit·e`, so `C·e ≤ limit·e + (tₖ − t₁)`. The bound is
//! reached by a burst of `limit` followed by one unit every `e`. It holds for any order of
//! instants, a clock going backwards included. Over one `period` this is about
//! `max_burst + 1 + count`.
//!
//! # Edge cases
//!
//! - First request, and any request after an idle time of at least `tat − now`: `ahead = 0`, the
//!   full burst `limit` is available.
//! - Cost 0 is a read-only probe: it reports the numbers above and never changes `tat`. It is
//!   denied only when `ahead > τ`, which happens after a charge past the limit or after the
//!   clock went backwards.
//! - Charge ([`Op::Charge`]): `tat = max(tat, now) + cost × e` even beyond `now + τ` (the
//!   units were used); allowed while `ahead ≤ τ`, else denied with `retry_after = ahead − τ`,
//!   when checks pass again.
//! - Refund ([`Op::Refund`]): moves `tat` back by `cost × e`, never before `now` (a key with
//!   nothing outstanding has nothing to give back); always allowed.
//! - Cost above `limit` (`n·e > τ`): denied with `retry_after: None`, consumes nothing.
//! - Denied requests consume nothing.
//! - Clock going backwards: an 8-byte state cannot remember the latest instant seen, so an earlier
//!   `now` is simply compared with `tat`: the key then looks fuller (more `ahead`), never emptier,
//!   and `reset_after` may exceed `τ`. The admission bound still holds (see above).
//! - Huge values: costs, instants and `τ` are combined in `u128`; nothing overflows or panics.
//!   `Gcra::new` refuses a `max_burst` for which `τ` would not fit in `u64` nanoseconds.
//!
//! # Cost
//!
//! [`Algorithm::apply`] is integer-only and division-free: `remaining`'s division by `e` uses a
//! reciprocal computed in the constructor (exact for every `u64`, Lemire, Kaser and Kurz, *Faster
//! Remainder by Direct Computation*, 2019, theorem 1 with N = 64, F = 128).

use std::time::Duration;

use serde::Deserialize;

use super::word::WordState;
use crate::algorithm::{param, Algorithm, Parameters};
use crate::duration::SpecDuration;
use crate::{ConfigError, Decision, Nanos, Op};

#[cfg(feature = "redis")]
mod twin;

/// The generic cell rate algorithm with redis-cell's parameters: `count` units per `period`, and
/// a burst of `max_burst + 1`. See the [module documentation](self) for the exact rule.
#[derive(Debug, Clone)]
pub struct Gcra {
    max_burst: u64,
    count: u64,
    period: Duration,
    /// `max_burst + 1`.
    limit: u64,
    /// Emission interval `e`, nanoseconds, ≥ 1.
    emission: u64,
    /// Delay variation tolerance `τ = e × limit`, nanoseconds.
    tolerance: u64,
    /// Divides by `e`.
    per_emission: Reciprocal,
}

/// One key's GCRA state: the theoretical arrival time, 8 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GcraState {
    tat: u64,
}

impl GcraState {
    /// The theoretical arrival time: the instant at which the key is back to a full burst.
    pub fn tat(&self) -> Nanos {
        Nanos(self.tat)
    }

    /// A state from its theoretical arrival time, as a store wrote it down elsewhere (the cached
    /// store reads Redis's state back).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // used by the cached store
    pub(crate) fn from_tat(tat: Nanos) -> GcraState {
        GcraState { tat: tat.0 }
    }
}

/// The word store keeps GCRA's state as its theoretical arrival time in nanoseconds. A time of
/// `u64::MAX` (about 584 years after the clock's origin, reached only by saturation) is kept as
/// one nanosecond less.
impl WordState for GcraState {
    type Word = u64;

    fn to_word(self) -> u64 {
        self.tat.min(u64::MAX - 1)
    }

    fn from_word(word: u64) -> GcraState {
        GcraState { tat: word }
    }
}

impl Gcra {
    /// Schedules `cost` units admitted at `at` by someone else, without deciding anything: the
    /// cached store merging what several nodes admitted. `tat = max(tat, at) + cost × e`,
    /// saturating at the largest instant; it may run more than `τ` ahead of now, which refuses
    /// everything until the schedule has caught up.
    pub(crate) fn absorb(&self, state: &mut GcraState, at: Nanos, cost: u64) {
        let tat = u128::from(state.tat.max(at.0)) + u128::from(self.emission) * u128::from(cost);
        state.tat = u64::try_from(tat).unwrap_or(u64::MAX);
    }
}

/// The five integers of a redis-cell `CL.THROTTLE` reply, computed exactly as redis-cell computes
/// them (see the [module documentation](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellReply {
    /// 1 when the request was limited (denied), 0 when allowed.
    pub limited: i64,
    /// `max_burst + 1` (saturated at `i64::MAX`).
    pub limit: i64,
    /// Units still available, as redis-cell computes it (microsecond resolution).
    pub remaining: i64,
    /// Whole seconds until the same request could pass, rounded up from one millisecond; `-1`
    /// when allowed and when it can never pass.
    pub retry_after: i64,
    /// Whole seconds until the key is back to a full burst, rounded up from one millisecond.
    pub reset_after: i64,
}

impl CellReply {
    /// The reply as the array `CL.THROTTLE` returns:
    /// `[limited, limit, remaining, retry_after, reset_after]`.
    pub fn to_array(self) -> [i64; 5] {
        [
            self.limited,
            self.limit,
            self.remaining,
            self.retry_after,
            self.reset_after,
        ]
    }
}

/// The outcome of one transition, in nanoseconds, before it is turned into a reply.
#[derive(Clone, Copy)]
struct Step {
    allowed: bool,
    /// `ahead` if denied, `after` if allowed; at most `u64::MAX`.
    ttl: u64,
    /// When denied and the request could pass later: `after − τ`.
    retry: Option<u64>,
}

impl Gcra {
    /// `count` units per `period`, with a burst of `max_burst + 1` units.
    ///
    /// Errors name the field: `count` must be at least 1 and at most `period` in nanoseconds
    /// (one unit per nanosecond at most); `period` must be between 1 ns and 584 years;
    /// `max_burst + 1` emission intervals must fit in 584 years.
    pub fn new(max_burst: u64, count: u64, period: Duration) -> Result<Gcra, ConfigError> {
        let count = param::count("count", count)?;
        let period_ns = param::period("period", period)?;
        // redis-cell: `Duration::nanoseconds((ns as f64 / n as f64) as i64)`.
        let emission = (period_ns as f64 / count as f64) as u64;
        if emission == 0 {
            return Err(ConfigError::invalid(
                "count",
                count,
                "must be at most the period in nanoseconds (one unit per nanosecond at most)",
            ));
        }
        let limit = max_burst.checked_add(1).ok_or_else(|| {
            ConfigError::invalid("max_burst", max_burst, "must be below 2^64 - 1")
        })?;
        let tolerance = emission.checked_mul(limit).ok_or_else(|| {
            ConfigError::invalid(
                "max_burst",
                max_burst,
                "too large for this rate: (max_burst + 1) × period / count must fit in 584 years",
            )
        })?;
        Ok(Gcra {
            max_burst,
            count,
            period,
            limit,
            emission,
            tolerance,
            per_emission: Reciprocal::new(emission),
        })
    }

    /// The burst above the first unit, as given.
    pub fn max_burst(&self) -> u64 {
        self.max_burst
    }

    /// Units per period, as given.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The period, as given.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// `max_burst + 1`: the most a fresh key grants at once.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The emission interval `e`: `period / count`, truncated to whole nanoseconds.
    pub fn emission_interval(&self) -> Duration {
        Duration::from_nanos(self.emission)
    }

    /// The delay variation tolerance `τ = e × (max_burst + 1)`.
    pub fn delay_variation_tolerance(&self) -> Duration {
        Duration::from_nanos(self.tolerance)
    }

    /// Applies a request of `quantity` units at `now`, exactly as [`Algorithm::apply`] with
    /// [`Op::Check`] does, and returns redis-cell's `CL.THROTTLE` reply for it.
    pub fn throttle(&self, state: &mut GcraState, now: Nanos, quantity: u64) -> CellReply {
        let step = self.step(state, now.0, quantity);
        CellReply {
            limited: i64::from(!step.allowed),
            limit: i64::try_from(self.limit).unwrap_or(i64::MAX),
            remaining: self.cell_remaining(step.ttl),
            retry_after: step.retry.map_or(-1, whole_seconds_up),
            reset_after: whole_seconds_up(step.ttl),
        }
    }

    /// The transition shared by [`Algorithm::apply`] and [`Gcra::throttle`].
    #[inline]
    fn step(&self, state: &mut GcraState, now: u64, cost: u64) -> Step {
        let ahead = state.tat.saturating_sub(now);
        let increment = u128::from(self.emission) * u128::from(cost);
        let after = u128::from(ahead) + increment;
        let tolerance = u128::from(self.tolerance);
        // `tat` must stay representable: `now + after ≤ u64::MAX`.
        let room = self.tolerance.min(u64::MAX - now);
        if after <= u128::from(room) {
            // `after ≤ room ≤ u64::MAX`, and `now + after ≤ u64::MAX`.
            let after = after as u64;
            if cost != 0 {
                state.tat = now + after;
            }
            Step {
                allowed: true,
                ttl: after,
                retry: None,
            }
        } else {
            // `after − τ ≤ ahead ≤ u64::MAX` when `increment ≤ τ`.
            let retry =
                (increment <= tolerance && after > tolerance).then(|| (after - tolerance) as u64);
            Step {
                allowed: false,
                ttl: ahead,
                retry,
            }
        }
    }

    /// [`Op::Refund`]: moves the theoretical arrival time back by `cost` emission intervals,
    /// never before `now` (a key with nothing outstanding has nothing to give back).
    fn give_back(&self, state: &mut GcraState, now: u64, cost: u64) -> Step {
        let ahead = state.tat.saturating_sub(now);
        let back = u128::from(self.emission) * u128::from(cost);
        // `ahead − back` when positive: `ahead` fits, so the difference does.
        let after = u128::from(ahead).saturating_sub(back) as u64;
        if after < ahead {
            state.tat = now + after;
        }
        Step {
            allowed: true,
            ttl: after,
            retry: None,
        }
    }

    /// [`Op::Charge`]: `tat = max(tat, now) + cost × e` (saturating at the largest instant),
    /// beyond `now + τ` if need be; allowed while it stays within.
    fn charge(&self, state: &mut GcraState, now: u64, cost: u64) -> Step {
        if cost > 0 {
            self.absorb(state, Nanos(now), cost);
        }
        let ahead = state.tat.saturating_sub(now);
        let allowed = ahead <= self.tolerance;
        Step {
            allowed,
            ttl: ahead,
            retry: (!allowed).then(|| ahead - self.tolerance),
        }
    }

    /// redis-cell's `remaining`: microseconds, float division, truncation (see module docs).
    fn cell_remaining(&self, ttl: u64) -> i64 {
        let next = i128::from(self.tolerance) - i128::from(ttl);
        if next <= -i128::from(self.emission) {
            return 0;
        }
        // `whole_microseconds` truncates towards zero, as `/` does on integers.
        let next_us = next / 1000;
        let emission_us = self.emission / 1000;
        (next_us as f64 / emission_us as f64) as i64
    }
}

/// Whole seconds, plus one when the rest is at least one millisecond (redis-cell's rounding).
fn whole_seconds_up(nanos: u64) -> i64 {
    let secs = nanos / 1_000_000_000;
    let rest = nanos % 1_000_000_000;
    // `u64::MAX / 10⁹ + 1` fits in `i64`.
    secs as i64 + i64::from(rest >= 1_000_000)
}

impl Algorithm for Gcra {
    type State = GcraState;

    fn name(&self) -> &'static str {
        "gcra"
    }

    fn fresh(&self, _now: Nanos) -> GcraState {
        GcraState { tat: 0 }
    }

    #[inline]
    fn apply(&self, state: &mut GcraState, now: Nanos, op: Op) -> Decision {
        let step = match op {
            Op::Check { cost } => self.step(state, now.0, cost),
            Op::Refund { cost } => self.give_back(state, now.0, cost),
            Op::Charge { cost } => self.charge(state, now.0, cost),
            // Unsupported: a read-only probe.
            _ => self.step(state, now.0, 0),
        };
        Decision {
            allowed: step.allowed,
            limit: self.limit,
            remaining: self
                .per_emission
                .div(self.tolerance.saturating_sub(step.ttl)),
            reset_after: Duration::from_nanos(step.ttl),
            retry_after: step.retry.map(Duration::from_nanos),
            wait: Duration::ZERO,
        }
    }

    fn supports(&self, op: crate::OpKind) -> bool {
        matches!(
            op,
            crate::OpKind::Check | crate::OpKind::Refund | crate::OpKind::Charge
        )
    }

    /// True when `tat ≤ now`. Sound for every later operation at an instant `≥ now` (an 8-byte
    /// state cannot tell an instant earlier than `now` that it was already passed).
    fn is_fresh(&self, state: &GcraState, now: Nanos) -> bool {
        state.tat <= now.0
    }
}

/// Division of any `u64` by a divisor fixed in advance, by one 64×128-bit multiplication:
/// `⌊x / d⌋ = ⌊c·x / 2¹²⁸⌋` with `c = ⌈2¹²⁸ / d⌉` (exact for all `x, d < 2⁶⁴`). For `d = 1`,
/// `c = 2¹²⁸` does not fit: it is stored as 0 and the quotient comes from `identity`.
#[derive(Debug, Clone, Copy)]
struct Reciprocal {
    magic: u128,
    /// `u64::MAX` when `d = 1`, else 0.
    identity: u64,
}

impl Reciprocal {
    fn new(divisor: u64) -> Reciprocal {
        let d = u128::from(divisor.max(1));
        Reciprocal {
            // ⌈2¹²⁸ / d⌉ = ⌊(2¹²⁸ − 1) / d⌋ + 1, which wraps to 0 only for d = 1.
            magic: (u128::MAX / d).wrapping_add(1),
            identity: if d == 1 { u64::MAX } else { 0 },
        }
    }

    #[inline]
    fn div(self, x: u64) -> u64 {
        let x = u128::from(x);
        let low = (u128::from(self.magic as u64) * x) >> 64;
        let high = (self.magic >> 64) * x;
        // high ≤ (2⁶⁴ − 1)², low < 2⁶⁴: the sum fits in u128.
        (((high + low) >> 64) as u64) | (x as u64 & self.identity)
    }
}

/// GCRA as a user writes it, with redis-cell's parameters: `{"algorithm": "gcra",
/// "max_burst": 15, "count": 30, "period": 60}` ([`crate::algorithm::spec::AlgorithmSpec`]).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GcraSpec {
    /// Burst beyond the first request (`limit` = `max_burst` + 1).
    pub max_burst: u64,
    /// Requests per `period`, at least 1.
    pub count: u64,
    /// The period `count` is measured over: seconds, or a string with a unit.
    pub period: SpecDuration,
}

impl GcraSpec {
    /// Validates the parameters and builds the algorithm ([`Gcra::new`]).
    pub fn build(&self) -> Result<Gcra, ConfigError> {
        Gcra::new(self.max_burst, self.count, self.period.0)
    }
}

impl Parameters for Gcra {
    fn fingerprint(&self) -> [u64; 2] {
        [
            self.max_burst(),
            param::mix(self.count(), param::nanos(self.period())),
        ]
    }

    /// `count` per `period`.
    fn quota(&self) -> Option<(f64, Duration)> {
        Some((self.count() as f64, self.period()))
    }

    /// The limit (`max_burst + 1`) and `count` are each divided.
    fn share(&self, nodes: u32) -> Result<Gcra, ConfigError> {
        Gcra::new(
            param::part(self.max_burst() + 1, nodes) - 1,
            param::part(self.count(), nodes),
            self.period(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::laws::check;
    use crate::OpKind;
    use proptest::prelude::*;

    const SEC: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    #[test]
    fn state_is_eight_bytes() {
        assert_eq!(std::mem::size_of::<GcraState>(), 8);
    }

    #[test]
    fn readme_example() {
        // CL.THROTTLE user123 15 30 60 1 → 0 16 15 -1 2
        let g = Gcra::new(15, 30, Duration::from_secs(60)).unwrap();
        let mut s = g.fresh(Nanos::from_secs(1_700_000_000));
        let reply = g.throttle(&mut s, Nanos::from_secs(1_700_000_000), 1);
        assert_eq!(reply.to_array(), [0, 16, 15, -1, 2]);
        assert_eq!(g.emission_interval(), Duration::from_secs(2));
        assert_eq!(g.delay_variation_tolerance(), Duration::from_secs(32));
    }

    /// (offset ms from start, quantity, limited, remaining, reset_after ms, retry_after ms or -1):
    /// redis-cell's own `it_rate_limits` table (limit 5, one per second), whose numbers we
    /// re-derived from the rule.
    #[test]
    fn redis_cell_rate_limit_table() {
        let g = Gcra::new(4, 1, Duration::from_secs(1)).unwrap();
        let start = 1_700_000_000 * SEC;
        let cases: [(u64, u64, bool, u64, u64, i64); 15] = [
            (0, 6, true, 5, 0, -1),
            (0, 1, false, 4, 1000, -1),
            (0, 1, false, 3, 2000, -1),
            (0, 1, false, 2, 3000, -1),
            (0, 1, false, 1, 4000, -1),
            (0, 1, false, 0, 5000, -1),
            (0, 1, true, 0, 5000, 1000),
            (3000, 1, false, 2, 3000, -1),
            (3100, 1, false, 1, 3900, -1),
            (4000, 1, false, 1, 4000, -1),
            (8000, 1, false, 4, 1000, -1),
            (9500, 1, false, 4, 1000, -1),
            (9500, 0, false, 4, 1000, -1),
            (9500, 2, false, 2, 3000, -1),
            (9500, 5, true, 2, 3000, 3000),
        ];
        let mut s = g.fresh(Nanos(start));
        for (i, &(at, q, limited, remaining, reset_ms, retry_ms)) in cases.iter().enumerate() {
            let now = Nanos(start + at * MS);
            let mut copy = s;
            let d = g.apply(&mut copy, now, check(q));
            let r = g.throttle(&mut s, now, q);
            assert_eq!(copy, s, "case {i}: apply and throttle agree on the state");
            assert_eq!(d.allowed, !limited, "case {i}");
            assert_eq!(r.limited, i64::from(limited), "case {i}");
            assert_eq!(d.limit, 5);
            assert_eq!(d.remaining, remaining, "case {i}");
            assert_eq!(r.remaining, remaining as i64, "case {i}");
            assert_eq!(d.reset_after, Duration::from_millis(reset_ms), "case {i}");
            let retry = (retry_ms >= 0).then(|| Duration::from_millis(retry_ms as u64));
            assert_eq!(d.retry_after, retry, "case {i}");
        }
    }

    /// max_burst 2, 1 per 2 s: e = 2 s, limit 3, τ = 6 s. Derived by hand from the rule.
    #[test]
    fn hand_sequence_denial_retry_and_rounding() {
        let g = Gcra::new(2, 1, Duration::from_secs(2)).unwrap();
        let t0 = 1_000 * SEC;
        let mut s = g.fresh(Nanos(t0));
        let run = |s: &mut GcraState, at: u64, q: u64| {
            let mut copy = *s;
            let d = g.apply(&mut copy, Nanos(t0 + at), check(q));
            let r = g.throttle(s, Nanos(t0 + at), q);
            assert_eq!(copy, *s);
            (r.to_array(), d)
        };
        // Fresh: ahead 0, after 2 s.
        let (r, d) = run(&mut s, 0, 1);
        assert_eq!(r, [0, 3, 2, -1, 2]);
        assert_eq!(d.reset_after, Duration::from_secs(2));
        // ahead 2 s, after 6 s = τ: allowed (inclusive boundary).
        let (r, _) = run(&mut s, 0, 2);
        assert_eq!(r, [0, 3, 0, -1, 6]);
        // ahead 5.5 s, after 7.5 s: denied, retry 1.5 s → 2, reset 5.5 s → 6.
        let (r, d) = run(&mut s, 500 * MS, 1);
        assert_eq!(r, [1, 3, 0, 2, 6]);
        assert_eq!(d.retry_after, Some(Duration::from_millis(1500)));
        assert_eq!(d.reset_after, Duration::from_millis(5500));
        // ahead 4.0005 s, after 6.0005 s: denied by 0.5 ms, which redis-cell reports as 0 s.
        let (r, d) = run(&mut s, 1_999_500_000, 1);
        assert_eq!(r, [1, 3, 0, 0, 4]);
        assert_eq!(d.retry_after, Some(Duration::from_micros(500)));
        // Exactly when it said: allowed, tat = t0 + 8 s.
        let (r, _) = run(&mut s, 2 * SEC, 1);
        assert_eq!(r, [0, 3, 0, -1, 6]);
        assert_eq!(s.tat(), Nanos(t0 + 8 * SEC));
        // Cost 4 > limit: never, -1, nothing consumed.
        let (r, d) = run(&mut s, 3_700 * MS, 4);
        assert_eq!(r, [1, 3, 0, -1, 5]);
        assert_eq!(d.retry_after, None);
        assert_eq!(d.reset_after, Duration::from_millis(4300));
        // Probe: allowed, changes nothing.
        let (r, _) = run(&mut s, 3_700 * MS, 0);
        assert_eq!(r, [0, 3, 0, -1, 5]);
        assert_eq!(s.tat(), Nanos(t0 + 8 * SEC));
        // ahead 3.9 s, after 5.9 s.
        let (r, d) = run(&mut s, 4_100 * MS, 1);
        assert_eq!(r, [0, 3, 0, -1, 6]);
        assert_eq!(d.reset_after, Duration::from_millis(5900));
        // Idle until tat = 10 s: full burst again.
        let (r, _) = run(&mut s, 10 * SEC, 3);
        assert_eq!(r, [0, 3, 0, -1, 6]);
        // ahead 3 s: 2 units need 7 s > 6 s; one unit is left.
        let (r, d) = run(&mut s, 13 * SEC, 2);
        assert_eq!(r, [1, 3, 1, 1, 3]);
        assert_eq!(d.remaining, 1);
        let (r, _) = run(&mut s, 13 * SEC, 1);
        assert_eq!(r, [0, 3, 0, -1, 5]);
    }

    #[test]
    fn bound_is_reached() {
        // limit 3, e = 10 ns: a burst of 3, then one every 10 ns: 3 + ⌊T/10⌋ in [0, T].
        let g = Gcra::new(2, 1, Duration::from_nanos(10)).unwrap();
        let mut s = g.fresh(Nanos(0));
        assert!(g.apply(&mut s, Nanos(100), check(3)).allowed);
        for k in 1..=5 {
            assert!(!g.apply(&mut s, Nanos(100 + 10 * k - 1), check(1)).allowed);
            assert!(g.apply(&mut s, Nanos(100 + 10 * k), check(1)).allowed);
        }
        // [100, 150] holds 3 + 5 = limit + ⌊50 / 10⌋.
    }

    #[test]
    fn reply_remaining_reproduces_microsecond_truncation() {
        // e = 333 333 333 ns: µs(τ) / µs(e) = 666 666 999 333 / 333 333 = 2 000 002.
        let g = Gcra::new(2_000_000, 3, Duration::from_secs(1)).unwrap();
        let mut s = g.fresh(Nanos(0));
        let r = g.throttle(&mut s, Nanos(5 * SEC), 0);
        assert_eq!(r.remaining, 2_000_002);
        let d = g.apply(&mut s, Nanos(5 * SEC), check(0));
        assert_eq!(d.remaining, 2_000_001);
        assert_eq!(d.limit, 2_000_001);
        // e < 1 µs: redis-cell divides by zero.
        let g = Gcra::new(10, 2_000_000, Duration::from_secs(1)).unwrap();
        let r = g.throttle(&mut g.fresh(Nanos(0)), Nanos(SEC), 1);
        assert_eq!(r.remaining, i64::MAX);
        let d = g.apply(&mut g.fresh(Nanos(0)), Nanos(SEC), check(1));
        assert_eq!(d.remaining, 10);
    }

    #[test]
    fn constructor_validates_and_names_fields() {
        let field = |r: Result<Gcra, ConfigError>| match r {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("expected an error, got {other:?}"),
        };
        assert_eq!(field(Gcra::new(1, 0, Duration::from_secs(1))), "count");
        assert_eq!(field(Gcra::new(1, 1, Duration::ZERO)), "period");
        assert_eq!(field(Gcra::new(1, 11, Duration::from_nanos(10))), "count");
        assert_eq!(
            field(Gcra::new(u64::MAX, 1, Duration::from_secs(1))),
            "max_burst"
        );
        assert_eq!(
            field(Gcra::new(1 << 40, 1, Duration::from_secs(1))),
            "max_burst"
        );
        let g = Gcra::new(0, 10, Duration::from_nanos(10)).unwrap();
        assert_eq!(
            (g.limit(), g.emission_interval()),
            (1, Duration::from_nanos(1))
        );
        assert_eq!(
            (g.max_burst(), g.count(), g.period()),
            (0, 10, Duration::from_nanos(10))
        );
        let e = Gcra::new(1, 0, Duration::from_secs(1)).unwrap_err();
        assert!(e.to_string().contains("count") && e.to_string().contains('0'));
    }

    #[test]
    fn unsupported_ops_are_probes() {
        let g = Gcra::new(3, 1, Duration::from_secs(1)).unwrap();
        let mut s = g.fresh(Nanos(0));
        let _ = g.apply(&mut s, Nanos(SEC), check(2));
        let before = s;
        for op in [
            Op::Reserve { cost: 1 },
            Op::TryAcquire {
                cost: 1,
                timeout: Duration::from_secs(1),
            },
            Op::SetRate { rate: 2.0 },
        ] {
            assert!(!g.supports(op.kind()));
            let d = g.apply(&mut s, Nanos(SEC), op);
            assert_eq!(s, before);
            assert_eq!(d, g.apply(&mut s.clone(), Nanos(SEC), check(0)));
        }
        assert!(g.supports(OpKind::Check));
        assert_eq!(g.name(), "gcra");
    }

    #[test]
    fn backwards_clock_looks_fuller_never_emptier() {
        let g = Gcra::new(1, 1, Duration::from_secs(1)).unwrap(); // limit 2, τ = 2 s
        let mut s = g.fresh(Nanos(0));
        assert!(g.apply(&mut s, Nanos(10 * SEC), check(2)).allowed); // tat = 12 s
        let d = g.apply(&mut s, Nanos(5 * SEC), check(1));
        assert!(!d.allowed);
        assert_eq!(d.reset_after, Duration::from_secs(7));
        assert_eq!(d.retry_after, Some(Duration::from_secs(6)));
        assert_eq!(d.remaining, 0);
        // Even a probe is refused: the key is more than full as seen from 5 s.
        assert!(!g.apply(&mut s, Nanos(5 * SEC), check(0)).allowed);
        assert_eq!(s.tat(), Nanos(12 * SEC));
    }

    #[test]
    fn extremes_do_not_overflow() {
        let g = Gcra::new(u64::MAX / 2 - 1, 1, Duration::from_nanos(2)).unwrap();
        assert_eq!(
            g.delay_variation_tolerance(),
            Duration::from_nanos(u64::MAX - 1)
        );
        let mut s = g.fresh(Nanos(0));
        let d = g.apply(&mut s, Nanos(u64::MAX - 5), check(3));
        assert!(!d.allowed, "tat would pass u64::MAX");
        assert_eq!(d.retry_after, None);
        let d = g.apply(&mut s, Nanos(u64::MAX - 6), check(3));
        assert!(d.allowed);
        assert_eq!(s.tat(), Nanos(u64::MAX));
        let d = g.apply(&mut s, Nanos(0), check(u64::MAX));
        assert!(!d.allowed);
        let r = g.throttle(&mut s, Nanos(0), u64::MAX);
        assert_eq!((r.limit, r.retry_after), (i64::MAX, -1));
        assert_eq!(whole_seconds_up(u64::MAX), 18_446_744_074);
    }

    #[test]
    fn reciprocal_is_exact_at_edges() {
        for d in [
            1,
            2,
            3,
            7,
            1000,
            333_333_333,
            u64::MAX / 3,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let r = Reciprocal::new(d);
            for x in [0, 1, d - 1, d, d.wrapping_add(1), u64::MAX - 1, u64::MAX] {
                assert_eq!(r.div(x), x / d, "{x} / {d}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn reciprocal_matches_division(d in 1u64.., x in any::<u64>(), small in 0u64..1_000_000) {
            let r = Reciprocal::new(d);
            prop_assert_eq!(r.div(x), x / d);
            prop_assert_eq!(r.div(small), small / d);
            prop_assert_eq!(r.div(x.saturating_mul(small) ), x.saturating_mul(small) / d);
        }

        /// Any closed interval of length T admits at most limit + ⌊T / e⌋, whatever the order
        /// of the instants (steps may go backwards).
        #[test]
        fn admission_bound(
            max_burst in 0u64..5,
            count in 1u64..5,
            period in 1u64..40,
            steps in prop::collection::vec((-12i64..30, 0u64..8), 1..120),
        ) {
            let Ok(g) = Gcra::new(max_burst, count, Duration::from_nanos(period)) else {
                return Ok(());
            };
            let mut s = g.fresh(Nanos(0));
            let mut now = 1_000u64;
            let mut admitted = Vec::new();
            for (dt, cost) in steps {
                now = now.saturating_add_signed(dt);
                if g.apply(&mut s, Nanos(now), check(cost)).allowed && cost > 0 {
                    admitted.push((now, cost));
                }
            }
            let e = g.emission;
            for t in [0, 1, e - 1, e, 3 * e + 1, period, 2 * period, 50] {
                let bound = g.limit() + t / e;
                for &(a, _) in &admitted {
                    let sum: u64 = admitted
                        .iter()
                        .filter(|(at, _)| *at >= a && *at <= a + t)
                        .map(|(_, c)| c)
                        .sum();
                    prop_assert!(sum <= bound, "T={} from {}: {} > {}", t, a, sum, bound);
                }
            }
        }

        /// Once `is_fresh`, the state and a fresh one decide alike at every later instant ≥ now.
        #[test]
        fn is_fresh_is_sound(
            max_burst in 0u64..4,
            period_ms in 1u64..50,
            before in prop::collection::vec((0u64..20, 0u64..6), 0..40),
            after in prop::collection::vec((0u64..20, 0u64..6), 1..40),
        ) {
            let g = Gcra::new(max_burst, 1, Duration::from_millis(period_ms)).unwrap();
            let mut s = g.fresh(Nanos(0));
            let mut now = 0u64;
            for (dt, cost) in before {
                now += dt * MS;
                let _ = g.apply(&mut s, Nanos(now), check(cost));
            }
            // Move on until the state is fresh.
            while !g.is_fresh(&s, Nanos(now)) {
                now += MS;
            }
            let mut f = g.fresh(Nanos(now));
            for (dt, cost) in after {
                now += dt * MS / 2;
                let a = g.apply(&mut s, Nanos(now), check(cost));
                let b = g.apply(&mut f, Nanos(now), check(cost));
                prop_assert_eq!(a, b);
                prop_assert_eq!(
                    g.throttle(&mut s.clone(), Nanos(now), cost),
                    g.throttle(&mut f.clone(), Nanos(now), cost)
                );
            }
        }

        /// No input panics: extreme parameters, costs and instants, backwards included.
        #[test]
        fn never_panics(
            max_burst in prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>(), 0u64..10],
            count in prop_oneof![Just(1u64), Just(u64::MAX), any::<u64>()],
            period in prop_oneof![Just(1u64), Just(u64::MAX), any::<u64>()],
            ops in prop::collection::vec(
                (prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()],
                 prop_oneof![Just(0u64), Just(1u64), Just(u64::MAX), any::<u64>()]),
                1..30,
            ),
        ) {
            let Ok(g) = Gcra::new(max_burst, count, Duration::from_nanos(period)) else {
                return Ok(());
            };
            let mut s = g.fresh(Nanos(0));
            for (now, cost) in ops {
                let d = g.apply(&mut s, Nanos(now), check(cost));
                prop_assert!(d.remaining <= g.limit() || d.remaining == 0);
                g.throttle(&mut s, Nanos(now), cost);
                g.is_fresh(&s, Nanos(now));
            }
        }
    }
}
