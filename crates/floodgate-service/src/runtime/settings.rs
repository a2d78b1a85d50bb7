//! What `floodgate serve` starts with. Each setting comes from the first of these that gives
//! it:
//!
//! 1. the command line's flag;
//! 2. the Floodgate config file (a setting it writes; an envoyproxy/ratelimit domain file
//!    writes none of these);
//! 3. Floodgate's own variable, `FLOODGATE_*`;
//! 4. envoyproxy/ratelimit's variable, when set (and for the settings without one of their
//!    own, upstream's default, when upstream's settings are present:
//!    [`crate::environment::upstream::Upstream`]);
//! 5. Floodgate's default.
//!
//! | setting | flag | config | `FLOODGATE_*` | envoyproxy/ratelimit | default |
//! |---|---|---|---|---|---|
//! | configuration | `--config` | — | `FLOODGATE_CONFIG` | `RUNTIME_ROOT`, `RUNTIME_SUBDIRECTORY`, `RUNTIME_APPDIRECTORY`, `RUNTIME_IGNOREDOTFILES`, `RUNTIME_WATCH_ROOT` | the built-in configuration |
//! | watching it | `--watch`, `--no-watch` | — | `FLOODGATE_WATCH` | on for a runtime directory | on for a directory, off for a file |
//! | HTTP address | `--http` | `http` | `FLOODGATE_HTTP` | `HOST`, `PORT` | `127.0.0.1:8080` (`0.0.0.0:8080` with upstream's settings) |
//! | gRPC address | `--grpc` | `grpc` | `FLOODGATE_GRPC` | `GRPC_UDS`, else `GRPC_HOST`, `GRPC_PORT` | `127.0.0.1:8081` (`0.0.0.0:8081`) |
//! | debug address | `--debug` | `debug` | `FLOODGATE_DEBUG` | `DEBUG_HOST`, `DEBUG_PORT` | none (`0.0.0.0:6070`) |
//! | store | `--store` | `store.url` | `FLOODGATE_STORE` | `REDIS_*` | `memory` (upstream's Redis) |
//! | each store call's bound | — | `store.timeout` | `FLOODGATE_STORE_TIMEOUT` | — | 50 ms |
//! | setting a connection up | — | `store.connect_timeout` | — | `REDIS_TIMEOUT` | 2 s (10 s) |
//! | a `READONLY` answer remakes the connection | — | `store.reconnect_on_readonly` | — | `REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR` | yes |
//! | Redis TLS CAs | — | `store.tls_ca_file` | — | `REDIS_TLS_CACERT` | the system's roots |
//! | Redis TLS client certificate | — | `store.tls_client_cert_file`, `store.tls_client_key_file` | — | `REDIS_TLS_CLIENT_CERT`, `REDIS_TLS_CLIENT_KEY` | none |
//! | Redis TLS name check | — | `store.tls_skip_hostname_verification` | — | `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION` | checked |
//! | store start-up | — | `store.startup_timeout` | — | `REDIS_STARTUP_MAX_ELAPSED_TIME` | 5 s (for ever) |
//! | Envoy windows' key layout | — | `store.layout` | — | (with upstream's settings: `envoyproxy`) | `floodgate` |
//! | key prefix, TTL jitter | — | `store.key_prefix`, `store.expiration_jitter` | — | `CACHE_KEY_PREFIX`, `EXPIRATION_JITTER_MAX_SECONDS` | none, 300 s |
//! | refused hits not counted | — | `store.stop_increment_when_over_limit` | — | `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` | off |
//! | over-limit cache | — | `store.over_limit_cache_bytes` | — | `LOCAL_CACHE_SIZE_IN_BYTES` | off |
//! | per-second Redis | — | `store.per_second_url` | — | `REDIS_PERSECOND`, `REDIS_PERSECOND_*` | none |
//! | merging domains | `--merge-domains` | `rls.merge_domains` | `FLOODGATE_MERGE_DOMAINS` | `MERGE_DOMAIN_CONFIG` | off |
//! | rate limit headers | `--response-headers` | `rls.response_headers` | `FLOODGATE_RESPONSE_HEADERS` | `LIMIT_RESPONSE_HEADERS_ENABLED`, `LIMIT_*_HEADER` | off |
//! | a store failure's answer | — | `rls.on_store_error` | — | (upstream's behaviour: `unavailable`) | `ok` |
//! | global shadow mode | — | `rls.shadow_mode` | — | `SHADOW_MODE` | off |
//! | every descriptor in quota mode | — | `rls.quota_mode` | — | `QUOTA_MODE` | off |
//! | ready only with a domain | — | `rls.require_domains` | — | `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED` | off |
//! | dynamic metadata | — | `response_dynamic_metadata` | — | `RESPONSE_DYNAMIC_METADATA` | off |
//! | `near_limit` statistic | — | `stats.near_limit_ratio` | — | `NEAR_LIMIT_RATIO` | 0.8 |
//! | statsd | — | `stats.statsd` | — | `USE_STATSD`, `DISABLE_STATS`, `STATSD_HOST`, `STATSD_PORT`, `STATSD_PROTOCOL`, `STATS_FLUSH_INTERVAL`, `EXTRA_TAGS` | off (on, TCP to `localhost:8125`) |
//! | DogStatsD | — | `stats.dogstatsd` | — | `USE_DOG_STATSD`, `USE_DOG_STATSD_MOGRIFIERS`, `DOG_STATSD_MOGRIFIER_*`, `DISABLE_STATS`, `STATSD_HOST`, `STATSD_PORT`, `STATS_FLUSH_INTERVAL`, `EXTRA_TAGS` (and the client's `DD_ENTITY_ID`, `DD_ENV`, `DD_SERVICE`, `DD_VERSION`, for any `stats.dogstatsd`) | off |
//! | Prometheus listener | — | `stats.prometheus` | — | `USE_PROMETHEUS`, `PROMETHEUS_ADDR`, `PROMETHEUS_PATH`, `PROMETHEUS_MAPPER_YAML`, `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS` | off |
//! | TLS on the gRPC listener | — | `tls.grpc` | — | `GRPC_SERVER_USE_TLS`, `GRPC_SERVER_TLS_CERT`, `GRPC_SERVER_TLS_KEY`, `GRPC_CLIENT_TLS_CACERT`, `GRPC_CLIENT_TLS_SAN` | off |
//! | TLS on the HTTP listener | — | `tls.http` | — | — | off |
//! | gRPC connection age | — | `connections.grpc_max_age`, `…_grace` | — | `GRPC_MAX_CONNECTION_AGE`, `…_GRACE` | none (24 h, 1 h) |
//! | log level | — | — | `RUST_LOG` | `LOG_LEVEL` | `info` (`warn`) |
//! | log format | — | — | — | `LOG_FORMAT` | text |
//!
//! The two flags that turn a setting on (`--merge-domains`, `--response-headers`) never turn it
//! off. Values given in the environment are read in upstream's formats
//! ([`crate::environment`]); a bad one stops start-up naming the variable.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::config::rls::ResponseHeadersConfig;
use crate::config::{
    Config, ConfigSource, Defaults, Overrides, RuntimeDir, StoreConfig, XdsSource,
};
use crate::environment::upstream::{RedisKind, Upstream, UpstreamError};
use crate::environment::{EnvError, Environment};

