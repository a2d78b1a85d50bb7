//! The Redis store over TLS (`rediss://`), against a `redis-server` of the test's own serving
//! TLS with a certificate signed by a test CA: decisions are exact, the certificate is checked
//! (without the CA the store cannot connect), and a CA file that cannot be read is refused.
#![cfg(feature = "redis")]

use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::store::{RedisStore, Store};
use floodgate::{ConfigError, Op, StoreError};
use floodgate_redis_harness::RedisServer;

#[tokio::test]
async fn decides_over_tls_and_checks_the_certificate() {
    let server = RedisServer::start_tls();
    let window: AnyAlgorithm = FixedWindow::new(3, Duration::from_secs(3600))
        .unwrap()
        .into();
    let store = RedisStore::builder(server.tls_url())
        .tls_ca_file(server.ca_file())
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let mut allowed = 0;
    for _ in 0..5 {
        let d = store
            .apply(&window, "tls:alice", Op::Check { cost: 1 })
            .await
            .unwrap();
        allowed += u64::from(d.allowed);
    }
    assert_eq!(allowed, 3);

    // The system's roots do not know the test CA: the handshake fails.
    let untrusted = RedisStore::builder(server.tls_url())
        .timeout(Duration::from_secs(2))
        .breaker(0, Duration::ZERO)
        .build()
        .unwrap();
    let refused = untrusted
        .apply(&window, "tls:bob", Op::Check { cost: 1 })
        .await;
    match refused {
        Err(StoreError::Protocol(message)) => {
            assert!(message.contains("store.tls_ca_file"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_unreadable_ca_file_is_refused_by_name() {
    let error = RedisStore::builder("rediss://127.0.0.1:1")
        .tls_ca_file("/nonexistent/ca.pem")
        .build()
        .unwrap_err();
    assert!(
        matches!(
            error,
            ConfigError::Invalid {
                field: "tls_ca_file",
                ..
            }
        ),
        "{error}"
    );
}
