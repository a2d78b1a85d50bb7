//! Limits on the connections a hostile or broken peer can hold: the config's `connections`
//! section, read once at start-up (a reload keeps the limits the process started with).
//!
//! ```yaml
//! connections:
//!   max_connections: 10000      # open connections, both APIs together
//!   header_read_timeout: 30s    # HTTP/1.1: a request head (and an idle keep-alive) in this time
//!   max_header_bytes: 16384     # HTTP/1.1: a request head's size (431 above it)
//!   max_body_bytes: 65536       # a request body's size (413 above it)
//!   max_streams: 4096           # HTTP/2: concurrent streams per connection (both APIs)
//!   max_in_flight: 10000        # decisions being answered at once, both APIs together
//! ```
//!
//! **Overload.** Beyond `max_in_flight` decisions being answered at once (they pile up when the
//! store is slow: each waits up to the store's timeout), a new call is shed at once instead of
//! queued: `503` with `Retry-After: 1` and `{"error": {"type": "overloaded"}}` on the HTTP
//! API, `UNAVAILABLE` on gRPC (Envoy then applies its `failure_mode_deny`). Health, metrics and
//! the dashboard are never shed. Shed calls are counted (`floodgate_overload_shed_total`).
//!
//! A connection beyond `max_connections` is not refused: it waits until one closes (one per
//! worker taken but not yet served, the next ones in the bounded hand-off queue to the
//! workers, then unaccepted in the kernel's listen queue), so a burst of connections is served
//! late rather than reset.
//! A peer that opens connections and sends nothing holds one of them for at most
//! `header_read_timeout` (HTTP/1.1; an HTTP/2 peer is pinged and closed if it does not answer).

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
    /// Connections open at once, both APIs together (at least 1).
    pub max_connections: usize,
    /// How long an HTTP/1.1 client may take to send a request head, counted from when the
    /// server starts waiting for it (above 0).
    pub header_read_timeout: SpecDuration,
    /// The largest HTTP/1.1 request head, in bytes (8 KiB to 1 MiB).
    pub max_header_bytes: usize,
    /// The largest request body, in bytes (1 KiB to 64 MiB).
    pub max_body_bytes: usize,
    /// Concurrent HTTP/2 streams per connection (at least 1).
    pub max_streams: u32,
    /// Decisions being answered at once, both APIs together, beyond which calls are shed
    /// (at least 1).
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
        if self.max_connections == 0 {
            return bad("max_connections", "0".into(), "at least 1");
        }
        if self.header_read_timeout.0.is_zero() {
            return bad("header_read_timeout", "0".into(), "above 0");
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
        if self.max_in_flight == 0 {
            return bad("max_in_flight", "0".into(), "at least 1");
        }
        Ok(())
    }
}

/// The count of open connections against `max_connections`, shared by both APIs.
#[derive(Debug)]
pub struct ConnectionGate {
    places: Semaphore,
    max: usize,
}

impl ConnectionGate {
    /// A gate of `max` places.
    pub fn new(max: usize) -> Arc<ConnectionGate> {
        Arc::new(ConnectionGate {
            places: Semaphore::new(max),
            max,
        })
    }

    /// Waits for a place; the caller gives it back with [`ConnectionGate::release`] when the
    /// connection closes.
    pub async fn admit(&self) {
        // The semaphore is never closed, so acquiring fails only if it were.
        if let Ok(place) = self.places.acquire().await {
            place.forget();
        }
    }

    /// Gives back a place taken by [`ConnectionGate::admit`].
    pub fn release(&self) {
        self.places.add_permits(1);
    }

    /// Connections being served now.
    pub fn open(&self) -> usize {
        self.max - self.places.available_permits()
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

    /// Counts a call in, or sheds it (counted) when `max` are in flight already.
    pub fn enter(&self) -> Result<CallGuard<'_>, Overloaded> {
        let before = self.now.fetch_add(1, Ordering::Relaxed);
        if before >= self.max {
            self.now.fetch_sub(1, Ordering::Relaxed);
            self.shed.fetch_add(1, Ordering::Relaxed);
            return Err(Overloaded { max: self.max });
        }
        Ok(CallGuard(self))
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
        gate.admit().await;
        gate.admit().await;
        assert_eq!(gate.open(), 2);
        let third = tokio::spawn({
            let gate = gate.clone();
            async move { gate.admit().await }
        });
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "a third waits");
        gate.release();
        third.await.unwrap();
        assert_eq!(gate.open(), 2);
    }
}
