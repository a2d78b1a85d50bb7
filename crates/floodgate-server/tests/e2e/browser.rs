//! The dashboard and the simulate report in a real headless Chromium (Debian's, through
//! chromedriver): the dashboard loads, shows every configured limiter, its numbers change
//! after traffic, and its mode switch works with the admin token; the report draws its charts
//! without fetching anything. A browser a test drops without closing leaves no process behind.

use crate::common;

use std::process::Command;

use common::browser::{processes_marked, Browser};
use common::serve::{config_file, serve, Service};
use fantoccini::Locator;
use serde_json::{json, Value};

/// All four of Stripe's limiters, so that the page shows each kind.
const CONFIG: &str = r#"
plans:
  free: { algorithm: token_bucket, rate: 20, capacity: 20 }
default_plan: free
limiters:
  request_rate: {}
  concurrency: { capacity: 50, lease_ttl: 60s }
  fleet: { capacity: 200, reserved_for_critical: 0.25, lease_ttl: 60s }
  utilization: { workers: 16, mode: shadow }
limits:
  login: { algorithm: sliding_log, limit: 5, window: 1m }
domains:
  - domain: shop
    descriptors:
      - key: remote_address
        rate_limit: { unit: second, requests_per_unit: 10 }
"#;

const STAGES: [&str; 4] = ["request_rate", "concurrency", "fleet", "utilization"];

/// Waits in the page for the row of `stage` to show a decision rate above 0 and a total of at
/// least `total`; returns the rate cell's text.
const ROW_CHANGED: &str = r#"
const [stage, total, done] = arguments;
const check = () => {
  const tr = [...document.querySelectorAll('#stage-table tbody tr')]
    .find(t => t.dataset.stage === stage);
  if (!tr) return;
  const rate = parseFloat(tr.querySelector('.decisions').textContent);
  if (rate > 0 && Number(tr.dataset.decisions) >= total) {
    observer.disconnect();
    done(tr.querySelector('.decisions').textContent);
  }
};
const observer = new MutationObserver(check);
observer.observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
check();
"#;

/// Waits for the page's first answer from the service.
const LIVE: &str = r#"
const done = arguments[arguments.length - 1];
const status = document.getElementById('status');
const check = () => { if (status.className === 'live') { observer.disconnect(); done(status.textContent); } };
const observer = new MutationObserver(check);
observer.observe(status, { attributes: true, childList: true, characterData: true, subtree: true });
check();
"#;

/// Waits for the dashboard's section `arguments[0]` to be shown with a chart drawn (a grid
/// line) and something matching the selector `arguments[1]` in it; returns the texts of
/// what matches, in the page's order.
const SECTION_DRAWN: &str = r#"
const [id, selector, done] = arguments;
const section = document.getElementById(id);
const check = () => {
  const texts = [...section.querySelectorAll(selector)].map(e => e.textContent);
  if (!section.hidden && texts.length > 0 && section.querySelector('figure svg line.grid')) {
    observer.disconnect();
    done(texts);
  }
};
const observer = new MutationObserver(check);
observer.observe(document.body, { subtree: true, childList: true, attributes: true });
check();
"#;

