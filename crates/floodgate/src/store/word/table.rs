//! The word store's table: open addressing over groups of eight slots, each slot a key written
//! once and a state word that threads update by compare-and-swap.
//!
//! A slot's key is written before the slot is published (its control byte, stored with release)
//! and never again while the table lives: a reader that saw the control byte reads the key with
//! no lock and no race. Deleting a key freezes its word and turns its control byte into a
//! tombstone, and the key stays where it is until the table is dropped; inserts take only empty
//! slots. So slots are never reused, and tombstones go when the table is rebuilt (see `mod.rs`).
//!
//! Control bytes, eight to a word: `EMPTY` (0x80), `DELETED` (0x81), or the top seven bits of
//! the key's hash (below 0x80) for a live slot. A probe starts at the group the hash picks and
//! walks groups in order until one has an empty slot.

use std::alloc::{self, Layout};
use std::borrow::Borrow;
use std::marker::PhantomData;
use std::mem::{align_of, size_of, MaybeUninit};
use std::ptr::NonNull;

use crate::algorithm::word::Word;
use crate::sync::{AtomicU64, Cell, Ordering};

const EMPTY: u8 = 0x80;
const DELETED: u8 = 0x81;
const LOW: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// One key and its state word.
pub(super) struct Slot<K, W: Word = u64> {
    /// The key's state ([`super::WordState::to_word`]), or the frozen word (all ones) while
    /// the key is being deleted or moved: an update that meets it goes through the shard's lock.
    word: W::Atomic,
    key: Cell<MaybeUninit<K>>,
}

impl<K, W: Word> Slot<K, W> {
    /// Moves the word on by `step`, which gets the current word and returns the next one and a
    /// result: one compare-and-swap when the word changes; when it does not, a second read
    /// confirms that the word `step` saw was still the key's after `step` ran (so a result
    /// computed from the word and the clock read inside `step` is one the key's state gave at
    /// that instant). `step` runs again on any word another thread installed meanwhile. `None`
    /// when the word is frozen (the key is being deleted or moved: the caller goes through the
    /// shard's lock).
    ///
    /// Panics if `step` returns all ones (the frozen word), which `WordState` forbids.
    #[inline(always)]
    pub(super) fn update<R>(&self, mut step: impl FnMut(W) -> (W, R)) -> Option<R> {
        let mut word = W::load(&self.word, Ordering::Acquire);
        loop {
            if word == W::FROZEN {
                return None;
            }
            let (new, result) = step(word);
            assert_ne!(new, W::FROZEN, "WordState::to_word returned all ones");
            if new == word {
                let again = W::load(&self.word, Ordering::Acquire);
                if again == word {
                    return Some(result);
                }
                word = again;
                continue;
            }
            match W::compare_exchange_weak(
                &self.word,
                word,
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(result),
                Err(seen) => word = seen,
            }
        }
    }

    /// Sets the word of a slot that no reader can see yet (a table being built).
    pub(super) fn set(&self, word: W) {
        W::store(&self.word, word, Ordering::Relaxed);
    }

    /// Freezes the word and returns what it held: every later [`Slot::update`] fails. Under the
    /// shard's lock, before the key is deleted or moved.
    pub(super) fn freeze(&self) -> W {
        W::swap(&self.word, W::FROZEN, Ordering::AcqRel)
    }

    /// Freezes the word if it still holds `word` (nobody updated it since).
    pub(super) fn freeze_if(&self, word: W) -> bool {
        W::compare_exchange(
            &self.word,
            word,
            W::FROZEN,
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_ok()
    }

    /// The current word (perhaps frozen).
    pub(super) fn load(&self) -> W {
        W::load(&self.word, Ordering::Acquire)
    }
}

/// A fixed-size table; writers hold the shard's lock, readers hold a pin (`reclaim.rs`).
///
/// One allocation: `groups` control words (on a line boundary), then `groups × 8` slots. A
/// `Table` is a view of it (a pointer and the group count), copied freely; the allocation is
/// owned by whoever holds its [`Table::into_tagged`] pointer (the shard, or its list of
/// retired tables) and freed by [`Table::free`]. The tagged pointer carries the group count
/// in its low bits, so that a reader gets everything it needs to probe from the one load of
/// its shard's pointer, with no header to read first (measured: about 1.5 ns of a 15 ns
/// check).
pub(super) struct Table<K, W: Word = u64> {
    base: NonNull<u8>,
    groups_mask: usize,
    _holds: PhantomData<(*const Slot<K, W>, *const AtomicU64)>,
}

impl<K, W: Word> Clone for Table<K, W> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K, W: Word> Copy for Table<K, W> {}

// SAFETY: a table hands out `&K` to any thread that finds the key (so `K: Sync`), and drops its
// keys on whichever thread frees it (so `K: Send`); everything else in it is atomic.
unsafe impl<K: Send + Sync, W: Word> Sync for Table<K, W> {}
// SAFETY: as above: the thread holding a view may free the table and drop its keys.
unsafe impl<K: Send + Sync, W: Word> Send for Table<K, W> {}

/// A table that the code building it owns until it hands it over: freed, with whatever keys
/// it holds, if that code unwinds first.
pub(super) struct Unpublished<K, W: Word>(Table<K, W>);

impl<K, W: Word> Unpublished<K, W> {
    /// A new empty table of `groups` groups (a power of two).
    pub(super) fn new(groups: usize) -> Unpublished<K, W> {
        Unpublished(Table::new(groups))
    }

