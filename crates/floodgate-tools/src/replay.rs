//! `floodgate replay`: run a recorded trace through one limiter, one decision per event.
//!
//! The limiter is an algorithm spec (`{"algorithm": "gcra", …}`) or one of the limiters
//! `{"limiter": "concurrency", "capacity", "lease_ttl"}`, `{"limiter": "fleet", "capacity",
//! "reserved_for_critical", "lease_ttl"}`, `{"limiter": "utilization", "seed"?, and optional
//! overrides of `end_of_good`, `start_of_bad`, `seconds_before_shedding`,
//! `seconds_to_shed_all`}`, `{"limiter": "adaptive_concurrency", "adaptive"?: {"algorithm":
//! "vegas" | "gradient2", …its parameters}, "lease_ttl"?}` (see [`adaptive`]).
//!
//! Input: one JSON object per line (blank lines are skipped), in time order:
//! `t` (seconds from the trace's start, required), `key` (default `""`), `op` (default
//! `check`), `cost` (default 1), and per op: `timeout` (`try_acquire`, seconds or a duration
//! string, default 0), `rate` (`set_rate`), `lease` (`acquire`: optional, the caller's own id;
//! `release`: required), `priority` (`critical`, `post`, `get` (default) or `test`: the fleet
//! treats `critical` as critical; the utilization shedder sheds by class) and `utilization`
//! (utilization shedder: the sample, 0..1; default the previous event's, 0 at first).
//!
//! Output: one JSON object per event, same order: `t` (as given), `key`, `allowed`, `limit`,
//! `remaining`, `reset_after`, `retry_after` (`null` when allowed or never possible), and per
//! op: `wait` (shaping algorithms), `lease` and `in_flight` (`acquire`; `in_flight` counts the
//! request's class), `released` and `in_flight` (`release`), `shed_amount` and
//! `drop_probability` (utilization shedder, which has no `limit`, `remaining` or
//! `reset_after`); times in seconds.
//!
//! `--store redis://…` (or `redis-cluster://…`) runs the keyed limiters on Redis, through the
//! Lua twins, with the events' `t` as time (the store's explicit clock) instead of Redis
//! `TIME`: the decisions are the memory store's, exactly. The run's keys live in a namespace of
//! its own (`replay-RANDOM:KEY`; the output shows the trace's keys), so two runs never share
//! state, and are kept at least [`REDIS_MIN_TTL`] of real time (Redis expires keys on its own
//! clock, which a replay outruns). A limiter Redis cannot run is refused before the first
//! event, naming it; the utilization shedder has no store and runs here either way. Each call
//! has a 1 s timeout and no circuit breaker: a failing call stops the replay with an error.
//!
//! The trace's time 0 is the clock's epoch, so fixed windows align to whole multiples of their
//! length from the trace's start. Input is streamed: memory grows with the number of live keys
//! (bounded by the store), never with the length of the trace. The first bad line stops the run
//! with an error naming the line and the field.

use floodgate::store::LocalStore;
use std::io::{self, BufRead, BufWriter, Write};
use std::time::Duration;

use std::sync::Arc;

