//! [`ResponseFuture`]: decides, then runs the inner service while holding the request's
//! places.
//!
//! The future goes through at most three states: deciding (the pipeline's verdict is being
//! computed; skipped when the verdict was ready in `call`, as it always is on the memory
//! store), calling (the inner service runs, the request's leases and busy worker held by the
//! future) and done. A refusal completes it without calling the inner service. When the inner
//! response arrives, the held places move into its [`FloodgateBody`]; dropping the future at
//! any point before that (a client that went away, a timeout) drops them, which gives them
//! back.
//!
//! A panic while the verdict is computed is caught and the request let through (fail open,
//! counted in [`FloodgateLayer::fail_opens`](crate::FloodgateLayer::fail_opens)); a panic in the
//! inner service is not the middleware's to catch.

use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use floodgate::limiter::Lease;
use floodgate::pipeline::Verdict;
use http::{Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use tower::Service;

use crate::body::{FloodgateBody, Held};
use crate::response::{add_headers, refusal_response};

/// The pipeline's evaluation of one request, owning what it borrows.
pub(crate) type VerdictFuture = Pin<Box<dyn Future<Output = Verdict> + Send>>;

/// Response header fields to add: `(lowercase name, value)`.
pub(crate) type Fields = Vec<(&'static str, String)>;

pin_project! {
    /// The [`Floodgate`](crate::Floodgate) service's future. See the
    /// [module documentation](self).
    pub struct ResponseFuture<Svc, ReqBody>
    where
        Svc: Service<Request<ReqBody>>,
    {
        #[pin]
        state: State<Svc, ReqBody>,
        held: Option<Held>,
    }
}

pin_project! {
    #[project = StateProj]
    #[project_replace = StateOwned]
    enum State<Svc, ReqBody>
    where
        Svc: Service<Request<ReqBody>>,
    {
        Deciding {
            verdict: VerdictFuture,
            service: Svc,
            request: Request<ReqBody>,
            grpc: bool,
            fail_opens: Arc<AtomicU64>,
        },
        Calling {
            #[pin]
            future: Svc::Future,
            fields: Fields,
        },
        Refused {
            response: Response<Bytes>,
        },
        Done,
    }
}

impl<Svc, ReqBody> ResponseFuture<Svc, ReqBody>
where
    Svc: Service<Request<ReqBody>>,
{
    /// Waits for `verdict`, then calls `service` (ready) with `request` or refuses.
    pub(crate) fn deciding(
        verdict: VerdictFuture,
        service: Svc,
        request: Request<ReqBody>,
        grpc: bool,
        fail_opens: Arc<AtomicU64>,
        held: Held,
    ) -> Self {
        ResponseFuture {
            state: State::Deciding {
                verdict,
                service,
                request,
                grpc,
                fail_opens,
            },
            held: Some(held),
        }
    }

    /// The inner service's `future`, whose response gains `fields` and keeps `held`.
    pub(crate) fn calling(future: Svc::Future, fields: Fields, held: Held) -> Self {
        ResponseFuture {
            state: State::Calling { future, fields },
            held: Some(held),
        }
    }

    /// A refusal, ready at once.
    pub(crate) fn refused(response: Response<Bytes>) -> Self {
        ResponseFuture {
            state: State::Refused { response },
            held: None,
        }
    }
}

impl<Svc, ReqBody> fmt::Debug for ResponseFuture<Svc, ReqBody>
where
    Svc: Service<Request<ReqBody>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Deciding { .. } => "deciding",
            State::Calling { .. } => "calling",
            State::Refused { .. } => "refused",
            State::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .field("held", &self.held)
            .finish()
    }
}

