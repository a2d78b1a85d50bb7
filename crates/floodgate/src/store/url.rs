//! Store URLs: which store a URL names, checked once, and how it is shown.
//!
//! One parser for every face: [`super::AnyStore::from_url`], `floodgate serve --store URL` and
//! the config file's `store.url` all read a URL with [`StoreUrl::parse`], so a URL one accepts
//! the others accept, and one redactor ([`redacted`]) shows it wherever it is printed.
//!
//! | URL | store |
//! |-----|-------|
//! | `memory`, `memory://` | the embedded memory store |
//! | `redis://[user[:password]@]host:port[/db]`, `rediss://…` (TLS) | one Redis |
//! | `unix:///path/redis.sock[?db=…&user=…&pass=…]`, `redis+unix:///…` | one Redis on a socket |
//! | `redis[s]-cluster://[user[:password]@]host:port,host:port,…` | a Redis Cluster (database 0 only) |
//! | `redis[s]-sentinel://[…@]host:port,host:port/master[/db]` | the master the sentinels name |
//! | `memcache://host:port[,host:port…]` | memcached servers, keys spread as gomemcache spreads them |
//! | `memcache+srv://_service._proto.domain` | the memcached servers a DNS SRV record names |
//! | `file:///absolute/directory` | the durable embedded store, in a directory it owns |
//!
//! Everything else is refused with a [`ConfigError`] for field `url`, the URL shown with its
//! passwords masked.

use std::path::PathBuf;

use crate::ConfigError;

/// The query parameters that hold a password (a unix socket URL's `pass`, a sentinel URL's
/// `sentinel_pass`).
const SECRET_PARAMETERS: [&str; 3] = ["pass", "password", "sentinel_pass"];

/// A store URL, checked: which store, and where.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `memory` (or `memory://`): the embedded store.
    Memory,
    /// A Redis: one server, a cluster or the sentinels' master.
    Redis {
        /// The URL to connect with, passwords included: never shown (see [`StoreUrl::shown`]).
        url: String,
        /// Which Redis deployment the URL names.
        topology: Topology,
    },
    /// memcached servers (`memcache://h1:p1,h2:p2`), in the order given: the order decides
    /// which server holds a key.
    Memcached {
        /// `host:port` of each server.
        servers: Vec<String>,
    },
    /// The memcached servers a DNS SRV record names (`memcache+srv://_memcache._tcp.example`,
    /// upstream's `MEMCACHE_SRV`), sorted as upstream sorts them.
    MemcachedSrv {
        /// The record's name, `_service._proto.domain`.
        record: String,
    },
    /// The durable embedded store in `dir` (`file:///var/lib/floodgate`).
    File {
        /// The directory the store owns.
        dir: PathBuf,
    },
}

/// Which Redis deployment a URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// One server (`redis://`, `rediss://`, `unix://`).
    Single,
    /// A Redis Cluster (`redis[s]-cluster://`).
    Cluster,
    /// A master found through sentinels (`redis[s]-sentinel://`).
    Sentinel,
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown())
    }
}

/// What the parser says when the scheme names no store.
const NOT_A_STORE: &str =
    "not a store: expected `memory`, redis[s]://host:port[/db], unix:///path, \
     redis[s]-cluster://host:port,host:port, redis[s]-sentinel://host:port,host:port/master, \
     memcache://host:port[,host:port], memcache+srv://_service._proto.domain or \
     file:///directory";

