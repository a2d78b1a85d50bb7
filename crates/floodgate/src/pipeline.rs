//! The pipeline: Stripe's four limiters in order, with modes, failure policies and refusals a
//! client can act on.
//!
//! For each request, [`Pipeline::evaluate`] runs the configured limiters in this order:
//! request rate → concurrency → fleet → utilization. The first refusal wins; leases taken by
//! earlier limiters are given back at once when a later one refuses. Each limiter has a
//! [`Mode`], switchable at run time from any thread with one atomic store:
//! - `enforce`: refusals refuse;
//! - `shadow` (dark launch): the limiter decides and its refusals are counted and reported in
//!   [`Verdict::shadow_refusals`], but the request goes on (leases it grants are still taken,
//!   so that its counts are the ones it would enforce);
//! - `off` (kill switch): the limiter is not consulted.
//!
//! A store error never refuses by default ([`OnStoreError::FailOpen`], counted in
//! [`PipelineStats::fail_open`]); [`OnStoreError::FailClosed`] makes it a 503.
//!
//! A refusal carries its status (429 for the per-user limiters, 503 for the shedders), the
//! limiter, `retry_after`, an actionable message ("plan free allows 50 requests per second;
//! retry in 0.12 s") and the values of the `Retry-After`, `RateLimit-Policy` and `RateLimit`
//! fields (draft-ietf-httpapi-ratelimit-headers, structured-field syntax).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::Duration;

use crate::algorithm::spec::AnyAlgorithm;
use crate::limiter::concurrency::ConcurrencyLimiter;
use crate::limiter::fleet::FleetShedder;
use crate::limiter::request_rate::{policy_numbers, RequestRateLimiter};
use crate::limiter::utilization::UtilizationShedder;
use crate::limiter::{
    whole_seconds_up, Lease, LimiterKind, Mode, OnStoreError, Priority, RateLimitHeaders,
};
use crate::store::Store;
use crate::{Decision, StoreError};

/// How long shed clients are asked to wait: a shedder cannot know when load will drop, so it
/// asks for a short back-off.
pub const SHED_RETRY_AFTER: Duration = Duration::from_secs(1);

/// What the pipeline needs to know about one request.
#[derive(Clone, Copy, Debug)]
pub struct Descriptor<'a> {
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
}

impl<'a> Descriptor<'a> {
    /// A request of cost 1 by `user` on `plan` with `priority`.
    pub fn new(user: &'a str, plan: &'a str, priority: Priority) -> Self {
        Descriptor {
            user,
            plan,
            priority,
            cost: None,
            endpoint: None,
        }
    }
}

/// Why a request was refused, with everything the refusal response needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// The limiter that refused.
    pub limiter: LimiterKind,
    /// 429 (per-user limiters) or 503 (shedders, and fail-closed store errors).
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
pub struct Verdict {
    /// The refusal, if the request is refused.
    pub refusal: Option<Refusal>,
    /// Limiters in shadow mode that would have refused this request.
    pub shadow_refusals: Vec<LimiterKind>,
    /// Limiters whose store failed, and that let the request through.
    pub fail_opens: Vec<LimiterKind>,
    /// Places taken for this request (concurrency, fleet). Keep them until the request ends;
    /// dropping them gives the places back. Empty when refused.
    pub leases: Vec<Lease>,
    /// The request rate limiter's `RateLimit-Policy` / `RateLimit` values, for allowed
    /// responses too.
    pub rate_limit: Option<RateLimitHeaders>,
    /// The shedders' state for this request, when the utilization shedder ran.
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

/// Counters of what the pipeline did, per limiter (index: [`LimiterKind`] order; the methods
/// take the kind).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PipelineStats {
    /// Requests refused (enforce mode).
    pub refused: [u64; 4],
    /// Requests a shadow-mode limiter would have refused.
    pub shadow_refused: [u64; 4],
    /// Store errors that let the request through.
    pub fail_open: [u64; 4],
    /// Store errors that refused the request (fail closed).
    pub fail_closed: [u64; 4],
}

