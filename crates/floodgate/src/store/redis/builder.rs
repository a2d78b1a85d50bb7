//! [`RedisStoreBuilder`]: a Redis store's settings, checked when it is built.

use std::sync::Arc;
use std::time::Duration;

use super::batching::{Lanes, MAX_BATCH_KEYS};
use super::call::Scripts;
use super::connection::Connection;
use super::nodes::Nodes;
use super::tls::TlsFiles;
use super::{redacted, secrets, ExplicitClock, Inner, RedisStore};
use crate::store::breaker::Breaker;
use crate::{Clock, ConfigError, SystemClock};

/// Builds a [`RedisStore`]; see [`RedisStore::builder`]. Its `Debug` output and its errors show
/// the URL with any password replaced by `***`.
pub struct RedisStoreBuilder {
    pub(super) url: String,
    pub(super) timeout: Duration,
    pub(super) connect_timeout: Duration,
    pub(super) reconnect_on_readonly: bool,
    pub(super) min_ttl: Duration,
    pub(super) clock: Option<ExplicitClock>,
    pub(super) breaker_threshold: u32,
    pub(super) breaker_cool_down: Duration,
    pub(super) tls_ca_file: Option<std::path::PathBuf>,
    pub(super) tls_client: Option<(std::path::PathBuf, std::path::PathBuf)>,
    pub(super) tls_skip_hostname_verification: bool,
    pub(super) batch_max_keys: usize,
    pub(super) batch_in_flight: usize,
}

impl std::fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("url", &redacted(&self.url))
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("reconnect_on_readonly", &self.reconnect_on_readonly)
            .field("min_ttl", &self.min_ttl)
            .field("clock", &self.clock)
            .field("breaker_threshold", &self.breaker_threshold)
            .field("breaker_cool_down", &self.breaker_cool_down)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_client", &self.tls_client)
            .field(
                "tls_skip_hostname_verification",
                &self.tls_skip_hostname_verification,
            )
            .field("batch_max_keys", &self.batch_max_keys)
            .field("batch_in_flight", &self.batch_in_flight)
            .finish()
    }
}

impl RedisStoreBuilder {
    /// The bound on every call (default 50 ms), waiting for a connection included. A call
    /// that takes longer fails with [`StoreError::Timeout`](crate::StoreError::Timeout).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The bound on setting a connection up: TCP, TLS, `AUTH` and `SELECT` (default 2 s). A
    /// connection is made in the background, so a call never waits longer than its
    /// [`timeout`](RedisStoreBuilder::timeout) for it, and a set-up slower than one call (a
    /// first TLS handshake on a busy node) still completes for the calls after it.
    /// [`RedisStore::probe`] waits for both.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Whether a single Redis that answers `READONLY` (a master demoted to a replica by a
    /// failover) makes the store drop its connection and connect anew, to whatever the URL
    /// names now: a DNS name or a proxy that follows the master (default true). With false the
    /// connection is kept, as envoyproxy/ratelimit keeps it unless
    /// `REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR` is set, and every call fails until the server
    /// is a master again. A cluster follows its masters by itself, and the sentinels are asked
    /// again either way.
    pub fn reconnect_on_readonly(mut self, reconnect: bool) -> Self {
        self.reconnect_on_readonly = reconnect;
        self
    }

