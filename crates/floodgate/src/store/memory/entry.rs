//! Direct access to one key's entry, for stores built on the memory store that keep more per key
//! than an algorithm's state (the cached store's view, unsent cost and sync bookkeeping).

use std::hash::{BuildHasher, Hash};

use super::MemoryStore;
use crate::store::OwnedKey;
use crate::{Clock, Nanos};

impl<K: Hash + Eq, S, C: Clock> MemoryStore<K, S, C> {
    /// Runs `f` on `key`'s entry under its shard's lock, with the store's "now" read under that
    /// lock (as every operation of the memory store does).
    ///
    /// `f` gets the entry (`None` for a key the store does not hold) and returns its result and,
    /// for a missing key only, the entry to insert. A new entry is inserted under the store's
    /// bound: when the shard is full, entries for which `is_fresh(entry, now)` holds are dropped
    /// first, then the [`super::Overflow`] policy applies. `None` when the policy refused the
    /// new entry ([`super::Overflow::RefuseNew`]): nothing was inserted, and the caller must
    /// treat whatever `f` decided as not having happened.
    pub(crate) fn update<Q, R>(
        &self,
        key: &Q,
        is_fresh: impl Fn(&S, Nanos) -> bool,
        f: impl FnOnce(Option<&mut S>, Nanos) -> (R, Option<S>),
    ) -> Option<R>
    where
        K: OwnedKey<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let mut map = self.shard_of(hash).map.lock();
        let now = self.clock.now();
        if let Some((_, entry)) = map.table.find_mut(hash, |(k, _)| k.borrow() == key) {
            return Some(f(Some(entry), now).0);
        }
        let (result, new) = f(None, now);
        let Some(new) = new else {
            return Some(result);
        };
        if map.table.len() >= self.per_shard && !self.make_room(&mut map, is_fresh, now) {
            map.refused_new += 1;
            return None;
        }
        self.insert_new(&mut map.table, hash, key, new);
        Some(result)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{MemoryStore, Overflow};
    use crate::store::LocalStore;
    use crate::{ManualClock, Nanos};

    #[test]
    fn inserts_updates_and_respects_the_bound() {
        let store = MemoryStore::builder()
            .max_keys(1)
            .shards(1)
            .overflow(Overflow::RefuseNew)
            .clock(ManualClock::new(Nanos(5)))
            .build_typed::<String, u64>()
            .unwrap();
        let never = |_: &u64, _| false;
        let add = |entry: Option<&mut u64>, now: Nanos| match entry {
            Some(n) => {
                *n += 1;
                (*n, None)
            }
            None => (now.0, Some(now.0)),
        };
        assert_eq!(store.update("a", never, add), Some(5));
        assert_eq!(store.update("a", never, add), Some(6));
        // Full of a live entry: the new one is refused and nothing is inserted.
        assert_eq!(store.update("b", never, add), None);
        assert_eq!(store.stats().refused_new, 1);
        // A fresh entry makes room.
        assert_eq!(store.update("b", |_, _| true, add), Some(5));
        assert_eq!(store.state("a"), None);
        // `f` may decline to insert.
        assert_eq!(store.update("c", never, |_, _| (0, None)), Some(0));
        assert_eq!(store.len(), 1);
    }
}
