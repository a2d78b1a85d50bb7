//! envoyproxy/ratelimit's configuration format, and its import into a [`RuleSet`].
//!
//! A file in envoyproxy/ratelimit's format loads unchanged ([`DomainConfig`]); the same shape
//! is one entry of a native config's `domains`:
//!
//! ```yaml
//! domain: messaging
//! descriptors:
//!   - key: message_type
//!     value: marketing
//!     descriptors:
//!       - key: to_number
//!         rate_limit: { unit: day, requests_per_unit: 5 }
//!   - key: to_number
//!     rate_limit: { unit: day, requests_per_unit: 100 }
//! ```
//!
//! Each descriptor has a `key`, an optional `value` (exact; a value holding `*` is a wildcard
//! in which each `*` matches any run of characters, see
//! [`crate::descriptors::Wildcard`]; an empty value is the same as none), an optional
//! `rate_limit` (`unit` and `requests_per_unit`, or `unlimited: true`; optional `name` and
//! `replaces: [{name}]`), optional `shadow_mode: true`, optional `quota_mode: true` (over its
//! limit, the descriptor refuses the request only together with every other quota-mode
//! descriptor of it; with any algorithm), optional `share_threshold: true` (only
//! on a wildcard value: all values it matches share one counter), optional `metadata` (any
//! mapping, returned as the response's dynamic metadata when that is enabled), optional nested
//! `descriptors`, and `detailed_metric` and `value_to_metric`, which only change the names of
//! upstream's per-descriptor statistics ([`crate::descriptors::stats`]).
//! Floodgate adds three things: `unlimited: true` may also be written on the descriptor itself
//! (same meaning as `rate_limit: {unlimited: true}`); a `rate_limit` may name one of
//! Floodgate's algorithms instead of a unit (`{algorithm: token_bucket, rate: 10, capacity: 20}`,
//! any [`AlgorithmSpec`]), for example to allow bursts; and `all_or_nothing: true` makes a
//! descriptor count nothing for requests that another descriptor puts over the limit.
//!
//! Units are envoy's, case-insensitive: `second`, `minute`, `hour`, `day`, `week`, `month`,
//! `year`. A `unit` limit is a fixed window aligned to the clock's epoch
//! ([`FixedWindow`](floodgate::algorithm::fixed_window::FixedWindow)); as in
//! envoyproxy/ratelimit, a month is a window of 30 days and a year one of 365 days, both
//! counted from the epoch (not calendar months or years), and `requests_per_unit: 0` blocks the
//! descriptor outright (every request over the limit, nothing counted).
//!
//! How the compiled descriptors match requests and decide is in [`crate::descriptors`].
//!
//! # Validation
//!
//! A file is first checked as envoyproxy/ratelimit checks it (`shape`): every key is a string,
//! every list entry a mapping (`metadata` is free-form). Then refused when reading it
//! ([`ConfigFileError::Yaml`], with the field, line and column): bad YAML, an unknown key (named),
//! a value of the wrong type. Refused when compiling ([`compile_domains`], [`compile_file`]; [`ConfigFileError::Invalid`],
//! with the path of the field in the file): an empty domain, a domain listed twice, an empty
//! key, the same key and value twice at one level, a missing or unknown unit, a missing
//! `requests_per_unit` (envoyproxy/ratelimit reads it as 0, which blocks every request:
//! Floodgate asks for it to be written, `0` included), `unlimited` together with a unit, an
//! algorithm or (on the descriptor) a `rate_limit`, a `replaces` entry with an empty name or
//! naming its own limit, `share_threshold` on a value without `*`, a unit together with an
//! algorithm, invalid algorithm parameters, and a domain holding both an `all_or_nothing` and
//! a `quota_mode` descriptor. As in envoyproxy/ratelimit, an `unlimited`
//! limit may carry a `requests_per_unit`, which is ignored.

use std::collections::HashMap;

use floodgate::algorithm::spec::AlgorithmSpec;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

use super::ConfigFileError;
use crate::descriptors::keys::stat_key;
use crate::descriptors::{DescriptorTree, Limit, Rule, RuleSet, Wildcard};
use floodgate::algorithm::fixed_window::Unit;

