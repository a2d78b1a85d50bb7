//! `floodgate bench` end to end: the real binary, on the memory store and on a Redis the test
//! starts (never the machine's own on 6379); its last line is one JSON object with the numbers.
//! `bench --rlqs` against a real `floodgate serve` the test starts.

use crate::common;

use std::process::Command;

use common::serve::{config_file, serve};
use floodgate_harness::RedisServer;
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
    // Waits (boundedly) until the run has made decisions, then pauses Redis: a hundred script
    // calls, well past the few of start-up's probe (which writes through the decisions' path).
    let deciding = (0..500).any(|_| {
        let stats = redis.cli(&["INFO", "commandstats"]).unwrap_or_default();
        let calls = stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0);
        calls >= 100 || {
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

/// A limit of 100 per second on every `{name: X}` bucket of the domain `bench`; connections
/// must send their first bytes within 1 s, shorter than the run, so that a connection that
/// did is seen kept past it.
const RLQS_CONFIG: &str = "\
domains:
  - domain: bench
    descriptors:
      - key: name
        rate_limit: { unit: second, requests_per_unit: 100 }
connections: { header_read_timeout: 1s }
";

/// `bench --rlqs` against one node on the memory store: 20 streams over 3 connections, each
/// reporting the same 3 buckets, every bucket of every stream assigned, no stream error (the
/// connections outlive `header_read_timeout`), and the node's CPU and memory read.
#[test]
fn bench_rlqs_streams_to_a_serve_node() {
    let (_dir, path) = config_file(RLQS_CONFIG);
    let node = serve(&path, "memory", &[]);
    let pid = node.pid().to_string();
    let (status, report, stderr) = bench(&[
        "--rlqs",
        "--target",
        &node.grpc,
        "--streams",
        "20",
        "--streams-per-connection",
        "8",
        "--buckets",
        "3",
        "--interval",
        "1s",
        "--duration",
        "3s",
        "--demand",
        "10",
        "--pid",
        &pid,
    ]);
    assert_eq!(status, 0, "{stderr}");
    let r = report.expect("the last line is JSON");
    assert_eq!(r["streams_opened"], 20, "{r}");
    assert_eq!(r["streams_failed"], 0, "{r}");
    assert_eq!(r["connections"], 3, "{r}");
    assert_eq!(r["stream_errors"], 0, "{r}");
    // Every (stream, bucket) got its first assignment, and the times are ordered.
    assert_eq!(r["first_assignments"], 60, "{r}");
    assert_eq!(r["never_assigned"], 0, "{r}");
    let ms = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k}: {r}"));
    let (p50, p99, max) = (
        ms("first_assignment_p50_ms"),
        ms("first_assignment_p99_ms"),
        ms("first_assignment_max_ms"),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{r}");
    // 200 requests per second wanted of each bucket's 100: token buckets granted.
    assert!(
        r["assignments"]["token_bucket"].as_u64().unwrap() > 0,
        "{r}"
    );
    assert!(ms("reports_per_second") > 0.0, "{r}");
    // 60 first reports, then 3 buckets a second at each of 20 streams.
    assert!(r["reports_sent"].as_u64().unwrap() >= 60 + 60 * 2, "{r}");
    let node_figures = &r["nodes"][0];
    assert_eq!(node_figures["pid"], node.pid(), "{r}");
    assert!(node_figures["cpu_cores"].as_f64().unwrap() >= 0.0, "{r}");
    assert!(node_figures["rss_after_kib"].as_u64().unwrap() > 0, "{r}");
    assert!(r["node_kib_per_stream"].is_number(), "{r}");
}

/// On a node sharing its state in Redis, the bench reads what Redis ran over the window.
#[test]
fn bench_rlqs_reads_the_commands_redis_ran() {
    let redis = RedisServer::start();
    let (_dir, path) = config_file(RLQS_CONFIG);
    let node = serve(&path, &redis.url(), &[]);
    let (status, report, stderr) = bench(&[
        "--rlqs",
        "--target",
        &node.grpc,
        "--streams",
        "4",
        "--buckets",
        "2",
        "--interval",
        "1s",
        "--duration",
        "2s",
        "--redis",
        &redis.url(),
    ]);
    assert_eq!(status, 0, "{stderr}");
    let r = report.expect("the last line is JSON");
    assert_eq!(r["streams_opened"], 4, "{r}");
    assert_eq!(r["stream_errors"], 0, "{r}");
    let calls = r["redis"]["calls"].as_u64().expect("redis calls");
    assert!(calls > 0, "{r}");
    assert!(
        !r["redis"]["by_command"].as_object().unwrap().is_empty(),
        "{r}"
    );
    assert!(
        !r["redis"]["by_command"]
            .as_object()
            .unwrap()
            .contains_key("info"),
        "{r}"
    );
}

/// Streams that cannot connect are counted, the figures printed, and the run fails.
#[test]
fn bench_rlqs_fails_when_streams_fail() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let target = format!("http://127.0.0.1:{port}");
    let (status, report, stderr) = bench(&[
        "--rlqs",
        "--target",
        &target,
        "--streams",
        "5",
        "--duration",
        "1s",
    ]);
    assert_eq!(status, 2, "{stderr}");
    assert!(stderr.contains("5 of 5 streams failed"), "{stderr}");
    let r = report.expect("the figures are still printed");
    assert_eq!(r["streams_failed"], 5, "{r}");
    assert_eq!(r["stream_errors_by_code"]["connect"], 5, "{r}");
}

/// `--limiter` is required but with `--rlqs`, which needs a `--target`; the RLQS options are
/// refused with `--limiter`.
#[test]
fn rlqs_arguments_are_named() {
    let spec = r#"{"algorithm":"token_bucket","rate":100,"capacity":10}"#;
    let target = "http://127.0.0.1:1";
    for (args, says) in [
        (vec![], "--limiter"),
        (vec!["--rlqs"], "--target"),
        (vec!["--limiter", spec, "--streams", "5"], "--streams"),
        (
            vec!["--limiter", spec, "--rlqs", "--target", target],
            "--limiter",
        ),
        (
            vec!["--rlqs", "--target", target, "--interval", "1500ms"],
            "whole seconds",
        ),
        (
            vec!["--rlqs", "--target", target, "--streams", "0"],
            "--streams",
        ),
        (vec!["--rlqs", "--target", "not a url"], "--target"),
    ] {
        let (status, report, stderr) = bench(&args);
        assert_eq!(status, 2, "{args:?}: {stderr}");
        assert!(report.is_none(), "{args:?}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
