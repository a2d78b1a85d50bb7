//! Floodgate's own reserve and settle over HTTP (`POST /v1/reserve`, `POST /v1/settle`), on
//! the memory store, a Redis and a Redis Cluster of the test's own: an estimate held, settled
//! down (a refund) or up (a charge, counted even past the budget), once (a second settle says
//! so and changes nothing), on any node sharing the store; a refused reservation holds
//! nothing; a limit that cannot settle is refused before anything is taken; an altered,
//! foreign or expired reservation is refused and changes nothing.

use crate::common;

use common::serve::{config_file, serve, Service};
use floodgate::{LeaseId, Nanos};
use floodgate_harness::{RedisCluster, RedisServer};
use floodgate_server::lease_token::LeaseTokens;
use floodgate_server::reservation_token::Held;
use serde_json::{json, Value};

const SECRET: &str = "one secret for the whole fleet";

const CONFIG: &str = "limits:
  tokens: {algorithm: fixed_window, limit: 1000, window: 1h}
  bucket: {algorithm: token_bucket, rate: 0.001, capacity: 1000}
  log: {algorithm: sliding_log, limit: 1000, window: 1h}
reservation_ttl: 10m
";

fn node(store: &str) -> (common::serve::TempDir, Service) {
    let (dir, path) = config_file(CONFIG);
    let node = serve(&path, store, &[("FLOODGATE_LEASE_SECRET", SECRET)]);
    (dir, node)
}

async fn reserve(node: &Service, limit: &str, key: &str, estimate: u64) -> (u16, Value) {
    let client = reqwest::Client::new();
    let body = json!({"limiter": limit, "key": key, "estimate": estimate});
    node.post(&client, "/v1/reserve", &body).await
}

async fn settle(node: &Service, token: &Value, actual: u64) -> (u16, Value) {
    let client = reqwest::Client::new();
    let body = json!({"reservation": token, "actual": actual});
    node.post(&client, "/v1/settle", &body).await
}

/// An LLM budget's day on `limit` for `user`, reserving on `a` and settling on `b` (the same
/// node, or another sharing the store).
async fn a_budget_is_reserved_and_settled(a: &Service, b: &Service, limit: &str, user: &str) {
    let (status, first) = reserve(a, limit, user, 600).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        (first["allowed"].clone(), first["remaining"].clone()),
        (json!(true), json!(400))
    );
    assert_eq!(first["expires_after"], json!(600.0));
    let (_, second) = reserve(a, limit, user, 300).await;
    assert_eq!(second["remaining"], json!(100));
    let (_, refused) = reserve(a, limit, user, 200).await;
    assert_eq!(refused["allowed"], json!(false), "{refused}");
    assert_eq!(
        refused["reservation"],
        Value::Null,
        "a refusal holds nothing"
    );

    // The first used less than its estimate: the rest comes back.
    let (status, settled) = settle(b, &first["reservation"], 250).await;
    assert_eq!(status, 200, "{settled}");
    assert_eq!(settled["settled"], json!(true));
    assert_eq!(
        (settled["refunded"].clone(), settled["charged"].clone()),
        (json!(350), json!(0))
    );
    assert_eq!(settled["remaining"], json!(450));
    // Once: a second settle, on either node, changes nothing and says so.
    for node in [a, b] {
        let (status, again) = settle(node, &first["reservation"], 0).await;
        assert_eq!(status, 200, "{again}");
        assert_eq!(again["settled"], json!(false), "{again}");
        assert!(again["message"]
            .as_str()
            .unwrap()
            .contains("already settled"));
    }
    // The second used more: charged, even past the budget.
    let (_, settled) = settle(b, &second["reservation"], 500).await;
    assert_eq!(settled["charged"], json!(200));
    assert_eq!(settled["remaining"], json!(250));
    let (_, third) = reserve(a, limit, user, 250).await;
    let (_, over) = settle(a, &third["reservation"], 400).await;
    assert_eq!(
        (over["allowed"].clone(), over["charged"].clone()),
        (json!(false), json!(150))
    );
    // 150 over the budget: nothing more is reserved until it is paid back.
    let (_, waiting) = reserve(b, limit, user, 0).await;
    assert_eq!(waiting["allowed"], json!(false), "{waiting}");
}

