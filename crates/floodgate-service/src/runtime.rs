//! `floodgate serve`: the HTTP JSON API and Envoy's rate-limit gRPC API on one process, with
//! reload on `SIGHUP` and graceful shutdown on `SIGTERM`/`SIGINT` (stop accepting, let
//! in-flight calls finish, exit 0).
//!
//! Threading: one single-threaded runtime per core ("worker"), each serving the connections
//! handed to it, and one acceptor that takes connections from both listeners and deals them
//! out to the workers in turn. A decision is short and never blocks, so a connection's calls
//! stay on one core with no work stealing or cross-core wake-ups; measured on this project's
//! 2-core machine this serves about 1.5× the gRPC decisions per second of a work-stealing
//! runtime (BENCHMARKS.md).
//!
//! # The listening line
//!
//! Once both listeners are bound, and before any connection is served, `serve` writes one line
//! to stderr ([`Listening`]):
//!
//! ```text
//! floodgate listening http=127.0.0.1:43121 grpc=127.0.0.1:43122
//! ```
//!
//! With a debug listener (`--debug`, the config's `debug`), the line ends with its address too:
//! `… grpc=127.0.0.1:43122 debug=127.0.0.1:43123`.
//!
//! It is written directly, not through the log, so it has no timestamp, level or colour
//! whatever the log format; the addresses are the bound ones, so `--http 127.0.0.1:0` (and
//! `--grpc`, `--debug`) let the operating system choose a free port and the line says which.
//! Signal handlers are installed before the line is written.

use std::fmt;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

use crate::config::{Config, ConfigFileError, Overrides};
use crate::service::Server;

/// The HTTP address used when neither the command line nor the config names one.
pub const DEFAULT_HTTP: &str = "127.0.0.1:8080";
/// The gRPC address used when neither the command line nor the config names one.
pub const DEFAULT_GRPC: &str = "127.0.0.1:8081";

/// Arguments of `floodgate serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// A YAML config file, Floodgate's own format or envoyproxy/ratelimit's, or a directory of
    /// them (every *.yaml and *.yml file directly in it: envoyproxy/ratelimit domain files plus
    /// at most one Floodgate file). Re-read on SIGHUP and POST /admin/reload. Without one, the
    /// built-in example (Stripe's four limiters, plans free/standard/pro) runs.
    #[arg(long, value_name = "FILE|DIR")]
    pub config: Option<PathBuf>,
    /// Merge domains defined more than once (in several files of a directory) instead of
    /// refusing them, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG; the config's
    /// `rls.merge_domains` can also turn it on.
    #[arg(long, env = "FLOODGATE_MERGE_DOMAINS", value_parser = clap::builder::FalseyValueParser::new())]
    pub merge_domains: bool,
    /// Add RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset to every Envoy answer, as
    /// envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED; the config's
    /// `rls.response_headers` can also turn it on and renames the headers.
    #[arg(long, env = "FLOODGATE_RESPONSE_HEADERS", value_parser = clap::builder::FalseyValueParser::new())]
    pub response_headers: bool,
    /// Where the HTTP JSON API listens, host:port (default: the config's `http`, else
    /// 127.0.0.1:8080; a name such as localhost is resolved at start). Port 0 lets the OS
    /// choose; the `floodgate listening …` line on stderr names the port.
    #[arg(long, value_name = "ADDR", value_parser = crate::cli::listen_address)]
    pub http: Option<SocketAddr>,
    /// Where the Envoy RLS gRPC API listens, host:port (default: the config's `grpc`, else
    /// 127.0.0.1:8081). As `--http`.
    #[arg(long, value_name = "ADDR", value_parser = crate::cli::listen_address)]
    pub grpc: Option<SocketAddr>,
    /// Where the debug listener serves `/rlconfig` (the loaded Envoy rules) and `/stats`, as
    /// envoyproxy/ratelimit's DEBUG_PORT (default: the config's `debug`, else none: off). As
    /// `--http`.
    #[arg(long, value_name = "ADDR", value_parser = crate::cli::listen_address)]
    pub debug: Option<SocketAddr>,
    /// `--store URL`.
    #[command(flatten)]
    pub store: crate::cli::StoreArg,
    /// Threads serving requests, each with its own single-threaded runtime (at least 1;
    /// default: one per core).
    #[arg(long, value_name = "N", value_parser = crate::cli::at_least_one::<usize>)]
    pub threads: Option<usize>,
    /// Counters the dashboard keeps for the heaviest keys (a space-saving sketch per minute;
    /// at most about 2 × N × 350 bytes). 0 turns key counting off.
    #[arg(long, value_name = "N", env = "FLOODGATE_HEAVY_KEYS",
          default_value_t = crate::dashboard::DEFAULT_HEAVY_KEYS,
          value_parser = heavy_keys_in_range)]
    pub heavy_keys: usize,
}

