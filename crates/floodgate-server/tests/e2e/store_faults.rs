//! A failing Redis, through the service: one real `floodgate serve` on a `redis-server` the
//! test starts (never the machine's own on 6379), which the test pauses (`SIGSTOP`) or kills.
//!
//! Every request is still answered: `/v1/check` fails open, a stage with
//! `on_store_error: fail_closed` refuses with status 503. The breaker opens and shows in `/readyz` (503)
//! and `/metrics`. Once Redis is back (resumed, or restarted empty) exact counting resumes by
//! itself, without restarting floodgate; a lease taken before a restart is released afterwards
//! without an error or a double count.
//!
//! Latencies are printed, not asserted, except for a generous bound (2 s) that catches a hang.
//! Waiting for Redis to come back polls the service, a bounded number of times.

use crate::common;

use std::time::Duration;

use common::serve::{config_file, serve, Service};
use floodgate::{Clock, SystemClock};
use floodgate_harness::RedisServer;
use serde_json::{json, Value};

/// A short timeout and a short cool-down, so that the test sees the breaker open and close in
/// well under a second; a fixed window that no time refills; `request_rate` fails closed.
const CONFIG: &str = r#"
store: {timeout: 100ms, breaker: {threshold: 3, cool_down: 300ms}}
limits:
  window: {algorithm: fixed_window, limit: 5, window: 1h}
plans: {free: {algorithm: fixed_window, limit: 1000, window: 1h}}
default_plan: free
limiters:
  request_rate: {on_store_error: fail_closed}
  concurrency: {capacity: 1, lease_ttl: 1h}
"#;

const HANG: Duration = Duration::from_secs(2);

/// `POST path body`, timed: the status, the answer, and how long it took (at most [`HANG`]).
async fn timed(node: &Service, client: &reqwest::Client, path: &str, body: Value) -> (u16, Value) {
    let clock = SystemClock::new();
    let started = clock.now();
    let (status, answer) = node.post(client, path, &body).await;
    let took = clock.now().saturating_since(started);
    eprintln!("{path} answered {status} in {took:?}");
    assert!(took < HANG, "{path} took {took:?}: {answer}");
    (status, answer)
}