impl PipelineStats {
    /// Requests `kind` refused.
    pub fn refused_by(&self, kind: LimiterKind) -> u64 {
        self.refused[kind.index()]
    }

    /// Requests `kind` would have refused in shadow mode.
    pub fn shadow_refused_by(&self, kind: LimiterKind) -> u64 {
        self.shadow_refused[kind.index()]
    }

    /// Store errors of `kind` that let the request through.
    pub fn fail_open_of(&self, kind: LimiterKind) -> u64 {
        self.fail_open[kind.index()]
    }

    /// Store errors of `kind` that refused the request.
    pub fn fail_closed_of(&self, kind: LimiterKind) -> u64 {
        self.fail_closed[kind.index()]
    }
}

#[derive(Debug, Default)]
struct Counters {
    refused: [AtomicU64; 4],
    shadow_refused: [AtomicU64; 4],
    fail_open: [AtomicU64; 4],
    fail_closed: [AtomicU64; 4],
}

fn bump(counter: &[AtomicU64; 4], kind: LimiterKind) {
    counter[kind.index()].fetch_add(1, Ordering::Relaxed);
}

fn read(counter: &[AtomicU64; 4]) -> [u64; 4] {
    std::array::from_fn(|i| counter[i].load(Ordering::Relaxed))
}

#[derive(Debug)]
struct Stage<L> {
    limiter: L,
    mode: AtomicU8,
    on_error: OnStoreError,
}

impl<L> Stage<L> {
    fn new(limiter: L) -> Self {
        Stage {
            limiter,
            mode: AtomicU8::new(Mode::Enforce.to_u8()),
            on_error: OnStoreError::FailOpen,
        }
    }

    fn mode(&self) -> Mode {
        Mode::from_u8(self.mode.load(Ordering::Relaxed))
    }
}

/// The four limiters in order. Build it with [`Pipeline::builder`]; share it (`Arc`) between
/// request handlers.
#[derive(Debug)]
pub struct Pipeline<S> {
    request_rate: Option<Stage<RequestRateLimiter<S>>>,
    concurrency: Option<Stage<ConcurrencyLimiter<S>>>,
    fleet: Option<Stage<FleetShedder<S>>>,
    utilization: Option<Stage<UtilizationShedder>>,
    counters: Counters,
}

/// Assembles a [`Pipeline`]; every limiter is optional. Modes and failure policies may be set
/// before or after the limiter they concern is added; they apply at [`PipelineBuilder::build`].
#[derive(Debug)]
pub struct PipelineBuilder<S> {
    pipeline: Pipeline<S>,
    modes: Vec<(LimiterKind, Mode)>,
    policies: Vec<(LimiterKind, OnStoreError)>,
}

impl<S> Pipeline<S> {
    /// An empty builder.
    pub fn builder() -> PipelineBuilder<S> {
        PipelineBuilder {
            pipeline: Pipeline {
                request_rate: None,
                concurrency: None,
                fleet: None,
                utilization: None,
                counters: Counters::default(),
            },
            modes: Vec::new(),
            policies: Vec::new(),
        }
    }
}

impl<S> PipelineBuilder<S> {
    /// Adds the request rate limiter.
    pub fn request_rate(mut self, limiter: RequestRateLimiter<S>) -> Self {
        self.pipeline.request_rate = Some(Stage::new(limiter));
        self
    }

    /// Adds the concurrent requests limiter.
    pub fn concurrency(mut self, limiter: ConcurrencyLimiter<S>) -> Self {
        self.pipeline.concurrency = Some(Stage::new(limiter));
        self
    }

    /// Adds the fleet usage load shedder.
    pub fn fleet(mut self, shedder: FleetShedder<S>) -> Self {
        self.pipeline.fleet = Some(Stage::new(shedder));
        self
    }

