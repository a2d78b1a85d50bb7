//! Migrating from envoyproxy/ratelimit without a window of double limits: with
//! `store.layout: envoyproxy`, Floodgate counts in upstream's keys with upstream's commands, so
//! that during a rolling update the old pods and the new ones count together. The test runs the
//! counting side of upstream's Redis protocol as upstream documents it (the key
//! `prefix + domain + "_" + key_value_… + window start`, `INCRBY` then `EXPIRE unit + jitter`,
//! over when the count passes the limit), through `redis-cli`, next to real `floodgate serve`
//! processes on one `redis-server` of the test's own.

use crate::common;

use std::time::Duration;

use floodgate::Clock;

use common::serve::{config_file, serve, Service};
use floodgate_harness::RedisServer;
use serde_json::{json, Value};

const HOUR: u64 = 3600;

/// Unix seconds, as upstream's pods read them (and Floodgate's system clock).
fn now_secs() -> u64 {
    floodgate::SystemClock::new().now().0 / 1_000_000_000
}

/// One of upstream's pods deciding one hit of `entries` in `domain` under `limit` per hour,
/// as upstream's fixed-window cache does: `INCRBY` then `EXPIRE`, over when the count passes
/// the limit. Whether the hit was allowed.
fn upstream_hit(
    redis: &RedisServer,
    prefix: &str,
    domain: &str,
    entries: &[(&str, &str)],
    limit: u64,
) -> bool {
    let now = now_secs();
    let mut key = format!("{prefix}{domain}_");
    for (k, v) in entries {
        key.push_str(&format!("{k}_{v}_"));
    }
    key.push_str(&(now / HOUR * HOUR).to_string());
    let after: u64 = redis
        .cli(&["INCRBY", &key, "1"])
        .expect("redis answers")
        .trim()
        .parse()
        .expect("a count");
    redis
        .cli(&["EXPIRE", &key, &(HOUR + 17).to_string()])
        .expect("redis answers");
    after <= limit
}

async fn floodgate_hit(
    client: &reqwest::Client,
    node: &Service,
    entries: &[(&str, &str)],
) -> (bool, Value) {
    let entries: Vec<Value> = entries
        .iter()
        .map(|(k, v)| json!({"key": k, "value": v}))
        .collect();
    let body = json!({"domain": "rl", "descriptors": [{"entries": entries}]});
    let (status, answer) = node.post(client, "/json", &body).await;
    assert!(status == 200 || status == 429, "{status}: {answer}");
    (answer["overallCode"] == "OK", answer)
}

fn config(extra: &str) -> String {
    format!(
        "store: {{layout: envoyproxy, key_prefix: 'prefix:', timeout: 500ms{extra}}}\n\
         domains:\n  - domain: rl\n    descriptors:\n      - key: user\n        \
         rate_limit: {{unit: hour, requests_per_unit: 5}}\n      - key: team\n        \
         rate_limit: {{unit: hour, requests_per_unit: 100}}\n"
    )
}

/// Runs `attempt` until it runs within one hour window (a test crossing the hour would see
/// the counters start again).
async fn within_one_window<F, Fut>(mut attempt: F)
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for round in 0..3 {
        let window = now_secs() / HOUR;
        attempt(round).await;
        if now_secs() / HOUR == window {
            return;
        }
    }
    panic!("three attempts crossed an hour boundary");
}

#[tokio::test]
async fn old_and_new_pods_count_together() {
    let redis = RedisServer::start();
    let (_dir, path) = config_file(&config(""));
    let node = serve(&path, &redis.url(), &[]);
    let client = reqwest::Client::new();
    within_one_window(|round| {
        let (redis, node, client) = (&redis, &node, &client);
        async move {
            let user = format!("alice-{round}");
            let entries = [("user", user.as_str())];
            // Alternating between an old pod and a new one: 5 in all, not 5 each.
            let mut allowed = 0;
            for i in 0..10 {
                let ok = if i % 2 == 0 {
                    upstream_hit(redis, "prefix:", "rl", &entries, 5)
                } else {
                    floodgate_hit(client, node, &entries).await.0
                };
                allowed += usize::from(ok);
            }
            assert_eq!(allowed, 5, "one limit across both");
            // Upstream's key, as upstream writes it, with upstream's TTL.
            let window = now_secs() / HOUR * HOUR;
            let key = format!("prefix:rl_user_{user}_{window}");
            assert_eq!(
                redis.cli(&["GET", &key]).unwrap().trim(),
                "10",
                "every hit counted, as upstream counts"
            );
            let ttl: u64 = redis.cli(&["TTL", &key]).unwrap().trim().parse().unwrap();
            assert!(ttl > HOUR - 60 && ttl <= HOUR + 300, "{ttl}");
        }
    })
    .await;
    // What Floodgate answers matches the count upstream's pods left.
    within_one_window(|round| {
        let (redis, node, client) = (&redis, &node, &client);
        async move {
            let user = format!("bob-{round}");
            let entries = [("user", user.as_str())];
            assert!(upstream_hit(redis, "prefix:", "rl", &entries, 5));
            assert!(upstream_hit(redis, "prefix:", "rl", &entries, 5));
            let (ok, answer) = floodgate_hit(client, node, &entries).await;
            assert!(ok, "{answer}");
            let status = &answer["statuses"][0];
            assert_eq!(status["limitRemaining"], 2, "{answer}");
            assert_eq!(status["currentLimit"]["requestsPerUnit"], 5, "{answer}");
            let reset = status["durationUntilReset"].as_str().unwrap();
            let seconds: u64 = reset.trim_end_matches('s').parse().unwrap();
            assert!(
                seconds <= HOUR && reset.ends_with('s') && !reset.contains('.'),
                "whole seconds, as upstream: {reset}"
            );
        }
    })
    .await;
}

