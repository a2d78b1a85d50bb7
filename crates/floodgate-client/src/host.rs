//! Everything the layer knows about one host (and partition): its pacers, its `Retry-After`,
//! the adaptive rate and throttle, the retry budget, the concurrency limit and the counters.
//!
//! [`Host`] is plain data behind the layer's per-host lock: every method is a transition at
//! an instant the caller passes, so its behaviour is tested without any clock or network.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use floodgate::Nanos;
use rand::rngs::SmallRng;
use tokio::sync::Notify;

use crate::adaptive::concurrency::AimdLimit;
use crate::adaptive::cubic::CubicRate;
use crate::adaptive::throttle::AdaptiveThrottle;
use crate::budget::RetryBudget;
use crate::pace::Pacer;
use crate::settings::Settings;
use crate::signal::{Dialect, Signal};
use crate::snapshot::{Counters, HostSnapshot, PolicySnapshot};

/// The most pacers kept per host: a server inventing a new partition key per response cannot
/// grow the client's memory (the least recently heard pacer is dropped).
pub const MAX_PACERS: usize = 32;

/// How long after the last limit field a host is still paced by fields rather than by the
/// adaptive rate.
pub const FIELDS_MEMORY: Duration = Duration::from_secs(300);

/// How a response (or its absence) turned out, for the counters and the adaptive parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// An answer the server did not refuse (any status but 429 and 503).
    Answered,
    /// 429 or 503 (or gRPC `RESOURCE_EXHAUSTED` / `UNAVAILABLE`).
    Refused,
    /// The connection could not be made: the request never reached the server.
    ConnectFailed,
    /// The attempt timed out.
    TimedOut,
    /// Any other error of the inner service.
    Failed,
}

/// What admission decided.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Admission {
    /// Send now; the request is number `seq` on this host.
    Go {
        /// The request's sequence number.
        seq: u64,
    },
    /// Nothing may be sent before this instant.
    WaitUntil(Nanos),
    /// The concurrency limit is reached: wait for a request to finish.
    Full,
    /// Adaptive throttling refused the request locally (with this probability).
    Throttled(f64),
}

/// One host's state.
#[derive(Debug)]
pub struct Host {
    name: String,
    pacers: Vec<Pacer>,
    blocked_until: Nanos,
    dialect: Option<Dialect>,
    fields_at: Option<Nanos>,
    seq: u64,
    /// Requests sent and not answered yet.
    in_flight: u64,
    cubic: CubicRate,
    throttle: AdaptiveThrottle,
    budget: RetryBudget,
    concurrency: Option<AimdLimit>,
    counters: Counters,
    rng: SmallRng,
    last_used: Nanos,
    /// The requests waiting for admission, by ticket (arrival order), each with the
    /// notification that tells it its turn has come: only the first may be admitted, so that
    /// waiters go in the order they came (see [`Host::is_first`]).
    waiting: BTreeMap<u64, Arc<Notify>>,
    next_ticket: u64,
}

impl Host {
    /// A host nothing is known about yet.
    pub fn new(name: String, settings: &Settings, rng: SmallRng, now: Nanos) -> Host {
        Host {
            name,
            pacers: Vec::new(),
            blocked_until: Nanos::ZERO,
            dialect: None,
            fields_at: None,
            seq: 0,
            in_flight: 0,
            cubic: CubicRate::new(settings.beta, settings.cubic_c),
            throttle: AdaptiveThrottle::new(settings.throttle_k, settings.throttle_window),
            budget: RetryBudget::new(
                settings.budget_capacity,
                settings.retry_cost,
                settings.timeout_cost,
                settings.success_refund,
            ),
            concurrency: settings
                .concurrency
                .map(|c| AimdLimit::new(c.initial, c.min, c.max, c.backoff)),
            counters: Counters::default(),
            rng,
            last_used: now,
            waiting: BTreeMap::new(),
            next_ticket: 0,
        }
    }

