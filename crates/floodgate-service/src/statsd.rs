//! Pushing statistics to statsd under envoyproxy/ratelimit's names (`stats.statsd`; upstream's
//! `USE_STATSD`), so that dashboards and alerts built on upstream's series keep working.
//!
//! # What is pushed
//!
//! Every `flush_interval`, each counter's change since the last push, as a statsd counter
//! (`name:delta|c`); a counter that did not change is not sent (as upstream's statsd client).
//!
//! | name | counts |
//! |---|---|
//! | `ratelimit.service.rate_limit.<key>.<stat>` | the per-descriptor statistics ([`crate::descriptors::stats`]) |
//! | `ratelimit.service.rate_limit.<domain>.domain_not_found` | descriptors of a domain no rule names |
//! | `ratelimit.service.config_load_success` | configurations loaded (the first one included) |
//! | `ratelimit.service.config_load_error` | configurations refused |
//! | `ratelimit.service.global_shadow_mode` | answers turned `OK` by `rls.shadow_mode` |
//! | `ratelimit.service.call.should_rate_limit.redis_error` | Envoy calls whose store failed |
//! | `ratelimit.service.call.should_rate_limit.service_error` | Envoy calls refused as invalid |
//! | `ratelimit_server.ShouldRateLimit.total_requests` | gRPC `ShouldRateLimit` calls (not `/json`'s, as upstream) |
//! | `ratelimit_server.ShouldRateLimit.response_time` | a timer: each gRPC call's time, in whole milliseconds (as upstream) |
//!
//! `<key>` and `<domain>` are written as upstream writes them: `:` and `|` become `_`, and
//! so do the dots inside anything shaped like an IPv4 address. `extra_tags` are appended to
//! every name, the `ratelimit_server.` ones included (upstream's server statistics are
//! scoped with them too), as `.__key=value`, sorted by key, with `.`, `:` and `|` in values
//! written `_`; a tag with an empty key or value is left out, as upstream's statsd library
//! leaves it out.
//!
//! The response-time timer keeps a uniform sample of at most [`TIMER_SAMPLES`] calls per
//! interval and sends it with statsd's sample rate (`|@0.25` when one call in four was kept),
//! so a busy service sends a bounded number of lines while statsd still counts every call.
//!
//! # Delivery
//!
//! Lines are made and sent by cadence, a statsd client: over TCP (upstream's default) through
//! a sink of ours that keeps one connection, writes each flush at once and connects again at
//! the next flush when it broke; over UDP through cadence's buffered sink, in datagrams of at
//! most [`DATAGRAM_BYTES`]. The sockets' blocking calls run on tokio's blocking pool. A push
//! that fails is dropped (its changes are not sent again), logged at most once until a push
//! succeeds, and counted in `floodgate_statsd_pushes_total{result="failed"}`; the next push
//! resolves the address and connects anew.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::{StatsdConfig, StatsdProtocol};
use crate::descriptors::stats::{DescriptorStats, STATS};
use crate::metrics::RlsTotals;
use crate::prometheus::{Exposition, Kind};

/// The most response times kept per flush interval.
pub const TIMER_SAMPLES: usize = 512;

/// The largest UDP datagram sent, in bytes: a line longer than this goes alone.
pub const DATAGRAM_BYTES: usize = 1432;

/// How long connecting and writing may take before a push is given up.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// The response-time timer's name.
const RESPONSE_TIME: &str = "ratelimit_server.ShouldRateLimit.response_time";

/// A uniform sample of the calls' response times in one flush interval (reservoir sampling).
#[derive(Debug, Default)]
pub struct ResponseTimes(Mutex<Reservoir>);

#[derive(Debug, Default)]
struct Reservoir {
    seen: u64,
    millis: Vec<u64>,
}

impl ResponseTimes {
    /// Records one call's time, in whole milliseconds (as upstream's timer).
    pub fn record(&self, d: Duration) {
        let millis = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let mut r = self.0.lock().unwrap_or_else(|e| e.into_inner());
        r.seen += 1;
        if r.millis.len() < TIMER_SAMPLES {
            r.millis.push(millis);
        } else {
            // Keeps each of the `seen` calls with the same chance, TIMER_SAMPLES / seen.
            let slot = rand::random_range(0..r.seen);
            if let Some(kept) = usize::try_from(slot).ok().and_then(|i| r.millis.get_mut(i)) {
                *kept = millis;
            }
        }
    }

    /// The calls seen and the sample kept since the last take; starts a new interval.
    fn take(&self) -> (u64, Vec<u64>) {
        let mut r = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let seen = std::mem::take(&mut r.seen);
        (seen, std::mem::take(&mut r.millis))
    }
}

