//! The xDS client: configuration pushed by a control plane (Envoy Gateway, or any xDS server
//! serving envoyproxy/ratelimit's `RateLimitConfig` resources), as envoyproxy/ratelimit's
//! `CONFIG_TYPE=GRPC_XDS_SOTW` takes it.
//!
//! # The protocol
//!
//! One stream of the aggregated discovery service
//! (`envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources`), state
//! of the world, for the one type [`TYPE_URL`]:
//!
//! 1. The client sends a request naming its node (`CONFIG_GRPC_XDS_NODE_ID`, with
//!    `CONFIG_GRPC_XDS_NODE_METADATA` as string values), the type, no resource names (every
//!    resource), and the version it runs (empty before the first).
//! 2. Each response carries every resource. The client decodes them and hands the set to the
//!    service ([`Target::run`]), which checks and builds it as any configuration and swaps it
//!    in as a reload does (counters and switches kept).
//! 3. A set the service runs is ACKed: a request with the response's version and nonce. A set
//!    it refuses is NACKed: the version it still runs, the response's nonce, and an
//!    `error_detail` (code 3, `INVALID_ARGUMENT`) whose message names the resource and the
//!    field; the last good configuration keeps serving.
//!
//! A stream that fails or ends is opened again after a wait ([`Backoff`]: upstream's
//! `XDS_CLIENT_BACKOFF_*`), and subscribes again with the version it runs. Each attempt to
//! connect may take `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`. While no stream is open
//! the service goes on serving what it last accepted.
//!
//! [`Backoff`]: crate::environment::xds::Backoff

mod channel;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use crate::config::xds::{Pushed, TYPE_URL};
use crate::config::ConfigFileError;
use crate::environment::xds::Xds;
use crate::prometheus::{Exposition, Kind};
use crate::proto::envoy::config::core::v3::Node;
use crate::proto::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use crate::proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use crate::proto::google::rpc::Status;
use crate::proto::ratelimit::config::ratelimit::v3::RateLimitConfig;

/// Why a stream to the control plane could not be opened or ended.
#[derive(Debug, thiserror::Error)]
pub(crate) enum XdsError {
    /// `CONFIG_GRPC_XDS_SERVER_URL` cannot be read.
    #[error("CONFIG_GRPC_XDS_SERVER_URL {0}")]
    Address(String),
    /// The TLS settings cannot be used.
    #[error("xDS TLS: {0}")]
    Tls(String),
    /// The control plane cannot be reached.
    #[error("cannot connect to the xDS server {server}: {error}")]
    Connect {
        /// Its address.
        server: String,
        /// Why.
        error: String,
    },
    /// The stream failed.
    #[error("the xDS stream failed: {0}")]
    Stream(#[from] tonic::Status),
    /// The stream ended from the server's side.
    #[error("the xDS server ended the stream")]
    Ended,
}

/// What the client hands each set of resources to: the running service.
pub(crate) trait Target: Send + Sync + 'static {
    /// Checks and runs `pushed`; an error names what is wrong, and the service keeps what it
    /// ran before.
    fn run(&self, pushed: Pushed) -> Result<(), ConfigFileError>;
}

/// What the client has done, for `/metrics`.
#[derive(Debug, Default)]
pub struct XdsStatus {
    connected: AtomicBool,
    acks: AtomicU64,
    nacks: AtomicU64,
    streams: AtomicU64,
}

impl XdsStatus {
    /// Whether a stream to the control plane is open now.
    pub fn connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// Responses accepted (ACK) and refused (NACK) since start.
    pub fn responses(&self) -> (u64, u64) {
        (
            self.acks.load(Ordering::Relaxed),
            self.nacks.load(Ordering::Relaxed),
        )
    }

    /// Writes the client's series, with `version` the version of the set the service runs.
    pub fn write(&self, text: &mut Exposition<'_>, version: Option<&str>) {
        text.family(
            "floodgate_xds_connected",
            Kind::Gauge,
            "Whether a stream to the xDS server is open (1) or not (0).",
        )
        .sample(&[], u64::from(self.connected()));
        text.family(
            "floodgate_xds_streams_total",
            Kind::Counter,
            "Streams opened to the xDS server.",
        )
        .sample(&[], self.streams.load(Ordering::Relaxed));
        let (acks, nacks) = self.responses();
        let mut responses = text.family(
            "floodgate_xds_responses_total",
            Kind::Counter,
            "Responses of the xDS server, by whether the service ran them (ack) or refused them (nack).",
        );
        responses.sample(&[("outcome", "ack")], acks);
        responses.sample(&[("outcome", "nack")], nacks);
        if let Some(version) = version {
            text.family(
                "floodgate_xds_config_version_info",
                Kind::Gauge,
                "The version of the configuration served, pushed over xDS (always 1).",
            )
            .sample(&[("version", version)], 1);
        }
    }
}

