//! OpenTelemetry traces: envoyproxy/ratelimit's `TRACING_*` variables and the standard
//! `OTEL_EXPORTER_OTLP_*` ones that say where spans go. Read whether or not upstream's other
//! settings are present: `TRACING_ENABLED=true` turns traces on for any `floodgate serve`.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `TRACING_ENABLED` | export spans | `false` |
//! | `TRACING_SERVICE_NAME` | the resource's `service.name` | `RateLimit` |
//! | `TRACING_SERVICE_NAMESPACE` | `service.namespace` | empty |
//! | `TRACING_SERVICE_INSTANCE_ID` | `service.instance.id` | a random UUID |
//! | `TRACING_SAMPLING_RATE` | the share of traces begun here that are kept, 0 to 1 (1 or more keeps all, 0 or less none); a caller's sampling decision (`traceparent` or B3) is followed | `1` |
//! | `TRACING_EXPORTER_PROTOCOL` | `http` (OTLP/HTTP, protobuf) or `grpc` | `http` |
//! | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | the URL spans are sent to, as written | |
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | the collector's base URL: `/v1/traces` is added for `http` | `http://localhost:4318` (`http`), `http://localhost:4317` (`grpc`) |
//! | `OTEL_EXPORTER_OTLP_[TRACES_]INSECURE` | `grpc`: an endpoint without a scheme is plain `http://` (else `https://`) | `false` |
//! | `OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE` | over TLS (an `https://` endpoint, either protocol): the collector's CAs (PEM; unset, the system's roots) | |
//! | `OTEL_EXPORTER_OTLP_[TRACES_]CLIENT_CERTIFICATE`, `…_CLIENT_KEY` | over TLS: this service's certificate and key (PEM), for mutual TLS | |
//! | `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT` | how long one export may take, in milliseconds; read here for the HTTPS client as the exporter reads it (a value that is not a whole number is ignored) | `10000` |
//!
//! The SDK's own variables that change what spans carry (`OTEL_RESOURCE_ATTRIBUTES`, the span
//! limits) are read by [`sdk`].
//!
//! A `TRACES_` variable is preferred to its general form. With `http`, the endpoint is an
//! `http://` URL (sent in the clear) or an `https://` one (sent over TLS). The exporter itself
//! (the `opentelemetry-otlp` crate) also reads `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`,
//! `…_TIMEOUT` and `…_COMPRESSION`, and the batch processor `OTEL_BSP_*`, as the
//! OpenTelemetry specification defines them.

use std::path::PathBuf;
use std::time::Duration;

use super::{EnvError, Environment};

pub mod sdk;

pub use self::sdk::{SdkSettings, SpanLimits};

/// How spans are sent to the collector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceProtocol {
    /// OTLP over HTTP, protobuf bodies (upstream's default).
    Http,
    /// OTLP over gRPC.
    Grpc,
}

impl TraceProtocol {
    /// The name `TRACING_EXPORTER_PROTOCOL` takes.
    pub fn name(self) -> &'static str {
        match self {
            TraceProtocol::Http => "http",
            TraceProtocol::Grpc => "grpc",
        }
    }
}

/// The certificates of OTLP over TLS, gRPC or HTTP (each a PEM file).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceTls {
    /// The CAs the collector's certificate is checked against; unset, the system's roots.
    pub ca: Option<PathBuf>,
    /// This service's certificate chain, for mutual TLS (set with `client_key`).
    pub client_cert: Option<PathBuf>,
    /// Its private key.
    pub client_key: Option<PathBuf>,
}

/// Traces on: where and how spans go (see the [module documentation](self)).
#[derive(Clone, Debug, PartialEq)]
pub struct Traces {
    /// `TRACING_EXPORTER_PROTOCOL`.
    pub protocol: TraceProtocol,
    /// The URL spans are sent to, resolved from the `OTEL_EXPORTER_OTLP_*` endpoints.
    pub endpoint: String,
    /// The variable `endpoint` came from (`None`: the default), for messages.
    pub endpoint_variable: Option<&'static str>,
    /// `service.name`.
    pub service_name: String,
    /// `service.namespace` (empty: not sent).
    pub service_namespace: String,
    /// `service.instance.id`.
    pub service_instance_id: String,
    /// The share of root traces kept: 1 or more keeps every one, 0 or less none.
    pub sampling_rate: f64,
    /// Over TLS: the certificates (all unset: the system's roots, no client certificate).
    pub tls: TraceTls,
    /// How long one export may take (the HTTPS client's bound on a request).
    pub timeout: Duration,
    /// The SDK's own variables: the resource's other attributes and the span limits.
    pub sdk: SdkSettings,
}

