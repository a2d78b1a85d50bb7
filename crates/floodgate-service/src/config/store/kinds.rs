//! The `store:` section's settings of each kind of store, typed: what the memory, file, Redis,
//! cached and memcached stores each take, and the groups of settings several of them share
//! (a remote store's link, start-up and TLS files; upstream's counters layout). A field a kind
//! does not declare is refused by [`super::StoreConfig::settings`], naming the field, the
//! kind and the kinds that take it.
//!
//! Each group checks its own values (`Link::check` and the rest), so that a value is checked
//! once, by the one type that holds it, whatever store it configures.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use floodgate::duration::SpecDuration;
use serde::Deserialize;

use super::{BreakerConfig, OverflowPolicy, StoreLayout};
use crate::config::ConfigFileError;

/// The memory store's (and the file store's) bound on the keys it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub struct Bound {
    /// The most keys held at once (at least 1; default 1,000,000).
    #[serde(default = "default_max_keys")]
    pub max_keys: usize,
    /// What the store does when a new key arrives and its shard is full of live keys (after
    /// dropping every idle key, which changes no decision): `evict_live` (the default: forget
    /// a live key, which may then be over-admitted by one burst) or `refuse_new` (keep every
    /// tracked key exact and refuse requests of new keys until room frees up). Both are
    /// counted in `/metrics`.
    #[serde(default)]
    pub overflow: OverflowPolicy,
}

impl Default for Bound {
    fn default() -> Self {
        Bound {
            max_keys: default_max_keys(),
            overflow: OverflowPolicy::default(),
        }
    }
}

impl Bound {
    fn check(&self) -> Result<(), ConfigFileError> {
        at_least_one("store.max_keys", self.max_keys)
    }
}

/// A remote store's link: its timeouts and circuit breaker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Link {
    /// The bound on every call (above 0; default 50 ms).
    #[serde(default)]
    pub timeout: Option<SpecDuration>,
    /// The bound on setting a connection up: TCP, TLS, `AUTH`, `SELECT` (above 0; default
    /// 2 s). Apart from `timeout`: a call waits at most `timeout` for a connection, which goes
    /// on being made in the background, so a slow handshake (a busy node, a first TLS
    /// handshake) delays no more than the calls that came while it lasted. Start-up's probe
    /// waits for both.
    #[serde(default)]
    pub connect_timeout: Option<SpecDuration>,
    /// The circuit breaker (default: open after 3 failures in a row, for 1 s).
    #[serde(default)]
    pub breaker: Option<BreakerConfig>,
}

impl Link {
    fn check(&self) -> Result<(), ConfigFileError> {
        above_zero("store.timeout", self.timeout)?;
        above_zero("store.connect_timeout", self.connect_timeout)?;
        match self.breaker {
            Some(b) if b.threshold > 0 && b.cool_down.0.is_zero() => Err(ConfigFileError::invalid(
                "store.breaker.cool_down",
                "invalid value 0s (must be above 0 when the breaker is on, threshold > 0)",
            )),
            _ => Ok(()),
        }
    }

    /// The breaker as the stores' builders take it: (threshold, cool-down).
    pub fn breaker(&self) -> Option<(u32, Duration)> {
        self.breaker.map(|b| (b.threshold, b.cool_down.0))
    }
}

/// How long start-up tries to reach the store by default (`store.startup_timeout`).
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(5);

/// The first wait between two tries at start-up by default (`store.startup_retry_first`);
/// each wait doubles, up to [`STARTUP_RETRY_MAX`].
pub const STARTUP_RETRY_FIRST: Duration = Duration::from_millis(50);

/// The longest wait between two tries at start-up by default (`store.startup_retry_max`).
pub const STARTUP_RETRY_MAX: Duration = Duration::from_secs(1);

