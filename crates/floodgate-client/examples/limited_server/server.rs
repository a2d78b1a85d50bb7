//! A small HTTP server on loopback that allows `rate` requests per second per path family and
//! announces its limit in one dialect per family, for the polite client's tests and
//! benchmarks:
//!
//! | path prefix | limit | fields |
//! |---|---|---|
//! | `/ietf/…` | token bucket, `rate`/s, burst `rate` | `RateLimit-Policy`, `RateLimit` (Floodgate's own formatting), `Retry-After` on 429 |
//! | `/x/…` | fixed window of `rate` per epoch second | `X-RateLimit-Limit/-Remaining/-Reset` (epoch seconds) |
//! | `/retry-after/…` | token bucket, `rate`/s, burst `rate` | `Retry-After` (whole seconds, rounded up) on 429 only |
//! | `/none/…` | token bucket, `rate`/s, burst `rate` | nothing: a bare 429 |
//! | `/hostile/<kind>` | refuses everything | hostile fields: `huge`, `negative`, `far-date`, `garbage`, `forever` |
//!
//! Time comes from the clock it is given, so tests can share a manual clock with the client.

#![allow(dead_code)] // each user of this module needs a different part of it

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use floodgate::algorithm::fixed_window::FixedWindowState;
use floodgate::algorithm::token_bucket::TokenBucketState;
use floodgate::algorithm::Algorithm;
use floodgate::limiter::{whole_seconds_up, RateLimitHeaders};
use floodgate::{Clock, Decision, FixedWindow, Op, TokenBucket};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// Answers per path family.
#[derive(Debug, Default)]
pub struct Counts {
    /// Requests answered 200.
    pub allowed: AtomicU64,
    /// Requests answered 429.
    pub refused: AtomicU64,
}

/// The limits of one server.
struct Limits {
    clock: Arc<dyn Clock>,
    bucket: TokenBucket,
    window: FixedWindow,
    buckets: Mutex<HashMap<&'static str, TokenBucketState>>,
    windows: Mutex<FixedWindowState>,
    counts: HashMap<&'static str, Counts>,
}

