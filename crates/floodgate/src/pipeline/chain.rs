//! One request through the stages, with one store call per segment of stages sharing a store.
//!
//! The stages that keep state in a store (request rate, concurrency, fleet) do not each make a
//! call: their operations go to the store together as a [`chain`](crate::store::chain), which a
//! remote store runs in one round trip. The chain keeps the pipeline's rules: the links run in
//! stage order, an enforcing stage's denial ends it (later stages are not applied, as if the
//! pipeline had stopped there), and stages marked [`Stage::all_or_nothing`] are undone when
//! the request is refused by a denial in the chain.
//!
//! Stages that decide on this node alone (the utilization shedder, the adaptive concurrency
//! limit) keep their place in the order: those after the segment's last store stage run after
//! the chain answers, and only if it passed; those before it run first, and an enforcing
//! refusal among them cuts the chain there (the store stages before it still run, as they
//! would have in turn). When a store stage is all or nothing, every stage deciding on this
//! node decides before any chain is sent instead ([`Decided`]), and a refusal among them makes
//! the chains before it refused ones ([`Store::apply_chain_refused`]): the store stages before
//! the refusal still decide (an earlier refusal wins), and the all-or-nothing ones are undone
//! in the same call, so a request that a node-local stage refuses consumes nothing from them.
//!
//! A shadow stage decides its levels (a hierarchical limit's keys) together, as it would
//! enforcing: when one level denies, every level is undone ([`Link::joins_previous`]), so the
//! shadow counts are the ones enforcement would keep.
//!
//! A link of an enforcing stage that fails closed ([`OnStoreError::FailClosed`]) and fails on
//! its own (a key holding another algorithm's state, a full store) refuses the request as a
//! denial would: the chain ends there and its all-or-nothing links are undone. A failure of
//! the whole call leaves nothing to undo that the pipeline could know of.
//!
//! Segments: when every store stage shares one store ([`Store::same_store`]) the whole
//! pipeline is one segment, one call. Otherwise a new segment starts at each store stage on a
//! different store than the segment's first; undoing never crosses segments.

use std::ops::Range;

use super::{settle, Limiter, Pipeline, Refusal, Stage, Step, SHED_RETRY_AFTER};
use crate::algorithm::spec::AnyAlgorithm;
use crate::limiter::{Lease, Priority, RateLimitHeaders};
use crate::pipeline::{Mode, OnStoreError};
use crate::store::{self, Link, Linked, ScopedKey, Store};
use crate::{Decision, LeaseId, Op, StoreError};

use super::{concurrency_headers, seconds, Request, Verdict};
use crate::limiter::fleet::FLEET_KEY;
use crate::limiter::in_flight::InFlight;
use crate::limiter::request_rate::{Plan, RequestRateLimiter};

/// What the stages of a segment that decide on this node decided before its chain
/// ([`Pipeline::evaluate`] with an all-or-nothing stage).
pub(super) struct Decided {
    /// Each such stage's index in the segment and its step, in order.
    pub(super) steps: Vec<(usize, Step)>,
    /// Where the stage whose enforcing refusal ends the request stands, counted from the
    /// segment's first stage: every store stage before it becomes a link (it lies beyond the
    /// segment when that stage is in a later one).
    pub(super) cut: Option<usize>,
    /// Whether a stage deciding on this node refused the request: the chain is sent as a
    /// refused one.
    pub(super) refused: bool,
}

/// A store stage's operation for one request, waiting for the chain's answer.
pub(super) struct Pending<'s> {
    /// The stage's index in its segment.
    stage: usize,
    pub(super) algorithm: &'s AnyAlgorithm,
    pub(super) key: ScopedKey,
    pub(super) op: Op,
    /// The lease an acquire takes, armed before the store is asked: if the request's future
    /// is dropped meanwhile, the lease is given back.
    lease: Option<Lease>,
    /// The request rate stage's plan and cost.
    pub(super) plan: Option<(&'s Plan, u64)>,
}

impl<S: Store<str, AnyAlgorithm> + 'static> Limiter<S> {
    /// The store the limiter keeps its state in; `None` for limiters deciding on this node.
    pub(super) fn store(&self) -> Option<&S> {
        match self {
            Limiter::RequestRate(l) => Some(l.store()),
            Limiter::Concurrency(l) => Some(l.store()),
            Limiter::Fleet(l) => Some(l.store()),
            Limiter::Utilization(_) | Limiter::AdaptiveConcurrency(_) => None,
        }
    }
}

