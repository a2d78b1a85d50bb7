//! A sliding window's state as plain numbers, whole, for a store that keeps states on disk
//! (`store::file`): taking the parts and building from them gives back the same state.

use super::{Pair, Repr, Ring, SlidingWindowState};

/// A [`SlidingWindowState`] taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WindowParts {
    /// The two-window estimate: `[start, previous, current, last]`.
    Weighted([u64; 4]),
    /// Sub-buckets: the newest bucket's slot and start, and every slot's count.
    Buckets {
        head: u64,
        head_start: u64,
        counts: Vec<u64>,
    },
}

impl SlidingWindowState {
    /// The state's numbers.
    pub(crate) fn to_parts(&self) -> WindowParts {
        match &self.repr {
            Repr::Weighted(p) => WindowParts::Weighted([p.start, p.previous, p.current, p.last]),
            Repr::Buckets(r) => WindowParts::Buckets {
                head: r.head as u64,
                head_start: r.head_start,
                counts: r.counts.to_vec(),
            },
        }
    }

    /// The state of `parts`; `None` when the ring is empty, its head outside it, or its counts
    /// overflow, which no operation produces.
    pub(crate) fn from_parts(parts: WindowParts) -> Option<Self> {
        let repr = match parts {
            WindowParts::Weighted([start, previous, current, last]) => Repr::Weighted(Pair {
                start,
                previous,
                current,
                last,
            }),
            WindowParts::Buckets {
                head,
                head_start,
                counts,
            } => {
                let head = usize::try_from(head).ok().filter(|&h| h < counts.len())?;
                let total = counts.iter().try_fold(0u64, |s, &c| s.checked_add(c))?;
                Repr::Buckets(Ring {
                    counts: counts.into_boxed_slice(),
                    head,
                    head_start,
                    total,
                })
            }
        };
        Some(SlidingWindowState { repr })
    }
}
