//! The word store: the memory store for states that fit in one word of 8 or 16 bytes, whose
//! checks take no lock, whose refusals write nothing when they leave the state as it was (all
//! but a fixed window's first refusal in a new window; 16-byte words: where the CPU has an
//! atomic 16-byte load, see `atom.rs`), and whose admissions write only the key's own word.
//!
//! [`MemoryStore`](super::MemoryStore) takes a shard lock for every decision, so two threads on
//! different keys of one shard write the same lock line, and every refusal writes it too. A
//! [`WordStore`] keeps each key's state as one word (a [`WordState`]: a `u64` such as GCRA's
//! theoretical arrival time, or a `u128` such as a fixed window's start and count) and decides
//! without any lock:
//!
//! 1. it pins the thread (a store to a line of its own; `reclaim.rs`), loads the shard's table
//!    and probes it; keys are written once, before their slot is published, so the probe reads
//!    them safely with no lock;
//! 2. it applies the algorithm to a copy of the state word at the store's current time (read
//!    after the word); if the state is unchanged (a refusal, a probe) and a second read finds the
//!    same word, the decision is final and nothing was written; otherwise one compare-and-swap
//!    installs the new word, and a failed one (another thread updated the key) starts again from
//!    the word it found;
//! 3. a key the table does not hold (unless its first operation would leave it fresh, which
//!    stores nothing), a word that is frozen (its key is being deleted or moved), and every
//!    change to the table itself (inserts, evictions, growth) go through the shard's lock, as in
//!    the memory store.
//!
//! **Exactness.** Each decision is linearizable per key, like the memory store's: a decision
//! that changed the state took effect at its compare-and-swap, which succeeds only on the word it
//! was computed from; one that left the state unchanged (a refusal, a probe) took effect at a
//! second read of the word, after the clock, that found the word unchanged. Either way the
//! decision, `remaining` and `retry_after` included, is the one the key's state gave at the
//! clock's reading, and with a monotonic clock no later decision on the key reads an earlier
//! instant.
//!
//! **Across cores.** Refusals only read, so threads refusing on any keys share no written line
//! and scale with cores. Admissions on different keys share no lock, but keys still share cache
//! lines (four slots to a line for `u64` keys and words, two for `u128` words), so two threads
//! admitting on keys of one line pass it between their cores; only a line per key would avoid
//! that, at several times the memory. A `u128` word is read by one 16-byte load where the CPU
//! has one that is atomic (x86-64 with AVX): see `atom.rs` for where it is not.
//!
//! **Bound and eviction** are the memory store's (`max_keys` per shard, idle keys dropped
//! losslessly first, then the [`Overflow`] policy). A deleted key leaves a tombstone that no new
//! key reuses (a reader may still be reading it); a shard's table is rebuilt without its
//! tombstones, or twice as big, when taken slots reach 7/8 of it, and the old table is freed once
//! no reader can still be in it (a grace period, `reclaim.rs`).
//!
//! **Chains** take [`Store::apply_chain`]'s default: links are applied one at a time and chains
//! with all-or-nothing links are refused, since no lock keeps other threads' checks out while a
//! chain would be undone. Use the memory store for pipelines.

mod reclaim;
mod table;

use std::borrow::Borrow;
use std::fmt;
use std::future::{ready, Future};
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;

use self::table::{Slot, Table, Unpublished};
use super::memory::{MemoryStoreBuilder, Overflow, StoreStats};
use super::shard_lock::ShardLock;
use super::{apply_each, ensure_supported, Key, KeyedOp, LocalStore, OwnedKey, Store};
use crate::algorithm::gcra::GcraState;
use crate::algorithm::word::Atom;
pub use crate::algorithm::word::{Word, WordState};
use crate::algorithm::Algorithm;
use crate::sync::{AtomicPtr, Ordering};
use crate::{Clock, CoarseClock, ConfigError, Decision, Nanos, Op, StoreError};

/// The embedded store for word-sized states: `K` is the owned key type, `S` the state, `C` the
/// clock. Built by [`MemoryStoreBuilder::build_word`]; see the [module documentation](self).
pub struct WordStore<K = Key, S: WordState = GcraState, C = CoarseClock> {
    shards: Box<[Shard<K, S::Word>]>,
    shard_mask: usize,
    hasher: foldhash::fast::RandomState,
    clock: C,
    per_shard: usize,
    overflow: Overflow,
    namespaces: super::Namespaces,
    _state: PhantomData<fn() -> S>,
    /// The tables' keys are shared with readers on every thread: the store is `Send` and
    /// `Sync` as a table is (`K: Send + Sync`), not as the raw pointers alone would say.
    _tables: PhantomData<Box<Table<K, S::Word>>>,
}

