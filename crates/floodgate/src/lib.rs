//! Floodgate decides, for each request, *allow or refuse, and why*.
//!
//! The crate is layered so that each layer can be read and tested alone:
//!
//! - [`algorithm`]: pure transition functions over `(state, now, op)`, one file per classic
//!   rate-limiting algorithm, each documenting its exact rule, units, state size and bound.
//! - [`store`]: where per-key state lives; a store's only job is to apply an algorithm's transition
//!   to one key's state atomically ([`store::Store`]), each limiter in its own
//!   [`store::Namespace`]. [`store::MemoryStore`] is the embedded, bounded, sharded store.
//! - [`limiter`]: algorithms put to work on a store: a [`limiter::KeyedLimit`] on any key, and
//!   Stripe's four (request rate, concurrency, fleet and utilization shedding).
//! - [`pipeline`]: an ordered list of stages, each a named limiter with its mode (enforce,
//!   shadow, off), failure policy and refusal status; Stripe's four are a preset.
//! - [`quota`]: one limit shared by clients that each enforce their part alone: who claims it,
//!   and each one's max-min fair share.
//! - [`clock`]: every instant comes from an injected [`Clock`]; tests use [`ManualClock`].
//! - [`blocking`]: the same calls from synchronous code.
//!
//! What a first program needs is at the crate's root (the front door): the algorithms
//! ([`TokenBucket`], [`Gcra`], …), the limiters ([`KeyedLimit`], Stripe's four), the stores
//! ([`MemoryStore`], [`AnyStore`]) and the [`Pipeline`]; the modules hold the rest.
//!
//! ```
//! use floodgate::{KeyedLimit, MemoryStore, TokenBucket};
//!
//! // 10 requests per second per user, bursts of 20.
//! let limit = KeyedLimit::new("api", TokenBucket::new(10.0, 20)?, MemoryStore::new())?;
//! let decision = limit.check_blocking("alice", 1)?;
//! assert!(decision.allowed);
//! assert_eq!(decision.remaining, 19);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A denial is a normal [`Decision`] with `allowed == false`; `Err` is kept for infrastructure
//! failures ([`StoreError`]) and invalid configuration ([`ConfigError`]).
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod algorithm;
pub mod blocking;
pub mod clock;
pub mod duration;
pub mod quota;
// The guide (docs/limiters.md), its links made intra-doc links by build.rs.
#[doc = include_str!(concat!(env!("OUT_DIR"), "/guide.md"))]
pub mod guide {}
mod decision;
mod error;
pub mod limiter;
pub mod pipeline;
pub mod store;
mod sync;

pub use clock::{Clock, CoarseClock, ManualClock, Nanos, SystemClock};
pub use decision::{Decision, LeaseId, Op, OpKind};
pub use error::{ConfigError, StoreError};

// The front door: what a first program names, without the module paths.
pub use algorithm::fixed_window::FixedWindow;
pub use algorithm::gcra::Gcra;
pub use algorithm::leaky_bucket::LeakyBucket;
pub use algorithm::leaky_queue::LeakyQueue;
pub use algorithm::sliding_log::SlidingLog;
pub use algorithm::sliding_window::SlidingWindow;
pub use algorithm::smooth::{SmoothBursty, SmoothWarmingUp};
pub use algorithm::spec::AnyAlgorithm;
pub use algorithm::token_bucket::TokenBucket;
pub use limiter::adaptive::AdaptiveConcurrencyLimiter;
pub use limiter::concurrency::ConcurrencyLimiter;
pub use limiter::fleet::FleetShedder;
pub use limiter::request_rate::{Plan, RequestRateLimiter};
pub use limiter::utilization::UtilizationShedder;
pub use limiter::{KeyedLimit, Lease, Priority};
pub use pipeline::{Mode, OnStoreError};
pub use pipeline::{Pipeline, Scope, Stage, Verdict};
pub use store::{AnyStore, LocalStore, MemoryStore, Namespace, Store};
#[cfg(feature = "redis")]
pub use store::{CachedStore, RedisStore};
