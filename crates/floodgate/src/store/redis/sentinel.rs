//! A Redis behind Sentinel: the master's address is asked of the sentinels, and asked again
//! after a call to it failed, so that a failover is followed.
//!
//! `redis-sentinel://[user:password@]host:port,host:port,…/master_name[/db][?sentinel_user=…&sentinel_pass=…]`
//! (`rediss-sentinel://` for TLS to the sentinels and the master alike). The user information
//! is the master's (and its replicas'); the sentinels' credentials, when they require some,
//! ride in the query.
//!
//! # Following a failover
//!
//! Calls go to one multiplexed connection to the master the sentinels named last. A call that
//! failed on the link (refused, reset, timed out) or was answered `READONLY` (the master was
//! demoted) marks the master *stale*; the next call asks the sentinels again, one call at a
//! time, before it is sent. The sentinels' answer is checked by redis-rs, which connects to
//! the address and confirms its `ROLE` is master. A new address gets a new connection; the
//! same address keeps the old one (it reconnects by itself). When no sentinel answers, the
//! last master known is used until the next failure.
//!
//! While the old master is gone and no replica is promoted yet (Sentinel's
//! `down-after-milliseconds` plus the election), calls fail as they would on a dead single
//! Redis: within the store's timeout, counted by the breaker, answered as each stage's
//! `on_store_error` says.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, RedisResult, TlsMode};

use super::passwords::percent_decoded;
use super::redacted;
use super::tls::TlsFiles;
use crate::ConfigError;

/// A master found through sentinels (see the [module documentation](self)).
pub(super) struct Sentinel {
    sentinels: tokio::sync::Mutex<SentinelClient>,
    config: ConnectionManagerConfig,
    skip_hostname: bool,
    db: i64,
    current: RwLock<Option<Master>>,
    stale: AtomicBool,
}

/// The master in use: its connection and address.
struct Master {
    manager: ConnectionManager,
    address: String,
}

impl Sentinel {
    /// The sentinels of `url` = `scheme://` + `rest` (see the [module
    /// documentation](self)); nothing is sent until the first call.
    pub(super) fn new(
        url: &str,
        rest: &str,
        tls: Option<&TlsFiles>,
        config: ConnectionManagerConfig,
    ) -> Result<Sentinel, ConfigError> {
        let invalid = |reason: &'static str| ConfigError::invalid("url", redacted(url), reason);
        let parts = SentinelUrl::parse(rest, &invalid)?;
        let db = parts.db;
        let sentinels = parts.client(tls, &invalid)?;
        Ok(Sentinel {
            sentinels: tokio::sync::Mutex::new(sentinels),
            config,
            skip_hostname: tls.is_some_and(|t| t.skip_hostname_verification),
            db,
            current: RwLock::new(None),
            stale: AtomicBool::new(true),
        })
    }

    /// The database the master's connection uses.
    pub(super) fn db(&self) -> i64 {
        self.db
    }

    /// Marks the master stale: the next call asks the sentinels first.
    pub(super) fn failed(&self) {
        self.stale.store(true, Ordering::Relaxed);
    }

    /// The connection to the master, asking the sentinels first when it is stale (one call at
    /// a time; the others wait for its answer).
    pub(super) async fn manager(&self) -> RedisResult<ConnectionManager> {
        if let Some(manager) = self.fresh() {
            return Ok(manager);
        }
        let mut sentinels = self.sentinels.lock().await;
        if let Some(manager) = self.fresh() {
            return Ok(manager); // another call asked while this one waited
        }
        let client = match sentinels.async_get_client().await {
            Ok(client) => client,
            Err(error) => {
                // No sentinel answered: keep the last master until the next failure.
                let last = self.current.read().unwrap_or_else(|e| e.into_inner());
                return match last.as_ref() {
                    Some(master) => {
                        self.stale.store(false, Ordering::Relaxed);
                        Ok(master.manager.clone())
                    }
                    None => Err(error),
                };
            }
        };
        let client = if self.skip_hostname {
            let info = client.get_connection_info().clone();
            let mut address = info.addr().clone();
            address.set_danger_accept_invalid_hostnames(true);
            redis::Client::open(info.set_addr(address))?
        } else {
            client
        };
        let address = client.get_connection_info().addr().to_string();
        let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
        let manager = match current.as_ref() {
            Some(master) if master.address == address => master.manager.clone(),
            _ => {
                let manager = ConnectionManager::new_lazy_with_config(client, self.config.clone())?;
                super::connection::connect_in_background(&manager);
                *current = Some(Master {
                    manager: manager.clone(),
                    address,
                });
                manager
            }
        };
        self.stale.store(false, Ordering::Relaxed);
        Ok(manager)
    }

