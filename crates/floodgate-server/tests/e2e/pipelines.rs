//! The worked configurations of docs/building-your-pipeline.md, served by the real binary and
//! called over HTTP as a gateway would: each behaves as the guide says.

use crate::common;

use std::path::{Path, PathBuf};

use common::serve::serve;
use serde_json::{json, Value};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/config/pipelines")
        .join(name)
}

/// `POST /v1/evaluate` as `user` with `attributes` (and `endpoint`, when given).
fn call(user: &str, endpoint: Option<&str>, attributes: Value) -> Value {
    let mut body = json!({ "user": user, "attributes": attributes });
    if let Some(endpoint) = endpoint {
        body["endpoint"] = endpoint.into();
    }
    body
}

#[tokio::test]
async fn per_ip_then_plans_then_order_writes() {
    let node = serve(
        &example("api.yaml"),
        "memory",
        &[("FLOODGATE_ADMIN_TOKEN", "t0ken-long-enough")],
    );
    let client = reqwest::Client::new();
    let evaluate = |body: Value| {
        let (node, client) = (&node, &client);
        async move { node.post(client, "/v1/evaluate", &body).await }
    };
    // Five order writes a minute per user, from any address; reads are not counted.
    for i in 0..5 {
        let ip = format!("198.51.100.{i}");
        let body = call("ann", Some("/orders"), json!({"ip": ip, "method": "POST"}));
        let (status, answer) = evaluate(body).await;
        assert_eq!(
            (status, answer["allowed"].as_bool()),
            (200, Some(true)),
            "{answer}"
        );
    }
    let get = call(
        "ann",
        Some("/orders/7"),
        json!({"ip": "198.51.100.9", "method": "GET"}),
    );
    assert_eq!(evaluate(get).await.1["allowed"], true);
    let sixth = call(
        "ann",
        Some("/orders/7"),
        json!({"ip": "198.51.100.9", "method": "PUT"}),
    );
    let (_, answer) = evaluate(sixth).await;
    assert_eq!(answer["status"], 429, "{answer}");
    assert_eq!(answer["limiter"], "order_writes");
    let message = answer["message"].as_str().unwrap();
    assert!(
        message.starts_with("limit order_writes allows 5 requests per 1 min; retry in"),
        "{message}"
    );

    // One address, many users: its 20-request burst, then 429 from per_ip.
    for i in 0..20 {
        let body = call(
            &format!("u{i}"),
            None,
            json!({"ip": "203.0.113.7", "method": "GET"}),
        );
        assert_eq!(evaluate(body).await.1["allowed"], true, "request {i}");
    }
    let body = call("u99", None, json!({"ip": "203.0.113.7", "method": "GET"}));
    let (_, answer) = evaluate(body).await;
    assert_eq!(
        (answer["status"].as_u64(), answer["limiter"].as_str()),
        (Some(429), Some("per_ip"))
    );
    assert!(answer["headers"]["retry-after"].is_string(), "{answer}");

    // No address: a 400 naming the stage and the attribute, and nothing counted.
    let (status, answer) = evaluate(call("ann", None, json!({"method": "GET"}))).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["type"], "missing_field", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("per_ip") && message.contains("attributes.ip"),
        "{message}"
    );
    // An attribute that is no scalar is refused, naming it.
    let (status, answer) = evaluate(call("ann", None, json!({"ip": ["a"]}))).await;
    assert_eq!(
        (status, answer["error"]["type"].as_str()),
        (400, Some("bad_attribute")),
        "{answer}"
    );
}

#[tokio::test]
async fn organisations_and_their_users() {
    let node = serve(&example("tenants.yaml"), "memory", &[]);
    let client = reqwest::Client::new();
    let evaluate = |user: &str, attributes: Value| {
        let (node, client) = (&node, &client);
        let body = call(user, None, attributes);
        async move { node.post(client, "/v1/evaluate", &body).await.1 }
    };
    // A user's 30 a minute, then the user level refuses, and the organisation keeps its count.
    for i in 0..30 {
        let answer = evaluate("alice", json!({"org": "acme"})).await;
        assert_eq!(answer["allowed"], true, "request {i}: {answer}");
    }
    let answer = evaluate("alice", json!({"org": "acme"})).await;
    assert_eq!(answer["limiter"], "tenants", "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .starts_with("limit user allows 30"),
        "{answer}"
    );
    // 70 more from other users spend the organisation's 100; then it refuses everyone.
    for i in 0..70 {
        let answer = evaluate(&format!("user{}", i % 3), json!({"org": "acme"})).await;
        assert_eq!(answer["allowed"], true, "request {i}: {answer}");
    }
    let answer = evaluate("zed", json!({"org": "acme"})).await;
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .starts_with("limit org allows 100"),
        "{answer}"
    );
    assert_eq!(
        evaluate("zed", json!({"org": "globex"})).await["allowed"],
        true
    );

    // An API key is limited per key (10 at once), and never shown.
    let secret = "sk_live_4f9a0c2b7e";
    for i in 0..10 {
        let answer = evaluate("bob", json!({"org": "initech", "api_key": secret})).await;
        assert_eq!(answer["allowed"], true, "request {i}: {answer}");
    }
    let answer = evaluate("carl", json!({"org": "initech", "api_key": secret})).await;
    assert_eq!(answer["limiter"], "per_key", "{answer}");
    assert!(!answer.to_string().contains(secret));
    for path in ["/metrics", "/v1/dashboard", "/"] {
        let (_, text) = node.get(&client, path).await;
        assert!(!text.contains(secret), "{path} shows the key");
    }
    // Bounds: at most 8 attributes.
    let many: serde_json::Map<String, Value> =
        (0..9).map(|i| (format!("a{i}"), Value::from(i))).collect();
    let (status, answer) = node
        .post(
            &client,
            "/v1/evaluate",
            &json!({"user": "x", "attributes": many}),
        )
        .await;
    assert_eq!(
        (status, answer["error"]["type"].as_str()),
        (400, Some("bad_attribute")),
        "{answer}"
    );
}

