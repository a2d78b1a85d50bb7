//! The pipeline's calls: `POST /v1/evaluate` (one request through the stages, its leases
//! kept for the caller in a signed token) and `POST /v1/release` (the leases given back), with
//! the errors that make either a 400.

use std::collections::HashMap;

use floodgate::limiter::Priority;
use floodgate::pipeline::{Limiter, PipelineReservation, ReleaseError, Request};
use floodgate::store::Namespace;
use floodgate::Clock;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{attributes, Server};
use crate::lease_token::TokenError;
use crate::metrics::{Endpoint, Outcome};
use crate::served::Served;
use crate::store::ServiceStore;

/// The body of `POST /v1/evaluate`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluateRequest {
    /// Who is asking.
    pub user: String,
    /// The user's plan, as the caller knows it. The admin API's plan for the user comes first,
    /// then the config's `users:`, then this, then the config's `default_plan`. A plan the
    /// config does not have is refused.
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
    /// The request's other attributes, for the stages of a configured `pipeline` (their keys,
    /// `when` conditions, costs and plans): names of 1 to 64 ASCII letters, digits and
    /// `_ - .`; values strings, numbers or booleans of at most `attributes.max_value_bytes`;
    /// at most `attributes.max_count` of them. Attributes named in `attributes.secret` are
    /// digested before any stage sees them.
    #[serde(default)]
    pub attributes: std::collections::BTreeMap<String, Value>,
}

