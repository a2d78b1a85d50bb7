//! Cached mode: decisions at memory speed on each node, shared through Redis every
//! `sync_interval`, with a stated bound on what the nodes together admit beyond a limit (behind
//! the `redis` feature).
//!
//! An exact [`RedisStore`] costs a round trip per decision. A [`CachedStore`] decides every
//! request on the node, in an embedded memory store, and never waits for Redis on a key it
//! knows; every `sync_interval` it sends what it admitted on each key since the last sync, and
//! takes back the key's global state, which becomes its local view.
//!
//! # How a decision is made
//!
//! Each key the node knows has a **view**: the global state Redis returned at the key's last
//! sync, plus everything this node admitted on it since, applied with the algorithm's own
//! transition. A request is decided on the view exactly as the memory store decides it on a
//! state, so a key the view shows over its limit is refused locally, with the exact
//! `retry_after` of that state, until its window or bucket allows again, without asking Redis.
//! An admitted cost is added to the key's **unsent cost** (with the instant of the first such
//! admission) and the key is queued for the next sync.
//!
//! A key the node has never seen is loaded from Redis before its first decision when that takes
//! at most `load_budget` (5 ms by default); otherwise (or while Redis is failing) it is decided
//! at the node's **share** of the limit ([`AnyAlgorithm::share`] with `nodes`), and loaded by the
//! next sync, which also sends what the share admitted.
//!
//! # The sync
//!
//! One round trip per sync: one script call per cluster slot (at most 256 keys each), all sent
//! at once over the multiplexed connection. For each key the script adds the unsent cost to the
//! shared state **unconditionally** (it was already admitted; the same "absorb" transition as
//! the Rust algorithm's, each algorithm's `CachedTwin` and its `absorb.lua` beside its twin,
//! which `redis/cached.lua` calls by the state's tag):
//!
//! | algorithm | absorbing `cost` first admitted at `at` |
//! |---|---|
//! | fixed window | added to the count of `at`'s window (may pass the limit); a new window starts with it; a cost from a window already replaced is dropped |
//! | token bucket | refill up to `at`, then take `cost`, below zero if need be (a debt refilled before anything passes again) |
//! | GCRA | `tat = max(tat, at) + cost × e` (may run more than `τ` ahead: everything is refused until it catches up) |
//!
//! and replies with the state after it. The node replaces its view with that state and applies
//! on top what it admitted while the sync was on the way. The debts are kept, so over time the
//! nodes together admit at the configured rate: an overshoot is paid back, not forgotten.
//!
//! Other algorithms (sliding windows and log, leaky bucket and queue, the smooth limiters,
//! leases) have no cached form: the cached store sends their operations to Redis exactly, one
//! round trip each, as a [`RedisStore`] does. Every node sharing a limit must use the same mode.
//!
//! # Time
//!
//! Instants are Redis's: each sync reads Redis `TIME` (or the Redis store's explicit clock) and
//! measures the offset between it and the node's clock (from the midpoint of the round trip);
//! local decisions read the node's clock plus that offset, so windows start at the same
//! instants on every node whatever their clocks' skew. The offset moves only when it changes by
//! more than 1 ms, so that round-trip jitter does not make local time stutter.
//!
//! # The bound
//!
//! Let `aᵢ` be the most node `i` admits on one key in `sync_interval + d`, where `d` is the
//! sync's round trip (with `r` requests per second offered to each of `n` nodes,
//! `Σ aᵢ ≤ n × r × (sync_interval + d)`). While syncs succeed:
//!
//! - **fixed window**: in every window, the nodes together admit at most `limit + Σ aᵢ`, and
//!   never more than `n × limit` (each node's view counts its own admissions);
//! - **token bucket, GCRA**: in every interval of length `T`, the nodes together admit at most
//!   the algorithm's own bound (`capacity + rate × T`; `limit + T / e`) plus `Σ aᵢ`, and the
//!   long-run rate is the configured rate.
//!
//! Why: a node's view lags the global state only by what the other nodes admitted since the
//! node's last sync. A node that admits syncs within `sync_interval`, and from then on its
//! view includes everything admitted before that sync, so what any node admits past the moment
//! the shared state reached the limit is at most what it admits before its next sync ends.
//!
//! **Never under-admission**: a node refuses only when its view, the global state it last
//! learnt plus its own admissions since, is at the limit, and the global state can only be
//! fuller. (For the buckets, a node's admissions are charged at the instant of the first of
//! them, never later than they happened.) So in a fixed window where the nodes together
//! admit less than `limit`, nothing was refused.
//!
//! `tests/cached.rs` checks both sides with three nodes on one Redis, offered ten times the
//! limit; BENCHMARKS.md records the overshoot measured beside the bound.
//!
//! # When Redis is unreachable
//!
//! Decisions go on locally, on the views, and the unsent cost keeps accumulating: a failed sync
//! puts back what it tried to send, and the next successful one sends it all, so nothing
//! admitted during an outage is lost (a call that timed out may still have run in Redis, and
//! is then counted twice: the error is on the side of refusing). Once the last successful sync
//! is older than `max_view_age` (1 s by default), the views are too old to trust and every key
//! is decided at the node's share of its limit instead; the first successful sync returns to the
//! views. During an outage the fixed window's bound becomes `limit + n × share` per window.
//!
//! # Memory
//!
//! The local store holds at most `max_keys` keys, as the memory store does. A key is dropped
//! first when its view is fresh and it has nothing unsent; under
//! [`Overflow::EvictLive`](super::Overflow) a key with unsent cost may be dropped, and that
//! cost is lost (counted in [`CachedStats::lost_cost`]).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Key, LocalStore, MemoryStore, Overflow, RedisStore, Store};
use crate::algorithm::spec::AnyAlgorithm;
use crate::{Clock, CoarseClock, ConfigError, Decision, Nanos, Op, StoreError};

