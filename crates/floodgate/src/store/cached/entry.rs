//! One key on a node: its view of the global state, what it admitted and has not sent, and how
//! a request is decided on them.

use std::sync::atomic::Ordering;

use super::Shared;
use crate::algorithm::spec::{AnyAlgorithm, AnyState};
use crate::algorithm::Algorithm;
use crate::store::redis::Exchange;
use crate::{Clock, Decision, Nanos, Op, StoreError};

/// A key's local record.
#[derive(Clone, Debug)]
pub(super) struct Entry {
    /// The global state at the last sync (or load), plus what this node admitted since.
    pub(super) view: AnyState,
    /// What this node admitted at its share of the limit while the view could not be trusted
    /// (never loaded, or the last sync too old); `None` otherwise.
    pub(super) alone: Option<AnyState>,
    /// Cost admitted here and not yet acknowledged by Redis.
    pub(super) pending: u64,
    /// The instant of the first of those admissions.
    pub(super) first_at: Nanos,
    /// Whether the view came from Redis at least once.
    pub(super) loaded: bool,
    /// Whether the key is in the sync queue.
    pub(super) queued: bool,
    /// From this instant on the view is fresh (a dropped key would be loaded back the same).
    pub(super) fresh_at: Nanos,
}

impl Entry {
    /// A key this node has just met: a fresh view, nothing unsent, not loaded yet.
    pub(super) fn new(algorithm: &AnyAlgorithm, now: Nanos) -> Entry {
        Entry {
            view: algorithm.fresh(now),
            alone: None,
            pending: 0,
            first_at: now,
            loaded: false,
            queued: false,
            fresh_at: now,
        }
    }

    /// Whether the local store may drop this entry without losing anything.
    pub(super) fn droppable(&self, now: Nanos) -> bool {
        self.pending == 0 && !self.queued && now >= self.fresh_at
    }

    /// Adds `cost`, first admitted at `at`, to the unsent cost.
    pub(super) fn owe(&mut self, at: Nanos, cost: u64) {
        if self.pending == 0 || at < self.first_at {
            self.first_at = at;
        }
        self.pending = self.pending.saturating_add(cost);
    }

    /// Replaces the view with `global` (the state Redis returned) and applies on top what was
    /// admitted here since the sync left.
    pub(super) fn learn(&mut self, algorithm: &AnyAlgorithm, global: AnyState, now: Nanos) {
        self.view = global;
        if self.pending > 0 {
            algorithm.absorb(&mut self.view, self.first_at, self.pending);
        }
        self.loaded = true;
        self.alone = None;
        self.fresh_at = fresh_at(algorithm, &self.view, now);
    }
}

/// The instant from which `state` is fresh: `now` plus the time a probe says it takes.
fn fresh_at(algorithm: &AnyAlgorithm, state: &AnyState, now: Nanos) -> Nanos {
    let probe = algorithm.apply(&mut state.clone(), now, Op::Check { cost: 0 });
    now.saturating_add(probe.reset_after)
}

impl Shared {
    /// Whether the last successful sync is too old for the views to be trusted at `now`.
    fn stale(&self, now: Nanos) -> bool {
        let last = Nanos(self.last_sync.load(Ordering::Relaxed));
        now.saturating_since(last) > self.max_view_age
    }