impl<Svc, ReqBody, ResBody> Future for ResponseFuture<Svc, ReqBody>
where
    Svc: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: Body,
{
    type Output = Result<Response<FloodgateBody<ResBody>>, Svc::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Deciding { verdict, .. } => {
                    let outcome = ready!(poll_verdict(verdict.as_mut(), cx));
                    let StateOwned::Deciding {
                        mut service,
                        request,
                        grpc,
                        fail_opens,
                        ..
                    } = this.state.as_mut().project_replace(State::Done)
                    else {
                        continue; // not reached: the state was Deciding
                    };
                    match settle(outcome, grpc, &fail_opens) {
                        Settled::Refuse(response) => {
                            *this.held = None;
                            return Poll::Ready(Ok(response.map(FloodgateBody::refusal)));
                        }
                        Settled::Admit { leases, fields } => {
                            if let Some(held) = this.held.as_mut() {
                                held.leases = leases;
                            }
                            let future = service.call(request);
                            this.state.set(State::Calling { future, fields });
                        }
                    }
                }
                StateProj::Calling { future, fields } => {
                    let result = ready!(future.poll(cx));
                    let fields = std::mem::take(fields);
                    let held = this.held.take().filter(|h| !h.is_empty());
                    this.state.set(State::Done);
                    return Poll::Ready(result.map(|response| {
                        let (mut parts, body) = response.into_parts();
                        add_headers(&mut parts.headers, &fields, false);
                        Response::from_parts(parts, FloodgateBody::holding(body, held))
                    }));
                }
                StateProj::Refused { .. } => {
                    if let StateOwned::Refused { response } =
                        this.state.as_mut().project_replace(State::Done)
                    {
                        *this.held = None;
                        return Poll::Ready(Ok(response.map(FloodgateBody::refusal)));
                    }
                }
                StateProj::Done => panic!("floodgate ResponseFuture polled after completion"),
            }
        }
    }
}

/// Polls the verdict, turning a panic into `Ready(None)` (the future must then be dropped).
pub(crate) fn poll_verdict(
    verdict: Pin<&mut (dyn Future<Output = Verdict> + Send)>,
    cx: &mut Context<'_>,
) -> Poll<Option<Verdict>> {
    match catch_unwind(AssertUnwindSafe(|| verdict.poll(cx))) {
        Ok(Poll::Pending) => Poll::Pending,
        Ok(Poll::Ready(verdict)) => Poll::Ready(Some(verdict)),
        Err(_) => Poll::Ready(None),
    }
}

/// What to do with a request once its verdict is known.
pub(crate) enum Settled {
    /// Answer with this refusal; the inner service is not called.
    Refuse(Response<Bytes>),
    /// Call the inner service, holding `leases` and adding `fields` to its response.
    Admit { leases: Vec<Lease>, fields: Fields },
}

/// Settles a verdict (`None`: the evaluation panicked). Anything the middleware cannot do
/// lets the request through and counts a fail-open.
pub(crate) fn settle(outcome: Option<Verdict>, grpc: bool, fail_opens: &AtomicU64) -> Settled {
    let Some(verdict) = outcome else {
        fail_opens.fetch_add(1, Ordering::Relaxed);
        return Settled::Admit {
            leases: Vec::new(),
            fields: Vec::new(),
        };
    };
    let fields = verdict.headers();
    match &verdict.refusal {
        None => Settled::Admit {
            leases: verdict.leases,
            fields,
        },
        Some(refusal) => match refusal_response(refusal, &fields, grpc) {
            Some(response) => Settled::Refuse(response),
            None => {
                fail_opens.fetch_add(1, Ordering::Relaxed);
                Settled::Admit {
                    leases: Vec::new(),
                    fields: Vec::new(),
                }
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate::limiter::LimiterKind;
    use floodgate::pipeline::Refusal;

    fn refused(status: u16) -> Verdict {
        Verdict {
            refusal: Some(Refusal {
                stage: floodgate::store::Namespace::new("fleet").unwrap(),
                kind: LimiterKind::Fleet,
                status,
                retry_after: None,
                message: "full".into(),
                rate_limit: None,
            }),
            ..Verdict::default()
        }
    }

    #[test]
    fn anything_the_middleware_cannot_do_lets_the_request_through() {
        let fail_opens = AtomicU64::new(0);
        assert!(matches!(
            settle(Some(refused(503)), false, &fail_opens),
            Settled::Refuse(r) if r.status() == 503
        ));
        assert_eq!(fail_opens.load(Ordering::Relaxed), 0);
        // An evaluation that panicked, and a status HTTP cannot carry.
        assert!(matches!(
            settle(None, false, &fail_opens),
            Settled::Admit { ref leases, .. } if leases.is_empty()
        ));
        assert!(matches!(
            settle(Some(refused(1_000)), false, &fail_opens),
            Settled::Admit { .. }
        ));
        assert_eq!(fail_opens.load(Ordering::Relaxed), 2);
        assert!(matches!(
            settle(Some(Verdict::default()), false, &fail_opens),
            Settled::Admit { ref fields, .. } if fields.is_empty()
        ));
    }

    #[test]
    fn a_panicking_evaluation_is_ready_with_nothing() {
        let mut verdict: VerdictFuture = Box::pin(async { panic!("a bug") });
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(matches!(
            poll_verdict(verdict.as_mut(), &mut cx),
            Poll::Ready(None)
        ));
    }
}