use floodgate::algorithm::concurrency::{Concurrency, Fleet};
use floodgate::algorithm::spec::{AlgorithmSpec, AnyAlgorithm, AnyState};
use floodgate::algorithm::Algorithm;
use floodgate::duration::SpecDuration;
use floodgate::limiter::utilization::{
    ControllerSettings, SettableUtilization, UtilizationShedder,
};
use floodgate::pipeline::SHED_RETRY_AFTER;
use floodgate::store::{Key, MemoryStore, Store};
use floodgate::{ConfigError, Decision, ManualClock, Nanos, Op, OpKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::report::{LimiterRun, Report, Sample, Tally};
use floodgate_service::config::stage::AdaptiveConfig;
use floodgate_service::config::{ConfigFileError, StoreConfig};
use floodgate_service::store::ServiceStore;

pub mod adaptive;
mod event;
pub use event::EventError;
pub(crate) use event::{lease_id, Event, Trace};

/// Arguments of `floodgate replay`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The limiter: a JSON spec such as '{"algorithm":"token_bucket","rate":10,"capacity":20}'
    /// or '{"limiter":"concurrency","capacity":20,"lease_ttl":"60s"}', or the path of a YAML
    /// or JSON file holding one.
    #[arg(long, value_name = "SPEC")]
    limiter: String,
    /// `--store URL` (default `memory`); on Redis the trace's own times are the clock.
    #[command(flatten)]
    store: floodgate_service::cli::StoreArg,
    /// The most keys held at once (the memory store's bound; at least 1).
    #[arg(long, value_name = "N", default_value_t = 1_000_000, value_parser = floodgate_service::cli::at_least_one::<usize>)]
    max_keys: usize,
    /// Print a summary table (offered, admitted, refused, longest refusal streak, p50/p99
    /// `retry_after`) instead of one decision per line.
    #[arg(long)]
    summary: bool,
    /// Also write an HTML report with the summary and charts of the decisions over time.
    #[arg(long, value_name = "FILE.html")]
    chart: Option<std::path::PathBuf>,
}

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The `--limiter` spec could not be read or is invalid.
    #[error("--limiter: {0}")]
    Spec(#[from] SpecError),
    /// The `--store` URL names no store this command can use.
    #[error("--store: {0}")]
    Store(#[from] ConfigFileError),
    /// The store cannot run the limiter.
    #[error("--limiter: {0}; use --store memory")]
    NotOnStore(#[source] floodgate::StoreError),
    /// The runtime that drives the Redis store could not be started.
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] io::Error),
    /// `--max-keys` is not a bound the store takes.
    #[error("--max-keys: {0}")]
    MaxKeys(#[source] ConfigError),
    /// An input line is malformed or out of order.
    #[error("line {line}: {source}")]
    Event {
        /// The 1-based line number.
        line: u64,
        /// What is wrong, naming the field.
        source: EventError,
    },
    /// Reading the trace or writing the decisions failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The `--chart` report could not be drawn or written.
    #[error("--chart: {0}")]
    Chart(String),
}

impl ReplayError {
    /// 2 for bad arguments (as for usage errors), 1 for bad input or I/O.
    pub fn exit_code(&self) -> u8 {
        match self {
            ReplayError::Spec(_)
            | ReplayError::Store(_)
            | ReplayError::NotOnStore { .. }
            | ReplayError::MaxKeys(_) => 2,
            ReplayError::Event { .. }
            | ReplayError::Io(_)
            | ReplayError::Runtime(_)
            | ReplayError::Chart(_) => 1,
        }
    }
}

/// Why a `--limiter` spec was refused.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// Inline JSON that does not parse.
    #[error("{0}")]
    Json(#[source] serde_json::Error),
    /// The spec file could not be read.
    #[error("cannot read `{path}`: {source}")]
    Read {
        /// The file as given.
        path: String,
        /// The operating system's reason.
        source: io::Error,
    },
    /// The spec file is not YAML or JSON.
    #[error("{path}: {source}")]
    Yaml {
        /// The file as given.
        path: String,
        /// The parser's reason, with the line and column.
        source: serde_norway::Error,
    },
    /// The spec is not an algorithm or limiter spec: an unknown algorithm or field, a missing
    /// or mistyped parameter.
    #[error("{0}")]
    Shape(#[source] serde_json::Error),
    /// A parameter's value is not allowed.
    #[error("{0}")]
    Invalid(#[from] ConfigError),
}

/// Runs the replay on stdin and stdout.
pub fn run(args: &Args) -> Result<(), ReplayError> {
    let named = load_named_spec(&args.limiter)?;
    let subject = named.spec.build().map_err(SpecError::Invalid)?;
    let store = args.store.or_env();
    let store = store.as_deref().unwrap_or(floodgate_service::store::MEMORY);
    let backend = if matches!(store, "memory" | "memory://") {
        Backend::Memory {
            max_keys: args.max_keys,
        }
    } else {
        Backend::Redis {
            url: store.to_string(),
        }
    };
    let stdin = io::stdin().lock();
    let stdout = BufWriter::new(io::stdout().lock());
    let reports = args.summary || args.chart.is_some();
    let mut tally = Tally::default();
    let result = replay(
        subject,
        backend,
        stdin,
        stdout,
        reports.then_some(&mut tally),
        !args.summary,
    );
    match result {
        // A closed stdout (`| head`) is the reader saying it has seen enough.
        Err(ReplayError::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
        other => other?,
    }
    if !reports {
        return Ok(());
    }
    let report = Report {
        title: "floodgate replay".into(),
        details: vec![
            ("trace".into(), "standard input".into()),
            ("store".into(), floodgate::store::redacted(store)),
        ],
        limiters: vec![LimiterRun {
            name: named.name,
            spec: named.json,
            tally,
        }],
        duration: None,
    };
    if args.summary {
        print!("{}", report.table());
    }
    if let Some(path) = &args.chart {
        report
            .write(path)
            .map_err(|e| ReplayError::Chart(e.to_string()))?;
        eprintln!("floodgate: wrote {}", path.display());
    }
    Ok(())
}

/// `floodgate replay` without the command line: replays the trace `input` (one JSON event per
/// line) through the limiter `spec` (inline JSON, or the path of a YAML or JSON file) on the
/// embedded store, holding at most `max_keys` keys, and writes one JSON decision per line to
/// `output`. A bad spec or event is an error naming it, as for the command.
pub fn replay_trace(
    spec: &str,
    max_keys: usize,
    input: impl BufRead,
    output: impl Write,
) -> Result<(), ReplayError> {
    let subject = load_spec(spec)?.build().map_err(SpecError::Invalid)?;
    replay(
        subject,
        Backend::Memory { max_keys },
        input,
        output,
        None,
        true,
    )
}

/// The limiters a replay can run besides the algorithms.
#[derive(Debug, Deserialize)]
#[serde(tag = "limiter", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum LimiterSpec {
    Concurrency {
        capacity: u64,
        lease_ttl: SpecDuration,
    },
    Fleet {
        capacity: u64,
        reserved_for_critical: f64,
        lease_ttl: SpecDuration,
    },
    Utilization {
        #[serde(default)]
        seed: u64,
        end_of_good: Option<f64>,
        start_of_bad: Option<f64>,
        seconds_before_shedding: Option<f64>,
        seconds_to_shed_all: Option<f64>,
    },
    AdaptiveConcurrency {
        adaptive: Option<AdaptiveConfig>,
        lease_ttl: Option<SpecDuration>,
    },
}

/// A parsed `--limiter` spec.
#[derive(Debug)]
pub(crate) enum Spec {
    Algorithm(AlgorithmSpec),
    Limiter(LimiterSpec),
}

/// What a replay runs: a keyed algorithm (leases included) on the memory store, or the
/// utilization shedder with the trace's utilization samples.
pub(crate) enum Subject {
    Keyed(AnyAlgorithm),
    Utilization {
        seed: u64,
        settings: ControllerSettings,
    },
    Adaptive(adaptive::AdaptiveSpec),
}

impl Spec {
    pub fn build(&self) -> Result<Subject, ConfigError> {
        Ok(match self {
            Spec::Algorithm(spec) => Subject::Keyed(spec.build()?),
            Spec::Limiter(LimiterSpec::Concurrency {
                capacity,
                lease_ttl,
            }) => Subject::Keyed(AnyAlgorithm::Concurrency(Concurrency::new(
                *capacity,
                lease_ttl.0,
            )?)),
            Spec::Limiter(LimiterSpec::Fleet {
                capacity,
                reserved_for_critical,
                lease_ttl,
            }) => Subject::Keyed(AnyAlgorithm::Fleet(Fleet::new(
                *capacity,
                *reserved_for_critical,
                lease_ttl.0,
            )?)),
            Spec::Limiter(LimiterSpec::Utilization {
                seed,
                end_of_good,
                start_of_bad,
                seconds_before_shedding,
                seconds_to_shed_all,
            }) => {
                let d = ControllerSettings::default();
                let settings = ControllerSettings {
                    end_of_good: end_of_good.unwrap_or(d.end_of_good),
                    start_of_bad: start_of_bad.unwrap_or(d.start_of_bad),
                    seconds_before_shedding: seconds_before_shedding
                        .unwrap_or(d.seconds_before_shedding),
                    seconds_to_shed_all: seconds_to_shed_all.unwrap_or(d.seconds_to_shed_all),
                };
                settings.validate()?;
                Subject::Utilization {
                    seed: *seed,
                    settings,
                }
            }
            Spec::Limiter(LimiterSpec::AdaptiveConcurrency {
                adaptive,
                lease_ttl,
            }) => Subject::Adaptive(adaptive::AdaptiveSpec::new(
                adaptive.as_ref(),
                lease_ttl.map(|t| t.0),
            )?),
        })
    }
}

/// Reads a spec given inline (JSON) or as a file path (YAML or JSON).
pub(crate) fn load_spec(arg: &str) -> Result<Spec, SpecError> {
    Ok(load_named_spec(arg)?.spec)
}

/// A spec with the name reports show it by.
#[derive(Debug)]
pub(crate) struct NamedSpec {
    /// The spec's optional `name`, else the spec itself as compact JSON.
    pub name: String,
    /// The spec without its name, as compact JSON.
    pub json: String,
    pub spec: Spec,
}

/// [`load_spec`], also taking an optional `"name"` (a string) for reports.
pub(crate) fn load_named_spec(arg: &str) -> Result<NamedSpec, SpecError> {
    let mut value = load_value(arg)?;
    let name = match value.as_object_mut().and_then(|o| o.remove("name")) {
        None => None,
        Some(Value::String(name)) => Some(name),
        Some(other) => {
            return Err(SpecError::Shape(serde::de::Error::custom(format!(
                "field `name`: expected a string, got {other}"
            ))))
        }
    };
    let json = value.to_string();
    let spec = if value.get("limiter").is_some() {
        serde_json::from_value(value).map(Spec::Limiter)
    } else {
        serde_json::from_value(value).map(Spec::Algorithm)
    };
    Ok(NamedSpec {
        name: name.unwrap_or_else(|| json.clone()),
        json,
        spec: spec.map_err(SpecError::Shape)?,
    })
}

/// A JSON value given inline (an argument starting with `{`) or as a YAML or JSON file's path.
pub(crate) fn load_value(arg: &str) -> Result<Value, SpecError> {
    if arg.trim_start().starts_with('{') {
        serde_json::from_str(arg).map_err(SpecError::Json)
    } else {
        let text = std::fs::read_to_string(arg).map_err(|source| SpecError::Read {
            path: arg.to_string(),
            source,
        })?;
        serde_norway::from_str(&text).map_err(|source| SpecError::Yaml {
            path: arg.to_string(),
            source,
        })
    }
}

#[derive(Serialize, Default)]
pub(crate) struct Output<'a> {
    pub(crate) t: Value,
    pub(crate) key: &'a str,
    pub(crate) allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) limit: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) remaining: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reset_after: Option<f64>,
    pub(crate) retry_after: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) wait: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) lease: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) released: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) in_flight: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) shed_amount: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) drop_probability: Option<f64>,
}

