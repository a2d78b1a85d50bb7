//! Tower middleware that runs Floodgate's limiters in front of a service: axum routers, hyper
//! services and tonic servers alike.
//!
//! ```text
//! request ─► Extractor ─► RequestInfo (user, plan, priority, endpoint)
//!         ─► Pipeline::evaluate ─► refused: 429 / 503 + JSON (or a gRPC status), inner not called
//!                                 allowed: inner service, leases held until the body ends
//! ```
//!
//! - [`FloodgateLayer`] ([`layer`]): holds the shared pipeline, extractor and worker gauge;
//!   the services it makes, and their clones, share that one state.
//! - [`Floodgate`] ([`service`]): the service; its [`ResponseFuture`] ([`future`]) and
//!   [`FloodgateBody`] ([`body`]) hold the request's concurrency and fleet leases and its busy
//!   worker until the response body has been sent, and give them back when dropped (client
//!   gone, timeout, cancellation).
//! - [`Extractor`] and [`RequestInfo`] ([`extract`]): who is asking, on which plan, and how
//!   important the request is.
//! - [`CredentialKey`] ([`credential`]): secrets never become keys or text. An API key or
//!   bearer token is keyed by its HMAC-SHA256 under a MAC key (`key:` and 32 hex digits), and
//!   shown to people (refusal messages, `Debug`) only as an 8-digit fingerprint; client
//!   addresses and `anonymous` are not secrets and stay as they are. Nodes sharing a store
//!   must share the MAC key ([`Extractor::credential_key`]); the default is a random key per
//!   process.
//! - [`response`]: refusals (429 from the per-user limiters, 503 from the shedders) carry an
//!   actionable JSON body (a gRPC status for gRPC requests) and the `Retry-After`,
//!   `RateLimit-Policy` and `RateLimit` fields; allowed responses carry the rate-limit fields
//!   too.
//!
//! The middleware never becomes the outage: the pipeline fails open on store errors by
//! default, and any failure of the middleware itself lets the request through.
//!
//! ```no_run
//! use axum::{routing::get, Router};
//! use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
//! use floodgate::pipeline::Pipeline;
//! use floodgate::store::MemoryStore;
//! use floodgate_tower::{Extractor, FloodgateLayer};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = RequestRateLimiter::builder()
//!     .plans(Plan::examples())
//!     .default_plan("free")
//!     .build(MemoryStore::new())?;
//! let pipeline = Pipeline::builder().limiter(limiter).build()?;
//! let layer = FloodgateLayer::new(pipeline).extractor(
//!     Extractor::new().plan_lookup(|key| (key == "sk_pro_1").then(|| "pro".to_string())),
//! );
//! let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(layer);
//! # let _ = app; Ok(())
//! # }
//! ```
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod body;
pub mod credential;
pub mod extract;
pub mod future;
pub mod layer;
pub mod response;
pub mod service;

pub use body::FloodgateBody;
pub use credential::{shown_user, CredentialKey};
pub use extract::{
    client_ip_from_extensions, AttributeSource, Extractor, RequestInfo, TestMode, ANONYMOUS,
    MAX_CREDENTIAL_LEN,
};
pub use future::ResponseFuture;
pub use layer::FloodgateLayer;
pub use service::Floodgate;
