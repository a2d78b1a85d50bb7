//! The heaviest keys, in bounded memory: the space-saving sketch (Metwally, Agrawal and El
//! Abbadi, 2005), sharded by key so that concurrent requests rarely meet on a lock.
//!
//! A sketch of `m` counters over a stream of `N` requests keeps, for every key it holds, a
//! count that over-estimates the key's true count by at most its recorded `error`, itself at
//! most `N / m`; and every key whose true count exceeds `N / m` is held. Sharding keeps the
//! bound per shard: each key always lands in the same shard, whose own stream and counters
//! give the bound for it.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;

/// The longest key kept, in bytes; longer keys are cut at a character boundary.
pub(crate) const MAX_KEY_BYTES: usize = 128;

/// One counter of a sketch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Counted {
    /// The key.
    pub key: String,
    /// Its estimated count: at least the true count, at most `error` more.
    pub count: u64,
    /// How much of `count` may belong to keys the counter held before.
    pub error: u64,
}

/// A space-saving sketch of `capacity` counters, the smallest at the root of a binary heap.
#[derive(Debug)]
pub(crate) struct SpaceSaving {
    capacity: usize,
    /// Counters, in slots that do not move.
    slots: Vec<Counted>,
    /// Key → slot.
    index: HashMap<Box<str>, usize, foldhash::fast::RandomState>,
    /// Slots, as a min-heap by count.
    heap: Vec<usize>,
    /// Slot → its place in `heap`.
    place: Vec<usize>,
    total: u64,
}

impl SpaceSaving {
    /// An empty sketch of `capacity` counters (at least 1).
    pub(crate) fn new(capacity: usize) -> SpaceSaving {
        let capacity = capacity.max(1);
        // Nothing is reserved up front: the counters grow as keys arrive.
        SpaceSaving {
            capacity,
            slots: Vec::new(),
            index: HashMap::default(),
            heap: Vec::new(),
            place: Vec::new(),
            total: 0,
        }
    }

    /// Counts `weight` more for `key`.
    pub(crate) fn add(&mut self, key: &str, weight: u64) {
        let key = cut(key);
        self.total += weight;
        if let Some(&slot) = self.index.get(key) {
            self.slots[slot].count += weight;
            self.sift_down(self.place[slot]);
        } else if self.slots.len() < self.capacity {
            let slot = self.slots.len();
            self.slots.push(Counted {
                key: key.to_string(),
                count: weight,
                error: 0,
            });
            self.index.insert(key.into(), slot);
            self.heap.push(slot);
            self.place.push(self.heap.len() - 1);
            self.sift_up(self.heap.len() - 1);
        } else {
            // The newcomer takes the smallest counter over, and its count as possible error.
            let slot = self.heap[0];
            let old = std::mem::replace(&mut self.slots[slot].key, key.to_string());
            self.index.remove(old.as_str());
            self.index.insert(key.into(), slot);
            let counter = &mut self.slots[slot];
            counter.error = counter.count;
            counter.count += weight;
            self.sift_down(0);
        }
    }

    /// Everything counted so far.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// The `n` largest counters, the largest first (only those `n` keys are copied).
    pub(crate) fn top(&self, n: usize) -> Vec<Counted> {
        let mut slots: Vec<usize> = (0..self.slots.len()).collect();
        let by_count = |a: &usize, b: &usize| {
            let (a, b) = (&self.slots[*a], &self.slots[*b]);
            b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key))
        };
        if n < slots.len() {
            slots.select_nth_unstable_by(n, by_count);
            slots.truncate(n);
        }
        slots.sort_unstable_by(by_count);
        slots.into_iter().map(|i| self.slots[i].clone()).collect()
    }

    /// `key`'s estimate: its counter when held; otherwise its true count is at most the
    /// smallest counter (0 while the sketch has room), given as both count and error.
    pub(crate) fn estimate(&self, key: &str) -> (u64, u64) {
        match self.index.get(cut(key)) {
            Some(&slot) => (self.slots[slot].count, self.slots[slot].error),
            None if self.slots.len() < self.capacity => (0, 0),
            None => {
                let min = self.count_at(0);
                (min, min)
            }
        }
    }

    fn count_at(&self, i: usize) -> u64 {
        self.slots[self.heap[i]].count
    }

    fn swap(&mut self, i: usize, j: usize) {
        self.heap.swap(i, j);
        self.place[self.heap[i]] = i;
        self.place[self.heap[j]] = j;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.count_at(parent) <= self.count_at(i) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (left, right) = (2 * i + 1, 2 * i + 2);
            let mut smallest = i;
            if left < self.heap.len() && self.count_at(left) < self.count_at(smallest) {
                smallest = left;
            }
            if right < self.heap.len() && self.count_at(right) < self.count_at(smallest) {
                smallest = right;
            }
            if smallest == i {
                break;
            }
            self.swap(i, smallest);
            i = smallest;
        }
    }
}

