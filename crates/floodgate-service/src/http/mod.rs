//! The HTTP JSON API: decisions, leases, envoyproxy/ratelimit's `/json`, health, metrics, the
//! admin endpoints, and a page for browsers at `/` ([`home`]). Handlers are thin: they parse,
//! call the [`Server`], and shape the answer. This file routes (and sheds, and answers what
//! is not served); each family of endpoints has a file of its own: `decisions.rs`
//! (`/v1/check`, `/v1/evaluate`), `reservations.rs` (`/v1/reserve`, `/v1/settle`),
//! `leases.rs` (`/v1/release`), `envoy_json.rs` (`/json`), `admin.rs` (`/admin/*`),
//! `observation.rs` (`/metrics`, health, the dashboard) and `error.rs` ([`ApiError`], and the
//! parsing every body goes through).
//!
//! Every error is `{"error": {"type", "message"}}` with a 4xx status; `message` is for people,
//! `type` a stable name for programs, one per kind of error:
//!
//! | status | `type` | when |
//! |---|---|---|
//! | 400 | `invalid_request` | the body is not JSON, or lacks a field or has one of a wrong type; `/v1/dashboard`: a query other than `since=N` |
//! | 413 | `body_too_large` | the body is over `connections.max_body_bytes` (default [`MAX_BODY`]); the message names the limit and that setting |
//! | 503 | `overloaded` | a decision call while `connections.max_in_flight` are being answered; `Retry-After: 1` |
//! | 503 | `store_unavailable` | `/json` when the store failed and `rls.on_store_error` is `unavailable` |
//! | 400 | `refund_not_supported` | `/json`: `isNegativeHits` on a descriptor whose limit's algorithm cannot give back (the sliding log) |
//! | 404 | `not_found` | no such endpoint (under envoyproxy/ratelimit's settings with no Floodgate configuration, every endpoint but upstream's `/json` and `/healthcheck`, and `/metrics`, `/livez`, `/readyz` and the admin API) |
//! | 405 | `method_not_allowed` | a known endpoint asked with another method (`GET /v1/check`); the body names the method it takes |
//! | 404 | `unknown_limiter` | `/v1/check`: no limit by that name (the message lists the configured ones) |
//! | 400 | `unknown_priority`, `empty_user`, `too_long`, `unknown_plan`, `bad_attribute`, `missing_field` | `/v1/evaluate` ([`EvaluateError`](crate::service::EvaluateError)) |
//! | 400 | `empty_key`, `too_long` | `/v1/check`: an empty `key`, or one longer than `connections.max_key_bytes` |
//! | 400 | `malformed_lease_token`, `unsupported_lease_token_version`, `altered_lease_token` | `/v1/release` ([`ReleaseTokenError`](crate::service::ReleaseTokenError)): not a token this service issued |
//! | 404 | `unknown_lease_limiter` | `/v1/release`: a genuine token whose limiter a reload removed |
//! | 400 | `empty_key`, `too_long`, `key_not_carried` | `/v1/reserve`: an empty `key`, one longer than `connections.max_key_bytes`, or one holding a byte 0x1D to 0x1F (through the pipeline: a user, plan, endpoint or attribute holding one) |
//! | 400 | as `/v1/evaluate` | `/v1/reserve` through the pipeline (a body naming a `user`): [`EvaluateError`](crate::service::EvaluateError) |
//! | 404 | `unknown_stage` | `/v1/reserve` on a stage (a body naming a `stage`): no request rate stage by that name |
//! | 400 | `cannot_settle` | `/v1/reserve`: the limit's algorithm takes no charges and refunds (the sliding log and window, the smooth limiters, the leaky queue); nothing is taken |
//! | 404 | `unknown_limiter` | `/v1/reserve`, and `/v1/settle` with a genuine token whose limit a reload removed |
//! | 400 | `malformed_reservation`, `unsupported_reservation_version`, `altered_reservation` | `/v1/settle`: not a reservation this service issued |
//! | 409 | `reservation_expired` | `/v1/settle` after `reservation_ttl`: the reservation stands at its estimate |
//! | 503 | `store_unavailable` | `/v1/settle` when the store failed: repeating the call settles what was not (each hold once) |
//! | 400 | `wrong_type`, `not_an_integer`, `too_large`, `unknown_field`, `missing_field`, `unknown_unit`, `empty_field` | `/json` ([`RlsJsonError`](crate::rls::json::RlsJsonError)) |
//! | 403 | `admin_disabled` | admin API: no admin token is configured |
//! | 401 | `unauthorized` | admin API: the bearer token is missing or wrong; `/v1/dashboard` on a listener that is not on a loopback address, without the admin token |
//! | 400 | `unknown_limiter`, `unknown_mode`, `unknown_plan`, `empty_user` | admin API ([`AdminError`](crate::service::AdminError)) |
//! | 422 | `config_unreadable`, `invalid_config_yaml`, `invalid_config_value` | `/admin/reload` ([`ConfigFileError`](crate::config::ConfigFileError)); the running config stays |
//!
//! Bad input never changes state.

