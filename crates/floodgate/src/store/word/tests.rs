use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::algorithm::fixed_window::{FixedWindow, FixedWindowState};
use crate::algorithm::gcra::Gcra;
use crate::algorithm::leaky_bucket::LeakyBucket;
use crate::algorithm::leaky_queue::LeakyQueue;
use crate::algorithm::token_bucket::{TokenBucket, TokenBucketState};
use crate::store::{Link, MemoryStore};
use crate::ManualClock;

fn check(cost: u64) -> Op {
    Op::Check { cost }
}

fn word_store(
    max_keys: usize,
    shards: usize,
    overflow: Overflow,
    clock: &ManualClock,
) -> WordStore<u64, GcraState, ManualClock> {
    MemoryStore::builder()
        .max_keys(max_keys)
        .shards(shards)
        .overflow(overflow)
        .clock(clock.clone())
        .build_word()
        .unwrap()
}

fn retired<K, S: WordState, C>(store: &WordStore<K, S, C>) -> usize {
    store
        .shards
        .iter()
        .map(|s| s.books.lock().retired.len())
        .sum()
}

/// Applies `ops` (key, clock step in quarter milliseconds, cost) to a word store and to a
/// memory store of the same bound, one shard each (so that both apply their bound to the same
/// keys), and fails at the first decision, state or count where they differ.
fn decide_as_the_memory_store<A>(
    algorithm: &A,
    start: u64,
    max_keys: usize,
    ops: Vec<(u64, u64, u64)>,
) -> Result<(), TestCaseError>
where
    A: Algorithm,
    A::State: WordState + fmt::Debug,
{
    let clock = ManualClock::new(Nanos(start));
    // Both stores from the same settings, so that only the store differs.
    let settings = || {
        MemoryStore::builder()
            .max_keys(max_keys)
            .shards(1)
            .overflow(Overflow::RefuseNew)
            .clock(clock.clone())
    };
    let word: WordStore<u64, A::State, ManualClock> = settings().build_word().unwrap();
    let memory: MemoryStore<u64, A::State, ManualClock> = settings().build_typed().unwrap();
    for (i, (key, dt_ms, cost)) in ops.into_iter().enumerate() {
        clock.advance(Duration::from_millis(dt_ms) / 4);
        let got = word.apply_now(algorithm, &key, check(cost)).unwrap();
        let expected = memory.apply_now(algorithm, &key, check(cost)).unwrap();
        prop_assert_eq!(got, expected, "op {} on key {}", i, key);
        prop_assert_eq!(word.state(&key), memory.state(&key));
    }
    prop_assert_eq!(word.stats(), memory.stats());
    Ok(())
}

/// Keys, clock steps and costs for [`decide_as_the_memory_store`]; a cost is now and then
/// beyond 32 bits, which the limits near `u64::MAX` admit, so that counts fill their half.
fn ops() -> impl Strategy<Value = Vec<(u64, u64, u64)>> {
    let cost = prop_oneof![9 => 0u64..4, 1 => (1u64 << 32)..(1 << 48)];
    prop::collection::vec((0u64..64, 0u64..20, cost), 1..400)
}

/// The clock's first instant: near the origin, past 2^62, or near the end of time (the ops move
/// it by at most 2 s), so that states use every bit of their words.
fn start() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..1 << 40,
        (1u64 << 62)..(1 << 63),
        (u64::MAX - (1 << 40))..(u64::MAX - 10_000_000_000),
    ]
}

proptest! {
    /// Decision for decision, and key for key, the word store is the memory store, for every
    /// state it holds (a `u64` word: GCRA, the leaky queue; a `u128` word: the fixed window,
    /// token and leaky buckets), through idle eviction, refused new keys and table rebuilds.
    #[test]
    fn gcra_decides_as_on_the_memory_store(
        max_burst in 0u64..4,
        period_ms in 1u64..50,
        start in start(),
        max_keys in 1usize..48,
        ops in ops(),
    ) {
        let gcra = Gcra::new(max_burst, 1, Duration::from_millis(period_ms)).unwrap();
        decide_as_the_memory_store(&gcra, start, max_keys, ops)?;
    }

    #[test]
    fn the_fixed_window_decides_as_on_the_memory_store(
        limit in prop_oneof![1u64..6, (u64::MAX - 6)..=u64::MAX],
        window_ms in 1u64..50,
        start in start(),
        max_keys in 1usize..48,
        ops in ops(),
    ) {
        let window = FixedWindow::new(limit, Duration::from_millis(window_ms)).unwrap();
        decide_as_the_memory_store(&window, start, max_keys, ops)?;
    }

    #[test]
    fn the_buckets_decide_as_on_the_memory_store(
        rate in 1.0f64..400.0,
        capacity in prop_oneof![1u64..6, (u64::MAX - 6)..=u64::MAX],
        start in start(),
        max_keys in 1usize..48,
        ops in ops(),
    ) {
        let tokens = TokenBucket::new(rate, capacity).unwrap();
        decide_as_the_memory_store(&tokens, start, max_keys, ops.clone())?;
        let meter = LeakyBucket::new(rate, capacity).unwrap();
        decide_as_the_memory_store(&meter, start, max_keys, ops)?;
    }

    #[test]
    fn the_leaky_queue_decides_as_on_the_memory_store(
        rate in 1.0f64..400.0,
        queue in 0u64..6,
        start in start(),
        max_keys in 1usize..48,
        ops in ops(),
    ) {
        let queue = LeakyQueue::new(rate, queue).unwrap();
        decide_as_the_memory_store(&queue, start, max_keys, ops)?;
    }
}

