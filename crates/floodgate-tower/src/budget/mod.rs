//! A usage budget in front of a service: each request reserves an estimate of its cost (an LLM
//! call's tokens) from a [`KeyedLimit`](floodgate::limiter::KeyedLimit), and its response settles the reservation at what the
//! response reports it cost ([`KeyedLimit::reserve`](floodgate::limiter::KeyedLimit::reserve), [`KeyedLimit::settle`](floodgate::limiter::KeyedLimit::settle)).
//!
//! ```text
//! request ─► Extractor (user) ─► estimate(request head) ─► KeyedLimit::reserve
//!         ─► refused: 429 + Retry-After + JSON, inner not called
//!            admitted: inner service ─► response; the cost read from the response
//!                      ─► settled when its body ends, or is dropped
//! ```
//!
//! - **The cost** is read, first found first: a [`UsageTokens`] extension the handler put in
//!   the response, the usage header (by default `x-usage-tokens`, a decimal count) in the
//!   response's head, or the same header in the body's trailers (for a streamed response,
//!   whose cost is known only at its end). A response that reports none is settled at the
//!   estimate: nothing is charged or given back.
//! - **Settled once**, when the body yields its last frame, or fails, or is dropped (the
//!   client went away): the difference is charged (counted even past the budget, which then
//!   refuses requests until it is paid back) or refunded, in the background
//!   ([`KeyedLimit::settle_detached`](floodgate::limiter::KeyedLimit::settle_detached)).
//! - **Failing open**: when the store fails, the request goes ahead holding nothing; a request
//!   the extractor cannot place is answered 500, as [`crate::FloodgateLayer`] answers it.
//!
//! ```
//! use axum::{routing::post, Router};
//! use floodgate::algorithm::fixed_window::FixedWindow;
//! use floodgate::limiter::KeyedLimit;
//! use floodgate::store::MemoryStore;
//! use floodgate_tower::TokenBudgetLayer;
//! use std::time::Duration;
//!
//! # async fn chat() -> &'static str { "" }
//! let tokens = KeyedLimit::new(
//!     "tokens",
//!     FixedWindow::new(100_000, Duration::from_secs(60))?,
//!     MemoryStore::new(),
//! )?;
//! // The estimate: the request's max_tokens, sent by the client in a header here.
//! let budget = TokenBudgetLayer::new(tokens, |head| {
//!     head.headers
//!         .get("x-max-tokens")
//!         .and_then(|v| v.to_str().ok()?.parse().ok())
//!         .unwrap_or(4_096)
//! })?;
//! let app: Router = Router::new().route("/v1/chat", post(chat)).route_layer(budget);
//! # let _ = app;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The overshoot of the budget is then at most what the requests in flight at the last
//! admission used beyond their estimates; an estimate that is the request's maximum never
//! overshoots (docs/usage-based-limits.md).

mod body;
mod layer;
mod service;

pub use body::BudgetBody;
pub use layer::TokenBudgetLayer;
pub use service::{BudgetFuture, TokenBudget};

/// The header a response reports its cost in by default.
pub const USAGE_HEADER: &str = "x-usage-tokens";

/// A response's cost, in the budget's units, put in the response's extensions by a handler
/// that knows it when the head is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsageTokens(pub u64);
