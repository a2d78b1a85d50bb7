//! A node new to a Redis Cluster is warm when it says it is ready: three real `floodgate
//! serve` processes start on a fresh three-master cluster (no replicas, no reshaping), and the
//! moment each one's `/readyz` answers 200, twelve concurrent clients send 1,800 checks of one
//! fixed window of 600, spread over the three nodes (each client's calls dealt round-robin).
//! Twenty rounds, each on a cluster of its own, so that each is a cold start: empty script
//! caches, no connection, nothing known of the slot map. Each round checks:
//!
//! - **nothing cold is left for the traffic**: while it runs, the masters accept no new
//!   connection and answer no call `NOSCRIPT` or `MOVED` (their own counts, `INFO stats` and
//!   `INFO errorstats`, read before and after). These are what made a node's first calls wait
//!   past the store's timeout and fail open, letting requests through unlimited in every
//!   rolling deploy: the slot map and the connections to the masters opened in the
//!   background, the scripts loaded by the first calls. `RedisStore::probe`, which `/readyz`
//!   waits for at start-up, now makes them ready first. These counts do not depend on how busy
//!   the machine is;
//! - **every answer came from the store, and exactly 600 were admitted**: no `failed_open`
//!   answer, no store error of any kind on any node's `/metrics`.
//!
//! The store timeout is 2 s, as in the other multi-process tests, not the 50 ms default under
//! which users saw the fail-opens: a loaded test machine makes calls miss 50 ms in steady
//! state too, which is not what this test is about (and performance is not asserted by
//! timings). The cold state itself is caught by the counts above, whatever the timeout.
//!
//! Each round's cluster is started while the round before runs; the binary is built once by
//! Cargo.

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::serve::{config_file, serve, Service};
use floodgate::{Clock, SystemClock};
use floodgate_harness::RedisCluster;
use serde_json::{json, Value};

const ROUNDS: usize = 20;
const CLIENTS: usize = 12;
const CHECKS: usize = 1_800;
const LIMIT: u64 = 600;

/// One fixed window of 600 a year (nothing refills within the test, and a round crossing the
/// window's edge is all but impossible); a store timeout a loaded machine meets (see the
/// module documentation).
const CONFIG: &str = r#"
store: {timeout: 2s}
limits:
  window: {algorithm: fixed_window, limit: 600, window: 365d}
"#;

/// What one round saw.
#[derive(Debug, Default)]
struct Tally {
    admitted: AtomicU64,
    refused: AtomicU64,
    failed_open: AtomicU64,
    slowest_us: AtomicU64,
    /// When the last failed-open answer came, in µs after the traffic began.
    last_failed_open_us: AtomicU64,
    /// Failed-open answers in the first 0.3 s of the traffic.
    failed_open_early: AtomicU64,
}

