//! A store's health, as `/metrics`, `/readyz` and the log show it: calls and errors by kind,
//! whether the last telling call succeeded, and failures logged at a bounded rate.
//!
//! # Which calls tell
//!
//! A store can answer and still not work: a Redis replica, or a master out of memory, answers
//! every read and every refusal that changes nothing, and refuses every write. So only a call
//! that *wrote* (a decision that admitted, the write-path probe, a counter) makes a failing
//! store healthy again and logs "store recovered"; a failure of any call makes it unhealthy;
//! a call that succeeded without writing (a read for the dashboard, a refusal) leaves the last
//! outcome as it was. Error answers (`READONLY`, `OOM`, `MISCONF`, `NOPERM`, `BUSY`, …) are
//! failures, each counted under its own kind ([`ErrorKind::Rejected`]).
//!
//! # Bounded logging
//!
//! A store that is down fails every call; one log line per call would flood the log when it
//! matters most. Each kind of error (timeout, unavailable, other) is logged at most once per
//! interval ([`super::LOG_EVERY`]) on the injected clock; the calls that failed in between are
//! counted, and the next line says how many were suppressed. The first success after a failure
//! is logged once ("store recovered"). Every line shows the URL with its password redacted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use floodgate::store::redis::BreakerState;
use floodgate::store::Rejection;
use floodgate::{Clock, StoreError};
use serde::Serialize;

/// The kinds of store errors counted apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The call did not finish within the store's timeout.
    Timeout,
    /// No connection could be made: refused, or the host is unknown or unreachable.
    Refused,
    /// The store refused the credentials (a password required and missing, or wrong).
    Auth,
    /// The store did not answer as a Redis server (not Redis, TLS mismatch, a database it
    /// does not have, an unexpected reply).
    Protocol,
    /// The store answered with an error instead of running the call: a read-only replica,
    /// out of memory, writes stopped, no permission, … (named by the [`Rejection`]).
    Rejected(Rejection),
    /// Any other failure of the store: a connection lost mid-call, a failover under way, or
    /// its breaker open.
    Unavailable,
    /// Not a failure of the store: an operation refused for one key or limit (an operation
    /// or algorithm the store cannot run, a state conflict). It does not change readiness.
    Other,
}

impl ErrorKind {
    /// Every kind, in the order metrics list them.
    pub const ALL: [ErrorKind; 18] = [
        ErrorKind::Timeout,
        ErrorKind::Refused,
        ErrorKind::Auth,
        ErrorKind::Protocol,
        ErrorKind::Rejected(Rejection::ReadOnly),
        ErrorKind::Rejected(Rejection::OutOfMemory),
        ErrorKind::Rejected(Rejection::WritesStopped),
        ErrorKind::Rejected(Rejection::NoPermission),
        ErrorKind::Rejected(Rejection::Busy),
        ErrorKind::Rejected(Rejection::CrossSlot),
        ErrorKind::Rejected(Rejection::NoScript),
        ErrorKind::Rejected(Rejection::Loading),
        ErrorKind::Rejected(Rejection::MasterDown),
        ErrorKind::Rejected(Rejection::ClusterDown),
        ErrorKind::Rejected(Rejection::TryAgain),
        ErrorKind::Rejected(Rejection::Other),
        ErrorKind::Unavailable,
        ErrorKind::Other,
    ];

    /// The kind of `error`.
    pub fn of(error: &StoreError) -> ErrorKind {
        match error {
            StoreError::Timeout(_) => ErrorKind::Timeout,
            StoreError::Refused(_) => ErrorKind::Refused,
            StoreError::Auth(_) => ErrorKind::Auth,
            StoreError::Protocol(_) => ErrorKind::Protocol,
            StoreError::Rejected { rejection, .. } => ErrorKind::Rejected(*rejection),
            e if e.is_store_failure() => ErrorKind::Unavailable,
            _ => ErrorKind::Other,
        }
    }

