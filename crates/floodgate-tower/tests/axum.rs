//! The middleware on an axum `Router`: in memory on tokio's paused clock, and once over a
//! real HTTP/1.1 connection on 127.0.0.1 (axum::serve, that is hyper).

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::{get, post};
use axum::Router;
use common::*;
use floodgate::limiter::concurrency::ConcurrencyLimiter;
use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
use floodgate::pipeline::Pipeline;
use floodgate::store::MemoryStore;
use floodgate_tower::{Extractor, FloodgateLayer};
use http::Request;
use tower::ServiceExt;

fn app<S>(layer: FloodgateLayer<S>) -> Router
where
    S: floodgate::store::Store<str, floodgate::algorithm::spec::AnyAlgorithm> + 'static,
{
    Router::new()
        .route("/v1/things", get(|| async { "things" }))
        .route(
            "/v1/export",
            post(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "exported"
            }),
        )
        .layer(layer)
}

fn request(method: &str, path: &str, key: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(path)
        .header("x-api-key", key)
        .body(Body::empty())
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_axum_router_is_limited_per_key_with_plans() {
    let clock = TokioClock::new();
    let plans = vec![
        Plan::token_bucket("free", 2.0, 2).unwrap(),
        Plan::token_bucket("pro", 10.0, 10).unwrap(),
    ];
    let limiter = RequestRateLimiter::builder()
        .plans(plans)
        .build(store(&clock))
        .unwrap();
    let pipeline = Pipeline::builder().limiter(limiter).build().unwrap();
    let layer = FloodgateLayer::new(pipeline).extractor(
        Extractor::new().plan_lookup(|key| key.starts_with("sk_pro_").then(|| "pro".into())),
    );
    let router = app(layer);

    for _ in 0..2 {
        let ok = router
            .clone()
            .oneshot(request("GET", "/v1/things", "sk_free_1"))
            .await
            .unwrap();
        assert_eq!(ok.status(), 200);
        assert_eq!(ok.headers()["ratelimit-policy"], "\"requests\";q=2;w=1");
        assert_eq!(read(ok.into_body()).await, "things");
    }
    let refused = router
        .clone()
        .oneshot(request("GET", "/v1/things", "sk_free_1"))
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "1");
    let body = json(refused.into_body()).await;
    assert_eq!(body["error"]["type"], "rate_limited");
    assert_eq!(body["error"]["retry_after"], 0.5);

    // The pro key gets the pro plan.
    let pro = router
        .clone()
        .oneshot(request("GET", "/v1/things", "sk_pro_1"))
        .await
        .unwrap();
    assert_eq!(pro.headers()["ratelimit"], "\"requests\";r=9;t=1");
    // Unknown routes are limited too (the layer wraps the fallback): still refused.
    let missing = router
        .oneshot(request("GET", "/nope", "sk_free_1"))
        .await
        .unwrap();
    assert_eq!(missing.status(), 429);
}

#[tokio::test(start_paused = true)]
async fn axum_connect_info_keys_anonymous_clients_by_address_and_leases_follow_the_body() {
    let clock = TokioClock::new();
    let limiter = ConcurrencyLimiter::builder()
        .capacity(1)
        .lease_ttl(Duration::from_secs(600))
        .build(store(&clock))
        .unwrap();
    let pipeline = Pipeline::builder().limiter(limiter).build().unwrap();
    let layer = FloodgateLayer::new(pipeline).extractor(Extractor::new().client_ip(|p| {
        p.extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip())
    }));
    let router = app(layer);
    let from = |ip: [u8; 4]| {
        let mut r = Request::post("/v1/export").body(Body::empty()).unwrap();
        r.extensions_mut()
            .insert(ConnectInfo(SocketAddr::from((ip, 50_000))));
        r
    };

    let mut export = Box::pin(router.clone().oneshot(from([192, 0, 2, 1])));
    assert!(tokio::time::timeout(Duration::from_secs(1), &mut export)
        .await
        .is_err());
    let second = router.clone().oneshot(from([192, 0, 2, 1])).await.unwrap();
    assert_eq!(second.status(), 429);
    let body = json(second.into_body()).await;
    assert_eq!(body["error"]["limiter"], "concurrency");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("user ip:192.0.2.1 already has 1 requests in flight"));

    let done = export.await.unwrap();
    assert_eq!(read(done.into_body()).await, "exported");
    let again = router.oneshot(from([192, 0, 2, 1])).await.unwrap();
    assert_eq!(again.status(), 200);
}

/// One HTTP/1.1 request over a fresh connection (a blocking client on a blocking thread);
/// the whole response as text.
async fn http_get(addr: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let head = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(head.as_bytes()).unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).unwrap();
        String::from_utf8_lossy(&response).into_owned()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_real_axum_server_refuses_over_http() {
    // Real time here (real sockets); the plan refills one request per 100 s, so timing
    // cannot matter.
    let plan = Plan::token_bucket("free", 0.01, 2).unwrap();
    let limiter = RequestRateLimiter::builder()
        .plan(plan)
        .build(MemoryStore::new())
        .unwrap();
    let pipeline = Pipeline::builder().limiter(limiter).build().unwrap();
    let layer =
        FloodgateLayer::new(Arc::new(pipeline)).extractor(Extractor::new().client_ip(|p| {
            p.extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip())
        }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = app(layer).into_make_service_with_connect_info::<SocketAddr>();
    let server = tokio::spawn(async move { axum::serve(listener, service).await });

    let run = async {
        for _ in 0..2 {
            let ok = http_get(addr, "/v1/things").await;
            assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
            assert!(
                ok.to_ascii_lowercase()
                    .contains("ratelimit-policy: \"requests\";q=2;w=200"),
                "{ok}"
            );
            assert!(ok.ends_with("things"), "{ok}");
        }
        let refused = http_get(addr, "/v1/things").await;
        assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");
        let lower = refused.to_ascii_lowercase();
        assert!(
            lower.contains("content-type: application/json"),
            "{refused}"
        );
        assert!(lower.contains("retry-after: 100"), "{refused}");
        assert!(refused.contains("\"type\":\"rate_limited\""), "{refused}");
        assert!(
            refused.contains("plan free allows 0.01 requests per second"),
            "{refused}"
        );
    };
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the server answered in time");
    server.abort();
}
