//! The concurrent requests limiter: at most `capacity` requests in flight per user.
//!
//! A request takes a lease when it starts and gives it back when it ends: dropping the
//! [`Lease`](super::Lease) returns it on every path (success, error, panic unwinding, a
//! cancelled future), and a service can keep it as a [`LeaseHandle`] and return it later. A
//! lease never returned expires `lease_ttl` after it was taken, so a crashed caller cannot leak
//! capacity for longer. Refusals are 429: the user has too much in flight; retrying when one
//! finishes will pass.

use std::time::Duration;

use super::in_flight::{Acquired, InFlight, LeaseSettings};
use super::LeaseHandle;
use crate::algorithm::concurrency::Concurrency;
use crate::algorithm::spec::AnyAlgorithm;
use crate::blocking::block_on;
use crate::store::holds::NamespaceHold;
use crate::store::{Namespace, Store};
use crate::{ConfigError, LeaseId, StoreError};

pub use super::in_flight::DEFAULT_LEASE_TTL;

/// Per-user concurrency limiting. See the [module documentation](self).
///
/// ```
/// use floodgate::limiter::concurrency::ConcurrencyLimiter;
/// use floodgate::store::MemoryStore;
///
/// let limiter = ConcurrencyLimiter::builder().capacity(2).build(MemoryStore::new())?;
/// let first = limiter.acquire_blocking("alice")?;
/// let second = limiter.acquire_blocking("alice")?;
/// assert!(first.decision.allowed && second.decision.allowed);
/// assert!(!limiter.acquire_blocking("alice")?.decision.allowed);
/// drop(first); // the request ended: its place is free again
/// assert!(limiter.acquire_blocking("alice")?.decision.allowed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ConcurrencyLimiter<S> {
    leases: InFlight<S>,
    capacity: u64,
    lease_ttl: Duration,
    /// The hold on the namespace in the store's record (see [`crate::store::holds`]).
    _claim: Option<NamespaceHold>,
}

/// Builds a [`ConcurrencyLimiter`]: `capacity` is required; `lease_ttl` defaults to
/// [`DEFAULT_LEASE_TTL`] and `namespace` to `concurrency`.
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct ConcurrencyLimiterBuilder {
    settings: LeaseSettings,
}

impl ConcurrencyLimiterBuilder {
    /// The most requests in flight per user (at least 1).
    pub fn capacity(mut self, capacity: u64) -> Self {
        self.settings.capacity = Some(capacity);
        self
    }

    /// How long an unreturned lease holds its place.
    pub fn lease_ttl(mut self, lease_ttl: Duration) -> Self {
        self.settings.lease_ttl = Some(lease_ttl);
        self
    }

    /// The namespace of the users' keys in the store (see [`Namespace::new`]).
    ///
    /// Without one, the limiter takes `concurrency` for itself on its store: a second limiter
    /// of the same store building in `concurrency` is refused while this one lives, since the
    /// two would count in the same keys (see [`crate::store::holds`]). Name the namespace on
    /// both to share their counts on purpose.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.settings.namespace = Some(namespace.into());
        self
    }

    /// Validates the settings (errors name the field) and builds the limiter over `store`.
    pub fn build<S: Store<str, AnyAlgorithm> + 'static>(
        self,
        store: S,
    ) -> Result<ConcurrencyLimiter<S>, ConfigError> {
        let (capacity, lease_ttl) = self.settings.capacity_and_ttl()?;
        let algorithm = Concurrency::new(capacity, lease_ttl)?;
        let (leases, claim) = self
            .settings
            .leases("concurrency", algorithm.into(), store)?;
        Ok(ConcurrencyLimiter {
            leases,
            capacity,
            lease_ttl,
            _claim: claim,
        })
    }
}

impl<S> std::fmt::Debug for ConcurrencyLimiter<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConcurrencyLimiter")
            .field("capacity", &self.capacity)
            .field("lease_ttl", &self.lease_ttl)
            .finish_non_exhaustive()
    }
}

impl ConcurrencyLimiter<()> {
    /// A builder (see [`ConcurrencyLimiterBuilder`]).
    pub fn builder() -> ConcurrencyLimiterBuilder {
        ConcurrencyLimiterBuilder::default()
    }
}

impl<S: Store<str, AnyAlgorithm> + 'static> ConcurrencyLimiter<S> {
    /// The most requests in flight per user.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// How long an unreturned lease holds its place.
    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// The namespace of the users' keys.
    pub fn namespace(&self) -> &Namespace {
        self.leases.namespace()
    }

    /// The lease algorithm and its parameters.
    pub fn algorithm(&self) -> &AnyAlgorithm {
        self.leases.algorithm()
    }

    /// The lease-taking limit underneath, for the pipeline's chains.
    pub(crate) fn leases(&self) -> &InFlight<S> {
        &self.leases
    }

    /// The store holding the users' leases.
    pub fn store(&self) -> &S {
        self.leases.store()
    }

    /// Takes a place for one of `user`'s requests under a new random lease id.
    pub async fn acquire(&self, user: &str) -> Result<Acquired, StoreError> {
        self.leases.acquire(user, None, false).await
    }

    /// Takes (or renews) a place under the caller's own lease id.
    pub async fn acquire_with_id(
        &self,
        user: &str,
        lease: LeaseId,
    ) -> Result<Acquired, StoreError> {
        self.leases.acquire(user, Some(lease), false).await
    }

    /// Gives back a lease kept with [`super::Lease::keep`]; `Ok(false)` if it was not held
    /// (expired, already released) or was issued by another limiter.
    pub async fn release(&self, lease: &LeaseHandle) -> Result<bool, StoreError> {
        if lease.limiter() != self.namespace() {
            return Ok(false);
        }
        self.leases.release(lease.key(), lease.id()).await
    }

    /// `user`'s requests in flight now (a read-only probe).
    pub async fn in_flight(&self, user: &str) -> Result<u64, StoreError> {
        self.leases.in_flight(user).await
    }

    /// [`ConcurrencyLimiter::acquire`] for synchronous callers (see [`crate::blocking`]).
    pub fn acquire_blocking(&self, user: &str) -> Result<Acquired, StoreError> {
        block_on(self.acquire(user))
    }

    /// [`ConcurrencyLimiter::release`] for synchronous callers.
    pub fn release_blocking(&self, lease: &LeaseHandle) -> Result<bool, StoreError> {
        block_on(self.release(lease))
    }
}
