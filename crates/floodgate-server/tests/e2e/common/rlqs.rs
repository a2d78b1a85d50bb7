//! RLQS clients written as Envoy's filter behaves (read from its source): one stream per
//! domain, the domain in every message, a bucket's first report sent at its first request with
//! that request counted and `time_elapsed` 0, then every bucket reported each interval.

use std::collections::HashMap;
use std::time::Duration;

use floodgate_server::grpc::proto::envoy::r#type::v3::rate_limit_strategy::{
    BlanketRule, Strategy,
};
use floodgate_server::grpc::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use floodgate_server::grpc::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use floodgate_server::grpc::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use floodgate_server::grpc::proto::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::Streaming;

use super::serve::Service;

/// One RLQS client: a stream, the assignments it holds per bucket.
pub struct Client {
    pub reports: mpsc::Sender<RateLimitQuotaUsageReports>,
    pub answers: Streaming<RateLimitQuotaResponse>,
    /// The last strategy of each bucket, by its `name` pair: `deny`, `allow` or `tokens R`
    /// (R requests per second, see [`told`]).
    pub held: HashMap<String, String>,
}

impl Client {
    pub async fn connect(service: &Service) -> Client {
        let client = RateLimitQuotaServiceClient::connect(service.grpc.clone())
            .await
            .expect("connects");
        Client::open(client).await
    }

    /// A stream on `client`'s channel.
    pub async fn open(
        mut client: RateLimitQuotaServiceClient<tonic::transport::Channel>,
    ) -> Client {
        let (reports, receiver) = mpsc::channel(16);
        let answers = client
            .stream_rate_limit_quotas(ReceiverStream::new(receiver))
            .await
            .expect("the stream opens")
            .into_inner();
        Client {
            reports,
            answers,
            held: HashMap::new(),
        }
    }

    /// Reports `name`'s bucket in `domain`: allowed and denied requests over `elapsed` seconds.
    pub async fn report(&self, domain: &str, name: &str, allowed: u64, denied: u64, elapsed: i64) {
        let usage = BucketQuotaUsage {
            bucket_id: Some(bucket(name)),
            time_elapsed: Some(prost_types::Duration {
                seconds: elapsed,
                nanos: 0,
            }),
            num_requests_allowed: allowed,
            num_requests_denied: denied,
        };
        let reports = RateLimitQuotaUsageReports {
            domain: domain.to_string(),
            bucket_quota_usages: vec![usage],
        };
        self.reports
            .send(reports)
            .await
            .expect("the stream is open");
    }

    /// Reads answers until `name`'s bucket holds a token bucket of a rate within `rates`
    /// (requests per second; at most 20 s).
    pub async fn until_rate(&mut self, name: &str, rates: std::ops::RangeInclusive<f64>) {
        let what = format!("a rate in {rates:?}");
        self.until(name, &what, |held| {
            rate(held).is_some_and(|r| rates.contains(&r))
        })
        .await
    }

    /// Reads answers until what `name`'s bucket holds is `good` (at most 20 s).
    pub async fn until(&mut self, name: &str, wanted: &str, good: impl Fn(&str) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !self.held.get(name).is_some_and(|h| good(h)) {
            let answer = tokio::time::timeout_at(deadline, self.answers.next())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "{name} holds {:?}, not {wanted}, after 20 s",
                        self.held.get(name)
                    )
                })
                .expect("the stream goes on")
                .expect("an answer");
            for action in answer.bucket_action {
                let id = action.bucket_id.expect("every action names its bucket");
                let name = id.bucket["name"].clone();
                self.held.insert(name, told(action.bucket_action));
            }
        }
    }
}

pub fn bucket(name: &str) -> BucketId {
    BucketId {
        bucket: [("name".to_string(), name.to_string())].into(),
    }
}

/// The rate of a held `tokens R`, requests per second.
pub fn rate(held: &str) -> Option<f64> {
    held.strip_prefix("tokens ")?.parse().ok()
}

