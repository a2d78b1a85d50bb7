//! `floodgate bench`: how many decisions per second a store gives, driven in-process the way
//! the service drives it, for sizing (how many nodes, which store).
//!
//! `--concurrency C` tasks on a multi-threaded Tokio runtime each loop for `--duration`: pick a
//! key at random among `--keys N`, make one decision with one [`Store::apply`] (`check`, cost
//! 1; for the lease limiters an `acquire`, and its `release` right after when it was granted,
//! counted as one decision timed by its `acquire`), record its latency, and yield to the
//! runtime every 64 decisions. The limiter is
//! `replay`'s spec (`{"algorithm": "gcra", …}` or `{"limiter": "concurrency", …}`); the
//! utilization shedder has no store and is refused. The store is built exactly as
//! `serve --store URL` builds it (timeout, breaker), and the keys live in a namespace of the
//! run's own (`bench-RANDOM:`), so runs never see each other's state.
//!
//! Output: a short summary for people, then, last, one JSON line:
//! `{"decisions", "seconds", "decisions_per_second", "p50_ms", "p99_ms", "errors"}` (plus
//! `allowed`, `p999_ms`, `max_ms`, `store`; on Redis `redis_calls` and
//! `redis_usec_per_decision`, read from Redis's `INFO commandstats` around the run, and the
//! group commit's `batch_mean_size` and `batch_sizes`). Latencies go into a log-linear histogram
//! ([`Latencies`]: every value within 1% of its bucket's lower bound).
//!
//! With `--rlqs`, it measures running `floodgate serve` nodes' Rate Limit Quota Service
//! instead, from many gRPC streams behaving as Envoys ([`rlqs`]).
//!
//! This is a measuring tool, not a decision path: durations come from the real monotonic
//! clock, [`SystemClock`].

use std::sync::Arc;
use std::time::Duration;

use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::algorithm::Algorithm;
use floodgate::store::redis::{BatchStats, ScriptTime};
use floodgate::store::{Store, StoreStats};
use floodgate::{Clock, LeaseId, Op, OpKind, SystemClock};
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::replay::{load_spec, SpecError, Subject};
use floodgate_service::config::{ConfigFileError, OverflowPolicy, StoreConfig, StoreMode};
use floodgate_service::store::ServiceStore;

pub mod rlqs;

/// Arguments of `floodgate bench`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// `--store URL` (default `memory`).
    #[command(flatten)]
    pub store: floodgate_service::cli::StoreArg,
    /// The limiter, as `replay --limiter` takes it: a JSON spec such as
    /// '{"algorithm":"token_bucket","rate":100,"capacity":200}', or a YAML/JSON file's path
    /// (required unless --rlqs is given).
    #[arg(
        long,
        value_name = "SPEC",
        required_unless_present = "rlqs",
        conflicts_with = "rlqs"
    )]
    pub limiter: Option<String>,
    /// Measures running `floodgate serve` nodes' Rate Limit Quota Service (--target) from
    /// gRPC streams that behave as Envoys, instead of a store.
    #[arg(long)]
    pub rlqs: bool,
    /// The options of --rlqs.
    #[command(flatten)]
    pub rlqs_load: rlqs::RlqsArgs,
    /// How many distinct keys the decisions spread over, at random (at least 1).
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = floodgate_service::cli::at_least_one::<u64>)]
    pub keys: u64,
    /// Requests in flight at once (at least 1).
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = floodgate_service::cli::at_least_one::<usize>)]
    pub concurrency: usize,
    /// How long to run (above 0: `10s`, `500ms`, `1m30s`).
    #[arg(long, value_name = "D", default_value = "10s", value_parser = floodgate_service::cli::positive_duration)]
    pub duration: Duration,
    /// Threads deciding (at least 1; default: one per core).
    #[arg(long, value_name = "N", value_parser = floodgate_service::cli::at_least_one::<usize>)]
    pub threads: Option<usize>,
    /// How a Redis store is used, as the config's `store.mode`: `exact` (a round trip per
    /// decision) or `cached` (local decisions, synced every `--sync-interval`).
    #[arg(long, value_name = "MODE", default_value = "exact")]
    pub mode: String,
    /// Cached mode's sync interval (`100ms` by default).
    #[arg(long, value_name = "D", value_parser = floodgate_service::cli::positive_duration)]
    pub sync_interval: Option<Duration>,
    /// A Redis store's bound on each call, as the config's `store.timeout` (50 ms by
    /// default): a call slower than it fails, and the bench counts it as an error.
    #[arg(long, value_name = "D", value_parser = floodgate_service::cli::positive_duration)]
    pub store_timeout: Option<Duration>,
    /// A Redis store's group commit, as the config's `store.batch_max_keys`: the most keys one
    /// script call carries (default 128, at most 1024; 0 or 1: one call per decision).
    #[arg(long, value_name = "N")]
    pub batch_max_keys: Option<usize>,
    /// The memory store's bound, as the config's `store.max_keys` (at least 1): with `--keys`
    /// above it, the bench is a flood of distinct keys (see RELIABILITY.md).
    #[arg(long, value_name = "N", default_value_t = 1_000_000, value_parser = floodgate_service::cli::at_least_one::<usize>)]
    pub max_keys: usize,
    /// The memory store's overflow policy, as the config's `store.overflow`: `evict_live` or
    /// `refuse_new`.
    #[arg(long, value_name = "POLICY", value_enum, default_value = "evict_live")]
    pub overflow: OverflowPolicy,
}

