//! Regenerates the README's pictures: a `floodgate simulate` report and the live dashboard
//! under traffic, each shot in Debian's headless Chromium. Run it through
//! `scripts/screenshots.sh`, which builds the binary and passes its path:
//!
//! `screenshots FLOODGATE_BINARY OUT_DIR [pipelines]`
//!
//! It writes `OUT_DIR/simulate.png`, `OUT_DIR/simulate-report.html` and
//! `OUT_DIR/dashboard.png`, then, for each worked configuration of
//! docs/building-your-pipeline.md, `OUT_DIR/pipeline-NAME.html` and `.png` (with `pipelines`,
//! only those). The traffic is generated with a fixed seed, so the reports are the same on
//! every run; the dashboard shows what 40 s of real traffic did.

#[allow(dead_code)] // the example drives the browser, not every helper the tests use
#[path = "../tests/e2e/common/browser.rs"]
mod browser;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use browser::Browser;
use fantoccini::Locator;
use floodgate_server::runtime::Listening;
use serde_json::json;

const CONFIG: &str = r#"
plans:
  free: { algorithm: token_bucket, rate: 5, capacity: 10 }
  pro: { algorithm: token_bucket, rate: 50, capacity: 100 }
default_plan: free
users: { acme: pro }
limiters:
  request_rate: {}
  concurrency: { capacity: 8, lease_ttl: 30s }
  fleet: { capacity: 60, reserved_for_critical: 0.25, lease_ttl: 30s }
  utilization: { workers: 4, mode: shadow }
"#;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(binary), Some(out)) = (args.next(), args.next()) else {
        eprintln!("usage: screenshots FLOODGATE_BINARY OUT_DIR");
        std::process::exit(2);
    };
    let out = PathBuf::from(out);
    std::fs::create_dir_all(&out).expect("the output directory");
    let only = args.next();
    if only.as_deref() != Some("pipelines") {
        simulate_report(&binary, &out).await;
        dashboard(&binary, &out).await;
    }
    for (name, arguments) in PIPELINES {
        pipeline_report(&binary, &out, name, arguments).await;
    }
}

/// The worked configurations of docs/building-your-pipeline.md, each under the traffic the
/// guide shows it with: the `simulate` arguments after `--pipeline FILE`.
const PIPELINES: [(&str, &[&str]); 3] = [
    (
        "api",
        &[
            "--duration",
            "120s",
            "--traffic",
            r#"{"name":"readers","pattern":"poisson","rate":40,"keys":200,"attributes":{"ip":"10.1.{key}","method":"GET"}}"#,
            "--traffic",
            r#"{"name":"scraper","pattern":"burst","rate":0,"burst_rate":30,"at":"30s","for":"60s","key_prefix":"bot-","keys":50,"attributes":{"ip":"203.0.113.7","method":"GET"}}"#,
            "--traffic",
            r#"{"name":"writers","pattern":"steady","rate":2,"keys":5,"endpoint":"/orders","attributes":{"ip":"10.2.{key}","method":"POST"}}"#,
        ],
    ),
    (
        "tenants",
        &[
            "--duration",
            "20m",
            "--traffic",
            r#"{"name":"acme","pattern":"ramp","from":0.5,"to":5,"keys":4,"key_prefix":"acme-","attributes":{"org":"acme"}}"#,
            "--traffic",
            r#"{"name":"acme's runaway script","pattern":"burst","rate":0,"burst_rate":1,"at":"2m","for":"4m","keys":1,"key_prefix":"acme-bot-","attributes":{"org":"acme"}}"#,
            "--traffic",
            r#"{"name":"globex","pattern":"steady","rate":0.5,"keys":2,"key_prefix":"globex-","attributes":{"org":"globex"}}"#,
        ],
    ),
    (
        "adaptive",
        &[
            "--duration",
            "60s",
            "--traffic",
            r#"{"name":"load","pattern":"ramp","from":1000,"to":8000,"keys":1000,"latency":"10ms","knee":40}"#,
            "--limiter",
            r#"{"name":"fixed limit of 400, for comparison","limiter":"fleet","capacity":400,"reserved_for_critical":0,"lease_ttl":"60s"}"#,
        ],
    ),
];

/// `simulate --pipeline examples/config/pipelines/NAME.yaml ARGUMENTS`, its report as
/// `OUT_DIR/pipeline-NAME.html` and a picture of it as `OUT_DIR/pipeline-NAME.png`.
async fn pipeline_report(binary: &str, out: &Path, name: &str, arguments: &[&str]) {
    let report = out.join(format!("pipeline-{name}.html"));
    let config = format!("examples/config/pipelines/{name}.yaml");
    let status = Command::new(binary)
        .args(["simulate", "--pipeline", &config, "--seed", "7"])
        .args(arguments)
        .arg("--out")
        .arg(&report)
        .status()
        .expect("floodgate simulate runs");
    assert!(status.success(), "simulate {name} failed");
    // Tall enough for every chart: the adaptive report has two more.
    let height = if name == "adaptive" { 3000 } else { 2400 };
    let browser = Browser::start(1100, height).await;
    let url = format!("file://{}", report.canonicalize().unwrap().display());
    browser.client.goto(&url).await.expect("the report opens");
    let png = browser.client.screenshot().await.expect("a screenshot");
    let picture = out.join(format!("pipeline-{name}.png"));
    std::fs::write(&picture, png).expect("the picture written");
    browser.close().await;
    eprintln!("wrote {}", picture.display());
}

