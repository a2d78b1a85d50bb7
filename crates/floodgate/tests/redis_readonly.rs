//! A single Redis demoted to a replica under the store (as a failover does to an old master):
//! its `READONLY` answers are link failures, and the store remakes its connection. Against
//! `redis-server` processes the test starts on free loopback ports.
#![cfg(feature = "redis")]

use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::store::{RedisStore, Store};
use floodgate::{ManualClock, Nanos, StoreError};
use floodgate_redis_harness::RedisServer;

mod redis_common;
use redis_common::{check, raw, runtime, START};

/// A master demoted to a replica (`REPLICAOF`) answers the store's writes with `READONLY`: each
/// such call fails as a link failure (the breaker counts it) and the store drops its connection
/// for a fresh one; once the server is a master again, calls succeed by themselves.
#[test]
fn a_demoted_master_is_a_link_failure_and_the_connection_is_remade() {
    use floodgate::store::redis::BreakerState;
    let server = RedisServer::start();
    let other = RedisServer::start();
    let rt = runtime();
    let clock = ManualClock::new(Nanos(START));
    rt.block_on(async {
        let store = RedisStore::builder(server.url())
            .clock(clock.clone())
            .min_ttl(Duration::from_secs(3600))
            .timeout(Duration::from_secs(2))
            .breaker(2, Duration::from_secs(1))
            .build()
            .unwrap();
        let mut raw = raw(&server).await;
        let me: i64 = redis::cmd("CLIENT")
            .arg("ID")
            .query_async(&mut raw)
            .await
            .unwrap();
        // The ids of the store's connections.
        let clients = |raw: &mut redis::aio::MultiplexedConnection| {
            let mut raw = raw.clone();
            async move {
                let list: String = redis::cmd("CLIENT")
                    .arg("LIST")
                    .arg("TYPE")
                    .arg("normal")
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                list.lines()
                    .filter_map(|l| l.strip_prefix("id=")?.split(' ').next()?.parse().ok())
                    .filter(|&id: &i64| id != me)
                    .collect::<Vec<i64>>()
            }
        };
        let fw: AnyAlgorithm = FixedWindow::new(10, Duration::from_secs(60))
            .unwrap()
            .into();
        assert!(store.apply(&fw, "ro:k", check(1)).await.unwrap().allowed);
        let before = clients(&mut raw).await;
        assert!(!before.is_empty());

        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(other.port())
            .query_async(&mut raw)
            .await
            .unwrap();
        for i in 0..2 {
            let err = store.apply(&fw, "ro:k", check(1)).await.unwrap_err();
            assert!(
                matches!(&err, StoreError::Unavailable(m) if m.contains("ReadOnly")),
                "call {i}: {err}"
            );
        }
        assert_eq!(store.breaker_state(), BreakerState::Open);
        // The connection that got READONLY was dropped (a new one is made by the next call).
        let mut remade = false;
        for _ in 0..200 {
            let now = clients(&mut raw).await;
            if now.iter().all(|id| !before.contains(id)) {
                remade = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(remade, "the store still uses {before:?}");

        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query_async(&mut raw)
            .await
            .unwrap();
        clock.advance(Duration::from_secs(1));
        let d = store.apply(&fw, "ro:k", check(1)).await.unwrap();
        assert!(d.allowed);
        assert_eq!(store.breaker_state(), BreakerState::Closed);
    });
}
