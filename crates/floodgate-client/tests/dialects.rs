//! The layer against real servers on loopback: the example's limited server (one path family
//! per dialect, and hostile fields), and Floodgate's own middleware in front of a hyper
//! service. Client and servers share one manual clock: the layer's waits move it, so pacing
//! for seconds takes milliseconds and every count below is exact.

#[path = "../examples/limited_server/server.rs"]
mod server;

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
use floodgate::pipeline::Pipeline;
use floodgate::store::MemoryStore;
use floodgate::{Clock, ManualClock, Nanos};
use floodgate_client::{
    LocalRefusal, ManualTimer, PoliteError, PoliteLayer, ReqwestService, Retryable,
};
use floodgate_tower::FloodgateLayer;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use server::LimitedServer;
use tower::{Layer, Service, ServiceExt};

/// A manual clock at an instant half-way through a second (fixed windows are epoch seconds).
fn clock() -> ManualClock {
    ManualClock::new(Nanos::from_millis(1_700_000_000_500))
}

fn loopback() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

type HyperClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

fn hyper_client() -> HyperClient {
    Client::builder(TokioExecutor::new()).build_http()
}

fn layer(clock: &ManualClock) -> PoliteLayer {
    PoliteLayer::builder()
        .timer(Arc::new(ManualTimer::new(clock.clone())))
        .max_wait(Duration::from_secs(5))
        .seed(7)
        .build()
        .unwrap()
}

/// A layer without the CUBIC rate, and with adaptive throttling only if `throttle`: the tests of
/// retries and of throttling alone.
fn unadaptive_layer(clock: &ManualClock, throttle: bool) -> PoliteLayer {
    PoliteLayer::builder()
        .timer(Arc::new(ManualTimer::new(clock.clone())))
        .adaptive_rate(false, 0.7, 0.4)
        .adaptive_throttle(throttle, 2.0, Duration::from_secs(120))
        .seed(3)
        .build()
        .unwrap()
}

fn get(url: &str) -> Request<Full<Bytes>> {
    Request::get(url).body(Full::default()).unwrap()
}

/// Sends `n` requests one after another; returns the statuses of the final answers.
async fn send_sequentially<S>(client: &mut S, url: &str, n: usize) -> Vec<StatusCode>
where
    S: Service<
        Request<Full<Bytes>>,
        Response = Response<hyper::body::Incoming>,
        Error = PoliteError,
    >,
{
    let mut statuses = Vec::with_capacity(n);
    for _ in 0..n {
        let response = client.ready().await.unwrap().call(get(url)).await.unwrap();
        statuses.push(response.status());
        let _ = response.into_body().collect().await;
    }
    statuses
}

#[tokio::test]
async fn ietf_and_x_ratelimit_fields_keep_the_client_under_the_limit() {
    for family in ["ietf", "x"] {
        let clock = clock();
        let server = LimitedServer::start(loopback(), 50, Arc::new(clock.clone()))
            .await
            .unwrap();
        let layer = layer(&clock);
        let state = layer.state();
        let mut client = layer.layer(hyper_client());
        let start = clock.now();
        let statuses = send_sequentially(&mut client, &server.url(family), 300).await;
        assert!(statuses.iter().all(|s| *s == StatusCode::OK), "{family}");
        assert_eq!(server.counts(family), (300, 0), "{family}: nothing refused");
        // 300 requests at 50/s with a burst of 50 take at least 5 s of (manual) time, and the
        // client did not dawdle: under 7 s.
        let took = clock.now().saturating_since(start);
        assert!(
            took >= Duration::from_secs(4) && took < Duration::from_secs(7),
            "{family}: {took:?}"
        );
        let snapshot = &state.snapshot()[0];
        assert_eq!(
            snapshot.dialect,
            Some(if family == "x" { "x-ratelimit" } else { "ietf" })
        );
        assert_eq!(snapshot.policies[0].limit, Some(50));
        assert!(!snapshot.adaptive);
        let totals = state.totals();
        assert_eq!((totals.sent, totals.throttled), (300, 0));
        // Held back at least once a second after the first burst.
        assert!(totals.local_waits >= 4, "{totals:?}");
    }
}

#[tokio::test]
async fn concurrent_callers_share_one_pacer_and_are_not_refused() {
    let clock = clock();
    let server = LimitedServer::start(loopback(), 50, Arc::new(clock.clone()))
        .await
        .unwrap();
    let layer = layer(&clock);
    let client = layer.layer(hyper_client());
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mut client = client.clone();
        let url = server.url("ietf");
        tasks.push(tokio::spawn(async move {
            send_sequentially(&mut client, &url, 25).await
        }));
    }
    for task in tasks {
        assert!(task.await.unwrap().iter().all(|s| *s == StatusCode::OK));
    }
    assert_eq!(server.counts("ietf"), (200, 0));
}

