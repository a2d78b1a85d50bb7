//! The store's connection: one Redis (redis-rs's `ConnectionManager`), one found through
//! sentinels ([`super::sentinel`]) or a Redis Cluster (redis-rs's cluster client), behind one
//! enum, so that calls, pipelines, timeouts and the breaker work the same on all.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::redacted;
use super::redirect::NodeConnections;
use super::sentinel::Sentinel;
use super::tls::TlsFiles;
use crate::ConfigError;

/// The URL scheme of a Redis Cluster.
const CLUSTER_SCHEME: &str = "redis-cluster://";
/// The URL scheme of a Redis Cluster over TLS.
const TLS_CLUSTER_SCHEME: &str = "rediss-cluster://";
/// The URL scheme of a Redis found through sentinels.
const SENTINEL_SCHEME: &str = "redis-sentinel://";
/// The same over TLS.
const TLS_SENTINEL_SCHEME: &str = "rediss-sentinel://";

/// Where the store's calls go.
pub(super) enum Connection {
    /// One Redis. The manager sits behind a lock only so that a `READONLY` answer (the server
    /// was demoted to a replica) can replace it with a fresh one; calls clone it out.
    Single(Box<Single>),
    /// A Redis Cluster: the client routes each command by its key's slot and refreshes its
    /// slot map after `MOVED`, `READONLY` and lost nodes; the store follows redirections over
    /// connections of its own to the nodes they name (module `redirect`).
    Cluster(ClusterConnection, std::sync::Arc<NodeConnections>),
    /// The master the sentinels name, asked again after a failure.
    Sentinel(Arc<Sentinel>),
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Connection::Single(_) => "Connection::Single",
            Connection::Cluster(..) => "Connection::Cluster",
            Connection::Sentinel(_) => "Connection::Sentinel",
        })
    }
}

/// One Redis: how to make a manager, and the current one with its generation.
pub(super) struct Single {
    client: redis::Client,
    config: ConnectionManagerConfig,
    current: RwLock<(u64, ConnectionManager)>,
}

/// One call's hold on the connection (a cheap clone), usable as a redis-rs connection.
#[derive(Clone)]
pub(super) enum Handle {
    /// The manager, and which one it was (see [`Connection::replace_if_readonly`]).
    Single(u64, ConnectionManager),
    /// The cluster connection.
    Cluster(ClusterConnection),
    /// The sentinels' master, resolved when the call is sent.
    Sentinel(Arc<Sentinel>),
}

impl Connection {
    /// A connection to `url` (`redis://…`, `rediss://…`, `unix://…`,
    /// `redis[s]-cluster://[user:password@]host:port,host:port,…` or
    /// `redis[s]-sentinel://…/master_name`), made by the first call. `tls` says what a TLS
    /// connection trusts and presents.
    ///
    /// Setting a connection up (TCP, TLS, `AUTH`, `SELECT`) is bounded by `connect_timeout`,
    /// apart from the calls' own `timeout`: a call gives up after its timeout, but the
    /// connection it waited for goes on being made in the background, so that a handshake
    /// slower than one call (a busy node, a first TLS handshake) still completes.
    pub(super) fn new(
        url: &str,
        timeout: Duration,
        connect_timeout: Duration,
        tls: TlsFiles,
    ) -> Result<Connection, ConfigError> {
        if let Some(rest) = url.strip_prefix(CLUSTER_SCHEME) {
            return cluster(url, rest, timeout, connect_timeout, None);
        }
        if let Some(rest) = url.strip_prefix(TLS_CLUSTER_SCHEME) {
            return cluster(url, rest, timeout, connect_timeout, Some(&tls));
        }
        let bad_url = || {
            ConfigError::invalid(
                "url",
                redacted(url),
                "must be redis://host:port[/db], rediss://host:port[/db], \
                 redis-cluster://host:port,host:port,… or redis-sentinel://host:port,…/master",
            )
        };
        // No response timeout of the client's own: every call is bounded by the store's
        // (`guarded`), and a cached store's sync, which may carry thousands of keys, by its
        // own longer one; a client-side timeout would cut the sync short while Redis still
        // runs it.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(None)
            .set_number_of_retries(0)
            .set_max_delay(timeout);
        if let Some(rest) = url.strip_prefix(SENTINEL_SCHEME) {
            let sentinel = Sentinel::new(url, rest, None, config)?;
            return Ok(Connection::Sentinel(Arc::new(sentinel)));
        }
        if let Some(rest) = url.strip_prefix(TLS_SENTINEL_SCHEME) {
            let sentinel = Sentinel::new(url, rest, Some(&tls), config)?;
            return Ok(Connection::Sentinel(Arc::new(sentinel)));
        }
        let client = tls.client(url).map_err(|_| bad_url())?;
        let manager = lazy_manager(&client, &config, url)?;
        Ok(Connection::Single(Box::new(Single {
            client,
            config,
            current: RwLock::new((0, manager)),
        })))
    }

