//! Floodgate started the way envoyproxy/ratelimit is deployed: nothing but upstream's
//! environment variables (those of upstream's own integration tests), a runtime directory with
//! a `current` link, no flags; as `floodgate serve` and under upstream's entry point name
//! `ratelimit`. Real processes, on a `redis-server` of the test's own.

use crate::common;

use std::path::Path;

use common::serve::{bare_command, eventually, Service, TempDir};
use common::upstream::{as_ratelimit, domain, launch, loopback_env, ratelimit_health, set};
use floodgate_harness::RedisServer;
use floodgate_server::grpc::ServingStatus;
use serde_json::{json, Value};

fn temp_dir(name: &str) -> TempDir {
    let dir =
        std::env::temp_dir().join(format!("floodgate-upstream-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}

/// `base/name/ratelimit/config/rl.yaml` holding `text`.
fn tree(base: &Path, name: &str, text: &str) {
    let config = base.join(name).join("ratelimit/config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("rl.yaml"), text).unwrap();
}

/// Points `dir/link` at `target` in one step (a new link renamed over the old), as
/// deployments swap `current`.
fn swap_link(dir: &Path, link: &str, target: &str) {
    let temporary = dir.join(format!("{link}.swap"));
    let _ = std::fs::remove_file(&temporary);
    std::os::unix::fs::symlink(target, &temporary).unwrap();
    std::fs::rename(&temporary, dir.join(link)).unwrap();
}

/// Upstream's integration environment (its docker-compose's, with loopback hosts and ports
/// the OS chooses).
fn upstream_env(redis: &RedisServer, root: &Path) -> Vec<(&'static str, String)> {
    let mut env = loopback_env(root, &format!("127.0.0.1:{}", redis.port()));
    set(&mut env, "LOG_LEVEL", "debug");
    // A memcache variable with the Redis backend: read by nothing, as upstream.
    set(&mut env, "MEMCACHE_SRV", "_memcache._tcp.example.com");
    env
}

async fn decide(client: &reqwest::Client, node: &Service, user: &str) -> (u16, Value) {
    let body =
        json!({"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": user}]}]});
    node.post(client, "/json", &body).await
}

