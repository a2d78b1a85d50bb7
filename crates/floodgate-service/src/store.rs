//! The service's one store: the embedded memory store (`memory`, the default) or a Redis that
//! several `floodgate serve` processes share (`redis://[user[:password]@]host:port[/db]`, or a
//! Redis Cluster, `redis-cluster://host:port,host:port`), chosen by `serve --store URL` or the
//! config's `store: { url: … }`, with its `timeout`, `breaker` and `password_env` ([`url`]).
//!
//! [`ServiceStore`] is the library's [`AnyStore`] (which one store, chosen at run time) with
//! what the service adds around it: its [`health`] (calls, errors by kind, the last outcome;
//! failures logged at a bounded rate, a few relaxed atomic additions a call), cached mode's
//! metrics and upstream's counters. One concrete type rather than a type parameter of the
//! whole service: the HTTP, gRPC and admin faces, what is served and the runtime stay one type,
//! and a call costs one match on the kind of store before the store's own work.
//!
//! A Redis store cannot run every algorithm yet; [`ServiceStore::check`] refuses a built
//! configuration that uses one, naming the plan, limit, limiter or Envoy rule, so that
//! `check-config` and start-up fail instead of every call failing open.

use floodgate::store::LocalStore;
use std::sync::Arc;
use std::time::Duration;

use floodgate::algorithm::spec::{AnyAlgorithm, AnyState};
use floodgate::store::redis::BreakerState;
use floodgate::store::{
    AnyStore, CachedStore, Key, KeyedOp, Link, Linked, MemoryStore, RedisStore, RedisStoreBuilder,
    Store,
};
use floodgate::{Clock, Decision, Op, StoreError, SystemClock};

use crate::config::store::{
    Bound, CachedSettings, FileSettings, Link as StoreLink, MemcachedServers, MemcachedSettings,
    RedisLink, RedisSettings, TlsFiles, UpstreamLayout,
};
use crate::config::{ConfigFileError, StoreConfig, StoreLayout, StoreMode, StoreSettings};
use crate::descriptors::layout::EnvoyCounters;

pub mod cached;
pub mod health;
pub mod url;

pub use self::cached::CachedMetrics;
pub use self::health::{Call, ErrorKind, StoreHealth, StoreStatus};
pub use self::url::StoreUrl;
pub use floodgate::store::Capabilities;

/// The embedded store.
pub type Mem = MemoryStore<Key, AnyState>;

/// The service's store (see the [module documentation](self)), with its health: calls and
/// errors counted, the last call's outcome, and failures logged at a bounded rate. Cloning is
/// cheap: clones share the store and its health.
#[derive(Clone, Debug)]
pub struct ServiceStore {
    store: AnyStore,
    /// Cached mode's metrics, fed by its sync loop (`None` in other modes).
    cached_metrics: Option<Arc<CachedMetrics>>,
    health: Arc<StoreHealth>,
    /// With `store.layout: envoyproxy`: the Envoy windows' counters in upstream's layout.
    envoy: Option<EnvoyCounters>,
    /// The settings it was opened with.
    settings: StoreSettings,
}

pub use crate::config::store::MEMORY;

/// How often, at most, a failing store is logged per kind of error (the lines in between
/// are counted and the next line says how many were suppressed).
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// The Redis key under which the nodes sharing a store keep the secret that signs lease
/// tokens ([`ServiceStore::shared_lease_secret`]).
pub const LEASE_SECRET_KEY: &str = "floodgate:lease-secret";

pub use crate::config::store::kinds::{STARTUP_RETRY_FIRST, STARTUP_RETRY_MAX, STARTUP_TIMEOUT};

impl ServiceStore {
    /// The store `config` names, its failures logged on the system clock. A Redis store must
    /// be created inside a Tokio runtime that keeps running as long as the store is used (it
    /// runs the connection); nothing is sent yet.
    pub fn from_config(config: &StoreConfig) -> Result<ServiceStore, ConfigFileError> {
        ServiceStore::from_config_with(config, Arc::new(SystemClock::new()), |b| b)
    }

    /// The store `config` names, for `check-config`: every setting checked as
    /// [`ServiceStore::from_config`] checks it, but a durable file store's directory is not
    /// opened (a running `serve` holds it): a memory store answers in its place, which runs
    /// what the file store runs, as the file store (it is one, journaled).
    pub fn for_check(config: &StoreConfig) -> Result<ServiceStore, ConfigFileError> {
        ServiceStore::open(config, Arc::new(SystemClock::new()), |b| b, false)
    }

