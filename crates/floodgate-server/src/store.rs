//! The service's one store: the embedded memory store (`memory`, the default) or a Redis that
//! several `floodgate serve` processes share (`redis://host:port[/db]`), chosen by
//! `serve --store URL` or the config's `store: { url: … }`.
//!
//! [`ServiceStore`] is an enum rather than a type parameter of the whole service: the HTTP,
//! gRPC and admin faces, the snapshot and the runtime stay one concrete type, and a call costs
//! one match on the variant before the store's own work (a shard lock, or a network round
//! trip).
//!
//! A Redis store cannot run every algorithm yet; [`ServiceStore::check`] refuses a built
//! configuration that uses one, naming the plan, limit, limiter or Envoy rule, so that
//! `check-config` and start-up fail instead of every call failing open.

use std::sync::Arc;

use floodgate::algorithm::spec::{AnyAlgorithm, AnyState};
use floodgate::algorithm::Algorithm;
use floodgate::pipeline::Limiter;
use floodgate::store::redis::redacted;
use floodgate::store::{Link, Linked, MemoryStore, RedisStore, Request, Store};
use floodgate::{Decision, Op, StoreError};

use crate::config::{ConfigFileError, Served, StoreConfig};

/// The embedded store.
pub type Mem = MemoryStore<String, AnyState>;

/// The service's store (see the [module documentation](self)). Cloning is cheap: clones share
/// the store.
#[derive(Clone, Debug)]
pub enum ServiceStore {
    /// The embedded memory store: limits count on this process alone.
    Memory(Arc<Mem>),
    /// A Redis shared by every process pointing at it: limits count across all of them.
    Redis(RedisStore),
}

/// What `store.url` (or `--store`) holds when it names the memory store.
pub const MEMORY: &str = "memory";

impl ServiceStore {
    /// The store `config` names. A Redis store must be created inside a Tokio runtime that
    /// keeps running as long as the store is used (it runs the connection); nothing is sent yet.
    pub fn from_config(config: &StoreConfig) -> Result<ServiceStore, ConfigFileError> {
        let url = config.url.as_deref().unwrap_or(MEMORY);
        if url == MEMORY {
            let store = MemoryStore::builder()
                .max_keys(config.max_keys)
                .build()
                .map_err(|e| ConfigFileError::from_config_error("store", e))?;
            return Ok(ServiceStore::Memory(Arc::new(store)));
        }
        if url.starts_with("rediss://") {
            return Err(ConfigFileError::invalid(
                "store.url",
                format!(
                    "`{}`: TLS (rediss://) is not built into this floodgate yet; use redis://",
                    redacted(url)
                ),
            ));
        }
        if !url.starts_with("redis://") {
            return Err(ConfigFileError::invalid(
                "store.url",
                format!(
                    "`{}` is not a store: expected `memory` or redis://host:port[/db]",
                    redacted(url)
                ),
            ));
        }
        let mut builder = RedisStore::builder(url);
        if let Some(timeout) = config.timeout {
            builder = builder.timeout(timeout.0);
        }
        builder
            .build()
            .map(ServiceStore::Redis)
            .map_err(|e| ConfigFileError::from_config_error("store", e))
    }

    /// The store's kind, as errors name it.
    pub fn kind(&self) -> &'static str {
        match self {
            ServiceStore::Memory(_) => "memory",
            ServiceStore::Redis(_) => "redis",
        }
    }

    /// Whether the store can run `algorithm` (the memory store runs them all).
    pub fn supports(&self, algorithm: &AnyAlgorithm) -> bool {
        match self {
            ServiceStore::Memory(_) => true,
            ServiceStore::Redis(r) => r.supports(algorithm),
        }
    }

    /// Refuses `served` if it uses an algorithm this store cannot run, naming where.
    pub fn check(&self, served: &Served<ServiceStore>) -> Result<(), ConfigFileError> {
        let refuse = |path: String, algorithm: &AnyAlgorithm| {
            Err(ConfigFileError::invalid(
                path,
                format!(
                    "the {} store cannot run the {} algorithm (with these parameters) yet; use another algorithm or the memory store",
                    self.kind(),
                    algorithm.name()
                ),
            ))
        };
        for stage in served.pipeline.stages() {
            match stage.limiter() {
                Limiter::RequestRate(rr) => {
                    for plan in rr.plans() {
                        if !self.supports(plan.algorithm()) {
                            return refuse(format!("plans.{}", plan.name()), plan.algorithm());
                        }
                    }
                }
                Limiter::Concurrency(c) if !self.supports(c.algorithm()) => {
                    return refuse("limiters.concurrency".into(), c.algorithm());
                }
                Limiter::Fleet(f) if !self.supports(f.algorithm()) => {
                    return refuse("limiters.fleet".into(), f.algorithm());
                }
                _ => {}
            }
        }
        for (name, limit) in &served.limits {
            if !self.supports(limit.algorithm()) {
                return refuse(format!("limits.{name}"), limit.algorithm());
            }
        }
        let mut rules = served.rules.rules();
        rules.sort_by(|a, b| (a.0, a.1.full_key()).cmp(&(b.0, b.1.full_key())));
        for (domain, rule) in rules {
            if let Some(algorithm) = rule.algorithm() {
                if !self.supports(algorithm) {
                    let key = rule.full_key();
                    let key = key
                        .strip_prefix(domain)
                        .and_then(|k| k.strip_prefix('.'))
                        .unwrap_or(key);
                    return refuse(format!("domains[{domain}] descriptor {key}"), algorithm);
                }
            }
        }
        Ok(())
    }
}

impl Store<str, AnyAlgorithm> for ServiceStore {
    async fn apply(
        &self,
        algorithm: &AnyAlgorithm,
        key: &str,
        op: Op,
    ) -> Result<Decision, StoreError> {
        match self {
            ServiceStore::Memory(m) => m.apply(algorithm, key, op).await,
            ServiceStore::Redis(r) => r.apply(algorithm, key, op).await,
        }
    }

    async fn apply_many(
        &self,
        requests: &[Request<'_, str, AnyAlgorithm>],
    ) -> Result<Vec<Decision>, StoreError> {
        match self {
            ServiceStore::Memory(m) => m.apply_many(requests).await,
            ServiceStore::Redis(r) => r.apply_many(requests).await,
        }
    }

    async fn apply_chain(
        &self,
        links: &[Link<'_, str, AnyAlgorithm>],
    ) -> Result<Vec<Linked>, StoreError> {
        match self {
            ServiceStore::Memory(m) => m.apply_chain(links).await,
            ServiceStore::Redis(r) => r.apply_chain(links).await,
        }
    }

    fn same_store(&self, other: &Self) -> bool {
        match (self, other) {
            (ServiceStore::Memory(a), ServiceStore::Memory(b)) => Arc::ptr_eq(a, b),
            (ServiceStore::Redis(a), ServiceStore::Redis(b)) => a.same_store(b),
            _ => false,
        }
    }

    fn apply_detached(&self, algorithm: &AnyAlgorithm, key: &str, op: Op) {
        match self {
            ServiceStore::Memory(m) => m.apply_detached(algorithm, key, op),
            ServiceStore::Redis(r) => r.apply_detached(algorithm, key, op),
        }
    }
}
