//! OpenTelemetry traces of decisions: a span per `ShouldRateLimit`, `POST /json` and
//! `POST /v1/evaluate` call, a child span per store call, continuing the caller's trace,
//! exported over OTLP ([`Exporting`]). The settings come from the environment
//! ([`crate::environment::traces`]).
//!
//! The caller's trace is read as envoyproxy/ratelimit reads it ([`propagator`]): W3C
//! `traceparent`, then Zipkin's B3 headers ([`b3`]; a valid B3 context replaces a
//! `traceparent` sent with it), then W3C `baggage`; from HTTP headers and gRPC metadata alike.
//!
//! Off by default, and then free on the decision path: callers ask [`on`] (one relaxed load)
//! before making a span or wrapping a future in one, so a call with traces off builds no span
//! and runs its futures unwrapped (each function here also answers `Span::none()` when off),
//! and no layer is installed.
//!
//! | span | when | attributes |
//! |---|---|---|
//! | `ShouldRateLimit` | a gRPC call to Envoy's rate limit service | `rpc.system`, `rpc.service`, `rpc.method`, `ratelimit.domain`, `ratelimit.descriptors` (how many), `ratelimit.code` (`OK`, `OVER_LIMIT`, or `UNAVAILABLE` when no answer), `rpc.grpc.status_code` when refused |
//! | `POST /json` | envoyproxy/ratelimit's JSON API | `http.request.method`, `http.route`, the same `ratelimit.*` |
//! | `POST /v1/evaluate` | the pipeline API | `http.request.method`, `http.route`, `floodgate.allowed`, `http.response.status_code`, `floodgate.limiter` (the refusing stage) |
//! | `store call` | the store's part of any of the above | `floodgate.store` (`memory`, `redis`, …), `otel.status_code=ERROR` and `error.message` when it failed |
//!
//! No descriptor value, user, key, header value or token is ever an attribute: they may be
//! secrets (an API key is a common descriptor value).

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::environment::traces::{TraceProtocol, Traces};

pub(crate) mod b3;
mod limits;
mod tls;

/// The target every span here has: the exporting layer takes these and nothing else.
pub(crate) const TARGET: &str = "floodgate::traces";

/// Whether spans are made: set once an exporter runs ([`Exporting::start`]).
static ON: AtomicBool = AtomicBool::new(false);

