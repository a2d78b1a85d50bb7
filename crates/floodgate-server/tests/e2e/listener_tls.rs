//! TLS and mutual TLS on the listeners, with real clients that check the chain: the gRPC API
//! behind a client CA and a required client name (as envoyproxy/ratelimit's
//! `GRPC_CLIENT_TLS_CACERT` and `GRPC_CLIENT_TLS_SAN`), the HTTP API over HTTPS, a renewed
//! certificate served without a restart, and upstream's variables alone turning it on.
//! Certificates come from a CA the test makes with openssl.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::serve::{config_file, eventually, serve, TempDir};
use common::tls::{grpc_allowed, grpc_client, https_get, presented};
use common::upstream::{loopback_env, runtime_dir, serve_with, set};
use floodgate_harness::{RedisServer, TestCa};

const DOMAIN: &str = "domains:\n  - domain: rl\n    descriptors:\n      - key: user\n        rate_limit: {unit: hour, requests_per_unit: 3}\n";

#[tokio::test]
async fn grpc_requires_a_named_client_certificate_and_http_answers_over_https() {
    let ca = TestCa::new();
    let server = ca.issue("server", "IP:127.0.0.1,DNS:localhost");
    let envoy = ca.issue("envoy", "DNS:envoy.internal");
    let stranger = ca.issue("stranger", "DNS:stranger.internal");
    let outsider_ca = TestCa::new();
    let outsider = outsider_ca.issue("outsider", "DNS:envoy.internal");
    let (_dir, path) = config_file(&format!(
        "{DOMAIN}tls:\n  grpc:\n    cert_file: {cert}\n    key_file: {key}\n    client_ca_file: {ca}\n    client_san: envoy.internal\n  http:\n    cert_file: {cert}\n    key_file: {key}\n",
        cert = server.cert.display(),
        key = server.key.display(),
        ca = ca.ca_file().display(),
    ));
    let node = serve(&path, "memory", &[]);

    // The named client is served, and limited exactly.
    let mut client = grpc_client(&node.grpc, &ca.ca_file(), Some(&envoy))
        .await
        .expect("a TLS channel");
    assert_eq!(grpc_allowed(&mut client, "alice", 5).await.unwrap(), 3);
    // A certificate of the CA naming someone else, one of another CA, or none: no call
    // gets through.
    for identity in [Some(&stranger), Some(&outsider), None] {
        let refused = match grpc_client(&node.grpc, &ca.ca_file(), identity).await {
            Err(_) => true,
            Ok(mut client) => grpc_allowed(&mut client, "mallory", 1).await.is_err(),
        };
        assert!(refused, "{identity:?} was served");
    }
    // A client that does not trust the server's CA does not connect.
    let untrusting = match grpc_client(&node.grpc, &outsider_ca.ca_file(), Some(&envoy)).await {
        Err(_) => true,
        Ok(mut client) => grpc_allowed(&mut client, "trudy", 1).await.is_err(),
    };
    assert!(untrusting);

    // HTTPS, checked against the CA.
    let health = https_get(&node.http, "/healthcheck", &ca.ca_file()).await;
    assert_eq!(health, Ok((200, "OK".to_string())));
    let (_, metrics) = https_get(&node.http, "/metrics", &ca.ca_file())
        .await
        .unwrap();
    let failures: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("floodgate_tls_handshake_failures_total{listener=\"grpc\"} "))
        .and_then(|n| n.parse().ok())
        .expect("the handshake failures are counted");
    assert!(failures >= 3, "{metrics}");
    // Plain HTTP on the TLS port is not served; nor is a client without the CA.
    let plain = reqwest::Client::new()
        .get(format!("{}/healthcheck", node.http))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(plain.map_or(true, |r| !r.status().is_success()));
    let untrusting = https_get(&node.http, "/healthcheck", &outsider_ca.ca_file()).await;
    assert!(untrusting.is_err(), "{untrusting:?}");
}

fn der(pem_file: &Path) -> Vec<u8> {
    let pem = std::fs::read(pem_file).unwrap();
    let cert: rustls::pki_types::CertificateDer<'static> =
        rustls::pki_types::pem::PemObject::from_pem_slice(&pem).unwrap();
    cert.to_vec()
}

/// Writes `from` over `to` in one step (a new file renamed over the old), as certificate
/// managers do.
fn replace(from: &Path, to: &Path) {
    let temporary = to.with_extension("new");
    std::fs::copy(from, &temporary).unwrap();
    std::fs::rename(&temporary, to).unwrap();
}

