//! The layer's errors: the inner service's, a local refusal, or an attempt timeout.

use std::fmt;
use std::time::Duration;

/// A boxed error of the inner service.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why the layer did not send a request.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum LocalRefusal {
    /// The host's limits would have held the request back longer than `max_wait`.
    WouldWait {
        /// The host (`scheme://authority`).
        host: String,
        /// How long it would have had to wait.
        wait: Duration,
        /// The configured `max_wait`.
        max_wait: Duration,
    },
    /// Adaptive throttling refused it: the server has been refusing most requests.
    Throttled {
        /// The host.
        host: String,
        /// The probability of refusal at that moment.
        probability: f64,
    },
}

impl fmt::Display for LocalRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LocalRefusal::WouldWait {
                host,
                wait,
                max_wait,
            } => write!(
                f,
                "{host}'s limits would hold the request for {:.3} s, more than max_wait {:.3} s",
                wait.as_secs_f64(),
                max_wait.as_secs_f64()
            ),
            LocalRefusal::Throttled { host, probability } => write!(
                f,
                "{host} is refusing most requests; throttled locally (p = {probability:.2})"
            ),
        }
    }
}

/// An error of a [`Polite`](crate::Polite) service.
#[derive(Debug)]
#[non_exhaustive]
pub enum PoliteError {
    /// The inner service failed (after any retries the layer made).
    Service(BoxError),
    /// The layer did not send the request.
    Refused(LocalRefusal),
    /// The attempt had no response within `attempt_timeout`.
    TimedOut(Duration),
}

impl PoliteError {
    /// The local refusal, if that is what this is.
    pub fn refusal(&self) -> Option<&LocalRefusal> {
        match self {
            PoliteError::Refused(r) => Some(r),
            _ => None,
        }
    }
}

impl fmt::Display for PoliteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // The cause is the source, printed by whoever walks the chain: not here as well.
            PoliteError::Service(_) => f.write_str("the inner service failed"),
            PoliteError::Refused(r) => write!(f, "not sent: {r}"),
            PoliteError::TimedOut(d) => {
                write!(f, "no response within {:.3} s", d.as_secs_f64())
            }
        }
    }
}

impl std::error::Error for PoliteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PoliteError::Service(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report that walks the source chain (as anyhow, eyre and `tracing` do) shows the
    /// inner service's error once.
    #[test]
    fn the_inner_error_is_the_source_not_repeated_in_the_message() {
        let inner = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let e = PoliteError::Service(Box::new(inner));
        let mut report = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            report.push_str(": ");
            report.push_str(&cause.to_string());
            source = cause.source();
        }
        assert_eq!(report, "the inner service failed: reset by peer");
    }
}