    /// Joins the queue of waiting requests; returns the ticket to ask with and the
    /// notification the request is woken by when it becomes first.
    pub fn queue_up(&mut self) -> (u64, Arc<Notify>) {
        self.next_ticket += 1;
        let turn = Arc::new(Notify::new());
        self.waiting.insert(self.next_ticket, turn.clone());
        (self.next_ticket, turn)
    }

    /// Whether a request holding `ticket` (`None`: one that has not waited) may ask for
    /// admission now: it is first in the queue, or the queue is empty. A newcomer never
    /// overtakes a request that is already waiting.
    pub fn is_first(&self, ticket: Option<u64>) -> bool {
        match ticket {
            None => self.waiting.is_empty(),
            Some(t) => self
                .waiting
                .first_key_value()
                .is_some_and(|(&first, _)| first == t),
        }
    }

    /// Leaves the queue (admitted, refused, or gone). When the ticket was first, returns the
    /// notification of the request that is first now, to be told its turn has come.
    pub fn leave_queue(&mut self, ticket: u64) -> Option<Arc<Notify>> {
        let was_first = self.is_first(Some(ticket));
        self.waiting.remove(&ticket);
        if was_first {
            self.waiting.first_key_value().map(|(_, turn)| turn.clone())
        } else {
            None
        }
    }

    /// Requests waiting for admission now.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// When the host was last asked for admission or heard from.
    pub fn last_used(&self) -> Nanos {
        self.last_used
    }

    /// True while the host is paced by limit fields it sent recently, not adaptively.
    fn paced_by_fields(&self, now: Nanos) -> bool {
        self.fields_at
            .is_some_and(|at| now.saturating_since(at) < FIELDS_MEMORY)
    }

    /// The first instant the pacers, `Retry-After` and the adaptive rate let a request go
    /// (the concurrency limit and throttling aside); `now` or earlier if they let one go now.
    pub fn earliest(&mut self, now: Nanos, settings: &Settings) -> Nanos {
        self.last_used = self.last_used.max(now);
        let mut earliest = self.blocked_until;
        self.pacers.retain(|p| !p.is_stale(now));
        for pacer in &mut self.pacers {
            earliest = earliest.max(pacer.earliest(now, settings.headroom, self.in_flight));
        }
        if settings.adaptive_rate && !self.paced_by_fields(now) {
            earliest = earliest.max(self.cubic.earliest(now));
        }
        earliest
    }

    /// Decides whether a request may be sent now. On [`Admission::Go`] the request is counted
    /// as sent (and holds a concurrency slot until [`Host::answered`]).
    pub fn admit(&mut self, now: Nanos, settings: &Settings) -> Admission {
        let earliest = self.earliest(now, settings);
        if earliest > now {
            return Admission::WaitUntil(earliest);
        }
        if self
            .concurrency
            .as_ref()
            .is_some_and(|c| c.in_flight() >= c.limit())
        {
            return Admission::Full;
        }
        if settings.adaptive_throttle {
            let p = self.throttle.probability(now);
            if self.throttle.refuse(now, &mut self.rng) {
                self.counters.refused_locally += 1;
                return Admission::Throttled(p);
            }
        }
        if let Some(c) = &mut self.concurrency {
            c.try_acquire();
        }
        for pacer in &mut self.pacers {
            pacer.sent();
        }
        self.cubic.sent(now);
        self.seq += 1;
        self.in_flight += 1;
        self.counters.sent += 1;
        Admission::Go { seq: self.seq }
    }