/// Follows the control plane `settings` name for as long as the process runs, handing each
/// set of resources to `target`; `first` turns true when a first set is running. `version`
/// says which version the service runs (sent when a stream subscribes again).
pub(crate) async fn follow<T: Target>(
    target: Arc<T>,
    status: Arc<XdsStatus>,
    settings: Xds,
    version: impl Fn() -> Option<String> + Send + 'static,
    first: watch::Sender<bool>,
) {
    let mut attempt = 0u32;
    loop {
        let mut delivered = false;
        let ended = stream(
            &*target,
            &status,
            &settings,
            &version,
            &first,
            &mut delivered,
        )
        .await;
        status.connected.store(false, Ordering::Relaxed);
        if delivered {
            attempt = 0;
        }
        let wait = settings.backoff.wait(attempt, rand::random::<f64>());
        attempt = attempt.saturating_add(1);
        tracing::warn!(
            error = %ended,
            server = %settings.server_url,
            retry_in_ms = wait.as_millis() as u64,
            "no xDS stream: the running configuration stays; connecting again"
        );
        tokio::time::sleep(wait).await;
    }
}

/// One stream, from connecting to its end: `delivered` turns true once a response came.
async fn stream<T: Target>(
    target: &T,
    status: &XdsStatus,
    settings: &Xds,
    version: &(impl Fn() -> Option<String> + Send),
    first: &watch::Sender<bool>,
    delivered: &mut bool,
) -> XdsError {
    let channel = match channel::connect(settings).await {
        Ok(channel) => channel,
        Err(e) => return e,
    };
    let mut client = AggregatedDiscoveryServiceClient::new(channel);
    if let Some(max) = settings.max_message_bytes {
        client = client.max_decoding_message_size(max);
    }
    let (requests, outgoing) = mpsc::channel::<DiscoveryRequest>(4);
    let node = node(settings);
    // The version running: sent when subscribing, and in a NACK.
    let mut running = version().unwrap_or_default();
    // Every request names the node, the type, and the version running; an answer adds the
    // nonce of the response it answers.
    let request_for = |version: &str, nonce: &str| DiscoveryRequest {
        version_info: version.to_string(),
        node: Some(node.clone()),
        type_url: TYPE_URL.to_string(),
        response_nonce: nonce.to_string(),
        ..DiscoveryRequest::default()
    };
    let subscribe = request_for(&running, "");
    // Cannot fail: the channel has room and its receiver is below.
    let _ = requests.try_send(subscribe);
    let mut request = tonic::Request::new(ReceiverStream::new(outgoing));
    add_headers(request.metadata_mut(), settings);
    let mut responses = match client.stream_aggregated_resources(request).await {
        Ok(response) => response.into_inner(),
        Err(status) => return status.into(),
    };
    status.connected.store(true, Ordering::Relaxed);
    status.streams.fetch_add(1, Ordering::Relaxed);
    tracing::info!(server = %settings.server_url, node = %settings.node_id, "xDS stream open");
    loop {
        let response = match responses.message().await {
            Ok(Some(response)) => response,
            Ok(None) => return XdsError::Ended,
            Err(status) => return status.into(),
        };
        *delivered = true;
        let answer = match answer(target, &response) {
            Ok(()) => {
                status.acks.fetch_add(1, Ordering::Relaxed);
                running = response.version_info.clone();
                first.send_replace(true);
                request_for(&running, &response.nonce)
            }
            Err(why) => {
                status.nacks.fetch_add(1, Ordering::Relaxed);
                DiscoveryRequest {
                    error_detail: Some(Status {
                        // INVALID_ARGUMENT.
                        code: 3,
                        message: why,
                        details: Vec::new(),
                    }),
                    ..request_for(&running, &response.nonce)
                }
            }
        };
        if requests.send(answer).await.is_err() {
            return XdsError::Ended;
        }
    }
}

/// Adds the configured headers (`CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS`) to a stream's
/// metadata; one that is not valid gRPC metadata is left out, and said so.
fn add_headers(metadata: &mut tonic::metadata::MetadataMap, settings: &Xds) {
    for (name, value) in &settings.headers {
        let parsed = (
            tonic::metadata::MetadataKey::from_bytes(name.to_ascii_lowercase().as_bytes()),
            tonic::metadata::MetadataValue::try_from(value.as_str()),
        );
        match parsed {
            (Ok(key), Ok(value)) => {
                metadata.insert(key, value);
            }
            _ => {
                tracing::warn!(header = %name, "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: not a valid gRPC metadata entry; not sent")
            }
        }
    }
}

