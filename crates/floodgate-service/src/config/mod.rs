//! The server's configuration: Floodgate's own YAML format, or an envoyproxy/ratelimit file.
//!
//! # Native format
//!
//! ```yaml
//! http: 127.0.0.1:8080          # optional listen addresses
//! grpc: 127.0.0.1:8081
//! store: { max_keys: 1000000, overflow: evict_live }  # the in-memory store's bound (default
//!                               # 1,000,000) and what a full store does (or refuse_new)
//! # or, to count across every process sharing a Redis (`serve --store URL` overrides `url`):
//! # store: { url: "redis://127.0.0.1:6380/0", timeout: 50ms, breaker: { threshold: 3, cool_down: 1s },
//! #          password_env: REDIS_PASSWORD, nodes: 3 }
//! connections: { max_connections: 10000, header_read_timeout: 30s, max_header_bytes: 16384,
//!                max_body_bytes: 65536, max_streams: 4096, max_in_flight: 10000,
//!                max_key_bytes: 1024 }
//!                               # the defaults; see crate::connections
//! plans:                        # plan name -> algorithm (floodgate's AlgorithmSpec)
//!   free: { algorithm: token_bucket, rate: 50, capacity: 100 }
//! default_plan: free            # for users without a known plan
//! endpoint_costs: { /v1/search: 5 }   # cost of a request to an endpoint (default 1)
//! users: { alice: free }        # a user's plan
//! limiters:                     # each one optional: absent = not configured
//!   request_rate: { mode: enforce, on_store_error: fail_open, all_or_nothing: false }
//!   concurrency: { capacity: 20, lease_ttl: 60s, mode: enforce, on_store_error: fail_open }
//!   fleet: { capacity: 1000, reserved_for_critical: 0.2, lease_ttl: 60s }
//!   utilization: { workers: 64, sample_interval: 1s, seed: 0, mode: shadow }
//! limits:                       # named limits for POST /v1/check {"limiter": NAME, …}
//!   login: { algorithm: sliding_log, limit: 5, window: 1m }
//! reservation_ttl: 1h           # how long a /v1/reserve reservation can be settled
//! response_dynamic_metadata: false   # Envoy RLS answers carry dynamic metadata (default off)
//! rlqs: { assignment_ttl: 15s }  # the Rate Limit Quota Service's settings (see [`rlqs`])
//! domains:                      # Envoy RLS domains, envoyproxy/ratelimit's format
//!   - domain: example
//!     descriptors:
//!       - key: remote_address
//!         rate_limit: { unit: second, requests_per_unit: 10 }
//! # xds: { server: "host:port" }  # instead of `domains`: pushed by a control plane (see [`xds`])
//! ```
//!
//! Defaults: `mode: enforce`, `on_store_error: fail_open` (or `fail_closed`),
//! `all_or_nothing: false` (`true`: a request another limiter refuses consumes nothing from
//! this one, undone atomically in the same store call), `lease_ttl: 60s`,
//! `sample_interval: 1s`, `seed: 0`, and Stripe's controller constants for the utilization
//! shedder's optional `end_of_good`, `start_of_bad`, `seconds_before_shedding` and
//! `seconds_to_shed_all`. A limiter written with no settings (`request_rate:` or
//! `request_rate: {}`) is configured with its defaults. Durations are seconds or strings with a
//! unit (`"500ms"`, `"1m"`). In `domains`, a descriptor's `rate_limit` may name one of
//! Floodgate's algorithms instead of a unit (see [`envoy`]).
//!
//! # Format detection
//!
//! A file whose top level has a `domain` key (even empty) or a `descriptors` key is an
//! envoyproxy/ratelimit file: it loads unchanged as the configuration's only domain, next to
//! the built-in pipeline, plans and limits of [`Config::builtin`] (see "Sections left out"),
//! with envoyproxy/ratelimit's checks and errors (see [`envoy`]). Any other file is the native
//! format.
//!
//! # Sections left out
//!
//! One rule for every file: each of the sections `plans` (with `default_plan`), `limiters`,
//! `limits` and `domains` that a file leaves out is [`Config::builtin`]'s; a section written
//! empty (`plans: {}`, `limiters: {}`, `limits: {}`, `domains: []`) is none. So a file holding
//! only `store: {url: …}` serves the built-in limits on that store, exactly as `serve --store`
//! without a file does, and an envoyproxy/ratelimit file (which has only a domain) runs next to
//! the built-in pipeline, plans and limits. `plans` left out with `default_plan` given keeps the
//! file's `default_plan` (it names one of the built-in plans). In a directory, domains come
//! from its files only (see [`directory`]).
//!
//! # Any pipeline
//!
//! Instead of `limiters`, a `pipeline` section lists the stages in order, each keyed by a
//! template over the request's fields and attributes and applied `when` the request matches,
//! and an `attributes` section bounds what requests carry and names the secret attributes (see
//! [`pipeline`]). A file with `pipeline` gets no built-in `limiters`; one with both is refused.
//!
//! # Directories and the `rls` section
//!
//! A directory of files, as envoyproxy/ratelimit's runtime directory, loads as one
//! configuration: domain files plus at most one native file ([`directory`]). The native
//! format's optional `rls` section ([`rls`]) merges domains defined more than once and adds
//! rate limit headers to the Envoy answers; the command line can turn both on ([`Overrides`]).
//!
//! # Validation
//!
//! Unknown fields and duplicate map keys are refused when the YAML is read
//! ([`ConfigFileError::Yaml`]). [`Config::validate`] then builds every algorithm, limiter and
//! domain and refuses invalid values with the path of the field in the file and the value
//! ([`ConfigFileError::Invalid`], e.g. `plans.free.rate`). Every error names the file, the path
//! of the entry at fault and its line ([`source`]): `floodgate.yaml:9: invalid configuration:
//! limits.b.window: …`, `floodgate.yaml:3: \`default_plan\`: unknown plan \`fre\``.

