//! DogStatsD's names, tags, lines and datagrams, against what upstream's sink and datadog-go
//! write for the same statistics.

use std::collections::BTreeMap;

use super::*;
use crate::config::MogrifierConfig;

fn config(mogrifiers: Vec<MogrifierConfig>, datadog_tags: &[&str]) -> DogStatsdConfig {
    DogStatsdConfig {
        address: "127.0.0.1:8125".into(),
        flush_interval: None,
        extra_tags: BTreeMap::new(),
        mogrifiers,
        datadog_tags: datadog_tags.iter().map(|t| t.to_string()).collect(),
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn serialized_tags_become_tags() {
    let name = "ratelimit.service.rate_limit.mongo_cps.database_users.total_hits";
    assert_eq!(split_tags(name), (name, vec![]));
    assert_eq!(
        split_tags(&format!("{name}.__COMMIT=12345.__DEPLOY=67890")),
        (name, strings(&["COMMIT:12345", "DEPLOY:67890"]))
    );
    assert_eq!(
        split_tags(&format!("{name}.__COMMIT")),
        (name, vec![]),
        "a part without = is dropped"
    );
    assert_eq!(
        split_tags("a.__k=v=w.__x=.__=y"),
        ("a", strings(&["k:v=w", "x:", ":y"]))
    );
}

#[test]
fn the_client_tags_then_the_names_then_the_mogrifiers() {
    let mogrifier = MogrifierConfig {
        pattern: r"^ratelimit\.(.*)$".into(),
        name: "custom.$1".into(),
        tags: BTreeMap::from([
            ("tag1".into(), "value1".into()),
            ("tag2".into(), "value2".into()),
        ]),
    };
    let namer = Namer::new(&config(vec![mogrifier], &["env:prod"])).unwrap();
    assert_eq!(
        namer.name("ratelimit.service.rate_limit.d.k.total_hits.__COMMIT=1.__DEPLOY=2"),
        (
            "custom.service.rate_limit.d.k.total_hits".to_string(),
            strings(&[
                "env:prod",
                "COMMIT:1",
                "DEPLOY:2",
                "tag1:value1",
                "tag2:value2"
            ])
        )
    );
    assert_eq!(
        namer.name("foo.service.x.__COMMIT=1"),
        (
            "foo.service.x".to_string(),
            strings(&["env:prod", "COMMIT:1"])
        )
    );
    // The mogrifier sees the name without its tags.
    let anchored = MogrifierConfig {
        pattern: r"\.total_hits$".into(),
        name: "hits".into(),
        tags: BTreeMap::new(),
    };
    let namer = Namer::new(&config(vec![anchored], &[])).unwrap();
    assert_eq!(namer.name("a.total_hits.__t=1").0, "hits");
}

#[test]
fn lines_as_datadog_go_writes_them() {
    let tags = strings(&["app:edge", "zone:eu_west"]);
    assert_eq!(
        line(
            "ratelimit.service.rate_limit.rl.user.total_hits",
            Value::Count(5),
            None,
            &tags
        ),
        "ratelimit.service.rate_limit.rl.user.total_hits:5|c|#app:edge,zone:eu_west"
    );
    assert_eq!(line("x", Value::Count(1), None, &[]), "x:1|c");
    assert_eq!(line("g", Value::Gauge(2.5), None, &[]), "g:2.5|g");
    assert_eq!(line("g", Value::Gauge(3.0), None, &[]), "g:3|g");
    assert_eq!(line("t", Value::Timing(3), None, &[]), "t:3.000000|ms");
    assert_eq!(line("t", Value::Timing(0), None, &[]), "t:0.000000|ms");
    assert_eq!(
        line("t", Value::Timing(7), Some(0.25), &tags),
        "t:7.000000|ms|@0.25|#app:edge,zone:eu_west"
    );
    assert_eq!(
        line("t", Value::Timing(7), Some(1.0), &[]),
        "t:7.000000|ms",
        "rate 1 is not written"
    );
    assert_eq!(
        line("x", Value::Count(1), None, &strings(&["a:b\nc"])),
        "x:1|c|#a:bc",
        "newlines in tags are dropped"
    );
}

#[test]
fn a_timer_is_whole_milliseconds_through_seconds() {
    // datadog-go adds whole seconds and nanoseconds as floats, then multiplies by 1000: 1001 ms
    // is 1 + 0.001 s, which is 1000.9999999999999 ms; six decimals write it 1001.000000.
    assert_eq!(timing_millis(1001), 1000.9999999999999);
    assert_eq!(timing_millis(7), 7.0);
    assert_eq!(
        line("t", Value::Timing(1001), None, &[]),
        "t:1001.000000|ms"
    );
}

#[test]
fn a_flush_is_counters_then_timers() {
    let namer = Namer::new(&config(vec![], &[])).unwrap();
    let flush = Flush {
        counters: vec![("ratelimit.service.config_load_success.__t=1".into(), 1)],
        timer: "ratelimit_server.ShouldRateLimit.response_time.__t=1".into(),
        seen: 4,
        millis: vec![2, 0],
    };
    assert_eq!(
        namer.lines(&flush),
        [
            "ratelimit.service.config_load_success:1|c|#t:1",
            "ratelimit_server.ShouldRateLimit.response_time:2.000000|ms|@0.5|#t:1",
            "ratelimit_server.ShouldRateLimit.response_time:0.000000|ms|@0.5|#t:1",
        ]
    );
}

#[test]
fn datagrams_hold_whole_lines_up_to_the_payload() {
    let line = |n: usize| "x".repeat(n);
    // 701 + 701 + 30 bytes fill a datagram exactly; the next line starts another.
    let lines = vec![
        line(700),
        line(700),
        line(29),
        line(PAYLOAD_BYTES),
        line(20),
    ];
    let sent = datagrams(&lines);
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].len(), PAYLOAD_BYTES);
    assert_eq!(
        sent[0],
        format!("{}\n{}\n{}\n", line(700), line(700), line(29))
    );
    assert_eq!(
        sent[1],
        format!("{}\n", line(20)),
        "too long alone: dropped"
    );
    assert!(datagrams(&[]).is_empty());
}
