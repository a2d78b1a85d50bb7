//! The HTTP JSON API: decisions, leases, envoyproxy/ratelimit's `/json`, health, metrics, the
//! admin endpoints, and a page for browsers at `/` ([`home`]). Handlers are thin: they parse,
//! call the [`Server`], and shape the answer.
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
//! | 400 | `unknown_priority`, `empty_user`, `too_long`, `unknown_plan`, `bad_attribute`, `missing_field` | `/v1/evaluate` ([`EvaluateError`]) |
//! | 400 | `empty_key`, `too_long` | `/v1/check`: an empty `key`, or one longer than `connections.max_key_bytes` |
//! | 400 | `malformed_lease_token`, `unsupported_lease_token_version`, `altered_lease_token` | `/v1/release` ([`ReleaseTokenError`]): not a token this service issued |
//! | 404 | `unknown_lease_limiter` | `/v1/release`: a genuine token whose limiter a reload removed |
//! | 400 | `empty_key`, `too_long`, `key_not_carried` | `/v1/reserve`: an empty `key`, one longer than `connections.max_key_bytes`, or one holding a byte 0x1D to 0x1F (through the pipeline: a user, plan, endpoint or attribute holding one) |
//! | 400 | as `/v1/evaluate` | `/v1/reserve` through the pipeline (a body naming a `user`): [`EvaluateError`] |
//! | 404 | `unknown_stage` | `/v1/reserve` on a stage (a body naming a `stage`): no request rate stage by that name |
//! | 400 | `cannot_settle` | `/v1/reserve`: the limit's algorithm takes no charges and refunds (the sliding log and window, the smooth limiters, the leaky queue); nothing is taken |
//! | 404 | `unknown_limiter` | `/v1/reserve`, and `/v1/settle` with a genuine token whose limit a reload removed |
//! | 400 | `malformed_reservation`, `unsupported_reservation_version`, `altered_reservation` | `/v1/settle`: not a reservation this service issued |
//! | 409 | `reservation_expired` | `/v1/settle` after `reservation_ttl`: the reservation stands at its estimate |
//! | 503 | `store_unavailable` | `/v1/settle` when the store failed: nothing settled, the call may be repeated |
//! | 400 | `wrong_type`, `not_an_integer`, `too_large`, `unknown_field`, `missing_field`, `unknown_unit`, `empty_field` | `/json` ([`RlsJsonError`]) |
//! | 403 | `admin_disabled` | admin API: no admin token is configured |
//! | 401 | `unauthorized` | admin API: the bearer token is missing or wrong; `/v1/dashboard` on a listener that is not on a loopback address, without the admin token |
//! | 400 | `unknown_limiter`, `unknown_mode`, `unknown_plan`, `empty_user` | admin API ([`AdminError`]) |
//! | 422 | `config_unreadable`, `invalid_config_yaml`, `invalid_config_value` | `/admin/reload` ([`ConfigFileError`]); the running config stays |
//!
//! Bad input never changes state.

mod admin;
pub mod debug;
pub mod home;
mod reservations;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio_stream::Stream;
use tracing::Instrument;

use crate::config::ConfigFileError;
use crate::connections::Admission;
use crate::connections::{serve_each, KEEP_ALIVE_INTERVAL, KEEP_ALIVE_TIMEOUT};
use crate::lease_token::TokenError;
use crate::metrics::{Endpoint, Outcome};
use crate::rls::json::RlsJsonError;
use crate::service::{AdminError, EvaluateError, EvaluateRequest, ReleaseTokenError, Server};

/// The largest request body accepted by default, in bytes (`connections.max_body_bytes`).
pub const MAX_BODY: usize = 64 * 1024;

/// How long a client may take by default to send a request's head over HTTP/1.1, counted from
/// when the server starts waiting for it (`connections.header_read_timeout`); then the
/// connection is closed. Without it a client that sends a byte now and then (slowloris) would
/// hold a connection and its task for good.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves the HTTP API on every connection `connections` yields (HTTP/1.1, or HTTP/2 with
/// prior knowledge), each on its own task, until `shutdown` completes; then lets the requests
/// in progress finish and returns. See [`crate::connections`] for the connection handling.
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
    // Decided per request, since a reload may add or remove Floodgate's configuration.
    let floodgate_only = axum::middleware::from_fn_with_state(server.clone(), not_under_upstream);
    // The decisions are shed beyond `connections.max_in_flight`; health, metrics, the
    // dashboard, the admin API and `/v1/release` always answer.
    let decisions = Router::new()
        .route("/json", post(envoy_json))
        .merge(
            Router::new()
                .route("/v1/check", post(check))
                .route("/v1/evaluate", post(evaluate))
                .route("/v1/reserve", post(reservations::reserve))
                .route_layer(floodgate_only.clone()),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            server.clone(),
            shed_overload,
        ));
    let routes = Router::new()
        .merge(decisions)
        .merge(
            Router::new()
                .route("/", get(home_page))
                // Giving leases back relieves an overload: never shed.
                .route("/v1/release", post(release))
                // So does settling (it may give budget back): never shed either.
                .route("/v1/settle", post(reservations::settle))
                .route("/v1/dashboard", get(dashboard))
                .route_layer(floodgate_only),
        )
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

