//! upstream's store settings: its Redis (`REDIS_*`, and the per-second one,
//! `REDIS_PERSECOND_*`), the TLS to it, and memcached (`BACKEND_TYPE=memcache`, `MEMCACHE_*`).

use std::path::PathBuf;
use std::time::Duration;

use super::super::Environment;
#[cfg(doc)]
use super::VARIABLES;
use super::{key_pair, path, refused, UpstreamError};

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
    pub(super) fn read(env: &Environment) -> Result<Option<Memcache>, UpstreamError> {
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

impl RedisTls {
    /// The Redis TLS variables: a client certificate needs its key and the other way round.
    pub(super) fn read(env: &Environment) -> Result<RedisTls, UpstreamError> {
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

/// One Redis's variables, all named `prefix` + the setting (`REDIS_` or `REDIS_PERSECOND_`),
/// with `default_url` when `prefix` + `URL` is unset.
pub(super) fn read_redis(
    env: &Environment,
    prefix: &str,
    default_url: &str,
) -> Result<Redis, UpstreamError> {
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
