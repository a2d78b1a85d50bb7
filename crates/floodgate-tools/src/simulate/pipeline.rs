//! `simulate --pipeline FILE`: the generated traffic through a configuration's whole pipeline,
//! as `floodgate serve --config FILE` would run it on the embedded store, on the run's clock.
//!
//! Each request becomes a pipeline request: its user (the traffic's key), plan, class, cost, and its
//! traffic's `endpoint` and `attributes`. The model of the service behind the pipeline is the
//! single limiters' one, run in-process as the tower layer runs it: a request is a busy worker
//! of the configuration's utilization stage from its arrival until it completes; an admitted
//! request holds its leases until it completes, after its traffic's latency (stretched past
//! the traffic's knee by the requests in flight), and then gives them back with that latency,
//! so adaptive concurrency stages learn from it.
//!
//! The report has one row for the whole pipeline (every request offered; admitted when no
//! stage refused it), then one per stage: the requests that stage decided (a stage that does
//! not apply to a request, or that an earlier stage's refusal stopped, is not offered it) and
//! those it let through. An adaptive concurrency stage's learned limit is charted.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use floodgate::algorithm::spec::AnyState;
use floodgate::blocking::block_on;
use floodgate::limiter::utilization::BusyWorker;
use floodgate::limiter::Lease;
use floodgate::pipeline::{self, Limiter, StageStats};
use floodgate::store::{Key, MemoryStore};
use floodgate::{ManualClock, Nanos};
use floodgate_service::config::{Config, ConfigFileError};
use floodgate_service::served::Served;

use super::traffic::Request;
use crate::report::{LimiterRun, Sample, Tally};

type Mem = Arc<MemoryStore<Key, AnyState, ManualClock>>;

/// What an admitted request holds until it completes.
struct Running {
    leases: Vec<Lease>,
    _busy: Option<BusyWorker>,
    latency: Duration,
}

/// A configuration's pipeline in a simulation.
pub(super) struct PipelineRunner {
    file: String,
    served: Served<Mem>,
    clock: ManualClock,
    /// Completions of the admitted requests: (time, sequence number).
    completions: BinaryHeap<Reverse<(Nanos, u64)>>,
    running: HashMap<u64, Running>,
    sequence: u64,
    overall: Tally,
    stages: Vec<Tally>,
    before: Vec<StageStats>,
}

impl PipelineRunner {
    /// The pipeline of the configuration at `path` (a file or directory `serve --config`
    /// takes), on an embedded store holding at most `max_keys` keys.
    pub(super) fn load(path: &Path, max_keys: usize) -> Result<PipelineRunner, ConfigFileError> {
        let config = Config::load(path)?;
        let clock = ManualClock::new(Nanos::ZERO);
        let store = MemoryStore::builder()
            .max_keys(max_keys)
            .clock(clock.clone())
            .build()
            .map_err(|e| config.place(ConfigFileError::from_config_error("store.max_keys", e)))?;
        let served = config.build(Arc::new(store), Arc::new(clock.clone()))?;
        let before = served.pipeline.stats();
        Ok(PipelineRunner {
            file: path.display().to_string(),
            stages: before.iter().map(|_| Tally::default()).collect(),
            before,
            served,
            clock,
            completions: BinaryHeap::new(),
            running: HashMap::new(),
            sequence: 0,
            overall: Tally::default(),
        })
    }

    fn in_flight(&self) -> u64 {
        self.running.len() as u64
    }

    /// Decides one generated request, after completing what finished before it.
    pub(super) fn offer(&mut self, request: &Request) {
        self.complete_until(request.at);
        self.clock.set(request.at);
        let busy = self.served.workers.as_ref().map(|g| g.enter());
        let attributes = request.context.attributes_of(&request.key);
        let attributes = floodgate::pipeline::scope::borrowed(&attributes);
        let asked = pipeline::Request {
            cost: Some(request.cost),
            endpoint: request.context.endpoint.as_deref(),
            attributes: &attributes,
            ..pipeline::Request::new(&request.key, &request.context.plan, request.priority)
        };
        let verdict = block_on(self.served.pipeline.evaluate(&asked));
        let retry_after = verdict
            .refusal
            .as_ref()
            .map(|r| r.retry_after.map_or(f64::INFINITY, |d| d.as_secs_f64()));
        let after = self.served.pipeline.stats();
        let stages = self.served.pipeline.stages();
        for (((tally, now), before), stage) in self
            .stages
            .iter_mut()
            .zip(&after)
            .zip(&self.before)
            .zip(stages)
        {
            if now.decided == before.decided {
                continue;
            }
            let refused = now.refused > before.refused;
            let limit = match stage.limiter() {
                Limiter::AdaptiveConcurrency(l) => Some(l.estimate().limit.floor() as u64),
                _ => None,
            };
            let sample = Sample {
                allowed: !refused,
                retry_after: retry_after.filter(|_| refused).filter(|r| r.is_finite()),
                limit,
                ..Sample::default()
            };
            tally.record(request.at, &sample);
        }
        self.before = after;
        let mut sample = Sample {
            allowed: verdict.allowed(),
            retry_after: retry_after.filter(|r| r.is_finite()),
            ..Sample::default()
        };
        if verdict.allowed() {
            let latency = request.latency_with(self.in_flight() + 1);
            sample.latency = request.knee.map(|_| latency.as_secs_f64());
            self.sequence += 1;
            self.completions
                .push(Reverse((request.at.saturating_add(latency), self.sequence)));
            let running = Running {
                leases: verdict.leases,
                _busy: busy,
                latency,
            };
            self.running.insert(self.sequence, running);
        }
        sample.in_flight = Some(self.in_flight());
        self.overall.record(request.at, &sample);
    }

    /// Completes the admitted requests due by `until`: their leases go back with their
    /// latency, their workers rest.
    pub(super) fn complete_until(&mut self, until: Nanos) {
        while let Some(Reverse((at, sequence))) = self.completions.peek().copied() {
            if at > until {
                break;
            }
            self.completions.pop();
            self.clock.set(at);
            if let Some(running) = self.running.remove(&sequence) {
                for lease in running.leases {
                    lease.complete(running.latency);
                }
            }
            let sample = Sample {
                in_flight: Some(self.in_flight()),
                ..Sample::default()
            };
            self.overall.observe(at, &sample);
        }
    }

    /// The report's rows: the whole pipeline, then each stage.
    pub(super) fn into_runs(self) -> Vec<LimiterRun> {
        let mut runs = vec![LimiterRun {
            name: "pipeline".into(),
            spec: format!("the pipeline of {}", self.file),
            tally: self.overall,
        }];
        for (stage, tally) in self.served.pipeline.stages().zip(self.stages) {
            let scope = stage
                .describe_scope()
                .map(|s| format!("; {s}"))
                .unwrap_or_default();
            runs.push(LimiterRun {
                name: format!("stage {}", stage.name()),
                spec: format!("{}{scope}", stage.limiter().kind()),
                tally,
            });
        }
        runs
    }
}
