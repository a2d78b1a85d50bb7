//! What a TLS connection to Redis trusts and presents: the files the builder read, as the
//! Redis client takes them. A leaf: the single, cluster and Sentinel connections all use it.

/// What a TLS connection trusts and presents (from the builder's files, read at build).
#[derive(Clone, Default)]
pub(super) struct TlsFiles {
    /// The CAs (PEM) the server's certificate must chain to, instead of the system's.
    pub(super) ca: Option<Vec<u8>>,
    /// A client certificate chain and its key (PEM), presented when the server asks.
    pub(super) client: Option<(Vec<u8>, Vec<u8>)>,
    /// Check the server's chain but not the name it is for (envoyproxy/ratelimit's
    /// `REDIS_TLS_SKIP_HOSTNAME_VERIFICATION`).
    pub(super) skip_hostname_verification: bool,
}

impl TlsFiles {
    /// The certificates redis-rs takes, when any file was given.
    pub(super) fn certificates(&self) -> Option<redis::TlsCertificates> {
        if self.ca.is_none() && self.client.is_none() {
            return None;
        }
        Some(redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.ca.clone(),
        })
    }

    /// A client for `url` with these certificates (and the hostname check off when asked).
    pub(super) fn client(&self, url: &str) -> redis::RedisResult<redis::Client> {
        let client = match self.certificates() {
            None => redis::Client::open(url)?,
            Some(certificates) => redis::Client::build_with_tls(url, certificates)?,
        };
        if !self.skip_hostname_verification || !url.starts_with("rediss://") {
            return Ok(client);
        }
        let info = client.get_connection_info().clone();
        let mut address = info.addr().clone();
        address.set_danger_accept_invalid_hostnames(true);
        redis::Client::open(info.set_addr(address))
    }

    /// The address of a `rediss://` URL, carrying these certificates.
    pub(super) fn address(&self, url: &str) -> redis::RedisResult<redis::ConnectionAddr> {
        Ok(self.client(url)?.get_connection_info().addr().clone())
    }
}
