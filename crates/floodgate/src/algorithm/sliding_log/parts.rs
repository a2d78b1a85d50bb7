//! A sliding log's state as its entries, whole, for a store that keeps states on disk
//! (`store::file`): taking the parts and building from them gives back the same state.

use super::{Entry, SlidingLogState};

impl SlidingLogState {
    /// Every entry, oldest first, as `(instant in ns, cost)`.
    pub(crate) fn to_parts(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + '_ {
        self.entries.iter().map(|e| (e.at, e.cost))
    }

    /// The log of `entries`, oldest first; `None` when they are out of order or their costs
    /// overflow, which no operation produces.
    pub(crate) fn from_parts(entries: &[(u64, u64)]) -> Option<Self> {
        if entries.windows(2).any(|w| w[0].0 > w[1].0) {
            return None;
        }
        let total = entries
            .iter()
            .try_fold(0u64, |sum, &(_, cost)| sum.checked_add(cost))?;
        Some(SlidingLogState {
            entries: entries
                .iter()
                .map(|&(at, cost)| Entry { at, cost })
                .collect(),
            total,
        })
    }
}
