//! A Redis that answers but refuses writes is a failed store, through the real binary: a
//! replica, a master at `maxmemory` with `noeviction`, a master demoted to a replica while
//! traffic flows. Start-up refuses such a store, naming the URL and the cause; a running node
//! turns unready and stays so while decisions fail open, counts the failures by kind in
//! `/metrics`, and says "store recovered" only once a decision (or a probe on the write path)
//! succeeds again. Against `redis-server` processes the tests start on free loopback ports.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::serve::{config_file, eventually, serve, serve_refused, Service};
use floodgate_harness::RedisServer;
use serde_json::{json, Value};

/// A named limit that counts (a fixed window no test fills), generous store bounds (these
/// tests are not about timeouts) and a short start-up budget.
const CONFIG: &str = r#"
store: {timeout: 2s, startup_timeout: 1s, breaker: {threshold: 3, cool_down: 200ms}}
limits:
  api: {algorithm: fixed_window, limit: 1000000, window: 1h}
"#;

/// A replica of `master`, in sync.
fn replica_of(master: &RedisServer) -> RedisServer {
    let replica = RedisServer::start();
    replica
        .cli(&["REPLICAOF", "127.0.0.1", &master.port().to_string()])
        .expect("REPLICAOF");
    replica
}

#[test]
fn a_replica_is_refused_at_start_up_naming_the_url_and_the_cause() {
    let master = RedisServer::start();
    let replica = replica_of(&master);
    let (_dir, path) = config_file(CONFIG);
    let (code, stderr) = serve_refused(&path, &replica.url(), &[]);
    assert_eq!(code, Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains(&format!("cannot use the store {}", replica.url()))
            && last.contains("READONLY")
            && last.contains("read-only replica"),
        "{stderr}"
    );
    assert!(!stderr.contains("store recovered"), "{stderr}");
}

#[test]
fn a_full_master_is_refused_at_start_up() {
    let master = RedisServer::start();
    master.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    master.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let (_dir, path) = config_file(CONFIG);
    let (code, stderr) = serve_refused(&path, &master.url(), &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot use the store {}", master.url()))
            && stderr.contains("(OOM)")
            && stderr.contains("maxmemory"),
        "{stderr}"
    );
}