/// Every counter's total now, by its statsd name without tags.
pub type Totals = BTreeMap<String, u64>;

/// Upstream's form of a name part: `:` and `|` as `_`, and the dots of anything shaped like an
/// IPv4 address (four runs of one to three digits joined by dots) as `_`.
pub fn sanitize(name: &str) -> String {
    let mut out: Vec<u8> = name
        .bytes()
        .map(|b| if b == b':' || b == b'|' { b'_' } else { b })
        .collect();
    let mut i = 0;
    while i < out.len() {
        match ipv4_at(&out[i..]) {
            Some(len) => {
                for b in &mut out[i..i + len] {
                    if *b == b'.' {
                        *b = b'_';
                    }
                }
                i += len;
            }
            None => i += 1,
        }
    }
    // Only ASCII bytes were replaced by ASCII bytes: the text is still UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// The length of an IPv4-shaped run at the start of `s`, as a leftmost regular-expression
/// match of `\d{1,3}(\.\d{1,3}){3}` finds it (greedy: up to three digits per part).
fn ipv4_at(s: &[u8]) -> Option<usize> {
    let mut at = 0;
    for part in 0..4 {
        if part > 0 {
            if s.get(at) != Some(&b'.') {
                return None;
            }
            at += 1;
        }
        let digits = s[at.min(s.len())..]
            .iter()
            .take(3)
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits == 0 {
            return None;
        }
        at += digits;
    }
    Some(at)
}

/// The suffix `extra_tags` add to every name: `.__key=value` for each, sorted by key, the
/// value's `.`, `:` and `|` written `_`; a tag whose key or value is empty is left out.
pub fn tag_suffix(tags: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    for (key, value) in tags {
        if key.is_empty() || value.is_empty() {
            continue;
        }
        let value: String = value
            .chars()
            .map(|c| if matches!(c, '.' | ':' | '|') { '_' } else { c })
            .collect();
        let _ = write!(out, ".__{key}={value}");
    }
    out
}

/// What the pushes read from the service: its counters, its response times, and where the
/// pushes themselves are counted. The service implements it.
pub trait Source: Send + Sync + 'static {
    /// Every counter under its upstream name ([`totals`]).
    fn totals(&self) -> Totals;
    /// The response times to send, when they are kept (`USE_STATSD` with upstream's timers).
    fn response_times(&self) -> Option<&ResponseTimes>;
    /// Where pushes are counted for `/metrics`.
    fn pushes(&self) -> &PushCounts;
}

/// Every counter under its upstream name (see the [module documentation](self)): the Envoy
/// rules' `stats`, the service's `service` totals, and whether the configuration loaded at
/// start (`loaded_at_start`: a start without one counts as a failed load).
pub fn totals(stats: &DescriptorStats, service: RlsTotals, loaded_at_start: bool) -> Totals {
    let mut totals = Totals::new();
    for (key, counts) in stats.snapshot() {
        let key = sanitize(&key);
        for (stat, n) in STATS.iter().zip(counts) {
            if !crate::descriptors::stats::shown(stat, n) {
                continue;
            }
            totals.insert(format!("ratelimit.service.rate_limit.{key}.{stat}"), n);
        }
    }
    for (domain, n) in stats.domains_not_found_snapshot() {
        totals.insert(
            format!(
                "ratelimit.service.rate_limit.{}.domain_not_found",
                sanitize(&domain)
            ),
            n,
        );
    }
    let first = u64::from(loaded_at_start);
    for (name, n) in [
        (
            "ratelimit.service.config_load_success",
            service.reloads_ok + first,
        ),
        (
            "ratelimit.service.config_load_error",
            service.reloads_failed + (1 - first),
        ),
        (
            "ratelimit.service.global_shadow_mode",
            service.global_shadow_mode,
        ),
        (
            "ratelimit.service.call.should_rate_limit.redis_error",
            service.store_errors,
        ),
        (
            "ratelimit.service.call.should_rate_limit.service_error",
            service.invalid,
        ),
        (
            "ratelimit_server.ShouldRateLimit.total_requests",
            service.calls,
        ),
    ] {
        totals.insert(name.to_string(), n);
    }
    totals
}

/// The counters that changed from `before` to `now` (a counter absent from `before` changed
/// from 0), by their statsd names, `tags` appended.
pub fn changes(before: &Totals, now: &Totals, tags: &str) -> Vec<(String, u64)> {
    now.iter()
        .filter_map(|(name, &n)| {
            let delta = n.saturating_sub(before.get(name).copied().unwrap_or(0));
            (delta > 0).then(|| (format!("{name}{tags}"), delta))
        })
        .collect()
}