#[tokio::test]
async fn a_renewed_certificate_is_served_without_a_restart() {
    let ca = TestCa::new();
    let first = ca.issue("first", "IP:127.0.0.1,DNS:localhost");
    let second = ca.issue("second", "IP:127.0.0.1,DNS:localhost");
    let dir = std::env::temp_dir().join(format!("floodgate-tls-renew-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let _dir = TempDir(dir.clone());
    let (cert, key): (PathBuf, PathBuf) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::copy(&first.cert, &cert).unwrap();
    std::fs::copy(&first.key, &key).unwrap();
    let (_config_dir, path) = config_file(&format!(
        "{DOMAIN}tls:\n  http:\n    cert_file: {}\n    key_file: {}\n",
        cert.display(),
        key.display()
    ));
    let node = serve(&path, "memory", &[]);
    assert_eq!(presented(&node.http, &ca.ca_file()).await, der(&first.cert));

    // The key first, then the certificate: in between the pair does not match, which keeps
    // the first one, and the second is served once both are there.
    replace(&second.key, &key);
    replace(&second.cert, &cert);
    let (http, ca_file) = (node.http.clone(), ca.ca_file());
    let expected = der(&second.cert);
    eventually("the renewed certificate is presented", || {
        let (http, ca_file, expected) = (http.clone(), ca_file.clone(), expected.clone());
        async move { presented(&http, &ca_file).await == expected }
    })
    .await;

    // A broken file keeps the running certificate, and the failure is counted.
    let failed = |metrics: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix("floodgate_tls_reloads_total{listener=\"http\",result=\"failed\"} ")
            })
            .and_then(|n| n.parse().ok())
            .expect("the reloads are counted")
    };
    let (_, metrics) = https_get(&node.http, "/metrics", &ca.ca_file())
        .await
        .unwrap();
    let before = failed(&metrics);
    std::fs::write(&cert, "not a certificate").unwrap();
    eventually("the failed reload is counted", || {
        let (http, ca_file) = (node.http.clone(), ca.ca_file());
        async move {
            let (_, metrics) = https_get(&http, "/metrics", &ca_file).await.unwrap();
            failed(&metrics) > before
        }
    })
    .await;
    assert_eq!(
        presented(&node.http, &ca.ca_file()).await,
        der(&second.cert)
    );
}

#[tokio::test]
async fn upstream_variables_put_mutual_tls_on_grpc() {
    let redis = RedisServer::start();
    let ca = TestCa::new();
    let server = ca.issue("server", "IP:127.0.0.1,DNS:localhost");
    let envoy = ca.issue("envoy", "DNS:envoy.internal");
    let root = runtime_dir("tls-upstream", 3);
    let mut env = loopback_env(&root.0, &format!("127.0.0.1:{}", redis.port()));
    for (name, value) in [
        ("GRPC_SERVER_USE_TLS", "true".to_string()),
        ("GRPC_SERVER_TLS_CERT", server.cert.display().to_string()),
        ("GRPC_SERVER_TLS_KEY", server.key.display().to_string()),
        ("GRPC_CLIENT_TLS_CACERT", ca.ca_file().display().to_string()),
        ("GRPC_CLIENT_TLS_SAN", "envoy.internal".to_string()),
    ] {
        set(&mut env, name, value);
    }
    let node = serve_with(&env);
    let mut client = grpc_client(&node.grpc, &ca.ca_file(), Some(&envoy))
        .await
        .expect("a TLS channel");
    assert_eq!(grpc_allowed(&mut client, "alice", 5).await.unwrap(), 3);
    let without = match grpc_client(&node.grpc, &ca.ca_file(), None).await {
        Err(_) => true,
        Ok(mut client) => grpc_allowed(&mut client, "mallory", 1).await.is_err(),
    };
    assert!(without, "a client without a certificate was served");
}

#[test]
fn check_config_reads_the_tls_files_and_names_the_one_that_fails() {
    let ca = TestCa::new();
    let first = ca.issue("first", "DNS:localhost");
    let second = ca.issue("second", "DNS:localhost");
    let check = |cert: &Path, key: &Path| {
        let (_dir, path) = config_file(&format!(
            "{DOMAIN}tls:\n  grpc: {{cert_file: {}, key_file: {}}}\n",
            cert.display(),
            key.display()
        ));
        std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
            .arg("check-config")
            .arg(&path)
            .output()
            .unwrap()
    };
    assert!(check(&first.cert, &first.key).status.success());
    // A key of another certificate.
    let mismatched = check(&first.cert, &second.key);
    assert!(!mismatched.status.success());
    let stderr = String::from_utf8_lossy(&mismatched.stderr);
    assert!(stderr.contains("tls.grpc.key_file"), "{stderr}");
}
