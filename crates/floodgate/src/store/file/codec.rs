//! The binary encoding of one key's state, version 1: what a journal or snapshot record holds
//! after its key.
//!
//! ```text
//! tag: u8            0 = the key is gone (no more fields), else the algorithm (below)
//! version: u8        this state's encoding version, 1 for every algorithm today
//! params: u64        the parameters' fingerprint the state was last applied with
//! body               the algorithm's fields, little-endian, as listed below
//! ```
//!
//! | tag | algorithm | body |
//! |---|---|---|
//! | 1 | token bucket | its 16-byte word (`tokens` f64 bits, last update ns) |
//! | 2 | leaky bucket | its 16-byte word |
//! | 3 | leaky queue | `next_free` ns: u64 |
//! | 4 | fixed window | its 16-byte word (window start ns, count) |
//! | 5 | sliding log | n: u64, then n × (instant ns: u64, cost: u64), oldest first |
//! | 6 | sliding window | 0 then start, previous, current, last (u64 each); or 1 then head, head start, n (u64 each) and n counts |
//! | 7 | GCRA | TAT ns: u64 |
//! | 8, 9 | smooth bursty, smooth warming up | stored f64, rate f64, next free µs i64, seen µs i64 |
//! | 10, 11 | concurrency, fleet | seen ns: u64, n: u64, then n × (lease id u128, critical u8, expiry ns u64) |
//!
//! Instants are the store clock's nanoseconds ([`crate::SystemClock`] counts from the Unix
//! epoch), so a state read back after a restart means what it meant before. Encoding is
//! exhaustive over the algorithms (a new one is a compile error here until it has an arm);
//! decoding refuses an unknown tag or version, a body cut short or too long, and fields no
//! operation produces (a ring head outside its ring, a lease twice), with a reason.

use crate::algorithm::concurrency::LeaseSet;
use crate::algorithm::fixed_window::FixedWindowState;
use crate::algorithm::gcra::GcraState;
use crate::algorithm::leaky_bucket::LeakyBucketState;
use crate::algorithm::leaky_queue::LeakyQueueState;
use crate::algorithm::sliding_log::SlidingLogState;
use crate::algorithm::sliding_window::parts::WindowParts;
use crate::algorithm::sliding_window::SlidingWindowState;
use crate::algorithm::smooth::SmoothState;
use crate::algorithm::spec::{AnyState, StateKind};
use crate::algorithm::token_bucket::TokenBucketState;
use crate::algorithm::word::WordState;
use crate::LeaseId;

/// The tag of a removed key.
const GONE: u8 = 0;
/// The encoding version every state is written with.
const VERSION: u8 = 1;

/// Appends `state` (`None`: the key is gone) to `out`.
pub(super) fn encode(state: Option<&AnyState>, out: &mut Vec<u8>) {
    let Some(state) = state else {
        out.push(GONE);
        return;
    };
    let tag = match &state.kind {
        StateKind::TokenBucket(_) => 1,
        StateKind::LeakyBucket(_) => 2,
        StateKind::LeakyQueue(_) => 3,
        StateKind::FixedWindow(_) => 4,
        StateKind::SlidingLog(_) => 5,
        StateKind::SlidingWindow(_) => 6,
        StateKind::Gcra(_) => 7,
        StateKind::SmoothBursty(_) => 8,
        StateKind::SmoothWarmingUp(_) => 9,
        StateKind::Concurrency(_) => 10,
        StateKind::Fleet(_) => 11,
    };
    out.extend_from_slice(&[tag, VERSION]);
    out.extend_from_slice(&state.params.to_le_bytes());
    let u64s = |out: &mut Vec<u8>, xs: &[u64]| {
        for x in xs {
            out.extend_from_slice(&x.to_le_bytes());
        }
    };
    match &state.kind {
        StateKind::TokenBucket(s) => out.extend_from_slice(&s.to_word().to_le_bytes()),
        StateKind::LeakyBucket(s) => out.extend_from_slice(&s.to_word().to_le_bytes()),
        StateKind::LeakyQueue(s) => u64s(out, &[s.next_free().0]),
        StateKind::FixedWindow(s) => out.extend_from_slice(&s.to_word().to_le_bytes()),
        StateKind::SlidingLog(s) => {
            let entries = s.to_parts();
            u64s(out, &[entries.len() as u64]);
            for (at, cost) in entries {
                u64s(out, &[at, cost]);
            }
        }
        StateKind::SlidingWindow(s) => match s.to_parts() {
            WindowParts::Weighted(fields) => {
                out.push(0);
                u64s(out, &fields);
            }
            WindowParts::Buckets {
                head,
                head_start,
                counts,
            } => {
                out.push(1);
                u64s(out, &[head, head_start, counts.len() as u64]);
                u64s(out, &counts);
            }
        },
        StateKind::Gcra(s) => u64s(out, &[s.tat().0]),
        StateKind::SmoothBursty(s) | StateKind::SmoothWarmingUp(s) => {
            let (stored, rate, next_free, seen) = s.to_parts();
            u64s(out, &[stored.to_bits(), rate.to_bits()]);
            out.extend_from_slice(&next_free.to_le_bytes());
            out.extend_from_slice(&seen.to_le_bytes());
        }
        StateKind::Concurrency(s) | StateKind::Fleet(s) => {
            let (seen, leases) = s.to_parts();
            u64s(out, &[seen, leases.len() as u64]);
            for (id, critical, expires_at) in leases {
                out.extend_from_slice(&id.0.to_le_bytes());
                out.push(u8::from(critical));
                u64s(out, &[expires_at]);
            }
        }
    }
}

