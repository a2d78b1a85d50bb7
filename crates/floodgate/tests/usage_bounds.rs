//! Usage-based budgets, reserved at their maximum and settled with a refund, never overshoot:
//! random concurrent requests, each reserving its maximum cost before it runs ([`Op::Check`])
//! and giving back what it did not use when it ends ([`Op::Refund`]), in any interleaving,
//! against a fixed window and a token bucket, on the memory store and on a real Redis (a
//! `redis-server` of the test's own). Checked against a model at every step: what the store
//! says is left is the budget minus what running requests hold and what ended ones used, and
//! what ended requests used never exceeds the budget.

#![cfg(feature = "redis")]

use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::store::{MemoryStore, Store};
use floodgate::{ManualClock, Nanos, Op};
use floodgate_redis_harness::RedisServer;
use proptest::prelude::*;

mod redis_common;
use redis_common::{runtime, store_on_clock, START};

/// The budget: tokens in one window (a year), or a bucket's capacity; the clock stands still.
const BUDGET: u64 = 1_000;

/// One request: the most it may cost, and what it turns out to cost (at most that).
#[derive(Clone, Copy, Debug)]
struct Request {
    max: u64,
    actual: u64,
}

fn request() -> impl Strategy<Value = Request> {
    (1u64..=400)
        .prop_flat_map(|max| (Just(max), 0..=max))
        .prop_map(|(max, actual)| Request { max, actual })
}

/// Requests and an interleaving: each request's start and end, in a random order in which
/// every start comes before its end.
fn schedule() -> impl Strategy<Value = (Vec<Request>, Vec<(usize, bool)>)> {
    prop::collection::vec(request(), 1..24).prop_flat_map(|requests| {
        let n = requests.len();
        (Just(requests), prop::collection::vec(any::<u8>(), 2 * n)).prop_map(move |(r, picks)| {
            // Pick the next event among the requests not started and those running.
            let mut started = vec![false; n];
            let mut ended = vec![false; n];
            let mut events = Vec::with_capacity(2 * n);
            for pick in picks {
                let open: Vec<(usize, bool)> = (0..n)
                    .filter_map(|i| match (started[i], ended[i]) {
                        (false, _) => Some((i, true)),
                        (true, false) => Some((i, false)),
                        _ => None,
                    })
                    .collect();
                let (i, start) = open[usize::from(pick) % open.len()];
                if start {
                    started[i] = true;
                } else {
                    ended[i] = true;
                }
                events.push((i, start));
            }
            (r, events)
        })
    })
}

fn algorithms() -> Vec<AnyAlgorithm> {
    vec![
        FixedWindow::new(BUDGET, Duration::from_secs(365 * 86_400))
            .unwrap()
            .into(),
        // A token every 864 s, full in 10 days (within the Lua twin's exact range); the clock
        // stands still, so nothing refills within a case.
        TokenBucket::new(1.0 / 864.0, BUDGET).unwrap().into(),
    ]
}

/// Runs the schedule on `store` under `algorithm`, checking the model after every event.
async fn run<S: Store<str, AnyAlgorithm>>(
    store: &S,
    algorithm: &AnyAlgorithm,
    key: &str,
    requests: &[Request],
    events: &[(usize, bool)],
) -> Result<(), TestCaseError> {
    let mut admitted = vec![false; requests.len()];
    let (mut held, mut used) = (0u64, 0u64);
    for &(i, start) in events {
        let r = requests[i];
        if start {
            let d = store
                .apply(algorithm, key, Op::Check { cost: r.max })
                .await
                .unwrap();
            prop_assert_eq!(d.allowed, used + held + r.max <= BUDGET);
            if d.allowed {
                admitted[i] = true;
                held += r.max;
            }
        } else if admitted[i] {
            let d = store
                .apply(
                    algorithm,
                    key,
                    Op::Refund {
                        cost: r.max - r.actual,
                    },
                )
                .await
                .unwrap();
            prop_assert!(d.allowed, "a refund is never refused");
            held -= r.max;
            used += r.actual;
        }
        let left = store
            .apply(algorithm, key, Op::Check { cost: 0 })
            .await
            .unwrap()
            .remaining;
        prop_assert_eq!(left, BUDGET - used - held);
        prop_assert!(used <= BUDGET, "no overshoot: {used} used of {BUDGET}");
    }
    Ok(())
}

#[test]
fn reserving_the_maximum_and_refunding_never_overshoots_in_memory_or_on_redis() {
    let server = RedisServer::start();
    let rt = runtime();
    let clock = ManualClock::new(Nanos(START));
    let redis = store_on_clock(&rt, &server.url(), &clock);
    let memory = MemoryStore::builder().clock(clock.clone()).build().unwrap();
    let case = std::sync::atomic::AtomicU64::new(0);
    let config = ProptestConfig::with_cases(64);
    proptest!(config, |((requests, events) in schedule())| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        for (a, algorithm) in algorithms().iter().enumerate() {
            let key = format!("budget:{n}:{a}");
            rt.block_on(run(&memory, algorithm, &key, &requests, &events))?;
            rt.block_on(run(&redis, algorithm, &key, &requests, &events))?;
        }
    });
}
