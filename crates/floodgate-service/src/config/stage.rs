//! One stage: an entry of `pipeline:`, or a section of `limiters:` (the same schema, named
//! after its section). A stage is the fields every stage has and one type per kind holding
//! that kind's own fields, so that the reader itself refuses a field a kind does not take,
//! naming the field, with its line:
//!
//! ```text
//! floodgate.yaml:12: invalid configuration: pipeline[2].key: unknown field `key`, expected
//! one of `capacity`, `reserved_for_critical`, `lease_ttl`, `on_store_error`, `all_or_nothing`,
//! or one every stage takes: `when`, `if_missing`, `mode`, `status`
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use floodgate::algorithm::spec::AlgorithmSpec;
use floodgate::duration::SpecDuration;
use floodgate::limiter::adaptive::{Adaptive, Gradient2, Vegas};
use floodgate::limiter::utilization::ControllerSettings;
use floodgate::pipeline::{Mode, OnStoreError};
use serde::de::{self, Deserializer};
use serde::Deserialize;
use serde_norway::{Mapping, Value};

use super::limiters::{mode, on_store_error};
use super::pipeline::{CostConfig, IfMissingConfig, LevelConfig, Patterns};

/// One stage: its name, the fields every stage has, and its kind with the kind's own fields.
#[derive(Clone, Debug, PartialEq)]
pub struct StageConfig {
    /// The stage's name: its namespace in the store, its name in metrics, on the dashboard and
    /// in the admin API (1 to 64 ASCII letters, digits and `_ - . /`). A section of
    /// `limiters:` is named after the section.
    pub name: String,
    /// The requests it applies to: each field named must match one of its patterns (`*` stands
    /// for any run of characters). Default: every request.
    pub when: BTreeMap<String, Patterns>,
    /// `refuse` (default: a 400 naming the field) or `skip`: what happens to a request lacking
    /// a field the stage's key, cost or plan needs.
    pub if_missing: IfMissingConfig,
    /// `enforce` (default), `shadow` or `off`.
    pub mode: Mode,
    /// The HTTP status of its refusals (default 429 for `limit` and `concurrency`, 503 for the
    /// shedders and `adaptive_concurrency`).
    pub status: Option<u16>,
    /// What it limits, with the fields of that kind.
    pub kind: StageKind,
}

/// What a stage limits (the `kind` field), with the fields only that kind takes.
#[derive(Clone, Debug, PartialEq)]
pub enum StageKind {
    /// `limit`: a rate (any algorithm) per key, by plan, or several keys with their own limits.
    Limit(LimitStage),
    /// `concurrency`: requests in flight per key.
    Concurrency(ConcurrencyStage),
    /// `fleet`: non-critical requests in flight across the fleet, with a reserve for critical
    /// ones.
    Fleet(FleetStage),
    /// `utilization`: this node's worker utilization.
    Utilization(UtilizationStage),
    /// `adaptive_concurrency`: this node's requests in flight, below a limit learned from their
    /// latency.
    AdaptiveConcurrency(AdaptiveStage),
}

/// The kinds' names, as `kind` takes them.
const KINDS: [&str; 5] = [
    "limit",
    "concurrency",
    "fleet",
    "utilization",
    "adaptive_concurrency",
];