/// `--heavy-keys`: 0 ..= [`crate::dashboard::MAX_HEAVY_KEYS`].
fn heavy_keys_in_range(text: &str) -> Result<usize, String> {
    let n: usize = text
        .parse()
        .map_err(|_| format!("`{text}` is not a whole number"))?;
    if n > crate::dashboard::MAX_HEAVY_KEYS {
        return Err(format!(
            "{n} is more than {} counters",
            crate::dashboard::MAX_HEAVY_KEYS
        ));
    }
    Ok(n)
}

/// The addresses `serve` listens on, as it announces them on stderr once all are bound:
/// `floodgate listening http=ADDR grpc=ADDR[ debug=ADDR]` (see the [module
/// documentation](self)), each address as [`SocketAddr`] writes it (`127.0.0.1:43121`,
/// `[::1]:43121`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listening {
    /// The HTTP JSON API's bound address.
    pub http: SocketAddr,
    /// The Envoy RLS gRPC API's bound address.
    pub grpc: SocketAddr,
    /// The debug listener's bound address, when there is one.
    pub debug: Option<SocketAddr>,
}

impl Listening {
    /// What the line starts with.
    pub const PREFIX: &'static str = "floodgate listening ";

    /// Reads a listening line (a trailing newline is allowed); `None` for any other line.
    pub fn parse(line: &str) -> Option<Listening> {
        let rest = line
            .trim_end_matches(['\r', '\n'])
            .strip_prefix(Self::PREFIX)?;
        let mut fields = rest.split(' ');
        let http = fields.next()?.strip_prefix("http=")?.parse().ok()?;
        let grpc = fields.next()?.strip_prefix("grpc=")?.parse().ok()?;
        let debug = match fields.next() {
            Some(field) => Some(field.strip_prefix("debug=")?.parse().ok()?),
            None => None,
        };
        if fields.next().is_some() {
            return None;
        }
        Some(Listening { http, grpc, debug })
    }
}

impl fmt::Display for Listening {
    /// The line, without its newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}http={} grpc={}", Self::PREFIX, self.http, self.grpc)?;
        match self.debug {
            Some(debug) => write!(f, " debug={debug}"),
            None => Ok(()),
        }
    }
}

/// Why `serve` could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The config file is unreadable or invalid.
    #[error(transparent)]
    Config(#[from] ConfigFileError),
    /// The store could not be used within `store.startup_timeout`.
    #[error("cannot use the store {url}: {error} (tried for {}; check store.url (or --store) and the store itself, or set store.start_without: true to start anyway, each stage following its on_store_error policy)", floodgate::algorithm::spec::format_duration(*.waited))]
    Store {
        /// The store's URL, any password redacted.
        url: String,
        /// The last try's failure.
        error: floodgate::StoreError,
        /// How long start-up tried.
        waited: std::time::Duration,
    },
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// `FLOODGATE_LEASE_SECRET` is too short to sign lease tokens safely.
    #[error("FLOODGATE_LEASE_SECRET holds {bytes} bytes: a lease tokens' secret needs at least {} (for example 32 random bytes, hex-encoded: openssl rand -hex 32)", crate::lease_token::MIN_SECRET_BYTES)]
    LeaseSecret {
        /// Its length.
        bytes: usize,
    },
    /// The acceptor's runtime could not be started.
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// A worker thread, or its runtime, could not be started.
    #[error("cannot start worker {index}: {source}")]
    Worker {
        /// The worker's number, from 0.
        index: usize,
        /// Why.
        source: std::io::Error,
    },
    /// A worker thread panicked while serving.
    #[error("a worker panicked")]
    WorkerPanicked,
}

