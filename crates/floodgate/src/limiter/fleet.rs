//! The fleet usage load shedder: one in-flight count for the whole fleet, with a share kept for
//! critical requests.
//!
//! Critical requests are never refused by it. A non-critical request is refused with 503 while
//! the fleet's non-critical in-flight count is at `(1 − reserved_for_critical) × capacity` or
//! more, so that critical traffic always finds room. The count lives under one key
//! ([`FLEET_KEY`]) of the shedder's namespace: every node that shares the store counts in it,
//! so on a shared store the count is the fleet's; on the memory store it is this node's.
//! Leases behave as in the concurrency limiter: RAII, release by handle, expiry after
//! `lease_ttl`.

use std::time::Duration;

use super::in_flight::{Acquired, InFlight, LeaseSettings};
use super::LeaseHandle;
use crate::algorithm::concurrency::Fleet;
use crate::algorithm::spec::AnyAlgorithm;
use crate::blocking::block_on;
use crate::store::holds::NamespaceHold;
use crate::store::{Namespace, Store};
use crate::{ConfigError, LeaseId, StoreError};

/// The key, in the shedder's namespace, under which the fleet's leases are counted.
pub const FLEET_KEY: &str = "fleet";

/// The fleet usage load shedder. See the [module documentation](self).
///
/// ```
/// use floodgate::limiter::fleet::FleetShedder;
/// use floodgate::store::MemoryStore;
///
/// // 10 places, 20% of them kept for critical requests: 8 for the rest.
/// let fleet = FleetShedder::builder()
///     .capacity(10)
///     .reserved_for_critical(0.2)
///     .build(MemoryStore::new())?;
/// let held: Vec<_> = (0..8).map(|_| fleet.acquire_blocking(false)).collect::<Result<_, _>>()?;
/// assert!(held.iter().all(|a| a.decision.allowed));
/// assert!(!fleet.acquire_blocking(false)?.decision.allowed); // the reserve is for critical
/// assert!(fleet.acquire_blocking(true)?.decision.allowed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct FleetShedder<S> {
    leases: InFlight<S>,
    capacity: u64,
    reserved_for_critical: f64,
    lease_ttl: Duration,
    /// The hold on the namespace in the store's record (see [`crate::store::holds`]).
    _claim: Option<NamespaceHold>,
}

/// Builds a [`FleetShedder`]: `capacity` is required; `reserved_for_critical` defaults to 0
/// (nothing reserved), `lease_ttl` to [`DEFAULT_LEASE_TTL`](super::concurrency::DEFAULT_LEASE_TTL) and `namespace` to `fleet`.
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct FleetShedderBuilder {
    settings: LeaseSettings,
    reserved_for_critical: f64,
}

impl FleetShedderBuilder {
    /// The fleet's places (at least 1).
    pub fn capacity(mut self, capacity: u64) -> Self {
        self.settings.capacity = Some(capacity);
        self
    }

    /// The fraction of `capacity` kept for critical requests, in `[0, 1]`.
    pub fn reserved_for_critical(mut self, fraction: f64) -> Self {
        self.reserved_for_critical = fraction;
        self
    }

    /// How long an unreturned lease holds its place.
    pub fn lease_ttl(mut self, lease_ttl: Duration) -> Self {
        self.settings.lease_ttl = Some(lease_ttl);
        self
    }

    /// The namespace of the fleet's key in the store (see [`Namespace::new`]).
    ///
    /// Without one, the limiter takes `fleet` for itself on its store: a second limiter
    /// of the same store building in `fleet` is refused while this one lives, since the
    /// two would count in the same keys (see [`crate::store::holds`]). Name the namespace on
    /// both to share their counts on purpose.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.settings.namespace = Some(namespace.into());
        self
    }

    /// Validates the settings (errors name the field) and builds the shedder over `store`.
    pub fn build<S: Store<str, AnyAlgorithm> + 'static>(
        self,
        store: S,
    ) -> Result<FleetShedder<S>, ConfigError> {
        let (capacity, lease_ttl) = self.settings.capacity_and_ttl()?;
        let algorithm = Fleet::new(capacity, self.reserved_for_critical, lease_ttl)?;
        let (leases, claim) = self.settings.leases("fleet", algorithm.into(), store)?;
        Ok(FleetShedder {
            leases,
            capacity,
            reserved_for_critical: self.reserved_for_critical,
            lease_ttl,
            _claim: claim,
        })
    }
}

impl<S> std::fmt::Debug for FleetShedder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetShedder")
            .field("capacity", &self.capacity)
            .field("reserved_for_critical", &self.reserved_for_critical)
            .field("lease_ttl", &self.lease_ttl)
            .finish_non_exhaustive()
    }
}

impl FleetShedder<()> {
    /// A builder (see [`FleetShedderBuilder`]).
    pub fn builder() -> FleetShedderBuilder {
        FleetShedderBuilder::default()
    }
}

impl<S: Store<str, AnyAlgorithm> + 'static> FleetShedder<S> {
    /// The fleet's places.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The fraction of `capacity` kept for critical requests.
    pub fn reserved_for_critical(&self) -> f64 {
        self.reserved_for_critical
    }

    /// How long an unreturned lease holds its place.
    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// The namespace of the fleet's key.
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

    /// The store holding the fleet's leases.
    pub fn store(&self) -> &S {
        self.leases.store()
    }

    /// Takes a place in the fleet for one request under a new random lease id.
    pub async fn acquire(&self, critical: bool) -> Result<Acquired, StoreError> {
        self.leases.acquire(FLEET_KEY, None, critical).await
    }

    /// Takes (or renews) a place under the caller's own lease id.
    pub async fn acquire_with_id(
        &self,
        critical: bool,
        lease: LeaseId,
    ) -> Result<Acquired, StoreError> {
        self.leases.acquire(FLEET_KEY, Some(lease), critical).await
    }

    /// Gives back a lease kept with [`super::Lease::keep`]; `Ok(false)` if it was not held or
    /// was issued by another limiter.
    pub async fn release(&self, lease: &LeaseHandle) -> Result<bool, StoreError> {
        if lease.limiter() != self.namespace() || lease.key() != FLEET_KEY {
            return Ok(false);
        }
        self.leases.release(FLEET_KEY, lease.id()).await
    }

    /// The fleet's non-critical requests in flight now (a read-only probe).
    pub async fn in_flight(&self) -> Result<u64, StoreError> {
        self.leases.in_flight(FLEET_KEY).await
    }

    /// [`FleetShedder::acquire`] for synchronous callers (see [`crate::blocking`]).
    pub fn acquire_blocking(&self, critical: bool) -> Result<Acquired, StoreError> {
        block_on(self.acquire(critical))
    }

    /// [`FleetShedder::release`] for synchronous callers.
    pub fn release_blocking(&self, lease: &LeaseHandle) -> Result<bool, StoreError> {
        block_on(self.release(lease))
    }
}
