//! The service the layer makes: one request's way through admission, the wire, learning and
//! retries.
//!
//! ```text
//! request ─► host state ─► admission: wait (≤ max_wait, in arrival order) for Retry-After,
//!                          pacers, CUBIC rate, concurrency slot; adaptive throttling may
//!                          refuse it locally
//!         ─► inner service ─► answer: learn its fields (Signal), count the outcome
//!         ─► refused (429/503) or connection failed, safe to retry, attempts and budget left:
//!            full-jitter backoff, then admission again (which honours Retry-After)
//!         ─► the last answer (or error) to the caller
//! ```

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use floodgate::Nanos;
use http::{Request, Response};
use tokio::sync::Notify;
use tower::Service;

use crate::error::{BoxError, LocalRefusal, PoliteError};
use crate::host::{Admission, Outcome};
use crate::replay::{is_safe_to_retry, Replay};
use crate::settings::Settings;
use crate::signal::Signal;
use crate::state::{HostCell, Shared};

/// A client service wrapped by [`PoliteLayer`](crate::PoliteLayer).
pub struct Polite<S, R> {
    inner: S,
    shared: Arc<Shared>,
    replay: R,
}

impl<S, R> Polite<S, R> {
    pub(crate) fn new(inner: S, shared: Arc<Shared>, replay: R) -> Polite<S, R> {
        Polite {
            inner,
            shared,
            replay,
        }
    }

    /// A handle on the shared state (the same as the layer's).
    pub fn state(&self) -> crate::ClientState {
        crate::ClientState {
            shared: self.shared.clone(),
        }
    }
}

impl<S: Clone, R: Clone> Clone for Polite<S, R> {
    fn clone(&self) -> Self {
        Polite {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
            replay: self.replay.clone(),
        }
    }
}

impl<S, R> std::fmt::Debug for Polite<S, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Polite").finish_non_exhaustive()
    }
}

/// The future a [`Polite`] service returns.
pub type ResponseFuture<T> = Pin<Box<dyn Future<Output = Result<T, PoliteError>> + Send>>;

