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
//! Nothing else is sent twice: a lost connection or a timeout may come after the call ran.
//!
//! A call goes first to the master the store's own slot map names (`nodes.rs`), over a
//! connection of the store's own to it ([`NodeConnections`], opened in the background with the
//! cluster's TLS and credentials; until it is, through the cluster client), and redirected
//! calls go the same way to the node named: a
//! node that just joined may not be in the cluster client's map yet, and the cluster client,
//! while its connection to a master is being made again, sends calls to a replica or to any
//! node it holds a connection to, which may be a node just removed and stopped. The cluster
//! client carries calls only until the store's map is first known. Each redirection followed
//! is counted by kind ([`RedirectStats`]), apart from failures.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};

use super::connection::Handle;
use super::link::is;
use super::tls::TlsFiles;
use super::Inner;

/// Where the next send of a call goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// To the master the store's slot map names (else through the cluster client): the first
    /// send, and the next after a `TRYAGAIN` or a cluster down.
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

    /// The pause before the `attempt`-th send (2 and up): after a `TRYAGAIN` or a cluster
    /// down, 1 ms doubling up to 32 ms, so that a move or an election has time to end while
    /// the call's timeout bounds the whole; after a redirection to a node, none for the first
    /// three sends (a `MOVED` then an `ASK` is the common worst case), then the same as after
    /// a `TRYAGAIN`: redirections that keep coming mean a move under way (source and target
    /// pointing at each other for a moment, or `ASK` and `TRYAGAIN` in turn while a call's
    /// keys are split between them), not a route to hurry along.
    pub(super) fn pause(&self, attempt: u32) -> Duration {
        let backoff = Duration::from_millis(1 << attempt.saturating_sub(2).min(5));
        match self {
            Redirect::Moved(_) | Redirect::Ask(_) if attempt <= 4 => Duration::ZERO,
            _ => backoff,
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

/// The store's own connections to cluster nodes, one per address, with the cluster's scheme,
/// credentials and TLS files: to the masters of the store's slot map, opened in the
/// background, and to a node a redirection names, made when it is first named; kept while the
/// node is a master of the map.
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

    /// The connection to the node at `address`, if one is open: a call routed by the store's
    /// slot map never waits for a connection to be made (see
    /// [`NodeConnections::open_in_background`]).
    pub(super) fn opened(&self, address: &str) -> Option<ConnectionManager> {
        self.lock().get(address).cloned()
    }

    /// Opens a connection, in the background, to each of `addresses` (a slot map's masters)
    /// that has none, so that calls find them open.
    pub(super) fn open_in_background<'a>(
        self: &Arc<Self>,
        addresses: impl Iterator<Item = &'a str>,
    ) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        for address in addresses {
            if self.lock().contains_key(address) {
                continue;
            }
            let (nodes, address) = (self.clone(), address.to_string());
            tokio::spawn(async move {
                if let Err(error) = nodes.to(&address).await {
                    tracing::debug!(%error, node = %address, "cannot connect to a cluster master yet; calls on its slots go through the cluster client meanwhile");
                }
            });
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

    /// Closes the connections to nodes other than `masters` (the masters of a new slot map):
    /// a node that left the map is drained, demoted or stopped, and a redirection naming it
    /// again connects anew.
    pub(super) fn keep_only<'a>(&self, masters: impl Iterator<Item = &'a str>) {
        let masters: std::collections::HashSet<&str> = masters.collect();
        self.lock()
            .retain(|address, _| masters.contains(address.as_str()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ConnectionManager>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The most times one call is sent on a cluster (see [`Inner::send_script`]): a bound against
/// a loop of redirections only. A call on several keys of a slot being moved key by key meets
/// `ASK` and `TRYAGAIN` in turn until its last key has moved, which may take the whole move;
/// the pauses between sends (see [`super::redirect::Redirect::pause`]) add up to over 3 s
/// before this bound is reached, so the call's timeout bounds it first.
const SENDS: u32 = 100;

impl Inner {
    /// [`Inner::send_script`], following `MOVED` and `ASK` only when `follow` says so (else a
    /// call answered with them comes back as it was answered; `TRYAGAIN` and the like are
    /// still waited out).
    pub(super) async fn send_following(
        &self,
        handle: &mut Handle,
        command: impl Fn(bool) -> redis::Cmd,
        follow: bool,
    ) -> RedisResult<Value> {
        let mut route = Route::BySlot;
        let mut sends = 1;
        loop {
            let result = self.send_routed(handle, &route, &command).await;
            let redirect = match &result {
                Err(e) if self.connection.is_cluster() && sends < SENDS => Redirect::of(e)
                    .filter(|r| follow || matches!(r, Redirect::TryAgain | Redirect::Down)),
                _ => None,
            };
            let Some(redirect) = redirect else {
                if let Err(e) = &result {
                    if is(e, ServerErrorKind::ReadOnly) {
                        self.read_only_answered(handle);
                    }
                }
                return result;
            };
            self.redirects.count(&redirect);
            if matches!(redirect, Redirect::Moved(_)) {
                if let Some(nodes) = &self.nodes {
                    nodes.failed();
                }
            }
            sends += 1;
            let pause = redirect.pause(sends);
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            route = redirect.route();
        }
    }

    /// One send of `command` (and of its source after `NOSCRIPT`) along `route`: to a node by
    /// address (`ASKING` first after an `ASK`), or by slot: to the master the store's own slot
    /// map names when it is known, else through the cluster client (or the one connection).
    /// See the module's documentation for why the store's map comes first.
    async fn send_routed(
        &self,
        handle: &mut Handle,
        route: &Route,
        command: &impl Fn(bool) -> redis::Cmd,
    ) -> RedisResult<Value> {
        let (address, asking) = match route {
            Route::Node(address) => (address.clone(), false),
            Route::Asking(address) => (address.clone(), true),
            Route::BySlot => {
                // Built once: its key names the master, and it is what is sent.
                let first = command(false);
                let mapped = self.mapped_master(&first);
                if let Some((address, nodes)) = mapped.zip(self.connection.nodes()) {
                    match nodes.opened(&address) {
                        Some(node) => return send_script_to(node, first, command, false).await,
                        // Not open yet: made in the background, this call goes through the
                        // cluster client.
                        None => nodes.open_in_background(std::iter::once(address.as_str())),
                    }
                }
                return match first.query_async(handle).await {
                    Err(e) if is(&e, ServerErrorKind::NoScript) => {
                        command(true).query_async(handle).await
                    }
                    other => other,
                };
            }
        };
        let Some(nodes) = self.connection.nodes() else {
            return command(false).query_async(handle).await;
        };
        let node = nodes.to(&address).await?;
        send_script_to(node, command(false), command, asking).await
    }

    /// The address of the master serving the first key of `command` in the store's slot map,
    /// on a cluster whose map is known: the key after the key count of an `EVALSHA` or `EVAL`,
    /// the first argument of any other command the store sends by slot (`GET`, `SET`).
    fn mapped_master(&self, command: &redis::Cmd) -> Option<String> {
        let mut args = command.args_iter().map(|arg| match arg {
            redis::Arg::Simple(bytes) => Some(bytes),
            _ => None,
        });
        let name = args.next()??;
        if name.eq_ignore_ascii_case(b"EVALSHA") || name.eq_ignore_ascii_case(b"EVAL") {
            let _script = args.next()??;
            let keys: usize = std::str::from_utf8(args.next()??).ok()?.parse().ok()?;
            if keys == 0 {
                return None;
            }
        }
        self.slot_master(redis::cluster_routing::Slot::for_key(args.next()??))
    }

    /// The address of the master serving `slot` in the store's slot map, on a cluster whose
    /// map is known.
    pub(super) fn slot_master(&self, slot: redis::cluster_routing::Slot) -> Option<String> {
        let nodes = self.nodes.as_ref()?;
        self.connection.nodes()?;
        nodes.address(slot)
    }
}

/// Sends `first` (a call of a script by its SHA, as `command(false)` builds it) on `node`, and
/// the script's source, `command(true)`, after `NOSCRIPT` (see [`send_to`]).
async fn send_script_to(
    mut node: ConnectionManager,
    first: redis::Cmd,
    command: &impl Fn(bool) -> redis::Cmd,
    asking: bool,
) -> RedisResult<Value> {
    match send_to(&mut node, first, asking).await {
        Err(e) if is(&e, ServerErrorKind::NoScript) => {
            send_to(&mut node, command(true), asking).await
        }
        other => other,
    }
}

/// Sends `command` on `node`, preceded by `ASKING` in the same write when `asking`: Redis's
/// answer to `command` (its error as Redis gave it, for the caller to read a redirection).
async fn send_to(
    node: &mut redis::aio::ConnectionManager,
    command: redis::Cmd,
    asking: bool,
) -> RedisResult<Value> {
    if !asking {
        return command.query_async(node).await;
    }
    let mut pipe = redis::pipe();
    pipe.cmd("ASKING").ignore().add_command(command);
    let replies: Vec<RedisResult<Value>> = pipe.query_async(node).await?;
    replies.into_iter().next().unwrap_or_else(|| {
        Err(RedisError::from((
            ErrorKind::Parse,
            "no answer to the call",
        )))
    })
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
        assert_eq!(Redirect::Ask("a:1".into()).pause(4), Duration::ZERO);
        assert_eq!(
            Redirect::Moved("a:1".into()).pause(5),
            Duration::from_millis(8)
        );
    }
}