/// Loads the config, binds both listeners, starts the workers and serves until a shutdown
/// signal. Blocks the calling thread.
pub fn serve(args: ServeArgs) -> Result<(), ServeError> {
    let overrides = Overrides {
        merge_domains: args.merge_domains,
        response_headers: args.response_headers,
    };
    let mut config = Config::load_or_builtin(args.config.as_deref(), &overrides)?;
    if let Some(url) = &args.store.url {
        config.store.url = Some(url.clone());
    }
    let http_addr = args
        .http
        .or(config.http)
        .unwrap_or_else(|| parse_addr(DEFAULT_HTTP));
    let grpc_addr = args
        .grpc
        .or(config.grpc)
        .unwrap_or_else(|| parse_addr(DEFAULT_GRPC));
    let debug_addr = args.debug.or(config.debug);
    let admin_token = std::env::var("FLOODGATE_ADMIN_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    // A Redis store is created inside a runtime of its own (its connection's housekeeping runs
    // there), which lives as long as `serve`.
    let store_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("floodgate-store")
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    let startup_budget = config
        .store
        .startup_timeout
        .map_or(crate::store::STARTUP_TIMEOUT, |d| d.0);
    let start_without = config.store.start_without;
    let server = {
        let _context = store_runtime.enter();
        Server::new(config, args.config.clone(), admin_token)?
    };
    // A store that cannot be used must not look healthy: try it now, and refuse to start
    // unless told to start without it.
    if let Err(error) = store_runtime.block_on(server.store().wait_until_usable(startup_budget)) {
        let url = server.store().health().url().to_string();
        if !start_without {
            return Err(ServeError::Store {
                url,
                error,
                waited: startup_budget,
            });
        }
        tracing::error!(
            url,
            %error,
            "STARTING WITHOUT A WORKING STORE (store.start_without: true): every stage follows its on_store_error policy (fail_open: nothing is limited) and /readyz answers 503 until the store answers"
        );
    }
    let mut server = server
        .with_overrides(overrides)
        .with_heavy_keys(args.heavy_keys);
    // Services behind one load balancer sign lease tokens alike, so that any of them accepts
    // the tokens another issued: with FLOODGATE_LEASE_SECRET, else with the secret the nodes
    // sharing a store share through it, else (the memory store) a random one of this process.
    let env_secret = std::env::var_os("FLOODGATE_LEASE_SECRET").filter(|s| !s.is_empty());
    if let Some(secret) = env_secret {
        let secret = secret.into_encoded_bytes();
        if secret.len() < crate::lease_token::MIN_SECRET_BYTES {
            return Err(ServeError::LeaseSecret {
                bytes: secret.len(),
            });
        }
        server = server.with_lease_secret(secret);
    } else if let Err(error) = store_runtime.block_on(server.share_lease_secret()) {
        tracing::warn!(%error, "cannot read the lease tokens' shared secret from the store yet; it is read again when a token needs it");
    }
    let server = Arc::new(server);
    // The dashboard's points, once a second, on the store's runtime (off the request path).
    store_runtime.spawn(sample_dashboard(server.clone()));
    store_runtime.spawn(watch_store(server.clone()));
    let workers = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let acceptor = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    acceptor.block_on(async {
        let http = bind(http_addr).await?;
        let grpc = bind(grpc_addr).await?;
        let debug = match debug_addr {
            Some(addr) => Some((bind(addr).await?, addr)),
            None => None,
        };
        let listening = Listening {
            http: local_addr(&http, http_addr)?,
            grpc: local_addr(&grpc, grpc_addr)?,
            debug: match &debug {
                Some((listener, addr)) => Some(local_addr(listener, *addr)?),
                None => None,
            },
        };
        let listeners = Listeners {
            http,
            grpc,
            debug: debug.map(|(listener, _)| listener),
        };
        let (stop, stopped) = watch::channel(false);
        // Installed now, so that a signal sent as soon as the line below is read is handled.
        match Signals::install() {
            Ok(signals) => {
                tokio::spawn(watch_signals(server.clone(), signals, stop));
            }
            Err(e) => tracing::error!(
                error = %e,
                "cannot install signal handlers; stop the process with SIGKILL"
            ),
        }
        announce(&listening);
        tracing::info!(threads = workers, config = ?args.config, "floodgate serving");
        run(server, listeners, workers, stopped).await
    })
}

/// Takes the dashboard's points every [`crate::dashboard::INTERVAL`], for as long as the
/// process serves.
async fn sample_dashboard(server: Arc<Server>) {
    let mut interval = tokio::time::interval(crate::dashboard::INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        server.sample_dashboard().await;
    }
}

/// How often a failing store is probed while no call succeeds.
const STORE_PROBE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// While the store's last call failed, probes it every [`STORE_PROBE_INTERVAL`], so that its
/// recovery is seen (and `/readyz` turns ready) even when no traffic comes, as when a load
/// balancer has taken the node out because it was not ready.
async fn watch_store(server: Arc<Server>) {
    let mut interval = tokio::time::interval(STORE_PROBE_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        if server.store().health().last_call_ok() == Some(false) {
            // The outcome is recorded in the store's health (and logged at a bounded rate).
            let _ = server.store().probe().await;
        }
    }
}

/// Writes the listening line to stderr in one write, so that no log line can split it.
fn announce(listening: &Listening) {
    let line = format!("{listening}\n");
    // Nothing to do if stderr is gone; the service runs on.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

fn local_addr(listener: &TcpListener, addr: SocketAddr) -> Result<SocketAddr, ServeError> {
    listener
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })
}