mod connections;
pub mod directory;
pub mod envoy;
pub(crate) mod limiters;
pub mod pipeline;
pub mod rlqs;
pub mod rls;
pub mod runtime_dir;
pub mod source;
pub mod stage;
pub mod stats;
pub mod store;
pub mod tls;
mod validate;
pub mod xds;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use floodgate::algorithm::sliding_log::SlidingLogSpec;
use floodgate::algorithm::spec::AlgorithmSpec;
use floodgate::algorithm::token_bucket::TokenBucketSpec;
use floodgate::duration::SpecDuration;
use floodgate::limiter::request_rate::{Plan, EXAMPLE_PLANS};
use floodgate::pipeline::OnStoreError;
use serde::de::{self, Deserializer};
use serde::Deserialize;

pub use self::connections::ConnectionLimits;
pub use self::directory::DirectoryError;
pub use self::limiters::LimitersConfig;
pub use self::pipeline::AttributesConfig;
pub use self::rlqs::RlqsConfig;
pub use self::rls::{Defaults, Overrides, RlsConfig};
pub use self::runtime_dir::RuntimeDir;
pub use self::source::{Origin, Source, Written};
pub use self::stage::{
    AdaptiveStage, ConcurrencyStage, FleetStage, LimitStage, StageConfig, StageKind,
    UtilizationStage,
};
pub use self::stats::{
    DogStatsdConfig, MogrifierConfig, PrometheusConfig, StatsConfig, StatsdConfig, StatsdProtocol,
};
pub use self::store::{
    BreakerConfig, OverflowPolicy, StoreConfig, StoreKind, StoreLayout, StoreMode, StoreSettings,
};
pub use self::tls::{ListenerTls, TlsConfig};
pub use self::validate::ConfigFileError;
pub use self::xds::XdsSource;
pub use crate::rls::headers::ResponseHeaderNames;

use self::envoy::{DescriptorConfig, DomainConfig, RateLimitConfig};
pub(crate) use self::validate::key_path;
use crate::descriptors::RuleSet;

