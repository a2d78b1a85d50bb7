//! Test support for Floodgate's tests: a counting allocator ([`allocations`]), a `memcached`
//! process of the test's own ([`MemcachedServer`]), a DNS server for SRV records
//! ([`DnsServer`]), and a `redis-server` process of the test's own ([`RedisServer`]), on a
//! free loopback port, with nothing saved to disk (`--save "" --appendonly no`), killed when
//! dropped. Tests never use (or flush) a Redis they did not start, such as a machine's shared
//! one on port 6379.
//!
//! Waiting for the process to come up or go down polls `PING` every 10 ms for at most 5 s: a
//! bounded wait for another process, not a sleep standing in for time.
#![warn(missing_docs, missing_debug_implementations)]
#![deny(unsafe_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

pub mod allocations;
mod cluster;
mod dns;
mod memcached;
mod sentinel;
mod tls;
pub use cluster::{ClusterNode, RedisCluster};
pub use dns::{DnsServer, SrvRecord};
pub use memcached::MemcachedServer;
pub use sentinel::{RedisSentinels, SentinelOptions};
pub use tls::{Issued, TestCa};

/// A `redis-server` of our own, killed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    /// Arguments after the common ones (a cluster node's, or a TLS port's).
    extra: Vec<String>,
    tls: Option<Tls>,
    /// The password it requires (`--requirepass`), if any.
    password: Option<String>,
    /// A config file given before every argument (a sentinel's, which it rewrites).
    config_file: Option<PathBuf>,
}

/// A TLS port beside the plain one, with the CA its certificate chains to (its own, for
/// [`RedisServer::start_tls`]).
#[derive(Debug)]
struct Tls {
    port: u16,
    ca_file: PathBuf,
    _own_ca: Option<TestCa>,
}

/// The arguments serving TLS on `port` with `issued`, trusting `ca_file` for clients (and
/// for the cluster bus and replication, when those go over TLS).
fn tls_arguments(port: u16, issued: &Issued, ca_file: &Path, auth_clients: bool) -> Vec<String> {
    let path = |p: &Path| p.display().to_string();
    vec![
        "--tls-port".to_string(),
        port.to_string(),
        "--tls-cert-file".to_string(),
        path(&issued.cert),
        "--tls-key-file".to_string(),
        path(&issued.key),
        "--tls-ca-cert-file".to_string(),
        path(ca_file),
        "--tls-auth-clients".to_string(),
        if auth_clients { "yes" } else { "no" }.to_string(),
    ]
}

impl RedisServer {
    /// Starts one on a free loopback port and waits until it answers `PING`. Panics if
    /// `redis-server` is not installed or does not come up within 5 s.
    pub fn start() -> RedisServer {
        RedisServer::start_with(free_port(), Vec::new())
    }

    /// Starts one on `port` with `extra` arguments after the common ones.
    fn start_with(port: u16, extra: Vec<String>) -> RedisServer {
        let mut server = RedisServer {
            port,
            child: None,
            extra,
            tls: None,
            password: None,
            config_file: None,
        };
        server.restart();
        server
    }

    /// Starts one that requires `password` (`--requirepass`): a client must `AUTH` first.
    pub fn start_with_password(password: &str) -> RedisServer {
        let mut server = RedisServer {
            port: free_port(),
            child: None,
            extra: vec!["--requirepass".to_string(), password.to_string()],
            tls: None,
            password: Some(password.to_string()),
            config_file: None,
        };
        server.restart();
        server
    }

    /// Starts one that also serves TLS on a second port ([`RedisServer::tls_url`]), with a
    /// certificate for `127.0.0.1` signed by a test CA of its own ([`RedisServer::ca_file`]),
    /// removed when the server is dropped. Clients need no certificate.
    pub fn start_tls() -> RedisServer {
        let ca = TestCa::new();
        let issued = ca.issue("server", "IP:127.0.0.1,DNS:localhost");
        let mut server = RedisServer::start_tls_with(&issued, &ca.ca_file(), false);
        if let Some(tls) = &mut server.tls {
            tls._own_ca = Some(ca);
        }
        server
    }

    /// Starts one that also serves TLS on a second port with the certificate `issued`,
    /// trusting the CAs of `ca_file` for client certificates, which it requires when
    /// `auth_clients` (Redis's `tls-auth-clients yes`).
    pub fn start_tls_with(issued: &Issued, ca_file: &Path, auth_clients: bool) -> RedisServer {
        let port = free_port();
        let tls = Tls {
            port: free_port(),
            ca_file: ca_file.to_path_buf(),
            _own_ca: None,
        };
        let extra = tls_arguments(tls.port, issued, ca_file, auth_clients);
        let mut server = RedisServer {
            port,
            child: None,
            extra,
            tls: Some(tls),
            password: None,
            config_file: None,
        };
        server.restart();
        server
    }

    /// The TLS URL, `rediss://127.0.0.1:PORT`, of a server started with
    /// [`RedisServer::start_tls`].
    pub fn tls_url(&self) -> String {
        let tls = self.tls.as_ref().expect("started with start_tls");
        format!("rediss://127.0.0.1:{}", tls.port)
    }