impl Traces {
    /// The trace settings `env` gives: `None` unless `TRACING_ENABLED` is true. An error names
    /// the variable and its value: a protocol other than `http` and `grpc`, a rate that is not
    /// a number, an endpoint for OTLP over HTTP that is not an `http://` or `https://` URL, or
    /// half of a client key pair.
    pub fn read(env: &Environment) -> Result<Option<Traces>, EnvError> {
        if !env.bool_or("TRACING_ENABLED", false)? {
            return Ok(None);
        }
        let protocol = match env.string("TRACING_EXPORTER_PROTOCOL") {
            None | Some("" | "http") => TraceProtocol::Http,
            Some("grpc") => TraceProtocol::Grpc,
            Some(other) => {
                return Err(EnvError::new(
                    "TRACING_EXPORTER_PROTOCOL",
                    other,
                    "`http` or `grpc`",
                ))
            }
        };
        let (endpoint, endpoint_variable) = endpoint(env, protocol)?;
        let tls = TraceTls {
            ca: file(env, "CERTIFICATE"),
            client_cert: file(env, "CLIENT_CERTIFICATE"),
            client_key: file(env, "CLIENT_KEY"),
        };
        if tls.client_cert.is_some() != tls.client_key.is_some() {
            let missing = if tls.client_cert.is_some() {
                "OTEL_EXPORTER_OTLP_CLIENT_KEY"
            } else {
                "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"
            };
            return Err(EnvError {
                variable: missing.into(),
                shown: "unset".into(),
                expected: "set: a client certificate and its key go together".into(),
            });
        }
        let instance = env.string_or("TRACING_SERVICE_INSTANCE_ID", "");
        Ok(Some(Traces {
            protocol,
            endpoint,
            endpoint_variable,
            service_name: env.string_or("TRACING_SERVICE_NAME", "RateLimit"),
            service_namespace: env.string_or("TRACING_SERVICE_NAMESPACE", ""),
            service_instance_id: if instance.is_empty() {
                random_uuid()
            } else {
                instance
            },
            sampling_rate: env.float("TRACING_SAMPLING_RATE")?.unwrap_or(1.0),
            tls,
            timeout: timeout(env),
            sdk: SdkSettings::read(env)?,
        }))
    }

    /// The endpoint without credentials, query or path: what a log line may show.
    pub fn endpoint_shown(&self) -> String {
        let (scheme, rest) = self
            .endpoint
            .split_once("://")
            .unwrap_or(("", &self.endpoint));
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let host = authority.rsplit('@').next().unwrap_or_default();
        if scheme.is_empty() {
            host.to_string()
        } else {
            format!("{scheme}://{host}")
        }
    }
}

/// The endpoint spans go to and the variable it came from, as the OTLP exporter
/// specification resolves it.
fn endpoint(
    env: &Environment,
    protocol: TraceProtocol,
) -> Result<(String, Option<&'static str>), EnvError> {
    const TRACES: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
    const GENERAL: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
    let set = |name| env.string(name).filter(|v| !v.is_empty());
    let (url, variable) = match (set(TRACES), set(GENERAL), protocol) {
        (Some(url), _, _) => (url.to_string(), Some(TRACES)),
        (None, Some(base), TraceProtocol::Http) => (
            format!("{}/v1/traces", base.trim_end_matches('/')),
            Some(GENERAL),
        ),
        (None, Some(base), TraceProtocol::Grpc) => (base.to_string(), Some(GENERAL)),
        (None, None, TraceProtocol::Http) => ("http://localhost:4318/v1/traces".into(), None),
        (None, None, TraceProtocol::Grpc) => ("http://localhost:4317".into(), None),
    };
    let has_scheme = url
        .split_once("://")
        .is_some_and(|(scheme, _)| !scheme.contains(['/', '?', '#']));
    let url = match protocol {
        TraceProtocol::Grpc if !has_scheme => {
            let insecure = match env.bool("OTEL_EXPORTER_OTLP_TRACES_INSECURE")? {
                Some(insecure) => insecure,
                None => env.bool_or("OTEL_EXPORTER_OTLP_INSECURE", false)?,
            };
            format!("{}://{url}", if insecure { "http" } else { "https" })
        }
        _ => url,
    };
    if protocol == TraceProtocol::Http
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(EnvError::new(
            variable.unwrap_or(GENERAL),
            &url,
            "an http:// or https:// URL (OTLP over HTTP)",
        ));
    }
    Ok((url, variable))
}

