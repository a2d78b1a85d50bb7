//! Reservations of the named limits (`POST /v1/reserve`, `POST /v1/settle`): a budget held for
//! a request whose cost is known only when it ends, settled once at its actual cost, on any
//! node sharing the store.
//!
//! Reserving checks the estimate against the named limit
//! ([`floodgate::limiter::KeyedLimit::reserve`]) and hands out a signed token
//! ([`crate::reservation_token`]) when it was admitted. Settling opens the token and applies
//! the difference to the limit ([`floodgate::limiter::KeyedLimit::settle`]): a charge, counted
//! even past the limit, or a refund. "Once" is remembered in the store, by the reservation's
//! id: a settle first charges a marker of its own (`floodgate.settled:<id>`, a GCRA of one per
//! the reservation's remaining life), which only the first settle finds empty; the charge goes
//! to Redis itself in cached mode too, so two nodes never both settle one reservation. When the
//! settlement then fails, the marker is given back, so that the caller may retry.
//!
//! A reservation through the pipeline holds its estimate in several places, and a store may
//! fail after some were settled: it has a marker per hold
//! (`floodgate.settled:<id>}/<position>`, all hash-tagged by the id, so that one atomic call
//! charges them together), and when a settlement fails part way only the markers of the holds
//! left are given back. A retry settles those, and only those.
//!
//! A reservation not settled within `reservation_ttl` can no longer be: it stands at its
//! estimate.

use std::time::Duration;

use floodgate::algorithm::gcra::Gcra;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::limiter::Reservation;
use floodgate::pipeline::PipelineReservation;
use floodgate::store::{KeyedOp, Link, Linked, Namespace, ScopedKey, Store};
use floodgate::{Clock, Decision, LeaseId, Nanos, Op, StoreError};

use super::evaluate::{EvaluateAnswer, EvaluateError, EvaluateRequest};
use super::Server;
use crate::lease_token::TokenError;
use crate::reservation_token::{Held, HeldStages, StageHold};

/// The namespace of the markers that remember settled reservations: Floodgate's own.
const SETTLED: &str = "floodgate.settled";

/// What `POST /v1/reserve` answers.
#[derive(Debug)]
pub enum Reserved {
    /// No named limit of that name.
    UnknownLimit,
    /// The limit's algorithm cannot settle (it takes no charges or refunds): nothing taken.
    CannotSettle {
        /// The algorithm's name.
        algorithm: &'static str,
    },
    /// The key holds the token's separator byte: nothing taken.
    KeyNotCarried,
    /// The limit's decision, and the reservation's token when it was admitted.
    Decided {
        /// The check of the estimate.
        decision: Decision,
        /// The token to settle with; `None` when refused.
        token: Option<String>,
        /// How long the reservation can be settled.
        ttl: Duration,
    },
}

/// What `POST /v1/reserve` answers for a reservation through the pipeline.
#[derive(Debug)]
pub enum PipelineReserved {
    /// The request's fields were refused, as `/v1/evaluate` refuses them.
    Invalid(EvaluateError),
    /// The user, the plan or an attribute holds a byte a reservation cannot carry (0x1D to
    /// 0x1F): nothing was taken.
    NotCarried(String),
    /// The pipeline's answer, and the reservation's token when it was admitted.
    Decided {
        /// What `/v1/evaluate` would answer.
        answer: EvaluateAnswer,
        /// The token to settle with; `None` when refused.
        token: Option<String>,
        /// How long the reservation can be settled.
        ttl: Duration,
    },
}

/// What `POST /v1/settle` answers.
#[derive(Debug)]
pub enum Settled {
    /// Not a reservation token this service (or a node signing alike) issued.
    BadToken(TokenError),
    /// Its `reservation_ttl` has passed: it stands at its estimate.
    Expired,
    /// The named limit is gone (a reload removed it): nothing settled.
    UnknownLimit(String),
    /// Settled before: nothing done this time.
    AlreadySettled,
    /// A pipeline reservation settled now: what was applied to each stage's hold, and each
    /// key's state afterwards, in pipeline order. Holds whose stage a reload removed are left
    /// out.
    DoneStages {
        /// The charge or refund of the difference (the same on every hold).
        op: Option<Op>,
        /// Each hold's stage and its key's state.
        decisions: Vec<(floodgate::store::Namespace, Decision)>,
    },
    /// Settled now: what was applied, and the key's state afterwards.
    Done {
        /// The charge or refund of the difference.
        op: Op,
        /// The key's state after it.
        decision: Decision,
    },
}

