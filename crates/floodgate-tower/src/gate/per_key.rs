//! The two-line start: one limit per client, keyed by address, API key or header.
//!
//! ```
//! use axum::{routing::get, Router};
//! use floodgate_tower::FloodgateLayer;
//!
//! # fn main() -> Result<(), floodgate::ConfigError> {
//! let layer = FloodgateLayer::per_ip(10.0, 20)?; // 10 requests a second per address, bursts of 20
//! let app: Router = Router::new().route("/", get(|| async { "hello" })).route_layer(layer);
//! # let _ = app; Ok(())
//! # }
//! ```
//!
//! Serve it with `into_make_service_with_connect_info::<SocketAddr>()` and the crate's `axum`
//! feature, so that the middleware sees each client's address (see [`crate::address`]).
//!
//! [`PerKey`] takes the rest: another key ([`PerKey::api_key`], [`PerKey::header`], any
//! [`KeyBy`]), another algorithm ([`PerKey::algorithm`]), a store chosen at run time
//! ([`PerKey::store`], for example [`AnyStore::from_url`] with a Redis URL), clients behind
//! proxies ([`PerKey::client_address`]). What it builds is an ordinary layer: one stage, a
//! request rate limiter with one [`Plan::limit`] keyed by the extractor's user. For more
//! stages, [`PerKey::into_stage`] gives that stage and its extractor to put in a
//! [`Pipeline`] of your own.
//!
//! Each layer counts in its own namespace. Without [`PerKey::namespace`] it takes `per_ip`,
//! `per_api_key` or `per_<header>` for itself: on a store it shares (a Redis given to several
//! layers), a second layer in the same namespace is refused at build time (see
//! [`floodgate::store::holds`]), rather than two routes counting in one bucket.

use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
use floodgate::pipeline::{Pipeline, Stage};
use floodgate::store::AnyStore;
use floodgate::ConfigError;
use http::header::HeaderName;

use super::layer::FloodgateLayer;
use crate::address::ClientAddress;
use crate::credential::CredentialKey;
use crate::extract::{Extractor, KeyBy};

/// One limit per client. See the [module documentation](self).
#[derive(Debug)]
#[must_use]
pub struct PerKey {
    key_by: KeyBy,
    namespace: Option<String>,
    default_namespace: String,
    algorithm: Option<AnyAlgorithm>,
    rate: Option<f64>,
    capacity: Option<u64>,
    store: Option<AnyStore>,
    address: Option<ClientAddress>,
    credential_key: Option<CredentialKey>,
}

impl PerKey {
    fn keyed(key_by: KeyBy, default_namespace: String) -> PerKey {
        PerKey {
            key_by,
            namespace: None,
            default_namespace,
            algorithm: None,
            rate: None,
            capacity: None,
            store: None,
            address: None,
            credential_key: None,
        }
    }

    /// Keyed by the client's address alone ([`KeyBy::Address`]), in namespace `per_ip`.
    pub fn ip() -> PerKey {
        PerKey::keyed(KeyBy::Address, "per_ip".into())
    }

    /// Keyed by the API key or bearer token, hashed, else by the address
    /// ([`KeyBy::Credential`]), in namespace `per_api_key`.
    pub fn api_key() -> PerKey {
        PerKey::keyed(KeyBy::Credential, "per_api_key".into())
    }

    /// Keyed by `header`'s value, hashed, else by the address ([`KeyBy::Header`]), in
    /// namespace `per_<header>`.
    pub fn header(header: HeaderName) -> PerKey {
        let namespace = format!("per_{}", header.as_str());
        PerKey::keyed(KeyBy::Header(header), namespace)
    }

    /// Keyed by `key_by`, in namespace `per_key` unless named.
    pub fn key_by(key_by: KeyBy) -> PerKey {
        PerKey::keyed(key_by, "per_key".into())
    }

    /// A token bucket refilled at `rate` requests per second (with [`PerKey::capacity`]).
    pub fn rate(mut self, rate: f64) -> Self {
        self.rate = Some(rate);
        self
    }

    /// The token bucket's capacity: the most requests admitted at once, the burst (with
    /// [`PerKey::rate`]).
    pub fn capacity(mut self, capacity: u64) -> Self {
        self.capacity = Some(capacity);
        self
    }

    /// Limits with `algorithm` instead of a token bucket (GCRA, a window, …); replaces
    /// [`PerKey::rate`] and [`PerKey::capacity`].
    pub fn algorithm(mut self, algorithm: impl Into<AnyAlgorithm>) -> Self {
        self.algorithm = Some(algorithm.into());
        self
    }

    /// Counts in `store` (default: a new memory store of this layer's own).
    pub fn store(mut self, store: impl Into<AnyStore>) -> Self {
        self.store = Some(store.into());
        self
    }

    /// Counts in `namespace`, shared on purpose with any other limiter that names it.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Finds clients' addresses with `address` (behind proxies:
    /// [`ClientAddress::forwarded_for`]).
    pub fn client_address(mut self, address: ClientAddress) -> Self {
        self.address = Some(address);
        self
    }

    /// Hashes credentials and header values under `key` (nodes sharing a store must share
    /// it; see [`crate::credential`]).
    pub fn credential_key(mut self, key: CredentialKey) -> Self {
        self.credential_key = Some(key);
        self
    }

