//! The pipeline: an ordered list of stages, each a named limiter with its own mode, failure
//! policy and refusal status, and refusals a client can act on.
//!
//! For each request, [`Pipeline::evaluate`] runs the stages in order. The first refusal wins;
//! leases taken by earlier stages are given back at once when a later one refuses. Each stage
//! has a [`Mode`], switchable at run time from any thread with one atomic store:
//! - `enforce`: refusals refuse;
//! - `shadow` (dark launch): the stage decides and its refusals are counted and reported in
//!   [`Verdict::shadow_refusals`], but the request goes on (leases it grants are still taken,
//!   so that its counts are the ones it would enforce);
//! - `off` (kill switch): the stage is not consulted.
//!
//! A store error never refuses by default ([`OnStoreError::FailOpen`], counted in
//! [`StageStats::fail_open`]); [`OnStoreError::FailClosed`] makes it a 503;
//! [`OnStoreError::Local`] decides on this node's own memory store at this node's share of the
//! limit ([`PipelineBuilder::nodes`]; counted in [`StageStats::decided_locally`]).
//!
//! A refusal carries the stage's status (by default 429 for the per-user limiters, 503 for the
//! shedders), the stage, `retry_after`, an actionable message ("plan free allows 50 requests
//! per second; retry in 0.12 s") and the values of the `Retry-After`, `RateLimit-Policy` and
//! `RateLimit` fields (see [`RateLimitHeaders`]).
//!
//! Stripe's four limiters in their order are a ready preset ([`Pipeline::stripe`]); any other
//! list of stages is built the same way with [`Pipeline::builder`].

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::algorithm::spec::AnyAlgorithm;
use crate::blocking::block_on;
use crate::limiter::adaptive::AdaptiveConcurrencyLimiter;
use crate::limiter::concurrency::ConcurrencyLimiter;
use crate::limiter::fleet::FleetShedder;
use crate::limiter::request_rate::RequestRateLimiter;
use crate::limiter::utilization::UtilizationShedder;
use crate::limiter::{
    whole_seconds_up, Lease, LeaseHandle, LimiterKind, Priority, RateLimitHeaders,
};
use crate::store::{MemoryStore, Namespace, Store};
use crate::{Clock, ConfigError, Decision, StoreError, SystemClock};

mod chain;
mod local;
pub mod reservation;
pub mod scope;
mod snapshot;
mod stage;

pub use reservation::{Hold, PipelineReservation, SettleError};
pub use scope::{MissingField, Scope};
pub use snapshot::{LimiterState, PlanSnapshot, StageSnapshot, StageStats};
use stage::{bump, check_scopes, Counters};
pub use stage::{Level, Mode, OnStoreError, Stage};

/// How long shed clients are asked to wait: a shedder cannot know when load will drop, so it
/// asks for a short back-off.
pub const SHED_RETRY_AFTER: Duration = Duration::from_secs(1);

/// What the pipeline needs to know about one request.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// Who is asking (the per-user limiters' key).
    pub user: &'a str,
    /// The user's plan (unknown plans get the default plan).
    pub plan: &'a str,
    /// How important the request is to the shedders.
    pub priority: Priority,
    /// The request's cost; `None` for its endpoint's configured cost (1 by default).
    pub cost: Option<u64>,
    /// The endpoint, for per-endpoint costs.
    pub endpoint: Option<&'a str>,
    /// The request's other attributes, as `(name, value)` pairs (the first pair of a name
    /// counts), for stages with a [`Scope`]: their keys, conditions, costs and plans.
    pub attributes: &'a [(&'a str, &'a str)],
}

impl<'a> Request<'a> {
    /// A request of cost 1 by `user` on `plan` with `priority`.
    pub fn new(user: &'a str, plan: &'a str, priority: Priority) -> Self {
        Request {
            user,
            plan,
            priority,
            cost: None,
            endpoint: None,
            attributes: &[],
        }
    }

    /// The value of the attribute `name`, if the request has it.
    pub fn attribute(&self, name: &str) -> Option<&'a str> {
        self.attributes
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    }
}

