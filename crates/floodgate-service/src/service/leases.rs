//! The lease tokens the service hands out: signed with a secret of the process's, one given,
//! or one every node sharing the store shares through it, and opened on any of those nodes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use floodgate::limiter::LeaseHandle;
use floodgate::{Clock, StoreError};

use super::Server;
use crate::lease_token::{LeaseTokens, TokenError};

/// How often, at most, a token this node cannot open makes it read the store's shared secret.
const SECRET_REREAD: std::time::Duration = std::time::Duration::from_secs(1);

/// How the service's lease tokens are signed.
#[derive(Debug)]
pub(super) struct Signing {
    tokens: LeaseTokens,
    /// Whether the secret is the one shared through the store, which another node may have
    /// replaced (the store lost it): then a token this node cannot open makes it read the
    /// store's secret again, at most once per [`SECRET_REREAD`].
    shared: AtomicBool,
    /// When the store's secret was last read for a token (ns on the service's clock; 0: never).
    read_at: AtomicU64,
    /// The secret is to be shared through the store, and has not been read yet
    /// ([`Server::share_lease_secret_when_needed`]).
    pending: AtomicBool,
}

impl Signing {
    /// Signing with a random secret of this process's.
    pub(super) fn random() -> Signing {
        Signing {
            tokens: LeaseTokens::random(),
            shared: AtomicBool::new(false),
            read_at: AtomicU64::new(0),
            pending: AtomicBool::new(false),
        }
    }

    /// The tokens, which issue and open.
    pub(super) fn tokens(&self) -> &LeaseTokens {
        &self.tokens
    }
}

impl Server {
    /// Signs lease tokens with `secret` instead of a random one, so that every service sharing
    /// it accepts the others' tokens (services behind one load balancer over one store).
    pub fn with_lease_secret(mut self, secret: impl Into<Vec<u8>>) -> Server {
        self.decisions.leases.tokens = LeaseTokens::new(secret);
        self
    }

    /// Signs lease tokens with the secret every node sharing this store shares through it
    /// ([`crate::store::ServiceStore::shared_lease_secret`]), so that a lease taken on one node is given back
    /// on any other with no setting; `Ok(false)` for the memory store. When the store cannot
    /// be read now, the error is returned and the secret is read again when a token asks for
    /// it.
    pub async fn share_lease_secret(&self) -> Result<bool, StoreError> {
        if matches!(self.decisions.store.kind(), "memory") {
            return Ok(false);
        }
        self.decisions.leases.shared.store(true, Ordering::Relaxed);
        if let Some(secret) = self.decisions.store.shared_lease_secret().await? {
            self.decisions.leases.tokens.adopt(&secret);
        }
        Ok(true)
    }

    /// Signs lease tokens with the secret shared through the store
    /// ([`Server::share_lease_secret`]), read when the first lease token is issued rather than
    /// now: a configuration that hands out no leases (envoyproxy/ratelimit's domains alone)
    /// then writes nothing of Floodgate's into the store. Nothing to do for the memory store.
    pub fn share_lease_secret_when_needed(self) -> Server {
        if !matches!(self.decisions.store.kind(), "memory") {
            self.decisions.leases.pending.store(true, Ordering::Relaxed);
        }
        self
    }

    /// Whether the running configuration hands out leases (a concurrency, fleet or adaptive
    /// concurrency stage), which lease tokens carry.
    pub fn hands_out_leases(&self) -> bool {
        use floodgate::pipeline::Limiter;
        self.decisions.served.load().pipeline.stages().any(|stage| {
            matches!(
                stage.limiter(),
                Limiter::Concurrency(_) | Limiter::Fleet(_) | Limiter::AdaptiveConcurrency(_)
            )
        })
    }

    /// Reads the shared secret now if it is still to be read (see
    /// [`Server::share_lease_secret_when_needed`]); a failure leaves it to the next token.
    pub(crate) async fn lease_secret_before_issuing(&self) {
        if self.decisions.leases.pending.load(Ordering::Relaxed) {
            match self.share_lease_secret().await {
                Ok(_) => self
                    .decisions
                    .leases
                    .pending
                    .store(false, Ordering::Relaxed),
                Err(error) => {
                    tracing::warn!(%error, "cannot read the lease tokens' shared secret from the store; this token is signed with this node's own")
                }
            }
        }
    }

    /// Opens a lease token; a token signed with a secret this node has not seen, while the
    /// secret is shared through the store, makes it read the store's secret once more (another
    /// node made a new one after the store lost it).
    pub(super) async fn open_token(&self, token: &str) -> Result<Vec<LeaseHandle>, TokenError> {
        self.opened(|tokens| tokens.open(token)).await
    }

    /// Opens a token of any kind with `open`, reading the store's secret once more as
    /// [`Server::open_token`] says.
    pub(super) async fn opened<T>(
        &self,
        open: impl Fn(&LeaseTokens) -> Result<T, TokenError>,
    ) -> Result<T, TokenError> {
        match open(&self.decisions.leases.tokens) {
            Err(TokenError::BadSignature)
                if self.decisions.leases.shared.load(Ordering::Relaxed) =>
            {
                let now = self.decisions.clock.now().0;
                let last = self.decisions.leases.read_at.load(Ordering::Relaxed);
                let due = last == 0 || now.saturating_sub(last) >= SECRET_REREAD.as_nanos() as u64;
                if due
                    && self
                        .decisions
                        .leases
                        .read_at
                        .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
                {
                    if let Ok(Some(secret)) = self.decisions.store.shared_lease_secret().await {
                        if self.decisions.leases.tokens.adopt(&secret) {
                            tracing::info!("lease tokens now signed with the store's new secret");
                        }
                    }
                }
                open(&self.decisions.leases.tokens)
            }
            other => other,
        }
    }
}
