//! A stage: a limiter, with the requests it applies to (its scope), its mode, failure policy,
//! refusal status and counters; and the checks a pipeline makes of its stages' scopes and
//! levels when it is built.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use super::{local, scope, Limiter, Request, Scope};
use crate::algorithm::spec::AnyAlgorithm;
use crate::limiter::request_rate::RequestRateLimiter;
use crate::limiter::LimiterKind;
use crate::store::{Namespace, Store};
use crate::ConfigError;

/// How a stage acts on its limiter's decisions; switchable at run time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Decide and refuse.
    #[default]
    Enforce,
    /// Dark launch: decide and count what would be refused, but let it through.
    Shadow,
    /// Kill switch: not consulted at all.
    Off,
}

impl Mode {
    /// `enforce`, `shadow` or `off`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Shadow => "shadow",
            Mode::Off => "off",
        }
    }

    /// Parses [`Mode::name`]'s output.
    pub fn from_name(name: &str) -> Option<Mode> {
        [Mode::Enforce, Mode::Shadow, Mode::Off]
            .into_iter()
            .find(|m| m.name() == name)
    }

    pub(crate) fn to_u8(self) -> u8 {
        self as u8
    }

    pub(crate) fn from_u8(v: u8) -> Mode {
        match v {
            0 => Mode::Enforce,
            1 => Mode::Shadow,
            _ => Mode::Off,
        }
    }
}

/// What a stage does when its limiter's store fails (an `Err`, never a denial).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OnStoreError {
    /// Let the request through and count it (the default: a rate limiter must not become the
    /// outage).
    #[default]
    FailOpen,
    /// Refuse the request with 503.
    FailClosed,
    /// Decide on this node's own memory store, at this node's share of the limit (`1/nodes`
    /// of it, with the pipeline's `nodes`): see the [pipeline](super)'s `local` module docs.
    Local,
}

/// One stage of a pipeline: a limiter, named by its namespace, with its mode, failure policy and
/// refusal status. Build one with [`Stage::new`] and the setters, then add it with
/// [`PipelineBuilder::stage`](super::PipelineBuilder::stage).
#[derive(Debug)]
pub struct Stage<S> {
    pub(super) name: Namespace,
    pub(super) limiter: Limiter<S>,
    pub(super) mode: AtomicU8,
    pub(super) on_error: OnStoreError,
    pub(super) status: u16,
    pub(super) all_or_nothing: bool,
    /// The `local` policy's fallback, set when the pipeline is built.
    pub(super) local: Option<Arc<local::LocalShare>>,
    /// Shared with the same stage of the pipeline this one replaced, if any
    /// ([`PipelineBuilder::counting_on_from`](super::PipelineBuilder::counting_on_from)).
    pub(super) counters: Arc<Counters>,
    /// Which requests it applies to and what it counts them by.
    pub(super) scope: Scope,
    /// A request rate stage's further keys, each with its own limit ([`Stage::level`]).
    pub(super) levels: Vec<Level<S>>,
}

/// One more key of a hierarchical limit ([`Stage::level`]): its template and its limit.
#[derive(Debug)]
pub struct Level<S> {
    pub(super) key: scope::KeyTemplate,
    pub(super) limiter: RequestRateLimiter<S>,
}

impl<S> Level<S> {
    /// The key template.
    pub fn key(&self) -> &scope::KeyTemplate {
        &self.key
    }

    /// The limit on that key (its namespace is the level's name).
    pub fn limiter(&self) -> &RequestRateLimiter<S> {
        &self.limiter
    }
}

/// A stage's counters (see [`Stage::stats`]).
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) decided: AtomicU64,
    pub(super) refused: AtomicU64,
    pub(super) shadow_refused: AtomicU64,
    pub(super) fail_open: AtomicU64,
    pub(super) fail_closed: AtomicU64,
    pub(super) decided_locally: AtomicU64,
}

