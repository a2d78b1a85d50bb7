//! The actions sent to a client for one bucket, in the form Envoy's filter applies them.
//!
//! Envoy's filter (as of 2026) reads durations in whole seconds and applies only two
//! strategies, so every assignment here is one of:
//! - `blanket_rule: ALLOW_ALL` for a bucket with no limit (an `unlimited` descriptor, or none
//!   matched with the default allowing all);
//! - `blanket_rule: DENY_ALL` for a grant of 0;
//! - a `token_bucket` for a grant of `g` thousandths of a request per unit `U` (whole
//!   seconds): `tokens_per_fill: g` every `fill_interval: 1000 · U` (Envoy fills
//!   continuously, at `g / (1000 · U)` a second), so that a grant below one request per unit
//!   is still a rate; past `u32::MAX` tokens, `g / 10ᵏ` every `1000 · U / 10ᵏ` for the least
//!   `k` that fits (`k ≤ 3`; beyond, the rate is clamped at `u32::MAX` per `U`).
//!   `tokens_per_fill` always carries the grant, so that a changed grant is a changed bucket
//!   to Envoy, which keeps a bucket's tokens (and ignores its `fill_interval`) when
//!   `max_tokens` and `tokens_per_fill` are unchanged.
//!
//! `max_tokens` is the burst ([`burst`]): one second of the grant's rate, rounded up, and 2
//! more. Requests arrive at random: a token bucket at a client's mean rate with a burst of one
//! refuses about half of a Poisson client's requests; at the rate the division grants a client
//! under the water level (its demand and a margin of `√λ` a second, see
//! [`floodgate::quota::share`]) and this burst, at least 99% pass (a property test drives
//! Envoy's bucket with Poisson arrivals).
//!
//! The time to live is whole seconds, at least 1 (Envoy reads less as "expired at once").
//!
//! **Bound.** A client enforcing a token bucket of burst `B` and rate `r` a second admits at
//! most `B + r · W` requests in any window of `W` seconds. Over clients whose grants in force
//! sum to at most the limit `L` per unit `U`, that is at most `L · W / U + Σ Bᵢ`, and with
//! these bursts `Σ Bᵢ ≤ L / U + 3n` for `n` clients: in any window of one unit of one
//! second, at most `2L + 3n`; of a minute, `L + L/60 + 3n`.

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
    /// `grant` thousandths of a request per `unit` (0: every request is refused).
    Share {
        /// Thousandths of a request per unit.
        grant: u64,
        /// The limit's unit, whole seconds.
        unit: Duration,
    },
}

/// The burst a share of `grant` thousandths of a request per `unit` is enforced with: one
/// second of its rate, rounded up, and 2 (see the [module documentation](self)).
pub fn burst(grant: u64, unit: Duration) -> u64 {
    let per_second = grant as f64 / 1000.0 / unit.as_secs_f64().max(1.0);
    (per_second.ceil() as u64).saturating_add(2)
}

/// The token bucket of a share of `grant` thousandths of a request per `unit`: `(max_tokens,
/// tokens_per_fill, fill_interval in seconds)` (see the [module documentation](self)).
pub fn token_bucket(grant: u64, unit: Duration) -> (u32, u32, u64) {
    let unit = whole_seconds(unit).seconds as u64;
    let mut tokens = grant;
    let mut interval = unit.saturating_mul(1000);
    while tokens > u64::from(u32::MAX) && interval > unit {
        tokens /= 10;
        interval /= 10;
    }
    let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    let burst = burst(grant, Duration::from_secs(unit));
    (clamp(burst), clamp(tokens.max(1)), interval)
}

