//! `floodgate replay --store redis://…`: the same trace on the memory store and on a Redis the
//! test starts (never the machine's own on 6379) gives the same decisions, line for line; a
//! limiter Redis cannot run is refused, naming it.

use crate::common;

use common::cli::floodgate;
use floodgate_harness::RedisServer;

/// `floodgate replay --store STORE --limiter SPEC < trace`: exit status, stdout, stderr.
fn replay(store: &str, spec: &str, trace: &str) -> (i32, String, String) {
    let out = floodgate(&["replay", "--store", store, "--limiter", spec], trace);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A trace that refuses, refills and crosses window boundaries on two keys.
fn trace() -> String {
    let mut lines = String::new();
    for i in 0..40u32 {
        let t = f64::from(i) * 0.37;
        let key = if i % 3 == 0 { "bob" } else { "alice" };
        let cost = 1 + i % 2;
        lines.push_str(&format!(
            "{{\"t\":{t},\"key\":\"{key}\",\"cost\":{cost}}}\n"
        ));
    }
    lines
}

/// Acquires and releases on one key, some refused, some releases of leases not held.
const LEASES: &str = "{\"t\":0,\"key\":\"k\",\"op\":\"acquire\",\"lease\":\"a\"}\n\
{\"t\":0.5,\"key\":\"k\",\"op\":\"acquire\",\"lease\":\"b\"}\n\
{\"t\":1,\"key\":\"k\",\"op\":\"acquire\",\"lease\":\"c\"}\n\
{\"t\":2,\"key\":\"k\",\"op\":\"release\",\"lease\":\"a\"}\n\
{\"t\":2,\"key\":\"k\",\"op\":\"release\",\"lease\":\"a\"}\n\
{\"t\":3,\"key\":\"k\",\"op\":\"acquire\",\"lease\":\"d\"}\n\
{\"t\":200,\"key\":\"k\",\"op\":\"acquire\",\"lease\":\"e\"}\n";

#[test]
fn the_same_trace_gives_the_same_decisions_on_memory_and_on_redis() {
    let redis = RedisServer::start();
    let specs = [
        (
            r#"{"algorithm":"token_bucket","rate":2,"capacity":3}"#,
            trace(),
        ),
        (
            r#"{"algorithm":"fixed_window","limit":4,"window":"2s"}"#,
            trace(),
        ),
        (
            r#"{"algorithm":"gcra","max_burst":2,"count":1,"period":"1s"}"#,
            trace(),
        ),
        (
            r#"{"algorithm":"sliding_log","limit":3,"window":"2s"}"#,
            trace(),
        ),
        (
            r#"{"algorithm":"sliding_window","limit":3,"window":"2s"}"#,
            trace(),
        ),
        (
            r#"{"limiter":"concurrency","capacity":2,"lease_ttl":"100s"}"#,
            LEASES.to_string(),
        ),
    ];
    for (spec, trace) in specs {
        let (status, memory, stderr) = replay("memory", spec, &trace);
        assert_eq!(status, 0, "{spec}: {stderr}");
        let (status, on_redis, stderr) = replay(&redis.url(), spec, &trace);
        assert_eq!(status, 0, "{spec}: {stderr}");
        assert_eq!(memory.lines().count(), trace.lines().count(), "{spec}");
        assert!(memory.contains("\"allowed\":false"), "{spec}: refuses some");
        assert_eq!(on_redis, memory, "{spec}");
        // A second run starts from scratch: runs never share keys.
        let (_, again, _) = replay(&redis.url(), spec, &trace);
        assert_eq!(again, memory, "{spec}: second run");
    }
}

#[test]
fn a_limiter_redis_cannot_run_is_refused_by_name() {
    let redis = RedisServer::start();
    // A log over 30 days is beyond the sliding log twin's exact range (2^50 ns).
    let spec = r#"{"algorithm":"sliding_log","limit":3,"window":"30d"}"#;
    let (status, out, stderr) = replay(&redis.url(), spec, "{\"t\":0}\n");
    assert_eq!(status, 2, "{stderr}");
    assert!(out.is_empty(), "{out}");
    assert!(
        stderr.contains("sliding_log") && stderr.contains("redis"),
        "{stderr}"
    );
    let (status, _, stderr) = replay("mongodb://h:1", spec, "{\"t\":0}\n");
    assert_eq!(status, 2, "{stderr}");
    assert!(stderr.contains("store.url"), "{stderr}");
}
