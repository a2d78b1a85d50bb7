//! A usage budget in front of a service: each request reserves an estimate of its cost (an LLM
//! call's tokens) from a [`KeyedLimit`], and its response settles the reservation at what the
//! response reports it cost ([`KeyedLimit::reserve`], [`KeyedLimit::settle`]).
//!
//! ```text
//! request ─► Extractor (user) ─► estimate(request head) ─► KeyedLimit::reserve
//!         ─► refused: 429 + Retry-After + JSON, inner not called
//!            admitted: inner service ─► response; the cost read from the response
//!                      ─► settled when its body ends, or is dropped
//! ```
//!
//! - **The cost** is read, first found first: a [`UsageTokens`] extension the handler put in
//!   the response, the usage header (by default `x-usage-tokens`, a decimal count) in the
//!   response's head, or the same header in the body's trailers (for a streamed response,
//!   whose cost is known only at its end). A response that reports none is settled at the
//!   estimate: nothing is charged or given back.
//! - **Settled once**, when the body yields its last frame, or fails, or is dropped (the
//!   client went away): the difference is charged (counted even past the budget, which then
//!   refuses requests until it is paid back) or refunded, in the background
//!   ([`KeyedLimit::settle_detached`]).
//! - **Failing open**: when the store fails, the request goes ahead holding nothing; a request
//!   the extractor cannot place is answered 500, as [`crate::FloodgateLayer`] answers it.
//!
//! ```
//! use axum::{routing::post, Router};
//! use floodgate::algorithm::fixed_window::FixedWindow;
//! use floodgate::limiter::KeyedLimit;
//! use floodgate::store::MemoryStore;
//! use floodgate_tower::TokenBudgetLayer;
//! use std::time::Duration;
//!
//! # async fn chat() -> &'static str { "" }
//! let tokens = KeyedLimit::new(
//!     "tokens",
//!     FixedWindow::new(100_000, Duration::from_secs(60))?,
//!     MemoryStore::new(),
//! )?;
//! // The estimate: the request's max_tokens, sent by the client in a header here.
//! let budget = TokenBudgetLayer::new(tokens, |head| {
//!     head.headers
//!         .get("x-max-tokens")
//!         .and_then(|v| v.to_str().ok()?.parse().ok())
//!         .unwrap_or(4_096)
//! })?;
//! let app: Router = Router::new().route("/v1/chat", post(chat)).route_layer(budget);
//! # let _ = app;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The overshoot of the budget is then at most what the requests in flight at the last
//! admission used beyond their estimates; an estimate that is the request's maximum never
//! overshoots (docs/usage-based-limits.md).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::algorithm::Algorithm;
use floodgate::limiter::{KeyedLimit, Reservation};
use floodgate::store::Store;
use floodgate::{ConfigError, OpKind};
use http::header::{HeaderName, CONTENT_TYPE, RETRY_AFTER};
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::extract::Extractor;
use crate::response::{is_grpc, unidentified_response};

/// The header a response reports its cost in by default.
pub const USAGE_HEADER: &str = "x-usage-tokens";

/// A response's cost, in the budget's units, put in the response's extensions by a handler
/// that knows it when the head is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsageTokens(pub u64);

/// How a request's estimate is made from its head.
type Estimate = dyn Fn(&Parts) -> u64 + Send + Sync;

/// The layer: a budget ([`KeyedLimit`]) and how to estimate, key and read costs. Clones share
/// them. See the [module documentation](self).
pub struct TokenBudgetLayer<S> {
    shared: Arc<Shared<S>>,
}

struct Shared<S> {
    limit: KeyedLimit<S>,
    estimate: Box<Estimate>,
    extractor: Extractor,
    header: HeaderName,
}

impl<S> Clone for TokenBudgetLayer<S> {
    fn clone(&self) -> Self {
        TokenBudgetLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S> fmt::Debug for TokenBudgetLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBudgetLayer")
            .field("header", &self.shared.header)
            .finish_non_exhaustive()
    }
}

