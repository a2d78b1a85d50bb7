//! `floodgate simulate --usage SPEC`: LLM-like traffic whose cost is known only when each
//! response ends, through the three ways to hold a token budget, side by side on the same
//! requests: reserve the maximum and refund the rest, check then charge, reserve an estimate
//! and settle.
//!
//! The spec (JSON inline, or a YAML or JSON file):
//!
//! ```text
//! {"budget": 20000, "window": "1m", "rate": 4,
//!  "prompt": [100, 800], "completion": {"median": 300, "max": 4000, "shape": 1.2},
//!  "tokens_per_second": 40}
//! ```
//!
//! - `budget`: tokens per `window` (a fixed window, as Envoy's `unit` limits; default 1 min).
//! - `rate`: requests per second, arriving as a Poisson process, all on one key (one user's,
//!   or one API key's, budget).
//! - `prompt`: each request's prompt tokens, uniform in `[low, high]`.
//! - `completion`: its completion tokens, heavy-tailed: a Pareto distribution of shape
//!   `shape` (default 1.2; smaller is heavier) scaled to the given `median`, capped at `max`.
//! - `tokens_per_second`: how fast a response streams (default 40): a request is in flight
//!   for `completion / tokens_per_second` seconds, and its cost is known when it ends.
//!
//! A request's maximum is `prompt + completion.max` (what an LLM API's `max_tokens` bounds);
//! its estimate `prompt + completion.median`. The ways: reserve the maximum ([`Op::Check`] of
//! it), refund the rest at the end; check (cost 0), charge the cost at the end
//! ([`Op::Charge`]); reserve the estimate, charge or refund the difference at the end. Each way
//! runs on its own memory store under a manual clock; refused requests are gone.
//!
//! The report: per way, the requests admitted and refused, the tokens served, the most tokens
//! any window counted and its overshoot of the budget; charts of the tokens each window has
//! counted over time against the budget, and of the refusals per window.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::spec::AnyState;
use floodgate::duration::SpecDuration;
use floodgate::limiter::KeyedLimit;
use floodgate::store::{Key, MemoryStore};
use floodgate::{ManualClock, Nanos, Op};
use floodgate_service::http::home::escape;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Deserialize;

use crate::report::chart::{line_chart, ChartError, Series, OFFERED};
use crate::report::{seconds, summary_table, text_table, STYLE};

/// The traffic and the budget of `--usage` (see the [module documentation](self)).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageSpec {
    /// Tokens per window.
    pub budget: u64,
    /// The window (default 1 min).
    #[serde(default = "minute")]
    pub window: SpecDuration,
    /// Requests per second (Poisson arrivals).
    pub rate: f64,
    /// Prompt tokens, uniform in `[low, high]`.
    pub prompt: [u64; 2],
    /// Completion tokens.
    pub completion: Completion,
    /// How fast a response streams, tokens per second.
    #[serde(default = "forty")]
    pub tokens_per_second: f64,
}

/// The completion tokens' distribution: Pareto of shape `shape`, median `median`, capped at
/// `max`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Completion {
    /// The median, in tokens (at least 1).
    pub median: u64,
    /// The cap, in tokens (at least the median).
    pub max: u64,
    /// The tail's shape (above 0; default 1.2).
    #[serde(default = "shape")]
    pub shape: f64,
}

fn minute() -> SpecDuration {
    SpecDuration(Duration::from_secs(60))
}

fn forty() -> f64 {
    40.0
}

fn shape() -> f64 {
    1.2
}

/// Why a `--usage` spec was refused: the field and why.
#[derive(Debug, thiserror::Error)]
#[error("field `{field}`: {reason}")]
pub struct UsageError {
    field: &'static str,
    reason: String,
}

