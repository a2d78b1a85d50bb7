//! The running service: the current configuration (swapped atomically on reload), the stores
//! that outlive reloads, and the operations the HTTP and gRPC APIs expose.
//!
//! Stores are created once and kept across reloads, so the counters of limits that a reload
//! does not change carry on (a user's bucket keeps its level); the new parameters apply from
//! the next request. A reload that fails validation keeps the running configuration.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use floodgate::{CoarseClock, SystemClock};
use serde_json::Value;

use crate::config::ConnectionLimits;
use crate::config::{Config, ConfigFileError, ConfigSource, Overrides};
use crate::connections::{CallGuard, ConnectionGate, InFlight, Overloaded};
use crate::dashboard::{Dashboard, DEFAULT_HEAVY_KEYS};
use crate::metrics::Metrics;
use crate::served::Served;

pub use crate::store::Mem;
use crate::store::ServiceStore;

mod admin;
mod attributes;
mod backend;
mod decisions;
mod evaluate;
mod leases;
mod observe;
pub mod reload;
pub mod reservations;
pub mod switches;
pub use admin::AdminError;
use evaluate::{has_plan, plan_list};
pub use evaluate::{EvaluateAnswer, EvaluateError, EvaluateRequest, ReleaseTokenError};
pub use reload::{ReloadReport, Trigger};
use switches::Switches;

/// A field of a request that becomes part of a store key (`user`, `key`, `endpoint`) is
/// longer than `connections.max_key_bytes`: refused before anything is counted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {bytes} bytes, more than the {max} connections.max_key_bytes allows")]
pub struct TooLong {
    /// The field.
    pub field: &'static str,
    /// Its length in bytes.
    pub bytes: usize,
    /// The bound.
    pub max: usize,
}

/// The running service. See the [module documentation](self). Its state is grouped by what
/// uses it, so that each file of `impl Server` names the part it reads.
#[derive(Debug)]
pub struct Server {
    /// What decisions are made with.
    decisions: Decisions,
    /// How the configuration is loaded and changed at run time.
    control: Control,
    /// What the service shows of itself: metrics, the dashboard, readiness.
    observed: Observed,
    /// What the listeners are held to: connection limits, TLS, which surface they serve.
    edge: Edge,
}

/// What decisions are made with.
#[derive(Debug)]
struct Decisions {
    served: ArcSwap<Served<ServiceStore>>,
    /// The one store, created once and kept across reloads: every stage, named limit and Envoy
    /// rule keeps its keys in its own namespace of it.
    store: ServiceStore,
    /// The plans of [`Control::switches`], by user: what each decision reads, without a lock.
    plan_overrides: ArcSwap<HashMap<String, String>>,
    /// How lease tokens are signed ([`leases`]).
    leases: leases::Signing,
    /// The Rate Limit Quota Service's streams and the claims they share.
    quotas: crate::rlqs::Quotas,
    clock: SystemClock,
}

/// How the configuration is loaded and changed at run time.
#[derive(Debug)]
struct Control {
    /// The operator's switches (modes and plans set through the admin API), which outlive
    /// reloads that leave their settings alone ([`switches`]). The lock also keeps admin calls
    /// and reloads from interleaving.
    switches: Mutex<Switches>,
    config_source: ConfigSource,
    /// The file as read at start-up and by the last load, for what a reload reports.
    loaded: Mutex<reload::Loaded>,
    /// What the command line turns on over every config loaded.
    overrides: Overrides,
    admin_token: Option<String>,
}

