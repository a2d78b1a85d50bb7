//! Leaky bucket as a meter: a level that drains at `rate` per second, refusing what would
//! overflow `capacity`.
//!
//! # Rule
//!
//! Each key has a level, empty at first, that drains continuously at `rate` units per second and
//! never below 0:
//!
//! ```text
//! level(now) = max(0, level(last) − elapsed_secs × rate)
//! ```
//!
//! A request of cost `n` passes iff `level(now) + n ≤ capacity` (inclusive: filling the bucket
//! exactly is allowed), and then `level += n`. Rates are units per second; instants are
//! [`Nanos`].
//!
//! This meter polices: it answers at once and never delays. The leaky bucket that *shapes*
//! (queues requests and releases them at `rate`) is [`super::leaky_queue`].
//!
//! # The same bucket as the token bucket
//!
//! With `tokens = capacity − level` (the room left), the rule above is word for word the token
//! bucket's: draining at `rate` is refilling at `rate` up to `capacity`, and
//! `level + n ≤ capacity` is `tokens ≥ n`. So this module keeps the room left and runs the token
//! bucket's arithmetic ([`super::token_bucket`]); every decision is the token bucket's with the
//! same `rate` and `capacity`, and a test checks it. The level is `capacity − tokens`
//! ([`LeakyBucket::level`]).
//!
//! # Decision
//!
//! - `limit` = `capacity`.
//! - `remaining` = `floor(capacity − level)` after the decision.
//! - `reset_after` = `level / rate` after the decision: the time until the bucket is empty,
//!   which is when it is indistinguishable from a fresh one.
//! - `retry_after`, when denied with `n ≤ capacity`: `(level + n − capacity) / rate`.
//! - `wait` = 0.
//!
//! Times are rounded up to the nanosecond and checked against the drain arithmetic, as for the
//! token bucket.
//!
//! # State
//!
//! [`LeakyBucketState`]: the room left at the last update (`f64`) and that instant ([`Nanos`]),
//! 16 bytes.
//!
//! # Bound
//!
//! In any closed interval of length `T` seconds, the admitted cost is at most
//! `floor(capacity + rate × T)`: the bucket can take `capacity` at once from empty, then only
//! what drains (up to floating-point rounding, relative error around 1e-15).
//!
//! # Edge cases
//!
//! - First request: the bucket is empty.
//! - Long idle: the level stops at 0.
//! - Cost 0: a read-only probe; the state is not changed at all. Allowed unless a charge has
//!   filled the bucket past `capacity`.
//! - Refund ([`Op::Refund`]): lowers the level by `cost`, empty at least; always allowed.
//! - Charge ([`Op::Charge`]): raises the level by `cost` even past `capacity`; allowed while it
//!   stays within. Past it, every check is denied until the excess has drained
//!   (`retry_after`).
//! - Cost above `capacity`: can never pass; denied with `retry_after: None`, consumes nothing.
//! - A denied request adds nothing to the level and changes nothing (the drain up to `now` is
//!   computed for the decision, not recorded).
//! - Clock going backwards: counts as no time passed (no drain); the later instant is kept.
//!   Times in the decision are measured from the caller's `now`.
//! - Huge values never panic, as for the token bucket.

use std::time::Duration;

use serde::Deserialize;

use super::word::WordState;
use crate::algorithm::token_bucket::{Bucket, TokenBucketState};
use crate::algorithm::{param, Algorithm, Parameters};
use crate::{ConfigError, Decision, Nanos, Op};

/// A leaky bucket meter: a level of at most `capacity`, drained at `rate` per second. See the
/// [module documentation](self) for the exact rule.
#[derive(Debug, Clone)]
pub struct LeakyBucket {
    bucket: Bucket,
}

impl LeakyBucket {
    /// A bucket holding up to `capacity` units, draining `rate` units per second.
    ///
    /// `rate` must be finite and above 0 (field `rate`); `capacity` at least 1 (field
    /// `capacity`).
    pub fn new(rate: f64, capacity: u64) -> Result<LeakyBucket, ConfigError> {
        Ok(LeakyBucket {
            bucket: Bucket::new(rate, capacity)?,
        })
    }

    /// Units drained per second.
    pub fn rate(&self) -> f64 {
        self.bucket.rate()
    }

    /// The most the bucket holds, which is the largest cost that can ever pass.
    pub fn capacity(&self) -> u64 {
        self.bucket.capacity()
    }

    /// The level of `state` at `now`, drain included (not rounded).
    pub fn level(&self, state: &LeakyBucketState, now: Nanos) -> f64 {
        self.bucket.capacity_f64() - self.bucket.tokens_at(&state.room, now)
    }
}

/// One key's leaky bucket: the room left (`capacity − level`) at its last update, and that
/// instant.
///
/// 16 bytes. Build it with [`Algorithm::fresh`]; read it through [`LeakyBucket::level`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LeakyBucketState {
    room: TokenBucketState,
}

impl LeakyBucketState {
    /// The latest instant at which an operation updated this state; drain counts from it.
    pub fn last_update(&self) -> Nanos {
        self.room.last_update()
    }
}

