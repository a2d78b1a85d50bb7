//! [`TokenBudgetLayer`]: the budget, how to estimate a request, key its user and read its
//! cost, shared behind one `Arc` by the layer and every service it makes.

use std::fmt;
use std::sync::Arc;

use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::algorithm::Algorithm;
use floodgate::limiter::{KeyedLimit, Reservation};
use floodgate::store::Store;
use floodgate::{ConfigError, OpKind};
use http::header::HeaderName;
use http::request::Parts;

use super::body::Settles;
use super::USAGE_HEADER;
use crate::extract::Extractor;

/// How a request's estimate is made from its head.
type Estimate = dyn Fn(&Parts) -> u64 + Send + Sync;

/// The layer: a budget ([`KeyedLimit`]) and how to estimate, key and read costs. Clones share
/// them. See the [module documentation](super).
pub struct TokenBudgetLayer<S> {
    pub(super) shared: Arc<Shared<S>>,
}

pub(super) struct Shared<S> {
    pub(super) limit: KeyedLimit<S>,
    pub(super) estimate: Box<Estimate>,
    pub(super) extractor: Extractor,
    pub(super) header: HeaderName,
}

impl<S> Clone for TokenBudgetLayer<S> {
    fn clone(&self) -> Self {
        TokenBudgetLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S> fmt::Debug for TokenBudgetLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBudgetLayer")
            .field("header", &self.shared.header)
            .finish_non_exhaustive()
    }
}

impl<S: Store<str, AnyAlgorithm> + 'static> TokenBudgetLayer<S> {
    /// Requests hold `limit`'s budget per user (the default [`Extractor`]: API key, bearer
    /// token, else client address), each reserving `estimate(head)` units.
    ///
    /// A [`ConfigError`] for field `algorithm` when the limit's algorithm cannot settle (it
    /// must take charges and refunds: a fixed window, a token or leaky bucket, GCRA).
    pub fn new(
        limit: KeyedLimit<S>,
        estimate: impl Fn(&Parts) -> u64 + Send + Sync + 'static,
    ) -> Result<Self, ConfigError> {
        let algorithm = limit.algorithm();
        if !(algorithm.supports(OpKind::Charge) && algorithm.supports(OpKind::Refund)) {
            return Err(ConfigError::invalid(
                "algorithm",
                algorithm.name(),
                "a usage budget is settled by charges and refunds: use a fixed window, a \
                 token or leaky bucket, or GCRA",
            ));
        }
        Ok(TokenBudgetLayer {
            shared: Arc::new(Shared {
                limit,
                estimate: Box::new(estimate),
                extractor: Extractor::new(),
                header: HeaderName::from_static(USAGE_HEADER),
            }),
        })
    }

    /// Reads the cost from the header (or trailer) `name` instead of [`USAGE_HEADER`].
    pub fn usage_header(self, name: HeaderName) -> Self {
        self.with(|shared| shared.header = name)
    }

    /// Keys users with `extractor` instead of the default one.
    pub fn extractor(self, extractor: Extractor) -> Self {
        self.with(|shared| shared.extractor = extractor)
    }

    fn with(self, change: impl FnOnce(&mut Shared<S>)) -> Self {
        let mut shared = Arc::try_unwrap(self.shared).unwrap_or_else(|_| {
            unreachable!("the builder methods take the layer before it is cloned")
        });
        change(&mut shared);
        TokenBudgetLayer {
            shared: Arc::new(shared),
        }
    }
}

impl<S: Store<str, AnyAlgorithm> + 'static> Settles for Shared<S> {
    fn settle(&self, reservation: Reservation, actual: u64) {
        self.limit.settle_detached(reservation, actual);
    }

    fn header(&self) -> &HeaderName {
        &self.header
    }
}
