//! [`Capabilities`]: what a store can do beyond applying transitions, asked by whoever builds
//! on a store chosen at run time (the service, `check-config`), never guessed from its type.
//!
//! A store answers, before anything is sent:
//! - which algorithms it runs ([`Capabilities::runs`]: a refusal names the store, the
//!   algorithm and why), and whether it gives units back under one
//!   ([`Capabilities::takes_refunds`]);
//! - whether its state is shared by every process that uses it ([`Capabilities::is_shared`]:
//!   Redis, memcached), or is this process's alone (memory, the durable file store), which
//!   decides whether a lease taken on one node can be given back on another, whether the
//!   Rate Limit Quota Service's shares are the fleet's, and which stages decide on one node;
//! - whether it runs a chain of links as one atomic step that can undo all-or-nothing links
//!   ([`Capabilities::chains_atomically`]);
//! - whether it can be used now ([`Capabilities::probe`], the readiness check).
//!
//! And it serves two side ports, each a store's own business:
//! - a secret shared by the nodes using it ([`Capabilities::shared_secret`]: `None` when the
//!   store is not shared);
//! - the claims of shared limits, the Rate Limit Quota Service's division
//!   ([`Capabilities::claim`]), atomic per limit: the memory and file stores step
//!   [`crate::quota::Claims`] in this process at the caller's `now`; Redis runs the Lua twin at
//!   its own `TIME`, so that nodes whose clocks differ agree.

use std::future::Future;
use std::time::Duration;

use crate::algorithm::spec::AnyAlgorithm;
use crate::algorithm::Algorithm;
use crate::quota::{ClaimStep, ClaimTerms, Claimed};
use crate::{Nanos, OpKind, StoreError};

/// What a store can do (see the [module documentation](self)). Every store of this crate
/// implements it, and [`super::AnyStore`] answers for the store it holds.
pub trait Capabilities: Send + Sync {
    /// The store's kind, as errors, logs, metrics and `/readyz` name it (`memory`, `redis`,
    /// `redis-cluster`, `memcached`, `file`).
    fn kind(&self) -> &'static str;

    /// `Ok` when the store can run `algorithm` with these parameters; otherwise the refusal
    /// ([`StoreError::NotOnStore`]) naming the store, the algorithm and why.
    fn runs(&self, algorithm: &AnyAlgorithm) -> Result<(), StoreError>;

    /// Whether the store gives units back under `algorithm` (Envoy's `is_negative_hits`): the
    /// algorithm takes refunds and the store runs them. The default asks both.
    fn takes_refunds(&self, algorithm: &AnyAlgorithm) -> bool {
        algorithm.supports(OpKind::Refund) && self.runs(algorithm).is_ok()
    }

    /// Whether every process using the store sees the same state (a server's store), rather
    /// than this process alone.
    fn is_shared(&self) -> bool;

    /// Whether [`super::Store::apply_chain`] and [`super::Store::apply_chain_refused`] run a
    /// chain as one atomic step, undoing its all-or-nothing links (see [`super::chain`]).
    /// `false`: all-or-nothing links are refused.
    fn chains_atomically(&self) -> bool;

    /// Checks that the store can be used now, on the path decisions take (connecting if it
    /// must); `Ok` at once for a store in this process.
    fn probe(&self) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The secret the processes sharing this store agree on under `key`: `candidate` if no
    /// process stored one before, else the one stored first. `None` for a store that is not
    /// shared (the caller keeps its own).
    fn shared_secret(
        &self,
        key: &str,
        candidate: &str,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;

    /// Takes `step` on the claims of the shared limit `limit` under `terms`, atomically, and
    /// answers as [`crate::quota::Claims::apply`] does. `now` is the caller's clock, which a
    /// store in this process steps at; a store shared by several nodes reads its own.
    fn claim(
        &self,
        limit: &str,
        step: ClaimStep<'_>,
        terms: &ClaimTerms,
        now: Nanos,
    ) -> impl Future<Output = Result<Claimed, StoreError>> + Send;

    /// Forgets, at `now`, the claimants that have not stepped for `idle`, and the limits left
    /// with nothing: the sweep for a store whose claims do not expire by themselves. The
    /// default does nothing (Redis expires its claims' keys).
    fn sweep_claims(&self, now: Nanos, idle: Duration) {
        let _ = (now, idle);
    }
}

/// A shared store can do what it can.
impl<T: Capabilities> Capabilities for std::sync::Arc<T> {
    fn kind(&self) -> &'static str {
        (**self).kind()
    }

    fn runs(&self, algorithm: &AnyAlgorithm) -> Result<(), StoreError> {
        (**self).runs(algorithm)
    }

    fn takes_refunds(&self, algorithm: &AnyAlgorithm) -> bool {
        (**self).takes_refunds(algorithm)
    }

    fn is_shared(&self) -> bool {
        (**self).is_shared()
    }

    fn chains_atomically(&self) -> bool {
        (**self).chains_atomically()
    }

    fn probe(&self) -> impl Future<Output = Result<(), StoreError>> + Send {
        (**self).probe()
    }

    fn shared_secret(
        &self,
        key: &str,
        candidate: &str,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send {
        (**self).shared_secret(key, candidate)
    }

    fn claim(
        &self,
        limit: &str,
        step: ClaimStep<'_>,
        terms: &ClaimTerms,
        now: Nanos,
    ) -> impl Future<Output = Result<Claimed, StoreError>> + Send {
        (**self).claim(limit, step, terms, now)
    }

    fn sweep_claims(&self, now: Nanos, idle: Duration) {
        (**self).sweep_claims(now, idle)
    }
}
