//! The servers named by a DNS SRV record (upstream's `MEMCACHE_SRV`, refreshed every
//! `MEMCACHE_SRV_REFRESH`), as upstream lists them so that keys land on the same servers:
//! each record's `target:port`, the target as DNS gives it (absolute, with its final dot),
//! sorted as strings (gomemcache picks a key's server by its place in the list).
//!
//! The record's name must read `_service._proto.domain`. Each lookup reads the system's
//! resolver configuration (`/etc/resolv.conf`) afresh, unless a name server is given. A lookup
//! that fails, or finds no record, leaves the list as it was (the servers of the last good
//! lookup keep counting), as upstream's refresh does.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_resolver::config::{NameServerConfigGroup, ResolverConfig};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::Resolver;

use crate::{ConfigError, StoreError};

/// Where the server list comes from, and how often it is read again.
#[derive(Clone, Debug)]
pub(crate) struct Discovery {
    /// The SRV record's name, `_service._proto.domain`.
    pub(crate) record: String,
    /// How often the list is looked up again (`None`: only at start).
    pub(crate) refresh: Option<Duration>,
    /// The DNS server to ask (`None`: the system's).
    pub(crate) nameserver: Option<SocketAddr>,
}

impl Discovery {
    /// Checks the record's shape (field `srv`).
    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        if srv_parts(&self.record).is_none() {
            return Err(ConfigError::invalid(
                "srv",
                &self.record,
                "must be an SRV record name, _service._proto.domain",
            ));
        }
        Ok(())
    }

    /// The servers the record names now, `target:port`, sorted; an error when the lookup
    /// fails or finds no record.
    pub(crate) async fn servers(&self) -> Result<Vec<String>, StoreError> {
        let failed = |e: &dyn std::fmt::Display| {
            StoreError::Unavailable(format!(
                "the SRV record {} could not be looked up: {e}",
                self.record
            ))
        };
        let provider = TokioConnectionProvider::default();
        let builder = match self.nameserver {
            Some(at) => {
                let servers = NameServerConfigGroup::from_ips_clear(&[at.ip()], at.port(), true);
                Resolver::builder_with_config(
                    ResolverConfig::from_parts(None, vec![], servers),
                    provider,
                )
            }
            None => Resolver::builder(provider).map_err(|e| failed(&e))?,
        };
        let resolver = builder.build();
        let found = resolver
            .srv_lookup(self.record.as_str())
            .await
            .map_err(|e| failed(&e))?;
        let servers = server_list(
            found
                .iter()
                .map(|srv| (srv.target().to_string(), srv.port())),
        );
        if servers.is_empty() {
            return Err(failed(&"no record"));
        }
        Ok(servers)
    }
}

/// `_service._proto.domain` split in its three parts (without the underscores), as upstream
/// reads it: the first two labels each start with `_`, and a domain follows.
fn srv_parts(record: &str) -> Option<(&str, &str, &str)> {
    let rest = record.strip_prefix('_')?;
    let (service, rest) = rest.split_once("._")?;
    let (proto, domain) = rest.split_once('.')?;
    if service.is_empty() || proto.is_empty() || domain.is_empty() {
        return None;
    }
    Some((service, proto, domain))
}

/// Each record's `target:port`, sorted as strings (byte order), duplicates kept as found.
fn server_list(records: impl Iterator<Item = (String, u16)>) -> Vec<String> {
    let mut servers: Vec<String> = records
        .map(|(target, port)| format!("{target}:{port}"))
        .collect();
    servers.sort();
    servers
}

#[cfg(test)]
mod tests {
    use super::*;

    // envoyproxy/ratelimit's srv_test.go: the servers come out sorted, whatever the order
    // DNS gave them in.
    #[test]
    fn servers_are_sorted_as_strings() {
        let found = [("z", 1), ("z", 0), ("a", 9001)].map(|(t, p)| (t.to_owned(), p));
        assert_eq!(server_list(found.into_iter()), ["a:9001", "z:0", "z:1"]);
        // Absolute targets keep their dot, which sorts before ':' as upstream's does.
        let found = [("a.b.", 1), ("a.", 1)].map(|(t, p)| (t.to_owned(), p));
        assert_eq!(server_list(found.into_iter()), ["a.:1", "a.b.:1"]);
    }

    #[test]
    fn record_names_are_checked() {
        assert_eq!(
            srv_parts("_memcache._tcp.example.org"),
            Some(("memcache", "tcp", "example.org"))
        );
        assert_eq!(
            srv_parts("_something._tcp.example.org."),
            Some(("something", "tcp", "example.org."))
        );
        for bad in [
            "",
            "memcache._tcp.example.org",
            "_memcache.tcp.example.org",
            "_memcache._tcp",
            "_._tcp.x",
        ] {
            assert_eq!(srv_parts(bad), None, "{bad}");
            let discovery = Discovery {
                record: bad.to_owned(),
                refresh: None,
                nameserver: None,
            };
            let e = discovery.check().unwrap_err();
            assert!(
                matches!(e, ConfigError::Invalid { field: "srv", .. }),
                "{e}"
            );
        }
    }
}
