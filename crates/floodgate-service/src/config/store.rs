//! The `store` section: which store limits count in, and its settings (see [`crate::store`]).
//!
//! The section is read as written ([`StoreConfig`]: the URL, and the other fields kept as
//! the file writes them), and typed once the store's kind is known ([`StoreConfig::settings`]):
//! the URL, after `--store`, `FLOODGATE_STORE` and upstream's variables have had their say,
//! names the kind, and the fields are read into that kind's settings ([`kinds`]), so that a
//! field the kind does not take is refused, naming the field, the kind and the kinds that take
//! it, and every value is checked once, by the type that holds it.

use std::collections::BTreeMap;
use std::time::Duration;

use floodgate::duration::SpecDuration;
use floodgate::store::StoreUrl;
use serde::Deserialize;
use serde_norway::Value;

use crate::config::ConfigFileError;

pub mod kinds;

use self::kinds::Kind;
pub use self::kinds::{
    Bound, CachedSettings, FileSettings, Link, MemcachedServers, MemcachedSettings, MemorySettings,
    RedisLink, RedisSettings, RedisUrl, StartupWait, TlsFiles, UpstreamLayout,
};

/// The `store:` section as written (see the [module documentation](self)).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct StoreConfig {
    /// Which store: `memory` (the default, also when absent), `file:///dir`,
    /// `redis://[user[:password]@]host:port[/db]` (and the other Redis URLs) or
    /// `memcache://host:port,…` (see [`StoreUrl`]). `serve --store URL` overrides it. Read
    /// once at start-up: a reload keeps the store.
    #[serde(default)]
    pub url: Option<String>,
    /// Every other field, as written, until the kind is known.
    #[serde(flatten)]
    written: BTreeMap<String, Value>,
}

/// The kinds of store, as the `store:` section types them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// The embedded memory store.
    Memory,
    /// The durable file store.
    File,
    /// A Redis deciding every call.
    Redis,
    /// A Redis behind this node's views (`mode: cached`).
    Cached,
    /// memcached servers.
    Memcached,
}

impl StoreKind {
    /// Every kind.
    pub const ALL: [StoreKind; 5] = [
        StoreKind::Memory,
        StoreKind::File,
        StoreKind::Redis,
        StoreKind::Cached,
        StoreKind::Memcached,
    ];

    /// How errors name it: `the memory store`, `cached mode`…
    pub fn named(self) -> &'static str {
        match self {
            StoreKind::Memory => "the memory store",
            StoreKind::File => "the file store",
            StoreKind::Redis => "a Redis store",
            StoreKind::Cached => "cached mode (store.mode: cached)",
            StoreKind::Memcached => "a memcached store",
        }
    }

    /// Whether this kind's settings have a field `field`.
    pub fn takes(self, field: &str) -> bool {
        let one = BTreeMap::from([(field.to_string(), Value::Null)]);
        // A field the kind has lands in its settings (or fails to, being null); one it has not
        // lands among the unknown.
        fn known<T: Kind>(one: &BTreeMap<String, Value>) -> bool {
            !matches!(read::<T>(one), Ok(settings) if !settings.unknown().is_empty())
        }
        field == "mode"
            || match self {
                StoreKind::Memory => known::<MemorySettings>(&one),
                StoreKind::File => known::<FileSettings>(&one),
                StoreKind::Redis => known::<RedisSettings>(&one),
                StoreKind::Cached => known::<CachedSettings>(&one),
                StoreKind::Memcached => known::<MemcachedSettings>(&one),
            }
    }
}

/// The `store:` section typed by its kind: what [`StoreConfig::settings`] answers.
#[derive(Clone, Debug, PartialEq)]
pub enum StoreSettings {
    /// `memory`.
    Memory(MemorySettings),
    /// `file:///dir`.
    File(FileSettings),
    /// A Redis URL, `mode: exact`.
    Redis(RedisSettings),
    /// A Redis URL, `mode: cached`.
    Cached(CachedSettings),
    /// `memcache://…` or `memcache+srv://…`.
    Memcached(MemcachedSettings),
}

impl StoreSettings {
    /// Which kind.
    pub fn kind(&self) -> StoreKind {
        match self {
            StoreSettings::Memory(_) => StoreKind::Memory,
            StoreSettings::File(_) => StoreKind::File,
            StoreSettings::Redis(_) => StoreKind::Redis,
            StoreSettings::Cached(_) => StoreKind::Cached,
            StoreSettings::Memcached(_) => StoreKind::Memcached,
        }
    }

