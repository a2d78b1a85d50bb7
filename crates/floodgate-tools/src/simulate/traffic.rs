//! Generated traffic: a rate over time (`steady`, `poisson`, `burst`, `ramp`, `sine`), arrivals
//! evenly spaced or Poisson, spread over `keys` users with an optional Zipf skew.
//!
//! A spec is a JSON object (or a YAML/JSON file holding one): `pattern` and its parameters
//! (rates in requests per second, times in seconds or duration strings), plus, for every
//! pattern:
//! - `keys` (default 1): users `user-1` … `user-N` (`key_prefix` changes `user-`);
//! - `zipf` (default 0): user k is picked with probability ∝ 1/k^zipf (0: uniformly);
//! - `arrivals`: `even` (default; the n-th request when the rate's integral reaches n) or
//!   `poisson` (default for the `poisson` pattern);
//! - `cost` (default 1), `priority` (a class, or weights such as `{"critical": 1, "get": 9}`),
//!   `latency` (default `100ms`: how long an admitted request holds its lease or worker);
//! - `knee` (default none): a service whose latency grows with load. It runs `knee` requests
//!   at once in `latency`; past that, requests share it, so a request admitted with `n`
//!   requests in flight (itself included) takes `latency × max(1, n / knee)`. Each limiter of
//!   the run counts its own requests in flight, so a limiter that admits fewer sees a faster
//!   service;
//! - for `--pipeline` runs, what a request tells the pipeline's stages besides its user, cost
//!   and class: `plan` (default none: the default plan), `endpoint` (default none) and
//!   `attributes` (`{"method": "POST", "ip": "10.0.{key}"}`; `{key}` in a value stands for the
//!   request's user, so each user can have an address of its own).
//!
//! Patterns: `steady` and `poisson` (`rate`); `burst` (`rate`, and `burst_rate` from `at` for
//! `for`); `ramp` (`from` at time 0 to `to` at the run's end, linearly); `sine` (`mean` +
//! `amplitude`·sin(2πt/`period`), `amplitude` ≤ `mean`).
//!
//! Generation steps through time in 1 ms ticks with the rate fixed within a tick, so a run
//! holds O(1) memory (plus the Zipf table, one number per user) however long it is.

use std::time::Duration;

use floodgate::duration::SpecDuration;
use floodgate::limiter::Priority;
use floodgate::Nanos;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use serde_json::{Map, Value};

/// The most users a spec may spread its traffic over (the Zipf table's bound).
pub const MAX_KEYS: u64 = 10_000_000;

/// The generator's time step.
const TICK: Duration = Duration::from_millis(1);

/// Why a traffic spec was refused.
#[derive(Debug, thiserror::Error)]
pub enum TrafficError {
    /// The spec's shape is wrong: an unknown pattern or field, a missing or mistyped one.
    #[error("{0}")]
    Shape(#[source] serde_json::Error),
    /// A value is out of range.
    #[error("field `{field}`: {value}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// The value as given.
        value: String,
        /// What it must be.
        reason: &'static str,
    },
}

fn invalid(field: &'static str, value: impl ToString, reason: &'static str) -> TrafficError {
    TrafficError::Invalid {
        field,
        value: value.to_string(),
        reason,
    }
}

/// How the rate varies over time.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "pattern", rename_all = "snake_case", deny_unknown_fields)]
pub enum Pattern {
    /// `rate` requests per second, evenly spaced unless `arrivals` says otherwise.
    Steady {
        /// Requests per second.
        rate: f64,
    },
    /// `rate` requests per second, Poisson arrivals unless `arrivals` says otherwise.
    Poisson {
        /// Requests per second.
        rate: f64,
    },
    /// `rate`, except `burst_rate` in `[at, at + for)`.
    Burst {
        /// Requests per second outside the burst.
        rate: f64,
        /// Requests per second during the burst.
        burst_rate: f64,
        /// When the burst starts.
        at: SpecDuration,
        /// How long it lasts.
        #[serde(rename = "for")]
        lasts: SpecDuration,
    },
    /// From `from` requests per second at time 0 to `to` at the run's end, linearly.
    Ramp {
        /// The rate at time 0.
        from: f64,
        /// The rate at the run's end.
        to: f64,
    },
    /// `mean + amplitude·sin(2πt/period)` requests per second.
    Sine {
        /// The average rate.
        mean: f64,
        /// The swing either side of it (at most `mean`).
        amplitude: f64,
        /// One full cycle.
        period: SpecDuration,
    },
}

