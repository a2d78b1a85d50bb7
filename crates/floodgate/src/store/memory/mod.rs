//! The embedded store: keyed state in memory, sharded, bounded, linearizable per key.
//!
//! Keys are spread over a power-of-two number of shards by hash; each shard is a
//! [`hashbrown::HashTable`] behind its own lock (`shard_lock.rs`), so threads working on different keys rarely
//! meet, and a decision holds exactly one lock for the time of one transition (tens of
//! nanoseconds). The key is hashed once per call (with a per-store random seed, so that clients
//! cannot aim keys at one shard) and looked up by its borrowed form: checking an existing key
//! allocates nothing. A new key is copied into the table once, as the store's owned key type
//! ([`OwnedKey`]); string keys are kept as [`Key`]s, whose bytes sit in the table's entry when
//! they fit in 24 (on 64-bit targets), so that comparing a held key reads no memory beyond its
//! entry.
//!
//! **Bound.** The store holds at most `max_keys` keys, enforced per shard (`max_keys / shards`
//! each, rounded up), so eviction can start a little before `max_keys` keys are live when keys
//! spread unevenly. When a new key arrives at a full shard:
//! 1. *idle eviction*: the shard drops every key whose state is indistinguishable from a fresh
//!    key's ([`Algorithm::is_fresh`]). This never changes a decision: a dropped key behaves
//!    exactly as if it had been kept. To keep this O(1) amortized, a sweep that leaves the shard
//!    full is not repeated until a quarter of the shard's capacity of new keys has arrived;
//! 2. if the shard is still full of live keys, the [`Overflow`] policy decides, and the event is
//!    counted in [`StoreStats`].
//!
//! "Now" is read from the store's clock while holding the key's shard lock, so that with a
//! monotonic clock (all of Floodgate's are) the instants one key sees never go backwards, and a
//! key found fresh at one instant stays droppable for every later operation.
//!
//! A key whose state after its first operation is still fresh (a probe, or a request denied
//! because its cost can never pass) is not stored at all.

use std::borrow::Borrow;
use std::fmt;
use std::future::{ready, Future};
use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;

use super::chain::{self, Link, Linked};
use super::shard_lock::ShardLock;
use super::{apply_each, ensure_supported, Key, KeyedOp, LocalStore, OwnedKey, Store};
use crate::algorithm::spec::AnyState;
use crate::algorithm::Algorithm;
use crate::{Clock, CoarseClock, ConfigError, Decision, Nanos, Op, StoreError};

mod capabilities;
#[cfg(feature = "file")]
mod changes;
#[cfg(feature = "redis")]
mod entry;

/// What the memory store does with a new key when its shard is full of live (non-fresh) keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Overflow {
    /// Forget one live key of the shard (an arbitrary one) to make room. Memory stays bounded
    /// and every request gets a decision; the forgotten key starts again from a fresh state, so
    /// it can be over-admitted by at most one fresh allowance (one burst) per eviction.
    #[default]
    EvictLive,
    /// Keep every tracked key exact and refuse requests from new keys (`allowed == false`,
    /// `retry_after == None`) until room frees up. Choose this where over-admission is worse
    /// than refusing unknown keys under a flood of distinct keys.
    RefuseNew,
}

/// Counters of a [`MemoryStore`]'s bookkeeping, summed over its shards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StoreStats {
    /// Keys held now.
    pub keys: u64,
    /// Keys dropped because their state was fresh (lossless).
    pub evicted_idle: u64,
    /// Live keys forgotten under [`Overflow::EvictLive`].
    pub evicted_live: u64,
    /// Requests refused under [`Overflow::RefuseNew`].
    pub refused_new: u64,
}

/// Default bound on the number of keys.
const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// Builds a [`MemoryStore`] with chosen bounds, shard count, overflow policy and clock.
#[derive(Debug, Clone)]
pub struct MemoryStoreBuilder<C = CoarseClock> {
    pub(in crate::store) clock: C,
    max_keys: usize,
    shards: Option<usize>,
    pub(in crate::store) overflow: Overflow,
}

