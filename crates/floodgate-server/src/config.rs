//! The server's configuration: Floodgate's own YAML format, or an envoyproxy/ratelimit file.
//!
//! # Native format
//!
//! ```yaml
//! http: 127.0.0.1:8080          # optional listen addresses
//! grpc: 127.0.0.1:8081
//! store: { max_keys: 1000000 }  # the in-memory store's bound (default 1,000,000)
//! plans:                        # plan name -> algorithm (floodgate's AlgorithmSpec)
//!   free: { algorithm: token_bucket, rate: 50, capacity: 100 }
//! default_plan: free            # for users without a known plan
//! endpoint_costs: { /v1/search: 5 }   # cost of a request to an endpoint (default 1)
//! users: { alice: free }        # a user's plan
//! limiters:                     # each one optional: absent = not configured
//!   request_rate: { mode: enforce, on_store_error: fail_open }
//!   concurrency: { capacity: 20, lease_ttl: 60s, mode: enforce, on_store_error: fail_open }
//!   fleet: { capacity: 1000, reserved_for_critical: 0.2, lease_ttl: 60s }
//!   utilization: { workers: 64, sample_interval: 1s, seed: 0, mode: shadow }
//! limits:                       # named limits for POST /v1/check {"limiter": NAME, …}
//!   login: { algorithm: sliding_log, limit: 5, window: 1m }
//! domains:                      # Envoy RLS domains, envoyproxy/ratelimit's format
//!   - domain: example
//!     descriptors:
//!       - key: remote_address
//!         rate_limit: { unit: second, requests_per_unit: 10 }
//! ```
//!
//! Defaults: `mode: enforce`, `on_store_error: fail_open` (or `fail_closed`), `lease_ttl: 60s`,
//! `sample_interval: 1s`, `seed: 0`, and Stripe's controller constants for the utilization
//! shedder's optional `end_of_good`, `start_of_bad`, `seconds_before_shedding` and
//! `seconds_to_shed_all`. A limiter written with no settings (`request_rate:` or
//! `request_rate: {}`) is configured with its defaults. Durations are seconds or strings with a
//! unit (`"500ms"`, `"1m"`). In `domains`, a descriptor's `rate_limit` may name one of
//! Floodgate's algorithms instead of a unit (see [`crate::envoy`]).
//!
//! # Format detection
//!
//! A file whose top level has a `domain` key is an envoyproxy/ratelimit file: it loads
//! unchanged as the configuration's only domain, next to the built-in pipeline, plans and
//! limits of [`Config::builtin`]. Any other file is the native format.
//!
//! # Validation
//!
//! Unknown fields and duplicate map keys are refused when the YAML is read
//! ([`ConfigFileError::Yaml`], with line and column). [`Config::validate`] then builds every
//! algorithm, limiter and domain and refuses invalid values with the path of the field in the
//! file and the value ([`ConfigFileError::Invalid`], e.g. `plans.free.rate`). [`Config::load`]
//! and [`Config::from_yaml_str`] return only validated configurations.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use floodgate::algorithm::concurrency::{Concurrency, Fleet};
use floodgate::algorithm::spec::{AlgorithmSpec, AnyAlgorithm, SpecDuration};
use floodgate::limiter::concurrency::ConcurrencyLimiter;
use floodgate::limiter::fleet::FleetShedder;
use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
use floodgate::limiter::utilization::{ControllerSettings, UtilizationShedder, WorkerGauge};
use floodgate::limiter::{LimiterKind, Mode, OnStoreError};
use floodgate::pipeline::Pipeline;
use floodgate::store::Store;
use floodgate::{Clock, ConfigError};
use serde::de::{self, Deserializer};
use serde::Deserialize;

use crate::envoy::{DescriptorConfig, DomainConfig, RateLimitConfig, RuleSet};

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigFileError {
    /// The file could not be read.
    #[error("{}: cannot read the file: {message}", file.display())]
    Io {
        /// The file.
        file: PathBuf,
        /// The operating system's reason.
        message: String,
    },
    /// The text is not YAML, or does not have the expected shape: a syntax error, a wrong
    /// type, an unknown field, a duplicate key.
    #[error("{}invalid configuration: {message}", file.as_ref().map(|f| format!("{}: ", f.display())).unwrap_or_default())]
    Yaml {
        /// The file, when the text came from one.
        file: Option<PathBuf>,
        /// The parser's message, with the field's path and the line and column.
        message: String,
    },
    /// A value is not allowed.
    #[error("`{path}`: {message}")]
    Invalid {
        /// Where the value is in the file, e.g. `plans.free.rate` or
        /// `domains[0].descriptors[2].rate_limit.unit`.
        path: String,
        /// What is wrong, with the value.
        message: String,
    },
}

