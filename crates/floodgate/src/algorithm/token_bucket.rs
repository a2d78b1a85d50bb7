//! Token bucket: bursts of up to `capacity`, a sustained `rate` per second.
//!
//! # Rule
//!
//! A bucket holds at most `capacity` tokens and starts full. It refills continuously at `rate`
//! tokens per second and never holds more than `capacity`:
//!
//! ```text
//! tokens(now) = min(capacity, tokens(last) + elapsed_secs × rate)
//! elapsed_secs = (now − last in nanoseconds) / 1e9        (0 if now < last)
//! ```
//!
//! A request of cost `n` passes iff `tokens(now) ≥ n` (inclusive: exactly `n` tokens is enough),
//! and then `tokens -= n`. Tokens are an `f64`, so a bucket can hold a fraction of a token; costs
//! are whole units. Rates are tokens per second; instants are [`Nanos`].
//!
//! # Agreement with Stripe's `request_rate_limiter.lua`
//!
//! At whole-second instants this is call for call the script Stripe published with "Scaling your
//! API with rate limiters": same allow/deny and same tokens left, where the script's reply is
//! Redis's integer conversion of its `new_tokens` (truncation, so our [`Decision::remaining`],
//! `floor(tokens)`, is the same number). The arithmetic is the script's, in the same order and in
//! the same `f64`s: `min(capacity, last_tokens + delta × rate)`. The elapsed time is computed as
//! `elapsed_ns / 1e9` (a division, not a multiplication by `1e-9`), which gives exactly `k` for
//! `k` whole seconds. Two deliberate differences, invisible in the script's own use (one call per
//! request, a clock that does not go backwards): a `now` earlier than the last update counts as no
//! time passed and the later instant is kept (the script would store the earlier one), and a cost
//! of 0 is read-only (the script stores the refilled bucket; with whole-number rates the next
//! refill gives the same value, with fractional ones it may differ in the last bit). The test
//! module holds a model of the script as Redis runs it and compares the two on random calls.
//!
//! # Decision
//!
//! - `limit` = `capacity`.
//! - `remaining` = `floor(tokens)` after the decision.
//! - `reset_after` = `(capacity − tokens) / rate` after the decision: the time until the bucket is
//!   full again, which is when it is indistinguishable from a fresh one.
//! - `retry_after`, when denied with `n ≤ capacity`: `(n − tokens) / rate`.
//! - `wait` = 0 (the token bucket polices, it does not shape).
//!
//! Times are the closed forms above rounded up to the nanosecond, then checked against the refill
//! arithmetic itself (and moved a nanosecond later where it falls an ulp short), so that a request
//! retried exactly `retry_after` later passes, and the bucket is full exactly `reset_after` later.
//!
//! # State
//!
//! [`TokenBucketState`]: the tokens at the last update (`f64`) and that instant ([`Nanos`]), 16
//! bytes.
//!
//! # Bound
//!
//! In any closed interval of length `T` seconds, the admitted cost is at most
//! `floor(capacity + rate × T)`: at most `capacity` tokens saved at its start, plus what refills
//! during it (up to floating-point rounding, relative error around 1e-15). The bound is reached
//! by a full bucket drained at once and then every token taken as it arrives.
//!
//! # Edge cases
//!
//! - First request: the bucket is full.
//! - Long idle: refill stops at `capacity`; nothing else accumulates.
//! - Cost 0: a read-only probe; the state is not changed at all. Allowed unless a charge has
//!   left the bucket below zero.
//! - Refund ([`Op::Refund`]): puts `cost` tokens back after folding in the refill up to `now`,
//!   the bucket full at most; always allowed.
//! - Charge ([`Op::Charge`]): takes `cost` tokens after folding in the refill, below zero if
//!   need be (a debt); allowed while the bucket stays at zero or above. A bucket in debt denies
//!   every check until the refill has paid the debt (`retry_after`), so the long-run rate
//!   stays exact.
//! - Cost above `capacity`: can never pass; denied with `retry_after: None`, consumes nothing.
//! - A denied request consumes nothing and changes nothing (the refill up to `now` is computed
//!   for the decision, not recorded), so every store agrees on the state whether or not it saw
//!   the denial.
//! - Clock going backwards: `now` earlier than the last update counts as no time passed, and the
//!   later instant is kept, so a later refill is never counted twice. Times in the decision are
//!   measured from the caller's `now`, so they include the lag back to the kept instant.
//! - Huge values never panic: refill saturates at `capacity` (an infinite refill is fine, a NaN
//!   cannot arise from a finite positive rate), times saturate at `u64::MAX` nanoseconds. Costs
//!   and capacities above 2^53 are compared as `f64`, so they are rounded like the script's.
//!
//! The arithmetic is shared with the leaky bucket meter ([`super::leaky_bucket`]), which is the
//! same bucket seen from the other side: its level is `capacity − tokens`.

