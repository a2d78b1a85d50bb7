//! Leases: `POST /v1/release` gives back what `/v1/evaluate` took.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::call::{Call, CallBody};
use super::error::ApiError;
use crate::metrics::{Endpoint, Outcome};
use crate::service::Server;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReleaseRequest {
    lease: String,
    /// How long the request took, in milliseconds: the sample adaptive concurrency stages
    /// learn from (absent: the time since `/v1/evaluate`).
    #[serde(default)]
    latency_ms: Option<f64>,
}

impl CallBody for ReleaseRequest {
    const ENDPOINT: Endpoint = Endpoint::Release;
    const TAKES_STATUS_MODE: bool = false;
}

/// The longest latency `/v1/release` accepts: a day, in milliseconds.
const MAX_LATENCY_MS: f64 = 86_400_000.0;

pub(super) async fn release(
    State(server): State<Arc<Server>>,
    Call { request, .. }: Call<ReleaseRequest>,
) -> Response {
    let latency = match request.latency_ms {
        None => None,
        Some(ms) if (0.0..=MAX_LATENCY_MS).contains(&ms) => {
            Some(std::time::Duration::from_secs_f64(ms / 1000.0))
        }
        Some(_) => {
            server.metrics().call(Endpoint::Release, Outcome::Invalid);
            let message = "field `latency_ms`: must be a number of milliseconds, 0 to 86400000";
            return ApiError::bad_request(message).into_response();
        }
    };
    match server.release_after(&request.lease, latency).await {
        Ok(released) => {
            server.metrics().call(Endpoint::Release, Outcome::Allowed);
            Json(json!({"released": released})).into_response()
        }
        Err(e) => {
            server.metrics().call(Endpoint::Release, Outcome::Invalid);
            ApiError::from(e).into_response()
        }
    }
}
