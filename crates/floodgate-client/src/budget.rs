//! The retry budget: a shared quota that retries spend and successes earn back (the AWS SDKs'
//! "standard" retry quota).
//!
//! A retry after a refusal or a connection error costs [`RetryBudget::retry_cost`] units, a
//! retry after a timeout [`RetryBudget::timeout_cost`]; every successful response refunds
//! [`RetryBudget::refund`] units, up to the capacity. With the defaults (capacity 500, costs
//! 5 and 10, refund 1) a client that sees only failures stops retrying after 100 retries, and
//! needs five successes to earn one retry back: retries can multiply an overloaded server's
//! load by at most `1 + 1/5` in the long run, never by the attempt count.

/// A retry budget. Not synchronised: the layer keeps one per host inside the host's lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryBudget {
    capacity: u32,
    left: u32,
    retry_cost: u32,
    timeout_cost: u32,
    refund: u32,
}

impl RetryBudget {
    /// A full budget of `capacity` units with the given costs.
    pub fn new(capacity: u32, retry_cost: u32, timeout_cost: u32, refund: u32) -> RetryBudget {
        RetryBudget {
            capacity,
            left: capacity,
            retry_cost,
            timeout_cost,
            refund,
        }
    }

    /// Units left.
    pub fn left(&self) -> u32 {
        self.left
    }

    /// The units a retry after a refusal or connection error costs.
    pub fn retry_cost(&self) -> u32 {
        self.retry_cost
    }

    /// The units a retry after a timeout costs.
    pub fn timeout_cost(&self) -> u32 {
        self.timeout_cost
    }

    /// The units a success refunds.
    pub fn refund(&self) -> u32 {
        self.refund
    }

    /// Takes the cost of one retry (`after_timeout` picks the timeout cost); false, taking
    /// nothing, when not enough is left.
    pub fn withdraw(&mut self, after_timeout: bool) -> bool {
        let cost = if after_timeout {
            self.timeout_cost
        } else {
            self.retry_cost
        };
        match self.left.checked_sub(cost) {
            Some(left) => {
                self.left = left;
                true
            }
            None => false,
        }
    }

    /// Credits one success.
    pub fn succeeded(&mut self) {
        self.left = self.left.saturating_add(self.refund).min(self.capacity);
    }
}

impl Default for RetryBudget {
    fn default() -> Self {
        RetryBudget::new(500, 5, 10, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn failures_only_allow_capacity_over_cost_retries() {
        let mut b = RetryBudget::default();
        let retries = (0..1000).take_while(|_| b.withdraw(false)).count();
        assert_eq!(retries, 100);
        assert_eq!(b.left(), 0);
        for _ in 0..4 {
            b.succeeded();
        }
        assert!(!b.withdraw(false));
        b.succeeded();
        assert!(b.withdraw(false));
        b.succeeded();
        assert!(!b.withdraw(true), "a timeout retry costs 10");
    }

    proptest! {
        /// Whatever the sequence, retries never exceed (capacity + refunds) / cost.
        #[test]
        fn retries_are_bounded(events in proptest::collection::vec(0u8..3, 0..2000)) {
            let mut b = RetryBudget::default();
            let (mut spent, mut refunds) = (0u64, 0u64);
            for e in events {
                match e {
                    0 => if b.withdraw(false) { spent += 5 },
                    1 => if b.withdraw(true) { spent += 10 },
                    _ => { b.succeeded(); refunds += 1 }
                }
                prop_assert!(spent <= 500 + refunds);
                prop_assert!(b.left() <= 500);
            }
        }
    }
}
