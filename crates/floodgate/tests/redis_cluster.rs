//! The Redis store against a real Redis Cluster of the test's own (3 masters, `redis-server`
//! processes on free loopback ports, joined by `redis-cli --cluster create`), one per test.
#![cfg(feature = "redis")]

mod conformance;
mod redis_common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::gcra::Gcra;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::store::redis::redis_key;
use floodgate::store::{KeyedOp, RedisStore, Store};
use floodgate::{Clock, ManualClock, Nanos, SystemClock};
use floodgate_harness::RedisCluster;

/// A cluster connection of the test's own, to look at what the store wrote.
async fn raw(cluster: &RedisCluster) -> redis::cluster_async::ClusterConnection {
    let nodes: Vec<String> = cluster.servers().iter().map(|s| s.url()).collect();
    redis::cluster::ClusterClient::new(nodes)
        .unwrap()
        .get_async_connection()
        .await
        .unwrap()
}

use redis_common::{check, runtime, store_on_clock, START};

/// The masters serving `keys` (store keys).
fn masters_of<'a>(
    cluster: &RedisCluster,
    keys: impl IntoIterator<Item = &'a str>,
) -> BTreeSet<u16> {
    keys.into_iter()
        .map(|k| cluster.master_of(&redis_key(k)))
        .collect()
}

/// The same random sequences as on a single Redis (`tests/redis_store.rs`), on a cluster: the
/// Lua twins agree with the memory store, with the keys spread over the masters.
#[test]
fn lua_twins_agree_with_the_memory_store_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let rt = runtime();
    let raw = rt.block_on(raw(&cluster));
    conformance::lua_twins_agree_with_the_memory_store(&rt, &cluster.url(), raw);
    let keys: Vec<String> = (0..8).map(|n| format!("conformance:{n}")).collect();
    let masters = masters_of(&cluster, keys.iter().map(String::as_str));
    assert!(masters.len() >= 2, "the keys all landed on {masters:?}");
    // Envoy's month and year windows too.
    conformance::long_fixed_windows_agree_at_their_boundaries(&rt, &cluster.url());
    // And the claims on shared limits (the Rate Limit Quota Service's shares).
    conformance::quota_claims_agree_with_their_rust_model(&rt, &cluster.url());
    // And the suite every store runs.
    let clock = ManualClock::new(Nanos(START));
    let store = store_on_clock(&rt, &cluster.url(), &clock);
    conformance::store_agrees_with_the_memory_store(&rt, &clock, &store);
}

/// A user's keys under several namespaces share a node; different users spread over nodes;
/// the state is written under the hash-tagged key, on the node serving its slot.
#[test]
fn one_users_keys_share_a_node_and_users_spread() {
    let cluster = RedisCluster::start(3, 0);
    let rt = runtime();
    rt.block_on(async {
        let store = RedisStore::builder(cluster.url())
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let fw: AnyAlgorithm = FixedWindow::new(3, Duration::from_secs(3600))
            .unwrap()
            .into();
        let users: Vec<String> = (0..6).map(|i| format!("user{i}")).collect();
        for user in &users {
            let keys = [format!("api:{user}"), format!("login:{user}")];
            for key in &keys {
                let mut allowed = 0;
                for _ in 0..5 {
                    allowed += u64::from(store.apply(&fw, key, check(1)).await.unwrap().allowed);
                }
                assert_eq!(allowed, 3, "{key}");
            }
            let masters = masters_of(&cluster, keys.iter().map(String::as_str));
            assert_eq!(masters.len(), 1, "{user}'s keys are on {masters:?}");
            let port = *masters.first().unwrap();
            let value = cluster.cli(port, &["GET", &redis_key(&keys[0])]).unwrap();
            assert!(value.starts_with("F:"), "{user}: {value:?}");
        }
        let masters = masters_of(&cluster, users.iter().map(|u| u.as_str()));
        assert!(masters.len() >= 2, "the users all landed on {masters:?}");
    });
}

