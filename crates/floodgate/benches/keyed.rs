//! The keyed check, Floodgate against `governor`, on identical workloads.
//!
//! Both run GCRA with the same quota: `allowed` is 1e9 per second (every check passes),
//! `denied` is 1 per second with no burst (every check after the first is refused). Keys are
//! `u64` or short strings (`"user-123456"`); 1, 1k or 1m of them, visited in a fixed random
//! order; 1 or 2 threads (with 2 threads each takes half of the keys; with one key both hit
//! it). Ids differ only in their last part: `…/floodgate` (the memory store),
//! `…/floodgate-word` (the word store) and `…/governor`.
//!
//! `states/…` runs the word store's 16-byte states, the fixed window and the token bucket, on
//! `u64` keys against the memory store holding the same state (governor has neither):
//! `allowed` never refuses, `denied` refuses every check after the first.
//!
//! Floodgate runs with its defaults: its stores on the shared coarse clock, keeping string keys
//! as its [`Key`] (short ones inline) and looking them up with the same `&str` borrowed from the
//! `String` keys that governor gets. `clock/*` measures the clock choices themselves.

// Benchmarks time themselves with the OS clock; the rule against it is for library code.
#![allow(clippy::disallowed_methods)]

use floodgate::store::LocalStore;
use std::hash::Hash;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion};
use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::gcra::Gcra;
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::algorithm::Algorithm;
use floodgate::store::{Key, MemoryStore, OwnedKey, WordState, WordStore};
use floodgate::{Clock, CoarseClock, Op, SystemClock};
use governor::{Quota, RateLimiter};

type Governor<K> = governor::DefaultKeyedRateLimiter<K>;

#[derive(Clone, Copy)]
enum Workload {
    Allowed,
    Denied,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Allowed => "allowed",
            Workload::Denied => "denied",
        }
    }

    fn gcra(self) -> Gcra {
        let made = match self {
            Workload::Allowed => Gcra::new(999_999_999, 1_000_000_000, Duration::from_secs(1)),
            Workload::Denied => Gcra::new(0, 1, Duration::from_secs(1)),
        };
        made.expect("valid quota")
    }

    fn quota(self) -> Quota {
        match self {
            Workload::Allowed => Quota::per_second(NonZeroU32::new(1_000_000_000).unwrap()),
            Workload::Denied => Quota::per_second(NonZeroU32::new(1).unwrap()),
        }
    }
}

/// A fixed pseudo-random visiting order over `n` keys (xorshift, so runs are repeatable). Its
/// length is a power of two, so that the benchmark loop indexes it with a mask, not a division.
fn order(n: usize) -> Vec<u32> {
    let len = n.next_power_of_two().clamp(1 << 16, 1 << 20);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as u32
        })
        .collect()
}

const KEY_COUNTS: [(usize, &str); 3] = [(1, "1"), (1_000, "1k"), (1_000_000, "1m")];

/// Runs `op(key_index)` `iters` times on `threads` threads, each over its own share of the
/// visiting order, and returns the wall time.
fn run_threads(iters: u64, threads: usize, order: &[u32], op: &(impl Fn(u32) + Sync)) -> Duration {
    if threads == 1 {
        let mask = order.len() - 1;
        let start = Instant::now();
        for i in 0..iters as usize {
            op(order[i & mask]);
        }
        return start.elapsed();
    }
    let barrier = Barrier::new(threads + 1);
    let per_thread = iters as usize / threads;
    let mask = order.len() - 1;
    std::thread::scope(|s| {
        for t in 0..threads {
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                for i in 0..per_thread {
                    let k = order[i & mask];
                    // Distinct keys per thread: thread t takes the keys ≡ t (mod threads);
                    // with one key (clamped by `op`) all threads share it.
                    op(k - k % threads as u32 + t as u32);
                }
            });
        }
        barrier.wait();
        let start = Instant::now();
        // Leaving the scope joins the threads.
        start
    })
    .elapsed()
}

/// Benchmarks `check` (one decision on the key of index `k`) as `id`, on `threads` threads
/// over `order`, after one check of each of the `n` keys so that every key is held.
fn bench_checks(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: BenchmarkId,
    n: usize,
    threads: usize,
    order: &[u32],
    check: impl Fn(u32) + Sync,
) {
    for k in 0..n as u32 {
        check(k);
    }
    group.bench_function(id, |b| {
        b.iter_custom(|iters| run_threads(iters, threads, order, &check))
    });
}

