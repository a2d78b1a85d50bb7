//! What a pipeline's stages are and have done, as plain values: what metrics, admin pages and
//! dashboards read instead of reaching into limiters.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{Limiter, Pipeline, Stage};
use crate::algorithm::spec::AnyAlgorithm;
use crate::algorithm::Algorithm;
use crate::limiter::{LimiterKind, Priority};
use crate::pipeline::{Mode, OnStoreError};
use crate::store::{Namespace, Store};

/// A stage's counters since the pipeline was built (or since the stage was first built, for a
/// pipeline built [counting on from](super::PipelineBuilder::counting_on_from) another).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StageStats {
    /// The stage's name.
    pub name: Namespace,
    /// The kind of limiter it runs.
    pub kind: LimiterKind,
    /// Requests that reached it and were decided by it (allowed, refused, shadow-refused or
    /// passed on a store error); a request refused by an earlier stage never reaches it.
    pub decided: u64,
    /// Requests it refused (enforce mode, including fail-closed refusals).
    pub refused: u64,
    /// Requests it would have refused in shadow mode.
    pub shadow_refused: u64,
    /// Store errors that let the request through.
    pub fail_open: u64,
    /// Store errors that refused the request.
    pub fail_closed: u64,
    /// Store errors after which the stage decided on this node's share of its limit
    /// ([`OnStoreError::Local`](crate::pipeline::OnStoreError::Local)).
    pub decided_locally: u64,
}

/// One plan of a request rate stage.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct PlanSnapshot {
    /// The plan's name.
    pub name: String,
    /// Its algorithm's name (`token_bucket`, …).
    pub algorithm: &'static str,
    /// What it allows: `units` per `window` (see [`AnyAlgorithm::quota`]).
    pub quota: Option<(f64, Duration)>,
    /// "plan free allows 50 requests per second".
    pub description: String,
}

/// What a stage's limiter is configured as, and its shared state where it has one.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum LimiterState {
    /// A request rate limiter's plans, by name.
    RequestRate {
        /// The plans, sorted by name.
        plans: Vec<PlanSnapshot>,
        /// The plan of users whose plan is unknown.
        default_plan: String,
    },
    /// A concurrency limiter's settings.
    Concurrency {
        /// Requests in flight allowed per user.
        capacity: u64,
        /// How long an unreturned lease holds its place.
        lease_ttl: Duration,
    },
    /// A fleet shedder's settings and count.
    Fleet {
        /// The fleet's places.
        capacity: u64,
        /// The most non-critical requests in flight.
        non_critical_allowance: u64,
        /// Non-critical requests in flight now; `None` if the store could not be read.
        in_flight: Option<u64>,
    },
    /// A utilization shedder's controller.
    Utilization {
        /// The latest utilization sample (0..=1), `None` before the first request.
        utilization: Option<f64>,
        /// The controller's shed amount (see [`crate::limiter::utilization`]).
        shed_amount: f64,
        /// The probability of shedding a request of each class, least important first.
        drop_probability: [(Priority, f64); 4],
    },
    /// An adaptive concurrency limiter's algorithm and what it has learned on this node.
    AdaptiveConcurrency {
        /// `vegas` or `gradient2`.
        algorithm: &'static str,
        /// The learned limit (requests are admitted below its whole part).
        limit: f64,
        /// Requests in flight on this node.
        in_flight: u64,
        /// The latency samples are compared with (Vegas: the no-load latency; Gradient2: the
        /// long-term average).
        baseline_rtt: Duration,
        /// The latest sample.
        last_rtt: Duration,
        /// Samples taken.
        samples: u64,
    },
}

/// A stage as it is now: its settings, counters and limiter state.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct StageSnapshot {
    /// The stage's counters (name and kind included).
    pub stats: StageStats,
    /// Its mode now.
    pub mode: Mode,
    /// What it does when its store fails.
    pub on_store_error: OnStoreError,
    /// The status of its refusals.
    pub status: u16,
    /// Its limiter's settings and state.
    pub state: LimiterState,
}

impl<S: Store<str, AnyAlgorithm> + 'static> Stage<S> {
    /// The stage's counters.
    pub fn stats(&self) -> StageStats {
        let c = &self.counters;
        StageStats {
            name: self.name.clone(),
            kind: self.limiter.kind(),
            decided: c.decided.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            shadow_refused: c.shadow_refused.load(Ordering::Relaxed),
            fail_open: c.fail_open.load(Ordering::Relaxed),
            fail_closed: c.fail_closed.load(Ordering::Relaxed),
            decided_locally: c.decided_locally.load(Ordering::Relaxed),
        }
    }

    /// The stage as it is now. Reading the fleet's count asks the store once.
    pub async fn snapshot(&self) -> StageSnapshot {
        let state = match &self.limiter {
            Limiter::RequestRate(l) => {
                let mut plans: Vec<PlanSnapshot> = l
                    .plans()
                    .map(|p| PlanSnapshot {
                        name: p.name().to_string(),
                        algorithm: p.algorithm().name(),
                        quota: p.quota(),
                        description: p.describe(),
                    })
                    .collect();
                plans.sort_by(|a, b| a.name.cmp(&b.name));
                LimiterState::RequestRate {
                    plans,
                    default_plan: l.default_plan().to_string(),
                }
            }
            Limiter::Concurrency(l) => LimiterState::Concurrency {
                capacity: l.capacity(),
                lease_ttl: l.lease_ttl(),
            },
            Limiter::Fleet(l) => LimiterState::Fleet {
                capacity: l.capacity(),
                non_critical_allowance: match l.algorithm() {
                    AnyAlgorithm::Fleet(f) => f.non_critical_allowance(),
                    _ => l.capacity(),
                },
                in_flight: l.in_flight().await.ok(),
            },
            Limiter::AdaptiveConcurrency(l) => {
                let e = l.estimate();
                LimiterState::AdaptiveConcurrency {
                    algorithm: l.algorithm().name(),
                    limit: e.limit,
                    in_flight: e.in_flight,
                    baseline_rtt: e.baseline_rtt,
                    last_rtt: e.last_rtt,
                    samples: e.samples,
                }
            }
            Limiter::Utilization(l) => {
                let controller = l.controller();
                LimiterState::Utilization {
                    utilization: controller.last_utilization(),
                    shed_amount: l.shed_amount(),
                    drop_probability: [
                        Priority::Test,
                        Priority::Get,
                        Priority::Post,
                        Priority::Critical,
                    ]
                    .map(|p| (p, controller.drop_probability(p))),
                }
            }
        };
        StageSnapshot {
            stats: self.stats(),
            mode: self.current_mode(),
            on_store_error: self.on_error,
            status: self.status,
            state,
        }
    }
}

impl<S: Store<str, AnyAlgorithm> + 'static> Pipeline<S> {
    /// Every stage's counters, in order.
    pub fn stats(&self) -> Vec<StageStats> {
        self.stages.iter().map(Stage::stats).collect()
    }

    /// Every stage as it is now, in order (see [`Stage::snapshot`]).
    pub async fn snapshot(&self) -> Vec<StageSnapshot> {
        let mut stages = Vec::with_capacity(self.stages.len());
        for stage in self.stages.iter() {
            stages.push(stage.snapshot().await);
        }
        stages
    }
}
