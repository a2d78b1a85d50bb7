//! TLS to memcached (memcached's `-Z`, upstream's `MEMCACHE_TLS`), with rustls on ring: the
//! server's chain must lead to the CAs of `tls_ca_file` (upstream's `MEMCACHE_TLS_CACERT`), or to
//! the system's when none is given; a client certificate and key (`MEMCACHE_TLS_CLIENT_CERT`,
//! `MEMCACHE_TLS_CLIENT_KEY`) are presented when the server asks; and the name check (the
//! server's certificate must be for the host of `host:port`) can be turned off
//! (`MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION`), the chain still checked. The files are read and
//! parsed when the store is built: a bad one is a [`ConfigError`] naming its field.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};

use crate::ConfigError;

/// The TLS settings of a [`super::MemcachedStoreBuilder`], as given.
#[derive(Clone, Debug, Default)]
pub(crate) struct TlsSettings {
    /// Whether to speak TLS at all.
    pub(crate) enabled: bool,
    /// The CAs (PEM) instead of the system's.
    pub(crate) ca_file: Option<PathBuf>,
    /// A client certificate chain and its key (PEM files).
    pub(crate) client: Option<(PathBuf, PathBuf)>,
    /// Check the chain but not the name.
    pub(crate) skip_hostname_verification: bool,
}

impl TlsSettings {
    /// The rustls client configuration, or `None` when TLS is off.
    pub(crate) fn config(&self) -> Result<Option<Arc<rustls::ClientConfig>>, ConfigError> {
        if !self.enabled {
            return Ok(None);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = Arc::new(self.roots()?);
        let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
            .build()
            .map_err(|_| invalid("tls_ca_file", self.ca_file.as_deref(), "holds no usable CA"))?;
        let verifier: Arc<dyn ServerCertVerifier> = if self.skip_hostname_verification {
            Arc::new(AnyName(verifier))
        } else {
            verifier
        };
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|_| invalid("tls", None, "no TLS version is available"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match &self.client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = certificates("tls_client_cert_file", cert)?;
                let key_der = PrivateKeyDer::from_pem_file(key).map_err(|_| {
                    invalid("tls_client_key_file", Some(key), "is not a PEM private key")
                })?;
                builder.with_client_auth_cert(chain, key_der).map_err(|_| {
                    invalid(
                        "tls_client_key_file",
                        Some(key),
                        "does not match the client certificate",
                    )
                })?
            }
        };
        Ok(Some(Arc::new(config)))
    }

    fn roots(&self) -> Result<rustls::RootCertStore, ConfigError> {
        let mut roots = rustls::RootCertStore::empty();
        match &self.ca_file {
            Some(path) => {
                for cert in certificates("tls_ca_file", path)? {
                    roots
                        .add(cert)
                        .map_err(|_| invalid("tls_ca_file", Some(path), "holds a bad CA"))?;
                }
            }
            None => {
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
            }
        }
        Ok(roots)
    }
}

/// The name a server's certificate must be for: the host of `host:port` (an IP or a DNS name).
pub(crate) fn server_name(host: &str) -> Result<ServerName<'static>, ConfigError> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(bare.to_owned())
        .map_err(|_| ConfigError::invalid("servers", host, "is no host name TLS can check"))
}

/// The certificates of a PEM file; at least one.
fn certificates(
    field: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|_| invalid(field, Some(path), "cannot be read"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| invalid(field, Some(path), "is not PEM"))?;
    if certs.is_empty() {
        return Err(invalid(field, Some(path), "holds no certificate"));
    }
    Ok(certs)
}

fn invalid(field: &'static str, path: Option<&Path>, reason: &'static str) -> ConfigError {
    let value = path.map_or_else(String::new, |p| p.display().to_string());
    ConfigError::invalid(field, value, reason)
}

/// The WebPKI verifier with the name check off: a certificate for another name passes, any
/// other fault of the chain still fails.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