/// How long one export may take, as the exporter resolves it: the `TRACES_` variable, else
/// the general one, each a whole number of milliseconds (any other value is passed over,
/// as the exporter passes it over), else 10 s.
fn timeout(env: &Environment) -> Duration {
    [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .into_iter()
    .find_map(|name| env.string(name).and_then(|v| v.parse::<u64>().ok()))
    .map_or(Duration::from_secs(10), Duration::from_millis)
}

/// `OTEL_EXPORTER_OTLP_TRACES_{name}`, else `OTEL_EXPORTER_OTLP_{name}`, as a path.
fn file(env: &Environment, name: &str) -> Option<PathBuf> {
    set_name(env, name).and_then(|variable| env.string(variable).map(PathBuf::from))
}

/// The name of the variable that sets `name` (the `TRACES_` form first), if one is set and
/// not empty.
fn set_name(env: &Environment, name: &str) -> Option<&'static str> {
    let names: &[&'static str] = match name {
        "CERTIFICATE" => &[
            "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
        ],
        "CLIENT_CERTIFICATE" => &[
            "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
        ],
        _ => &[
            "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
            "OTEL_EXPORTER_OTLP_CLIENT_KEY",
        ],
    };
    names
        .iter()
        .copied()
        .find(|n| env.string(n).is_some_and(|v| !v.is_empty()))
}

