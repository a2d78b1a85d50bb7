//! [`Floodgate`]: the service that runs the pipeline in front of an inner service.
//!
//! For each request, [`Service::call`]:
//! 1. marks a worker of the layer's gauge busy (if one is configured);
//! 2. extracts the request's [`RequestInfo`](crate::RequestInfo) with the layer's
//!    [`Extractor`](crate::Extractor);
//! 3. evaluates the pipeline. On the memory store the verdict is ready at once and is settled
//!    inside `call`; otherwise the already-ready inner service is moved into the
//!    [`ResponseFuture`] (a clone takes its place) and the verdict is awaited there;
//! 4. refuses (the inner service is not called) or calls the inner service, holding the
//!    verdict's leases and the busy worker until the response body ends or is dropped, and
//!    adding the `RateLimit-Policy` / `RateLimit` fields to the response.
//!
//! The limiter never fails a request: store errors follow the pipeline's failure policy
//! (fail open by default), and a panic in the extractor or the pipeline lets the request
//! through, counted in [`FloodgateLayer::fail_opens`]. Errors are the inner service's.
//! `poll_ready` is the inner service's: the middleware adds no back-pressure of its own.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::limiter::utilization::WorkerGauge;
use floodgate::store::Store;
use http::{Request, Response};
use http_body::Body;
use tower::{Layer, Service};

use super::body::{FloodgateBody, Held, Timer};
use super::future::{poll_verdict, settle, Answer, ResponseFuture, Settled, VerdictFuture};
use super::layer::FloodgateLayer;
use crate::response::{is_grpc, unidentified_response};

/// Runs a Floodgate pipeline before `Inner`. Build it with [`FloodgateLayer`]; clones share
/// the layer's pipeline, extractor, gauge and counter. See the [module documentation](self).
pub struct Floodgate<Inner, S> {
    inner: Inner,
    layer: FloodgateLayer<S>,
}

impl<Inner, S> Layer<Inner> for FloodgateLayer<S> {
    type Service = Floodgate<Inner, S>;

    fn layer(&self, inner: Inner) -> Self::Service {
        Floodgate::new(inner, self.clone())
    }
}

impl<Inner, S> Floodgate<Inner, S> {
    /// `inner` behind `layer`'s pipeline (what [`tower::Layer::layer`] does).
    pub fn new(inner: Inner, layer: FloodgateLayer<S>) -> Self {
        Floodgate { inner, layer }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &Inner {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut Inner {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> Inner {
        self.inner
    }

    /// The layer this service shares its state with.
    pub fn layer(&self) -> &FloodgateLayer<S> {
        &self.layer
    }
}

impl<Inner: Clone, S> Clone for Floodgate<Inner, S> {
    fn clone(&self) -> Self {
        Floodgate {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<Inner: fmt::Debug, S> fmt::Debug for Floodgate<Inner, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Floodgate")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<Inner, S, ReqBody, ResBody> Service<Request<ReqBody>> for Floodgate<Inner, S>
where
    Inner: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: Body,
    S: Store<str, AnyAlgorithm> + 'static,
{
    type Response = Response<FloodgateBody<ResBody>>;
    type Error = Inner::Error;
    type Future = ResponseFuture<Inner, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let layer = self.layer.shared();
        let mut held = Held {
            leases: Vec::new(),
            busy: layer.gauge.as_ref().map(WorkerGauge::enter),
            // Timed only for a stage that learns from latency: two clock reads saved.
            timer: layer
                .pipeline
                .learns_from_latency()
                .then(|| Timer::start(&layer.clock)),
        };
        let (parts, body) = request.into_parts();
        let grpc = is_grpc(&parts.headers);
        let extracted = catch_unwind(AssertUnwindSafe(|| {
            layer.extractor.extract_with(&parts, layer.needs_user)
        }));
        let mut request = Request::from_parts(parts, body);
        let info = match extracted {
            Ok(Ok(info)) => info,
            Ok(Err(why)) => {
                layer.note_unidentified(&why);
                return ResponseFuture::refused(unidentified_response(&why, grpc));
            }
            Err(_) => {
                layer.answers.fail_opens.fetch_add(1, Ordering::Relaxed);
                return ResponseFuture::calling(self.inner.call(request), Vec::new(), held);
            }
        };
        let answer = Answer {
            grpc,
            answers: Arc::clone(&layer.answers),
            user: info.user.clone(),
        };

        let pipeline = Arc::clone(&layer.pipeline);
        let mut verdict: VerdictFuture = Box::pin(async move {
            let attributes = info.attribute_pairs();
            let request = floodgate::pipeline::Request {
                attributes: &attributes,
                ..info.as_request()
            };
            pipeline.evaluate(&request).await
        });
        // The memory store answers at once: settle now and skip cloning the inner service.
        let mut cx = Context::from_waker(Waker::noop());
        match poll_verdict(verdict.as_mut(), &mut cx) {
            Poll::Ready(outcome) => match settle(outcome, &answer) {
                Settled::Refuse(response) => ResponseFuture::refused(response),
                Settled::Admit {
                    leases,
                    fields,
                    admitted,
                } => {
                    held.leases = leases;
                    if let Some(admitted) = admitted {
                        request.extensions_mut().insert(admitted);
                    }
                    ResponseFuture::calling(self.inner.call(request), fields, held)
                }
            },
            Poll::Pending => {
                // Keep the instance that poll_ready made ready; later requests use the clone.
                let clone = self.inner.clone();
                let ready = std::mem::replace(&mut self.inner, clone);
                ResponseFuture::deciding(verdict, ready, request, answer, held)
            }
        }
    }
}
