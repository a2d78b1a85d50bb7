//! Building a stage of `pipeline:` (or of the `limiters:` preset): its limiter, its scope and
//! the settings every stage has, each error at the stage's path and field.

use std::collections::BTreeMap;
use std::sync::Arc;

use floodgate::algorithm::spec::{AlgorithmSpec, AnyAlgorithm};
use floodgate::limiter::adaptive::AdaptiveConcurrencyLimiter;
use floodgate::limiter::concurrency::ConcurrencyLimiter;
use floodgate::limiter::fleet::FleetShedder;
use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
use floodgate::limiter::utilization::{UtilizationShedder, WorkerGauge};
use floodgate::pipeline::scope::{Cost, Field, IfMissing, KeyTemplate, Pattern, When};
use floodgate::pipeline::{Limiter, Scope, Stage};
use floodgate::store::Store;
use floodgate::Clock;

use crate::config::pipeline::{CostConfig, IfMissingConfig, LevelConfig, Patterns};
use crate::config::stage::{LimitStage, StageConfig, StageKind};
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
    let err = |e| ConfigFileError::from_config_error(path, e);
    let name = config.name.clone();
    let scope = scope(config, path)?;
    let mut workers = None;
    let limiter: Limiter<S> = match &config.kind {
        StageKind::Limit(limit) => return build_limit(config, limit, path, scope, cx),
        StageKind::Concurrency(c) => ConcurrencyLimiter::builder()
            .namespace(name)
            .capacity(c.capacity)
            .lease_ttl(c.lease_ttl.0)
            .build(cx.store.clone())
            .map_err(err)?
            .into(),
        StageKind::Fleet(f) => FleetShedder::builder()
            .namespace(name)
            .capacity(f.capacity)
            .reserved_for_critical(f.reserved_for_critical)
            .lease_ttl(f.lease_ttl.0)
            .build(cx.store.clone())
            .map_err(err)?
            .into(),
        StageKind::AdaptiveConcurrency(a) => {
            let (algorithm, seed) = a.adaptive.algorithm();
            AdaptiveConcurrencyLimiter::builder()
                .name(name)
                .algorithm(algorithm)
                .seed(seed)
                .lease_ttl(a.lease_ttl.0)
                .clock(cx.clock.clone())
                .build()
                .map_err(|e| ConfigFileError::from_config_error(&format!("{path}.adaptive"), e))?
                .into()
        }
        StageKind::Utilization(u) => {
            // The service decides for workers elsewhere: a request is busy from its
            // evaluation to its release, a worker lease in its token.
            let gauge = WorkerGauge::new(u.workers)
                .and_then(|g| g.with_leases(u.lease_ttl.0, cx.clock.clone()))
                .map_err(err)?;
            let gauge = Arc::new(gauge);
            workers = Some(gauge.clone());
            UtilizationShedder::builder()
                .name(name)
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

/// The settings every stage has: mode, failure policy, status, all or nothing.
fn common<S: Store<str, AnyAlgorithm> + 'static>(
    stage: Stage<S>,
    config: &StageConfig,
) -> Stage<S> {
    let (on_store_error, all_or_nothing) = config.kind.store_settings();
    let stage = stage
        .mode(config.mode)
        .on_store_error(on_store_error)
        .all_or_nothing(all_or_nothing);
    match config.status {
        Some(status) => stage.status(status),
        None => stage,
    }
}

/// The stage's scope: its `when` and `if_missing`, and its kind's `key`, `cost` and
/// `plan_from`.
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
    let (key, cost, plan_from) = match &config.kind {
        StageKind::Limit(l) => (l.key.as_ref(), l.cost.as_ref(), l.plan_from.as_ref()),
        StageKind::Concurrency(c) => (c.key.as_ref(), None, None),
        _ => (None, None, None),
    };
    if let Some(key) = key {
        scope = scope.key(KeyTemplate::parse(key).map_err(|e| named("key", e))?);
    }
    if let Some(cost) = cost {
        scope = scope.cost(match cost {
            CostConfig::Constant(n) => Cost::Constant(*n),
            CostConfig::Field(f) => Cost::Field(Field::parse(f).map_err(|e| named("cost", e))?),
        });
    }
    if let Some(field) = plan_from {
        scope = scope.plan_from(Field::parse(field).map_err(|e| named("plan_from", e))?);
    }
    Ok(scope.if_missing(match config.if_missing {
        IfMissingConfig::Refuse => IfMissing::Refuse,
        IfMissingConfig::Skip => IfMissing::Skip,
    }))
}