/// Where a replay keeps its keys' state.
#[derive(Clone, Debug)]
pub(crate) enum Backend {
    /// The embedded store, bounded.
    Memory { max_keys: usize },
    /// A Redis, run with the trace's times.
    Redis { url: String },
}

/// How long a replay's keys stay in Redis at least, in real time.
pub const REDIS_MIN_TTL: Duration = Duration::from_secs(3600);

/// Replays `input` into `output`; the core of `run`, separated for tests.
/// With `tally`, every decision is also counted there; `lines` says whether the decisions are
/// written.
pub(crate) fn replay(
    subject: Subject,
    backend: Backend,
    input: impl BufRead,
    mut output: impl Write,
    mut tally: Option<&mut Tally>,
    lines: bool,
) -> Result<(), ReplayError> {
    let clock = ManualClock::new(Nanos::ZERO);
    let mut decide = decider(subject, backend, clock.clone())?;
    let mut made_up = 0u64;
    for read in Trace::new(input) {
        let (number, mut event) = read?;
        let bad = |source: EventError| ReplayError::Event {
            line: number,
            source,
        };
        clock.set(event.at);
        name_lease(&mut event, &mut made_up);
        let out = decide(&event).map_err(bad)?;
        if let Some(tally) = tally.as_deref_mut() {
            tally_event(tally, &event, &out);
        }
        if lines {
            serde_json::to_writer(&mut output, &out).map_err(io::Error::from)?;
            output.write_all(b"\n")?;
        }
    }
    output.flush()?;
    Ok(())
}

