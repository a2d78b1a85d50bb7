//! The service's Prometheus metrics, kept in atomics and rendered in the text exposition
//! format on `GET /metrics`.
//!
//! Per-request work is a few relaxed atomic additions; everything the limiters already count
//! (refusals, shadow refusals, fail-opens, the shed amount) is read from them at scrape time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use floodgate::pipeline::{LimiterState, StageSnapshot, StageStats};
use floodgate::store::redis::BreakerState;

use crate::prometheus::{Exposition, Kind};
use crate::store::health::breaker_gauge;
use crate::store::{ErrorKind, StoreHealth};

/// Which API answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/check`
    Check,
    /// `POST /v1/evaluate`
    Evaluate,
    /// `POST /v1/release`
    Release,
    /// `POST /v1/reserve`
    Reserve,
    /// `POST /v1/settle`
    Settle,
    /// `POST /json` (envoyproxy/ratelimit's JSON API)
    Json,
    /// gRPC `ShouldRateLimit`
    Grpc,
}

const ENDPOINTS: [(Endpoint, &str); 7] = [
    (Endpoint::Check, "check"),
    (Endpoint::Evaluate, "evaluate"),
    (Endpoint::Release, "release"),
    (Endpoint::Reserve, "reserve"),
    (Endpoint::Settle, "settle"),
    (Endpoint::Json, "json"),
    (Endpoint::Grpc, "grpc"),
];

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Allowed (or released).
    Allowed,
    /// Refused by a limit.
    Refused,
    /// Bad input (4xx / INVALID_ARGUMENT).
    Invalid,
    /// The store failed and the answer failed open.
    FailedOpen,
    /// The store failed and the answer refused (an Envoy call with `rls.on_store_error:
    /// over_limit`).
    FailedClosed,
    /// The store failed and the call got no decision (gRPC `UNAVAILABLE`, `/json` 503:
    /// `rls.on_store_error: unavailable`).
    Unavailable,
}

const OUTCOMES: [(Outcome, &str); 6] = [
    (Outcome::Allowed, "allowed"),
    (Outcome::Refused, "refused"),
    (Outcome::Invalid, "invalid"),
    (Outcome::FailedOpen, "failed_open"),
    (Outcome::FailedClosed, "failed_closed"),
    (Outcome::Unavailable, "unavailable"),
];

/// The Envoy calls' counts, as [`Metrics::rls_totals`] reads them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RlsTotals {
    /// `ShouldRateLimit` calls on gRPC.
    pub calls: u64,
    /// Those whose store failed (however they were answered).
    pub store_errors: u64,
    /// Those refused as invalid.
    pub invalid: u64,
    /// Configuration reloads that loaded.
    pub reloads_ok: u64,
    /// Configuration reloads refused.
    pub reloads_failed: u64,
    /// Answers turned `OK` by the global shadow mode.
    pub global_shadow_mode: u64,
}

/// Upper bounds of the latency histogram's buckets, in nanoseconds (10 µs to 1 s): whole
/// numbers, so that each shows exactly in any unit it is rendered in.
const BUCKETS: [u64; 12] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
];

/// The service's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    calls: [[AtomicU64; OUTCOMES.len()]; ENDPOINTS.len()],
    store_seconds_buckets: [AtomicU64; 12],
    store_seconds_count: AtomicU64,
    store_nanos_sum: AtomicU64,
    reloads_ok: AtomicU64,
    reloads_failed: AtomicU64,
    rls_shadow_over_limit: AtomicU64,
    rls_global_shadow_mode: AtomicU64,
}

