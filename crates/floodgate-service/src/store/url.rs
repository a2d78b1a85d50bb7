//! `store.url` read: which store, and, for Redis, the URL the store connects with, the
//! password from `store.password_env` put into its user information. Errors name the field and
//! show the URL with any password redacted.

use floodgate::store::redis::redacted;

use super::MEMORY;
use crate::config::{ConfigFileError, StoreConfig};

/// A store URL, checked.
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `memory` (or no URL): the embedded store.
    Memory,
    /// `redis://…`, `rediss://…` (TLS), `redis[s]-cluster://…` or `redis[s]-sentinel://…`.
    Redis {
        /// The URL to connect with, the password included: never shown (see
        /// [`StoreUrl::shown`]).
        url: String,
        /// Whether it names a Redis Cluster (`redis-cluster://h1:p1,h2:p2`).
        cluster: bool,
    },
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown())
    }
}

impl StoreUrl {
    /// `config.url` with the password of `config.password_env` (read with `env`) put in.
    pub fn from_config(
        config: &StoreConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<StoreUrl, ConfigFileError> {
        if config.nodes == 0 {
            return Err(ConfigFileError::invalid(
                "store.nodes",
                "invalid value 0 (at least 1: the processes sharing the store)",
            ));
        }
        let url = config.url.as_deref().unwrap_or(MEMORY);
        if url == MEMORY {
            return Ok(StoreUrl::Memory);
        }
        let invalid = |why: &str| {
            ConfigFileError::invalid("store.url", format!("`{}`: {why}", redacted(url)))
        };
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            invalid("is not a store: expected `memory`, redis://host:port[/db], rediss://host:port[/db], unix:///path or redis-cluster://host:port,host:port")
        })?;
        if matches!(scheme, "unix" | "redis+unix") {
            return unix_socket(url, rest, config).map_err(|e| e.unwrap_or_else(&invalid));
        }
        let (cluster, sentinel) = match scheme {
            "redis" | "rediss" => (false, false),
            "redis-cluster" | "rediss-cluster" => (true, false),
            "redis-sentinel" | "rediss-sentinel" => (false, true),
            _ => return Err(invalid(
                "is not a store: expected `memory`, redis[s]://host:port[/db], redis[s]-cluster://host:port,host:port or redis[s]-sentinel://host:port,host:port/master",
            )),
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (user_info, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        check_hosts(hosts, path, cluster, sentinel).map_err(|why| invalid(&why))?;
        let Some(name) = &config.password_env else {
            return Ok(StoreUrl::Redis {
                url: url.to_string(),
                cluster,
            });
        };
        if name.is_empty() {
            return Err(ConfigFileError::invalid(
                "store.password_env",
                "invalid value `` (the name of an environment variable)",
            ));
        }
        if user_info.is_some_and(|u| u.contains(':')) {
            return Err(ConfigFileError::invalid(
                "store.password_env",
                format!(
                    "`{name}`: the URL `{}` already holds a password; give it in one place",
                    redacted(url)
                ),
            ));
        }
        let password = env(name).filter(|p| !p.is_empty()).ok_or_else(|| {
            ConfigFileError::invalid(
                "store.password_env",
                format!("`{name}`: the environment variable is not set (or empty)"),
            )
        })?;
        let user = user_info.unwrap_or("");
        let password = percent_encode(&password);
        Ok(StoreUrl::Redis {
            url: format!("{scheme}://{user}:{password}@{hosts}{path}"),
            cluster,
        })
    }

    /// `memory`, `redis` or `redis-cluster`.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreUrl::Memory => "memory",
            StoreUrl::Redis { cluster: false, .. } => "redis",
            StoreUrl::Redis { cluster: true, .. } => "redis-cluster",
        }
    }

    /// The URL as logs, errors, metrics and `/readyz` show it: any password is `***`.
    pub fn shown(&self) -> String {
        match self {
            StoreUrl::Memory => MEMORY.to_string(),
            StoreUrl::Redis { url, .. } => redacted(url),
        }
    }
}

/// A unix socket URL (`unix:///path`), whose credentials, if any, ride in its query
/// (`?user=…&pass=…`): the store, or why not (`Err(Err(why))`: the URL's fault).
fn unix_socket(
    url: &str,
    rest: &str,
    config: &StoreConfig,
) -> Result<StoreUrl, Result<ConfigFileError, &'static str>> {
    if !rest.starts_with('/') {
        return Err(Err("names no socket: unix:///path/to/redis.sock"));
    }
    if config.password_env.is_some() {
        return Err(Ok(ConfigFileError::invalid(
            "store.password_env",
            "a unix socket URL takes its password in its query: unix:///path?pass=…",
        )));
    }
    Ok(StoreUrl::Redis {
        url: url.to_string(),
        cluster: false,
    })
}

