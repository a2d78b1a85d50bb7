//! The adaptive concurrency limiter: a limit on this node's requests in flight that it learns
//! from how long requests take, with the algorithms of Netflix's concurrency-limits library:
//! [`Gradient2`] or [`Vegas`].
//!
//! A fixed concurrency limit is either too low (requests refused while the service had room)
//! or too high (requests queue inside the service, latency climbs, and everything times out).
//! Latency says which: while the limit is below what the service can run in parallel, latency
//! stays at its no-load level; past that point ("the knee"), extra requests only wait, and
//! latency grows with them.
//!
//! - [`Vegas`] estimates the queue inside the service from the latency above the least latency
//!   seen (`limit × (1 − rtt_noload / rtt)`) and keeps it between `alpha` and `beta` (a few
//!   requests, scaled by `log10(limit)`): it settles at the knee.
//! - [`Gradient2`] compares each latency with a slow moving average of latencies: it shrinks
//!   the limit when latency jumps above the usual (a slow dependency, a bad deploy), and grows
//!   it otherwise; a slow, steady rise of latency moves the average with it, so it does not
//!   hold a limit at a knee the way Vegas does.
//!
//! Both are pure transitions over their state ([`Gradient2::sample`], [`Vegas::sample`]); the
//! limiter applies them under a lock, one sample per request that completes.
//!
//! The limit is this node's: each node learns its own from its own latencies, as Netflix's
//! library does, and its leases live in this process (a lease given back to another node is
//! not found there, and expires after `lease_ttl` here). A request is admitted while fewer than
//! `⌊limit⌋` leases are held. A lease given back with its latency
//! ([`Lease::complete`](super::Lease::complete), or [`AdaptiveConcurrencyLimiter::release`]
//! with `Some(latency)`) is one sample; released without one, the time since it was taken is
//! the sample; dropped (the request never ran, refused by a later stage), it is no sample.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{Lease, LeaseHandle, ReturnLease};
use crate::store::Namespace;
use crate::{Clock, ConfigError, LeaseId, Nanos, SystemClock};

pub mod gradient2;
pub mod vegas;

pub use gradient2::{Gradient2, Gradient2State, WARMUP_SAMPLES};
pub use vegas::{Vegas, VegasState};

/// Which algorithm learns the limit, with its parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Adaptive {
    /// [`Gradient2`].
    Gradient2(Gradient2),
    /// [`Vegas`].
    Vegas(Vegas),
}

impl Default for Adaptive {
    fn default() -> Self {
        Adaptive::Vegas(Vegas::default())
    }
}

/// An [`Adaptive`] algorithm's state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AdaptiveState {
    /// [`Gradient2State`].
    Gradient2(Gradient2State),
    /// [`VegasState`].
    Vegas(VegasState),
}

impl Adaptive {
    /// `gradient2` or `vegas`.
    pub fn name(&self) -> &'static str {
        match self {
            Adaptive::Gradient2(_) => "gradient2",
            Adaptive::Vegas(_) => "vegas",
        }
    }

    /// Checks the parameters; the error names the field and the value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self {
            Adaptive::Gradient2(g) => g.validate(),
            Adaptive::Vegas(v) => v.validate(),
        }
    }

    /// The state before any sample (`seed` drives Vegas's probes).
    pub fn initial(&self, seed: u64) -> AdaptiveState {
        match self {
            Adaptive::Gradient2(g) => AdaptiveState::Gradient2(g.initial()),
            Adaptive::Vegas(v) => AdaptiveState::Vegas(v.initial(seed)),
        }
    }

    /// The state after one request that took `rtt`, admitted with `in_flight` in flight.
    pub fn sample(&self, state: AdaptiveState, rtt: Duration, in_flight: u64) -> AdaptiveState {
        match (self, state) {
            (Adaptive::Gradient2(g), AdaptiveState::Gradient2(s)) => {
                AdaptiveState::Gradient2(g.sample(s, rtt, in_flight))
            }
            (Adaptive::Vegas(v), AdaptiveState::Vegas(s)) => {
                AdaptiveState::Vegas(v.sample(s, rtt, in_flight))
            }
            // A state of the other algorithm: start afresh (cannot happen in a limiter, which
            // keeps one algorithm).
            (algorithm, _) => algorithm.sample(algorithm.initial(0), rtt, in_flight),
        }
    }
}

impl AdaptiveState {
    /// The limit.
    pub fn limit(&self) -> f64 {
        match self {
            AdaptiveState::Gradient2(s) => s.limit,
            AdaptiveState::Vegas(s) => s.limit,
        }
    }

