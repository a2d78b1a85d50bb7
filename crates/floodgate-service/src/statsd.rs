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
//! | `ratelimit_server.ShouldRateLimit.total_requests` | Envoy calls (gRPC and `/json`) |
//! | `ratelimit_server.ShouldRateLimit.response_time` | a timer: each call's time, in milliseconds |
//!
//! `<key>` and `<domain>` are written as upstream writes them: `:` and `|` become `_`, and
//! so do the dots inside anything shaped like an IPv4 address. `extra_tags` are appended to
//! the `ratelimit.` names (not the `ratelimit_server.` ones, as upstream) as
//! `.__key=value`, sorted by key, with `.`, `:` and `|` in values written `_`.
//!
//! The response-time timer keeps a uniform sample of at most [`TIMER_SAMPLES`] calls per
//! interval and sends it with statsd's sample rate (`|@0.25` when one call in four was kept),
//! so a busy service sends a bounded number of lines while statsd still counts every call.
//!
//! # Delivery
//!
//! Over TCP (upstream's default) one connection is kept and made again, at the next flush,
//! when it breaks; over UDP each flush goes out in datagrams of at most
//! [`DATAGRAM_BYTES`]. The address is resolved on each connection. A push that fails is
//! dropped (its changes are not sent again), logged at most once until a push succeeds, and
//! counted in `floodgate_statsd_pushes_total{result="failed"}`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpStream, UdpSocket};

use crate::config::{StatsdConfig, StatsdProtocol};
use crate::descriptors::stats::STATS;
use crate::service::Server;

/// The most response times kept per flush interval.
pub const TIMER_SAMPLES: usize = 512;

/// The largest UDP datagram sent, in bytes: a line longer than this goes alone.
pub const DATAGRAM_BYTES: usize = 1432;

/// How long connecting and writing may take before a push is given up.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);

/// A uniform sample of the calls' response times in one flush interval (reservoir sampling).
#[derive(Debug, Default)]
pub struct ResponseTimes(Mutex<Reservoir>);

#[derive(Debug, Default)]
struct Reservoir {
    seen: u64,
    millis: Vec<f64>,
}

