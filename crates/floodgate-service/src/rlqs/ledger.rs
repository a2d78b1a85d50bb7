//! Where the division of every shared bucket lives, in two levels:
//!
//! - **This node's streams** on a bucket are a [`Pool`], in memory: the node sums their demands
//!   up and divides what the store grants it among them.
//! - **The nodes** claiming a bucket are one [`Claims`] per bucket in the service's store,
//!   stepped by the store's own claims port ([`Capabilities::claim`]): in this process's
//!   memory (one lock) for a store that is not shared, or in the shared store (Redis: one hash
//!   per bucket, changed by one script call per step), so that every node sharing it divides
//!   the bucket's limit max-min fairly among the streams of all of them.
//!
//! A node steps on a bucket ([`Claims::apply`]) about once a second while its streams use it
//! ([`STEP_EVERY`]), when a newcomer finds no room, and when its last stream leaves; never
//! once per stream. Steps on one bucket are taken one at a time (the pool's lock), so the
//! reports and ticks of a thousand streams that find the pool due make one step.
//!
//! The ledger also keeps what the store last answered about each bucket ([`BucketLoad`]):
//! that is what `/metrics` and the dashboard show (on Redis, the whole fleet's demand and
//! grants as of this node's last step on the bucket).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[cfg(doc)]
use floodgate::quota::Claims;
use floodgate::quota::{ClaimStep, ClaimTerms, Claimed};
use floodgate::store::{AnyStore, Capabilities};
use floodgate::{Nanos, StoreError};

use super::pool::{Pool, STEP_EVERY};

/// The division of every bucket, by bucket key (the domain and the bucket's pairs in key
/// order), and what this node last learnt of each.
#[derive(Debug)]
pub struct Ledger {
    /// The store whose claims port holds the nodes' claims.
    claims: AnyStore,
    /// This node's name among the claimants of every bucket (random per process).
    node: String,
    pools: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Pool>>>>,
    loads: Mutex<HashMap<String, Seen>>,
    /// When [`Ledger::expire_due`] last walked the buckets, in nanoseconds.
    expired_at: AtomicU64,
    failures: AtomicU64,
    steps: AtomicU64,
    /// Keys the hashes shown for bucket values (random per process).
    hash_key: foldhash::quality::RandomState,
}

/// The terms one bucket is divided under.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BucketTerms {
    /// The nodes' claims: the limit (thousandths of a request per unit) and how long a node's
    /// grant and a quiet node count.
    pub claims: ClaimTerms,
    /// How long a sent assignment counts as held: its time to live at the Envoy, and its way
    /// there.
    pub sent_ttl: Duration,
}

/// What this node last learnt of one bucket: how metrics name it (`(domain, pairs)`), the
/// last step's answer on it, its limit, and when.
#[derive(Debug)]
struct Seen {
    label: (String, String),
    claimed: Claimed,
    limit: u64,
    at: Nanos,
}

impl Seen {
    fn load(&self) -> BucketLoad {
        // The claims are in thousandths of a request.
        BucketLoad {
            domain: self.label.0.clone(),
            bucket: self.label.1.clone(),
            demand: self.claimed.demand.div_ceil(1000),
            granted: self.claimed.in_force / 1000,
            limit: self.limit / 1000,
            claimants: self.claimed.clients,
        }
    }
}

/// One bucket as metrics show it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BucketLoad {
    /// Its domain.
    pub domain: String,
    /// Its pairs, `key=value` joined by commas, in key order.
    pub bucket: String,
    /// The sum of its streams' demands, requests per unit of its limit.
    pub demand: u64,
    /// The grants in force on it, requests per unit (at most `limit`).
    pub granted: u64,
    /// Its limit, requests per unit.
    pub limit: u64,
    /// Its claimants: the streams of every node sharing the store.
    pub claimants: u64,
}

/// What a stream asks of its bucket's pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ask {
    /// A report of its demand and margin (thousandths of a request per unit): answered with
    /// its assignment, always sent (it renews the assignment's time to live).
    Report {
        /// Its demand.
        demand: u64,
        /// The margin for its arrivals.
        margin: u64,
    },
    /// A tick: answered with its assignment only when it changed.
    Tick,
}

impl Ledger {
    /// The nodes' claims held in a memory store of their own: this node's streams divide
    /// each limit among themselves.
    pub fn in_memory() -> Ledger {
        Ledger::in_store(AnyStore::memory())
    }

    /// The nodes' claims held in `store`, stepped by its claims port: in a shared store
    /// (Redis), every node using it divides each limit among the streams of all of them.
    pub fn in_store(store: AnyStore) -> Ledger {
        Ledger::holding(store)
    }

    /// Another node's ledger on the same claims (for simulations and tests of several nodes
    /// in one process: in memory, they share this one's claims).
    pub fn beside(&self) -> Ledger {
        Ledger::holding(self.claims.clone())
    }

    fn holding(claims: AnyStore) -> Ledger {
        Ledger {
            claims,
            node: format!("{:016x}", rand::random::<u64>()),
            pools: Mutex::new(HashMap::new()),
            loads: Mutex::new(HashMap::new()),
            expired_at: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            steps: AtomicU64::new(0),
            hash_key: foldhash::quality::RandomState::default(),
        }
    }

    /// How a bucket's value is shown in metrics and on the dashboard: `#` and eight hex digits
    /// of a hash keyed at random per process, which tells values apart without revealing them.
    pub fn hidden(&self, value: &str) -> String {
        use std::hash::BuildHasher;
        format!("#{:08x}", self.hash_key.hash_one(value) as u32)
    }

