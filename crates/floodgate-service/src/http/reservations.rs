//! `POST /v1/reserve` and `POST /v1/settle`: a budget held for a request whose cost is known
//! only when it ends ([`crate::service::reservations`]).
//!
//! ```text
//! POST /v1/reserve {"limiter": "tokens", "key": "alice", "estimate": 4096}
//!   → {"allowed": true, "limit": …, "remaining": …, "reset_after": s, "retry_after": null,
//!      "reservation": "r1.…", "expires_after": 3600.0}
//! POST /v1/settle {"reservation": "r1.…", "actual": 3211}
//!   → {"settled": true, "charged": 0, "refunded": 885, "allowed": true, "limit": …,
//!      "remaining": …, "reset_after": s, "retry_after": null}
//! ```
//!
//! A refused reservation holds nothing (`"reservation": null`; with `?http_status=decision`,
//! 429 and `Retry-After`). When the store fails, `/v1/reserve` fails open as `/v1/check` does
//! (`"failed_open": true`, no reservation); `/v1/settle` answers 503, and repeating it settles what was not (each hold once). A
//! second settle of one reservation answers `{"settled": false, "message": …}` and changes
//! nothing. After settling, `allowed` is false when a charge put the key past its limit.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use floodgate::{Decision, Op, StoreError};
use serde::de::{self, Deserializer};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::call::{Call, CallBody, StatusMode};
use super::{decision_fields, decision_response, unknown_limit, ApiError};
use crate::lease_token::TokenError;
use crate::metrics::{Endpoint, Outcome};
use crate::service::reservations::{PipelineReserved, Reserved, Settled};
use crate::service::EvaluateRequest;
use crate::service::Server;

/// A `/v1/reserve` body, in one of its three shapes, told apart by the keys it has: a named
/// limit's reservation names its `limiter`, one on a stage its `stage`, one through the
/// pipeline its `user` (anything else is read as the first, whose errors name its fields).
pub(super) enum ReserveRequest {
    Limit(LimitReserve),
    Stage(StageReserve),
    Pipeline(PipelineReserve),
}

impl<'de> Deserialize<'de> for ReserveRequest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ReserveRequest, D::Error> {
        let fields = Map::<String, Value>::deserialize(d)?;
        let shape = (
            fields.contains_key("limiter"),
            fields.contains_key("stage"),
            fields.contains_key("user"),
        );
        let body = Value::Object(fields);
        let read = match shape {
            (false, true, _) => StageReserve::deserialize(body).map(ReserveRequest::Stage),
            (false, false, true) => {
                PipelineReserve::deserialize(body).map(ReserveRequest::Pipeline)
            }
            _ => LimitReserve::deserialize(body).map(ReserveRequest::Limit),
        };
        read.map_err(de::Error::custom)
    }
}

impl CallBody for ReserveRequest {
    const ENDPOINT: Endpoint = Endpoint::Reserve;

    fn counted_key(&self) -> Option<&str> {
        match self {
            ReserveRequest::Limit(r) => Some(&r.key),
            ReserveRequest::Stage(r) => Some(&r.key),
            // Its keys are the stages' templates over the request's fields, checked there.
            ReserveRequest::Pipeline(_) => None,
        }
    }
}

/// A reservation on a named limit.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LimitReserve {
    limiter: String,
    key: String,
    estimate: u64,
}

/// A reservation on one request rate stage of the pipeline.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StageReserve {
    stage: String,
    key: String,
    #[serde(default)]
    plan: Option<String>,
    estimate: u64,
}

/// A reservation through the pipeline: `/v1/evaluate`'s fields (but `cost`) and the estimate.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PipelineReserve {
    user: String,
    #[serde(default)]
    plan: Option<String>,
    #[serde(default)]
    priority: Option<String>,
    #[serde(default)]
    endpoint: Option<String>,
    #[serde(default)]
    attributes: std::collections::BTreeMap<String, serde_json::Value>,
    estimate: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SettleRequest {
    reservation: String,
    actual: u64,
}

impl CallBody for SettleRequest {
    const ENDPOINT: Endpoint = Endpoint::Settle;
    const TAKES_STATUS_MODE: bool = false;
}

pub(super) async fn reserve(
    State(server): State<Arc<Server>>,
    Call { mode, request }: Call<ReserveRequest>,
) -> Response {
    match request {
        ReserveRequest::Limit(request) => reserve_on_limit(server, mode, request).await,
        ReserveRequest::Stage(request) => reserve_on_stage(server, mode, request).await,
        ReserveRequest::Pipeline(request) => reserve_through_pipeline(server, mode, request).await,
    }
}

