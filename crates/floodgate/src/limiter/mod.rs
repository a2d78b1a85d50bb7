//! Limiters: algorithms put to work on a store, each in its own [`Namespace`] of that store.
//!
//! - [`KeyedLimit`]: one algorithm on any key (the named limits of `/v1/check`); its
//!   [`KeyedLimit::reserve`] and [`KeyedLimit::settle`] hold a budget for a request whose cost
//!   is known only when it ends ([`reservation`]).
//!
//! Stripe's four, which [`crate::pipeline::Pipeline::stripe`] assembles:
//! - [`request_rate::RequestRateLimiter`]: one bucket per user, sized by the user's plan; 429.
//! - [`concurrency::ConcurrencyLimiter`]: at most `capacity` requests in flight per user; 429.
//! - [`fleet::FleetShedder`]: one in-flight count for the whole fleet, a share reserved for
//!   critical requests; 503.
//! - [`utilization::UtilizationShedder`]: sheds test mode, then GET, then POST traffic, never
//!   critical, as this node's workers get busy; 503.
//!
//! And one more, after Netflix's concurrency-limits:
//! - [`adaptive::AdaptiveConcurrencyLimiter`]: at most a limit of requests in flight on this
//!   node, learned from their latency (Gradient2); 503.
//!
//! A [`crate::pipeline::Pipeline`] runs any number of them in order, each as a named stage with
//! its own mode, failure policy and refusal status. Each limiter is also usable alone, from
//! async code or, through its `*_blocking` methods, from synchronous code.
//!
//! A limiter writes its keys as `namespace:key` ([`Namespace::key`]); its namespace defaults to
//! its kind's name (`request_rate`, `concurrency`, `fleet`), and two limiters of one kind that
//! share a store need different ones.

use std::fmt;
use std::sync::Arc;

use crate::store::Namespace;
use crate::LeaseId;

pub mod adaptive;
pub mod concurrency;
pub mod fleet;
pub(crate) mod in_flight;
mod keyed;
pub mod request_rate;
pub mod reservation;
pub mod utilization;

pub use in_flight::Acquired;
pub use keyed::KeyedLimit;
pub use reservation::Reservation;
pub use utilization::Priority;

/// Which kind of limiter a stage runs; its name is the default namespace and stage name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LimiterKind {
    /// [`request_rate::RequestRateLimiter`]
    RequestRate,
    /// [`concurrency::ConcurrencyLimiter`]
    Concurrency,
    /// [`fleet::FleetShedder`]
    Fleet,
    /// [`utilization::UtilizationShedder`]
    Utilization,
    /// [`adaptive::AdaptiveConcurrencyLimiter`]
    AdaptiveConcurrency,
}

impl LimiterKind {
    /// All five: Stripe's four in their pipeline order, then the adaptive concurrency limit.
    pub const ALL: [LimiterKind; 5] = [
        LimiterKind::RequestRate,
        LimiterKind::Concurrency,
        LimiterKind::Fleet,
        LimiterKind::Utilization,
        LimiterKind::AdaptiveConcurrency,
    ];

    /// `request_rate`, `concurrency`, `fleet`, `utilization` or `adaptive_concurrency`.
    pub fn name(self) -> &'static str {
        match self {
            LimiterKind::RequestRate => "request_rate",
            LimiterKind::Concurrency => "concurrency",
            LimiterKind::Fleet => "fleet",
            LimiterKind::Utilization => "utilization",
            LimiterKind::AdaptiveConcurrency => "adaptive_concurrency",
        }
    }

    /// Parses [`LimiterKind::name`]'s output.
    pub fn from_name(name: &str) -> Option<LimiterKind> {
        LimiterKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The HTTP status of this limiter's refusals: 429 for the per-user limiters (the client
    /// should slow down), 503 for the shedders (the service is protecting itself).
    pub fn status(self) -> u16 {
        match self {
            LimiterKind::RequestRate | LimiterKind::Concurrency => 429,
            LimiterKind::Fleet | LimiterKind::Utilization | LimiterKind::AdaptiveConcurrency => 503,
        }
    }
}

impl fmt::Display for LimiterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A place taken in a concurrency or fleet limiter. Dropping it gives the place back, on every
/// path: success, error, panic unwinding, a cancelled future. [`Lease::keep`] detaches it into a
/// [`LeaseHandle`] for callers that return it later (the HTTP service's `/v1/release`).
#[must_use = "dropping a lease gives its place back at once; keep it while the request runs"]
pub struct Lease {
    handle: LeaseHandle,
    returner: Option<Arc<dyn ReturnLease>>,
}

/// A lease detached from its guard ([`Lease::keep`]): which limiter issued it, on which key,
/// and its id. Give it to the limiter's (or the pipeline's) `release` to return the place; a
/// handle that is never released expires after the limiter's `lease_ttl`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[must_use = "a kept lease holds its place until it is released or expires"]
pub struct LeaseHandle {
    limiter: Namespace,
    key: String,
    id: LeaseId,
}

