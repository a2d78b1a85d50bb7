//! Where per-key state lives, and the one thing a store does: apply an algorithm's transition to
//! one key's state atomically.
//!
//! [`Store`] is the contract every backend implements. The embedded [`MemoryStore`] answers at
//! once, for any algorithm; the [`WordStore`] is its twin for states that fit in one word of 8
//! or 16 bytes (GCRA's, the fixed window's, the buckets'): its checks take no lock, a refusal
//! writes nothing and an admission writes only the key's own word, so threads on different keys
//! share no lock line (see [`word`]); the contract is written so that a remote store can implement it
//! by running each algorithm's transition server-side. Every store keeps these:
//! - each [`Store::apply`] is linearizable per key: concurrent calls on one key behave as if they
//!   ran one after the other, so no update is lost and nothing is over-admitted;
//! - "now" is the store's own clock (the memory store's injected [`crate::Clock`], Redis `TIME`),
//!   read once per decision;
//! - an operation the algorithm does not support is refused with
//!   [`StoreError::Unsupported`] before any state is touched;
//! - a key holding another algorithm's state is refused with [`StoreError::StateConflict`],
//!   never reset: limiters sharing a store keep their keys apart by [`Namespace`];
//! - [`Store::apply_many`] applies several independent operations (for example the per-user and
//!   the per-endpoint limits of one request) in one call, which a remote store makes one round
//!   trip; each is atomic on its own key, and they are not a transaction together;
//! - [`Store::apply_chain`] applies the operations of one request in order, in one call, ending
//!   at the first enforcing denial and optionally undoing all-or-nothing links (see [`chain`]).

use std::future::Future;

use crate::algorithm::Algorithm;
use crate::{Decision, Op, StoreError};

mod any;
#[cfg(any(feature = "redis", feature = "memcached"))]
mod breaker;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod cached;
pub mod capabilities;
pub mod chain;
mod counters;
#[cfg(feature = "file")]
#[cfg_attr(docsrs, doc(cfg(feature = "file")))]
pub mod file;
pub mod holds;
mod key;
mod local;
#[cfg(feature = "memcached")]
#[cfg_attr(docsrs, doc(cfg(feature = "memcached")))]
pub mod memcached;
mod memory;
mod namespace;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
mod shard_lock;
pub mod url;
pub mod word;

pub use crate::error::Rejection;
pub use any::AnyStore;
#[cfg(any(feature = "redis", feature = "memcached"))]
pub use any::UpstreamCounters;
#[cfg(any(feature = "redis", feature = "memcached"))]
pub use breaker::BreakerState;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use cached::{CachedStats, CachedStore, CachedStoreBuilder};
pub use capabilities::Capabilities;
pub use chain::{Link, Linked};
pub use counters::CounterIncrement;
#[cfg(feature = "file")]
#[cfg_attr(docsrs, doc(cfg(feature = "file")))]
pub use file::{FileStore, FileStoreBuilder, FileStoreError, JournalStats};
pub use holds::Namespaces;
pub use key::{Key, OwnedKey};
pub use local::LocalStore;
#[cfg(feature = "memcached")]
#[cfg_attr(docsrs, doc(cfg(feature = "memcached")))]
pub use memcached::{MemcachedStore, MemcachedStoreBuilder};
pub use memory::{MemoryStore, MemoryStoreBuilder, Overflow, StoreStats};
pub use namespace::{Namespace, ScopedKey, INLINE_KEY_BYTES};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis::{RedisStore, RedisStoreBuilder};
pub use url::{redacted, StoreUrl, Topology};
pub use word::{WordState, WordStore};

/// One operation of a batch given to [`Store::apply_many`].
#[derive(Debug)]
pub struct KeyedOp<'a, K: ?Sized, A> {
    /// The algorithm (with its parameters) that decides this operation.
    pub algorithm: &'a A,
    /// The key whose state the operation reads and updates.
    pub key: &'a K,
    /// The operation.
    pub op: Op,
}

impl<K: ?Sized, A> Clone for KeyedOp<'_, K, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: ?Sized, A> Copy for KeyedOp<'_, K, A> {}

