//! A remote store's circuit breaker (the Redis and memcached stores'): after `threshold`
//! consecutive link failures (timeouts, connection errors) it opens, and calls fail at once,
//! without touching the network, until `cool_down` has passed on the store's clock; then one
//! call probes the server, and its success closes the breaker (its failure opens it for another
//! `cool_down`). A `threshold` of 0 turns it off. An answer the server gave, even an error
//! answer, counts as a success: the link works.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::{Clock, StoreError};

/// Where a remote store's breaker stands (`RedisStore::breaker_state`,
/// `MemcachedStore::breaker_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go to the server.
    Closed,
    /// Calls fail at once with [`StoreError::BreakerOpen`] until the cool-down has passed.
    Open,
    /// The cool-down has passed: the next call probes the server (one at a time; the others still
    /// fail at once).
    HalfOpen,
}

/// The breaker's state, in atomics: the closed path is two loads and, after a success that
/// follows failures, one store.
#[derive(Debug)]
pub(crate) struct Breaker {
    threshold: u32,
    cool_down: Duration,
    /// Consecutive transient failures since the last success.
    failures: AtomicU32,
    /// While open: the instant (ns) from which a probe may go; 0 when closed.
    open_until: AtomicU64,
    /// Whether a probe is in flight.
    probing: AtomicBool,
}

/// Permission to call the server, from [`Breaker::admit`]; report the outcome with
/// [`Permit::record`]. A probe's permit dropped without an outcome (its call was cancelled)
/// lets the next call probe.
pub(crate) struct Permit<'a> {
    breaker: &'a Breaker,
    probe: bool,
}

impl Breaker {
    /// `threshold` 0 turns the breaker off.
    pub(crate) fn new(threshold: u32, cool_down: Duration) -> Breaker {
        Breaker {
            threshold,
            cool_down,
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }

    pub(crate) fn state(&self, clock: &dyn Clock) -> BreakerState {
        match self.open_until.load(Ordering::Acquire) {
            0 => BreakerState::Closed,
            until if clock.now().0 < until => BreakerState::Open,
            _ => BreakerState::HalfOpen,
        }
    }

    /// Lets a call through, or refuses it at once while the breaker is open.
    pub(crate) fn admit(&self, clock: &dyn Clock) -> Result<Permit<'_>, StoreError> {
        let until = self.open_until.load(Ordering::Acquire);
        if until == 0 {
            return Ok(Permit {
                breaker: self,
                probe: false,
            });
        }
        if clock.now().0 >= until
            && self
                .probing
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return Ok(Permit {
                breaker: self,
                probe: true,
            });
        }
        Err(StoreError::BreakerOpen {
            failures: self.threshold,
        })
    }

    fn open(&self, clock: &dyn Clock) {
        let until = clock.now().saturating_add(self.cool_down);
        self.open_until.store(until.0.max(1), Ordering::Release);
    }
}

impl Permit<'_> {
    /// Records the call's outcome: `link_failure` for a timeout or a connection error (not for
    /// an answer the server gave, such as a script error).
    pub(crate) fn record(self, link_failure: bool, clock: &dyn Clock) {
        let b = self.breaker;
        if link_failure {
            let failures = b.failures.fetch_add(1, Ordering::AcqRel).saturating_add(1);
            if b.threshold > 0 && (self.probe || failures >= b.threshold) {
                b.open(clock);
            }
        } else {
            if b.failures.load(Ordering::Relaxed) != 0 {
                b.failures.store(0, Ordering::Relaxed);
            }
            if b.open_until.load(Ordering::Relaxed) != 0 {
                b.open_until.store(0, Ordering::Release);
            }
        }
        // `self` drops here, ending the probe.
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if self.probe {
            self.breaker.probing.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ManualClock, Nanos};

    #[test]
    fn opens_after_threshold_and_probes_after_cool_down() {
        let clock = ManualClock::new(Nanos(1_000));
        let b = Breaker::new(3, Duration::from_secs(1));
        for _ in 0..2 {
            b.admit(&clock).unwrap().record(true, &clock);
        }
        assert_eq!(b.state(&clock), BreakerState::Closed);
        b.admit(&clock).unwrap().record(true, &clock);
        assert_eq!(b.state(&clock), BreakerState::Open);
        assert!(matches!(
            b.admit(&clock),
            Err(StoreError::BreakerOpen { failures: _ })
        ));
        clock.advance(Duration::from_secs(1));
        assert_eq!(b.state(&clock), BreakerState::HalfOpen);
        let probe = b.admit(&clock).unwrap();
        // One probe at a time.
        assert!(b.admit(&clock).is_err());
        probe.record(true, &clock);
        assert_eq!(b.state(&clock), BreakerState::Open);
        clock.advance(Duration::from_secs(1));
        // A cancelled probe lets the next call probe.
        drop(b.admit(&clock).unwrap());
        b.admit(&clock).unwrap().record(false, &clock);
        assert_eq!(b.state(&clock), BreakerState::Closed);
        // Failures count again from zero.
        b.admit(&clock).unwrap().record(true, &clock);
        assert_eq!(b.state(&clock), BreakerState::Closed);
    }

    #[test]
    fn threshold_zero_never_opens() {
        let clock = ManualClock::new(Nanos(0));
        let b = Breaker::new(0, Duration::from_secs(1));
        for _ in 0..10 {
            b.admit(&clock).unwrap().record(true, &clock);
        }
        assert_eq!(b.state(&clock), BreakerState::Closed);
    }
}
