//! [`UpstreamCounters`]: the side port of envoyproxy/ratelimit's counters layout, for the
//! stores that can count upstream's keys with upstream's commands, so that upstream's pods and
//! Floodgate count together while one replaces the other.

use super::AnyStore;
use crate::store::CounterIncrement;
#[cfg(feature = "memcached")]
use crate::store::MemcachedStore;
#[cfg(feature = "redis")]
use crate::store::RedisStore;
use crate::StoreError;

/// A store counting upstream's keys: each increment adds to (or, for a refund, takes from) a
/// plain integer counter under the key as given, with the time to live given, and answers
/// the count after it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum UpstreamCounters {
    /// Redis, Redis Cluster or the sentinels' master (`INCRBY` and `EXPIRE`, as upstream).
    #[cfg(feature = "redis")]
    Redis(RedisStore),
    /// memcached servers, keys spread as upstream spreads them (`incr`, created by `add` with
    /// upstream's expiry): exact, where upstream reads, decides and increments later.
    #[cfg(feature = "memcached")]
    Memcached(MemcachedStore),
}

impl UpstreamCounters {
    /// Applies every increment, in order, and answers each counter's value after it.
    pub async fn increment_counters(
        &self,
        increments: &[CounterIncrement<'_>],
    ) -> Result<Vec<u64>, StoreError> {
        match self {
            #[cfg(feature = "redis")]
            UpstreamCounters::Redis(redis) => redis.increment_counters(increments).await,
            #[cfg(feature = "memcached")]
            UpstreamCounters::Memcached(memcached) => {
                memcached.increment_counters(increments).await
            }
        }
    }

    /// The counters' values (0 for an absent one), in order.
    pub async fn read_counters(&self, keys: &[&str]) -> Result<Vec<u64>, StoreError> {
        match self {
            #[cfg(feature = "redis")]
            UpstreamCounters::Redis(redis) => redis.read_counters(keys).await,
            #[cfg(feature = "memcached")]
            UpstreamCounters::Memcached(memcached) => memcached.read_counters(keys).await,
        }
    }

    /// Checks that the store can be used now (see [`crate::store::Capabilities::probe`]).
    pub async fn probe(&self) -> Result<(), StoreError> {
        match self {
            #[cfg(feature = "redis")]
            UpstreamCounters::Redis(redis) => redis.probe().await,
            #[cfg(feature = "memcached")]
            UpstreamCounters::Memcached(memcached) => memcached.probe().await,
        }
    }
}

impl AnyStore {
    /// The store's counters in upstream's layout, if it keeps them: a Redis store in exact
    /// mode, memcached. `None` for a store in this process (upstream's pods could not share
    /// it) and for a cached store (upstream's layout counts every hit at the store).
    pub fn upstream_counters(&self) -> Option<UpstreamCounters> {
        match self {
            #[cfg(feature = "redis")]
            AnyStore::Redis(redis) => Some(UpstreamCounters::Redis(redis.clone())),
            #[cfg(feature = "memcached")]
            AnyStore::Memcached(memcached) => Some(UpstreamCounters::Memcached(memcached.clone())),
            _ => None,
        }
    }
}
