//! The claims on every shared bucket this node knows, in memory: one [`Claims`] per bucket,
//! each changed under one lock, so that a report and the grant it brings are one step.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use floodgate::quota::Claims;
use floodgate::Nanos;

/// The claims on every bucket, by bucket key (the domain and the bucket's pairs in key
/// order).
#[derive(Debug, Default)]
pub struct Ledger {
    buckets: Mutex<HashMap<String, Bucket>>,
    /// When [`Ledger::expire_due`] last walked the buckets, in nanoseconds.
    expired_at: AtomicU64,
}

/// One bucket's claims, with how metrics name it.
#[derive(Debug, Default)]
struct Bucket {
    /// `(domain, pairs)`, the pairs as `key=value` joined by commas.
    label: (String, String),
    claims: Claims,
}

/// One bucket as metrics show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketLoad {
    /// Its domain.
    pub domain: String,
    /// Its pairs, `key=value` joined by commas, in key order.
    pub bucket: String,
    /// The sum of its claimants' demands, requests per unit of its limit.
    pub demand: u64,
    /// The grants in force on it, requests per unit.
    pub granted: u64,
    /// Its claimants.
    pub claimants: usize,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// Records `claimant`'s report of `demand` on `bucket` (shown in metrics as `label`) at
    /// `now` and grants it its next share of `capacity`, in force for `ttl` (see
    /// [`Claims::grant`]).
    #[allow(clippy::too_many_arguments)] // one report: who, on what, wanting what, when
    pub fn report(
        &self,
        bucket: &str,
        label: impl FnOnce() -> (String, String),
        claimant: &str,
        demand: u64,
        capacity: u64,
        now: Nanos,
        ttl: Duration,
    ) -> u64 {
        let mut buckets = self.lock();
        let entry = buckets.entry(bucket.to_string()).or_insert_with(|| Bucket {
            label: label(),
            claims: Claims::new(),
        });
        entry.claims.report(claimant, demand, now);
        entry
            .claims
            .grant(claimant, capacity, now, ttl)
            .unwrap_or(0)
    }

    /// Grants `claimant` its next share of `capacity` on `bucket` without a report; `None` if
    /// it does not claim the bucket (any more).
    pub fn grant(
        &self,
        bucket: &str,
        claimant: &str,
        capacity: u64,
        now: Nanos,
        ttl: Duration,
    ) -> Option<u64> {
        self.lock()
            .get_mut(bucket)?
            .claims
            .grant(claimant, capacity, now, ttl)
    }

    /// `claimant` leaves `bucket` at `now`.
    pub fn leave(&self, bucket: &str, claimant: &str, now: Nanos) {
        let mut buckets = self.lock();
        if let Some(entry) = buckets.get_mut(bucket) {
            entry.claims.leave(claimant, now);
            if entry.claims.is_empty() && entry.claims.in_force(now) == 0 {
                buckets.remove(bucket);
            }
        }
    }

    /// Removes, on every bucket, the claimants that have not reported for `idle`; forgets the
    /// buckets nobody claims or holds a grant on any more.
    pub fn expire(&self, now: Nanos, idle: Duration) {
        self.lock().retain(|_, entry| {
            entry.claims.expire(now, idle);
            !entry.claims.is_empty() || entry.claims.in_force(now) > 0
        });
    }

    /// [`Ledger::expire`], at most once a second however many streams ask (each stream's tick
    /// does).
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
            self.expire(now, idle);
        }
    }

    /// The grants in force on `bucket` at `now`.
    pub fn in_force(&self, bucket: &str, now: Nanos) -> u64 {
        self.lock()
            .get(bucket)
            .map_or(0, |entry| entry.claims.in_force(now))
    }

    /// The number of buckets with claims or grants in force.
    pub fn buckets(&self) -> usize {
        self.lock().len()
    }

    /// The `most` buckets with the greatest demand, greatest first, at `now`.
    pub fn busiest(&self, most: usize, now: Nanos) -> Vec<BucketLoad> {
        let mut loads: Vec<BucketLoad> = self
            .lock()
            .values()
            .map(|entry| BucketLoad {
                domain: entry.label.0.clone(),
                bucket: entry.label.1.clone(),
                demand: entry
                    .claims
                    .iter()
                    .map(|c| c.demand)
                    .fold(0, u64::saturating_add),
                granted: entry.claims.in_force(now),
                claimants: entry.claims.len(),
            })
            .collect();
        loads.sort_by(|a, b| {
            b.demand
                .cmp(&a.demand)
                .then_with(|| a.bucket.cmp(&b.bucket))
        });
        loads.truncate(most);
        loads
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Bucket>> {
        // A panic while holding the lock leaves claims that are each whole: keep going.
        self.buckets.lock().unwrap_or_else(|e| e.into_inner())
    }
}
