//! An adaptive cap on requests in flight to one host: AIMD, as Netflix's concurrency-limits
//! library runs it.
//!
//! While at least half of the limit is in use, every good response raises the limit by one;
//! every refusal, timeout or connection error multiplies it by `backoff` (0.9). The limit
//! stays within `[min, max]`. A request waits (bounded by the layer's `max_wait`) while the
//! limit is reached.

/// The limit's state for one host.
#[derive(Clone, Debug, PartialEq)]
pub struct AimdLimit {
    limit: f64,
    min: f64,
    max: f64,
    backoff: f64,
    in_flight: u32,
}

impl AimdLimit {
    /// A limit starting at `initial`, kept within `[min, max]`, cut by `backoff` on a drop.
    pub fn new(initial: u32, min: u32, max: u32, backoff: f64) -> AimdLimit {
        AimdLimit {
            limit: f64::from(initial.clamp(min, max)),
            min: f64::from(min),
            max: f64::from(max),
            backoff,
            in_flight: 0,
        }
    }

    /// The current limit (whole requests).
    pub fn limit(&self) -> u32 {
        self.limit as u32
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Takes a slot; false when the limit is reached.
    pub fn try_acquire(&mut self) -> bool {
        if self.in_flight < self.limit() {
            self.in_flight += 1;
            true
        } else {
            false
        }
    }

    /// Gives a slot back; `dropped` when the request was refused, timed out or failed to
    /// connect.
    pub fn release(&mut self, dropped: bool) {
        let was_in_flight = self.in_flight;
        self.in_flight = self.in_flight.saturating_sub(1);
        if dropped {
            self.limit = (self.limit * self.backoff).max(self.min);
        } else if f64::from(was_in_flight) * 2.0 >= self.limit {
            self.limit = (self.limit + 1.0).min(self.max);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_while_used_and_backs_off_on_drops() {
        let mut l = AimdLimit::new(4, 1, 10, 0.9);
        for _ in 0..4 {
            assert!(l.try_acquire());
        }
        assert!(!l.try_acquire());
        l.release(false); // 4 in flight of 4: +1
        assert_eq!(l.limit(), 5);
        l.release(false); // 3 of 5: still at least half used, +1
        assert_eq!(l.limit(), 6);
        // Lightly used: no growth.
        l.release(false);
        l.release(false);
        assert_eq!(l.limit(), 6);
        assert!(l.try_acquire());
        l.release(true);
        assert_eq!(l.limit(), 5); // 5.4
        for _ in 0..100 {
            assert!(l.try_acquire());
            l.release(true);
        }
        assert_eq!(l.limit(), 1);
        assert_eq!(l.in_flight(), 0);
    }
}
