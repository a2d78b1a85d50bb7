//! The memory store's own tests: lookups, the bound, idle and live eviction, threads.

use super::*;
use crate::{ManualClock, OpKind};
use std::sync::Arc;
use std::time::Duration;

/// A minimal per-second quota, so that these tests do not depend on a real algorithm.
#[derive(Debug)]
struct PerSecond(u64);

impl Algorithm for PerSecond {
    type State = (u64, u64); // (second, used)
    fn name(&self) -> &'static str {
        "per_second"
    }
    fn fresh(&self, now: Nanos) -> (u64, u64) {
        (now.0 / 1_000_000_000, 0)
    }
    fn apply(&self, s: &mut (u64, u64), now: Nanos, op: Op) -> Decision {
        let sec = now.0 / 1_000_000_000;
        if sec > s.0 {
            *s = (sec, 0);
        }
        let cost = match op {
            Op::Check { cost } => cost,
            _ => 0,
        };
        if s.1 + cost <= self.0 {
            s.1 += cost;
            Decision::allow(self.0, self.0 - s.1, Duration::from_secs(1))
        } else {
            Decision::deny(self.0, self.0 - s.1, Duration::from_secs(1), None)
        }
    }
    fn is_fresh(&self, s: &(u64, u64), now: Nanos) -> bool {
        s.1 == 0 || now.0 / 1_000_000_000 > s.0
    }
}

fn check(cost: u64) -> Op {
    Op::Check { cost }
}

fn store(
    max_keys: usize,
    shards: usize,
    overflow: Overflow,
) -> (MemoryStore<String, (u64, u64), ManualClock>, ManualClock) {
    let clock = ManualClock::new(Nanos::from_secs(100));
    let store = MemoryStore::builder()
        .max_keys(max_keys)
        .shards(shards)
        .overflow(overflow)
        .clock(clock.clone())
        .build_typed()
        .unwrap();
    (store, clock)
}

#[test]
fn looks_up_by_borrowed_key_and_keeps_state_per_key() {
    let (s, _) = store(100, 4, Overflow::EvictLive);
    let alg = PerSecond(2);
    assert!(s.apply_now(&alg, "a", check(1)).unwrap().allowed);
    assert!(s.apply_now(&alg, "a", check(1)).unwrap().allowed);
    assert!(!s.apply_now(&alg, "a", check(1)).unwrap().allowed);
    assert!(s.apply_now(&alg, "b", check(2)).unwrap().allowed);
    assert_eq!(s.len(), 2);
    assert_eq!(s.state("a"), Some((100, 2)));
}

#[test]
fn probes_and_impossible_requests_do_not_store_keys() {
    let (s, _) = store(100, 4, Overflow::EvictLive);
    let alg = PerSecond(2);
    assert!(s.apply_now(&alg, "a", check(0)).unwrap().allowed);
    assert!(!s.apply_now(&alg, "b", check(3)).unwrap().allowed);
    assert!(s.is_empty());
}

#[test]
fn unsupported_operations_are_refused_before_any_change() {
    let (s, _) = store(100, 4, Overflow::EvictLive);
    let alg = PerSecond(2);
    let err = s.apply_now(&alg, "a", Op::Reserve { cost: 1 }).unwrap_err();
    assert!(matches!(
        err,
        StoreError::Unsupported {
            algorithm: "per_second",
            op: OpKind::Reserve
        }
    ));
    assert!(!err.is_transient());
    assert!(s.is_empty());
}

