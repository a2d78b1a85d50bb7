//! [`TokenBudget`]: the service, and the `tower::Layer` that makes it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::store::Store;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::Body;
use tower::{Layer, Service};

use super::body::{usage_in, BudgetBody, Settle, Settles};
use super::layer::{Shared, TokenBudgetLayer};
use super::UsageTokens;
use crate::response::{is_grpc, unidentified_response};

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