    /// Decide with `clock`'s instants (truncated to whole microseconds) instead of Redis `TIME`:
    /// for replays and tests. Every node sharing the Redis must then share one notion of time.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(ExplicitClock(Arc::new(clock)));
        self
    }

    /// The circuit breaker: open after `threshold` consecutive timeouts or connection errors
    /// (default 3; 0 turns the breaker off), and fail every call at once for `cool_down`
    /// (default 1 s, on the store's clock) before letting one call probe Redis. See the
    /// [module documentation](super#circuit-breaker).
    pub fn breaker(mut self, threshold: u32, cool_down: Duration) -> Self {
        self.breaker_threshold = threshold;
        self.breaker_cool_down = cool_down;
        self
    }

    /// For `rediss://` URLs: trust the CA certificates in this PEM file instead of the
    /// system's (for a Redis whose certificate a private CA signed). Read by
    /// [`RedisStoreBuilder::build`]; an unreadable file is a [`ConfigError`] for field
    /// `tls_ca_file`.
    pub fn tls_ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls_ca_file = Some(path.into());
        self
    }

    /// For TLS URLs: present this client certificate chain and its key (PEM files) when the
    /// server asks for one (Redis's `tls-auth-clients`). Read by [`RedisStoreBuilder::build`];
    /// an unreadable file is a [`ConfigError`] for field `tls_client_cert_file` or
    /// `tls_client_key_file`.
    pub fn tls_client_cert(
        mut self,
        cert: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.tls_client = Some((cert.into(), key.into()));
        self
    }

    /// For TLS URLs: check that the server's certificate chains to a trusted CA, but not that
    /// it names the host connected to (default false). For servers reached by an address their
    /// certificate does not name, such as the masters a Sentinel announces by IP.
    pub fn tls_skip_hostname_verification(mut self, skip: bool) -> Self {
        self.tls_skip_hostname_verification = skip;
        self
    }

    /// Group commit: decisions waiting for the same Redis (on a cluster, the same slot) while
    /// a call is in flight go together in the next call, at most `max_keys` keys per call
    /// (default 128, at most 1024); 0 or 1 turns it off (every decision is a call of its own,
    /// sent at once). See the [module documentation](super#group-commit).
    pub fn batch_max_keys(mut self, max_keys: usize) -> Self {
        self.batch_max_keys = max_keys;
        self
    }

    /// Group commit: the most script calls one lane has in flight (default 2, from 1 to 8).
    /// With 1, decisions arriving while a call is in flight always wait for it, and batches
    /// reach Redis strictly in queue order; with 2, the next batch leaves while one runs, so
    /// Redis does not idle during the round trip.
    pub fn batch_in_flight(mut self, calls: usize) -> Self {
        self.batch_in_flight = calls;
        self
    }

    /// Keep every written key at least this long (default 0: exactly until it is fresh, rounded
    /// up to the millisecond). Only useful with an explicit [`RedisStoreBuilder::clock`] that
    /// may run slower than Redis's own.
    pub fn min_ttl(mut self, min_ttl: Duration) -> Self {
        self.min_ttl = min_ttl;
        self
    }

    /// The store. Nothing is sent yet: the connection is made by the first call, and remade by
    /// later calls whenever it is lost.
    ///
    /// Must be called inside a Tokio runtime, which runs the connection: outside one it is a
    /// [`ConfigError`] for field `runtime` (never a panic). A URL that is neither a Redis URL
    /// (`redis://[user:password@]host:port[/db]`) nor a Redis Cluster one
    /// (`redis-cluster://[user:password@]host:port,host:port,…`, see the [module
    /// documentation](super#redis-cluster)) is a [`ConfigError`] for field `url`.
    pub fn build(self) -> Result<RedisStore, ConfigError> {
        let tls = self.tls_files()?;
        self.check_group_commit()?;
        if self.connect_timeout.is_zero() {
            return Err(ConfigError::invalid(
                "connect_timeout",
                "0s",
                "must be above 0",
            ));
        }
        // Every setting is valid. The client spawns its connection tasks on the current
        // runtime, and panics without one; say so instead.
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(ConfigError::invalid(
                "runtime",
                "none",
                "RedisStore::build must be called inside a Tokio runtime, which runs the \
                 connection: from async code (#[tokio::main]), or within Runtime::enter",
            ));
        }
        // The one parser of store URLs checks it first, so that a URL the service accepts
        // and one this builder accepts are the same URLs.
        match crate::store::StoreUrl::parse(&self.url)? {
            crate::store::StoreUrl::Redis { .. } => {}
            other => {
                return Err(ConfigError::invalid(
                    "url",
                    other.shown(),
                    "names another store than Redis",
                ))
            }
        }
        let connection = Connection::new(&self.url, self.timeout, self.connect_timeout, tls)?;
        let nodes = connection
            .is_cluster()
            .then(|| Nodes::new(self.breaker_threshold, self.breaker_cool_down));
        let lanes = (self.batch_max_keys > 1).then(|| {
            let count = if connection.is_cluster() { 64 } else { 1 };
            Lanes::new(count, self.batch_max_keys, self.batch_in_flight)
        });
        let breaker_clock: Arc<dyn Clock> = match &self.clock {
            Some(ExplicitClock(clock)) => clock.clone(),
            None => Arc::new(SystemClock::new()),
        };
        Ok(RedisStore {
            inner: Arc::new(Inner {
                breaker: Arc::new(Breaker::new(self.breaker_threshold, self.breaker_cool_down)),
                claims_breaker: Breaker::new(self.breaker_threshold, self.breaker_cool_down),
                nodes,
                breaker_clock: ExplicitClock(breaker_clock),
                connection,
                timeout: self.timeout,
                connect_timeout: self.connect_timeout,
                reconnect_on_readonly: self.reconnect_on_readonly,
                min_ttl_ms: u64::try_from(self.min_ttl.as_millis()).unwrap_or(u64::MAX),
                clock: self.clock,
                scripts: Scripts::new(),
                secrets: secrets(&self.url),
                lanes,
                namespaces: super::super::Namespaces::new(),
                redirects: super::redirect::RedirectCounts::default(),
            }),
        })
    }

    /// The TLS files' contents (CA, client certificate and key), read now: an unreadable
    /// file is a [`ConfigError`] for its field.
    fn tls_files(&self) -> Result<TlsFiles, ConfigError> {
        let read = |field: &'static str, path: &std::path::Path| {
            std::fs::read(path)
                .map_err(|_| ConfigError::invalid(field, path.display(), "must be a readable file"))
        };
        Ok(TlsFiles {
            ca: match &self.tls_ca_file {
                None => None,
                Some(path) => Some(read("tls_ca_file", path)?),
            },
            client: match &self.tls_client {
                None => None,
                Some((cert, key)) => Some((
                    read("tls_client_cert_file", cert)?,
                    read("tls_client_key_file", key)?,
                )),
            },
            skip_hostname_verification: self.tls_skip_hostname_verification,
        })
    }

    /// Checks the group commit's bounds: calls in flight per lane, keys per call.
    fn check_group_commit(&self) -> Result<(), ConfigError> {
        if !(1..=8).contains(&self.batch_in_flight) {
            return Err(ConfigError::invalid(
                "batch_in_flight",
                self.batch_in_flight,
                "must be from 1 to 8",
            ));
        }
        if self.batch_max_keys > MAX_BATCH_KEYS {
            return Err(ConfigError::invalid(
                "batch_max_keys",
                self.batch_max_keys,
                "must be at most 1024",
            ));
        }
        Ok(())
    }
}