    /// [`ServiceStore::from_config`] with `clock` timing the bounded logging, and `tune`
    /// applied to a Redis store's builder after the configured settings (an explicit clock and
    /// a `min_ttl` for replays).
    pub fn from_config_with(
        config: &StoreConfig,
        clock: Arc<dyn Clock>,
        tune: impl FnOnce(RedisStoreBuilder) -> RedisStoreBuilder,
    ) -> Result<ServiceStore, ConfigFileError> {
        ServiceStore::open(config, clock, tune, true)
    }

    fn open(
        config: &StoreConfig,
        clock: Arc<dyn Clock>,
        tune: impl FnOnce(RedisStoreBuilder) -> RedisStoreBuilder,
        open_files: bool,
    ) -> Result<ServiceStore, ConfigFileError> {
        // A password named by `password_env` is read through the one reader of the process's
        // environment.
        let env = crate::environment::Environment::from_process();
        let password = |name: &str| env.string(name).map(str::to_string);
        let settings = config.settings()?;
        let url = url::from_settings(config, &settings, password)?;
        let (store, cached_metrics, envoy) = match &settings {
            StoreSettings::Memory(s) => (memory_store(&s.bound)?, None, None),
            StoreSettings::File(s) => (file_store(s, open_files)?, None, None),
            StoreSettings::Redis(s) => {
                let redis = open_redis(&s.url, &s.link, &s.tls_files, &s.redis, password, tune)?;
                let store = AnyStore::from(redis);
                let per_second = match &s.per_second_url {
                    Some(written) => Some(per_second_redis(written, s)?),
                    None => None,
                };
                let envoy = envoy_counters(&s.layout, per_second, &store, clock.clone())?;
                (store, None, envoy)
            }
            StoreSettings::Cached(s) => {
                let redis = open_redis(&s.url, &s.link, &s.tls_files, &s.redis, password, tune)?;
                let (store, metrics) = cached(redis, s)?;
                (AnyStore::from(store), Some(metrics), None)
            }
            StoreSettings::Memcached(s) => {
                let store = memcached(s)?;
                let envoy = envoy_counters(&s.layout, None, &store, clock.clone())?;
                (store, None, envoy)
            }
        };
        let health = StoreHealth::new(url.kind(), url.shown(), clock, LOG_EVERY);
        Ok(ServiceStore {
            store,
            cached_metrics,
            health: Arc::new(health),
            envoy,
            settings,
        })
    }

    /// The store's settings, as [`StoreConfig::settings`] typed them.
    pub fn settings(&self) -> &StoreSettings {
        &self.settings
    }

    /// The store's health: counters, the last call's outcome.
    pub fn health(&self) -> &StoreHealth {
        &self.health
    }

    /// Checks that the store can be used now, on the path decisions take: a Redis store
    /// connects if it must and runs a script that writes (and removes) a key on every master,
    /// so that a Redis that answers but refuses writes fails it (see [`RedisStore::probe`]);
    /// with `store.per_second_url`, that Redis too. The memory store always can. The outcome
    /// counts in the store's health like a decision's, so a probe that succeeds makes a
    /// failing store ready again.
    pub async fn probe(&self) -> Result<(), StoreError> {
        let call = self.health.begin();
        let result = self.store.probe().await;
        let result = match (
            result,
            self.envoy.as_ref().and_then(EnvoyCounters::per_second),
        ) {
            (Ok(()), Some(per_second)) => per_second.probe().await,
            (result, _) => result,
        };
        self.health.record(call, &result);
        result
    }

