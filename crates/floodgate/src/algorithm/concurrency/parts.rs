//! A lease set as its leases, whole, for a store that keeps states on disk (`store::file`):
//! each lease keeps its id, class and expiry instant, so a lease taken before a restart holds
//! its place until that instant, then frees, exactly as if the process had not stopped.

use super::{LeaseSet, NIL};
use crate::LeaseId;

/// One lease of a [`LeaseSet`]: its id, whether it is critical, and when it expires (ns).
pub(crate) type LeasePart = (LeaseId, bool, u64);

impl LeaseSet {
    /// The latest instant the set has seen (ns), and every lease, each class's queue in order
    /// (non-critical first, then critical; oldest first within each).
    pub(crate) fn to_parts(&self) -> (u64, Vec<LeasePart>) {
        let mut leases = Vec::with_capacity(self.slots.len());
        for queue in &self.queues {
            let mut i = queue.head;
            while i != NIL {
                let slot = &self.slots[i];
                leases.push((slot.lease, slot.critical, slot.expires_at));
                i = slot.next;
            }
        }
        (self.seen, leases)
    }

    /// The set [`LeaseSet::to_parts`] took apart: each lease is queued again in the order
    /// given. `None` when an id appears twice, which no operation produces.
    pub(crate) fn from_parts(seen: u64, leases: &[LeasePart]) -> Option<Self> {
        let mut set = LeaseSet::new();
        set.seen = seen;
        for &(lease, critical, expires_at) in leases {
            if set.index.contains_key(&lease) {
                return None;
            }
            set.insert(lease, critical, expires_at);
        }
        Some(set)
    }
}
