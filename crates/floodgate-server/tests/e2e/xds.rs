//! Configuration over xDS (`CONFIG_TYPE=GRPC_XDS_SOTW`) against a real control plane of the
//! tests' own (tonic, `common/xds.rs`): the subscription names the node; decisions follow each
//! pushed version, counters carried over; an invalid version is NACKed naming the resource and
//! the field while the last good one keeps serving; a dropped stream reconnects and
//! resubscribes with the version it runs; nothing is served before a first configuration unless
//! `FORCE_START_WITHOUT_INITIAL_CONFIG`; mutual TLS to the control plane. Real processes and a
//! `redis-server` of the test's own.

use crate::common;
use crate::common::otlp as collector;
use crate::common::xds as control_plane;

use common::serve::Service;
use common::upstream::{loopback_env, serve_with, set};
use control_plane::{
    envoy_gateway_env, envoy_gateway_tracing, per_user, ControlPlane, GatewayFiles, PlaneTls,
};
use floodgate_harness::{RedisServer, TestCa};
use floodgate_server::proto::ratelimit::config::ratelimit::v3::RateLimitUnit;
use serde_json::json;

/// Upstream's variables for configuration over xDS from `plane` (node `test-node`, quick
/// retries), Redis at `redis`, every listener on a loopback port the OS chooses.
fn xds_env(plane: &ControlPlane, redis: &RedisServer) -> Vec<(&'static str, String)> {
    let mut env = loopback_env(
        std::path::Path::new("/data"),
        &format!("127.0.0.1:{}", redis.port()),
    );
    env.extend([
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".to_string()),
        ("LOG_LEVEL", "info".into()),
        ("CONFIG_GRPC_XDS_SERVER_URL", plane.address.to_string()),
        ("CONFIG_GRPC_XDS_NODE_ID", "test-node".into()),
        ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a".into()),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "100ms".into()),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "200ms".into()),
        (
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            "x-team:edge,Authorization:Bearer-t0ken".into(),
        ),
    ]);
    env
}

/// Starts the service off the test's runtime, which serves the control plane meanwhile.
async fn start(env: Vec<(&'static str, String)>) -> Service {
    tokio::task::spawn_blocking(move || serve_with(&env))
        .await
        .unwrap()
}

/// How many of `n` hits for `user` in domain `rl` are allowed over `/json`.
async fn allowed(client: &reqwest::Client, node: &Service, user: &str, n: usize) -> usize {
    let body =
        json!({"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": user}]}]});
    let mut allowed = 0;
    for _ in 0..n {
        match node.post(client, "/json", &body).await.0 {
            200 => allowed += 1,
            429 => {}
            other => panic!("/json answered {other}"),
        }
    }
    allowed
}

