//! Building a stage of `pipeline:` (or of the `limiters:` preset): its limiter, its scope and
//! the settings every stage has, each error at the stage's path and field.

use std::collections::BTreeMap;
use std::sync::Arc;

use floodgate::algorithm::spec::{AlgorithmSpec, AnyAlgorithm, SpecDuration};
use floodgate::limiter::adaptive::AdaptiveConcurrencyLimiter;
use floodgate::limiter::concurrency::ConcurrencyLimiter;
use floodgate::limiter::fleet::FleetShedder;
use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
use floodgate::limiter::utilization::{UtilizationShedder, WorkerGauge};
use floodgate::pipeline::scope::{Cost, Field, IfMissing, KeyTemplate, Pattern, When};
use floodgate::pipeline::{Limiter, Scope, Stage};
use floodgate::store::Store;
use floodgate::Clock;

use crate::config::limiters::UtilizationConfig;
use crate::config::pipeline::{
    AdaptiveConfig, CostConfig, IfMissingConfig, LevelConfig, Patterns, StageConfig, StageKind,
};
use crate::config::{key_path, ConfigFileError};

/// What stages are built with besides their own section.
pub(crate) struct StageContext<'a, S> {
    pub store: &'a S,
    /// The top-level plans, built, and their default.
    pub plans: &'a [Plan],
    pub default_plan: &'a str,
    pub endpoint_costs: &'a BTreeMap<String, u64>,
    pub clock: &'a Arc<dyn Clock>,
}

/// A built stage, and the worker gauge of a utilization stage.
pub(crate) struct BuiltStage<S> {
    pub stage: Stage<S>,
    pub workers: Option<Arc<WorkerGauge>>,
}

/// Builds the stage `config`, written at `path`; every error names the path and the field,
/// and, for a stage of `pipeline`, the stage.
pub(crate) fn build_stage<S>(
    config: &StageConfig,
    path: &str,
    cx: &StageContext<'_, S>,
) -> Result<BuiltStage<S>, ConfigFileError>
where
    S: Store<str, AnyAlgorithm> + Clone + 'static,
{
    build_stage_at(config, path, cx).map_err(|error| match error {
        ConfigFileError::Invalid { path, message } if path.starts_with("pipeline") => {
            let message = format!("stage `{}`: {message}", config.name);
            ConfigFileError::Invalid { path, message }
        }
        other => other,
    })
}

fn build_stage_at<S>(
    config: &StageConfig,
    path: &str,
    cx: &StageContext<'_, S>,
) -> Result<BuiltStage<S>, ConfigFileError>
where
    S: Store<str, AnyAlgorithm> + Clone + 'static,
{
    let at = |field: &str| format!("{path}.{field}");
    let err = |e| ConfigFileError::from_config_error(path, e);
    if let Some(field) = config.foreign_fields().first() {
        return Err(ConfigFileError::invalid(
            at(field),
            format!("a {} stage has no `{field}`", config.kind.name()),
        ));
    }
    let scope = scope(config, path)?;
    let mut workers = None;
    let limiter: Limiter<S> = match config.kind {
        StageKind::Limit => return build_limit(config, path, scope, cx),
        StageKind::Concurrency => ConcurrencyLimiter::builder()
            .namespace(config.name.clone())
            .capacity(required(config.capacity, &at("capacity"))?)
            .lease_ttl(config.lease_ttl.unwrap_or(DEFAULT_LEASE_TTL).0)
            .build(cx.store.clone())
            .map_err(err)?
            .into(),
        StageKind::Fleet => FleetShedder::builder()
            .namespace(config.name.clone())
            .capacity(required(config.capacity, &at("capacity"))?)
            .reserved_for_critical(required(
                config.reserved_for_critical,
                &at("reserved_for_critical"),
            )?)
            .lease_ttl(config.lease_ttl.unwrap_or(DEFAULT_LEASE_TTL).0)
            .build(cx.store.clone())
            .map_err(err)?
            .into(),
        StageKind::AdaptiveConcurrency => {
            let (algorithm, seed) = config
                .adaptive
                .unwrap_or(AdaptiveConfig::Vegas {
                    initial_limit: None,
                    max_limit: None,
                    smoothing: None,
                    alpha: None,
                    beta: None,
                    probe_multiplier: None,
                    seed: None,
                })
                .algorithm();
            AdaptiveConcurrencyLimiter::builder()
                .name(config.name.clone())
                .algorithm(algorithm)
                .seed(seed)
                .lease_ttl(config.lease_ttl.unwrap_or(DEFAULT_LEASE_TTL).0)
                .clock(cx.clock.clone())
                .build()
                .map_err(|e| ConfigFileError::from_config_error(&at("adaptive"), e))?
                .into()
        }
        StageKind::Utilization => {
            let u = UtilizationConfig {
                workers: required(config.workers, &at("workers"))?,
                lease_ttl: config
                    .lease_ttl
                    .unwrap_or(SpecDuration(std::time::Duration::from_secs(60))),
                sample_interval: config
                    .sample_interval
                    .unwrap_or(crate::config::limiters::default_sample_interval()),
                seed: config.seed.unwrap_or(0),
                end_of_good: config.end_of_good,
                start_of_bad: config.start_of_bad,
                seconds_before_shedding: config.seconds_before_shedding,
                seconds_to_shed_all: config.seconds_to_shed_all,
                mode: config.mode,
                status: config.status,
            };
            // The service decides for workers elsewhere: a request is busy from its
            // evaluation to its release, a worker lease in its token.
            let gauge = WorkerGauge::new(u.workers)
                .and_then(|g| g.with_leases(u.lease_ttl.0, cx.clock.clone()))
                .map_err(err)?;
            let gauge = Arc::new(gauge);
            workers = Some(gauge.clone());
            UtilizationShedder::builder()
                .name(config.name.clone())
                .settings(u.settings())
                .sample_interval(u.sample_interval.0)
                .seed(u.seed)
                .workers(gauge)
                .clock(cx.clock.clone())
                .build()
                .map_err(err)?
                .into()
        }
    };
    Ok(BuiltStage {
        stage: common(Stage::new(limiter).scope(scope), config),
        workers,
    })
}