/// Where the service reads its configuration, at start and on every reload.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ConfigSource {
    /// The built-in configuration ([`Config::builtin`]).
    #[default]
    Builtin,
    /// A file or a directory (`--config`).
    Path(PathBuf),
    /// envoyproxy/ratelimit's runtime directory (its `RUNTIME_*` settings).
    Runtime(RuntimeDir),
    /// Pushed by a control plane over xDS (`CONFIG_TYPE=GRPC_XDS_SOTW`): the last set of
    /// resources accepted.
    Xds(XdsSource),
}

impl From<Option<PathBuf>> for ConfigSource {
    fn from(path: Option<PathBuf>) -> ConfigSource {
        path.map_or(ConfigSource::Builtin, ConfigSource::Path)
    }
}

impl ConfigSource {
    /// Reads the configuration, with `overrides` applied.
    pub fn load(&self, overrides: &Overrides) -> Result<Config, ConfigFileError> {
        match self {
            ConfigSource::Builtin => Config::load_or_builtin(None, overrides),
            ConfigSource::Path(path) => Config::load_with(path, overrides),
            ConfigSource::Runtime(dir) => dir.load(overrides),
            ConfigSource::Xds(xds) => xds.load(overrides),
        }
    }
}

impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigSource::Builtin => f.write_str("the built-in configuration"),
            ConfigSource::Path(path) => write!(f, "{}", path.display()),
            ConfigSource::Runtime(dir) => match dir.target() {
                Some(target) => write!(f, "the runtime directory {}", target.display()),
                None => write!(
                    f,
                    "the runtime directory {} (reading nothing)",
                    dir.root.display()
                ),
            },
            ConfigSource::Xds(xds) => {
                write!(f, "xDS from {} (node {})", xds.server_url, xds.node_id)
            }
        }
    }
}

/// A whole server configuration (see the [module documentation](self)).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the HTTP API listens, `host:port` (a name is resolved when the file is read);
    /// `None` leaves it to the command line's default.
    #[serde(default, deserialize_with = "listen_address")]
    pub http: Option<SocketAddr>,
    /// Where the Envoy RLS gRPC API listens, as `http`; `None` leaves it to the command line's
    /// default.
    #[serde(default, deserialize_with = "listen_address")]
    pub grpc: Option<SocketAddr>,
    /// Where the debug listener serves `/rlconfig` and `/stats` (envoyproxy/ratelimit's
    /// DEBUG_PORT), as `http`; `None`: no debug listener unless the command line names one.
    #[serde(default, deserialize_with = "listen_address")]
    pub debug: Option<SocketAddr>,
    /// The store's settings.
    #[serde(default)]
    pub store: StoreConfig,
    /// Limits on connections (read once at start-up; see `crate::connections`).
    #[serde(default)]
    pub connections: ConnectionLimits,
    /// The Envoy rules' statistics (read once at start-up; see [`stats`]).
    #[serde(default)]
    pub stats: StatsConfig,
    /// TLS on the listeners (read once at start-up; the files are followed; see [`tls`]).
    #[serde(default)]
    pub tls: TlsConfig,
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
    /// The pipeline's four limiters, each optional: a preset of `pipeline`.
    #[serde(default)]
    pub limiters: LimitersConfig,
    /// The pipeline's stages in order, each any limiter keyed by request fields (see
    /// [`pipeline`]); instead of `limiters`.
    #[serde(default)]
    pub pipeline: Vec<StageConfig>,
    /// What requests may carry in `attributes`, and which attributes are secrets.
    #[serde(default)]
    pub attributes: AttributesConfig,
    /// Named limits for `POST /v1/check`: name → algorithm.
    #[serde(default)]
    pub limits: BTreeMap<String, AlgorithmSpec>,
    /// How long a reservation of `POST /v1/reserve` can be settled (`POST /v1/settle`);
    /// after it, one never settled stands at its estimate. 1 s to 7 days; `None`: 1 h
    /// ([`Config::reservation_ttl`]).
    #[serde(default)]
    pub reservation_ttl: Option<SpecDuration>,
    /// Whether Envoy RLS answers carry dynamic metadata (the request's domain and descriptors,
    /// and the matched descriptors' `metadata`; see [`crate::descriptors`]), as
    /// envoyproxy/ratelimit's `RESPONSE_DYNAMIC_METADATA` setting; off by default, and off for
    /// an envoyproxy/ratelimit file loaded on its own.
    #[serde(default)]
    pub response_dynamic_metadata: bool,
    /// Envoy RLS domains, in envoyproxy/ratelimit's format (plus Floodgate's algorithms).
    #[serde(default)]
    pub domains: Vec<DomainConfig>,
    /// The Envoy rate limit service's settings (see [`rls`]).
    #[serde(default)]
    pub rls: RlsConfig,
    /// The Rate Limit Quota Service's settings (see [`rlqs`]).
    #[serde(default)]
    pub rlqs: RlqsConfig,
    /// The control plane the Envoy domains come from, over xDS, instead of `domains`
    /// ([`xds::XdsConfig`]; read at start-up).
    #[serde(default)]
    pub xds: Option<xds::XdsConfig>,
    /// The file it was read from, for placing errors found when it is built; not read from
    /// the file.
    #[serde(skip)]
    pub origin: Origin,
}