/// `apply_many` over keys on several nodes (one pipeline per slot) gives the decisions the same
/// operations give one by one, in request order, also right after `SCRIPT FLUSH` on every node
/// (`NOSCRIPT` in pipelines and single calls: the calls are sent again by source).
#[test]
fn apply_many_across_slots_agrees_with_one_by_one_and_survives_script_flush() {
    let cluster = RedisCluster::start(3, 0);
    let rt = runtime();
    let clock = ManualClock::new(Nanos(START));
    let store = store_on_clock(&rt, &cluster.url(), &clock);
    rt.block_on(async {
        let algorithms: [AnyAlgorithm; 6] = [
            Gcra::new(2, 1, Duration::from_secs(1)).unwrap().into(),
            FixedWindow::new(3, Duration::from_secs(10)).unwrap().into(),
            TokenBucket::new(0.5, 4).unwrap().into(),
            Gcra::new(2, 1, Duration::from_secs(1)).unwrap().into(),
            FixedWindow::new(3, Duration::from_secs(10)).unwrap().into(),
            TokenBucket::new(0.5, 4).unwrap().into(),
        ];
        // Six users (several slots and nodes); the fourth request repeats the first key and the
        // fifth shares the second's user (same slot, another namespace).
        let names = ["g:a", "fw:b", "tb:c", "g:a", "fw2:b", "tb:f"];
        let costs = [1u64, 2, 1, 1, 1, 2];
        let many: Vec<String> = names.iter().map(|n| format!("many-{n}")).collect();
        let masters = masters_of(&cluster, many.iter().map(|k| k.as_str()));
        assert!(masters.len() >= 2, "the batch only touches {masters:?}");
        let mut denied = false;
        for round in 0..6 {
            if round % 2 == 1 {
                for server in cluster.servers() {
                    assert!(cluster.cli(server.port(), &["SCRIPT", "FLUSH"]).is_some());
                }
            }
            let requests: Vec<KeyedOp<'_, str, AnyAlgorithm>> = (0..names.len())
                .map(|i| KeyedOp {
                    algorithm: &algorithms[i],
                    key: many[i].as_str(),
                    op: check(costs[i]),
                })
                .collect();
            let got = store.apply_many(&requests).await.unwrap();
            let mut expected = Vec::new();
            for (i, name) in names.iter().enumerate() {
                let one = format!("one-{name}");
                expected.push(
                    store
                        .apply(&algorithms[i], one.as_str(), check(costs[i]))
                        .await
                        .unwrap(),
                );
            }
            assert_eq!(got, expected, "round {round}");
            denied |= got.iter().any(|d| !d.allowed);
            clock.advance(Duration::from_millis(700));
        }
        assert!(denied, "the comparison covers denials too");
        assert!(store.apply_many(&[]).await.unwrap().is_empty());
    });
}