/// What the service shows of itself.
#[derive(Debug)]
struct Observed {
    metrics: Metrics,
    dashboard: Dashboard,
    readiness: Readiness,
    /// The Envoy rules' per-descriptor statistics, kept across reloads (the `stats` the
    /// process started with).
    descriptor_stats: Arc<crate::descriptors::stats::DescriptorStats>,
    /// A sample of the gRPC `ShouldRateLimit` calls' times for statsd's timer, when statsd or
    /// DogStatsD is on.
    response_times: Option<crate::statsd::ResponseTimes>,
    statsd_pushes: crate::statsd::PushCounts,
    /// How envoyproxy/ratelimit's series are named on the Prometheus listener (read at
    /// start-up from `stats.prometheus.mapping_file`, else upstream's documented mapping).
    upstream_mapping: crate::upstream_metrics::mapping::Mapping,
    /// The xDS client's status, when the configuration comes over xDS
    /// ([`Server::with_xds`]).
    xds: Option<Arc<crate::xds::XdsStatus>>,
}

/// What the listeners are held to.
#[derive(Debug)]
struct Edge {
    /// The connection limits the process started with, and the count of open connections.
    limits: ConnectionLimits,
    gate: Arc<ConnectionGate>,
    in_flight: InFlight,
    /// TLS on the listeners, set by `serve` ([`Server::with_tls`]).
    tls: ListenersTls,
    /// Started as the drop-in, with envoyproxy/ratelimit's settings: the HTTP listener serves
    /// only what upstream serves while the configuration has nothing of Floodgate's
    /// ([`Server::with_upstream_surface`]).
    upstream_surface: bool,
    /// The HTTP listener is not on a loopback address: the dashboard's data needs the admin
    /// token ([`Server::with_http_address`]).
    dashboard_needs_token: bool,
}

impl Server {
    /// A service for `config`; `source` is read again on reload (a path, `None` for the
    /// built-in config, or a [`ConfigSource`]); `admin_token` enables the admin API. Lease tokens are signed with a random
    /// secret (see [`Server::with_lease_secret`]).
    pub fn new(
        config: Config,
        source: impl Into<ConfigSource>,
        admin_token: Option<String>,
    ) -> Result<Server, ConfigFileError> {
        let store = ServiceStore::from_config(&config.store)?;
        let served = build_served(&config, &store, None)?;
        let ledger = crate::rlqs::Ledger::in_store(store.inner().clone());
        let limits = config.connections.clone();
        let loaded = Arc::new(config.clone());
        Ok(Server {
            decisions: Decisions {
                served: ArcSwap::from_pointee(served),
                store,
                plan_overrides: ArcSwap::from_pointee(HashMap::new()),
                leases: leases::Signing::random(),
                quotas: crate::rlqs::Quotas::new(ledger),
                clock: SystemClock::new(),
            },
            control: Control {
                switches: Mutex::new(Switches::default()),
                config_source: source.into(),
                loaded: Mutex::new(reload::Loaded {
                    started: loaded.clone(),
                    last: loaded,
                }),
                overrides: Overrides::default(),
                admin_token,
            },
            observed: Observed {
                metrics: Metrics::default(),
                dashboard: Dashboard::new(DEFAULT_HEAVY_KEYS),
                readiness: Readiness::default(),
                descriptor_stats: Arc::new(crate::descriptors::stats::DescriptorStats::new(
                    config.stats.max_series,
                    config.stats.near_limit_ratio,
                )),
                response_times: (config.stats.statsd.is_some() || config.stats.dogstatsd.is_some())
                    .then(crate::statsd::ResponseTimes::default),
                statsd_pushes: crate::statsd::PushCounts::default(),
                upstream_mapping: upstream_mapping(&config)?,
                xds: None,
            },
            edge: Edge {
                gate: ConnectionGate::new(limits.max_connections),
                in_flight: InFlight::new(limits.max_in_flight),
                limits,
                tls: ListenersTls::default(),
                upstream_surface: false,
                dashboard_needs_token: false,
            },
        })
    }

    /// The configuration as the file gave it at start-up, before the command line and the
    /// environment filled in what it leaves out (the config given to [`Server::new`] by
    /// default): what reloads compare with, so that a setting only start-up reads is named
    /// when the file changes it, and never for a value the command line set.
    pub fn with_file_config(self, config: Config) -> Server {
        let config = Arc::new(config);
        *self
            .control
            .loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = reload::Loaded {
            started: config.clone(),
            last: config,
        };
        self
    }