/// An API error: a status and `{"error": {"type", "message"}}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            message: message.into(),
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// A 400 of `kind` with the error's own message.
    fn invalid(kind: &'static str, error: impl std::fmt::Display) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, kind, error.to_string())
    }
}

impl From<EvaluateError> for ApiError {
    fn from(e: EvaluateError) -> Self {
        let kind = match e {
            EvaluateError::UnknownPriority { .. } => "unknown_priority",
            EvaluateError::EmptyUser => "empty_user",
            EvaluateError::TooLong(_) => "too_long",
            EvaluateError::UnknownPlan { .. } => "unknown_plan",
            EvaluateError::Attribute { .. } => "bad_attribute",
            EvaluateError::MissingField(_) => "missing_field",
        };
        ApiError::invalid(kind, e)
    }
}

impl From<ReleaseTokenError> for ApiError {
    fn from(e: ReleaseTokenError) -> Self {
        let kind = match &e {
            ReleaseTokenError::Token(TokenError::UnknownVersion(_)) => {
                "unsupported_lease_token_version"
            }
            ReleaseTokenError::Token(TokenError::BadSignature) => "altered_lease_token",
            ReleaseTokenError::Token(_) => "malformed_lease_token",
            ReleaseTokenError::UnknownLimiter(_) => {
                return ApiError::new(
                    StatusCode::NOT_FOUND,
                    "unknown_lease_limiter",
                    e.to_string(),
                )
            }
        };
        ApiError::invalid(kind, e)
    }
}

impl From<RlsJsonError> for ApiError {
    fn from(e: RlsJsonError) -> Self {
        let kind = match e {
            RlsJsonError::WrongType { .. } => "wrong_type",
            RlsJsonError::NotAnInteger { .. } => "not_an_integer",
            RlsJsonError::TooLarge { .. } => "too_large",
            RlsJsonError::UnknownField { .. } => "unknown_field",
            RlsJsonError::MissingUnit { .. } => "missing_field",
            RlsJsonError::UnknownUnit { .. } => "unknown_unit",
            RlsJsonError::Invalid(_) => "empty_field",
        };
        ApiError::invalid(kind, e)
    }
}

impl From<AdminError> for ApiError {
    fn from(e: AdminError) -> Self {
        let kind = match e {
            AdminError::Disabled => {
                return ApiError::new(
                    StatusCode::FORBIDDEN,
                    "admin_disabled",
                    "the admin API is disabled: set FLOODGATE_ADMIN_TOKEN to enable it",
                )
            }
            AdminError::Unauthorized => {
                return ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "missing or wrong `Authorization: Bearer <token>`",
                )
            }
            AdminError::UnknownLimiter { .. } => "unknown_limiter",
            AdminError::UnknownMode { .. } => "unknown_mode",
            AdminError::UnknownPlan { .. } => "unknown_plan",
            AdminError::EmptyUser => "empty_user",
        };
        ApiError::invalid(kind, e)
    }
}

impl From<ConfigFileError> for ApiError {
    fn from(e: ConfigFileError) -> Self {
        let kind = match e {
            ConfigFileError::Io { .. } => "config_unreadable",
            ConfigFileError::Yaml { .. } => "invalid_config_yaml",
            ConfigFileError::NoSettings { .. } => "empty_config",
            ConfigFileError::NotReceived { .. } => "config_not_received",
            ConfigFileError::Invalid { .. }
            | ConfigFileError::InFile { .. }
            | ConfigFileError::InResource { .. }
            | ConfigFileError::Directory(_) => "invalid_config_value",
        };
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, kind, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"type": self.kind, "message": self.message}});
        (self.status, Json(body)).into_response()
    }
}

/// Reads a JSON body into `T`, turning every failure into a clear 4xx.
fn parse<T: for<'de> Deserialize<'de>>(
    server: &Server,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let bytes = body.map_err(|r| body_error(server, r))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// A body that could not be read: too large (413, naming the limit and the setting that
/// raises it) or broken off (400).
fn body_error(server: &Server, rejection: BytesRejection) -> ApiError {
    let status = rejection.status();
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        let max = server.limits().max_body_bytes;
        return ApiError::new(
            status,
            "body_too_large",
            format!(
                "the body is over {max} bytes, the limit connections.max_body_bytes sets; send a \
                 smaller one, or raise connections.max_body_bytes in the config"
            ),
        );
    }
    ApiError::new(status, "invalid_request", rejection.body_text())
}