/// Four threads checking one key 500 times each admit exactly `expected`, for an algorithm
/// whose clock does not move.
fn four_threads_on_one_key_admit<A>(algorithm: A, expected: usize)
where
    A: Algorithm + Send + Sync + 'static,
    A::State: WordState,
{
    let clock = ManualClock::new(Nanos(5));
    let store: Arc<WordStore<u64, A::State, ManualClock>> = Arc::new(
        MemoryStore::builder()
            .max_keys(1000)
            .shards(64)
            .clock(clock)
            .build_word()
            .unwrap(),
    );
    let algorithm = Arc::new(algorithm);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (store, algorithm) = (store.clone(), algorithm.clone());
            std::thread::spawn(move || {
                (0..500)
                    .filter(|_| {
                        store
                            .apply_now(&*algorithm, &7u64, check(1))
                            .unwrap()
                            .allowed
                    })
                    .count()
            })
        })
        .collect();
    let admitted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(admitted, expected, "{}", std::any::type_name::<A>());
}

#[test]
fn threads_on_one_key_admit_exactly_the_limit() {
    four_threads_on_one_key_admit(Gcra::new(999, 1, Duration::from_secs(3600)).unwrap(), 1000);
    // The 16-byte words: both halves change together or not at all.
    four_threads_on_one_key_admit(
        FixedWindow::new(1000, Duration::from_secs(60)).unwrap(),
        1000,
    );
    four_threads_on_one_key_admit(TokenBucket::new(1e-3, 1000).unwrap(), 1000);
    four_threads_on_one_key_admit(LeakyBucket::new(1e-3, 1000).unwrap(), 1000);
}

/// The 16-byte words keep their states exactly, including what only saturation or a debt
/// reaches; the one state that would be all ones is kept as its neighbour.
#[test]
fn sixteen_byte_words_keep_their_states() {
    for (tokens, last) in [
        (2.5, 7),
        (-3.25, u64::MAX),
        (-0.0, 0),
        (f64::MIN_POSITIVE, 1),
    ] {
        let state = TokenBucketState::from_parts(tokens, Nanos(last));
        let back = TokenBucketState::from_word(state.to_word());
        assert_eq!(
            back.to_word(),
            state.to_word(),
            "bit for bit: {tokens} at {last}"
        );
    }
    for (start, count) in [(0, 0), (60, u64::MAX), (u64::MAX, 3)] {
        let state = FixedWindowState::from_parts(Nanos(start), count);
        assert_eq!(FixedWindowState::from_word(state.to_word()), state);
    }
    let last = FixedWindowState::from_parts(Nanos(u64::MAX), u64::MAX);
    assert_eq!(
        FixedWindowState::from_word(last.to_word()),
        FixedWindowState::from_parts(Nanos(u64::MAX), u64::MAX - 1)
    );
}

/// Every key gets exactly its limit of 3 while one shard's table is rebuilt again and again
/// under the threads' compare-and-swaps: an update racing a rebuild is neither lost nor doubled.
fn threads_admit_exactly_the_limit_while_the_table_grows<A>(algorithm: A)
where
    A: Algorithm + Send + Sync + 'static,
    A::State: WordState,
{
    let clock = ManualClock::new(Nanos(5));
    let store: Arc<WordStore<u64, A::State, ManualClock>> = Arc::new(
        MemoryStore::builder()
            .max_keys(1 << 20)
            .shards(1)
            .overflow(Overflow::RefuseNew)
            .clock(clock)
            .build_word()
            .unwrap(),
    );
    let algorithm = Arc::new(algorithm);
    let keys = 3000u64;
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (store, algorithm) = (store.clone(), algorithm.clone());
            std::thread::spawn(move || {
                let mut admitted = 0;
                for round in 0..2 {
                    for i in 0..keys {
                        // Each thread walks the keys from its own starting point.
                        let key = (i + t * 757 + round * 31) % keys;
                        let decision = store.apply_now(&*algorithm, &key, check(1)).unwrap();
                        admitted += usize::from(decision.allowed);
                    }
                }
                admitted
            })
        })
        .collect();
    let admitted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(
        admitted,
        3 * keys as usize,
        "8 checks per key, a limit of 3 each: {}",
        std::any::type_name::<A>()
    );
    assert_eq!(store.len(), keys as usize);
}

