//! Configuration pushed over xDS (envoyproxy/ratelimit's `CONFIG_TYPE=GRPC_XDS_SOTW`): the
//! control plane sends every `ratelimit.config.ratelimit.v3.RateLimitConfig` resource at once
//! (state of the world), each one domain.
//!
//! # How a set of resources becomes a configuration
//!
//! Each resource is read into the same model as an envoyproxy/ratelimit domain file
//! ([`DomainConfig`]) and checked by the same rules; an error names the resource and the field
//! as the file would (`xDS resource "api": descriptors[0].rate_limit.unit: …`). The fields map
//! one to one, with what protobuf cannot say read as upstream reads it:
//!
//! - an empty `value` or `name` is an absent one;
//! - the unit `UNKNOWN` (0) is no unit: refused unless the limit is `unlimited`;
//! - `requests_per_unit` 0 is 0 (every request over the limit, upstream's way to block a
//!   descriptor) unless the limit is `unlimited`, where upstream ignores it;
//! - `metadata` is the JSON object the `Struct` holds;
//!
//! Domains in several resources are refused, or merged with `rls.merge_domains`
//! (`MERGE_DOMAIN_CONFIG`), as the files of a runtime directory are. The rest of the
//! configuration (pipeline, plans, named limits) is the built-in one, as for a runtime
//! directory (none under upstream's variables), or, when a Floodgate file names the control
//! plane ([`XdsConfig`], `xds:`), the file's own sections, read again at every reload.
//!
//! # The source
//!
//! [`XdsSource`] is where the service's configuration comes from when it is pushed: the server
//! it comes from, and the last set of resources it accepted, which [`XdsSource::load`] turns
//! into a configuration as a file source reads its file. The xDS client proposes each new set
//! with [`XdsSource::candidate`], and keeps it with [`XdsSource::accept`] only once the service
//! runs it; a refused set leaves the last good one in place.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::{Map, Value};

use super::directory::{domains_only, merge_domains, Definition, Place};
use super::envoy::{self, DescriptorConfig, DomainConfig, RateLimitConfig};
use super::{Config, ConfigFileError, Overrides};
use crate::proto::ratelimit::config::ratelimit::v3 as pb;