    /// The secret that signs lease tokens on every node sharing this store, so that a lease
    /// taken on one node is given back on any other ([`crate::lease_token`]): 32 random bytes,
    /// stored (hex) under [`LEASE_SECRET_KEY`] by the first node that asks and read by the
    /// others. `None` for the memory store, which no other process shares. Anyone who can
    /// write to the Redis can read it; such a one can change every counter anyway.
    pub async fn shared_lease_secret(&self) -> Result<Option<Vec<u8>>, StoreError> {
        if !self.store.is_shared() {
            return Ok(None);
        }
        let candidate: String = rand::random::<[u8; 32]>()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let call = self.health.begin();
        let stored = self.store.shared_secret(LEASE_SECRET_KEY, &candidate).await;
        self.health.record(call, &stored);
        let Some(stored) = stored? else {
            return Ok(None);
        };
        let bytes: Option<Vec<u8>> = (stored.len() % 2 == 0)
            .then(|| {
                (0..stored.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(stored.get(i..i + 2)?, 16).ok())
                    .collect()
            })
            .flatten();
        match bytes {
            Some(secret) if secret.len() >= crate::lease_token::MIN_SECRET_BYTES => {
                Ok(Some(secret))
            }
            _ => Err(StoreError::Protocol(format!(
                "{LEASE_SECRET_KEY} holds something other than a hex secret of at least {} bytes",
                crate::lease_token::MIN_SECRET_BYTES
            ))),
        }
    }

    /// Probes the store until it answers, for at most `budget` (`None`: for ever), waiting
    /// between tries as `retry` says (default 50 ms, doubling up to 1 s): start-up's check. The
    /// last failure when it never answered within the budget.
    pub async fn wait_until_usable(
        &self,
        budget: Option<Duration>,
        retry: Option<(Duration, Duration)>,
    ) -> Result<(), StoreError> {
        let (first_wait, max_wait) = retry.unwrap_or((STARTUP_RETRY_FIRST, STARTUP_RETRY_MAX));
        let mut last = StoreError::Timeout(budget.unwrap_or_default());
        let mut first = true;
        let tries = async {
            let mut wait = first_wait;
            loop {
                match self.probe().await {
                    Ok(()) => return,
                    // The breaker refusing a try says nothing of why the store fails: the
                    // failure that opened it stays the one reported.
                    Err(StoreError::BreakerOpen { .. }) if !first => {}
                    Err(e) => last = e,
                }
                first = false;
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(max_wait);
            }
        };
        let answered = match budget {
            Some(budget) => tokio::time::timeout(budget, tries).await.is_ok(),
            None => {
                tries.await;
                true
            }
        };
        if answered {
            Ok(())
        } else {
            Err(last)
        }
    }

    /// The memory store's bookkeeping (keys held, evictions, refusals of new keys); `None`
    /// for a Redis store.
    pub fn memory_stats(&self) -> Option<floodgate::store::StoreStats> {
        self.store.as_memory().map(|m| m.stats())
    }

    /// The Redis store under this one (exact mode's, or the one cached mode syncs with);
    /// `None` for the memory store.
    pub fn redis(&self) -> Option<&RedisStore> {
        self.store.redis()
    }

    /// The circuit breaker's state (a Redis store's; the memory store has none).
    pub fn breaker_state(&self) -> Option<BreakerState> {
        self.store.breaker_state()
    }

    /// What `/readyz` shows of the store.
    pub fn status(&self) -> StoreStatus {
        let mut status = self.health.status(self.breaker_state());
        if let Some(c) = self.store.as_cached() {
            status.mode = StoreMode::Cached.name();
            status.sync_lag_seconds = Some(c.view_age().as_secs_f64());
        }
        status
    }

    /// Cached mode's counters (`None` in other modes).
    pub fn cached_stats(&self) -> Option<floodgate::store::CachedStats> {
        self.store.as_cached().map(CachedStore::stats)
    }

    /// Cached mode's metrics, as Prometheus text (nothing in other modes).
    pub fn write_cached_metrics(&self, out: &mut String) {
        if let (Some(store), Some(metrics)) = (self.store.as_cached(), &self.cached_metrics) {
            metrics.write(out, store);
        }
    }

