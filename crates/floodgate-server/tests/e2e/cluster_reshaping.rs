//! Three real `floodgate serve` processes on a Redis Cluster of the test's own while it
//! changes shape under their load, as operators change it: a master added and the slots
//! rebalanced onto it, a hot slot moved key by key to another master and back, the added
//! master drained and removed, a master failed over to its replica. The load: every
//! algorithm Redis runs as a named limit (`/v1/check`), a concurrency lease kept per request
//! (`/v1/evaluate`), and an Envoy window (`/json`), each of 20 per user, asked three times
//! over through the three nodes. Each phase counts on keys of its own and checks that every
//! answer came from the store (no `failed_open`, no store error on any node's `/metrics`),
//! that every limit of 20 admitted exactly 20, and prints its figures (requests,
//! redirections the nodes followed, failures, the largest over-admission, the slowest
//! answer), which RELIABILITY.md records.

use crate::common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::serve::{config_file, serve, Service};
use floodgate::{Clock, SystemClock};
use floodgate_harness::RedisCluster;
use serde_json::{json, Value};

const N: u64 = 20;
const USERS: u64 = 12;
/// The user a tenth of the calls are for (its slot is the hot one).
const HOT: u64 = 0;

/// Every algorithm Redis runs as a named limit of 20 an hour (rates that refill nothing that
/// counts within the test), a pipeline taking a lease of 20 in flight per user (kept: never
/// given back), and an Envoy window of 20 an hour. A store timeout that no answer reaches on a
/// loaded test machine, so that every answer comes from the store. The clients' pools open
/// spare connections they may leave unused for long on a loaded machine, and may take one for
/// a call just as the service closes it for having sent nothing: that defence is not what
/// this test is about (`connections.rs` is), so it waits for an hour here.
const CONFIG: &str = r#"
store: {timeout: 2s}
connections: {header_read_timeout: 1h}
limits:
  fw: {algorithm: fixed_window, limit: 20, window: 1h}
  sw: {algorithm: sliding_window, limit: 20, window: 1h}
  sl: {algorithm: sliding_log, limit: 20, window: 1h}
  tb: {algorithm: token_bucket, rate: 0.0001, capacity: 20}
  lb: {algorithm: leaky_bucket, rate: 0.0001, capacity: 20}
  gcra: {algorithm: gcra, max_burst: 19, count: 1, period: 1h}
plans: {free: {algorithm: token_bucket, rate: 100000, capacity: 100000}}
default_plan: free
limiters:
  request_rate: {}
  concurrency: {capacity: 20, lease_ttl: 1h}
domains:
  - domain: edge
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 20}
"#;

const LIMITS: [&str; 6] = ["fw", "sw", "sl", "tb", "lb", "gcra"];

/// What a call asks: a named limit's check, a lease, or an Envoy window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Check(usize),
    Lease,
    Envoy,
}

const KINDS: usize = LIMITS.len() + 2;

fn kind(i: usize) -> Kind {
    match i {
        i if i < LIMITS.len() => Kind::Check(i),
        i if i == LIMITS.len() => Kind::Lease,
        _ => Kind::Envoy,
    }
}

#[derive(Default)]
struct Tally {
    requests: AtomicU64,
    asked: Mutex<HashMap<(Kind, u64), u64>>,
    admitted: Mutex<HashMap<(Kind, u64), u64>>,
    failures: Mutex<Vec<String>>,
    slowest_us: AtomicU64,
}