/// New keys between two tries at freeing a shard's retired tables (besides the try that
/// follows each retirement and each sweep).
const RECLAIM_EVERY: u32 = 64;

/// One shard: the table readers load, on a cache line of its own so that writers taking the
/// lock (or reading the books) never invalidate it, and the lock with what it guards.
#[repr(align(64))]
struct Shard<K, W: Word> {
    /// The current table; replaced (and the old one retired) only under `books`' lock.
    table: TableCell<K, W>,
    books: ShardLock<Books<K, W>>,
}

/// The shard's current table, as its tagged pointer ([`Table::into_tagged`]).
#[repr(align(64))]
struct TableCell<K, W: Word>(AtomicPtr<u8>, PhantomData<Table<K, W>>);

impl<K, W: Word> TableCell<K, W> {
    fn new(table: Table<K, W>) -> TableCell<K, W> {
        TableCell(AtomicPtr::new(table.into_tagged()), PhantomData)
    }

    /// The current table.
    ///
    /// # Safety
    ///
    /// The caller holds a pin taken before this load, or the shard's lock, for as long as it
    /// uses the table (tables are replaced and retired under the lock, and freed after a grace
    /// period).
    #[inline(always)]
    unsafe fn load(&self) -> Table<K, W> {
        // SAFETY: the pointer came from `into_tagged`; the caller's pin or lock keeps it.
        unsafe { Table::from_tagged(self.0.load(Ordering::Acquire)) }
    }

    /// Installs `new`; returns the tagged pointer of the table it replaces, which the caller
    /// (holding the lock) now owns.
    fn replace(&self, new: Table<K, W>) -> *mut u8 {
        self.0.swap(new.into_tagged(), Ordering::AcqRel)
    }
}

/// What only the shard lock's holder reads and writes.
struct Books<K, W: Word> {
    /// Live keys in the current table.
    live: usize,
    /// Taken slots (live and tombstones) in the current table.
    taken: usize,
    /// New keys that must arrive at a full shard before the next idle sweep.
    sweep_credit: usize,
    /// Where the search for the next key to evict under [`Overflow::EvictLive`] starts.
    victims_from: usize,
    /// New keys until the next try at freeing retired tables.
    reclaim_credit: u32,
    /// Tables replaced but perhaps still read, with the epoch they were retired at.
    retired: Vec<(*mut u8, u64)>,
    /// The retired pointers own tables of `K` keys.
    _tables: PhantomData<Table<K, W>>,
    evicted_idle: u64,
    evicted_live: u64,
    refused_new: u64,
}

// SAFETY: the tagged pointers in `retired` own their tables (`Table::into_tagged`), whose
// keys may be dropped on another thread when `K` is `Send`; the lock moves `Books` between
// threads one at a time.
unsafe impl<K: Send, W: Word> Send for Books<K, W> {}

impl<C: Clock> MemoryStoreBuilder<C> {
    /// Validates the settings and builds a [`WordStore`] of owned keys `K` holding word-sized
    /// states `S`: `build_word::<u64, GcraState>()` for one GCRA limit on numeric keys.
    pub fn build_word<K, S: WordState>(self) -> Result<WordStore<K, S, C>, ConfigError> {
        let (shards, per_shard) = self.layout()?;
        Ok(WordStore {
            shards: (0..shards)
                .map(|_| Shard {
                    table: TableCell::new(Table::new(1)),
                    books: ShardLock::new(Books {
                        live: 0,
                        taken: 0,
                        sweep_credit: 0,
                        victims_from: 0,
                        reclaim_credit: RECLAIM_EVERY,
                        retired: Vec::new(),
                        _tables: PhantomData,
                        evicted_idle: 0,
                        evicted_live: 0,
                        refused_new: 0,
                    }),
                })
                .collect(),
            shard_mask: shards - 1,
            hasher: foldhash::fast::RandomState::default(),
            clock: self.clock,
            per_shard,
            overflow: self.overflow,
            namespaces: super::Namespaces::new(),
            _state: PhantomData,
            _tables: PhantomData,
        })
    }
}

