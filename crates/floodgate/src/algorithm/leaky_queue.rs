//! Leaky bucket as a queue (a shaper): requests leave one slot apart, at `rate` per second,
//! with at most `queue` of them waiting.
//!
//! This is nginx's `limit_req` with `burst=queue` and without `nodelay`. Where the token bucket
//! and the leaky bucket meter answer "now or never", this one answers "now", "after this wait",
//! or "never": an allowed [`Decision`] carries in [`Decision::wait`] how long the caller must
//! hold the request before going ahead.
//!
//! # Rule
//!
//! Requests are served in arrival order, one *slot* apart; a slot lasts `1/rate` seconds rounded
//! up to a whole nanosecond (`slot = ceil(1e9 / rate)` ns; a quotient within a relative 1e-12 of
//! a whole number counts as that number, so decimal rates keep their exact slot). The state is the
//! instant `next_free` at which the next slot is free (virtual scheduling: no queue is stored,
//! only where it ends).
//!
//! A request of cost `n` arriving at `now` takes `n` consecutive slots, the first at
//! `start = max(now, next_free)`:
//!
//! - it is allowed iff its last slot is at most `queue` slots away:
//!   `(start − now) + (n − 1) × slot ≤ queue × slot` (inclusive);
//! - if allowed, `wait = start − now` (zero when it finds the queue empty) and
//!   `next_free = start + n × slot`;
//! - if refused, nothing changes.
//!
//! So from idle, `1 + queue` requests of cost 1 arriving together are all allowed, with waits
//! `0, slot, 2 × slot, …, queue × slot`, and the next one is refused. [`Op::Reserve`] is the same
//! operation as [`Op::Check`].
//!
//! # Decision
//!
//! - `limit` = `queue + 1`: the most cost allowed at once from an empty queue.
//! - `remaining` = the largest cost that would still be allowed now:
//!   `limit − ceil((next_free − now) / slot)`, at least 0.
//! - `reset_after` = `next_free − now`: the time until the queue is empty.
//! - `retry_after`, when refused with `n ≤ limit`: the time until the request would fit,
//!   `(start − now) + (n − 1 − queue) × slot`.
//! - `wait`: as above for an allowed request; zero for a refusal.
//!
//! # State
//!
//! [`LeakyQueueState`]: the instant the next slot is free ([`Nanos`]), 8 bytes.
//!
//! # Bound
//!
//! Requests arriving within any closed interval of length `T` are allowed at most
//! `queue + 1 + floor(T / slot) ≤ queue + 1 + floor(rate × T)` in cost. Their slots lie between
//! the first arrival and `queue` slots after the last, and slots are at least `slot` apart. This
//! holds whatever order the arrivals come in. The *output* (the instants requests go ahead) never
//! exceeds one unit per slot.
//!
//! # Edge cases
//!
//! - First request: the queue is empty; it goes at once.
//! - Long idle: the queue empties; nothing accumulates (unlike a token bucket, idling earns no
//!   burst beyond `queue + 1`).
//! - Cost 0: a read-only probe, always allowed with no wait; the state is not changed.
//! - Cost above `queue + 1`: can never pass; refused with `retry_after: None`, consumes nothing.
//! - Clock going backwards: slots are absolute instants, so a `now` earlier than one already
//!   seen finds the queue longer by the difference (a longer wait, or a refusal), never shorter;
//!   the wait it is given ends at its slot's instant on the caller's own clock. Nothing drains
//!   and nothing goes negative.
//! - Rates: at most 1e9 per second (one slot per nanosecond); a slot too long for `u64`
//!   nanoseconds, and instants past `u64::MAX`, saturate. Nothing panics.

use std::time::Duration;

use serde::Deserialize;

use super::word::WordState;
use crate::algorithm::{param, Algorithm, Parameters};
use crate::{ConfigError, Decision, Nanos, Op, OpKind};

#[cfg(feature = "redis")]
mod twin;

/// A leaky bucket queue (shaper): one slot every `1/rate` seconds, at most `queue` requests
/// waiting. See the [module documentation](self) for the exact rule.
#[derive(Debug, Clone)]
pub struct LeakyQueue {
    rate: f64,
    queue: u64,
    /// `queue + 1`, saturating.
    limit: u64,
    /// Nanoseconds per slot, at least 1.
    slot: u64,
    /// `queue × slot`: the longest wait a request's last unit may have.
    horizon: u64,
}

