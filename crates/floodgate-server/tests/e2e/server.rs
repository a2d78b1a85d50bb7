//! `floodgate serve` end to end: the real binary on ephemeral loopback ports, called over HTTP
//! the way a gateway or a client would.

use crate::common;

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::serve::{self, TempDir};
use serde_json::{json, Value};

/// A running `floodgate serve` ([`serve::Service`]: its addresses, pid and exit) and the
/// directory of its config file.
struct Service {
    service: serve::Service,
    _dir: Option<TempDir>,
}

impl std::ops::Deref for Service {
    type Target = serve::Service;

    fn deref(&self) -> &serve::Service {
        &self.service
    }
}

impl std::ops::DerefMut for Service {
    fn deref_mut(&mut self) -> &mut serve::Service {
        &mut self.service
    }
}

/// Starts the binary with `config` (YAML text, or the built-in config when `None`) on ports
/// the OS chooses, and returns once both listeners are bound.
async fn start(config: Option<&str>, admin_token: Option<&str>) -> Service {
    let mut command = serve::bare_command(env!("CARGO_BIN_EXE_floodgate").as_ref(), &[]);
    command.args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"]);
    if let Some(token) = admin_token {
        command.env("FLOODGATE_ADMIN_TOKEN", token);
    }
    let dir = config.map(|text| {
        let (dir, path) = serve::config_file(text);
        command.arg("--config").arg(&path);
        dir
    });
    Service {
        service: serve::start(command),
        _dir: dir,
    }
}

impl Service {
    fn config_path(&self) -> PathBuf {
        self._dir
            .as_ref()
            .expect("started with a config")
            .0
            .join("floodgate.yaml")
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.post_raw(path, body.to_string(), None).await
    }

    async fn post_raw(&self, path: &str, body: String, token: Option<&str>) -> (u16, Value) {
        let mut request = reqwest::Client::new()
            .post(format!("{}{path}", self.http))
            .header("content-type", "application/json")
            .body(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("the service answers");
        let status = response.status().as_u16();
        let text = response.text().await.expect("a body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn get(&self, path: &str) -> (u16, String) {
        let r = reqwest::get(format!("{}{path}", self.http))
            .await
            .expect("answers");
        (r.status().as_u16(), r.text().await.expect("a body"))
    }
}

const CONFIG: &str = r#"
plans:
  tiny: {algorithm: token_bucket, rate: 0.001, capacity: 3}
  big: {algorithm: token_bucket, rate: 0.001, capacity: 1000}
default_plan: tiny
users:
  vip: big
limiters:
  request_rate: {mode: enforce}
  concurrency: {capacity: 2, lease_ttl: 60s, mode: enforce}
limits:
  login: {algorithm: fixed_window, limit: 2, window: 1h}
domains:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit: {unit: hour, requests_per_unit: 2}
      - key: path
        value: "/api/*"
        rate_limit: {unit: hour, requests_per_unit: 1}
      - key: tenant
        descriptors:
          - key: user
            rate_limit: {unit: day, requests_per_unit: 3}
      - key: free
        unlimited: true
      - key: blocked
        rate_limit: {unit: second, requests_per_unit: 0}
      - key: dark
        shadow_mode: true
        rate_limit: {unit: hour, requests_per_unit: 1}
"#;

fn json_descriptor(entries: &[(&str, &str)]) -> Value {
    json!({"entries": entries.iter().map(|(k, v)| json!({"key": k, "value": v})).collect::<Vec<_>>()})
}

#[tokio::test]
async fn evaluate_refuses_at_the_plan_limit_with_headers_and_a_lease_to_release() {
    let s = start(Some(CONFIG), None).await;
    let mut answers = Vec::new();
    for _ in 0..4 {
        let (status, body) = s.post("/v1/evaluate", json!({"user": "ann"})).await;
        assert_eq!(status, 200, "{body}");
        answers.push(body);
        if let Some(lease) = answers.last().and_then(|b| b["lease"].as_str()) {
            let (status, released) = s.post("/v1/release", json!({"lease": lease})).await;
            assert_eq!((status, released["released"].clone()), (200, json!(true)));
        }
    }
    let allowed: Vec<bool> = answers
        .iter()
        .map(|a| a["allowed"].as_bool().unwrap())
        .collect();
    assert_eq!(allowed, [true, true, true, false]);
    let refused = &answers[3];
    assert_eq!(refused["status"], 429);
    assert_eq!(refused["limiter"], "request_rate");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .starts_with("plan tiny allows"),
        "{refused}"
    );
    assert!(
        refused["headers"]["retry-after"].as_str().is_some(),
        "{refused}"
    );
    assert!(refused["headers"]["ratelimit-policy"]
        .as_str()
        .unwrap()
        .starts_with("\"requests\";q="));
    // A user on a bigger plan is not affected.
    let (_, vip) = s.post("/v1/evaluate", json!({"user": "vip"})).await;
    assert_eq!(vip["allowed"], true);
}

#[tokio::test]
async fn concurrency_leases_are_held_until_released() {
    let s = start(Some(CONFIG), None).await;
    let (_, a) = s.post("/v1/evaluate", json!({"user": "vip"})).await;
    let (_, b) = s.post("/v1/evaluate", json!({"user": "vip"})).await;
    let (_, c) = s.post("/v1/evaluate", json!({"user": "vip"})).await;
    assert_eq!(
        (a["allowed"].clone(), b["allowed"].clone()),
        (json!(true), json!(true))
    );
    assert_eq!(c["status"], 429);
    assert_eq!(c["limiter"], "concurrency");
    let (_, r) = s.post("/v1/release", json!({"lease": a["lease"]})).await;
    assert_eq!(r["released"], true);
    let (_, r) = s.post("/v1/release", json!({"lease": a["lease"]})).await;
    assert_eq!(r["released"], false);
    let (_, d) = s.post("/v1/evaluate", json!({"user": "vip"})).await;
    assert_eq!(d["allowed"], true);
}

#[tokio::test]
async fn check_applies_named_limits() {
    let s = start(Some(CONFIG), None).await;
    let call = || {
        s.post(
            "/v1/check",
            json!({"limiter": "login", "key": "ann@example.com"}),
        )
    };
    let (_, first) = call().await;
    let (_, second) = call().await;
    let (status, third) = call().await;
    assert_eq!(status, 200);
    assert_eq!(
        (first["allowed"].clone(), second["remaining"].clone()),
        (json!(true), json!(0))
    );
    assert_eq!(third["allowed"], false);
    assert!(third["retry_after"].as_f64().unwrap() > 0.0);
    let (status, body) = s
        .post("/v1/check", json!({"limiter": "nope", "key": "k"}))
        .await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["type"], "unknown_limiter");
}

