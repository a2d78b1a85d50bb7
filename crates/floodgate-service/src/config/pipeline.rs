//! The `pipeline` section: the stages in order, each a limiter with the requests it applies to
//! and the key it counts them by; and the `attributes` section, which bounds what requests may
//! carry and names the attributes that are secrets.
//!
//! ```yaml
//! pipeline:
//!   - name: per_ip
//!     kind: limit
//!     key: "{attributes.ip}"
//!     spec: { algorithm: token_bucket, rate: 10, capacity: 20 }
//!   - name: order_writes
//!     kind: limit
//!     key: "{user}"
//!     when: { attributes.method: POST, endpoint: "/orders*" }
//!     spec: { algorithm: fixed_window, limit: 5, window: 1m }
//! ```
//!
//! The four sections of `limiters:` are a preset of this list ([`LimitersConfig::stages`]): a
//! file written with them builds the same stages as the list they stand for, with errors at
//! `limiters.NAME.FIELD`. A file may have one or the other, not both.

use std::collections::BTreeMap;

use floodgate::algorithm::spec::{AlgorithmSpec, SpecDuration};
use floodgate::limiter::adaptive::{Adaptive, Gradient2, Vegas};
use floodgate::limiter::{Mode, OnStoreError};
use serde::Deserialize;

use super::limiters::{
    mode, on_store_error, ConcurrencyConfig, FleetConfig, LimitersConfig, RequestRateConfig,
    UtilizationConfig,
};
use super::ConfigFileError;

/// One stage of `pipeline:`. Which fields a stage may have depends on its `kind`; a field
/// that does not apply to it is refused, naming the stage and the field.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageConfig {
    /// The stage's name: its namespace in the store, its name in metrics, on the dashboard and
    /// in the admin API (1 to 64 ASCII letters, digits and `_ - . /`).
    pub name: String,
    /// What it limits.
    pub kind: StageKind,
    /// The key it counts requests by (`limit` and `concurrency`; default `{user}`).
    #[serde(default)]
    pub key: Option<String>,
    /// A `limit` stage's keys, each with its own limit, checked and consumed all or nothing
    /// (a hierarchical quota); instead of `key` and `spec`.
    #[serde(default)]
    pub keys: Vec<LevelConfig>,
    /// The requests it applies to: each field named must match one of its patterns (`*` stands
    /// for any run of characters). Default: every request.
    #[serde(default)]
    pub when: BTreeMap<String, Patterns>,
    /// `refuse` (default: a 400 naming the field) or `skip`: what happens to a request lacking
    /// a field the stage's key, cost or plan needs.
    #[serde(default)]
    pub if_missing: IfMissingConfig,
    /// A `limit` stage's cost per request: a whole number, or a field holding one
    /// (`attributes.units`). Default: the request's `cost`, else `endpoint_costs`, else 1.
    #[serde(default)]
    pub cost: Option<CostConfig>,
    /// A `limit` stage's one algorithm (see the plans' `algorithm` field).
    #[serde(default)]
    pub spec: Option<AlgorithmSpec>,
    /// A `limit` stage's plans, chosen by the request's plan (or `plan_from`). A `limit` stage
    /// with neither `spec`, `plans` nor `keys` uses the top-level `plans` and `default_plan`.
    #[serde(default)]
    pub plans: Option<BTreeMap<String, AlgorithmSpec>>,
    /// The plan of requests whose plan the stage's `plans` lack.
    #[serde(default)]
    pub default_plan: Option<String>,
    /// The field that names the plan (default the request's `plan`).
    #[serde(default)]
    pub plan_from: Option<String>,
    /// `concurrency`: requests in flight per key; `fleet`: across the fleet.
    #[serde(default)]
    pub capacity: Option<u64>,
    /// `fleet`: the fraction of `capacity` kept for critical requests (0 to 1).
    #[serde(default)]
    pub reserved_for_critical: Option<f64>,
    /// `concurrency` and `fleet`: how long an unreturned lease holds its place (default 60 s).
    #[serde(default)]
    pub lease_ttl: Option<SpecDuration>,
    /// `utilization`: the node's workers.
    #[serde(default)]
    pub workers: Option<u64>,
    /// `utilization`: the most often the controller samples (default 1 s).
    #[serde(default)]
    pub sample_interval: Option<SpecDuration>,
    /// `utilization`: the seed of the random draw (default 0).
    #[serde(default)]
    pub seed: Option<u64>,
    /// `utilization`: below this utilization the shed amount decreases (default 0.7).
    #[serde(default)]
    pub end_of_good: Option<f64>,
    /// `utilization`: from this utilization up the shed amount increases (default 0.8).
    #[serde(default)]
    pub start_of_bad: Option<f64>,
    /// `utilization`: seconds of full overload before anything is shed (default 28).
    #[serde(default)]
    pub seconds_before_shedding: Option<f64>,
    /// `utilization`: seconds of full overload to shed everything (default 120).
    #[serde(default)]
    pub seconds_to_shed_all: Option<f64>,
    /// `adaptive_concurrency`: the algorithm that learns the limit and its parameters
    /// (default Vegas with its defaults).
    #[serde(default)]
    pub adaptive: Option<AdaptiveConfig>,
    /// `enforce` (default), `shadow` or `off`.
    #[serde(default, deserialize_with = "mode")]
    pub mode: Mode,
    /// `fail_open` (default), `fail_closed` or `local` (not for `utilization`, which has no
    /// store, nor for a stage with several `keys`).
    #[serde(default, deserialize_with = "on_store_error_or_none")]
    pub on_store_error: Option<OnStoreError>,
    /// The HTTP status of its refusals (default 429 for `limit` and `concurrency`, 503 for the
    /// shedders).
    #[serde(default)]
    pub status: Option<u16>,
    /// Whether a request refused by a later stage consumes nothing here (default `false`; a
    /// stage with several `keys` always is).
    #[serde(default)]
    pub all_or_nothing: Option<bool>,
}