/// `/v1/reserve` on a named limit.
async fn reserve_on_limit(
    server: Arc<Server>,
    mode: StatusMode,
    request: LimitReserve,
) -> Response {
    let invalid = |error: ApiError| {
        server.metrics().call(Endpoint::Reserve, Outcome::Invalid);
        error.into_response()
    };
    match server
        .reserve(&request.limiter, &request.key, request.estimate)
        .await
    {
        Ok(Reserved::UnknownLimit) => invalid(unknown_limit(&server, &request.limiter)),
        Ok(Reserved::KeyNotCarried) => invalid(ApiError::new(
            StatusCode::BAD_REQUEST,
            "key_not_carried",
            "field `key`: must not hold the byte 0x1F, which separates a reservation's fields",
        )),
        Ok(Reserved::CannotSettle { algorithm }) => invalid(ApiError::new(
            StatusCode::BAD_REQUEST,
            "cannot_settle",
            format!(
                "limit `{}` uses the {algorithm} algorithm, which takes no charges or refunds: \
                 a reservation on it could not be settled (use a fixed window, a token or \
                 leaky bucket, or GCRA); nothing was taken",
                request.limiter
            ),
        )),
        Ok(Reserved::Decided {
            decision,
            token,
            ttl,
        }) => reserved(&server, &decision, token, ttl, mode),
        Err(e) => failed_open(&server, &e),
    }
}

/// `/v1/reserve` on one stage: as on a named limit, the stage's key given as it is.
async fn reserve_on_stage(
    server: Arc<Server>,
    mode: StatusMode,
    request: StageReserve,
) -> Response {
    let invalid = |error: ApiError| {
        server.metrics().call(Endpoint::Reserve, Outcome::Invalid);
        error.into_response()
    };
    let decided = server
        .reserve_on_stage(
            &request.stage,
            &request.key,
            request.plan.as_deref(),
            request.estimate,
        )
        .await;
    match decided {
        Ok(Reserved::UnknownLimit) => invalid(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_stage",
            format!(
                "no request rate stage named `{}` in the pipeline",
                request.stage
            ),
        )),
        Ok(Reserved::KeyNotCarried) => invalid(ApiError::new(
            StatusCode::BAD_REQUEST,
            "key_not_carried",
            "fields `key` and `plan`: must not hold the bytes 0x1D to 0x1F, which separate a \
             reservation's fields",
        )),
        Ok(Reserved::CannotSettle { algorithm }) => invalid(ApiError::new(
            StatusCode::BAD_REQUEST,
            "cannot_settle",
            format!(
                "stage `{}` counts with the {algorithm} algorithm, which takes no charges or \
                 refunds: a reservation on it could not be settled; nothing was taken",
                request.stage
            ),
        )),
        Ok(Reserved::Decided {
            decision,
            token,
            ttl,
        }) => reserved(&server, &decision, token, ttl, mode),
        Err(e) => failed_open(&server, &e),
    }
}

/// `/v1/reserve` through the pipeline: `/v1/evaluate`'s answer, and the reservation.
async fn reserve_through_pipeline(
    server: Arc<Server>,
    mode: StatusMode,
    request: PipelineReserve,
) -> Response {
    let estimate = request.estimate;
    let request = EvaluateRequest {
        user: request.user,
        plan: request.plan,
        priority: request.priority,
        cost: None,
        endpoint: request.endpoint,
        attributes: request.attributes,
    };
    match server.reserve_through_pipeline(&request, estimate).await {
        PipelineReserved::Invalid(error) => {
            server.metrics().call(Endpoint::Reserve, Outcome::Invalid);
            ApiError::from(error).into_response()
        }
        PipelineReserved::NotCarried(field) => {
            server.metrics().call(Endpoint::Reserve, Outcome::Invalid);
            let message = format!(
                "field `{field}`: must not hold the bytes 0x1D to 0x1F, which separate a \
                 reservation's fields"
            );
            ApiError::new(StatusCode::BAD_REQUEST, "key_not_carried", message).into_response()
        }
        PipelineReserved::Decided { answer, token, ttl } => {
            let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
            let mut json = serde_json::to_value(&answer).unwrap_or_default();
            json["reservation"] = token.into();
            json["expires_after"] = ttl.as_secs_f64().into();
            if mode == StatusMode::Decision {
                let mut response = (status, Json(json)).into_response();
                for (name, value) in &answer.headers {
                    if let Ok(value) = axum::http::HeaderValue::from_str(value) {
                        response.headers_mut().insert(*name, value);
                    }
                }
                return response;
            }
            Json(json).into_response()
        }
    }
}

