//! Reloads say what they did: every reload (SIGHUP, `POST /admin/reload`, the watcher) logs one
//! INFO line naming its trigger and what changed, the admin answer carries the same summary,
//! settings read only at start-up that the file changes are kept and named (WARN, and the
//! admin answer's `restart_to_apply`), and a failed reload is one ERROR line. Real `floodgate
//! serve` processes.

use crate::common;

use common::serve::{config_file, eventually, serve, Service};
use serde_json::{json, Value};

const TOKEN: &str = "an-admin-token-of-some-length";

const BEFORE: &str = r#"
plans:
  free: {algorithm: token_bucket, rate: 10, capacity: 10}
  gone: {algorithm: token_bucket, rate: 1, capacity: 1}
default_plan: free
limits:
  login: {algorithm: sliding_log, limit: 5, window: 1m}
domains:
  - domain: edge
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 3}
"#;

const AFTER: &str = r#"
store: {url: "redis://127.0.0.1:1", timeout: 1s}
http: 127.0.0.1:1
plans:
  free: {algorithm: token_bucket, rate: 20, capacity: 10}
  pro: {algorithm: token_bucket, rate: 100, capacity: 100}
default_plan: free
limits:
  login: {algorithm: sliding_log, limit: 5, window: 1m}
domains:
  - domain: edge
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 3}
  - domain: new
    descriptors: []
"#;

async fn admin_reload(node: &Service, client: &reqwest::Client) -> (u16, Value) {
    let answer = client
        .post(format!("{}/admin/reload", node.http))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap())
}

/// The log lines after the first `from`, with `what` in them.
fn lines_with(node: &Service, from: usize, what: &str) -> Vec<String> {
    node.log()
        .into_iter()
        .skip(from)
        .filter(|l| l.contains(what))
        .collect()
}

#[tokio::test]
async fn every_reload_logs_its_trigger_and_what_changed_and_names_what_needs_a_restart() {
    let (_dir, path) = config_file(BEFORE);
    let node = serve(&path, "memory", &[("FLOODGATE_ADMIN_TOKEN", TOKEN)]);
    let client = reqwest::Client::new();

    // The admin API, with nothing changed.
    let (status, body) = admin_reload(&node, &client).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["summary"], "nothing changed", "{body}");
    assert_eq!(body["restart_to_apply"], json!([]), "{body}");
    let line = node.logged("configuration reloaded").await;
    assert!(
        line.contains("trigger=\"admin\"") && line.contains("nothing changed"),
        "{line}"
    );

    // Plans and domains changed, and settings only start-up reads: kept, and named.
    std::fs::write(&path, AFTER).unwrap();
    let from = node.log().len();
    let (status, body) = admin_reload(&node, &client).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["summary"],
        "domains added: new; plans added: pro; plans changed: free; plans removed: gone",
        "{body}"
    );
    assert_eq!(body["changes"]["plans"]["gone"], "removed", "{body}");
    assert_eq!(
        body["restart_to_apply"],
        json!(["http", "store.url", "store.timeout"]),
        "{body}"
    );
    eventually("the WARN lines", || {
        let warned = lines_with(&node, from, "restart to apply").len();
        async move { warned == 3 }
    })
    .await;
    for setting in ["setting=http", "setting=store.url", "setting=store.timeout"] {
        assert!(
            lines_with(&node, from, "restart to apply")
                .iter()
                .any(|l| l.contains(setting) && l.contains("WARN")),
            "{setting}: {:#?}",
            node.log()
        );
    }
    // Still serving on the memory store, on the same address.
    let (status, _) = node.get(&client, "/readyz").await;
    assert_eq!(status, 200);
    assert!(node.rlconfig(&client).await.contains("edge.user"));

    // SIGHUP: its own trigger, and nothing changed since.
    let from = node.log().len();
    node.signal("HUP");
    eventually("the SIGHUP reload's line", || {
        let lines = lines_with(&node, from, "configuration reloaded");
        async move {
            lines
                .iter()
                .any(|l| l.contains("trigger=\"SIGHUP\"") && l.contains("nothing changed"))
        }
    })
    .await;

    // A refused reload: one ERROR line, under one target, naming the trigger.
    std::fs::write(&path, "plans: [not, a, map]\n").unwrap();
    let from = node.log().len();
    let (status, body) = admin_reload(&node, &client).await;
    assert_eq!(status, 422, "{body}");
    node.signal("HUP");
    eventually("two refusals logged", || {
        let refused = lines_with(&node, from, "reload refused").len();
        async move { refused == 2 }
    })
    .await;
    let refused = lines_with(&node, from, "reload refused");
    for (line, trigger) in refused.iter().zip(["admin", "SIGHUP"]) {
        assert!(
            line.contains("ERROR floodgate_service::service::reload:")
                && line.contains(&format!("trigger=\"{trigger}\"")),
            "{line}"
        );
    }
    // Nothing else was logged about them.
    assert_eq!(
        node.log().len() - from,
        2,
        "one line per failed reload: {:#?}",
        &node.log()[from..]
    );
}

#[tokio::test]
async fn the_watcher_names_itself() {
    let (_dir, path) = config_file(BEFORE);
    let node = serve(&path, "memory", &[("FLOODGATE_WATCH", "true")]);
    let client = reqwest::Client::new();
    node.until_listed(&client, "edge.user").await;
    std::fs::write(
        &path,
        BEFORE.replace("requests_per_unit: 3", "requests_per_unit: 4"),
    )
    .unwrap();
    let line = node.logged("configuration reloaded").await;
    assert!(
        line.contains("trigger=\"watcher\"") && line.contains("domains changed: edge"),
        "{line}"
    );
}