/// One domain as written in a configuration file: envoyproxy/ratelimit's top level, or one
/// entry of a native config's `domains`. Checked by [`compile_domains`] and [`compile_file`].
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainConfig {
    /// The domain's name; must not be empty.
    #[serde(default)]
    pub domain: String,
    /// The top-level descriptors (`descriptors:` with nothing after it is an empty list).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub descriptors: Vec<DescriptorConfig>,
}

impl DomainConfig {
    /// Reads a file's text in envoyproxy/ratelimit's format: its shape (string keys, mappings
    /// in lists; [`ConfigFileError::Invalid`]), then its YAML and fields
    /// ([`ConfigFileError::Yaml`]); [`compile_file`] also checks the meaning.
    pub fn from_yaml_str(text: &str) -> Result<DomainConfig, ConfigFileError> {
        let tree: serde_norway::Value =
            serde_norway::from_str(text).map_err(|e| ConfigFileError::yaml(None, &e))?;
        shape::check(&tree)?;
        serde_norway::from_str(text).map_err(|e| ConfigFileError::yaml(None, &e))
    }
}

/// A list written with nothing after its key (`descriptors:`) reads as empty, as
/// envoyproxy/ratelimit reads it.
fn null_as_empty<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Option::<Vec<T>>::deserialize(d).map(Option::unwrap_or_default)
}
/// One descriptor of a [`DomainConfig`], possibly with nested descriptors.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DescriptorConfig {
    /// The entry key to match; must not be empty.
    #[serde(default)]
    pub key: String,
    /// The value to match: exact, or a prefix when it ends in `*`; absent or empty matches any
    /// value.
    #[serde(default)]
    pub value: Option<String>,
    /// The limit applied when a request descriptor ends here.
    #[serde(default)]
    pub rate_limit: Option<RateLimitConfig>,
    /// Floodgate's shorthand for `rate_limit: {unlimited: true}`.
    #[serde(default)]
    pub unlimited: bool,
    /// Decide and count, but answer `OK` when over the limit (with `limit_remaining` 0), as
    /// envoyproxy/ratelimit does; such descriptors are counted in
    /// [`RlsResponse::shadow_over_limit`](crate::rls::RlsResponse::shadow_over_limit).
    #[serde(default)]
    pub shadow_mode: bool,
    /// Over its limit, this descriptor refuses the request only when every other quota-mode
    /// descriptor of the request is over its own too (envoyproxy/ratelimit's `quota_mode`;
    /// see [`crate::descriptors`]); its status still says `OVER_LIMIT`.
    #[serde(default)]
    pub quota_mode: bool,
    /// Floodgate's extension: when the request is over the limit, this descriptor's limit
    /// counts nothing for it (see [`crate::descriptors`]). A domain holding one takes no
    /// `quota_mode` descriptor.
    #[serde(default)]
    pub all_or_nothing: bool,
    /// Accepted for compatibility and ignored (envoyproxy/ratelimit's per-value statistics).
    #[serde(default)]
    pub detailed_metric: bool,
    /// Accepted for compatibility and ignored (envoyproxy/ratelimit's statistics name the
    /// value matched by a wildcard or key-only descriptor).
    #[serde(default)]
    pub value_to_metric: bool,
    /// All request values this wildcard `value` matches share one counter (see
    /// [`crate::descriptors`]); refused on a value without `*`.
    #[serde(default)]
    pub share_threshold: bool,
    /// Free-form data returned in the response's dynamic metadata when enabled and this
    /// descriptor's limit applies (see [`crate::descriptors`]); ignored on a descriptor without
    /// a `rate_limit`, as envoyproxy/ratelimit ignores it.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Nested descriptors, matched by the next entry of a request descriptor.
    #[serde(default, deserialize_with = "null_as_empty")]
    pub descriptors: Vec<DescriptorConfig>,
    /// Where it is written (file and line), for errors found later; not read from the file.
    #[serde(skip)]
    pub written: super::source::Written,
}

