//! A control plane of the tests' own: a real xDS server (tonic) serving envoyproxy/ratelimit's
//! `RateLimitConfig` resources state of the world over the aggregated discovery service, as
//! Envoy Gateway's does. It serves one snapshot at a time to every node, records every request
//! a client sends (subscriptions, ACKs and NACKs), and can end every open stream.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floodgate_harness::Issued;
use floodgate_server::proto::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use floodgate_server::proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use floodgate_server::proto::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use prost::Message;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

/// The resources' type.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// Resource `name`: domain `rl`, `limit` requests an hour per `user`.
pub fn per_user(name: &str, limit: u32) -> RateLimitConfig {
    RateLimitConfig {
        name: name.into(),
        domain: "rl".into(),
        descriptors: vec![RateLimitDescriptor {
            key: "user".into(),
            rate_limit: Some(RateLimitPolicy {
                unit: RateLimitUnit::Hour as i32,
                requests_per_unit: limit,
                ..RateLimitPolicy::default()
            }),
            ..RateLimitDescriptor::default()
        }],
    }
}

/// Where Envoy Gateway's variables point: this service's certificate and key (gRPC's and the
/// xDS client's), the CA, and the Redis client's certificate and key.
pub struct GatewayFiles {
    pub cert: String,
    pub key: String,
    pub ca: String,
    pub redis_cert: String,
    pub redis_key: String,
    /// The statsd_exporter mapping file (`PROMETHEUS_MAPPER_YAML`), [`gateway_mapping`].
    pub mapping: String,
}

/// A statsd_exporter mapping in the form Envoy Gateway ships (globs for one key, expressions
/// for more, `timer_type`, `match_metric_type`), written for the tests, with one entry of
/// the tests' own that renames `within_limit` to `eg_within_limit`: a series under that name
/// shows that the file applies.
pub fn gateway_mapping() -> &'static str {
    r#"# statsd_exporter mapping for the rate limit service
mappings:
  - match: "ratelimit.service.rate_limit.*.*.within_limit"
    name: "eg_within_limit"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
  - match: "ratelimit.service.rate_limit.*.*.over_limit"
    name: "ratelimit_service_rate_limit_over_limit"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"

  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.over_limit"
    match_type: regex
    name: "ratelimit_service_rate_limit_over_limit"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
      key2: "$3"

  - match: "ratelimit_server.*.total_requests"
    name: "ratelimit_service_total_requests"
    match_metric_type: counter
    labels:
      grpc_method: "$1"
  - match: "ratelimit_server.*.response_time"
    name: "ratelimit_service_response_time_seconds"
    timer_type: histogram
    labels:
      grpc_method: "$1"
"#
}

