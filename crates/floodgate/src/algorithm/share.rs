//! A node's share of a limit: what one of `n` nodes may admit on its own when the store they
//! share is out of reach (the pipeline's [`OnStoreError::Local`](crate::limiter::OnStoreError)).

use super::concurrency::{Concurrency, Fleet};
use super::fixed_window::FixedWindow;
use super::gcra::Gcra;
use super::leaky_bucket::LeakyBucket;
use super::leaky_queue::LeakyQueue;
use super::sliding_log::SlidingLog;
use super::sliding_window::SlidingWindow;
use super::smooth::{SmoothBursty, SmoothWarmingUp};
use super::spec::AnyAlgorithm;
use super::token_bucket::TokenBucket;
use crate::ConfigError;

/// `count / nodes`, rounded down, but at least 1: the shares of `nodes` nodes add up to at
/// most `count` unless `count < nodes` (then each node still admits one).
fn part(count: u64, nodes: u32) -> u64 {
    (count / u64::from(nodes.max(1))).max(1)
}

impl AnyAlgorithm {
    /// The same algorithm at one node's share of its limit when `nodes` nodes share it: rates
    /// divided by `nodes`; counts (limits, capacities, bursts, queues) divided and rounded
    /// down, but at least 1 (a burst or queue of 0 stays 0); windows, periods, warm-up and
    /// lease times unchanged. With `nodes` at most 1, the algorithm itself.
    ///
    /// The shares of all nodes together admit at most the whole limit, except where a count
    /// is smaller than `nodes` (each node keeps at least one).
    pub fn share(&self, nodes: u32) -> Result<AnyAlgorithm, ConfigError> {
        if nodes <= 1 {
            return Ok(self.clone());
        }
        let n = f64::from(nodes);
        Ok(match self {
            AnyAlgorithm::TokenBucket(t) => {
                TokenBucket::new(t.rate() / n, part(t.capacity(), nodes))?.into()
            }
            AnyAlgorithm::LeakyBucket(l) => {
                LeakyBucket::new(l.rate() / n, part(l.capacity(), nodes))?.into()
            }
            AnyAlgorithm::LeakyQueue(q) => {
                LeakyQueue::new(q.rate() / n, q.queue() / u64::from(nodes))?.into()
            }
            AnyAlgorithm::FixedWindow(f) => {
                FixedWindow::new(part(f.limit(), nodes), f.window())?.into()
            }
            AnyAlgorithm::SlidingLog(s) => {
                SlidingLog::new(part(s.limit(), nodes), s.window())?.into()
            }
            AnyAlgorithm::SlidingWindow(s) => {
                SlidingWindow::new(part(s.limit(), nodes), s.window(), s.buckets())?.into()
            }
            AnyAlgorithm::Gcra(g) => Gcra::new(
                part(g.max_burst() + 1, nodes) - 1,
                part(g.count(), nodes),
                g.period(),
            )?
            .into(),
            AnyAlgorithm::SmoothBursty(s) => {
                SmoothBursty::starting(s.rate() / n, s.max_burst_seconds(), s.start())?.into()
            }
            AnyAlgorithm::SmoothWarmingUp(s) => {
                SmoothWarmingUp::new(s.rate() / n, s.warmup(), s.cold_factor())?.into()
            }
            AnyAlgorithm::Concurrency(c) => {
                Concurrency::new(part(c.capacity(), nodes), c.lease_ttl())?.into()
            }
            AnyAlgorithm::Fleet(f) => Fleet::new(
                part(f.capacity(), nodes),
                f.reserved_for_critical(),
                f.lease_ttl(),
            )?
            .into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::algorithm::Algorithm;

    #[test]
    fn shares_divide_rates_and_counts() {
        let tb: AnyAlgorithm = TokenBucket::new(30.0, 100).unwrap().into();
        let AnyAlgorithm::TokenBucket(t) = tb.share(3).unwrap() else {
            panic!("same algorithm")
        };
        assert_eq!((t.rate(), t.capacity()), (10.0, 33));
        let fw: AnyAlgorithm = FixedWindow::new(2, Duration::from_secs(60)).unwrap().into();
        let AnyAlgorithm::FixedWindow(f) = fw.share(5).unwrap() else {
            panic!("same algorithm")
        };
        assert_eq!((f.limit(), f.window()), (1, Duration::from_secs(60)));
        let g: AnyAlgorithm = Gcra::new(9, 100, Duration::from_secs(1)).unwrap().into();
        let AnyAlgorithm::Gcra(g) = g.share(4).unwrap() else {
            panic!("same algorithm")
        };
        assert_eq!((g.limit(), g.count()), (2, 25));
        let fleet: AnyAlgorithm = Fleet::new(1000, 0.2, Duration::from_secs(60))
            .unwrap()
            .into();
        assert_eq!(fleet.share(4).unwrap().name(), "fleet");
        assert_eq!(fleet.share(1).unwrap().name(), "fleet");
    }
}
