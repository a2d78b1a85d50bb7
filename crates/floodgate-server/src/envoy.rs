//! envoyproxy/ratelimit's configuration format and its decision rule, on Floodgate's stores.
//!
//! # Configuration
//!
//! A file in envoyproxy/ratelimit's format loads unchanged ([`DomainConfig`]):
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
//! Each descriptor has a `key`, an optional `value` (exact; a value ending in `*` matches every
//! value that starts with what comes before the `*`; an empty value is the same as none), an
//! optional `rate_limit` (`unit` and `requests_per_unit`, or `unlimited: true`; optional `name`
//! and `replaces: [{name}]`), optional `shadow_mode: true`, optional nested `descriptors`, and
//! `detailed_metric`, which is accepted and ignored (it only changes envoyproxy's statistics).
//! Floodgate adds two things: `unlimited: true` may also be written on the descriptor itself
//! (same meaning as `rate_limit: {unlimited: true}`), and a `rate_limit` may name one of
//! Floodgate's algorithms instead of a unit (`{algorithm: token_bucket, rate: 10, capacity: 20}`,
//! any [`AlgorithmSpec`]), for example to allow bursts.
//!
//! Units are envoy's, case-insensitive: `second`, `minute`, `hour`, `day`, `week`, `month`,
//! `year`. A `unit` limit is a fixed window aligned to the clock's epoch ([`FixedWindow`]); as
//! in envoyproxy/ratelimit, a month is a window of 30 days and a year one of 365 days, both
//! counted from the epoch (not calendar months or years), and `requests_per_unit: 0` blocks the
//! descriptor outright (every request over the limit, nothing counted).
//!
//! Refused when building a [`RuleSet`] ([`ConfigFileError::Invalid`], with the path of the
//! field in the file): an empty domain, a domain listed twice, an empty key, the same key and
//! value twice at one level, a missing or unknown unit, a missing `requests_per_unit`,
//! `unlimited` together with
//! a unit, a `requests_per_unit`, an algorithm or (on the descriptor) a `rate_limit`, a
//! `replaces` entry with an empty name or naming its own limit, a unit together with an
//! algorithm, and invalid algorithm parameters. Unknown fields are refused when the YAML is
//! read.
//!
//! # Matching
//!
//! A request descriptor is a list of key/value entries. Its first entry is looked up among the
//! domain's top-level descriptors, the second among the children of the one found, and so on.
//! At each level the exact key and value is tried first, then the wildcard values of that key
//! (in file order, the first whose prefix matches wins), then the key without a value. There is
//! no backtracking: the first match at a level is the only one followed. The limit is the one
//! on the descriptor reached by the **last** entry; if an entry matches nothing, or the
//! descriptor reached has no `rate_limit`, no limit applies (as in envoyproxy/ratelimit, a
//! request with more or fewer entries than the configured depth matches nothing).
//!
//! # Deciding ([`RuleSet::should_rate_limit`])
//!
//! - Every distinct request descriptor (its domain and all its key/value pairs, as sent, so a
//!   wildcard or key-only rule counts each value apart) has its own counter in the store.
//! - A descriptor adds its hits ([`RlsRequest::hits_for`]: its own `hits_addend`, else the
//!   request's, else 1; 0 reads the limit without counting).
//! - `replaces`: a matched limit whose `name` is listed in the `replaces` of any limit matched by
//!   the same request (the replacing limit may be `unlimited`) is not checked or counted; its
//!   status is OK with no limit.
//! - `unlimited`: OK, not counted, `limit_remaining` = `u32::MAX`, no limit (as envoyproxy).
//! - no match, or an unknown domain: OK with no limit, nothing counted.
//! - a limit: the store decides; the status carries the limit, what remains (rounded down;
//!   when over the limit, what a smaller request could still take) and the time until the
//!   limit resets. An over-limit request consumes nothing (unlike envoyproxy/ratelimit's
//!   `INCRBY`, which keeps counting refused hits in the window; with one hit per request the
//!   answers are the same).
//! - `shadow_mode`: decided and counted like any limit, but when it is over, its status says
//!   `OK` with `limit_remaining` 0, as envoyproxy/ratelimit answers; the response counts it in
//!   [`RlsResponse::shadow_over_limit`] (the service's `floodgate_rls_shadow_over_limit_total`).
//! - The overall code is `OVER_LIMIT` iff some status is, else `OK`.
//!
//! Counters live under the key `rls` NUL, then the domain and each key and value, each as its
//! byte length, `:` and its bytes (unambiguous whatever the strings hold).
//!
//! # JSON
//!
//! [`rls_request_from_json`] and [`rls_response_to_json`] are envoyproxy/ratelimit's `POST
//! /json` body and answer: the protobuf JSON mapping of `RateLimitRequest` and
//! `RateLimitResponse` (camelCase fields, proto field names also accepted on input, enums as
//! names such as `"OVER_LIMIT"` and `"MINUTE"`, durations as `"60s"`, fields at their default
//! value omitted on output).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::spec::{AlgorithmSpec, AnyAlgorithm};
use floodgate::store::{Request, Store};
use floodgate::{Decision, Op, StoreError};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::config::ConfigFileError;
pub use crate::rls::RateUnit;
use crate::rls::{Code, RlsDescriptor, RlsLimit, RlsRequest, RlsResponse, RlsStatus};

/// One domain as written in a configuration file: envoyproxy/ratelimit's top level, or one
/// entry of a native config's `domains`. Checked by [`RuleSet::new`].
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainConfig {
    /// The domain's name; must not be empty.
    #[serde(default)]
    pub domain: String,
    /// The top-level descriptors.
    #[serde(default)]
    pub descriptors: Vec<DescriptorConfig>,
}

impl DomainConfig {
    /// Reads a file's text in envoyproxy/ratelimit's format. Only the YAML and its fields are
    /// checked here ([`ConfigFileError::Yaml`]); [`RuleSet::from_envoy_file`] also checks the
    /// meaning.
    pub fn from_yaml_str(text: &str) -> Result<DomainConfig, ConfigFileError> {
        serde_norway::from_str(text).map_err(|e| ConfigFileError::yaml(None, &e))
    }
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
    /// [`RlsResponse::shadow_over_limit`].
    #[serde(default)]
    pub shadow_mode: bool,
    /// Accepted for compatibility and ignored (envoyproxy/ratelimit's per-value statistics).
    #[serde(default)]
    pub detailed_metric: bool,
    /// Nested descriptors, matched by the next entry of a request descriptor.
    #[serde(default)]
    pub descriptors: Vec<DescriptorConfig>,
}

/// A descriptor's `rate_limit` block: envoy's `unit` and `requests_per_unit`, or
/// `unlimited: true`, or Floodgate's `algorithm` with its parameters; plus an optional `name`
/// and `replaces`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(try_from = "Map<String, Value>")]
pub struct RateLimitConfig {
    /// Envoy's unit name, as written (checked by [`RuleSet::new`]).
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

impl TryFrom<Map<String, Value>> for RateLimitConfig {
    type Error = String;

