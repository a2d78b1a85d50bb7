//! Client-side adaptive throttling (Google, *Site Reliability Engineering*, ch. 21).
//!
//! Over a sliding window the client counts `requests` (every request whose fate is known: the
//! answered, the failed, and those it refused itself) and `accepts` (answers the server did
//! not refuse). Requests still in flight are not counted: at start, with ten requests in
//! flight and no answer yet, the book's formula would refuse nine in ten.
//! A new request is refused locally with probability
//!
//! ```text
//! p = max(0, (requests − K · accepts) / (requests + 1))
//! ```
//!
//! With `K = 2` nothing is refused while the server accepts at least half of what is sent;
//! beyond that the client sends about `K · accepts`, a little more than the server takes, so
//! it still notices at once when the server recovers. The window is kept as one-second buckets
//! (the default window is two minutes, as in the book). Nothing is refused while the window
//! holds fewer than [`MIN_REQUESTS`]: two failures out of two say little.

use std::collections::VecDeque;
use std::time::Duration;

use floodgate::Nanos;
use rand::Rng;

const BUCKET: u64 = 1_000_000_000;

/// The fewest requests in the window before anything is refused locally.
pub const MIN_REQUESTS: u64 = 20;

/// The throttle's counts over its window.
#[derive(Clone, Debug)]
pub struct AdaptiveThrottle {
    k: f64,
    buckets: usize,
    /// (bucket index = second since the epoch, requests, accepts), oldest first.
    window: VecDeque<(u64, u64, u64)>,
    requests: u64,
    accepts: u64,
}

impl AdaptiveThrottle {
    /// A throttle with multiplier `k` over `window` (rounded up to whole seconds, at least 1).
    pub fn new(k: f64, window: Duration) -> AdaptiveThrottle {
        let buckets = window.as_secs().max(1) as usize + usize::from(window.subsec_nanos() > 0);
        AdaptiveThrottle {
            k,
            buckets,
            window: VecDeque::with_capacity(buckets + 1),
            requests: 0,
            accepts: 0,
        }
    }

    fn bucket(&mut self, now: Nanos) -> &mut (u64, u64, u64) {
        let index = now.0 / BUCKET;
        while let Some(&(oldest, r, a)) = self.window.front() {
            if oldest + self.buckets as u64 > index {
                break;
            }
            self.window.pop_front();
            self.requests -= r;
            self.accepts -= a;
        }
        if self.window.back().is_none_or(|b| b.0 < index) {
            self.window.push_back((index, 0, 0));
        }
        // A clock that went backwards adds to the newest bucket.
        self.window.back_mut().expect("a bucket was just ensured")
    }

    /// The probability that a request now is refused locally.
    pub fn probability(&mut self, now: Nanos) -> f64 {
        self.bucket(now);
        if self.requests < MIN_REQUESTS {
            return 0.0;
        }
        let (requests, accepts) = (self.requests as f64, self.accepts as f64);
        ((requests - self.k * accepts) / (requests + 1.0)).max(0.0)
    }

    /// Decides a request: true when it must be refused locally (and then counts it).
    pub fn refuse(&mut self, now: Nanos, rng: &mut impl Rng) -> bool {
        let p = self.probability(now);
        let refused = p > 0.0 && rng.random::<f64>() < p;
        if refused {
            self.bucket(now).1 += 1;
            self.requests += 1;
        }
        refused
    }

    /// Counts a request whose fate is known: `accepted` when the server did not refuse it.
    pub fn finished(&mut self, now: Nanos, accepted: bool) {
        let bucket = self.bucket(now);
        bucket.1 += 1;
        bucket.2 += u64::from(accepted);
        self.requests += 1;
        self.accepts += u64::from(accepted);
    }

    /// Requests and accepts in the window.
    pub fn counts(&self) -> (u64, u64) {
        (self.requests, self.accepts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn nothing_is_refused_while_half_is_accepted() {
        let mut t = AdaptiveThrottle::new(2.0, Duration::from_secs(120));
        let mut rng = SmallRng::seed_from_u64(3);
        for i in 0..1000 {
            let now = Nanos::from_millis(i * 10);
            assert!(!t.refuse(now, &mut rng));
            t.finished(now, i % 2 == 0);
        }
    }

    #[test]
    fn a_refusing_server_gets_about_k_times_its_accepts() {
        // The server takes 10 requests a second; offered 100/s, the client settles at sending
        // about K · accepts = 20/s and refuses the rest itself.
        let mut t = AdaptiveThrottle::new(2.0, Duration::from_secs(120));
        let mut rng = SmallRng::seed_from_u64(5);
        let (mut sent, mut accepted, mut refused_locally) = (0u64, 0u64, 0u64);
        let mut taken_this_second = (0u64, 0u64);
        for i in 0..60_000u64 {
            let now = Nanos::from_millis(i * 10); // 100/s for 600 s
            if t.refuse(now, &mut rng) {
                refused_locally += 1;
                continue;
            }
            sent += 1;
            let second = i / 100;
            if taken_this_second.0 != second {
                taken_this_second = (second, 0);
            }
            let accept = taken_this_second.1 < 10;
            if accept {
                taken_this_second.1 += 1;
                accepted += 1;
            }
            t.finished(now, accept);
        }
        assert!(refused_locally > 45_000, "{refused_locally}");
        let ratio = sent as f64 / (2.0 * accepted as f64);
        assert!(
            ratio > 0.9 && ratio < 1.15,
            "sent {sent}, accepted {accepted}"
        );
        let p = t.probability(Nanos::from_secs(600));
        assert!(p > 0.7 && p < 0.85, "{p}");
    }

    #[test]
    fn a_few_failures_refuse_nothing() {
        let mut t = AdaptiveThrottle::new(2.0, Duration::from_secs(120));
        for _ in 0..MIN_REQUESTS - 1 {
            t.finished(Nanos::ZERO, false);
        }
        assert_eq!(t.probability(Nanos::ZERO), 0.0);
        t.finished(Nanos::ZERO, false);
        assert!(t.probability(Nanos::ZERO) > 0.9);
    }

    #[test]
    fn the_window_forgets() {
        let mut t = AdaptiveThrottle::new(2.0, Duration::from_secs(10));
        let mut rng = SmallRng::seed_from_u64(1);
        for i in 0..100 {
            let now = Nanos::from_millis(i * 10);
            if !t.refuse(now, &mut rng) {
                t.finished(now, false);
            }
        }
        assert!(t.probability(Nanos::from_secs(1)) > 0.9);
        assert_eq!(t.probability(Nanos::from_secs(12)), 0.0);
        assert_eq!(t.counts(), (0, 0));
    }
}