/// The adaptive limit starts at 20 on this node, refuses the 21st request in flight with 503,
/// and learns from the latencies given back with the leases: while they stay at the no-load
/// level, it grows. /metrics and the dashboard show what it learned.
#[tokio::test]
async fn an_adaptive_limit_learns_from_released_latencies() {
    let node = serve(&example("adaptive.yaml"), "memory", &[]);
    let client = reqwest::Client::new();
    let evaluate = |user: String| {
        let (node, client) = (&node, &client);
        async move {
            node.post(client, "/v1/evaluate", &json!({"user": user}))
                .await
                .1
        }
    };
    let mut leases = Vec::new();
    for i in 0..20 {
        let answer = evaluate(format!("u{i}")).await;
        assert_eq!(answer["allowed"], true, "{answer}");
        leases.push(answer["lease"].as_str().unwrap().to_string());
    }
    let answer = evaluate("late".into()).await;
    assert_eq!(
        (answer["status"].as_u64(), answer["limiter"].as_str()),
        (Some(503), Some("adaptive"))
    );
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("learned from its latency"),
        "{answer}"
    );
    for lease in &leases {
        let body = json!({"lease": lease, "latency_ms": 12.5});
        let (status, answer) = node.post(&client, "/v1/release", &body).await;
        assert_eq!(
            (status, &answer["released"]),
            (200, &json!(true)),
            "{answer}"
        );
    }
    let (status, answer) = node
        .post(
            &client,
            "/v1/release",
            &json!({"lease": leases[0], "latency_ms": -1}),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    let (_, metrics) = node.get(&client, "/metrics").await;
    let value = |name: &str| -> f64 {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in\n{metrics}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(
        value("floodgate_adaptive_samples_total{limiter=\"adaptive\"}"),
        20.0
    );
    assert!(value("floodgate_adaptive_limit{limiter=\"adaptive\",algorithm=\"vegas\"}") > 20.0);
    assert_eq!(
        value("floodgate_adaptive_rtt_seconds{limiter=\"adaptive\",estimate=\"last\"}"),
        0.0125
    );
    let (_, dashboard) = node.get(&client, "/v1/dashboard").await;
    let dashboard: Value = serde_json::from_str(&dashboard).unwrap();
    let stage = dashboard["stages"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == "adaptive"))
        .unwrap_or_else(|| panic!("{dashboard}"));
    assert_eq!(stage["algorithm"], "vegas", "{stage}");
    assert!(stage["limit"].as_f64().unwrap() > 20.0, "{stage}");
}

/// All or nothing holds whichever stage refuses: while an `adaptive_concurrency` stage after
/// them refuses (503), neither an all-or-nothing `daily` stage nor a hierarchical stage's
/// levels are spent, so once the adaptive stage admits again the user has every request of
/// the day left. On the memory store and on a real Redis.
#[tokio::test]
async fn a_node_local_refusal_spends_nothing_from_all_or_nothing_stages() {
    const CONFIG: &str = r#"
pipeline:
  - name: daily
    kind: limit
    key: "{user}"
    spec: {algorithm: fixed_window, limit: 3, window: 1d}
    all_or_nothing: true
  - name: tenant
    kind: limit
    keys:
      - {name: org, key: "{{{user}}}", spec: {algorithm: fixed_window, limit: 4, window: 1d}}
      - {name: member, key: "{{{user}}}/member", spec: {algorithm: fixed_window, limit: 3, window: 1d}}
  - name: adaptive
    kind: adaptive_concurrency
    adaptive: {algorithm: gradient2, initial_limit: 1, min_limit: 1, max_limit: 1}
    lease_ttl: 1h
"#;
    let redis = floodgate_harness::RedisServer::start();
    for store in ["memory".to_string(), redis.url()] {
        let (_dir, path) = common::serve::config_file(CONFIG);
        let node = serve(&path, &store, &[]);
        let client = reqwest::Client::new();
        let evaluate = |user: &str| {
            let (node, client) = (&node, &client);
            let body = json!({"user": user});
            async move { node.post(client, "/v1/evaluate", &body).await.1 }
        };
        // Someone else holds the adaptive stage's one place.
        let holder = evaluate("holder").await;
        assert_eq!(holder["allowed"], true, "{store}: {holder}");
        for _ in 0..10 {
            let answer = evaluate("bob").await;
            assert_eq!(
                (answer["status"].as_u64(), answer["limiter"].as_str()),
                (Some(503), Some("adaptive")),
                "{store}: {answer}"
            );
        }
        let release = json!({"lease": holder["lease"]});
        let (status, answer) = node.post(&client, "/v1/release", &release).await;
        assert_eq!(status, 200, "{store}: {answer}");
        // Bob's day is whole: three requests (each released), then `daily` refuses.
        for i in 0..3 {
            let answer = evaluate("bob").await;
            assert_eq!(answer["allowed"], true, "{store}: request {i}: {answer}");
            let release = json!({"lease": answer["lease"]});
            node.post(&client, "/v1/release", &release).await;
        }
        let answer = evaluate("bob").await;
        assert_eq!(
            (answer["status"].as_u64(), answer["limiter"].as_str()),
            (Some(429), Some("daily")),
            "{store}: {answer}"
        );
    }
}