    fn try_from(map: Map<String, Value>) -> Result<Self, String> {
        parse_rate_limit(map).map_err(|e| format!("rate_limit: {e}"))
    }
}

fn parse_rate_limit(mut map: Map<String, Value>) -> Result<RateLimitConfig, String> {
    let unit = take_string(&mut map, "unit")?;
    let requests_per_unit = match take(&mut map, "requests_per_unit") {
        None => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    format!(
                        "requests_per_unit: `{v}` is not a whole number from 0 to {}",
                        u32::MAX
                    )
                })?,
        ),
    };
    let unlimited = match take(&mut map, "unlimited") {
        None => false,
        Some(Value::Bool(b)) => b,
        Some(v) => return Err(format!("unlimited: `{v}` is not true or false")),
    };
    let name = take_string(&mut map, "name")?;
    let replaces = match take(&mut map, "replaces") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| replace_name(i, item))
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(format!("replaces: `{v}` is not a list of {{name: …}}")),
    };
    let algorithm = if map.contains_key("algorithm") {
        Some(serde_json::from_value(Value::Object(map)).map_err(|e| e.to_string())?)
    } else if let Some(field) = map.keys().next() {
        return Err(format!(
            "unknown field `{field}`, expected {RATE_LIMIT_FIELDS}"
        ));
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

/// Removes `field`; a `null` counts as absent.
fn take(map: &mut Map<String, Value>, field: &str) -> Option<Value> {
    map.remove(field).filter(|v| !v.is_null())
}

/// A string field; numbers and booleans are taken as written (YAML `name: 2024` is a name).
fn take_string(map: &mut Map<String, Value>, field: &str) -> Result<Option<String>, String> {
    match take(map, field) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v @ (Value::Number(_) | Value::Bool(_))) => Ok(Some(v.to_string())),
        Some(v) => Err(format!("{field}: `{v}` is not a string")),
    }
}

fn replace_name(index: usize, item: Value) -> Result<String, String> {
    let Value::Object(mut entry) = item else {
        return Err(format!(
            "replaces[{index}]: `{item}` is not a mapping {{name: …}}"
        ));
    };
    let name = take_string(&mut entry, "name")
        .map_err(|e| format!("replaces[{index}].{e}"))?
        .unwrap_or_default();
    if let Some(field) = entry.keys().next() {
        return Err(format!(
            "replaces[{index}]: unknown field `{field}`, expected `name`"
        ));
    }
    Ok(name)
}

/// A compiled limit: what applies to request descriptors that end on its descriptor.
#[derive(Clone, Debug)]
pub struct Rule {
    full_key: String,
    name: Option<String>,
    replaces: Vec<String>,
    shadow_mode: bool,
    limit: Option<Limit>,
}

#[derive(Clone, Debug)]
struct Limit {
    algorithm: AnyAlgorithm,
    requests_per_unit: u32,
    unit: RateUnit,
    /// What statuses report.
    reported: RlsLimit,
}

impl Rule {
    /// envoyproxy/ratelimit's name for the rule in statistics: the domain and each descriptor's
    /// `key` or `key_value`, joined by dots (`messaging.message_type_marketing.to_number`).
    pub fn full_key(&self) -> &str {
        &self.full_key
    }

    /// The limit's `name`, if it has one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The names of the limits this one replaces.
    pub fn replaces(&self) -> &[String] {
        &self.replaces
    }

    /// Whether the descriptor is in shadow mode.
    pub fn shadow_mode(&self) -> bool {
        self.shadow_mode
    }

    /// Whether the rule is `unlimited` (never counted, always OK).
    pub fn is_unlimited(&self) -> bool {
        self.limit.is_none()
    }

    /// The algorithm deciding this rule; `None` when unlimited.
    pub fn algorithm(&self) -> Option<&AnyAlgorithm> {
        self.limit.as_ref().map(|l| &l.algorithm)
    }

    /// The limit in envoy's terms, `(requests_per_unit, unit)`; `None` when unlimited. For a
    /// Floodgate algorithm: its quota in the shortest unit in which it is at least one request,
    /// rounded down (a token bucket of rate 10 is 10 per second; a sliding log of 5 per minute
    /// is 5 per minute).
    pub fn quota(&self) -> Option<(u32, RateUnit)> {
        self.limit.as_ref().map(|l| (l.requests_per_unit, l.unit))
    }

    /// The limit as [`RlsStatus::current_limit`] reports it; `None` when unlimited.
    pub fn rls_limit(&self) -> Option<&RlsLimit> {
        self.limit.as_ref().map(|l| &l.reported)
    }
}

#[derive(Debug, Default)]
struct Level {
    keys: HashMap<String, KeyMatch>,
}

#[derive(Debug, Default)]
struct KeyMatch {
    exact: HashMap<String, Node>,
    /// `(prefix, node)` for values ending in `*`, in file order.
    prefixes: Vec<(String, Node)>,
    any: Option<Box<Node>>,
}

#[derive(Debug)]
struct Node {
    rule: Option<Rule>,
    children: Level,
}

impl Level {
    fn find(&self, key: &str, value: &str) -> Option<&Node> {
        let m = self.keys.get(key)?;
        m.exact
            .get(value)
            .or_else(|| {
                m.prefixes
                    .iter()
                    .find(|(prefix, _)| value.starts_with(prefix.as_str()))
                    .map(|(_, node)| node)
            })
            .or(m.any.as_deref())
    }

    fn lookup(&self, entries: &[(String, String)]) -> Option<&Rule> {
        let ((last_key, last_value), init) = entries.split_last()?;
        let mut level = self;
        for (key, value) in init {
            level = &level.find(key, value)?.children;
        }
        level.find(last_key, last_value)?.rule.as_ref()
    }
}

/// Every domain's compiled descriptors: which limit applies to a request descriptor, and the
/// decision for a whole `ShouldRateLimit` request. See the [module documentation](self) for
/// the exact rules. Immutable once built; share it behind an `Arc` and swap it on reload.
#[derive(Debug, Default)]
pub struct RuleSet {
    domains: HashMap<String, Level>,
}

impl RuleSet {
    /// Checks and compiles `domains`, whose names must be unique. Errors name the field as
    /// `domains[i].descriptors[j]….rate_limit.unit`.
    pub fn new(domains: Vec<DomainConfig>) -> Result<RuleSet, ConfigFileError> {
        RuleSet::compile(&domains, true)
    }

    /// Checks and compiles one envoyproxy/ratelimit file's text. Errors name the field as
    /// `descriptors[j]….rate_limit.unit`.
    pub fn from_envoy_file(text: &str) -> Result<RuleSet, ConfigFileError> {
        let domain = DomainConfig::from_yaml_str(text)?;
        RuleSet::compile(std::slice::from_ref(&domain), false)
    }

