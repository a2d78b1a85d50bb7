//! envoyproxy/ratelimit's request features through the real service, in process: the gRPC API
//! (the generated tonic client) and `POST /json` (reqwest) served on ephemeral ports. Limits
//! are per hour or day, so that no window ends during a test.

use std::net::SocketAddr;
use std::sync::Arc;

use floodgate_service::config::{Config, Overrides};
use floodgate_service::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use floodgate_service::grpc::{
    self, RateLimitDescriptor, RateLimitRequest, RateLimitResponse, RateLimitServiceClient,
};
use floodgate_service::http;
use floodgate_service::service::Server;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::Channel;

const CONFIG: &str = r#"
domains:
  - domain: edge
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 100}
      - key: tenant
        rate_limit: {algorithm: token_bucket, rate: 0.001, capacity: 50}
      - key: free
        unlimited: true
"#;

/// Envoy's unit numbers.
const HOUR: i32 = 3;
const DAY: i32 = 4;

/// The service for `config`, its gRPC client and its HTTP base URL.
struct Service {
    grpc: RateLimitServiceClient<Channel>,
    http: String,
}

async fn listener() -> (TcpListenerStream, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("a bound address");
    (TcpListenerStream::new(listener), addr)
}

async fn start(config: &str) -> Service {
    start_with(Config::from_yaml_str(config).expect("parses")).await
}

async fn start_with(config: Config) -> Service {
    let server = Arc::new(Server::new(config, None, None).expect("builds"));
    let (grpc_connections, grpc_addr) = listener().await;
    let (http_connections, http_addr) = listener().await;
    tokio::spawn(grpc::serve(
        server.clone(),
        grpc_connections,
        std::future::pending(),
    ));
    tokio::spawn(http::serve(
        server,
        http_connections,
        std::future::pending(),
    ));
    let grpc = RateLimitServiceClient::connect(format!("http://{grpc_addr}"))
        .await
        .expect("connect");
    Service {
        grpc,
        http: format!("http://{http_addr}"),
    }
}

/// A one-entry descriptor, with a limit override `(requests_per_unit, unit number)`.
fn descriptor(key: &str, value: &str, limit: Option<(u32, i32)>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        is_negative_hits: false,
        entries: vec![Entry {
            key: key.into(),
            value: value.into(),
        }],
        limit: limit.map(|(requests_per_unit, unit)| RateLimitOverride {
            requests_per_unit,
            unit,
        }),
        hits_addend: None,
    }
}

impl Service {
    async fn call(
        &self,
        domain: &str,
        descriptors: Vec<RateLimitDescriptor>,
    ) -> Result<RateLimitResponse, tonic::Status> {
        let request = RateLimitRequest {
            domain: domain.into(),
            descriptors,
            hits_addend: 0,
        };
        let mut client = self.grpc.clone();
        client
            .should_rate_limit(request)
            .await
            .map(|r| r.into_inner())
    }

    /// One descriptor's `(code, requests_per_unit, unit, limit_remaining)`; 0 for no limit.
    async fn one(
        &self,
        domain: &str,
        key: &str,
        value: &str,
        limit: Option<(u32, i32)>,
    ) -> (i32, u32, i32, u32) {
        let response = self
            .call(domain, vec![descriptor(key, value, limit)])
            .await
            .expect("a valid request");
        let status = &response.statuses[0];
        let (rpu, unit) = status
            .current_limit
            .as_ref()
            .map_or((0, 0), |l| (l.requests_per_unit, l.unit));
        (status.code, rpu, unit, status.limit_remaining)
    }

    async fn json(&self, body: Value) -> (u16, Value) {
        let response = reqwest::Client::new()
            .post(format!("{}/json", self.http))
            .json(&body)
            .send()
            .await
            .expect("the service answers");
        let status = response.status().as_u16();
        (status, response.json().await.expect("a JSON body"))
    }
}

const OK: i32 = 1;
const OVER: i32 = 2;