/// The word store keeps a leaky bucket as its room, a token bucket's word (see
/// [`TokenBucketState`]'s).
impl WordState for LeakyBucketState {
    type Word = u128;

    fn to_word(self) -> u128 {
        self.room.to_word()
    }

    fn from_word(word: u128) -> LeakyBucketState {
        LeakyBucketState {
            room: TokenBucketState::from_word(word),
        }
    }
}

impl Algorithm for LeakyBucket {
    type State = LeakyBucketState;

    fn name(&self) -> &'static str {
        "leaky_bucket"
    }

    fn fresh(&self, now: Nanos) -> LeakyBucketState {
        LeakyBucketState {
            room: self.bucket.fresh(now),
        }
    }

    #[inline]
    fn apply(&self, state: &mut LeakyBucketState, now: Nanos, op: Op) -> Decision {
        self.bucket.apply(&mut state.room, now, op)
    }

    fn supports(&self, op: crate::OpKind) -> bool {
        matches!(
            op,
            crate::OpKind::Check | crate::OpKind::Refund | crate::OpKind::Charge
        )
    }

    fn is_fresh(&self, state: &LeakyBucketState, now: Nanos) -> bool {
        self.bucket.is_full(&state.room, now)
    }
}

/// A leaky bucket (the meter) as a user writes it: `{"algorithm": "leaky_bucket", "rate": 2.5,
/// "capacity": 10}` ([`crate::algorithm::spec::AlgorithmSpec`]).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeakyBucketSpec {
    /// Drain rate per second, from [`MIN_SPEC_RATE`](crate::algorithm::MIN_SPEC_RATE) to
    /// [`MAX_SPEC_RATE`](crate::algorithm::MAX_SPEC_RATE).
    pub rate: f64,
    /// Bucket size, at least 1.
    pub capacity: u64,
}

impl LeakyBucketSpec {
    /// Validates the parameters and builds the bucket ([`LeakyBucket::new`]).
    pub fn build(&self) -> Result<LeakyBucket, ConfigError> {
        LeakyBucket::new(param::spec_rate(self.rate)?, self.capacity)
    }
}

impl Parameters for LeakyBucket {
    fn fingerprint(&self) -> [u64; 2] {
        [self.rate().to_bits(), self.capacity()]
    }

    /// `rate` per second.
    fn quota(&self) -> Option<(f64, Duration)> {
        Some((self.rate(), Duration::from_secs(1)))
    }

    fn share(&self, nodes: u32) -> Result<LeakyBucket, ConfigError> {
        LeakyBucket::new(
            self.rate() / f64::from(nodes),
            param::part(self.capacity(), nodes),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::laws::{self, cost};
    use crate::algorithm::laws::{check, ms};
    use crate::algorithm::token_bucket::TokenBucket;
    use proptest::prelude::*;
    use std::time::Duration;

    #[test]
    fn state_is_16_bytes() {
        assert_eq!(std::mem::size_of::<LeakyBucketState>(), 16);
    }

    #[test]
    fn constructor_names_the_bad_field() {
        let err = LeakyBucket::new(-1.0, 10).unwrap_err();
        assert!(matches!(&err, ConfigError::Invalid { field: "rate", value, .. } if value == "-1"));
        let err = LeakyBucket::new(f64::INFINITY, 10).unwrap_err();
        assert!(matches!(err, ConfigError::Invalid { field: "rate", .. }));
        let err = LeakyBucket::new(1.0, 0).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::Invalid {
                field: "capacity",
                ..
            }
        ));
        let lb = LeakyBucket::new(10.0, 5).unwrap();
        assert_eq!(
            (lb.rate(), lb.capacity(), lb.name()),
            (10.0, 5, "leaky_bucket")
        );
        assert!(!lb.supports(crate::OpKind::Reserve));
    }

    /// 10 units per second drain from a bucket of 5.
    #[test]
    fn hand_computed_sequence() {
        let lb = LeakyBucket::new(10.0, 5).unwrap();
        let mut s = lb.fresh(Nanos::ZERO);
        assert_eq!(lb.level(&s, Nanos::ZERO), 0.0);

        // From empty, 5 units fit at once; level 1..5 drains in 100 ms per unit.
        for level in 1..=5u64 {
            let d = lb.apply(&mut s, Nanos::ZERO, check(1));
            assert_eq!(d, Decision::allow(5, 5 - level, ms(100 * level)));
        }
        // Full: one more overflows until 100 ms have drained one unit.
        let d = lb.apply(&mut s, Nanos::ZERO, check(1));
        assert_eq!(d, Decision::deny(5, 0, ms(500), Some(ms(100))));

        // At 300 ms the level is 2: three units fit, a fourth does not.
        let t = Nanos::from_millis(300);
        assert_eq!(lb.level(&s, t), 2.0);
        let d = lb.apply(&mut s, t, check(4));
        assert_eq!(d, Decision::deny(5, 3, ms(200), Some(ms(100))));
        let d = lb.apply(&mut s, t, check(3));
        assert_eq!(d, Decision::allow(5, 0, ms(500)));

        // Never: above capacity. A probe changes nothing.
        let d = lb.apply(&mut s, t, check(6));
        assert_eq!(d, Decision::deny(5, 0, ms(500), None));
        let before = s;
        let d = lb.apply(&mut s, Nanos::from_millis(450), check(0));
        assert_eq!((d.allowed, d.remaining), (true, 1));
        assert_eq!(s, before);

        // Empty again 500 ms after it was last full, then indistinguishable from a new key.
        assert!(!lb.is_fresh(&s, Nanos::from_millis(799)));
        assert!(lb.is_fresh(&s, Nanos::from_millis(800)));
        assert_eq!(lb.level(&s, Nanos::from_secs(100)), 0.0);
    }

