//! The connection to the control plane: plain TCP, or TLS with the control plane's certificate
//! checked against `CONFIG_GRPC_XDS_SERVER_TLS_CACERT` (the system's roots without it) and,
//! with a client certificate, mutual TLS.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tonic::codegen::http::Uri;
use tonic::codegen::Service;
use tonic::transport::{Channel, Endpoint};

use super::XdsError;
use crate::connections::tls::{provider, read_certs};
use crate::environment::xds::{Xds, XdsTls};

/// A channel to the control plane `settings` name, connected.
pub(super) async fn connect(settings: &Xds) -> Result<Channel, XdsError> {
    let (host, port) = host_port(&settings.server_url)?;
    let uri = format!("http://{}:{port}", bracketed(&host));
    let endpoint = Endpoint::from_shared(uri.clone())
        .map_err(|e| XdsError::Address(format!("`{}`: {e}", settings.server_url)))?
        .connect_timeout(settings.connect_timeout)
        .tcp_nodelay(true);
    let connected = match &settings.tls {
        None => endpoint.connect().await,
        Some(tls) => {
            let name = tls.server_san.clone().unwrap_or_else(|| host.clone());
            let connector = TlsConnector {
                config: Arc::new(client_config(tls)?),
                name: ServerName::try_from(name.clone()).map_err(|_| {
                    XdsError::Tls(format!("`{name}` is not a DNS name or an IP address"))
                })?,
            };
            endpoint.connect_with_connector(connector).await
        }
    };
    connected.map_err(|e| XdsError::Connect {
        server: settings.server_url.clone(),
        error: source_chain(&e),
    })
}

/// `host` and `port` of `host:port`, `[v6]:port`, or either after `http://` or `https://`.
fn host_port(url: &str) -> Result<(String, u16), XdsError> {
    let bare = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .unwrap_or(url)
        .trim_end_matches('/');
    let bad = || XdsError::Address(format!("`{url}` is not host:port"));
    let (host, port) = bare.rsplit_once(':').ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port: u16 = port.parse().map_err(|_| bad())?;
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_string(), port))
}

fn bracketed(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// An error and its causes, on one line: tonic's transport errors say little at the top.
fn source_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

/// The TLS client configuration for `tls`: its CAs (or the system's), its client certificate
/// when given, and HTTP/2 by ALPN.
fn client_config(tls: &XdsTls) -> Result<rustls::ClientConfig, XdsError> {
    let mut roots = rustls::RootCertStore::empty();
    match &tls.server_ca {
        Some(path) => {
            let certs = read_certs(path).map_err(|why| {
                XdsError::Tls(format!(
                    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT {}: {why}",
                    path.display()
                ))
            })?;
            for cert in certs {
                roots.add(cert).map_err(|e| {
                    XdsError::Tls(format!(
                        "CONFIG_GRPC_XDS_SERVER_TLS_CACERT {}: {e}",
                        path.display()
                    ))
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| XdsError::Tls(e.to_string()))?
        .with_root_certificates(roots);
    let mut config = match (&tls.client_cert, &tls.client_key) {
        (Some(cert), Some(key)) => {
            let chain = read_certs(cert).map_err(|why| {
                XdsError::Tls(format!(
                    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT {}: {why}",
                    cert.display()
                ))
            })?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                XdsError::Tls(format!(
                    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY {}: {e}",
                    key.display()
                ))
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| XdsError::Tls(format!("the client certificate and key: {e}")))?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// Connects over TCP, then TLS, to the address of each URI the channel asks for.
#[derive(Clone)]
struct TlsConnector {
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
}

impl Service<Uri> for TlsConnector {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connector = tokio_rustls::TlsConnector::from(self.config.clone());
        let name = self.name.clone();
        Box::pin(async move {
            let authority = uri
                .authority()
                .ok_or_else(|| std::io::Error::other("the control plane's URI has no host"))?
                .as_str()
                .to_string();
            let tcp = TcpStream::connect(authority).await?;
            tcp.set_nodelay(true)?;
            let stream = connector.connect(name, tcp).await?;
            Ok(TokioIo::new(stream))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_read_as_upstream_writes_them() {
        assert_eq!(
            host_port("localhost:18000").unwrap(),
            ("localhost".into(), 18000)
        );
        assert_eq!(
            host_port("envoy-gateway.envoy-gateway-system.svc.cluster.local:18001").unwrap(),
            (
                "envoy-gateway.envoy-gateway-system.svc.cluster.local".into(),
                18001
            )
        );
        assert_eq!(
            host_port("https://[::1]:18000/").unwrap(),
            ("::1".into(), 18000)
        );
        for bad in ["localhost", ":18000", "host:port", "host:70000"] {
            assert!(host_port(bad).is_err(), "{bad}");
        }
    }
}