#[tokio::test]
async fn envoy_json_endpoint_follows_the_descriptor_rules() {
    let s = start(Some(CONFIG), None).await;
    let ask = |descriptors: Vec<Value>, hits: u32| {
        s.post(
            "/json",
            json!({"domain": "edge", "descriptors": descriptors, "hitsAddend": hits}),
        )
    };
    let ip = json_descriptor(&[("remote_address", "10.0.0.1")]);
    let (status, first) = ask(vec![ip.clone()], 1).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["overallCode"], "OK");
    assert_eq!(first["statuses"][0]["limitRemaining"], 1);
    assert_eq!(first["statuses"][0]["currentLimit"]["requestsPerUnit"], 2);
    let (status, over) = ask(vec![ip.clone()], 1).await;
    assert_eq!((status, over["overallCode"].clone()), (200, json!("OK")));
    let (status, over) = ask(vec![ip], 1).await;
    assert_eq!(
        (status, over["overallCode"].clone()),
        (429, json!("OVER_LIMIT"))
    );
    // Another address has its own counter; hits_addend counts several at once.
    let (status, _) = ask(vec![json_descriptor(&[("remote_address", "10.0.0.2")])], 3).await;
    assert_eq!(status, 429);
    // Wildcard values.
    let api = json_descriptor(&[("path", "/api/users")]);
    assert_eq!(ask(vec![api.clone()], 1).await.0, 200);
    assert_eq!(ask(vec![api], 1).await.0, 429);
    assert_eq!(
        ask(vec![json_descriptor(&[("path", "/web")])], 1).await.0,
        200
    );
    // Nested descriptors.
    let nested = json_descriptor(&[("tenant", "acme"), ("user", "ann")]);
    for expected in [200, 200, 200, 429] {
        assert_eq!(ask(vec![nested.clone()], 1).await.0, expected);
    }
    // Unlimited and shadow mode never refuse; a shadow limit that is over answers OK, as
    // envoyproxy/ratelimit does, and is counted.
    for _ in 0..3 {
        assert_eq!(ask(vec![json_descriptor(&[("free", "x")])], 1).await.0, 200);
        let (status, body) = ask(vec![json_descriptor(&[("dark", "x")])], 1).await;
        assert_eq!(
            (status, body["statuses"][0]["code"].clone()),
            (200, json!("OK"))
        );
    }
    let (_, metrics) = s.get("/metrics").await;
    assert!(
        metrics.contains("floodgate_rls_shadow_over_limit_total 2"),
        "{metrics}"
    );
    // requests_per_unit 0 blocks outright, as in envoyproxy/ratelimit.
    let (status, body) = ask(vec![json_descriptor(&[("blocked", "x")])], 1).await;
    assert_eq!(
        (status, body["overallCode"].clone()),
        (429, json!("OVER_LIMIT"))
    );
    // An unknown domain is allowed.
    let (status, body) = s
        .post(
            "/json",
            json!({"domain": "other", "descriptors": [json_descriptor(&[("a", "b")])]}),
        )
        .await;
    assert_eq!((status, body["overallCode"].clone()), (200, json!("OK")));
}

