//! The built-in utilization signal: busy workers over the workers a node has.
//!
//! A worker is busy from the moment its request is admitted until the request ends. In
//! process (the tower middleware) that is a guard, [`WorkerGauge::enter`], held for the
//! request's life. A service that decides for workers elsewhere (`floodgate serve`, called by
//! a gateway with `/v1/evaluate` when a request starts and `/v1/release` when it ends) cannot
//! hold a guard across two calls, so it takes a *worker lease* instead
//! ([`WorkerGauge::lease`]): a [`Lease`] in the verdict, kept in the caller's lease token and
//! given back with it, that counts the worker busy until it is released or until `lease_ttl`
//! has passed (a gateway that crashed, or released on another node, does not leave a worker
//! busy for ever). Leases are this node's own, as the adaptive limiter's are: a lease given
//! back to another node is not found there, and expires here.
//!
//! `busy` = workers entered + leases held and younger than `lease_ttl`; utilization =
//! `min(busy / workers, 1)`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::UtilizationSource;
use crate::limiter::{Lease, LeaseHandle, ReturnLease};
use crate::store::Namespace;
use crate::{Clock, ConfigError, LeaseId, Nanos};

/// Busy workers over a node's workers (see the [module documentation](self)).
pub struct WorkerGauge {
    /// Workers entered with a guard.
    busy: AtomicU64,
    workers: u64,
    /// Worker leases, when the gauge takes them ([`WorkerGauge::with_leases`]).
    leases: Option<Leases>,
}

/// A gauge's worker leases: when each was taken, expiring after `ttl` on `clock`.
struct Leases {
    ttl: Duration,
    clock: Arc<dyn Clock>,
    /// The key of this node's leases: `node-` and 16 random hex digits, so that a lease handed
    /// to another node is recognised there as not its own.
    node: Arc<str>,
    /// What a lease's guard gives back to.
    held: Arc<Held>,
}

#[derive(Default)]
struct Held(Mutex<HashMap<LeaseId, Nanos>>);

impl std::fmt::Debug for WorkerGauge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerGauge")
            .field("busy", &self.busy())
            .field("workers", &self.workers)
            .field("lease_ttl", &self.leases.as_ref().map(|l| l.ttl))
            .finish()
    }
}

impl WorkerGauge {
    /// A gauge for `workers` workers (at least 1), counting guards only.
    pub fn new(workers: u64) -> Result<WorkerGauge, ConfigError> {
        if workers == 0 {
            return Err(ConfigError::invalid("workers", 0, "must be at least 1"));
        }
        Ok(WorkerGauge {
            busy: AtomicU64::new(0),
            workers,
            leases: None,
        })
    }

    /// The same gauge, also taking worker leases ([`WorkerGauge::lease`]) that count a worker
    /// busy until released or `ttl` (above 0) has passed on `clock`.
    pub fn with_leases(
        mut self,
        ttl: Duration,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ConfigError> {
        if ttl.is_zero() {
            return Err(ConfigError::invalid("lease_ttl", "0s", "must be above 0"));
        }
        self.leases = Some(Leases {
            ttl,
            clock,
            node: format!("node-{}", &LeaseId::random().to_string()[..16]).into(),
            held: Arc::default(),
        });
        Ok(self)
    }

    /// Marks one worker busy until the guard is dropped.
    pub fn enter(self: &Arc<Self>) -> BusyWorker {
        self.busy.fetch_add(1, Ordering::Relaxed);
        BusyWorker(self.clone())
    }

    /// Marks one worker busy until the returned lease is given back (dropped, or released by
    /// its handle with [`WorkerGauge::release`]) or `lease_ttl` has passed; the lease is
    /// issued under `limiter` (the shedder's stage). `None` for a gauge that takes no leases.
    pub fn lease(&self, limiter: &Namespace) -> Option<Lease> {
        let leases = self.leases.as_ref()?;
        let id = LeaseId::random();
        let now = leases.clock.now();
        leases.held.lock().insert(id, now);
        let handle = LeaseHandle::new(limiter.clone(), &*leases.node, id);
        let returner: Arc<dyn ReturnLease> = leases.held.clone();
        Some(Lease::new(handle, returner))
    }

    /// Gives back a worker lease kept with [`Lease::keep`]; `false` when this node does not
    /// hold it (released already, expired, or taken on another node).
    pub fn release(&self, lease: &LeaseHandle) -> bool {
        let Some(leases) = &self.leases else {
            return false;
        };
        lease.key() == &*leases.node && leases.held.lock().remove(&lease.id()).is_some()
    }

    /// Workers busy now: entered, plus leases held and not expired.
    pub fn busy(&self) -> u64 {
        let entered = self.busy.load(Ordering::Relaxed);
        let leased = self.leases.as_ref().map_or(0, |leases| {
            let now = leases.clock.now();
            let mut held = leases.held.lock();
            held.retain(|_, taken| now.saturating_since(*taken) < leases.ttl);
            held.len() as u64
        });
        entered + leased
    }

    /// The node's workers.
    pub fn workers(&self) -> u64 {
        self.workers
    }
}

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LeaseId, Nanos>> {
        // A map updated whole per call: usable after a panic.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ReturnLease for Held {
    fn return_lease(&self, _key: &str, id: LeaseId) {
        self.lock().remove(&id);
    }
}

impl UtilizationSource for WorkerGauge {
    fn utilization(&self) -> f64 {
        (self.busy() as f64 / self.workers as f64).min(1.0)
    }
}

/// One busy worker of a [`WorkerGauge`]; dropping it frees the worker.
#[derive(Debug)]
pub struct BusyWorker(Arc<WorkerGauge>);

impl Drop for BusyWorker {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;

    #[test]
    fn leases_count_until_released_dropped_or_expired() {
        let clock = ManualClock::new(Nanos::from_secs(10));
        let gauge = Arc::new(
            WorkerGauge::new(4)
                .unwrap()
                .with_leases(Duration::from_secs(60), Arc::new(clock.clone()))
                .unwrap(),
        );
        let stage = Namespace::new("utilization").unwrap();
        let _entered = gauge.enter();
        let kept = gauge.lease(&stage).unwrap().keep();
        let dropped = gauge.lease(&stage).unwrap();
        let expiring = gauge.lease(&stage).unwrap().keep();
        assert_eq!(gauge.busy(), 4);
        assert_eq!(gauge.utilization(), 1.0);
        drop(dropped);
        assert!(gauge.release(&kept));
        assert!(!gauge.release(&kept), "released once");
        assert_eq!(gauge.busy(), 2);
        // Another node's lease is not this one's.
        let foreign = LeaseHandle::new(stage.clone(), "node-0000000000000000", expiring.id());
        assert!(!gauge.release(&foreign));
        clock.advance(Duration::from_secs(60));
        assert_eq!(gauge.busy(), 1, "the unreleased lease expired");
        assert!(!gauge.release(&expiring));
        // A gauge without leases takes none.
        let plain = WorkerGauge::new(1).unwrap();
        assert!(plain.lease(&stage).is_none());
        assert!(WorkerGauge::new(1)
            .unwrap()
            .with_leases(Duration::ZERO, Arc::new(clock))
            .is_err());
    }
}