/// How arrivals are placed in time.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// The n-th request when the rate's integral reaches n: no randomness.
    Even,
    /// A Poisson process of the rate (exponential gaps).
    Poisson,
}

/// The request classes' mix.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum PriorityMix {
    /// Every request of one class.
    One(String),
    /// Weights per class (any non-negative numbers; they are normalised).
    Weights(std::collections::BTreeMap<String, f64>),
}

/// The fields every pattern takes.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Common {
    #[serde(default = "one")]
    keys: u64,
    #[serde(default)]
    zipf: f64,
    arrivals: Option<Arrivals>,
    #[serde(default = "one")]
    cost: u64,
    priority: Option<PriorityMix>,
    latency: Option<SpecDuration>,
    knee: Option<u64>,
    key_prefix: Option<String>,
    name: Option<String>,
    plan: Option<String>,
    endpoint: Option<String>,
    attributes: Option<std::collections::BTreeMap<String, String>>,
}

fn one() -> u64 {
    1
}

/// A checked traffic spec.
#[derive(Clone, Debug)]
pub struct Traffic {
    /// The rate over time.
    pub pattern: Pattern,
    /// How arrivals are placed.
    pub arrivals: Arrivals,
    /// Users to spread requests over.
    pub keys: u64,
    /// The Zipf exponent (0: uniform).
    pub zipf: f64,
    /// Each request's cost.
    pub cost: u64,
    /// Cumulative weights of the four classes (critical, post, get, test).
    classes: [(Priority, f64); 4],
    /// How long an admitted request holds its place, at or below the knee.
    pub latency: Duration,
    /// Requests the service runs at once before latency grows (`None`: latency is fixed).
    pub knee: Option<u64>,
    /// Users are `{key_prefix}{1..=keys}`.
    pub key_prefix: String,
    /// What its requests tell a pipeline besides their user, cost and class.
    pub context: std::sync::Arc<RequestContext>,
    /// The name shown in reports (the spec's `name`, or its pattern).
    pub name: String,
}

impl Traffic {
    /// Reads and checks a spec (a JSON object).
    pub fn from_value(value: Value) -> Result<Traffic, TrafficError> {
        let (common, pattern) = read_spec(value)?;
        check_rates(&pattern)?;
        common.check()?;
        let classes = classes(common.priority.as_ref())?;
        let name = common.name.unwrap_or_else(|| pattern_name(&pattern).into());
        Ok(Traffic {
            arrivals: common.arrivals.unwrap_or(match pattern {
                Pattern::Poisson { .. } => Arrivals::Poisson,
                _ => Arrivals::Even,
            }),
            pattern,
            keys: common.keys,
            zipf: common.zipf,
            cost: common.cost,
            classes,
            latency: common.latency.map_or(Duration::from_millis(100), |d| d.0),
            knee: common.knee,
            key_prefix: common.key_prefix.unwrap_or_else(|| "user-".into()),
            name,
            context: std::sync::Arc::new(RequestContext {
                plan: common.plan.unwrap_or_default(),
                endpoint: common.endpoint,
                attributes: common.attributes.unwrap_or_default().into_iter().collect(),
            }),
        })
    }

