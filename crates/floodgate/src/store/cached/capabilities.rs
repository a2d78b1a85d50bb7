//! What a cached store can do: what its Redis runs (the algorithms it decides on this node's
//! views, and the others exactly on Redis), shared through that Redis, each key decided on
//! its own (so no all-or-nothing chain), the side ports its Redis's.

use crate::algorithm::spec::AnyAlgorithm;
use crate::quota::{ClaimStep, ClaimTerms, Claimed};
use crate::store::Capabilities;
use crate::{Nanos, StoreError};

use super::CachedStore;

impl Capabilities for CachedStore {
    fn kind(&self) -> &'static str {
        self.redis().kind()
    }

    fn runs(&self, algorithm: &AnyAlgorithm) -> Result<(), StoreError> {
        if CachedStore::decides_locally(algorithm) {
            return Ok(());
        }
        self.redis().runs(algorithm)
    }

    fn takes_refunds(&self, algorithm: &AnyAlgorithm) -> bool {
        self.redis().takes_refunds(algorithm)
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn chains_atomically(&self) -> bool {
        false
    }

    async fn probe(&self) -> Result<(), StoreError> {
        self.redis().probe().await
    }

    async fn shared_secret(
        &self,
        key: &str,
        candidate: &str,
    ) -> Result<Option<String>, StoreError> {
        self.redis().shared_secret(key, candidate).await
    }

    async fn claim(
        &self,
        limit: &str,
        step: ClaimStep<'_>,
        terms: &ClaimTerms,
        now: Nanos,
    ) -> Result<Claimed, StoreError> {
        Capabilities::claim(self.redis(), limit, step, terms, now).await
    }
}