    /// The store's kind, as errors name it.
    pub fn kind(&self) -> &'static str {
        self.health.kind()
    }

    /// Whether the store can run `algorithm` (the memory store runs them all).
    pub fn supports(&self, algorithm: &AnyAlgorithm) -> bool {
        self.runs(algorithm).is_ok()
    }

    /// [`ServiceStore::supports`], with the refusal that says why not (the store's own
    /// answer, [`Capabilities::runs`]).
    pub fn runs(&self, algorithm: &AnyAlgorithm) -> Result<(), StoreError> {
        self.store.runs(algorithm)
    }

    /// Whether this store gives back units under `algorithm` (Envoy's `is_negative_hits`):
    /// the algorithm must take refunds, and the store run them ([`Capabilities::takes_refunds`]).
    pub fn takes_refunds(&self, algorithm: &AnyAlgorithm) -> bool {
        self.store.takes_refunds(algorithm)
    }

    /// Whether every node using the store sees the same state ([`Capabilities::is_shared`]):
    /// then leases and the Rate Limit Quota Service's shares are the fleet's.
    pub fn is_shared(&self) -> bool {
        self.store.is_shared()
    }

    /// Whether the store runs a chain as one atomic step, undoing all-or-nothing links
    /// ([`Capabilities::chains_atomically`]).
    pub fn chains_atomically(&self) -> bool {
        self.store.chains_atomically()
    }

    /// The store chosen at run time, without the service's health around it: for what keeps
    /// state of its own in the store (the Rate Limit Quota Service's claims).
    pub fn inner(&self) -> &AnyStore {
        &self.store
    }

    /// Whether decisions are cached on this node (`store.mode: cached`), each key decided on
    /// its own.
    pub fn is_cached(&self) -> bool {
        self.store.as_cached().is_some()
    }

    /// Whether the Envoy rules count with envoyproxy/ratelimit's commands
    /// (`store.layout: envoyproxy`), which count every hit.
    pub fn counts_as_envoyproxy(&self) -> bool {
        self.envoy.is_some()
    }
}

// The library's store boxes the Redis and cached stores' futures, so that a call's future
// stays small on the memory store (see `AnyStore`'s implementation).
impl Store<str, AnyAlgorithm> for ServiceStore {
    async fn apply(
        &self,
        algorithm: &AnyAlgorithm,
        key: &str,
        op: Op,
    ) -> Result<Decision, StoreError> {
        let call = self.health.begin();
        let result = self.store.apply(algorithm, key, op).await;
        let wrote = matches!(&result, Ok(d) if wrote(op, d));
        self.health.record_call(call, &result, wrote);
        result
    }

