//! The service as the gRPC server's backend: Envoy's `ShouldRateLimit`, how its listener
//! serves (limits, TLS, health), and the Rate Limit Quota Service's sessions.

use std::sync::Arc;

use floodgate::Clock;

use super::Server;
use crate::config::ConnectionLimits;
use crate::connections::{CallGuard, ConnectionGate, Overloaded};
use crate::grpc::{GrpcServing, QuotaAction, QuotaBackend, QuotaRefused, RlsBackend};
use crate::metrics::Endpoint;
use crate::proto::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
use crate::rlqs::{Session, SessionError};
use crate::rls::{RlsRequest, RlsResponse, Undecided};

impl RlsBackend for Server {
    async fn should_rate_limit(&self, request: RlsRequest) -> Result<RlsResponse, Undecided> {
        Server::should_rate_limit(self, &request, Endpoint::Grpc).await
    }
}

impl GrpcServing for Server {
    fn tls(&self) -> Option<Arc<crate::connections::tls::TlsTerminator>> {
        self.edge.tls.grpc.clone()
    }

    fn connection_limits(&self) -> (ConnectionLimits, Option<Arc<ConnectionGate>>) {
        (self.edge.limits.clone(), Some(self.edge.gate.clone()))
    }

    fn enter_call(&self) -> Result<Option<CallGuard<'_>>, Overloaded> {
        self.edge.in_flight.enter().map(Some)
    }

    /// The server as a whole (the empty name) serves while it runs, as `/livez` says;
    /// `ratelimit` serves while the service is ready, as `/readyz` says (not while shutting
    /// down, while the store's breaker is open, nor while its last call failed).
    fn serving(&self, service: &str) -> Option<bool> {
        match service {
            "" => Some(self.is_ready()),
            crate::grpc::HEALTH_SERVICE => Some(self.readiness().0),
            _ => None,
        }
    }

    fn stopping(&self) -> bool {
        !self.is_ready()
    }
}

impl QuotaBackend for Server {
    fn quota_stream(&self) -> Result<Session, QuotaRefused> {
        let max = self.decisions.served.load().rlqs.max_streams;
        self.decisions
            .quotas
            .session(max)
            .ok_or(QuotaRefused::TooManyStreams)
    }

    async fn quota_report(
        &self,
        session: &mut Session,
        reports: RateLimitQuotaUsageReports,
    ) -> Result<Vec<QuotaAction>, SessionError> {
        let served = self.decisions.served.load_full();
        let now = self.decisions.clock.now();
        let actions = session
            .report(reports, &served.rules, &served.rlqs, now)
            .await?;
        self.decisions.quotas.counters().sent(&actions);
        Ok(actions)
    }

    async fn quota_tick(&self, session: &mut Session) -> Vec<QuotaAction> {
        let now = self.decisions.clock.now();
        let served = self.decisions.served.load_full();
        let ledger = self.decisions.quotas.ledger();
        ledger.expire_due(now, served.rlqs.unreported_after);
        let actions = session.tick(&served.rlqs, now).await;
        self.decisions.quotas.counters().sent(&actions);
        actions
    }

    async fn quota_close(&self, session: Session) {
        let served = self.decisions.served.load_full();
        session
            .close(&served.rlqs, self.decisions.clock.now())
            .await;
        self.decisions.quotas.counters().closed();
    }
}
