//! `floodgate bench` end to end: the real binary, on the memory store and on a Redis the test
//! starts (never the machine's own on 6379); its last line is one JSON object with the numbers.

use std::process::Command;

use floodgate_redis_harness::RedisServer;
use serde_json::Value;

/// Runs `floodgate bench` with `args`; the exit status, the last line as JSON, and stderr.
fn bench(args: &[&str]) -> (i32, Option<Value>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .arg("bench")
        .args(args)
        .output()
        .expect("the floodgate binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok());
    (
        out.status.code().unwrap_or(-1),
        last,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_report(report: &Value, errors: u64) {
    let decisions = report["decisions"].as_u64().expect("decisions");
    assert!(decisions > 0, "{report}");
    assert_eq!(report["errors"], errors, "{report}");
    assert!(
        report["seconds"].as_f64().expect("seconds") > 0.0,
        "{report}"
    );
    assert!(
        report["decisions_per_second"].as_f64().expect("rate") > 0.0,
        "{report}"
    );
    let (p50, p99) = (
        report["p50_ms"].as_f64().expect("p50"),
        report["p99_ms"].as_f64().expect("p99"),
    );
    assert!(0.0 <= p50 && p50 <= p99, "{report}");
}

#[test]
fn bench_on_memory_ends_with_a_json_line() {
    let spec = r#"{"algorithm":"token_bucket","rate":100,"capacity":10}"#;
    let args = ["--limiter", spec, "--keys", "50", "--concurrency", "4"];
    let (status, report, stderr) = bench(&[&args[..], &["--duration", "200ms"]].concat());
    assert_eq!(status, 0, "{stderr}");
    let report = report.expect("the last line is JSON");
    assert_report(&report, 0);
    // 50 keys of 10 tokens each: many refusals in 200 ms.
    assert!(
        report["allowed"].as_u64() < report["decisions"].as_u64(),
        "{report}"
    );
    // Leases: each decision an acquire (and its release).
    let spec = r#"{"limiter":"concurrency","capacity":2,"lease_ttl":"60s"}"#;
    let (status, report, stderr) = bench(&[
        "--limiter",
        spec,
        "--concurrency",
        "4",
        "--duration",
        "100ms",
    ]);
    assert_eq!(status, 0, "{stderr}");
    assert_report(&report.expect("JSON"), 0);
}

#[test]
fn bench_on_redis_ends_with_a_json_line() {
    let redis = RedisServer::start();
    let spec = r#"{"algorithm":"gcra","max_burst":10,"count":100,"period":"1s"}"#;
    let url = redis.url();
    // Not a test of a slow store: a busy machine must not time calls out.
    let args = ["--store", &url, "--limiter", spec, "--keys", "100"];
    let (status, report, stderr) = bench(
        &[
            &args[..],
            &["--concurrency", "8", "--duration", "300ms"],
            &["--store-timeout", "2s"],
        ]
        .concat(),
    );
    assert_eq!(status, 0, "{stderr}");
    let report = report.expect("the last line is JSON");
    assert_report(&report, report["errors"].as_u64().unwrap_or(0));
    assert_eq!(report["store"], "redis", "{report}");
    // Redis's own count of the run's script calls, and how the group commit grouped them.
    let decisions = report["decisions"].as_u64().unwrap();
    let calls = report["redis_calls"].as_u64().expect("redis_calls");
    assert!(calls >= 1 && calls <= decisions, "{report}");
    assert!(
        report["redis_usec_per_decision"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    let mean = report["batch_mean_size"].as_f64().expect("batch_mean_size");
    assert!(mean >= 1.0, "{report}");
    let sizes = report["batch_sizes"].as_array().expect("batch_sizes");
    assert!(!sizes.is_empty(), "{report}");
}

/// A store that cannot be used is named before the run, not measured: nothing listens on the
/// port (a server started and stopped).
#[test]
fn bench_refuses_a_store_it_cannot_use() {
    let mut redis = RedisServer::start();
    redis.kill();
    let spec = r#"{"algorithm":"gcra","max_burst":10,"count":100,"period":"1s"}"#;
    let url = redis.url();
    let (status, report, stderr) = bench(&["--store", &url, "--limiter", spec]);
    assert_eq!(status, 2, "{stderr}");
    assert!(report.is_none(), "{report:?}");
    assert!(
        stderr.contains("cannot use the store") && stderr.contains("refused"),
        "{stderr}"
    );
}

/// Store calls that fail during the run make the bench fail, saying so, with the failures
/// apart from the decisions in its figures: Redis paused (SIGSTOP) while the bench runs.
#[test]
fn bench_fails_when_store_calls_fail_during_the_run() {
    let redis = RedisServer::start();
    let spec = r#"{"algorithm":"gcra","max_burst":10,"count":100,"period":"1s"}"#;
    let url = redis.url();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .args(["bench", "--store", &url, "--limiter", spec])
        .args(["--concurrency", "4", "--duration", "1500ms"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the floodgate binary runs");
    // Waits (boundedly) until the run has made decisions, then pauses Redis.
    let deciding = (0..500).any(|_| {
        let stats = redis.cli(&["INFO", "commandstats"]).unwrap_or_default();
        stats.contains("cmdstat_evalsha") || {
            std::thread::sleep(std::time::Duration::from_millis(10));
            false
        }
    });
    assert!(deciding, "the bench never reached Redis");
    redis.signal("STOP");
    let out = child.wait_with_output().expect("the bench finishes");
    redis.signal("CONT");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("store calls failed"), "{stderr}");
    let report: Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .expect("the figures are still printed");
    assert!(report["errors"].as_u64().unwrap_or(0) > 0, "{report}");
}

#[test]
fn bad_arguments_are_named() {
    let spec = r#"{"algorithm":"token_bucket","rate":100,"capacity":10}"#;
    for (args, says) in [
        (vec!["--limiter", spec, "--keys", "0"], "--keys"),
        (vec!["--limiter", spec, "--duration", "soon"], "--duration"),
        (
            vec!["--limiter", spec, "--concurrency", "0"],
            "--concurrency",
        ),
        (
            vec!["--limiter", r#"{"limiter":"utilization"}"#],
            "utilization",
        ),
        (
            vec!["--limiter", spec, "--store", "mongodb://x"],
            "store.url",
        ),
    ] {
        let (status, _, stderr) = bench(&args);
        assert_eq!(status, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