    /// The rate at `t` seconds into a run of `duration` seconds, in requests per second.
    pub fn rate_at(&self, t: f64, duration: f64) -> f64 {
        match &self.pattern {
            Pattern::Steady { rate } | Pattern::Poisson { rate } => *rate,
            Pattern::Burst {
                rate,
                burst_rate,
                at,
                lasts,
            } => {
                let start = at.0.as_secs_f64();
                if t >= start && t < start + lasts.0.as_secs_f64() {
                    *burst_rate
                } else {
                    *rate
                }
            }
            Pattern::Ramp { from, to } => {
                let f = if duration > 0.0 {
                    (t / duration).clamp(0.0, 1.0)
                } else {
                    0.0
                };
                from + (to - from) * f
            }
            Pattern::Sine {
                mean,
                amplitude,
                period,
            } => {
                let phase = std::f64::consts::TAU * t / period.0.as_secs_f64();
                (mean + amplitude * phase.sin()).max(0.0)
            }
        }
    }
}

/// The fields of a spec that every pattern takes; the others are the pattern's.
const COMMON: [&str; 12] = [
    "keys",
    "zipf",
    "arrivals",
    "cost",
    "priority",
    "latency",
    "knee",
    "key_prefix",
    "name",
    "plan",
    "endpoint",
    "attributes",
];

/// Splits a spec's object into the fields every pattern takes and its pattern, each read
/// with its own unknown fields refused.
fn read_spec(value: Value) -> Result<(Common, Pattern), TrafficError> {
    let Value::Object(mut fields) = value else {
        return Err(TrafficError::Shape(serde::de::Error::custom(
            "a traffic spec is a JSON object such as {\"pattern\":\"steady\",\"rate\":100}",
        )));
    };
    let mut common = Map::new();
    for name in COMMON {
        if let Some(v) = fields.remove(name) {
            common.insert(name.to_string(), v);
        }
    }
    let common: Common =
        serde_json::from_value(Value::Object(common)).map_err(TrafficError::Shape)?;
    let pattern: Pattern =
        serde_json::from_value(Value::Object(fields)).map_err(TrafficError::Shape)?;
    Ok((common, pattern))
}

/// Checks the pattern's rates (and a sine's amplitude and period).
fn check_rates(pattern: &Pattern) -> Result<(), TrafficError> {
    let rates: Vec<(&'static str, f64)> = match pattern {
        Pattern::Steady { rate } | Pattern::Poisson { rate } => vec![("rate", *rate)],
        Pattern::Burst {
            rate, burst_rate, ..
        } => vec![("rate", *rate), ("burst_rate", *burst_rate)],
        Pattern::Ramp { from, to } => vec![("from", *from), ("to", *to)],
        Pattern::Sine {
            mean,
            amplitude,
            period,
        } => {
            if !(amplitude.is_finite() && *amplitude >= 0.0 && amplitude <= mean) {
                return Err(invalid(
                    "amplitude",
                    amplitude,
                    "must be between 0 and `mean` (a rate cannot go below 0)",
                ));
            }
            if period.0.is_zero() {
                return Err(invalid("period", "0", "must be above 0"));
            }
            vec![("mean", *mean)]
        }
    };
    for (field, rate) in rates {
        if !(rate.is_finite() && (0.0..=1e7).contains(&rate)) {
            return Err(invalid(
                field,
                rate,
                "must be a number of requests per second in 0..=10000000",
            ));
        }
    }
    Ok(())
}

impl Common {
    /// Checks the users, the skew, the cost and the knee (the classes are checked as
    /// [`classes`] reads them).
    fn check(&self) -> Result<(), TrafficError> {
        if !(1..=MAX_KEYS).contains(&self.keys) {
            return Err(invalid("keys", self.keys, "must be in 1..=10000000"));
        }
        if !(self.zipf.is_finite() && (0.0..=10.0).contains(&self.zipf)) {
            return Err(invalid("zipf", self.zipf, "must be in 0..=10"));
        }
        if self.cost == 0 {
            return Err(invalid("cost", 0, "must be at least 1"));
        }
        if self.knee == Some(0) {
            return Err(invalid("knee", 0, "must be at least 1 request in flight"));
        }
        Ok(())
    }
}