/// The statsd pushes' own counts, on `/metrics`.
#[derive(Debug, Default)]
pub struct PushCounts {
    ok: AtomicU64,
    failed: AtomicU64,
}

impl PushCounts {
    /// Appends `floodgate_statsd_pushes_total` to a Prometheus text page.
    pub fn render(&self, out: &mut String) {
        Exposition::on(out)
            .family(
                "floodgate_statsd_pushes_total",
                Kind::Counter,
                "Pushes of statistics to statsd, by result.",
            )
            .sample(&[("result", "ok")], self.ok.load(Ordering::Relaxed))
            .sample(&[("result", "failed")], self.failed.load(Ordering::Relaxed));
    }
}

/// A cadence sink over one TCP connection, made at the first push and again after one broke:
/// lines are buffered and written at each flush, in one write.
struct TcpSink {
    address: String,
    state: Mutex<(Option<TcpStream>, String)>,
}

impl TcpSink {
    fn new(address: &str) -> TcpSink {
        TcpSink {
            address: address.to_string(),
            state: Mutex::new((None, String::new())),
        }
    }

    fn connect(&self) -> std::io::Result<TcpStream> {
        let mut last = None;
        for addr in self.address.to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, SEND_TIMEOUT) {
                Ok(stream) => {
                    stream.set_write_timeout(Some(SEND_TIMEOUT))?;
                    return Ok(stream);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the address resolves to nothing",
            )
        }))
    }
}

impl cadence::MetricSink for TcpSink {
    fn emit(&self, metric: &str) -> std::io::Result<usize> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.1.push_str(metric);
        state.1.push('\n');
        Ok(0) // buffered until the flush
    }

    fn flush(&self) -> std::io::Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (stream, buffer) = &mut *state;
        let lines = std::mem::take(buffer);
        if lines.is_empty() {
            return Ok(());
        }
        if stream.is_none() {
            *stream = Some(self.connect()?);
        }
        let written = match stream {
            Some(s) => s.write_all(lines.as_bytes()),
            None => Ok(()),
        };
        if written.is_err() {
            *stream = None; // made again at the next push
        }
        written
    }
}

/// A UDP socket to send to `address` (`host:port`, resolved now: its first address) from a
/// port the OS chooses, and that address.
pub fn udp_socket(address: &str) -> std::io::Result<(std::net::UdpSocket, std::net::SocketAddr)> {
    let target = address.to_socket_addrs()?.next().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the address resolves to nothing",
        )
    })?;
    let local = if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    Ok((std::net::UdpSocket::bind(local)?, target))
}

/// The statsd client of `config`: cadence over a buffered UDP socket (datagrams of at most
/// [`DATAGRAM_BYTES`]), or over [`TcpSink`].
fn client(config: &StatsdConfig) -> std::io::Result<cadence::StatsdClient> {
    Ok(match config.protocol {
        StatsdProtocol::Tcp => cadence::StatsdClient::from_sink("", TcpSink::new(&config.address)),
        StatsdProtocol::Udp => {
            let (socket, target) = udp_socket(&config.address)?;
            let sink = cadence::BufferedUdpMetricSink::builder()
                .with_capacity(DATAGRAM_BYTES)
                .build(target, socket)
                .map_err(std::io::Error::other)?;
            cadence::StatsdClient::from_sink("", sink)
        }
    })
}

/// One flush interval's statistics, named as statsd names them (`extra_tags` appended).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flush {
    /// The counters that changed, each with its change.
    pub counters: Vec<(String, u64)>,
    /// The response-time timer's name.
    pub timer: String,
    /// How many calls were timed in the interval.
    pub seen: u64,
    /// The sample of their times kept, in whole milliseconds.
    pub millis: Vec<u64>,
}

impl Flush {
    /// The timer's sample rate, `millis.len() / seen`, when not every call was kept.
    pub fn rate(&self) -> Option<f64> {
        let kept = self.millis.len() as u64;
        (self.seen > kept).then(|| kept as f64 / self.seen as f64)
    }
}

/// Where pushes send each interval's statistics: statsd's lines (this module) or DogStatsD's
/// ([`crate::dogstatsd`]). Called on tokio's blocking pool, one push at a time; a sink that
/// fails drops what it holds, so that the next push resolves and connects anew.
pub trait Sink: Send + 'static {
    /// Sends `flush`; an error says why it was not all sent (it is not sent again).
    fn send(&mut self, flush: &Flush) -> Result<(), String>;
}

