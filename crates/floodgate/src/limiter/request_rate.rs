//! The request rate limiter: one bucket per user, sized by the user's plan.
//!
//! Each plan names an algorithm with its parameters (a token bucket by default: `rate`
//! requests per second with bursts of `burst`). A request of cost `n` (1 unless an endpoint
//! costs more) takes `n` from the user's bucket; when the bucket cannot pay, the request is
//! refused with 429 and told when to retry. A user's bucket is keyed by the user alone, so a
//! plan change keeps what the user has used (the new plan's parameters apply from the next
//! request on).

use std::collections::HashMap;
use std::time::Duration;

use crate::algorithm::spec::AnyAlgorithm;
use crate::algorithm::token_bucket::TokenBucket;
use crate::store::Store;
use crate::{ConfigError, Decision, Op, StoreError};

/// A plan: a name users are assigned to, and the limit it buys.
#[derive(Clone, Debug)]
pub struct Plan {
    name: String,
    algorithm: AnyAlgorithm,
}

impl Plan {
    /// A plan limited by any algorithm (it must support [`Op::Check`], as all do).
    pub fn new(name: impl Into<String>, algorithm: AnyAlgorithm) -> Result<Plan, ConfigError> {
        let name = name.into();
        if name.is_empty() {
            return Err(ConfigError::invalid("plan", "\"\"", "a plan needs a name"));
        }
        Ok(Plan { name, algorithm })
    }

    /// A token-bucket plan: `rate` requests per second, bursts of up to `burst`.
    pub fn token_bucket(
        name: impl Into<String>,
        rate: f64,
        burst: u64,
    ) -> Result<Plan, ConfigError> {
        Plan::new(
            name,
            AnyAlgorithm::TokenBucket(TokenBucket::new(rate, burst)?),
        )
    }

    /// The example plans of DESIGN.md: `free` 50/s, `standard` 500/s and `pro` 1000/s, each
    /// with bursts of twice its rate (one extra second's worth saved up for spikes).
    pub fn examples() -> Vec<Plan> {
        [("free", 50u64), ("standard", 500), ("pro", 1000)]
            .into_iter()
            .filter_map(|(name, rate)| Plan::token_bucket(name, rate as f64, 2 * rate).ok())
            .collect()
    }

    /// The plan's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plan's algorithm and parameters.
    pub fn algorithm(&self) -> &AnyAlgorithm {
        &self.algorithm
    }

    /// What the plan allows, for messages and `RateLimit-Policy`: `units` per `window`.
    pub fn quota(&self) -> Option<(f64, Duration)> {
        self.algorithm.quota()
    }

    /// "plan free allows 50 requests per second" (or per window).
    pub fn describe(&self) -> String {
        match self.quota() {
            Some((units, window)) if window == Duration::from_secs(1) => {
                format!(
                    "plan {} allows {} requests per second",
                    self.name,
                    trim(units)
                )
            }
            Some((units, window)) => format!(
                "plan {} allows {} requests per {}",
                self.name,
                trim(units),
                humanize(window)
            ),
            None => format!("plan {} limits requests", self.name),
        }
    }
}

fn trim(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        format!("{x:.3}").trim_end_matches('0').to_string()
    }
}

/// A duration as people say it: "2 s", "1 min", "1 h".
pub(crate) fn humanize(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 3600.0 && s % 3600.0 == 0.0 {
        format!("{} h", s / 3600.0)
    } else if s >= 60.0 && s % 60.0 == 0.0 {
        format!("{} min", s / 60.0)
    } else {
        format!("{} s", trim(s))
    }
}

/// Per-user request rate limiting by plan. See the [module documentation](self).
#[derive(Debug)]
pub struct RequestRateLimiter<S> {
    plans: HashMap<String, Plan>,
    default_plan: String,
    endpoint_costs: HashMap<String, u64>,
    store: S,
}

/// A request rate decision, with the plan that made it.
#[derive(Clone, Copy, Debug)]
pub struct RateDecision<'a> {
    /// The algorithm's decision.
    pub decision: Decision,
    /// The plan applied (the default plan when the requested one is unknown).
    pub plan: &'a Plan,
}

impl<S: Store<str, AnyAlgorithm>> RequestRateLimiter<S> {
    /// A limiter over `plans`; users whose plan is unknown get `default_plan`.
    pub fn new(plans: Vec<Plan>, default_plan: &str, store: S) -> Result<Self, ConfigError> {
        let mut by_name = HashMap::new();
        for plan in plans {
            if by_name.contains_key(&plan.name) {
                return Err(ConfigError::invalid(
                    "plans",
                    &plan.name,
                    "plan names must be unique",
                ));
            }
            by_name.insert(plan.name.clone(), plan);
        }
        if !by_name.contains_key(default_plan) {
            return Err(ConfigError::invalid(
                "default_plan",
                default_plan,
                "must name one of the plans",
            ));
        }
        Ok(RequestRateLimiter {
            plans: by_name,
            default_plan: default_plan.to_string(),
            endpoint_costs: HashMap::new(),
            store,
        })
    }

    /// Makes requests to `endpoint` cost `cost` units instead of 1 (at least 1).
    pub fn with_endpoint_cost(mut self, endpoint: &str, cost: u64) -> Result<Self, ConfigError> {
        if cost == 0 {
            return Err(ConfigError::invalid(
                "endpoint_costs",
                format!("{endpoint}: 0"),
                "a cost must be at least 1",
            ));
        }
        self.endpoint_costs.insert(endpoint.to_string(), cost);
        Ok(self)
    }

