//! [`MemcachedStoreBuilder`]: the servers and every setting of a [`MemcachedStore`], checked
//! when it is built (a typed [`ConfigError`] naming the field and value).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use super::connection::{LinkSettings, Server};
use super::discovery::Discovery;
use super::tls::TlsSettings;
use super::{ExplicitClock, Inner, MemcachedStore};
use crate::{Clock, ConfigError, SystemClock};

/// Builds a [`MemcachedStore`]; from [`MemcachedStore::builder`].
#[derive(Clone)]
pub struct MemcachedStoreBuilder {
    pub(super) servers: Vec<String>,
    pub(super) timeout: Duration,
    pub(super) connect_timeout: Duration,
    pub(super) breaker: (u32, Duration),
    pub(super) max_idle: usize,
    pub(super) clock: Option<Arc<dyn Clock>>,
    pub(super) tls: TlsSettings,
    pub(super) discovery: Option<Discovery>,
}

impl std::fmt::Debug for MemcachedStoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemcachedStoreBuilder")
            .field("servers", &self.servers)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("breaker", &self.breaker)
            .field("max_idle", &self.max_idle)
            .field("clock", &self.clock.as_ref().map(|_| "explicit"))
            .field("tls", &self.tls)
            .field("discovery", &self.discovery)
            .finish()
    }
}

impl MemcachedStoreBuilder {
    /// The bound on each call's commands and replies, once connected (default 50 ms): a call
    /// not answered in time fails with [`crate::StoreError::Timeout`]. At least 1 ms
    /// (field `timeout`).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The bound on opening a connection, TCP and TLS handshake (default 2 s); it adds to the
    /// call's timeout when a call must connect first. At least 1 ms (field `connect_timeout`).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Each server's circuit breaker: open after `threshold` link failures in a row (timeouts,
    /// refused or lost connections), for `cool_down` on the store's clock, then one call
    /// probes (defaults 3 and 1 s; `threshold` 0 turns it off).
    pub fn breaker(mut self, threshold: u32, cool_down: Duration) -> Self {
        self.breaker = (threshold, cool_down);
        self
    }

    /// How many connections per server stay open between calls (default 2, upstream's
    /// `MEMCACHE_MAX_IDLE_CONNS`), and so how many batches of calls are on the wire to a
    /// server at once: calls that overlap more wait for the next batch, which sends them all
    /// in one write, rather than open more connections. 0 opens a connection per batch (one
    /// batch at a time) and closes it after.
    pub fn max_idle(mut self, max_idle: usize) -> Self {
        self.max_idle = max_idle;
        self
    }

    /// The clock whose instants pick the windows and time the breakers (default
    /// [`SystemClock`]). memcached keeps no time of its own for this: every node sharing the
    /// servers must read the same time (see the [module documentation](super)).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Speak TLS to every server (upstream's `MEMCACHE_TLS`; memcached's `-Z`).
    pub fn tls(mut self, on: bool) -> Self {
        self.tls.enabled = on;
        self
    }