impl StageKind {
    /// The kind's name, as the `kind` field writes it.
    pub fn name(&self) -> &'static str {
        match self {
            StageKind::Limit(_) => KINDS[0],
            StageKind::Concurrency(_) => KINDS[1],
            StageKind::Fleet(_) => KINDS[2],
            StageKind::Utilization(_) => KINDS[3],
            StageKind::AdaptiveConcurrency(_) => KINDS[4],
        }
    }

    /// What a failing store means for the stage, and whether a request refused by another
    /// stage consumes nothing here: as written for the kinds on the store, the defaults
    /// (`fail_open`, `false`) for those deciding on this node.
    pub fn store_settings(&self) -> (OnStoreError, bool) {
        match self {
            StageKind::Limit(l) => (l.on_store_error, l.all_or_nothing.unwrap_or(false)),
            StageKind::Concurrency(c) => (c.on_store_error, c.all_or_nothing),
            StageKind::Fleet(f) => (f.on_store_error, f.all_or_nothing),
            StageKind::Utilization(_) | StageKind::AdaptiveConcurrency(_) => {
                (OnStoreError::default(), false)
            }
        }
    }

    /// The kind named `name` with the fields in `own`; the reader's words when `own` holds a
    /// field the kind does not take, or lacks one it needs.
    fn read(name: &str, own: Mapping) -> Result<StageKind, String> {
        let own = Value::Mapping(own);
        let kind = match name {
            "limit" => LimitStage::deserialize(own).map(StageKind::Limit),
            "concurrency" => ConcurrencyStage::deserialize(own).map(StageKind::Concurrency),
            "fleet" => FleetStage::deserialize(own).map(StageKind::Fleet),
            "utilization" => UtilizationStage::deserialize(own).map(StageKind::Utilization),
            "adaptive_concurrency" => {
                AdaptiveStage::deserialize(own).map(StageKind::AdaptiveConcurrency)
            }
            other => {
                let expected: Vec<String> = KINDS.iter().map(|k| format!("`{k}`")).collect();
                return Err(format!(
                    "unknown variant `{other}`, expected one of {}",
                    expected.join(", ")
                ));
            }
        };
        kind.map_err(|e| {
            let said = e.to_string();
            if said.starts_with("unknown field") {
                let every: Vec<String> = EVERY_STAGE.iter().map(|f| format!("`{f}`")).collect();
                format!("{said}, or one every stage takes: {}", every.join(", "))
            } else {
                said
            }
        })
    }
}

/// A `limit` stage's own fields.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitStage {
    /// The key it counts requests by (default `{user}`).
    #[serde(default)]
    pub key: Option<String>,
    /// Several keys, each with its own limit, checked and consumed all or nothing (a
    /// hierarchical quota); instead of `key` and `spec`.
    #[serde(default)]
    pub keys: Vec<LevelConfig>,
    /// The cost per request: a whole number, or a field holding one (`attributes.units`).
    /// Default: the request's `cost`, else `endpoint_costs`, else 1.
    #[serde(default)]
    pub cost: Option<CostConfig>,
    /// One algorithm for every request (see the plans' `algorithm` field).
    #[serde(default)]
    pub spec: Option<AlgorithmSpec>,
    /// Plans, chosen by the request's plan (or `plan_from`). A stage with neither `spec`,
    /// `plans` nor `keys` uses the top-level `plans` and `default_plan`.
    #[serde(default)]
    pub plans: Option<BTreeMap<String, AlgorithmSpec>>,
    /// The plan of requests whose plan the stage's `plans` lack.
    #[serde(default)]
    pub default_plan: Option<String>,
    /// The field that names the plan (default the request's `plan`).
    #[serde(default)]
    pub plan_from: Option<String>,
    /// `fail_open` (default), `fail_closed` or `local` (this node's share of the limit on its
    /// own memory store, with `store.nodes` nodes; not for a stage with several `keys`).
    #[serde(default, deserialize_with = "on_store_error")]
    pub on_store_error: OnStoreError,
    /// Whether a request refused by a later stage consumes nothing here (default `false`; a
    /// stage with several `keys` always is, and refuses `false` written out).
    #[serde(default)]
    pub all_or_nothing: Option<bool>,
}

impl LimitStage {
    /// Whether the stage counts on the top-level `plans` (it has no `spec`, `plans` or `keys`
    /// of its own).
    pub fn uses_top_level_plans(&self) -> bool {
        self.spec.is_none() && self.plans.is_none() && self.keys.is_empty()
    }
}

/// A `concurrency` stage's own fields.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyStage {
    /// The key it counts requests in flight by (default `{user}`).
    #[serde(default)]
    pub key: Option<String>,
    /// The most requests in flight per key.
    pub capacity: u64,
    /// How long an unreturned lease holds its place (default 60 s).
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl: SpecDuration,
    /// `fail_open` (default), `fail_closed` or `local`.
    #[serde(default, deserialize_with = "on_store_error")]
    pub on_store_error: OnStoreError,
    /// Whether a request refused by another stage consumes nothing here (default `false`).
    #[serde(default)]
    pub all_or_nothing: bool,
}

