//! The memory store with every real algorithm: no over-admission under concurrency, and
//! eviction that never changes a decision.

use floodgate::store::LocalStore;
use std::sync::Arc;

use floodgate::algorithm::spec::{AlgorithmSpec, AnyAlgorithm, AnyState};
use floodgate::algorithm::Algorithm;
use floodgate::store::{Key, MemoryStore, Overflow};
use floodgate::{ManualClock, Nanos, Op};

fn build(json: &str) -> AnyAlgorithm {
    serde_json::from_str::<AlgorithmSpec>(json)
        .expect("valid spec")
        .build()
        .expect("valid parameters")
}

/// Each spec with the total cost it admits on one key at one frozen instant, from fresh.
const AT_ONE_INSTANT: &[(&str, usize)] = &[
    (
        r#"{"algorithm":"token_bucket","rate":5,"capacity":300}"#,
        300,
    ),
    (
        r#"{"algorithm":"leaky_bucket","rate":5,"capacity":300}"#,
        300,
    ),
    (r#"{"algorithm":"leaky_queue","rate":5,"queue":299}"#, 300),
    (
        r#"{"algorithm":"fixed_window","limit":300,"window":60}"#,
        300,
    ),
    (
        r#"{"algorithm":"sliding_log","limit":300,"window":60}"#,
        300,
    ),
    (
        r#"{"algorithm":"sliding_window","limit":300,"window":60}"#,
        300,
    ),
    (
        r#"{"algorithm":"sliding_window","limit":300,"window":60,"buckets":6}"#,
        300,
    ),
    (
        r#"{"algorithm":"gcra","max_burst":299,"count":5,"period":1}"#,
        300,
    ),
    // Guava lets exactly one request through at once from a fresh limiter (no stored permits
    // for bursty; the cold interval for warming up), then makes the next one wait. A bursty
    // key starting full spends its 5 stored permits, then one more whose cost the next pays.
    (
        r#"{"algorithm":"smooth_bursty","rate":5,"starts":"empty"}"#,
        1,
    ),
    (r#"{"algorithm":"smooth_bursty","rate":5}"#, 6),
    (
        r#"{"algorithm":"smooth_warming_up","rate":5,"warmup":"2s"}"#,
        1,
    ),
];

/// The in-flight limits have no spec and their own hammering tests (tests/lease_stress.rs);
/// every other algorithm is in [`AT_ONE_INSTANT`].
#[test]
fn every_algorithm_with_a_spec_is_hammered() {
    for name in AnyAlgorithm::NAMES {
        if matches!(*name, "concurrency" | "fleet") {
            continue;
        }
        let hammered = AT_ONE_INSTANT
            .iter()
            .any(|(spec, _)| build(spec).name() == *name);
        assert!(hammered, "{name} is missing from AT_ONE_INSTANT");
    }
}

#[test]
fn threads_hammering_one_key_admit_exactly_the_bound() {
    for &(spec, bound) in AT_ONE_INSTANT {
        let alg = Arc::new(build(spec));
        let clock = ManualClock::new(Nanos::from_secs(1_000));
        let store: Arc<MemoryStore<Key, AnyState, ManualClock>> = Arc::new(
            MemoryStore::builder()
                .clock(clock.clone())
                .build()
                .expect("valid store"),
        );
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (alg, store) = (alg.clone(), store.clone());
                std::thread::spawn(move || {
                    (0..400)
                        .filter(|_| {
                            store
                                .apply_now(&*alg, "hot", Op::Check { cost: 1 })
                                .expect("check is supported")
                                .allowed
                        })
                        .count()
                })
            })
            .collect();
        let admitted: usize = threads
            .into_iter()
            .map(|t| t.join().expect("no panic"))
            .sum();
        assert_eq!(admitted, bound, "{spec}");
    }
}

/// Specs whose keys go back to fresh within about a second of their last use.
const SHORT_MEMORY: [&str; 10] = [
    r#"{"algorithm":"token_bucket","rate":50,"capacity":10}"#,
    r#"{"algorithm":"leaky_bucket","rate":50,"capacity":10}"#,
    r#"{"algorithm":"leaky_queue","rate":50,"queue":9}"#,
    r#"{"algorithm":"fixed_window","limit":10,"window":1}"#,
    r#"{"algorithm":"sliding_log","limit":10,"window":1}"#,
    r#"{"algorithm":"sliding_window","limit":10,"window":1}"#,
    r#"{"algorithm":"sliding_window","limit":10,"window":1,"buckets":4}"#,
    r#"{"algorithm":"gcra","max_burst":9,"count":50,"period":1}"#,
    r#"{"algorithm":"smooth_warming_up","rate":50,"warmup":"500ms"}"#,
    r#"{"algorithm":"smooth_bursty","rate":50,"max_burst_seconds":0.2}"#,
];

/// A deterministic trace: time moves forward 0–39 ms a step; keys come from a window of 24 that
/// moves on every 200 steps (about 4 s), so old keys go idle and fewer than 64 are ever live.
fn trace(len: usize, seed: u64) -> Vec<(Nanos, String, u64)> {
    let mut x = seed | 1;
    let mut t = Nanos::from_secs(10_000);
    (0..len)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t = Nanos(t.0 + (x % 40) * 1_000_000); // 0–39 ms
            let key = format!("k{}", i / 200 + (x >> 20) as usize % 24);
            let cost = (x >> 40) % 3;
            (t, key, cost)
        })
        .collect()
}

#[test]
fn eviction_on_and_off_give_identical_decisions() {
    // Not smooth_bursty starting empty (Guava's exact semantics): a used key saves up permits
    // and never looks fresh again, so it can never be dropped losslessly.
    for spec in SHORT_MEMORY {
        let alg = build(spec);
        let small_clock = ManualClock::new(Nanos::ZERO);
        let big_clock = ManualClock::new(Nanos::ZERO);
        let small: MemoryStore<Key, AnyState, ManualClock> = MemoryStore::builder()
            .max_keys(64)
            .shards(1)
            .overflow(Overflow::RefuseNew)
            .clock(small_clock.clone())
            .build()
            .expect("valid store");
        let big: MemoryStore<Key, AnyState, ManualClock> = MemoryStore::builder()
            .max_keys(1 << 20)
            .shards(1)
            .clock(big_clock.clone())
            .build()
            .expect("valid store");
        for (step, (t, key, cost)) in trace(20_000, 0x5EED).into_iter().enumerate() {
            small_clock.set(t);
            big_clock.set(t);
            let op = Op::Check { cost };
            let a = small.apply_now(&alg, key.as_str(), op).expect("supported");
            let b = big.apply_now(&alg, key.as_str(), op).expect("supported");
            assert_eq!(a, b, "{spec}: step {step}");
        }
        let stats = small.stats();
        assert!(stats.evicted_idle > 0, "{spec}: eviction never ran");
        assert_eq!(stats.refused_new, 0, "{spec}");
        assert!(stats.keys <= 64);
    }
}
