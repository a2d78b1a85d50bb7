//! `floodgate bench --rlqs`: load on running `floodgate serve` nodes' Rate Limit Quota Service
//! from many real gRPC streams, each behaving as one Envoy's RLQS filter client (see
//! [`stream`]), for sizing a fleet: what the nodes and their store spend per stream.
//!
//! `--streams N` streams are opened at `--ramp` per second, spread round-robin over the
//! `--target` addresses, `--streams-per-connection` of them on each HTTP/2 connection (each
//! Envoy has its own connection; every connection is a file descriptor of the bench, so mind
//! the open-file limit: the bench warns when the connections come near it). Every stream
//! reports the same `--buckets B` buckets `{name: bucket-K}` of `--domain`, so the streams
//! share B hot buckets, each wanting `--demand` requests per second per bucket.
//!
//! **The window.** Once every stream has opened (or failed), the measured window starts and
//! lasts `--duration`; the rates are over it, the totals over the whole run. Around the window
//! the bench reads the serve nodes' CPU time (`--pid`, `/proc/PID/stat`), Redis's `INFO
//! commandstats` (`--redis`, every master of a cluster) and its own CPU time; the nodes'
//! resident memory is read before the first stream and at the window's end.
//!
//! Output: a short summary for people, then, last, one JSON line ([`Report`]). Streams that
//! failed to open or ended with an error make the run fail after printing it.

pub mod probe;
pub mod stream;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use floodgate::{Clock, Nanos, SystemClock};
use serde::Serialize;
use tokio::sync::watch;
use tonic::transport::{Channel, Endpoint};

use super::Latencies;
use probe::ProcReading;
use stream::{Arrivals, Outcome, Plan, Tally, STRATEGIES};

/// The arguments of `floodgate bench` that `--rlqs` reads (with `--duration` and
/// `--threads`); each is refused with `--limiter` (a store's bench, which reads none).
#[derive(clap::Args, Debug)]
pub struct RlqsArgs {
    /// With --rlqs: a `floodgate serve` gRPC address, `http://HOST:PORT` (repeatable; the
    /// streams are spread over them round-robin).
    #[arg(
        long = "target",
        value_name = "URL",
        required_if_eq("rlqs", "true"),
        conflicts_with = "limiter"
    )]
    pub targets: Vec<String>,
    /// With --rlqs: streams to open (at least 1).
    #[arg(long, value_name = "N", default_value_t = 100, conflicts_with = "limiter", value_parser = floodgate_service::cli::at_least_one::<usize>)]
    pub streams: usize,
    /// With --rlqs: streams per HTTP/2 connection (at least 1); each connection is an open
    /// file of the bench.
    #[arg(long, value_name = "N", default_value_t = 100, conflicts_with = "limiter", value_parser = floodgate_service::cli::at_least_one::<usize>)]
    pub streams_per_connection: usize,
    /// With --rlqs: streams opened per second, at most (above 0).
    #[arg(long, value_name = "PER_SECOND", default_value_t = 1000.0, conflicts_with = "limiter", value_parser = positive)]
    pub ramp: f64,
    /// With --rlqs: buckets each stream reports, `{name: bucket-0}` and on (at least 1); every
    /// stream reports the same ones.
    #[arg(long, value_name = "B", default_value_t = 10, conflicts_with = "limiter", value_parser = floodgate_service::cli::at_least_one::<usize>)]
    pub buckets: usize,
    /// With --rlqs: the domain of every report.
    #[arg(
        long,
        value_name = "D",
        default_value = "bench",
        conflicts_with = "limiter"
    )]
    pub domain: String,
    /// With --rlqs: how often each stream reports its buckets, in whole seconds (Envoy's is 5s).
    #[arg(long, value_name = "D", default_value = "5s", conflicts_with = "limiter", value_parser = whole_seconds)]
    pub interval: Duration,
    /// With --rlqs: requests per second per bucket at each stream (above 0).
    #[arg(long, value_name = "PER_SECOND", default_value_t = 10.0, conflicts_with = "limiter", value_parser = positive)]
    pub demand: f64,
    /// With --rlqs: how the requests arrive: `poisson` or `even`.
    #[arg(
        long,
        value_name = "HOW",
        value_enum,
        default_value = "poisson",
        conflicts_with = "limiter"
    )]
    pub arrivals: Arrivals,
    /// With --rlqs: the seed of the streams' random draws (the same seed, the same draws).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        conflicts_with = "limiter"
    )]
    pub seed: u64,
    /// With --rlqs: a Redis whose `INFO commandstats` to read around the run (repeatable:
    /// every master of a cluster).
    #[arg(long = "redis", value_name = "URL", conflicts_with = "limiter")]
    pub redis: Vec<String>,
    /// With --rlqs: a serve node's process id, whose CPU time and resident memory to read
    /// from /proc (repeatable).
    #[arg(long = "pid", value_name = "PID", conflicts_with = "limiter")]
    pub pids: Vec<u32>,
}

