//! What the memory store can do: every algorithm and operation, chains atomically, in this
//! process alone.

use std::time::Duration;

use super::MemoryStore;
use crate::algorithm::spec::{AnyAlgorithm, AnyState};
use crate::quota::{ClaimStep, ClaimTerms, Claimed};
use crate::store::{Capabilities, Key};
use crate::{Clock, Nanos, StoreError};

impl<C: Clock> Capabilities for MemoryStore<Key, AnyState, C> {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn runs(&self, _: &AnyAlgorithm) -> Result<(), StoreError> {
        Ok(())
    }

    fn is_shared(&self) -> bool {
        false
    }

    fn chains_atomically(&self) -> bool {
        true
    }

    async fn probe(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn shared_secret(&self, _: &str, _: &str) -> Result<Option<String>, StoreError> {
        Ok(None)
    }

    async fn claim(
        &self,
        limit: &str,
        step: ClaimStep<'_>,
        terms: &ClaimTerms,
        now: Nanos,
    ) -> Result<Claimed, StoreError> {
        Ok(self.quota_claims().step(limit, step, terms, now))
    }

    fn sweep_claims(&self, now: Nanos, idle: Duration) {
        self.quota_claims().sweep(now, idle);
    }
}
