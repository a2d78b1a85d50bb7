//! A load generator for Envoy's `ShouldRateLimit` over gRPC whose descriptor value changes with
//! every call, for what h2load cannot do (it sends one fixed body): many keys.
//!
//! Like `h2load -c C -m M`, it opens C HTTP/2 connections and keeps M calls in flight on each,
//! on one thread; every call carries the domain and one descriptor `[("key", "user-N")]`, N
//! drawn uniformly from 1..=KEYS. It prints the calls answered per second (after a warm-up)
//! and the p50 / p99 / p99.9 latency, and counts OK, OVER_LIMIT and failed calls apart.
//!
//! ```text
//! cargo run --release -p floodgate-server --example rls_load -- \
//!     http://127.0.0.1:19081 --domain bench --keys 100000 -c 4 -m 32 --duration 5s
//! ```

use std::error::Error;

use bytes::Bytes;
use floodgate::{Clock, Nanos, SystemClock};
use floodgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use floodgate_server::grpc::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;

const METHOD: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// What the command line asks for.
#[derive(Clone, Debug, clap::Parser)]
#[command(name = "rls_load", about = "gRPC ShouldRateLimit load over many keys")]
struct Settings {
    /// The gRPC server's URL, e.g. http://127.0.0.1:8081.
    url: String,
    /// The domain every call carries.
    #[arg(long, default_value = "bench")]
    domain: String,
    /// Distinct descriptor values, drawn uniformly.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    keys: u64,
    /// HTTP/2 connections.
    #[arg(short = 'c', default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    connections: u16,
    /// Calls in flight per connection.
    #[arg(short = 'm', default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    streams: u16,
    /// How long to measure, after the warm-up (a duration, as every floodgate command reads
    /// one: `5s`, `1m`, plain seconds).
    #[arg(long, default_value = "5s", value_parser = floodgate_server::cli::positive_duration)]
    duration: std::time::Duration,
    /// How long to warm up, not measured (a duration).
    #[arg(long = "warm-up", default_value = "1s", value_parser = floodgate_server::cli::duration)]
    warm_up: std::time::Duration,
}

/// One gRPC-framed request for key number `n`.
fn body(domain: &str, n: u64) -> Bytes {
    let message = RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            is_negative_hits: false,
            entries: vec![Entry {
                key: "key".into(),
                value: format!("user-{n}"),
            }],
            limit: None,
            hits_addend: None,
        }],
        hits_addend: 1,
    }
    .encode_to_vec();
    let mut framed = Vec::with_capacity(5 + message.len());
    framed.push(0);
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(&message);
    Bytes::from(framed)
}

/// What one stream saw during the measured window.
#[derive(Default)]
struct Tally {
    ok: u64,
    over_limit: u64,
    failed: u64,
    /// Latencies in microseconds.
    latencies: Vec<u32>,
}

/// xorshift64*: a different key per call, cheap and reproducible per stream.
struct Keys(u64);

impl Keys {
    fn next(&mut self, keys: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % keys + 1
    }
}

async fn stream(
    mut sender: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    settings: Settings,
    seed: u64,
    clock: SystemClock,
    start: Nanos,
) -> Tally {
    let uri = format!("{}{METHOD}", settings.url.trim_end_matches('/'));
    let measure_from = start.saturating_add(settings.warm_up);
    let end = measure_from.saturating_add(settings.duration);
    let mut keys = Keys(seed | 1);
    let mut tally = Tally::default();
    loop {
        let sent = clock.now();
        if sent >= end {
            return tally;
        }
        let request = http::Request::post(&uri)
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(body(&settings.domain, keys.next(settings.keys))))
            .expect("a valid request");
        let code = match sender.send_request(request).await {
            Ok(response) => match response.into_body().collect().await {
                Ok(collected) => {
                    let grpc_ok = collected
                        .trailers()
                        .and_then(|t| t.get("grpc-status"))
                        .is_some_and(|s| s == "0");
                    let bytes = collected.to_bytes();
                    match (grpc_ok, bytes.get(5..).map(RateLimitResponse::decode)) {
                        (true, Some(Ok(response))) => Some(response.overall_code),
                        _ => None,
                    }
                }
                Err(_) => None,
            },
            Err(_) => None,
        };
        if sent < measure_from {
            continue;
        }
        match code {
            Some(1) => tally.ok += 1,
            Some(2) => tally.over_limit += 1,
            _ => tally.failed += 1,
        }
        let micros = clock.now().saturating_since(sent).as_micros();
        tally
            .latencies
            .push(u32::try_from(micros).unwrap_or(u32::MAX));
    }
}

async fn run(settings: Settings) -> Result<(), Box<dyn Error>> {
    let authority = settings
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let clock = SystemClock::new();
    let start = clock.now();
    let mut tasks = Vec::new();
    for c in 0..settings.connections {
        let tcp = tokio::net::TcpStream::connect(&authority).await?;
        tcp.set_nodelay(true)?;
        let (sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp)).await?;
        tokio::spawn(connection);
        for s in 0..settings.streams {
            let seed = 0x9e37_79b9_7f4a_7c15_u64
                .wrapping_mul(u64::from(c) * u64::from(settings.streams) + u64::from(s) + 1);
            tasks.push(tokio::spawn(stream(
                sender.clone(),
                settings.clone(),
                seed,
                clock,
                start,
            )));
        }
    }
    let mut all = Tally::default();
    for task in tasks {
        let t = task.await?;
        all.ok += t.ok;
        all.over_limit += t.over_limit;
        all.failed += t.failed;
        all.latencies.extend(t.latencies);
    }
    all.latencies.sort_unstable();
    let q = |p: f64| {
        let i =
            ((all.latencies.len() as f64 * p) as usize).min(all.latencies.len().saturating_sub(1));
        all.latencies.get(i).copied().unwrap_or(0)
    };
    let calls = all.ok + all.over_limit + all.failed;
    println!(
        "{:.0} calls/s ({} OK, {} OVER_LIMIT, {} failed), p50 {} us, p99 {} us, p99.9 {} us",
        calls as f64 / settings.duration.as_secs_f64(),
        all.ok,
        all.over_limit,
        all.failed,
        q(0.5),
        q(0.99),
        q(0.999)
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let settings = <Settings as clap::Parser>::parse();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run(settings))
}
