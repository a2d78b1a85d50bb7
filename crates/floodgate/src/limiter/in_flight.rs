//! What the concurrency limiter and the fleet shedder share: taking a lease on a key's
//! [`LeaseSet`](crate::algorithm::concurrency::LeaseSet) and giving it back, by RAII or by id.

use std::sync::Arc;

use super::{new_lease_id, Lease, ReturnLease};
use crate::algorithm::spec::AnyAlgorithm;
use crate::store::Store;
use crate::{Decision, Op, StoreError};

/// The outcome of an acquire: the decision, and the lease when it was allowed.
#[derive(Debug)]
pub struct Acquired {
    /// The decision (`limit` − `remaining` is the in-flight count of the request's class).
    pub decision: Decision,
    /// The place taken; dropping it gives the place back. `None` when refused.
    pub lease: Option<Lease>,
}

/// A lease-taking limit over a store (see the module documentation).
pub(crate) struct InFlight<S> {
    inner: Arc<Inner<S>>,
}

struct Inner<S> {
    algorithm: AnyAlgorithm,
    store: S,
}

impl<S: Store<str, AnyAlgorithm> + 'static> InFlight<S> {
    pub(crate) fn new(algorithm: AnyAlgorithm, store: S) -> Self {
        InFlight {
            inner: Arc::new(Inner { algorithm, store }),
        }
    }

    pub(crate) fn algorithm(&self) -> &AnyAlgorithm {
        &self.inner.algorithm
    }

    pub(crate) fn store(&self) -> &S {
        &self.inner.store
    }

    /// Takes a place on `key` for `lease` (a new random id when `None`).
    pub(crate) async fn acquire(
        &self,
        key: &str,
        lease: Option<u64>,
        critical: bool,
    ) -> Result<Acquired, StoreError> {
        let id = lease.unwrap_or_else(new_lease_id);
        let op = Op::Acquire {
            lease: id,
            critical,
        };
        // Armed before the store is asked: if this future is dropped while the store works (a
        // client gone), the store may have granted the lease, so it is given back (releasing a
        // lease that was never granted is a no-op).
        let returner: Arc<dyn ReturnLease> = self.inner.clone();
        let guard = Lease::new(id, key.to_string(), returner);
        let decision = self
            .inner
            .store
            .apply(&self.inner.algorithm, key, op)
            .await?;
        let lease = if decision.allowed {
            Some(guard)
        } else {
            guard.keep(); // nothing was granted: nothing to give back
            None
        };
        Ok(Acquired { decision, lease })
    }

    /// Gives back `lease` on `key`; `Ok(false)` if it was not held (unknown or expired).
    pub(crate) async fn release(&self, key: &str, lease: u64) -> Result<bool, StoreError> {
        let op = Op::Release { lease };
        let decision = self
            .inner
            .store
            .apply(&self.inner.algorithm, key, op)
            .await?;
        Ok(decision.allowed)
    }
}

impl<S: Store<str, AnyAlgorithm>> ReturnLease for Inner<S> {
    fn return_lease(&self, key: &str, id: u64) {
        self.store
            .apply_detached(&self.algorithm, key, Op::Release { lease: id });
    }
}