/// What a stage limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageKind {
    /// A rate (any algorithm) per key, by plan, or several keys with their own limits.
    Limit,
    /// Requests in flight per key.
    Concurrency,
    /// Non-critical requests in flight across the fleet, with a reserve for critical ones.
    Fleet,
    /// This node's worker utilization.
    Utilization,
    /// This node's requests in flight, below a limit learned from their latency.
    AdaptiveConcurrency,
}

impl StageKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            StageKind::Limit => "limit",
            StageKind::Concurrency => "concurrency",
            StageKind::Fleet => "fleet",
            StageKind::Utilization => "utilization",
            StageKind::AdaptiveConcurrency => "adaptive_concurrency",
        }
    }
}

/// An `adaptive_concurrency` stage's algorithm: `vegas` or `gradient2`, with the parameters
/// of Netflix's concurrency-limits (each optional, defaulting to the library's).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(tag = "algorithm", rename_all = "snake_case", deny_unknown_fields)]
pub enum AdaptiveConfig {
    /// Vegas: keeps the queue its latency implies between `alpha` and `beta`.
    Vegas {
        /// The limit before any sample (default 20).
        initial_limit: Option<f64>,
        /// The most the limit may reach (default 1000).
        max_limit: Option<f64>,
        /// The share of each new limit taken (default 1).
        smoothing: Option<f64>,
        /// Queue, in multiples of log10(limit), below which the limit grows (default 3).
        alpha: Option<f64>,
        /// Queue, in multiples of log10(limit), above which it shrinks (default 6).
        beta: Option<f64>,
        /// Probe for a new no-load latency about every this × limit samples (default 30).
        probe_multiplier: Option<f64>,
        /// The seed of the probes' jitter (default 0).
        seed: Option<u64>,
    },
    /// Gradient2: follows the ratio of the long-term average latency to each latency.
    Gradient2 {
        /// The limit before any sample (default 20).
        initial_limit: Option<f64>,
        /// The least the limit may reach (default 20).
        min_limit: Option<f64>,
        /// The most the limit may reach (default 200).
        max_limit: Option<f64>,
        /// The share of each new target taken (default 0.2).
        smoothing: Option<f64>,
        /// How much slower than usual a request may be before the limit shrinks (default 1.5).
        rtt_tolerance: Option<f64>,
        /// The long-term average's window, in samples (default 600).
        long_window: Option<u64>,
        /// Places added to each target to probe for more (default 4).
        queue_size: Option<f64>,
    },
}