#[tokio::test]
async fn bad_input_gets_a_clear_4xx_and_the_service_keeps_serving() {
    let s = start(Some(CONFIG), None).await;
    let cases = [
        (
            "/v1/evaluate",
            "{not json".to_string(),
            400,
            "invalid_request",
        ),
        (
            "/v1/evaluate",
            json!({"user": 7}).to_string(),
            400,
            "invalid_request",
        ),
        (
            "/v1/evaluate",
            json!({"user": "a", "priority": "urgent"}).to_string(),
            400,
            "unknown_priority",
        ),
        (
            "/v1/evaluate",
            json!({"user": ""}).to_string(),
            400,
            "empty_user",
        ),
        (
            "/v1/check",
            json!({"key": "k"}).to_string(),
            400,
            "invalid_request",
        ),
        (
            "/v1/check",
            json!({"limiter": "login", "key": "k", "cost": -1}).to_string(),
            400,
            "invalid_request",
        ),
        (
            "/v1/release",
            json!({"lease": "garbage"}).to_string(),
            400,
            "malformed_lease_token",
        ),
        (
            "/v1/release",
            json!({"lease": "v9.x.y"}).to_string(),
            400,
            "unsupported_lease_token_version",
        ),
        (
            "/json",
            json!({"domain": "", "descriptors": []}).to_string(),
            400,
            "empty_field",
        ),
        (
            "/json",
            json!({"domain": "d", "descriptors": [{}], "extra": 1}).to_string(),
            400,
            "unknown_field",
        ),
        (
            "/v1/evaluate",
            format!("{{\"user\": \"{}\"}}", "x".repeat(100_000)),
            413,
            "body_too_large",
        ),
    ];
    for (path, body, expected, kind) in cases {
        let (status, answer) = s.post_raw(path, body, None).await;
        assert_eq!(status, expected, "{path}: {answer}");
        assert_eq!(answer["error"]["type"], kind, "{path}: {answer}");
        assert!(
            answer["error"]["message"].as_str().is_some(),
            "{path}: {answer}"
        );
    }
    let (status, _) = s.get("/nope").await;
    assert_eq!(status, 404);
    let (_, ok) = s.post("/v1/evaluate", json!({"user": "still-here"})).await;
    assert_eq!(ok["allowed"], true);
}

/// Every error is JSON and says what to change: a wrong method names the one the endpoint
/// takes, an unknown limit lists the configured ones, a body too large names the limit and the
/// setting that raises it, a cost above the limit says it can never pass.
#[tokio::test]
async fn errors_say_what_to_change() {
    let s = start(Some(CONFIG), None).await;
    let response = reqwest::get(format!("{}/v1/check", s.http)).await.unwrap();
    assert_eq!(response.status().as_u16(), 405);
    assert_eq!(response.headers()["allow"], "POST");
    let answer: Value = response.json().await.expect("a JSON body");
    assert_eq!(answer["error"]["type"], "method_not_allowed", "{answer}");
    assert_eq!(
        answer["error"]["message"], "`GET /v1/check`: /v1/check takes POST",
        "{answer}"
    );
    let (status, answer) = s
        .post("/v1/check", json!({"limiter": "signup", "key": "k"}))
        .await;
    assert_eq!(
        (status, &answer["error"]["type"]),
        (404, &json!("unknown_limiter"))
    );
    assert_eq!(
        answer["error"]["message"], "no limit named `signup` (configured: login)",
        "{answer}"
    );
    let (status, answer) = s.post_raw("/v1/check", "x".repeat(70_000), None).await;
    assert_eq!(status, 413, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("65536 bytes") && message.contains("connections.max_body_bytes"),
        "{message}"
    );
    let (_, answer) = s
        .post(
            "/v1/check",
            json!({"limiter": "login", "key": "k", "cost": 3}),
        )
        .await;
    assert_eq!(answer["allowed"], false, "{answer}");
    assert_eq!(
        answer["message"], "cost 3 is above the limit 2 of `login`: such a request can never pass",
        "{answer}"
    );
}

