//! envoyproxy/ratelimit's probes and debug endpoints on real `floodgate serve` processes:
//! `/healthcheck` on the HTTP port, `grpc.health.v1.Health` (`Check` and `Watch`, service
//! `ratelimit` and the empty name) on the gRPC port, and the debug listener's `/`,
//! `/rlconfig` and `/stats`. The store-down cases run on a `redis-server` of the test's own,
//! which the test kills and restarts.

use crate::common;

use std::time::Duration;

use common::serve::{config_file, serve};
use floodgate_harness::RedisServer;
use floodgate_server::grpc::{HealthCheckRequest, HealthClient, ServingStatus};
use tokio_stream::StreamExt;

const DOMAINS: &str = "domains:\n  - domain: edge\n    descriptors:\n      - key: ip\n        \
                       rate_limit: {unit: minute, requests_per_unit: 5}\n      - key: path\n        \
                       value: /login\n        shadow_mode: true\n        \
                       rate_limit: {unit: second, requests_per_unit: 2}\n";

async fn health(
    client: &mut HealthClient<tonic::transport::Channel>,
    service: &str,
) -> Result<ServingStatus, tonic::Code> {
    client
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .map(|r| r.into_inner().status())
        .map_err(|status| status.code())
}

async fn get(client: &reqwest::Client, url: String) -> (u16, String) {
    let response = client.get(url).send().await.expect("the service answers");
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

#[tokio::test]
async fn a_healthy_service_passes_upstreams_probes() {
    let (_dir, path) = config_file(DOMAINS);
    let node = serve(&path, "memory", &[]);
    let client = reqwest::Client::new();
    assert_eq!(node.get(&client, "/healthcheck").await, (200, "OK".into()));
    // Upstream answers its probe whatever the method.
    let posted = client
        .post(format!("{}/healthcheck", node.http))
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status().as_u16(), 200);
    let mut grpc = HealthClient::connect(node.grpc.clone()).await.unwrap();
    assert_eq!(health(&mut grpc, "").await, Ok(ServingStatus::Serving));
    assert_eq!(
        health(&mut grpc, "ratelimit").await,
        Ok(ServingStatus::Serving)
    );
    assert_eq!(health(&mut grpc, "other").await, Err(tonic::Code::NotFound));
    let mut watch = grpc
        .watch(HealthCheckRequest {
            service: "ratelimit".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.next().await.expect("a first status").unwrap();
    assert_eq!(first.status(), ServingStatus::Serving);
    // Watching an unknown service is not an error (the health protocol): it says so, and
    // would say when the service appears.
    let mut unknown = grpc
        .watch(HealthCheckRequest {
            service: "other".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = unknown.next().await.expect("a first status").unwrap();
    assert_eq!(first.status(), ServingStatus::ServiceUnknown);
}

#[tokio::test]
async fn the_debug_listener_lists_the_rules_and_the_stats() {
    let (_dir, path) = config_file(DOMAINS);
    let node = serve(&path, "memory", &[]);
    let client = reqwest::Client::new();
    let (status, index) = get(&client, format!("{}/", node.debug())).await;
    assert_eq!(status, 200);
    assert_eq!(
        index,
        "/rlconfig: print out the currently loaded configuration for debugging\n\
         /stats: print out stats\n"
    );
    // Any other path answers the index, as upstream's does.
    assert_eq!(
        get(&client, format!("{}/nothing/here", node.debug())).await,
        (200, index)
    );
    assert_eq!(
        get(&client, format!("{}/rlconfig", node.debug())).await,
        (
            200,
            "edge.ip: unit=MINUTE requests_per_unit=5, shadow_mode: false, quota_mode: false\n\
             edge.path_/login: unit=SECOND requests_per_unit=2, shadow_mode: true, quota_mode: false\n"
                .into()
        )
    );
    let (status, stats) = get(&client, format!("{}/stats", node.debug())).await;
    assert_eq!(status, 200);
    assert!(stats.contains("floodgate_calls_in_flight"), "{stats}");
    // The debug listener is not the API: no decisions there.
    let (status, _) = get(&client, format!("{}/v1/check", node.debug())).await;
    assert_eq!(status, 200, "an unknown path answers the index");
}

#[tokio::test]
async fn probes_follow_the_store() {
    let mut redis = RedisServer::start();
    let (_dir, path) = config_file(&format!(
        "store: {{timeout: 100ms, breaker: {{threshold: 0}}, start_without: true}}\n{DOMAINS}"
    ));
    let url = redis.url();
    redis.kill();
    // Started without its store: alive, not healthy.
    let node = serve(&path, &url, &[]);
    let client = reqwest::Client::new();
    assert_eq!(
        node.get(&client, "/healthcheck").await,
        (500, String::new())
    );
    let mut grpc = HealthClient::connect(node.grpc.clone()).await.unwrap();
    assert_eq!(
        health(&mut grpc, "ratelimit").await,
        Ok(ServingStatus::NotServing)
    );
    // The empty name is the process's liveness: it serves.
    assert_eq!(health(&mut grpc, "").await, Ok(ServingStatus::Serving));
    let mut watch = grpc
        .watch(HealthCheckRequest {
            service: "ratelimit".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.next().await.expect("a first status").unwrap();
    assert_eq!(first.status(), ServingStatus::NotServing);
    // The store comes back: the service probes it, and the watch says so without being asked.
    redis.restart();
    let next = tokio::time::timeout(Duration::from_secs(20), watch.next())
        .await
        .expect("a change within 20 s")
        .expect("the stream goes on")
        .unwrap();
    assert_eq!(next.status(), ServingStatus::Serving);
    assert_eq!(node.get(&client, "/healthcheck").await, (200, "OK".into()));
    assert_eq!(
        health(&mut grpc, "ratelimit").await,
        Ok(ServingStatus::Serving)
    );
}

#[tokio::test]
async fn shutting_down_turns_the_probes_off() {
    let (_dir, path) = config_file(DOMAINS);
    let node = serve(&path, "memory", &[]);
    let mut grpc = HealthClient::connect(node.grpc.clone()).await.unwrap();
    let mut watch = grpc
        .watch(HealthCheckRequest { service: "".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        watch.next().await.unwrap().unwrap().status(),
        ServingStatus::Serving
    );
    node.signal("TERM");
    // The watch says the service stops, or ends with the connection: either way it is over.
    let last = tokio::time::timeout(Duration::from_secs(20), watch.next())
        .await
        .expect("the watch moves within 20 s");
    if let Some(Ok(status)) = last {
        assert_eq!(status.status(), ServingStatus::NotServing);
    }
}
