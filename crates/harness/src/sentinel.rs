//! A Redis under Sentinel of our own: a master, its replicas and `redis-server --sentinel`
//! processes watching it (quorum: a majority of them), each on a free loopback port, their
//! config files in a fresh temporary directory; all killed, and the directory removed, when
//! dropped.
//!
//! The sentinels judge the master down after 1 s without an answer
//! (`down-after-milliseconds 1000`), so that a test's failover completes within seconds. Every
//! wait polls every 20 ms, at most 1500 times: bounded waits for other processes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::{free_port, RedisServer};

/// The master's name the sentinels know it by.
pub const MASTER_NAME: &str = "floodgate-master";

/// What to start (see [`RedisSentinels::start`]).
#[derive(Clone, Debug)]
pub struct SentinelOptions {
    /// Replicas of the master (at least 1 for a failover).
    pub replicas: usize,
    /// Sentinels (3 for a real quorum of 2).
    pub sentinels: usize,
    /// The password the master and its replicas require, if any.
    pub password: Option<String>,
    /// The password the sentinels require, if any.
    pub sentinel_password: Option<String>,
}

impl Default for SentinelOptions {
    fn default() -> Self {
        SentinelOptions {
            replicas: 1,
            sentinels: 3,
            password: None,
            sentinel_password: None,
        }
    }
}

/// A master, its replicas and their sentinels: [`RedisSentinels::start`] says how they are set
/// up; all are killed, and their directory removed, when dropped.
#[derive(Debug)]
pub struct RedisSentinels {
    servers: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
    options: SentinelOptions,
    dir: PathBuf,
}

impl RedisSentinels {
    /// Starts them and waits until every sentinel knows the master, its replicas and the
    /// other sentinels, and every replica is in sync. Panics if that takes more than 30 s.
    pub fn start(options: SentinelOptions) -> RedisSentinels {
        let dir = fresh_directory();
        // Replication writes its snapshots into the working directory: keep them in ours.
        let data = dir
            .to_str()
            .expect("a UTF-8 temporary directory")
            .to_string();
        let servers = start_master_and_replicas(&options, &data);
        let master_port = servers[0].port();
        let sentinels = (0..options.sentinels)
            .map(|_| start_sentinel(&options, &dir, master_port))
            .collect();
        let set = RedisSentinels {
            servers,
            sentinels,
            options,
            dir,
        };
        set.wait_until_settled();
        set
    }