    /// What a store other processes share takes: how many share it, its link, its start-up
    /// and its TLS files (`None` for the memory and file stores).
    pub fn shared(&self) -> Option<(u32, &Link, &StartupWait, &TlsFiles)> {
        match self {
            StoreSettings::Memory(_) | StoreSettings::File(_) => None,
            StoreSettings::Redis(s) => Some((s.nodes, &s.link, &s.startup, &s.tls_files)),
            StoreSettings::Cached(s) => Some((s.nodes, &s.link, &s.startup, &s.tls_files)),
            StoreSettings::Memcached(s) => Some((s.nodes, &s.link, &s.startup, &s.tls_files)),
        }
    }

    /// How many processes share the store (1 for the memory and file stores).
    pub fn nodes(&self) -> u32 {
        self.shared().map_or(1, |(nodes, ..)| nodes)
    }

    /// How start-up waits for the store (the defaults where it needs no wait).
    pub fn startup(&self) -> StartupWait {
        self.shared()
            .map(|(_, _, startup, _)| *startup)
            .unwrap_or_default()
    }

    /// `store.password_env`, for a Redis.
    pub fn password_env(&self) -> Option<&str> {
        match self {
            StoreSettings::Redis(s) => s.redis.password_env.as_deref(),
            StoreSettings::Cached(s) => s.redis.password_env.as_deref(),
            _ => None,
        }
    }

    /// Where the Envoy rules' windows count, on a store that keeps upstream's counters.
    pub fn layout(&self) -> Option<&UpstreamLayout> {
        match self {
            StoreSettings::Redis(s) => Some(&s.layout),
            StoreSettings::Memcached(s) => Some(&s.layout),
            _ => None,
        }
    }

    /// Whether decisions are cached on this node (`mode: cached`).
    pub fn is_cached(&self) -> bool {
        matches!(self, StoreSettings::Cached(_))
    }
}

/// What `store.url` (or `--store`) holds when it names the memory store, and what it reads as
/// when absent.
pub const MEMORY: &str = "memory";

impl StoreConfig {
    /// The section with `url` and nothing else written.
    pub fn at(url: impl Into<String>) -> StoreConfig {
        StoreConfig {
            url: Some(url.into()),
            written: BTreeMap::new(),
        }
    }

    /// This section with `field` written as `value` (see [`StoreConfig::set`]).
    pub fn with(mut self, field: &str, value: impl serde::Serialize) -> StoreConfig {
        self.set(field, value);
        self
    }

    /// Writes `field` as `value` (a duration as its text, `"20ms"`, or as
    /// [`StoreConfig::duration`] writes it), as the file would: checked with the rest by
    /// [`StoreConfig::settings`]. A value that has no YAML form writes nothing.
    pub fn set(&mut self, field: &str, value: impl serde::Serialize) {
        if let Ok(value) = serde_norway::to_value(value) {
            self.written.insert(field.to_string(), value);
        }
    }

    /// `duration` as a field's value: its nanoseconds, `"1500000ns"`.
    pub fn duration(duration: Duration) -> String {
        format!("{}ns", duration.as_nanos())
    }

    /// Whether the section writes `field` (set by the file or by [`StoreConfig::set`]).
    pub fn writes(&self, field: &str) -> bool {
        self.written.contains_key(field)
    }

    /// The value written for `field`, if any.
    pub fn written(&self, field: &str) -> Option<&Value> {
        self.written.get(field)
    }

    /// The URL, read (`memory` when absent).
    pub fn store_url(&self) -> Result<StoreUrl, ConfigFileError> {
        StoreUrl::parse(self.url.as_deref().unwrap_or(MEMORY))
            .map_err(|e| ConfigFileError::from_config_error("store", e))
    }

    /// `store.mode` (`exact` when absent).
    fn mode(&self) -> Result<StoreMode, ConfigFileError> {
        match self.written.get("mode") {
            None => Ok(StoreMode::Exact),
            Some(mode) => serde_norway::from_value(mode.clone())
                .map_err(|e| ConfigFileError::invalid("store.mode", e.to_string())),
        }
    }

