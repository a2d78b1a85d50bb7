//! Statistics under envoyproxy/ratelimit's names, as its users' dashboards read them: pushed
//! to a statsd server of the test's own (UDP and TCP sockets the test binds and reads), and
//! served on the Prometheus listener (the response time in seconds, or in upstream's legacy
//! milliseconds). Real `floodgate serve` processes.

use crate::common;

use common::serve::{config_file, serve};
use common::statsd::Received;
use common::upstream::{loopback_env, runtime_dir, serve_with, set};
use floodgate_harness::RedisServer;
use serde_json::json;

/// Five hits on a limit of 4 (near_limit at ratio 0.5: 2) and one descriptor of an unknown
/// domain, through `/json`.
async fn traffic(http: &str) {
    let client = reqwest::Client::new();
    for _ in 0..5 {
        let body = json!({"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": "ann"}]}]});
        let r = client
            .post(format!("{http}/json"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success() || r.status() == 429,
            "{}",
            r.status()
        );
    }
    let body =
        json!({"domain": "nope", "descriptors": [{"entries": [{"key": "user", "value": "ann"}]}]});
    client
        .post(format!("{http}/json"))
        .json(&body)
        .send()
        .await
        .unwrap();
}

/// What the five hits and the unknown domain must add up to, with `tags` on the `ratelimit.`
/// names.
fn expected(tags: &str) -> Vec<(String, u64)> {
    let hits = |stat: &str| format!("ratelimit.service.rate_limit.rl.user.{stat}{tags}");
    vec![
        (hits("total_hits"), 5),
        (hits("within_limit"), 4),
        (hits("near_limit"), 2),
        (hits("over_limit"), 1),
        (
            format!("ratelimit.service.rate_limit.nope.domain_not_found{tags}"),
            1,
        ),
        (format!("ratelimit.service.config_load_success{tags}"), 1),
    ]
}

fn check(received: &Received, want: &[(String, u64)]) {
    let (counters, timers) = (&received.counters, &received.timers);
    for (name, n) in want {
        assert_eq!(counters.get(name), Some(n), "{name} in {counters:#?}");
    }
    // Counters of stats nothing reached are not sent.
    assert!(
        !counters.keys().any(|k| k.contains(".shadow_mode")),
        "{counters:#?}"
    );
    // `/json` calls are not gRPC's: upstream's server counters and timer leave them out.
    assert!(timers.is_empty(), "{timers:#?}");
    assert!(
        !counters.keys().any(|k| k.starts_with("ratelimit_server.")),
        "{counters:#?}"
    );
}

#[tokio::test]
async fn upstream_variables_push_upstream_names_to_statsd_over_udp() {
    let redis = RedisServer::start();
    let statsd = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let port = statsd.local_addr().unwrap().port();
    let root = runtime_dir("statsd-udp", 4);
    let mut env = loopback_env(&root.0, &format!("127.0.0.1:{}", redis.port()));
    for (name, value) in [
        ("USE_STATSD", "true".to_string()),
        ("STATSD_HOST", "127.0.0.1".to_string()),
        ("STATSD_PORT", port.to_string()),
        ("STATSD_PROTOCOL", "udp".to_string()),
        ("STATS_FLUSH_INTERVAL", "100ms".to_string()),
        ("EXTRA_TAGS", "zone:eu.west,app:edge".to_string()),
        ("NEAR_LIMIT_RATIO", "0.5".to_string()),
    ] {
        set(&mut env, name, value);
    }
    let service = serve_with(&env);
    traffic(&service.http).await;

    let want = expected(".__app=edge.__zone=eu_west");
    let received = Received::from_udp(&statsd, floodgate_server::statsd::DATAGRAM_BYTES, |r| {
        r.has(&want)
    })
    .await;
    check(&received, &want);
}