/// Failovers under a loop of requests, without rebuilding the store: a manual one
/// (`CLUSTER FAILOVER` on a replica, which loses no acknowledged write) and a dead master (its
/// replica takes over after `cluster-node-timeout`). Every call returns within the timeout
/// (plus scheduling slack), and afterwards calls succeed again by themselves and limits hold
/// exactly.
#[test]
fn failovers_under_load_bound_every_call_and_counting_resumes() {
    let mut cluster = RedisCluster::start(3, 1);
    let rt = runtime();
    let timeout = Duration::from_millis(200);
    let slack = redis_common::SCHEDULING_SLACK;
    let wall = SystemClock::new();
    let store = {
        let _guard = rt.enter();
        RedisStore::builder(cluster.url())
            .timeout(timeout)
            .breaker(3, Duration::from_millis(100))
            .build()
            .unwrap()
    };
    let big: AnyAlgorithm = FixedWindow::new(1_000_000, Duration::from_secs(3600))
        .unwrap()
        .into();
    let keys: Vec<String> = (0..12).map(|i| format!("load:u{i}")).collect();
    assert!(masters_of(&cluster, keys.iter().map(|k| k.as_str())).len() >= 2);
    // Calls (single, and batches over several nodes) in a loop until `done`, then until `after`
    // more succeed: how many were allowed per key, the slowest call, how many failed.
    let hammer = |done: &AtomicBool, after: usize| {
        rt.block_on(async {
            let mut allowed = vec![0u64; keys.len()];
            let (mut slowest, mut ok_after, mut errors) = (Duration::ZERO, 0, 0);
            let mut i = 0;
            while ok_after < after {
                let finished = done.load(Ordering::Acquire);
                let k = i % keys.len();
                i += 1;
                // Every third call is a batch of three keys (spread over the nodes).
                let batch: Vec<usize> = if i % 3 == 0 {
                    (0..3).map(|j| (k + j * 4) % keys.len()).collect()
                } else {
                    vec![k]
                };
                let requests: Vec<KeyedOp<'_, str, AnyAlgorithm>> = batch
                    .iter()
                    .map(|&b| KeyedOp {
                        algorithm: &big,
                        key: keys[b].as_str(),
                        op: check(1),
                    })
                    .collect();
                let start = wall.now();
                let result = if batch.len() == 1 {
                    store
                        .apply(&big, keys[k].as_str(), check(1))
                        .await
                        .map(|d| vec![d])
                } else {
                    store.apply_many(&requests).await
                };
                let took = wall.now().saturating_since(start);
                slowest = slowest.max(took);
                assert!(took < timeout + slack, "call {i} took {took:?}: {result:?}");
                match result {
                    Ok(decisions) => {
                        for (&b, d) in batch.iter().zip(decisions) {
                            allowed[b] += u64::from(d.allowed);
                        }
                        ok_after += usize::from(finished);
                    }
                    Err(e) => {
                        assert!(e.is_transient(), "{e}");
                        errors += 1;
                        // Nothing to gain from spinning on an open breaker.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
                assert!(i < 200_000, "calls never succeeded again");
            }
            (allowed, slowest, errors)
        })
    };

    // 1. A manual failover of the master serving the first key.
    let master = cluster.master_of(&redis_key(&keys[0]));
    let done = AtomicBool::new(false);
    let (allowed, slowest, errors) = std::thread::scope(|s| {
        let failing_over = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            let new_master = cluster.failover(master);
            done.store(true, Ordering::Release);
            new_master
        });
        let result = hammer(&done, 200);
        let new_master = failing_over.join().unwrap();
        assert_eq!(cluster.master_of(&redis_key(&keys[0])), new_master);
        result
    });
    eprintln!("manual failover: slowest call {slowest:?}, {errors} errors");
    // No acknowledged write is lost in a manual failover: the store counted at least every
    // allowed call (more if a call timed out after it had run).
    rt.block_on(async {
        for (key, &n) in keys.iter().zip(&allowed) {
            let d = store.apply(&big, key.as_str(), check(0)).await.unwrap();
            assert!(1_000_000 - d.remaining >= n, "{key}: {d:?}, {n} allowed");
        }
    });

    // 2. A master killed: its replica takes over after the node timeout.
    let victim = cluster.master_of(&redis_key(&keys[1]));
    let done = AtomicBool::new(false);
    let (_, slowest, errors) = std::thread::scope(|s| {
        let cluster = &mut cluster;
        let done = &done;
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            cluster.server_mut(victim).kill();
            cluster.wait_until_ok();
            done.store(true, Ordering::Release);
        });
        hammer(done, 200)
    });
    eprintln!("master killed: slowest call {slowest:?}, {errors} errors");
    assert_ne!(cluster.master_of(&redis_key(&keys[1])), victim);

    // Exact counting on the same store, on every node.
    rt.block_on(async {
        let limited: AnyAlgorithm = FixedWindow::new(5, Duration::from_secs(3600))
            .unwrap()
            .into();
        for key in &keys {
            let key = format!("after:{key}");
            let mut allowed = 0;
            for _ in 0..8 {
                allowed += u64::from(
                    store
                        .apply(&limited, key.as_str(), check(1))
                        .await
                        .unwrap()
                        .allowed,
                );
            }
            assert_eq!(allowed, 5, "{key}");
        }
    });
}

