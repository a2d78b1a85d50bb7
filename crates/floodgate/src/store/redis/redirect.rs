//! Following a Redis Cluster's redirections while its slots move between masters (a master
//! added and filled, a hot slot moved, a master drained, a failover): none of them is a
//! failure of the store, and a call meeting one is sent where Redis says, within its timeout.
//!
//! - `MOVED slot host:port`: the slot lives elsewhere now. The call goes to that node, and the
//!   slot map is asked for again (the cluster client's, which it refreshes after a `MOVED`,
//!   and the store's own, once per burst: see `nodes.rs`).
//! - `ASK slot host:port`: the slot is being moved and the key is not (or no longer) on the
//!   source. The call goes to the target as `ASKING` then the call, in one write on one
//!   connection, so that nothing else takes the `ASKING`.
//! - `TRYAGAIN`: a call on several keys of a slot being moved, some moved and some not; it
//!   is sent again after a short pause, until the move ends. `CLUSTERDOWN`, `MASTERDOWN` and
//!   `LOADING` (a failover under way, a node loading its data) the same.
//!
//! Every one of them says the call did not run, so sending it again never counts it twice.
//! Redirected calls go over connections of the store's own to the named nodes
//! ([`NodeConnections`]), made on first use, with the cluster's TLS and credentials: a node
//! that just joined may not be in the cluster client's map yet. Each redirection followed is
//! counted by kind ([`RedirectStats`]), apart from failures.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind};

use super::tls::TlsFiles;

/// Where the next send of a call goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// Where the cluster client's slot map says (the first send).
    BySlot,
    /// To the node at this address (after `MOVED`).
    Node(String),
    /// To the node at this address, preceded by `ASKING` (after `ASK`).
    Asking(String),
}

/// What a failed send says to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Redirect {
    /// `MOVED` to this address.
    Moved(String),
    /// `ASK` at this address.
    Ask(String),
    /// `TRYAGAIN`: the same again, after a pause.
    TryAgain,
    /// `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`: the same again, after a pause.
    Down,
}

impl Redirect {
    /// The redirection `e` asks for, if it is one.
    pub(super) fn of(e: &RedisError) -> Option<Redirect> {
        let address = || e.redirect_node().map(|(address, _)| address.to_string());
        match e.kind() {
            ErrorKind::Server(ServerErrorKind::Moved) => address().map(Redirect::Moved),
            ErrorKind::Server(ServerErrorKind::Ask) => address().map(Redirect::Ask),
            ErrorKind::Server(ServerErrorKind::TryAgain) => Some(Redirect::TryAgain),
            ErrorKind::Server(
                ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::BusyLoading,
            ) => Some(Redirect::Down),
            _ => None,
        }
    }

    /// Where the next send goes.
    pub(super) fn route(&self) -> Route {
        match self {
            Redirect::Moved(address) => Route::Node(address.clone()),
            Redirect::Ask(address) => Route::Asking(address.clone()),
            Redirect::TryAgain | Redirect::Down => Route::BySlot,
        }
    }

    /// The pause before the `attempt`-th send (2 and up): none after a redirection to a
    /// node, else 1 ms doubling up to 32 ms, so that a move or an election has time to end
    /// while the call's timeout bounds the whole.
    pub(super) fn pause(&self, attempt: u32) -> Duration {
        match self {
            Redirect::Moved(_) | Redirect::Ask(_) => Duration::ZERO,
            Redirect::TryAgain | Redirect::Down => {
                Duration::from_millis(1 << attempt.saturating_sub(2).min(5))
            }
        }
    }
}

/// Redirections followed since the store was built, by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RedirectStats {
    /// `MOVED`: a slot found on another master.
    pub moved: u64,
    /// `ASK`: a key of a slot being moved, found on its new master.
    pub ask: u64,
    /// `TRYAGAIN`: a call on a slot being moved, sent again once its keys were together.
    pub try_again: u64,
    /// `CLUSTERDOWN`, `MASTERDOWN` or `LOADING`: sent again once the cluster served the slot.
    pub cluster_down: u64,
    /// Batches of decisions on several slots that found one of them moving or served
    /// elsewhere before running anything, and went request by request instead.
    pub split: u64,
}

/// The counts behind [`RedirectStats`].
#[derive(Debug, Default)]
pub(super) struct RedirectCounts {
    moved: AtomicU64,
    ask: AtomicU64,
    try_again: AtomicU64,
    cluster_down: AtomicU64,
    split: AtomicU64,
}