/// Decodes `response` and hands its resources to `target`: `Err` with what to tell the
/// control plane when the set is refused.
fn answer<T: Target>(target: &T, response: &DiscoveryResponse) -> Result<(), String> {
    let pushed = decode(response).inspect_err(|why| {
        tracing::error!(version = %response.version_info, error = %why, "xDS response refused: cannot be decoded");
    })?;
    // A refused set was logged by its reload already (one line per reload).
    target.run(pushed).map_err(|error| error.to_string())
}

/// The resources of `response`, decoded.
fn decode(response: &DiscoveryResponse) -> Result<Pushed, String> {
    if response.type_url != TYPE_URL {
        return Err(format!(
            "type `{}`: this client asks only for {TYPE_URL}",
            response.type_url
        ));
    }
    let mut resources = Vec::with_capacity(response.resources.len());
    for (i, any) in response.resources.iter().enumerate() {
        if any.type_url != TYPE_URL {
            return Err(format!(
                "resources[{i}]: type `{}`, expected {TYPE_URL}",
                any.type_url
            ));
        }
        let resource = RateLimitConfig::decode(any.value.as_slice())
            .map_err(|e| format!("resources[{i}]: not a RateLimitConfig: {e}"))?;
        resources.push(resource);
    }
    Ok(Pushed {
        version: response.version_info.clone(),
        resources,
    })
}

/// The node this service says it is: its id, its metadata as string values, and who it is.
fn node(settings: &Xds) -> Node {
    use prost_types::value::Kind;
    let fields = settings
        .node_metadata
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                prost_types::Value {
                    kind: Some(Kind::StringValue(v.clone())),
                },
            )
        })
        .collect();
    Node {
        id: settings.node_id.clone(),
        metadata: Some(prost_types::Struct { fields }),
        user_agent_name: "floodgate".into(),
        user_agent_version: crate::VERSION.into(),
        ..Node::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Recorder(Mutex<Vec<Pushed>>);

    impl Target for Recorder {
        fn run(&self, pushed: Pushed) -> Result<(), ConfigFileError> {
            if pushed.version == "bad" {
                return Err(ConfigFileError::invalid("descriptors[0].key", "empty"));
            }
            self.0.lock().unwrap().push(pushed);
            Ok(())
        }
    }

    fn response(version: &str, resources: Vec<prost_types::Any>) -> DiscoveryResponse {
        DiscoveryResponse {
            version_info: version.into(),
            resources,
            type_url: TYPE_URL.into(),
            nonce: "n1".into(),
        }
    }

    fn packed(resource: &RateLimitConfig) -> prost_types::Any {
        prost_types::Any {
            type_url: TYPE_URL.into(),
            value: resource.encode_to_vec(),
        }
    }

    #[test]
    fn a_set_is_decoded_and_handed_over_whole() {
        let target = Recorder(Mutex::new(Vec::new()));
        let a = RateLimitConfig {
            name: "a".into(),
            domain: "api".into(),
            descriptors: Vec::new(),
        };
        answer(&target, &response("v1", vec![packed(&a)])).unwrap();
        let got = target.0.lock().unwrap();
        assert_eq!(got[0].version, "v1");
        assert_eq!(got[0].resources, vec![a]);
    }

    #[test]
    fn what_cannot_be_decoded_or_run_is_refused_with_why() {
        let target = Recorder(Mutex::new(Vec::new()));
        let garbage = prost_types::Any {
            type_url: TYPE_URL.into(),
            value: vec![0xff, 0xff, 0xff],
        };
        let why = answer(&target, &response("v1", vec![garbage])).unwrap_err();
        assert!(why.contains("resources[0]"), "{why}");
        let other = prost_types::Any {
            type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(),
            value: Vec::new(),
        };
        let why = answer(&target, &response("v1", vec![other])).unwrap_err();
        assert!(why.contains("Cluster"), "{why}");
        let why = answer(&target, &response("bad", Vec::new())).unwrap_err();
        assert!(why.contains("descriptors[0].key"), "{why}");
        assert!(target.0.lock().unwrap().is_empty());
    }

    #[test]
    fn the_node_carries_its_id_and_metadata() {
        let settings = Xds {
            server_url: "x:1".into(),
            node_id: "envoy-ratelimit".into(),
            node_metadata: vec![("zone".into(), "a".into())],
            headers: Vec::new(),
            connect_timeout: std::time::Duration::from_secs(3),
            tls: None,
            backoff: crate::environment::xds::Backoff {
                initial: std::time::Duration::from_secs(1),
                max: std::time::Duration::from_secs(1),
                factor: 0.5,
                jitter: false,
            },
            max_message_bytes: None,
        };
        let node = node(&settings);
        assert_eq!(node.id, "envoy-ratelimit");
        assert_eq!(node.user_agent_name, "floodgate");
        let zone = &node.metadata.unwrap().fields["zone"];
        assert_eq!(
            zone.kind,
            Some(prost_types::value::Kind::StringValue("a".into()))
        );
    }
}