use super::ServeArgs;

/// Why the settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// An environment variable cannot be read or honoured.
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// An address from the environment is not one.
    #[error("environment variable {variable}: {message}")]
    Address {
        /// The variable (or variables, `HOST`/`PORT`).
        variable: &'static str,
        /// Why.
        message: String,
    },
}

impl From<EnvError> for SettingsError {
    fn from(e: EnvError) -> SettingsError {
        SettingsError::Upstream(UpstreamError::Value(e))
    }
}

/// Where the gRPC API listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrpcAddress {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A unix socket's path (`GRPC_UDS`).
    Unix(PathBuf),
}

/// The addresses `serve` binds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Addresses {
    /// The HTTP API's.
    pub http: SocketAddr,
    /// The gRPC API's.
    pub grpc: GrpcAddress,
    /// The debug listener's, if it is on.
    pub debug: Option<SocketAddr>,
    /// The Prometheus listener's (`stats.prometheus`), if it is on.
    pub metrics: Option<SocketAddr>,
}

/// The command line's flags that choose and read the configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigFlags {
    /// `--config FILE|DIR`.
    pub config: Option<PathBuf>,
    /// `--watch`.
    pub watch: bool,
    /// `--no-watch`.
    pub no_watch: bool,
    /// `--merge-domains`.
    pub merge_domains: bool,
    /// `--response-headers`.
    pub response_headers: bool,
}