#[tokio::test]
async fn a_config_file_pushes_over_tcp_and_serves_upstreams_prometheus_series() {
    let statsd = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = statsd.local_addr().unwrap();
    let (_dir, path) = config_file(&format!(
        "domains:
  - domain: rl
    descriptors:
      - key: user
        rate_limit: {{unit: hour, requests_per_unit: 4}}
stats:
  near_limit_ratio: 0.5
  statsd: {{address: \"{address}\", flush_interval: 100ms}}
  prometheus: {{address: \"127.0.0.1:0\", path: /prom}}
"
    ));
    let service = serve(&path, "memory", &[]);
    traffic(&service.http).await;

    let want = expected("");
    let received = Received::from_tcp(&statsd, |r| r.has(&want)).await;
    check(&received, &want);

    let client = reqwest::Client::new();
    let prometheus = service.metrics.as_deref().expect("a Prometheus listener");
    let page = client
        .get(format!("{prometheus}/prom"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    for series in [
        "ratelimit_service_rate_limit_total_hits{domain=\"rl\",key1=\"user\"} 5",
        "ratelimit_service_rate_limit_over_limit{domain=\"rl\",key1=\"user\"} 1",
        "ratelimit_service_rate_limit_near_limit{domain=\"rl\",key1=\"user\"} 2",
        "ratelimit_service_config_load_success 1",
        "ratelimit_service_rate_limit_nope_domain_not_found 1",
        "ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"} 6",
        // Floodgate's own series, on the HTTP port's /metrics too.
        "floodgate_rls_descriptor_hits_total{domain=\"rl\",key=\"rl.user\",stat=\"total_hits\"} 5",
        "floodgate_statsd_pushes_total{result=\"ok\"}",
    ] {
        assert!(page.contains(series), "{series} in:\n{page}");
    }
    let other = client
        .get(format!("{prometheus}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404, "only the configured path is served");
    let metrics = client
        .get(format!("{}/metrics", service.http))
        .send()
        .await
        .unwrap();
    let metrics = metrics.text().await.unwrap();
    assert!(metrics.contains(
        "floodgate_rls_descriptor_hits_total{domain=\"rl\",key=\"rl.user\",stat=\"over_limit\"} 1"
    ));
}

/// The lines of `ratelimit_service_response_time_seconds` that a process started with
/// upstream's `USE_PROMETHEUS` and `extra` serves on its Prometheus listener after two
/// `/json` calls.
async fn response_time_series(
    redis: &RedisServer,
    name: &str,
    extra: &[(&'static str, &str)],
) -> Vec<String> {
    let root = runtime_dir(name, 4);
    let mut env = loopback_env(&root.0, &format!("127.0.0.1:{}", redis.port()));
    set(&mut env, "USE_PROMETHEUS", "true");
    set(&mut env, "PROMETHEUS_ADDR", "127.0.0.1:0");
    for (variable, value) in extra {
        set(&mut env, variable, *value);
    }
    let service = serve_with(&env);
    let client = reqwest::Client::new();
    for _ in 0..2 {
        // A user of each process's own: they share one Redis.
        let body =
            json!({"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": name}]}]});
        let r = client
            .post(format!("{}/json", service.http))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let prometheus = service.metrics.as_deref().expect("a Prometheus listener");
    let page = client
        .get(format!("{prometheus}/metrics"))
        .send()
        .await
        .unwrap();
    page.text()
        .await
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("ratelimit_service_response_time_seconds"))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn the_response_time_is_in_seconds_unless_upstreams_legacy_milliseconds_are_asked_for() {
    let redis = RedisServer::start();
    let bucket = |le: &str, n: u32| {
        format!("ratelimit_service_response_time_seconds_bucket{{grpc_method=\"ShouldRateLimit\",le=\"{le}\"}} {n}")
    };
    let count = "ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"} 2";
    let seconds = response_time_series(&redis, "rt-seconds", &[]).await;
    for line in [bucket("0.00001", 0), bucket("1", 2), count.to_string()] {
        assert!(seconds.contains(&line), "{line} in {seconds:#?}");
    }
    let millis = response_time_series(
        &redis,
        "rt-millis",
        &[("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "true")],
    )
    .await;
    for line in [bucket("0.01", 0), bucket("1000", 2), count.to_string()] {
        assert!(millis.contains(&line), "{line} in {millis:#?}");
    }
    assert!(
        !millis.iter().any(|l| l.contains("le=\"0.00001\"")),
        "{millis:#?}"
    );
    // A mapping file decides for itself: the variable is ignored.
    let dir = std::env::temp_dir().join(format!("floodgate-rt-map-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("mapper.yaml");
    std::fs::write(
        &file,
        "mappings:\n  - match: ratelimit_server.*.response_time\n    name: ratelimit_service_response_time_seconds\n    scale: 0.001\n    labels: {grpc_method: \"$1\"}\n",
    )
    .unwrap();
    let mapped = response_time_series(
        &redis,
        "rt-file",
        &[
            ("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "true"),
            ("PROMETHEUS_MAPPER_YAML", file.to_str().unwrap()),
        ],
    )
    .await;
    assert!(mapped.contains(&bucket("1", 2)), "{mapped:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}
