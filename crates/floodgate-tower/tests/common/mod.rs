//! What the middleware tests share: a floodgate clock that follows tokio's (paused) clock,
//! stores on it, handlers, and small request helpers.
#![allow(dead_code)] // each test binary uses a different part

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floodgate::algorithm::spec::{AnyAlgorithm, AnyState};
use floodgate::store::{Key, KeyedOp, MemoryStore, Store};
use floodgate::{Clock, Decision, ManualClock, Nanos, Op, StoreError};
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};

/// A floodgate [`Clock`] over tokio's clock: under `start_paused` it moves only when tokio's
/// time does (`tokio::time::advance`, or auto-advance while every task sleeps).
#[derive(Clone, Debug)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    /// Standing at 1000 s now; must be made inside the runtime.
    pub fn new() -> Self {
        TokioClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Nanos {
        Nanos::from_secs(1_000).saturating_add(self.origin.elapsed())
    }
}

/// The memory store the limiters use, on tokio's clock.
pub type TestStore = MemoryStore<Key, AnyState, TokioClock>;

pub fn store(clock: &TokioClock) -> TestStore {
    MemoryStore::builder().clock(clock.clone()).build().unwrap()
}

/// The memory store on a manual clock: for tests over real sockets, during which tokio's
/// paused clock would jump ahead whenever every task waits on a socket.
pub type ManualStore = MemoryStore<Key, AnyState, ManualClock>;

pub fn manual_store(clock: &ManualClock) -> ManualStore {
    MemoryStore::builder().clock(clock.clone()).build().unwrap()
}

/// For tests over real sockets: the plan "free", 0.01 requests a second with bursts of 2
/// (announced as `q=2;w=200`, the burst over the 200 s that earn it back), on a manual clock that never moves, so the bucket never refills.
pub fn never_refilling_pipeline() -> floodgate::pipeline::Pipeline<ManualStore> {
    use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
    let clock = ManualClock::new(Nanos::from_secs(1_000));
    let plan = Plan::token_bucket("free", 0.01, 2).unwrap();
    let limiter = RequestRateLimiter::builder()
        .plan(plan)
        .build(manual_store(&clock))
        .unwrap();
    floodgate::pipeline::Pipeline::builder()
        .limiter(limiter)
        .build()
        .unwrap()
}

/// For tests over real sockets: one request in flight per user, on a manual clock.
pub fn one_in_flight_pipeline() -> floodgate::pipeline::Pipeline<ManualStore> {
    use floodgate::limiter::concurrency::ConcurrencyLimiter;
    let clock = ManualClock::new(Nanos::from_secs(1_000));
    let limiter = ConcurrencyLimiter::builder()
        .capacity(1)
        .lease_ttl(Duration::from_secs(600))
        .build(manual_store(&clock))
        .unwrap();
    floodgate::pipeline::Pipeline::builder()
        .limiter(limiter)
        .build()
        .unwrap()
}

/// A store that answers one scheduler turn late, as a remote store would: exercises the
/// middleware's deciding state.
pub struct Later(pub TestStore);

impl Store<str, AnyAlgorithm> for Later {
    async fn apply(
        &self,
        algorithm: &AnyAlgorithm,
        key: &str,
        op: Op,
    ) -> Result<Decision, StoreError> {
        tokio::task::yield_now().await;
        self.0.apply(algorithm, key, op).await
    }

    async fn apply_many(
        &self,
        requests: &[KeyedOp<'_, str, AnyAlgorithm>],
    ) -> Result<Vec<Decision>, StoreError> {
        tokio::task::yield_now().await;
        self.0.apply_many(requests).await
    }

    fn apply_detached(&self, algorithm: &AnyAlgorithm, key: &str, op: Op) {
        self.0.apply_detached(algorithm, key, op);
    }
}

/// A handler answering "ok", counting its calls.
pub fn ok_handler(
    calls: Arc<AtomicU64>,
) -> impl tower::Service<
    Request<Empty<Bytes>>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(move |_req: Request<Empty<Bytes>>| {
        calls.fetch_add(1, Ordering::Relaxed);
        async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("ok")))) }
    })
}

/// A handler that takes `secs` seconds (of tokio time) to answer.
pub fn slow_handler(
    secs: u64,
) -> impl tower::Service<
    Request<Empty<Bytes>>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(move |_req: Request<Empty<Bytes>>| async move {
        tokio::time::sleep(Duration::from_secs(secs)).await;
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("done"))))
    })
}

/// A GET of `path` by API key `key`.
pub fn get(path: &str, key: &str) -> Request<Empty<Bytes>> {
    Request::get(path)
        .header("x-api-key", key)
        .body(Empty::new())
        .unwrap()
}

/// A POST of `path` by API key `key`.
pub fn post(path: &str, key: &str) -> Request<Empty<Bytes>> {
    Request::post(path)
        .header("x-api-key", key)
        .body(Empty::new())
        .unwrap()
}

/// The whole body.
pub async fn read<B>(body: B) -> Bytes
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    body.collect().await.unwrap().to_bytes()
}

/// The body as JSON.
pub async fn json<B>(body: B) -> serde_json::Value
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    serde_json::from_slice(&read(body).await).unwrap()
}