    /// Its name in metrics, logs and `/readyz`: `timeout`, `refused`, `auth`, `protocol`, a
    /// refusal's own ([`Rejection::name`]: `readonly`, `oom`, `misconf`, `noperm`, `busy`, …),
    /// `unavailable` or `other`.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Timeout => "timeout",
            ErrorKind::Refused => "refused",
            ErrorKind::Auth => "auth",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Rejected(rejection) => rejection.name(),
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Other => "other",
        }
    }

    fn index(self) -> usize {
        // Every kind is in ALL (a refusal added to the core crate and not here would be
        // counted as the last kind, `other`).
        ErrorKind::ALL
            .iter()
            .position(|k| *k == self)
            .unwrap_or(ErrorKind::ALL.len() - 1)
    }

    fn from_index(i: u8) -> Option<ErrorKind> {
        ErrorKind::ALL.get(usize::from(i)).copied()
    }
}

/// The last call's outcome: unknown, ok, or failed with the kind at `FAILED + index`.
const UNKNOWN: u8 = 0;
const OK: u8 = 1;
const FAILED: u8 = 2;

/// What `/readyz` shows of the store.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StoreStatus {
    /// `memory`, `redis` or `redis-cluster`.
    pub kind: &'static str,
    /// The URL, any password redacted.
    pub url: String,
    /// `closed`, `open` or `half_open` (a Redis store's breaker); `null` for the memory store.
    pub breaker: Option<&'static str>,
    /// Whether the last telling call (one that wrote, or failed) succeeded; `null` before the
    /// first. Calls refused for one key or limit ([`ErrorKind::Other`]) do not count: they say
    /// nothing of the store; nor do reads and refusals that changed nothing (see the [module
    /// documentation](self)).
    pub last_call_ok: Option<bool>,
    /// The kind of the last call's failure ([`ErrorKind::name`]); `null` unless it failed.
    pub last_error: Option<&'static str>,
    /// `exact` (every decision a call to the store) or `cached` (local decisions, synced).
    pub mode: &'static str,
    /// Cached mode: seconds since the last successful sync; `null` in exact mode.
    pub sync_lag_seconds: Option<f64>,
}

impl StoreStatus {
    /// Whether the store can take calls now: not while its breaker is open, nor while its
    /// last call failed, except in cached mode, which goes on deciding locally.
    pub fn ready(&self) -> bool {
        self.not_ready().is_none()
    }

    /// Why the store cannot take calls now, for `/readyz`; `None` when it can.
    pub fn not_ready(&self) -> Option<String> {
        if self.mode == "cached" {
            return None;
        }
        let failed = (self.last_call_ok == Some(false)).then(|| {
            format!(
                "its last call failed ({})",
                self.last_error.unwrap_or("unavailable")
            )
        });
        match (self.breaker == Some("open"), failed) {
            (true, Some(failed)) => Some(format!("the store's circuit breaker is open; {failed}")),
            (true, None) => Some("the store's circuit breaker is open".to_string()),
            (false, Some(failed)) => Some(format!("the store failed: {failed}")),
            (false, None) => None,
        }
    }
}

/// The name of a breaker state, as metrics and `/readyz` show it.
pub fn breaker_name(state: BreakerState) -> &'static str {
    match state {
        BreakerState::Closed => "closed",
        BreakerState::Open => "open",
        BreakerState::HalfOpen => "half_open",
    }
}

/// The gauge value of a breaker state: 0 closed, 1 open, 2 half-open.
pub fn breaker_gauge(state: BreakerState) -> u8 {
    match state {
        BreakerState::Closed => 0,
        BreakerState::Open => 1,
        BreakerState::HalfOpen => 2,
    }
}

/// A store's counters and bounded log; see the [module documentation](self).
pub struct StoreHealth {
    kind: &'static str,
    url: String,
    calls: AtomicU64,
    /// Calls that failed or wrote: those whose outcome says whether the store works.
    telling: AtomicU64,
    errors: [AtomicU64; ErrorKind::ALL.len()],
    /// The last telling outcome (low 8 bits: `UNKNOWN`, `OK`, `FAILED` + kind) and the number
    /// of the call it came from (the bits above), in one word so that both change together:
    /// calls run concurrently and can end out of order, and a success from a call that began
    /// before the last recorded failure must not call the store recovered.
    last: AtomicU64,
    log: ErrorLog,
}

