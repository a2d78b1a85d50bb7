//! The acceptor and the workers: one task takes connections from every listener and deals them
//! out to the workers in turn, each worker a thread with a single-threaded runtime serving the
//! connections handed to it (see the [parent module](super)).

use std::sync::Arc;

use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

use super::ServeError;
use crate::connections::Conn;
use crate::service::Server;

/// How long the acceptor waits after a failed accept (out of file descriptors, say) before it
/// tries again.
const ACCEPT_ERROR_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// A connection on its way from the acceptor to a worker: a std stream, because a tokio
/// stream belongs to the runtime that accepted it.
#[derive(Debug)]
enum Handoff {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl Handoff {
    /// The stream, adopted by the calling worker's runtime.
    fn adopt(self) -> std::io::Result<Conn> {
        match self {
            Handoff::Tcp(stream) => tokio::net::TcpStream::from_std(stream).map(Conn::Tcp),
            Handoff::Unix(stream) => tokio::net::UnixStream::from_std(stream).map(Conn::Unix),
        }
    }
}

/// The gRPC API's listener: TCP, or a unix socket.
#[derive(Debug)]
pub enum GrpcListener {
    /// On a TCP address.
    Tcp(TcpListener),
    /// On a unix socket (envoyproxy/ratelimit's `GRPC_UDS`).
    Unix(UnixListener),
}

/// The bound listeners `serve` takes connections from.
#[derive(Debug)]
pub struct Listeners {
    /// The HTTP JSON API's.
    pub http: TcpListener,
    /// The Envoy RLS gRPC API's.
    pub grpc: GrpcListener,
    /// The debug listener's, if there is one.
    pub debug: Option<TcpListener>,
    /// The Prometheus listener's and the path it serves the metrics at, if there is one.
    pub metrics: Option<(TcpListener, String)>,
}

/// One worker's queues of connections, one per listener.
struct Lanes<T> {
    http: T,
    grpc: T,
    debug: T,
    metrics: T,
}

/// Serves the APIs on already-bound listeners with `workers` worker threads until `stopped`
/// turns true, then lets in-flight calls finish.
pub async fn run(
    server: Arc<Server>,
    listeners: Listeners,
    workers: usize,
    stopped: watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let Listeners {
        http,
        grpc,
        debug,
        metrics,
    } = listeners;
    let (metrics, metrics_path) = match metrics {
        Some((listener, path)) => (Some(listener), path),
        None => (None, String::new()),
    };
    let (lanes, threads) = start_workers(&server, workers, &metrics_path, &stopped)?;
    let mut turn = 0usize;
    let mut stop = stopped.clone();
    loop {
        type Pick = fn(&Lanes<mpsc::Sender<Handoff>>) -> &mpsc::Sender<Handoff>;
        let (accepted, pick): (std::io::Result<Handoff>, Pick) = tokio::select! {
            a = http.accept() => (a.and_then(|(s, _)| tcp(s)), |l| &l.http),
            a = accept_grpc(&grpc) => (a, |l| &l.grpc),
            a = accept_optional(debug.as_ref()) => (a.and_then(|(s, _)| tcp(s)), |l| &l.debug),
            a = accept_optional(metrics.as_ref()) => (a.and_then(|(s, _)| tcp(s)), |l| &l.metrics),
            _ = stop.wait_for(|s| *s) => break,
        };
        match accepted {
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
    if let GrpcListener::Unix(listener) = &grpc {
        // The socket's file goes with the process, so that the next one can bind it.
        if let Some(path) = listener
            .local_addr()
            .ok()
            .as_ref()
            .and_then(|a| a.as_pathname())
        {
            let _ = std::fs::remove_file(path);
        }
    }
    drop((http, grpc, debug, metrics, lanes));
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

/// Worker threads and the queues that hand them connections.
type Workers = (
    Vec<Lanes<mpsc::Sender<Handoff>>>,
    Vec<std::thread::JoinHandle<Result<(), ServeError>>>,
);

/// Starts `workers` worker threads, each with its own runtime and a queue per listener: the
/// queues' senders, and the threads.
fn start_workers(
    server: &Arc<Server>,
    workers: usize,
    metrics_path: &str,
    stopped: &watch::Receiver<bool>,
) -> Result<Workers, ServeError> {
    let mut lanes = Vec::with_capacity(workers);
    let mut threads = Vec::with_capacity(workers);
    for i in 0..workers {
        let (http_tx, http_rx) = mpsc::channel::<Handoff>(1024);
        let (grpc_tx, grpc_rx) = mpsc::channel::<Handoff>(1024);
        let (debug_tx, debug_rx) = mpsc::channel::<Handoff>(16);
        let (metrics_tx, metrics_rx) = mpsc::channel::<Handoff>(16);
        lanes.push(Lanes {
            http: http_tx,
            grpc: grpc_tx,
            debug: debug_tx,
            metrics: metrics_tx,
        });
        let received = Lanes {
            http: http_rx,
            grpc: grpc_rx,
            debug: debug_rx,
            metrics: metrics_rx,
        };
        let (server, stopped) = (server.clone(), stopped.clone());
        let metrics_path = metrics_path.to_string();
        let thread = std::thread::Builder::new()
            .name(format!("floodgate-worker-{i}"))
            .spawn(move || worker(i, server, received, metrics_path, stopped))
            .map_err(|source| ServeError::Worker { index: i, source })?;
        threads.push(thread);
    }
    Ok((lanes, threads))
}

/// A TCP connection, ready to hand off.
fn tcp(stream: tokio::net::TcpStream) -> std::io::Result<Handoff> {
    stream.set_nodelay(true)?;
    Ok(Handoff::Tcp(stream.into_std()?))
}

async fn accept_grpc(listener: &GrpcListener) -> std::io::Result<Handoff> {
    match listener {
        GrpcListener::Tcp(listener) => tcp(listener.accept().await?.0),
        GrpcListener::Unix(listener) => Ok(Handoff::Unix(listener.accept().await?.0.into_std()?)),
    }
}

/// The next connection on `listener`; never, when there is none.
async fn accept_optional(
    listener: Option<&TcpListener>,
) -> std::io::Result<(tokio::net::TcpStream, std::net::SocketAddr)> {
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
    metrics_path: String,
    stopped: watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| ServeError::Worker { index, source })?;
    runtime.block_on(async move {
        let http_server = crate::http::serve(
            server.clone(),
            ReceiverStream::new(lanes.http).map(Handoff::adopt),
            super::wait_for(stopped.clone()),
        );
        let grpc_server = crate::grpc::serve(
            server.clone(),
            ReceiverStream::new(lanes.grpc).map(Handoff::adopt),
            super::wait_for(stopped.clone()),
        );
        let debug_server = crate::http::debug::serve(
            server.clone(),
            ReceiverStream::new(lanes.debug).map(Handoff::adopt),
            super::wait_for(stopped.clone()),
        );
        let metrics_server = crate::http::debug::serve_metrics(
            server,
            metrics_path,
            ReceiverStream::new(lanes.metrics).map(Handoff::adopt),
            super::wait_for(stopped),
        );
        tokio::join!(http_server, grpc_server, debug_server, metrics_server);
        Ok(())
    })
}
