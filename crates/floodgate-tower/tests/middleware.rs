//! The middleware over plain tower services, on tokio's paused clock: refusals, leases held
//! for exactly as long as a request is in flight, shadow mode, shared state, fail-open.

mod common;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::limiter::concurrency::ConcurrencyLimiter;
use floodgate::limiter::fleet::FleetShedder;
use floodgate::limiter::request_rate::{Plan, RequestRateLimiter, RequestRateLimiterBuilder};
use floodgate::limiter::utilization::{UtilizationShedder, WorkerGauge};
use floodgate::pipeline::Mode;
use floodgate::pipeline::{Pipeline, Stage};
use floodgate::store::{KeyedOp, Store};
use floodgate::{Decision, Op, StoreError};
use floodgate_tower::{CredentialKey, Extractor, FloodgateLayer, RequestInfo};
use http::{Request, Response};
use http_body_util::{Empty, Full};
use tokio::time::{advance, timeout};
use tower::{Layer, Service, ServiceExt};

/// 5 requests a second, bursts of 5, on the plan "free".
fn rate_limiter<S: Store<str, AnyAlgorithm>>(store: S) -> RequestRateLimiter<S> {
    rate_builder().build(store).unwrap()
}

fn rate_builder() -> RequestRateLimiterBuilder {
    RequestRateLimiter::builder().plan(Plan::token_bucket("free", 5.0, 5).unwrap())
}

fn rate_pipeline(clock: &TokioClock) -> Pipeline<TestStore> {
    Pipeline::builder()
        .limiter(rate_limiter(store(clock)))
        .build()
        .unwrap()
}

/// One request in flight per user; leases outlive every test.
fn concurrency_pipeline(clock: &TokioClock) -> Pipeline<TestStore> {
    Pipeline::builder()
        .limiter(one_in_flight(store(clock)))
        .build()
        .unwrap()
}

fn one_in_flight<S: Store<str, AnyAlgorithm> + 'static>(store: S) -> ConcurrencyLimiter<S> {
    ConcurrencyLimiter::builder()
        .capacity(1)
        .lease_ttl(Duration::from_secs(600))
        .build(store)
        .unwrap()
}

