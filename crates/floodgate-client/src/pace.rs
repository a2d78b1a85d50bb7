//! Pacing by what the server announced: one [`Pacer`] per quota (policy and partition).
//!
//! A pacer is a local token bucket shaped like the server's quota and corrected by every
//! answer:
//! - **capacity** `q` and **refill** `q / w · headroom` per second, when the policy gives both
//!   (IETF `RateLimit-Policy`, or `X-RateLimit-Limit` with a `w`); without a window nothing
//!   refills between answers and the quota is restored only at its reset;
//! - **sync**: an answer with `r` left while `n` other requests are in flight can only lower
//!   the tokens, to `r − n`: requests on different connections are not processed in the order
//!   they were sent, so `r − n` bounds the count without being it. When the last request in
//!   flight is answered, the tokens become the least `r` answered since the host was last
//!   idle: the count after the request the server processed last;
//! - **exhaustion**: an answer with `r = 0` stops the pacer until its reset `t` (or, without
//!   one, one window, or [`PROBE_INTERVAL`]): nothing refills meanwhile, because the server
//!   has said nothing will pass before then. At that instant the quota is whole again;
//! - **reset**: when a reset passes, the tokens are at least `q` minus the requests in flight
//!   (those sent just before the reset may be counted in the new window).
//!
//! A request may go when every pacer of its host has a token; [`Pacer::earliest`] says when
//! that will be. Requests never wait on a pacer that no answer has mentioned for
//! [`Pacer::is_stale`]: a server that stops sending a policy stops pacing by it.

use std::time::Duration;

use floodgate::Nanos;

use crate::signal::Quota;

/// How long a pacer told "nothing left" with no reset and no window waits before letting one
/// request probe.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// How long a pacer is kept without any answer mentioning it, beyond its window and reset.
pub const STALE_AFTER: Duration = Duration::from_secs(60);

/// One quota's pacing state.
#[derive(Clone, Debug)]
pub struct Pacer {
    policy: String,
    partition: Option<Vec<u8>>,
    limit: Option<u64>,
    window: Option<Duration>,
    /// `None`: nothing known yet, requests are not held back.
    tokens: Option<f64>,
    refilled_at: Nanos,
    exhausted_until: Option<Nanos>,
    reset_at: Option<Nanos>,
    /// The least `r` answered since the host last had nothing in flight.
    burst_min: Option<u64>,
    heard_at: Nanos,
}

impl Pacer {
    /// A pacer for the quota `quota` names, knowing nothing yet.
    pub fn new(quota: &Quota, now: Nanos) -> Pacer {
        Pacer {
            policy: quota.policy.clone(),
            partition: quota.partition.clone(),
            limit: None,
            window: None,
            tokens: None,
            refilled_at: now,
            exhausted_until: None,
            reset_at: None,
            burst_min: None,
            heard_at: now,
        }
    }

    /// True when this pacer stands for `quota`'s policy and partition.
    pub fn is_for(&self, quota: &Quota) -> bool {
        self.policy == quota.policy && self.partition == quota.partition
    }

    /// The policy's name.
    pub fn policy(&self) -> &str {
        &self.policy
    }

    /// The partition key, if the server sent one.
    pub fn partition(&self) -> Option<&[u8]> {
        self.partition.as_deref()
    }

    /// The quota `q`, if known.
    pub fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// The window `w`, if known.
    pub fn window(&self) -> Option<Duration> {
        self.window
    }

    /// The requests this pacer believes are left, if it knows.
    pub fn tokens(&self) -> Option<f64> {
        self.tokens
    }

    /// When the server said nothing is left until, if it did and that is still ahead.
    pub fn exhausted_until(&self) -> Option<Nanos> {
        self.exhausted_until
    }

    /// Refill rate in requests per second: `q / w · headroom`.
    fn rate(&self, headroom: f64) -> Option<f64> {
        let (q, w) = (self.limit?, self.window?);
        Some(q as f64 / w.as_secs_f64().max(1e-9) * headroom)
    }

    fn refill(&mut self, now: Nanos, headroom: f64, in_flight: u64) {
        let whole_again = self.limit.map(|q| q as f64 - in_flight as f64);
        if let Some(until) = self.exhausted_until {
            if now < until {
                return;
            }
            self.exhausted_until = None;
            self.reset_at = None;
            self.tokens = whole_again.or(Some(1.0));
            self.refilled_at = now;
            return;
        }
        if self.reset_at.is_some_and(|at| now >= at) {
            self.reset_at = None;
            if let (Some(t), Some(whole)) = (self.tokens, whole_again) {
                self.tokens = Some(t.max(whole));
            }
        }
        if let (Some(t), Some(rate)) = (self.tokens, self.rate(headroom)) {
            let elapsed = now.saturating_since(self.refilled_at).as_secs_f64();
            let cap = self.limit.map_or(f64::MAX, |q| q as f64);
            self.tokens = Some((t + elapsed * rate).min(cap.max(t)));
        }
        self.refilled_at = self.refilled_at.max(now);
    }

