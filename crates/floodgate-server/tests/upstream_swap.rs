//! The day of the swap: an envoyproxy/ratelimit deployment's environment (its integration
//! tests' variables, with Redis over TLS, mutual TLS on gRPC and statsd over UDP) given to the
//! `floodgate` binary under upstream's entry point name `ratelimit`, with no flag. Everything
//! an operator and Envoy meet must work as before: the probes, `ShouldRateLimit` over mTLS,
//! upstream's keys in Redis, upstream's statistics in statsd.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::serve::TempDir;
use common::tls::{grpc_allowed, grpc_client};
use common::upstream::{domain, launch, loopback_env, set};
use floodgate_redis_harness::{RedisServer, TestCa};
use floodgate_server::grpc::{HealthCheckRequest, HealthClient, ServingStatus};

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
    let url = node.grpc.replace("http://", "https://");
    let channel = tonic::transport::Channel::from_shared(url)
        .unwrap()
        .tls_config(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(
                    std::fs::read(ca.ca_file()).unwrap(),
                ))
                .identity(tonic::transport::Identity::from_pem(
                    std::fs::read(&envoy.cert).unwrap(),
                    std::fs::read(&envoy.key).unwrap(),
                ))
                .domain_name("localhost"),
        )
        .unwrap()
        .connect()
        .await
        .unwrap();
    let status = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: "ratelimit".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status();
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

    // Upstream's statistics, with the extra tag, in statsd.
    let want = [
        (
            "ratelimit.service.rate_limit.rl.user.total_hits.__cluster=edge",
            4,
        ),
        (
            "ratelimit.service.rate_limit.rl.user.over_limit.__cluster=edge",
            1,
        ),
        ("ratelimit_server.ShouldRateLimit.total_requests", 4),
    ];
    let mut counters: HashMap<String, u64> = HashMap::new();
    let mut timed = 0;
    let mut buffer = vec![0u8; 65_536];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while timed < 4
        || !want
            .iter()
            .all(|(name, n)| counters.get(*name).copied().unwrap_or(0) >= *n)
    {
        let n = tokio::time::timeout_at(deadline, statsd.recv(&mut buffer))
            .await
            .unwrap_or_else(|_| panic!("statsd did not get everything: {counters:#?}"))
            .unwrap();
        for line in std::str::from_utf8(&buffer[..n]).unwrap().lines() {
            if line.starts_with("ratelimit_server.ShouldRateLimit.response_time:") {
                assert!(line.ends_with("|ms"), "{line}");
                timed += 1;
            }
            if let Some((name, count)) = line.strip_suffix("|c").and_then(|l| l.rsplit_once(':')) {
                *counters.entry(name.to_string()).or_default() += count.parse::<u64>().unwrap();
            }
        }
    }
    for (name, n) in want {
        assert_eq!(counters.get(name), Some(&n), "{name}");
    }
    assert_eq!(timed, 4, "one response time per gRPC call");

    // A new version of the file, written in place under the watched root, takes effect
    // without a signal.
    std::fs::write(
        base.join("srv/runtime_data/current/ratelimit/config/rl.yaml"),
        domain(10),
    )
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let rlconfig = client
            .get(format!("{}/rlconfig", node.debug()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if rlconfig.contains("requests_per_unit=10") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new file was not read: {rlconfig}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        grpc_allowed(&mut rls, "alice", 1).await.unwrap(),
        1,
        "room under the new limit"
    );
}