/// The variables Envoy Gateway gives its rate limit container (envoyproxy/gateway,
/// `internal/infrastructure/kubernetes/ratelimit/resource.go`), with the control plane at
/// `plane`, Redis over TLS at `redis` (`host:port`) and the certificates at `files`. Where the
/// deployment's values cannot be used here: every listener on a loopback port the OS chooses
/// (Envoy Gateway: `0.0.0.0:8081`, `:19001`), and `SSL_CERT_FILE` standing in for the image's
/// trust store, where the cluster's CA would be.
pub fn envoy_gateway_env(
    plane: SocketAddr,
    redis: &str,
    files: &GatewayFiles,
) -> Vec<(&'static str, String)> {
    let mut env: Vec<(&'static str, String)> = vec![
        ("RUNTIME_ROOT", "/data".into()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("RUNTIME_IGNOREDOTFILES", "true".into()),
        ("RUNTIME_WATCH_ROOT", "false".into()),
        ("LOG_LEVEL", "info".into()),
        ("USE_STATSD", "false".into()),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".into()),
        ("CONFIG_GRPC_XDS_SERVER_URL", plane.to_string()),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit".into()),
        ("GRPC_SERVER_USE_TLS", "true".into()),
        ("GRPC_SERVER_TLS_CERT", files.cert.clone()),
        ("GRPC_SERVER_TLS_KEY", files.key.clone()),
        // Set by Envoy Gateway, read by neither upstream nor Floodgate (upstream's name is
        // GRPC_CLIENT_TLS_CACERT): clients are not asked for certificates.
        ("GRPC_SERVER_TLS_CA_CERT", files.ca.clone()),
        ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".into()),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", files.cert.clone()),
        ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", files.key.clone()),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", files.ca.clone()),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true".into()),
        ("REDIS_SOCKET_TYPE", "tcp".into()),
        ("REDIS_URL", redis.to_string()),
        ("REDIS_TLS", "true".into()),
        ("REDIS_TLS_CLIENT_CERT", files.redis_cert.clone()),
        ("REDIS_TLS_CLIENT_KEY", files.redis_key.clone()),
        ("SSL_CERT_FILE", files.ca.clone()),
        ("USE_PROMETHEUS", "true".into()),
        // Envoy Gateway: `:19001`; here a port the OS chooses.
        ("PROMETHEUS_ADDR", "127.0.0.1:0".into()),
        ("PROMETHEUS_MAPPER_YAML", files.mapping.clone()),
    ];
    env.extend(crate::common::upstream::loopback_listeners());
    env
}

/// The variables Envoy Gateway adds when its rate limit has a tracing provider (same file),
/// the provider at `endpoint` (`http://host:port`), every trace kept (its `samplingRate` of
/// 100 is written `1.0`); and a batch sent every 100 ms, so that the test need not wait.
pub fn envoy_gateway_tracing(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("TRACING_ENABLED", "true".into()),
        ("TRACING_SERVICE_NAME", "envoy-ratelimit".into()),
        ("TRACING_SERVICE_NAMESPACE", "envoy-gateway-system".into()),
        // Envoy Gateway: the pod's name, from the downward API.
        (
            "TRACING_SERVICE_INSTANCE_ID",
            "envoy-ratelimit-5d8f7c9b4-x2x7q".into(),
        ),
        ("TRACING_SAMPLING_RATE", "1.0".into()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.into()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
    ]
}

/// A set of resources and its version.
#[derive(Clone, Debug, Default)]
struct Snapshot {
    version: String,
    resources: Vec<RateLimitConfig>,
}

struct State {
    snapshot: watch::Sender<Option<Snapshot>>,
    /// Bumped to end every open stream.
    drops: watch::Sender<u64>,
    requests: Mutex<Vec<DiscoveryRequest>>,
    streams: Mutex<u64>,
    /// The gRPC metadata each stream opened with, as `(name, value)` pairs.
    metadata: Mutex<Vec<Vec<(String, String)>>>,
}

/// The running control plane, stopped when dropped.
pub struct ControlPlane {
    /// Where it listens.
    pub address: SocketAddr,
    state: Arc<State>,
    stop: Option<oneshot::Sender<()>>,
}

/// TLS for the control plane: its certificate, and the CA a client's certificate must chain
/// to (mutual TLS).
pub struct PlaneTls {
    pub server: Issued,
    pub client_ca: PathBuf,
}

