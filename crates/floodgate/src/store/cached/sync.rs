//! The sync: every queued key's unsent cost to Redis in one round trip, and the global states
//! back into the views.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::entry::Entry;
use super::{CachedStore, Shared};
use crate::algorithm::spec::{AnyAlgorithm, AnyState};
use crate::algorithm::Algorithm;
use crate::store::redis::{Exchange, Exchanged};
use crate::{Clock, Nanos, StoreError};

/// The offset between Redis's clock and the node's moves only by more than this.
const OFFSET_STEP: i64 = 1_000_000;

/// What one sync did.
#[derive(Debug, Clone, Default)]
pub struct SyncReport {
    /// Keys sent (with unsent cost, or to be loaded).
    pub keys: usize,
    /// Cost sent and acknowledged.
    pub sent_cost: u64,
    /// Cost that could not be sent, kept for the next sync.
    pub unsent_cost: u64,
    /// The error that made the whole sync fail, if it did (the cost it carried was kept).
    pub error: Option<StoreError>,
    /// For each synced key whose global state was beyond its limit: the key's namespace (the
    /// part of the key before the first `:`, the limiter) and how many units beyond: a fixed
    /// window's count past the limit, a token bucket's debt below zero, a GCRA schedule's
    /// units beyond its tolerance.
    pub overshoot: Vec<(String, u64)>,
    /// The round trip, on the node's clock.
    pub round_trip: Duration,
}

impl CachedStore {
    /// Syncs now: sends every queued key's unsent cost (and loads the keys decided at the
    /// node's share) in one round trip, and replaces their views with the global states. A
    /// sync already running makes this one return at once with an empty report.
    pub async fn sync(&self) -> SyncReport {
        let shared = &self.shared;
        if shared.syncing.swap(true, Ordering::Acquire) {
            return SyncReport::default();
        }
        let report = shared.sync_once().await;
        shared.syncing.store(false, Ordering::Release);
        report
    }

    /// Spawns the sync loop on the current Tokio runtime: a sync every `sync_interval` (a late
    /// one is not made up for), each report handed to `report` (for metrics). The loop ends
    /// when the last clone of the store is dropped.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub fn start_syncing(
        &self,
        mut report: impl FnMut(&SyncReport) + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(&self.shared);
        let interval = self.shared.sync_interval;
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(shared) = weak.upgrade() else { return };
                let store = CachedStore { shared };
                report(&store.sync().await);
            }
        })
    }
}

impl Shared {
    async fn sync_once(&self) -> SyncReport {
        let taken = self.take_pending();
        let mut report = SyncReport {
            keys: taken.len(),
            ..SyncReport::default()
        };
        if taken.is_empty() {
            self.last_sync
                .store(self.local.clock().now().0, Ordering::Relaxed);
            return report;
        }
        let items: Vec<Exchange<'_>> = taken
            .iter()
            .map(|(key, algorithm, at, cost)| Exchange {
                key,
                algorithm,
                at: *at,
                cost: *cost,
            })
            .collect();
        let left = self.node_clock.now();
        // A sync may carry many keys, and one that timed out may still run in Redis (its cost
        // would then count twice when sent again): give it as long as the views may age.
        let timeout = self.redis.timeout().max(self.max_view_age);
        let answers = self.redis.exchange(&items, timeout).await;
        let back = self.node_clock.now();
        report.round_trip = back.saturating_since(left);
        let answers = match answers {
            Ok(answers) => answers,
            Err(e) => {
                self.counters.failed_syncs.fetch_add(1, Ordering::Relaxed);
                for (key, algorithm, at, cost) in &taken {
                    report.unsent_cost += cost;
                    self.put_back(key, algorithm, *at, *cost);
                }
                self.counters
                    .unsent_cost
                    .fetch_add(report.unsent_cost, Ordering::Relaxed);
                report.error = Some(e);
                return report;
            }
        };
        self.counters.syncs.fetch_add(1, Ordering::Relaxed);
        if let Some(Ok(first)) = answers.first() {
            self.measure_offset(first.now, left, back);
        }
        for ((key, algorithm, at, cost), answer) in taken.iter().zip(answers) {
            match answer {
                Ok(Exchanged { now, state }) => {
                    report.sent_cost += cost;
                    let global = state.unwrap_or_else(|| algorithm.fresh(now));
                    let beyond = algorithm.overshoot(&global, now);
                    if beyond > 0 {
                        let namespace = key.split_once(':').map_or("", |(ns, _)| ns);
                        report.overshoot.push((namespace.to_owned(), beyond));
                    }
                    self.learn(key, algorithm, global);
                }
                Err(StoreError::StateConflict { .. }) => {
                    // Another algorithm's state in Redis: this cost can never be merged.
                    self.counters.lost_cost.fetch_add(*cost, Ordering::Relaxed);
                }
                Err(_) => {
                    report.unsent_cost += cost;
                    self.put_back(key, algorithm, *at, *cost);
                }
            }
        }
        self.counters
            .sent_cost
            .fetch_add(report.sent_cost, Ordering::Relaxed);
        self.counters
            .unsent_cost
            .fetch_add(report.unsent_cost, Ordering::Relaxed);
        self.last_sync
            .store(self.local.clock().now().0, Ordering::Relaxed);
        report
    }