impl<S, B, ResB, R> Service<Request<B>> for Polite<S, R>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Send + 'static,
    ResB: Send + 'static,
    R: Replay<B>,
{
    type Response = Response<ResB>;
    type Error = PoliteError;
    type Future = ResponseFuture<Response<ResB>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner
            .poll_ready(cx)
            .map_err(|e| PoliteError::Service(e.into()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The readied service goes with the request; the clone stays for the next poll_ready.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let run = Run {
            inner,
            shared: self.shared.clone(),
            replay: self.replay.clone(),
        };
        Box::pin(run.go(request))
    }
}

/// One request's run.
struct Run<S, R> {
    inner: S,
    shared: Arc<Shared>,
    replay: R,
}

/// What a finished attempt left to return if no retry follows.
enum Last<T> {
    Answer(T),
    Error(PoliteError),
}

impl<T> Last<T> {
    /// What an attempt returned, kept until the next attempt returns.
    fn of(result: Result<T, PoliteError>) -> Last<T> {
        match result {
            Ok(answer) => Last::Answer(answer),
            Err(error) => Last::Error(error),
        }
    }

    /// The result the caller gets.
    fn into_result(self) -> Result<T, PoliteError> {
        match self {
            Last::Answer(answer) => Ok(answer),
            Last::Error(error) => Err(error),
        }
    }
}

impl<S, R> Run<S, R> {
    async fn go<B, ResB>(mut self, request: Request<B>) -> Result<Response<ResB>, PoliteError>
    where
        S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + 'static,
        S::Future: Send,
        S::Error: Into<BoxError>,
        B: Send + 'static,
        ResB: Send + 'static,
        R: Replay<B>,
    {
        let shared = self.shared.clone();
        let settings = &shared.settings;
        let timer = shared.timer.clone();
        let key = self.shared.key_of(&request);
        let cell = self.shared.host(&key, timer.now());
        let safe = is_safe_to_retry(&request);
        let mut kept = Some(request);
        let mut last: Option<Last<Response<ResB>>> = None;
        for attempt in 1..=settings.max_attempts {
            // Admission: wait while the host's state says so, at most max_wait.
            let seq = match admit(&shared, &cell, &key).await {
                Ok(seq) => seq,
                Err(refusal) => {
                    return match last {
                        // A retry that cannot be made in time: the caller gets the last answer.
                        Some(last) => last.into_result(),
                        None => Err(PoliteError::Refused(refusal)),
                    };
                }
            };
            let mut guard = InFlight {
                cell: &cell,
                armed: true,
            };
            let to_send = self.to_send(&mut kept, attempt < settings.max_attempts);
            let result = self.send(to_send).await;
            let now = timer.now();
            guard.armed = false;
            let (outcome, retry_after_timeout) =
                record_attempt(&cell, seq, &result, now, settings.headroom);
            cell.finished.notify_waiters();
            let can_retry = is_retryable(outcome, safe)
                && kept.is_some()
                && attempt < settings.max_attempts
                && cell.lock().withdraw_retry(retry_after_timeout);
            if !can_retry {
                return result;
            }
            last = Some(Last::of(result));
            let delay = {
                let mut host = cell.lock();
                settings.backoff.delay(attempt, host.rng())
            };
            if delay > settings.max_wait {
                break;
            }
            timer.sleep(delay).await;
        }
        match last {
            Some(last) => last.into_result(),
            None => unreachable!("the loop returns unless an attempt left a result"),
        }
    }

    /// The request an attempt sends: while attempts may follow, a copy of the kept request
    /// (the request itself when it cannot be copied); on the last attempt, the request itself.
    fn to_send<B>(&self, kept: &mut Option<Request<B>>, more_may_follow: bool) -> Request<B>
    where
        R: Replay<B>,
    {
        if more_may_follow {
            match kept.as_ref().and_then(|r| self.replay.replay(r)) {
                Some(copy) => copy,
                None => kept.take().expect("a request is kept until it is sent"),
            }
        } else {
            kept.take().expect("a request is kept until it is sent")
        }
    }

    /// One attempt on the wire, bounded by `attempt_timeout` when set.
    async fn send<B, ResB>(&mut self, request: Request<B>) -> Result<Response<ResB>, PoliteError>
    where
        S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + 'static,
        S::Future: Send,
        S::Error: Into<BoxError>,
        B: Send + 'static,
        ResB: Send + 'static,
        R: Replay<B>,
    {
        if let Err(e) = poll_fn(|cx| self.inner.poll_ready(cx)).await {
            return Err(PoliteError::Service(e.into()));
        }
        let call = self.inner.call(request);
        let result = match self.shared.settings.attempt_timeout {
            None => Some(call.await),
            Some(limit) => {
                let timeout = self.shared.timer.sleep(limit);
                match first_of(call, timeout).await {
                    Either::Left(result) => Some(result),
                    Either::Right(()) => None,
                }
            }
        };
        match result {
            Some(Ok(response)) => Ok(response),
            Some(Err(e)) => Err(PoliteError::Service(e.into())),
            None => Err(PoliteError::TimedOut(
                self.shared
                    .settings
                    .attempt_timeout
                    .unwrap_or(Duration::ZERO),
            )),
        }
    }
}

/// A request's place in its host's queue of waiting requests; leaving it (on admission, on a
/// refusal, or when the request's future is dropped) tells the next one its turn has come.
struct Place<'a> {
    cell: &'a HostCell,
    /// The ticket, and the notification that says this request is first now.
    ticket: Option<(u64, Arc<Notify>)>,
}

/// What one look at the host's state tells a request waiting for admission.
enum Look {
    /// The request is first in line: the host's admission.
    First(Admission),
    /// Behind others: wait for this notification that the request is first.
    Behind(Arc<Notify>),
    /// Refused: it would wait beyond `max_wait` (the wait the refusal names).
    WouldWait(Duration),
}

