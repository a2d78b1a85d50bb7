//! Where the claims on every shared bucket live: in this node's memory (one [`Claims`] per
//! bucket, each changed under one lock), or in the Redis the service's store uses, so that
//! every node sharing it divides a bucket's limit among the streams of all of them (one hash
//! per bucket, changed by one script call per step: [`RedisStore::claim`]). Either way a step
//! is [`Claims::apply`]: a report and the grant it brings are one atomic step.
//!
//! The ledger also keeps what the steps of this node's streams last answered about each
//! bucket ([`BucketLoad`]): that is what `/metrics` and the dashboard show, and it is the same
//! whichever store holds the claims (on Redis, the whole fleet's demand and grants as of this
//! node's last step on the bucket).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use floodgate::quota::{ClaimStep, ClaimTerms, Claimed, Claims};
use floodgate::store::RedisStore;
use floodgate::{Nanos, StoreError};

/// The claims on every bucket, by bucket key (the domain and the bucket's pairs in key
/// order), and what this node last learnt of each.
#[derive(Debug)]
pub struct Ledger {
    claims: Held,
    loads: Mutex<HashMap<String, Seen>>,
    /// When [`Ledger::expire_due`] last walked the buckets, in nanoseconds.
    expired_at: AtomicU64,
    failures: AtomicU64,
    /// Keys the hashes shown for bucket values (random per process).
    hash_key: foldhash::quality::RandomState,
}

/// Where the claims are held.
#[derive(Debug)]
enum Held {
    Memory(Mutex<HashMap<String, Claims>>),
    Redis(RedisStore),
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
        BucketLoad {
            domain: self.label.0.clone(),
            bucket: self.label.1.clone(),
            demand: self.claimed.demand,
            granted: self.claimed.in_force,
            limit: self.limit,
            claimants: self.claimed.claimants,
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
    /// The sum of its claimants' demands, requests per unit of its limit.
    pub demand: u64,
    /// The grants in force on it, requests per unit (at most `limit`).
    pub granted: u64,
    /// Its limit, requests per unit.
    pub limit: u64,
    /// Its claimants (streams, of every node sharing the store).
    pub claimants: u64,
}

impl Ledger {
    /// Claims held in this node's memory: its streams divide each limit among themselves.
    pub fn in_memory() -> Ledger {
        Ledger::holding(Held::Memory(Mutex::new(HashMap::new())))
    }

    /// Claims held in `store`'s Redis: every node using it divides each limit among the
    /// streams of all of them.
    pub fn in_redis(store: RedisStore) -> Ledger {
        Ledger::holding(Held::Redis(store))
    }

    fn holding(claims: Held) -> Ledger {
        Ledger {
            claims,
            loads: Mutex::new(HashMap::new()),
            expired_at: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            hash_key: foldhash::quality::RandomState::default(),
        }
    }

    /// How a bucket's value is shown in metrics and on the dashboard: `#` and eight hex digits
    /// of a hash keyed at random per process, which tells values apart without revealing them.
    pub fn hidden(&self, value: &str) -> String {
        use std::hash::BuildHasher;
        format!("#{:08x}", self.hash_key.hash_one(value) as u32)
    }

    /// Whether the claims are shared through Redis with the other nodes using it.
    pub fn is_shared(&self) -> bool {
        matches!(self.claims, Held::Redis(_))
    }

    /// Takes `step` on `bucket`'s claims under `terms`, at `now` in memory (Redis takes its
    /// own `TIME`), and records what it answered for metrics, the bucket named by `label`
    /// (`(domain, pairs)`). `Err` when the store failed: nothing was taken.
    pub async fn step(
        &self,
        bucket: &str,
        label: impl FnOnce() -> (String, String),
        step: ClaimStep<'_>,
        terms: &ClaimTerms,
        now: Nanos,
    ) -> Result<Claimed, StoreError> {
        let claimed = match &self.claims {
            Held::Memory(buckets) => {
                let mut buckets = lock(buckets);
                let claims = buckets.entry(bucket.to_string()).or_default();
                let claimed = claims.apply(step, terms, now);
                if claims.is_empty() && claimed.in_force == 0 {
                    buckets.remove(bucket);
                }
                claimed
            }
            Held::Redis(store) => match store.claim(bucket, step, terms).await {
                Ok(claimed) => claimed,
                Err(e) => {
                    self.failures.fetch_add(1, Ordering::Relaxed);
                    return Err(e);
                }
            },
        };
        let mut loads = lock(&self.loads);
        if claimed.claimants == 0 && claimed.in_force == 0 {
            loads.remove(bucket);
        } else if let Some(seen) = loads.get_mut(bucket) {
            (seen.claimed, seen.limit, seen.at) = (claimed, terms.capacity, now);
        } else {
            let seen = Seen {
                label: label(),
                claimed,
                limit: terms.capacity,
                at: now,
            };
            loads.insert(bucket.to_string(), seen);
        }
        Ok(claimed)
    }

    /// At most once a second however many streams ask (each stream's tick does): in memory,
    /// the claimants that have not reported for `idle` leave every bucket, and buckets nobody
    /// claims or holds a grant on are forgotten (Redis forgets them by itself); what this
    /// node learnt of a bucket none of its streams has touched for `idle` is forgotten.
    pub fn expire_due(&self, now: Nanos, idle: Duration) {
        let last = self.expired_at.load(Ordering::Relaxed);
        if now.0.saturating_sub(last) < 1_000_000_000 {
            return;
        }
        if self
            .expired_at
            .compare_exchange(last, now.0, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            if let Held::Memory(buckets) = &self.claims {
                lock(buckets).retain(|_, claims| {
                    claims.expire(now, idle);
                    !claims.is_empty() || claims.in_force(now) > 0
                });
            }
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