/// The strategy Envoy enforces for `assigned`.
pub fn strategy(assigned: Assigned) -> RateLimitStrategy {
    let strategy = match assigned {
        Assigned::AllowAll => Strategy::BlanketRule(BlanketRule::AllowAll as i32),
        Assigned::Share { grant: 0, .. } => Strategy::BlanketRule(BlanketRule::DenyAll as i32),
        Assigned::Share { grant, unit } => {
            let (max_tokens, per_fill, interval) = token_bucket(grant, unit);
            Strategy::TokenBucket(TokenBucket {
                max_tokens,
                tokens_per_fill: Some(per_fill),
                fill_interval: Some(prost_types::Duration {
                    seconds: i64::try_from(interval).unwrap_or(i64::MAX),
                    nanos: 0,
                }),
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

    fn tokens(grant: u64, unit: u64) -> TokenBucket {
        let Some(Rule::TokenBucket(tb)) = strategy(Assigned::Share {
            grant,
            unit: Duration::from_secs(unit),
        })
        .strategy
        else {
            panic!("a token bucket for {grant}")
        };
        tb
    }

    #[test]
    fn shares_are_token_buckets_of_whole_seconds_and_zero_is_deny_all() {
        let minute = Duration::from_secs(60);
        let action = assign(
            &bucket(),
            Assigned::Share {
                grant: 45_000,
                unit: minute,
            },
            Duration::from_millis(14_500),
        );
        let Some(Action::QuotaAssignmentAction(assignment)) = action.bucket_action else {
            panic!("{action:?}")
        };
        assert_eq!(assignment.assignment_time_to_live.unwrap().seconds, 15);
        // 45 a minute: 45,000 tokens every 60,000 s, a burst of one second's 0.75, and 2.
        let tb = tokens(45_000, 60);
        assert_eq!((tb.max_tokens, tb.tokens_per_fill), (3, Some(45_000)));
        assert_eq!(tb.fill_interval.unwrap().seconds, 60_000);
        // A hundredth of a request a second is a rate, not a denial.
        let tb = tokens(10, 1);
        assert_eq!((tb.max_tokens, tb.tokens_per_fill), (3, Some(10)));
        assert_eq!(tb.fill_interval.unwrap().seconds, 1_000);
        // Past u32::MAX tokens, fewer tokens over a shorter interval, at least the unit.
        let tb = tokens(50_000_000_000, 1);
        assert_eq!(tb.tokens_per_fill, Some(500_000_000));
        assert_eq!(tb.fill_interval.unwrap().seconds, 10);
        let tb = tokens(u64::MAX, 1);
        assert_eq!(tb.tokens_per_fill, Some(u32::MAX));
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

    /// A Poisson client at `per_second`, through the bucket the division grants a client
    /// under the water level (its demand and margin), for `seconds`: the share admitted.
    fn poisson_admitted(per_second: f64, seconds: f64, seed: u64) -> f64 {
        use rand::{Rng, SeedableRng};
        let demand = (per_second * 1000.0) as u64;
        let grant = demand + floodgate::quota::share::margin(demand, 1.0, 1000);
        let mut envoy = EnvoyBucket::start(&tokens(grant, 1), 0.0);
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (mut now, mut sent, mut admitted) = (0.0, 0u64, 0u64);
        while now < seconds {
            now += -(1.0 - rng.random::<f64>()).ln() / per_second;
            sent += 1;
            admitted += u64::from(envoy.admit(now));
        }
        admitted as f64 / sent as f64
    }

    #[test]
    fn a_poisson_client_under_the_water_level_is_let_through() {
        for per_second in [0.05, 0.5, 1.0, 3.0, 10.0, 50.0, 300.0] {
            let seconds = 20_000.0 / per_second;
            let share = poisson_admitted(per_second, seconds, 7);
            assert!(share >= 0.98, "{per_second}/s: {share} admitted");
        }
    }

    proptest! {
        /// Any traffic through the token bucket of a grant admits at most its burst and its
        /// rate over any window of one unit (checked on the windows starting at each
        /// admission).
        #[test]
        fn a_grant_admits_at_most_its_burst_and_itself_per_unit(
            grant in 1u64..200_000,
            unit in prop_oneof![Just(1u64), Just(60)],
            gaps in prop::collection::vec(0u64..2_000, 1..400),
        ) {
            let tb = tokens(grant, unit);
            let mut envoy = EnvoyBucket::start(&tb, 0.0);
            let mut now = 0.0;
            let mut admitted = Vec::new();
            for gap in gaps {
                now += gap as f64 * unit as f64 / 1_000.0;
                if envoy.admit(now) {
                    admitted.push(now);
                }
            }
            let most = burst(grant, Duration::from_secs(unit)) + grant.div_ceil(1000);
            for (i, start) in admitted.iter().enumerate() {
                let within = admitted[i..].iter().take_while(|t| **t < start + unit as f64).count();
                prop_assert!(within as u64 <= most, "{within} admitted in one unit, bound {most}");
            }
        }

        /// Two grants that differ are two token buckets to Envoy, which compares only
        /// max_tokens and tokens_per_fill (below u32::MAX thousandths a unit, 4.29 million
        /// requests; past it, grants within ten thousandths of each other may look alike).
        #[test]
        fn a_changed_grant_changes_what_envoy_compares(
            a in 1u64..u64::from(u32::MAX),
            b in 1u64..u64::from(u32::MAX),
            unit in prop_oneof![Just(1u64), Just(60), Just(3600)],
        ) {
            prop_assume!(a != b);
            let (x, y) = (tokens(a, unit), tokens(b, unit));
            prop_assert_ne!((x.max_tokens, x.tokens_per_fill), (y.max_tokens, y.tokens_per_fill));
        }
    }
}