impl RedirectCounts {
    /// Counts one `redirect` followed.
    pub(super) fn count(&self, redirect: &Redirect) {
        let counter = match redirect {
            Redirect::Moved(_) => &self.moved,
            Redirect::Ask(_) => &self.ask,
            Redirect::TryAgain => &self.try_again,
            Redirect::Down => &self.cluster_down,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one batch sent request by request after all (see [`RedirectStats::split`]).
    pub(super) fn split(&self) {
        self.split.fetch_add(1, Ordering::Relaxed);
    }

    /// What was counted so far.
    pub(super) fn stats(&self) -> RedirectStats {
        RedirectStats {
            moved: self.moved.load(Ordering::Relaxed),
            ask: self.ask.load(Ordering::Relaxed),
            try_again: self.try_again.load(Ordering::Relaxed),
            cluster_down: self.cluster_down.load(Ordering::Relaxed),
            split: self.split.load(Ordering::Relaxed),
        }
    }
}

/// The store's own connections to cluster nodes named by redirections, one per address, each
/// made on first use with the cluster's scheme, credentials and TLS files, and kept.
pub(super) struct NodeConnections {
    /// `redis` or `rediss`.
    scheme: &'static str,
    /// `user:password` or `:password`, as the cluster URL gives it.
    user_info: Option<String>,
    tls: Option<TlsFiles>,
    config: ConnectionManagerConfig,
    open: Mutex<HashMap<String, ConnectionManager>>,
}

impl std::fmt::Debug for NodeConnections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner()).len();
        f.debug_struct("NodeConnections")
            .field("scheme", &self.scheme)
            .field("open", &open)
            .finish()
    }
}

impl NodeConnections {
    /// Connections as the cluster's: over TLS with `tls`, with `user_info` (the URL's
    /// `user:password`, never shown), set up within `connect_timeout`.
    pub(super) fn new(
        user_info: Option<&str>,
        tls: Option<&TlsFiles>,
        connect_timeout: Duration,
    ) -> NodeConnections {
        NodeConnections {
            scheme: if tls.is_some() { "rediss" } else { "redis" },
            user_info: user_info.map(str::to_string),
            tls: tls.cloned(),
            // No response timeout and no retries of its own, as every other connection of the
            // store: the call's timeout bounds it, and nothing is sent twice behind its back.
            config: ConnectionManagerConfig::new()
                .set_connection_timeout(Some(connect_timeout))
                .set_response_timeout(None)
                .set_number_of_retries(0),
            open: Mutex::new(HashMap::new()),
        }
    }

    /// The connection to the node at `address` (`host:port`), made now if there is none.
    pub(super) async fn to(&self, address: &str) -> RedisResult<ConnectionManager> {
        if let Some(open) = self.lock().get(address) {
            return Ok(open.clone());
        }
        let url = match &self.user_info {
            Some(user_info) => format!("{}://{user_info}@{address}", self.scheme),
            None => format!("{}://{address}", self.scheme),
        };
        let client = match &self.tls {
            Some(tls) => tls.client(&url)?,
            None => redis::Client::open(url)?,
        };
        let made = ConnectionManager::new_with_config(client, self.config.clone()).await?;
        Ok(self
            .lock()
            .entry(address.to_string())
            .or_insert(made)
            .clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ConnectionManager>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(code: &str, detail: &str) -> RedisError {
        redis::make_extension_error(code.to_string(), Some(detail.to_string()))
    }

    #[test]
    fn each_redirection_names_where_the_call_goes_next() {
        let moved = RedisError::from((
            ErrorKind::Server(ServerErrorKind::Moved),
            "An error was signalled by the server",
            "3999 127.0.0.1:7001".to_string(),
        ));
        assert_eq!(
            Redirect::of(&moved),
            Some(Redirect::Moved("127.0.0.1:7001".into()))
        );
        let ask = RedisError::from((
            ErrorKind::Server(ServerErrorKind::Ask),
            "An error was signalled by the server",
            "3999 127.0.0.1:7002".to_string(),
        ));
        assert_eq!(
            Redirect::of(&ask).map(|r| r.route()),
            Some(Route::Asking("127.0.0.1:7002".into()))
        );
        let again = RedisError::from((ErrorKind::Server(ServerErrorKind::TryAgain), "TRYAGAIN"));
        assert_eq!(Redirect::of(&again), Some(Redirect::TryAgain));
        assert_eq!(Redirect::of(&answered("ERR", "anything")), None);
        assert_eq!(Redirect::TryAgain.pause(2), Duration::from_millis(1));
        assert_eq!(Redirect::TryAgain.pause(9), Duration::from_millis(32));
        assert_eq!(Redirect::Ask("a:1".into()).pause(5), Duration::ZERO);
    }
}