    /// Adds the worker utilization load shedder.
    pub fn utilization(mut self, shedder: UtilizationShedder) -> Self {
        self.pipeline.utilization = Some(Stage::new(shedder));
        self
    }

    /// Sets a limiter's starting mode (default `enforce`).
    pub fn mode(mut self, kind: LimiterKind, mode: Mode) -> Self {
        self.modes.push((kind, mode));
        self
    }

    /// Sets what a limiter does when its store fails (default fail open; the utilization
    /// shedder has no store).
    pub fn on_store_error(mut self, kind: LimiterKind, policy: OnStoreError) -> Self {
        self.policies.push((kind, policy));
        self
    }

    /// The pipeline.
    pub fn build(self) -> Pipeline<S> {
        let mut p = self.pipeline;
        for (kind, mode) in self.modes {
            p.set_mode(kind, mode);
        }
        for (kind, policy) in self.policies {
            match kind {
                LimiterKind::RequestRate => p.request_rate.as_mut().map(|s| s.on_error = policy),
                LimiterKind::Concurrency => p.concurrency.as_mut().map(|s| s.on_error = policy),
                LimiterKind::Fleet => p.fleet.as_mut().map(|s| s.on_error = policy),
                LimiterKind::Utilization => None,
            };
        }
        p
    }
}

/// What one stage concluded.
enum Step {
    Pass,
    Refuse(Refusal),
    Failed(StoreError),
}

impl<S> Pipeline<S> {
    /// Switches a limiter's mode now, from any thread; `false` if the limiter is not configured.
    pub fn set_mode(&self, kind: LimiterKind, mode: Mode) -> bool {
        self.mode_slot(kind)
            .map(|m| m.store(mode.to_u8(), Ordering::Relaxed))
            .is_some()
    }

    /// A limiter's current mode, or `None` if it is not configured.
    pub fn mode(&self, kind: LimiterKind) -> Option<Mode> {
        self.mode_slot(kind)
            .map(|m| Mode::from_u8(m.load(Ordering::Relaxed)))
    }