/// A number above 0.
fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(n) if n > 0.0 && n.is_finite() => Ok(n),
        _ => Err(format!("`{text}` is not a number above 0")),
    }
}

/// A duration of whole seconds, at least 1 (Envoy's reports count whole seconds).
fn whole_seconds(text: &str) -> Result<Duration, String> {
    let d = floodgate_service::cli::positive_duration(text)?;
    if d.subsec_nanos() != 0 {
        return Err(format!("`{text}` is not whole seconds: e.g. 1s or 5s"));
    }
    Ok(d)
}

/// Why an RLQS bench could not run, or failed.
#[derive(Debug, thiserror::Error)]
pub enum RlqsError {
    /// A `--target` is not a URL.
    #[error("--target: `{0}` is not a gRPC address: expected http://HOST:PORT")]
    Target(String),
    /// The runtime could not be started.
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// A Redis could not be read before the run.
    #[error("{0}")]
    Redis(String),
    /// Streams failed to open or ended with an error: the figures printed are of a run that
    /// partly failed.
    #[error("{failed} of {streams} streams failed to open or ended with an error (the first: {first}); the figures above are of a run that partly failed")]
    Streams {
        /// Streams that failed.
        failed: u64,
        /// Streams tried.
        streams: usize,
        /// The first error: its code and message.
        first: String,
    },
}

/// An RLQS bench's result: the last line of its output, as JSON.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Streams tried, opened (the call answered) and failed (connection or call refused).
    pub streams: usize,
    /// Of which opened.
    pub streams_opened: u64,
    /// Of which failed to open.
    pub streams_failed: u64,
    /// HTTP/2 connections used, and the targets they went to.
    pub connections: usize,
    /// The `--target` addresses.
    pub targets: usize,
    /// Buckets per stream.
    pub buckets: usize,
    /// Seconds from the first stream to the last one opened (or failed).
    pub ramp_seconds: f64,
    /// Seconds of the measured window, which the rates are over.
    pub seconds: f64,
    /// Bucket reports sent over the whole run (a message of 10 buckets counts 10).
    pub reports_sent: u64,
    /// Messages sent over the whole run.
    pub messages_sent: u64,
    /// Messages not sent because a stream's buffer was full (the server not reading).
    pub messages_dropped: u64,
    /// Bucket reports per second, over the window.
    pub reports_per_second: f64,
    /// Bucket actions received over the whole run, by strategy (`token_bucket`, `deny_all`,
    /// `allow_all`, `abandon`).
    pub assignments: BTreeMap<&'static str, u64>,
    /// Bucket actions received per second over the window, by strategy.
    pub assignments_per_second: BTreeMap<&'static str, f64>,
    /// `DENY_ALL` assignments received over the whole run.
    pub deny_all: u64,
    /// (Stream, bucket) pairs holding `DENY_ALL` at the end.
    pub holding_deny_all: u64,
    /// (Stream, bucket) pairs that got a first assignment, and those that never did.
    pub first_assignments: u64,
    /// Pairs of opened streams never assigned.
    pub never_assigned: u64,
    /// Time from a bucket's first report to its first assignment, at one stream: median,
    /// 99th percentile and max, in milliseconds (`None` without any).
    pub first_assignment_p50_ms: Option<f64>,
    /// 99th percentile.
    pub first_assignment_p99_ms: Option<f64>,
    /// The slowest.
    pub first_assignment_max_ms: Option<f64>,
    /// Streams that failed to open or ended with an error.
    pub stream_errors: u64,
    /// Those errors by gRPC status code (`Unavailable`, …), `connect` or `closed`.
    pub stream_errors_by_code: BTreeMap<String, u64>,
    /// Redis's commands over the window (`--redis`), when read.
    pub redis: Option<RedisFigures>,
    /// Each `--pid` node's CPU and memory.
    pub nodes: Vec<NodeFigures>,
    /// The nodes' cores used over the window, summed.
    pub node_cpu_cores: Option<f64>,
    /// The nodes' resident memory grown over the run, summed, per stream opened, in KiB.
    pub node_kib_per_stream: Option<f64>,
    /// The bench's own cores used over the window (a bench near its cores measures itself).
    pub bench_cpu_cores: Option<f64>,
}