    /// The current master's connection, unless it is stale or unknown.
    fn fresh(&self) -> Option<ConnectionManager> {
        if self.stale.load(Ordering::Relaxed) {
            return None;
        }
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        current.as_ref().map(|m| m.manager.clone())
    }
}

/// What a sentinel URL must look like, as its errors say.
const SHAPE: &str = "must be redis-sentinel://[user:password@]host:port,host:port,…/master_name[/db][?sentinel_pass=…]";

/// A sentinel URL's parts, after its scheme (see the [module documentation](self)).
struct SentinelUrl<'u> {
    /// The master's `user:password` (or password alone), as written.
    user_info: Option<&'u str>,
    /// The sentinels' `host:port`s, separated by commas.
    hosts: &'u str,
    /// The master's name, percent-decoded.
    master: String,
    db: i64,
    /// The sentinels' credentials, percent-decoded.
    sentinel_user: Option<String>,
    sentinel_pass: Option<String>,
}

impl<'u> SentinelUrl<'u> {
    /// Splits `rest` (the URL after `scheme://`) into its parts; `invalid` makes the error
    /// for a reason.
    fn parse(
        rest: &'u str,
        invalid: &dyn Fn(&'static str) -> ConfigError,
    ) -> Result<SentinelUrl<'u>, ConfigError> {
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').ok_or_else(|| invalid(SHAPE))?;
        let (user_info, hosts) = match authority.rsplit_once('@') {
            Some((user_info, hosts)) => (Some(user_info), hosts),
            None => (None, authority),
        };
        let (master, db) = match path.split_once('/') {
            Some((master, db)) => (master, db.parse::<i64>().map_err(|_| invalid(SHAPE))?),
            None => (path, 0),
        };
        let master = percent_decoded(master);
        if master.is_empty() || hosts.is_empty() {
            return Err(invalid(SHAPE));
        }
        let mut sentinel_user = None;
        let mut sentinel_pass = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("sentinel_user", v)) => sentinel_user = Some(percent_decoded(v)),
                Some(("sentinel_pass", v)) => sentinel_pass = Some(percent_decoded(v)),
                _ => {
                    return Err(invalid(
                        "takes only sentinel_user and sentinel_pass in its query",
                    ))
                }
            }
        }
        Ok(SentinelUrl {
            user_info,
            hosts,
            master,
            db,
            sentinel_user,
            sentinel_pass,
        })
    }

    /// The sentinels' addresses, TLS ones with `tls`.
    fn sentinel_addresses(
        &self,
        tls: Option<&TlsFiles>,
        invalid: &dyn Fn(&'static str) -> ConfigError,
    ) -> Result<Vec<ConnectionAddr>, ConfigError> {
        let mut addresses = Vec::new();
        for host in self.hosts.split(',') {
            let (name, port) = host
                .rsplit_once(':')
                .and_then(|(h, p)| Some((h, p.parse::<u16>().ok().filter(|p| *p > 0)?)))
                .ok_or_else(|| {
                    invalid("each sentinel needs a port (host:port, separated by commas)")
                })?;
            let name = name
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            addresses.push(match tls {
                None => ConnectionAddr::Tcp(name, port),
                Some(tls) => tls
                    .address(&format!("rediss://{host}"))
                    .map_err(|_| invalid(SHAPE))?,
            });
        }
        Ok(addresses)
    }

    /// The client that asks the sentinels for the master: with the master's credentials and
    /// database, the sentinels' credentials, and TLS to both with `tls`.
    fn client(
        self,
        tls: Option<&TlsFiles>,
        invalid: &dyn Fn(&'static str) -> ConfigError,
    ) -> Result<SentinelClient, ConfigError> {
        let addresses = self.sentinel_addresses(tls, invalid)?;
        let mut builder =
            SentinelClientBuilder::new(addresses, &self.master, SentinelServerType::Master)
                .map_err(|_| invalid(SHAPE))?
                .set_client_to_redis_db(self.db);
        if let Some(user_info) = self.user_info {
            let (user, password) = user_info.split_once(':').unwrap_or(("", user_info));
            if !user.is_empty() {
                builder = builder.set_client_to_redis_username(percent_decoded(user));
            }
            if !password.is_empty() {
                builder = builder.set_client_to_redis_password(percent_decoded(password));
            }
        }
        if let Some(user) = self.sentinel_user {
            builder = builder.set_client_to_sentinel_username(user);
        }
        if let Some(password) = self.sentinel_pass {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if let Some(tls) = tls {
            builder = builder
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_sentinel_tls_mode(TlsMode::Secure);
            if let Some(certificates) = tls.certificates() {
                builder = builder.set_client_to_redis_certificates(certificates);
            }
        }
        builder.build().map_err(|_| invalid(SHAPE))
    }
}
