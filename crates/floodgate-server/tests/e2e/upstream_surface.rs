//! The drop-in serves upstream's surface: run as `ratelimit` with upstream's variables alone,
//! Floodgate serves `/json`, `/healthcheck` and its own `/metrics`, `/livez` and `/readyz`,
//! not the built-in pipeline, limits or dashboard, and writes no key into upstream's Redis but
//! upstream's. Everywhere, the dashboard's data (the heaviest keys) needs the admin token on a
//! listener that is not on a loopback address. Real processes and a `redis-server` of the
//! test's own.

use crate::common;

use common::serve::{config_file, eventually, serve, TempDir};
use common::upstream::{domain, launch, loopback_env};
use floodgate_harness::RedisServer;
use serde_json::json;

#[tokio::test]
async fn as_ratelimit_it_serves_and_writes_only_what_upstream_does() {
    let redis = RedisServer::start();
    let base = std::env::temp_dir().join(format!("floodgate-surface-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("runtime/ratelimit/config")).unwrap();
    std::fs::write(base.join("runtime/ratelimit/config/rl.yaml"), domain(3)).unwrap();
    let _base = TempDir(base.clone());
    let entry = base.join("ratelimit");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_floodgate"), &entry).unwrap();
    let env = loopback_env(
        &base.join("runtime"),
        &format!("127.0.0.1:{}", redis.port()),
    );
    let node = launch(&entry, &[], &env);
    let client = reqwest::Client::new();

    // Upstream's own.
    let hit =
        json!({"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": "alice"}]}]});
    for _ in 0..3 {
        assert_eq!(node.post(&client, "/json", &hit).await.0, 200);
    }
    assert_eq!(node.post(&client, "/json", &hit).await.0, 429);
    assert_eq!(
        node.get(&client, "/healthcheck").await,
        (200, "OK".to_string())
    );
    // Floodgate's health and metrics, documented.
    for path in ["/metrics", "/livez", "/readyz"] {
        assert_eq!(node.get(&client, path).await.0, 200, "{path}");
    }
    // Nothing of the built-in example.
    for path in ["/", "/v1/dashboard"] {
        let (status, body) = node.get(&client, path).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert!(body.contains("envoyproxy/ratelimit's settings"), "{body}");
    }
    for (path, body) in [
        ("/v1/evaluate", json!({"user": "alice"})),
        ("/v1/check", json!({"limiter": "login", "key": "alice"})),
        ("/v1/release", json!({"lease": "v1.x"})),
    ] {
        let (status, answer) = node.post(&client, path, &body).await;
        assert_eq!(status, 404, "{path}: {answer}");
    }
    // Upstream's keys alone: the domain's counter, nothing of Floodgate's (no lease secret,
    // no probe key, no pipeline's keys).
    let keys = redis.cli(&["--raw", "KEYS", "*"]).unwrap_or_default();
    let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
    assert!(!keys.is_empty());
    assert!(
        keys.iter().all(|k| k.starts_with("rl_user_alice_")),
        "{keys:?}"
    );
}

/// Whether the drop-in serves upstream's surface alone follows the running configuration: a
/// reload that adds a named limit to the Floodgate file serves `/v1/check` (and the rest), one
/// that takes it out again serves upstream's surface alone.
#[tokio::test]
async fn a_reload_changes_what_the_drop_in_serves() {
    let redis = RedisServer::start();
    let domains = "domains:\n  - domain: rl\n    descriptors:\n      - key: user\n        rate_limit: {unit: hour, requests_per_unit: 3}\n";
    let (dir, path) = config_file(domains);
    let entry = dir.0.join("ratelimit");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_floodgate"), &entry).unwrap();
    let mut env = loopback_env(&dir.0, &format!("127.0.0.1:{}", redis.port()));
    env.push(("FLOODGATE_CONFIG", path.display().to_string()));
    // Upstream's default level is `warn`; the reloads say what they did at `info`.
    env.push(("LOG_LEVEL", "info".into()));
    let node = launch(&entry, &[], &env);
    let client = reqwest::Client::new();
    let check = json!({"limiter": "login", "key": "alice"});
    let hit =
        json!({"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": "alice"}]}]});
    assert_eq!(node.post(&client, "/json", &hit).await.0, 200);
    let (status, body) = node.post(&client, "/v1/check", &check).await;
    assert_eq!(status, 404, "upstream's surface alone at first: {body}");

    let reload = |text: String| {
        let before = node.log().len();
        std::fs::write(&path, text).unwrap();
        node.signal("HUP");
        let node = &node;
        async move {
            eventually("the reload", || {
                let done = node.log()[before..]
                    .iter()
                    .any(|l| l.contains("configuration reloaded"));
                async move { done }
            })
            .await;
        }
    };
    reload(format!(
        "{domains}limits: {{login: {{algorithm: fixed_window, limit: 2, window: 1m}}}}\n"
    ))
    .await;
    let (status, body) = node.post(&client, "/v1/check", &check).await;
    assert_eq!(
        status, 200,
        "the named limit is served after the reload: {body}"
    );
    assert_eq!(node.get(&client, "/").await.0, 200);
    assert_eq!(node.post(&client, "/json", &hit).await.0, 200);

    reload(domains.to_string()).await;
    let (status, body) = node.post(&client, "/v1/check", &check).await;
    assert_eq!(status, 404, "upstream's surface alone again: {body}");
    let (status, body) = node.get(&client, "/v1/nothing").await;
    assert_eq!(status, 404);
    assert!(body.contains("envoyproxy/ratelimit's settings"), "{body}");
    assert!(node
        .log()
        .iter()
        .any(|l| l.contains("serves only upstream's endpoints")));
}

#[tokio::test]
async fn off_loopback_the_dashboards_data_needs_the_admin_token() {
    const TOKEN: &str = "an-admin-token-of-some-length";
    let (_dir, path) =
        config_file("limits: {a: {algorithm: fixed_window, limit: 5, window: 1m}}\n");
    let client = reqwest::Client::new();
    // On a loopback address, as the README's first command serves: open.
    let local = serve(&path, "memory", &[("FLOODGATE_ADMIN_TOKEN", TOKEN)]);
    assert_eq!(local.get(&client, "/v1/dashboard").await.0, 200);

    // On every address: the page is served, its data only with the token.
    let mut command = common::serve::bare_command(
        std::path::Path::new(env!("CARGO_BIN_EXE_floodgate")),
        &[("FLOODGATE_ADMIN_TOKEN", TOKEN)],
    );
    command
        .args([
            "serve",
            "--http",
            "0.0.0.0:0",
            "--grpc",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&path);
    let exposed = common::serve::start(command);
    let port = exposed.http.rsplit(':').next().unwrap();
    let url = format!("http://127.0.0.1:{port}/v1/dashboard");
    let answer = client.get(&url).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 401);
    let body = answer.text().await.unwrap();
    assert!(
        body.contains("heaviest keys") && body.contains("Bearer"),
        "{body}"
    );
    let answer = client.get(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let page = client
        .get(format!("http://127.0.0.1:{port}/"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
}