/// [`parse`] for a counted API: a bad body is counted as `invalid` for `endpoint`.
#[allow(clippy::result_large_err)] // the error is the response, returned at once
fn parse_counted<T: for<'de> Deserialize<'de>>(
    server: &Server,
    endpoint: Endpoint,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, Response> {
    parse(server, body).map_err(|e| {
        server.metrics().call(endpoint, Outcome::Invalid);
        e.into_response()
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckRequest {
    limiter: String,
    key: String,
    #[serde(default = "one")]
    cost: u64,
}

fn one() -> u64 {
    1
}

async fn check(
    State(server): State<Arc<Server>>,
    uri: axum::http::Uri,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let mode = match status_mode(&uri) {
        Ok(mode) => mode,
        Err(e) => return e.into_response(),
    };
    let request: CheckRequest = match parse_counted(&server, Endpoint::Check, body) {
        Ok(r) => r,
        Err(response) => return response,
    };
    if let Err(refused) = counted_key(&server, &request.key) {
        server.metrics().call(Endpoint::Check, Outcome::Invalid);
        return refused.into_response();
    }
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
fn decision_fields(d: &floodgate::Decision) -> serde_json::Value {
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
fn decision_response(
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

/// The 404 of a call naming no configured limit, naming those there are.
fn unknown_limit(server: &Server, name: &str) -> ApiError {
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

/// How a decision call's HTTP status is chosen, by its query: `http_status=body` (the
/// default: 200 whenever the call was answered, the decision in the body, so a caller can
/// tell a refusal from a failure of the call) or `http_status=decision` (the status carries
/// the decision: 200 allowed, else the refusal's 429 or 503, with `Retry-After` and the
/// `RateLimit` fields as header fields, for gateways that act on the status alone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StatusMode {
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

/// The span of a decision call (see [`crate::traces`]), made from the request's headers
/// without copying them; none when traces are off.
struct CallSpan<const EVALUATE: bool>(Option<tracing::Span>);

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

async fn evaluate(
    State(server): State<Arc<Server>>,
    CallSpan(span): CallSpan<true>,
    uri: axum::http::Uri,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let evaluating = evaluate_in(server, uri, body);
    match span {
        Some(span) => evaluating.instrument(span).await,
        None => evaluating.await,
    }
}

async fn evaluate_in(
    server: Arc<Server>,
    uri: axum::http::Uri,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let mode = match status_mode(&uri) {
        Ok(mode) => mode,
        Err(e) => return e.into_response(),
    };
    let request: EvaluateRequest = match parse_counted(&server, Endpoint::Evaluate, body) {
        Ok(r) => r,
        Err(response) => return response,
    };
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseRequest {
    lease: String,
    /// How long the request took, in milliseconds: the sample adaptive concurrency stages
    /// learn from (absent: the time since `/v1/evaluate`).
    #[serde(default)]
    latency_ms: Option<f64>,
}

/// The longest latency `/v1/release` accepts: a day, in milliseconds.
const MAX_LATENCY_MS: f64 = 86_400_000.0;

async fn release(
    State(server): State<Arc<Server>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let request: ReleaseRequest = match parse_counted(&server, Endpoint::Release, body) {
        Ok(r) => r,
        Err(response) => return response,
    };
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

async fn envoy_json(
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

async fn metrics(State(server): State<Arc<Server>>) -> Response {
    (
        [("content-type", "text/plain; version=0.0.4")],
        server.render_metrics().await,
    )
        .into_response()
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

/// `GET /v1/dashboard[?since=SEQ]`: the dashboard's data ([`crate::dashboard`]); the heaviest
/// keys in full only with the admin token as a bearer token.
async fn dashboard(
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

async fn home_page(State(server): State<Arc<Server>>) -> Response {
    (
        [("content-type", "text/html; charset=utf-8")],
        home::render(&server.overview()),
    )
        .into_response()
}

async fn livez() -> &'static str {
    "ok"
}

/// 200 when the service takes traffic, 503 while it shuts down, while the store's circuit
/// breaker is open or while its last call failed; the JSON body says why, and shows the store
/// ([`Server::readiness`]).
async fn readyz(State(server): State<Arc<Server>>) -> Response {
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
async fn healthcheck(State(server): State<Arc<Server>>) -> Response {
    if server.readiness().0 {
        (StatusCode::OK, "OK").into_response()
    } else {
        StatusCode::INTERNAL_SERVER_ERROR.into_response()
    }
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
