//! [`UpstreamCounters`]: the side port of envoyproxy/ratelimit's counters layout, for the
//! stores that can count upstream's keys with upstream's commands, so that upstream's pods and
//! Floodgate count together while one replaces the other.

use super::AnyStore;
use crate::store::redis::{CounterIncrement, RedisStore};
use crate::StoreError;

/// A store counting upstream's keys: each increment adds to (or, for a refund, takes from) a
/// plain integer counter under the key as given, with the time to live given, and answers
/// the count after it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum UpstreamCounters {
    /// Redis, Redis Cluster or the sentinels' master (`INCRBY` and `EXPIRE`, as upstream).
    Redis(RedisStore),
}

impl UpstreamCounters {
    /// Applies every increment, in order, and answers each counter's value after it.
    pub async fn increment_counters(
        &self,
        increments: &[CounterIncrement<'_>],
    ) -> Result<Vec<u64>, StoreError> {
        match self {
            UpstreamCounters::Redis(redis) => redis.increment_counters(increments).await,
        }
    }

    /// The counters' values (0 for an absent one), in order.
    pub async fn read_counters(&self, keys: &[&str]) -> Result<Vec<u64>, StoreError> {
        match self {
            UpstreamCounters::Redis(redis) => redis.read_counters(keys).await,
        }
    }

    /// Checks that the store can be used now (see [`crate::store::Capabilities::probe`]).
    pub async fn probe(&self) -> Result<(), StoreError> {
        match self {
            UpstreamCounters::Redis(redis) => redis.probe().await,
        }
    }
}

impl AnyStore {
    /// The store's counters in upstream's layout, if it keeps them: a Redis store in exact
    /// mode. `None` for a store in this process (upstream's pods could not share it) and for
    /// a cached store (upstream's layout counts every hit at the store).
    pub fn upstream_counters(&self) -> Option<UpstreamCounters> {
        match self {
            AnyStore::Redis(redis) => Some(UpstreamCounters::Redis(redis.clone())),
            _ => None,
        }
    }
}