    /// Whether the claims are shared, through the store, with the other nodes using it.
    pub fn is_shared(&self) -> bool {
        self.claims.is_shared()
    }

    fn pool(&self, bucket: &str) -> Arc<tokio::sync::Mutex<Pool>> {
        let mut pools = lock(&self.pools);
        match pools.get(bucket) {
            Some(pool) => pool.clone(),
            None => pools.entry(bucket.to_string()).or_default().clone(),
        }
    }

    /// `stream` asks `ask` of `bucket` at `now` under `terms`, the bucket named by `label`
    /// (`(domain, pairs)`) in metrics: its assignment to send, thousandths of a request per
    /// unit, or `None` when nothing is to be sent (a tick with nothing changed, or a store
    /// that failed: the Envoy keeps what it holds). The node steps first when it is due or
    /// a newcomer finds no room.
    pub async fn ask(
        &self,
        bucket: &str,
        label: &(String, String),
        stream: &str,
        ask: Ask,
        terms: &BucketTerms,
        now: Nanos,
    ) -> Option<u64> {
        let pool = self.pool(bucket);
        let mut pool = pool.lock().await;
        if let Ask::Report { demand, margin } = ask {
            pool.report(stream, demand, margin, now);
        }
        if pool.due(now) {
            self.step(&mut pool, bucket, label, terms, now, true).await;
        }
        if pool.wants_room(stream, now) && pool.fresh(now) {
            self.step(&mut pool, bucket, label, terms, now, false).await;
        }
        let changed_only = matches!(ask, Ask::Tick);
        pool.send(stream, now, terms.sent_ttl, changed_only)
    }

    /// `stream` leaves `bucket` at `now`; a node whose last stream on it left leaves it at the
    /// store too.
    pub async fn leave(
        &self,
        bucket: &str,
        label: &(String, String),
        stream: &str,
        terms: &BucketTerms,
        now: Nanos,
    ) {
        let pool = self.pool(bucket);
        let mut pool = pool.lock().await;
        pool.leave(stream, now);
        if pool.is_empty() {
            self.step(&mut pool, bucket, label, terms, now, true).await;
        }
    }

    /// The node's step on `bucket`: its claim reported (or, with no stream left, its leave),
    /// and the pool told what the store granted.
    async fn step(
        &self,
        pool: &mut Pool,
        bucket: &str,
        label: &(String, String),
        terms: &BucketTerms,
        now: Nanos,
        divide_all: bool,
    ) {
        pool.expire(now, terms.claims.idle);
        let (groups, held, wanted) = pool.claim(now, !divide_all);
        let step = match groups.is_empty() {
            true => ClaimStep::Leave {
                claimant: &self.node,
            },
            false => ClaimStep::Report {
                claimant: &self.node,
                groups: &groups,
                held,
                wanted,
            },
        };
        self.steps.fetch_add(1, Ordering::Relaxed);
        let claimed: Result<Claimed, StoreError> =
            self.claims.claim(bucket, step, &terms.claims, now).await;
        match claimed {
            Ok(claimed) => {
                pool.stepped(Some(claimed), now, divide_all);
                self.seen(bucket, label, claimed, terms.claims.capacity, now);
            }
            Err(_) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                pool.stepped(None, now, divide_all);
            }
        }
    }

    fn seen(
        &self,
        bucket: &str,
        label: &(String, String),
        claimed: Claimed,
        limit: u64,
        now: Nanos,
    ) {
        let mut loads = lock(&self.loads);
        if claimed.nodes == 0 && claimed.in_force == 0 {
            loads.remove(bucket);
        } else if let Some(seen) = loads.get_mut(bucket) {
            (seen.claimed, seen.limit, seen.at) = (claimed, limit, now);
        } else {
            let seen = Seen {
                label: label.clone(),
                claimed,
                limit,
                at: now,
            };
            loads.insert(bucket.to_string(), seen);
        }
    }

    /// At most once a second however many streams ask (each stream's tick does): pools with
    /// no stream and nothing held are forgotten, and so is what this node learnt of a bucket
    /// it has not stepped on for `idle`. In memory, the nodes quiet for `idle` leave every
    /// bucket, and buckets nobody claims or holds a grant on are forgotten (Redis forgets them
    /// by itself).
    pub fn expire_due(&self, now: Nanos, idle: Duration) {
        let last = self.expired_at.load(Ordering::Relaxed);
        if now.0.saturating_sub(last) < STEP_EVERY.as_nanos() as u64 {
            return;
        }
        if self
            .expired_at
            .compare_exchange(last, now.0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            lock(&self.pools).retain(|_, pool| match pool.try_lock() {
                Ok(pool) => !pool.is_idle(now),
                Err(_) => true,
            });
            self.claims.sweep_claims(now, idle);
            lock(&self.loads).retain(|_, seen| now.saturating_since(seen.at) < idle);
        }
    }

    /// The buckets this node knows with claims or grants in force.
    pub fn buckets(&self) -> usize {
        lock(&self.loads).len()
    }

    /// The steps the store failed since start.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// The steps this node took since start (good or failed).
    pub fn steps(&self) -> u64 {
        self.steps.load(Ordering::Relaxed)
    }

    /// The `most` buckets with the greatest demand, greatest first.
    pub fn busiest(&self, most: usize) -> Vec<BucketLoad> {
        let mut loads: Vec<BucketLoad> = lock(&self.loads).values().map(Seen::load).collect();
        loads.sort_by(|a, b| {
            b.demand
                .cmp(&a.demand)
                .then_with(|| a.bucket.cmp(&b.bucket))
        });
        loads.truncate(most);
        loads
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding the lock leaves entries that are each whole: keep going.
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
