//! The running service: the current configuration (swapped atomically on reload), the stores
//! that outlive reloads, and the operations the HTTP and gRPC APIs expose.
//!
//! Stores are created once and kept across reloads, so the counters of limits that a reload
//! does not change carry on (a user's bucket keeps its level); the new parameters apply from
//! the next request. A reload that fails validation keeps the running configuration.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use floodgate::algorithm::spec::{AnyAlgorithm, AnyState};
use floodgate::algorithm::Algorithm;
use floodgate::limiter::utilization::WorkerGauge;
use floodgate::limiter::{LimiterKind, Mode, Priority};
use floodgate::pipeline::{Descriptor, Pipeline};
use floodgate::store::MemoryStore;
use floodgate::{Clock, CoarseClock, Decision, Op, StoreError, SystemClock};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::{Config, ConfigFileError};
use crate::descriptors::RuleSet;
use crate::metrics::{Endpoint, Live, Metrics, Outcome};
use crate::rls::json::{rls_request_from_json, rls_response_to_json, RlsJsonError};
use crate::rls::{Code, RlsRequest, RlsResponse, RlsStatus};

/// The embedded store every limiter of the service uses.
pub type Mem = MemoryStore<String, AnyState>;

/// The stores, one per kind of state, created once and kept across reloads.
#[derive(Debug)]
struct Stores {
    request_rate: Arc<Mem>,
    concurrency: Arc<Mem>,
    fleet: Arc<Mem>,
    named: Arc<Mem>,
    rls: Arc<Mem>,
}

/// One configuration, ready to serve: swapped whole on reload.
#[derive(Debug)]
pub struct Snapshot {
    pipeline: Pipeline<Arc<Mem>>,
    gauge: Option<Arc<WorkerGauge>>,
    users: HashMap<String, String>,
    default_plan: String,
    named: HashMap<String, AnyAlgorithm>,
    rules: RuleSet,
}

/// The body of `POST /v1/evaluate`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluateRequest {
    /// Who is asking.
    pub user: String,
    /// The user's plan; absent: the plan the config (or the admin API) gives the user.
    #[serde(default)]
    pub plan: Option<String>,
    /// `critical`, `post`, `get` (default) or `test`.
    #[serde(default)]
    pub priority: Option<String>,
    /// The request's cost; absent: its endpoint's cost, else 1.
    #[serde(default)]
    pub cost: Option<u64>,
    /// The endpoint, for per-endpoint costs.
    #[serde(default)]
    pub endpoint: Option<String>,
}

/// The answer of `POST /v1/evaluate`.
#[derive(Debug, Serialize)]
pub struct EvaluateAnswer {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// 200, 429 or 503: what the gateway should answer.
    pub status: u16,
    /// The limiter that refused, if any.
    pub limiter: Option<&'static str>,
    /// For people: what happened and what to do.
    pub message: Option<String>,
    /// The token to give back with `POST /v1/release` when the request ends (`null` when no
    /// lease was taken). Leases not returned expire after the limiter's `lease_ttl`.
    pub lease: Option<String>,
    /// Response header fields: `Retry-After`, `RateLimit-Policy`, `RateLimit`.
    pub headers: HashMap<&'static str, String>,
    /// Limiters in shadow mode that would have refused.
    pub shadow_refusals: Vec<&'static str>,
}

/// What the running configuration serves, for `GET /`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overview {
    /// The pipeline's configured limiters, in the order they run, with their current mode
    /// (which the admin API may have switched since the config was loaded).
    pub limiters: Vec<(LimiterKind, Mode)>,
    /// The named limits of `POST /v1/check`, sorted by name, each with its algorithm's name.
    pub limits: Vec<(String, &'static str)>,
    /// The Envoy RLS domains, sorted.
    pub domains: Vec<String>,
}

/// Why `POST /v1/evaluate` refused a request's fields (the body itself parsed).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvaluateError {
    /// `priority` is not one of the four classes.
    #[error("field `priority`: `{priority}` is not one of critical, post, get, test")]
    UnknownPriority {
        /// The priority as sent.
        priority: String,
    },
    /// `user` is empty.
    #[error("field `user`: must not be empty")]
    EmptyUser,
}

