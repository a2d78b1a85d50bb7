//! The response body: the inner service's body carrying the request's places until it ends,
//! or a refusal's bytes.
//!
//! An allowed request holds its concurrency and fleet [`Lease`]s and its busy-worker guard
//! until the response is over, not merely until the handler returns: a streamed or slow
//! download still counts as in flight. [`FloodgateBody`] gives them back as soon as the first
//! of these happens:
//! - the inner body yields its last frame (after which [`Body::is_end_stream`] is true) or
//!   `None`;
//! - the inner body yields an error (the response is aborted);
//! - the body is dropped, read or not (the client went away, or the server gave up).
//!
//! A body that is already at its end when the response arrives (an empty body, which servers
//! never poll) holds nothing.
//!
//! A response that ends (its last frame, or an empty body) gives its leases back with the
//! request's latency, from the middleware's call to that end on the layer's clock: the sample
//! an adaptive concurrency stage learns from ([`Lease::complete`]). A response aborted by an
//! error or dropped unread gives them back with no sample.
//!
//! Frames pass through unchanged; the data type is the inner body's, which must be buildable
//! from [`Bytes`] for refusals (`Bytes` itself, as in axum, hyper and tonic), and errors are
//! the inner body's (a refusal never fails).

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use std::sync::Arc;

use bytes::Bytes;
use floodgate::limiter::utilization::BusyWorker;
use floodgate::limiter::Lease;
use floodgate::{Clock, Nanos};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

/// What an allowed request keeps until its response ends: its leases and its busy worker,
/// and when it started.
#[derive(Debug, Default)]
pub(crate) struct Held {
    pub(crate) leases: Vec<Lease>,
    pub(crate) busy: Option<BusyWorker>,
    pub(crate) timer: Option<Timer>,
}

/// When a request reached the middleware, on the layer's clock.
pub(crate) struct Timer {
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) started: Nanos,
}

impl Timer {
    /// A timer started now.
    pub(crate) fn start(clock: &Arc<dyn Clock>) -> Timer {
        Timer {
            started: clock.now(),
            clock: Arc::clone(clock),
        }
    }
}

impl fmt::Debug for Timer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timer")
            .field("started", &self.started)
            .finish_non_exhaustive()
    }
}

impl Held {
    /// Whether there is nothing to give back.
    pub(crate) fn is_empty(&self) -> bool {
        self.leases.is_empty() && self.busy.is_none()
    }

    /// The response ended: gives the leases back with the request's latency.
    pub(crate) fn finish(mut self) {
        let Some(timer) = self.timer.take() else {
            return;
        };
        let latency = timer.clock.now().saturating_since(timer.started);
        for lease in self.leases.drain(..) {
            lease.complete(latency);
        }
    }
}

pin_project! {
    /// The middleware's response body. See the [module documentation](self).
    pub struct FloodgateBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner {
            #[pin]
            body: B,
            held: Option<Held>,
        },
        Refusal {
            data: Option<Bytes>,
        },
    }
}

impl<B: Body> FloodgateBody<B> {
    /// Wraps `body`, holding nothing: the same type as the middleware's responses, for code
    /// that must build one itself.
    pub fn new(body: B) -> Self {
        FloodgateBody::holding(body, None)
    }

    /// Wraps `body`, keeping `held` until the body ends or is dropped.
    pub(crate) fn holding(body: B, held: Option<Held>) -> Self {
        // A body already at its end is never polled: the request is over.
        let held = match held {
            Some(held) if body.is_end_stream() => {
                held.finish();
                None
            }
            held => held,
        };
        FloodgateBody {
            kind: Kind::Inner { body, held },
        }
    }
}

impl<B> FloodgateBody<B> {
    /// A body of `data` (nothing when empty), for refusals.
    pub(crate) fn refusal(data: Bytes) -> Self {
        FloodgateBody {
            kind: Kind::Refusal {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }

    /// Whether this is a refusal's body rather than the inner service's.
    pub fn is_refusal(&self) -> bool {
        matches!(self.kind, Kind::Refusal { .. })
    }

    /// Whether the body still holds the request's leases or busy worker.
    pub fn is_holding(&self) -> bool {
        matches!(self.kind, Kind::Inner { held: Some(_), .. })
    }
}

impl<B> fmt::Debug for FloodgateBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Inner { held, .. } => f
                .debug_struct("FloodgateBody::Inner")
                .field("held", held)
                .finish_non_exhaustive(),
            Kind::Refusal { data } => f
                .debug_struct("FloodgateBody::Refusal")
                .field("len", &data.as_ref().map_or(0, Bytes::len))
                .finish(),
        }
    }
}