impl Place<'_> {
    fn ticket(&self) -> Option<u64> {
        self.ticket.as_ref().map(|(t, _)| *t)
    }

    /// Looks at the host's state under its lock, at `now`: the request is first (it asks for
    /// admission, and queues up if it is to wait), behind others (it queues up if it had not),
    /// or would wait beyond `deadline` behind them (counted as given up).
    fn look(&mut self, now: Nanos, deadline: Nanos, settings: &Settings) -> Look {
        let mut host = self.cell.lock();
        if host.is_first(self.ticket()) {
            let admission = host.admit(now, settings);
            let waits = match admission {
                Admission::WaitUntil(at) => at <= deadline,
                Admission::Full => now < deadline,
                Admission::Go { .. } | Admission::Throttled(_) => false,
            };
            if waits && self.ticket.is_none() {
                // The queue is empty (this request is first): from now on, it is the one
                // newcomers queue behind.
                self.ticket = Some(host.queue_up());
            }
            return Look::First(admission);
        }
        let turn = match &self.ticket {
            Some((_, turn)) => turn.clone(),
            None => {
                let (ticket, turn) = host.queue_up();
                self.ticket = Some((ticket, turn.clone()));
                // Waiting in the queue cannot make the host's earliest instant come
                // sooner: refuse at once what would wait beyond max_wait anyway.
                let earliest = host.earliest(now, settings);
                if earliest > deadline {
                    host.gave_up();
                    return Look::WouldWait(earliest.saturating_since(now));
                }
                turn
            }
        };
        if now >= deadline {
            host.gave_up();
            return Look::WouldWait(settings.max_wait);
        }
        Look::Behind(turn)
    }

    fn leave(&mut self) {
        if let Some((ticket, _)) = self.ticket.take() {
            let next = self.cell.lock().leave_queue(ticket);
            if let Some(next) = next {
                // `notify_one` keeps the permit if the next waiter is not waiting yet.
                next.notify_one();
            }
        }
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.leave();
    }
}

/// Waits until the host admits the request (returning its sequence number) or refuses it.
///
/// Requests that have to wait are admitted in the order they came: a request that cannot go
/// at once queues up, only the first in the queue asks for admission, and a newcomer finding
/// requests waiting queues behind them even when it could have gone (no overtaking when a
/// slot or a token frees up). One that would wait beyond `max_wait` is refused at once, as
/// before: waiting in the queue cannot make the host's earliest instant come sooner. As in
/// any fair queue (tokio's semaphore is one), a request future that has started waiting and is
/// then neither polled nor dropped holds up the requests behind it.
async fn admit(shared: &Shared, cell: &HostCell, key: &str) -> Result<u64, LocalRefusal> {
    let settings = &shared.settings;
    let timer = &shared.timer;
    let start = timer.now();
    let deadline = start.saturating_add(settings.max_wait);
    let mut waited = false;
    let mut place = Place { cell, ticket: None };
    let would_wait = |wait: Duration| LocalRefusal::WouldWait {
        host: key.to_string(),
        wait,
        max_wait: settings.max_wait,
    };
    loop {
        let now = timer.now();
        // Register for "a request finished" before looking, so a release between the look and
        // the wait is not missed.
        let finished = cell.finished.notified();
        let admission = match place.look(now, deadline, settings) {
            Look::First(admission) => admission,
            Look::Behind(turn) => {
                // Behind others: wait until this request is first (the first leaves by its own
                // deadline, which comes no later than this one's).
                waited = true;
                turn.notified().await;
                continue;
            }
            Look::WouldWait(wait) => return Err(would_wait(wait)),
        };
        match admission {
            Admission::Go { seq } => {
                place.leave();
                if waited {
                    cell.lock().waited();
                }
                return Ok(seq);
            }
            Admission::Throttled(probability) => {
                return Err(LocalRefusal::Throttled {
                    host: key.to_string(),
                    probability,
                })
            }
            Admission::WaitUntil(at) if at > deadline => {
                cell.lock().gave_up();
                return Err(would_wait(at.saturating_since(now)));
            }
            Admission::WaitUntil(at) => {
                waited = true;
                timer.sleep(at.saturating_since(now)).await;
            }
            Admission::Full => {
                if now >= deadline {
                    cell.lock().gave_up();
                    return Err(would_wait(settings.max_wait));
                }
                waited = true;
                let timeout = timer.sleep(deadline.saturating_since(now));
                first_of(finished, timeout).await;
            }
        }
    }
}

/// Gives back a concurrency slot if the request is dropped before its answer.
struct InFlight<'a> {
    cell: &'a HostCell,
    armed: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.cell.lock().abandoned();
            self.cell.finished.notify_waiters();
        }
    }
}