impl UsageSpec {
    /// Reads and checks a spec.
    pub fn from_value(value: serde_json::Value) -> Result<UsageSpec, UsageError> {
        let spec: UsageSpec = serde_json::from_value(value).map_err(|e| UsageError {
            field: "usage",
            reason: e.to_string(),
        })?;
        let bad = |field, reason: &str| {
            Err(UsageError {
                field,
                reason: reason.to_string(),
            })
        };
        if spec.budget == 0 {
            return bad("budget", "must be at least 1");
        }
        if !(spec.rate.is_finite() && spec.rate > 0.0) {
            return bad("rate", "must be a number above 0");
        }
        if spec.prompt[0] > spec.prompt[1] {
            return bad("prompt", "must be [low, high] with low ≤ high");
        }
        if spec.completion.median == 0 || spec.completion.max < spec.completion.median {
            return bad("completion", "needs 1 ≤ median ≤ max");
        }
        if !(spec.completion.shape.is_finite() && spec.completion.shape > 0.0) {
            return bad("completion.shape", "must be a number above 0");
        }
        if !(spec.tokens_per_second.is_finite() && spec.tokens_per_second > 0.0) {
            return bad("tokens_per_second", "must be a number above 0");
        }
        if FixedWindow::new(spec.budget, spec.window.0).is_err() {
            return bad("window", "must be between 1ns and 584 years");
        }
        Ok(spec)
    }
}

/// One generated request.
#[derive(Debug, Clone, Copy)]
struct Request {
    at: Nanos,
    prompt: u64,
    completion: u64,
}

/// The requests of `duration`, from `seed`.
fn requests(spec: &UsageSpec, duration: Duration, seed: u64) -> Vec<Request> {
    let mut rng = StdRng::seed_from_u64(seed);
    let end = duration.as_secs_f64();
    let c = &spec.completion;
    // A Pareto of shape a has median x_m · 2^(1/a): scale x_m to the median asked for.
    let scale = c.median as f64 / 2f64.powf(1.0 / c.shape);
    let mut t = 0.0;
    let mut out = Vec::new();
    loop {
        let u: f64 = rng.random();
        t += -(1.0 - u).ln() / spec.rate;
        if t >= end {
            return out;
        }
        let v: f64 = rng.random();
        let completion = (scale * (1.0 - v).powf(-1.0 / c.shape)).round() as u64;
        out.push(Request {
            at: Nanos((t * 1e9) as u64),
            prompt: rng.random_range(spec.prompt[0]..=spec.prompt[1]),
            completion: completion.clamp(1, c.max),
        });
    }
}

/// The three ways to hold a budget for a cost known at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    ReserveMaximum,
    CheckThenCharge,
    EstimateThenSettle,
}

const WAYS: [Way; 3] = [
    Way::ReserveMaximum,
    Way::CheckThenCharge,
    Way::EstimateThenSettle,
];

impl Way {
    fn name(self) -> &'static str {
        match self {
            Way::ReserveMaximum => "reserve the maximum, refund",
            Way::CheckThenCharge => "check, then charge",
            Way::EstimateThenSettle => "reserve an estimate, settle",
        }
    }

    /// What a request reserves when it starts.
    fn reserved(self, spec: &UsageSpec, r: &Request) -> u64 {
        match self {
            Way::ReserveMaximum => r.prompt + spec.completion.max,
            Way::CheckThenCharge => 0,
            Way::EstimateThenSettle => r.prompt + spec.completion.median,
        }
    }
}

/// One way's run: its tallies per window, and the points of its charts.
#[derive(Debug, Default)]
struct Run {
    admitted: u64,
    refused: u64,
    served: u64,
    /// Per window: the most tokens it counted at any instant, and its refusals.
    windows: Vec<(u64, u64)>,
    /// (seconds, tokens the current window counts), at every change.
    counted: Vec<(f64, f64)>,
}

/// The window count a fixed window keeps, replayed beside the store to chart it (a count past
/// the budget is what the store's `remaining` cannot show).
struct Window {
    length: u64,
    index: u64,
    count: u64,
}

impl Window {
    /// Moves to the window of `now`.
    fn at(&mut self, now: Nanos) {
        let index = now.0 / self.length;
        if index != self.index {
            self.index = index;
            self.count = 0;
        }
    }
}

/// Runs `requests` through `way`.
fn run(spec: &UsageSpec, requests: &[Request], way: Way, end: Nanos) -> Run {
    let mut budget = Budget::new(spec, way, end);
    // In flight: (end, index of the request).
    let mut ends: BinaryHeap<Reverse<(Nanos, usize)>> = BinaryHeap::new();
    for (i, r) in requests.iter().enumerate() {
        while let Some(Reverse((at, j))) = ends.peek().copied() {
            if at > r.at {
                break;
            }
            ends.pop();
            budget.settle(&requests[j], at);
        }
        if let Some(done) = budget.start(r) {
            ends.push(Reverse((done, i)));
        }
    }
    while let Some(Reverse((at, j))) = ends.pop() {
        // A response still streaming at the end is not settled within the run.
        if at >= end {
            break;
        }
        budget.settle(&requests[j], at);
    }
    budget.out
}

