//! What the service shows of itself: the overview of its configuration, the live figures
//! `/metrics` and the dashboard read, and the dashboard's JSON.

use floodgate::algorithm::Algorithm;
use floodgate::Clock;
use serde_json::Value;

use super::Server;
use crate::dashboard::{self, Overview};
use crate::metrics::{Live, StoreLive};
use crate::prometheus::{Exposition, Kind};

impl Server {
    /// The running configuration's limiters, named limits and domains.
    pub fn overview(&self) -> Overview {
        let served = self.decisions.served.load();
        let limiters = served
            .pipeline
            .stages()
            .map(|s| (s.name().to_string(), s.limiter().kind(), s.current_mode()))
            .collect();
        let limits: Vec<(String, &'static str)> = served
            .limits
            .iter()
            .map(|(name, limit)| (name.clone(), limit.algorithm().name()))
            .collect();
        let mut domains: Vec<String> = served.rules.domains().map(str::to_string).collect();
        domains.sort();
        let switched = self
            .switches()
            .modes
            .iter()
            .map(|(stage, switch)| (stage.clone(), switch.configured))
            .collect();
        let scopes = served
            .pipeline
            .stages()
            .filter_map(|s| Some((s.name().to_string(), s.describe_scope()?)))
            .collect();
        Overview {
            limiters,
            limits,
            domains,
            switched,
            scopes,
        }
    }

    /// What `/metrics` and the dashboard read at a given moment: every stage's snapshot, the
    /// busy workers, the store's counters and breaker.
    pub async fn live(&self) -> Live {
        let served = self.decisions.served.load_full();
        Live {
            stages: served.pipeline.snapshot().await,
            busy_workers: served.workers.as_ref().map_or(0, |g| g.busy()),
            store: Some(StoreLive {
                memory: self.decisions.store.memory_stats(),
                batches: self.decisions.store.redis().map(|r| r.batch_stats()),
                redirects: self
                    .decisions
                    .store
                    .redis()
                    .filter(|_| self.decisions.store.kind() == "redis-cluster")
                    .map(|r| r.redirect_stats()),
                nodes: self
                    .decisions
                    .store
                    .redis()
                    .map(|r| r.node_breakers())
                    .unwrap_or_default(),
                ..StoreLive::read(
                    self.decisions.store.health(),
                    self.decisions.store.breaker_state(),
                )
            }),
            configured_modes: served.configured_modes.clone(),
            rlqs: self.decisions.quotas.view(),
        }
    }

    /// The running configuration's Envoy rules as the debug listener's `/rlconfig` lists them
    /// ([`crate::descriptors::RuleSet::listing`]); a configuration pushed over xDS first says
    /// which version it is, in a line of its own (`# xDS version v7`).
    pub fn rlconfig(&self) -> String {
        let listing = self.decisions.served.load().rules.listing();
        match self.xds_version() {
            Some(version) => format!("# xDS version {version}\n{listing}"),
            None => listing,
        }
    }

    /// The version of the configuration served, when it is pushed over xDS and one has been
    /// accepted.
    pub fn xds_version(&self) -> Option<String> {
        match &self.control.config_source {
            crate::config::ConfigSource::Xds(source) => source.version(),
            _ => None,
        }
    }

    /// The Prometheus text for `GET /metrics`, from the pipeline's snapshot.
    pub async fn render_metrics(&self) -> String {
        let live = self.live().await;
        let mut text = self.observed.metrics.render(&live);
        self.decisions.store.write_cached_metrics(&mut text);
        self.observed.descriptor_stats.render(&mut text);
        live.rlqs.write(&mut Exposition::on(&mut text));
        if self.observed.response_times.is_some() {
            self.observed.statsd_pushes.render(&mut text);
        }
        if let Some(xds) = &self.observed.xds {
            xds.write(
                &mut Exposition::on(&mut text),
                self.xds_version().as_deref(),
            );
        }
        let terminators: Vec<&crate::connections::tls::TlsTerminator> =
            [&self.edge.tls.grpc, &self.edge.tls.http]
                .into_iter()
                .flatten()
                .map(|t| &**t)
                .collect();
        crate::connections::tls::render(&terminators, &mut text);
        let mut page = Exposition::on(&mut text);
        page.family(
            "floodgate_ready",
            Kind::Gauge,
            "Whether /readyz answers 200 (1) or 503 (0): not shutting down, a configuration loaded, and the store's last call succeeded.",
        )
        .sample(&[], u64::from(self.readiness().0));
        page.family(
            "floodgate_calls_in_flight",
            Kind::Gauge,
            "Decisions being answered now (at most connections.max_in_flight).",
        )
        .sample(&[], self.edge.in_flight.now());
        page.family(
            "floodgate_overload_shed_total",
            Kind::Counter,
            "Decision calls shed because connections.max_in_flight were being answered.",
        )
        .sample(&[], self.edge.in_flight.shed());
        text
    }

    /// Takes the dashboard's next point if one is due (see `crate::dashboard`); `serve`
    /// calls it every `dashboard::INTERVAL` (one second).
    pub async fn sample_dashboard(&self) {
        if self.observed.dashboard.due(self.decisions.clock.now()) {
            let live = self.live().await;
            self.observed
                .dashboard
                .record(&live, self.decisions.clock.now());
        }
        // (`record` takes no second point if a page's request took one meanwhile.)
    }

    /// `GET /v1/dashboard`: the stages, the store, the points after `since`, and the heaviest
    /// keys, in full only for a caller with the admin token (`bearer`).
    pub async fn dashboard(&self, since: Option<u64>, bearer: Option<&str>) -> Value {
        let live = self.live().await;
        let now = self.decisions.clock.now();
        if self.observed.dashboard.due(now) {
            self.observed.dashboard.record(&live, now);
        }
        let plain = self.authorize(bearer).is_ok();
        let (keys, counted) = self.observed.dashboard.heavy_keys(plain);
        let plan_overrides = self.plan_overrides();
        let overview = self.overview();
        serde_json::json!({
            "version": crate::VERSION,
            "instance": self.observed.dashboard.instance(),
            "now": now.as_secs_f64(),
            "interval_seconds": dashboard::INTERVAL.as_secs_f64(),
            "history_points": dashboard::HISTORY,
            "admin": self.control.admin_token.is_some(),
            "authorized": plain,
            "stages": live.stages.iter().map(|stage| {
                let mut value = dashboard::stage_json(stage);
                // The mode the configuration gives it: the page marks a stage switched away.
                let configured = live.configured_modes.get(stage.stats.name.as_str());
                if let Some(mode) = configured {
                    value["configured_mode"] = mode.name().into();
                }
                value
            }).collect::<Vec<_>>(),
            "busy_workers": live.busy_workers,
            "rlqs": live.rlqs,
            "store": dashboard::store_json(&self.decisions.store.status(), live.store.as_ref()),
            "points": self.observed.dashboard.points_after(since),
            "heavy_keys": {
                "counted": self.observed.dashboard.counts_keys(),
                "plain": plain,
                "window_seconds": dashboard::KEYS_WINDOW.as_secs_f64() * 2.0,
                "requests": counted,
                "keys": keys.iter().map(|c| serde_json::json!({
                    "key": c.key,
                    "count": c.count,
                    "error": c.error,
                })).collect::<Vec<_>>(),
            },
            "limits": overview.limits.iter().map(|(name, algorithm)| {
                serde_json::json!({"name": name, "algorithm": algorithm})
            }).collect::<Vec<_>>(),
            "domains": overview.domains,
            // Users put on a plan at run time: how many, and who only with the admin token.
            "plan_overrides": {
                "count": plan_overrides.len(),
                "users": plain.then(|| plan_overrides.iter().map(|(user, switch)| serde_json::json!({
                    "user": user,
                    "plan": switch.plan,
                    "configured": switch.configured,
                })).collect::<Vec<_>>()),
            },
        })
    }
}
