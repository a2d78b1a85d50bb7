//! `floodgate serve --store redis://…` end to end: two real `floodgate serve` processes sharing
//! one `redis-server` that the test starts on a free loopback port (never the shared Redis on
//! 6379), so that a limit of N admits N in total, not N per process; and `check-config` refusing
//! a configuration the Redis store cannot run.

use crate::common;

use std::process::Command;

use common::serve::{config_file, serve, Service};
use floodgate_harness::RedisServer;
use serde_json::{json, Value};

async fn check(client: &reqwest::Client, service: &Service, limiter: &str, key: &str) -> Value {
    let body = json!({"limiter": limiter, "key": key});
    let (status, answer) = service.post(client, "/v1/check", &body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

const CONFIG: &str = r#"
limits:
  per_minute: {algorithm: fixed_window, limit: 7, window: 1m}
  smooth: {algorithm: gcra, max_burst: 9, count: 10, period: 1m}
"#;

/// Two processes sharing one Redis admit N in total for a limit of N (fixed window and GCRA),
/// where two memory stores would admit 2N.
#[tokio::test]
async fn two_services_sharing_a_redis_admit_n_in_total() {
    let redis = RedisServer::start();
    let (_dir, path) = config_file(CONFIG);
    let a = serve(&path, &redis.url(), &[]);
    let b = serve(&path, &redis.url(), &[]);
    let client = reqwest::Client::new();
    for (limiter, n) in [("per_minute", 7u64), ("smooth", 10)] {
        let mut allowed = 0;
        // 3N calls, alternating between the services, on one key.
        for i in 0..3 * n {
            let service = if i % 2 == 0 { &a } else { &b };
            let d = check(&client, service, limiter, "alice").await;
            assert_eq!(d["limit"], json!(n), "{limiter}: {d}");
            if d["allowed"] == json!(true) {
                allowed += 1;
            } else {
                assert!(d.get("error").is_none(), "{limiter}: {d}");
            }
        }
        assert_eq!(allowed, n, "{limiter}: admitted across both services");
    }
}

/// `check-config --store redis://…` refuses a limit the Redis store cannot run (a window beyond
/// what its Lua twin keeps exact), naming it; the same file passes on the memory store.
/// Nothing listens at the Redis URL: nothing is sent.
#[test]
fn check_config_refuses_what_the_redis_store_cannot_run() {
    let (_dir, path) =
        config_file("limits:\n  login: {algorithm: sliding_log, limit: 5, window: 30d}\n");
    // A port nothing listens on: the one a harness Redis had, once it is gone.
    let url = {
        let gone = RedisServer::start();
        gone.url()
    };
    let run = |store: &str| {
        Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .args(["check-config", "--store", store])
            .arg(&path)
            .env_remove("FLOODGATE_STORE")
            .output()
            .expect("the floodgate binary runs")
    };
    let out = run(&url);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("limits.login") && stderr.contains("sliding_log"),
        "{stderr}"
    );
    let out = run("memory");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An Envoy rule whose window (2000 weeks, 38 years) is beyond what the Lua twins compute
    // exactly: refused, naming the file, the line, the descriptor and the reason.
    let (_dir2, domains) = config_file(
        "domains:\n  - domain: d\n    descriptors:\n      - key: month\n        \
         rate_limit: {unit: month, requests_per_unit: 3}\n      - key: k\n        \
         rate_limit: {algorithm: fixed_window, limit: 3, window: 2000w}\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["check-config", "--store", &url])
        .arg(&domains)
        .env_remove("FLOODGATE_STORE")
        .output()
        .expect("the floodgate binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let expected = format!(
        "{}:6: `domains[d] descriptor k`: the redis store cannot run the fixed_window algorithm: its window exceeds 2^50 microseconds",
        domains.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    let out = run("mongodb://x");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("store.url"));
}

/// Every Envoy file that runs on memory runs on Redis: the shipped example (its `month` and
/// `year` limits included) passes `check-config --store redis://…`, and two services sharing
/// one Redis count a month's and a year's limits together.
#[tokio::test]
async fn envoy_month_and_year_limits_run_on_redis() {
    let redis = RedisServer::start();
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/config/envoy.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["check-config", "--store", &redis.url()])
        .arg(&example)
        .env_remove("FLOODGATE_STORE")
        .output()
        .expect("the floodgate binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_dir, path) = config_file(
        "domain: billing\ndescriptors:\n  - key: month\n    rate_limit: {unit: month, requests_per_unit: 3}\n  \
         - key: year\n    rate_limit: {unit: year, requests_per_unit: 2}\n",
    );
    let a = serve(&path, &redis.url(), &[]);
    let b = serve(&path, &redis.url(), &[]);
    let client = reqwest::Client::new();
    for (key, n) in [("month", 3), ("year", 2)] {
        let mut allowed = 0;
        for i in 0..3 * n {
            let node = if i % 2 == 0 { &a } else { &b };
            let body = json!({"domain": "billing", "descriptors": [{"entries": [{"key": key, "value": "acme"}]}]});
            let (status, answer) = node.post(&client, "/json", &body).await;
            assert!(status == 200 || status == 429, "{answer}");
            if answer["overallCode"] == "OK" {
                allowed += 1;
            }
        }
        assert_eq!(allowed, n, "{key}: admitted across both services");
    }
}