/// A descriptor's `rate_limit` block: envoy's `unit` and `requests_per_unit`, or
/// `unlimited: true`, or Floodgate's `algorithm` with its parameters; plus an optional `name`
/// and `replaces`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(try_from = "Map<String, Value>")]
pub struct RateLimitConfig {
    /// Envoy's unit name, as written (checked when compiled).
    pub unit: Option<String>,
    /// Requests allowed per unit.
    pub requests_per_unit: Option<u32>,
    /// No limit: always OK, never counted.
    pub unlimited: bool,
    /// The limit's name, which other limits' `replaces` refer to.
    pub name: Option<String>,
    /// Names of limits this one replaces when both match one request.
    pub replaces: Vec<String>,
    /// Floodgate's algorithm instead of envoy's fixed window per unit.
    pub algorithm: Option<AlgorithmSpec>,
}

const RATE_LIMIT_FIELDS: &str =
    "`unit`, `requests_per_unit`, `unlimited`, `name`, `replaces` or `algorithm` (with its \
     parameters)";

/// Why a `rate_limit` block could not be read (the YAML reader reports it with the line and
/// column). `field` is the path inside the block, e.g. `replaces[1].name`.
#[derive(Debug, thiserror::Error)]
pub enum RateLimitFieldError {
    /// A field holds a value of the wrong kind.
    #[error("rate_limit: {field}: `{value}` is not {expected}")]
    WrongValue {
        /// The field.
        field: String,
        /// The value as written.
        value: Value,
        /// What the field takes.
        expected: &'static str,
    },
    /// A field the block (or a `replaces` entry) does not have.
    #[error(
        "rate_limit: {}unknown field `{field}`, expected {expected}",
        within_prefix(within)
    )]
    UnknownField {
        /// The `replaces` entry holding it, or `None` for the block itself.
        within: Option<String>,
        /// The field's name.
        field: String,
        /// The fields allowed there.
        expected: &'static str,
    },
    /// The block names an `algorithm` whose parameters do not read.
    #[error("rate_limit: {0}")]
    Algorithm(#[source] serde_json::Error),
}

fn within_prefix(within: &Option<String>) -> String {
    within
        .as_ref()
        .map(|w| format!("{w}: "))
        .unwrap_or_default()
}

fn wrong_value(
    field: impl Into<String>,
    value: Value,
    expected: &'static str,
) -> RateLimitFieldError {
    RateLimitFieldError::WrongValue {
        field: field.into(),
        value,
        expected,
    }
}

impl TryFrom<Map<String, Value>> for RateLimitConfig {
    type Error = RateLimitFieldError;

    fn try_from(mut map: Map<String, Value>) -> Result<Self, RateLimitFieldError> {
        let unit = take_string(&mut map, "", "unit")?;
        let requests_per_unit = match take(&mut map, "requests_per_unit") {
            None => None,
            Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => Some(n),
                None => {
                    return Err(wrong_value(
                        "requests_per_unit",
                        v,
                        "a whole number from 0 to 4294967295",
                    ))
                }
            },
        };
        let unlimited = match take(&mut map, "unlimited") {
            None => false,
            Some(Value::Bool(b)) => b,
            Some(v) => return Err(wrong_value("unlimited", v, "true or false")),
        };
        let name = take_string(&mut map, "", "name")?;
        let replaces = match take(&mut map, "replaces") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, item)| replace_name(i, item))
                .collect::<Result<_, _>>()?,
            Some(v) => return Err(wrong_value("replaces", v, "a list of {name: …}")),
        };
        let algorithm = if map.contains_key("algorithm") {
            Some(
                serde_json::from_value(Value::Object(map))
                    .map_err(RateLimitFieldError::Algorithm)?,
            )
        } else if let Some(field) = map.keys().next() {
            return Err(RateLimitFieldError::UnknownField {
                within: None,
                field: field.clone(),
                expected: RATE_LIMIT_FIELDS,
            });
        } else {
            None
        };
        Ok(RateLimitConfig {
            unit,
            requests_per_unit,
            unlimited,
            name,
            replaces,
            algorithm,
        })
    }
}

/// Removes `field`; a `null` counts as absent.
fn take(map: &mut Map<String, Value>, field: &str) -> Option<Value> {
    map.remove(field).filter(|v| !v.is_null())
}

/// A string field; numbers and booleans are taken as written (YAML `name: 2024` is a name).
/// `at` is the path of the mapping holding it, with a trailing dot (empty for the block).
fn take_string(
    map: &mut Map<String, Value>,
    at: &str,
    field: &str,
) -> Result<Option<String>, RateLimitFieldError> {
    match take(map, field) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(Some(v.to_string())),
        Some(v) => Err(wrong_value(format!("{at}{field}"), v, "a string")),
    }
}

