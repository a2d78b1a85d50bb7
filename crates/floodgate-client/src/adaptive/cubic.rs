//! A send rate found by CUBIC, for servers that refuse without saying their limits (the AWS
//! SDKs' adaptive retry mode; Ha, Rhee and Xu, "CUBIC", 2008).
//!
//! Until the first refusal nothing is paced. On a refusal the rate becomes β = 0.7 times the
//! rate the client was actually sending (measured over half-second intervals and smoothed),
//! and that rate is remembered as `W_max`. After it, the rate at `t` seconds since the refusal
//! is
//!
//! ```text
//! W(t) = C · (t − K)³ + W_max,   K = ∛(W_max · (1 − β) / C),   C = 0.4
//! ```
//!
//! so it climbs back to `W_max` in `K` seconds, lingers around it, and probes beyond it ever
//! faster. It never exceeds twice the measured rate. Requests are paced by a token bucket
//! filled at that rate holding at most one second of it.
//!
//! Only one cut per flight: refusals of requests sent before the last cut are the same
//! congestion event, not a new one, and are not cut for again (as TCP cuts once per round
//! trip). Without this a burst of ten refused requests in flight would cut the rate to
//! 0.7¹⁰ of itself.

use floodgate::Nanos;

/// The slowest rate ever set, requests per second: a server refusing everything still sees
/// a probe every two seconds.
pub const MIN_RATE: f64 = 0.5;

const MEASURE_INTERVAL: f64 = 0.5;
const MEASURE_SMOOTHING: f64 = 0.8;

/// CUBIC's state for one host.
#[derive(Clone, Debug)]
pub struct CubicRate {
    beta: f64,
    c: f64,
    enabled: bool,
    rate: f64,
    tokens: f64,
    refilled_at: Nanos,
    w_max: f64,
    cut_at: Nanos,
    /// Requests sent after this sequence number were sent at the current rate.
    cut_seq: u64,
    measured: f64,
    measure_from: Nanos,
    measure_count: u64,
}

impl CubicRate {
    /// CUBIC with factor `beta` (0 < β < 1) and scale `c` (> 0).
    pub fn new(beta: f64, c: f64) -> CubicRate {
        CubicRate {
            beta,
            c,
            enabled: false,
            rate: 0.0,
            tokens: 0.0,
            refilled_at: Nanos::ZERO,
            w_max: 0.0,
            cut_at: Nanos::ZERO,
            cut_seq: 0,
            measured: 0.0,
            measure_from: Nanos::ZERO,
            measure_count: 0,
        }
    }

    /// True once a refusal has been seen: requests are paced.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The current send rate, requests per second (meaningful once enabled).
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The measured send rate, requests per second.
    pub fn measured(&self) -> f64 {
        self.measured
    }

    fn refill(&mut self, now: Nanos) {
        let elapsed = now.saturating_since(self.refilled_at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate.max(1.0));
        self.refilled_at = self.refilled_at.max(now);
    }

    /// The earliest instant a request may be sent (`now` when one may be sent now).
    pub fn earliest(&mut self, now: Nanos) -> Nanos {
        if !self.enabled {
            return now;
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            now
        } else {
            now.saturating_add(std::time::Duration::from_secs_f64(
                (1.0 - self.tokens) / self.rate,
            ))
        }
    }

    /// Counts a request sent at `now`.
    pub fn sent(&mut self, now: Nanos) {
        if self.enabled {
            self.refill(now);
            self.tokens -= 1.0;
        }
        if self.measure_count == 0 && self.measure_from == Nanos::ZERO {
            self.measure_from = now;
        }
        self.measure_count += 1;
        let elapsed = now.saturating_since(self.measure_from).as_secs_f64();
        if elapsed >= MEASURE_INTERVAL {
            let rate = self.measure_count as f64 / elapsed;
            self.measured = rate * MEASURE_SMOOTHING + self.measured * (1.0 - MEASURE_SMOOTHING);
            self.measure_from = now;
            self.measure_count = 0;
        }
    }

    /// The measured rate, or before the first half-second interval has closed, the rate of
    /// what was sent so far (over at least 50 ms).
    fn measured_at(&self, now: Nanos) -> f64 {
        if self.measured > 0.0 {
            return self.measured;
        }
        let elapsed = now
            .saturating_since(self.measure_from)
            .as_secs_f64()
            .max(0.05);
        self.measure_count as f64 / elapsed
    }