    async fn apply_many(
        &self,
        requests: &[KeyedOp<'_, str, AnyAlgorithm>],
    ) -> Result<Vec<Decision>, StoreError> {
        let call = self.health.begin();
        let result = self.store.apply_many(requests).await;
        let wrote = matches!(&result, Ok(decisions)
            if requests.iter().zip(decisions).any(|(r, d)| wrote(r.op, d)));
        self.health.record_call(call, &result, wrote);
        result
    }

    async fn apply_chain(
        &self,
        links: &[Link<'_, str, AnyAlgorithm>],
    ) -> Result<Vec<Linked>, StoreError> {
        let call = self.health.begin();
        let result = self.store.apply_chain(links).await;
        self.record_chain(call, links, result)
    }

    async fn apply_chain_refused(
        &self,
        links: &[Link<'_, str, AnyAlgorithm>],
    ) -> Result<Vec<Linked>, StoreError> {
        let call = self.health.begin();
        let result = self.store.apply_chain_refused(links).await;
        self.record_chain(call, links, result)
    }

    fn same_store(&self, other: &Self) -> bool {
        self.store.same_store(&other.store)
    }

    fn apply_detached(&self, algorithm: &AnyAlgorithm, key: &str, op: Op) {
        self.store.apply_detached(algorithm, key, op)
    }
}

/// Whether a call that answered `decision` to `op` wrote to the store: only such a call shows
/// that the store takes writes. A read-only probe (cost 0) or a refusal may succeed where every
/// admission fails (a replica answers reads, and a refused request changes no state), so it
/// must not call a failing store recovered.
fn wrote(op: Op, decision: &Decision) -> bool {
    decision.allowed && !matches!(op, Op::Check { cost: 0 })
}

impl ServiceStore {
    /// Counts a chain's call in the store's health: it wrote (see [`wrote`]) when one of its
    /// links did.
    fn record_chain(
        &self,
        call: Call,
        links: &[Link<'_, str, AnyAlgorithm>],
        result: Result<Vec<Linked>, StoreError>,
    ) -> Result<Vec<Linked>, StoreError> {
        let wrote = matches!(&result, Ok(outcomes) if links.iter().zip(outcomes).any(
            |(l, o)| o.decision().is_some_and(|d| wrote(l.request.op, d))
        ));
        self.health.record_call(call, &result, wrote);
        result
    }
}

/// A memcached store over the servers `settings` names (a list, or an SRV record's, looked up
/// again every `store.srv_refresh`), with its link, idle connections and TLS.
fn memcached(settings: &MemcachedSettings) -> Result<AnyStore, ConfigFileError> {
    let mut builder = match &settings.servers {
        MemcachedServers::Srv(record) => floodgate::store::MemcachedStore::from_srv(record),
        MemcachedServers::List(servers) => {
            floodgate::store::MemcachedStore::builder(servers.clone())
        }
    };
    if let Some(every) = settings.srv_refresh {
        builder = builder.srv_refresh(every.0);
    }
    let link = &settings.link;
    if let Some(timeout) = link.timeout {
        builder = builder.timeout(timeout.0);
    }
    if let Some(timeout) = link.connect_timeout {
        builder = builder.connect_timeout(timeout.0);
    }
    if let Some((threshold, cool_down)) = link.breaker() {
        builder = builder.breaker(threshold, cool_down);
    }
    if let Some(idle) = settings.max_idle_connections {
        builder = builder.max_idle(idle);
    }
    let tls = &settings.tls_files;
    builder = builder
        .tls(settings.tls)
        .tls_skip_hostname_verification(tls.tls_skip_hostname_verification);
    if let Some(ca) = &tls.tls_ca_file {
        builder = builder.tls_ca_file(ca);
    }
    if let Some((cert, key)) = tls.client_cert() {
        builder = builder.tls_client_cert(cert, key);
    }
    let store = builder
        .build()
        .map_err(|e| ConfigFileError::from_config_error("store", e))?;
    Ok(AnyStore::from(store))
}

/// The memory store bounded by `store.max_keys` and `store.overflow`.
fn memory_store(bound: &Bound) -> Result<AnyStore, ConfigFileError> {
    let store = MemoryStore::builder()
        .max_keys(bound.max_keys)
        .overflow(bound.overflow.into())
        .build()
        .map_err(|e| ConfigFileError::from_config_error("store", e))?;
    Ok(AnyStore::from(store))
}

/// The durable file store in its directory, its journal synced every `store.sync_interval`
/// (default 1 s), bounded like the memory store by `store.max_keys` and `store.overflow`;
/// opened when `open` (else its settings are checked, and a memory store answers in its place).
fn file_store(settings: &FileSettings, open: bool) -> Result<AnyStore, ConfigFileError> {
    let mut builder = floodgate::store::FileStore::builder(&settings.dir)
        .max_keys(settings.bound.max_keys)
        .overflow(settings.bound.overflow.into());
    if let Some(interval) = settings.sync_interval {
        builder = builder.sync_interval(interval.0);
    }
    builder
        .check()
        .map_err(|e| ConfigFileError::from_config_error("store", e))?;
    if !open {
        return memory_store(&settings.bound);
    }
    let store = builder.build().map_err(|e| match e.config_error() {
        Some(config) => ConfigFileError::from_config_error("store", config.clone()),
        None => ConfigFileError::invalid("store.url", e.to_string()),
    })?;
    Ok(AnyStore::from(store))
}

/// Cached mode over `redis` with `settings`, its sync loop started on the current Tokio
/// runtime (when there is one; `check-config` builds the store without running it).
fn cached(
    redis: RedisStore,
    settings: &CachedSettings,
) -> Result<(CachedStore, Arc<CachedMetrics>), ConfigFileError> {
    let mut builder = CachedStore::builder(redis).nodes(settings.nodes);
    if let Some(max_keys) = settings.max_keys {
        builder = builder.max_keys(max_keys);
    }
    if let Some(d) = settings.sync_interval {
        builder = builder.sync_interval(d.0);
    }
    if let Some(d) = settings.max_view_age {
        builder = builder.max_view_age(d.0);
    }
    if let Some(d) = settings.load_budget {
        builder = builder.load_budget(d.0);
    }
    let store = builder
        .build()
        .map_err(|e| ConfigFileError::from_config_error("store", e))?;
    let metrics = Arc::new(CachedMetrics::default());
    if tokio::runtime::Handle::try_current().is_ok() {
        let recorder = metrics.clone();
        store.start_syncing(move |report| recorder.record(report));
    }
    Ok((store, metrics))
}

/// The counters of the `envoyproxy` layout (`None` with Floodgate's), over the main store
/// and, on Redis, the Redis of `store.per_second_url`, or why the layout cannot be used.
fn envoy_counters(
    layout: &UpstreamLayout,
    per_second: Option<RedisStore>,
    store: &AnyStore,
    clock: Arc<dyn Clock>,
) -> Result<Option<EnvoyCounters>, ConfigFileError> {
    if layout.layout == StoreLayout::Floodgate {
        return Ok(None);
    }
    let Some(main) = store.upstream_counters() else {
        return Err(ConfigFileError::invalid(
            "store.layout",
            format!("invalid value envoyproxy: the {} store does not keep upstream's counters; give store.url a redis://, rediss:// or redis-cluster:// URL", store.kind()),
        ));
    };
    let per_second = per_second.map(floodgate::store::UpstreamCounters::Redis);
    let jitter = layout.expiration_jitter.map_or(300, |d| d.0.as_secs());
    Ok(Some(EnvoyCounters::new(
        main,
        per_second,
        layout.key_prefix.clone(),
        jitter,
        layout.stop_increment_when_over_limit,
        layout.over_limit_cache_bytes,
        clock,
    )))
}

/// The Envoy windows count in upstream's layout when the store keeps it, each call recorded
/// in the store's health.
impl crate::descriptors::DescriptorStore for ServiceStore {
    type Layout<'a> = RecordedCounters<'a>;

    fn upstream_layout(&self) -> Option<RecordedCounters<'_>> {
        let envoy = self.envoy.as_ref()?;
        Some(RecordedCounters {
            envoy,
            health: &self.health,
        })
    }
}

/// The service store's counters in upstream's layout, each call recorded in its health like a
/// decision's.
#[derive(Debug)]
pub struct RecordedCounters<'a> {
    envoy: &'a EnvoyCounters,
    health: &'a StoreHealth,
}

impl crate::descriptors::layout::Counters for RecordedCounters<'_> {
    fn key_prefix(&self) -> &str {
        crate::descriptors::layout::Counters::key_prefix(self.envoy)
    }

    async fn count(
        &self,
        counting: &[crate::descriptors::layout::Counting],
    ) -> Result<Vec<crate::descriptors::layout::Counted>, StoreError> {
        let call = self.health.begin();
        let counted = self.envoy.count_all(counting).await;
        self.health.record(call, &counted);
        counted
    }
}

/// A Redis store's builder for `url` (the password already in it) with its link, TLS files
/// and group commit.
fn redis_builder(
    url: &str,
    link: &StoreLink,
    tls: &TlsFiles,
    redis: &RedisLink,
) -> RedisStoreBuilder {
    let mut builder = RedisStore::builder(url);
    if let Some(timeout) = link.timeout {
        builder = builder.timeout(timeout.0);
    }
    if let Some(timeout) = link.connect_timeout {
        builder = builder.connect_timeout(timeout.0);
    }
    builder = builder.reconnect_on_readonly(redis.reconnect_on_readonly);
    if let Some((threshold, cool_down)) = link.breaker() {
        builder = builder.breaker(threshold, cool_down);
    }
    if let Some(ca) = &tls.tls_ca_file {
        builder = builder.tls_ca_file(ca);
    }
    if let Some((cert, key)) = tls.client_cert() {
        builder = builder.tls_client_cert(cert, key);
    }
    if let Some(max_keys) = redis.batch_max_keys {
        builder = builder.batch_max_keys(max_keys);
    }
    if let Some(calls) = redis.batch_in_flight {
        builder = builder.batch_in_flight(calls);
    }
    builder.tls_skip_hostname_verification(tls.tls_skip_hostname_verification)
}

/// The Redis at `url` (with the password of `redis.password_env`, read with `env`), its
/// builder given the link, TLS and group commit settings and then `tune`; nothing sent yet.
fn open_redis(
    url: &crate::config::store::RedisUrl,
    link: &StoreLink,
    tls: &TlsFiles,
    redis: &RedisLink,
    env: impl Fn(&str) -> Option<String>,
    tune: impl FnOnce(RedisStoreBuilder) -> RedisStoreBuilder,
) -> Result<RedisStore, ConfigFileError> {
    let url = url::with_password(&url.0, redis.password_env.as_deref(), env)?;
    tune(redis_builder(&url, link, tls, redis))
        .build()
        .map_err(|e| ConfigFileError::from_config_error("store", e))
}

/// The Redis of `store.per_second_url`, with the main Redis's settings.
fn per_second_redis(
    written: &str,
    settings: &RedisSettings,
) -> Result<RedisStore, ConfigFileError> {
    let invalid = |why: String| ConfigFileError::invalid("store.per_second_url", why);
    let url = match StoreUrl::parse(written).map_err(|e| invalid(e.to_string()))? {
        StoreUrl::Redis { url, .. } => url,
        other => {
            return Err(invalid(format!(
                "invalid value {}: the per-second store is a Redis",
                other.shown()
            )))
        }
    };
    redis_builder(&url, &settings.link, &settings.tls_files, &settings.redis)
        .build()
        .map_err(|e| ConfigFileError::from_config_error("store.per_second_url", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(config: StoreConfig) -> String {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _context = runtime.enter();
        ServiceStore::from_config(&config).unwrap_err().to_string()
    }

    #[test]
    fn bad_redis_settings_name_the_field() {
        let redis = || StoreConfig::at("redis://u:hunter2@127.0.0.1:1");
        let e = refused(redis().with("timeout", "0s"));
        assert!(e.contains("store.timeout"), "{e}");
        let e = refused(redis().with(
            "breaker",
            std::collections::BTreeMap::from([("cool_down", "0s")]),
        ));
        assert!(e.contains("store.breaker.cool_down"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        for (field, value, says) in [
            ("batch_max_keys", "2000", "at most 1024"),
            ("batch_in_flight", "9", "from 1 to 8"),
            ("nodes", "0", "at least 1"),
            ("startup_retry_first", "0s", "above 0"),
            ("tls_client_cert_file", "c.pem", "needs its key"),
            ("key_prefix", "p", "only store.layout: envoyproxy"),
        ] {
            let value: serde_norway::Value = serde_norway::from_str(value).unwrap();
            let e = refused(redis().with(field, value));
            assert!(e.contains("store.") && e.contains(says), "{field}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn cached_settings_need_cached_mode_and_cached_mode_needs_redis() {
        let e = refused(StoreConfig::default().with("mode", "cached"));
        assert!(e.contains("store.mode"), "{e}");
        let e = refused(StoreConfig::at("redis://127.0.0.1:1").with("sync_interval", "50ms"));
        assert!(e.contains("store.sync_interval"), "{e}");
        let e = refused(
            StoreConfig::at("redis://127.0.0.1:1")
                .with("mode", "cached")
                .with("sync_interval", "7200s"),
        );
        assert!(
            e.contains("store.sync_interval") && e.contains("7200s"),
            "{e}"
        );
    }

    #[test]
    fn memcached_settings_are_checked_by_the_memcached_store() {
        let mc = || StoreConfig::at("memcache://127.0.0.1:1");
        for (config, field, says) in [
            (
                mc().with("max_idle_connections", 0),
                "store.max_idle_connections",
                "at least 1",
            ),
            (
                mc().with("tls_ca_file", "ca.pem"),
                "store.tls",
                "need store.tls: true",
            ),
            (
                mc().with("srv_refresh", "30s"),
                "store.srv_refresh",
                "SRV record",
            ),
            (
                StoreConfig::at("memcache+srv://_m._tcp.example").with("srv_refresh", "0s"),
                "store.srv_refresh",
                "above 0",
            ),
            (
                mc().with("batch_max_keys", 10),
                "store.batch_max_keys",
                "does not take it",
            ),
        ] {
            let e = refused(config);
            assert!(e.contains(field) && e.contains(says), "{field}: {e}");
        }
    }

    #[test]
    fn cached_mode_refuses_all_or_nothing_stages() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _context = runtime.enter();
        let config = crate::config::Config::from_yaml_str(
            "store: {url: 'redis://127.0.0.1:1', mode: cached}\n\
             plans: {free: {algorithm: token_bucket, rate: 10, capacity: 10}}\n\
             default_plan: free\n\
             limiters: {request_rate: {all_or_nothing: true}}\n",
        )
        .unwrap();
        let store = ServiceStore::from_config(&config.store).unwrap();
        assert!(matches!(store.status().mode, "cached"));
        let clock = Arc::new(floodgate::CoarseClock::shared());
        let served = config.build(store.clone(), clock).unwrap();
        let e = store.check(&served).unwrap_err().to_string();
        assert!(e.contains("all_or_nothing") && e.contains("exact"), "{e}");
    }

    #[test]
    fn the_memory_store_has_no_breaker_and_shows_its_kind() {
        let store = ServiceStore::from_config(&StoreConfig::default()).unwrap();
        assert_eq!(store.breaker_state(), None);
        let status = store.status();
        assert_eq!((status.kind, status.url.as_str()), ("memory", "memory"));
        assert!(status.ready());
    }
}
