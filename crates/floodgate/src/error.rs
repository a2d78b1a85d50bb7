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
    /// A name that should be one of a known set is not (a request field in a condition or a
    /// key template, say).
    #[error("unknown field `{name}`: the fields are {known}")]
    UnknownField {
        /// The name as written.
        name: String,
        /// The names accepted, for people.
        known: &'static str,
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
    /// The store answered the call with an error instead of running it: a replica that takes
    /// no writes, a server out of memory, one that stopped writes after a failed save, a user
    /// without the permission, … ([`Rejection`] classifies it, as the store that answered
    /// reads its answer). It is a failure of the store, not of one key: the same call fails
    /// for every key until the store (or the settings) change.
    #[error("the store refused the call ({code}): {message}")]
    Rejected {
        /// What kind of rejection it is, whatever the store.
        rejection: Rejection,
        /// The store's own name for it (Redis's error code: `READONLY`, `OOM`, …).
        code: &'static str,
        /// The store's own words, with any password scrubbed, and what to do about it.
        message: String,
    },
}

/// Why a store server that answers does not run a call, classified by the store that got the
/// answer (the Redis store from its error codes): what [`StoreError::Rejected`] carries, so
/// that an operator sees *why*, and metrics count it under one name whatever the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rejection {
    /// The server is a replica, and replicas take no writes (a failover demoted it, or the
    /// URL names a replica).
    ReadOnly,
    /// The server is out of memory and evicts nothing to make room.
    OutOfMemory,
    /// The server stopped taking writes after failing to save to disk.
    WritesStopped,
    /// The user may not run a command, or touch a key, that the call needs.
    NoPermission,
    /// The server is blocked by a long-running call (a script past its time limit).
    Busy,
    /// One call touched keys that live on different servers of a cluster.
    CrossSlot,
    /// The server keeps no script, even when sent one.
    NoScript,
    /// The server is loading its data set after a restart.
    Loading,
    /// A replica that lost its master and serves no stale data.
    MasterDown,
    /// The cluster is down: part of the key space has no server.
    ClusterDown,
    /// Keys are being moved between servers, and the call was refused for the time being.
    TryAgain,
    /// Any other error answer (a script error, an unknown command, …).
    Other,
}

impl Rejection {
    /// Every rejection, in the order metrics list them.
    pub const ALL: [Rejection; 12] = [
        Rejection::ReadOnly,
        Rejection::OutOfMemory,
        Rejection::WritesStopped,
        Rejection::NoPermission,
        Rejection::Busy,
        Rejection::CrossSlot,
        Rejection::NoScript,
        Rejection::Loading,
        Rejection::MasterDown,
        Rejection::ClusterDown,
        Rejection::TryAgain,
        Rejection::Other,
    ];

    /// Its name in metrics and logs (`readonly`, `oom`, `misconf`, `noperm`, …; `error_reply`
    /// for [`Rejection::Other`]): Redis's codes in lower case, the first store that had them.
    pub fn name(self) -> &'static str {
        match self {
            Rejection::ReadOnly => "readonly",
            Rejection::OutOfMemory => "oom",
            Rejection::WritesStopped => "misconf",
            Rejection::NoPermission => "noperm",
            Rejection::Busy => "busy",
            Rejection::CrossSlot => "crossslot",
            Rejection::NoScript => "noscript",
            Rejection::Loading => "loading",
            Rejection::MasterDown => "masterdown",
            Rejection::ClusterDown => "clusterdown",
            Rejection::TryAgain => "tryagain",
            Rejection::Other => "error_reply",
        }
    }

    /// Whether the store may stop refusing by itself (a failover completing, memory freed, a
    /// load ending); the others need a change of settings first.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            Rejection::ReadOnly
                | Rejection::OutOfMemory
                | Rejection::Busy
                | Rejection::Loading
                | Rejection::MasterDown
                | Rejection::ClusterDown
                | Rejection::TryAgain
        )
    }
}

impl StoreError {
    /// Whether retrying the same call later may succeed by itself (connection and timeout
    /// failures, and the rejections of [`Rejection::is_transient`]); authentication and protocol
    /// failures need a change of settings first.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Rejected { rejection, .. } => rejection.is_transient(),
            _ => matches!(
                self,
                StoreError::Unavailable(_)
                    | StoreError::Timeout(_)
                    | StoreError::Refused(_)
                    | StoreError::BreakerOpen { .. }
            ),
        }
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
                | StoreError::Rejected { .. }
                | StoreError::BreakerOpen { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejections_have_distinct_names_and_say_the_stores_code() {
        for rejection in Rejection::ALL {
            let same = Rejection::ALL
                .iter()
                .filter(|r| r.name() == rejection.name());
            assert_eq!(same.count(), 1, "{}", rejection.name());
        }
        let e = StoreError::Rejected {
            rejection: Rejection::ReadOnly,
            code: "READONLY",
            message: "You can't write against a read only replica.".into(),
        };
        assert!(e.is_store_failure() && e.is_transient());
        assert!(e
            .to_string()
            .starts_with("the store refused the call (READONLY): You can't"));
        let e = StoreError::Rejected {
            rejection: Rejection::NoPermission,
            code: "NOPERM",
            message: String::new(),
        };
        assert!(e.is_store_failure() && !e.is_transient());
    }
}
