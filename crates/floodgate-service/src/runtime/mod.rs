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
//! It is written directly, not through the log, so that no log filter hides it: as it is, with
//! no timestamp, level or colour, or with `LOG_FORMAT=json` as a JSON object whose
//! `fields.message` is the line ([`Listening::to_json`]); the addresses are the bound ones, so `--http 127.0.0.1:0` (and
//! `--grpc`, `--debug`) let the operating system choose a free port and the line says which.
//! Signal handlers are installed before the line is written.

use std::fmt;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;

mod acceptor;
pub mod check;
mod logging;
pub mod settings;
mod start;
pub mod watch;

pub use self::acceptor::{run, GrpcListener, Listeners};
pub use self::settings::{Addresses, ConfigFlags, GrpcAddress, Logging, SettingsError, Startup};
use self::start::{
    admin_token, build, follow_xds, load, log_startup, with_lease_secret, xds_over_file,
};

use crate::config::{ConfigFileError, ConfigSource};
use crate::environment::Environment;
use crate::service::Server;

/// The shortest admin token accepted (`FLOODGATE_ADMIN_TOKEN`), in bytes: the admin API
/// switches limits off, and the dashboard shows who calls most.
pub const MIN_ADMIN_TOKEN_BYTES: usize = 16;

/// The HTTP address used when neither the command line nor the config names one.
pub const DEFAULT_HTTP: &str = "127.0.0.1:8080";
/// The gRPC address used when neither the command line nor the config names one.
pub const DEFAULT_GRPC: &str = "127.0.0.1:8081";

/// Arguments of `floodgate serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// A YAML config file, Floodgate's own format or envoyproxy/ratelimit's, or a directory of
    /// them (every *.yaml and *.yml file directly in it: envoyproxy/ratelimit domain files plus
    /// at most one Floodgate file). Re-read on SIGHUP, POST /admin/reload and (--watch) when it
    /// changes. Without one: FLOODGATE_CONFIG, else envoyproxy/ratelimit's runtime directory
    /// when its settings are in the environment (RUNTIME_ROOT…), else the built-in example
    /// (Stripe's four limiters, plans free/standard/pro).
    #[arg(long, value_name = "FILE|DIR")]
    pub config: Option<PathBuf>,
    /// Re-read the configuration when its files change (debounced): on by default for a
    /// directory and envoyproxy/ratelimit's runtime directory (FLOODGATE_WATCH=false turns it
    /// off), off for a file.
    #[arg(long, conflicts_with = "no_watch")]
    pub watch: bool,
    /// Do not watch the configuration's files (reload on SIGHUP and POST /admin/reload only).
    #[arg(long)]
    pub no_watch: bool,
    /// Merge domains defined more than once (in several files of a directory) instead of
    /// refusing them, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG; the config's
    /// `rls.merge_domains`, FLOODGATE_MERGE_DOMAINS and MERGE_DOMAIN_CONFIG set it otherwise.
    #[arg(long)]
    pub merge_domains: bool,
    /// Add RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset to every Envoy answer, as
    /// envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED; the config's
    /// `rls.response_headers` (which also renames them), FLOODGATE_RESPONSE_HEADERS and
    /// LIMIT_RESPONSE_HEADERS_ENABLED set it otherwise.
    #[arg(long)]
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
    pub store: crate::cli::ConfigStoreArg,
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listening {
    /// The HTTP JSON API's bound address.
    pub http: SocketAddr,
    /// The Envoy RLS gRPC API's bound address (`unix:PATH` for a unix socket).
    pub grpc: GrpcAddress,
    /// The debug listener's bound address, when there is one.
    pub debug: Option<SocketAddr>,
    /// The Prometheus listener's bound address (`stats.prometheus`), when there is one.
    pub metrics: Option<SocketAddr>,
}

impl Listening {
    /// What the line starts with.
    pub const PREFIX: &'static str = "floodgate listening ";

