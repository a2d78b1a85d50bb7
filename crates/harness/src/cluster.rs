//! A Redis Cluster of our own: `redis-server --cluster-enabled yes` processes on free loopback
//! ports, their cluster config files in a fresh temporary directory, joined by
//! `redis-cli --cluster create`, all killed (and the directory removed) when dropped.
//!
//! Cluster commands go through `redis-cli`, so the harness needs no Redis client. Every wait
//! polls every 20 ms, at most 1000 times: bounded waits for other processes.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::{free_port, Issued, RedisServer, TestCa};

mod shape;

/// A Redis Cluster of `masters` masters with `replicas` replicas each, killed when dropped.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    dir: PathBuf,
}

/// One node as `CLUSTER NODES` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterNode {
    /// Its node id.
    pub id: String,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Whether it is a master (else a replica).
    pub master: bool,
    /// A replica's master's id.
    pub master_id: Option<String>,
    /// Whether it is flagged as failing (`fail` or `fail?`).
    pub failing: bool,
    /// The slot ranges it serves (inclusive), for a master.
    pub slots: Vec<(u16, u16)>,
}

impl RedisCluster {
    /// Starts `masters` masters with `replicas` replicas each (`--cluster-node-timeout 1000`,
    /// so that a dead master's replica takes over within a few seconds), joins them and waits
    /// until every node sees all slots served and every replica is in sync. Panics if
    /// `redis-server` or `redis-cli` is missing or the cluster is not up within 20 s.
    pub fn start(masters: usize, replicas: usize) -> RedisCluster {
        RedisCluster::start_inner(masters, replicas, None)
    }

    /// As [`RedisCluster::start`], every node also serving TLS (clients, the cluster bus and
    /// replication: `tls-cluster`, `tls-replication`) with a certificate for `127.0.0.1` that
    /// `ca` signs, and requiring client certificates from `ca` when `auth_clients`. Its
    /// [`RedisCluster::tls_url`] names the TLS ports.
    pub fn start_tls(
        masters: usize,
        replicas: usize,
        ca: &TestCa,
        auth_clients: bool,
    ) -> RedisCluster {
        let issued = ca.issue("cluster-node", "IP:127.0.0.1,DNS:localhost");
        RedisCluster::start_inner(
            masters,
            replicas,
            Some((&issued, &ca.ca_file(), auth_clients)),
        )
    }

    fn start_inner(
        masters: usize,
        replicas: usize,
        tls: Option<(&Issued, &std::path::Path, bool)>,
    ) -> RedisCluster {
        static CLUSTERS: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "floodgate-cluster-{}-{}",
            std::process::id(),
            CLUSTERS.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let mut cluster = RedisCluster {
            nodes: Vec::new(),
            dir,
        };
        for _ in 0..masters * (1 + replicas) {
            let node = cluster.new_node(tls);
            cluster.nodes.push(node);
        }
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        let status = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli is installed");
        assert!(status.success(), "redis-cli --cluster create failed");
        cluster.wait_until_ok();
        cluster
    }