impl LeakyQueue {
    /// A queue that lets `rate` requests per second go ahead, with up to `queue` waiting.
    ///
    /// `rate` must be finite, above 0 and at most 1e9 (field `rate`); `queue` may be 0 (no
    /// waiting: requests must arrive at least a slot apart, like nginx's default `burst=0`).
    pub fn new(rate: f64, queue: u64) -> Result<LeakyQueue, ConfigError> {
        let rate = param::rate("rate", rate)?;
        let slot = slot_nanos(rate)?;
        Ok(LeakyQueue {
            rate,
            queue,
            limit: queue.saturating_add(1),
            slot,
            horizon: queue.saturating_mul(slot),
        })
    }

    /// Requests (cost units) released per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// How many requests may wait behind the one being served.
    pub fn queue(&self) -> u64 {
        self.queue
    }

    /// The time between two consecutive slots: `1/rate` rounded up to the nanosecond.
    pub fn slot(&self) -> Duration {
        Duration::from_nanos(self.slot)
    }

    /// Schedules `cost` slots at `now`, writing the state only if `commit` and allowed.
    #[inline]
    fn schedule(
        &self,
        state: &mut LeakyQueueState,
        now: Nanos,
        cost: u64,
        commit: bool,
    ) -> Decision {
        let start = state.next_free.0.max(now.0);
        let ahead = start - now.0;
        if cost == 0 {
            return Decision::allow(self.limit, self.room(ahead), Duration::from_nanos(ahead));
        }
        if cost > self.limit {
            return Decision::deny(
                self.limit,
                self.room(ahead),
                Duration::from_nanos(ahead),
                None,
            );
        }
        // The wait of this request's last unit; cost − 1 ≤ queue, so it fits unless saturated.
        let last = ahead.saturating_add((cost - 1).saturating_mul(self.slot));
        if last <= self.horizon {
            let next_free = start.saturating_add(cost.saturating_mul(self.slot));
            if commit {
                state.next_free = Nanos(next_free);
            }
            let backlog = next_free - now.0;
            Decision {
                allowed: true,
                limit: self.limit,
                remaining: self.room(backlog),
                reset_after: Duration::from_nanos(backlog),
                retry_after: None,
                wait: Duration::from_nanos(ahead),
            }
        } else {
            let retry = Duration::from_nanos(last - self.horizon);
            Decision::deny(
                self.limit,
                self.room(ahead),
                Duration::from_nanos(ahead),
                Some(retry),
            )
        }
    }

    /// The largest cost allowed now with `backlog` ns of queue ahead:
    /// `limit − ceil(backlog / slot)`.
    #[inline]
    fn room(&self, backlog: u64) -> u64 {
        if backlog == 0 {
            self.limit
        } else {
            self.limit.saturating_sub(backlog.div_ceil(self.slot))
        }
    }
}

/// `ceil(1e9 / rate)` nanoseconds, for a rate of at most 1e9 per second.
fn slot_nanos(rate: f64) -> Result<u64, ConfigError> {
    if rate > 1e9 {
        return Err(ConfigError::invalid(
            "rate",
            rate,
            "must be at most 1e9 per second (one slot per nanosecond)",
        ));
    }
    let exact = 1e9 / rate;
    let whole = exact.round();
    let slot = if (exact - whole).abs() <= whole * 1e-12 {
        whole
    } else {
        exact.ceil()
    };
    // At least 1 since rate ≤ 1e9; `as` saturates an infinite quotient (a tiny rate).
    Ok((slot as u64).max(1))
}

/// One key's queue: the instant its next slot is free. 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeakyQueueState {
    next_free: Nanos,
}

impl LeakyQueueState {
    /// The instant the next slot is free; at or before `now`, the queue is empty.
    pub fn next_free(&self) -> Nanos {
        self.next_free
    }
}

/// The word store keeps a leaky queue as the instant its next slot is free, in nanoseconds. An
/// instant of `u64::MAX` (reached only by saturation) is kept as one nanosecond less.
impl WordState for LeakyQueueState {
    type Word = u64;

    fn to_word(self) -> u64 {
        self.next_free.0.min(u64::MAX - 1)
    }

    fn from_word(word: u64) -> LeakyQueueState {
        LeakyQueueState {
            next_free: Nanos(word),
        }
    }
}

