//! OpenTelemetry traces (`TRACING_ENABLED`) received by a real OTLP receiver of the tests' own
//! (`common/otlp.rs`: tonic serving the collector's trace service, or hyper serving
//! `/v1/traces`): a span per `ShouldRateLimit`, `/json` and `/v1/evaluate` call, child of the
//! caller's `traceparent` or B3 headers (a B3 context wins over a `traceparent`), with a child
//! span per store call; the resource says which service sent them; sampling follows the caller and `TRACING_SAMPLING_RATE`; OTLP over gRPC (plain
//! and mutual TLS) and HTTP; no descriptor value ever leaves in a span. Real processes.

use crate::common;
use crate::common::otlp as collector;

use collector::{Collector, CollectorTls, ReceivedSpan};
use common::serve::{config_file, serve, serve_refused, Service};
use floodgate_harness::TestCa;
use floodgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use floodgate_server::grpc::{RateLimitDescriptor, RateLimitRequest, RateLimitServiceClient};
use serde_json::{json, Value};

const CONFIG: &str = r#"
pipeline:
  - name: per_user
    kind: limit
    key: "{user}"
    spec: {algorithm: fixed_window, limit: 10, window: 1m}
domains:
  - domain: edge
    descriptors:
      - key: api_key
        rate_limit: {unit: minute, requests_per_unit: 1}
"#;

/// A descriptor value standing for a secret: it must never be in a span.
const SECRET: &str = "sk-live-4f9a8b7c6d5e";

/// A caller's trace: its trace id and the id of its span that calls the service.
struct Caller {
    trace_id: String,
    span_id: String,
}

impl Caller {
    fn new(n: u8) -> Caller {
        Caller {
            trace_id: format!("4bf92f3577b34da6a3ce929d0e0e47{n:02x}"),
            span_id: format!("00f067aa0ba902{n:02x}"),
        }
    }

    /// The W3C `traceparent` of a call from this span, sampled or not.
    fn traceparent(&self, sampled: bool) -> String {
        let flags = if sampled { "01" } else { "00" };
        format!("00-{}-{}-{flags}", self.trace_id, self.span_id)
    }
}

/// Traces on, sent to `endpoint`, batches sent every 100 ms.
fn tracing_env<'a>(protocol: &'a str, endpoint: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("TRACING_ENABLED", "true"),
        ("TRACING_EXPORTER_PROTOCOL", protocol),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("TRACING_SERVICE_NAME", "ratelimit-under-test"),
        ("TRACING_SERVICE_NAMESPACE", "gateway-system"),
        ("TRACING_SERVICE_INSTANCE_ID", "ratelimit-pod-1"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ]
}

/// One `ShouldRateLimit` for the secret API key, with `traceparent` as gRPC metadata.
async fn should_rate_limit(node: &Service, traceparent: Option<String>) -> i32 {
    let metadata: Vec<_> = traceparent
        .map(|t| ("traceparent", t))
        .into_iter()
        .collect();
    should_rate_limit_with(node, &metadata).await
}

/// One `ShouldRateLimit` for the secret API key, with `metadata`.
async fn should_rate_limit_with(node: &Service, metadata: &[(&'static str, String)]) -> i32 {
    let mut client = RateLimitServiceClient::connect(node.grpc.clone())
        .await
        .unwrap();
    let mut request = tonic::Request::new(RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "api_key".into(),
                value: SECRET.into(),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    });
    for (name, value) in metadata {
        request.metadata_mut().insert(*name, value.parse().unwrap());
    }
    client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner()
        .overall_code
}

/// `POST path` with `body` and `traceparent` as a header: the status.
async fn post(node: &Service, path: &str, body: Value, traceparent: Option<String>) -> u16 {
    let headers: Vec<_> = traceparent
        .map(|t| ("traceparent", t))
        .into_iter()
        .collect();
    post_with(node, path, body, &headers).await
}

/// `POST path` with `body` and `headers`: the status.
async fn post_with(node: &Service, path: &str, body: Value, headers: &[(&str, String)]) -> u16 {
    let mut request = reqwest::Client::new()
        .post(format!("{}{path}", node.http))
        .json(&body);
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    request.send().await.unwrap().status().as_u16()
}

fn of_trace<'a>(spans: &'a [ReceivedSpan], trace_id: &str, name: &str) -> Vec<&'a ReceivedSpan> {
    spans
        .iter()
        .filter(|s| s.trace_id == trace_id && s.name == name)
        .collect()
}