#[tokio::test]
async fn admin_requires_the_token_and_switches_modes_and_plans() {
    let disabled = start(Some(CONFIG), None).await;
    let body = json!({"limiter": "request_rate", "mode": "shadow"}).to_string();
    let (status, _) = disabled
        .post_raw("/admin/mode", body.clone(), Some("x"))
        .await;
    assert_eq!(status, 403);

    let s = start(Some(CONFIG), Some("s3cret-admin-token")).await;
    assert_eq!(s.post_raw("/admin/mode", body.clone(), None).await.0, 401);
    let (status, answer) = s
        .post_raw("/admin/mode", body.clone(), Some("wrong-guess"))
        .await;
    assert_eq!(
        (status, &answer["error"]["type"]),
        (401, &json!("unauthorized"))
    );
    assert!(!answer.to_string().contains("wrong-guess"), "{answer}");
    for _ in 0..3 {
        let (_, ok) = s.post("/v1/evaluate", json!({"user": "bo"})).await;
        s.post("/v1/release", json!({"lease": ok["lease"]})).await;
    }
    let (_, refused) = s.post("/v1/evaluate", json!({"user": "bo"})).await;
    assert_eq!(refused["limiter"], "request_rate");
    assert_eq!(
        s.post_raw("/admin/mode", body, Some("s3cret-admin-token"))
            .await
            .0,
        200
    );
    let (_, shadowed) = s.post("/v1/evaluate", json!({"user": "bo"})).await;
    assert_eq!(shadowed["allowed"], true);
    assert_eq!(shadowed["shadow_refusals"], json!(["request_rate"]));
    let bad = json!({"limiter": "request_rate", "mode": "maybe"}).to_string();
    let (status, answer) = s
        .post_raw("/admin/mode", bad, Some("s3cret-admin-token"))
        .await;
    assert_eq!(
        (status, &answer["error"]["type"]),
        (400, &json!("unknown_mode"))
    );
    // Plans.
    let plan = json!({"user": "cy", "plan": "big"}).to_string();
    assert_eq!(
        s.post_raw("/admin/plan", plan, Some("s3cret-admin-token"))
            .await
            .0,
        200
    );
    let bad_plan = json!({"user": "cy", "plan": "gold"}).to_string();
    let (status, answer) = s
        .post_raw("/admin/plan", bad_plan, Some("s3cret-admin-token"))
        .await;
    assert_eq!(
        (status, &answer["error"]["type"]),
        (400, &json!("unknown_plan"))
    );
    let (_, metrics) = s.get("/metrics").await;
    assert!(
        metrics.contains(
            "floodgate_shadow_refusals_total{limiter=\"request_rate\",kind=\"request_rate\",mode=\"shadow\"} 1"
        ),
        "{metrics}"
    );
}