fn pattern_name(pattern: &Pattern) -> &'static str {
    match pattern {
        Pattern::Steady { .. } => "steady",
        Pattern::Poisson { .. } => "poisson",
        Pattern::Burst { .. } => "burst",
        Pattern::Ramp { .. } => "ramp",
        Pattern::Sine { .. } => "sine",
    }
}

/// The classes' cumulative weights, in the order critical, post, get, test.
fn classes(mix: Option<&PriorityMix>) -> Result<[(Priority, f64); 4], TrafficError> {
    const ORDER: [Priority; 4] = [
        Priority::Critical,
        Priority::Post,
        Priority::Get,
        Priority::Test,
    ];
    let unknown = |name: &str| invalid("priority", name, "classes are critical, post, get, test");
    let mut weights = [0.0; 4];
    match mix {
        None => weights[2] = 1.0,
        Some(PriorityMix::One(name)) => {
            let p = Priority::from_name(name).ok_or_else(|| unknown(name))?;
            weights[ORDER.iter().position(|o| *o == p).unwrap_or(2)] = 1.0;
        }
        Some(PriorityMix::Weights(map)) => {
            for (name, w) in map {
                let p = Priority::from_name(name).ok_or_else(|| unknown(name))?;
                if !(w.is_finite() && *w >= 0.0) {
                    return Err(invalid("priority", w, "weights must be numbers ≥ 0"));
                }
                weights[ORDER.iter().position(|o| *o == p).unwrap_or(2)] += w;
            }
        }
    }
    let total: f64 = weights.iter().sum();
    if total <= 0.0 {
        return Err(invalid(
            "priority",
            "{}",
            "at least one weight must be above 0",
        ));
    }
    let mut cumulative = 0.0;
    Ok(ORDER.map(|p| {
        let i = ORDER.iter().position(|o| *o == p).unwrap_or(0);
        cumulative += weights[i] / total;
        (p, cumulative)
    }))
}

/// One generated request.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// When it arrives, from the run's start.
    pub at: Nanos,
    /// Its user.
    pub key: String,
    /// Its cost.
    pub cost: u64,
    /// Its class.
    pub priority: Priority,
    /// How long it holds its place once admitted, at or below the knee.
    pub latency: Duration,
    /// Its traffic's knee (see the [module documentation](self)).
    pub knee: Option<u64>,
    /// Its traffic's plan, endpoint and attributes.
    pub context: std::sync::Arc<RequestContext>,
}

/// What a traffic's requests tell a pipeline besides their user, cost and class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestContext {
    /// The plan (empty: the default plan).
    pub plan: String,
    /// The endpoint.
    pub endpoint: Option<String>,
    /// Attributes, each value with `{key}` standing for the request's user.
    pub attributes: Vec<(String, String)>,
}

impl RequestContext {
    /// The attributes of a request by `key`.
    pub fn attributes_of(&self, key: &str) -> Vec<(String, String)> {
        self.attributes
            .iter()
            .map(|(name, value)| (name.clone(), value.replace("{key}", key)))
            .collect()
    }
}

impl Request {
    /// How long the request takes when admitted with `in_flight` requests in flight (itself
    /// included): its latency, stretched past its traffic's knee.
    pub fn latency_with(&self, in_flight: u64) -> Duration {
        match self.knee {
            Some(knee) if in_flight > knee => self.latency.mul_f64(in_flight as f64 / knee as f64),
            _ => self.latency,
        }
    }
}

/// Picks user ranks 1..=n with probability ∝ 1/k^s.
#[derive(Clone, Debug)]
pub struct Zipf {
    /// Cumulative probabilities (empty when uniform).
    cdf: Vec<f64>,
    n: u64,
}