/// How `serve` waits for a remote store at start-up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct StartupWait {
    /// How long `serve` tries to reach the store, retrying with back-off, before it refuses to
    /// start (default 5 s; `0s` tries for ever, as envoyproxy/ratelimit's
    /// `REDIS_STARTUP_MAX_ELAPSED_TIME=0`).
    #[serde(default)]
    pub startup_timeout: Option<SpecDuration>,
    /// The wait after the first failed try (above 0; default 50 ms); each later wait doubles,
    /// up to `startup_retry_max`.
    #[serde(default)]
    pub startup_retry_first: Option<SpecDuration>,
    /// The longest wait between tries (above 0; default 1 s).
    #[serde(default)]
    pub startup_retry_max: Option<SpecDuration>,
    /// Start even when the store cannot be used at start-up (default `false`: refuse to start,
    /// naming the store and the cause). When `true`, `serve` starts, logs an error saying so,
    /// answers `/readyz` with 503 until the store works, and every stage follows its
    /// `on_store_error` policy meanwhile (failing open by default).
    #[serde(default)]
    pub start_without: bool,
}

impl StartupWait {
    fn check(&self) -> Result<(), ConfigFileError> {
        above_zero("store.startup_retry_first", self.startup_retry_first)?;
        above_zero("store.startup_retry_max", self.startup_retry_max)?;
        Ok(())
    }

    /// How long start-up tries the store: `None` for ever (`0s`), else the setting or 5 s.
    pub fn budget(&self) -> Option<Duration> {
        match self.startup_timeout {
            None => Some(STARTUP_TIMEOUT),
            Some(d) if d.0.is_zero() => None,
            Some(d) => Some(d.0),
        }
    }

    /// The first and the longest wait between tries, when either is set.
    pub fn retry(&self) -> Option<(Duration, Duration)> {
        match (self.startup_retry_first, self.startup_retry_max) {
            (None, None) => None,
            (first, max) => Some((
                first.map_or(STARTUP_RETRY_FIRST, |d| d.0),
                max.map_or(STARTUP_RETRY_MAX, |d| d.0),
            )),
        }
    }
}

/// A remote store's TLS files, for a private CA and client certificates.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct TlsFiles {
    /// A PEM file of the CAs that sign the server's certificate, when they are not among the
    /// system's trusted roots.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    /// A PEM file of the client certificate chain presented when the server requires one
    /// (Redis's `tls-auth-clients`); needs `tls_client_key_file`.
    #[serde(default)]
    pub tls_client_cert_file: Option<PathBuf>,
    /// Its private key (PEM); needs `tls_client_cert_file`.
    #[serde(default)]
    pub tls_client_key_file: Option<PathBuf>,
    /// Check that the server's certificate chains to a trusted CA, but not that it names the
    /// host connected to (default false): for servers reached by an address their
    /// certificates do not name, such as the masters a Sentinel announces by IP.
    #[serde(default)]
    pub tls_skip_hostname_verification: bool,
}

impl TlsFiles {
    fn check(&self) -> Result<(), ConfigFileError> {
        match (&self.tls_client_cert_file, &self.tls_client_key_file) {
            (Some(_), None) => Err(ConfigFileError::invalid(
                "store.tls_client_key_file",
                "missing: tls_client_cert_file needs its key",
            )),
            (None, Some(_)) => Err(ConfigFileError::invalid(
                "store.tls_client_cert_file",
                "missing: tls_client_key_file needs its certificate",
            )),
            _ => Ok(()),
        }
    }

    /// The client certificate and its key, when both are set.
    pub fn client_cert(&self) -> Option<(&std::path::Path, &std::path::Path)> {
        Some((
            self.tls_client_cert_file.as_deref()?,
            self.tls_client_key_file.as_deref()?,
        ))
    }

    /// Whether a CA or a client certificate is named.
    pub fn any(&self) -> bool {
        self.tls_ca_file.is_some() || self.tls_client_cert_file.is_some()
    }
}

