//! The `local` failure policy: when a stage's shared store fails, the stage decides on this
//! node's own memory store, at this node's share of its limits ([`AnyAlgorithm::share`] with
//! the pipeline's [`PipelineBuilder::nodes`](super::PipelineBuilder::nodes)).
//!
//! While the store is down, each node enforces `1/nodes` of every limit by itself, so the
//! fleet as a whole stays near the limit instead of admitting everything (fail open) or
//! nothing (fail closed). The local counts start empty and are separate from the store's: when
//! the store comes back the stage counts there again, and what was admitted locally is not
//! carried over. Leases taken locally are given back locally (by their guard, or through
//! [`Pipeline::release`](super::Pipeline::release), which tries both).

use std::sync::Arc;

use super::Limiter;
use crate::algorithm::spec::{AnyAlgorithm, AnyState};
use crate::limiter::{Lease, LeaseHandle, ReturnLease};
use crate::store::{Key, LocalStore, MemoryStore, Namespace, Store};
use crate::{Clock, ConfigError, Decision, LeaseId, Op, StoreError};

/// The memory store every `local` stage of a pipeline shares (keys stay apart by namespace).
pub(super) type NodeStore = MemoryStore<Key, AnyState, Arc<dyn Clock>>;

/// A stage's fallback: its algorithms at this node's share, on the pipeline's local store.
pub(super) struct LocalShare {
    store: Arc<NodeStore>,
    namespace: Namespace,
    /// `(plan name, share)` for a request rate stage (in the limiter's plan order); one entry
    /// with an empty name for a lease stage.
    algorithms: Vec<(String, AnyAlgorithm)>,
}

impl std::fmt::Debug for LocalShare {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalShare")
            .field("namespace", &self.namespace)
            .field("algorithms", &self.algorithms)
            .finish_non_exhaustive()
    }
}

impl LocalShare {
    /// The fallback of a stage running `limiter` when `nodes` nodes share its store; `None`
    /// for a limiter without a store.
    pub(super) fn new<S: Store<str, AnyAlgorithm> + 'static>(
        limiter: &Limiter<S>,
        nodes: u32,
        store: Arc<NodeStore>,
    ) -> Result<Option<LocalShare>, ConfigError> {
        let algorithms = match limiter {
            Limiter::RequestRate(l) => l
                .plans()
                .map(|p| Ok((p.name().to_owned(), p.algorithm().share(nodes)?)))
                .collect::<Result<Vec<_>, ConfigError>>()?,
            Limiter::Concurrency(l) => vec![(String::new(), l.algorithm().share(nodes)?)],
            Limiter::Fleet(l) => vec![(String::new(), l.algorithm().share(nodes)?)],
            Limiter::Utilization(_) | Limiter::AdaptiveConcurrency(_) => return Ok(None),
        };
        Ok(Some(LocalShare {
            store,
            namespace: limiter.name().clone(),
            algorithms,
        }))
    }

    /// The share of the plan named `plan` (request rate), or of the stage's one algorithm.
    fn algorithm(&self, plan: Option<&str>) -> &AnyAlgorithm {
        let found = plan.and_then(|plan| self.algorithms.iter().find(|(name, _)| name == plan));
        &found.unwrap_or(&self.algorithms[0]).1
    }

    /// Decides `op` on `scoped` (the namespaced key) locally. An acquire's lease is given back
    /// here: `lease` is re-armed to return to this store (the shared store's guard is
    /// detached: that store is out of reach).
    pub(super) fn decide(
        self: &Arc<Self>,
        plan: Option<&str>,
        scoped: &str,
        op: Op,
        lease: &mut Option<Lease>,
    ) -> Result<Decision, StoreError> {
        let algorithm = self.algorithm(plan);
        let decision = self.store.apply_now(algorithm, scoped, op)?;
        if let Some(guard) = lease.take() {
            let handle = guard.keep();
            *lease = Some(Lease::new(handle, self.clone()));
        }
        Ok(decision)
    }

    /// Gives back a lease taken here; `false` if it was not held.
    pub(super) fn release(&self, lease: &LeaseHandle) -> bool {
        let scoped = self.namespace.key(lease.key());
        let op = Op::Release { lease: lease.id() };
        self.store
            .apply_now(self.algorithm(None), &*scoped, op)
            .is_ok_and(|d| d.allowed)
    }
}

impl ReturnLease for LocalShare {
    fn return_lease(&self, key: &str, id: LeaseId) {
        let handle = LeaseHandle::new(self.namespace.clone(), key, id);
        let _ = self.release(&handle);
    }
}
