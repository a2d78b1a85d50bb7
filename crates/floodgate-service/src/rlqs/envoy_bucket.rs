//! Envoy's token bucket as its RLQS filter runs an assignment, for the tests that hold
//! Floodgate's bounds against it: it starts full, fills continuously at
//! `tokens_per_fill / fill_interval` (whole seconds) up to `max_tokens`, and a request takes
//! one token.

use crate::proto::envoy::r#type::v3::TokenBucket;

/// One assignment's token bucket at one Envoy.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct EnvoyBucket {
    /// The assignment's `max_tokens` and `tokens_per_fill`: Envoy keeps a bucket, tokens and
    /// all, when a new assignment repeats them.
    pub shape: (u32, u32),
    tokens: f64,
    per_second: f64,
    /// When the tokens were last counted, in seconds.
    at: f64,
}

impl EnvoyBucket {
    /// The bucket `assigned` starts at `at` (seconds): full.
    pub fn start(assigned: &TokenBucket, at: f64) -> EnvoyBucket {
        let per_fill = assigned.tokens_per_fill.unwrap_or_default();
        let interval = assigned.fill_interval.as_ref().map_or(0, |d| d.seconds);
        EnvoyBucket {
            shape: (assigned.max_tokens, per_fill),
            tokens: f64::from(assigned.max_tokens),
            per_second: f64::from(per_fill) / interval as f64,
            at,
        }
    }

    /// Its burst: `max_tokens`.
    pub fn burst(&self) -> u64 {
        u64::from(self.shape.0)
    }

    /// One request at `at` (seconds): whether it takes a token.
    pub fn admit(&mut self, at: f64) -> bool {
        let max = f64::from(self.shape.0);
        self.tokens = (self.tokens + (at - self.at) * self.per_second).min(max);
        self.at = at;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}
