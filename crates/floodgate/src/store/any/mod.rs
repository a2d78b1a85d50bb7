//! [`AnyStore`]: a store chosen at run time.

use std::sync::Arc;
use std::time::Duration;

#[cfg(any(feature = "redis", feature = "memcached"))]
mod counters;
#[cfg(any(feature = "redis", feature = "memcached"))]
pub use counters::UpstreamCounters;

use super::{Capabilities, KeyedOp, Link, Linked, MemoryStore, Namespaces, Store, StoreUrl};
use crate::algorithm::spec::AnyAlgorithm;
use crate::quota::{ClaimStep, ClaimTerms, Claimed};
use crate::{ConfigError, Decision, Nanos, Op, StoreError};

#[cfg(feature = "redis")]
use super::{CachedStore, RedisStore};

/// A store chosen at run time, from configuration, without a type parameter of its own.
///
/// Limiters are generic over their store, which keeps the memory store's calls free of any
/// dispatch. A program that picks its store from a setting (`memory` on a laptop, a Redis URL
/// in production) would otherwise write this enum itself; [`AnyStore::from_url`] does it:
///
/// ```
/// use floodgate::algorithm::token_bucket::TokenBucket;
/// use floodgate::limiter::KeyedLimit;
/// use floodgate::store::AnyStore;
///
/// // From FLOODGATE_STORE, say; `memory` needs no runtime.
/// let store = AnyStore::from_url("memory")?;
/// let limit = KeyedLimit::new("api", TokenBucket::new(10.0, 20)?, store)?;
/// assert!(limit.check_blocking("alice", 1)?.allowed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Each call is the chosen store's own: the same semantics, errors and atomicity. Clones share
/// the store (its keys, its connection, its [`Namespaces`]).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum AnyStore {
    /// The embedded memory store.
    Memory(Arc<MemoryStore>),
    /// Redis, Redis Cluster or Redis behind Sentinels.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    Redis(RedisStore),
    /// Redis, with this node's cached view of each key.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    Cached(CachedStore),
    /// The durable embedded store: the memory store, journaled to a directory.
    #[cfg(feature = "file")]
    #[cfg_attr(docsrs, doc(cfg(feature = "file")))]
    File(super::FileStore),
    /// memcached servers: the fixed window, exact with atomic `incr`.
    #[cfg(feature = "memcached")]
    #[cfg_attr(docsrs, doc(cfg(feature = "memcached")))]
    Memcached(super::MemcachedStore),
}

impl AnyStore {
    /// A new memory store with the default bound ([`MemoryStore::new`]).
    pub fn memory() -> AnyStore {
        AnyStore::Memory(Arc::new(MemoryStore::new()))
    }

    /// The store `url` names ([`StoreUrl::parse`], the one parser of store URLs): `memory`
    /// (or `memory://`) for a new memory store; a Redis URL (`redis://`, `rediss://`,
    /// `unix://`, `redis[s]-cluster://`, `redis[s]-sentinel://`) for a [`RedisStore`] with its
    /// defaults, which needs the `redis` feature and must be built inside a Tokio runtime.
    /// Anything else, or a store whose feature is not built, is a [`ConfigError`] for field
    /// `url` (with the password, if any, masked).
    pub fn from_url(url: &str) -> Result<AnyStore, ConfigError> {
        let parsed = StoreUrl::parse(url)?;
        #[allow(unused_variables)] // each store whose feature is off uses it
        let not_built = |reason| -> Result<AnyStore, ConfigError> {
            Err(ConfigError::invalid("url", parsed.shown(), reason))
        };
        match &parsed {
            StoreUrl::Memory => Ok(AnyStore::memory()),
            #[cfg(feature = "redis")]
            StoreUrl::Redis { url, .. } => Ok(AnyStore::Redis(RedisStore::builder(url).build()?)),
            #[cfg(not(feature = "redis"))]
            StoreUrl::Redis { .. } => {
                not_built("a Redis store needs the `redis` feature of floodgate-core")
            }
            #[cfg(feature = "memcached")]
            StoreUrl::Memcached { servers } => Ok(AnyStore::Memcached(
                super::MemcachedStore::builder(servers.clone()).build()?,
            )),
            #[cfg(feature = "memcached")]
            StoreUrl::MemcachedSrv { record } => Ok(AnyStore::Memcached(
                super::MemcachedStore::from_srv(record.clone()).build()?,
            )),
            #[cfg(not(feature = "memcached"))]
            StoreUrl::Memcached { .. } | StoreUrl::MemcachedSrv { .. } => {
                not_built("a memcached store needs the `memcached` feature of floodgate-core")
            }
            #[cfg(feature = "file")]
            StoreUrl::File { dir } => super::FileStore::builder(dir)
                .build()
                .map(AnyStore::File)
                .map_err(|e| match e.config_error() {
                    Some(config) => config.clone(),
                    None => ConfigError::invalid(
                        "url",
                        parsed.shown(),
                        "the directory cannot be opened as a store",
                    ),
                }),
            #[cfg(not(feature = "file"))]
            StoreUrl::File { .. } => {
                not_built("the durable file store needs the `file` feature of floodgate-core")
            }
        }
    }