    fn mode_slot(&self, kind: LimiterKind) -> Option<&AtomicU8> {
        match kind {
            LimiterKind::RequestRate => self.request_rate.as_ref().map(|s| &s.mode),
            LimiterKind::Concurrency => self.concurrency.as_ref().map(|s| &s.mode),
            LimiterKind::Fleet => self.fleet.as_ref().map(|s| &s.mode),
            LimiterKind::Utilization => self.utilization.as_ref().map(|s| &s.mode),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> PipelineStats {
        PipelineStats {
            refused: read(&self.counters.refused),
            shadow_refused: read(&self.counters.shadow_refused),
            fail_open: read(&self.counters.fail_open),
            fail_closed: read(&self.counters.fail_closed),
        }
    }

    /// The request rate limiter, if configured.
    pub fn request_rate(&self) -> Option<&RequestRateLimiter<S>> {
        self.request_rate.as_ref().map(|s| &s.limiter)
    }

    /// The concurrency limiter, if configured.
    pub fn concurrency(&self) -> Option<&ConcurrencyLimiter<S>> {
        self.concurrency.as_ref().map(|s| &s.limiter)
    }

    /// The fleet shedder, if configured.
    pub fn fleet(&self) -> Option<&FleetShedder<S>> {
        self.fleet.as_ref().map(|s| &s.limiter)
    }

    /// The utilization shedder, if configured.
    pub fn utilization(&self) -> Option<&UtilizationShedder> {
        self.utilization.as_ref().map(|s| &s.limiter)
    }

    /// Applies a stage's outcome to the verdict under its mode and failure policy; `true` when
    /// the request is refused and the pipeline stops.
    fn settle(
        &self,
        kind: LimiterKind,
        mode: Mode,
        on_error: OnStoreError,
        step: Step,
        verdict: &mut Verdict,
    ) -> bool {
        let refusal = match step {
            Step::Pass => return false,
            Step::Refuse(refusal) => refusal,
            Step::Failed(error) => match on_error {
                OnStoreError::FailOpen => {
                    bump(&self.counters.fail_open, kind);
                    verdict.fail_opens.push(kind);
                    return false;
                }
                OnStoreError::FailClosed => {
                    bump(&self.counters.fail_closed, kind);
                    Refusal {
                        limiter: kind,
                        status: 503,
                        retry_after: Some(SHED_RETRY_AFTER),
                        message: format!(
                            "the {kind} limiter cannot reach its store ({error}); retry in 1 s"
                        ),
                        rate_limit: None,
                    }
                }
            },
        };
        match mode {
            Mode::Enforce => {
                bump(&self.counters.refused, kind);
                // Give back what earlier limiters took: the request will not run.
                verdict.leases.clear();
                verdict.refusal = Some(refusal);
                true
            }
            Mode::Shadow | Mode::Off => {
                bump(&self.counters.shadow_refused, kind);
                verdict.shadow_refusals.push(kind);
                false
            }
        }
    }
}

impl<S: Store<str, AnyAlgorithm> + 'static> Pipeline<S> {
    /// Runs the limiters for one request. See the [module documentation](self).
    pub async fn evaluate(&self, request: &Descriptor<'_>) -> Verdict {
        let mut verdict = Verdict::default();

        if let Some(stage) = &self.request_rate {
            let mode = stage.mode();
            if mode != Mode::Off {
                let limiter = &stage.limiter;
                let cost = request
                    .cost
                    .unwrap_or_else(|| limiter.cost_of(request.endpoint));
                let step = match limiter.check(request.user, request.plan, cost).await {
                    Ok(rd) => {
                        let headers = rate_headers(rd.plan.quota(), &rd.decision);
                        verdict.rate_limit = headers.clone();
                        if rd.decision.allowed {
                            Step::Pass
                        } else {
                            let message = match rd.decision.retry_after {
                                Some(retry) => {
                                    format!("{}; retry in {} s", rd.plan.describe(), seconds(retry))
                                }
                                None => format!(
                                    "{}; a request costing {cost} can never pass",
                                    rd.plan.describe()
                                ),
                            };
                            Step::Refuse(Refusal {
                                limiter: LimiterKind::RequestRate,
                                status: 429,
                                retry_after: rd.decision.retry_after,
                                message,
                                rate_limit: headers,
                            })
                        }
                    }
                    Err(e) => Step::Failed(e),
                };
                if self.settle(
                    LimiterKind::RequestRate,
                    mode,
                    stage.on_error,
                    step,
                    &mut verdict,
                ) {
                    return verdict;
                }
            }
        }

        if let Some(stage) = &self.concurrency {
            let mode = stage.mode();
            if mode != Mode::Off {
                let step = match stage.limiter.acquire(request.user, None).await {
                    Ok(acquired) => {
                        verdict.leases.extend(acquired.lease);
                        if acquired.decision.allowed {
                            Step::Pass
                        } else {
                            Step::Refuse(concurrency_refusal(request.user, &acquired.decision))
                        }
                    }
                    Err(e) => Step::Failed(e),
                };
                if self.settle(
                    LimiterKind::Concurrency,
                    mode,
                    stage.on_error,
                    step,
                    &mut verdict,
                ) {
                    return verdict;
                }
            }
        }

        if let Some(stage) = &self.fleet {
            let mode = stage.mode();
            if mode != Mode::Off {
                let critical = request.priority == Priority::Critical;
                let step = match stage.limiter.acquire(critical, None).await {
                    Ok(acquired) => {
                        verdict.leases.extend(acquired.lease);
                        if acquired.decision.allowed {
                            Step::Pass
                        } else {
                            Step::Refuse(Refusal {
                                limiter: LimiterKind::Fleet,
                                status: 503,
                                retry_after: Some(SHED_RETRY_AFTER),
                                message: format!(
                                    "the service is keeping its remaining capacity for critical \
                                     requests ({} non-critical requests in flight, the most \
                                     allowed); retry in 1 s",
                                    acquired.decision.limit
                                ),
                                rate_limit: None,
                            })
                        }
                    }
                    Err(e) => Step::Failed(e),
                };
                if self.settle(LimiterKind::Fleet, mode, stage.on_error, step, &mut verdict) {
                    return verdict;
                }
            }
        }

        if let Some(stage) = &self.utilization {
            let mode = stage.mode();
            if mode != Mode::Off {
                let shed = stage.limiter.check(request.priority);
                verdict.shed_amount = Some(shed.shed_amount);
                let step = if shed.shed {
                    Step::Refuse(Refusal {
                        limiter: LimiterKind::Utilization,
                        status: 503,
                        retry_after: Some(SHED_RETRY_AFTER),
                        message: format!(
                            "the service is overloaded and is shedding {} requests ({:.0}% of \
                             them right now); retry in 1 s",
                            request.priority.name(),
                            shed.drop_probability * 100.0
                        ),
                        rate_limit: None,
                    })
                } else {
                    Step::Pass
                };
                if self.settle(
                    LimiterKind::Utilization,
                    mode,
                    stage.on_error,
                    step,
                    &mut verdict,
                ) {
                    return verdict;
                }
            }
        }
        verdict
    }

    /// Gives back a lease by id (for callers that kept it with [`Lease::keep`]): `kind` is the
    /// limiter that granted it, `key` its [`Lease::key`]. `Ok(false)` if it was not held.
    pub async fn release(
        &self,
        kind: LimiterKind,
        key: &str,
        lease: u64,
    ) -> Result<bool, StoreError> {
        match kind {
            LimiterKind::Concurrency => match &self.concurrency {
                Some(stage) => stage.limiter.release(key, lease).await,
                None => Ok(false),
            },
            LimiterKind::Fleet => match &self.fleet {
                Some(stage) => stage.limiter.release(lease).await,
                None => Ok(false),
            },
            LimiterKind::RequestRate | LimiterKind::Utilization => Ok(false),
        }
    }
}

fn concurrency_refusal(user: &str, d: &Decision) -> Refusal {
    Refusal {
        limiter: LimiterKind::Concurrency,
        status: 429,
        // A place frees when one of the user's requests ends; leases expiring is the worst case.
        retry_after: Some(
            d.retry_after
                .map_or(SHED_RETRY_AFTER, |r| r.min(SHED_RETRY_AFTER)),
        ),
        message: format!(
            "user {user} already has {} requests in flight, the most allowed; retry when one of \
             them finishes",
            d.limit
        ),
        rate_limit: Some(RateLimitHeaders {
            policy: format!("\"concurrency\";q={};qu=\"concurrent-requests\"", d.limit),
            remaining: format!("\"concurrency\";r={}", d.remaining),
        }),
    }
}

/// The request rate limiter's header values: the quota over its window, what is left, and the
/// seconds until the request could pass (refused) or the quota is full again (allowed).
fn rate_headers(quota: Option<(f64, Duration)>, d: &Decision) -> Option<RateLimitHeaders> {
    let (units, window) = quota?;
    let (q, w) = policy_numbers(units, window);
    let t = whole_seconds_up(d.retry_after.unwrap_or(d.reset_after));
    Some(RateLimitHeaders {
        policy: format!("\"requests\";q={q};w={w}"),
        remaining: format!("\"requests\";r={};t={t}", d.remaining),
    })
}

/// Seconds for messages: "0.12", "2", "1.5".
fn seconds(d: Duration) -> String {
    let s = format!("{:.2}", d.as_secs_f64());
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}