impl Zipf {
    /// A sampler over `n` ranks with exponent `s` (0: uniform, no table).
    pub fn new(n: u64, s: f64) -> Zipf {
        if s == 0.0 || n <= 1 {
            return Zipf { cdf: Vec::new(), n };
        }
        let mut cdf = Vec::with_capacity(n as usize);
        let mut sum = 0.0;
        for k in 1..=n {
            sum += (k as f64).powf(-s);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        Zipf { cdf, n }
    }

    /// A rank in 1..=n.
    pub fn sample(&self, rng: &mut impl Rng) -> u64 {
        if self.cdf.is_empty() {
            return rng.random_range(1..=self.n.max(1));
        }
        let u: f64 = rng.random();
        let i = self.cdf.partition_point(|c| *c < u);
        (i as u64 + 1).min(self.n)
    }

    /// The probability of rank `k`.
    pub fn probability(&self, k: u64) -> f64 {
        if self.cdf.is_empty() {
            return 1.0 / self.n.max(1) as f64;
        }
        let i = (k - 1) as usize;
        self.cdf[i] - if i == 0 { 0.0 } else { self.cdf[i - 1] }
    }
}

/// The requests of one traffic spec over `duration`, in time order.
#[derive(Debug)]
pub struct Generator {
    traffic: Traffic,
    duration: f64,
    rng: StdRng,
    zipf: Zipf,
    /// The current tick's number (its start is `tick` ms).
    tick: u64,
    /// `even`: the rate's integral so far, and the arrivals handed out.
    credit: f64,
    emitted: f64,
    /// Arrival times in the current tick, not yet handed out (latest last).
    due: Vec<f64>,
}

impl Generator {
    /// A generator for `traffic` over `duration`, seeded (same seed, same requests).
    pub fn new(traffic: Traffic, duration: Duration, seed: u64) -> Generator {
        let zipf = Zipf::new(traffic.keys, traffic.zipf);
        Generator {
            traffic,
            duration: duration.as_secs_f64(),
            rng: StdRng::seed_from_u64(seed),
            zipf,
            tick: 0,
            credit: 0.0,
            emitted: 0.0,
            due: Vec::new(),
        }
    }

    /// The arrival times of the next tick that has any, or `false` at the end.
    fn fill(&mut self) -> bool {
        let dt = TICK.as_secs_f64();
        while self.due.is_empty() {
            // Times from the tick's number, so that they do not drift as a sum would.
            let start = self.tick as f64 * dt;
            if start >= self.duration {
                return false;
            }
            let end = ((self.tick + 1) as f64 * dt).min(self.duration);
            let rate = self.traffic.rate_at(start, self.duration);
            match self.traffic.arrivals {
                Arrivals::Even => {
                    // The n-th arrival is where the integral of the rate crosses n (with a
                    // millionth of a request's slack for the sum's rounding, so that 50/s for
                    // 60 s is 3,000).
                    let before = self.credit;
                    self.credit += rate * (end - start);
                    while self.emitted + 1.0 <= self.credit + 1e-6 {
                        self.emitted += 1.0;
                        let t = start + (self.emitted - before) / rate;
                        self.due.push(t.clamp(start, end));
                    }
                }
                Arrivals::Poisson => {
                    // Memoryless: restarting the exponential gaps at each tick is exact for a
                    // rate that is constant within the tick.
                    if rate > 0.0 {
                        let mut t = start;
                        loop {
                            let u: f64 = self.rng.random();
                            t += -(1.0 - u).ln() / rate;
                            if t >= end {
                                break;
                            }
                            self.due.push(t);
                        }
                    }
                }
            }
            self.due.reverse();
            self.tick += 1;
        }
        true
    }

    fn class(&mut self) -> Priority {
        let u: f64 = self.rng.random();
        self.traffic
            .classes
            .iter()
            .find(|(_, c)| u < *c)
            .map_or(Priority::Get, |(p, _)| *p)
    }
}

impl Iterator for Generator {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if !self.fill() {
            return None;
        }
        let at = self.due.pop()?;
        let rank = self.zipf.sample(&mut self.rng);
        let priority = self.class();
        Some(Request {
            at: Nanos::from_secs_f64(at),
            key: format!("{}{rank}", self.traffic.key_prefix),
            cost: self.traffic.cost,
            priority,
            latency: self.traffic.latency,
            knee: self.traffic.knee,
            context: self.traffic.context.clone(),
        })
    }
}

