//! SIGHUP and SIGTERM while traffic flows, through the real binary: reloads (good and broken
//! files) lose no answer and no lease, and a shutdown answers every call it took.

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::cli::metric;
use common::serve::{config_file, serve, Service};
use serde_json::{json, Value};

const CONFIG: &str = r#"
plans: {free: {algorithm: token_bucket, rate: 100000, capacity: 100000}}
default_plan: free
limiters:
  request_rate: {}
  concurrency: {capacity: 50, lease_ttl: 1h}
  fleet: {capacity: 1000, reserved_for_critical: 0.1, lease_ttl: 1h}
"#;

/// One caller: evaluate, then release the lease, `rounds` times; every answer must be a
/// success. Returns the calls made.
async fn caller(http: String, rounds: u64, done: Arc<AtomicU64>) -> Result<u64, String> {
    let client = reqwest::Client::new();
    for i in 0..rounds {
        let body = json!({"user": format!("u{}", i % 5), "priority": "get"});
        let response = client
            .post(format!("{http}/v1/evaluate"))
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("evaluate: {e}"))?;
        let status = response.status().as_u16();
        let answer: Value = response
            .json()
            .await
            .map_err(|e| format!("evaluate body: {e}"))?;
        if status != 200 || answer["allowed"] != true {
            return Err(format!("evaluate {status}: {answer}"));
        }
        let lease = answer["lease"].clone();
        let response = client
            .post(format!("{http}/v1/release"))
            .json(&json!({"lease": lease}))
            .send()
            .await
            .map_err(|e| format!("release: {e}"))?;
        let answer: Value = response
            .json()
            .await
            .map_err(|e| format!("release body: {e}"))?;
        if answer["released"] != true {
            return Err(format!("release: {answer}"));
        }
        done.fetch_add(1, Ordering::Relaxed);
    }
    Ok(rounds)
}

/// Polls `/metrics` (a bounded number of times) until `name` reaches `at_least`.
async fn wait_for_metric(node: &Service, client: &reqwest::Client, name: &str, at_least: f64) {
    for _ in 0..5000 {
        let (_, metrics) = node.get(client, "/metrics").await;
        if metric(&metrics, name).is_some_and(|v| v >= at_least) {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("{name} never reached {at_least}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_under_load_lose_no_answer_and_no_lease() {
    let (_dir, path) = config_file(CONFIG);
    let node = serve(&path, "memory", &[]);
    let client = reqwest::Client::new();
    let done = Arc::new(AtomicU64::new(0));
    let callers: Vec<_> = (0..8)
        .map(|_| tokio::spawn(caller(node.http.clone(), 300, done.clone())))
        .collect();
    let mut reloaded_at = 0;
    for round in 1..=3u32 {
        // A broken file: refused, the running config stays.
        std::fs::write(&path, "plans: [unclosed").unwrap();
        node.signal("HUP");
        let failed = r#"floodgate_reloads_total{result="failed"}"#;
        wait_for_metric(&node, &client, failed, f64::from(round)).await;
        // A good one, with another plan rate: applied.
        let rate = 100_000 + round;
        std::fs::write(
            &path,
            CONFIG.replace("rate: 100000", &format!("rate: {rate}")),
        )
        .unwrap();
        node.signal("HUP");
        let ok = r#"floodgate_reloads_total{result="ok"}"#;
        wait_for_metric(&node, &client, ok, f64::from(round)).await;
        reloaded_at = done.load(Ordering::Relaxed);
    }
    // The reloads happened while the callers were still calling.
    assert!(
        reloaded_at < 2400,
        "the load was over before the last reload"
    );
    for c in callers {
        assert_eq!(c.await.unwrap(), Ok(300));
    }
    assert_eq!(done.load(Ordering::Relaxed), 2400);
    // Every lease taken came back, across six reloads: the fleet holds nothing.
    let (_, metrics) = node.get(&client, "/metrics").await;
    assert_eq!(
        metric(&metrics, r#"floodgate_in_flight{limiter="fleet"}"#),
        Some(0.0),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_answers_every_call_it_took_and_exits_zero() {
    let (_dir, path) = config_file(CONFIG);
    let mut node = serve(&path, "memory", &[]);
    let done = Arc::new(AtomicU64::new(0));
    let callers: Vec<_> = (0..8)
        .map(|_| tokio::spawn(caller(node.http.clone(), 1_000_000, done.clone())))
        .collect();
    while done.load(Ordering::Relaxed) < 400 {
        tokio::task::yield_now().await;
    }
    node.signal("TERM");
    // Each caller stops at its first failure. A call the service took is answered in full; what
    // may fail is a call it never took: a refused connection, or a request on a kept-alive
    // connection the shutdown closed before reading it.
    for c in callers {
        let end = c.await.unwrap();
        let error = end.expect_err("the service stops");
        assert!(
            !error.contains("body") && !error.contains("evaluate 5") && !error.contains("released"),
            "a call the service took was not answered: {error}"
        );
    }
    // The process exits by itself; poll it, for at most 20 s.
    let mut exit = None;
    for _ in 0..1_000 {
        exit = node.exited();
        if exit.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(exit.map(|e| e.code()), Some(Some(0)));
}
