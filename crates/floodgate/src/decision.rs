//! What a limiter answers: [`Decision`], and what it is asked: [`Op`].

use std::time::Duration;

/// The answer to one operation on one key: allowed or not, and the numbers a caller needs to
/// build headers, retry, or wait.
///
/// A denial is a normal `Decision` (`allowed == false`), not an error. A denied request consumes
/// nothing unless its algorithm's documentation says otherwise.
#[derive(Clone, Copy, Debug, PartialEq)]
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
        lease: u64,
        /// Whether the request is critical (the fleet shedder never refuses those).
        critical: bool,
    },
    /// Concurrency and fleet limiters: give back `lease`'s place. The decision's `allowed`
    /// tells whether the lease was held (an unknown or expired lease is a no-op).
    Release {
        /// The lease to give back.
        lease: u64,
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
        }
    }

    /// The units the operation asks for: its `cost`, 1 for [`Op::Acquire`], 0 for
    /// [`Op::SetRate`] and [`Op::Release`]. Algorithms answer operations they do not support as
    /// a read-only probe of this cost.
    pub fn cost(&self) -> u64 {
        match *self {
            Op::Check { cost } | Op::Reserve { cost } | Op::TryAcquire { cost, .. } => cost,
            Op::Acquire { .. } => 1,
            Op::SetRate { .. } | Op::Release { .. } => 0,
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
        }
    }
}

impl std::fmt::Display for OpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