impl MemoryStoreBuilder<CoarseClock> {
    fn new() -> Self {
        MemoryStoreBuilder {
            clock: CoarseClock::shared(),
            max_keys: DEFAULT_MAX_KEYS,
            shards: None,
            overflow: Overflow::default(),
        }
    }
}

impl<C: Clock> MemoryStoreBuilder<C> {
    /// The most keys the store holds (default 1,000,000). At least 1.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// The number of shards, a power of two between 1 and 4096 (default: 16 per available
    /// core, at least 64).
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }

    /// What to do when a shard is full of live keys (default [`Overflow::EvictLive`]).
    pub fn overflow(mut self, overflow: Overflow) -> Self {
        self.overflow = overflow;
        self
    }

    /// The clock the store reads "now" from (default [`CoarseClock::shared`]; use
    /// [`crate::SystemClock`] where nanosecond precision matters more than ~20 ns a decision).
    pub fn clock<C2: Clock>(self, clock: C2) -> MemoryStoreBuilder<C2> {
        MemoryStoreBuilder {
            clock,
            max_keys: self.max_keys,
            shards: self.shards,
            overflow: self.overflow,
        }
    }

    /// The validated shard count and the bound on keys per shard (`max_keys / shards`, rounded
    /// up).
    pub(in crate::store) fn layout(&self) -> Result<(usize, usize), ConfigError> {
        if self.max_keys == 0 {
            return Err(ConfigError::invalid("max_keys", 0, "must be at least 1"));
        }
        let shards = match self.shards {
            Some(n) if n.is_power_of_two() && n <= 4096 => n,
            Some(n) => {
                return Err(ConfigError::invalid(
                    "shards",
                    n,
                    "must be a power of two between 1 and 4096",
                ))
            }
            None => {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                (cores * 16).next_power_of_two().clamp(64, 4096)
            }
        };
        Ok((shards, self.max_keys.div_ceil(shards)))
    }

    /// Validates the settings and builds the store for the common case: string keys (the
    /// limiters' namespaced keys, kept as [`Key`]s and looked up with `&str`) and the state of
    /// any algorithm ([`AnyState`]).
    pub fn build(self) -> Result<MemoryStore<Key, AnyState, C>, ConfigError> {
        self.build_typed()
    }

    /// Validates the settings and builds a store of owned keys `K` holding one algorithm's
    /// state `S`: `build_typed::<u64, GcraState>()` for a store dedicated to one GCRA limit on
    /// numeric keys, which is smaller and faster than an [`AnyState`] store.
    pub fn build_typed<K, S>(self) -> Result<MemoryStore<K, S, C>, ConfigError> {
        let (shards, per_shard) = self.layout()?;
        Ok(MemoryStore {
            shards: (0..shards)
                .map(|_| Shard {
                    map: ShardLock::new(ShardMap {
                        table: HashTable::new(),
                        sweep_credit: 0,
                        evicted_idle: 0,
                        evicted_live: 0,
                        refused_new: 0,
                        changed: HashTable::new(),
                    }),
                })
                .collect(),
            shard_mask: shards - 1,
            hasher: foldhash::fast::RandomState::default(),
            clock: self.clock,
            per_shard,
            overflow: self.overflow,
            namespaces: super::Namespaces::new(),
            quota: crate::quota::ClaimsTable::new(),
            tracks_changes: false,
        })
    }
}

