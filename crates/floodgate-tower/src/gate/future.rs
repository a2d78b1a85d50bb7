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

use super::body::{FloodgateBody, Held};
use super::layer::Answers;
use crate::admitted::Admitted;
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
            answer: Answer,
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
        answer: Answer,
        held: Held,
    ) -> Self {
        ResponseFuture {
            state: State::Deciding {
                verdict,
                service,
                request,
                answer,
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
                        mut request,
                        answer,
                        ..
                    } = this.state.as_mut().project_replace(State::Done)
                    else {
                        continue; // not reached: the state was Deciding
                    };
                    match settle(outcome, &answer) {
                        Settled::Refuse(response) => {
                            *this.held = None;
                            return Poll::Ready(Ok(response.map(FloodgateBody::refusal)));
                        }
                        Settled::Admit {
                            leases,
                            fields,
                            admitted,
                        } => {
                            if let Some(held) = this.held.as_mut() {
                                held.leases = leases;
                            }
                            if let Some(admitted) = admitted {
                                request.extensions_mut().insert(admitted);
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

/// How to answer one request once its verdict is known.
pub(crate) struct Answer {
    /// Whether the request speaks gRPC (refusals are then gRPC statuses).
    pub(crate) grpc: bool,
    /// The layer's refusal hook and its count of requests let through because the
    /// middleware failed.
    pub(crate) answers: Arc<Answers>,
    /// The request's user, for [`Admitted`].
    pub(crate) user: String,
}

/// What to do with a request once its verdict is known.
pub(crate) enum Settled {
    /// Answer with this refusal; the inner service is not called.
    Refuse(Response<Bytes>),
    /// Call the inner service with `admitted` in the request's extensions, holding `leases`
    /// and adding `fields` to its response.
    Admit {
        leases: Vec<Lease>,
        fields: Fields,
        admitted: Option<Admitted>,
    },
}

impl Settled {
    /// Let through after a failure of the middleware's own, counted.
    fn failed_open(fail_opens: &AtomicU64) -> Settled {
        fail_opens.fetch_add(1, Ordering::Relaxed);
        Settled::Admit {
            leases: Vec::new(),
            fields: Vec::new(),
            admitted: None,
        }
    }
}

/// Settles a verdict (`None`: the evaluation panicked). Anything the middleware cannot do
/// lets the request through and counts a fail-open; so does a refusal hook that panics.
pub(crate) fn settle(outcome: Option<Verdict>, answer: &Answer) -> Settled {
    let Some(verdict) = outcome else {
        return Settled::failed_open(&answer.answers.fail_opens);
    };
    let fields = verdict.headers();
    let Some(refusal) = &verdict.refusal else {
        let admitted = Admitted::new(&answer.user, &verdict);
        return Settled::Admit {
            leases: verdict.leases,
            fields,
            admitted: Some(admitted),
        };
    };
    let Some(response) = refusal_response(refusal, &fields, answer.grpc) else {
        return Settled::failed_open(&answer.answers.fail_opens);
    };
    let Some(hook) = &answer.answers.on_refusal else {
        return Settled::Refuse(response);
    };
    match catch_unwind(AssertUnwindSafe(|| hook(refusal, response))) {
        Ok(shaped) => Settled::Refuse(shaped),
        Err(_) => Settled::failed_open(&answer.answers.fail_opens),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::RefusalFn;
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

    fn answer(on_refusal: Option<Arc<RefusalFn>>) -> Answer {
        Answer {
            grpc: false,
            answers: Arc::new(Answers {
                on_refusal,
                ..Answers::new()
            }),
            user: "ip:192.0.2.1".into(),
        }
    }

    #[test]
    fn anything_the_middleware_cannot_do_lets_the_request_through() {
        let answer = answer(None);
        assert!(matches!(
            settle(Some(refused(503)), &answer),
            Settled::Refuse(r) if r.status() == 503
        ));
        assert_eq!(answer.answers.fail_opens.load(Ordering::Relaxed), 0);
        // An evaluation that panicked, and a status HTTP cannot carry.
        assert!(matches!(
            settle(None, &answer),
            Settled::Admit { ref leases, admitted: None, .. } if leases.is_empty()
        ));
        assert!(matches!(
            settle(Some(refused(1_000)), &answer),
            Settled::Admit { .. }
        ));
        assert_eq!(answer.answers.fail_opens.load(Ordering::Relaxed), 2);
        let Settled::Admit {
            fields, admitted, ..
        } = settle(Some(Verdict::default()), &answer)
        else {
            panic!("admitted")
        };
        assert!(fields.is_empty());
        assert_eq!(admitted.unwrap().key, "ip:192.0.2.1");
    }

    #[test]
    fn the_refusal_hook_shapes_refusals_and_a_panicking_one_fails_open() {
        let teapot: Arc<RefusalFn> = Arc::new(|refusal: &Refusal, mut response| {
            assert_eq!(refusal.stage.as_str(), "fleet");
            *response.status_mut() = http::StatusCode::IM_A_TEAPOT;
            response
        });
        let shaped = answer(Some(teapot));
        assert!(matches!(
            settle(Some(refused(503)), &shaped),
            Settled::Refuse(r) if r.status() == 418 && r.headers().contains_key("content-type")
        ));
        let broken: Arc<RefusalFn> = Arc::new(|_: &Refusal, _| panic!("a bug in the hook"));
        let broken = answer(Some(broken));
        assert!(matches!(
            settle(Some(refused(503)), &broken),
            Settled::Admit { .. }
        ));
        assert_eq!(broken.answers.fail_opens.load(Ordering::Relaxed), 1);
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
