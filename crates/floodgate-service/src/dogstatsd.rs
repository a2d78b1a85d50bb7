//! DogStatsD (`stats.dogstatsd`; upstream's `USE_DOG_STATSD`): the statistics [`crate::statsd`]
//! pushes, sent to a DogStatsD agent over UDP with tags, named and written as upstream's
//! sink (datadog-go under gostats) names and writes them.
//!
//! # Names and tags
//!
//! Each statistic starts from its statsd name with `extra_tags` serialized into it
//! (`name.__key=value…`, [`crate::statsd::tag_suffix`]: sorted, values with `.`, `:` and `|`
//! written `_`). Then, as upstream:
//!
//! 1. the name is cut at its first `.__`; what follows, split at each `.__`, is tags, each
//!    `key=value` becoming `key:value` (a part without `=` is dropped) ([`split_tags`]);
//! 2. the first mogrifier whose pattern is found in the name that is left renames it and
//!    adds its tags ([`mogrifier`]);
//! 3. a line's tags are the client's own (`dd.internal.entity_id`, `env`, `service`,
//!    `version`, from `DD_*`), then those cut from the name, then the mogrifier's, joined
//!    with `,`, each without the newlines it may hold.
//!
//! # Lines
//!
//! As datadog-go writes them ([`line()`]):
//!
//! | statistic | line |
//! |---|---|
//! | counter | `name:7\|c\|#tags`: its change since the last push, an integer |
//! | gauge | `name:2.5\|g\|#tags`: the shortest decimal that reads back as the value |
//! | timer | `name:3.000000\|ms\|#tags`: upstream keeps each call's time in whole milliseconds (truncated), and datadog-go writes it with six decimals |
//!
//! A sample rate below 1 comes before the tags as `|@0.25`; without tags there is no `|#`.
//! Floodgate keeps no gauge among upstream's statistics (upstream's gauges are Go's runtime's
//! and its Redis pool's), so no `|g` line is sent today.
//!
//! # Delivery
//!
//! Every flush interval (the shared loop, [`crate::statsd::Pushes`]): the counters that
//! changed, then the response times kept. Lines end with `\n` and are packed, in order, in
//! datagrams of at most [`PAYLOAD_BYTES`] (datadog-go's UDP payload); a line longer than that
//! on its own is dropped, as datadog-go drops it. The address is resolved at the first push
//! and again after a push failed. A push that fails is not sent again, is logged once until
//! one succeeds, and counts in `floodgate_statsd_pushes_total{result="failed"}`.
//!
//! # What upstream's client sends that this does not
//!
//! datadog-go's telemetry about itself (`datadog.dogstatsd.client.*`, every 10 s) and its
//! container field (`|c:…`, read from cgroups) are not sent; nor are Go's runtime gauges,
//! as with statsd. The response time goes at each flush, a uniform sample of at most
//! [`crate::statsd::TIMER_SAMPLES`] calls with its rate, where upstream sends each call as
//! it ends.

pub mod mogrifier;

use std::net::UdpSocket;
use std::sync::Arc;

use self::mogrifier::Mogrifiers;
use crate::config::DogStatsdConfig;
use crate::statsd::{Flush, Pushes, Sink, Source};

/// The most bytes sent in one datagram (datadog-go's payload for UDP).
pub const PAYLOAD_BYTES: usize = 1432;

/// A line's value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// A counter's change.
    Count(u64),
    /// A gauge's value.
    Gauge(f64),
    /// A timer's value, in whole milliseconds.
    Timing(u64),
}

/// The DogStatsD line for `value` under `name` with `tags`, sampled at `rate` (`None`: every
/// one), as datadog-go writes it (see the [module documentation](self)).
pub fn line(name: &str, value: Value, rate: Option<f64>, tags: &[String]) -> String {
    let (text, kind) = match value {
        Value::Count(n) => (n.min(i64::MAX as u64).to_string(), "c"),
        Value::Gauge(x) => (x.to_string(), "g"),
        Value::Timing(ms) => (format!("{:.6}", timing_millis(ms)), "ms"),
    };
    let mut out = format!("{name}:{text}|{kind}");
    if let Some(rate) = rate.filter(|r| *r < 1.0) {
        out.push_str("|@");
        out.push_str(&rate.to_string());
    }
    for (i, tag) in tags.iter().enumerate() {
        out.push_str(if i == 0 { "|#" } else { "," });
        out.extend(tag.chars().filter(|c| *c != '\n'));
    }
    out
}

/// The milliseconds datadog-go writes for a timer of `ms` whole milliseconds: upstream's
/// sink makes a duration of them, and the client takes its seconds times 1000, whole
/// seconds and nanoseconds added as floating point (so not always exactly `ms`).
fn timing_millis(ms: u64) -> f64 {
    let nanos = i128::from(ms) * 1_000_000;
    let (seconds, rest) = (nanos / 1_000_000_000, nanos % 1_000_000_000);
    (seconds as f64 + rest as f64 / 1e9) * 1000.0
}

