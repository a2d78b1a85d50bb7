//! The Floodgate service: everything `floodgate serve` runs. Its configuration (Floodgate's own
//! format and envoyproxy/ratelimit's), the store it counts in (memory or Redis) and its health,
//! Envoy's rate limit rules, the HTTP JSON and gRPC faces, the admin API, metrics and the live
//! dashboard, and the process that serves them ([`runtime`]). The offline tools (`simulate`,
//! `replay`, `bench`) are the `floodgate-tools` crate; the `floodgate` binary is
//! `floodgate-server`, thin over both.
//!
//! Modules import one way, bottom to top: the leaves (`environment`, `rls`, `prometheus`,
//! `lease_token` and `reservation_token`, `proto`), `cli`, `descriptors`, `config` (plain data and its validation),
//! `store`, `metrics` and `connections`, then `served` (what a configuration serves),
//! `statsd` (and `dogstatsd` over it), `dashboard` and `upstream_metrics`, then `grpc` and `xds`, `service`, `http`, and
//! `runtime` on top
//! (ARCHITECTURE.md draws the rows and says where each concern lives).
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

/// This build's version, as `GET /` and `/v1/dashboard` show it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub mod cli;
pub mod config;
mod connections;
mod dashboard;
pub mod descriptors;
pub mod dogstatsd;
pub mod environment;
pub mod grpc;
pub mod http;
pub mod lease_token;
pub mod metrics;
pub mod prometheus;
pub mod proto;
pub mod reservation_token;
pub mod rlqs;
pub mod rls;
pub mod runtime;
pub mod served;
pub mod service;
pub mod statsd;
pub mod store;
mod traces;
mod upstream_metrics;
mod xds;
