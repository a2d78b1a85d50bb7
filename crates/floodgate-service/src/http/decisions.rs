//! The decisions: `POST /v1/check` (a named limit) and `POST /v1/evaluate` (the pipeline).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use tracing::Instrument;

use super::call::{Call, CallBody, StatusMode};
use super::error::ApiError;
use crate::metrics::{Endpoint, Outcome};
use crate::service::{EvaluateRequest, Server};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CheckRequest {
    limiter: String,
    key: String,
    #[serde(default = "one")]
    cost: u64,
}

pub(super) fn one() -> u64 {
    1
}

impl CallBody for CheckRequest {
    const ENDPOINT: Endpoint = Endpoint::Check;

    fn counted_key(&self) -> Option<&str> {
        Some(&self.key)
    }
}

impl CallBody for EvaluateRequest {
    const ENDPOINT: Endpoint = Endpoint::Evaluate;
}

pub(super) async fn check(
    State(server): State<Arc<Server>>,
    Call { mode, request }: Call<CheckRequest>,
) -> Response {
    match server
        .check(&request.limiter, &request.key, request.cost)
        .await
    {
        Ok(Some(d)) => {
            let outcome = if d.allowed {
                Outcome::Allowed
            } else {
                Outcome::Refused
            };
            server.metrics().call(Endpoint::Check, outcome);
            let mut answer = decision_fields(&d);
            // A refusal no wait can lift says why, rather than a bare `retry_after: null`.
            if !d.allowed && d.retry_after.is_none() && request.cost > d.limit {
                answer["message"] = format!(
                    "cost {} is above the limit {} of `{}`: such a request can never pass",
                    request.cost, d.limit, request.limiter
                )
                .into();
            }
            decision_response(&d, answer, mode)
        }
        Ok(None) => {
            server.metrics().call(Endpoint::Check, Outcome::Invalid);
            unknown_limit(&server, &request.limiter).into_response()
        }
        Err(e) => {
            // Fail open: the caller gets an answer that lets the request through.
            server.metrics().call(Endpoint::Check, Outcome::FailedOpen);
            // The store logs its failures, at a bounded rate (`store::health`).
            tracing::debug!(error = %e, "store failed; /v1/check fails open");
            Json(
                json!({"allowed": true, "limit": 0, "remaining": 0, "reset_after": 0.0,
                "retry_after": null, "failed_open": true}),
            )
            .into_response()
        }
    }
}

/// A decision's fields, as `/v1/check` and `/v1/reserve` answer them.
pub(super) fn decision_fields(d: &floodgate::Decision) -> serde_json::Value {
    json!({
        "allowed": d.allowed,
        "limit": d.limit,
        "remaining": d.remaining,
        "reset_after": d.reset_after.as_secs_f64(),
        "retry_after": d.retry_after.map(|r| r.as_secs_f64()),
    })
}

/// `answer` as the response to a decision `d`: 200, or with `?http_status=decision` a refusal's
/// 429 and `Retry-After` (whole seconds, rounded up, at least 1).
pub(super) fn decision_response(
    d: &floodgate::Decision,
    answer: serde_json::Value,
    mode: StatusMode,
) -> Response {
    if mode == StatusMode::Decision && !d.allowed {
        let mut response = (StatusCode::TOO_MANY_REQUESTS, Json(answer)).into_response();
        if let Some(retry) = d.retry_after {
            let seconds = retry.as_secs() + u64::from(retry.subsec_nanos() > 0);
            response
                .headers_mut()
                .insert("retry-after", seconds.max(1).into());
        }
        return response;
    }
    Json(answer).into_response()
}

/// The 404 of a call naming no configured limit, naming those there are.
pub(super) fn unknown_limit(server: &Server, name: &str) -> ApiError {
    let names: Vec<String> = server
        .overview()
        .limits
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let configured = if names.is_empty() {
        "none is configured: add named limits under `limits:` in the config".to_string()
    } else {
        format!("configured: {}", names.join(", "))
    };
    ApiError::new(
        StatusCode::NOT_FOUND,
        "unknown_limiter",
        format!("no limit named `{name}` ({configured})"),
    )
}

/// The span of a decision call (see [`crate::traces`]), made from the request's headers
/// without copying them; none when traces are off.
pub(super) struct CallSpan<const EVALUATE: bool>(pub(super) Option<tracing::Span>);

impl<S: Send + Sync, const EVALUATE: bool> axum::extract::FromRequestParts<S>
    for CallSpan<EVALUATE>
{
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(CallSpan(crate::traces::on().then(|| {
            if EVALUATE {
                crate::traces::evaluate_call(&parts.headers)
            } else {
                crate::traces::rls_call(false, &parts.headers)
            }
        })))
    }
}

pub(super) async fn evaluate(
    State(server): State<Arc<Server>>,
    CallSpan(span): CallSpan<true>,
    call: Call<EvaluateRequest>,
) -> Response {
    let evaluating = evaluate_in(server, call);
    match span {
        Some(span) => evaluating.instrument(span).await,
        None => evaluating.await,
    }
}

async fn evaluate_in(
    server: Arc<Server>,
    Call { mode, request }: Call<EvaluateRequest>,
) -> Response {
    let answered = server.evaluate(&request).await;
    if let Ok(answer) = &answered {
        crate::traces::record_evaluate(answer.status, answer.allowed, answer.limiter.as_deref());
    }
    match answered {
        Ok(answer) if mode == StatusMode::Decision => {
            let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
            let mut response = (status, Json(&answer)).into_response();
            for (name, value) in &answer.headers {
                if let Ok(value) = axum::http::HeaderValue::from_str(value) {
                    response.headers_mut().insert(*name, value);
                }
            }
            response
        }
        Ok(answer) => Json(answer).into_response(),
        Err(e) => {
            server.metrics().call(Endpoint::Evaluate, Outcome::Invalid);
            ApiError::from(e).into_response()
        }
    }
}
