//! One RLQS stream: the client's buckets, what each was last sent, and the actions each report
//! and each tick bring.
//!
//! - **A report** ([`Session::report`]): the first names the domain (later ones may repeat it,
//!   not change it). Each bucket in it is looked up, its demand recorded, and answered with its
//!   next grant (every report renews each assignment's time to live); a bucket first seen
//!   subscribes. A bucket whose reports have said no request for
//!   [`Settings::abandon_idle_after`] is abandoned instead: the client forgets it, its share
//!   goes back.
//! - **A tick** ([`Session::tick`], about every second): each bucket's grant is taken again,
//!   and sent when it changed, so that a share that shrinks reaches the client at once and one
//!   that grows grows as soon as the others' grants leave room.
//! - **The end** ([`Session::close`]): every claim of the stream leaves (its last grants stay
//!   counted until their time to live passes; see [`floodgate::quota::claims`]).
//! - **A store that fails** (claims kept in Redis): the bucket's step is not taken and nothing
//!   is sent for it, so the client keeps the assignment it was last sent until that expires,
//!   then falls back to its filter's `expired_assignment_behavior`; no client is ever handed
//!   a limit's whole rate because the store is gone. The next report that reaches the store
//!   takes up again where the claims stand.
//!
//! A message is checked whole before any of its steps is taken, and its buckets' steps are then
//! taken at once (on Redis, one round trip for the message rather than one per bucket).
//!
//! A first report without a domain, a bucket without pairs (or with an empty key or value, or
//! beyond the bounds of [`Settings`]) ends the stream with `INVALID_ARGUMENT`, nothing of that
//! message claimed; a stream past
//! [`Settings::max_buckets_per_stream`] ends with `RESOURCE_EXHAUSTED`. Other streams are
//! untouched.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use floodgate::quota::claims::demand_per_unit;
use floodgate::quota::share::margin;
use floodgate::quota::ClaimTerms;
use floodgate::Nanos;

use super::assignment::{self, Assigned};
use super::ledger::{Ask, BucketTerms};
use super::pool::STEP_EVERY;
use super::{Ledger, Limit, Settings};
use crate::descriptors::RuleSet;
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use crate::proto::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaUsageReports};

/// Why a stream is ended.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The client sent what the protocol does not allow (`INVALID_ARGUMENT`).
    #[error("{0}")]
    Invalid(String),
    /// The client subscribed to more buckets than one stream may (`RESOURCE_EXHAUSTED`).
    #[error("{0}")]
    TooMany(String),
}

/// One stream's state.
#[derive(Debug)]
pub struct Session {
    ledger: Arc<Ledger>,
    /// This stream's name among the claimants of every bucket (unique on the node, and across
    /// nodes with the node's name in it).
    claimant: String,
    domain: Option<String>,
    buckets: HashMap<String, Subscribed>,
}

/// A bucket the stream subscribed to.
#[derive(Debug)]
struct Subscribed {
    id: BucketId,
    /// How metrics name it: `(domain, pairs)`.
    label: (String, String),
    limit: Limit,
    /// What it was last sent.
    sent: Option<Assigned>,
    /// Its last report with a request in it (or its subscription).
    active_at: Nanos,
}

impl Session {
    /// A stream claiming as `claimant` on `ledger`.
    pub fn new(ledger: Arc<Ledger>, claimant: String) -> Session {
        Session {
            ledger,
            claimant,
            domain: None,
            buckets: HashMap::new(),
        }
    }

    /// The domain the stream's first report named.
    pub fn domain(&self) -> Option<&str> {
        self.domain.as_deref()
    }