/// The status of one request through `svc` (the response, body included, is dropped).
async fn status<Svc, B>(svc: &Svc, request: Request<Empty<Bytes>>) -> u16
where
    Svc: Service<Request<Empty<Bytes>>, Response = Response<B>> + Clone,
    Svc::Error: std::fmt::Debug,
{
    svc.clone()
        .oneshot(request)
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Polls `future` for one second of tokio time; true if it is still running (in its handler).
async fn runs_for_a_second<F: Future + Unpin>(future: &mut F) -> bool {
    timeout(Duration::from_secs(1), future).await.is_err()
}

#[tokio::test(start_paused = true)]
async fn refuses_with_429_json_and_headers_at_the_right_count() {
    let clock = TokioClock::new();
    let calls = Arc::new(AtomicU64::new(0));
    let mut svc = FloodgateLayer::new(rate_pipeline(&clock)).layer(ok_handler(calls.clone()));

    for left in (0..5).rev() {
        let response = svc
            .ready()
            .await
            .unwrap()
            .call(get("/v1/things", "sk_1"))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let h = response.headers();
        assert_eq!(h["ratelimit-policy"], "\"requests\";q=5;w=1");
        assert_eq!(h["ratelimit"], format!("\"requests\";r={left};t=1"));
        assert!(!h.contains_key("retry-after"));
        assert_eq!(read(response.into_body()).await, "ok");
    }

    let refused = svc.call(get("/v1/things", "sk_1")).await.unwrap();
    assert_eq!(refused.status(), 429);
    let h = refused.headers();
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(h["retry-after"], "1");
    assert_eq!(h["ratelimit-policy"], "\"requests\";q=5;w=1");
    assert_eq!(h["ratelimit"], "\"requests\";r=0;t=1");
    assert!(refused.body().is_refusal());
    let body = json(refused.into_body()).await;
    assert_eq!(
        body,
        serde_json::json!({"error": {
            "type": "rate_limited",
            "message": "plan free allows 5 requests per second; retry in 0.2 s",
            "limiter": "request_rate",
            "retry_after": 0.2,
        }})
    );
    // The handler never saw the refused request.
    assert_eq!(calls.load(Ordering::Relaxed), 5);

    // Another key has its own bucket; the same key waits exactly as told, in tokio's time.
    assert_eq!(status(&svc, get("/v1/things", "sk_2")).await, 200);
    advance(Duration::from_millis(199)).await;
    assert_eq!(status(&svc, get("/v1/things", "sk_1")).await, 429);
    advance(Duration::from_millis(1)).await;
    assert_eq!(status(&svc, get("/v1/things", "sk_1")).await, 200);
}

#[tokio::test(start_paused = true)]
async fn endpoints_cost_what_the_cost_table_says() {
    let clock = TokioClock::new();
    let limiter = rate_builder()
        .endpoint_cost("/v1/search", 5)
        .build(store(&clock))
        .unwrap();
    let pipeline = Pipeline::builder().limiter(limiter).build().unwrap();
    let svc = FloodgateLayer::new(pipeline).layer(ok_handler(Arc::default()));
    assert_eq!(status(&svc, get("/v1/search", "k")).await, 200);
    // The search took the whole burst.
    assert_eq!(status(&svc, get("/v1/things", "k")).await, 429);
}

#[tokio::test(start_paused = true)]
async fn the_fleet_shedder_refuses_with_503_and_keeps_room_for_critical_routes() {
    let clock = TokioClock::new();
    // Two places, half kept for critical requests: one non-critical request at a time.
    let fleet = FleetShedder::builder()
        .capacity(2)
        .reserved_for_critical(0.5)
        .lease_ttl(Duration::from_secs(600))
        .build(store(&clock))
        .unwrap();
    let pipeline = Pipeline::builder().limiter(fleet).build().unwrap();
    let layer =
        FloodgateLayer::new(pipeline).extractor(Extractor::new().critical_route("/v1/charges"));
    let svc = layer.layer(slow_handler(10));

    let mut report = Box::pin(svc.clone().oneshot(get("/v1/reports", "a")));
    assert!(runs_for_a_second(&mut report).await);

    let shed = svc.clone().oneshot(get("/v1/reports", "b")).await.unwrap();
    assert_eq!(shed.status(), 503);
    assert_eq!(shed.headers()["retry-after"], "1");
    assert!(!shed.headers().contains_key("ratelimit"));
    let body = json(shed.into_body()).await;
    assert_eq!(body["error"]["type"], "overloaded");
    assert_eq!(body["error"]["limiter"], "fleet");
    assert_eq!(body["error"]["retry_after"], 1.0);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("critical"));

    assert_eq!(status(&svc, post("/v1/charges", "b")).await, 200);
    assert_eq!(layer.pipeline().stage("fleet").unwrap().stats().refused, 1);
    // Once the report is over (body dropped), there is room again.
    drop(report.await.unwrap());
    assert_eq!(status(&svc, get("/v1/reports", "b")).await, 200);
}

#[tokio::test(start_paused = true)]
async fn leases_are_held_while_the_handler_runs_and_returned_after_the_body_is_consumed() {
    let clock = TokioClock::new();
    let gauge = Arc::new(WorkerGauge::new(8).unwrap());
    let layer = FloodgateLayer::new(concurrency_pipeline(&clock)).worker_gauge(gauge.clone());
    let svc = layer.layer(slow_handler(10));

    let mut first = Box::pin(svc.clone().oneshot(get("/", "alice")));
    assert!(runs_for_a_second(&mut first).await);
    assert_eq!(gauge.busy(), 1);
    // alice's one place is taken while her handler runs; bob is not affected.
    assert_eq!(status(&svc, get("/", "alice")).await, 429);
    assert_eq!(status(&svc, get("/", "bob")).await, 200);
    assert_eq!(
        gauge.busy(),
        1,
        "finished and refused requests leave the gauge"
    );

    // The handler has answered, but the body is not sent yet: still in flight.
    let response = first.await.unwrap();
    assert!(response.body().is_holding());
    assert_eq!(status(&svc, get("/", "alice")).await, 429);
    assert_eq!(gauge.busy(), 1);

    assert_eq!(read(response.into_body()).await, "done");
    assert_eq!(gauge.busy(), 0);
    assert_eq!(status(&svc, get("/", "alice")).await, 200);
}

#[tokio::test(start_paused = true)]
async fn leases_are_returned_when_the_body_is_dropped_unread() {
    let clock = TokioClock::new();
    let svc = FloodgateLayer::new(concurrency_pipeline(&clock)).layer(slow_handler(10));
    let response = svc.clone().oneshot(get("/", "alice")).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(status(&svc, get("/", "alice")).await, 429);
    drop(response);
    assert_eq!(status(&svc, get("/", "alice")).await, 200);
}

