//! envoyproxy/ratelimit's settings, read from its environment variables with its names,
//! defaults and formats, so that its deployments run Floodgate unchanged.
//!
//! [`Upstream::read`] gives `None` unless upstream's settings are **present**: the binary runs
//! under upstream's name (`ratelimit`), or one of upstream's variables is set other than the
//! generic `HOST`, `PORT`, `LOG_LEVEL` and `LOG_FORMAT` (which many platforms set for their own
//! reasons; they are still honoured when set, see [`Listeners`]) and the trace settings
//! `TRACING_*` and `OTEL_*` (read by any `floodgate serve`, see [`super::traces`]). Present, every setting takes
//! upstream's default when its variable is unset: the listeners `0.0.0.0:8080` (HTTP),
//! `0.0.0.0:8081` (gRPC) and `0.0.0.0:6070` (debug), the runtime directory
//! `/srv/runtime_data/current`, a Redis at `/var/run/nutcracker/ratelimit.sock`, statsd on, and
//! so on. [`VARIABLES`] lists every variable with what Floodgate does with it;
//! docs/envoyproxy-ratelimit.md has the same table for people.

use std::path::PathBuf;
use std::time::Duration;

pub use super::variables::{Support, Variable, VARIABLES};
use super::xds::Xds;
use super::{EnvError, Environment};

mod stores;
use stores::read_redis;
pub use stores::{Memcache, Redis, RedisKind, RedisTls};

/// The name upstream's image runs its binary under (`/bin/ratelimit`).
pub const ENTRY_POINT: &str = "ratelimit";

/// The command-line arguments `args` (the program's name left out) as the start-up line that
/// says they are ignored shows them: upstream's binary reads no arguments, so deployments that
/// pass some (Envoy AI Gateway's `--quotaRateLimitServiceAddr=…`) run it unchanged. A value may
/// be a secret, so only names are shown: an argument starting with `-` up to its `=` (then
/// `=…`), any other argument as `…`. An argument that is not UTF-8 is shown lossily.
pub fn ignored_argument_names(args: &[std::ffi::OsString]) -> Vec<String> {
    args.iter()
        .map(|arg| {
            let arg = arg.to_string_lossy();
            match arg.split_once('=') {
                _ if !arg.starts_with('-') => "…".to_string(),
                Some((name, _)) => format!("{name}=…"),
                None => arg.into_owned(),
            }
        })
        .collect()
}

/// Where upstream's settings put the listeners. Each address is `host:port` as written (a name
/// is resolved at start).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listeners {
    /// `HOST:PORT`.
    pub http: String,
    /// `GRPC_HOST:GRPC_PORT`, unless `grpc_uds`.
    pub grpc: String,
    /// `GRPC_UDS`: a unix socket path the gRPC API listens on instead of `grpc`.
    pub grpc_uds: Option<PathBuf>,
    /// `DEBUG_HOST:DEBUG_PORT`.
    pub debug: String,
    /// `GRPC_MAX_CONNECTION_AGE` (default 24 h): a gRPC connection older than this (±10%) is
    /// asked to go away (HTTP/2 `GOAWAY`), so that clients spread over new pods.
    pub max_connection_age: Duration,
    /// `GRPC_MAX_CONNECTION_AGE_GRACE` (default 1 h): how long its calls may then take before
    /// the connection is closed.
    pub max_connection_age_grace: Duration,
}

/// How the runtime directory is read and watched (`RUNTIME_*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runtime {
    /// `RUNTIME_ROOT` (default `/srv/runtime_data/current`).
    pub root: PathBuf,
    /// `RUNTIME_SUBDIRECTORY` (default empty).
    pub subdirectory: String,
    /// `RUNTIME_APPDIRECTORY` (default `config`).
    pub appdirectory: String,
    /// `RUNTIME_IGNOREDOTFILES` (default false).
    pub ignore_dotfiles: bool,
    /// `RUNTIME_WATCH_ROOT` (default true).
    pub watch_root: bool,
}

/// Starting up against Redis (`REDIS_STARTUP_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Startup {
    /// The first retry's wait (default 1 s).
    pub initial_interval: Duration,
    /// The longest wait between tries (default 30 s).
    pub max_interval: Duration,
    /// How long to keep trying; `None` (upstream's 0, the default): for ever.
    pub max_elapsed: Option<Duration>,
}