/// The embedded keyed store: `K` is the owned key type (`u64`, `String`, …), `S` the algorithm
/// state it holds, `C` its clock. See the [`crate::store`] module documentation and the
/// builder for the exact bound and eviction rules: at most `max_keys` keys, idle keys dropped
/// losslessly when a shard fills up, then the [`Overflow`] policy.
pub struct MemoryStore<K = Key, S = AnyState, C = CoarseClock> {
    shards: Box<[Shard<K, S>]>,
    /// `shards.len() - 1`: the shard index is `(hash >> 32) & shard_mask` (see `shard_of`).
    shard_mask: usize,
    hasher: foldhash::fast::RandomState,
    clock: C,
    per_shard: usize,
    overflow: Overflow,
    namespaces: super::Namespaces,
    /// The claims on shared limits (the Rate Limit Quota Service's), kept beside the keys.
    quota: crate::quota::ClaimsTable,
    /// Whether `ShardMap::changed` records the keys each operation writes (`changes.rs`);
    /// false, and never read past this flag, unless a durable store asked for it.
    tracks_changes: bool,
}

// Each shard on its own cache line, so that two threads on two shards never share one.
#[repr(align(64))]
struct Shard<K, S> {
    map: ShardLock<ShardMap<K, S>>,
}

struct ShardMap<K, S> {
    table: HashTable<(K, S)>,
    /// New keys that must arrive at a full shard before the next idle sweep.
    sweep_credit: usize,
    evicted_idle: u64,
    evicted_live: u64,
    refused_new: u64,
    /// The keys written since the last drain, when the store tracks changes (`changes.rs`).
    changed: HashTable<K>,
}

impl<K, S, C: fmt::Debug> fmt::Debug for MemoryStore<K, S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("shards", &self.shards.len())
            .field("max_keys_per_shard", &self.per_shard)
            .field("overflow", &self.overflow)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl MemoryStore {
    /// A builder with the defaults: [`CoarseClock::shared`] (1 ms resolution), 1,000,000 keys, [`Overflow::EvictLive`].
    pub fn builder() -> MemoryStoreBuilder<CoarseClock> {
        MemoryStoreBuilder::new()
    }
}

impl MemoryStore {
    /// A store of string keys and any algorithm's state, with the default settings (see
    /// [`MemoryStore::builder`]); [`Default`] gives the same for any key and state types.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<K, S> Default for MemoryStore<K, S, CoarseClock> {
    fn default() -> Self {
        match MemoryStoreBuilder::new().build_typed() {
            Ok(store) => store,
            // The defaults are valid by construction.
            Err(e) => unreachable!("default memory store settings rejected: {e}"),
        }
    }
}

impl<K: Hash + Eq, S, C: Clock> MemoryStore<K, S, C> {
    /// The store's clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The claims on shared limits this store keeps (see [`crate::quota`]).
    pub fn quota_claims(&self) -> &crate::quota::ClaimsTable {
        &self.quota
    }

    #[inline]
    fn shard_of(&self, hash: u64) -> &Shard<K, S> {
        &self.shards[self.shard_index(hash)]
    }

    #[inline]
    fn shard_index(&self, hash: u64) -> usize {
        // hashbrown uses the low bits (bucket index) and the top 7 bits (tag) of the hash;
        // the shard index comes from the middle bits, so keys of one shard still spread over
        // its table.
        (hash >> 32) as usize & self.shard_mask
    }

