//! The live dashboard's data: `GET /v1/dashboard` answers what `GET /` draws.
//!
//! Once a second (and when asked, if the latest point is older), the service reads the same
//! [`Live`] snapshot `/metrics` renders — every stage's counters and state, the store's
//! counters and breaker — and keeps the change since the previous reading as a point: per
//! stage, decisions, refusals, shadow would-refusals, fail-opens, fail-closes and local
//! decisions per second; the fleet's in-flight count; the utilization shedder's utilization,
//! shed amount and drop probability per class; the store's calls and errors per second. The
//! last [`HISTORY`] points are kept (five minutes), so a page opened now shows the last
//! minutes at once, then asks only for the points after the last one it has (`?since=SEQ`).
//!
//! The Rate Limit Quota Service's streams and assignments sent per second are kept with each
//! point; its busiest buckets (demand, grants in force, limit, claimants) are read as of the
//! request, named as `/metrics` names them ([`crate::rlqs::Ledger::hidden`]).
//!
//! The heaviest keys come from [`heavy_keys`], over the last one to two minutes (the sketch
//! starts afresh every minute and the previous minute's is kept beside it), read once per
//! point so that a page's request never sorts the sketches. Keys may be
//! personal or secret (an API key as a descriptor value): they are shown in full only to a
//! caller with the admin token, and otherwise as a short keyed hash that tells keys apart
//! without revealing them.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::Duration;

use floodgate::limiter::LimiterKind;
use floodgate::pipeline::{LimiterState, StageStats};
use floodgate::pipeline::{Mode, OnStoreError};
use floodgate::Nanos;
use serde::Serialize;
use serde_json::{json, Value};

use crate::metrics::{Live, StoreLive};

pub(crate) mod heavy_keys;

use heavy_keys::{Counted, HeavyKeys};

/// Points kept: five minutes at one a second.
pub(crate) const HISTORY: usize = 300;

/// How often the service takes a point.
pub(crate) const INTERVAL: Duration = Duration::from_secs(1);

/// How long one heavy-keys sketch counts before it is set aside (and the one before dropped).
pub(crate) const KEYS_WINDOW: Duration = Duration::from_secs(60);

/// Counters kept for the heavy keys, in all (see [`HeavyKeys`]).
pub(crate) const DEFAULT_HEAVY_KEYS: usize = 256;

/// The most counters `serve --heavy-keys` takes (about 700 MB at most, in the two windows).
pub(crate) const MAX_HEAVY_KEYS: usize = 1_000_000;

/// The heavy keys shown.
const SHOWN_KEYS: usize = 20;

/// What the running configuration serves, for `GET /`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overview {
    /// The pipeline's stages, in the order they run: name, kind of limiter, and current mode
    /// (which the admin API may have switched since the config was loaded).
    pub limiters: Vec<(String, LimiterKind, Mode)>,
    /// The named limits of `POST /v1/check`, sorted by name, each with its algorithm's name.
    pub limits: Vec<(String, &'static str)>,
    /// The Envoy RLS domains, sorted.
    pub domains: Vec<String>,
    /// The stages whose mode the admin API switched away from the configuration's, each with
    /// the configuration's mode.
    pub switched: BTreeMap<String, Mode>,
    /// What each stage with a scope applies to and counts by
    /// ([`Stage::describe_scope`](floodgate::pipeline::Stage::describe_scope)), by name.
    pub scopes: BTreeMap<String, String>,
}

/// One stage at one point: rates per second since the previous point, and gauges.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(crate) struct StagePoint {
    /// Requests the stage decided, per second.
    pub decisions: f64,
    /// Requests it refused (enforce mode), per second.
    pub refusals: f64,
    /// Requests it would have refused (shadow mode), per second.
    pub shadow_refusals: f64,
    /// Store errors it let through, per second.
    pub fail_open: f64,
    /// Store errors it refused, per second.
    pub fail_closed: f64,
    /// Store errors after which it decided on this node's share, per second.
    pub decided_locally: f64,
    /// Fleet: non-critical requests in flight; adaptive concurrency: requests in flight on
    /// this node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<u64>,
    /// Adaptive concurrency: the learned limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<f64>,
    /// Adaptive concurrency: the baseline latency (Vegas: no-load; Gradient2: long-term
    /// average), in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_rtt_ms: Option<f64>,
    /// Adaptive concurrency: the latest latency sample, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_rtt_ms: Option<f64>,
    /// Utilization shedder: the latest utilization sample (0..1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub utilization: Option<f64>,
    /// Utilization shedder: the shed amount.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shed_amount: Option<f64>,
    /// Utilization shedder: the drop probability of `test`, `get`, `post`, `critical`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drop_probability: Option<[f64; 4]>,
}