    /// Applies `links` as one atomic step ([`Store::apply_chain`] of a store that
    /// [chains atomically](Capabilities::chains_atomically)): on this store, or, for a cached
    /// store, whose own chains go one link at a time, on the Redis it syncs with. A store that
    /// cannot is refused with [`StoreError::NotOnStore`] before anything is applied.
    pub async fn apply_chain_atomically(
        &self,
        links: &[Link<'_, str, AnyAlgorithm>],
    ) -> Result<Vec<Linked>, StoreError> {
        #[cfg(feature = "redis")]
        if let AnyStore::Cached(cached) = self {
            return Box::pin(cached.redis().apply_chain(links)).await;
        }
        if !self.chains_atomically() {
            return Err(StoreError::NotOnStore {
                store: self.kind(),
                algorithm: links.first().map_or("chain", |l| {
                    crate::algorithm::Algorithm::name(l.request.algorithm)
                }),
                reason: "it does not run a chain of links as one atomic step",
            });
        }
        self.apply_chain(links).await
    }

    /// The memory store, if this is one.
    pub fn as_memory(&self) -> Option<&Arc<MemoryStore>> {
        match self {
            AnyStore::Memory(store) => Some(store),
            #[cfg(any(feature = "redis", feature = "file", feature = "memcached"))]
            _ => None,
        }
    }

    /// The Redis store this one calls: the store itself, or the one a cached store syncs
    /// with; `None` for the memory store.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn redis(&self) -> Option<&RedisStore> {
        match self {
            AnyStore::Redis(store) => Some(store),
            AnyStore::Cached(store) => Some(store.redis()),
            _ => None,
        }
    }

    /// The state of the store's circuit breaker (a Redis store's, or the one a cached store
    /// syncs with); `None` for a store in this process, which has none.
    #[cfg(any(feature = "redis", feature = "memcached"))]
    pub fn breaker_state(&self) -> Option<crate::store::BreakerState> {
        match self {
            #[cfg(feature = "redis")]
            AnyStore::Redis(store) => Some(store.breaker_state()),
            #[cfg(feature = "redis")]
            AnyStore::Cached(store) => Some(store.redis().breaker_state()),
            #[cfg(feature = "memcached")]
            AnyStore::Memcached(store) => Some(store.breaker_state()),
            _ => None,
        }
    }

    /// The cached store, if this is one.
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn as_cached(&self) -> Option<&CachedStore> {
        match self {
            AnyStore::Cached(store) => Some(store),
            _ => None,
        }
    }
}

impl From<MemoryStore> for AnyStore {
    fn from(store: MemoryStore) -> Self {
        AnyStore::Memory(Arc::new(store))
    }
}

impl From<Arc<MemoryStore>> for AnyStore {
    fn from(store: Arc<MemoryStore>) -> Self {
        AnyStore::Memory(store)
    }
}

#[cfg(feature = "redis")]
impl From<RedisStore> for AnyStore {
    fn from(store: RedisStore) -> Self {
        AnyStore::Redis(store)
    }
}

#[cfg(feature = "redis")]
impl From<CachedStore> for AnyStore {
    fn from(store: CachedStore) -> Self {
        AnyStore::Cached(store)
    }
}

#[cfg(feature = "memcached")]
impl From<super::MemcachedStore> for AnyStore {
    fn from(store: super::MemcachedStore) -> Self {
        AnyStore::Memcached(store)
    }
}

#[cfg(feature = "file")]
impl From<super::FileStore> for AnyStore {
    fn from(store: super::FileStore) -> Self {
        AnyStore::File(store)
    }
}

/// `$call` on whichever store `$self` holds.
macro_rules! each {
    ($self:expr, $store:ident => $call:expr) => {
        match $self {
            AnyStore::Memory($store) => $call,
            #[cfg(feature = "redis")]
            AnyStore::Redis($store) => $call,
            #[cfg(feature = "redis")]
            AnyStore::Cached($store) => $call,
            #[cfg(feature = "file")]
            AnyStore::File($store) => $call,
            #[cfg(feature = "memcached")]
            AnyStore::Memcached($store) => $call,
        }
    };
}

/// `$call`, a future, awaited on whichever store `$self` holds: the Redis and cached stores'
/// boxed. An async fn's future is as big as its biggest branch, and a caller carries it
/// inline: unboxed, the Redis branch made every call's future kilobytes long, copied at
/// every spawn, for the memory store too (where a decision is ready at once). A Redis call
/// costs a round trip; one allocation more is nothing beside it.
macro_rules! each_boxed {
    ($self:expr, $store:ident => $call:expr) => {
        match $self {
            AnyStore::Memory($store) => $call.await,
            #[cfg(feature = "redis")]
            AnyStore::Redis($store) => Box::pin($call).await,
            #[cfg(feature = "redis")]
            AnyStore::Cached($store) => Box::pin($call).await,
            // Decided in memory at once, as the memory store's: no box.
            #[cfg(feature = "file")]
            AnyStore::File($store) => $call.await,
            #[cfg(feature = "memcached")]
            AnyStore::Memcached($store) => Box::pin($call).await,
        }
    };
}