/// One call of `kind` for user `user` of phase `phase` on `node`: whether it was admitted, or
/// what was wrong with the answer.
async fn call(
    client: &reqwest::Client,
    node: &Service,
    phase: &str,
    kind: Kind,
    user: u64,
) -> Result<bool, String> {
    let user = format!("{phase}-user{user}");
    let (path, body) = match kind {
        Kind::Check(i) => ("/v1/check", json!({"limiter": LIMITS[i], "key": user})),
        Kind::Lease => ("/v1/evaluate", json!({"user": user})),
        Kind::Envoy => (
            "/json",
            json!({"domain": "edge", "descriptors": [{"entries": [{"key": "user", "value": user}]}]}),
        ),
    };
    let response = client
        .post(format!("{}{path}", node.http))
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("{path}: no answer: {e:?}"))?;
    let status = response.status().as_u16();
    let answer: Value = response
        .json()
        .await
        .map_err(|e| format!("{path}: no JSON answer: {e}"))?;
    if status != 200 && status != 429 {
        return Err(format!("{path}: {status} {answer}"));
    }
    if answer.get("failed_open").is_some() {
        return Err(format!("{path}: failed open {answer}"));
    }
    Ok(match kind {
        Kind::Envoy => answer["overallCode"] == "OK",
        _ => answer["allowed"] == json!(true),
    })
}

/// Loads `nodes` with calls on phase `phase`'s keys until `stop`, into `tally`.
fn load(
    nodes: &Arc<Vec<Service>>,
    phase: &'static str,
    stop: &Arc<AtomicBool>,
    tally: &Arc<Tally>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..12u64)
        .map(|t| {
            let (nodes, stop, tally) = (nodes.clone(), stop.clone(), tally.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let clock = SystemClock::new();
                let mut n = t + 1;
                while !stop.load(Ordering::Relaxed) {
                    n = n
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    let r = n >> 33;
                    let user = if r.is_multiple_of(10) { HOT } else { r % USERS };
                    let kind = kind((r / 10) as usize % KINDS);
                    let node = &nodes[(r / 100) as usize % nodes.len()];
                    let started = clock.now();
                    let answer = call(&client, node, phase, kind, user).await;
                    let took = clock.now().saturating_since(started).as_micros() as u64;
                    tally.slowest_us.fetch_max(took, Ordering::Relaxed);
                    tally.requests.fetch_add(1, Ordering::Relaxed);
                    *tally.asked.lock().unwrap().entry((kind, user)).or_default() += 1;
                    match answer {
                        Ok(true) => {
                            *tally
                                .admitted
                                .lock()
                                .unwrap()
                                .entry((kind, user))
                                .or_default() += 1
                        }
                        Ok(false) => {}
                        Err(e) => tally.failures.lock().unwrap().push(e),
                    }
                }
            })
        })
        .collect()
}

/// A number from a Prometheus text: the sum of every sample of `family` whose labels hold
/// `with`.
fn sum(text: &str, family: &str, with: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains(with))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The sum over `nodes` of `family` (samples holding `with`) on their `/metrics`.
async fn across(nodes: &[Service], family: &str, with: &str) -> u64 {
    let client = reqwest::Client::new();
    let mut total = 0;
    for node in nodes {
        total += sum(&node.get(&client, "/metrics").await.1, family, with);
    }
    total
}