use std::time::Duration;

use serde::Deserialize;

use super::word::WordState;
use crate::algorithm::{param, Algorithm, Parameters};
use crate::{ConfigError, Decision, Nanos, Op};

#[cfg(feature = "redis")]
mod twin;

const NANOS_PER_SEC: f64 = 1e9;

/// A token bucket: `capacity` tokens, refilled at `rate` per second. See the [module
/// documentation](self) for the exact rule.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    bucket: Bucket,
}

impl TokenBucket {
    /// A bucket of `capacity` tokens refilled at `rate` tokens per second: `capacity` is the
    /// burst, the most admitted at once from a full bucket.
    ///
    /// `rate` must be finite and above 0 (field `rate`); `capacity` at least 1 (field
    /// `capacity`).
    pub fn new(rate: f64, capacity: u64) -> Result<TokenBucket, ConfigError> {
        Ok(TokenBucket {
            bucket: Bucket::new(rate, capacity)?,
        })
    }

    /// Tokens refilled per second.
    pub fn rate(&self) -> f64 {
        self.bucket.rate
    }

    /// The most tokens the bucket holds, which is the largest cost that can ever pass.
    pub fn capacity(&self) -> u64 {
        self.bucket.capacity
    }

    /// The tokens `state` holds at `now`, refill included (not rounded).
    pub fn tokens(&self, state: &TokenBucketState, now: Nanos) -> f64 {
        self.bucket.tokens_at(state, now)
    }
}

/// One key's token bucket: the tokens it held at its last update, and that instant.
///
/// 16 bytes. Build it with [`Algorithm::fresh`]; read it through [`TokenBucket::tokens`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenBucketState {
    tokens: f64,
    last: Nanos,
}

impl TokenBucketState {
    /// The latest instant at which an operation updated this state; refill counts from it.
    pub fn last_update(&self) -> Nanos {
        self.last
    }

    /// A state from its parts, as a store wrote them down elsewhere (the cached store reads
    /// Redis's state back). `tokens` may be negative: a debt to refill before the next pass.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // used by the cached store
    pub(crate) fn from_parts(tokens: f64, last: Nanos) -> TokenBucketState {
        TokenBucketState { tokens, last }
    }
}

/// The word store keeps a token bucket as one 16-byte word: the last update's instant in the
/// high half, the tokens' `f64` bits in the low half, so the state is kept exactly. The word is
/// never all ones: tokens are never NaN (a finite positive rate and whole costs cannot make
/// one), and all-ones bits are a NaN.
impl WordState for TokenBucketState {
    type Word = u128;

    fn to_word(self) -> u128 {
        u128::from(self.last.0) << 64 | u128::from(self.tokens.to_bits())
    }

    fn from_word(word: u128) -> TokenBucketState {
        TokenBucketState {
            tokens: f64::from_bits(word as u64),
            last: Nanos((word >> 64) as u64),
        }
    }
}

impl Algorithm for TokenBucket {
    type State = TokenBucketState;

    fn name(&self) -> &'static str {
        "token_bucket"
    }

    fn fresh(&self, now: Nanos) -> TokenBucketState {
        self.bucket.fresh(now)
    }

    #[inline]
    fn apply(&self, state: &mut TokenBucketState, now: Nanos, op: Op) -> Decision {
        self.bucket.apply(state, now, op)
    }

    fn supports(&self, op: crate::OpKind) -> bool {
        matches!(
            op,
            crate::OpKind::Check | crate::OpKind::Refund | crate::OpKind::Charge
        )
    }

    fn is_fresh(&self, state: &TokenBucketState, now: Nanos) -> bool {
        self.bucket.is_full(state, now)
    }
}