/// Why a lease token given to `POST /v1/release` is not one [`Server::evaluate`] hands out
/// (`<concurrency id>.<fleet id>.<user>`, ids in hex). The token is not repeated in the
/// message: it names a user and holds the right to give back their lease.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseTokenError {
    /// Fewer than three dot-separated parts.
    #[error(
        "field `lease`: not a lease token from /v1/evaluate (expected \
         `<concurrency id>.<fleet id>.<user>`)"
    )]
    Malformed,
    /// An id is not a hexadecimal number.
    #[error("field `lease`: the {limiter} lease id is not a hexadecimal number")]
    BadId {
        /// `concurrency` or `fleet`.
        limiter: &'static str,
    },
    /// Both ids are empty: the token names no lease.
    #[error("field `lease`: the token names no lease (both ids are empty)")]
    NoLease,
}

/// Why an admin call was refused (a failed reload is a [`ConfigFileError`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    /// No admin token is configured: the admin API is off.
    #[error("the admin API is disabled")]
    Disabled,
    /// The bearer token is missing or wrong.
    #[error("unauthorized")]
    Unauthorized,
    /// The request names a limiter that does not exist.
    #[error(
        "field `limiter`: `{limiter}` is not one of request_rate, concurrency, fleet, utilization"
    )]
    UnknownLimiter {
        /// The limiter as sent.
        limiter: String,
    },
    /// The request names a limiter the running config does not configure.
    #[error("field `limiter`: `{limiter}` is not configured")]
    LimiterNotConfigured {
        /// The limiter's name.
        limiter: &'static str,
    },
    /// The request names a mode that does not exist.
    #[error("field `mode`: `{mode}` is not one of enforce, shadow, off")]
    UnknownMode {
        /// The mode as sent.
        mode: String,
    },
    /// The request names a plan the running config does not have.
    #[error("field `plan`: no plan named `{plan}`")]
    UnknownPlan {
        /// The plan as sent.
        plan: String,
    },
    /// The request's `user` is empty.
    #[error("field `user`: must not be empty")]
    EmptyUser,
}

/// The running service. See the [module documentation](self).
#[derive(Debug)]
pub struct Server {
    snapshot: ArcSwap<Snapshot>,
    stores: Stores,
    /// Plans set through the admin API; they survive reloads.
    plan_overrides: ArcSwap<HashMap<String, String>>,
    config_path: Option<PathBuf>,
    admin_token: Option<String>,
    metrics: Metrics,
    ready: AtomicBool,
    clock: SystemClock,
}

impl Server {
    /// A service for `config`; `config_path` is re-read on reload (the built-in config when
    /// `None`); `admin_token` enables the admin API.
    pub fn new(
        config: Config,
        config_path: Option<PathBuf>,
        admin_token: Option<String>,
    ) -> Result<Server, ConfigFileError> {
        let max_keys = config.store.max_keys;
        let store = || -> Result<Arc<Mem>, ConfigFileError> {
            Ok(Arc::new(
                MemoryStore::builder()
                    .max_keys(max_keys)
                    .build()
                    .map_err(|e| ConfigFileError::invalid("store.max_keys", e.to_string()))?,
            ))
        };
        let stores = Stores {
            request_rate: store()?,
            concurrency: store()?,
            fleet: store()?,
            named: store()?,
            rls: store()?,
        };
        let snapshot = build_snapshot(&config, &stores)?;
        Ok(Server {
            snapshot: ArcSwap::from_pointee(snapshot),
            stores,
            plan_overrides: ArcSwap::from_pointee(HashMap::new()),
            config_path,
            admin_token,
            metrics: Metrics::default(),
            ready: AtomicBool::new(true),
            clock: SystemClock::new(),
        })
    }

    /// The service's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Whether the service takes traffic (false once shutdown has begun).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// Marks the service as draining: `/readyz` answers 503 from now on.
    pub fn set_not_ready(&self) {
        self.ready.store(false, Ordering::Relaxed);
    }

    /// `POST /v1/check`: one decision of the named limit on `key`. `Ok(None)` if no limit has
    /// that name.
    pub async fn check(
        &self,
        limiter: &str,
        key: &str,
        cost: u64,
    ) -> Result<Option<Decision>, StoreError> {
        let snapshot = self.snapshot.load();
        let Some(algorithm) = snapshot.named.get(limiter) else {
            return Ok(None);
        };
        // One store for all named limits: the key is prefixed with the limit's name.
        let mut full_key = String::with_capacity(limiter.len() + 1 + key.len());
        full_key.push_str(limiter);
        full_key.push('\u{1f}');
        full_key.push_str(key);
        let started = self.clock.now();
        let decision =
            self.stores
                .named
                .apply_now(algorithm, full_key.as_str(), Op::Check { cost });
        self.metrics
            .store_latency(self.clock.now().saturating_since(started));
        decision.map(Some)
    }

