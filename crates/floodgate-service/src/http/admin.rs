//! The admin API's handlers (`/admin/*`): each authorizes the bearer token first (see
//! [`Server::authorize`]), then acts on the running server.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse, ApiError};
use crate::service::{AdminError, Server};

/// An admin call: authorizes it, parses its body, and answers what `act` returns as JSON.
fn admin_call<T: for<'de> Deserialize<'de>>(
    server: &Server,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    act: impl FnOnce(&Server, T) -> Result<Value, AdminError>,
) -> Response {
    if let Err(e) = server.authorize(bearer(headers)) {
        return admin_error(e);
    }
    let request = match parse(server, body) {
        Ok(request) => request,
        Err(e) => return e.into_response(),
    };
    match act(server, request) {
        Ok(answer) => Json(answer).into_response(),
        Err(e) => admin_error(e),
    }
}

/// An admin refusal as its HTTP answer (401, 403, 404, 400: see the module table in
/// [`super`]).
fn admin_error(e: AdminError) -> Response {
    ApiError::from(e).into_response()
}

/// The token of an `Authorization: Bearer …` header, if the request has one (the admin API's,
/// and the dashboard's when it is protected).
pub(super) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("authorization")?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ModeRequest {
    limiter: String,
    mode: String,
}

pub(super) async fn admin_mode(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    admin_call(&server, &headers, body, |server, request: ModeRequest| {
        server.set_mode(&request.limiter, &request.mode)?;
        Ok(json!({"limiter": request.limiter, "mode": request.mode}))
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanRequest {
    user: String,
    plan: String,
}

pub(super) async fn admin_plan(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    admin_call(&server, &headers, body, |server, request: PlanRequest| {
        server.set_plan(&request.user, &request.plan)?;
        Ok(json!({"user": request.user, "plan": request.plan}))
    })
}

/// `GET /admin/plan`: the users put on a plan at run time.
pub(super) async fn admin_plans(State(server): State<Arc<Server>>, headers: HeaderMap) -> Response {
    if let Err(e) = server.authorize(bearer(&headers)) {
        return admin_error(e);
    }
    let overrides: Vec<Value> = server
        .plan_overrides()
        .into_iter()
        .map(|(user, switch)| {
            json!({"user": user, "plan": switch.plan, "configured": switch.configured})
        })
        .collect();
    Json(json!({ "overrides": overrides })).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClearPlanRequest {
    user: String,
}

/// `DELETE /admin/plan {"user"}`: back to the configuration's plan for that user.
pub(super) async fn admin_plan_clear(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    admin_call(
        &server,
        &headers,
        body,
        |server, request: ClearPlanRequest| {
            let cleared = server.clear_plan(&request.user)?;
            Ok(json!({"user": request.user, "cleared": cleared}))
        },
    )
}

pub(super) async fn admin_reload(
    State(server): State<Arc<Server>>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = server.authorize(bearer(&headers)) {
        return admin_error(e);
    }
    let trigger = crate::service::Trigger::Admin;
    match server.reload(trigger) {
        Ok(report) => Json(report.to_json(trigger)).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}
