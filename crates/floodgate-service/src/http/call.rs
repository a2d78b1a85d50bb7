//! What every counted call (`/v1/check`, `/v1/evaluate`, `/v1/reserve`, `/v1/settle`,
//! `/v1/release`) does before its handler runs, as one extractor, [`Call`]: read the
//! `?http_status=` query, parse the body, and check the key it counts under; a failure is the
//! call's answer, counted as `invalid` for its endpoint (but a bad query, refused before the
//! call is read).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::error::{parse_counted, ApiError};
use crate::metrics::{Endpoint, Outcome};
use crate::service::Server;

/// The body of a counted call.
pub(super) trait CallBody: DeserializeOwned {
    /// The endpoint whose `invalid` count a refused call adds to.
    const ENDPOINT: Endpoint;
    /// Whether the call takes `?http_status=` ([`StatusMode`]); one that does not ignores its
    /// query.
    const TAKES_STATUS_MODE: bool = true;

    /// The key the call counts under, checked by [`counted_key`]; none for a call that names
    /// no key.
    fn counted_key(&self) -> Option<&str> {
        None
    }
}

/// A counted call, read: how its status is chosen, and its body.
pub(super) struct Call<T> {
    pub mode: StatusMode,
    pub request: T,
}

impl<T: CallBody> FromRequest<Arc<Server>> for Call<T> {
    type Rejection = Response;

    async fn from_request(request: Request, server: &Arc<Server>) -> Result<Self, Response> {
        let mode = match T::TAKES_STATUS_MODE {
            true => status_mode(request.uri()).map_err(IntoResponse::into_response)?,
            false => StatusMode::Body,
        };
        let body = Bytes::from_request(request, server).await;
        let request: T = parse_counted(server, T::ENDPOINT, body)?;
        if let Some(key) = request.counted_key() {
            if let Err(refused) = counted_key(server, key) {
                server.metrics().call(T::ENDPOINT, Outcome::Invalid);
                return Err(refused.into_response());
            }
        }
        Ok(Call { mode, request })
    }
}

/// How a decision call's HTTP status is chosen, by its query: `http_status=body` (the
/// default: 200 whenever the call was answered, the decision in the body, so a caller can
/// tell a refusal from a failure of the call) or `http_status=decision` (the status carries
/// the decision: 200 allowed, else the refusal's 429 or 503, with `Retry-After` and the
/// `RateLimit` fields as header fields, for gateways that act on the status alone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StatusMode {
    Body,
    Decision,
}

fn status_mode(uri: &axum::http::Uri) -> Result<StatusMode, ApiError> {
    let mut mode = StatusMode::Body;
    for pair in uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        mode = match pair {
            "http_status=body" => StatusMode::Body,
            "http_status=decision" => StatusMode::Decision,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "query `{pair}`: the only query is http_status=body (the default: 200, the decision in the body) or http_status=decision (the status carries the decision)"
                )))
            }
        };
    }
    Ok(mode)
}

/// Why `key` cannot be counted under, if it cannot: empty (every request without one would
/// share one count), or longer than `connections.max_key_bytes`.
fn counted_key(server: &Server, key: &str) -> Result<(), ApiError> {
    if key.is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "empty_key",
            "field `key`: must not be empty (it names what is counted)",
        ));
    }
    server
        .bounded("key", key)
        .map_err(|too_long| ApiError::invalid("too_long", too_long))
}
