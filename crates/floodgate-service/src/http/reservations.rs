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
//! (`"failed_open": true`, no reservation); `/v1/settle` answers 503, nothing settled. A
//! second settle of one reservation answers `{"settled": false, "message": …}` and changes
//! nothing. After settling, `allowed` is false when a charge put the key past its limit.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use floodgate::Op;
use serde::Deserialize;
use serde_json::json;

use super::{
    decision_fields, decision_response, parse_counted, status_mode, unknown_limit, ApiError,
};
use crate::lease_token::TokenError;
use crate::metrics::{Endpoint, Outcome};
use crate::service::reservations::{Reserved, Settled};
use crate::service::Server;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReserveRequest {
    limiter: String,
    key: String,
    estimate: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SettleRequest {
    reservation: String,
    actual: u64,
}

pub(super) async fn reserve(
    State(server): State<Arc<Server>>,
    uri: axum::http::Uri,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let mode = match status_mode(&uri) {
        Ok(mode) => mode,
        Err(e) => return e.into_response(),
    };
    let request: ReserveRequest = match parse_counted(&server, Endpoint::Reserve, body) {
        Ok(r) => r,
        Err(response) => return response,
    };
    let invalid = |error: ApiError| {
        server.metrics().call(Endpoint::Reserve, Outcome::Invalid);
        error.into_response()
    };
    if request.key.is_empty() {
        let message = "field `key`: must not be empty (it names what is counted)";
        return invalid(ApiError::new(StatusCode::BAD_REQUEST, "empty_key", message));
    }
    if let Err(too_long) = server.bounded("key", &request.key) {
        return invalid(ApiError::invalid("too_long", too_long));
    }
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
        }) => {
            let outcome = if decision.allowed {
                Outcome::Allowed
            } else {
                Outcome::Refused
            };
            server.metrics().call(Endpoint::Reserve, outcome);
            let mut answer = decision_fields(&decision);
            answer["reservation"] = token.into();
            answer["expires_after"] = ttl.as_secs_f64().into();
            decision_response(&decision, answer, mode)
        }
        Err(e) => {
            // Fail open, as /v1/check: the request goes ahead, holding nothing to settle.
            server
                .metrics()
                .call(Endpoint::Reserve, Outcome::FailedOpen);
            tracing::debug!(error = %e, "store failed; /v1/reserve fails open");
            Json(
                json!({"allowed": true, "limit": 0, "remaining": 0, "reset_after": 0.0,
                "retry_after": null, "reservation": null, "failed_open": true}),
            )
            .into_response()
        }
    }
}

pub(super) async fn settle(
    State(server): State<Arc<Server>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let request: SettleRequest = match parse_counted(&server, Endpoint::Settle, body) {
        Ok(r) => r,
        Err(response) => return response,
    };
    let invalid = |error: ApiError| {
        server.metrics().call(Endpoint::Settle, Outcome::Invalid);
        error.into_response()
    };
    match server.settle(&request.reservation, request.actual).await {
        Ok(Settled::BadToken(error)) => {
            let (kind, message) = match error {
                TokenError::UnknownVersion(version) => (
                    "unsupported_reservation_version",
                    format!("reservations of version `{version}` are not supported (this service issues r1)"),
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
            invalid(ApiError::new(StatusCode::BAD_REQUEST, kind, message))
        }
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
        Ok(Settled::Done { op, decision }) => {
            server.metrics().call(Endpoint::Settle, Outcome::Allowed);
            let (charged, refunded) = match op {
                Op::Charge { cost } => (cost, 0),
                Op::Refund { cost } => (0, cost),
                _ => (0, 0),
            };
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
                "the store failed: nothing was settled; the call may be repeated",
            )
            .into_response()
        }
    }
}