/// The arithmetic of a bucket that refills at a constant rate up to a capacity, shared by
/// [`TokenBucket`] and [`super::leaky_bucket::LeakyBucket`] (whose level is `capacity − tokens`).
#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    rate: f64,
    capacity: u64,
    capacity_f: f64,
    /// `1e9 / rate`: nanoseconds to refill one token.
    ns_per_token: f64,
}

impl Bucket {
    /// Validates `rate` (field `rate`) and `capacity` (field `capacity`).
    pub(crate) fn new(rate: f64, capacity: u64) -> Result<Bucket, ConfigError> {
        let rate = param::rate("rate", rate)?;
        let capacity = param::count("capacity", capacity)?;
        Ok(Bucket {
            rate,
            capacity,
            capacity_f: capacity as f64,
            ns_per_token: NANOS_PER_SEC / rate,
        })
    }

    pub(crate) fn rate(&self) -> f64 {
        self.rate
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    pub(crate) fn capacity_f64(&self) -> f64 {
        self.capacity_f
    }

    /// Tokens refilled in `elapsed_ns`. Dividing by 1e9 (rather than multiplying by 1e-9) keeps
    /// whole seconds exact; every step is a correctly rounded monotone operation, so the refill
    /// never decreases as time passes.
    #[inline]
    fn refill(&self, elapsed_ns: u64) -> f64 {
        elapsed_ns as f64 / NANOS_PER_SEC * self.rate
    }

    pub(crate) fn fresh(&self, now: Nanos) -> TokenBucketState {
        TokenBucketState {
            tokens: self.capacity_f,
            last: now,
        }
    }

    /// `min(capacity, tokens + refill)`, with no refill for a `now` before the last update.
    #[inline]
    pub(crate) fn tokens_at(&self, state: &TokenBucketState, now: Nanos) -> f64 {
        let filled = state.tokens + self.refill(now.0.saturating_sub(state.last.0));
        if filled < self.capacity_f {
            filled
        } else {
            self.capacity_f
        }
    }

    /// Full at `now`, and `now` not before the last update (a state ahead of `now` would keep
    /// its later instant, which a fresh one would not).
    pub(crate) fn is_full(&self, state: &TokenBucketState, now: Nanos) -> bool {
        now >= state.last && self.tokens_at(state, now) >= self.capacity_f
    }

    #[inline]
    pub(crate) fn apply(&self, state: &mut TokenBucketState, now: Nanos, op: Op) -> Decision {
        match op {
            Op::Check { cost } => self.take(state, now, cost),
            Op::Refund { cost } => self.give_back(state, now, cost),
            Op::Charge { cost } => self.charge(state, now, cost),
            // Not supported: answer as a read-only probe of the same cost.
            other => self.take(&mut state.clone(), now, other.cost()),
        }
    }

    /// [`Op::Refund`]: puts `cost` tokens back, the bucket full at most; the refill up to
    /// `now` is folded in first, as an admission folds it.
    fn give_back(&self, state: &mut TokenBucketState, now: Nanos, cost: u64) -> Decision {
        let lag = state.last.0.saturating_sub(now.0);
        let tokens = self.tokens_at(state, now);
        let tokens = (tokens + cost as f64).min(self.capacity_f);
        if cost > 0 {
            state.tokens = tokens;
            state.last = state.last.max(now);
        }
        let remaining = (tokens as u64).min(self.capacity);
        let reset_after = nanos(lag, self.time_until(tokens, self.capacity_f));
        Decision::allow(self.capacity, remaining, reset_after)
    }

    /// [`Op::Charge`]: takes `cost` tokens, below zero if need be; the refill up to `now` is
    /// folded in first.
    fn charge(&self, state: &mut TokenBucketState, now: Nanos, cost: u64) -> Decision {
        let lag = state.last.0.saturating_sub(now.0);
        let left = self.tokens_at(state, now) - cost as f64;
        if cost > 0 {
            state.tokens = left;
            state.last = state.last.max(now);
        }
        // Negative when in debt: `as` saturates it at 0.
        let remaining = (left as u64).min(self.capacity);
        let reset_after = nanos(lag, self.time_until(left, self.capacity_f));
        if left >= 0.0 {
            Decision::allow(self.capacity, remaining, reset_after)
        } else {
            let retry_after = nanos(lag, self.time_until(left, 0.0));
            Decision::deny(self.capacity, 0, reset_after, Some(retry_after))
        }
    }

    #[inline]
    fn take(&self, state: &mut TokenBucketState, now: Nanos, cost: u64) -> Decision {
        let tokens = self.tokens_at(state, now);
        // Time from the caller's `now` to the instant refill counts from.
        let lag = state.last.0.saturating_sub(now.0);
        let wanted = cost as f64;
        let allowed = cost <= self.capacity && tokens >= wanted;
        let left = if allowed { tokens - wanted } else { tokens };
        // Only an admission is recorded. Recording a denial's refill too would change no
        // decision in exact arithmetic, but in f64 `a + x + y` is not `a + (x + y)`: a bucket
        // that folded its refill at a denial could end a nanosecond or an ulp away from one
        // that did not, and a store that never sees denials (the cached store's Redis) would
        // drift from the memory store by that much.
        if cost > 0 && allowed {
            state.tokens = left;
            state.last = state.last.max(now);
        }
        // `left` is in 0..=capacity as f64, which rounds large capacities up: clamp.
        let remaining = (left as u64).min(self.capacity);
        let reset_after = nanos(lag, self.time_until(left, self.capacity_f));
        if allowed {
            Decision::allow(self.capacity, remaining, reset_after)
        } else {
            let retry_after =
                (cost <= self.capacity).then(|| nanos(lag, self.time_until(tokens, wanted)));
            Decision::deny(self.capacity, remaining, reset_after, retry_after)
        }
    }

    /// The least number of nanoseconds `d` (to within a nanosecond, or a few for waits of
    /// months) such that `from + refill(d) ≥ target`: first the closed form
    /// `(target − from) / rate`, then corrected against `refill` itself.
    fn time_until(&self, from: f64, target: f64) -> u64 {
        if from >= target {
            return 0;
        }
        // Non-negative; `as` saturates an infinite estimate (a tiny rate) at u64::MAX.
        let mut d = ((target - from) * self.ns_per_token).floor() as u64;
        let mut step = 1u64;
        while from + self.refill(d) < target && d < u64::MAX {
            d = d.saturating_add(step);
            step = step.saturating_mul(2);
        }
        d
    }
}

/// `a + b` nanoseconds as a `Duration`, saturating.
fn nanos(a: u64, b: u64) -> Duration {
    Duration::from_nanos(a.saturating_add(b))
}

/// A token bucket as a user writes it: `{"algorithm": "token_bucket", "rate": 100,
/// "capacity": 500}` ([`crate::algorithm::spec::AlgorithmSpec`]).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenBucketSpec {
    /// Tokens per second, from [`MIN_SPEC_RATE`](crate::algorithm::MIN_SPEC_RATE) to
    /// [`MAX_SPEC_RATE`](crate::algorithm::MAX_SPEC_RATE).
    pub rate: f64,
    /// Bucket size (the burst), at least 1.
    pub capacity: u64,
}

