//! TLS to the collector, for OTLP over gRPC (tonic's client) and over HTTP (opentelemetry's
//! hyper client through a rustls connector): the collector's certificate is checked against
//! `OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE`'s CAs, else the system's roots, and for mutual
//! TLS this service presents `…_CLIENT_CERTIFICATE` with `…_CLIENT_KEY`. The files are read
//! once, at start-up; one that cannot be read or holds no usable PEM stops start-up, naming
//! its variable and path (never its content).

use std::path::Path;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use opentelemetry_http::hyper::HyperClient;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::TracesError;
use crate::environment::traces::Traces;

const CA: &str = "OTEL_EXPORTER_OTLP_CERTIFICATE";
const CLIENT_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE";
const CLIENT_KEY: &str = "OTEL_EXPORTER_OTLP_CLIENT_KEY";

/// The HTTP client of OTLP over HTTPS: HTTP/1.1 over rustls (ring), each request bounded by
/// `traces.timeout`.
pub(super) type HttpsClient = HyperClient<HttpsConnector<HttpConnector>>;

/// The HTTPS client `traces` describes (see the [module documentation](self)).
pub(super) fn https_client(traces: &Traces) -> Result<HttpsClient, TracesError> {
    let mut roots = rustls::RootCertStore::empty();
    match &traces.tls.ca {
        Some(ca) => {
            for cert in certificates(CA, ca)? {
                roots
                    .add(cert)
                    .map_err(|e| invalid(CA, ca, format!("not a CA certificate: {e}")))?;
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(crate::connections::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TracesError::Exporter(e.to_string()))?
        .with_root_certificates(roots);
    let config = match (&traces.tls.client_cert, &traces.tls.client_key) {
        (Some(cert), Some(key)) => {
            let chain = certificates(CLIENT_CERTIFICATE, cert)?;
            let private = PrivateKeyDer::from_pem_slice(&read(CLIENT_KEY, key)?)
                .map_err(|e| invalid(CLIENT_KEY, key, format!("no private key read: {e}")))?;
            builder.with_client_auth_cert(chain, private).map_err(|e| {
                invalid(
                    CLIENT_KEY,
                    key,
                    format!("does not go with the certificate: {e}"),
                )
            })?
        }
        _ => builder.with_no_client_auth(),
    };
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .build();
    Ok(HyperClient::new(connector, traces.timeout, None))
}

/// The TLS settings of OTLP over gRPC (tonic reads the PEM itself).
pub(super) fn grpc_config(
    traces: &Traces,
) -> Result<opentelemetry_otlp::tonic_types::transport::ClientTlsConfig, TracesError> {
    use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig, Identity};
    let mut config = ClientTlsConfig::new();
    config = match &traces.tls.ca {
        Some(ca) => config.ca_certificate(Certificate::from_pem(read(CA, ca)?)),
        None => config.with_native_roots(),
    };
    if let (Some(cert), Some(key)) = (&traces.tls.client_cert, &traces.tls.client_key) {
        config = config.identity(Identity::from_pem(
            read(CLIENT_CERTIFICATE, cert)?,
            read(CLIENT_KEY, key)?,
        ));
    }
    Ok(config)
}

/// The file `variable` names.
fn read(variable: &'static str, path: &Path) -> Result<Vec<u8>, TracesError> {
    std::fs::read(path).map_err(|source| TracesError::File {
        variable,
        path: path.display().to_string(),
        source,
    })
}

/// The certificates of the PEM file `variable` names (at least one).
fn certificates(
    variable: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TracesError> {
    let certs = CertificateDer::pem_slice_iter(&read(variable, path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(variable, path, format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(variable, path, "holds no certificate".into()));
    }
    Ok(certs)
}

fn invalid(variable: &'static str, path: &Path, why: String) -> TracesError {
    TracesError::Pem {
        variable,
        path: path.display().to_string(),
        why,
    }
}