    /// With TLS: trust the CAs of this PEM file instead of the system's (upstream's
    /// `MEMCACHE_TLS_CACERT`). Read at [`MemcachedStoreBuilder::build`]; a bad file is a
    /// [`ConfigError`] for field `tls_ca_file`.
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.ca_file = Some(path.into());
        self
    }

    /// With TLS: present this certificate chain and key (PEM files) when a server asks
    /// (upstream's `MEMCACHE_TLS_CLIENT_CERT`, `MEMCACHE_TLS_CLIENT_KEY`); fields
    /// `tls_client_cert_file`, `tls_client_key_file`.
    pub fn tls_client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.tls.client = Some((cert.into(), key.into()));
        self
    }

    /// With TLS: check the server's chain but not that it is for the host named
    /// (upstream's `MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION`).
    pub fn tls_skip_hostname_verification(mut self, skip: bool) -> Self {
        self.tls.skip_hostname_verification = skip;
        self
    }

    /// How often the servers of [`MemcachedStore::from_srv`]'s record are looked up again
    /// (upstream's `MEMCACHE_SRV_REFRESH`; default and `Duration::ZERO`: only at start).
    /// Ignored for a store given its servers.
    pub fn srv_refresh(mut self, every: Duration) -> Self {
        if let Some(discovery) = &mut self.discovery {
            discovery.refresh = (!every.is_zero()).then_some(every);
        }
        self
    }

    /// The DNS server asked for [`MemcachedStore::from_srv`]'s record (default: the system's,
    /// from `/etc/resolv.conf`, read at every lookup). Ignored for a store given its servers.
    pub fn srv_nameserver(mut self, at: SocketAddr) -> Self {
        if let Some(discovery) = &mut self.discovery {
            discovery.nameserver = Some(at);
        }
        self
    }

    /// The store. Opens no connection (the first call, or [`MemcachedStore::probe`], does).
    ///
    /// With an SRV record, the servers are looked up at once, in the background, and again
    /// every [`MemcachedStoreBuilder::srv_refresh`], when there is a Tokio runtime (else by
    /// the first [`MemcachedStore::probe`] or [`MemcachedStore::refresh_servers`]); until then
    /// calls fail with [`StoreError::Unavailable`](crate::StoreError::Unavailable).
    ///
    /// Errors: an empty server list (field `servers`, value `""`), a server that is not
    /// `host:port` with a port from 1 to 65535 (field `servers`, the entry), an SRV record
    /// name not `_service._proto.domain` (field `srv`), a timeout under 1 ms (`timeout`,
    /// `connect_timeout`), an unreadable or unusable TLS file.
    pub fn build(self) -> Result<MemcachedStore, ConfigError> {
        if let Some(discovery) = &self.discovery {
            discovery.check()?;
        } else if self.servers.is_empty() {
            return Err(ConfigError::invalid(
                "servers",
                "",
                "at least one memcached host:port is needed",
            ));
        }
        for server in &self.servers {
            check_address(server)?;
        }
        for (field, value) in [
            ("timeout", self.timeout),
            ("connect_timeout", self.connect_timeout),
        ] {
            if value < Duration::from_millis(1) {
                return Err(ConfigError::invalid(
                    field,
                    format!("{value:?}"),
                    "must be at least 1 ms",
                ));
            }
        }
        if self.tls.enabled {
            for server in &self.servers {
                super::tls::server_name(super::connection::host_of(server))?;
            }
        }
        let link = LinkSettings {
            timeout: self.timeout,
            connect_timeout: self.connect_timeout,
            max_idle: self.max_idle,
            breaker: self.breaker,
            tls: self.tls.config()?,
        };
        let servers = self
            .servers
            .into_iter()
            .map(|address| Arc::new(Server::new(address, &link)))
            .collect();
        let clock = ExplicitClock(self.clock.unwrap_or_else(|| Arc::new(SystemClock::new())));
        let store = MemcachedStore {
            inner: Arc::new(Inner {
                servers: RwLock::new(Arc::new(servers)),
                link,
                clock,
                namespaces: crate::store::Namespaces::default(),
                discovery: self.discovery,
            }),
        };
        store.start_discovering();
        Ok(store)
    }
}

/// Refuses what is not `host:port`: an empty host, no port, a port outside 1 to 65535.
pub(super) fn check_address(server: &str) -> Result<(), ConfigError> {
    let bad = |reason| ConfigError::invalid("servers", server, reason);
    let (host, port) = server
        .rsplit_once(':')
        .ok_or_else(|| bad("must be host:port"))?;
    if host.is_empty() || host.bytes().any(|b| b.is_ascii_whitespace() || b == b'/') {
        return Err(bad("must be host:port with a host name or IP address"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(bad("must be host:port with a port from 1 to 65535")),
    }
}
