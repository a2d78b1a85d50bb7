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

/// A Redis deployment's kind (`REDIS_TYPE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedisKind {
    /// One server.
    Single,
    /// A Redis Cluster: `REDIS_URL` lists seed nodes.
    Cluster,
    /// A master found through Sentinel: `REDIS_URL` is `master,sentinel,sentinel…`.
    Sentinel,
}

/// One Redis's settings (the main one, or the per-second one).
#[derive(Clone, PartialEq, Eq)]
pub struct Redis {
    /// `REDIS_SOCKET_TYPE` is `unix` (the default): `REDIS_URL` is a socket path (single only).
    pub unix: bool,
    /// `REDIS_TYPE`.
    pub kind: RedisKind,
    /// `REDIS_URL` as written.
    pub url: String,
    /// `REDIS_AUTH`: `pass` or `user:pass` (never shown).
    pub auth: Option<String>,
    /// `REDIS_SENTINEL_AUTH`, for the sentinels (never shown).
    pub sentinel_auth: Option<String>,
    /// `REDIS_TLS`.
    pub tls: bool,
    /// `REDIS_POOL_SIZE` (read and checked; see [`VARIABLES`]).
    pub pool_size: u32,
    /// `REDIS_TIMEOUT` (default 10 s): the bound on connecting.
    pub timeout: Duration,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("unix", &self.unix)
            .field("kind", &self.kind)
            .field("url", &floodgate::store::redacted(&self.url))
            .field("auth", &self.auth.as_ref().map(|_| "***"))
            .field("sentinel_auth", &self.sentinel_auth.as_ref().map(|_| "***"))
            .field("tls", &self.tls)
            .field("pool_size", &self.pool_size)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// TLS to Redis (`REDIS_TLS_*`), shared by both Redis connections and the sentinels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RedisTls {
    /// `REDIS_TLS_CACERT`.
    pub ca_file: Option<PathBuf>,
    /// `REDIS_TLS_CLIENT_CERT` (used only with the key).
    pub client_cert: Option<PathBuf>,
    /// `REDIS_TLS_CLIENT_KEY`.
    pub client_key: Option<PathBuf>,
    /// `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`: check the chain, not the name.
    pub skip_hostname_verification: bool,
}

/// memcached as the store (`BACKEND_TYPE=memcache`, `MEMCACHE_*`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memcache {
    /// `MEMCACHE_HOST_PORT`: the servers, `host:port` separated by commas, in the order that
    /// decides which holds a key (gomemcache's). Empty when `srv` names them.
    pub servers: Vec<String>,
    /// `MEMCACHE_SRV`: the DNS SRV record naming the servers, `_service._proto.domain`.
    pub srv: Option<String>,
    /// `MEMCACHE_SRV_REFRESH`: how often the record is looked up again (upstream's default 0:
    /// `None`, only at start).
    pub srv_refresh: Option<Duration>,
    /// `MEMCACHE_MAX_IDLE_CONNS` (default 2).
    pub max_idle: usize,
    /// `MEMCACHE_TLS` (default false).
    pub tls: bool,
    /// `MEMCACHE_TLS_CACERT`, `MEMCACHE_TLS_CLIENT_CERT`, `MEMCACHE_TLS_CLIENT_KEY`,
    /// `MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION`.
    pub tls_files: RedisTls,
}