impl TokenBucketSpec {
    /// Validates the parameters and builds the bucket ([`TokenBucket::new`]).
    pub fn build(&self) -> Result<TokenBucket, ConfigError> {
        TokenBucket::new(param::spec_rate(self.rate)?, self.capacity)
    }
}

impl Parameters for TokenBucket {
    fn fingerprint(&self) -> [u64; 2] {
        [self.rate().to_bits(), self.capacity()]
    }

    /// `rate` per second.
    fn quota(&self) -> Option<(f64, Duration)> {
        Some((self.rate(), Duration::from_secs(1)))
    }

    fn share(&self, nodes: u32) -> Result<TokenBucket, ConfigError> {
        TokenBucket::new(
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
    use proptest::prelude::*;

    /// A model of what Redis does when it runs Stripe's `request_rate_limiter.lua` with
    /// `EVAL script 2 tokens_key timestamp_key rate capacity now requested`: two keys written
    /// with `SETEX`, lazily expired by Redis, and the reply `{ allowed, new_tokens }` converted
    /// by Redis (a Lua `true` becomes the integer 1, `false` a nil reply, a Lua number an integer
    /// reply by truncation toward zero).
    ///
    /// Numbers pass through Redis strings between calls; Redis formats Lua numbers with 17
    /// significant digits, which round-trips every `f64`, so they are kept as `f64` here.
    #[derive(Debug, Default)]
    struct StripeScript {
        /// `(value, expiry instant in seconds)` of each key, if set.
        tokens: Option<(f64, u64)>,
        timestamp: Option<(f64, u64)>,
    }

    /// Redis's reply: `(allowed, tokens_left)`, `allowed` being `Some(1)` or nil.
    type Reply = (Option<i64>, i64);

    impl StripeScript {
        fn eval(
            &mut self,
            rate: f64,
            capacity: f64,
            now: u64,
            requested: f64,
        ) -> Result<Reply, String> {
            // A key is gone once the clock is past its expiry (Redis compares `now > when`).
            let get = |key: Option<(f64, u64)>| key.filter(|&(_, exp)| now <= exp).map(|k| k.0);
            let now_f = now as f64;

            let fill_time = capacity / rate;
            let ttl = (fill_time * 2.0).floor();
            let last_tokens = get(self.tokens).unwrap_or(capacity);
            let last_refreshed = get(self.timestamp).unwrap_or(0.0);
            let delta = f64::max(0.0, now_f - last_refreshed);
            // Lua's math.min returns its first argument unless a later one is smaller.
            let sum = last_tokens + delta * rate;
            let filled = if sum < capacity { sum } else { capacity };
            let allowed = filled >= requested;
            let new_tokens = if allowed { filled - requested } else { filled };

            // SETEX refuses a TTL below 1 and the script stops there, writing nothing.
            if ttl < 1.0 {
                return Err("ERR invalid expire time in 'setex' command".into());
            }
            let expires = now + ttl as u64;
            self.tokens = Some((new_tokens, expires));
            self.timestamp = Some((now_f, expires));
            Ok((allowed.then_some(1), new_tokens as i64))
        }
    }

    #[test]
    fn a_denial_leaves_the_state_as_it_was() {
        let tb = TokenBucket::new(1.0, 4).unwrap();
        let t0 = Nanos::from_secs(1_000);
        let mut s = tb.fresh(t0);
        assert!(tb.apply(&mut s, t0, check(3)).allowed);
        let before = s;
        // 1.38 tokens at +380 ms: 2 are refused, and nothing is recorded.
        assert!(
            !tb.apply(&mut s, Nanos(t0.0 + 380_000_000), check(2))
                .allowed
        );
        assert_eq!(s, before);
        // So the next admission sees the refill from the last admission, as a store that never
        // saw the denial does.
        let mut unseen = before;
        let t = Nanos(t0.0 + 792_000_000);
        assert_eq!(
            tb.apply(&mut s, t, check(1)),
            tb.apply(&mut unseen, t, check(1))
        );
        assert_eq!(s, unseen);
    }

    #[test]
    fn state_is_16_bytes() {
        assert_eq!(std::mem::size_of::<TokenBucketState>(), 16);
    }

    #[test]
    fn constructor_names_the_bad_field() {
        let err = TokenBucket::new(0.0, 10).unwrap_err();
        assert!(matches!(&err, ConfigError::Invalid { field: "rate", value, .. } if value == "0"));
        let err = TokenBucket::new(f64::NAN, 10).unwrap_err();
        assert!(matches!(err, ConfigError::Invalid { field: "rate", .. }));
        let err = TokenBucket::new(1.0, 0).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Invalid { field: "capacity", value, .. } if value == "0")
        );
        let tb = TokenBucket::new(2.5, 7).unwrap();
        assert_eq!(
            (tb.rate(), tb.capacity(), tb.name()),
            (2.5, 7, "token_bucket")
        );
        assert!(tb.supports(crate::OpKind::Check));
        assert!(!tb.supports(crate::OpKind::Reserve));
    }

