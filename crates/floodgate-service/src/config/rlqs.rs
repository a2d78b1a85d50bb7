//! The `rlqs` section: the Rate Limit Quota Service's settings (see `crate::rlqs`, which reads
//! them). Every field is optional; a reload applies them to the next report and tick of every
//! stream.
//!
//! ```yaml
//! rlqs:
//!   assignment_ttl: 15s          # how long an assignment holds at the client
//!   unreported_after: 15s        # a claimant silent this long gives its share back
//!   abandon_idle_after: 60s      # a bucket with no request this long is abandoned
//!   unmatched: { requests_per_unit: 10, unit: second }   # default: no limit
//!   max_streams: 10000
//!   max_buckets_per_stream: 1000
//!   max_pairs: 16
//!   max_pair_bytes: 256
//! ```

use std::time::Duration;

use floodgate::duration::SpecDuration;
use serde::Deserialize;

use super::ConfigFileError;
use floodgate::algorithm::fixed_window::Unit;

/// The Rate Limit Quota Service's settings, as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RlqsConfig {
    /// How long an assignment holds at the client (1 s to 1 h; default 15 s). Envoy reports
    /// every 5 s and each report renews it: keep it above that.
    #[serde(default = "defaults::assignment_ttl")]
    pub assignment_ttl: SpecDuration,
    /// A claimant whose reports stop for this long gives its share back (5 s to 1 h; default
    /// 15 s).
    #[serde(default = "defaults::unreported_after")]
    pub unreported_after: SpecDuration,
    /// A bucket with no request for this long is abandoned (5 s to 7 days; default 60 s).
    #[serde(default = "defaults::abandon_idle_after")]
    pub abandon_idle_after: SpecDuration,
    /// The limit of a bucket no descriptor matches, shared like any other; absent: no limit.
    #[serde(default)]
    pub unmatched: Option<PerUnitConfig>,
    /// The most streams open at once (1 to 1,000,000; default 10,000).
    #[serde(default = "defaults::max_streams")]
    pub max_streams: usize,
    /// The most buckets one stream may hold (1 to 100,000; default 1,000).
    #[serde(default = "defaults::max_buckets_per_stream")]
    pub max_buckets_per_stream: usize,
    /// The most pairs in a bucket id (1 to 64; default 16).
    #[serde(default = "defaults::max_pairs")]
    pub max_pairs: usize,
    /// The longest key or value of a pair, in bytes (1 to 4,096; default 256).
    #[serde(default = "defaults::max_pair_bytes")]
    pub max_pair_bytes: usize,
}

/// A limit of `requests_per_unit` per `unit`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerUnitConfig {
    /// Requests per unit (0: every request is refused).
    pub requests_per_unit: u64,
    /// `second`, `minute`, `hour`, `day`, `week`, `month` (30 days) or `year` (365 days).
    pub unit: String,
}

mod defaults {
    use super::*;

    pub(super) fn assignment_ttl() -> SpecDuration {
        SpecDuration(Duration::from_secs(15))
    }
    pub(super) fn unreported_after() -> SpecDuration {
        SpecDuration(Duration::from_secs(15))
    }
    pub(super) fn abandon_idle_after() -> SpecDuration {
        SpecDuration(Duration::from_secs(60))
    }
    pub(super) fn max_streams() -> usize {
        10_000
    }
    pub(super) fn max_buckets_per_stream() -> usize {
        1_000
    }
    pub(super) fn max_pairs() -> usize {
        16
    }
    pub(super) fn max_pair_bytes() -> usize {
        256
    }
}

impl Default for RlqsConfig {
    fn default() -> Self {
        RlqsConfig {
            assignment_ttl: defaults::assignment_ttl(),
            unreported_after: defaults::unreported_after(),
            abandon_idle_after: defaults::abandon_idle_after(),
            unmatched: None,
            max_streams: defaults::max_streams(),
            max_buckets_per_stream: defaults::max_buckets_per_stream(),
            max_pairs: defaults::max_pairs(),
            max_pair_bytes: defaults::max_pair_bytes(),
        }
    }
}

impl RlqsConfig {
    /// The unit of `unmatched`, once validated (`None` without `unmatched`).
    pub fn unmatched_unit(&self) -> Option<Duration> {
        let limit = self.unmatched.as_ref()?;
        Some(Unit::from_name(&limit.unit).map_or(Duration::from_secs(1), Unit::duration))
    }

    /// Refuses a value out of its range, naming the field.
    pub(super) fn validate(&self) -> Result<(), ConfigFileError> {
        let secs = Duration::from_secs;
        let durations = [
            (
                "assignment_ttl",
                self.assignment_ttl.0,
                secs(1),
                secs(3_600),
            ),
            (
                "unreported_after",
                self.unreported_after.0,
                secs(5),
                secs(3_600),
            ),
            (
                "abandon_idle_after",
                self.abandon_idle_after.0,
                secs(5),
                secs(7 * 86_400),
            ),
        ];
        for (field, value, least, most) in durations {
            if value < least || value > most {
                return Err(ConfigFileError::invalid(
                    format!("rlqs.{field}"),
                    format!("invalid value {value:?} (must be {least:?} to {most:?})"),
                ));
            }
        }
        let counts = [
            (
                "max_buckets_per_stream",
                self.max_buckets_per_stream,
                100_000,
            ),
            ("max_pairs", self.max_pairs, 64),
            ("max_pair_bytes", self.max_pair_bytes, 4_096),
        ];
        for (field, value, most) in counts {
            if !(1..=most).contains(&value) {
                return Err(ConfigFileError::invalid(
                    format!("rlqs.{field}"),
                    format!("invalid value {value} (must be 1 to {most})"),
                ));
            }
        }
        if let Some(limit) = &self.unmatched {
            if Unit::from_name(&limit.unit).is_err() {
                return Err(ConfigFileError::invalid(
                    "rlqs.unmatched.unit",
                    format!(
                        "unknown unit `{}` (second, minute, hour, day, week, month or year)",
                        limit.unit
                    ),
                ));
            }
        }
        Ok(())
    }
}
