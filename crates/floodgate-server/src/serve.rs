//! `floodgate serve`: the HTTP JSON API and Envoy's rate-limit gRPC API on one process, with
//! reload on `SIGHUP` and graceful shutdown on `SIGTERM`/`SIGINT` (stop accepting, let
//! in-flight calls finish, exit 0).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::{Config, ConfigFileError};
use crate::server::Server;

/// The HTTP address used when neither the command line nor the config names one.
pub const DEFAULT_HTTP: &str = "127.0.0.1:8080";
/// The gRPC address used when neither the command line nor the config names one.
pub const DEFAULT_GRPC: &str = "127.0.0.1:8081";

/// Arguments of `floodgate serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// A YAML config: Floodgate's own format or envoyproxy/ratelimit's. Without one, the
    /// built-in example (Stripe's four limiters, plans free/standard/pro) runs.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Where the HTTP JSON API listens (default: the config's `http`, else 127.0.0.1:8080).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Where the Envoy RLS gRPC API listens (default: the config's `grpc`, else
    /// 127.0.0.1:8081).
    #[arg(long, value_name = "ADDR")]
    pub grpc: Option<SocketAddr>,
}

/// Why `serve` could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The config file is unreadable or invalid.
    #[error(transparent)]
    Config(#[from] ConfigFileError),
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// A server failed while running.
    #[error("server error: {0}")]
    Run(String),
}

/// Loads the config, binds both listeners and serves until a shutdown signal.
pub async fn serve(args: ServeArgs) -> Result<(), ServeError> {
    let config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::builtin(),
    };
    let http_addr = args
        .http
        .or(config.http)
        .unwrap_or_else(|| parse_addr(DEFAULT_HTTP));
    let grpc_addr = args
        .grpc
        .or(config.grpc)
        .unwrap_or_else(|| parse_addr(DEFAULT_GRPC));
    let admin_token = std::env::var("FLOODGATE_ADMIN_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    let server = Arc::new(Server::new(config, args.config.clone(), admin_token)?);
    let http = bind(http_addr).await?;
    let grpc = bind(grpc_addr).await?;
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(watch_signals(server.clone(), stop));
    tracing::info!(
        http = %http.local_addr().map_or(http_addr, |a| a),
        grpc = %grpc.local_addr().map_or(grpc_addr, |a| a),
        config = ?args.config,
        "floodgate serving"
    );
    run(server, http, grpc, stopped).await
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

/// Serves both APIs on already-bound listeners until `stopped` turns true, then drains.
pub async fn run(
    server: Arc<Server>,
    http: TcpListener,
    grpc: TcpListener,
    stopped: watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let http_server = axum::serve(
        http,
        crate::http::router(server.clone()).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(wait_for(stopped.clone()));
    let grpc_server = tonic::transport::Server::builder()
        .add_service(crate::grpc::service(server.clone()))
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(grpc),
            wait_for(stopped),
        );
    let (h, g) = tokio::join!(http_server, grpc_server);
    h.map_err(|e| ServeError::Run(format!("http: {e}")))?;
    g.map_err(|e| ServeError::Run(format!("grpc: {e}")))?;
    tracing::info!("floodgate stopped");
    Ok(())
}

async fn wait_for(mut stopped: watch::Receiver<bool>) {
    // An error means the sender is gone, which also means stop.
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// SIGHUP reloads the config; SIGTERM or SIGINT starts the graceful shutdown.
async fn watch_signals(server: Arc<Server>, stop: watch::Sender<bool>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut hup), Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::hangup()),
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop the process with SIGKILL");
        return;
    };
    loop {
        tokio::select! {
            _ = hup.recv() => match server.reload() {
                Ok(()) => tracing::info!("config reloaded (SIGHUP)"),
                Err(e) => tracing::error!(error = %e, "reload failed; keeping the running config"),
            },
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    tracing::info!("shutting down: no new connections, finishing in-flight calls");
    server.set_not_ready();
    let _ = stop.send(true);
}