/// Three rate limiters and the utilization shedder on the same surge past the service's
/// capacity.
async fn simulate_report(binary: &str, out: &Path) {
    let report = out.join("simulate-report.html");
    let status = Command::new(binary)
        .args([
            "simulate",
            "--limiter",
            r#"{"name":"token bucket 10/s, burst 20","algorithm":"token_bucket","rate":10,"capacity":20}"#,
            "--limiter",
            r#"{"name":"sliding window 10/s","algorithm":"sliding_window","limit":10,"window":"1s"}"#,
            "--limiter",
            r#"{"name":"fixed window 10/s","algorithm":"fixed_window","limit":10,"window":"1s"}"#,
            "--limiter",
            r#"{"name":"utilization shedder","limiter":"utilization"}"#,
            "--traffic",
            r#"{"name":"base","pattern":"poisson","rate":8,"keys":1,"latency":"500ms","priority":{"test":1,"get":3,"post":1,"critical":1}}"#,
            "--traffic",
            r#"{"name":"surge","pattern":"burst","rate":0,"burst_rate":40,"at":"40s","for":"120s","keys":1,"latency":"500ms","priority":{"test":1,"get":3,"post":1,"critical":1}}"#,
            "--duration",
            "240s",
            "--workers",
            "20",
            "--seed",
            "7",
            "--out",
        ])
        .arg(&report)
        .status()
        .expect("floodgate simulate runs");
    assert!(status.success(), "simulate failed");
    let browser = Browser::start(1100, 2500).await;
    browser
        .client
        .goto(&format!(
            "file://{}",
            report.canonicalize().unwrap().display()
        ))
        .await
        .expect("the report opens");
    let png = browser.client.screenshot().await.expect("a screenshot");
    std::fs::write(out.join("simulate.png"), png).expect("simulate.png written");
    browser.close().await;
    eprintln!("wrote {}", out.join("simulate.png").display());
}

/// `floodgate serve` under 45 s of mixed traffic, and the dashboard (with the admin token)
/// 40 s into it.
async fn dashboard(binary: &str, out: &Path) {
    let dir = std::env::temp_dir().join(format!("floodgate-shots-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("floodgate.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let token = "screenshot-token";
    let mut child = Command::new(binary)
        .args([
            "serve",
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&config)
        .env("FLOODGATE_ADMIN_TOKEN", token)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("floodgate serve starts");
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let listening = loop {
        let line = lines.next().expect("serve announces its ports").unwrap();
        if let Some(l) = Listening::parse(&line) {
            break l;
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    let base = format!("http://{}", listening.http);

    let http = reqwest::Client::new();
    let mut tasks = Vec::new();
    // A pro customer, a few free users, one runaway script; some requests critical.
    for (user, every_ms, priority) in [
        ("acme", 40u64, "post"),
        ("alice", 250, "get"),
        ("bob", 300, "get"),
        ("runaway-script", 15, "get"),
        ("checkout", 120, "critical"),
    ] {
        let (http, base) = (http.clone(), base.clone());
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(every_ms));
            for _ in 0..(45_000 / every_ms) {
                tick.tick().await;
                let answer: serde_json::Value = match http
                    .post(format!("{base}/v1/evaluate"))
                    .json(&json!({"user": user, "priority": priority}))
                    .send()
                    .await
                {
                    Ok(r) => r.json().await.unwrap_or_default(),
                    Err(_) => continue,
                };
                // Admitted requests "run" for 200 ms, then give their leases back.
                if let Some(lease) = answer["lease"].as_str().map(str::to_string) {
                    let (http, base) = (http.clone(), base.clone());
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        let _ = http
                            .post(format!("{base}/v1/release"))
                            .json(&json!({"lease": lease}))
                            .send()
                            .await;
                    });
                }
            }
        }));
    }
    let browser = Browser::start(1280, 2600).await;
    browser.client.goto(&format!("{base}/")).await.unwrap();
    browser
        .client
        .find(Locator::Id("token"))
        .await
        .unwrap()
        .send_keys(token)
        .await
        .unwrap();
    browser
        .client
        .find(Locator::Css("#admin button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The picture while the traffic still flows, 40 s in.
    tokio::time::sleep(Duration::from_secs(40)).await;
    let png = browser.client.screenshot().await.expect("a screenshot");
    std::fs::write(out.join("dashboard.png"), png).expect("dashboard.png written");
    for task in tasks {
        let _ = task.await;
    }
    browser.close().await;
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("wrote {}", out.join("dashboard.png").display());
}