#[test]
fn threads_admit_exactly_the_limit_while_the_table_grows_for_both_word_sizes() {
    threads_admit_exactly_the_limit_while_the_table_grows(
        Gcra::new(2, 1, Duration::from_secs(3600)).unwrap(),
    );
    threads_admit_exactly_the_limit_while_the_table_grows(
        FixedWindow::new(3, Duration::from_secs(3600)).unwrap(),
    );
    threads_admit_exactly_the_limit_while_the_table_grows(TokenBucket::new(1e-6, 3).unwrap());
}

/// The bound and its counters, through the surface both in-process stores share: a store that
/// evicts and one that refuses, word store and memory store alike.
fn the_bound_holds<S: LocalStore<u64, GcraState>>(
    evicting: &S,
    refusing: &S,
    gcra: &Gcra,
    clock: &ManualClock,
) {
    for key in 0..1000u64 {
        assert!(evicting.apply_now(gcra, &key, check(1)).unwrap().allowed);
        let _ = refusing.apply_now(gcra, &key, check(1)).unwrap();
    }
    assert!(evicting.len() <= 100);
    let stats = evicting.stats();
    assert_eq!(stats.keys as usize, evicting.len());
    assert_eq!(stats.evicted_live as usize, 1000 - evicting.len());
    let stats = refusing.stats();
    assert!(refusing.len() <= 100);
    assert_eq!(stats.refused_new as usize, 1000 - refusing.len());
    // Once the keys are fresh again, a sweep drops them all, losslessly.
    clock.advance(Duration::from_secs(61));
    let held = evicting.len();
    assert_eq!(evicting.sweep(gcra), held);
    assert!(evicting.is_empty());
}

#[test]
fn the_bound_holds_under_either_policy_on_either_store() {
    let gcra = Gcra::new(5, 1, Duration::from_secs(60)).unwrap();
    let clock = ManualClock::new(Nanos(5));
    let evicting = word_store(100, 4, Overflow::EvictLive, &clock);
    let refusing = word_store(100, 4, Overflow::RefuseNew, &clock);
    the_bound_holds(&evicting, &refusing, &gcra, &clock);
    let clock = ManualClock::new(Nanos(5));
    let memory = |overflow| -> MemoryStore<u64, GcraState, ManualClock> {
        MemoryStore::builder()
            .max_keys(100)
            .shards(4)
            .overflow(overflow)
            .clock(clock.clone())
            .build_typed()
            .unwrap()
    };
    let (evicting, refusing) = (memory(Overflow::EvictLive), memory(Overflow::RefuseNew));
    the_bound_holds(&evicting, &refusing, &gcra, &clock);
}

/// A flood of distinct live keys on a full store: each new key evicts one, the bound holds and
/// every eviction is counted (an eviction does not walk the tombstones of the earlier ones).
#[test]
fn a_flood_of_live_keys_is_bounded_and_counted() {
    let clock = ManualClock::new(Nanos(5));
    let store = word_store(4096, 4, Overflow::EvictLive, &clock);
    let gcra = Gcra::new(5, 1, Duration::from_secs(3600)).unwrap();
    let keys = 200_000u64;
    for key in 0..keys {
        assert!(store.apply_now(&gcra, &key, check(1)).unwrap().allowed);
    }
    let stats = store.stats();
    assert!(store.len() <= 4096);
    assert_eq!(stats.keys as usize, store.len());
    assert_eq!(stats.evicted_live, keys - stats.keys);
    // The newest key is held: its second check spends a second unit of its burst.
    let last = store.state(&(keys - 1)).unwrap();
    let _ = store.apply_now(&gcra, &(keys - 1), check(1)).unwrap();
    assert!(store.state(&(keys - 1)).unwrap().tat() > last.tat());
}

#[test]
fn retired_tables_are_freed_once_no_reader_can_be_in_them() {
    let clock = ManualClock::new(Nanos(5));
    let store = word_store(1 << 20, 1, Overflow::RefuseNew, &clock);
    let gcra = Gcra::new(5, 1, Duration::from_secs(60)).unwrap();
    for key in 0..10_000u64 {
        let _ = store.apply_now(&gcra, &key, check(1)).unwrap();
    }
    // Readers of other tests may hold back a grace period for a moment, never for ever.
    while retired(&store) > 0 {
        std::thread::yield_now();
        store.sweep(&gcra);
    }
    // SAFETY: this thread is the store's only user.
    let current = unsafe { store.shards[0].table.load() }.bytes();
    assert_eq!(
        store.table_bytes(),
        current + std::mem::size_of_val(&*store.shards)
    );
    assert!(
        current < 10_000 * 17 * 8 / 7 * 2 + 1024,
        "{current} bytes for 10k keys"
    );
}

