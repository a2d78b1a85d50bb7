//! Typed errors. Invalid configuration names the field and the value; store errors say whether
//! the caller may retry, which is what a fail-open decision needs.

use crate::OpKind;

/// A parameter was rejected when building an algorithm, limiter or store.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A parameter has a value outside its domain.
    #[error("invalid value for `{field}`: {value} ({reason})")]
    Invalid {
        /// The parameter's name, as written in a spec or config file.
        field: &'static str,
        /// The rejected value, as the user wrote it.
        value: String,
        /// What the value must be.
        reason: &'static str,
    },
    /// A required parameter is absent.
    #[error("missing parameter `{field}`")]
    Missing {
        /// The parameter's name.
        field: &'static str,
    },
}

impl ConfigError {
    /// Shorthand for [`ConfigError::Invalid`].
    pub fn invalid(field: &'static str, value: impl ToString, reason: &'static str) -> Self {
        ConfigError::Invalid {
            field,
            value: value.to_string(),
            reason,
        }
    }
}

/// A store could not apply a transition. Never a denial: denials are [`crate::Decision`]s.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The algorithm does not implement this operation (for example `reserve` on a fixed
    /// window). Nothing was changed.
    #[error("the {algorithm} algorithm does not support the `{op}` operation")]
    Unsupported {
        /// The algorithm's name.
        algorithm: &'static str,
        /// The refused operation.
        op: OpKind,
    },
    /// The key holds the state of another algorithm: two limiters of different algorithms
    /// share one namespace. Nothing was changed; give each limiter its own namespace.
    #[error("the key holds {found} state, which the {algorithm} algorithm cannot use (two limiters share one namespace)")]
    StateConflict {
        /// The algorithm that was asked to apply the operation.
        algorithm: &'static str,
        /// The algorithm whose state the key holds.
        found: &'static str,
    },
    /// This store cannot run the algorithm (or these parameters of it) yet, for example an
    /// algorithm that has no Redis script. Refused before anything was sent: nothing was changed.
    #[error("the {store} store cannot run the {algorithm} algorithm: {reason}")]
    NotOnStore {
        /// The store's kind (`"redis"`).
        store: &'static str,
        /// The algorithm's name.
        algorithm: &'static str,
        /// Why, in a few words.
        reason: &'static str,
    },
    /// The store could not be reached, answered with an error, or is not taking calls now
    /// (its circuit breaker is open, a failover is under way); the caller may retry.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store did not answer in time; the caller may retry.
    #[error("store timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// No connection could be made: it was refused (nothing listens on that port), or the host
    /// is unknown or unreachable. The caller may retry; it succeeds once the store is up.
    #[error("cannot connect to the store: {0}")]
    Refused(String),
    /// The store refused this client's credentials: it requires a password and none was given,
    /// or the user name or password is wrong, or the user may not run what Floodgate runs.
    /// Retrying does not help until the settings (or the store's) change.
    #[error("the store refused to authenticate: {0}")]
    Auth(String),
    /// The store's circuit breaker is open after `failures` link failures in a row: the call
    /// was refused without touching the network. The caller may retry; the breaker lets a
    /// call probe the store once its cool-down has passed.
    #[error("store unavailable: circuit breaker open after {failures} consecutive failures; not calling the store")]
    BreakerOpen {
        /// The failures in a row that opened it (the breaker's threshold).
        failures: u32,
    },
    /// The store answered, but not as the server Floodgate needs: it does not speak the
    /// protocol (another kind of server on that port, TLS against a plain port or the
    /// reverse), or it refused a step of the connection's set-up (a database index it does not
    /// have). Retrying does not help until the settings (or the store's) change.
    #[error("the store did not answer as expected: {0}")]
    Protocol(String),
}

impl StoreError {
    /// Whether retrying the same call later may succeed by itself (connection and timeout
    /// failures); authentication and protocol failures need a change of settings first.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(_)
                | StoreError::Timeout(_)
                | StoreError::Refused(_)
                | StoreError::BreakerOpen { .. }
        )
    }

    /// Whether this is a failure of the store itself (it could not be reached, used or heard
    /// from in time), rather than a refusal of one operation made before or without touching
    /// state ([`StoreError::Unsupported`], [`StoreError::StateConflict`],
    /// [`StoreError::NotOnStore`]). A failure of the store says it is not healthy now.
    pub fn is_store_failure(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(_)
                | StoreError::Timeout(_)
                | StoreError::Refused(_)
                | StoreError::Auth(_)
                | StoreError::Protocol(_)
                | StoreError::BreakerOpen { .. }
        )
    }
}
