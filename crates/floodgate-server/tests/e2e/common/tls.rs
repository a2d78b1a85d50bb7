//! TLS clients for the tests: a gRPC client that checks the chain and may present a
//! certificate, HTTPS requests over rustls, and the certificate a server presents.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use floodgate_harness::Issued;
use floodgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use floodgate_server::grpc::{RateLimitDescriptor, RateLimitRequest, RateLimitServiceClient};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

/// A tonic server builder that serves over TLS as `server` and asks clients for a certificate
/// signed by the CAs in `client_ca` (mutual TLS); plain without `tls`.
pub fn tonic_server(tls: Option<(&Issued, &Path)>) -> tonic::transport::Server {
    let mut builder = tonic::transport::Server::builder();
    if let Some((server, client_ca)) = tls {
        let identity = Identity::from_pem(
            std::fs::read(&server.cert).unwrap(),
            std::fs::read(&server.key).unwrap(),
        );
        let config = tonic::transport::ServerTlsConfig::new()
            .identity(identity)
            .client_ca_root(Certificate::from_pem(std::fs::read(client_ca).unwrap()));
        builder = builder.tls_config(config).unwrap();
    }
    builder
}

/// One hit for `user` in domain `rl`.
pub fn request(user: &str) -> RateLimitRequest {
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
pub async fn grpc_client(
    grpc: &str,
    ca: &Path,
    identity: Option<&Issued>,
) -> Result<RateLimitServiceClient<Channel>, tonic::transport::Error> {
    Ok(RateLimitServiceClient::new(
        tls_channel(grpc, ca, identity).await?,
    ))
}

/// A gRPC channel to `grpc` (`http://ADDR`) over TLS trusting `ca` for `localhost`,
/// presenting `identity`.
pub async fn tls_channel(
    grpc: &str,
    ca: &Path,
    identity: Option<&Issued>,
) -> Result<Channel, tonic::transport::Error> {
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
    Channel::from_shared(url)
        .unwrap()
        .tls_config(tls)?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
}

/// How many of `n` calls for `user` were `OK` (code 1), or the first error.
pub async fn grpc_allowed(
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
pub fn client_config(ca: &Path) -> rustls::ClientConfig {
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
pub async fn https_get(http: &str, path: &str, ca: &Path) -> Result<(u16, String), String> {
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

/// The certificate a TLS handshake with `addr` (`http://ADDR`) presents, as DER.
pub async fn presented(addr: &str, ca: &Path) -> Vec<u8> {
    let addr = addr.trim_start_matches("http://");
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(ca)));
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.expect("a handshake");
    let (_, session) = tls.get_ref();
    session.peer_certificates().expect("a certificate")[0].to_vec()
}