/// One point of the history.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Point {
    /// Its number: one more than the previous point's.
    pub seq: u64,
    /// When it was taken: seconds since the Unix epoch, by the service's monotonic clock
    /// (anchored to the wall clock when the service started).
    pub t: f64,
    /// Each stage's values, by name.
    pub stages: HashMap<String, StagePoint>,
    /// The store's calls per second.
    pub store_calls: f64,
    /// The store's failed calls per second.
    pub store_errors: f64,
    /// Rate Limit Quota Service streams open on this node.
    pub rlqs_streams: u64,
    /// Rate Limit Quota Service bucket actions sent, per second.
    pub rlqs_assignments: f64,
}

/// What the previous reading counted.
#[derive(Debug, Default)]
struct Previous {
    at: Option<Nanos>,
    stages: HashMap<String, StageStats>,
    store: Option<(u64, u64)>,
    /// RLQS bucket actions sent, in all.
    rlqs_sent: Option<u64>,
}

#[derive(Debug, Default)]
struct History {
    points: VecDeque<Point>,
    previous: Previous,
    next_seq: u64,
    /// When the current heavy-keys sketch started.
    keys_since: Option<Nanos>,
    /// The heaviest keys as of the latest point (in full), and the requests counted.
    keys: (Vec<Counted>, u64),
}

/// The dashboard's state: the history of points and the heavy-keys sketches.
#[derive(Debug)]
pub(crate) struct Dashboard {
    history: Mutex<History>,
    /// The sketch counting now, and the previous window's.
    keys: [HeavyKeys; 2],
    /// Which of `keys` counts now (0 or 1).
    current: std::sync::atomic::AtomicUsize,
    /// Keys the hashes shown instead of keys (random per process).
    hash_key: foldhash::quality::RandomState,
    /// Tells this process's points from another's (a restart, a replica behind the same
    /// address): random.
    instance: u64,
}

impl Dashboard {
    /// A dashboard keeping `heavy_keys` counters per window (0: no heavy keys).
    pub(crate) fn new(heavy_keys: usize) -> Dashboard {
        Dashboard {
            history: Mutex::new(History::default()),
            keys: [HeavyKeys::new(heavy_keys), HeavyKeys::new(heavy_keys)],
            current: std::sync::atomic::AtomicUsize::new(0),
            hash_key: Default::default(),
            instance: rand::random(),
        }
    }

    /// Counts one request of the key `write` puts in a buffer (see [`HeavyKeys::add_with`]).
    pub(crate) fn count_key(&self, write: impl FnOnce(&mut String)) {
        let current = self.current.load(std::sync::atomic::Ordering::Relaxed) & 1;
        self.keys[current].add_with(write);
    }

    fn history(&self) -> std::sync::MutexGuard<'_, History> {
        // The history is replaced point by point; a poisoned lock is used as is.
        self.history
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether the latest point is at least [`INTERVAL`] old at `now` (or there is none).
    pub(crate) fn due(&self, now: Nanos) -> bool {
        let history = self.history();
        history
            .previous
            .at
            .is_none_or(|at| now.saturating_since(at) >= INTERVAL)
    }