/// `/v1/check` on `api` for `key`: its answer (the API answers 200 either way).
async fn check(node: &Service, client: &reqwest::Client, key: &str) -> Value {
    let (status, answer) = node
        .post(client, "/v1/check", &json!({"limiter": "api", "key": key}))
        .await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// `floodgate_store_errors_total{kind}` from `/metrics`.
async fn errors_of_kind(node: &Service, client: &reqwest::Client, kind: &str) -> u64 {
    let (_, text) = node.get(client, "/metrics").await;
    let wanted = format!("floodgate_store_errors_total{{store=\"redis\",kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(wanted.as_str()))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Drives `/v1/check` from several tasks, counting the answers that failed open, while
/// `/readyz` is polled every 100 ms: from the first answer that failed open until `healed`
/// is set, no poll may say ready. Returns once `done` is set.
struct Load {
    failed_open: Arc<AtomicU64>,
    decided: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(node: &Arc<Service>, client: &reqwest::Client) -> Load {
        let failed_open = Arc::new(AtomicU64::new(0));
        let decided = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let tasks = (0..4)
            .map(|i| {
                let (node, client) = (node.clone(), client.clone());
                let (failed_open, decided, done) =
                    (failed_open.clone(), decided.clone(), done.clone());
                tokio::spawn(async move {
                    while !done.load(Ordering::Relaxed) {
                        let answer = check(&node, &client, &format!("user{i}")).await;
                        if answer["failed_open"] == json!(true) {
                            failed_open.fetch_add(1, Ordering::Relaxed);
                        } else {
                            decided.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        Load {
            failed_open,
            decided,
            done,
            tasks,
        }
    }

    async fn stop(self) {
        self.done.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.expect("a load task");
        }
    }
}

/// Polls `/readyz` every 100 ms until `failed_open` answers have been seen and `polls` more
/// polls were made after the first of them, asserting each poll after the first failed-open
/// answer is a 503 naming `kind`.
async fn never_ready_while_failing(
    node: &Service,
    client: &reqwest::Client,
    load: &Load,
    kind: &str,
) {
    let mut failing_polls = 0;
    for _ in 0..300 {
        let seen_failing = load.failed_open.load(Ordering::Relaxed) > 0;
        let (status, body) = node.get(client, "/readyz").await;
        if seen_failing {
            assert_eq!(status, 503, "ready while decisions fail open: {body}");
            let body: Value = serde_json::from_str(&body).expect("JSON");
            assert_eq!(body["ready"], json!(false), "{body}");
            assert_eq!(body["store"]["last_call_ok"], json!(false), "{body}");
            assert_eq!(body["store"]["last_error"], json!(kind), "{body}");
            failing_polls += 1;
            if failing_polls == 30 {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("decisions never failed open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_demoted_under_load_fails_every_decision_and_is_never_ready_until_it_writes() {
    let master = RedisServer::start();
    let other = RedisServer::start();
    let (_dir, path) = config_file(CONFIG);
    let node = Arc::new(serve(&path, &master.url(), &[]));
    let client = reqwest::Client::new();
    assert_eq!(node.get(&client, "/readyz").await.0, 200);
    // Start-up's probe wrote on the master, and left nothing behind.
    let probe_key = master.cli(&["EXISTS", "floodgate:{probe}"]);
    assert_eq!(probe_key.as_deref().map(str::trim), Some("0"));
    let load = Load::start(&node, &client);
    eventually("decisions counted exactly", || async {
        load.decided.load(Ordering::Relaxed) > 20
    })
    .await;

    // The failover that leaves the URL on a replica.
    master
        .cli(&["REPLICAOF", "127.0.0.1", &other.port().to_string()])
        .expect("REPLICAOF");
    never_ready_while_failing(&node, &client, &load, "readonly").await;
    assert!(errors_of_kind(&node, &client, "readonly").await > 0);
    assert!(
        !node.log().iter().any(|l| l.contains("store recovered")),
        "{:#?}",
        node.log()
    );
    assert!(node.logged("kind=\"readonly\"").await.contains("READONLY"));

    // A master again: the next decisions count, the node is ready, and says so once.
    master
        .cli(&["REPLICAOF", "NO", "ONE"])
        .expect("REPLICAOF NO ONE");
    eventually("ready again", || async {
        node.get(&client, "/readyz").await.0 == 200
    })
    .await;
    let decided = load.decided.load(Ordering::Relaxed);
    eventually("decisions counted again", || async {
        load.decided.load(Ordering::Relaxed) > decided + 20
    })
    .await;
    load.stop().await;
    let recovered = node
        .log()
        .iter()
        .filter(|l| l.contains("store recovered"))
        .count();
    assert_eq!(recovered, 1, "{:#?}", node.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_out_of_memory_under_load_is_never_ready_and_counts_oom() {
    let master = RedisServer::start();
    let (_dir, path) = config_file(CONFIG);
    let node = Arc::new(serve(&path, &master.url(), &[]));
    let client = reqwest::Client::new();
    let load = Load::start(&node, &client);
    eventually("decisions counted exactly", || async {
        load.decided.load(Ordering::Relaxed) > 20
    })
    .await;
    master.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    master.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    never_ready_while_failing(&node, &client, &load, "oom").await;
    assert!(errors_of_kind(&node, &client, "oom").await > 0);
    master.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    eventually("ready again", || async {
        node.get(&client, "/readyz").await.0 == 200
    })
    .await;
    load.stop().await;
}

/// With no traffic at all, a replica under the URL keeps the node unready (the probe writes,
/// and the replica refuses it), and its promotion makes it ready by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_node_on_a_demoted_master_stays_unready_until_the_probe_writes() {
    let master = RedisServer::start();
    let other = RedisServer::start();
    let (_dir, path) = config_file(CONFIG);
    let node = serve(&path, &master.url(), &[]);
    let client = reqwest::Client::new();
    // One decision, then the demotion, then one failed decision and silence.
    assert_ne!(check(&node, &client, "a").await["failed_open"], json!(true));
    master
        .cli(&["REPLICAOF", "127.0.0.1", &other.port().to_string()])
        .expect("REPLICAOF");
    assert_eq!(check(&node, &client, "a").await["failed_open"], json!(true));
    // Three seconds of probes (one a second), each refused: never ready.
    for _ in 0..30 {
        let (status, body) = node.get(&client, "/readyz").await;
        assert_eq!(status, 503, "{body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    master
        .cli(&["REPLICAOF", "NO", "ONE"])
        .expect("REPLICAOF NO ONE");
    eventually("ready again by the probe", || async {
        node.get(&client, "/readyz").await.0 == 200
    })
    .await;
    assert!(node.logged("store recovered").await.contains("redis"));
}
