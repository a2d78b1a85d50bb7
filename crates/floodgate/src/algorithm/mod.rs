//! The classic rate-limiting algorithms, as pure transition functions.
//!
//! Each algorithm is a small, validated parameter struct implementing [`Algorithm`]: given one
//! key's state, the current instant and an [`Op`], it updates the state in place and returns a
//! [`Decision`]. Algorithms know nothing of storage, keys or time sources: a
//! [`crate::store::Store`] applies the transition atomically, with `now` from its clock.
//!
//! Shared conventions, which every algorithm's module documentation makes precise:
//! - rates are per second, durations are `std::time::Duration`, instants are [`Nanos`];
//! - cost is a whole number of units; cost 0 is a read-only probe that changes nothing (and
//!   passes unless a charge has put the key past its limit);
//! - a refund ([`Op::Refund`]) gives back at most what still counts: never past empty, never
//!   refused; the sliding log, which keeps instants rather than a count, takes none;
//! - a charge ([`Op::Charge`]) counts its cost even past the limit, and a key charged past it
//!   refuses every check, one of cost 0 included, until the excess has refilled or its window
//!   has ended; taken by the fixed window, the buckets and GCRA;
//! - a request whose cost is more than can ever be granted at once is denied with
//!   `retry_after == None`, and consumes nothing;
//! - a denied request consumes nothing unless the module says otherwise;
//! - an instant earlier than one already seen counts as "no time passed": never negative, never
//!   a panic.

use std::time::Duration;

use crate::{ConfigError, Decision, Nanos, Op, OpKind};

#[cfg(test)]
mod charges;
pub mod concurrency;
pub mod fixed_window;
pub mod gcra;
#[cfg(test)]
pub(crate) mod laws;
pub mod leaky_bucket;
pub mod leaky_queue;
#[cfg(test)]
mod refunds;
pub mod sliding_log;
pub mod sliding_window;
pub mod smooth;
pub mod spec;
pub mod token_bucket;
#[cfg(feature = "redis")]
pub(crate) mod twin;
pub mod word;

/// A rate-limiting algorithm: its parameters, and the transition it applies to one key's state.
///
/// Implementations must be deterministic functions of `(state, now, op)`: no clock reads, no
/// randomness, no I/O. That is what lets a remote store run a twin of each one (a Lua script in Redis) and a single
/// conformance suite prove they agree.
pub trait Algorithm: Send + Sync + 'static {
    /// One key's state. Its size is documented per algorithm.
    type State: Clone + Send + std::fmt::Debug + 'static;

    /// The algorithm's name as written in specs (`"token_bucket"`, `"gcra"`, …).
    fn name(&self) -> &'static str;

    /// The state of a key seen for the first time at `now`.
    fn fresh(&self, now: Nanos) -> Self::State;

    /// Applies `op` at `now` to `state`, returning the decision. Must not panic on any input.
    ///
    /// Callers (stores) only pass operations for which [`Algorithm::supports`] is true; an
    /// unsupported operation must leave `state` unchanged.
    fn apply(&self, state: &mut Self::State, now: Nanos, op: Op) -> Decision;

    /// Whether `state`, at `now`, is indistinguishable from `self.fresh(now)` for every future
    /// operation. Stores drop such keys to bound memory, so a `true` here must never be wrong:
    /// eviction must not change any decision.
    fn is_fresh(&self, state: &Self::State, now: Nanos) -> bool;

    /// Whether this algorithm implements operations of this kind. Every algorithm supports
    /// [`OpKind::Check`].
    fn supports(&self, op: OpKind) -> bool {
        op == OpKind::Check
    }

    /// Whether `state` is a state of this algorithm's kind. Always true for a concrete
    /// algorithm; [`spec::AnyAlgorithm`] says false for another algorithm's state (two limiters
    /// of different algorithms configured on one key of one namespace). Stores refuse such an
    /// operation with [`crate::StoreError::StateConflict`] and leave the state as it is: a
    /// silent reset would let two limits reset each other.
    fn owns(&self, _state: &Self::State) -> bool {
        true
    }

    /// The name of the algorithm that wrote `state`, for [`crate::StoreError::StateConflict`]
    /// (by default this algorithm's [`Algorithm::name`]).
    fn state_name(&self, _state: &Self::State) -> &'static str {
        self.name()
    }
}

