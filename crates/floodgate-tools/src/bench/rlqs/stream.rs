//! One stream of `floodgate bench --rlqs`, behaving as one Envoy's RLQS filter client does
//! for one domain: a bucket's first report at its first request (that request counted as
//! allowed, `time_elapsed` 0), one message per bucket; then, every interval from the stream's
//! start, one message reporting every subscribed bucket with the requests of the interval,
//! allowed or denied as the assignment held says, `time_elapsed` in whole seconds. Requests
//! arrive at the demand's rate, as a Poisson process or evenly ([`Arrivals`]); an abandoned
//! bucket is forgotten and subscribes again at its next request.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use floodgate::{Clock, Nanos, SystemClock};
use floodgate_service::proto::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use floodgate_service::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use floodgate_service::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use floodgate_service::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use floodgate_service::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use floodgate_service::proto::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::transport::Channel;

/// How a stream's requests arrive, per bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Arrivals {
    /// A Poisson process: exponential gaps, so an interval's count is Poisson-distributed.
    Poisson,
    /// Evenly: the demand's rate exactly, the first request one gap after the stream opens.
    Even,
}

/// The strategies an assignment carries, as counted.
pub const STRATEGIES: [&str; 4] = ["token_bucket", "deny_all", "allow_all", "abandon"];

/// What every stream of a run shares: its settings, its counters, its clock.
#[derive(Debug)]
pub struct Plan {
    /// The domain of every message.
    pub domain: String,
    /// Buckets per stream: `{name: bucket-0}` … `{name: bucket-(B-1)}`.
    pub buckets: usize,
    /// The reporting interval.
    pub interval: Duration,
    /// Requests per second per bucket, at each stream.
    pub demand: f64,
    /// How they arrive.
    pub arrivals: Arrivals,
    /// The run's seed; stream `i` draws from its own generator seeded from it and `i`.
    pub seed: u64,
    /// The counters every stream adds to.
    pub tally: Tally,
    /// The measuring clock.
    pub clock: SystemClock,
}

/// The run's counters, shared by its streams (read at the start and end of the measured
/// window).
#[derive(Debug, Default)]
pub struct Tally {
    /// Streams whose call was answered.
    pub opened: AtomicU64,
    /// Streams whose connection or call failed.
    pub failed: AtomicU64,
    /// Buckets reported (a message reporting 10 buckets counts 10).
    pub usages: AtomicU64,
    /// Messages sent.
    pub messages: AtomicU64,
    /// Messages not sent because the stream's send buffer was full (the server not reading).
    pub dropped: AtomicU64,
    /// Actions received, by [`STRATEGIES`].
    pub actions: [AtomicU64; 4],
}

/// What one stream ends with.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Whether its call was answered.
    pub opened: bool,
    /// Why it failed to open or ended early: a gRPC status's code (`Unavailable`), `connect`
    /// or `closed` (ended by the server without a status), and its message.
    pub error: Option<(String, String)>,
    /// Nanoseconds from each bucket's first report to its first assignment (buckets never
    /// assigned left out).
    pub first_assignment_ns: Vec<u64>,
    /// Buckets holding `DENY_ALL` at the end.
    pub holding_deny_all: u64,
}

/// What a stream enforces for a bucket: the last assignment it was sent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Held {
    /// Nothing yet (Envoy's default: allow), or `ALLOW_ALL`.
    Allow,
    /// `DENY_ALL`.
    Deny,
    /// A token bucket: its fill rate, tokens per second.
    Tokens(f64),
}

impl Held {
    /// Of `requests` over `seconds`, how many it lets through.
    pub fn allowed(self, requests: u64, seconds: f64) -> u64 {
        match self {
            Held::Allow => requests,
            Held::Deny => 0,
            Held::Tokens(rate) => requests.min((rate * seconds).round() as u64),
        }
    }
}