    /// Stripe's own example: 100 requests per second, bursts of 500.
    #[test]
    fn stripe_example_rate_100_capacity_500() {
        let tb = TokenBucket::new(100.0, 500).unwrap();
        let t0 = Nanos::from_secs(1_700_000_000);
        let mut s = tb.fresh(t0);
        let mut lua = StripeScript::default();
        let mut both = |s: &mut TokenBucketState, t: Nanos, n: u64| {
            let d = tb.apply(s, t, check(n));
            let (allowed, left) = lua
                .eval(100.0, 500.0, t.0 / 1_000_000_000, n as f64)
                .unwrap();
            assert_eq!((d.allowed, d.remaining as i64), (allowed.is_some(), left));
            d
        };

        // The burst: 500 at once, each leaving one token less.
        let d = both(&mut s, t0, 1);
        assert_eq!(d, Decision::allow(500, 499, ms(10)));
        for left in (0..499).rev() {
            let d = both(&mut s, t0, 1);
            assert_eq!((d.allowed, d.remaining), (true, left));
            // (500 − left) / 100 s, or one nanosecond more where `elapsed / 1e9 × 100` at that
            // exact instant falls an ulp short of a full bucket (402 tokens: 4.020000001 s).
            let closed_form = ms(10 * (500 - left));
            let late = d.reset_after - closed_form;
            assert!(
                late <= Duration::from_nanos(1),
                "{left}: {:?}",
                d.reset_after
            );
        }
        let d = both(&mut s, t0, 1);
        assert_eq!(
            d,
            Decision::deny(500, 0, Duration::from_secs(5), Some(ms(10)))
        );

        // One second later, 100 tokens are back.
        let t1 = Nanos::from_secs(1_700_000_001);
        assert_eq!(tb.tokens(&s, t1), 100.0);
        let d = both(&mut s, t1, 1);
        assert_eq!(d, Decision::allow(500, 99, ms(4010)));
        let d = both(&mut s, t1, 100);
        assert_eq!(d, Decision::deny(500, 99, ms(4010), Some(ms(10))));
        let d = both(&mut s, t1, 99);
        assert_eq!(d, Decision::allow(500, 0, Duration::from_secs(5)));

        // Above capacity: never.
        let d = both(&mut s, t1, 501);
        assert_eq!(d, Decision::deny(500, 0, Duration::from_secs(5), None));

        // A probe changes nothing.
        let before = s;
        let d = tb.apply(&mut s, Nanos::from_secs(1_700_000_003), check(0));
        assert_eq!(d, Decision::allow(500, 200, Duration::from_secs(3)));
        assert_eq!(s, before);

        // Full after five idle seconds, and then indistinguishable from a new key.
        let t6 = Nanos::from_secs(1_700_000_006);
        assert!(!tb.is_fresh(&s, Nanos(t6.0 - 1)));
        assert!(tb.is_fresh(&s, t6));
        let d = both(&mut s, t6, 500);
        assert_eq!(d, Decision::allow(500, 0, Duration::from_secs(5)));
    }

