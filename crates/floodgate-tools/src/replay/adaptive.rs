//! The adaptive concurrency limiter in `replay` and `simulate`: `acquire` takes a place below
//! the learned limit, `release` gives it back, and the time between them on the trace's clock
//! is the latency the limiter learns from (as `/v1/release` without `latency_ms` does).
//!
//! Output: `allowed`, `limit` (the whole limit the acquire was decided against, or the limit
//! after a release), `in_flight`, `lease` (granted acquires), `released` (releases), and
//! `retry_after` (1 s, as the service's shedders answer) on refusals.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use floodgate::limiter::adaptive::{Adaptive, AdaptiveConcurrencyLimiter};
use floodgate::limiter::LeaseHandle;
use floodgate::pipeline::SHED_RETRY_AFTER;
use floodgate::{ConfigError, ManualClock, Op};
use floodgate_service::config::stage::AdaptiveConfig;

use super::{Decide, EventError, Output, SpecError};

/// A checked `{"limiter": "adaptive_concurrency", …}` spec.
#[derive(Clone, Copy, Debug)]
pub struct AdaptiveSpec {
    algorithm: Adaptive,
    seed: u64,
    lease_ttl: Duration,
}

impl AdaptiveSpec {
    /// The spec's algorithm (Vegas with its defaults when absent) and lease TTL (default
    /// 60 s); the error names a parameter out of range.
    pub fn new(
        adaptive: Option<&AdaptiveConfig>,
        lease_ttl: Option<Duration>,
    ) -> Result<AdaptiveSpec, ConfigError> {
        let (algorithm, seed) = adaptive.map_or((Adaptive::default(), 0), |a| a.algorithm());
        algorithm.validate()?;
        Ok(AdaptiveSpec {
            algorithm,
            seed,
            lease_ttl: lease_ttl.unwrap_or(Duration::from_secs(60)),
        })
    }

    /// The limiter, timing leases on `clock`.
    pub fn build(&self, clock: ManualClock) -> Result<AdaptiveConcurrencyLimiter, ConfigError> {
        AdaptiveConcurrencyLimiter::builder()
            .algorithm(self.algorithm)
            .seed(self.seed)
            .lease_ttl(self.lease_ttl)
            .clock(Arc::new(clock))
            .build()
    }
}

/// Decides `acquire` and `release` events with an adaptive limiter on `clock`.
pub(crate) fn decider(spec: &AdaptiveSpec, clock: ManualClock) -> Result<Decide, SpecError> {
    let limiter = spec.build(clock).map_err(SpecError::Invalid)?;
    let mut held: HashMap<String, LeaseHandle> = HashMap::new();
    Ok(Box::new(move |event| {
        let name = event.lease.clone().unwrap_or_default();
        let mut out = Output {
            t: event.t.clone(),
            key: &event.key,
            allowed: true,
            ..Output::default()
        };
        match event.op {
            Op::Acquire { .. } => {
                let admission = limiter.try_acquire();
                out.allowed = admission.lease.is_some();
                out.limit = Some(admission.limit);
                out.in_flight = Some(admission.in_flight);
                match admission.lease {
                    Some(lease) => {
                        held.insert(name, lease.keep());
                        out.lease = event.lease.as_deref();
                    }
                    None => out.retry_after = Some(SHED_RETRY_AFTER.as_secs_f64()),
                }
            }
            Op::Release { .. } => {
                let released = held
                    .remove(&name)
                    .is_some_and(|handle| limiter.release(&handle, None));
                let estimate = limiter.estimate();
                out.released = Some(released);
                out.limit = Some(estimate.limit.floor() as u64);
                out.in_flight = Some(estimate.in_flight);
            }
            other => return Err(EventError::NotALease { op: other.kind() }),
        }
        Ok(out)
    }))
}