    /// The kind the URL and `mode` name.
    pub fn kind(&self) -> Result<StoreKind, ConfigFileError> {
        let url = self.store_url()?;
        Ok(match (url, self.mode()?) {
            (StoreUrl::Redis { .. }, StoreMode::Cached) => StoreKind::Cached,
            (_, StoreMode::Cached) => {
                return Err(ConfigFileError::invalid(
                    "store.mode",
                    "invalid value cached: cached mode syncs with a Redis; give store.url a redis://, rediss:// or redis-cluster:// URL",
                ))
            }
            (StoreUrl::Memory, _) => StoreKind::Memory,
            (StoreUrl::File { .. }, _) => StoreKind::File,
            (StoreUrl::Redis { .. }, _) => StoreKind::Redis,
            (StoreUrl::Memcached { .. } | StoreUrl::MemcachedSrv { .. }, _) => StoreKind::Memcached,
        })
    }

    /// Whether the store the section names now takes `field` (`false` when its URL or mode
    /// cannot be read): for settings filled in from elsewhere (upstream's variables) only
    /// where they apply.
    pub fn takes(&self, field: &str) -> bool {
        self.kind().is_ok_and(|kind| kind.takes(field))
    }

    /// The section typed by its kind, every value checked: the one check of the store's
    /// settings. A field the kind does not take, or a value of the wrong type, is refused
    /// naming the field (`store.tls: a Redis store does not take it (a memcached store does)`).
    pub fn settings(&self) -> Result<StoreSettings, ConfigFileError> {
        let url = self.store_url()?;
        let kind = self.kind()?;
        let mut fields = self.written.clone();
        fields.remove("mode");
        let settings = match (kind, url) {
            (StoreKind::Memory, _) => StoreSettings::Memory(typed(kind, &fields)?),
            (StoreKind::File, StoreUrl::File { dir }) => StoreSettings::File(FileSettings {
                dir,
                ..typed(kind, &fields)?
            }),
            (StoreKind::Redis, StoreUrl::Redis { url, .. }) => {
                StoreSettings::Redis(RedisSettings {
                    url: RedisUrl(url),
                    ..typed(kind, &fields)?
                })
            }
            (StoreKind::Cached, StoreUrl::Redis { url, .. }) => {
                StoreSettings::Cached(CachedSettings {
                    url: RedisUrl(url),
                    ..typed(kind, &fields)?
                })
            }
            (StoreKind::Memcached, StoreUrl::Memcached { servers }) => {
                StoreSettings::Memcached(MemcachedSettings {
                    servers: MemcachedServers::List(servers),
                    ..typed(kind, &fields)?
                })
            }
            (StoreKind::Memcached, StoreUrl::MemcachedSrv { record }) => {
                StoreSettings::Memcached(MemcachedSettings {
                    servers: MemcachedServers::Srv(record),
                    ..typed(kind, &fields)?
                })
            }
            (kind, url) => {
                return Err(ConfigFileError::invalid(
                    "store.url",
                    format!("{} does not name {}", url.shown(), kind.named()),
                ))
            }
        };
        match &settings {
            StoreSettings::Memory(s) => s.check(),
            StoreSettings::File(s) => s.check(),
            StoreSettings::Redis(s) => s.check(),
            StoreSettings::Cached(s) => s.check(),
            StoreSettings::Memcached(s) => s.check(),
        }?;
        Ok(settings)
    }

    /// The check made when the file is read, before the URL is final (`--store`,
    /// `FLOODGATE_STORE` and upstream's variables may still name another store): a section
    /// that writes its URL, or only what the memory store takes, is checked as
    /// [`StoreConfig::settings`] checks it; any other must give every field a value of the
    /// right type for some store that takes it.
    pub fn check_written(&self) -> Result<(), ConfigFileError> {
        let memory = || self.written.keys().all(|f| StoreKind::Memory.takes(f));
        if self.url.is_some() || (self.mode()? == StoreMode::Exact && memory()) {
            return self.settings().map(|_| ());
        }
        for (field, value) in &self.written {
            if field == "mode" {
                continue;
            }
            let one = BTreeMap::from([(field.clone(), value.clone())]);
            let takers: Vec<StoreKind> = StoreKind::ALL
                .into_iter()
                .filter(|k| k.takes(field))
                .collect();
            let Some(&first) = takers.first() else {
                return Err(not_taken(None, field));
            };
            // Refused only when no store that takes the field can read its value: then with
            // the first such store's reason.
            if !takers.iter().any(|&k| typed_as(k, &one).is_ok()) {
                typed_as(first, &one)?;
            }
        }
        Ok(())
    }