mod admin;
mod call;
pub mod debug;
mod decisions;
mod envoy_json;
mod error;
pub mod home;
mod leases;
mod observation;
mod reservations;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio_stream::Stream;

use crate::connections::Admission;
use crate::connections::{serve_each, KEEP_ALIVE_INTERVAL, KEEP_ALIVE_TIMEOUT};
use crate::service::Server;

use self::decisions::{check, decision_fields, decision_response, evaluate, unknown_limit};
use self::envoy_json::envoy_json;
pub use self::error::ApiError;
use self::error::{body_error, parse};
use self::leases::release;
use self::observation::{dashboard, healthcheck, home_page, livez, metrics, readyz};

/// The largest request body accepted by default, in bytes (`connections.max_body_bytes`).
pub const MAX_BODY: usize = 64 * 1024;

/// How long a client may take by default to send a request's head over HTTP/1.1, counted from
/// when the server starts waiting for it (`connections.header_read_timeout`); then the
/// connection is closed. Without it a client that sends a byte now and then (slowloris) would
/// hold a connection and its task for good.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves the HTTP API on every connection `connections` yields (HTTP/1.1, or HTTP/2 with
/// prior knowledge), each on its own task, until `shutdown` completes; then lets the requests
/// in progress finish and returns. See `crate::connections` for the connection handling.
pub async fn serve<S, T, F>(server: Arc<Server>, connections: S, shutdown: F)
where
    S: Stream<Item = std::io::Result<T>>,
    T: Into<crate::connections::Conn>,
    F: std::future::Future<Output = ()>,
{
    serve_router(
        "http",
        router(server.clone()),
        &server,
        connections,
        shutdown,
    )
    .await;
}

/// Serves `router` on `connections` as [`serve`] serves the API, under `server`'s connection
/// limits; `name` labels the connections in logs.
async fn serve_router<S, T, F>(
    name: &'static str,
    router: Router,
    server: &Server,
    connections: S,
    shutdown: F,
) where
    S: Stream<Item = std::io::Result<T>>,
    T: Into<crate::connections::Conn>,
    F: std::future::Future<Output = ()>,
{
    let limits = server.limits().clone();
    let admission = Admission {
        gate: Some(server.gate().clone()),
        first_bytes: limits.header_read_timeout.0,
        max_age: None,
        // TLS is the API's; the debug and Prometheus listeners stay plain, as upstream's.
        tls: if name == "http" {
            server.tls().http.clone()
        } else {
            None
        },
    };
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout.0)
        .max_buf_size(limits.max_header_bytes);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_streams)
        .keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT);
    serve_each(name, connections, shutdown, admission, move |stream| {
        let service = TowerToHyperService::new(router.clone());
        builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned()
    })
    .await;
}

/// The paths that take `GET` (and `HEAD`); every other path takes `POST`.
const GET_PATHS: [&str; 5] = ["/", "/metrics", "/v1/dashboard", "/livez", "/readyz"];

/// A known path asked with a method it does not take: 405 with a JSON body (and the `Allow`
/// header the router adds), like every other error.
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let path = uri.path();
    let takes = if GET_PATHS.contains(&path) {
        "GET"
    } else {
        "POST"
    };
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("`{method} {path}`: {path} takes {takes}"),
    )
    .into_response()
}