    /// Takes a point from `live` at `now` (the service's clock), turns the heavy-keys window
    /// when it is due, and reads the heaviest keys. Does nothing (`false`) if another point
    /// was taken less than [`INTERVAL`] before `now`: the sampler and a page's request may both
    /// have found a point due, and a second point a moment later would divide by nothing.
    pub(crate) fn record(&self, live: &Live, now: Nanos) -> bool {
        let mut history = self.history();
        if history
            .previous
            .at
            .is_some_and(|at| now.saturating_since(at) < INTERVAL)
        {
            return false;
        }
        self.turn_keys_window(&mut history.keys_since, now);
        let previous = &history.previous;
        let elapsed = previous.at.map(|at| now.saturating_since(at).as_secs_f64());
        // A reload's stages go on counting where the same stages of the previous configuration
        // left off; a stage new to it starts at 0 (and one that changed kind starts afresh,
        // below its old count, which counts as nothing).
        let rate = |now: u64, before: Option<u64>| match (elapsed, before) {
            (Some(dt), Some(b)) if dt > 0.0 => now.saturating_sub(b) as f64 / dt,
            (Some(dt), None) if dt > 0.0 => now as f64 / dt,
            _ => 0.0,
        };
        let mut stages = HashMap::with_capacity(live.stages.len());
        for stage in &live.stages {
            let s = &stage.stats;
            let before = previous.stages.get(s.name.as_str());
            let mut point = StagePoint {
                decisions: rate(s.decided, before.map(|b| b.decided)),
                refusals: rate(s.refused, before.map(|b| b.refused)),
                shadow_refusals: rate(s.shadow_refused, before.map(|b| b.shadow_refused)),
                fail_open: rate(s.fail_open, before.map(|b| b.fail_open)),
                fail_closed: rate(s.fail_closed, before.map(|b| b.fail_closed)),
                decided_locally: rate(s.decided_locally, before.map(|b| b.decided_locally)),
                ..StagePoint::default()
            };
            point.add_state(&stage.state);
            stages.insert(s.name.as_str().to_string(), point);
        }
        let (store_calls, store_errors) = match &live.store {
            Some(store) => {
                let errors = store.errors.iter().sum::<u64>();
                let before = previous.store;
                (
                    rate(store.calls, before.map(|b| b.0)),
                    rate(errors, before.map(|b| b.1)),
                )
            }
            None => (0.0, 0.0),
        };
        let rlqs_sent: u64 = live.rlqs.sent.iter().map(|(_, n)| n).sum();
        let rlqs_assignments = rate(rlqs_sent, previous.rlqs_sent);
        let seq = history.next_seq;
        history.next_seq += 1;
        history.previous = Previous {
            at: Some(now),
            stages: live
                .stages
                .iter()
                .map(|s| (s.stats.name.as_str().to_string(), s.stats.clone()))
                .collect(),
            store: live
                .store
                .as_ref()
                .map(|s| (s.calls, s.errors.iter().sum())),
            rlqs_sent: Some(rlqs_sent),
        };
        history.keys = self.merged_keys();
        if history.points.len() == HISTORY {
            history.points.pop_front();
        }
        history.points.push_back(Point {
            seq,
            t: now.as_secs_f64(),
            stages,
            store_calls,
            store_errors,
            rlqs_streams: live.rlqs.streams,
            rlqs_assignments,
        });
        true
    }