/// statsd through cadence (see the [module documentation](self)).
struct Cadence {
    config: StatsdConfig,
    client: Option<cadence::StatsdClient>,
}

impl Sink for Cadence {
    fn send(&mut self, flush: &Flush) -> Result<(), String> {
        if self.client.is_none() {
            self.client = Some(client(&self.config).map_err(|e| e.to_string())?);
        }
        let Some(client) = self.client.as_ref() else {
            return Ok(());
        };
        let result = emit(client, flush);
        if result.is_err() {
            self.client = None;
        }
        result
    }
}

/// Sends `flush`'s counters as statsd counters and each of its times as the response-time
/// timer (with its sample rate when not every call was kept) through `client`, then flushes
/// it.
fn emit(client: &cadence::StatsdClient, flush: &Flush) -> Result<(), String> {
    use cadence::prelude::*;
    let rate = flush.rate();
    let mut result: Result<(), String> = Ok(());
    for (name, n) in &flush.counters {
        let count = i64::try_from(*n).unwrap_or(i64::MAX);
        if let Err(e) = client.count_with_tags(name, count).try_send() {
            result = Err(e.to_string());
        }
    }
    for &ms in &flush.millis {
        let mut timer = client.time_with_tags(&flush.timer, ms);
        if let Some(rate) = rate {
            timer = timer.with_sampling_rate(rate);
        }
        if let Err(e) = timer.try_send() {
            result = Err(e.to_string());
        }
    }
    if let Err(e) = client.flush() {
        result = Err(e.to_string());
    }
    result
}

/// Pushes `source`'s statistics to statsd as `config` says, for ever (the task is dropped at
/// shut-down).
pub async fn push(source: Arc<impl Source>, config: StatsdConfig) {
    let pushes = Pushes {
        what: "statsd",
        address: config.address.clone(),
        interval: config.flush_interval(),
        tags: tag_suffix(&config.extra_tags),
    };
    let sink = Cadence {
        config,
        client: None,
    };
    pushes.run(source, sink).await;
}

/// How statistics are pushed: where (for logs), how often, with which tags.
#[derive(Debug)]
pub struct Pushes {
    /// What is pushed, for logs (`statsd`, `DogStatsD`).
    pub what: &'static str,
    /// Where, for logs.
    pub address: String,
    /// The flush interval.
    pub interval: Duration,
    /// The tag suffix appended to every name ([`tag_suffix`]).
    pub tags: String,
}

impl Pushes {
    /// Every `interval`, sends the counters that changed and the response times kept through
    /// `sink`, for ever (the task is dropped at shut-down). The sink's blocking calls run on
    /// tokio's blocking pool, off the runtime's threads. A push that fails is dropped, logged
    /// once until one succeeds, and counted in [`PushCounts`].
    pub async fn run(self, source: Arc<impl Source>, sink: impl Sink) {
        let sink = Arc::new(Mutex::new(sink));
        let timer = format!("{RESPONSE_TIME}{}", self.tags);
        let mut before = Totals::new();
        let mut failing = false;
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await; // the first tick is now: the first push is one interval in
        loop {
            ticks.tick().await;
            let now = source.totals();
            let counters = changes(&before, &now, &self.tags);
            before = now;
            let (seen, millis) = source
                .response_times()
                .map(ResponseTimes::take)
                .unwrap_or_default();
            if counters.is_empty() && millis.is_empty() {
                continue;
            }
            let flush = Flush {
                counters,
                timer: timer.clone(),
                seen,
                millis,
            };
            let sink = sink.clone();
            let sent = tokio::task::spawn_blocking(move || {
                sink.lock().unwrap_or_else(|e| e.into_inner()).send(&flush)
            })
            .await;
            let result = sent.unwrap_or_else(|e| Err(e.to_string()));
            failing = self.count(source.pushes(), result, failing);
        }
    }