    /// Applies `overrides` to every config [`Server::reload`] loads (the config given to
    /// [`Server::new`] should already have them: see [`Config::load_with`]).
    pub fn with_overrides(mut self, overrides: Overrides) -> Server {
        self.control.overrides = overrides;
        self
    }

    /// The drop-in, run with upstream's settings: while the running configuration has no
    /// stage and no named limit, the HTTP listener serves only what envoyproxy/ratelimit
    /// serves (`/json`, `/healthcheck`) with Floodgate's `/metrics`, `/livez`, `/readyz` and
    /// admin API. Decided per request, so a reload that adds or removes Floodgate's
    /// configuration changes it.
    pub fn with_upstream_surface(mut self, upstream: bool) -> Server {
        self.edge.upstream_surface = upstream;
        self
    }

    /// Says, one line per stage, which stages decide on this node alone while the store is
    /// shared (Redis): the adaptive concurrency limit and the utilization shedder measure the
    /// process they run in, so their limits and their leases are this node's, not the fleet's.
    /// (The Rate Limit Quota Service's shares are kept in the store, so they are the
    /// fleet's.) `serve` calls it at start-up.
    pub fn announce_node_local_stages(&self) {
        if !self.decisions.store.is_shared() {
            return;
        }
        let served = self.decisions.served.load();
        for stage in served.pipeline.stages() {
            let kind = stage.limiter().kind();
            if matches!(
                kind,
                floodgate::limiter::LimiterKind::Utilization
                    | floodgate::limiter::LimiterKind::AdaptiveConcurrency
            ) {
                tracing::info!(
                    stage = %stage.name(),
                    kind = kind.name(),
                    "this stage decides on this node alone, though the store is shared: it measures this process, so its limit and its leases are this node's (release a lease on the node that issued it)"
                );
            }
        }
    }

    /// Whether the service runs as the drop-in ([`Server::with_upstream_surface`]): only then
    /// may its HTTP listener serve upstream's surface alone, whatever a reload brings.
    pub fn runs_as_drop_in(&self) -> bool {
        self.edge.upstream_surface
    }

    /// Whether the HTTP listener serves only upstream's surface now
    /// ([`Server::with_upstream_surface`]).
    pub fn serves_upstream_surface(&self) -> bool {
        self.edge.upstream_surface && {
            let served = self.decisions.served.load();
            served.stage_paths.is_empty() && served.limits.is_empty()
        }
    }

    /// The HTTP listener's address: on one that is not loopback, the dashboard's data (the
    /// heaviest keys: user names, client addresses) needs the admin token.
    pub fn with_http_address(mut self, address: std::net::SocketAddr) -> Server {
        self.edge.dashboard_needs_token = !address.ip().is_loopback();
        self
    }

    /// Whether `GET /v1/dashboard` needs the admin token (see [`Server::with_http_address`]).
    pub fn dashboard_needs_token(&self) -> bool {
        self.edge.dashboard_needs_token
    }

    /// Keeps `counters` counters for the dashboard's heaviest keys (0: counts no keys). The
    /// default is 256 (`DEFAULT_HEAVY_KEYS`).
    pub fn with_heavy_keys(mut self, counters: usize) -> Server {
        self.observed.dashboard = Dashboard::new(counters);
        self
    }

    /// Refuses `value` of request field `field` when it is longer than
    /// `connections.max_key_bytes` ([`TooLong`]).
    pub fn bounded(&self, field: &'static str, value: &str) -> Result<(), TooLong> {
        let max = self.edge.limits.max_key_bytes;
        if value.len() > max {
            return Err(TooLong {
                field,
                bytes: value.len(),
                max,
            });
        }
        Ok(())
    }

    /// The connection limits the service started with (a reload keeps them).
    pub fn limits(&self) -> &ConnectionLimits {
        &self.edge.limits
    }