#[test]
fn string_keys_long_and_short_are_kept_and_dropped() {
    let clock = ManualClock::new(Nanos(5));
    let store: WordStore<Key, GcraState, ManualClock> = MemoryStore::builder()
        .shards(1)
        .clock(clock.clone())
        .build_word()
        .unwrap();
    let gcra = Gcra::new(0, 1, Duration::from_secs(60)).unwrap();
    let long = "a key much longer than the twenty-four bytes kept inline";
    for key in ["short", long] {
        assert!(store.apply_now(&gcra, key, check(1)).unwrap().allowed);
        assert!(!store.apply_now(&gcra, key, check(1)).unwrap().allowed);
    }
    for i in 0..100 {
        let _ = store
            .apply_now(&gcra, format!("{long} {i}").as_str(), check(1))
            .unwrap();
    }
    assert!(!store.apply_now(&gcra, long, check(1)).unwrap().allowed);
    assert_eq!(store.len(), 102);
}

#[test]
fn probes_and_impossible_requests_store_nothing() {
    let clock = ManualClock::new(Nanos(5));
    let store = word_store(10, 1, Overflow::RefuseNew, &clock);
    let gcra = Gcra::new(1, 1, Duration::from_secs(1)).unwrap();
    assert!(store.apply_now(&gcra, &1, check(0)).unwrap().allowed);
    assert!(!store.apply_now(&gcra, &2, check(3)).unwrap().allowed);
    assert!(store.is_empty());
}

#[test]
fn chains_go_link_by_link_and_refuse_all_or_nothing() {
    let clock = ManualClock::new(Nanos(5));
    let store = word_store(10, 1, Overflow::RefuseNew, &clock);
    let gcra = Gcra::new(0, 1, Duration::from_secs(1)).unwrap();
    let link = |key, all_or_nothing| Link {
        request: KeyedOp {
            algorithm: &gcra,
            key,
            op: check(1),
        },
        refuses: true,
        stops: true,
        all_or_nothing,
        fails_closed: false,
        joins_previous: false,
    };
    let links = [link(&1u64, false), link(&2u64, false)];
    let outcome = poll_ready(store.apply_chain(&links)).unwrap();
    assert!(outcome
        .iter()
        .all(|l| l.decision().is_some_and(|d| d.allowed)));
    let links = [link(&3u64, true)];
    assert!(poll_ready(store.apply_chain(&links)).is_err());
    assert_eq!(store.len(), 2);
}

fn poll_ready<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => panic!("the word store answers at once"),
    }
}

/// A key whose copy can be made to panic, to interrupt a table's rebuild.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Fragile(u64);

static REFUSE_COPIES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl Clone for Fragile {
    fn clone(&self) -> Self {
        assert!(
            !REFUSE_COPIES.load(std::sync::atomic::Ordering::Relaxed),
            "copy refused"
        );
        Fragile(self.0)
    }
}

#[test]
fn a_panic_while_a_table_is_rebuilt_leaves_every_key_usable() {
    let clock = ManualClock::new(Nanos(5));
    let store: WordStore<Fragile, GcraState, ManualClock> = MemoryStore::builder()
        .shards(1)
        .clock(clock.clone())
        .build_word()
        .unwrap();
    let gcra = Gcra::new(1, 1, Duration::from_secs(60)).unwrap();
    // The first table has room for 7 keys: the 8th rebuilds it, copying the 7.
    for key in 0..7 {
        assert!(
            store
                .apply_now(&gcra, &Fragile(key), check(1))
                .unwrap()
                .allowed
        );
    }
    REFUSE_COPIES.store(true, std::sync::atomic::Ordering::Relaxed);
    let interrupted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.apply_now(&gcra, &Fragile(7), check(1))
    }));
    REFUSE_COPIES.store(false, std::sync::atomic::Ordering::Relaxed);
    assert!(interrupted.is_err());
    // Every key kept its state (one unit of a burst of two spent) and can still be updated.
    for key in 0..7 {
        assert!(
            store
                .apply_now(&gcra, &Fragile(key), check(1))
                .unwrap()
                .allowed
        );
        assert!(
            !store
                .apply_now(&gcra, &Fragile(key), check(1))
                .unwrap()
                .allowed
        );
    }
    assert!(
        store
            .apply_now(&gcra, &Fragile(7), check(1))
            .unwrap()
            .allowed
    );
    assert_eq!(store.len(), 8);
}
