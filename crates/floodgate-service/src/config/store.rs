//! The `store` section: which store limits count in, and its settings (see [`crate::store`]).

use std::time::Duration;

use floodgate::algorithm::spec::SpecDuration;
use serde::Deserialize;

/// The store's settings (see [`crate::store`]).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// Which store: `memory` (the default, also when absent), `redis://[user[:password]@]host:port[/db]`
    /// or `redis-cluster://[user[:password]@]host:port,host:port,…`. `serve --store URL`
    /// overrides it (and only it). Read once at start-up: a reload keeps the store.
    #[serde(default)]
    pub url: Option<String>,
    /// The memory store's bound: the most keys held at once (at least 1; default 1,000,000).
    #[serde(default = "default_max_keys")]
    pub max_keys: usize,
    /// What the memory store does when a new key arrives and its shard is full of live keys
    /// (after dropping every idle key, which changes no decision): `evict_live` (the default:
    /// forget a live key, which may then be over-admitted by one burst) or `refuse_new` (keep
    /// every tracked key exact and refuse requests of new keys until room frees up). Both are
    /// counted in `/metrics`.
    #[serde(default)]
    pub overflow: OverflowPolicy,
    /// The Redis store's bound on every call (above 0; default 50 ms).
    #[serde(default)]
    pub timeout: Option<SpecDuration>,
    /// The Redis store's bound on setting a connection up: TCP, TLS, `AUTH`, `SELECT` (above
    /// 0; default 2 s). Apart from `timeout`: a call waits at most `timeout` for a connection,
    /// which goes on being made in the background, so a slow handshake (a busy node, a first
    /// TLS handshake) delays no more than the calls that came while it lasted. Start-up's
    /// probe waits for both.
    #[serde(default)]
    pub connect_timeout: Option<SpecDuration>,
    /// Whether a single Redis answering `READONLY` (a master demoted by a failover) makes the
    /// store drop its connection and connect anew to whatever the URL names now, such as a DNS
    /// name or a proxy that follows the master (default true; envoyproxy/ratelimit's
    /// `REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR`). With false the connection is kept and
    /// every call fails until that server is a master again. A cluster and the sentinels
    /// follow the master either way.
    #[serde(default = "yes")]
    pub reconnect_on_readonly: bool,
    /// The Redis store's circuit breaker (default: open after 3 failures in a row, for 1 s).
    #[serde(default)]
    pub breaker: Option<BreakerConfig>,
    /// The name of an environment variable holding the Redis password, which is put into the
    /// URL's user information (so that the password stays out of the file and the command
    /// line). The variable must be set when the store is created.
    #[serde(default)]
    pub password_env: Option<String>,
    /// For `rediss://`: a PEM file of the CAs that sign the Redis server's certificate, when
    /// they are not among the system's trusted roots.
    #[serde(default)]
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// For TLS URLs: a PEM file of the client certificate chain presented when the server
    /// requires one (Redis's `tls-auth-clients`); needs `tls_client_key_file`.
    #[serde(default)]
    pub tls_client_cert_file: Option<std::path::PathBuf>,
    /// Its private key (PEM); needs `tls_client_cert_file`.
    #[serde(default)]
    pub tls_client_key_file: Option<std::path::PathBuf>,
    /// For TLS URLs: check that the server's certificate chains to a trusted CA, but not that
    /// it names the host connected to (default false): for servers reached by an address
    /// their certificates do not name, such as the masters a Sentinel announces by IP.
    #[serde(default)]
    pub tls_skip_hostname_verification: bool,
    /// The Redis store's group commit: the most keys one script call carries (default 128,
    /// at most 1024; 0 or 1 turns it off, every decision then a call of its own). Decisions
    /// waiting for the same Redis (on a cluster, the same slot) while a call is in flight go
    /// together in the next one; a lone decision is sent at once. See
    /// [`floodgate::store::redis`]'s "Group commit".
    #[serde(default)]
    pub batch_max_keys: Option<usize>,
    /// The Redis store's group commit: the most script calls one lane (the Redis, or a
    /// cluster slot) has in flight (1 to 8; default 2, so that Redis finds the next batch
    /// waiting; 1 sends batches strictly in arrival order).
    #[serde(default)]
    pub batch_in_flight: Option<usize>,
    /// How many `floodgate serve` processes share the store (at least 1; default 1), for the
    /// failure policy that splits a limit between nodes while the store is down.
    #[serde(default = "default_nodes")]
    pub nodes: u32,
    /// `exact` (the default: every decision is one call to the store) or `cached` (decisions
    /// on this node's views, synced with Redis every `sync_interval`, with a stated bound on
    /// what the nodes together admit beyond a limit: see [`floodgate::store::cached`]). Cached
    /// mode needs a Redis URL.
    #[serde(default)]
    pub mode: StoreMode,
    /// Cached mode: how often the node syncs with Redis (1 ms to 1 h; default 100 ms).
    #[serde(default)]
    pub sync_interval: Option<SpecDuration>,
    /// Cached mode: how old the last successful sync may be before every key is decided at
    /// this node's share (`1 / nodes`) of its limit (at least `sync_interval`; default 1 s).
    #[serde(default)]
    pub max_view_age: Option<SpecDuration>,
    /// Cached mode: how long a decision on a key this node has never seen may wait for its
    /// state from Redis (default 5 ms; 0 never waits); beyond it, the node's share decides.
    #[serde(default)]
    pub load_budget: Option<SpecDuration>,
    /// How long `serve` tries to reach a Redis store at start-up, retrying with back-off, before
    /// it refuses to start (default 5 s; `0s` tries for ever, as envoyproxy/ratelimit's
    /// `REDIS_STARTUP_MAX_ELAPSED_TIME=0`). The memory store needs no check.
    #[serde(default)]
    pub startup_timeout: Option<SpecDuration>,
    /// The wait after start-up's first failed try (above 0; default 50 ms); each later wait
    /// doubles, up to `startup_retry_max`.
    #[serde(default)]
    pub startup_retry_first: Option<SpecDuration>,
    /// The longest wait between start-up's tries (above 0; default 1 s).
    #[serde(default)]
    pub startup_retry_max: Option<SpecDuration>,
    /// Start even when the store cannot be used at start-up (default `false`: refuse to start,
    /// naming the store and the cause). When `true`, `serve` starts, logs an error saying so,
    /// answers `/readyz` with 503 until the store works, and every stage follows its
    /// `on_store_error` policy meanwhile (failing open by default).
    #[serde(default)]
    pub start_without: bool,
    /// Where the Envoy rules' fixed windows count in Redis: `floodgate` (the default:
    /// Floodgate's own keys, through the twins; a refused hit consumes nothing) or
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
    /// `envoyproxy` layout: keep the keys Redis found over their limit in this node's memory,
    /// up to about this many bytes, and answer them over the limit without asking Redis until
    /// their window ends (`LOCAL_CACHE_SIZE_IN_BYTES`; default 0: off).
    #[serde(default)]
    pub over_limit_cache_bytes: u64,
    /// `envoyproxy` layout: a second Redis for the windows of unit `second`
    /// (`REDIS_PERSECOND_URL`), with the same settings as the main one.
    #[serde(default)]
    pub per_second_url: Option<String>,
    /// A memcached store's idle connections kept per server (at least 1; default 2;
    /// envoyproxy/ratelimit's `MEMCACHE_MAX_IDLE_CONNS`).
    #[serde(default)]
    pub max_idle_connections: Option<usize>,
    /// A memcached store: connect with TLS (`MEMCACHE_TLS`), trusting `tls_ca_file` (or the
    /// system's CAs) and presenting `tls_client_cert_file` if set (default false).
    #[serde(default)]
    pub tls: bool,
    /// A memcached store on a DNS SRV record (`memcache+srv://…`): how often the record is
    /// looked up again (above 0; default: only at start; envoyproxy/ratelimit's
    /// `MEMCACHE_SRV_REFRESH`). A failed lookup keeps the servers of the last good one.
    #[serde(default)]
    pub srv_refresh: Option<SpecDuration>,
}