/// What `serve` starts with, before and after its config is read (see the [module
/// documentation](self)).
#[derive(Debug)]
pub struct Startup {
    /// Where the configuration is read, at start and on reloads.
    pub source: ConfigSource,
    /// Whether changes to it are watched.
    pub watch: bool,
    /// What applies over every configuration read.
    pub overrides: Overrides,
    /// envoyproxy/ratelimit's settings, when present.
    pub upstream: Option<Upstream>,
    /// `FLOODGATE_STORE_TIMEOUT`, when set: `store.timeout` where the file leaves it.
    store_timeout: Option<std::time::Duration>,
    env: Environment,
}

impl Startup {
    /// The configuration served from `loaded`, as its file gave it: the start-up settings
    /// applied over it, each where the file leaves it, in one precedence: a command-line flag,
    /// then the file, then `FLOODGATE_*`, then envoyproxy/ratelimit's variables, then the
    /// defaults (see the [module documentation](self) for each setting): the store's
    /// ([`Startup::apply_store`], `store_flag` being `--store`), the statistics'
    /// ([`Startup::apply_stats`]) and the listeners' TLS ([`Startup::apply_tls`]).
    pub fn complete(&self, store_flag: Option<&str>, mut loaded: Config) -> Config {
        self.apply_store(store_flag, &mut loaded);
        self.apply_stats(&mut loaded);
        self.apply_tls(&mut loaded);
        loaded
    }

    /// `FLOODGATE_LEASE_SECRET`, when set and not empty: the secret lease tokens are signed
    /// with, shared by the nodes behind one load balancer (read as UTF-8, lossily).
    pub fn lease_secret(&self) -> Option<Vec<u8>> {
        self.env
            .string("FLOODGATE_LEASE_SECRET")
            .filter(|s| !s.is_empty())
            .map(|s| s.as_bytes().to_vec())
    }

    /// Reads the settings that come before the configuration (see the [module
    /// documentation](self)); `as_ratelimit`: the binary runs under upstream's entry point name.
    pub fn read(
        args: &ServeArgs,
        env: Environment,
        as_ratelimit: bool,
    ) -> Result<Startup, SettingsError> {
        Startup::read_flags(
            &ConfigFlags {
                config: args.config.clone(),
                watch: args.watch,
                no_watch: args.no_watch,
                merge_domains: args.merge_domains,
                response_headers: args.response_headers,
            },
            env,
            as_ratelimit,
        )
    }

