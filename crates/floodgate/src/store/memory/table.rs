//! One shard's table, built so that deciding for a key the shard already holds writes no line
//! that another key's decision reads: the shard's lock is for writers only (new keys,
//! evictions), and a decision locks just its own entry.
//!
//! # Layout
//!
//! - **Entries** (key, state and a 32-bit `meta` word) live in an [`Arena`]: stable memory,
//!   addressed by a 24-bit id, never moved or freed before the store is dropped. A freed entry
//!   goes on a free list and is reused for another key.
//! - **The index** is extendible hashing: a directory of `2^depth` bucket ids (indexed by the
//!   hash's low bits), each bucket one cache line of 16 `u32` slots holding
//!   `tag (8 bits of the hash) << 24 | (id + 1)`, or 0 when empty. A full bucket splits in two
//!   (one more bit of the hash); the directory doubles when a bucket is as deep as it. Buckets
//!   are in an arena too and are never freed; a directory that doubling replaced is kept until
//!   the store is dropped (the old ones add up to less than the current one).
//! - An entry's `meta`: bit 0 *locked*, bit 1 *live* (holds a key), bits 2–23 the hash's low
//!   22 bits (its place in any directory), bits 24–31 its tag. Only a holder of the entry's
//!   lock reads or writes its key and state; *live* and the hash bits change only while both
//!   the shard lock and the entry lock are held.
//!
//! # The protocol
//!
//! A **reader** (no shard lock) loads the directory, the bucket its hash names and the bucket's
//! slots, all with atomic loads. For each slot with its tag it locks the entry, and accepts it
//! only if the entry is live and holds an equal key. Every index slot and directory cell is an
//! atomic and every id it can read names memory that stays valid, so a reader racing with a
//! writer sees an old or a new index, never torn or freed memory. What it can get wrong is
//! only a *miss*: a key being moved by a split, or inserted just now, may not be seen. A miss
//! sends the caller to the slow path, which takes the shard lock and looks again, and with the
//! lock held no writer moves anything, so that look is exact. A *hit* is always right: the
//! entry is locked, live, and holds the key, and an entry is emptied or reused only under its
//! lock. So there is one live entry per key, decided under that entry's lock, and no update
//! can land in an entry that was evicted (it would be found not live, and retried).
//!
//! A **writer** holds the shard lock ([`Books`] is what it guards). It inserts by filling a
//! free entry under its lock and then publishing a slot (release), removes by clearing the
//! slot and emptying the entry under its lock, and splits by copying slots to the new bucket,
//! repointing directory cells, and only then clearing the moved slots.

use std::borrow::Borrow;
use std::mem::MaybeUninit;

use super::arena::{self, Arena, Blank};
use crate::store::sync::{wait, AtomicPtr, AtomicU32, Cell, Ordering};

/// Slots per bucket: 16 × 4 bytes, one cache line.
const SLOTS: usize = 16;
/// Bits of an entry id in a slot (the rest is the tag).
const ID_BITS: u32 = 24;
const ID_MASK: u32 = (1 << ID_BITS) - 1;
/// The deepest directory: the hash bits an entry's `meta` keeps.
const MAX_DEPTH: u32 = 22;
const DIR_MASK: u32 = (1 << MAX_DEPTH) - 1;

const LOCKED: u32 = 1;
const LIVE: u32 = 2;

/// The most entries a shard can hold (ids `0..MAX_ENTRIES`, stored as `id + 1`): 16,777,214.
pub(super) const MAX_ENTRIES: u32 = ID_MASK - 1;
const _: () = assert!(MAX_ENTRIES <= arena::CAPACITY);

#[inline]
fn tag_of(hash: u64) -> u32 {
    (hash >> 56) as u32
}

#[inline]
fn dir_bits(hash: u64) -> u32 {
    hash as u32 & DIR_MASK
}

/// A live entry's `meta` for `hash`, unlocked.
#[inline]
fn meta_of(hash: u64) -> u32 {
    tag_of(hash) << 24 | dir_bits(hash) << 2 | LIVE
}