impl StoreUrl {
    /// Reads `url` (see the [module documentation](self) for the forms). Errors are for field
    /// `url`, with the URL (or the part at fault) shown with its passwords masked.
    pub fn parse(url: &str) -> Result<StoreUrl, ConfigError> {
        if url == "memory" || url == "memory://" {
            return Ok(StoreUrl::Memory);
        }
        let invalid = |reason| ConfigError::invalid("url", redacted(url), reason);
        let (scheme, rest) = url.split_once("://").ok_or_else(|| invalid(NOT_A_STORE))?;
        let topology = match scheme {
            "unix" | "redis+unix" => {
                if !rest.starts_with('/') {
                    return Err(invalid("names no socket: unix:///path/to/redis.sock"));
                }
                return Ok(StoreUrl::Redis {
                    url: url.to_string(),
                    topology: Topology::Single,
                });
            }
            "memcache" => return memcached(url, rest),
            "memcache+srv" => return memcached_srv(url, rest),
            "file" => return file(url, rest),
            "redis" | "rediss" => Topology::Single,
            "redis-cluster" | "rediss-cluster" => Topology::Cluster,
            "redis-sentinel" | "rediss-sentinel" => Topology::Sentinel,
            _ => return Err(invalid(NOT_A_STORE)),
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let hosts = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        check_hosts(url, hosts, path, topology)?;
        Ok(StoreUrl::Redis {
            url: url.to_string(),
            topology,
        })
    }

    /// This URL with `password` put into its user information (percent-encoded), for a
    /// password kept out of the URL (the service's `store.password_env`). Refused, for field
    /// `url`, when the URL already holds a password, takes its password elsewhere (a unix
    /// socket's query) or names a store without passwords.
    pub fn with_password(&self, password: &str) -> Result<StoreUrl, ConfigError> {
        let StoreUrl::Redis { url, topology } = self else {
            return Err(ConfigError::invalid(
                "url",
                self.shown(),
                "only a Redis URL takes a password",
            ));
        };
        let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
        if matches!(scheme, "unix" | "redis+unix") {
            return Err(ConfigError::invalid(
                "url",
                self.shown(),
                "a unix socket URL takes its password in its query: unix:///path?pass=…",
            ));
        }
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (user, hosts) = match authority.rsplit_once('@') {
            Some((user_info, _)) if user_info.contains(':') => {
                return Err(ConfigError::invalid(
                    "url",
                    self.shown(),
                    "the URL already holds a password; give it in one place",
                ))
            }
            Some((user, hosts)) => (user, hosts),
            None => ("", authority),
        };
        Ok(StoreUrl::Redis {
            url: format!(
                "{scheme}://{user}:{}@{hosts}{path}",
                percent_encode(password)
            ),
            topology: *topology,
        })
    }

    /// The store's kind, as errors, logs, metrics and `/readyz` name it: `memory`, `redis`
    /// (one server, or behind sentinels), `redis-cluster`, `memcached` or `file`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreUrl::Memory => "memory",
            StoreUrl::Redis {
                topology: Topology::Cluster,
                ..
            } => "redis-cluster",
            StoreUrl::Redis { .. } => "redis",
            StoreUrl::Memcached { .. } | StoreUrl::MemcachedSrv { .. } => "memcached",
            StoreUrl::File { .. } => "file",
        }
    }

    /// The URL as logs, errors, metrics and `/readyz` show it: every password is `***`.
    pub fn shown(&self) -> String {
        match self {
            StoreUrl::Memory => "memory".to_string(),
            StoreUrl::Redis { url, .. } => redacted(url),
            StoreUrl::Memcached { servers } => format!("memcache://{}", servers.join(",")),
            StoreUrl::MemcachedSrv { record } => format!("memcache+srv://{record}"),
            StoreUrl::File { dir } => format!("file://{}", dir.display()),
        }
    }
}

/// `memcache://host:port[,host:port…]`: every server with its port.
fn memcached(url: &str, rest: &str) -> Result<StoreUrl, ConfigError> {
    let servers: Vec<String> = rest
        .trim_end_matches('/')
        .split(',')
        .map(str::to_string)
        .collect();
    if servers.iter().all(|s| s.is_empty()) {
        return Err(ConfigError::invalid(
            "url",
            url,
            "names no server: memcache://host:port[,host:port]",
        ));
    }
    for server in &servers {
        if server.contains(['@', '/', '?']) || !has_port(server) {
            return Err(ConfigError::invalid(
                "url",
                format!("`{server}` in {url}"),
                "each memcached server is host:port, separated by commas",
            ));
        }
    }
    Ok(StoreUrl::Memcached { servers })
}

/// `memcache+srv://_service._proto.domain`: the record's name, whose shape the memcached
/// store's builder checks (field `srv`).
fn memcached_srv(url: &str, rest: &str) -> Result<StoreUrl, ConfigError> {
    let record = rest.trim_end_matches('/');
    if record.is_empty() || record.contains(['@', '/', '?', ',', ':']) {
        return Err(ConfigError::invalid(
            "url",
            url,
            "names no SRV record: memcache+srv://_service._proto.domain",
        ));
    }
    Ok(StoreUrl::MemcachedSrv {
        record: record.to_string(),
    })
}

