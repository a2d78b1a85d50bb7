//! The day of the swap: an envoyproxy/ratelimit deployment's environment (its integration
//! tests' variables, with Redis over TLS, mutual TLS on gRPC and statsd over UDP) given to the
//! `floodgate` binary under upstream's entry point name `ratelimit`, with no flag. Everything
//! an operator and Envoy meet must work as before: the probes, `ShouldRateLimit` over mTLS,
//! upstream's keys in Redis, upstream's statistics in statsd.

use crate::common;

use common::serve::TempDir;
use common::statsd::Received;
use common::tls::{grpc_allowed, grpc_client, tls_channel};
use common::upstream::{domain, launch, loopback_env, ratelimit_health, set};
use floodgate_harness::{RedisServer, TestCa};
use floodgate_server::grpc::ServingStatus;

#[tokio::test]
async fn an_upstream_deployment_runs_unchanged_under_the_ratelimit_name() {
    let ca = TestCa::new();
    let redis_cert = ca.issue("redis", "IP:127.0.0.1");
    let redis = RedisServer::start_tls_with(&redis_cert, &ca.ca_file(), false);
    let server = ca.issue("ratelimit", "IP:127.0.0.1,DNS:localhost");
    let envoy = ca.issue("envoy", "DNS:envoy.internal");
    let statsd = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();

    let base = std::env::temp_dir().join(format!("floodgate-swap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("srv/runtime_data/current/ratelimit/config")).unwrap();
    std::fs::write(
        base.join("srv/runtime_data/current/ratelimit/config/rl.yaml"),
        domain(3),
    )
    .unwrap();
    let _base = TempDir(base.clone());
    let entry = base.join("ratelimit");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_floodgate"), &entry).unwrap();

    let root = base.join("srv/runtime_data/current");
    let mut env = loopback_env(&root, &format!("127.0.0.1:{}", redis.tls_port()));
    for (name, value) in [
        ("LOG_LEVEL", "debug".to_string()),
        ("REDIS_TLS", "true".to_string()),
        ("REDIS_TLS_CACERT", ca.ca_file().display().to_string()),
        ("RUNTIME_WATCH_ROOT", "false".to_string()),
        ("CACHE_KEY_PREFIX", "swap:".to_string()),
        ("GRPC_SERVER_USE_TLS", "true".to_string()),
        ("GRPC_SERVER_TLS_CERT", server.cert.display().to_string()),
        ("GRPC_SERVER_TLS_KEY", server.key.display().to_string()),
        ("GRPC_CLIENT_TLS_CACERT", ca.ca_file().display().to_string()),
        ("GRPC_CLIENT_TLS_SAN", "envoy.internal".to_string()),
        ("USE_STATSD", "true".to_string()),
        ("STATSD_HOST", "127.0.0.1".to_string()),
        (
            "STATSD_PORT",
            statsd.local_addr().unwrap().port().to_string(),
        ),
        ("STATSD_PROTOCOL", "udp".to_string()),
        ("STATS_FLUSH_INTERVAL", "100ms".to_string()),
        ("EXTRA_TAGS", "cluster:edge".to_string()),
    ] {
        set(&mut env, name, value);
    }
    let node = launch(&entry, &[], &env);
    assert!(
        !node.started.contains("not support"),
        "every variable given is supported: {}",
        node.started
    );

    // The probes: HTTP's /healthcheck, and gRPC health over the mTLS channel.
    let client = reqwest::Client::new();
    assert_eq!(node.get(&client, "/healthcheck").await, (200, "OK".into()));
    let channel = tls_channel(&node.grpc, &ca.ca_file(), Some(&envoy))
        .await
        .unwrap();
    let status = ratelimit_health(channel).await;
    assert_eq!(status, ServingStatus::Serving);

    // Envoy's calls, over mTLS: 3 an hour.
    let mut rls = grpc_client(&node.grpc, &ca.ca_file(), Some(&envoy))
        .await
        .unwrap();
    assert_eq!(grpc_allowed(&mut rls, "alice", 4).await.unwrap(), 3);

    // Upstream's key in Redis, counting every hit as upstream does.
    let keys = redis.cli(&["KEYS", "swap:rl_user_alice_*"]).unwrap();
    let key = keys.trim();
    assert!(key.starts_with("swap:rl_user_alice_"), "{keys}");
    assert_eq!(redis.cli(&["GET", key]).unwrap().trim(), "4");

    // Upstream's statistics, with the extra tag (the server's too, as upstream scopes them),
    // in statsd.
    let want = [
        (
            "ratelimit.service.rate_limit.rl.user.total_hits.__cluster=edge",
            4,
        ),
        (
            "ratelimit.service.rate_limit.rl.user.over_limit.__cluster=edge",
            1,
        ),
        (
            "ratelimit_server.ShouldRateLimit.total_requests.__cluster=edge",
            4,
        ),
    ];
    let want: Vec<(String, u64)> = want.iter().map(|(n, c)| (n.to_string(), *c)).collect();
    let received = Received::from_udp(&statsd, usize::MAX, |r| {
        r.has(&want) && r.timer_lines.len() >= 4
    })
    .await;
    for (name, n) in &want {
        assert_eq!(received.counters.get(name), Some(n), "{name}");
    }
    // One response time per gRPC call, in whole milliseconds and not sampled.
    assert_eq!(received.timer_lines.len(), 4, "{:?}", received.timer_lines);
    for line in &received.timer_lines {
        assert!(
            line.starts_with("ratelimit_server.ShouldRateLimit.response_time.__cluster=edge:")
                && line.ends_with("|ms"),
            "{line}"
        );
    }

    // A new version of the file, written in place under the watched root, takes effect
    // without a signal.
    std::fs::write(
        base.join("srv/runtime_data/current/ratelimit/config/rl.yaml"),
        domain(10),
    )
    .unwrap();
    node.until_listed(&client, "requests_per_unit=10").await;
    assert_eq!(
        grpc_allowed(&mut rls, "alice", 1).await.unwrap(),
        1,
        "room under the new limit"
    );
}