/// A browser on `service`'s dashboard, once the page has its first answer (the status's text).
async fn dashboard(service: &Service) -> (Browser, Value) {
    let browser = Browser::start(1280, 2000).await;
    browser
        .client
        .goto(&format!("{}/", service.http))
        .await
        .expect("the page loads");
    let status = browser.until(LIVE, vec![]).await;
    (browser, status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_every_stage_and_changes_with_traffic() {
    let (_dir, path) = config_file(CONFIG);
    let service = serve(
        &path,
        "memory",
        &[("FLOODGATE_ADMIN_TOKEN", "s3cret-admin-token")],
    );
    let (browser, status) = dashboard(&service).await;
    let page = &browser.client;
    assert!(status.as_str().unwrap().starts_with("live"), "{status}");

    // Every configured limiter has its row, its kind and mode.
    let rows = page
        .find_all(Locator::Css("#stage-table tbody tr"))
        .await
        .unwrap();
    let mut shown = Vec::new();
    for row in &rows {
        shown.push(row.attr("data-stage").await.unwrap().unwrap_or_default());
    }
    assert_eq!(shown, STAGES);
    let utilization_mode = page
        .find(Locator::Css("tr[data-stage='utilization'] .mode"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(utilization_mode, "shadow");
    // The fleet's and the shedder's charts are drawn.
    for chart in ["#fleet figure svg", "#utilization figure svg"] {
        let svg = page.find(Locator::Css(chart)).await.expect(chart);
        assert!(svg.find(Locator::Css("line.grid")).await.is_ok(), "{chart}");
    }

    // Traffic through the pipeline, a named limit and the Envoy API.
    let http = reqwest::Client::new();
    for i in 0..60 {
        let user = format!("user-{}", i % 3);
        let (status, _) = service
            .post(
                &http,
                "/v1/evaluate",
                &json!({"user": user, "priority": "get"}),
            )
            .await;
        assert!(status == 200 || status == 429, "{status}");
    }
    for _ in 0..8 {
        service
            .post(
                &http,
                "/v1/check",
                &json!({"limiter": "login", "key": "10.1.2.3"}),
            )
            .await;
    }
    let rate = browser
        .until(ROW_CHANGED, vec![json!("request_rate"), json!(60)])
        .await;
    assert!(
        rate.as_str().unwrap().parse::<f64>().unwrap() > 0.0,
        "{rate}"
    );

    // The heaviest keys: hashed without the token.
    let keys = page
        .find_all(Locator::Css("#key-table tbody tr td:first-child"))
        .await
        .unwrap();
    assert!(!keys.is_empty());
    for key in &keys {
        let text = key.text().await.unwrap();
        assert!(text.starts_with('#') && !text.contains("user-"), "{text}");
    }

    // With the admin token: the mode switch and the keys in full.
    let form = page.find(Locator::Id("admin")).await.unwrap();
    assert!(form.is_displayed().await.unwrap());
    page.find(Locator::Id("token"))
        .await
        .unwrap()
        .send_keys("s3cret-admin-token")
        .await
        .unwrap();
    form.find(Locator::Css("button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let select = page
        .wait()
        .for_element(Locator::Css("tr[data-stage='request_rate'] .mode select"))
        .await
        .expect("the mode becomes a switch");
    select.select_by_value("shadow").await.unwrap();
    let message = browser
        .until(
            r#"
const done = arguments[arguments.length - 1];
const m = document.getElementById('admin-message');
const check = () => { if (m.textContent.startsWith('request_rate')) { observer.disconnect(); done(m.textContent); } };
const observer = new MutationObserver(check);
observer.observe(m, { childList: true, characterData: true, subtree: true });
check();
"#,
            vec![],
        )
        .await;
    assert_eq!(message, "request_rate: shadow");
    let (_, dashboard) = service.get(&http, "/v1/dashboard").await;
    let dashboard: Value = serde_json::from_str(&dashboard).unwrap();
    let mode = dashboard["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "request_rate")
        .map(|s| s["mode"].clone());
    assert_eq!(mode, Some(json!("shadow")));
    let plain = browser
        .until(
            r#"
const done = arguments[arguments.length - 1];
const check = () => {
  const cells = [...document.querySelectorAll('#key-table tbody td:first-child')].map(c => c.textContent);
  if (cells.some(c => c.startsWith('user '))) { observer.disconnect(); done(cells); }
};
const observer = new MutationObserver(check);
observer.observe(document.getElementById('key-table'), { childList: true, subtree: true, characterData: true });
check();
"#,
            vec![],
        )
        .await;
    assert!(
        plain.to_string().contains("limit login: 10.1.2.3"),
        "{plain}"
    );
    // The token never reaches the page's markup.
    assert!(!page.source().await.unwrap().contains("s3cret-admin-token"));
    browser.close().await;
}

/// A configured list of stages on the page: each stage's row says what it counts by, and the
/// adaptive concurrency stage gets its charts (the learned limit against requests in flight,
/// and the latencies) once it has learned from released leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_a_configured_pipeline_and_its_adaptive_stage() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/config/pipelines/adaptive.yaml");
    let service = serve(&path, "memory", &[]);
    let http = reqwest::Client::new();
    for i in 0..30 {
        let (_, answer) = service
            .post(&http, "/v1/evaluate", &json!({"user": format!("u{i}")}))
            .await;
        if let Some(lease) = answer["lease"].as_str() {
            let body = json!({"lease": lease, "latency_ms": 20});
            service.post(&http, "/v1/release", &body).await;
        }
    }
    let (browser, _) = dashboard(&service).await;
    let page = &browser.client;
    let scope = page
        .find(Locator::Css("tr[data-stage='per_user'] .scope"))
        .await
        .expect("the stage's scope")
        .text()
        .await
        .unwrap();
    assert_eq!(scope, "by {user}");
    let titles = browser
        .until(SECTION_DRAWN, vec![json!("adaptive"), json!("figcaption")])
        .await;
    let titles = titles.to_string();
    assert!(
        titles.contains("adaptive (vegas): learned limit and requests in flight"),
        "{titles}"
    );
    assert!(
        titles.contains("adaptive: latency, latest and baseline"),
        "{titles}"
    );
    browser.close().await;
}

/// Two RLQS streams sharing a bucket: the page's Rate Limit Quota Service section shows the
/// streams and the bucket's row, its value hidden, granted the whole limit between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_rate_limit_quota_service() {
    let (_dir, path) = config_file(&format!(
        "{CONFIG}  - domain: quota\n    descriptors:\n      - key: name\n        rate_limit: {{ unit: second, requests_per_unit: 10 }}\n"
    ));
    let service = serve(&path, "memory", &[]);
    let mut a = common::rlqs::Client::connect(&service).await;
    let mut b = common::rlqs::Client::connect(&service).await;
    a.report("quota", "alice", 1, 0, 0).await;
    b.report("quota", "alice", 1, 0, 0).await;
    // Both want twice the limit: half each.
    a.report("quota", "alice", 100, 0, 5).await;
    b.report("quota", "alice", 100, 0, 5).await;
    a.until_rate("alice", 4.9..=5.0).await;
    b.until_rate("alice", 4.9..=5.0).await;
    let (browser, _) = dashboard(&service).await;
    let selector = "#rlqs-table tbody tr td";
    let row = browser
        .until(SECTION_DRAWN, vec![json!("rlqs"), json!(selector)])
        .await;
    let streams = browser
        .client
        .find(Locator::Css("#rlqs-streams"))
        .await
        .expect("the streams")
        .text()
        .await
        .unwrap();
    let mut cells: Vec<String> = serde_json::from_value(row).expect("texts");
    cells.insert(0, streams);
    // streams; domain, bucket, demand, granted, limit, the meter, streams.
    assert_eq!(cells[0], "2", "{cells:?}");
    assert_eq!(cells[1], "quota", "{cells:?}");
    assert!(
        cells[2].starts_with("name=#") && cells[2].len() == "name=#".len() + 8,
        "the value is hidden: {cells:?}"
    );
    assert_eq!(&cells[4..6], ["10", "10"], "{cells:?}");
    assert_eq!(cells[7], "2", "{cells:?}");
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulate_report_renders_its_charts() {
    let dir = std::env::temp_dir().join(format!("floodgate-browser-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let report = dir.join("report.html");
    let run = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args([
            "simulate",
            "--limiter",
            r#"{"name":"token bucket","algorithm":"token_bucket","rate":20,"capacity":40}"#,
            "--limiter",
            r#"{"name":"fleet","limiter":"fleet","capacity":10,"reserved_for_critical":0.2,"lease_ttl":"30s"}"#,
            "--limiter",
            r#"{"name":"shedder","limiter":"utilization"}"#,
            "--traffic",
            r#"{"pattern":"ramp","from":5,"to":120,"keys":20,"zipf":1.1,"latency":"150ms","priority":{"critical":1,"get":4}}"#,
            "--duration",
            "120s",
            "--workers",
            "12",
            "--out",
        ])
        .arg(&report)
        .output()
        .expect("simulate runs");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let browser = Browser::start(1100, 1600).await;
    let page = &browser.client;
    page.goto(&format!("file://{}", report.display()))
        .await
        .expect("the report opens");
    // Four charts: offered/admitted, refused, in flight, the shedder's controller; each with
    // lines the browser laid out at a real size.
    let drawn = page
        .execute(
            r#"
return [...document.querySelectorAll('figure.chart svg')].map(svg => {
  const box = svg.getBoundingClientRect();
  const lines = [...svg.querySelectorAll('polyline')]
    .filter(p => p.getBBox().width > 100).length;
  return { width: box.width, height: box.height, lines };
});
"#,
            vec![],
        )
        .await
        .unwrap();
    let charts = drawn.as_array().unwrap();
    assert_eq!(charts.len(), 4, "{drawn}");
    for chart in charts {
        assert!(chart["width"].as_f64().unwrap() > 300.0, "{chart}");
        assert!(chart["height"].as_f64().unwrap() > 100.0, "{chart}");
        assert!(chart["lines"].as_u64().unwrap() >= 1, "{chart}");
    }
    let rows = page.find_all(Locator::Css("#summary tr")).await.unwrap();
    assert_eq!(rows.len(), 4, "a header and one row per limiter");
    // Self-contained: the page loaded nothing else.
    let resources = page
        .execute(
            "return performance.getEntriesByType('resource').length;",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(resources, json!(0));
    browser.close().await;
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_dropped_without_closing_leaves_no_process_behind() {
    let browser = Browser::start(400, 300).await;
    browser
        .client
        .goto("about:blank")
        .await
        .expect("a blank page");
    let marker = browser.marker();
    let running = processes_marked(&marker);
    assert!(
        running.iter().any(|p| p.contains("--type=renderer")),
        "the browser and its renderers carry the profile: {running:?}"
    );
    // As a test that panics with its session open does.
    drop(browser);
    // SIGKILL is delivered at once, but a process takes a moment to exit: look for up to 5 s.
    let mut left = processes_marked(&marker);
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        left = processes_marked(&marker);
    }
    assert!(left.is_empty(), "left behind: {left:?}");
}