impl<S: Store<str, AnyAlgorithm> + 'static> TokenBudgetLayer<S> {
    /// Requests hold `limit`'s budget per user (the default [`Extractor`]: API key, bearer
    /// token, else client address), each reserving `estimate(head)` units.
    ///
    /// A [`ConfigError`] for field `algorithm` when the limit's algorithm cannot settle (it
    /// must take charges and refunds: a fixed window, a token or leaky bucket, GCRA).
    pub fn new(
        limit: KeyedLimit<S>,
        estimate: impl Fn(&Parts) -> u64 + Send + Sync + 'static,
    ) -> Result<Self, ConfigError> {
        let algorithm = limit.algorithm();
        if !(algorithm.supports(OpKind::Charge) && algorithm.supports(OpKind::Refund)) {
            return Err(ConfigError::invalid(
                "algorithm",
                algorithm.name(),
                "a usage budget is settled by charges and refunds: use a fixed window, a \
                 token or leaky bucket, or GCRA",
            ));
        }
        Ok(TokenBudgetLayer {
            shared: Arc::new(Shared {
                limit,
                estimate: Box::new(estimate),
                extractor: Extractor::new(),
                header: HeaderName::from_static(USAGE_HEADER),
            }),
        })
    }

    /// Reads the cost from the header (or trailer) `name` instead of [`USAGE_HEADER`].
    pub fn usage_header(self, name: HeaderName) -> Self {
        self.with(|shared| shared.header = name)
    }

    /// Keys users with `extractor` instead of the default one.
    pub fn extractor(self, extractor: Extractor) -> Self {
        self.with(|shared| shared.extractor = extractor)
    }

    fn with(self, change: impl FnOnce(&mut Shared<S>)) -> Self {
        let mut shared = Arc::try_unwrap(self.shared).unwrap_or_else(|_| {
            unreachable!("the builder methods take the layer before it is cloned")
        });
        change(&mut shared);
        TokenBudgetLayer {
            shared: Arc::new(shared),
        }
    }
}

impl<Inner, S> Layer<Inner> for TokenBudgetLayer<S> {
    type Service = TokenBudget<Inner, S>;

