//! A `memcached` process of the test's own, on a free loopback port, UDP off
//! (`memcached -l 127.0.0.1 -p PORT -U 0`, and `-u root` so that root may run it), killed when dropped; [`MemcachedServer::pause`]
//! (SIGSTOP) and [`MemcachedServer::resume`] (SIGCONT) for fault tests, and a raw
//! [`MemcachedServer::get`] that reads what a store wrote, past any client.
//!
//! Waiting for the process to come up or go down polls `version` every 10 ms for at most 5 s.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A `memcached` of our own, killed when dropped.
#[derive(Debug)]
pub struct MemcachedServer {
    port: u16,
    child: Option<Child>,
    /// Arguments after the common ones (TLS's).
    extra: Vec<String>,
}

impl MemcachedServer {
    /// Starts one on a free loopback port and waits until it answers. Panics if `memcached`
    /// is not installed or does not come up within 5 s.
    pub fn start() -> MemcachedServer {
        MemcachedServer::start_with(Vec::new())
    }

    /// Starts one with `extra` arguments after the common ones (`-Z -o ssl_chain_cert=…` for
    /// TLS, which then answers only TLS: it is waited for by its port accepting connections).
    pub fn start_with(extra: Vec<String>) -> MemcachedServer {
        let mut server = MemcachedServer {
            port: super::free_port(),
            child: None,
            extra,
        };
        server.restart();
        server
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its address, `127.0.0.1:PORT`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts the process (again) on the same port, empty, and waits until it answers.
    pub fn restart(&mut self) {
        let child = Command::new("memcached")
            .args(["-l", "127.0.0.1", "-p", &self.port.to_string(), "-U", "0"])
            // memcached refuses to run as root without a user to be; as anyone else, `-u` is
            // ignored.
            .args(["-u", "root"])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("memcached is installed");
        self.child = Some(child);
        if !self.wait_until(true) {
            panic!("memcached on port {} did not come up", self.port);
        }
        if self.extra.is_empty() {
            let ours = self.child.as_ref().map(Child::id);
            assert_eq!(
                self.process_id(),
                ours,
                "port {} is served by another process, not the memcached started here",
                self.port
            );
        }
    }

    /// Kills the process and waits until the port no longer answers.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if !self.wait_until(false) {
            panic!("memcached on port {} did not go down", self.port);
        }
    }

    /// Pauses the process (SIGSTOP) and waits until every one of its threads has stopped (a
    /// signal is delivered after `kill` returns, and a thread may answer one more command
    /// meanwhile): from then on connections are still accepted by the kernel, and nothing is
    /// answered.
    pub fn pause(&self) {
        self.signal("STOP");
        let pid = self.child.as_ref().expect("running").id();
        for _ in 0..5_000 {
            if all_stopped(pid) {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("memcached {pid} did not stop within 5 s");
    }

    /// Resumes a paused process (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, signal: &str) {
        crate::send_signal(self.child.as_ref().expect("running").id(), signal);
    }

    /// The value under `key`, read with a plain `get` on a connection of its own; `None`
    /// when absent (or the server does not answer within 1 s).
    pub fn get(&self, key: &str) -> Option<String> {
        let mut lines = self.ask(&format!("get {key}\r\n"))?;
        let header = lines.next()?;
        if header == "END" {
            return None;
        }
        lines.next()
    }

    /// The seconds `key` has left to live (`-1`: it never expires), from the meta command
    /// `mg key t`; `None` when absent.
    pub fn ttl(&self, key: &str) -> Option<i64> {
        let line = self.ask(&format!("mg {key} t\r\n"))?.next()?;
        let flags = line.strip_prefix("HD ")?;
        flags
            .split(' ')
            .find_map(|f| f.strip_prefix('t'))
            .and_then(|t| t.parse().ok())
    }

    /// The `STAT pid` of the server answering on the port.
    fn process_id(&self) -> Option<u32> {
        self.stat("pid").and_then(|p| u32::try_from(p).ok())
    }

    /// A number from the server's `stats` (such as `total_connections`, the connections it
    /// has accepted since it started, this reading's own included), read on a connection of
    /// its own; `None` when absent or the server does not answer within 1 s.
    pub fn stat(&self, name: &str) -> Option<u64> {
        let lines = self.ask("stats\r\n")?;
        let prefix = format!("STAT {name} ");
        lines
            .take_while(|l| l != "END")
            .find_map(|l| l.strip_prefix(&prefix).and_then(|v| v.trim().parse().ok()))
    }

    /// Sends `command` and reads the reply's lines (without `\r\n`), up to `END` or a
    /// one-line answer.
    fn ask(&self, command: &str) -> Option<std::vec::IntoIter<String>> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        s.write_all(command.as_bytes()).ok()?;
        let mut reader = BufReader::new(s);
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).ok()? == 0 {
                return None;
            }
            let line = line.trim_end_matches("\r\n").to_owned();
            let last = ["END", "EN", "HD"].contains(&line.as_str())
                || ["VERSION", "HD ", "ERROR", "CLIENT_ERROR", "SERVER_ERROR"]
                    .iter()
                    .any(|p| line.starts_with(p));
            lines.push(line);
            if last {
                return Some(lines.into_iter());
            }
        }
    }

    /// Whether it is up: answering `version` (plain), or accepting connections (TLS).
    fn up(&self) -> bool {
        if !self.extra.is_empty() {
            return TcpStream::connect(("127.0.0.1", self.port)).is_ok();
        }
        self.ask("version\r\n")
            .and_then(|mut lines| lines.next())
            .is_some_and(|l| l.starts_with("VERSION "))
    }

    fn wait_until(&self, up: bool) -> bool {
        for _ in 0..500 {
            if self.up() == up {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

/// Whether every thread of process `pid` is stopped (state `T` in `/proc/PID/task/*/stat`;
/// off Linux, where there is no `/proc`, the signal is taken as delivered).
fn all_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat"))
            .ok()
            // The state follows the command name, which is in parentheses.
            .and_then(|stat| {
                stat.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().to_owned())
            })
            .is_some_and(|rest| rest.starts_with('T') || rest.starts_with('t'))
    })
}

impl Drop for MemcachedServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // A paused process is killed as well (SIGKILL needs no SIGCONT).
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