/// Why a request was refused, with everything the refusal response needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// The stage that refused (its name).
    pub stage: Namespace,
    /// The kind of limiter the stage runs.
    pub kind: LimiterKind,
    /// The stage's refusal status (429 or 503 by default; 503 for fail-closed store errors).
    pub status: u16,
    /// When the same request could pass; `None` if it never can.
    pub retry_after: Option<Duration>,
    /// What happened and what to do, for people.
    pub message: String,
    /// The `RateLimit-Policy` and `RateLimit` values, where the limiter has a quota.
    pub rate_limit: Option<RateLimitHeaders>,
}

/// The pipeline's answer for one request.
#[derive(Debug, Default)]
#[must_use = "a verdict says whether the request may proceed, and holds its leases"]
pub struct Verdict {
    /// The refusal, if the request is refused.
    pub refusal: Option<Refusal>,
    /// Stages in shadow mode that would have refused this request.
    pub shadow_refusals: Vec<Namespace>,
    /// Stages whose store failed, and that let the request through.
    pub fail_opens: Vec<Namespace>,
    /// Stages whose store failed, and that decided on this node's share instead
    /// ([`OnStoreError::Local`]).
    pub decided_locally: Vec<Namespace>,
    /// Places taken for this request (concurrency, fleet). Keep them until the request ends;
    /// dropping them gives the places back. Empty when refused.
    pub leases: Vec<Lease>,
    /// The `RateLimit-Policy` / `RateLimit` values of the request rate stage with the least
    /// remaining, for allowed responses too.
    pub rate_limit: Option<RateLimitHeaders>,
    /// The utilization shedder's amount for this request, when one ran.
    pub shed_amount: Option<f64>,
}

impl Verdict {
    /// Whether the request may proceed.
    pub fn allowed(&self) -> bool {
        self.refusal.is_none()
    }

    /// 200 when allowed, else the refusal's status.
    pub fn status(&self) -> u16 {
        self.refusal.as_ref().map_or(200, |r| r.status)
    }

    /// The response header fields for this verdict: `Retry-After` (whole seconds, rounded up)
    /// on refusals, and `RateLimit-Policy` / `RateLimit` where a quota applies.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = Vec::with_capacity(3);
        let rate_limit = match &self.refusal {
            Some(refusal) => {
                if let Some(retry) = refusal.retry_after {
                    headers.push(("retry-after", whole_seconds_up(retry).max(1).to_string()));
                }
                refusal.rate_limit.as_ref()
            }
            None => self.rate_limit.as_ref(),
        };
        if let Some(rl) = rate_limit {
            headers.push(("ratelimit-policy", rl.policy.clone()));
            headers.push(("ratelimit", rl.remaining.clone()));
        }
        headers
    }
}

/// The limiter a stage runs.
#[derive(Debug)]
#[non_exhaustive]
pub enum Limiter<S> {
    /// Per-user request rate by plan (keyed by [`Request::user`]).
    RequestRate(RequestRateLimiter<S>),
    /// Per-user requests in flight (keyed by [`Request::user`]).
    Concurrency(ConcurrencyLimiter<S>),
    /// The fleet's requests in flight, with a reserve for critical ones.
    Fleet(FleetShedder<S>),
    /// This node's worker utilization.
    Utilization(UtilizationShedder),
    /// This node's requests in flight, below a limit learned from their latency.
    AdaptiveConcurrency(AdaptiveConcurrencyLimiter),
}

impl<S: Store<str, AnyAlgorithm> + 'static> Limiter<S> {
    /// The kind of limiter.
    pub fn kind(&self) -> LimiterKind {
        match self {
            Limiter::RequestRate(_) => LimiterKind::RequestRate,
            Limiter::Concurrency(_) => LimiterKind::Concurrency,
            Limiter::Fleet(_) => LimiterKind::Fleet,
            Limiter::Utilization(_) => LimiterKind::Utilization,
            Limiter::AdaptiveConcurrency(_) => LimiterKind::AdaptiveConcurrency,
        }
    }

    /// The limiter's name: its namespace in the store, or the utilization shedder's name.
    pub fn name(&self) -> &Namespace {
        match self {
            Limiter::RequestRate(l) => l.namespace(),
            Limiter::Concurrency(l) => l.namespace(),
            Limiter::Fleet(l) => l.namespace(),
            Limiter::Utilization(l) => l.name(),
            Limiter::AdaptiveConcurrency(l) => l.name(),
        }
    }
}

impl<S> From<RequestRateLimiter<S>> for Limiter<S> {
    fn from(l: RequestRateLimiter<S>) -> Self {
        Limiter::RequestRate(l)
    }
}

