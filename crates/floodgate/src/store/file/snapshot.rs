//! Writing a snapshot: every key the memory store holds, as records after a header, written to
//! `snapshot.tmp`, fsynced, renamed over `snapshot`, and the directory fsynced, so that the
//! directory holds at every instant either the old snapshot or the new one, whole.
//!
//! Each shard's records are encoded under its lock (a copy of its states' bytes) and written
//! after it is released, so deciding threads wait at most one shard's encoding.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::record::{self, FileKind};
use super::Memory;

/// The snapshot's file name in the store's directory.
pub(super) const SNAPSHOT: &str = "snapshot";
const SNAPSHOT_TMP: &str = "snapshot.tmp";

/// Writes the snapshot of generation `generation` of everything `memory` holds now into `dir`;
/// returns the number of keys written. On `Err` the old snapshot is still in place.
pub(super) fn write(
    dir: &Path,
    generation: u64,
    memory: &Memory,
) -> Result<u64, (PathBuf, io::Error)> {
    let tmp = dir.join(SNAPSHOT_TMP);
    let written = write_tmp(&tmp, generation, memory).map_err(|e| (tmp.clone(), e))?;
    let path = dir.join(SNAPSHOT);
    fs::rename(&tmp, &path).map_err(|e| (path.clone(), e))?;
    sync_dir(dir).map_err(|e| (dir.to_path_buf(), e))?;
    Ok(written)
}

fn write_tmp(tmp: &Path, generation: u64, memory: &Memory) -> io::Result<u64> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(tmp)?;
    file.write_all(&record::header(FileKind::Snapshot, generation, 0))?;
    let mut written = 0u64;
    let mut bytes = Vec::new();
    for shard in 0..memory.shard_count() {
        bytes.clear();
        written += memory.for_each_entry(shard, |key, state| {
            record::push(&mut bytes, key.as_str(), Some(state));
        }) as u64;
        file.write_all(&bytes)?;
    }
    file.seek(SeekFrom::Start(0))?;
    file.write_all(&record::header(FileKind::Snapshot, generation, written))?;
    file.sync_all()?;
    Ok(written)
}

/// Fsyncs a directory, so that a rename or a new file in it survives a crash.
pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
