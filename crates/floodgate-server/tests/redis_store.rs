//! `floodgate serve --store redis://…` end to end: two real `floodgate serve` processes sharing
//! one `redis-server` that the test starts on a free loopback port (never the shared Redis on
//! 6379), so that a limit of N admits N in total, not N per process; and `check-config` refusing
//! a configuration the Redis store cannot run.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use floodgate_redis_harness::RedisServer;
use floodgate_server::runtime::Listening;
use serde_json::{json, Value};

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config_file(text: &str) -> (TempDir, PathBuf) {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "floodgate-redis-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("floodgate.yaml");
    std::fs::write(&path, text).expect("config written");
    (TempDir(dir), path)
}

/// A running `floodgate serve`, killed when dropped.
struct Service {
    child: Child,
    http: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `floodgate serve --config path --store url` on ports the OS chooses and waits
/// (at most 30 s) for its listening line.
fn serve(path: &PathBuf, store: &str) -> Service {
    let mut child = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"])
        .arg("--config")
        .arg(path)
        .args(["--store", store, "--workers", "1"])
        .env_remove("FLOODGATE_STORE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the floodgate binary starts");
    let stderr = child.stderr.take().expect("stderr is piped");
    let (found, listening) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stderr).lines();
        let mut before = Vec::new();
        let result = loop {
            match lines.next() {
                Some(Ok(line)) => match Listening::parse(&line) {
                    Some(l) => break Ok(l),
                    None => before.push(line),
                },
                Some(Err(_)) | None => break Err(before.join("\n")),
            }
        };
        let _ = found.send(result);
        for _ in lines {}
    });
    match listening.recv_timeout(Duration::from_secs(30)) {
        Ok(Ok(l)) => Service {
            child,
            http: format!("http://{}", l.http),
        },
        Ok(Err(stderr)) => panic!("floodgate serve exited before listening:\n{stderr}"),
        Err(e) => panic!("no listening line from floodgate serve: {e}"),
    }
}

async fn check(client: &reqwest::Client, service: &Service, limiter: &str, key: &str) -> Value {
    let response = client
        .post(format!("{}/v1/check", service.http))
        .json(&json!({"limiter": limiter, "key": key}))
        .send()
        .await
        .expect("the service answers");
    assert_eq!(response.status().as_u16(), 200);
    response.json().await.expect("a JSON answer")
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
    let a = serve(&path, &redis.url());
    let b = serve(&path, &redis.url());
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

/// `check-config --store redis://…` refuses a limit the Redis store cannot run, naming it; the
/// same file passes on the memory store. Nothing listens at the Redis URL: nothing is sent.
#[test]
fn check_config_refuses_what_the_redis_store_cannot_run() {
    let (_dir, path) =
        config_file("limits:\n  login: {algorithm: sliding_log, limit: 5, window: 1m}\n");
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
    // An Envoy rule whose window (a month) is beyond what the Lua twins compute exactly.
    let (_dir2, domains) = config_file(
        "domains:\n  - domain: d\n    descriptors:\n      - key: k\n        \
         rate_limit: {unit: month, requests_per_unit: 3}\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["check-config", "--store", &url])
        .arg(&domains)
        .env_remove("FLOODGATE_STORE")
        .output()
        .expect("the floodgate binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("domains[d] descriptor k"), "{stderr}");
    let out = run("mongodb://x");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("store.url"));
}