/// How Envoy calls are decided and answered.
#[derive(Clone, Debug, PartialEq)]
pub struct Behaviour {
    /// `SHADOW_MODE`: an over-limit answer is turned into `OK` (its statuses keep `OVER_LIMIT`).
    pub shadow_mode: bool,
    /// `QUOTA_MODE`: every descriptor in quota mode (an answer is `OVER_LIMIT` only when each
    /// of its descriptors is).
    pub quota_mode: bool,
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`.
    pub stop_increment_when_over_limit: bool,
    /// `NEAR_LIMIT_RATIO` (default 0.8), read as upstream reads it (a 32-bit float).
    pub near_limit_ratio: f32,
    /// `CACHE_KEY_PREFIX`.
    pub cache_key_prefix: String,
    /// `EXPIRATION_JITTER_MAX_SECONDS` (default 300).
    pub expiration_jitter_max_seconds: u64,
    /// `LOCAL_CACHE_SIZE_IN_BYTES` (default 0: off).
    pub local_cache_bytes: u64,
    /// `RESPONSE_DYNAMIC_METADATA`.
    pub response_dynamic_metadata: bool,
    /// `LIMIT_RESPONSE_HEADERS_ENABLED`.
    pub response_headers: bool,
    /// `LIMIT_LIMIT_HEADER`, `LIMIT_REMAINING_HEADER`, `LIMIT_RESET_HEADER`.
    pub header_names: [String; 3],
    /// `MERGE_DOMAIN_CONFIG`.
    pub merge_domains: bool,
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`.
    pub healthy_with_a_domain: bool,
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG`.
    pub start_without_config: bool,
}

/// Statistics (`USE_STATSD` and the rest).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// `USE_STATSD` (default true) and not `DISABLE_STATS`: push statsd.
    pub statsd: bool,
    /// `STATSD_HOST:STATSD_PORT` (default `localhost:8125`).
    pub statsd_address: String,
    /// `STATSD_PROTOCOL` is `udp` (`udp4`, `udp6`); default TCP, as upstream's sink.
    pub statsd_udp: bool,
    /// `STATS_FLUSH_INTERVAL` (default 10 s).
    pub flush_interval: Duration,
    /// `EXTRA_TAGS`, in written order.
    pub extra_tags: Vec<(String, String)>,
    /// `USE_PROMETHEUS`: serve Prometheus at `PROMETHEUS_ADDR` + `PROMETHEUS_PATH`.
    pub prometheus: Option<(String, String)>,
    /// `PROMETHEUS_MAPPER_YAML`: the statsd_exporter mapping file that names upstream's series.
    pub mapping_file: Option<PathBuf>,
    /// `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`: the built-in mapping's response time in
    /// milliseconds rather than seconds.
    pub response_time_as_milliseconds: bool,
    /// `USE_DOG_STATSD` (and not `DISABLE_STATS`): push DogStatsD over UDP to
    /// `statsd_address`, with these mogrifiers ([`super::dogstatsd`]).
    pub dogstatsd: Option<Vec<super::dogstatsd::Mogrifier>>,
}

/// TLS on the gRPC listener (`GRPC_SERVER_*`, `GRPC_CLIENT_*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrpcTls {
    /// `GRPC_SERVER_TLS_CERT`.
    pub cert: PathBuf,
    /// `GRPC_SERVER_TLS_KEY`.
    pub key: PathBuf,
    /// `GRPC_CLIENT_TLS_CACERT`: require client certificates signed by these CAs.
    pub client_ca: Option<PathBuf>,
    /// `GRPC_CLIENT_TLS_SAN`: and naming this DNS name (or IP address).
    pub client_san: Option<String>,
}

/// envoyproxy/ratelimit's settings (see the [module documentation](self)).
#[derive(Clone, Debug, PartialEq)]
pub struct Upstream {
    /// The listeners.
    pub listeners: Listeners,
    /// The runtime directory.
    pub runtime: Runtime,
    /// The main Redis.
    pub redis: Redis,
    /// The per-second Redis (`REDIS_PERSECOND=true`).
    pub per_second: Option<Redis>,
    /// memcached instead of Redis (`BACKEND_TYPE=memcache`).
    pub memcache: Option<Memcache>,
    /// TLS to Redis.
    pub redis_tls: RedisTls,
    /// `REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR`, when set: whether a `READONLY` answer
    /// drops the connection so that the next is made to whatever the address names now.
    /// Unset, Floodgate's default applies (it does; upstream does not).
    pub close_connection_on_readonly: Option<bool>,
    /// Starting against Redis.
    pub startup: Startup,
    /// Decisions and answers.
    pub behaviour: Behaviour,
    /// Statistics.
    pub stats: Stats,
    /// TLS on the gRPC listener (`GRPC_SERVER_USE_TLS=true`).
    pub grpc_tls: Option<GrpcTls>,
    /// Configuration over xDS instead of the runtime directory (`CONFIG_TYPE=GRPC_XDS_SOTW`).
    pub xds: Option<Xds>,
    /// The variables set that Floodgate does not support, with why (for the start-up warning).
    pub unsupported: Vec<(String, &'static str)>,
}

/// Why upstream's settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// A value cannot be read.
    #[error(transparent)]
    Value(#[from] EnvError),
    /// A value is read but cannot be honoured.
    #[error("environment variable {variable}: {why}")]
    Refused {
        /// The variable.
        variable: &'static str,
        /// Why.
        why: String,
    },
}

impl UpstreamError {
    /// `variable`'s value is read but cannot be honoured, for `why`.
    pub(super) fn refused(variable: &'static str, why: impl Into<String>) -> UpstreamError {
        refused(variable, why)
    }
}

fn refused(variable: &'static str, why: impl Into<String>) -> UpstreamError {
    UpstreamError::Refused {
        variable,
        why: why.into(),
    }
}

/// Whether `name` is one of [`VARIABLES`] (a prefix entry matching).
pub fn is_upstream_variable(name: &str) -> bool {
    variable(name).is_some()
}

fn variable(name: &str) -> Option<&'static Variable> {
    VARIABLES.iter().find(|v| match v.name.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => v.name == name,
    })
}