    /// [`Startup::read`] from the flags that choose and read the configuration alone (what
    /// `check-config` shares with `serve`).
    pub fn read_flags(
        args: &ConfigFlags,
        env: Environment,
        as_ratelimit: bool,
    ) -> Result<Startup, SettingsError> {
        let upstream = Upstream::read(&env, as_ratelimit)?;
        let floodgate_config = env
            .string("FLOODGATE_CONFIG")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from);
        let source = match (args.config.clone(), floodgate_config, &upstream) {
            (Some(path), _, _) | (None, Some(path), _) => ConfigSource::Path(path),
            (None, None, Some(Upstream { xds: Some(xds), .. })) => {
                ConfigSource::Xds(XdsSource::new(&xds.server_url, &xds.node_id))
            }
            (None, None, Some(up)) => ConfigSource::Runtime(RuntimeDir {
                root: up.runtime.root.clone(),
                subdirectory: up.runtime.subdirectory.clone(),
                appdirectory: up.runtime.appdirectory.clone(),
                ignore_dotfiles: up.runtime.ignore_dotfiles,
                watch_root: up.runtime.watch_root,
            }),
            (None, None, None) => ConfigSource::Builtin,
        };
        let watch = match (args.watch, args.no_watch, env.bool("FLOODGATE_WATCH")?) {
            (true, _, _) => true,
            (_, true, _) => false,
            (_, _, Some(watch)) => watch,
            _ => match &source {
                ConfigSource::Builtin | ConfigSource::Xds(_) => false,
                ConfigSource::Runtime(_) => true,
                ConfigSource::Path(path) => path.is_dir(),
            },
        };
        let overrides = Overrides {
            merge_domains: args.merge_domains,
            response_headers: args.response_headers,
            defaults: defaults(&env, upstream.as_ref())?,
            without_example: upstream.is_some(),
        };
        let store_timeout = env.duration("FLOODGATE_STORE_TIMEOUT")?;
        if store_timeout.is_some_and(|t| t.is_zero()) {
            return Err(SettingsError::Upstream(UpstreamError::Value(EnvError {
                variable: "FLOODGATE_STORE_TIMEOUT".into(),
                shown: "`0`".into(),
                expected: "a duration above 0".into(),
            })));
        }
        Ok(Startup {
            source,
            watch,
            overrides,
            upstream,
            store_timeout,
            env,
        })
    }

    /// The environment the settings were read from.
    pub fn env(&self) -> &Environment {
        &self.env
    }

    /// Fills the store settings `config` leaves unwritten from the environment, and puts the
    /// command line's `--store` over them. A setting from upstream's variables is filled in
    /// only where the store the URL names takes it; a URL from outside the file (`--store`,
    /// `FLOODGATE_STORE`, upstream's) drops, with a warning, the settings the file wrote for its
    /// own store (the one its `url` names, memory without one) that the store named does not
    /// take.
    pub fn apply_store(&self, store_flag: Option<&str>, config: &mut Config) {
        if let Some(url) = self.store_url_from_outside(store_flag, config) {
            let dropped = config.store.replace_url(url);
            if !dropped.is_empty() {
                tracing::warn!(
                    store = %config.store.url.as_deref().map(floodgate::store::redacted).unwrap_or_default(),
                    dropped = %dropped.join(", "),
                    "the store named outside the file does not take the file's settings written for the file's own store: they are not used"
                );
            }
        }
        let writes = config.origin.clone();
        if let Some(timeout) = self.store_timeout {
            fill(&writes, &mut config.store, "timeout", duration(timeout));
        }
        let Some(up) = &self.upstream else {
            return;
        };
        if !writes.writes("connections.grpc_max_age") {
            config.connections.grpc_max_age = Some(floodgate::duration::SpecDuration(
                up.listeners.max_connection_age,
            ));
        }
        if !writes.writes("connections.grpc_max_age_grace") {
            config.connections.grpc_max_age_grace =
                floodgate::duration::SpecDuration(up.listeners.max_connection_age_grace);
        }
        fill_store_from_upstream(up, &writes, &mut config.store);
    }

    /// The store URL the command line (`--store`) or, where the file writes none,
    /// `FLOODGATE_STORE` or upstream's variables give.
    fn store_url_from_outside(&self, store_flag: Option<&str>, config: &Config) -> Option<String> {
        match store_flag {
            Some(url) => Some(url.to_string()),
            None if config.origin.writes("store.url") => None,
            None => match self.env.string("FLOODGATE_STORE").filter(|s| !s.is_empty()) {
                Some(url) => Some(url.to_string()),
                None => self.upstream.as_ref().map(|up| match &up.memcache {
                    Some(memcache) => match &memcache.srv {
                        Some(record) => format!("memcache+srv://{record}"),
                        None => format!("memcache://{}", memcache.servers.join(",")),
                    },
                    None => store_url(&up.redis),
                }),
            },
        }
    }

    /// Fills the `stats` settings `config` leaves unwritten from upstream's variables
    /// (`NEAR_LIMIT_RATIO`, `USE_STATSD` and the rest), when upstream's settings are present,
    /// and DogStatsD's client tags (`DD_ENV` and the rest) from the environment.
    pub fn apply_stats(&self, config: &mut Config) {
        self.apply_upstream_stats(config);
        if let Some(dog) = &mut config.stats.dogstatsd {
            dog.datadog_tags = crate::environment::dogstatsd::datadog_tags(&self.env);
        }
    }

    fn apply_upstream_stats(&self, config: &mut Config) {
        let Some(up) = &self.upstream else {
            return;
        };
        let writes = |path: &str| config.origin.writes(path);
        if !writes("stats.near_limit_ratio") {
            config.stats.near_limit_ratio = up.behaviour.near_limit_ratio;
        }
        let stats = &up.stats;
        if !writes("stats.statsd") {
            config.stats.statsd = stats.statsd.then(|| crate::config::StatsdConfig {
                address: stats.statsd_address.clone(),
                protocol: if stats.statsd_udp {
                    crate::config::StatsdProtocol::Udp
                } else {
                    crate::config::StatsdProtocol::Tcp
                },
                flush_interval: Some(floodgate::duration::SpecDuration(stats.flush_interval)),
                extra_tags: stats.extra_tags.iter().cloned().collect(),
            });
        }
        if !writes("stats.dogstatsd") {
            config.stats.dogstatsd =
                stats
                    .dogstatsd
                    .as_ref()
                    .map(|mogrifiers| crate::config::DogStatsdConfig {
                        address: stats.statsd_address.clone(),
                        flush_interval: Some(floodgate::duration::SpecDuration(
                            stats.flush_interval,
                        )),
                        extra_tags: stats.extra_tags.iter().cloned().collect(),
                        mogrifiers: mogrifiers
                            .iter()
                            .map(|m| crate::config::MogrifierConfig {
                                pattern: m.pattern.clone(),
                                name: m.name.clone(),
                                tags: m.tags.clone(),
                            })
                            .collect(),
                        datadog_tags: Vec::new(),
                    });
        }
        if !writes("stats.prometheus") {
            config.stats.prometheus =
                stats
                    .prometheus
                    .as_ref()
                    .map(|(address, path)| crate::config::PrometheusConfig {
                        address: address.clone(),
                        path: path.clone(),
                        mapping_file: stats.mapping_file.clone(),
                        response_time_as_milliseconds: stats.response_time_as_milliseconds,
                    });
        }
    }

    /// Fills `tls.grpc` from upstream's `GRPC_SERVER_USE_TLS` and the rest, when the
    /// configuration does not write it.
    pub fn apply_tls(&self, config: &mut Config) {
        let Some(grpc) = self.upstream.as_ref().and_then(|up| up.grpc_tls.as_ref()) else {
            return;
        };
        if !config.origin.writes("tls.grpc") {
            config.tls.grpc = Some(crate::config::ListenerTls {
                cert_file: grpc.cert.clone(),
                key_file: grpc.key.clone(),
                client_ca_file: grpc.client_ca.clone(),
                client_san: grpc.client_san.clone(),
            });
        }
    }

    /// The addresses to bind, given the configuration read (see the [module
    /// documentation](self)).
    pub fn addresses(&self, args: &ServeArgs, config: &Config) -> Result<Addresses, SettingsError> {
        let env = &self.env;
        let present = self.upstream.is_some();
        let [up_http, up_grpc, up_debug] =
            crate::environment::upstream::listener_addresses(env, present)?;
        let address = |variable: &'static str, text: &str| {
            crate::cli::listen_address(text)
                .map_err(|message| SettingsError::Address { variable, message })
        };
        let from_env = |name: &'static str,
                        upstream: Option<String>,
                        upstream_vars: &'static str|
         -> Result<Option<SocketAddr>, SettingsError> {
            if let Some(text) = env.string(name).filter(|s| !s.is_empty()) {
                return address(name, text).map(Some);
            }
            upstream
                .map(|text| address(upstream_vars, &text))
                .transpose()
        };
        let http = match args.http.or(config.http) {
            Some(addr) => addr,
            None => from_env("FLOODGATE_HTTP", up_http, "HOST/PORT")?
                .unwrap_or_else(|| fallback(super::DEFAULT_HTTP)),
        };
        let grpc = match args.grpc.or(config.grpc) {
            Some(addr) => GrpcAddress::Tcp(addr),
            None => {
                let uds = self
                    .upstream
                    .as_ref()
                    .and_then(|up| up.listeners.grpc_uds.clone());
                match (env.string("FLOODGATE_GRPC").filter(|s| !s.is_empty()), uds) {
                    (Some(text), _) => GrpcAddress::Tcp(address("FLOODGATE_GRPC", text)?),
                    (None, Some(path)) => GrpcAddress::Unix(path),
                    (None, None) => GrpcAddress::Tcp(
                        from_env("FLOODGATE_GRPC", up_grpc, "GRPC_HOST/GRPC_PORT")?
                            .unwrap_or_else(|| fallback(super::DEFAULT_GRPC)),
                    ),
                }
            }
        };
        let debug = match args.debug.or(config.debug) {
            Some(addr) => Some(addr),
            None => from_env("FLOODGATE_DEBUG", up_debug, "DEBUG_HOST/DEBUG_PORT")?,
        };
        let metrics = match &config.stats.prometheus {
            // Go's `:9090` listens on every address.
            Some(p) => Some(match p.address.strip_prefix(':') {
                Some(port) => address(
                    "stats.prometheus.address (PROMETHEUS_ADDR)",
                    &format!("0.0.0.0:{port}"),
                )?,
                None => address("stats.prometheus.address (PROMETHEUS_ADDR)", &p.address)?,
            }),
            None => None,
        };
        Ok(Addresses {
            http,
            grpc,
            debug,
            metrics,
        })
    }

    /// What start-up should warn about: each variable set that Floodgate does not support.
    pub fn warnings(&self) -> Vec<String> {
        let Some(up) = &self.upstream else {
            return Vec::new();
        };
        up.unsupported
            .iter()
            .map(|(name, why)| format!("{name} is set, but Floodgate does not support it: {why}"))
            .collect()
    }
}