fn replace_name(index: usize, item: Value) -> Result<String, RateLimitFieldError> {
    let within = format!("replaces[{index}]");
    let Value::Object(mut entry) = item else {
        return Err(wrong_value(within, item, "a mapping {name: …}"));
    };
    let name = take_string(&mut entry, &format!("{within}."), "name")?.unwrap_or_default();
    if let Some(field) = entry.keys().next() {
        return Err(RateLimitFieldError::UnknownField {
            within: Some(within),
            field: field.clone(),
            expected: "`name`",
        });
    }
    Ok(name)
}

/// Checks and compiles `domains`, whose names must be unique. Errors name the field as
/// `domains[i].descriptors[j]….rate_limit.unit`.
pub fn compile_domains(domains: &[DomainConfig]) -> Result<RuleSet, ConfigFileError> {
    compile(domains, true)
}

/// Checks and compiles one envoyproxy/ratelimit file's text. Errors name the field as
/// `descriptors[j]….rate_limit.unit`.
pub fn compile_file(text: &str) -> Result<RuleSet, ConfigFileError> {
    let domain = DomainConfig::from_yaml_str(text)?;
    compile(std::slice::from_ref(&domain), false)
}

/// Whether a configuration file's top level is envoyproxy/ratelimit's: it has a `domain` key
/// (even empty) or a `descriptors` key, neither of which Floodgate's own format has.
pub(super) fn is_envoy_file(top_level: &serde_norway::Value) -> bool {
    top_level
        .as_mapping()
        .is_some_and(|m| m.contains_key("domain") || m.contains_key("descriptors"))
}

/// Reads and checks an envoyproxy/ratelimit file's text, read for positions as `source`, whose
/// YAML tree is `tree`, with errors that name the fields as the file writes them, at their
/// lines; its descriptors are marked with where they are written.
pub(super) fn read_file(
    text: &str,
    tree: &serde_norway::Value,
    source: &super::source::Source,
) -> Result<DomainConfig, ConfigFileError> {
    shape::check(tree).map_err(|e| source.place(e))?;
    let mut domain: DomainConfig = serde_norway::from_str(text).map_err(|e| {
        let mut error = source.serde_error(&e);
        if let ConfigFileError::Yaml { message, .. } = &mut error {
            if message.contains("unknown field") {
                message.push_str(
                    " (a top-level `domain` or `descriptors` makes this an envoyproxy/ratelimit \
                     file)",
                );
            }
        }
        error
    })?;
    compile(std::slice::from_ref(&domain), false).map_err(|e| source.place(e))?;
    source.mark(&mut domain, "");
    Ok(domain)
}

/// Compiles `domains`; paths start with `domains[i].` when `indexed`, else from the domain's
/// own top level (one envoyproxy/ratelimit file).
fn compile(domains: &[DomainConfig], indexed: bool) -> Result<RuleSet, ConfigFileError> {
    let mut set = RuleSet::default();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (i, config) in domains.iter().enumerate() {
        let prefix = if indexed {
            format!("domains[{i}].")
        } else {
            String::new()
        };
        if config.domain.is_empty() {
            return Err(ConfigFileError::invalid(
                format!("{prefix}domain"),
                "a domain needs a non-empty name",
            ));
        }
        if let Some(first) = seen.insert(&config.domain, i) {
            return Err(ConfigFileError::invalid(
                format!("{prefix}domain"),
                format!(
                    "duplicate domain `{}` (also domains[{first}])",
                    config.domain
                ),
            ));
        }
        let tree = compile_level(&config.descriptors, &prefix, &config.domain)?;
        refuse_quota_beside_all_or_nothing(&config.descriptors, &prefix)?;
        set.insert_domain(config.domain.clone(), tree);
    }
    Ok(set)
}

