//! The debug listener, as envoyproxy/ratelimit's `DEBUG_PORT` serves it: plain text for people
//! and scripts, off the decision path, on its own address (`debug` in the config, `--debug`,
//! or `DEBUG_HOST`/`DEBUG_PORT`).
//!
//! | path | answer |
//! |---|---|
//! | `/rlconfig` | the loaded Envoy rules, one line each ([`crate::descriptors::RuleSet::listing`]); empty when none |
//! | `/stats` | the service's counters, as `/metrics` on the HTTP port writes them |
//! | `/` and any other path | the index below |
//!
//! Upstream also serves Go's profiler under `/debug/pprof/`; Floodgate has no equivalent (its
//! index does not list one).

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio_stream::Stream;

use crate::service::Server;

/// What `/` (and every unknown path) answers: each endpoint and what it is for, one a line,
/// sorted, as upstream's index lists them.
pub const INDEX: &str = "/rlconfig: print out the currently loaded configuration for debugging\n\
                         /stats: print out stats\n";

/// The debug listener's routes over a shared [`Server`]. Every method is answered alike, as
/// upstream's plain multiplexer answers them.
pub fn router(server: Arc<Server>) -> Router {
    Router::new()
        .route("/rlconfig", axum::routing::any(rlconfig))
        .route("/stats", axum::routing::any(stats))
        .route("/", get(index))
        .fallback(index)
        .with_state(server)
}

/// Serves the debug listener on every connection `connections` yields until `shutdown`
/// completes, under the same connection limits as the HTTP API ([`super::serve`]).
pub async fn serve<S, T, F>(server: Arc<Server>, connections: S, shutdown: F)
where
    S: Stream<Item = std::io::Result<T>>,
    T: Into<crate::connections::Conn>,
    F: std::future::Future<Output = ()>,
{
    super::serve_router(
        "debug",
        router(server.clone()),
        &server,
        connections,
        shutdown,
    )
    .await;
}

/// Serves `/metrics`' text at `path` (and 404 elsewhere) on every connection `connections`
/// yields until `shutdown` completes: the listener of `stats.prometheus` (envoyproxy/ratelimit's
/// `USE_PROMETHEUS`, `PROMETHEUS_ADDR`, `PROMETHEUS_PATH`).
pub async fn serve_metrics<S, T, F>(server: Arc<Server>, path: String, connections: S, shutdown: F)
where
    S: Stream<Item = std::io::Result<T>>,
    T: Into<crate::connections::Conn>,
    F: std::future::Future<Output = ()>,
{
    let router = if path.starts_with('/') {
        Router::new().route(&path, get(prometheus))
    } else {
        Router::new()
    };
    super::serve_router(
        "metrics",
        router.with_state(server.clone()),
        &server,
        connections,
        shutdown,
    )
    .await;
}

async fn index() -> Response {
    text(INDEX.to_string())
}

async fn rlconfig(State(server): State<Arc<Server>>) -> Response {
    text(server.rlconfig())
}

async fn stats(State(server): State<Arc<Server>>) -> Response {
    text(server.render_metrics().await)
}

/// Floodgate's series, then upstream's names for the same counts.
async fn prometheus(State(server): State<Arc<Server>>) -> Response {
    let mut body = server.render_metrics().await;
    let totals = crate::statsd::Source::totals(&*server);
    crate::upstream_metrics::render(
        &totals,
        server.metrics(),
        server.upstream_mapping(),
        &mut body,
    );
    ([("content-type", "text/plain; version=0.0.4")], body).into_response()
}

fn text(body: String) -> Response {
    ([("content-type", "text/plain; charset=utf-8")], body).into_response()
}
