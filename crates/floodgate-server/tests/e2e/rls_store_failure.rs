//! What an Envoy call answers when the store fails, as `rls.on_store_error` says: `ok` (every
//! descriptor OK, the default), `over_limit` (every descriptor OVER_LIMIT) or `unavailable` (no
//! decision: gRPC `UNAVAILABLE`, `/json` 503, so that Envoy's `failure_mode_deny` decides).
//! Real `floodgate serve` processes on a `redis-server` of the test's own, which the test kills.

use crate::common;

use common::serve::{config_file, serve};
use floodgate_harness::RedisServer;
use floodgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use floodgate_server::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use floodgate_server::grpc::{RateLimitDescriptor, RateLimitRequest, RateLimitServiceClient};
use serde_json::json;

fn config(policy: &str) -> String {
    format!(
        "store: {{timeout: 100ms, breaker: {{threshold: 0}}}}\n\
         rls: {{on_store_error: {policy}}}\n\
         domains:\n  - domain: edge\n    descriptors:\n      - key: ip\n        \
         rate_limit: {{unit: minute, requests_per_unit: 5}}\n"
    )
}

fn request() -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "ip".into(),
                value: "10.0.0.1".into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

#[tokio::test]
async fn a_failed_store_answers_as_the_policy_says() {
    let mut redis = RedisServer::start();
    let policies = ["ok", "over_limit", "unavailable"];
    let files: Vec<_> = policies.iter().map(|p| config_file(&config(p))).collect();
    let nodes: Vec<_> = files
        .iter()
        .map(|(_, path)| serve(path, &redis.url(), &[]))
        .collect();
    let client = reqwest::Client::new();
    let body = json!({"domain": "edge", "descriptors": [{"entries": [{"key": "ip", "value": "10.0.0.1"}]}]});
    // While Redis works, every node decides: OK, one hit counted.
    for node in &nodes {
        let (status, answer) = node.post(&client, "/json", &body).await;
        assert_eq!(
            (status, &answer["overallCode"]),
            (200, &json!("OK")),
            "{answer}"
        );
    }
    redis.kill();
    let (ok, over_limit, unavailable) = (&nodes[0], &nodes[1], &nodes[2]);
    // ok: through, with no limit reported.
    let (status, answer) = ok.post(&client, "/json", &body).await;
    assert_eq!(
        (status, &answer["overallCode"]),
        (200, &json!("OK")),
        "{answer}"
    );
    let mut grpc = RateLimitServiceClient::connect(ok.grpc.clone())
        .await
        .unwrap();
    let answer = grpc
        .should_rate_limit(request())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32);
    assert!(answer.statuses[0].current_limit.is_none(), "{answer:?}");
    // over_limit: refused.
    let (status, answer) = over_limit.post(&client, "/json", &body).await;
    assert_eq!(
        (status, &answer["overallCode"]),
        (429, &json!("OVER_LIMIT")),
        "{answer}"
    );
    let mut grpc = RateLimitServiceClient::connect(over_limit.grpc.clone())
        .await
        .unwrap();
    let answer = grpc
        .should_rate_limit(request())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.overall_code, Code::OverLimit as i32);
    assert_eq!(answer.statuses[0].code, Code::OverLimit as i32);
    // unavailable: no decision.
    let (status, answer) = unavailable.post(&client, "/json", &body).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["type"], "store_unavailable", "{answer}");
    let mut grpc = RateLimitServiceClient::connect(unavailable.grpc.clone())
        .await
        .unwrap();
    let status = grpc.should_rate_limit(request()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("store"), "{status:?}");
    // Each outcome is counted.
    for (node, outcome) in [
        (ok, "failed_open"),
        (over_limit, "failed_closed"),
        (unavailable, "unavailable"),
    ] {
        let (_, metrics) = node.get(&client, "/metrics").await;
        let line = format!("floodgate_calls_total{{endpoint=\"grpc\",outcome=\"{outcome}\"}} 1");
        assert!(metrics.contains(&line), "{line}\n{metrics}");
    }
}