impl<S: Store<str, AnyAlgorithm> + 'static> Stage<S> {
    /// The store operations this stage makes for `request` (a store stage): one, or one per
    /// level of a hierarchical limit. None when a field the scope needs is absent (a request
    /// [`Pipeline::evaluate`] has already refused, or one the stage skips).
    pub(super) fn pending<'s>(
        &'s self,
        index: usize,
        request: &Request<'_>,
        out: &mut Vec<Pending<'s>>,
    ) {
        fn acquire<'s, S: Store<str, AnyAlgorithm> + 'static>(
            index: usize,
            leases: &'s InFlight<S>,
            key: &str,
            critical: bool,
        ) -> Pending<'s> {
            let id = LeaseId::random();
            Pending {
                stage: index,
                algorithm: leases.algorithm(),
                key: leases.namespace().key(key),
                op: Op::Acquire {
                    lease: id,
                    critical,
                },
                lease: Some(leases.arm(key, id)),
                plan: None,
            }
        }
        let scope = &self.scope;
        let key = match &scope.key {
            Some(template) => match template.render(request) {
                Ok(key) => std::borrow::Cow::Owned(key),
                Err(_) => return,
            },
            None => std::borrow::Cow::Borrowed(request.user),
        };
        let rate = |limiter: &'s RequestRateLimiter<S>, key: &str, cost: u64| {
            let plan = limiter.plan(scope.plan(request));
            Pending {
                stage: index,
                algorithm: plan.algorithm(),
                key: limiter.namespace().key(key),
                op: Op::Check { cost },
                lease: None,
                plan: Some((plan, cost)),
            }
        };
        match &self.limiter {
            Limiter::RequestRate(limiter) => {
                let Ok(cost) = scope.cost_of(request, || limiter.cost_of(request.endpoint)) else {
                    return;
                };
                let start = out.len();
                out.push(rate(limiter, &key, cost));
                for level in &self.levels {
                    match level.key.render(request) {
                        Ok(key) => out.push(rate(&level.limiter, &key, cost)),
                        // All the stage's links or none.
                        Err(_) => {
                            out.truncate(start);
                            return;
                        }
                    }
                }
            }
            Limiter::Concurrency(limiter) => {
                out.push(acquire(index, limiter.leases(), &key, false));
            }
            Limiter::Fleet(shedder) => out.push(acquire(
                index,
                shedder.leases(),
                FLEET_KEY,
                request.priority == Priority::Critical,
            )),
            Limiter::Utilization(_) | Limiter::AdaptiveConcurrency(_) => {}
        }
    }

    fn refuse(
        &self,
        retry_after: Option<std::time::Duration>,
        message: String,
        rate_limit: Option<RateLimitHeaders>,
    ) -> Step {
        Step::Refuse(Refusal {
            stage: self.name.clone(),
            kind: self.limiter.kind(),
            status: self.status,
            retry_after,
            message,
            rate_limit,
        })
    }

    /// What the stage concludes from its store's `decision` for `pending`. A lease that was
    /// granted goes to `verdict`, unless the chain undid it (`undone`).
    fn conclude(
        &self,
        request: &Request<'_>,
        pending: Pending<'_>,
        decision: Decision,
        undone: bool,
        verdict: &mut Verdict,
    ) -> Step {
        tracing::debug!(
            target: "floodgate::decision",
            stage = %self.name,
            key = &*pending.key,
            hits = pending.op.cost(),
            allowed = decision.allowed,
            remaining = decision.remaining,
            limit = decision.limit,
            undone,
            "stage decided"
        );
        if let Some(lease) = pending.lease {
            if decision.allowed && !undone {
                verdict.leases.push(lease);
            } else {
                // Refused, or taken and given back by the chain: nothing to return.
                let _ = lease.keep();
            }
        }
        match &self.limiter {
            Limiter::RequestRate(_) => {
                let (plan, cost) = pending.plan.expect("a request rate stage has a plan");
                let headers = RateLimitHeaders::for_decision(plan.quota(), &decision);
                let fewer_left = |current: &RateLimitHeaders| decision.remaining < current.left;
                if verdict.rate_limit.as_ref().is_none_or(fewer_left) {
                    verdict.rate_limit = headers.clone();
                }
                if decision.allowed {
                    return Step::Pass;
                }
                let message = match decision.retry_after {
                    Some(retry) => format!("{}; retry in {} s", plan.describe(), seconds(retry)),
                    None => format!(
                        "{}; a request costing {cost} can never pass",
                        plan.describe()
                    ),
                };
                self.refuse(decision.retry_after, message, headers)
            }
            Limiter::Concurrency(_) => {
                if decision.allowed {
                    return Step::Pass;
                }
                // A place frees when one of the user's requests ends; leases expiring is the
                // worst case.
                let retry = decision
                    .retry_after
                    .map_or(SHED_RETRY_AFTER, |r| r.min(SHED_RETRY_AFTER));
                let message = match &self.scope.key {
                    None => format!(
                        "user {} already has {} requests in flight, the most allowed; retry \
                         when one of them finishes",
                        request.user, decision.limit
                    ),
                    Some(template) => format!(
                        "{} requests with this {template} are already in flight, the most \
                         stage {} allows; retry when one of them finishes",
                        decision.limit, self.name
                    ),
                };
                self.refuse(Some(retry), message, Some(concurrency_headers(&decision)))
            }
            Limiter::Fleet(_) => {
                if decision.allowed {
                    return Step::Pass;
                }
                let message = format!(
                    "the service is keeping its remaining capacity for critical requests ({} \
                     non-critical requests in flight, the most allowed); retry in 1 s",
                    decision.limit
                );
                self.refuse(Some(SHED_RETRY_AFTER), message, None)
            }
            Limiter::Utilization(_) | Limiter::AdaptiveConcurrency(_) => Step::Pass,
        }
    }

    /// What the stage concludes from one of its links' outcome; `None` for a link the chain
    /// did not run.
    fn conclude_link(
        &self,
        request: &Request<'_>,
        mut p: Pending<'_>,
        outcome: Linked,
        undone: bool,
        verdict: &mut Verdict,
    ) -> Option<Step> {
        Some(match outcome {
            Linked::Decided(d) => {
                let undone = undone && self.all_or_nothing;
                self.conclude(request, p, d, undone, verdict)
            }
            Linked::Failed(e) => match &self.local {
                Some(local) => {
                    let plan = p.plan.map(|(plan, _)| plan.name());
                    match local.decide(plan, &p.key, p.op, &mut p.lease) {
                        Ok(d) => {
                            super::bump(&self.counters.decided_locally);
                            verdict.decided_locally.push(self.name.clone());
                            self.conclude(request, p, d, false, verdict)
                        }
                        Err(_) => Step::Failed(e),
                    }
                }
                // The lease guard, dropped here, gives back what may have been taken.
                None => Step::Failed(e),
            },
            _ => {
                if let Some(lease) = p.lease {
                    let _ = lease.keep();
                }
                return None;
            }
        })
    }

    /// What a stage deciding on this node concludes (store stages are decided in chains).
    pub(super) fn decide_locally(&self, request: &Request<'_>, verdict: &mut Verdict) -> Step {
        if let Limiter::AdaptiveConcurrency(limiter) = &self.limiter {
            let admission = limiter.try_acquire();
            tracing::debug!(
                target: "floodgate::decision",
                stage = %self.name,
                allowed = admission.lease.is_some(),
                in_flight = admission.in_flight,
                limit = admission.limit,
                "stage decided"
            );
            if let Some(lease) = admission.lease {
                verdict.leases.push(lease);
                return Step::Pass;
            }
            let message = format!(
                "the service is at the concurrency limit it learned from its latency ({} \
                 requests in flight); retry in 1 s",
                admission.limit
            );
            return self.refuse(Some(SHED_RETRY_AFTER), message, None);
        }
        let Limiter::Utilization(shedder) = &self.limiter else {
            return Step::Pass;
        };
        let shed = shedder.check(request.priority);
        tracing::debug!(
            target: "floodgate::decision",
            stage = %self.name,
            priority = request.priority.name(),
            allowed = !shed.shed,
            shed_amount = shed.shed_amount,
            drop_probability = shed.drop_probability,
            "stage decided"
        );
        verdict.shed_amount = Some(shed.shed_amount);
        // The request is a busy worker until it ends: an enforcing refusal (this stage's, or
        // a later one's) drops the lease with the verdict's others; a shadow one lets the
        // request run, busy.
        if let Some(lease) = shedder.lease_worker() {
            verdict.leases.push(lease);
        }
        if !shed.shed {
            return Step::Pass;
        }
        let message = format!(
            "the service is overloaded and is shedding {} requests ({:.0}% of them right now); \
             retry in 1 s",
            request.priority.name(),
            shed.drop_probability * 100.0
        );
        self.refuse(Some(SHED_RETRY_AFTER), message, None)
    }
}