    #[test]
    fn fractional_refill_between_seconds() {
        let tb = TokenBucket::new(4.0, 2).unwrap();
        let mut s = tb.fresh(Nanos::ZERO);
        assert!(tb.apply(&mut s, Nanos::ZERO, check(2)).allowed);
        // 100 ms refill 0.4 tokens: not enough for one.
        let d = tb.apply(&mut s, Nanos::from_millis(100), check(1));
        assert_eq!(d, Decision::deny(2, 0, ms(400), Some(ms(150))));
        // Retrying exactly `retry_after` later passes; a nanosecond earlier does not.
        let mut early = s;
        assert!(
            !tb.apply(&mut early, Nanos(250_000_000 - 1), check(1))
                .allowed
        );
        let d = tb.apply(&mut s, Nanos::from_millis(250), check(1));
        assert_eq!(d, Decision::allow(2, 0, ms(500)));
    }

    #[test]
    fn clock_going_backwards_counts_as_no_time() {
        let tb = TokenBucket::new(1.0, 3).unwrap();
        let mut s = tb.fresh(Nanos::from_secs(10));
        assert!(tb.apply(&mut s, Nanos::from_secs(10), check(3)).allowed);
        // Two seconds back: no refill, and the times include the two seconds of lag.
        let d = tb.apply(&mut s, Nanos::from_secs(8), check(1));
        assert_eq!(
            d,
            Decision::deny(3, 0, Duration::from_secs(5), Some(Duration::from_secs(3)))
        );
        assert_eq!(s.last_update(), Nanos::from_secs(10));
        // Back to 11 s: one second of refill since 10 s, not three since 8 s.
        let d = tb.apply(&mut s, Nanos::from_secs(11), check(1));
        assert_eq!(d, Decision::allow(3, 0, Duration::from_secs(3)));
    }