impl ResponseTimes {
    /// Records one call's time.
    pub fn record(&self, d: Duration) {
        let millis = d.as_secs_f64() * 1000.0;
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
    fn take(&self) -> (u64, Vec<f64>) {
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

/// The suffix `extra_tags` add to the `ratelimit.` names: `.__key=value` for each, sorted by
/// key, the value's `.`, `:` and `|` written `_`.
pub fn tag_suffix(tags: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    for (key, value) in tags {
        let value: String = value
            .chars()
            .map(|c| if matches!(c, '.' | ':' | '|') { '_' } else { c })
            .collect();
        let _ = write!(out, ".__{key}={value}");
    }
    out
}

/// Every counter of `server` under its upstream name (see the [module documentation](self)).
pub fn totals(server: &Server) -> Totals {
    let mut totals = Totals::new();
    let stats = server.descriptor_stats();
    for (key, counts) in stats.snapshot() {
        let key = sanitize(&key);
        for (stat, n) in STATS.iter().zip(counts) {
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
    let service = server.metrics().rls_totals();
    let first = u64::from(!server.started_without_config());
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

/// Appends one statsd line per counter that changed from `before` to `now` (a counter absent
/// from `before` changed from 0), the `ratelimit.` names with `tags` appended.
pub fn counter_lines(before: &Totals, now: &Totals, tags: &str, out: &mut String) {
    for (name, &n) in now {
        let delta = n.saturating_sub(before.get(name).copied().unwrap_or(0));
        if delta > 0 {
            out.push_str(name);
            if name.starts_with("ratelimit.") {
                out.push_str(tags);
            }
            let _ = writeln!(out, ":{delta}|c");
        }
    }
}

/// Appends the response-time timer's lines: each kept sample in milliseconds, with the sample
/// rate `kept / seen` when not every call was kept.
pub fn timer_lines(seen: u64, millis: &[f64], out: &mut String) {
    let rate = if seen > millis.len() as u64 {
        Some(millis.len() as f64 / seen as f64)
    } else {
        None
    };
    for ms in millis {
        let _ = write!(
            out,
            "ratelimit_server.ShouldRateLimit.response_time:{ms:.3}|ms"
        );
        if let Some(rate) = rate {
            let _ = write!(out, "|@{rate:.6}");
        }
        out.push('\n');
    }
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
        let _ = write!(
            out,
            "# HELP floodgate_statsd_pushes_total Pushes of statistics to statsd, by result.\n\
             # TYPE floodgate_statsd_pushes_total counter\n\
             floodgate_statsd_pushes_total{{result=\"ok\"}} {}\n\
             floodgate_statsd_pushes_total{{result=\"failed\"}} {}\n",
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed)
        );
    }
}

/// Where the lines go: one TCP connection, kept; or a UDP socket.
enum Sink {
    Tcp(Option<TcpStream>),
    Udp(Option<UdpSocket>),
}

impl Sink {
    async fn send(&mut self, address: &str, text: &str) -> std::io::Result<()> {
        match self {
            Sink::Tcp(stream) => {
                if stream.is_none() {
                    *stream = Some(TcpStream::connect(address).await?);
                }
                let result = match stream {
                    Some(s) => s.write_all(text.as_bytes()).await,
                    None => Ok(()),
                };
                if result.is_err() {
                    *stream = None; // made again at the next push
                }
                result
            }
            Sink::Udp(socket) => {
                if socket.is_none() {
                    let target =
                        tokio::net::lookup_host(address)
                            .await?
                            .next()
                            .ok_or_else(|| {
                                std::io::Error::new(std::io::ErrorKind::NotFound, "no address")
                            })?;
                    let local = if target.is_ipv4() {
                        "0.0.0.0:0"
                    } else {
                        "[::]:0"
                    };
                    let s = UdpSocket::bind(local).await?;
                    s.connect(target).await?;
                    *socket = Some(s);
                }
                if let Some(s) = socket {
                    for datagram in datagrams(text) {
                        s.send(datagram.as_bytes()).await?;
                    }
                }
                Ok(())
            }
        }
    }
}

/// `text`'s lines packed into datagrams of at most [`DATAGRAM_BYTES`] (a longer line alone).
fn datagrams(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut end = 0;
    for line in text.split_inclusive('\n') {
        if end > start && end + line.len() - start > DATAGRAM_BYTES {
            out.push(&text[start..end]);
            start = end;
        }
        end += line.len();
    }
    if end > start {
        out.push(&text[start..end]);
    }
    out
}

/// Pushes `server`'s statistics to statsd as `config` says, for ever (the task is dropped at
/// shut-down).
pub async fn push(server: Arc<Server>, config: StatsdConfig) {
    let tags = tag_suffix(&config.extra_tags);
    let mut sink = match config.protocol {
        StatsdProtocol::Tcp => Sink::Tcp(None),
        StatsdProtocol::Udp => Sink::Udp(None),
    };
    let mut before = Totals::new();
    let mut failing = false;
    let mut ticks = tokio::time::interval(config.flush_interval());
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await; // the first tick is now: the first push is one interval in
    loop {
        ticks.tick().await;
        let now = totals(&server);
        let mut text = String::new();
        counter_lines(&before, &now, &tags, &mut text);
        if let Some(times) = server.response_times() {
            let (seen, millis) = times.take();
            timer_lines(seen, &millis, &mut text);
        }
        before = now;
        if text.is_empty() {
            continue;
        }
        let sent = tokio::time::timeout(SEND_TIMEOUT, sink.send(&config.address, &text)).await;
        let counts = server.statsd_pushes();
        match sent {
            Ok(Ok(())) => {
                counts.ok.fetch_add(1, Ordering::Relaxed);
                if failing {
                    tracing::info!(address = %config.address, "statsd pushes work again");
                    failing = false;
                }
            }
            failed => {
                counts.failed.fetch_add(1, Ordering::Relaxed);
                if let Sink::Tcp(stream) = &mut sink {
                    *stream = None;
                }
                if !failing {
                    let error = match failed {
                        Ok(Err(e)) => e.to_string(),
                        _ => format!("no answer within {SEND_TIMEOUT:?}"),
                    };
                    tracing::warn!(address = %config.address, %error, "statsd push failed; its changes are dropped");
                    failing = true;
                }
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
        assert_eq!(tag_suffix(&BTreeMap::new()), "");
    }

    #[test]
    fn only_changes_are_sent_and_tags_only_on_ratelimit_names() {
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
        let mut out = String::new();
        counter_lines(&before, &now, ".__t=1", &mut out);
        assert_eq!(
            out,
            "ratelimit.service.a.total_hits.__t=1:4|c\n\
             ratelimit_server.ShouldRateLimit.total_requests:3|c\n"
        );
        let parsed = parse_counters(&out);
        assert_eq!(parsed["ratelimit.service.a.total_hits.__t=1"], 4);
    }

    #[test]
    fn the_timer_says_its_sample_rate_when_it_sampled() {
        let mut out = String::new();
        timer_lines(2, &[1.5, 0.25], &mut out);
        assert_eq!(
            out,
            "ratelimit_server.ShouldRateLimit.response_time:1.500|ms\n\
             ratelimit_server.ShouldRateLimit.response_time:0.250|ms\n"
        );
        out.clear();
        timer_lines(8, &[2.0, 4.0], &mut out);
        assert!(out.lines().all(|l| l.ends_with("|ms|@0.250000")), "{out}");
    }

    #[test]
    fn the_reservoir_keeps_a_bounded_sample_and_counts_every_call() {
        let times = ResponseTimes::default();
        for i in 0..(TIMER_SAMPLES as u64 * 3) {
            times.record(Duration::from_micros(i));
        }
        let (seen, millis) = times.take();
        assert_eq!(seen, TIMER_SAMPLES as u64 * 3);
        assert_eq!(millis.len(), TIMER_SAMPLES);
        // Later calls replaced some of the first ones.
        assert!(millis.iter().any(|&ms| ms >= TIMER_SAMPLES as f64 / 1000.0));
        assert_eq!(times.take(), (0, Vec::new()));
    }

    #[test]
    fn datagrams_split_at_lines_and_stay_under_the_size() {
        let line = format!("{}:1|c\n", "n".repeat(100));
        let text = line.repeat(40);
        let parts = datagrams(&text);
        assert!(parts.len() > 1);
        assert!(parts
            .iter()
            .all(|p| p.len() <= DATAGRAM_BYTES && p.ends_with('\n')));
        assert_eq!(parts.concat(), text);
        let long = format!("{}:1|c\n", "n".repeat(2000));
        assert_eq!(datagrams(&long), vec![long.as_str()]);
        assert!(datagrams("").is_empty());
    }
}