/// Tells the host how attempt `seq` turned out at `now`, learning the answer's limit fields;
/// returns the outcome, and whether the attempt failed by timing out (a retry then costs the
/// budget's timeout cost).
fn record_attempt<T>(
    cell: &HostCell,
    seq: u64,
    result: &Result<Response<T>, PoliteError>,
    now: Nanos,
    headroom: f64,
) -> (Outcome, bool) {
    match result {
        Ok(response) => {
            let signal = Signal::read(response.headers(), now);
            let outcome = outcome_of(response);
            cell.lock().answered(seq, outcome, &signal, now, headroom);
            (outcome, false)
        }
        Err(error) => {
            let outcome = error_outcome(error);
            cell.lock()
                .answered(seq, outcome, &Signal::default(), now, headroom);
            (outcome, outcome == Outcome::TimedOut)
        }
    }
}

/// Whether an attempt that turned out so may be made again: a refusal or a timeout if the
/// request is safe to retry, a connection that failed (nothing reached the server) always.
fn is_retryable(outcome: Outcome, safe: bool) -> bool {
    match outcome {
        Outcome::Refused | Outcome::TimedOut => safe,
        Outcome::ConnectFailed => true,
        Outcome::Answered | Outcome::Failed => false,
    }
}

/// True when a response refuses: 429 or 503, or a gRPC status `RESOURCE_EXHAUSTED` (8) or
/// `UNAVAILABLE` (14) in its header fields (a trailers-only gRPC answer).
pub fn is_refusal<B>(response: &Response<B>) -> bool {
    let status = response.status().as_u16();
    if status == 429 || status == 503 {
        return true;
    }
    matches!(
        response.headers().get("grpc-status").map(|v| v.as_bytes()),
        Some(b"8") | Some(b"14")
    )
}

fn outcome_of<B>(response: &Response<B>) -> Outcome {
    if is_refusal(response) {
        Outcome::Refused
    } else {
        Outcome::Answered
    }
}

/// Classifies an error by walking its sources: a refused or unreachable connection is a
/// connection failure (nothing reached the server), an I/O timeout a timeout.
fn error_outcome(error: &PoliteError) -> Outcome {
    let mut source: Option<&(dyn std::error::Error + 'static)> = match error {
        PoliteError::TimedOut(_) => return Outcome::TimedOut,
        PoliteError::Refused(_) => return Outcome::Failed,
        PoliteError::Service(e) => Some(e.as_ref()),
    };
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            match io.kind() {
                ConnectionRefused | NotConnected | AddrNotAvailable | HostUnreachable
                | NetworkUnreachable => return Outcome::ConnectFailed,
                TimedOut => return Outcome::TimedOut,
                _ => {}
            }
        }
        source = e.source();
    }
    Outcome::Failed
}

enum Either<A, B> {
    Left(A),
    Right(B),
}

