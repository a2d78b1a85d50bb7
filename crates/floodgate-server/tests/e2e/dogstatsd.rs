//! DogStatsD under upstream's variables (`USE_DOG_STATSD`, the mogrifiers, `EXTRA_TAGS`,
//! the client's `DD_ENV`): the exact lines a DogStatsD agent of the test's own (a UDP socket
//! it binds and reads) receives from a real `floodgate serve`, and the settings upstream
//! refuses, refused at start-up.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use common::serve::{config_file, serve_refused};
use common::upstream::{loopback_env, runtime_dir, serve_with, set};
use floodgate_harness::RedisServer;
use serde_json::json;

/// The lines received: counters summed by name and tags, timer lines as sent.
#[derive(Debug, Default)]
struct Agent {
    counters: HashMap<String, u64>,
    timers: Vec<String>,
}

impl Agent {
    /// Reads datagrams until `done`; each must be whole lines within datadog-go's payload.
    async fn read(socket: &tokio::net::UdpSocket, done: impl Fn(&Agent) -> bool) -> Agent {
        let mut agent = Agent::default();
        let mut buffer = vec![0u8; 65_536];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !done(&agent) {
            let n = tokio::time::timeout_at(deadline, socket.recv(&mut buffer))
                .await
                .unwrap_or_else(|_| panic!("the agent did not get everything: {agent:#?}"))
                .unwrap();
            assert!(n <= floodgate_server::dogstatsd::PAYLOAD_BYTES, "{n} bytes");
            let text = std::str::from_utf8(&buffer[..n]).unwrap();
            assert!(text.ends_with('\n'), "whole lines: {text:?}");
            for line in text.lines() {
                agent.add(line);
            }
        }
        agent
    }

    /// A counter `name:n|c|#tags` is summed under `name|#tags`; a timer line is kept.
    fn add(&mut self, line: &str) {
        if line.contains("|ms") {
            self.timers.push(line.to_string());
            return;
        }
        let (name, rest) = line.split_once(':').expect("name:value");
        let (value, kind_tags) = rest.split_once('|').expect("value|type");
        let tags = kind_tags.strip_prefix('c').expect("a counter or a timer");
        *self.counters.entry(format!("{name}{tags}")).or_default() += value.parse::<u64>().unwrap();
    }

    fn has(&self, want: &[(String, u64)]) -> bool {
        want.iter()
            .all(|(key, n)| self.counters.get(key).copied().unwrap_or(0) >= *n)
    }
}

