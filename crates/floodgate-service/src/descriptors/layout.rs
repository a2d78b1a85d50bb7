//! envoyproxy/ratelimit's layout of fixed windows in Redis (`store.layout: envoyproxy`), so
//! that Floodgate and upstream's pods count in the same keys while one replaces the other: a
//! rolling update runs both side by side, and with separate keys a limit of N would admit up to
//! 2N.
//!
//! # Keys and commands (as upstream counts)
//!
//! A descriptor whose limit is an Envoy window (`requests_per_unit` per `unit`, or a request's
//! own `limit`) counts under
//!
//! ```text
//! key_prefix + domain + "_" + (key + "_" + value + "_") for each entry + window start
//! ```
//!
//! where the entries are the request's, in order, with the request's values (a value matched
//! by a wildcard with `share_threshold` is written as the wildcard's pattern), and the window
//! start is the current Unix second rounded down to the unit (second 1, minute 60, hour 3,600,
//! day 86,400, week 604,800, month 2,592,000, year 31,536,000 seconds), read from this node's
//! clock as upstream reads its own. Nothing is escaped, as upstream. Each call sends, in one
//! pipeline (on a cluster, one per key, all at once), `INCRBY key hits` and `EXPIRE key ttl`
//! for each such descriptor, `ttl` being the unit's seconds plus a whole number of seconds
//! drawn uniformly below `expiration_jitter` (upstream's `EXPIRATION_JITTER_MAX_SECONDS`). A
//! unit `second` window counts in the per-second Redis when there is one
//! (`REDIS_PERSECOND_URL`).
//!
//! # Answers (as upstream answers)
//!
//! With `after` the count `INCRBY` returned and `limit` the `requests_per_unit`: over the limit
//! when `after > limit` (`limit_remaining` 0), else `OK` with `limit_remaining = limit -
//! after`; `duration_until_reset` is the whole seconds left in the window. A refused hit is
//! **counted**, as upstream counts it (`requests_per_unit: 0` too), unless
//! `stop_increment_when_over_limit` (`STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`): then the
//! counts are read first (`GET`, one more round trip) and, when some descriptor would go over,
//! only those are incremented. A shadow-mode rule over its limit answers `OK` with
//! `limit_remaining` 0.
//!
//! The over-limit cache (`over_limit_cache_bytes`, upstream's `LOCAL_CACHE_SIZE_IN_BYTES`)
//! remembers the keys Redis found over their limit until their TTL of one unit has passed,
//! and answers them over the limit without sending anything: since a key names its window, a
//! remembered key never outlives what it says.
//!
//! Limits that are one of Floodgate's algorithms (`{algorithm: …}`) are not upstream's and
//! keep Floodgate's keys; `all_or_nothing` cannot be kept by upstream's commands and is refused
//! with this layout.

use floodgate::algorithm::fixed_window::Unit;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floodgate::store::redis::CounterIncrement;
use floodgate::store::UpstreamCounters;
use floodgate::{Clock, StoreError};

use super::keys::push_envoy_key;

/// The settings and the Redis stores of the `envoyproxy` layout (see the [module
/// documentation](self)).
#[derive(Clone)]
pub struct EnvoyCounters {
    main: UpstreamCounters,
    per_second: Option<UpstreamCounters>,
    prefix: String,
    jitter_max_seconds: u64,
    stop_increment: bool,
    cache: Option<Arc<OverLimitCache>>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for EnvoyCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvoyCounters")
            .field("per_second", &self.per_second.is_some())
            .field("prefix", &self.prefix)
            .field("jitter_max_seconds", &self.jitter_max_seconds)
            .field("stop_increment", &self.stop_increment)
            .field("cache", &self.cache.is_some())
            .finish()
    }
}

/// One descriptor to count in upstream's layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counting {
    /// Its key (without the window start, which the call adds).
    pub key: String,
    /// Its limit's unit.
    pub unit: Unit,
    /// Its limit's `requests_per_unit`.
    pub limit: u32,
    /// Its hits.
    pub hits: u64,
    /// The hits are given back (`is_negative_hits`), not added.
    pub refund: bool,
}

/// Where a call counts the descriptors of upstream's layout: [`EnvoyCounters`], or the
/// service's store around them (which records the calls in its health).
pub trait Counters: Sync {
    /// The prefix of every key.
    fn key_prefix(&self) -> &str;