    fn layer(&self, inner: Inner) -> Self::Service {
        TokenBudget {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// The service [`TokenBudgetLayer`] makes.
pub struct TokenBudget<Inner, S> {
    inner: Inner,
    shared: Arc<Shared<S>>,
}

impl<Inner: Clone, S> Clone for TokenBudget<Inner, S> {
    fn clone(&self) -> Self {
        TokenBudget {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<Inner: fmt::Debug, S> fmt::Debug for TokenBudget<Inner, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBudget")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// The response future: reserving, then the inner service's.
pub type BudgetFuture<ResBody, Error> =
    Pin<Box<dyn Future<Output = Result<Response<BudgetBody<ResBody>>, Error>> + Send>>;

impl<Inner, S, ReqBody, ResBody> Service<Request<ReqBody>> for TokenBudget<Inner, S>
where
    Inner: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    Inner::Future: Send,
    Inner::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Body + Send + 'static,
    S: Store<str, AnyAlgorithm> + 'static,
{
    type Response = Response<BudgetBody<ResBody>>;
    type Error = Inner::Error;
    type Future = BudgetFuture<ResBody, Inner::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let shared = Arc::clone(&self.shared);
        // Keep the instance that poll_ready made ready; later requests use the clone.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (parts, body) = request.into_parts();
        let user = match shared.extractor.extract(&parts) {
            Ok(info) => info.user,
            Err(why) => {
                let refused = unidentified_response(&why, is_grpc(&parts.headers));
                return Box::pin(async move { Ok(refused.map(BudgetBody::refusal)) });
            }
        };
        let estimate = (shared.estimate)(&parts);
        let request = Request::from_parts(parts, body);
        Box::pin(async move {
            let reservation = match shared.limit.reserve(&user, estimate).await {
                Ok((_, Some(reservation))) => Some(reservation),
                Ok((decision, None)) => return Ok(refusal(decision.retry_after, estimate)),
                // Fail open: the request goes ahead, holding nothing.
                Err(_) => None,
            };
            let response = inner.call(request).await?;
            let reported = response
                .extensions()
                .get::<UsageTokens>()
                .map(|u| u.0)
                .or_else(|| usage_in(response.headers(), &shared.header));
            let settle = reservation.map(|reservation| Settle {
                shared: shared as Arc<dyn Settles>,
                reservation: Some(reservation),
                actual: reported,
            });
            Ok(response.map(|body| BudgetBody::holding(body, settle)))
        })
    }
}

/// The 429 of a reservation the budget refused.
fn refusal<B>(retry_after: Option<std::time::Duration>, estimate: u64) -> Response<BudgetBody<B>> {
    let body = serde_json::json!({
        "error": {
            "type": "budget_exhausted",
            "message": format!(
                "this request's estimated cost ({estimate}) does not fit in what is left of the \
                 usage budget"
            ),
            "retry_after": retry_after.map(|d| d.as_secs_f64()),
        }
    });
    let bytes = serde_json::to_vec(&body)
        .map(Bytes::from)
        .unwrap_or_default();
    let mut response = Response::new(BudgetBody::refusal(bytes));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(retry) = retry_after {
        let seconds = (retry.as_secs() + u64::from(retry.subsec_nanos() > 0)).max(1);
        headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// The usage header's value in `headers`, if it is a whole number.
fn usage_in(headers: &HeaderMap, name: &HeaderName) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// What settles a reservation, whatever the store.
trait Settles: Send + Sync {
    fn settle(&self, reservation: Reservation, actual: u64);
    fn header(&self) -> &HeaderName;
}

impl<S: Store<str, AnyAlgorithm> + 'static> Settles for Shared<S> {
    fn settle(&self, reservation: Reservation, actual: u64) {
        self.limit.settle_detached(reservation, actual);
    }

    fn header(&self) -> &HeaderName {
        &self.header
    }
}

/// A reservation to settle when the body is over: at the reported cost, else the estimate.
struct Settle {
    shared: Arc<dyn Settles>,
    reservation: Option<Reservation>,
    actual: Option<u64>,
}

impl Settle {
    fn now(&mut self) {
        if let Some(reservation) = self.reservation.take() {
            let actual = self.actual.unwrap_or(reservation.estimate());
            self.shared.settle(reservation, actual);
        }
    }
}

impl Drop for Settle {
    fn drop(&mut self) {
        self.now();
    }
}

pin_project! {
    /// The response body of [`TokenBudget`]: the inner body, settling the request's
    /// reservation when it ends or is dropped (see the [module documentation](self)), or a
    /// refusal's bytes.
    pub struct BudgetBody<B> {
        #[pin]
        body: Option<B>,
        refusal: Option<Bytes>,
        settle: Option<Settle>,
    }
}

impl<B> BudgetBody<B> {
    fn holding(body: B, settle: Option<Settle>) -> Self
    where
        B: Body,
    {
        let mut settle = settle;
        if body.is_end_stream() {
            // Never polled: the request is over now.
            settle.take();
        }
        BudgetBody {
            body: Some(body),
            refusal: None,
            settle,
        }
    }

    fn refusal(bytes: Bytes) -> Self {
        BudgetBody {
            body: None,
            refusal: (!bytes.is_empty()).then_some(bytes),
            settle: None,
        }
    }

    /// Whether this is a refusal's body rather than the inner service's.
    pub fn is_refusal(&self) -> bool {
        self.body.is_none()
    }
}

impl<B> fmt::Debug for BudgetBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BudgetBody")
            .field("refusal", &self.body.is_none())
            .field("settling", &self.settle.is_some())
            .finish()
    }
}

impl<B> Body for BudgetBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let Some(mut body) = this.body.as_pin_mut() else {
            return Poll::Ready(
                this.refusal
                    .take()
                    .map(|d| Ok(Frame::data(B::Data::from(d)))),
            );
        };
        let polled = body.as_mut().poll_frame(cx);
        if let Poll::Ready(ready) = &polled {
            let ended = match ready {
                Some(Ok(frame)) => {
                    if let (Some(trailers), Some(settle)) =
                        (frame.trailers_ref(), this.settle.as_mut())
                    {
                        let reported = usage_in(trailers, settle.shared.header());
                        settle.actual = settle.actual.or(reported);
                    }
                    body.is_end_stream()
                }
                // The end, or an error: the response is over.
                Some(Err(_)) | None => true,
            };
            if ended {
                // Settled as the Settle is dropped.
                this.settle.take();
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.body {
            Some(body) => body.is_end_stream(),
            None => self.refusal.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.body {
            Some(body) => body.size_hint(),
            None => SizeHint::with_exact(self.refusal.as_ref().map_or(0, |d| d.len() as u64)),
        }
    }
}
