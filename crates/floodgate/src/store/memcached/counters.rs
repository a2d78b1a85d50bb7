//! envoyproxy/ratelimit's own counters on memcached ([`MemcachedStore::increment_counters`],
//! [`MemcachedStore::read_counters`]): keys exactly as given (the service builds upstream's
//! `domain_key_value_windowstart`), each holding a bare count, so that Floodgate and
//! upstream's pods count in the same keys on the same servers (picked as gomemcache picks).
//!
//! Unlike upstream, which reads with `GetMulti` and increments afterwards in the background,
//! each increment here is `incr` (`add` with the TTL when the key is absent, `incr` again when
//! another writer's `add` won) and answers the count *after* it, exactly. A refund is `decr`
//! (never below 0; memcached keeps a 0 where Redis deletes). memcached has no `EXPIRE` for an
//! existing key: the TTL is set when the key is created, as upstream sets it.

use super::job::Job;
use super::MemcachedStore;
use crate::store::CounterIncrement;
use crate::StoreError;

impl MemcachedStore {
    /// For each increment, in order: `incr key by` (creating the key with `add`, expiring
    /// after `ttl_seconds`, when absent), or with `refund` a `decr key by`; all of a server's
    /// in one write per round, the servers at once, under each server's timeout and breaker.
    /// The counts after each, in order (a refund of an absent key: 0).
    ///
    /// Each key's count is exact (`incr` is atomic); the calls are not a transaction: a
    /// failure part-way may leave some keys counted. A key memcached would refuse (over 250
    /// bytes, a space or control character) is refused with [`StoreError::NotOnStore`]
    /// before anything is sent; a key holding something other than a count, with
    /// [`StoreError::StateConflict`].
    pub async fn increment_counters(
        &self,
        increments: &[CounterIncrement<'_>],
    ) -> Result<Vec<u64>, StoreError> {
        let mut jobs = increments
            .iter()
            .map(|i| {
                super::protocol::check_key(i.key)?;
                let ttl = u32::try_from(i.ttl_seconds.max(1)).unwrap_or(u32::MAX);
                Ok(if i.refund {
                    Job::give_back(i.key.to_owned(), i.by)
                } else if i.by == 0 {
                    // `incr 0` on an absent key would `add` a 0: a read says the same.
                    Job::read(i.key.to_owned())
                } else {
                    Job::count(i.key.to_owned(), i.by, ttl)
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        self.counted(&mut jobs).await
    }

    /// The counts under `keys` (0 for a key that holds nothing), read with `get`, all of a
    /// server's in one write, under each server's timeout and breaker.
    pub async fn read_counters(&self, keys: &[&str]) -> Result<Vec<u64>, StoreError> {
        let mut jobs = keys
            .iter()
            .map(|key| {
                super::protocol::check_key(key)?;
                Ok(Job::read((*key).to_owned()))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        self.counted(&mut jobs).await
    }

    async fn counted(&self, jobs: &mut [Job]) -> Result<Vec<u64>, StoreError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let mut refs: Vec<&mut Job> = jobs.iter_mut().collect();
        self.inner.run(&mut refs).await?;
        jobs.iter()
            .map(|j| {
                j.count.ok_or_else(|| {
                    StoreError::Unavailable(format!("memcached key {} was not counted", j.key))
                })
            })
            .collect()
    }
}