/// Whether traces are on (an exporter runs in this process).
#[inline]
pub(crate) fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Why traces could not start.
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    /// A certificate or key file named by the environment could not be read.
    #[error("{variable}: cannot read {path}: {source}")]
    File {
        /// The variable naming the file.
        variable: &'static str,
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A certificate or key file named by the environment holds no usable PEM.
    #[error("{variable}: {path}: {why}")]
    Pem {
        /// The variable naming the file.
        variable: &'static str,
        /// The file.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// The exporter refused its settings (the message names the setting).
    #[error("OTLP trace exporter: {0}")]
    Exporter(String),
    /// The thread that sends spans could not start.
    #[error("cannot start the thread that sends traces: {0}")]
    Runtime(std::io::Error),
}

/// Spans being exported: the tracer provider, and the runtime its batches are sent from
/// (a thread of its own, so that sending spans never competes with decisions).
#[derive(Debug)]
pub struct Exporting {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    // Dropped after the provider: its last batch is sent from here.
    runtime: Option<tokio::runtime::Runtime>,
    settings: Traces,
}

impl Exporting {
    /// Starts exporting as `traces` says: builds the OTLP exporter (gRPC through tonic, or
    /// HTTP with protobuf bodies; either over TLS to an `https://` endpoint), a batch
    /// processor on a runtime of its own, a sampler that
    /// follows the caller's decision and keeps `sampling_rate` of the traces begun here, and
    /// the resource (`service.name`, `service.namespace`, `service.instance.id`, beside
    /// `OTEL_RESOURCE_ATTRIBUTES`') and the span limits (`OTEL_SPAN_*_LIMIT`); installs
    /// [`propagator`] as the process's, and turns [`on`] on.
    pub fn start(traces: &Traces) -> Result<Exporting, TracesError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("floodgate-traces")
            .enable_all()
            .build()
            .map_err(TracesError::Runtime)?;
        // The exporter's connection and the batch processor spawn their tasks here.
        let entered = runtime.enter();
        let exporter = exporter(traces)?;
        let processor =
            opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
                exporter,
                opentelemetry_sdk::runtime::Tokio,
            )
            .build();
        let builder = SdkTracerProvider::builder();
        let builder = match traces.sdk.limits.value_length {
            Some(max_chars) => {
                builder.with_span_processor(limits::Truncating::new(processor, max_chars))
            }
            None => builder.with_span_processor(processor),
        };
        let provider = limits::with_counts(builder, &traces.sdk.limits)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                traces.sampling_rate.clamp(0.0, 1.0),
            ))))
            .with_resource(limits::resource(traces))
            .build();
        drop(entered);
        let tracer = provider.tracer("floodgate");
        opentelemetry::global::set_text_map_propagator(propagator());
        ON.store(true, Ordering::Relaxed);
        Ok(Exporting {
            provider,
            tracer,
            runtime: Some(runtime),
            settings: traces.clone(),
        })
    }

    /// Logs where spans go (the endpoint without credentials): once logging is installed.
    pub fn announce(&self) {
        let traces = &self.settings;
        tracing::info!(
            protocol = traces.protocol.name(),
            endpoint = %traces.endpoint_shown(),
            service_name = %traces.service_name,
            service_instance_id = %traces.service_instance_id,
            sampling_rate = traces.sampling_rate,
            "traces exported over OTLP"
        );
    }

    /// The layer that turns this module's spans (and only them) into OpenTelemetry spans;
    /// add it to the subscriber.
    pub fn layer<S>(&self) -> impl tracing_subscriber::Layer<S>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        use tracing_subscriber::Layer as _;
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer.clone())
            .with_threads(false)
            .with_location(false)
            .with_target(false)
            .with_filter(
                tracing_subscriber::filter::Targets::new()
                    .with_target(TARGET, tracing::Level::TRACE),
            )
    }

    /// Sends the spans still waiting and stops: called as the process ends.
    pub fn shutdown(mut self) {
        ON.store(false, Ordering::Relaxed);
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "traces: the last spans were not all sent");
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
        }
    }
}

/// How a caller's context is read, in upstream's order (its `CompositeTextMapPropagator`
/// of trace context, B3 and baggage): each reader in turn, a later one replacing what an
/// earlier one found only when it finds a valid context itself.
pub(crate) fn propagator() -> opentelemetry::propagation::TextMapCompositePropagator {
    opentelemetry::propagation::TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(b3::B3Propagator),
        Box::new(BaggagePropagator::new()),
    ])
}

/// The OTLP exporter `traces` describes.
fn exporter(traces: &Traces) -> Result<opentelemetry_otlp::SpanExporter, TracesError> {
    let built = match traces.protocol {
        TraceProtocol::Http => {
            use opentelemetry_otlp::WithHttpConfig;
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(traces.endpoint.clone());
            if traces.endpoint.starts_with("https://") {
                builder = builder.with_http_client(tls::https_client(traces)?);
            }
            builder.build()
        }
        TraceProtocol::Grpc => {
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_protocol(opentelemetry_otlp::Protocol::Grpc)
                .with_endpoint(traces.endpoint.clone());
            if traces.endpoint.starts_with("https://") {
                builder = builder.with_tls_config(tls::grpc_config(traces)?);
            }
            builder.build()
        }
    };
    built.map_err(|e| TracesError::Exporter(e.to_string()))
}

/// The span of one `ShouldRateLimit` (`grpc`) or `POST /json` call, child of the trace
/// `headers` carry (none: a new trace); [`Span::none`] when traces are off.
pub(crate) fn rls_call(grpc: bool, headers: &http::HeaderMap) -> Span {
    if !on() {
        return Span::none();
    }
    let span = if grpc {
        tracing::info_span!(
            target: TARGET,
            "ShouldRateLimit",
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.service = "envoy.service.ratelimit.v3.RateLimitService",
            rpc.method = "ShouldRateLimit",
            ratelimit.domain = tracing::field::Empty,
            ratelimit.descriptors = tracing::field::Empty,
            ratelimit.code = tracing::field::Empty,
            rpc.grpc.status_code = tracing::field::Empty,
        )
    } else {
        tracing::info_span!(
            target: TARGET,
            "POST /json",
            otel.kind = "server",
            http.request.method = "POST",
            http.route = "/json",
            ratelimit.domain = tracing::field::Empty,
            ratelimit.descriptors = tracing::field::Empty,
            ratelimit.code = tracing::field::Empty,
        )
    };
    continue_trace(&span, headers);
    span
}

