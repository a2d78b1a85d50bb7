//! Token budgets charged and given back as Envoy sends them (`hits_addend` per descriptor, and
//! Envoy 1.38's `is_negative_hits`), over real gRPC and `/json`, on every store: the memory
//! store, a Redis and a Redis Cluster of the test's own, and Redis in envoyproxy/ratelimit's
//! key layout. A check of 0 counts nothing and is over only past the budget; a descriptor's
//! own hits (the stream-done charge) count even past the budget, as upstream counts them; a
//! refund lowers the count, never below zero, and is never OVER_LIMIT, under a fixed window
//! and a token bucket alike; a refund to a limit that
//! cannot give back (a sliding log) is refused as invalid,
//! naming the descriptor, and counts nothing; refunds show in `refunded_hits`.

use crate::common;

use common::serve::{config_file, serve, Service};
use floodgate_harness::{RedisCluster, RedisServer};
use floodgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use floodgate_server::grpc::{RateLimitDescriptor, RateLimitRequest, RateLimitServiceClient};
use serde_json::json;

/// 1,000 tokens a user a year (a window no test crosses), a sliding log and a token bucket.
const DOMAINS: &str = "domains:
  - domain: llm
    descriptors:
      - key: user
        rate_limit: {unit: year, requests_per_unit: 1000}
      - key: strict
        rate_limit: {algorithm: sliding_log, limit: 1000, window: 1m}
      - key: bucket
        rate_limit: {algorithm: token_bucket, rate: 10, capacity: 1000}
      - key: window
        rate_limit: {algorithm: sliding_window, limit: 1000, window: 1h, buckets: 60}
";

const OK: i32 = 1;
const OVER_LIMIT: i32 = 2;

/// One descriptor `key=value` of `llm`, `hits` tokens, given back when `refund`: the code and
/// the remaining, or the gRPC error.
async fn call(
    node: &Service,
    key: &str,
    value: &str,
    hits: u64,
    refund: bool,
) -> Result<(i32, u32), tonic::Status> {
    let mut client = RateLimitServiceClient::connect(node.grpc.clone())
        .await
        .unwrap();
    let request = RateLimitRequest {
        domain: "llm".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.into(),
                value: value.into(),
            }],
            hits_addend: Some(hits),
            is_negative_hits: refund,
            ..Default::default()
        }],
        hits_addend: 0,
    };
    let answer = client.should_rate_limit(request).await?.into_inner();
    Ok((answer.overall_code, answer.statuses[0].limit_remaining))
}

/// The budget's life as Envoy and AI Gateway drive it: a check at request time (0 hits), the
/// charge when the stream is done, and refunds of what was reserved and not used.
async fn a_budget_is_charged_and_given_back(node: &Service, user: &str) {
    let at = |hits, refund| call(node, "user", user, hits, refund);
    assert_eq!(
        at(0, false).await.unwrap(),
        (OK, 1000),
        "a check counts nothing"
    );
    assert_eq!(at(700, false).await.unwrap(), (OK, 300));
    assert_eq!(at(500, true).await.unwrap(), (OK, 800), "500 given back");
    assert_eq!(at(0, false).await.unwrap(), (OK, 800));
    assert_eq!(
        at(5_000, true).await.unwrap(),
        (OK, 1000),
        "never below zero"
    );
    assert_eq!(at(1000, false).await.unwrap(), (OK, 0));
    // A stream's tokens are charged even past the budget (as upstream counts every hit).
    assert_eq!(at(1, false).await.unwrap().0, OVER_LIMIT);
    // A refund is never over the limit, even of a key that is.
    assert_eq!(at(1, true).await.unwrap().0, OK);
    assert_eq!(at(400, true).await.unwrap(), (OK, 400));
    // Streams admitted by the same check, charged when done: the second lands past the
    // budget, counts in full, and the next request-time check is over until it is paid back.
    assert_eq!(at(350, false).await.unwrap(), (OK, 50));
    assert_eq!(at(250, false).await.unwrap(), (OVER_LIMIT, 0));
    assert_eq!(at(0, false).await.unwrap().0, OVER_LIMIT, "200 over");
    assert_eq!(at(150, true).await.unwrap().0, OK);
    assert_eq!(at(0, false).await.unwrap().0, OVER_LIMIT, "50 over");
    assert_eq!(at(50, true).await.unwrap(), (OK, 0));
    assert_eq!(
        at(0, false).await.unwrap(),
        (OK, 0),
        "at the budget, not over it"
    );
    assert_eq!(at(1000, true).await.unwrap(), (OK, 1000));
}