impl AdaptiveConfig {
    /// The algorithm with its parameters, and the seed.
    pub fn algorithm(&self) -> (Adaptive, u64) {
        match *self {
            AdaptiveConfig::Vegas {
                initial_limit,
                max_limit,
                smoothing,
                alpha,
                beta,
                probe_multiplier,
                seed,
            } => {
                let d = Vegas::default();
                let vegas = Vegas {
                    initial_limit: initial_limit.unwrap_or(d.initial_limit),
                    max_limit: max_limit.unwrap_or(d.max_limit),
                    smoothing: smoothing.unwrap_or(d.smoothing),
                    alpha: alpha.unwrap_or(d.alpha),
                    beta: beta.unwrap_or(d.beta),
                    probe_multiplier: probe_multiplier.unwrap_or(d.probe_multiplier),
                };
                (Adaptive::Vegas(vegas), seed.unwrap_or(0))
            }
            AdaptiveConfig::Gradient2 {
                initial_limit,
                min_limit,
                max_limit,
                smoothing,
                rtt_tolerance,
                long_window,
                queue_size,
            } => {
                let d = Gradient2::default();
                let gradient = Gradient2 {
                    initial_limit: initial_limit.unwrap_or(d.initial_limit),
                    min_limit: min_limit.unwrap_or(d.min_limit),
                    max_limit: max_limit.unwrap_or(d.max_limit),
                    smoothing: smoothing.unwrap_or(d.smoothing),
                    rtt_tolerance: rtt_tolerance.unwrap_or(d.rtt_tolerance),
                    long_window: long_window.unwrap_or(d.long_window),
                    queue_size: queue_size.unwrap_or(d.queue_size),
                };
                (Adaptive::Gradient2(gradient), 0)
            }
        }
    }
}

/// One key of a hierarchical `limit` stage.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LevelConfig {
    /// The level's name: in refusal messages, and (after the first) in its namespace,
    /// `STAGE.NAME`; the first level counts in the stage's namespace.
    pub name: String,
    /// The key template.
    pub key: String,
    /// Its limit.
    pub spec: AlgorithmSpec,
}

/// One pattern or a list of them.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Patterns {
    /// One pattern.
    One(String),
    /// Any of these.
    Any(Vec<String>),
}

/// A whole-number cost, or the field that holds one.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum CostConfig {
    /// The same for every request.
    Constant(u64),
    /// A field, as `attributes.units`.
    Field(String),
}

/// `refuse` or `skip`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IfMissingConfig {
    /// A 400 naming the stage and the field.
    #[default]
    Refuse,
    /// The stage passes the request untouched.
    Skip,
}

/// The `attributes` section: what `POST /v1/evaluate` accepts in `attributes`, and which of
/// them are secrets.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttributesConfig {
    /// Attributes whose values are secrets (API keys, tokens): each value becomes `key:` and
    /// 32 hex digits of a keyed SHA-256 before any stage sees it, so that it is never a store
    /// key, a log line or a dashboard entry.
    #[serde(default)]
    pub secret: Vec<String>,
    /// The most attributes one request may carry (default 32, at most 256).
    #[serde(default = "default_max_count")]
    pub max_count: usize,
    /// The longest value, in bytes (default 256, at most 4096).
    #[serde(default = "default_max_value_bytes")]
    pub max_value_bytes: usize,
}