/// Refusals that change nothing: a limit that cannot settle, a bad key, an altered, foreign or
/// expired reservation.
async fn bad_calls_are_refused_and_change_nothing(node: &Service) {
    let (status, body) = reserve(node, "log", "alice", 10).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["type"], json!("cannot_settle"));
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("sliding_log"));
    let (status, body) = reserve(node, "nope", "alice", 10).await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (404, json!("unknown_limiter"))
    );
    let (status, body) = reserve(node, "tokens", "", 10).await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (400, json!("empty_key"))
    );
    let (status, body) = reserve(node, "tokens", "a\u{1f}b", 10).await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (400, json!("key_not_carried"))
    );

    let (_, held) = reserve(node, "tokens", "mallory", 100).await;
    let token = held["reservation"].as_str().unwrap().to_string();
    // Someone raising the estimate to be refunded more: the signature no longer matches.
    let forged = Held {
        estimate: 900,
        ..Held::open(&LeaseTokens::new(SECRET), &token).unwrap()
    }
    .seal(&LeaseTokens::new("another secret entirely"));
    let (status, body) = settle(node, &json!(forged), 0).await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (400, json!("altered_reservation"))
    );
    let (status, body) = settle(node, &json!("r1.nope"), 0).await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (400, json!("malformed_reservation"))
    );
    let expired = Held {
        limit: "tokens".into(),
        key: "mallory".into(),
        estimate: 100,
        id: LeaseId::random(),
        expires: Nanos(1),
    }
    .seal(&LeaseTokens::new(SECRET));
    let (status, body) = settle(node, &json!(expired), 0).await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (409, json!("reservation_expired"))
    );
    // None of it touched mallory's reservation: it still settles, once.
    let (_, settled) = settle(node, &json!(token), 40).await;
    assert_eq!(
        (settled["settled"].clone(), settled["remaining"].clone()),
        (json!(true), json!(960))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_on_the_memory_store() {
    let (_dir, node) = node("memory");
    a_budget_is_reserved_and_settled(&node, &node, "tokens", "alice").await;
    a_budget_is_reserved_and_settled(&node, &node, "bucket", "alice").await;
    bad_calls_are_refused_and_change_nothing(&node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_settle_on_any_node_sharing_a_redis() {
    let redis = RedisServer::start();
    let (_a_dir, a) = node(&redis.url());
    let (_b_dir, b) = node(&redis.url());
    a_budget_is_reserved_and_settled(&a, &b, "tokens", "alice").await;
    a_budget_is_reserved_and_settled(&b, &a, "bucket", "bob").await;
    bad_calls_are_refused_and_change_nothing(&a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_on_a_redis_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let (_a_dir, a) = node(&cluster.url());
    let (_b_dir, b) = node(&cluster.url());
    for user in ["alice", "bob", "carol"] {
        a_budget_is_reserved_and_settled(&a, &b, "tokens", user).await;
    }
    bad_calls_are_refused_and_change_nothing(&b).await;
}

/// A pipeline of two usage budgets, all or nothing: a user's (1,000 a day) and their
/// organisation's (1,500 a day, a level of 1,200 per user), and a requests limit of constant
/// cost that a reservation does not hold.
const PIPELINE: &str = r#"
pipeline:
  - name: users
    kind: limit
    key: "{user}"
    all_or_nothing: true
    spec: { algorithm: fixed_window, limit: 1000, window: 1d }
  - name: orgs
    kind: limit
    all_or_nothing: true
    keys:
      - name: org
        key: "{{{attributes.org}}}"
        spec: { algorithm: fixed_window, limit: 1500, window: 1d }
      - name: share
        key: "{{{attributes.org}}}/{user}"
        spec: { algorithm: fixed_window, limit: 1200, window: 1d }
  - name: requests
    kind: limit
    key: "{user}"
    cost: 1
    spec: { algorithm: fixed_window, limit: 100, window: 1d }
"#;

async fn reserve_as(node: &Service, user: &str, estimate: u64) -> (u16, Value) {
    let client = reqwest::Client::new();
    let body = json!({"user": user, "attributes": {"org": "acme"}, "estimate": estimate});
    node.post(&client, "/v1/reserve", &body).await
}

/// Reserved through one node's pipeline, settled on another's: every budget or none.
async fn a_pipeline_reservation_holds_every_budget_or_none(a: &Service, b: &Service, user: &str) {
    let (status, held) = reserve_as(a, user, 600).await;
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["allowed"], json!(true));
    assert!(held["reservation"].as_str().unwrap().starts_with("p1."));
    let (_, settled) = settle(b, &held["reservation"], 250).await;
    assert_eq!(settled["settled"], json!(true), "{settled}");
    assert_eq!(settled["refunded"], json!(350));
    let remaining: Vec<u64> = settled["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["remaining"].as_u64().unwrap())
        .collect();
    // The user's 1,000, the org's 1,500 and the share's 1,200, 250 used of each.
    assert_eq!(remaining, [750, 1_250, 950], "{settled}");
    let (_, again) = settle(a, &held["reservation"], 0).await;
    assert_eq!(again["settled"], json!(false), "once");

    // Charged past the user's budget: refused next, and the refused estimate takes nothing
    // from the organisation's.
    let (_, held) = reserve_as(a, user, 700).await;
    let (_, settled) = settle(b, &held["reservation"], 900).await;
    assert_eq!(settled["charged"], json!(200));
    assert_eq!(
        settled["allowed"],
        json!(false),
        "past the user's budget: {settled}"
    );
    let (status, refused) = reserve_as(b, user, 10).await;
    assert_eq!(status, 200);
    assert_eq!(refused["allowed"], json!(false));
    assert_eq!(refused["limiter"], json!("users"));
    assert_eq!(refused["reservation"], Value::Null);
    let other = format!("{user}-colleague");
    // One stage alone, on a key given as it is: settled as the pipeline's reservations are.
    let client = reqwest::Client::new();
    let body = json!({"stage": "users", "key": format!("{user}-solo"), "estimate": 100});
    let (status, held) = a.post(&client, "/v1/reserve", &body).await;
    assert_eq!(
        (status, held["remaining"].clone()),
        (200, json!(900)),
        "{held}"
    );
    let (_, settled) = settle(b, &held["reservation"], 40).await;
    assert_eq!(settled["stages"][0]["remaining"], json!(960), "{settled}");
    let body = json!({"stage": "nope", "key": "k", "estimate": 1});
    let (status, body) = a.post(&client, "/v1/reserve", &body).await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (404, json!("unknown_stage"))
    );
    let (_, held) = reserve_as(a, &other, 350).await;
    assert_eq!(
        held["allowed"],
        json!(true),
        "1,150 + 350 fit in the org's 1,500: {held}"
    );
    let (_, settled) = settle(a, &held["reservation"], 350).await;
    let remaining: Vec<u64> = settled["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["remaining"].as_u64().unwrap())
        .collect();
    assert_eq!(remaining, [650, 0, 850], "{settled}");
}

fn pipeline_node(store: &str) -> (common::serve::TempDir, Service) {
    let (dir, path) = config_file(&format!("{CONFIG}{PIPELINE}"));
    let node = serve(&path, store, &[("FLOODGATE_LEASE_SECRET", SECRET)]);
    (dir, node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_reservations_in_memory_on_redis_and_on_a_cluster() {
    let (_dir, node) = pipeline_node("memory");
    a_pipeline_reservation_holds_every_budget_or_none(&node, &node, "ann").await;
    let (status, body) = reserve_as(&node, "a\u{1e}b", 1).await;
    assert_eq!(
        (status, body["error"]["type"].clone()),
        (400, json!("key_not_carried"))
    );

    let redis = RedisServer::start();
    let (_a_dir, a) = pipeline_node(&redis.url());
    let (_b_dir, b) = pipeline_node(&redis.url());
    a_pipeline_reservation_holds_every_budget_or_none(&a, &b, "ann").await;

    let cluster = RedisCluster::start(3, 0);
    let (_c_dir, c) = pipeline_node(&cluster.url());
    let (_d_dir, d) = pipeline_node(&cluster.url());
    a_pipeline_reservation_holds_every_budget_or_none(&c, &d, "ann").await;
}