fn parse_addr(text: &str) -> SocketAddr {
    text.parse()
        .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)))
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// How long the acceptor waits after a failed accept (out of file descriptors, say) before it
/// tries again.
const ACCEPT_ERROR_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// A connection on its way from the acceptor to a worker: a std stream, because a tokio
/// stream belongs to the runtime that accepted it.
type Handoff = (std::net::TcpStream, SocketAddr);

/// The bound listeners `serve` takes connections from.
#[derive(Debug)]
pub struct Listeners {
    /// The HTTP JSON API's.
    pub http: TcpListener,
    /// The Envoy RLS gRPC API's.
    pub grpc: TcpListener,
    /// The debug listener's, if there is one.
    pub debug: Option<TcpListener>,
}

/// One worker's queues of connections, one per listener.
struct Lanes<T> {
    http: T,
    grpc: T,
    debug: T,
}

/// Serves the APIs on already-bound listeners with `workers` worker threads until `stopped`
/// turns true, then lets in-flight calls finish.
pub async fn run(
    server: Arc<Server>,
    listeners: Listeners,
    workers: usize,
    stopped: watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let mut lanes = Vec::with_capacity(workers);
    let mut threads = Vec::with_capacity(workers);
    for i in 0..workers {
        let (http_tx, http_rx) = mpsc::channel::<Handoff>(1024);
        let (grpc_tx, grpc_rx) = mpsc::channel::<Handoff>(1024);
        let (debug_tx, debug_rx) = mpsc::channel::<Handoff>(16);
        lanes.push(Lanes {
            http: http_tx,
            grpc: grpc_tx,
            debug: debug_tx,
        });
        let received = Lanes {
            http: http_rx,
            grpc: grpc_rx,
            debug: debug_rx,
        };
        let (server, stopped) = (server.clone(), stopped.clone());
        let thread = std::thread::Builder::new()
            .name(format!("floodgate-worker-{i}"))
            .spawn(move || worker(i, server, received, stopped))
            .map_err(|source| ServeError::Worker { index: i, source })?;
        threads.push(thread);
    }
    let Listeners { http, grpc, debug } = listeners;
    let mut turn = 0usize;
    let mut stop = stopped.clone();
    loop {
        type Pick = fn(&Lanes<mpsc::Sender<Handoff>>) -> &mpsc::Sender<Handoff>;
        let (accepted, pick): (_, Pick) = tokio::select! {
            a = http.accept() => (a, |l| &l.http),
            a = grpc.accept() => (a, |l| &l.grpc),
            a = accept(debug.as_ref()) => (a, |l| &l.debug),
            _ = stop.wait_for(|s| *s) => break,
        };
        match accepted.and_then(|(stream, peer)| {
            stream.set_nodelay(true)?;
            Ok((stream.into_std()?, peer))
        }) {
            Ok(handoff) => {
                turn = turn.wrapping_add(1);
                // A worker that is gone (it failed) loses the connection; the client retries.
                let _ = pick(&lanes[turn % lanes.len()]).send(handoff).await;
            }
            // Out of file descriptors and the like: log, pause so as not to spin on an error
            // that will repeat until connections close, and keep accepting.
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
            }
        }
    }
    drop((http, grpc, debug, lanes));
    let mut failure = None;
    for thread in threads {
        match thread.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = Some(e),
            Err(_) => failure = Some(ServeError::WorkerPanicked),
        }
    }
    tracing::info!("floodgate stopped");
    failure.map_or(Ok(()), Err)
}

