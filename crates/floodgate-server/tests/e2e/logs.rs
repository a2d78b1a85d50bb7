//! Decisions are visible in the logs: with `LOG_LEVEL=debug`, one line per decision (the Envoy
//! descriptor with its domain, hits, count, limit and outcome; each pipeline stage with its
//! key; each named limit), and none of HTTP/2's or TLS's framing; with `LOG_FORMAT=json`,
//! every line is JSON, the listening line included. Real `floodgate serve` processes.

use crate::common;

use common::serve::{config_file, serve, Service};
use floodgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use serde_json::{json, Value};

const CONFIG: &str = r#"
limits:
  login: {algorithm: sliding_log, limit: 5, window: 1m}
pipeline:
  - name: per_user
    kind: limit
    key: "{user}"
    spec: {algorithm: fixed_window, limit: 10, window: 1m}
domains:
  - domain: edge
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1}
"#;

/// One call of each kind of decision, over HTTP/1 and gRPC (HTTP/2).
async fn decide(node: &Service) {
    let client = reqwest::Client::new();
    let hit = json!({"domain": "edge", "descriptors": [{"entries": [{"key": "user", "value": "alice"}]}]});
    assert_eq!(node.post(&client, "/json", &hit).await.0, 200);
    assert_eq!(node.post(&client, "/json", &hit).await.0, 429);
    let (status, _) = node
        .post(&client, "/v1/evaluate", &json!({"user": "bob"}))
        .await;
    assert_eq!(status, 200);
    let (status, _) = node
        .post(
            &client,
            "/v1/check",
            &json!({"limiter": "login", "key": "carol"}),
        )
        .await;
    assert_eq!(status, 200);
    let mut grpc = floodgate_server::grpc::RateLimitServiceClient::connect(node.grpc.clone())
        .await
        .unwrap();
    let request = floodgate_server::grpc::RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![floodgate_server::grpc::RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: "dave".into(),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    };
    grpc.should_rate_limit(request).await.unwrap();
}

#[tokio::test]
async fn debug_shows_one_line_per_decision_and_no_framing() {
    let (_dir, path) = config_file(CONFIG);
    let node = serve(&path, "memory", &[("LOG_LEVEL", "debug")]);
    decide(&node).await;
    let over = node.logged("descriptor=user=alice").await;
    node.logged("limit decided").await;
    node.logged("descriptor=user=dave").await;
    let lines = node.log();
    let decided: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("descriptor decided"))
        .collect();
    assert_eq!(decided.len(), 3, "{lines:#?}");
    assert!(
        decided[1].contains("domain=edge")
            && decided[1].contains("descriptor=user=alice")
            && decided[1].contains("hits=1")
            && decided[1].contains("count=2")
            && decided[1].contains("limit=1")
            && decided[1].contains("outcome=\"over_limit\""),
        "{over}\n{lines:#?}"
    );
    assert!(decided[2].contains("descriptor=user=dave"), "{lines:#?}");
    let stage = node.logged("stage decided").await;
    assert!(
        stage.contains("stage=per_user")
            && stage.contains("key=\"per_user:bob\"")
            && stage.contains("allowed=true")
            && stage.contains("remaining=9")
            && stage.contains("limit=10"),
        "{stage}"
    );
    let limit = node.logged("limit decided").await;
    assert!(
        limit.contains("limit=\"login\"") && limit.contains("key=\"carol\""),
        "{limit}"
    );
    // No framing from the libraries under it.
    for noisy in [
        " h2::",
        " hyper::",
        " hyper_util::",
        " tonic::",
        " rustls::",
    ] {
        assert!(
            !lines.iter().any(|l| l.contains(noisy)) && !node.started.contains(noisy),
            "{noisy}: {lines:#?}"
        );
    }
}

#[tokio::test]
async fn json_logs_are_json_on_every_line() {
    let (_dir, path) = config_file(CONFIG);
    let node = serve(
        &path,
        "memory",
        &[("LOG_LEVEL", "debug"), ("LOG_FORMAT", "json")],
    );
    decide(&node).await;
    node.logged("descriptor decided").await;
    let lines: Vec<String> = node
        .started
        .lines()
        .map(str::to_string)
        .chain(node.log())
        .filter(|l| !l.is_empty())
        .collect();
    assert!(lines.len() > 4, "{lines:#?}");
    for line in &lines {
        let value: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(value["fields"]["message"].is_string(), "{line}");
    }
    // The listening line was one of them, as JSON (the harness found it).
    assert!(node.http.starts_with("http://127.0.0.1:"));
}
