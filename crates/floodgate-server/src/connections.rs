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

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use floodgate::algorithm::spec::SpecDuration;
use serde::Deserialize;
use tokio::sync::Semaphore;

use crate::config::ConfigFileError;

/// The `connections` section (see the [module documentation](self)).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionLimits {
    /// Connections open at once, both APIs together (1 to 1,000,000).
    pub max_connections: usize,
    /// How long an HTTP/1.1 client may take to send a request head, counted from when the
    /// server starts waiting for it, and how long any new connection may take to send its
    /// first 24 bytes (an HTTP/2 preface's length) before it is closed (above 0, at most 1 h).
    pub header_read_timeout: SpecDuration,
    /// The largest HTTP/1.1 request head, in bytes (8 KiB to 1 MiB).
    pub max_header_bytes: usize,
    /// The largest HTTP request body, in bytes (1 KiB to 64 MiB; gRPC messages have their own
    /// bound, 64 KiB).
    pub max_body_bytes: usize,
    /// Concurrent HTTP/2 streams per connection (at least 1).
    pub max_streams: u32,
    /// Decisions being answered at once, both APIs together, beyond which calls are shed
    /// (1 to 10,000,000). A call counts once its body has been read.
    pub max_in_flight: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 10_000,
            header_read_timeout: SpecDuration(Duration::from_secs(30)),
            max_header_bytes: 16 * 1024,
            max_body_bytes: 64 * 1024,
            max_streams: 4_096,
            max_in_flight: 10_000,
        }
    }
}

impl ConnectionLimits {
    /// Checks every limit's range; the error names the field and the value.
    pub fn validate(&self) -> Result<(), ConfigFileError> {
        let bad = |field: &str, value: String, why: &str| {
            Err(ConfigFileError::invalid(
                format!("connections.{field}"),
                format!("invalid value {value} ({why})"),
            ))
        };
        if !(1..=1_000_000).contains(&self.max_connections) {
            return bad(
                "max_connections",
                self.max_connections.to_string(),
                "1 to 1000000",
            );
        }
        let timeout = self.header_read_timeout.0;
        if timeout.is_zero() || timeout > Duration::from_secs(3600) {
            return bad(
                "header_read_timeout",
                format!("{timeout:?}"),
                "above 0 and at most 1h",
            );
        }
        if !(8 * 1024..=1024 * 1024).contains(&self.max_header_bytes) {
            return bad(
                "max_header_bytes",
                self.max_header_bytes.to_string(),
                "8192 to 1048576",
            );
        }
        if !(1024..=64 * 1024 * 1024).contains(&self.max_body_bytes) {
            return bad(
                "max_body_bytes",
                self.max_body_bytes.to_string(),
                "1024 to 67108864",
            );
        }
        if self.max_streams == 0 {
            return bad("max_streams", "0".into(), "at least 1");
        }
        if !(1..=10_000_000).contains(&self.max_in_flight) {
            return bad(
                "max_in_flight",
                self.max_in_flight.to_string(),
                "1 to 10000000",
            );
        }
        Ok(())
    }
}

/// The count of open connections against `max_connections`, shared by both APIs.
#[derive(Debug)]
pub struct ConnectionGate {
    places: Arc<Semaphore>,
    max: usize,
}

/// A connection's place, given back when dropped (also when its task unwinds).
pub type Place = tokio::sync::OwnedSemaphorePermit;

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
pub struct Admission {
    /// The gate counting connections against `max_connections`.
    pub gate: Option<Arc<ConnectionGate>>,
    /// `header_read_timeout`.
    pub first_bytes: Duration,
}

/// The bytes a connection must send within [`Admission::first_bytes`]: an HTTP/2 preface's
/// length (an HTTP/1.1 request head this long is timed by hyper's header timer instead).
pub const PREFACE: usize = 24;

/// A connection's stream, counting the bytes read from it up to [`PREFACE`].
#[derive(Debug)]
pub struct Watched {
    inner: tokio::net::TcpStream,
    seen: Arc<AtomicUsize>,
}

impl Watched {
    /// `inner`, its first bytes counted in `seen`.
    pub fn new(inner: tokio::net::TcpStream, seen: Arc<AtomicUsize>) -> Watched {
        Watched { inner, seen }
    }
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 && self.seen.load(Ordering::Relaxed) < PREFACE {
            self.seen.fetch_add(read, Ordering::Relaxed);
        }
        polled
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The decisions being answered, against `max_in_flight`.
#[derive(Debug)]
pub struct InFlight {
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
    pub fn new(max: usize) -> InFlight {
        InFlight {
            now: AtomicUsize::new(0),
            max,
            shed: AtomicU64::new(0),
        }
    }

    /// Counts a call in, or sheds it (counted) when `max` are in flight already. The count
    /// never passes `max`, even for a moment, so no call is shed below the limit.
    pub fn enter(&self) -> Result<CallGuard<'_>, Overloaded> {
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
    pub fn now(&self) -> usize {
        self.now.load(Ordering::Relaxed)
    }

    /// Calls shed since the start.
    pub fn shed(&self) -> u64 {
        self.shed.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_limits_name_the_field() {
        for (limits, field) in [
            (
                ConnectionLimits {
                    max_connections: 0,
                    ..ConnectionLimits::default()
                },
                "connections.max_connections",
            ),
            (
                ConnectionLimits {
                    max_header_bytes: 100,
                    ..ConnectionLimits::default()
                },
                "connections.max_header_bytes",
            ),
            (
                ConnectionLimits {
                    max_streams: 0,
                    ..ConnectionLimits::default()
                },
                "connections.max_streams",
            ),
            (
                ConnectionLimits {
                    max_connections: usize::MAX,
                    ..ConnectionLimits::default()
                },
                "connections.max_connections",
            ),
            (
                ConnectionLimits {
                    header_read_timeout: SpecDuration(Duration::from_secs(1 << 40)),
                    ..ConnectionLimits::default()
                },
                "connections.header_read_timeout",
            ),
        ] {
            let message = limits.validate().unwrap_err().to_string();
            assert!(message.contains(field), "{message}");
        }
        assert!(ConnectionLimits::default().validate().is_ok());
    }

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