impl<K: ?Sized, A: Algorithm, T: Store<K, A> + ?Sized + Send + Sync> Store<K, A>
    for std::sync::Arc<T>
{
    fn apply(
        &self,
        algorithm: &A,
        key: &K,
        op: Op,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        (**self).apply(algorithm, key, op)
    }

    fn apply_many(
        &self,
        requests: &[KeyedOp<'_, K, A>],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        (**self).apply_many(requests)
    }

    fn apply_chain(
        &self,
        links: &[Link<'_, K, A>],
    ) -> impl Future<Output = Result<Vec<Linked>, StoreError>> + Send
    where
        K: Sync,
    {
        (**self).apply_chain(links)
    }

    fn apply_chain_refused(
        &self,
        links: &[Link<'_, K, A>],
    ) -> impl Future<Output = Result<Vec<Linked>, StoreError>> + Send
    where
        K: Sync,
    {
        (**self).apply_chain_refused(links)
    }

    fn same_store(&self, other: &Self) -> bool {
        (**self).same_store(other)
    }

    fn namespaces(&self) -> Option<&Namespaces> {
        (**self).namespaces()
    }

    fn apply_detached(&self, algorithm: &A, key: &K, op: Op) {
        (**self).apply_detached(algorithm, key, op)
    }
}

/// [`Store::apply_many`] for a store that answers at once: every request's operation is checked
/// first (an unsupported one anywhere refuses the batch before anything is applied), then
/// `apply` applies each in order.
pub(crate) fn apply_each<Q: ?Sized, A: Algorithm>(
    requests: &[KeyedOp<'_, Q, A>],
    mut apply: impl FnMut(&KeyedOp<'_, Q, A>) -> Result<Decision, StoreError>,
) -> Result<Vec<Decision>, StoreError> {
    requests
        .iter()
        .try_for_each(|r| ensure_supported(r.algorithm, r.op))?;
    requests.iter().map(&mut apply).collect()
}

/// Refuses `op` with [`StoreError::Unsupported`] when `algorithm` does not implement it: every
/// store checks this before touching any state.
pub(crate) fn ensure_supported<A: Algorithm>(algorithm: &A, op: Op) -> Result<(), StoreError> {
    if algorithm.supports(op.kind()) {
        Ok(())
    } else {
        Err(StoreError::Unsupported {
            algorithm: algorithm.name(),
            op: op.kind(),
        })
    }
}

/// A keyed state store that applies algorithm transitions atomically.
///
/// `K` is the borrowed key type callers pass (`str`, `u64`, `[u8]`); `A` the algorithm.
pub trait Store<K: ?Sized, A: Algorithm>: Send + Sync {
    /// Applies `op` to `key`'s state under `algorithm`, atomically, at the store's current time.
    ///
    /// `Err` only for infrastructure failures and unsupported operations; a denial is an
    /// `Ok(Decision)` with `allowed == false`.
    fn apply(
        &self,
        algorithm: &A,
        key: &K,
        op: Op,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send;

    /// Applies each request in order, each atomically on its own key, in one call; the
    /// decisions come back in the same order. If the call fails, none or some of the requests
    /// may have been applied (each one either fully or not at all).
    fn apply_many(
        &self,
        requests: &[KeyedOp<'_, K, A>],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send;

    /// Applies a chain of operations in order, in one call: the operations one request makes
    /// on several keys. See [`chain`] for the exact rules (the first enforcing denial ends the
    /// chain; all-or-nothing links are undone when it does).
    ///
    /// The default applies the links one [`Store::apply`] at a time and refuses chains with
    /// all-or-nothing links; the memory and Redis stores run a chain as one atomic step.
    fn apply_chain(
        &self,
        links: &[Link<'_, K, A>],
    ) -> impl Future<Output = Result<Vec<Linked>, StoreError>> + Send
    where
        K: Sync,
    {
        chain::apply_in_turn(self, links)
    }

    /// [`Store::apply_chain`] for a request already refused after the chain's last link, by a
    /// stage that decides without this store (a shedder on this node, an adaptive limit): the
    /// links run exactly as `apply_chain` runs them (so an earlier link's denial still ends the
    /// chain), and every all-or-nothing link applied is undone at the end, as if a refusing
    /// link had denied after the last one. The caller learns each link's decision, and the
    /// refused request consumes nothing from the all-or-nothing limits (see [`chain`]).
    ///
    /// The default cannot undo: it refuses a chain with an all-or-nothing link with
    /// [`StoreError::NotOnStore`] before anything is applied, and runs any other chain with
    /// [`Store::apply_chain`]. The memory and Redis stores undo atomically with the chain.
    fn apply_chain_refused(
        &self,
        links: &[Link<'_, K, A>],
    ) -> impl Future<Output = Result<Vec<Linked>, StoreError>> + Send
    where
        K: Sync,
    {
        async move {
            chain::refuse_undoing(links)?;
            self.apply_chain(links).await
        }
    }

    /// Whether `other` is this very store (a clone sharing its state counts), so that one
    /// chain may carry operations meant for both. The default is pointer identity.
    fn same_store(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }

    /// The namespaces this store's live limiters hold, so that two limiters never count in
    /// one namespace by accident (see [`holds`]). `None`, the default, keeps no record and
    /// checks nothing; the stores of this crate keep one, shared by their clones.
    fn namespaces(&self) -> Option<&Namespaces> {
        None
    }

    /// Applies `op` without waiting for its decision, for callers that cannot wait: a lease
    /// returned from a `Drop` implementation. Failures are not reported (a lease that is not
    /// returned expires after its TTL).
    ///
    /// The default polls [`Store::apply`]'s future once and drops it if it is not ready, which
    /// is right for stores that answer at once (the memory store). Remote stores override it to
    /// send the operation in the background.
    fn apply_detached(&self, algorithm: &A, key: &K, op: Op) {
        let future = std::pin::pin!(self.apply(algorithm, key, op));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let _ = future.poll(&mut cx);
    }
}
