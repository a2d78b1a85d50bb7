//! Stripe's four limiters, composed from algorithms and stores, and what they share.
//!
//! - [`request_rate::RequestRateLimiter`]: one bucket per user, sized by the user's plan; 429.
//! - [`concurrency::ConcurrencyLimiter`]: at most `capacity` requests in flight per user; 429.
//! - [`fleet::FleetShedder`]: one in-flight count for the whole fleet, a share reserved for
//!   critical requests; 503.
//! - [`utilization::UtilizationShedder`]: sheds test mode, then GET, then POST traffic, never
//!   critical, as this node's workers get busy; 503.
//!
//! [`crate::pipeline::Pipeline`] runs them in that order with per-limiter modes and failure
//! policies. Each limiter is also usable alone.

use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

pub mod concurrency;
pub mod fleet;
mod in_flight;
pub mod request_rate;
pub mod utilization;

pub use in_flight::Acquired;
pub use utilization::Priority;

/// Which of the four limiters; also the name used in configs, verdicts and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LimiterKind {
    /// [`request_rate::RequestRateLimiter`]
    RequestRate,
    /// [`concurrency::ConcurrencyLimiter`]
    Concurrency,
    /// [`fleet::FleetShedder`]
    Fleet,
    /// [`utilization::UtilizationShedder`]
    Utilization,
}

impl LimiterKind {
    /// All four, in pipeline order.
    pub const ALL: [LimiterKind; 4] = [
        LimiterKind::RequestRate,
        LimiterKind::Concurrency,
        LimiterKind::Fleet,
        LimiterKind::Utilization,
    ];

    /// `request_rate`, `concurrency`, `fleet` or `utilization`.
    pub fn name(self) -> &'static str {
        match self {
            LimiterKind::RequestRate => "request_rate",
            LimiterKind::Concurrency => "concurrency",
            LimiterKind::Fleet => "fleet",
            LimiterKind::Utilization => "utilization",
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
            LimiterKind::Fleet | LimiterKind::Utilization => 503,
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for LimiterKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a limiter acts on its decisions; switchable at run time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Decide and refuse.
    #[default]
    Enforce,
    /// Dark launch: decide and count what would be refused, but let it through.
    Shadow,
    /// Kill switch: not consulted at all.
    Off,
}

impl Mode {
    /// `enforce`, `shadow` or `off`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Shadow => "shadow",
            Mode::Off => "off",
        }
    }

    /// Parses [`Mode::name`]'s output.
    pub fn from_name(name: &str) -> Option<Mode> {
        [Mode::Enforce, Mode::Shadow, Mode::Off]
            .into_iter()
            .find(|m| m.name() == name)
    }

    pub(crate) fn to_u8(self) -> u8 {
        self as u8
    }

    pub(crate) fn from_u8(v: u8) -> Mode {
        match v {
            0 => Mode::Enforce,
            1 => Mode::Shadow,
            _ => Mode::Off,
        }
    }
}

/// What a limiter does when its store fails (an `Err`, never a denial).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OnStoreError {
    /// Let the request through and count it (the default: a rate limiter must not become the
    /// outage).
    #[default]
    FailOpen,
    /// Refuse the request with 503.
    FailClosed,
}

/// A place taken in a concurrency or fleet limiter. Dropping it gives the place back, on every
/// path: success, error, panic unwinding, a cancelled future. [`Lease::keep`] detaches it for
/// callers that return it later by id (the HTTP service's `/v1/release`).
pub struct Lease {
    id: u64,
    key: String,
    returner: Option<Arc<dyn ReturnLease>>,
}

/// Gives a lease back to the limiter it came from.
pub(crate) trait ReturnLease: Send + Sync {
    fn return_lease(&self, key: &str, id: u64);
}

impl Lease {
    pub(crate) fn new(id: u64, key: String, returner: Arc<dyn ReturnLease>) -> Lease {
        Lease {
            id,
            key,
            returner: Some(returner),
        }
    }

    /// The lease's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The limiter key the lease was taken on (the user, or the fleet's key).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Keeps the place taken after this value is dropped; the caller must release it by id
    /// (or let it expire after the limiter's `lease_ttl`). Returns the id.
    pub fn keep(mut self) -> u64 {
        self.returner = None;
        self.id
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(returner) = self.returner.take() {
            returner.return_lease(&self.key, self.id);
        }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("id", &self.id)
            .field("key", &self.key)
            .field("held", &self.returner.is_some())
            .finish()
    }
}

/// A fresh lease id: unique in this process, and unpredictable across processes (a per-process
/// random seed), so that nodes sharing a store do not collide.
pub fn new_lease_id() -> u64 {
    static SEED: OnceLock<foldhash::fast::RandomState> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    SEED.get_or_init(Default::default).hash_one(n)
}

/// The values of the IETF `RateLimit-Policy` and `RateLimit` fields
/// (draft-ietf-httpapi-ratelimit-headers, structured-field syntax) for one decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitHeaders {
    /// e.g. `"requests";q=50;w=1`
    pub policy: String,
    /// e.g. `"requests";r=0;t=1`
    pub remaining: String,
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

    struct Log(Mutex<Vec<(String, u64)>>);

    impl ReturnLease for Log {
        fn return_lease(&self, key: &str, id: u64) {
            self.0.lock().unwrap().push((key.to_string(), id));
        }
    }

    #[test]
    fn a_lease_is_returned_once_on_drop_and_never_when_kept() {
        let log = Arc::new(Log(Mutex::new(Vec::new())));
        drop(Lease::new(7, "u".into(), log.clone()));
        let kept = Lease::new(8, "u".into(), log.clone()).keep();
        assert_eq!(kept, 8);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _lease = Lease::new(9, "v".into(), log.clone());
            panic!("handler failed");
        }));
        assert!(unwound.is_err());
        assert_eq!(
            *log.0.lock().unwrap(),
            [("u".to_string(), 7), ("v".to_string(), 9)]
        );
    }

    #[test]
    fn lease_ids_are_unique() {
        let ids: std::collections::HashSet<u64> = (0..10_000).map(|_| new_lease_id()).collect();
        assert_eq!(ids.len(), 10_000);
    }

    #[test]
    fn names_round_trip() {
        for k in LimiterKind::ALL {
            assert_eq!(LimiterKind::from_name(k.name()), Some(k));
        }
        for m in [Mode::Enforce, Mode::Shadow, Mode::Off] {
            assert_eq!(Mode::from_name(m.name()), Some(m));
            assert_eq!(Mode::from_u8(m.to_u8()), m);
        }
        assert_eq!(whole_seconds_up(std::time::Duration::from_millis(120)), 1);
        assert_eq!(whole_seconds_up(std::time::Duration::from_secs(2)), 2);
        assert_eq!(whole_seconds_up(std::time::Duration::ZERO), 0);
    }
}