    /// The plan named `name`, or the default plan.
    pub fn plan(&self, name: &str) -> &Plan {
        self.plans
            .get(name)
            .or_else(|| self.plans.get(&self.default_plan))
            .unwrap_or_else(|| unreachable!("the default plan is checked in new()"))
    }

    /// All plans, by name.
    pub fn plans(&self) -> impl Iterator<Item = &Plan> {
        self.plans.values()
    }

    /// The cost of a request to `endpoint`: its configured cost, else 1.
    pub fn cost_of(&self, endpoint: Option<&str>) -> u64 {
        endpoint
            .and_then(|e| self.endpoint_costs.get(e))
            .copied()
            .unwrap_or(1)
    }

    /// The store holding the users' buckets.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Takes `cost` from `user`'s bucket under `plan`.
    pub async fn check(
        &self,
        user: &str,
        plan: &str,
        cost: u64,
    ) -> Result<RateDecision<'_>, StoreError> {
        let plan = self.plan(plan);
        let decision = self
            .store
            .apply(&plan.algorithm, user, Op::Check { cost })
            .await?;
        Ok(RateDecision { decision, plan })
    }
}

/// The `RateLimit-Policy` quota and window for a plan, as whole numbers: a fractional rate is
/// expressed over a longer window (0.5/s becomes `q=1;w=2`).
pub(crate) fn policy_numbers(units: f64, window: Duration) -> (u64, u64) {
    let window_secs = window.as_secs_f64().max(1e-9);
    for k in [1.0, 2.0, 4.0, 5.0, 10.0, 100.0, 1000.0] {
        let q = units * k;
        let w = window_secs * k;
        if (q - q.round()).abs() < 1e-9 && (w - w.round()).abs() < 1e-9 && w.round() >= 1.0 {
            return (q.round() as u64, w.round() as u64);
        }
    }
    // Otherwise: whole requests per second, or one request per whole number of seconds for
    // rates below one per second.
    let per_second = units / window_secs;
    if per_second >= 1.0 {
        (per_second.round() as u64, 1)
    } else {
        (1, (1.0 / per_second).round().max(1.0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::spec::AnyState;
    use crate::store::MemoryStore;
    use crate::{ManualClock, Nanos};

    fn poll<F: std::future::Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("not ready"),
        }
    }

    fn limiter() -> (
        RequestRateLimiter<MemoryStore<String, AnyState, ManualClock>>,
        ManualClock,
    ) {
        let clock = ManualClock::new(Nanos::from_secs(1_000));
        let store = MemoryStore::builder().clock(clock.clone()).build().unwrap();
        (
            RequestRateLimiter::new(Plan::examples(), "free", store).unwrap(),
            clock,
        )
    }

    #[test]
    fn plans_size_the_bucket_and_unknown_plans_get_the_default() {
        let (l, _) = limiter();
        let admitted = |user: &str, plan: &str| {
            (0..5000)
                .filter(|_| poll(l.check(user, plan, 1)).unwrap().decision.allowed)
                .count()
        };
        assert_eq!(admitted("a", "free"), 100);
        assert_eq!(admitted("b", "pro"), 2000);
        assert_eq!(admitted("c", "platinum"), 100);
        assert_eq!(
            poll(l.check("c", "platinum", 1)).unwrap().plan.name(),
            "free"
        );
    }

    #[test]
    fn endpoint_costs_and_refill() {
        let (l, clock) = limiter();
        let l = l.with_endpoint_cost("/v1/reports", 10).unwrap();
        assert_eq!(l.cost_of(Some("/v1/reports")), 10);
        assert_eq!(l.cost_of(Some("/v1/charges")), 1);
        assert_eq!(l.cost_of(None), 1);
        for _ in 0..10 {
            assert!(poll(l.check("u", "free", 10)).unwrap().decision.allowed);
        }
        let d = poll(l.check("u", "free", 10)).unwrap().decision;
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_millis(200)));
        clock.advance(Duration::from_millis(200));
        assert!(poll(l.check("u", "free", 10)).unwrap().decision.allowed);
    }

    #[test]
    fn descriptions_and_policy_numbers() {
        let plans = Plan::examples();
        assert_eq!(
            plans[0].describe(),
            "plan free allows 50 requests per second"
        );
        assert_eq!(policy_numbers(50.0, Duration::from_secs(1)), (50, 1));
        assert_eq!(policy_numbers(0.5, Duration::from_secs(1)), (1, 2));
        assert_eq!(policy_numbers(100.0, Duration::from_secs(60)), (100, 60));
        assert_eq!(policy_numbers(5.0, Duration::from_millis(100)), (50, 1));
        assert_eq!(policy_numbers(0.0001, Duration::from_secs(1)), (1, 10_000));
        assert_eq!(policy_numbers(0.3, Duration::from_secs(1)), (3, 10));
    }

    #[test]
    fn invalid_configuration_names_the_field() {
        let (_, clock) = limiter();
        let store: MemoryStore<String, AnyState, ManualClock> =
            MemoryStore::builder().clock(clock).build().unwrap();
        let e = RequestRateLimiter::new(Plan::examples(), "gold", store).unwrap_err();
        assert!(e.to_string().contains("default_plan"), "{e}");
        assert!(Plan::token_bucket("x", 0.0, 1)
            .unwrap_err()
            .to_string()
            .contains("`rate`"));
        assert!(Plan::token_bucket("", 1.0, 1)
            .unwrap_err()
            .to_string()
            .contains("plan"));
    }
}
