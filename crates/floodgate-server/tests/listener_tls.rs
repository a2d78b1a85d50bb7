//! TLS and mutual TLS on the listeners, with real clients that check the chain: the gRPC API
//! behind a client CA and a required client name (as envoyproxy/ratelimit's
//! `GRPC_CLIENT_TLS_CACERT` and `GRPC_CLIENT_TLS_SAN`), the HTTP API over HTTPS, a renewed
//! certificate served without a restart, and upstream's variables alone turning it on.
//! Certificates come from a CA the test makes with openssl.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::serve::{bare_command, config_file, serve, start, TempDir};
use floodgate_redis_harness::{Issued, RedisServer, TestCa};
use floodgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use floodgate_server::grpc::{RateLimitDescriptor, RateLimitRequest, RateLimitServiceClient};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

const DOMAIN: &str = "domains:\n  - domain: rl\n    descriptors:\n      - key: user\n        rate_limit: {unit: hour, requests_per_unit: 3}\n";

fn request(user: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "rl".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: user.into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 1,
    }
}

/// A gRPC client of `grpc` (`http://ADDR`) over TLS trusting `ca`, presenting `identity`.
async fn grpc_client(
    grpc: &str,
    ca: &Path,
    identity: Option<&Issued>,
) -> Result<RateLimitServiceClient<Channel>, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(std::fs::read(ca).unwrap()))
        .domain_name("localhost");
    if let Some(issued) = identity {
        tls = tls.identity(Identity::from_pem(
            std::fs::read(&issued.cert).unwrap(),
            std::fs::read(&issued.key).unwrap(),
        ));
    }
    let url = grpc.replace("http://", "https://");
    let channel = Channel::from_shared(url)
        .unwrap()
        .tls_config(tls)?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await?;
    Ok(RateLimitServiceClient::new(channel))
}

/// How many of `n` calls for `user` were `OK` (code 1), or the first error.
async fn grpc_allowed(
    client: &mut RateLimitServiceClient<Channel>,
    user: &str,
    n: usize,
) -> Result<usize, tonic::Status> {
    let mut ok = 0;
    for _ in 0..n {
        let answer = client.should_rate_limit(request(user)).await?.into_inner();
        ok += usize::from(answer.overall_code == 1);
    }
    Ok(ok)
}

/// A rustls client configuration trusting `ca`.
fn client_config(ca: &Path) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca).unwrap();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
        let cert: rustls::pki_types::CertificateDer<'static> = cert.unwrap();
        roots.add(cert).unwrap();
    }
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// `GET path` over HTTPS from `http` (`http://ADDR`), trusting `ca`: the status and the body,
/// or why the connection failed. One connection per request (hyper's HTTP/1.1 client over a
/// rustls session).
async fn https_get(http: &str, path: &str, ca: &Path) -> Result<(u16, String), String> {
    use http_body_util::BodyExt;
    let addr = http.trim_start_matches("http://");
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(ca)));
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let request = http::Request::get(path)
        .header("host", "localhost")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok((
        status,
        String::from_utf8_lossy(&body.to_bytes()).into_owned(),
    ))
}

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

/// The certificate a TLS handshake with `addr` (`http://ADDR`) presents, as DER.
async fn presented(addr: &str, ca: &Path) -> Vec<u8> {
    let addr = addr.trim_start_matches("http://");
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(ca)));
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.expect("a handshake");
    let (_, session) = tls.get_ref();
    session.peer_certificates().expect("a certificate")[0].to_vec()
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

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within 20 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
    let root = std::env::temp_dir().join(format!("floodgate-tls-upstream-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("ratelimit/config")).unwrap();
    std::fs::write(
        root.join("ratelimit/config/rl.yaml"),
        "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 3}\n",
    )
    .unwrap();
    let _root = TempDir(root.clone());
    let env: Vec<(&str, String)> = vec![
        ("USE_STATSD", "false".into()),
        ("REDIS_SOCKET_TYPE", "tcp".into()),
        ("REDIS_URL", format!("127.0.0.1:{}", redis.port())),
        ("RUNTIME_ROOT", root.display().to_string()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("HOST", "127.0.0.1".into()),
        ("PORT", "0".into()),
        ("GRPC_HOST", "127.0.0.1".into()),
        ("GRPC_PORT", "0".into()),
        ("DEBUG_HOST", "127.0.0.1".into()),
        ("DEBUG_PORT", "0".into()),
        ("GRPC_SERVER_USE_TLS", "true".into()),
        ("GRPC_SERVER_TLS_CERT", server.cert.display().to_string()),
        ("GRPC_SERVER_TLS_KEY", server.key.display().to_string()),
        ("GRPC_CLIENT_TLS_CACERT", ca.ca_file().display().to_string()),
        ("GRPC_CLIENT_TLS_SAN", "envoy.internal".into()),
    ];
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut command = bare_command(Path::new(env!("CARGO_BIN_EXE_floodgate")), &pairs);
    command.arg("serve");
    let node = start(command);
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