    #[test]
    fn clock_going_backwards_counts_as_no_time() {
        let lb = LeakyBucket::new(1.0, 2).unwrap();
        let mut s = lb.fresh(Nanos::from_secs(10));
        assert!(lb.apply(&mut s, Nanos::from_secs(10), check(2)).allowed);
        let d = lb.apply(&mut s, Nanos::from_secs(9), check(1));
        assert_eq!(
            d,
            Decision::deny(2, 0, Duration::from_secs(3), Some(Duration::from_secs(2)))
        );
        assert_eq!(s.last_update(), Nanos::from_secs(10));
        assert_eq!(lb.level(&s, Nanos::from_secs(11)), 1.0);
    }

    fn events(steps: &[i128], costs: &[u64], ops: &[u8]) -> Vec<(Nanos, Op)> {
        let times = laws::timeline(1_000_000_000, steps);
        times
            .iter()
            .zip(costs)
            .zip(ops)
            .map(|((&t, &c), &k)| {
                let op = match k {
                    0 => Op::Reserve { cost: c },
                    1 => Op::SetRate { rate: 2.0 },
                    _ => check(c),
                };
                (t, op)
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The documented equivalence: every decision is the token bucket's.
        #[test]
        fn decides_as_the_token_bucket(
            rate in 0.1f64..100.0,
            cap in 1u64..40,
            steps in proptest::collection::vec(laws::step(50_000_000), 1..80),
            costs in proptest::collection::vec(0u64..45, 80),
            ops in proptest::collection::vec(0u8..8, 80),
        ) {
            let lb = LeakyBucket::new(rate, cap).unwrap();
            let tb = TokenBucket::new(rate, cap).unwrap();
            let events = events(&steps, &costs, &ops);
            let start = Nanos(1_000_000_000);
            let (mut ls, mut ts) = (lb.fresh(start), tb.fresh(start));
            for &(t, op) in &events {
                prop_assert_eq!(lb.apply(&mut ls, t, op), tb.apply(&mut ts, t, op));
                prop_assert_eq!(lb.level(&ls, t), cap as f64 - tb.tokens(&ts, t));
                prop_assert_eq!(lb.is_fresh(&ls, t), tb.is_fresh(&ts, t));
            }
        }

        #[test]
        fn admits_at_most_capacity_plus_rate_times_t(
            rate in 0.5f64..200.0,
            cap in 1u64..50,
            steps in proptest::collection::vec(laws::step(40_000_000), 1..80),
            costs in proptest::collection::vec(0u64..12, 80),
        ) {
            let lb = LeakyBucket::new(rate, cap).unwrap();
            let events = events(&steps, &costs, &[2; 80]);
            let start = Nanos(1_000_000_000);
            let decisions = laws::run(&lb, &mut lb.fresh(start), &events, false);
            let eff = laws::effective_admitted(start, &events, &decisions);
            let admitted = decisions.iter().zip(&events).zip(&eff)
                .filter(|((d, _), _)| d.allowed)
                .map(|((_, e), &t)| (t, cost(&e.1)))
                .collect();
            laws::assert_bound(admitted, |span| {
                (cap as f64 + rate * span as f64 / 1e9) * (1.0 + 1e-12)
            });
        }

        #[test]
        fn is_fresh_is_sound(
            rate in 0.5f64..100.0,
            cap in 1u64..20,
            steps in proptest::collection::vec(laws::step(100_000_000), 1..60),
            costs in proptest::collection::vec(0u64..25, 60),
        ) {
            let lb = LeakyBucket::new(rate, cap).unwrap();
            let events = events(&steps, &costs, &[2; 60]);
            laws::assert_fresh_is_sound(&lb, Nanos(1_000_000_000), &events);
        }

        #[test]
        fn no_input_panics(
            rate in prop_oneof![Just(f64::MIN_POSITIVE), 1e-9f64..1e9, Just(f64::MAX)],
            cap in prop_oneof![1u64..10, Just(u64::MAX)],
            events in proptest::collection::vec(
                (any::<u64>(), prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>(), 0u64..10]),
                1..40,
            ),
        ) {
            let lb = LeakyBucket::new(rate, cap).unwrap();
            let mut s = lb.fresh(Nanos(events[0].0));
            for (t, c) in events {
                let d = lb.apply(&mut s, Nanos(t), check(c));
                laws::assert_well_formed(&d, false);
                let level = lb.level(&s, Nanos(t));
                prop_assert!((0.0..=cap as f64).contains(&level), "level {}", level);
            }
        }
    }
}