fn served(store: &str, extra: &str) -> (common::serve::TempDir, Service) {
    let (dir, path) = config_file(&format!("{extra}{DOMAINS}"));
    let node = serve(&path, store, &[]);
    (dir, node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_on_the_memory_store() {
    let (_dir, node) = served("memory", "");
    a_budget_is_charged_and_given_back(&node, "alice").await;
    // Every algorithm that can give back does, in memory.
    assert_eq!(call(&node, "bucket", "b", 600, false).await.unwrap().1, 400);
    assert_eq!(call(&node, "bucket", "b", 200, true).await.unwrap().0, OK);
    let (_, left) = call(&node, "bucket", "b", 0, false).await.unwrap();
    assert!((600..=610).contains(&left), "{left}");
    // A charge past the bucket leaves it in debt: over until 10 tokens a second refill it.
    assert_eq!(
        call(&node, "bucket", "b", 900, false).await.unwrap(),
        (OVER_LIMIT, 0)
    );
    assert_eq!(
        call(&node, "bucket", "b", 0, false).await.unwrap().0,
        OVER_LIMIT
    );
    // The sliding window counter gives back too (its newest units first).
    assert_eq!(
        call(&node, "window", "w", 600, false).await.unwrap(),
        (OK, 400)
    );
    assert_eq!(
        call(&node, "window", "w", 250, true).await.unwrap(),
        (OK, 650)
    );
    // The sliding log takes no charge: its hits are checked, and refused ones count nothing.
    assert_eq!(
        call(&node, "strict", "s", 900, false).await.unwrap(),
        (OK, 100)
    );
    assert_eq!(
        call(&node, "strict", "s", 200, false).await.unwrap(),
        (OVER_LIMIT, 100)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_on_redis() {
    let redis = RedisServer::start();
    let (_dir, node) = served(&redis.url(), "");
    a_budget_is_charged_and_given_back(&node, "alice").await;
    assert_eq!(
        call(&node, "window", "w", 600, false).await.unwrap(),
        (OK, 400)
    );
    assert_eq!(
        call(&node, "window", "w", 250, true).await.unwrap(),
        (OK, 650)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_on_a_redis_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let (_dir, node) = served(&cluster.url(), "");
    for user in ["alice", "bob", "carol"] {
        a_budget_is_charged_and_given_back(&node, user).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_in_upstreams_key_layout() {
    let redis = RedisServer::start();
    let (_dir, node) = served(&redis.url(), "store: {layout: envoyproxy}\n");
    a_budget_is_charged_and_given_back(&node, "alice").await;
    // Given back in upstream's own key: DECRBY, the key removed at zero.
    let mut redis_cli = std::process::Command::new("redis-cli");
    redis_cli.args(["-p", &redis.port().to_string(), "--scan"]);
    call(&node, "user", "dave", 10, false).await.unwrap();
    let keys = String::from_utf8(redis_cli.output().unwrap().stdout).unwrap();
    assert!(keys.contains("llm_user_dave_"), "{keys}");
    call(&node, "user", "dave", 10, true).await.unwrap();
    let keys = String::from_utf8(redis_cli.output().unwrap().stdout).unwrap();
    assert!(!keys.contains("llm_user_dave_"), "{keys}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_a_limit_cannot_take_is_refused_naming_the_descriptor() {
    let (_dir, node) = served("memory", "");
    assert_eq!(
        call(&node, "strict", "s", 10, false).await.unwrap(),
        (OK, 990)
    );
    let refused = call(&node, "strict", "s", 10, true).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains("descriptors[0] (strict=s)")
            && refused.message().contains("sliding_log"),
        "{}",
        refused.message()
    );
    // Nothing was counted.
    assert_eq!(call(&node, "strict", "s", 0, false).await.unwrap().1, 990);
    let client = reqwest::Client::new();
    let body = json!({"domain": "llm", "descriptors": [{"entries": [{"key": "strict", "value": "s"}], "hitsAddend": 5, "isNegativeHits": true}]});
    let (status, answer) = node.post(&client, "/json", &body).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["type"], "refund_not_supported");

    // On Redis the token bucket gives back as in memory, and the sliding log is refused.
    let redis = RedisServer::start();
    let (_dir, on_redis) = served(&redis.url(), "");
    assert_eq!(
        call(&on_redis, "bucket", "b", 600, false).await.unwrap().1,
        400
    );
    assert_eq!(
        call(&on_redis, "bucket", "b", 200, true).await.unwrap().0,
        OK
    );
    let (_, left) = call(&on_redis, "bucket", "b", 0, false).await.unwrap();
    assert!((600..=610).contains(&left), "{left}");
    let refused = call(&on_redis, "strict", "s", 10, true).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains("sliding_log"),
        "{}",
        refused.message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_count_in_refunded_hits_and_json_takes_them() {
    let (_dir, node) = served("memory", "");
    let client = reqwest::Client::new();
    let charge = json!({"domain": "llm", "descriptors": [{"entries": [{"key": "user", "value": "erin"}], "hitsAddend": 300}]});
    let (status, _) = node.post(&client, "/json", &charge).await;
    assert_eq!(status, 200);
    let refund = json!({"domain": "llm", "descriptors": [{"entries": [{"key": "user", "value": "erin"}], "hitsAddend": 120, "isNegativeHits": true}]});
    let (status, answer) = node.post(&client, "/json", &refund).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["statuses"][0]["limitRemaining"], 820);
    let (_, metrics) = node.get(&client, "/metrics").await;
    assert!(
        metrics.contains(
            "floodgate_rls_descriptor_hits_total{domain=\"llm\",key=\"llm.user\",stat=\"refunded_hits\"} 120"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "floodgate_rls_descriptor_hits_total{domain=\"llm\",key=\"llm.user\",stat=\"total_hits\"} 300"
        ),
        "a refund is not a hit: {metrics}"
    );
}

/// The configuration check says up front which descriptors a refund would be refused by.
#[test]
fn check_config_names_the_limits_that_cannot_give_back() {
    let (_dir, path) = config_file(DOMAINS);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .arg("check-config")
        .arg(&path)
        .env_remove("FLOODGATE_STORE")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("refunds (is_negative_hits) refused by: llm.strict (sliding_log)"),
        "{text}"
    );
}
