//! Offers `--rate` requests per second to `--url` for `--duration` (`30s`, `1m30s`, or plain seconds), at most
//! `--concurrency` at a time, through the polite layer (or, with `--naive`, straight through
//! hyper's client), and prints, last, one JSON line:
//!
//! ```text
//! {"sent": …, "succeeded": …, "throttled": …, "errors": …, "goodput_per_second": …,
//!  "local_waits": …, "offered": …, "refused_locally": …, "sent_after_warmup": …,
//!  "throttled_after_warmup": …}
//! ```
//!
//! - `sent`: requests that reached the wire (retries included);
//! - `succeeded`: requests whose final answer was not a refusal, within the duration (requests
//!   still waiting or in flight when it ends are dropped);
//! - `throttled`: 429 and 503 answers received (retried ones included);
//! - `errors`: requests that ended in a transport error;
//! - `goodput_per_second`: `succeeded` / duration;
//! - `local_waits`: requests the layer held back before sending them;
//! - `offered`: requests the generator tried to start (a request is not started while
//!   `--concurrency` are in flight);
//! - `refused_locally`: requests the layer did not send (they would have waited longer than
//!   `--max-wait`, or adaptive throttling refused them);
//! - `*_after_warmup`: the same wire counts from `--warmup` seconds on (default 5).
//!
//! ```text
//! cargo run --release --example limited_server -- --port 8080 --rate 50 &
//! cargo run --release --example polite_client -- --url http://127.0.0.1:8080/ietf/ \
//!     --rate 400 --duration 30s --concurrency 64
//! cargo run --release --example polite_client -- --url http://127.0.0.1:8080/ietf/ \
//!     --rate 400 --duration 30s --concurrency 64 --naive
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use floodgate::{Clock, SystemClock};
use floodgate_client::{is_refusal, PoliteLayer};
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::json;
use tokio::sync::Semaphore;
use tower::{Layer, Service, ServiceExt};

/// Command-line arguments.
#[derive(Parser)]
struct Args {
    /// The URL to send requests to.
    #[arg(long)]
    url: String,
    /// Requests offered per second.
    #[arg(long)]
    rate: f64,
    /// How long to offer them for: `30s`, `1m30s`, `500ms`, or plain seconds (`30`), as every
    /// floodgate command reads durations.
    #[arg(long, value_parser = duration)]
    duration: Duration,
    /// The most requests in flight (or waiting in the layer) at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// The method: GET (default), or POST etc. (not retried after refusals unless idempotent).
    #[arg(long, default_value = "GET")]
    method: String,
    /// Send without the layer, for comparison.
    #[arg(long)]
    naive: bool,
    /// The layer's max wait (a duration, as `--duration`).
    #[arg(long, default_value = "5s", value_parser = duration)]
    max_wait: Duration,
    /// How long after the start the `*_after_warmup` counts start (a duration).
    #[arg(long, default_value = "5s", value_parser = duration)]
    warmup: Duration,
}

/// A duration as floodgate reads one everywhere.
fn duration(text: &str) -> Result<Duration, String> {
    floodgate::duration::parse_duration(text).map_err(|e| e.to_string())
}

#[derive(Default)]
struct Tally {
    offered: AtomicU64,
    sent: AtomicU64,
    succeeded: AtomicU64,
    throttled: AtomicU64,
    errors: AtomicU64,
    refused_locally: AtomicU64,
    sent_after_warmup: AtomicU64,
    throttled_after_warmup: AtomicU64,
}

fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args = Args::parse();
    if !(args.rate > 0.0 && !args.duration.is_zero() && args.concurrency > 0) {
        return Err("--rate, --duration and --concurrency must be positive".into());
    }
    let method: Method = args.method.to_uppercase().parse()?;
    let uri: http::Uri = args.url.parse()?;
    let hyper = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(args.concurrency)
        .build_http::<Full<Bytes>>();
    let layer = PoliteLayer::builder().max_wait(args.max_wait).build()?;
    let state = layer.state();
    let polite = layer.layer(hyper.clone());

    let clock = SystemClock::new();
    let start = clock.now();
    let tally = Arc::new(Tally::default());
    let slots = Arc::new(Semaphore::new(args.concurrency));
    let interval = Duration::from_secs_f64(1.0 / args.rate);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let total = (args.rate * args.duration.as_secs_f64()).round() as u64;
    let mut warmup_totals = None;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..total {
        while tasks.try_join_next().is_some() {}
        ticker.tick().await;
        let warm = clock.now().saturating_since(start) >= args.warmup;
        if warm && warmup_totals.is_none() {
            warmup_totals = Some(state.totals());
        }
        count(&tally.offered);
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let request = Request::builder()
            .method(method.clone())
            .uri(uri.clone())
            .body(Full::new(Bytes::new()))?;
        let tally = tally.clone();
        if args.naive {
            let mut client = hyper.clone();
            tasks.spawn(async move {
                let result = client.ready().await.map_err(Error::from);
                let result = match result {
                    Ok(c) => c.call(request).await.map_err(Error::from),
                    Err(e) => Err(e),
                };
                count(&tally.sent);
                if warm {
                    count(&tally.sent_after_warmup);
                }
                match result {
                    Ok(response) => {
                        if is_refusal(&response) {
                            count(&tally.throttled);
                            if warm {
                                count(&tally.throttled_after_warmup);
                            }
                        } else {
                            count(&tally.succeeded);
                        }
                        let _ = response.into_body().collect().await;
                    }
                    Err(_) => count(&tally.errors),
                }
                drop(slot);
            });
        } else {
            let mut client = polite.clone();
            tasks.spawn(async move {
                let result = match client.ready().await {
                    Ok(c) => c.call(request).await,
                    Err(e) => Err(e),
                };
                match result {
                    Ok(response) => {
                        if !is_refusal(&response) {
                            count(&tally.succeeded);
                        }
                        let _ = response.into_body().collect().await;
                    }
                    Err(e) if e.refusal().is_some() => count(&tally.refused_locally),
                    Err(_) => count(&tally.errors),
                }
                drop(slot);
            });
        }
    }
    // The run ends now: requests still waiting or in flight are not counted as answered.
    let end = start.saturating_add(args.duration);
    let left = end.saturating_since(clock.now());
    tokio::time::sleep(left).await;
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    let elapsed = clock.now().saturating_since(start).as_secs_f64();

    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let (sent, throttled, local_waits, sent_after, throttled_after) = if args.naive {
        (
            load(&tally.sent),
            load(&tally.throttled),
            0,
            load(&tally.sent_after_warmup),
            load(&tally.throttled_after_warmup),
        )
    } else {
        let totals = state.totals();
        // A run shorter than the warm-up has nothing after it.
        let warm = warmup_totals.unwrap_or_else(|| totals.clone());
        (
            totals.sent,
            totals.throttled,
            totals.local_waits,
            totals.sent - warm.sent,
            totals.throttled - warm.throttled,
        )
    };
    let succeeded = load(&tally.succeeded);
    if !args.naive {
        for host in state.snapshot() {
            eprintln!("{host:?}");
        }
    }
    eprintln!("ran {elapsed:.2} s");
    println!(
        "{}",
        json!({
            "sent": sent,
            "succeeded": succeeded,
            "throttled": throttled,
            "errors": load(&tally.errors),
            "goodput_per_second": succeeded as f64 / args.duration.as_secs_f64(),
            "local_waits": local_waits,
            "offered": load(&tally.offered),
            "refused_locally": load(&tally.refused_locally),
            "sent_after_warmup": sent_after,
            "throttled_after_warmup": throttled_after,
        })
    );
    Ok(())
}
