//! What a configuration serves, built: [`Served`], the pipeline, the named limits and the
//! Envoy rules over one store, and the checks that the store can run them. The configuration
//! (`crate::config`) is the data; this module builds from it, keeping what a reload keeps.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::limiter::request_rate::Plan;
use floodgate::limiter::utilization::WorkerGauge;
use floodgate::limiter::KeyedLimit;
use floodgate::pipeline::Mode;
use floodgate::pipeline::{Limiter, Pipeline};
use floodgate::store::Store;
use floodgate::Clock;

use crate::config::envoy;
use crate::config::{
    key_path, AttributesConfig, Config, ConfigFileError, ResponseHeaderNames, Written,
};
use crate::descriptors::RuleSet;
use crate::store::ServiceStore;

mod stages;

use self::stages::{build_stage, StageContext};

/// Everything a [`Config`] serves, built once from it ([`Config::build`]) over one store: the
/// service swaps this whole value in on reload.
pub struct Served<S> {
    /// The configured limiters as stages, in order, with their modes, failure policies and
    /// refusal statuses.
    pub pipeline: Pipeline<S>,
    /// The utilization shedder's worker gauge: the server enters it for every request it
    /// serves. `None` when the shedder is not configured.
    pub workers: Option<Arc<WorkerGauge>>,
    /// The named limits of `POST /v1/check`, each in its own namespace of the store.
    pub limits: BTreeMap<String, KeyedLimit<S>>,
    /// The Envoy RLS domains' rules.
    pub rules: RuleSet,
    /// User → plan.
    pub users: BTreeMap<String, String>,
    /// The plan of users without a known plan (empty when there are no plans).
    pub default_plan: String,
    /// The names of the rate limit headers added to every `ShouldRateLimit` answer; `None`
    /// when they are off (see [`rls`](crate::config::rls)).
    pub response_headers: Option<ResponseHeaderNames>,
    /// Each stage's mode as the configuration sets it, by stage name: the stages' current
    /// modes may differ, switched at run time ([`Pipeline::set_mode`]).
    pub configured_modes: BTreeMap<String, Mode>,
    /// What a `ShouldRateLimit` call answers when the store fails (`rls.on_store_error`).
    pub rls_on_store_error: crate::rls::StoreFailureAnswer,
    /// `rls.shadow_mode`: over-limit answers are answered `OK`.
    pub rls_shadow_mode: bool,
    /// `rls.require_domains`: not ready without a domain.
    pub rls_require_domains: bool,
    /// Where each Envoy descriptor is written, by its statistics key
    /// ([`crate::descriptors::Rule::full_key`]), for errors about its rule.
    pub written: std::collections::HashMap<String, Written>,
    /// Where each stage is written (`limiters.concurrency`, `pipeline[2]`), by stage name.
    pub stage_paths: BTreeMap<String, String>,
    /// What requests may carry in `attributes`.
    pub attributes: AttributesConfig,
    /// How long a reservation can be settled (`reservation_ttl`).
    pub reservation_ttl: std::time::Duration,
    /// The Rate Limit Quota Service's settings (`rlqs`).
    pub rlqs: crate::rlqs::Settings,
}