/// Checks what every store other processes share takes: how many share it (at least 1), its
/// link, its start-up and its TLS files.
fn check_shared(
    nodes: u32,
    link: &Link,
    startup: &StartupWait,
    tls_files: &TlsFiles,
) -> Result<(), ConfigFileError> {
    if nodes == 0 {
        return Err(ConfigFileError::invalid(
            "store.nodes",
            "invalid value 0 (at least 1: the processes sharing the store)",
        ));
    }
    link.check()?;
    startup.check()?;
    tls_files.check()
}

/// Where the Envoy rules' fixed windows count on a store that also keeps upstream's counters
/// (Redis, memcached).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct UpstreamLayout {
    /// `floodgate` (the default: Floodgate's own keys; a refused hit consumes nothing) or
    /// `envoyproxy` (envoyproxy/ratelimit's keys and commands, so that upstream's pods and
    /// Floodgate count together while one replaces the other; set when upstream's settings
    /// are present). See [`crate::descriptors::layout`].
    #[serde(default)]
    pub layout: StoreLayout,
    /// `envoyproxy` layout: written before every key (envoyproxy/ratelimit's
    /// `CACHE_KEY_PREFIX`; default empty).
    #[serde(default)]
    pub key_prefix: String,
    /// `envoyproxy` layout: a key's TTL is its window plus a whole number of seconds drawn
    /// below this (`EXPIRATION_JITTER_MAX_SECONDS`; default 300 s; 0 adds none).
    #[serde(default)]
    pub expiration_jitter: Option<SpecDuration>,
    /// `envoyproxy` layout: count a request's hits only on the descriptors it would take over
    /// their limit when one would (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`; default false:
    /// every hit counts, as upstream).
    #[serde(default)]
    pub stop_increment_when_over_limit: bool,
    /// `envoyproxy` layout: keep the keys found over their limit in this node's memory, up to
    /// about this many bytes, and answer them over the limit without asking the store until
    /// their window ends (`LOCAL_CACHE_SIZE_IN_BYTES`; default 0: off).
    #[serde(default)]
    pub over_limit_cache_bytes: u64,
}

impl UpstreamLayout {
    /// Refuses, with Floodgate's layout, a setting only `store.layout: envoyproxy` takes.
    fn check(&self) -> Result<(), ConfigFileError> {
        if self.layout == StoreLayout::Envoyproxy {
            return Ok(());
        }
        for (field, set) in [
            ("store.key_prefix", !self.key_prefix.is_empty()),
            ("store.expiration_jitter", self.expiration_jitter.is_some()),
            (
                "store.stop_increment_when_over_limit",
                self.stop_increment_when_over_limit,
            ),
            (
                "store.over_limit_cache_bytes",
                self.over_limit_cache_bytes > 0,
            ),
        ] {
            if set {
                return Err(ConfigFileError::invalid(
                    field,
                    "only store.layout: envoyproxy takes it",
                ));
            }
        }
        Ok(())
    }
}

/// What a Redis store takes in both modes, beyond what every shared store takes.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct RedisLink {
    /// The name of an environment variable holding the Redis password, which is put into the
    /// URL's user information (so that the password stays out of the file and the command
    /// line). The variable must be set when the store is created.
    #[serde(default)]
    pub password_env: Option<String>,
    /// Whether a single Redis answering `READONLY` (a master demoted by a failover) makes the
    /// store drop its connection and connect anew to whatever the URL names now, such as a DNS
    /// name or a proxy that follows the master (default true; envoyproxy/ratelimit's
    /// `REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR`, an open pull request upstream). With false
    /// the connection is kept and every call fails until that server is a master again. A
    /// cluster and the sentinels follow the master either way.
    #[serde(default = "yes")]
    pub reconnect_on_readonly: bool,
    /// The group commit: the most keys one script call carries (default 128, at most 1024; 0
    /// or 1 turns it off, every decision then a call of its own). Decisions waiting for the
    /// same Redis (on a cluster, the same slot) while a call is in flight go together in the
    /// next one; a lone decision is sent at once. See [`floodgate::store::redis`]'s "Group
    /// commit".
    #[serde(default)]
    pub batch_max_keys: Option<usize>,
    /// The group commit: the most script calls one lane (the Redis, or a cluster slot) has in
    /// flight (1 to 8; default 2, so that Redis finds the next batch waiting; 1 sends batches
    /// strictly in arrival order).
    #[serde(default)]
    pub batch_in_flight: Option<usize>,
}