async fn check(node: &Service, client: &reqwest::Client, key: &str) -> Value {
    let body = json!({"limiter": "window", "key": key});
    let (status, answer) = timed(node, client, "/v1/check", body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// While the store is down: `/v1/check` fails open, `/v1/evaluate` (fail closed) answers 503.
async fn answered_while_down(node: &Service, client: &reqwest::Client) {
    for _ in 0..6 {
        let d = check(node, client, "during").await;
        assert_eq!(
            (d["allowed"].clone(), d["failed_open"].clone()),
            (json!(true), json!(true)),
            "{d}"
        );
        let (status, answer) = timed(node, client, "/v1/evaluate", json!({"user": "bob"})).await;
        // The API answers 200; the verdict tells the gateway to answer 503.
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            (answer["allowed"].clone(), answer["status"].clone()),
            (json!(false), json!(503)),
            "{answer}"
        );
        assert_eq!(answer["limiter"], "request_rate", "{answer}");
    }
}

/// Polls (bounded) until a call fails and, right after it, `/readyz` says 503 with the
/// breaker open and `/metrics` shows the breaker open (1).
async fn breaker_opens(node: &Service, client: &reqwest::Client) {
    for _ in 0..50 {
        check(node, client, "during").await;
        let (status, ready) = node.get(client, "/readyz").await;
        let (_, metrics) = node.get(client, "/metrics").await;
        let ready: Value = serde_json::from_str(&ready).expect("JSON");
        if status == 503
            && ready["store"]["breaker"] == "open"
            && metrics.contains("floodgate_store_breaker_state{store=\"redis\"} 1")
        {
            assert_eq!(ready["ready"], false, "{ready}");
            assert_eq!(ready["store"]["last_call_ok"], false, "{ready}");
            assert!(!ready["store"]["url"].as_str().unwrap_or("").is_empty());
            assert!(
                metrics.contains("floodgate_store_last_call_ok{store=\"redis\"} 0"),
                "{metrics}"
            );
            return;
        }
    }
    panic!("the breaker never showed open in /readyz and /metrics");
}

/// Polls (bounded: about 10 s) until a check is a real decision again.
async fn comes_back(node: &Service, client: &reqwest::Client) {
    for _ in 0..100 {
        if check(node, client, "probe")
            .await
            .get("failed_open")
            .is_none()
        {
            let (status, ready) = node.get(client, "/readyz").await;
            assert_eq!(status, 200, "{ready}");
            return;
        }
        // Waiting for another process (Redis, the breaker's cool-down), not standing in for
        // the limiter's time.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("decisions did not become real again within the polling bound");
}

/// On a key never used before: exactly 5 of 8 admitted, every answer a real decision.
async fn counts_exactly(node: &Service, client: &reqwest::Client, key: &str) {
    let mut allowed = 0;
    for _ in 0..8 {
        let d = check(node, client, key).await;
        assert!(d.get("failed_open").is_none(), "{d}");
        allowed += u32::from(d["allowed"] == json!(true));
    }
    assert_eq!(allowed, 5, "exact counting on {key}");
}

#[tokio::test]
async fn a_paused_redis_fails_open_or_closed_and_counting_resumes_by_itself() {
    let redis = RedisServer::start();
    let (_dir, path) = config_file(CONFIG);
    let node = serve(&path, &redis.url(), &[]);
    let client = reqwest::Client::new();
    counts_exactly(&node, &client, "before").await;
    redis.signal("STOP");
    answered_while_down(&node, &client).await;
    breaker_opens(&node, &client).await;
    let (_, metrics) = node.get(&client, "/metrics").await;
    assert!(
        metrics.contains("floodgate_store_errors_total{store=\"redis\",kind=\"timeout\"}"),
        "{metrics}"
    );
    assert!(!metrics.contains("kind=\"timeout\"} 0"), "{metrics}");
    assert!(
        metrics.contains("floodgate_fail_closed_total{limiter=\"request_rate\""),
        "{metrics}"
    );
    redis.signal("CONT");
    comes_back(&node, &client).await;
    counts_exactly(&node, &client, "after").await;
}

#[tokio::test]
async fn a_restarted_redis_is_used_again_and_an_old_lease_releases_cleanly() {
    let mut redis = RedisServer::start();
    let (_dir, path) = config_file(CONFIG);
    let node = serve(&path, &redis.url(), &[]);
    let client = reqwest::Client::new();
    let (status, taken) = timed(&node, &client, "/v1/evaluate", json!({"user": "ann"})).await;
    assert_eq!(
        (status, taken["allowed"].clone()),
        (200, json!(true)),
        "{taken}"
    );
    redis.kill();
    answered_while_down(&node, &client).await;
    breaker_opens(&node, &client).await;
    redis.restart();
    comes_back(&node, &client).await;
    counts_exactly(&node, &client, "after-restart").await;
    // The restarted Redis is empty: the old lease is gone, and giving it back is no error and
    // frees nothing it does not hold.
    let (status, released) = timed(
        &node,
        &client,
        "/v1/release",
        json!({"lease": taken["lease"]}),
    )
    .await;
    assert_eq!((status, released["released"].clone()), (200, json!(false)));
    // One place per user: the first request takes it, the second is refused (no negative count).
    let (_, first) = timed(&node, &client, "/v1/evaluate", json!({"user": "ann"})).await;
    let (_, second) = timed(&node, &client, "/v1/evaluate", json!({"user": "ann"})).await;
    assert_eq!(first["allowed"], true, "{first}");
    assert_eq!(second["allowed"], false, "{second}");
    assert_eq!(second["limiter"], "concurrency", "{second}");
    let (status, _) = timed(
        &node,
        &client,
        "/v1/release",
        json!({"lease": first["lease"]}),
    )
    .await;
    assert_eq!(status, 200);
}

/// `on_store_error: local` with `store.nodes: 2`: while Redis is paused, the node decides on its
/// own memory store at half of each limit (a plan of 4 per hour admits 2), and says so in
/// `/metrics`; once Redis is back, the stage counts there again.
#[tokio::test]
async fn a_paused_redis_decides_locally_at_the_nodes_share() {
    const LOCAL: &str = r#"
store: {timeout: 100ms, breaker: {threshold: 3, cool_down: 300ms}, nodes: 2}
limits:
  window: {algorithm: fixed_window, limit: 5, window: 1h}
plans: {free: {algorithm: fixed_window, limit: 4, window: 1h}}
default_plan: free
limiters:
  request_rate: {on_store_error: local}
"#;
    let redis = RedisServer::start();
    let (_dir, path) = config_file(LOCAL);
    let node = serve(&path, &redis.url(), &[]);
    let client = reqwest::Client::new();
    let evaluate = |user: &'static str| {
        let (node, client) = (&node, &client);
        async move {
            let (status, answer) = timed(node, client, "/v1/evaluate", json!({"user": user})).await;
            assert_eq!(status, 200, "{answer}");
            answer["allowed"] == json!(true)
        }
    };
    // One request counted in Redis before the outage.
    assert!(evaluate("dora").await);
    redis.signal("STOP");
    let mut admitted = Vec::new();
    for _ in 0..4 {
        admitted.push(evaluate("dora").await);
    }
    assert_eq!(admitted, [true, true, false, false], "half of 4, locally");
    let (_, metrics) = node.get(&client, "/metrics").await;
    assert!(
        metrics.contains("floodgate_decided_locally_total{limiter=\"request_rate\""),
        "{metrics}"
    );
    let zero = "floodgate_decided_locally_total{limiter=\"request_rate\",kind=\"request_rate\",mode=\"enforce\"} 0";
    assert!(!metrics.contains(zero), "{metrics}");
    redis.signal("CONT");
    comes_back(&node, &client).await;
    // Counting is Redis's again: a user the outage did not touch gets the whole limit. (For
    // dora, the calls that timed out while Redis was paused still ran when it resumed: Redis
    // counted them, on top of the local decisions.)
    let mut admitted = Vec::new();
    for _ in 0..5 {
        admitted.push(evaluate("erin").await);
    }
    assert_eq!(
        admitted,
        [true, true, true, true, false],
        "Redis's count again"
    );
}

/// A slow store makes decisions pile up; beyond `connections.max_in_flight` the service sheds
/// the excess at once (503 `overloaded`, `Retry-After: 1`) instead of queueing it, while the
/// calls it took wait for the store and fail open. Health and metrics still answer.
#[tokio::test]
async fn beyond_max_in_flight_the_service_sheds_at_once_instead_of_queueing() {
    let redis = RedisServer::start();
    // A long timeout and no breaker, so that the taken calls hold their places while Redis is
    // paused.
    // No pipeline: its stages' snapshots would ask the paused Redis too.
    let config = "store: {timeout: 30s, breaker: {threshold: 0}}\n\
                  connections: {max_in_flight: 4}\n\
                  limiters: {}\n\
                  limits:\n  window: {algorithm: fixed_window, limit: 5, window: 1h}\n";
    let (_dir, path) = config_file(config);
    let node = serve(&path, &redis.url(), &[]);
    let client = reqwest::Client::new();
    check(&node, &client, "warm").await;
    redis.signal("STOP");
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..24 {
        let (client, http) = (client.clone(), node.http.clone());
        calls.spawn(async move {
            let response = client
                .post(format!("{http}/v1/check"))
                .json(&json!({"limiter": "window", "key": format!("k{i}")}))
                .send()
                .await
                .expect("an answer");
            let retry = response.headers().get("retry-after").cloned();
            let status = response.status().as_u16();
            let body: Value = response.json().await.expect("JSON");
            (status, retry, body)
        });
    }
    // While Redis is still paused, the calls beyond the four in flight come back shed.
    let mut shed = 0;
    while shed < 20 {
        let (status, retry, body) = calls.join_next().await.unwrap().unwrap();
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"]["type"], "overloaded", "{body}");
        assert_eq!(retry.as_ref().map(|v| v.as_bytes()), Some(&b"1"[..]));
        shed += 1;
    }
    let (status, metrics) = node.get(&client, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("floodgate_overload_shed_total 20"),
        "{metrics}"
    );
    assert!(metrics.contains("floodgate_calls_in_flight 4"), "{metrics}");
    redis.signal("CONT");
    while let Some(call) = calls.join_next().await {
        let (status, _, body) = call.unwrap();
        assert_eq!(status, 200, "the four taken are answered: {body}");
    }
}