    /// Learns from the answer (or failure) of request `seq` at `now`.
    pub fn answered(
        &mut self,
        seq: u64,
        outcome: Outcome,
        signal: &Signal,
        now: Nanos,
        headroom: f64,
    ) {
        self.last_used = self.last_used.max(now);
        self.in_flight = self.in_flight.saturating_sub(1);
        match outcome {
            Outcome::Answered => {
                self.counters.succeeded += 1;
                self.budget.succeeded();
            }
            Outcome::Refused => self.counters.throttled += 1,
            Outcome::ConnectFailed | Outcome::TimedOut | Outcome::Failed => {
                self.counters.errors += 1
            }
        }
        self.throttle.finished(now, outcome == Outcome::Answered);
        if let Some(c) = &mut self.concurrency {
            c.release(outcome != Outcome::Answered);
        }
        if let Some(dialect) = signal.dialect {
            self.dialect = Some(dialect);
            self.fields_at = Some(now);
        }
        if let Some(wait) = signal.retry_after {
            self.blocked_until = self.blocked_until.max(now.saturating_add(wait));
        }
        for quota in &signal.quotas {
            let at = match self.pacers.iter().position(|p| p.is_for(quota)) {
                Some(i) => i,
                None => {
                    if self.pacers.len() >= MAX_PACERS {
                        // Drop the pacer heard from least recently (stale ones go first).
                        self.pacers.retain(|p| !p.is_stale(now));
                        if self.pacers.len() >= MAX_PACERS {
                            self.pacers.remove(0);
                        }
                    }
                    self.pacers.push(Pacer::new(quota, now));
                    self.pacers.len() - 1
                }
            };
            self.pacers[at].heard(quota, self.in_flight, now, headroom);
        }
        match outcome {
            Outcome::Refused | Outcome::Answered => {
                self.cubic
                    .answered(now, seq, outcome == Outcome::Refused, self.seq)
            }
            _ => {}
        }
    }

    /// Takes the cost of one retry from the budget (`after_timeout` picks the timeout cost);
    /// false when the budget cannot pay for it.
    pub fn withdraw_retry(&mut self, after_timeout: bool) -> bool {
        if self.budget.withdraw(after_timeout) {
            self.counters.retries += 1;
            true
        } else {
            self.counters.budget_exhausted += 1;
            false
        }
    }

    /// Counts a request that waited before it was sent.
    pub fn waited(&mut self) {
        self.counters.local_waits += 1;
    }

    /// Counts a request refused locally because it would have waited longer than allowed.
    pub fn gave_up(&mut self) {
        self.counters.refused_locally += 1;
    }

