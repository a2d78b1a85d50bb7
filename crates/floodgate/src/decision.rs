//! What a limiter answers: [`Decision`], and what it is asked: [`Op`].

use std::fmt;
use std::time::Duration;

/// The answer to one operation on one key: allowed or not, and the numbers a caller needs to
/// build headers, retry, or wait.
///
/// A denial is a normal `Decision` (`allowed == false`), not an error. A denied request consumes
/// nothing unless its algorithm's documentation says otherwise.
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use = "a decision says whether the request may proceed"]
#[non_exhaustive]
pub struct Decision {
    /// Whether the request may proceed (after [`Decision::wait`], for shapers).
    pub allowed: bool,
    /// The most the key can be granted at once from a fresh state (the burst), in cost units.
    pub limit: u64,
    /// How much more cost would be granted right now, after this decision, rounded down.
    pub remaining: u64,
    /// Time until the key's state is back to fresh (full bucket, empty window, empty queue).
    pub reset_after: Duration,
    /// When denied: the earliest time after which the same request could pass. `None` when the
    /// request was allowed, and when it can never pass (its cost is above what can ever be
    /// granted at once).
    pub retry_after: Option<Duration>,
    /// For shapers (leaky queue, smooth limiters): how long the caller must wait before going
    /// ahead with an allowed request. Zero for every other algorithm and for denials.
    pub wait: Duration,
}

impl Decision {
    /// An allowed decision with no wait.
    pub fn allow(limit: u64, remaining: u64, reset_after: Duration) -> Decision {
        Decision {
            allowed: true,
            limit,
            remaining,
            reset_after,
            retry_after: None,
            wait: Duration::ZERO,
        }
    }

    /// A denial; `retry_after` is `None` when the request can never pass.
    pub fn deny(
        limit: u64,
        remaining: u64,
        reset_after: Duration,
        retry_after: Option<Duration>,
    ) -> Decision {
        Decision {
            allowed: false,
            limit,
            remaining,
            reset_after,
            retry_after,
            wait: Duration::ZERO,
        }
    }
}

/// The id of a lease in a concurrency or fleet limiter: 128 bits, random when Floodgate makes it
/// ([`LeaseId::random`]), so that a caller cannot release another caller's lease by guessing its
/// id. Written as 32 lowercase hexadecimal digits ([`fmt::Display`], [`std::str::FromStr`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(pub u128);

impl LeaseId {
    /// A new id from the thread's cryptographically secure generator (`rand`'s `ThreadRng`,
    /// ChaCha reseeded from the OS): unpredictable from any number of earlier ids.
    pub fn random() -> LeaseId {
        LeaseId(rand::random())
    }
}