/// Polls both futures; the output of whichever completes first.
async fn first_of<A: Future, B: Future>(a: A, b: B) -> Either<A::Output, B::Output> {
    let mut a = std::pin::pin!(a);
    let mut b = std::pin::pin!(b);
    poll_fn(|cx| {
        if let Poll::Ready(v) = a.as_mut().poll(cx) {
            return Poll::Ready(Either::Left(v));
        }
        if let Poll::Ready(v) = b.as_mut().poll(cx) {
            return Poll::Ready(Either::Right(v));
        }
        Poll::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_by_status_and_grpc_status() {
        let with = |status: u16, grpc: Option<&str>| {
            let mut b = Response::builder().status(status);
            if let Some(g) = grpc {
                b = b.header("grpc-status", g);
            }
            is_refusal(&b.body(()).unwrap())
        };
        assert!(with(429, None));
        assert!(with(503, None));
        assert!(!with(500, None));
        assert!(!with(200, None));
        assert!(with(200, Some("8")));
        assert!(with(200, Some("14")));
        assert!(!with(200, Some("0")));
    }

    #[test]
    fn connection_errors_are_found_in_the_source_chain() {
        #[derive(Debug)]
        struct Wrapper(std::io::Error);
        impl std::fmt::Display for Wrapper {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "client error")
            }
        }
        impl std::error::Error for Wrapper {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let wrap = |kind| PoliteError::Service(Box::new(Wrapper(std::io::Error::new(kind, "x"))));
        assert_eq!(
            error_outcome(&wrap(std::io::ErrorKind::ConnectionRefused)),
            Outcome::ConnectFailed
        );
        assert_eq!(
            error_outcome(&wrap(std::io::ErrorKind::TimedOut)),
            Outcome::TimedOut
        );
        assert_eq!(
            error_outcome(&wrap(std::io::ErrorKind::BrokenPipe)),
            Outcome::Failed
        );
        assert_eq!(
            error_outcome(&PoliteError::TimedOut(Duration::from_secs(1))),
            Outcome::TimedOut
        );
    }

    /// A layer whose only limit is one request in flight per host, and whose host "h" has none
    /// in flight yet.
    fn one_at_a_time() -> (Arc<Shared>, Arc<HostCell>) {
        let layer = crate::PoliteLayer::builder()
            .timer(Arc::new(crate::TokioTimer::new()))
            .adaptive_rate(false, 0.7, 0.4)
            .adaptive_throttle(false, 2.0, Duration::from_secs(120))
            .concurrency(crate::ConcurrencySettings {
                initial: 1,
                min: 1,
                max: 1,
                backoff: 0.9,
            })
            .max_wait(Duration::from_secs(600))
            .build()
            .unwrap();
        let shared = layer.shared.clone();
        let cell = shared.host("h", shared.timer.now());
        (shared, cell)
    }

    /// Request `seq` is answered: its slot frees up and the waiters are told.
    fn answer(shared: &Shared, cell: &HostCell, seq: u64) {
        let now = shared.timer.now();
        let headroom = shared.settings.headroom;
        cell.lock()
            .answered(seq, Outcome::Answered, &Signal::default(), now, headroom);
        cell.finished.notify_waiters();
    }

    type Admitting<'a> = Pin<Box<dyn Future<Output = Result<u64, LocalRefusal>> + 'a>>;

    fn poll(admitting: &mut Admitting<'_>) -> Poll<Result<u64, LocalRefusal>> {
        admitting
            .as_mut()
            .poll(&mut Context::from_waker(std::task::Waker::noop()))
    }

    fn admitted(admitting: &mut Admitting<'_>) -> u64 {
        match poll(admitting) {
            Poll::Ready(Ok(seq)) => seq,
            other => panic!("expected admission, got {other:?}"),
        }
    }

    /// One request admitted (the host's only slot), then two waiting for it, in this order.
    async fn one_in_flight_two_waiting<'a>(
        shared: &'a Shared,
        cell: &'a HostCell,
    ) -> (u64, Admitting<'a>, Admitting<'a>) {
        let first = admit(shared, cell, "h").await.unwrap();
        let mut second: Admitting<'a> = Box::pin(admit(shared, cell, "h"));
        let mut third: Admitting<'a> = Box::pin(admit(shared, cell, "h"));
        assert!(poll(&mut second).is_pending());
        assert!(poll(&mut third).is_pending());
        assert_eq!(cell.lock().waiting(), 2);
        (first, second, third)
    }

    #[tokio::test]
    async fn waiting_requests_are_admitted_in_the_order_they_came() {
        let (shared, cell) = one_at_a_time();
        let (first, mut second, mut third) = one_in_flight_two_waiting(&shared, &cell).await;
        // The slot frees up, and a newcomer asks before any waiter has run: it does not take
        // the slot, it queues behind them.
        answer(&shared, &cell, first);
        let mut newcomer: Admitting<'_> = Box::pin(admit(&shared, &cell, "h"));
        assert!(poll(&mut newcomer).is_pending());
        // Nor does the second waiter, polled before the first.
        assert!(poll(&mut third).is_pending());
        let seq = admitted(&mut second);
        assert!(poll(&mut third).is_pending());
        answer(&shared, &cell, seq);
        assert!(poll(&mut newcomer).is_pending());
        let seq = admitted(&mut third);
        answer(&shared, &cell, seq);
        admitted(&mut newcomer);
        assert_eq!(cell.lock().waiting(), 0);
    }

    #[tokio::test]
    async fn a_waiter_that_is_dropped_passes_its_turn_on() {
        let (shared, cell) = one_at_a_time();
        let (first, second, mut third) = one_in_flight_two_waiting(&shared, &cell).await;
        // The first in the queue goes away (its caller's future is dropped, as on a timeout).
        drop(second);
        assert_eq!(cell.lock().waiting(), 1);
        answer(&shared, &cell, first);
        admitted(&mut third);
        assert_eq!(cell.lock().waiting(), 0);
    }
}
