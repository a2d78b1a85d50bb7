//! A decision for a key the store already holds allocates nothing: counted by a global
//! allocator that tallies this thread's allocations (other threads, such as the coarse clock's,
//! are not counted).

use floodgate::store::LocalStore;
use floodgate_harness::allocations::{allocations, CountingAllocator};

use floodgate::algorithm::gcra::{Gcra, GcraState};
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
use floodgate::store::{Key, MemoryStore, WordStore};
use floodgate::{Decision, Op, StoreError};

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Allocations for 10,000 decisions on 1,000 keys (`user-0` …) already held: `decide` makes one
/// decision on a key; each key's first, made before counting, must be allowed.
fn allocations_for_held_keys(decide: impl Fn(&str) -> Result<Decision, StoreError>) -> u64 {
    let keys: Vec<String> = (0..1_000).map(|i| format!("user-{i}")).collect();
    for key in &keys {
        assert!(decide(key).unwrap().allowed);
    }
    allocations(|| {
        for _ in 0..10 {
            for key in &keys {
                assert!(decide(key).is_ok());
            }
        }
    })
}

#[test]
fn the_memory_store_decides_for_a_held_key_without_allocating() {
    let store = MemoryStore::new();
    let gcra: AnyAlgorithm = Gcra::new(100, 1_000_000, std::time::Duration::from_secs(1))
        .unwrap()
        .into();
    let n = allocations_for_held_keys(|key| store.apply_now(&gcra, key, Op::Check { cost: 1 }));
    assert_eq!(n, 0, "allocations for 10,000 decisions on held keys");
    // A new key of up to 24 bytes is kept inline in the table: nothing is allocated unless the
    // table grows. A longer one allocates its copy.
    let table = store.table_bytes();
    let n = allocations(|| {
        let _ = store.apply_now(&gcra, "someone-new", Op::Check { cost: 1 });
    });
    if store.table_bytes() == table {
        assert_eq!(n, 0, "allocations for a new short key");
    }
    let n = allocations(|| {
        let key = "someone-new-with-a-key-longer-than-24-bytes";
        let _ = store.apply_now(&gcra, key, Op::Check { cost: 1 });
    });
    assert!(n >= 1);
}

#[test]
fn the_word_store_decides_for_a_held_key_without_allocating() {
    let store: WordStore<Key, GcraState> = MemoryStore::builder().build_word().unwrap();
    let gcra = Gcra::new(100, 1_000_000, std::time::Duration::from_secs(1)).unwrap();
    // The thread's first pin registers its record (while the keys are stored, before counting);
    // later ones allocate nothing.
    let n = allocations_for_held_keys(|key| store.apply_now(&gcra, key, Op::Check { cost: 1 }));
    assert_eq!(n, 0, "allocations for 10,000 decisions on held keys");
}

#[test]
fn the_request_rate_limiter_decides_for_a_known_user_without_allocating() {
    let limiter = RequestRateLimiter::builder()
        .plan(Plan::new("pro", TokenBucket::new(1e6, 1_000_000).unwrap().into()).unwrap())
        .build(MemoryStore::new())
        .unwrap();
    assert!(
        limiter
            .check_blocking("alice", "pro", 1)
            .unwrap()
            .decision
            .allowed
    );
    let n = allocations(|| {
        for _ in 0..1_000 {
            let d = limiter.check_blocking("alice", "pro", 1).unwrap();
            assert!(d.decision.allowed);
        }
    });
    assert_eq!(n, 0, "allocations for 1,000 decisions on a known user");
}
