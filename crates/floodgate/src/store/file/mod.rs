//! A durable embedded store: the memory store's decisions, kept in a directory so that counters
//! survive a restart (a daily limit or a monthly token budget is not handed out again on every
//! deploy). One node: the directory belongs to one process at a time.
//!
//! **How.** [`FileStore`] decides on a [`MemoryStore`] at memory speed, exactly as the memory
//! store does (every algorithm and operation, chains and their all-or-nothing undo included).
//! The memory store notes each key a decision writes; every `sync_interval` (default 1 s) a
//! background thread takes the noted keys with their states at that instant, appends one record
//! per key to the directory's `journal` and fsyncs it: a *group commit*, so a decision never
//! waits for the disk and a key decided many times in an interval is written once. When the
//! journal passes `journal_limit` bytes (default 64 MiB), at every open and at a graceful stop,
//! a `snapshot` of every live key is written to a temporary file, fsynced and renamed over the
//! old one, and the journal emptied. A `lock` file, held with `flock`, keeps a second process
//! (or a second store in this one) out of the directory.
//!
//! **The promise.**
//! - A graceful stop ([`FileStore::close`], or dropping the last clone, which is what the
//!   service does on SIGTERM) then an open loses nothing: every key's state is the one it had.
//! - A crash (`kill -9`, a panic that aborts, a power loss) loses at most the decisions of the
//!   last `sync_interval`: every key's state is the one it had at the last successful commit
//!   ([`FileStore::sync`] commits at once). A commit is durable key by key, not as a whole: a
//!   crash in the middle of writing one keeps the keys written before the cut.
//! - A journal whose end was cut by a crash mid-write (a *torn tail*) is read up to its last
//!   whole record, with a warning naming the file and offset. Anything else that is not what
//!   the store wrote — a bad magic or format version, a checksum failing before the journal's
//!   end, a record that does not decode — refuses the open with
//!   [`FileStoreError::Corrupt`] naming the file and the offset, and is never used.
//! - A directory that cannot be created or written is refused at open
//!   ([`FileStoreError::Io`], naming the path), and so is one locked by another process
//!   ([`FileStoreError::Locked`]).
//! - States hold the store clock's instants, in nanoseconds since its epoch. The default clock
//!   ([`crate::CoarseClock`]) and [`crate::SystemClock`] count from the Unix epoch, so a state
//!   means after a restart what it meant before: a window that ended while the process was down
//!   has ended, a bucket has refilled for the time it was down, and a concurrency lease (or a
//!   reservation) of the dead process keeps its place until the expiry its state holds, then
//!   frees. A wall clock stepped backwards across the restart looks, to every algorithm, like
//!   time standing still until it catches up.
//! - Parameters may change across a restart (a state remembers the parameters it was applied
//!   with, and each algorithm adapts as it does for a hot reload). An *algorithm* may not
//!   change under a namespace: a key holding another algorithm's state is refused with
//!   [`StoreError::StateConflict`], as in any store, and here it survives the restart. Give a
//!   stage whose algorithm changes a new namespace, or start from an empty directory.
//! - If writing fails (a full disk, say), decisions go on in memory, the failed group is
//!   written again at the next commit, and [`FileStore::probe`] and
//!   [`FileStore::journal_stats`] say so until a commit succeeds.
//!
//! The files' formats are in `record.rs` (framing, checksums) and `codec.rs` (each algorithm's
//! state), both versioned.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::chain::{Link, Linked};
use super::{Key, KeyedOp, LocalStore, MemoryStore, Namespaces, Store, StoreStats};
use crate::algorithm::spec::{AnyAlgorithm, AnyState};
use crate::{Clock, Decision, Op, StoreError};

mod builder;
mod capabilities;
mod codec;
mod error;
mod journal;
mod record;
mod recovery;
mod snapshot;
mod syncer;
#[cfg(test)]
mod tests;

pub use builder::{FileStoreBuilder, DEFAULT_JOURNAL_LIMIT, DEFAULT_SYNC_INTERVAL};
pub use error::FileStoreError;
pub use journal::JournalStats;

use journal::Journal;
use syncer::Syncer;

/// The memory store a file store decides on.
type Memory = MemoryStore<Key, AnyState, Arc<dyn Clock>>;

/// The durable embedded store: see the [module documentation](self) for what survives a stop
/// and a crash. Clones share one store; the last one dropped closes it gracefully.
#[derive(Clone)]
pub struct FileStore {
    inner: Arc<Inner>,
}

/// What the clones share; dropping it closes the store.
struct Inner {
    core: Arc<Core>,
    /// `None` once closed.
    syncer: Mutex<Option<Syncer>>,
}

/// What the syncer thread shares with the store.
struct Core {
    memory: Memory,
    dir: PathBuf,
    journal: Mutex<Journal>,
    /// A copy of the journal's stats after each commit, readable while a commit is under way.
    published: Mutex<JournalStats>,
    /// The directory's lock, held until the store is closed.
    lock: Mutex<Option<std::fs::File>>,
    closed: AtomicBool,
    journal_limit: u64,
    sync_interval: Duration,
}

impl Core {
    /// One group commit now, and a snapshot after it if the journal has grown past its limit.
    fn commit(&self) -> Result<(), String> {
        let mut journal = self.journal.lock().unwrap_or_else(PoisonError::into_inner);
        let now = self.memory.clock().now();
        let mut result = journal.commit(&self.memory, now);
        if result.is_ok() && journal.is_over(self.journal_limit) {
            result = journal.compact(&self.memory, now);
        }
        *self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = journal.stats.clone();
        result
    }

    /// A snapshot of everything now, replacing the journal.
    fn compact(&self) -> Result<(), String> {
        let mut journal = self.journal.lock().unwrap_or_else(PoisonError::into_inner);
        let result = journal.compact(&self.memory, self.memory.clock().now());
        *self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = journal.stats.clone();
        result
    }

