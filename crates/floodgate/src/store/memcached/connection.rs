//! One memcached server as the store uses it: a small pool of connections (at most `max_idle`
//! of them, upstream's `MEMCACHE_MAX_IDLE_CONNS`, each carrying one batch at a time; see
//! `batch`), circuit breakers of its own (the decisions', the claims'), and
//! [`Server::exchange`]: a call's commands, sent with those of the calls waiting beside it in
//! one write (pipelined), their replies read in order.
//!
//! Bounds: opening a connection (TCP, then the TLS handshake) takes at most the connect
//! timeout; the commands and replies at most what is left of the call's deadline. A connection
//! that failed or timed out is closed, never reused (a late reply would answer the wrong
//! command), and so are the idle ones then (opened before, they most likely fail too); an idle
//! connection the server has closed (it was killed or restarted) is dropped before it is used.
//! Link failures (refused, reset, timed out) count toward the server's breaker, once per call;
//! an answer, even `SERVER_ERROR`, does not.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::batch::{Call, Queue};
use super::protocol::{Command, ReadError, Reply, ReplySource};
use crate::store::breaker::Breaker;
use crate::{Clock, StoreError};

/// A byte stream to a server: TCP or TLS over TCP.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// One open connection.
pub(crate) struct Conn(BufReader<Box<dyn Io>>);