    /// A handle for one call.
    pub(super) fn handle(&self) -> Handle {
        match self {
            Connection::Single(single) => {
                let guard = single.current.read().unwrap_or_else(|e| e.into_inner());
                Handle::Single(guard.0, guard.1.clone())
            }
            Connection::Cluster(cluster, _) => Handle::Cluster(cluster.clone()),
            Connection::Sentinel(sentinel) => Handle::Sentinel(sentinel.clone()),
        }
    }

    /// After a call failed on the link (refused, reset, timed out): a Sentinel's master is
    /// asked for again before the next call (a failover may have moved it). Nothing for the
    /// others: their clients reconnect by themselves.
    pub(super) fn link_failed(&self) {
        if let Connection::Sentinel(sentinel) = self {
            sentinel.failed();
        }
    }

    /// Whether the master is found through sentinels.
    pub(super) fn is_sentinel(&self) -> bool {
        matches!(self, Connection::Sentinel(_))
    }

    /// Whether this is a cluster.
    pub(super) fn is_cluster(&self) -> bool {
        matches!(self, Connection::Cluster(..))
    }

    /// On a cluster, the store's own connections to the nodes redirections name.
    pub(super) fn nodes(&self) -> Option<&std::sync::Arc<NodeConnections>> {
        match self {
            Connection::Cluster(_, nodes) => Some(nodes),
            _ => None,
        }
    }

    /// After `handle` got `READONLY` from a single Redis (it was demoted to a replica, and the
    /// manager would keep using its connection to it): replaces the manager with a fresh one,
    /// which connects anew (to whatever the URL points at now) at once. Only once per
    /// manager, however many calls saw the answer. The cluster client handles `READONLY`
    /// itself (it refreshes its slot map and retries).
    pub(super) fn replace_if_readonly(&self, handle: &Handle) {
        if let Connection::Sentinel(sentinel) = self {
            sentinel.failed(); // the sentinels know where the master went
            return;
        }
        let (Connection::Single(single), Handle::Single(used, _)) = (self, handle) else {
            return;
        };
        let mut guard = single.current.write().unwrap_or_else(|e| e.into_inner());
        if guard.0 != *used {
            return;
        }
        // Building a lazy manager only fails for URLs `new` already accepted.
        if let Ok(fresh) = lazy_manager(&single.client, &single.config, "") {
            *guard = (used.wrapping_add(1), fresh);
        }
    }
}

/// A manager that connects in the background, at once when a Tokio runtime is at hand, else
/// on its first call. Nothing but a call would drive a lazy manager's first connection, and a
/// call drops it when it gives up: a set-up slower than one call's timeout would start again
/// with every call and never finish.
fn lazy_manager(
    client: &redis::Client,
    config: &ConnectionManagerConfig,
    url: &str,
) -> Result<ConnectionManager, ConfigError> {
    let manager = ConnectionManager::new_lazy_with_config(client.clone(), config.clone())
        .map_err(|_| ConfigError::invalid("url", redacted(url), "could not set up a client"))?;
    connect_in_background(&manager);
    Ok(manager)
}

