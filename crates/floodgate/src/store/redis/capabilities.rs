//! What a Redis store can do: the algorithms with a Lua twin, chains atomically in one script,
//! state shared by every node, and the two side ports (the nodes' secret, the claims' twin).

use crate::algorithm::spec::AnyAlgorithm;
use crate::algorithm::Algorithm;
use crate::quota::{ClaimStep, ClaimTerms, Claimed};
use crate::store::Capabilities;
use crate::{Nanos, OpKind, StoreError};

use super::RedisStore;

impl Capabilities for RedisStore {
    fn kind(&self) -> &'static str {
        if self.inner.connection.is_cluster() {
            "redis-cluster"
        } else {
            "redis"
        }
    }

    fn runs(&self, algorithm: &AnyAlgorithm) -> Result<(), StoreError> {
        RedisStore::runs(self, algorithm)
    }

    fn takes_refunds(&self, algorithm: &AnyAlgorithm) -> bool {
        algorithm.supports(OpKind::Refund) && RedisStore::takes_refunds(algorithm)
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn chains_atomically(&self) -> bool {
        true
    }

    async fn probe(&self) -> Result<(), StoreError> {
        RedisStore::probe(self).await
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
        RedisStore::claim(self, limit, step, terms).await
    }
}
