//! The Lua twins against the Rust algorithms: random operation sequences on the memory store
//! and on a real `redis-server` (started by the tests on a free loopback port, never 6379)
//! give identical decisions.
#![cfg(feature = "redis")]

use std::time::Duration;

use floodgate::algorithm::sliding_window::SlidingWindow;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::store::{MemoryStore, Store};
use floodgate::{ManualClock, Nanos};
use floodgate_harness::RedisServer;

mod conformance;
mod redis_common;
use redis_common::{check, raw, runtime, store_on_clock, START};

/// For the same whole-microsecond instants and operations, the Lua twin on Redis and the Rust
/// algorithm on the memory store give identical decisions. Instants go back only for the
/// algorithms whose Lua twin keeps the latest instant seen, and never before the instant at
/// which Redis last dropped the key as fresh (the documented difference: a dropped key's last
/// instant is forgotten). Each algorithm gets the operations it supports; the others are sent
/// as checks of their cost.
#[test]
fn lua_twins_agree_with_the_memory_store() {
    let server = RedisServer::start();
    let rt = runtime();
    let raw = rt.block_on(raw(&server));
    conformance::lua_twins_agree_with_the_memory_store(&rt, &server.url(), raw);
}

/// The suite every store runs (`conformance::store_agrees_with_the_memory_store`): what the
/// store runs, it decides as the memory store; what it does not, it refuses.
#[test]
fn the_store_conformance_suite_passes() {
    let server = RedisServer::start();
    let rt = runtime();
    let clock = ManualClock::new(Nanos(START));
    let store = store_on_clock(&rt, &server.url(), &clock);
    conformance::store_agrees_with_the_memory_store(&rt, &clock, &store);
}

/// The claims on a shared limit (the Rate Limit Quota Service's shares): the Lua twin answers
/// as `floodgate::quota::Claims::apply` does.
#[test]
fn quota_claims_agree_with_their_rust_model() {
    let server = RedisServer::start();
    let rt = runtime();
    conformance::quota_claims_agree_with_their_rust_model(&rt, &server.url());
}

/// Envoy's month and year windows, and others beyond 2⁵⁰ ns, on Redis as in memory.
#[test]
fn long_fixed_windows_agree_at_their_boundaries() {
    let server = RedisServer::start();
    let rt = runtime();
    conformance::long_fixed_windows_agree_at_their_boundaries(&rt, &server.url());
}

/// The two sliding-window modes (and two bucket counts) on one key are one algorithm: each
/// treats the other's state as fresh, on Redis as in memory.
#[test]
fn sliding_window_modes_share_a_key_as_in_memory() {
    let server = RedisServer::start();
    let rt = runtime();
    let clock = ManualClock::new(Nanos(START));
    let redis = store_on_clock(&rt, &server.url(), &clock);
    let memory = MemoryStore::builder().clock(clock.clone()).build().unwrap();
    let window = Duration::from_secs(10);
    let modes: [AnyAlgorithm; 3] = [
        SlidingWindow::new(4, window, None).unwrap().into(),
        SlidingWindow::new(4, window, Some(5)).unwrap().into(),
        SlidingWindow::new(4, window, Some(3)).unwrap().into(),
    ];
    for (i, cost) in [3u64, 0, 2, 5, 1, 0, 4, 2, 0, 1].into_iter().enumerate() {
        let algorithm = &modes[i % 3];
        clock.advance(Duration::from_millis(700));
        let expected = rt.block_on(memory.apply(algorithm, "modes", check(cost)));
        let got = rt.block_on(redis.apply(algorithm, "modes", check(cost)));
        assert_eq!(got.unwrap(), expected.unwrap(), "step {i}");
    }
}

/// Refunds on Redis as in memory: a fixed window's and a token bucket's count lowered, never
/// below empty, a refund never refused; the sliding log, which takes none, is refused with
/// `Unsupported` naming it, and its key is left as it was.
#[test]
fn refunds_run_on_redis_and_the_sliding_log_refuses_them_by_name() {
    use floodgate::algorithm::fixed_window::FixedWindow;
    use floodgate::algorithm::sliding_log::SlidingLog;
    use floodgate::algorithm::token_bucket::TokenBucket;
    use floodgate::{Op, OpKind, StoreError};
    let server = RedisServer::start();
    let rt = runtime();
    let clock = ManualClock::new(Nanos(START));
    let store = store_on_clock(&rt, &server.url(), &clock);
    let window: AnyAlgorithm = FixedWindow::new(5, Duration::from_secs(60)).unwrap().into();
    let bucket: AnyAlgorithm = TokenBucket::new(0.001, 5).unwrap().into();
    rt.block_on(async {
        for (algorithm, key) in [(&window, "tokens"), (&bucket, "bucket")] {
            assert!(store.apply(algorithm, key, check(5)).await.unwrap().allowed);
            assert!(!store.apply(algorithm, key, check(1)).await.unwrap().allowed);
            let refund = store
                .apply(algorithm, key, Op::Refund { cost: 3 })
                .await
                .unwrap();
            assert!(refund.allowed);
            assert_eq!(refund.remaining, 3);
            let past_empty = store
                .apply(algorithm, key, Op::Refund { cost: 99 })
                .await
                .unwrap();
            assert_eq!(past_empty.remaining, 5);
            assert!(store.apply(algorithm, key, check(5)).await.unwrap().allowed);
        }

        let log: AnyAlgorithm = SlidingLog::new(5, Duration::from_secs(60)).unwrap().into();
        assert!(store.apply(&log, "log", check(5)).await.unwrap().allowed);
        let refused = store.apply(&log, "log", Op::Refund { cost: 2 }).await;
        assert!(
            matches!(
                refused,
                Err(StoreError::Unsupported {
                    algorithm: "sliding_log",
                    op: OpKind::Refund
                })
            ),
            "{refused:?}"
        );
        assert_eq!(
            store.apply(&log, "log", check(0)).await.unwrap().remaining,
            0
        );
    });
}