    /// The buckets the stream holds.
    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// Takes one message of usage reports at `now`, the domain's limits read from `rules`,
    /// under `settings`, and returns the actions to send (see the [module
    /// documentation](self)). The message is checked whole before any step is taken (a bad
    /// bucket ends the stream with nothing of the message claimed); then every bucket's step
    /// is taken at once.
    pub async fn report(
        &mut self,
        reports: RateLimitQuotaUsageReports,
        rules: &RuleSet,
        settings: &Settings,
        now: Nanos,
    ) -> Result<Vec<BucketAction>, SessionError> {
        let domain = self.domain_of(reports.domain)?;
        let mut planned = Vec::with_capacity(reports.bucket_quota_usages.len());
        for usage in reports.bucket_quota_usages {
            planned.push(self.plan(&domain, usage, rules, settings, now)?);
        }
        let ledger = &self.ledger;
        let claimant = self.claimant.as_str();
        let steps = planned.iter().map(|plan| async move {
            match plan {
                Planned::Report {
                    key,
                    label,
                    demand,
                    margin,
                    capacity,
                    ..
                } => {
                    let ask = Ask::Report {
                        demand: *demand,
                        margin: *margin,
                    };
                    let terms = terms(*capacity, settings);
                    ledger.ask(key, label, claimant, ask, &terms, now).await
                }
                Planned::Abandon {
                    key,
                    leave: Some((label, capacity)),
                    ..
                } => {
                    let terms = terms(*capacity, settings);
                    ledger.leave(key, label, claimant, &terms, now).await;
                    None
                }
                _ => None,
            }
        });
        let taken = futures_util::future::join_all(steps).await;
        let ttl = settings.assignment_ttl;
        let mut actions = Vec::with_capacity(planned.len());
        for (plan, taken) in planned.into_iter().zip(taken) {
            let (key, assigned) = match plan {
                Planned::Abandon { id, .. } => {
                    actions.push(assignment::abandon(&id));
                    continue;
                }
                Planned::Allow { key } => (key, Assigned::AllowAll),
                Planned::Report { key, unit, .. } => {
                    // Nothing to send (a store that failed): the client keeps what it holds.
                    let Some(grant) = taken else { continue };
                    (key, Assigned::Share { grant, unit })
                }
            };
            if let Some(bucket) = self.buckets.get_mut(&key) {
                bucket.sent = Some(assigned);
                actions.push(assignment::assign(&bucket.id, assigned, ttl));
            }
        }
        Ok(actions)
    }

