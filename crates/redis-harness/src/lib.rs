//! Test support for Floodgate's Redis tests: a `redis-server` process of the test's own, on a
//! free loopback port, with nothing saved to disk (`--save "" --appendonly no`), killed when
//! dropped. Tests never use (or flush) a Redis they did not start, such as a machine's shared
//! one on port 6379.
//!
//! Waiting for the process to come up or go down polls `PING` every 10 ms for at most 5 s: a
//! bounded wait for another process, not a sleep standing in for time.
#![warn(missing_docs, missing_debug_implementations)]
#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A `redis-server` of our own, killed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts one on a free loopback port and waits until it answers `PING`. Panics if
    /// `redis-server` is not installed or does not come up within 5 s.
    pub fn start() -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut server = RedisServer { port, child: None };
        server.restart();
        server
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its URL, `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the process (again) on the same port, empty, and waits until it answers `PING`.
    pub fn restart(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        self.child = Some(child);
        if !self.wait_until(true) {
            panic!("redis-server on port {} did not come up", self.port);
        }
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
        let pid = self.child.as_ref().expect("running").id();
        let status = Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// Whether it answers `PING` now.
    pub fn pong(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
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

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