/// What an action tells the Envoy: `abandon`, `deny`, `allow`, or `tokens R` for a token
/// bucket filled at R requests per second (`tokens_per_fill / fill_interval`, to a
/// thousandth).
pub fn told(action: Option<Action>) -> String {
    match action {
        Some(Action::AbandonAction(_)) => "abandon".to_string(),
        Some(Action::QuotaAssignmentAction(a)) => {
            let ttl = a.assignment_time_to_live.expect("a time to live").seconds;
            assert!(
                ttl >= 1,
                "Envoy reads less than a second as expired at once"
            );
            match a.rate_limit_strategy.and_then(|s| s.strategy) {
                Some(Strategy::BlanketRule(r)) if r == BlanketRule::DenyAll as i32 => {
                    "deny".to_string()
                }
                Some(Strategy::BlanketRule(_)) => "allow".to_string(),
                Some(Strategy::TokenBucket(tb)) => {
                    let fill = tb.fill_interval.expect("a fill interval").seconds;
                    assert!(
                        fill >= 1,
                        "Envoy divides by the whole seconds of the fill interval"
                    );
                    let tokens = tb.tokens_per_fill.expect("tokens per fill set");
                    let per_second = f64::from(tokens) / fill as f64;
                    format!("tokens {}", (per_second * 1000.0).round() / 1000.0)
                }
                other => panic!("a strategy Envoy does not apply: {other:?}"),
            }
        }
        None => panic!("an action with nothing in it"),
    }
}

/// An Envoy of a fleet, reporting one bucket of `domain` on its own stream: its first report
/// at once (one request, `time_elapsed` 0), then every `interval` the demand it is given
/// (requests seen, allowed and denied, over the interval, in whole seconds), as Envoy's
/// filter reports; it keeps the last assignment it was sent. It leaves when dropped: its task
/// ends, and with it the stream.
pub struct Reporter {
    demand: std::sync::Arc<std::sync::atomic::AtomicU64>,
    held: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    /// Every assignment it was sent, in order.
    told: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Reporter {
    /// Starts reporting `name`'s bucket to `service`, wanting `demand` requests per second.
    pub async fn start(
        service: &Service,
        domain: &str,
        name: &str,
        interval: Duration,
        demand: u64,
    ) -> Reporter {
        let Client {
            reports,
            mut answers,
            ..
        } = Client::connect(service).await;
        let demand = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(demand));
        let held = std::sync::Arc::new(std::sync::Mutex::new(None));
        let told_all = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (domain, name) = (domain.to_string(), name.to_string());
        let (wanted, last, history) = (demand.clone(), held.clone(), told_all.clone());
        let task = tokio::spawn(async move {
            let send = |allowed: u64, elapsed: i64| {
                let usage = BucketQuotaUsage {
                    bucket_id: Some(bucket(&name)),
                    time_elapsed: Some(prost_types::Duration {
                        seconds: elapsed,
                        nanos: 0,
                    }),
                    num_requests_allowed: allowed,
                    num_requests_denied: 0,
                };
                RateLimitQuotaUsageReports {
                    domain: domain.clone(),
                    bucket_quota_usages: vec![usage],
                }
            };
            if reports.send(send(1, 0)).await.is_err() {
                return;
            }
            let mut every = tokio::time::interval(interval);
            every.tick().await;
            loop {
                tokio::select! {
                    answer = answers.next() => {
                        let Some(Ok(answer)) = answer else { return };
                        for action in answer.bucket_action {
                            let told = told(action.bucket_action);
                            history.lock().unwrap().push(told.clone());
                            *last.lock().unwrap() = Some(told);
                        }
                    }
                    _ = every.tick() => {
                        let secs = interval.as_secs();
                        let seen = wanted.load(std::sync::atomic::Ordering::Relaxed) * secs;
                        if reports.send(send(seen, secs as i64)).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Reporter {
            demand,
            held,
            told: told_all,
            task,
        }
    }

    /// Every assignment it was sent, in order.
    pub fn told(&self) -> Vec<String> {
        self.told.lock().unwrap().clone()
    }

    /// The rate it holds, requests per second (`None` for anything but a token bucket).
    pub fn rate(&self) -> Option<f64> {
        self.holds().as_deref().and_then(rate)
    }

    /// Wants `demand` requests per second from its next report on.
    pub fn want(&self, demand: u64) {
        self.demand
            .store(demand, std::sync::atomic::Ordering::Relaxed);
    }

    /// The last assignment it was sent: `deny`, `allow` or `tokens R` (per second).
    pub fn holds(&self) -> Option<String> {
        self.held.lock().unwrap().clone()
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.task.abort();
    }
}