/// Cached mode on a cluster: a sync splits its keys by slot (one script call per slot, the
/// calls sent at once), and every node's admissions on keys spread over all three masters
/// reach their shards: three cached nodes, 200 users, each user's window of 5 filled exactly
/// once the views are synced.
#[test]
fn cached_nodes_sync_keys_spread_over_the_masters() {
    use floodgate::store::CachedStore;

    let cluster = RedisCluster::start(3, 0);
    let rt = runtime();
    let clock = ManualClock::new(Nanos(START));
    let nodes: Vec<CachedStore> = (0..3)
        .map(|_| {
            CachedStore::builder(store_on_clock(&rt, &cluster.url(), &clock))
                .clock(clock.clone())
                .nodes(3)
                // Every first request loads the key's state: on a loaded CI machine a cluster
                // round trip can exceed the default 5 ms, and a key decided at the node's
                // share (1 of 5) would refuse the node's second request.
                .load_budget(Duration::from_secs(5))
                .build()
                .unwrap()
        })
        .collect();
    let fw: AnyAlgorithm = FixedWindow::new(5, Duration::from_secs(3600))
        .unwrap()
        .into();
    let users: Vec<String> = (0..200).map(|u| format!("api:user{u}")).collect();
    rt.block_on(async {
        // Two requests per user on each node, then a sync: 6 admitted per user (one beyond
        // the limit, admitted before any node could know), all of it in Redis.
        let mut admitted = 0;
        for node in &nodes {
            for user in &users {
                for _ in 0..2 {
                    admitted += u64::from(node.apply(&fw, user, check(1)).await.unwrap().allowed);
                }
            }
        }
        assert_eq!(admitted, 6 * 200);
        for node in &nodes {
            let report = node.sync().await;
            assert!(report.error.is_none(), "{:?}", report.error);
            assert_eq!((report.keys, report.sent_cost), (200, 400));
        }
        let mut conn = raw(&cluster).await;
        for user in &users {
            let value: String = redis::cmd("GET")
                .arg(redis_key(user))
                .query_async(&mut conn)
                .await
                .unwrap();
            assert!(value.ends_with(":6"), "{user}: {value}");
        }
        // The last node to sync knows every user is over: it refuses them all locally.
        for user in &users {
            assert!(!nodes[2].apply(&fw, user, check(1)).await.unwrap().allowed);
        }
    });
}