impl Algorithm for LeakyQueue {
    type State = LeakyQueueState;

    fn name(&self) -> &'static str {
        "leaky_queue"
    }

    /// An empty queue. (Its instant is the epoch, so a request from a clock behind the one that
    /// created the key still finds it empty.)
    fn fresh(&self, _now: Nanos) -> LeakyQueueState {
        LeakyQueueState {
            next_free: Nanos::ZERO,
        }
    }

    #[inline]
    fn apply(&self, state: &mut LeakyQueueState, now: Nanos, op: Op) -> Decision {
        match op {
            Op::Check { cost } | Op::Reserve { cost } => self.schedule(state, now, cost, true),
            // Not supported: answer as a read-only probe of the same cost.
            other => self.schedule(state, now, other.cost(), false),
        }
    }

    /// The queue is empty at `now`. Sound for later operations at instants from `now` on.
    fn is_fresh(&self, state: &LeakyQueueState, now: Nanos) -> bool {
        state.next_free <= now
    }

    fn supports(&self, op: OpKind) -> bool {
        matches!(op, OpKind::Check | OpKind::Reserve)
    }
}

/// A leaky queue (the shaper) as a user writes it: `{"algorithm": "leaky_queue", "rate": 10,
/// "queue": 5}` ([`crate::algorithm::spec::AlgorithmSpec`]).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeakyQueueSpec {
    /// Release rate per second, from [`MIN_SPEC_RATE`](crate::algorithm::MIN_SPEC_RATE) to
    /// [`MAX_SPEC_RATE`](crate::algorithm::MAX_SPEC_RATE).
    pub rate: f64,
    /// Places in the queue (0: no queue, only what the rate releases now).
    pub queue: u64,
}

impl LeakyQueueSpec {
    /// Validates the parameters and builds the queue ([`LeakyQueue::new`]).
    pub fn build(&self) -> Result<LeakyQueue, ConfigError> {
        LeakyQueue::new(param::spec_rate(self.rate)?, self.queue)
    }
}

impl Parameters for LeakyQueue {
    fn fingerprint(&self) -> [u64; 2] {
        [self.rate().to_bits(), self.queue()]
    }

    /// `rate` per second.
    fn quota(&self) -> Option<(f64, Duration)> {
        Some((self.rate(), Duration::from_secs(1)))
    }

    /// A queue of 0 stays 0: a node's share of a queue may be no queue at all.
    fn share(&self, nodes: u32) -> Result<LeakyQueue, ConfigError> {
        LeakyQueue::new(
            self.rate() / f64::from(nodes),
            self.queue() / u64::from(nodes),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::laws::{self, cost};
    use crate::algorithm::laws::{check, ms};
    use proptest::prelude::*;

    fn allowed(remaining: u64, reset_ms: u64, wait_ms: u64, limit: u64) -> Decision {
        Decision {
            wait: ms(wait_ms),
            ..Decision::allow(limit, remaining, ms(reset_ms))
        }
    }

    /// A model of nginx's `limit_req` accounting for one key, `burst` without `nodelay`, at
    /// whole milliseconds: the excess is kept in thousandths of a request, decays by
    /// `rate × elapsed`, gains 1000 per request, and is refused above `burst × 1000`; the delay
    /// is `excess / rate`. A key's first request creates it with no excess.
    struct NginxLimitReq {
        rate_milli: i64,
        burst_milli: i64,
        /// `(excess, last)` once the key exists.
        node: Option<(i64, i64)>,
    }

    impl NginxLimitReq {
        fn new(rate: u64, burst: u64) -> Self {
            NginxLimitReq {
                rate_milli: rate as i64 * 1000,
                burst_milli: burst as i64 * 1000,
                node: None,
            }
        }

        /// The delay in milliseconds, or `None` when refused (503).
        fn request(&mut self, now_ms: i64) -> Option<i64> {
            let Some((excess, last)) = self.node else {
                self.node = Some((0, now_ms));
                return Some(0);
            };
            let elapsed = now_ms - last;
            let excess = (excess - self.rate_milli * elapsed / 1000 + 1000).max(0);
            if excess > self.burst_milli {
                return None;
            }
            self.node = Some((excess, now_ms));
            Some(excess * 1000 / self.rate_milli)
        }
    }

    #[test]
    fn state_is_8_bytes() {
        assert_eq!(std::mem::size_of::<LeakyQueueState>(), 8);
    }

    #[test]
    fn constructor_validates() {
        let err = LeakyQueue::new(0.0, 3).unwrap_err();
        assert!(matches!(err, ConfigError::Invalid { field: "rate", .. }));
        let err = LeakyQueue::new(2e9, 3).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Invalid { field: "rate", value, .. } if value == "2000000000")
        );
        let q = LeakyQueue::new(3.0, 0).unwrap();
        assert_eq!((q.rate(), q.queue(), q.name()), (3.0, 0, "leaky_queue"));
        assert_eq!(q.slot(), Duration::from_nanos(333_333_334));
        assert_eq!(
            LeakyQueue::new(0.1, 0).unwrap().slot(),
            Duration::from_secs(10)
        );
        assert_eq!(
            LeakyQueue::new(1e9 / 7.0, 0).unwrap().slot(),
            Duration::from_nanos(7)
        );
        assert_eq!(
            LeakyQueue::new(1e9, 0).unwrap().slot(),
            Duration::from_nanos(1)
        );
        assert_eq!(
            LeakyQueue::new(1e-300, 0).unwrap().slot(),
            Duration::from_nanos(u64::MAX)
        );
        assert!(q.supports(OpKind::Check) && q.supports(OpKind::Reserve));
        assert!(!q.supports(OpKind::TryAcquire) && !q.supports(OpKind::SetRate));
    }