impl ConfigFileError {
    /// A [`ConfigFileError::Yaml`] from the YAML parser's error.
    pub fn yaml(file: Option<&Path>, error: &serde_norway::Error) -> ConfigFileError {
        ConfigFileError::Yaml {
            file: file.map(Path::to_path_buf),
            message: error.to_string(),
        }
    }

    /// A [`ConfigError`] from building something described at `path` (empty for the top
    /// level), as an [`ConfigFileError::Invalid`] at the error's field under `path`:
    /// `("plans.free", rate)` becomes `plans.free.rate`.
    pub fn from_config_error(path: &str, error: ConfigError) -> ConfigFileError {
        let join = |field: &str| {
            if path.is_empty() {
                field.to_string()
            } else {
                format!("{path}.{field}")
            }
        };
        match error {
            ConfigError::Invalid {
                field,
                value,
                reason,
            } => ConfigFileError::invalid(join(field), format!("invalid value {value} ({reason})")),
            ConfigError::Missing { field } => ConfigFileError::invalid(join(field), "missing"),
        }
    }

    /// Shorthand for [`ConfigFileError::Invalid`] at `path`.
    pub fn invalid(path: impl Into<String>, message: impl Into<String>) -> ConfigFileError {
        ConfigFileError::Invalid {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// A whole server configuration (see the [module documentation](self)).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the HTTP API listens; `None` leaves it to the command line's default.
    #[serde(default)]
    pub http: Option<SocketAddr>,
    /// Where the Envoy RLS gRPC API listens; `None` leaves it to the command line's default.
    #[serde(default)]
    pub grpc: Option<SocketAddr>,
    /// The in-memory store's settings.
    #[serde(default)]
    pub store: StoreConfig,
    /// The request rate limiter's plans: name → algorithm.
    #[serde(default)]
    pub plans: BTreeMap<String, AlgorithmSpec>,
    /// The plan of users without a known plan; required when there are plans.
    #[serde(default)]
    pub default_plan: Option<String>,
    /// Endpoint → cost of one request to it (at least 1; other endpoints cost 1).
    #[serde(default)]
    pub endpoint_costs: BTreeMap<String, u64>,
    /// User → plan name.
    #[serde(default)]
    pub users: BTreeMap<String, String>,
    /// The pipeline's four limiters, each optional.
    #[serde(default)]
    pub limiters: LimitersConfig,
    /// Named limits for `POST /v1/check`: name → algorithm.
    #[serde(default)]
    pub limits: BTreeMap<String, AlgorithmSpec>,
    /// Envoy RLS domains, in envoyproxy/ratelimit's format (plus Floodgate's algorithms).
    #[serde(default)]
    pub domains: Vec<DomainConfig>,
}

/// The in-memory store's settings.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// The most keys held at once (at least 1; default 1,000,000).
    #[serde(default = "default_max_keys")]
    pub max_keys: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            max_keys: default_max_keys(),
        }
    }
}

fn default_max_keys() -> usize {
    1_000_000
}

/// The pipeline's limiters; `None` means not configured (not consulted at all).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitersConfig {
    /// The request rate limiter (its plans are the top-level `plans`).
    #[serde(default, deserialize_with = "present")]
    pub request_rate: Option<RequestRateConfig>,
    /// The concurrent requests limiter.
    #[serde(default, deserialize_with = "present")]
    pub concurrency: Option<ConcurrencyConfig>,
    /// The fleet usage load shedder.
    #[serde(default, deserialize_with = "present")]
    pub fleet: Option<FleetConfig>,
    /// The worker utilization load shedder.
    #[serde(default, deserialize_with = "present")]
    pub utilization: Option<UtilizationConfig>,
}

/// The request rate limiter's settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestRateConfig {
    /// `enforce` (default), `shadow` or `off`.
    #[serde(default, deserialize_with = "mode")]
    pub mode: Mode,
    /// `fail_open` (default) or `fail_closed`.
    #[serde(default, deserialize_with = "on_store_error")]
    pub on_store_error: OnStoreError,
}

/// The concurrent requests limiter's settings.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyConfig {
    /// The most requests in flight per user.
    pub capacity: u64,
    /// How long an unreturned lease holds its place (default 60 s).
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl: SpecDuration,
    /// `enforce` (default), `shadow` or `off`.
    #[serde(default, deserialize_with = "mode")]
    pub mode: Mode,
    /// `fail_open` (default) or `fail_closed`.
    #[serde(default, deserialize_with = "on_store_error")]
    pub on_store_error: OnStoreError,
}

/// The fleet usage load shedder's settings.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetConfig {
    /// Requests in flight across the fleet.
    pub capacity: u64,
    /// The fraction of `capacity` kept for critical requests (0 to 1).
    pub reserved_for_critical: f64,
    /// How long an unreturned lease holds its place (default 60 s).
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl: SpecDuration,
    /// `enforce` (default), `shadow` or `off`.
    #[serde(default, deserialize_with = "mode")]
    pub mode: Mode,
    /// `fail_open` (default) or `fail_closed`.
    #[serde(default, deserialize_with = "on_store_error")]
    pub on_store_error: OnStoreError,
}

