//! The atomics, cells and spin-wait the shard lock and the word store's tables are built on: the
//! standard library's in a normal build, `loom`'s under `--cfg floodgate_loom`, so that the
//! model checker explores every interleaving of the same code (see the loom tests of
//! `shard_lock.rs` and `word/`).

#[cfg(not(all(test, floodgate_loom)))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, Ordering};

#[cfg(all(test, floodgate_loom))]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// One step of waiting for a lock another thread holds: a few spins, then a yield so that a
/// holder that was preempted gets its CPU back.
#[cfg(not(all(test, floodgate_loom)))]
#[inline]
pub(crate) fn wait(spins: &mut u32) {
    if *spins < 64 {
        *spins += 1;
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// Under loom every wait is a yield, which lets the model run the holder.
#[cfg(all(test, floodgate_loom))]
pub(crate) fn wait(_spins: &mut u32) {
    loom::thread::yield_now();
}

/// A cell whose contents a lock (not the type system) keeps exclusive.
#[cfg(not(all(test, floodgate_loom)))]
#[derive(Debug)]
pub(crate) struct Cell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(all(test, floodgate_loom)))]
impl<T> Cell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Cell(std::cell::UnsafeCell::new(value))
    }

    /// The contents' address; dereferencing it is up to the caller's lock.
    #[inline]
    pub(crate) fn get(&self) -> *mut T {
        self.0.get()
    }

    /// The contents' address, for reading only (the same address; under loom the access is
    /// recorded as a read, which other reads may overlap).
    #[inline]
    pub(crate) fn read(&self) -> *const T {
        self.0.get()
    }
}

/// loom's cell records every access, so that an access no lock orders is reported.
#[cfg(all(test, floodgate_loom))]
#[derive(Debug)]
pub(crate) struct Cell<T>(loom::cell::UnsafeCell<T>);

#[cfg(all(test, floodgate_loom))]
impl<T> Cell<T> {
    pub(crate) fn new(value: T) -> Self {
        Cell(loom::cell::UnsafeCell::new(value))
    }

    pub(crate) fn get(&self) -> *mut T {
        self.0.with_mut(|p| p)
    }

    pub(crate) fn read(&self) -> *const T {
        self.0.with(|p| p)
    }
}
