//! The Redis store over TLS (`rediss://`, `rediss-cluster://`), against `redis-server`s of the
//! test's own serving TLS with certificates a test CA signed: decisions are exact, the
//! certificate is checked (without the CA the store cannot connect), client certificates are
//! presented where the server requires them, the hostname check can be skipped while the
//! chain is still checked, and a file that cannot be read is refused.
#![cfg(feature = "redis")]

mod conformance;
mod redis_common;

use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::store::{RedisStore, Store};
use floodgate::{ConfigError, Op, StoreError};
use floodgate_harness::{RedisCluster, RedisServer, TestCa};

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

/// A TLS cluster requiring client certificates: the Lua twins agree with the memory store
/// through it, and a store without a client certificate cannot connect.
#[test]
fn a_tls_cluster_with_client_certificates_decides_as_memory() {
    let ca = TestCa::new();
    let client = ca.issue("client", "DNS:floodgate-client");
    let cluster = RedisCluster::start_tls(3, 0, &ca, true);
    let rt = redis_common::runtime();
    let nodes: Vec<String> = cluster
        .servers()
        .iter()
        .map(|s| format!("rediss://127.0.0.1:{}", s.tls_port()))
        .collect();
    let certificates = redis::TlsCertificates {
        client_tls: Some(redis::ClientTlsConfig {
            client_cert: std::fs::read(&client.cert).unwrap(),
            client_key: std::fs::read(&client.key).unwrap(),
        }),
        root_cert: Some(std::fs::read(ca.ca_file()).unwrap()),
    };
    let raw = rt.block_on(async {
        redis::cluster::ClusterClientBuilder::new(nodes)
            .tls(redis::TlsMode::Secure)
            .certs(certificates)
            .build()
            .unwrap()
            .get_async_connection()
            .await
            .unwrap()
    });
    let (ca_file, cert, key) = (ca.ca_file(), client.cert.clone(), client.key.clone());
    conformance::lua_twins_agree_with_the_memory_store_with(
        &rt,
        &cluster.tls_url(),
        &|b| b.tls_ca_file(&ca_file).tls_client_cert(&cert, &key),
        raw,
    );

    let window: AnyAlgorithm = FixedWindow::new(3, Duration::from_secs(3600))
        .unwrap()
        .into();
    let without = {
        let _guard = rt.enter();
        RedisStore::builder(cluster.tls_url())
            .tls_ca_file(ca.ca_file())
            .timeout(Duration::from_secs(2))
            .breaker(0, Duration::ZERO)
            .build()
            .unwrap()
    };
    let refused = rt.block_on(without.apply(&window, "tls:carol", Op::Check { cost: 1 }));
    assert!(refused.is_err(), "{refused:?}");
}

/// A server whose certificate names another host: refused by the name check, accepted with
/// `tls_skip_hostname_verification` (the chain still checked: a certificate of another CA is
/// refused even then).
#[tokio::test]
async fn skipping_the_hostname_check_still_checks_the_chain() {
    let ca = TestCa::new();
    let elsewhere = ca.issue("elsewhere", "DNS:elsewhere.example");
    let server = RedisServer::start_tls_with(&elsewhere, &ca.ca_file(), false);
    let window: AnyAlgorithm = FixedWindow::new(3, Duration::from_secs(3600))
        .unwrap()
        .into();
    let store = |skip: bool, ca_file: std::path::PathBuf| {
        RedisStore::builder(server.tls_url())
            .tls_ca_file(ca_file)
            .tls_skip_hostname_verification(skip)
            .timeout(Duration::from_secs(2))
            .breaker(0, Duration::ZERO)
            .build()
            .unwrap()
    };
    let checked = store(false, ca.ca_file())
        .apply(&window, "tls:dan", Op::Check { cost: 1 })
        .await;
    assert!(
        matches!(checked, Err(StoreError::Protocol(_))),
        "{checked:?}"
    );
    let skipped = store(true, ca.ca_file())
        .apply(&window, "tls:dan", Op::Check { cost: 1 })
        .await
        .unwrap();
    assert!(skipped.allowed);
    let other = TestCa::new();
    let untrusted = store(true, other.ca_file())
        .apply(&window, "tls:dan", Op::Check { cost: 1 })
        .await;
    assert!(
        matches!(untrusted, Err(StoreError::Protocol(_))),
        "{untrusted:?}"
    );
}

#[test]
fn an_unreadable_client_certificate_is_refused_by_name() {
    let error = RedisStore::builder("rediss://127.0.0.1:1")
        .tls_client_cert("/nonexistent/client.crt", "/nonexistent/client.key")
        .build()
        .unwrap_err();
    assert!(
        matches!(
            error,
            ConfigError::Invalid {
                field: "tls_client_cert_file",
                ..
            }
        ),
        "{error}"
    );
}
