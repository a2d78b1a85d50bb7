//! The command line's one vocabulary: an argument means the same thing, is read the same way and
//! is described the same way in every command that takes it.
//!
//! | argument | means | read by |
//! |---|---|---|
//! | `--store URL` | where limits count: over the configuration's ([`ConfigStoreArg`]), or with none to read ([`StoreArg`]) | `serve`, `check-config`; `bench`, `replay` |
//! | `--threads N` | threads of this process doing the work (at least 1; default one per core) | `serve`, `bench` |
//! | `--concurrency N` | requests in flight at once (at least 1) | `bench` |
//! | `--workers N` | the workers of the service whose busy share the utilization shedder reads, as the config's `limiters.utilization.workers` (at least 1) | `simulate` |
//! | `--duration D`, `--sync-interval D` | a duration: seconds (`1.5`), a number with a unit (`500ms`, `10s`, `1m`, `2h`, `1d`), or parts from the largest unit down (`1h30m`) ([`duration`]) | `bench`, `simulate` |
//! | `--http ADDR`, `--grpc ADDR` | a listen address, `host:port`: an IP address, or a name resolved once at start (`localhost:8080`) ([`listen_address`]) | `serve` |
//!
//! A count of 0 where it makes no sense is refused when the arguments are read, naming the
//! argument.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use floodgate::duration::parse_duration;

/// `--store URL` of the commands that read no configuration (`replay`, `bench`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct StoreArg {
    /// Where the decisions count: `memory` (the default: this process alone),
    /// `redis://[user[:password]@]host:port[/db]` or `rediss://…` (TLS), `unix:///path`,
    /// `redis-cluster://host:port,host:port` (a Redis Cluster), or
    /// `redis-sentinel://host:port,host:port/master` (the master sentinels name). Without it,
    /// FLOODGATE_STORE.
    #[arg(long = "store", value_name = "URL")]
    pub url: Option<String>,
}

/// `--store URL` of the commands that read a configuration (`serve`, `check-config`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ConfigStoreArg {
    /// Where limits count, instead of the configuration's `store.url` (its other store
    /// settings stay): `memory`, `redis://[user[:password]@]host:port[/db]` or `rediss://…`
    /// (TLS), `unix:///path`, `redis-cluster://host:port,host:port` or
    /// `redis-sentinel://host:port,host:port/master`. Without it: the configuration's, else
    /// FLOODGATE_STORE, else (serve, under envoyproxy/ratelimit's settings) REDIS_URL, else
    /// `memory`.
    #[arg(long = "store", value_name = "URL")]
    pub url: Option<String>,
}

impl ConfigStoreArg {
    /// The flag's URL, else `FLOODGATE_STORE`'s.
    pub fn or_env(&self) -> Option<String> {
        StoreArg {
            url: self.url.clone(),
        }
        .or_env()
    }
}

impl StoreArg {
    /// The flag's URL, else `FLOODGATE_STORE`'s (for the commands that read no config; `serve`
    /// puts the config between them).
    pub fn or_env(&self) -> Option<String> {
        self.url.clone().or_else(|| {
            crate::environment::Environment::from_process()
                .string("FLOODGATE_STORE")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        })
    }
}

/// A duration argument, read as every command, flag and file reads one (see the [module
/// documentation](self)).
pub fn duration(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|e| e.to_string())
}

/// A duration argument above 0.
pub fn positive_duration(text: &str) -> Result<Duration, String> {
    match duration(text)? {
        d if d.is_zero() => Err(format!("`{text}` is 0: a duration above 0, e.g. 10s")),
        d => Ok(d),
    }
}

/// A count that must be at least 1.
pub fn at_least_one<T: std::str::FromStr + From<u8> + PartialEq>(text: &str) -> Result<T, String> {
    match text.parse::<T>() {
        Ok(n) if n == T::from(0) => Err("0 is not allowed here: at least 1".to_string()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{text}` is not a whole number")),
    }
}

/// A listen address: `IP:port` (`127.0.0.1:8080`, `[::1]:8080`), or `name:port`
/// (`localhost:8080`), the name resolved now to its first address. Port 0 lets the operating
/// system choose.
pub fn listen_address(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    let mut resolved = text.to_socket_addrs().map_err(|e| {
        format!("`{text}` is not an address: expected host:port, e.g. 127.0.0.1:8080 or localhost:8080 ({e})")
    })?;
    resolved
        .next()
        .ok_or_else(|| format!("`{text}` resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_counts_and_addresses_read_one_way() {
        assert_eq!(duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(positive_duration("0s").unwrap_err().contains("above 0"));
        assert!(duration("soon").is_err());
        assert_eq!(at_least_one::<usize>("3"), Ok(3));
        assert!(at_least_one::<u64>("0").unwrap_err().contains("at least 1"));
        assert!(at_least_one::<usize>("-1").is_err());
        assert_eq!(
            listen_address("127.0.0.1:0"),
            Ok("127.0.0.1:0".parse().unwrap())
        );
        let local = listen_address("localhost:8080").unwrap();
        assert!(local.ip().is_loopback() && local.port() == 8080, "{local}");
        assert!(listen_address("localhost")
            .unwrap_err()
            .contains("host:port"));
    }
}
