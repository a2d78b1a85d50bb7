//! The embedded store: keyed state in memory, sharded, bounded, linearizable per key.
//!
//! Keys are spread over a power-of-two number of shards by hash (with a per-store random seed,
//! so that clients cannot aim keys at one shard). A decision for a key the store already holds
//! takes no shard-wide lock: it finds the key's entry with atomic loads of the shard's index
//! and locks just that entry for the transition (`table.rs` documents the protocol), so threads
//! deciding for different keys write no common cache line and scale with the cores. The shard's
//! lock (`shard_lock.rs`) is for writers: a new key, an eviction, a sweep. The key is hashed
//! once per call and compared by its borrowed form: checking an existing key allocates nothing.
//!
//! **Bound.** The store holds at most `max_keys` keys, enforced per shard (`max_keys / shards`
//! each, rounded up, at most 16,777,214), so eviction can start a little before `max_keys` keys
//! are live when keys spread unevenly. When a new key arrives at a full shard:
//! 1. *idle eviction*: the shard drops every key whose state is indistinguishable from a fresh
//!    key's ([`Algorithm::is_fresh`]). This never changes a decision: a dropped key behaves
//!    exactly as if it had been kept. To keep this O(1) amortized, a sweep that leaves the shard
//!    full is not repeated until a quarter of the shard's capacity of new keys has arrived;
//! 2. if the shard is still full of live keys, the [`Overflow`] policy decides, and the event is
//!    counted in [`StoreStats`].
//!
//! "Now" is read from the store's clock while holding the key's entry lock (for a new key, the
//! shard lock), so that with a monotonic clock (all of Floodgate's are) the instants one key
//! sees never go backwards, and a key found fresh at one instant stays droppable for every
//! later operation.
//!
//! A key whose state after its first operation is still fresh (a probe, or a request denied
//! because its cost can never pass) is not stored at all.

use std::borrow::Borrow;
use std::fmt;
use std::future::{ready, Future};
use std::hash::{BuildHasher, Hash};

use self::table::{Books, EntryGuard, Table, MAX_ENTRIES};
use super::chain::{self, Link, Linked};
use super::shard_lock::{ShardGuard, ShardLock};
use super::{ensure_supported, Request, Store};
use crate::algorithm::spec::AnyState;
use crate::algorithm::Algorithm;
use crate::{Clock, CoarseClock, ConfigError, Decision, Nanos, Op, StoreError};

mod arena;
#[cfg(feature = "redis")]
mod entry;
mod table;

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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
    clock: C,
    max_keys: usize,
    shards: Option<usize>,
    overflow: Overflow,
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

    /// Validates the settings and builds the store for the common case: string keys (the
    /// limiters' namespaced keys) and the state of any algorithm ([`AnyState`]).
    pub fn build(self) -> Result<MemoryStore<String, AnyState, C>, ConfigError> {
        self.build_typed()
    }

    /// Validates the settings and builds a store of owned keys `K` holding one algorithm's
    /// state `S`: `build_typed::<u64, GcraState>()` for a store dedicated to one GCRA limit on
    /// numeric keys, which is smaller and faster than an [`AnyState`] store.
    pub fn build_typed<K, S>(self) -> Result<MemoryStore<K, S, C>, ConfigError> {
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
        let per_shard = self.max_keys.div_ceil(shards);
        if per_shard > MAX_ENTRIES as usize {
            return Err(ConfigError::invalid(
                "max_keys",
                self.max_keys,
                "needs more than 16,777,214 keys per shard: use more shards",
            ));
        }
        Ok(MemoryStore {
            shards: (0..shards)
                .map(|_| {
                    let (table, books) = Table::new();
                    Shard {
                        table,
                        books: Aligned(ShardLock::new(books)),
                    }
                })
                .collect(),
            shard_mask: shards - 1,
            hasher: foldhash::fast::RandomState::default(),
            clock: self.clock,
            per_shard,
            overflow: self.overflow,
        })
    }
}

/// The embedded keyed store: `K` is the owned key type (`u64`, `String`, …), `S` the algorithm
/// state it holds, `C` its clock. See the [`crate::store`] module documentation and the
/// builder for the exact bound and eviction rules: at most `max_keys` keys, idle keys dropped
/// losslessly when a shard fills up, then the [`Overflow`] policy.
pub struct MemoryStore<K = String, S = AnyState, C = CoarseClock> {
    shards: Box<[Shard<K, S>]>,
    /// `shards.len() - 1`: the shard index is `(hash >> 32) & shard_mask` (see `shard_of`).
    shard_mask: usize,
    hasher: foldhash::fast::RandomState,
    clock: C,
    per_shard: usize,
    overflow: Overflow,
}