impl<S> fmt::Debug for Served<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Served")
            .field("workers", &self.workers)
            .field("limits", &self.limits.keys().collect::<Vec<_>>())
            .field("domains", &self.rules.domains().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Config {
    /// The named limits of `POST /v1/check` over `store`, each in the namespace of its name
    /// (errors at `limits.NAME.FIELD`).
    pub(crate) fn named_limits<S>(
        &self,
        store: &S,
    ) -> Result<BTreeMap<String, KeyedLimit<S>>, ConfigFileError>
    where
        S: Store<str, AnyAlgorithm> + Clone,
    {
        self.limits
            .iter()
            .map(|(name, spec)| {
                let path = key_path("limits", name);
                let at = |e| ConfigFileError::from_config_error(&path, e);
                let limit = KeyedLimit::new(name, spec.build().map_err(at)?, store.clone());
                Ok((name.clone(), limit.map_err(at)?))
            })
            .collect()
    }

    /// Checks this configuration and builds everything it serves over `store`, once: the
    /// pipeline's stages, the named limits and the Envoy rules; `clock` drives the utilization
    /// shedder. Every limiter keeps its keys in its own namespace of the one store. The first
    /// problem is returned with its path in the file and the value (see
    /// [`Config::validate`] for the checks across fields).
    pub fn build<S>(&self, store: S, clock: Arc<dyn Clock>) -> Result<Served<S>, ConfigFileError>
    where
        S: Store<str, AnyAlgorithm> + Clone + 'static,
    {
        self.build_after(store, clock, None)
    }

    /// [`Config::build`] for a configuration replacing `previous` (a reload): each stage that
    /// `previous` has too (same name and kind) goes on counting where it left off
    /// ([`floodgate::pipeline::PipelineBuilder::counting_on_from`]).
    pub fn build_after<S>(
        &self,
        store: S,
        clock: Arc<dyn Clock>,
        previous: Option<&Served<S>>,
    ) -> Result<Served<S>, ConfigFileError>
    where
        S: Store<str, AnyAlgorithm> + Clone + 'static,
    {
        // Every error of the build is placed in the file the configuration came from.
        let build = || -> Result<Served<S>, ConfigFileError> {
            let plans = self.plans()?;
            self.validate(&plans)?;
            let previous = previous.map(|p| &p.pipeline);
            let (pipeline, workers, stage_paths) = self.pipeline(plans, &store, clock, previous)?;
            let limits = self.named_limits(&store)?;
            // One store, one namespace each: a named limit may not count in a stage's keys.
            for name in limits.keys() {
                let taken =
                    name == crate::descriptors::RLS_NAMESPACE || pipeline.stage(name).is_some();
                if taken {
                    return Err(ConfigFileError::invalid(
                        key_path("limits", name),
                        format!("the name `{name}` is taken by a limiter of the pipeline or the Envoy rules; choose another"),
                    ));
                }
            }
            let configured_modes = pipeline
                .stages()
                .map(|s| (s.name().to_string(), s.current_mode()))
                .collect();
            Ok(Served {
                pipeline,
                workers,
                limits,
                rules: self.rule_set()?,
                users: self.users.clone(),
                default_plan: self.default_plan.clone().unwrap_or_default(),
                response_headers: self.rls.response_headers.names()?,
                configured_modes,
                rls_on_store_error: self.rls.on_store_error,
                rls_shadow_mode: self.rls.shadow_mode,
                rls_require_domains: self.rls.require_domains,
                written: envoy::written_by_key(&self.domains),
                stage_paths,
                attributes: self.attributes.clone(),
                reservation_ttl: self.reservation_ttl(),
                rlqs: crate::rlqs::Settings::from(&self.rlqs),
            })
        };
        build().map_err(|e| self.origin.place(e))
    }

    /// The configured stages, in order.
    #[allow(clippy::type_complexity)]
    pub(crate) fn pipeline<S>(
        &self,
        plans: Vec<Plan>,
        store: &S,
        clock: Arc<dyn Clock>,
        previous: Option<&Pipeline<S>>,
    ) -> Result<
        (
            Pipeline<S>,
            Option<Arc<WorkerGauge>>,
            BTreeMap<String, String>,
        ),
        ConfigFileError,
    >
    where
        S: Store<str, AnyAlgorithm> + Clone + 'static,
    {
        let mut builder = Pipeline::builder()
            .nodes(self.store.nodes())
            .local_clock(clock.clone());
        if let Some(previous) = previous {
            builder = builder.counting_on_from(previous);
        }
        let default_plan = self.default_plan.clone().unwrap_or_default();
        let cx = StageContext {
            store,
            plans: &plans,
            default_plan: &default_plan,
            endpoint_costs: &self.endpoint_costs,
            clock: &clock,
        };
        let mut workers = None;
        let mut paths = BTreeMap::new();
        for (path, config) in self.stage_configs() {
            let taken = |name: &str| {
                paths.contains_key(name)
                    || paths
                        .keys()
                        .any(|n: &String| name.starts_with(&format!("{n}.")))
            };
            if taken(&config.name) {
                return Err(ConfigFileError::invalid(
                    format!("{path}.name"),
                    format!("stage `{}`: another stage has this name (or names its levels after it); give each stage its own", config.name),
                ));
            }
            let built = build_stage(&config, &path, &cx)?;
            if let Some(gauge) = built.workers {
                if workers.is_some() {
                    return Err(ConfigFileError::invalid(
                        format!("{path}.kind"),
                        format!("stage `{}`: a pipeline has at most one utilization stage (it reads the node's one worker gauge)", config.name),
                    ));
                }
                workers = Some(gauge);
            }
            builder = builder.stage(built.stage);
            paths.insert(config.name.clone(), path);
        }
        let section = if self.pipeline.is_empty() {
            "limiters"
        } else {
            "pipeline"
        };
        let pipeline = builder
            .build()
            .map_err(|e| ConfigFileError::from_config_error(section, e))?;
        Ok((pipeline, workers, paths))
    }
}

impl ServiceStore {
    /// Refuses `served` if it uses an algorithm this store cannot run, naming where.
    pub fn check(&self, served: &Served<ServiceStore>) -> Result<(), ConfigFileError> {
        let refuse = |path: String, algorithm: &AnyAlgorithm| match self.runs(algorithm) {
            Ok(()) => Ok(()),
            Err(why) => Err(ConfigFileError::invalid(
                path,
                format!("{why}; use another algorithm, other parameters, or the memory store"),
            )),
        };
        let cached = !self.chains_atomically();
        let all_or_nothing = |path: String| {
            Err(ConfigFileError::invalid(
                path,
                if self.is_cached() {
                    "all_or_nothing needs exact mode: a cached store decides each key on its own (set store.mode: exact, or drop all_or_nothing)".to_string()
                } else {
                    format!("all_or_nothing needs a store that undoes a chain atomically (memory, file, Redis in exact mode); the {} store decides each key on its own (drop all_or_nothing)", self.kind())
                },
            ))
        };
        for stage in served.pipeline.stages() {
            let path = served
                .stage_paths
                .get(stage.name().as_str())
                .cloned()
                .unwrap_or_else(|| format!("limiters.{}", stage.name()));
            if cached && stage.is_all_or_nothing() {
                return all_or_nothing(format!("{path}.all_or_nothing"));
            }
            // A preset's request rate stage runs the top-level plans.
            let plan_path = |plan: &str| match path.starts_with("pipeline") {
                true => format!("{path} (plan or limit `{plan}`)"),
                false => format!("plans.{plan}"),
            };
            match stage.limiter() {
                Limiter::RequestRate(rr) => {
                    let levels = stage.levels().iter().map(|l| l.limiter());
                    for plan in std::iter::once(rr).chain(levels).flat_map(|l| l.plans()) {
                        if !self.supports(plan.algorithm()) {
                            return refuse(plan_path(plan.name()), plan.algorithm());
                        }
                    }
                }
                Limiter::Concurrency(c) if !self.supports(c.algorithm()) => {
                    return refuse(path, c.algorithm());
                }
                Limiter::Fleet(f) if !self.supports(f.algorithm()) => {
                    return refuse(path, f.algorithm());
                }
                _ => {}
            }
        }
        for (name, limit) in &served.limits {
            if !self.supports(limit.algorithm()) {
                return refuse(format!("limits.{name}"), limit.algorithm());
            }
        }
        self.check_rules(served, &refuse, &all_or_nothing)
    }

    /// [`ServiceStore::check`] for the Envoy rules, in domain and key order.
    fn check_rules(
        &self,
        served: &Served<ServiceStore>,
        refuse: &dyn Fn(String, &AnyAlgorithm) -> Result<(), ConfigFileError>,
        all_or_nothing: &dyn Fn(String) -> Result<(), ConfigFileError>,
    ) -> Result<(), ConfigFileError> {
        let cached = !self.chains_atomically();
        let mut rules = served.rules.rules();
        rules.sort_by(|a, b| (a.0, a.1.full_key()).cmp(&(b.0, b.1.full_key())));
        for (domain, rule) in rules {
            if self.counts_as_envoyproxy() && rule.all_or_nothing() {
                let written = served
                    .written
                    .get(rule.full_key())
                    .cloned()
                    .unwrap_or_default();
                return Err(written.place(ConfigFileError::invalid(
                    format!("domains[{domain}] descriptor {}", rule.full_key()),
                    "all_or_nothing cannot be kept by envoyproxy/ratelimit's commands (store.layout: envoyproxy counts every hit)",
                )));
            }
            if cached && rule.all_or_nothing() {
                let written = served
                    .written
                    .get(rule.full_key())
                    .cloned()
                    .unwrap_or_default();
                return all_or_nothing(format!("domains[{domain}] descriptor {}", rule.full_key()))
                    .map_err(|e| written.place(e));
            }
            if let Some(algorithm) = rule.algorithm() {
                if !self.supports(algorithm) {
                    let key = rule.full_key();
                    let written = served.written.get(key).cloned().unwrap_or_default();
                    let key = key
                        .strip_prefix(domain)
                        .and_then(|k| k.strip_prefix('.'))
                        .unwrap_or(key);
                    let path = format!("domains[{domain}] descriptor {key}");
                    return refuse(path, algorithm).map_err(|e| written.place(e));
                }
            }
        }
        Ok(())
    }
}