/// The worker utilization load shedder's settings.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UtilizationConfig {
    /// The node's workers: utilization is requests in flight divided by this (at least 1).
    pub workers: u64,
    /// The most often the controller samples utilization (default 1 s).
    #[serde(default = "default_sample_interval")]
    pub sample_interval: SpecDuration,
    /// The seed of the random draw that sheds requests (default 0).
    #[serde(default)]
    pub seed: u64,
    /// Below this utilization the shed amount decreases (default 0.7).
    #[serde(default)]
    pub end_of_good: Option<f64>,
    /// From this utilization up the shed amount increases (default 0.8).
    #[serde(default)]
    pub start_of_bad: Option<f64>,
    /// Seconds of full overload before anything is shed (default 28).
    #[serde(default)]
    pub seconds_before_shedding: Option<f64>,
    /// Seconds of full overload to go from shedding nothing to everything (default 120).
    #[serde(default)]
    pub seconds_to_shed_all: Option<f64>,
    /// `enforce` (default), `shadow` or `off`.
    #[serde(default, deserialize_with = "mode")]
    pub mode: Mode,
}

impl UtilizationConfig {
    /// The controller's constants: Stripe's, with the configured overrides.
    pub fn settings(&self) -> ControllerSettings {
        let d = ControllerSettings::default();
        ControllerSettings {
            end_of_good: self.end_of_good.unwrap_or(d.end_of_good),
            start_of_bad: self.start_of_bad.unwrap_or(d.start_of_bad),
            seconds_before_shedding: self
                .seconds_before_shedding
                .unwrap_or(d.seconds_before_shedding),
            seconds_to_shed_all: self.seconds_to_shed_all.unwrap_or(d.seconds_to_shed_all),
        }
    }
}

fn default_lease_ttl() -> SpecDuration {
    SpecDuration(Duration::from_secs(60))
}

fn default_sample_interval() -> SpecDuration {
    SpecDuration(Duration::from_secs(1))
}

/// A field that is present is configured, even when written with no settings (an empty
/// YAML value reads as an empty mapping).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

fn mode<'de, D: Deserializer<'de>>(d: D) -> Result<Mode, D::Error> {
    let name = String::deserialize(d)?;
    Mode::from_name(&name).ok_or_else(|| {
        de::Error::custom(format!(
            "unknown mode `{name}`, expected enforce, shadow or off"
        ))
    })
}

fn on_store_error<'de, D: Deserializer<'de>>(d: D) -> Result<OnStoreError, D::Error> {
    let name = String::deserialize(d)?;
    match name.as_str() {
        "fail_open" => Ok(OnStoreError::FailOpen),
        "fail_closed" => Ok(OnStoreError::FailClosed),
        _ => Err(de::Error::custom(format!(
            "unknown on_store_error `{name}`, expected fail_open or fail_closed"
        ))),
    }
}

/// `prefix.key`, or `prefix["key"]` when the key is not a plain word.
fn key_path(prefix: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        format!("{prefix}.{key}")
    } else {
        format!("{prefix}[{key:?}]")
    }
}

/// A pipeline built from a [`Config`], and the gauge its utilization shedder reads.
pub struct BuiltPipeline<S> {
    /// The configured limiters, in order, with their modes and failure policies.
    pub pipeline: Pipeline<S>,
    /// The utilization shedder's worker gauge: the server enters it for every request it
    /// serves. `None` when the shedder is not configured.
    pub workers: Option<Arc<WorkerGauge>>,
}