impl LeaseHandle {
    /// A handle from its parts, for a caller that stored them (for example in a token).
    pub fn new(limiter: Namespace, key: impl Into<String>, id: LeaseId) -> LeaseHandle {
        LeaseHandle {
            limiter,
            key: key.into(),
            id,
        }
    }

    /// The namespace of the limiter that issued the lease (its stage name in a pipeline).
    pub fn limiter(&self) -> &Namespace {
        &self.limiter
    }

    /// The key the lease was taken on, without the namespace (the user, or the fleet's key).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The lease's id.
    pub fn id(&self) -> LeaseId {
        self.id
    }
}

/// Gives a lease back to the limiter it came from.
pub(crate) trait ReturnLease: Send + Sync {
    fn return_lease(&self, key: &str, id: LeaseId);

    /// Gives the lease back after its request ran for `latency`: a sample for limiters that
    /// learn from latency ([`adaptive`]); the others just take the place back.
    fn complete(&self, key: &str, id: LeaseId, latency: std::time::Duration) {
        let _ = latency;
        self.return_lease(key, id);
    }
}

impl Lease {
    pub(crate) fn new(handle: LeaseHandle, returner: Arc<dyn ReturnLease>) -> Lease {
        Lease {
            handle,
            returner: Some(returner),
        }
    }

    /// The lease's id.
    pub fn id(&self) -> LeaseId {
        self.handle.id
    }

    /// The key the lease was taken on (the user, or the fleet's key), without the namespace.
    pub fn key(&self) -> &str {
        &self.handle.key
    }

    /// The namespace of the limiter that issued the lease.
    pub fn limiter(&self) -> &Namespace {
        &self.handle.limiter
    }

    /// Gives the place back now, reporting that the request ran for `latency`: an adaptive
    /// concurrency limit ([`adaptive`]) learns from it; other limiters just take the place
    /// back, as dropping the lease does. (A dropped lease is no sample: its request may never
    /// have run.)
    pub fn complete(mut self, latency: std::time::Duration) {
        if let Some(returner) = self.returner.take() {
            returner.complete(&self.handle.key, self.handle.id, latency);
        }
    }

    /// Keeps the place taken after this value is dropped; the caller must release it with the
    /// returned handle (or let it expire after the limiter's `lease_ttl`).
    pub fn keep(mut self) -> LeaseHandle {
        self.returner = None;
        self.handle.clone()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(returner) = self.returner.take() {
            returner.return_lease(&self.handle.key, self.handle.id);
        }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("limiter", &self.handle.limiter)
            .field("key", &self.handle.key)
            .field("id", &self.handle.id)
            .field("held", &self.returner.is_some())
            .finish()
    }
}

/// The values of the IETF `RateLimit-Policy` and `RateLimit` fields
/// (draft-ietf-httpapi-ratelimit-headers, structured-field syntax) for one decision.
///
/// For a rate limit, the policy announces a quota `q` over a window of `w` whole seconds, and
/// `RateLimit` the units `r` left and the seconds `t` until the request could pass (refused) or
/// the quota is whole again (allowed). Two promises hold, so that a client pacing itself by
/// these fields is never refused for following them and never reads a contradiction:
/// - `r ≤ q`: what is left never exceeds the announced quota;
/// - `q / w ≤` the limit's long-run rate: the policy never promises more than the limit keeps.
///
/// Where the limit's burst fits in its quota (a window of `limit` requests, a bucket whose
/// burst equals its rate), the policy is the quota itself: `limit` per `window`, or `rate` per
/// second. Where the burst is larger (plan `free`: 50 per second with bursts of 100), the
/// policy describes the burst: `q` is the burst and `w` the seconds the limit takes to earn it
/// back from empty, so `q=100;w=2` for `free`: exactly its rate, and `r` (at most 100) never
/// above `q`. When that time is not a whole number of seconds, `w` rounds up and `q` is what
/// the rate earns in `w` (rounded down), which is at least the burst.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitHeaders {
    /// e.g. `"requests";q=50;w=1`
    pub policy: String,
    /// e.g. `"requests";r=0;t=1`
    pub remaining: String,
    /// The units left (`r`), for choosing the most restrictive of several limits.
    pub left: u64,
}

impl RateLimitHeaders {
    /// The fields for `decision` of a limit allowing `quota = (units, window)` (see
    /// [`crate::algorithm::spec::AnyAlgorithm::quota`]); `None` for limits without a quota.
    pub fn for_decision(
        quota: Option<(f64, std::time::Duration)>,
        decision: &crate::Decision,
    ) -> Option<RateLimitHeaders> {
        let (units, window) = quota?;
        let (q, w) = policy_numbers(units, window, decision.limit);
        let t = whole_seconds_up(decision.retry_after.unwrap_or(decision.reset_after));
        Some(RateLimitHeaders {
            policy: format!("\"requests\";q={q};w={w}"),
            remaining: format!("\"requests\";r={};t={t}", decision.remaining),
            left: decision.remaining,
        })
    }
}

