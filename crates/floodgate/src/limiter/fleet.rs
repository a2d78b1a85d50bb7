//! The fleet usage load shedder: one in-flight count for the whole fleet, with a share kept for
//! critical requests.
//!
//! Critical requests are never refused by it. A non-critical request is refused with 503 while
//! the fleet's non-critical in-flight count is at `(1 − reserved_for_critical) × capacity` or
//! more, so that critical traffic always finds room. Every node of a fleet must share the
//! store (Redis) for the count to be the fleet's; on the memory store it is this node's.
//! Leases behave as in the concurrency limiter: RAII, release by id, expiry after `lease_ttl`.

use std::time::Duration;

use super::in_flight::{Acquired, InFlight};
use crate::algorithm::concurrency::Fleet;
use crate::algorithm::spec::AnyAlgorithm;
use crate::store::Store;
use crate::{ConfigError, StoreError};

/// The key under which the fleet's leases are counted.
pub const FLEET_KEY: &str = "fleet";

/// The fleet usage load shedder. See the [module documentation](self).
pub struct FleetShedder<S> {
    leases: InFlight<S>,
}

impl<S> std::fmt::Debug for FleetShedder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetShedder").finish_non_exhaustive()
    }
}

impl<S: Store<str, AnyAlgorithm> + 'static> FleetShedder<S> {
    /// A fleet of `capacity` places, the fraction `reserved_for_critical` of them kept for
    /// critical requests; leases expire after `lease_ttl`.
    pub fn new(
        capacity: u64,
        reserved_for_critical: f64,
        lease_ttl: Duration,
        store: S,
    ) -> Result<Self, ConfigError> {
        let algorithm = Fleet::new(capacity, reserved_for_critical, lease_ttl)?;
        Ok(FleetShedder {
            leases: InFlight::new(AnyAlgorithm::Fleet(algorithm), store),
        })
    }

    /// The lease algorithm and its parameters.
    pub fn algorithm(&self) -> &AnyAlgorithm {
        self.leases.algorithm()
    }

    /// The store holding the fleet's leases.
    pub fn store(&self) -> &S {
        self.leases.store()
    }

    /// Takes a place in the fleet for one request, with the caller's lease id or a new one.
    pub async fn acquire(
        &self,
        critical: bool,
        lease: Option<u64>,
    ) -> Result<Acquired, StoreError> {
        self.leases.acquire(FLEET_KEY, lease, critical).await
    }

    /// Gives back lease `lease`; `Ok(false)` if it was not held.
    pub async fn release(&self, lease: u64) -> Result<bool, StoreError> {
        self.leases.release(FLEET_KEY, lease).await
    }
}
