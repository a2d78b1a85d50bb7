//! TLS on a listener (the config's `tls.grpc`, `tls.http`; envoyproxy/ratelimit's
//! `GRPC_SERVER_USE_TLS` and the rest): the server's certificate, and, with a client CA,
//! mutual TLS, where every client must present a certificate that chains to it (and names
//! `client_san`, when set).
//!
//! The files are read at start-up (an unreadable or invalid one stops it, naming the field and
//! the file) and again whenever they change ([`TlsTerminator::reload`], driven by
//! `runtime/watch.rs`): new connections get the new certificate, open ones keep theirs. A
//! change that does not load (a key that does not match its certificate, a half-written file)
//! keeps the running one; it is logged and counted in
//! `floodgate_tls_reloads_total{listener,result="failed"}`.
//!
//! The handshake runs on the connection's own task, bounded by
//! `connections.header_read_timeout`; one that fails (a client that does not trust the
//! certificate, no client certificate where one is required) closes the connection and is
//! counted in `floodgate_tls_handshake_failures_total{listener}`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
};

use super::Conn;
use crate::config::ListenerTls;
use crate::prometheus::{Exposition, Kind};

/// Why a listener's TLS files cannot be used: the field, the file and the cause.
#[derive(Debug, thiserror::Error)]
#[error("`{field}` ({}): {why}", path.display())]
pub struct TlsError {
    /// The config field (`tls.grpc.cert_file`, …).
    pub field: String,
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub why: String,
}

/// A listener's TLS: the current server configuration, reloaded from its files.
#[derive(Debug)]
pub struct TlsTerminator {
    listener: &'static str,
    files: ListenerTls,
    alpn: Vec<Vec<u8>>,
    current: ArcSwap<ServerConfig>,
    reloads_ok: AtomicU64,
    reloads_failed: AtomicU64,
    handshake_failures: AtomicU64,
}

impl TlsTerminator {
    /// Reads `files` for `listener` (`grpc` or `http`, for errors and metrics), offering the
    /// application protocols `alpn` (`h2` for gRPC; `h2` and `http/1.1` for HTTP).
    pub fn load(
        listener: &'static str,
        files: &ListenerTls,
        alpn: &[&[u8]],
    ) -> Result<TlsTerminator, TlsError> {
        let alpn: Vec<Vec<u8>> = alpn.iter().map(|p| p.to_vec()).collect();
        let config = server_config(listener, files, &alpn)?;
        Ok(TlsTerminator {
            listener,
            files: files.clone(),
            alpn,
            current: ArcSwap::from_pointee(config),
            reloads_ok: AtomicU64::new(0),
            reloads_failed: AtomicU64::new(0),
            handshake_failures: AtomicU64::new(0),
        })
    }

    /// The listener's name.
    pub fn listener(&self) -> &'static str {
        self.listener
    }

    /// The files read: the certificate, the key and the client CA.
    pub fn files(&self) -> Vec<PathBuf> {
        let mut files = vec![self.files.cert_file.clone(), self.files.key_file.clone()];
        files.extend(self.files.client_ca_file.clone());
        files
    }

    /// Reads the files again; on success new connections use them, on failure the running
    /// configuration stays. Either way it is counted.
    pub fn reload(&self) -> Result<(), TlsError> {
        match server_config(self.listener, &self.files, &self.alpn) {
            Ok(config) => {
                self.current.store(Arc::new(config));
                self.reloads_ok.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                self.reloads_failed.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// The server side of the handshake on `conn`, with the current configuration.
    pub async fn accept(&self, conn: Conn) -> std::io::Result<Conn> {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.current.load_full());
        match acceptor.accept(conn).await {
            Ok(stream) => Ok(Conn::Tls(Box::new(stream))),
            Err(e) => {
                self.handshake_failed();
                Err(e)
            }
        }
    }

    /// Counts a handshake that failed or did not finish in time.
    pub fn handshake_failed(&self) {
        self.handshake_failures.fetch_add(1, Ordering::Relaxed);
    }
}

/// Appends `floodgate_tls_reloads_total` and `floodgate_tls_handshake_failures_total` for
/// `terminators` (each its listener's series) to a Prometheus text page; nothing without any.
pub(crate) fn render(terminators: &[&TlsTerminator], out: &mut String) {
    if terminators.is_empty() {
        return;
    }
    let mut text = Exposition::on(out);
    let mut reloads = text.family(
        "floodgate_tls_reloads_total",
        Kind::Counter,
        "Reloads of a listener's TLS files after they changed, by result.",
    );
    for t in terminators {
        reloads
            .sample(
                &[("listener", t.listener), ("result", "ok")],
                t.reloads_ok.load(Ordering::Relaxed),
            )
            .sample(
                &[("listener", t.listener), ("result", "failed")],
                t.reloads_failed.load(Ordering::Relaxed),
            );
    }
    let mut failures = text.family(
        "floodgate_tls_handshake_failures_total",
        Kind::Counter,
        "TLS handshakes that failed or did not finish in time.",
    );
    for t in terminators {
        failures.sample(
            &[("listener", t.listener)],
            t.handshake_failures.load(Ordering::Relaxed),
        );
    }
}

/// The crypto the listeners use: ring, as the rest of the build.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn server_config(
    listener: &'static str,
    files: &ListenerTls,
    alpn: &[Vec<u8>],
) -> Result<ServerConfig, TlsError> {
    let error = |field: &str, path: &Path, why: String| TlsError {
        field: format!("tls.{listener}.{field}"),
        path: path.to_path_buf(),
        why,
    };
    let certs =
        read_certs(&files.cert_file).map_err(|why| error("cert_file", &files.cert_file, why))?;
    let key = PrivateKeyDer::from_pem_file(&files.key_file).map_err(|e| {
        error(
            "key_file",
            &files.key_file,
            format!("no private key read: {e}"),
        )
    })?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| error("cert_file", &files.cert_file, e.to_string()))?;
    let builder = match &files.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in read_certs(ca).map_err(|why| error("client_ca_file", ca, why))? {
                roots.add(cert).map_err(|e| {
                    error("client_ca_file", ca, format!("not a CA certificate: {e}"))
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| error("client_ca_file", ca, e.to_string()))?;
            let verifier: Arc<dyn ClientCertVerifier> = match &files.client_san {
                None => verifier,
                Some(san) => Arc::new(NamedClients {
                    inner: verifier,
                    name: ServerName::try_from(san.clone()).map_err(|_| {
                        error(
                            "client_san",
                            ca,
                            format!("`{san}` is not a DNS name or an IP address"),
                        )
                    })?,
                }),
            };
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        error(
            "key_file",
            &files.key_file,
            format!("does not go with the certificate: {e}"),
        )
    })?;
    config.alpn_protocols = alpn.to_vec();
    Ok(config)
}

/// The certificates of a PEM file (at least one).
pub(crate) fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot be read: {e}"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err("holds no certificate".to_string());
    }
    Ok(certs)
}

/// A client verifier that also requires the client's certificate to name `name` (a DNS name or
/// an IP address in its subject alternative names), as envoyproxy/ratelimit's
/// `GRPC_CLIENT_TLS_SAN`.
#[derive(Debug)]
struct NamedClients {
    inner: Arc<dyn ClientCertVerifier>,
    name: ServerName<'static>,
}

impl ClientCertVerifier for NamedClients {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity).map_err(|_| {
            rustls::Error::InvalidCertificate(rustls::CertificateError::BadEncoding)
        })?;
        cert.verify_is_valid_for_subject_name(&self.name)
            .map_err(|_| {
                rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName)
            })?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