/// Refuses a `limit` stage (at `path`) whose fields contradict each other: one of `spec`,
/// `plans` and `keys`; `key` and `default_plan` only where they mean something.
fn check_limit_fields(config: &LimitStage, path: &str) -> Result<(), ConfigFileError> {
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
    stage: &StageConfig,
    config: &LimitStage,
    path: &str,
    scope: Scope,
    cx: &StageContext<'_, S>,
) -> Result<BuiltStage<S>, ConfigFileError>
where
    S: Store<str, AnyAlgorithm> + Clone + 'static,
{
    check_limit_fields(config, path)?;
    let limits = Limits {
        name: &stage.name,
        path,
        cx,
    };
    let built = if let Some(spec) = &config.spec {
        Stage::new(limits.one(&stage.name, &stage.name, spec, "spec", "spec")?).scope(scope)
    } else if let Some(plans) = &config.plans {
        Stage::new(limits.own_plans(plans, config.default_plan.as_deref())?).scope(scope)
    } else if !config.keys.is_empty() {
        limits.levels(&config.keys, scope)?
    } else {
        if cx.plans.is_empty() {
            return Err(limits.refused(
                "spec",
                "give the stage a `spec`, `plans` or `keys`, or define the top-level `plans`",
            ));
        }
        let plans = cx.plans.to_vec();
        Stage::new(limits.limiter(&stage.name, plans, cx.default_plan, "plans")?).scope(scope)
    };
    Ok(BuiltStage {
        stage: common(built, stage),
        workers: None,
    })
}

/// What the limiters of one `limit` stage are built with: the stage's name, its path in the
/// file (for errors) and the context.
struct Limits<'a, S> {
    name: &'a str,
    path: &'a str,
    cx: &'a StageContext<'a, S>,
}

impl<S> Limits<'_, S>
where
    S: Store<str, AnyAlgorithm> + Clone + 'static,
{
    /// `why` refused at the stage's `field`.
    fn refused(&self, field: &str, why: &str) -> ConfigFileError {
        ConfigFileError::invalid(format!("{}.{field}", self.path), why)
    }

    /// A library error, at the stage's `field`.
    fn at(&self, field: &str) -> impl Fn(floodgate::ConfigError) -> ConfigFileError {
        let path = format!("{}.{field}", self.path);
        move |e| ConfigFileError::from_config_error(&path, e)
    }

    /// A request rate limiter in `namespace` over `plans`, with the top-level endpoint costs.
    fn limiter(
        &self,
        namespace: &str,
        plans: Vec<Plan>,
        default: &str,
        field: &str,
    ) -> Result<RequestRateLimiter<S>, ConfigFileError> {
        let mut builder = RequestRateLimiter::builder()
            .namespace(namespace)
            .plans(plans)
            .default_plan(default);
        for (endpoint, cost) in self.cx.endpoint_costs {
            builder = builder.endpoint_cost(endpoint.clone(), *cost);
        }
        builder.build(self.cx.store.clone()).map_err(self.at(field))
    }

    /// A limiter in `namespace` with one limit, `spec` (written at `spec_field`), labelled
    /// `label` in refusals.
    fn one(
        &self,
        namespace: &str,
        label: &str,
        spec: &AlgorithmSpec,
        spec_field: &str,
        field: &str,
    ) -> Result<RequestRateLimiter<S>, ConfigFileError> {
        let algorithm = spec.build().map_err(self.at(spec_field))?;
        let plan = Plan::limit(label, algorithm).map_err(self.at(field))?;
        self.limiter(namespace, vec![plan], label, field)
    }

    /// A limiter over the stage's own `plans`, `default` naming one of them.
    fn own_plans(
        &self,
        plans: &BTreeMap<String, AlgorithmSpec>,
        default: Option<&str>,
    ) -> Result<RequestRateLimiter<S>, ConfigFileError> {
        let mut built = Vec::with_capacity(plans.len());
        for (plan, spec) in plans {
            let field = key_path("plans", plan);
            let algorithm = spec.build().map_err(self.at(&field))?;
            built.push(Plan::new(plan.clone(), algorithm).map_err(self.at(&field))?);
        }
        let Some(default) = default else {
            return Err(self.refused(
                "default_plan",
                "missing: the plan of requests whose plan the stage's plans lack",
            ));
        };
        if !plans.contains_key(default) {
            let known: Vec<&str> = plans.keys().map(String::as_str).collect();
            return Err(self.refused(
                "default_plan",
                &format!(
                    "unknown plan `{default}`: the stage's plans are {}",
                    known.join(", ")
                ),
            ));
        }
        self.limiter(self.name, built, default, "plans")
    }

    /// A hierarchical stage: the first key counts in the stage's namespace, each other in
    /// `STAGE.LEVEL`.
    fn levels(&self, keys: &[LevelConfig], scope: Scope) -> Result<Stage<S>, ConfigFileError> {
        let level = |i: usize, level: &LevelConfig, namespace: &str| {
            let field = format!("keys[{i}]");
            let spec_field = format!("{field}.spec");
            let limiter = self.one(namespace, &level.name, &level.spec, &spec_field, &field)?;
            let key = KeyTemplate::parse(&level.key)
                .map_err(|e| self.refused(&format!("{field}.key"), &e.to_string()))?;
            Ok::<_, ConfigFileError>((key, limiter))
        };
        let mut levels = keys.iter().enumerate();
        let Some((_, first)) = levels.next() else {
            return Err(self.refused("keys", "missing"));
        };
        let (key, primary) = level(0, first, self.name)?;
        let mut stage = Stage::new(primary).scope(scope.key(key));
        for (i, l) in levels {
            let (key, limiter) = level(i, l, &format!("{}.{}", self.name, l.name))?;
            stage = stage.level(key, limiter);
        }
        Ok(stage)
    }
}
