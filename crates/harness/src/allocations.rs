//! A global allocator that counts this thread's allocations, for the tests that prove a hot
//! path allocates nothing (or a stated number of times): install [`CountingAllocator`] as the
//! test binary's `#[global_allocator]`, then measure with [`allocations`]. Other threads'
//! allocations (a coarse clock's, a runtime's workers) are not counted, so the measure is the
//! code the test thread runs. Reallocations count as allocations; frees are not counted.
#![allow(unsafe_code)] // a global allocator is an `unsafe impl`, passing every call on

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

/// The system allocator, counting each allocation and reallocation on the calling thread.
#[derive(Debug)]
pub struct CountingAllocator;

// SAFETY: every call is passed on to the system allocator unchanged; the tally is a
// thread-local counter, which allocates nothing.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// The allocations `f` makes on this thread, with [`CountingAllocator`] installed (0 without
/// it, whatever `f` does).
pub fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}