#[tokio::test]
async fn an_upstream_environment_alone_runs_the_service() {
    let redis = RedisServer::start();
    let base = temp_dir("alone");
    tree(&base.0, "v1", &domain(3));
    swap_link(&base.0, "current", "v1");
    let env = upstream_env(&redis, &base.0.join("current"));
    let serve = launch(Path::new(env!("CARGO_BIN_EXE_floodgate")), &["serve"], &env);
    // Upstream's binary reads no arguments: these (AI Gateway's, and a `--help` that would
    // stop any other program) are named in the log, without values, and ignored.
    let ratelimit = launch(
        &as_ratelimit(&base.0),
        &[
            "--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system",
            "--help",
        ],
        &env,
    );
    assert!(
        ratelimit.started.contains("command-line arguments ignored")
            && ratelimit.started.contains("--quotaRateLimitServiceAddr=…")
            && !ratelimit.started.contains("envoy-gateway-system"),
        "{}",
        ratelimit.started
    );
    let nodes = [&serve, &ratelimit];
    let client = reqwest::Client::new();
    for node in nodes {
        // Every variable of upstream's is supported: none is warned about.
        assert!(
            !node.started.contains("does not support"),
            "{}",
            node.started
        );
        assert_eq!(node.get(&client, "/healthcheck").await, (200, "OK".into()));
        let channel = tonic::transport::Channel::from_shared(node.grpc.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        assert_eq!(ratelimit_health(channel).await, ServingStatus::Serving);
        assert_eq!(
            node.rlconfig(&client).await,
            "rl.user: unit=HOUR requests_per_unit=3, shadow_mode: false, quota_mode: false\n"
        );
    }
    // Both count in the one Redis, as the environment says: 3 in all, then over.
    for (i, node) in [&serve, &ratelimit, &serve].iter().enumerate() {
        let (status, answer) = decide(&client, node, "alice").await;
        assert_eq!(
            (status, &answer["overallCode"]),
            (200, &json!("OK")),
            "hit {i}: {answer}"
        );
    }
    let (status, answer) = decide(&client, &ratelimit, "alice").await;
    assert_eq!(
        (status, &answer["overallCode"]),
        (429, &json!("OVER_LIMIT")),
        "{answer}"
    );
    // A new tree swapped in under `current`: both follow it, with no signal.
    tree(&base.0, "v2", &domain(10));
    swap_link(&base.0, "current", "v2");
    for node in nodes {
        node.until_listed(&client, "requests_per_unit=10").await;
    }
    let (status, _) = decide(&client, &serve, "alice").await;
    assert_eq!(status, 200, "room again under the new limit");
    // A broken tree: the running configuration stays, and the failure is counted.
    tree(&base.0, "v3", "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n");
    swap_link(&base.0, "current", "v3");
    eventually("the failed reload is counted", || async {
        let (_, metrics) = serve.get(&client, "/metrics").await;
        metrics.contains("floodgate_reloads_total{result=\"failed\"} 1")
    })
    .await;
    assert!(serve
        .rlconfig(&client)
        .await
        .contains("requests_per_unit=10"));
    assert_eq!(serve.get(&client, "/healthcheck").await, (200, "OK".into()));
}

#[tokio::test]
async fn a_config_map_mount_and_plain_writes_are_followed() {
    let redis = RedisServer::start();
    let base = temp_dir("configmap");
    // Kubernetes' layout: the files are links into `..data`, itself a link to a dated
    // directory, swapped whole on an update.
    let config = base.0.join("ratelimit/config");
    std::fs::create_dir_all(config.join("..2026_01_01")).unwrap();
    std::fs::write(config.join("..2026_01_01/rl.yaml"), domain(3)).unwrap();
    swap_link(&config, "..data", "..2026_01_01");
    std::os::unix::fs::symlink("..data/rl.yaml", config.join("rl.yaml")).unwrap();
    let mut env = upstream_env(&redis, &base.0);
    env.push(("RUNTIME_WATCH_ROOT", "false".into()));
    env.push(("RUNTIME_IGNOREDOTFILES", "true".into()));
    let node = launch(Path::new(env!("CARGO_BIN_EXE_floodgate")), &["serve"], &env);
    let client = reqwest::Client::new();
    assert!(node.rlconfig(&client).await.contains("requests_per_unit=3"));
    std::fs::create_dir_all(config.join("..2026_01_02")).unwrap();
    std::fs::write(config.join("..2026_01_02/rl.yaml"), domain(7)).unwrap();
    swap_link(&config, "..data", "..2026_01_02");
    node.until_listed(&client, "requests_per_unit=7").await;
    // A file written in place, beside them.
    std::fs::write(
        config.join("extra.yaml"),
        "domain: extra\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 2}\n",
    )
    .unwrap();
    node.until_listed(&client, "extra.ip").await;
}

#[tokio::test]
async fn grpc_listens_on_a_unix_socket_with_grpc_uds() {
    let redis = RedisServer::start();
    let base = temp_dir("uds");
    tree(&base.0, "v1", &domain(1));
    swap_link(&base.0, "current", "v1");
    let socket = base.0.join("rls.sock");
    let mut env = upstream_env(&redis, &base.0.join("current"));
    env.push(("GRPC_UDS", socket.display().to_string()));
    let node = launch(Path::new(env!("CARGO_BIN_EXE_floodgate")), &["serve"], &env);
    assert_eq!(node.grpc_socket.as_deref(), Some(socket.as_path()));
    let path = socket.clone();
    let channel = tonic::transport::Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: http::Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .expect("connects over the socket");
    assert_eq!(ratelimit_health(channel).await, ServingStatus::Serving);
    drop(node);
}

#[test]
fn what_upstream_would_refuse_stops_start_up_naming_the_variable() {
    let base = temp_dir("refused");
    let program = Path::new(env!("CARGO_BIN_EXE_floodgate"));
    for (variable, value) in [
        ("BACKEND_TYPE", "memcache"),
        ("REDIS_TYPE", "ring"),
        ("LOG_LEVEL", "loud"),
        ("PORT", "http"),
    ] {
        let output = bare_command(program, &[(variable, value), ("RUNTIME_ROOT", "/nowhere")])
            .arg("serve")
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{variable}: started");
        assert!(
            stderr.contains(variable) && stderr.contains(value),
            "{variable}: {stderr}"
        );
    }
    drop(base);
}