    /// The latency the algorithm compares samples with, in nanoseconds: Gradient2's long-term
    /// average, Vegas's no-load latency (0 before the first sample).
    pub fn baseline_rtt(&self) -> f64 {
        match self {
            AdaptiveState::Gradient2(s) => s.long_rtt,
            AdaptiveState::Vegas(s) => s.rtt_noload,
        }
    }

    /// The latest sample, in nanoseconds (0 before the first).
    pub fn last_rtt(&self) -> f64 {
        match self {
            AdaptiveState::Gradient2(s) => s.last_rtt,
            AdaptiveState::Vegas(s) => s.last_rtt,
        }
    }

    /// Samples taken.
    pub fn samples(&self) -> u64 {
        match self {
            AdaptiveState::Gradient2(s) => s.samples,
            AdaptiveState::Vegas(s) => s.samples,
        }
    }
}

/// What the limiter knows now (see [`AdaptiveConcurrencyLimiter::estimate`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptiveEstimate {
    /// The learned limit (fractional; requests are admitted below its whole part).
    pub limit: f64,
    /// Leases held on this node now.
    pub in_flight: u64,
    /// The latency samples are compared with: Gradient2's long-term average, Vegas's no-load
    /// latency (zero before the first sample).
    pub baseline_rtt: Duration,
    /// The latest sample (zero before the first).
    pub last_rtt: Duration,
    /// Samples taken.
    pub samples: u64,
}

/// An admission decision of the adaptive limiter.
#[derive(Debug)]
#[must_use = "an admitted request's lease must be kept while it runs"]
pub struct Admission {
    /// The whole limit the request was admitted (or refused) against.
    pub limit: u64,
    /// Leases held after this decision.
    pub in_flight: u64,
    /// The place taken, when admitted: give it back with [`Lease::complete`] and the request's
    /// latency, so that the limiter learns.
    pub lease: Option<Lease>,
}

/// Requests in flight on this node below a limit learned from their latency. See the [module
/// documentation](self).
#[derive(Debug, Clone)]
pub struct AdaptiveConcurrencyLimiter {
    name: Namespace,
    /// The key of this node's leases: `node-` and 16 random hex digits, so that a lease handed
    /// to another node is recognised there as not its own.
    node: Arc<str>,
    shared: Arc<Shared>,
}

struct Shared {
    algorithm: Adaptive,
    lease_ttl: Duration,
    clock: Arc<dyn Clock>,
    held: Mutex<Held>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("algorithm", &self.algorithm)
            .field("lease_ttl", &self.lease_ttl)
            .finish_non_exhaustive()
    }
}

struct Held {
    estimate: AdaptiveState,
    /// Lease → (when it was taken, leases in flight once it was).
    leases: HashMap<LeaseId, (Nanos, u64)>,
    /// The soonest a lease can have expired, when leases are held.
    sweep_at: Nanos,
}

/// Builds an [`AdaptiveConcurrencyLimiter`].
#[must_use]
pub struct AdaptiveConcurrencyBuilder {
    name: String,
    algorithm: Adaptive,
    seed: u64,
    lease_ttl: Duration,
    clock: Option<Arc<dyn Clock>>,
}

impl std::fmt::Debug for AdaptiveConcurrencyBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdaptiveConcurrencyBuilder")
            .field("name", &self.name)
            .field("algorithm", &self.algorithm)
            .field("lease_ttl", &self.lease_ttl)
            .finish_non_exhaustive()
    }
}

impl AdaptiveConcurrencyBuilder {
    /// The limiter's name (its stage name; default `adaptive_concurrency`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The algorithm and its parameters (default [`Vegas::default`]).
    pub fn algorithm(mut self, algorithm: Adaptive) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// The seed of Vegas's probe jitter (default 0): the same seed, samples and clock give the
    /// same limits.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// How long a lease that is never given back holds its place (default 60 s; above 0).
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// The clock that times leases (default the system clock).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The limiter; the error names a parameter out of range.
    pub fn build(self) -> Result<AdaptiveConcurrencyLimiter, ConfigError> {
        self.algorithm.validate()?;
        if self.lease_ttl.is_zero() {
            return Err(ConfigError::invalid("lease_ttl", "0", "must be above 0"));
        }
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock::new()));
        Ok(AdaptiveConcurrencyLimiter {
            name: Namespace::new(&self.name)?,
            node: format!("node-{}", &LeaseId::random().to_string()[..16]).into(),
            shared: Arc::new(Shared {
                algorithm: self.algorithm,
                lease_ttl: self.lease_ttl,
                clock,
                held: Mutex::new(Held {
                    estimate: self.algorithm.initial(self.seed),
                    leases: HashMap::new(),
                    sweep_at: Nanos::from_secs(0),
                }),
            }),
        })
    }
}