/// The operator's switches outlive a reload that leaves their settings alone, the stage's
/// counters go on, and the pages mark the switched stage; a reload that changes the very
/// setting wins over the switch.
#[tokio::test]
async fn runtime_switches_outlive_reloads_unless_the_file_changes_them() {
    let s = start(Some(CONFIG), Some("test-admin-token")).await;
    let admin = |path: &'static str, body: Value| {
        s.post_raw(path, body.to_string(), Some("test-admin-token"))
    };
    let policy = |answer: &Value| answer["headers"]["ratelimit-policy"].to_string();
    for _ in 0..3 {
        let (_, ok) = s.post("/v1/evaluate", json!({"user": "bo"})).await;
        s.post("/v1/release", json!({"lease": ok["lease"]})).await;
    }
    let off = json!({"limiter": "concurrency", "mode": "off"});
    assert_eq!(admin("/admin/mode", off).await.0, 200);
    let big = json!({"user": "cy", "plan": "big"});
    assert_eq!(admin("/admin/plan", big).await.0, 200);
    // A reload of an unrelated change keeps both switches.
    let raised = CONFIG.replace("limit: 2, window: 1h", "limit: 5, window: 1h");
    std::fs::write(s.config_path(), &raised).unwrap();
    assert_eq!(admin("/admin/reload", json!({})).await.0, 200);
    // Three requests in flight at once, where the concurrency limit is 2: the kill switch held.
    for _ in 0..3 {
        let (_, answer) = s.post("/v1/evaluate", json!({"user": "dee"})).await;
        assert_eq!(answer["allowed"], true, "{answer}");
    }
    let (_, answer) = s.post("/v1/evaluate", json!({"user": "cy"})).await;
    assert!(policy(&answer).contains("q=1000"), "{answer}");
    let (_, dashboard) = s.get("/v1/dashboard").await;
    let dashboard: Value = serde_json::from_str(&dashboard).unwrap();
    let stage = &dashboard["stages"][1];
    assert_eq!(
        (&stage["name"], &stage["mode"], &stage["configured_mode"]),
        (&json!("concurrency"), &json!("off"), &json!("enforce")),
        "{stage}"
    );
    // Its counters went on: three decisions before the reload, none since (it is off).
    assert_eq!(stage["totals"]["decisions"], 3, "{stage}");
    let (_, home) = s.get("/").await;
    assert!(
        home.contains("<small class=\"switched\">switched at run time (configured: enforce)"),
        "{home}"
    );
    // The file changes the stage's mode and the user's plan: the file wins.
    let changed = raised
        .replace(
            "concurrency: {capacity: 2, lease_ttl: 60s, mode: enforce}",
            "concurrency: {capacity: 2, lease_ttl: 60s, mode: shadow}",
        )
        .replace("  vip: big", "  vip: big\n  cy: tiny");
    std::fs::write(s.config_path(), &changed).unwrap();
    assert_eq!(admin("/admin/reload", json!({})).await.0, 200);
    let (_, dashboard) = s.get("/v1/dashboard").await;
    let dashboard: Value = serde_json::from_str(&dashboard).unwrap();
    assert_eq!(dashboard["stages"][1]["mode"], "shadow", "{dashboard}");
    let (_, answer) = s.post("/v1/evaluate", json!({"user": "cy"})).await;
    assert!(policy(&answer).contains("q=3"), "{answer}");
    let (_, home) = s.get("/").await;
    assert!(!home.contains("<small class=\"switched\">"), "{home}");
}

/// A user's plan comes from the admin API, then the configuration's `users:`, then the
/// request; a plan that does not exist is refused, naming the plans.
#[tokio::test]
async fn plans_follow_one_precedence_and_unknown_ones_are_refused() {
    let s = start(Some(CONFIG), Some("test-admin-token")).await;
    let policy = |answer: &Value| answer["headers"]["ratelimit-policy"].to_string();
    // `vip` is on `big` in the file: the request's `tiny` does not lower it.
    let (_, answer) = s
        .post("/v1/evaluate", json!({"user": "vip", "plan": "tiny"}))
        .await;
    assert!(policy(&answer).contains("q=1000"), "{answer}");
    // A user the file does not list takes the request's plan.
    let (_, answer) = s
        .post("/v1/evaluate", json!({"user": "dee", "plan": "big"}))
        .await;
    assert!(policy(&answer).contains("q=1000"), "{answer}");
    // The admin API's plan comes before both.
    let tiny = json!({"user": "vip", "plan": "tiny"}).to_string();
    assert_eq!(
        s.post_raw("/admin/plan", tiny, Some("test-admin-token"))
            .await
            .0,
        200
    );
    let (_, answer) = s
        .post("/v1/evaluate", json!({"user": "vip", "plan": "big"}))
        .await;
    assert!(policy(&answer).contains("q=3"), "{answer}");
    // An unknown plan is refused, listing the plans, and decides nothing.
    let (status, answer) = s
        .post("/v1/evaluate", json!({"user": "eve", "plan": "gold"}))
        .await;
    assert_eq!(
        (status, &answer["error"]["type"]),
        (400, &json!("unknown_plan"))
    );
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`gold`") && message.contains("plans are big, tiny"),
        "{message}"
    );
}

