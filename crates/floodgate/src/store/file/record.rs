//! The framing of the store's two files: a header, then records.
//!
//! ```text
//! header (24 bytes): magic [4] ("FGJL" journal, "FGSN" snapshot), format version u16 (1),
//!                    0u16, generation u64, records u64 (the snapshot's count; 0 in a journal)
//! record:            length u32 (of what follows the checksum), crc32 u32 (of the length's
//!                    four bytes and the payload), payload
//! payload:           key length u32, key (UTF-8), state (`codec.rs`)
//! ```
//!
//! Reading a journal stops at its end or at a *torn tail*, the part of the last write a crash
//! cut: fewer bytes than a record header, a record running past the end of the file, a last
//! record whose checksum fails, or a tail of zeros (a file extended but never written). Any
//! other failure — a checksum failing with more records after it, a length beyond
//! [`MAX_RECORD`], a payload that does not decode — is corruption, reported at its offset.

use crate::algorithm::spec::AnyState;

use super::codec;

/// Bytes of a file header.
pub(super) const HEADER_LEN: usize = 24;
/// The current format version of both files.
pub(super) const FORMAT_VERSION: u16 = 1;
/// The longest payload a record may declare, 1 GiB (a sliding log of 67 million entries, a
/// lease set of 43 million leases: far beyond any state a memory store holds for one key): a
/// longer length is taken as corruption, not as a torn tail, so that a length field damaged
/// in the middle of a journal is not mistaken for the end of it.
pub(super) const MAX_RECORD: u32 = 1 << 30;

/// Which of the store's two files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FileKind {
    Journal,
    Snapshot,
}

impl FileKind {
    fn magic(self) -> [u8; 4] {
        match self {
            FileKind::Journal => *b"FGJL",
            FileKind::Snapshot => *b"FGSN",
        }
    }
}

/// A file's header, read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Header {
    /// Which snapshot the file belongs to: a journal applies on the snapshot of its generation.
    pub(super) generation: u64,
    /// Records in a snapshot.
    pub(super) records: u64,
}

/// The header bytes of a `kind` file.
pub(super) fn header(kind: FileKind, generation: u64, records: u64) -> [u8; HEADER_LEN] {
    let mut out = [0; HEADER_LEN];
    out[..4].copy_from_slice(&kind.magic());
    out[4..6].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out[8..16].copy_from_slice(&generation.to_le_bytes());
    out[16..24].copy_from_slice(&records.to_le_bytes());
    out
}

/// Reads a `kind` file's header off `bytes`; `Err` with the reason when it is not one.
pub(super) fn read_header(kind: FileKind, bytes: &[u8]) -> Result<Header, &'static str> {
    let Some(h) = bytes.first_chunk::<HEADER_LEN>() else {
        return Err("shorter than a header");
    };
    if h[..4] != kind.magic() {
        return Err("bad magic: not a file of this store");
    }
    if u16::from_le_bytes([h[4], h[5]]) != FORMAT_VERSION {
        return Err("unknown format version");
    }
    let word = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap_or_default());
    Ok(Header {
        generation: word(8),
        records: word(16),
    })
}

/// Appends one record, `key` with `state` (`None`: the key is gone), to `out`.
pub(super) fn push(out: &mut Vec<u8>, key: &str, state: Option<&AnyState>) {
    let start = out.len();
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    codec::encode(state, out);
    let len = (out.len() - start - 8) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&out[start..start + 4]);
    crc.update(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.finalize().to_le_bytes());
}

/// What [`next`] found at an offset.
#[derive(Debug)]
pub(super) enum Next<'a> {
    /// A whole record, and the offset just past it.
    Record {
        key: &'a str,
        state: Option<AnyState>,
        end: usize,
    },
    /// The end of the records.
    End,
    /// A torn tail from here to the end, and why it is taken for one.
    Torn(&'static str),
}

/// The record of `bytes` at offset `at`, or `Err` with the reason it is corrupt there.
pub(super) fn next(bytes: &[u8], at: usize) -> Result<Next<'_>, &'static str> {
    let rest = &bytes[at..];
    if rest.is_empty() {
        return Ok(Next::End);
    }
    let Some(head) = rest.first_chunk::<8>() else {
        return Ok(Next::Torn("a record header cut short"));
    };
    if rest.iter().all(|&b| b == 0) {
        return Ok(Next::Torn("zeros to the end of the file"));
    }
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if len > MAX_RECORD {
        return Err("record length beyond the largest record");
    }
    let end = 8 + len as usize;
    let Some(payload) = rest.get(8..end) else {
        return Ok(Next::Torn("a record running past the end of the file"));
    };
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&head[..4]);
    hasher.update(payload);
    if hasher.finalize() != crc {
        let after = &rest[end..];
        return if after.iter().all(|&b| b == 0) {
            Ok(Next::Torn("the last record's checksum fails"))
        } else {
            Err("record checksum fails")
        };
    }
    let (key, state) = payload_of(payload)?;
    Ok(Next::Record {
        key,
        state,
        end: at + end,
    })
}

fn payload_of(payload: &[u8]) -> Result<(&str, Option<AnyState>), &'static str> {
    let (len, rest) = payload
        .split_first_chunk::<4>()
        .ok_or("payload cut short")?;
    let len = u32::from_le_bytes(*len) as usize;
    if len > rest.len() {
        return Err("key longer than its record");
    }
    let (key, state) = rest.split_at(len);
    let key = std::str::from_utf8(key).map_err(|_| "key is not UTF-8")?;
    Ok((key, codec::decode(state)?))
}
