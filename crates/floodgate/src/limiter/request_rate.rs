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
use crate::blocking::block_on;
use crate::store::holds::{hold_on, NamespaceHold};
use crate::store::{Namespace, Store};
use crate::{ConfigError, Decision, Op, StoreError};

/// Example plans, as `(name, requests per second, capacity)`, for token buckets: `free` 50/s,
/// `standard` 500/s and `pro` 1000/s, each with a capacity (the burst) of twice its rate (one extra second's
/// worth saved up for spikes). The one table of them: [`Plan::examples`], the service's built-in
/// configuration and the docs all read it.
pub const EXAMPLE_PLANS: [(&str, f64, u64); 3] = [
    ("free", 50.0, 100),
    ("standard", 500.0, 1000),
    ("pro", 1000.0, 2000),
];

/// A plan: a name users are assigned to, and the limit it buys.
#[derive(Clone, Debug)]
pub struct Plan {
    name: String,
    algorithm: AnyAlgorithm,
    /// How [`Plan::describe`] calls it: `plan`, or `limit` for [`Plan::limit`].
    noun: &'static str,
}

impl Plan {
    /// A plan limited by any algorithm (it must support [`Op::Check`], as all do).
    pub fn new(name: impl Into<String>, algorithm: AnyAlgorithm) -> Result<Plan, ConfigError> {
        let name = name.into();
        if name.is_empty() {
            return Err(ConfigError::invalid("plan", "\"\"", "a plan needs a name"));
        }
        Ok(Plan {
            name,
            algorithm,
            noun: "plan",
        })
    }

    /// A stage's one limit rather than a plan users buy: the same as [`Plan::new`], but
    /// [`Plan::describe`] says "limit per_ip allows 10 requests per second".
    pub fn limit(name: impl Into<String>, algorithm: AnyAlgorithm) -> Result<Plan, ConfigError> {
        Ok(Plan {
            noun: "limit",
            ..Plan::new(name, algorithm)?
        })
    }

    /// A token-bucket plan: `rate` requests per second, and a bucket of `capacity` requests,
    /// the most admitted at once (the burst): [`TokenBucket::new`]`(rate, capacity)`.
    pub fn token_bucket(
        name: impl Into<String>,
        rate: f64,
        capacity: u64,
    ) -> Result<Plan, ConfigError> {
        Plan::new(
            name,
            AnyAlgorithm::TokenBucket(TokenBucket::new(rate, capacity)?),
        )
    }

    /// The example plans, [`EXAMPLE_PLANS`] as token buckets.
    pub fn examples() -> Vec<Plan> {
        EXAMPLE_PLANS
            .into_iter()
            .filter_map(|(name, rate, capacity)| Plan::token_bucket(name, rate, capacity).ok())
            .collect()
    }