    /// Counts every descriptor of one call, in order (see the [module documentation](self)).
    fn count<'a>(
        &'a self,
        counting: &'a [Counting],
    ) -> impl std::future::Future<Output = Result<Vec<Counted>, StoreError>> + Send + 'a;
}

impl Counters for EnvoyCounters {
    fn key_prefix(&self) -> &str {
        &self.prefix
    }

    fn count<'a>(
        &'a self,
        counting: &'a [Counting],
    ) -> impl std::future::Future<Output = Result<Vec<Counted>, StoreError>> + Send + 'a {
        self.count_all(counting)
    }
}

/// What counting one descriptor found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    /// The count before this request's hits (`after - hits`, or what was read).
    pub before: u64,
    /// The count after them (equal to `before` when they were not counted).
    pub after: u64,
    /// Whether it is over its limit.
    pub over: bool,
    /// Whether the over-limit cache answered, without Redis.
    pub from_cache: bool,
    /// The whole seconds left in its window.
    pub reset: Duration,
}

impl EnvoyCounters {
    /// Counters in `main` (and `per_second`, for windows of a second), keys written after
    /// `prefix`, TTLs jittered below `jitter_max_seconds`, hits that would go over counted only
    /// on those with `stop_increment`, an over-limit cache of about `cache_bytes` (0: none),
    /// time read from `clock`.
    pub fn new(
        main: UpstreamCounters,
        per_second: Option<UpstreamCounters>,
        prefix: String,
        jitter_max_seconds: u64,
        stop_increment: bool,
        cache_bytes: u64,
        clock: Arc<dyn Clock>,
    ) -> EnvoyCounters {
        EnvoyCounters {
            main,
            per_second,
            prefix,
            jitter_max_seconds,
            stop_increment,
            cache: (cache_bytes > 0).then(|| Arc::new(OverLimitCache::new(cache_bytes))),
            clock,
        }
    }

    /// The per-second store, if any.
    pub fn per_second(&self) -> Option<&UpstreamCounters> {
        self.per_second.as_ref()
    }

    /// Counts every descriptor of one call (see the [module documentation](self)).
    pub async fn count_all(&self, counting: &[Counting]) -> Result<Vec<Counted>, StoreError> {
        let now = self.clock.now().0 / 1_000_000_000;
        let keys: Vec<String> = counting
            .iter()
            .map(|c| {
                let divider = c.unit.duration().as_secs();
                format!("{}{}", c.key, now / divider * divider)
            })
            .collect();
        let reset: Vec<Duration> = counting
            .iter()
            .map(|c| {
                let divider = c.unit.duration().as_secs();
                Duration::from_secs(divider - now % divider)
            })
            .collect();
        // A refund always reaches Redis: it may bring a key back under its limit.
        let cached: Vec<bool> = keys
            .iter()
            .zip(counting)
            .map(|(k, c)| !c.refund && self.cache.as_ref().is_some_and(|cache| cache.holds(k, now)))
            .collect();
        let adding = self.additions(&keys, counting, &cached).await?;
        let sent: Vec<usize> = (0..counting.len()).filter(|&i| !cached[i]).collect();
        let counts = self.increment(&keys, counting, &adding, &sent).await?;
        let mut out = Vec::with_capacity(counting.len());
        let mut next = counts.into_iter();
        for (i, c) in counting.iter().enumerate() {
            let limit = u64::from(c.limit);
            if cached[i] {
                out.push(Counted {
                    before: limit,
                    after: limit,
                    over: true,
                    from_cache: true,
                    reset: reset[i],
                });
                continue;
            }
            let after = next.next().unwrap_or_default();
            out.push(self.judged(c, &keys[i], after, adding[i], reset[i], now));
        }
        Ok(out)
    }

    /// What each descriptor adds: its hits, or, stopping increments, 0 for all but those that
    /// would go over, when one would (read first; when one is over in the cache, nothing is
    /// added). A refund always gives its hits back.
    async fn additions(
        &self,
        keys: &[String],
        counting: &[Counting],
        cached: &[bool],
    ) -> Result<Vec<u64>, StoreError> {
        let mut adding: Vec<u64> = counting.iter().map(|c| c.hits).collect();
        if !self.stop_increment {
            return Ok(adding);
        }
        let added_to = if cached.iter().any(|&c| c) {
            vec![false; counting.len()]
        } else {
            let current = self.read(keys, counting).await?;
            let would: Vec<bool> = counting
                .iter()
                .zip(&current)
                .map(|(c, n)| !c.refund && n.saturating_add(c.hits) > u64::from(c.limit))
                .collect();
            if !would.iter().any(|&w| w) {
                return Ok(adding);
            }
            would
        };
        for ((a, w), c) in adding.iter_mut().zip(&added_to).zip(counting) {
            if !w && !c.refund {
                *a = 0;
            }
        }
        Ok(adding)
    }

