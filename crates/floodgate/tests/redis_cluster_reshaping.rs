//! A Redis Cluster changing shape under load, as operators change it: a master added and the
//! slots rebalanced onto it, a hot slot moved key by key to another master and back, a master
//! drained and removed, a master failed over to its replica. Three stores (as three nodes
//! would be) send every kind of call the store makes meanwhile: decisions of every algorithm
//! through the group commit, leases, an all-or-nothing chain, and envoyproxy/ratelimit's
//! counters. Every call must be answered from the store (no error, so nothing would fail
//! open), every limit of N must admit exactly N, and every counter must hold exactly what was
//! added. Each scenario prints its figures (requests, redirections followed, errors, the
//! largest over-admission, the slowest answer), which RELIABILITY.md records.
#![cfg(feature = "redis")]

mod redis_common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floodgate::algorithm::concurrency::Concurrency;
use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::gcra::Gcra;
use floodgate::algorithm::leaky_bucket::LeakyBucket;
use floodgate::algorithm::sliding_log::SlidingLog;
use floodgate::algorithm::sliding_window::SlidingWindow;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::store::redis::{CounterIncrement, RedirectStats};
use floodgate::store::Linked;
use floodgate::store::{KeyedOp, Link, RedisStore, Store};
use floodgate::{Clock, LeaseId, Op, SystemClock};
use floodgate_harness::RedisCluster;

/// Every limit's size: each key is asked far more often, so exactly this many pass.
const N: u64 = 20;
const USERS: u64 = 24;
/// The user a tenth of the calls are for, whose slot the hot-slot scenario moves.
const HOT: u64 = 0;
const HOUR: Duration = Duration::from_secs(3600);

/// What the load calls, each on every user's keys (one slot per user: `ns:{userN}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    /// A check of algorithm `algorithms()[i]`.
    Check(usize),
    /// A lease taken and kept (a concurrency limit of N).
    Lease,
    /// Two windows of N in one all-or-nothing chain.
    Chain,
    /// envoyproxy/ratelimit's counter (`INCRBY`), on a key of its own slot.
    Count,
}

/// Every algorithm, each admitting exactly N in an hour (their rates refill nothing that
/// matters in the minute a scenario lasts).
fn algorithms() -> Vec<(&'static str, AnyAlgorithm)> {
    let slow = 1.0 / 3600.0;
    vec![
        ("fw", FixedWindow::new(N, HOUR).unwrap().into()),
        ("sw", SlidingWindow::new(N, HOUR, None).unwrap().into()),
        ("swb", SlidingWindow::new(N, HOUR, Some(60)).unwrap().into()),
        ("sl", SlidingLog::new(N, HOUR).unwrap().into()),
        ("tb", TokenBucket::new(slow, N).unwrap().into()),
        ("lb", LeakyBucket::new(slow, N).unwrap().into()),
        ("gcra", Gcra::new(N - 1, 1, HOUR).unwrap().into()),
    ]
}

/// The tallies of a run.
#[derive(Default)]
struct Tally {
    requests: AtomicU64,
    /// Calls made per key.
    asked: Mutex<HashMap<(Kind, u64), u64>>,
    admitted: Mutex<HashMap<(Kind, u64), u64>>,
    counted: Mutex<HashMap<u64, u64>>,
    errors: Mutex<Vec<String>>,
    slowest_us: AtomicU64,
}