    /// A view of it, to fill in.
    pub(super) fn table(&self) -> Table<K, W> {
        self.0
    }

    /// Hands the table over to the caller, who now owns it.
    pub(super) fn publish(self) -> Table<K, W> {
        let table = self.0;
        std::mem::forget(self);
        table
    }
}

impl<K, W: Word> Drop for Unpublished<K, W> {
    fn drop(&mut self) {
        // SAFETY: not published, so this guard is its only owner, and the views handed out by
        // `table` are dropped by the unwinding frame that made them.
        unsafe { self.0.free() };
    }
}

/// The alignment of a table's allocation: its control words start a cache line, and the low six
/// bits of its address hold the group count's logarithm in a tagged pointer.
const TABLE_ALIGN: usize = 64;

impl<K, W: Word> Table<K, W> {
    /// An empty table of `groups` groups (a power of two).
    pub(super) fn new(groups: usize) -> Table<K, W> {
        debug_assert!(groups.is_power_of_two());
        let (layout, slots_at) = Self::layout(groups);
        debug_assert_eq!(slots_at, Self::slots_at(groups));
        // SAFETY: the layout's size is not zero (at least one control word).
        let base = NonNull::new(unsafe { alloc::alloc(layout) })
            .unwrap_or_else(|| alloc::handle_alloc_error(layout));
        let table = Table {
            base,
            groups_mask: groups - 1,
            _holds: PhantomData,
        };
        let control = base.as_ptr().cast::<AtomicU64>();
        for group in 0..groups {
            // SAFETY: inside the allocation, which `layout` sized and aligned for `groups`
            // control words; each is written once before anything reads it.
            unsafe {
                control
                    .add(group)
                    .write(AtomicU64::new(u64::from(EMPTY) * LOW))
            };
        }
        let slots = table.slots_ptr();
        for index in 0..groups * 8 {
            // SAFETY: as above, for the `groups × 8` slots at `slots_at`.
            unsafe {
                slots.add(index).write(Slot {
                    word: W::atomic(W::FROZEN),
                    key: Cell::new(MaybeUninit::uninit()),
                })
            };
        }
        table
    }

    /// The allocation for `groups` groups, and where its slots start in it.
    fn layout(groups: usize) -> (Layout, usize) {
        let too_big = "a table larger than the address space";
        let control = Layout::array::<AtomicU64>(groups)
            .and_then(|l| l.align_to(TABLE_ALIGN))
            .expect(too_big);
        let slots = Layout::array::<Slot<K, W>>(groups * 8).expect(too_big);
        let (layout, slots_at) = control.extend(slots).expect(too_big);
        (layout.pad_to_align(), slots_at)
    }

    /// Where the slots start: [`Table::layout`]'s offset, computed without its checks (they
    /// passed when the table was made).
    #[inline(always)]
    fn slots_at(groups: usize) -> usize {
        (groups * size_of::<AtomicU64>()).next_multiple_of(align_of::<Slot<K, W>>())
    }

    #[inline(always)]
    fn slots_ptr(&self) -> *mut Slot<K, W> {
        // SAFETY (of the offset): within the allocation, by `layout`.
        unsafe { self.base.as_ptr().add(Self::slots_at(self.groups())) }.cast()
    }

