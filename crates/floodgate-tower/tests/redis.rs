//! The middleware over a shared Redis: two routers, as on two nodes, each with its own
//! `RedisStore` pointing at one `redis-server` (started by the test on a free port), hold one
//! limit together, and a lease taken through one is counted by the other.

mod common;

use std::time::Duration;

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use common::read;
use floodgate::limiter::concurrency::ConcurrencyLimiter;
use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
use floodgate::pipeline::{Pipeline, Stage};
use floodgate::store::RedisStore;
use floodgate_harness::RedisServer;
use floodgate_tower::FloodgateLayer;
use http::Request;
use tower::ServiceExt;

/// One node: a router whose layer counts in the Redis at `url`: 5 requests per hour per key
/// (all or nothing: a request refused for concurrency costs nothing), and `in_flight` at once.
fn node(url: &str, in_flight: u64) -> Router {
    let store = RedisStore::builder(url)
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let rate = RequestRateLimiter::builder()
        // 5 per hour: nothing refills during the test.
        .plan(Plan::token_bucket("all", 5.0 / 3600.0, 5).unwrap())
        .build(store.clone())
        .unwrap();
    let concurrency = ConcurrencyLimiter::builder()
        .capacity(in_flight)
        .build(store)
        .unwrap();
    let pipeline = Pipeline::builder()
        .stage(Stage::new(rate).all_or_nothing(true))
        .limiter(concurrency)
        .build()
        .unwrap();
    Router::new()
        .route("/v1/things", get(|| async { "things" }))
        .layer(FloodgateLayer::new(pipeline))
}

fn request(key: &str) -> Request<Body> {
    Request::builder()
        .uri("/v1/things")
        .header("x-api-key", key)
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn two_nodes_on_one_redis_hold_one_limit() {
    let server = RedisServer::start();
    let nodes = [node(&server.url(), 100), node(&server.url(), 100)];
    let mut statuses = Vec::new();
    for i in 0..8 {
        let response = nodes[i % 2].clone().oneshot(request("sk_1")).await.unwrap();
        statuses.push(response.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);
}

#[tokio::test]
async fn a_lease_taken_on_one_node_is_counted_on_the_other() {
    let server = RedisServer::start();
    let nodes = [node(&server.url(), 1), node(&server.url(), 1)];
    // A response whose body is not read yet holds its lease: the other node refuses the same
    // key's second request in flight, and that refusal costs no token (all or nothing).
    let held = nodes[0].clone().oneshot(request("sk_2")).await.unwrap();
    assert_eq!(held.status(), 200);
    for _ in 0..3 {
        let second = nodes[1].clone().oneshot(request("sk_2")).await.unwrap();
        assert_eq!(second.status(), 429);
    }
    // Reading the body to its end gives the lease back, in the background: the other node
    // admits the key again once the release has reached Redis (polled, bounded).
    read(held.into_body()).await;
    let mut admitted = None;
    for attempt in 0..2_000 {
        let again = nodes[1].clone().oneshot(request("sk_2")).await.unwrap();
        if again.status() == 200 {
            admitted = Some(attempt);
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(admitted.is_some(), "the lease came back");
    // Two tokens used (the two admitted requests) of five, whatever the refusals: a third
    // node, with room for many in flight, admits exactly three more.
    let third = node(&server.url(), 100);
    let mut admitted = 0;
    while third
        .clone()
        .oneshot(request("sk_2"))
        .await
        .unwrap()
        .status()
        == 200
    {
        admitted += 1;
        assert!(admitted <= 5);
    }
    assert_eq!(admitted, 3);
}