/// One call of `kind` for `user` through `store`: whether it was admitted (a counter's
/// increment always is).
async fn call(
    store: &RedisStore,
    algorithms: &[(&'static str, AnyAlgorithm)],
    lease: &AnyAlgorithm,
    kind: Kind,
    user: u64,
) -> Result<bool, floodgate::StoreError> {
    match kind {
        Kind::Check(i) => {
            let (ns, algorithm) = &algorithms[i];
            let key = format!("{ns}:user{user}");
            Ok(store
                .apply(algorithm, &key, Op::Check { cost: 1 })
                .await?
                .allowed)
        }
        Kind::Lease => {
            let key = format!("lease:user{user}");
            let op = Op::Acquire {
                lease: LeaseId::random(),
                critical: false,
            };
            Ok(store.apply(lease, &key, op).await?.allowed)
        }
        Kind::Chain => {
            let (a, b) = (format!("chain-a:user{user}"), format!("chain-b:user{user}"));
            let fw = &algorithms[0].1;
            let outcomes = store.apply_chain(&[link(fw, &a), link(fw, &b)]).await?;
            let mut allowed = true;
            for outcome in outcomes {
                match outcome {
                    Linked::Decided(d) => allowed &= d.allowed,
                    Linked::Failed(e) => return Err(e),
                    _ => allowed = false,
                }
            }
            Ok(allowed)
        }
        Kind::Count => {
            let key = format!("count-user{user}");
            let increment = CounterIncrement {
                key: &key,
                by: 1,
                refund: false,
                ttl_seconds: 3600,
            };
            store.increment_counters(&[increment]).await?;
            Ok(true)
        }
    }
}

/// A check of 1 on `key`, refusing the request when denied, undone when the request is.
fn link<'a>(algorithm: &'a AnyAlgorithm, key: &'a str) -> Link<'a, str, AnyAlgorithm> {
    Link {
        request: KeyedOp {
            algorithm,
            key,
            op: Op::Check { cost: 1 },
        },
        refuses: true,
        stops: false,
        all_or_nothing: true,
        fails_closed: false,
        joins_previous: false,
    }
}

/// Calls from `tasks` tasks over `stores` until `stop`, into `tally`.
fn start_load(
    rt: &tokio::runtime::Runtime,
    stores: &[RedisStore],
    tasks: usize,
    stop: &Arc<AtomicBool>,
    tally: &Arc<Tally>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let algorithms = Arc::new(algorithms());
    let lease: AnyAlgorithm = Concurrency::new(N, HOUR).unwrap().into();
    let kinds: Vec<Kind> = (0..algorithms.len())
        .map(Kind::Check)
        .chain([Kind::Lease, Kind::Chain, Kind::Count])
        .collect();
    (0..tasks)
        .map(|t| {
            let store = stores[t % stores.len()].clone();
            let (algorithms, lease, kinds) = (algorithms.clone(), lease.clone(), kinds.clone());
            let (stop, tally) = (stop.clone(), tally.clone());
            rt.spawn(async move {
                let clock = SystemClock::new();
                let mut n = t as u64 + 1;
                while !stop.load(Ordering::Relaxed) {
                    n = n
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    let r = n >> 33;
                    let user = if r.is_multiple_of(10) { HOT } else { r % USERS };
                    let kind = kinds[(r / 10) as usize % kinds.len()];
                    let started = clock.now();
                    let result = call(&store, &algorithms, &lease, kind, user).await;
                    let took = clock.now().saturating_since(started);
                    tally
                        .slowest_us
                        .fetch_max(took.as_micros() as u64, Ordering::Relaxed);
                    tally.requests.fetch_add(1, Ordering::Relaxed);
                    *tally.asked.lock().unwrap().entry((kind, user)).or_default() += 1;
                    match result {
                        Ok(true) if kind == Kind::Count => {
                            *tally.counted.lock().unwrap().entry(user).or_default() += 1;
                        }
                        Ok(true) => {
                            *tally
                                .admitted
                                .lock()
                                .unwrap()
                                .entry((kind, user))
                                .or_default() += 1;
                        }
                        Ok(false) => {}
                        Err(e) => tally
                            .errors
                            .lock()
                            .unwrap()
                            .push(format!("{kind:?}: {e} {e:?}")),
                    }
                }
            })
        })
        .collect()
}

/// Runs the load on `cluster` from three stores while `change` changes its shape, then
/// checks the tallies and prints the scenario's figures.
fn under_load(name: &str, cluster: &mut RedisCluster, change: impl FnOnce(&mut RedisCluster)) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let stores: Vec<RedisStore> = (0..3)
        .map(|_| {
            let _entered = rt.enter();
            RedisStore::builder(cluster.url())
                .timeout(Duration::from_secs(2))
                .build()
                .unwrap()
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let began = cluster.seconds();
    let tasks = start_load(&rt, &stores, 12, &stop, &tally);
    change(cluster);
    // The load goes on, on the new shape, until every key was asked at least 3N times (so
    // that each limit is reached, most of them while the shape changed): at most 30 s.
    let keys = (algorithms().len() + 3) * USERS as usize;
    for _ in 0..300 {
        let asked = tally.asked.lock().unwrap();
        if asked.len() == keys && asked.values().all(|&n| n >= 3 * N) {
            break;
        }
        drop(asked);
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    rt.block_on(async {
        for task in tasks {
            task.await.unwrap();
        }
    });
    let errors = tally.errors.lock().unwrap();
    assert!(
        errors.is_empty(),
        "{name}: {} calls failed, first: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    // The fixed windows (alone, and the chain's two) are aligned to Redis's clock: a run that
    // crosses the hour may admit N in each of its two windows.
    let hour_turned = began / 3600 != cluster.seconds() / 3600;
    let admitted = tally.admitted.lock().unwrap();
    let mut largest_over = 0;
    for (&(kind, user), &n) in admitted.iter() {
        let aligned = match kind {
            Kind::Check(i) => algorithms()[i].0 == "fw",
            kind => kind == Kind::Chain,
        };
        let most = if aligned && hour_turned { 2 * N } else { N };
        largest_over = largest_over.max(n.saturating_sub(most));
        assert!(
            (N..=most).contains(&n),
            "{name}: {kind:?} admitted {n} for user{user}, not {N}{}",
            if most > N {
                " or up to one more N in the new hour"
            } else {
                ""
            }
        );
    }
    let kinds = algorithms().len() + 2;
    assert_eq!(
        admitted.len() as u64,
        kinds as u64 * USERS,
        "{name}: every key reached N"
    );
    let counted = tally.counted.lock().unwrap();
    for (&user, &n) in counted.iter() {
        let key = format!("count-user{user}");
        let held: u64 = rt.block_on(stores[0].read_counters(&[&key])).unwrap()[0];
        assert_eq!(held, n, "{name}: the counter of user{user}");
    }
    let redirects =
        stores
            .iter()
            .map(RedisStore::redirect_stats)
            .fold(RedirectStats::default(), |a, b| RedirectStats {
                moved: a.moved + b.moved,
                ask: a.ask + b.ask,
                try_again: a.try_again + b.try_again,
                cluster_down: a.cluster_down + b.cluster_down,
                split: a.split + b.split,
            });
    eprintln!(
        "RELIABILITY | {name} | {} requests | {redirects:?} | {} failed | over-admission {largest_over} | slowest {:.1} ms",
        tally.requests.load(Ordering::Relaxed),
        errors.len(),
        tally.slowest_us.load(Ordering::Relaxed) as f64 / 1000.0
    );
}

#[test]
fn a_master_joins_and_the_slots_rebalance_onto_it() {
    let mut cluster = RedisCluster::start(3, 0);
    under_load("add a master, rebalance", &mut cluster, |cluster| {
        cluster.add_master();
        cluster.rebalance();
    });
}

#[test]
fn a_hot_slot_moves_key_by_key_to_another_master_and_back() {
    let mut cluster = RedisCluster::start(3, 0);
    let slot = cluster.slot_of(&format!("user{HOT}"));
    under_load("move a hot slot and back", &mut cluster, |cluster| {
        let home = cluster.master_of_slot(slot);
        let away = cluster
            .nodes()
            .into_iter()
            .find(|n| n.master && n.port != home)
            .unwrap()
            .port;
        // Its keys one at a time, with a pause between: the move lasts long enough for the
        // calls to meet every state of it (ASK, TRYAGAIN, MOVED).
        cluster.move_slot(slot, away, 1, Duration::from_millis(20));
        cluster.move_slot(slot, home, 1, Duration::from_millis(20));
    });
}

#[test]
fn a_master_is_drained_and_removed() {
    let mut cluster = RedisCluster::start(4, 0);
    let leaving = cluster.servers()[3].port();
    under_load("drain and remove a master", &mut cluster, |cluster| {
        cluster.remove_master(leaving);
    });
}

#[test]
fn a_master_fails_over_to_its_replica() {
    let mut cluster = RedisCluster::start(3, 1);
    let hot_master = cluster.master_of(&format!("user{HOT}"));
    under_load("fail a master over", &mut cluster, |cluster| {
        cluster.failover(hot_master);
    });
}