/// Checks and compiles the descriptors of one level. `prefix` is the path of the level's
/// parent with a trailing dot (or empty); `full_key` the parent's statistics key.
fn compile_level(
    descriptors: &[DescriptorConfig],
    prefix: &str,
    full_key: &str,
) -> Result<DescriptorTree, ConfigFileError> {
    let mut level = DescriptorTree::default();
    let mut seen: HashMap<(&str, &str), usize> = HashMap::new();
    for (j, config) in descriptors.iter().enumerate() {
        let path = format!("{prefix}descriptors[{j}]");
        if config.key.is_empty() {
            return Err(ConfigFileError::invalid(
                format!("{path}.key"),
                "a descriptor needs a non-empty key",
            ));
        }
        let value = config.value.as_deref().unwrap_or("");
        if let Some(first) = seen.insert((&config.key, value), j) {
            let what = if value.is_empty() {
                format!("key `{}` without a value", config.key)
            } else {
                format!("key `{}` with value `{value}`", config.key)
            };
            return Err(ConfigFileError::invalid(
                path,
                format!("duplicate descriptor: {what} is also {prefix}descriptors[{first}]"),
            ));
        }
        let own_key = stat_key(full_key, &config.key, value);
        if config.share_threshold && Wildcard::parse(value).is_none() {
            return Err(ConfigFileError::invalid(
                format!("{path}.share_threshold"),
                format!(
                    "`share_threshold` only applies to a wildcard value (one holding `*`), \
                     but key `{}` has {}",
                    config.key,
                    if value.is_empty() {
                        "no value".to_string()
                    } else {
                        format!("the value `{value}`")
                    }
                ),
            ));
        }
        let rule = compile_rule(config, &path, &own_key)?.map(|rule| {
            rule.with_metadata(config.metadata.clone())
                .with_detailed_metric(config.detailed_metric)
        });
        let children = compile_level(&config.descriptors, &format!("{path}."), &own_key)?;
        level.insert_named(
            &config.key,
            value,
            config.share_threshold,
            config.value_to_metric,
            rule,
            children,
        );
    }
    Ok(level)
}

/// Refuses a domain (its top-level `descriptors`, below `prefix`) holding both a
/// `quota_mode` and an `all_or_nothing` descriptor, naming the latter's field: whether a
/// request is over the limit then depends on every quota-mode descriptor's answer, which the
/// store does not know when it decides what an all-or-nothing one keeps.
fn refuse_quota_beside_all_or_nothing(
    descriptors: &[DescriptorConfig],
    prefix: &str,
) -> Result<(), ConfigFileError> {
    fn first(
        descriptors: &[DescriptorConfig],
        prefix: &str,
        flag: fn(&DescriptorConfig) -> bool,
    ) -> Option<String> {
        descriptors.iter().enumerate().find_map(|(j, d)| {
            let path = format!("{prefix}descriptors[{j}]");
            if flag(d) {
                Some(path)
            } else {
                first(&d.descriptors, &format!("{path}."), flag)
            }
        })
    }
    let quota = first(descriptors, prefix, |d| d.quota_mode);
    let all_or_nothing = first(descriptors, prefix, |d| d.all_or_nothing);
    if let (Some(quota), Some(all_or_nothing)) = (quota, all_or_nothing) {
        return Err(ConfigFileError::invalid(
            format!("{all_or_nothing}.all_or_nothing"),
            format!(
                "an all-or-nothing descriptor cannot share a domain with a quota-mode one                  ({quota}.quota_mode): whether a request is refused then depends on every                  quota-mode descriptor of it; keep one of the two"
            ),
        ));
    }
    Ok(())
}

/// Where each descriptor of `domains` is written, by its statistics key.
pub(crate) fn written_by_key(domains: &[DomainConfig]) -> HashMap<String, super::Written> {
    fn walk(
        descriptors: &[DescriptorConfig],
        parent: &str,
        out: &mut HashMap<String, super::Written>,
    ) {
        for d in descriptors {
            let key = stat_key(parent, &d.key, d.value.as_deref().unwrap_or(""));
            walk(&d.descriptors, &key, out);
            out.insert(key, d.written.clone());
        }
    }
    let mut out = HashMap::new();
    for domain in domains {
        walk(&domain.descriptors, &domain.domain, &mut out);
    }
    out
}