/// What the engine reads off an algorithm's parameters besides its transition: a fingerprint
/// of them, the quota they allow, and one node's share of them. Every algorithm implements it
/// in its own module; [`spec::AnyAlgorithm`] forwards to it.
pub trait Parameters: Algorithm + Sized {
    /// The parameters as two words, which [`spec::AnyAlgorithm`] mixes with the algorithm's
    /// own number into the fingerprint its states carry: equal parameters give equal words,
    /// and different ones different words (floats by their bits, durations in nanoseconds;
    /// a third parameter is mixed into the second word). The words are
    /// part of a durable store's files: they must not change for the same parameters.
    fn fingerprint(&self) -> [u64; 2];

    /// What the algorithm allows, as `(units, window)`: `rate` per one second for a rate,
    /// `limit` per `window` for a window; `None` for an in-flight limit, which has no window.
    fn quota(&self) -> Option<(f64, Duration)>;

    /// The same algorithm at one node's share of its limit when `nodes` (at least 2) nodes
    /// share it: rates divided by `nodes`, counts divided and rounded down but at least 1,
    /// windows, periods, warm-up and lease times unchanged.
    fn share(&self, nodes: u32) -> Result<Self, ConfigError>;
}

/// The slowest rate a spec takes, per second: one a nanosecond short of 32 years.
pub const MIN_SPEC_RATE: f64 = 1e-9;
/// The fastest rate a spec takes, per second: one a nanosecond, the clock's resolution.
pub const MAX_SPEC_RATE: f64 = 1e9;

/// Validation and conversions shared by the algorithms' constructors and transitions.
pub(crate) mod param {
    use super::{MAX_SPEC_RATE, MIN_SPEC_RATE};
    use crate::ConfigError;
    use std::time::Duration;

    /// A rate as a user writes it in a spec (the buckets', the leaky queue's, the smooth
    /// limiters'): bounded to what a clock in nanoseconds can express, from
    /// [`MIN_SPEC_RATE`] to [`MAX_SPEC_RATE`] per second. Beyond them a bucket would refill
    /// more than once a nanosecond, or less than once in 32 years, and the quota it
    /// announces (`RateLimit-Policy`) would be meaningless. The algorithms themselves take
    /// any finite positive rate; a rate that is not finite is left to their own check.
    pub(crate) fn spec_rate(rate: f64) -> Result<f64, ConfigError> {
        if rate.is_finite() && !(MIN_SPEC_RATE..=MAX_SPEC_RATE).contains(&rate) {
            // Debug writes 1e300 as such, where Display would write 301 digits.
            return Err(ConfigError::invalid(
                "rate",
                format!("{rate:?}"),
                "must be from 1e-9 to 1e9 per second: at most one a nanosecond, the clock's resolution",
            ));
        }
        Ok(rate)
    }

    /// One step of a parameter fingerprint (`Parameters::fingerprint`): mixes `x`
    /// into `h` (two multiplications and a rotation; no allocation).
    pub(crate) fn mix(h: u64, x: u64) -> u64 {
        (h ^ x)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(31)
            .wrapping_mul(0xBF58_476D_1CE4_E5B9)
    }

    /// `d` in whole nanoseconds, `u64::MAX` past 584 years.
    pub(crate) fn nanos(d: Duration) -> u64 {
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
    }

    /// One of `nodes` nodes' part of `count` (`Parameters::share`): `count / nodes`,
    /// rounded down, but at least 1, so that the parts of `nodes` nodes add up to at most
    /// `count` unless `count < nodes` (then each node still admits one).
    pub(crate) fn part(count: u64, nodes: u32) -> u64 {
        (count / u64::from(nodes.max(1))).max(1)
    }

    /// A rate (per second) must be finite and strictly positive.
    pub(crate) fn rate(field: &'static str, value: f64) -> Result<f64, ConfigError> {
        if value.is_finite() && value > 0.0 {
            Ok(value)
        } else {
            Err(ConfigError::invalid(
                field,
                value,
                "must be a finite number above 0",
            ))
        }
    }

    /// A count (capacity, limit, queue length) must be at least 1.
    pub(crate) fn count(field: &'static str, value: u64) -> Result<u64, ConfigError> {
        if value >= 1 {
            Ok(value)
        } else {
            Err(ConfigError::invalid(field, value, "must be at least 1"))
        }
    }

    /// A period or window must be at least one nanosecond and fit in `u64` nanoseconds.
    pub(crate) fn period(field: &'static str, value: Duration) -> Result<u64, ConfigError> {
        match u64::try_from(value.as_nanos()) {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(ConfigError::invalid(
                field,
                format!("{value:?}"),
                "must be between 1ns and 584 years",
            )),
        }
    }
}