/// A `fleet` stage's own fields.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetStage {
    /// Requests in flight across the fleet.
    pub capacity: u64,
    /// The fraction of `capacity` kept for critical requests (0 to 1).
    pub reserved_for_critical: f64,
    /// How long an unreturned lease holds its place (default 60 s).
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl: SpecDuration,
    /// `fail_open` (default), `fail_closed` or `local`.
    #[serde(default, deserialize_with = "on_store_error")]
    pub on_store_error: OnStoreError,
    /// Whether a request refused by another stage consumes nothing here (default `false`).
    #[serde(default)]
    pub all_or_nothing: bool,
}

/// A `utilization` stage's own fields.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UtilizationStage {
    /// The node's workers: utilization is busy workers divided by this (at least 1). A
    /// request admitted by `/v1/evaluate` is a busy worker until its lease token comes back
    /// with `/v1/release` (or `lease_ttl` has passed).
    pub workers: u64,
    /// How long a busy worker whose request is never released counts (default 60 s).
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl: SpecDuration,
    /// The most often the controller samples utilization (default 1 s).
    #[serde(default = "default_sample_interval")]
    pub sample_interval: SpecDuration,
    /// The seed of the random draw that sheds requests (default 0).
    #[serde(default)]
    pub seed: u64,
    /// Below this utilization the shed amount decreases (default 0.7).
    #[serde(default)]
    pub end_of_good: Option<f64>,
    /// From this utilization up the shed amount increases (default 0.8).
    #[serde(default)]
    pub start_of_bad: Option<f64>,
    /// Seconds of full overload before anything is shed (default 28).
    #[serde(default)]
    pub seconds_before_shedding: Option<f64>,
    /// Seconds of full overload to go from shedding nothing to everything (default 120).
    #[serde(default)]
    pub seconds_to_shed_all: Option<f64>,
}

impl UtilizationStage {
    /// A stage over `workers` workers with every other field at its default.
    pub fn new(workers: u64) -> UtilizationStage {
        UtilizationStage {
            workers,
            lease_ttl: default_lease_ttl(),
            sample_interval: default_sample_interval(),
            seed: 0,
            end_of_good: None,
            start_of_bad: None,
            seconds_before_shedding: None,
            seconds_to_shed_all: None,
        }
    }

    /// The controller's constants: Stripe's, with the configured overrides.
    pub fn settings(&self) -> ControllerSettings {
        let d = ControllerSettings::default();
        ControllerSettings {
            end_of_good: self.end_of_good.unwrap_or(d.end_of_good),
            start_of_bad: self.start_of_bad.unwrap_or(d.start_of_bad),
            seconds_before_shedding: self
                .seconds_before_shedding
                .unwrap_or(d.seconds_before_shedding),
            seconds_to_shed_all: self.seconds_to_shed_all.unwrap_or(d.seconds_to_shed_all),
        }
    }
}

/// An `adaptive_concurrency` stage's own fields.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveStage {
    /// The algorithm that learns the limit and its parameters (default Vegas with its
    /// defaults).
    #[serde(default)]
    pub adaptive: AdaptiveConfig,
    /// How long an unreturned lease holds its place (default 60 s).
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl: SpecDuration,
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

impl Default for AdaptiveConfig {
    /// Vegas with the library's parameters.
    fn default() -> Self {
        AdaptiveConfig::Vegas {
            initial_limit: None,
            max_limit: None,
            smoothing: None,
            alpha: None,
            beta: None,
            probe_multiplier: None,
            seed: None,
        }
    }
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

fn default_lease_ttl() -> SpecDuration {
    SpecDuration(Duration::from_secs(60))
}

fn default_sample_interval() -> SpecDuration {
    SpecDuration(Duration::from_secs(1))
}

/// The fields every stage takes besides `name` and `kind`.
const EVERY_STAGE: [&str; 4] = ["when", "if_missing", "mode", "status"];

/// The fields of [`EVERY_STAGE`], as read.
#[derive(Deserialize)]
struct EveryStage {
    #[serde(default)]
    when: BTreeMap<String, Patterns>,
    #[serde(default)]
    if_missing: IfMissingConfig,
    #[serde(default, deserialize_with = "mode")]
    mode: Mode,
    #[serde(default)]
    status: Option<u16>,
}

impl StageConfig {
    /// A stage named `name` of `kind`, every field of every stage at its default.
    pub fn new(name: &str, kind: StageKind) -> StageConfig {
        StageConfig {
            name: name.to_string(),
            when: BTreeMap::new(),
            if_missing: IfMissingConfig::Refuse,
            mode: Mode::Enforce,
            status: None,
            kind,
        }
    }