    /// The control words, one per group.
    #[inline(always)]
    fn control(&self) -> &[AtomicU64] {
        // SAFETY: `groups` control words were written at `base` by `new`, and live until
        // `free`, which no holder of a view calls while others may use it.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().cast(), self.groups()) }
    }

    /// The slots, eight per group.
    #[inline(always)]
    fn slots(&self) -> &[Slot<K, W>] {
        // SAFETY: as for `control`, for the slots.
        unsafe { std::slice::from_raw_parts(self.slots_ptr(), self.groups() * 8) }
    }

    /// The pointer that owns the table: its address, with the group count's logarithm in the
    /// low bits (the allocation is aligned to 64 bytes, and a count fits in six bits).
    pub(super) fn into_tagged(self) -> *mut u8 {
        let log = self.groups().trailing_zeros() as usize;
        self.base.as_ptr().map_addr(|address| address | log)
    }

    /// The table that [`Table::into_tagged`] gave `tagged` for.
    ///
    /// # Safety
    ///
    /// `tagged` came from `into_tagged`, and the table is not freed while the view (or any
    /// reference it hands out) is used.
    #[inline(always)]
    pub(super) unsafe fn from_tagged(tagged: *mut u8) -> Table<K, W> {
        let log = tagged.addr() & (TABLE_ALIGN - 1);
        let base = tagged.map_addr(|address| address & !(TABLE_ALIGN - 1));
        Table {
            // SAFETY: the caller's: an allocation's address, not null.
            base: unsafe { NonNull::new_unchecked(base) },
            groups_mask: (1 << log) - 1,
            _holds: PhantomData,
        }
    }

    /// Drops the keys it holds (live and tombstones) and frees the allocation.
    ///
    /// # Safety
    ///
    /// The caller owns the table (it came from `new`, or from the tagged pointer the caller
    /// held), and no view of it is used again, on any thread.
    pub(super) unsafe fn free(self) {
        for (index, slot) in self.slots().iter().enumerate() {
            if self.control_byte(index) != EMPTY {
                // SAFETY: live and deleted slots hold a key written once and never dropped
                // before: tombstones keep theirs until now. No other view is used.
                unsafe { (*slot.key.get()).assume_init_drop() };
            }
        }
        let groups = self.groups();
        // SAFETY: both ranges were initialized by `new` and are not used again; then the
        // allocation goes back with the layout it was made with.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.base.as_ptr().cast::<AtomicU64>(),
                groups,
            ));
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                self.slots_ptr(),
                groups * 8,
            ));
            alloc::dealloc(self.base.as_ptr(), Self::layout(groups).0);
        }
    }

    /// Groups in the table.
    pub(super) fn groups(&self) -> usize {
        self.groups_mask + 1
    }

    /// The most slots that may be taken (live or tombstones) before the table must be rebuilt:
    /// 7/8 of them, so that every probe meets an empty slot.
    pub(super) fn room(&self) -> usize {
        self.groups() * 7
    }

    /// Bytes the table allocated.
    pub(super) fn bytes(&self) -> usize {
        Self::layout(self.groups()).0.size()
    }

    /// The live slot holding `key`, if any. Safe without the lock: a published slot's key is
    /// never written again, and slots are never reused.
    #[inline]
    pub(super) fn find<Q>(&self, hash: u64, key: &Q) -> Option<&Slot<K, W>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let tag = tag(hash);
        let mut group = hash as usize & self.groups_mask;
        if self.groups_mask >= PREFETCH_FROM_GROUPS - 1 {
            prefetch(&self.slots()[group * 8..group * 8 + 8]);
        }
        loop {
            let control = self.control()[group].load(Ordering::Acquire);
            let x = control ^ (u64::from(tag) * LOW);
            // Bytes of `x` that are zero, i.e. control bytes equal to the tag (a byte above a
            // match may show up as a false match; the key comparison sorts it out). Empty and
            // deleted bytes have their top bit set, so they never match a tag.
            let mut matches = x.wrapping_sub(LOW) & !x & HIGH;
            while matches != 0 {
                let index = group * 8 + (matches.trailing_zeros() / 8) as usize;
                let slot = &self.slots()[index];
                // SAFETY: the control byte, read with acquire, holds a tag, so the slot was
                // published after its key was written, and the key is not written again or
                // dropped while the table lives.
                if unsafe { (*slot.key.read()).assume_init_ref() }.borrow() == key {
                    return Some(slot);
                }
                matches &= matches - 1;
            }
            if empties(control) != 0 {
                return None;
            }
            group = (group + 1) & self.groups_mask;
        }
    }

    /// Puts `key` with `word` in the first empty slot of its probe sequence. The caller holds
    /// the shard's lock, has checked that the key is absent, and that a slot is free (fewer
    /// than [`Table::room`] slots are taken).
    pub(super) fn insert(&self, hash: u64, key: K, word: W) -> &Slot<K, W> {
        let mut group = hash as usize & self.groups_mask;
        loop {
            let control = self.control()[group].load(Ordering::Relaxed);
            let empty = empties(control);
            if empty != 0 {
                let byte = empty.trailing_zeros() / 8;
                let slot = &self.slots()[group * 8 + byte as usize];
                // SAFETY: the slot is empty, so no reader reads its key (they read only slots
                // whose control byte holds a tag), and the caller's lock excludes writers.
                unsafe { (*slot.key.get()).write(key) };
                slot.set(word);
                let tagged =
                    (control & !(0xFF << (byte * 8))) | (u64::from(tag(hash)) << (byte * 8));
                // Release: a reader that sees the tag sees the key and the word.
                self.control()[group].store(tagged, Ordering::Release);
                return slot;
            }
            group = (group + 1) & self.groups_mask;
        }
    }

    /// Turns the live slot at `index` into a tombstone. The caller holds the shard's lock and
    /// has frozen the slot's word.
    pub(super) fn delete(&self, index: usize) {
        let (group, byte) = (index / 8, index % 8);
        let control = self.control()[group].load(Ordering::Relaxed);
        let deleted = (control & !(0xFF << (byte * 8))) | (u64::from(DELETED) << (byte * 8));
        self.control()[group].store(deleted, Ordering::Release);
    }

    /// The first live slot at or after `from` (wrapping around), with its index.
    pub(super) fn next_live(&self, from: usize) -> Option<(usize, &Slot<K, W>)> {
        let n = self.slots().len();
        (0..n)
            .map(|i| (from + i) % n)
            .find(|&index| self.control_byte(index) < EMPTY)
            .map(|index| (index, &self.slots()[index]))
    }

    /// Slot `index`'s control byte.
    fn control_byte(&self, index: usize) -> u8 {
        (self.control()[index / 8].load(Ordering::Relaxed) >> ((index % 8) * 8)) as u8
    }

    /// The live slots, with their index and key. The caller holds the shard's lock, so the set
    /// of live slots does not change while it iterates.
    pub(super) fn live(&self) -> impl Iterator<Item = (usize, &Slot<K, W>, &K)> {
        self.slots()
            .iter()
            .enumerate()
            .filter(|&(index, _)| self.control_byte(index) < EMPTY)
            // SAFETY: a byte below 0x80 is a live slot's tag: its key was written.
            .map(|(index, slot)| (index, slot, unsafe { (*slot.key.read()).assume_init_ref() }))
    }
}

