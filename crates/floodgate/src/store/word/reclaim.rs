//! When a table that lock-free readers may still be reading can be freed: grace periods.
//!
//! The word store's readers look keys up without a lock, so a table that a writer replaced (by
//! a bigger one, or by one without its deleted keys) must stay allocated until every reader that
//! may have loaded its address has finished. The protocol is epoch-based:
//!
//! - a reader *pins* before it loads a table's address: it stores the global epoch (never 0) in
//!   its own record, a cache line no other thread writes, then a light barrier; when done, it
//!   stores 0 there. A check thus writes no line another thread writes or reads in its course.
//! - a writer that has replaced a table notes the epoch and advances it ([`Domain::retire`]);
//!   after a heavy barrier, the table may be freed once every record holds 0 or a later epoch
//!   ([`Domain::oldest_pin`]). A reader that pinned with a later epoch read the epoch after
//!   the replacement (acquire against the advance's release) and so loads the new table.
//!
//! The barriers make the pin and the writer's check a Dekker pair: either the writer sees the
//! pin, or the reader's later load sees the new table. On Linux the light barrier is a compiler
//! fence and the heavy barrier is `membarrier(2)`'s private expedited command, which runs a full
//! fence on every CPU running a thread of this process: readers pay no fence, writers pay a
//! system call on the rare path that retires a table. Where that command is unavailable (other
//! systems, old kernels, seccomp), both barriers are full fences.

use std::sync::{Arc, Mutex, PoisonError};

use crate::sync::{fence, AtomicU64, Ordering};

/// One thread's pin: 0 when the thread is not reading, else the epoch it read when it pinned.
/// Aligned to a cache line so that pinning writes no line another thread writes.
#[repr(align(64))]
#[derive(Debug)]
pub(super) struct Record {
    pinned: AtomicU64,
}

impl Record {
    fn new() -> Record {
        Record {
            pinned: AtomicU64::new(0),
        }
    }
}

/// An epoch and the records of the threads that read under it.
#[derive(Debug)]
pub(super) struct Domain {
    epoch: AtomicU64,
    /// Every record handed out; a record whose thread has exited is reused (`Arc` count 1).
    records: Mutex<Vec<Arc<Record>>>,
    asymmetric: bool,
}

impl Domain {
    /// A domain whose barriers are full fences when `asymmetric` is false, and a compiler fence
    /// against `membarrier` when it is true (only once registration has succeeded).
    pub(super) fn new(asymmetric: bool) -> Domain {
        Domain {
            epoch: AtomicU64::new(1),
            records: Mutex::new(Vec::new()),
            asymmetric,
        }
    }

    /// A record for a new reader thread, reusing one whose thread has exited.
    pub(super) fn register(&self) -> Arc<Record> {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(free) = records.iter().find(|r| Arc::strong_count(r) == 1) {
            // Acquire against the exited thread's release of its `Arc` (which follows its last
            // unpin): the new owner's pins come after that unpin in the record's order.
            fence(Ordering::Acquire);
            return free.clone();
        }
        let record = Arc::new(Record::new());
        records.push(record.clone());
        record
    }

    /// Marks `record`'s thread as reading: tables it loads from now on stay allocated until
    /// [`Domain::leave`].
    #[inline]
    pub(super) fn enter(&self, record: &Record) {
        let epoch = self.epoch.load(Ordering::Acquire);
        record.pinned.store(epoch, Ordering::Relaxed);
        self.light_barrier();
    }

    /// Ends `record`'s read: every access made under the pin happens before a writer that sees
    /// this store frees anything.
    #[inline]
    pub(super) fn leave(&self, record: &Record) {
        record.pinned.store(0, Ordering::Release);
    }

    /// Called by a writer after it replaced a table: the epoch to pass to
    /// [`Domain::oldest_pin`]: the old one may be freed once that is later.
    pub(super) fn retire(&self) -> u64 {
        self.epoch.fetch_add(1, Ordering::AcqRel)
    }

    /// The epoch of the oldest reader still pinned (`u64::MAX` if none), after a heavy barrier:
    /// a table retired at an earlier epoch can no longer be in use. `None` if the barrier could
    /// not be run, when nothing may be freed.
    pub(super) fn oldest_pin(&self) -> Option<u64> {
        if !self.heavy_barrier() {
            return None;
        }
        let records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        Some(
            records
                .iter()
                .map(|r| r.pinned.load(Ordering::Acquire))
                .filter(|&pinned| pinned != 0)
                .min()
                .unwrap_or(u64::MAX),
        )
    }

    #[inline]
    fn light_barrier(&self) {
        if self.asymmetric {
            std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
    }

    /// False when the barrier could not be run: nothing may be freed then.
    fn heavy_barrier(&self) -> bool {
        if self.asymmetric {
            membarrier::run()
        } else {
            fence(Ordering::SeqCst);
            true
        }
    }
}

pub(super) use reader::{domain, pin};

/// The process's domain and each thread's record in it.
mod reader {
    use std::cell::Cell;
    use std::sync::{Arc, OnceLock};

    use super::{membarrier, Domain, Record};

    pub(in crate::store::word) fn domain() -> &'static Domain {
        static DOMAIN: OnceLock<Domain> = OnceLock::new();
        DOMAIN.get_or_init(|| Domain::new(membarrier::register()))
    }

    struct Reader {
        record: Arc<Record>,
        /// Pins held by this thread (a store's algorithm may call another word store).
        depth: Cell<u32>,
    }

    thread_local! {
        static READER: Reader = Reader {
            record: domain().register(),
            depth: Cell::new(0),
        };
    }

    impl Drop for Reader {
        fn drop(&mut self) {
            // The thread is gone: its record must not hold anything back when reused.
            domain().leave(&self.record);
        }
    }

