//! Bytes per key in Redis, measured on a `redis-server` the test starts on a free loopback
//! port (never 6379). Ignored by default: it measures, it checks nothing.
#![cfg(feature = "redis")]

use std::time::Duration;

use floodgate::algorithm::concurrency::{Concurrency, Fleet};
use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::gcra::Gcra;
use floodgate::algorithm::leaky_bucket::LeakyBucket;
use floodgate::algorithm::leaky_queue::LeakyQueue;
use floodgate::algorithm::sliding_log::SlidingLog;
use floodgate::algorithm::sliding_window::SlidingWindow;
use floodgate::algorithm::smooth::{SmoothBursty, SmoothWarmingUp};
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::store::{RedisStore, Store};
use floodgate::{LeaseId, ManualClock, Nanos, Op};
use floodgate_harness::RedisServer;

mod redis_common;
use redis_common::{check, raw, runtime, START};

/// Bytes per key in Redis (`MEMORY USAGE key SAMPLES 0`), for each algorithm's typical key and
/// state, as a Markdown table for BENCHMARKS.md. Ignored by default (it measures, it checks
/// nothing); run with
/// `cargo test -p floodgate-core --features redis --test redis_bytes_per_key -- --ignored --nocapture`.
#[test]
#[ignore]
fn bytes_per_key() {
    let server = RedisServer::start();
    let rt = runtime();
    rt.block_on(async {
        let clock = ManualClock::new(Nanos(START + 123_456_789));
        // Kept an hour at least: the test's clock is in the past of Redis's own, which the
        // TTLs run on.
        let store = RedisStore::builder(server.url())
            .clock(clock.clone())
            .timeout(Duration::from_secs(2))
            .min_ttl(Duration::from_secs(3600))
            .build()
            .unwrap();
        let mut raw = raw(&server).await;
        let minute = Duration::from_secs(60);
        let lease = |i: u64| Op::Acquire {
            lease: LeaseId(u128::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)),
            critical: false,
        };
        /// Name, parameters, state, the algorithm, its operations, the step between them.
        type Case = (
            &'static str,
            &'static str,
            &'static str,
            AnyAlgorithm,
            Vec<Op>,
            Duration,
        );
        let cases: Vec<Case> = vec![
            (
                "gcra",
                "burst 10, 100/min",
                "after 1 request",
                Gcra::new(10, 100, minute).unwrap().into(),
                vec![check(1)],
                Duration::ZERO,
            ),
            (
                "fixed_window",
                "100 per 1 min",
                "after 1 request",
                FixedWindow::new(100, minute).unwrap().into(),
                vec![check(1)],
                Duration::ZERO,
            ),
            (
                "token_bucket",
                "10/s, capacity 100",
                "after 1 request",
                TokenBucket::new(10.0, 100).unwrap().into(),
                vec![check(1)],
                Duration::ZERO,
            ),
            (
                "leaky_bucket",
                "10/s, capacity 100",
                "after 1 request",
                LeakyBucket::new(10.0, 100).unwrap().into(),
                vec![check(1)],
                Duration::ZERO,
            ),
            (
                "leaky_queue",
                "10/s, queue 20",
                "after 3 requests",
                LeakyQueue::new(10.0, 20).unwrap().into(),
                vec![check(1); 3],
                Duration::from_millis(10),
            ),
            (
                "sliding_log",
                "100 per 1 min",
                "after 1 request",
                SlidingLog::new(100, minute).unwrap().into(),
                vec![check(1)],
                Duration::ZERO,
            ),
            (
                "sliding_log",
                "100 per 1 min",
                "full: 100 requests, 0.5 s apart",
                SlidingLog::new(100, minute).unwrap().into(),
                vec![check(1); 100],
                Duration::from_millis(500),
            ),
            (
                "sliding_window",
                "100 per 1 min, weighted",
                "after 1 request",
                SlidingWindow::new(100, minute, None).unwrap().into(),
                vec![check(1)],
                Duration::ZERO,
            ),
            (
                "sliding_window",
                "100 per 1 min, 60 buckets",
                "after 1 request",
                SlidingWindow::new(100, minute, Some(60)).unwrap().into(),
                vec![check(1)],
                Duration::ZERO,
            ),
            (
                "sliding_window",
                "100 per 1 min, 60 buckets",
                "61 buckets in use: 61 requests, 1 s apart",
                SlidingWindow::new(100, minute, Some(60)).unwrap().into(),
                vec![check(1); 61],
                Duration::from_secs(1),
            ),
            (
                "smooth_bursty",
                "10/s, 1 s burst",
                "after 1 reservation",
                SmoothBursty::new(10.0, 1.0).unwrap().into(),
                vec![Op::Reserve { cost: 1 }],
                Duration::ZERO,
            ),
            (
                "smooth_warming_up",
                "10/s, 10 s warmup",
                "after 1 reservation",
                SmoothWarmingUp::new(10.0, Duration::from_secs(10), 3.0)
                    .unwrap()
                    .into(),
                vec![Op::Reserve { cost: 1 }],
                Duration::ZERO,
            ),
            (
                "smooth_warming_up",
                "10/s, 10 s warmup",
                "after set_rate(7.5)",
                SmoothWarmingUp::new(10.0, Duration::from_secs(10), 3.0)
                    .unwrap()
                    .into(),
                vec![Op::Reserve { cost: 1 }, Op::SetRate { rate: 7.5 }],
                Duration::ZERO,
            ),
            (
                "concurrency",
                "100 leases, 30 s",
                "1 lease held",
                Concurrency::new(100, Duration::from_secs(30))
                    .unwrap()
                    .into(),
                vec![lease(1)],
                Duration::ZERO,
            ),
            (
                "concurrency",
                "100 leases, 30 s",
                "10 leases held",
                Concurrency::new(100, Duration::from_secs(30))
                    .unwrap()
                    .into(),
                (1..=10).map(lease).collect(),
                Duration::from_millis(1),
            ),
            (
                "fleet",
                "100, 20 % reserved, 30 s",
                "1 lease held",
                Fleet::new(100, 0.2, Duration::from_secs(30))
                    .unwrap()
                    .into(),
                vec![lease(1)],
                Duration::ZERO,
            ),
        ];
        let key = "rate:user-123456";
        // Where the store keeps it: `rate:{user-123456}`.
        let stored = floodgate::store::redis::redis_key(key);
        println!("| algorithm | parameters | state | Redis type | bytes (`MEMORY USAGE`) |");
        println!("|---|---|---|---|---|");
        for (name, params, state, algorithm, ops, step) in cases {
            let _: () = redis::cmd("DEL")
                .arg(&stored)
                .query_async(&mut raw)
                .await
                .unwrap();
            for op in ops {
                let d = store.apply(&algorithm, key, op).await.unwrap();
                assert!(d.allowed, "{name}: {d:?}");
                clock.advance(step);
            }
            let kind: String = redis::cmd("TYPE")
                .arg(&stored)
                .query_async(&mut raw)
                .await
                .unwrap();
            let bytes: i64 = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(&stored)
                .arg("SAMPLES")
                .arg(0)
                .query_async(&mut raw)
                .await
                .unwrap();
            println!("| {name} | {params} | {state} | {kind} | {bytes} |");
        }
    });
}