async fn debug_get(client: &reqwest::Client, node: &Service, path: &str) -> String {
    let debug = node.debug.as_ref().expect("a debug listener");
    client
        .get(format!("{debug}{path}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_follow_the_pushed_configuration_and_a_bad_version_is_nacked() {
    let redis = RedisServer::start();
    let plane = ControlPlane::start(None).await;
    plane.push("v1", vec![per_user("limits", 2)]);
    let node = start(xds_env(&plane, &redis)).await;
    let client = reqwest::Client::new();

    // The subscription names the node, its metadata and the type, with no version yet.
    let requests = plane.requests();
    let subscribe = &requests[0];
    let sent_node = subscribe.node.as_ref().unwrap();
    assert_eq!(sent_node.id, "test-node");
    assert_eq!(sent_node.user_agent_name, "floodgate");
    assert!(sent_node
        .metadata
        .as_ref()
        .unwrap()
        .fields
        .contains_key("zone"));
    assert_eq!(subscribe.type_url, control_plane::TYPE_URL);
    assert_eq!(subscribe.version_info, "");
    assert!(subscribe.resource_names.is_empty());
    // CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS ride on the stream as gRPC metadata.
    let metadata = &plane.metadata()[0];
    assert!(
        metadata.contains(&("x-team".into(), "edge".into())),
        "{metadata:?}"
    );
    assert!(
        metadata.contains(&("authorization".into(), "Bearer-t0ken".into())),
        "{metadata:?}"
    );
    plane.wait_for_ack("v1").await;

    assert_eq!(allowed(&client, &node, "alice", 2).await, 2);
    assert_eq!(allowed(&client, &node, "carol", 3).await, 2);
    let listing = debug_get(&client, &node, "/rlconfig").await;
    assert!(listing.starts_with("# xDS version v1\n"), "{listing}");
    let (_, metrics) = node.get(&client, "/metrics").await;
    assert!(
        metrics.contains("floodgate_xds_config_version_info{version=\"v1\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("floodgate_xds_connected 1"), "{metrics}");

    // A new version: the new limit applies, and the counters carry on.
    plane.push("v2", vec![per_user("limits", 4)]);
    plane.wait_for_ack("v2").await;
    assert_eq!(allowed(&client, &node, "alice", 5).await, 2);
    assert_eq!(allowed(&client, &node, "bob", 5).await, 4);

    // An invalid version is NACKed, naming the resource and the field; v2 keeps serving.
    let mut bad = per_user("broken-limits", 1);
    bad.descriptors[0].rate_limit.as_mut().unwrap().unit = RateLimitUnit::Unknown as i32;
    plane.push("v3", vec![bad]);
    let requests = plane
        .wait_for("a NACK of v3", |requests| {
            requests.iter().any(|r| r.error_detail.is_some())
        })
        .await;
    let nack = requests.iter().find(|r| r.error_detail.is_some()).unwrap();
    assert_eq!(
        nack.version_info, "v2",
        "a NACK names the version still served"
    );
    assert!(!nack.response_nonce.is_empty());
    let why = &nack.error_detail.as_ref().unwrap().message;
    assert!(why.contains("broken-limits"), "{why}");
    assert!(why.contains("descriptors[0].rate_limit.unit"), "{why}");
    assert_eq!(allowed(&client, &node, "dave", 5).await, 4);
    let listing = debug_get(&client, &node, "/rlconfig").await;
    assert!(listing.starts_with("# xDS version v2\n"), "{listing}");
    let (_, metrics) = node.get(&client, "/metrics").await;
    assert!(
        metrics.contains("floodgate_xds_responses_total{outcome=\"nack\"} 1"),
        "{metrics}"
    );

    // A good version again, then the control plane drops its streams: the client connects
    // again and subscribes with the version it runs.
    plane.push("v4", vec![per_user("limits", 6)]);
    plane.wait_for_ack("v4").await;
    let before = plane.requests().len();
    plane.drop_streams();
    plane
        .wait_for("a new subscription with v4", |requests| {
            requests[before..]
                .iter()
                .any(|r| r.response_nonce.is_empty() && r.version_info == "v4")
        })
        .await;
    assert!(plane.streams() >= 2);
    assert_eq!(allowed(&client, &node, "erin", 8).await, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_served_before_a_first_configuration_unless_forced() {
    let redis = RedisServer::start();

    // Forced: serves at once, not ready until a configuration runs.
    let plane = ControlPlane::start(None).await;
    let mut env = xds_env(&plane, &redis);
    set(&mut env, "FORCE_START_WITHOUT_INITIAL_CONFIG", "true");
    let node = start(env).await;
    let client = reqwest::Client::new();
    let (status, body) = node.get(&client, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("no configuration has loaded yet"), "{body}");
    plane.push("v1", vec![per_user("limits", 1)]);
    plane.wait_for_ack("v1").await;
    assert_eq!(node.get(&client, "/readyz").await.0, 200);
    assert_eq!(allowed(&client, &node, "alice", 2).await, 1);

    // Not forced: the process subscribes and serves nothing until the first version runs.
    let plane = ControlPlane::start(None).await;
    let env = xds_env(&plane, &redis);
    let starting = tokio::task::spawn_blocking(move || serve_with(&env));
    plane
        .wait_for("a subscription", |requests| !requests.is_empty())
        .await;
    assert!(
        !starting.is_finished(),
        "listening before any configuration"
    );
    plane.push("v1", vec![per_user("limits", 1)]);
    let node = starting.await.unwrap();
    assert!(
        node.started
            .contains("waiting for a first configuration from the xDS server"),
        "{}",
        node.started
    );
    assert_eq!(node.get(&client, "/readyz").await.0, 200);
    // The same Redis as the first node's: another user.
    assert_eq!(allowed(&client, &node, "bob", 2).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_is_reached_over_mutual_tls() {
    let redis = RedisServer::start();
    let ca = TestCa::new();
    let server = ca.issue("control-plane", "IP:127.0.0.1,DNS:envoy-gateway");
    let client_cert = ca.issue("ratelimit", "DNS:envoy-ratelimit");
    let plane = ControlPlane::start(Some(PlaneTls {
        server,
        client_ca: ca.ca_file(),
    }))
    .await;
    plane.push("v1", vec![per_user("limits", 2)]);
    let mut env = xds_env(&plane, &redis);
    for (name, value) in [
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".to_string()),
        (
            "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
            ca.ca_file().display().to_string(),
        ),
        (
            "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
            client_cert.cert.display().to_string(),
        ),
        (
            "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
            client_cert.key.display().to_string(),
        ),
        (
            "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
            "envoy-gateway".to_string(),
        ),
    ] {
        set(&mut env, name, value);
    }
    let node = start(env.clone()).await;
    plane.wait_for_ack("v1").await;
    let client = reqwest::Client::new();
    assert_eq!(allowed(&client, &node, "alice", 3).await, 2);

    // Without a client certificate the control plane refuses the handshake: forced to start,
    // the service never gets a configuration and says why.
    let mut anonymous: Vec<(&'static str, String)> = env
        .into_iter()
        .filter(|(k, _)| !k.starts_with("CONFIG_GRPC_XDS_CLIENT_TLS"))
        .collect();
    set(&mut anonymous, "FORCE_START_WITHOUT_INITIAL_CONFIG", "true");
    let streams = plane.streams();
    let node = start(anonymous).await;
    assert_eq!(node.get(&client, "/readyz").await.0, 503);
    node.logged("no xDS stream").await;
    assert_eq!(
        plane.streams(),
        streams,
        "no stream without a client certificate"
    );
}

/// The environment Envoy Gateway gives its rate limit container ([`envoy_gateway_env`]), with
/// the test's addresses and files: the control plane over mutual TLS (at `127.0.0.1`, not
/// `envoy-gateway:18001`), TLS on gRPC, Redis over TLS with a client certificate, the
/// Prometheus listener (on a port the OS chooses, not `:19001`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_gateways_environment_runs_and_follows_the_pushed_configuration() {
    let ca = TestCa::new();
    let redis_cert = ca.issue("redis", "IP:127.0.0.1,DNS:localhost");
    let redis = RedisServer::start_tls_with(&redis_cert, &ca.ca_file(), true);
    let redis_client = ca.issue("redis-client", "DNS:envoy-ratelimit");
    let certs = ca.issue(
        "envoy-ratelimit",
        "DNS:envoy-ratelimit,DNS:localhost,IP:127.0.0.1",
    );
    let plane_cert = ca.issue("envoy-gateway", "DNS:envoy-gateway,IP:127.0.0.1");
    let plane = ControlPlane::start(Some(PlaneTls {
        server: plane_cert,
        client_ca: ca.ca_file(),
    }))
    .await;
    let path = |p: &std::path::Path| p.display().to_string();
    let mapping = tempfile_with(control_plane::gateway_mapping());
    let mut env = envoy_gateway_env(
        plane.address,
        &format!("127.0.0.1:{}", redis.tls_port()),
        &GatewayFiles {
            cert: path(&certs.cert),
            key: path(&certs.key),
            ca: path(&ca.ca_file()),
            redis_cert: path(&redis_client.cert),
            redis_key: path(&redis_client.key),
            mapping: path(&mapping.1),
        },
    );
    let traces = collector::Collector::http().await;
    env.extend(envoy_gateway_tracing(&traces.endpoint));
    env.push((
        "FLOODGATE_STORE_TIMEOUT",
        common::serve::GENEROUS_STORE_TIMEOUT.into(),
    ));
    let node = start(env).await;
    assert!(
        !node.started.contains("does not support"),
        "every variable Envoy Gateway sets here is supported:\n{}",
        node.started
    );
    let client = reqwest::Client::new();
    // Forced to start: not ready (upstream's probe path too) until a configuration runs.
    assert_eq!(node.get(&client, "/healthcheck").await.0, 500);

    plane.push("1", vec![per_user("default/eg/rule-0", 2)]);
    plane.wait_for_ack("1").await;
    assert_eq!(
        node.get(&client, "/healthcheck").await,
        (200, "OK".to_string())
    );
    let mut rls = common::tls::grpc_client(&node.grpc, &ca.ca_file(), None)
        .await
        .unwrap();
    assert_eq!(
        common::tls::grpc_allowed(&mut rls, "alice", 3)
            .await
            .unwrap(),
        2
    );

    plane.push("2", vec![per_user("default/eg/rule-0", 5)]);
    plane.wait_for_ack("2").await;
    // Counted in Redis across the versions: 3 hits so far (one over), 5 allowed in all.
    assert_eq!(
        common::tls::grpc_allowed(&mut rls, "alice", 5)
            .await
            .unwrap(),
        2
    );

    let metrics = node.metrics.as_ref().expect("the Prometheus listener");
    let text = client
        .get(format!("{metrics}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("ratelimit_service_rate_limit_over_limit{domain=\"rl\",key1=\"user\"}"),
        "{text}"
    );
    // The mapping file applies: its own entry renames within_limit.
    assert!(
        text.contains("eg_within_limit{domain=\"rl\",key1=\"user\"}"),
        "{text}"
    );
    // Traced as Envoy Gateway's tracing provider asks: each call and its Redis call.
    let spans = traces
        .until("the calls' spans", |spans| {
            spans.iter().filter(|s| s.name == "ShouldRateLimit").count() == 8
                && spans.iter().filter(|s| s.name == "store call").count() == 8
        })
        .await;
    let call = spans.iter().find(|s| s.name == "ShouldRateLimit").unwrap();
    assert_eq!(call.resource("service.name"), Some("envoy-ratelimit"));
    assert_eq!(
        call.resource("service.instance.id"),
        Some("envoy-ratelimit-5d8f7c9b4-x2x7q")
    );
    assert_eq!(call.attribute("ratelimit.domain"), Some("rl"));
    let store = spans.iter().find(|s| s.name == "store call").unwrap();
    assert_eq!(store.attribute("floodgate.store"), Some("redis"));
}

/// A file holding `text`, removed with the directory when the first value is dropped.
fn tempfile_with(text: &str) -> (common::serve::TempDir, std::path::PathBuf) {
    common::serve::config_file(text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floodgate_file_names_the_control_plane_and_serves_its_own_sections_beside() {
    let plane = ControlPlane::start(None).await;
    plane.push("v1", vec![per_user("limits", 2)]);
    let file = |login: u32| {
        format!(
            "xds:\n  server: {}\n  node_id: file-node\n  node_metadata: {{zone: b}}\npipeline: []\nplans: {{}}\nlimits:\n  login: {{algorithm: fixed_window, limit: {login}, window: 1m}}\n",
            plane.address
        )
    };
    let (_dir, path) = common::serve::config_file(&file(2));
    let config = path.clone();
    let node = tokio::task::spawn_blocking(move || common::serve::serve(&config, "memory", &[]))
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let subscribe = &plane.requests()[0];
    let sent = subscribe.node.as_ref().unwrap();
    assert_eq!(sent.id, "file-node");
    assert!(sent.metadata.as_ref().unwrap().fields.contains_key("zone"));
    plane.wait_for_ack("v1").await;

    // The pushed domain and the file's named limit, side by side.
    assert_eq!(allowed(&client, &node, "alice", 3).await, 2);
    let login = json!({"limiter": "login", "key": "carol"});
    let checks = |n: usize| {
        let (client, node, login) = (&client, &node, &login);
        async move {
            let mut allowed = 0;
            for _ in 0..n {
                let (status, answer) = node.post(client, "/v1/check", login).await;
                assert_eq!(status, 200, "{answer}");
                allowed += usize::from(answer["allowed"] == true);
            }
            allowed
        }
    };
    assert_eq!(checks(3).await, 2);

    // Editing the file and reloading: the file's sections change, the pushed domains stay.
    std::fs::write(&path, file(4)).unwrap();
    node.signal("HUP");
    node.logged("configuration reloaded").await;
    assert_eq!(
        allowed(&client, &node, "alice", 1).await,
        0,
        "alice's count was kept"
    );
    assert_eq!(allowed(&client, &node, "bob", 3).await, 2);
    assert_eq!(
        checks(3).await,
        2,
        "carol's count was kept, under the new limit of 4"
    );

    // A file naming a control plane holds no domains of its own.
    let (_dir, both) = common::serve::config_file(&format!(
        "{}domains:\n  - domain: rl\n    descriptors: [{{key: user, rate_limit: {{unit: hour, requests_per_unit: 1}}}}]\n",
        file(2)
    ));
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .arg("check-config")
        .arg(&both)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("domains") && said.contains("xDS"), "{said}");
}
