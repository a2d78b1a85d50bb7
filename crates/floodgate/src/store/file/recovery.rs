//! Opening: the states a directory holds, read back from its snapshot and its journal.
//!
//! The snapshot (absent in a new directory: no keys, generation 0) must be whole: a bad magic or
//! version, a record that fails its checksum or does not decode, or fewer records than its
//! header counts, refuses the open with [`FileStoreError::Corrupt`] naming the file and offset.
//! The journal's records are then replayed in order over it (a later record of a key replaces
//! an earlier one; a removal removes), if the journal is of the snapshot's generation: an older
//! journal (a crash between writing a snapshot and emptying the journal) is ignored, a newer
//! one (its snapshot missing) refused. A journal shorter than its header (a crash while it was
//! started) holds nothing. A torn tail (`record.rs`) ends the replay at the last whole record,
//! with a warning naming the file and offset; any other bad record refuses the open.

use std::collections::HashMap;
use std::io;
use std::path::Path;

use super::error::FileStoreError;
use super::journal::JOURNAL;
use super::record::{self, FileKind, Next, HEADER_LEN};
use super::snapshot::SNAPSHOT;
use crate::algorithm::spec::AnyState;

/// What a directory held.
#[derive(Debug, Default)]
pub(super) struct Recovered {
    /// The snapshot's generation (0 without one).
    pub(super) generation: u64,
    /// Every key's last state.
    pub(super) states: HashMap<String, AnyState>,
    /// Where the journal's torn tail began, if it had one.
    pub(super) torn_at: Option<u64>,
}

/// Reads `dir`'s snapshot and replays its journal.
pub(super) fn recover(dir: &Path) -> Result<Recovered, FileStoreError> {
    let mut recovered = Recovered::default();
    let path = dir.join(SNAPSHOT);
    if let Some(bytes) = read_if_any(&path)? {
        let corrupt = |offset: usize, reason| FileStoreError::Corrupt {
            path: path.clone(),
            offset: offset as u64,
            reason,
        };
        let header = record::read_header(FileKind::Snapshot, &bytes).map_err(|r| corrupt(0, r))?;
        recovered.generation = header.generation;
        let mut at = HEADER_LEN;
        let mut count = 0u64;
        loop {
            match record::next(&bytes, at).map_err(|r| corrupt(at, r))? {
                Next::Record { key, state, end } => {
                    let state = state.ok_or_else(|| corrupt(at, "a removal in a snapshot"))?;
                    recovered.states.insert(key.to_string(), state);
                    count += 1;
                    at = end;
                }
                Next::End if count == header.records => break,
                Next::End => return Err(corrupt(at, "fewer records than the header counts")),
                Next::Torn(reason) => return Err(corrupt(at, reason)),
            }
        }
    }
    replay_journal(dir, &mut recovered)?;
    Ok(recovered)
}

fn replay_journal(dir: &Path, recovered: &mut Recovered) -> Result<(), FileStoreError> {
    let path = dir.join(JOURNAL);
    let Some(bytes) = read_if_any(&path)? else {
        return Ok(());
    };
    let corrupt = |offset: usize, reason| FileStoreError::Corrupt {
        path: path.clone(),
        offset: offset as u64,
        reason,
    };
    if bytes.len() < HEADER_LEN {
        if !bytes.is_empty() {
            tracing::warn!(target: "floodgate::store::file", "file store {}: {} bytes, shorter than a header (a crash while it was started): holds nothing", path.display(), bytes.len());
        }
        return Ok(());
    }
    let header = record::read_header(FileKind::Journal, &bytes).map_err(|r| corrupt(0, r))?;
    if header.generation < recovered.generation {
        tracing::info!(target: "floodgate::store::file", "file store {}: generation {} is older than the snapshot's {} (a crash after a snapshot): ignored", path.display(), header.generation, recovered.generation);
        return Ok(());
    }
    if header.generation > recovered.generation {
        return Err(corrupt(
            8,
            "journal newer than the snapshot: the snapshot is missing or older",
        ));
    }
    let mut at = HEADER_LEN;
    loop {
        match record::next(&bytes, at).map_err(|r| corrupt(at, r))? {
            Next::Record { key, state, end } => {
                match state {
                    Some(state) => recovered.states.insert(key.to_string(), state),
                    None => recovered.states.remove(key),
                };
                at = end;
            }
            Next::End => return Ok(()),
            Next::Torn(reason) => {
                tracing::warn!(target: "floodgate::store::file", "file store {}: torn tail at byte {at} of {} ({reason}; a crash mid-write): recovered up to the last whole record", path.display(), bytes.len());
                recovered.torn_at = Some(at as u64);
                return Ok(());
            }
        }
    }
}

/// The file's bytes, or `None` if it does not exist.
fn read_if_any(path: &Path) -> Result<Option<Vec<u8>>, FileStoreError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(FileStoreError::io(path)(e)),
    }
}