impl Default for RedisLink {
    fn default() -> Self {
        RedisLink {
            password_env: None,
            reconnect_on_readonly: true,
            batch_max_keys: None,
            batch_in_flight: None,
        }
    }
}

impl RedisLink {
    fn check(&self) -> Result<(), ConfigFileError> {
        if let Some(max_keys) = self.batch_max_keys.filter(|&n| n > 1024) {
            return Err(ConfigFileError::invalid(
                "store.batch_max_keys",
                format!(
                    "invalid value {max_keys} (must be at most 1024; 0 or 1 turns batching off)"
                ),
            ));
        }
        if let Some(calls) = self.batch_in_flight.filter(|n| !(1..=8).contains(n)) {
            return Err(ConfigFileError::invalid(
                "store.batch_in_flight",
                format!("invalid value {calls} (must be from 1 to 8)"),
            ));
        }
        if self.password_env.as_deref() == Some("") {
            return Err(ConfigFileError::invalid(
                "store.password_env",
                "invalid value `` (the name of an environment variable)",
            ));
        }
        Ok(())
    }
}

/// A Redis URL, passwords included: its `Debug` shows it with every password `***`, so that
/// settings can be logged.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RedisUrl(pub String);

impl std::fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&floodgate::store::redacted(&self.0))
    }
}

/// The embedded memory store (`memory`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct MemorySettings {
    /// Its bound.
    #[serde(flatten)]
    pub bound: Bound,
    /// The fields written that this kind has not (refused).
    #[serde(flatten)]
    pub(super) unknown: Unknown,
}

/// The durable file store (`file:///dir`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct FileSettings {
    /// The directory it owns, from the URL.
    #[serde(skip)]
    pub dir: PathBuf,
    /// Its bound, as the memory store's.
    #[serde(flatten)]
    pub bound: Bound,
    /// How often the journal is synced to disk (default 1 s): what `kill -9` may lose.
    #[serde(default)]
    pub sync_interval: Option<SpecDuration>,
    /// The fields written that this kind has not (refused).
    #[serde(flatten)]
    pub(super) unknown: Unknown,
}

/// A Redis store deciding every call (`redis://…` and the other Redis URLs, `mode: exact`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct RedisSettings {
    /// The URL to connect to (with the password of `password_env` once the store is opened).
    #[serde(skip)]
    pub url: RedisUrl,
    /// How many `floodgate serve` processes share the store (at least 1; default 1), for the
    /// failure policy that splits a limit between nodes while the store is down.
    #[serde(default = "default_nodes")]
    pub nodes: u32,
    /// The link's timeouts and breaker.
    #[serde(flatten)]
    pub link: Link,
    /// How start-up waits for the store.
    #[serde(flatten)]
    pub startup: StartupWait,
    /// The TLS files.
    #[serde(flatten)]
    pub tls_files: TlsFiles,
    /// What a Redis takes in both modes.
    #[serde(flatten)]
    pub redis: RedisLink,
    /// Where the Envoy rules' windows count.
    #[serde(flatten)]
    pub layout: UpstreamLayout,
    /// `envoyproxy` layout: a second Redis for the windows of unit `second`
    /// (`REDIS_PERSECOND_URL`), with the same settings as the main one.
    #[serde(default)]
    pub per_second_url: Option<String>,
    /// The fields written that this kind has not (refused).
    #[serde(flatten)]
    pub(super) unknown: Unknown,
}

