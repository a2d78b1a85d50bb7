//! Reservations through a pipeline: a request whose cost is known only when it ends (an LLM
//! call's tokens) runs the stages with its estimate as its cost ([`Pipeline::reserve`]), and is
//! settled at its actual cost on every stage that took the estimate ([`Pipeline::settle`]).
//!
//! - **Which stages hold it**: the request rate stages that applied to the request, counting
//!   the request's own cost (a [`Cost::Request`] scope; a stage of constant cost, or of a
//!   cost read from a field, charged what it charges whatever the estimate), in enforce or
//!   shadow mode, whose store decided and admitted it: not a shadow stage that would have
//!   refused, not one that failed open or decided on this node's share after its store
//!   failed. A hierarchical stage holds the estimate at each of its levels.
//! - **All or nothing.** Reserving is [`Pipeline::evaluate`] itself: with all-or-nothing stages
//!   a refused estimate takes nothing from any of them, atomically in the store. Settling
//!   charges or refunds the difference on every hold; neither is ever refused, so every hold
//!   settles, each key atomically.
//! - **Once**: [`Pipeline::settle`] takes the [`PipelineReservation`] by value. Each hold is
//!   settled by a call of its own (the calls run concurrently; a store that batches, as Redis
//!   does, sends them together), so when a store fails the caller learns exactly which holds
//!   were settled: [`SettleError::unsettled`] is the rest, and settling it finishes the
//!   reservation, each hold once. (A call that timed out may have been applied without an
//!   answer; retrying it then counts it twice, as any write retried after a timeout would.)
//!
//! The bound of [`crate::limiter::reservation`] holds stage by stage: each budget is overshot
//! by at most what the requests in flight at its last admission used beyond their estimates.

use crate::algorithm::spec::AnyAlgorithm;
use crate::limiter::reservation::settlement;
use crate::pipeline::Mode;
use crate::store::{Namespace, ScopedKey, Store};
use crate::{Decision, Op, StoreError};

use super::scope::Cost;
use super::{Limiter, Pipeline, Request, Verdict};

/// Where one stage (or one level of a hierarchical stage) took a reservation's estimate.
#[derive(Debug, Clone)]
pub struct Hold {
    stage: Namespace,
    /// 0 for the stage's own limit, `i` for its `i`-th level.
    level: usize,
    plan: String,
    algorithm: AnyAlgorithm,
    key: ScopedKey,
    estimate: u64,
}

impl Hold {
    /// The stage that took it.
    pub fn stage(&self) -> &Namespace {
        &self.stage
    }

    /// Where in the stage: 0 for its own limit, `i` for its `i`-th level.
    pub fn level(&self) -> usize {
        self.level
    }

    /// The plan whose algorithm counted it.
    pub fn plan(&self) -> &str {
        &self.plan
    }

    /// The key it was taken on, with the limiter's namespace.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The estimate taken there.
    pub fn estimate(&self) -> u64 {
        self.estimate
    }
}

/// A settlement that a store failure left unfinished ([`Pipeline::settle`]).
#[derive(Debug, thiserror::Error)]
#[error("{} of a reservation's holds could not be settled: {error}", unsettled_at.len())]
pub struct SettleError {
    /// The first store failure.
    #[source]
    pub error: StoreError,
    /// The holds that were settled, by position in the reservation, with their stage and
    /// decision.
    pub settled: Vec<(usize, Namespace, Decision)>,
    /// The holds left to settle, in order: settle them (with the same actual cost) to finish
    /// the reservation; none of them was applied, unless its call timed out after the store
    /// had run it.
    pub unsettled: PipelineReservation,
    /// Where each of [`SettleError::unsettled`]'s holds stood in the reservation settled.
    pub unsettled_at: Vec<usize>,
}

/// The estimate a request holds in a pipeline's stages, to settle with [`Pipeline::settle`].
#[derive(Debug)]
#[must_use = "a reservation holds its estimate until it is settled"]
pub struct PipelineReservation {
    holds: Vec<Hold>,
}

