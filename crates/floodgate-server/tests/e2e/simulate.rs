//! `floodgate simulate` and `replay --summary/--chart` end to end: the real binary, its table
//! on stdout, its report on disk.

use crate::common;

use std::path::PathBuf;

use common::cli::floodgate;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("floodgate-simulate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir.join(name)
}

/// The table's row for `limiter`, as cells (the limiter's name is one word here).
fn row(table: &str, limiter: &str) -> Vec<String> {
    table
        .lines()
        .find(|l| l.starts_with(limiter))
        .unwrap_or_else(|| panic!("no row for {limiter} in\n{table}"))
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn simulate_prints_the_table_and_writes_the_report() {
    let out = scratch("report.html");
    let run = floodgate(
        &[
            "simulate",
            "--limiter",
            r#"{"name":"bucket","algorithm":"token_bucket","rate":10,"capacity":20}"#,
            "--limiter",
            r#"{"name":"fleet","limiter":"fleet","capacity":4,"reserved_for_critical":0.25,"lease_ttl":"30s"}"#,
            "--traffic",
            r#"{"pattern":"burst","rate":8,"burst_rate":40,"at":"20s","for":"5s","keys":3}"#,
            "--duration",
            "60s",
            "--out",
            out.to_str().unwrap(),
        ],
        "",
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.starts_with("limiter"), "{stdout}");
    let bucket = row(&stdout, "bucket");
    // 8/s for 55 s and 40/s for 5 s.
    assert_eq!(bucket[1], "640");
    let offered: u64 = bucket[1].parse().unwrap();
    let admitted: u64 = bucket[2].parse().unwrap();
    let refused: u64 = bucket[3].parse().unwrap();
    assert_eq!(admitted + refused, offered);
    assert!(refused > 0, "the burst is over the bucket's rate");
    let page = std::fs::read_to_string(&out).expect("the report is written");
    assert!(page.contains("<svg") && page.contains("In flight"));
    std::fs::remove_file(out).ok();
}

#[test]
fn replay_summary_replaces_the_decisions_with_the_table() {
    let trace: String = (0..20)
        .map(|i| format!("{{\"t\":{},\"key\":\"u\"}}\n", f64::from(i) * 0.05))
        .collect();
    let chart = scratch("replay.html");
    let run = floodgate(
        &[
            "replay",
            "--limiter",
            r#"{"name":"ten","algorithm":"fixed_window","limit":10,"window":"1s"}"#,
            "--summary",
            "--chart",
            chart.to_str().unwrap(),
        ],
        &trace,
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let ten = row(&stdout, "ten");
    // Ten pass in the first second's window, the next ten are refused until it ends.
    assert_eq!(ten[1..5], ["20", "10", "10", "10"]);
    assert!(
        !stdout.contains("\"allowed\""),
        "no decision lines with --summary"
    );
    let page = std::fs::read_to_string(&chart).expect("the chart is written");
    assert!(page.contains("<svg") && page.contains("floodgate replay"));
    std::fs::remove_file(chart).ok();

    // Without --summary, --chart keeps the decisions on stdout.
    let chart = scratch("replay-lines.html");
    let run = floodgate(
        &[
            "replay",
            "--limiter",
            r#"{"algorithm":"fixed_window","limit":10,"window":"1s"}"#,
            "--chart",
            chart.to_str().unwrap(),
        ],
        &trace,
    );
    assert!(run.status.success());
    assert_eq!(String::from_utf8_lossy(&run.stdout).lines().count(), 20);
    std::fs::remove_file(chart).ok();
}

#[test]
fn simulate_refuses_bad_specs_with_usage_status() {
    let run = floodgate(
        &[
            "simulate",
            "--limiter",
            r#"{"algorithm":"token_bucket","rate":10,"capacity":20}"#,
            "--traffic",
            r#"{"pattern":"sine","mean":5,"amplitude":9,"period":"10s"}"#,
            "--duration",
            "10s",
        ],
        "",
    );
    assert_eq!(run.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("--traffic #1") && stderr.contains("amplitude"),
        "{stderr}"
    );
}
