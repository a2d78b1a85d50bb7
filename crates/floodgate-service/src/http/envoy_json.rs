//! envoyproxy/ratelimit's `POST /json`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;
use tracing::Instrument;

use super::decisions::CallSpan;
use super::error::{parse_counted, ApiError};
use crate::metrics::{Endpoint, Outcome};
use crate::service::Server;

pub(super) async fn envoy_json(
    State(server): State<Arc<Server>>,
    CallSpan(span): CallSpan<false>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let answering = envoy_json_in(server, body);
    match span {
        Some(span) => answering.instrument(span).await,
        None => answering.await,
    }
}

async fn envoy_json_in(server: Arc<Server>, body: Result<Bytes, BytesRejection>) -> Response {
    let value: Value = match parse_counted(&server, Endpoint::Json, body) {
        Ok(r) => r,
        Err(response) => return response,
    };
    match server.envoy_json(&value).await {
        Ok(Err(undecided @ crate::rls::Undecided::Unavailable(_))) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            undecided.to_string(),
        )
        .into_response(),
        // Counted as invalid by `Server::should_rate_limit`, which refused it.
        Ok(Err(crate::rls::Undecided::Invalid(why))) => {
            ApiError::new(StatusCode::BAD_REQUEST, "refund_not_supported", why).into_response()
        }
        Ok(Ok((over_limit, answer))) => {
            let status = if over_limit {
                StatusCode::TOO_MANY_REQUESTS
            } else {
                StatusCode::OK
            };
            (status, Json(answer)).into_response()
        }
        Err(e) => {
            server.metrics().call(Endpoint::Json, Outcome::Invalid);
            ApiError::from(e).into_response()
        }
    }
}
