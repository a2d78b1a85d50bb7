//! What a memcached store can do: the fixed window exactly (atomic `incr`), state shared by
//! every node, no atomic chain (memcached has no transaction across keys), and the side ports
//! (the nodes' secret with `add`, the claims with `gets`/`cas`).

use crate::algorithm::spec::AnyAlgorithm;
use crate::quota::{ClaimStep, ClaimTerms, Claimed};
use crate::store::Capabilities;
use crate::{Nanos, StoreError};

use super::MemcachedStore;

impl Capabilities for MemcachedStore {
    fn kind(&self) -> &'static str {
        "memcached"
    }

    fn runs(&self, algorithm: &AnyAlgorithm) -> Result<(), StoreError> {
        MemcachedStore::runs(self, algorithm)
    }

    fn takes_refunds(&self, algorithm: &AnyAlgorithm) -> bool {
        MemcachedStore::takes_refunds(self, algorithm)
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn chains_atomically(&self) -> bool {
        false
    }

    async fn probe(&self) -> Result<(), StoreError> {
        MemcachedStore::probe(self).await
    }

    async fn shared_secret(
        &self,
        key: &str,
        candidate: &str,
    ) -> Result<Option<String>, StoreError> {
        self.get_or_set(key, candidate).await.map(Some)
    }

    async fn claim(
        &self,
        limit: &str,
        step: ClaimStep<'_>,
        terms: &ClaimTerms,
        _: Nanos,
    ) -> Result<Claimed, StoreError> {
        MemcachedStore::claim(self, limit, step, terms).await
    }
}
