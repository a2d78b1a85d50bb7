//! [`ClaimsTable`]: the claims of every shared limit, held in this process, for the stores
//! that keep their state in it (the memory store and the durable one, whose claims need not
//! outlive the process: a node's claim lapses after `terms.idle` without a report anyway).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::{ClaimStep, ClaimTerms, Claimed, Claims};
use crate::Nanos;

/// The claims of each shared limit by name, behind one lock: a step is [`Claims::apply`] on
/// its limit's claims, atomic with every other step of this process.
#[derive(Debug, Default)]
pub struct ClaimsTable {
    limits: Mutex<HashMap<String, Claims>>,
}

impl ClaimsTable {
    /// An empty table.
    pub fn new() -> ClaimsTable {
        ClaimsTable::default()
    }

    /// Takes `step` on the claims of `limit` under `terms` at `now`, as [`Claims::apply`]
    /// does. A limit left with no claimant and nothing in force is forgotten.
    pub fn step(
        &self,
        limit: &str,
        step: ClaimStep<'_>,
        terms: &ClaimTerms,
        now: Nanos,
    ) -> Claimed {
        let mut limits = self.lock();
        let claims = match limits.get_mut(limit) {
            Some(claims) => claims,
            None => limits.entry(limit.to_string()).or_default(),
        };
        let claimed = claims.apply(step, terms, now);
        if claims.is_empty() && claimed.in_force == 0 {
            limits.remove(limit);
        }
        claimed
    }

    /// Removes, from every limit, the nodes that have not reported for `idle` at `now`, and
    /// the limits left with no claimant and nothing in force: the sweep of a limit no node
    /// steps any more.
    pub fn sweep(&self, now: Nanos, idle: Duration) {
        self.lock().retain(|_, claims| {
            claims.expire(now, idle);
            !claims.is_empty() || claims.in_force(now) > 0
        });
    }

    /// The limits held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no limit is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Claims>> {
        // A step cannot leave the map half-changed: a poisoned lock's map is whole.
        self.limits.lock().unwrap_or_else(|e| e.into_inner())
    }
}
