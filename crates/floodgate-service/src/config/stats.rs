//! The `stats` section: the Envoy rules' per-descriptor statistics
//! ([`crate::descriptors::stats`]) and where they go besides `/metrics`. Read once at start-up.
//!
//! ```yaml
//! stats:
//!   near_limit_ratio: 0.8       # envoyproxy's NEAR_LIMIT_RATIO
//!   max_series: 10000           # statistics keys kept; hits of more count under __overflow__
//!   statsd:                     # envoyproxy's USE_STATSD (off unless given)
//!     address: localhost:8125   # STATSD_HOST, STATSD_PORT
//!     protocol: tcp             # tcp (upstream's default) or udp: STATSD_PROTOCOL
//!     flush_interval: 10s       # STATS_FLUSH_INTERVAL
//!     extra_tags: {team: edge}  # EXTRA_TAGS: `.__team=edge` on every name
//!   prometheus:                 # envoyproxy's USE_PROMETHEUS (off unless given)
//!     address: 0.0.0.0:9090     # PROMETHEUS_ADDR
//!     path: /metrics            # PROMETHEUS_PATH
//!     mapping_file: map.yaml    # PROMETHEUS_MAPPER_YAML
//!     response_time_as_milliseconds: false  # PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use floodgate::algorithm::spec::SpecDuration;
use serde::Deserialize;

use super::ConfigFileError;

/// The `stats` section (see the [module documentation](self)).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StatsConfig {
    /// The share of a limit past which hits count as `near_limit` (0 to 1; default 0.8).
    pub near_limit_ratio: f32,
    /// The most statistics keys kept (at least 1; default 10,000).
    pub max_series: usize,
    /// Pushing the statistics to statsd under upstream's names.
    pub statsd: Option<StatsdConfig>,
    /// Serving `/metrics` on an address of its own too.
    pub prometheus: Option<PrometheusConfig>,
}

impl Default for StatsConfig {
    fn default() -> Self {
        StatsConfig {
            near_limit_ratio: 0.8,
            max_series: 10_000,
            statsd: None,
            prometheus: None,
        }
    }
}

/// `stats.statsd`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatsdConfig {
    /// `host:port` of the statsd server (a name is resolved on each connection).
    pub address: String,
    /// `tcp` (the default, as upstream's sink) or `udp`.
    #[serde(default)]
    pub protocol: StatsdProtocol,
    /// How often counters are pushed, as their changes since the last push (above 0;
    /// default 10 s).
    #[serde(default)]
    pub flush_interval: Option<SpecDuration>,
    /// Tags added to every name as upstream adds them: `.__key=value`, sorted by key, the
    /// value's `.`, `:` and `|` written `_`; a tag with an empty key or value is left out.
    #[serde(default)]
    pub extra_tags: BTreeMap<String, String>,
}

/// How statsd lines travel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatsdProtocol {
    /// A TCP connection, reconnected when it breaks.
    #[default]
    Tcp,
    /// UDP datagrams.
    Udp,
}

/// `stats.prometheus`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrometheusConfig {
    /// Where to listen, `host:port` (`:9090` listens on every address, as Go's).
    pub address: String,
    /// The path `/metrics`' text is served at (default `/metrics`).
    #[serde(default = "default_path")]
    pub path: String,
    /// A statsd_exporter mapping file naming envoyproxy/ratelimit's series on this listener
    /// (upstream's `PROMETHEUS_MAPPER_YAML`; see `upstream_metrics::mapping`); without one,
    /// the mapping upstream builds in. Read at start-up.
    #[serde(default)]
    pub mapping_file: Option<std::path::PathBuf>,
    /// Upstream's built-in mapping observes the response time in milliseconds, its legacy
    /// unit, rather than in seconds (upstream's `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`;
    /// default false). Ignored with a `mapping_file`, whose own `scale` decides.
    #[serde(default)]
    pub response_time_as_milliseconds: bool,
}

fn default_path() -> String {
    "/metrics".to_string()
}

impl StatsdConfig {
    /// The flush interval.
    pub fn flush_interval(&self) -> Duration {
        self.flush_interval.map_or(Duration::from_secs(10), |d| d.0)
    }
}

impl StatsConfig {
    /// Checks the ranges; the error names the field and the value.
    pub fn validate(&self) -> Result<(), ConfigFileError> {
        if !(0.0..=1.0).contains(&self.near_limit_ratio) {
            return Err(ConfigFileError::invalid(
                "stats.near_limit_ratio",
                format!("invalid value {} (0 to 1)", self.near_limit_ratio),
            ));
        }
        if self.max_series == 0 {
            return Err(ConfigFileError::invalid(
                "stats.max_series",
                "invalid value 0 (at least 1)",
            ));
        }
        if let Some(statsd) = &self.statsd {
            if statsd.flush_interval.is_some_and(|d| d.0.is_zero()) {
                return Err(ConfigFileError::invalid(
                    "stats.statsd.flush_interval",
                    "invalid value 0s (above 0)",
                ));
            }
            if statsd.address.rsplit_once(':').is_none() {
                return Err(ConfigFileError::invalid(
                    "stats.statsd.address",
                    format!("`{}` is not host:port", statsd.address),
                ));
            }
        }
        if let Some(prometheus) = &self.prometheus {
            if !prometheus.path.starts_with('/') {
                return Err(ConfigFileError::invalid(
                    "stats.prometheus.path",
                    format!("`{}` does not start with /", prometheus.path),
                ));
            }
        }
        Ok(())
    }
}