/// One way's token budget during a run: the limit it decides with, on its own store and
/// clock, the window count replayed beside it, and the run's tallies.
struct Budget<'s> {
    spec: &'s UsageSpec,
    way: Way,
    clock: ManualClock,
    limit: KeyedLimit<MemoryStore<Key, AnyState, ManualClock>>,
    window: Window,
    out: Run,
}

impl<'s> Budget<'s> {
    /// A fresh budget for a run ending at `end`.
    fn new(spec: &'s UsageSpec, way: Way, end: Nanos) -> Budget<'s> {
        let clock = ManualClock::new(Nanos::ZERO);
        let store = MemoryStore::builder()
            .clock(clock.clone())
            .build()
            .unwrap_or_else(|e| unreachable!("a memory store with defaults builds: {e}"));
        let algorithm = FixedWindow::new(spec.budget, spec.window.0)
            .unwrap_or_else(|e| unreachable!("checked in from_value: {e}"));
        let limit = KeyedLimit::new("budget", algorithm, store)
            .unwrap_or_else(|e| unreachable!("a fixed namespace: {e}"));
        let length = spec.window.0.as_nanos() as u64;
        // The windows the run covers (the last may be cut short); every event is before `end`.
        let windows = end.0.div_ceil(length).max(1) as usize;
        Budget {
            spec,
            way,
            clock,
            limit,
            window: Window {
                length,
                index: 0,
                count: 0,
            },
            out: Run {
                windows: vec![(0, 0); windows],
                ..Run::default()
            },
        }
    }

    /// Applies `op` at `now`, counts it in the window as the fixed window does, and notes the
    /// window's count; whether it was allowed.
    fn apply(&mut self, now: Nanos, op: Op) -> bool {
        self.clock.set(now);
        self.window.at(now);
        let decision = self
            .limit
            .apply_blocking("user", op)
            .unwrap_or_else(|e| unreachable!("memory never fails: {e}"));
        let (window, out) = (&mut self.window, &mut self.out);
        match op {
            Op::Check { cost } if decision.allowed => window.count += cost,
            Op::Charge { cost } => window.count += cost,
            Op::Refund { cost } => window.count = window.count.saturating_sub(cost),
            _ => {}
        }
        let slot = &mut out.windows[window.index as usize];
        slot.0 = slot.0.max(window.count);
        out.counted.push((now.0 as f64 / 1e9, window.count as f64));
        decision.allowed
    }

    /// A request's start: it reserves what the way reserves; when it is admitted, the instant
    /// its response ends.
    fn start(&mut self, r: &Request) -> Option<Nanos> {
        let cost = self.way.reserved(self.spec, r);
        if self.apply(r.at, Op::Check { cost }) {
            self.out.admitted += 1;
            let streaming = r.completion as f64 / self.spec.tokens_per_second;
            Some(r.at.saturating_add(Duration::from_secs_f64(streaming)))
        } else {
            self.out.refused += 1;
            self.out.windows[self.window.index as usize].1 += 1;
            None
        }
    }

    /// A request's end: what it used, charged or given back.
    fn settle(&mut self, r: &Request, at: Nanos) {
        let actual = r.prompt + r.completion;
        self.out.served += actual;
        let op =
            floodgate::limiter::reservation::settlement(self.way.reserved(self.spec, r), actual);
        self.apply(at, op);
    }
}

/// The simulation's outcome, ready to print and write.
#[derive(Debug)]
pub struct UsageReport {
    spec: serde_json::Value,
    budget: u64,
    window: Duration,
    duration: Duration,
    seed: u64,
    runs: Vec<(Way, Run)>,
}

/// Runs the three ways over the requests of `duration`, from `seed`.
pub fn simulate(
    spec_value: serde_json::Value,
    spec: &UsageSpec,
    duration: Duration,
    seed: u64,
) -> UsageReport {
    let requests = requests(spec, duration, seed);
    let end = Nanos::ZERO.saturating_add(duration);
    let runs = WAYS
        .into_iter()
        .map(|way| (way, run(spec, &requests, way, end)))
        .collect();
    UsageReport {
        spec: spec_value,
        budget: spec.budget,
        window: spec.window.0,
        duration,
        seed,
        runs,
    }
}

const COLUMNS: [&str; 7] = [
    "way",
    "admitted",
    "refused",
    "tokens served",
    "most counted in a window",
    "overshoot",
    "windows over",
];

impl UsageReport {
    fn rows(&self) -> Vec<[String; 7]> {
        self.runs
            .iter()
            .map(|(way, run)| {
                let most = run.windows.iter().map(|w| w.0).max().unwrap_or(0);
                let over = most.saturating_sub(self.budget);
                let windows_over = run.windows.iter().filter(|w| w.0 > self.budget).count();
                [
                    way.name().to_string(),
                    run.admitted.to_string(),
                    run.refused.to_string(),
                    run.served.to_string(),
                    most.to_string(),
                    format!("{over} ({:.1}%)", over as f64 * 100.0 / self.budget as f64),
                    format!("{windows_over} of {}", run.windows.len()),
                ]
            })
            .collect()
    }