    #[inline]
    fn apply_locked<Q, A>(&self, algorithm: &A, key: &Q, op: Op) -> Result<Decision, StoreError>
    where
        A: Algorithm<State = S>,
        K: OwnedKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let mut map = self.shard_of(hash).map.lock();
        // Read the clock under the shard lock: with a monotonic clock, the instants a shard
        // sees are then in lock order, so no key ever sees time go backwards and idle
        // eviction (decided at one instant, valid for all later ones) stays lossless.
        let now = self.clock.now();
        self.apply_in(&mut map, hash, algorithm, key, op, now)
    }

    /// Applies `op` to `key` (hashing to `hash`) in its shard's locked `map`, at `now`.
    #[inline]
    fn apply_in<Q, A>(
        &self,
        map: &mut ShardMap<K, S>,
        hash: u64,
        algorithm: &A,
        key: &Q,
        op: Op,
        now: Nanos,
    ) -> Result<Decision, StoreError>
    where
        A: Algorithm<State = S>,
        K: OwnedKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if let Some((_, state)) = map.table.find_mut(hash, |(k, _)| k.borrow() == key) {
            if !algorithm.owns(state) {
                return Err(StoreError::StateConflict {
                    algorithm: algorithm.name(),
                    found: algorithm.state_name(state),
                });
            }
            let decision = algorithm.apply(state, now, op);
            self.note_changed(&mut map.changed, hash, key);
            return Ok(decision);
        }
        let mut state = algorithm.fresh(now);
        let decision = algorithm.apply(&mut state, now, op);
        if algorithm.is_fresh(&state, now) {
            return Ok(decision);
        }
        if map.table.len() >= self.per_shard
            && !self.make_room(map, |s: &S, now| algorithm.is_fresh(s, now), now)
        {
            map.refused_new += 1;
            return Ok(Decision::deny(
                decision.limit,
                0,
                decision.reset_after,
                None,
            ));
        }
        self.insert_new(&mut map.table, hash, key, state);
        self.note_changed(&mut map.changed, hash, key);
        Ok(decision)
    }

    /// Notes that `key` (hashing to `hash`) was written, when the store tracks changes
    /// (`changes.rs`): one flag read otherwise.
    #[inline]
    fn note_changed<Q>(&self, changed: &mut HashTable<K>, hash: u64, key: &Q)
    where
        K: OwnedKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.tracks_changes && changed.find(hash, |k| k.borrow() == key).is_none() {
            let hasher = &self.hasher;
            changed.insert_unique(hash, K::from_borrowed(key), |k| hasher.hash_one(k));
        }
    }

    /// [`Self::note_changed`] for a live key the bound forgot, given back owned.
    #[cold]
    fn note_evicted(&self, changed: &mut HashTable<K>, hash: u64, key: K) {
        if self.tracks_changes && changed.find(hash, |k| *k == key).is_none() {
            let hasher = &self.hasher;
            changed.insert_unique(hash, key, |k| hasher.hash_one(k));
        }
    }

    /// Puts `key` (hashing to `hash`), which `table` does not hold, in it with `state`, copied
    /// as the store's owned key.
    fn insert_new<Q>(&self, table: &mut HashTable<(K, S)>, hash: u64, key: &Q, state: S)
    where
        K: OwnedKey<Q>,
        Q: ?Sized,
    {
        let hasher = &self.hasher;
        table.insert_unique(hash, (K::from_borrowed(key), state), |(k, _)| {
            hasher.hash_one(k)
        });
    }

    /// [`Store::apply_chain`] on this store: the shards of every key are locked together (in
    /// ascending order, so two chains never wait on each other in a cycle), the clock is read
    /// once, and all-or-nothing links are undone from snapshots before any lock is released:
    /// when a refusing link denies, or always when the request is `refused` after the chain
    /// ([`Store::apply_chain_refused`]).
    fn apply_chain_now<Q, A>(
        &self,
        links: &[Link<'_, Q, A>],
        refused: bool,
    ) -> Result<Vec<Linked>, StoreError>
    where
        S: Clone,
        A: Algorithm<State = S>,
        K: OwnedKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        chain::ensure_chain_supported(links)?;
        let hashes: Vec<u64> = links
            .iter()
            .map(|l| self.hasher.hash_one(l.request.key))
            .collect();
        let mut shards: Vec<usize> = hashes.iter().map(|&h| self.shard_index(h)).collect();
        shards.sort_unstable();
        shards.dedup();
        // Each link's place among the locked shards.
        let guard_of: Vec<usize> = hashes
            .iter()
            .map(|&h| shards.partition_point(|&i| i < self.shard_index(h)))
            .collect();
        let mut guards: Vec<_> = shards.iter().map(|&i| self.shards[i].map.lock()).collect();
        let now = self.clock.now();
        let mut outcomes = Vec::with_capacity(links.len());
        // Each all-or-nothing link's key and state before it ran (`None`: no key).
        let mut undo: Vec<(usize, Option<S>)> = Vec::new();
        // The same for the links of the open group (a limit's levels), and whether one of
        // them was denied.
        let mut group: Vec<(usize, Option<S>)> = Vec::new();
        let mut group_denied = false;
        let mut ended = false;
        let mut refused = refused;
        for (i, link) in links.iter().enumerate() {
            if ended {
                outcomes.push(Linked::NotReached);
                continue;
            }
            let r = link.request;
            let map = &mut guards[guard_of[i]];
            let next_joins = links.get(i + 1).is_some_and(|l| l.joins_previous);
            let grouped = link.joins_previous || next_joins;
            if link.all_or_nothing || grouped {
                let before = map
                    .table
                    .find(hashes[i], |(k, _)| k.borrow() == r.key)
                    .map(|(_, s)| s.clone());
                match (grouped, link.all_or_nothing) {
                    (true, true) => {
                        group.push((i, before.clone()));
                        undo.push((i, before));
                    }
                    (true, false) => group.push((i, before)),
                    _ => undo.push((i, before)),
                }
            }
            let outcome = match self.apply_in(map, hashes[i], r.algorithm, r.key, r.op, now) {
                Ok(d) => Linked::Decided(d),
                Err(e) => Linked::Failed(e),
            };
            group_denied |= grouped && chain::denied(&outcome);
            refused |= chain::refuses(link, &outcome);
            ended = chain::ends(link, &outcome);
            outcomes.push(outcome);
            if ended || !next_joins {
                if std::mem::take(&mut group_denied) {
                    self.restore(&mut guards, &guard_of, &hashes, links, group.drain(..));
                }
                group.clear();
            }
        }
        if refused {
            self.restore(&mut guards, &guard_of, &hashes, links, undo.into_iter());
        }
        Ok(outcomes)
    }

    /// Puts back the states kept in `kept` (link index, state before it; `None`: no key),
    /// newest first, so a key touched twice gets its state from before the first.
    fn restore<Q, A, G>(
        &self,
        guards: &mut [G],
        guard_of: &[usize],
        hashes: &[u64],
        links: &[Link<'_, Q, A>],
        kept: impl DoubleEndedIterator<Item = (usize, Option<S>)>,
    ) where
        K: OwnedKey<Q>,
        Q: Hash + Eq + ?Sized,
        G: std::ops::DerefMut<Target = ShardMap<K, S>>,
    {
        for (i, before) in kept.rev() {
            let key = links[i].request.key;
            let map = &mut guards[guard_of[i]];
            let found = map.table.find_entry(hashes[i], |(k, _)| k.borrow() == key);
            match (found, before) {
                (Ok(mut entry), Some(state)) => entry.get_mut().1 = state,
                (Ok(entry), None) => {
                    entry.remove();
                }
                (Err(_), Some(state)) => {
                    self.insert_new(&mut map.table, hashes[i], key, state);
                }
                (Err(_), None) => continue,
            }
            self.note_changed(&mut map.changed, hashes[i], key);
        }
    }

    /// Frees one place in a full shard; false if the overflow policy refuses the new key.
    #[cold]
    fn make_room(
        &self,
        map: &mut ShardMap<K, S>,
        is_fresh: impl Fn(&S, Nanos) -> bool,
        now: Nanos,
    ) -> bool {
        if map.sweep_credit == 0 {
            let before = map.table.len();
            map.table.retain(|(_, s)| !is_fresh(s, now));
            map.evicted_idle += (before - map.table.len()) as u64;
            if map.table.len() < self.per_shard {
                return true;
            }
            map.sweep_credit = (self.per_shard / 4).max(1);
        }
        map.sweep_credit -= 1;
        match self.overflow {
            Overflow::RefuseNew => false,
            Overflow::EvictLive => {
                let victim = map
                    .table
                    .iter()
                    .next()
                    .map(|(k, _)| self.hasher.hash_one(k));
                if let Some(victim_hash) = victim {
                    // The table's first entry is an arbitrary key (the order is the seeded
                    // hash order). Any entry with the same full hash is as good a victim.
                    let hasher = &self.hasher;
                    if let Ok(entry) = map
                        .table
                        .find_entry(victim_hash, |(k, _)| hasher.hash_one(k) == victim_hash)
                    {
                        let ((victim, _), _) = entry.remove();
                        map.evicted_live += 1;
                        self.note_evicted(&mut map.changed, victim_hash, victim);
                    }
                }
                true
            }
        }
    }
}