impl Config {
    /// Reads a configuration file, in either format (see the module's "Format detection"), or
    /// a configuration directory (see [`directory`]); its values are checked when it is built
    /// ([`Config::build`]). The same as [`Config::load_with`] with no overrides.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigFileError> {
        Config::load_with(path, &Overrides::default())
    }

    /// [`Config::load`] with what the command line turns on ([`Overrides`]) applied before the
    /// domains are merged.
    pub fn load_with(
        path: impl AsRef<Path>,
        overrides: &Overrides,
    ) -> Result<Config, ConfigFileError> {
        let path = path.as_ref();
        if path.is_dir() {
            return directory::load_dir(path, overrides);
        }
        let text = read_text(path)?;
        Config::parse(&text, Some(path), overrides)
    }

    /// [`Config::load_with`] on `path`, or, when there is none, [`Config::builtin`] with
    /// `overrides` applied.
    pub fn load_or_builtin(
        path: Option<&Path>,
        overrides: &Overrides,
    ) -> Result<Config, ConfigFileError> {
        match path {
            Some(path) => Config::load_with(path, overrides),
            None => {
                let mut config = Config::builtin();
                overrides.apply(&mut config, &|_| false);
                Ok(config)
            }
        }
    }

    /// Reads a configuration's text, in either format; its values are checked when it is built.
    pub fn from_yaml_str(text: &str) -> Result<Config, ConfigFileError> {
        Config::parse(text, None, &Overrides::default())
    }

    fn parse(
        text: &str,
        file: Option<&Path>,
        overrides: &Overrides,
    ) -> Result<Config, ConfigFileError> {
        let source = Source::read(text, file)?;
        let value = read_tree(text, &source)?;
        let base = Config::base(overrides);
        let mut config = if envoy::is_envoy_file(&value) {
            Config {
                domains: vec![envoy::read_file(text, &value, &source)?],
                ..base
            }
        } else {
            let mut config = Config::read_native(text, &source)?;
            if let Some(xds) = &config.xds {
                if !config.domains.is_empty() {
                    return Err(source.place(ConfigFileError::invalid(
                        "domains",
                        "the domains come from the xDS server `xds` names: remove them here, or `xds`",
                    )));
                }
                if let Some(tls) = &xds.tls {
                    if tls.cert_file.is_some() != tls.key_file.is_some() {
                        return Err(source.place(ConfigFileError::invalid(
                            "xds.tls",
                            "`cert_file` and `key_file` go together (mutual TLS)",
                        )));
                    }
                }
            }
            config.fill_absent(&value, true, base);
            config.store.check_written().map_err(|e| source.place(e))?;
            config
        };
        overrides.apply(&mut config, &|path| source.writes(path));
        if config.rls.merge_domains {
            directory::check_native_domains(&config, &source)?;
            let definitions = directory::native_definitions(&mut config, file);
            config.domains = directory::merge_domains(definitions, true)?;
        }
        config.origin = source.into_origin();
        Ok(config)
    }

    /// Reads a native file's text, read for positions as `source`: errors at the entry at
    /// fault, and each domain's descriptors marked with where they are written.
    fn read_native(text: &str, source: &Source) -> Result<Config, ConfigFileError> {
        let mut config: Config =
            serde_norway::from_str(text).map_err(|e| source.serde_error(&e))?;
        for (i, domain) in config.domains.iter_mut().enumerate() {
            source.mark(domain, &format!("domains[{i}]"));
        }
        Ok(config)
    }

    /// Gives each of the sections `plans` (with `default_plan`), `limiters`, `limits` and, when
    /// `domains` is true, `domains` that the file's top level `top` leaves out `builtin`'s
    /// ([`Config::base`]: see the module's "Sections left out").
    fn fill_absent(&mut self, top: &serde_norway::Value, domains: bool, builtin: Config) {
        let has = |key: &str| top.as_mapping().is_some_and(|m| m.contains_key(key));
        if !has("plans") {
            self.plans = builtin.plans;
            if !has("default_plan") {
                self.default_plan = builtin.default_plan;
            }
        }
        if !has("limiters") && !has("pipeline") {
            self.limiters = builtin.limiters;
        }
        if !has("limits") {
            self.limits = builtin.limits;
        }
        // With `xds`, the domains are the control plane's: none of the example's.
        if domains && !has("domains") && !has("xds") {
            self.domains = builtin.domains;
        }
    }

    /// How long a reservation can be settled: `reservation_ttl`, by default an hour (longer
    /// than any LLM response streams).
    pub fn reservation_ttl(&self) -> Duration {
        self.reservation_ttl
            .map_or(Duration::from_secs(3_600), |ttl| ttl.0)
    }

    /// What the sections a configuration leaves out are: [`Config::builtin`]'s, or, under
    /// envoyproxy/ratelimit's settings ([`Overrides::without_example`]), none (no plans,
    /// limiters, named limits or domains), so that the drop-in serves only what upstream
    /// serves.
    pub fn base(overrides: &Overrides) -> Config {
        if !overrides.without_example {
            return Config::builtin();
        }
        Config {
            plans: BTreeMap::new(),
            default_plan: None,
            limiters: LimitersConfig::default(),
            limits: BTreeMap::new(),
            domains: Vec::new(),
            ..Config::builtin()
        }
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
        let plans = EXAMPLE_PLANS
            .into_iter()
            .map(|(name, rate, burst)| {
                let spec = AlgorithmSpec::TokenBucket(TokenBucketSpec {
                    rate,
                    capacity: burst,
                });
                (name.to_string(), spec)
            })
            .collect();
        Config {
            http: None,
            grpc: None,
            debug: None,
            store: StoreConfig::default(),
            connections: ConnectionLimits::default(),
            stats: StatsConfig::default(),
            tls: TlsConfig::default(),
            plans,
            default_plan: Some("free".to_string()),
            endpoint_costs: BTreeMap::new(),
            users: BTreeMap::new(),
            pipeline: Vec::new(),
            attributes: AttributesConfig::default(),
            limiters: builtin_limiters(minute),
            limits: BTreeMap::from([(
                "login".to_string(),
                AlgorithmSpec::SlidingLog(SlidingLogSpec {
                    limit: 5,
                    window: minute,
                }),
            )]),
            response_dynamic_metadata: false,
            reservation_ttl: None,
            domains: vec![builtin_domain()],
            rls: RlsConfig::default(),
            rlqs: RlqsConfig::default(),
            xds: None,
            origin: Origin::default(),
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

    /// The Envoy RLS domains, compiled (errors at `domains[i]…`), with
    /// `response_dynamic_metadata` and `rls.quota_mode` as configured; `rls.quota_mode` is
    /// refused beside an `all_or_nothing` descriptor, which it would put in quota mode.
    pub fn rule_set(&self) -> Result<RuleSet, ConfigFileError> {
        let mut rules = envoy::compile_domains(&self.domains)?;
        rules.set_response_dynamic_metadata(self.response_dynamic_metadata);
        if self.rls.quota_mode {
            if let Some((domain, rule)) =
                rules.rules().into_iter().find(|(_, r)| r.all_or_nothing())
            {
                return Err(ConfigFileError::invalid(
                    "rls.quota_mode",
                    format!(
                        "every descriptor in quota mode (QUOTA_MODE) cannot go with an \
                         all-or-nothing descriptor ({domain}: {}): keep one of the two",
                        rule.full_key()
                    ),
                ));
            }
            rules.set_quota_mode(true);
        }
        Ok(rules)
    }

    /// `error`, found when this configuration was built or checked against a store, placed in
    /// the file it came from ([`Origin::place`]): for errors found outside [`Config::build`].
    pub fn place(&self, error: ConfigFileError) -> ConfigFileError {
        self.origin.place(error)
    }

    /// The stages written in `pipeline`, or those `limiters` stands for, in order; with the
    /// utilization stage's worker gauge and each stage's path in the file.
    pub(crate) fn stage_configs(&self) -> Vec<(String, StageConfig)> {
        if self.pipeline.is_empty() {
            return self.limiters.stages();
        }
        let stages = self.pipeline.iter().enumerate();
        stages
            .map(|(i, s)| (format!("pipeline[{i}]"), s.clone()))
            .collect()
    }
}

/// A listen address as the command line reads one ([`crate::cli::listen_address`]).
fn listen_address<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let text: Option<String> = Option::deserialize(d)?;
    text.map(|t| crate::cli::listen_address(&t).map_err(de::Error::custom))
        .transpose()
}