    /// Starts a new heavy-keys window when the current one (begun at `since`) is
    /// [`KEYS_WINDOW`] old at `now`: the older of the two is cleared and takes the counts.
    fn turn_keys_window(&self, since: &mut Option<Nanos>, now: Nanos) {
        let since = since.get_or_insert(now);
        if now.saturating_since(*since) >= KEYS_WINDOW {
            *since = now;
            let old = self.current.load(std::sync::atomic::Ordering::Relaxed) & 1;
            self.keys[1 - old].clear();
            self.current
                .store(1 - old, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The points after `since` (all kept points when `None`).
    pub(crate) fn points_after(&self, since: Option<u64>) -> Vec<Point> {
        self.history()
            .points
            .iter()
            .filter(|p| since.is_none_or(|s| p.seq > s))
            .cloned()
            .collect()
    }

    /// The heaviest keys of the current and previous windows: the candidates are each
    /// window's largest counters, and each candidate's count is its estimate in both windows
    /// (a window that does not hold it adds its smallest counter, to count and error alike), so
    /// a count stays at least the true one.
    fn merged_keys(&self) -> (Vec<Counted>, u64) {
        let mut candidates: Vec<String> = Vec::new();
        let mut total = 0;
        for sketch in &self.keys {
            let (top, counted) = sketch.top(SHOWN_KEYS);
            total += counted;
            candidates.extend(top.into_iter().map(|c| c.key));
        }
        candidates.sort_unstable();
        candidates.dedup();
        let mut keys: Vec<Counted> = candidates
            .into_iter()
            .map(|key| {
                let (mut count, mut error) = (0, 0);
                for sketch in &self.keys {
                    let (c, e) = sketch.estimate(&key);
                    count += c;
                    error += e;
                }
                Counted { key, count, error }
            })
            .collect();
        keys.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        keys.truncate(SHOWN_KEYS);
        (keys, total)
    }

    /// The heaviest keys as of the latest point, in full when `plain`, else as keyed hashes;
    /// and the requests counted.
    pub(crate) fn heavy_keys(&self, plain: bool) -> (Vec<Counted>, u64) {
        let (mut keys, total) = self.history().keys.clone();
        if !plain {
            for c in &mut keys {
                c.key = format!("#{:08x}", self.hash_key.hash_one(&c.key) as u32);
            }
        }
        (keys, total)
    }

    /// This process's points' identity, as hex: a page that sees it change starts over
    /// (sequence numbers start again at 0 in another process).
    pub(crate) fn instance(&self) -> String {
        format!("{:016x}", self.instance)
    }

    /// Whether heavy keys are counted.
    pub(crate) fn counts_keys(&self) -> bool {
        self.keys[0].enabled()
    }
}

/// A stage's settings and totals, as the page shows them beside its points.
pub(crate) fn stage_json(stage: &floodgate::pipeline::StageSnapshot) -> Value {
    let s = &stage.stats;
    let on_error = match stage.on_store_error {
        OnStoreError::FailOpen => "fail_open",
        OnStoreError::FailClosed => "fail_closed",
        OnStoreError::Local => "local",
        _ => "other",
    };
    let mut value = json!({
        "name": s.name.as_str(),
        "kind": s.kind.name(),
        "mode": stage.mode.name(),
        "status": stage.status,
        "on_store_error": on_error,
        "totals": {
            "decisions": s.decided,
            "refusals": s.refused,
            "shadow_refusals": s.shadow_refused,
            "fail_open": s.fail_open,
            "fail_closed": s.fail_closed,
            "decided_locally": s.decided_locally,
        },
    });
    match &stage.state {
        LimiterState::RequestRate {
            plans,
            default_plan,
        } => {
            value["plans"] = plans.iter().map(|p| p.description.clone()).collect();
            value["default_plan"] = default_plan.as_str().into();
        }
        LimiterState::Concurrency {
            capacity,
            lease_ttl,
        } => {
            value["capacity"] = (*capacity).into();
            value["lease_ttl_seconds"] = lease_ttl.as_secs_f64().into();
        }
        LimiterState::Fleet {
            capacity,
            non_critical_allowance,
            in_flight,
        } => {
            value["capacity"] = (*capacity).into();
            value["non_critical_allowance"] = (*non_critical_allowance).into();
            value["reserved_for_critical"] =
                capacity.saturating_sub(*non_critical_allowance).into();
            value["in_flight"] = json!(in_flight);
        }
        LimiterState::AdaptiveConcurrency {
            algorithm,
            limit,
            in_flight,
            baseline_rtt,
            last_rtt,
            samples,
        } => {
            value["algorithm"] = (*algorithm).into();
            value["limit"] = (*limit).into();
            value["in_flight"] = (*in_flight).into();
            value["baseline_rtt_ms"] = (baseline_rtt.as_secs_f64() * 1e3).into();
            value["last_rtt_ms"] = (last_rtt.as_secs_f64() * 1e3).into();
            value["samples"] = (*samples).into();
        }
        _ => {}
    }
    value
}

/// The store's health, as the page shows it.
pub(crate) fn store_json(
    status: &crate::store::health::StoreStatus,
    live: Option<&StoreLive>,
) -> Value {
    let mut value = serde_json::to_value(status).unwrap_or(Value::Null);
    if let Some(live) = live {
        value["calls"] = live.calls.into();
        let errors: serde_json::Map<String, Value> = crate::store::ErrorKind::ALL
            .iter()
            .zip(live.errors)
            .map(|(kind, n)| (kind.name().to_string(), n.into()))
            .collect();
        value["errors"] = errors.into();
    }
    value
}

impl StagePoint {
    /// What the stage's limiter shows of itself now: requests in flight, a learned limit and
    /// its latencies, a shedder's utilization.
    fn add_state(&mut self, state: &LimiterState) {
        match state {
            LimiterState::Fleet { in_flight, .. } => self.in_flight = *in_flight,
            LimiterState::AdaptiveConcurrency {
                limit,
                in_flight,
                baseline_rtt,
                last_rtt,
                samples,
                ..
            } => {
                self.in_flight = Some(*in_flight);
                self.limit = Some(*limit);
                if *samples > 0 {
                    self.baseline_rtt_ms = Some(baseline_rtt.as_secs_f64() * 1e3);
                    self.last_rtt_ms = Some(last_rtt.as_secs_f64() * 1e3);
                }
            }
            LimiterState::Utilization {
                utilization,
                shed_amount,
                drop_probability,
            } => {
                self.utilization = *utilization;
                self.shed_amount = Some(*shed_amount);
                self.drop_probability = Some(drop_probability.map(|(_, p)| p));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests;