#[tokio::test]
async fn a_limit_override_counts_in_the_window_of_its_unit() {
    let s = start(CONFIG).await;
    let two_per_hour = Some((2, HOUR));
    assert_eq!(
        s.one("edge", "user", "a", two_per_hour).await,
        (OK, 2, HOUR, 1)
    );
    assert_eq!(
        s.one("edge", "user", "a", two_per_hour).await,
        (OK, 2, HOUR, 0)
    );
    assert_eq!(
        s.one("edge", "user", "a", two_per_hour).await,
        (OVER, 2, HOUR, 0)
    );
    // The configured limit is a day's window: another unit, so its counter was not touched.
    assert_eq!(s.one("edge", "user", "a", None).await, (OK, 100, DAY, 99));
    // Overrides of one descriptor and unit share a count, whatever their requests_per_unit.
    assert_eq!(
        s.one("edge", "user", "a", Some((5, HOUR))).await,
        (OK, 5, HOUR, 2)
    );
    // An override of the configured limit's unit counts in its counter, as upstream's keys
    // (descriptor and window start) make it: 1 counted by the configured limit, 1 now.
    assert_eq!(
        s.one("edge", "user", "a", Some((5, DAY))).await,
        (OK, 5, DAY, 3)
    );
    assert_eq!(s.one("edge", "user", "a", None).await, (OK, 100, DAY, 97));

    // Over one of Floodgate's algorithms, a descriptor no rule matches, and an unlimited one.
    for (key, value) in [("tenant", "t"), ("nobody", "n"), ("free", "f")] {
        let once = Some((1, DAY));
        assert_eq!(
            s.one("edge", key, value, once).await,
            (OK, 1, DAY, 0),
            "{key}"
        );
        assert_eq!(
            s.one("edge", key, value, once).await,
            (OVER, 1, DAY, 0),
            "{key}"
        );
    }
    // 0 blocks; an unknown domain has no limits, overridden or not.
    assert_eq!(
        s.one("edge", "user", "b", Some((0, HOUR))).await,
        (OVER, 0, HOUR, 0)
    );
    assert_eq!(
        s.one("elsewhere", "user", "a", Some((1, HOUR))).await,
        (OK, 0, 0, 0)
    );

    // One request mixing an override and a configured limit: each descriptor its own.
    let response = s
        .call(
            "edge",
            vec![
                descriptor("user", "c", Some((1, HOUR))),
                descriptor("user", "c", None),
            ],
        )
        .await
        .unwrap();
    let limits: Vec<_> = response
        .statuses
        .iter()
        .map(|st| st.current_limit.as_ref().unwrap().requests_per_unit)
        .collect();
    assert_eq!(limits, [1, 100]);
}

#[tokio::test]
async fn a_limit_override_without_a_known_unit_is_invalid_argument() {
    let s = start(CONFIG).await;
    for unit in [0, 8, -1] {
        let status = s
            .call(
                "edge",
                vec![
                    descriptor("user", "a", None),
                    descriptor("user", "a", Some((1, unit))),
                ],
            )
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().contains("descriptors[1].limit.unit"),
            "{}",
            status.message()
        );
    }
    // Nothing was counted.
    assert_eq!(s.one("edge", "user", "a", None).await, (OK, 100, DAY, 99));
}

#[tokio::test]
async fn json_takes_limit_overrides_and_names_bad_fields() {
    let s = start(CONFIG).await;
    let body = |limit: Value| {
        json!({"domain": "edge", "descriptors": [
            {"entries": [{"key": "user", "value": "j"}], "limit": limit}
        ]})
    };
    let (status, answer) = s
        .json(body(json!({"requestsPerUnit": 1, "unit": "HOUR"})))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["statuses"][0]["currentLimit"],
        json!({"requestsPerUnit": 1, "unit": "HOUR"})
    );
    let (status, answer) = s
        .json(body(json!({"requests_per_unit": "1", "unit": "hour"})))
        .await;
    assert_eq!(status, 429, "{answer}");
    assert_eq!(answer["overallCode"], "OVER_LIMIT");

    for (limit, kind, field) in [
        (
            json!({"requestsPerUnit": 1, "unit": "FORTNIGHT"}),
            "unknown_unit",
            "descriptors[0].limit.unit",
        ),
        (
            json!({"requestsPerUnit": 1}),
            "missing_field",
            "descriptors[0].limit.unit",
        ),
        (
            json!({"requestsPerUnit": 4_294_967_296u64, "unit": "HOUR"}),
            "too_large",
            "descriptors[0].limit.requestsPerUnit",
        ),
        (
            json!({"requestsPerUnit": 1.5, "unit": "HOUR"}),
            "not_an_integer",
            "descriptors[0].limit.requestsPerUnit",
        ),
    ] {
        let (status, answer) = s.json(body(limit)).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["type"], kind, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(field), "{message}");
    }
}

/// The headers of an answer, as `(name, value)`.
fn header_pairs(response: &RateLimitResponse) -> Vec<(String, String)> {
    response
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect()
}