/// What Redis ran over the window (every client's commands: run alone on it).
#[derive(Clone, Debug, Serialize)]
pub struct RedisFigures {
    /// Commands run (the bench's own `INFO` left out).
    pub calls: u64,
    /// Per second.
    pub calls_per_second: f64,
    /// Per second and per hot bucket.
    pub calls_per_bucket_per_second: f64,
    /// Commands run, by command.
    pub by_command: BTreeMap<String, u64>,
}

/// One serve node's CPU and memory.
#[derive(Clone, Debug, Serialize)]
pub struct NodeFigures {
    /// Its process id.
    pub pid: u32,
    /// Cores used over the window.
    pub cpu_cores: Option<f64>,
    /// Resident memory before the first stream, in KiB.
    pub rss_before_kib: Option<u64>,
    /// At the window's end.
    pub rss_after_kib: Option<u64>,
}

/// Runs the bench for `duration` on `threads` threads (default one per core), and prints its
/// summary and JSON line.
pub fn run(args: &RlqsArgs, duration: Duration, threads: Option<usize>) -> Result<(), RlqsError> {
    let endpoints = args
        .targets
        .iter()
        .map(|url| {
            Endpoint::from_shared(url.clone())
                .map(|e| e.connect_timeout(Duration::from_secs(5)))
                .map_err(|_| RlqsError::Target(url.clone()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = threads {
        runtime.worker_threads(threads);
    }
    let runtime = runtime.enable_all().build().map_err(RlqsError::Runtime)?;
    let (report, outcomes) = runtime.block_on(drive(args, endpoints, duration))?;
    println!("{}", summary(args, &report));
    // Serializing plain numbers and strings cannot fail.
    println!("{}", serde_json::to_string(&report).unwrap_or_default());
    let first = outcomes.iter().find_map(|o| o.error.as_ref());
    match first {
        Some((code, message)) => Err(RlqsError::Streams {
            failed: report.stream_errors,
            streams: args.streams,
            first: format!("{code}: {message}"),
        }),
        None => Ok(()),
    }
}

/// The readings taken around the window: the clock, the counters, the processes, Redis.
struct Reading {
    at: Nanos,
    counts: Counts,
    nodes: Vec<ProcReading>,
    me: ProcReading,
    redis: Option<BTreeMap<String, u64>>,
}

impl Reading {
    async fn take(args: &RlqsArgs, plan: &Plan) -> Reading {
        let redis = if args.redis.is_empty() {
            None
        } else {
            match probe::read_commandstats(&args.redis).await {
                Ok(calls) => Some(calls),
                Err(e) => {
                    eprintln!("floodgate bench: {e}");
                    None
                }
            }
        };
        Reading {
            at: plan.clock.now(),
            counts: Counts::of(&plan.tally),
            nodes: args
                .pids
                .iter()
                .map(|p| ProcReading::read(&p.to_string()))
                .collect(),
            me: ProcReading::read("self"),
            redis,
        }
    }
}

/// The counters at one moment.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    usages: u64,
    messages: u64,
    dropped: u64,
    actions: [u64; 4],
}

impl Counts {
    fn of(tally: &Tally) -> Counts {
        let read = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        Counts {
            usages: read(&tally.usages),
            messages: read(&tally.messages),
            dropped: read(&tally.dropped),
            actions: [0, 1, 2, 3].map(|i| read(&tally.actions[i])),
        }
    }
}

/// Opens the streams, measures the window, stops them: the report and each stream's outcome.
async fn drive(
    args: &RlqsArgs,
    endpoints: Vec<Endpoint>,
    duration: Duration,
) -> Result<(Report, Vec<Outcome>), RlqsError> {
    if !args.redis.is_empty() {
        // A Redis that cannot be read is named before the run, not left out of it.
        probe::read_commandstats(&args.redis)
            .await
            .map_err(RlqsError::Redis)?;
    }
    let plan = Arc::new(Plan {
        domain: args.domain.clone(),
        buckets: args.buckets,
        interval: args.interval,
        demand: args.demand,
        arrivals: args.arrivals,
        seed: args.seed,
        tally: Tally::default(),
        clock: SystemClock::new(),
    });
    let start = Reading::take(args, &plan).await;
    let (stop, stopped) = watch::channel(false);
    let mut connections = Connections::new(endpoints, args.streams_per_connection);
    warn_of_the_file_limit(connections.needed(args.streams));
    let mut handles = Vec::with_capacity(args.streams);
    for i in 0..args.streams {
        let due = start
            .at
            .saturating_add(Duration::from_secs_f64(i as f64 / args.ramp));
        tokio::time::sleep(due.saturating_since(plan.clock.now())).await;
        let channel = connections.for_stream(i).await;
        handles.push(tokio::spawn(plan.clone().stream(
            i as u64,
            channel,
            stopped.clone(),
        )));
    }
    all_opened(&plan, args.streams).await;
    let window = Reading::take(args, &plan).await;
    tokio::time::sleep(duration).await;
    let end = Reading::take(args, &plan).await;
    let _ = stop.send(true);
    let mut outcomes = Vec::with_capacity(handles.len());
    for handle in handles {
        // A stream's task panics only on a bug; its figures are then missing.
        if let Ok(outcome) = handle.await {
            outcomes.push(outcome);
        }
    }
    let readings = [start, window, end];
    let report = report(args, &plan, &readings, &outcomes, connections.opened());
    Ok((report, outcomes))
}

/// Waits until every stream has opened or failed (at most a minute: a call the server never
/// answers is then still counted as neither).
async fn all_opened(plan: &Plan, streams: usize) {
    for _ in 0..6000 {
        let done =
            plan.tally.opened.load(Ordering::Relaxed) + plan.tally.failed.load(Ordering::Relaxed);
        if done >= streams as u64 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Says so on stderr when the connections come near the open-file limit (each is a descriptor).
fn warn_of_the_file_limit(connections: usize) {
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| probe::open_files_limit(&l));
    if let Some(limit) = limit.filter(|&l| (connections as u64) + 64 > l) {
        eprintln!(
            "floodgate bench: {connections} connections near the open-file limit ({limit}): \
             raise it (ulimit -n) or --streams-per-connection"
        );
    }
}

/// The HTTP/2 connections, opened as the ramp first needs each: stream `i` goes to target
/// `i mod T`, and the `j`-th stream of a target to its connection `j / per_connection`.
struct Connections {
    endpoints: Vec<Endpoint>,
    per_connection: usize,
    /// By target, then by connection: the channel, or why it could not connect.
    open: Vec<Vec<Result<Channel, String>>>,
}

impl Connections {
    fn new(endpoints: Vec<Endpoint>, per_connection: usize) -> Connections {
        let open = endpoints.iter().map(|_| Vec::new()).collect();
        Connections {
            endpoints,
            per_connection,
            open,
        }
    }

    /// Connections `streams` streams need.
    fn needed(&self, streams: usize) -> usize {
        let targets = self.endpoints.len().max(1);
        (0..targets)
            .map(|t| (streams + targets - 1 - t) / targets)
            .map(|on_target| on_target.div_ceil(self.per_connection))
            .sum()
    }

    async fn for_stream(&mut self, i: usize) -> Result<Channel, String> {
        let targets = self.endpoints.len();
        let (target, j) = (i % targets, i / targets);
        let connection = j / self.per_connection;
        while self.open[target].len() <= connection {
            let connected = self.endpoints[target].connect().await.map_err(|e| {
                let source = std::error::Error::source(&e).map(|s| format!(": {s}"));
                format!("{}{}", e, source.unwrap_or_default())
            });
            self.open[target].push(connected);
        }
        self.open[target][connection].clone()
    }

    /// Connections opened (or tried).
    fn opened(&self) -> usize {
        self.open.iter().map(Vec::len).sum()
    }
}

/// The report, from the readings at the start, the window's start and its end, and the
/// streams' outcomes.
fn report(
    args: &RlqsArgs,
    plan: &Plan,
    [start, window, end]: &[Reading; 3],
    outcomes: &[Outcome],
    connections: usize,
) -> Report {
    let seconds = end.at.saturating_since(window.at).as_secs_f64();
    let per_second = |n: u64| n as f64 / seconds.max(f64::MIN_POSITIVE);
    let (total, grown) = (end.counts, window.counts);
    let strategies = STRATEGIES.iter().enumerate();
    let mut first = Latencies::new();
    outcomes
        .iter()
        .flat_map(|o| &o.first_assignment_ns)
        .for_each(|&ns| first.record(ns));
    let first_ms = |q: f64| (first.count() > 0).then(|| first.quantile(q) as f64 / 1e6);
    let opened = plan.tally.opened.load(Ordering::Relaxed);
    let failed = plan.tally.failed.load(Ordering::Relaxed);
    let by_code = stream::errors_by_code(outcomes);
    let (nodes, node_kib_per_stream) = node_figures(args, start, window, end, seconds, opened);
    let node_cpu_cores = nodes.iter().map(|n| n.cpu_cores).sum::<Option<f64>>();
    Report {
        streams: args.streams,
        streams_opened: opened,
        streams_failed: failed,
        connections,
        targets: args.targets.len(),
        buckets: args.buckets,
        ramp_seconds: window.at.saturating_since(start.at).as_secs_f64(),
        seconds,
        reports_sent: total.usages,
        messages_sent: total.messages,
        messages_dropped: total.dropped,
        reports_per_second: per_second(total.usages - grown.usages),
        assignments: strategies
            .clone()
            .map(|(i, s)| (*s, total.actions[i]))
            .collect(),
        assignments_per_second: strategies
            .map(|(i, s)| (*s, per_second(total.actions[i] - grown.actions[i])))
            .collect(),
        deny_all: total.actions[1],
        holding_deny_all: outcomes.iter().map(|o| o.holding_deny_all).sum(),
        first_assignments: first.count(),
        never_assigned: (opened * args.buckets as u64).saturating_sub(first.count()),
        first_assignment_p50_ms: first_ms(0.5),
        first_assignment_p99_ms: first_ms(0.99),
        first_assignment_max_ms: (first.count() > 0).then(|| first.max() as f64 / 1e6),
        stream_errors: by_code.values().sum(),
        stream_errors_by_code: by_code,
        redis: redis_figures(window, end, seconds, args.buckets),
        nodes,
        node_cpu_cores,
        node_kib_per_stream,
        bench_cpu_cores: end.me.cores_since(&window.me, seconds),
    }
}

/// Each node's figures, and their memory grown per stream opened.
fn node_figures(
    args: &RlqsArgs,
    start: &Reading,
    window: &Reading,
    end: &Reading,
    seconds: f64,
    opened: u64,
) -> (Vec<NodeFigures>, Option<f64>) {
    let nodes: Vec<NodeFigures> = args
        .pids
        .iter()
        .enumerate()
        .map(|(i, &pid)| NodeFigures {
            pid,
            cpu_cores: end.nodes[i].cores_since(&window.nodes[i], seconds),
            rss_before_kib: start.nodes[i].rss_kib,
            rss_after_kib: end.nodes[i].rss_kib,
        })
        .collect();
    let grown = nodes
        .iter()
        .map(|n| Some(n.rss_after_kib? as f64 - n.rss_before_kib? as f64))
        .sum::<Option<f64>>();
    let per_stream = grown
        .filter(|_| !nodes.is_empty() && opened > 0)
        .map(|g| g / opened as f64);
    (nodes, per_stream)
}

/// Redis's commands over the window, when both readings were taken.
fn redis_figures(
    window: &Reading,
    end: &Reading,
    seconds: f64,
    buckets: usize,
) -> Option<RedisFigures> {
    let by_command = probe::commands_since(end.redis.as_ref()?, window.redis.as_ref()?);
    let calls: u64 = by_command.values().sum();
    let calls_per_second = calls as f64 / seconds.max(f64::MIN_POSITIVE);
    Some(RedisFigures {
        calls,
        calls_per_second,
        calls_per_bucket_per_second: calls_per_second / buckets as f64,
        by_command,
    })
}

/// The summary for people.
fn summary(args: &RlqsArgs, r: &Report) -> String {
    let rate = |s: &str| r.assignments_per_second.get(s).copied().unwrap_or(0.0);
    let mut out = format!(
        "floodgate bench --rlqs: {} streams ({} opened, {} failed) over {} connections to {} \
         target(s), {} buckets each of domain {}, {} per second per bucket, report every {} s\n\
         ramp {:.2} s, then a window of {:.2} s\n\
         reports: {} bucket reports in {} messages ({} dropped), {:.0} per second\n\
         assignments per second: token_bucket {:.1}, deny_all {:.1}, allow_all {:.1}, abandon \
         {:.1} ({} DENY_ALL in all, {} held at the end)",
        r.streams,
        r.streams_opened,
        r.streams_failed,
        r.connections,
        r.targets,
        r.buckets,
        args.domain,
        args.demand,
        args.interval.as_secs(),
        r.ramp_seconds,
        r.seconds,
        r.reports_sent,
        r.messages_sent,
        r.messages_dropped,
        r.reports_per_second,
        rate("token_bucket"),
        rate("deny_all"),
        rate("allow_all"),
        rate("abandon"),
        r.deny_all,
        r.holding_deny_all,
    );
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1} ms"));
    out.push_str(&format!(
        "\nfirst assignment of a bucket: p50 {}, p99 {}, max {} ({} assigned, {} never)",
        ms(r.first_assignment_p50_ms),
        ms(r.first_assignment_p99_ms),
        ms(r.first_assignment_max_ms),
        r.first_assignments,
        r.never_assigned,
    ));
    out.push_str(&format!(
        "\nstream errors: {} {:?}",
        r.stream_errors, r.stream_errors_by_code
    ));
    if let Some(redis) = &r.redis {
        out.push_str(&format!(
            "\nredis: {} commands, {:.0} per second, {:.1} per bucket per second {:?}",
            redis.calls,
            redis.calls_per_second,
            redis.calls_per_bucket_per_second,
            redis.by_command
        ));
    }
    for n in &r.nodes {
        let kib = |v: Option<u64>| v.map_or("-".to_string(), |v| format!("{v} KiB"));
        let cores = n.cpu_cores.map_or("-".to_string(), |c| format!("{c:.2}"));
        out.push_str(&format!(
            "\nnode {}: {cores} cores, resident {} before, {} after",
            n.pid,
            kib(n.rss_before_kib),
            kib(n.rss_after_kib)
        ));
    }
    if let Some(kib) = r.node_kib_per_stream {
        out.push_str(&format!("\nnodes' memory per stream: {kib:.1} KiB"));
    }
    if let Some(cores) = r.bench_cpu_cores {
        out.push_str(&format!("\nthe bench itself: {cores:.2} cores"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_spread_round_robin_over_targets_then_connections() {
        let endpoint = |port| Endpoint::from_shared(format!("http://127.0.0.1:{port}")).unwrap();
        let connections = Connections::new(vec![endpoint(1), endpoint(2)], 3);
        // 7 streams on 2 targets: 4 on the first (2 connections), 3 on the second (1).
        assert_eq!(connections.needed(7), 3);
        assert_eq!(connections.needed(1), 1);
        assert_eq!(Connections::new(vec![endpoint(1)], 100).needed(10_000), 100);
    }

    #[test]
    fn arguments_are_checked() {
        assert_eq!(whole_seconds("5s"), Ok(Duration::from_secs(5)));
        assert!(whole_seconds("1500ms").is_err());
        assert!(whole_seconds("0s").is_err());
        assert_eq!(positive("2.5"), Ok(2.5));
        assert!(positive("0").is_err() && positive("-1").is_err() && positive("x").is_err());
    }
}
