//! A Redis store that cannot be used says why, by kind, and fast: a refused connection, a
//! missing or wrong password, a database the server does not have, a peer that is not Redis.
//! Each against a real process of the test's own (a `redis-server`, or a listener that answers
//! like an HTTP server), with the store's default timeout of 50 ms: none of them may look like
//! a timeout. And a store whose Redis was down when it was built is used once Redis is up.
//! Setting a connection up has its own bound, apart from a call's: a slow handshake makes the
//! first calls time out, not the connection fail.
#![cfg(feature = "redis")]

use std::io::{Read, Write};
use std::time::Duration;

use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::store::{RedisStore, Store};
use floodgate::StoreError;
use floodgate_harness::RedisServer;

mod redis_common;
use redis_common::{check, runtime};

/// What a store at `url`, with the default timeout and breaker, answers to a probe and to a
/// decision.
fn failures(url: &str) -> (StoreError, StoreError) {
    let rt = runtime();
    rt.block_on(async {
        let store = RedisStore::builder(url).build().unwrap();
        let tb: AnyAlgorithm = TokenBucket::new(10.0, 10).unwrap().into();
        let probed = store.probe().await.expect_err("the store cannot be used");
        let decided = store
            .apply(&tb, "k:alice", check(1))
            .await
            .expect_err("the store cannot be used");
        (probed, decided)
    })
}

#[test]
fn a_refused_connection_is_refused_not_a_timeout() {
    // A port nothing listens on: a server started and stopped.
    let mut server = RedisServer::start();
    server.kill();
    let (probed, decided) = failures(&server.url());
    for e in [probed, decided] {
        assert!(matches!(e, StoreError::Refused(_)), "{e:?}");
        assert!(e.to_string().contains("refused"), "{e}");
        assert!(e.is_transient() && e.is_store_failure());
    }
}

#[test]
fn a_missing_password_says_the_server_requires_one() {
    let server = RedisServer::start_with_password("s3cret-pw");
    let (probed, decided) = failures(&server.url());
    for e in [probed, decided] {
        assert!(matches!(e, StoreError::Auth(_)), "{e:?}");
        assert!(
            e.to_string().contains("the server requires a password"),
            "{e}"
        );
        assert!(!e.is_transient() && e.is_store_failure());
    }
}

#[test]
fn a_wrong_password_is_an_authentication_failure_and_never_shown() {
    let server = RedisServer::start_with_password("s3cret-pw");
    let url = format!("redis://:not-the-pw@127.0.0.1:{}", server.port());
    let (probed, decided) = failures(&url);
    for e in [probed, decided] {
        assert!(matches!(e, StoreError::Auth(_)), "{e:?}");
        assert!(e.to_string().contains("wrong user name or password"), "{e}");
        assert!(!e.to_string().contains("not-the-pw"), "{e}");
    }
    // A password given to a server that has none is refused the same way.
    let plain = RedisServer::start();
    let url = format!("redis://:not-the-pw@127.0.0.1:{}", plain.port());
    let (probed, _) = failures(&url);
    assert!(matches!(probed, StoreError::Auth(_)), "{probed:?}");
}

#[test]
fn a_database_the_server_lacks_is_named() {
    let server = RedisServer::start();
    let (probed, decided) = failures(&format!("{}/99", server.url()));
    for e in [probed, decided] {
        assert!(matches!(e, StoreError::Protocol(_)), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("database"), "{text}");
    }
}

#[test]
fn a_peer_that_is_not_redis_is_a_protocol_error() {
    // A listener that answers anything like a web server would, then closes.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Left running: it ends with the test's process.
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 256];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        }
    });
    let (probed, decided) = failures(&format!("redis://127.0.0.1:{port}"));
    for e in [probed, decided] {
        assert!(matches!(e, StoreError::Protocol(_)), "{e:?}");
        assert!(e.to_string().contains("Redis server"), "{e}");
    }
}

