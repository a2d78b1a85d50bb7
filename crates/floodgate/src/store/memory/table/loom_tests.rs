//! The table's protocol under the loom model checker, which runs every interleaving of these
//! threads (under the C++11 memory model) and fails on a lost update, a wrong key, or an
//! access to a key or state that no lock orders:
//!
//!     RUSTFLAGS="--cfg floodgate_loom" cargo test -p floodgate --lib --release loom

use super::*;
use crate::store::shard_lock::ShardLock;
use loom::sync::Arc;

/// Hashes chosen so that the keys share one bucket (and tag), like colliding keys do.
const HASH: u64 = 0x5500_0000_0000_0001;

type Shared = Arc<(Table<u64, u64>, ShardLock<Books>)>;

/// Every interleaving with up to three preemptions: enough for these two-thread races, and
/// keeps the search to seconds. Each atomic access is a branch point, and a bucket scan alone
/// makes 16, hence the raised branch limit.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.max_branches = 50_000;
    builder.check(f);
}

fn table_with(keys: &[u64]) -> Shared {
    let (table, mut books) = Table::new();
    for &k in keys {
        drop(table.insert(&mut books, HASH, k, 0).ok().unwrap());
    }
    Arc::new((table, ShardLock::new(books)))
}

/// One decision as the store makes it: without the shard lock, then with it on a miss; a
/// missing key is inserted. Returns the count after this increment.
fn increment(shared: &Shared, key: u64) -> u64 {
    let (table, lock) = &**shared;
    if let Some((_, mut entry)) = table.find(HASH, &key) {
        *entry.state_mut() += 1;
        return *entry.state();
    }
    let mut books = lock.lock();
    if let Some((_, mut entry)) = table.find(HASH, &key) {
        *entry.state_mut() += 1;
        return *entry.state();
    }
    let (_, entry) = table.insert(&mut books, HASH, key, 1).ok().unwrap();
    *entry.state()
}

/// A reader increments key 1 while a writer evicts key 1 when it looks idle (count 0) and
/// reuses its entry for key 2: the reader's increment lands in key 1's live entry (the old one,
/// or a new one made after the eviction), never in key 2's, and is never lost.
#[test]
fn an_update_racing_an_eviction_is_never_lost() {
    model(|| {
        let shared = table_with(&[1]);
        let reader = {
            let shared = shared.clone();
            loom::thread::spawn(move || increment(&shared, 1))
        };
        let evicted = {
            let (table, lock) = &*shared;
            let mut books = lock.lock();
            let (id, entry) = table.find(HASH, &1u64).unwrap();
            let idle = *entry.state() == 0;
            if idle {
                table.remove(&mut books, id, entry);
                drop(table.insert(&mut books, HASH, 2, 100).ok().unwrap());
            }
            idle
        };
        assert_eq!(reader.join().unwrap(), 1);
        let (table, _) = &*shared;
        assert_eq!(*table.find(HASH, &1u64).unwrap().1.state(), 1);
        let two = table.find(HASH, &2u64).map(|(_, e)| *e.state());
        assert_eq!(two, evicted.then_some(100));
    });
}

/// Two readers on one key, one finding it without the lock and one inserting it: one entry,
/// both increments.
#[test]
fn a_key_is_made_once_however_its_first_decisions_race() {
    model(|| {
        let shared = table_with(&[]);
        let other = {
            let shared = shared.clone();
            loom::thread::spawn(move || increment(&shared, 7))
        };
        let mine = increment(&shared, 7);
        let theirs = other.join().unwrap();
        assert_eq!(mine + theirs, 3, "one saw 1, the other 2");
        let (table, lock) = &*shared;
        assert_eq!(lock.lock().len, 1);
        assert_eq!(*table.find(HASH, &7u64).unwrap().1.state(), 2);
    });
}

/// A reader looks a key up while the writer's insertions split its bucket and double the
/// directory: it finds the key (or misses and finds it under the lock), and never reaches
/// another key's entry.
#[test]
fn a_lookup_racing_a_split_finds_its_key() {
    model(|| {
        let (table, mut books) = Table::new();
        // 16 keys whose hashes differ in bit 0 only: the 17th splits the bucket.
        let hash = |k: u64| 0x3300_0000_0000_0000 | (k & 1);
        for k in 0..16u64 {
            drop(table.insert(&mut books, hash(k), k, k).ok().unwrap());
        }
        let shared = Arc::new((table, ShardLock::new(books)));
        let reader = {
            let shared = shared.clone();
            loom::thread::spawn(move || {
                let (table, lock) = &*shared;
                match table.find(hash(5), &5u64) {
                    Some((_, e)) => *e.state(),
                    None => {
                        let _books = lock.lock();
                        *table.find(hash(5), &5u64).unwrap().1.state()
                    }
                }
            })
        };
        {
            let (table, lock) = &*shared;
            let mut books = lock.lock();
            drop(table.insert(&mut books, hash(16), 16, 16).ok().unwrap());
        }
        assert_eq!(reader.join().unwrap(), 5);
    });
}