impl std::fmt::Debug for StoreHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreHealth")
            .field("kind", &self.kind)
            .field("url", &self.url)
            .field("calls", &self.calls())
            .finish_non_exhaustive()
    }
}

impl StoreHealth {
    /// The health of a store of `kind` at `url` (already redacted), logging each kind of
    /// failure at most once per `every` of `clock`.
    pub fn new(kind: &'static str, url: String, clock: Arc<dyn Clock>, every: Duration) -> Self {
        StoreHealth {
            kind,
            url,
            calls: AtomicU64::new(0),
            telling: AtomicU64::new(0),
            errors: Default::default(),
            last: AtomicU64::new(UNKNOWN as u64),
            log: ErrorLog::new(clock, every),
        }
    }

    /// `memory`, `redis` or `redis-cluster`.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The URL, any password redacted.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Calls made (a batch of operations sent together is one call).
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Counts a call as it begins; its number, for [`StoreHealth::record_call`] to order its
    /// outcome among concurrent calls'.
    pub fn begin(&self) -> Call {
        Call(self.calls.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Calls whose outcome says whether the store works: those that failed, and those that
    /// wrote. Reads and refusals that changed nothing are not counted (they succeed on a
    /// store that takes no writes).
    pub fn telling_calls(&self) -> u64 {
        self.telling.load(Ordering::Relaxed)
    }

    /// Calls that failed with an error of `kind`.
    pub fn errors(&self, kind: ErrorKind) -> u64 {
        self.errors[kind.index()].load(Ordering::Relaxed)
    }

    /// Whether the last telling call succeeded; `None` before the first. Calls refused for
    /// one key or limit ([`ErrorKind::Other`]), and successes that wrote nothing, leave it as
    /// it was.
    pub fn last_call_ok(&self) -> Option<bool> {
        match outcome(self.last.load(Ordering::Relaxed)) {
            UNKNOWN => None,
            OK => Some(true),
            _ => Some(false),
        }
    }

    /// The kind of the last call's failure; `None` unless it failed.
    pub fn last_error(&self) -> Option<ErrorKind> {
        outcome(self.last.load(Ordering::Relaxed))
            .checked_sub(FAILED)
            .and_then(ErrorKind::from_index)
    }

    /// The status `/readyz` shows, with the breaker's `state` (`None`: the store has none).
    pub fn status(&self, breaker: Option<BreakerState>) -> StoreStatus {
        StoreStatus {
            kind: self.kind,
            url: self.url.clone(),
            breaker: breaker.map(breaker_name),
            last_call_ok: self.last_call_ok(),
            last_error: self.last_error().map(ErrorKind::name),
            mode: "exact",
            sync_lag_seconds: None,
        }
    }

    /// Counts one call that writes (a decision that admitted, a probe, a counter), begun as
    /// `call`, and logs a failure (or the recovery) if the bound allows:
    /// [`StoreHealth::record_call`] with `wrote` true.
    pub fn record<T>(&self, call: Call, result: &Result<T, StoreError>) {
        self.record_call(call, result, true);
    }

    /// Counts the outcome of `call` ([`StoreHealth::begin`]), and logs a failure (or the
    /// recovery) if the bound allows. Only a success that `wrote` to the store makes a failing
    /// store recovered: a read, or a refusal that changed nothing, succeeds on a store that
    /// refuses every write (a replica, one out of memory), so it leaves the last outcome as it
    /// was; so does a success of a call that began before the last recorded failure (it may
    /// have run before the store began to fail).
    pub fn record_call<T>(&self, call: Call, result: &Result<T, StoreError>, wrote: bool) {
        if wrote || result.is_err() {
            self.telling.fetch_add(1, Ordering::Relaxed);
        }
        match result {
            Ok(_) if !wrote => {}
            Ok(_) => {
                // A load first: the common path (already OK) writes nothing shared.
                let last = self.last.load(Ordering::Relaxed);
                if outcome(last) != OK && self.settle(call, OK) >= FAILED {
                    tracing::info!(store = self.kind, url = %self.url, "store recovered");
                }
            }
            Err(e) => {
                let kind = ErrorKind::of(e);
                self.errors[kind.index()].fetch_add(1, Ordering::Relaxed);
                // A breaker refusing calls says nothing new: the failure that opened it stays
                // the last one named.
                let refused_by_breaker = matches!(e, StoreError::BreakerOpen { .. })
                    && outcome(self.last.load(Ordering::Relaxed)) >= FAILED;
                if kind != ErrorKind::Other && !refused_by_breaker {
                    // Index < 18: fits.
                    self.settle(call, FAILED + kind.index() as u8);
                }
                if let Some(suppressed) = self.log.admit(kind) {
                    tracing::warn!(
                        store = self.kind,
                        url = %self.url,
                        kind = kind.name(),
                        suppressed,
                        error = %e,
                        "store call failed (suppressed: failures of this kind not logged since its last line)"
                    );
                }
            }
        }
    }
}

impl StoreHealth {
    /// Makes `new` the last outcome, from `call`, unless a call that began later has already
    /// settled one (a failure) or `new` is a success from a call that began before the last
    /// failure; the outcome that was there before.
    fn settle(&self, call: Call, new: u8) -> u8 {
        let mut current = self.last.load(Ordering::Relaxed);
        loop {
            let (from, was) = (current >> 8, outcome(current));
            let stale = if new == OK {
                call.0 <= from
            } else {
                call.0 < from
            };
            if stale {
                return new;
            }
            match self.last.compare_exchange_weak(
                current,
                (call.0 << 8) | u64::from(new),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return was,
                Err(seen) => current = seen,
            }
        }
    }
}

/// A call's number, from [`StoreHealth::begin`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Call(u64);

/// The outcome part of the `last` word.
fn outcome(last: u64) -> u8 {
    (last & 0xff) as u8
}

/// At most one line per interval per kind of error, and a count of those not logged.
struct ErrorLog {
    clock: Arc<dyn Clock>,
    every: u64,
    /// Per kind: the instant (ns) of the last line, plus 1; 0 when none was written yet.
    last: [AtomicU64; ErrorKind::ALL.len()],
    /// Per kind: failures not logged since the last line.
    suppressed: [AtomicU64; ErrorKind::ALL.len()],
}

impl ErrorLog {
    fn new(clock: Arc<dyn Clock>, every: Duration) -> ErrorLog {
        ErrorLog {
            clock,
            every: u64::try_from(every.as_nanos()).unwrap_or(u64::MAX),
            last: Default::default(),
            suppressed: Default::default(),
        }
    }

    /// `Some(suppressed)` when a failure of `kind` may be logged now (with how many were not
    /// since the last line), else `None` (and this one is counted as suppressed).
    fn admit(&self, kind: ErrorKind) -> Option<u64> {
        let i = kind.index();
        let now = self.clock.now().0.saturating_add(1);
        let last = self.last[i].load(Ordering::Acquire);
        let due = last == 0 || now.saturating_sub(last) >= self.every;
        if due
            && self.last[i]
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return Some(self.suppressed[i].swap(0, Ordering::AcqRel));
        }
        self.suppressed[i].fetch_add(1, Ordering::AcqRel);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate::{ManualClock, Nanos};

    #[test]
    fn each_kind_is_logged_at_most_once_per_interval_with_a_count_of_the_rest() {
        let clock = ManualClock::new(Nanos::from_secs(100));
        let log = ErrorLog::new(Arc::new(clock.clone()), Duration::from_secs(10));
        assert_eq!(log.admit(ErrorKind::Timeout), Some(0));
        for _ in 0..5 {
            assert_eq!(log.admit(ErrorKind::Timeout), None);
        }
        // Another kind has its own budget.
        assert_eq!(log.admit(ErrorKind::Unavailable), Some(0));
        clock.advance(Duration::from_secs(9));
        assert_eq!(log.admit(ErrorKind::Timeout), None);
        clock.advance(Duration::from_secs(1));
        assert_eq!(log.admit(ErrorKind::Timeout), Some(6));
        assert_eq!(log.admit(ErrorKind::Timeout), None);
        clock.advance(Duration::from_secs(10));
        assert_eq!(log.admit(ErrorKind::Timeout), Some(1));
    }

    #[test]
    fn counts_calls_errors_and_the_last_outcome() {
        let clock = Arc::new(ManualClock::new(Nanos::ZERO));
        let health = StoreHealth::new(
            "redis",
            "redis://:***@h:1".into(),
            clock,
            Duration::from_secs(10),
        );
        assert_eq!(health.last_call_ok(), None);
        health.record::<()>(
            health.begin(),
            &Err(StoreError::Timeout(Duration::from_millis(50))),
        );
        health.record::<()>(health.begin(), &Err(StoreError::Unavailable("down".into())));
        assert_eq!(health.last_call_ok(), Some(false));
        health.record::<()>(health.begin(), &Err(StoreError::Refused("refused".into())));
        assert_eq!(health.last_error(), Some(ErrorKind::Refused));
        // A failed call makes the store not ready, whatever its breaker says.
        let status = health.status(Some(BreakerState::Closed));
        assert_eq!(status.last_error, Some("refused"));
        assert!(!status.ready());
        assert_eq!(
            status.not_ready().as_deref(),
            Some("the store failed: its last call failed (refused)")
        );
        // The breaker refusing calls keeps the failure that opened it.
        health.record::<()>(
            health.begin(),
            &Err(StoreError::BreakerOpen { failures: 3 }),
        );
        assert_eq!(health.last_error(), Some(ErrorKind::Refused));
        assert_eq!(health.errors(ErrorKind::Unavailable), 2);
        // A read that succeeds (as a replica answers it) says nothing: still failed.
        let told = health.telling_calls();
        health.record_call(health.begin(), &Ok(()), false);
        assert_eq!(health.last_error(), Some(ErrorKind::Refused));
        assert_eq!(health.telling_calls(), told);
        health.record_call::<()>(
            health.begin(),
            &Err(StoreError::Rejected {
                rejection: Rejection::ReadOnly,
                code: "READONLY",
                message: "You can't write against a read only replica.".into(),
            }),
            false,
        );
        assert_eq!(
            health.last_error(),
            Some(ErrorKind::Rejected(Rejection::ReadOnly))
        );
        assert_eq!(health.errors(ErrorKind::Rejected(Rejection::ReadOnly)), 1);
        assert_eq!(ErrorKind::Rejected(Rejection::ReadOnly).name(), "readonly");
        health.record(health.begin(), &Ok(()));
        assert_eq!(health.last_error(), None);
        // A refusal for one key says nothing of the store: the last outcome stays.
        health.record::<()>(
            health.begin(),
            &Err(StoreError::NotOnStore {
                store: "redis",
                algorithm: "gcra",
                reason: "test",
            }),
        );
        assert_eq!(health.last_call_ok(), Some(true));
        assert_eq!(health.calls(), 8);
        assert_eq!(health.errors(ErrorKind::Timeout), 1);
        assert_eq!(health.errors(ErrorKind::Unavailable), 2);
        assert_eq!(health.errors(ErrorKind::Refused), 1);
        assert_eq!(health.errors(ErrorKind::Other), 1);
        assert!(health.status(Some(BreakerState::Closed)).ready());
        let status = health.status(Some(BreakerState::Open));
        assert!(!status.ready());
        assert_eq!(status.last_call_ok, Some(true));
        assert_eq!(status.breaker, Some("open"));
    }

    #[test]
    fn a_success_from_a_call_begun_before_a_failure_does_not_recover_the_store() {
        let clock = Arc::new(floodgate::ManualClock::new(floodgate::Nanos(0)));
        let health = StoreHealth::new("redis", "redis://h".into(), clock, Duration::from_secs(10));
        // Two calls in flight; the later one fails first, the earlier one ends after it.
        let earlier = health.begin();
        let later = health.begin();
        health.record::<()>(later, &Err(StoreError::Unavailable("readonly".into())));
        health.record(earlier, &Ok(()));
        assert_eq!(health.last_call_ok(), Some(false));
        // A failure of a call begun before a success that wrote says nothing newer.
        let before = health.begin();
        let after = health.begin();
        health.record(after, &Ok(()));
        assert_eq!(health.last_call_ok(), Some(true));
        health.record::<()>(before, &Err(StoreError::Timeout(Duration::from_millis(50))));
        assert_eq!(health.last_call_ok(), Some(true));
        assert_eq!(health.calls(), 4);
    }
}