/// `key` cut to at most [`MAX_KEY_BYTES`], at a character boundary.
fn cut(key: &str) -> &str {
    if key.len() <= MAX_KEY_BYTES {
        return key;
    }
    let mut end = MAX_KEY_BYTES;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    &key[..end]
}

/// The shards of [`HeavyKeys`].
const SHARDS: usize = 8;

/// Space-saving sketches for concurrent use: `SHARDS` (8) of them, a key always in the same one,
/// each behind its own lock; `capacity` counters in all (0 turns counting off).
#[derive(Debug)]
pub(crate) struct HeavyKeys {
    shards: Vec<Mutex<SpaceSaving>>,
    hasher: foldhash::fast::RandomState,
}

impl HeavyKeys {
    /// Sketches of `capacity` counters in all, rounded up to a multiple of the shards; 0 counts
    /// nothing.
    pub(crate) fn new(capacity: usize) -> HeavyKeys {
        let per_shard = capacity.div_ceil(SHARDS);
        let shards = if capacity == 0 {
            Vec::new()
        } else {
            (0..SHARDS)
                .map(|_| Mutex::new(SpaceSaving::new(per_shard)))
                .collect()
        };
        HeavyKeys {
            shards,
            hasher: Default::default(),
        }
    }

    /// Whether counting is on.
    pub(crate) fn enabled(&self) -> bool {
        !self.shards.is_empty()
    }

    fn shard(&self, key: &str) -> std::sync::MutexGuard<'_, SpaceSaving> {
        let shard = (self.hasher.hash_one(cut(key)) % self.shards.len() as u64) as usize;
        // A counter is a few numbers updated together; a poisoned lock is used as is.
        self.shards[shard]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts one request of `key`.
    pub(crate) fn add(&self, key: &str) {
        if self.shards.is_empty() {
            return;
        }
        self.shard(key).add(key, 1);
    }

    /// `key`'s estimate in its shard (see [`SpaceSaving::estimate`]); (0, 0) when off.
    pub(crate) fn estimate(&self, key: &str) -> (u64, u64) {
        if self.shards.is_empty() {
            return (0, 0);
        }
        self.shard(key).estimate(key)
    }

    /// Counts one request of the key `write` puts into a buffer (reused per thread, so that
    /// building a key allocates nothing). `write` may stop once the buffer holds more than
    /// [`MAX_KEY_BYTES`]: the rest would be cut anyway.
    pub(crate) fn add_with(&self, write: impl FnOnce(&mut String)) {
        if self.shards.is_empty() {
            return;
        }
        thread_local! {
            static BUFFER: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
        }
        BUFFER.with(|buffer| {
            let mut buffer = buffer.borrow_mut();
            buffer.clear();
            write(&mut buffer);
            self.add(&buffer);
            // A huge key once must not keep a huge buffer for the thread's life.
            if buffer.capacity() > 4 * MAX_KEY_BYTES {
                *buffer = String::new();
            }
        });
    }

    /// The `n` largest counters of every shard, merged, the largest first, and the total count.
    pub(crate) fn top(&self, n: usize) -> (Vec<Counted>, u64) {
        let mut all = Vec::new();
        let mut total = 0;
        for shard in &self.shards {
            let sketch = shard
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            total += sketch.total();
            all.extend(sketch.top(n));
        }
        all.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        all.truncate(n);
        (all, total)
    }