    /// Counts a push's `result` and logs a change from working to `failing` or back; whether
    /// pushes fail now.
    fn count(&self, counts: &PushCounts, result: Result<(), String>, failing: bool) -> bool {
        let address = &self.address;
        match result {
            Ok(()) => {
                counts.ok.fetch_add(1, Ordering::Relaxed);
                if failing {
                    tracing::info!(%address, "{} pushes work again", self.what);
                }
                false
            }
            Err(error) => {
                counts.failed.fetch_add(1, Ordering::Relaxed);
                if !failing {
                    tracing::warn!(%address, %error, "{} push failed; its changes are dropped", self.what);
                }
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn parse_counters(text: &str) -> HashMap<String, u64> {
        text.lines()
            .filter_map(|l| l.strip_suffix("|c"))
            .filter_map(|l| l.rsplit_once(':'))
            .map(|(name, n)| (name.to_string(), n.parse().unwrap_or(0)))
            .collect()
    }

    #[test]
    fn names_are_sanitized_as_upstream_sanitizes_them() {
        assert_eq!(
            sanitize("edge.remote_address_10.0.0.1"),
            "edge.remote_address_10_0_0_1"
        );
        assert_eq!(sanitize("d.k_a:b|c"), "d.k_a_b_c");
        // Not four parts: the dots stay.
        assert_eq!(sanitize("d.v_1.2.3"), "d.v_1.2.3");
        // Greedy parts, as the regular expression: 1234.5.6.7 holds 234.5.6.7.
        assert_eq!(sanitize("x1234.5.6.7"), "x1234_5_6_7");
        assert_eq!(sanitize("ünï.1.2.3.4"), "ünï.1_2_3_4");
    }

    #[test]
    fn tags_are_sorted_and_their_values_sanitized() {
        let tags = BTreeMap::from([
            ("zone".to_string(), "us.east:1".to_string()),
            ("app".to_string(), "edge|rl".to_string()),
        ]);
        assert_eq!(tag_suffix(&tags), ".__app=edge_rl.__zone=us_east_1");
        // As gostats: a tag with an empty key or value is left out.
        let empty = BTreeMap::from([
            (String::new(), "v".to_string()),
            ("k".to_string(), String::new()),
            ("team".to_string(), "edge".to_string()),
        ]);
        assert_eq!(tag_suffix(&empty), ".__team=edge");
        assert_eq!(tag_suffix(&BTreeMap::new()), "");
    }

    #[test]
    fn only_changes_are_sent_and_every_name_carries_the_tags() {
        let before = Totals::from([
            ("ratelimit.service.a.total_hits".to_string(), 5),
            ("ratelimit.service.a.over_limit".to_string(), 2),
        ]);
        let now = Totals::from([
            ("ratelimit.service.a.total_hits".to_string(), 9),
            ("ratelimit.service.a.over_limit".to_string(), 2),
            (
                "ratelimit_server.ShouldRateLimit.total_requests".to_string(),
                3,
            ),
        ]);
        assert_eq!(
            changes(&before, &now, ".__t=1"),
            [
                ("ratelimit.service.a.total_hits.__t=1".to_string(), 4),
                (
                    "ratelimit_server.ShouldRateLimit.total_requests.__t=1".to_string(),
                    3
                ),
            ]
        );
    }

    /// What `emit` sends through a sink that keeps every line.
    fn emitted(counters: &[(String, u64)], seen: u64, millis: &[u64]) -> Vec<String> {
        let (lines, sink) = cadence::SpyMetricSink::new();
        let client = cadence::StatsdClient::from_sink("", sink);
        let flush = Flush {
            counters: counters.to_vec(),
            timer: RESPONSE_TIME.to_string(),
            seen,
            millis: millis.to_vec(),
        };
        emit(&client, &flush).unwrap();
        lines
            .try_iter()
            .map(|l| String::from_utf8(l).unwrap())
            .collect()
    }

    #[test]
    fn counters_and_the_timer_go_out_as_statsd_lines() {
        let counters = [("ratelimit.service.a.total_hits".to_string(), 4)];
        assert_eq!(
            emitted(&counters, 2, &[1, 0]),
            [
                "ratelimit.service.a.total_hits:4|c",
                "ratelimit_server.ShouldRateLimit.response_time:1|ms",
                "ratelimit_server.ShouldRateLimit.response_time:0|ms",
            ]
        );
        // One call in four kept: the rate says so.
        let lines = emitted(&[], 8, &[2, 4]);
        assert!(lines.iter().all(|l| l.ends_with("|ms|@0.25")), "{lines:?}");
        let parsed = parse_counters(&emitted(&counters, 0, &[]).join("\n"));
        assert_eq!(parsed["ratelimit.service.a.total_hits"], 4);
    }

    #[test]
    fn the_reservoir_keeps_a_bounded_sample_and_counts_every_call() {
        let times = ResponseTimes::default();
        for i in 0..(TIMER_SAMPLES as u64 * 3) {
            times.record(Duration::from_millis(i));
        }
        let (seen, millis) = times.take();
        assert_eq!(seen, TIMER_SAMPLES as u64 * 3);
        assert_eq!(millis.len(), TIMER_SAMPLES);
        // Later calls replaced some of the first ones.
        assert!(millis.iter().any(|&ms| ms >= TIMER_SAMPLES as u64));
        assert_eq!(times.take(), (0, Vec::new()));
    }
}
