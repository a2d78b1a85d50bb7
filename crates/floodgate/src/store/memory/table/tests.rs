use super::*;
use std::hash::BuildHasher;
use std::sync::Arc;

use crate::store::shard_lock::ShardLock;

fn hasher() -> foldhash::fast::FixedState {
    foldhash::fast::FixedState::with_seed(7)
}

fn h(key: u64) -> u64 {
    hasher().hash_one(key)
}

#[test]
fn holds_a_hundred_thousand_keys_through_splits_and_doublings() {
    let (table, mut books) = Table::<u64, u64>::new();
    for k in 0..100_000u64 {
        let (_, entry) = table.insert(&mut books, h(k), k, k * 2).ok().unwrap();
        drop(entry);
    }
    assert_eq!(books.len, 100_000);
    for k in 0..100_000u64 {
        let (_, entry) = table.find(h(k), &k).expect("every key is found");
        assert_eq!(*entry.state(), k * 2);
    }
    assert!(table.find(h(100_001), &100_001).is_none());
    // Buckets hold 16 slots: the index is at least 100 000 / 16 buckets, at most a few times
    // that, and the directory grew by doubling.
    assert!(books.next_bucket as usize >= 100_000 / SLOTS);
    assert!(books.next_bucket as usize <= 4 * 100_000 / SLOTS);
    assert!(!books.retired.is_empty());
}

#[test]
fn removed_keys_are_gone_and_their_entries_reused() {
    let (table, mut books) = Table::<u64, u64>::new();
    for k in 0..1_000u64 {
        drop(table.insert(&mut books, h(k), k, 0).ok().unwrap());
    }
    for k in (0..1_000u64).step_by(2) {
        let (id, entry) = table.find(h(k), &k).unwrap();
        assert_eq!(table.remove(&mut books, id, entry), (k, 0));
    }
    assert_eq!(books.len, 500);
    for k in 0..1_000u64 {
        assert_eq!(table.find(h(k), &k).is_some(), k % 2 == 1, "{k}");
    }
    let ids = books.ids();
    for k in 1_000..1_500u64 {
        drop(table.insert(&mut books, h(k), k, 1).ok().unwrap());
    }
    assert_eq!(books.ids(), ids, "freed entries were reused");
    for k in 1_000..1_500u64 {
        assert_eq!(*table.find(h(k), &k).unwrap().1.state(), 1);
    }
}

#[test]
fn keys_with_colliding_tags_and_bits_are_told_apart() {
    // Hashes that share the tag and the directory bits: only the key comparison separates them.
    let (table, mut books) = Table::<u64, u64>::new();
    let hash = 0xAB00_0000_0000_1234;
    for k in 0..16u64 {
        drop(table.insert(&mut books, hash, k, k).ok().unwrap());
    }
    for k in 0..16u64 {
        assert_eq!(*table.find(hash, &k).unwrap().1.state(), k);
    }
    // A seventeenth cannot split away from them: refused, and the entry is handed back.
    assert_eq!(table.insert(&mut books, hash, 99, 5).err(), Some((99, 5)));
    assert_eq!(books.len, 16);
    assert!(table.find(hash, &99).is_none());
}

#[test]
fn dropping_the_table_drops_live_keys_and_states_once() {
    let token = Arc::new(());
    {
        let (table, mut books) = Table::<u64, Arc<()>>::new();
        for k in 0..100u64 {
            drop(
                table
                    .insert(&mut books, h(k), k, token.clone())
                    .ok()
                    .unwrap(),
            );
        }
        for k in 0..50u64 {
            let (id, entry) = table.find(h(k), &k).unwrap();
            drop(table.remove(&mut books, id, entry));
        }
        assert_eq!(Arc::strong_count(&token), 51);
    }
    assert_eq!(Arc::strong_count(&token), 1);
}

/// Readers on their own keys and on one shared key count without the shard lock while a writer
/// keeps inserting and removing other keys (splits, doublings, reused entries): no increment is
/// lost and no reader ever gets another key's entry.
#[test]
fn readers_never_lose_updates_while_a_writer_reshapes_the_table() {
    let (table, books) = Table::<u64, u64>::new();
    let shared = Arc::new((table, ShardLock::new(books)));
    {
        let (table, lock) = &*shared;
        let mut books = lock.lock();
        for k in 0..64u64 {
            drop(table.insert(&mut books, h(k), k, 0).ok().unwrap());
        }
    }
    const ROUNDS: u64 = 20_000;
    let readers: Vec<_> = (0..2u64)
        .map(|t| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let (table, lock) = &*shared;
                for i in 0..ROUNDS {
                    // Own keys t, t + 2, …, and key 63 shared by both.
                    for key in [t + 2 * (i % 31), 63] {
                        let found = table.find(h(key), &key);
                        let mut entry = match found {
                            Some((_, e)) => e,
                            None => {
                                // A miss while the writer moves things: look again, exactly.
                                let _books = lock.lock();
                                table.find(h(key), &key).expect("key is never removed").1
                            }
                        };
                        assert_eq!(*entry.key(), key);
                        *entry.state_mut() += 1;
                    }
                }
            })
        })
        .collect();
    let writer = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            let (table, lock) = &*shared;
            for round in 0..200u64 {
                let mut books = lock.lock();
                let keys = 1_000 + round * 100..1_000 + round * 100 + 100;
                for k in keys.clone() {
                    drop(table.insert(&mut books, h(k), k, k).ok().unwrap());
                }
                drop(books);
                let mut books = lock.lock();
                for k in keys.step_by(2) {
                    let (id, entry) = table.find(h(k), &k).unwrap();
                    assert_eq!(table.remove(&mut books, id, entry), (k, k));
                }
            }
        })
    };
    for r in readers {
        r.join().unwrap();
    }
    writer.join().unwrap();
    let (table, _) = &*shared;
    let count = |k: u64| *table.find(h(k), &k).unwrap().1.state();
    assert_eq!(count(63), 2 * ROUNDS);
    let own: u64 = (0..62u64).map(count).sum();
    assert_eq!(own, 2 * ROUNDS);
}
