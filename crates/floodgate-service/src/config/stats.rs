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
//!   dogstatsd:                  # envoyproxy's USE_DOG_STATSD (off unless given)
//!     address: localhost:8125   # STATSD_HOST, STATSD_PORT; always UDP
//!     flush_interval: 10s       # STATS_FLUSH_INTERVAL
//!     extra_tags: {team: edge}  # EXTRA_TAGS: the tag `team:edge` on every line
//!     mogrifiers:               # USE_DOG_STATSD_MOGRIFIERS, DOG_STATSD_MOGRIFIER_*
//!       - pattern: '^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)$'
//!         name: ratelimit.service.rate_limit.$3
//!         tags: {domain: $1, descriptor: $2}
//!   prometheus:                 # envoyproxy's USE_PROMETHEUS (off unless given)
//!     address: 0.0.0.0:9090     # PROMETHEUS_ADDR
//!     path: /metrics            # PROMETHEUS_PATH
//!     mapping_file: map.yaml    # PROMETHEUS_MAPPER_YAML
//!     response_time_as_milliseconds: false  # PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use floodgate::duration::SpecDuration;
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
    /// Pushing them to a DogStatsD agent, with tags, as upstream's `USE_DOG_STATSD`.
    pub dogstatsd: Option<DogStatsdConfig>,
    /// Serving `/metrics` on an address of its own too.
    pub prometheus: Option<PrometheusConfig>,
}

impl Default for StatsConfig {
    fn default() -> Self {
        StatsConfig {
            near_limit_ratio: 0.8,
            max_series: 10_000,
            statsd: None,
            dogstatsd: None,
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

/// `stats.dogstatsd` (see `dogstatsd` for what is sent).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DogStatsdConfig {
    /// `host:port` of the DogStatsD agent, over UDP (a name is resolved at the first push, and
    /// again after a push failed).
    pub address: String,
    /// How often counters are pushed, as their changes since the last push (above 0;
    /// default 10 s).
    #[serde(default)]
    pub flush_interval: Option<SpecDuration>,
    /// Tags on every line (`key:value`), as upstream carries `EXTRA_TAGS` to DogStatsD: its
    /// value's `.`, `:` and `|` written `_`; a tag with an empty key or value is left out.
    #[serde(default)]
    pub extra_tags: BTreeMap<String, String>,
    /// Renamings, tried in order on each name: the first whose pattern matches renames it
    /// and adds its tags.
    #[serde(default)]
    pub mogrifiers: Vec<MogrifierConfig>,
    /// Tags the DogStatsD client adds to every line from `DD_ENTITY_ID`, `DD_ENV`,
    /// `DD_SERVICE` and `DD_VERSION` (`dd.internal.entity_id:…`, `env:…`, `service:…`,
    /// `version:…`), filled from the environment at start-up; not a file setting.
    #[serde(skip)]
    pub datadog_tags: Vec<String>,
}

/// One of `stats.dogstatsd.mogrifiers` (upstream's `DOG_STATSD_MOGRIFIER_<NAME>_*`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MogrifierConfig {
    /// A regular expression (RE2's syntax) searched for anywhere in a statistic's name.
    pub pattern: String,
    /// The name a matching statistic takes; `$0` stands for the match, `$1`… for its
    /// groups (one that did not take part: empty; beyond the groups: left as written).
    pub name: String,
    /// Tags added to a matching statistic, `key: value`, sent in key order; values take `$n`
    /// as `name` does.
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

impl MogrifierConfig {
    /// What is wrong with it, if anything: the field (`pattern`, `name`, `tags`) and why.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.pattern.is_empty() {
            return Err(("pattern", "empty: a regular expression is needed".into()));
        }
        if let Err(e) = regex::Regex::new(&self.pattern) {
            return Err((
                "pattern",
                format!("`{}` is not a regular expression: {e}", self.pattern),
            ));
        }
        if self.name.is_empty() {
            return Err(("name", "empty: the new name is needed".into()));
        }
        for (key, value) in &self.tags {
            if key.is_empty() {
                return Err(("tags", format!("a tag with no key (value `{value}`)")));
            }
            if value.is_empty() {
                return Err(("tags", format!("tag `{key}` has no value")));
            }
        }
        Ok(())
    }
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

impl DogStatsdConfig {
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
            check_push("stats.statsd", &statsd.address, statsd.flush_interval)?;
        }
        if let Some(dog) = &self.dogstatsd {
            check_push("stats.dogstatsd", &dog.address, dog.flush_interval)?;
            for (i, mogrifier) in dog.mogrifiers.iter().enumerate() {
                mogrifier.check().map_err(|(field, why)| {
                    ConfigFileError::invalid(
                        format!("stats.dogstatsd.mogrifiers[{i}].{field}"),
                        why,
                    )
                })?;
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

/// Checks a push's `address` (`host:port`) and `flush_interval` (above 0), under `section`.
fn check_push(
    section: &str,
    address: &str,
    flush_interval: Option<SpecDuration>,
) -> Result<(), ConfigFileError> {
    if flush_interval.is_some_and(|d| d.0.is_zero()) {
        return Err(ConfigFileError::invalid(
            format!("{section}.flush_interval"),
            "invalid value 0s (above 0)",
        ));
    }
    if address.rsplit_once(':').is_none() {
        return Err(ConfigFileError::invalid(
            format!("{section}.address"),
            format!("`{address}` is not host:port"),
        ));
    }
    Ok(())
}