/// One bucket at one stream.
#[derive(Clone, Debug)]
struct Bucket {
    /// When its next first report is due (`None` once subscribed).
    subscribes_at: Option<Nanos>,
    /// When its first report was sent, until its first assignment.
    first_sent: Option<Nanos>,
    held: Held,
}

/// `{name: bucket-K}`.
pub fn bucket_id(k: usize) -> BucketId {
    BucketId {
        bucket: [("name".to_string(), format!("bucket-{k}"))].into(),
    }
}

/// The K of an action's `{name: bucket-K}`.
fn bucket_index(id: Option<&BucketId>) -> Option<usize> {
    id?.bucket
        .get("name")?
        .strip_prefix("bucket-")?
        .parse()
        .ok()
}

/// One message of `domain` reporting `usages`: `(bucket, allowed, denied, seconds)`.
pub fn report(domain: &str, usages: &[(usize, u64, u64, u64)]) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: domain.to_string(),
        bucket_quota_usages: usages
            .iter()
            .map(|&(k, allowed, denied, seconds)| BucketQuotaUsage {
                bucket_id: Some(bucket_id(k)),
                time_elapsed: Some(prost_types::Duration {
                    seconds: seconds as i64,
                    nanos: 0,
                }),
                num_requests_allowed: allowed,
                num_requests_denied: denied,
            })
            .collect(),
    }
}

/// The index in [`STRATEGIES`] of an action, and what a stream then holds (`None` for an
/// abandon, or an action with nothing Envoy applies).
pub fn classify(action: Option<&Action>) -> Option<(usize, Option<Held>)> {
    match action? {
        Action::AbandonAction(_) => Some((3, None)),
        Action::QuotaAssignmentAction(a) => {
            match a.rate_limit_strategy.as_ref()?.strategy.as_ref()? {
                Strategy::BlanketRule(r) if *r == BlanketRule::DenyAll as i32 => {
                    Some((1, Some(Held::Deny)))
                }
                Strategy::BlanketRule(_) => Some((2, Some(Held::Allow))),
                Strategy::TokenBucket(tb) => {
                    let fill = tb.fill_interval.as_ref().map_or(0, |d| d.seconds).max(1);
                    let rate = f64::from(tb.tokens_per_fill.unwrap_or(0)) / fill as f64;
                    Some((0, Some(Held::Tokens(rate))))
                }
                Strategy::RequestsPerTimeUnit(_) => None,
            }
        }
    }
}

/// A Poisson-distributed count of mean `mean`: Knuth's product of uniforms below 30, a
/// rounded normal approximation above (its error is far below a run's noise there).
pub fn poisson(rng: &mut StdRng, mean: f64) -> u64 {
    if mean <= 0.0 {
        return 0;
    }
    if mean < 30.0 {
        let floor = (-mean).exp();
        let (mut k, mut product) = (0, rng.random::<f64>());
        while product > floor {
            k += 1;
            product *= rng.random::<f64>();
        }
        return k;
    }
    let (u1, u2) = (1.0 - rng.random::<f64>(), rng.random::<f64>());
    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    (mean + mean.sqrt() * z).round().max(0.0) as u64
}

impl Plan {
    /// The gap before a bucket's next request: exponential, or exactly one over the demand;
    /// capped at an hour (a demand near 0).
    fn gap(&self, rng: &mut StdRng) -> Duration {
        let mean = 1.0 / self.demand.max(1e-9);
        let secs = match self.arrivals {
            Arrivals::Poisson => -(1.0 - rng.random::<f64>()).ln() * mean,
            Arrivals::Even => mean,
        };
        Duration::from_secs_f64(secs.min(3600.0))
    }

    /// Requests of one bucket in one interval.
    fn requests(&self, rng: &mut StdRng) -> u64 {
        let mean = self.demand * self.interval.as_secs_f64();
        match self.arrivals {
            Arrivals::Poisson => poisson(rng, mean),
            Arrivals::Even => mean.round() as u64,
        }
    }

