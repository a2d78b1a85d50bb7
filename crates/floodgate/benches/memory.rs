//! Bytes per key at 1m keys: Floodgate's memory store against `governor`'s keyed state, both
//! holding GCRA state, measured with a counting allocator (bytes requested from the allocator,
//! including each String key's own buffer; allocator headers and rounding not included).
//!
//! Run with `cargo bench -p floodgate-core --bench memory`. Prints a table; it is not a criterion
//! benchmark because memory, unlike time, is exact.

use floodgate::store::LocalStore;
use std::alloc::{GlobalAlloc, Layout, System};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use floodgate::algorithm::gcra::{Gcra, GcraState};
use floodgate::store::{Key, MemoryStore, WordStore};
use floodgate::Op;
use governor::{Quota, RateLimiter};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const N: usize = 1_000_000;

/// Bytes allocated by `build` and still live, per key, with the keys themselves made beforehand
/// and counted only for what the structure keeps of them.
fn per_key<T>(build: impl FnOnce() -> T) -> f64 {
    let before = LIVE.load(Ordering::Relaxed);
    let held = build();
    let after = LIVE.load(Ordering::Relaxed);
    drop(held);
    (after - before) as f64 / N as f64
}

fn main() {
    // Let the shared coarse clock start before counting.
    let _ = floodgate::CoarseClock::shared();
    let gcra = Gcra::new(9, 10, Duration::from_secs(1)).expect("valid quota");
    let quota = Quota::per_second(NonZeroU32::new(10).expect("non-zero"))
        .allow_burst(NonZeroU32::new(10).expect("non-zero"));
    let check = Op::Check { cost: 1 };

    let floodgate_u64 = per_key(|| {
        let store: MemoryStore<u64, GcraState> = MemoryStore::builder()
            .max_keys(4 * N)
            .build_typed()
            .expect("valid store");
        for k in 0..N as u64 {
            let _ = store.apply_now(&gcra, &k, check);
        }
        store
    });
    let word_u64 = per_key(|| {
        let store: WordStore<u64, GcraState> = MemoryStore::builder()
            .max_keys(4 * N)
            .build_word()
            .expect("valid store");
        for k in 0..N as u64 {
            let _ = store.apply_now(&gcra, &k, check);
        }
        store
    });
    let governor_u64 = per_key(|| {
        let limiter: governor::DefaultKeyedRateLimiter<u64> = RateLimiter::keyed(quota);
        for k in 0..N as u64 {
            let _ = limiter.check_key(&k);
        }
        limiter
    });
    let names: Vec<String> = (0..N).map(|i| format!("user-{i:06}")).collect();
    // Floodgate keeps string keys as `Key`s (short ones inline), looked up with `&str`.
    let floodgate_string = per_key(|| {
        let store: MemoryStore<Key, GcraState> = MemoryStore::builder()
            .max_keys(4 * N)
            .build_typed()
            .expect("valid store");
        for k in &names {
            let _ = store.apply_now(&gcra, k.as_str(), check);
        }
        store
    });
    let word_string = per_key(|| {
        let store: WordStore<Key, GcraState> = MemoryStore::builder()
            .max_keys(4 * N)
            .build_word()
            .expect("valid store");
        for k in &names {
            let _ = store.apply_now(&gcra, k.as_str(), check);
        }
        store
    });
    let governor_string = per_key(|| {
        let limiter: governor::DefaultKeyedRateLimiter<String> = RateLimiter::keyed(quota);
        for k in &names {
            let _ = limiter.check_key(k);
        }
        limiter
    });
    let state = std::mem::size_of::<GcraState>() as f64;
    println!("bytes per key at 1m keys (GCRA state: {state} bytes; u64 key: 8 bytes; string key: 11 bytes, in a 24-byte Key or a 24-byte String and its buffer)");
    println!("| keys | floodgate (memory store) | floodgate (word store) | governor | memory store overhead (beyond key + state) |");
    println!("|---|---|---|---|---|");
    println!(
        "| u64 | {floodgate_u64:.1} | {word_u64:.1} | {governor_u64:.1} | {:.1} |",
        floodgate_u64 - 8.0 - state
    );
    println!(
        "| string | {floodgate_string:.1} | {word_string:.1} | {governor_string:.1} | {:.1} |",
        floodgate_string - 11.0 - state
    );
}
