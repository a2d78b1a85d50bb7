//! The store over TLS, against memcached's own (`-Z`), with certificates of a test CA: the
//! chain checked against the CA file, the name checked unless told not to.

use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::store::{MemcachedStore, Store};
use floodgate::StoreError;
use floodgate_harness::{Issued, MemcachedServer, TestCa};

use crate::{check, clock_at_now, runtime};

/// A memcached serving only TLS with `issued`.
fn tls_server(issued: &Issued) -> MemcachedServer {
    let option = format!(
        "ssl_chain_cert={},ssl_key={}",
        issued.cert.display(),
        issued.key.display()
    );
    MemcachedServer::start_with(vec!["-Z".into(), "-o".into(), option])
}

fn tls_store(
    rt: &tokio::runtime::Runtime,
    server: &MemcachedServer,
    ca: &TestCa,
    skip_names: bool,
) -> MemcachedStore {
    let _guard = rt.enter();
    MemcachedStore::builder(vec![server.address()])
        .timeout(Duration::from_secs(2))
        .clock(clock_at_now())
        .tls(true)
        .tls_ca_file(ca.ca_file())
        .tls_skip_hostname_verification(skip_names)
        .build()
        .unwrap()
}

#[test]
fn decides_over_tls() {
    let ca = TestCa::new();
    let server = tls_server(&ca.issue("server", "IP:127.0.0.1,DNS:localhost"));
    let rt = runtime();
    let store = tls_store(&rt, &server, &ca, false);
    let fw: AnyAlgorithm = FixedWindow::new(2, Duration::from_secs(60)).unwrap().into();
    rt.block_on(async {
        store.probe().await.unwrap();
        let allowed: Vec<bool> = [
            store.apply(&fw, "tls", check(1)).await.unwrap().allowed,
            store.apply(&fw, "tls", check(1)).await.unwrap().allowed,
            store.apply(&fw, "tls", check(1)).await.unwrap().allowed,
        ]
        .into();
        assert_eq!(allowed, [true, true, false]);
    });
}

#[test]
fn a_certificate_for_another_name_fails_unless_names_are_not_checked() {
    let ca = TestCa::new();
    let server = tls_server(&ca.issue("elsewhere", "DNS:elsewhere.test"));
    let rt = runtime();
    let strict = tls_store(&rt, &server, &ca, false);
    let refused = rt.block_on(strict.probe());
    assert!(
        matches!(refused, Err(StoreError::Protocol(_))),
        "{refused:?}"
    );
    let lenient = tls_store(&rt, &server, &ca, true);
    rt.block_on(lenient.probe()).unwrap();
    // A CA that did not sign it fails even without the name check.
    let other = TestCa::new();
    let stranger = tls_store(&rt, &server, &other, true);
    assert!(matches!(
        rt.block_on(stranger.probe()),
        Err(StoreError::Protocol(_))
    ));
}
