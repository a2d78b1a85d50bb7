//! Reservations: a budget held for a request whose cost is known only when it ends (the tokens
//! of an LLM response), taken as an estimate when it starts and settled at its actual cost.
//!
//! [`KeyedLimit::reserve`] checks the estimate like any cost ([`Op::Check`]): a request whose
//! estimate does not fit is refused and holds nothing. [`KeyedLimit::settle`] then applies the
//! difference ([`settlement`]): a cost above the estimate is charged ([`Op::Charge`], counted
//! even past the limit, so the next requests are refused until it is paid back), one below is
//! refunded ([`Op::Refund`]). A [`Reservation`] is settled by value, so at most once.
//!
//! The overshoot of the budget is at most the sum, over the requests in flight at the last
//! admission, of what each used beyond its estimate; none when every estimate is a maximum
//! (reserve the maximum, refund the rest). Settling needs an algorithm that takes charges and
//! refunds (the fixed window, the token and leaky buckets, GCRA); the others refuse the
//! settlement with [`crate::StoreError::Unsupported`], and [`KeyedLimit::reserve`] refuses
//! such a limit up front in the same way, before anything is taken.
//!
//! ```
//! use floodgate::algorithm::fixed_window::FixedWindow;
//! use floodgate::limiter::KeyedLimit;
//! use floodgate::store::MemoryStore;
//! use std::time::Duration;
//!
//! // 100,000 tokens a user a minute.
//! let tokens = KeyedLimit::new(
//!     "tokens",
//!     FixedWindow::new(100_000, Duration::from_secs(60))?,
//!     MemoryStore::new(),
//! )?;
//! # floodgate::blocking::block_on(async {
//! let (decision, reservation) = tokens.reserve("u-42", 1_500).await?;
//! assert_eq!(decision.remaining, 98_500);
//! if let Some(reservation) = reservation {
//!     // The response turned out to cost 3,211 tokens: 1,711 more are charged.
//!     let after = tokens.settle(reservation, 3_211).await?;
//!     assert_eq!(after.remaining, 96_789);
//! }
//! # Ok::<(), floodgate::StoreError>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::algorithm::Algorithm;
use crate::store::Store;
use crate::{Decision, Op, OpKind, StoreError};

use super::KeyedLimit;

/// A budget held by a running request: its key in the limit that made it, and the estimate
/// taken. Settle it with [`KeyedLimit::settle`] on that limit when the request ends; one never
/// settled keeps its estimate counted (as a window ends or a bucket refills, it stops counting
/// like any cost).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a reservation holds its estimate until it is settled"]
pub struct Reservation {
    key: String,
    estimate: u64,
}

impl Reservation {
    /// A reservation of `estimate` on `key`, as a service rebuilds one it handed out (from a
    /// signed token): settle it on the limit whose `reserve` took the estimate.
    pub fn new(key: impl Into<String>, estimate: u64) -> Reservation {
        Reservation {
            key: key.into(),
            estimate,
        }
    }

    /// The key, without the limit's namespace.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The estimate taken, in the limit's cost units.
    pub fn estimate(&self) -> u64 {
        self.estimate
    }
}

/// The operation that settles a reservation of `estimate` at `actual`: a charge of
/// `actual − estimate` when the request cost more, else a refund of `estimate − actual` (of 0
/// when they are equal, which changes nothing).
pub fn settlement(estimate: u64, actual: u64) -> Op {
    if actual > estimate {
        Op::Charge {
            cost: actual - estimate,
        }
    } else {
        Op::Refund {
            cost: estimate - actual,
        }
    }
}