/// Several generators' requests merged in time order (ties: the earlier spec first).
#[derive(Debug)]
pub struct Merged {
    sources: Vec<Generator>,
    heads: Vec<Option<Request>>,
}

impl Merged {
    /// Merges `sources`.
    pub fn new(mut sources: Vec<Generator>) -> Merged {
        let heads = sources.iter_mut().map(Iterator::next).collect();
        Merged { sources, heads }
    }
}

impl Iterator for Merged {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        let (i, _) = self
            .heads
            .iter()
            .enumerate()
            .filter_map(|(i, h)| h.as_ref().map(|r| (i, r.at)))
            .min_by_key(|&(i, at)| (at, i))?;
        let next = self.sources[i].next();
        std::mem::replace(&mut self.heads[i], next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn traffic(spec: Value) -> Traffic {
        Traffic::from_value(spec).unwrap()
    }

    fn count(spec: Value, secs: u64, seed: u64) -> Vec<Request> {
        Generator::new(traffic(spec), Duration::from_secs(secs), seed).collect()
    }

    fn within(actual: f64, expected: f64, tolerance: f64) -> bool {
        (actual - expected).abs() <= expected * tolerance
    }

    #[test]
    fn steady_is_exact_and_evenly_spaced() {
        let r = count(json!({"pattern": "steady", "rate": 50}), 60, 1);
        assert_eq!(r.len(), 3000);
        // 20 ms apart, to the nanosecond's rounding.
        assert!(r
            .windows(2)
            .all(|w| (w[1].at.0 - w[0].at.0).abs_diff(20_000_000) <= 1));
    }

    #[test]
    fn poisson_rate_holds_over_a_long_run_and_gaps_vary() {
        let r = count(json!({"pattern": "poisson", "rate": 200}), 300, 7);
        // 60,000 expected, σ ≈ 245: 2% is over four σ.
        assert!(within(r.len() as f64, 60_000.0, 0.02), "{}", r.len());
        // Exponential gaps: their coefficient of variation is 1.
        let gaps: Vec<f64> = r
            .windows(2)
            .map(|w| (w[1].at.0 - w[0].at.0) as f64)
            .collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        assert!(
            within(var.sqrt() / mean, 1.0, 0.05),
            "{}",
            var.sqrt() / mean
        );
        assert!(r.windows(2).all(|w| w[0].at <= w[1].at));
    }

    #[test]
    fn the_same_seed_gives_the_same_requests() {
        let spec = json!({"pattern": "poisson", "rate": 100, "keys": 50, "zipf": 1.1});
        assert_eq!(count(spec.clone(), 5, 3), count(spec.clone(), 5, 3));
        assert_ne!(count(spec.clone(), 5, 3), count(spec, 5, 4));
    }

    #[test]
    fn a_burst_raises_the_rate_for_its_window_only() {
        let spec = json!({"pattern": "burst", "rate": 10, "burst_rate": 100,
                          "at": "20s", "for": "5s"});
        let r = count(spec, 60, 1);
        let inside = r
            .iter()
            .filter(|q| (20.005..25.005).contains(&q.at.as_secs_f64()))
            .count();
        assert_eq!(inside, 500);
        assert_eq!(r.len(), 550 + 500);
    }

    #[test]
    fn a_ramp_integrates_to_its_average() {
        let r = count(json!({"pattern": "ramp", "from": 0, "to": 100}), 100, 1);
        assert!(within(r.len() as f64, 5000.0, 0.001), "{}", r.len());
        let first_half = r.iter().filter(|q| q.at.as_secs_f64() < 50.0).count();
        assert!(within(first_half as f64, 1250.0, 0.01), "{first_half}");
    }

    #[test]
    fn a_sine_averages_its_mean_over_whole_periods() {
        let spec = json!({"pattern": "sine", "mean": 40, "amplitude": 30, "period": "10s",
                          "arrivals": "poisson"});
        let r = count(spec, 600, 2);
        assert!(within(r.len() as f64, 24_000.0, 0.03), "{}", r.len());
        // The first quarter period is above the mean, the third below it.
        let rising = r.iter().filter(|q| q.at.as_secs_f64() % 10.0 < 5.0).count();
        assert!(rising as f64 > 0.6 * r.len() as f64, "{rising}");
    }

    #[test]
    fn zipf_keys_follow_their_law() {
        let spec = json!({"pattern": "steady", "rate": 1000, "keys": 100, "zipf": 1.0});
        let r = count(spec, 200, 5);
        let zipf = Zipf::new(100, 1.0);
        for k in [1u64, 2, 10] {
            let name = format!("user-{k}");
            let seen = r.iter().filter(|q| q.key == name).count() as f64 / r.len() as f64;
            assert!(within(seen, zipf.probability(k), 0.05), "{k}: {seen}");
        }
        // Uniform without a skew.
        let flat = count(
            json!({"pattern": "steady", "rate": 1000, "keys": 4}),
            100,
            5,
        );
        let ones = flat.iter().filter(|q| q.key == "user-1").count();
        assert!(within(ones as f64, 25_000.0, 0.03), "{ones}");
    }

    #[test]
    fn priorities_follow_their_weights() {
        let spec = json!({"pattern": "steady", "rate": 1000,
                          "priority": {"critical": 1, "get": 3}});
        let r = count(spec, 100, 9);
        let critical = r
            .iter()
            .filter(|q| q.priority == Priority::Critical)
            .count();
        assert!(within(critical as f64, 25_000.0, 0.03), "{critical}");
        assert!(r
            .iter()
            .all(|q| matches!(q.priority, Priority::Critical | Priority::Get)));
    }

    #[test]
    fn merged_sources_stay_in_time_order() {
        let a = Generator::new(
            traffic(json!({"pattern": "poisson", "rate": 30})),
            Duration::from_secs(10),
            1,
        );
        let b = Generator::new(
            traffic(json!({"pattern": "steady", "rate": 20, "key_prefix": "bot-"})),
            Duration::from_secs(10),
            2,
        );
        let merged: Vec<Request> = Merged::new(vec![a, b]).collect();
        assert!(merged.windows(2).all(|w| w[0].at <= w[1].at));
        assert_eq!(
            merged.iter().filter(|r| r.key.starts_with("bot-")).count(),
            200
        );
    }

    #[test]
    fn bad_specs_name_the_field() {
        for (spec, field) in [
            (json!({"pattern": "steady", "rate": -1}), "rate"),
            (json!({"pattern": "steady"}), "rate"),
            (json!({"pattern": "zigzag", "rate": 1}), "zigzag"),
            (
                json!({"pattern": "steady", "rate": 1, "colour": 1}),
                "colour",
            ),
            (json!({"pattern": "steady", "rate": 1, "keys": 0}), "keys"),
            (json!({"pattern": "steady", "rate": 1, "zipf": -1}), "zipf"),
            (
                json!({"pattern": "steady", "rate": 1, "priority": "urgent"}),
                "priority",
            ),
            (
                json!({"pattern": "sine", "mean": 1, "amplitude": 2, "period": 1}),
                "amplitude",
            ),
            (
                json!({"pattern": "sine", "mean": 1, "amplitude": 1, "period": 0}),
                "period",
            ),
            (
                json!({"pattern": "burst", "rate": 1, "burst_rate": 2, "at": "x", "for": 1}),
                "x",
            ),
        ] {
            let message = Traffic::from_value(spec.clone()).unwrap_err().to_string();
            assert!(message.contains(field), "{spec}: {message}");
        }
    }
}