pub(super) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl<S: Store<str, AnyAlgorithm> + 'static> Stage<S> {
    /// A stage running `limiter`, in enforce mode, failing open, refusing with its kind's
    /// status ([`LimiterKind::status`]).
    pub fn new(limiter: impl Into<Limiter<S>>) -> Stage<S> {
        let limiter = limiter.into();
        Stage {
            name: limiter.name().clone(),
            status: limiter.kind().status(),
            limiter,
            mode: AtomicU8::new(Mode::Enforce.to_u8()),
            on_error: OnStoreError::FailOpen,
            all_or_nothing: false,
            local: None,
            counters: Arc::default(),
            scope: Scope::all(),
            levels: Vec::new(),
        }
    }

    /// Which requests the stage applies to and what it counts them by (default: every
    /// request, keyed as its limiter keys them). See [`scope`].
    #[must_use]
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// Adds a key with its own limit to a request rate stage, making it a hierarchical quota
    /// (an organisation's and each of its users', say): the stage's own limiter, keyed by its
    /// scope's key, is the first level, and each level added is checked after the ones
    /// before. A request passes the stage when every level allows it, and then takes its cost
    /// from every level; a level that refuses stops the stage there, and what earlier levels
    /// took is given back in the same store call (so a stage with levels is always
    /// [all or nothing](Stage::all_or_nothing)). The levels share the stage's plan name and
    /// cost. When the pipeline is built, levels are checked to be on a request rate stage,
    /// on the same store as it, with namespaces no other stage or level uses, and not with
    /// [`OnStoreError::Local`].
    #[must_use]
    pub fn level(mut self, key: scope::KeyTemplate, limiter: RequestRateLimiter<S>) -> Self {
        self.levels.push(Level { key, limiter });
        self
    }

    /// The stage's scope.
    pub fn scope_of(&self) -> &Scope {
        &self.scope
    }

    /// The levels added with [`Stage::level`], in order.
    pub fn levels(&self) -> &[Level<S>] {
        &self.levels
    }

    /// What the stage's scope and levels say, for people: "by {attributes.ip}; when
    /// attributes.method is POST", "by {attributes.org}, then {attributes.org}/{user}";
    /// `None` for a stage with neither (every request, keyed as its limiter keys them).
    pub fn describe_scope(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(key) = &self.scope.key {
            let mut keys = key.as_str().to_string();
            for level in &self.levels {
                keys.push_str(", then ");
                keys.push_str(level.key.as_str());
            }
            parts.push(format!("by {keys}"));
        }
        if !self.scope.when.conditions().is_empty() {
            parts.push(format!("when {}", self.scope.when));
        }
        if let Some(field) = &self.scope.plan {
            parts.push(format!("plan from {field}"));
        }
        match &self.scope.cost {
            scope::Cost::Request => {}
            scope::Cost::Constant(n) => parts.push(format!("cost {n}")),
            scope::Cost::Field(field) => parts.push(format!("cost from {field}")),
        }
        if self.scope.if_missing == scope::IfMissing::Skip {
            parts.push("skips requests lacking a field".into());
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// The mode the stage runs in for `request`: off when its scope does not apply (its `when`
    /// does not match, or it lacks a field and the stage skips such requests).
    pub(super) fn mode_for(&self, request: &Request<'_>) -> Mode {
        let mode = self.current_mode();
        if mode == Mode::Off || !self.scope.when.matches(request) {
            return Mode::Off;
        }
        if self.scope.if_missing == scope::IfMissing::Skip && self.lacking(request).is_some() {
            return Mode::Off;
        }
        mode
    }

    /// The first field the stage needs that `request` lacks (its `when` matching).
    pub(super) fn lacking(&self, request: &Request<'_>) -> Option<scope::Field> {
        self.scope.lacking(request).or_else(|| {
            let mut fields = self.levels.iter().flat_map(|l| l.key.fields());
            fields.find(|f| f.value(request).is_none()).cloned()
        })
    }

    /// The starting mode (default enforce).
    #[must_use]
    pub fn mode(self, mode: Mode) -> Self {
        self.mode.store(mode.to_u8(), Ordering::Relaxed);
        self
    }

    /// What the stage does when its store fails (default fail open; the utilization shedder
    /// has no store).
    #[must_use]
    pub fn on_store_error(mut self, policy: OnStoreError) -> Self {
        self.on_error = policy;
        self
    }

    /// The HTTP status of the stage's refusals; checked (400 to 599) when the pipeline is
    /// built.
    #[must_use]
    pub fn status(mut self, status: u16) -> Self {
        self.status = status;
        self
    }

    /// Whether a refusal of the request by any later stage of its store chain undoes this
    /// stage's effect (default `false`: a request refused further on has still used this
    /// limit). With `true`, a refused request consumes nothing here: atomically on the memory
    /// store and on one Redis (in the same script call), on Redis Cluster where the keys share
    /// a slot. See [`crate::store::chain`].
    #[must_use]
    pub fn all_or_nothing(mut self, all_or_nothing: bool) -> Self {
        self.all_or_nothing = all_or_nothing;
        self
    }

    /// Whether the stage is all or nothing ([`Stage::all_or_nothing`]).
    pub fn is_all_or_nothing(&self) -> bool {
        self.all_or_nothing
    }

    /// The stage's name (its limiter's namespace).
    pub fn name(&self) -> &Namespace {
        &self.name
    }

    /// The limiter the stage runs.
    pub fn limiter(&self) -> &Limiter<S> {
        &self.limiter
    }

    /// The stage's mode now.
    pub fn current_mode(&self) -> Mode {
        Mode::from_u8(self.mode.load(Ordering::Relaxed))
    }

    /// The stage's failure policy.
    pub fn failure_policy(&self) -> OnStoreError {
        self.on_error
    }

    /// The stage's refusal status.
    pub fn refusal_status(&self) -> u16 {
        self.status
    }
}

/// Checks what scopes and levels ask of their stages (see [`Stage::scope`] and
/// [`Stage::level`]), and makes stages with levels all or nothing.
pub(super) fn check_scopes<S: Store<str, AnyAlgorithm> + 'static>(
    stages: &mut [Stage<S>],
) -> Result<(), ConfigError> {
    let mut names: Vec<&str> = stages.iter().map(|s| s.name.as_str()).collect();
    for stage in stages.iter() {
        let name = stage.name.as_str();
        let kind = stage.limiter.kind();
        let scope = &stage.scope;
        let counts_requests = matches!(kind, LimiterKind::RequestRate | LimiterKind::Concurrency);
        if scope.key.is_some() && !counts_requests {
            return Err(ConfigError::invalid(
                "key",
                name,
                "the fleet, utilization and adaptive concurrency stages count no per-request key",
            ));
        }
        let rate = kind == LimiterKind::RequestRate;
        if !rate && (scope.plan.is_some() || scope.cost != scope::Cost::Request) {
            return Err(ConfigError::invalid(
                "cost",
                name,
                "only request rate stages have plans and costs",
            ));
        }
        if stage.levels.is_empty() {
            continue;
        }
        let Limiter::RequestRate(first) = &stage.limiter else {
            return Err(ConfigError::invalid(
                "keys",
                name,
                "only a request rate stage can have several keys",
            ));
        };
        if stage.on_error == OnStoreError::Local {
            return Err(ConfigError::invalid(
                "on_store_error",
                name,
                "a stage with several keys cannot decide locally; choose fail_open or fail_closed",
            ));
        }
        for level in &stage.levels {
            let level_name = level.limiter.namespace().as_str();
            if names.contains(&level_name) {
                return Err(ConfigError::invalid(
                    "keys",
                    level_name,
                    "two stages or levels have this name; give each its own",
                ));
            }
            names.push(level_name);
            if !first.store().same_store(level.limiter.store()) {
                return Err(ConfigError::invalid(
                    "keys",
                    level_name,
                    "every level of a stage must keep its state in the stage's store",
                ));
            }
        }
    }
    for stage in stages.iter_mut().filter(|s| !s.levels.is_empty()) {
        stage.all_or_nothing = true;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Mode;

    #[test]
    fn modes_round_trip() {
        for m in [Mode::Enforce, Mode::Shadow, Mode::Off] {
            assert_eq!(Mode::from_name(m.name()), Some(m));
            assert_eq!(Mode::from_u8(m.to_u8()), m);
        }
    }
}
