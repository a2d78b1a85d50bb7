//! The usage budget layer ([`TokenBudgetLayer`]) in front of a service, on the memory store, on
//! a real Redis and on a Redis Cluster (of the test's own): each request reserves its estimate
//! (here from an `x-estimate` header), and its response settles it at the cost it reports, in
//! its head (`x-usage-tokens`), in its body's trailers (a streamed response), or in a
//! [`UsageTokens`] extension; when the body ends or is dropped. A refused reservation is a 429
//! that never reaches the service; a response that reports nothing stands at its estimate; a
//! limit that cannot settle is refused when the layer is built.
//!
//! The budget is read through a second handle on the same named limit. No time passes: the
//! window is a year.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::sliding_log::SlidingLog;
use floodgate::limiter::KeyedLimit;
use floodgate::store::{AnyStore, Store};
use floodgate::Op;
use floodgate_harness::{RedisCluster, RedisServer};
use floodgate_tower::extract::{Extractor, KeyBy};
use floodgate_tower::{TokenBudgetLayer, UsageTokens};
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Empty};
use tower::{Layer, Service, ServiceExt};

const BUDGET: u64 = 1_000;
const YEAR: Duration = Duration::from_secs(365 * 86_400);

/// How the test service reports a response's cost, chosen by the request's `x-report`.
async fn service(request: Request<Empty<Bytes>>) -> Result<Response<Body>, Infallible> {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let used = header("x-used").unwrap_or_default();
    let (mut sender, body) = Body::new(4);
    let mut response = Response::new(body);
    match header("x-report").as_deref() {
        Some("head") => {
            response
                .headers_mut()
                .insert("x-usage-tokens", used.parse().unwrap());
        }
        Some("extension") => {
            response
                .extensions_mut()
                .insert(UsageTokens(used.parse().unwrap()));
        }
        Some("trailers") => {
            // A streamed answer: its cost is known at its end.
            tokio::spawn(async move {
                sender
                    .send_data(Bytes::from_static(b"tokens..."))
                    .await
                    .ok();
                let mut trailers = HeaderMap::new();
                trailers.insert("x-usage-tokens", used.parse().unwrap());
                sender.send_trailers(trailers).await.ok();
            });
            return Ok(response);
        }
        _ => {}
    }
    tokio::spawn(async move {
        sender.send_data(Bytes::from_static(b"done")).await.ok();
    });
    Ok(response)
}

type Body = http_body_util::channel::Channel<Bytes, Infallible>;

/// The user is the `x-user` header, as given, so that the test can read the budget.
fn extractor() -> Extractor {
    Extractor::new().key_by(KeyBy::custom(|parts: &http::request::Parts| {
        Ok(parts.headers["x-user"].to_str().unwrap().to_string())
    }))
}

fn limit(store: AnyStore) -> KeyedLimit<AnyStore> {
    KeyedLimit::new("tokens", FixedWindow::new(BUDGET, YEAR).unwrap(), store).unwrap()
}

fn request(user: &str, estimate: u64, report: &str, used: u64) -> Request<Empty<Bytes>> {
    Request::get("/v1/chat")
        .header("x-user", user)
        .header("x-estimate", estimate.to_string())
        .header("x-report", report)
        .header("x-used", used.to_string())
        .body(Empty::new())
        .unwrap()
}