/// What the nodes said: which answer of the store was taken for a failure, or why a node
/// stopped answering.
fn print_logs(nodes: &[Service]) {
    for node in nodes {
        let alive = std::process::Command::new("kill")
            .args(["-0", &node.pid().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        eprintln!("{}: running {alive}", node.http);
        let log = node.log();
        let said = log
            .iter()
            .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("panicked"));
        for line in said.chain(log.iter().rev().take(5).rev()) {
            eprintln!("{}: {line}", node.http);
        }
    }
}

/// Runs phase `phase`'s load while `change` changes `cluster`'s shape (on a thread of its
/// own: the harness waits on other processes), until every key was asked 3N times; checks
/// and prints the phase's figures.
async fn phase(
    name: &str,
    phase: &'static str,
    nodes: &Arc<Vec<Service>>,
    cluster: &Arc<Mutex<RedisCluster>>,
    change: impl FnOnce(&mut RedisCluster) + Send + 'static,
) {
    let errors_before = across(nodes, "floodgate_store_errors_total", "").await;
    let redirects_before = across(nodes, "floodgate_store_redirects_total", "").await;
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let began = cluster.lock().unwrap().seconds();
    let tasks = load(nodes, phase, &stop, &tally);
    let shaping = cluster.clone();
    tokio::task::spawn_blocking(move || change(&mut shaping.lock().unwrap()))
        .await
        .unwrap();
    for _ in 0..600 {
        let done = {
            let asked = tally.asked.lock().unwrap();
            asked.len() == KINDS * USERS as usize && asked.values().all(|&n| n >= 3 * N)
        };
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    let failures = tally.failures.lock().unwrap().clone();
    if !failures.is_empty() {
        print_logs(nodes);
    }
    assert!(failures.is_empty(), "{name}: {failures:?}");
    let store_errors = across(nodes, "floodgate_store_errors_total", "").await - errors_before;
    if store_errors > 0 {
        print_logs(nodes);
    }
    assert_eq!(store_errors, 0, "{name}: store errors on the nodes");
    let admitted = tally.admitted.lock().unwrap().clone();
    assert_eq!(
        admitted.len(),
        KINDS * USERS as usize,
        "{name}: every key reached 20"
    );
    // The fixed window and the Envoy window are aligned to Redis's clock: a phase that crosses
    // the hour may admit N in each of its two windows.
    let hour_turned = began / 3600 != cluster.lock().unwrap().seconds() / 3600;
    let most = |kind: &Kind| match kind {
        Kind::Check(i) if LIMITS[*i] == "fw" && hour_turned => 2 * N,
        Kind::Envoy if hour_turned => 2 * N,
        _ => N,
    };
    let largest_over = admitted
        .iter()
        .map(|((kind, _), n)| n.saturating_sub(most(kind)))
        .max()
        .unwrap_or(0);
    for ((kind, user), n) in &admitted {
        assert!(
            (N..=most(kind)).contains(n),
            "{name}: {kind:?} admitted {n} for user{user}, at most {}",
            most(kind)
        );
    }
    let redirects = across(nodes, "floodgate_store_redirects_total", "").await - redirects_before;
    eprintln!(
        "RELIABILITY | {name} | {} requests | {redirects} redirects | {} failed open | over-admission {largest_over} | slowest {:.1} ms",
        tally.requests.load(Ordering::Relaxed),
        store_errors,
        tally.slowest_us.load(Ordering::Relaxed) as f64 / 1000.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_stay_exact_while_the_cluster_changes_shape() {
    let cluster = RedisCluster::start(3, 1);
    let (_dir, path) = config_file(CONFIG);
    let nodes = Arc::new(
        (0..3)
            .map(|_| serve(&path, &cluster.url(), &[]))
            .collect::<Vec<_>>(),
    );
    let hot_slot = cluster.slot_of(&format!("p2-user{HOT}"));
    let cluster = Arc::new(Mutex::new(cluster));
    let added = Arc::new(AtomicU64::new(0));

    let joined = added.clone();
    phase(
        "add a master, rebalance",
        "p1",
        &nodes,
        &cluster,
        move |c| {
            joined.store(u64::from(c.add_master()), Ordering::Relaxed);
            c.rebalance();
        },
    )
    .await;
    phase(
        "move a hot slot and back",
        "p2",
        &nodes,
        &cluster,
        move |c| {
            let home = c.master_of_slot(hot_slot);
            let away = c
                .nodes()
                .into_iter()
                .find(|n| n.master && n.port != home && !n.failing)
                .unwrap()
                .port;
            c.move_slot(hot_slot, away, 1, Duration::from_millis(20));
            c.move_slot(hot_slot, home, 1, Duration::from_millis(20));
        },
    )
    .await;
    let leaving = added.load(Ordering::Relaxed) as u16;
    phase(
        "drain and remove a master",
        "p3",
        &nodes,
        &cluster,
        move |c| {
            c.remove_master(leaving);
        },
    )
    .await;
    let hot_master = cluster.lock().unwrap().master_of(&format!("p4-user{HOT}"));
    phase("fail a master over", "p4", &nodes, &cluster, move |c| {
        c.failover(hot_master);
    })
    .await;
    // Every node followed redirections, and counted them apart from failures.
    let redirects = across(&nodes, "floodgate_store_redirects_total", "").await;
    assert!(redirects > 0, "the nodes followed no redirection");
}
