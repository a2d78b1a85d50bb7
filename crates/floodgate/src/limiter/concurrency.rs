//! The concurrent requests limiter: at most `capacity` requests in flight per user.
//!
//! A request takes a lease when it starts and gives it back when it ends: dropping the
//! [`Lease`](super::Lease) returns it on every path (success, error, panic unwinding, a
//! cancelled future), and a service can return it by id instead. A lease never returned
//! expires `lease_ttl` after it was taken, so a crashed caller cannot leak capacity for longer.
//! Refusals are 429: the user has too much in flight; retrying when one finishes will pass.

use std::time::Duration;

use super::in_flight::{Acquired, InFlight};
use crate::algorithm::concurrency::Concurrency;
use crate::algorithm::spec::AnyAlgorithm;
use crate::store::Store;
use crate::{ConfigError, StoreError};

/// Per-user concurrency limiting. See the [module documentation](self).
pub struct ConcurrencyLimiter<S> {
    leases: InFlight<S>,
    capacity: u64,
}

impl<S> std::fmt::Debug for ConcurrencyLimiter<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConcurrencyLimiter")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl<S: Store<str, AnyAlgorithm> + 'static> ConcurrencyLimiter<S> {
    /// At most `capacity` requests in flight per user; leases expire after `lease_ttl`.
    pub fn new(capacity: u64, lease_ttl: Duration, store: S) -> Result<Self, ConfigError> {
        let algorithm = Concurrency::new(capacity, lease_ttl)?;
        Ok(ConcurrencyLimiter {
            leases: InFlight::new(AnyAlgorithm::Concurrency(algorithm), store),
            capacity,
        })
    }

    /// The most requests in flight per user.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The lease algorithm and its parameters.
    pub fn algorithm(&self) -> &AnyAlgorithm {
        self.leases.algorithm()
    }

    /// The store holding the users' leases.
    pub fn store(&self) -> &S {
        self.leases.store()
    }

    /// Takes a place for one of `user`'s requests, with the caller's lease id or a new one.
    pub async fn acquire(&self, user: &str, lease: Option<u64>) -> Result<Acquired, StoreError> {
        self.leases.acquire(user, lease, false).await
    }

    /// Gives back `user`'s lease `lease`; `Ok(false)` if it was not held.
    pub async fn release(&self, user: &str, lease: u64) -> Result<bool, StoreError> {
        self.leases.release(user, lease).await
    }
}