/// Starts `manager`'s first connection on the current Tokio runtime, if there is one (see
/// [`lazy_manager`]).
pub(super) fn connect_in_background(manager: &ConnectionManager) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let mut connecting = manager.clone();
        runtime.spawn(async move {
            // Its outcome is what the first call sees; a failure is reported there.
            let _ = redis::cmd("PING")
                .query_async::<redis::Value>(&mut connecting)
                .await;
        });
    }
}

/// The cluster connection for `url` = `redis[s]-cluster://` + `rest`, over TLS with `tls`.
fn cluster(
    url: &str,
    rest: &str,
    timeout: Duration,
    connect_timeout: Duration,
    tls: Option<&TlsFiles>,
) -> Result<Connection, ConfigError> {
    let invalid = |reason| ConfigError::invalid("url", redacted(url), reason);
    let (user_info, hosts) = match rest.rsplit_once('@') {
        Some((user_info, hosts)) => (Some(user_info), hosts),
        None => (None, rest),
    };
    let hosts = hosts.strip_suffix('/').unwrap_or(hosts);
    if hosts.is_empty() || hosts.contains('/') {
        return Err(invalid(
            "must be redis-cluster://[user:password@]host:port,host:port,… (no database)",
        ));
    }
    let scheme = if tls.is_some() { "rediss" } else { "redis" };
    let nodes: Vec<String> = hosts
        .split(',')
        .map(|host| match user_info {
            Some(user_info) => format!("{scheme}://{user_info}@{host}"),
            None => format!("{scheme}://{host}"),
        })
        .collect();
    if nodes.iter().any(|n| n.ends_with("//") || n.ends_with('@')) {
        return Err(invalid("has an empty host"));
    }
    let millis = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let mut builder = ClusterClientBuilder::new(nodes);
    if let Some(tls) = tls {
        builder = builder
            .tls(redis::TlsMode::Secure)
            .danger_accept_invalid_hostnames(tls.skip_hostname_verification);
        if let Some(certificates) = tls.certificates() {
            builder = builder.certs(certificates);
        }
    }
    let client = builder
        .connection_timeout(connect_timeout)
        .response_timeout(timeout)
        // No retries of the client's own: after a lost connection or a response timeout it
        // would send again a call that may have run, counting it twice. The store sends again
        // only what Redis said did not run (redirects, TRYAGAIN, CLUSTERDOWN: see
        // `Inner::send_script`); the client still refreshes its slot map after a MOVED.
        .retries(0)
        .min_retry_wait(1)
        .max_retry_wait(millis.clamp(2, 1_000))
        .build()
        .map_err(|_| invalid("must be redis[s]-cluster://[user:password@]host:port,host:port,…"))?;
    let config = ClusterConfig::new()
        .set_connection_timeout(connect_timeout)
        .set_response_timeout(timeout);
    Ok(Connection::Cluster(
        client.get_pending_async_connection_with_config(config),
        std::sync::Arc::new(NodeConnections::new(user_info, tls, connect_timeout)),
    ))
}

impl ConnectionLike for Handle {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Handle::Single(_, manager) => manager.req_packed_command(cmd),
            Handle::Cluster(cluster) => cluster.req_packed_command(cmd),
            Handle::Sentinel(sentinel) => {
                Box::pin(async move { sentinel.manager().await?.req_packed_command(cmd).await })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Handle::Single(_, manager) => manager.req_packed_commands(pipeline, offset, count),
            Handle::Cluster(cluster) => cluster.req_packed_commands(pipeline, offset, count),
            Handle::Sentinel(sentinel) => Box::pin(async move {
                sentinel
                    .manager()
                    .await?
                    .req_packed_commands(pipeline, offset, count)
                    .await
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Handle::Single(_, manager) => manager.get_db(),
            Handle::Cluster(cluster) => cluster.get_db(),
            Handle::Sentinel(sentinel) => sentinel.db(),
        }
    }
}
