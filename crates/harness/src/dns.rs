//! A DNS server of the test's own: Debian's `dnsmasq` on a free loopback port (UDP and TCP),
//! answering only the SRV records it is given (no upstream servers, no hosts file), killed
//! when dropped; for the memcached store's SRV discovery (upstream's `MEMCACHE_SRV`).
//!
//! Waiting for it to come up polls its TCP port every 10 ms for at most 5 s.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One SRV record: `name` (`_service._proto.domain`) points at `target:port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SrvRecord {
    /// The record's name.
    pub name: String,
    /// The host it names (a name, such as `localhost`).
    pub target: String,
    /// The port it names.
    pub port: u16,
}

/// A `dnsmasq` of our own, killed when dropped.
#[derive(Debug)]
pub struct DnsServer {
    ip: Ipv4Addr,
    port: u16,
    child: Option<Child>,
}

impl DnsServer {
    /// Starts one answering `records`, and waits until it listens. Panics if `dnsmasq` is not
    /// installed (package `dnsmasq-base`) or does not come up within 5 s.
    pub fn start(records: &[SrvRecord]) -> DnsServer {
        let mut server = DnsServer {
            ip: Ipv4Addr::LOCALHOST,
            port: super::free_port(),
            child: None,
        };
        server.serve(records);
        server
    }

    /// Starts one on port 53 of `ip` (a loopback address of the test's choosing, such as
    /// `127.53.x.y`), where a `resolv.conf` can point (it names no port): for a process
    /// given that file in a mount namespace of its own. Needs root (a port below 1024).
    pub fn start_on_port_53(ip: Ipv4Addr, records: &[SrvRecord]) -> DnsServer {
        let mut server = DnsServer {
            ip,
            port: 53,
            child: None,
        };
        server.serve(records);
        server
    }

    /// Where it answers, `IP:PORT`.
    pub fn address(&self) -> SocketAddr {
        SocketAddr::from((self.ip, self.port))
    }

    /// Answers `records` from now on (the process is started again, on the same port).
    pub fn serve(&mut self, records: &[SrvRecord]) {
        self.stop();
        let mut command = Command::new("/usr/sbin/dnsmasq");
        command
            .arg("--keep-in-foreground")
            .arg(format!("--port={}", self.port))
            .arg(format!("--listen-address={}", self.ip))
            .arg("--bind-interfaces")
            .args(["--no-resolv", "--no-hosts", "--no-poll"])
            .args(["--conf-file=/dev/null", "--pid-file=", "--user=root"]);
        for r in records {
            command.arg(format!("--srv-host={},{},{}", r.name, r.target, r.port));
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dnsmasq is installed (package dnsmasq-base)");
        self.child = Some(child);
        for _ in 0..500 {
            if TcpStream::connect(self.address()).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("dnsmasq on port {} did not come up", self.port);
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop();
    }
}
