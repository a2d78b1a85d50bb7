//! Gradient2 (Netflix concurrency-limits' `Gradient2Limit`): the limit follows the ratio of a
//! long-term average latency to each request's latency (the short-term RTT):
//!
//! - `gradient = clamp(rtt_tolerance × long / short, 0.5, 1)`: 1 while latency is within the
//!   tolerance of the long-term level, down to 0.5 as it climbs;
//! - `target = limit × gradient + queue_size`: the limit, shrunk by the gradient, plus a few
//!   places to keep probing upwards;
//! - `limit ← limit × (1 − smoothing) + target × smoothing`, kept within
//!   `[min_limit, max_limit]`.
//!
//! The long-term RTT is the plain average of the first [`WARMUP_SAMPLES`] samples, then an
//! exponential moving average over `long_window` samples (factor `2 / (long_window + 1)`);
//! when it has drifted above twice the latest sample (load fell after a long overload), it
//! decays by 5% per sample so that the limit can recover. A sample taken while fewer than half
//! the limit's places were in use does not move the limit: an idle service says nothing about
//! its capacity.

use std::time::Duration;

use crate::ConfigError;

/// Samples averaged plainly before the long-term RTT becomes a moving average.
pub const WARMUP_SAMPLES: u64 = 10;

/// Gradient2's parameters (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gradient2 {
    /// The limit before any sample (default 20).
    pub initial_limit: f64,
    /// The limit never goes below this (default 20; at least 1).
    pub min_limit: f64,
    /// The limit never goes above this (default 200).
    pub max_limit: f64,
    /// How much of each new target the limit takes (default 0.2; above 0, at most 1).
    pub smoothing: f64,
    /// How much slower than the long-term RTT a request may be before the limit shrinks
    /// (default 1.5; at least 1).
    pub rtt_tolerance: f64,
    /// The long-term RTT's window, in samples (default 600; at least 1).
    pub long_window: u64,
    /// Places added to each target to keep probing for more capacity (default 4).
    pub queue_size: f64,
}

impl Default for Gradient2 {
    fn default() -> Self {
        Gradient2 {
            initial_limit: 20.0,
            min_limit: 20.0,
            max_limit: 200.0,
            smoothing: 0.2,
            rtt_tolerance: 1.5,
            long_window: 600,
            queue_size: 4.0,
        }
    }
}

/// What Gradient2 has learned: the limit and the RTT estimates, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gradient2State {
    /// The current limit (fractional; requests are admitted below its whole part).
    pub limit: f64,
    /// The long-term RTT, in nanoseconds (0 before the first sample).
    pub long_rtt: f64,
    /// The latest sample, in nanoseconds (0 before the first).
    pub last_rtt: f64,
    /// Samples taken.
    pub samples: u64,
}

impl Gradient2 {
    /// Checks the parameters; the error names the field and the value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !positive(self.min_limit) || self.min_limit < 1.0 {
            return Err(ConfigError::invalid(
                "min_limit",
                self.min_limit,
                "must be at least 1",
            ));
        }
        if !positive(self.max_limit) || self.max_limit < self.min_limit {
            return Err(ConfigError::invalid(
                "max_limit",
                self.max_limit,
                "must be at least min_limit",
            ));
        }
        if !(self.min_limit..=self.max_limit).contains(&self.initial_limit) {
            return Err(ConfigError::invalid(
                "initial_limit",
                self.initial_limit,
                "must be between min_limit and max_limit",
            ));
        }
        if !positive(self.smoothing) || self.smoothing > 1.0 {
            return Err(ConfigError::invalid(
                "smoothing",
                self.smoothing,
                "must be above 0 and at most 1",
            ));
        }
        if !self.rtt_tolerance.is_finite() || self.rtt_tolerance < 1.0 {
            return Err(ConfigError::invalid(
                "rtt_tolerance",
                self.rtt_tolerance,
                "must be at least 1",
            ));
        }
        if self.long_window == 0 {
            return Err(ConfigError::invalid(
                "long_window",
                0,
                "must be at least 1 sample",
            ));
        }
        if !self.queue_size.is_finite() || self.queue_size < 0.0 {
            return Err(ConfigError::invalid(
                "queue_size",
                self.queue_size,
                "must be a number of places, 0 or more",
            ));
        }
        Ok(())
    }

    /// The state before any sample.
    pub fn initial(&self) -> Gradient2State {
        Gradient2State {
            limit: self.initial_limit,
            long_rtt: 0.0,
            last_rtt: 0.0,
            samples: 0,
        }
    }

    /// The state after one request that took `rtt` and was admitted with `in_flight` requests
    /// in flight (itself included). See the [module documentation](self).
    pub fn sample(&self, state: Gradient2State, rtt: Duration, in_flight: u64) -> Gradient2State {
        // A zero latency (a clock's resolution) would make the gradient infinite.
        let short = (rtt.as_nanos() as f64).max(1.0);
        let mut long = if state.samples < WARMUP_SAMPLES {
            (state.long_rtt * state.samples as f64 + short) / (state.samples + 1) as f64
        } else {
            let factor = 2.0 / (self.long_window as f64 + 1.0);
            state.long_rtt * (1.0 - factor) + short * factor
        };
        if long / short > 2.0 {
            long *= 0.95;
        }
        let mut next = Gradient2State {
            limit: state.limit,
            long_rtt: long,
            last_rtt: short,
            samples: state.samples + 1,
        };
        if (in_flight as f64) < state.limit / 2.0 {
            return next;
        }
        let gradient = (self.rtt_tolerance * long / short).clamp(0.5, 1.0);
        let target = state.limit * gradient + self.queue_size;
        let limit = state.limit * (1.0 - self.smoothing) + target * self.smoothing;
        next.limit = limit.clamp(self.min_limit, self.max_limit);
        next
    }
}