/// A Redis store behind this node's views (`mode: cached`): decisions on local state, synced
/// with Redis, with a stated bound on what the nodes together admit beyond a limit (see
/// [`floodgate::store::cached`]).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct CachedSettings {
    /// The URL to connect to, as [`RedisSettings::url`].
    #[serde(skip)]
    pub url: RedisUrl,
    /// How many `floodgate serve` processes share the store (at least 1; default 1), for the
    /// failure policy that splits a limit between nodes while the store is down.
    #[serde(default = "default_nodes")]
    pub nodes: u32,
    /// The link's timeouts and breaker.
    #[serde(flatten)]
    pub link: Link,
    /// How start-up waits for the store.
    #[serde(flatten)]
    pub startup: StartupWait,
    /// The TLS files.
    #[serde(flatten)]
    pub tls_files: TlsFiles,
    /// What a Redis takes in both modes.
    #[serde(flatten)]
    pub redis: RedisLink,
    /// The most keys the node's views hold (at least 1; default 1,000,000).
    #[serde(default)]
    pub max_keys: Option<usize>,
    /// How often the node syncs with Redis (1 ms to 1 h; default 100 ms).
    #[serde(default)]
    pub sync_interval: Option<SpecDuration>,
    /// How old the last successful sync may be before every key is decided at this node's
    /// share (`1 / nodes`) of its limit (at least `sync_interval`; default 1 s).
    #[serde(default)]
    pub max_view_age: Option<SpecDuration>,
    /// How long a decision on a key this node has never seen may wait for its state from
    /// Redis (default 5 ms; 0 never waits); beyond it, the node's share decides.
    #[serde(default)]
    pub load_budget: Option<SpecDuration>,
    /// The fields written that this kind has not (refused).
    #[serde(flatten)]
    pub(super) unknown: Unknown,
}

/// Which memcached servers: a list, or a DNS SRV record's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemcachedServers {
    /// `host:port` of each server, in the order given (the order decides which holds a key).
    List(Vec<String>),
    /// The servers of this SRV record (`_service._proto.domain`).
    Srv(String),
}

impl Default for MemcachedServers {
    fn default() -> Self {
        MemcachedServers::List(Vec::new())
    }
}

/// A memcached store (`memcache://h1:p1,h2:p2`, `memcache+srv://_service._proto.domain`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct MemcachedSettings {
    /// Its servers, from the URL.
    #[serde(skip)]
    pub servers: MemcachedServers,
    /// How many `floodgate serve` processes share the store (at least 1; default 1), for the
    /// failure policy that splits a limit between nodes while the store is down.
    #[serde(default = "default_nodes")]
    pub nodes: u32,
    /// The link's timeouts and breaker.
    #[serde(flatten)]
    pub link: Link,
    /// How start-up waits for the store.
    #[serde(flatten)]
    pub startup: StartupWait,
    /// The TLS files.
    #[serde(flatten)]
    pub tls_files: TlsFiles,
    /// Where the Envoy rules' windows count.
    #[serde(flatten)]
    pub layout: UpstreamLayout,
    /// The idle connections kept per server (at least 1; default 2; envoyproxy/ratelimit's
    /// `MEMCACHE_MAX_IDLE_CONNS`); calls waiting for a server go in batches on at most this
    /// many connections.
    #[serde(default)]
    pub max_idle_connections: Option<usize>,
    /// Connect with TLS (`MEMCACHE_TLS`), trusting `tls_ca_file` (or the system's CAs) and
    /// presenting `tls_client_cert_file` if set (default false).
    #[serde(default)]
    pub tls: bool,
    /// On an SRV record: how often it is looked up again (above 0; default: only at start;
    /// envoyproxy/ratelimit's `MEMCACHE_SRV_REFRESH`). A failed lookup keeps the servers of
    /// the last good one.
    #[serde(default)]
    pub srv_refresh: Option<SpecDuration>,
    /// The fields written that this kind has not (refused).
    #[serde(flatten)]
    pub(super) unknown: Unknown,
}

