//! Limits on the connections a hostile or broken peer can hold: the config's `connections`
//! section, read once at start-up (a reload keeps the limits the process started with).
//!
//! ```yaml
//! connections:
//!   max_connections: 10000      # open connections, both APIs together
//!   header_read_timeout: 30s    # HTTP/1.1: a request head (and an idle keep-alive) in this time
//!   max_header_bytes: 16384     # HTTP/1.1: a request head's size (431 above it)
//!   max_body_bytes: 65536       # an HTTP request body's size (413 above it)
//!   max_streams: 4096           # HTTP/2: concurrent streams per connection (both APIs)
//!   max_in_flight: 10000        # decisions being answered at once, both APIs together
//!   grpc_max_age: 24h           # gRPC connections asked to go away at this age (default: never)
//!   grpc_max_age_grace: 1h      # ... and closed this much later
//! ```
//!
//! **Overload.** Beyond `max_in_flight` decisions being answered at once (they pile up when the
//! store is slow: each waits up to the store's timeout; a call counts once its body is read),
//! a new call is shed at once instead of queued: `503` with `Retry-After: 1` and `{"error": {"type": "overloaded"}}` on the HTTP
//! API, `UNAVAILABLE` on gRPC (Envoy then applies its `failure_mode_deny`). Health, metrics,
//! the dashboard, the admin API and `/v1/release` (giving leases back relieves the overload)
//! are never shed. Shed calls are counted (`floodgate_overload_shed_total`).
//!
//! A connection beyond `max_connections` is not refused: it waits until one closes (one per
//! worker taken but not yet served, the next ones in the bounded hand-off queue to the
//! workers, then unaccepted in the kernel's listen queue), so a burst of connections is served
//! late rather than reset.
//! A peer that opens connections and sends nothing (or less than an HTTP/2 preface) holds one
//! of them for at most `header_read_timeout`; an HTTP/1.1 head must arrive within it too, and
//! a quiet HTTP/2 peer is pinged and closed if it does not answer.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::server::graceful::GracefulConnection;
use tokio::sync::Semaphore;
use tokio_stream::{Stream, StreamExt};

mod stream;
pub(crate) mod tls;
pub(crate) use self::stream::{Conn, Watched, PREFACE};

/// The count of open connections against `max_connections`, shared by both APIs.
#[derive(Debug)]
pub struct ConnectionGate {
    places: Arc<Semaphore>,
    max: usize,
}

/// A connection's place, given back when dropped (also when its task unwinds).
pub(crate) type Place = tokio::sync::OwnedSemaphorePermit;

impl ConnectionGate {
    /// A gate of `max` places.
    pub fn new(max: usize) -> Arc<ConnectionGate> {
        Arc::new(ConnectionGate {
            places: Arc::new(Semaphore::new(max)),
            max,
        })
    }

    /// Waits for a place, held until the returned [`Place`] is dropped; `None` only if the
    /// gate were closed, which it never is.
    pub async fn admit(&self) -> Option<Place> {
        self.places.clone().acquire_owned().await.ok()
    }

    /// Connections being served now.
    pub fn open(&self) -> usize {
        self.max - self.places.available_permits()
    }
}

/// What a serving loop needs to hold its connections to the limits: the gate (none for a
/// backend that does not count), and how long a new connection may take to send its first
/// [`PREFACE`] bytes.
#[derive(Clone, Debug)]
pub(crate) struct Admission {
    /// The gate counting connections against `max_connections`.
    pub gate: Option<Arc<ConnectionGate>>,
    /// `header_read_timeout`.
    pub first_bytes: Duration,
    /// How old a connection may grow before it is asked to go away, if at all.
    pub max_age: Option<MaxAge>,
    /// TLS on the listener: each connection's handshake, on its own task within
    /// `first_bytes`, before it is served.
    pub tls: Option<Arc<tls::TlsTerminator>>,
}

/// envoyproxy/ratelimit's `GRPC_MAX_CONNECTION_AGE` and `…_GRACE`: a connection older than
/// `age` (each connection's own age drawn within ±10% of it, so that a fleet's clients do not
/// all reconnect at once) is asked to go away (HTTP/2 `GOAWAY`: its calls in flight finish, no
/// new ones start), and closed `grace` later if calls are still running. Clients reconnect, and
/// so spread over the pods a deployment adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MaxAge {
    /// The age.
    pub age: Duration,
    /// The grace after it.
    pub grace: Duration,
}

impl MaxAge {
    /// The gRPC connections' maximum age that `limits` set, if any.
    pub(crate) fn of(limits: &crate::config::ConnectionLimits) -> Option<MaxAge> {
        limits.grpc_max_age.map(|age| MaxAge {
            age: age.0,
            grace: limits.grpc_max_age_grace.0,
        })
    }

