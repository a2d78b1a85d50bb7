//! Drives Floodgate's token bucket script (`EVALSHA`, one random key of 100,000 per call) from
//! `C` concurrent tasks for `D` seconds through redis-rs's multiplexed `ConnectionManager` and
//! through fred's client, one after the other, and prints decisions/s and latency percentiles
//! for each. Usage: `redis-clients-bench redis://127.0.0.1:PORT [C] [D]`.

use std::sync::Arc;
use std::time::Duration;

use floodgate::{Clock, SystemClock};

use fred::prelude::*;
use rand::Rng;

const KEYS: u32 = 100_000;

/// The script's arguments: now = Redis TIME, no least TTL, rate 10/s, capacity 100, cost 1,
/// tag T (token bucket).
fn args() -> Vec<&'static str> {
    vec!["", "0", "10", "100", "1", "T"]
}

struct Report {
    decisions: u64,
    seconds: f64,
    latencies_us: Vec<u64>,
}

impl Report {
    fn print(mut self, name: &str) {
        self.latencies_us.sort_unstable();
        let at = |q: f64| {
            let i = ((self.latencies_us.len() as f64 * q) as usize).min(self.latencies_us.len() - 1);
            self.latencies_us[i] as f64 / 1000.0
        };
        println!(
            "{name}: {:.0} decisions/s, p50 {:.3} ms, p99 {:.3} ms ({} decisions in {:.1} s)",
            self.decisions as f64 / self.seconds,
            at(0.50),
            at(0.99),
            self.decisions,
            self.seconds
        );
    }
}

async fn drive<F, Fut>(tasks: usize, duration: Duration, call: F) -> Report
where
    F: Fn(u32) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let call = Arc::new(call);
    // Time from the project's clock, as everywhere else (one per run, shared by the tasks).
    let clock = SystemClock::new();
    let start = clock.now();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (call, clock) = (call.clone(), clock.clone());
        handles.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while clock.now().saturating_since(start) < duration {
                let key = rand::rng().random_range(0..KEYS);
                let t = clock.now();
                call(key).await;
                latencies.push(clock.now().saturating_since(t).as_micros() as u64);
            }
            latencies
        }));
    }
    let mut latencies_us = Vec::new();
    for h in handles {
        latencies_us.extend(h.await.unwrap());
    }
    Report {
        decisions: latencies_us.len() as u64,
        seconds: clock.now().saturating_since(start).as_secs_f64(),
        latencies_us,
    }
}

#[tokio::main]
async fn main() {
    let mut argv = std::env::args().skip(1);
    let url = argv.next().expect("usage: redis-clients-bench URL [C] [D]");
    let tasks: usize = argv.next().map_or(64, |c| c.parse().unwrap());
    let duration = Duration::from_secs(argv.next().map_or(10, |d| d.parse().unwrap()));
    let source = floodgate::store::redis::script_source("token_bucket").unwrap();

    let client = redis::Client::open(url.as_str()).unwrap();
    let manager = redis::aio::ConnectionManager::new(client).await.unwrap();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(&source)
        .query_async(&mut manager.clone())
        .await
        .unwrap();
    let (m, s) = (manager.clone(), sha.clone());
    let report = drive(tasks, duration, move |key| {
        let (mut m, s) = (m.clone(), s.clone());
        async move {
            let _: redis::Value = redis::cmd("EVALSHA")
                .arg(&s)
                .arg(1)
                .arg(format!("rate:{{{key}}}"))
                .arg(args())
                .query_async(&mut m)
                .await
                .unwrap();
        }
    })
    .await;
    report.print("redis-rs ConnectionManager (multiplexed)");

    let config = Config::from_url(&url).unwrap();
    let fred = Builder::from_config(config).build().unwrap();
    fred.init().await.unwrap();
    let report = drive(tasks, duration, move |key| {
        let (f, s) = (fred.clone(), sha.clone());
        async move {
            let _: fred::types::Value = f
                .evalsha(s, vec![format!("rate:{{{key}}}")], args())
                .await
                .unwrap();
        }
    })
    .await;
    report.print("fred Client (auto pipelining)");
}
