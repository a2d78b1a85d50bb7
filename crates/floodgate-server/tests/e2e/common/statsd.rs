//! A statsd server of the test's own: what Floodgate sends it, summed by name, read until a
//! test has what it waits for (at most 20 s).

use std::collections::HashMap;
use std::time::Duration;

/// The statsd lines received so far.
#[derive(Debug, Default)]
pub struct Received {
    /// Counters (`name:n|c`), summed by name.
    pub counters: HashMap<String, u64>,
    /// Timer lines (`name:ms|ms[|@rate]`), counted by name.
    pub timers: HashMap<String, u64>,
    /// Every timer line, as sent.
    pub timer_lines: Vec<String>,
}

impl Received {
    /// Adds the lines of `text`; anything but a counter or a timer fails the test.
    pub fn add(&mut self, text: &str) {
        for line in text.lines() {
            if let Some(counter) = line.strip_suffix("|c") {
                let (name, n) = counter.rsplit_once(':').expect("name:value|c");
                *self.counters.entry(name.to_string()).or_default() +=
                    n.parse::<u64>().expect("a count");
            } else if line.contains("|ms") {
                let (name, value) = line.split_once(':').expect("name:value|ms");
                let ms: f64 = value
                    .split('|')
                    .next()
                    .unwrap()
                    .parse()
                    .expect("milliseconds");
                assert!(ms >= 0.0, "{line}");
                *self.timers.entry(name.to_string()).or_default() += 1;
                self.timer_lines.push(line.to_string());
            } else {
                panic!("not a statsd counter or timer: {line:?}");
            }
        }
    }

    /// Whether every counter of `want` has reached its count.
    pub fn has(&self, want: &[(String, u64)]) -> bool {
        want.iter()
            .all(|(name, n)| self.counters.get(name).copied().unwrap_or(0) >= *n)
    }

    /// Reads datagrams from `socket` (each at most `largest` bytes) until `done`; panics after
    /// 20 s.
    pub async fn from_udp(
        socket: &tokio::net::UdpSocket,
        largest: usize,
        done: impl Fn(&Received) -> bool,
    ) -> Received {
        let mut received = Received::default();
        let mut buffer = vec![0u8; 65_536];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !done(&received) {
            let n = tokio::time::timeout_at(deadline, socket.recv(&mut buffer))
                .await
                .unwrap_or_else(|_| panic!("statsd did not get everything: {received:#?}"))
                .unwrap();
            assert!(n <= largest, "a datagram of {n} bytes");
            received.add(std::str::from_utf8(&buffer[..n]).expect("UTF-8 lines"));
        }
        received
    }

    /// Reads lines from the first connection to `listener` until `done`; panics after 20 s.
    pub async fn from_tcp(
        listener: &tokio::net::TcpListener,
        done: impl Fn(&Received) -> bool,
    ) -> Received {
        use tokio::io::AsyncBufReadExt;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let (stream, _) = tokio::time::timeout_at(deadline, listener.accept())
            .await
            .expect("a statsd connection within 20 s")
            .unwrap();
        let mut lines = tokio::io::BufReader::new(stream).lines();
        let mut received = Received::default();
        while !done(&received) {
            let line = tokio::time::timeout_at(deadline, lines.next_line())
                .await
                .unwrap_or_else(|_| panic!("statsd did not get everything: {received:#?}"))
                .unwrap()
                .expect("the connection stays open");
            received.add(&line);
        }
        received
    }
}