#[tokio::test(start_paused = true)]
async fn leases_are_returned_when_the_response_future_is_dropped() {
    let clock = TokioClock::new();
    let gauge = Arc::new(WorkerGauge::new(8).unwrap());
    let svc = FloodgateLayer::new(concurrency_pipeline(&clock))
        .worker_gauge(gauge.clone())
        .layer(slow_handler(10));
    let mut first = Box::pin(svc.clone().oneshot(get("/", "alice")));
    assert!(runs_for_a_second(&mut first).await);
    assert_eq!(status(&svc, get("/", "alice")).await, 429);
    // The client goes away mid-handler.
    drop(first);
    assert_eq!(gauge.busy(), 0);
    assert_eq!(status(&svc, get("/", "alice")).await, 200);
}

#[tokio::test(start_paused = true)]
async fn a_shadow_mode_limiter_lets_everything_through_and_counts() {
    let clock = TokioClock::new();
    let pipeline = Pipeline::builder()
        .stage(Stage::new(rate_limiter(store(&clock))).mode(Mode::Shadow))
        .build()
        .unwrap();
    let layer = FloodgateLayer::new(pipeline);
    let svc = layer.layer(ok_handler(Arc::default()));
    for _ in 0..8 {
        let response = svc.clone().oneshot(get("/", "k")).await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(response.headers().contains_key("ratelimit"));
    }
    let stats = layer.pipeline().stats();
    assert_eq!(stats[0].shadow_refused, 3);
    assert_eq!(stats[0].refused, 0);
    // Switched to enforce while serving.
    assert!(layer.pipeline().set_mode("request_rate", Mode::Enforce));
    assert_eq!(status(&svc, get("/", "k")).await, 429);
}

#[tokio::test(start_paused = true)]
async fn clones_and_every_service_of_a_layer_share_the_limits() {
    let clock = TokioClock::new();
    let layer = FloodgateLayer::new(rate_pipeline(&clock));
    let (a_calls, b_calls) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let route_a = layer.layer(ok_handler(a_calls.clone()));
    let route_b = layer.clone().layer(ok_handler(b_calls.clone()));
    for i in 0..5 {
        // A fresh clone per request, as axum and hyper make them.
        let code = if i % 2 == 0 {
            status(&route_a.clone(), get("/a", "k")).await
        } else {
            status(&route_b.clone(), get("/b", "k")).await
        };
        assert_eq!(code, 200);
    }
    assert_eq!(status(&route_a, get("/a", "k")).await, 429);
    assert_eq!(status(&route_b, get("/b", "k")).await, 429);
    assert_eq!(
        (
            a_calls.load(Ordering::Relaxed),
            b_calls.load(Ordering::Relaxed)
        ),
        (3, 2)
    );
}

#[tokio::test(start_paused = true)]
async fn grpc_requests_are_refused_with_a_grpc_status() {
    let clock = TokioClock::new();
    let svc = FloodgateLayer::new(rate_pipeline(&clock)).layer(ok_handler(Arc::default()));
    let grpc = || {
        Request::post("/pkg.Service/Method")
            .header("content-type", "application/grpc")
            .header("x-api-key", "k")
            .body(Empty::new())
            .unwrap()
    };
    for _ in 0..5 {
        assert_eq!(status(&svc, grpc()).await, 200);
    }
    let refused = svc.clone().oneshot(grpc()).await.unwrap();
    assert_eq!(refused.status(), 200);
    let h = refused.headers();
    assert_eq!(h["content-type"], "application/grpc");
    assert_eq!(h["grpc-status"], "8");
    assert!(h["grpc-message"]
        .to_str()
        .unwrap()
        .starts_with("plan free allows 5 requests per second"));
    assert_eq!(h["retry-after"], "1");
    assert!(read(refused.into_body()).await.is_empty());
}

/// A store that records the keys it is asked about.
struct Recording(TestStore, Arc<std::sync::Mutex<Vec<String>>>);

impl Store<str, AnyAlgorithm> for Recording {
    async fn apply(
        &self,
        algorithm: &AnyAlgorithm,
        key: &str,
        op: Op,
    ) -> Result<Decision, StoreError> {
        self.1.lock().unwrap().push(key.to_string());
        self.0.apply(algorithm, key, op).await
    }