/// The reset header's value, checked to be within `1..=max` seconds, with the other two.
fn split_reset(mut headers: Vec<(String, String)>, max: u64) -> Vec<(String, String)> {
    let (_, reset) = headers.pop().expect("three headers");
    let reset: u64 = reset.parse().expect("whole seconds");
    assert!((1..=max).contains(&reset), "{reset}");
    headers
}

#[tokio::test]
async fn rate_limit_headers_are_off_by_default() {
    let s = start(CONFIG).await;
    let response = s
        .call("edge", vec![descriptor("user", "h", None)])
        .await
        .unwrap();
    assert!(response.response_headers_to_add.is_empty());
    let (_, answer) = s
        .json(json!({"domain": "edge", "descriptors": [{"entries": [{"key": "user", "value": "h"}]}]}))
        .await;
    assert_eq!(answer.get("responseHeadersToAdd"), None, "{answer}");
}

#[tokio::test]
async fn rate_limit_headers_describe_the_descriptor_closest_to_its_limit() {
    let s = start(&format!(
        "{CONFIG}rls: {{response_headers: {{enabled: true}}}}\n"
    ))
    .await;
    // The configured 100 per day, and an override of 2 per hour: the override is closer.
    let response = s
        .call(
            "edge",
            vec![
                descriptor("user", "h", None),
                descriptor("user", "h", Some((2, HOUR))),
                descriptor("free", "f", None),
            ],
        )
        .await
        .unwrap();
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(
        split_reset(header_pairs(&response), 3600),
        pairs(&[("RateLimit-Limit", "2"), ("RateLimit-Remaining", "1")])
    );
    // Over the limit too; and an unlimited or unmatched descriptor alone adds none.
    s.call("edge", vec![descriptor("user", "h", Some((2, HOUR)))])
        .await
        .unwrap();
    let over = s
        .call("edge", vec![descriptor("user", "h", Some((2, HOUR)))])
        .await
        .unwrap();
    assert_eq!(over.overall_code, OVER);
    assert_eq!(
        split_reset(header_pairs(&over), 3600),
        pairs(&[("RateLimit-Limit", "2"), ("RateLimit-Remaining", "0")])
    );
    for key in ["free", "nobody"] {
        let none = s
            .call("edge", vec![descriptor(key, "x", None)])
            .await
            .unwrap();
        assert!(none.response_headers_to_add.is_empty(), "{key}");
    }
    // A block (requests_per_unit 0) resets with its unit's window.
    let blocked = s
        .call("edge", vec![descriptor("user", "b", Some((0, HOUR)))])
        .await
        .unwrap();
    assert_eq!(
        split_reset(header_pairs(&blocked), 3600),
        pairs(&[("RateLimit-Limit", "0"), ("RateLimit-Remaining", "0")])
    );
}

#[tokio::test]
async fn json_answers_carry_the_headers_under_their_configured_names() {
    let config = format!(
        "{CONFIG}rls:\n  response_headers: {{enabled: true, limit: X-RateLimit-Limit, remaining: X-RateLimit-Remaining, reset: X-RateLimit-Reset}}\n"
    );
    let s = start(&config).await;
    let (status, answer) = s
        .json(json!({"domain": "edge", "descriptors": [{"entries": [{"key": "user", "value": "j"}]}]}))
        .await;
    assert_eq!(status, 200, "{answer}");
    let headers = answer["responseHeadersToAdd"].as_array().expect("headers");
    let names: Vec<&str> = headers.iter().map(|h| h["key"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "X-RateLimit-Limit",
            "X-RateLimit-Remaining",
            "X-RateLimit-Reset"
        ]
    );
    assert_eq!(headers[0]["value"], "100");
    assert_eq!(headers[1]["value"], "99");
    let reset: u64 = headers[2]["value"].as_str().unwrap().parse().unwrap();
    assert!((1..=86_400).contains(&reset), "{reset}");
}

#[tokio::test]
async fn the_command_line_turns_the_headers_on_over_any_config() {
    let overrides = Overrides {
        response_headers: true,
        ..Overrides::default()
    };
    // What `serve` runs without --config: the built-in config, with the overrides applied.
    let s = start_with(Config::load_or_builtin(None, &overrides).expect("built in")).await;
    let response = s
        .call(
            "example",
            vec![descriptor("remote_address", "10.0.0.1", None)],
        )
        .await
        .unwrap();
    let names: Vec<String> = header_pairs(&response)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        names,
        ["RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"]
    );
}