    /// A new cluster node, started (not yet joined): `redis-server --cluster-enabled yes` on a
    /// free port, its cluster config file in the cluster's directory, TLS as `tls` says.
    fn new_node(&self, tls: Option<(&Issued, &std::path::Path, bool)>) -> RedisServer {
        let port = free_port();
        let config = self.dir.join(format!("nodes-{port}.conf"));
        let extra = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            config.to_str().expect("a UTF-8 temporary directory"),
            "--cluster-node-timeout",
            "1000",
            "--dir",
            self.dir.to_str().expect("a UTF-8 temporary directory"),
        ];
        let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        match tls {
            None => RedisServer::start_with(port, extra),
            Some((issued, ca_file, auth_clients)) => {
                let tls_port = free_port();
                extra.extend(crate::tls_arguments(
                    tls_port,
                    issued,
                    ca_file,
                    auth_clients,
                ));
                extra
                    .extend(["--tls-cluster", "yes", "--tls-replication", "yes"].map(String::from));
                let mut node = RedisServer {
                    port,
                    child: None,
                    extra,
                    tls: Some(crate::Tls {
                        port: tls_port,
                        ca_file: ca_file.to_path_buf(),
                        _own_ca: None,
                    }),
                    password: None,
                    config_file: None,
                };
                node.restart();
                node
            }
        }
    }

    /// Redis's clock (`TIME`), in whole seconds since the Unix epoch, as the first live node
    /// reads it: the clock the scripts align their fixed windows to.
    pub fn seconds(&self) -> u64 {
        let node = self.nodes.iter().find(|n| n.pong()).expect("a live node");
        self.cli(node.port(), &["TIME"])
            .and_then(|t| t.lines().next()?.trim().parse().ok())
            .expect("TIME answers")
    }

    /// Its URL, `redis-cluster://127.0.0.1:P1,127.0.0.1:P2,…` (every node).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis-cluster://{}", hosts.join(","))
    }

    /// Its TLS URL, `rediss-cluster://127.0.0.1:T1,…` (every node's TLS port), for a cluster
    /// started with [`RedisCluster::start_tls`].
    pub fn tls_url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.tls_port()))
            .collect();
        format!("rediss-cluster://{}", hosts.join(","))
    }

    /// Its processes, in start order (the first `masters` were created masters).
    pub fn servers(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The process on `port`, to kill, pause (`signal("STOP")`) or restart it.
    pub fn server_mut(&mut self, port: u16) -> &mut RedisServer {
        self.nodes
            .iter_mut()
            .find(|n| n.port() == port)
            .expect("a node of this cluster")
    }

    /// `redis-cli -p port args…`'s output, or `None` if it failed (the node is down).
    pub fn cli(&self, port: u16, args: &[&str]) -> Option<String> {
        crate::cli(port, args)
    }

    /// The nodes, as the first node that answers sees them.
    pub fn nodes(&self) -> Vec<ClusterNode> {
        self.nodes
            .iter()
            .filter(|n| n.pong())
            .find_map(|n| self.cli(n.port(), &["CLUSTER", "NODES"]))
            .map(|text| text.lines().filter_map(parse_node).collect())
            .unwrap_or_default()
    }

    /// The port of the master serving `key`'s slot now (as the first live node sees it).
    pub fn master_of(&self, key: &str) -> u16 {
        let port = self.nodes.iter().find(|n| n.pong()).expect("a live node");
        let slot: u16 = self
            .cli(port.port(), &["CLUSTER", "KEYSLOT", key])
            .and_then(|s| s.trim().parse().ok())
            .expect("CLUSTER KEYSLOT answers");
        self.nodes()
            .into_iter()
            .find(|n| n.master && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
            .expect("a master serves every slot")
            .port
    }

    /// The port of a replica of the master on `master_port`.
    pub fn replica_of(&self, master_port: u16) -> Option<u16> {
        let nodes = self.nodes();
        let master = nodes.iter().find(|n| n.port == master_port)?;
        nodes
            .iter()
            .find(|n| n.master_id.as_deref() == Some(master.id.as_str()) && !n.failing)
            .map(|n| n.port)
    }

    /// Fails the master on `master_port` over to its replica (`CLUSTER FAILOVER` sent to the
    /// replica) and waits until the roles have swapped and the cluster is ok. Returns the new
    /// master's port.
    pub fn failover(&self, master_port: u16) -> u16 {
        let replica = self
            .replica_of(master_port)
            .expect("the master has a replica");
        let ok = self.cli(replica, &["CLUSTER", "FAILOVER"]);
        assert_eq!(ok.as_deref().map(str::trim), Some("OK"), "CLUSTER FAILOVER");
        let swapped = self.wait(|| {
            self.role(replica).as_deref() == Some("master")
                && self.role(master_port).as_deref() == Some("slave")
        });
        assert!(swapped, "the replica on {replica} did not take over");
        self.wait_until_ok();
        replica
    }

    /// `role:` from `INFO replication` on `port`.
    pub fn role(&self, port: u16) -> Option<String> {
        let info = self.cli(port, &["INFO", "replication"])?;
        info.lines()
            .find_map(|l| l.strip_prefix("role:"))
            .map(|r| r.trim().to_string())
    }

    /// Waits until every live node reports `cluster_state:ok` with all 16384 slots ok and sees
    /// every other live node, and every live replica's link to its master is up.
    pub fn wait_until_ok(&self) {
        let live: Vec<u16> = self
            .nodes
            .iter()
            .filter(|n| n.pong())
            .map(|n| n.port())
            .collect();
        let ok = self.wait(|| {
            live.iter().all(|&port| {
                let info = self.cli(port, &["CLUSTER", "INFO"]).unwrap_or_default();
                let known = self
                    .cli(port, &["CLUSTER", "NODES"])
                    .map(|t| t.lines().filter_map(parse_node).collect::<Vec<_>>())
                    .unwrap_or_default();
                let synced = match self.role(port).as_deref() {
                    Some("slave") => self
                        .cli(port, &["INFO", "replication"])
                        .is_some_and(|i| i.contains("master_link_status:up")),
                    Some(_) => true,
                    None => false,
                };
                info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_ok:16384")
                    && live
                        .iter()
                        .all(|p| known.iter().any(|n| n.port == *p && !n.failing))
                    && synced
            })
        });
        assert!(ok, "the cluster did not become ok within 20 s");
    }

    /// Polls `condition` every 20 ms, at most 1000 times (20 s plus the polls' own time).
    fn wait(&self, mut condition: impl FnMut() -> bool) -> bool {
        for _ in 0..1000 {
            if condition() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

/// One line of `CLUSTER NODES`: `id ip:port@cport flags master ping pong epoch state slots…`.
fn parse_node(line: &str) -> Option<ClusterNode> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 8 {
        return None;
    }
    let port = fields[1]
        .split('@')
        .next()?
        .rsplit(':')
        .next()?
        .parse()
        .ok()?;
    let flags: Vec<&str> = fields[2].split(',').collect();
    let slots = fields[8..]
        .iter()
        .filter(|s| !s.starts_with('['))
        .filter_map(|s| match s.split_once('-') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => s.parse().ok().map(|a| (a, a)),
        })
        .collect();
    Some(ClusterNode {
        id: fields[0].to_string(),
        port,
        master: flags.contains(&"master"),
        master_id: (fields[3] != "-").then(|| fields[3].to_string()),
        failing: flags.iter().any(|f| f.starts_with("fail")),
        slots,
    })
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        // Each server kills its process when dropped.
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_cluster_answers_tls_clients_with_its_tls_ports() {
        let ca = TestCa::new();
        let client = ca.issue("client", "DNS:client");
        let cluster = RedisCluster::start_tls(3, 0, &ca, true);
        let node = &cluster.servers()[0];
        let output = Command::new("redis-cli")
            .args(["--tls", "--cacert"])
            .arg(ca.ca_file())
            .arg("--cert")
            .arg(&client.cert)
            .arg("--key")
            .arg(&client.key)
            .args(["-h", "127.0.0.1", "-p", &node.tls_port().to_string()])
            .args(["CLUSTER", "SLOTS"])
            .output()
            .expect("redis-cli runs");
        let slots = String::from_utf8_lossy(&output.stdout);
        for server in cluster.servers() {
            assert!(
                slots
                    .lines()
                    .any(|l| l.trim() == server.tls_port().to_string()),
                "{slots}"
            );
        }
        assert!(cluster.tls_url().starts_with("rediss-cluster://127.0.0.1:"));
    }
}