const DEFAULT_LEASE_TTL: SpecDuration = SpecDuration(std::time::Duration::from_secs(60));

fn required<T>(value: Option<T>, path: &str) -> Result<T, ConfigFileError> {
    value.ok_or_else(|| ConfigFileError::invalid(path, "missing"))
}

/// The settings every stage has: mode, failure policy, status, all or nothing.
fn common<S: Store<str, AnyAlgorithm> + 'static>(
    stage: Stage<S>,
    config: &StageConfig,
) -> Stage<S> {
    let stage = stage
        .mode(config.mode)
        .on_store_error(config.on_store_error.unwrap_or_default())
        .all_or_nothing(config.all_or_nothing.unwrap_or(false));
    match config.status {
        Some(status) => stage.status(status),
        None => stage,
    }
}

/// The stage's scope: its `when`, `key`, `cost`, `plan_from` and `if_missing`.
fn scope(config: &StageConfig, path: &str) -> Result<Scope, ConfigFileError> {
    let named = |field: &str, e: floodgate::ConfigError| {
        ConfigFileError::invalid(format!("{path}.{field}"), e.to_string())
    };
    let mut when = When::always();
    for (name, patterns) in &config.when {
        let field = Field::parse(name).map_err(|e| named(&key_path("when", name), e))?;
        let patterns = match patterns {
            Patterns::One(p) => vec![Pattern::new(p)],
            Patterns::Any(ps) => ps.iter().map(|p| Pattern::new(p)).collect(),
        };
        when = when.field(field, patterns);
    }
    let mut scope = Scope::all().when(when);
    if let Some(key) = &config.key {
        scope = scope.key(KeyTemplate::parse(key).map_err(|e| named("key", e))?);
    }
    if let Some(cost) = &config.cost {
        scope = scope.cost(match cost {
            CostConfig::Constant(n) => Cost::Constant(*n),
            CostConfig::Field(f) => Cost::Field(Field::parse(f).map_err(|e| named("cost", e))?),
        });
    }
    if let Some(field) = &config.plan_from {
        scope = scope.plan_from(Field::parse(field).map_err(|e| named("plan_from", e))?);
    }
    Ok(scope.if_missing(match config.if_missing {
        IfMissingConfig::Refuse => IfMissing::Refuse,
        IfMissingConfig::Skip => IfMissing::Skip,
    }))
}

/// Refuses a `limit` stage (at `path`) whose fields contradict each other: one of `spec`,
/// `plans` and `keys`; `key` and `default_plan` only where they mean something.
fn check_limit_fields(config: &StageConfig, path: &str) -> Result<(), ConfigFileError> {
    let conflict =
        |field: &str, why: &str| Err(ConfigFileError::invalid(format!("{path}.{field}"), why));
    let written = [
        config.spec.is_some(),
        config.plans.is_some(),
        !config.keys.is_empty(),
    ];
    if written.iter().filter(|w| **w).count() > 1 {
        return conflict("spec", "write one of `spec`, `plans` and `keys`");
    }
    if !config.keys.is_empty() && config.key.is_some() {
        return conflict("key", "a stage with `keys` gives each key in its list");
    }
    if config.default_plan.is_some() && config.plans.is_none() {
        return conflict(
            "default_plan",
            "`default_plan` goes with the stage's own `plans`",
        );
    }
    if !config.keys.is_empty() && config.all_or_nothing == Some(false) {
        return conflict(
            "all_or_nothing",
            "a stage with several keys is always all or nothing",
        );
    }
    Ok(())
}