/// How the process logs: `RUST_LOG`'s filter when set, else envoyproxy/ratelimit's
/// `LOG_LEVEL` (`trace`, `debug`, `info`, `warn`/`warning`, `error`, and `fatal`/`panic`,
/// which log errors), else `warn` with upstream's settings present (upstream's default) and
/// `info` without; JSON lines when `LOG_FORMAT` is `json` (any case).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Logging {
    /// The filter, in `RUST_LOG`'s syntax.
    pub filter: String,
    /// One JSON object a line.
    pub json: bool,
}

/// The libraries kept at warn when only a level is given (`LOG_LEVEL=debug`): their debug
/// lines are about frames and records, not decisions.
const QUIET_AT_WARN: &str = "h2=warn,hyper=warn,hyper_util=warn,tonic=warn,tower=warn,\
                             axum=warn,rustls=warn,tokio_rustls=warn,mio=warn,notify=warn,\
                             redis=warn,reqwest=warn";

impl Logging {
    /// Reads `env`; `present`: upstream's settings are.
    pub fn read(env: &Environment, present: bool) -> Result<Logging, SettingsError> {
        let filter = match (env.string("RUST_LOG"), env.string("LOG_LEVEL")) {
            (Some(filter), _) if !filter.is_empty() => filter.to_string(),
            (_, Some(level)) => match level.to_ascii_lowercase().as_str() {
                level @ ("trace" | "debug" | "info" | "warn" | "error") => level.to_string(),
                "warning" => "warn".into(),
                "fatal" | "panic" => "error".into(),
                _ => {
                    return Err(SettingsError::Upstream(UpstreamError::Value(EnvError {
                        variable: "LOG_LEVEL".into(),
                        shown: format!("`{level}`"),
                        expected: "a level: trace, debug, info, warn, error".into(),
                    })))
                }
            },
            _ if present => "warn".into(),
            _ => "info".into(),
        };
        // A level alone is for Floodgate's lines (its decisions at debug): the libraries
        // under it (HTTP/2 framing, TLS records) stay at warn unless RUST_LOG names them.
        let filter = match filter.as_str() {
            "info" | "debug" | "trace" if env.string("RUST_LOG").is_none_or(str::is_empty) => {
                format!("{filter},{QUIET_AT_WARN}")
            }
            _ => filter,
        };
        let json = env
            .string("LOG_FORMAT")
            .is_some_and(|f| f.eq_ignore_ascii_case("json"));
        Ok(Logging { filter, json })
    }
}