    /// Takes the queued keys' unsent cost (a key dropped meanwhile has nothing to send): each
    /// key, its algorithm, when its cost began to gather and the cost.
    fn take_pending(&self) -> Vec<(String, AnyAlgorithm, Nanos, u64)> {
        let batch = std::mem::take(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()));
        let mut taken = Vec::with_capacity(batch.len());
        for (key, algorithm) in batch {
            let took = self
                .local
                .update(key.as_str(), Entry::droppable, |entry, _| match entry {
                    Some(e) => {
                        let took = (e.first_at, e.pending);
                        e.pending = 0;
                        e.queued = false;
                        (Some(took), None)
                    }
                    None => (None, None),
                });
            if let Some(Some((at, cost))) = took {
                taken.push((key, algorithm, at, cost));
            }
        }
        taken
    }

    /// Makes `global`, the state Redis answered for `key`, the base of its view.
    fn learn(&self, key: &str, algorithm: &AnyAlgorithm, global: AnyState) {
        self.local
            .update(key, Entry::droppable, |entry, local_now| {
                let Some(entry) = entry else {
                    // Dropped while the sync was on its way: keep what Redis said.
                    let mut entry = Entry::new(algorithm, local_now);
                    entry.learn(algorithm, global, local_now);
                    return ((), Some(entry));
                };
                entry.learn(algorithm, global, local_now);
                ((), None)
            });
    }

    /// Puts back cost a sync could not send, so that the next one sends it.
    fn put_back(&self, key: &str, algorithm: &AnyAlgorithm, at: Nanos, cost: u64) {
        let kept = self
            .local
            .update(key, Entry::droppable, |entry, _| match entry {
                Some(entry) => {
                    entry.owe(at, cost);
                    if !entry.queued {
                        entry.queued = true;
                        self.queue
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((key.to_owned(), algorithm.clone()));
                    }
                    (true, None)
                }
                None => (false, None),
            });
        if kept != Some(true) {
            self.counters.lost_cost.fetch_add(cost, Ordering::Relaxed);
        }
    }

    /// Moves the offset to Redis's clock when the one measured now (Redis's instant against
    /// the midpoint of the round trip on the node's clock) differs by more than a millisecond.
    pub(super) fn measure_offset(&self, redis_now: Nanos, left: Nanos, back: Nanos) {
        let midpoint = left.0 / 2 + back.0 / 2 + (left.0 % 2 + back.0 % 2) / 2;
        let measured = i64::try_from(i128::from(redis_now.0) - i128::from(midpoint)).unwrap_or(
            if redis_now.0 > midpoint {
                i64::MAX
            } else {
                i64::MIN
            },
        );
        let current = self.offset.load(Ordering::Relaxed);
        if measured.abs_diff(current) > OFFSET_STEP.unsigned_abs() {
            self.offset.store(measured, Ordering::Relaxed);
        }
    }
}
