//! Chains (`Store::apply_chain`) and the pipeline built on them: the memory store, a real
//! `redis-server` started on a free port, and the trait's one-call-at-a-time default agree;
//! a denial ends a chain; all-or-nothing links are undone; a pipeline makes one Redis call.
#![cfg(feature = "redis")]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use floodgate::algorithm::concurrency::Concurrency;
use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::gcra::Gcra;
use floodgate::algorithm::leaky_queue::LeakyQueue;
use floodgate::algorithm::sliding_log::SlidingLog;
use floodgate::algorithm::sliding_window::SlidingWindow;
use floodgate::algorithm::smooth::SmoothBursty;
use floodgate::algorithm::spec::{AnyAlgorithm, AnyState};
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::limiter::concurrency::ConcurrencyLimiter;
use floodgate::limiter::fleet::FleetShedder;
use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
use floodgate::limiter::utilization::{SettableUtilization, UtilizationShedder};
use floodgate::limiter::Priority;
use floodgate::pipeline::{Pipeline, Request, Stage};
use floodgate::store::{self, Key, Link, Linked, MemoryStore, RedisStore, Store};
use floodgate::{Decision, LeaseId, ManualClock, Nanos, Op, StoreError};
use floodgate_harness::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use proptest::test_runner::{Config, TestRunner};

type Mem = MemoryStore<Key, AnyState, ManualClock>;

/// A memory store seen only through `apply`, so that chains take the trait's default path.
struct InTurn(Mem);

impl Store<str, AnyAlgorithm> for InTurn {
    fn apply(
        &self,
        algorithm: &AnyAlgorithm,
        key: &str,
        op: Op,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        self.0.apply(algorithm, key, op)
    }

    fn apply_many(
        &self,
        requests: &[store::KeyedOp<'_, str, AnyAlgorithm>],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        self.0.apply_many(requests)
    }
}

mod redis_common;
use redis_common::{raw, runtime, store_on_clock, store_on_clock_with, START};

fn algorithms() -> Vec<AnyAlgorithm> {
    vec![
        Gcra::new(2, 5, Duration::from_secs(1)).unwrap().into(),
        FixedWindow::new(4, Duration::from_secs(10)).unwrap().into(),
        TokenBucket::new(2.0, 4).unwrap().into(),
        Concurrency::new(2, Duration::from_secs(30)).unwrap().into(),
        SlidingLog::new(3, Duration::from_secs(2)).unwrap().into(),
        SlidingWindow::new(3, Duration::from_secs(2), None)
            .unwrap()
            .into(),
        SlidingWindow::new(3, Duration::from_secs(2), Some(4))
            .unwrap()
            .into(),
        LeakyQueue::new(2.0, 2).unwrap().into(),
        SmoothBursty::new(2.0, 1.0).unwrap().into(),
    ]
}

/// One link as generated: algorithm index, key index, cost (or lease id), refuses, stops, all
/// or nothing.
type LinkSpec = (usize, usize, u64, bool, bool, bool);

fn link_spec(all_or_nothing: bool) -> impl Strategy<Value = LinkSpec> {
    (
        0usize..9,
        0usize..3,
        0u64..4,
        prop::bool::weighted(0.8),
        prop::bool::weighted(0.6),
        if all_or_nothing {
            prop::bool::weighted(0.6).boxed()
        } else {
            Just(false).boxed()
        },
    )
}

/// Chains with the time step before each (0 to 0.9 s).
fn chains(all_or_nothing: bool) -> impl Strategy<Value = Vec<(u64, Vec<LinkSpec>)>> {
    proptest::collection::vec(
        (
            0u64..900_000,
            proptest::collection::vec(link_spec(all_or_nothing), 1..5),
        ),
        1..25,
    )
}

fn op_of(algorithm: &AnyAlgorithm, n: u64) -> Op {
    match algorithm {
        AnyAlgorithm::Concurrency(_) if n == 3 => Op::Release {
            lease: LeaseId(u128::from(n)),
        },
        AnyAlgorithm::Concurrency(_) => Op::Acquire {
            lease: LeaseId(u128::from(n)),
            critical: false,
        },
        _ => Op::Check { cost: n },
    }
}

fn key_of(spec: &LinkSpec) -> String {
    // One namespace per algorithm: keys never hold another algorithm's state.
    format!("a{}:user{}", spec.0, spec.1)
}

fn links<'a>(
    algorithms: &'a [AnyAlgorithm],
    specs: &[LinkSpec],
    keys: &'a [String],
) -> Vec<Link<'a, str, AnyAlgorithm>> {
    specs
        .iter()
        .zip(keys)
        .map(|(spec, key)| {
            let algorithm = &algorithms[spec.0];
            Link {
                request: store::KeyedOp {
                    algorithm,
                    key: key.as_str(),
                    op: op_of(algorithm, spec.2),
                },
                refuses: spec.3,
                stops: spec.4,
                all_or_nothing: spec.5,
                fails_closed: false,
                joins_previous: false,
            }
        })
        .collect()
}

