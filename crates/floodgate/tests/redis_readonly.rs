//! A single Redis demoted to a replica under the store (as a failover does to an old master):
//! its `READONLY` answers are failures the breaker counts ([`Rejection::ReadOnly`]), and the
//! store remakes its connection, so that an address that now leads to the new master (a DNS
//! name, a proxy) is followed; or keeps it, when told to as envoyproxy/ratelimit does. Against
//! `redis-server` processes the tests start on free loopback ports, and a TCP proxy of the
//! test's own standing for the address that moves.
#![cfg(feature = "redis")]

use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::store::Rejection;
use floodgate::store::{RedisStore, Store};
use floodgate::{ManualClock, Nanos, StoreError};
use floodgate_harness::RedisServer;

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
                matches!(
                    &err,
                    StoreError::Rejected { rejection: Rejection::ReadOnly, message, .. }
                        if message.contains("read only replica")
                ),
                "call {i}: {err}"
            );
            assert!(err.to_string().contains("READONLY"), "{err}");
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

/// A TCP proxy on a free loopback port that forwards every new connection to the port in
/// `target` at the time it is accepted: an address that a failover repoints at the new master
/// (a Kubernetes Service, a DNS name, a proxy). Connections already made keep their server.
struct MovingAddress {
    port: u16,
    target: std::sync::Arc<std::sync::atomic::AtomicU16>,
}

impl MovingAddress {
    async fn start(target: u16) -> MovingAddress {
        use std::sync::atomic::{AtomicU16, Ordering};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = std::sync::Arc::new(AtomicU16::new(target));
        let to = target.clone();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let port = to.load(Ordering::SeqCst);
                tokio::spawn(async move {
                    if let Ok(mut outbound) =
                        tokio::net::TcpStream::connect(("127.0.0.1", port)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        MovingAddress { port, target }
    }

    fn point_at(&self, port: u16) {
        self.target.store(port, std::sync::atomic::Ordering::SeqCst);
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// The failover a single Redis behind one address goes through: the old master is demoted
/// (it answers `READONLY`) and the address now leads to the new one. The store drops the
/// connection that got `READONLY`, connects anew through the address, and counts on the new
/// master; with `reconnect_on_readonly(false)` it keeps the old connection and fails on.
#[test]
fn a_failover_behind_one_address_is_followed_unless_told_to_keep_the_connection() {
    for reconnect in [true, false] {
        let old = RedisServer::start();
        let new = RedisServer::start();
        let rt = runtime();
        let clock = ManualClock::new(Nanos(START));
        rt.block_on(async {
            let address = MovingAddress::start(old.port()).await;
            let store = RedisStore::builder(address.url())
                .clock(clock.clone())
                .min_ttl(Duration::from_secs(3600))
                .timeout(Duration::from_secs(2))
                .breaker(0, Duration::from_secs(1))
                .reconnect_on_readonly(reconnect)
                .build()
                .unwrap();
            let fw: AnyAlgorithm = FixedWindow::new(10, Duration::from_secs(60))
                .unwrap()
                .into();
            assert!(store.apply(&fw, "fo:k", check(1)).await.unwrap().allowed);
            // The failover: the new master takes over, the old one follows it, the address
            // moves.
            old.cli(&["REPLICAOF", "127.0.0.1", &new.port().to_string()])
                .expect("REPLICAOF");
            address.point_at(new.port());
            let err = store.apply(&fw, "fo:k", check(1)).await.unwrap_err();
            assert!(
                matches!(
                    err,
                    StoreError::Rejected {
                        rejection: Rejection::ReadOnly,
                        ..
                    }
                ),
                "{err}"
            );
            let mut followed = false;
            for _ in 0..100 {
                match store.apply(&fw, "fo:k", check(1)).await {
                    Ok(d) => {
                        assert!(d.allowed);
                        followed = true;
                        break;
                    }
                    Err(StoreError::Rejected {
                        rejection: Rejection::ReadOnly,
                        ..
                    }) => {}
                    Err(other) => panic!("{other}"),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(followed, reconnect, "reconnect_on_readonly({reconnect})");
            if reconnect {
                // Counted on the new master, whose state the old one copied from it.
                let mut raw = raw(&new).await;
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg("fo:*")
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                assert_eq!(keys, vec!["fo:{k}".to_string()]);
            }
        });
    }
}
