//! The file store's settings and its opening: validate, take the directory's lock, read back
//! what it holds, load it into a new memory store, write a fresh snapshot, start the syncer.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::error::FileStoreError;
use super::journal::Journal;
use super::syncer::Syncer;
use super::{recovery, Core, FileStore, Inner};
use crate::store::{LocalStore, MemoryStore, Overflow};
use crate::{Clock, CoarseClock, ConfigError};

/// Default time between two group commits: what `kill -9` can lose.
pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_secs(1);
/// Default size of the journal past which a snapshot replaces it: 64 MiB.
pub const DEFAULT_JOURNAL_LIMIT: u64 = 64 << 20;
const MAX_SYNC_INTERVAL: Duration = Duration::from_secs(86_400);
/// The lock file's name in the store's directory.
const LOCK: &str = "lock";

/// Builds a [`FileStore`]: its directory, how often it fsyncs, and the memory store's bound.
#[derive(Clone)]
pub struct FileStoreBuilder {
    dir: PathBuf,
    sync_interval: Duration,
    journal_limit: u64,
    max_keys: usize,
    shards: Option<usize>,
    overflow: Overflow,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for FileStoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStoreBuilder")
            .field("dir", &self.dir)
            .field("sync_interval", &self.sync_interval)
            .field("journal_limit", &self.journal_limit)
            .field("max_keys", &self.max_keys)
            .field("overflow", &self.overflow)
            .finish_non_exhaustive()
    }
}

impl FileStoreBuilder {
    pub(super) fn new(dir: PathBuf) -> FileStoreBuilder {
        FileStoreBuilder {
            dir,
            sync_interval: DEFAULT_SYNC_INTERVAL,
            journal_limit: DEFAULT_JOURNAL_LIMIT,
            max_keys: 1_000_000,
            shards: None,
            overflow: Overflow::default(),
            clock: Arc::new(CoarseClock::shared()),
        }
    }

    /// Time between two group commits (default 1 s), from 1 ms to 1 day: a `kill -9` or a
    /// power loss loses at most the decisions of the last interval.
    pub fn sync_interval(mut self, interval: Duration) -> Self {
        self.sync_interval = interval;
        self
    }

    /// Bytes of journal past which a commit is followed by a snapshot that replaces it
    /// (default 64 MiB, at least 1). Opening replays the whole journal, so this bounds the
    /// time an open takes besides the snapshot's keys.
    pub fn journal_limit(mut self, bytes: u64) -> Self {
        self.journal_limit = bytes;
        self
    }

    /// The most keys the store holds (default 1,000,000), as the memory store's
    /// [`crate::store::MemoryStoreBuilder::max_keys`]; keys read back beyond it are dropped,
    /// with a warning.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// The memory store's shard count (see [`crate::store::MemoryStoreBuilder::shards`]).
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = Some(shards);
        self
    }

    /// What to do when a shard is full of live keys (default [`Overflow::EvictLive`]); a key
    /// evicted live is journaled as gone.
    pub fn overflow(mut self, overflow: Overflow) -> Self {
        self.overflow = overflow;
        self
    }

    /// The clock decisions read "now" from (default [`CoarseClock::shared`]). The states keep
    /// its instants, so after a restart it must count from the same epoch: the Unix epoch, as
    /// [`crate::SystemClock`] and [`CoarseClock`] do.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Checks the settings without opening anything (what `check-config` asks, while a
    /// running process may hold the directory).
    pub fn check(&self) -> Result<(), ConfigError> {
        self.validate()
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.dir.as_os_str().is_empty() {
            return Err(ConfigError::invalid(
                "path",
                "\"\"",
                "must name a directory",
            ));
        }
        if !(Duration::from_millis(1)..=MAX_SYNC_INTERVAL).contains(&self.sync_interval) {
            return Err(ConfigError::invalid(
                "sync_interval",
                crate::duration::format_duration(self.sync_interval),
                "must be from 1ms to 1d",
            ));
        }
        if self.journal_limit == 0 {
            return Err(ConfigError::invalid(
                "journal_limit",
                0,
                "must be at least 1 byte",
            ));
        }
        Ok(())
    }

    /// Opens the store: creates the directory if needed, takes its lock, reads back its
    /// snapshot and journal (see [`FileStore`]'s documentation for what is kept and what is
    /// refused), writes a fresh snapshot of what it read, and starts the thread that commits
    /// every `sync_interval`. Refused, naming the setting or the file: an invalid setting
    /// ([`FileStoreError::Config`]), a directory that cannot be created or written
    /// ([`FileStoreError::Io`]), one another process holds ([`FileStoreError::Locked`]), a
    /// corrupt file ([`FileStoreError::Corrupt`]).
    pub fn build(self) -> Result<FileStore, FileStoreError> {
        self.validate()?;
        let dir = self.dir.clone();
        fs::create_dir_all(&dir).map_err(FileStoreError::io(&dir))?;
        let lock = take_lock(&dir)?;
        let recovered = recovery::recover(&dir)?;
        let mut memory = MemoryStore::builder()
            .max_keys(self.max_keys)
            .overflow(self.overflow)
            .clock(self.clock.clone());
        if let Some(shards) = self.shards {
            memory = memory.shards(shards);
        }
        let memory = memory.build()?.track_changes();
        let read = recovered.states.len();
        let dropped = recovered
            .states
            .into_iter()
            .filter(|(key, state)| !memory.load(key.as_str(), state.clone()))
            .count();
        if dropped > 0 {
            tracing::warn!(target: "floodgate::store::file", "file store {}: {dropped} of {read} keys read back dropped: more than max_keys ({})", dir.display(), self.max_keys);
        }
        let now = self.clock.now();
        let journal = Journal::start(&dir, recovered.generation + 1, &memory, now)
            .map_err(|(path, source)| FileStoreError::Io { path, source })?;
        tracing::info!(target: "floodgate::store::file", "file store {}: opened with {} keys", dir.display(), memory.len());
        let core = Arc::new(Core {
            published: Mutex::new(journal.stats.clone()),
            journal: Mutex::new(journal),
            memory,
            dir: dir.clone(),
            lock: Mutex::new(Some(lock)),
            closed: Default::default(),
            journal_limit: self.journal_limit,
            sync_interval: self.sync_interval,
        });
        let syncer =
            Syncer::start(core.clone(), self.sync_interval).map_err(FileStoreError::io(&dir))?;
        Ok(FileStore {
            inner: Arc::new(Inner {
                core,
                syncer: Mutex::new(Some(syncer)),
            }),
        })
    }
}

/// Opens and locks `dir`'s lock file (`flock`, released when the file is closed, by the
/// process ending too): a second store on the directory, in this process or another, is
/// refused.
fn take_lock(dir: &Path) -> Result<File, FileStoreError> {
    let path = dir.join(LOCK);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(FileStoreError::io(&path))?;
    match fs4::FileExt::try_lock(&file) {
        Ok(()) => Ok(file),
        Err(fs4::TryLockError::WouldBlock) => Err(FileStoreError::Locked { path }),
        Err(fs4::TryLockError::Error(e)) => Err(FileStoreError::io(&path)(e)),
    }
}