    /// The summary table, as `simulate` prints it.
    pub fn table(&self) -> String {
        let mut out = text_table(&COLUMNS, &self.rows());
        let _ = writeln!(
            out,
            "budget {} tokens per {}; overshoot: the most any window counted beyond it",
            self.budget,
            seconds(self.window.as_secs_f64())
        );
        out
    }

    /// The charts: each window's count over time against the budget, and refusals per window.
    pub fn charts(&self) -> Result<Vec<(&'static str, String)>, ChartError> {
        let x_max = self.duration.as_secs_f64();
        let window = self.window.as_secs_f64();
        let mut counted: Vec<Series> = self
            .runs
            .iter()
            .enumerate()
            .map(|(i, (way, run))| Series {
                name: way.name().to_string(),
                color: i,
                points: thin(&run.counted, x_max / 600.0),
            })
            .collect();
        counted.push(Series {
            name: "budget".into(),
            color: OFFERED,
            points: vec![(0.0, self.budget as f64), (x_max, self.budget as f64)],
        });
        let refused: Vec<Series> = self
            .runs
            .iter()
            .enumerate()
            .map(|(i, (way, run))| Series {
                name: way.name().to_string(),
                color: i,
                points: run
                    .windows
                    .iter()
                    .enumerate()
                    .map(|(w, slot)| (((w as f64) * window).min(x_max), slot.1 as f64))
                    .collect(),
            })
            .collect();
        Ok(vec![
            (
                "usage-counted",
                line_chart(
                    "Tokens the window has counted, against the budget",
                    "tokens",
                    x_max,
                    None,
                    &counted,
                )?,
            ),
            (
                "usage-refused",
                line_chart(
                    "Requests refused per window (at the window's start)",
                    "requests",
                    x_max,
                    None,
                    &refused,
                )?,
            ),
        ])
    }

