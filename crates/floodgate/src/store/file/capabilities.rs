//! What the file store can do: what the memory store it decides on can (every algorithm and
//! operation, chains atomically, in this process alone), under its own kind, `file`, and with
//! its own readiness: [`FileStore::probe`], the journal's writer alive and its last commit
//! good.
//!
//! The claims of shared limits (the Rate Limit Quota Service's division) are the memory
//! store's, stepped in this process and not journaled: they are leases of a few seconds that
//! the claimants renew, so after a restart they are claimed again from nothing.

use std::time::Duration;

use super::FileStore;
use crate::algorithm::spec::AnyAlgorithm;
use crate::quota::{ClaimStep, ClaimTerms, Claimed};
use crate::store::Capabilities;
use crate::{Nanos, StoreError};

impl Capabilities for FileStore {
    fn kind(&self) -> &'static str {
        "file"
    }

    fn runs(&self, algorithm: &AnyAlgorithm) -> Result<(), StoreError> {
        self.inner.core.memory.runs(algorithm)
    }

    fn is_shared(&self) -> bool {
        false
    }

    fn chains_atomically(&self) -> bool {
        self.inner.core.memory.chains_atomically()
    }

    async fn probe(&self) -> Result<(), StoreError> {
        FileStore::probe(self).await
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
        self.inner.core.memory.claim(limit, step, terms, now).await
    }

    fn sweep_claims(&self, now: Nanos, idle: Duration) {
        self.inner.core.memory.sweep_claims(now, idle);
    }
}
