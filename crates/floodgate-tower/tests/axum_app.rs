//! An axum 0.8 application as a user writes it from the README: the two-line start, served with
//! `axum::serve` on 127.0.0.1, and clients connecting from two loopback addresses (127.0.0.1 and
//! 127.0.0.2, both the machine's own) over real TCP connections.
//!
//! - Anonymous clients are told apart by their address (axum's `ConnectInfo`), and an app
//!   served without it answers 500 saying how to fix it, never one shared bucket.
//! - Two layers never share a bucket by accident: each two-line layer has a store of its own,
//!   and two layers on one shared store in one default namespace are refused at build time.
//! - Behind a trusted proxy, the forwarded address is the client; from anyone else the header
//!   is ignored.
//! - The handler sees its admission; refusals can be shaped; the store can be chosen at run
//!   time, a real Redis included.
//!
//! Real time, real sockets: every limit refills one request per 1000 s, so timing cannot
//! matter.

use std::net::SocketAddr;
use std::time::Duration;

use axum::routing::get;
use axum::{Extension, Router};
use bytes::Bytes;
use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
use floodgate::pipeline::Pipeline;
use floodgate::store::AnyStore;
use floodgate_harness::RedisServer;
use floodgate_tower::{Admitted, ClientAddress, FloodgateLayer, PerKey, TrustedProxies};
use http::header::HeaderValue;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;

/// One request a second... per 1000 s: nothing refills during a test.
const SLOW: f64 = 0.001;

/// Serves `app` on 127.0.0.1 (with `ConnectInfo` when `connect_info`); its address.
async fn serve(app: Router, connect_info: bool) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        if connect_info {
            let service = app.into_make_service_with_connect_info::<SocketAddr>();
            axum::serve(listener, service).await
        } else {
            axum::serve(listener, app.into_make_service()).await
        }
    });
    addr
}

/// A response's status, headers and body.
struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: String,
}