/// A running server; it stops when dropped.
pub struct LimitedServer {
    /// Where it listens.
    pub addr: SocketAddr,
    limits: Arc<Limits>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LimitedServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

const FAMILIES: [&str; 5] = ["ietf", "x", "retry-after", "none", "hostile"];

impl LimitedServer {
    /// Starts a server allowing `rate` requests per second per family on `addr` (port 0 for
    /// any free port).
    pub async fn start(
        addr: SocketAddr,
        rate: u64,
        clock: Arc<dyn Clock>,
    ) -> std::io::Result<LimitedServer> {
        let now = clock.now();
        let bucket = TokenBucket::new(rate as f64, rate).expect("a positive rate");
        let window = FixedWindow::new(rate, Duration::from_secs(1)).expect("a positive rate");
        let limits = Arc::new(Limits {
            buckets: Mutex::new(
                ["ietf", "retry-after", "none"]
                    .into_iter()
                    .map(|f| (f, bucket.fresh(now)))
                    .collect(),
            ),
            windows: Mutex::new(window.fresh(now)),
            bucket,
            window,
            counts: FAMILIES.iter().map(|f| (*f, Counts::default())).collect(),
            clock,
        });
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let serving = limits.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let limits = serving.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let limits = limits.clone();
                        async move { Ok::<_, Infallible>(limits.answer(&req)) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(LimitedServer { addr, limits, task })
    }

    /// The base URL of a family: `http://addr/family`.
    pub fn url(&self, family: &str) -> String {
        format!("http://{}/{family}", self.addr)
    }

    /// The answers of a family so far: (allowed, refused).
    pub fn counts(&self, family: &str) -> (u64, u64) {
        let c = &self.limits.counts[family];
        (
            c.allowed.load(Ordering::Relaxed),
            c.refused.load(Ordering::Relaxed),
        )
    }
}

type Answer = Response<Full<Bytes>>;

impl Limits {
    fn answer(&self, req: &Request<Incoming>) -> Answer {
        let path = req.uri().path().trim_start_matches('/');
        let (family, rest) = path.split_once('/').unwrap_or((path, ""));
        let Some(counts) = self.counts.get(family) else {
            return plain(
                StatusCode::NOT_FOUND,
                "families: ietf, x, retry-after, none, hostile",
            );
        };
        let now = self.clock.now();
        let response = match family {
            "x" => {
                let d = self.window.apply(
                    &mut self.windows.lock().unwrap(),
                    now,
                    Op::Check { cost: 1 },
                );
                let reset_epoch = (now.0 / 1_000_000_000) + 1; // windows are epoch seconds
                let mut r = verdict(&d);
                let h = r.headers_mut();
                h.insert("x-ratelimit-limit", d.limit.into());
                h.insert("x-ratelimit-remaining", d.remaining.into());
                h.insert("x-ratelimit-reset", reset_epoch.into());
                r
            }
            "hostile" => hostile(rest),
            _ => {
                let d = self.bucket.apply(
                    self.buckets
                        .lock()
                        .unwrap()
                        .get_mut(family)
                        .expect("a bucket per family"),
                    now,
                    Op::Check { cost: 1 },
                );
                let mut r = verdict(&d);
                if family != "none" {
                    if let Some(retry) = d.retry_after {
                        r.headers_mut()
                            .insert("retry-after", whole_seconds_up(retry).max(1).into());
                    }
                }
                if family == "ietf" {
                    let quota = Some((self.bucket.rate(), Duration::from_secs(1)));
                    if let Some(fields) = RateLimitHeaders::for_decision(quota, &d) {
                        let h = r.headers_mut();
                        h.insert("ratelimit-policy", fields.policy.parse().unwrap());
                        h.insert("ratelimit", fields.remaining.parse().unwrap());
                    }
                }
                r
            }
        };
        // The server's own time (hyper would stamp the OS time), so that a client on the same
        // manual clock reads epoch resets against it.
        let date = std::time::UNIX_EPOCH + Duration::from_nanos(now.0);
        let mut response = response;
        if let Ok(v) = httpdate::fmt_http_date(date).parse() {
            response.headers_mut().entry("date").or_insert(v);
        }
        let counter = if response.status() == StatusCode::OK {
            &counts.allowed
        } else {
            &counts.refused
        };
        counter.fetch_add(1, Ordering::Relaxed);
        response
    }
}

fn verdict(d: &Decision) -> Answer {
    if d.allowed {
        plain(StatusCode::OK, "ok")
    } else {
        plain(StatusCode::TOO_MANY_REQUESTS, "slow down")
    }
}

fn plain(status: StatusCode, body: &'static str) -> Answer {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r
}

/// A refusal with hostile fields of the given kind.
fn hostile(kind: &str) -> Answer {
    let mut r = plain(StatusCode::TOO_MANY_REQUESTS, "no");
    let fields: &[(&str, &str)] = match kind {
        "huge" => &[
            ("retry-after", "99999999999999999999"),
            (
                "ratelimit-policy",
                "\"p\";q=999999999999999;w=999999999999999",
            ),
            ("ratelimit", "\"p\";r=0;t=999999999999999"),
            ("x-ratelimit-reset", "99999999999999999999999"),
        ],
        "negative" => &[
            ("retry-after", "-5"),
            ("ratelimit", "\"p\";r=-1;t=-1"),
            ("x-ratelimit-remaining", "-1"),
            ("x-ratelimit-reset", "-100"),
        ],
        "far-date" => &[
            ("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT"),
            ("date", "Thu, 01 Jan 1970 00:00:00 GMT"),
        ],
        "garbage" => &[
            ("retry-after", "soon, maybe"),
            ("ratelimit-policy", "!!;q=;;w"),
            ("ratelimit", "(((((((("),
            ("x-ratelimit-limit", "lots"),
            ("x-ratelimit-remaining", "1e999"),
        ],
        // Valid fields that ask for the longest wait there is.
        _ => &[
            ("ratelimit-policy", "\"p\";q=1;w=86400"),
            ("ratelimit", "\"p\";r=0;t=86400"),
            ("retry-after", "86400"),
        ],
    };
    for (name, value) in fields {
        if let Ok(v) = http::HeaderValue::from_bytes(value.as_bytes()) {
            r.headers_mut().append(*name, v);
        }
    }
    r
}