#[tokio::test]
async fn reload_applies_a_good_file_and_keeps_the_running_config_on_a_broken_one() {
    let s = start(Some(CONFIG), Some("test-admin-token")).await;
    let check = || s.post("/v1/check", json!({"limiter": "login", "key": "k"}));
    assert_eq!(check().await.1["remaining"], 1);
    // Raise the login limit: the counter of the unchanged key carries on.
    let raised = CONFIG.replace("limit: 2, window: 1h", "limit: 5, window: 1h");
    std::fs::write(s.config_path(), raised).unwrap();
    assert_eq!(
        s.post_raw("/admin/reload", String::new(), Some("test-admin-token"))
            .await
            .0,
        200
    );
    assert_eq!(check().await.1["remaining"], 3);
    // A broken file is refused and the running config stays.
    std::fs::write(s.config_path(), "plans: [unclosed").unwrap();
    let (status, body) = s
        .post_raw("/admin/reload", String::new(), Some("test-admin-token"))
        .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["type"], "invalid_config_yaml", "{body}");
    assert_eq!(check().await.1["remaining"], 2);
    // SIGHUP reloads too: a valid file with a new limit name.
    let renamed = CONFIG.replace("login:", "signin:");
    std::fs::write(s.config_path(), renamed).unwrap();
    let pid = s.pid().to_string();
    assert!(Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .unwrap()
        .success());
    let mut found = false;
    for _ in 0..100 {
        let (status, _) = s
            .post("/v1/check", json!({"limiter": "signin", "key": "k"}))
            .await;
        if status == 200 {
            found = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(found, "SIGHUP did not reload");
}

#[tokio::test]
async fn the_home_page_names_the_version_and_what_is_configured() {
    // One more domain, whose name needs escaping.
    let config = format!("{CONFIG}  - domain: \"<b>edge</b> & co\"\n");
    let s = start(Some(&config), None).await;
    let response = reqwest::get(format!("{}/", s.http)).await.expect("answers");
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/html; charset=utf-8"
    );
    let page = response.text().await.expect("a body");
    assert!(page.contains("Floodgate"), "{page}");
    assert!(page.contains(env!("CARGO_PKG_VERSION")), "{page}");
    // The pipeline's limiters with their modes, the named limits, the domains.
    assert!(
        page.contains(
            "<code>request_rate</code></td><td class=\"kind\">request_rate</td><td class=\"mode\">enforce"
        ),
        "{page}"
    );
    assert!(
        page.contains(
            "<code>concurrency</code></td><td class=\"kind\">concurrency</td><td class=\"mode\">enforce"
        ),
        "{page}"
    );
    assert!(!page.contains("<code>fleet</code>"), "{page}");
    assert!(
        page.contains("<code>login</code></td><td>fixed_window"),
        "{page}"
    );
    assert!(page.contains("<code>edge</code>"), "{page}");
    assert!(
        page.contains("<code>&lt;b&gt;edge&lt;/b&gt; &amp; co</code>"),
        "{page}"
    );
    assert!(!page.contains("<b>"), "{page}");
    // Every endpoint is named; the ones a browser can follow (GET) are links.
    for endpoint in ["/v1/check", "/v1/evaluate", "/v1/release", "/json"] {
        assert!(
            page.contains(&format!("POST <code>{endpoint}</code>")),
            "{endpoint}"
        );
    }
    for endpoint in ["/metrics", "/livez", "/readyz", "/v1/dashboard"] {
        assert!(page.contains(&format!("href=\"{endpoint}\"")), "{endpoint}");
    }
}