fn decisions(outcomes: Vec<Linked>) -> Vec<Option<Decision>> {
    outcomes
        .into_iter()
        .map(|o| match o {
            Linked::Decided(d) => Some(d),
            Linked::NotReached => None,
            other => panic!("a link failed: {other:?}"),
        })
        .collect()
}

/// What a read-only probe of `key` says now.
fn probe(
    rt: &tokio::runtime::Runtime,
    store: &impl Store<str, AnyAlgorithm>,
    algorithm: &AnyAlgorithm,
    key: &str,
) -> Decision {
    rt.block_on(store.apply(algorithm, key, Op::Check { cost: 0 }))
        .unwrap()
}

/// Without all-or-nothing links, a chain is exactly its links applied one call at a time,
/// ending after the first denial of a stopping link (refusing or not): the memory store's
/// chain, the Redis chain script and the trait's default give the same decisions.
#[test]
fn chains_are_their_links_in_turn() {
    let server = RedisServer::start();
    let rt = runtime();
    let algorithms = algorithms();
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&chains(false), |chains| {
            let clock = ManualClock::new(Nanos(START));
            let memory: Mem = MemoryStore::builder().clock(clock.clone()).build().unwrap();
            let in_turn = InTurn(MemoryStore::builder().clock(clock.clone()).build().unwrap());
            let redis = store_on_clock(&rt, &server.url(), &clock);
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            for (step, specs) in chains {
                clock.advance(Duration::from_micros(step));
                let keys: Vec<String> = specs
                    .iter()
                    .map(|s| format!("c{n}:{}", key_of(s)))
                    .collect();
                let links = links(&algorithms, &specs, &keys);
                let expected = decisions(rt.block_on(in_turn.apply_chain(&links)).unwrap());
                let on_memory = decisions(rt.block_on(memory.apply_chain(&links)).unwrap());
                let on_redis = decisions(rt.block_on(redis.apply_chain(&links)).unwrap());
                prop_assert_eq!(&on_memory, &expected, "memory, chain {:?}", specs);
                prop_assert_eq!(&on_redis, &expected, "redis, chain {:?}", specs);
                // After a stopping denial, nothing more is applied.
                let end = links
                    .iter()
                    .zip(&expected)
                    .position(|(l, d)| l.stops && d.as_ref().is_some_and(|d| !d.allowed));
                if let Some(end) = end {
                    prop_assert!(expected[end + 1..].iter().all(Option::is_none));
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Runs 24 cases of `chains(true)` against the Redis at `url`, each case on a fresh memory
/// store and a fresh Redis store sharing one manual clock: for each chain, after its time step,
/// `check` gets both stores, the runtime, the chain's specs and its keys (each prefixed by
/// `prefix` and the case's number), and answers how many keys it saw undone. Their total.
fn undoing_cases(
    url: &str,
    prefix: &str,
    check: impl Fn(
        &tokio::runtime::Runtime,
        &Mem,
        &RedisStore,
        &[LinkSpec],
        &[String],
    ) -> Result<u64, TestCaseError>,
) -> u64 {
    let rt = runtime();
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicU64::new(0);
    let undone_seen = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&chains(true), |chains| {
            let clock = ManualClock::new(Nanos(START));
            let memory: Mem = MemoryStore::builder().clock(clock.clone()).build().unwrap();
            let redis = store_on_clock(&rt, url, &clock);
            let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            for (step, specs) in chains {
                clock.advance(Duration::from_micros(step));
                let keys: Vec<String> = specs
                    .iter()
                    .map(|s| format!("{prefix}{n}:{}", key_of(s)))
                    .collect();
                let seen = check(&rt, &memory, &redis, &specs, &keys)?;
                undone_seen.fetch_add(seen, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(())
        })
        .unwrap();
    undone_seen.into_inner()
}

/// With all-or-nothing links: memory and Redis agree, and a chain with a denial of a refusing
/// link (ended there or not) leaves every key that only all-or-nothing links touched as it
/// was (a probe at the same instant answers the same before and after).
#[test]
fn refused_chains_undo_all_or_nothing_links() {
    let server = RedisServer::start();
    let algorithms = algorithms();
    let undone_seen = undoing_cases(&server.url(), "u", |rt, memory, redis, specs, keys| {
        let links = links(&algorithms, specs, keys);
        // Keys only all-or-nothing links touch, and their probes before the chain.
        let only_undone: Vec<usize> = (0..links.len())
            .filter(|&i| {
                links
                    .iter()
                    .all(|l| l.request.key != links[i].request.key || l.all_or_nothing)
            })
            .collect();
        let before: Vec<(Decision, Decision)> = only_undone
            .iter()
            .map(|&i| {
                let l = links[i].request;
                (
                    probe(rt, memory, l.algorithm, l.key),
                    probe(rt, redis, l.algorithm, l.key),
                )
            })
            .collect();
        let on_memory = decisions(rt.block_on(memory.apply_chain(&links)).unwrap());
        let on_redis = decisions(rt.block_on(redis.apply_chain(&links)).unwrap());
        prop_assert_eq!(&on_redis, &on_memory, "chain {:?}", specs);
        let refused = links
            .iter()
            .zip(&on_memory)
            .any(|(l, d)| l.refuses && d.as_ref().is_some_and(|d| !d.allowed));
        let mut seen = 0;
        if refused {
            for (&i, (mem_before, redis_before)) in only_undone.iter().zip(&before) {
                let l = links[i].request;
                prop_assert_eq!(&probe(rt, memory, l.algorithm, l.key), mem_before);
                prop_assert_eq!(&probe(rt, redis, l.algorithm, l.key), redis_before);
                seen += 1;
            }
        }
        Ok(seen)
    });
    assert!(
        undone_seen > 10,
        "the cases exercise undoing ({undone_seen} keys)"
    );
}

/// Links joined into groups (a limit's levels, [`Link::joins_previous`]; the sixth field of a
/// spec joins the link to the one before): memory and Redis agree, and a group with a denied
/// link leaves every key that only its links touched as it was, refused request or not.
#[test]
fn a_denied_link_undoes_its_group() {
    let server = RedisServer::start();
    let algorithms = algorithms();
    let undone_seen = undoing_cases(&server.url(), "g", |rt, memory, redis, specs, keys| {
        let mut links = links(&algorithms, specs, keys);
        for (i, (link, spec)) in links.iter_mut().zip(specs).enumerate() {
            link.all_or_nothing = false;
            link.joins_previous = i > 0 && spec.5;
        }
        // The groups, as ranges of links.
        let mut groups: Vec<std::ops::Range<usize>> = Vec::new();
        for (i, link) in links.iter().enumerate() {
            match groups.last_mut() {
                Some(group) if link.joins_previous => group.end = i + 1,
                _ => groups.push(i..i + 1),
            }
        }
        groups.retain(|g| g.len() > 1);
        // Per group, the keys only its links touch, and their probes before.
        let alone = |g: &std::ops::Range<usize>| -> Vec<usize> {
            g.clone()
                .filter(|&i| {
                    links
                        .iter()
                        .enumerate()
                        .all(|(j, l)| l.request.key != links[i].request.key || g.contains(&j))
                })
                .collect()
        };
        let before: Vec<Vec<(usize, Decision, Decision)>> = groups
            .iter()
            .map(|g| {
                alone(g)
                    .into_iter()
                    .map(|i| {
                        let l = links[i].request;
                        let on_memory = probe(rt, memory, l.algorithm, l.key);
                        (i, on_memory, probe(rt, redis, l.algorithm, l.key))
                    })
                    .collect()
            })
            .collect();
        let on_memory = decisions(rt.block_on(memory.apply_chain(&links)).unwrap());
        let on_redis = decisions(rt.block_on(redis.apply_chain(&links)).unwrap());
        prop_assert_eq!(&on_redis, &on_memory, "chain {:?}", specs);
        let mut seen = 0;
        for (g, before) in groups.iter().zip(&before) {
            let denied = on_memory[g.clone()]
                .iter()
                .any(|d| d.as_ref().is_some_and(|d| !d.allowed));
            if !denied {
                continue;
            }
            for (i, mem_before, redis_before) in before {
                let l = links[*i].request;
                prop_assert_eq!(&probe(rt, memory, l.algorithm, l.key), mem_before);
                prop_assert_eq!(&probe(rt, redis, l.algorithm, l.key), redis_before);
                seen += 1;
            }
        }
        Ok(seen)
    });
    assert!(
        undone_seen > 10,
        "the cases exercise undoing groups ({undone_seen} keys)"
    );
}

/// Requests in flight at once, each a wave's request after its own small step of the clock.
type Wave = (u64, Vec<(u64, bool, Vec<LinkSpec>)>);

/// A request's decisions, as its future gives them.
type Pending<'a> = std::pin::Pin<Box<dyn Future<Output = Vec<Option<Decision>>> + Send + 'a>>;

/// Group commit: requests in flight at once (single decisions and chains, all-or-nothing links
/// included, often several on one key) are coalesced into batch calls of a random bound, and
/// each gets exactly the decisions the memory store gives for the same requests applied one
/// after the other in the order they were made, each at its own instant. With one call in
/// flight per lane, batches run strictly in queue order.
#[test]
fn concurrent_requests_in_batches_decide_as_in_turn_on_memory() {
    let server = RedisServer::start();
    batches_decide_as_in_turn(&server.url(), 1, Keys::Shared);
}

/// The same with two calls in flight per lane (the default), where requests in flight
/// together carry no order between them: each request of a wave has keys of its own, so any
/// order gives the memory store's decisions.
#[test]
fn two_calls_in_flight_decide_as_in_turn_on_memory() {
    let server = RedisServer::start();
    batches_decide_as_in_turn(&server.url(), 2, Keys::PerRequest);
}

/// On a Redis Cluster of three masters, where each slot is a lane of its own (lanes of one
/// master sending concurrently): each request's links are one user's, so its chain is one
/// group on one slot, and requests of several users spread over the masters.
#[test]
fn batches_on_a_cluster_decide_as_in_turn_on_memory() {
    let cluster = floodgate_harness::RedisCluster::start(3, 0);
    batches_decide_as_in_turn(&cluster.url(), 1, Keys::OneUserPerRequest);
}

/// How the batching property names its keys.
#[derive(Clone, Copy, PartialEq)]
enum Keys {
    /// By algorithm and user: requests of one wave often share keys.
    Shared,
    /// The same, made distinct per request of a wave (order within a wave does not matter).
    PerRequest,
    /// Every link of a request on its first link's user (one cluster slot per request).
    OneUserPerRequest,
}

fn batches_decide_as_in_turn(url: &str, in_flight: usize, naming: Keys) {
    let rt = runtime();
    let algorithms = algorithms();
    let mut runner = TestRunner::new(Config {
        cases: 32,
        failure_persistence: None,
        ..Config::default()
    });
    let waves = proptest::collection::vec(
        (
            0u64..900_000,
            proptest::collection::vec(
                (
                    0u64..3_000,
                    prop::bool::ANY,
                    proptest::collection::vec(link_spec(true), 1..4),
                ),
                1..16,
            ),
        ),
        1..6,
    );
    let case = std::sync::atomic::AtomicU64::new(0);
    let (calls, decided) = (
        std::sync::atomic::AtomicU64::new(0),
        std::sync::atomic::AtomicU64::new(0),
    );
    runner
        .run(
            &(2usize..12, waves),
            |(max_keys, waves): (usize, Vec<Wave>)| {
                let clock = ManualClock::new(Nanos(START));
                let memory: Mem = MemoryStore::builder().clock(clock.clone()).build().unwrap();
                let redis = store_on_clock_with(&rt, url, &clock, &|b| {
                    b.batch_max_keys(max_keys).batch_in_flight(in_flight)
                });
                if naming == Keys::OneUserPerRequest {
                    // Order holds within a lane; until the store knows the slot map, a key's
                    // lane is its slot, then its master: requests in flight across that change
                    // have no order between them. Start once the lanes are the masters.
                    rt.block_on(async {
                        let probe: AnyAlgorithm =
                            Gcra::new(1, 1, Duration::from_secs(1)).unwrap().into();
                        for _ in 0..500 {
                            if redis.node_breakers().len() == 3 {
                                return;
                            }
                            let _ = redis.apply(&probe, "warm:up", Op::Check { cost: 0 }).await;
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        panic!("the store never learnt the slot map");
                    });
                }
                let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                for (step, requests) in waves {
                    clock.advance(Duration::from_micros(step));
                    let keys: Vec<Vec<String>> = requests
                        .iter()
                        .enumerate()
                        .map(|(i, (_, _, specs))| {
                            specs
                                .iter()
                                .map(|s| match naming {
                                    Keys::Shared => format!("b{n}:{}", key_of(s)),
                                    Keys::PerRequest => format!("b{n}r{i}:{}", key_of(s)),
                                    // The user is the hash tag: one slot per request.
                                    Keys::OneUserPerRequest => {
                                        format!("b{n}a{}:user{}", s.0, specs[0].1)
                                    }
                                })
                                .collect()
                        })
                        .collect();
                    let (expected, got) = rt.block_on(async {
                        let mut expected = Vec::new();
                        let mut pending: Vec<Result<Vec<Option<Decision>>, Pending<'_>>> =
                            Vec::new();
                        for ((gap, single, specs), keys) in requests.iter().zip(&keys) {
                            clock.advance(Duration::from_micros(*gap));
                            let links = links(&algorithms, specs, keys);
                            let redis = &redis;
                            let mut future: Pending<'_> = if *single {
                                let r = links[0].request;
                                let on_memory = memory.apply(r.algorithm, r.key, r.op).await;
                                expected.push(vec![Some(on_memory.unwrap())]);
                                Box::pin(async move {
                                    vec![Some(redis.apply(r.algorithm, r.key, r.op).await.unwrap())]
                                })
                            } else {
                                expected.push(decisions(memory.apply_chain(&links).await.unwrap()));
                                Box::pin(async move {
                                    decisions(redis.apply_chain(&links).await.unwrap())
                                })
                            };
                            // Polled once: the request reads the clock and joins its lane's queue.
                            let first = std::future::poll_fn(|cx| {
                                std::task::Poll::Ready(future.as_mut().poll(cx))
                            })
                            .await;
                            pending.push(match first {
                                std::task::Poll::Ready(done) => Ok(done),
                                std::task::Poll::Pending => Err(future),
                            });
                        }
                        let mut got = Vec::new();
                        for request in pending {
                            got.push(match request {
                                Ok(done) => done,
                                Err(future) => future.await,
                            });
                        }
                        (expected, got)
                    });
                    for ((expected, got), request) in expected.iter().zip(&got).zip(&requests) {
                        prop_assert_eq!(got, expected, "request {:?} of {:?}", request, requests);
                    }
                }
                let stats = redis.batch_stats();
                calls.fetch_add(stats.calls, std::sync::atomic::Ordering::Relaxed);
                decided.fetch_add(stats.decisions, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            },
        )
        .unwrap();
    let (calls, decided) = (calls.into_inner(), decided.into_inner());
    assert!(
        decided > calls * 3 / 2,
        "requests were coalesced: {decided} decisions in {calls} calls"
    );
}

fn stripe_on<S: Store<str, AnyAlgorithm> + Clone + 'static>(
    store: S,
    all_or_nothing: bool,
) -> Pipeline<S> {
    let rate = RequestRateLimiter::builder()
        .plan(Plan::token_bucket("all", 1.0, 5).unwrap())
        .build(store.clone())
        .unwrap();
    let concurrency = ConcurrencyLimiter::builder()
        .capacity(1)
        .build(store.clone())
        .unwrap();
    let fleet = FleetShedder::builder()
        .capacity(100)
        .build(store.clone())
        .unwrap();
    let utilization = UtilizationShedder::builder()
        .source(Arc::new(SettableUtilization::new(0.0)))
        .build()
        .unwrap();
    Pipeline::builder()
        .stage(Stage::new(rate).all_or_nothing(all_or_nothing))
        .limiter(concurrency)
        .limiter(fleet)
        .limiter(utilization)
        .build()
        .unwrap()
}

/// The request rate tokens left after one request holds the user's one place in flight and a
/// second one is refused for it.
async fn left_after_a_refusal<S: Store<str, AnyAlgorithm> + 'static>(
    pipeline: &Pipeline<S>,
    request: &Request<'_>,
) -> u64 {
    let held = pipeline.evaluate(request).await;
    assert!(held.allowed());
    let refused = pipeline.evaluate(request).await;
    let refusal = refused.refusal.as_ref().expect("refused");
    assert_eq!(refusal.stage.as_str(), "concurrency");
    let Some(Limiter::RequestRate(rate)) = pipeline.stages().next().map(|s| s.limiter()) else {
        unreachable!("the first stage is the request rate")
    };
    let probe = rate.check(request.user, request.plan, 0).await.unwrap();
    probe.decision.remaining
}

/// A request refused by the concurrency stage has used a token of the request rate stage,
/// unless that stage is all or nothing; on the memory store and on Redis alike.
#[test]
fn all_or_nothing_stages_keep_refused_requests_free() {
    let server = RedisServer::start();
    let rt = runtime();
    let redis = {
        let _guard = rt.enter();
        RedisStore::builder(server.url())
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap()
    };
    let memory = Arc::new(MemoryStore::new());
    for all_or_nothing in [false, true] {
        let user = format!("user-{all_or_nothing}");
        let request = Request::new(&user, "all", Priority::Get);
        let left_after_refusal = |pipeline_left: u64| {
            // Five tokens: one for the request that holds the place, and one more for the
            // refused one unless it was undone.
            let expected = if all_or_nothing { 4 } else { 3 };
            assert_eq!(pipeline_left, expected, "all_or_nothing {all_or_nothing}");
        };
        let on_redis = rt.block_on(left_after_a_refusal(
            &stripe_on(redis.clone(), all_or_nothing),
            &request,
        ));
        left_after_refusal(on_redis);
        let on_memory = rt.block_on(left_after_a_refusal(
            &stripe_on(memory.clone(), all_or_nothing),
            &request,
        ));
        left_after_refusal(on_memory);
    }
}

/// `INFO commandstats`' count of calls to `command` on `server`.
async fn calls(server: &RedisServer, command: &str) -> u64 {
    let mut raw = raw(server).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Stripe's four stages on Redis decide a request with one script call (the three store
/// stages in one chain), allowed or refused.
#[test]
fn a_pipeline_makes_one_redis_call_per_request() {
    let server = RedisServer::start();
    let rt = runtime();
    let redis = {
        let _guard = rt.enter();
        RedisStore::builder(server.url())
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap()
    };
    let pipeline = stripe_on(redis, false);
    rt.block_on(async {
        let request = Request::new("alice", "all", Priority::Get);
        // The first call loads the script.
        let first = pipeline.evaluate(&request).await;

        let before = calls(&server, "evalsha").await;
        let refused = pipeline.evaluate(&request).await;
        assert!(!refused.allowed());
        assert_eq!(calls(&server, "evalsha").await - before, 1);
        // Nothing in flight was given back: the refused request took no lease.
        assert!(refused.leases.is_empty());
        drop(first); // gives the lease back (one more call, in the background)
    });
}

use floodgate::pipeline::Limiter;