/// `file:///absolute/directory`.
fn file(url: &str, rest: &str) -> Result<StoreUrl, ConfigError> {
    if !rest.starts_with('/') || rest.len() < 2 || rest.contains(['?', '#']) {
        return Err(ConfigError::invalid(
            "url",
            url,
            "names no absolute directory: file:///var/lib/floodgate",
        ));
    }
    Ok(StoreUrl::File {
        dir: PathBuf::from(rest),
    })
}

/// Whether `node` ends with `:port`, the port from 1 to 65535.
fn has_port(node: &str) -> bool {
    node.rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0))
}

/// Checks a Redis URL's hosts and path for its topology: one host (one server), or several
/// with their ports (a cluster's nodes, the sentinels), a master's name behind Sentinel, no
/// database but 0 on a cluster.
fn check_hosts(url: &str, hosts: &str, path: &str, topology: Topology) -> Result<(), ConfigError> {
    let invalid = |reason| ConfigError::invalid("url", redacted(url), reason);
    if hosts.is_empty() {
        return Err(invalid("names no host"));
    }
    match topology {
        Topology::Single if hosts.contains(',') => Err(invalid(
            "redis:// and rediss:// name one server; use redis-cluster://h1:p1,h2:p2 for a \
             cluster, redis-sentinel://s1:p1,s2:p2/master behind Sentinel",
        )),
        Topology::Single => Ok(()),
        Topology::Cluster if !path.is_empty() && path != "/" => {
            Err(invalid("a Redis Cluster has only database 0: no /db"))
        }
        Topology::Sentinel
            if path
                .trim_start_matches('/')
                .split(['/', '?'])
                .next()
                .unwrap_or_default()
                .is_empty() =>
        {
            Err(invalid(
                "names no master: redis-sentinel://host:port,host:port/master_name[/db]",
            ))
        }
        Topology::Cluster | Topology::Sentinel => {
            match hosts.split(',').find(|node| !has_port(node)) {
                Some(node) => Err(ConfigError::invalid(
                    "url",
                    format!("`{node}` in {}", redacted(url)),
                    "each node needs a port: host:port, separated by commas",
                )),
                None => Ok(()),
            }
        }
    }
}

/// `text` with every byte but RFC 3986's unreserved characters percent-encoded, as user
/// information in a URL must be.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `url`'s query with the values of the parameters that hold passwords replaced by `***`.
fn redacted_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if SECRET_PARAMETERS.contains(&name) => format!("{name}=***"),
            _ => pair.to_string(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// `url` with the password of its user information (`redis://user:password@host`, or
/// `redis://:password@host`) and of its query (`?pass=…`, `?sentinel_pass=…`) replaced by
/// `***`, for errors and logs: secrets never leave. The one redactor of store URLs.
pub fn redacted(url: &str) -> String {
    if let Some((before, query)) = url.split_once('?') {
        return format!("{}?{}", redacted(before), redacted_query(query));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user_info, host)) => {
            let user = user_info
                .split_once(':')
                .map_or(user_info, |(user, _)| user);
            let password = if user_info.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{password}@{host}{path}")
        }
        None => url.to_string(),
    }
}