impl Default for AttributesConfig {
    fn default() -> Self {
        AttributesConfig {
            secret: Vec::new(),
            max_count: default_max_count(),
            max_value_bytes: default_max_value_bytes(),
        }
    }
}

fn default_max_count() -> usize {
    32
}

fn default_max_value_bytes() -> usize {
    256
}

impl AttributesConfig {
    /// Checks the bounds and the secret attributes' names.
    pub(super) fn validate(&self) -> Result<(), ConfigFileError> {
        if !(1..=256).contains(&self.max_count) {
            return Err(ConfigFileError::invalid(
                "attributes.max_count",
                format!("invalid value {} (must be 1 to 256)", self.max_count),
            ));
        }
        if !(1..=4096).contains(&self.max_value_bytes) {
            return Err(ConfigFileError::invalid(
                "attributes.max_value_bytes",
                format!("invalid value {} (must be 1 to 4096)", self.max_value_bytes),
            ));
        }
        for (i, name) in self.secret.iter().enumerate() {
            if !floodgate::pipeline::scope::valid_attribute_name(name) {
                return Err(ConfigFileError::invalid(
                    format!("attributes.secret[{i}]"),
                    format!("invalid name {name:?} (1 to 64 ASCII letters, digits and `_ - .`)"),
                ));
            }
        }
        Ok(())
    }
}

fn on_store_error_or_none<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<OnStoreError>, D::Error> {
    on_store_error(d).map(Some)
}

impl LimitersConfig {
    /// The stages the four sections stand for, in Stripe's order, each with the path of its
    /// section for errors: `request_rate` is a `limit` stage keyed by user on the top-level
    /// plans, `concurrency` one keyed by user, then the two shedders.
    pub fn stages(&self) -> Vec<(String, StageConfig)> {
        let sections = [
            (
                "request_rate",
                self.request_rate.map(RequestRateConfig::stage),
            ),
            (
                "concurrency",
                self.concurrency.map(ConcurrencyConfig::stage),
            ),
            ("fleet", self.fleet.map(FleetConfig::stage)),
            (
                "utilization",
                self.utilization.map(UtilizationConfig::stage),
            ),
        ];
        sections
            .into_iter()
            .filter_map(|(name, stage)| Some((format!("limiters.{name}"), stage?)))
            .collect()
    }
}

impl RequestRateConfig {
    /// The `limit` stage this section stands for.
    fn stage(self) -> StageConfig {
        let RequestRateConfig {
            mode,
            on_store_error,
            status,
            all_or_nothing,
        } = self;
        StageConfig {
            mode,
            on_store_error: Some(on_store_error),
            status,
            all_or_nothing: Some(all_or_nothing),
            ..StageConfig::named("request_rate", StageKind::Limit)
        }
    }
}

impl ConcurrencyConfig {
    /// The `concurrency` stage this section stands for.
    fn stage(self) -> StageConfig {
        let ConcurrencyConfig {
            capacity,
            lease_ttl,
            mode,
            on_store_error,
            status,
            all_or_nothing,
        } = self;
        StageConfig {
            capacity: Some(capacity),
            lease_ttl: Some(lease_ttl),
            mode,
            on_store_error: Some(on_store_error),
            status,
            all_or_nothing: Some(all_or_nothing),
            ..StageConfig::named("concurrency", StageKind::Concurrency)
        }
    }
}

impl FleetConfig {
    /// The `fleet` stage this section stands for.
    fn stage(self) -> StageConfig {
        let FleetConfig {
            capacity,
            reserved_for_critical,
            lease_ttl,
            mode,
            on_store_error,
            status,
            all_or_nothing,
        } = self;
        StageConfig {
            capacity: Some(capacity),
            reserved_for_critical: Some(reserved_for_critical),
            lease_ttl: Some(lease_ttl),
            mode,
            on_store_error: Some(on_store_error),
            status,
            all_or_nothing: Some(all_or_nothing),
            ..StageConfig::named("fleet", StageKind::Fleet)
        }
    }
}

