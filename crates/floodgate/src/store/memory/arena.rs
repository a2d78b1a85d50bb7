//! Stable memory for a shard's buckets and entries: items are addressed by a `u32` id, live in
//! chunks that are allocated as ids grow and never move or get freed before the arena is
//! dropped, so a reader holding an id (from an index it read without a lock) always reaches
//! valid memory of the right type, whatever writers did since.

use std::ptr;

use crate::store::sync::{AtomicPtr, Ordering};

/// The first chunk's size, as a power of two; chunk `c` holds `FIRST << c` items.
const FIRST_SHIFT: u32 = 4;
/// Chunks: `16 × (2²¹ − 1)` ≈ 33.5 million items, more than an id's 24 bits can name.
const CHUNKS: usize = 21;

/// The most items an arena holds.
pub(super) const CAPACITY: u32 = (1 << FIRST_SHIFT) * ((1 << CHUNKS) - 1);

/// What an arena's item is before it is first used.
pub(super) trait Blank {
    fn blank() -> Self;
}

pub(super) struct Arena<T> {
    chunks: [AtomicPtr<T>; CHUNKS],
}

/// The chunk and offset of item `id`.
#[inline]
fn locate(id: u32) -> (usize, usize) {
    let j = id + (1 << FIRST_SHIFT);
    let chunk = 31 - j.leading_zeros() - FIRST_SHIFT;
    let offset = j - (1 << (chunk + FIRST_SHIFT));
    (chunk as usize, offset as usize)
}

#[inline]
fn chunk_len(chunk: usize) -> usize {
    1 << (chunk as u32 + FIRST_SHIFT)
}

impl<T: Blank> Arena<T> {
    pub(super) fn new() -> Self {
        Arena {
            chunks: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
        }
    }

    /// Makes sure item `id` exists (allocating its chunk if needed), so that it can then be
    /// published. Only the shard's writer (holding its lock) calls this.
    pub(super) fn reserve(&self, id: u32) {
        assert!(id < CAPACITY, "arena id {id} out of range");
        let (chunk, _) = locate(id);
        if self.chunks[chunk].load(Ordering::Relaxed).is_null() {
            let items: Box<[T]> = (0..chunk_len(chunk)).map(|_| T::blank()).collect();
            // Release: a reader that gets an id in this chunk (through an index entry published
            // after this store) sees the blank items.
            self.chunks[chunk].store(Box::into_raw(items).cast::<T>(), Ordering::Release);
        }
    }

    /// Item `id`, which must have been reserved before the id was published to the caller.
    #[inline]
    pub(super) fn get(&self, id: u32) -> &T {
        let (chunk, offset) = locate(id);
        let base = self.chunks[chunk].load(Ordering::Acquire);
        assert!(!base.is_null(), "arena id {id} read before it was reserved");
        // SAFETY: the chunk holds `chunk_len(chunk)` initialized items (`reserve`) and
        // `offset < chunk_len(chunk)` by `locate`; chunks are freed only in `drop`, which
        // `&self` rules out, so the reference cannot outlive them.
        unsafe { &*base.add(offset) }
    }

    /// Bytes the allocated chunks take.
    pub(super) fn bytes(&self) -> usize {
        (0..CHUNKS)
            .filter(|&c| !self.chunks[c].load(Ordering::Relaxed).is_null())
            .map(|c| chunk_len(c) * std::mem::size_of::<T>())
            .sum()
    }
}

impl<T> Drop for Arena<T> {
    fn drop(&mut self) {
        for (chunk, slot) in self.chunks.iter().enumerate() {
            let base = slot.load(Ordering::Acquire);
            if !base.is_null() {
                // SAFETY: `base` came from `Box::into_raw` of a boxed slice of exactly
                // `chunk_len(chunk)` items (`reserve`), and is freed once, here.
                drop(unsafe {
                    Box::from_raw(ptr::slice_from_raw_parts_mut(base, chunk_len(chunk)))
                });
            }
        }
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn ids_map_to_consecutive_places_in_growing_chunks() {
        assert_eq!(locate(0), (0, 0));
        assert_eq!(locate(15), (0, 15));
        assert_eq!(locate(16), (1, 0));
        assert_eq!(locate(47), (1, 31));
        assert_eq!(locate(48), (2, 0));
        assert_eq!(
            locate(CAPACITY - 1),
            (CHUNKS - 1, chunk_len(CHUNKS - 1) - 1)
        );
        for (flat_id, id) in (0..5_000).enumerate() {
            let (c, o) = locate(id);
            let flat: usize = (0..c).map(chunk_len).sum::<usize>() + o;
            assert_eq!(flat, flat_id);
        }
    }

    struct Counted(u32);
    impl Blank for Counted {
        fn blank() -> Self {
            Counted(7)
        }
    }

    #[test]
    fn reserved_items_are_blank_and_stay_put() {
        let arena: Arena<Counted> = Arena::new();
        arena.reserve(0);
        let first = arena.get(3) as *const Counted;
        arena.reserve(100);
        assert_eq!(arena.get(100).0, 7);
        assert_eq!(arena.get(3) as *const Counted, first);
        // Chunks 0 and 2 (ids 48–111); chunk 1 was never needed.
        assert_eq!(arena.bytes(), (16 + 64) * 4);
    }
}
