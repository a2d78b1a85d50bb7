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
//! Floodgate's algorithms instead of a unit (see [`envoy`]).
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

pub mod envoy;
mod validate;

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use floodgate::algorithm::spec::{AlgorithmSpec, AnyAlgorithm, SpecDuration};
use floodgate::limiter::concurrency::ConcurrencyLimiter;
use floodgate::limiter::fleet::FleetShedder;
use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
use floodgate::limiter::utilization::{ControllerSettings, UtilizationShedder, WorkerGauge};
use floodgate::limiter::{LimiterKind, Mode, OnStoreError};
use floodgate::pipeline::Pipeline;
use floodgate::store::Store;
use floodgate::Clock;
use serde::de::{self, Deserializer};
use serde::Deserialize;

pub use self::validate::ConfigFileError;

use self::envoy::{DescriptorConfig, DomainConfig, RateLimitConfig};
use self::validate::key_path;
use crate::descriptors::RuleSet;

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
        let config = if envoy::is_envoy_file(&value) {
            Config {
                domains: vec![envoy::read_file(text, file)?],
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
        envoy::compile_domains(&self.domains)
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
mod tests;