    /// A random number generator for this host's jitter.
    pub fn rng(&mut self) -> &mut SmallRng {
        &mut self.rng
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// What the host's state looks like at `now`.
    pub fn snapshot(&mut self, now: Nanos, headroom: f64) -> HostSnapshot {
        let in_secs = |at: Nanos| (at > now).then(|| at.saturating_since(now).as_secs_f64());
        let policies = self
            .pacers
            .iter_mut()
            .map(|p| {
                p.earliest(now, headroom, self.in_flight);
                PolicySnapshot {
                    policy: p.policy().to_string(),
                    partition: p.partition().map(hex_prefix),
                    limit: p.limit(),
                    window_seconds: p.window().map(|w| w.as_secs_f64()),
                    left: p.tokens(),
                    exhausted_for_seconds: p.exhausted_until().and_then(in_secs),
                }
            })
            .collect();
        let adaptive = !self.paced_by_fields(now);
        HostSnapshot {
            host: self.name.clone(),
            dialect: self.dialect.map(Dialect::as_str),
            policies,
            blocked_for_seconds: in_secs(self.blocked_until),
            adaptive,
            send_rate: (adaptive && self.cubic.enabled()).then(|| self.cubic.rate()),
            measured_rate: self.cubic.measured(),
            reject_probability: self.throttle.probability(now),
            budget_left: self.budget.left(),
            concurrency_limit: self.concurrency.as_ref().map(AimdLimit::limit),
            in_flight: self.concurrency.as_ref().map(AimdLimit::in_flight),
            counters: self.counters.clone(),
        }
    }

    /// Gives back the concurrency slot of a request that never got an answer (dropped).
    pub fn abandoned(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if let Some(c) = &mut self.concurrency {
            c.release(false);
        }
    }
}

/// At most the first 8 bytes of a partition key, in hex: enough to tell partitions apart in a
/// snapshot without echoing what may be a credential.
fn hex_prefix(bytes: &[u8]) -> String {
    let mut s: String = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
    if bytes.len() > 8 {
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PoliteLayer;
    use crate::signal::Quota;
    use rand::SeedableRng;

    fn settings() -> Settings {
        PoliteLayer::builder().build().unwrap().settings().clone()
    }

    fn host() -> Host {
        Host::new(
            "h".into(),
            &settings(),
            SmallRng::seed_from_u64(1),
            Nanos::ZERO,
        )
    }

    fn ietf(q: u64, w: u64, r: u64, t: u64) -> Signal {
        Signal {
            dialect: Some(Dialect::Ietf),
            quotas: vec![Quota {
                limit: Some(q),
                window: Some(Duration::from_secs(w)),
                remaining: Some(r),
                reset: Some(Duration::from_secs(t)),
                ..Quota::new("default", None)
            }],
            retry_after: None,
        }
    }

    #[test]
    fn retry_after_blocks_the_whole_host() {
        let s = settings();
        let mut h = host();
        let Admission::Go { seq } = h.admit(Nanos::ZERO, &s) else {
            panic!()
        };
        let signal = Signal {
            retry_after: Some(Duration::from_secs(3)),
            ..Signal::default()
        };
        h.answered(seq, Outcome::Refused, &signal, Nanos::from_millis(10), 1.0);
        assert_eq!(
            h.admit(Nanos::from_millis(20), &s),
            Admission::WaitUntil(Nanos::from_millis(3010))
        );
        assert!(matches!(
            h.admit(Nanos::from_millis(3010), &s),
            Admission::Go { .. }
        ));
    }

    #[test]
    fn fields_switch_the_adaptive_rate_off() {
        // Without the throttle, which the refusals below would turn on too.
        let s = PoliteLayer::builder()
            .adaptive_throttle(false, 2.0, Duration::from_secs(120))
            .build()
            .unwrap()
            .settings()
            .clone();
        let mut h = host();
        // Refusals without fields turn CUBIC on...
        for i in 0..50u64 {
            let now = Nanos::from_millis(i);
            if let Admission::Go { seq } = h.admit(now, &s) {
                h.answered(seq, Outcome::Refused, &Signal::default(), now, 1.0);
            }
        }
        assert!(h.snapshot(Nanos::from_millis(50), 1.0).send_rate.is_some());
        // ...and fields turn it off: the pacer alone decides.
        let now = Nanos::from_secs(10);
        let Admission::Go { seq } = h.admit(now, &s) else {
            panic!()
        };
        h.answered(seq, Outcome::Answered, &ietf(100, 1, 99, 1), now, 1.0);
        let snap = h.snapshot(now, 1.0);
        assert!(!snap.adaptive);
        assert_eq!(snap.send_rate, None);
        assert_eq!(snap.policies[0].limit, Some(100));
        for _ in 0..90 {
            assert!(matches!(h.admit(now, &s), Admission::Go { .. }));
        }
    }

    #[test]
    fn pacers_are_bounded_against_partition_floods() {
        let s = settings();
        let mut h = host();
        for i in 0..1000u64 {
            let mut signal = ietf(10, 1, 5, 1);
            signal.quotas[0].partition = Some(i.to_be_bytes().to_vec());
            h.answered(i, Outcome::Answered, &signal, Nanos::from_millis(i), 1.0);
        }
        assert_eq!(h.pacers.len(), MAX_PACERS);
        assert!(matches!(
            h.admit(Nanos::from_secs(1), &s),
            Admission::Go { .. }
        ));
    }

    #[test]
    fn partitions_are_shown_as_a_short_hex_prefix() {
        assert_eq!(hex_prefix(b"ab"), "6162");
        assert_eq!(hex_prefix(b"sk_live_0123456789"), "736b5f6c6976655f…");
    }
}