impl Server {
    /// Holds `estimate` units of `key` in the named limit `limit` (see the module
    /// documentation). `Err` when the store failed: nothing is held.
    pub async fn reserve(
        &self,
        limit: &str,
        key: &str,
        estimate: u64,
    ) -> Result<Reserved, StoreError> {
        let served = self.decisions.served.load();
        let Some(named) = served.limits.get(limit) else {
            return Ok(Reserved::UnknownLimit);
        };
        if !Held::fits(key) {
            return Ok(Reserved::KeyNotCarried);
        }
        let (decision, reservation) = match named.reserve(key, estimate).await {
            Err(StoreError::Unsupported { algorithm, .. }) => {
                return Ok(Reserved::CannotSettle { algorithm })
            }
            other => other?,
        };
        let ttl = served.reservation_ttl;
        let token = match reservation {
            Some(reservation) => {
                self.lease_secret_before_issuing().await;
                let held = Held {
                    limit: limit.to_string(),
                    key: reservation.key().to_string(),
                    estimate: reservation.estimate(),
                    id: LeaseId::random(),
                    expires: Nanos(
                        self.decisions
                            .clock
                            .now()
                            .0
                            .saturating_add(ttl.as_nanos() as u64),
                    ),
                };
                Some(held.seal(self.decisions.leases.tokens()))
            }
            None => None,
        };
        Ok(Reserved::Decided {
            decision,
            token,
            ttl,
        })
    }

    /// Holds `estimate` on one request rate stage of the pipeline, on `key` (as the stage
    /// writes it, without its namespace) under `plan` (the stage's default plan if absent or
    /// unknown). `UnknownLimit` when no request rate stage has that name. The token settles
    /// it with [`Server::settle`], as a reservation through the pipeline.
    pub async fn reserve_on_stage(
        &self,
        stage: &str,
        key: &str,
        plan: Option<&str>,
        estimate: u64,
    ) -> Result<Reserved, StoreError> {
        if !Held::fits(key) || plan.is_some_and(|p| !Held::fits(p)) {
            return Ok(Reserved::KeyNotCarried);
        }
        let served = self.decisions.served.load();
        let reserving = served
            .pipeline
            .reserve_on_stage(stage, key, plan.unwrap_or(""), estimate);
        let (decision, reservation) = match reserving.await {
            None => return Ok(Reserved::UnknownLimit),
            Some(Err(StoreError::Unsupported { algorithm, .. })) => {
                return Ok(Reserved::CannotSettle { algorithm })
            }
            Some(decided) => decided?,
        };
        let ttl = served.reservation_ttl;
        let token = match reservation {
            Some(reservation) => {
                self.lease_secret_before_issuing().await;
                self.stages_token(&reservation, ttl)
            }
            None => None,
        };
        Ok(Reserved::Decided {
            decision,
            token,
            ttl,
        })
    }

    /// The token of a reservation through the pipeline, or `None` when a key or plan cannot
    /// travel in one.
    fn stages_token(&self, reservation: &PipelineReservation, ttl: Duration) -> Option<String> {
        let held = HeldStages {
            id: LeaseId::random(),
            expires: Nanos(
                self.decisions
                    .clock
                    .now()
                    .0
                    .saturating_add(ttl.as_nanos() as u64),
            ),
            holds: reservation
                .holds()
                .iter()
                .map(|h| StageHold {
                    stage: h.stage().as_str().to_string(),
                    level: h.level(),
                    plan: h.plan().to_string(),
                    key: h.key().to_string(),
                    estimate: h.estimate(),
                })
                .collect(),
        };
        held.seal(self.decisions.leases.tokens())
    }

    /// Holds `estimate` through the pipeline for the request `request` (as `/v1/evaluate`
    /// reads it): every usage budget that applies takes it, or none does (all-or-nothing
    /// stages). The token settles it with [`Server::settle`].
    pub async fn reserve_through_pipeline(
        &self,
        request: &EvaluateRequest,
        estimate: u64,
    ) -> PipelineReserved {
        let carried = [("user", request.user.as_str())]
            .into_iter()
            .chain(request.plan.as_deref().map(|p| ("plan", p)))
            .chain(request.endpoint.as_deref().map(|e| ("endpoint", e)))
            .chain(request.attributes.iter().filter_map(|(name, value)| {
                value
                    .as_str()
                    .map(|v| ("attributes", v))
                    .filter(|_| !name.is_empty())
            }));
        for (field, value) in carried {
            if !Held::fits(value) {
                return PipelineReserved::NotCarried(field.to_string());
            }
        }
        let (answer, reservation) = match self.run_pipeline(request, Some(estimate)).await {
            Ok(decided) => decided,
            Err(error) => return PipelineReserved::Invalid(error),
        };
        let ttl = self.decisions.served.load().reservation_ttl;
        let token = match reservation {
            Some(reservation) => {
                self.lease_secret_before_issuing().await;
                match self.stages_token(&reservation, ttl) {
                    Some(token) => Some(token),
                    None => {
                        // A key rendered from something else than the fields checked above:
                        // give the estimate back rather than hold it with no way to settle.
                        let _ = self
                            .decisions
                            .served
                            .load()
                            .pipeline
                            .settle(reservation, 0)
                            .await;
                        None
                    }
                }
            }
            None => None,
        };
        PipelineReserved::Decided { answer, token, ttl }
    }