    /// `POST /v1/evaluate`: the pipeline for one request. Leases are kept for the caller, who
    /// returns them with [`Server::release`] and the returned token.
    pub async fn evaluate(
        &self,
        request: &EvaluateRequest,
    ) -> Result<EvaluateAnswer, EvaluateError> {
        let priority = match &request.priority {
            None => Priority::Get,
            Some(name) => {
                Priority::from_name(name).ok_or_else(|| EvaluateError::UnknownPriority {
                    priority: name.clone(),
                })?
            }
        };
        if request.user.is_empty() {
            return Err(EvaluateError::EmptyUser);
        }
        let snapshot = self.snapshot.load();
        let overrides = self.plan_overrides.load();
        let plan = request
            .plan
            .as_deref()
            .or_else(|| overrides.get(&request.user).map(String::as_str))
            .or_else(|| snapshot.users.get(&request.user).map(String::as_str))
            .unwrap_or(&snapshot.default_plan);
        let descriptor = Descriptor {
            user: &request.user,
            plan,
            priority,
            cost: request.cost,
            endpoint: request.endpoint.as_deref(),
        };
        // Calls being answered are the utilization shedder's busy workers.
        let _busy = snapshot.gauge.as_ref().map(WorkerGauge::enter);
        let started = self.clock.now();
        let verdict = snapshot.pipeline.evaluate(&descriptor).await;
        self.metrics
            .store_latency(self.clock.now().saturating_since(started));
        let outcome = match (&verdict.refusal, verdict.fail_opens.is_empty()) {
            (Some(_), _) => Outcome::Refused,
            (None, false) => Outcome::FailedOpen,
            (None, true) => Outcome::Allowed,
        };
        self.metrics.call(Endpoint::Evaluate, outcome);
        let headers = verdict.headers().into_iter().collect();
        let shadow_refusals = verdict.shadow_refusals.iter().map(|k| k.name()).collect();
        let (status, allowed) = (verdict.status(), verdict.allowed());
        let (limiter, message) = match &verdict.refusal {
            Some(r) => (Some(r.limiter.name()), Some(r.message.clone())),
            None => (None, None),
        };
        let lease = lease_token(verdict.leases);
        Ok(EvaluateAnswer {
            allowed,
            status,
            limiter,
            message,
            lease,
            headers,
            shadow_refusals,
        })
    }

    /// `POST /v1/release`: gives back the leases of a token from [`Server::evaluate`].
    /// `Ok(false)` if none was held (already released, or expired).
    pub async fn release(&self, token: &str) -> Result<bool, LeaseTokenError> {
        let leases = parse_lease_token(token)?;
        let snapshot = self.snapshot.load();
        let mut released = false;
        for (kind, key, id) in leases {
            match snapshot.pipeline.release(kind, &key, id).await {
                Ok(r) => released |= r,
                Err(e) => tracing::warn!(error = %e, "release failed; the lease will expire"),
            }
        }
        Ok(released)
    }

    /// `POST /json`: envoyproxy/ratelimit's JSON API. Returns whether the answer is over the
    /// limit (the HTTP status is then 429) and the JSON answer.
    pub async fn envoy_json(&self, body: &Value) -> Result<(bool, Value), RlsJsonError> {
        let request = rls_request_from_json(body)?;
        let response = self.should_rate_limit(&request, Endpoint::Json).await;
        Ok((
            response.overall_code == Code::OverLimit,
            rls_response_to_json(&response),
        ))
    }

    /// Envoy's `ShouldRateLimit`, over any transport; a store failure answers OK (fail open).
    pub async fn should_rate_limit(&self, request: &RlsRequest, endpoint: Endpoint) -> RlsResponse {
        let snapshot = self.snapshot.load();
        let started = self.clock.now();
        let result = snapshot
            .rules
            .should_rate_limit(&*self.stores.rls, request)
            .await;
        self.metrics
            .store_latency(self.clock.now().saturating_since(started));
        match result {
            Ok(response) => {
                let outcome = if response.overall_code == Code::OverLimit {
                    Outcome::Refused
                } else {
                    Outcome::Allowed
                };
                self.metrics.call(endpoint, outcome);
                self.metrics.shadow_over_limit(response.shadow_over_limit);
                response
            }
            Err(e) => {
                tracing::warn!(error = %e, "store failed; ShouldRateLimit fails open");
                self.metrics.call(endpoint, Outcome::FailedOpen);
                RlsResponse {
                    overall_code: Code::Ok,
                    statuses: request
                        .descriptors
                        .iter()
                        .map(|_| RlsStatus {
                            code: Code::Ok,
                            ..RlsStatus::default()
                        })
                        .collect(),
                    shadow_over_limit: 0,
                }
            }
        }
    }