/// The rule on one descriptor, or `None` if it has no `rate_limit` (and is not `unlimited`).
fn compile_rule(
    config: &DescriptorConfig,
    path: &str,
    full_key: &str,
) -> Result<Option<Rule>, ConfigFileError> {
    let rate_limit = match (&config.rate_limit, config.unlimited) {
        (None, false) => return Ok(None),
        (Some(_), true) => {
            return Err(ConfigFileError::invalid(
                format!("{path}.unlimited"),
                "`unlimited: true` cannot be combined with a `rate_limit`; keep one of them",
            ))
        }
        (None, true) => &RateLimitConfig {
            unlimited: true,
            ..RateLimitConfig::default()
        },
        (Some(rate_limit), false) => rate_limit,
    };
    let path = format!("{path}.rate_limit");
    let name = rate_limit.name.clone().filter(|n| !n.is_empty());
    for (i, replaced) in rate_limit.replaces.iter().enumerate() {
        if replaced.is_empty() {
            return Err(ConfigFileError::invalid(
                format!("{path}.replaces[{i}].name"),
                "a `replaces` entry needs the name of the limit it replaces",
            ));
        }
        if name.as_deref() == Some(replaced.as_str()) {
            return Err(ConfigFileError::invalid(
                format!("{path}.replaces[{i}].name"),
                format!("limit `{replaced}` cannot replace itself"),
            ));
        }
    }
    let limit = compile_limit(rate_limit, &path, name.as_deref())?;
    Ok(Some(
        Rule::new(
            full_key.to_string(),
            name,
            rate_limit.replaces.clone(),
            config.shadow_mode,
            limit,
        )
        .with_all_or_nothing(config.all_or_nothing)
        .with_quota_mode(config.quota_mode),
    ))
}

/// The limit a `rate_limit` (at `path`, named `name`) gives: `None` when it is `unlimited`;
/// else its `algorithm`, or its `requests_per_unit` per `unit`, envoyproxy's way.
fn compile_limit(
    rate_limit: &RateLimitConfig,
    path: &str,
    name: Option<&str>,
) -> Result<Option<Limit>, ConfigFileError> {
    let name = || name.map(str::to_string);
    if rate_limit.unlimited {
        // envoyproxy/ratelimit refuses a unit on an unlimited limit and ignores a
        // `requests_per_unit`.
        for (field, present) in [
            ("unit", rate_limit.unit.is_some()),
            ("algorithm", rate_limit.algorithm.is_some()),
        ] {
            if present {
                return Err(ConfigFileError::invalid(
                    format!("{path}.{field}"),
                    format!(
                        "an `unlimited` limit takes no `{field}` (remove it, or remove \
                         `unlimited: true`)"
                    ),
                ));
            }
        }
        Ok(None)
    } else if let Some(spec) = &rate_limit.algorithm {
        for (field, present) in [
            ("unit", rate_limit.unit.is_some()),
            ("requests_per_unit", rate_limit.requests_per_unit.is_some()),
        ] {
            if present {
                return Err(ConfigFileError::invalid(
                    format!("{path}.{field}"),
                    format!(
                        "a limit with an `algorithm` takes the algorithm's parameters, not \
                         `{field}`"
                    ),
                ));
            }
        }
        let algorithm = spec
            .build()
            .map_err(|e| ConfigFileError::from_config_error(path, e))?;
        Ok(Some(Limit::with_algorithm(algorithm, name())))
    } else {
        let unit_path = format!("{path}.unit");
        let unit = match &rate_limit.unit {
            None => {
                return Err(ConfigFileError::invalid(
                    unit_path,
                    "missing: a rate limit needs a unit (second, minute, hour, day, week, \
                     month or year), or `unlimited: true`, or an `algorithm`",
                ))
            }
            Some(name) => Unit::from_name(name).map_err(|_| {
                ConfigFileError::invalid(
                    &unit_path,
                    format!(
                        "unknown unit `{name}`: expected second, minute, hour, day, week, \
                         month or year"
                    ),
                )
            })?,
        };
        let rpu_path = format!("{path}.requests_per_unit");
        let requests_per_unit = match rate_limit.requests_per_unit {
            None => {
                return Err(ConfigFileError::invalid(
                    rpu_path,
                    "missing: how many requests per unit",
                ))
            }
            // envoyproxy's way to block a descriptor outright: every request is over the
            // limit, and nothing is counted.
            Some(n) => n,
        };
        Limit::per_unit(requests_per_unit, unit, name())
            .map(Some)
            .map_err(|e| ConfigFileError::from_config_error(path, e))
    }
}

mod shape;
#[cfg(test)]
mod tests;
