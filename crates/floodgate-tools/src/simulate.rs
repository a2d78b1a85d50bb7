//! `floodgate simulate`: generated (or recorded) traffic through several limiters at once, on
//! a manual clock, into a summary table and an HTML report with charts.
//!
//! Every limiter sees the same requests, each in its own embedded store with its own clock
//! (set to each request's time, so an hour of traffic takes as long as its decisions do). The
//! model of the service behind the limiters: an admitted request is in flight for its traffic's
//! `latency`, then completes; concurrency and fleet limiters take a lease at admission and
//! return it at completion (per user for concurrency; on the fleet's one key for the fleet,
//! as the service's fleet limiter counts); the utilization shedder samples
//! `in flight / --workers` (capped at 1) at each request. Requests refused are gone (no
//! retries).
//!
//! With `--trace FILE.jsonl`, the requests are a recorded trace in `replay`'s event format
//! instead, run as `replay` runs them (its `acquire`s and `release`s as written, its
//! `utilization` samples); `--duration` then cuts the trace short if given.
//!
//! Traffic specs are described in [`traffic`]; limiter specs are `replay`'s, plus an optional
//! `"name"` for the report. Two modes have reports of their own: `--usage` ([`usage`]: costs
//! known only when a response ends) and `--rlqs` ([`rlqs`]: Envoys sharing a limit through
//! the Rate Limit Quota Service).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, BufRead};
use std::path::PathBuf;
use std::time::Duration;

use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::limiter::fleet::FLEET_KEY;
use floodgate::limiter::Priority;
use floodgate::{ManualClock, Nanos, Op};
use serde_json::Value;

use crate::replay::{
    decider, lease_id, load_named_spec, name_lease, tally_event, Backend, Decide, Event,
    EventError, ReplayError, SpecError, Subject, Trace,
};
use crate::report::{LimiterRun, Report, Sample, Tally, WriteError};

mod pipeline;
pub mod rlqs;
pub mod traffic;
pub mod usage;

use traffic::{Generator, Merged, Request, Traffic, TrafficError};

/// Arguments of `floodgate simulate`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A limiter to run (repeat for several): `replay`'s spec, plus an optional "name", e.g.
    /// '{"name":"bucket","algorithm":"token_bucket","rate":10,"capacity":20}'.
    #[arg(
        long = "limiter",
        value_name = "SPEC",
        required_unless_present_any = ["pipeline", "usage", "rlqs"]
    )]
    limiters: Vec<String>,
    /// LLM-like traffic whose cost is known only when each response ends, through the three
    /// ways to hold a token budget side by side (reserve the maximum and refund, check then
    /// charge, reserve an estimate and settle), e.g. '{"budget":20000,"window":"1m","rate":4,
    /// "prompt":[100,800],"completion":{"median":300,"max":4000}}' (see docs/usage-based-limits.md).
    #[arg(long, value_name = "SPEC", group = "own_report", conflicts_with_all = ["limiters", "pipeline", "traffic", "trace"])]
    usage: Option<String>,
    /// Envoys sharing one global limit through RLQS, each running Envoy's filter against the
    /// service's sessions on simulated time: the limit (requests per second), the duration,
    /// and each client's demand as [from_second, requests_per_second] steps, optionally the
    /// second it leaves, e.g. '{"limit":100,"duration":"2m","clients":[{"name":"a",
    /// "demand":[[0,10]]},{"demand":[[0,30],[60,90]]},{"demand":[[5,80]],"leaves":90}]}'.
    /// Charts each client's assigned rate, their sum and the limit, and the admitted per
    /// second (docs/rlqs.md, "Simulating a fleet").
    #[arg(long, value_name = "SPEC", group = "own_report", conflicts_with_all = ["limiters", "pipeline", "traffic", "trace", "duration"])]
    rlqs: Option<String>,
    /// With `--usage` or `--rlqs`: also write each chart as an SVG file into this directory.
    #[arg(long, value_name = "DIR", requires = "own_report")]
    charts: Option<PathBuf>,
    /// A configuration file (or directory), as `serve --config` takes: its whole pipeline runs
    /// as one more subject of the report, a row for it and one per stage. The traffic's
    /// `plan`, `endpoint` and `attributes` reach its stages (docs/building-your-pipeline.md).
    #[arg(long, value_name = "FILE", conflicts_with = "trace")]
    pipeline: Option<PathBuf>,
    /// Traffic to generate (repeat to mix several), e.g. '{"pattern":"poisson","rate":50,
    /// "keys":100,"zipf":1.1}': patterns steady, poisson, burst, ramp, sine.
    #[arg(long = "traffic", value_name = "SPEC")]
    traffic: Vec<String>,
    /// A recorded trace in `replay`'s event format, instead of generated traffic.
    #[arg(long, value_name = "FILE.jsonl", conflicts_with = "traffic")]
    trace: Option<PathBuf>,
    /// How long the generated traffic lasts (above 0: `90s`, `5m`, `1h30m`); with `--trace`,
    /// where to cut it.
    #[arg(long, value_name = "D", value_parser = floodgate_service::cli::positive_duration)]
    duration: Option<std::time::Duration>,
    /// Where to write the HTML report (none if absent).
    #[arg(long, value_name = "FILE.html")]
    out: Option<PathBuf>,
    /// The generators' seed: the same seed gives the same requests.
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// The workers of the simulated service, whose busy share the utilization shedder reads,
    /// as the config's `limiters.utilization.workers` (at least 1).
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = floodgate_service::cli::at_least_one::<u64>)]
    workers: u64,
    /// The most keys each limiter's store holds (at least 1).
    #[arg(long, value_name = "N", default_value_t = 1_000_000, value_parser = floodgate_service::cli::at_least_one::<usize>)]
    max_keys: usize,
}

