//! The fixed window on memcached: one counter per key and window, under
//! `<key>:<window index>`, the index being `floor(now / window)` on the store's clock.
//!
//! | op | commands | decision (as [`FixedWindow`] decides with the same counts) |
//! |---|---|---|
//! | check, `0 < n ≤ limit` | `incr` (`add`, `incr`); over the limit, `decr n` | allowed iff the count `c` after adding is `≤ limit`: `remaining = limit − c`; refused: `remaining = limit − (c − n)`, `retry_after` = to the window's end |
//! | check, `n = 0`, or a charge of 0 | `get` | allowed iff `c ≤ limit` (a charge may have put it past) |
//! | check, `n > limit` | `get` | refused, `retry_after: None`, nothing counted |
//! | refund `n` | `decr n` (never below 0; absent: 0) | allowed |
//! | charge `n > 0` | `incr` (`add`, `incr`), nothing given back | allowed iff `c ≤ limit` |
//!
//! `reset_after` is the time to the window's end, or 0 when the count is 0. The counter
//! expires [`EXPIRY_MARGIN`] after its window ends; memcached reads an expiry of up to 30 days
//! as seconds from now, and a larger one as a Unix time, so a longer window (Envoy's month and
//! year) is given its end as a Unix time, which needs the store's clock to count from the Unix
//! epoch (as [`crate::SystemClock`] does).

use std::time::Duration;

use super::job::Job;
use crate::algorithm::fixed_window::FixedWindow;
use crate::{Decision, Nanos, Op, StoreError};

/// How long a window's counter outlives the window: room for the nodes' clocks to differ by
/// that much without a lagging node finding its current window's counter gone.
pub const EXPIRY_MARGIN: Duration = Duration::from_secs(5);

/// memcached's longest relative expiry, in seconds (30 days); a larger one is a Unix time.
const MAX_RELATIVE_EXPIRY: u64 = 30 * 86_400;

/// What a call does and how its count becomes a decision.
#[derive(Debug)]
pub(crate) struct WindowCall {
    /// The commands to run.
    pub(crate) job: Job,
    kind: Kind,
    limit: u64,
    cost: u64,
    to_end: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Check,
    /// Decided from a read: cost 0 (a check or a charge), or a check above the limit.
    Read,
    Refund,
    Charge,
}

impl WindowCall {
    /// The call for `op` on `key` at `now`; the op must be one the fixed window supports.
    pub(crate) fn new(fw: &FixedWindow, key: &str, now: Nanos, op: Op) -> Result<Self, StoreError> {
        let window = u64::try_from(fw.window().as_nanos()).unwrap_or(u64::MAX);
        let index = now.0 / window;
        let start = index * window;
        let end = start.saturating_add(window);
        let counter = format!("{key}:{index}");
        super::protocol::check_key(&counter)?;
        let exptime = expiry(now.0, end);
        let limit = fw.limit();
        let (kind, cost) = match op {
            Op::Check { cost } if cost == 0 || cost > limit => (Kind::Read, cost),
            Op::Check { cost } => (Kind::Check, cost),
            Op::Charge { cost: 0 } => (Kind::Read, 0),
            Op::Charge { cost } => (Kind::Charge, cost),
            Op::Refund { cost } => (Kind::Refund, cost),
            other => {
                return Err(StoreError::Unsupported {
                    algorithm: "fixed_window",
                    op: other.kind(),
                })
            }
        };
        let job = match kind {
            Kind::Check => Job::check(counter, cost, exptime, limit),
            Kind::Read => Job::read(counter),
            Kind::Refund => Job::give_back(counter, cost),
            Kind::Charge => Job::count(counter, cost, exptime),
        };
        Ok(WindowCall {
            job,
            kind,
            limit,
            cost,
            to_end: Duration::from_nanos(end - now.0),
        })
    }

    /// The decision, once the job has its count.
    pub(crate) fn decide(&self) -> Result<Decision, StoreError> {
        let c = self.job.count.ok_or_else(|| {
            StoreError::Unavailable(format!("memcached key {} was not counted", self.job.key))
        })?;
        let (limit, to_end) = (self.limit, self.to_end);
        let reset = |count: u64| if count == 0 { Duration::ZERO } else { to_end };
        Ok(match self.kind {
            Kind::Check if c <= limit => Decision::allow(limit, limit - c, to_end),
            Kind::Check => {
                let before = c.saturating_sub(self.cost);
                Decision::deny(
                    limit,
                    limit.saturating_sub(before),
                    reset(before),
                    Some(to_end),
                )
            }
            Kind::Read if self.cost > limit => {
                Decision::deny(limit, limit.saturating_sub(c), reset(c), None)
            }
            Kind::Read | Kind::Charge if c <= limit => Decision::allow(limit, limit - c, reset(c)),
            Kind::Read | Kind::Charge => Decision::deny(limit, 0, to_end, Some(to_end)),
            Kind::Refund => Decision::allow(limit, limit.saturating_sub(c), reset(c)),
        })
    }
}

/// The `exptime` for a counter whose window ends at `end` (ns), at `now`: seconds from now up
/// to 30 days, else the Unix time of the end (both plus [`EXPIRY_MARGIN`]).
pub(crate) fn expiry(now: u64, end: u64) -> u32 {
    let margin = EXPIRY_MARGIN.as_secs();
    let ttl = (end - now).div_ceil(1_000_000_000).saturating_add(margin);
    let exptime = if ttl <= MAX_RELATIVE_EXPIRY {
        ttl
    } else {
        end.div_ceil(1_000_000_000).saturating_add(margin)
    };
    u32::try_from(exptime).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_is_relative_up_to_30_days_then_absolute() {
        let s = 1_000_000_000u64;
        assert_eq!(expiry(0, s / 2), 1 + 5);
        assert_eq!(expiry(10 * s, 70 * s), 60 + 5);
        let day = 86_400 * s;
        assert_eq!(expiry(0, 30 * day - 5 * s), 30 * 86_400);
        // A year window from 2024-01-01: its end as a Unix time.
        let now = 1_704_067_200 * s;
        assert_eq!(
            expiry(now, now + 365 * day),
            (1_704_067_200 + 365 * 86_400 + 5) as u32
        );
    }

    #[test]
    fn counters_are_named_by_key_and_window_index() {
        let fw = FixedWindow::new(3, Duration::from_secs(60)).unwrap();
        let call =
            WindowCall::new(&fw, "ns:u", Nanos::from_secs(125), Op::Check { cost: 1 }).unwrap();
        assert_eq!(call.job.key, "ns:u:2");
        assert_eq!(call.to_end, Duration::from_secs(55));
        let long = "k".repeat(249);
        assert!(matches!(
            WindowCall::new(&fw, &long, Nanos::ZERO, Op::Check { cost: 1 }),
            Err(StoreError::NotOnStore { .. })
        ));
    }
}
