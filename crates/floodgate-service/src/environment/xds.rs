//! envoyproxy/ratelimit's settings of configuration over xDS (`CONFIG_TYPE=GRPC_XDS_SOTW`):
//! the control plane's address and TLS, the node this service says it is, and how it retries.
//! Defaults are upstream's.

use std::path::PathBuf;
use std::time::Duration;

use super::upstream::{key_pair, path, UpstreamError};
use super::Environment;

/// Configuration over xDS.
#[derive(Clone, Debug, PartialEq)]
pub struct Xds {
    /// `CONFIG_GRPC_XDS_SERVER_URL`: the control plane, `host:port` (default
    /// `localhost:18000`).
    pub server_url: String,
    /// `CONFIG_GRPC_XDS_NODE_ID`: the node id the control plane serves a snapshot for
    /// (default `default`).
    pub node_id: String,
    /// `CONFIG_GRPC_XDS_NODE_METADATA`: `k1=v1,k2=v2`, the node's metadata, each value a string.
    pub node_metadata: Vec<(String, String)>,
    /// `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS`: `k1:v1,k2:v2`, gRPC metadata sent on the
    /// stream (a control plane's authentication, say).
    pub headers: Vec<(String, String)>,
    /// `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`: how long one attempt to connect may
    /// take (default 3 s).
    pub connect_timeout: Duration,
    /// `CONFIG_GRPC_XDS_SERVER_USE_TLS=true`: TLS to the control plane.
    pub tls: Option<XdsTls>,
    /// `XDS_CLIENT_BACKOFF_*`: the wait between attempts after a failure.
    pub backoff: Backoff,
    /// `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES`: the largest response taken, in bytes (unset: 4 MiB,
    /// gRPC's default).
    pub max_message_bytes: Option<usize>,
}

/// TLS to the control plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdsTls {
    /// `CONFIG_GRPC_XDS_CLIENT_TLS_CERT`: this service's certificate chain (PEM), for mutual
    /// TLS.
    pub client_cert: Option<PathBuf>,
    /// `CONFIG_GRPC_XDS_CLIENT_TLS_KEY`: its private key (PEM).
    pub client_key: Option<PathBuf>,
    /// `CONFIG_GRPC_XDS_SERVER_TLS_CACERT`: the CAs the control plane's certificate is checked
    /// against (PEM); unset, the system's roots.
    pub server_ca: Option<PathBuf>,
    /// `CONFIG_GRPC_XDS_SERVER_TLS_SAN`: the name the control plane's certificate must hold;
    /// unset, the host of the server URL.
    pub server_san: Option<String>,
}

/// The wait between attempts to reach the control plane, as upstream computes it
/// (jpillora/backoff): attempt `n` (from 0) waits `initial × factor^n`, at most `max` and at
/// least `initial`; with `jitter`, a uniform draw between `initial` and that. Upstream passes
/// `XDS_CLIENT_BACKOFF_RANDOM_FACTOR` as the factor, so its default of 0.5 waits `initial`
/// every time; a factor above 1 grows the wait. The attempt count starts again once a
/// stream has delivered a response.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    /// `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL` (default 10 s).
    pub initial: Duration,
    /// `XDS_CLIENT_BACKOFF_MAX_INTERVAL` (default 60 s).
    pub max: Duration,
    /// `XDS_CLIENT_BACKOFF_RANDOM_FACTOR` (default 0.5; 0 or less means 2, as upstream's
    /// backoff reads it).
    pub factor: f64,
    /// `XDS_CLIENT_BACKOFF_JITTER` (default true).
    pub jitter: bool,
}

/// Upstream's default bound on one attempt to connect
/// (`CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

impl Backoff {
    /// Upstream's defaults: 10 s, at most 60 s, factor 0.5, with jitter.
    pub const UPSTREAM: Backoff = Backoff {
        initial: Duration::from_secs(10),
        max: Duration::from_secs(60),
        factor: 0.5,
        jitter: true,
    };

    /// The wait before attempt `attempt` (0 for the first retry), with `draw` a uniform
    /// number in `[0, 1)` for the jitter.
    pub fn wait(&self, attempt: u32, draw: f64) -> Duration {
        let factor = if self.factor <= 0.0 { 2.0 } else { self.factor };
        let initial = self.initial.as_secs_f64();
        let max = self.max.as_secs_f64().max(initial);
        let grown = (initial * factor.powi(attempt.min(1_000) as i32)).clamp(initial, max);
        let secs = if self.jitter {
            initial + draw.clamp(0.0, 1.0) * (grown - initial)
        } else {
            grown
        };
        Duration::from_secs_f64(secs)
    }
}