    /// The store URL: `redis-sentinel://[:password@]127.0.0.1:S1,…/floodgate-master`, with
    /// `?sentinel_pass=…` when the sentinels require a password.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect();
        let auth = self
            .options
            .password
            .as_ref()
            .map(|p| format!(":{p}@"))
            .unwrap_or_default();
        let mut url = format!("redis-sentinel://{auth}{}/{MASTER_NAME}", hosts.join(","));
        if let Some(password) = &self.options.sentinel_password {
            url.push_str(&format!("?sentinel_pass={password}"));
        }
        url
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(RedisServer::port).collect()
    }

    /// The master's port, as the first sentinel that answers names it.
    pub fn master_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            let reply = s.cli(&["SENTINEL", "get-master-addr-by-name", MASTER_NAME])?;
            reply.lines().nth(1)?.trim().parse().ok()
        })
    }

    /// The master or replica on `port`, to kill, pause or restart it.
    pub fn server_mut(&mut self, port: u16) -> &mut RedisServer {
        self.servers
            .iter_mut()
            .find(|s| s.port() == port)
            .expect("a server of this set")
    }

    /// The master or replica on `port`.
    pub fn server(&self, port: u16) -> &RedisServer {
        self.servers
            .iter()
            .find(|s| s.port() == port)
            .expect("a server of this set")
    }

    /// Waits until the sentinels name a master other than `old`, which answers as master, and
    /// `old`, if it still runs, has been turned into a replica; returns the new master's port.
    /// Panics after 30 s.
    pub fn wait_for_new_master(&self, old: u16) -> u16 {
        let mut found = None;
        let moved = self.wait(|| {
            found = self.master_port().filter(|&p| p != old);
            let old_demoted =
                !self.server(old).pong() || self.role(old).as_deref() == Some("slave");
            old_demoted && found.is_some_and(|p| self.role(p).as_deref() == Some("master"))
        });
        assert!(moved, "the sentinels did not fail {old} over within 30 s");
        found.expect("a new master")
    }

    /// `role:` from `INFO replication` on `port`.
    pub fn role(&self, port: u16) -> Option<String> {
        let info = self.server(port).cli(&["INFO", "replication"])?;
        info.lines()
            .find_map(|l| l.strip_prefix("role:"))
            .map(|r| r.trim().to_string())
    }

    /// Waits until every sentinel sees the master with all its replicas and the other
    /// sentinels, and every replica's link is up.
    fn wait_until_settled(&self) {
        let replicas = self.options.replicas;
        let others = self.sentinels.len() - 1;
        let settled = self.wait(|| {
            let sentinels_agree = self.sentinels.iter().all(|s| {
                let info = s
                    .cli(&["SENTINEL", "master", MASTER_NAME])
                    .unwrap_or_default();
                let field = |name: &str| {
                    let mut lines = info.lines();
                    lines.find(|l| l.trim() == name)?;
                    lines.next()?.trim().parse::<usize>().ok()
                };
                field("num-slaves") == Some(replicas)
                    && field("num-other-sentinels") == Some(others)
            });
            let synced = self.servers[1..].iter().all(|r| {
                r.cli(&["INFO", "replication"])
                    .is_some_and(|i| i.contains("master_link_status:up"))
            });
            sentinels_agree && synced
        });
        assert!(settled, "the sentinels did not settle within 30 s");
    }

    fn wait(&self, mut done: impl FnMut() -> bool) -> bool {
        for _ in 0..1500 {
            if done() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

/// A new, empty directory of this set's own in the temporary directory.
fn fresh_directory() -> PathBuf {
    static SETS: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "floodgate-sentinel-{}-{}",
        std::process::id(),
        SETS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

/// Starts the master, then its replicas: the master first in the list.
fn start_master_and_replicas(options: &SentinelOptions, data: &str) -> Vec<RedisServer> {
    let master = start_data_server(options, data, Vec::new());
    let master_port = master.port();
    let mut servers = vec![master];
    for _ in 0..options.replicas {
        let replica_of = vec![
            "--replicaof".to_string(),
            "127.0.0.1".to_string(),
            master_port.to_string(),
        ];
        servers.push(start_data_server(options, data, replica_of));
    }
    servers
}

/// Starts a master or a replica (`extra` says which) on a free port, its data in `data`,
/// requiring the set's password and giving it to its master.
fn start_data_server(options: &SentinelOptions, data: &str, mut extra: Vec<String>) -> RedisServer {
    extra.extend(["--dir".to_string(), data.to_string()]);
    if let Some(password) = &options.password {
        extra.extend(["--requirepass", password, "--masterauth", password].map(String::from));
    }
    let mut server = RedisServer {
        port: free_port(),
        child: None,
        extra,
        tls: None,
        password: options.password.clone(),
        config_file: None,
    };
    server.restart();
    server
}

/// Starts a sentinel on a free port, its config file (which it rewrites) in `dir`.
fn start_sentinel(options: &SentinelOptions, dir: &Path, master_port: u16) -> RedisServer {
    let port = free_port();
    let file = dir.join(format!("sentinel-{port}.conf"));
    std::fs::write(&file, sentinel_config(options, master_port)).expect("writes");
    let mut sentinel = RedisServer {
        port,
        child: None,
        extra: vec!["--sentinel".to_string()],
        tls: None,
        password: options.sentinel_password.clone(),
        config_file: Some(file),
    };
    sentinel.restart();
    sentinel
}

/// A sentinel's config: the master to watch (quorum: a majority of the sentinels), how soon
/// it is judged down, and the passwords.
fn sentinel_config(options: &SentinelOptions, master_port: u16) -> String {
    let quorum = options.sentinels / 2 + 1;
    let mut config = format!(
        "sentinel resolve-hostnames no\n\
         sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} {quorum}\n\
         sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
         sentinel failover-timeout {MASTER_NAME} 5000\n\
         sentinel parallel-syncs {MASTER_NAME} 1\n"
    );
    if let Some(password) = &options.password {
        config.push_str(&format!("sentinel auth-pass {MASTER_NAME} {password}\n"));
    }
    if let Some(password) = &options.sentinel_password {
        config.push_str(&format!(
            "requirepass {password}\nsentinel sentinel-pass {password}\n"
        ));
    }
    config
}

impl Drop for RedisSentinels {
    fn drop(&mut self) {
        self.sentinels.clear();
        self.servers.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli;

    #[test]
    fn sentinels_name_the_master_and_fail_it_over() {
        let mut set = RedisSentinels::start(SentinelOptions {
            password: Some("m-secret".into()),
            sentinel_password: Some("s-secret".into()),
            ..SentinelOptions::default()
        });
        let master = set.master_port().expect("the sentinels name a master");
        assert_eq!(set.role(master).as_deref(), Some("master"));
        assert!(set
            .url()
            .ends_with(&format!("/{MASTER_NAME}?sentinel_pass=s-secret")));
        // Without the password, a sentinel refuses.
        let port = set.sentinel_ports()[0];
        assert!(cli(port, &["SENTINEL", "masters"]).is_some_and(|r| r.contains("NOAUTH")));
        set.server_mut(master).kill();
        let new = set.wait_for_new_master(master);
        assert_ne!(new, master);
    }
}