    /// This connection's age: `age` × a factor drawn uniformly in [0.9, 1.1].
    fn drawn(&self) -> Duration {
        self.age.mul_f64(0.9 + 0.2 * rand::random::<f64>())
    }
}

/// The decisions being answered, against `max_in_flight`.
#[derive(Debug)]
pub(crate) struct InFlight {
    now: AtomicUsize,
    max: usize,
    shed: AtomicU64,
}

/// A call counted in [`InFlight`]; dropping it ends the call.
#[derive(Debug)]
#[must_use = "the call counts as in flight while its guard lives"]
pub struct CallGuard<'a>(&'a InFlight);

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A call shed because `max_in_flight` decisions were being answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the service is answering {max} decisions at once (connections.max_in_flight); retry in 1 s"
)]
pub struct Overloaded {
    /// The limit.
    pub max: usize,
}

impl InFlight {
    /// A count of at most `max` calls.
    pub(crate) fn new(max: usize) -> InFlight {
        InFlight {
            now: AtomicUsize::new(0),
            max,
            shed: AtomicU64::new(0),
        }
    }

    /// Counts a call in, or sheds it (counted) when `max` are in flight already. The count
    /// never passes `max`, even for a moment, so no call is shed below the limit.
    pub(crate) fn enter(&self) -> Result<CallGuard<'_>, Overloaded> {
        let taken = self
            .now
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max).then_some(n + 1)
            });
        match taken {
            Ok(_) => Ok(CallGuard(self)),
            Err(_) => {
                self.shed.fetch_add(1, Ordering::Relaxed);
                Err(Overloaded { max: self.max })
            }
        }
    }

    /// Calls in flight now.
    pub(crate) fn now(&self) -> usize {
        self.now.load(Ordering::Relaxed)
    }

    /// Calls shed since the start.
    pub(crate) fn shed(&self) -> u64 {
        self.shed.load(Ordering::Relaxed)
    }
}

/// How long an HTTP/2 connection may be quiet before the server pings the peer (`PING`):
/// gateways keep their connections open for good, so a peer that vanished without closing
/// (a host gone, a network cut) is found this way and its connection closed.
pub(crate) const KEEP_ALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// How long the server waits for a ping's answer before it closes the connection.
pub(crate) const KEEP_ALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// Serves each connection `connections` yields with `serve_one`, each on its own task, until
/// `shutdown` completes; then stops taking connections, asks the open ones to finish
/// (HTTP/1.1: after the response in progress; HTTP/2: `GOAWAY`), and returns when they have.
///
/// A connection that fails (a peer that speaks something else, one that resets) is closed and
/// logged at debug level; the others go on. An error from `connections` is logged and the
/// next connection is taken. With [`Admission::max_age`], a connection that grows old is asked
/// to go away on its own ([`MaxAge`]).
pub(crate) async fn serve_each<S, T, F, C>(
    api: &'static str,
    connections: S,
    shutdown: F,
    admission: Admission,
    serve_one: impl Fn(Watched) -> C + Clone + Send + 'static,
) where
    S: Stream<Item = std::io::Result<T>>,
    T: Into<Conn>,
    F: Future<Output = ()>,
    C: GracefulConnection + Send + 'static,
    C::Error: std::fmt::Display + Send,
{
    // Every connection's task holds a sender; they are all gone when every task has ended.
    let (running, mut all_ended) = tokio::sync::mpsc::channel::<()>(1);
    let (stop, stopping) = tokio::sync::watch::channel(false);
    tokio::pin!(connections, shutdown);
    loop {
        let next = tokio::select! {
            next = connections.next() => next,
            () = &mut shutdown => break,
        };
        let stream = match next {
            Some(Ok(stream)) => stream,
            Some(Err(e)) => {
                tracing::warn!(api, error = %e, "cannot take a connection");
                continue;
            }
            None => {
                // No more connections will come; the open ones are served until shutdown.
                (&mut shutdown).await;
                break;
            }
        };
        // A place (`connections.max_connections`) before serving it: while every place is
        // taken, this connection waits and no other is taken, so the rest stay in the
        // hand-off queue and then unaccepted in the kernel's listen queue.
        let place = match &admission.gate {
            Some(gate) => tokio::select! {
                place = gate.admit() => place,
                () = &mut shutdown => break,
            },
            None => None,
        };
        let conn: Conn = stream.into();
        let serve_one = serve_one.clone();
        let tls = admission.tls.clone();
        let first_bytes = admission.first_bytes;
        let max_age = admission.max_age;
        let (running, stopping) = (running.clone(), stopping.clone());
        tokio::spawn(async move {
            // The place goes back when this task ends, even by unwinding; so does `running`.
            let _place = place;
            let _running = running;
            let Some(conn) = handshake(api, conn, tls.as_deref(), first_bytes).await else {
                return;
            };
            serve_connection(api, conn, first_bytes, max_age, serve_one, stopping).await;
        });
    }
    let _ = stop.send(true);
    drop(running);
    // `None` once every connection's task has ended.
    let _ = all_ended.recv().await;
}

