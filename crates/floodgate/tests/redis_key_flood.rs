//! A flood of distinct keys on Redis (a `redis-server` of the test's own, never the machine's)
//! leaves nothing behind: every key written carries a TTL, at most the longest window, that
//! runs out when its state is a fresh key's again, so once that window has passed Redis holds
//! no key. Time is Redis's own (`TIME`), as in production; the test reads every key's `PTTL`
//! rather than waiting for the expiry.
//!
//! Not covered: `smooth_bursty` keys with `starts: empty` (Guava's exact start) that store
//! permits, which never become fresh (a new key starts empty, an idle one full) and are kept
//! without a TTL; the default (`starts: full`) is in the flood.
#![cfg(feature = "redis")]

mod redis_common;

use std::time::Duration;

use floodgate::algorithm::concurrency::Fleet;
use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::gcra::Gcra;
use floodgate::algorithm::leaky_bucket::LeakyBucket;
use floodgate::algorithm::sliding_log::SlidingLog;
use floodgate::algorithm::sliding_window::SlidingWindow;
use floodgate::algorithm::smooth::{SmoothBursty, SmoothWarmingUp};
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::algorithm::Algorithm;
use floodgate::store::{KeyedOp, RedisStore, Store};
use floodgate::{LeaseId, Op};
use floodgate_harness::RedisServer;
use redis_common::{raw, runtime};

/// Distinct keys per algorithm.
const KEYS: usize = 2_000;

/// The longest time until a flooded key is fresh, in ms: the GCRA's (3 + 1 requests at 10 per
/// second).
const LONGEST_MS: i64 = 1_000;

#[test]
fn a_flood_of_distinct_keys_expires_entirely_after_the_longest_window() {
    let server = RedisServer::start();
    let rt = runtime();
    rt.block_on(async {
        let store = RedisStore::builder(server.url())
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let window = Duration::from_millis(400);
        let algorithms: Vec<(AnyAlgorithm, Op)> = vec![
            (
                TokenBucket::new(10.0, 4).unwrap().into(),
                Op::Check { cost: 1 },
            ),
            (
                LeakyBucket::new(10.0, 4).unwrap().into(),
                Op::Check { cost: 1 },
            ),
            (
                FixedWindow::new(4, window).unwrap().into(),
                Op::Check { cost: 1 },
            ),
            (
                SlidingLog::new(4, window).unwrap().into(),
                Op::Check { cost: 1 },
            ),
            (
                SlidingWindow::new(4, window, None).unwrap().into(),
                Op::Check { cost: 1 },
            ),
            (
                Gcra::new(3, 10, Duration::from_secs(1)).unwrap().into(),
                Op::Check { cost: 1 },
            ),
            (
                SmoothWarmingUp::new(20.0, window, 3.0).unwrap().into(),
                Op::Check { cost: 1 },
            ),
            (
                SmoothBursty::new(20.0, 0.4).unwrap().into(),
                Op::Check { cost: 1 },
            ),
            (
                Fleet::new(100, 0.1, window).unwrap().into(),
                Op::Acquire {
                    lease: LeaseId(7),
                    critical: false,
                },
            ),
        ];
        for (i, (algorithm, op)) in algorithms.iter().enumerate() {
            let keys: Vec<String> = (0..KEYS).map(|k| format!("flood:{i}:{k}")).collect();
            for chunk in keys.chunks(500) {
                let requests: Vec<KeyedOp<'_, str, AnyAlgorithm>> = chunk
                    .iter()
                    .map(|key| KeyedOp {
                        algorithm,
                        key: key.as_str(),
                        op: *op,
                    })
                    .collect();
                let decisions = store.apply_many(&requests).await.unwrap();
                assert!(decisions.iter().all(|d| d.allowed), "{}", algorithm.name());
            }
        }
        let mut raw = raw(&server).await;
        let mut cursor: u64 = 0;
        let mut seen = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut raw)
                .await
                .unwrap();
            for key in keys {
                let pttl: i64 = redis::cmd("PTTL")
                    .arg(&key)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                // -2: expired meanwhile; -1 would be a key kept for good.
                assert!(
                    pttl == -2 || (0..=LONGEST_MS).contains(&pttl),
                    "{key}: PTTL {pttl}"
                );
                seen += 1;
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        assert!(seen > 0, "the flood wrote keys");
    });
}
