//! Cached mode across processes: three real `floodgate serve` processes in cached mode on one
//! `redis-server` the test starts, offered ten times a limit together. The nodes admit at least
//! the limit (never under-admission) and at most the limit plus what each admits in one sync
//! interval and round trip (the stated bound), every admission reaches Redis, and the
//! overshoot and the sync lag show in `/metrics` and `/readyz`.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::serve::{config_file, serve, Service};
use floodgate_harness::RedisServer;
use serde_json::json;
use tokio::task::JoinSet;

const LIMIT: u64 = 100;
const SYNC_MS: u64 = 100;
/// Requests per second offered to each node: 3 × 334 ≈ 10 × LIMIT over the test's second.
const PER_NODE: u64 = 334;

/// One fixed window of 100 per hour (so that nothing refills during the test), in cached mode.
const CONFIG: &str = r#"
store: {mode: cached, sync_interval: 100ms, nodes: 3, timeout: 2s}
limits:
  window: {algorithm: fixed_window, limit: 100, window: 1h}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_cached_nodes_at_ten_times_the_limit_keep_the_bound() {
    let redis = RedisServer::start();
    let (_dir, path) = config_file(CONFIG);
    let nodes: Arc<Vec<Service>> =
        Arc::new((0..3).map(|_| serve(&path, &redis.url(), &[])).collect());
    let client = reqwest::Client::new();

    // Each node gets a request every 3 ms for a second, the three at once.
    let mut calls = JoinSet::new();
    let mut ticks = tokio::time::interval(Duration::from_micros(1_000_000 / PER_NODE));
    for _ in 0..PER_NODE {
        ticks.tick().await;
        for i in 0..3 {
            let (nodes, client) = (nodes.clone(), client.clone());
            calls.spawn(async move {
                let body = json!({"limiter": "window", "key": "alice"});
                nodes[i].post(&client, "/v1/check", &body).await
            });
        }
    }
    let mut admitted = 0;
    while let Some(answer) = calls.join_next().await {
        let (status, d) = answer.expect("the call task ends");
        assert_eq!(status, 200, "{d}");
        assert!(d.get("failed_open").is_none(), "{d}");
        admitted += u64::from(d["allowed"] == json!(true));
    }
    // What each node admits at most in a sync interval plus a round trip (given 100 ms of
    // slack for a loaded machine's scheduling), summed over the three.
    let bound = 3 * (PER_NODE * (SYNC_MS + 100)).div_ceil(1000);
    println!("admitted {admitted} of a limit of {LIMIT} (bound {bound})");
    assert!(admitted >= LIMIT, "{admitted} admitted: under the limit");
    assert!(
        admitted <= LIMIT + bound,
        "{admitted} admitted: beyond the bound"
    );

    // Every admission reaches Redis with the next syncs.
    let mut global = 0;
    for _ in 0..100 {
        let keys = redis.cli(&["--raw", "KEYS", "*alice*"]).unwrap_or_default();
        if let [key] = keys.split_whitespace().collect::<Vec<_>>().as_slice() {
            let value = redis.cli(&["--raw", "GET", key]).unwrap_or_default();
            global = value
                .trim()
                .rsplit(':')
                .next()
                .unwrap()
                .parse()
                .unwrap_or(0);
            if global == admitted {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(global, admitted, "the count in Redis");

    let (status, metrics) = nodes[0].get(&client, "/metrics").await;
    assert_eq!(status, 200);
    for needle in [
        "floodgate_cached_sync_lag_seconds ",
        "floodgate_cached_syncs_total{result=\"ok\"}",
        "floodgate_cached_cost_total{state=\"sent\"}",
        "floodgate_cached_sync_seconds_count",
    ] {
        assert!(metrics.contains(needle), "{needle} in\n{metrics}");
    }
    // Some node's sync saw the global count beyond the limit.
    let mut seen = false;
    for node in nodes.iter() {
        let (_, metrics) = node.get(&client, "/metrics").await;
        seen |= metrics.contains("floodgate_cached_overshoot_count{limiter=");
    }
    assert!(
        seen == (admitted > LIMIT),
        "overshoot metric vs {admitted} admitted"
    );
    let (status, ready) = nodes[1].get(&client, "/readyz").await;
    assert_eq!(status, 200, "{ready}");
    assert!(ready.contains("\"mode\":\"cached\""), "{ready}");
    assert!(ready.contains("\"sync_lag_seconds\":"), "{ready}");
}