/// The answer of `POST /v1/evaluate`.
#[derive(Debug, Serialize)]
pub struct EvaluateAnswer {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// 200, 429 or 503: what the gateway should answer.
    pub status: u16,
    /// The stage (limiter) that refused, if any.
    pub limiter: Option<String>,
    /// For people: what happened and what to do.
    pub message: Option<String>,
    /// The token to give back with `POST /v1/release` when the request ends (`null` when no
    /// lease was taken). Leases not returned expire after the limiter's `lease_ttl`.
    pub lease: Option<String>,
    /// Response header fields: `Retry-After`, `RateLimit-Policy`, `RateLimit`.
    pub headers: HashMap<&'static str, String>,
    /// Stages in shadow mode that would have refused.
    pub shadow_refusals: Vec<String>,
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
    /// `user` or `endpoint` is longer than `connections.max_key_bytes`.
    #[error("{0}")]
    TooLong(#[from] super::TooLong),
    /// `plan` names a plan the running configuration does not have.
    #[error("field `plan`: `{plan}` is not a configured plan ({configured})")]
    UnknownPlan {
        /// The plan as sent.
        plan: String,
        /// The configured plans, for the message.
        configured: String,
    },
    /// An attribute is malformed or out of the configured bounds.
    #[error("field `attributes{}`: {problem}", name.as_ref().map(|n| format!(".{n}")).unwrap_or_default())]
    Attribute {
        /// The attribute, when its name is a valid one.
        name: Option<String>,
        /// What is wrong (never the value).
        problem: String,
    },
    /// A stage that applies to the request needs a field the request lacks.
    #[error("{0}")]
    MissingField(#[from] floodgate::pipeline::MissingField),
}

/// Why `POST /v1/release` refused a lease token. The token is never repeated in a message: it
/// holds the right to give back someone's lease.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseTokenError {
    /// Not a token this service issued, or one that was altered ([`TokenError`]).
    #[error("field `lease`: {0}")]
    Token(#[from] TokenError),
    /// A genuine token naming a stage the running configuration no longer has (removed by a
    /// reload); its leases expire after their TTL.
    #[error("field `lease`: the token's limiter `{0}` is not configured any more; its leases expire after their lease_ttl")]
    UnknownLimiter(Namespace),
}

impl Server {
    /// `POST /v1/evaluate`: the pipeline for one request. Leases are kept for the caller, who
    /// returns them with [`Server::release`] and the returned token.
    pub async fn evaluate(
        &self,
        request: &EvaluateRequest,
    ) -> Result<EvaluateAnswer, EvaluateError> {
        let (answer, _) = self.run_pipeline(request, None).await?;
        Ok(answer)
    }

    /// The pipeline for one request: [`Server::evaluate`], or with an `estimate`, a
    /// reservation of it ([`floodgate::pipeline::Pipeline::reserve`]) for
    /// [`Server::reserve_through_pipeline`].
    pub(super) async fn run_pipeline(
        &self,
        request: &EvaluateRequest,
        estimate: Option<u64>,
    ) -> Result<(EvaluateAnswer, Option<PipelineReservation>), EvaluateError> {
        let priority = self.checked(request)?;
        let served = self.decisions.served.load();
        if let Some(plan) = &request.plan {
            if !has_plan(&served, plan) {
                return Err(EvaluateError::UnknownPlan {
                    plan: plan.clone(),
                    configured: plan_list(&served),
                });
            }
        }
        // The operator's switch, then the configuration's users, then what the caller says.
        let overrides = self.decisions.plan_overrides.load();
        let plan = overrides
            .get(&request.user)
            .or_else(|| served.users.get(&request.user))
            .map(String::as_str)
            .or(request.plan.as_deref())
            .unwrap_or(&served.default_plan);
        let attributes = attributes::read(&request.attributes, &served.attributes)?;
        let attributes = floodgate::pipeline::scope::borrowed(&attributes);
        let asked = Request {
            user: &request.user,
            plan,
            priority,
            cost: request.cost,
            endpoint: request.endpoint.as_deref(),
            attributes: &attributes,
        };
        if let Some(missing) = served.pipeline.missing_field(&asked) {
            return Err(missing.into());
        }
        self.observed.dashboard.count_key(|k| {
            k.push_str("user ");
            k.push_str(&request.user);
        });
        let started = self.decisions.clock.now();
        let pipeline = &served.pipeline;
        let (verdict, reservation) = crate::traces::within(
            || crate::traces::store_call(self.decisions.store.kind()),
            || async {
                match estimate {
                    None => (pipeline.evaluate(&asked).await, None),
                    Some(estimate) => pipeline.reserve(&asked, estimate).await,
                }
            },
            |span, (verdict, _)| {
                if !verdict.fail_opens.is_empty() {
                    let failed = format!("{} stage(s) failed open", verdict.fail_opens.len());
                    crate::traces::store_failed(span, &failed);
                }
            },
        )
        .await;
        self.observed
            .metrics
            .store_latency(self.decisions.clock.now().saturating_since(started));
        let outcome = match (&verdict.refusal, verdict.fail_opens.is_empty()) {
            (Some(_), _) => Outcome::Refused,
            (None, false) => Outcome::FailedOpen,
            (None, true) => Outcome::Allowed,
        };
        let endpoint = estimate.map_or(Endpoint::Evaluate, |_| Endpoint::Reserve);
        self.observed.metrics.call(endpoint, outcome);
        Ok((self.answer(verdict).await, reservation))
    }

    /// The request's priority, once its fields are checked: a known priority, a user, and
    /// no field longer than `connections.max_key_bytes`.
    fn checked(&self, request: &EvaluateRequest) -> Result<Priority, EvaluateError> {
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
        self.bounded("user", &request.user)?;
        if let Some(endpoint) = &request.endpoint {
            self.bounded("endpoint", endpoint)?;
        }
        Ok(priority)
    }

    /// What `/v1/evaluate` answers for `verdict`: its leases kept and issued as one token.
    async fn answer(&self, verdict: floodgate::pipeline::Verdict) -> EvaluateAnswer {
        let headers = verdict.headers().into_iter().collect();
        let shadow_refusals = verdict
            .shadow_refusals
            .iter()
            .map(|s| s.as_str().to_string())
            .collect();
        let (status, allowed) = (verdict.status(), verdict.allowed());
        let (limiter, message) = match &verdict.refusal {
            Some(r) => (Some(r.stage.as_str().to_string()), Some(r.message.clone())),
            None => (None, None),
        };
        let kept: Vec<_> = verdict.leases.into_iter().map(|l| l.keep()).collect();
        if !kept.is_empty() {
            self.lease_secret_before_issuing().await;
        }
        let lease = self.decisions.leases.tokens().issue(&kept);
        EvaluateAnswer {
            allowed,
            status,
            limiter,
            message,
            lease,
            headers,
            shadow_refusals,
        }
    }

    /// `POST /v1/release`: gives back the leases of a token from [`Server::evaluate`].
    /// `Ok(false)` if none was held (already released, or expired). A token that was altered,
    /// forged or issued under another secret is refused, and so is one naming a stage the
    /// running configuration does not have; nothing is released then.
    pub async fn release(&self, token: &str) -> Result<bool, ReleaseTokenError> {
        self.release_after(token, None).await
    }

    /// [`Server::release`], reporting that the request took `latency` (`None`: the time since
    /// its evaluation), the sample adaptive concurrency stages learn from.
    pub async fn release_after(
        &self,
        token: &str,
        latency: Option<std::time::Duration>,
    ) -> Result<bool, ReleaseTokenError> {
        let leases = self.open_token(token).await?;
        let served = self.decisions.served.load();
        if let Some(gone) = leases
            .iter()
            .find(|l| served.pipeline.stage(l.limiter().as_str()).is_none())
        {
            return Err(ReleaseTokenError::UnknownLimiter(gone.limiter().clone()));
        }
        let mut released = false;
        for lease in &leases {
            match served.pipeline.release_after(lease, latency).await {
                Ok(r) => released |= r,
                Err(ReleaseError::Store(e)) => {
                    // The store logs its failures, at a bounded rate (`store::health`).
                    tracing::debug!(error = %e, "release failed; the lease will expire");
                }
                // A stage that takes no leases: the token cannot be one we issued for it.
                Err(_) => return Err(ReleaseTokenError::UnknownLimiter(lease.limiter().clone())),
            }
        }
        Ok(released)
    }
}

/// Whether the running configuration has a plan named `plan` (its request rate stage's).
pub(super) fn has_plan(served: &Served<ServiceStore>, plan: &str) -> bool {
    plans(served).any(|p| p == plan)
}

/// The configured plans' names.
fn plans(served: &Served<ServiceStore>) -> impl Iterator<Item = &str> {
    served
        .pipeline
        .stages()
        .filter_map(|stage| match stage.limiter() {
            Limiter::RequestRate(rr) => Some(rr.plans().filter(|p| !p.is_limit())),
            _ => None,
        })
        .flatten()
        .map(|p| p.name())
}

/// The configured plans, for a message: `plans are free, pro` or `there are no plans`.
pub(super) fn plan_list(served: &Served<ServiceStore>) -> String {
    let mut names: Vec<&str> = plans(served).collect();
    names.sort_unstable();
    if names.is_empty() {
        "there are no plans".to_string()
    } else {
        format!("plans are {}", names.join(", "))
    }
}