/// How the Envoy rules' fixed windows are kept in Redis (see [`StoreConfig::layout`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreLayout {
    /// Floodgate's own keys and twins.
    #[default]
    Floodgate,
    /// envoyproxy/ratelimit's keys and commands.
    Envoyproxy,
}

/// The memory store's overflow policy, as the config (and `bench --overflow`) writes it (see
/// [`StoreConfig::overflow`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum OverflowPolicy {
    /// Forget a live key to make room.
    #[default]
    EvictLive,
    /// Refuse requests of new keys until room frees up.
    RefuseNew,
}

impl From<OverflowPolicy> for floodgate::store::Overflow {
    fn from(policy: OverflowPolicy) -> Self {
        match policy {
            OverflowPolicy::EvictLive => floodgate::store::Overflow::EvictLive,
            OverflowPolicy::RefuseNew => floodgate::store::Overflow::RefuseNew,
        }
    }
}

/// How the service uses a Redis store (see [`StoreConfig::mode`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreMode {
    /// Every decision is one call to the store: exact across nodes.
    #[default]
    Exact,
    /// Decisions on local views, synced periodically: memory speed, a bounded overshoot.
    Cached,
}

impl StoreMode {
    /// `exact` or `cached`, as the config writes it.
    pub fn name(self) -> &'static str {
        match self {
            StoreMode::Exact => "exact",
            StoreMode::Cached => "cached",
        }
    }
}

/// The Redis store's circuit breaker settings (see [`floodgate::store::RedisStore`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerConfig {
    /// Timeouts or connection errors in a row that open the breaker (default 3; 0 turns the
    /// breaker off).
    #[serde(default = "default_breaker_threshold")]
    pub threshold: u32,
    /// How long an open breaker fails calls at once before one call probes Redis again
    /// (above 0; default 1 s).
    #[serde(default = "default_breaker_cool_down")]
    pub cool_down: SpecDuration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            threshold: default_breaker_threshold(),
            cool_down: default_breaker_cool_down(),
        }
    }
}

fn default_breaker_threshold() -> u32 {
    3
}

fn default_breaker_cool_down() -> SpecDuration {
    SpecDuration(Duration::from_secs(1))
}

fn default_nodes() -> u32 {
    1
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            url: None,
            max_keys: default_max_keys(),
            overflow: OverflowPolicy::default(),
            timeout: None,
            connect_timeout: None,
            reconnect_on_readonly: true,
            breaker: None,
            password_env: None,
            tls_ca_file: None,
            tls_client_cert_file: None,
            tls_client_key_file: None,
            tls_skip_hostname_verification: false,
            batch_max_keys: None,
            batch_in_flight: None,
            nodes: default_nodes(),
            mode: StoreMode::Exact,
            sync_interval: None,
            max_view_age: None,
            load_budget: None,
            startup_timeout: None,
            startup_retry_first: None,
            startup_retry_max: None,
            layout: StoreLayout::Floodgate,
            key_prefix: String::new(),
            expiration_jitter: None,
            stop_increment_when_over_limit: false,
            over_limit_cache_bytes: 0,
            per_second_url: None,
            start_without: false,
            max_idle_connections: None,
            tls: false,
            srv_refresh: None,
        }
    }
}

fn yes() -> bool {
    true
}

fn default_max_keys() -> usize {
    1_000_000
}