#[test]
fn idle_eviction_is_lossless_and_counted() {
    // One shard of 4 places: the fifth key forces a sweep.
    let (s, clock) = store(4, 1, Overflow::RefuseNew);
    let alg = PerSecond(1);
    for k in ["a", "b", "c", "d"] {
        assert!(s.apply_now(&alg, k, check(1)).unwrap().allowed);
    }
    // Still the same second: all four are live, so a fifth key is refused.
    assert!(!s.apply_now(&alg, "e", check(1)).unwrap().allowed);
    assert_eq!(s.stats().refused_new, 1);
    // A second later all four are fresh again and the next sweep drops them.
    clock.advance(Duration::from_secs(1));
    assert!(s.apply_now(&alg, "e", check(1)).unwrap().allowed);
    let stats = s.stats();
    assert_eq!(stats.keys, 1);
    assert_eq!(stats.evicted_idle, 4);
    assert!(!s.apply_now(&alg, "e", check(1)).unwrap().allowed);
}

#[test]
fn live_overflow_evicts_one_key_and_keeps_memory_bounded() {
    let (s, _) = store(8, 1, Overflow::EvictLive);
    let alg = PerSecond(1);
    for i in 0..100 {
        assert!(
            s.apply_now(&alg, &format!("k{i}"), check(1))
                .unwrap()
                .allowed
        );
        assert!(s.len() <= 8);
    }
    let stats = s.stats();
    assert_eq!(stats.keys, 8);
    assert_eq!(stats.evicted_live, 92);
}

#[test]
fn eviction_on_and_off_give_identical_decisions() {
    // 64 keys, at most 16 live in any second; bounded store of 16 vs unbounded.
    let (small, c1) = store(16, 1, Overflow::RefuseNew);
    let (big, c2) = store(1 << 20, 1, Overflow::RefuseNew);
    let alg = PerSecond(3);
    let mut x: u64 = 7;
    for step in 0..5_000u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let second = step / 40;
        c1.set(Nanos::from_secs(100 + second));
        c2.set(Nanos::from_secs(100 + second));
        let key = format!("k{}", (second * 16 + (x >> 33) % 16) % 64);
        let cost = (x >> 20) % 3;
        assert_eq!(
            small.apply_now(&alg, key.as_str(), check(cost)).unwrap(),
            big.apply_now(&alg, key.as_str(), check(cost)).unwrap(),
            "step {step}"
        );
    }
    assert!(small.stats().evicted_idle > 0);
    assert_eq!(small.stats().refused_new, 0);
}

#[test]
fn threads_on_one_key_admit_exactly_the_bound() {
    let (s, _) = store(1000, 16, Overflow::EvictLive);
    let s = Arc::new(s);
    let alg = Arc::new(PerSecond(10_000));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (s, alg) = (s.clone(), alg.clone());
            std::thread::spawn(move || {
                (0..5_000)
                    .filter(|_| s.apply_now(&*alg, "hot", check(1)).unwrap().allowed)
                    .count()
            })
        })
        .collect();
    let admitted: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(admitted, 10_000);
}

#[test]
fn apply_many_checks_every_op_before_applying_any() {
    let (s, _) = store(100, 4, Overflow::EvictLive);
    let alg = PerSecond(5);
    let ok = KeyedOp {
        algorithm: &alg,
        key: "a",
        op: check(1),
    };
    let bad = KeyedOp {
        algorithm: &alg,
        key: "b",
        op: Op::SetRate { rate: 1.0 },
    };
    let poll = poll_ready(Store::apply_many(&s, &[ok, bad]));
    assert!(matches!(poll, Err(StoreError::Unsupported { .. })));
    assert!(s.is_empty());
    let got = poll_ready(Store::apply_many(&s, &[ok, ok])).unwrap();
    assert_eq!(got.iter().map(|d| d.remaining).collect::<Vec<_>>(), [4, 3]);
}

#[test]
fn invalid_settings_name_the_field() {
    let e = MemoryStore::builder()
        .max_keys(0)
        .build_typed::<u64, ()>()
        .unwrap_err();
    assert!(e.to_string().contains("max_keys"));
    let e = MemoryStore::builder()
        .shards(3)
        .build_typed::<u64, ()>()
        .unwrap_err();
    assert!(e.to_string().contains("shards"));
}

/// Polls a future that must be ready at once (the memory store's are).
fn poll_ready<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("memory store future was not ready"),
    }
}