/// From this many groups on (8,192 slots: 128 KiB a shard for `u64` keys and words, 8 MiB
/// over the default 64 shards), a probe prefetches its first group's slots while it loads the
/// group's control word, so that its two cache misses overlap instead of following each other.
/// Measured on a 2-vCPU AMD EPYC: GCRA at 1m keys 95 → 82 ns a check; at 1k keys (tables of a
/// few groups, in cache) the prefetches would cost 2 ns, hence the threshold.
const PREFETCH_FROM_GROUPS: usize = 1024;

/// Asks the CPU to fetch `slots` into its caches; a hint that changes nothing else.
#[inline(always)]
fn prefetch<T>(slots: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // Every line the slots touch, from the one their first byte is in.
        let start = slots.as_ptr() as usize;
        let end = start + std::mem::size_of_val(slots);
        let mut line = start & !63;
        while line < end {
            // SAFETY: x86-64 always has SSE, which `_mm_prefetch` requires, and a prefetch is a
            // hint that never faults, whatever the address.
            unsafe { _mm_prefetch(line as *const i8, _MM_HINT_T0) };
            line += 64;
        }
    }
}

/// A slot's tag: the hash's top seven bits (the low bits pick the group, and the shard uses bits
/// 32 and up, which a tag of the top seven bits overlaps only for more than 2^25 shards).
#[inline]
fn tag(hash: u64) -> u8 {
    (hash >> 57) as u8
}