/// One shard: the table every decision reads, then the writers' lock on a cache line of its
/// own, so that taking it (for a new key) does not evict the table's header from the cores
/// that only read it.
#[repr(align(64))]
struct Shard<K, S> {
    table: Table<K, S>,
    books: Aligned<ShardLock<Books>>,
}

#[repr(align(64))]
struct Aligned<T>(T);

impl<K, S> Shard<K, S> {
    #[inline]
    fn lock(&self) -> ShardGuard<'_, Books> {
        self.books.0.lock()
    }
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

    #[inline]
    fn shard_of(&self, hash: u64) -> &Shard<K, S> {
        &self.shards[self.shard_index(hash)]
    }

    #[inline]
    fn shard_index(&self, hash: u64) -> usize {
        // A shard's table uses the hash's low 22 bits (directory) and top 8 bits (tag); the
        // shard index comes from the middle bits, so keys of one shard still spread over it.
        (hash >> 32) as usize & self.shard_mask
    }

    /// Applies `op` to `key`'s state under `algorithm`, now, and returns the decision.
    ///
    /// This is [`Store::apply`] without the future: the memory store answers at once.
    #[inline]
    pub fn apply_now<Q, A>(&self, algorithm: &A, key: &Q, op: Op) -> Result<Decision, StoreError>
    where
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        ensure_supported(algorithm, op)?;
        self.apply_locked(algorithm, key, op)
    }

    #[inline]
    fn apply_locked<Q, A>(&self, algorithm: &A, key: &Q, op: Op) -> Result<Decision, StoreError>
    where
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let shard = self.shard_of(hash);
        if let Some((_, mut entry)) = shard.table.find(hash, key) {
            // Read the clock under the entry's lock: with a monotonic clock, the instants a key
            // sees are then in lock order, so no key ever sees time go backwards and idle
            // eviction (decided at one instant, valid for all later ones) stays lossless.
            let now = self.clock.now();
            return decide(&mut entry, algorithm, op, now);
        }
        self.apply_new(shard, hash, algorithm, key, op)
    }

    /// The slow path: `key` was not found without the shard lock. Looks again with it (exact),
    /// and inserts the key if it is still missing.
    #[inline(never)]
    fn apply_new<Q, A>(
        &self,
        shard: &Shard<K, S>,
        hash: u64,
        algorithm: &A,
        key: &Q,
        op: Op,
    ) -> Result<Decision, StoreError>
    where
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut books = shard.lock();
        if let Some((_, mut entry)) = shard.table.find(hash, key) {
            let now = self.clock.now();
            return decide(&mut entry, algorithm, op, now);
        }
        let now = self.clock.now();
        Ok(self
            .insert(shard, &mut books, hash, algorithm, key, op, now)
            .0)
    }

    /// Decides `op` for `key`, which `shard` (whose lock `books` is) does not hold, at `now`,
    /// and keeps the key unless its state is still fresh. Returns the decision and the new
    /// entry, locked, if one was made.
    #[allow(clippy::too_many_arguments)]
    fn insert<'s, Q, A>(
        &self,
        shard: &'s Shard<K, S>,
        books: &mut Books,
        hash: u64,
        algorithm: &A,
        key: &Q,
        op: Op,
        now: Nanos,
    ) -> (Decision, Made<'s, K, S>)
    where
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut state = algorithm.fresh(now);
        let decision = algorithm.apply(&mut state, now, op);
        if algorithm.is_fresh(&state, now) {
            return (decision, None);
        }
        let refused = Decision::deny(decision.limit, 0, decision.reset_after, None);
        if books.len >= self.per_shard
            && !self.make_room(shard, books, |s: &S, now| algorithm.is_fresh(s, now))
        {
            books.refused_new += 1;
            return (refused, None);
        }
        match shard.table.insert(books, hash, key.to_owned(), state) {
            Ok(entry) => (decision, Some(entry)),
            // A bucket as deep as the hash allows is full: as unlikely as 17 keys sharing 30
            // bits of a seeded hash. Refused like a full store.
            Err(_) => {
                books.refused_new += 1;
                (refused, None)
            }
        }
    }

    /// [`Store::apply_chain`] on this store: the shards of every key are locked together (in
    /// ascending order, so two chains never wait on each other in a cycle), then the entries of
    /// the keys they hold, and the clock is read once, after those locks; the entries stay
    /// locked until the chain ends, so all-or-nothing links are undone from snapshots before
    /// any other decision sees them.
    fn apply_chain_now<Q, A>(&self, links: &[Link<'_, Q, A>]) -> Result<Vec<Linked>, StoreError>
    where
        S: Clone,
        A: Algorithm<State = S>,
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        chain::ensure_chain_supported(links)?;
        let hashes: Vec<u64> = links
            .iter()
            .map(|l| self.hasher.hash_one(l.request.key))
            .collect();
        let mut shards: Vec<usize> = hashes.iter().map(|&h| self.shard_index(h)).collect();
        shards.sort_unstable();
        shards.dedup();
        let mut books: Vec<_> = shards.iter().map(|&i| self.shards[i].lock()).collect();
        let mut held: Vec<Held<'_, K, S>> = Vec::new();
        for (link, &hash) in links.iter().zip(&hashes) {
            self.hold(&mut held, hash, link.request.key);
        }
        let now = self.clock.now();
        let mut outcomes = Vec::with_capacity(links.len());
        // Each all-or-nothing link's entry (its place in `held`) and state before it ran
        // (`None`: the link made the key).
        let mut undo: Vec<(usize, Option<S>)> = Vec::new();
        let (mut refused, mut ended) = (false, false);
        for (link, &hash) in links.iter().zip(&hashes) {
            if ended {
                outcomes.push(Linked::NotReached);
                continue;
            }
            let r = link.request;
            let outcome = match self.hold(&mut held, hash, r.key) {
                Some(at) => {
                    let entry = &mut held[at].entry;
                    if link.all_or_nothing && entry.is_live() {
                        undo.push((at, Some(entry.state().clone())));
                    }
                    decide(entry, r.algorithm, r.op, now)
                }
                None => {
                    let shard = self.shard_of(hash);
                    let at = shards.partition_point(|&i| i < self.shard_index(hash));
                    let (decision, made) =
                        self.insert(shard, &mut books[at], hash, r.algorithm, r.key, r.op, now);
                    if let Some((id, entry)) = made {
                        held.push(Held { hash, id, entry });
                        if link.all_or_nothing {
                            undo.push((held.len() - 1, None));
                        }
                    }
                    Ok(decision)
                }
            };
            let outcome = match outcome {
                Ok(d) => Linked::Decided(d),
                Err(e) => Linked::Failed(e),
            };
            let denied = chain::denied(&outcome);
            refused |= link.refuses && denied;
            ended = link.stops && denied;
            outcomes.push(outcome);
        }
        if refused {
            // Newest first, so a key touched twice gets its state from before the chain.
            let mut made = Vec::new();
            for (at, before) in undo.into_iter().rev() {
                match before {
                    Some(state) => *held[at].entry.state_mut() = state,
                    None => made.push(at),
                }
            }
            made.sort_unstable();
            for at in made.into_iter().rev() {
                let Held { hash, id, entry } = held.swap_remove(at);
                let at = shards.partition_point(|&i| i < self.shard_index(hash));
                self.shard_of(hash).table.remove(&mut books[at], id, entry);
            }
        }
        // Entries unlock before their shards.
        drop(held);
        drop(books);
        Ok(outcomes)
    }

    /// The place in `held` of `key`'s entry, locking it first if the store holds the key; the
    /// caller holds the key's shard lock, so the look is exact.
    fn hold<'s, Q>(&'s self, held: &mut Vec<Held<'s, K, S>>, hash: u64, key: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mine = |h: &Held<'_, K, S>| h.hash == hash && h.entry.key().borrow() == key;
        if let Some(at) = held.iter().position(mine) {
            return Some(at);
        }
        let shard = self.shard_index(hash);
        let same_shard = |h: &&Held<'_, K, S>| self.shard_index(h.hash) == shard;
        let (id, entry) = self.shards[shard].table.find_skipping(hash, key, |id| {
            held.iter().filter(same_shard).any(|h| h.id == id)
        })?;
        held.push(Held { hash, id, entry });
        Some(held.len() - 1)
    }

    /// Frees one place in a full shard; false if the overflow policy refuses the new key.
    #[cold]
    fn make_room(
        &self,
        shard: &Shard<K, S>,
        books: &mut Books,
        is_fresh: impl Fn(&S, Nanos) -> bool,
    ) -> bool {
        if books.sweep_credit == 0 {
            self.sweep_shard(shard, books, &is_fresh);
            if books.len < self.per_shard {
                return true;
            }
            books.sweep_credit = (self.per_shard / 4).max(1);
        }
        books.sweep_credit -= 1;
        match self.overflow {
            Overflow::RefuseNew => false,
            Overflow::EvictLive => self.evict_live(shard, books),
        }
    }

    /// Drops the shard's keys whose state is fresh, each judged at "now" read under its lock.
    /// Entries another thread holds right now are in use, so not idle: they are skipped.
    fn sweep_shard(
        &self,
        shard: &Shard<K, S>,
        books: &mut Books,
        is_fresh: impl Fn(&S, Nanos) -> bool,
    ) -> usize {
        let mut dropped = 0;
        for id in 0..books.ids() {
            let Some(entry) = shard.table.entry(id).try_lock() else {
                continue;
            };
            if entry.is_live() && is_fresh(entry.state(), self.clock.now()) {
                shard.table.remove(books, id, entry);
                dropped += 1;
            }
        }
        books.evicted_idle += dropped as u64;
        dropped
    }

    /// Forgets one live key of a full shard: the next one after the last forgotten, in entry
    /// order (an arbitrary key, as far as clients can tell). False if every one is in use.
    fn evict_live(&self, shard: &Shard<K, S>, books: &mut Books) -> bool {
        let ids = books.ids();
        for step in 0..ids {
            let id = (books.cursor.wrapping_add(step)) % ids;
            let Some(entry) = shard.table.entry(id).try_lock() else {
                continue;
            };
            if entry.is_live() {
                shard.table.remove(books, id, entry);
                books.cursor = id + 1;
                books.evicted_live += 1;
                return true;
            }
        }
        false
    }

    /// Drops every key whose state is fresh at the store's current time (lossless; see
    /// [`Algorithm::is_fresh`]). The store does this by itself when a shard fills up; calling it
    /// periodically returns memory earlier. Returns the number of keys dropped.
    pub fn sweep<A: Algorithm<State = S>>(&self, algorithm: &A) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                let mut books = shard.lock();
                self.sweep_shard(shard, &mut books, |s: &S, now| algorithm.is_fresh(s, now))
            })
            .sum()
    }

    /// The number of keys held now.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len).sum()
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bookkeeping counters, summed over the shards.
    pub fn stats(&self) -> StoreStats {
        let mut stats = StoreStats::default();
        for shard in self.shards.iter() {
            let books = shard.lock();
            stats.keys += books.len as u64;
            stats.evicted_idle += books.evicted_idle;
            stats.evicted_live += books.evicted_live;
            stats.refused_new += books.refused_new;
        }
        stats
    }

    /// Bytes the shards' tables have allocated: entries (keys and states stored inline),
    /// buckets and directories; not counting heap memory the keys or states own themselves,
    /// such as a `String`'s buffer.
    pub fn table_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.table.bytes(&s.lock()))
            .sum::<usize>()
            + std::mem::size_of_val(&*self.shards)
    }

    /// A copy of `key`'s state, if the store holds it (for inspection and tests).
    pub fn state<Q>(&self, key: &Q) -> Option<S>
    where
        S: Clone,
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let shard = self.shard_of(hash);
        let _books = shard.lock();
        let (_, entry) = shard.table.find(hash, key)?;
        Some(entry.state().clone())
    }
}