/// The next connection on `listener`; never, when there is none.
async fn accept(
    listener: Option<&TcpListener>,
) -> std::io::Result<(tokio::net::TcpStream, SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

/// Worker `index`'s thread: a single-threaded runtime serving the connections dealt to it.
fn worker(
    index: usize,
    server: Arc<Server>,
    lanes: Lanes<mpsc::Receiver<Handoff>>,
    stopped: watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| ServeError::Worker { index, source })?;
    runtime.block_on(async move {
        let adopt = |(stream, _): Handoff| tokio::net::TcpStream::from_std(stream);
        let http_server = crate::http::serve(
            server.clone(),
            ReceiverStream::new(lanes.http).map(adopt),
            wait_for(stopped.clone()),
        );
        let grpc_server = crate::grpc::serve(
            server.clone(),
            ReceiverStream::new(lanes.grpc).map(adopt),
            wait_for(stopped.clone()),
        );
        let debug_server = crate::http::debug::serve(
            server,
            ReceiverStream::new(lanes.debug).map(adopt),
            wait_for(stopped),
        );
        tokio::join!(http_server, grpc_server, debug_server);
        Ok(())
    })
}

async fn wait_for(mut stopped: watch::Receiver<bool>) {
    // An error means the sender is gone, which also means stop.
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// The signals `serve` answers, registered with the OS.
struct Signals {
    hup: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Registers the handlers now (signals that arrive before they are awaited are kept).
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            hup: signal(SignalKind::hangup())?,
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }
}

/// SIGHUP reloads the config; SIGTERM or SIGINT starts the graceful shutdown.
async fn watch_signals(server: Arc<Server>, mut signals: Signals, stop: watch::Sender<bool>) {
    loop {
        tokio::select! {
            _ = signals.hup.recv() => match server.reload() {
                Ok(()) => tracing::info!("config reloaded (SIGHUP)"),
                Err(e) => tracing::error!(error = %e, "reload failed; keeping the running config"),
            },
            _ = signals.term.recv() => break,
            _ = signals.int.recv() => break,
        }
    }
    tracing::info!("shutting down: no new connections, finishing in-flight calls");
    server.set_not_ready();
    let _ = stop.send(true);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listening_line_reads_back() {
        let mut listening = Listening {
            http: "127.0.0.1:43121".parse().unwrap(),
            grpc: "[::1]:8081".parse().unwrap(),
            debug: None,
        };
        let line = listening.to_string();
        assert_eq!(
            line,
            "floodgate listening http=127.0.0.1:43121 grpc=[::1]:8081"
        );
        assert_eq!(Listening::parse(&line), Some(listening));
        assert_eq!(Listening::parse(&format!("{line}\n")), Some(listening));
        listening.debug = Some("127.0.0.1:6070".parse().unwrap());
        let line = listening.to_string();
        assert!(
            line.ends_with(" grpc=[::1]:8081 debug=127.0.0.1:6070"),
            "{line}"
        );
        assert_eq!(Listening::parse(&line), Some(listening));
        for other in [
            "",
            "floodgate listening",
            "floodgate listening http=127.0.0.1:1",
            "floodgate listening grpc=127.0.0.1:1 http=127.0.0.1:2",
            "floodgate listening http=127.0.0.1:1 grpc=127.0.0.1:2 extra",
            "floodgate listening http=127.0.0.1:1 grpc=127.0.0.1:2 debug=127.0.0.1:3 extra",
            "2026-01-01T00:00:00Z INFO floodgate serving workers=2",
        ] {
            assert_eq!(Listening::parse(other), None, "{other:?}");
        }
    }
}