impl AdaptiveConcurrencyLimiter {
    /// A builder with the defaults.
    pub fn builder() -> AdaptiveConcurrencyBuilder {
        AdaptiveConcurrencyBuilder {
            name: "adaptive_concurrency".to_string(),
            algorithm: Adaptive::default(),
            seed: 0,
            lease_ttl: Duration::from_secs(60),
            clock: None,
        }
    }

    /// The limiter's name.
    pub fn name(&self) -> &Namespace {
        &self.name
    }

    /// The algorithm and its parameters.
    pub fn algorithm(&self) -> &Adaptive {
        &self.shared.algorithm
    }

    /// How long an unreturned lease holds its place.
    pub fn lease_ttl(&self) -> Duration {
        self.shared.lease_ttl
    }

    /// Admits the request when fewer than `⌊limit⌋` leases are held on this node.
    pub fn try_acquire(&self) -> Admission {
        let now = self.shared.clock.now();
        let id = LeaseId::random();
        let mut held = self.shared.lock();
        held.sweep(now, self.shared.lease_ttl);
        let limit = held.estimate.limit().floor() as u64;
        let in_flight = held.leases.len() as u64;
        if in_flight >= limit {
            return Admission {
                limit,
                in_flight,
                lease: None,
            };
        }
        if held.leases.is_empty() {
            held.sweep_at = now.saturating_add(self.shared.lease_ttl);
        }
        held.leases.insert(id, (now, in_flight + 1));
        drop(held);
        let returner: Arc<dyn ReturnLease> = self.shared.clone();
        let handle = LeaseHandle::new(self.name.clone(), &*self.node, id);
        Admission {
            limit,
            in_flight: in_flight + 1,
            lease: Some(Lease::new(handle, returner)),
        }
    }

    /// Gives back a kept lease, with the request's latency as a sample (`None`: the time since
    /// the lease was taken). `false` when this node does not hold it (released already,
    /// expired, or taken on another node).
    pub fn release(&self, lease: &LeaseHandle, latency: Option<Duration>) -> bool {
        lease.key() == &*self.node && self.shared.complete(lease.id(), Some(latency))
    }

    /// The limit and RTT estimates now.
    pub fn estimate(&self) -> AdaptiveEstimate {
        let now = self.shared.clock.now();
        let mut held = self.shared.lock();
        held.sweep(now, self.shared.lease_ttl);
        let e = held.estimate;
        AdaptiveEstimate {
            limit: e.limit(),
            in_flight: held.leases.len() as u64,
            baseline_rtt: Duration::from_nanos(e.baseline_rtt() as u64),
            last_rtt: Duration::from_nanos(e.last_rtt() as u64),
            samples: e.samples(),
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // The state is a few numbers and a map, each update whole: usable after a panic.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Removes lease `id`; with `sample` (`Some(None)`: time since it was taken), learns from
    /// it. `false` when the lease is not held.
    fn complete(&self, id: LeaseId, sample: Option<Option<Duration>>) -> bool {
        let now = self.clock.now();
        let mut held = self.lock();
        let Some((taken, in_flight)) = held.leases.remove(&id) else {
            return false;
        };
        if let Some(latency) = sample {
            let rtt = latency.unwrap_or_else(|| now.saturating_since(taken));
            held.estimate = self.algorithm.sample(held.estimate, rtt, in_flight);
        }
        true
    }
}

impl Held {
    /// Drops the leases older than `ttl`, at most once per `ttl / 4` of the oldest's age.
    fn sweep(&mut self, now: Nanos, ttl: Duration) {
        if self.leases.is_empty() || now < self.sweep_at {
            return;
        }
        self.leases
            .retain(|_, (taken, _)| now.saturating_since(*taken) < ttl);
        let oldest = self.leases.values().map(|(t, _)| *t).min();
        self.sweep_at = match oldest {
            Some(oldest) => oldest.saturating_add(ttl).max(now.saturating_add(ttl / 4)),
            None => now,
        };
    }
}

impl ReturnLease for Shared {
    fn return_lease(&self, _key: &str, id: LeaseId) {
        self.complete(id, None);
    }

    fn complete(&self, _key: &str, id: LeaseId, latency: Duration) {
        Shared::complete(self, id, Some(Some(latency)));
    }
}

#[cfg(test)]
mod tests;
