//! Floodgate decides, for each request, *allow or refuse, and why*.
//!
//! The crate is layered so that each layer can be read and tested alone:
//!
//! - [`algorithm`]: pure transition functions over `(state, now, op)`, one file per classic
//!   rate-limiting algorithm, each documenting its exact rule, units, state size and bound.
//! - [`store`]: where per-key state lives; a store's only job is to apply an algorithm's transition
//!   to one key's state atomically ([`store::Store`]). [`store::MemoryStore`] is the embedded,
//!   bounded, sharded default.
//! - [`clock`]: every instant comes from an injected [`Clock`]; tests use [`ManualClock`].
//!
//! A denial is a normal [`Decision`] with `allowed == false`; `Err` is kept for infrastructure
//! failures ([`StoreError`]) and invalid configuration ([`ConfigError`]).
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod algorithm;
pub mod clock;
#[doc = include_str!("../../../docs/limiters.md")]
pub mod guide {}
mod decision;
mod error;
pub mod limiter;
pub mod pipeline;
pub mod store;

pub use clock::{Clock, CoarseClock, ManualClock, Nanos, SystemClock};
pub use decision::{Decision, Op, OpKind};
pub use error::{ConfigError, StoreError};
