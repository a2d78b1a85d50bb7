//! `floodgate simulate --rlqs SPEC`: a fleet of Envoys sharing one global limit through the
//! Rate Limit Quota Service, each client running Envoy's RLQS filter
//! ([`floodgate_service::rlqs::envoy_model`]) against the service's own [`Session`]s on one
//! [`Ledger::in_memory`], on simulated time: no sleeps, no wall clock; an hour takes as long
//! as its steps do.
//!
//! The spec (JSON inline, or a YAML or JSON file):
//!
//! ```text
//! {"limit": 100, "duration": "2m",
//!  "clients": [{"name": "a", "demand": [[0, 10]]},
//!              {"name": "b", "demand": [[0, 30], [60, 90]]},
//!              {"name": "c", "demand": [[5, 80]], "leaves": 90}]}
//! ```
//!
//! - `limit`: the bucket's global limit, requests per second (at least 1).
//! - `duration`: how long the simulation runs (`"90s"`, `"2m"`, or seconds).
//! - `clients`: the Envoys, at least one. Each has an optional `name` (default `envoy-N`), a
//!   `demand` schedule of `[from_second, requests_per_second]` steps in ascending seconds (no
//!   demand before the first), its requests spread evenly; and optionally `leaves`, the second
//!   at which its stream closes and it stops sending.
//!
//! The model: steps of 10 ms. A client's first request subscribes its bucket; it reports every
//! 5 s from then (its phase), in whole seconds. The server ticks each stream every second, as
//! the gRPC stream does, after expiring claimants unreported for too long. The service's
//! settings are its defaults (assignments live 15 s). A client that leaves keeps the
//! assignment it holds until that expires: the server counts it until then, and so does the
//! sum of assignments in force here.
//!
//! The report: per client, its mean demand and mean assignment (requests per second over its
//! time present, from its first demand to its leaving or the end), requests admitted and
//! denied; the most the assignments in force ever summed to against the limit; the most
//! admitted in one second (windows aligned on whole seconds) against the limit and the bound
//! of `docs/rlqs.md` (the limit, plus the bursts the clients held or started in the second,
//! plus requests let through before a first assignment). Charts: each client's assigned rate
//! over time with their sum and the limit; the requests admitted per second, per client and in
//! total, against the limit.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use floodgate::duration::SpecDuration;
use floodgate::Nanos;
use floodgate_service::config::Config;
use floodgate_service::descriptors::RuleSet;
use floodgate_service::http::home::escape;
use floodgate_service::proto::envoy::service::rate_limit_quota::v3::BucketId;
use floodgate_service::rlqs::envoy_model::Envoy;
use floodgate_service::rlqs::{Ledger, Session, Settings};
use serde::Deserialize;

use super::usage::{write_svgs, WriteChartsError};
use crate::report::chart::{line_chart, ChartError, Series, OFFERED};
use crate::report::{seconds, summary_table, text_table, STYLE};

/// The simulation's step, in milliseconds.
const STEP_MS: u64 = 10;
/// The rate-limit domain the clients report.
const DOMAIN: &str = "simulate";

/// The fleet and its limit (see the [module documentation](self)).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RlqsSpec {
    /// The bucket's global limit, requests per second.
    pub limit: u64,
    /// How long the simulation runs.
    pub duration: SpecDuration,
    /// The Envoys.
    pub clients: Vec<ClientSpec>,
}

/// One Envoy of the fleet.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSpec {
    /// Its name in the report (default `envoy-N`, N from 1).
    #[serde(default)]
    pub name: Option<String>,
    /// `[from_second, requests_per_second]` steps, seconds ascending.
    pub demand: Vec<(f64, f64)>,
    /// The second at which its stream closes and it stops sending.
    #[serde(default)]
    pub leaves: Option<f64>,
}

/// Why an `--rlqs` spec was refused: the field and why.
#[derive(Debug, thiserror::Error)]
#[error("field `{field}`: {reason}")]
pub struct RlqsError {
    field: String,
    reason: String,
}