#[tokio::test]
async fn the_dashboard_data_has_the_metrics_numbers_and_refuses_bad_queries() {
    let s = start(None, None).await;
    for _ in 0..3 {
        s.post("/v1/check", json!({"limiter": "login", "key": "k"}))
            .await;
    }
    let (status, body) = s.get("/v1/dashboard").await;
    assert_eq!(status, 200, "{body}");
    let dashboard: Value = serde_json::from_str(&body).expect("JSON");
    let seq = dashboard["points"].as_array().unwrap().last().unwrap()["seq"]
        .as_u64()
        .unwrap();
    // Only newer points after `since`.
    let (_, newer) = s.get(&format!("/v1/dashboard?since={seq}")).await;
    let newer: Value = serde_json::from_str(&newer).unwrap();
    assert!(newer["points"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["seq"].as_u64().unwrap() > seq));
    // The totals are the counters /metrics renders.
    let (_, metrics) = s.get("/metrics").await;
    for stage in dashboard["stages"].as_array().unwrap() {
        let line = format!(
            "floodgate_decisions_total{{limiter=\"{}\",kind=\"{}\",mode=\"{}\"}} {}",
            stage["name"].as_str().unwrap(),
            stage["kind"].as_str().unwrap(),
            stage["mode"].as_str().unwrap(),
            stage["totals"]["decisions"]
        );
        assert!(metrics.contains(&line), "{line}\n{metrics}");
    }
    for bad in ["?since=x", "?since=-1", "?limit=3"] {
        let (status, body) = s.get(&format!("/v1/dashboard{bad}")).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body.contains("invalid_request"), "{body}");
    }
}