/// Every question of the port is the held store's own: adding a store is a variant and its
/// arm in `each!`.
impl Capabilities for AnyStore {
    fn kind(&self) -> &'static str {
        each!(self, s => Capabilities::kind(s))
    }

    fn runs(&self, algorithm: &AnyAlgorithm) -> Result<(), StoreError> {
        each!(self, s => Capabilities::runs(s, algorithm))
    }

    fn takes_refunds(&self, algorithm: &AnyAlgorithm) -> bool {
        each!(self, s => Capabilities::takes_refunds(s, algorithm))
    }

    fn is_shared(&self) -> bool {
        each!(self, s => Capabilities::is_shared(s))
    }

    fn chains_atomically(&self) -> bool {
        each!(self, s => Capabilities::chains_atomically(s))
    }

    async fn probe(&self) -> Result<(), StoreError> {
        each_boxed!(self, s => Capabilities::probe(s))
    }

    async fn shared_secret(
        &self,
        key: &str,
        candidate: &str,
    ) -> Result<Option<String>, StoreError> {
        each_boxed!(self, s => Capabilities::shared_secret(s, key, candidate))
    }

    async fn claim(
        &self,
        limit: &str,
        step: ClaimStep<'_>,
        terms: &ClaimTerms,
        now: Nanos,
    ) -> Result<Claimed, StoreError> {
        each_boxed!(self, s => Capabilities::claim(s, limit, step, terms, now))
    }

    fn sweep_claims(&self, now: Nanos, idle: Duration) {
        each!(self, s => Capabilities::sweep_claims(s, now, idle))
    }
}

impl Store<str, AnyAlgorithm> for AnyStore {
    async fn apply(
        &self,
        algorithm: &AnyAlgorithm,
        key: &str,
        op: Op,
    ) -> Result<Decision, StoreError> {
        each_boxed!(self, s => s.apply(algorithm, key, op))
    }

    async fn apply_many(
        &self,
        requests: &[KeyedOp<'_, str, AnyAlgorithm>],
    ) -> Result<Vec<Decision>, StoreError> {
        each_boxed!(self, s => s.apply_many(requests))
    }

    async fn apply_chain(
        &self,
        links: &[Link<'_, str, AnyAlgorithm>],
    ) -> Result<Vec<Linked>, StoreError> {
        each_boxed!(self, s => s.apply_chain(links))
    }

    async fn apply_chain_refused(
        &self,
        links: &[Link<'_, str, AnyAlgorithm>],
    ) -> Result<Vec<Linked>, StoreError> {
        each_boxed!(self, s => s.apply_chain_refused(links))
    }

    fn same_store(&self, other: &Self) -> bool {
        match (self, other) {
            (AnyStore::Memory(a), AnyStore::Memory(b)) => Arc::ptr_eq(a, b),
            #[cfg(feature = "redis")]
            (AnyStore::Redis(a), AnyStore::Redis(b)) => a.same_store(b),
            #[cfg(feature = "redis")]
            (AnyStore::Cached(a), AnyStore::Cached(b)) => a.same_store(b),
            #[cfg(feature = "file")]
            (AnyStore::File(a), AnyStore::File(b)) => a.same_store(b),
            #[cfg(feature = "memcached")]
            (AnyStore::Memcached(a), AnyStore::Memcached(b)) => a.same_store(b),
            #[cfg(any(feature = "redis", feature = "file", feature = "memcached"))]
            _ => false,
        }
    }

    fn namespaces(&self) -> Option<&Namespaces> {
        each!(self, s => Store::<str, AnyAlgorithm>::namespaces(s))
    }

    fn apply_detached(&self, algorithm: &AnyAlgorithm, key: &str, op: Op) {
        each!(self, s => s.apply_detached(algorithm, key, op))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::token_bucket::TokenBucket;
    use crate::limiter::KeyedLimit;

    #[test]
    fn memory_is_named_and_other_urls_are_refused_with_the_password_masked() {
        assert!(matches!(
            AnyStore::from_url("memory").unwrap(),
            AnyStore::Memory(_)
        ));
        assert!(matches!(
            AnyStore::from_url("memory://").unwrap(),
            AnyStore::Memory(_)
        ));
        let e = AnyStore::from_url("mysql://root:hunter2@db:3306")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`url`") && e.contains("memory"), "{e}");
        assert!(e.contains("root:***@db") && !e.contains("hunter2"), "{e}");
    }

    #[test]
    fn clones_are_one_store() {
        let store = AnyStore::memory();
        let tb = TokenBucket::new(1.0, 1).unwrap();
        let a = KeyedLimit::new("a", tb.clone(), store.clone()).unwrap();
        let b = KeyedLimit::new("a", tb, store.clone()).unwrap();
        assert!(a.check_blocking("k", 1).unwrap().allowed);
        assert!(!b.check_blocking("k", 1).unwrap().allowed);
        assert!(store.same_store(&store.clone()));
        assert!(!store.same_store(&AnyStore::memory()));
    }
}
