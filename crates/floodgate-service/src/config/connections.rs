//! The `connections` section: limits on the connections a hostile or broken peer can hold
//! (what they do is `crate::connections`'s), read once at start-up.

use std::time::Duration;

use floodgate::duration::SpecDuration;
use serde::Deserialize;

use super::ConfigFileError;

/// The `connections` section (see `crate::connections`).
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
    /// The longest `user` and `endpoint` of `/v1/evaluate` and `key` of `/v1/check`, in bytes
    /// (1 to 65,536; default 1,024): each becomes part of a key in the store, one per user.
    pub max_key_bytes: usize,
    /// How old a gRPC connection may grow (each within ±10% of it) before it is asked to go
    /// away, so that clients spread over new nodes (envoyproxy/ratelimit's
    /// `GRPC_MAX_CONNECTION_AGE`); absent (the default): never.
    pub grpc_max_age: Option<SpecDuration>,
    /// How long a gRPC connection asked to go away for its age may finish its calls before it
    /// is closed (`GRPC_MAX_CONNECTION_AGE_GRACE`; default 1 h).
    pub grpc_max_age_grace: SpecDuration,
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
            max_key_bytes: 1024,
            grpc_max_age: None,
            grpc_max_age_grace: SpecDuration(Duration::from_secs(3600)),
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
        if !(1..=65_536).contains(&self.max_key_bytes) {
            return bad(
                "max_key_bytes",
                self.max_key_bytes.to_string(),
                "1 to 65536",
            );
        }
        if self.grpc_max_age.is_some_and(|age| age.0.is_zero()) {
            return bad(
                "grpc_max_age",
                "0".into(),
                "above 0; leave it out for no maximum",
            );
        }
        Ok(())
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
}