#[tokio::test]
async fn upstreams_dogstatsd_variables_send_tagged_mogrified_lines() {
    let redis = RedisServer::start();
    let agent = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = agent.local_addr().unwrap().port();
    let root = runtime_dir("dogstatsd", 4);
    let mut env = loopback_env(&root.0, &format!("127.0.0.1:{}", redis.port()));
    for (name, value) in [
        ("USE_DOG_STATSD", "true".to_string()),
        ("STATSD_HOST", "127.0.0.1".to_string()),
        ("STATSD_PORT", port.to_string()),
        ("STATS_FLUSH_INTERVAL", "100ms".to_string()),
        ("EXTRA_TAGS", "zone:eu.west,app:edge".to_string()),
        ("NEAR_LIMIT_RATIO", "0.5".to_string()),
        ("DD_ENV", "test".to_string()),
        ("USE_DOG_STATSD_MOGRIFIERS", "descriptor".to_string()),
        (
            "DOG_STATSD_MOGRIFIER_DESCRIPTOR_PATTERN",
            r"^ratelimit\.service\.rate_limit\.([^.]+)\.([^.]+)\.([^.]+)$".to_string(),
        ),
        (
            "DOG_STATSD_MOGRIFIER_DESCRIPTOR_NAME",
            "ratelimit.service.rate_limit.$3".to_string(),
        ),
        (
            "DOG_STATSD_MOGRIFIER_DESCRIPTOR_TAGS",
            "domain:$1,descriptor:$2".to_string(),
        ),
    ] {
        set(&mut env, name, value);
    }
    let service = serve_with(&env);
    let client = reqwest::Client::new();
    let hit =
        json!({"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": "ann"}]}]});
    for _ in 0..5 {
        client
            .post(format!("{}/json", service.http))
            .json(&hit)
            .send()
            .await
            .unwrap();
    }
    let unknown =
        json!({"domain": "nope", "descriptors": [{"entries": [{"key": "user", "value": "ann"}]}]});
    client
        .post(format!("{}/json", service.http))
        .json(&unknown)
        .send()
        .await
        .unwrap();
    let mut grpc = floodgate_server::grpc::RateLimitServiceClient::connect(service.grpc.clone())
        .await
        .unwrap();
    grpc.should_rate_limit(common::tls::request("ann"))
        .await
        .unwrap();

    // The client's tags, then EXTRA_TAGS (cut from the name), then the mogrifier's.
    let base = "|#env:test,app:edge,zone:eu_west";
    let mogrified =
        |stat: &str| format!("ratelimit.service.rate_limit.{stat}{base},descriptor:user,domain:rl");
    let want = vec![
        (mogrified("total_hits"), 6),
        (mogrified("within_limit"), 4),
        (mogrified("near_limit"), 2),
        (mogrified("over_limit"), 2),
        (
            format!("ratelimit.service.rate_limit.nope.domain_not_found{base}"),
            1,
        ),
        (format!("ratelimit.service.config_load_success{base}"), 1),
        (
            format!("ratelimit_server.ShouldRateLimit.total_requests{base}"),
            1,
        ),
    ];
    let received = Agent::read(&agent, |a| a.has(&want) && !a.timers.is_empty()).await;
    for (key, n) in &want {
        assert_eq!(
            received.counters.get(key),
            Some(n),
            "{key} in {received:#?}"
        );
    }
    assert_eq!(
        received.counters.len(),
        want.len(),
        "nothing else: {received:#?}"
    );
    // One gRPC call: one timer line, whole milliseconds written with six decimals.
    assert_eq!(received.timers.len(), 1, "{received:#?}");
    let timer = &received.timers[0];
    let ms = timer
        .strip_prefix("ratelimit_server.ShouldRateLimit.response_time:")
        .and_then(|rest| rest.strip_suffix(&format!("|ms{base}")))
        .unwrap_or_else(|| panic!("{timer}"));
    let (whole, decimals) = ms.split_once('.').unwrap();
    assert!(
        whole.parse::<u64>().is_ok() && decimals == "000000",
        "{timer}"
    );
}

#[test]
fn upstreams_refusals_stop_start_up_naming_the_variables() {
    let (_dir, path) = config_file("domains: []\n");
    for (env, named) in [
        // USE_STATSD is true unless set otherwise: one sink at a time.
        (
            vec![("USE_DOG_STATSD", "true")],
            ["USE_DOG_STATSD", "USE_STATSD"],
        ),
        (
            vec![
                ("USE_DOG_STATSD", "true"),
                ("USE_STATSD", "false"),
                ("USE_PROMETHEUS", "true"),
            ],
            ["USE_DOG_STATSD", "USE_PROMETHEUS"],
        ),
        (
            vec![
                ("USE_DOG_STATSD", "true"),
                ("USE_STATSD", "false"),
                ("USE_DOG_STATSD_MOGRIFIERS", "tag"),
                ("DOG_STATSD_MOGRIFIER_TAG_PATTERN", "(unclosed"),
                ("DOG_STATSD_MOGRIFIER_TAG_NAME", "x"),
            ],
            ["DOG_STATSD_MOGRIFIER_TAG_PATTERN", "(unclosed"],
        ),
        (
            vec![
                ("USE_DOG_STATSD", "true"),
                ("USE_STATSD", "false"),
                ("USE_DOG_STATSD_MOGRIFIERS", "tag"),
                ("DOG_STATSD_MOGRIFIER_TAG_PATTERN", "^x"),
            ],
            ["DOG_STATSD_MOGRIFIER_TAG_NAME", "NAME"],
        ),
        (
            vec![
                ("USE_DOG_STATSD", "true"),
                ("USE_STATSD", "false"),
                ("USE_DOG_STATSD_MOGRIFIERS", "tag"),
                ("DOG_STATSD_MOGRIFIER_TAG_PATTERN", "^x"),
                ("DOG_STATSD_MOGRIFIER_TAG_NAME", "x"),
                ("DOG_STATSD_MOGRIFIER_TAG_TAGS", "domain:"),
            ],
            ["DOG_STATSD_MOGRIFIER_TAG_TAGS", "domain:"],
        ),
    ] {
        let (code, stderr) = serve_refused(&path, "memory", &env);
        assert_eq!(code, Some(2), "{env:?}: {stderr}");
        for name in named {
            assert!(stderr.contains(name), "{env:?} names {name}: {stderr}");
        }
    }
}