    /// Forgets every count.
    pub(crate) fn clear(&self) {
        for shard in &self.shards {
            let mut sketch = shard
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let capacity = sketch.capacity;
            *sketch = SpaceSaving::new(capacity);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn exact_while_every_key_has_a_counter() {
        let mut s = SpaceSaving::new(4);
        for key in ["a", "b", "a", "c", "a", "b"] {
            s.add(key, 1);
        }
        let top = s.top(10);
        assert_eq!(
            top[0],
            Counted {
                key: "a".into(),
                count: 3,
                error: 0
            }
        );
        assert_eq!(top[1].count, 2);
        assert_eq!(top.len(), 3);
        assert_eq!(s.top(1).len(), 1);
        assert_eq!(s.total(), 6);
        assert_eq!(s.estimate("b"), (2, 0));
        assert_eq!(
            s.estimate("z"),
            (0, 0),
            "room left: an absent key was never seen"
        );
    }

    #[test]
    fn a_heavy_key_survives_a_flood_of_distinct_ones() {
        let mut s = SpaceSaving::new(16);
        for i in 0..100_000u64 {
            s.add(&format!("one-off-{i}"), 1);
            if i % 10 == 0 {
                s.add("attacker", 1);
            }
        }
        let top = s.top(16);
        assert_eq!(top[0].key, "attacker");
        let (count, error) = s.estimate("never-seen");
        assert_eq!(
            count, error,
            "an absent key is bounded by the smallest counter"
        );
        assert!(top[0].count >= 10_000 && top[0].count - top[0].error <= 10_000);
        assert_eq!(s.slots.len(), 16, "memory stays at its counters");
    }

    #[test]
    fn long_keys_are_cut_at_a_character_boundary() {
        let mut s = SpaceSaving::new(2);
        let long = "é".repeat(100); // 200 bytes
        s.add(&long, 1);
        let key = &s.top(1)[0].key;
        assert!(key.len() <= MAX_KEY_BYTES && key.chars().all(|c| c == 'é'));
    }

    #[test]
    fn shards_merge_into_one_top_list() {
        let keys = HeavyKeys::new(64);
        for i in 0..1000u64 {
            keys.add_with(|b| {
                b.push_str("user-");
                b.push_str(&(i % 7).to_string());
            });
        }
        let (top, total) = keys.top(3);
        assert_eq!(total, 1000);
        assert_eq!(top.len(), 3);
        assert!(top.iter().all(|c| c.error == 0 && c.count >= 142));
        keys.clear();
        assert_eq!(keys.top(3).1, 0);
        let off = HeavyKeys::new(0);
        off.add("x");
        assert!(!off.enabled() && off.top(3).0.is_empty());
    }

    proptest! {
        /// The sketch's guarantees: every held count over-estimates by at most its error, every
        /// error is at most N/m, and every key above N/m is held.
        #[test]
        fn the_error_bound_holds(
            stream in proptest::collection::vec(0u32..60, 1..2000),
            capacity in 1usize..24,
        ) {
            let mut s = SpaceSaving::new(capacity);
            let mut exact: HashMap<u32, u64> = HashMap::new();
            for k in &stream {
                s.add(&k.to_string(), 1);
                *exact.entry(*k).or_default() += 1;
            }
            let n = stream.len() as u64;
            let bound = n / capacity as u64;
            let top = s.top(capacity);
            for c in &top {
                let truth = exact[&c.key.parse::<u32>().unwrap()];
                prop_assert!(c.count >= truth && c.count - c.error <= truth);
                prop_assert!(c.error <= bound);
            }
            for (k, truth) in exact {
                if truth > bound {
                    prop_assert!(top.iter().any(|c| c.key == k.to_string()), "{k}: {truth}");
                }
                let (count, error) = s.estimate(&k.to_string());
                prop_assert!(count >= truth && count - error <= truth);
            }
        }
    }
}