impl<B> Body for FloodgateBody<B>
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
        match self.project().kind.project() {
            KindProj::Inner { mut body, held } => {
                let polled = body.as_mut().poll_frame(cx);
                match &polled {
                    Poll::Pending => {}
                    Poll::Ready(Some(Err(_))) => *held = None,
                    Poll::Ready(None) => held.take().into_iter().for_each(Held::finish),
                    Poll::Ready(Some(Ok(_))) if body.is_end_stream() => {
                        held.take().into_iter().for_each(Held::finish);
                    }
                    Poll::Ready(Some(Ok(_))) => {}
                }
                polled
            }
            KindProj::Refusal { data } => {
                Poll::Ready(data.take().map(|d| Ok(Frame::data(B::Data::from(d)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body, .. } => body.is_end_stream(),
            Kind::Refusal { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body, .. } => body.size_hint(),
            Kind::Refusal { data } => SizeHint::with_exact(
                data.as_ref()
                    .map_or(0, |d| u64::try_from(d.len()).unwrap_or(u64::MAX)),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use floodgate::limiter::utilization::WorkerGauge;
    use http_body_util::{BodyExt, Empty, Full};

    fn noop_cx() -> Context<'static> {
        Context::from_waker(std::task::Waker::noop())
    }

    fn held(gauge: &Arc<WorkerGauge>) -> Option<Held> {
        Some(Held {
            leases: Vec::new(),
            busy: Some(gauge.enter()),
            timer: None,
        })
    }

    #[test]
    fn a_refusal_yields_its_bytes_once() {
        let mut body = FloodgateBody::<Full<Bytes>>::refusal(Bytes::from_static(b"{}"));
        assert!(body.is_refusal() && !body.is_holding());
        assert_eq!(body.size_hint().exact(), Some(2));
        assert!(!body.is_end_stream());
        let mut cx = noop_cx();
        let frame = Pin::new(&mut body).poll_frame(&mut cx);
        match frame {
            Poll::Ready(Some(Ok(f))) => assert_eq!(f.into_data().ok(), Some(Bytes::from("{}"))),
            other => panic!("expected a data frame, got {other:?}"),
        }
        assert!(body.is_end_stream());
        assert!(matches!(
            Pin::new(&mut body).poll_frame(&mut cx),
            Poll::Ready(None)
        ));
        let empty = FloodgateBody::<Full<Bytes>>::refusal(Bytes::new());
        assert!(empty.is_end_stream());
        assert_eq!(empty.size_hint().exact(), Some(0));
    }

    #[test]
    fn the_last_frame_gives_the_places_back() {
        let gauge = Arc::new(WorkerGauge::new(4).unwrap());
        let mut body = FloodgateBody::holding(Full::new(Bytes::from("hello")), held(&gauge));
        assert_eq!(gauge.busy(), 1);
        assert_eq!(body.size_hint().exact(), Some(5));
        let mut cx = noop_cx();
        assert!(matches!(
            Pin::new(&mut body).poll_frame(&mut cx),
            Poll::Ready(Some(Ok(_)))
        ));
        // Full is at its end after its one frame: nothing is held any more.
        assert!(body.is_end_stream() && !body.is_holding());
        assert_eq!(gauge.busy(), 0);
    }

    #[test]
    fn an_empty_body_holds_nothing_and_a_dropped_one_gives_back() {
        let gauge = Arc::new(WorkerGauge::new(4).unwrap());
        let empty = FloodgateBody::holding(Empty::<Bytes>::new(), held(&gauge));
        assert!(!empty.is_holding());
        assert_eq!(gauge.busy(), 0);
        let body = FloodgateBody::holding(Full::new(Bytes::from("x")), held(&gauge));
        assert_eq!(gauge.busy(), 1);
        drop(body);
        assert_eq!(gauge.busy(), 0);
    }

    #[test]
    fn a_stream_holds_until_its_end_or_its_error() {
        let gauge = Arc::new(WorkerGauge::new(4).unwrap());
        let mut body = FloodgateBody::holding(Chunks(vec![Ok("a"), Ok("b")]), held(&gauge));
        let mut cx = noop_cx();
        for _ in 0..2 {
            assert!(matches!(
                Pin::new(&mut body).poll_frame(&mut cx),
                Poll::Ready(Some(Ok(_)))
            ));
            // A stream does not know it is over until asked again.
            assert_eq!(gauge.busy(), 1);
        }
        assert!(matches!(
            Pin::new(&mut body).poll_frame(&mut cx),
            Poll::Ready(None)
        ));
        assert_eq!(gauge.busy(), 0);

        let mut body = FloodgateBody::holding(Chunks(vec![Err("reset")]), held(&gauge));
        assert_eq!(gauge.busy(), 1);
        assert!(matches!(
            Pin::new(&mut body).poll_frame(&mut cx),
            Poll::Ready(Some(Err("reset")))
        ));
        assert_eq!(gauge.busy(), 0);
    }

    #[test]
    fn collecting_passes_the_data_through() {
        let body = FloodgateBody::new(Full::new(Bytes::from("data")));
        use std::future::Future;
        let mut fut = std::pin::pin!(body.collect());
        match fut.as_mut().poll(&mut noop_cx()) {
            Poll::Ready(Ok(c)) => assert_eq!(c.to_bytes(), Bytes::from("data")),
            _ => panic!("a full body collects at once"),
        }
        assert!(format!("{:?}", FloodgateBody::new(Empty::<Bytes>::new())).contains("Inner"));
    }

    /// A body of chunks that does not know its end until asked once more, as streams.
    struct Chunks(Vec<Result<&'static str, &'static str>>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = &'static str;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, &'static str>>> {
            if self.0.is_empty() {
                return Poll::Ready(None);
            }
            let next = self.0.remove(0);
            Poll::Ready(Some(next.map(|s| Frame::data(Bytes::from(s)))))
        }
    }
}