/// `FLOODGATE_STORE` checked: `Err` names the variable and says what a store URL is, for every
/// command to refuse alike (exit status 2, as a bad argument) before doing anything.
pub fn store_from_env(env: &crate::environment::Environment) -> Result<(), String> {
    let Some(url) = env.string("FLOODGATE_STORE").filter(|s| !s.is_empty()) else {
        return Ok(());
    };
    match StoreConfig::at(url).store_url() {
        Ok(_) => Ok(()),
        Err(crate::config::ConfigFileError::Invalid { message, .. }) => {
            Err(format!("environment variable FLOODGATE_STORE: {message}"))
        }
        Err(other) => Err(format!("environment variable FLOODGATE_STORE: {other}")),
    }
}

fn fallback(text: &str) -> SocketAddr {
    text.parse()
        .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)))
}

/// The environment's values for the settings a configuration file may leave unwritten:
/// `FLOODGATE_*` first, then upstream's.
fn defaults(env: &Environment, upstream: Option<&Upstream>) -> Result<Defaults, SettingsError> {
    let mut defaults = Defaults::default();
    if let Some(up) = upstream {
        let b = &up.behaviour;
        defaults.merge_domains = Some(b.merge_domains);
        defaults.response_headers = Some(ResponseHeadersConfig {
            enabled: b.response_headers,
            limit: b.header_names[0].clone(),
            remaining: b.header_names[1].clone(),
            reset: b.header_names[2].clone(),
        });
        // Upstream answers a store failure with an error, for Envoy's own failure mode.
        defaults.on_store_error = Some(crate::rls::StoreFailureAnswer::Unavailable);
        defaults.shadow_mode = Some(b.shadow_mode);
        defaults.quota_mode = Some(b.quota_mode);
        defaults.require_domains = Some(b.healthy_with_a_domain);
        defaults.response_dynamic_metadata = Some(b.response_dynamic_metadata);
    }
    if let Some(merge) = env.bool("FLOODGATE_MERGE_DOMAINS")? {
        defaults.merge_domains = Some(merge);
    }
    if let Some(enabled) = env.bool("FLOODGATE_RESPONSE_HEADERS")? {
        let mut headers = defaults.response_headers.take().unwrap_or_default();
        headers.enabled = enabled;
        defaults.response_headers = Some(headers);
    }
    Ok(defaults)
}