    /// The line as a JSON object, for a JSON log: `{"level":"INFO","fields":{"message":LINE,
    /// "http":…,"grpc":…[,"debug":…][,"metrics":…]},"target":"floodgate_service::runtime"}`.
    pub fn to_json(&self) -> String {
        let mut fields = serde_json::json!({
            "message": self.to_string(),
            "http": self.http.to_string(),
            "grpc": match &self.grpc {
                GrpcAddress::Tcp(addr) => addr.to_string(),
                GrpcAddress::Unix(path) => format!("unix:{}", path.display()),
            },
        });
        for (name, addr) in [("debug", self.debug), ("metrics", self.metrics)] {
            if let Some(addr) = addr {
                fields[name] = addr.to_string().into();
            }
        }
        serde_json::json!({
            "level": "INFO",
            "fields": fields,
            "target": "floodgate_service::runtime",
        })
        .to_string()
    }

    /// Reads a listening line (a trailing newline is allowed), as written or as a JSON log
    /// line ([`Listening::to_json`]); `None` for any other line.
    pub fn parse(line: &str) -> Option<Listening> {
        let line = line.trim_end_matches(['\r', '\n']);
        if line.starts_with('{') {
            let value: serde_json::Value = serde_json::from_str(line).ok()?;
            return Listening::parse(value["fields"]["message"].as_str()?);
        }
        let rest = line.strip_prefix(Self::PREFIX)?;
        let mut fields = rest.split(' ');
        let http = fields.next()?.strip_prefix("http=")?.parse().ok()?;
        let grpc = fields.next()?.strip_prefix("grpc=")?;
        let grpc = match grpc.strip_prefix("unix:") {
            Some(path) => GrpcAddress::Unix(path.into()),
            None => GrpcAddress::Tcp(grpc.parse().ok()?),
        };
        let mut field = fields.next();
        let mut optional = |name: &str| -> Option<Option<SocketAddr>> {
            match field.and_then(|f| f.strip_prefix(name)) {
                Some(addr) => {
                    field = fields.next();
                    Some(Some(addr.parse().ok()?))
                }
                None => Some(None),
            }
        };
        let debug = optional("debug=")?;
        let metrics = optional("metrics=")?;
        if field.is_some() {
            return None;
        }
        Some(Listening {
            http,
            grpc,
            debug,
            metrics,
        })
    }
}

