use super::*;

fn args(limiters: &[&str], traffic: &[&str], duration: &str) -> Args {
    Args {
        limiters: limiters.iter().map(|s| s.to_string()).collect(),
        traffic: traffic.iter().map(|s| s.to_string()).collect(),
        trace: None,
        pipeline: None,
        usage: None,
        rlqs: None,
        charts: None,
        duration: floodgate_service::cli::positive_duration(duration).ok(),
        out: None,
        seed: 1,
        workers: 10,
        max_keys: 1000,
    }
}

#[test]
fn every_limiter_sees_the_same_requests() {
    let report = simulate(&args(
        &[
            r#"{"name":"bucket","algorithm":"token_bucket","rate":10,"capacity":10}"#,
            r#"{"algorithm":"fixed_window","limit":10,"window":"1s"}"#,
        ],
        &[r#"{"pattern":"steady","rate":20}"#],
        "60s",
    ))
    .unwrap();
    let [bucket, window] = &report.limiters[..] else {
        panic!("two limiters")
    };
    assert_eq!(bucket.name, "bucket");
    assert!(window.name.contains("fixed_window"), "{}", window.name);
    for l in [bucket, window] {
        assert_eq!(l.tally.offered(), 1200);
        // 10/s sustained out of 20/s offered, plus the first burst.
        let admitted = l.tally.admitted();
        assert!((600..=620).contains(&admitted), "{}: {admitted}", l.name);
    }
    // A steady 20/s at a 10/s bucket alternates: never two refusals in a row.
    assert_eq!(bucket.tally.longest_refusal_streak(), 1);
    let p50 = bucket.tally.retry_after_quantile(0.5).unwrap();
    assert!(p50 > 0.0 && p50 <= 0.1, "{p50}");
    let table = report.table();
    assert!(
        table.lines().count() == 3 && table.contains("bucket"),
        "{table}"
    );
}

/// The most requests in flight in any bucket of `tally`.
fn peak_in_flight(tally: &crate::report::Tally) -> u64 {
    tally
        .buckets()
        .iter()
        .filter_map(|b| b.in_flight)
        .max()
        .unwrap()
}

#[test]
fn leases_are_returned_when_requests_complete() {
    // 50/s, each in flight 100 ms: about 5 at a time, under a capacity of 8.
    let report = simulate(&args(
        &[r#"{"limiter":"concurrency","capacity":8,"lease_ttl":"60s"}"#],
        &[r#"{"pattern":"steady","rate":50,"latency":"100ms"}"#],
        "30s",
    ))
    .unwrap();
    let t = &report.limiters[0].tally;
    assert_eq!((t.offered(), t.refused()), (1500, 0));
    let peak = peak_in_flight(t);
    assert!((5..=6).contains(&peak), "{peak}");
    // Held twice as long, the same load needs ten places: some are refused.
    let slow = simulate(&args(
        &[r#"{"limiter":"concurrency","capacity":8,"lease_ttl":"60s"}"#],
        &[r#"{"pattern":"steady","rate":50,"latency":"200ms"}"#],
        "30s",
    ))
    .unwrap();
    assert!(slow.limiters[0].tally.refused() > 0);
    // A fleet counts every user together: spreading the same load over 100 users changes
    // nothing.
    let fleet = simulate(&args(
        &[r#"{"limiter":"fleet","capacity":8,"reserved_for_critical":0.0,"lease_ttl":"60s"}"#],
        &[r#"{"pattern":"steady","rate":50,"latency":"200ms","keys":100}"#],
        "30s",
    ))
    .unwrap();
    let t = &fleet.limiters[0].tally;
    assert!(t.refused() > 0);
    let peak = peak_in_flight(t);
    assert_eq!(peak, 8);
}

#[test]
fn the_utilization_shedder_sheds_an_overloaded_service_but_never_critical() {
    // 10 workers, 100 requests/s each in flight 200 ms: 20 needed, utilization pinned at 1.
    let report = simulate(&args(
        &[r#"{"limiter":"utilization"}"#],
        &[
            r#"{"pattern":"steady","rate":100,"latency":"200ms","priority":"test"}"#,
            r#"{"pattern":"steady","rate":5,"latency":"200ms","priority":"critical","key_prefix":"c-"}"#,
        ],
        "180s",
    ))
    .unwrap();
    let t = &report.limiters[0].tally;
    assert!(t.refused() > 1000, "{}", t.refused());
    let last = t.buckets().last().unwrap();
    assert!(last.shed_amount.unwrap() > 0.0);
    // Pinned at 1 until shedding starts, then held by the controller near its good band
    // (0.7–0.8) over the last minute.
    let peak = t
        .buckets()
        .iter()
        .filter_map(|b| b.utilization())
        .fold(0.0, f64::max);
    assert!(peak > 0.99, "{peak}");
    let (width, buckets) = t.coarse(Duration::from_secs(60), 10);
    assert_eq!(width, Duration::from_secs(60));
    let held = buckets[2].utilization().unwrap();
    assert!((0.6..0.9).contains(&held), "{held}");
    assert_eq!(
        report.charts().unwrap().len(),
        4,
        "with in flight and the controller"
    );

    // The same overload, all of it critical: nothing is shed.
    let critical = simulate(&args(
        &[r#"{"limiter":"utilization"}"#],
        &[r#"{"pattern":"steady","rate":105,"latency":"200ms","priority":"critical"}"#],
        "180s",
    ))
    .unwrap();
    let t = &critical.limiters[0].tally;
    assert_eq!(t.refused(), 0);
    assert!(t.buckets().last().unwrap().shed_amount.unwrap() > 0.0);
}

#[test]
fn a_trace_runs_as_replay_runs_it() {
    let dir = std::env::temp_dir().join(format!("floodgate-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.jsonl");
    let lines: String = (0..10)
        .map(|i| format!("{{\"t\":{},\"key\":\"a\"}}\n", f64::from(i) * 0.1))
        .collect();
    std::fs::write(&trace, lines).unwrap();
    let mut a = args(
        &[r#"{"algorithm":"token_bucket","rate":1,"capacity":3}"#],
        &[],
        "10s",
    );
    a.trace = Some(trace.clone());
    a.duration = None;
    let report = simulate(&a).unwrap();
    let t = &report.limiters[0].tally;
    assert_eq!((t.offered(), t.admitted()), (10, 3));
    assert_eq!(t.longest_refusal_streak(), 7);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_arguments_name_what_is_wrong() {
    let tb = r#"{"algorithm":"token_bucket","rate":1,"capacity":3}"#;
    let steady = r#"{"pattern":"steady","rate":1}"#;
    let cases: [(Args, &str); 4] = [
        (args(&[tb], &[], "10s"), "--traffic SPEC"),
        (
            args(&[tb], &[r#"{"pattern":"steady"}"#], "10s"),
            "--traffic #1",
        ),
        (
            args(&[tb, "{\"algorithm\":\"nope\"}"], &[steady], "10s"),
            "--limiter #2",
        ),
        // (A duration that does not read is refused with the arguments: tests/cli.rs.)
        (args(&[tb], &[steady], "ten"), "--duration: required"),
    ];
    for (a, expected) in cases {
        let message = simulate(&a).unwrap_err().to_string();
        assert!(message.contains(expected), "{message}");
    }
}

#[test]
fn a_minute_of_a_thousand_requests_a_second_is_simulated() {
    let report = simulate(&args(
        &[
            r#"{"algorithm":"gcra","max_burst":50,"count":500,"period":"1s"}"#,
            r#"{"algorithm":"sliding_window","limit":500,"window":"1s"}"#,
        ],
        &[r#"{"pattern":"poisson","rate":1000,"keys":1000,"zipf":1.2}"#],
        "60s",
    ))
    .unwrap();
    assert!(report.limiters.iter().all(|l| l.tally.offered() > 55_000));
    assert!(report.html().unwrap().contains("<svg"));
}

/// The mean latency of the requests `tally` admitted, in seconds, over its second half.
fn late_latency(tally: &crate::report::Tally) -> f64 {
    let buckets = tally.buckets();
    let late: Vec<f64> = buckets[buckets.len() / 2..]
        .iter()
        .filter_map(|b| b.latency())
        .collect();
    late.iter().sum::<f64>() / late.len() as f64
}

/// A service that runs 40 requests at once in 10 ms, offered 6000 a second (half again what it
/// can serve): an adaptive limit finds the knee and keeps latency near 10 ms while admitting
/// near the service's capacity, where a fixed limit set too high lets requests queue.
#[test]
fn an_adaptive_limit_finds_the_knee_of_a_service() {
    let report = simulate(&args(
        &[
            r#"{"name":"vegas","limiter":"adaptive_concurrency","adaptive":{"algorithm":"vegas","max_limit":1000}}"#,
            r#"{"name":"fixed 400","limiter":"fleet","capacity":400,"reserved_for_critical":0,"lease_ttl":"60s"}"#,
        ],
        &[r#"{"pattern":"poisson","rate":6000,"latency":"10ms","knee":40}"#],
        "30s",
    ))
    .unwrap();
    let [vegas, fixed] = &report.limiters[..] else {
        panic!("two limiters")
    };
    let (vegas_latency, fixed_latency) = (late_latency(&vegas.tally), late_latency(&fixed.tally));
    assert!(vegas_latency < 0.02, "vegas: {vegas_latency} s");
    assert!(fixed_latency > 0.05, "fixed: {fixed_latency} s");
    // Both admit about what the service can serve (4000/s); Vegas without the queueing.
    let per_second = |t: &crate::report::Tally| t.admitted() as f64 / 30.0;
    assert!(
        per_second(&vegas.tally) > 3000.0,
        "{}",
        per_second(&vegas.tally)
    );
    // The learned limit is charted, near the knee.
    let limits: Vec<u64> = vegas
        .tally
        .buckets()
        .iter()
        .filter_map(|b| b.limit)
        .collect();
    let last = *limits.last().unwrap();
    assert!((40..=120).contains(&last), "learned limit {last}");
    assert!(fixed.tally.buckets().iter().all(|b| b.limit.is_none()));
    let charts = report.charts().unwrap();
    assert!(charts.iter().any(|c| c.contains("the learned limit")));
    assert!(charts
        .iter()
        .any(|c| c.contains("Latency of admitted requests")));
}

fn example(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/config/pipelines")
        .join(name)
}

/// The row of `report` named `name`.
fn row<'r>(report: &'r crate::report::Report, name: &str) -> &'r crate::report::Tally {
    let run = report.limiters.iter().find(|l| l.name == name);
    &run.unwrap_or_else(|| panic!("no row {name}")).tally
}

/// The guide's first configuration under the traffic its chart shows: a scraper on one
/// address, users reading, and users writing orders too often. Each stage refuses its own.
#[test]
fn a_configured_pipeline_runs_whole_with_a_row_per_stage() {
    let mut args = args(
        &[],
        &[
            r#"{"name":"readers","pattern":"poisson","rate":40,"keys":200,"attributes":{"ip":"10.1.{key}","method":"GET"}}"#,
            r#"{"name":"scraper","pattern":"steady","rate":30,"key_prefix":"bot-","keys":50,"attributes":{"ip":"203.0.113.7","method":"GET"}}"#,
            r#"{"name":"writers","pattern":"steady","rate":2,"keys":5,"endpoint":"/orders","attributes":{"ip":"10.2.{key}","method":"POST"}}"#,
        ],
        "120s",
    );
    args.pipeline = Some(example("api.yaml"));
    let report = simulate(&args).unwrap();
    let names: Vec<&str> = report.limiters.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "pipeline",
            "stage per_ip",
            "stage plans",
            "stage order_writes",
            "stage in_flight",
            "stage fleet",
            "stage utilization"
        ]
    );
    let whole = row(&report, "pipeline");
    // Poisson readers (4,800 expected), 3,600 scraper requests, 240 writes.
    assert!(
        (8_300..=9_000).contains(&whole.offered()),
        "{}",
        whole.offered()
    );
    // The scraper's one address: 30/s against 10/s, so about 20/s refused by per_ip.
    let per_ip = row(&report, "stage per_ip");
    assert_eq!(per_ip.offered(), whole.offered());
    let refused = per_ip.offered() - per_ip.admitted();
    assert!(
        (2_300..=2_500).contains(&refused),
        "per_ip refused {refused}"
    );
    // Writers: 5 users × 5 writes a minute of their 24 a minute each.
    let writes = row(&report, "stage order_writes");
    assert_eq!(writes.offered(), 240, "only the POSTs to /orders");
    assert!(
        (45..=55).contains(&writes.admitted()),
        "{}",
        writes.admitted()
    );
    // Readers stay under their plans; nothing is shed.
    assert_eq!(
        row(&report, "stage utilization").admitted(),
        row(&report, "stage utilization").offered()
    );
    assert!(report.table().contains("stage order_writes"));
}

/// The guide's adaptive configuration on a service that runs 40 requests at once in 10 ms,
/// offered 1.5 times its capacity: the stage's learned limit settles near the knee.
#[test]
fn a_configured_adaptive_stage_finds_the_knee() {
    let mut args = args(
        &[],
        &[r#"{"pattern":"poisson","rate":6000,"keys":1000,"latency":"10ms","knee":40}"#],
        "30s",
    );
    args.pipeline = Some(example("adaptive.yaml"));
    let report = simulate(&args).unwrap();
    let stage = row(&report, "stage adaptive");
    let limits: Vec<u64> = stage.buckets().iter().filter_map(|b| b.limit).collect();
    let last = *limits.last().unwrap();
    assert!((40..=120).contains(&last), "learned limit {last}");
    assert!(late_latency(row(&report, "pipeline")) < 0.02);
    assert!(row(&report, "pipeline").admitted() as f64 / 30.0 > 3000.0);
}

/// The guide's organisations: acme's four users ask 3 a second between them, more than its
/// 100 a minute; globex asks little. acme gets its 100 a minute, globex everything.
#[test]
fn a_configured_hierarchy_holds_each_organisation_to_its_quota() {
    let mut args = args(
        &[],
        &[
            r#"{"name":"acme","pattern":"steady","rate":3,"keys":4,"key_prefix":"acme-","attributes":{"org":"acme"}}"#,
            r#"{"name":"globex","pattern":"steady","rate":0.2,"keys":2,"key_prefix":"globex-","attributes":{"org":"globex"}}"#,
        ],
        "120s",
    );
    args.pipeline = Some(example("tenants.yaml"));
    let report = simulate(&args).unwrap();
    let tenants = row(&report, "stage tenants");
    assert_eq!(tenants.offered(), 360 + 24);
    // A sliding window of 100 a minute over two minutes, with the first minute's burst:
    // about 200 of acme's 360, and all 24 of globex's.
    let admitted = tenants.admitted();
    assert!((215..=235).contains(&admitted), "{admitted}");
    assert_eq!(
        row(&report, "stage per_key").offered(),
        0,
        "no API keys: skipped"
    );
}