impl RlqsSpec {
    /// Reads and checks a spec.
    pub fn from_value(value: serde_json::Value) -> Result<RlqsSpec, RlqsError> {
        let bad = |field: &str, reason: &str| RlqsError {
            field: field.to_string(),
            reason: reason.to_string(),
        };
        let spec: RlqsSpec =
            serde_json::from_value(value).map_err(|e| bad("rlqs", &e.to_string()))?;
        if spec.limit == 0 || spec.limit > u64::from(u32::MAX) {
            return Err(bad("limit", "must be between 1 and 4294967295"));
        }
        if spec.duration.0.as_millis() < 1_000 || spec.duration.0.as_secs() > 7 * 86_400 {
            return Err(bad("duration", "must be between 1 s and a week"));
        }
        if spec.clients.is_empty() {
            return Err(bad("clients", "give at least one client"));
        }
        for (i, client) in spec.clients.iter().enumerate() {
            let field = |f: &str| format!("clients[{i}].{f}");
            let steps = &client.demand;
            let finite = steps
                .iter()
                .all(|&(at, rate)| at.is_finite() && at >= 0.0 && rate.is_finite() && rate >= 0.0);
            if steps.is_empty() || !finite || steps.windows(2).any(|w| w[0].0 >= w[1].0) {
                return Err(bad(
                    &field("demand"),
                    "must be [from_second, requests_per_second] steps, seconds ascending, none negative",
                ));
            }
            if client.leaves.is_some_and(|s| !(s.is_finite() && s >= 0.0)) {
                return Err(bad(&field("leaves"), "must be a second, 0 or more"));
            }
        }
        Ok(spec)
    }
}

/// A time in seconds as the simulation's milliseconds, on its steps.
fn step_ms(secs: f64) -> u64 {
    ((secs * 1_000.0 / STEP_MS as f64).round() as u64) * STEP_MS
}

/// The rules of the simulated bucket: `{name: fleet}` of `DOMAIN`, `limit` per second.
fn rules(limit: u64) -> RuleSet {
    let yaml = format!(
        "domains:\n  - domain: {DOMAIN}\n    descriptors:\n      - key: name\n        rate_limit: {{ unit: second, requests_per_unit: {limit} }}\n"
    );
    Config::from_yaml_str(&yaml)
        .and_then(|config| config.rule_set())
        .unwrap_or_else(|e| unreachable!("the limit was checked in from_value: {e}"))
}

/// A series of values that hold until they change, as a chart's steps.
#[derive(Debug, Default)]
struct Steps(Vec<(f64, f64)>);

impl Steps {
    /// The value from `at_ms` on.
    fn set(&mut self, at_ms: u64, value: f64) {
        let t = at_ms as f64 / 1_000.0;
        match self.0.last() {
            Some(&(_, last)) if last == value => {}
            Some(&(_, last)) => self.0.extend([(t, last), (t, value)]),
            None => self.0.push((t, value)),
        }
    }

    /// The points, held to `end_ms`.
    fn until(&self, end_ms: u64) -> Vec<(f64, f64)> {
        let mut points = self.0.clone();
        if let Some(&(_, last)) = points.last() {
            points.push((end_ms as f64 / 1_000.0, last));
        }
        points
    }
}

/// One client during a run: its Envoy, its traffic and its tallies.
#[derive(Debug)]
struct Client {
    name: String,
    envoy: Envoy,
    /// `(from_ms, requests per second)`.
    demand: Vec<(u64, f64)>,
    /// Its first demand above 0 (`u64::MAX` if none).
    start_ms: u64,
    leaves_ms: Option<u64>,
    /// Fractional requests carried from step to step.
    owed: f64,
    admitted: u64,
    denied: u64,
    /// Admitted per whole second.
    per_second: Vec<u64>,
    /// Its assigned rate over time.
    assigned: Steps,
    /// The integral of its assigned rate over its time present, requests.
    assigned_area: f64,
}

impl Client {
    fn new(i: usize, spec: &ClientSpec, ledger: &Arc<Ledger>, seconds: usize) -> Client {
        let demand: Vec<(u64, f64)> = spec.demand.iter().map(|&(s, r)| (step_ms(s), r)).collect();
        let start_ms = demand.iter().find(|d| d.1 > 0.0).map_or(u64::MAX, |d| d.0);
        // Envoy's report timer starts with the bucket's first request.
        let session = Session::new(ledger.clone(), format!("envoy-{i}"));
        let bucket = BucketId {
            bucket: [("name".to_string(), "fleet".to_string())].into(),
        };
        Client {
            name: spec
                .name
                .clone()
                .unwrap_or_else(|| format!("envoy-{}", i + 1)),
            envoy: Envoy::new(session, DOMAIN, bucket, start_ms),
            demand,
            start_ms,
            leaves_ms: spec.leaves.map(step_ms),
            owed: 0.0,
            admitted: 0,
            denied: 0,
            per_second: vec![0; seconds],
            assigned: Steps::default(),
            assigned_area: 0.0,
        }
    }