/// Splits `stages` into segments whose store stages share one store (see the [module
/// documentation](self)).
pub(super) fn segments<S: Store<str, AnyAlgorithm> + 'static>(
    stages: &[Stage<S>],
) -> Box<[Range<usize>]> {
    let mut segments = Vec::new();
    let mut start = 0;
    let mut store: Option<&S> = None;
    for (i, stage) in stages.iter().enumerate() {
        let Some(s) = stage.limiter.store() else {
            continue;
        };
        match store {
            Some(first) if !first.same_store(s) => {
                segments.push(start..i);
                start = i;
                store = Some(s);
            }
            Some(_) => {}
            None => store = Some(s),
        }
    }
    segments.push(start..stages.len());
    segments.into_boxed_slice()
}

impl<S: Store<str, AnyAlgorithm> + 'static> Pipeline<S> {
    /// Runs one segment's stages for `request`; `true` when the request is refused. Its
    /// stages deciding on this node decide here, around the chain, unless they already have
    /// (`decided`).
    pub(super) async fn evaluate_segment(
        stages: &[Stage<S>],
        request: &Request<'_>,
        verdict: &mut Verdict,
        decided: Option<Decided>,
    ) -> bool {
        let modes: Vec<Mode> = stages.iter().map(|s| s.mode_for(request)).collect();
        let stored = |i: usize| modes[i] != Mode::Off && stages[i].limiter.store().is_some();
        let last = (0..stages.len()).rev().find(|&i| stored(i));
        let (early, cut, refused, local_from) = match decided {
            Some(d) => (d.steps, d.cut, d.refused, stages.len()),
            None => {
                let Some(last) = last else {
                    return Self::run_local(stages, &modes, 0, request, verdict);
                };
                // Stages up to `last`: local ones decide now (an enforcing refusal cuts the
                // chain there).
                let mut early: Vec<(usize, Step)> = Vec::new();
                let mut cut = None;
                for (i, stage) in stages.iter().enumerate().take(last + 1) {
                    if stored(i) || modes[i] == Mode::Off {
                        continue;
                    }
                    let step = stage.decide_locally(request, verdict);
                    let cuts = modes[i] == Mode::Enforce && matches!(step, Step::Refuse(_));
                    early.push((i, step));
                    if cuts {
                        cut = Some(i);
                        break;
                    }
                }
                (early, cut, false, last + 1)
            }
        };
        // The store stages before the cut become links.
        let mut pending: Vec<Pending<'_>> = Vec::new();
        let before_cut = cut.unwrap_or(stages.len());
        for (i, stage) in stages.iter().enumerate().take(before_cut) {
            if stored(i) {
                stage.pending(i, request, &mut pending);
            }
        }
        let outcomes = Self::run_chain(stages, &modes, &pending, refused).await;
        let undone = refused || undid(stages, &modes, &pending, &outcomes);
        // Settle in stage order.
        let mut early = early.into_iter().peekable();
        let mut chained = pending.into_iter().zip(outcomes).peekable();
        loop {
            let next_early = early.peek().map(|(i, _)| *i);
            let next_chained = chained.peek().map(|(p, _)| p.stage);
            let (i, step) = match (next_early, next_chained) {
                (Some(e), c) if c.is_none_or(|c| e < c) => early.next().expect("peeked"),
                (_, Some(_)) => {
                    let (p, outcome) = chained.next().expect("peeked");
                    let i = p.stage;
                    let stage = &stages[i];
                    let mut step = stage.conclude_link(request, p, outcome, undone, verdict);
                    // A hierarchical limit's levels: the stage's step is its first refusal.
                    while chained.peek().is_some_and(|(p, _)| p.stage == i) {
                        let (p, outcome) = chained.next().expect("peeked");
                        let next = stage.conclude_link(request, p, outcome, undone, verdict);
                        if next.is_some() && matches!(step, None | Some(Step::Pass)) {
                            step = next;
                        }
                    }
                    let Some(step) = step else {
                        continue;
                    };
                    (i, step)
                }
                (None, None) => break,
                _ => unreachable!("one of the two is Some"),
            };
            if settle(&stages[i], modes[i], step, verdict) {
                // The links not looked at: give back only what they took and kept.
                for (p, outcome) in chained {
                    let taken = match outcome {
                        Linked::Decided(d) => {
                            d.allowed && !(undone && stages[p.stage].all_or_nothing)
                        }
                        Linked::Failed(_) => true, // unknown: giving back is harmless
                        _ => false,
                    };
                    if let (Some(lease), false) = (p.lease, taken) {
                        let _ = lease.keep();
                    }
                }
                return true;
            }
        }
        Self::run_local(stages, &modes, local_from, request, verdict)
    }

    /// The segment's chain, in one store call (a refused one when the request is `refused`
    /// after it); a failure of the call fails every link.
    async fn run_chain(
        stages: &[Stage<S>],
        modes: &[Mode],
        pending: &[Pending<'_>],
        refused: bool,
    ) -> Vec<Linked> {
        let Some(first) = pending.first() else {
            return Vec::new();
        };
        let store = stages[first.stage]
            .limiter
            .store()
            .expect("a pending operation is a store stage's");
        let links: Vec<Link<'_, str, AnyAlgorithm>> = pending
            .iter()
            .enumerate()
            .map(|(i, p)| Link {
                request: store::KeyedOp {
                    algorithm: p.algorithm,
                    key: &*p.key,
                    op: p.op,
                },
                refuses: modes[p.stage] == Mode::Enforce,
                stops: modes[p.stage] == Mode::Enforce,
                all_or_nothing: stages[p.stage].all_or_nothing,
                fails_closed: modes[p.stage] == Mode::Enforce
                    && stages[p.stage].on_error == OnStoreError::FailClosed,
                // A shadow stage's levels count together, as the stage enforcing would (a
                // refusal undoes them all); an enforcing one's denial refuses the request,
                // which undoes them anyway.
                joins_previous: modes[p.stage] == Mode::Shadow
                    && i > 0
                    && pending[i - 1].stage == p.stage,
            })
            .collect();
        let answered = if refused {
            store.apply_chain_refused(&links).await
        } else {
            store.apply_chain(&links).await
        };
        match answered {
            Ok(outcomes) if outcomes.len() == links.len() => outcomes,
            Ok(_) => failed_chain(
                StoreError::Unavailable("a chain answer of the wrong length".into()),
                links.len(),
            ),
            Err(e) => failed_chain(e, links.len()),
        }
    }

    /// The stages from `from` on that decide on this node, in order; `true` when one refuses.
    fn run_local(
        stages: &[Stage<S>],
        modes: &[Mode],
        from: usize,
        request: &Request<'_>,
        verdict: &mut Verdict,
    ) -> bool {
        for (i, stage) in stages.iter().enumerate().skip(from) {
            if modes[i] == Mode::Off {
                continue;
            }
            let step = stage.decide_locally(request, verdict);
            if settle(stage, modes[i], step, verdict) {
                return true;
            }
        }
        false
    }
}

/// Whether the chain undid its all-or-nothing links, as the store decides it: an enforcing
/// denial, or a failure of a stage failing closed, refuses the request.
fn undid<S: Store<str, AnyAlgorithm> + 'static>(
    stages: &[Stage<S>],
    modes: &[Mode],
    pending: &[Pending<'_>],
    outcomes: &[Linked],
) -> bool {
    outcomes.iter().zip(pending).any(|(outcome, p)| {
        modes[p.stage] == Mode::Enforce
            && match outcome {
                Linked::Decided(d) => !d.allowed,
                Linked::Failed(_) => stages[p.stage].on_error == OnStoreError::FailClosed,
                _ => false,
            }
    })
}

fn failed_chain(error: StoreError, links: usize) -> Vec<Linked> {
    (0..links).map(|_| Linked::Failed(error.clone())).collect()
}