    /// The HTML report: the spec, the table and the charts.
    pub fn html(&self) -> Result<String, ChartError> {
        let mut page = String::with_capacity(64 * 1024);
        page.push_str("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
        page.push_str("<title>floodgate simulate --usage</title>\n");
        let _ = writeln!(page, "<style>{STYLE}</style>\n</head>\n<body>");
        page.push_str("<h1>floodgate simulate --usage</h1>\n<dl class=\"details\">\n");
        for (label, value) in [
            ("usage", self.spec.to_string()),
            ("duration", seconds(self.duration.as_secs_f64())),
            ("seed", self.seed.to_string()),
        ] {
            let _ = writeln!(
                page,
                "<dt>{label}</dt><dd><code>{}</code></dd>",
                escape(&value)
            );
        }
        page.push_str("</dl>\n<h2>Summary</h2>\n");
        summary_table(&mut page, &COLUMNS, &self.rows());
        page.push_str("<h2>Charts</h2>\n");
        for (_, chart) in self.charts()? {
            let _ = writeln!(page, "<figure class=\"chart\">{chart}</figure>");
        }
        page.push_str("</body>\n</html>\n");
        Ok(page)
    }

    /// Writes each chart as `DIR/<name>.svg`.
    pub fn write_charts(&self, dir: &Path) -> Result<Vec<std::path::PathBuf>, WriteChartsError> {
        write_svgs(dir, self.charts()?)
    }
}

/// Writes each of `charts`, `(name, <svg>)`, as `DIR/<name>.svg`; returns the files written.
pub(crate) fn write_svgs(
    dir: &Path,
    charts: Vec<(&'static str, String)>,
) -> Result<Vec<std::path::PathBuf>, WriteChartsError> {
    std::fs::create_dir_all(dir).map_err(|source| WriteChartsError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    let mut written = Vec::new();
    for (name, svg) in charts {
        let path = dir.join(format!("{name}.svg"));
        std::fs::write(&path, svg).map_err(|source| WriteChartsError::Io {
            path: path.display().to_string(),
            source,
        })?;
        written.push(path);
    }
    Ok(written)
}

/// Why the charts could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteChartsError {
    /// A chart could not be drawn.
    #[error(transparent)]
    Chart(#[from] ChartError),
    /// A file could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
}

/// `points` kept at most one per `step` seconds: the last of each step, and every point where
/// the value falls (a window's start), so that a chart of thousands of changes keeps its shape.
fn thin(points: &[(f64, f64)], step: f64) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (i, &(t, v)) in points.iter().enumerate() {
        let falls = i > 0 && v < points[i - 1].1;
        match out.last_mut() {
            Some(last) if !falls && t - last.0 < step => *last = (last.0, last.1.max(v)),
            _ => out.push((t, v)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> UsageSpec {
        UsageSpec::from_value(serde_json::json!({
            "budget": 100000, "window": "1m", "rate": 2, "tokens_per_second": 100,
            "prompt": [100, 800], "completion": {"median": 300, "max": 4000},
        }))
        .unwrap()
    }

    #[test]
    fn the_maximum_never_overshoots_and_the_others_overshoot_by_what_is_in_flight() {
        let spec = spec();
        let report = simulate(serde_json::Value::Null, &spec, Duration::from_secs(600), 7);
        let most = |way| {
            let (_, run) = report.runs.iter().find(|(w, _)| *w == way).unwrap();
            run.windows.iter().map(|w| w.0).max().unwrap()
        };
        assert!(most(Way::ReserveMaximum) <= spec.budget);
        // More offered than the budget holds: the two that charge late go over, the estimate
        // less than the check.
        let charged = most(Way::CheckThenCharge);
        let settled = most(Way::EstimateThenSettle);
        assert!(
            spec.budget < settled && settled < charged,
            "{settled} {charged}"
        );
        // By what is in flight, which this traffic keeps well under a budget: a ceiling that
        // still catches a charge counted twice or a refusal that lets a request through.
        assert!(charged < spec.budget * 2, "{charged}");
        let table = report.table();
        assert!(table.contains("check, then charge"), "{table}");
        let html = report.html().unwrap();
        assert_eq!(html.matches("<svg").count(), 2);
    }

    #[test]
    fn the_same_seed_gives_the_same_requests_and_a_bad_spec_names_its_field() {
        let spec = spec();
        let a = requests(&spec, Duration::from_secs(60), 3);
        let b = requests(&spec, Duration::from_secs(60), 3);
        assert_eq!(a.len(), b.len());
        assert!(a
            .iter()
            .zip(&b)
            .all(|(x, y)| x.at == y.at && x.completion == y.completion));
        assert!(a.iter().all(|r| (1..=4000).contains(&r.completion)));
        let median = {
            let mut c: Vec<u64> = requests(&spec, Duration::from_secs(3_600), 1)
                .iter()
                .map(|r| r.completion)
                .collect();
            c.sort_unstable();
            c[c.len() / 2]
        };
        assert!((250..=350).contains(&median), "{median}");
        let bad = UsageSpec::from_value(serde_json::json!({
            "budget": 10, "rate": 1, "prompt": [5, 1], "completion": {"median": 1, "max": 2},
        }))
        .unwrap_err();
        assert!(bad.to_string().starts_with("field `prompt`"), "{bad}");
    }
}
