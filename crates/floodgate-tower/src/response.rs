//! Refusal responses, and the headers an allowed response gains.
//!
//! A refused HTTP request gets the refusal's status (429 from the per-user limiters, 503 from
//! the shedders and from fail-closed store errors), `content-type: application/json`, the
//! verdict's `Retry-After` (whole seconds, rounded up), `RateLimit-Policy` and `RateLimit`
//! fields, and a body a client can act on:
//!
//! ```json
//! {"error": {"type": "rate_limited", "message": "plan free allows 50 requests per second; retry in 0.02 s",
//!            "limiter": "request_rate", "retry_after": 0.02}}
//! ```
//!
//! `type` is `rate_limited` for a 4xx status and `overloaded` for a 5xx; `retry_after` is in
//! seconds (a JSON number, exact to the nanosecond), `null` when the request can never pass.
//! A user key in the message (`user key:… already has 2 requests in flight`) appears only as
//! its fingerprint, `key:1a2b3c4d...` (see [`crate::credential`]); the credential itself was
//! never a key.
//!
//! A gRPC request (`content-type: application/grpc…`) is refused the gRPC way instead: HTTP
//! 200 with no body, `content-type: application/grpc`, `grpc-status` 8 (`RESOURCE_EXHAUSTED`)
//! for a 4xx refusal or 14 (`UNAVAILABLE`) for a 5xx one, `grpc-message` (the message,
//! percent-encoded as gRPC requires) and the same rate-limit fields; tonic clients see a
//! `Status` with that code and message.
//!
//! An allowed response gains the verdict's `RateLimit-Policy` and `RateLimit` fields, unless
//! the inner service set them itself. A header value that cannot be encoded is left out.
//!
//! A refusal hook ([`FloodgateLayer::on_refusal`](crate::FloodgateLayer::on_refusal)) gets
//! each refusal and the response above, and answers the response to send instead: to add a
//! header, or to give the refusal the body of the application's own errors.
//!
//! A request the extractor cannot place ([`Unidentified`]: no client address, no key) is
//! answered 500, `{"error": {"type": "unidentified", "message": …}}` (gRPC: `INTERNAL`), the
//! message saying what to set up. It is the middleware's set-up that is wrong, not the
//! client, and guessing (one shared bucket for every such client) would let one client block
//! the others.

use bytes::Bytes;
use floodgate::pipeline::Refusal;
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};

use crate::address::Unidentified;
use crate::credential::redact;

/// A refusal hook: the refusal and the response the middleware would send, to the response to
/// send (see the [module documentation](self)).
pub type RefusalFn = dyn Fn(&Refusal, Response<Bytes>) -> Response<Bytes> + Send + Sync;

/// The 500 for a request the extractor could not place (see the [module documentation](self)).
pub(crate) fn unidentified_response(why: &Unidentified, grpc: bool) -> Response<Bytes> {
    let mut response = if grpc {
        let mut response = Response::new(Bytes::new());
        let h = response.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        h.insert("grpc-status", HeaderValue::from_static("13"));
        if let Ok(message) = HeaderValue::from_str(&grpc_percent_encode(why.message())) {
            h.insert("grpc-message", message);
        }
        response
    } else {
        let body = serde_json::json!({
            "error": {"type": "unidentified", "message": why.message()}
        });
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let mut response = Response::new(Bytes::from(bytes));
        *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    };
    if grpc {
        *response.status_mut() = StatusCode::OK;
    }
    response
}

/// Whether the request speaks gRPC (its content type is `application/grpc`, with or without
/// a `+proto`-style suffix).
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.get(..16)
                .is_some_and(|head| head.eq_ignore_ascii_case("application/grpc"))
        })
}

