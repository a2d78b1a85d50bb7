//! Why a file store could not be opened: a setting out of its domain, a directory it cannot
//! use, another process holding it, or a file that is not what this store wrote.

use std::path::PathBuf;

use crate::ConfigError;

/// Why [`super::FileStoreBuilder::build`] refused to open the store. Every variant but
/// [`FileStoreError::Config`] names the file; [`FileStoreError::Corrupt`] names the byte offset
/// too. Nothing of a refused directory is changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileStoreError {
    /// A setting is outside its domain (`path`, `sync_interval`, `max_keys`, …).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The directory or one of its files cannot be created, read or written.
    #[error("file store {path}: {source}")]
    Io {
        /// The directory or file.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// Another process (or another store in this one) holds the directory's lock file.
    #[error("file store {path}: locked by another process using the same directory")]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// A file holds something this store never wrote whole: a bad magic or version, a record
    /// whose checksum fails before the journal's end, or one that does not decode. Refused, never
    /// used: move the file away to start from what the other files hold.
    #[error("file store {path} at byte {offset}: {reason}")]
    Corrupt {
        /// The snapshot or journal.
        path: PathBuf,
        /// Where in it the bad part starts.
        offset: u64,
        /// What is wrong there.
        reason: &'static str,
    },
}

impl FileStoreError {
    pub(super) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> FileStoreError {
        let path = path.into();
        move |source| FileStoreError::Io { path, source }
    }

    /// The configuration error, when that is what this is.
    pub fn config_error(&self) -> Option<&ConfigError> {
        match self {
            FileStoreError::Config(e) => Some(e),
            _ => None,
        }
    }
}
