//! Tower middleware that runs Floodgate's limiters in front of a service: axum routers, hyper
//! services and tonic servers alike.
//!
//! Two lines put a per-client limit in front of an axum router (with the `axum` feature, so
//! that the client's address is read from axum's `ConnectInfo`):
//!
//! ```
//! use axum::{routing::get, Router};
//! use floodgate_tower::FloodgateLayer;
//! use std::net::SocketAddr;
//!
//! # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
//! let layer = FloodgateLayer::per_ip(10.0, 20)?; // 10 a second per address, bursts of 20
//! let app = Router::new().route("/", get(|| async { "hello" })).route_layer(layer);
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(()) }
//! ```
//!
//! [`FloodgateLayer::per_api_key`] and [`FloodgateLayer::per_header`] key by credential or
//! header instead; [`PerKey`] takes another algorithm, a store chosen at run time (memory or
//! Redis from a URL: [`AnyStore`](floodgate::store::AnyStore)) and clients behind proxies;
//! [`FloodgateLayer::new`] runs any [`Pipeline`](floodgate::pipeline::Pipeline), Stripe's four
//! limiters included.
//!
//! ```text
//! request ─► Extractor ─► RequestInfo (user, plan, priority, endpoint)
//!         ─► Pipeline::evaluate ─► refused: 429 / 503 + JSON (or a gRPC status), inner not called
//!                                 allowed: inner service, Admitted in the request's extensions,
//!                                          leases held until the body ends
//! ```
//!
//! - [`FloodgateLayer`] ([`layer`]): holds the shared pipeline, extractor and worker gauge;
//!   the services it makes, and their clones, share that one state. [`per_key`]: the
//!   two-line start.
//! - [`Floodgate`] ([`service`]): the service; its [`ResponseFuture`] ([`future`]) and
//!   [`FloodgateBody`] ([`body`]) hold the request's concurrency and fleet leases and its busy
//!   worker until the response body has been sent, and give them back when dropped (client
//!   gone, timeout, cancellation).
//! - [`TokenBudgetLayer`] ([`budget`]): a usage budget (an LLM API's tokens): each request
//!   reserves an estimate and its response settles it at the cost it reports (a header, a
//!   trailer or [`UsageTokens`]) when its body ends or is dropped.
//! - [`Extractor`] and [`RequestInfo`] ([`extract`]): who is asking ([`KeyBy`], any
//!   [`KeyExtractor`]), on which plan, and how important the request is; [`address`]: where
//!   the client's address comes from, proxies included ([`ClientAddress`]).
//! - [`CredentialKey`] ([`credential`]): secrets never become keys or text. An API key or
//!   bearer token is keyed by its HMAC-SHA256 under a MAC key (`key:` and 32 hex digits), and
//!   shown to people (refusal messages, `Debug`) only as an 8-digit fingerprint; client
//!   addresses are not secrets and stay as they are. Nodes sharing a store must share the MAC
//!   key ([`Extractor::credential_key`]); the default is a random key per process.
//! - [`response`]: refusals (429 from the per-user limiters, 503 from the shedders) carry an
//!   actionable JSON body (a gRPC status for gRPC requests) and the `Retry-After`,
//!   `RateLimit-Policy` and `RateLimit` fields, shaped by [`FloodgateLayer::on_refusal`] if you
//!   want; allowed responses carry the rate-limit fields too, and handlers find [`Admitted`]
//!   ([`admitted`]) in the request's extensions.
//!
//! The middleware never becomes the outage: the pipeline fails open on store errors by
//! default, and any failure of the middleware itself lets the request through. The one thing
//! it does not guess is who the client is: a request it cannot place (no address, no key) is
//! answered 500 saying what to set up ([`Unidentified`]).
//!
//! # Where the layer goes
//!
//! - **`route_layer`, not `layer`.** axum's `Router::layer` also wraps the fallback, so every
//!   request to a path that does not exist (a scanner's 404s) spends quota;
//!   `Router::route_layer` limits only requests that reach a route.
//! - **Before authentication.** Limiting runs first, so that a flood of bad credentials is
//!   refused cheaply, before any database is asked. Made-up API keys each get a bucket of
//!   their own, so put a per-address stage first (below).
//! - **Inside a timeout**: a timeout around the limit bounds the whole request, the store's
//!   answer included, and when it fires the request is dropped, which gives its leases back.
//! - **Inside tracing and metrics layers**, so that refusals are traced and counted like
//!   other responses; **inside CORS**, so that preflight requests, which browsers send on
//!   their own, are answered by the CORS layer without spending quota.
//!
//! ```
//! use std::time::Duration;
//! use axum::extract::Request;
//! use axum::http::StatusCode;
//! use axum::middleware::{self, Next};
//! use axum::response::Response;
//! use axum::{routing::get, Router};
//! use floodgate_tower::FloodgateLayer;
//! use tower_http::{cors::CorsLayer, timeout::TimeoutLayer, trace::TraceLayer};
//!
//! /// Your own authentication: it runs only for requests the limit let through.
//! async fn authenticate(request: Request, next: Next) -> Result<Response, StatusCode> {
//!     match request.headers().get("x-api-key") {
//!         Some(_key) => Ok(next.run(request).await), // look the key up here
//!         None => Err(StatusCode::UNAUTHORIZED),
//!     }
//! }
//!
//! # fn main() -> Result<(), floodgate::ConfigError> {
//! // Each layer wraps the ones above it: a request meets them from the bottom up.
//! let app: Router = Router::new()
//!     .route("/v1/charges", get(|| async { "charges" }))
//!     .route_layer(middleware::from_fn(authenticate))
//!     .route_layer(FloodgateLayer::per_api_key(100.0, 200)?)
//!     .layer(TimeoutLayer::with_status_code(StatusCode::REQUEST_TIMEOUT, Duration::from_secs(10)))
//!     .layer(TraceLayer::new_for_http())
//!     .layer(CorsLayer::permissive());
//! # let _ = app; Ok(())
//! # }
//! ```
//!
//! # Per address and per key together
//!
//! A per-key limit alone lets a client that makes up a new API key for every request start
//! with a full bucket each time. Two stages close that: every request spends from its
//! address's bucket first, then from its key's.
//!
//! ```
//! use floodgate::algorithm::token_bucket::TokenBucket;
//! use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
//! use floodgate::pipeline::scope::KeyTemplate;
//! use floodgate::pipeline::{Pipeline, Scope, Stage};
//! use floodgate::store::AnyStore;
//! use floodgate_tower::{AttributeSource, Extractor, FloodgateLayer};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = AnyStore::memory();
//! let per_ip = RequestRateLimiter::builder()
//!     .namespace("per_ip")
//!     .plan(Plan::limit("per_ip", TokenBucket::new(50.0, 100)?.into())?)
//!     .build(store.clone())?;
//! let per_key = RequestRateLimiter::builder()
//!     .namespace("per_key")
//!     .plan(Plan::limit("per_key", TokenBucket::new(10.0, 20)?.into())?)
//!     .build(store)?;
//! let pipeline = Pipeline::builder()
//!     // Keyed by the `ip` attribute: the address, whatever key the request carries.
//!     .stage(Stage::new(per_ip).scope(Scope::all().key(KeyTemplate::parse("{attributes.ip}")?)))
//!     // Keyed by the user: the hashed key, else the address.
//!     .stage(Stage::new(per_key))
//!     .build()?;
//! let layer = FloodgateLayer::new(pipeline)
//!     .extractor(Extractor::new().attribute("ip", AttributeSource::ClientIp));
//! # let _ = layer; Ok(())
//! # }
//! ```
//!
//! # Per route, in one pipeline
//!
//! Stages may apply to some requests only ([`Scope`](floodgate::pipeline::Scope) and
//! [`When`](floodgate::pipeline::scope::When)): one layer over the whole router, with a
//! tighter limit on one route.
//!
//! ```
//! use floodgate::algorithm::token_bucket::TokenBucket;
//! use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
//! use floodgate::pipeline::scope::{Field, Pattern, When};
//! use floodgate::pipeline::{Pipeline, Scope, Stage};
//! use floodgate::store::AnyStore;
//! use floodgate_tower::{Extractor, FloodgateLayer, KeyBy};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = AnyStore::memory();
//! let limit = |name: &str, rate: f64, capacity: u64| -> Result<_, floodgate::ConfigError> {
//!     RequestRateLimiter::builder()
//!         .namespace(name)
//!         .plan(Plan::limit(name, TokenBucket::new(rate, capacity)?.into())?)
//!         .build(store.clone())
//! };
//! let logins = When::always().field(Field::Endpoint, vec![Pattern::new("/login")]);
//! let pipeline = Pipeline::builder()
//!     .stage(Stage::new(limit("login", 0.2, 5)?).scope(Scope::all().when(logins)))
//!     .stage(Stage::new(limit("api", 10.0, 20)?))
//!     .build()?;
//! let layer = FloodgateLayer::new(pipeline).extractor(Extractor::new().key_by(KeyBy::Address));
//! # let _ = layer; Ok(())
//! # }
//! ```
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod address;
pub mod admitted;
pub mod budget;
pub mod credential;
pub mod extract;
pub mod gate;
pub mod response;

// The repository's own pages: their Rust snippets compile (and run) as this crate's doctests,
// where the middleware and axum are at hand. Absent from the published package.
#[cfg(doctest)]
mod pages {
    #[doc = include_str!("../../../README.md")]
    struct Readme;
    #[doc = include_str!("../../../docs/library.md")]
    struct Library;
    #[doc = include_str!("../../../docs/usage-based-limits.md")]
    struct UsageBasedLimits;
}

// The pipeline middleware's modules, where they were before it had a folder of its own.
pub use gate::{body, future, layer, per_key, service};

pub use address::{connection_address, ClientAddress, TrustedProxies, Unidentified};
pub use admitted::Admitted;
pub use body::FloodgateBody;
pub use budget::{TokenBudgetLayer, UsageTokens};
pub use credential::{shown_user, CredentialKey};
pub use extract::{
    AttributeSource, Extractor, KeyBy, KeyExtractor, RequestInfo, TestMode, ANONYMOUS,
    MAX_CREDENTIAL_LEN,
};
pub use future::ResponseFuture;
pub use layer::FloodgateLayer;
pub use per_key::PerKey;
pub use response::RefusalFn;
pub use service::Floodgate;
