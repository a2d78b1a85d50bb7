//! Envoy's RLQS filter as a model, for simulations and tests: one Envoy enforcing one quota
//! bucket, on a stream to a [`Session`], as Envoy's filter client does (read from its source).
//!
//! - **Subscribing.** The bucket's first request is let through (the filter's default before
//!   any assignment, [`Enforced::Unassigned`]) and counted, and the bucket's first report is
//!   sent at once with `time_elapsed` 0.
//! - **Reporting.** Then every 5 s on the Envoy's phase ([`Envoy::report_if_due`]), whatever
//!   the configured interval, even with nothing to report: the requests allowed and denied
//!   since the last report, `time_elapsed` in whole seconds (rounded down). The counters start
//!   again at each report, sent or not (a report while the stream is down is lost).
//! - **Assignments.** Applied as they arrive: a token bucket whose `max_tokens` and
//!   `tokens_per_fill` repeat the one enforced keeps its tokens; any other starts full
//!   ([`EnvoyBucket`]). `ALLOW_ALL` and `DENY_ALL` are blanket rules; an abandon action forgets
//!   the bucket (its next request subscribes again). Each assignment holds for its time to
//!   live (whole seconds) from when it arrives; past it the filter falls back to deny-all
//!   ([`Enforced::Expired`]), until the next assignment.
//! - **The stream.** The server's tick ([`Envoy::tick`], every second on the gRPC stream) may
//!   send changed assignments. A stream that breaks or closes ([`Envoy::disconnect`]) leaves
//!   the Envoy enforcing what it holds until that expires; a new stream
//!   ([`Envoy::reconnect`]) opens with a report of the bucket.
//!
//! **Units.** Time is milliseconds since the simulation's start (`now_ms`, handed to the
//! session as [`Nanos`]); [`EnvoyBucket`] counts seconds as `f64`; rates are requests per
//! second.
//!
//! **Steps at once.** The model is synchronous: it completes each of the session's steps on the
//! spot, which a session on [`super::Ledger::in_memory`] allows (its steps never wait). A step
//! that would wait (a ledger in Redis) panics.

use floodgate::Nanos;

use super::{Session, SessionError, Settings};
use crate::descriptors::RuleSet;
use crate::proto::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy as Rule};
use crate::proto::envoy::r#type::v3::TokenBucket;
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use crate::proto::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaUsageReports};

/// Envoy's reporting interval, in milliseconds: fixed in its filter, whatever is configured.
pub const REPORT_EVERY_MS: u64 = 5_000;

/// One assignment's token bucket at one Envoy: it starts full, fills continuously at
/// `tokens_per_fill / fill_interval` (whole seconds) up to `max_tokens`, and a request takes
/// one token.
#[derive(Clone, Debug, PartialEq)]
pub struct EnvoyBucket {
    /// The assignment's `max_tokens` and `tokens_per_fill`: Envoy keeps a bucket, tokens and
    /// all, when a new assignment repeats them.
    shape: (u32, u32),
    tokens: f64,
    per_second: f64,
    /// When the tokens were last counted, in seconds.
    at: f64,
}

impl EnvoyBucket {
    /// The bucket `assigned` starts at `at` (seconds): full.
    pub fn start(assigned: &TokenBucket, at: f64) -> EnvoyBucket {
        let per_fill = assigned.tokens_per_fill.unwrap_or_default();
        let interval = assigned.fill_interval.as_ref().map_or(0, |d| d.seconds);
        EnvoyBucket {
            shape: (assigned.max_tokens, per_fill),
            tokens: f64::from(assigned.max_tokens),
            per_second: f64::from(per_fill) / interval as f64,
            at,
        }
    }

    /// Its burst: `max_tokens`.
    pub fn burst(&self) -> u64 {
        u64::from(self.shape.0)
    }

    /// Its fill rate, tokens per second: `tokens_per_fill / fill_interval`.
    pub fn per_second(&self) -> f64 {
        self.per_second
    }