    /// A descriptor counted in Redis, judged: `after` is its count now, `adding` what this
    /// call added to `key`; the over-limit cache learns or forgets the key.
    fn judged(
        &self,
        c: &Counting,
        key: &str,
        after: u64,
        adding: u64,
        reset: Duration,
        now: u64,
    ) -> Counted {
        if c.refund {
            // Never over: what was given back cannot refuse anything. The key may be under
            // its limit again, so the cache forgets it.
            if let Some(cache) = &self.cache {
                cache.forget(key);
            }
            return Counted {
                before: after.saturating_add(adding),
                after,
                over: false,
                from_cache: false,
                reset,
            };
        }
        let before = after.saturating_sub(adding);
        // As upstream: judged on the count now, whether this call added to it or not.
        let over = after > u64::from(c.limit);
        if over {
            if let Some(cache) = &self.cache {
                cache.remember(key, now + c.unit.duration().as_secs());
            }
        }
        Counted {
            before,
            after,
            over,
            from_cache: false,
            reset,
        }
    }

    fn store_for(&self, unit: Unit) -> &UpstreamCounters {
        match (&self.per_second, unit) {
            (Some(per_second), Unit::Second) => per_second,
            _ => &self.main,
        }
    }

    /// `INCRBY` + `EXPIRE` of the `sent` descriptors, on the main store and the per-second
    /// one; the counts in `sent`'s order.
    async fn increment(
        &self,
        keys: &[String],
        counting: &[Counting],
        adding: &[u64],
        sent: &[usize],
    ) -> Result<Vec<u64>, StoreError> {
        let mut counts = vec![0; sent.len()];
        for per_second in [false, true] {
            let chosen: Vec<usize> = (0..sent.len())
                .filter(|&j| {
                    let unit = counting[sent[j]].unit;
                    (self.per_second.is_some() && unit == Unit::Second) == per_second
                })
                .collect();
            let Some(&first) = chosen.first() else {
                continue;
            };
            let increments: Vec<CounterIncrement<'_>> = chosen
                .iter()
                .map(|&j| {
                    let i = sent[j];
                    CounterIncrement {
                        key: &keys[i],
                        by: adding[i],
                        refund: counting[i].refund,
                        ttl_seconds: counting[i].unit.duration().as_secs() + self.jitter(),
                    }
                })
                .collect();
            let store = self.store_for(counting[sent[first]].unit);
            for (j, count) in chosen
                .iter()
                .zip(store.increment_counters(&increments).await?)
            {
                counts[*j] = count;
            }
        }
        Ok(counts)
    }

    /// The counts now, for `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`.
    async fn read(&self, keys: &[String], counting: &[Counting]) -> Result<Vec<u64>, StoreError> {
        let mut counts = vec![0; keys.len()];
        for per_second in [false, true] {
            let chosen: Vec<usize> = (0..keys.len())
                .filter(|&i| {
                    (self.per_second.is_some() && counting[i].unit == Unit::Second) == per_second
                })
                .collect();
            let Some(&first) = chosen.first() else {
                continue;
            };
            let names: Vec<&str> = chosen.iter().map(|&i| keys[i].as_str()).collect();
            let store = self.store_for(counting[first].unit);
            for (i, count) in chosen.iter().zip(store.read_counters(&names).await?) {
                counts[*i] = count;
            }
        }
        Ok(counts)
    }

    fn jitter(&self) -> u64 {
        if self.jitter_max_seconds == 0 {
            0
        } else {
            rand::random::<u64>() % self.jitter_max_seconds
        }
    }
}

/// The keys Redis found over their limit, until their window ends: a bounded map, about
/// `bytes` in all (each entry costs its key's length and [`OverLimitCache::ENTRY`] bytes),
/// the oldest forgotten first when full.
#[derive(Debug)]
struct OverLimitCache {
    shards: Vec<Mutex<Shard>>,
    /// Each shard's bound, in bytes.
    room: usize,
}

