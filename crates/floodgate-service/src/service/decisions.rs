//! The decisions the APIs ask the service for: one named limit's check (`POST /v1/check`) and
//! Envoy's `ShouldRateLimit`, over gRPC and envoyproxy/ratelimit's JSON (`POST /json`), each
//! with its metrics, traces and failure policy.

use floodgate::{Clock, Decision, StoreError};
use serde_json::Value;

use super::Server;
use crate::dashboard::heavy_keys::MAX_KEY_BYTES;
use crate::descriptors::keys::push_dashboard_key;
use crate::metrics::{Endpoint, Outcome};
use crate::rls::headers::rate_limit_headers;
use crate::rls::json::{rls_request_from_json, rls_response_to_json, RlsJsonError};
use crate::rls::{Code, RlsRequest, RlsResponse, RlsStatus, StoreFailureAnswer, Undecided};
use crate::served::Served;
use crate::store::ServiceStore;
impl Server {
    /// `POST /v1/check`: one decision of the named limit on `key`. `Ok(None)` if no limit has
    /// that name.
    pub async fn check(
        &self,
        limiter: &str,
        key: &str,
        cost: u64,
    ) -> Result<Option<Decision>, StoreError> {
        let served = self.decisions.served.load();
        let Some(limit) = served.limits.get(limiter) else {
            return Ok(None);
        };
        self.observed.dashboard.count_key(|k| {
            k.push_str("limit ");
            k.push_str(limiter);
            k.push_str(": ");
            k.push_str(key);
        });
        let started = self.decisions.clock.now();
        let decision = limit.check(key, cost).await;
        self.observed
            .metrics
            .store_latency(self.decisions.clock.now().saturating_since(started));
        match &decision {
            Ok(d) => tracing::debug!(
                target: "floodgate::decision",
                limit = limiter,
                key,
                hits = cost,
                allowed = d.allowed,
                remaining = d.remaining,
                limit_of = d.limit,
                "limit decided"
            ),
            Err(error) => tracing::debug!(
                target: "floodgate::decision",
                limit = limiter,
                key,
                hits = cost,
                %error,
                "limit failed"
            ),
        }
        decision.map(Some)
    }

    /// `POST /json`: envoyproxy/ratelimit's JSON API. Returns whether the answer is over the
    /// limit (the HTTP status is then 429) and the JSON answer; a call the store left
    /// [`Undecided`] (`rls.on_store_error: unavailable`) is answered 503 by the caller.
    pub async fn envoy_json(
        &self,
        body: &Value,
    ) -> Result<Result<(bool, Value), Undecided>, RlsJsonError> {
        let request = rls_request_from_json(body)?;
        Ok(self
            .should_rate_limit(&request, Endpoint::Json)
            .await
            .map(|response| {
                (
                    response.overall_code == Code::OverLimit,
                    rls_response_to_json(&response),
                )
            }))
    }

    /// Envoy's `ShouldRateLimit`, over any transport. When the running config turns them on,
    /// the answer carries the rate limit headers ([`crate::rls::headers`]), their reset computed
    /// with the service's clock. A store failure answers as `rls.on_store_error` says: every
    /// descriptor `OK` (the default), every descriptor `OVER_LIMIT`, or no answer
    /// ([`Undecided`]).
    pub async fn should_rate_limit(
        &self,
        request: &RlsRequest,
        endpoint: Endpoint,
    ) -> Result<RlsResponse, Undecided> {
        for descriptor in &request.descriptors {
            self.observed
                .dashboard
                .count_key(|k| push_dashboard_key(k, &request.domain, descriptor, MAX_KEY_BYTES));
        }
        let served = self.decisions.served.load();
        let store = &self.decisions.store;
        let matched = served.rules.matched(request);
        if let Some(why) = matched.refund_refused(|algorithm| store.takes_refunds(algorithm)) {
            self.observed.metrics.call(endpoint, Outcome::Invalid);
            return Err(Undecided::Invalid(why));
        }
        let started = self.decisions.clock.now();
        let stats = Some(&*self.observed.descriptor_stats);
        let result = crate::traces::within(
            || crate::traces::store_call(store.kind()),
            || matched.decide(store, stats),
            |span, result| {
                if let Err(e) = result {
                    crate::traces::store_failed(span, e);
                }
            },
        )
        .await;
        let took = self.decisions.clock.now().saturating_since(started);
        let answered = self.settle_rls(result, request, endpoint, &served, took);
        crate::traces::record_rls(
            &request.domain,
            request.descriptors.len(),
            match &answered {
                Ok(response) if response.overall_code == Code::OverLimit => "OVER_LIMIT",
                Ok(_) => "OK",
                Err(_) => "UNAVAILABLE",
            },
        );
        answered
    }

    /// The answer to an Envoy call the store decided (headers, global shadow mode) or failed
    /// (as `rls.on_store_error` says), with its times and outcome counted; `took`: the
    /// store's part.
    fn settle_rls(
        &self,
        result: Result<RlsResponse, StoreError>,
        request: &RlsRequest,
        endpoint: Endpoint,
        served: &Served<ServiceStore>,
        took: std::time::Duration,
    ) -> Result<RlsResponse, Undecided> {
        self.observed.metrics.store_latency(took);
        if let Some(times) = self
            .observed
            .response_times
            .as_ref()
            .filter(|_| endpoint == Endpoint::Grpc)
        {
            times.record(took);
        }
        match result {
            Ok(mut response) => {
                if let Some(names) = &served.response_headers {
                    response.response_headers_to_add =
                        rate_limit_headers(&response.statuses, names, self.decisions.clock.now());
                }
                // Global shadow mode, after the headers (as upstream): the answer goes
                // through, each status still saying what the limit decided.
                if served.rls_shadow_mode && response.overall_code == Code::OverLimit {
                    response.overall_code = Code::Ok;
                    self.observed.metrics.global_shadow_mode();
                }
                let outcome = if response.overall_code == Code::OverLimit {
                    Outcome::Refused
                } else {
                    Outcome::Allowed
                };
                self.observed.metrics.call(endpoint, outcome);
                self.observed
                    .metrics
                    .shadow_over_limit(response.shadow_over_limit);
                Ok(response)
            }
            Err(e) => {
                // The store logs its failures, at a bounded rate (`store::health`).
                let policy = served.rls_on_store_error;
                tracing::debug!(error = %e, on_store_error = policy.name(), "store failed on ShouldRateLimit");
                let code = match policy {
                    StoreFailureAnswer::Ok => Code::Ok,
                    StoreFailureAnswer::OverLimit => Code::OverLimit,
                    StoreFailureAnswer::Unavailable => {
                        self.observed.metrics.call(endpoint, Outcome::Unavailable);
                        return Err(Undecided::Unavailable(e.to_string()));
                    }
                };
                let outcome = match code {
                    Code::Ok => Outcome::FailedOpen,
                    _ => Outcome::FailedClosed,
                };
                self.observed.metrics.call(endpoint, outcome);
                Ok(RlsResponse {
                    overall_code: code,
                    statuses: request
                        .descriptors
                        .iter()
                        .map(|_| RlsStatus {
                            code,
                            ..RlsStatus::default()
                        })
                        .collect(),
                    shadow_over_limit: 0,
                    dynamic_metadata: None,
                    // No status reports a limit: no rate limit headers.
                    response_headers_to_add: Vec::new(),
                })
            }
        }
    }
}
