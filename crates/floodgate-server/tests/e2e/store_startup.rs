//! A store that does not work must not look healthy. Real `floodgate serve` processes against
//! `redis-server` processes the test starts (never the machine's own on 6379):
//!
//! - at start-up the store is tried (for `store.startup_timeout`, retrying); when it cannot be
//!   used, `serve` refuses to start, naming the URL (password hidden) and the cause by kind:
//!   refused, a missing or wrong password, a database the server lacks;
//! - with `store.start_without: true` it starts, says so loudly, answers `/readyz` with 503
//!   naming the kind of failure, fails open, and turns ready by itself once the store works,
//!   with no traffic at all (a load balancer sends none to a node that is not ready).

use crate::common;

use common::serve::{config_file, serve, serve_refused};
use floodgate_harness::RedisServer;
use serde_json::{json, Value};

const REFUSE: &str = "store: {startup_timeout: 300ms}\n";
const START_WITHOUT: &str = "store: {startup_timeout: 300ms, start_without: true, breaker: {threshold: 3, cool_down: 100ms}}\nlimits:\n  window: {algorithm: fixed_window, limit: 5, window: 1h}\n";

#[test]
fn a_refused_store_stops_start_up_naming_the_url_and_the_cause() {
    let mut redis = RedisServer::start();
    redis.kill();
    let (_dir, path) = config_file(REFUSE);
    let (code, stderr) = serve_refused(&path, &redis.url(), &[]);
    assert_eq!(code, Some(1), "{stderr}");
    let expected = format!("cannot use the store {}", redis.url());
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(stderr.contains("cannot connect to the store"), "{stderr}");
    assert!(stderr.contains("refused"), "{stderr}");
    assert!(!stderr.contains("timed out"), "{stderr}");
    assert!(stderr.contains("store.start_without"), "{stderr}");
}

#[test]
fn credentials_and_databases_are_checked_before_serving() {
    let redis = RedisServer::start_with_password("s3cret-pw");
    let (_dir, path) = config_file(REFUSE);
    // No password given.
    let (code, stderr) = serve_refused(&path, &redis.url(), &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("the server requires a password"),
        "{stderr}"
    );
    // A wrong one: named by kind, never shown.
    let wrong = format!("redis://:not-the-pw@127.0.0.1:{}", redis.port());
    let (code, stderr) = serve_refused(&path, &wrong, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("wrong user name or password"), "{stderr}");
    assert!(stderr.contains("redis://:***@127.0.0.1"), "{stderr}");
    assert!(!stderr.contains("not-the-pw"), "{stderr}");
    // The right one, from the environment, but a database the server does not have.
    let (_dir, path) =
        config_file("store: {startup_timeout: 300ms, password_env: TEST_REDIS_PW}\n");
    let url = format!("redis://127.0.0.1:{}/99", redis.port());
    let (code, stderr) = serve_refused(&path, &url, &[("TEST_REDIS_PW", "s3cret-pw")]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("database"), "{stderr}");
    assert!(!stderr.contains("s3cret-pw"), "{stderr}");
    // All right: it serves.
    let url = format!("redis://127.0.0.1:{}", redis.port());
    let node = serve(&path, &url, &[("TEST_REDIS_PW", "s3cret-pw")]);
    drop(node);
}

async fn readyz(client: &reqwest::Client, http: &str) -> (u16, Value) {
    let response = client
        .get(format!("{http}/readyz"))
        .send()
        .await
        .expect("the service answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON"))
}

#[tokio::test]
async fn starting_without_the_store_is_loud_not_ready_and_recovers_without_traffic() {
    let mut redis = RedisServer::start();
    redis.kill();
    let (_dir, path) = config_file(START_WITHOUT);
    let node = serve(&path, &redis.url(), &[]);
    assert!(
        node.started.contains("STARTING WITHOUT A WORKING STORE"),
        "{}",
        node.started
    );
    let client = reqwest::Client::new();
    let (status, body) = readyz(&client, &node.http).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["ready"], false, "{body}");
    assert_eq!(body["store"]["last_error"], "refused", "{body}");
    assert!(
        body["reason"].as_str().unwrap_or("").contains("refused"),
        "{body}"
    );
    // Decisions fail open meanwhile.
    let (status, answer) = node
        .post(
            &client,
            "/v1/check",
            &json!({"limiter": "window", "key": "k"}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["failed_open"], true, "{answer}");
    // Redis comes up: the node turns ready by itself, with no request but `/readyz`.
    redis.restart();
    let mut ready = false;
    for _ in 0..100 {
        if readyz(&client, &node.http).await.0 == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(ready, "the node never turned ready once Redis was up");
    let (_, answer) = node
        .post(
            &client,
            "/v1/check",
            &json!({"limiter": "window", "key": "k"}),
        )
        .await;
    assert_eq!(
        (answer["allowed"].clone(), answer["remaining"].clone()),
        (json!(true), json!(4)),
        "{answer}"
    );
}

/// A wrong database with `start_without`: `/readyz` is 503 while every call fails, not ready
/// because nothing opened the breaker yet.
#[tokio::test]
async fn a_store_whose_calls_fail_is_not_ready_even_with_its_breaker_closed() {
    let redis = RedisServer::start();
    let (_dir, path) = config_file(
        "store: {startup_timeout: 300ms, start_without: true, breaker: {threshold: 0, cool_down: 1s}}\n",
    );
    let node = serve(&path, &format!("{}/99", redis.url()), &[]);
    let client = reqwest::Client::new();
    let (status, body) = readyz(&client, &node.http).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["store"]["breaker"], "closed", "{body}");
    assert_eq!(body["store"]["last_error"], "protocol", "{body}");
}