#[inline]
fn slot_of(meta: u32, id: u32) -> u32 {
    (meta >> 24) << 24 | (id + 1)
}

/// The entry id in a non-empty slot.
#[inline]
fn slot_id(slot: u32) -> Option<u32> {
    (slot & ID_MASK).checked_sub(1)
}

#[repr(align(64))]
struct Bucket {
    slots: [AtomicU32; SLOTS],
}

impl Blank for Bucket {
    fn blank() -> Self {
        Bucket {
            slots: std::array::from_fn(|_| AtomicU32::new(0)),
        }
    }
}

struct Directory {
    depth: u32,
    buckets: Box<[AtomicU32]>,
}

impl Directory {
    /// The id of the bucket for the hash bits `bits`.
    #[inline]
    fn bucket(&self, bits: u32) -> u32 {
        let cell = (bits & ((1 << self.depth) - 1)) as usize;
        self.buckets[cell].load(Ordering::Acquire)
    }
}

/// One key's place: its key and state, valid while `meta` says *live*.
pub(super) struct Entry<K, S> {
    meta: AtomicU32,
    key: Cell<MaybeUninit<K>>,
    state: Cell<MaybeUninit<S>>,
}

// SAFETY: the key and state are reached only through an `EntryGuard`, which exists on one
// thread at a time (the entry lock), so sharing an entry moves them between threads and never
// shares them: `Send` contents suffice, as for a mutex.
unsafe impl<K: Send, S: Send> Sync for Entry<K, S> {}
// SAFETY: as above; an entry owns its key and state.
unsafe impl<K: Send, S: Send> Send for Entry<K, S> {}

impl<K, S> Blank for Entry<K, S> {
    fn blank() -> Self {
        Entry {
            meta: AtomicU32::new(0),
            key: Cell::new(MaybeUninit::uninit()),
            state: Cell::new(MaybeUninit::uninit()),
        }
    }
}

impl<K, S> Drop for Entry<K, S> {
    fn drop(&mut self) {
        if self.meta.load(Ordering::Acquire) & LIVE != 0 {
            // SAFETY: `&mut self` excludes every other access, and *live* says both are
            // initialized; they are dropped once, as the entry goes.
            unsafe {
                (*self.key.get()).assume_init_drop();
                (*self.state.get()).assume_init_drop();
            }
        }
    }
}

impl<K, S> Entry<K, S> {
    /// Takes the entry's lock, waiting for it while another thread holds it.
    #[inline]
    pub(super) fn lock(&self) -> EntryGuard<'_, K, S> {
        let mut meta = self.meta.load(Ordering::Relaxed);
        let mut spins = 0;
        loop {
            if meta & LOCKED == 0 {
                match self.meta.compare_exchange_weak(
                    meta,
                    meta | LOCKED,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return EntryGuard { entry: self, meta },
                    Err(seen) => {
                        meta = seen;
                        continue;
                    }
                }
            }
            wait(&mut spins);
            meta = self.meta.load(Ordering::Relaxed);
        }
    }

    /// The entry's lock if nobody holds it now.
    pub(super) fn try_lock(&self) -> Option<EntryGuard<'_, K, S>> {
        let meta = self.meta.load(Ordering::Relaxed);
        if meta & LOCKED != 0 {
            return None;
        }
        self.meta
            .compare_exchange(meta, meta | LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| EntryGuard { entry: self, meta })
    }
}

/// A locked entry; dropping it unlocks.
pub(super) struct EntryGuard<'a, K, S> {
    entry: &'a Entry<K, S>,
    /// The entry's `meta` without the lock bit, written back on unlock.
    meta: u32,
}