impl<S> From<ConcurrencyLimiter<S>> for Limiter<S> {
    fn from(l: ConcurrencyLimiter<S>) -> Self {
        Limiter::Concurrency(l)
    }
}

impl<S> From<FleetShedder<S>> for Limiter<S> {
    fn from(l: FleetShedder<S>) -> Self {
        Limiter::Fleet(l)
    }
}

impl<S> From<AdaptiveConcurrencyLimiter> for Limiter<S> {
    fn from(l: AdaptiveConcurrencyLimiter) -> Self {
        Limiter::AdaptiveConcurrency(l)
    }
}

impl<S> From<UtilizationShedder> for Limiter<S> {
    fn from(l: UtilizationShedder) -> Self {
        Limiter::Utilization(l)
    }
}

/// The stages in order. Build it with [`Pipeline::builder`] (or [`Pipeline::stripe`]); share
/// it (`Arc`) between request handlers.
#[derive(Debug)]
pub struct Pipeline<S> {
    stages: Box<[Stage<S>]>,
    /// Runs of stages whose store stages share one store: one chain (one call) each.
    segments: Box<[std::ops::Range<usize>]>,
    /// Whether a stage learns from latency ([`Pipeline::learns_from_latency`]).
    learns: bool,
    /// Whether a store stage is all or nothing (or has levels): then the stages deciding on
    /// this node decide before the store is called, so that their refusal undoes it.
    all_or_nothing: bool,
}