/// The YAML tree of a configuration file's `text`, read for positions as `source`; a text that
/// holds no settings (nothing, only comments, `~` or `{}`) is refused as
/// [`ConfigFileError::NoSettings`], naming the file.
pub(crate) fn read_tree(
    text: &str,
    source: &Source,
) -> Result<serde_norway::Value, ConfigFileError> {
    let value: serde_norway::Value =
        serde_norway::from_str(text).map_err(|e| source.serde_error(&e))?;
    let empty = match &value {
        serde_norway::Value::Null => true,
        serde_norway::Value::Mapping(m) => m.is_empty(),
        _ => false,
    };
    if empty {
        return Err(ConfigFileError::NoSettings {
            file: source.file().map(Path::to_path_buf),
        });
    }
    Ok(value)
}

/// A configuration file's text.
pub(crate) fn read_text(path: &Path) -> Result<String, ConfigFileError> {
    std::fs::read_to_string(path).map_err(|e| ConfigFileError::Io {
        file: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// The built-in configuration's limiters: Stripe's four (see [`Config::builtin`]).
fn builtin_limiters(minute: SpecDuration) -> LimitersConfig {
    LimitersConfig {
        request_rate: Some(StageConfig::new(
            "request_rate",
            StageKind::Limit(LimitStage::default()),
        )),
        concurrency: Some(StageConfig::new(
            "concurrency",
            StageKind::Concurrency(ConcurrencyStage {
                key: None,
                capacity: 20,
                lease_ttl: minute,
                on_store_error: OnStoreError::FailOpen,
                all_or_nothing: false,
            }),
        )),
        fleet: Some(StageConfig::new(
            "fleet",
            StageKind::Fleet(FleetStage {
                capacity: 1000,
                reserved_for_critical: 0.2,
                lease_ttl: minute,
                on_store_error: OnStoreError::FailOpen,
                all_or_nothing: false,
            }),
        )),
        utilization: Some(StageConfig::new(
            "utilization",
            StageKind::Utilization(UtilizationStage::new(64)),
        )),
    }
}

/// The built-in configuration's Envoy domain, `example` (see [`Config::builtin`]).
fn builtin_domain() -> DomainConfig {
    let descriptor = |key: &str, rate_limit: RateLimitConfig| DescriptorConfig {
        key: key.to_string(),
        rate_limit: Some(rate_limit),
        ..DescriptorConfig::default()
    };
    DomainConfig {
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
                    algorithm: Some(AlgorithmSpec::TokenBucket(TokenBucketSpec {
                        rate: 100.0,
                        capacity: 200,
                    })),
                    ..RateLimitConfig::default()
                },
            ),
        ],
    }
}

#[cfg(test)]
mod tests;