/// The listeners' addresses from `HOST`, `PORT` and the rest, when **set**, whether or not
/// upstream's settings are present: `(http, grpc, debug)`, each `None` when neither its host
/// nor its port is set. An unset host is upstream's `0.0.0.0` when `present`, else
/// `127.0.0.1`; an unset port is upstream's.
pub fn listener_addresses(
    env: &Environment,
    present: bool,
) -> Result<[Option<String>; 3], EnvError> {
    let default_host = if present { "0.0.0.0" } else { "127.0.0.1" };
    let one = |host: &str, port: &str, default_port: u16| -> Result<Option<String>, EnvError> {
        if !present && !env.is_set(host) && !env.is_set(port) {
            return Ok(None);
        }
        let host = env.string_or(host, default_host);
        let port: u16 = env.int_or(port, default_port)?;
        Ok(Some(join_host_port(&host, port)))
    };
    Ok([
        one("HOST", "PORT", 8080)?,
        one("GRPC_HOST", "GRPC_PORT", 8081)?,
        one("DEBUG_HOST", "DEBUG_PORT", 6070)?,
    ])
}

/// `host:port`, an IPv6 address in brackets, as Go's `net.JoinHostPort`.
fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl Upstream {
    /// Whether upstream's settings are present in `env` (see the [module
    /// documentation](self)); `as_ratelimit` says the binary runs under [`ENTRY_POINT`].
    pub fn present(env: &Environment, as_ratelimit: bool) -> bool {
        as_ratelimit
            || env
                .names()
                .any(|name| !super::variables::is_generic(name) && is_upstream_variable(name))
    }

    /// Upstream's settings, if [present](Upstream::present).
    pub fn read(env: &Environment, as_ratelimit: bool) -> Result<Option<Upstream>, UpstreamError> {
        if !Upstream::present(env, as_ratelimit) {
            return Ok(None);
        }
        check_supported(env)?;
        let listeners = Listeners::read(env)?;
        let runtime = Runtime::read(env)?;
        let redis = read_redis(env, "REDIS_", "/var/run/nutcracker/ratelimit.sock")?;
        let per_second = if env.bool_or("REDIS_PERSECOND", false)? {
            Some(read_redis(
                env,
                "REDIS_PERSECOND_",
                "/var/run/nutcracker/ratelimitpersecond.sock",
            )?)
        } else {
            None
        };
        let redis_tls = RedisTls::read(env)?;
        let memcache = Memcache::read(env)?;
        let close_connection_on_readonly = env.bool("REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR")?;
        let startup = Startup::read(env)?;
        let behaviour = Behaviour::read(env)?;
        let stats = Stats::read(env)?;
        let grpc_tls = GrpcTls::read(env)?;
        let xds = Xds::read(env)?;
        let unsupported = env
            .names()
            .filter_map(|name| {
                let v = variable(name)?;
                (v.support == Support::Unsupported).then(|| (name.to_string(), v.note))
            })
            .collect();
        Ok(Some(Upstream {
            listeners,
            runtime,
            redis,
            per_second,
            memcache,
            redis_tls,
            close_connection_on_readonly,
            startup,
            behaviour,
            stats,
            grpc_tls,
            xds,
            unsupported,
        }))
    }
}