#[derive(Debug, Default)]
struct Shard {
    /// Key → the Unix second it stops being over.
    until: HashMap<String, u64>,
    order: VecDeque<String>,
    used: usize,
}

impl OverLimitCache {
    /// What one entry costs besides its key: the map's and the queue's bookkeeping.
    const ENTRY: usize = 64;
    const SHARDS: usize = 16;

    fn new(bytes: u64) -> OverLimitCache {
        OverLimitCache {
            shards: (0..Self::SHARDS).map(|_| Mutex::default()).collect(),
            room: usize::try_from(bytes).unwrap_or(usize::MAX) / Self::SHARDS,
        }
    }

    fn shard(&self, key: &str) -> std::sync::MutexGuard<'_, Shard> {
        use std::hash::BuildHasher;
        let hash = foldhash::fast::FixedState::default().hash_one(key);
        let i = (hash % Self::SHARDS as u64) as usize;
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    fn holds(&self, key: &str, now: u64) -> bool {
        self.shard(key)
            .until
            .get(key)
            .is_some_and(|&until| now < until)
    }

    /// Forgets `key` (a refund may have brought it under its limit).
    fn forget(&self, key: &str) {
        if let Some(until) = self.shard(key).until.get_mut(key) {
            *until = 0;
        }
    }

    fn remember(&self, key: &str, until: u64) {
        let cost = key.len() + Self::ENTRY;
        if cost > self.room {
            return;
        }
        let mut shard = self.shard(key);
        if let Some(old) = shard.until.get_mut(key) {
            *old = until;
            return;
        }
        while shard.used + cost > self.room {
            let Some(oldest) = shard.order.pop_front() else {
                break;
            };
            shard.until.remove(&oldest);
            shard.used -= oldest.len() + Self::ENTRY;
        }
        shard.until.insert(key.to_string(), until);
        shard.order.push_back(key.to_string());
        shard.used += cost;
    }
}

/// The upstream-layout counting of `descriptor` under `limit` ([`layout`]).
pub(super) fn envoy_counting<C: Counters>(
    counters: &C,
    request: &crate::rls::RlsRequest,
    descriptor: &crate::rls::RlsDescriptor,
    shared: &[(usize, &str)],
    limit: &super::Limit,
) -> Counting {
    let mut key = String::new();
    push_envoy_key(
        &mut key,
        counters.key_prefix(),
        &request.domain,
        descriptor,
        shared,
    );
    Counting {
        key,
        unit: limit.unit,
        limit: limit.requests_per_unit,
        hits: request.hits_for(descriptor),
        refund: descriptor.negative_hits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rls::RlsDescriptor;

    #[test]
    fn keys_are_upstreams() {
        let descriptor = RlsDescriptor {
            entries: vec![
                ("key2".into(), "value2".into()),
                ("subkey2".into(), "subvalue2".into()),
            ],
            ..RlsDescriptor::default()
        };
        let mut key = String::new();
        push_envoy_key(&mut key, "", "domain", &descriptor, &[]);
        key.push_str("1200");
        // From upstream's fixed-window cache tests.
        assert_eq!(key, "domain_key2_value2_subkey2_subvalue2_1200");
        let mut key = String::new();
        push_envoy_key(&mut key, "prefix:", "basic", &descriptor, &[(1, "sub*")]);
        assert_eq!(key, "prefix:basic_key2_value2_subkey2_sub*_");
    }

    #[test]
    fn the_cache_forgets_the_oldest_when_full_and_expired_keys_at_once() {
        let cache =
            OverLimitCache::new((OverLimitCache::SHARDS * (OverLimitCache::ENTRY + 8) * 2) as u64);
        cache.remember("a_x_1000", 1060);
        assert!(cache.holds("a_x_1000", 1059));
        assert!(!cache.holds("a_x_1000", 1060), "the window is over");
        // Many keys in a small cache: it stays within its room.
        for i in 0..1000 {
            cache.remember(&format!("k{i:07}"), 2000);
        }
        let held: usize = cache
            .shards
            .iter()
            .map(|s| s.lock().unwrap().until.len())
            .sum();
        assert!(held <= 2 * OverLimitCache::SHARDS, "{held}");
        assert!(cache.holds("k0000999", 1999), "the newest is kept");
    }
}