#[tokio::test]
async fn stopping_increments_charges_only_what_goes_over() {
    let redis = RedisServer::start();
    let (_dir, path) = config_file(&config(", stop_increment_when_over_limit: true"));
    let node = serve(&path, &redis.url(), &[]);
    let client = reqwest::Client::new();
    within_one_window(|round| {
        let (redis, node, client) = (&redis, &node, &client);
        async move {
            let (user, team) = (format!("carol-{round}"), format!("blue-{round}"));
            let body = json!({"domain": "rl", "descriptors": [
                {"entries": [{"key": "user", "value": user}]},
                {"entries": [{"key": "team", "value": team}]},
            ]});
            for _ in 0..7 {
                node.post(client, "/json", &body).await;
            }
            let window = now_secs() / HOUR * HOUR;
            let count = |key: String| -> u64 {
                redis
                    .cli(&["GET", &key])
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap_or(0)
            };
            // The user's limit (5) is passed on the 6th call: from then on only the user's
            // counter is charged, as upstream charges it.
            assert_eq!(count(format!("prefix:rl_user_{user}_{window}")), 7);
            assert_eq!(count(format!("prefix:rl_team_{team}_{window}")), 5);
        }
    })
    .await;
}

#[tokio::test]
async fn the_over_limit_cache_spares_redis() {
    let redis = RedisServer::start();
    let (_dir, path) = config_file(&config(", over_limit_cache_bytes: 100000"));
    let node = serve(&path, &redis.url(), &[]);
    let client = reqwest::Client::new();
    within_one_window(|round| {
        let (redis, node, client) = (&redis, &node, &client);
        async move {
            let user = format!("dave-{round}");
            let entries = [("user", user.as_str())];
            for i in 0..9 {
                let (ok, answer) = floodgate_hit(client, node, &entries).await;
                assert_eq!(ok, i < 5, "hit {i}: {answer}");
            }
            let window = now_secs() / HOUR * HOUR;
            let key = format!("prefix:rl_user_{user}_{window}");
            // The 6th went to Redis and found the key over; the next ones were answered here.
            assert_eq!(redis.cli(&["GET", &key]).unwrap().trim(), "6");
        }
    })
    .await;
}

#[tokio::test]
async fn second_windows_count_in_the_per_second_redis() {
    let (main, per_second) = (RedisServer::start(), RedisServer::start());
    let (_dir, path) = config_file(&format!(
        "store: {{layout: envoyproxy, per_second_url: '{}'}}\n\
         domains:\n  - domain: rl\n    descriptors:\n      - key: ip\n        \
         rate_limit: {{unit: second, requests_per_unit: 1000}}\n      - key: user\n        \
         rate_limit: {{unit: hour, requests_per_unit: 1000}}\n",
        per_second.url()
    ));
    let node = serve(&path, &main.url(), &[]);
    let client = reqwest::Client::new();
    let body = json!({"domain": "rl", "descriptors": [
        {"entries": [{"key": "ip", "value": "10.0.0.1"}]},
        {"entries": [{"key": "user", "value": "erin"}]},
    ]});
    let (status, answer) = node.post(&client, "/json", &body).await;
    assert_eq!(status, 200, "{answer}");
    let keys = |redis: &RedisServer| redis.cli(&["KEYS", "rl_*"]).unwrap();
    assert!(
        keys(&per_second).contains("rl_ip_10.0.0.1_"),
        "{}",
        keys(&per_second)
    );
    assert!(
        !keys(&per_second).contains("rl_user_"),
        "{}",
        keys(&per_second)
    );
    assert!(keys(&main).contains("rl_user_erin_"), "{}", keys(&main));
    assert!(!keys(&main).contains("rl_ip_"), "{}", keys(&main));
    drop(node);
    let _ = Duration::ZERO;
}

#[test]
fn the_layout_refuses_what_it_cannot_keep() {
    let redis = RedisServer::start();
    for (text, says) in [
        ("store: {layout: envoyproxy}\n", "store.layout"),
        ("store: {key_prefix: 'p:'}\n", "store.key_prefix"),
        (
            "store: {layout: envoyproxy}\ndomains:\n  - domain: d\n    descriptors:\n      - key: k\n        all_or_nothing: true\n        rate_limit: {unit: hour, requests_per_unit: 1}\n",
            "all_or_nothing",
        ),
    ] {
        let (_dir, path) = config_file(text);
        let store = if text.contains("key_prefix") || text.contains("all_or_nothing") { redis.url() } else { "memory".into() };
        let (code, stderr) = common::serve::serve_refused(&path, &store, &[]);
        assert_ne!(code, Some(0));
        assert!(stderr.contains(says), "{text}: {stderr}");
    }
}