mod capabilities;
mod entry;
mod sync;

use entry::Entry;
pub use sync::SyncReport;

/// Builds a [`CachedStore`]; see [`CachedStore::builder`].
pub struct CachedStoreBuilder {
    redis: RedisStore,
    clock: Arc<dyn Clock>,
    sync_interval: Duration,
    max_view_age: Duration,
    load_budget: Duration,
    nodes: u32,
    max_keys: usize,
    overflow: Overflow,
}

impl std::fmt::Debug for CachedStoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedStoreBuilder")
            .field("redis", &self.redis)
            .field("sync_interval", &self.sync_interval)
            .field("max_view_age", &self.max_view_age)
            .field("load_budget", &self.load_budget)
            .field("nodes", &self.nodes)
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}

impl CachedStoreBuilder {
    /// How often the node syncs (default 100 ms). Between 1 ms and 1 hour.
    pub fn sync_interval(mut self, interval: Duration) -> Self {
        self.sync_interval = interval;
        self
    }

    /// How old the last successful sync may be before every key is decided at the node's share
    /// of its limit (default 1 s). At least the sync interval.
    pub fn max_view_age(mut self, age: Duration) -> Self {
        self.max_view_age = age;
        self
    }

    /// How long a decision on a key the node has never seen may wait for its state from Redis
    /// (default 5 ms); beyond it the key is decided at the node's share. Zero never waits.
    pub fn load_budget(mut self, budget: Duration) -> Self {
        self.load_budget = budget;
        self
    }

    /// How many nodes share the limits (default 1): a node's share is `1 / nodes` of each.
    pub fn nodes(mut self, nodes: u32) -> Self {
        self.nodes = nodes;
        self
    }

    /// The most keys the node holds (default 1,000,000), as [`super::MemoryStoreBuilder`].
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// What to do with a new key when the local store is full of live keys.
    pub fn overflow(mut self, overflow: Overflow) -> Self {
        self.overflow = overflow;
        self
    }