impl<K, S> EntryGuard<'_, K, S> {
    /// Whether the entry holds a key.
    #[inline]
    pub(super) fn is_live(&self) -> bool {
        self.meta & LIVE != 0
    }

    /// The key. Only for a live entry.
    #[inline]
    pub(super) fn key(&self) -> &K {
        assert!(self.is_live(), "key of an empty entry");
        // SAFETY: the lock makes this guard the only access to the key, *live* says it is
        // initialized, and the borrow of `self` keeps the lock held while the reference lives.
        unsafe { (*self.entry.key.get()).assume_init_ref() }
    }

    /// The state. Only for a live entry.
    #[inline]
    pub(super) fn state(&self) -> &S {
        assert!(self.is_live(), "state of an empty entry");
        // SAFETY: as for `key`.
        unsafe { (*self.entry.state.get()).assume_init_ref() }
    }

    /// The state, to change. Only for a live entry.
    #[inline]
    pub(super) fn state_mut(&mut self) -> &mut S {
        assert!(self.is_live(), "state of an empty entry");
        // SAFETY: as for `key`; `&mut self` makes this the only reference through the guard.
        unsafe { (*self.entry.state.get()).assume_init_mut() }
    }

    /// Makes an empty entry hold `key` and `state`, with `meta` (live) for its hash.
    fn fill(&mut self, meta: u32, key: K, state: S) {
        assert!(!self.is_live(), "filling a live entry");
        // SAFETY: the lock makes this the only access; the entry is empty, so nothing is
        // overwritten without being dropped.
        unsafe {
            (*self.entry.key.get()).write(key);
            (*self.entry.state.get()).write(state);
        }
        self.meta = meta;
    }

    /// Empties a live entry, handing back its key and state.
    fn take(&mut self) -> (K, S) {
        assert!(self.is_live(), "emptying an empty entry");
        self.meta = 0;
        // SAFETY: the lock makes this the only access; *live* said both were initialized, and
        // clearing it (written back on unlock) means they are read out exactly once.
        unsafe {
            (
                (*self.entry.key.get()).assume_init_read(),
                (*self.entry.state.get()).assume_init_read(),
            )
        }
    }
}

impl<K, S> Drop for EntryGuard<'_, K, S> {
    #[inline]
    fn drop(&mut self) {
        self.entry.meta.store(self.meta, Ordering::Release);
    }
}

/// A directory replaced by a bigger one, kept until the table is dropped: a reader may still
/// be looking at it.
struct Retired(*mut Directory);

// SAFETY: the pointer is owned (from `Box::into_raw`) and only freed in `drop`.
unsafe impl Send for Retired {}

impl Drop for Retired {
    fn drop(&mut self) {
        // SAFETY: the directory came from `Box::into_raw`, no table points to it any more, and
        // the table that retired it is being dropped, so no reader is left.
        drop(unsafe { Box::from_raw(self.0) });
    }
}

/// The writer's bookkeeping, guarded by the shard lock: holding `&mut Books` is holding it.
#[derive(Default)]
pub(super) struct Books {
    /// Live entries.
    pub(super) len: usize,
    /// Entry ids handed out so far (`0..next_entry` exist).
    next_entry: u32,
    /// Empty entries below `next_entry`, reused first.
    free: Vec<u32>,
    /// Bucket ids handed out so far.
    next_bucket: u32,
    /// Each bucket's depth (hash bits its keys share).
    depths: Vec<u8>,
    retired: Vec<Retired>,
    /// Where the search for a live entry to evict goes on from.
    pub(super) cursor: u32,
    /// New keys that must arrive at a full shard before the next idle sweep.
    pub(super) sweep_credit: usize,
    pub(super) evicted_idle: u64,
    pub(super) evicted_live: u64,
    pub(super) refused_new: u64,
}

impl Books {
    /// Entry ids that exist (live or not): `0..ids()`.
    pub(super) fn ids(&self) -> u32 {
        self.next_entry
    }
}

/// The lock-free part of a shard: directory, buckets and entries.
pub(super) struct Table<K, S> {
    dir: AtomicPtr<Directory>,
    buckets: Arena<Bucket>,
    entries: Arena<Entry<K, S>>,
}