    /// Puts `url` in place of the URL the section wrote (or the memory store it meant by
    /// writing none), and drops the fields written for that store that the store `url` names
    /// does not take: their names, for a warning. A field the section's own store does not
    /// take either stays, to be refused (or taken) as written.
    pub fn replace_url(&mut self, url: String) -> Vec<String> {
        let before = self.kind();
        self.url = Some(url);
        let mut dropped = Vec::new();
        // Cached mode written for a Redis goes with it.
        if before == Ok(StoreKind::Cached) && self.kind().is_err() {
            self.written.remove("mode");
            dropped.push("mode".to_string());
        }
        let (Ok(before), Ok(kind)) = (before, self.kind()) else {
            return dropped;
        };
        dropped.extend(
            self.written
                .keys()
                .filter(|field| before.takes(field) && !kind.takes(field))
                .cloned(),
        );
        for field in &dropped {
            self.written.remove(field);
        }
        dropped
    }

    /// The fields `new` writes otherwise than this section, each as `store.field`: `store.url`
    /// first, then the fields in order.
    pub fn changed_in(&self, new: &StoreConfig) -> Vec<String> {
        let url = (self.url != new.url).then(|| "store.url".to_string());
        let fields = self
            .written
            .keys()
            .chain(
                new.written
                    .keys()
                    .filter(|f| !self.written.contains_key(*f)),
            )
            .filter(|f| self.written.get(*f) != new.written.get(*f))
            .map(|f| format!("store.{f}"));
        url.into_iter().chain(fields).collect()
    }

    /// `store.nodes` as written (1 when absent or unreadable; [`StoreConfig::settings`]
    /// refuses a bad value): what the pipeline's failure policy divides a limit by, read again
    /// on every reload as the rest of the file is.
    pub fn nodes(&self) -> u32 {
        self.written
            .get("nodes")
            .and_then(|n| serde_norway::from_value::<u32>(n.clone()).ok())
            .filter(|&n| n > 0)
            .unwrap_or(1)
    }
}

fn read<T: Kind>(fields: &BTreeMap<String, Value>) -> Result<T, serde_norway::Error> {
    let map = fields
        .iter()
        .map(|(k, v)| (Value::String(k.clone()), v.clone()))
        .collect();
    serde_norway::from_value(Value::Mapping(map))
}

/// `fields` read as `kind`'s settings `T`, or the error naming the first field it does not
/// take or cannot read.
fn typed<T: Kind>(kind: StoreKind, fields: &BTreeMap<String, Value>) -> Result<T, ConfigFileError> {
    match read::<T>(fields) {
        Ok(settings) => match settings.unknown().keys().next() {
            None => Ok(settings),
            Some(field) => Err(not_taken(Some(kind), field)),
        },
        Err(whole) => {
            // The error of the one field that fails alone (every field has a default), named.
            for (field, value) in fields {
                let one = BTreeMap::from([(field.clone(), value.clone())]);
                if let Err(e) = read::<T>(&one) {
                    return Err(ConfigFileError::invalid(
                        format!("store.{field}"),
                        e.to_string(),
                    ));
                }
            }
            Err(ConfigFileError::invalid("store", whole.to_string()))
        }
    }
}

/// [`typed`] for `kind`, the settings themselves not kept.
fn typed_as(kind: StoreKind, fields: &BTreeMap<String, Value>) -> Result<(), ConfigFileError> {
    match kind {
        StoreKind::Memory => typed::<MemorySettings>(kind, fields).map(drop),
        StoreKind::File => typed::<FileSettings>(kind, fields).map(drop),
        StoreKind::Redis => typed::<RedisSettings>(kind, fields).map(drop),
        StoreKind::Cached => typed::<CachedSettings>(kind, fields).map(drop),
        StoreKind::Memcached => typed::<MemcachedSettings>(kind, fields).map(drop),
    }
}

/// The error for `field`, which `kind` (or, with `None`, no store) does not take, naming the
/// kinds that do.
fn not_taken(kind: Option<StoreKind>, field: &str) -> ConfigFileError {
    let takers: Vec<&str> = StoreKind::ALL
        .into_iter()
        .filter(|k| k.takes(field))
        .map(StoreKind::named)
        .collect();
    let message = match (kind, takers.is_empty()) {
        (_, true) => "unknown field: no store takes it".to_string(),
        (Some(kind), false) => format!(
            "{} does not take it (taken by {})",
            kind.named(),
            takers.join(", ")
        ),
        (None, false) => format!("taken by {}", takers.join(", ")),
    };
    ConfigFileError::invalid(format!("store.{field}"), message)
}

/// How the Envoy rules' fixed windows are kept (see [`UpstreamLayout::layout`]).
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
/// [`Bound::overflow`]).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize, clap::ValueEnum,
)]
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

/// How the service uses a Redis store (`store.mode`).
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
