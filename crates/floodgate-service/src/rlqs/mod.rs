//! The Rate Limit Quota Service (RLQS, `envoy.service.rate_limit_quota.v3`): global limits that
//! Envoy enforces itself. Each Envoy reports, per quota bucket, how many requests it let
//! through and refused; Floodgate answers with an assignment per bucket (a token bucket, or
//! allow or deny all) that the Envoy enforces locally until the assignment's time to live
//! passes.
//!
//! **Which limit.** A report's domain names a rate-limit domain (from files, directories or
//! xDS, as for `ShouldRateLimit`); the bucket's pairs, in key order, are a descriptor's entries,
//! matched by the same rules ([`crate::descriptors::RuleSet::lookup`]). So `key: name` at 100
//! per second gives every bucket `{name: X}` its own global 100 per second, shared by every
//! Envoy reporting it. An `unlimited` descriptor is allow-all, `requests_per_unit: 0` deny-all,
//! and a bucket no descriptor matches gets [`Settings::unmatched`] (allow-all by default).
//!
//! **Shares**, in two levels ([`ledger`]): a node sums up its streams' demands on a bucket in a
//! [`pool::Pool`] and claims the bucket's limit at the store on behalf of all of them
//! ([`floodgate::quota`]), then divides its grant among them. The division is max-min fair
//! across every stream of every node, a margin for random arrivals on each demand, half the
//! headroom of a limit not fully wanted kept for newcomers; the grants in force never sum to
//! more than the limit. See [`session`] for what a stream does on each report, each tick and
//! its end.
//!
//! **What Envoy really sends** (its filter's client, read from its source; [`session`] builds to
//! it): one stream per domain, the domain in every message; a bucket's first report, sent at
//! its first request with that request counted and `time_elapsed` 0, subscribes it; then
//! every bucket, every 5 seconds whatever the configured interval (changes to Envoy make it
//! configurable and sub-second; gRPC's proxyless clients choose their own), even with nothing
//! to report; a bucket forgotten only on an abandon action. A report is read over its own
//! `time_elapsed`, whatever the interval (at least 100 ms); a first report (`time_elapsed` 0)
//! counts its one request over [`Settings::reporting_interval`].

pub mod assignment;
pub mod envoy_model;
pub mod ledger;
pub mod metrics;
pub mod pool;
pub mod session;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use assignment::Assigned;
pub use ledger::{BucketLoad, BucketTerms, Ledger};
pub use session::{Session, SessionError};

/// What a bucket's requests are held to, globally.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// No limit: every request passes.
    Unlimited,
    /// `requests` per `unit` over every client of the bucket (0: every request is refused).
    PerUnit {
        /// Requests per unit.
        requests: u64,
        /// The unit.
        unit: Duration,
    },
}

/// How the service assigns and forgets buckets.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// How long an assignment holds at the client (default 15 s: three of Envoy's reporting
    /// intervals). Every report of a bucket renews it.
    pub assignment_ttl: Duration,
    /// How often Envoy reports (5 s, its filter's fixed interval): a bucket's first report
    /// (`time_elapsed` 0, its first request) is read as covering this much. Other reports are
    /// read over their own `time_elapsed`.
    pub reporting_interval: Duration,
    /// A claimant whose reports stop for this long gives its share back (default 15 s), as one
    /// whose stream closes does at once.
    pub unreported_after: Duration,
    /// A bucket whose reports say no request for this long is abandoned: the client forgets
    /// it, and its share goes back (default 60 s).
    pub abandon_idle_after: Duration,
    /// What a bucket no descriptor matches is held to (default: no limit).
    pub unmatched: Limit,
    /// The most streams open at once on this node (default 10,000); one more is refused with
    /// `RESOURCE_EXHAUSTED`.
    pub max_streams: usize,
    /// The most buckets one stream may subscribe to (default 1,000).
    pub max_buckets_per_stream: usize,
    /// The most pairs in one bucket's identifier (default 16).
    pub max_pairs: usize,
    /// The longest key or value of a pair, in bytes (default 256).
    pub max_pair_bytes: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings::from(&crate::config::RlqsConfig::default())
    }
}

