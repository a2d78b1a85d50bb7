//! The `tls` section: TLS, and mutual TLS, on the gRPC and HTTP listeners
//! (`crate::connections::tls`). Read at start-up; the files themselves are read again
//! whenever they change.
//!
//! ```yaml
//! tls:
//!   grpc:                          # envoyproxy/ratelimit's GRPC_SERVER_USE_TLS
//!     cert_file: /etc/tls/tls.crt  # GRPC_SERVER_TLS_CERT: the chain, leaf first
//!     key_file: /etc/tls/tls.key   # GRPC_SERVER_TLS_KEY
//!     client_ca_file: /etc/tls/ca.crt   # GRPC_CLIENT_TLS_CACERT: clients must present a certificate it signed
//!     client_san: envoy.internal   # GRPC_CLIENT_TLS_SAN: and naming this DNS name or IP address
//!   http:
//!     cert_file: /etc/tls/tls.crt
//!     key_file: /etc/tls/tls.key
//! ```

use std::path::PathBuf;

use serde::Deserialize;

use super::ConfigFileError;

/// The `tls` section (see the [module documentation](self)).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// TLS on the gRPC listener (not on a unix socket).
    #[serde(default)]
    pub grpc: Option<ListenerTls>,
    /// TLS on the HTTP listener.
    #[serde(default)]
    pub http: Option<ListenerTls>,
}

/// One listener's TLS files.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerTls {
    /// The server's certificate chain (PEM, leaf first).
    pub cert_file: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// The CAs (PEM) client certificates must chain to: with it, every client must present
    /// one (mutual TLS).
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    /// A DNS name or IP address every client certificate must name (needs `client_ca_file`).
    #[serde(default)]
    pub client_san: Option<String>,
}

impl TlsConfig {
    /// Checks what can be checked without reading the files; the error names the field.
    pub fn validate(&self) -> Result<(), ConfigFileError> {
        for (name, listener) in [("grpc", &self.grpc), ("http", &self.http)] {
            if let Some(l) = listener {
                if l.client_san.is_some() && l.client_ca_file.is_none() {
                    return Err(ConfigFileError::invalid(
                        format!("tls.{name}.client_san"),
                        "needs tls.{name}.client_ca_file: only a verified client certificate has a name to check"
                            .replace("{name}", name),
                    ));
                }
            }
        }
        Ok(())
    }
}
