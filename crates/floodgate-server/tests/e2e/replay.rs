//! `floodgate replay` end to end: the real binary, a trace on stdin, decisions on stdout.

use crate::common;

use common::cli::floodgate;
use serde_json::Value;

struct Run {
    status: i32,
    decisions: Vec<Value>,
    stderr: String,
}

fn replay(spec: &str, trace: &str) -> Run {
    let out = floodgate(&["replay", "--limiter", spec], trace);
    Run {
        status: out.status.code().unwrap_or(-1),
        decisions: String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).expect("each output line is JSON"))
            .collect(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn allowed(run: &Run) -> Vec<bool> {
    run.decisions
        .iter()
        .map(|d| d["allowed"].as_bool().expect("allowed is a bool"))
        .collect()
}

#[test]
fn stripe_token_bucket_example() {
    // Stripe's example plan: 100 requests per second, bursts of 500, whole-second clock.
    let spec = r#"{"algorithm":"token_bucket","rate":100,"capacity":500}"#;
    let trace = "{\"t\":0,\"key\":\"u\",\"cost\":500}\n{\"t\":0,\"key\":\"u\"}\n{\"t\":1,\"key\":\"u\",\"cost\":60}\n{\"t\":1,\"key\":\"u\",\"cost\":41}\n";
    let run = replay(spec, trace);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(allowed(&run), [true, false, true, false]);
    let remaining: Vec<u64> = run
        .decisions
        .iter()
        .map(|d| d["remaining"].as_u64().unwrap())
        .collect();
    assert_eq!(remaining, [0, 0, 40, 40]);
    assert_eq!(run.decisions[1]["retry_after"], 0.01);
    assert_eq!(run.decisions[3]["retry_after"], 0.01);
}

#[test]
fn redis_cell_readme_example() {
    // CL.THROTTLE user123 15 30 60 1 → 0 16 15 -1 2
    let spec = r#"{"algorithm":"gcra","max_burst":15,"count":30,"period":60}"#;
    let run = replay(spec, "{\"t\":0,\"key\":\"user123\"}\n");
    assert_eq!(run.status, 0, "{}", run.stderr);
    let d = &run.decisions[0];
    assert_eq!(d["allowed"], true);
    assert_eq!(d["limit"], 16);
    assert_eq!(d["remaining"], 15);
    assert_eq!(d["retry_after"], Value::Null);
    assert_eq!(d["reset_after"], 2.0);
}

#[test]
fn guava_smooth_bursty_waits_and_the_next_caller_pays() {
    let trace = "{\"t\":0,\"op\":\"reserve\",\"cost\":10}\n{\"t\":0,\"op\":\"reserve\"}\n{\"t\":0,\"op\":\"try_acquire\",\"timeout\":\"1s\"}\n";
    // RateLimiter.create(5): acquire(10) returns 0, the next acquire() waits 2 s.
    let guava = r#"{"algorithm":"smooth_bursty","rate":5,"starts":"empty"}"#;
    // Starting full, the 5 stored permits are free: the next caller waits only 1 s (and owes
    // 0.2 s more, so a try_acquire with a 1 s timeout is still refused).
    let full = r#"{"algorithm":"smooth_bursty","rate":5}"#;
    for (spec, second_wait, third) in [(guava, 2.0, false), (full, 1.0, false)] {
        let run = replay(spec, trace);
        assert_eq!(run.status, 0, "{}", run.stderr);
        let waits: Vec<f64> = run
            .decisions
            .iter()
            .map(|d| d["wait"].as_f64().unwrap())
            .collect();
        assert_eq!(waits[..2], [0.0, second_wait], "{spec}");
        assert_eq!(allowed(&run), [true, true, third], "{spec}");
    }
}

#[test]
fn every_algorithm_replays() {
    let specs = [
        r#"{"algorithm":"token_bucket","rate":1,"capacity":2}"#,
        r#"{"algorithm":"leaky_bucket","rate":1,"capacity":2}"#,
        r#"{"algorithm":"leaky_queue","rate":1,"queue":1}"#,
        r#"{"algorithm":"fixed_window","limit":2,"window":"1s"}"#,
        r#"{"algorithm":"sliding_log","limit":2,"window":"1s"}"#,
        r#"{"algorithm":"sliding_window","limit":2,"window":"1s"}"#,
        r#"{"algorithm":"sliding_window","limit":2,"window":"1s","buckets":2}"#,
        r#"{"algorithm":"gcra","max_burst":1,"count":1,"period":1}"#,
    ];
    for spec in specs {
        let run = replay(spec, "{\"t\":0}\n{\"t\":0}\n{\"t\":0}\n");
        assert_eq!(run.status, 0, "{spec}: {}", run.stderr);
        assert_eq!(allowed(&run), [true, true, false], "{spec}");
        assert!(
            run.decisions[2]["retry_after"].as_f64().unwrap() > 0.0,
            "{spec}"
        );
    }
}

#[test]
fn a_yaml_spec_file_and_the_shipped_example_work() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let spec = format!("{dir}/../../examples/token_bucket.yaml");
    let trace = std::fs::read_to_string(format!("{dir}/../../examples/burst.jsonl")).unwrap();
    let run = replay(&spec, &trace);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(run.decisions.len(), trace.lines().count());
    // The burst of 25 gets 20 through.
    assert_eq!(allowed(&run)[..25].iter().filter(|a| **a).count(), 20);
}