    /// Settles the reservation `token` at `actual` units (see the module documentation).
    /// `Err` when the store failed: nothing is settled, and the call may be repeated.
    pub async fn settle(&self, token: &str, actual: u64) -> Result<Settled, StoreError> {
        if token.starts_with("p1.") {
            return self.settle_stages(token, actual).await;
        }
        let held = match self.opened(|tokens| Held::open(tokens, token)).await {
            Ok(held) => held,
            Err(error) => return Ok(Settled::BadToken(error)),
        };
        let served = self.decisions.served.load();
        let Some(named) = served.limits.get(&held.limit) else {
            return Ok(Settled::UnknownLimit(held.limit));
        };
        let (marker, key) = match self.mark_settled(held.id, held.expires).await? {
            Ok(marker) => marker,
            Err(answer) => return Ok(answer),
        };
        let op = floodgate::limiter::reservation::settlement(held.estimate, actual);
        match named
            .settle(Reservation::new(held.key, held.estimate), actual)
            .await
        {
            Ok(decision) => Ok(Settled::Done { op, decision }),
            Err(error) => {
                // Not settled: forget the marker, so that a retry settles.
                if let Err(undo) = self
                    .decisions
                    .store
                    .apply(&marker, &key, Op::Refund { cost: 1 })
                    .await
                {
                    tracing::warn!(%undo, "a failed settlement's marker could not be given back: retrying it will answer already settled");
                }
                Err(error)
            }
        }
    }
}

impl Server {
    /// Marks reservation `id` settled, unless it has expired or was settled before (the
    /// answer then, in `Err`); the marker and its key, to give back if the settlement fails.
    async fn mark_settled(
        &self,
        id: LeaseId,
        expires: Nanos,
    ) -> Result<Result<(AnyAlgorithm, ScopedKey), Settled>, StoreError> {
        let now = self.decisions.clock.now();
        if now > expires {
            return Ok(Err(Settled::Expired));
        }
        let (marker, key) = settled_marker(id, expires, now)?;
        let first = self
            .decisions
            .store
            .apply(&marker, &key, Op::Charge { cost: 1 })
            .await?;
        Ok(if first.allowed {
            Ok((marker, key))
        } else {
            Err(Settled::AlreadySettled)
        })
    }

    /// [`Server::settle`] for a reservation through the pipeline.
    async fn settle_stages(&self, token: &str, actual: u64) -> Result<Settled, StoreError> {
        let held = match self.opened(|tokens| HeldStages::open(tokens, token)).await {
            Ok(held) => held,
            Err(error) => return Ok(Settled::BadToken(error)),
        };
        let served = self.decisions.served.load();
        let fresh = match self
            .mark_holds_settled(held.id, held.expires, held.holds.len())
            .await?
        {
            Ok(fresh) => fresh,
            Err(answer) => return Ok(answer),
        };
        let op = held
            .holds
            .first()
            .map(|h| floodgate::limiter::reservation::settlement(h.estimate, actual));
        // The holds not settled before, rebuilt, and where each stood in the token.
        let mut positions = Vec::new();
        let holds = fresh
            .into_iter()
            .filter_map(|at| {
                let h = held.holds.get(at)?;
                let rebuilt = served
                    .pipeline
                    .rebuild_hold(&h.stage, h.level, &h.plan, &h.key, h.estimate);
                match rebuilt {
                    Some(_) => positions.push(at),
                    None => tracing::info!(stage = %h.stage, "a reservation's stage is not configured any more: that hold is not settled"),
                }
                rebuilt
            })
            .collect();
        let reservation = floodgate::pipeline::PipelineReservation::from_holds(holds);
        match served.pipeline.settle(reservation, actual).await {
            Ok(decisions) => Ok(Settled::DoneStages { op, decisions }),
            Err(failed) => {
                // Give back the markers of the holds left, so that a retry settles them (and
                // only them).
                let left: Vec<usize> = failed.unsettled_at.iter().map(|&j| positions[j]).collect();
                tracing::warn!(error = %failed.error, settled = failed.settled.len(), left = left.len(), "a pipeline reservation was settled in part: a store failed; a retry settles the rest");
                let (marker, keys) =
                    settled_markers(held.id, held.expires, self.decisions.clock.now(), &left)?;
                let refunds: Vec<KeyedOp<'_, str, AnyAlgorithm>> = keys
                    .iter()
                    .map(|key| KeyedOp {
                        algorithm: &marker,
                        key: &**key,
                        op: Op::Refund { cost: 1 },
                    })
                    .collect();
                if let Err(undo) = self.decisions.store.apply_many(&refunds).await {
                    tracing::warn!(%undo, "the markers of a reservation's unsettled holds could not be given back: retrying it will answer already settled");
                }
                Err(failed.error)
            }
        }
    }