    /// The stage [`PerKey::build`] runs, on its store, and the extractor that keys requests
    /// for it: to build a [`Pipeline`] with more stages.
    ///
    /// ```
    /// use floodgate::limiter::concurrency::ConcurrencyLimiter;
    /// use floodgate::pipeline::Pipeline;
    /// use floodgate::store::AnyStore;
    /// use floodgate_tower::{FloodgateLayer, PerKey};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = AnyStore::memory();
    /// let (per_ip, extractor) = PerKey::ip().rate(10.0).capacity(20).store(store.clone()).into_stage()?;
    /// let in_flight = ConcurrencyLimiter::builder().capacity(4).build(store)?;
    /// let pipeline = Pipeline::builder().stage(per_ip).limiter(in_flight).build()?;
    /// let layer = FloodgateLayer::new(pipeline).extractor(extractor);
    /// # let _ = layer; Ok(())
    /// # }
    /// ```
    pub fn into_stage(self) -> Result<(Stage<AnyStore>, Extractor), ConfigError> {
        let algorithm = match (self.algorithm, self.rate, self.capacity) {
            (Some(algorithm), _, _) => algorithm,
            (None, Some(rate), Some(capacity)) => TokenBucket::new(rate, capacity)?.into(),
            (None, None, _) => return Err(ConfigError::Missing { field: "rate" }),
            (None, Some(_), None) => return Err(ConfigError::Missing { field: "capacity" }),
        };
        let store = self.store.unwrap_or_else(AnyStore::memory);
        let builder = RequestRateLimiter::builder();
        let builder = match &self.namespace {
            Some(name) => builder.namespace(name.clone()),
            None => builder.default_namespace(self.default_namespace.clone()),
        };
        let name = self.namespace.unwrap_or(self.default_namespace);
        let limiter = builder.plan(Plan::limit(name, algorithm)?).build(store)?;
        let mut extractor = Extractor::new().key_by(self.key_by);
        if let Some(address) = self.address {
            extractor = extractor.client_address(address);
        }
        if let Some(key) = self.credential_key {
            extractor = extractor.credential_key(key);
        }
        Ok((Stage::new(limiter), extractor))
    }

    /// The layer: this one limit, and the extractor that keys requests for it.
    pub fn build(self) -> Result<FloodgateLayer<AnyStore>, ConfigError> {
        let (stage, extractor) = self.into_stage()?;
        let pipeline = Pipeline::builder().stage(stage).build()?;
        Ok(FloodgateLayer::new(pipeline).extractor(extractor))
    }
}

impl FloodgateLayer<AnyStore> {
    /// `rate` requests a second per client address, bursts of up to `capacity`, on a memory
    /// store of the layer's own: [`PerKey::ip`]`().rate(rate).capacity(capacity).build()`.
    pub fn per_ip(rate: f64, capacity: u64) -> Result<Self, ConfigError> {
        PerKey::ip().rate(rate).capacity(capacity).build()
    }

    /// The same per API key or bearer token (hashed; requests without one per address):
    /// [`PerKey::api_key`].
    pub fn per_api_key(rate: f64, capacity: u64) -> Result<Self, ConfigError> {
        PerKey::api_key().rate(rate).capacity(capacity).build()
    }

    /// The same per value of `header` (hashed; requests without it per address):
    /// [`PerKey::header`].
    pub fn per_header(header: HeaderName, rate: f64, capacity: u64) -> Result<Self, ConfigError> {
        PerKey::header(header).rate(rate).capacity(capacity).build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate::store::Store;

    #[test]
    fn a_rate_needs_a_capacity_and_either_may_be_an_algorithm() {
        let e = PerKey::ip().build().unwrap_err().to_string();
        assert!(e.contains("`rate`"), "{e}");
        let e = PerKey::ip().rate(1.0).build().unwrap_err().to_string();
        assert!(e.contains("`capacity`"), "{e}");
        let gcra = floodgate::algorithm::gcra::Gcra::new(4, 10, std::time::Duration::from_secs(1))
            .unwrap();
        PerKey::ip().algorithm(gcra).build().unwrap();
    }

    #[test]
    fn two_layers_on_one_store_need_namespaces_of_their_own() {
        let store = AnyStore::memory();
        let first = PerKey::ip()
            .rate(1.0)
            .capacity(5)
            .store(store.clone())
            .build()
            .unwrap();
        let e = PerKey::ip()
            .rate(1.0)
            .capacity(10)
            .store(store.clone())
            .build()
            .unwrap_err()
            .to_string();
        assert!(e.contains("per_ip") && e.contains(".namespace("), "{e}");
        let _b = PerKey::ip()
            .rate(1.0)
            .capacity(10)
            .store(store.clone())
            .namespace("route_b")
            .build()
            .unwrap();
        drop(first);
        assert!(!Store::namespaces(&store).unwrap().is_held("per_ip"));
        // Layers of their own stores never meet.
        let _a = FloodgateLayer::per_ip(1.0, 5).unwrap();
        let _a2 = FloodgateLayer::per_ip(1.0, 5).unwrap();
    }
}