/// Checks a Redis URL's hosts and path for its kind: one host (plain Redis), or several with
/// their ports (a cluster's nodes, the sentinels), a master's name behind Sentinel, no
/// database but 0 on a cluster. Why not, for the error naming the URL.
fn check_hosts(hosts: &str, path: &str, cluster: bool, sentinel: bool) -> Result<(), String> {
    if hosts.is_empty() {
        return Err("names no host".into());
    }
    if sentinel {
        let master = path.trim_start_matches('/');
        let master = master.split(['/', '?']).next().unwrap_or_default();
        if master.is_empty() {
            return Err(
                "names no master: redis-sentinel://host:port,host:port/master_name[/db]".into(),
            );
        }
    }
    if cluster || sentinel {
        if cluster && !path.is_empty() && path != "/" {
            return Err("a Redis Cluster has only database 0: no /db".into());
        }
        for node in hosts.split(',') {
            let port = node.rsplit_once(':').map(|(_, p)| p);
            if !port.is_some_and(|p| p.parse::<u16>().is_ok_and(|p| p > 0)) {
                return Err(format!(
                    "`{node}` needs a port (host:port, separated by commas)"
                ));
            }
        }
    } else if hosts.contains(',') {
        return Err("redis:// and rediss:// name one server; use redis-cluster://h1:p1,h2:p2 for a cluster, redis-sentinel://s1:p1,s2:p2/master behind Sentinel".into());
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn url(
        url: &str,
        password_env: Option<&str>,
        env: &[(&str, &str)],
    ) -> Result<StoreUrl, String> {
        let config = StoreConfig {
            url: Some(url.to_string()),
            password_env: password_env.map(str::to_string),
            ..StoreConfig::default()
        };
        StoreUrl::from_config(&config, |name| {
            env.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn the_password_comes_from_the_environment_and_is_never_shown() {
        let env = [("REDIS_PW", "s3cr:et@/x")];
        let u = url("redis://10.0.0.1:6380/2", Some("REDIS_PW"), &env).unwrap();
        let StoreUrl::Redis { url: full, .. } = &u else {
            panic!("{u:?}")
        };
        assert_eq!(full, "redis://:s3cr%3Aet%40%2Fx@10.0.0.1:6380/2");
        assert_eq!(u.shown(), "redis://:***@10.0.0.1:6380/2");
        assert!(!format!("{u:?}").contains("s3cr"));
        let u = url("redis://app@h:1", Some("REDIS_PW"), &env).unwrap();
        assert_eq!(u.shown(), "redis://app:***@h:1");
        let u = url("redis-cluster://h1:1,h2:2", Some("REDIS_PW"), &env).unwrap();
        assert_eq!(u.kind(), "redis-cluster");
        assert_eq!(u.shown(), "redis-cluster://:***@h1:1,h2:2");
        let u = url(
            "rediss-sentinel://s1:1,s2:2/mymaster/2?sentinel_pass=sent1nel",
            Some("REDIS_PW"),
            &env,
        )
        .unwrap();
        assert_eq!(
            u.shown(),
            "rediss-sentinel://:***@s1:1,s2:2/mymaster/2?sentinel_pass=***"
        );
        assert!(!format!("{u:?}").contains("sent1nel"));
        let u = url("rediss-cluster://h1:1,h2:2", None, &env).unwrap();
        assert!(matches!(u, StoreUrl::Redis { cluster: true, .. }));
    }

    #[test]
    fn bad_urls_and_settings_name_the_field_and_hide_passwords() {
        let cases: [(&str, Option<&str>, &str, &str); 9] = [
            (
                "redis://h:1",
                Some("MISSING"),
                "store.password_env",
                "`MISSING`",
            ),
            (
                "redis://u:hunter2@h:1",
                Some("REDIS_PW"),
                "store.password_env",
                "already",
            ),
            ("mongodb://h:1", None, "store.url", "mongodb://h:1"),
            (
                "redis-sentinel://u:hunter2@h:1",
                None,
                "store.url",
                "names no master",
            ),
            (
                "rediss-sentinel://:hunter2@h:1,h2/m",
                None,
                "store.url",
                "`h2` needs a port",
            ),
            (
                "redis-cluster://h1:1,h2",
                None,
                "store.url",
                "`h2` needs a port",
            ),
            ("redis://h1:1,h2:2", None, "store.url", "redis-cluster://"),
            ("redis://", None, "store.url", "no host"),
            (
                "redis-cluster://:hunter2@h:1/3",
                None,
                "store.url",
                "database 0",
            ),
        ];
        for (u, env_name, field, says) in cases {
            let e = url(u, env_name, &[("REDIS_PW", "pw")]).unwrap_err();
            assert!(e.contains(field) && e.contains(says), "{u}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
        let config = StoreConfig {
            nodes: 0,
            ..StoreConfig::default()
        };
        let e = StoreUrl::from_config(&config, |_| None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("store.nodes") && e.contains('0'), "{e}");
        assert_eq!(url("memory", None, &[]).unwrap(), StoreUrl::Memory);
        let socket = url("unix:///run/redis.sock?pass=hunter2", None, &[]).unwrap();
        assert_eq!(socket.kind(), "redis");
        assert_eq!(socket.shown(), "unix:///run/redis.sock?pass=***");
        assert!(url("unix://relative", None, &[])
            .unwrap_err()
            .contains("socket"));
    }
}