    /// The count of open connections, against `connections.max_connections`.
    pub fn gate(&self) -> &Arc<ConnectionGate> {
        &self.edge.gate
    }

    /// Counts a decision call in, or sheds it when `connections.max_in_flight` are being
    /// answered (see `crate::connections`).
    pub fn enter_call(&self) -> Result<CallGuard<'_>, Overloaded> {
        self.edge.in_flight.enter()
    }

    /// The service's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.observed.metrics
    }

    /// Whether the service takes traffic (false once shutdown has begun).
    pub fn is_ready(&self) -> bool {
        !self.observed.readiness.draining.load(Ordering::Relaxed)
    }

    /// The Envoy rules' per-descriptor statistics.
    pub fn descriptor_stats(&self) -> &crate::descriptors::stats::DescriptorStats {
        &self.observed.descriptor_stats
    }

    /// The sample of the Envoy calls' times statsd's timer sends, when statsd is on.
    pub fn response_times(&self) -> Option<&crate::statsd::ResponseTimes> {
        self.observed.response_times.as_ref()
    }

    /// Whether the process started without a configuration (its first load failed).
    pub fn started_without_config(&self) -> bool {
        self.observed
            .readiness
            .started_without_config
            .load(Ordering::Relaxed)
    }

    /// How envoyproxy/ratelimit's series are named on the Prometheus listener.
    pub fn upstream_mapping(&self) -> &crate::upstream_metrics::mapping::Mapping {
        &self.observed.upstream_mapping
    }

    /// Shows the xDS client's `status` in `/metrics` (the configuration comes over xDS).
    pub fn with_xds(mut self, status: Arc<crate::xds::XdsStatus>) -> Self {
        self.observed.xds = Some(status);
        self
    }

    /// Serves the listeners with `tls`.
    pub fn with_tls(mut self, tls: ListenersTls) -> Self {
        self.edge.tls = tls;
        self
    }

    /// TLS on the listeners.
    pub fn tls(&self) -> &ListenersTls {
        &self.edge.tls
    }

    /// The statsd pushes' counts.
    pub fn statsd_pushes(&self) -> &crate::statsd::PushCounts {
        &self.observed.statsd_pushes
    }

    /// Marks the service as running without a configuration: not ready until a reload
    /// succeeds.
    pub fn set_config_missing(&self) {
        self.observed
            .readiness
            .config_missing
            .store(true, Ordering::Relaxed);
        self.observed
            .readiness
            .started_without_config
            .store(true, Ordering::Relaxed);
    }

    /// What `/readyz` answers: whether the service takes traffic (not while shutting down,
    /// while no configuration has loaded, while `rls.require_domains` finds no domain, nor
    /// while the store's circuit breaker is open or its last call failed), and a JSON body
    /// saying so, with the store's kind, URL (password redacted), breaker state, whether its
    /// last call succeeded and, if not, the kind of failure.
    pub fn readiness(&self) -> (bool, Value) {
        let store = self.decisions.store.status();
        let served = self.decisions.served.load();
        let reason = if !self.is_ready() {
            Some("shutting down".to_string())
        } else if self
            .observed
            .readiness
            .config_missing
            .load(Ordering::Relaxed)
        {
            Some("no configuration has loaded yet".to_string())
        } else if served.rls_require_domains && served.rules.domains().next().is_none() {
            Some("no domain is configured (rls.require_domains)".to_string())
        } else {
            store.not_ready()
        };
        let mut body = serde_json::json!({ "ready": reason.is_none(), "store": store });
        if let Some(reason) = &reason {
            body["reason"] = reason.as_str().into();
        }
        (reason.is_none(), body)
    }

    /// The service's one store.
    pub fn store(&self) -> &ServiceStore {
        &self.decisions.store
    }

    /// Marks the service as draining: `/readyz` answers 503 from now on.
    pub fn set_not_ready(&self) {
        self.observed
            .readiness
            .draining
            .store(true, Ordering::Relaxed);
    }
}

