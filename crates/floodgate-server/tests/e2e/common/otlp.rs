//! A real OTLP trace receiver for the trace tests: the collector's `TraceService` served by
//! tonic (plain or TLS with client certificates), or OTLP/HTTP's `POST /v1/traces` with
//! protobuf bodies served by hyper (plain, or over rustls with or without client
//! certificates); every span it is sent, kept in order.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;
use rustls::pki_types::pem::PemObject;
use tokio::sync::oneshot;
use tokio_stream::wrappers::TcpListenerStream;

use floodgate_harness::Issued;

/// One span as received, its attributes rendered as text.
#[derive(Clone, Debug)]
pub struct ReceivedSpan {
    /// The trace id, 32 hex digits.
    pub trace_id: String,
    /// The span id, 16 hex digits.
    pub span_id: String,
    /// The parent's span id, 16 hex digits, or empty for a root.
    pub parent_span_id: String,
    pub name: String,
    /// The span's attributes.
    pub attributes: Vec<(String, String)>,
    /// The resource's attributes (`service.name`, …).
    pub resource: Vec<(String, String)>,
}

impl ReceivedSpan {
    /// The attribute `key`, if the span has it.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The resource attribute `key`.
    pub fn resource(&self, key: &str) -> Option<&str> {
        self.resource
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A receiver running on the test's runtime, stopped when dropped.
pub struct Collector {
    /// Where to send spans: `http://127.0.0.1:PORT` (gRPC, or the base URL for HTTP),
    /// `https://…` over TLS.
    pub endpoint: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    /// The headers of each OTLP/HTTP export received.
    headers: Arc<Mutex<Vec<http::HeaderMap>>>,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

struct Receiver(Arc<Mutex<Vec<ReceivedSpan>>>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        keep(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// TLS for the receiver: its certificate, and the CA client certificates must chain to.
pub struct CollectorTls {
    pub server: Issued,
    pub client_ca: std::path::PathBuf,
}

impl Collector {
    /// OTLP over gRPC on a loopback port, over TLS with `tls`.
    pub async fn grpc(tls: Option<CollectorTls>) -> Collector {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let builder = crate::common::tls::tonic_server(
            tls.as_ref().map(|t| (&t.server, t.client_ca.as_path())),
        );
        let service = TraceServiceServer::new(Receiver(spans.clone()));
        tokio::spawn(async move {
            let _ = builder
                .serve_with_incoming_shutdown(service, TcpListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await;
        });
        Collector {
            endpoint: format!("{scheme}://{address}"),
            spans,
            headers: Arc::default(),
            stop: Some(stop),
        }
    }

    /// OTLP over HTTP (protobuf) on a loopback port: `POST /v1/traces`; anything else is 404.
    pub async fn http() -> Collector {
        Collector::serve_http(None).await
    }

    /// OTLP over HTTPS: as [`Collector::http`], over TLS as `server`, asking for a client
    /// certificate signed by the CAs in `client_ca` when given (mutual TLS).
    pub async fn https(server: &Issued, client_ca: Option<&std::path::Path>) -> Collector {
        let chain = rustls::pki_types::CertificateDer::pem_file_iter(&server.cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&server.key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
                    roots.add(cert.unwrap()).unwrap();
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .unwrap();
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config = builder.with_single_cert(chain, key).unwrap();
        Collector::serve_http(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))).await
    }

    async fn serve_http(tls: Option<tokio_rustls::TlsAcceptor>) -> Collector {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, mut stopped) = oneshot::channel::<()>();
        let headers: Arc<Mutex<Vec<http::HeaderMap>>> = Arc::default();
        let kept = (spans.clone(), headers.clone());
        let scheme = if tls.is_some() { "https" } else { "http" };
        tokio::spawn(async move {
            loop {
                let (stream, _) = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok(accepted) => accepted,
                        Err(_) => continue,
                    },
                    _ = &mut stopped => return,
                };
                let (kept, tls) = (kept.clone(), tls.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let kept = kept.clone();
                        async move {
                            kept.1.lock().unwrap().push(request.headers().clone());
                            Ok::<_, Infallible>(http_export(&kept.0, request).await)
                        }
                    });
                    let http1 = hyper::server::conn::http1::Builder::new();
                    let _ = match tls {
                        None => {
                            http1
                                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                                .await
                        }
                        Some(acceptor) => {
                            // A refused handshake (no client certificate) serves nothing.
                            let Ok(stream) = acceptor.accept(stream).await else {
                                return;
                            };
                            http1
                                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                                .await
                        }
                    };
                });
            }
        });
        Collector {
            endpoint: format!("{scheme}://{address}"),
            spans,
            headers,
            stop: Some(stop),
        }
    }

    /// The headers of each OTLP/HTTP export received so far.
    pub fn headers(&self) -> Vec<http::HeaderMap> {
        self.headers.lock().unwrap().clone()
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits (at most 30 s) until `done` holds of the spans received; they are returned.
    pub async fn until(
        &self,
        what: &str,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not received in 30 s; received: {spans:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn http_export(
    kept: &Mutex<Vec<ReceivedSpan>>,
    request: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Full<Bytes>> {
    let is_export = request.method() == hyper::Method::POST && request.uri().path() == "/v1/traces";
    let protobuf = request
        .headers()
        .get("content-type")
        .is_some_and(|t| t == "application/x-protobuf");
    if !is_export || !protobuf {
        return hyper::Response::builder()
            .status(404)
            .body(Full::new(Bytes::new()))
            .unwrap();
    }
    let body = request.into_body().collect().await.unwrap().to_bytes();
    keep(kept, ExportTraceServiceRequest::decode(body).unwrap());
    let answer = ExportTraceServiceResponse::default().encode_to_vec();
    hyper::Response::builder()
        .header("content-type", "application/x-protobuf")
        .body(Full::new(Bytes::from(answer)))
        .unwrap()
}

fn keep(kept: &Mutex<Vec<ReceivedSpan>>, request: ExportTraceServiceRequest) {
    let mut kept = kept.lock().unwrap();
    for resource_spans in request.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| rendered(&r.attributes))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                kept.push(ReceivedSpan {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name,
                    attributes: rendered(&span.attributes),
                    resource: resource.clone(),
                });
            }
        }
    }
}

fn rendered(attributes: &[KeyValue]) -> Vec<(String, String)> {
    attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(s)) => s.clone(),
                Some(AnyValue::IntValue(i)) => i.to_string(),
                Some(AnyValue::BoolValue(b)) => b.to_string(),
                Some(AnyValue::DoubleValue(d)) => d.to_string(),
                other => format!("{other:?}"),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