/// The store URL upstream's Redis settings name: `redis://` (`rediss://` with TLS) for one
/// server over TCP, `unix://` for a socket, `redis-cluster://` (`rediss-cluster://`) for a
/// cluster's seeds, `redis-sentinel://` (`rediss-sentinel://`) for a master behind sentinels;
/// `REDIS_AUTH` as the URL's user information (or the socket URL's `user` and `pass`).
pub fn store_url(redis: &crate::environment::upstream::Redis) -> String {
    let auth = redis
        .auth
        .as_deref()
        .map(|auth| match auth.split_once(':') {
            Some((user, pass)) => format!("{}:{}@", encode(user), encode(pass)),
            None => format!(":{}@", encode(auth)),
        });
    let tls = if redis.tls { "s" } else { "" };
    match redis.kind {
        RedisKind::Single if redis.unix => {
            let mut url = format!("unix://{}", redis.url);
            if let Some(auth) = redis.auth.as_deref() {
                let (user, pass) = auth.split_once(':').unwrap_or(("", auth));
                url.push_str("?pass=");
                url.push_str(&encode(pass));
                if !user.is_empty() {
                    url.push_str("&user=");
                    url.push_str(&encode(user));
                }
            }
            url
        }
        RedisKind::Single => match redis.url.split_once("://") {
            // A URL already: REDIS_AUTH, when set, replaces its credentials (as upstream's
            // driver does).
            Some((scheme, rest)) => {
                let scheme = if redis.tls && scheme == "redis" {
                    "rediss"
                } else {
                    scheme
                };
                let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
                match (&auth, redis.url.rsplit_once('@')) {
                    (Some(auth), _) => format!("{scheme}://{auth}{rest}"),
                    (None, Some((with_scheme, host))) => {
                        let credentials = with_scheme.split_once("://").map_or("", |(_, c)| c);
                        format!("{scheme}://{credentials}@{host}")
                    }
                    (None, None) => format!("{scheme}://{rest}"),
                }
            }
            None => format!("redis{tls}://{}{}", auth.unwrap_or_default(), redis.url),
        },
        RedisKind::Cluster => {
            format!(
                "redis{tls}-cluster://{}{}",
                auth.unwrap_or_default(),
                redis.url
            )
        }
        RedisKind::Sentinel => {
            let (master, sentinels) = redis.url.split_once(',').unwrap_or((&redis.url, ""));
            let mut url = format!(
                "redis{tls}-sentinel://{}{sentinels}/{}",
                auth.unwrap_or_default(),
                encode(master)
            );
            if let Some(sentinel_auth) = redis.sentinel_auth.as_deref() {
                let (user, pass) = sentinel_auth.split_once(':').unwrap_or(("", sentinel_auth));
                url.push_str("?sentinel_pass=");
                url.push_str(&encode(pass));
                if !user.is_empty() {
                    url.push_str("&sentinel_user=");
                    url.push_str(&encode(user));
                }
            }
            url
        }
    }
}

