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
    /// The store could not be reached or answered with an error; the caller may retry.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store did not answer in time; the caller may retry.
    #[error("store timed out after {0:?}")]
    Timeout(std::time::Duration),
}

impl StoreError {
    /// Whether retrying the same call later may succeed (connection and timeout failures).
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable(_) | StoreError::Timeout(_))
    }
}
