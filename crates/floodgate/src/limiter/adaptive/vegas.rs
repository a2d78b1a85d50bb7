//! Vegas (Netflix concurrency-limits' `VegasLimit`, after TCP Vegas): the limit follows the
//! queue that the latency above the no-load latency implies. See the [parent module](super).

use std::time::Duration;

use crate::ConfigError;

/// Vegas's parameters. With `l` the limit and `log = max(1, log10 l)`, each sample estimates
/// the requests queued inside the service as `queue = ⌈l × (1 − rtt_noload / rtt)⌉` and moves
/// the limit:
/// - `queue ≤ log`: up by `beta × log` (far from queueing: grow fast);
/// - `queue < alpha × log`: up by `log`;
/// - `queue > beta × log`: down by `log`;
/// - otherwise it stays;
///
/// then `l ← (1 − smoothing) × l + smoothing × new`, within `[1, max_limit]`. `rtt_noload` is
/// the least latency seen since the last probe; every `probe_multiplier × l × jitter` samples
/// (jitter drawn in `[0.5, 1)` from the state's seed) it is reset to the next sample, so that a
/// service that got slower for good is measured afresh. As with Gradient2, a sample taken with
/// fewer than half the limit's places in use does not move the limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Vegas {
    /// The limit before any sample (default 20).
    pub initial_limit: f64,
    /// The limit never goes above this (default 1000).
    pub max_limit: f64,
    /// How much of each new limit is taken (default 1: all of it; above 0, at most 1).
    pub smoothing: f64,
    /// Queue size, in multiples of `log10(limit)`, below which the limit grows (default 3).
    pub alpha: f64,
    /// Queue size, in multiples of `log10(limit)`, above which the limit shrinks (default 6;
    /// at least `alpha`).
    pub beta: f64,
    /// Probe for a new no-load latency about every `probe_multiplier × limit` samples
    /// (default 30; at least 1).
    pub probe_multiplier: f64,
}

impl Default for Vegas {
    fn default() -> Self {
        Vegas {
            initial_limit: 20.0,
            max_limit: 1000.0,
            smoothing: 1.0,
            alpha: 3.0,
            beta: 6.0,
            probe_multiplier: 30.0,
        }
    }
}

/// What Vegas has learned.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VegasState {
    /// The current limit.
    pub limit: f64,
    /// The no-load latency, in nanoseconds (0 before the first sample).
    pub rtt_noload: f64,
    /// The latest sample, in nanoseconds.
    pub last_rtt: f64,
    /// Samples taken.
    pub samples: u64,
    /// Samples since the last probe.
    pub since_probe: u64,
    /// The jitter of the next probe, in `[0.5, 1)`.
    pub jitter: f64,
    /// The generator of jitters (xorshift64; never 0).
    pub seed: u64,
}

impl Vegas {
    /// Checks the parameters; the error names the field and the value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.max_limit.is_finite() || self.max_limit < 1.0 {
            return Err(ConfigError::invalid(
                "max_limit",
                self.max_limit,
                "must be at least 1",
            ));
        }
        if !(1.0..=self.max_limit).contains(&self.initial_limit) {
            return Err(ConfigError::invalid(
                "initial_limit",
                self.initial_limit,
                "must be between 1 and max_limit",
            ));
        }
        if !(self.smoothing > 0.0 && self.smoothing <= 1.0) {
            return Err(ConfigError::invalid(
                "smoothing",
                self.smoothing,
                "must be above 0 and at most 1",
            ));
        }
        if !self.alpha.is_finite() || self.alpha < 0.0 {
            return Err(ConfigError::invalid(
                "alpha",
                self.alpha,
                "must be 0 or more",
            ));
        }
        if !self.beta.is_finite() || self.beta < self.alpha {
            return Err(ConfigError::invalid(
                "beta",
                self.beta,
                "must be at least alpha",
            ));
        }
        if !self.probe_multiplier.is_finite() || self.probe_multiplier < 1.0 {
            return Err(ConfigError::invalid(
                "probe_multiplier",
                self.probe_multiplier,
                "must be at least 1",
            ));
        }
        Ok(())
    }

    /// The state before any sample; `seed` drives the probes' jitter.
    pub fn initial(&self, seed: u64) -> VegasState {
        let mut state = VegasState {
            limit: self.initial_limit,
            rtt_noload: 0.0,
            last_rtt: 0.0,
            samples: 0,
            since_probe: 0,
            jitter: 0.0,
            seed: seed | 1,
        };
        state.jitter = next_jitter(&mut state.seed);
        state
    }

    /// The state after one request that took `rtt` and was admitted with `in_flight` requests
    /// in flight (itself included).
    pub fn sample(&self, state: VegasState, rtt: Duration, in_flight: u64) -> VegasState {
        let rtt = (rtt.as_nanos() as f64).max(1.0);
        let mut next = VegasState {
            last_rtt: rtt,
            samples: state.samples + 1,
            since_probe: state.since_probe + 1,
            ..state
        };
        let probe_every = state.jitter * self.probe_multiplier * state.limit;
        if probe_every <= next.since_probe as f64 {
            next.since_probe = 0;
            next.jitter = next_jitter(&mut next.seed);
            next.rtt_noload = rtt;
            return next;
        }
        if state.rtt_noload == 0.0 || rtt < state.rtt_noload {
            next.rtt_noload = rtt;
            return next;
        }
        if (in_flight as f64) * 2.0 < state.limit {
            return next;
        }
        let limit = state.limit;
        let log = limit.log10().max(1.0);
        let queue = (limit * (1.0 - state.rtt_noload / rtt)).ceil();
        let new = if queue <= log {
            limit + self.beta * log
        } else if queue < self.alpha * log {
            limit + log
        } else if queue > self.beta * log {
            limit - log
        } else {
            return next;
        };
        let new = new.clamp(1.0, self.max_limit);
        next.limit =
            ((1.0 - self.smoothing) * limit + self.smoothing * new).clamp(1.0, self.max_limit);
        next
    }
}

/// The next jitter in `[0.5, 1)` from an xorshift64 generator.
fn next_jitter(seed: &mut u64) -> f64 {
    let mut x = *seed;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *seed = x;
    0.5 + (x >> 11) as f64 / (1u64 << 53) as f64 * 0.5
}