#[test]
fn bad_input_stops_with_the_line_and_field_and_a_nonzero_status() {
    let tb = r#"{"algorithm":"token_bucket","rate":1,"capacity":2}"#;
    let cases: [(&str, &str, &str); 7] = [
        (r#"{"algorithm":"bogus"}"#, "{\"t\":0}\n", "bogus"),
        (
            r#"{"algorithm":"token_bucket","rate":0,"capacity":2}"#,
            "{\"t\":0}\n",
            "`rate`",
        ),
        (
            r#"{"algorithm":"token_bucket","rate":-1,"capacity":2}"#,
            "{\"t\":0}\n",
            "`rate`",
        ),
        (
            r#"{"algorithm":"token_bucket","rate":1}"#,
            "{\"t\":0}\n",
            "capacity",
        ),
        (tb, "{\"t\":0}\n{oops\n", "line 2"),
        (tb, "{\"t\":0,\"cost\":-2}\n", "`cost`"),
        // A misspelt field is refused, not read as the empty key.
        (
            tb,
            "{\"t\":1,\"key\":\"a\"}\n{\"t\":2,\"kye\":\"a\"}\n",
            "line 2: unknown field `kye`",
        ),
    ];
    for (spec, trace, needle) in cases {
        let run = replay(spec, trace);
        assert_ne!(run.status, 0, "{spec} {trace}");
        assert!(
            run.stderr.contains(needle),
            "{needle} not in: {}",
            run.stderr
        );
        assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    }
    let run = replay(tb, "{\"t\":2}\n{\"t\":1}\n");
    assert_ne!(run.status, 0);
    assert!(
        run.stderr.contains("line 2") && run.stderr.contains("`t`"),
        "{}",
        run.stderr
    );
    // The decisions before the bad line were written.
    assert_eq!(run.decisions.len(), 1);
}

#[test]
fn concurrency_leases_are_taken_released_and_expire() {
    let spec = r#"{"limiter":"concurrency","capacity":2,"lease_ttl":"60s"}"#;
    let trace = [
        r#"{"t":0,"key":"u","op":"acquire"}"#,
        r#"{"t":0,"key":"u","op":"acquire","lease":"mine"}"#,
        r#"{"t":0,"key":"u","op":"acquire"}"#,
        r#"{"t":1,"key":"u","op":"release","lease":"mine"}"#,
        r#"{"t":1,"key":"u","op":"release","lease":"mine"}"#,
        r#"{"t":2,"key":"u","op":"acquire"}"#,
        r#"{"t":2,"key":"u","op":"acquire"}"#,
        r#"{"t":60,"key":"u","op":"acquire"}"#,
    ]
    .join("\n");
    let run = replay(spec, &trace);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(
        allowed(&run),
        [true, true, false, true, true, true, false, true]
    );
    let d = &run.decisions;
    assert_eq!(d[0]["lease"], "lease-1");
    assert_eq!(d[1]["lease"], "mine");
    assert_eq!(d[1]["in_flight"], 2);
    assert_eq!(d[2]["retry_after"], 60.0);
    assert_eq!(
        (d[3]["released"].clone(), d[4]["released"].clone()),
        (true.into(), false.into())
    );
    // At 60 s the lease taken at 0 has expired: its place is free again.
    assert_eq!(d[7]["in_flight"], 2);
}

#[test]
fn the_fleet_keeps_room_for_critical_requests() {
    let spec = r#"{"limiter":"fleet","capacity":4,"reserved_for_critical":0.5,"lease_ttl":30}"#;
    let trace = (0..3)
        .map(|_| r#"{"t":0,"op":"acquire","priority":"get"}"#)
        .chain((0..4).map(|_| r#"{"t":0,"op":"acquire","priority":"critical"}"#))
        .collect::<Vec<_>>()
        .join("\n");
    let run = replay(spec, &trace);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert_eq!(allowed(&run), [true, true, false, true, true, true, true]);
}

#[test]
fn the_utilization_shedder_follows_the_controller() {
    let spec = r#"{"limiter":"utilization","seed":11}"#;
    // Full load from rest, sampled every second: nothing is shed for 28 s; 40 s later test
    // mode is shed entirely; critical never.
    let mut lines: Vec<String> = (0..=68)
        .map(|t| format!(r#"{{"t":{t},"utilization":1.0,"priority":"critical"}}"#))
        .collect();
    lines.push(r#"{"t":68,"priority":"test"}"#.into());
    let run = replay(spec, &lines.join("\n"));
    assert_eq!(run.status, 0, "{}", run.stderr);
    let d = &run.decisions;
    assert!(d[28]["shed_amount"].as_f64().unwrap().abs() < 1e-9);
    assert!(d[27]["shed_amount"].as_f64().unwrap() < 0.0);
    assert!(d[..69].iter().all(|o| o["allowed"] == true));
    let last = &d[69];
    assert_eq!(last["allowed"], false);
    assert_eq!(last["retry_after"], 1.0);
    assert!((last["drop_probability"].as_f64().unwrap() - 1.0).abs() < 1e-9);
    assert!(last.get("limit").is_none());
}