/// Why a bench could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The `--limiter` spec could not be read or is invalid.
    #[error("--limiter: {0}")]
    Spec(#[from] SpecError),
    /// No `--limiter` was given (nor `--rlqs`).
    #[error("--limiter: a limiter to bench is needed (or --rlqs)")]
    NoLimiter,
    /// The RLQS bench could not run, or failed.
    #[error(transparent)]
    Rlqs(#[from] rlqs::RlqsError),
    /// The limiter has no store to drive.
    #[error("--limiter: the utilization shedder and the adaptive concurrency limiter keep no state in a store; bench a keyed algorithm or the concurrency or fleet limiter")]
    NoStore,
    /// An argument's value is not allowed.
    #[error("--{arg}: invalid value `{value}` ({why})")]
    Invalid {
        /// The argument.
        arg: &'static str,
        /// The value as given.
        value: String,
        /// What it must be.
        why: &'static str,
    },
    /// The store could not be set up.
    #[error("--store: {0}")]
    Store(#[from] ConfigFileError),
    /// The store cannot run the limiter's algorithm.
    #[error("--limiter: {0}; use another algorithm or --store memory")]
    NotOnStore(#[source] floodgate::StoreError),
    /// The runtime could not be started.
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The store could not be used before the run (tried as `serve` tries it at start-up).
    #[error("--store: cannot use the store {url}: {error} (tried for {})", floodgate::duration::format_duration(*.waited))]
    StoreDown {
        /// The store's URL, any password redacted.
        url: String,
        /// The last try's failure.
        error: floodgate::StoreError,
        /// How long it was tried.
        waited: Duration,
    },
    /// Store calls failed during the run: its figures measure failures, not decisions.
    #[error("{errors} of {calls} store calls failed during the run (the last: {last}); the figures above are not a measurement of the store")]
    CallsFailed {
        /// Calls that failed.
        errors: u64,
        /// Calls made.
        calls: u64,
        /// The last failure.
        last: floodgate::StoreError,
    },
}

/// A bench's result: the last line of its output, as JSON.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Decisions made (calls that failed with a store error are not decisions).
    pub decisions: u64,
    /// Of which allowed.
    pub allowed: u64,
    /// Calls that failed with a store error (any makes the bench exit non-zero).
    pub errors: u64,
    /// How long the run took, in seconds.
    pub seconds: f64,
    /// `decisions / seconds`.
    pub decisions_per_second: f64,
    /// Median latency of one decision, in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile, in milliseconds.
    pub p99_ms: f64,
    /// 99.9th percentile, in milliseconds.
    pub p999_ms: f64,
    /// The slowest decision, in milliseconds.
    pub max_ms: f64,
    /// The store's kind.
    pub store: &'static str,
    /// The process's peak resident memory (`VmHWM`, Linux), in MiB.
    pub peak_rss_mib: Option<f64>,
    /// The memory store's keys at the end, and its evictions and refusals of new keys.
    pub memory: Option<StoreStats>,
    /// A Redis store's script calls during the run, as Redis counts them (`INFO
    /// commandstats`, every master of a cluster; other clients' calls included, so run alone).
    pub redis_calls: Option<u64>,
    /// Microseconds Redis spent running scripts during the run, per decision.
    pub redis_usec_per_decision: Option<f64>,
    /// A Redis store's group commit during the run: decisions per script call.
    pub batch_mean_size: Option<f64>,
    /// How many calls carried how many decisions: `(at_most, calls)` for the buckets `1`, `2`,
    /// `3–4`, `5–8`, ….
    pub batch_sizes: Option<Vec<(u64, u64)>>,
}

/// The process's peak resident set size in MiB, from `/proc/self/status` (`None` elsewhere).
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Runs the bench and prints its summary and JSON line to stdout; a run in which store calls
/// failed prints them too, then is an error ([`BenchError::CallsFailed`]).
pub fn run(args: &Args) -> Result<(), BenchError> {
    if args.rlqs {
        return Ok(rlqs::run(&args.rlqs_load, args.duration, args.threads)?);
    }
    let (report, summary, last_error) = bench(args)?;
    println!("{summary}");
    // Serializing plain numbers cannot fail.
    println!("{}", serde_json::to_string(&report).unwrap_or_default());
    match last_error {
        Some(last) => Err(BenchError::CallsFailed {
            errors: report.errors,
            calls: report.decisions + report.errors,
            last,
        }),
        None => Ok(()),
    }
}

/// Runs the bench; returns the report, the summary for people, and the last store error of
/// the run, if any call failed.
pub fn bench(args: &Args) -> Result<(Report, String, Option<floodgate::StoreError>), BenchError> {
    let limiter = args.limiter.as_deref().ok_or(BenchError::NoLimiter)?;
    let algorithm = keyed_algorithm(limiter)?;
    let duration = args.duration;
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.threads {
        runtime.worker_threads(threads);
    }
    let runtime = runtime.enable_all().build().map_err(BenchError::Runtime)?;
    let config = store_config(args)?;
    // As `serve` does: the store lives on a runtime of its own (a Redis connection's
    // housekeeping, cached mode's sync loop), apart from the tasks deciding.
    let store_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("floodgate-store")
        .enable_all()
        .build()
        .map_err(BenchError::Runtime)?;
    let store = usable_store(&config, &algorithm, &store_runtime)?;
    let run = Run {
        store: store.clone(),
        algorithm,
        keys: args.keys,
        prefix: format!("bench-{:08x}:", rand::random::<u32>()),
        clock: SystemClock::new(),
    };
    let redis_before = RedisReading::before(&store, &store_runtime);
    let (mut totals, seconds) = runtime.block_on(run.drive(args.concurrency, duration));
    let redis = RedisFigures::since(redis_before, &store, &store_runtime, &totals);
    let last_error = totals.last_error.take();
    let report = report(&totals, seconds, &store, redis);
    let summary = summary(args, &store, &run.algorithm, &report);
    Ok((report, summary, last_error))
}

/// The keyed algorithm of the `--limiter` spec; the limiters without a store are refused.
fn keyed_algorithm(limiter: &str) -> Result<AnyAlgorithm, BenchError> {
    match load_spec(limiter)?.build().map_err(SpecError::Invalid)? {
        Subject::Keyed(algorithm) => Ok(algorithm),
        Subject::Utilization { .. } | Subject::Adaptive(_) => Err(BenchError::NoStore),
    }
}

/// The store's configuration, as the config file's `store` section would give it.
fn store_config(args: &Args) -> Result<StoreConfig, BenchError> {
    let mode = match args.mode.as_str() {
        "exact" => StoreMode::Exact,
        "cached" => StoreMode::Cached,
        other => {
            return Err(BenchError::Invalid {
                arg: "mode",
                value: other.into(),
                why: "exact or cached",
            })
        }
    };
    let mut config = StoreConfig::default();
    config.url = args.store.or_env();
    // Only what the command line sets is written, so that each store is given what it takes.
    if mode == StoreMode::Cached {
        config.set("mode", mode.name());
    }
    if let Some(every) = args.sync_interval {
        config.set("sync_interval", StoreConfig::duration(every));
    }
    if config.takes("max_keys") {
        config.set("max_keys", args.max_keys);
    }
    if config.takes("overflow") {
        config.set("overflow", args.overflow);
    }
    if let Some(max_keys) = args.batch_max_keys {
        config.set("batch_max_keys", max_keys);
    }
    if let Some(timeout) = args.store_timeout {
        config.set("timeout", StoreConfig::duration(timeout));
    }
    Ok(config)
}

/// The store, built on `store_runtime` and checked as `serve` checks it at start-up: it runs
/// the algorithm, and it can be used.
fn usable_store(
    config: &StoreConfig,
    algorithm: &AnyAlgorithm,
    store_runtime: &tokio::runtime::Runtime,
) -> Result<ServiceStore, BenchError> {
    let store = {
        let _context = store_runtime.enter();
        ServiceStore::from_config(config)?
    };
    store.runs(algorithm).map_err(BenchError::NotOnStore)?;
    // As `serve` does at start-up: a store that cannot be used is named, not measured.
    let waited = floodgate_service::store::STARTUP_TIMEOUT;
    if let Err(error) = store_runtime.block_on(store.wait_until_usable(Some(waited), None)) {
        return Err(BenchError::StoreDown {
            url: store.health().url().to_string(),
            error,
            waited,
        });
    }
    Ok(store)
}

/// Redis's own counts before the run: its script time (`None` when the reading failed) and
/// the group commit's batches.
struct RedisReading {
    script_time: Option<ScriptTime>,
    batches: BatchStats,
}

impl RedisReading {
    /// The reading before the run; `None` for the memory store.
    fn before(store: &ServiceStore, store_runtime: &tokio::runtime::Runtime) -> Option<Self> {
        store.redis().map(|redis| RedisReading {
            script_time: store_runtime.block_on(redis.script_time()).ok(),
            batches: redis.batch_stats(),
        })
    }
}

/// What Redis counted during the run, for the report (each `None` when not known).
#[derive(Default)]
struct RedisFigures {
    calls: Option<u64>,
    usec_per_decision: Option<f64>,
    batch_mean_size: Option<f64>,
    batch_sizes: Option<Vec<(u64, u64)>>,
}

impl RedisFigures {
    /// The difference between Redis's counts now and `before`; a failed reading leaves the
    /// script figures out, and a run without batches the batch figures.
    fn since(
        before: Option<RedisReading>,
        store: &ServiceStore,
        store_runtime: &tokio::runtime::Runtime,
        totals: &Totals,
    ) -> RedisFigures {
        let mut figures = RedisFigures::default();
        let (Some(redis), Some(before)) = (store.redis(), before) else {
            return figures;
        };
        let time_after = store_runtime.block_on(redis.script_time()).ok();
        if let (Some(before), Some(after)) = (before.script_time, time_after) {
            let used = after.since(before);
            figures.calls = Some(used.calls);
            figures.usec_per_decision =
                Some(used.usec as f64 / (totals.decisions + totals.errors).max(1) as f64);
        }
        let batches = redis.batch_stats().since(&before.batches);
        if batches.calls > 0 {
            figures.batch_mean_size = Some(batches.mean_size());
            figures.batch_sizes = Some(batches.sizes);
        }
        figures
    }
}

/// The run's report, from its merged counts and what Redis counted.
fn report(totals: &Totals, seconds: f64, store: &ServiceStore, redis: RedisFigures) -> Report {
    let ms = |q| totals.latencies.quantile(q) as f64 / 1e6;
    Report {
        decisions: totals.decisions,
        allowed: totals.allowed,
        errors: totals.errors,
        seconds,
        decisions_per_second: totals.decisions as f64 / seconds.max(f64::MIN_POSITIVE),
        p50_ms: ms(0.5),
        p99_ms: ms(0.99),
        p999_ms: ms(0.999),
        max_ms: totals.latencies.max() as f64 / 1e6,
        store: store.kind(),
        peak_rss_mib: peak_rss_mib(),
        memory: store.memory_stats(),
        redis_calls: redis.calls,
        redis_usec_per_decision: redis.usec_per_decision,
        batch_mean_size: redis.batch_mean_size,
        batch_sizes: redis.batch_sizes,
    }
}

/// The summary for people: the run, its decisions and latencies, then a line for each of the
/// memory store, the peak memory, Redis, the group commit and cached mode that has figures.
fn summary(args: &Args, store: &ServiceStore, algorithm: &AnyAlgorithm, report: &Report) -> String {
    let mut summary = format!(
        "floodgate bench: {} store ({}), {} algorithm, {} keys, {} in flight, {:.2} s\n\
         decisions: {} ({} allowed; {} store calls failed): {:.0} per second\n\
         latency of one decision: p50 {}, p99 {}, p99.9 {}, max {}",
        store.kind(),
        store.health().url(),
        algorithm.name(),
        args.keys,
        args.concurrency,
        report.seconds,
        report.decisions,
        report.allowed,
        report.errors,
        report.decisions_per_second,
        shown(report.p50_ms),
        shown(report.p99_ms),
        shown(report.p999_ms),
        shown(report.max_ms),
    );
    if let Some(m) = &report.memory {
        summary.push_str(&format!(
            "\nmemory store: {} keys held (max {}), {} idle keys dropped, {} live keys evicted, \
             {} requests of new keys refused",
            m.keys, args.max_keys, m.evicted_idle, m.evicted_live, m.refused_new
        ));
    }
    if let Some(peak) = report.peak_rss_mib {
        summary.push_str(&format!("\npeak resident memory: {peak:.0} MiB"));
    }
    if let Some(usec) = report.redis_usec_per_decision {
        summary.push_str(&format!(
            "\nredis: {} script calls, {usec:.2} µs of Redis time per decision",
            report.redis_calls.unwrap_or(0)
        ));
    }
    if let Some(mean) = report.batch_mean_size {
        summary.push_str(&format!(
            "\ngroup commit: {mean:.1} decisions per call; calls by size (at most: calls) {:?}",
            report.batch_sizes.as_deref().unwrap_or_default()
        ));
    }
    if let Some(stats) = store.cached_stats() {
        summary.push_str(&format!(
            "\ncached mode: {} syncs ({} failed); cost sent {}, kept for a later sync {}, lost {}; \
             keys loaded {}, missed {}",
            stats.syncs,
            stats.failed_syncs,
            stats.sent_cost,
            stats.unsent_cost,
            stats.lost_cost,
            stats.loads,
            stats.missed_loads,
        ));
    }
    summary
}

/// A latency in milliseconds as people read it: microseconds below 1 ms.
fn shown(ms: f64) -> String {
    if ms < 1.0 {
        format!("{:.1} µs", ms * 1000.0)
    } else {
        format!("{ms:.2} ms")
    }
}

/// What every task shares.
struct Run {
    store: ServiceStore,
    algorithm: AnyAlgorithm,
    keys: u64,
    prefix: String,
    clock: SystemClock,
}

/// One task's (or the run's) counts.
struct Totals {
    /// Decisions made: calls that did not fail.
    decisions: u64,
    allowed: u64,
    /// Calls that failed with a store error, and the last such error.
    errors: u64,
    last_error: Option<floodgate::StoreError>,
    latencies: Latencies,
}

impl Totals {
    fn new() -> Totals {
        Totals {
            decisions: 0,
            allowed: 0,
            errors: 0,
            last_error: None,
            latencies: Latencies::new(),
        }
    }
}

impl Run {
    /// `tasks` tasks deciding until `duration` has passed; the merged counts and the seconds
    /// the run took (until the last task finished).
    async fn drive(&self, tasks: usize, duration: Duration) -> (Totals, f64) {
        let started = self.clock.now();
        let deadline = started.saturating_add(duration);
        let run = Arc::new(Run {
            store: self.store.clone(),
            algorithm: self.algorithm.clone(),
            keys: self.keys,
            prefix: self.prefix.clone(),
            clock: self.clock,
        });
        let handles: Vec<_> = (0..tasks)
            .map(|i| {
                let run = run.clone();
                tokio::spawn(async move { run.task(i as u64, deadline).await })
            })
            .collect();
        let mut totals = Totals::new();
        for handle in handles {
            // A task panics only on a bug; its decisions are then missing from the counts.
            if let Ok(t) = handle.await {
                totals.decisions += t.decisions;
                totals.allowed += t.allowed;
                totals.errors += t.errors;
                totals.last_error = t.last_error.or(totals.last_error);
                totals.latencies.merge(&t.latencies);
            }
        }
        let seconds = self.clock.now().saturating_since(started).as_secs_f64();
        (totals, seconds)
    }

    async fn task(&self, seed: u64, deadline: floodgate::Nanos) -> Totals {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ rand::random::<u64>());
        let leases = self.algorithm.supports(OpKind::Acquire);
        let mut totals = Totals::new();
        let mut key = String::with_capacity(self.prefix.len() + 20);
        loop {
            let start = self.clock.now();
            if start >= deadline {
                return totals;
            }
            key.clear();
            key.push_str(&self.prefix);
            key.push_str(&rng.random_range(0..self.keys).to_string());
            let lease = LeaseId(rng.random());
            let op = if leases {
                Op::Acquire {
                    lease,
                    critical: false,
                }
            } else {
                Op::Check { cost: 1 }
            };
            let result = self.store.apply(&self.algorithm, &key, op).await;
            totals
                .latencies
                .record(self.clock.now().saturating_since(start).as_nanos() as u64);
            match result {
                Ok(d) => {
                    totals.decisions += 1;
                    if d.allowed {
                        totals.allowed += 1;
                        if leases {
                            let release = Op::Release { lease };
                            let _ = self.store.apply(&self.algorithm, &key, release).await;
                        }
                    }
                }
                Err(e) => {
                    totals.errors += 1;
                    totals.last_error = Some(e);
                }
            }
            // A store that answers at once never returns the worker: yield now and then, as
            // a server's tasks do between requests, so that every task and timer gets to run.
            if (totals.decisions + totals.errors).is_multiple_of(64) {
                tokio::task::yield_now().await;
            }
        }
    }
}

/// A log-linear latency histogram in nanoseconds, in the manner of HDR histograms: values
/// below 256 are counted exactly; above, each power of two is split into 128 buckets, so a
/// value is within 1/128 of its bucket's lower bound. Fixed size (about 58 KiB), no allocation
/// per value.
#[derive(Clone)]
pub struct Latencies {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

const LINEAR: usize = 256;
const SUB: usize = 128;
const BUCKETS: usize = LINEAR + (64 - 8) * SUB;

impl Default for Latencies {
    fn default() -> Self {
        Latencies::new()
    }
}

impl Latencies {
    /// An empty histogram.
    pub fn new() -> Latencies {
        Latencies {
            counts: vec![0; BUCKETS],
            total: 0,
            max: 0,
        }
    }

    fn index(v: u64) -> usize {
        if v < LINEAR as u64 {
            return v as usize;
        }
        let e = 63 - v.leading_zeros() as usize; // 8..=63
        let sub = (v >> (e - 7)) as usize; // 128..=255
        LINEAR + (e - 8) * SUB + (sub - SUB)
    }

    fn lower_bound(i: usize) -> u64 {
        if i < LINEAR {
            return i as u64;
        }
        let e = (i - LINEAR) / SUB + 8;
        let sub = ((i - LINEAR) % SUB + SUB) as u64;
        sub << (e - 7)
    }

    /// Counts one value.
    pub fn record(&mut self, v: u64) {
        self.counts[Self::index(v)] += 1;
        self.total += 1;
        self.max = self.max.max(v);
    }

    /// Adds `other`'s counts.
    pub fn merge(&mut self, other: &Latencies) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    /// The value at quantile `q` (0..=1): the lower bound of the bucket holding the
    /// `ceil(q × count)`-th value; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total.max(1));
        let mut seen = 0;
        for (i, n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank && *n > 0 {
                return Self::lower_bound(i).min(self.max);
            }
        }
        0
    }

    /// How many values were recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The largest value recorded.
    pub fn max(&self) -> u64 {
        self.max
    }
}

impl std::fmt::Debug for Latencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Latencies")
            .field("count", &self.total)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_within_one_percent_and_quantiles_pick_the_right_rank() {
        for v in [0u64, 1, 255, 256, 257, 1000, 123_456, 50_000_000, u64::MAX] {
            let low = Latencies::lower_bound(Latencies::index(v));
            assert!(
                low <= v && (v - low) as f64 <= v as f64 / 128.0,
                "{v}: {low}"
            );
        }
        let mut h = Latencies::new();
        for v in 1..=1000u64 {
            h.record(v * 1000); // 1 µs .. 1 ms
        }
        let p50 = h.quantile(0.5) as f64;
        let p99 = h.quantile(0.99) as f64;
        assert!((p50 - 500_000.0).abs() <= 500_000.0 / 128.0, "{p50}");
        assert!((p99 - 990_000.0).abs() <= 990_000.0 / 128.0, "{p99}");
        assert_eq!(h.max(), 1_000_000);
        assert_eq!(Latencies::new().quantile(0.5), 0);
    }
}
