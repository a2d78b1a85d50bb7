//! Every setting of the layer, as the builder checked it: what the per-host state reads.

use std::time::Duration;

use http::HeaderName;

use crate::backoff::Backoff;

/// The settings of an adaptive concurrency limit per host (see
/// [`crate::adaptive::concurrency`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConcurrencySettings {
    /// The limit at start. Default 20.
    pub initial: u32,
    /// The smallest limit. Default 1.
    pub min: u32,
    /// The largest limit. Default 1,000.
    pub max: u32,
    /// The factor applied on a refusal, timeout or connection error, in (0, 1). Default 0.9.
    pub backoff: f64,
}

impl Default for ConcurrencySettings {
    fn default() -> Self {
        ConcurrencySettings {
            initial: 20,
            min: 1,
            max: 1000,
            backoff: 0.9,
        }
    }
}

/// Every setting of the layer, checked. Built by [`PoliteLayerBuilder`](crate::PoliteLayerBuilder).
#[derive(Clone, Debug)]
pub struct Settings {
    pub(crate) max_wait: Duration,
    pub(crate) headroom: f64,
    pub(crate) max_attempts: u32,
    pub(crate) backoff: Backoff,
    pub(crate) budget_capacity: u32,
    pub(crate) retry_cost: u32,
    pub(crate) timeout_cost: u32,
    pub(crate) success_refund: u32,
    pub(crate) adaptive_rate: bool,
    pub(crate) beta: f64,
    pub(crate) cubic_c: f64,
    pub(crate) adaptive_throttle: bool,
    pub(crate) throttle_k: f64,
    pub(crate) throttle_window: Duration,
    pub(crate) concurrency: Option<ConcurrencySettings>,
    pub(crate) attempt_timeout: Option<Duration>,
    pub(crate) partition_header: Option<HeaderName>,
    pub(crate) seed: Option<u64>,
    pub(crate) max_hosts: usize,
}

impl Settings {
    /// The longest a request waits locally before it is sent (or retried).
    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    /// The attempts a request may make, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_wait: Duration::from_secs(5),
            headroom: 0.97,
            max_attempts: 3,
            backoff: Backoff::default(),
            budget_capacity: 500,
            retry_cost: 5,
            timeout_cost: 10,
            success_refund: 1,
            adaptive_rate: true,
            beta: 0.7,
            cubic_c: 0.4,
            adaptive_throttle: true,
            throttle_k: 2.0,
            throttle_window: Duration::from_secs(120),
            concurrency: None,
            attempt_timeout: None,
            partition_header: None,
            seed: None,
            max_hosts: 4096,
        }
    }
}
