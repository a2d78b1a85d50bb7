//! [`BudgetBody`]: the response body, which settles its request's reservation when it ends
//! or is dropped.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use floodgate::limiter::Reservation;
use http::header::HeaderName;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

/// The usage header's value in `headers`, if it is a whole number.
pub(super) fn usage_in(headers: &HeaderMap, name: &HeaderName) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// What settles a reservation, whatever the store.
pub(super) trait Settles: Send + Sync {
    fn settle(&self, reservation: Reservation, actual: u64);
    fn header(&self) -> &HeaderName;
}

/// A reservation to settle when the body is over: at the reported cost, else the estimate.
pub(super) struct Settle {
    pub(super) shared: Arc<dyn Settles>,
    pub(super) reservation: Option<Reservation>,
    pub(super) actual: Option<u64>,
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
    pub(super) fn holding(body: B, settle: Option<Settle>) -> Self
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

    pub(super) fn refusal(bytes: Bytes) -> Self {
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