/// Gives an `acquire` its lease id: the trace's name for the lease, or else the next made-up
/// name (`lease-1`, `lease-2`, …).
pub(crate) fn name_lease(event: &mut Event, made_up: &mut u64) {
    if let Op::Acquire { lease, .. } = &mut event.op {
        let name = event.lease.get_or_insert_with(|| {
            *made_up += 1;
            format!("lease-{made_up}")
        });
        *lease = lease_id(name);
    }
}

/// Counts one decided event in `tally`: `check`, `reserve`, `try_acquire` and `acquire` are
/// requests offered; `release` and `set_rate` only move the gauges.
pub(crate) fn tally_event(tally: &mut Tally, event: &Event, out: &Output<'_>) {
    let sample = Sample {
        allowed: out.allowed,
        retry_after: out.retry_after,
        in_flight: out.in_flight,
        shed_amount: out.shed_amount,
        utilization: out.shed_amount.and(event.utilization),
        ..Sample::default()
    };
    match event.op {
        Op::Release { .. } | Op::SetRate { .. } => tally.observe(event.at, &sample),
        _ => tally.record(event.at, &sample),
    }
}

/// Turns one event into its output line.
pub(crate) type Decide = Box<dyn for<'e> FnMut(&'e Event) -> Result<Output<'e>, EventError>>;