    /// Compiles `domains`; paths start with `domains[i].` when `indexed`, else from the
    /// domain's own top level (one envoyproxy/ratelimit file).
    pub(crate) fn compile(
        domains: &[DomainConfig],
        indexed: bool,
    ) -> Result<RuleSet, ConfigFileError> {
        let mut set = RuleSet::default();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, config) in domains.iter().enumerate() {
            let prefix = if indexed {
                format!("domains[{i}].")
            } else {
                String::new()
            };
            if config.domain.is_empty() {
                return Err(invalid(
                    format!("{prefix}domain"),
                    "a domain needs a non-empty name",
                ));
            }
            if let Some(first) = seen.insert(&config.domain, i) {
                return Err(invalid(
                    format!("{prefix}domain"),
                    format!(
                        "duplicate domain `{}` (also domains[{first}])",
                        config.domain
                    ),
                ));
            }
            let mut level = Level::default();
            compile_level(&mut level, &config.descriptors, &prefix, &config.domain)?;
            set.domains.insert(config.domain.clone(), level);
        }
        Ok(set)
    }

    /// Whether `domain` is configured.
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// The configured domains, in no particular order.
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.keys().map(String::as_str)
    }

    /// The rule a request descriptor of `entries` in `domain` ends on (see the module's
    /// "Matching"): `None` if the domain is unknown, `entries` is empty, an entry matches
    /// nothing, or the descriptor reached has no `rate_limit`.
    pub fn lookup(&self, domain: &str, entries: &[(String, String)]) -> Option<&Rule> {
        self.domains.get(domain)?.lookup(entries)
    }

    /// Decides a `ShouldRateLimit` request: one status per request descriptor, in order, and
    /// the overall code (see the module's "Deciding"). The limited descriptors are decided in
    /// one [`Store::apply`] (one of them) or one [`Store::apply_many`] call; a store failure is
    /// returned as is and the caller chooses to fail open or closed.
    pub async fn should_rate_limit<S: Store<str, AnyAlgorithm>>(
        &self,
        store: &S,
        request: &RlsRequest,
    ) -> Result<RlsResponse, StoreError> {
        let mut statuses = vec![
            RlsStatus {
                code: Code::Ok,
                ..RlsStatus::default()
            };
            request.descriptors.len()
        ];
        let Some(root) = self.domains.get(&request.domain) else {
            return Ok(RlsResponse {
                overall_code: Code::Ok,
                statuses,
                shadow_over_limit: 0,
            });
        };
        let rules: Vec<Option<&Rule>> = request
            .descriptors
            .iter()
            .map(|d| root.lookup(&d.entries))
            .collect();
        let replaced: Vec<&str> = rules
            .iter()
            .flatten()
            .flat_map(|r| r.replaces.iter().map(String::as_str))
            .collect();

        // (descriptor index, rule, limit, counter key, hits) of each limit to decide.
        let mut checks: Vec<(usize, &Rule, &Limit, String, u64)> = Vec::new();
        let mut blocked = false;
        let mut shadow_over_limit = 0;
        for (i, (descriptor, rule)) in request.descriptors.iter().zip(&rules).enumerate() {
            let Some(rule) = rule else { continue };
            if rule
                .name
                .as_deref()
                .is_some_and(|name| replaced.contains(&name))
            {
                continue;
            }
            match &rule.limit {
                None => statuses[i].limit_remaining = u32::MAX,
                Some(limit) if limit.requests_per_unit == 0 => {
                    statuses[i] = RlsStatus {
                        code: Code::OverLimit,
                        current_limit: Some(limit.reported.clone()),
                        limit_remaining: 0,
                        duration_until_reset: None,
                    };
                    if rule.shadow_mode {
                        statuses[i].code = Code::Ok;
                        shadow_over_limit += 1;
                    } else {
                        blocked = true;
                    }
                }
                Some(limit) => checks.push((
                    i,
                    rule,
                    limit,
                    counter_key(&request.domain, descriptor),
                    request.hits_for(descriptor),
                )),
            }
        }

        let decisions: Vec<Decision> = match checks.as_slice() {
            [] => Vec::new(),
            [(_, _, limit, key, hits)] => {
                vec![
                    store
                        .apply(&limit.algorithm, key, Op::Check { cost: *hits })
                        .await?,
                ]
            }
            many => {
                let requests: Vec<Request<'_, str, AnyAlgorithm>> = many
                    .iter()
                    .map(|(_, _, limit, key, hits)| Request {
                        algorithm: &limit.algorithm,
                        key: key.as_str(),
                        op: Op::Check { cost: *hits },
                    })
                    .collect();
                store.apply_many(&requests).await?
            }
        };

        let mut overall_code = if blocked { Code::OverLimit } else { Code::Ok };
        for ((i, rule, limit, _, _), decision) in checks.iter().zip(decisions) {
            let code = if decision.allowed {
                Code::Ok
            } else if rule.shadow_mode {
                shadow_over_limit += 1;
                Code::Ok
            } else {
                overall_code = Code::OverLimit;
                Code::OverLimit
            };
            statuses[*i] = RlsStatus {
                code,
                current_limit: Some(limit.reported.clone()),
                limit_remaining: u32::try_from(decision.remaining).unwrap_or(u32::MAX),
                duration_until_reset: Some(decision.reset_after),
            };
        }
        Ok(RlsResponse {
            overall_code,
            statuses,
            shadow_over_limit,
        })
    }
}

/// The store key of one request descriptor's counter (see the module documentation).
fn counter_key(domain: &str, descriptor: &RlsDescriptor) -> String {
    let len: usize = domain.len()
        + descriptor
            .entries
            .iter()
            .map(|(k, v)| k.len() + v.len() + 8)
            .sum::<usize>();
    let mut key = String::with_capacity(len + 12);
    key.push_str("rls\0");
    let mut part = |s: &str| {
        // Writing to a String cannot fail.
        let _ = write!(key, "{}:", s.len());
        key.push_str(s);
    };
    part(domain);
    for (k, v) in &descriptor.entries {
        part(k);
        part(v);
    }
    key
}

fn invalid(path: impl Into<String>, message: impl Into<String>) -> ConfigFileError {
    ConfigFileError::Invalid {
        path: path.into(),
        message: message.into(),
    }
}