    async fn apply_many(
        &self,
        requests: &[KeyedOp<'_, str, AnyAlgorithm>],
    ) -> Result<Vec<Decision>, StoreError> {
        self.1
            .lock()
            .unwrap()
            .extend(requests.iter().map(|r| r.key.to_string()));
        self.0.apply_many(requests).await
    }

    fn apply_detached(&self, algorithm: &AnyAlgorithm, key: &str, op: Op) {
        self.1.lock().unwrap().push(key.to_string());
        self.0.apply_detached(algorithm, key, op);
    }
}

#[tokio::test(start_paused = true)]
async fn credentials_never_reach_the_store_or_a_refusal() {
    const SECRET: &str = "sk_live_secret";
    let clock = TokioClock::new();
    let keys = Arc::new(std::sync::Mutex::new(Vec::new()));
    let recording = Arc::new(Recording(store(&clock), keys.clone()));
    let pipeline = Pipeline::builder()
        .limiter(rate_limiter(recording.clone()))
        .limiter(one_in_flight(recording))
        .build()
        .unwrap();
    let mac_key = CredentialKey::from_bytes([7; 32]);
    let user = mac_key.user_key(SECRET);
    let layer = FloodgateLayer::new(pipeline).extractor(Extractor::new().credential_key(mac_key));
    let svc = layer.layer(slow_handler(10));
    let bearer = || {
        Request::get("/")
            .header("authorization", format!("Bearer {SECRET}"))
            .body(Empty::new())
            .unwrap()
    };

    // The bearer token and the same value as an API key are one user: the second request
    // finds the first one's place taken.
    let mut first = Box::pin(svc.clone().oneshot(bearer()));
    assert!(runs_for_a_second(&mut first).await);
    let refused = svc.clone().oneshot(get("/", SECRET)).await.unwrap();
    assert_eq!(refused.status(), 429);
    let body = String::from_utf8(read(refused.into_body()).await.to_vec()).unwrap();
    assert!(!body.contains(SECRET), "{body}");
    assert!(!body.contains(&user), "{body}");
    let shown = format!("user {}... already has 1 requests in flight", &user[..12]);
    assert!(body.contains(&shown), "{body}");

    // A 429 from the request rate limiter, through the bearer token.
    drop(first);
    let quick = layer.layer(ok_handler(Arc::default()));
    let mut last = 0;
    for _ in 0..6 {
        let response = quick.clone().oneshot(bearer()).await.unwrap();
        last = response.status().as_u16();
        let body = read(response.into_body()).await;
        assert!(!String::from_utf8_lossy(&body).contains(SECRET));
    }
    assert_eq!(last, 429);

    // Every key the store saw is the hashed one, in a limiter's namespace.
    let keys = keys.lock().unwrap();
    assert!(!keys.is_empty());
    let namespaced = [
        format!("request_rate:{user}"),
        format!("concurrency:{user}"),
    ];
    assert!(keys.iter().all(|k| namespaced.contains(k)), "{keys:?}");
    // The layer's Debug shows neither the credential nor the MAC key.
    let shown = format!("{layer:?}");
    assert!(
        !shown.contains(SECRET) && !shown.contains("[7, 7"),
        "{shown}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_store_that_answers_later_limits_and_returns_leases_the_same() {
    let clock = TokioClock::new();
    let store = Arc::new(Later(store(&clock)));
    let pipeline = Pipeline::builder()
        .limiter(rate_limiter(store.clone()))
        .limiter(one_in_flight(store))
        .build()
        .unwrap();
    let layer = FloodgateLayer::new(pipeline);
    let (slow, fast) = (
        layer.layer(slow_handler(10)),
        layer.layer(ok_handler(Arc::default())),
    );

    let mut first = Box::pin(slow.oneshot(get("/", "alice")));
    assert!(runs_for_a_second(&mut first).await);
    // (A second at 5/s has refilled alice's bucket: 5 tokens.)
    assert_eq!(status(&fast, get("/", "alice")).await, 429);
    let in_flight = json(
        fast.clone()
            .oneshot(get("/", "alice"))
            .await
            .unwrap()
            .into_body(),
    );
    assert_eq!(in_flight.await["error"]["limiter"], "concurrency");
    drop(first);
    // The rate limiter runs first: the two concurrency refusals took 2 tokens; 3 are left.
    for _ in 0..3 {
        assert_eq!(status(&fast, get("/", "alice")).await, 200);
    }
    let refused = fast.clone().oneshot(get("/", "alice")).await.unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(
        json(refused.into_body()).await["error"]["limiter"],
        "request_rate"
    );
}

#[tokio::test(start_paused = true)]
async fn the_layer_feeds_the_utilization_shedder_with_its_own_in_flight_count() {
    let clock = TokioClock::new();
    // One worker: one slow request in flight is full utilization.
    let gauge = Arc::new(WorkerGauge::new(1).unwrap());
    let shedder = UtilizationShedder::builder()
        .seed(7)
        .source(gauge.clone())
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap();
    let pipeline: Pipeline<TestStore> = Pipeline::builder().limiter(shedder).build().unwrap();
    let layer = FloodgateLayer::new(pipeline)
        .worker_gauge(gauge.clone())
        .extractor(Extractor::new().critical_route("/v1/charges"));
    let slow = layer.layer(slow_handler(1_000));
    let fast = layer.layer(ok_handler(Arc::default()));

    let mut stuck = Box::pin(slow.oneshot(get("/v1/export", "a")));
    assert!(runs_for_a_second(&mut stuck).await);
    let test_mode = || {
        Request::get("/v1/things")
            .header("x-test-mode", "true")
            .body(Empty::new())
            .unwrap()
    };
    for second in 0..80 {
        let code = status(&fast, test_mode()).await;
        if second < 28 {
            assert_eq!(code, 200, "shed after only {second} s");
        }
        advance(Duration::from_secs(1)).await;
    }
    // 50 s into shedding, test-mode traffic is all shed; critical never; POST not yet.
    let shed = fast.clone().oneshot(test_mode()).await.unwrap();
    assert_eq!(shed.status(), 503);
    assert_eq!(
        json(shed.into_body()).await["error"]["limiter"],
        "utilization"
    );
    assert_eq!(status(&fast, post("/v1/charges", "a")).await, 200);
    assert_eq!(status(&fast, post("/v1/refunds", "a")).await, 200);
    drop(stuck);
    assert_eq!(gauge.busy(), 0);
}

/// A store with a bug: it panics, at once or after a scheduler turn (`.0`).
struct Buggy(bool);

fn bug() {
    panic!("a bug in the store");
}

impl Store<str, AnyAlgorithm> for Buggy {
    async fn apply(&self, _: &AnyAlgorithm, _: &str, _: Op) -> Result<Decision, StoreError> {
        if self.0 {
            tokio::task::yield_now().await;
        }
        bug();
        Err(StoreError::Unavailable("not reached".into()))
    }

    async fn apply_many(
        &self,
        _: &[KeyedOp<'_, str, AnyAlgorithm>],
    ) -> Result<Vec<Decision>, StoreError> {
        bug();
        Ok(Vec::new())
    }
}

#[tokio::test(start_paused = true)]
async fn failures_of_the_middleware_let_requests_through() {
    let calls = Arc::new(AtomicU64::new(0));
    // A panic in the pipeline, inside `call` (ready at once) and inside the future (later).
    for later in [false, true] {
        let pipeline = Pipeline::builder()
            .limiter(rate_limiter(Buggy(later)))
            .build()
            .unwrap();
        let layer = FloodgateLayer::new(pipeline);
        let svc = layer.layer(ok_handler(calls.clone()));
        assert_eq!(status(&svc, get("/", "k")).await, 200);
        assert_eq!(layer.fail_opens(), 1);
    }

    let clock = TokioClock::new();
    let layer = FloodgateLayer::new(rate_pipeline(&clock)).extractor(Extractor::custom(|parts| {
        assert!(parts.uri.path() != "/boom", "a bug in the extractor");
        Ok(RequestInfo::new(
            "u",
            "free",
            floodgate::limiter::Priority::Get,
        ))
    }));
    let svc = layer.layer(ok_handler(calls.clone()));
    assert_eq!(status(&svc, get("/boom", "k")).await, 200);
    assert_eq!(status(&svc, get("/fine", "k")).await, 200);
    assert_eq!(layer.fail_opens(), 1);
    assert_eq!(calls.load(Ordering::Relaxed), 4);
}

#[tokio::test(start_paused = true)]
async fn inner_errors_pass_through_and_give_the_places_back() {
    let clock = TokioClock::new();
    let layer = FloodgateLayer::new(concurrency_pipeline(&clock));
    let failing = layer.layer(tower::service_fn(|_: Request<Empty<Bytes>>| async {
        Err::<Response<Full<Bytes>>, &'static str>("handler failed")
    }));
    let err = failing
        .clone()
        .oneshot(get("/", "alice"))
        .await
        .unwrap_err();
    assert_eq!(err, "handler failed");
    let ok = layer.layer(ok_handler(Arc::default()));
    assert_eq!(status(&ok, get("/", "alice")).await, 200);
}

/// An adaptive concurrency stage learns from the latency the middleware measures itself: from
/// its call to the end of the response body, on the layer's clock (tokio's paused one here).
#[tokio::test(start_paused = true)]
async fn an_adaptive_stage_learns_the_latency_the_middleware_measures() {
    use floodgate::limiter::adaptive::{Adaptive, AdaptiveConcurrencyLimiter, Vegas};
    let clock = TokioClock::new();
    let adaptive = AdaptiveConcurrencyLimiter::builder()
        .algorithm(Adaptive::Vegas(Vegas::default()))
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap();
    let pipeline: Pipeline<TestStore> = Pipeline::builder().limiter(adaptive).build().unwrap();
    let layer = FloodgateLayer::new(pipeline).clock(Arc::new(clock));
    let svc = layer.layer(slow_handler(3));
    let response = svc.clone().oneshot(get("/", "k1")).await.unwrap();
    let estimate = || match layer.pipeline().stages().next().unwrap().limiter() {
        floodgate::pipeline::Limiter::AdaptiveConcurrency(l) => l.estimate(),
        other => panic!("{other:?}"),
    };
    assert_eq!(estimate().in_flight, 1, "held while the body is unread");
    advance(Duration::from_secs(2)).await;
    read(response.into_body()).await;
    let e = estimate();
    assert_eq!((e.in_flight, e.samples), (0, 1));
    assert_eq!(
        e.last_rtt,
        Duration::from_secs(5),
        "3 s in the handler, 2 s until read"
    );
    // A response dropped unread teaches nothing.
    drop(svc.clone().oneshot(get("/", "k1")).await.unwrap());
    assert_eq!(estimate().samples, 1);
}

/// Attributes read by the extractor reach scoped stages: writes (`POST`) are limited per
/// organisation (the `x-org` header), reads are not counted, and a write without the header
/// is refused with 400 naming the attribute.
#[tokio::test(start_paused = true)]
async fn extracted_attributes_reach_scoped_stages() {
    use floodgate::algorithm::fixed_window::FixedWindow;
    use floodgate::pipeline::scope::{Field, KeyTemplate, Pattern, When};
    use floodgate::pipeline::Scope;
    use floodgate_tower::AttributeSource;
    let clock = TokioClock::new();
    let window = FixedWindow::new(2, Duration::from_secs(3600)).unwrap();
    let writes = RequestRateLimiter::builder()
        .namespace("org_writes")
        .plan(Plan::limit("org_writes", window.into()).unwrap())
        .default_plan("org_writes")
        .build(store(&clock))
        .unwrap();
    let when = When::always().field(
        Field::parse("attributes.method").unwrap(),
        vec![Pattern::new("POST")],
    );
    let stage = Stage::new(writes).scope(
        Scope::all()
            .when(when)
            .key(KeyTemplate::parse("{attributes.org}").unwrap()),
    );
    let pipeline: Pipeline<TestStore> = Pipeline::builder().stage(stage).build().unwrap();
    let extractor = Extractor::new()
        .attribute("method", AttributeSource::Method)
        .attribute(
            "org",
            AttributeSource::Header(http::HeaderName::from_static("x-org")),
        );
    let svc = FloodgateLayer::new(pipeline)
        .extractor(extractor)
        .layer(ok_handler(Arc::new(AtomicU64::new(0))));
    let with_org = |mut request: Request<Empty<Bytes>>, org: &str| {
        request.headers_mut().insert("x-org", org.parse().unwrap());
        request
    };
    for key in ["k1", "k2"] {
        assert_eq!(
            status(&svc, with_org(post("/orders", key), "acme")).await,
            200
        );
    }
    assert_eq!(
        status(&svc, with_org(post("/orders", "k3"), "acme")).await,
        429
    );
    assert_eq!(
        status(&svc, with_org(get("/orders", "k3"), "acme")).await,
        200
    );
    assert_eq!(
        status(&svc, with_org(post("/orders", "k3"), "globex")).await,
        200
    );
    assert_eq!(status(&svc, post("/orders", "k3")).await, 400);
}