    /// The earliest instant a request may be sent by this pacer (`now` when it may go now),
    /// with `in_flight` requests of the host sent and not answered yet.
    pub fn earliest(&mut self, now: Nanos, headroom: f64, in_flight: u64) -> Nanos {
        self.refill(now, headroom, in_flight);
        if let Some(until) = self.exhausted_until {
            return until;
        }
        match self.tokens {
            None => now,
            Some(t) if t >= 1.0 => now,
            Some(t) => match (self.rate(headroom), self.reset_at) {
                (Some(rate), _) => {
                    now.saturating_add(Duration::from_secs_f64(((1.0 - t) / rate).min(1e9)))
                }
                (None, Some(at)) => at,
                (None, None) => now.saturating_add(PROBE_INTERVAL),
            },
        }
    }

    /// Counts a request sent now (after [`Pacer::earliest`] allowed it).
    pub fn sent(&mut self) {
        if let Some(t) = &mut self.tokens {
            *t -= 1.0;
        }
    }

    /// Learns from `quota`, read from an answer at `now` while `in_flight` other requests of
    /// the host are still unanswered.
    pub fn heard(&mut self, quota: &Quota, in_flight: u64, now: Nanos, headroom: f64) {
        self.heard_at = now;
        if quota.limit.is_some() {
            self.limit = quota.limit;
        }
        if quota.window.is_some() {
            self.window = quota.window;
        }
        let Some(r) = quota.remaining else {
            return;
        };
        self.refill(now, headroom, in_flight);
        let least = self.burst_min.map_or(r, |m| m.min(r));
        if in_flight == 0 {
            // Every request sent is answered: the last one the server processed has the least
            // count, whatever order the answers arrived in.
            self.tokens = Some(least as f64);
            self.burst_min = None;
        } else {
            // The requests in flight may be processed before or after this one (requests on
            // different connections are not processed in the order they were sent), and each
            // will take one: `r − in_flight` bounds what is left.
            let bound = r as f64 - in_flight as f64;
            self.tokens = Some(self.tokens.map_or(bound, |t| t.min(bound)));
            self.burst_min = Some(least);
        }
        self.refilled_at = now;
        self.reset_at = quota.reset.map(|t| now.saturating_add(t));
        self.exhausted_until = (r == 0).then(|| {
            let wait = quota.reset.or(self.window).unwrap_or(PROBE_INTERVAL);
            now.saturating_add(wait)
        });
    }