impl From<&crate::config::RlqsConfig> for Settings {
    /// The settings a configuration's `rlqs` section stands for (once validated).
    fn from(config: &crate::config::RlqsConfig) -> Settings {
        let unmatched = match (&config.unmatched, config.unmatched_unit()) {
            (Some(limit), Some(unit)) => Limit::PerUnit {
                requests: limit.requests_per_unit,
                unit,
            },
            _ => Limit::Unlimited,
        };
        Settings {
            assignment_ttl: config.assignment_ttl.0,
            reporting_interval: Duration::from_secs(5),
            unreported_after: config.unreported_after.0,
            abandon_idle_after: config.abandon_idle_after.0,
            unmatched,
            max_streams: config.max_streams,
            max_buckets_per_stream: config.max_buckets_per_stream,
            max_pairs: config.max_pairs,
            max_pair_bytes: config.max_pair_bytes,
        }
    }
}

/// The service's side of this node's RLQS streams: the ledger of claims they share, and the
/// names of their claims: the node's random name and the stream's number, 32 hex digits (so
/// that the claims of two nodes sharing a store never collide, and names order the same in
/// Rust and in Redis's Lua whatever the server's locale).
#[derive(Debug)]
pub struct Quotas {
    ledger: Arc<Ledger>,
    node: u64,
    streams: AtomicU64,
    counters: metrics::QuotaCounters,
}

impl Quotas {
    /// The streams of a node, claiming on `ledger`.
    pub fn new(ledger: Ledger) -> Quotas {
        Quotas {
            ledger: Arc::new(ledger),
            node: rand::random::<u64>(),
            streams: AtomicU64::new(0),
            counters: metrics::QuotaCounters::default(),
        }
    }

    /// A new stream's session; `None` when `max_streams` are open already.
    pub fn session(&self, max_streams: usize) -> Option<Session> {
        if self.counters.open() >= max_streams as u64 {
            return None;
        }
        self.counters.opened();
        let n = self.streams.fetch_add(1, Ordering::Relaxed);
        Some(Session::new(
            self.ledger.clone(),
            format!("{:016x}{n:016x}", self.node),
        ))
    }

    /// The claims every stream shares.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// What `/metrics` shows of the streams.
    pub fn counters(&self) -> &metrics::QuotaCounters {
        &self.counters
    }

    /// What `/metrics` and the dashboard show: the streams, the assignments sent, the store's failures and
    /// the [`metrics::BUSIEST`] buckets by demand.
    pub fn view(&self) -> QuotasView {
        QuotasView {
            streams: self.counters.open(),
            opened: self.counters.opened_total(),
            buckets: self.ledger.buckets() as u64,
            sent: self.counters.sent_by_strategy(),
            store_steps: self.ledger.steps(),
            store_failures: self.ledger.failures(),
            shared: self.ledger.is_shared(),
            busiest: self.ledger.busiest(metrics::BUSIEST),
        }
    }
}

/// The Rate Limit Quota Service at one instant, as `/metrics` and the dashboard show it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct QuotasView {
    /// Streams open on this node.
    pub streams: u64,
    /// Streams opened on this node since start.
    pub opened: u64,
    /// Buckets this node's streams claim (or hold grants on).
    pub buckets: u64,
    /// Bucket actions sent since start, by strategy (`token_bucket`, `deny_all`,
    /// `allow_all`, and `abandon`).
    pub sent: Vec<(&'static str, u64)>,
    /// This node's steps on the nodes' claims since start, failed ones included.
    pub store_steps: u64,
    /// Steps on the claims the store failed since start.
    pub store_failures: u64,
    /// Whether the claims are shared with other nodes through Redis.
    pub shared: bool,
    /// The busiest buckets, by demand.
    pub busiest: Vec<ledger::BucketLoad>,
}

#[cfg(test)]
mod fleet_tests;