/// The fields written that a kind's settings have not.
pub(super) type Unknown = BTreeMap<String, serde::de::IgnoredAny>;

/// One kind's settings, as [`super::StoreConfig::settings`] reads them.
pub(super) trait Kind: serde::de::DeserializeOwned {
    /// The fields written that the kind has not.
    fn unknown(&self) -> &Unknown;
    /// Checks every value.
    fn check(&self) -> Result<(), ConfigFileError>;
}

macro_rules! kind {
    ($($settings:ty),*) => {$(
        impl Kind for $settings {
            fn unknown(&self) -> &Unknown {
                &self.unknown
            }
            fn check(&self) -> Result<(), ConfigFileError> {
                self.check_values()
            }
        }
    )*};
}

kind!(
    MemorySettings,
    FileSettings,
    RedisSettings,
    CachedSettings,
    MemcachedSettings
);

impl MemorySettings {
    fn check_values(&self) -> Result<(), ConfigFileError> {
        self.bound.check()
    }
}

impl FileSettings {
    fn check_values(&self) -> Result<(), ConfigFileError> {
        self.bound.check()?;
        above_zero("store.sync_interval", self.sync_interval)
    }
}

impl RedisSettings {
    fn check_values(&self) -> Result<(), ConfigFileError> {
        check_shared(self.nodes, &self.link, &self.startup, &self.tls_files)?;
        self.redis.check()?;
        self.layout.check()?;
        if self.per_second_url.is_some() && self.layout.layout != StoreLayout::Envoyproxy {
            return Err(ConfigFileError::invalid(
                "store.per_second_url",
                "only store.layout: envoyproxy takes it",
            ));
        }
        Ok(())
    }
}

impl CachedSettings {
    fn check_values(&self) -> Result<(), ConfigFileError> {
        check_shared(self.nodes, &self.link, &self.startup, &self.tls_files)?;
        self.redis.check()?;
        if let Some(n) = self.max_keys {
            at_least_one("store.max_keys", n)?;
        }
        Ok(())
    }
}

impl MemcachedSettings {
    fn check_values(&self) -> Result<(), ConfigFileError> {
        check_shared(self.nodes, &self.link, &self.startup, &self.tls_files)?;
        self.layout.check()?;
        if let Some(0) = self.max_idle_connections {
            return Err(ConfigFileError::invalid(
                "store.max_idle_connections",
                "invalid value 0 (at least 1)",
            ));
        }
        if self.tls_files.any() && !self.tls {
            return Err(ConfigFileError::invalid(
                "store.tls",
                "the TLS files of a memcached store need store.tls: true",
            ));
        }
        match (&self.servers, self.srv_refresh) {
            (_, Some(every)) if every.0.is_zero() => Err(ConfigFileError::invalid(
                "store.srv_refresh",
                "invalid value 0s (must be above 0; leave it out to look the record up only at start)",
            )),
            (MemcachedServers::Srv(_), _) | (_, None) => Ok(()),
            (_, Some(_)) => Err(ConfigFileError::invalid(
                "store.srv_refresh",
                "only a memcached store on an SRV record takes it (store.url: memcache+srv://_service._proto.domain)",
            )),
        }
    }
}

fn above_zero(field: &str, value: Option<SpecDuration>) -> Result<(), ConfigFileError> {
    match value {
        Some(t) if t.0.is_zero() => Err(ConfigFileError::invalid(
            field,
            "invalid value 0s (must be above 0)",
        )),
        _ => Ok(()),
    }
}

fn at_least_one(field: &str, value: usize) -> Result<(), ConfigFileError> {
    if value == 0 {
        return Err(ConfigFileError::invalid(
            field,
            "invalid value 0 (must be at least 1)",
        ));
    }
    Ok(())
}

fn yes() -> bool {
    true
}

fn default_max_keys() -> usize {
    1_000_000
}

fn default_nodes() -> u32 {
    1
}