    /// The node's clock (default [`CoarseClock::shared`]); decisions read it plus the offset to
    /// Redis's clock measured at each sync.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Validates the settings and builds the store. Nothing is sent yet; call
    /// [`CachedStore::start_syncing`] (or [`CachedStore::sync`] yourself) to sync.
    pub fn build(self) -> Result<CachedStore, ConfigError> {
        let interval = self.sync_interval;
        if interval < Duration::from_millis(1) || interval > Duration::from_secs(3600) {
            return Err(ConfigError::invalid(
                "sync_interval",
                format!("{interval:?}"),
                "must be between 1ms and 1h",
            ));
        }
        if self.max_view_age < interval {
            return Err(ConfigError::invalid(
                "max_view_age",
                format!("{:?}", self.max_view_age),
                "must be at least the sync interval",
            ));
        }
        if self.nodes == 0 {
            return Err(ConfigError::invalid("nodes", 0, "must be at least 1"));
        }
        let offset = Arc::new(AtomicI64::new(0));
        let clock = Shifted {
            inner: self.clock.clone(),
            offset: offset.clone(),
        };
        let start = clock.now();
        let local = MemoryStore::builder()
            .max_keys(self.max_keys)
            .overflow(self.overflow)
            .clock(clock)
            .build_typed()?;
        Ok(CachedStore {
            shared: Arc::new(Shared {
                local,
                redis: self.redis,
                node_clock: self.clock,
                offset,
                sync_interval: interval,
                max_view_age: self.max_view_age,
                load_budget: self.load_budget,
                nodes: self.nodes,
                queue: Mutex::new(Vec::new()),
                last_sync: AtomicU64::new(start.0),
                syncing: std::sync::atomic::AtomicBool::new(false),
                counters: Counters::default(),
            }),
        })
    }
}

/// The node's clock plus the offset to Redis's, measured at each sync.
struct Shifted {
    inner: Arc<dyn Clock>,
    offset: Arc<AtomicI64>,
}

impl Clock for Shifted {
    fn now(&self) -> Nanos {
        let offset = self.offset.load(Ordering::Relaxed);
        Nanos(self.inner.now().0.saturating_add_signed(offset))
    }
}

/// A store that decides locally and syncs with Redis every `sync_interval`. See the [module
/// documentation](self) for the exact behaviour and the bound it keeps.
///
/// Cloning is cheap: clones share the local store and the Redis connection.
#[derive(Clone)]
pub struct CachedStore {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for CachedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedStore")
            .field("redis", &self.shared.redis)
            .field("sync_interval", &self.shared.sync_interval)
            .field("nodes", &self.shared.nodes)
            .finish_non_exhaustive()
    }
}

struct Shared {
    local: MemoryStore<Key, Entry, Shifted>,
    redis: RedisStore,
    node_clock: Arc<dyn Clock>,
    /// Redis's clock minus the node's, in nanoseconds.
    offset: Arc<AtomicI64>,
    sync_interval: Duration,
    max_view_age: Duration,
    load_budget: Duration,
    nodes: u32,
    /// Keys with something for the next sync (unsent cost, or a state to load), each once,
    /// with the algorithm that decides it.
    queue: Mutex<Vec<(String, AnyAlgorithm)>>,
    /// The instant (local, shifted) of the last successful sync, or of the store's creation.
    last_sync: AtomicU64,
    /// Whether a sync is running (a second one at once returns at once).
    syncing: std::sync::atomic::AtomicBool,
    counters: Counters,
}

#[derive(Default)]
struct Counters {
    syncs: AtomicU64,
    failed_syncs: AtomicU64,
    sent_cost: AtomicU64,
    unsent_cost: AtomicU64,
    lost_cost: AtomicU64,
    loads: AtomicU64,
    missed_loads: AtomicU64,
    decided_at_share: AtomicU64,
}

/// A [`CachedStore`]'s counters since it was built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CachedStats {
    /// Keys held locally now.
    pub keys: u64,
    /// Syncs that reached Redis (some of their keys may still have failed).
    pub syncs: u64,
    /// Syncs that reached nothing (the cost they carried was kept for the next one).
    pub failed_syncs: u64,
    /// Cost sent to Redis and acknowledged.
    pub sent_cost: u64,
    /// Cost a sync could not send and put back for the next one (counted each time).
    pub unsent_cost: u64,
    /// Cost admitted locally and never sent: its key was dropped by the overflow policy, or it
    /// held another algorithm's state in Redis.
    pub lost_cost: u64,
    /// Unknown keys loaded from Redis within the load budget.
    pub loads: u64,
    /// Unknown keys whose load missed the budget (or was not tried while Redis failed).
    pub missed_loads: u64,
    /// Decisions made at the node's share of the limit.
    pub decided_at_share: u64,
}