/// The function that decides events for `subject`.
pub(crate) fn decider(
    subject: Subject,
    backend: Backend,
    clock: ManualClock,
) -> Result<Decide, ReplayError> {
    match (subject, backend) {
        (Subject::Keyed(algorithm), Backend::Redis { url }) => {
            redis_decider(algorithm, &url, clock)
        }
        (Subject::Keyed(algorithm), Backend::Memory { max_keys }) => {
            let store: MemoryStore<Key, AnyState, ManualClock> = MemoryStore::builder()
                .max_keys(max_keys)
                .clock(clock)
                .build()
                .map_err(ReplayError::MaxKeys)?;
            let shapes = algorithm.supports(OpKind::Reserve);
            Ok(Box::new(move |event: &Event| {
                let d = store
                    .apply_now(&algorithm, event.key.as_str(), event.op)
                    .map_err(EventError::Unsupported)?;
                Ok(keyed_output(event, &d, shapes))
            }))
        }
        (Subject::Adaptive(spec), _) => Ok(adaptive::decider(&spec, clock)?),
        (Subject::Utilization { seed, settings }, _) => {
            let gauge = Arc::new(SettableUtilization::new(0.0));
            let shedder = UtilizationShedder::builder()
                .settings(settings)
                .sample_interval(Duration::ZERO)
                .seed(seed)
                .source(gauge)
                .clock(Arc::new(clock))
                .build()
                .map_err(SpecError::Invalid)?;
            let mut utilization = 0.0;
            Ok(Box::new(move |event: &Event| {
                if !matches!(event.op, Op::Check { .. }) {
                    return Err(EventError::NotACheck {
                        op: event.op.kind(),
                    });
                }
                utilization = event.utilization.unwrap_or(utilization);
                let shed = shedder.check_with(event.priority, utilization);
                Ok(Output {
                    t: event.t.clone(),
                    key: &event.key,
                    allowed: !shed.shed,
                    retry_after: shed.shed.then_some(SHED_RETRY_AFTER.as_secs_f64()),
                    shed_amount: Some(shed.shed_amount),
                    drop_probability: Some(shed.drop_probability),
                    ..Output::default()
                })
            }))
        }
    }
}

/// Decides on Redis, through the service's store with the trace's clock (see the
/// [module documentation](self)).
fn redis_decider(
    algorithm: AnyAlgorithm,
    url: &str,
    clock: ManualClock,
) -> Result<Decide, ReplayError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ReplayError::Runtime)?;
    let config = StoreConfig::at(url).with("timeout", "1s").with(
        "breaker",
        std::collections::BTreeMap::from([("threshold", 0)]),
    );
    let store = {
        let _context = runtime.enter();
        let explicit = clock.clone();
        ServiceStore::from_config_with(&config, Arc::new(clock), move |b| {
            b.clock(explicit).min_ttl(REDIS_MIN_TTL)
        })?
    };
    store.runs(&algorithm).map_err(ReplayError::NotOnStore)?;
    let shapes = algorithm.supports(OpKind::Reserve);
    let prefix = format!("replay-{:016x}:", rand::random::<u64>());
    let mut key = String::new();
    Ok(Box::new(move |event: &Event| {
        key.clear();
        key.push_str(&prefix);
        key.push_str(&event.key);
        let d = runtime
            .block_on(store.apply(&algorithm, &key, event.op))
            .map_err(|e| match e {
                e if e.is_transient() => EventError::Store(e),
                e => EventError::Unsupported(e),
            })?;
        Ok(keyed_output(event, &d, shapes))
    }))
}

