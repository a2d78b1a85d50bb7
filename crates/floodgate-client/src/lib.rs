//! The other side of the wire: a tower layer for HTTP clients that learns a server's limits
//! from its responses and stays under them.
//!
//! ```text
//! PoliteLayer ─► Polite<S> ─► per host (and partition):
//!     signal  what each response says: IETF RateLimit-Policy/RateLimit, X-RateLimit-*,
//!             Retry-After (it takes precedence)
//!     pace    one pacer per announced quota: wait (≤ max_wait) rather than be refused
//!     retry   429/503 and connection errors, full-jitter backoff, a retry budget, only for
//!             requests safe to retry
//!     adapt   no fields at all: CUBIC finds the send rate from refusals, SRE throttling
//!             refuses locally when the server drowns, optional AIMD concurrency cap
//!     state   snapshots and counters for metrics
//! ```
//!
//! Wrap any tower HTTP client service whose requests are `http::Request<B>` and answers
//! `http::Response<_>`: hyper-util's client, `ReqwestService` (feature `reqwest`), a tonic
//! `Channel` (with [`PoliteLayer::never_replay`], its bodies are streams).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use std::time::Duration;
//! use floodgate_client::PoliteLayer;
//! use http_body_util::Full;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use tower::{Layer, Service, ServiceExt};
//!
//! let layer = PoliteLayer::builder().max_wait(Duration::from_secs(2)).build()?;
//! let state = layer.state();
//! let hyper = Client::builder(TokioExecutor::new()).build_http::<Full<bytes::Bytes>>();
//! let mut client = layer.layer(hyper);
//! let request = http::Request::get("http://127.0.0.1:8080/").body(Full::default())?;
//! let response = client.ready().await?.call(request).await?;
//! println!("{} — {:?}", response.status(), state.totals());
//! # Ok(()) }
//! ```
//!
//! Every wait goes through an injected [`Timer`]: [`TokioTimer`] in production,
//! [`ManualTimer`] in tests and simulations.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]

// The guide's Rust snippets compile as this crate's doctests. Absent from the published
// package.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/polite-client.md")]
struct PoliteClientGuide;

pub mod adaptive;
pub mod backoff;
pub mod budget;
pub mod config;
pub mod error;
pub mod host;
pub mod pace;
pub mod replay;
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub mod reqwest_adapter;
pub mod service;
pub mod settings;
pub mod signal;
pub mod snapshot;
pub mod state;
pub mod timer;

pub use config::{PoliteLayer, PoliteLayerBuilder, PoliteLayerWith};
pub use error::{BoxError, LocalRefusal, PoliteError};
pub use replay::{is_safe_to_retry, CloneBody, NeverReplay, Replay, Retryable};
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub use reqwest_adapter::ReqwestService;
pub use service::{is_refusal, Polite};
pub use settings::{ConcurrencySettings, Settings};
pub use signal::{Dialect, Quota, Signal};
pub use state::{ClientState, Counters, HostSnapshot, PolicySnapshot};
pub use timer::{ManualTimer, Timer, TokioTimer};