    /// The stage named `name` of the kind named `kind`, from its other fields; the reader's
    /// words for a field the kind does not take, a value of the wrong type or a field missing.
    fn read(name: String, kind: &str, fields: Mapping) -> Result<StageConfig, String> {
        let (every, own): (Mapping, Mapping) = fields
            .into_iter()
            .partition(|(key, _)| key.as_str().is_some_and(|key| EVERY_STAGE.contains(&key)));
        let every = EveryStage::deserialize(Value::Mapping(every)).map_err(|e| e.to_string())?;
        Ok(StageConfig {
            name,
            when: every.when,
            if_missing: every.if_missing,
            mode: every.mode,
            status: every.status,
            kind: StageKind::read(kind, own)?,
        })
    }

    /// A section of `limiters:`: the stage named `name` of the kind named `kind`, from the
    /// section's fields (which name neither). A section written with no fields (`concurrency:`
    /// or `concurrency: {}`) is the kind with its defaults.
    pub(crate) fn section<'de, D: Deserializer<'de>>(
        d: D,
        name: &'static str,
        kind: &'static str,
    ) -> Result<Option<StageConfig>, D::Error> {
        d.deserialize_map(Fields {
            section: Some((name, kind)),
        })
        .map(Some)
    }
}

impl<'de> Deserialize<'de> for StageConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StageConfig, D::Error> {
        d.deserialize_map(Fields { section: None })
    }
}

/// Reads a stage from its mapping. The stage is made inside the mapping's visit, so that the
/// reader puts any error at the stage's own entry (`pipeline[2]`), not at its list.
struct Fields {
    /// For a section of `limiters:`, its name and its kind.
    section: Option<(&'static str, &'static str)>,
}

impl<'de> de::Visitor<'de> for Fields {
    type Value = StageConfig;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a stage's fields")
    }

    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<StageConfig, A::Error> {
        let mut fields = Mapping::new();
        while let Some((key, value)) = map.next_entry::<Value, Value>()? {
            fields.insert(key, value);
        }
        let (name, kind) = match self.section {
            Some((name, kind)) => (name.to_string(), kind.to_string()),
            None => {
                let mut take = |field: &'static str| match fields.remove(field) {
                    Some(value) => String::deserialize(value).map_err(de::Error::custom),
                    None => Err(de::Error::missing_field(field)),
                };
                (take("name")?, take("kind")?)
            }
        };
        StageConfig::read(name, &kind, fields).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> Result<StageConfig, String> {
        serde_norway::from_str(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn each_kind_reads_its_own_fields_and_those_of_every_stage() {
        let stage =
            read("{name: f, kind: fleet, capacity: 8, reserved_for_critical: 0.25, mode: shadow, status: 529}")
                .expect("reads");
        assert_eq!((stage.mode, stage.status), (Mode::Shadow, Some(529)));
        let StageKind::Fleet(fleet) = &stage.kind else {
            panic!("{stage:?}")
        };
        assert_eq!((fleet.capacity, fleet.lease_ttl), (8, default_lease_ttl()));
        assert_eq!(stage.kind.name(), "fleet");
        let limit = read("{name: l, kind: limit}").expect("reads");
        assert_eq!(
            limit,
            StageConfig::new("l", StageKind::Limit(LimitStage::default()))
        );
    }

    #[test]
    fn the_reader_refuses_a_field_the_kind_does_not_take() {
        let said = read("{name: f, kind: fleet, capacity: 8, reserved_for_critical: 0.25, key: x}")
            .expect_err("a fleet stage has no key");
        assert!(
            said.starts_with("unknown field `key`, expected one of `capacity`"),
            "{said}"
        );
        assert!(said.contains("or one every stage takes: `when`"), "{said}");
        let said = read("{name: c, kind: concurrency}").expect_err("no capacity");
        assert!(said.contains("missing field `capacity`"), "{said}");
        let said = read("{kind: concurrency, capacity: 1}").expect_err("no name");
        assert!(said.contains("missing field `name`"), "{said}");
        let said = read("{name: a, kind: adaptive}").expect_err("no such kind");
        assert!(said.contains("unknown variant `adaptive`"), "{said}");
    }
}