impl PipelineReservation {
    /// Where the estimate was taken, stage by stage (level by level), in pipeline order.
    pub fn holds(&self) -> &[Hold] {
        &self.holds
    }

    /// A reservation of `holds`, as a service rebuilds one it handed out
    /// ([`Pipeline::rebuild_hold`]).
    pub fn from_holds(holds: Vec<Hold>) -> PipelineReservation {
        PipelineReservation { holds }
    }
}

impl<S: Store<str, AnyAlgorithm> + 'static> Pipeline<S> {
    /// Runs the stages for `request` with `estimate` as its cost, and when it is admitted, the
    /// reservation to settle when it ends (`None` when refused: with all-or-nothing stages,
    /// nothing is held). See the [module documentation](self).
    pub async fn reserve(
        &self,
        request: &Request<'_>,
        estimate: u64,
    ) -> (Verdict, Option<PipelineReservation>) {
        let request = Request {
            cost: Some(estimate),
            ..*request
        };
        let verdict = self.evaluate(&request).await;
        if !verdict.allowed() {
            return (verdict, None);
        }
        let mut holds = Vec::new();
        let mut pending = Vec::new();
        for (index, stage) in self.stages.iter().enumerate() {
            if !matches!(stage.limiter, Limiter::RequestRate(_))
                || !matches!(stage.scope.cost, Cost::Request)
                || stage.mode_for(&request) == Mode::Off
                || [
                    &verdict.shadow_refusals,
                    &verdict.fail_opens,
                    &verdict.decided_locally,
                ]
                .iter()
                .any(|names| names.contains(&stage.name))
            {
                continue;
            }
            pending.clear();
            stage.pending(index, &request, &mut pending);
            // The stage's own limit first, then its levels in order.
            for (level, p) in pending.drain(..).enumerate() {
                if let (Op::Check { cost }, Some((plan, _))) = (p.op, p.plan) {
                    holds.push(Hold {
                        stage: stage.name.clone(),
                        level,
                        plan: plan.name().to_string(),
                        algorithm: p.algorithm.clone(),
                        key: p.key,
                        estimate: cost,
                    });
                }
            }
        }
        (verdict, Some(PipelineReservation { holds }))
    }

    /// Holds `estimate` on one request rate stage alone, on `key` (without the stage's
    /// namespace) under `plan` (the stage's default plan for an unknown one): the decision,
    /// and the reservation when admitted. `None` when the pipeline has no request rate stage
    /// of that name; [`StoreError::Unsupported`] (nothing taken) when the plan's algorithm
    /// cannot settle. The stage's mode and scope are not consulted: the caller names the key.
    pub async fn reserve_on_stage(
        &self,
        stage: &str,
        key: &str,
        plan: &str,
        estimate: u64,
    ) -> Option<Result<(Decision, Option<PipelineReservation>), StoreError>> {
        let found = self.stage(stage)?;
        let Limiter::RequestRate(limiter) = &found.limiter else {
            return None;
        };
        let plan = limiter.plan(plan);
        let algorithm = plan.algorithm();
        use crate::algorithm::Algorithm as _;
        for op in [crate::OpKind::Charge, crate::OpKind::Refund] {
            if !algorithm.supports(op) {
                let name = algorithm.name();
                return Some(Err(StoreError::Unsupported {
                    algorithm: name,
                    op,
                }));
            }
        }
        let scoped = limiter.namespace().key(key);
        let decided = limiter
            .store()
            .apply(algorithm, &scoped, Op::Check { cost: estimate })
            .await;
        Some(decided.map(|decision| {
            let held = decision.allowed.then(|| PipelineReservation {
                holds: vec![Hold {
                    stage: found.name.clone(),
                    level: 0,
                    plan: plan.name().to_string(),
                    algorithm: algorithm.clone(),
                    key: scoped,
                    estimate,
                }],
            });
            (decision, held)
        }))
    }

    /// The hold of `estimate` on `key` (with its limiter's namespace) at `level` of `stage`
    /// under `plan`, as a service rebuilds it from a reservation it handed out; `None` when
    /// this pipeline has no such stage, level or plan, or the key is not of that limiter.
    pub fn rebuild_hold(
        &self,
        stage: &str,
        level: usize,
        plan: &str,
        key: &str,
        estimate: u64,
    ) -> Option<Hold> {
        let found = self.stage(stage)?;
        let Limiter::RequestRate(own) = &found.limiter else {
            return None;
        };
        let limiter = match level {
            0 => own,
            i => found.levels().get(i - 1)?.limiter(),
        };
        let raw = key
            .strip_prefix(limiter.namespace().as_str())?
            .strip_prefix(':')?;
        let plan = limiter.plans().find(|p| p.name() == plan)?;
        Some(Hold {
            stage: found.name.clone(),
            level,
            plan: plan.name().to_string(),
            algorithm: plan.algorithm().clone(),
            key: limiter.namespace().key(raw),
            estimate,
        })
    }

    /// Settles `reservation` at `actual`: on every hold, a charge of what the request used
    /// beyond its estimate (counted even past the limit) or a refund of what it did not use.
    /// The decisions, one per hold, in order: `allowed == false` where a charge put a key past
    /// its limit. A hold whose stage this pipeline no longer has (a reload removed it) is
    /// skipped. [`SettleError`] when a store failed: it names what was settled and holds the
    /// rest, to settle again.
    pub async fn settle(
        &self,
        reservation: PipelineReservation,
        actual: u64,
    ) -> Result<Vec<(Namespace, Decision)>, SettleError> {
        let mut calls = Vec::with_capacity(reservation.holds.len());
        for (at, hold) in reservation.holds.iter().enumerate() {
            let Some(store) = self
                .stage(hold.stage.as_str())
                .and_then(|s| s.limiter.store())
            else {
                continue;
            };
            let op = settlement(hold.estimate, actual);
            calls.push((at, Box::pin(store.apply(&hold.algorithm, &hold.key, op))));
        }
        let answers = all(calls.iter_mut().map(|(_, call)| call.as_mut())).await;
        let positions: Vec<usize> = calls.iter().map(|(at, _)| *at).collect();
        drop(calls);
        let mut settled = Vec::with_capacity(answers.len());
        let mut failure = None;
        let mut unsettled_at = Vec::new();
        for (at, answer) in positions.into_iter().zip(answers) {
            match answer {
                Ok(decision) => settled.push((at, reservation.holds[at].stage.clone(), decision)),
                Err(error) => {
                    failure.get_or_insert(error);
                    unsettled_at.push(at);
                }
            }
        }
        match failure {
            None => Ok(settled.into_iter().map(|(_, s, d)| (s, d)).collect()),
            Some(error) => {
                let mut holds: Vec<Option<Hold>> =
                    reservation.holds.into_iter().map(Some).collect();
                let unsettled = unsettled_at
                    .iter()
                    .filter_map(|&at| holds[at].take())
                    .collect();
                Err(SettleError {
                    error,
                    settled,
                    unsettled: PipelineReservation { holds: unsettled },
                    unsettled_at,
                })
            }
        }
    }
}

/// Polls every future of `futures` until all are ready: their outputs, in order.
async fn all<F: std::future::Future + Unpin>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut futures: Vec<(F, Option<F::Output>)> = futures.map(|f| (f, None)).collect();
    std::future::poll_fn(|cx| {
        let mut ready = true;
        for (future, output) in futures.iter_mut() {
            if output.is_none() {
                match std::pin::Pin::new(future).poll(cx) {
                    std::task::Poll::Ready(out) => *output = Some(out),
                    std::task::Poll::Pending => ready = false,
                }
            }
        }
        if ready {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    futures
        .into_iter()
        .map(|(_, output)| output.expect("every future is ready"))
        .collect()
}