#[tokio::test]
async fn sigterm_drains_and_exits_zero() {
    use floodgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use floodgate_server::grpc::{RateLimitDescriptor, RateLimitRequest, RateLimitServiceClient};

    let mut s = start(None, None).await;
    let (status, ready) = s.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    let ready: serde_json::Value = serde_json::from_str(&ready).expect("JSON");
    assert_eq!(ready["ready"], true, "{ready}");
    assert_eq!(ready["store"]["kind"], "memory", "{ready}");
    // An open gRPC connection, as Envoy keeps one, must not hold the shutdown up.
    let mut client = RateLimitServiceClient::connect(s.grpc.clone())
        .await
        .expect("the gRPC API answers");
    let request = RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "remote_address".into(),
                value: "10.9.9.9".into(),
            }],
            ..Default::default()
        }],
        hits_addend: 1,
    };
    assert_eq!(
        client
            .should_rate_limit(request)
            .await
            .expect("an answer")
            .into_inner()
            .overall_code,
        1
    );
    let pid = s.pid().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let mut exit = None;
    for _ in 0..200 {
        if let Some(status) = s.exited() {
            exit = Some(status);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(exit.map(|e| e.code()), Some(Some(0)));
}

#[test]
fn check_config_accepts_good_files_and_names_the_problem_in_bad_ones() {
    let dir = serve::temp_dir();
    let good = dir.0.join("good.yaml");
    std::fs::write(&good, CONFIG).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["check-config"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = dir.0.join("bad.yaml");
    let mut f = std::fs::File::create(&bad).unwrap();
    writeln!(f, "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {{unit: fortnight, requests_per_unit: 1}}").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["check-config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("fortnight"), "{stderr}");
}

#[tokio::test]
async fn envoy_grpc_should_rate_limit_through_the_binary() {
    use floodgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use floodgate_server::grpc::{RateLimitDescriptor, RateLimitRequest, RateLimitServiceClient};

    let s = start(Some(CONFIG), None).await;
    let mut client = RateLimitServiceClient::connect(s.grpc.clone())
        .await
        .expect("the gRPC API answers");
    let request = |value: &str, hits: u32| RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "remote_address".into(),
                value: value.into(),
            }],
            ..Default::default()
        }],
        hits_addend: hits,
    };
    let first = client
        .should_rate_limit(request("10.1.1.1", 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.overall_code, 1, "OK");
    assert_eq!(first.statuses[0].limit_remaining, 1);
    let limit = first.statuses[0]
        .current_limit
        .as_ref()
        .expect("a limit applies");
    assert_eq!(limit.requests_per_unit, 2);
    assert!(first.statuses[0].duration_until_reset.is_some());
    let second = client
        .should_rate_limit(request("10.1.1.1", 2))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(second.overall_code, 2, "OVER_LIMIT");
    // A malformed request is refused with INVALID_ARGUMENT, and the service keeps serving.
    let empty = RateLimitRequest {
        domain: String::new(),
        ..request("x", 1)
    };
    let status = client.should_rate_limit(empty).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let other = client
        .should_rate_limit(request("10.1.1.2", 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(other.overall_code, 1);

    // The other descriptor rules, several descriptors per call: (code, limit_remaining) of
    // each status, and the overall code (1 OK, 2 OVER_LIMIT).
    let descriptor = |entries: &[(&str, &str)], hits: Option<u64>| RateLimitDescriptor {
        is_negative_hits: false,
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        hits_addend: hits,
        limit: None,
    };
    let call = |domain: &str, descriptors: Vec<RateLimitDescriptor>| {
        let request = RateLimitRequest {
            domain: domain.into(),
            descriptors,
            hits_addend: 0,
        };
        let mut client = client.clone();
        async move {
            let r = client
                .should_rate_limit(request)
                .await
                .unwrap()
                .into_inner();
            let statuses: Vec<(i32, u32)> = r
                .statuses
                .iter()
                .map(|s| (s.code, s.limit_remaining))
                .collect();
            (r.overall_code, statuses)
        }
    };
    let api = || descriptor(&[("path", "/api/users")], None);
    let nested = || descriptor(&[("tenant", "acme"), ("user", "ann")], None);
    let free = || descriptor(&[("free", "x")], None);
    let dark = || descriptor(&[("dark", "x")], None);
    // Wildcard (1/hour), nested (3/day), unlimited, shadow (1/hour) in one call.
    assert_eq!(
        call("edge", vec![api(), nested(), free(), dark()]).await,
        (1, vec![(1, 0), (1, 2), (1, u32::MAX), (1, 0)])
    );
    // Over the wildcard's limit; the shadow limit is over too, but answers OK.
    assert_eq!(
        call("edge", vec![api(), nested(), free(), dark()]).await,
        (2, vec![(2, 0), (1, 1), (1, u32::MAX), (1, 0)])
    );
    // A descriptor's own hits_addend is a usage charge: counted even past the limit (as
    // upstream counts every hit), so the nested limit is then over for one hit too.
    let two = descriptor(&[("tenant", "acme"), ("user", "ann")], Some(2));
    assert_eq!(call("edge", vec![two.clone()]).await, (2, vec![(2, 0)]));
    let one = descriptor(&[("tenant", "acme"), ("user", "ann")], Some(1));
    assert_eq!(call("edge", vec![one]).await, (2, vec![(2, 0)]));
    // requests_per_unit 0 blocks; a key the config does not know and an unknown domain pass.
    assert_eq!(
        call("edge", vec![descriptor(&[("blocked", "x")], None)]).await,
        (2, vec![(2, 0)])
    );
    assert_eq!(
        call("edge", vec![descriptor(&[("unknown", "x")], None)]).await,
        (1, vec![(1, 0)])
    );
    assert_eq!(call("nowhere", vec![api()]).await, (1, vec![(1, 0)]));
}

#[tokio::test]
async fn a_key_flood_is_bounded_and_counted_in_the_metrics() {
    // 64 keys at most (per shard, rounded up: at most one per shard here), new keys refused
    // while every tracked one is live (an hour's window). 5,000 distinct keys are more than
    // any shard count (at most 4,096) can hold.
    let config = "store: { max_keys: 64, overflow: refuse_new }\n\
                  limits:\n  per_ip: { algorithm: fixed_window, limit: 5, window: 1h }\n";
    let s = start(Some(config), None).await;
    let flood = 5_000;
    let mut refused = 0;
    for i in 0..flood {
        let key = format!("10.{}.{}.{}", i / 65_536, (i / 256) % 256, i % 256);
        let (status, body) = s
            .post("/v1/check", json!({"limiter": "per_ip", "key": key}))
            .await;
        assert_eq!(status, 200, "{body}");
        refused += u64::from(body["allowed"] == false);
    }
    let (_, metrics) = s.get("/metrics").await;
    let value = |name: &str| -> u64 {
        common::cli::metric(&metrics, name).unwrap_or_else(|| panic!("{name} in\n{metrics}")) as u64
    };
    // Every request either made a key or was refused; a key made is still held, or was
    // dropped as idle once its window ended (windows are aligned to the clock, so a run may
    // cross a boundary).
    let keys = value("floodgate_store_keys{store=\"memory\"}");
    let idle = value("floodgate_store_evictions_total{store=\"memory\",reason=\"idle\"}");
    assert!(
        refused > 0 && keys < flood,
        "{keys} keys, {refused} refused"
    );
    assert_eq!(keys + idle + refused, flood);
    assert_eq!(
        value("floodgate_store_refused_new_total{store=\"memory\"}"),
        refused
    );
    assert_eq!(
        value("floodgate_store_evictions_total{store=\"memory\",reason=\"live\"}"),
        0
    );
}