impl<K, S: WordState, C> fmt::Debug for WordStore<K, S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WordStore")
            .field("shards", &self.shards.len())
            .field("per_shard", &self.per_shard)
            .field("overflow", &self.overflow)
            .finish_non_exhaustive()
    }
}

impl<K, S: WordState, C> Drop for WordStore<K, S, C> {
    fn drop(&mut self) {
        for shard in self.shards.iter_mut() {
            // SAFETY: `&mut self`: no reader or writer is left. Each pointer came from
            // `Table::into_tagged` and is owned by the shard (current) or its books (retired).
            unsafe { shard.table.load().free() };
            for (table, _) in shard.books.lock().retired.drain(..) {
                // SAFETY: as above.
                unsafe { Table::<K, S::Word>::from_tagged(table).free() };
            }
        }
    }
}

impl<K, S, C> WordStore<K, S, C>
where
    K: Hash + Eq + Clone + Send + Sync,
    S: WordState,
    C: Clock,
{
    /// The store's clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    #[inline]
    fn shard_of(&self, hash: u64) -> &Shard<K, S::Word> {
        // The table uses the hash's low bits (group) and top seven (tag): the shard takes the
        // middle ones, as in the memory store.
        &self.shards[(hash >> 32) as usize & self.shard_mask]
    }

    /// [`LocalStore::apply_now`] for an operation already checked with `ensure_supported`.
    #[inline]
    fn apply_supported<Q, A>(&self, algorithm: &A, key: &Q, op: Op) -> Result<Decision, StoreError>
    where
        A: Algorithm<State = S>,
        K: OwnedKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let shard = self.shard_of(hash);
        if let Some(pin) = reclaim::pin() {
            // SAFETY: the table is retired only after it was replaced, and freed only once no
            // pin taken before that can remain; `pin` lives until the end of this block.
            let table = unsafe { shard.table.load() };
            match table.find(hash, key) {
                Some(slot) => {
                    if let Some(decision) = self.update(slot, algorithm, op)? {
                        return Ok(decision);
                    }
                }
                None => {
                    let now = self.clock.now();
                    let mut state = algorithm.fresh(now);
                    let decision = algorithm.apply(&mut state, now, op);
                    // A key whose first operation leaves it fresh is not stored at all.
                    if algorithm.is_fresh(&state, now) {
                        return Ok(decision);
                    }
                }
            }
            drop(pin);
        }
        self.apply_locked(shard, hash, algorithm, key, op)
    }

    /// Applies `op` to the key of `slot` by compare-and-swap on its word; `None` when the word
    /// is frozen (the caller retries under the lock).
    #[inline(always)]
    fn update<A: Algorithm<State = S>>(
        &self,
        slot: &Slot<K, S::Word>,
        algorithm: &A,
        op: Op,
    ) -> Result<Option<Decision>, StoreError> {
        // The step returns an `Option<Decision>` (`None`: another algorithm's state), whose
        // `None` lives in a niche of the decision: no `Result` layer to copy it through (a
        // token bucket's check paid 3 ns for it). Writing the decision to a captured
        // `&mut Option` instead kept the step from being inlined (GCRA: 14 → 22 ns a check).
        let outcome = slot.update(|word| {
            // After the word: with a monotonic clock, no later decision on this key reads an
            // earlier instant than the one that wrote the word.
            let now = self.clock.now();
            let mut state = S::from_word(word);
            if !algorithm.owns(&state) {
                return (word, None);
            }
            let decision = algorithm.apply(&mut state, now, op);
            (state.to_word(), Some(decision))
        });
        match outcome {
            Some(Some(decision)) => Ok(Some(decision)),
            None => Ok(None),
            Some(None) => Self::conflict(slot, algorithm),
        }
    }

    /// The error for a key whose state another algorithm wrote, read again from the slot; `None`
    /// (go through the lock) if the word froze since the step saw it: a frozen word is no
    /// state to name.
    #[cold]
    fn conflict<A: Algorithm<State = S>>(
        slot: &Slot<K, S::Word>,
        algorithm: &A,
    ) -> Result<Option<Decision>, StoreError> {
        let word = slot.load();
        if word == S::Word::FROZEN {
            return Ok(None);
        }
        Err(StoreError::StateConflict {
            algorithm: algorithm.name(),
            found: algorithm.state_name(&S::from_word(word)),
        })
    }

    /// The slow path: under the shard's lock, the key's slot in the current table (updated as
    /// on the fast path), or a new one.
    #[cold]
    fn apply_locked<Q, A>(
        &self,
        shard: &Shard<K, S::Word>,
        hash: u64,
        algorithm: &A,
        key: &Q,
        op: Op,
    ) -> Result<Decision, StoreError>
    where
        A: Algorithm<State = S>,
        K: OwnedKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut books = shard.books.lock();
        // SAFETY: tables are replaced and freed only by the lock's holder.
        let table = unsafe { shard.table.load() };
        if let Some(slot) = table.find(hash, key) {
            // Only the lock's holder freezes words, and it deletes or moves their keys before
            // releasing the lock: a slot found under the lock is never frozen.
            return match self.update(slot, algorithm, op)? {
                Some(decision) => Ok(decision),
                None => unreachable!("a frozen word outside the lock's holder"),
            };
        }
        let now = self.clock.now();
        let mut state = algorithm.fresh(now);
        let decision = algorithm.apply(&mut state, now, op);
        if algorithm.is_fresh(&state, now) {
            return Ok(decision);
        }
        if books.live >= self.per_shard && !self.make_room(&mut books, table, algorithm, now) {
            books.refused_new += 1;
            return Ok(Decision::deny(
                decision.limit,
                0,
                decision.reset_after,
                None,
            ));
        }
        let table = if books.taken >= table.room() {
            self.rebuild(shard, &mut books, table)
        } else {
            table
        };
        table.insert(hash, K::from_borrowed(key), state.to_word());
        books.taken += 1;
        books.live += 1;
        // A table retired while readers were in it is freed on a later try.
        books.reclaim_credit = books.reclaim_credit.saturating_sub(1);
        if books.reclaim_credit == 0 {
            Self::reclaim(&mut books);
        }
        Ok(decision)
    }

    /// Frees one place in a full shard; false if the overflow policy refuses the new key. The
    /// memory store's rule: an idle sweep, then at most one sweep per quarter shard of new keys.
    #[cold]
    fn make_room<A: Algorithm<State = S>>(
        &self,
        books: &mut Books<K, S::Word>,
        table: Table<K, S::Word>,
        algorithm: &A,
        now: Nanos,
    ) -> bool {
        if books.sweep_credit == 0 {
            self.sweep_table(books, table, algorithm, now);
            if books.live < self.per_shard {
                return true;
            }
            books.sweep_credit = (self.per_shard / 4).max(1);
        }
        books.sweep_credit -= 1;
        match self.overflow {
            Overflow::RefuseNew => false,
            Overflow::EvictLive => {
                // An arbitrary key (slots are in hash order), found from where the last search
                // stopped, so that tombstones left by earlier evictions are not walked again.
                if let Some((index, slot)) = table.next_live(books.victims_from) {
                    slot.freeze();
                    table.delete(index);
                    books.victims_from = index + 1;
                    books.live -= 1;
                    books.evicted_live += 1;
                }
                true
            }
        }
    }

    /// Deletes every key of `table` whose state is fresh at `now`; returns how many.
    fn sweep_table<A: Algorithm<State = S>>(
        &self,
        books: &mut Books<K, S::Word>,
        table: Table<K, S::Word>,
        algorithm: &A,
        now: Nanos,
    ) -> usize {
        let mut dropped = 0;
        for (index, slot, _) in table.live() {
            let word = slot.load();
            // Freeze only the word judged fresh: a thread that updated it meanwhile keeps it.
            if algorithm.is_fresh(&S::from_word(word), now) && slot.freeze_if(word) {
                table.delete(index);
                dropped += 1;
            }
        }
        books.live -= dropped;
        books.evicted_idle += dropped as u64;
        dropped
    }

    /// Replaces the shard's full `table` by one without tombstones, twice as big when more than
    /// half of its room is live, and retires the old one. Each word is frozen as it is copied,
    /// so an update racing the copy fails its compare-and-swap and retries under the lock.
    #[cold]
    fn rebuild(
        &self,
        shard: &Shard<K, S::Word>,
        books: &mut Books<K, S::Word>,
        table: Table<K, S::Word>,
    ) -> Table<K, S::Word> {
        let groups = if books.live + 1 > table.room() / 2 {
            table.groups() * 2
        } else {
            table.groups()
        };
        // Freed, with the keys copied so far, if a key's hashing or cloning panics.
        let building = Unpublished::new(groups);
        let new = building.table();
        // First the keys, whose hashing and cloning may panic: a panic here leaves the old
        // table as it was. Then the words, frozen one by one with no code of the caller's
        // in between, so that no word stays frozen in a table that is still current.
        let moves: Vec<_> = table
            .live()
            .map(|(_, old, key)| {
                let hash = self.hasher.hash_one(key);
                (old, new.insert(hash, key.clone(), S::Word::FROZEN))
            })
            .collect();
        for (old, moved) in moves {
            moved.set(old.freeze());
        }
        let new = building.publish();
        let old = shard.table.replace(new);
        books.retired.push((old, reclaim::domain().retire()));
        books.taken = books.live;
        Self::reclaim(books);
        // Just installed: freed only after a later holder of this lock replaces it.
        new
    }

    /// Frees the retired tables no reader can still be in: those retired before the oldest pin.
    fn reclaim(books: &mut Books<K, S::Word>) {
        books.reclaim_credit = RECLAIM_EVERY;
        if books.retired.is_empty() {
            return;
        }
        let Some(oldest) = reclaim::domain().oldest_pin() else {
            return;
        };
        books.retired.retain(|&(table, retired)| {
            if retired < oldest {
                // SAFETY: made by `Box::into_raw`, replaced (so no new reader finds it), and
                // every reader pinned before its retirement has left.
                unsafe { Table::<K, S::Word>::from_tagged(table).free() };
                false
            } else {
                true
            }
        });
    }
}