#[tokio::test]
async fn retry_after_alone_and_no_fields_at_all_keep_refusals_rare() {
    for (family, bound) in [("retry-after", 0.10), ("none", 0.15)] {
        let clock = clock();
        let server = LimitedServer::start(loopback(), 50, Arc::new(clock.clone()))
            .await
            .unwrap();
        let layer = layer(&clock);
        let state = layer.state();
        let mut client = layer.layer(hyper_client());
        let statuses = send_sequentially(&mut client, &server.url(family), 500).await;
        let (allowed, refused) = server.counts(family);
        let totals = state.totals();
        // Every request on the wire is one the server answered, and the counts agree.
        assert_eq!(totals.sent, allowed + refused, "{family}");
        assert_eq!(totals.throttled, refused, "{family}");
        assert!(
            (refused as f64) <= bound * totals.sent as f64,
            "{family}: {refused} refused of {} sent",
            totals.sent
        );
        let ok = statuses.iter().filter(|s| **s == StatusCode::OK).count();
        assert!(ok >= 480, "{family}: {ok} succeeded");
        let snapshot = &state.snapshot()[0];
        assert!(snapshot.adaptive, "{family}");
        assert!(snapshot.send_rate.is_some(), "{family}: CUBIC found a rate");
    }
}

#[tokio::test]
async fn hostile_fields_never_stall_the_client_beyond_max_wait() {
    let max_wait = Duration::from_millis(200);
    for kind in ["huge", "negative", "far-date", "garbage", "forever"] {
        let clock = clock();
        let server = LimitedServer::start(loopback(), 50, Arc::new(clock.clone()))
            .await
            .unwrap();
        let layer = PoliteLayer::builder()
            .timer(Arc::new(ManualTimer::new(clock.clone())))
            .max_wait(max_wait)
            .build()
            .unwrap();
        let mut client = layer.layer(hyper_client());
        let url = format!("{}/{kind}", server.url("hostile"));
        for _ in 0..5 {
            let start = clock.now();
            let outcome = client.ready().await.unwrap().call(get(&url)).await;
            match outcome {
                Ok(response) => assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS),
                Err(PoliteError::Refused(_)) => {}
                Err(e) => panic!("{kind}: {e}"),
            }
            // Each of the 3 attempts waits at most max_wait to be admitted and at most
            // max_wait of backoff.
            let took = clock.now().saturating_since(start);
            assert!(took <= max_wait * 6, "{kind}: {took:?}");
        }
    }
}

#[tokio::test]
async fn a_long_wait_fails_fast_with_a_local_refusal() {
    let clock = clock();
    let server = LimitedServer::start(loopback(), 50, Arc::new(clock.clone()))
        .await
        .unwrap();
    let layer = layer(&clock);
    let mut client = layer.layer(hyper_client());
    let url = format!("{}/forever", server.url("hostile"));
    // The first answer says: nothing for a day.
    let first = client.ready().await.unwrap().call(get(&url)).await.unwrap();
    assert_eq!(first.status(), StatusCode::TOO_MANY_REQUESTS);
    let before = server.counts("hostile");
    let start = clock.now();
    let err = client
        .ready()
        .await
        .unwrap()
        .call(get(&url))
        .await
        .unwrap_err();
    match err.refusal() {
        Some(LocalRefusal::WouldWait { wait, .. }) => assert!(*wait > Duration::from_secs(3600)),
        other => panic!("{other:?}"),
    }
    assert_eq!(clock.now(), start, "failing fast does not wait");
    assert_eq!(server.counts("hostile"), before, "nothing was sent");
}

#[tokio::test]
async fn only_requests_safe_to_retry_are_retried() {
    let clock = clock();
    let server = LimitedServer::start(loopback(), 50, Arc::new(clock.clone()))
        .await
        .unwrap();
    let layer = unadaptive_layer(&clock, false);
    let state = layer.state();
    let mut client = layer.layer(hyper_client());
    let url = format!("{}/garbage", server.url("hostile"));
    let send = |method: Method, marked: bool, key: bool| {
        let mut b = Request::builder().method(method).uri(url.as_str());
        if key {
            b = b.header("idempotency-key", "k-1");
        }
        let mut r = b.body(Full::default()).unwrap();
        if marked {
            r.extensions_mut().insert(Retryable);
        }
        r
    };
    let attempts =
        |before: u64, state: &floodgate_client::ClientState| state.totals().sent - before;
    for (method, marked, key, expected) in [
        (Method::GET, false, false, 3),
        (Method::POST, false, false, 1),
        (Method::POST, true, false, 3),
        (Method::POST, false, true, 3),
        (Method::PATCH, false, false, 1),
        (Method::PUT, false, false, 3),
    ] {
        let before = state.totals().sent;
        let response = client
            .ready()
            .await
            .unwrap()
            .call(send(method.clone(), marked, key))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            attempts(before, &state),
            expected,
            "{method} marked={marked} key={key}"
        );
    }
}