/// Checks and compiles the descriptors of one level into `level`. `prefix` is the path of
/// the level's parent with a trailing dot (or empty); `full_key` the parent's statistics key.
fn compile_level(
    level: &mut Level,
    descriptors: &[DescriptorConfig],
    prefix: &str,
    full_key: &str,
) -> Result<(), ConfigFileError> {
    let mut seen: HashMap<(&str, &str), usize> = HashMap::new();
    for (j, config) in descriptors.iter().enumerate() {
        let path = format!("{prefix}descriptors[{j}]");
        if config.key.is_empty() {
            return Err(invalid(
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
            return Err(invalid(
                path,
                format!("duplicate descriptor: {what} is also {prefix}descriptors[{first}]"),
            ));
        }
        let own_key = if value.is_empty() {
            format!("{full_key}.{}", config.key)
        } else {
            format!("{full_key}.{}_{value}", config.key)
        };
        let rule = compile_rule(config, &path, &own_key)?;
        let mut children = Level::default();
        compile_level(
            &mut children,
            &config.descriptors,
            &format!("{path}."),
            &own_key,
        )?;
        let node = Node { rule, children };
        let entry = level.keys.entry(config.key.clone()).or_default();
        if value.is_empty() {
            entry.any = Some(Box::new(node));
        } else if let Some(prefix) = value.strip_suffix('*') {
            entry.prefixes.push((prefix.to_string(), node));
        } else {
            entry.exact.insert(value.to_string(), node);
        }
    }
    Ok(())
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
            return Err(invalid(
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
            return Err(invalid(
                format!("{path}.replaces[{i}].name"),
                "a `replaces` entry needs the name of the limit it replaces",
            ));
        }
        if name.as_deref() == Some(replaced.as_str()) {
            return Err(invalid(
                format!("{path}.replaces[{i}].name"),
                format!("limit `{replaced}` cannot replace itself"),
            ));
        }
    }
    let limit = if rate_limit.unlimited {
        for (field, present) in [
            ("unit", rate_limit.unit.is_some()),
            ("requests_per_unit", rate_limit.requests_per_unit.is_some()),
            ("algorithm", rate_limit.algorithm.is_some()),
        ] {
            if present {
                return Err(invalid(
                    format!("{path}.{field}"),
                    format!("an `unlimited` limit takes no `{field}`"),
                ));
            }
        }
        None
    } else if let Some(spec) = &rate_limit.algorithm {
        for (field, present) in [
            ("unit", rate_limit.unit.is_some()),
            ("requests_per_unit", rate_limit.requests_per_unit.is_some()),
        ] {
            if present {
                return Err(invalid(
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
            .map_err(|e| ConfigFileError::from_config_error(&path, e))?;
        let (requests_per_unit, unit) = envoy_quota(&algorithm);
        Some(limit(algorithm, requests_per_unit, unit, &name))
    } else {
        let unit_path = format!("{path}.unit");
        let unit = match &rate_limit.unit {
            None => {
                return Err(invalid(
                    unit_path,
                    "missing: a rate limit needs a unit (second, minute, hour, day, week, \
                     month or year), or `unlimited: true`, or an `algorithm`",
                ))
            }
            Some(name) => RateUnit::from_name(name).ok_or_else(|| {
                invalid(
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
            None => return Err(invalid(rpu_path, "missing: how many requests per unit")),
            // envoyproxy's way to block a descriptor outright: every request is over the
            // limit, and nothing is counted (the window below only stands in for it).
            Some(n) => n,
        };
        let algorithm = FixedWindow::new(u64::from(requests_per_unit.max(1)), unit.duration())
            .map_err(|e| ConfigFileError::from_config_error(&path, e))?;
        Some(limit(
            AnyAlgorithm::FixedWindow(algorithm),
            requests_per_unit,
            unit,
            &name,
        ))
    };
    Ok(Some(Rule {
        full_key: full_key.to_string(),
        name,
        replaces: rate_limit.replaces.clone(),
        shadow_mode: config.shadow_mode,
        limit,
    }))
}

fn limit(
    algorithm: AnyAlgorithm,
    requests_per_unit: u32,
    unit: RateUnit,
    name: &Option<String>,
) -> Limit {
    let reported = RlsLimit {
        name: name.clone(),
        requests_per_unit,
        unit,
    };
    Limit {
        algorithm,
        requests_per_unit,
        unit,
        reported,
    }
}

/// A Floodgate algorithm's quota in envoy's terms: the shortest unit in which it allows at
/// least one request, the count rounded down (see [`Rule::quota`]).
fn envoy_quota(algorithm: &AnyAlgorithm) -> (u32, RateUnit) {
    let Some((units, window)) = algorithm.quota() else {
        return (0, RateUnit::Second);
    };
    let per_second = units / window.as_secs_f64().max(f64::MIN_POSITIVE);
    let mut best = (0, RateUnit::Year);
    for unit in RateUnit::ALL {
        let count = (per_second * unit.duration().as_secs_f64()).floor();
        if count >= 1.0 {
            // `as` saturates at u32::MAX.
            best = (count as u32, unit);
            break;
        }
    }
    best
}

// ---------------------------------------------------------------------------------------------
// JSON (envoyproxy/ratelimit's POST /json)
// ---------------------------------------------------------------------------------------------

/// Reads a `RateLimitRequest` in the protobuf JSON mapping, as envoyproxy/ratelimit's `POST
/// /json` takes it: `{"domain", "descriptors": [{"entries": [{"key", "value"}], "hitsAddend"?}],
/// "hitsAddend"?}`. Field names may also be written as in the `.proto` (`hits_addend`);
/// `null` is the field's default; integers may be JSON numbers or decimal strings. Refused,
/// with a message naming the field: another type, an unknown field, a descriptor `limit`
/// override (not supported), an empty `domain` and an empty `descriptors` list (as
/// envoyproxy/ratelimit refuses them).
pub fn rls_request_from_json(json: &Value) -> Result<RlsRequest, String> {
    let object = as_object(json, "the request")?;
    let mut request = RlsRequest::default();
    for (field, value) in object {
        match field.as_str() {
            "domain" => request.domain = json_string(value, "domain")?,
            "descriptors" => {
                for (i, d) in json_array(value, "descriptors")?.iter().enumerate() {
                    request.descriptors.push(descriptor_from_json(d, i)?);
                }
            }
            "hitsAddend" | "hits_addend" => {
                let n = json_u64(value, "hitsAddend")?.unwrap_or(0);
                request.hits_addend = u32::try_from(n)
                    .map_err(|_| format!("hitsAddend: {n} is above {}", u32::MAX))?;
            }
            other => return Err(format!("unknown field `{other}` in the request")),
        }
    }
    if request.domain.is_empty() {
        return Err("domain: must not be empty".to_string());
    }
    if request.descriptors.is_empty() {
        return Err("descriptors: must not be empty".to_string());
    }
    Ok(request)
}

fn descriptor_from_json(json: &Value, i: usize) -> Result<RlsDescriptor, String> {
    let path = format!("descriptors[{i}]");
    let object = as_object(json, &path)?;
    let mut descriptor = RlsDescriptor::default();
    for (field, value) in object {
        match field.as_str() {
            "entries" => {
                let entries_path = format!("{path}.entries");
                for (j, e) in json_array(value, &entries_path)?.iter().enumerate() {
                    let entry_path = format!("{entries_path}[{j}]");
                    let (mut key, mut val) = (String::new(), String::new());
                    for (f, v) in as_object(e, &entry_path)? {
                        match f.as_str() {
                            "key" => key = json_string(v, &format!("{entry_path}.key"))?,
                            "value" => val = json_string(v, &format!("{entry_path}.value"))?,
                            other => return Err(format!("{entry_path}: unknown field `{other}`")),
                        }
                    }
                    descriptor.entries.push((key, val));
                }
            }
            "hitsAddend" | "hits_addend" => {
                descriptor.hits_addend = json_u64(value, &format!("{path}.hitsAddend"))?;
            }
            "limit" if value.is_null() => {}
            "limit" => {
                return Err(format!(
                    "{path}.limit: per-descriptor limit overrides are not supported"
                ))
            }
            other => return Err(format!("{path}: unknown field `{other}`")),
        }
    }
    Ok(descriptor)
}

fn as_object<'a>(json: &'a Value, what: &str) -> Result<&'a Map<String, Value>, String> {
    json.as_object()
        .ok_or_else(|| format!("{what}: expected a JSON object, found {}", kind(json)))
}

fn json_array<'a>(json: &'a Value, path: &str) -> Result<&'a [Value], String> {
    match json {
        Value::Null => Ok(&[]),
        Value::Array(items) => Ok(items),
        other => Err(format!("{path}: expected an array, found {}", kind(other))),
    }
}

fn json_string(json: &Value, path: &str) -> Result<String, String> {
    match json {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        other => Err(format!("{path}: expected a string, found {}", kind(other))),
    }
}

/// An unsigned integer as protobuf JSON writes it: a number or a decimal string; `None` for
/// `null`.
fn json_u64(json: &Value, path: &str) -> Result<Option<u64>, String> {
    let parsed = match json {
        Value::Null => return Ok(None),
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64)
                .map(|f| f as u64)
        }),
        Value::String(s) => s.trim().parse::<u64>().ok(),
        _ => None,
    };
    parsed
        .map(Some)
        .ok_or_else(|| format!("{path}: expected a non-negative integer, found {json}"))
}

fn kind(json: &Value) -> &'static str {
    match json {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The protobuf enum name of a code: `"UNKNOWN"`, `"OK"` or `"OVER_LIMIT"`.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Unknown => "UNKNOWN",
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    }
}

/// Writes a `RateLimitResponse` in the protobuf JSON mapping, as envoyproxy/ratelimit's `POST
/// /json` answers: `{"overallCode": "OK", "statuses": [{"code", "currentLimit": {"name",
/// "requestsPerUnit", "unit"}, "limitRemaining", "durationUntilReset": "12s"}]}`. As protobuf
/// JSON does, fields at their default value (code `UNKNOWN`, 0, an empty name or list, no limit
/// or duration) are left out.
pub fn rls_response_to_json(response: &RlsResponse) -> Value {
    let mut out = Map::new();
    if response.overall_code != Code::Unknown {
        out.insert(
            "overallCode".into(),
            code_name(response.overall_code).into(),
        );
    }
    if !response.statuses.is_empty() {
        let statuses = response.statuses.iter().map(status_to_json).collect();
        out.insert("statuses".into(), Value::Array(statuses));
    }
    Value::Object(out)
}

fn status_to_json(status: &RlsStatus) -> Value {
    let mut out = Map::new();
    if status.code != Code::Unknown {
        out.insert("code".into(), code_name(status.code).into());
    }
    if let Some(limit) = &status.current_limit {
        let mut l = Map::new();
        if let Some(name) = limit.name.as_deref().filter(|n| !n.is_empty()) {
            l.insert("name".into(), name.into());
        }
        if limit.requests_per_unit != 0 {
            l.insert("requestsPerUnit".into(), limit.requests_per_unit.into());
        }
        l.insert("unit".into(), limit.unit.proto_name().into());
        out.insert("currentLimit".into(), Value::Object(l));
    }
    if status.limit_remaining != 0 {
        out.insert("limitRemaining".into(), status.limit_remaining.into());
    }
    if let Some(d) = status.duration_until_reset {
        out.insert("durationUntilReset".into(), json_duration(d).into());
    }
    Value::Object(out)
}

/// A duration as protobuf JSON writes it: seconds with 0, 3, 6 or 9 decimals and an `s`.
pub fn json_duration(d: Duration) -> String {
    let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
    if nanos == 0 {
        format!("{secs}s")
    } else if nanos % 1_000_000 == 0 {
        format!("{secs}.{:03}s", nanos / 1_000_000)
    } else if nanos % 1_000 == 0 {
        format!("{secs}.{:06}s", nanos / 1_000)
    } else {
        format!("{secs}.{nanos:09}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate::algorithm::spec::AnyState;
    use floodgate::algorithm::Algorithm;
    use floodgate::store::MemoryStore;
    use floodgate::{ManualClock, Nanos};
    use serde_json::json;

    type TestStore = MemoryStore<String, AnyState, ManualClock>;

    /// Drives a future that is ready at once (the memory store's are).
    fn poll<F: std::future::Future>(f: F) -> F::Output {
        let mut f = std::pin::pin!(f);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match f.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("the memory store answers at once"),
        }
    }

    fn store_at(secs: u64) -> (TestStore, ManualClock) {
        let clock = ManualClock::new(Nanos::from_secs(secs));
        let store = MemoryStore::builder()
            .clock(clock.clone())
            .build()
            .expect("valid store");
        (store, clock)
    }

    fn rules(yaml: &str) -> RuleSet {
        match RuleSet::from_envoy_file(yaml) {
            Ok(set) => set,
            Err(e) => panic!("{e}"),
        }
    }

    fn error(yaml: &str) -> ConfigFileError {
        match RuleSet::from_envoy_file(yaml) {
            Ok(_) => panic!("accepted:\n{yaml}"),
            Err(e) => e,
        }
    }

    fn invalid_at(yaml: &str) -> (String, String) {
        match error(yaml) {
            ConfigFileError::Invalid { path, message } => (path, message),
            other => panic!("expected an Invalid error, got {other:?}"),
        }
    }

    fn entries(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> RlsRequest {
        RlsRequest {
            domain: domain.to_string(),
            descriptors: descriptors
                .iter()
                .map(|d| RlsDescriptor {
                    entries: entries(d),
                    hits_addend: None,
                })
                .collect(),
            hits_addend: 0,
        }
    }

    fn decide(set: &RuleSet, store: &TestStore, req: &RlsRequest) -> RlsResponse {
        poll(set.should_rate_limit(store, req)).expect("the memory store does not fail")
    }

    fn codes(response: &RlsResponse) -> Vec<Code> {
        response.statuses.iter().map(|s| s.code).collect()
    }

    const MESSAGING: &str = r#"
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: DAY
      requests_per_unit: 100
"#;

    #[test]
    fn nested_descriptors_match_level_by_level() {
        let set = rules(MESSAGING);
        let nested = set
            .lookup(
                "messaging",
                &entries(&[("message_type", "marketing"), ("to_number", "2061111111")]),
            )
            .expect("nested rule");
        assert_eq!(nested.quota(), Some((5, RateUnit::Day)));
        assert_eq!(
            nested.full_key(),
            "messaging.message_type_marketing.to_number"
        );
        let top = set
            .lookup("messaging", &entries(&[("to_number", "2061111111")]))
            .expect("top rule");
        assert_eq!(top.quota(), Some((100, RateUnit::Day)));
        // The placeholder level has no limit of its own, and depth must match.
        assert!(set
            .lookup("messaging", &entries(&[("message_type", "marketing")]))
            .is_none());
        assert!(set
            .lookup(
                "messaging",
                &entries(&[("to_number", "1"), ("to_number", "2")])
            )
            .is_none());
        assert!(set
            .lookup(
                "messaging",
                &entries(&[("message_type", "transactional"), ("to_number", "1")])
            )
            .is_none());
        assert!(set.lookup("messaging", &[]).is_none());
        assert!(set
            .lookup("other", &entries(&[("to_number", "1")]))
            .is_none());
    }

    #[test]
    fn exact_then_wildcard_then_key_only() {
        let set = rules(
            r#"
domain: d
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /api/v1*
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: path
    value: /api/login
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: path
    value: a*b
    rate_limit: {unit: second, requests_per_unit: 5}
"#,
        );
        let rpu = |value: &str| {
            set.lookup("d", &entries(&[("path", value)]))
                .and_then(Rule::quota)
                .map(|q| q.0)
        };
        assert_eq!(rpu("/api/login"), Some(4));
        // Wildcards in file order: `/api/*` comes first and also covers `/api/v1…`.
        assert_eq!(rpu("/api/v1/users"), Some(2));
        assert_eq!(rpu("/api/"), Some(2));
        assert_eq!(rpu("/other"), Some(1));
        // A `*` inside a value is literal.
        assert_eq!(rpu("a*b"), Some(5));
        assert_eq!(rpu("axxb"), Some(1));
    }

    #[test]
    fn a_lone_star_matches_every_value_and_each_value_counts_apart() {
        let set = rules(
            r#"
domain: d
descriptors:
  - key: user
    value: "*"
    rate_limit: {unit: minute, requests_per_unit: 2}
"#,
        );
        let (store, _clock) = store_at(120);
        let alice = request("d", &[&[("user", "alice")]]);
        let bob = request("d", &[&[("user", "bob")]]);
        for _ in 0..2 {
            assert_eq!(decide(&set, &store, &alice).overall_code, Code::Ok);
        }
        assert_eq!(decide(&set, &store, &alice).overall_code, Code::OverLimit);
        assert_eq!(decide(&set, &store, &bob).overall_code, Code::Ok);
    }

    #[test]
    fn fixed_windows_count_per_unit_and_reset_at_the_boundary() {
        let set = rules(MESSAGING);
        // 10 s into a day.
        let (store, clock) = store_at(86_400 * 100 + 10);
        let req = request("messaging", &[&[("to_number", "2061111111")]]);
        for left in (0..100).rev() {
            let r = decide(&set, &store, &req);
            assert_eq!(r.overall_code, Code::Ok);
            assert_eq!(r.statuses[0].limit_remaining, left);
        }
        let over = decide(&set, &store, &req);
        assert_eq!(over.overall_code, Code::OverLimit);
        let status = &over.statuses[0];
        assert_eq!(status.code, Code::OverLimit);
        assert_eq!(
            status.current_limit,
            Some(RlsLimit {
                name: None,
                requests_per_unit: 100,
                unit: RateUnit::Day
            })
        );
        assert_eq!(
            status.duration_until_reset,
            Some(Duration::from_secs(86_400 - 10))
        );
        clock.advance(Duration::from_secs(86_400 - 10));
        assert_eq!(decide(&set, &store, &req).overall_code, Code::Ok);
    }

    #[test]
    fn each_descriptor_gets_a_status_and_any_over_limit_wins() {
        let set = rules(MESSAGING);
        let (store, _clock) = store_at(0);
        let both = request(
            "messaging",
            &[
                &[("message_type", "marketing"), ("to_number", "1")],
                &[("to_number", "1")],
                &[("unknown", "x")],
            ],
        );
        for _ in 0..5 {
            let r = decide(&set, &store, &both);
            assert_eq!(r.overall_code, Code::Ok);
        }
        let r = decide(&set, &store, &both);
        assert_eq!(r.overall_code, Code::OverLimit);
        assert_eq!(codes(&r), [Code::OverLimit, Code::Ok, Code::Ok]);
        assert_eq!(r.statuses[1].limit_remaining, 94);
        assert_eq!(
            r.statuses[2],
            RlsStatus {
                code: Code::Ok,
                ..RlsStatus::default()
            }
        );
    }

    #[test]
    fn an_unknown_domain_is_allowed_without_limits() {
        let set = rules(MESSAGING);
        let (store, _clock) = store_at(0);
        let r = decide(
            &set,
            &store,
            &request("nope", &[&[("to_number", "1")], &[]]),
        );
        assert_eq!(r.overall_code, Code::Ok);
        assert_eq!(codes(&r), [Code::Ok, Code::Ok]);
        assert!(r.statuses.iter().all(|s| s.current_limit.is_none()));
        assert_eq!(store.stats().keys, 0);
    }

    const EXAMPLE7: &str = r#"
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
"#;

    #[test]
    fn replaces_skips_the_named_limit_for_that_request_only() {
        let set = rules(EXAMPLE7);
        let (store, _clock) = store_at(50);
        let first = &[("key_1", "value_1"), ("user", "bkthomps")][..];
        let second = &[("key_2", "value_2"), ("user", "bkthomps")][..];
        let both = request("example7", &[first, second]);
        for _ in 0..10 {
            let r = decide(&set, &store, &both);
            assert_eq!(r.overall_code, Code::Ok);
            // The replaced limit is neither checked nor reported.
            assert_eq!(r.statuses[0].code, Code::Ok);
            assert!(r.statuses[0].current_limit.is_none());
            assert_eq!(
                r.statuses[1]
                    .current_limit
                    .as_ref()
                    .map(|l| l.requests_per_unit),
                Some(10)
            );
        }
        assert_eq!(decide(&set, &store, &both).overall_code, Code::OverLimit);
        // Alone, the first descriptor's own 5/s limit was never touched.
        let alone = request("example7", &[first]);
        for _ in 0..5 {
            assert_eq!(decide(&set, &store, &alone).overall_code, Code::Ok);
        }
        assert_eq!(decide(&set, &store, &alone).overall_code, Code::OverLimit);
    }

    #[test]
    fn shadow_mode_counts_and_reports_but_never_refuses() {
        let set = rules(
            r#"
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit: {requests_per_unit: 1, unit: second}
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit: {requests_per_unit: 1, unit: second}
"#,
        );
        let (store, _clock) = store_at(0);
        let a = request("example6", &[&[("service", "auth"), ("user", "user-a")]]);
        assert_eq!(codes(&decide(&set, &store, &a)), [Code::Ok]);
        let r = decide(&set, &store, &a);
        assert_eq!(r.overall_code, Code::Ok);
        // Over, and answered OK as envoyproxy/ratelimit answers; counted for the metrics.
        assert_eq!(codes(&r), [Code::Ok]);
        assert_eq!(r.statuses[0].limit_remaining, 0);
        assert_eq!(r.shadow_over_limit, 1);
        assert_eq!(decide(&set, &store, &a).shadow_over_limit, 1);
        let b = request("example6", &[&[("service", "auth"), ("user", "user-b")]]);
        decide(&set, &store, &b);
        assert_eq!(decide(&set, &store, &b).overall_code, Code::OverLimit);
    }

    #[test]
    fn unlimited_is_ok_and_never_counted() {
        let set = rules(
            r#"
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    unlimited: true
  - key: other
    rate_limit: {unit: minute, requests_per_unit: 1}
"#,
        );
        let (store, _clock) = store_at(0);
        let req = request("internal", &[&[("ldap", "x")], &[("azure", "y")]]);
        for _ in 0..3 {
            let r = decide(&set, &store, &req);
            assert_eq!(r.overall_code, Code::Ok);
            for s in &r.statuses {
                assert_eq!(s.code, Code::Ok);
                assert_eq!(s.limit_remaining, u32::MAX);
                assert!(s.current_limit.is_none());
            }
        }
        assert_eq!(store.stats().keys, 0);
        assert!(set
            .lookup("internal", &entries(&[("ldap", "x")]))
            .is_some_and(Rule::is_unlimited));
    }

    #[test]
    fn an_unlimited_limit_can_replace_another() {
        let set = rules(
            r#"
domain: d
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: second, requests_per_unit: 1}
  - key: vip
    rate_limit:
      unlimited: true
      replaces: [{name: per_user}]
"#,
        );
        let (store, _clock) = store_at(0);
        let req = request("d", &[&[("user", "u")], &[("vip", "yes")]]);
        for _ in 0..3 {
            assert_eq!(decide(&set, &store, &req).overall_code, Code::Ok);
        }
    }

    #[test]
    fn hits_addend_per_request_and_per_descriptor() {
        let set = rules(MESSAGING);
        let (store, _clock) = store_at(0);
        let mut req = request("messaging", &[&[("to_number", "1")], &[("to_number", "2")]]);
        req.hits_addend = 40;
        req.descriptors[1].hits_addend = Some(60);
        let r = decide(&set, &store, &req);
        assert_eq!(
            r.statuses
                .iter()
                .map(|s| s.limit_remaining)
                .collect::<Vec<_>>(),
            [60, 40]
        );
        // A zero per-descriptor addend reads without counting.
        req.descriptors[1].hits_addend = Some(0);
        let r = decide(&set, &store, &req);
        assert_eq!(
            r.statuses
                .iter()
                .map(|s| s.limit_remaining)
                .collect::<Vec<_>>(),
            [20, 40]
        );
        // Over the limit: nothing is taken, what is left is reported.
        req.hits_addend = 21;
        let r = decide(&set, &store, &req);
        assert_eq!(codes(&r), [Code::OverLimit, Code::Ok]);
        assert_eq!(r.statuses[0].limit_remaining, 20);
        assert_eq!(r.overall_code, Code::OverLimit);
    }

    #[test]
    fn month_and_year_are_30_and_365_day_epoch_windows() {
        let set = rules(
            r#"
domain: d
descriptors:
  - key: m
    rate_limit: {unit: Month, requests_per_unit: 2}
  - key: y
    rate_limit: {unit: YEAR, requests_per_unit: 1}
"#,
        );
        let month = 30 * 86_400;
        let m = set.lookup("d", &entries(&[("m", "x")])).expect("rule");
        assert_eq!(m.quota(), Some((2, RateUnit::Month)));
        assert_eq!(
            m.rls_limit().map(|l| (l.requests_per_unit, l.unit)),
            Some((2, RateUnit::Month))
        );
        let (store, clock) = store_at(month * 7 + 5);
        let req = request("d", &[&[("m", "x")]]);
        assert_eq!(decide(&set, &store, &req).overall_code, Code::Ok);
        let r = decide(&set, &store, &req);
        assert_eq!(r.overall_code, Code::Ok);
        assert_eq!(
            r.statuses[0].duration_until_reset,
            Some(Duration::from_secs(month - 5))
        );
        assert_eq!(decide(&set, &store, &req).overall_code, Code::OverLimit);
        clock.set(Nanos::from_secs(month * 8));
        assert_eq!(decide(&set, &store, &req).overall_code, Code::Ok);
        let y = set.lookup("d", &entries(&[("y", "x")])).expect("rule");
        assert_eq!(
            y.algorithm().map(|a| a.quota()),
            Some(Some((1.0, Duration::from_secs(365 * 86_400))))
        );
        assert_eq!(RateUnit::from_name("WeEk"), Some(RateUnit::Week));
        assert_eq!(
            RateUnit::Week.duration(),
            floodgate::algorithm::fixed_window::Unit::Week.duration()
        );
    }

    #[test]
    fn a_floodgate_algorithm_with_a_burst_replaces_the_fixed_window() {
        let set = rules(
            r#"
domain: d
descriptors:
  - key: api_key
    rate_limit:
      name: keyed
      algorithm: token_bucket
      rate: 2
      capacity: 4
  - key: login
    rate_limit: {algorithm: sliding_log, limit: 5, window: 1m}
"#,
        );
        let rule = set
            .lookup("d", &entries(&[("api_key", "k")]))
            .expect("rule");
        assert_eq!(rule.algorithm().map(Algorithm::name), Some("token_bucket"));
        assert_eq!(rule.quota(), Some((2, RateUnit::Second)));
        assert_eq!(rule.name(), Some("keyed"));
        let login = set.lookup("d", &entries(&[("login", "u")])).expect("rule");
        assert_eq!(login.quota(), Some((5, RateUnit::Minute)));
        let (store, clock) = store_at(0);
        let req = request("d", &[&[("api_key", "k")]]);
        for _ in 0..4 {
            assert_eq!(decide(&set, &store, &req).overall_code, Code::Ok);
        }
        assert_eq!(decide(&set, &store, &req).overall_code, Code::OverLimit);
        clock.advance(Duration::from_millis(500));
        assert_eq!(decide(&set, &store, &req).overall_code, Code::Ok);
    }

    #[test]
    fn envoy_quota_picks_the_shortest_unit_with_one_request() {
        let quota = |spec: &str| {
            let spec: AlgorithmSpec = serde_json::from_str(spec).expect("spec");
            envoy_quota(&spec.build().expect("valid"))
        };
        assert_eq!(
            quota(r#"{"algorithm":"gcra","max_burst":1,"count":30,"period":60}"#),
            (30, RateUnit::Minute)
        );
        assert_eq!(
            quota(r#"{"algorithm":"fixed_window","limit":1,"window":90}"#),
            (40, RateUnit::Hour)
        );
        assert_eq!(
            quota(r#"{"algorithm":"smooth_bursty","rate":0.5}"#),
            (30, RateUnit::Minute)
        );
    }

    #[test]
    fn validation_names_the_problem_and_the_path() {
        let cases: &[(&str, &str, &str)] = &[
            ("descriptors: []", "domain", "non-empty name"),
            ("domain: \"\"", "domain", "non-empty name"),
            (
                "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - value: x\n",
                "descriptors[0].descriptors[0].key",
                "non-empty key",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
                "descriptors[0].rate_limit.unit",
                "unknown unit `fortnight`",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n",
                "descriptors[0].rate_limit.unit",
                "missing",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n",
                "descriptors[0].rate_limit.requests_per_unit",
                "missing",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    value: b\n  - key: a\n  - key: a\n    value: b\n",
                "descriptors[2]",
                "duplicate descriptor: key `a` with value `b` is also descriptors[0]",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: b\n        value: \"\"\n",
                "descriptors[0].descriptors[1]",
                "key `b` without a value is also descriptors[0].descriptors[0]",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n",
                "descriptors[0].rate_limit.unit",
                "`unlimited` limit takes no `unit`",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, requests_per_unit: 3}\n",
                "descriptors[0].rate_limit.requests_per_unit",
                "takes no",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    unlimited: true\n    rate_limit: {unit: second, requests_per_unit: 3}\n",
                "descriptors[0].unlimited",
                "cannot be combined",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: me\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: other}, {name: me}]\n",
                "descriptors[0].rate_limit.replaces[1].name",
                "`me` cannot replace itself",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces: [{}]\n",
                "descriptors[0].rate_limit.replaces[0].name",
                "needs the name",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {algorithm: token_bucket, rate: 0, capacity: 2}\n",
                "descriptors[0].rate_limit.rate",
                "invalid value 0",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {algorithm: token_bucket, rate: 1, capacity: 2, unit: second}\n",
                "descriptors[0].rate_limit.unit",
                "algorithm",
            ),
        ];
        for (yaml, path, needle) in cases {
            let (got_path, message) = invalid_at(yaml);
            assert_eq!(&got_path, path, "{yaml}");
            assert!(message.contains(needle), "{message:?} lacks {needle:?}");
        }
    }

    #[test]
    fn bad_yaml_and_unknown_fields_are_yaml_errors() {
        for (yaml, needle) in [
            ("domain: [unclosed", ""),
            ("domain: d\ndescriptor: []\n", "descriptor"),
            ("domain: d\ndescriptors:\n  - key: a\n    shadowmode: true\n", "shadowmode"),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 3}\n",
                "unknown field `burst`",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
                "requests_per_unit",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{nam: x}]}\n",
                "unknown field `nam`",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {algorithm: token_bucket, rate: 1, capacity: 2, burst: 3}\n",
                "burst",
            ),
        ] {
            match error(yaml) {
                ConfigFileError::Yaml { file: None, message } => {
                    assert!(message.contains(needle), "{message:?} lacks {needle:?}")
                }
                other => panic!("expected a Yaml error for {yaml:?}, got {other:?}"),
            }
        }
    }

    #[test]
    fn numbers_as_values_and_detailed_metric_load_as_envoy_reads_them() {
        let set = rules(
            r#"
domain: d
descriptors:
  - key: to_number
    value: 2061234567
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1, name: 2024}
"#,
        );
        let rule = set
            .lookup("d", &entries(&[("to_number", "2061234567")]))
            .expect("rule");
        assert_eq!(rule.name(), Some("2024"));
    }

    #[test]
    fn duplicate_domains_are_refused() {
        let d = DomainConfig {
            domain: "x".into(),
            descriptors: Vec::new(),
        };
        match RuleSet::new(vec![d.clone(), d]) {
            Err(ConfigFileError::Invalid { path, message }) => {
                assert_eq!(path, "domains[1].domain");
                assert!(message.contains("duplicate domain `x`"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn counter_keys_are_unambiguous() {
        let d = |pairs: &[(&str, &str)]| RlsDescriptor {
            entries: entries(pairs),
            hits_addend: None,
        };
        assert_ne!(
            counter_key("a", &d(&[("b:c", "d")])),
            counter_key("a", &d(&[("b", "c:d")]))
        );
        assert_ne!(
            counter_key("a1:", &d(&[("b", "")])),
            counter_key("a", &d(&[("1:b", "")]))
        );
    }

    #[test]
    fn the_envoy_example_file_loads() {
        let text = include_str!("../../../examples/config/envoy.yaml");
        let set = rules(text);
        assert!(set.has_domain("edge_proxy"));
    }

    #[test]
    fn json_requests_read_the_protobuf_mapping() {
        let req = rls_request_from_json(&json!({
            "domain": "d",
            "descriptors": [
                {"entries": [{"key": "a", "value": "1"}, {"key": "b"}], "hitsAddend": "7"},
                {"entries": [{"key": "c", "value": "2"}], "hits_addend": 0},
                {"entries": [], "hitsAddend": null, "limit": null}
            ],
            "hitsAddend": 3
        }))
        .expect("valid");
        assert_eq!(req.domain, "d");
        assert_eq!(req.hits_addend, 3);
        assert_eq!(
            req.descriptors[0].entries,
            entries(&[("a", "1"), ("b", "")])
        );
        assert_eq!(req.descriptors[0].hits_addend, Some(7));
        assert_eq!(req.descriptors[1].hits_addend, Some(0));
        assert_eq!(req.descriptors[2].hits_addend, None);
        assert_eq!(req.hits_for(&req.descriptors[2]), 3);
    }

    #[test]
    fn bad_json_requests_name_the_field() {
        let cases = [
            (json!([]), "the request"),
            (
                json!({"domain": 5, "descriptors": []}),
                "domain: expected a string",
            ),
            (json!({"domain": "d"}), "descriptors: must not be empty"),
            (
                json!({"descriptors": [{"entries": []}]}),
                "domain: must not be empty",
            ),
            (
                json!({"domain": "d", "descriptors": {}}),
                "descriptors: expected an array",
            ),
            (
                json!({"domain": "d", "descriptors": [{"entries": [{"key": 1}]}]}),
                "descriptors[0].entries[0].key",
            ),
            (
                json!({"domain": "d", "descriptors": [{"entries": [{"key": "a", "val": "b"}]}]}),
                "unknown field `val`",
            ),
            (
                json!({"domain": "d", "descriptors": [{"hitsAddend": -1}]}),
                "descriptors[0].hitsAddend",
            ),
            (
                json!({"domain": "d", "descriptors": [{}], "hitsAddend": 5_000_000_000u64}),
                "hitsAddend",
            ),
            (
                json!({"domain": "d", "descriptors": [{"limit": {"requestsPerUnit": 1}}]}),
                "descriptors[0].limit",
            ),
            (
                json!({"domain": "d", "descriptors": [{}], "extra": 1}),
                "`extra`",
            ),
        ];
        for (json, needle) in cases {
            let err = rls_request_from_json(&json).expect_err("must be refused");
            assert!(err.contains(needle), "{err:?} lacks {needle:?}");
        }
    }

    #[test]
    fn json_responses_follow_the_protobuf_mapping() {
        let response = RlsResponse {
            overall_code: Code::OverLimit,
            statuses: vec![
                RlsStatus {
                    code: Code::OverLimit,
                    current_limit: Some(RlsLimit {
                        name: None,
                        requests_per_unit: 1,
                        unit: RateUnit::Minute,
                    }),
                    limit_remaining: 0,
                    duration_until_reset: Some(Duration::from_secs(60)),
                },
                RlsStatus {
                    code: Code::Ok,
                    current_limit: Some(RlsLimit {
                        name: Some("per_user".into()),
                        requests_per_unit: 2,
                        unit: RateUnit::Week,
                    }),
                    limit_remaining: 1,
                    duration_until_reset: Some(Duration::from_millis(1500)),
                },
                RlsStatus {
                    code: Code::Ok,
                    ..RlsStatus::default()
                },
            ],
            shadow_over_limit: 0,
        };
        assert_eq!(
            rls_response_to_json(&response),
            json!({
                "overallCode": "OVER_LIMIT",
                "statuses": [
                    {"code": "OVER_LIMIT",
                     "currentLimit": {"requestsPerUnit": 1, "unit": "MINUTE"},
                     "durationUntilReset": "60s"},
                    {"code": "OK",
                     "currentLimit": {"name": "per_user", "requestsPerUnit": 2, "unit": "WEEK"},
                     "limitRemaining": 1,
                     "durationUntilReset": "1.500s"},
                    {"code": "OK"}
                ]
            })
        );
        assert_eq!(rls_response_to_json(&RlsResponse::default()), json!({}));
        assert_eq!(json_duration(Duration::from_micros(1)), "0.000001s");
        assert_eq!(json_duration(Duration::from_nanos(5)), "0.000000005s");
    }

    #[test]
    fn json_round_trip_through_a_decision() {
        let set = rules(MESSAGING);
        let (store, _clock) = store_at(86_400 * 3);
        let req = rls_request_from_json(&json!({
            "domain": "messaging",
            "descriptors": [{"entries": [{"key": "to_number", "value": "5"}]}],
            "hitsAddend": 100
        }))
        .expect("valid");
        let answer = rls_response_to_json(&decide(&set, &store, &req));
        assert_eq!(
            answer,
            json!({"overallCode": "OK", "statuses": [{
                "code": "OK",
                "currentLimit": {"requestsPerUnit": 100, "unit": "DAY"},
                "durationUntilReset": "86400s"
            }]})
        );
    }
}