    /// One request at `at` (seconds): whether it takes a token.
    pub fn admit(&mut self, at: f64) -> bool {
        let max = f64::from(self.shape.0);
        self.tokens = (self.tokens + (at - self.at) * self.per_second).min(max);
        self.at = at;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// What an Envoy enforces for the bucket.
#[derive(Clone, Debug, PartialEq)]
pub enum Enforced {
    /// No assignment yet: the filter's default, allow all.
    Unassigned,
    /// The assignment's time to live passed: the fallback, deny all.
    Expired,
    /// `blanket_rule: ALLOW_ALL`.
    AllowAll,
    /// `blanket_rule: DENY_ALL`.
    DenyAll,
    /// A token bucket.
    Tokens(EnvoyBucket),
}

/// What one request met at an Envoy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Admission {
    /// Whether it was let through.
    pub admitted: bool,
    /// Whether it was let through before any assignment (the filter's default).
    pub unassigned: bool,
    /// The bursts of the token buckets started (full) by the answer to the report it set off
    /// (its bucket's first), 0 if none.
    pub started: u64,
}

/// One Envoy enforcing one bucket: its stream, what it enforces, its counters since its last
/// report (see the [module documentation](self)).
#[derive(Debug)]
pub struct Envoy {
    domain: String,
    bucket: BucketId,
    session: Option<Session>,
    enforced: Enforced,
    /// When the assignment enforced expires, in milliseconds.
    expires_ms: u64,
    subscribed: bool,
    allowed: u64,
    denied: u64,
    reported_ms: u64,
    /// Its report phase within the 5 s interval, in milliseconds.
    phase_ms: u64,
}

impl Envoy {
    /// An Envoy on the stream `session`, enforcing `bucket` of `domain`, reporting every 5 s
    /// at `phase_ms` past each multiple of 5 s (taken modulo 5 s).
    pub fn new(session: Session, domain: &str, bucket: BucketId, phase_ms: u64) -> Envoy {
        Envoy {
            domain: domain.to_string(),
            bucket,
            session: Some(session),
            enforced: Enforced::Unassigned,
            expires_ms: 0,
            subscribed: false,
            allowed: 0,
            denied: 0,
            reported_ms: 0,
            phase_ms: phase_ms % REPORT_EVERY_MS,
        }
    }

    /// One request at `now_ms`: enforced, counted, and, if it is the bucket's first, its first
    /// report sent.
    pub fn request(
        &mut self,
        now_ms: u64,
        rules: &RuleSet,
        settings: &Settings,
    ) -> Result<Admission, SessionError> {
        let unassigned = self.enforced == Enforced::Unassigned;
        let admitted = self.admit(now_ms);
        if admitted {
            self.allowed += 1;
        } else {
            self.denied += 1;
        }
        let mut started = 0;
        if !self.subscribed {
            self.subscribed = true;
            started = self.send(true, now_ms, rules, settings)?;
        }
        Ok(Admission {
            admitted,
            unassigned: admitted && unassigned,
            started,
        })
    }

    /// The periodic report, if `now_ms` is on the Envoy's phase and the bucket is subscribed;
    /// returns the bursts of the token buckets its answer started.
    pub fn report_if_due(
        &mut self,
        now_ms: u64,
        rules: &RuleSet,
        settings: &Settings,
    ) -> Result<u64, SessionError> {
        if self.subscribed && now_ms % REPORT_EVERY_MS == self.phase_ms && now_ms > self.reported_ms
        {
            return self.send(false, now_ms, rules, settings);
        }
        Ok(0)
    }

    /// The server's tick on the stream at `now_ms` (none while the stream is down): applies
    /// the assignments that changed; returns the bursts of the token buckets they started.
    pub fn tick(&mut self, now_ms: u64, settings: &Settings) -> u64 {
        let Some(session) = self.session.as_mut() else {
            return 0;
        };
        let actions = at_once(session.tick(settings, nanos(now_ms)));
        self.apply(actions, now_ms)
    }

    /// The stream breaks or closes at `now_ms`: the session ends (its claims leave). The
    /// Envoy keeps enforcing what it holds until that expires.
    pub fn disconnect(&mut self, now_ms: u64, settings: &Settings) {
        if let Some(session) = self.session.take() {
            at_once(session.close(settings, nanos(now_ms)));
        }
    }

    /// A new stream, `session`, at `now_ms`: its first message reports the bucket if the
    /// Envoy holds it; returns the bursts of the token buckets the answer started.
    pub fn reconnect(
        &mut self,
        session: Session,
        now_ms: u64,
        rules: &RuleSet,
        settings: &Settings,
    ) -> Result<u64, SessionError> {
        self.disconnect(now_ms, settings);
        self.session = Some(session);
        if !self.subscribed {
            return Ok(0);
        }
        self.send(false, now_ms, rules, settings)
    }

    /// Whether its stream is open.
    pub fn connected(&self) -> bool {
        self.session.is_some()
    }

    /// What it enforces at `now_ms` (an assignment past its time to live is
    /// [`Enforced::Expired`]).
    pub fn enforced(&mut self, now_ms: u64) -> &Enforced {
        if now_ms >= self.expires_ms && self.enforced != Enforced::Unassigned {
            self.enforced = Enforced::Expired;
        }
        &self.enforced
    }

