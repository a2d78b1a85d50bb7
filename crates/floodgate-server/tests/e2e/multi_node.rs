//! Many nodes, one limit: three real `floodgate serve` processes sharing one `redis-server`
//! that the test starts on a free loopback port (never the machine's own on 6379), with
//! concurrent requests spread across them. For a limit of N, exactly N are admitted in total,
//! whatever the algorithm; a concurrency lease taken on one node and given back on another is
//! counted fleet-wide, with no setting: the nodes sign lease tokens with a secret they share
//! through the store. Windows are long (an hour) so that no time refills during the test.

use crate::common;

use std::sync::Arc;

use common::serve::{config_file, serve, Service};
use floodgate_harness::RedisServer;
use serde_json::{json, Value};
use tokio::task::JoinSet;

const LIMIT: u64 = 10;

/// Three limits of 10, one per algorithm Redis runs, none refilling within the test; and a
/// pipeline allowing 2 requests in flight per user. A timeout generous enough for a loaded
/// test machine: a timed-out call would fail open and spoil the count.
const CONFIG: &str = r#"
store: {timeout: 2s}
limits:
  window: {algorithm: fixed_window, limit: 10, window: 1h}
  bucket: {algorithm: token_bucket, rate: 0.0001, capacity: 10}
  smooth: {algorithm: gcra, max_burst: 9, count: 1, period: 1h}
plans: {free: {algorithm: token_bucket, rate: 1000, capacity: 1000}}
default_plan: free
limiters:
  request_rate: {}
  concurrency: {capacity: 2, lease_ttl: 1h}
"#;

fn three_nodes(redis: &RedisServer, path: &std::path::PathBuf) -> Arc<Vec<Service>> {
    Arc::new((0..3).map(|_| serve(path, &redis.url(), &[])).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_admit_exactly_n_in_total_for_every_algorithm() {
    let redis = RedisServer::start();
    let (_dir, path) = config_file(CONFIG);
    let nodes = three_nodes(&redis, &path);
    let client = reqwest::Client::new();
    for limiter in ["window", "bucket", "smooth"] {
        // 4N concurrent calls on one key, dealt round-robin to the three nodes.
        let mut calls = JoinSet::new();
        for i in 0..4 * LIMIT as usize {
            let (nodes, client) = (nodes.clone(), client.clone());
            calls.spawn(async move {
                let body = json!({"limiter": limiter, "key": "alice"});
                nodes[i % 3].post(&client, "/v1/check", &body).await
            });
        }
        let mut allowed = 0;
        while let Some(answer) = calls.join_next().await {
            let (status, d) = answer.expect("the call task ends");
            assert_eq!(status, 200, "{limiter}: {d}");
            assert!(d.get("failed_open").is_none(), "{limiter}: {d}");
            if d["allowed"] == json!(true) {
                allowed += 1;
            }
        }
        assert_eq!(allowed, LIMIT, "{limiter}: admitted across three nodes");
    }
}

async fn evaluate(node: &Service, client: &reqwest::Client) -> Value {
    let (status, answer) = node
        .post(client, "/v1/evaluate", &json!({"user": "alice"}))
        .await;
    assert!(status == 200 || status == 429, "{status}: {answer}");
    answer
}

async fn release(node: &Service, client: &reqwest::Client, lease: &Value) -> bool {
    let (status, answer) = node
        .post(client, "/v1/release", &json!({"lease": lease}))
        .await;
    assert_eq!(status, 200, "{answer}");
    answer["released"].as_bool().expect("released is a bool")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_on_one_node_and_released_on_another_counts_fleet_wide() {
    let redis = RedisServer::start();
    let (_dir, path) = config_file(CONFIG);
    let nodes = three_nodes(&redis, &path);
    let client = reqwest::Client::new();
    let (a, b, c) = (&nodes[0], &nodes[1], &nodes[2]);
    // Two places in flight for alice, taken on two nodes; the third node sees both.
    let first = evaluate(a, &client).await;
    let second = evaluate(b, &client).await;
    assert_eq!(first["allowed"], true, "{first}");
    assert_eq!(second["allowed"], true, "{second}");
    let third = evaluate(c, &client).await;
    assert_eq!(third["allowed"], false, "{third}");
    assert_eq!(third["limiter"], "concurrency", "{third}");
    // The first lease, given back on the third node, frees a place for every node.
    assert!(release(c, &client, &first["lease"]).await);
    assert!(!release(b, &client, &first["lease"]).await, "released once");
    let fourth = evaluate(a, &client).await;
    assert_eq!(fourth["allowed"], true, "{fourth}");
    assert_eq!(evaluate(b, &client).await["allowed"], false);
    // Both remaining leases back, on nodes other than their own: the fleet is empty again.
    assert!(release(a, &client, &second["lease"]).await);
    assert!(release(c, &client, &fourth["lease"]).await);
    for node in nodes.iter().take(2) {
        assert_eq!(evaluate(node, &client).await["allowed"], true);
    }
}

/// A secret given by hand wins over the store's, on every node that has it; one too short to
/// be safe stops start-up; a token from a node signing otherwise is refused saying how to fix
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_secret_given_by_hand_is_checked_and_wins() {
    let redis = RedisServer::start();
    let (_dir, path) = config_file(CONFIG);
    let (code, stderr) =
        common::serve::serve_refused(&path, &redis.url(), &[("FLOODGATE_LEASE_SECRET", "short")]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("FLOODGATE_LEASE_SECRET holds 5 bytes") && stderr.contains("at least 16"),
        "{stderr}"
    );
    let secret = ("FLOODGATE_LEASE_SECRET", "one secret for the whole fleet");
    let a = serve(&path, &redis.url(), &[secret]);
    let b = serve(&path, &redis.url(), &[secret]);
    let shared = serve(&path, &redis.url(), &[]);
    let client = reqwest::Client::new();
    let taken = evaluate(&a, &client).await;
    assert!(release(&b, &client, &taken["lease"]).await);
    // A node on the store's secret does not open the hand-set secret's tokens.
    let taken = evaluate(&a, &client).await;
    let (status, answer) = shared
        .post(&client, "/v1/release", &json!({"lease": taken["lease"]}))
        .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["type"], "altered_lease_token", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("FLOODGATE_LEASE_SECRET"), "{message}");
}

/// The stages that measure the process they run in (the utilization shedder, the adaptive
/// concurrency limit) decide on each node alone, also on a shared store: `serve` says so at
/// start-up, once per such stage, and says nothing of the kind on the memory store.
#[tokio::test]
async fn a_shared_store_names_the_stages_that_stay_on_each_node() {
    let redis = RedisServer::start();
    let (_dir, path) = config_file(
        "pipeline:\n  - {name: per_user, kind: limit, spec: {algorithm: fixed_window, limit: 5, window: 1m}}\n  - {name: workers, kind: utilization, workers: 8}\n  - {name: learned, kind: adaptive_concurrency}\n",
    );
    let node = serve(&path, &redis.url(), &[]);
    for (stage, kind) in [
        ("workers", "utilization"),
        ("learned", "adaptive_concurrency"),
    ] {
        let line = node.logged(&format!("stage={stage}")).await;
        assert!(
            line.contains(&format!("kind=\"{kind}\""))
                && line.contains("decides on this node alone"),
            "{line}"
        );
    }
    assert!(!node.log().iter().any(|l| l.contains("stage=per_user")));
    let alone = serve(&path, "memory", &[]);
    let _ = alone.logged("floodgate serving").await;
    assert!(!alone
        .log()
        .iter()
        .any(|l| { l.contains("decides on this node alone") }));
}