    /// Stream `index` on `channel` until `stop` says so.
    pub async fn stream(
        self: Arc<Self>,
        index: u64,
        channel: Result<Channel, String>,
        stop: watch::Receiver<bool>,
    ) -> Outcome {
        let mut outcome = Outcome::default();
        let mut stop = stop;
        // A call the server never answers must not outlast the run.
        let opened = tokio::select! {
            opened = self.open(channel) => opened,
            _ = stop.changed() => Err(("unanswered".into(), "no answer to the call before the run ended".into())),
        };
        let (sender, answers) = match opened {
            Ok(open) => open,
            Err(error) => {
                self.tally.failed.fetch_add(1, Ordering::Relaxed);
                outcome.error = Some(error);
                return outcome;
            }
        };
        self.tally.opened.fetch_add(1, Ordering::Relaxed);
        outcome.opened = true;
        let seed = self.seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut live = Live::new(&self, sender, StdRng::seed_from_u64(seed));
        outcome.error = live.run(answers, stop, &mut outcome).await;
        outcome.holding_deny_all =
            live.buckets.iter().filter(|b| b.held == Held::Deny).count() as u64;
        outcome
    }

    /// Opens the stream: its sender of reports and its answers, or why not.
    async fn open(&self, channel: Result<Channel, String>) -> Result<Opened, (String, String)> {
        let channel = channel.map_err(|e| ("connect".to_string(), e))?;
        let (sender, receiver) = mpsc::channel(16);
        let mut client = RateLimitQuotaServiceClient::new(channel);
        match client
            .stream_rate_limit_quotas(ReceiverStream::new(receiver))
            .await
        {
            Ok(answers) => Ok((sender, answers.into_inner())),
            Err(status) => Err(status_error(&status)),
        }
    }
}

/// An open stream: its sender of reports, and its answers.
type Opened = (
    mpsc::Sender<RateLimitQuotaUsageReports>,
    tonic::Streaming<RateLimitQuotaResponse>,
);

/// A status's code as its name, and its message.
fn status_error(status: &tonic::Status) -> (String, String) {
    (format!("{:?}", status.code()), status.message().to_string())
}

/// An open stream's state.
struct Live<'a> {
    plan: &'a Plan,
    sender: mpsc::Sender<RateLimitQuotaUsageReports>,
    rng: StdRng,
    buckets: Vec<Bucket>,
    /// When the next interval's report is due.
    next_report: Nanos,
}

impl<'a> Live<'a> {
    fn new(
        plan: &'a Plan,
        sender: mpsc::Sender<RateLimitQuotaUsageReports>,
        mut rng: StdRng,
    ) -> Self {
        let now = plan.clock.now();
        let buckets = (0..plan.buckets)
            .map(|_| Bucket {
                subscribes_at: Some(now.saturating_add(plan.gap(&mut rng))),
                first_sent: None,
                held: Held::Allow,
            })
            .collect();
        Live {
            plan,
            sender,
            rng,
            buckets,
            next_report: now.saturating_add(plan.interval),
        }
    }

    /// Reports and reads answers until `stop`; the error that ended the stream, if one did.
    async fn run(
        &mut self,
        answers: tonic::Streaming<RateLimitQuotaResponse>,
        mut stop: watch::Receiver<bool>,
        outcome: &mut Outcome,
    ) -> Option<(String, String)> {
        let mut answers = answers;
        loop {
            let now = self.plan.clock.now();
            self.subscribe_due(now);
            if now >= self.next_report {
                self.report_interval();
                self.next_report = self.next_report.saturating_add(self.plan.interval);
            }
            let next = self
                .buckets
                .iter()
                .filter_map(|b| b.subscribes_at)
                .fold(self.next_report, Nanos::min);
            tokio::select! {
                _ = stop.changed() => return None,
                _ = tokio::time::sleep(next.saturating_since(now)) => {}
                answer = answers.next() => match answer {
                    Some(Ok(answer)) => self.apply(answer.bucket_action, outcome),
                    Some(Err(status)) => return Some(status_error(&status)),
                    None => return Some(("closed".into(), "the server ended the stream".into())),
                },
            }
        }
    }