    /// The rate its assignment in force at `now_ms` allows, requests per second: a token
    /// bucket's fill rate, 0 for deny-all and expired; `None` with no limit (no assignment
    /// yet, or allow-all).
    pub fn assigned_per_second(&self, now_ms: u64) -> Option<f64> {
        match &self.enforced {
            Enforced::Unassigned | Enforced::AllowAll => None,
            _ if now_ms >= self.expires_ms => Some(0.0),
            Enforced::Expired | Enforced::DenyAll => Some(0.0),
            Enforced::Tokens(bucket) => Some(bucket.per_second()),
        }
    }

    /// The burst it holds now: its token bucket's, 0 without one.
    pub fn burst(&self) -> u64 {
        match &self.enforced {
            Enforced::Tokens(bucket) => bucket.burst(),
            _ => 0,
        }
    }

    /// One request at `now_ms`: whether it is admitted.
    fn admit(&mut self, now_ms: u64) -> bool {
        self.enforced(now_ms);
        match &mut self.enforced {
            Enforced::Unassigned | Enforced::AllowAll => true,
            Enforced::Expired | Enforced::DenyAll => false,
            Enforced::Tokens(bucket) => bucket.admit(now_ms as f64 / 1_000.0),
        }
    }

    /// Applies the server's actions as Envoy's filter does; returns the bursts of the token
    /// buckets started (full) by them.
    fn apply(&mut self, actions: Vec<BucketAction>, now_ms: u64) -> u64 {
        let mut started = 0;
        for action in actions {
            let Some(Action::QuotaAssignmentAction(a)) = action.bucket_action else {
                self.enforced = Enforced::Unassigned;
                self.subscribed = false;
                continue;
            };
            let ttl = a.assignment_time_to_live.map_or(0, |d| d.seconds) as u64;
            self.expires_ms = now_ms + ttl * 1_000;
            self.enforced = match a.rate_limit_strategy.and_then(|s| s.strategy) {
                Some(Rule::BlanketRule(r)) if r == BlanketRule::DenyAll as i32 => Enforced::DenyAll,
                Some(Rule::BlanketRule(_)) => Enforced::AllowAll,
                Some(Rule::TokenBucket(tb)) => {
                    let bucket = EnvoyBucket::start(&tb, now_ms as f64 / 1_000.0);
                    match &self.enforced {
                        Enforced::Tokens(held) if held.shape == bucket.shape => {
                            self.enforced.clone()
                        }
                        _ => {
                            started += bucket.burst();
                            Enforced::Tokens(bucket)
                        }
                    }
                }
                other => panic!("a strategy Envoy does not apply: {other:?}"),
            };
        }
        started
    }

    /// Builds its report (its counters start again, sent or not, as Envoy's do) and sends it
    /// on its stream if it has one; returns the bursts of the token buckets its answer
    /// started.
    fn send(
        &mut self,
        first: bool,
        now_ms: u64,
        rules: &RuleSet,
        settings: &Settings,
    ) -> Result<u64, SessionError> {
        let report = self.report(now_ms, first);
        let Some(session) = self.session.as_mut() else {
            return Ok(0);
        };
        let answered = at_once(session.report(report, rules, settings, nanos(now_ms)))?;
        Ok(self.apply(answered, now_ms))
    }

    /// Its report of the bucket, as Envoy sends it.
    fn report(&mut self, now_ms: u64, first: bool) -> RateLimitQuotaUsageReports {
        let elapsed = if first {
            0
        } else {
            (now_ms - self.reported_ms) / 1_000
        };
        let usage = BucketQuotaUsage {
            bucket_id: Some(self.bucket.clone()),
            time_elapsed: Some(prost_types::Duration {
                seconds: elapsed as i64,
                nanos: 0,
            }),
            num_requests_allowed: std::mem::take(&mut self.allowed),
            num_requests_denied: std::mem::take(&mut self.denied),
        };
        self.reported_ms = now_ms;
        RateLimitQuotaUsageReports {
            domain: self.domain.clone(),
            bucket_quota_usages: vec![usage],
        }
    }
}

/// `now_ms` as the session's time.
fn nanos(now_ms: u64) -> Nanos {
    Nanos(now_ms * 1_000_000)
}

/// A session's step, completed on the spot: on a memory ledger no step waits.
pub(crate) fn at_once<T>(step: impl std::future::Future<Output = T>) -> T {
    use futures_util::FutureExt;
    step.now_or_never()
        .expect("a memory ledger's step does not wait (the Envoy model needs one)")
}
