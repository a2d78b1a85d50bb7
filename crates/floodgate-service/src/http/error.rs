//! What every endpoint's answer shares: [`ApiError`] (`{"error": {"type", "message"}}` and its
//! status) and the request prelude that parses a body into it.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use crate::config::ConfigFileError;
use crate::lease_token::TokenError;
use crate::metrics::{Endpoint, Outcome};
use crate::rls::json::RlsJsonError;
use crate::service::{AdminError, EvaluateError, ReleaseTokenError, Server};

/// An API error: a status and `{"error": {"type", "message"}}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
}

impl ApiError {
    pub(super) fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            message: message.into(),
        }
    }

    pub(super) fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// A 400 of `kind` with the error's own message.
    pub(super) fn invalid(kind: &'static str, error: impl std::fmt::Display) -> Self {
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
pub(super) fn parse<T: for<'de> Deserialize<'de>>(
    server: &Server,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let bytes = body.map_err(|r| body_error(server, r))?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// A body that could not be read: too large (413, naming the limit and the setting that
/// raises it) or broken off (400).
pub(super) fn body_error(server: &Server, rejection: BytesRejection) -> ApiError {
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
pub(super) fn parse_counted<T: for<'de> Deserialize<'de>>(
    server: &Server,
    endpoint: Endpoint,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, Response> {
    parse(server, body).map_err(|e| {
        server.metrics().call(endpoint, Outcome::Invalid);
        e.into_response()
    })
}