/// The answer to a reservation the store decided: its decision, and the token to settle with
/// (`null` when refused).
fn reserved(
    server: &Server,
    decision: &Decision,
    token: Option<String>,
    ttl: std::time::Duration,
    mode: StatusMode,
) -> Response {
    let outcome = if decision.allowed {
        Outcome::Allowed
    } else {
        Outcome::Refused
    };
    server.metrics().call(Endpoint::Reserve, outcome);
    let mut answer = decision_fields(decision);
    answer["reservation"] = token.into();
    answer["expires_after"] = ttl.as_secs_f64().into();
    decision_response(decision, answer, mode)
}

/// A reservation's answer when the store failed: the request goes ahead, holding nothing to
/// settle, as `/v1/check` fails open.
fn failed_open(server: &Server, error: &StoreError) -> Response {
    server
        .metrics()
        .call(Endpoint::Reserve, Outcome::FailedOpen);
    tracing::debug!(%error, "store failed; /v1/reserve fails open");
    Json(
        json!({"allowed": true, "limit": 0, "remaining": 0, "reset_after": 0.0,
        "retry_after": null, "reservation": null, "failed_open": true}),
    )
    .into_response()
}

pub(super) async fn settle(
    State(server): State<Arc<Server>>,
    Call { request, .. }: Call<SettleRequest>,
) -> Response {
    let invalid = |error: ApiError| {
        server.metrics().call(Endpoint::Settle, Outcome::Invalid);
        error.into_response()
    };
    match server.settle(&request.reservation, request.actual).await {
        Ok(Settled::BadToken(error)) => invalid(bad_reservation(error)),
        Ok(Settled::Expired) => invalid(ApiError::new(
            StatusCode::CONFLICT,
            "reservation_expired",
            "the reservation's reservation_ttl has passed: it stands at its estimate",
        )),
        Ok(Settled::UnknownLimit(limit)) => invalid(unknown_limit(&server, &limit)),
        Ok(Settled::AlreadySettled) => {
            server.metrics().call(Endpoint::Settle, Outcome::Refused);
            Json(json!({
                "settled": false,
                "message": "already settled: a reservation is settled once; nothing was done",
            }))
            .into_response()
        }
        Ok(Settled::DoneStages { op, decisions }) => {
            server.metrics().call(Endpoint::Settle, Outcome::Allowed);
            let (charged, refunded) = charged_and_refunded(op);
            let stages: Vec<_> = decisions
                .iter()
                .map(|(stage, d)| {
                    let mut fields = decision_fields(d);
                    fields["stage"] = stage.as_str().into();
                    fields
                })
                .collect();
            Json(json!({
                "settled": true,
                "charged": charged,
                "refunded": refunded,
                "allowed": decisions.iter().all(|(_, d)| d.allowed),
                "stages": stages,
            }))
            .into_response()
        }
        Ok(Settled::Done { op, decision }) => {
            server.metrics().call(Endpoint::Settle, Outcome::Allowed);
            let (charged, refunded) = charged_and_refunded(Some(op));
            let mut answer = decision_fields(&decision);
            answer["settled"] = true.into();
            answer["charged"] = charged.into();
            answer["refunded"] = refunded.into();
            Json(answer).into_response()
        }
        Err(e) => {
            server.metrics().call(Endpoint::Settle, Outcome::FailedOpen);
            tracing::debug!(error = %e, "store failed; /v1/settle settled nothing");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "the store failed: what it did not settle is settled by repeating the call (each hold once)",
            )
            .into_response()
        }
    }
}

/// The 400 of a settlement whose token is not a reservation this service issued.
fn bad_reservation(error: TokenError) -> ApiError {
    let (kind, message) = match error {
        TokenError::UnknownVersion(version) => (
            "unsupported_reservation_version",
            format!(
                "reservations of version `{version}` are not supported (this service issues r1)"
            ),
        ),
        TokenError::BadSignature => (
            "altered_reservation",
            "the reservation was altered, or issued by a node that signs with another \
             secret (nodes behind one load balancer sign alike when they share a Redis \
             store, or when every one has the same FLOODGATE_LEASE_SECRET)"
                .to_string(),
        ),
        _ => (
            "malformed_reservation",
            "not a reservation from /v1/reserve".to_string(),
        ),
    };
    ApiError::new(StatusCode::BAD_REQUEST, kind, message)
}

/// What a settlement's operation charged and refunded.
fn charged_and_refunded(op: Option<Op>) -> (u64, u64) {
    match op {
        Some(Op::Charge { cost }) => (cost, 0),
        Some(Op::Refund { cost }) => (0, cost),
        _ => (0, 0),
    }
}
