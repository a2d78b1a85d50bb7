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
    buckets: Mutex<HashMap<String, Claims>>,
    /// When [`Ledger::expire_due`] last walked the buckets, in nanoseconds.
    expired_at: AtomicU64,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// Records `claimant`'s report of `demand` on `bucket` at `now` and grants it its next
    /// share of `capacity`, in force for `ttl` (see [`Claims::grant`]).
    pub fn report(
        &self,
        bucket: &str,
        claimant: &str,
        demand: u64,
        capacity: u64,
        now: Nanos,
        ttl: Duration,
    ) -> u64 {
        let mut buckets = self.lock();
        let claims = buckets.entry(bucket.to_string()).or_default();
        claims.report(claimant, demand, now);
        claims.grant(claimant, capacity, now, ttl).unwrap_or(0)
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
            .grant(claimant, capacity, now, ttl)
    }

    /// `claimant` leaves `bucket` at `now`.
    pub fn leave(&self, bucket: &str, claimant: &str, now: Nanos) {
        let mut buckets = self.lock();
        if let Some(claims) = buckets.get_mut(bucket) {
            claims.leave(claimant, now);
            if claims.is_empty() && claims.in_force(now) == 0 {
                buckets.remove(bucket);
            }
        }
    }

    /// Removes, on every bucket, the claimants that have not reported for `idle`; forgets the
    /// buckets nobody claims or holds a grant on any more.
    pub fn expire(&self, now: Nanos, idle: Duration) {
        self.lock().retain(|_, claims| {
            claims.expire(now, idle);
            !claims.is_empty() || claims.in_force(now) > 0
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
        self.lock().get(bucket).map_or(0, |c| c.in_force(now))
    }

    /// The number of buckets with claims or grants in force.
    pub fn buckets(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Claims>> {
        // A panic while holding the lock leaves claims that are each whole: keep going.
        self.buckets.lock().unwrap_or_else(|e| e.into_inner())
    }
}
