//! What the Rate Limit Quota Service shows in `/metrics`: its streams, the assignments it
//! sent, and the busiest buckets' demand and grants. Every series is bounded: the strategies
//! are four, and the buckets shown are the [`BUSIEST`] by demand.

use std::sync::atomic::{AtomicU64, Ordering};

use super::QuotasView;
use crate::prometheus::{Exposition, Kind};
use crate::proto::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;

/// How many buckets `/metrics` shows, the busiest by demand.
pub const BUSIEST: usize = 20;

/// The service's counters.
#[derive(Debug, Default)]
pub struct QuotaCounters {
    opened: AtomicU64,
    closed: AtomicU64,
    /// Assignments sent: token buckets, deny-all, allow-all; and abandons.
    sent: [AtomicU64; 4],
}

const SENT: [&str; 4] = ["token_bucket", "deny_all", "allow_all", "abandon"];

impl QuotaCounters {
    /// A stream opened.
    pub fn opened(&self) {
        self.opened.fetch_add(1, Ordering::Relaxed);
    }

    /// The streams open now.
    pub fn open(&self) -> u64 {
        let opened = self.opened.load(Ordering::Relaxed);
        opened.saturating_sub(self.closed.load(Ordering::Relaxed))
    }

    /// A stream ended.
    pub fn closed(&self) {
        self.closed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts `actions`, about to be sent.
    pub fn sent(&self, actions: &[BucketAction]) {
        for action in actions {
            let i = match &action.bucket_action {
                Some(Action::AbandonAction(_)) => 3,
                Some(Action::QuotaAssignmentAction(a)) => {
                    match a
                        .rate_limit_strategy
                        .as_ref()
                        .and_then(|s| s.strategy.as_ref())
                    {
                        Some(Strategy::BlanketRule(r)) if *r == BlanketRule::DenyAll as i32 => 1,
                        Some(Strategy::BlanketRule(_)) => 2,
                        _ => 0,
                    }
                }
                None => continue,
            };
            self.sent[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The bucket actions sent since start, by strategy (and abandons).
    pub fn sent_by_strategy(&self) -> Vec<(&'static str, u64)> {
        SENT.iter()
            .zip(&self.sent)
            .map(|(name, n)| (*name, n.load(Ordering::Relaxed)))
            .collect()
    }

    /// The streams opened since start.
    pub fn opened_total(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }
}

impl QuotasView {
    /// Writes the service's RLQS series as of this reading.
    pub fn write(&self, text: &mut Exposition<'_>) {
        text.family(
            "floodgate_rlqs_streams",
            Kind::Gauge,
            "Rate Limit Quota Service streams open.",
        )
        .sample(&[], self.streams);
        text.family(
            "floodgate_rlqs_streams_opened_total",
            Kind::Counter,
            "Rate Limit Quota Service streams opened.",
        )
        .sample(&[], self.opened);
        let mut sent = text.family(
            "floodgate_rlqs_assignments_total",
            Kind::Counter,
            "Bucket actions sent, by strategy (and abandons).",
        );
        for (name, n) in &self.sent {
            sent.sample(&[("strategy", name)], *n);
        }
        text.family(
            "floodgate_rlqs_buckets",
            Kind::Gauge,
            "Buckets this node's streams claim or hold grants on.",
        )
        .sample(&[], self.buckets);
        text.family(
            "floodgate_rlqs_store_steps_total",
            Kind::Counter,
            "This node's steps on the nodes' claims of its buckets (about one a second per bucket its streams use), failed ones included.",
        )
        .sample(&[], self.store_steps);
        text.family(
            "floodgate_rlqs_store_failures_total",
            Kind::Counter,
            "Steps on the shared claims the store failed (nothing was sent for those buckets).",
        )
        .sample(&[], self.store_failures);
        let per_bucket = [
            (
                "floodgate_rlqs_bucket_demand",
                "Demand on the busiest buckets, requests per unit of their limit.",
            ),
            (
                "floodgate_rlqs_bucket_granted",
                "Grants in force on the busiest buckets, requests per unit (at most the limit).",
            ),
            (
                "floodgate_rlqs_bucket_limit",
                "The limit of each of the busiest buckets, requests per unit.",
            ),
            (
                "floodgate_rlqs_bucket_claimants",
                "Streams claiming each of the busiest buckets.",
            ),
        ];
        for (i, (name, help)) in per_bucket.into_iter().enumerate() {
            let mut family = text.family(name, Kind::Gauge, help);
            for load in &self.busiest {
                let value = [load.demand, load.granted, load.limit, load.claimants][i];
                family.sample(&[("domain", &load.domain), ("bucket", &load.bucket)], value);
            }
        }
    }
}
