//! Quota mode as envoyproxy/ratelimit's own integration tests drive it
//! (`integration-test/scripts/quota.sh`, `token-quota.sh` and `multiservice-tokenquota.sh`,
//! on the `service` descriptors of `examples/ratelimit/config/example.yaml` and the rate limit
//! actions of `examples/envoy/proxy.yaml`): the calls Envoy's filter makes for those routes,
//! sent to the real process, with the answers the scripts expect. Each scenario runs on the
//! memory store (a Floodgate file) and on a Redis of the test's own in upstream's key layout
//! (upstream's environment alone). The scripts' windows are a minute and end each scenario by
//! waiting for the next; here they are an hour, so that no window ends in the middle, and the
//! wait is left out (a new window starting afresh is `descriptors.rs`' business).

use crate::common;

use common::serve::{config_file, serve, Service, TempDir};
use common::upstream::{loopback_env, runtime_dir, serve_with, set};
use floodgate_harness::RedisServer;
use serde_json::{json, Value};

/// Upstream's two quota-mode services, 1 and 2 requests a window, each with the metadata
/// that names it (`service_with_quota.name`), in one domain per scenario so that each starts
/// from zero.
fn domain(name: &str) -> String {
    format!(
        "domain: {name}
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {{unit: hour, requests_per_unit: 1}}
    metadata:
      service_with_quota: {{name: service_1}}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {{unit: hour, requests_per_unit: 2}}
    metadata:
      service_with_quota: {{name: service_2}}
"
    )
}

const SCENARIOS: [&str; 3] = ["quota", "tokenquota", "multiservice"];

/// One call as Envoy's filter makes it: a descriptor `service=<name>` for each of `services`,
/// with its own `hits_addend` when given. Whether Envoy lets the request through (the HTTP
/// status `/json` answers: 200, or 429), and the service the answer's metadata names.
async fn call(
    client: &reqwest::Client,
    node: &Service,
    domain: &str,
    services: &[(&str, Option<u64>)],
) -> (bool, Option<String>) {
    let descriptors: Vec<Value> = services
        .iter()
        .map(|(service, hits)| {
            let mut d = json!({"entries": [{"key": "service", "value": service}]});
            if let Some(hits) = hits {
                d["hitsAddend"] = json!(hits);
            }
            d
        })
        .collect();
    let (status, answer) = node
        .post(
            client,
            "/json",
            &json!({"domain": domain, "descriptors": descriptors}),
        )
        .await;
    assert!(status == 200 || status == 429, "{status}: {answer}");
    let named = answer["dynamicMetadata"]["metadata"]["service_with_quota"]["name"]
        .as_str()
        .map(str::to_string);
    (status == 200, named)
}

/// `quota.sh`: `/quota` sends `service_1` and `service_2`, one hit each. The second request
/// goes through on `service_2`'s room though `service_1` is spent; the third finds both spent.
async fn quota(client: &reqwest::Client, node: &Service) {
    let both = [("service_1", None), ("service_2", None)];
    assert!(call(client, node, "quota", &both).await.0, "first");
    assert!(call(client, node, "quota", &both).await.0, "second");
    assert!(
        !call(client, node, "quota", &both).await.0,
        "third: both spent"
    );
}

/// `token-quota.sh`: `/tokenquota` checks `service_2` at request time (`hits_addend: 0`) and
/// charges it one hit when the stream is done: three requests go through, the fourth not.
async fn token_quota(client: &reqwest::Client, node: &Service) {
    for n in 1..=3 {
        let (through, _) = call(client, node, "tokenquota", &[("service_2", Some(0))]).await;
        assert!(through, "request {n}");
        call(client, node, "tokenquota", &[("service_2", Some(1))]).await;
    }
    let (through, _) = call(client, node, "tokenquota", &[("service_2", Some(0))]).await;
    assert!(!through, "request 4");
}

/// `multiservice-tokenquota.sh`: `/multiservice-tokenquota` checks both services at request
/// time (`hits_addend: 0`); the answer's metadata names the first service with quota left
/// (Envoy routes there), which is charged one hit when the stream is done. Two requests go to
/// service 1, three to service 2, and the sixth is refused.
async fn multiservice(client: &reqwest::Client, node: &Service) {
    let check = [("service_1", Some(0)), ("service_2", Some(0))];
    for (n, expected) in [
        "service_1",
        "service_1",
        "service_2",
        "service_2",
        "service_2",
    ]
    .into_iter()
    .enumerate()
    {
        let (through, served) = call(client, node, "multiservice", &check).await;
        assert!(through, "request {}", n + 1);
        assert_eq!(served.as_deref(), Some(expected), "request {}", n + 1);
        call(client, node, "multiservice", &[(expected, Some(1))]).await;
    }
    let (through, _) = call(client, node, "multiservice", &check).await;
    assert!(!through, "request 6");
}

async fn every_scenario(node: &Service) {
    let client = reqwest::Client::new();
    quota(&client, node).await;
    token_quota(&client, node).await;
    multiservice(&client, node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_quota_scenarios_on_the_memory_store() {
    let domains: String = SCENARIOS
        .iter()
        .map(|name| {
            let mut entry = String::new();
            for (i, line) in domain(name).lines().enumerate() {
                entry.push_str(if i == 0 { "  - " } else { "    " });
                entry.push_str(line);
                entry.push('\n');
            }
            entry
        })
        .collect();
    let (_dir, path) = config_file(&format!(
        "response_dynamic_metadata: true\ndomains:\n{domains}"
    ));
    let node = serve(&path, "memory", &[]);
    every_scenario(&node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_quota_scenarios_in_upstreams_redis_layout() {
    let redis = RedisServer::start();
    let root: TempDir = runtime_dir("quota-mode", 1);
    let config = root.0.join("ratelimit/config");
    std::fs::remove_file(config.join("rl.yaml")).unwrap();
    for name in SCENARIOS {
        std::fs::write(config.join(format!("{name}.yaml")), domain(name)).unwrap();
    }
    let mut env = loopback_env(&root.0, &format!("127.0.0.1:{}", redis.port()));
    set(&mut env, "RESPONSE_DYNAMIC_METADATA", "true");
    let node = serve_with(&env);
    every_scenario(&node).await;
    // Counted in upstream's keys, refused hits included: `quota`'s service_1 saw 3 hits.
    let keys = redis.cli(&["KEYS", "quota_service_service_1_*"]).unwrap();
    let key = keys.lines().next().expect("upstream's key");
    assert_eq!(redis.cli(&["GET", key]).unwrap().trim(), "3");
}