/// Percent-encodes what a URL's user information or query cannot hold as is.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests;

/// Writes `field` as `value` in `store` where the file leaves it out and the store takes it:
/// a setting from the environment.
fn fill(
    writes: &crate::config::Origin,
    store: &mut StoreConfig,
    field: &str,
    value: serde_norway::Value,
) {
    if !writes.writes(&format!("store.{field}")) && store.takes(field) {
        store.set(field, value);
    }
}

/// `d` as a store field's value.
fn duration(d: std::time::Duration) -> serde_norway::Value {
    StoreConfig::duration(d).into()
}

/// Fills the store settings of upstream's variables (`up`) that the file (`writes`) leaves
/// out, where the store takes them.
fn fill_store_from_upstream(
    up: &Upstream,
    writes: &crate::config::Origin,
    store: &mut StoreConfig,
) {
    // Upstream's pods and this node count in the same keys during a migration, unless the
    // file says otherwise.
    let envoyproxy = match store.written("layout") {
        Some(layout) => layout.as_str() == Some("envoyproxy"),
        None => store.takes("layout"),
    };
    let mut fill = |field: &str, value: serde_norway::Value| fill(writes, store, field, value);
    let tls = match &up.memcache {
        Some(memcache) => {
            fill("max_idle_connections", memcache.max_idle.into());
            fill("tls", memcache.tls.into());
            if let Some(every) = memcache.srv_refresh {
                fill("srv_refresh", duration(every));
            }
            &memcache.tls_files
        }
        None => &up.redis_tls,
    };
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned().into();
    if let Some(ca) = &tls.ca_file {
        fill("tls_ca_file", path(ca));
    }
    if !writes.writes("store.tls_client_cert_file") && !writes.writes("store.tls_client_key_file") {
        if let (Some(cert), Some(key)) = (&tls.client_cert, &tls.client_key) {
            fill("tls_client_cert_file", path(cert));
            fill("tls_client_key_file", path(key));
        }
    }
    fill(
        "tls_skip_hostname_verification",
        tls.skip_hostname_verification.into(),
    );
    let startup = up.startup;
    fill(
        "startup_timeout",
        duration(startup.max_elapsed.unwrap_or(std::time::Duration::ZERO)),
    );
    fill("startup_retry_first", duration(startup.initial_interval));
    fill("startup_retry_max", duration(startup.max_interval));
    fill("connect_timeout", duration(up.redis.timeout));
    if let Some(close) = up.close_connection_on_readonly {
        fill("reconnect_on_readonly", close.into());
    }
    if !envoyproxy {
        return;
    }
    fill("layout", "envoyproxy".into());
    let b = &up.behaviour;
    if !b.cache_key_prefix.is_empty() {
        fill("key_prefix", b.cache_key_prefix.clone().into());
    }
    fill(
        "expiration_jitter",
        duration(std::time::Duration::from_secs(
            b.expiration_jitter_max_seconds,
        )),
    );
    fill(
        "stop_increment_when_over_limit",
        b.stop_increment_when_over_limit.into(),
    );
    fill("over_limit_cache_bytes", b.local_cache_bytes.into());
    // Upstream's memcache backend has no per-second store.
    if let Some(per_second) = up.per_second.as_ref().filter(|_| up.memcache.is_none()) {
        fill("per_second_url", store_url(per_second).into());
    }
}
