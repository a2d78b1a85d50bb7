//! Pacing by what the server announced: one [`Pacer`] per quota (policy and partition).
//!
//! A pacer is a local token bucket shaped like the server's quota and corrected by every
//! answer:
//! - **capacity** `q` and **refill** `q / w · headroom` per second, when the policy gives both
//!   (IETF `RateLimit-Policy`, or `X-RateLimit-Limit` with a `w`); without a window nothing
//!   refills between answers and the quota is restored only at its reset;
//! - **sync**: an answer with `r` left to the request numbered `seq` sets the tokens to
//!   `r − (requests sent after seq)`: the server counted everything up to that request, and
//!   the requests in flight since will each take one. Older answers (a lower `seq` than the
//!   last one applied) are ignored: with requests in flight, answers arrive out of order;
//! - **exhaustion**: an answer with `r = 0` stops the pacer until its reset `t` (or, without
//!   one, one window, or [`PROBE_INTERVAL`]): nothing refills meanwhile, because the server
//!   has said nothing will pass before then. At that instant the quota is whole again;
//! - **reset**: when a reset passes, the tokens are at least `q` again.
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
    seen_seq: u64,
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
            seen_seq: 0,
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

    fn refill(&mut self, now: Nanos, headroom: f64) {
        if let Some(until) = self.exhausted_until {
            if now < until {
                return;
            }
            self.exhausted_until = None;
            self.reset_at = None;
            self.tokens = self.limit.map(|q| q as f64).or(Some(1.0));
            self.refilled_at = now;
            return;
        }
        if self.reset_at.is_some_and(|at| now >= at) {
            self.reset_at = None;
            if let (Some(t), Some(q)) = (self.tokens, self.limit) {
                self.tokens = Some(t.max(q as f64));
            }
        }
        if let (Some(t), Some(rate)) = (self.tokens, self.rate(headroom)) {
            let elapsed = now.saturating_since(self.refilled_at).as_secs_f64();
            let cap = self.limit.map_or(f64::MAX, |q| q as f64);
            self.tokens = Some((t + elapsed * rate).min(cap.max(t)));
        }
        self.refilled_at = self.refilled_at.max(now);
    }

    /// The earliest instant a request may be sent by this pacer (`now` when it may go now).
    pub fn earliest(&mut self, now: Nanos, headroom: f64) -> Nanos {
        self.refill(now, headroom);
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

    /// Learns from `quota`, read from the answer to request `seq` (of `sent` so far) at `now`.
    pub fn heard(&mut self, quota: &Quota, seq: u64, sent: u64, now: Nanos) {
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
        if seq < self.seen_seq {
            return; // older news than what the pacer already knows
        }
        self.seen_seq = seq;
        let after = sent.saturating_sub(seq) as f64;
        self.tokens = Some(r as f64 - after);
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
        assert_eq!(p.earliest(ms(5), 1.0), ms(5));
    }

    #[test]
    fn syncs_to_the_servers_count_minus_requests_in_flight() {
        let mut p = Pacer::new(&quota(None, None, None, None), ms(0));
        // The answer to request 3 says 10 left; requests 4..=7 were sent since.
        p.heard(&quota(Some(50), Some(1), Some(10), Some(1)), 3, 7, ms(10));
        assert_eq!(p.tokens(), Some(6.0));
        // An older answer changes nothing.
        p.heard(&quota(Some(50), Some(1), Some(40), Some(1)), 2, 7, ms(11));
        assert_eq!(p.tokens(), Some(6.0));
    }

    #[test]
    fn exhaustion_holds_until_the_reset_then_restores_the_quota() {
        let mut p = Pacer::new(&quota(None, None, None, None), ms(0));
        p.heard(&quota(Some(50), Some(1), Some(0), Some(2)), 1, 1, ms(100));
        assert_eq!(p.earliest(ms(200), 1.0), ms(2100));
        assert_eq!(p.earliest(ms(2099), 1.0), ms(2100));
        assert_eq!(p.earliest(ms(2100), 1.0), ms(2100));
        assert_eq!(p.tokens(), Some(50.0));
    }

    #[test]
    fn paces_at_the_policy_rate_once_the_burst_is_spent() {
        let mut p = Pacer::new(&quota(None, None, None, None), ms(0));
        p.heard(&quota(Some(10), Some(1), Some(2), Some(1)), 1, 1, ms(0));
        let mut now = ms(0);
        let mut sends = Vec::new();
        while sends.len() < 12 {
            now = p.earliest(now, 1.0);
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
        p.heard(&quota(Some(5), None, Some(1), Some(3)), 1, 1, ms(0));
        assert_eq!(p.earliest(ms(0), 1.0), ms(0));
        p.sent();
        assert_eq!(p.earliest(ms(1), 1.0), ms(3000));
        assert_eq!(p.earliest(ms(3000), 1.0), ms(3000));
        assert_eq!(p.tokens(), Some(5.0));
    }

    #[test]
    fn zero_left_without_any_timing_probes_once_a_second() {
        let mut p = Pacer::new(&quota(None, None, None, None), ms(0));
        p.heard(&quota(None, None, Some(0), None), 1, 1, ms(0));
        assert_eq!(p.earliest(ms(10), 1.0), ms(1000));
        assert_eq!(p.earliest(ms(1000), 1.0), ms(1000));
        p.sent();
        assert_eq!(p.earliest(ms(1001), 1.0), ms(2001));
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
        p.heard(&q, 1, 1, Nanos(u64::MAX - 5));
        assert_eq!(p.earliest(Nanos(u64::MAX - 1), 1.0), Nanos(u64::MAX));
        let mut p = Pacer::new(&q, ms(0));
        p.heard(&quota(Some(1), Some(86_400), Some(1), None), 1, 1, ms(0));
        p.sent();
        assert!(p.earliest(ms(1), 1e-9) > ms(1));
    }

    #[test]
    fn stale_pacers_are_recognised() {
        let mut p = Pacer::new(&quota(None, None, None, None), ms(0));
        p.heard(&quota(Some(5), Some(10), Some(1), Some(3)), 1, 1, ms(0));
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
            let mut seq = 0;
            for _ in 0..steps {
                now = p.earliest(now, 1.0);
                p.sent();
                seq += 1;
                let t = now.as_secs_f64();
                server = (server + (t - server_at) * rate).min(q as f64);
                server_at = t;
                prop_assert!(server >= 1.0 - 1e-6, "refused at {t}: server has {server}");
                server -= 1.0;
                let left = server.max(0.0).floor() as u64;
                let full_in = ((q as f64 - server) / rate).ceil() as u64;
                p.heard(&quota(Some(q), Some(w), Some(left), Some(full_in)), seq, seq, now);
            }
        }
    }
}