/// The word store's side of the in-process stores' surface (see [`LocalStore`]).
impl<K, S, C> LocalStore<K, S> for WordStore<K, S, C>
where
    K: Hash + Eq + Clone + Send + Sync,
    S: WordState,
    C: Clock,
{
    #[inline]
    fn apply_now<Q, A>(&self, algorithm: &A, key: &Q, op: Op) -> Result<Decision, StoreError>
    where
        A: Algorithm<State = S>,
        K: OwnedKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        ensure_supported(algorithm, op)?;
        self.apply_supported(algorithm, key, op)
    }

    fn sweep<A: Algorithm<State = S>>(&self, algorithm: &A) -> usize {
        let mut dropped = 0;
        for shard in self.shards.iter() {
            let mut books = shard.books.lock();
            let now = self.clock.now();
            // SAFETY: tables are replaced and freed only by the lock's holder.
            let table = unsafe { shard.table.load() };
            dropped += self.sweep_table(&mut books, table, algorithm, now);
            Self::reclaim(&mut books);
        }
        dropped
    }

    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.books.lock().live).sum()
    }

    fn stats(&self) -> StoreStats {
        let mut stats = StoreStats::default();
        for shard in self.shards.iter() {
            let books = shard.books.lock();
            stats.keys += books.live as u64;
            stats.evicted_idle += books.evicted_idle;
            stats.evicted_live += books.evicted_live;
            stats.refused_new += books.refused_new;
        }
        stats
    }

    fn table_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let books = s.books.lock();
                // SAFETY: tables are replaced and freed only by the lock's holder.
                let current = unsafe { s.table.load() }.bytes();
                // SAFETY: retired tables are freed only by the lock's holder.
                current
                    + books
                        .retired
                        .iter()
                        .map(|&(t, _)| unsafe { Table::<K, S::Word>::from_tagged(t) }.bytes())
                        .sum::<usize>()
            })
            .sum::<usize>()
            + std::mem::size_of_val(&*self.shards)
    }

    fn state<Q>(&self, key: &Q) -> Option<S>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let shard = self.shard_of(hash);
        let _books = shard.books.lock();
        // SAFETY: tables are replaced and freed only by the lock's holder.
        let table = unsafe { shard.table.load() };
        table.find(hash, key).map(|slot| S::from_word(slot.load()))
    }
}

impl<K, Q, A, C> Store<Q, A> for WordStore<K, A::State, C>
where
    A: Algorithm,
    A::State: WordState,
    K: OwnedKey<Q> + Hash + Eq + Clone + Send + Sync,
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
            self.apply_supported(r.algorithm, r.key, r.op)
        }))
    }

    fn same_store(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }

    fn namespaces(&self) -> Option<&super::Namespaces> {
        Some(&self.namespaces)
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests;