impl fmt::Display for Listening {
    /// The line, without its newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}http={} grpc=", Self::PREFIX, self.http)?;
        match &self.grpc {
            GrpcAddress::Tcp(addr) => write!(f, "{addr}")?,
            GrpcAddress::Unix(path) => write!(f, "unix:{}", path.display())?,
        }
        if let Some(debug) = self.debug {
            write!(f, " debug={debug}")?;
        }
        match self.metrics {
            Some(metrics) => write!(f, " metrics={metrics}"),
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
    /// A setting in the environment cannot be read or honoured.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// A `TRACING_*` or `OTEL_*` variable cannot be read or honoured.
    #[error(transparent)]
    TraceSettings(crate::environment::EnvError),
    /// Traces are on and could not start.
    #[error(transparent)]
    Traces(#[from] crate::traces::TracesError),
    /// The gRPC unix socket could not be bound.
    #[error("cannot listen on the unix socket {}: {source}", path.display())]
    BindUnix {
        /// The socket's path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The store could not be used within `store.startup_timeout`.
    #[error("cannot use the store {url}: {error} (tried for {}; check store.url (or --store) and the store itself, or set store.start_without: true to start anyway, each stage following its on_store_error policy)", floodgate::duration::format_duration(*.waited))]
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
    /// `FLOODGATE_ADMIN_TOKEN` is too short to be guessed by no one.
    #[error("FLOODGATE_ADMIN_TOKEN holds {bytes} bytes: the admin token needs at least {MIN_ADMIN_TOKEN_BYTES} (for example 32 random bytes, hex-encoded: openssl rand -hex 32)")]
    AdminToken {
        /// Its length.
        bytes: usize,
    },
    /// `FLOODGATE_LEASE_SECRET` is too short to sign lease tokens safely.
    #[error("FLOODGATE_LEASE_SECRET holds {bytes} bytes: a lease tokens' secret needs at least {} (for example 32 random bytes, hex-encoded: openssl rand -hex 32)", crate::lease_token::MIN_SECRET_BYTES)]
    LeaseSecret {
        /// Its length.
        bytes: usize,
    },
    /// A listener's TLS files cannot be used.
    #[error("TLS: {0}")]
    Tls(#[from] crate::connections::tls::TlsError),
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

impl ServeError {
    /// The exit status: 2 for a setting the environment gives that cannot be used (as for a
    /// bad argument), 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            ServeError::Settings(_)
            | ServeError::TraceSettings(_)
            | ServeError::AdminToken { .. }
            | ServeError::LeaseSecret { .. } => 2,
            _ => 1,
        }
    }
}

/// Spawns on `runtime` the pushes of statistics `stats` asks for: statsd, DogStatsD.
fn spawn_pushes(
    server: &Arc<Server>,
    stats: crate::config::StatsConfig,
    runtime: &tokio::runtime::Runtime,
) {
    if let Some(statsd) = stats.statsd {
        runtime.spawn(crate::statsd::push(server.clone(), statsd));
    }
    if let Some(dogstatsd) = stats.dogstatsd {
        runtime.spawn(crate::dogstatsd::push(server.clone(), dogstatsd));
    }
}

/// Starts exporting traces if `env` turns them on (`TRACING_ENABLED`; see
/// [`crate::environment::traces`]): `None` when off. Called before logging is installed, whose
/// subscriber takes the exporter's layer.
pub fn start_traces(env: &Environment) -> Result<Option<crate::traces::Exporting>, ServeError> {
    match crate::environment::traces::Traces::read(env).map_err(ServeError::TraceSettings)? {
        Some(traces) => Ok(Some(crate::traces::Exporting::start(&traces)?)),
        None => Ok(None),
    }
}

/// Logs, once logging is installed, that the command-line arguments `args` are ignored (the
/// binary runs under envoyproxy/ratelimit's entry point name, and upstream's binary reads no
/// argument), naming them without their values
/// ([`crate::environment::upstream::ignored_argument_names`]). Nothing when there are none.
pub fn announce_ignored_arguments(args: &[std::ffi::OsString]) {
    if !args.is_empty() {
        tracing::info!(
            arguments = ?crate::environment::upstream::ignored_argument_names(args),
            "command-line arguments ignored, as envoyproxy/ratelimit ignores them"
        );
    }
}

/// Loads the config, binds the listeners, starts the workers and serves until a shutdown
/// signal, with the settings the command line, the config and `env` give (see [`settings`]);
/// `as_ratelimit`: the binary runs under envoyproxy/ratelimit's entry point name. Blocks the
/// calling thread.
pub fn serve(args: ServeArgs, env: Environment, as_ratelimit: bool) -> Result<(), ServeError> {
    // Read: the settings, then the configuration with them applied.
    let mut startup = Startup::read(&args, env, as_ratelimit)?;
    let json_log =
        Logging::read(startup.env(), startup.upstream.is_some()).is_ok_and(|logging| logging.json);
    log_startup(&startup);
    let mut loaded = load(&startup, args.store.url.as_deref())?;
    xds_over_file(&mut startup, &mut loaded);
    let file_xds = loaded.file_config.xds.clone();
    let addresses = startup.addresses(&args, &loaded.config)?;
    let admin_token = admin_token(&startup)?;
    // Build: the server over its store, inside the runtime the store's connection lives in
    // (a Redis store's housekeeping runs there), which lives as long as `serve`.
    let store_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("floodgate-store")
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    let stats = loaded.config.stats.clone();
    let metrics_path = loaded
        .config
        .stats
        .prometheus
        .as_ref()
        .map(|p| p.path.clone());
    let tls = crate::service::ListenersTls::load(&loaded.config.tls)?;
    let server = build(&startup, &args, loaded, admin_token, &tls, &store_runtime)?;
    let xds_status = Arc::new(crate::xds::XdsStatus::default());
    let server = server.with_http_address(addresses.http);
    let server = match &startup.source {
        ConfigSource::Xds(_) => server.with_xds(xds_status.clone()),
        _ => server,
    };
    let server = Arc::new(with_lease_secret(server, &startup, &store_runtime)?);
    // Spawn: what runs beside the requests, on the store's runtime (off the request path).
    store_runtime.spawn(sample_dashboard(server.clone()));
    store_runtime.spawn(watch_store(server.clone()));
    spawn_pushes(&server, stats, &store_runtime);
    for terminator in [tls.grpc, tls.http].into_iter().flatten() {
        store_runtime.spawn(watch::follow_tls(terminator));
    }
    if startup.watch {
        store_runtime.spawn(watch::follow(server.clone(), startup.source.clone()));
    }
    follow_xds(
        &server,
        xds_status,
        &startup,
        file_xds.as_ref(),
        &store_runtime,
    );
    // Serve: bind the listeners and run the workers until a shutdown signal.
    let workers = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let acceptor = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    acceptor.block_on(async {
        let (listeners, listening) = bind_all(&addresses, metrics_path).await?;
        let (stop, stopped) = tokio::sync::watch::channel(false);
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
        announce(&listening, json_log);
        tracing::info!(threads = workers, config = %startup.source, watch = startup.watch, "floodgate serving");
        server.announce_node_local_stages();
        run(server, listeners, workers, stopped).await
    })
}

/// Binds every listener `addresses` names; the listeners, and the addresses they are bound to.
async fn bind_all(
    addresses: &Addresses,
    metrics_path: Option<String>,
) -> Result<(Listeners, Listening), ServeError> {
    let http = bind(addresses.http).await?;
    let (grpc, grpc_bound) = match &addresses.grpc {
        GrpcAddress::Tcp(addr) => {
            let listener = bind(*addr).await?;
            let bound = GrpcAddress::Tcp(local_addr(&listener, *addr)?);
            (GrpcListener::Tcp(listener), bound)
        }
        GrpcAddress::Unix(path) => {
            let listener =
                tokio::net::UnixListener::bind(path).map_err(|source| ServeError::BindUnix {
                    path: path.clone(),
                    source,
                })?;
            (
                GrpcListener::Unix(listener),
                GrpcAddress::Unix(path.clone()),
            )
        }
    };
    let debug = match addresses.debug {
        Some(addr) => Some((bind(addr).await?, addr)),
        None => None,
    };
    let metrics = match addresses.metrics {
        Some(addr) => Some((bind(addr).await?, addr)),
        None => None,
    };
    let listening = Listening {
        http: local_addr(&http, addresses.http)?,
        grpc: grpc_bound,
        debug: match &debug {
            Some((listener, addr)) => Some(local_addr(listener, *addr)?),
            None => None,
        },
        metrics: match &metrics {
            Some((listener, addr)) => Some(local_addr(listener, *addr)?),
            None => None,
        },
    };
    let listeners = Listeners {
        http,
        grpc,
        debug: debug.map(|(listener, _)| listener),
        metrics: metrics.map(|(listener, _)| (listener, metrics_path.unwrap_or_default())),
    };
    Ok((listeners, listening))
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

/// While the store's last call failed and no call told anything of it for a whole
/// [`STORE_PROBE_INTERVAL`] (none failed and none wrote: see
/// [`crate::store::StoreHealth::telling_calls`]), probes it on the write path decisions take
/// ([`crate::store::ServiceStore::probe`]), so that its recovery is seen (and `/readyz` turns
/// ready) even when no traffic comes, as when a load balancer has taken the node out because it
/// was not ready. While decisions are made, they alone say whether the store works: a probe
/// that succeeds where decisions fail must not call the store recovered between two of them.
async fn watch_store(server: Arc<Server>) {
    let mut interval = tokio::time::interval(STORE_PROBE_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let health = server.store().health();
    let mut told = health.telling_calls();
    loop {
        interval.tick().await;
        let quiet = health.telling_calls() == told;
        if quiet && health.last_call_ok() == Some(false) {
            // The outcome is recorded in the store's health (and logged at a bounded rate).
            let _ = server.store().probe().await;
        }
        told = health.telling_calls();
    }
}

/// Writes the listening line to stderr in one write, so that no log line can split it: as
/// it is, or, when the log is JSON (`LOG_FORMAT=json`), as a JSON object shaped as the log's
/// lines are, its `fields.message` the line ([`Listening::to_json`]).
fn announce(listening: &Listening, json: bool) {
    let line = if json {
        format!("{}\n", listening.to_json())
    } else {
        format!("{listening}\n")
    };
    // Nothing to do if stderr is gone; the service runs on.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

fn local_addr(listener: &TcpListener, addr: SocketAddr) -> Result<SocketAddr, ServeError> {
    listener
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

async fn wait_for(mut stopped: tokio::sync::watch::Receiver<bool>) {
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
async fn watch_signals(
    server: Arc<Server>,
    mut signals: Signals,
    stop: tokio::sync::watch::Sender<bool>,
) {
    loop {
        tokio::select! {
            // The reload logs what it did, or why it was refused.
            _ = signals.hup.recv() => {
                let _ = server.reload(crate::service::Trigger::Signal);
            }
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
            grpc: GrpcAddress::Tcp("[::1]:8081".parse().unwrap()),
            debug: None,
            metrics: None,
        };
        let line = listening.to_string();
        assert_eq!(
            line,
            "floodgate listening http=127.0.0.1:43121 grpc=[::1]:8081"
        );
        assert_eq!(Listening::parse(&line), Some(listening.clone()));
        assert_eq!(
            Listening::parse(&format!("{line}\n")),
            Some(listening.clone())
        );
        listening.debug = Some("127.0.0.1:6070".parse().unwrap());
        let line = listening.to_string();
        assert!(
            line.ends_with(" grpc=[::1]:8081 debug=127.0.0.1:6070"),
            "{line}"
        );
        assert_eq!(Listening::parse(&line), Some(listening.clone()));
        listening.metrics = Some("0.0.0.0:9090".parse().unwrap());
        let line = listening.to_string();
        assert!(
            line.ends_with(" debug=127.0.0.1:6070 metrics=0.0.0.0:9090"),
            "{line}"
        );
        assert_eq!(Listening::parse(&line), Some(listening.clone()));
        listening.debug = None;
        assert_eq!(
            Listening::parse(&listening.to_string()),
            Some(listening.clone())
        );
        listening.debug = Some("127.0.0.1:6070".parse().unwrap());
        listening.grpc = GrpcAddress::Unix("/run/rl.sock".into());
        let line = listening.to_string();
        assert!(line.contains(" grpc=unix:/run/rl.sock "), "{line}");
        assert_eq!(Listening::parse(&line), Some(listening.clone()));
        // The same line in a JSON log.
        let json = listening.to_json();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["fields"]["grpc"], "unix:/run/rl.sock");
        assert_eq!(Listening::parse(&json), Some(listening));
        assert_eq!(
            Listening::parse("{\"fields\":{\"message\":\"other\"}}"),
            None
        );
        for other in [
            "",
            "floodgate listening",
            "floodgate listening http=127.0.0.1:1",
            "floodgate listening grpc=127.0.0.1:1 http=127.0.0.1:2",
            "floodgate listening http=127.0.0.1:1 grpc=127.0.0.1:2 extra",
            "floodgate listening http=127.0.0.1:1 grpc=127.0.0.1:2 debug=127.0.0.1:3 extra",
            "floodgate listening http=127.0.0.1:1 grpc=127.0.0.1:2 metrics=127.0.0.1:3 debug=127.0.0.1:4",
            "2026-01-01T00:00:00Z INFO floodgate serving workers=2",
        ] {
            assert_eq!(Listening::parse(other), None, "{other:?}");
        }
    }
}
