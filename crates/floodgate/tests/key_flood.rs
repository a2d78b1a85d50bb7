//! Floods of distinct keys against the bounded memory store, on a manual clock: the store
//! never holds more than `max_keys`, every eviction and refusal is counted, and the keys that
//! matter get exactly the decisions an unbounded store would give them whenever only lossless
//! (idle) eviction is needed, and under `Overflow::RefuseNew` in any case.

use floodgate::store::LocalStore;
use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::algorithm::Algorithm;
use floodgate::store::{Key, MemoryStore, Overflow};
use floodgate::{Decision, ManualClock, Nanos, Op};

const MAX_KEYS: usize = 4096;

type Store<A> = MemoryStore<Key, <A as Algorithm>::State, ManualClock>;

fn store<A: Algorithm>(clock: &ManualClock, max_keys: usize, overflow: Overflow) -> Store<A> {
    MemoryStore::builder()
        .max_keys(max_keys)
        .overflow(overflow)
        .clock(clock.clone())
        .build_typed()
        .expect("a valid store")
}

/// One request of cost 1 for `key` on each store: the bounded one's decision and the
/// reference's.
fn check_both<A: Algorithm>(
    bounded: &Store<A>,
    reference: &Store<A>,
    algorithm: &A,
    key: &str,
) -> (Decision, Decision) {
    let check = |store: &Store<A>| {
        store
            .apply_now(algorithm, key, Op::Check { cost: 1 })
            .unwrap()
    };
    (check(bounded), check(reference))
}

fn same(a: &Decision, b: &Decision) -> bool {
    (a.allowed, a.limit, a.remaining, a.retry_after)
        == (b.allowed, b.limit, b.remaining, b.retry_after)
}

/// Two million one-off keys at a million a second, each fresh again a millisecond after its
/// request (a per-client limit of 1,000/s): idle eviction alone keeps the store within bounds,
/// so nothing live is ever forgotten or refused, and the steady keys' decisions are exactly
/// an unbounded store's.
#[test]
fn a_flood_of_short_lived_keys_needs_only_lossless_eviction() {
    let clock = ManualClock::new(Nanos::ZERO);
    let bucket = TokenBucket::new(1000.0, 1).unwrap();
    let bounded = store::<TokenBucket>(&clock, MAX_KEYS, Overflow::EvictLive);
    let reference = store::<TokenBucket>(&clock, 1_000_000, Overflow::EvictLive);
    let steady: Vec<String> = (0..32).map(|i| format!("steady-{i}")).collect();
    let mut compared = 0;
    for i in 0..2_000_000u64 {
        clock.advance(Duration::from_micros(1));
        let d = bounded.apply_now(
            &bucket,
            format!("flood-{i}").as_str(),
            Op::Check { cost: 1 },
        );
        assert!(d.unwrap().allowed, "a new key's first request passes");
        if i % 250 == 0 {
            let key = steady[(i / 250) as usize % steady.len()].as_str();
            let (a, b) = check_both(&bounded, &reference, &bucket, key);
            assert!(same(&a, &b), "{key} at {i}: {a:?} vs {b:?}");
            compared += 1;
        }
        if i % 100_000 == 0 {
            assert!(bounded.stats().keys as usize <= MAX_KEYS);
        }
    }
    let stats = bounded.stats();
    assert!(stats.keys as usize <= MAX_KEYS, "{stats:?}");
    assert_eq!((stats.evicted_live, stats.refused_new), (0, 0), "{stats:?}");
    assert!(stats.evicted_idle > 1_900_000, "{stats:?}");
    assert_eq!(compared, 8000);
}

/// A flood of keys that stay live for a minute (one request per key per minute, a fixed
/// window): the store fills with live keys. Under `RefuseNew` the keys it already tracks keep
/// exact decisions while the flood's new keys are refused and counted; under `EvictLive` the
/// flood takes the place of live keys, which is counted too. Memory stays bounded either way.
#[test]
fn a_flood_of_long_lived_keys_is_bounded_and_counted() {
    let window = FixedWindow::new(3, Duration::from_secs(60)).unwrap();
    for overflow in [Overflow::RefuseNew, Overflow::EvictLive] {
        let clock = ManualClock::new(Nanos::ZERO);
        let bounded = store::<FixedWindow>(&clock, MAX_KEYS, overflow);
        let reference = store::<FixedWindow>(&clock, 1_000_000, overflow);
        // The tracked keys first: each has used part of its window.
        let tracked: Vec<String> = (0..64).map(|i| format!("tracked-{i}")).collect();
        for key in &tracked {
            for store in [&bounded, &reference] {
                let first = store.apply_now(&window, key.as_str(), Op::Check { cost: 1 });
                assert!(first.unwrap().allowed);
            }
        }
        let mut mismatches = 0;
        for i in 0..1_000_000u64 {
            clock.advance(Duration::from_micros(10));
            let _ = bounded.apply_now(
                &window,
                format!("flood-{i}").as_str(),
                Op::Check { cost: 1 },
            );
            if i % 10_000 == 0 {
                let key = tracked[(i / 10_000) as usize % tracked.len()].as_str();
                let (a, b) = check_both(&bounded, &reference, &window, key);
                mismatches += usize::from(!same(&a, &b));
            }
        }
        let stats = bounded.stats();
        assert!(stats.keys as usize <= MAX_KEYS, "{overflow:?}: {stats:?}");
        match overflow {
            Overflow::RefuseNew => {
                assert_eq!(mismatches, 0, "tracked keys stay exact");
                assert!(stats.refused_new > 990_000, "{stats:?}");
                assert_eq!(stats.evicted_live, 0);
            }
            Overflow::EvictLive => {
                assert!(stats.evicted_live > 990_000, "{stats:?}");
                assert_eq!(stats.refused_new, 0);
            }
        }
    }
}
