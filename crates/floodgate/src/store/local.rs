//! What both in-process stores answer beyond [`Store`](super::Store): the
//! [`MemoryStore`](super::MemoryStore), for any state behind a lock per shard, and the
//! [`WordStore`](super::WordStore), for states of one word changed by compare-and-swap. Their
//! tables share nothing; their surface is this one trait, so that code and tests can hold
//! either and ask the same questions.

use std::borrow::Borrow;
use std::hash::Hash;

use super::{OwnedKey, StoreStats};
use crate::algorithm::Algorithm;
use crate::{Decision, Op, StoreError};

/// An in-process store of states `S` by keys `K`: decisions made at once on the calling
/// thread, a bound on the keys held, and the counters of what the bound did.
pub trait LocalStore<K, S> {
    /// Applies `op` to `key`'s state under `algorithm`, now, and returns the decision:
    /// [`Store::apply`](super::Store::apply) without the future, since the store answers at
    /// once. An operation the algorithm does not support is refused before any state is
    /// touched.
    fn apply_now<Q, A>(&self, algorithm: &A, key: &Q, op: Op) -> Result<Decision, StoreError>
    where
        A: Algorithm<State = S>,
        K: OwnedKey<Q>,
        Q: Hash + Eq + ?Sized;

    /// Drops every key whose state is fresh at the store's current time (lossless; see
    /// [`Algorithm::is_fresh`]). The store does this by itself when a shard fills up; calling
    /// it periodically returns memory earlier. Returns the number of keys dropped.
    fn sweep<A: Algorithm<State = S>>(&self, algorithm: &A) -> usize;

    /// The number of keys held now.
    fn len(&self) -> usize;

    /// Whether the store holds no key.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bookkeeping counters, summed over the shards.
    fn stats(&self) -> StoreStats;

    /// Bytes the shards' tables have allocated (keys and states stored inline, retired tables
    /// not yet freed included; not counting heap memory the keys own themselves, such as a
    /// `String`'s buffer).
    fn table_bytes(&self) -> usize;

    /// A copy of `key`'s state, if the store holds it (for inspection and tests).
    fn state<Q>(&self, key: &Q) -> Option<S>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized;
}