/// A `limit` stage: one algorithm (`spec`), its own plans, the top-level plans, or levels.
fn build_limit<S>(
    config: &StageConfig,
    path: &str,
    scope: Scope,
    cx: &StageContext<'_, S>,
) -> Result<BuiltStage<S>, ConfigFileError>
where
    S: Store<str, AnyAlgorithm> + Clone + 'static,
{
    let name = &config.name;
    let at = |field: &str| format!("{path}.{field}");
    let conflict = |field: &str, why: &str| Err(ConfigFileError::invalid(at(field), why));
    check_limit_fields(config, path)?;
    let build_spec = |spec: &AlgorithmSpec, field: &str| {
        spec.build()
            .map_err(|e| ConfigFileError::from_config_error(&at(field), e))
    };
    let limiter = |namespace: &str, plans: Vec<Plan>, default: &str, field: &str| {
        let mut builder = RequestRateLimiter::builder()
            .namespace(namespace)
            .plans(plans)
            .default_plan(default);
        for (endpoint, cost) in cx.endpoint_costs {
            builder = builder.endpoint_cost(endpoint.clone(), *cost);
        }
        builder
            .build(cx.store.clone())
            .map_err(|e| ConfigFileError::from_config_error(&at(field), e))
    };
    let limit_plan = |label: &str, algorithm, field: &str| {
        Plan::limit(label, algorithm).map_err(|e| ConfigFileError::from_config_error(&at(field), e))
    };
    let stage = if let Some(spec) = &config.spec {
        let plan = limit_plan(name, build_spec(spec, "spec")?, "spec")?;
        Stage::new(limiter(name, vec![plan], name, "spec")?)
    } else if let Some(plans) = &config.plans {
        let mut built = Vec::with_capacity(plans.len());
        for (plan, spec) in plans {
            let field = key_path("plans", plan);
            let algorithm = build_spec(spec, &field)?;
            built.push(
                Plan::new(plan.clone(), algorithm)
                    .map_err(|e| ConfigFileError::from_config_error(&at(&field), e))?,
            );
        }
        let Some(default) = &config.default_plan else {
            return conflict(
                "default_plan",
                "missing: the plan of requests whose plan the stage's plans lack",
            );
        };
        if !plans.contains_key(default) {
            let known: Vec<&str> = plans.keys().map(String::as_str).collect();
            return conflict(
                "default_plan",
                &format!(
                    "unknown plan `{default}`: the stage's plans are {}",
                    known.join(", ")
                ),
            );
        }
        Stage::new(limiter(name, built, default, "plans")?)
    } else if let Some((first, rest)) = config.keys.split_first() {
        let level = |i: usize, level: &LevelConfig, namespace: &str| {
            let field = format!("keys[{i}]");
            let plan = limit_plan(
                &level.name,
                build_spec(&level.spec, &format!("{field}.spec"))?,
                &field,
            )?;
            let key = KeyTemplate::parse(&level.key).map_err(|e| {
                ConfigFileError::invalid(at(&format!("{field}.key")), e.to_string())
            })?;
            Ok::<_, ConfigFileError>((key, limiter(namespace, vec![plan], &level.name, &field)?))
        };
        let (key, primary) = level(0, first, name)?;
        let mut stage = Stage::new(primary).scope(scope.clone().key(key));
        for (i, l) in rest.iter().enumerate() {
            let namespace = format!("{name}.{}", l.name);
            let (key, limiter) = level(i + 1, l, &namespace)?;
            stage = stage.level(key, limiter);
        }
        return Ok(BuiltStage {
            stage: common(stage, config),
            workers: None,
        });
    } else {
        if cx.plans.is_empty() {
            return conflict(
                "spec",
                "give the stage a `spec`, `plans` or `keys`, or define the top-level `plans`",
            );
        }
        Stage::new(limiter(name, cx.plans.to_vec(), cx.default_plan, "plans")?)
    };
    Ok(BuiltStage {
        stage: common(stage.scope(scope), config),
        workers: None,
    })
}