/// The mapping `config`'s Prometheus listener names upstream's series with: its
/// `mapping_file`, read now (an error names the file, the entry and the field), or upstream's
/// built-in one, its response time in seconds or, when asked, milliseconds.
fn upstream_mapping(
    config: &Config,
) -> Result<crate::upstream_metrics::mapping::Mapping, ConfigFileError> {
    use crate::upstream_metrics::mapping::Mapping;
    let prometheus = config.stats.prometheus.as_ref();
    match prometheus.and_then(|p| p.mapping_file.as_ref()) {
        Some(file) => Mapping::load(file).map_err(|e| {
            ConfigFileError::invalid(
                "stats.prometheus.mapping_file (PROMETHEUS_MAPPER_YAML)",
                e.to_string(),
            )
        }),
        None => Ok(Mapping::upstream_default(
            prometheus.is_some_and(|p| p.response_time_as_milliseconds),
        )),
    }
}

/// Builds a config into what is served over the service's long-lived store, with the shared coarse
/// clock driving the utilization shedder.
/// A configuration using an algorithm the store cannot run is refused.
/// A configuration replacing `previous` goes on counting where its stages left off.
fn build_served(
    config: &Config,
    store: &ServiceStore,
    previous: Option<&Served<ServiceStore>>,
) -> Result<Served<ServiceStore>, ConfigFileError> {
    let clock = Arc::new(CoarseClock::shared());
    let served = config.build_after(store.clone(), clock, previous)?;
    store.check(&served).map_err(|e| config.place(e))?;
    Ok(served)
}

/// What the service's readiness depends on beyond its store and configuration.
#[derive(Debug, Default)]
struct Readiness {
    /// Shutdown has begun: `/readyz` answers 503 from then on.
    draining: AtomicBool,
    /// No configuration has loaded yet (started without one: envoyproxy/ratelimit's
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG`); the first reload that succeeds clears it.
    config_missing: AtomicBool,
    /// The process started without a configuration (the first load failed).
    started_without_config: AtomicBool,
}

/// TLS on the gRPC and HTTP listeners, where it is on.
#[derive(Clone, Debug, Default)]
pub struct ListenersTls {
    /// The gRPC listener's.
    pub grpc: Option<Arc<crate::connections::tls::TlsTerminator>>,
    /// The HTTP listener's.
    pub http: Option<Arc<crate::connections::tls::TlsTerminator>>,
}

impl ListenersTls {
    /// Reads the files `config` names: gRPC offering `h2` by ALPN, HTTP `h2` and `http/1.1`.
    pub fn load(
        config: &crate::config::TlsConfig,
    ) -> Result<ListenersTls, crate::connections::tls::TlsError> {
        use crate::connections::tls::TlsTerminator;
        let load = |listener: &'static str, files: &Option<_>, alpn: &[&[u8]]| {
            files
                .as_ref()
                .map(|files| TlsTerminator::load(listener, files, alpn).map(Arc::new))
                .transpose()
        };
        Ok(ListenersTls {
            grpc: load("grpc", &config.grpc, &[b"h2"])?,
            http: load("http", &config.http, &[b"h2", b"http/1.1"])?,
        })
    }
}

impl crate::xds::Target for Server {
    fn run(&self, pushed: crate::config::xds::Pushed) -> Result<(), ConfigFileError> {
        self.reload_pushed(pushed).map(drop)
    }
}

impl crate::statsd::Source for Server {
    fn totals(&self) -> crate::statsd::Totals {
        crate::statsd::totals(
            &self.observed.descriptor_stats,
            self.observed.metrics.rls_totals(),
            !self.started_without_config(),
        )
    }

    fn response_times(&self) -> Option<&crate::statsd::ResponseTimes> {
        self.observed.response_times.as_ref()
    }

    fn pushes(&self) -> &crate::statsd::PushCounts {
        &self.observed.statsd_pushes
    }
}
