//! An empty configuration is an error, never the built-in example: a file that is empty or
//! holds only comments is refused by `check-config`, at start-up, inside a directory, and on
//! every reload (SIGHUP, `POST /admin/reload`, the watcher), naming the file; the running
//! configuration stays. The example runs only when no configuration is given at all, and the
//! start-up log says so. Real `floodgate` processes.

use crate::common;

use common::cli::floodgate;
use common::serve::{config_file, eventually, serve, serve_refused, Service};
use serde_json::{json, Value};

/// A user's own limits: one named limit, one domain, no Stripe pipeline.
const MINE: &str = r#"
limits:
  mine: {algorithm: fixed_window, limit: 2, window: 1h}
limiters: {}
domains:
  - domain: mine
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 7}
"#;

/// What truncated or commented-out configurations look like.
const EMPTY: [&str; 4] = [
    "",
    "\n\n",
    "# everything commented out\n# limits:\n#   mine: {}\n",
    "---\n",
];

const TOKEN: &str = "an-admin-token-of-some-length";

#[test]
fn check_config_refuses_an_empty_file_and_one_of_comments_naming_it() {
    for text in EMPTY {
        let (_dir, path) = config_file(text);
        let out = floodgate(&["check-config", path.to_str().unwrap()], "");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{text:?}: {stderr}");
        assert!(
            stderr.contains(&format!("{}: holds no settings", path.display())),
            "{text:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{text:?}");
    }
}

#[test]
fn serve_refuses_an_empty_file_and_a_directory_holding_one() {
    let (dir, path) = config_file("");
    let (code, stderr) = serve_refused(&path, "memory", &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("holds no settings"), "{stderr}");
    // In a directory beside a good file, the empty one is named.
    std::fs::write(dir.0.join("a-domain.yaml"), "domain: a\ndescriptors: []\n").unwrap();
    let (code, stderr) = serve_refused(&dir.0, "memory", &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{}: holds no settings", path.display())),
        "{stderr}"
    );
    let out = floodgate(&["check-config", dir.0.to_str().unwrap()], "");
    assert_eq!(out.status.code(), Some(1));
}

/// The user's limit is served, and the built-in `login` is not.
async fn serving_mine(node: &Service, client: &reqwest::Client) {
    let (status, answer) = node
        .post(client, "/v1/check", &json!({"limiter": "mine", "key": "k"}))
        .await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = node
        .post(
            client,
            "/v1/check",
            &json!({"limiter": "login", "key": "k"}),
        )
        .await;
    assert_eq!(status, 404, "the built-in example is not served: {answer}");
    assert!(node.rlconfig(client).await.contains("mine.user"));
    assert!(!node.rlconfig(client).await.contains("example."));
}

#[tokio::test]
async fn every_reload_of_an_emptied_file_is_refused_and_the_running_config_stays() {
    let (_dir, path) = config_file(MINE);
    let node = serve(
        &path,
        "memory",
        &[
            ("FLOODGATE_ADMIN_TOKEN", TOKEN),
            ("FLOODGATE_WATCH", "true"),
        ],
    );
    let client = reqwest::Client::new();
    serving_mine(&node, &client).await;

    // The watcher sees the file emptied.
    std::fs::write(&path, "").unwrap();
    let refused = node.logged("reload refused").await;
    assert!(refused.contains("holds no settings"), "{refused}");
    assert!(refused.contains(&path.display().to_string()), "{refused}");
    serving_mine(&node, &client).await;

    // SIGHUP.
    std::fs::write(&path, "# only a comment\n").unwrap();
    let before = node.log().len();
    node.signal("HUP");
    eventually("the SIGHUP reload refused", || {
        let refused = node.log()[before..]
            .iter()
            .filter(|l| l.contains("reload refused"))
            .count();
        async move { refused > 0 }
    })
    .await;
    serving_mine(&node, &client).await;

    // The admin API: 422, naming the file.
    let answer = client
        .post(format!("{}/admin/reload", node.http))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 422);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["type"], "empty_config", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&path.display().to_string()) && message.contains("holds no settings"),
        "{body}"
    );
    serving_mine(&node, &client).await;
}

#[tokio::test]
async fn the_example_runs_only_without_any_configuration_and_says_so() {
    let node = common::serve::start({
        let mut command =
            common::serve::bare_command(std::path::Path::new(env!("CARGO_BIN_EXE_floodgate")), &[]);
        command.args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"]);
        command
    });
    assert!(
        node.started.contains("no configuration given")
            && node.started.contains("built-in example"),
        "{}",
        node.started
    );
    let client = reqwest::Client::new();
    let (status, _) = node
        .post(
            &client,
            "/v1/check",
            &json!({"limiter": "login", "key": "k"}),
        )
        .await;
    assert_eq!(status, 200);
}