/// A caller's own numeric id (as a replayed trace carries): the same 128-bit id space.
impl From<u64> for LeaseId {
    fn from(id: u64) -> LeaseId {
        LeaseId(u128::from(id))
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// Parses 1 to 32 hexadecimal digits (either case).
impl std::str::FromStr for LeaseId {
    type Err = std::num::ParseIntError;
    fn from_str(text: &str) -> Result<LeaseId, Self::Err> {
        if text.len() > 32 || text.starts_with('+') {
            // from_str_radix accepts a sign and reports overflow itself; refuse both the same way.
            return u128::from_str_radix("-", 16).map(LeaseId);
        }
        u128::from_str_radix(text, 16).map(LeaseId)
    }
}

/// One operation on one key's state.
///
/// Every algorithm supports [`Op::Check`]. The shaping operations are supported where the
/// algorithm's documentation says so; [`crate::algorithm::Algorithm::supports`] tells, and stores
/// refuse the others with [`crate::StoreError::Unsupported`] before touching any state.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Op {
    /// Take `cost` now if it is available, else deny. Cost 0 is a read-only probe.
    Check {
        /// Units to take; 0 probes without changing anything.
        cost: u64,
    },
    /// Smooth limiters (Guava's `acquire`): always reserve `cost` and report in
    /// [`Decision::wait`] how long the caller must wait; the next caller pays for a big request.
    Reserve {
        /// Permits to reserve.
        cost: u64,
    },
    /// Smooth limiters (Guava's `tryAcquire(permits, timeout)`): reserve `cost` only if the wait
    /// would be at most `timeout`; the decision carries the wait.
    TryAcquire {
        /// Permits to reserve.
        cost: u64,
        /// The longest wait the caller accepts.
        timeout: Duration,
    },
    /// Smooth limiters (Guava's `setRate`): change this key's rate, in permits per second.
    SetRate {
        /// The new rate, permits per second; must be finite and positive.
        rate: f64,
    },
    /// Concurrency and fleet limiters: take one in-flight place for `lease` until it is
    /// released or expires. Acquiring a lease that is already held renews it.
    Acquire {
        /// The caller's lease id (random, so that two callers never share one).
        lease: LeaseId,
        /// Whether the request is critical (the fleet shedder never refuses those).
        critical: bool,
    },
    /// Usage-based limits: give back `cost` units taken earlier, because the request cost less
    /// than was charged (a reservation settled below its estimate, Envoy's
    /// `is_negative_hits`). Always allowed: it never takes anything. What is given back is
    /// what still counts: the count never goes below empty (a bucket never above full), and a
    /// refund that arrives after the units stopped counting (a later window) gives back
    /// nothing. The decision reports the state after the refund. Supported by the fixed
    /// window, the token and leaky buckets, GCRA and the sliding window counter (newest units
    /// first); not by the sliding log, which keeps instants rather than a count to lower.
    Refund {
        /// Units to give back.
        cost: u64,
    },
    /// Usage-based limits: count `cost` units used by a request that already ran, even past
    /// the limit (a cost known only at the end: Envoy's stream-done `hits_addend`, a
    /// reservation settled above its estimate). Nothing is refused: the units were spent. The
    /// decision's `allowed` says whether the state is still within its limit afterwards; once
    /// a charge has put it past, every check is denied (a check of cost 0 included) until the
    /// excess has refilled or its window has ended, and `retry_after` says when that is. So a
    /// budget charged late is overshot by at most what was in flight, and the overshoot is
    /// paid back rather than forgotten. Supported by the fixed window, the token and leaky buckets
    /// and GCRA.
    Charge {
        /// Units used.
        cost: u64,
    },
    /// Concurrency and fleet limiters: give back `lease`'s place. The decision's `allowed`
    /// tells whether the lease was held (an unknown or expired lease is a no-op).
    Release {
        /// The lease to give back.
        lease: LeaseId,
    },
}

impl Op {
    /// The kind of this operation, without its arguments.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Check { .. } => OpKind::Check,
            Op::Reserve { .. } => OpKind::Reserve,
            Op::TryAcquire { .. } => OpKind::TryAcquire,
            Op::SetRate { .. } => OpKind::SetRate,
            Op::Acquire { .. } => OpKind::Acquire,
            Op::Release { .. } => OpKind::Release,
            Op::Refund { .. } => OpKind::Refund,
            Op::Charge { .. } => OpKind::Charge,
        }
    }

    /// The units the operation asks for: its `cost` ([`Op::Charge`]'s too), 1 for [`Op::Acquire`], 0 for
    /// [`Op::SetRate`], [`Op::Release`] and [`Op::Refund`] (which ask for nothing). Algorithms
    /// answer operations they do not support as a read-only probe of this cost.
    pub fn cost(&self) -> u64 {
        match *self {
            Op::Check { cost }
            | Op::Reserve { cost }
            | Op::TryAcquire { cost, .. }
            | Op::Charge { cost } => cost,
            Op::Acquire { .. } => 1,
            Op::SetRate { .. } | Op::Release { .. } | Op::Refund { .. } => 0,
        }
    }
}

/// The kind of an [`Op`], for capability checks and error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// [`Op::Check`]
    Check,
    /// [`Op::Reserve`]
    Reserve,
    /// [`Op::TryAcquire`]
    TryAcquire,
    /// [`Op::SetRate`]
    SetRate,
    /// [`Op::Acquire`]
    Acquire,
    /// [`Op::Release`]
    Release,
    /// [`Op::Refund`]
    Refund,
    /// [`Op::Charge`]
    Charge,
}

impl OpKind {
    /// The operation's name as it appears in replay traces.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Check => "check",
            OpKind::Reserve => "reserve",
            OpKind::TryAcquire => "try_acquire",
            OpKind::SetRate => "set_rate",
            OpKind::Acquire => "acquire",
            OpKind::Release => "release",
            OpKind::Refund => "refund",
            OpKind::Charge => "charge",
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::LeaseId;

    #[test]
    fn lease_ids_print_as_32_hex_digits_and_parse_back() {
        let id = LeaseId(0xabc);
        assert_eq!(id.to_string(), "00000000000000000000000000000abc");
        assert_eq!(id.to_string().parse::<LeaseId>(), Ok(id));
        assert_eq!("ABC".parse::<LeaseId>(), Ok(id));
        assert!("".parse::<LeaseId>().is_err());
        assert!("+abc".parse::<LeaseId>().is_err());
        assert!("g".parse::<LeaseId>().is_err());
        assert!("1".repeat(33).parse::<LeaseId>().is_err());
        assert_eq!(LeaseId::from(7u64), LeaseId(7));
    }

    #[test]
    fn random_lease_ids_do_not_repeat() {
        let ids: std::collections::HashSet<LeaseId> =
            (0..10_000).map(|_| LeaseId::random()).collect();
        assert_eq!(ids.len(), 10_000);
    }
}