/// A breaker per master: a paused master opens its own breaker only. Its keys fail (within the
/// timeout, then at once), while keys on the other masters, alone and in batches across
/// masters that avoid it, are decided exactly throughout; once it resumes, its keys are
/// decided again.
#[test]
fn a_paused_master_opens_only_its_own_breaker() {
    use floodgate::store::redis::BreakerState;
    use floodgate::StoreError;

    let cluster = RedisCluster::start(3, 0);
    // The healthy masters keep serving their slots while another is unreachable.
    for server in cluster.servers() {
        server.cli(&["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
    }
    let rt = runtime();
    let timeout = Duration::from_millis(150);
    let store = {
        let _guard = rt.enter();
        RedisStore::builder(cluster.url())
            .timeout(timeout)
            .breaker(2, Duration::from_millis(300))
            .build()
            .unwrap()
    };
    let limited: AnyAlgorithm = FixedWindow::new(5, Duration::from_secs(3600))
        .unwrap()
        .into();
    let keys: Vec<String> = (0..30).map(|i| format!("nodes:u{i}")).collect();
    let victim = cluster.master_of(&redis_key(&keys[0]));
    let (on_victim, healthy): (Vec<&String>, Vec<&String>) = keys
        .iter()
        .partition(|k| cluster.master_of(&redis_key(k)) == victim);
    assert!(masters_of(&cluster, healthy.iter().map(|k| k.as_str())).len() == 2);
    let wall = SystemClock::new();
    rt.block_on(async {
        // The store learns the slot map in the background after its first calls.
        let started = wall.now();
        while store.node_breakers().len() < 3 {
            let _ = store.apply(&limited, "warm:up", check(0)).await.unwrap();
            assert!(wall.now().saturating_since(started) < Duration::from_secs(10));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let server = cluster
        .servers()
        .iter()
        .find(|s| s.port() == victim)
        .unwrap();
    server.signal("STOP");
    rt.block_on(async {
        // Two timeouts open the victim's breaker; then its keys fail at once.
        for key in on_victim.iter().cycle().take(2) {
            let e = store.apply(&limited, key.as_str(), check(1)).await;
            assert!(matches!(e, Err(StoreError::Timeout(_))), "{e:?}");
        }
        let started = wall.now();
        let e = store.apply(&limited, on_victim[0].as_str(), check(1)).await;
        assert!(matches!(e, Err(StoreError::BreakerOpen { .. })), "{e:?}");
        assert!(wall.now().saturating_since(started) < timeout);
        let states = store.node_breakers();
        for (node, state) in &states {
            let expected = if node.ends_with(&format!(":{victim}")) {
                BreakerState::Open
            } else {
                BreakerState::Closed
            };
            assert_eq!(*state, expected, "{node} in {states:?}");
        }
        assert_eq!(store.breaker_state(), BreakerState::Closed);
        // The healthy masters count exactly, alone and in batches spanning both.
        for key in &healthy {
            let mut allowed = 0;
            for _ in 0..4 {
                allowed += u64::from(
                    store
                        .apply(&limited, key.as_str(), check(1))
                        .await
                        .unwrap()
                        .allowed,
                );
            }
            assert_eq!(allowed, 4, "{key}");
        }
        let requests: Vec<KeyedOp<'_, str, AnyAlgorithm>> = healthy
            .iter()
            .map(|k| KeyedOp {
                algorithm: &limited,
                key: k.as_str(),
                op: check(1),
            })
            .collect();
        for round in 0..2 {
            let decisions = store.apply_many(&requests).await.unwrap();
            let allowed = decisions.iter().filter(|d| d.allowed).count();
            assert_eq!(allowed, if round == 0 { healthy.len() } else { 0 });
        }
    });
    server.signal("CONT");
    rt.block_on(async {
        let started = wall.now();
        loop {
            match store.apply(&limited, on_victim[0].as_str(), check(1)).await {
                Ok(d) => {
                    assert!(d.allowed);
                    break;
                }
                Err(e) => assert!(e.is_transient(), "{e}"),
            }
            assert!(
                wall.now().saturating_since(started) < Duration::from_secs(10),
                "the resumed master's keys are decided again"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

/// The probe writes on every master, each under its own breaker: one master out of memory
/// fails it (naming `OOM`) even though the others take writes, and it passes again once that
/// master does. It leaves no key behind on any master.
#[test]
fn the_probe_writes_on_every_master() {
    use floodgate::store::Rejection;
    use floodgate::StoreError;
    let cluster = RedisCluster::start(3, 0);
    let rt = runtime();
    let clock = ManualClock::new(Nanos(START));
    let store = store_on_clock(&rt, &cluster.url(), &clock);
    rt.block_on(async {
        store.probe().await.unwrap();
        assert_eq!(store.node_breakers().len(), 3, "the probe learnt the map");
        let masters: Vec<u16> = cluster
            .nodes()
            .iter()
            .filter(|n| n.master)
            .map(|n| n.port)
            .collect();
        for &port in &masters {
            let keys = cluster.cli(port, &["DBSIZE"]).unwrap_or_default();
            assert_eq!(keys.trim(), "0", "the probe left a key on {port}");
        }
        let full = masters[masters.len() - 1];
        cluster.cli(full, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
        cluster.cli(full, &["CONFIG", "SET", "maxmemory", "1"]);
        let err = store.probe().await.unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Rejected {
                    rejection: Rejection::OutOfMemory,
                    ..
                }
            ),
            "{err}"
        );
        cluster.cli(full, &["CONFIG", "SET", "maxmemory", "0"]);
        store.probe().await.unwrap();
    });
}
