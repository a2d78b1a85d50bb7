//! What the concurrency limiter and the fleet shedder share: taking a lease on a key's
//! [`LeaseSet`](crate::algorithm::concurrency::LeaseSet) in the limiter's namespace and giving
//! it back, by RAII or by handle.

use std::sync::Arc;
use std::time::Duration;

use super::{Lease, LeaseHandle, ReturnLease};
use crate::algorithm::spec::AnyAlgorithm;
use crate::store::holds::{hold_on, NamespaceHold};
use crate::store::{Namespace, Store};
use crate::{ConfigError, Decision, LeaseId, Op, StoreError};

/// The lease time-to-live when none is set: a request that has not ended after a minute is
/// assumed gone.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(60);

/// What every lease-holding limiter's builder takes (the concurrency limiter's and the fleet
/// shedder's, which adds its reserve): one shape, checked in one place.
#[derive(Clone, Debug, Default)]
pub(crate) struct LeaseSettings {
    pub(crate) capacity: Option<u64>,
    pub(crate) lease_ttl: Option<Duration>,
    pub(crate) namespace: Option<String>,
}

impl LeaseSettings {
    /// The capacity (required) and the lease TTL (default [`DEFAULT_LEASE_TTL`]).
    pub(crate) fn capacity_and_ttl(&self) -> Result<(u64, Duration), ConfigError> {
        let capacity = self
            .capacity
            .ok_or(ConfigError::Missing { field: "capacity" })?;
        Ok((capacity, self.lease_ttl.unwrap_or(DEFAULT_LEASE_TTL)))
    }

    /// The leases of `algorithm` on `store`, in the namespace set (else `default`, claimed
    /// for this limiter alone: see [`crate::store::holds`]), and the claim to hold.
    pub(crate) fn leases<S: Store<str, AnyAlgorithm> + 'static>(
        &self,
        default: &str,
        algorithm: AnyAlgorithm,
        store: S,
    ) -> Result<(InFlight<S>, Option<NamespaceHold>), ConfigError> {
        let namespace = Namespace::new(self.namespace.as_deref().unwrap_or(default))?;
        let claim = hold_on(&store, &namespace, self.namespace.is_some())?;
        Ok((InFlight::new(namespace, algorithm, store), claim))
    }
}

/// The outcome of an acquire: the decision, and the lease when it was allowed.
#[derive(Debug)]
#[must_use = "an acquired lease must be kept while the request runs"]
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
    namespace: Namespace,
    algorithm: AnyAlgorithm,
    store: S,
}

impl<S: Store<str, AnyAlgorithm> + 'static> InFlight<S> {
    pub(crate) fn new(namespace: Namespace, algorithm: AnyAlgorithm, store: S) -> Self {
        InFlight {
            inner: Arc::new(Inner {
                namespace,
                algorithm,
                store,
            }),
        }
    }

    pub(crate) fn namespace(&self) -> &Namespace {
        &self.inner.namespace
    }

    pub(crate) fn algorithm(&self) -> &AnyAlgorithm {
        &self.inner.algorithm
    }

    pub(crate) fn store(&self) -> &S {
        &self.inner.store
    }

    /// A guard for lease `id` on `key` that gives it back when dropped, armed before the
    /// store is asked (see [`InFlight::acquire`]).
    pub(crate) fn arm(&self, key: &str, id: LeaseId) -> Lease {
        let returner: Arc<dyn ReturnLease> = self.inner.clone();
        Lease::new(
            LeaseHandle::new(self.inner.namespace.clone(), key, id),
            returner,
        )
    }

    /// Takes a place on `key` for `lease` (a new random id when `None`).
    pub(crate) async fn acquire(
        &self,
        key: &str,
        lease: Option<LeaseId>,
        critical: bool,
    ) -> Result<Acquired, StoreError> {
        let id = lease.unwrap_or_else(LeaseId::random);
        let op = Op::Acquire {
            lease: id,
            critical,
        };
        // Armed before the store is asked: if this future is dropped while the store works (a
        // client gone), the store may have granted the lease, so it is given back (releasing a
        // lease that was never granted is a no-op).
        let guard = self.arm(key, id);
        let scoped = self.inner.namespace.key(key);
        let decision = self
            .inner
            .store
            .apply(&self.inner.algorithm, &scoped, op)
            .await?;
        let lease = if decision.allowed {
            Some(guard)
        } else {
            let _ = guard.keep(); // nothing was granted: nothing to give back
            None
        };
        Ok(Acquired { decision, lease })
    }

    /// Gives back `lease` on `key`; `Ok(false)` if it was not held (unknown or expired).
    pub(crate) async fn release(&self, key: &str, lease: LeaseId) -> Result<bool, StoreError> {
        let scoped = self.inner.namespace.key(key);
        let decision = self
            .inner
            .store
            .apply(&self.inner.algorithm, &scoped, Op::Release { lease })
            .await?;
        Ok(decision.allowed)
    }

    /// The in-flight count on `key` now (a read-only probe): `limit − remaining` of a
    /// non-critical probe, so for the fleet the non-critical leases in flight.
    pub(crate) async fn in_flight(&self, key: &str) -> Result<u64, StoreError> {
        let scoped = self.inner.namespace.key(key);
        let d = self
            .inner
            .store
            .apply(&self.inner.algorithm, &scoped, Op::Check { cost: 0 })
            .await?;
        Ok(d.limit.saturating_sub(d.remaining))
    }
}

impl<S: Store<str, AnyAlgorithm>> ReturnLease for Inner<S> {
    fn return_lease(&self, key: &str, id: LeaseId) {
        let scoped = self.namespace.key(key);
        self.store
            .apply_detached(&self.algorithm, &scoped, Op::Release { lease: id });
    }
}