/// The memory store's side of the in-process stores' surface (see [`LocalStore`]).
impl<K: Hash + Eq, S: Clone, C: Clock> LocalStore<K, S> for MemoryStore<K, S, C> {
    #[inline]
    fn apply_now<Q, A>(&self, algorithm: &A, key: &Q, op: Op) -> Result<Decision, StoreError>
    where
        A: Algorithm<State = S>,
        K: OwnedKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        ensure_supported(algorithm, op)?;
        self.apply_locked(algorithm, key, op)
    }

    fn sweep<A: Algorithm<State = S>>(&self, algorithm: &A) -> usize {
        let mut dropped = 0;
        for shard in self.shards.iter() {
            let mut map = shard.map.lock();
            let now = self.clock.now();
            let before = map.table.len();
            map.table.retain(|(_, s)| !algorithm.is_fresh(s, now));
            let n = before - map.table.len();
            map.evicted_idle += n as u64;
            dropped += n;
        }
        dropped
    }

    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.map.lock().table.len()).sum()
    }

    fn stats(&self) -> StoreStats {
        let mut stats = StoreStats::default();
        for shard in self.shards.iter() {
            let map = shard.map.lock();
            stats.keys += map.table.len() as u64;
            stats.evicted_idle += map.evicted_idle;
            stats.evicted_live += map.evicted_live;
            stats.refused_new += map.refused_new;
        }
        stats
    }

    fn table_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.map.lock().table.allocation_size())
            .sum::<usize>()
            + std::mem::size_of_val(&*self.shards)
    }

    fn state<Q>(&self, key: &Q) -> Option<S>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let map = self.shard_of(hash).map.lock();
        map.table
            .find(hash, |(k, _)| k.borrow() == key)
            .map(|(_, s)| s.clone())
    }
}