/// The API's routes over a shared [`Server`].
pub fn router(server: Arc<Server>) -> Router {
    let max_body = server.limits().max_body_bytes;
    // Under envoyproxy/ratelimit's settings with no Floodgate configuration, only what
    // upstream serves (and Floodgate's health and metrics): no pipeline, limits or dashboard.
    // Decided per request, since a reload may add or remove Floodgate's configuration; a
    // service not run as the drop-in always serves them, and its requests skip the check.
    let floodgate_only = |routes: Router<Arc<Server>>| match server.runs_as_drop_in() {
        true => routes.route_layer(axum::middleware::from_fn_with_state(
            server.clone(),
            not_under_upstream,
        )),
        false => routes,
    };
    // The decisions are shed beyond `connections.max_in_flight`; health, metrics, the
    // dashboard, the admin API and `/v1/release` always answer.
    let decisions = Router::new()
        .route("/json", post(envoy_json))
        .merge(floodgate_only(
            Router::new()
                .route("/v1/check", post(check))
                .route("/v1/evaluate", post(evaluate))
                .route("/v1/reserve", post(reservations::reserve)),
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            server.clone(),
            shed_overload,
        ));
    let routes = Router::new()
        .merge(decisions)
        .merge(floodgate_only(
            Router::new()
                .route("/", get(home_page))
                // Giving leases back relieves an overload: never shed.
                .route("/v1/release", post(release))
                // So does settling (it may give budget back): never shed either.
                .route("/v1/settle", post(reservations::settle))
                .route("/v1/dashboard", get(dashboard)),
        ))
        .fallback(not_found);
    routes
        .route("/metrics", get(metrics))
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        // Upstream answers its probe whatever the method.
        .route("/healthcheck", axum::routing::any(healthcheck))
        .route("/admin/mode", post(admin::admin_mode))
        .route(
            "/admin/plan",
            post(admin::admin_plan)
                .get(admin::admin_plans)
                .delete(admin::admin_plan_clear),
        )
        .route("/admin/reload", post(admin::admin_reload))
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(server)
}

/// Answers a decision call, or sheds it at once with 503 when the service is answering
/// `connections.max_in_flight` of them already. The body is read first (within
/// `connections.max_body_bytes`), so that a client that never sends one holds no place.
async fn shed_overload(
    State(server): State<Arc<Server>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use axum::extract::FromRequest;
    let (parts, body) = request.into_parts();
    let request = axum::extract::Request::from_parts(parts.clone(), body);
    let bytes = match Bytes::from_request(request, &()).await {
        Ok(bytes) => bytes,
        Err(rejection) => return body_error(&server, rejection).into_response(),
    };
    let request = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
    let _call = match server.enter_call() {
        Ok(call) => call,
        Err(e) => {
            let mut response =
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "overloaded", e.to_string())
                    .into_response();
            response
                .headers_mut()
                .insert("retry-after", axum::http::HeaderValue::from_static("1"));
            return response;
        }
    };
    next.run(request).await
}

async fn not_found(State(server): State<Arc<Server>>, uri: axum::http::Uri) -> ApiError {
    if server.serves_upstream_surface() {
        return not_served_under_upstream(uri).await;
    }
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

/// Lets a request through to one of Floodgate's own endpoints unless the listener serves only
/// upstream's surface now ([`Server::serves_upstream_surface`]).
async fn not_under_upstream(
    State(server): State<Arc<Server>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if server.serves_upstream_surface() {
        return not_served_under_upstream(request.uri().clone())
            .await
            .into_response();
    }
    next.run(request).await
}

/// Any endpoint but upstream's (and health, metrics and the admin API), under
/// envoyproxy/ratelimit's settings with no Floodgate configuration.
async fn not_served_under_upstream(uri: axum::http::Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!(
            "no such endpoint: {} (under envoyproxy/ratelimit's settings this listener serves \
             what upstream serves, /json and /healthcheck, and /metrics, /livez, /readyz and \
             the admin API; a Floodgate configuration file with a pipeline or limits, \
             --config or FLOODGATE_CONFIG, serves the rest)",
            uri.path()
        ),
    )
}
