//! Redis as envoyproxy/ratelimit's deployments point at it, through upstream's variables
//! alone: behind Sentinel (`REDIS_TYPE=sentinel`, the master's and the sentinels' passwords),
//! a failover followed by the running service; and over TLS with a client certificate and a
//! server certificate that names another host (`REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`). Real
//! `floodgate serve` processes and `redis-server`s of the test's own.

use crate::common;

use common::serve::{bare_command, eventually, Service, TempDir};
use common::upstream::{loopback_env, runtime_dir, serve_with, set as set_var};
use floodgate_harness::{RedisSentinels, RedisServer, SentinelOptions, TestCa};
use serde_json::{json, Value};

/// A runtime directory holding `rl` with 3 an hour per user, and upstream's variables for it
/// (Redis at `redis`, `host:port`).
fn environment(name: &str, redis: &str) -> (TempDir, Vec<(&'static str, String)>) {
    let root = runtime_dir(&format!("upstream-redis-{name}"), 3);
    let mut env = loopback_env(&root.0, redis);
    set_var(&mut env, "REDIS_TIMEOUT", "2s");
    (root, env)
}

async fn decide(client: &reqwest::Client, node: &Service, user: &str) -> (u16, Value) {
    let body =
        json!({"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": user}]}]});
    node.post(client, "/json", &body).await
}

/// `user`'s first `n` hits: how many were `OK`; every answer is a decision.
async fn allowed(client: &reqwest::Client, node: &Service, user: &str, n: usize) -> usize {
    let mut ok = 0;
    for _ in 0..n {
        let (status, answer) = decide(client, node, user).await;
        assert!(status == 200 || status == 429, "{status}: {answer}");
        ok += usize::from(status == 200);
    }
    ok
}

#[tokio::test]
async fn sentinel_variables_run_on_the_master_and_follow_a_failover() {
    let mut set = RedisSentinels::start(SentinelOptions {
        password: Some("master-secret".into()),
        sentinel_password: Some("sentinel-secret".into()),
        ..SentinelOptions::default()
    });
    let sentinels: Vec<String> = set
        .sentinel_ports()
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let (_root, mut env) = environment(
        "sentinel",
        &format!("floodgate-master,{}", sentinels.join(",")),
    );
    env.extend([
        ("REDIS_TYPE", "sentinel".to_string()),
        ("REDIS_AUTH", "master-secret".to_string()),
        ("REDIS_SENTINEL_AUTH", "sentinel-secret".to_string()),
    ]);
    let node = serve_with(&env);
    assert!(!node.started.contains("secret"), "{}", node.started);
    let client = reqwest::Client::new();
    assert_eq!(allowed(&client, &node, "alice", 5).await, 3);

    let old = set.master_port().unwrap();
    set.server_mut(old).kill();
    let new = set.wait_for_new_master(old);
    assert_ne!(new, old);
    // The service follows the sentinels to the new master by itself: a new user is limited
    // exactly there (answers during the move are upstream's UNAVAILABLE, 503 on /json).
    eventually("the new master answers", || async {
        let (status, _) = decide(&client, &node, "probe").await;
        assert!(
            status == 200 || status == 503,
            "a store failure is upstream's error: {status}"
        );
        status == 200
    })
    .await;
    assert_eq!(allowed(&client, &node, "bob", 5).await, 3);
}

#[tokio::test]
async fn tls_variables_present_a_client_certificate_and_may_skip_the_name() {
    let ca = TestCa::new();
    let server_cert = ca.issue("redis", "DNS:redis.elsewhere.example");
    let client_cert = ca.issue("client", "DNS:floodgate");
    let redis = RedisServer::start_tls_with(&server_cert, &ca.ca_file(), true);
    let (_root, mut env) = environment("tls", &format!("127.0.0.1:{}", redis.tls_port()));
    env.extend([
        ("REDIS_TLS", "true".to_string()),
        ("REDIS_TLS_CACERT", ca.ca_file().display().to_string()),
        (
            "REDIS_TLS_CLIENT_CERT",
            client_cert.cert.display().to_string(),
        ),
        (
            "REDIS_TLS_CLIENT_KEY",
            client_cert.key.display().to_string(),
        ),
        ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true".to_string()),
        ("REDIS_STARTUP_MAX_ELAPSED_TIME", "3s".to_string()),
    ]);
    let node = serve_with(&env);
    let client = reqwest::Client::new();
    assert_eq!(allowed(&client, &node, "alice", 5).await, 3);

    // With the name checked, the certificate (for another host) is refused: start-up says so.
    let checked: Vec<(&'static str, String)> = env
        .iter()
        .filter(|(k, _)| *k != "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")
        .cloned()
        .collect();
    let pairs: Vec<(&str, &str)> = checked.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let output = bare_command(
        std::path::Path::new(env!("CARGO_BIN_EXE_floodgate")),
        &pairs,
    )
    .arg("serve")
    .output()
    .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("rediss://127.0.0.1:"), "{stderr}");
}