impl Xds {
    /// The xDS settings, when `CONFIG_TYPE` is `GRPC_XDS_SOTW`.
    pub(super) fn read(env: &Environment) -> Result<Option<Xds>, UpstreamError> {
        if env.string("CONFIG_TYPE") != Some("GRPC_XDS_SOTW") {
            return Ok(None);
        }
        let path = |name: &str| path(env, name);
        let tls = if env.bool_or("CONFIG_GRPC_XDS_SERVER_USE_TLS", false)? {
            let tls = XdsTls {
                client_cert: path("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"),
                client_key: path("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"),
                server_ca: path("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"),
                server_san: env
                    .string("CONFIG_GRPC_XDS_SERVER_TLS_SAN")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            };
            key_pair(
                ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", &tls.client_cert),
                ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", &tls.client_key),
            )?;
            Some(tls)
        } else {
            None
        };
        let max_message_bytes: Option<usize> = env.int("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES")?;
        let default = Backoff::UPSTREAM;
        Ok(Some(Xds {
            server_url: env.string_or("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"),
            node_id: env.string_or("CONFIG_GRPC_XDS_NODE_ID", "default"),
            node_metadata: node_metadata(env)?,
            headers: env.map("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")?,
            connect_timeout: env.duration_or(
                "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
                CONNECT_TIMEOUT,
            )?,
            tls,
            backoff: Backoff {
                initial: env.duration_or("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", default.initial)?,
                max: env.duration_or("XDS_CLIENT_BACKOFF_MAX_INTERVAL", default.max)?,
                factor: env
                    .float("XDS_CLIENT_BACKOFF_RANDOM_FACTOR")?
                    .unwrap_or(default.factor),
                jitter: env.bool_or("XDS_CLIENT_BACKOFF_JITTER", default.jitter)?,
            },
            max_message_bytes: max_message_bytes.filter(|n| *n > 0),
        }))
    }
}

/// `CONFIG_GRPC_XDS_NODE_METADATA`: `k1=v1,k2=v2` (a value may hold `=`). Upstream drops an
/// item without `=` silently; it is refused here, naming it, since its meaning is lost.
fn node_metadata(env: &Environment) -> Result<Vec<(String, String)>, UpstreamError> {
    let Some(value) = env
        .string("CONFIG_GRPC_XDS_NODE_METADATA")
        .filter(|v| !v.is_empty())
    else {
        return Ok(Vec::new());
    };
    value
        .split(',')
        .map(|item| match item.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(UpstreamError::refused(
                "CONFIG_GRPC_XDS_NODE_METADATA",
                format!("`{item}` is not `key=value` (the list is k1=v1,k2=v2)"),
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Environment {
        Environment::from_pairs(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn upstreams_defaults() {
        let xds = Xds::read(&env(&[("CONFIG_TYPE", "GRPC_XDS_SOTW")]))
            .unwrap()
            .unwrap();
        assert_eq!(xds.server_url, "localhost:18000");
        assert_eq!(xds.node_id, "default");
        assert_eq!(xds.connect_timeout, Duration::from_secs(3));
        assert_eq!(xds.tls, None);
        assert_eq!(
            xds.backoff,
            Backoff {
                initial: Duration::from_secs(10),
                max: Duration::from_secs(60),
                factor: 0.5,
                jitter: true
            }
        );
        assert_eq!(Xds::read(&env(&[("CONFIG_TYPE", "FILE")])).unwrap(), None);
    }

    #[test]
    fn envoy_gateways_settings_are_read() {
        let xds = Xds::read(&env(&[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
            ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
            ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a,build=x=y"),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(xds.server_url, "envoy-gateway:18001");
        assert_eq!(
            xds.node_metadata,
            vec![("zone".into(), "a".into()), ("build".into(), "x=y".into())]
        );
        let tls = xds.tls.unwrap();
        assert_eq!(tls.client_cert, Some(PathBuf::from("/certs/tls.crt")));
        assert_eq!(tls.server_ca, Some(PathBuf::from("/certs/ca.crt")));
        assert_eq!(tls.server_san, None);
    }

    #[test]
    fn half_a_key_pair_and_a_bad_metadata_item_are_refused_by_name() {
        let error = Xds::read(&env(&[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(error.contains("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"), "{error}");
        let error = Xds::read(&env(&[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a,oops"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(error.contains("`oops`"), "{error}");
    }

    #[test]
    fn the_backoff_waits_as_upstreams_does() {
        let mut b = Backoff {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(60),
            factor: 0.5,
            jitter: true,
        };
        // Upstream's default factor never grows the wait.
        for attempt in 0..5 {
            assert_eq!(b.wait(attempt, 0.9), Duration::from_secs(10));
        }
        b.factor = 2.0;
        b.jitter = false;
        let waits: Vec<u64> = (0..5).map(|n| b.wait(n, 0.0).as_secs()).collect();
        assert_eq!(waits, [10, 20, 40, 60, 60]);
        b.jitter = true;
        assert_eq!(b.wait(2, 0.0), Duration::from_secs(10));
        assert_eq!(b.wait(2, 0.5), Duration::from_secs(25));
        b.factor = 0.0;
        assert_eq!(b.wait(1, 1.0), Duration::from_secs(20));
    }
}
