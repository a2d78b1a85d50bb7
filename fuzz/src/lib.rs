//! What the fuzz targets share: a service built once per process, and each target's body, so
//! that the targets themselves stay one line.

use std::io::BufRead;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Body;
use floodgate::{ManualClock, Nanos};
use floodgate_client::signal::{Signal, MAX_HORIZON, MAX_QUOTAS};
use floodgate_server::config::{Config, ConfigFileError};
use floodgate_server::grpc::proto::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
use floodgate_server::grpc::{QuotaBackend, RateLimitRequest};
use floodgate_server::metrics::Endpoint;
use floodgate_server::rls::RlsRequest;
use floodgate_server::service::Server;
use floodgate_server::store::ServiceStore;
use http::{HeaderMap, HeaderName, HeaderValue, Request};
use prost::Message;
use tower::ServiceExt;

/// The admin token of the fuzzed service.
const TOKEN: &str = "fuzz-admin-token";

struct Service {
    runtime: tokio::runtime::Runtime,
    server: Arc<Server>,
    router: axum::Router,
}

fn service() -> &'static Service {
    static SERVICE: OnceLock<Service> = OnceLock::new();
    SERVICE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let server = Arc::new(
            Server::new(Config::builtin(), None, Some(TOKEN.into())).expect("the built-in config"),
        );
        let router = floodgate_server::http::router(server.clone());
        Service {
            runtime,
            server,
            router,
        }
    })
}

/// Builds a parsed config over the embedded store (a Redis URL in it is ignored: fuzzing
/// connects to nothing).
pub fn build_config(parsed: Result<Config, ConfigFileError>) {
    let Ok(mut config) = parsed else { return };
    config.store.url = None;
    let Ok(store) = ServiceStore::from_config(&config.store) else {
        return;
    };
    let clock = Arc::new(ManualClock::new(Nanos::ZERO));
    if let Ok(served) = config.build(store.clone(), clock) {
        let _ = store.check(&served);
    }
}

/// The endpoints `http_call` aims at: method, path, and whether a 503 is a decision there.
const ENDPOINTS: [(&str, &str, bool); 8] = [
    ("POST", "/v1/check", false),
    ("POST", "/v1/evaluate", true),
    ("POST", "/v1/release", false),
    ("POST", "/json", false),
    ("POST", "/admin/mode", false),
    ("POST", "/admin/plan", false),
    ("GET", "/v1/dashboard", false),
    ("GET", "/metrics", false),
];

/// One HTTP call: the first byte picks the endpoint and whether the admin token goes with it,
/// the rest is the body (for GETs, the query string).
pub fn http_call(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let (method, path, sheds) = ENDPOINTS[usize::from(pick) % ENDPOINTS.len()];
    let mut request = Request::builder().method(method);
    request = if method == "GET" {
        let query = String::from_utf8_lossy(rest);
        let query: String = query
            .chars()
            .filter(|c| c.is_ascii_graphic() && *c != '#')
            .collect();
        match format!("{path}?{query}").parse::<http::Uri>() {
            Ok(uri) => request.uri(uri),
            Err(_) => return,
        }
    } else {
        request.uri(path).header("content-type", "application/json")
    };
    if pick >= 128 {
        request = request.header("authorization", format!("Bearer {TOKEN}"));
    }
    let body = if method == "GET" {
        Body::empty()
    } else {
        Body::from(rest.to_vec())
    };
    let request = request.body(body).expect("a request");
    let s = service();
    let response = s
        .runtime
        .block_on(s.router.clone().oneshot(request))
        .expect("the router answers");
    let status = response.status().as_u16();
    assert!(
        status < 500 || (sheds && status == 503),
        "{method} {path}: {status}"
    );
}

/// One `ShouldRateLimit` call from protobuf bytes.
pub fn rls_call(data: &[u8]) {
    let Ok(request) = RateLimitRequest::decode(data) else {
        return;
    };
    let Ok(request) = RlsRequest::try_from(request) else {
        return;
    };
    let s = service();
    let response = s
        .runtime
        .block_on(s.server.should_rate_limit(&request, Endpoint::Grpc));
    // The fuzzed service runs on memory, whose calls cannot fail: every call is decided.
    let response = response.expect("a memory store decides every call");
    assert_eq!(response.statuses.len(), request.descriptors.len());
}

/// One RLQS stream: `data` is a run of messages, each one byte of length and that many bytes of
/// a `RateLimitQuotaUsageReports`; each decoded message is reported on one session (an error
/// ends the stream, as the service ends it), with a tick after each, then the stream ends.
pub fn rlqs_stream(data: &[u8]) {
    let s = service();
    let server = &*s.server;
    let Ok(mut session) = server.quota_stream() else {
        panic!("the service serves the Rate Limit Quota Service, one stream at a time here");
    };
    let mut rest = data;
    while let Some((&length, tail)) = rest.split_first() {
        let (message, after) = tail.split_at(usize::from(length).min(tail.len()));
        rest = after;
        let Ok(reports) = RateLimitQuotaUsageReports::decode(message) else {
            continue;
        };
        let reported = reports.bucket_quota_usages.len();
        match s.runtime.block_on(server.quota_report(&mut session, reports)) {
            Ok(actions) => {
                assert!(actions.len() <= reported, "at most one action per bucket reported");
                for action in &actions {
                    let id = action.bucket_id.as_ref().expect("every action names its bucket");
                    assert!(!id.bucket.is_empty(), "a bucket the client can match");
                    assert!(action.bucket_action.is_some(), "an action Envoy applies");
                }
            }
            Err(_) => break,
        }
        for action in s.runtime.block_on(server.quota_tick(&mut session)) {
            assert!(action.bucket_action.is_some());
        }
    }
    s.runtime.block_on(server.quota_close(session));
}

/// A replay: the first line is the limiter spec (inline JSON only: a path would read files),
/// the rest the trace.
pub fn replay(text: &str) {
    let (spec, trace) = text.split_once('\n').unwrap_or((text, ""));
    if !spec.trim_start().starts_with('{') {
        return;
    }
    let mut out = Vec::new();
    if floodgate_server::replay::replay_trace(spec, 1000, trace.as_bytes(), &mut out).is_ok() {
        let events = trace
            .as_bytes()
            .lines()
            .filter(|l| l.as_ref().is_ok_and(|l| !l.trim().is_empty()));
        assert_eq!(
            out.lines().count(),
            events.count(),
            "one decision per event"
        );
    }
}

/// An answer's fields, one `name: value` per line, read by the client side.
pub fn client_headers(data: &[u8]) {
    let mut headers = HeaderMap::new();
    for line in data.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name),
            HeaderValue::from_bytes(value.trim_ascii()),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    // 2026-11-24, as a Unix-epoch instant.
    let now = Nanos(1_795_478_400 * 1_000_000_000);
    let signal = Signal::read(&headers, now);
    assert!(signal.quotas.len() <= MAX_QUOTAS);
    assert!(signal.retry_after.is_none_or(|d| d <= MAX_HORIZON));
    for quota in &signal.quotas {
        assert!(quota.reset.is_none_or(|d| d <= MAX_HORIZON), "{quota:?}");
        assert!(quota.window.is_none_or(|d| d > Duration::ZERO), "{quota:?}");
    }
}