    /// Marks the `holds` holds of reservation `id` settled, in one atomic call: the positions
    /// of those not settled before; in `Err` the answer when none is left (expired, or every
    /// hold settled before). A reservation with no hold has one marker, for "once".
    async fn mark_holds_settled(
        &self,
        id: LeaseId,
        expires: Nanos,
        holds: usize,
    ) -> Result<Result<Vec<usize>, Settled>, StoreError> {
        let now = self.decisions.clock.now();
        if now > expires {
            return Ok(Err(Settled::Expired));
        }
        let positions: Vec<usize> = (0..holds.max(1)).collect();
        let (marker, keys) = settled_markers(id, expires, now, &positions)?;
        let links: Vec<Link<'_, str, AnyAlgorithm>> = keys
            .iter()
            .map(|key| Link {
                request: KeyedOp {
                    algorithm: &marker,
                    key: &**key,
                    op: Op::Charge { cost: 1 },
                },
                refuses: false,
                stops: false,
                all_or_nothing: false,
                fails_closed: false,
                joins_previous: false,
            })
            .collect();
        // Atomic: one call of the store that chains atomically (in cached mode, its Redis,
        // since the cached store's own chains go one link at a time).
        let outcomes = self
            .decisions
            .store
            .inner()
            .apply_chain_atomically(&links)
            .await?;
        let mut fresh = Vec::new();
        for (at, outcome) in outcomes.into_iter().enumerate() {
            match outcome {
                Linked::Decided(d) if d.allowed => fresh.push(at),
                Linked::Decided(_) => {}
                Linked::Failed(e) => return Err(e),
                _ => return Err(StoreError::Protocol("a marker chain ended early".into())),
            }
        }
        Ok(if fresh.is_empty() {
            Err(Settled::AlreadySettled)
        } else {
            Ok(fresh)
        })
    }
}

/// The markers of the settlement of the holds at `positions` of reservation `id` (see the
/// module documentation) and their keys: [`marker_until`]'s algorithm, on keys that share
/// the id's hash tag (a key's tag ends at its first `}`).
fn settled_markers(
    id: LeaseId,
    expires: Nanos,
    now: Nanos,
    positions: &[usize],
) -> Result<(AnyAlgorithm, Vec<ScopedKey>), StoreError> {
    let (marker, namespace) = marker_until(expires, now)?;
    let keys = positions
        .iter()
        .map(|at| namespace.key(&format!("{id}}}/{at}")))
        .collect();
    Ok((marker, keys))
}

/// The marker of the settlement of reservation `id`, which can be settled until `expires`, and
/// its key: a GCRA of one per the reservation's remaining life (and a second more), so that a
/// second charge before the reservation expires is refused.
fn settled_marker(
    id: LeaseId,
    expires: Nanos,
    now: Nanos,
) -> Result<(AnyAlgorithm, ScopedKey), StoreError> {
    let (marker, namespace) = marker_until(expires, now)?;
    Ok((marker, namespace.key(&id.to_string())))
}

/// The markers' algorithm for a reservation that can be settled until `expires` (see
/// [`settled_marker`]), and their namespace.
fn marker_until(expires: Nanos, now: Nanos) -> Result<(AnyAlgorithm, Namespace), StoreError> {
    let life = Duration::from_nanos(expires.0.saturating_sub(now.0)) + Duration::from_secs(1);
    let marker = Gcra::new(0, 1, life)
        .map_err(|e| StoreError::Protocol(format!("a settlement marker: {e}")))?;
    let namespace = Namespace::new(SETTLED)
        .map_err(|e| StoreError::Protocol(format!("a settlement marker: {e}")))?;
    Ok((marker.into(), namespace))
}