    fn closed_error(&self) -> StoreError {
        StoreError::Unavailable(format!("file store {}: closed", self.dir.display()))
    }
}

impl Inner {
    /// Stops the syncer, then, if `graceful`, writes the final snapshot; releases the lock.
    /// Only the first call does anything.
    fn shut(&self, graceful: bool) {
        // Held to the end, so that a second caller finds the store closed, never half closed.
        let mut syncer = self.syncer.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(syncer) = syncer.take() {
            syncer.stop();
        }
        if self.core.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        if graceful {
            if let Err(e) = self.core.compact() {
                tracing::error!(target: "floodgate::store::file", "closing: {e}; what was decided since the last commit is lost");
            }
        }
        self.core
            .lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shut(true);
    }
}

impl FileStore {
    /// A builder for the store kept in `dir`, a directory the store owns (created if missing):
    /// the lead's URL `file:///var/lib/floodgate` is `FileStore::builder("/var/lib/floodgate")`.
    pub fn builder(dir: impl Into<PathBuf>) -> FileStoreBuilder {
        FileStoreBuilder::new(dir.into())
    }

    /// The store's directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.inner.core.dir
    }

    /// The time between two background commits.
    pub fn sync_interval(&self) -> Duration {
        self.inner.core.sync_interval
    }

    /// Commits now: every decision made before this call is on disk (fsynced) when it returns
    /// `Ok`. `Err(StoreError::Unavailable)`, naming the file, when writing fails (the group is
    /// kept and written again by the next commit) or the store is closed.
    pub fn sync(&self) -> Result<(), StoreError> {
        let core = &self.inner.core;
        if core.closed.load(Ordering::Acquire) {
            return Err(core.closed_error());
        }
        core.commit().map_err(StoreError::Unavailable)
    }

    /// Closes the store gracefully: stops the background commits, writes a snapshot of every
    /// key (so that an open loses nothing) and releases the directory. Later calls, and the drop
    /// of the last clone, do nothing more. The store still decides in memory after it, but keeps
    /// nothing more on disk, and [`FileStore::sync`] and [`FileStore::probe`] fail.
    pub fn close(&self) {
        self.inner.shut(true);
    }

    /// Closes without writing anything: what a crash leaves (tests of the crash promise).
    #[cfg(test)]
    pub(crate) fn crash(&self) {
        self.inner.shut(false);
    }

    /// The memory store's bookkeeping counters (keys held, evictions, refusals).
    pub fn stats(&self) -> StoreStats {
        self.inner.core.memory.stats()
    }

    /// The journal's counters: bytes and records since the last snapshot, fsyncs, the instant
    /// of the last durable commit, snapshots, failures and the last error.
    pub fn journal_stats(&self) -> JournalStats {
        self.inner
            .core
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The number of keys held now.
    pub fn len(&self) -> usize {
        self.inner.core.memory.len()
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the store keeps decisions durable: `Ok` while its background thread runs and its
    /// last commit succeeded; `Err(StoreError::Unavailable)` saying why not (closed, the thread
    /// gone, the last commit's error naming the file). Answers at once, without touching disk.
    pub async fn probe(&self) -> Result<(), StoreError> {
        let core = &self.inner.core;
        if core.closed.load(Ordering::Acquire) {
            return Err(core.closed_error());
        }
        let alive = self
            .inner
            .syncer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(Syncer::is_alive);
        if !alive {
            return Err(StoreError::Unavailable(format!(
                "file store {}: the journal's writer thread has stopped",
                core.dir.display()
            )));
        }
        match self.journal_stats().last_error {
            Some(e) => Err(StoreError::Unavailable(e)),
            None => Ok(()),
        }
    }

    #[cfg(test)]
    fn memory(&self) -> &Memory {
        &self.inner.core.memory
    }

    /// Runs `f` on the journal's writer (tests of failing writes).
    #[cfg(test)]
    fn with_journal<R>(&self, f: impl FnOnce(&mut Journal) -> R) -> R {
        f(&mut self.inner.core.journal.lock().unwrap())
    }
}

impl std::fmt::Debug for FileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let core = &self.inner.core;
        f.debug_struct("FileStore")
            .field("dir", &core.dir)
            .field("sync_interval", &core.sync_interval)
            .field("journal_limit", &core.journal_limit)
            .field("closed", &core.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The memory store's decisions; the journal learns the keys they wrote.
impl Store<str, AnyAlgorithm> for FileStore {
    fn apply(
        &self,
        algorithm: &AnyAlgorithm,
        key: &str,
        op: Op,
    ) -> impl std::future::Future<Output = Result<Decision, StoreError>> + Send {
        std::future::ready(self.inner.core.memory.apply_now(algorithm, key, op))
    }

    fn apply_many(
        &self,
        requests: &[KeyedOp<'_, str, AnyAlgorithm>],
    ) -> impl std::future::Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        self.inner.core.memory.apply_many(requests)
    }

    fn apply_chain(
        &self,
        links: &[Link<'_, str, AnyAlgorithm>],
    ) -> impl std::future::Future<Output = Result<Vec<Linked>, StoreError>> + Send {
        self.inner.core.memory.apply_chain(links)
    }

    fn apply_chain_refused(
        &self,
        links: &[Link<'_, str, AnyAlgorithm>],
    ) -> impl std::future::Future<Output = Result<Vec<Linked>, StoreError>> + Send {
        self.inner.core.memory.apply_chain_refused(links)
    }

    fn same_store(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn namespaces(&self) -> Option<&Namespaces> {
        Store::<str, AnyAlgorithm>::namespaces(&self.inner.core.memory)
    }
}