/// Refuses a configuration source or a backend other than the ones Floodgate has.
fn check_supported(env: &Environment) -> Result<(), UpstreamError> {
    match env.string("CONFIG_TYPE") {
        None | Some("FILE") | Some("GRPC_XDS_SOTW") => {}
        Some(other) => {
            return Err(refused(
                "CONFIG_TYPE",
                format!("`{other}`: FILE (a runtime directory) or GRPC_XDS_SOTW (configuration over xDS, state of the world)"),
            ))
        }
    }
    match env
        .string("BACKEND_TYPE")
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("") | Some("redis") | Some("memcache") => {}
        Some(other) => {
            return Err(refused(
                "BACKEND_TYPE",
                format!("`{other}`: redis or memcache"),
            ))
        }
    }
    Ok(())
}

impl Listeners {
    /// The listeners' variables.
    fn read(env: &Environment) -> Result<Listeners, UpstreamError> {
        let [http, grpc, debug] = listener_addresses(env, true)?;
        Ok(Listeners {
            http: http.unwrap_or_default(),
            grpc: grpc.unwrap_or_default(),
            grpc_uds: env
                .string("GRPC_UDS")
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
            debug: debug.unwrap_or_default(),
            max_connection_age: env
                .duration_or("GRPC_MAX_CONNECTION_AGE", Duration::from_secs(24 * 3600))?,
            max_connection_age_grace: env
                .duration_or("GRPC_MAX_CONNECTION_AGE_GRACE", Duration::from_secs(3600))?,
        })
    }
}

impl Runtime {
    /// The runtime directory's variables.
    fn read(env: &Environment) -> Result<Runtime, UpstreamError> {
        Ok(Runtime {
            root: PathBuf::from(env.string_or("RUNTIME_ROOT", "/srv/runtime_data/current")),
            subdirectory: env.string_or("RUNTIME_SUBDIRECTORY", ""),
            appdirectory: env.string_or("RUNTIME_APPDIRECTORY", "config"),
            ignore_dotfiles: env.bool_or("RUNTIME_IGNOREDOTFILES", false)?,
            watch_root: env.bool_or("RUNTIME_WATCH_ROOT", true)?,
        })
    }
}

impl Startup {
    /// The Redis start-up retry variables.
    fn read(env: &Environment) -> Result<Startup, UpstreamError> {
        let max_elapsed = env.duration_or("REDIS_STARTUP_MAX_ELAPSED_TIME", Duration::ZERO)?;
        Ok(Startup {
            initial_interval: env
                .duration_or("REDIS_STARTUP_INITIAL_INTERVAL", Duration::from_secs(1))?,
            max_interval: env.duration_or("REDIS_STARTUP_MAX_INTERVAL", Duration::from_secs(30))?,
            max_elapsed: (!max_elapsed.is_zero()).then_some(max_elapsed),
        })
    }
}