    /// The PEM file of the CA that signed a TLS server's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.tls
            .as_ref()
            .expect("started with start_tls")
            .ca_file
            .clone()
    }

    /// Its TLS port, for a server started with TLS.
    pub fn tls_port(&self) -> u16 {
        self.tls.as_ref().expect("started with TLS").port
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its URL, `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the process (again) on the same port, empty (a cluster node keeps its identity
    /// from its cluster config file), and waits until it answers `PING`.
    pub fn restart(&mut self) {
        let mut command = Command::new("redis-server");
        if let Some(config) = &self.config_file {
            command.arg(config);
        }
        let child = command
            .args(["--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        self.child = Some(child);
        if !self.wait_until(true) {
            panic!("redis-server on port {} did not come up", self.port);
        }
        // The PONG may come from someone else's server on the port (ours then failed to bind
        // it): fail here rather than run a test against it.
        let ours = self.child.as_ref().map(Child::id);
        let serving = self.process_id();
        assert_eq!(
            serving, ours,
            "port {} is served by another process, not the redis-server started here",
            self.port
        );
    }

    /// The `process_id` of the server answering on the port (from `INFO server`).
    fn process_id(&self) -> Option<u32> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        self.authenticate(&mut s)?;
        s.write_all(b"INFO server\r\n").ok()?;
        // A bulk string: `$<length>\r\n`, then that many bytes and `\r\n`.
        let mut reply = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = s.read(&mut chunk).ok().filter(|&n| n > 0)?;
            reply.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&reply);
            let Some((header, body)) = text.strip_prefix('$')?.split_once("\r\n") else {
                continue;
            };
            if body.len() >= header.parse::<usize>().ok()? {
                break;
            }
        }
        let reply = String::from_utf8_lossy(&reply);
        let line = reply.lines().find_map(|l| l.strip_prefix("process_id:"))?;
        line.trim().parse().ok()
    }

    /// Kills the process and waits until the port no longer answers.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if !self.wait_until(false) {
            panic!("redis-server on port {} did not go down", self.port);
        }
    }

    /// Sends `signal` (`STOP` pauses it, `CONT` resumes it) to the running process.
    pub fn signal(&self, signal: &str) {
        send_signal(self.child.as_ref().expect("running").id(), signal);
    }

    /// `redis-cli args…` against it (authenticated when it requires a password): its output,
    /// or `None` if it failed (the server is down).
    pub fn cli(&self, args: &[&str]) -> Option<String> {
        match &self.password {
            None => cli(self.port, args),
            Some(password) => cli(
                self.port,
                &[&["-a", password.as_str(), "--no-auth-warning"][..], args].concat(),
            ),
        }
    }

    /// Whether it answers `PING` now.
    pub fn pong(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        let mut buf = [0u8; 7];
        self.authenticate(&mut s).is_some()
            && s.write_all(b"PING\r\n").is_ok()
            && s.read_exact(&mut buf).is_ok()
            && &buf == b"+PONG\r\n"
    }

    /// Sends `AUTH password` on `s` and reads its `+OK`, when the server requires a password.
    fn authenticate(&self, s: &mut TcpStream) -> Option<()> {
        let Some(password) = &self.password else {
            return Some(());
        };
        s.write_all(format!("AUTH {password}\r\n").as_bytes())
            .ok()?;
        let mut ok = [0u8; 5];
        s.read_exact(&mut ok).ok()?;
        (&ok == b"+OK\r\n").then_some(())
    }

    fn wait_until(&self, up: bool) -> bool {
        for _ in 0..500 {
            if self.pong() == up {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

/// The ports handed out: they and their cluster bus ports (10,000 above) lie below Linux's
/// ephemeral range (32768 and up), so that between the check and the server's own bind no
/// outgoing connection can be given one as its source (a port the OS picks for `127.0.0.1:0`
/// can be, and a test run opens thousands of connections). They are handed out in turn from a
/// start that differs between processes, so two servers of one test run never get the same.
const PORTS: std::ops::Range<u32> = 20_000..22_700;

/// A loopback port free now, with its cluster bus port (the server binds them right after).
fn free_port() -> u16 {
    static TURN: AtomicU32 = AtomicU32::new(0);
    let span = PORTS.end - PORTS.start;
    let start = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let turn = TURN.fetch_add(1, Ordering::Relaxed);
        let port = PORTS.start + (start + turn) % span;
        let port = u16::try_from(port).expect("PORTS are u16");
        let free = |port: u16| TcpListener::bind(("127.0.0.1", port)).is_ok();
        if free(port) && free(port + 10_000) {
            return port;
        }
    }
    panic!("no free loopback port in {PORTS:?}")
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `redis-cli -p port args…`'s output, or `None` if it failed (the server is down).
fn cli(port: u16, args: &[&str]) -> Option<String> {
    let output = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .expect("redis-cli is installed");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    (output.status.success() && !text.starts_with("Could not connect")).then_some(text)
}

/// Sends `signal` (`STOP`, `CONT`, `TERM`, …) to process `pid`, the servers' one way of
/// pausing and resuming what the tests started.
pub(crate) fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "served by another process")]
    fn a_port_another_server_answers_on_is_refused() {
        let first = RedisServer::start();
        let mut second = RedisServer {
            port: first.port(),
            child: None,
            extra: Vec::new(),
            tls: None,
            password: None,
            config_file: None,
        };
        second.restart();
    }

    #[test]
    fn a_server_knows_its_own_process() {
        let server = RedisServer::start();
        assert_eq!(server.process_id(), server.child.as_ref().map(Child::id));
    }

    #[test]
    fn a_server_with_a_password_answers_only_after_auth() {
        let server = RedisServer::start_with_password("hunter2");
        assert_eq!(server.process_id(), server.child.as_ref().map(Child::id));
        assert_eq!(server.cli(&["PING"]).as_deref(), Some("PONG\n"));
        assert!(cli(server.port(), &["PING"]).is_some_and(|r| r.contains("NOAUTH")));
    }
}