/// The `RateLimit-Policy` quota and window as whole numbers, for a limit of `units` per
/// `window` whose burst is `burst` (see [`RateLimitHeaders`]).
pub(crate) fn policy_numbers(units: f64, window: std::time::Duration, burst: u64) -> (u64, u64) {
    const EPS: f64 = 1e-9;
    let window_secs = window.as_secs_f64().max(EPS);
    let per_second = units / window_secs;
    let (q, w) = 'quota: {
        // A fractional quota or window is expressed over a longer window (0.5/s: q=1;w=2).
        for k in [1.0, 2.0, 4.0, 5.0, 10.0, 100.0, 1000.0] {
            let q = units * k;
            let w = window_secs * k;
            if (q - q.round()).abs() < EPS && (w - w.round()).abs() < EPS && w.round() >= 1.0 {
                break 'quota (q.round() as u64, w.round() as u64);
            }
        }
        // Otherwise: whole requests per second, or one request per whole number of seconds
        // for rates below one per second.
        if per_second >= 1.0 {
            (per_second.floor() as u64, 1)
        } else {
            (1, (1.0 / per_second).ceil().max(1.0) as u64)
        }
    };
    if burst <= q {
        return (q, w);
    }
    // The burst is earned back in burst / rate seconds; round up to whole seconds and announce
    // what the rate earns in that time (≥ burst, since w ≥ burst / rate).
    let w = ((burst as f64 / per_second) - EPS).ceil().max(1.0);
    let q = (per_second * w + EPS).floor().max(burst as f64);
    (q as u64, w as u64)
}

/// Seconds rounded up, at least 1 when any time is left: what `Retry-After` and `t=` carry.
pub fn whole_seconds_up(d: std::time::Duration) -> u64 {
    let secs = d.as_secs();
    if d.subsec_nanos() > 0 {
        secs + 1
    } else {
        secs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Log(Mutex<Vec<(String, LeaseId)>>);

    impl ReturnLease for Log {
        fn return_lease(&self, key: &str, id: LeaseId) {
            self.0.lock().unwrap().push((key.to_string(), id));
        }
    }

    fn lease(log: &Arc<Log>, key: &str, id: u64) -> Lease {
        let handle = LeaseHandle::new(Namespace::new("concurrency").unwrap(), key, id.into());
        Lease::new(handle, log.clone())
    }

    #[test]
    fn a_lease_is_returned_once_on_drop_and_never_when_kept() {
        let log = Arc::new(Log(Mutex::new(Vec::new())));
        drop(lease(&log, "u", 7));
        let kept = lease(&log, "u", 8).keep();
        assert_eq!(kept.id(), LeaseId(8));
        assert_eq!(kept.limiter().as_str(), "concurrency");
        assert_eq!(kept.key(), "u");
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _lease = lease(&log, "v", 9);
            panic!("handler failed");
        }));
        assert!(unwound.is_err());
        assert_eq!(
            *log.0.lock().unwrap(),
            [("u".to_string(), LeaseId(7)), ("v".to_string(), LeaseId(9))]
        );
    }

    #[test]
    fn policies_never_announce_less_than_is_left_nor_more_than_the_rate() {
        use std::time::Duration;
        let second = Duration::from_secs(1);
        // Plan free: 50/s, bursts of 100: the burst over the 2 s it takes to earn it back.
        assert_eq!(policy_numbers(50.0, second, 100), (100, 2));
        // A burst that fits the quota keeps the quota.
        assert_eq!(policy_numbers(50.0, second, 50), (50, 1));
        assert_eq!(
            policy_numbers(100.0, Duration::from_secs(60), 100),
            (100, 60)
        );
        assert_eq!(policy_numbers(0.5, second, 1), (1, 2));
        assert_eq!(policy_numbers(5.0, Duration::from_millis(100), 5), (50, 1));
        assert_eq!(policy_numbers(0.0001, second, 1), (1, 10_000));
        assert_eq!(policy_numbers(0.3, second, 1), (3, 10));
        // 3/s with bursts of 10: earned back in 3.33 s, so w = 4 and q = 12 ≥ 10.
        assert_eq!(policy_numbers(3.0, second, 10), (12, 4));
        // 0.3/s with bursts of 3: exactly 10 s, despite 3 / 0.3 = 10.000000000000002.
        assert_eq!(policy_numbers(0.3, second, 3), (3, 10));
        for (units, window_ms, burst) in [
            (50.0, 1000, 100),
            (3.0, 1000, 10),
            (7.5, 1000, 40),
            (10.0, 60_000, 25),
            (0.7, 1000, 9),
        ] {
            let window = Duration::from_millis(window_ms);
            let (q, w) = policy_numbers(units, window, burst);
            assert!(q >= burst, "{units}/{window_ms}ms burst {burst}: q={q}");
            let rate = units / window.as_secs_f64();
            assert!(q as f64 / w as f64 <= rate + 1e-9, "{units}: q={q} w={w}");
        }
    }

    #[test]
    fn names_round_trip() {
        for k in LimiterKind::ALL {
            assert_eq!(LimiterKind::from_name(k.name()), Some(k));
        }
        assert_eq!(whole_seconds_up(std::time::Duration::from_millis(120)), 1);
        assert_eq!(whole_seconds_up(std::time::Duration::from_secs(2)), 2);
        assert_eq!(whole_seconds_up(std::time::Duration::ZERO), 0);
    }
}
