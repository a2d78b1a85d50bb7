//! One validation everywhere: what one face of the service refuses, the others refuse the same
//! way; request fields that become store keys are bounded; configuration numbers beyond what a
//! limit can express are refused naming the field and the bound; messages name what is wrong
//! once, and never mask the server's own words as if they were a password. Real processes.

use crate::common;

use common::cli::floodgate;
use common::serve::{config_file, serve, serve_refused};
use floodgate_harness::RedisServer;
use serde_json::{json, Value};

const CONFIG: &str = r#"
connections: {max_key_bytes: 16}
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

fn error_type(answer: &Value) -> &str {
    answer["error"]["type"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn requests_are_refused_alike_and_keys_are_bounded() {
    let (_dir, path) = config_file(CONFIG);
    let node = serve(&path, "memory", &[]);
    let client = reqwest::Client::new();

    // A descriptor without entries matches nothing: OK with no limit, as upstream answers it.
    let (status, answer) = node
        .post(
            &client,
            "/json",
            &json!({"domain": "edge", "descriptors": [{"entries": []}, {}]}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer,
        json!({"overallCode": "OK", "statuses": [{"code": "OK"}, {"code": "OK"}]})
    );
    let (status, answer) = node
        .post(
            &client,
            "/json",
            &json!({"domain": "edge", "descriptors": [{"entries": [{"key": "", "value": "x"}]}]}),
        )
        .await;
    assert_eq!(status, 400, "{answer}");

    // /v1/check: no empty key, none over the bound.
    let (status, answer) = node
        .post(
            &client,
            "/v1/check",
            &json!({"limiter": "login", "key": ""}),
        )
        .await;
    assert_eq!(
        (status, error_type(&answer)),
        (400, "empty_key"),
        "{answer}"
    );
    let long = "k".repeat(17);
    let (status, answer) = node
        .post(
            &client,
            "/v1/check",
            &json!({"limiter": "login", "key": long}),
        )
        .await;
    assert_eq!((status, error_type(&answer)), (400, "too_long"), "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("field `key`: 17 bytes") && message.contains("connections.max_key_bytes"),
        "{message}"
    );
    // /v1/evaluate: the user, and the endpoint.
    let (status, answer) = node
        .post(&client, "/v1/evaluate", &json!({"user": long}))
        .await;
    assert_eq!((status, error_type(&answer)), (400, "too_long"), "{answer}");
    let (status, answer) = node
        .post(
            &client,
            "/v1/evaluate",
            &json!({"user": "u", "endpoint": long}),
        )
        .await;
    assert_eq!((status, error_type(&answer)), (400, "too_long"), "{answer}");
    // Nothing was counted: the user still has all ten.
    let (_, answer) = node
        .post(&client, "/v1/evaluate", &json!({"user": "u"}))
        .await;
    let left = answer["headers"]["ratelimit"].as_str().unwrap_or_default();
    assert!(left.starts_with("\"requests\";r=9;"), "{answer}");
}

/// `check-config` on `text`: its error line.
fn refused(text: &str) -> String {
    let (_dir, path) = config_file(text);
    let out = floodgate(&["check-config", path.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(1), "{text}");
    String::from_utf8_lossy(&out.stderr).trim().to_string()
}

#[test]
fn configuration_numbers_and_names_are_refused_once_and_plainly() {
    let e = refused(
        "plans: {free: {algorithm: token_bucket, rate: 1e300, capacity: 10}}\ndefault_plan: free\n",
    );
    assert!(
        e.contains("plans.free.rate")
            && e.contains("1e300")
            && e.contains("from 1e-9 to 1e9 per second"),
        "{e}"
    );
    let e = refused("plans: {free: {algorithm: token_bucket, rate: 10, capacity: 99999999999999999999999}}\ndefault_plan: free\n");
    assert!(
        e.contains("plans.free.capacity: 99999999999999999999999 is beyond the largest whole number a limit takes (18446744073709551615)"),
        "{e}"
    );
    let e = refused("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n");
    assert!(
        e.ends_with("descriptors[0].rate_limit.requests_per_unit: `-1` is not a whole number from 0 to 4294967295"),
        "{e}"
    );
    let e = refused("pipeline:\n  - name: x\n    kind: limit\n    spec: {algorithm: fixed_window, limit: 1, window: 1s}\n    when: {methd: GET}\n");
    assert!(
        e.contains("`pipeline[0].when.methd`")
            && e.contains("unknown field `methd`: the fields are user, plan, endpoint, priority and attributes.NAME"),
        "{e}"
    );
}

#[test]
fn a_short_admin_token_is_refused_at_start_up() {
    let (_dir, path) = config_file(CONFIG);
    let (code, stderr) = serve_refused(&path, "memory", &[("FLOODGATE_ADMIN_TOKEN", "short")]);
    // An unusable environment setting, as a bad argument: status 2.
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("FLOODGATE_ADMIN_TOKEN holds 5 bytes") && stderr.contains("at least 16"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("short"),
        "the token itself is never shown: {stderr}"
    );
}

#[test]
fn a_wrong_password_is_masked_in_the_url_only() {
    let redis = RedisServer::start_with_password("right-one");
    let (_dir, path) = config_file("store: {startup_timeout: 300ms}\n");
    let url = format!("redis://:wrong@127.0.0.1:{}", redis.port());
    let (code, stderr) = serve_refused(&path, &url, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains(&format!("redis://:***@127.0.0.1:{}", redis.port()))
            && last.contains("wrong user name or password"),
        "{last}"
    );
    assert!(!last.contains("*** user name"), "{last}");
}