impl ControlPlane {
    /// A control plane on a loopback port the OS chooses, serving nothing until
    /// [`ControlPlane::push`]; over TLS with `tls`.
    pub async fn start(tls: Option<PlaneTls>) -> ControlPlane {
        let state = Arc::new(State {
            snapshot: watch::channel(None).0,
            drops: watch::channel(0).0,
            requests: Mutex::new(Vec::new()),
            streams: Mutex::new(0),
            metadata: Mutex::new(Vec::new()),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let builder = crate::common::tls::tonic_server(
            tls.as_ref().map(|t| (&t.server, t.client_ca.as_path())),
        );
        let service = AggregatedDiscoveryServiceServer::new(Plane(state.clone()));
        tokio::spawn(async move {
            let _ = builder
                .serve_with_incoming_shutdown(service, TcpListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await;
        });
        ControlPlane {
            address,
            state,
            stop: Some(stop),
        }
    }

    /// Serves `resources` as version `version` to every stream, open or to come.
    pub fn push(&self, version: &str, resources: Vec<RateLimitConfig>) {
        self.state.snapshot.send_replace(Some(Snapshot {
            version: version.into(),
            resources,
        }));
    }

    /// Ends every open stream with an error, as a control plane restarting does.
    pub fn drop_streams(&self) {
        self.state.drops.send_modify(|n| *n += 1);
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<DiscoveryRequest> {
        self.state.requests.lock().unwrap().clone()
    }

    /// The gRPC metadata of each stream opened so far.
    pub fn metadata(&self) -> Vec<Vec<(String, String)>> {
        self.state.metadata.lock().unwrap().clone()
    }

    /// Streams opened so far.
    pub fn streams(&self) -> u64 {
        *self.state.streams.lock().unwrap()
    }

    /// Waits (at most 30 s) until the requests received satisfy `done`; returns them.
    pub async fn wait_for(
        &self,
        what: &str,
        done: impl Fn(&[DiscoveryRequest]) -> bool,
    ) -> Vec<DiscoveryRequest> {
        for _ in 0..3000 {
            let requests = self.requests();
            if done(&requests) {
                return requests;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the control plane never saw {what}: {:#?}", self.requests());
    }

    /// Waits until a request ACKs `version`.
    pub async fn wait_for_ack(&self, version: &str) {
        self.wait_for(&format!("an ACK of {version}"), |requests| {
            requests.iter().any(|r| {
                r.version_info == version
                    && !r.response_nonce.is_empty()
                    && r.error_detail.is_none()
            })
        })
        .await;
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

struct Plane(Arc<State>);

type Responses = Pin<Box<dyn Stream<Item = Result<DiscoveryResponse, Status>> + Send>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Plane {
    type StreamAggregatedResourcesStream = Responses;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Responses>, Status> {
        let metadata = request
            .metadata()
            .iter()
            .filter_map(|entry| match entry {
                tonic::metadata::KeyAndValueRef::Ascii(k, v) => {
                    Some((k.as_str().to_string(), v.to_str().ok()?.to_string()))
                }
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            })
            .collect();
        let mut incoming = request.into_inner();
        let state = self.0.clone();
        *state.streams.lock().unwrap() += 1;
        state.metadata.lock().unwrap().push(metadata);
        let (out, responses) = mpsc::channel(16);
        tokio::spawn(async move {
            let mut snapshots = state.snapshot.subscribe();
            let mut drops = state.drops.subscribe();
            drops.mark_unchanged();
            let mut sent: Option<String> = None;
            let mut nonce = 0u64;
            let mut subscribed = false;
            loop {
                tokio::select! {
                    request = incoming.message() => match request {
                        Ok(Some(request)) => {
                            subscribed = true;
                            state.requests.lock().unwrap().push(request);
                        }
                        _ => return,
                    },
                    changed = snapshots.changed() => if changed.is_err() { return },
                    _ = drops.changed() => {
                        let _ = out.send(Err(Status::unavailable("the control plane ends every stream"))).await;
                        return;
                    }
                }
                let current = snapshots.borrow_and_update().clone();
                if let (true, Some(snapshot)) = (subscribed, current) {
                    if sent.as_deref() != Some(snapshot.version.as_str()) {
                        nonce += 1;
                        let response = DiscoveryResponse {
                            version_info: snapshot.version.clone(),
                            resources: snapshot
                                .resources
                                .iter()
                                .map(|r| prost_types::Any {
                                    type_url: TYPE_URL.into(),
                                    value: r.encode_to_vec(),
                                })
                                .collect(),
                            type_url: TYPE_URL.into(),
                            nonce: nonce.to_string(),
                        };
                        sent = Some(snapshot.version);
                        if out.send(Ok(response)).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(responses))))
    }
}