    /// Checks an admin call's bearer token (constant-time comparison).
    pub fn authorize(&self, bearer: Option<&str>) -> Result<(), AdminError> {
        let Some(expected) = &self.admin_token else {
            return Err(AdminError::Disabled);
        };
        match bearer {
            Some(given) if constant_time_eq(given.as_bytes(), expected.as_bytes()) => Ok(()),
            _ => Err(AdminError::Unauthorized),
        }
    }

    /// Switches a limiter's mode now (until the next reload).
    pub fn set_mode(&self, limiter: &str, mode: &str) -> Result<(), AdminError> {
        let kind = LimiterKind::from_name(limiter).ok_or_else(|| AdminError::UnknownLimiter {
            limiter: limiter.to_string(),
        })?;
        let mode = Mode::from_name(mode).ok_or_else(|| AdminError::UnknownMode {
            mode: mode.to_string(),
        })?;
        if self.snapshot.load().pipeline.set_mode(kind, mode) {
            tracing::info!(limiter = kind.name(), mode = mode.name(), "mode switched");
            Ok(())
        } else {
            Err(AdminError::LimiterNotConfigured {
                limiter: kind.name(),
            })
        }
    }

    /// Puts `user` on `plan` (kept across reloads).
    pub fn set_plan(&self, user: &str, plan: &str) -> Result<(), AdminError> {
        let snapshot = self.snapshot.load();
        let known = snapshot
            .pipeline
            .request_rate()
            .is_some_and(|rr| rr.plans().any(|p| p.name() == plan));
        if !known {
            return Err(AdminError::UnknownPlan {
                plan: plan.to_string(),
            });
        }
        if user.is_empty() {
            return Err(AdminError::EmptyUser);
        }
        self.plan_overrides.rcu(|current| {
            let mut next = HashMap::clone(current);
            next.insert(user.to_string(), plan.to_string());
            next
        });
        Ok(())
    }

    /// Re-reads the config file (or the built-in config) and swaps it in; on any error the
    /// running config stays and the error is returned (and counted).
    pub fn reload(&self) -> Result<(), ConfigFileError> {
        let result = (|| {
            let config = match &self.config_path {
                Some(path) => Config::load(path)?,
                None => Config::builtin(),
            };
            build_snapshot(&config, &self.stores)
        })();
        match result {
            Ok(snapshot) => {
                self.snapshot.store(Arc::new(snapshot));
                self.metrics.reload(true);
                Ok(())
            }
            Err(e) => {
                self.metrics.reload(false);
                tracing::error!(error = %e, "reload refused; keeping the running config");
                Err(e)
            }
        }
    }