    #[test]
    fn unsupported_ops_probe_without_changing_state() {
        let tb = TokenBucket::new(1.0, 3).unwrap();
        let mut s = tb.fresh(Nanos::ZERO);
        let before = s;
        let d = tb.apply(&mut s, Nanos::from_secs(1), Op::Reserve { cost: 2 });
        assert_eq!(d, Decision::allow(3, 1, Duration::from_secs(2)));
        let d = tb.apply(
            &mut s,
            Nanos::from_secs(1),
            Op::TryAcquire {
                cost: 5,
                timeout: ms(1),
            },
        );
        assert!(!d.allowed);
        let d = tb.apply(&mut s, Nanos::from_secs(1), Op::SetRate { rate: 9.0 });
        assert_eq!(d, Decision::allow(3, 3, Duration::ZERO));
        assert_eq!(s, before);
    }

    #[test]
    fn extremes_do_not_panic() {
        for (rate, cap) in [
            (1e-300, 1),
            (1e300, u64::MAX),
            (f64::MAX, 1),
            (f64::MIN_POSITIVE, u64::MAX),
        ] {
            let tb = TokenBucket::new(rate, cap).unwrap();
            let mut s = tb.fresh(Nanos(u64::MAX));
            for (t, c) in [
                (u64::MAX, u64::MAX),
                (0, 1),
                (u64::MAX, 1),
                (0, u64::MAX),
                (1, 0),
                (u64::MAX, cap),
            ] {
                let d = tb.apply(&mut s, Nanos(t), check(c));
                laws::assert_well_formed(&d, false);
                assert!(tb.tokens(&s, Nanos(t)) >= 0.0);
            }
        }
        // A rate so low the wait overflows: the retry saturates instead.
        let tb = TokenBucket::new(1e-300, 2).unwrap();
        let mut s = tb.fresh(Nanos::ZERO);
        let _ = tb.apply(&mut s, Nanos::ZERO, check(2));
        let d = tb.apply(&mut s, Nanos::ZERO, check(1));
        assert_eq!(d.retry_after, Some(Duration::from_nanos(u64::MAX)));
    }

    #[test]
    fn fresh_is_sound_after_idle() {
        let tb = TokenBucket::new(10.0, 5).unwrap();
        let events: Vec<_> = [(0, 5), (100, 1), (700, 0), (1_200, 3), (1_201, 1)]
            .iter()
            .map(|&(t, c)| (Nanos::from_millis(t), check(c)))
            .collect();
        assert!(laws::assert_fresh_is_sound(&tb, Nanos::ZERO, &events) >= 2);
    }