impl<K, Q, A, C> Store<Q, A> for MemoryStore<K, A::State, C>
where
    A: Algorithm,
    K: OwnedKey<Q> + Hash + Eq + Send + Sync,
    Q: Hash + Eq + Sync + ?Sized,
    C: Clock,
{
    fn apply(
        &self,
        algorithm: &A,
        key: &Q,
        op: Op,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        ready(self.apply_now(algorithm, key, op))
    }

    fn apply_many(
        &self,
        requests: &[KeyedOp<'_, Q, A>],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        ready(apply_each(requests, |r| {
            self.apply_locked(r.algorithm, r.key, r.op)
        }))
    }

    fn apply_chain(
        &self,
        links: &[Link<'_, Q, A>],
    ) -> impl Future<Output = Result<Vec<Linked>, StoreError>> + Send
    where
        Q: Sync,
    {
        ready(self.apply_chain_now(links, false))
    }

    fn apply_chain_refused(
        &self,
        links: &[Link<'_, Q, A>],
    ) -> impl Future<Output = Result<Vec<Linked>, StoreError>> + Send
    where
        Q: Sync,
    {
        ready(self.apply_chain_now(links, true))
    }

    fn namespaces(&self) -> Option<&super::Namespaces> {
        Some(&self.namespaces)
    }
}

#[cfg(test)]
mod tests;
