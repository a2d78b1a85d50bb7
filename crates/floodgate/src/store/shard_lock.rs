//! The lock that guards one shard of the memory store.
//!
//! A shard lock is held for one transition — a hash probe and a few arithmetic operations, tens
//! of nanoseconds — and there are many more shards than threads, so waiting is rare and short.
//! For that pattern a test-and-set lock beats a general-purpose mutex on the path that matters:
//! taking it is one compare-and-swap, and releasing it is a plain release store (no second
//! read-modify-write, as `parking_lot`'s unlock needs). A waiter spins briefly and then yields
//! its time slice, so a holder that was preempted gets the CPU back instead of being starved by
//! spinning waiters.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use crate::sync::{wait, AtomicBool, Cell, Ordering};

/// A test-and-set lock around a `T`.
pub(crate) struct ShardLock<T> {
    locked: AtomicBool,
    value: Cell<T>,
}

// SAFETY: the lock hands out access to `value` to one thread at a time (see `lock`), so sharing
// a `ShardLock<T>` between threads only ever moves `T` between them: `T: Send` is enough.
unsafe impl<T: Send> Sync for ShardLock<T> {}

impl<T> ShardLock<T> {
    pub(crate) fn new(value: T) -> Self {
        ShardLock {
            locked: AtomicBool::new(false),
            value: Cell::new(value),
        }
    }

    /// Takes the lock, waiting for it if another thread holds it.
    #[inline]
    pub(crate) fn lock(&self) -> ShardGuard<'_, T> {
        if self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
        ShardGuard {
            lock: self,
            _access: PhantomData,
        }
    }

    #[cold]
    fn lock_contended(&self) {
        let mut spins = 0u32;
        loop {
            // Wait with plain loads, which keep the line shared, before trying to write it.
            while self.locked.load(Ordering::Relaxed) {
                wait(&mut spins);
            }
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }
}

/// Access to a locked shard; dropping it releases the lock (also during unwinding).
///
/// `Send` and `Sync` are those of `&mut T` (through the marker), on top of `&ShardLock<T>`'s:
/// - `Send` when `T: Send`: the guard may be dropped on another thread, since releasing this
///   lock is a plain store that any thread may make (unlike an OS mutex, it has no owner);
/// - `Sync` only when `T: Sync` too: a shared guard hands out `&T` to every thread holding it,
///   exactly as `&mut T` shared would. Without the marker the guard would be `Sync` for any
///   `T: Send`, which would let two threads read a `Cell` at once.
pub(crate) struct ShardGuard<'a, T> {
    lock: &'a ShardLock<T>,
    _access: PhantomData<&'a mut T>,
}

impl<T> Deref for ShardGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while this thread holds the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for ShardGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard exists only while this thread holds the lock, and `&mut self`
        // makes this the only reference obtained through it.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for ShardGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn excludes_other_threads() {
        let lock = Arc::new(ShardLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..100_000 {
                        // A non-atomic read-modify-write: lost updates would show a race.
                        let mut g = lock.lock();
                        let v = *g;
                        *g = v + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock(), 400_000);
    }

    #[test]
    fn is_released_when_the_holder_panics() {
        let lock = Arc::new(ShardLock::new(1u8));
        let l2 = lock.clone();
        let result = std::thread::spawn(move || {
            let _g = l2.lock();
            panic!("holder panics");
        })
        .join();
        assert!(result.is_err());
        assert_eq!(*lock.lock(), 1);
    }
}

/// The lock under the loom model checker, which runs every interleaving (under the C++11
/// memory model) and fails on an access to the guarded value that the lock does not order:
///
///     RUSTFLAGS="--cfg floodgate_loom" cargo test -p floodgate-core --lib --release loom
#[cfg(all(test, floodgate_loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// Two threads each add one to a plain (non-atomic) value under the lock: neither update
    /// is lost, and loom's cell finds no unordered access.
    #[test]
    fn updates_under_the_lock_are_never_lost() {
        loom::model(|| {
            let lock = Arc::new(ShardLock::new(0u32));
            let other = {
                let lock = lock.clone();
                loom::thread::spawn(move || {
                    let mut value = lock.lock();
                    *value += 1;
                })
            };
            {
                let mut value = lock.lock();
                *value += 1;
            }
            other.join().unwrap();
            assert_eq!(*lock.lock(), 2);
        });
    }

    /// What one holder wrote, the next holder reads, even when the value is written in two
    /// steps: the release on unlock orders both before the next acquire.
    #[test]
    fn the_next_holder_sees_every_write_of_the_last() {
        loom::model(|| {
            let lock = Arc::new(ShardLock::new((0u32, 0u32)));
            let writer = {
                let lock = lock.clone();
                loom::thread::spawn(move || {
                    let mut pair = lock.lock();
                    pair.0 = 1;
                    pair.1 = 1;
                })
            };
            let seen = *lock.lock();
            assert!(seen == (0, 0) || seen == (1, 1), "{seen:?}");
            writer.join().unwrap();
        });
    }
}