/// A key's new entry (its id, and the entry still locked), if one was made.
type Made<'s, K, S> = Option<(u32, EntryGuard<'s, K, S>)>;

/// An entry a chain holds locked until it ends.
struct Held<'s, K, S> {
    hash: u64,
    id: u32,
    entry: EntryGuard<'s, K, S>,
}

/// Applies `op` to a locked entry's state at `now`, if the state is `algorithm`'s.
#[inline]
fn decide<K, S, A: Algorithm<State = S>>(
    entry: &mut EntryGuard<'_, K, S>,
    algorithm: &A,
    op: Op,
    now: Nanos,
) -> Result<Decision, StoreError> {
    let state = entry.state_mut();
    if !algorithm.owns(state) {
        return Err(StoreError::StateConflict {
            algorithm: algorithm.name(),
            found: algorithm.state_name(state),
        });
    }
    Ok(algorithm.apply(state, now, op))
}

impl<K, Q, A, C> Store<Q, A> for MemoryStore<K, A::State, C>
where
    A: Algorithm,
    K: Borrow<Q> + Hash + Eq + Send + Sync,
    Q: Hash + Eq + ToOwned<Owned = K> + Sync + ?Sized,
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
        requests: &[Request<'_, Q, A>],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        // Refuse an unsupported operation before applying anything.
        let result = requests
            .iter()
            .try_for_each(|r| ensure_supported(r.algorithm, r.op))
            .and_then(|()| {
                requests
                    .iter()
                    .map(|r| self.apply_locked(r.algorithm, r.key, r.op))
                    .collect()
            });
        ready(result)
    }

    fn apply_chain(
        &self,
        links: &[Link<'_, Q, A>],
    ) -> impl Future<Output = Result<Vec<Linked>, StoreError>> + Send
    where
        Q: Sync,
    {
        ready(self.apply_chain_now(links))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ManualClock, OpKind};
    use std::sync::Arc;
    use std::time::Duration;

    /// A minimal per-second quota, so that these tests do not depend on a real algorithm.
    #[derive(Debug)]
    struct PerSecond(u64);

    impl Algorithm for PerSecond {
        type State = (u64, u64); // (second, used)
        fn name(&self) -> &'static str {
            "per_second"
        }
        fn fresh(&self, now: Nanos) -> (u64, u64) {
            (now.0 / 1_000_000_000, 0)
        }
        fn apply(&self, s: &mut (u64, u64), now: Nanos, op: Op) -> Decision {
            let sec = now.0 / 1_000_000_000;
            if sec > s.0 {
                *s = (sec, 0);
            }
            let cost = match op {
                Op::Check { cost } => cost,
                _ => 0,
            };
            if s.1 + cost <= self.0 {
                s.1 += cost;
                Decision::allow(self.0, self.0 - s.1, Duration::from_secs(1))
            } else {
                Decision::deny(self.0, self.0 - s.1, Duration::from_secs(1), None)
            }
        }
        fn is_fresh(&self, s: &(u64, u64), now: Nanos) -> bool {
            s.1 == 0 || now.0 / 1_000_000_000 > s.0
        }
    }

    fn check(cost: u64) -> Op {
        Op::Check { cost }
    }

    fn store(
        max_keys: usize,
        shards: usize,
        overflow: Overflow,
    ) -> (MemoryStore<String, (u64, u64), ManualClock>, ManualClock) {
        let clock = ManualClock::new(Nanos::from_secs(100));
        let store = MemoryStore::builder()
            .max_keys(max_keys)
            .shards(shards)
            .overflow(overflow)
            .clock(clock.clone())
            .build_typed()
            .unwrap();
        (store, clock)
    }

    #[test]
    fn looks_up_by_borrowed_key_and_keeps_state_per_key() {
        let (s, _) = store(100, 4, Overflow::EvictLive);
        let alg = PerSecond(2);
        assert!(s.apply_now(&alg, "a", check(1)).unwrap().allowed);
        assert!(s.apply_now(&alg, "a", check(1)).unwrap().allowed);
        assert!(!s.apply_now(&alg, "a", check(1)).unwrap().allowed);
        assert!(s.apply_now(&alg, "b", check(2)).unwrap().allowed);
        assert_eq!(s.len(), 2);
        assert_eq!(s.state("a"), Some((100, 2)));
    }

    #[test]
    fn probes_and_impossible_requests_do_not_store_keys() {
        let (s, _) = store(100, 4, Overflow::EvictLive);
        let alg = PerSecond(2);
        assert!(s.apply_now(&alg, "a", check(0)).unwrap().allowed);
        assert!(!s.apply_now(&alg, "b", check(3)).unwrap().allowed);
        assert!(s.is_empty());
    }

    #[test]
    fn unsupported_operations_are_refused_before_any_change() {
        let (s, _) = store(100, 4, Overflow::EvictLive);
        let alg = PerSecond(2);
        let err = s.apply_now(&alg, "a", Op::Reserve { cost: 1 }).unwrap_err();
        assert!(matches!(
            err,
            StoreError::Unsupported {
                algorithm: "per_second",
                op: OpKind::Reserve
            }
        ));
        assert!(!err.is_transient());
        assert!(s.is_empty());
    }

    #[test]
    fn idle_eviction_is_lossless_and_counted() {
        // One shard of 4 places: the fifth key forces a sweep.
        let (s, clock) = store(4, 1, Overflow::RefuseNew);
        let alg = PerSecond(1);
        for k in ["a", "b", "c", "d"] {
            assert!(s.apply_now(&alg, k, check(1)).unwrap().allowed);
        }
        // Still the same second: all four are live, so a fifth key is refused.
        assert!(!s.apply_now(&alg, "e", check(1)).unwrap().allowed);
        assert_eq!(s.stats().refused_new, 1);
        // A second later all four are fresh again and the next sweep drops them.
        clock.advance(Duration::from_secs(1));
        assert!(s.apply_now(&alg, "e", check(1)).unwrap().allowed);
        let stats = s.stats();
        assert_eq!(stats.keys, 1);
        assert_eq!(stats.evicted_idle, 4);
        assert!(!s.apply_now(&alg, "e", check(1)).unwrap().allowed);
    }

    #[test]
    fn live_overflow_evicts_one_key_and_keeps_memory_bounded() {
        let (s, _) = store(8, 1, Overflow::EvictLive);
        let alg = PerSecond(1);
        for i in 0..100 {
            assert!(
                s.apply_now(&alg, &format!("k{i}"), check(1))
                    .unwrap()
                    .allowed
            );
            assert!(s.len() <= 8);
        }
        let stats = s.stats();
        assert_eq!(stats.keys, 8);
        assert_eq!(stats.evicted_live, 92);
    }

    #[test]
    fn eviction_on_and_off_give_identical_decisions() {
        // 64 keys, at most 16 live in any second; bounded store of 16 vs unbounded.
        let (small, c1) = store(16, 1, Overflow::RefuseNew);
        let (big, c2) = store(1 << 20, 1, Overflow::RefuseNew);
        let alg = PerSecond(3);
        let mut x: u64 = 7;
        for step in 0..5_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let second = step / 40;
            c1.set(Nanos::from_secs(100 + second));
            c2.set(Nanos::from_secs(100 + second));
            let key = format!("k{}", (second * 16 + (x >> 33) % 16) % 64);
            let cost = (x >> 20) % 3;
            assert_eq!(
                small.apply_now(&alg, key.as_str(), check(cost)).unwrap(),
                big.apply_now(&alg, key.as_str(), check(cost)).unwrap(),
                "step {step}"
            );
        }
        assert!(small.stats().evicted_idle > 0);
        assert_eq!(small.stats().refused_new, 0);
    }

    #[test]
    fn threads_on_one_key_admit_exactly_the_bound() {
        let (s, _) = store(1000, 16, Overflow::EvictLive);
        let s = Arc::new(s);
        let alg = Arc::new(PerSecond(10_000));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (s, alg) = (s.clone(), alg.clone());
                std::thread::spawn(move || {
                    (0..5_000)
                        .filter(|_| s.apply_now(&*alg, "hot", check(1)).unwrap().allowed)
                        .count()
                })
            })
            .collect();
        let admitted: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(admitted, 10_000);
    }

    #[test]
    fn apply_many_checks_every_op_before_applying_any() {
        let (s, _) = store(100, 4, Overflow::EvictLive);
        let alg = PerSecond(5);
        let ok = Request {
            algorithm: &alg,
            key: "a",
            op: check(1),
        };
        let bad = Request {
            algorithm: &alg,
            key: "b",
            op: Op::SetRate { rate: 1.0 },
        };
        let poll = poll_ready(Store::apply_many(&s, &[ok, bad]));
        assert!(matches!(poll, Err(StoreError::Unsupported { .. })));
        assert!(s.is_empty());
        let got = poll_ready(Store::apply_many(&s, &[ok, ok])).unwrap();
        assert_eq!(got.iter().map(|d| d.remaining).collect::<Vec<_>>(), [4, 3]);
    }

    #[test]
    fn invalid_settings_name_the_field() {
        let e = MemoryStore::builder()
            .max_keys(0)
            .build_typed::<u64, ()>()
            .unwrap_err();
        assert!(e.to_string().contains("max_keys"));
        let e = MemoryStore::builder()
            .shards(3)
            .build_typed::<u64, ()>()
            .unwrap_err();
        assert!(e.to_string().contains("shards"));
    }

    /// Polls a future that must be ready at once (the memory store's are).
    fn poll_ready<F: Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("memory store future was not ready"),
        }
    }
}