    /// Whether this is a stage's one limit ([`Plan::limit`]) rather than a plan users are on.
    pub fn is_limit(&self) -> bool {
        self.noun == "limit"
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

    /// "plan free allows 50 requests per second" (or per window; "limit …" for
    /// [`Plan::limit`]).
    pub fn describe(&self) -> String {
        let (noun, name) = (self.noun, &self.name);
        match self.quota() {
            Some((units, window)) if window == Duration::from_secs(1) => {
                format!("{noun} {name} allows {} requests per second", trim(units))
            }
            Some((units, window)) => format!(
                "{noun} {name} allows {} requests per {}",
                trim(units),
                humanize(window)
            ),
            None => format!("{noun} {name} limits requests"),
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
///
/// ```
/// use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
/// use floodgate::store::MemoryStore;
///
/// let limiter = RequestRateLimiter::builder()
///     .plan(Plan::token_bucket("free", 1.0, 2)?)
///     .plan(Plan::token_bucket("pro", 100.0, 200)?)
///     .default_plan("free")
///     .build(MemoryStore::new())?;
/// assert!(limiter.check_blocking("alice", "free", 1)?.decision.allowed);
/// assert!(limiter.check_blocking("alice", "free", 1)?.decision.allowed);
/// let third = limiter.check_blocking("alice", "free", 1)?;
/// assert!(!third.decision.allowed);
/// assert_eq!(third.plan.describe(), "plan free allows 1 requests per second");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct RequestRateLimiter<S> {
    namespace: Namespace,
    plans: HashMap<String, Plan>,
    default_plan: String,
    endpoint_costs: HashMap<String, u64>,
    store: S,
    /// The hold on the namespace in the store's record (see [`crate::store::holds`]).
    _claim: Option<NamespaceHold>,
}

/// A request rate decision, with the plan that made it.
#[derive(Clone, Copy, Debug)]
#[must_use = "a decision says whether the request may proceed"]
pub struct RateDecision<'a> {
    /// The algorithm's decision.
    pub decision: Decision,
    /// The plan applied (the default plan when the requested one is unknown).
    pub plan: &'a Plan,
}

/// Builds a [`RequestRateLimiter`]: at least one plan; `default_plan` (the plan of users whose
/// plan is unknown) defaults to the first plan added; endpoint costs default to 1; `namespace`
/// defaults to `request_rate`.
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct RequestRateLimiterBuilder {
    plans: Vec<Plan>,
    default_plan: Option<String>,
    endpoint_costs: Vec<(String, u64)>,
    namespace: Option<String>,
    /// Whether `namespace` was given as a default ([`Self::default_namespace`]).
    defaulted: bool,
}

impl RequestRateLimiterBuilder {
    /// Adds a plan (names must be unique).
    pub fn plan(mut self, plan: Plan) -> Self {
        self.plans.push(plan);
        self
    }

    /// Adds plans (names must be unique).
    pub fn plans(mut self, plans: impl IntoIterator<Item = Plan>) -> Self {
        self.plans.extend(plans);
        self
    }

    /// The plan of users whose plan is unknown; it must be one of the plans.
    pub fn default_plan(mut self, name: impl Into<String>) -> Self {
        self.default_plan = Some(name.into());
        self
    }

    /// Requests to `endpoint` cost `cost` units instead of 1 (at least 1).
    pub fn endpoint_cost(mut self, endpoint: impl Into<String>, cost: u64) -> Self {
        self.endpoint_costs.push((endpoint.into(), cost));
        self
    }

    /// The namespace of the users' keys in the store (see [`Namespace::new`]).
    ///
    /// Without one, the limiter takes `request_rate` for itself on its store: a second limiter
    /// of the same store building in `request_rate` is refused while this one lives, since the
    /// two would count in the same keys (see [`crate::store::holds`]). Name the namespace on
    /// both to share their counts on purpose.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self.defaulted = false;
        self
    }

    /// A namespace in place of `request_rate`, taken as a default is: for itself alone, as
    /// if no namespace had been named. For code that builds limiters for others and picks
    /// their names (a tower layer's `per_ip`), so that two of its limiters on one store are
    /// still refused rather than silently counted together.
    pub fn default_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self.defaulted = true;
        self
    }

    /// Validates the settings (errors name the field and the value) and builds the limiter.
    pub fn build<S: Store<str, AnyAlgorithm>>(
        self,
        store: S,
    ) -> Result<RequestRateLimiter<S>, ConfigError> {
        let default_plan = match (&self.default_plan, self.plans.first()) {
            (Some(name), _) => name.clone(),
            (None, Some(first)) => first.name.clone(),
            (None, None) => return Err(ConfigError::Missing { field: "plans" }),
        };
        let mut plans = HashMap::new();
        for plan in self.plans {
            if plans.contains_key(&plan.name) {
                return Err(ConfigError::invalid(
                    "plans",
                    &plan.name,
                    "plan names must be unique",
                ));
            }
            plans.insert(plan.name.clone(), plan);
        }
        if !plans.contains_key(&default_plan) {
            return Err(ConfigError::invalid(
                "default_plan",
                default_plan,
                "must name one of the plans",
            ));
        }
        let mut endpoint_costs = HashMap::new();
        for (endpoint, cost) in self.endpoint_costs {
            if cost == 0 {
                return Err(ConfigError::invalid(
                    "endpoint_costs",
                    format!("{endpoint}: 0"),
                    "a cost must be at least 1",
                ));
            }
            endpoint_costs.insert(endpoint, cost);
        }
        let namespace = Namespace::new(self.namespace.as_deref().unwrap_or("request_rate"))?;
        let named = self.namespace.is_some() && !self.defaulted;
        let claim = hold_on(&store, &namespace, named)?;
        Ok(RequestRateLimiter {
            namespace,
            plans,
            default_plan,
            endpoint_costs,
            store,
            _claim: claim,
        })
    }
}

impl RequestRateLimiter<()> {
    /// A builder (see [`RequestRateLimiterBuilder`]).
    pub fn builder() -> RequestRateLimiterBuilder {
        RequestRateLimiterBuilder::default()
    }
}