impl ReplySource for Conn {
    async fn line(&mut self) -> std::io::Result<String> {
        let mut line = Vec::new();
        if self.0.read_until(b'\n', &mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if line.ends_with(b"\r\n") {
            line.truncate(line.len() - 2);
        } else {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(String::from_utf8_lossy(&line).into_owned())
    }

    async fn block(&mut self, len: usize) -> std::io::Result<Vec<u8>> {
        let mut block = vec![0; len + 2];
        self.0.read_exact(&mut block).await?;
        if !block.ends_with(b"\r\n") {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        block.truncate(len);
        Ok(block)
    }
}

impl Conn {
    /// Writes `bytes`, whole.
    pub(crate) async fn write(&mut self, bytes: &[u8]) -> Result<(), ReadError> {
        self.0
            .get_mut()
            .write_all(bytes)
            .await
            .map_err(ReadError::Link)
    }

    /// Whether the server has closed this connection, or sent what nothing asked for: one
    /// poll of the socket, which an open, quiet connection answers with `Pending`.
    fn ended(&mut self) -> bool {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let ready = std::pin::Pin::new(&mut self.0).poll_fill_buf(&mut cx);
        ready.is_ready()
    }
}

/// How every server's connections are made and bounded (the builder's settings).
#[derive(Clone)]
pub(crate) struct LinkSettings {
    /// The bound on the commands of one call, once connected.
    pub(crate) timeout: Duration,
    /// The bound on opening a connection.
    pub(crate) connect_timeout: Duration,
    /// Connections kept idle per server, and the batches on the wire to it at once (at least
    /// one: with 0, each batch opens a connection and closes it after).
    pub(crate) max_idle: usize,
    /// The breaker's threshold (0: off) and cool-down.
    pub(crate) breaker: (u32, Duration),
    /// TLS, when on.
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for LinkSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkSettings")
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_idle", &self.max_idle)
            .field("breaker", &self.breaker)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// One server: its address, idle connections and breakers.
pub(crate) struct Server {
    /// `host:port`, as given.
    pub(crate) address: String,
    idle: Mutex<Vec<Conn>>,
    /// The calls waiting for a batch, and how many batches are on the wire.
    pub(crate) queue: Mutex<Queue>,
    /// How many batches are opening a connection now (their calls' deadlines wait for it).
    connecting: AtomicUsize,
    /// The decisions' and counters' breaker.
    pub(crate) breaker: Breaker,
    /// The shared limits' claims' breaker, apart: a claims step has a longer budget, and no
    /// request waits on it, so neither may open the other's breaker.
    pub(crate) claims_breaker: Breaker,
}

/// When a call must be done by, and the budget that was (for its timeout error).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline {
    pub(crate) at: Instant,
    pub(crate) budget: Duration,
}

impl Deadline {
    /// `budget` from now.
    pub(crate) fn after(budget: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + budget,
            budget,
        }
    }
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl Server {
    pub(crate) fn new(address: String, settings: &LinkSettings) -> Server {
        Server {
            address,
            idle: Mutex::new(Vec::new()),
            queue: Mutex::new(Queue::default()),
            connecting: AtomicUsize::new(0),
            breaker: Breaker::new(settings.breaker.0, settings.breaker.1),
            claims_breaker: Breaker::new(settings.breaker.0, settings.breaker.1),
        }
    }

    /// Sends `commands` in one write and reads their replies, in order, before `deadline`
    /// (plus the time taken to connect when a connection must be opened first), under the
    /// decisions' breaker.
    pub(crate) async fn exchange(
        self: &Arc<Self>,
        commands: &[Command],
        settings: &LinkSettings,
        deadline: Deadline,
        clock: &dyn Clock,
    ) -> Result<Vec<Reply>, StoreError> {
        self.exchange_under(&self.breaker, commands, settings, deadline, clock)
            .await
    }

    /// [`Server::exchange`] under `breaker` (one of this server's).
    pub(crate) async fn exchange_under(
        self: &Arc<Self>,
        breaker: &Breaker,
        commands: &[Command],
        settings: &LinkSettings,
        deadline: Deadline,
        clock: &dyn Clock,
    ) -> Result<Vec<Reply>, StoreError> {
        let permit = breaker.admit(clock)?;
        let result = self.exchange_unguarded(commands, settings, deadline).await;
        let link_failure = matches!(
            result,
            Err(StoreError::Timeout(_) | StoreError::Refused(_) | StoreError::Unavailable(_))
        );
        permit.record(link_failure, clock);
        result
    }

    /// Queues the call for the next batch (see `batch`) and waits for its answer.
    async fn exchange_unguarded(
        self: &Arc<Self>,
        commands: &[Command],
        settings: &LinkSettings,
        deadline: Deadline,
    ) -> Result<Vec<Reply>, StoreError> {
        let (call, answered) = Call::new(commands.to_vec(), deadline);
        if self.enqueue(call, settings) {
            tokio::spawn(Arc::clone(self).drain(settings.clone()));
        }
        // At its deadline the call is answered `Timeout`, even when it went out in a batch
        // whose later calls are still awaited; unless a connection is being opened to the
        // server, whose time is not taken from the budget: then the batch answers, by the
        // deadline plus the time it took to connect (the guard only bounds a batch that never
        // answers).
        let mut answered = answered;
        let guard = deadline.at + settings.connect_timeout + deadline.budget;
        let answer = match tokio::time::timeout_at(deadline.at, &mut answered).await {
            Ok(answer) => Some(answer),
            Err(_) if self.connecting.load(Ordering::Relaxed) == 0 => None,
            Err(_) => tokio::time::timeout_at(guard, &mut answered).await.ok(),
        };
        match answer {
            Some(Ok(answer)) => answer,
            Some(Err(_)) => Err(StoreError::Unavailable(format!(
                "the batch to memcached at {} ended without an answer",
                self.address
            ))),
            None => Err(StoreError::Timeout(deadline.budget)),
        }
    }

    /// A connection to send a batch on, and how long it took to get it (zero for an idle one).
    pub(crate) async fn connection(
        &self,
        settings: &LinkSettings,
    ) -> Result<(Conn, Duration), StoreError> {
        if let Some(conn) = self.pooled() {
            return Ok((conn, Duration::ZERO));
        }
        let started = Instant::now();
        let _connecting = Connecting::new(&self.connecting);
        let connected = tokio::time::timeout(settings.connect_timeout, self.connect(settings));
        let conn = connected
            .await
            .map_err(|_| StoreError::Timeout(settings.connect_timeout))??;
        Ok((conn, started.elapsed()))
    }

    /// Keeps `conn` for the next batch, unless `max_idle` are kept already.
    pub(crate) fn keep(&self, conn: Conn, settings: &LinkSettings) {
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < settings.max_idle {
                idle.push(conn);
            }
        }
    }

    async fn connect(&self, settings: &LinkSettings) -> Result<Conn, StoreError> {
        let tcp = TcpStream::connect(&*connect_address(&self.address))
            .await
            .map_err(|e| StoreError::Refused(format!("memcached at {}: {e}", self.address)))?;
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Io> = match &settings.tls {
            None => Box::new(tcp),
            Some(config) => {
                let host = host_of(&self.address);
                let name = super::tls::server_name(host)
                    .map_err(|e| StoreError::Protocol(e.to_string()))?;
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| {
                        StoreError::Protocol(format!(
                            "TLS with memcached at {} failed: {e}",
                            self.address
                        ))
                    })?;
                Box::new(tls)
            }
        };
        Ok(Conn(BufReader::new(io)))
    }

    pub(crate) fn lost(&self, e: &std::io::Error) -> StoreError {
        StoreError::Unavailable(format!(
            "the connection to memcached at {} failed: {e}",
            self.address
        ))
    }

    /// An idle connection the server has not closed, if there is one. A server that went
    /// away (killed, restarted) has closed its end: its connections read as ended (or hold
    /// bytes no command asked for), and are dropped here rather than fail a call.
    fn pooled(&self) -> Option<Conn> {
        let mut idle = self.idle.lock().ok()?;
        while let Some(mut conn) = idle.pop() {
            if !conn.ended() {
                return Some(conn);
            }
        }
        None
    }

    /// Closes every idle connection: the server left the list, or a connection to it just
    /// failed (the others, opened before, most likely fail too).
    pub(crate) fn close_idle(&self) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.clear();
        }
    }
}

/// A connection being opened, counted in [`Server`]'s `connecting` while it lives.
struct Connecting<'a>(&'a AtomicUsize);

impl<'a> Connecting<'a> {
    fn new(count: &'a AtomicUsize) -> Connecting<'a> {
        count.fetch_add(1, Ordering::Relaxed);
        Connecting(count)
    }
}

impl Drop for Connecting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The host of `host:port` (`[v6]:port` keeps its brackets), without the final dot of an
/// absolute name (SRV targets are written so): certificates name hosts without it.
pub(crate) fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    host.strip_suffix('.').unwrap_or(host)
}

/// `host:port` as connected to: without the final dot of an absolute host name, which
/// glibc's resolver does not match against `/etc/hosts` (`localhost.` is not found there).
fn connect_address(address: &str) -> std::borrow::Cow<'_, str> {
    match address.rsplit_once(':') {
        Some((host, port)) if host.ends_with('.') => {
            format!("{}:{port}", &host[..host.len() - 1]).into()
        }
        _ => address.into(),
    }
}