    /// Asks every bucket's assignment again at `now`, and returns those that changed (each
    /// sent for `settings`' time to live). A bucket whose node's step the store failed is left
    /// as it was sent.
    pub async fn tick(&mut self, settings: &Settings, now: Nanos) -> Vec<BucketAction> {
        let ttl = settings.assignment_ttl;
        let ledger = &self.ledger;
        let claimant = self.claimant.as_str();
        let steps = self.buckets.iter_mut().filter_map(|(key, bucket)| {
            let Limit::PerUnit { requests, unit } = bucket.limit else {
                return None;
            };
            let terms = terms(requests, settings);
            Some(async move {
                let grant = ledger
                    .ask(key, &bucket.label, claimant, Ask::Tick, &terms, now)
                    .await?;
                let assigned = Assigned::Share { grant, unit };
                bucket.sent = Some(assigned);
                Some(assignment::assign(&bucket.id, assigned, ttl))
            })
        });
        futures_util::future::join_all(steps)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// The stream ended at `now`: it leaves every bucket (what it was sent stays counted until
    /// it ends; a node whose leave the store failed leaves once it has not reported for
    /// [`Settings::unreported_after`]).
    pub async fn close(self, settings: &Settings, now: Nanos) {
        let claimant = self.claimant.as_str();
        let ledger = &self.ledger;
        let leaves = self.buckets.iter().filter_map(|(key, bucket)| {
            let Limit::PerUnit { requests, .. } = bucket.limit else {
                return None;
            };
            let terms = terms(requests, settings);
            Some(async move {
                ledger
                    .leave(key, &bucket.label, claimant, &terms, now)
                    .await;
            })
        });
        futures_util::future::join_all(leaves).await;
    }

    /// The stream's domain, set by its first report.
    fn domain_of(&mut self, named: String) -> Result<String, SessionError> {
        match &self.domain {
            None if named.is_empty() => Err(SessionError::Invalid(
                "the stream's first report names no domain".to_string(),
            )),
            None => {
                self.domain = Some(named.clone());
                Ok(named)
            }
            Some(domain) if named.is_empty() || named == *domain => Ok(domain.clone()),
            Some(domain) => Err(SessionError::Invalid(format!(
                "the stream's domain is `{domain}`; a report names `{named}` (open another stream for another domain)"
            ))),
        }
    }

    /// One bucket's report, checked and recorded on the stream: the step it asks for.
    fn plan(
        &mut self,
        domain: &str,
        usage: BucketQuotaUsage,
        rules: &RuleSet,
        settings: &Settings,
        now: Nanos,
    ) -> Result<Planned, SessionError> {
        let id = usage.bucket_id.unwrap_or_default();
        let pairs = pairs(&id, settings)?;
        let key = bucket_key(domain, &pairs);
        let (limit, detailed) = limit_of(rules, domain, &pairs, settings.unmatched);
        let requests = usage
            .num_requests_allowed
            .saturating_add(usage.num_requests_denied);
        if !self.buckets.contains_key(&key) && self.buckets.len() >= settings.max_buckets_per_stream
        {
            return Err(SessionError::TooMany(format!(
                "a stream holds at most {} buckets; this one would hold more",
                settings.max_buckets_per_stream
            )));
        }
        let ledger = &self.ledger;
        let bucket = self
            .buckets
            .entry(key.clone())
            .or_insert_with(|| Subscribed {
                id,
                label: (
                    domain.to_string(),
                    label_of(&pairs, detailed, |v| ledger.hidden(v)),
                ),
                limit,
                sent: None,
                active_at: now,
            });
        bucket.limit = limit;
        if requests > 0 {
            bucket.active_at = now;
        }
        if now.saturating_since(bucket.active_at) >= settings.abandon_idle_after {
            let gone = self.buckets.remove(&key).expect("the bucket just seen");
            let leave = match limit {
                Limit::PerUnit { requests, .. } => Some((gone.label, requests)),
                Limit::Unlimited => None,
            };
            return Ok(Planned::Abandon {
                key,
                id: gone.id,
                leave,
            });
        }
        Ok(match limit {
            Limit::Unlimited => Planned::Allow { key },
            Limit::PerUnit {
                requests: capacity,
                unit,
            } => {
                let (demand, window) = demand_of(usage.time_elapsed, requests, unit, settings);
                // The margin for random arrivals, and at least one request over the window: a
                // report of no request does not say the rate is nothing.
                let one = demand_per_unit(1, window, unit, LEAST_WINDOW);
                Planned::Report {
                    key,
                    label: bucket.label.clone(),
                    demand,
                    margin: margin(demand, unit.as_secs_f64(), 1000).max(one),
                    capacity,
                    unit,
                }
            }
        })
    }
}

/// What one bucket's report asks of the ledger.
enum Planned {
    /// Abandon the bucket: the client forgets it, and its claim, if it had one (`leave`: its
    /// label and its limit's requests per unit), leaves.
    Abandon {
        key: String,
        id: BucketId,
        leave: Option<((String, String), u64)>,
    },
    /// No limit: allow all, nothing claimed.
    Allow { key: String },
    /// Report `demand` and `margin` (thousandths of a request per unit) on the bucket's
    /// limit of `capacity` per `unit`, and send its assignment.
    Report {
        key: String,
        label: (String, String),
        demand: u64,
        margin: u64,
        capacity: u64,
        unit: Duration,
    },
}

/// The terms a bucket of `capacity` requests per unit is divided under: claimed in
/// thousandths of a request (so at most [`floodgate::quota::claims::MOST`] thousandths, about
/// 1.1 billion requests per unit), a node's grant counted in force for the
/// assignment's time to live, [`STEP_EVERY`] (it hands its grant out until its next step) and
/// [`IN_FLIGHT`] more; streams and nodes leaving once unreported for
/// [`Settings::unreported_after`].
fn terms(capacity: u64, settings: &Settings) -> BucketTerms {
    BucketTerms {
        claims: ClaimTerms {
            capacity: capacity.saturating_mul(1000),
            ttl: settings
                .assignment_ttl
                .saturating_add(STEP_EVERY)
                .saturating_add(IN_FLIGHT),
            idle: settings.unreported_after,
        },
        sent_ttl: settings.assignment_ttl.saturating_add(IN_FLIGHT),
    }
}

/// How much longer than its time to live a grant is counted in force: the client's expiry
/// runs from when the assignment reaches it, a little after the grant was made.
pub const IN_FLIGHT: Duration = Duration::from_secs(1);

/// The shortest window a report is read over: a report over less time counts as over this
/// much (Envoy's filter may report as often as every 100 ms).
pub const LEAST_WINDOW: Duration = Duration::from_millis(100);

/// The demand of a report of `requests` over `time_elapsed`, thousandths of a request per
/// `unit`, and the window it was read over: a bucket's first report (`time_elapsed` 0)
/// counts its first request over one reporting interval; any other is read over its own
/// window, at least [`LEAST_WINDOW`].
fn demand_of(
    time_elapsed: Option<prost_types::Duration>,
    requests: u64,
    unit: Duration,
    settings: &Settings,
) -> (u64, Duration) {
    let elapsed = time_elapsed
        .and_then(|d| Duration::try_from(d).ok())
        .unwrap_or_default();
    let window = match elapsed.is_zero() {
        true => settings.reporting_interval,
        false => elapsed,
    };
    (
        demand_per_unit(requests, window, unit, LEAST_WINDOW),
        window,
    )
}

/// A bucket's pairs in key order, once checked against `settings`' bounds.
fn pairs(id: &BucketId, settings: &Settings) -> Result<Vec<(String, String)>, SessionError> {
    {
        let invalid = |why: String| Err(SessionError::Invalid(why));
        if id.bucket.is_empty() {
            return invalid("a bucket without pairs: a bucket id needs at least one".to_string());
        }
        if id.bucket.len() > settings.max_pairs {
            return invalid(format!(
                "a bucket id of {} pairs: at most {}",
                id.bucket.len(),
                settings.max_pairs
            ));
        }
        let mut pairs = Vec::with_capacity(id.bucket.len());
        for (key, value) in &id.bucket {
            if key.is_empty() || value.is_empty() {
                return invalid(format!(
                    "a bucket pair with an empty key or value (`{key}`)"
                ));
            }
            let longest = key.len().max(value.len());
            if longest > settings.max_pair_bytes {
                return invalid(format!(
                    "a bucket pair of {longest} bytes: at most {}",
                    settings.max_pair_bytes
                ));
            }
            pairs.push((key.clone(), value.clone()));
        }
        pairs.sort_unstable();
        Ok(pairs)
    }
}

/// The limit `rules` give the bucket of `pairs` in `domain` (see [`super`]'s "Which limit"),
/// and whether its rule asks for its values in statistics (`detailed_metric`).
fn limit_of(
    rules: &RuleSet,
    domain: &str,
    pairs: &[(String, String)],
    unmatched: Limit,
) -> (Limit, bool) {
    let Some(rule) = rules.lookup(domain, pairs) else {
        return (unmatched, false);
    };
    let limit = match rule.quota() {
        None => Limit::Unlimited,
        Some((requests, unit)) => Limit::PerUnit {
            requests: u64::from(requests),
            unit: unit.duration(),
        },
    };
    (limit, rule.detailed_metric())
}

/// How metrics and the dashboard name a bucket: its pairs as `key=value`, joined by commas,
/// each value as `hidden` shows it unless the bucket's rule has `detailed_metric` (a value may
/// be a user's name or an API key, taken from a request header).
fn label_of(pairs: &[(String, String)], detailed: bool, hidden: impl Fn(&str) -> String) -> String {
    let shown: Vec<String> = pairs
        .iter()
        .map(|(k, v)| match detailed {
            true => format!("{k}={v}"),
            false => format!("{k}={}", hidden(v)),
        })
        .collect();
    shown.join(",")
}

/// The ledger's key of a bucket: its domain and pairs, each part length-prefixed, so that no
/// two buckets share one.
fn bucket_key(domain: &str, pairs: &[(String, String)]) -> String {
    let mut key = format!("{}:{domain}", domain.len());
    for (k, v) in pairs {
        key.push_str(&format!("/{}:{k}{}:{v}", k.len(), v.len()));
    }
    key
}

#[cfg(test)]
mod tests;