    /// 10 per second (100 ms slots), 3 places in the queue.
    #[test]
    fn hand_computed_sequence() {
        let q = LeakyQueue::new(10.0, 3).unwrap();
        let mut s = q.fresh(Nanos::ZERO);
        let t0 = Nanos::from_secs(100);
        // From idle, 1 + 3 go: at once, then one slot apart.
        for k in 0..4u64 {
            let d = q.apply(&mut s, t0, check(1));
            assert_eq!(d, allowed(3 - k, 100 * (k + 1), 100 * k, 4));
        }
        // The fifth would need 4 places ahead of it: refused until one slot has passed.
        let d = q.apply(&mut s, t0, check(1));
        assert_eq!(d, Decision::deny(4, 0, ms(400), Some(ms(100))));
        // 50 ms later: still 3.5 slots ahead, 50 ms to go.
        let d = q.apply(&mut s, Nanos(t0.0 + 50_000_000), check(1));
        assert_eq!(d, Decision::deny(4, 0, ms(350), Some(ms(50))));
        // 100 ms later it fits, last in line.
        let t1 = Nanos(t0.0 + 100_000_000);
        let d = q.apply(&mut s, t1, Op::Reserve { cost: 1 });
        assert_eq!(d, allowed(0, 400, 300, 4));
        assert_eq!(s.next_free(), Nanos(t0.0 + 500_000_000));

        // A probe sees a full queue and changes nothing.
        let d = q.apply(&mut s, t1, check(0));
        assert_eq!(d, allowed(0, 400, 0, 4));
        assert_eq!(s.next_free(), Nanos(t0.0 + 500_000_000));

        // Cost above 4 never fits; cost 2 fits once two slots are free.
        let d = q.apply(&mut s, t1, check(5));
        assert_eq!(d, Decision::deny(4, 0, ms(400), None));
        let d = q.apply(&mut s, t1, check(2));
        assert_eq!(d, Decision::deny(4, 0, ms(400), Some(ms(200))));
        let t3 = Nanos(t0.0 + 300_000_000);
        let d = q.apply(&mut s, t3, check(2));
        assert_eq!(d, allowed(0, 400, 200, 4));

        // Empty again at 700 ms, and then indistinguishable from a new key.
        let t7 = Nanos(t0.0 + 700_000_000);
        assert!(!q.is_fresh(&s, Nanos(t7.0 - 1)));
        assert!(q.is_fresh(&s, t7));
        let d = q.apply(&mut s, t7, check(4));
        assert_eq!(d, allowed(0, 400, 0, 4));
    }