impl CachedStore {
    /// A builder for a cached store syncing with `redis` (whose timeout bounds loads and whose
    /// breaker guards syncs; its explicit clock, if it has one, is Redis's time here).
    pub fn builder(redis: RedisStore) -> CachedStoreBuilder {
        CachedStoreBuilder {
            redis,
            clock: Arc::new(CoarseClock::shared()),
            sync_interval: Duration::from_millis(100),
            max_view_age: Duration::from_secs(1),
            load_budget: Duration::from_millis(5),
            nodes: 1,
            max_keys: 1_000_000,
            overflow: Overflow::default(),
        }
    }

    /// The Redis store it syncs with.
    pub fn redis(&self) -> &RedisStore {
        &self.shared.redis
    }

    /// The sync interval.
    pub fn sync_interval(&self) -> Duration {
        self.shared.sync_interval
    }

    /// Whether `algorithm` is decided locally (a fixed window, token bucket or GCRA within the
    /// Redis twins' exact range); any other goes to Redis exactly.
    pub fn decides_locally(algorithm: &AnyAlgorithm) -> bool {
        RedisStore::exchanges(algorithm)
    }

    /// Time since the last successful sync (or since the store was built), on the node's
    /// clock: how far the views may lag the global state beyond the sync interval.
    pub fn view_age(&self) -> Duration {
        let now = self.shared.local.clock().now();
        now.saturating_since(Nanos(self.shared.last_sync.load(Ordering::Relaxed)))
    }

    /// The offset measured between Redis's clock and the node's: Redis's instant minus the
    /// node's, in nanoseconds (0 until the first load or sync).
    pub fn clock_offset_nanos(&self) -> i64 {
        self.shared.offset.load(Ordering::Relaxed)
    }

    /// The counters since the store was built.
    pub fn stats(&self) -> CachedStats {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CachedStats {
            keys: self.shared.local.len() as u64,
            syncs: get(&c.syncs),
            failed_syncs: get(&c.failed_syncs),
            sent_cost: get(&c.sent_cost),
            unsent_cost: get(&c.unsent_cost),
            lost_cost: get(&c.lost_cost),
            loads: get(&c.loads),
            missed_loads: get(&c.missed_loads),
            decided_at_share: get(&c.decided_at_share),
        }
    }
}

impl Store<str, AnyAlgorithm> for CachedStore {
    async fn apply(
        &self,
        algorithm: &AnyAlgorithm,
        key: &str,
        op: Op,
    ) -> Result<Decision, StoreError> {
        let shared = &self.shared;
        let Op::Check { cost } = op else {
            return shared.redis.apply(algorithm, key, op).await;
        };
        if !RedisStore::exchanges(algorithm) {
            return shared.redis.apply(algorithm, key, op).await;
        }
        if let Some(decided) = shared.decide_known(algorithm, key, cost) {
            return decided;
        }
        let loaded = shared.load(algorithm, key).await?;
        shared.decide_new(algorithm, key, cost, loaded)
    }

    async fn apply_many(
        &self,
        requests: &[super::KeyedOp<'_, str, AnyAlgorithm>],
    ) -> Result<Vec<Decision>, StoreError> {
        let mut decisions = Vec::with_capacity(requests.len());
        for r in requests {
            decisions.push(self.apply(r.algorithm, r.key, r.op).await?);
        }
        Ok(decisions)
    }

    fn same_store(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// The Redis store's: a limiter here and one on the Redis store itself count in the same
    /// Redis keys.
    fn namespaces(&self) -> Option<&super::Namespaces> {
        self.shared.redis.namespaces()
    }

    fn apply_detached(&self, algorithm: &AnyAlgorithm, key: &str, op: Op) {
        if matches!(op, Op::Check { .. }) && RedisStore::exchanges(algorithm) {
            let future = std::pin::pin!(self.apply(algorithm, key, op));
            let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
            let _ = std::future::Future::poll(future, &mut cx);
        } else {
            self.shared.redis.apply_detached(algorithm, key, op);
        }
    }
}