    /// This thread's pin; tables loaded while it lives are not freed. Not `Send`: it unpins the
    /// thread that pinned.
    pub(in crate::store::word) struct Pin {
        reader: *const Reader,
    }

    /// Pins this thread, or `None` while its thread-locals are being destroyed (the caller then
    /// takes its shard's lock, under which no table is freed).
    #[inline]
    pub(in crate::store::word) fn pin() -> Option<Pin> {
        READER
            .try_with(|reader| {
                let depth = reader.depth.get();
                if depth == 0 {
                    domain().enter(&reader.record);
                }
                reader.depth.set(depth + 1);
                Pin {
                    reader: reader as *const Reader,
                }
            })
            .ok()
    }

    impl Drop for Pin {
        #[inline]
        fn drop(&mut self) {
            // SAFETY: a `Pin` is neither `Send` nor `Sync` (raw pointer field), so it is dropped
            // on the thread that made it, and it never outlives the store call that made it
            // (`pin` is private to the word store, whose calls drop their pins before
            // returning). A thread's `READER` is destroyed only between such calls: thread-local
            // destructors run one at a time, even when one of them calls the store.
            let reader = unsafe { &*self.reader };
            let depth = reader.depth.get() - 1;
            reader.depth.set(depth);
            if depth == 0 {
                domain().leave(&reader.record);
            }
        }
    }
}

/// `membarrier(2)`: a full memory barrier on every CPU that runs a thread of this process.
mod membarrier {
    #[cfg(all(target_os = "linux", not(all(test, floodgate_loom))))]
    mod imp {
        const PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
        const REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

        fn call(cmd: libc::c_int) -> bool {
            // SAFETY: membarrier takes (cmd, flags, cpu_id) by value and touches no memory of
            // ours; an unknown command fails with EINVAL.
            unsafe {
                libc::syscall(
                    libc::SYS_membarrier,
                    cmd,
                    0 as libc::c_uint,
                    0 as libc::c_int,
                ) == 0
            }
        }

        /// Registers the process for the expedited command; false where the kernel lacks it.
        pub(in crate::store::word) fn register() -> bool {
            call(REGISTER_PRIVATE_EXPEDITED)
        }

        /// Runs the barrier; false if the kernel refused (it cannot once registered, but a
        /// refusal must not let a table be freed under a reader, so the caller keeps it).
        pub(in crate::store::word) fn run() -> bool {
            call(PRIVATE_EXPEDITED)
        }
    }

    #[cfg(not(all(target_os = "linux", not(all(test, floodgate_loom)))))]
    mod imp {
        pub(in crate::store::word) fn register() -> bool {
            false
        }

        pub(in crate::store::word) fn run() -> bool {
            false
        }
    }

    pub(super) use imp::{register, run};
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_retired_epoch_waits_for_readers_pinned_before_it() {
        let domain = Domain::new(membarrier::register());
        let (a, b) = (domain.register(), domain.register());
        domain.enter(&a);
        let retired = domain.retire();
        assert!(
            domain.oldest_pin().unwrap() <= retired,
            "a is pinned at the retired epoch"
        );
        // b pins after the retirement: it cannot have seen the old table.
        domain.enter(&b);
        domain.leave(&a);
        assert!(domain.oldest_pin().unwrap() > retired);
        domain.leave(&b);
    }

    #[test]
    fn records_of_exited_threads_are_reused() {
        let domain = Domain::new(false);
        let first = domain.register();
        let ptr = Arc::as_ptr(&first);
        drop(first);
        assert_eq!(Arc::as_ptr(&domain.register()), ptr);
    }

    #[test]
    fn pins_nest_and_unpin_at_the_outermost() {
        let outer = pin().unwrap();
        let inner = pin().unwrap();
        let retired = reader::domain().retire();
        drop(inner);
        assert!(reader::domain().oldest_pin().unwrap() <= retired);
        drop(outer);
        // Other tests' threads may be pinned; wait for them to move on.
        while reader::domain().oldest_pin().unwrap() <= retired {
            std::thread::yield_now();
        }
    }
}

/// The protocol under loom, with full fences for both barriers (loom does not model
/// `membarrier`; the fences give the same pairing).
#[cfg(all(test, floodgate_loom))]
mod loom_tests {
    use super::*;
    use crate::sync::AtomicPtr;
    use loom::sync::atomic::AtomicBool;

    /// A reader pins and reads through the current pointer while a writer replaces it and
    /// frees the old target as soon as the domain says so: the reader never reads a freed one.
    #[test]
    fn a_pinned_reader_never_sees_a_freed_table() {
        loom::model(|| {
            let domain = Arc::new(Domain::new(false));
            // Two "tables": a flag each that says whether it was freed.
            let tables: Arc<[AtomicBool; 2]> =
                Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
            let current = Arc::new(AtomicPtr::new(
                &tables[0] as *const AtomicBool as *mut AtomicBool,
            ));
            let reader = {
                let (domain, current, tables) = (domain.clone(), current.clone(), tables.clone());
                let record = domain.register();
                loom::thread::spawn(move || {
                    domain.enter(&record);
                    let table = current.load(Ordering::Acquire);
                    // SAFETY: points into `tables`, alive for the whole model.
                    let freed = unsafe { &*table }.load(Ordering::Relaxed);
                    assert!(!freed, "read a table after it was freed");
                    domain.leave(&record);
                    drop(tables);
                })
            };
            current.store(
                &tables[1] as *const AtomicBool as *mut AtomicBool,
                Ordering::Release,
            );
            let retired = domain.retire();
            if domain.oldest_pin().is_some_and(|oldest| oldest > retired) {
                tables[0].store(true, Ordering::Relaxed);
            }
            reader.join().unwrap();
        });
    }
}