/// Assembles a [`Pipeline`] from stages, in the order they are added.
#[must_use]
pub struct PipelineBuilder<S> {
    stages: Vec<Stage<S>>,
    nodes: u32,
    local_clock: Option<Arc<dyn Clock>>,
    /// The counters of the pipeline this one replaces, by stage name and kind.
    previous: Vec<(Namespace, LimiterKind, Arc<Counters>)>,
    /// Its adaptive concurrency limiters, by stage name: what they learned carries over.
    previous_adaptive: Vec<(Namespace, AdaptiveConcurrencyLimiter)>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for PipelineBuilder<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipelineBuilder")
            .field("stages", &self.stages)
            .field("nodes", &self.nodes)
            .field("local_clock", &self.local_clock.as_ref().map(|_| "set"))
            .field(
                "counting_on_from",
                &self.previous.iter().map(|(n, _, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl<S: Store<str, AnyAlgorithm> + 'static> PipelineBuilder<S> {
    /// Adds a stage after the ones already added.
    pub fn stage(mut self, stage: Stage<S>) -> Self {
        self.stages.push(stage);
        self
    }

    /// How many nodes share the stages' store (default 1): a stage with
    /// [`OnStoreError::Local`] decides at `1/nodes` of its limits while its store fails (see
    /// [`AnyAlgorithm::share`]).
    pub fn nodes(mut self, nodes: u32) -> Self {
        self.nodes = nodes;
        self
    }

    /// The clock of the local store that [`OnStoreError::Local`] stages fall back on (default
    /// the system clock).
    pub fn local_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.local_clock = Some(clock);
        self
    }

    /// Adds `limiter` as a stage with the defaults of [`Stage::new`].
    pub fn limiter(self, limiter: impl Into<Limiter<S>>) -> Self {
        self.stage(Stage::new(limiter))
    }

    /// Makes the pipeline go on counting where `previous` (the pipeline it replaces, as on a
    /// configuration reload) left off: each stage with the name and kind of one of `previous`'s
    /// shares that stage's counters ([`Stage::stats`]), so they never go back, and what
    /// requests still running on `previous` decide is counted too. Other stages start at 0.
    ///
    /// An adaptive concurrency stage with the name, algorithm, parameters and lease TTL of one
    /// of `previous`'s keeps that stage's limiter: its learned limit, and the leases of the
    /// requests still running, carry over.
    pub fn counting_on_from(mut self, previous: &Pipeline<S>) -> Self {
        self.previous = previous
            .stages
            .iter()
            .map(|s| (s.name.clone(), s.limiter.kind(), s.counters.clone()))
            .collect();
        self.previous_adaptive = previous
            .stages
            .iter()
            .filter_map(|s| match &s.limiter {
                Limiter::AdaptiveConcurrency(l) => Some((s.name.clone(), l.clone())),
                _ => None,
            })
            .collect();
        self
    }

    /// The pipeline. Stage names (their limiters' namespaces) must be unique, so that modes,
    /// statistics and leases name one stage; statuses must be 400 to 599.
    pub fn build(self) -> Result<Pipeline<S>, ConfigError> {
        for (i, stage) in self.stages.iter().enumerate() {
            if self.stages[..i].iter().any(|s| s.name == stage.name) {
                return Err(ConfigError::invalid(
                    "stages",
                    stage.name.as_str(),
                    "two stages have this name; give each limiter its own namespace",
                ));
            }
            if !(400..=599).contains(&stage.status) {
                return Err(ConfigError::invalid(
                    "status",
                    stage.status,
                    "must be an HTTP error status, 400 to 599",
                ));
            }
        }
        if self.nodes == 0 {
            return Err(ConfigError::invalid(
                "nodes",
                0,
                "must be at least 1: the nodes sharing the store",
            ));
        }
        let mut stages = self.stages;
        check_scopes(&mut stages)?;
        if stages.iter().any(|s| s.on_error == OnStoreError::Local) {
            let clock = self
                .local_clock
                .unwrap_or_else(|| Arc::new(SystemClock::new()));
            let store = Arc::new(MemoryStore::builder().clock(clock).build_typed()?);
            for stage in stages
                .iter_mut()
                .filter(|s| s.on_error == OnStoreError::Local)
            {
                stage.local = local::LocalShare::new(&stage.limiter, self.nodes, store.clone())?
                    .map(Arc::new);
            }
        }
        for stage in &mut stages {
            let kind = stage.limiter.kind();
            if let Some((_, _, counters)) = self
                .previous
                .iter()
                .find(|(name, k, _)| *name == stage.name && *k == kind)
            {
                stage.counters = counters.clone();
            }
            if let Limiter::AdaptiveConcurrency(new) = &mut stage.limiter {
                let same = |old: &AdaptiveConcurrencyLimiter| {
                    old.algorithm() == new.algorithm() && old.lease_ttl() == new.lease_ttl()
                };
                if let Some((_, old)) = self
                    .previous_adaptive
                    .iter()
                    .find(|(name, old)| *name == stage.name && same(old))
                {
                    *new = old.clone();
                }
            }
        }
        let segments = chain::segments(&stages);
        let learns = stages
            .iter()
            .any(|s| matches!(s.limiter, Limiter::AdaptiveConcurrency(_)));
        let all_or_nothing = stages
            .iter()
            .any(|s| s.all_or_nothing && s.limiter.store().is_some());
        Ok(Pipeline {
            stages: stages.into_boxed_slice(),
            segments,
            learns,
            all_or_nothing,
        })
    }
}

/// What one stage concluded.
enum Step {
    Pass,
    Refuse(Refusal),
    Failed(StoreError),
}

/// Why [`Pipeline::release`] could not release a lease.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReleaseError {
    /// No stage of this pipeline has the lease's limiter (a handle from another pipeline, or
    /// from a stage removed by a reload).
    #[error("no stage named `{0}` holds leases in this pipeline")]
    UnknownLimiter(Namespace),
    /// The store failed; the lease will expire after its TTL.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl<S: Store<str, AnyAlgorithm> + 'static> Pipeline<S> {
    /// An empty builder.
    pub fn builder() -> PipelineBuilder<S> {
        PipelineBuilder {
            stages: Vec::new(),
            nodes: 1,
            local_clock: None,
            previous: Vec::new(),
            previous_adaptive: Vec::new(),
        }
    }

    /// Stripe's four limiters, in their order: request rate → concurrency → fleet →
    /// utilization, each with the defaults of [`Stage::new`].
    pub fn stripe(
        request_rate: RequestRateLimiter<S>,
        concurrency: ConcurrencyLimiter<S>,
        fleet: FleetShedder<S>,
        utilization: UtilizationShedder,
    ) -> Result<Pipeline<S>, ConfigError> {
        Pipeline::builder()
            .limiter(request_rate)
            .limiter(concurrency)
            .limiter(fleet)
            .limiter(utilization)
            .build()
    }

    /// Whether a stage learns from the latency of the requests it admits (an adaptive
    /// concurrency stage): callers that time their requests for [`Lease::complete`] need
    /// to only then.
    pub fn learns_from_latency(&self) -> bool {
        self.learns
    }

    /// The stages, in order.
    pub fn stages(&self) -> impl ExactSizeIterator<Item = &Stage<S>> {
        self.stages.iter()
    }

    /// The stage named `name`.
    pub fn stage(&self, name: &str) -> Option<&Stage<S>> {
        self.stages.iter().find(|s| s.name.as_str() == name)
    }

    /// The first stage of `kind`.
    pub fn first_of(&self, kind: LimiterKind) -> Option<&Stage<S>> {
        self.stages.iter().find(|s| s.limiter.kind() == kind)
    }

    /// Switches the stage named `name` to `mode` now, from any thread; `false` if no stage has
    /// that name.
    pub fn set_mode(&self, name: &str, mode: Mode) -> bool {
        self.stage(name)
            .map(|s| s.mode.store(mode.to_u8(), Ordering::Relaxed))
            .is_some()
    }

    /// The mode of the stage named `name`.
    pub fn mode(&self, name: &str) -> Option<Mode> {
        self.stage(name).map(Stage::current_mode)
    }

    /// The first field a stage that applies to `request` needs and the request lacks (or, for
    /// a cost, holds as something other than a whole number), for stages that refuse such
    /// requests ([`scope::IfMissing::Refuse`]). [`Pipeline::evaluate`] refuses these requests
    /// with 400 before any stage runs; a service calls this first to answer its own 400.
    pub fn missing_field(&self, request: &Request<'_>) -> Option<MissingField> {
        self.stages.iter().find_map(|stage| {
            let applies = stage.current_mode() != Mode::Off
                && stage.scope.if_missing == scope::IfMissing::Refuse
                && stage.scope.when.matches(request);
            if !applies {
                return None;
            }
            let field = stage.lacking(request)?;
            let problem = match (&stage.scope.cost, field.value(request)) {
                (scope::Cost::Field(f), Some(_)) if *f == field => {
                    "holds as something other than a whole number"
                }
                _ => "lacks",
            };
            Some(MissingField {
                stage: stage.name.to_string(),
                field,
                problem,
            })
        })
    }

    /// Runs the stages for one request. See the [module documentation](self).
    ///
    /// A request lacking a field that a stage applying to it needs ([`Pipeline::missing_field`])
    /// is refused with 400 by that stage before any stage runs: nothing is counted.
    pub async fn evaluate(&self, request: &Request<'_>) -> Verdict {
        let mut verdict = Verdict::default();
        if let Some(missing) = self.missing_field(request) {
            let stage = self
                .stage(&missing.stage)
                .expect("a stage of this pipeline");
            verdict.refusal = Some(Refusal {
                stage: stage.name.clone(),
                kind: stage.limiter.kind(),
                status: 400,
                retry_after: None,
                message: missing.to_string(),
                rate_limit: None,
            });
            return verdict;
        }
        if !self.all_or_nothing {
            for segment in self.segments.iter() {
                let stages = &self.stages[segment.clone()];
                if Self::evaluate_segment(stages, request, &mut verdict, None).await {
                    break;
                }
            }
            return verdict;
        }
        // A refusal by a stage deciding on this node must leave the all-or-nothing stages as
        // they were, and only the store call can undo them atomically: those stages decide
        // first, in order, up to the first enforcing refusal (the cut), and every chain
        // before the cut is then sent as a refused one.
        let mut decided: Vec<(usize, Step)> = Vec::new();
        let mut cut = None;
        for (i, stage) in self.stages.iter().enumerate() {
            let mode = stage.mode_for(request);
            if mode == Mode::Off || stage.limiter.store().is_some() {
                continue;
            }
            let step = stage.decide_locally(request, &mut verdict);
            let cuts = mode == Mode::Enforce && matches!(step, Step::Refuse(_));
            decided.push((i, step));
            if cuts {
                cut = Some(i);
                break;
            }
        }
        let mut decided = decided.into_iter().peekable();
        for segment in self.segments.iter() {
            if cut.is_some_and(|c| segment.start > c) {
                break;
            }
            let mut steps = Vec::new();
            while let Some((i, _)) = decided.peek() {
                if *i >= segment.end {
                    break;
                }
                let (i, step) = decided.next().expect("peeked");
                steps.push((i - segment.start, step));
            }
            let local = chain::Decided {
                steps,
                cut: cut.and_then(|c| c.checked_sub(segment.start)),
                refused: cut.is_some(),
            };
            let stages = &self.stages[segment.clone()];
            if Self::evaluate_segment(stages, request, &mut verdict, Some(local)).await {
                break;
            }
        }
        verdict
    }

    /// [`Pipeline::evaluate`] for synchronous callers (see [`crate::blocking`]).
    pub fn evaluate_blocking(&self, request: &Request<'_>) -> Verdict {
        block_on(self.evaluate(request))
    }

    /// Gives back a lease kept with [`Lease::keep`] to the stage that issued it. `Ok(false)` if
    /// it was not held (already released, or expired). An adaptive concurrency stage takes the
    /// time since the lease was taken as the request's latency ([`Pipeline::release_after`]
    /// reports it instead).
    pub async fn release(&self, lease: &LeaseHandle) -> Result<bool, ReleaseError> {
        self.release_after(lease, None).await
    }

    /// [`Pipeline::release`], reporting that the request took `latency`: the sample an
    /// adaptive concurrency stage learns from (`None`: the time since the lease was taken);
    /// other stages ignore it.
    pub async fn release_after(
        &self,
        lease: &LeaseHandle,
        latency: Option<Duration>,
    ) -> Result<bool, ReleaseError> {
        let unknown = || ReleaseError::UnknownLimiter(lease.limiter().clone());
        let stage = self.stage(lease.limiter().as_str()).ok_or_else(unknown)?;
        let released = match &stage.limiter {
            Limiter::Concurrency(l) => l.release(lease).await,
            Limiter::Fleet(l) => l.release(lease).await,
            Limiter::AdaptiveConcurrency(l) => return Ok(l.release(lease, latency)),
            Limiter::Utilization(l) => return Ok(l.release(lease)),
            Limiter::RequestRate(_) => return Err(unknown()),
        };
        // A lease taken while the store was down lives in the local store.
        let local = stage.local.as_ref().is_some_and(|l| l.release(lease));
        if local {
            return Ok(true);
        }
        Ok(released?)
    }

    /// [`Pipeline::release`] for synchronous callers.
    pub fn release_blocking(&self, lease: &LeaseHandle) -> Result<bool, ReleaseError> {
        block_on(self.release(lease))
    }
}

/// Applies a stage's outcome to the verdict under its mode and failure policy; `true` when the
/// request is refused and the pipeline stops.
fn settle<S>(stage: &Stage<S>, mode: Mode, step: Step, verdict: &mut Verdict) -> bool
where
    S: Store<str, AnyAlgorithm> + 'static,
{
    bump(&stage.counters.decided);
    let refusal = match step {
        Step::Pass => return false,
        Step::Refuse(refusal) => refusal,
        Step::Failed(error) => match stage.on_error {
            // `Local` reaches here only when the local decision failed too.
            OnStoreError::FailOpen | OnStoreError::Local => {
                bump(&stage.counters.fail_open);
                verdict.fail_opens.push(stage.name.clone());
                return false;
            }
            OnStoreError::FailClosed => {
                bump(&stage.counters.fail_closed);
                Refusal {
                    stage: stage.name.clone(),
                    kind: stage.limiter.kind(),
                    status: 503,
                    retry_after: Some(SHED_RETRY_AFTER),
                    message: format!(
                        "the {} limiter cannot reach its store ({error}); retry in 1 s",
                        stage.name
                    ),
                    rate_limit: None,
                }
            }
        },
    };
    match mode {
        Mode::Enforce => {
            bump(&stage.counters.refused);
            // Give back what earlier stages took: the request will not run.
            verdict.leases.clear();
            verdict.refusal = Some(refusal);
            true
        }
        Mode::Shadow | Mode::Off => {
            bump(&stage.counters.shadow_refused);
            verdict.shadow_refusals.push(stage.name.clone());
            false
        }
    }
}

fn concurrency_headers(d: &Decision) -> RateLimitHeaders {
    RateLimitHeaders {
        policy: format!("\"concurrency\";q={};qu=\"concurrent-requests\"", d.limit),
        remaining: format!("\"concurrency\";r={}", d.remaining),
        left: d.remaining,
    }
}

/// Seconds for messages: "0.12", "2", "1.5".
fn seconds(d: Duration) -> String {
    let s = format!("{:.2}", d.as_secs_f64());
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}