/// Whether `name` is a query parameter that holds a password.
#[cfg(feature = "redis")]
pub(crate) fn is_secret_parameter(name: &str) -> bool {
    SECRET_PARAMETERS.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(url: &str) -> String {
        StoreUrl::parse(url).unwrap_err().to_string()
    }

    #[test]
    fn every_store_is_named_by_its_url() {
        assert_eq!(StoreUrl::parse("memory").unwrap(), StoreUrl::Memory);
        assert_eq!(StoreUrl::parse("memory://").unwrap(), StoreUrl::Memory);
        for (url, kind) in [
            ("redis://10.0.0.1:6380/2", "redis"),
            ("rediss://h:1", "redis"),
            ("unix:///run/redis.sock?pass=x", "redis"),
            ("redis+unix:///run/redis.sock", "redis"),
            ("redis-cluster://h1:1,h2:2", "redis-cluster"),
            ("rediss-cluster://h1:1,h2:2/", "redis-cluster"),
            ("redis-sentinel://s1:1,s2:2/mymaster/2", "redis"),
            ("memcache://m1:11211,m2:11211", "memcached"),
            ("memcache+srv://_memcache._tcp.example.org", "memcached"),
            ("file:///var/lib/floodgate", "file"),
        ] {
            assert_eq!(StoreUrl::parse(url).unwrap().kind(), kind, "{url}");
        }
        assert_eq!(
            StoreUrl::parse("memcache://m1:1,m2:2").unwrap(),
            StoreUrl::Memcached {
                servers: vec!["m1:1".into(), "m2:2".into()]
            }
        );
        assert_eq!(
            StoreUrl::parse("file:///var/lib/floodgate").unwrap(),
            StoreUrl::File {
                dir: "/var/lib/floodgate".into()
            }
        );
    }

    #[test]
    fn bad_urls_say_why_and_never_show_a_password() {
        for (url, says) in [
            ("mongodb://root:hunter2@h:1", "not a store"),
            ("memory:", "not a store"),
            ("redis-sentinel://u:hunter2@h:1", "names no master"),
            ("rediss-sentinel://:hunter2@h:1,h2/m", "`h2` in"),
            ("redis-cluster://h1:1,h2", "`h2` in"),
            ("redis://h1:1,h2:2", "redis-cluster://"),
            ("redis://", "no host"),
            ("redis-cluster://:hunter2@h:1/3", "database 0"),
            ("unix://relative", "socket"),
            ("memcache://", "names no server"),
            ("memcache://m1", "`m1` in"),
            ("memcache://m1:0", "`m1:0` in"),
            ("memcache+srv://", "names no SRV record"),
            ("memcache+srv://a:1,b:2", "names no SRV record"),
            ("file://relative", "absolute"),
            ("file:///", "absolute"),
        ] {
            let e = refused(url);
            assert!(e.contains("`url`") && e.contains(says), "{url}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn a_password_goes_into_the_user_information_and_is_never_shown() {
        let u = StoreUrl::parse("redis://10.0.0.1:6380/2").unwrap();
        let u = u.with_password("s3cr:et@/x").unwrap();
        let StoreUrl::Redis { url, .. } = &u else {
            panic!("{u:?}")
        };
        assert_eq!(url, "redis://:s3cr%3Aet%40%2Fx@10.0.0.1:6380/2");
        assert_eq!(u.shown(), "redis://:***@10.0.0.1:6380/2");
        assert!(!format!("{u:?}").contains("s3cr"));
        let u = StoreUrl::parse("redis://app@h:1").unwrap();
        assert_eq!(
            u.with_password("pw").unwrap().shown(),
            "redis://app:***@h:1"
        );
        let u = StoreUrl::parse("redis-cluster://h1:1,h2:2").unwrap();
        let u = u.with_password("pw").unwrap();
        assert_eq!(u.shown(), "redis-cluster://:***@h1:1,h2:2");
        assert_eq!(u.kind(), "redis-cluster");
        for (url, says) in [
            ("redis://u:hunter2@h:1", "already holds a password"),
            ("unix:///run/redis.sock", "query"),
            ("memcache://m:1", "only a Redis URL"),
        ] {
            let e = StoreUrl::parse(url)
                .unwrap()
                .with_password("pw")
                .unwrap_err()
                .to_string();
            assert!(e.contains(says) && !e.contains("hunter2"), "{url}: {e}");
        }
    }

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redacted("rediss-sentinel://:pw@s1:1,s2:2/mymaster/2?sentinel_pass=sent1nel"),
            "rediss-sentinel://:***@s1:1,s2:2/mymaster/2?sentinel_pass=***"
        );
        assert_eq!(
            redacted("unix:///run/redis.sock?pass=hunter2"),
            "unix:///run/redis.sock?pass=***"
        );
        assert_eq!(redacted("redis://user@h:1"), "redis://user@h:1");
        assert_eq!(redacted("redis://h:1"), "redis://h:1");
    }
}