/// Built while its Redis is down, the store connects by itself once Redis is up: a failed first
/// connection is not kept.
#[test]
fn a_store_built_while_redis_is_down_is_used_once_it_is_up() {
    let mut server = RedisServer::start();
    server.kill();
    let rt = runtime();
    rt.block_on(async {
        let store = RedisStore::builder(server.url())
            .breaker(0, Duration::from_secs(1))
            .build()
            .unwrap();
        let e = store.probe().await.unwrap_err();
        assert!(matches!(e, StoreError::Refused(_)), "{e:?}");
        server.restart();
        let mut ok = false;
        // Waits (boundedly) for the connection to be made.
        for _ in 0..200 {
            if store.probe().await.is_ok() {
                ok = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(ok, "the store never connected after Redis came up");
        let tb: AnyAlgorithm = TokenBucket::new(10.0, 10).unwrap().into();
        let d = store.apply(&tb, "k:alice", check(1)).await.unwrap();
        assert_eq!((d.allowed, d.remaining), (true, 9));
    });
}

/// A loopback address in front of a Redis that holds every new connection for `delay` before
/// passing its bytes on, the way a busy node's first TLS handshake can: whatever the client
/// sends to set the connection up (`HELLO`, `CLIENT SETINFO`, …) is answered only then.
struct SlowHandshake {
    port: u16,
}

impl SlowHandshake {
    async fn start(target: u16, delay: Duration) -> SlowHandshake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    if let Ok(mut outbound) =
                        tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        SlowHandshake { port }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

/// Whether `store` answers a probe within `attempts` tries, 25 ms apart.
async fn comes_up(store: &RedisStore, attempts: u32) -> bool {
    for _ in 0..attempts {
        if store.probe().await.is_ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

/// A connection whose setup takes 600 ms, with calls bounded by 50 ms: calls made while it is
/// being set up time out (they are decisions, bounded as such), and once the connection is up
/// the store is used. Bounded by the call timeout instead, as it was, the setup could never
/// finish; with a `connect_timeout` shorter than the handshake it never does.
#[test]
fn setting_a_connection_up_is_bounded_apart_from_a_call() {
    let server = RedisServer::start();
    let delay = Duration::from_millis(600);
    let rt = runtime();
    rt.block_on(async {
        let proxy = SlowHandshake::start(server.port(), delay).await;
        let store = RedisStore::builder(proxy.url())
            .timeout(Duration::from_millis(50))
            .connect_timeout(Duration::from_secs(10))
            .breaker(0, Duration::from_secs(1))
            .build()
            .unwrap();
        let tb: AnyAlgorithm = TokenBucket::new(10.0, 10).unwrap().into();
        // Made at once, well inside the handshake the proxy holds back.
        let e = store.apply(&tb, "k:alice", check(1)).await.unwrap_err();
        assert!(matches!(e, StoreError::Timeout(_)), "{e:?}");
        assert!(
            comes_up(&store, 400).await,
            "the slow connection was never used"
        );
        let d = store.apply(&tb, "k:alice", check(1)).await.unwrap();
        assert_eq!((d.allowed, d.remaining), (true, 9));

        // A connect timeout shorter than the handshake: every attempt is cut short.
        let store = RedisStore::builder(proxy.url())
            .timeout(Duration::from_millis(50))
            .connect_timeout(Duration::from_millis(100))
            .breaker(0, Duration::from_secs(1))
            .build()
            .unwrap();
        assert!(
            !comes_up(&store, 60).await,
            "a 600 ms handshake passed a 100 ms connect timeout"
        );
    });
}

/// Built outside a Tokio runtime, the store says it needs one, for every kind of URL, instead of
/// the client's panic ("there is no reactor running"); inside one it builds.
#[test]
fn a_store_built_outside_a_runtime_says_it_needs_one() {
    for url in [
        "redis://127.0.0.1:1",
        "rediss://127.0.0.1:1",
        "redis-cluster://127.0.0.1:1,127.0.0.1:2",
        "redis-sentinel://127.0.0.1:1/mymaster",
    ] {
        let e = RedisStore::builder(url).build().unwrap_err();
        let text = e.to_string();
        assert!(text.contains("`runtime`"), "{url}: {text}");
        assert!(text.contains("Tokio runtime"), "{url}: {text}");
        let rt = runtime();
        let _inside = rt.enter();
        RedisStore::builder(url).build().unwrap();
    }
}