    /// The running configuration's limiters, named limits and domains.
    pub fn overview(&self) -> Overview {
        let snapshot = self.snapshot.load();
        let limiters = LimiterKind::ALL
            .into_iter()
            .filter_map(|kind| snapshot.pipeline.mode(kind).map(|mode| (kind, mode)))
            .collect();
        let mut limits: Vec<(String, &'static str)> = snapshot
            .named
            .iter()
            .map(|(name, algorithm)| (name.clone(), algorithm.name()))
            .collect();
        limits.sort();
        let mut domains: Vec<String> = snapshot.rules.domains().map(str::to_string).collect();
        domains.sort();
        Overview {
            limiters,
            limits,
            domains,
        }
    }

    /// The Prometheus text for `GET /metrics`.
    pub fn render_metrics(&self) -> String {
        let snapshot = self.snapshot.load();
        let pipeline = &snapshot.pipeline;
        let modes = LimiterKind::ALL.map(|k| pipeline.mode(k).map_or("none", Mode::name));
        let fleet_in_flight = pipeline.fleet().map_or(0, |f| {
            f.store()
                .apply_now(
                    f.algorithm(),
                    floodgate::limiter::fleet::FLEET_KEY,
                    Op::Check { cost: 0 },
                )
                .map_or(0, |d| d.limit.saturating_sub(d.remaining))
        });
        let shedder = pipeline.utilization();
        let live = Live {
            stats: pipeline.stats(),
            modes,
            fleet_in_flight,
            busy_workers: snapshot.gauge.as_ref().map_or(0, |g| g.busy()),
            shed_amount: shedder.map_or(0.0, |s| s.shed_amount()),
            drop_probability: [
                Priority::Test,
                Priority::Get,
                Priority::Post,
                Priority::Critical,
            ]
            .into_iter()
            .map(|p| {
                (
                    p,
                    shedder.map_or(0.0, |s| s.controller().drop_probability(p)),
                )
            })
            .collect(),
        };
        self.metrics.render(&live)
    }
}

/// Builds a config into a snapshot over the service's long-lived stores.
fn build_snapshot(config: &Config, stores: &Stores) -> Result<Snapshot, ConfigFileError> {
    let built = config.build_pipeline(
        |kind| match kind {
            LimiterKind::Concurrency => stores.concurrency.clone(),
            LimiterKind::Fleet => stores.fleet.clone(),
            LimiterKind::RequestRate | LimiterKind::Utilization => stores.request_rate.clone(),
        },
        Arc::new(CoarseClock::shared()),
    )?;
    Ok(Snapshot {
        pipeline: built.pipeline,
        gauge: built.workers,
        users: config.users.clone().into_iter().collect(),
        default_plan: config.default_plan.clone().unwrap_or_default(),
        named: config.named_limits()?.into_iter().collect(),
        rules: config.rule_set()?,
    })
}

impl crate::grpc::RlsBackend for Server {
    async fn should_rate_limit(&self, request: RlsRequest) -> RlsResponse {
        Server::should_rate_limit(self, &request, Endpoint::Grpc).await
    }
}

/// A lease token: `<concurrency id hex>.<fleet id hex>.<user>`, either id empty when that
/// limiter took no lease. The user comes last, so it may contain dots.
fn lease_token(leases: Vec<floodgate::limiter::Lease>) -> Option<String> {
    if leases.is_empty() {
        return None;
    }
    let (mut concurrency, mut fleet, mut user) = (String::new(), String::new(), String::new());
    for lease in leases {
        let key = lease.key().to_string();
        let id = lease.keep();
        if key == floodgate::limiter::fleet::FLEET_KEY && fleet.is_empty() {
            fleet = format!("{id:x}");
        } else {
            concurrency = format!("{id:x}");
            user = key;
        }
    }
    Some(format!("{concurrency}.{fleet}.{user}"))
}

/// The leases of a token from [`lease_token`]: `(limiter, key, id)`.
fn parse_lease_token(token: &str) -> Result<Vec<(LimiterKind, String, u64)>, LeaseTokenError> {
    let mut parts = token.splitn(3, '.');
    let (Some(c), Some(f), Some(user)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(LeaseTokenError::Malformed);
    };
    let id = |hex: &str, limiter: &'static str| {
        u64::from_str_radix(hex, 16).map_err(|_| LeaseTokenError::BadId { limiter })
    };
    let mut leases = Vec::new();
    if !c.is_empty() {
        leases.push((
            LimiterKind::Concurrency,
            user.to_string(),
            id(c, "concurrency")?,
        ));
    }
    if !f.is_empty() {
        leases.push((
            LimiterKind::Fleet,
            floodgate::limiter::fleet::FLEET_KEY.to_string(),
            id(f, "fleet")?,
        ));
    }
    if leases.is_empty() {
        return Err(LeaseTokenError::NoLease);
    }
    Ok(leases)
}

/// Compares secrets without an early exit on the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_tokens_round_trip_and_reject_garbage() {
        let parsed = parse_lease_token("ff.a.user.with.dots").unwrap();
        assert_eq!(
            parsed,
            [
                (LimiterKind::Concurrency, "user.with.dots".to_string(), 255),
                (LimiterKind::Fleet, "fleet".to_string(), 10)
            ]
        );
        assert_eq!(parse_lease_token("nope"), Err(LeaseTokenError::Malformed));
        assert_eq!(parse_lease_token("..u"), Err(LeaseTokenError::NoLease));
        assert_eq!(
            parse_lease_token("zz..u"),
            Err(LeaseTokenError::BadId {
                limiter: "concurrency"
            })
        );
        assert_eq!(
            parse_lease_token("1.-1.u"),
            Err(LeaseTokenError::BadId { limiter: "fleet" })
        );
    }

    #[test]
    fn secrets_compare_exactly() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        assert!(!constant_time_eq(b"s3cret", b"s3creT"));
        assert!(!constant_time_eq(b"s3cret", b"s3cre"));
    }
}