/// A version 4 UUID, as upstream's default instance id.
fn random_uuid() -> String {
    let mut bytes: [u8; 16] = rand::random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&str, &str)]) -> Result<Option<Traces>, EnvError> {
        Traces::read(&Environment::from_pairs(pairs.iter().copied()))
    }

    #[test]
    fn off_unless_enabled() {
        assert_eq!(read(&[]), Ok(None));
        assert_eq!(read(&[("TRACING_ENABLED", "false")]), Ok(None));
        assert!(read(&[("TRACING_ENABLED", "yes")]).is_err());
    }

    #[test]
    fn upstreams_defaults() {
        let traces = read(&[("TRACING_ENABLED", "true")]).unwrap().unwrap();
        assert_eq!(traces.protocol, TraceProtocol::Http);
        assert_eq!(traces.endpoint, "http://localhost:4318/v1/traces");
        assert_eq!(traces.endpoint_variable, None);
        assert_eq!(traces.service_name, "RateLimit");
        assert_eq!(traces.service_namespace, "");
        assert_eq!(traces.sampling_rate, 1.0);
        let id = &traces.service_instance_id;
        assert_eq!(id.len(), 36, "{id}");
        assert_eq!(&id[14..15], "4", "a version 4 UUID: {id}");
        let other = read(&[("TRACING_ENABLED", "true")]).unwrap().unwrap();
        assert_ne!(other.service_instance_id, *id, "random each time");
    }

    #[test]
    fn envoy_gateways_settings() {
        // What Envoy Gateway sets when its rate limit has a tracing provider.
        let traces = read(&[
            ("TRACING_ENABLED", "true"),
            ("TRACING_SERVICE_NAME", "envoy-ratelimit"),
            ("TRACING_SERVICE_NAMESPACE", "envoy-gateway-system"),
            ("TRACING_SERVICE_INSTANCE_ID", "envoy-ratelimit-7d9c-x2"),
            ("TRACING_SAMPLING_RATE", "0.5"),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "http://otel-collector.monitoring:4318/",
            ),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            traces.endpoint,
            "http://otel-collector.monitoring:4318/v1/traces"
        );
        assert_eq!(
            traces.endpoint_variable,
            Some("OTEL_EXPORTER_OTLP_ENDPOINT")
        );
        assert_eq!(traces.service_name, "envoy-ratelimit");
        assert_eq!(traces.service_namespace, "envoy-gateway-system");
        assert_eq!(traces.service_instance_id, "envoy-ratelimit-7d9c-x2");
        assert_eq!(traces.sampling_rate, 0.5);
    }

    #[test]
    fn endpoints_resolve_as_the_specification_says() {
        let grpc = |extra: &[(&str, &str)]| {
            let mut pairs = vec![
                ("TRACING_ENABLED", "true"),
                ("TRACING_EXPORTER_PROTOCOL", "grpc"),
            ];
            pairs.extend_from_slice(extra);
            read(&pairs).map(|t| t.unwrap().endpoint)
        };
        assert_eq!(grpc(&[]).unwrap(), "http://localhost:4317");
        assert_eq!(
            grpc(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")]).unwrap(),
            "https://collector:4317",
            "no scheme and not insecure: TLS"
        );
        assert_eq!(
            grpc(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
                ("OTEL_EXPORTER_OTLP_INSECURE", "true")
            ])
            .unwrap(),
            "http://collector:4317"
        );
        assert_eq!(
            grpc(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:1"),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:2")
            ])
            .unwrap(),
            "http://b:2",
            "the signal's own variable first"
        );
        let http = read(&[
            ("TRACING_ENABLED", "true"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/custom"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(http.endpoint, "http://c:4318/custom", "used as written");
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = read(&[
            ("TRACING_ENABLED", "true"),
            ("TRACING_EXPORTER_PROTOCOL", "udp"),
        ])
        .unwrap_err();
        assert_eq!(e.variable, "TRACING_EXPORTER_PROTOCOL");
        let e = read(&[
            ("TRACING_ENABLED", "true"),
            ("TRACING_SAMPLING_RATE", "half"),
        ])
        .unwrap_err();
        assert_eq!(e.variable, "TRACING_SAMPLING_RATE");
        let e = read(&[
            ("TRACING_ENABLED", "true"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "collector:4318/v1/traces",
            ),
        ])
        .unwrap_err();
        assert_eq!(e.variable, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        assert!(e.expected.contains("https://"), "{e}");
        let e = read(&[
            ("TRACING_ENABLED", "true"),
            ("TRACING_EXPORTER_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "/c.pem"),
        ])
        .unwrap_err();
        assert_eq!(e.variable, "OTEL_EXPORTER_OTLP_CLIENT_KEY");
    }

    #[test]
    fn otlp_over_https_takes_the_certificates_and_the_timeout() {
        let traces = read(&[
            ("TRACING_ENABLED", "true"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/ca.pem"),
            ("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "/c.pem"),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/c.key"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(traces.protocol, TraceProtocol::Http);
        assert_eq!(traces.endpoint, "https://collector:4318/v1/traces");
        assert_eq!(traces.tls.ca, Some(PathBuf::from("/ca.pem")));
        assert_eq!(traces.tls.client_cert, Some(PathBuf::from("/c.pem")));
        assert_eq!(traces.tls.client_key, Some(PathBuf::from("/c.key")));
        assert_eq!(traces.timeout, Duration::from_millis(2500));
        let timeout = |pairs: &[(&str, &str)]| {
            let mut all = vec![("TRACING_ENABLED", "true")];
            all.extend_from_slice(pairs);
            read(&all).unwrap().unwrap().timeout
        };
        assert_eq!(timeout(&[]), Duration::from_secs(10));
        assert_eq!(
            timeout(&[
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
                ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "700")
            ]),
            Duration::from_millis(700)
        );
        assert_eq!(
            timeout(&[
                ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "soon"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500")
            ]),
            Duration::from_millis(2500),
            "as the exporter: a value that is not a number is passed over"
        );
    }

    #[test]
    fn the_shown_endpoint_holds_no_credentials() {
        let traces = read(&[
            ("TRACING_ENABLED", "true"),
            ("TRACING_EXPORTER_PROTOCOL", "grpc"),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "https://user:secret@collector:4317/x?token=secret",
            ),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(traces.endpoint_shown(), "https://collector:4317");
    }
}
