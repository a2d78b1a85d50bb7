//! What the service shows of itself: `/metrics`, `/livez`, `/readyz`, upstream's
//! `/healthcheck`, the dashboard's data (`/v1/dashboard`) and the page at `/`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::error::ApiError;
use super::{admin, home};
use crate::service::{AdminError, Server};

pub(super) async fn metrics(State(server): State<Arc<Server>>) -> Response {
    (
        [("content-type", "text/plain; version=0.0.4")],
        server.render_metrics().await,
    )
        .into_response()
}

/// `GET /v1/dashboard[?since=SEQ]`: the dashboard's data (`crate::dashboard`); the heaviest
/// keys in full only with the admin token as a bearer token.
pub(super) async fn dashboard(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Response {
    // Off loopback, the heaviest keys (user names, client addresses) are for the operator.
    if server.dashboard_needs_token() {
        if let Err(e) = server.authorize(admin::bearer(&headers)) {
            let why = match e {
                AdminError::Disabled => "set FLOODGATE_ADMIN_TOKEN to see it",
                _ => "send `Authorization: Bearer <admin token>`",
            };
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                format!(
                    "this listener is not on a loopback address, and the dashboard shows the                      heaviest keys (user names, client addresses): {why}"
                ),
            )
            .into_response();
        }
    }
    let mut since = None;
    for pair in uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("since", value)) => match value.parse::<u64>() {
                Ok(n) => since = Some(n),
                Err(_) => {
                    return ApiError::bad_request(format!(
                    "query `since`: expected a point's number (a whole number ≥ 0), got `{value}`"
                ))
                    .into_response()
                }
            },
            _ => {
                return ApiError::bad_request(format!(
                    "unknown query parameter `{pair}` (the dashboard takes `since`)"
                ))
                .into_response()
            }
        }
    }
    let answer = server.dashboard(since, admin::bearer(&headers)).await;
    ([("cache-control", "no-store")], Json(answer)).into_response()
}

pub(super) async fn home_page(State(server): State<Arc<Server>>) -> Response {
    (
        [("content-type", "text/html; charset=utf-8")],
        home::render(&server.overview()),
    )
        .into_response()
}

pub(super) async fn livez() -> &'static str {
    "ok"
}

/// 200 when the service takes traffic, 503 while it shuts down, while the store's circuit
/// breaker is open or while its last call failed; the JSON body says why, and shows the store
/// ([`Server::readiness`]).
pub(super) async fn readyz(State(server): State<Arc<Server>>) -> Response {
    let (ready, body) = server.readiness();
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// envoyproxy/ratelimit's probe: `OK` (200) when the service takes traffic, as `/readyz` says,
/// else 500 with an empty body, as upstream answers.
pub(super) async fn healthcheck(State(server): State<Arc<Server>>) -> Response {
    if server.readiness().0 {
        (StatusCode::OK, "OK").into_response()
    } else {
        StatusCode::INTERNAL_SERVER_ERROR.into_response()
    }
}