    /// nginx's documented example: `rate=1r/s burst=5`: six at once go 1 s apart, the seventh
    /// is refused.
    #[test]
    fn nginx_burst_example() {
        let q = LeakyQueue::new(1.0, 5).unwrap();
        let mut s = q.fresh(Nanos::ZERO);
        let now = Nanos::from_secs(1_700_000_000);
        let waits: Vec<_> = (0..7).map(|_| q.apply(&mut s, now, check(1))).collect();
        for (k, d) in waits[..6].iter().enumerate() {
            assert!(d.allowed);
            assert_eq!(d.wait, Duration::from_secs(k as u64));
        }
        assert!(!waits[6].allowed);
        assert_eq!(waits[6].retry_after, Some(Duration::from_secs(1)));
    }

    #[test]
    fn queue_zero_spaces_requests_a_slot_apart() {
        let q = LeakyQueue::new(4.0, 0).unwrap();
        let mut s = q.fresh(Nanos::ZERO);
        assert_eq!(
            q.apply(&mut s, Nanos::ZERO, check(1)),
            allowed(0, 250, 0, 1)
        );
        let d = q.apply(&mut s, Nanos::from_millis(100), check(1));
        assert_eq!(d, Decision::deny(1, 0, ms(150), Some(ms(150))));
        assert_eq!(
            q.apply(&mut s, Nanos::from_millis(250), check(1)),
            allowed(0, 250, 0, 1)
        );
    }

    #[test]
    fn clock_going_backwards_lengthens_the_queue() {
        let q = LeakyQueue::new(10.0, 2).unwrap();
        let mut s = q.fresh(Nanos::from_secs(5));
        let t = Nanos::from_secs(5);
        assert_eq!(q.apply(&mut s, t, check(1)), allowed(2, 100, 0, 3));
        // 100 ms earlier, the slot at 5.1 s is 200 ms away: this request waits for it.
        let back = Nanos(t.0 - 100_000_000);
        assert_eq!(q.apply(&mut s, back, check(1)), allowed(0, 300, 200, 3));
        // And one more is refused: its slot (5.2 s) is 300 ms away, 3 slots.
        assert_eq!(
            q.apply(&mut s, back, check(1)),
            Decision::deny(3, 0, ms(300), Some(ms(100)))
        );
    }

    #[test]
    fn unsupported_ops_probe_without_changing_state() {
        let q = LeakyQueue::new(10.0, 2).unwrap();
        let mut s = q.fresh(Nanos::ZERO);
        let d = q.apply(
            &mut s,
            Nanos::ZERO,
            Op::TryAcquire {
                cost: 2,
                timeout: ms(1),
            },
        );
        assert_eq!(d, allowed(1, 200, 0, 3));
        let d = q.apply(&mut s, Nanos::ZERO, Op::SetRate { rate: 1.0 });
        assert_eq!(d, allowed(3, 0, 0, 3));
        assert_eq!(s, q.fresh(Nanos::ZERO));
    }

    #[test]
    fn extremes_do_not_panic() {
        for (rate, queue) in [(1e9, u64::MAX), (1e-300, 0), (1e-300, u64::MAX), (1e9, 0)] {
            let q = LeakyQueue::new(rate, queue).unwrap();
            let mut s = q.fresh(Nanos(u64::MAX));
            for (t, c) in [
                (u64::MAX, u64::MAX),
                (0, 1),
                (u64::MAX, 1),
                (0, u64::MAX),
                (1, 0),
            ] {
                laws::assert_well_formed(&q.apply(&mut s, Nanos(t), check(c)), true);
            }
        }
    }