/// The sum of `family`'s samples on `node`'s `/metrics` whose labels contain `with`.
async fn metric(node: &Service, client: &reqwest::Client, family: &str, with: &str) -> u64 {
    let (_, text) = node.get(client, "/metrics").await;
    text.lines()
        .filter(|line| line.starts_with(family) && line.contains(with))
        .filter(|line| line[family.len()..].starts_with(['{', ' ']))
        .filter_map(|line| line.rsplit_once(' '))
        .filter_map(|(_, n)| n.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Starts three nodes on `url` at once (each start is a process of its own) and waits for each
/// to answer `/readyz` with 200.
async fn three_ready_nodes(url: &str, path: &std::path::Path) -> Arc<Vec<Service>> {
    let starts: Vec<_> = (0..3)
        .map(|_| {
            let (url, path) = (url.to_string(), path.to_path_buf());
            std::thread::spawn(move || serve(&path, &url, &[]))
        })
        .collect();
    let nodes: Vec<Service> = starts
        .into_iter()
        .map(|s| s.join().expect("a node starts"))
        .collect();
    let client = reqwest::Client::new();
    for node in &nodes {
        common::serve::eventually("/readyz answers 200", || async {
            node.get(&client, "/readyz").await.0 == 200
        })
        .await;
    }
    Arc::new(nodes)
}

/// 1,800 checks of one key, twelve clients at once, each client's calls dealt round-robin
/// over the three nodes.
async fn traffic(nodes: &Arc<Vec<Service>>, key: &str) -> Arc<Tally> {
    let tally = Arc::new(Tally::default());
    let clock = Arc::new(SystemClock::new());
    let start = clock.now();
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..CLIENTS {
        let (nodes, tally, key) = (nodes.clone(), tally.clone(), key.to_string());
        let clock = clock.clone();
        clients.spawn(async move {
            let client = reqwest::Client::new();
            let body = json!({"limiter": "window", "key": key});
            for i in 0..CHECKS / CLIENTS {
                let began = clock.now();
                let (status, d) = nodes[(c + i) % 3].post(&client, "/v1/check", &body).await;
                let took = clock.now().saturating_since(began).as_micros() as u64;
                tally.slowest_us.fetch_max(took, Ordering::Relaxed);
                assert_eq!(status, 200, "{d}");
                if d.get("failed_open").is_some() {
                    tally.failed_open.fetch_add(1, Ordering::Relaxed);
                    let at = clock.now().saturating_since(start).as_micros() as u64;
                    tally.last_failed_open_us.fetch_max(at, Ordering::Relaxed);
                    if at < 300_000 {
                        tally.failed_open_early.fetch_add(1, Ordering::Relaxed);
                    }
                } else if d["allowed"] == Value::Bool(true) {
                    tally.admitted.fetch_add(1, Ordering::Relaxed);
                } else {
                    tally.refused.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    while let Some(done) = clients.join_next().await {
        done.expect("a client ends");
    }
    tally
}

/// What the cluster's masters have seen so far, summed over them: connections accepted (each
/// reading is one more), and calls answered `NOSCRIPT` or `MOVED` (from `INFO errorstats`).
fn masters_saw(cluster: &RedisCluster) -> [u64; 3] {
    let mut saw = [0; 3];
    for server in cluster.servers() {
        let info = cluster
            .cli(server.port(), &["INFO", "stats", "errorstats"])
            .expect("a master answers INFO");
        for line in info.lines().map(str::trim) {
            let count = |prefix: &str| {
                line.strip_prefix(prefix)
                    .and_then(|rest| rest.split(',').next())
                    .and_then(|n| n.parse::<u64>().ok())
            };
            if let Some(n) = count("total_connections_received:") {
                saw[0] += n;
            } else if let Some(n) = count("errorstat_NOSCRIPT:count=") {
                saw[1] += n;
            } else if let Some(n) = count("errorstat_MOVED:count=") {
                saw[2] += n;
            }
        }
    }
    saw
}

/// Every sample of `/metrics` on `node` of the families that say a call failed, that is not
/// zero: for the message of a failing round.
async fn failures(node: &Service, client: &reqwest::Client) -> Vec<String> {
    let (_, text) = node.get(client, "/metrics").await;
    text.lines()
        .filter(|l| {
            l.starts_with("floodgate_store_errors_total{")
                || l.starts_with("floodgate_store_redirects_total{")
                || l.starts_with("floodgate_calls_total{") && l.contains("failed_open")
        })
        .filter(|l| !l.ends_with(" 0"))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_nodes_on_a_fresh_cluster_never_fail_open() {
    let (_dir, path) = config_file(CONFIG);
    let client = reqwest::Client::new();
    let clock = SystemClock::new();
    let mut bad = Vec::new();
    // Each round's cluster is started while the round before runs (starting one is mostly
    // waiting for its nodes to agree), so that twenty cold starts fit the test's time.
    let mut next = Some(std::thread::spawn(|| RedisCluster::start(3, 0)));
    for round in 0..ROUNDS {
        let cluster = match next.take() {
            Some(starting) => starting.join().expect("a cluster starts"),
            None => RedisCluster::start(3, 0),
        };
        if round + 1 < ROUNDS {
            next = Some(std::thread::spawn(|| RedisCluster::start(3, 0)));
        }
        let began = clock.now();
        let nodes = three_ready_nodes(&cluster.url(), &path).await;
        let ready = clock.now().saturating_since(began);
        let before = masters_saw(&cluster);
        let tally = traffic(&nodes, "alice").await;
        let after = masters_saw(&cluster);
        // The reading after the traffic is one connection per master.
        let opened = after[0].saturating_sub(before[0] + cluster.servers().len() as u64);
        let (noscript, moved) = (after[1] - before[1], after[2] - before[2]);
        let mut errors = 0;
        let mut failed_open = 0;
        let mut seen = Vec::new();
        for node in nodes.iter() {
            errors += metric(node, &client, "floodgate_store_errors_total", "").await;
            failed_open += metric(
                node,
                &client,
                "floodgate_calls_total",
                "outcome=\"failed_open\"",
            )
            .await;
            seen.extend(failures(node, &client).await);
        }
        let (admitted, refused, open) = (
            tally.admitted.load(Ordering::Relaxed),
            tally.refused.load(Ordering::Relaxed),
            tally.failed_open.load(Ordering::Relaxed),
        );
        eprintln!(
            "round {round}: nodes ready {:.2} s, traffic {:.2} s | admitted {admitted}, \
             refused {refused}, failed open {open} ({} in the first 0.3 s, the last at {:.2} s), store errors {errors}, \
             slowest {:.1} ms | during it, masters accepted {opened} connections, answered \
             {noscript} NOSCRIPT, {moved} MOVED",
            ready.as_secs_f64(),
            clock.now().saturating_since(began).as_secs_f64() - ready.as_secs_f64(),
            tally.failed_open_early.load(Ordering::Relaxed),
            tally.last_failed_open_us.load(Ordering::Relaxed) as f64 / 1e6,
            tally.slowest_us.load(Ordering::Relaxed) as f64 / 1000.0,
        );
        if admitted != LIMIT || open != 0 || failed_open != 0 || errors != 0 {
            bad.push(format!(
                "round {round}: admitted {admitted} (and {open} failed open), {seen:?}"
            ));
        }
        if opened != 0 || noscript != 0 || moved != 0 {
            bad.push(format!(
                "round {round}: cold after ready: {opened} connections opened, {noscript} \
                 NOSCRIPT, {moved} MOVED"
            ));
        }
    }
    assert!(bad.is_empty(), "cold starts that failed open: {bad:#?}");
}