/// A GET of `path` on `server` over a new connection from `from` (a loopback address), with
/// `headers`.
async fn get_from(
    from: [u8; 4],
    server: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Answer {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    let stream = socket.connect(server).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = Request::get(path).header("host", "localhost");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// Runs `test` with a bound on the whole: a hung server fails the test instead of hanging it.
async fn within<F: std::future::Future<Output = ()>>(test: F) {
    tokio::time::timeout(Duration::from_secs(60), test)
        .await
        .expect("the server answered in time");
}

const ONE: [u8; 4] = [127, 0, 0, 1];
const TWO: [u8; 4] = [127, 0, 0, 2];

/// The README's two lines, and the handler reading its admission.
fn two_line_app(store: Option<AnyStore>) -> Router {
    let layer = match store {
        None => FloodgateLayer::per_ip(SLOW, 5).unwrap(),
        Some(store) => PerKey::ip()
            .rate(SLOW)
            .capacity(5)
            .store(store)
            .build()
            .unwrap(),
    };
    Router::new()
        .route(
            "/",
            get(|Extension(admitted): Extension<Admitted>| async move {
                let left = admitted.rate_limit.map_or(0, |q| q.left);
                format!("{} {left}", admitted.key)
            }),
        )
        .route_layer(layer)
}

#[tokio::test]
async fn anonymous_clients_are_told_apart_by_their_address() {
    within(async {
        let server = serve(two_line_app(None), true).await;
        for left in (0..5).rev() {
            let ok = get_from(ONE, server, "/", &[]).await;
            assert_eq!(ok.status, 200);
            assert_eq!(ok.body, format!("ip:127.0.0.1 {left}"));
        }
        let refused = get_from(ONE, server, "/", &[]).await;
        assert_eq!(refused.status, 429, "{}", refused.body);
        assert!(refused.headers.contains_key("retry-after"));
        // Another client, another bucket.
        let other = get_from(TWO, server, "/", &[]).await;
        assert_eq!((other.status, other.body.as_str()), (200, "ip:127.0.0.2 4"));
        // A path no route serves spends nothing (route_layer): still a plain 404.
        assert_eq!(get_from(TWO, server, "/nope", &[]).await.status, 404);
        assert_eq!(get_from(TWO, server, "/", &[]).await.body, "ip:127.0.0.2 3");
    })
    .await;
}

#[tokio::test]
async fn without_connect_info_the_app_says_how_to_fix_it_instead_of_sharing_a_bucket() {
    within(async {
        let layer = FloodgateLayer::per_ip(SLOW, 5).unwrap();
        let counter = layer.clone();
        let app = Router::new()
            .route("/", get(|| async { "hello" }))
            .route_layer(layer);
        let server = serve(app, false).await;
        for from in [ONE, TWO] {
            let answer = get_from(from, server, "/", &[]).await;
            assert_eq!(answer.status, 500);
            let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
            assert_eq!(body["error"]["type"], "unidentified");
            let message = body["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("into_make_service_with_connect_info"),
                "{message}"
            );
        }
        assert_eq!(counter.unidentified(), 2);
    })
    .await;
}

#[tokio::test]
async fn two_layers_never_share_a_bucket_by_accident() {
    within(async {
        // Two routes, two two-line layers: each its own store.
        let app = Router::new()
            .route("/a", get(|| async { "a" }))
            .route_layer(FloodgateLayer::per_ip(SLOW, 5).unwrap())
            .merge(
                Router::new()
                    .route("/b", get(|| async { "b" }))
                    .route_layer(FloodgateLayer::per_ip(SLOW, 10).unwrap()),
            );
        let server = serve(app, true).await;
        for _ in 0..5 {
            assert_eq!(get_from(ONE, server, "/a", &[]).await.status, 200);
        }
        assert_eq!(get_from(ONE, server, "/a", &[]).await.status, 429);
        let b = get_from(ONE, server, "/b", &[]).await;
        assert_eq!(b.status, 200);
        assert_eq!(b.headers["ratelimit"], "\"requests\";r=9;t=1000");
    })
    .await;

    // On one shared store, the second layer in the same default namespace is refused when
    // built, whichever way it is built...
    let store = AnyStore::memory();
    let first = PerKey::ip()
        .rate(SLOW)
        .capacity(5)
        .store(store.clone())
        .build()
        .unwrap();
    let e = PerKey::ip()
        .rate(SLOW)
        .capacity(10)
        .store(store.clone())
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("\"per_ip\""), "{e}");
    let pipeline = |burst| {
        let limiter = RequestRateLimiter::builder()
            .plan(Plan::token_bucket("free", SLOW, burst)?)
            .build(store.clone())?;
        Pipeline::builder().limiter(limiter).build()
    };
    let _a = pipeline(5).unwrap();
    let e = pipeline(10).unwrap_err().to_string();
    assert!(
        e.contains("\"request_rate\"") && e.contains(".namespace("),
        "{e}"
    );
    // ...and named namespaces keep them apart.
    let second = PerKey::ip()
        .rate(SLOW)
        .capacity(10)
        .store(store)
        .namespace("route_b")
        .build()
        .unwrap();
    drop((first, second));
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_forwarded_address_is_the_client() {
    within(async {
        // 127.0.0.1 is the proxy; 127.0.0.2 talks to the app directly.
        let proxies = TrustedProxies::new(["127.0.0.1"]).unwrap();
        let layer = PerKey::ip()
            .rate(SLOW)
            .capacity(2)
            .client_address(ClientAddress::forwarded_for(proxies))
            .build()
            .unwrap();
        let app = Router::new()
            .route(
                "/",
                get(|Extension(a): Extension<Admitted>| async move { a.key }),
            )
            .route_layer(layer);
        let server = serve(app, true).await;
        let via_proxy = |client: &'static str| async move {
            get_from(ONE, server, "/", &[("x-forwarded-for", client)]).await
        };
        assert_eq!(via_proxy("203.0.113.9").await.body, "ip:203.0.113.9");
        assert_eq!(via_proxy("203.0.113.9").await.status, 200);
        assert_eq!(via_proxy("203.0.113.9").await.status, 429);
        assert_eq!(via_proxy("198.51.100.7").await.status, 200);
        // A client that is not the proxy cannot pick its address.
        let direct = get_from(TWO, server, "/", &[("x-forwarded-for", "198.51.100.7")]).await;
        assert_eq!(direct.body, "ip:127.0.0.2");
    })
    .await;
}

#[tokio::test]
async fn refusals_can_be_shaped() {
    within(async {
        let layer =
            FloodgateLayer::per_api_key(SLOW, 1)
                .unwrap()
                .on_refusal(|refusal, mut response| {
                    let retry = refusal.retry_after.map_or(0, |d| d.as_secs());
                    *response.body_mut() = Bytes::from(format!("slow down; try in {retry} s"));
                    response
                        .headers_mut()
                        .insert("content-type", HeaderValue::from_static("text/plain"));
                    response
                });
        let app = Router::new()
            .route("/", get(|| async { "hello" }))
            .route_layer(layer);
        let server = serve(app, true).await;
        let key = [("x-api-key", "sk_live_abc")];
        assert_eq!(get_from(ONE, server, "/", &key).await.status, 200);
        // The same key from another address is the same caller.
        let refused = get_from(TWO, server, "/", &key).await;
        assert_eq!(refused.status, 429);
        assert_eq!(refused.headers["content-type"], "text/plain");
        // 1000 s, less the moments the test took.
        let seconds: u64 = refused.body["slow down; try in ".len()..]
            .trim_end_matches(" s")
            .parse()
            .unwrap();
        assert!((990..=1000).contains(&seconds), "{}", refused.body);
        assert!(refused.headers.contains_key("retry-after"));
    })
    .await;
}

#[tokio::test]
async fn the_store_is_chosen_at_run_time_a_real_redis_included() {
    let redis = RedisServer::start();
    within(async {
        for url in ["memory".to_string(), redis.url()] {
            let store = AnyStore::from_url(&url).unwrap();
            let server = serve(two_line_app(Some(store)), true).await;
            for left in (0..5).rev() {
                let ok = get_from(ONE, server, "/", &[]).await;
                assert_eq!(ok.body, format!("ip:127.0.0.1 {left}"), "{url}");
            }
            assert_eq!(get_from(ONE, server, "/", &[]).await.status, 429, "{url}");
            assert_eq!(get_from(TWO, server, "/", &[]).await.status, 200, "{url}");
        }
    })
    .await;
    // The keys are in that Redis, under the layer's namespace (the key in braces: one hash
    // slot per key on a cluster).
    let keys = redis
        .cli(&["--scan", "--pattern", "per_ip:*"])
        .unwrap_or_default();
    assert!(keys.contains("per_ip:{ip:127.0.0.1}"), "{keys}");
}