    /// The rate `t` seconds after the last cut.
    fn cubic(&self, t: f64) -> f64 {
        let k = (self.w_max * (1.0 - self.beta) / self.c).cbrt();
        self.c * (t - k).powi(3) + self.w_max
    }

    /// Learns from the response to the request sent as number `seq` (see
    /// [`crate::pace`]): `refused` when the server refused it.
    pub fn answered(&mut self, now: Nanos, seq: u64, refused: bool, latest_seq: u64) {
        let calculated = if refused {
            if self.enabled && seq <= self.cut_seq {
                return; // the same congestion event as the last cut
            }
            let measured = self.measured_at(now).max(MIN_RATE);
            let base = if self.enabled {
                measured.min(self.rate)
            } else {
                measured
            };
            self.w_max = base;
            self.cut_at = now;
            self.cut_seq = latest_seq;
            if !self.enabled {
                self.enabled = true;
                self.refilled_at = now;
                self.tokens = 0.0;
            }
            base * self.beta
        } else {
            if !self.enabled {
                return;
            }
            self.cubic(now.saturating_since(self.cut_at).as_secs_f64())
        };
        self.refill(now);
        let ceiling = (2.0 * self.measured_at(now)).max(MIN_RATE);
        self.rate = calculated.min(ceiling).max(MIN_RATE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A client offered `offered`/s against a server taking `capacity`/s (a token bucket of one
    /// second's burst), for `secs` seconds, in 1 ms steps. Returns (sent, refused) per second.
    fn run(offered: f64, capacity: f64, secs: u64) -> Vec<(u64, u64)> {
        let mut cubic = CubicRate::new(0.7, 0.4);
        let mut server_tokens = capacity;
        let mut per_second = vec![(0u64, 0u64); secs as usize];
        let mut seq = 0u64;
        let mut wanted = 0.0;
        for ms in 0..secs * 1000 {
            let now = Nanos::from_millis(ms);
            server_tokens = (server_tokens + capacity / 1000.0).min(capacity);
            wanted += offered / 1000.0;
            while wanted >= 1.0 && cubic.earliest(now) <= now {
                wanted -= 1.0;
                seq += 1;
                cubic.sent(now);
                let refused = server_tokens < 1.0;
                if !refused {
                    server_tokens -= 1.0;
                }
                cubic.answered(now, seq, refused, seq);
                let s = &mut per_second[(ms / 1000) as usize];
                s.0 += 1;
                s.1 += u64::from(refused);
            }
            wanted = wanted.min(1.0); // the caller gives up on what it could not send
        }
        per_second
    }

    #[test]
    fn finds_the_servers_rate_and_is_rarely_refused() {
        let seconds = run(400.0, 50.0, 60);
        let (sent, refused) = seconds[5..]
            .iter()
            .fold((0, 0), |(s, r), (ss, rr)| (s + ss, r + rr));
        let goodput = (sent - refused) as f64 / 55.0;
        assert!(
            (refused as f64) < 0.05 * sent as f64,
            "refused {refused} of {sent}"
        );
        assert!(goodput > 0.8 * 50.0, "goodput {goodput}");
    }

    #[test]
    fn one_cut_per_flight() {
        let mut cubic = CubicRate::new(0.7, 0.4);
        let mut now = Nanos::ZERO;
        for _ in 0..200 {
            now = now.saturating_add(Duration::from_millis(5));
            cubic.sent(now);
        }
        // Ten requests in flight are all refused: one cut.
        cubic.answered(now, 191, true, 200);
        let rate = cubic.rate();
        for seq in 192..=200 {
            cubic.answered(now, seq, true, 200);
        }
        assert_eq!(cubic.rate(), rate);
        assert!((rate - 0.7 * cubic.measured()).abs() < 1.0, "{rate}");
        // A request sent after the cut and refused cuts again.
        cubic.answered(now, 201, true, 201);
        assert!(cubic.rate() < rate);
    }

    #[test]
    fn the_curve_returns_to_w_max_after_k() {
        let mut cubic = CubicRate::new(0.7, 0.4);
        cubic.measured = 100.0;
        cubic.answered(Nanos::ZERO, 1, true, 1);
        assert!((cubic.rate() - 70.0).abs() < 1e-9);
        let k = (100.0f64 * 0.3 / 0.4).cbrt();
        assert!((cubic.cubic(k) - 100.0).abs() < 1e-9);
        assert!((cubic.cubic(0.0) - 70.0).abs() < 1e-9);
        cubic.answered(Nanos::from_secs_f64(k), 2, false, 2);
        assert!((cubic.rate() - 100.0).abs() < 1e-6);
    }
}