impl<K, S> Table<K, S> {
    /// An empty table (one empty bucket) and its writer's books.
    pub(super) fn new() -> (Self, Books) {
        let buckets = Arena::new();
        buckets.reserve(0);
        let dir = Box::new(Directory {
            depth: 0,
            buckets: Box::new([AtomicU32::new(0)]),
        });
        let table = Table {
            dir: AtomicPtr::new(Box::into_raw(dir)),
            buckets,
            entries: Arena::new(),
        };
        let books = Books {
            next_bucket: 1,
            depths: vec![0],
            ..Books::default()
        };
        (table, books)
    }

    #[inline]
    fn directory(&self) -> &Directory {
        // SAFETY: the pointer is never null, and a directory is freed only when the table is
        // dropped (the current one here, replaced ones through `Books::retired`), which
        // `&self` rules out.
        unsafe { &*self.dir.load(Ordering::Acquire) }
    }

    /// Entry `id`, which must be below [`Books::ids`].
    #[inline]
    pub(super) fn entry(&self, id: u32) -> &Entry<K, S> {
        self.entries.get(id)
    }

    /// Finds `key`'s live entry and locks it. Without the shard lock this may miss a key that a
    /// writer is moving (see the module documentation); with it, it is exact.
    #[inline]
    pub(super) fn find<Q>(&self, hash: u64, key: &Q) -> Option<(u32, EntryGuard<'_, K, S>)>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.find_skipping(hash, key, |_| false)
    }

    /// [`Table::find`], not looking at the entries `skip` names: those the caller holds locked
    /// already (it would wait for itself).
    #[inline]
    pub(super) fn find_skipping<Q>(
        &self,
        hash: u64,
        key: &Q,
        skip: impl Fn(u32) -> bool,
    ) -> Option<(u32, EntryGuard<'_, K, S>)>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let bucket = self.buckets.get(self.directory().bucket(dir_bits(hash)));
        let tag = tag_of(hash);
        let meta = meta_of(hash);
        for cell in &bucket.slots {
            let slot = cell.load(Ordering::Acquire);
            if slot >> 24 != tag {
                continue;
            }
            let Some(id) = slot_id(slot) else { continue };
            if skip(id) {
                continue;
            }
            let guard = self.entries.get(id).lock();
            if guard.meta == meta && guard.key().borrow() == key {
                return Some((id, guard));
            }
        }
        None
    }

    /// Inserts `key` (hashing to `hash`, and not in the table) with `state`, and returns its
    /// entry, locked. Gives them back if the shard cannot take another entry.
    pub(super) fn insert(
        &self,
        books: &mut Books,
        hash: u64,
        key: K,
        state: S,
    ) -> Result<(u32, EntryGuard<'_, K, S>), (K, S)> {
        let id = match books.free.pop() {
            Some(id) => id,
            None if books.next_entry < MAX_ENTRIES => {
                self.entries.reserve(books.next_entry);
                books.next_entry += 1;
                books.next_entry - 1
            }
            None => return Err((key, state)),
        };
        // A reader that read an old slot naming this entry may hold its lock for a moment.
        let mut guard = self.entries.get(id).lock();
        guard.fill(meta_of(hash), key, state);
        let slot = slot_of(guard.meta, id);
        loop {
            let bucket = self.buckets.get(self.directory().bucket(dir_bits(hash)));
            if let Some(cell) = bucket.slots.iter().find(|c| c.load(Ordering::Relaxed) == 0) {
                cell.store(slot, Ordering::Release);
                books.len += 1;
                return Ok((id, guard));
            }
            if !self.split(books, hash) {
                let given_back = guard.take();
                books.free.push(id);
                return Err(given_back);
            }
        }
    }