/// `K` is the callers' key (what governor keeps), `Q` its borrowed form, `Stored` what
/// Floodgate's store keeps for it.
fn bench_keyed<K, Q, Stored>(
    c: &mut Criterion,
    key_kind: &str,
    make_key: fn(u32) -> K,
    borrow: fn(&K) -> &Q,
) where
    K: Hash + Eq + Clone + Send + Sync + std::borrow::Borrow<Q> + 'static,
    Q: Hash + Eq + ?Sized + Sync,
    Stored: OwnedKey<Q> + Hash + Eq + Clone + Send + Sync,
{
    for workload in [Workload::Allowed, Workload::Denied] {
        for threads in [1usize, 2] {
            let mut group = c.benchmark_group(format!(
                "keyed/{key_kind}/{}/{threads}-thread",
                workload.name()
            ));
            group.warm_up_time(Duration::from_millis(500));
            group.measurement_time(Duration::from_secs(2));
            group.sample_size(30);
            for (n, label) in KEY_COUNTS {
                let keys: Vec<K> = (0..n as u32).map(make_key).collect();
                let order = &order(n);

                let gcra = workload.gcra();
                let key = |k: u32| borrow(&keys[(k as usize).min(n - 1)]);
                let store: MemoryStore<Stored, <Gcra as Algorithm>::State> = MemoryStore::builder()
                    .max_keys(4_000_000)
                    .build_typed()
                    .expect("valid store");
                let id = BenchmarkId::new(label, "floodgate");
                bench_checks(&mut group, id, n, threads, order, |k| {
                    black_box(
                        store
                            .apply_now(&gcra, key(k), Op::Check { cost: 1 })
                            .is_ok(),
                    );
                });
                drop(store);

                let store: WordStore<Stored, <Gcra as Algorithm>::State> = MemoryStore::builder()
                    .max_keys(4_000_000)
                    .build_word()
                    .expect("valid store");
                let id = BenchmarkId::new(label, "floodgate-word");
                bench_checks(&mut group, id, n, threads, order, |k| {
                    black_box(
                        store
                            .apply_now(&gcra, key(k), Op::Check { cost: 1 })
                            .is_ok(),
                    );
                });
                drop(store);

                let governor: Governor<K> = RateLimiter::keyed(workload.quota());
                let id = BenchmarkId::new(label, "governor");
                bench_checks(&mut group, id, n, threads, order, |k| {
                    black_box(governor.check_key(&keys[(k as usize).min(n - 1)]).is_ok());
                });
            }
            group.finish();
        }
    }
}

fn keyed_u64(c: &mut Criterion) {
    bench_keyed::<u64, u64, u64>(c, "u64", |i| i as u64, |k| k);
}

fn keyed_string(c: &mut Criterion) {
    bench_keyed::<String, str, Key>(c, "string", |i| format!("user-{i:06}"), |k| k.as_str());
}

/// One 16-byte state, on the memory store and on the word store, `u64` keys.
fn bench_state<A>(c: &mut Criterion, name: &str, make: fn(Workload) -> A)
where
    A: Algorithm,
    A::State: WordState,
{
    for workload in [Workload::Allowed, Workload::Denied] {
        for threads in [1usize, 2] {
            let mut group = c.benchmark_group(format!(
                "states/{name}/{}/{threads}-thread",
                workload.name()
            ));
            group.warm_up_time(Duration::from_millis(500));
            group.measurement_time(Duration::from_secs(2));
            group.sample_size(30);
            let algorithm = make(workload);
            for (n, label) in &KEY_COUNTS[1..] {
                let n = *n;
                let order = &order(n);
                let key = |k: u32| u64::from(k).min(n as u64 - 1);
                let store: MemoryStore<u64, A::State> = MemoryStore::builder()
                    .max_keys(4_000_000)
                    .build_typed()
                    .expect("valid store");
                let id = BenchmarkId::new(*label, "floodgate");
                bench_checks(&mut group, id, n, threads, order, |k| {
                    let decision = store.apply_now(&algorithm, &key(k), Op::Check { cost: 1 });
                    black_box(decision.is_ok());
                });
                drop(store);

                let store: WordStore<u64, A::State> = MemoryStore::builder()
                    .max_keys(4_000_000)
                    .build_word()
                    .expect("valid store");
                let id = BenchmarkId::new(*label, "floodgate-word");
                bench_checks(&mut group, id, n, threads, order, |k| {
                    let decision = store.apply_now(&algorithm, &key(k), Op::Check { cost: 1 });
                    black_box(decision.is_ok());
                });
            }
            group.finish();
        }
    }
}

fn states(c: &mut Criterion) {
    bench_state(c, "fixed_window", |workload| {
        let limit = match workload {
            Workload::Allowed => u64::MAX / 2,
            Workload::Denied => 1,
        };
        FixedWindow::new(limit, Duration::from_secs(3600)).expect("valid window")
    });
    bench_state(c, "token_bucket", |workload| {
        let made = match workload {
            Workload::Allowed => TokenBucket::new(1e12, 1 << 40),
            Workload::Denied => TokenBucket::new(1e-6, 1),
        };
        made.expect("valid bucket")
    });
}

/// What one read of each clock choice costs.
fn clocks(c: &mut Criterion) {
    let mut group = c.benchmark_group("clock");
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    let system = SystemClock::new();
    group.bench_function("system_instant", |b| b.iter(|| black_box(system.now())));
    let coarse = CoarseClock::shared();
    group.bench_function("coarse_1ms", |b| b.iter(|| black_box(coarse.now())));
    let quanta = quanta::Clock::new();
    group.bench_function("quanta_raw", |b| b.iter(|| black_box(quanta.raw())));
    group.finish();
}

criterion_group!(benches, clocks, keyed_u64, keyed_string, states);
criterion_main!(benches);