    /// Decides `cost` on `entry` at `now`, and records what it admitted.
    fn decide_in(
        &self,
        entry: &mut Entry,
        algorithm: &AnyAlgorithm,
        key: &str,
        cost: u64,
        now: Nanos,
    ) -> Result<Decision, StoreError> {
        if !algorithm.owns(&entry.view) {
            return Err(StoreError::StateConflict {
                algorithm: algorithm.name(),
                found: algorithm.state_name(&entry.view),
            });
        }
        let op = Op::Check { cost };
        // With one node the view holds everything admitted, and the share is the whole limit.
        let decision = if self.nodes == 1 || (entry.loaded && !self.stale(now)) {
            let decision = algorithm.apply(&mut entry.view, now, op);
            entry.fresh_at = now.saturating_add(decision.reset_after);
            decision
        } else {
            self.counters
                .decided_at_share
                .fetch_add(1, Ordering::Relaxed);
            // A share of a valid algorithm is valid; should it not be, decide on the whole.
            let share = algorithm
                .share(self.nodes)
                .unwrap_or_else(|_| algorithm.clone());
            let alone = entry.alone.get_or_insert_with(|| share.fresh(now));
            let decision = share.apply(alone, now, op);
            if decision.allowed && cost > 0 {
                algorithm.absorb(&mut entry.view, now, cost);
            }
            entry.fresh_at = fresh_at(algorithm, &entry.view, now);
            decision
        };
        if decision.allowed && cost > 0 {
            entry.owe(now, cost);
        }
        if (entry.pending > 0 || !entry.loaded) && !entry.queued {
            entry.queued = true;
            self.queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((key.to_owned(), algorithm.clone()));
        }
        Ok(decision)
    }

    /// Decides on a key the node holds; `None` for a key it has never seen (or dropped).
    pub(super) fn decide_known(
        &self,
        algorithm: &AnyAlgorithm,
        key: &str,
        cost: u64,
    ) -> Option<Result<Decision, StoreError>> {
        self.local
            .update(key, Entry::droppable, |entry, now| match entry {
                Some(entry) => (Some(self.decide_in(entry, algorithm, key, cost, now)), None),
                None => (None, None),
            })
            .flatten()
    }

    /// The state of a key the node has never seen, from Redis: `Ok(Some(state))` when it came
    /// within the load budget (`None` inside: the key holds nothing), `Ok(None)` when it did
    /// not (or Redis is failing, when nothing is tried).
    pub(super) async fn load(
        &self,
        algorithm: &AnyAlgorithm,
        key: &str,
    ) -> Result<Option<Option<AnyState>>, StoreError> {
        let now = self.local.clock().now();
        if self.stale(now) || self.load_budget.is_zero() {
            self.counters.missed_loads.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        let items = [Exchange {
            key,
            algorithm,
            at: now,
            cost: 0,
        }];
        let left = self.node_clock.now();
        let asked = self.redis.exchange(&items, self.redis.timeout());
        match tokio::time::timeout(self.load_budget, asked).await {
            Ok(Ok(mut answers)) => match answers.pop() {
                Some(Ok(answer)) => {
                    self.measure_offset(answer.now, left, self.node_clock.now());
                    self.counters.loads.fetch_add(1, Ordering::Relaxed);
                    Ok(Some(answer.state))
                }
                // Another algorithm's state: the same refusal as the other stores give.
                Some(Err(e @ StoreError::StateConflict { .. })) => Err(e),
                _ => {
                    self.counters.missed_loads.fetch_add(1, Ordering::Relaxed);
                    Ok(None)
                }
            },
            _ => {
                self.counters.missed_loads.fetch_add(1, Ordering::Relaxed);
                Ok(None)
            }
        }
    }

    /// Decides on a key the node did not hold, with what [`Shared::load`] found, and keeps it.
    pub(super) fn decide_new(
        &self,
        algorithm: &AnyAlgorithm,
        key: &str,
        cost: u64,
        loaded: Option<Option<AnyState>>,
    ) -> Result<Decision, StoreError> {
        let decided = self.local.update(key, Entry::droppable, |entry, now| {
            if let Some(entry) = entry {
                // Another request brought it in meanwhile.
                return (self.decide_in(entry, algorithm, key, cost, now), None);
            }
            let mut entry = Entry::new(algorithm, now);
            if let Some(global) = loaded {
                entry.learn(
                    algorithm,
                    global.unwrap_or_else(|| algorithm.fresh(now)),
                    now,
                );
            }
            (
                self.decide_in(&mut entry, algorithm, key, cost, now),
                Some(entry),
            )
        });
        // `None`: the local store is full and refuses new keys.
        decided.unwrap_or_else(|| {
            let probe = algorithm.apply(
                &mut algorithm.fresh(Nanos::ZERO),
                Nanos::ZERO,
                Op::Check { cost: 0 },
            );
            Ok(Decision::deny(probe.limit, 0, probe.reset_after, None))
        })
    }
}
