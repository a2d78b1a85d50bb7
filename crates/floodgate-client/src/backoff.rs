//! Exponential backoff with full jitter (AWS Architecture Blog, "Exponential Backoff and
//! Jitter"): the n-th retry (n = 1, 2, …) waits a uniformly random time in
//! `[0, min(cap, base · 2ⁿ⁻¹)]`.
//!
//! Full jitter spreads the retries of many clients refused at the same moment over the whole
//! interval instead of bunching them at its end, which is what turns a refusal spike into a
//! retry spike. A `Retry-After` from the server is honoured on top of it: the retry first
//! waits the jitter, then for whatever the host's state still asks (see [`crate::pace`]).

use std::time::Duration;

use rand::Rng;

/// The backoff schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The first retry's upper bound.
    pub base: Duration,
    /// The largest upper bound.
    pub cap: Duration,
}

impl Backoff {
    /// The upper bound of the `retry`-th retry's wait (1-based): `min(cap, base · 2^(retry−1))`.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 1u32
            .checked_shl(retry.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// A random wait for the `retry`-th retry, uniform in `[0, ceiling(retry)]`.
    pub fn delay(&self, retry: u32, rng: &mut impl Rng) -> Duration {
        let ceiling = self.ceiling(retry);
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.random_range(0..=nanos))
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(20),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn ceilings_double_up_to_the_cap() {
        let b = Backoff::default();
        assert_eq!(b.ceiling(1), Duration::from_millis(100));
        assert_eq!(b.ceiling(2), Duration::from_millis(200));
        assert_eq!(b.ceiling(5), Duration::from_millis(1600));
        assert_eq!(b.ceiling(20), Duration::from_secs(20));
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(20));
    }

    #[test]
    fn delays_are_spread_over_the_whole_interval() {
        let b = Backoff::default();
        let mut rng = SmallRng::seed_from_u64(1);
        let delays: Vec<Duration> = (0..10_000).map(|_| b.delay(3, &mut rng)).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(400)));
        let mean = delays.iter().sum::<Duration>() / delays.len() as u32;
        // Uniform on [0, 400 ms]: mean 200 ms.
        assert!(
            mean > Duration::from_millis(190) && mean < Duration::from_millis(210),
            "{mean:?}"
        );
        let low = delays
            .iter()
            .filter(|d| **d < Duration::from_millis(100))
            .count();
        assert!(low > 2_000 && low < 3_000, "{low}");
    }
}