impl UtilizationConfig {
    /// The `utilization` stage this section stands for.
    fn stage(self) -> StageConfig {
        let UtilizationConfig {
            workers,
            lease_ttl,
            sample_interval,
            seed,
            end_of_good,
            start_of_bad,
            seconds_before_shedding,
            seconds_to_shed_all,
            mode,
            status,
        } = self;
        StageConfig {
            workers: Some(workers),
            lease_ttl: Some(lease_ttl),
            sample_interval: Some(sample_interval),
            seed: Some(seed),
            end_of_good,
            start_of_bad,
            seconds_before_shedding,
            seconds_to_shed_all,
            mode,
            status,
            ..StageConfig::named("utilization", StageKind::Utilization)
        }
    }
}

impl StageConfig {
    /// A stage of `kind` named `name` with every other field at its default.
    pub fn named(name: &str, kind: StageKind) -> StageConfig {
        StageConfig {
            name: name.to_string(),
            kind,
            key: None,
            keys: Vec::new(),
            when: BTreeMap::new(),
            if_missing: IfMissingConfig::Refuse,
            cost: None,
            spec: None,
            plans: None,
            default_plan: None,
            plan_from: None,
            capacity: None,
            reserved_for_critical: None,
            lease_ttl: None,
            workers: None,
            sample_interval: None,
            seed: None,
            end_of_good: None,
            start_of_bad: None,
            seconds_before_shedding: None,
            seconds_to_shed_all: None,
            adaptive: None,
            mode: Mode::Enforce,
            on_store_error: None,
            status: None,
            all_or_nothing: None,
        }
    }

    /// The fields written that a stage of its kind does not have.
    pub(crate) fn foreign_fields(&self) -> Vec<&'static str> {
        let written = [
            ("key", self.key.is_some()),
            ("keys", !self.keys.is_empty()),
            ("cost", self.cost.is_some()),
            ("spec", self.spec.is_some()),
            ("plans", self.plans.is_some()),
            ("default_plan", self.default_plan.is_some()),
            ("plan_from", self.plan_from.is_some()),
            ("capacity", self.capacity.is_some()),
            (
                "reserved_for_critical",
                self.reserved_for_critical.is_some(),
            ),
            ("lease_ttl", self.lease_ttl.is_some()),
            ("workers", self.workers.is_some()),
            ("sample_interval", self.sample_interval.is_some()),
            ("seed", self.seed.is_some()),
            ("end_of_good", self.end_of_good.is_some()),
            ("start_of_bad", self.start_of_bad.is_some()),
            (
                "seconds_before_shedding",
                self.seconds_before_shedding.is_some(),
            ),
            ("seconds_to_shed_all", self.seconds_to_shed_all.is_some()),
            ("adaptive", self.adaptive.is_some()),
            ("on_store_error", self.on_store_error.is_some()),
            ("all_or_nothing", self.all_or_nothing.is_some()),
        ];
        let allowed: &[&str] = match self.kind {
            StageKind::Limit => &[
                "key",
                "keys",
                "cost",
                "spec",
                "plans",
                "default_plan",
                "plan_from",
                "on_store_error",
                "all_or_nothing",
            ],
            StageKind::Concurrency => &[
                "key",
                "capacity",
                "lease_ttl",
                "on_store_error",
                "all_or_nothing",
            ],
            StageKind::Fleet => &[
                "capacity",
                "reserved_for_critical",
                "lease_ttl",
                "on_store_error",
                "all_or_nothing",
            ],
            StageKind::AdaptiveConcurrency => &["adaptive", "lease_ttl"],
            StageKind::Utilization => &[
                "workers",
                "lease_ttl",
                "sample_interval",
                "seed",
                "end_of_good",
                "start_of_bad",
                "seconds_before_shedding",
                "seconds_to_shed_all",
            ],
        };
        written
            .into_iter()
            .filter(|(name, present)| *present && !allowed.contains(name))
            .map(|(name, _)| name)
            .collect()
    }
}

#[cfg(test)]
mod tests;