fn keyed_output<'e>(event: &'e Event, d: &Decision, shapes: bool) -> Output<'e> {
    let in_flight = d.limit.saturating_sub(d.remaining);
    let mut out = Output {
        t: event.t.clone(),
        key: &event.key,
        allowed: d.allowed,
        limit: Some(d.limit),
        remaining: Some(d.remaining),
        reset_after: Some(d.reset_after.as_secs_f64()),
        retry_after: d.retry_after.map(|r| r.as_secs_f64()),
        wait: shapes.then_some(d.wait.as_secs_f64()),
        ..Output::default()
    };
    match event.op {
        Op::Acquire { .. } => {
            out.lease = if d.allowed {
                event.lease.as_deref()
            } else {
                None
            };
            out.in_flight = Some(in_flight);
        }
        Op::Release { .. } => {
            // A release is never refused; `released` tells whether the lease was held.
            out.allowed = true;
            out.released = Some(d.allowed);
            out.in_flight = Some(in_flight);
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_trace(spec: &str, trace: &str) -> Result<Vec<Value>, ReplayError> {
        let subject = load_spec(spec).unwrap().build().unwrap();
        let mut out = Vec::new();
        replay(
            subject,
            Backend::Memory { max_keys: 1000 },
            trace.as_bytes(),
            &mut out,
            None,
            true,
        )?;
        Ok(String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect())
    }

    const TB: &str = r#"{"algorithm":"token_bucket","rate":1,"capacity":2}"#;

    #[test]
    fn decisions_come_out_in_order_with_their_numbers() {
        let out = run_trace(TB, "{\"t\":0,\"key\":\"a\"}\n\n{\"t\":0,\"key\":\"a\"}\n{\"t\":0,\"key\":\"a\"}\n{\"t\":1.5,\"key\":\"a\"}\n").unwrap();
        let allowed: Vec<bool> = out
            .iter()
            .map(|o| o["allowed"].as_bool().unwrap())
            .collect();
        assert_eq!(allowed, [true, true, false, true]);
        assert_eq!(out[2]["retry_after"], 1.0);
        assert_eq!(out[0]["retry_after"], Value::Null);
        assert_eq!(out[3]["t"], 1.5);
        assert!(out[0].get("wait").is_none());
    }

    #[test]
    fn bad_lines_name_the_line_and_the_field() {
        let cases = [
            ("{\"t\":0}\nnot json\n", 2, "JSON"),
            ("{\"key\":\"a\"}\n", 1, "`t`"),
            ("{\"t\":0,\"cost\":-1}\n", 1, "`cost`"),
            ("{\"t\":5}\n{\"t\":4}\n", 2, "`t`"),
            ("{\"t\":0,\"op\":\"jump\"}\n", 1, "`op`"),
            ("{\"t\":0,\"op\":\"reserve\"}\n", 1, "`op`"),
            ("{\"t\":0,\"op\":\"acquire\"}\n", 1, "`op`"),
            ("{\"t\":0,\"priority\":\"urgent\"}\n", 1, "`priority`"),
            ("{\"t\":0,\"utilization\":2}\n", 1, "`utilization`"),
            ("{\"t\":0,\"key\":7}\n", 1, "`key`"),
        ];
        for (trace, line, field) in cases {
            match run_trace(TB, trace) {
                Err(ReplayError::Event { line: l, source }) => {
                    assert_eq!(l, line, "{trace}");
                    let message = source.to_string();
                    assert!(message.contains(field), "{message}");
                }
                other => panic!("{trace}: {other:?}"),
            }
        }
    }
}