    /// True when no answer has mentioned this pacer for [`STALE_AFTER`] beyond its window and
    /// its pending reset: it no longer holds requests back and may be dropped.
    pub fn is_stale(&self, now: Nanos) -> bool {
        let horizon = self
            .heard_at
            .max(self.exhausted_until.unwrap_or(Nanos::ZERO))
            .max(self.reset_at.unwrap_or(Nanos::ZERO))
            .saturating_add(self.window.unwrap_or(Duration::ZERO))
            .saturating_add(STALE_AFTER);
        now > horizon
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn quota(limit: Option<u64>, window: Option<u64>, r: Option<u64>, t: Option<u64>) -> Quota {
        Quota {
            limit,
            window: window.map(Duration::from_secs),
            remaining: r,
            reset: t.map(Duration::from_secs),
            ..Quota::new("default", None)
        }
    }

    fn ms(n: u64) -> Nanos {
        Nanos::from_millis(n)
    }

    #[test]
    fn unknown_quota_holds_nothing_back() {
        let q = quota(None, None, None, None);
        let mut p = Pacer::new(&q, ms(0));
        assert_eq!(p.earliest(ms(5), 1.0, 0), ms(5));
    }

    #[test]
    fn syncs_to_the_servers_count_minus_requests_in_flight() {
        let mut p = Pacer::new(&quota(None, None, None, None), ms(0));
        // 10 left, 4 others in flight.
        p.heard(&quota(Some(50), Some(1), Some(10), Some(1)), 4, ms(10), 1.0);
        assert_eq!(p.tokens(), Some(6.0));
        // With others in flight, a higher count is only a bound: it does not raise the tokens.
        p.heard(&quota(Some(50), Some(1), Some(40), Some(1)), 3, ms(10), 1.0);
        assert_eq!(p.tokens(), Some(6.0));
        // A lower one lowers them.
        p.heard(&quota(Some(50), Some(1), Some(5), Some(1)), 2, ms(10), 1.0);
        assert_eq!(p.tokens(), Some(3.0));
        // The last answer of the burst arrives with a stale, high count: the least count of
        // the burst is what is left.
        p.heard(&quota(Some(50), Some(1), Some(44), Some(1)), 1, ms(10), 1.0);
        p.heard(&quota(Some(50), Some(1), Some(45), Some(1)), 0, ms(10), 1.0);
        assert_eq!(p.tokens(), Some(5.0));
        // Alone on the wire, the answer is the count.
        p.heard(&quota(Some(50), Some(1), Some(40), Some(1)), 0, ms(10), 1.0);
        assert_eq!(p.tokens(), Some(40.0));
    }

    #[test]
    fn exhaustion_holds_until_the_reset_then_restores_the_quota() {
        let mut p = Pacer::new(&quota(None, None, None, None), ms(0));
        p.heard(&quota(Some(50), Some(1), Some(0), Some(2)), 0, ms(100), 1.0);
        assert_eq!(p.earliest(ms(200), 1.0, 0), ms(2100));
        assert_eq!(p.earliest(ms(2099), 1.0, 0), ms(2100));
        assert_eq!(p.earliest(ms(2100), 1.0, 0), ms(2100));
        assert_eq!(p.tokens(), Some(50.0));
    }

    #[test]
    fn paces_at_the_policy_rate_once_the_burst_is_spent() {
        let mut p = Pacer::new(&quota(None, None, None, None), ms(0));
        p.heard(&quota(Some(10), Some(1), Some(2), Some(1)), 0, ms(0), 1.0);
        let mut now = ms(0);
        let mut sends = Vec::new();
        while sends.len() < 12 {
            now = p.earliest(now, 1.0, 0);
            p.sent();
            sends.push(now);
        }
        // Two at once, then one every 100 ms.
        assert_eq!(sends[0], ms(0));
        assert_eq!(sends[1], ms(0));
        assert_eq!(sends[2], ms(100));
        assert_eq!(sends[11], ms(1000));
    }

    #[test]
    fn without_a_window_the_quota_returns_only_at_reset() {
        let mut p = Pacer::new(&quota(None, None, None, None), ms(0));
        p.heard(&quota(Some(5), None, Some(1), Some(3)), 0, ms(0), 1.0);
        assert_eq!(p.earliest(ms(0), 1.0, 0), ms(0));
        p.sent();
        assert_eq!(p.earliest(ms(1), 1.0, 0), ms(3000));
        assert_eq!(p.earliest(ms(3000), 1.0, 0), ms(3000));
        assert_eq!(p.tokens(), Some(5.0));
    }

    #[test]
    fn zero_left_without_any_timing_probes_once_a_second() {
        let mut p = Pacer::new(&quota(None, None, None, None), ms(0));
        p.heard(&quota(None, None, Some(0), None), 0, ms(0), 1.0);
        assert_eq!(p.earliest(ms(10), 1.0, 0), ms(1000));
        assert_eq!(p.earliest(ms(1000), 1.0, 0), ms(1000));
        p.sent();
        assert_eq!(p.earliest(ms(1001), 1.0, 0), ms(2001));
    }

    #[test]
    fn hostile_numbers_never_overflow() {
        let mut p = Pacer::new(&quota(None, None, None, None), ms(0));
        let q = Quota {
            limit: Some(u64::MAX),
            window: Some(crate::signal::MAX_HORIZON),
            remaining: Some(0),
            reset: Some(crate::signal::MAX_HORIZON),
            ..Quota::new("default", None)
        };
        p.heard(&q, 0, Nanos(u64::MAX - 5), 1.0);
        assert_eq!(p.earliest(Nanos(u64::MAX - 1), 1.0, 0), Nanos(u64::MAX));
        let mut p = Pacer::new(&q, ms(0));
        p.heard(&quota(Some(1), Some(86_400), Some(1), None), 0, ms(0), 1.0);
        p.sent();
        assert!(p.earliest(ms(1), 1e-9, 0) > ms(1));
    }

    #[test]
    fn stale_pacers_are_recognised() {
        let mut p = Pacer::new(&quota(None, None, None, None), ms(0));
        p.heard(&quota(Some(5), Some(10), Some(1), Some(3)), 0, ms(0), 1.0);
        assert!(!p.is_stale(Nanos::from_secs(72)));
        assert!(p.is_stale(Nanos::from_secs(74)));
    }

    proptest! {
        /// Against a token-bucket server of `q` per `w` seconds that answers at once, a client
        /// sending as fast as its pacer allows is never refused (headroom 1, exact reset).
        #[test]
        fn a_paced_client_is_never_refused(q in 1u64..200, w in 1u64..10, steps in 100u64..3000) {
            let rate = q as f64 / w as f64;
            let mut server = q as f64;
            let mut server_at = 0.0f64;
            let mut p = Pacer::new(&quota(None, None, None, None), ms(0));
            let mut now = ms(0);
            for _ in 0..steps {
                now = p.earliest(now, 1.0, 0);
                p.sent();
                let t = now.as_secs_f64();
                server = (server + (t - server_at) * rate).min(q as f64);
                server_at = t;
                prop_assert!(server >= 1.0 - 1e-6, "refused at {t}: server has {server}");
                server -= 1.0;
                let left = server.max(0.0).floor() as u64;
                let full_in = ((q as f64 - server) / rate).ceil() as u64;
                p.heard(&quota(Some(q), Some(w), Some(left), Some(full_in)), 0, now, 1.0);
            }
        }
    }
}