/// Why a simulation stopped.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// A `--limiter` spec was refused.
    #[error("--limiter #{index}: {source}")]
    Limiter {
        /// 1-based, in the order given.
        index: usize,
        /// Why.
        source: SpecError,
    },
    /// The `--pipeline` configuration was refused.
    #[error("--pipeline: {0}")]
    Pipeline(#[source] floodgate_service::config::ConfigFileError),
    /// A `--traffic` spec was refused.
    #[error("--traffic #{index}: {source}")]
    Traffic {
        /// 1-based, in the order given.
        index: usize,
        /// Why.
        source: TrafficError,
    },
    /// A `--traffic` spec could not be read.
    #[error("--traffic #{index}: {source}")]
    TrafficFile {
        /// 1-based, in the order given.
        index: usize,
        /// Why.
        source: SpecError,
    },
    /// The `--usage` spec was refused.
    #[error("--usage: {0}")]
    Usage(#[source] usage::UsageError),
    /// The `--usage` spec could not be read.
    #[error("--usage: {0}")]
    UsageFile(#[source] SpecError),
    /// The `--rlqs` spec was refused.
    #[error("--rlqs: {0}")]
    Rlqs(#[source] rlqs::RlqsError),
    /// The `--rlqs` spec could not be read.
    #[error("--rlqs: {0}")]
    RlqsFile(#[source] SpecError),
    /// The `--rlqs` simulation stopped.
    #[error("--rlqs: {0}")]
    RlqsRun(#[source] rlqs::RunError),
    /// `--charts` could not be written.
    #[error("--charts: {0}")]
    Charts(#[source] usage::WriteChartsError),
    /// Neither `--traffic` nor `--trace` was given.
    #[error("give the traffic: --traffic SPEC (one or more) or --trace FILE.jsonl")]
    NoTraffic,
    /// `--duration` is missing (with `--traffic`).
    #[error("--duration: {0}")]
    Duration(String),
    /// A store could not be built, or a limiter refused an event.
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// The report could not be written.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// Reading the trace failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The operating system's reason.
        source: io::Error,
    },
}

impl SimulateError {
    /// 2 for bad arguments, 1 for bad input or I/O.
    pub fn exit_code(&self) -> u8 {
        match self {
            SimulateError::Replay(e) => e.exit_code(),
            SimulateError::Write(_)
            | SimulateError::Io { .. }
            | SimulateError::Pipeline(_)
            | SimulateError::Charts(_)
            | SimulateError::RlqsRun(_) => 1,
            _ => 2,
        }
    }
}

/// Runs the simulation: the summary table on stdout, the report in `--out`.
pub fn run(args: &Args) -> Result<(), SimulateError> {
    if let Some(spec) = &args.usage {
        return run_usage(args, spec);
    }
    if let Some(spec) = &args.rlqs {
        return run_rlqs(args, spec);
    }
    let report = simulate(args)?;
    print!("{}", report.table());
    if let Some(out) = &args.out {
        report.write(out)?;
        eprintln!("floodgate: wrote {}", out.display());
    }
    Ok(())
}

/// `--usage`: the three ways' table on stdout, the report in `--out`, the charts in
/// `--charts`.
fn run_usage(args: &Args, spec: &str) -> Result<(), SimulateError> {
    let value = crate::replay::load_value(spec).map_err(SimulateError::UsageFile)?;
    let usage = usage::UsageSpec::from_value(value.clone()).map_err(SimulateError::Usage)?;
    let duration = args.duration.ok_or_else(|| {
        SimulateError::Duration("required with --usage (e.g. --duration 10m)".into())
    })?;
    let report = usage::simulate(value, &usage, duration, args.seed);
    print!("{}", report.table());
    write_outputs(args, || report.html(), |dir| report.write_charts(dir))
}

/// The HTML report of `--usage` or `--rlqs` in `--out`, and its charts in `--charts`.
fn write_outputs(
    args: &Args,
    html: impl FnOnce() -> Result<String, crate::report::chart::ChartError>,
    charts: impl FnOnce(&std::path::Path) -> Result<Vec<PathBuf>, usage::WriteChartsError>,
) -> Result<(), SimulateError> {
    if let Some(out) = &args.out {
        let html = html().map_err(|e| SimulateError::Write(WriteError::Chart(e)))?;
        std::fs::write(out, html).map_err(|source| SimulateError::Io {
            path: out.display().to_string(),
            source,
        })?;
        eprintln!("floodgate: wrote {}", out.display());
    }
    if let Some(dir) = &args.charts {
        for path in charts(dir).map_err(SimulateError::Charts)? {
            eprintln!("floodgate: wrote {}", path.display());
        }
    }
    Ok(())
}

/// `--rlqs`: the fleet's table on stdout, the report in `--out`, the charts in `--charts`.
fn run_rlqs(args: &Args, spec: &str) -> Result<(), SimulateError> {
    let value = crate::replay::load_value(spec).map_err(SimulateError::RlqsFile)?;
    let fleet = rlqs::RlqsSpec::from_value(value.clone()).map_err(SimulateError::Rlqs)?;
    let report = rlqs::simulate(value, &fleet).map_err(SimulateError::RlqsRun)?;
    print!("{}", report.table());
    write_outputs(args, || report.html(), |dir| report.write_charts(dir))
}

/// The simulation's report (see [`run`]).
pub fn simulate(args: &Args) -> Result<Report, SimulateError> {
    let duration = args.duration;
    let mut runners = limiter_runners(args)?;
    let mut details = Vec::new();
    let mut pipeline = match &args.pipeline {
        Some(path) => {
            details.push(("pipeline".to_string(), path.display().to_string()));
            let runner = pipeline::PipelineRunner::load(path, args.max_keys)
                .map_err(SimulateError::Pipeline)?;
            Some(runner)
        }
        None => None,
    };
    if let Some(path) = &args.trace {
        details.push(("trace".to_string(), path.display().to_string()));
        let file = std::fs::File::open(path).map_err(|source| SimulateError::Io {
            path: path.display().to_string(),
            source,
        })?;
        run_trace(&mut runners, io::BufReader::new(file), duration)?;
    } else {
        if args.traffic.is_empty() {
            return Err(SimulateError::NoTraffic);
        }
        let duration = duration.ok_or_else(|| {
            SimulateError::Duration("required with --traffic (e.g. --duration 60s)".into())
        })?;
        let generators = generators(args, duration, &mut details)?;
        run_generated(generators, duration, pipeline.as_mut(), &mut runners)?;
    }
    details.push((
        "duration".into(),
        duration.map_or_else(
            || "the trace's".into(),
            |d| format!("{} s", d.as_secs_f64()),
        ),
    ));
    details.push(("seed".into(), args.seed.to_string()));
    details.push(("workers".into(), args.workers.to_string()));
    Ok(Report {
        title: "floodgate simulate".into(),
        details,
        limiters: pipeline
            .map(pipeline::PipelineRunner::into_runs)
            .unwrap_or_default()
            .into_iter()
            .chain(runners.into_iter().map(Runner::into_run))
            .collect(),
        duration: duration.map(|d| d.as_secs_f64()),
    })
}

/// A runner for each `--limiter`, in the order given, each on its own memory store.
fn limiter_runners(args: &Args) -> Result<Vec<Runner>, SimulateError> {
    let mut runners = Vec::with_capacity(args.limiters.len());
    for (i, arg) in args.limiters.iter().enumerate() {
        let bad = |source| SimulateError::Limiter {
            index: i + 1,
            source,
        };
        let named = load_named_spec(arg).map_err(bad)?;
        let subject = named.spec.build().map_err(|e| bad(SpecError::Invalid(e)))?;
        let backend = Backend::Memory {
            max_keys: args.max_keys,
        };
        runners.push(Runner::new(
            named.name,
            named.json,
            subject,
            backend,
            args.workers,
        )?);
    }
    Ok(runners)
}

/// A generator for each `--traffic` spec, lasting `duration`, each spec noted in `details`.
fn generators(
    args: &Args,
    duration: Duration,
    details: &mut Vec<(String, String)>,
) -> Result<Vec<Generator>, SimulateError> {
    let mut generators = Vec::with_capacity(args.traffic.len());
    for (i, arg) in args.traffic.iter().enumerate() {
        let value =
            crate::replay::load_value(arg).map_err(|source| SimulateError::TrafficFile {
                index: i + 1,
                source,
            })?;
        let traffic =
            Traffic::from_value(value.clone()).map_err(|source| SimulateError::Traffic {
                index: i + 1,
                source,
            })?;
        details.push((format!("traffic {}", i + 1), value.to_string()));
        // Each source draws from its own stream of the seed.
        let seed = args.seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        generators.push(Generator::new(traffic, duration, seed));
    }
    Ok(generators)
}

/// Offers the generated requests, merged in time order, to the pipeline and every runner,
/// then completes what is still in flight at `duration`.
fn run_generated(
    generators: Vec<Generator>,
    duration: Duration,
    mut pipeline: Option<&mut pipeline::PipelineRunner>,
    runners: &mut [Runner],
) -> Result<(), SimulateError> {
    for request in Merged::new(generators) {
        if let Some(pipeline) = &mut pipeline {
            pipeline.offer(&request);
        }
        for runner in runners.iter_mut() {
            runner.offer(&request)?;
        }
    }
    let end = Nanos::ZERO.saturating_add(duration);
    if let Some(pipeline) = &mut pipeline {
        pipeline.complete_until(end);
    }
    for runner in runners.iter_mut() {
        runner.complete_until(end)?;
    }
    Ok(())
}

/// Feeds every runner each event of a trace, in order, up to `until`.
fn run_trace(
    runners: &mut [Runner],
    input: impl BufRead,
    until: Option<Duration>,
) -> Result<(), SimulateError> {
    let end = until.map(|d| Nanos::ZERO.saturating_add(d));
    for read in Trace::new(input) {
        let (line, event) = read?;
        if end.is_some_and(|end| event.at > end) {
            break;
        }
        for runner in runners.iter_mut() {
            runner
                .replay(&event)
                .map_err(|source| ReplayError::Event { line, source })?;
        }
    }
    Ok(())
}

/// How a limiter takes the generated requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Takes {
    /// `check` with the request's cost.
    Checks,
    /// `acquire` at admission, `release` at completion.
    Leases,
    /// `check` with the utilization of the simulated workers.
    Utilization,
}

/// One limiter of the simulation: its decider, clock, completions pending and tally.
struct Runner {
    name: String,
    spec: String,
    decide: Decide,
    clock: ManualClock,
    takes: Takes,
    /// The in-flight requests' completions: (time, sequence number, the key whose lease
    /// returns; empty for the shedder). Checks keep none: the heap holds what is in flight,
    /// rate × latency entries, only where the model needs it.
    completions: BinaryHeap<Reverse<(Nanos, u64, String)>>,
    /// The fleet's one key: a fleet counts every user's requests together, as the service's
    /// fleet limiter does.
    fleet: bool,
    /// An adaptive concurrency limiter, whose limit the report charts.
    adaptive: bool,
    admitted: u64,
    workers: u64,
    /// Leases of a trace's `acquire`s that name none.
    made_up: u64,
    tally: Tally,
}

impl Runner {
    fn new(
        name: String,
        spec: String,
        subject: Subject,
        backend: Backend,
        workers: u64,
    ) -> Result<Runner, SimulateError> {
        let fleet = matches!(subject, Subject::Keyed(AnyAlgorithm::Fleet(_)));
        let adaptive = matches!(subject, Subject::Adaptive(_));
        let takes = match &subject {
            Subject::Keyed(AnyAlgorithm::Concurrency(_) | AnyAlgorithm::Fleet(_)) => Takes::Leases,
            Subject::Keyed(_) => Takes::Checks,
            Subject::Adaptive(_) => Takes::Leases,
            Subject::Utilization { .. } => Takes::Utilization,
        };
        let clock = ManualClock::new(Nanos::ZERO);
        let decide = decider(subject, backend, clock.clone())?;
        Ok(Runner {
            name,
            spec,
            decide,
            clock,
            takes,
            completions: BinaryHeap::new(),
            fleet,
            adaptive,
            admitted: 0,
            workers,
            made_up: 0,
            tally: Tally::default(),
        })
    }

    fn in_flight(&self) -> u64 {
        self.completions.len() as u64
    }

    /// Decides one generated request, after completing what finished before it.
    fn offer(&mut self, request: &Request) -> Result<(), SimulateError> {
        self.complete_until(request.at)?;
        self.clock.set(request.at);
        self.admitted += 1;
        let (op, lease) = match self.takes {
            Takes::Leases => {
                let lease = format!("sim-{}", self.admitted);
                let op = Op::Acquire {
                    lease: lease_id(&lease),
                    critical: request.priority == Priority::Critical,
                };
                (op, Some(lease))
            }
            Takes::Checks | Takes::Utilization => (Op::Check { cost: request.cost }, None),
        };
        let utilization = (self.takes == Takes::Utilization)
            .then(|| (self.in_flight() as f64 / self.workers as f64).min(1.0));
        let key = if self.fleet {
            FLEET_KEY.to_string()
        } else {
            request.key.clone()
        };
        let event = Event {
            t: Value::from(request.at.as_secs_f64()),
            at: request.at,
            key,
            op,
            lease,
            priority: request.priority,
            utilization,
        };
        let out = (self.decide)(&event).map_err(|source| ReplayError::Event { line: 0, source })?;
        let allowed = out.allowed;
        let mut sample = Sample {
            allowed,
            retry_after: out.retry_after,
            shed_amount: out.shed_amount,
            utilization,
            limit: out.limit.filter(|_| self.adaptive),
            ..Sample::default()
        };
        if allowed && self.takes != Takes::Checks {
            // Admitted: in flight with the others, which may slow it (the traffic's knee).
            let latency = request.latency_with(self.in_flight() + 1);
            // Charted where it depends on load: traffic with a knee.
            sample.latency = request.knee.map(|_| latency.as_secs_f64());
            let done = request.at.saturating_add(latency);
            let key = match self.takes {
                Takes::Leases => event.key,
                _ => String::new(),
            };
            self.completions.push(Reverse((done, self.admitted, key)));
        }
        // In flight is what the lease limiters and the shedder act on; the others' charts
        // leave it out.
        if self.takes != Takes::Checks {
            sample.in_flight = Some(self.in_flight());
        }
        self.tally.record(request.at, &sample);
        Ok(())
    }

    /// Completes the admitted requests due by `until`, returning their leases.
    fn complete_until(&mut self, until: Nanos) -> Result<(), SimulateError> {
        while let Some(Reverse((at, _, _))) = self.completions.peek() {
            if *at > until {
                break;
            }
            let Some(Reverse((at, sequence, key))) = self.completions.pop() else {
                break;
            };
            if self.takes == Takes::Leases {
                self.clock.set(at);
                let lease = format!("sim-{sequence}");
                let event = Event {
                    t: Value::from(at.as_secs_f64()),
                    at,
                    key,
                    op: Op::Release {
                        lease: lease_id(&lease),
                    },
                    lease: Some(lease),
                    priority: Priority::Get,
                    utilization: None,
                };
                (self.decide)(&event).map_err(|source| ReplayError::Event { line: 0, source })?;
            }
            if self.takes != Takes::Checks {
                let sample = Sample {
                    in_flight: Some(self.in_flight()),
                    ..Sample::default()
                };
                self.tally.observe(at, &sample);
            }
        }
        Ok(())
    }

    /// Decides one event of a recorded trace, as `replay` does.
    fn replay(&mut self, event: &Event) -> Result<(), EventError> {
        self.clock.set(event.at);
        let mut event = event.clone();
        name_lease(&mut event, &mut self.made_up);
        let out = (self.decide)(&event)?;
        tally_event(&mut self.tally, &event, &out);
        Ok(())
    }

    fn into_run(self) -> LimiterRun {
        LimiterRun {
            name: self.name,
            spec: self.spec,
            tally: self.tally,
        }
    }
}

#[cfg(test)]
mod tests;