/// The span of one `POST /v1/evaluate` call, as [`rls_call`].
pub(crate) fn evaluate_call(headers: &http::HeaderMap) -> Span {
    if !on() {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "POST /v1/evaluate",
        otel.kind = "server",
        http.request.method = "POST",
        http.route = "/v1/evaluate",
        http.response.status_code = tracing::field::Empty,
        floodgate.allowed = tracing::field::Empty,
        floodgate.limiter = tracing::field::Empty,
    );
    continue_trace(&span, headers);
    span
}

/// The span of one store call made for the current span's request; `store`: its kind.
pub(crate) fn store_call(store: &'static str) -> Span {
    if !on() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        "store call",
        otel.kind = "client",
        floodgate.store = store,
        otel.status_code = tracing::field::Empty,
        error.message = tracing::field::Empty,
    )
}

/// Awaits the future `make` builds: inside the span `span` makes when traces are on, then
/// lets `record` mark that span with the outcome; as it is when they are off, with no span
/// made and nothing recorded. The decision paths go through this, so they hold no branch on
/// whether traces are on. It takes a builder rather than a future so that the future is made
/// where it is awaited (moving one already made costs a copy of it on every call).
pub(crate) async fn within<F: std::future::Future>(
    span: impl FnOnce() -> Span,
    make: impl FnOnce() -> F,
    record: impl FnOnce(&Span, &F::Output),
) -> F::Output {
    use tracing::Instrument;
    if !on() {
        return make().await;
    }
    let span = span();
    let output = make().instrument(span.clone()).await;
    record(&span, &output);
    output
}

/// Marks `span` (a [`store_call`]) failed with `error` (the store's message, which names
/// no secret: passwords are never in a store's errors).
pub(crate) fn store_failed(span: &Span, error: &dyn std::fmt::Display) {
    if on() {
        span.record("otel.status_code", "ERROR");
        span.record("error.message", tracing::field::display(error));
    }
}

/// Records on `span` (a gRPC [`rls_call`]) the status it was refused with.
pub(crate) fn refused(span: &Span, grpc_status: i64) {
    if on() {
        span.record("rpc.grpc.status_code", grpc_status);
    }
}

/// Records an Envoy call's domain, descriptor count and overall code on the current span
/// (the [`rls_call`] it runs in).
pub(crate) fn record_rls(domain: &str, descriptors: usize, code: &'static str) {
    if on() {
        let span = Span::current();
        span.record("ratelimit.domain", domain);
        span.record("ratelimit.descriptors", descriptors);
        span.record("ratelimit.code", code);
    }
}

/// Records a `/v1/evaluate` answer on the current span (the [`evaluate_call`] it runs in):
/// its HTTP status, whether it was allowed, and the stage that refused it.
pub(crate) fn record_evaluate(status: u16, allowed: bool, limiter: Option<&str>) {
    if on() {
        let span = Span::current();
        span.record("http.response.status_code", status);
        span.record("floodgate.allowed", allowed);
        if let Some(limiter) = limiter {
            span.record("floodgate.limiter", limiter);
        }
    }
}

/// Makes `span` a child of the context `headers` carry, if they carry one.
fn continue_trace(span: &Span, headers: &http::HeaderMap) {
    let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&opentelemetry_http::HeaderExtractor(headers))
    });
    // Fails only when the span is disabled (no layer took it): nothing to attach then.
    let _ = span.set_parent(parent);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_traces_off_no_span_is_made() {
        // No exporter runs in this test binary.
        assert!(!on());
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        assert!(rls_call(true, &headers).is_none());
        assert!(rls_call(false, &headers).is_none());
        assert!(evaluate_call(&headers).is_none());
        assert!(store_call("memory").is_none());
    }
}