    /// Sends the first report of every bucket whose first request is due, one message each.
    fn subscribe_due(&mut self, now: Nanos) {
        for k in 0..self.buckets.len() {
            let bucket = &mut self.buckets[k];
            if bucket.subscribes_at.is_some_and(|at| at <= now) {
                bucket.subscribes_at = None;
                bucket.first_sent.get_or_insert(now);
                self.send(report(&self.plan.domain, &[(k, 1, 0, 0)]));
            }
        }
    }

    /// The interval's report of every subscribed bucket (none: nothing sent).
    fn report_interval(&mut self) {
        let seconds = self.plan.interval.as_secs_f64();
        let mut usages = Vec::with_capacity(self.buckets.len());
        for k in 0..self.buckets.len() {
            if self.buckets[k].subscribes_at.is_some() {
                continue;
            }
            let requests = self.plan.requests(&mut self.rng);
            let allowed = self.buckets[k].held.allowed(requests, seconds);
            usages.push((k, allowed, requests - allowed, seconds as u64));
        }
        if !usages.is_empty() {
            self.send(report(&self.plan.domain, &usages));
        }
    }

    fn send(&mut self, message: RateLimitQuotaUsageReports) {
        let usages = message.bucket_quota_usages.len() as u64;
        let tally = &self.plan.tally;
        match self.sender.try_send(message) {
            Ok(()) => {
                tally.messages.fetch_add(1, Ordering::Relaxed);
                tally.usages.fetch_add(usages, Ordering::Relaxed);
            }
            Err(_) => {
                tally.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Applies the actions of one answer: counts them, keeps what each bucket holds, times
    /// each bucket's first assignment, and forgets the abandoned buckets.
    fn apply(&mut self, actions: Vec<BucketAction>, outcome: &mut Outcome) {
        let now = self.plan.clock.now();
        for action in actions {
            let Some((strategy, held)) = classify(action.bucket_action.as_ref()) else {
                continue;
            };
            self.plan.tally.actions[strategy].fetch_add(1, Ordering::Relaxed);
            let Some(bucket) =
                bucket_index(action.bucket_id.as_ref()).and_then(|k| self.buckets.get_mut(k))
            else {
                continue;
            };
            match held {
                Some(held) => {
                    bucket.held = held;
                    if let Some(sent) = bucket.first_sent.take() {
                        let waited = now.saturating_since(sent).as_nanos() as u64;
                        outcome.first_assignment_ns.push(waited);
                    }
                }
                None => {
                    bucket.held = Held::Allow;
                    bucket.subscribes_at = Some(now.saturating_add(self.plan.gap(&mut self.rng)));
                }
            }
        }
    }
}

/// The stream errors of a run, counted by their code.
pub fn errors_by_code(outcomes: &[Outcome]) -> BTreeMap<String, u64> {
    let mut by_code = BTreeMap::new();
    for (code, _) in outcomes.iter().filter_map(|o| o.error.as_ref()) {
        *by_code.entry(code.clone()).or_default() += 1;
    }
    by_code
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate_service::proto::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
    use floodgate_service::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{AbandonAction, QuotaAssignmentAction};

    #[test]
    fn reports_name_the_domain_and_each_bucket_as_envoy_does() {
        let first = report("bench", &[(3, 1, 0, 0)]);
        assert_eq!(first.domain, "bench");
        let usage = &first.bucket_quota_usages[0];
        assert_eq!(usage.bucket_id, Some(bucket_id(3)));
        assert_eq!(usage.bucket_id.as_ref().unwrap().bucket["name"], "bucket-3");
        assert_eq!(
            usage.time_elapsed,
            Some(prost_types::Duration {
                seconds: 0,
                nanos: 0
            })
        );
        assert_eq!(
            (usage.num_requests_allowed, usage.num_requests_denied),
            (1, 0)
        );
        let interval = report("bench", &[(0, 40, 10, 5), (1, 0, 50, 5)]);
        assert_eq!(interval.bucket_quota_usages.len(), 2);
        assert_eq!(interval.bucket_quota_usages[1].num_requests_denied, 50);
        assert_eq!(
            interval.bucket_quota_usages[1]
                .time_elapsed
                .unwrap()
                .seconds,
            5
        );
        assert_eq!(bucket_index(Some(&bucket_id(7))), Some(7));
        assert_eq!(bucket_index(None), None);
    }

    #[test]
    fn actions_are_classified_and_held_as_envoy_enforces_them() {
        let assignment = |strategy| {
            Action::QuotaAssignmentAction(QuotaAssignmentAction {
                assignment_time_to_live: Some(prost_types::Duration {
                    seconds: 15,
                    nanos: 0,
                }),
                rate_limit_strategy: Some(RateLimitStrategy {
                    strategy: Some(strategy),
                }),
            })
        };
        let tokens = assignment(Strategy::TokenBucket(TokenBucket {
            max_tokens: 100,
            tokens_per_fill: Some(20),
            fill_interval: Some(prost_types::Duration {
                seconds: 2,
                nanos: 0,
            }),
        }));
        assert_eq!(classify(Some(&tokens)), Some((0, Some(Held::Tokens(10.0)))));
        let deny = assignment(Strategy::BlanketRule(BlanketRule::DenyAll as i32));
        assert_eq!(classify(Some(&deny)), Some((1, Some(Held::Deny))));
        let allow = assignment(Strategy::BlanketRule(BlanketRule::AllowAll as i32));
        assert_eq!(classify(Some(&allow)), Some((2, Some(Held::Allow))));
        let abandon = Action::AbandonAction(AbandonAction {});
        assert_eq!(classify(Some(&abandon)), Some((3, None)));
        assert_eq!(classify(None), None);
        // What each lets through of 50 requests over 5 s.
        assert_eq!(Held::Tokens(4.0).allowed(50, 5.0), 20);
        assert_eq!(Held::Tokens(40.0).allowed(50, 5.0), 50);
        assert_eq!(
            (Held::Allow.allowed(50, 5.0), Held::Deny.allowed(50, 5.0)),
            (50, 0)
        );
    }

    #[test]
    fn poisson_counts_have_the_mean_asked_for_and_repeat_with_the_seed() {
        for mean in [0.5, 5.0, 50.0, 5000.0] {
            let mut rng = StdRng::seed_from_u64(7);
            let n = 4000;
            let total: u64 = (0..n).map(|_| poisson(&mut rng, mean)).sum();
            let seen = total as f64 / n as f64;
            // Well within 5 standard errors of the mean.
            let bound = 5.0 * (mean / n as f64).sqrt();
            assert!((seen - mean).abs() < bound, "{mean}: {seen}");
        }
        assert_eq!(poisson(&mut StdRng::seed_from_u64(1), 0.0), 0);
        let draw = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..10).map(|_| poisson(&mut rng, 20.0)).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
    }

    #[test]
    fn errors_are_counted_by_code() {
        let failed = |code: &str| Outcome {
            error: Some((code.to_string(), "why".to_string())),
            ..Outcome::default()
        };
        let outcomes = [
            failed("Unavailable"),
            Outcome::default(),
            failed("Unavailable"),
            failed("closed"),
        ];
        let by_code = errors_by_code(&outcomes);
        assert_eq!(
            by_code.into_iter().collect::<Vec<_>>(),
            [("Unavailable".into(), 2), ("closed".into(), 1)]
        );
    }
}