/// A server that refuses everything, with garbage fields: nothing to learn but the refusals.
/// Returns the layer's totals and the local refusals after 1,000 requests, 10 ms apart.
async fn against_a_refusing_server(throttle: bool) -> (floodgate_client::Counters, u64, u64) {
    let clock = clock();
    let server = LimitedServer::start(loopback(), 50, Arc::new(clock.clone()))
        .await
        .unwrap();
    let layer = unadaptive_layer(&clock, throttle);
    let state = layer.state();
    let mut client = layer.layer(hyper_client());
    let url = format!("{}/garbage", server.url("hostile"));
    let mut locally = 0;
    for _ in 0..1000 {
        match client.ready().await.unwrap().call(get(&url)).await {
            Ok(_) => {}
            Err(PoliteError::Refused(LocalRefusal::Throttled { .. })) => locally += 1,
            Err(e) => panic!("{e}"),
        }
        clock.advance(Duration::from_millis(10));
    }
    (state.totals(), locally, server.counts("hostile").1)
}

#[tokio::test]
async fn the_retry_budget_bounds_retries() {
    let (totals, locally, refused) = against_a_refusing_server(false).await;
    assert_eq!(totals.retries, 100, "500 units at 5 a retry: {totals:?}");
    assert!(totals.budget_exhausted > 0);
    assert_eq!(locally, 0);
    assert_eq!(totals.sent, 1000 + 100);
    assert_eq!(refused, totals.sent);
}

#[tokio::test]
async fn adaptive_throttling_stops_hammering_a_refusing_server() {
    let (totals, locally, refused) = against_a_refusing_server(true).await;
    // Once the window holds 20 requests and no accept, almost everything is refused locally;
    // the server still sees a trickle, to notice when it recovers.
    assert!(locally > 900, "{locally}");
    assert!(totals.sent < 100, "{totals:?}");
    // A retry refused locally returns the last answer instead of an error: counted, not seen.
    assert!(totals.refused_locally >= locally);
    assert_eq!(refused, totals.sent);
}

#[tokio::test]
async fn connection_errors_are_retried_even_for_posts() {
    let clock = clock();
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind(loopback()).unwrap();
    let url = format!("http://{}/", closed.local_addr().unwrap());
    drop(closed);
    let layer = layer(&clock);
    let state = layer.state();
    let mut client = layer.layer(hyper_client());
    let request = Request::post(url.as_str()).body(Full::default()).unwrap();
    let err = client
        .ready()
        .await
        .unwrap()
        .call(request)
        .await
        .unwrap_err();
    assert!(matches!(err, PoliteError::Service(_)), "{err}");
    let totals = state.totals();
    assert_eq!((totals.sent, totals.errors, totals.retries), (3, 3, 2));
}

#[tokio::test]
async fn reqwest_through_the_adapter() {
    let clock = clock();
    let server = LimitedServer::start(loopback(), 20, Arc::new(clock.clone()))
        .await
        .unwrap();
    let layer = layer(&clock);
    let state = layer.state();
    let mut client = layer.layer(ReqwestService::new(reqwest::Client::new()));
    for _ in 0..60 {
        let request = Request::get(server.url("x")).body(Bytes::new()).unwrap();
        let response = client.ready().await.unwrap().call(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    assert_eq!(server.counts("x"), (60, 0));
    assert_eq!(state.snapshot()[0].dialect, Some("x-ratelimit"));
}

/// Floodgate's own middleware (a request-rate limiter of 20/s with bursts of 20) in front of a
/// hyper service, on the same manual clock.
#[tokio::test]
async fn floodgate_middleware_is_never_refused_by_a_polite_client() {
    let clock = clock();
    let limiter = RequestRateLimiter::builder()
        .plan(Plan::token_bucket("basic", 20.0, 20).unwrap())
        .default_plan("basic")
        .build(MemoryStore::builder().clock(clock.clone()).build().unwrap())
        .unwrap();
    let pipeline = Pipeline::builder().limiter(limiter).build().unwrap();
    let app = FloodgateLayer::new(pipeline).layer(tower::service_fn(
        |_req: Request<hyper::body::Incoming>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
        },
    ));
    let listener = tokio::net::TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            // hyper records no peer address: the accept loop gives the middleware its own.
            let app = tower::ServiceExt::map_request(
                app.clone(),
                move |mut request: Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(peer);
                    request
                },
            );
            tokio::spawn(async move {
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    let layer = layer(&clock);
    let state = layer.state();
    let mut client = layer.layer(hyper_client());
    let statuses = send_sequentially(&mut client, &format!("http://{addr}/v1/things"), 120).await;
    assert!(statuses.iter().all(|s| *s == StatusCode::OK));
    let totals = state.totals();
    assert_eq!((totals.sent, totals.throttled), (120, 0));
    let snapshot = &state.snapshot()[0];
    assert_eq!(snapshot.dialect, Some("ietf"));
    assert_eq!(snapshot.policies[0].limit, Some(20));
}