impl Metrics {
    /// Counts one call.
    pub fn call(&self, endpoint: Endpoint, outcome: Outcome) {
        let e = ENDPOINTS
            .iter()
            .position(|(x, _)| *x == endpoint)
            .unwrap_or(0);
        let o = OUTCOMES
            .iter()
            .position(|(x, _)| *x == outcome)
            .unwrap_or(0);
        self.calls[e][o].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts descriptors over a shadow-mode limit of the Envoy rules (answered OK).
    pub fn shadow_over_limit(&self, descriptors: u32) {
        if descriptors > 0 {
            self.rls_shadow_over_limit
                .fetch_add(u64::from(descriptors), Ordering::Relaxed);
        }
    }

    /// Counts an answer turned from `OVER_LIMIT` into `OK` by the global `rls.shadow_mode`.
    pub fn global_shadow_mode(&self) {
        self.rls_global_shadow_mode.fetch_add(1, Ordering::Relaxed);
    }

    /// Records how long a decision spent in the store.
    pub fn store_latency(&self, d: Duration) {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        if let Some(i) = BUCKETS.iter().position(|b| nanos <= *b) {
            self.store_seconds_buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.store_seconds_count.fetch_add(1, Ordering::Relaxed);
        self.store_nanos_sum.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Counts a configuration reload.
    pub fn reload(&self, ok: bool) {
        let c = if ok {
            &self.reloads_ok
        } else {
            &self.reloads_failed
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The store-time histogram: each bucket's upper bound (seconds) with its cumulative
    /// count, the sum of the times (seconds) and the count.
    pub fn store_histogram(&self) -> (Vec<(f64, u64)>, f64, u64) {
        self.store_histogram_in(1e9)
    }

    /// The store-time histogram in a unit of `nanos_per_unit` nanoseconds (1e9: seconds, 1e6:
    /// milliseconds): each bucket's upper bound with its cumulative count, the sum of the
    /// times and the count. Bounds and sum are divided, not multiplied, so that a bound
    /// written in decimals shows as written.
    pub fn store_histogram_in(&self, nanos_per_unit: f64) -> (Vec<(f64, u64)>, f64, u64) {
        let mut cumulative = 0;
        let buckets = BUCKETS
            .iter()
            .enumerate()
            .map(|(i, bound)| {
                cumulative += self.store_seconds_buckets[i].load(Ordering::Relaxed);
                (*bound as f64 / nanos_per_unit, cumulative)
            })
            .collect();
        let count = self.store_seconds_count.load(Ordering::Relaxed);
        let sum = self.store_nanos_sum.load(Ordering::Relaxed) as f64 / nanos_per_unit;
        (buckets, sum, count)
    }

    /// The counts statsd receives under envoyproxy/ratelimit's service names.
    pub fn rls_totals(&self) -> RlsTotals {
        let count = |endpoint: Endpoint, outcomes: &[Outcome]| -> u64 {
            let e = ENDPOINTS
                .iter()
                .position(|(x, _)| *x == endpoint)
                .unwrap_or(0);
            OUTCOMES
                .iter()
                .enumerate()
                .filter(|(_, (o, _))| outcomes.contains(o))
                .map(|(i, _)| self.calls[e][i].load(Ordering::Relaxed))
                .sum()
        };
        let all = OUTCOMES.map(|(o, _)| o);
        let store = [
            Outcome::FailedOpen,
            Outcome::FailedClosed,
            Outcome::Unavailable,
        ];
        RlsTotals {
            calls: count(Endpoint::Grpc, &all),
            store_errors: count(Endpoint::Grpc, &store) + count(Endpoint::Json, &store),
            invalid: count(Endpoint::Grpc, &[Outcome::Invalid])
                + count(Endpoint::Json, &[Outcome::Invalid]),
            reloads_ok: self.reloads_ok.load(Ordering::Relaxed),
            reloads_failed: self.reloads_failed.load(Ordering::Relaxed),
            global_shadow_mode: self.rls_global_shadow_mode.load(Ordering::Relaxed),
        }
    }

    /// Renders every metric in Prometheus' text format; `live` holds what is read from the
    /// limiters at scrape time.
    pub fn render(&self, live: &Live) -> String {
        let mut page = String::with_capacity(4096);
        self.write(&mut Exposition::on(&mut page), live);
        page
    }

    /// Writes every metric to `text` (see [`Metrics::render`]).
    pub fn write(&self, text: &mut Exposition<'_>, live: &Live) {
        self.write_calls(text);
        write_stage_counters(text, live);
        let (buckets, sum, count) = self.store_histogram();
        text.family(
            "floodgate_store_seconds",
            Kind::Histogram,
            "Time a decision spent in its store.",
        )
        .histogram(&[], buckets, sum, count);
        write_in_flight(text, live);
        write_adaptive(text, live);
        write_utilization(text, live);
        if let Some(store) = &live.store {
            store.write(text);
        }
        text.family(
            "floodgate_reloads_total",
            Kind::Counter,
            "Configuration reloads by result.",
        )
        .sample(&[("result", "ok")], self.reloads_ok.load(Ordering::Relaxed))
        .sample(
            &[("result", "failed")],
            self.reloads_failed.load(Ordering::Relaxed),
        );
    }

    /// The calls by endpoint and outcome, and the Envoy rules' shadow-mode counts.
    fn write_calls(&self, text: &mut Exposition<'_>) {
        let mut calls = text.family(
            "floodgate_calls_total",
            Kind::Counter,
            "API calls by endpoint and outcome.",
        );
        for (e, (_, endpoint)) in ENDPOINTS.iter().enumerate() {
            for (o, (_, outcome)) in OUTCOMES.iter().enumerate() {
                let n = self.calls[e][o].load(Ordering::Relaxed);
                calls.sample(&[("endpoint", endpoint), ("outcome", outcome)], n);
            }
        }
        text.family(
            "floodgate_rls_global_shadow_mode_total",
            Kind::Counter,
            "Envoy answers over the limit, answered OK by rls.shadow_mode.",
        )
        .sample(&[], self.rls_global_shadow_mode.load(Ordering::Relaxed));
        text.family(
            "floodgate_rls_shadow_over_limit_total",
            Kind::Counter,
            "Descriptors over a shadow-mode limit of the Envoy rules, answered OK.",
        )
        .sample(&[], self.rls_shadow_over_limit.load(Ordering::Relaxed));
    }
}

/// What every stage counted: decisions, refusals, shadow refusals, and store failures by how
/// they were answered.
fn write_stage_counters(text: &mut Exposition<'_>, live: &Live) {
    let per_stage: [StageCounter; 6] = [
        (
            "floodgate_decisions_total",
            "Requests each limiter decided (those refused by an earlier limiter never reach it).",
            |s| s.decided,
        ),
        (
            "floodgate_refusals_total",
            "Requests refused, by limiter (enforce mode).",
            |s| s.refused,
        ),
        (
            "floodgate_shadow_refusals_total",
            "Requests a shadow-mode limiter would have refused.",
            |s| s.shadow_refused,
        ),
        (
            "floodgate_fail_open_total",
            "Store errors that let the request through.",
            |s| s.fail_open,
        ),
        (
            "floodgate_fail_closed_total",
            "Store errors that refused the request.",
            |s| s.fail_closed,
        ),
        (
            "floodgate_decided_locally_total",
            "Store errors after which the limiter decided on this node's share of its limit.",
            |s| s.decided_locally,
        ),
    ];
    for (name, help, value) in per_stage {
        let mut family = text.family(name, Kind::Counter, help);
        for stage in &live.stages {
            let s = &stage.stats;
            let labels = [
                ("limiter", s.name.as_str()),
                ("kind", s.kind.name()),
                ("mode", stage.mode.name()),
            ];
            family.sample(&labels, value(s));
        }
    }
}

/// Requests holding a place: the fleet's, each adaptive stage's, and the busy workers.
fn write_in_flight(text: &mut Exposition<'_>, live: &Live) {
    let mut in_flight = text.family(
        "floodgate_in_flight",
        Kind::Gauge,
        "Requests holding a place, by limiter (fleet: its non-critical requests; workers: busy workers).",
    );
    for stage in &live.stages {
        if let LimiterState::Fleet {
            in_flight: Some(n), ..
        } = stage.state
        {
            in_flight.sample(&[("limiter", stage.stats.name.as_str())], n);
        }
    }
    for stage in &live.stages {
        if let LimiterState::AdaptiveConcurrency { in_flight: n, .. } = stage.state {
            in_flight.sample(&[("limiter", stage.stats.name.as_str())], n);
        }
    }
    in_flight.sample(&[("limiter", "workers")], live.busy_workers);
}

/// What each adaptive concurrency stage has learned on this node: its limit, and the
/// latencies it compares (the baseline: Vegas's no-load latency or Gradient2's long-term
/// average; the latest sample).
fn write_adaptive(text: &mut Exposition<'_>, live: &Live) {
    let adaptive = || {
        live.stages.iter().filter_map(|stage| match stage.state {
            LimiterState::AdaptiveConcurrency {
                algorithm,
                limit,
                baseline_rtt,
                last_rtt,
                samples,
                ..
            } => Some((
                stage.stats.name.as_str(),
                algorithm,
                limit,
                baseline_rtt,
                last_rtt,
                samples,
            )),
            _ => None,
        })
    };
    let mut limits = text.family(
        "floodgate_adaptive_limit",
        Kind::Gauge,
        "The concurrency limit an adaptive stage has learned on this node, by limiter and algorithm.",
    );
    for (name, algorithm, limit, ..) in adaptive() {
        limits.sample(&[("limiter", name), ("algorithm", algorithm)], limit);
    }
    let mut rtts = text.family(
        "floodgate_adaptive_rtt_seconds",
        Kind::Gauge,
        "The latencies an adaptive stage compares: baseline (Vegas: no-load; Gradient2: long-term average) and the latest sample.",
    );
    for (name, _, _, baseline, last, _) in adaptive() {
        for (estimate, rtt) in [("baseline", baseline), ("last", last)] {
            rtts.sample(
                &[("limiter", name), ("estimate", estimate)],
                rtt.as_secs_f64(),
            );
        }
    }
    let mut samples = text.family(
        "floodgate_adaptive_samples_total",
        Kind::Counter,
        "Latency samples an adaptive stage has learned from.",
    );
    for (name, .., n) in adaptive() {
        samples.sample(&[("limiter", name)], n);
    }
}

/// The utilization shedders' latest sample, shed amount and drop probabilities.
fn write_utilization(text: &mut Exposition<'_>, live: &Live) {
    let mut utilization = text.family(
        "floodgate_utilization",
        Kind::Gauge,
        "The utilization shedder's latest sample (0..1), by limiter.",
    );
    for stage in &live.stages {
        if let LimiterState::Utilization {
            utilization: Some(u),
            ..
        } = stage.state
        {
            utilization.sample(&[("limiter", stage.stats.name.as_str())], u);
        }
    }
    let mut shed = text.family(
        "floodgate_shed_amount",
        Kind::Gauge,
        "The utilization shedder's shed amount, by limiter.",
    );
    for stage in &live.stages {
        if let LimiterState::Utilization { shed_amount, .. } = stage.state {
            shed.sample(&[("limiter", stage.stats.name.as_str())], shed_amount);
        }
    }
    let mut drops = text.family(
        "floodgate_drop_probability",
        Kind::Gauge,
        "Probability of shedding, by limiter and class.",
    );
    for stage in &live.stages {
        if let LimiterState::Utilization {
            drop_probability, ..
        } = &stage.state
        {
            for (class, p) in drop_probability {
                drops.sample(
                    &[
                        ("limiter", stage.stats.name.as_str()),
                        ("class", class.name()),
                    ],
                    p,
                );
            }
        }
    }
}

/// A per-stage counter: its metric name, help text, and where it is read from.
type StageCounter = (&'static str, &'static str, fn(&StageStats) -> u64);

/// What the metrics read from the pipeline at scrape time.
#[derive(Debug, Default)]
pub struct Live {
    /// Every stage's snapshot, in order.
    pub stages: Vec<StageSnapshot>,
    /// Workers busy (the utilization gauge).
    pub busy_workers: u64,
    /// The store's counters and breaker.
    pub store: Option<StoreLive>,
    /// Each stage's mode as the configuration sets it, by stage name (the dashboard marks a
    /// stage switched away from it).
    pub configured_modes: std::collections::BTreeMap<String, floodgate::pipeline::Mode>,
    /// The Rate Limit Quota Service's streams, assignments and busiest buckets.
    pub rlqs: crate::rlqs::QuotasView,
}

/// The store's counters and breaker state, read at scrape time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreLive {
    /// `memory`, `redis` or `redis-cluster`.
    pub kind: &'static str,
    /// Calls made.
    pub calls: u64,
    /// Failed calls, by kind ([`ErrorKind::ALL`]'s order).
    pub errors: [u64; ErrorKind::ALL.len()],
    /// The breaker's state (`None` for the memory store).
    pub breaker: Option<BreakerState>,
    /// Whether the last call succeeded (`None` before the first).
    pub last_call_ok: Option<bool>,
    /// The memory store's bookkeeping (`None` for Redis).
    pub memory: Option<floodgate::store::StoreStats>,
    /// A Redis store's group commit: calls, decisions and batch sizes (`None` for memory).
    pub batches: Option<floodgate::store::redis::BatchStats>,
    /// On a Redis Cluster, each master (`host:port`) and its own breaker's state.
    pub nodes: Vec<(String, BreakerState)>,
    /// On a Redis Cluster, the redirections followed while slots move (`None` otherwise).
    pub redirects: Option<floodgate::store::redis::RedirectStats>,
}

impl StoreLive {
    /// Reads `health` and the breaker's `state`.
    pub fn read(health: &StoreHealth, breaker: Option<BreakerState>) -> StoreLive {
        StoreLive {
            kind: health.kind(),
            calls: health.calls(),
            errors: ErrorKind::ALL.map(|k| health.errors(k)),
            breaker,
            last_call_ok: health.last_call_ok(),
            memory: None,
            batches: None,
            nodes: Vec::new(),
            redirects: None,
        }
    }

    fn write(&self, text: &mut Exposition<'_>) {
        let store = [("store", self.kind)];
        text.family(
            "floodgate_store_calls_total",
            Kind::Counter,
            "Calls to the store (a batch sent together is one).",
        )
        .sample(&store, self.calls);
        let mut errors = text.family(
            "floodgate_store_errors_total",
            Kind::Counter,
            "Failed store calls by kind: timeout, refused (no connection: refused, unknown or unreachable host), auth (credentials refused), protocol (not a Redis answer, a database it lacks), the error the store answered instead of running the call (readonly, oom, misconf, noperm, busy, crossslot, noscript, loading, masterdown, clusterdown, tryagain, error_reply), unavailable (a lost connection, a failover, or the breaker open), other (an operation refused for one key or limit).",
        );
        for (kind, n) in ErrorKind::ALL.iter().zip(self.errors) {
            errors.sample(&[("store", self.kind), ("kind", kind.name())], n);
        }
        let mut last = text.family(
            "floodgate_store_last_call_ok",
            Kind::Gauge,
            "Whether the store's last telling call (one that wrote, or failed) succeeded (1) or failed (0); absent before the first. Reads and refusals that changed nothing do not count: a replica answers them.",
        );
        if let Some(ok) = self.last_call_ok {
            last.sample(&store, u8::from(ok));
        }
        if let Some(m) = &self.memory {
            write_memory(text, self.kind, m);
        }
        if let Some(batches) = &self.batches {
            let mut cumulative = 0;
            let buckets: Vec<(f64, u64)> = (0..11)
                .map(|i| 1u64 << i)
                .map(|bound| {
                    cumulative += batches
                        .sizes
                        .iter()
                        .find(|(at_most, _)| *at_most == bound)
                        .map_or(0, |(_, calls)| *calls);
                    (bound as f64, cumulative)
                })
                .collect();
            text.family(
                "floodgate_store_batch_decisions",
                Kind::Histogram,
                "How many decisions each Redis script call carried (group commit: decisions that waited while a call was in flight go together).",
            )
            .histogram(&store, buckets, batches.decisions as f64, batches.calls);
        }
        if let Some(state) = self.breaker {
            text.family(
                "floodgate_store_breaker_state",
                Kind::Gauge,
                "The store's circuit breaker: 0 closed, 1 open (calls fail at once), 2 half-open (one call probes).",
            )
            .sample(&store, breaker_gauge(state));
        }
        if let Some(r) = &self.redirects {
            write_redirects(text, self.kind, r);
        }
        if !self.nodes.is_empty() {
            let mut nodes = text.family(
                "floodgate_store_node_breaker_state",
                Kind::Gauge,
                "Each Redis Cluster master's own circuit breaker (calls on its slots): 0 closed, 1 open, 2 half-open.",
            );
            for (node, state) in &self.nodes {
                nodes.sample(
                    &[("store", self.kind), ("node", node)],
                    breaker_gauge(*state),
                );
            }
        }
    }
}

/// The Redis Cluster redirections the store followed, by kind.
fn write_redirects(
    text: &mut Exposition<'_>,
    kind: &str,
    r: &floodgate::store::redis::RedirectStats,
) {
    let mut redirects = text.family(
        "floodgate_store_redirects_total",
        Kind::Counter,
        "Redis Cluster redirections followed while slots move, never failures: moved (a slot found on another master), ask (a key of a slot being moved, found on its new master), tryagain (a call waiting out a slot's move), clusterdown (a failover or a loading node waited out), split (a batch of several slots sent request by request, one of them moving).",
    );
    for (redirect, n) in [
        ("moved", r.moved),
        ("ask", r.ask),
        ("tryagain", r.try_again),
        ("clusterdown", r.cluster_down),
        ("split", r.split),
    ] {
        redirects.sample(&[("store", kind), ("kind", redirect)], n);
    }
}

/// The memory store's keys, evictions and refusals of new keys.
fn write_memory(text: &mut Exposition<'_>, kind: &str, m: &floodgate::store::StoreStats) {
    let store = [("store", kind)];
    text.family(
        "floodgate_store_keys",
        Kind::Gauge,
        "Keys the memory store holds now (at most store.max_keys, enforced per shard).",
    )
    .sample(&store, m.keys);
    let mut evictions = text.family(
        "floodgate_store_evictions_total",
        Kind::Counter,
        "Keys the memory store dropped to make room: idle (their state was a fresh key's: lossless) or live (store.overflow: evict_live).",
    );
    for (reason, n) in [("idle", m.evicted_idle), ("live", m.evicted_live)] {
        evictions.sample(&[("store", kind), ("reason", reason)], n);
    }
    text.family(
        "floodgate_store_refused_new_total",
        Kind::Counter,
        "Requests of new keys refused because the memory store was full of live keys (store.overflow: refuse_new).",
    )
    .sample(&store, m.refused_new);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_a_cumulative_histogram() {
        let m = Metrics::default();
        m.call(Endpoint::Check, Outcome::Allowed);
        m.call(Endpoint::Check, Outcome::Allowed);
        m.call(Endpoint::Json, Outcome::Refused);
        m.store_latency(Duration::from_micros(3));
        m.store_latency(Duration::from_millis(3));
        let text = m.render(&Live::default());
        assert!(text.contains("floodgate_calls_total{endpoint=\"check\",outcome=\"allowed\"} 2"));
        assert!(text.contains("floodgate_calls_total{endpoint=\"json\",outcome=\"refused\"} 1"));
        assert!(text.contains("floodgate_store_seconds_bucket{le=\"0.00001\"} 1"));
        assert!(text.contains("floodgate_store_seconds_bucket{le=\"0.005\"} 2"));
        assert!(text.contains("floodgate_store_seconds_count 2"));
    }

    #[test]
    fn renders_the_store_counters_and_breaker() {
        let live = Live {
            store: Some(StoreLive {
                kind: "redis",
                calls: 9,
                errors: [2, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0],
                breaker: Some(BreakerState::Open),
                last_call_ok: Some(false),
                memory: None,
                batches: Some(floodgate::store::redis::BatchStats {
                    calls: 4,
                    decisions: 11,
                    sizes: vec![(1, 1), (2, 1), (4, 1), (8, 1)],
                }),
                nodes: vec![
                    ("10.0.0.1:7000".into(), BreakerState::Open),
                    ("10.0.0.2:7001".into(), BreakerState::Closed),
                ],
                redirects: Some(floodgate::store::redis::RedirectStats {
                    moved: 3,
                    ask: 5,
                    ..Default::default()
                }),
            }),
            ..Live::default()
        };
        let text = Metrics::default().render(&live);
        for line in [
            "floodgate_store_redirects_total{store=\"redis\",kind=\"ask\"} 5",
            "floodgate_store_redirects_total{store=\"redis\",kind=\"split\"} 0",
            "floodgate_store_batch_decisions_bucket{store=\"redis\",le=\"1\"} 1",
            "floodgate_store_batch_decisions_bucket{store=\"redis\",le=\"4\"} 3",
            "floodgate_store_batch_decisions_bucket{store=\"redis\",le=\"1024\"} 4",
            "floodgate_store_batch_decisions_sum{store=\"redis\"} 11",
            "floodgate_store_batch_decisions_count{store=\"redis\"} 4",
            "floodgate_store_node_breaker_state{store=\"redis\",node=\"10.0.0.1:7000\"} 1",
            "floodgate_store_node_breaker_state{store=\"redis\",node=\"10.0.0.2:7001\"} 0",
            "floodgate_store_calls_total{store=\"redis\"} 9",
            "floodgate_store_errors_total{store=\"redis\",kind=\"timeout\"} 2",
            "floodgate_store_errors_total{store=\"redis\",kind=\"refused\"} 4",
            "floodgate_store_errors_total{store=\"redis\",kind=\"auth\"} 1",
            "floodgate_store_errors_total{store=\"redis\",kind=\"protocol\"} 0",
            "floodgate_store_errors_total{store=\"redis\",kind=\"unavailable\"} 3",
            "floodgate_store_errors_total{store=\"redis\",kind=\"other\"} 0",
            "floodgate_store_breaker_state{store=\"redis\"} 1",
            "floodgate_store_last_call_ok{store=\"redis\"} 0",
            "floodgate_store_errors_total{store=\"redis\",kind=\"readonly\"} 0",
            "floodgate_store_errors_total{store=\"redis\",kind=\"oom\"} 0",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
    }
}
