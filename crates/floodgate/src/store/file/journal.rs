//! The journal: the records of the keys written since the last snapshot, appended in groups.
//!
//! A *group commit* takes every shard's changed keys with their states at that instant
//! (`memory/changes.rs`), appends their records to `journal` after its last whole group, and
//! fsyncs: a decision never waits for the disk, and a key written a thousand times between two
//! commits is written once. A group that fails to write or fsync is kept and written again,
//! at the same offset, by the next commit; until one succeeds [`JournalStats::last_error`]
//! says why. When the journal grows past its limit, and at a graceful stop, the store writes a
//! snapshot of generation `g + 1` (`snapshot.rs`) and starts an empty journal of that
//! generation: a journal older than the snapshot beside it is ignored when opening, so a crash
//! between the two steps replays nothing twice.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::record::{self, FileKind, HEADER_LEN};
use super::{snapshot, Memory};
use crate::Nanos;

/// The journal's file name in the store's directory.
pub(super) const JOURNAL: &str = "journal";

/// What the journal has done, for metrics and health.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Bytes of the journal known whole on disk (header included).
    pub bytes: u64,
    /// Records in those bytes: keys written since the last snapshot, a key once per commit.
    pub records: u64,
    /// Records taken from the memory store and not yet durable (waiting for the next commit,
    /// or for a failed one to be retried).
    pub pending_records: u64,
    /// Successful fsyncs of the journal (group commits that wrote something).
    pub syncs: u64,
    /// The store clock's instant of the last successful commit or snapshot: everything decided
    /// before it survives a crash. `None` before the first one.
    pub last_durable: Option<Nanos>,
    /// Snapshots written (at open, when the journal passed its limit, at a graceful stop).
    pub snapshots: u64,
    /// Keys in the last snapshot written.
    pub snapshot_keys: u64,
    /// Commits or snapshots that failed.
    pub failures: u64,
    /// Why the last commit or snapshot failed, naming the file; `None` once one succeeds.
    pub last_error: Option<String>,
}

/// The journal's writer: its file, the group not yet durable and the counters.
pub(super) struct Journal {
    dir: PathBuf,
    file: File,
    generation: u64,
    /// Where the next group goes: the end of the last group fsynced.
    durable_len: u64,
    /// Encoded records not yet durable.
    pending: Vec<u8>,
    /// A compaction wrote its snapshot but could not empty the journal: the next commit must.
    needs_reset: bool,
    pub(super) stats: JournalStats,
}

impl Journal {
    /// Writes the snapshot of generation `generation` of what `memory` holds, then starts that
    /// generation's empty journal in `dir`.
    pub(super) fn start(
        dir: &Path,
        generation: u64,
        memory: &Memory,
        now: Nanos,
    ) -> Result<Journal, (PathBuf, io::Error)> {
        let keys = snapshot::write(dir, generation, memory)?;
        let path = dir.join(JOURNAL);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| (path.clone(), e))?;
        let mut journal = Journal {
            dir: dir.to_path_buf(),
            file,
            generation,
            durable_len: 0,
            pending: Vec::new(),
            needs_reset: false,
            stats: JournalStats::default(),
        };
        journal.reset().map_err(|e| (path.clone(), e))?;
        snapshot::sync_dir(dir).map_err(|e| (dir.to_path_buf(), e))?;
        journal.stats.snapshots = 1;
        journal.stats.snapshot_keys = keys;
        journal.stats.last_durable = Some(now);
        Ok(journal)
    }

    /// Empties the journal to its header, of the current generation.
    fn reset(&mut self) -> io::Result<()> {
        self.file.set_len(0)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.file
            .write_all(&record::header(FileKind::Journal, self.generation, 0))?;
        self.file.sync_all()?;
        self.durable_len = HEADER_LEN as u64;
        self.stats.bytes = self.durable_len;
        self.stats.records = 0;
        Ok(())
    }

    /// Takes every changed key of `memory` into the pending group.
    fn collect(&mut self, memory: &Memory) {
        for shard in 0..memory.shard_count() {
            let pending = &mut self.pending;
            let n = memory.drain_changes(shard, |key, state| {
                record::push(pending, key.as_str(), state);
            });
            self.stats.pending_records += n as u64;
        }
    }

    /// One group commit at `now`: collects, appends and fsyncs. Nothing to write is a success
    /// that touches no file.
    pub(super) fn commit(&mut self, memory: &Memory, now: Nanos) -> Result<(), String> {
        self.collect(memory);
        if self.pending.is_empty() {
            self.succeeded(now);
            return Ok(());
        }
        match self.append() {
            Ok(()) => {
                self.durable_len += self.pending.len() as u64;
                self.pending.clear();
                self.stats.bytes = self.durable_len;
                self.stats.records += std::mem::take(&mut self.stats.pending_records);
                self.stats.syncs += 1;
                self.succeeded(now);
                Ok(())
            }
            Err(e) => Err(self.failed(&self.dir.join(JOURNAL), &e)),
        }
    }

    fn append(&mut self) -> io::Result<()> {
        if self.needs_reset {
            self.reset()?;
            self.needs_reset = false;
        }
        self.file.seek(SeekFrom::Start(self.durable_len))?;
        self.file.write_all(&self.pending)?;
        self.file.sync_data()
    }

    /// Writes a snapshot of generation `g + 1` and starts its empty journal; what was pending
    /// is older than the snapshot and dropped with the old journal.
    pub(super) fn compact(&mut self, memory: &Memory, now: Nanos) -> Result<(), String> {
        let keys = match snapshot::write(&self.dir, self.generation + 1, memory) {
            Ok(keys) => keys,
            Err((path, e)) => return Err(self.failed(&path, &e)),
        };
        self.generation += 1;
        self.pending.clear();
        self.stats.pending_records = 0;
        self.stats.snapshots += 1;
        self.stats.snapshot_keys = keys;
        if let Err(e) = self.reset() {
            self.needs_reset = true;
            // The new snapshot holds everything; the old journal, older than it, is ignored at
            // open. Appending resumes once a reset succeeds.
            return Err(self.failed(&self.dir.join(JOURNAL), &e));
        }
        self.succeeded(now);
        Ok(())
    }

    /// Swaps the journal's file handle for `file` (tests: a read-only handle makes every write
    /// fail), returning the one it had.
    #[cfg(test)]
    pub(super) fn swap_file(&mut self, file: File) -> File {
        std::mem::replace(&mut self.file, file)
    }

    /// Whether the journal has grown past `limit` bytes.
    pub(super) fn is_over(&self, limit: u64) -> bool {
        self.durable_len > limit
    }

    fn succeeded(&mut self, now: Nanos) {
        self.stats.last_durable = Some(now);
        self.stats.last_error = None;
    }

    fn failed(&mut self, path: &Path, e: &io::Error) -> String {
        let message = format!("file store {}: {e}", path.display());
        tracing::warn!(target: "floodgate::store::file", "{message}");
        self.stats.failures += 1;
        self.stats.last_error = Some(message.clone());
        message
    }
}