/// Reads back what [`encode`] wrote, the whole of `bytes`: `Ok(None)` for a removed key, `Err`
/// with the reason it does not decode.
pub(super) fn decode(bytes: &[u8]) -> Result<Option<AnyState>, &'static str> {
    let mut r = Reader { bytes };
    let tag = r.u8()?;
    if tag == GONE {
        return r.end().map(|()| None);
    }
    if r.u8()? != VERSION {
        return Err("unknown state encoding version");
    }
    let params = r.u64()?;
    let kind = match tag {
        1 => StateKind::TokenBucket(TokenBucketState::from_word(r.u128()?)),
        2 => StateKind::LeakyBucket(LeakyBucketState::from_word(r.u128()?)),
        3 => StateKind::LeakyQueue(LeakyQueueState::from_word(r.u64()?)),
        4 => StateKind::FixedWindow(FixedWindowState::from_word(r.u128()?)),
        5 => StateKind::SlidingLog(sliding_log(&mut r)?),
        6 => StateKind::SlidingWindow(sliding_window(&mut r)?),
        7 => StateKind::Gcra(GcraState::from_word(r.u64()?)),
        8 => StateKind::SmoothBursty(smooth(&mut r)?),
        9 => StateKind::SmoothWarmingUp(smooth(&mut r)?),
        10 => StateKind::Concurrency(leases(&mut r)?),
        11 => StateKind::Fleet(leases(&mut r)?),
        _ => return Err("unknown algorithm tag"),
    };
    r.end()?;
    Ok(Some(AnyState { params, kind }))
}

fn sliding_log(r: &mut Reader<'_>) -> Result<SlidingLogState, &'static str> {
    let n = r.count(16)?;
    let entries = (0..n)
        .map(|_| Ok((r.u64()?, r.u64()?)))
        .collect::<Result<Vec<_>, &'static str>>()?;
    SlidingLogState::from_parts(&entries).ok_or("sliding log entries out of order")
}

fn sliding_window(r: &mut Reader<'_>) -> Result<SlidingWindowState, &'static str> {
    let parts = match r.u8()? {
        0 => WindowParts::Weighted([r.u64()?, r.u64()?, r.u64()?, r.u64()?]),
        1 => {
            let (head, head_start) = (r.u64()?, r.u64()?);
            let n = r.count(8)?;
            let counts = (0..n).map(|_| r.u64()).collect::<Result<Vec<_>, _>>()?;
            WindowParts::Buckets {
                head,
                head_start,
                counts,
            }
        }
        _ => return Err("unknown sliding window form"),
    };
    SlidingWindowState::from_parts(parts).ok_or("sliding window ring inconsistent")
}

fn smooth(r: &mut Reader<'_>) -> Result<SmoothState, &'static str> {
    let (stored, rate) = (f64::from_bits(r.u64()?), f64::from_bits(r.u64()?));
    let (next_free, seen) = (r.u64()? as i64, r.u64()? as i64);
    SmoothState::from_parts(stored, rate, next_free, seen).ok_or("smooth state not finite")
}

fn leases(r: &mut Reader<'_>) -> Result<LeaseSet, &'static str> {
    let seen = r.u64()?;
    let n = r.count(25)?;
    let leases = (0..n)
        .map(|_| {
            let id = LeaseId(r.u128()?);
            let critical = match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err("lease class is neither 0 nor 1"),
            };
            Ok((id, critical, r.u64()?))
        })
        .collect::<Result<Vec<_>, &'static str>>()?;
    LeaseSet::from_parts(seen, &leases).ok_or("a lease id appears twice")
}

/// Little-endian fields read off the front of a byte slice.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], &'static str> {
        let (head, rest) = self
            .bytes
            .split_first_chunk::<N>()
            .ok_or("state cut short")?;
        self.bytes = rest;
        Ok(*head)
    }

    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take::<1>()?[0])
    }

    fn u64(&mut self) -> Result<u64, &'static str> {
        self.take().map(u64::from_le_bytes)
    }

    fn u128(&mut self) -> Result<u128, &'static str> {
        self.take().map(u128::from_le_bytes)
    }

    /// A count of items of `size` bytes each, refused when the bytes left cannot hold them
    /// (so a corrupt count never allocates).
    fn count(&mut self, size: usize) -> Result<usize, &'static str> {
        let n = self.u64()?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n.checked_mul(size).is_some_and(|b| b <= self.bytes.len()))
            .ok_or("state count larger than its record")
    }

    fn end(&self) -> Result<(), &'static str> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err("state has bytes after its last field")
        }
    }
}