impl<S: Store<str, AnyAlgorithm>> RequestRateLimiter<S> {
    /// The plan named `name`, or the default plan.
    pub fn plan(&self, name: &str) -> &Plan {
        self.plans
            .get(name)
            .or_else(|| self.plans.get(&self.default_plan))
            .unwrap_or_else(|| unreachable!("the default plan is checked by the builder"))
    }

    /// The name of the plan users whose plan is unknown get.
    pub fn default_plan(&self) -> &str {
        &self.default_plan
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

    /// The namespace of the users' keys.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The store holding the users' buckets.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Takes `cost` from `user`'s bucket under `plan`. A user's key does not depend on the
    /// plan, so a plan change keeps what the user has used; plans of different algorithms on
    /// one user are refused by the store ([`StoreError::StateConflict`]).
    pub async fn check(
        &self,
        user: &str,
        plan: &str,
        cost: u64,
    ) -> Result<RateDecision<'_>, StoreError> {
        let plan = self.plan(plan);
        let key = self.namespace.key(user);
        let decision = self
            .store
            .apply(&plan.algorithm, &key, Op::Check { cost })
            .await?;
        Ok(RateDecision { decision, plan })
    }

    /// [`RequestRateLimiter::check`] for synchronous callers (see [`crate::blocking`]).
    pub fn check_blocking(
        &self,
        user: &str,
        plan: &str,
        cost: u64,
    ) -> Result<RateDecision<'_>, StoreError> {
        block_on(self.check(user, plan, cost))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Key, MemoryStore};
    use crate::{ManualClock, Nanos};

    type Limiter =
        RequestRateLimiter<MemoryStore<Key, crate::algorithm::spec::AnyState, ManualClock>>;

    fn builder() -> RequestRateLimiterBuilder {
        RequestRateLimiter::builder()
            .plans(Plan::examples())
            .default_plan("free")
    }

    fn limiter_with(builder: RequestRateLimiterBuilder) -> (Limiter, ManualClock) {
        let clock = ManualClock::new(Nanos::from_secs(1_000));
        let store = MemoryStore::builder().clock(clock.clone()).build().unwrap();
        (builder.build(store).unwrap(), clock)
    }

    fn limiter() -> (Limiter, ManualClock) {
        limiter_with(builder())
    }

    #[test]
    fn plans_size_the_bucket_and_unknown_plans_get_the_default() {
        let (l, _) = limiter();
        let admitted = |user: &str, plan: &str| {
            (0..5000)
                .filter(|_| l.check_blocking(user, plan, 1).unwrap().decision.allowed)
                .count()
        };
        assert_eq!(admitted("a", "free"), 100);
        assert_eq!(admitted("b", "pro"), 2000);
        assert_eq!(admitted("c", "platinum"), 100);
        assert_eq!(
            l.check_blocking("c", "platinum", 1).unwrap().plan.name(),
            "free"
        );
    }

    #[test]
    fn endpoint_costs_and_refill() {
        let (l, clock) = limiter_with(builder().endpoint_cost("/v1/reports", 10));
        assert_eq!(l.cost_of(Some("/v1/reports")), 10);
        assert_eq!(l.cost_of(Some("/v1/charges")), 1);
        assert_eq!(l.cost_of(None), 1);
        for _ in 0..10 {
            assert!(l.check_blocking("u", "free", 10).unwrap().decision.allowed);
        }
        let d = l.check_blocking("u", "free", 10).unwrap().decision;
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_millis(200)));
        clock.advance(Duration::from_millis(200));
        assert!(l.check_blocking("u", "free", 10).unwrap().decision.allowed);
    }

    #[test]
    fn descriptions() {
        let plans = Plan::examples();
        assert_eq!(
            plans[0].describe(),
            "plan free allows 50 requests per second"
        );
    }

    #[test]
    fn invalid_configuration_names_the_field() {
        let (_, clock) = limiter();
        let store = || MemoryStore::builder().clock(clock.clone()).build().unwrap();
        let e = builder().default_plan("gold").build(store()).unwrap_err();
        assert!(e.to_string().contains("default_plan"), "{e}");
        let e = RequestRateLimiter::builder().build(store()).unwrap_err();
        assert!(e.to_string().contains("plans"), "{e}");
        let e = builder().endpoint_cost("/x", 0).build(store()).unwrap_err();
        assert!(e.to_string().contains("endpoint_costs"), "{e}");
        let e = builder().namespace("a:b").build(store()).unwrap_err();
        assert!(e.to_string().contains("namespace"), "{e}");
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