    /// Its demand at `now_ms`, requests per second.
    fn demand_at(&self, now_ms: u64) -> f64 {
        self.demand
            .iter()
            .take_while(|d| d.0 <= now_ms)
            .last()
            .map_or(0.0, |d| d.1)
    }

    /// When it is present: from its first demand to its leaving or `end_ms`.
    fn present(&self, end_ms: u64) -> (u64, u64) {
        let from = self.start_ms.min(end_ms);
        (from, self.leaves_ms.unwrap_or(end_ms).clamp(from, end_ms))
    }

    fn gone(&self, now_ms: u64) -> bool {
        self.leaves_ms.is_some_and(|at| now_ms >= at)
    }
}

/// What one second saw over the fleet.
#[derive(Debug, Default)]
struct Second {
    admitted: u64,
    /// The bursts of token buckets started in it.
    started: u64,
    /// Requests let through before a client's first assignment.
    unassigned: u64,
}

/// The fleet during a run.
struct Fleet {
    rules: RuleSet,
    settings: Settings,
    ledger: Arc<Ledger>,
    clients: Vec<Client>,
    /// The bursts each client held during the current second.
    bursts: Vec<u64>,
    second: Second,
    /// Per second: (admitted, the bound).
    seconds: Vec<(u64, u64)>,
    limit: u64,
    end_ms: u64,
    /// The sum of the assignments in force over time.
    sum: Steps,
    /// The most it reached, and when (ms).
    most_in_force: (f64, u64),
}

impl Fleet {
    /// One step at `now_ms`: the ledger's expiry and each stream's tick on the second, each
    /// client's leaving, requests and report, then the assignments in force.
    fn step(&mut self, now_ms: u64) -> Result<(), RunError> {
        let on_second = now_ms.is_multiple_of(1_000);
        if on_second {
            let now = Nanos(now_ms * 1_000_000);
            self.ledger.expire_due(now, self.settings.unreported_after);
        }
        for (i, client) in self.clients.iter_mut().enumerate() {
            if client.leaves_ms == Some(now_ms) {
                client.envoy.disconnect(now_ms, &self.settings);
            }
            if !client.gone(now_ms) {
                client.owed += client.demand_at(now_ms) * STEP_MS as f64 / 1_000.0;
                while client.owed >= 1.0 {
                    client.owed -= 1.0;
                    let admission = client.envoy.request(now_ms, &self.rules, &self.settings)?;
                    self.second.started += admission.started;
                    if admission.admitted {
                        client.admitted += 1;
                        client.per_second[(now_ms / 1_000) as usize] += 1;
                        self.second.admitted += 1;
                        self.second.unassigned += u64::from(admission.unassigned);
                    } else {
                        client.denied += 1;
                    }
                }
            }
            self.second.started +=
                client
                    .envoy
                    .report_if_due(now_ms, &self.rules, &self.settings)?;
            if on_second {
                self.second.started += client.envoy.tick(now_ms, &self.settings);
            }
            self.bursts[i] = self.bursts[i].max(client.envoy.burst());
        }
        self.in_force(now_ms);
        if (now_ms + STEP_MS).is_multiple_of(1_000) {
            self.end_second();
        }
        Ok(())
    }

    /// The assignments in force at `now_ms`, held for the step that follows.
    fn in_force(&mut self, now_ms: u64) {
        let end_ms = self.end_ms;
        let mut sum = 0.0;
        for client in &mut self.clients {
            let rate = client.envoy.assigned_per_second(now_ms).unwrap_or(0.0);
            client.assigned.set(now_ms, rate);
            let (from, to) = client.present(end_ms);
            if (from..to).contains(&now_ms) {
                client.assigned_area += rate * STEP_MS as f64 / 1_000.0;
            }
            sum += rate;
        }
        self.sum.set(now_ms, sum);
        if sum > self.most_in_force.0 {
            self.most_in_force = (sum, now_ms);
        }
    }