/// `xds:` in a Floodgate file: its Envoy domains come from this control plane, and the rest
/// of the file (pipeline, plans, named limits, store, …) is served beside them. The file
/// then holds no `domains`. Read at start-up; the client is the one envoyproxy/ratelimit's
/// variables start (`crate::xds`), with upstream's backoff (10 s, at most 60 s).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XdsConfig {
    /// The control plane, `host:port`.
    pub server: String,
    /// The node id this service subscribes as (default `floodgate`).
    #[serde(default = "default_node_id")]
    pub node_id: String,
    /// The node's metadata, string values.
    #[serde(default)]
    pub node_metadata: BTreeMap<String, String>,
    /// TLS to the control plane: on when given.
    #[serde(default)]
    pub tls: Option<XdsTlsConfig>,
    /// Serve before a first set of resources arrives (not ready until then), as upstream's
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG`; by default nothing is served before.
    #[serde(default)]
    pub start_without: bool,
}

/// TLS to the control plane (`xds.tls`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct XdsTlsConfig {
    /// The CAs its certificate is checked against (PEM); without it, the system's.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// This service's certificate chain, for mutual TLS (PEM); with `key_file`.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// Its private key (PEM).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// The name its certificate must hold; without it, the host of `server`.
    #[serde(default)]
    pub server_name: Option<String>,
}

fn default_node_id() -> String {
    "floodgate".to_string()
}

/// The type URL of the resources (`type.googleapis.com/` and the message's full name).
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// A set of resources as one response carried them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pushed {
    /// The response's `version_info`.
    pub version: String,
    /// Every resource, decoded.
    pub resources: Vec<pb::RateLimitConfig>,
}

/// Configuration pushed over xDS (see the [module documentation](self)). Clones share the
/// accepted set.
#[derive(Clone, Debug, Default)]
pub struct XdsSource {
    /// The control plane's address, as `CONFIG_GRPC_XDS_SERVER_URL` gives it.
    pub server_url: String,
    /// The node id this service asks for (`CONFIG_GRPC_XDS_NODE_ID`).
    pub node_id: String,
    /// The Floodgate file that names the control plane (`xds:`), whose other sections are
    /// served beside the pushed domains; `None` under upstream's variables.
    pub file: Option<PathBuf>,
    accepted: Arc<Mutex<Option<Pushed>>>,
}

impl PartialEq for XdsSource {
    fn eq(&self, other: &XdsSource) -> bool {
        self.server_url == other.server_url
            && self.node_id == other.node_id
            && self.file == other.file
    }
}

impl Eq for XdsSource {}

impl XdsSource {
    /// A source of `node_id`'s configuration from the control plane at `server_url`, with
    /// nothing accepted yet.
    pub fn new(server_url: impl Into<String>, node_id: impl Into<String>) -> XdsSource {
        XdsSource {
            server_url: server_url.into(),
            node_id: node_id.into(),
            file: None,
            accepted: Arc::default(),
        }
    }

    /// The source of a Floodgate `file` that names a control plane (`xds:`): the file's
    /// sections with the domains pushed.
    pub fn over_file(file: PathBuf, xds: &XdsConfig) -> XdsSource {
        XdsSource {
            file: Some(file),
            ..XdsSource::new(&xds.server, &xds.node_id)
        }
    }

    /// The version of the set the service runs, once one was accepted.
    pub fn version(&self) -> Option<String> {
        self.lock().as_ref().map(|p| p.version.clone())
    }

    /// The configuration of the last set accepted, with `overrides` applied;
    /// [`ConfigFileError::NotReceived`] before the first.
    pub fn load(&self, overrides: &Overrides) -> Result<Config, ConfigFileError> {
        let accepted = self.lock().clone();
        match accepted {
            Some(pushed) => self.candidate(&pushed, overrides),
            None => Err(ConfigFileError::NotReceived {
                server: self.server_url.clone(),
            }),
        }
    }

    /// The configuration `pushed` would give, checked, with `overrides` applied: what the
    /// client tries before it accepts the set. With a Floodgate file, the file is read again.
    pub fn candidate(
        &self,
        pushed: &Pushed,
        overrides: &Overrides,
    ) -> Result<Config, ConfigFileError> {
        match &self.file {
            None => config_of(&pushed.resources, overrides),
            Some(file) => {
                let mut config = Config::load_with(file, overrides)?;
                config.domains =
                    merge_domains(definitions(&pushed.resources)?, config.rls.merge_domains)?;
                Ok(config)
            }
        }
    }

    /// Keeps `pushed` as the set the service runs.
    pub fn accept(&self, pushed: Pushed) {
        *self.lock() = Some(pushed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Pushed>> {
        self.accepted.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The configuration of `resources` (see the [module documentation](self)).
pub fn config_of(
    resources: &[pb::RateLimitConfig],
    overrides: &Overrides,
) -> Result<Config, ConfigFileError> {
    domains_only(definitions(resources)?, overrides)
}

/// Each resource's domain, checked, and where it comes from.
fn definitions(resources: &[pb::RateLimitConfig]) -> Result<Vec<Definition>, ConfigFileError> {
    let mut definitions = Vec::with_capacity(resources.len());
    for resource in resources {
        let domain = domain_of(resource).map_err(|error| ConfigFileError::InResource {
            resource: resource.name.clone(),
            error: Box::new(error),
        })?;
        definitions.push(Definition {
            place: Place {
                file: Some(PathBuf::from(format!("xDS resource \"{}\"", resource.name))),
                path: String::new(),
            },
            domain,
        });
    }
    Ok(definitions)
}

/// One resource's domain, checked as a domain file is.
fn domain_of(resource: &pb::RateLimitConfig) -> Result<DomainConfig, ConfigFileError> {
    let domain = DomainConfig {
        domain: resource.domain.clone(),
        descriptors: resource.descriptors.iter().map(descriptor_of).collect(),
    };
    envoy::compile_domains(std::slice::from_ref(&domain)).map_err(strip_domain_index)?;
    Ok(domain)
}

/// `compile_domains` names fields from `domains[0].`: one resource is one domain, so its
/// fields are named from the resource's top level, as a domain file's are.
fn strip_domain_index(error: ConfigFileError) -> ConfigFileError {
    match error {
        ConfigFileError::Invalid { path, message } => ConfigFileError::Invalid {
            path: path
                .strip_prefix("domains[0].")
                .map(str::to_string)
                .unwrap_or(path),
            message,
        },
        other => other,
    }
}

/// One descriptor, as a domain file would write it.
fn descriptor_of(d: &pb::RateLimitDescriptor) -> DescriptorConfig {
    DescriptorConfig {
        key: d.key.clone(),
        value: non_empty(&d.value),
        rate_limit: d.rate_limit.as_ref().map(rate_limit_of),
        shadow_mode: d.shadow_mode,
        quota_mode: d.quota_mode,
        detailed_metric: d.detailed_metric,
        metadata: d.metadata.as_ref().map(object_of),
        descriptors: d.descriptors.iter().map(descriptor_of).collect(),
        ..DescriptorConfig::default()
    }
}

/// A descriptor's limit.
fn rate_limit_of(p: &pb::RateLimitPolicy) -> RateLimitConfig {
    let unit = match pb::RateLimitUnit::try_from(p.unit) {
        Ok(pb::RateLimitUnit::Unknown) => None,
        Ok(unit) => Some(unit.as_str_name().to_ascii_lowercase()),
        // A number this proto does not know: named as it came, refused when compiled.
        Err(_) => Some(format!("unit number {}", p.unit)),
    };
    RateLimitConfig {
        unit,
        requests_per_unit: (!p.unlimited).then_some(p.requests_per_unit),
        unlimited: p.unlimited,
        name: non_empty(&p.name),
        replaces: p.replaces.iter().map(|r| r.name.clone()).collect(),
        algorithm: None,
    }
}

fn non_empty(text: &str) -> Option<String> {
    (!text.is_empty()).then(|| text.to_string())
}

/// The JSON object a protobuf `Struct` holds.
fn object_of(s: &prost_types::Struct) -> Map<String, Value> {
    s.fields
        .iter()
        .map(|(k, v)| (k.clone(), value_of(v)))
        .collect()
}

fn value_of(v: &prost_types::Value) -> Value {
    use prost_types::value::Kind;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) => {
            serde_json::Number::from_f64(*n).map_or(Value::Null, Value::Number)
        }
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::StructValue(s)) => Value::Object(object_of(s)),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(value_of).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(
        name: &str,
        domain: &str,
        descriptors: Vec<pb::RateLimitDescriptor>,
    ) -> pb::RateLimitConfig {
        pb::RateLimitConfig {
            name: name.into(),
            domain: domain.into(),
            descriptors,
        }
    }

    fn limited(key: &str, unit: pb::RateLimitUnit, rpu: u32) -> pb::RateLimitDescriptor {
        pb::RateLimitDescriptor {
            key: key.into(),
            rate_limit: Some(pb::RateLimitPolicy {
                unit: unit as i32,
                requests_per_unit: rpu,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn overrides() -> Overrides {
        Overrides {
            without_example: true,
            ..Overrides::default()
        }
    }

    #[test]
    fn resources_read_as_the_domain_files_they_stand_for() {
        let yaml = "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5, name: per_user}\n    shadow_mode: true\n";
        let from_file = DomainConfig::from_yaml_str(yaml).unwrap();
        let mut d = limited("user", pb::RateLimitUnit::Minute, 5);
        d.shadow_mode = true;
        d.rate_limit.as_mut().unwrap().name = "per_user".into();
        let from_xds = domain_of(&resource("r", "api", vec![d])).unwrap();
        assert_eq!(from_xds, from_file);
    }

    #[test]
    fn what_protobuf_cannot_say_reads_as_upstream_reads_it() {
        let mut unlimited = limited("free", pb::RateLimitUnit::Unknown, 7);
        unlimited.rate_limit.as_mut().unwrap().unlimited = true;
        let blocked = limited("blocked", pb::RateLimitUnit::Hour, 0);
        let config = config_of(
            &[resource("r", "api", vec![unlimited, blocked])],
            &overrides(),
        )
        .unwrap();
        let d = &config.domains[0].descriptors;
        let free = d[0].rate_limit.as_ref().unwrap();
        assert!(free.unlimited && free.unit.is_none() && free.requests_per_unit.is_none());
        let blocked = d[1].rate_limit.as_ref().unwrap();
        assert_eq!(blocked.requests_per_unit, Some(0));
        assert_eq!(blocked.unit.as_deref(), Some("hour"));
        assert_eq!(d[0].value, None);
    }

    #[test]
    fn errors_name_the_resource_and_the_field() {
        let no_unit = limited("user", pb::RateLimitUnit::Unknown, 5);
        let error = config_of(
            &[resource("api-limits", "api", vec![no_unit])],
            &overrides(),
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("api-limits"), "{error}");
        assert!(error.contains("descriptors[0].rate_limit.unit"), "{error}");
    }

    #[test]
    fn quota_mode_is_read_at_any_depth() {
        let mut quota = limited("user", pb::RateLimitUnit::Second, 5);
        quota.quota_mode = true;
        let nested = pb::RateLimitDescriptor {
            key: "org".into(),
            descriptors: vec![quota],
            ..Default::default()
        };
        let config = config_of(&[resource("q", "api", vec![nested])], &overrides()).unwrap();
        assert!(config.domains[0].descriptors[0].descriptors[0].quota_mode);
        let rules = config.rule_set().unwrap();
        let entries = [
            ("org".to_string(), "o".to_string()),
            ("user".to_string(), "u".to_string()),
        ];
        assert!(rules.lookup("api", &entries).unwrap().quota_mode());
    }

    #[test]
    fn one_domain_in_two_resources_is_refused_unless_merged() {
        let a = resource("a", "api", vec![limited("x", pb::RateLimitUnit::Second, 1)]);
        let b = resource("b", "api", vec![limited("y", pb::RateLimitUnit::Second, 1)]);
        let error = config_of(&[a.clone(), b.clone()], &overrides())
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("\"a\"") && error.contains("\"b\""),
            "{error}"
        );
        let merged = Overrides {
            merge_domains: true,
            ..overrides()
        };
        let config = config_of(&[a, b], &merged).unwrap();
        assert_eq!(config.domains.len(), 1);
        assert_eq!(config.domains[0].descriptors.len(), 2);
    }

    #[test]
    fn metadata_is_the_json_object_of_the_struct() {
        use prost_types::value::Kind;
        let mut d = limited("user", pb::RateLimitUnit::Second, 1);
        d.metadata = Some(prost_types::Struct {
            fields: [
                (
                    "tier".to_string(),
                    prost_types::Value {
                        kind: Some(Kind::StringValue("gold".into())),
                    },
                ),
                (
                    "weight".to_string(),
                    prost_types::Value {
                        kind: Some(Kind::NumberValue(2.5)),
                    },
                ),
            ]
            .into_iter()
            .collect(),
        });
        let domain = domain_of(&resource("r", "api", vec![d])).unwrap();
        let metadata = domain.descriptors[0].metadata.as_ref().unwrap();
        assert_eq!(metadata["tier"], "gold");
        assert_eq!(metadata["weight"], 2.5);
    }

    #[test]
    fn the_source_serves_the_accepted_set_and_nothing_before() {
        let source = XdsSource::new("127.0.0.1:18000", "node");
        let error = source.load(&overrides()).unwrap_err().to_string();
        assert!(error.contains("127.0.0.1:18000"), "{error}");
        let pushed = Pushed {
            version: "v1".into(),
            resources: vec![resource(
                "r",
                "api",
                vec![limited("x", pb::RateLimitUnit::Second, 1)],
            )],
        };
        source.candidate(&pushed, &overrides()).unwrap();
        assert_eq!(source.version(), None);
        source.accept(pushed);
        assert_eq!(source.version().as_deref(), Some("v1"));
        assert_eq!(source.load(&overrides()).unwrap().domains[0].domain, "api");
        // A clone shares what is accepted.
        let clone = source.clone();
        assert_eq!(clone.version().as_deref(), Some("v1"));
    }
}