    fn events(steps: &[i128], costs: &[u64], reserve: &[bool]) -> Vec<(Nanos, Op)> {
        laws::timeline(1_000_000_000, steps)
            .into_iter()
            .zip(costs)
            .zip(reserve)
            .map(|((t, &c), &r)| (t, if r { Op::Reserve { cost: c } } else { check(c) }))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn agrees_with_nginx_at_whole_milliseconds(
            rate in prop::sample::select(vec![1u64, 2, 4, 5, 8, 10, 20, 25, 40, 50, 100, 125, 200, 250, 500, 1000]),
            burst in 0u64..12,
            steps in proptest::collection::vec(0i64..2000, 1..150),
        ) {
            let q = LeakyQueue::new(rate as f64, burst).unwrap();
            let mut nginx = NginxLimitReq::new(rate, burst);
            let mut s = q.fresh(Nanos::ZERO);
            let mut now_ms = 1_700_000_000_000i64;
            for step in steps {
                // Mostly bursts (steps shorter than a slot), sometimes gaps.
                now_ms += step % (2000 / rate as i64 + 1);
                let d = q.apply(&mut s, Nanos::from_millis(now_ms as u64), check(1));
                let expected = nginx.request(now_ms);
                prop_assert_eq!(d.allowed, expected.is_some(), "at {} ms", now_ms);
                if let Some(delay) = expected {
                    prop_assert_eq!(d.wait, ms(delay as u64));
                }
            }
        }

        #[test]
        fn remaining_and_retry_after_are_exact(
            rate in 0.5f64..1000.0,
            queue in 0u64..10,
            steps in proptest::collection::vec(laws::step(20_000_000), 1..40),
            costs in proptest::collection::vec(0u64..6, 40),
        ) {
            let q = LeakyQueue::new(rate, queue).unwrap();
            let mut s = q.fresh(Nanos::ZERO);
            for (t, op) in events(&steps, &costs, &[false; 40]) {
                let d = q.apply(&mut s, t, op);
                let at = |after: Duration| Nanos(t.0 + after.as_nanos() as u64);
                // `remaining` is the largest cost that passes now.
                let probe = |n: u64, when: Nanos| q.apply(&mut s.clone(), when, check(n)).allowed;
                if d.remaining > 0 {
                    prop_assert!(probe(d.remaining, t));
                }
                prop_assert!(d.remaining == d.limit || !probe(d.remaining + 1, t));
                // The queue is empty exactly `reset_after` later.
                prop_assert!(q.is_fresh(&s, at(d.reset_after)));
                if let Some(retry) = d.retry_after {
                    prop_assert!(probe(cost(&op), at(retry)));
                    prop_assert!(!probe(cost(&op), Nanos(at(retry).0 - 1)));
                }
            }
        }

        #[test]
        fn admits_at_most_queue_plus_one_plus_rate_times_t(
            rate in 0.5f64..1000.0,
            queue in 0u64..10,
            steps in proptest::collection::vec(laws::step(20_000_000), 1..80),
            costs in proptest::collection::vec(0u64..4, 80),
            reserve in proptest::collection::vec(any::<bool>(), 80),
        ) {
            let q = LeakyQueue::new(rate, queue).unwrap();
            let events = events(&steps, &costs, &reserve);
            let decisions = laws::run(&q, &mut q.fresh(Nanos::ZERO), &events, true);
            // Raw arrival instants: the bound holds in any arrival order.
            let admitted = decisions.iter().zip(&events)
                .filter(|(d, _)| d.allowed)
                .map(|(_, e)| (e.0 .0, cost(&e.1)))
                .collect();
            let slot = q.slot().as_nanos() as u64;
            laws::assert_bound(admitted, |span| (queue + 1 + span / slot) as f64);
            prop_assert!(slot as f64 >= 1e9 / rate * (1.0 - 1e-12));
        }

        #[test]
        fn is_fresh_is_sound(
            rate in 0.5f64..100.0,
            queue in 0u64..8,
            steps in proptest::collection::vec(laws::step(100_000_000), 1..60),
            costs in proptest::collection::vec(0u64..10, 60),
            reserve in proptest::collection::vec(any::<bool>(), 60),
        ) {
            let q = LeakyQueue::new(rate, queue).unwrap();
            laws::assert_fresh_is_sound(&q, Nanos(1_000_000_000), &events(&steps, &costs, &reserve));
        }

        #[test]
        fn no_input_panics(
            rate in prop_oneof![Just(f64::MIN_POSITIVE), 1e-9f64..1e9, Just(1e9)],
            queue in prop_oneof![0u64..10, Just(u64::MAX), any::<u64>()],
            events in proptest::collection::vec(
                (any::<u64>(), prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>(), 0u64..10], 0u8..4),
                1..40,
            ),
        ) {
            let q = LeakyQueue::new(rate, queue).unwrap();
            let mut s = q.fresh(Nanos(events[0].0));
            for (t, c, kind) in events {
                let op = match kind {
                    0 => Op::Check { cost: c },
                    1 => Op::Reserve { cost: c },
                    2 => Op::TryAcquire { cost: c, timeout: Duration::ZERO },
                    _ => Op::SetRate { rate: -1.0 },
                };
                laws::assert_well_formed(&q.apply(&mut s, Nanos(t), op), true);
            }
        }
    }
}