/// `conn` after its TLS handshake, within `first_bytes`, when the listener has TLS (`tls`);
/// `None` (logged) when the handshake failed or did not end in time.
async fn handshake(
    api: &'static str,
    conn: Conn,
    tls: Option<&tls::TlsTerminator>,
    first_bytes: Duration,
) -> Option<Conn> {
    let Some(tls) = tls else {
        return Some(conn);
    };
    match tokio::time::timeout(first_bytes, tls.accept(conn)).await {
        Ok(Ok(conn)) => Some(conn),
        Ok(Err(e)) => {
            tracing::debug!(api, error = %e, "connection closed: TLS handshake failed");
            None
        }
        Err(_) => {
            tls.handshake_failed();
            tracing::debug!(api, "connection closed: no TLS handshake in time");
            None
        }
    }
}

/// Serves one connection with `serve_one` until it ends: closed when it sends less than a
/// preface in `first_bytes`; asked to go away when the server stops (`stopping`) or when it
/// reaches its maximum age, and then closed when the grace after that age runs out.
async fn serve_connection<C>(
    api: &'static str,
    conn: Conn,
    first_bytes: Duration,
    max_age: Option<MaxAge>,
    serve_one: impl Fn(Watched) -> C,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) where
    C: GracefulConnection,
    C::Error: std::fmt::Display,
{
    let seen = Arc::new(AtomicUsize::new(0));
    let connection = serve_one(Watched::new(conn, seen.clone()));
    tokio::pin!(connection);
    let started = tokio::time::Instant::now();
    let old = async {
        match max_age {
            Some(max) => tokio::time::sleep_until(started + max.drawn()).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(old);
    let mut asked_to_go = false;
    let mut deadline: Option<tokio::time::Instant> = None;
    let served = loop {
        let first_bytes_due = started + first_bytes;
        tokio::select! {
            served = connection.as_mut() => break served,
            // Not even a preface's worth of bytes in all that time: not a client.
            // Dropping the connection closes it. The condition is read when the `select!`
            // starts, before any byte came in: read it again when the timer fires, and go
            // round (disabling this branch) when the preface has come since.
            () = tokio::time::sleep_until(first_bytes_due),
                if seen.load(Ordering::Relaxed) < PREFACE => {
                if seen.load(Ordering::Relaxed) >= PREFACE {
                    continue;
                }
                tracing::debug!(api, "connection closed: nothing sent");
                return;
            }
            Ok(_) = stopping.wait_for(|s| *s), if !asked_to_go => {
                asked_to_go = true;
                connection.as_mut().graceful_shutdown();
            }
            () = &mut old, if deadline.is_none() => {
                tracing::debug!(api, "connection reached its maximum age: asked to go away");
                if !asked_to_go {
                    asked_to_go = true;
                    connection.as_mut().graceful_shutdown();
                }
                deadline = max_age.map(|m| tokio::time::Instant::now() + m.grace);
            }
            () = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {
                tracing::debug!(api, "connection closed: its grace after its maximum age ran out");
                return;
            }
        }
    };
    if let Err(e) = served {
        tracing::debug!(api, error = %e, "connection closed on an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_beyond_the_limit_are_shed_and_counted() {
        let calls = InFlight::new(2);
        let a = calls.enter().unwrap();
        let _b = calls.enter().unwrap();
        assert_eq!(calls.enter().unwrap_err(), Overloaded { max: 2 });
        assert_eq!((calls.now(), calls.shed()), (2, 1));
        drop(a);
        let _c = calls.enter().unwrap();
        assert_eq!(calls.shed(), 1);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_gate_counts_places() {
        let gate = ConnectionGate::new(2);
        let first = gate.admit().await;
        let _second = gate.admit().await;
        assert_eq!(gate.open(), 2);
        let third = tokio::spawn({
            let gate = gate.clone();
            async move { gate.admit().await }
        });
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "a third waits");
        drop(first);
        let _third = third.await.unwrap();
        assert_eq!(gate.open(), 2);
    }
}