    /// `(rate, capacity)` in the domain where the script runs (its TTL, floor(2 × capacity /
    /// rate), must be at least one second), with the script's calls: whole-second steps,
    /// including gaps longer than the TTL, and costs from 0 to above capacity.
    fn stripe_case() -> impl Strategy<Value = (u64, u64, u64, Vec<(u64, u64)>)> {
        (1u64..=300)
            .prop_flat_map(|cap| (1u64..=(2 * cap).min(300), Just(cap)))
            .prop_flat_map(|(rate, cap)| {
                let ttl = 2 * cap / rate;
                let call = (
                    prop_oneof![4 => 0u64..=2, 1 => 0..=ttl + 2],
                    prop_oneof![3 => 0..=rate.min(cap), 1 => 0..=cap + 3],
                );
                (
                    Just(rate),
                    Just(cap),
                    0u64..4_000_000_000,
                    proptest::collection::vec(call, 1..120),
                )
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn agrees_with_stripe_script_at_whole_seconds((rate, cap, start, calls) in stripe_case()) {
            let tb = TokenBucket::new(rate as f64, cap).unwrap();
            let mut state = tb.fresh(Nanos::from_secs(start));
            let mut lua = StripeScript::default();
            let mut now = start;
            for (step, n) in calls {
                now += step;
                let d = tb.apply(&mut state, Nanos::from_secs(now), check(n));
                let (allowed, left) = lua.eval(rate as f64, cap as f64, now, n as f64).unwrap();
                prop_assert_eq!(d.allowed, allowed.is_some(), "t={} n={}", now, n);
                prop_assert_eq!(d.remaining as i64, left, "t={} n={}", now, n);
                prop_assert_eq!(d.remaining, tb.tokens(&state, Nanos::from_secs(now)) as u64);
            }
        }

        #[test]
        fn admits_at_most_capacity_plus_rate_times_t(
            rate in prop_oneof![0.5f64..50.0, (1u32..1000).prop_map(f64::from)],
            cap in 1u64..50,
            steps in proptest::collection::vec(laws::step(40_000_000), 1..80),
            costs in proptest::collection::vec(0u64..12, 80),
        ) {
            let tb = TokenBucket::new(rate, cap).unwrap();
            let times = laws::timeline(1_000_000_000, &steps);
            let events: Vec<_> = times.iter().zip(&costs).map(|(&t, &c)| (t, check(c))).collect();
            let start = Nanos(1_000_000_000);
            let decisions = laws::run(&tb, &mut tb.fresh(start), &events, false);
            let eff = laws::effective_admitted(start, &events, &decisions);
            let admitted = decisions.iter().zip(&events).zip(&eff)
                .filter(|((d, _), _)| d.allowed)
                .map(|((_, e), &t)| (t, cost(&e.1)))
                .collect();
            let exact = |span: u64| cap as f64 + rate * span as f64 / 1e9;
            laws::assert_bound(admitted, |span| exact(span) * (1.0 + 1e-12));
        }

        #[test]
        fn retry_after_and_reset_after_are_exact(
            rate in 0.01f64..1e6,
            cap in 1u64..1000,
            drain in 0u64..1000,
            gap in 0u64..10_000_000_000,
            n in 1u64..1000,
        ) {
            let tb = TokenBucket::new(rate, cap).unwrap();
            let mut s = tb.fresh(Nanos::ZERO);
            let _ = tb.apply(&mut s, Nanos::ZERO, check(drain.min(cap)));
            let now = Nanos(gap);
            let d = tb.apply(&mut s, now, check(n.min(cap)));
            let after = |d: Duration| Nanos(now.0 + d.as_nanos() as u64);
            // Full exactly reset_after later, not a nanosecond before.
            prop_assert!(tb.is_fresh(&s, after(d.reset_after)));
            if d.reset_after > Duration::ZERO {
                prop_assert!(!tb.is_fresh(&s, Nanos(after(d.reset_after).0 - 1)));
            }
            if let Some(retry) = d.retry_after {
                prop_assert!(tb.apply(&mut s.clone(), after(retry), check(n.min(cap))).allowed);
                prop_assert!(!tb.apply(&mut s.clone(), Nanos(after(retry).0 - 1), check(n.min(cap))).allowed);
            }
        }

        #[test]
        fn is_fresh_is_sound(
            rate in 0.5f64..100.0,
            cap in 1u64..20,
            steps in proptest::collection::vec(laws::step(100_000_000), 1..60),
            costs in proptest::collection::vec(0u64..25, 60),
        ) {
            let tb = TokenBucket::new(rate, cap).unwrap();
            let times = laws::timeline(5_000_000_000, &steps);
            let events: Vec<_> = times.iter().zip(&costs).map(|(&t, &c)| (t, check(c))).collect();
            laws::assert_fresh_is_sound(&tb, Nanos(5_000_000_000), &events);
        }

        #[test]
        fn no_input_panics(
            rate in prop_oneof![Just(f64::MIN_POSITIVE), Just(1e-300), 1e-9f64..1e9, Just(1e300), Just(f64::MAX)],
            cap in prop_oneof![1u64..10, Just(u64::MAX), any::<u64>().prop_map(|c| c.max(1))],
            events in proptest::collection::vec(
                (any::<u64>(), prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>(), 0u64..10], 0u8..4),
                1..40,
            ),
        ) {
            let tb = TokenBucket::new(rate, cap).unwrap();
            let mut s = tb.fresh(Nanos(events[0].0));
            for (t, c, kind) in events {
                let op = match kind {
                    0 => Op::Check { cost: c },
                    1 => Op::Reserve { cost: c },
                    2 => Op::TryAcquire { cost: c, timeout: Duration::MAX },
                    _ => Op::SetRate { rate: f64::NAN },
                };
                let d = tb.apply(&mut s, Nanos(t), op);
                laws::assert_well_formed(&d, false);
                let _ = tb.is_fresh(&s, Nanos(t));
            }
        }
    }
}
