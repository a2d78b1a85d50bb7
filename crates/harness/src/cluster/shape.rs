//! Changing a running cluster's shape, as operators do under traffic: a master added and slots
//! moved onto it (`redis-cli --cluster rebalance`, `reshard`), one slot moved key by key with
//! pauses (the window in which clients meet `ASK` and `TRYAGAIN`), a master drained and
//! removed. Plain clusters only (not [`RedisCluster::start_tls`]'s).

use std::process::{Command, Stdio};
use std::time::Duration;

use super::RedisCluster;

impl RedisCluster {
    /// Starts a new node, joins it as an empty master (`redis-cli --cluster add-node`) and
    /// waits until every node knows it and the cluster is ok. Returns its port.
    pub fn add_master(&mut self) -> u16 {
        let node = self.new_node(None);
        let port = node.port();
        let seed = self.servers()[0].port();
        self.nodes.push(node);
        self.redis_cli(&[
            "add-node",
            &format!("127.0.0.1:{port}"),
            &format!("127.0.0.1:{seed}"),
        ]);
        let known = self.wait(|| {
            self.nodes().iter().any(|n| n.port == port && n.master)
                && self.cli(port, &["CLUSTER", "INFO"]).is_some_and(|i| {
                    i.contains(&format!("cluster_known_nodes:{}", self.nodes.len()))
                })
        });
        assert!(known, "the new master on {port} did not join");
        self.wait_until_ok();
        port
    }

    /// Spreads the slots evenly over every master, empty ones included (`redis-cli --cluster
    /// rebalance --cluster-use-empty-masters`), and waits until the cluster is ok.
    pub fn rebalance(&self) {
        let seed = self.live_master();
        self.redis_cli(&[
            "rebalance",
            &format!("127.0.0.1:{seed}"),
            "--cluster-use-empty-masters",
            "--cluster-yes",
        ]);
        self.wait_until_ok();
    }

    /// Moves `count` slots from the master on `from` to the master on `to` (`redis-cli
    /// --cluster reshard`), with their keys, and waits until the cluster is ok.
    pub fn reshard(&self, from: u16, to: u16, count: usize) {
        let (from_id, to_id) = (self.id_of(from), self.id_of(to));
        self.redis_cli(&[
            "reshard",
            &format!("127.0.0.1:{from}"),
            "--cluster-from",
            &from_id,
            "--cluster-to",
            &to_id,
            "--cluster-slots",
            &count.to_string(),
            "--cluster-yes",
        ]);
        self.wait_until_ok();
    }

    /// Moves slot `slot` to the master on `to` as `redis-cli` does, but `per_step` keys at a
    /// time with `pause` between steps, so that clients meet the slot while it is being
    /// moved: `IMPORTING` on the target, `MIGRATING` on the source, `MIGRATE` of its keys,
    /// then `SETSLOT … NODE` on every master. Nothing when the slot is already there.
    pub fn move_slot(&self, slot: u16, to: u16, per_step: usize, pause: Duration) {
        let from = self.master_of_slot(slot);
        if from == to {
            return;
        }
        let (from_id, to_id) = (self.id_of(from), self.id_of(to));
        let slot_arg = slot.to_string();
        let set = |port: u16, args: &[&str]| {
            let mut all = vec!["CLUSTER", "SETSLOT", slot_arg.as_str()];
            all.extend_from_slice(args);
            let ok = self.cli(port, &all);
            assert_eq!(
                ok.as_deref().map(str::trim),
                Some("OK"),
                "{all:?} on {port}"
            );
        };
        set(to, &["IMPORTING", &from_id]);
        set(from, &["MIGRATING", &to_id]);
        let per_step = per_step.max(1).to_string();
        loop {
            let keys = self
                .cli(from, &["CLUSTER", "GETKEYSINSLOT", &slot_arg, &per_step])
                .unwrap_or_default();
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let port = to.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().copied());
            let reply = self.cli(from, &args).unwrap_or_default();
            assert!(
                matches!(reply.trim(), "OK" | "NOKEY"),
                "MIGRATE of slot {slot}: {reply}"
            );
            std::thread::sleep(pause);
        }
        // The target first, then the source, then every other master, as redis-cli does.
        set(to, &["NODE", &to_id]);
        set(from, &["NODE", &to_id]);
        for master in self.nodes().iter().filter(|n| n.master && !n.failing) {
            if master.port != to && master.port != from {
                let _ = self.cli(
                    master.port,
                    &["CLUSTER", "SETSLOT", &slot_arg, "NODE", &to_id],
                );
            }
        }
        self.wait_until_ok();
    }

    /// Moves every slot off the master on `port` (`redis-cli --cluster rebalance` with its
    /// weight 0), removes it from the cluster (`del-node`, which also stops it), and waits
    /// until the others are ok.
    pub fn remove_master(&mut self, port: u16) {
        let id = self.id_of(port);
        let seed = self
            .nodes()
            .into_iter()
            .find(|n| n.master && n.port != port && !n.failing)
            .expect("another master")
            .port;
        self.redis_cli(&[
            "rebalance",
            &format!("127.0.0.1:{seed}"),
            "--cluster-weight",
            &format!("{id}=0"),
            "--cluster-yes",
        ]);
        self.wait_until_ok();
        self.redis_cli(&["del-node", &format!("127.0.0.1:{seed}"), &id]);
        if let Some(at) = self.nodes.iter().position(|n| n.port() == port) {
            // Stopped by del-node; dropping it reaps the process.
            self.nodes.remove(at);
        }
        self.wait_until_ok();
    }

    /// The port of the master serving `slot` now.
    pub fn master_of_slot(&self, slot: u16) -> u16 {
        self.nodes()
            .into_iter()
            .find(|n| n.master && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
            .expect("a master serves every slot")
            .port
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`).
    pub fn slot_of(&self, key: &str) -> u16 {
        self.cli(self.live_master(), &["CLUSTER", "KEYSLOT", key])
            .and_then(|s| s.trim().parse().ok())
            .expect("CLUSTER KEYSLOT answers")
    }

    /// The node id of the node on `port`.
    pub fn id_of(&self, port: u16) -> String {
        self.nodes()
            .into_iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on {port}"))
            .id
    }

    /// A master that answers.
    fn live_master(&self) -> u16 {
        self.nodes()
            .into_iter()
            .find(|n| n.master && !n.failing && self.servers().iter().any(|s| s.port() == n.port))
            .expect("a live master")
            .port
    }

    /// `redis-cli --cluster args…`, which must succeed.
    fn redis_cli(&self, args: &[&str]) {
        let output = Command::new("redis-cli")
            .arg("--cluster")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli is installed");
        assert!(
            output.status.success(),
            "redis-cli --cluster {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