impl Behaviour {
    /// The variables that change how limits are decided and answered.
    fn read(env: &Environment) -> Result<Behaviour, UpstreamError> {
        let ratio = env.float("NEAR_LIMIT_RATIO")?.unwrap_or(0.8);
        if !(0.0..=1.0).contains(&ratio) {
            return Err(refused(
                "NEAR_LIMIT_RATIO",
                format!("`{ratio}` is not between 0 and 1"),
            ));
        }
        let header = |name: &str, default: &str| env.string_or(name, default);
        Ok(Behaviour {
            shadow_mode: env.bool_or("SHADOW_MODE", false)?,
            quota_mode: env.bool_or("QUOTA_MODE", false)?,
            stop_increment_when_over_limit: env
                .bool_or("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false)?,
            near_limit_ratio: ratio as f32,
            cache_key_prefix: env.string_or("CACHE_KEY_PREFIX", ""),
            expiration_jitter_max_seconds: env.int_or("EXPIRATION_JITTER_MAX_SECONDS", 300)?,
            local_cache_bytes: env.int_or("LOCAL_CACHE_SIZE_IN_BYTES", 0)?,
            response_dynamic_metadata: env.bool_or("RESPONSE_DYNAMIC_METADATA", false)?,
            response_headers: env.bool_or("LIMIT_RESPONSE_HEADERS_ENABLED", false)?,
            header_names: [
                header("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
                header("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
                header("LIMIT_RESET_HEADER", "RateLimit-Reset"),
            ],
            merge_domains: env.bool_or("MERGE_DOMAIN_CONFIG", false)?,
            healthy_with_a_domain: env.bool_or("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)?,
            start_without_config: env.bool_or("FORCE_START_WITHOUT_INITIAL_CONFIG", false)?,
        })
    }
}

impl Stats {
    /// The statistics sinks' variables: statsd, DogStatsD and Prometheus exclude each other,
    /// unless `DISABLE_STATS` turns them all off (upstream's runner checks it first).
    fn read(env: &Environment) -> Result<Stats, UpstreamError> {
        let protocol = env.string_or("STATSD_PROTOCOL", "tcp").to_ascii_lowercase();
        let statsd_udp = match protocol.as_str() {
            "tcp" | "tcp4" | "tcp6" => false,
            "udp" | "udp4" | "udp6" => true,
            other => {
                return Err(refused(
                    "STATSD_PROTOCOL",
                    format!("`{other}` is not tcp or udp"),
                ))
            }
        };
        let disabled = env.bool_or("DISABLE_STATS", false)?;
        let use_prometheus = env.bool_or("USE_PROMETHEUS", false)?;
        let use_statsd = env.bool_or("USE_STATSD", true)?;
        let use_dogstatsd = env.bool_or("USE_DOG_STATSD", false)? && !disabled;
        if use_dogstatsd && (use_statsd || use_prometheus) {
            return Err(refused(
                "USE_DOG_STATSD",
                "needs USE_STATSD=false (its default is true) and USE_PROMETHEUS unset or false, \
                 as upstream: one statistics sink at a time",
            ));
        }
        if use_prometheus && use_statsd && !disabled {
            return Err(refused(
                "USE_PROMETHEUS",
                "needs USE_STATSD=false, as upstream: the two sinks exclude each other",
            ));
        }
        Ok(Stats {
            statsd: use_statsd && !disabled,
            statsd_address: join_host_port(
                &env.string_or("STATSD_HOST", "localhost"),
                env.int_or("STATSD_PORT", 8125u16)?,
            ),
            statsd_udp,
            flush_interval: env.duration_or("STATS_FLUSH_INTERVAL", Duration::from_secs(10))?,
            extra_tags: env.map("EXTRA_TAGS")?,
            prometheus: (use_prometheus && !disabled).then(|| {
                (
                    env.string_or("PROMETHEUS_ADDR", ":9090"),
                    env.string_or("PROMETHEUS_PATH", "/metrics"),
                )
            }),
            mapping_file: path(env, "PROMETHEUS_MAPPER_YAML"),
            response_time_as_milliseconds: env
                .bool_or("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", false)?,
            dogstatsd: if use_dogstatsd {
                Some(super::dogstatsd::mogrifiers(env)?)
            } else {
                None
            },
        })
    }
}

impl GrpcTls {
    /// The gRPC listener's TLS variables, when `GRPC_SERVER_USE_TLS` is on.
    fn read(env: &Environment) -> Result<Option<GrpcTls>, UpstreamError> {
        Ok(if env.bool_or("GRPC_SERVER_USE_TLS", false)? {
            let (Some(cert), Some(key)) = (
                path(env, "GRPC_SERVER_TLS_CERT"),
                path(env, "GRPC_SERVER_TLS_KEY"),
            ) else {
                return Err(refused(
                    "GRPC_SERVER_USE_TLS",
                    "needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY",
                ));
            };
            Some(GrpcTls {
                cert,
                key,
                client_ca: path(env, "GRPC_CLIENT_TLS_CACERT"),
                client_san: env
                    .string("GRPC_CLIENT_TLS_SAN")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            })
        } else {
            None
        })
    }
}

/// The path variable `name` holds, when set and not empty.
pub(super) fn path(env: &Environment, name: &str) -> Option<PathBuf> {
    env.string(name)
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
}

/// Refuses a client certificate without its key, or a key without its certificate, naming
/// the variable set (upstream uses the pair only when both are set; one alone would be
/// dropped silently).
pub(super) fn key_pair(
    (cert_variable, cert): (&'static str, &Option<PathBuf>),
    (key_variable, key): (&'static str, &Option<PathBuf>),
) -> Result<(), UpstreamError> {
    match (cert, key) {
        (Some(_), None) => Err(refused(
            cert_variable,
            format!("needs {key_variable}, its key"),
        )),
        (None, Some(_)) => Err(refused(
            key_variable,
            format!("needs {cert_variable}, its certificate"),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