impl Memcache {
    /// The memcache variables, when `BACKEND_TYPE=memcache`: the servers from
    /// `MEMCACHE_HOST_PORT` or from the SRV record `MEMCACHE_SRV`, one of them (upstream
    /// refuses both set).
    fn read(env: &Environment) -> Result<Option<Memcache>, UpstreamError> {
        let memcache = env
            .string("BACKEND_TYPE")
            .is_some_and(|b| b.eq_ignore_ascii_case("memcache"));
        if !memcache {
            return Ok(None);
        }
        let srv = env
            .string("MEMCACHE_SRV")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let servers: Vec<String> = env
            .string("MEMCACHE_HOST_PORT")
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        match (&srv, servers.is_empty()) {
            (Some(_), false) => {
                return Err(refused(
                    "MEMCACHE_SRV",
                    "both MEMCACHE_HOST_PORT and MEMCACHE_SRV are set: name the servers one way",
                ))
            }
            (None, true) => {
                return Err(refused(
                    "MEMCACHE_HOST_PORT",
                    "BACKEND_TYPE=memcache needs the servers, host:port separated by commas (or MEMCACHE_SRV)",
                ))
            }
            _ => {}
        }
        let refresh = env.duration_or("MEMCACHE_SRV_REFRESH", Duration::ZERO)?;
        let srv_refresh = (!refresh.is_zero()).then_some(refresh);
        let max_idle: usize = env.int_or("MEMCACHE_MAX_IDLE_CONNS", 2)?;
        if max_idle == 0 {
            return Err(refused("MEMCACHE_MAX_IDLE_CONNS", "`0`: at least 1"));
        }
        let tls_files = RedisTls {
            ca_file: path(env, "MEMCACHE_TLS_CACERT"),
            client_cert: path(env, "MEMCACHE_TLS_CLIENT_CERT"),
            client_key: path(env, "MEMCACHE_TLS_CLIENT_KEY"),
            skip_hostname_verification: env
                .bool_or("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", false)?,
        };
        key_pair(
            ("MEMCACHE_TLS_CLIENT_CERT", &tls_files.client_cert),
            ("MEMCACHE_TLS_CLIENT_KEY", &tls_files.client_key),
        )?;
        Ok(Some(Memcache {
            servers,
            srv,
            srv_refresh,
            max_idle,
            tls: env.bool_or("MEMCACHE_TLS", false)?,
            tls_files,
        }))
    }
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

impl RedisTls {
    /// The Redis TLS variables: a client certificate needs its key and the other way round.
    fn read(env: &Environment) -> Result<RedisTls, UpstreamError> {
        let redis_tls = RedisTls {
            ca_file: path(env, "REDIS_TLS_CACERT"),
            client_cert: path(env, "REDIS_TLS_CLIENT_CERT"),
            client_key: path(env, "REDIS_TLS_CLIENT_KEY"),
            skip_hostname_verification: env
                .bool_or("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)?,
        };
        key_pair(
            ("REDIS_TLS_CLIENT_CERT", &redis_tls.client_cert),
            ("REDIS_TLS_CLIENT_KEY", &redis_tls.client_key),
        )?;
        Ok(redis_tls)
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

/// One Redis's variables, all named `prefix` + the setting (`REDIS_` or `REDIS_PERSECOND_`).
/// Reads and checks the settings of upstream's Redis client that tune its connection pool and
/// pipelines (`prefix` is `REDIS_` or `REDIS_PERSECOND_`), refusing what upstream refuses:
/// `PIPELINE_WINDOW` a duration, `PIPELINE_LIMIT` a whole number (a no-op upstream too),
/// `CLUSTER_PIPELINE_PARALLELISM` a whole number not below 0, `POOL_ON_EMPTY_BEHAVIOR` not
/// `CREATE` nor `ERROR` (upstream's client panics on them: its pool can only wait). Floodgate
/// has no pool and no flush window, so none of them changes what it does
/// (docs/envoyproxy-ratelimit.md's table says how it behaves instead).
fn check_redis_tuning(env: &Environment, prefix: &str) -> Result<(), UpstreamError> {
    let main = prefix == "REDIS_";
    let pick = |main_name: &'static str, per_second: &'static str| {
        if main {
            main_name
        } else {
            per_second
        }
    };
    env.duration(&format!("{prefix}PIPELINE_WINDOW"))?;
    env.int::<i64>(&format!("{prefix}PIPELINE_LIMIT"))?;
    let parallelism = env.int_or::<i64>(&format!("{prefix}CLUSTER_PIPELINE_PARALLELISM"), 1)?;
    if parallelism < 0 {
        return Err(refused(
            pick(
                "REDIS_CLUSTER_PIPELINE_PARALLELISM",
                "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
            ),
            format!("{parallelism} is below 0"),
        ));
    }
    let on_empty = env
        .string_or(&format!("{prefix}POOL_ON_EMPTY_BEHAVIOR"), "WAIT")
        .to_ascii_uppercase();
    if on_empty == "CREATE" || on_empty == "ERROR" {
        return Err(refused(
            pick(
                "REDIS_POOL_ON_EMPTY_BEHAVIOR",
                "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
            ),
            format!(
                "{on_empty} is not supported (as upstream, whose pool only waits): remove it or \
                 set WAIT"
            ),
        ));
    }
    Ok(())
}

fn read_redis(env: &Environment, prefix: &str, default_url: &str) -> Result<Redis, UpstreamError> {
    let name = |setting: &str| format!("{prefix}{setting}");
    let socket = env
        .string_or(&name("SOCKET_TYPE"), "unix")
        .to_ascii_lowercase();
    let unix = match socket.as_str() {
        "unix" => true,
        "tcp" | "tcp4" | "tcp6" => false,
        other => {
            return Err(refused(
                "REDIS_SOCKET_TYPE",
                format!("`{other}` is not tcp or unix"),
            ))
        }
    };
    let kind = match env
        .string_or(&name("TYPE"), "SINGLE")
        .to_ascii_lowercase()
        .as_str()
    {
        "single" => RedisKind::Single,
        "cluster" => RedisKind::Cluster,
        "sentinel" => RedisKind::Sentinel,
        other => {
            return Err(refused(
                "REDIS_TYPE",
                format!("`{other}` is not single, cluster or sentinel"),
            ))
        }
    };
    let url = env.string_or(&name("URL"), default_url);
    if kind == RedisKind::Sentinel && url.split(',').count() < 2 {
        return Err(refused(
            "REDIS_URL",
            "with REDIS_TYPE=sentinel it is the master's name and the sentinels: name,host:port,host:port",
        ));
    }
    let secret = |setting: &str| {
        env.string(&name(setting))
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    check_redis_tuning(env, prefix)?;
    let pool_size: i64 = env.int_or(&name("POOL_SIZE"), 10)?;
    if pool_size < 1 {
        return Err(refused(
            "REDIS_POOL_SIZE",
            format!("{pool_size} is not at least 1"),
        ));
    }
    Ok(Redis {
        unix,
        kind,
        url,
        auth: secret("AUTH"),
        sentinel_auth: secret("SENTINEL_AUTH"),
        tls: env.bool_or(&name("TLS"), false)?,
        pool_size: u32::try_from(pool_size).unwrap_or(u32::MAX),
        timeout: env.duration_or(&name("TIMEOUT"), Duration::from_secs(10))?,
    })
}

#[cfg(test)]
mod tests;