    /// Empties entry `id` (locked by `guard`), takes it out of the index and frees it.
    pub(super) fn remove(
        &self,
        books: &mut Books,
        id: u32,
        mut guard: EntryGuard<'_, K, S>,
    ) -> (K, S) {
        let slot = slot_of(guard.meta, id);
        let bits = (guard.meta >> 2) & DIR_MASK;
        let bucket = self.buckets.get(self.directory().bucket(bits));
        if let Some(cell) = bucket
            .slots
            .iter()
            .find(|c| c.load(Ordering::Relaxed) == slot)
        {
            cell.store(0, Ordering::Release);
        }
        let taken = guard.take();
        drop(guard);
        books.free.push(id);
        books.len -= 1;
        taken
    }

    /// Splits the full bucket `hash` falls in; false if it is as deep as can be.
    fn split(&self, books: &mut Books, hash: u64) -> bool {
        let bits = dir_bits(hash);
        let mut dir = self.directory();
        let old_id = dir.bucket(bits);
        let depth = u32::from(books.depths[old_id as usize]);
        if depth == dir.depth {
            if dir.depth == MAX_DEPTH {
                return false;
            }
            self.double(books);
            dir = self.directory();
        }
        let new_id = books.next_bucket;
        self.buckets.reserve(new_id);
        books.next_bucket += 1;
        books.depths[old_id as usize] += 1;
        books.depths.push(books.depths[old_id as usize]);
        let (old, new) = (self.buckets.get(old_id), self.buckets.get(new_id));
        let bit = 1u32 << depth;
        let mut moved = [false; SLOTS];
        let mut next = 0;
        for (i, cell) in old.slots.iter().enumerate() {
            let slot = cell.load(Ordering::Relaxed);
            let Some(id) = slot_id(slot) else { continue };
            let entry_bits = (self.entries.get(id).meta.load(Ordering::Relaxed) >> 2) & DIR_MASK;
            if entry_bits & bit != 0 {
                new.slots[next].store(slot, Ordering::Release);
                next += 1;
                moved[i] = true;
            }
        }
        // Every directory cell whose low `depth + 1` bits are this bucket's with the new bit set.
        let first = (bits & (bit - 1)) | bit;
        for cell in dir
            .buckets
            .iter()
            .skip(first as usize)
            .step_by(2 * bit as usize)
        {
            cell.store(new_id, Ordering::Release);
        }
        for (cell, _) in old.slots.iter().zip(moved).filter(|(_, m)| *m) {
            cell.store(0, Ordering::Release);
        }
        true
    }

    /// Replaces the directory with one of twice the cells, each pair naming the same bucket.
    fn double(&self, books: &mut Books) {
        let old = self.dir.load(Ordering::Relaxed);
        // SAFETY: the current directory is valid (see `directory`).
        let old_ref = unsafe { &*old };
        let cells = old_ref.buckets.len();
        let bigger = Box::new(Directory {
            depth: old_ref.depth + 1,
            buckets: (0..2 * cells)
                .map(|i| AtomicU32::new(old_ref.buckets[i % cells].load(Ordering::Relaxed)))
                .collect(),
        });
        self.dir.store(Box::into_raw(bigger), Ordering::Release);
        books.retired.push(Retired(old));
    }

    /// Bytes the table has allocated: entries, buckets, directories and the writer's lists.
    pub(super) fn bytes(&self, books: &Books) -> usize {
        let dir = |d: &Directory| d.buckets.len() * 4;
        // SAFETY: retired directories stay valid until the table is dropped.
        let retired: usize = books.retired.iter().map(|r| dir(unsafe { &*r.0 })).sum();
        self.entries.bytes()
            + self.buckets.bytes()
            + dir(self.directory())
            + retired
            + books.free.capacity() * 4
            + books.depths.capacity()
    }
}

impl<K, S> Drop for Table<K, S> {
    fn drop(&mut self) {
        // SAFETY: the current directory came from `Box::into_raw` and `&mut self` means no
        // reader is left; replaced ones are freed by `Retired`.
        drop(unsafe { Box::from_raw(self.dir.load(Ordering::Acquire)) });
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests;

#[cfg(all(test, floodgate_loom))]
mod loom_tests;
