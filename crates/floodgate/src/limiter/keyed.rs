//! One limit on keys: an algorithm applied to a key's state in the limit's namespace of a store.

use crate::algorithm::spec::AnyAlgorithm;
use crate::algorithm::Algorithm;
use crate::blocking::block_on;
use crate::store::holds::{hold_on, NamespaceHold};
use crate::store::{Namespace, Store};
use crate::{ConfigError, Decision, Op, StoreError};

/// One algorithm limiting any key, in its own namespace of a store: the simplest limiter, and
/// what the service's named limits (`POST /v1/check`) are.
///
/// ```
/// use floodgate::algorithm::sliding_log::SlidingLog;
/// use floodgate::limiter::KeyedLimit;
/// use floodgate::store::MemoryStore;
/// use std::time::Duration;
///
/// // Five logins per minute per address.
/// let logins = KeyedLimit::new(
///     "login",
///     SlidingLog::new(5, Duration::from_secs(60))?,
///     MemoryStore::new(),
/// )?;
/// for _ in 0..5 {
///     assert!(logins.check_blocking("alice@example.com", 1)?.allowed);
/// }
/// let sixth = logins.check_blocking("alice@example.com", 1)?;
/// assert!(!sixth.allowed);
/// assert!(sixth.retry_after.is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// `A` is the algorithm's type: [`AnyAlgorithm`] (any algorithm, chosen at run time; what
/// [`KeyedLimit::new`] builds) or one algorithm's own type ([`KeyedLimit::typed`]), which a store
/// for that algorithm's state alone can hold: a [`crate::store::WordStore`] (GCRA, the fixed
/// window, the token and leaky buckets, the leaky queue), whose checks take no lock.
///
/// ```
/// use floodgate::algorithm::gcra::{Gcra, GcraState};
/// use floodgate::limiter::KeyedLimit;
/// use floodgate::store::{Key, MemoryStore, WordStore};
/// use std::time::Duration;
///
/// // 100 requests per second per user, bursts of 10, on a store of GCRA states only.
/// let store: WordStore<Key, GcraState> = MemoryStore::builder().build_word()?;
/// let api = KeyedLimit::typed("api", Gcra::new(9, 100, Duration::from_secs(1))?, store)?;
/// assert!(api.check_blocking("user-42", 1)?.allowed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct KeyedLimit<S, A = AnyAlgorithm> {
    namespace: Namespace,
    algorithm: A,
    store: S,
    /// The hold on the namespace in the store's record (see [`crate::store::holds`]).
    _claim: Option<NamespaceHold>,
}

impl<S: Store<str, AnyAlgorithm>> KeyedLimit<S> {
    /// `algorithm` on keys of `namespace` (see [`Namespace::new`] for valid names) in `store`.
    pub fn new(
        namespace: &str,
        algorithm: impl Into<AnyAlgorithm>,
        store: S,
    ) -> Result<Self, ConfigError> {
        KeyedLimit::typed(namespace, algorithm.into(), store)
    }
}

impl<S: Store<str, A>, A: Algorithm> KeyedLimit<S, A> {
    /// `algorithm`, of its own type, on keys of `namespace` in `store` (a store that holds that
    /// algorithm's state, or any store as [`KeyedLimit::new`]).
    pub fn typed(namespace: &str, algorithm: A, store: S) -> Result<Self, ConfigError> {
        let namespace = Namespace::new(namespace)?;
        // Named by the caller: shared with any other limiter that names it.
        let claim = hold_on(&store, &namespace, true)?;
        Ok(KeyedLimit {
            namespace,
            algorithm,
            store,
            _claim: claim,
        })
    }

    /// The limit's namespace.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The algorithm and its parameters.
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The store holding the keys' states.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Takes `cost` units for `key` if they are available (cost 0 probes).
    pub async fn check(&self, key: &str, cost: u64) -> Result<Decision, StoreError> {
        self.apply(key, Op::Check { cost }).await
    }

    /// Applies any operation the algorithm supports to `key` (`reserve`, `try_acquire`, …);
    /// [`StoreError::Unsupported`] for the others.
    pub async fn apply(&self, key: &str, op: Op) -> Result<Decision, StoreError> {
        let key = self.namespace.key(key);
        self.store.apply(&self.algorithm, &key, op).await
    }

    /// [`KeyedLimit::check`] for synchronous callers (see [`crate::blocking`]).
    pub fn check_blocking(&self, key: &str, cost: u64) -> Result<Decision, StoreError> {
        block_on(self.check(key, cost))
    }

    /// [`KeyedLimit::apply`] for synchronous callers (see [`crate::blocking`]).
    pub fn apply_blocking(&self, key: &str, op: Op) -> Result<Decision, StoreError> {
        block_on(self.apply(key, op))
    }
}