/// What the budget has counted for `user`, once it is `expected` (a settlement sent to Redis
/// arrives in the background: polled, bounded).
async fn counted<S: Store<str, floodgate::algorithm::spec::AnyAlgorithm>>(
    budget: &KeyedLimit<S>,
    user: &str,
    expected: u64,
) {
    let mut last = 0;
    for _ in 0..5_000 {
        last = BUDGET - budget.check(user, 0).await.unwrap().remaining;
        if last == expected {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the budget counts {last} for {user}, not {expected}");
}

/// One request through `app`.
async fn send<S>(app: &mut S, request: Request<Empty<Bytes>>) -> S::Response
where
    S: Service<Request<Empty<Bytes>>>,
    S::Error: std::fmt::Debug,
{
    app.ready().await.unwrap().call(request).await.unwrap()
}

async fn a_budget_is_reserved_and_settled_by_the_responses(store: AnyStore, user: &str) {
    let layer = TokenBudgetLayer::new(limit(store.clone()), |parts| {
        parts.headers["x-estimate"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    })
    .unwrap()
    .extractor(extractor());
    let mut app = layer.layer(tower::service_fn(service));
    let budget = limit(store);

    // Held while the response streams; settled down to its cost when the body ends.
    let response = send(&mut app, request(user, 600, "head", 250)).await;
    assert_eq!(response.status(), 200);
    counted(&budget, user, 600).await;
    response.into_body().collect().await.unwrap();
    counted(&budget, user, 250).await;

    // A streamed response reports its cost in its trailers: charged above the estimate.
    let response = send(&mut app, request(user, 300, "trailers", 420)).await;
    let read = response.into_body().collect().await.unwrap();
    assert_eq!(read.trailers().unwrap()["x-usage-tokens"], "420");
    counted(&budget, user, 670).await;

    // An extension works too; a response dropped unread is settled all the same.
    let response = send(&mut app, request(user, 100, "extension", 30)).await;
    drop(response);
    counted(&budget, user, 700).await;

    // A response that reports nothing stands at its estimate.
    let response = send(&mut app, request(user, 200, "none", 0)).await;
    response.into_body().collect().await.unwrap();
    counted(&budget, user, 900).await;

    // What does not fit is refused before the service runs, and holds nothing.
    let refused = send(&mut app, request(user, 101, "head", 1)).await;
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    let body = refused.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("budget_exhausted"));
    counted(&budget, user, 900).await;

    // One that fits, and turns out to cost far more: counted in full, past the budget, and
    // then nothing more is admitted, not even a request estimated at 0.
    let response = send(&mut app, request(user, 100, "head", 500)).await;
    response.into_body().collect().await.unwrap();
    let mut over = false;
    for _ in 0..5_000 {
        over = !budget.check(user, 0).await.unwrap().allowed;
        if over {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(over, "the charge past the budget arrived");
    assert_eq!(
        send(&mut app, request(user, 0, "head", 0)).await.status(),
        429
    );
    // 900 + 500 = 1,400, exactly 400 past it: giving 400 back leaves it at the budget, one
    // more below.
    let _ = budget.apply(user, Op::Refund { cost: 400 }).await.unwrap();
    counted(&budget, user, 1_000).await;
    assert!(budget.check(user, 0).await.unwrap().allowed);
    let _ = budget.apply(user, Op::Refund { cost: 1 }).await.unwrap();
    counted(&budget, user, 999).await;
}

#[tokio::test]
async fn responses_settle_their_reservations_in_memory() {
    a_budget_is_reserved_and_settled_by_the_responses(
        AnyStore::from_url("memory").unwrap(),
        "alice",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_settle_their_reservations_on_redis() {
    let server = RedisServer::start();
    let store = AnyStore::from_url(&server.url()).unwrap();
    a_budget_is_reserved_and_settled_by_the_responses(store, "bob").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_settle_their_reservations_on_a_redis_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let store = AnyStore::from_url(&cluster.url()).unwrap();
    for user in ["carol", "dave", "erin"] {
        a_budget_is_reserved_and_settled_by_the_responses(store.clone(), user).await;
    }
}

#[test]
fn a_limit_that_cannot_settle_is_refused_when_the_layer_is_built() {
    let log = KeyedLimit::new(
        "log",
        SlidingLog::new(10, Duration::from_secs(60)).unwrap(),
        AnyStore::from_url("memory").unwrap(),
    )
    .unwrap();
    let refused = TokenBudgetLayer::new(log, |_| 1).unwrap_err();
    assert!(refused.to_string().contains("sliding_log"), "{refused}");
}