/// The top bit of each byte of `control` that is `EMPTY` (top bit set, lowest bit clear).
#[inline]
fn empties(control: u64) -> u64 {
    control & !(control << 7) & HIGH
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn finds_what_was_inserted_and_not_what_was_deleted() {
        let table: Table<String> = Table::new(2);
        for i in 0..14u64 {
            // Hashes that collide on the group, to walk the probe sequence.
            table.insert(i << 57, format!("k{i}"), i);
        }
        for i in 0..14u64 {
            let slot = table.find(i << 57, format!("k{i}").as_str()).unwrap();
            assert_eq!(slot.load(), i);
        }
        assert!(
            table.find(3 << 57, "k4").is_none(),
            "same tag group, other key"
        );
        let (index, _, _) = table.live().find(|(_, _, k)| *k == "k5").unwrap();
        table.delete(index);
        assert!(table.find(5 << 57, "k5").is_none());
        // Keys past the tombstone in the probe sequence are still found.
        assert!(table.find(13 << 57, "k13").is_some());
        assert_eq!(table.live().count(), 13);
        // SAFETY: the only view, not used again.
        unsafe { table.free() };
    }

    #[test]
    fn a_tagged_pointer_gives_back_the_table() {
        for groups in [1, 2, 64, 1 << 12] {
            let table: Table<String, u128> = Table::new(groups);
            table.insert(5, "key".to_string(), 9);
            let tagged = table.into_tagged();
            // SAFETY: from `into_tagged`, and freed below, after the last use.
            let back: Table<String, u128> = unsafe { Table::from_tagged(tagged) };
            assert_eq!(back.groups(), groups);
            assert_eq!(back.find(5, "key").map(Slot::load), Some(9));
            assert_eq!(back.bytes(), Table::<String, u128>::layout(groups).0.size());
            // SAFETY: the only view left, not used again.
            unsafe { back.free() };
        }
    }

    #[test]
    fn empties_sees_only_empty_bytes() {
        let control = u64::from_le_bytes([EMPTY, DELETED, 0x00, 0x7F, EMPTY, 0x01, DELETED, 0x80]);
        assert_eq!(empties(control), 0x8000_0080_0000_0080);
    }
}

/// The table's protocols under loom (`RUSTFLAGS="--cfg floodgate_loom" cargo test -p floodgate-core
/// --lib --release loom`): every interleaving, and loom's cell reports a key read that its
/// write is not ordered before.
#[cfg(all(test, floodgate_loom))]
mod loom_tests {
    use super::*;
    use loom::sync::{Arc, Mutex};

    /// A reader probing while a writer inserts finds either nothing or the whole key and word.
    #[test]
    fn a_reader_sees_a_key_whole_or_not_at_all() {
        loom::model(|| {
            let table = Table::<u64>::new(1);
            let writer = {
                loom::thread::spawn(move || {
                    table.insert(0, 7, 10);
                })
            };
            // Let the writer go first in some executions: loom's search does not reorder the
            // writer's read of the control word before this thread's.
            loom::thread::yield_now();
            if let Some(slot) = table.find(0, &7) {
                assert_eq!(slot.load(), 10);
            }
            writer.join().unwrap();
            // SAFETY: both threads are done with it.
            unsafe { table.free() };
        });
    }

    /// One thread adds one to a key's word by compare-and-swap, going through the lock to the
    /// new table when it meets a frozen word, while a writer moves the key to a new table under
    /// the lock: the moved word has the addition exactly once.
    #[test]
    fn an_update_racing_a_move_is_neither_lost_nor_doubled() {
        loom::model(|| {
            let old = Table::<u64>::new(1);
            old.insert(0, 7, 10);
            let new = Table::<u64>::new(1);
            let moved = Arc::new(Mutex::new(false));
            let updater = {
                let moved = moved.clone();
                loom::thread::spawn(move || {
                    let slot = old.find(0, &7).unwrap();
                    if slot.update(|word| (word + 1, ())).is_none() {
                        assert!(*moved.lock().unwrap(), "frozen, so moved before the lock");
                        let slot = new.find(0, &7).unwrap();
                        slot.update(|word| (word + 1, ())).unwrap();
                    }
                })
            };
            {
                let mut done = moved.lock().unwrap();
                let word = old.find(0, &7).unwrap().freeze();
                let _ = new.insert(0, 7, word);
                *done = true;
            }
            updater.join().unwrap();
            assert_eq!(new.find(0, &7).unwrap().load(), 11);
            // SAFETY: both threads are done with them.
            unsafe {
                old.free();
                new.free();
            }
        });
    }
}