impl<S> fmt::Debug for BuiltPipeline<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BuiltPipeline")
            .field("workers", &self.workers)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// Reads and validates a configuration file, in either format (see the module's "Format
    /// detection").
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigFileError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigFileError::Io {
            file: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Config::parse(&text, Some(path))
    }

    /// Reads and validates a configuration's text, in either format.
    pub fn from_yaml_str(text: &str) -> Result<Config, ConfigFileError> {
        Config::parse(text, None)
    }

    fn parse(text: &str, file: Option<&Path>) -> Result<Config, ConfigFileError> {
        let yaml = |e: serde_norway::Error| ConfigFileError::yaml(file, &e);
        let value: serde_norway::Value = serde_norway::from_str(text).map_err(yaml)?;
        let envoy_file = value.as_mapping().is_some_and(|m| m.contains_key("domain"));
        let config = if envoy_file {
            let domain: DomainConfig = serde_norway::from_str(text).map_err(|e| {
                let mut error = ConfigFileError::yaml(file, &e);
                if let ConfigFileError::Yaml { message, .. } = &mut error {
                    if message.contains("unknown field") {
                        message.push_str(
                            " (a top-level `domain` makes this an envoyproxy/ratelimit file)",
                        );
                    }
                }
                error
            })?;
            // Check it alone first, so that errors name the fields as the file writes them.
            RuleSet::compile(std::slice::from_ref(&domain), false)?;
            Config {
                domains: vec![domain],
                ..Config::builtin()
            }
        } else {
            serde_norway::from_str(text).map_err(yaml)?
        };
        config.validate()?;
        Ok(config)
    }

    /// The configuration `floodgate serve` runs without a file: Stripe's example pipeline.
    ///
    /// - plans `free` 50/s, `standard` 500/s and `pro` 1000/s, token buckets with bursts of
    ///   twice the rate; `default_plan: free`;
    /// - all four limiters, enforcing and failing open: at most 20 requests in flight per user;
    ///   a fleet of 1000 places, 20% kept for critical requests; leases expire after 60 s; the
    ///   utilization shedder over 64 workers with Stripe's constants, sampled every second,
    ///   seed 0;
    /// - a named limit `login`: a sliding log of 5 per minute;
    /// - one Envoy domain, `example`: 10 requests per second per `remote_address`, and a token
    ///   bucket of 100 per second with bursts of 200 per `api_key`.
    ///
    /// No listen addresses, users or endpoint costs. `examples/config/floodgate.yaml` is this
    /// configuration written out.
    pub fn builtin() -> Config {
        let minute = SpecDuration(Duration::from_secs(60));
        let plans = [("free", 50u32), ("standard", 500), ("pro", 1000)]
            .into_iter()
            .map(|(name, rate)| {
                let spec = AlgorithmSpec::TokenBucket {
                    rate: f64::from(rate),
                    capacity: 2 * u64::from(rate),
                };
                (name.to_string(), spec)
            })
            .collect();
        let descriptor = |key: &str, rate_limit: RateLimitConfig| DescriptorConfig {
            key: key.to_string(),
            rate_limit: Some(rate_limit),
            ..DescriptorConfig::default()
        };
        Config {
            http: None,
            grpc: None,
            store: StoreConfig::default(),
            plans,
            default_plan: Some("free".to_string()),
            endpoint_costs: BTreeMap::new(),
            users: BTreeMap::new(),
            limiters: LimitersConfig {
                request_rate: Some(RequestRateConfig::default()),
                concurrency: Some(ConcurrencyConfig {
                    capacity: 20,
                    lease_ttl: minute,
                    mode: Mode::Enforce,
                    on_store_error: OnStoreError::FailOpen,
                }),
                fleet: Some(FleetConfig {
                    capacity: 1000,
                    reserved_for_critical: 0.2,
                    lease_ttl: minute,
                    mode: Mode::Enforce,
                    on_store_error: OnStoreError::FailOpen,
                }),
                utilization: Some(UtilizationConfig {
                    workers: 64,
                    sample_interval: default_sample_interval(),
                    seed: 0,
                    end_of_good: None,
                    start_of_bad: None,
                    seconds_before_shedding: None,
                    seconds_to_shed_all: None,
                    mode: Mode::Enforce,
                }),
            },
            limits: BTreeMap::from([(
                "login".to_string(),
                AlgorithmSpec::SlidingLog {
                    limit: 5,
                    window: minute,
                },
            )]),
            domains: vec![DomainConfig {
                domain: "example".to_string(),
                descriptors: vec![
                    descriptor(
                        "remote_address",
                        RateLimitConfig {
                            unit: Some("second".to_string()),
                            requests_per_unit: Some(10),
                            ..RateLimitConfig::default()
                        },
                    ),
                    descriptor(
                        "api_key",
                        RateLimitConfig {
                            algorithm: Some(AlgorithmSpec::TokenBucket {
                                rate: 100.0,
                                capacity: 200,
                            }),
                            ..RateLimitConfig::default()
                        },
                    ),
                ],
            }],
        }
    }

    /// Checks everything a server would build from this configuration, building every
    /// algorithm, limiter and domain; the first problem is returned with its path in the file.
    ///
    /// Beyond each part's own parameters: `store.max_keys` ≥ 1; `http` and `grpc` differ
    /// (unless the port is 0); when there are plans or a request rate limiter,
    /// `default_plan` names a plan (and a request rate limiter needs at least one plan); every
    /// user's plan exists; endpoint costs are ≥ 1; plan and limit names are not empty.
    pub fn validate(&self) -> Result<(), ConfigFileError> {
        if let (Some(http), Some(grpc)) = (self.http, self.grpc) {
            if http == grpc && http.port() != 0 {
                return Err(ConfigFileError::invalid(
                    "grpc",
                    format!("{grpc} is also the http address"),
                ));
            }
        }
        if self.store.max_keys == 0 {
            return Err(ConfigFileError::invalid(
                "store.max_keys",
                "invalid value 0 (must be at least 1)",
            ));
        }
        let plans = self.plans()?;
        let plan_names = || {
            let names: Vec<&str> = self.plans.keys().map(String::as_str).collect();
            if names.is_empty() {
                "there are no plans".to_string()
            } else {
                format!("plans are {}", names.join(", "))
            }
        };
        if self.limiters.request_rate.is_some() && plans.is_empty() {
            return Err(ConfigFileError::invalid(
                "plans",
                "the request_rate limiter needs at least one plan",
            ));
        }
        match &self.default_plan {
            None if !plans.is_empty() => {
                return Err(ConfigFileError::invalid(
                    "default_plan",
                    "missing: the plan of users without a known plan",
                ))
            }
            Some(name) if !self.plans.contains_key(name) => {
                return Err(ConfigFileError::invalid(
                    "default_plan",
                    format!("unknown plan `{name}`: {}", plan_names()),
                ))
            }
            _ => {}
        }
        for (user, plan) in &self.users {
            if !self.plans.contains_key(plan) {
                return Err(ConfigFileError::invalid(
                    key_path("users", user),
                    format!("unknown plan `{plan}`: {}", plan_names()),
                ));
            }
        }
        for (endpoint, cost) in &self.endpoint_costs {
            if *cost == 0 {
                return Err(ConfigFileError::invalid(
                    key_path("endpoint_costs", endpoint),
                    "invalid value 0 (a cost must be at least 1)",
                ));
            }
        }
        let limiters = &self.limiters;
        if let Some(c) = &limiters.concurrency {
            Concurrency::new(c.capacity, c.lease_ttl.0)
                .map_err(|e| ConfigFileError::from_config_error("limiters.concurrency", e))?;
        }
        if let Some(f) = &limiters.fleet {
            Fleet::new(f.capacity, f.reserved_for_critical, f.lease_ttl.0)
                .map_err(|e| ConfigFileError::from_config_error("limiters.fleet", e))?;
        }
        if let Some(u) = &limiters.utilization {
            let at = |e| ConfigFileError::from_config_error("limiters.utilization", e);
            WorkerGauge::new(u.workers).map_err(at)?;
            u.settings().validate().map_err(at)?;
        }
        self.named_limits()?;
        self.rule_set()?;
        Ok(())
    }

    /// The plans, built (errors at `plans.NAME.FIELD`), in name order.
    pub fn plans(&self) -> Result<Vec<Plan>, ConfigFileError> {
        self.plans
            .iter()
            .map(|(name, spec)| {
                let path = key_path("plans", name);
                if name.is_empty() {
                    return Err(ConfigFileError::invalid(path, "a plan needs a name"));
                }
                let algorithm = spec
                    .build()
                    .map_err(|e| ConfigFileError::from_config_error(&path, e))?;
                Plan::new(name.clone(), algorithm)
                    .map_err(|e| ConfigFileError::from_config_error(&path, e))
            })
            .collect()
    }

    /// The named limits of `POST /v1/check`, built (errors at `limits.NAME.FIELD`).
    pub fn named_limits(&self) -> Result<BTreeMap<String, AnyAlgorithm>, ConfigFileError> {
        self.limits
            .iter()
            .map(|(name, spec)| {
                let path = key_path("limits", name);
                if name.is_empty() {
                    return Err(ConfigFileError::invalid(path, "a limit needs a name"));
                }
                let algorithm = spec
                    .build()
                    .map_err(|e| ConfigFileError::from_config_error(&path, e))?;
                Ok((name.clone(), algorithm))
            })
            .collect()
    }

    /// The Envoy RLS domains, compiled (errors at `domains[i]…`).
    pub fn rule_set(&self) -> Result<RuleSet, ConfigFileError> {
        RuleSet::compile(&self.domains, true)
    }

    /// Builds the configured limiters into a [`Pipeline`] with their modes and failure
    /// policies, after [`Config::validate`]. `new_store(kind)` is called once per limiter that
    /// keeps state (request rate, concurrency, fleet: each needs its own store, as they keep
    /// different state under the same user keys; the kind lets a caller hand back the same
    /// store on every reload); `clock` drives the utilization shedder.
    /// Endpoint costs are applied to the request rate limiter.
    pub fn build_pipeline<S, F>(
        &self,
        mut new_store: F,
        clock: Arc<dyn Clock>,
    ) -> Result<BuiltPipeline<S>, ConfigFileError>
    where
        S: Store<str, AnyAlgorithm> + 'static,
        F: FnMut(LimiterKind) -> S,
    {
        self.validate()?;
        let mut builder = Pipeline::builder();
        let limiters = &self.limiters;
        if let Some(r) = &limiters.request_rate {
            let default_plan = self.default_plan.as_deref().unwrap_or_default();
            let mut limiter = RequestRateLimiter::new(
                self.plans()?,
                default_plan,
                new_store(LimiterKind::RequestRate),
            )
            .map_err(|e| ConfigFileError::from_config_error("", e))?;
            for (endpoint, cost) in &self.endpoint_costs {
                limiter = limiter.with_endpoint_cost(endpoint, *cost).map_err(|e| {
                    ConfigFileError::from_config_error(&key_path("endpoint_costs", endpoint), e)
                })?;
            }
            builder = builder
                .request_rate(limiter)
                .mode(LimiterKind::RequestRate, r.mode)
                .on_store_error(LimiterKind::RequestRate, r.on_store_error);
        }
        if let Some(c) = &limiters.concurrency {
            let limiter = ConcurrencyLimiter::new(
                c.capacity,
                c.lease_ttl.0,
                new_store(LimiterKind::Concurrency),
            )
            .map_err(|e| ConfigFileError::from_config_error("limiters.concurrency", e))?;
            builder = builder
                .concurrency(limiter)
                .mode(LimiterKind::Concurrency, c.mode)
                .on_store_error(LimiterKind::Concurrency, c.on_store_error);
        }
        if let Some(f) = &limiters.fleet {
            let shedder = FleetShedder::new(
                f.capacity,
                f.reserved_for_critical,
                f.lease_ttl.0,
                new_store(LimiterKind::Fleet),
            )
            .map_err(|e| ConfigFileError::from_config_error("limiters.fleet", e))?;
            builder = builder
                .fleet(shedder)
                .mode(LimiterKind::Fleet, f.mode)
                .on_store_error(LimiterKind::Fleet, f.on_store_error);
        }
        let mut workers = None;
        if let Some(u) = &limiters.utilization {
            let at = |e| ConfigFileError::from_config_error("limiters.utilization", e);
            let gauge = Arc::new(WorkerGauge::new(u.workers).map_err(at)?);
            let shedder = UtilizationShedder::new(
                u.settings(),
                u.sample_interval.0,
                u.seed,
                gauge.clone(),
                clock,
            )
            .map_err(at)?;
            builder = builder
                .utilization(shedder)
                .mode(LimiterKind::Utilization, u.mode);
            workers = Some(gauge);
        }
        Ok(BuiltPipeline {
            pipeline: builder.build(),
            workers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate::algorithm::spec::AnyState;
    use floodgate::limiter::Priority;
    use floodgate::pipeline::Descriptor;
    use floodgate::store::MemoryStore;
    use floodgate::{ManualClock, Nanos};

    fn example_path(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/config")
            .join(name)
    }

    fn invalid(yaml: &str) -> (String, String) {
        match Config::from_yaml_str(yaml) {
            Err(ConfigFileError::Invalid { path, message }) => (path, message),
            other => panic!("expected Invalid for\n{yaml}\ngot {other:?}"),
        }
    }

    fn yaml_error(yaml: &str) -> String {
        match Config::from_yaml_str(yaml) {
            Err(ConfigFileError::Yaml {
                file: None,
                message,
            }) => message,
            other => panic!("expected a Yaml error for\n{yaml}\ngot {other:?}"),
        }
    }

    const PLANS: &str = "plans:\n  free: {algorithm: token_bucket, rate: 5, capacity: 10}\n\
                         default_plan: free\n";

    #[test]
    fn the_builtin_config_is_valid() {
        let config = Config::builtin();
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.plans().map(|p| p.len()), Ok(3));
        let limits = config.named_limits().expect("valid");
        assert_eq!(
            limits.get("login").map(|a| a.quota()),
            Some(Some((5.0, Duration::from_secs(60))))
        );
        assert!(config.rule_set().expect("valid").has_domain("example"));
    }

    #[test]
    fn the_native_example_is_the_builtin_config_written_out() {
        let example = Config::load(example_path("floodgate.yaml")).expect("loads");
        assert!(example.http.is_some() && example.grpc.is_some());
        assert!(!example.users.is_empty() && !example.endpoint_costs.is_empty());
        let trimmed = Config {
            http: None,
            grpc: None,
            users: BTreeMap::new(),
            endpoint_costs: BTreeMap::new(),
            ..example
        };
        assert_eq!(trimmed, Config::builtin());
    }

    #[test]
    fn an_envoy_file_becomes_the_only_domain_beside_the_builtin_pipeline() {
        let config = Config::load(example_path("envoy.yaml")).expect("loads");
        assert_eq!(config.domains.len(), 1);
        assert_eq!(config.domains[0].domain, "edge_proxy");
        assert_eq!(config.plans, Config::builtin().plans);
        assert_eq!(config.limiters, Config::builtin().limiters);
        // Errors in an envoy file are named as that file writes them.
        let (path, message) = invalid("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n");
        assert_eq!(path, "descriptors[0].rate_limit.unit");
        assert!(message.contains("fortnight"));
    }

    #[test]
    fn a_native_config_reads_every_section() {
        let config = Config::from_yaml_str(
            r#"
http: 127.0.0.1:9000
grpc: "[::1]:9001"
store: {max_keys: 10}
plans:
  free: {algorithm: token_bucket, rate: 5, capacity: 10}
  gold: {algorithm: gcra, max_burst: 9, count: 100, period: 1s}
default_plan: free
endpoint_costs: {/v1/search: 5}
users: {alice: gold}
limiters:
  request_rate:
  concurrency: {capacity: 2, mode: shadow, on_store_error: fail_closed}
  fleet: {capacity: 10, reserved_for_critical: 0.5, lease_ttl: 500ms, mode: "off"}
  utilization: {workers: 4, sample_interval: 2s, seed: 9, start_of_bad: 0.9}
limits:
  login: {algorithm: sliding_log, limit: 5, window: 1m}
domains:
  - domain: a
    descriptors:
      - key: k
        rate_limit: {unit: hour, requests_per_unit: 3}
  - domain: b
"#,
        )
        .expect("valid");
        assert_eq!(config.http.map(|a| a.port()), Some(9000));
        assert_eq!(config.store.max_keys, 10);
        assert_eq!(config.endpoint_costs.get("/v1/search"), Some(&5));
        let l = &config.limiters;
        assert_eq!(l.request_rate, Some(RequestRateConfig::default()));
        let c = l.concurrency.expect("configured");
        assert_eq!(
            (c.mode, c.on_store_error),
            (Mode::Shadow, OnStoreError::FailClosed)
        );
        assert_eq!(c.lease_ttl, SpecDuration(Duration::from_secs(60)));
        let f = l.fleet.expect("configured");
        assert_eq!(
            (f.mode, f.lease_ttl.0),
            (Mode::Off, Duration::from_millis(500))
        );
        let u = l.utilization.expect("configured");
        assert_eq!(u.settings().start_of_bad, 0.9);
        assert_eq!(u.settings().end_of_good, 0.7);
        assert_eq!(config.rule_set().expect("valid").domains().count(), 2);
    }

    #[test]
    fn absent_limiters_are_not_configured() {
        let config =
            Config::from_yaml_str("limits:\n  x: {algorithm: fixed_window, limit: 1, window: 1}\n")
                .expect("valid");
        assert_eq!(config.limiters, LimitersConfig::default());
        let empty = Config::from_yaml_str("").expect("an empty file configures nothing");
        assert_eq!(empty, Config::default());
    }

    #[test]
    fn invalid_values_are_refused_with_their_path() {
        let cases: Vec<(String, &str, &str)> = vec![
            (
                "plans:\n  free: {algorithm: token_bucket, rate: 0, capacity: 10}\ndefault_plan: free\n".into(),
                "plans.free.rate",
                "invalid value 0",
            ),
            (
                "plans:\n  free: {algorithm: sliding_window, limit: 0, window: 1s}\ndefault_plan: free\n".into(),
                "plans.free.limit",
                "at least 1",
            ),
            (
                "plans:\n  free: {algorithm: token_bucket, rate: 1, capacity: 1}\n".into(),
                "default_plan",
                "missing",
            ),
            (format!("{PLANS}default_plan: gold\n").replace("default_plan: free\n", ""), "default_plan", "unknown plan `gold`: plans are free"),
            (format!("{PLANS}users:\n  bob: gold\n"), "users.bob", "unknown plan `gold`"),
            (format!("{PLANS}endpoint_costs:\n  /v1/x: 0\n"), "endpoint_costs[\"/v1/x\"]", "at least 1"),
            ("limiters:\n  request_rate: {}\n".into(), "plans", "at least one plan"),
            (
                format!("{PLANS}limiters:\n  concurrency: {{capacity: 0}}\n"),
                "limiters.concurrency.capacity",
                "invalid value 0",
            ),
            (
                format!("{PLANS}limiters:\n  fleet: {{capacity: 10, reserved_for_critical: 1.5}}\n"),
                "limiters.fleet.reserved_for_critical",
                "1.5",
            ),
            (
                format!("{PLANS}limiters:\n  utilization: {{workers: 0}}\n"),
                "limiters.utilization.workers",
                "invalid value 0",
            ),
            (
                format!("{PLANS}limiters:\n  utilization: {{workers: 4, end_of_good: 0.9, start_of_bad: 0.5}}\n"),
                "limiters.utilization.start_of_bad",
                "0.5",
            ),
            (
                "limits:\n  login: {algorithm: gcra, max_burst: 1, count: 0, period: 1}\n".into(),
                "limits.login.count",
                "invalid value 0",
            ),
            ("store: {max_keys: 0}\n".into(), "store.max_keys", "at least 1"),
            ("http: 127.0.0.1:80\ngrpc: 127.0.0.1:80\n".into(), "grpc", "also the http address"),
            (
                "domains:\n  - domain: a\n  - domain: a\n".into(),
                "domains[1].domain",
                "duplicate domain",
            ),
            (
                "domains:\n  - descriptors: []\n".into(),
                "domains[0].domain",
                "non-empty",
            ),
            (
                "domains:\n  - domain: a\n    descriptors:\n      - key: k\n        rate_limit: {algorithm: fixed_window, limit: 3, window: 0}\n".into(),
                "domains[0].descriptors[0].rate_limit.window",
                "invalid value 0ns",
            ),
        ];
        for (yaml, path, needle) in cases {
            let (got, message) = invalid(&yaml);
            assert_eq!(got, path, "{yaml}");
            assert!(message.contains(needle), "{message:?} lacks {needle:?}");
        }
    }

    #[test]
    fn typos_and_bad_yaml_are_refused() {
        for (yaml, needle) in [
            ("plan:\n  free: {algorithm: token_bucket, rate: 1, capacity: 1}\n", "unknown field `plan`"),
            (
                "plans:\n  free: {algorithm: token_bucket, rate: 1, capacity: 1, burst: 2}\n",
                "burst",
            ),
            ("limiters:\n  concurency: {capacity: 1}\n", "concurency"),
            ("limiters:\n  concurrency: {capacity: 1, mode: enforcing}\n", "unknown mode `enforcing`"),
            (
                "limiters:\n  fleet: {capacity: 1, reserved_for_critical: 0.1, on_store_error: open}\n",
                "unknown on_store_error `open`",
            ),
            ("limiters:\n  concurrency: {lease_ttl: 5s}\n", "capacity"),
            ("limiters:\n  concurrency: {capacity: 1, lease_ttl: 5 fortnights}\n", "fortnights"),
            ("users:\n  a: free\n  a: pro\n", "duplicate entry with key \"a\""),
            ("http: not-an-address\n", "http"),
            ("plans: [1, 2]\n", "plans"),
            ("store: {max_keys: -1}\n", "max_keys"),
            ("plans:\n  free: {algorithm: token_bucket\n", ""),
            ("domains:\n  - domain: a\n    descriptors:\n      - key: k\n        rate_limits: {}\n", "rate_limits"),
        ] {
            let message = yaml_error(yaml);
            assert!(message.contains(needle), "{message:?} lacks {needle:?}");
        }
    }

    #[test]
    fn load_names_the_file() {
        let missing = example_path("does-not-exist.yaml");
        match Config::load(&missing) {
            Err(ConfigFileError::Io { file, message }) => {
                assert_eq!(file, missing);
                assert!(!message.is_empty());
            }
            other => panic!("{other:?}"),
        }
        let err = ConfigFileError::Yaml {
            file: Some(PathBuf::from("f.yaml")),
            message: "bad".into(),
        };
        assert_eq!(err.to_string(), "f.yaml: invalid configuration: bad");
        let err = ConfigFileError::Invalid {
            path: "plans.free.rate".into(),
            message: "invalid value 0".into(),
        };
        assert_eq!(err.to_string(), "`plans.free.rate`: invalid value 0");
    }

    /// Drives a future that is ready at once (the memory store's are).
    fn poll<F: std::future::Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("the memory store answers at once"),
        }
    }

    #[test]
    fn the_builtin_pipeline_runs_stripes_example() {
        let clock = ManualClock::new(Nanos::from_secs(1_000));
        let store = |_: LimiterKind| {
            MemoryStore::builder()
                .clock(clock.clone())
                .build::<String, AnyState>()
                .expect("valid store")
        };
        let built = Config::builtin()
            .build_pipeline(store, Arc::new(clock.clone()))
            .expect("builds");
        assert!(built.workers.is_some());
        let pipeline = &built.pipeline;
        for kind in LimiterKind::ALL {
            assert_eq!(pipeline.mode(kind), Some(Mode::Enforce));
        }
        // The free plan bursts to 100; each verdict's leases are dropped at once.
        for _ in 0..100 {
            let verdict = poll(pipeline.evaluate(&Descriptor::new("bob", "free", Priority::Get)));
            assert!(verdict.allowed());
        }
        let over = poll(pipeline.evaluate(&Descriptor::new("bob", "free", Priority::Get)));
        assert_eq!(over.status(), 429);

        let shadow = Config::from_yaml_str(&format!(
            "{PLANS}limiters:\n  request_rate: {{mode: shadow}}\n"
        ))
        .expect("valid")
        .build_pipeline(store, Arc::new(clock.clone()))
        .expect("builds");
        assert_eq!(
            shadow.pipeline.mode(LimiterKind::RequestRate),
            Some(Mode::Shadow)
        );
        assert_eq!(shadow.pipeline.mode(LimiterKind::Concurrency), None);
        assert!(shadow.workers.is_none());
    }
}