/// The store call spans whose parent is `parent`.
fn children<'a>(spans: &'a [ReceivedSpan], parent: &ReceivedSpan) -> Vec<&'a ReceivedSpan> {
    spans
        .iter()
        .filter(|s| s.trace_id == parent.trace_id && s.parent_span_id == parent.span_id)
        .collect()
}

fn assert_no_secret(spans: &[ReceivedSpan]) {
    for span in spans {
        for (key, value) in span.attributes.iter().chain(&span.resource) {
            assert!(
                !value.contains(SECRET) && !key.contains(SECRET),
                "a descriptor value left in a span: {span:#?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn should_rate_limit_continues_the_callers_trace_over_otlp_grpc() {
    let collector = Collector::grpc(None).await;
    let (_dir, path) = config_file(CONFIG);
    let node = serve(&path, "memory", &tracing_env("grpc", &collector.endpoint));
    assert!(
        node.started.contains("traces exported over OTLP"),
        "{}",
        node.started
    );
    let caller = Caller::new(1);
    assert_eq!(
        should_rate_limit(&node, Some(caller.traceparent(true))).await,
        1
    );
    assert_eq!(
        should_rate_limit(&node, Some(caller.traceparent(true))).await,
        2
    );
    let spans = collector
        .until("two calls and their store calls", |spans| {
            of_trace(spans, &caller.trace_id, "ShouldRateLimit").len() == 2
                && of_trace(spans, &caller.trace_id, "store call").len() == 2
        })
        .await;
    let calls = of_trace(&spans, &caller.trace_id, "ShouldRateLimit");
    let codes: Vec<_> = calls
        .iter()
        .map(|s| s.attribute("ratelimit.code").unwrap_or_default())
        .collect();
    assert!(
        codes.contains(&"OK") && codes.contains(&"OVER_LIMIT"),
        "{calls:#?}"
    );
    for call in &calls {
        assert_eq!(
            call.parent_span_id, caller.span_id,
            "a child of the caller's span"
        );
        assert_eq!(call.attribute("ratelimit.domain"), Some("edge"));
        assert_eq!(call.attribute("ratelimit.descriptors"), Some("1"));
        assert_eq!(call.attribute("rpc.system"), Some("grpc"));
        assert_eq!(call.attribute("rpc.method"), Some("ShouldRateLimit"));
        assert_eq!(call.resource("service.name"), Some("ratelimit-under-test"));
        assert_eq!(call.resource("service.namespace"), Some("gateway-system"));
        assert_eq!(
            call.resource("service.instance.id"),
            Some("ratelimit-pod-1")
        );
        let store = children(&spans, call);
        assert_eq!(store.len(), 1, "one store call: {spans:#?}");
        assert_eq!(store[0].name, "store call");
        assert_eq!(store[0].attribute("floodgate.store"), Some("memory"));
    }
    assert_no_secret(&spans);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_and_evaluate_are_traced_over_otlp_http_as_envoy_gateway_sets_it() {
    let collector = Collector::http().await;
    let (_dir, path) = config_file(CONFIG);
    // Envoy Gateway sets the general endpoint and leaves the protocol to upstream's default.
    let mut env = tracing_env("http", &collector.endpoint);
    env.retain(|(name, _)| *name != "TRACING_EXPORTER_PROTOCOL");
    let node = serve(&path, "memory", &env);
    let caller = Caller::new(2);
    let hit = json!({"domain": "edge", "descriptors": [{"entries": [{"key": "api_key", "value": SECRET}]}]});
    assert_eq!(
        post(&node, "/json", hit, Some(caller.traceparent(true))).await,
        200
    );
    let evaluate = json!({"user": SECRET});
    assert_eq!(
        post(
            &node,
            "/v1/evaluate",
            evaluate.clone(),
            Some(caller.traceparent(true))
        )
        .await,
        200
    );
    // Without a caller's trace: a trace of its own.
    assert_eq!(post(&node, "/v1/evaluate", evaluate, None).await, 200);
    let spans = collector
        .until(
            "the JSON call, both evaluations and their store calls",
            |spans| {
                spans
                    .iter()
                    .filter(|s| s.name == "POST /v1/evaluate")
                    .count()
                    == 2
                    && of_trace(spans, &caller.trace_id, "POST /json").len() == 1
                    && spans.iter().filter(|s| s.name == "store call").count() == 3
            },
        )
        .await;
    let json_call = of_trace(&spans, &caller.trace_id, "POST /json")[0];
    assert_eq!(json_call.parent_span_id, caller.span_id);
    assert_eq!(json_call.attribute("http.route"), Some("/json"));
    assert_eq!(json_call.attribute("ratelimit.domain"), Some("edge"));
    assert_eq!(json_call.attribute("ratelimit.code"), Some("OK"));
    assert_eq!(children(&spans, json_call).len(), 1);
    let evaluated = of_trace(&spans, &caller.trace_id, "POST /v1/evaluate")[0];
    assert_eq!(evaluated.parent_span_id, caller.span_id);
    assert_eq!(evaluated.attribute("floodgate.allowed"), Some("true"));
    assert_eq!(
        evaluated.attribute("http.response.status_code"),
        Some("200")
    );
    assert_eq!(children(&spans, evaluated).len(), 1);
    let own = spans
        .iter()
        .find(|s| s.name == "POST /v1/evaluate" && s.trace_id != caller.trace_id)
        .unwrap();
    assert!(own.parent_span_id.is_empty(), "a root: {own:#?}");
    assert_eq!(children(&spans, own).len(), 1);
    assert_no_secret(&spans);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b3_headers_are_continued_and_win_over_a_traceparent() {
    let collector = Collector::grpc(None).await;
    let (_dir, path) = config_file(CONFIG);
    let node = serve(&path, "memory", &tracing_env("grpc", &collector.endpoint));
    // The single header, as gRPC metadata.
    let single = Caller::new(6);
    let b3 = format!("{}-{}-1", single.trace_id, single.span_id);
    should_rate_limit_with(&node, &[("b3", b3)]).await;
    // The multiple headers with a 64-bit trace id, as HTTP headers.
    let multiple = Caller {
        trace_id: "0000000000000000a3ce929d0e0e4707".into(),
        span_id: "00f067aa0ba90207".into(),
    };
    let hit = json!({"domain": "edge", "descriptors": [{"entries": [{"key": "api_key", "value": SECRET}]}]});
    let headers = [
        ("x-b3-traceid", multiple.trace_id[16..].to_string()),
        ("x-b3-spanid", multiple.span_id.clone()),
        ("x-b3-parentspanid", "05e3ac9a4f6e3b90".to_string()),
        ("x-b3-sampled", "1".to_string()),
    ];
    // Over the limit by now (one a minute): traced all the same.
    assert_eq!(post_with(&node, "/json", hit, &headers).await, 429);
    // Both a traceparent and a B3 context: B3's, as upstream's propagators read them.
    let (w3c, both) = (Caller::new(8), Caller::new(9));
    let headers = [
        ("traceparent", w3c.traceparent(true)),
        ("b3", format!("{}-{}-1", both.trace_id, both.span_id)),
    ];
    let evaluate = json!({"user": SECRET});
    assert_eq!(
        post_with(&node, "/v1/evaluate", evaluate, &headers).await,
        200
    );
    let spans = collector
        .until("the three calls", |spans| {
            of_trace(spans, &single.trace_id, "ShouldRateLimit").len() == 1
                && of_trace(spans, &multiple.trace_id, "POST /json").len() == 1
                && of_trace(spans, &both.trace_id, "POST /v1/evaluate").len() == 1
        })
        .await;
    for (caller, name) in [
        (&single, "ShouldRateLimit"),
        (&multiple, "POST /json"),
        (&both, "POST /v1/evaluate"),
    ] {
        let call = of_trace(&spans, &caller.trace_id, name)[0];
        assert_eq!(call.parent_span_id, caller.span_id, "{call:#?}");
        assert_eq!(children(&spans, call).len(), 1, "its store call");
    }
    assert!(
        spans.iter().all(|s| s.trace_id != w3c.trace_id),
        "the traceparent lost to B3: {spans:#?}"
    );
}

/// The SDK's own variables, as upstream's SDK reads them: `OTEL_RESOURCE_ATTRIBUTES` adds to
/// the resource (`TRACING_SERVICE_*` winning, `OTEL_SERVICE_NAME` no match for them), the
/// value length limit cuts string attributes to that many characters, and the count limit
/// keeps a span's first attributes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdks_resource_and_span_limits_apply() {
    let collector = Collector::http().await;
    let (_dir, path) = config_file(CONFIG);
    let mut env = tracing_env("http", &collector.endpoint);
    env.extend([
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment=prod,team=edge%20team,service.name=ignored",
        ),
        ("OTEL_SERVICE_NAME", "also-ignored"),
        ("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "3"),
        ("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "4"),
    ]);
    let node = serve(&path, "memory", &env);
    assert_eq!(should_rate_limit(&node, None).await, 1);
    let spans = collector
        .until("the call's span", |spans| {
            spans.iter().any(|s| s.name == "ShouldRateLimit")
        })
        .await;
    let call = spans.iter().find(|s| s.name == "ShouldRateLimit").unwrap();
    // The resource is not a span's attributes: kept whole.
    assert_eq!(call.resource("deployment.environment"), Some("prod"));
    assert_eq!(call.resource("team"), Some("edge team"));
    assert_eq!(call.resource("service.name"), Some("ratelimit-under-test"));
    // The span's first four attributes, each cut to three characters.
    assert_eq!(call.attributes.len(), 4, "{call:#?}");
    assert!(
        call.attributes.iter().all(|(_, v)| v.chars().count() <= 3),
        "{call:#?}"
    );
    assert_eq!(call.attribute("rpc.system"), Some("grp"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_follows_the_caller_then_the_rate() {
    let collector = Collector::grpc(None).await;
    let (_dir, path) = config_file(CONFIG);
    let mut env = tracing_env("grpc", &collector.endpoint);
    env.push(("TRACING_SAMPLING_RATE", "0"));
    let node = serve(&path, "memory", &env);
    let unsampled = Caller::new(3);
    let sampled = Caller::new(4);
    // Begun here at a rate of 0, or unsampled by the caller: not kept.
    should_rate_limit(&node, None).await;
    should_rate_limit(&node, Some(unsampled.traceparent(false))).await;
    // Sampled by the caller: kept whatever the rate.
    should_rate_limit(&node, Some(sampled.traceparent(true))).await;
    let spans = collector
        .until("the sampled call", |spans| {
            !of_trace(spans, &sampled.trace_id, "ShouldRateLimit").is_empty()
        })
        .await;
    let traces: std::collections::BTreeSet<_> = spans.iter().map(|s| &s.trace_id).collect();
    assert_eq!(traces.len(), 1, "only the sampled trace: {spans:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_over_grpc_with_mutual_tls() {
    let ca = TestCa::new();
    let collector = Collector::grpc(Some(CollectorTls {
        server: ca.issue("collector", "IP:127.0.0.1,DNS:otel-collector"),
        client_ca: ca.ca_file(),
    }))
    .await;
    let client = ca.issue("ratelimit", "DNS:envoy-ratelimit");
    let (ca_file, cert, key) = (
        ca.ca_file().display().to_string(),
        client.cert.display().to_string(),
        client.key.display().to_string(),
    );
    let mut env = tracing_env("grpc", &collector.endpoint);
    env.extend([
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca_file.as_str()),
        ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", cert.as_str()),
        ("OTEL_EXPORTER_OTLP_CLIENT_KEY", key.as_str()),
    ]);
    assert!(collector.endpoint.starts_with("https://"));
    let (_dir, path) = config_file(CONFIG);
    let node = serve(&path, "memory", &env);
    let caller = Caller::new(5);
    should_rate_limit(&node, Some(caller.traceparent(true))).await;
    collector
        .until("the call, over mutual TLS", |spans| {
            !of_trace(spans, &caller.trace_id, "ShouldRateLimit").is_empty()
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_over_https_checks_the_collector_and_presents_a_certificate() {
    let ca = TestCa::new();
    let server = ca.issue("collector", "IP:127.0.0.1,DNS:otel-collector");
    let client = ca.issue("ratelimit", "DNS:envoy-ratelimit");
    let (ca_file, cert, key) = (
        ca.ca_file().display().to_string(),
        client.cert.display().to_string(),
        client.key.display().to_string(),
    );
    let (_dir, path) = config_file(CONFIG);
    // TLS, the collector's certificate checked against the CA file; the protocol is upstream's
    // default (http), the endpoint the general one, as Envoy Gateway sets them.
    let collector = Collector::https(&server, None).await;
    assert!(collector.endpoint.starts_with("https://"));
    let mut env = tracing_env("http", &collector.endpoint);
    env.retain(|(name, _)| *name != "TRACING_EXPORTER_PROTOCOL");
    env.push(("OTEL_EXPORTER_OTLP_CERTIFICATE", ca_file.as_str()));
    let node = serve(&path, "memory", &env);
    let caller = Caller::new(10);
    should_rate_limit(&node, Some(caller.traceparent(true))).await;
    collector
        .until("the call, over HTTPS", |spans| {
            !of_trace(spans, &caller.trace_id, "ShouldRateLimit").is_empty()
        })
        .await;
    drop(node);

    // Mutual TLS, to the signal's own endpoint with its own variables.
    let collector = Collector::https(&server, Some(&ca.ca_file())).await;
    let endpoint = format!("{}/v1/traces", collector.endpoint);
    let mut env = tracing_env("http", &endpoint);
    env.retain(|(name, _)| *name != "OTEL_EXPORTER_OTLP_ENDPOINT");
    env.extend([
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", ca_file.as_str()),
        (
            "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
            cert.as_str(),
        ),
        ("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", key.as_str()),
        (
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "authorization=Bearer%20s3cr3t",
        ),
    ]);
    let node = serve(&path, "memory", &env);
    assert!(
        !node.started.contains("s3cr3t"),
        "a header's value is never logged: {}",
        node.started
    );
    let caller = Caller::new(11);
    should_rate_limit(&node, Some(caller.traceparent(true))).await;
    collector
        .until("the call, over mutual TLS", |spans| {
            !of_trace(spans, &caller.trace_id, "ShouldRateLimit").is_empty()
        })
        .await;
    assert!(
        collector
            .headers()
            .iter()
            .all(|h| h.get("authorization").is_some_and(|v| v == "Bearer s3cr3t")),
        "the exporter's headers go with each export"
    );
}

#[test]
fn unusable_trace_settings_refuse_to_start_naming_the_variable() {
    let (_dir, path) = config_file(CONFIG);
    for (env, named, exit) in [
        (
            vec![
                ("TRACING_ENABLED", "true"),
                ("TRACING_EXPORTER_PROTOCOL", "thrift"),
            ],
            "TRACING_EXPORTER_PROTOCOL",
            2,
        ),
        (
            vec![
                ("TRACING_ENABLED", "true"),
                ("TRACING_SAMPLING_RATE", "most"),
            ],
            "TRACING_SAMPLING_RATE",
            2,
        ),
        (
            vec![
                ("TRACING_ENABLED", "true"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
            ],
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            2,
        ),
        (
            vec![
                ("TRACING_ENABLED", "true"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318"),
                (
                    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                    "/nonexistent/client.pem",
                ),
                ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/nonexistent/client.key"),
            ],
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            1,
        ),
        (
            vec![
                ("TRACING_ENABLED", "true"),
                ("TRACING_EXPORTER_PROTOCOL", "grpc"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4317"),
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem"),
            ],
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
            1,
        ),
    ] {
        let (code, stderr) = serve_refused(&path, "memory", &env);
        assert_eq!(code, Some(exit), "{env:?}: {stderr}");
        assert!(stderr.contains(named), "{env:?}: {stderr}");
    }
}