impl<S: Store<str, A>, A: Algorithm> KeyedLimit<S, A> {
    /// Holds `estimate` units of `key`'s budget for a request whose cost is known only when it
    /// ends: the decision of a check of `estimate` ([`Op::Check`]), and the reservation to
    /// settle when the request was admitted (`None` when refused: nothing is held).
    ///
    /// [`StoreError::Unsupported`] (nothing taken) when the algorithm cannot settle: it must
    /// take both charges and refunds.
    pub async fn reserve(
        &self,
        key: &str,
        estimate: u64,
    ) -> Result<(Decision, Option<Reservation>), StoreError> {
        for op in [OpKind::Charge, OpKind::Refund] {
            if !self.algorithm().supports(op) {
                return Err(StoreError::Unsupported {
                    algorithm: self.algorithm().name(),
                    op,
                });
            }
        }
        let decision = self.check(key, estimate).await?;
        let reservation = decision.allowed.then(|| Reservation::new(key, estimate));
        Ok((decision, reservation))
    }

    /// Settles `reservation` at what the request cost: charges what it used beyond its
    /// estimate, or gives back what it did not use ([`settlement`]). The decision is the key's
    /// state afterwards: `allowed == false` when a charge has put it past the limit (the next
    /// requests are refused until it has been paid back).
    pub async fn settle(
        &self,
        reservation: Reservation,
        actual: u64,
    ) -> Result<Decision, StoreError> {
        self.apply(&reservation.key, settlement(reservation.estimate, actual))
            .await
    }

    /// [`KeyedLimit::settle`] from code that cannot wait (a response body's `Drop`): sent in
    /// the background ([`Store::apply_detached`]); its answer, and a failure, are not seen.
    pub fn settle_detached(&self, reservation: Reservation, actual: u64) {
        let key = self.namespace().key(&reservation.key);
        let op = settlement(reservation.estimate, actual);
        self.store().apply_detached(self.algorithm(), &key, op);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::algorithm::fixed_window::FixedWindow;
    use crate::algorithm::sliding_log::SlidingLog;
    use crate::store::MemoryStore;

    #[test]
    fn the_difference_is_charged_or_refunded() {
        assert_eq!(settlement(100, 130), Op::Charge { cost: 30 });
        assert_eq!(settlement(100, 40), Op::Refund { cost: 60 });
        assert_eq!(settlement(100, 100), Op::Refund { cost: 0 });
    }

    #[tokio::test]
    async fn an_estimate_is_held_then_settled_up_or_down() {
        let budget = KeyedLimit::new(
            "tokens",
            FixedWindow::new(1_000, Duration::from_secs(60)).unwrap(),
            MemoryStore::new(),
        )
        .unwrap();
        let (d, first) = budget.reserve("alice", 600).await.unwrap();
        assert_eq!((d.allowed, d.remaining), (true, 400));
        let (d, second) = budget.reserve("alice", 300).await.unwrap();
        assert_eq!((d.allowed, d.remaining), (true, 100));
        let (d, refused) = budget.reserve("alice", 200).await.unwrap();
        assert!(!d.allowed);
        assert_eq!(refused, None, "a refused reservation holds nothing");
        // The first used less than its estimate, the second more: 250 + 500 = 750.
        let d = budget.settle(first.unwrap(), 250).await.unwrap();
        assert_eq!(d.remaining, 450);
        let d = budget.settle(second.unwrap(), 500).await.unwrap();
        assert_eq!((d.allowed, d.remaining), (true, 250));
        // One past the budget: counted in full, and the next reservation waits for it.
        let (_, third) = budget.reserve("alice", 200).await.unwrap();
        let d = budget.settle(third.unwrap(), 400).await.unwrap();
        assert!(!d.allowed);
        assert!(!budget.reserve("alice", 0).await.unwrap().0.allowed);
    }

    #[tokio::test]
    async fn a_limit_that_cannot_settle_refuses_before_taking_anything() {
        let log = KeyedLimit::new(
            "log",
            SlidingLog::new(5, Duration::from_secs(60)).unwrap(),
            MemoryStore::new(),
        )
        .unwrap();
        let refused = log.reserve("alice", 1).await.unwrap_err();
        assert!(
            matches!(
                refused,
                StoreError::Unsupported {
                    op: OpKind::Charge,
                    ..
                }
            ),
            "{refused}"
        );
        assert_eq!(log.check("alice", 0).await.unwrap().remaining, 5);
    }
}
