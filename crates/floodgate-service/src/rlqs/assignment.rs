//! The actions sent to a client for one bucket, in the form Envoy's filter applies them.
//!
//! Envoy's filter (as of 2026) reads durations in whole seconds and applies only two
//! strategies, so every assignment here is one of:
//! - `blanket_rule: ALLOW_ALL` for a bucket with no limit (an `unlimited` descriptor, or none
//!   matched with the default allowing all);
//! - `blanket_rule: DENY_ALL` for a grant of 0;
//! - a `token_bucket` for a grant of `g` requests per unit `U`: `tokens_per_fill: g` every
//!   `fill_interval: U` (Envoy fills continuously at `g / U`), and `max_tokens` the burst
//!   ([`burst`]). `tokens_per_fill` always carries the grant, so that a changed grant is a
//!   changed bucket to Envoy (it keeps a bucket's tokens only when `max_tokens` and
//!   `tokens_per_fill` are unchanged).
//!
//! The time to live is whole seconds, at least 1 (Envoy reads less as "expired at once").
//!
//! **Bound.** A client enforcing a token bucket of burst `B` and rate `g / U` admits at most
//! `B + g` requests in any window of length `U`. Over clients whose grants in force sum to at
//! most the limit `L` ([`floodgate::quota::Claims::grant`]), that is at most `L + Σ Bᵢ` per
//! window, and with bursts of a tenth of each grant (at least one request), at most
//! `1.1 · L + n` for `n` clients.

use std::time::Duration;

use crate::proto::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use crate::proto::envoy::r#type::v3::{RateLimitStrategy, TokenBucket};
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action, QuotaAssignmentAction,
};
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use crate::proto::envoy::service::rate_limit_quota::v3::BucketId;

/// What a bucket is held to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Assigned {
    /// No limit: every request passes.
    AllowAll,
    /// `grant` requests per `unit` (0: every request is refused).
    Share {
        /// Requests per unit.
        grant: u64,
        /// The limit's unit, whole seconds.
        unit: Duration,
    },
}

/// The burst a share of `grant` requests per unit is enforced with: a tenth of it, rounded
/// up, at least 1 (see the [module documentation](self)'s bound).
pub fn burst(grant: u64) -> u64 {
    grant.div_ceil(10).max(1)
}

/// The strategy Envoy enforces for `assigned`.
pub fn strategy(assigned: Assigned) -> RateLimitStrategy {
    let strategy = match assigned {
        Assigned::AllowAll => Strategy::BlanketRule(BlanketRule::AllowAll as i32),
        Assigned::Share { grant: 0, .. } => Strategy::BlanketRule(BlanketRule::DenyAll as i32),
        Assigned::Share { grant, unit } => {
            let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
            Strategy::TokenBucket(TokenBucket {
                max_tokens: clamp(burst(grant)),
                tokens_per_fill: Some(clamp(grant)),
                fill_interval: Some(whole_seconds(unit)),
            })
        }
    };
    RateLimitStrategy {
        strategy: Some(strategy),
    }
}

/// The action assigning `assigned` to `bucket` for `ttl`.
pub fn assign(bucket: &BucketId, assigned: Assigned, ttl: Duration) -> BucketAction {
    BucketAction {
        bucket_id: Some(bucket.clone()),
        bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
            assignment_time_to_live: Some(whole_seconds(ttl)),
            rate_limit_strategy: Some(strategy(assigned)),
        })),
    }
}

/// The action telling the client to forget `bucket`.
pub fn abandon(bucket: &BucketId) -> BucketAction {
    BucketAction {
        bucket_id: Some(bucket.clone()),
        bucket_action: Some(Action::AbandonAction(AbandonAction {})),
    }
}

/// `d` as a protobuf duration of whole seconds, at least 1, rounded up.
fn whole_seconds(d: Duration) -> prost_types::Duration {
    let seconds = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    prost_types::Duration {
        seconds: i64::try_from(seconds.max(1)).unwrap_or(i64::MAX),
        nanos: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::envoy::r#type::v3::rate_limit_strategy::Strategy as Rule;
    use crate::rlqs::envoy_model::EnvoyBucket;
    use proptest::prelude::*;

    fn bucket() -> BucketId {
        BucketId {
            bucket: [("name".to_string(), "alice".to_string())].into(),
        }
    }

    #[test]
    fn shares_are_token_buckets_of_whole_seconds_and_zero_is_deny_all() {
        let minute = Duration::from_secs(60);
        let action = assign(
            &bucket(),
            Assigned::Share {
                grant: 45,
                unit: minute,
            },
            Duration::from_millis(14_500),
        );
        let Some(Action::QuotaAssignmentAction(assignment)) = action.bucket_action else {
            panic!("{action:?}")
        };
        assert_eq!(assignment.assignment_time_to_live.unwrap().seconds, 15);
        let Some(Rule::TokenBucket(tb)) = assignment.rate_limit_strategy.unwrap().strategy else {
            panic!("a token bucket")
        };
        assert_eq!((tb.max_tokens, tb.tokens_per_fill), (5, Some(45)));
        assert_eq!(tb.fill_interval.unwrap().seconds, 60);
        let deny = strategy(Assigned::Share {
            grant: 0,
            unit: minute,
        });
        assert_eq!(
            deny.strategy,
            Some(Rule::BlanketRule(BlanketRule::DenyAll as i32))
        );
        let allow = strategy(Assigned::AllowAll);
        assert_eq!(
            allow.strategy,
            Some(Rule::BlanketRule(BlanketRule::AllowAll as i32))
        );
        assert!(matches!(
            abandon(&bucket()).bucket_action,
            Some(Action::AbandonAction(_))
        ));
        assert_eq!(whole_seconds(Duration::ZERO).seconds, 1);
    }

    proptest! {
        /// Any traffic through the token bucket of a grant admits at most `burst + grant` in
        /// any window of one unit (checked on the windows starting at each admission).
        #[test]
        fn a_grant_admits_at_most_its_burst_and_itself_per_unit(
            grant in 1u64..200,
            unit in prop_oneof![Just(1u64), Just(60)],
            gaps in prop::collection::vec(0u64..2_000, 1..400),
        ) {
            let Some(Rule::TokenBucket(tb)) = strategy(Assigned::Share {
                grant,
                unit: Duration::from_secs(unit),
            }).strategy else { unreachable!() };
            let mut envoy = EnvoyBucket::start(&tb, 0.0);
            let mut now = 0.0;
            let mut admitted = Vec::new();
            for gap in gaps {
                now += gap as f64 * unit as f64 / 1_000.0;
                if envoy.admit(now) {
                    admitted.push(now);
                }
            }
            let most = burst(grant) + grant;
            for (i, start) in admitted.iter().enumerate() {
                let within = admitted[i..].iter().take_while(|t| **t < start + unit as f64).count();
                prop_assert!(within as u64 <= most, "{within} admitted in one unit, bound {most}");
            }
        }
    }
}