/// A statsd name with its tags serialized in (`name.__k=v.__k2=v2`): the name, and the tags
/// as `k:v` in order (a part without `=` dropped).
pub fn split_tags(serialized: &str) -> (&str, Vec<String>) {
    let Some((name, tags)) = serialized.split_once(".__") else {
        return (serialized, Vec::new());
    };
    let tags = tags
        .split(".__")
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| format!("{key}:{value}"))
        .collect();
    (name, tags)
}

/// How each statistic is named and tagged (see the [module documentation](self)).
#[derive(Debug)]
pub struct Namer {
    mogrifiers: Mogrifiers,
    client_tags: Vec<String>,
}

impl Namer {
    /// The naming `config` asks for; an error is a mogrifier's pattern that does not compile
    /// (checked when the configuration was read).
    pub fn new(config: &DogStatsdConfig) -> Result<Namer, regex::Error> {
        Ok(Namer {
            mogrifiers: Mogrifiers::new(&config.mogrifiers)?,
            client_tags: config.datadog_tags.clone(),
        })
    }

    /// The name and tags the statistic `serialized` (a statsd name with its tags in it) is
    /// sent under.
    pub fn name(&self, serialized: &str) -> (String, Vec<String>) {
        let (name, from_name) = split_tags(serialized);
        let (name, added) = self
            .mogrifiers
            .apply(name)
            .unwrap_or_else(|| (name.to_string(), Vec::new()));
        let tags = self
            .client_tags
            .iter()
            .cloned()
            .chain(from_name)
            .chain(added)
            .collect();
        (name, tags)
    }

    /// The lines of one flush: its counters, then its response times.
    pub fn lines(&self, flush: &Flush) -> Vec<String> {
        let mut lines: Vec<String> = flush
            .counters
            .iter()
            .map(|(serialized, n)| {
                let (name, tags) = self.name(serialized);
                line(&name, Value::Count(*n), None, &tags)
            })
            .collect();
        if !flush.millis.is_empty() {
            let (name, tags) = self.name(&flush.timer);
            let rate = flush.rate();
            lines.extend(
                flush
                    .millis
                    .iter()
                    .map(|ms| line(&name, Value::Timing(*ms), rate, &tags)),
            );
        }
        lines
    }
}

/// `lines` packed in order into datagrams of at most [`PAYLOAD_BYTES`], each line ending with
/// `\n`; a line too long for a datagram of its own is left out.
pub fn datagrams(lines: &[String]) -> Vec<String> {
    let mut datagrams: Vec<String> = Vec::new();
    let mut current = String::new();
    for line in lines {
        let needed = line.len() + 1;
        if needed > PAYLOAD_BYTES {
            continue;
        }
        if current.len() + needed > PAYLOAD_BYTES {
            datagrams.push(std::mem::take(&mut current));
        }
        current.push_str(line);
        current.push('\n');
    }
    if !current.is_empty() {
        datagrams.push(current);
    }
    datagrams
}

/// The DogStatsD sink: one UDP socket, connected to the agent's address.
struct Udp {
    address: String,
    namer: Namer,
    socket: Option<UdpSocket>,
}

impl Udp {
    fn connect(&self) -> std::io::Result<UdpSocket> {
        let (socket, target) = crate::statsd::udp_socket(&self.address)?;
        socket.connect(target)?;
        Ok(socket)
    }
}

impl Sink for Udp {
    fn send(&mut self, flush: &Flush) -> Result<(), String> {
        if self.socket.is_none() {
            self.socket = Some(self.connect().map_err(|e| e.to_string())?);
        }
        let Some(socket) = &self.socket else {
            return Ok(());
        };
        let lines = self.namer.lines(flush);
        let mut result = Ok(());
        for datagram in datagrams(&lines) {
            if let Err(e) = socket.send(datagram.as_bytes()) {
                result = Err(e.to_string());
            }
        }
        if result.is_err() {
            self.socket = None; // resolved and connected anew at the next push
        }
        result
    }
}

/// Pushes `source`'s statistics to the DogStatsD agent `config` names, for ever (the task is
/// dropped at shut-down).
pub async fn push(source: Arc<impl Source>, config: DogStatsdConfig) {
    let namer = match Namer::new(&config) {
        Ok(namer) => namer,
        Err(error) => {
            // Not reached: the patterns were compiled when the configuration was read.
            tracing::error!(%error, "DogStatsD not started: a mogrifier's pattern");
            return;
        }
    };
    let pushes = Pushes {
        what: "DogStatsD",
        address: config.address.clone(),
        interval: config.flush_interval(),
        tags: crate::statsd::tag_suffix(&config.extra_tags),
    };
    let sink = Udp {
        address: config.address,
        namer,
        socket: None,
    };
    pushes.run(source, sink).await;
}

#[cfg(test)]
mod tests;
