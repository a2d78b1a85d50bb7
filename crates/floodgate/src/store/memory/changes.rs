//! Which keys changed: the hook a durable store built on the memory store (`store::file`) uses
//! to learn what to write, without the memory store knowing anything of files.
//!
//! When a store tracks changes ([`MemoryStore::track_changes`]), every write of a key's entry
//! under its shard's lock — an operation on a held key, a new key inserted, a chain's undo, a
//! live key the bound forgot — adds the key to its shard's set of changed keys (once, however
//! often it is written). [`MemoryStore::drain_changes`] takes a shard's set under the same lock
//! and hands each key with its state *at that instant* (`None`: the key is gone), so a reader
//! that drains every shard sees, for each key, its latest state, and a key written after the
//! drain is in the next one. Keys dropped because their state was fresh are not noted: their
//! last written state is fresh as well, so a copy of it elsewhere decides the same.
//!
//! A store that does not track changes pays one flag read per write, nothing else.

use std::hash::{BuildHasher, Hash};

use super::MemoryStore;
use crate::store::OwnedKey;
use crate::Clock;

impl<K: Hash + Eq, S, C: Clock> MemoryStore<K, S, C> {
    /// This store, noting every key written from now on (see the module documentation).
    pub(crate) fn track_changes(mut self) -> Self {
        self.tracks_changes = true;
        self
    }

    /// The number of shards: the valid arguments of the per-shard calls are `0..shard_count()`.
    pub(crate) fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// Under shard `shard`'s lock, empties its set of changed keys and calls `f` with each key
    /// and its state now (`None` for a key no longer held). Returns the number of keys.
    pub(crate) fn drain_changes(&self, shard: usize, mut f: impl FnMut(&K, Option<&S>)) -> usize {
        let mut map = self.shards[shard].map.lock();
        let changed = std::mem::take(&mut map.changed);
        let n = changed.len();
        for key in &changed {
            let hash = self.hasher.hash_one(key);
            f(key, map.table.find(hash, |(k, _)| k == key).map(|(_, s)| s));
        }
        n
    }

    /// Under shard `shard`'s lock, calls `f` with every key it holds and its state (changed
    /// keys stay noted). Returns the number of keys.
    pub(crate) fn for_each_entry(&self, shard: usize, mut f: impl FnMut(&K, &S)) -> usize {
        let map = self.shards[shard].map.lock();
        for (key, state) in &map.table {
            f(key, state);
        }
        map.table.len()
    }

    /// Puts `key` with `state`, replacing what it holds, without noting a change: restoring
    /// what was saved. False, and nothing put, when the key is new and its shard is full (the
    /// store's bound holds for loaded keys too).
    pub(crate) fn load<Q>(&self, key: &Q, state: S) -> bool
    where
        K: OwnedKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let mut map = self.shard_of(hash).map.lock();
        if let Some((_, held)) = map.table.find_mut(hash, |(k, _)| k.borrow() == key) {
            *held = state;
            return true;
        }
        if map.table.len() >= self.per_shard {
            return false;
        }
        self.insert_new(&mut map.table, hash, key, state);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::{MemoryStore, Overflow};
    use crate::algorithm::Algorithm;
    use crate::store::LocalStore;
    use crate::{Decision, ManualClock, Nanos, Op};
    use std::time::Duration;

    /// Counts every check's cost; fresh at zero.
    #[derive(Debug)]
    struct Count;

    impl Algorithm for Count {
        type State = u64;
        fn name(&self) -> &'static str {
            "count"
        }
        fn fresh(&self, _: Nanos) -> u64 {
            0
        }
        fn apply(&self, s: &mut u64, _: Nanos, op: Op) -> Decision {
            if let Op::Check { cost } = op {
                *s += cost;
            }
            Decision::allow(u64::MAX, 0, Duration::ZERO)
        }
        fn is_fresh(&self, s: &u64, _: Nanos) -> bool {
            *s == 0
        }
    }

    fn drained(store: &MemoryStore<String, u64, ManualClock>) -> Vec<(String, Option<u64>)> {
        let mut out = Vec::new();
        for shard in 0..store.shard_count() {
            store.drain_changes(shard, |k, s| out.push((k.clone(), s.copied())));
        }
        out.sort();
        out
    }

    fn store(max_keys: usize, tracked: bool) -> MemoryStore<String, u64, ManualClock> {
        let store = MemoryStore::builder()
            .max_keys(max_keys)
            .shards(1)
            .overflow(Overflow::EvictLive)
            .clock(ManualClock::new(Nanos(1)))
            .build_typed()
            .unwrap();
        if tracked {
            store.track_changes()
        } else {
            store
        }
    }

    #[test]
    fn each_written_key_is_drained_once_with_its_latest_state() {
        let s = store(10, true);
        for (key, cost) in [("a", 1), ("b", 2), ("a", 3), ("c", 0)] {
            let _ = s.apply_now(&Count, key, Op::Check { cost }).unwrap();
        }
        // "c" stayed fresh and was never stored.
        assert_eq!(
            drained(&s),
            [("a".to_string(), Some(4)), ("b".to_string(), Some(2))]
        );
        assert_eq!(drained(&s), []);
        let _ = s.apply_now(&Count, "b", Op::Check { cost: 1 }).unwrap();
        assert_eq!(drained(&s), [("b".to_string(), Some(3))]);
    }

    #[test]
    fn a_key_the_bound_forgets_is_drained_as_gone() {
        let s = store(1, true);
        let _ = s.apply_now(&Count, "a", Op::Check { cost: 1 }).unwrap();
        drained(&s);
        let _ = s.apply_now(&Count, "b", Op::Check { cost: 1 }).unwrap();
        assert_eq!(
            drained(&s),
            [("a".to_string(), None), ("b".to_string(), Some(1))]
        );
    }

    #[test]
    fn untracked_stores_note_nothing_and_loading_notes_nothing() {
        let s = store(10, false);
        let _ = s.apply_now(&Count, "a", Op::Check { cost: 1 }).unwrap();
        assert_eq!(drained(&s), []);
        let t = store(1, true);
        assert!(t.load("x", 7));
        assert!(t.load("x", 8));
        assert!(!t.load("y", 1), "the bound holds for loaded keys");
        assert_eq!(drained(&t), []);
        let mut all = Vec::new();
        t.for_each_entry(0, |k, s| all.push((k.clone(), *s)));
        assert_eq!(all, [("x".to_string(), 8)]);
    }
}