/// The refusal's response, or `None` if it cannot be built (an invalid status), in which case
/// the caller lets the request through.
pub(crate) fn refusal_response(
    refusal: &Refusal,
    headers: &[(&'static str, String)],
    grpc: bool,
) -> Option<Response<Bytes>> {
    let status = StatusCode::from_u16(refusal.status).ok()?;
    let message = redact(&refusal.message);
    let mut response = if grpc {
        let mut response = Response::new(Bytes::new());
        let h = response.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        let code = if status.is_server_error() { "14" } else { "8" };
        h.insert("grpc-status", HeaderValue::from_static(code));
        if let Ok(message) = HeaderValue::from_str(&grpc_percent_encode(&message)) {
            h.insert("grpc-message", message);
        }
        response
    } else {
        let body = serde_json::json!({
            "error": {
                "type": if status.is_server_error() { "overloaded" } else { "rate_limited" },
                "message": message,
                "limiter": refusal.stage.as_str(),
                "retry_after": refusal.retry_after.map(|d| d.as_secs_f64()),
            }
        });
        let mut response = Response::new(Bytes::from(serde_json::to_vec(&body).ok()?));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    };
    add_headers(response.headers_mut(), headers, true);
    Some(response)
}

/// Adds `(name, value)` fields; with `replace == false`, fields already present are kept.
/// Fields whose name or value cannot be encoded are skipped.
pub(crate) fn add_headers(map: &mut HeaderMap, headers: &[(&'static str, String)], replace: bool) {
    for (name, value) in headers {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) else {
            continue;
        };
        if replace || !map.contains_key(&name) {
            map.insert(name, value);
        }
    }
}

/// gRPC's `grpc-message` encoding: bytes outside printable ASCII, and `%`, as `%XX`.
fn grpc_percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for b in message.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate::limiter::{LimiterKind, RateLimitHeaders};
    use std::time::Duration;

    fn refusal(status: u16, retry: Option<Duration>) -> Refusal {
        let kind = if status == 429 {
            LimiterKind::RequestRate
        } else {
            LimiterKind::Fleet
        };
        Refusal {
            stage: floodgate::store::Namespace::new(kind.name()).unwrap(),
            kind,
            status,
            retry_after: retry,
            message: "plan free allows 50 requests per second; retry in 0.02 s".into(),
            rate_limit: Some(RateLimitHeaders {
                policy: "\"requests\";q=50;w=1".into(),
                remaining: "\"requests\";r=0;t=1".into(),
                left: 0,
            }),
        }
    }

    fn json(r: &Response<Bytes>) -> serde_json::Value {
        serde_json::from_slice(r.body()).unwrap()
    }

    #[test]
    fn a_429_names_the_limiter_and_the_wait() {
        let headers = [
            ("retry-after", "1".to_string()),
            ("ratelimit", "\"requests\";r=0;t=1".to_string()),
        ];
        let r = refusal_response(
            &refusal(429, Some(Duration::from_millis(20))),
            &headers,
            false,
        )
        .unwrap();
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()["content-type"], "application/json");
        assert_eq!(r.headers()["retry-after"], "1");
        assert_eq!(r.headers()["ratelimit"], "\"requests\";r=0;t=1");
        let body = json(&r);
        assert_eq!(body["error"]["type"], "rate_limited");
        assert_eq!(body["error"]["limiter"], "request_rate");
        assert_eq!(body["error"]["retry_after"], 0.02);
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("plan free"));
    }

    #[test]
    fn user_keys_in_messages_are_shown_as_fingerprints() {
        let user = crate::CredentialKey::from_bytes([3; 32]).user_key("sk_live_secret");
        let mut r = refusal(429, None);
        r.message = format!("user {user} already has 1 requests in flight, the most allowed");
        let short = format!("user {}... already has", &user[..12]);
        for grpc in [false, true] {
            let resp = refusal_response(&r, &[], grpc).unwrap();
            let shown = if grpc {
                resp.headers()["grpc-message"].to_str().unwrap().to_string()
            } else {
                json(&resp)["error"]["message"]
                    .as_str()
                    .unwrap()
                    .to_string()
            };
            assert!(shown.starts_with(&short), "{shown}");
            assert!(!shown.contains(&user), "{shown}");
        }
    }

    #[test]
    fn a_503_is_overloaded_and_never_passing_is_null() {
        let r = refusal_response(&refusal(503, None), &[], false).unwrap();
        assert_eq!(r.status(), 503);
        let body = json(&r);
        assert_eq!(body["error"]["type"], "overloaded");
        assert_eq!(body["error"]["limiter"], "fleet");
        assert!(body["error"]["retry_after"].is_null());
        assert!(refusal_response(&refusal(1000, None), &[], false).is_none());
    }

    #[test]
    fn grpc_refusals_are_trailers_only_statuses() {
        let mut h = HeaderMap::new();
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/grpc+proto"),
        );
        assert!(is_grpc(&h));
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        assert!(!is_grpc(&h));
        let mut r = refusal(429, Some(Duration::from_secs(1)));
        r.message = "100% used; é".into();
        let resp = refusal_response(&r, &[("retry-after", "1".into())], true).unwrap();
        assert_eq!(resp.status(), 200);
        assert!(resp.body().is_empty());
        assert_eq!(resp.headers()["grpc-status"], "8");
        assert_eq!(resp.headers()["grpc-message"], "100%25 used; %C3%A9");
        assert_eq!(resp.headers()["retry-after"], "1");
        let shed = refusal_response(&refusal(503, None), &[], true).unwrap();
        assert_eq!(shed.headers()["grpc-status"], "14");
    }

    #[test]
    fn allowed_responses_keep_their_own_fields_and_bad_values_are_skipped() {
        let mut map = HeaderMap::new();
        map.insert("ratelimit", HeaderValue::from_static("mine"));
        add_headers(
            &mut map,
            &[
                ("ratelimit", "theirs".into()),
                ("ratelimit-policy", "p".into()),
                ("x-bad", "line\nbreak".into()),
            ],
            false,
        );
        assert_eq!(map["ratelimit"], "mine");
        assert_eq!(map["ratelimit-policy"], "p");
        assert!(!map.contains_key("x-bad"));
    }
}