    /// The end of a second: its admissions against the bound.
    fn end_second(&mut self) {
        let Second {
            admitted,
            started,
            unassigned,
        } = std::mem::take(&mut self.second);
        let bound = self.limit + self.bursts.iter().sum::<u64>() + started + unassigned;
        self.seconds.push((admitted, bound));
        for (b, client) in self.bursts.iter_mut().zip(&self.clients) {
            *b = client.envoy.burst();
        }
    }
}

/// Why a run stopped: a session refused a report (which the model's reports never should).
#[derive(Debug, thiserror::Error)]
#[error("a session refused a report: {0}")]
pub struct RunError(#[from] floodgate_service::rlqs::SessionError);

/// Runs the fleet of `spec` (see the [module documentation](self)).
pub fn simulate(spec_value: serde_json::Value, spec: &RlqsSpec) -> Result<RlqsReport, RunError> {
    let seconds = spec.duration.0.as_secs_f64().ceil() as usize;
    let end_ms = seconds as u64 * 1_000;
    let ledger = Arc::new(Ledger::in_memory());
    let clients: Vec<Client> = spec
        .clients
        .iter()
        .enumerate()
        .map(|(i, c)| Client::new(i, c, &ledger, seconds))
        .collect();
    let mut fleet = Fleet {
        rules: rules(spec.limit),
        settings: Settings::default(),
        ledger,
        bursts: vec![0; clients.len()],
        clients,
        second: Second::default(),
        seconds: Vec::with_capacity(seconds),
        limit: spec.limit,
        end_ms,
        sum: Steps::default(),
        most_in_force: (0.0, 0),
    };
    for now_ms in (0..end_ms).step_by(STEP_MS as usize) {
        fleet.step(now_ms)?;
    }
    Ok(RlqsReport {
        spec: spec_value,
        limit: spec.limit,
        end_ms,
        clients: fleet.clients,
        seconds: fleet.seconds,
        sum: fleet.sum,
        most_in_force: fleet.most_in_force,
    })
}

/// The simulation's outcome, ready to print and write.
#[derive(Debug)]
pub struct RlqsReport {
    spec: serde_json::Value,
    limit: u64,
    end_ms: u64,
    clients: Vec<Client>,
    /// Per second: (admitted, the bound).
    seconds: Vec<(u64, u64)>,
    sum: Steps,
    most_in_force: (f64, u64),
}

const COLUMNS: [&str; 5] = [
    "client",
    "mean demand/s",
    "mean assigned/s",
    "admitted",
    "denied",
];

impl RlqsReport {
    /// Per client: (mean demand, mean assigned), requests per second over its time present.
    fn means(&self, client: &Client) -> (f64, f64) {
        let (from, to) = client.present(self.end_ms);
        let present = (to - from) as f64 / 1_000.0;
        if present <= 0.0 {
            return (0.0, 0.0);
        }
        let offered = (client.admitted + client.denied) as f64;
        (offered / present, client.assigned_area / present)
    }

    fn rows(&self) -> Vec<[String; 5]> {
        let mut totals = (0.0, 0.0, 0, 0);
        let mut rows: Vec<[String; 5]> = Vec::with_capacity(self.clients.len() + 1);
        for client in &self.clients {
            let (demand, assigned) = self.means(client);
            totals = (
                totals.0 + demand,
                totals.1 + assigned,
                totals.2 + client.admitted,
                totals.3 + client.denied,
            );
            rows.push([
                client.name.clone(),
                format!("{demand:.1}"),
                format!("{assigned:.1}"),
                client.admitted.to_string(),
                client.denied.to_string(),
            ]);
        }
        rows.push([
            "total".to_string(),
            format!("{:.1}", totals.0),
            format!("{:.1}", totals.1),
            totals.2.to_string(),
            totals.3.to_string(),
        ]);
        rows
    }

    /// The busiest second: (admitted, its bound), and the seconds over their bound.
    fn busiest(&self) -> ((u64, u64), usize) {
        let busiest = self
            .seconds
            .iter()
            .copied()
            .max()
            .unwrap_or((0, self.limit));
        let over = self.seconds.iter().filter(|(a, b)| a > b).count();
        (busiest, over)
    }

    /// The notes under the table: the assignments in force and the busiest second.
    fn notes(&self) -> Vec<String> {
        let (most, at_ms) = self.most_in_force;
        let ((admitted, bound), over) = self.busiest();
        vec![
            format!(
                "limit {}/s; the assignments in force summed to at most {most:.0}/s (at {})",
                self.limit,
                seconds(at_ms as f64 / 1_000.0)
            ),
            format!(
                "most admitted in one second: {admitted} (limit {}, bound {bound}: the limit plus the bursts held or started and requests before a first assignment); seconds over their bound: {over}",
                self.limit
            ),
        ]
    }

    /// The summary table and its notes, as `simulate` prints them.
    pub fn table(&self) -> String {
        let mut out = text_table(&COLUMNS, &self.rows());
        for note in self.notes() {
            let _ = writeln!(out, "{note}");
        }
        out
    }

    /// The charts: each client's assigned rate with their sum against the limit, and the
    /// requests admitted per second.
    pub fn charts(&self) -> Result<Vec<(&'static str, String)>, ChartError> {
        let x_max = self.end_ms as f64 / 1_000.0;
        let limit = Series {
            name: "limit".into(),
            color: OFFERED,
            points: vec![(0.0, self.limit as f64), (x_max, self.limit as f64)],
        };
        let n = self.clients.len();
        // One series per client, in the client's colour, then the fleet's own lines.
        let per_client = |points: &dyn Fn(&Client) -> Vec<(f64, f64)>| -> Vec<Series> {
            self.clients
                .iter()
                .enumerate()
                .map(|(i, c)| Series {
                    name: c.name.clone(),
                    color: i,
                    points: points(c),
                })
                .collect()
        };
        let mut assigned = per_client(&|c| c.assigned.until(self.end_ms));
        assigned.push(Series {
            name: "sum of assignments".into(),
            color: n,
            points: self.sum.until(self.end_ms),
        });
        assigned.push(limit.clone());
        let per_second = |counts: &mut dyn Iterator<Item = u64>| {
            counts
                .enumerate()
                .map(|(s, count)| (s as f64, count as f64))
                .collect()
        };
        let mut admitted = per_client(&|c| per_second(&mut c.per_second.iter().copied()));
        admitted.push(Series {
            name: "total".into(),
            color: n,
            points: per_second(&mut self.seconds.iter().map(|s| s.0)),
        });
        admitted.push(limit);
        Ok(vec![
            (
                "rlqs-assigned",
                line_chart(
                    "Each client's assigned rate, their sum, and the limit",
                    "requests/s",
                    x_max,
                    None,
                    &assigned,
                )?,
            ),
            (
                "rlqs-admitted",
                line_chart(
                    "Requests admitted per second, per client and in total, against the limit",
                    "requests",
                    x_max,
                    None,
                    &admitted,
                )?,
            ),
        ])
    }

    /// The HTML report: the spec, the table, its notes and the charts.
    pub fn html(&self) -> Result<String, ChartError> {
        let mut page = String::with_capacity(64 * 1024);
        page.push_str("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
        page.push_str("<title>floodgate simulate --rlqs</title>\n");
        let _ = writeln!(page, "<style>{STYLE}</style>\n</head>\n<body>");
        page.push_str("<h1>floodgate simulate --rlqs</h1>\n<dl class=\"details\">\n");
        let _ = writeln!(
            page,
            "<dt>rlqs</dt><dd><code>{}</code></dd>\n</dl>\n<h2>Summary</h2>",
            escape(&self.spec.to_string())
        );
        summary_table(&mut page, &COLUMNS, &self.rows());
        for note in self.notes() {
            let _ = writeln!(page, "<p class=\"note\">{}</p>", escape(&note));
        }
        page.push_str("<h2>Charts</h2>\n");
        for (_, chart) in self.charts()? {
            let _ = writeln!(page, "<figure class=\"chart\">{chart}</figure>");
        }
        page.push_str("</body>\n</html>\n");
        Ok(page)
    }

    /// Writes each chart as `DIR/<name>.svg`.
    pub fn write_charts(&self, dir: &Path) -> Result<Vec<PathBuf>, WriteChartsError> {
        write_svgs(dir, self.charts()?)
    }
}

#[cfg(test)]
mod tests;
