//! The three ways to hold a usage budget (a cost known only when a request ends), and the
//! overshoot bound of each, proven against a model: random concurrent requests with random
//! costs, in any interleaving, against a fixed window and a token bucket, on the memory store,
//! on a real Redis and on a Redis Cluster (of the test's own). At every step the store's answer
//! is the model's, and the budget is overshot by no more than the way's bound:
//!
//! - **reserve the maximum, refund the rest** ([`Op::Check`] of the maximum, [`Op::Refund`]
//!   of what was not used): never;
//! - **check, then charge** (Envoy's and AI Gateway's: [`Op::Check`] of 0, then
//!   [`Op::Charge`] of the cost): at most the costs of the requests in flight at the last
//!   admission;
//! - **reserve an estimate, then settle** ([`Op::Check`] of the estimate, then
//!   [`Op::Charge`] or [`Op::Refund`] of the difference): at most the sum, over the requests
//!   in flight at the last admission, of what each used beyond its estimate.

#![cfg(feature = "redis")]

use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::store::{MemoryStore, Store};
use floodgate::{ManualClock, Nanos, Op};
use floodgate_harness::{RedisCluster, RedisServer};
use proptest::prelude::*;

mod redis_common;
use redis_common::{runtime, store_on_clock, START};

/// The budget: tokens in one window (a year), or a bucket's capacity; the clock stands still.
const BUDGET: u64 = 1_000;

/// One request: the most it may cost, an estimate (at most that), and what it turns out to
/// cost (at most the most).
#[derive(Clone, Copy, Debug)]
struct Request {
    max: u64,
    estimate: u64,
    actual: u64,
}

fn request() -> impl Strategy<Value = Request> {
    (1u64..=400)
        .prop_flat_map(|max| (Just(max), 1..=max, 0..=max))
        .prop_map(|(max, estimate, actual)| Request {
            max,
            estimate,
            actual,
        })
}

/// How a request holds the budget.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Way {
    /// Reserve the maximum when it starts, refund what it did not use when it ends.
    ReserveMaximum,
    /// Check (cost 0) when it starts, charge what it used when it ends.
    CheckThenCharge,
    /// Reserve the estimate when it starts; charge or refund the difference when it ends.
    EstimateThenSettle,
}

const WAYS: [Way; 3] = [
    Way::ReserveMaximum,
    Way::CheckThenCharge,
    Way::EstimateThenSettle,
];

impl Way {
    /// What the request asks for when it starts.
    fn reserved(self, r: Request) -> u64 {
        match self {
            Way::ReserveMaximum => r.max,
            Way::CheckThenCharge => 0,
            Way::EstimateThenSettle => r.estimate,
        }
    }

    /// What its end sends, from what it reserved and what it used.
    fn settle(self, r: Request) -> Op {
        let reserved = self.reserved(r);
        if r.actual > reserved {
            Op::Charge {
                cost: r.actual - reserved,
            }
        } else {
            Op::Refund {
                cost: reserved - r.actual,
            }
        }
    }

    /// What it may count beyond its reservation: the overshoot it may cause.
    fn beyond(self, r: Request) -> u64 {
        r.actual.saturating_sub(self.reserved(r))
    }
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

/// Runs the schedule on `store` under `algorithm`, each request holding the budget `way`,
/// checking the model and the way's bound after every event.
async fn run<S: Store<str, AnyAlgorithm>>(
    store: &S,
    algorithm: &AnyAlgorithm,
    key: &str,
    way: Way,
    requests: &[Request],
    events: &[(usize, bool)],
) -> Result<(), TestCaseError> {
    let mut admitted = vec![false; requests.len()];
    let mut running = vec![false; requests.len()];
    // What the store counts: reservations of running requests, and what ended ones used.
    let mut count = 0u64;
    // The bound at the last admission: what the requests then running may add beyond their
    // reservations. Only they can add to the count from then on.
    let mut bound = 0u64;
    for &(i, start) in events {
        let r = requests[i];
        if start {
            let cost = way.reserved(r);
            let d = store
                .apply(algorithm, key, Op::Check { cost })
                .await
                .unwrap();
            prop_assert_eq!(d.allowed, count + cost <= BUDGET, "{:?}", way);
            if d.allowed {
                admitted[i] = true;
                running[i] = true;
                count += cost;
                bound = (0..requests.len())
                    .filter(|&j| running[j])
                    .map(|j| way.beyond(requests[j]))
                    .sum();
            }
        } else if admitted[i] {
            let op = way.settle(r);
            let d = store.apply(algorithm, key, op).await.unwrap();
            running[i] = false;
            match op {
                Op::Refund { cost } => {
                    prop_assert!(d.allowed, "a refund is never refused");
                    count -= cost;
                }
                Op::Charge { cost } => {
                    count += cost;
                    prop_assert_eq!(d.allowed, count <= BUDGET, "{:?}", way);
                }
                _ => unreachable!(),
            }
        }
        let probe = store
            .apply(algorithm, key, Op::Check { cost: 0 })
            .await
            .unwrap();
        prop_assert_eq!(probe.remaining, BUDGET.saturating_sub(count), "{:?}", way);
        prop_assert_eq!(probe.allowed, count <= BUDGET, "{:?}", way);
        prop_assert!(
            count <= BUDGET + bound,
            "{:?}: {} counted, over {} by more than {}",
            way,
            count,
            BUDGET,
            bound
        );
        if way == Way::ReserveMaximum {
            prop_assert_eq!(bound, 0);
        }
    }
    Ok(())
}

#[test]
fn each_way_keeps_within_its_bound_in_memory_on_redis_and_on_a_cluster() {
    let server = RedisServer::start();
    let cluster = RedisCluster::start(3, 0);
    let rt = runtime();
    let clock = ManualClock::new(Nanos(START));
    let redis = store_on_clock(&rt, &server.url(), &clock);
    let clustered = store_on_clock(&rt, &cluster.url(), &clock);
    let memory = MemoryStore::builder().clock(clock.clone()).build().unwrap();
    let case = std::sync::atomic::AtomicU64::new(0);
    let config = ProptestConfig::with_cases(64);
    proptest!(config, |((requests, events) in schedule())| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        for (a, algorithm) in algorithms().iter().enumerate() {
            for (w, way) in WAYS.into_iter().enumerate() {
                let key = format!("budget:{n}:{a}:{w}");
                rt.block_on(run(&memory, algorithm, &key, way, &requests, &events))?;
                rt.block_on(run(&redis, algorithm, &key, way, &requests, &events))?;
                rt.block_on(run(&clustered, algorithm, &key, way, &requests, &events))?;
            }
        }
    });
}
