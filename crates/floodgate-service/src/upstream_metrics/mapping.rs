//! statsd_exporter's mapping file (envoyproxy/ratelimit's `PROMETHEUS_MAPPER_YAML`): how each
//! statsd name becomes a Prometheus series name and labels.
//!
//! # What is read
//!
//! The file's `mappings:` list, each entry with:
//!
//! - `match`: the statsd name to match. A glob by default: the name's dot-separated parts
//!   against the pattern's, where `*` matches one or more characters other than `.` (so
//!   `a.*.c` matches `a.b.c`, not `a.b.b.c`). With `match_type: regex`, a regular
//!   expression found anywhere in the name (statsd_exporter does not anchor it).
//! - `name`: the series' name; `$1`, `${1}`… stand for the `*`s or the expression's groups.
//! - `labels`: label names and values, with the same `$n`.
//! - `action: drop`: the names it matches are not exported.
//! - `match_metric_type` (`counter`, `gauge`, `observer`): the entry applies only to statsd
//!   metrics of that type (every statistic is a counter but the response time, an observer).
//! - `scale`: a number every value the entry maps is multiplied by, as statsd_exporter
//!   multiplies it: a counter's count, and the response time, which statsd has in
//!   milliseconds (`scale: 0.001` makes it seconds; without `scale` it stays milliseconds).
//! - `timer_type`, `buckets`, `quantiles`, `ttl`, `help`: accepted and not used (the response
//!   time is always a histogram with Floodgate's bucket bounds; no series expires).
//!
//! Globs are tried first, in the file's order, then regular expressions, in the file's order,
//! as statsd_exporter tries them; the first that matches wins. A name nothing matches is
//! exported under its statsd name with every character outside `[A-Za-z0-9_]` written `_`.
//! `defaults:` and any other key are refused, naming it, as are an unknown `match_type` or
//! `action`, a `$n` beyond the pattern's captures and an expression that does not compile.
//!
//! [`Mapping::upstream_default`] is the mapping envoyproxy/ratelimit builds in, which Envoy
//! Gateway's file repeats: what is served when no file is given. Its response time is in
//! seconds (`scale: 0.001`), unless upstream's `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`
//! asks for the milliseconds it observed before upstream scaled it (the entry without its
//! `scale`, as upstream removes that line).

use std::path::Path;

use regex::Regex;
use serde::Deserialize;

/// What a statsd metric is, for `match_metric_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatsdType {
    /// A counter (every statistic but the response time).
    Counter,
    /// A timer or histogram (the response time).
    Observer,
}

/// A mapping file, read (see the [module documentation](self)).
#[derive(Debug)]
pub struct Mapping {
    globs: Vec<Rule>,
    regexes: Vec<Rule>,
}

#[derive(Debug)]
struct Rule {
    matcher: Regex,
    name: String,
    labels: Vec<(String, String)>,
    drop: bool,
    only: Option<StatsdType>,
    scale: Option<f64>,
}

/// A series a statsd name maps to: its name and labels, in the file's order, and the scale
/// its values take.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The series' name.
    pub name: String,
    /// Its labels.
    pub labels: Vec<(String, String)>,
    /// What each value is multiplied by (`None`: 1, the value as statsd has it).
    pub scale: Option<f64>,
}

/// Why a mapping file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum MappingError {
    /// The file cannot be read.
    #[error("{file}: cannot read the file: {error}")]
    Io {
        /// The file.
        file: String,
        /// Why.
        error: std::io::Error,
    },
    /// The file is not a mapping file.
    #[error("{file}: {message}")]
    Invalid {
        /// The file.
        file: String,
        /// What is wrong, naming the entry and the field.
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    mappings: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    #[serde(rename = "match")]
    pattern: String,
    #[serde(default)]
    match_type: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    labels: serde_norway::Mapping,
    #[serde(default)]
    action: Option<String>,
    #[serde(default)]
    match_metric_type: Option<String>,
    #[serde(default)]
    scale: Option<f64>,
    // Accepted and not used (see the module documentation).
    #[serde(default, rename = "timer_type")]
    _timer_type: Option<serde_norway::Value>,
    #[serde(default, rename = "observer_type")]
    _observer_type: Option<serde_norway::Value>,
    #[serde(default, rename = "buckets")]
    _buckets: Option<serde_norway::Value>,
    #[serde(default, rename = "quantiles")]
    _quantiles: Option<serde_norway::Value>,
    #[serde(default, rename = "ttl")]
    _ttl: Option<serde_norway::Value>,
    #[serde(default, rename = "help")]
    _help: Option<serde_norway::Value>,
}

/// envoyproxy/ratelimit's documented mapping, which Envoy Gateway ships as its own file.
const UPSTREAM_DEFAULT: &str = r#"
mappings:
  - match: "ratelimit.service.rate_limit.*.*.near_limit"
    name: "ratelimit_service_rate_limit_near_limit"
    labels: {domain: "$1", key1: "$2"}
  - match: "ratelimit.service.rate_limit.*.*.over_limit"
    name: "ratelimit_service_rate_limit_over_limit"
    labels: {domain: "$1", key1: "$2"}
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "ratelimit_service_rate_limit_total_hits"
    labels: {domain: "$1", key1: "$2"}
  - match: "ratelimit.service.rate_limit.*.*.within_limit"
    name: "ratelimit_service_rate_limit_within_limit"
    labels: {domain: "$1", key1: "$2"}
  - match: "ratelimit.service.rate_limit.*.*.shadow_mode"
    name: "ratelimit_service_rate_limit_shadow_mode"
    labels: {domain: "$1", key1: "$2"}
  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.near_limit"
    match_type: regex
    name: "ratelimit_service_rate_limit_near_limit"
    labels: {domain: "$1", key1: "$2", key2: "$3"}
  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.over_limit"
    match_type: regex
    name: "ratelimit_service_rate_limit_over_limit"
    labels: {domain: "$1", key1: "$2", key2: "$3"}
  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.total_hits"
    match_type: regex
    name: "ratelimit_service_rate_limit_total_hits"
    labels: {domain: "$1", key1: "$2", key2: "$3"}
  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.within_limit"
    match_type: regex
    name: "ratelimit_service_rate_limit_within_limit"
    labels: {domain: "$1", key1: "$2", key2: "$3"}
  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.shadow_mode"
    match_type: regex
    name: "ratelimit_service_rate_limit_shadow_mode"
    labels: {domain: "$1", key1: "$2", key2: "$3"}
  - match: "ratelimit.service.call.should_rate_limit.*"
    name: "ratelimit_service_should_rate_limit_error"
    match_metric_type: counter
    labels: {err_type: "$1"}
  - match: "ratelimit_server.*.total_requests"
    name: "ratelimit_service_total_requests"
    match_metric_type: counter
    labels: {grpc_method: "$1"}
  - match: "ratelimit_server.*.response_time"
    name: "ratelimit_service_response_time_seconds"
    labels: {grpc_method: "$1"}
    scale: 0.001
  - match: "ratelimit.service.config_load_success"
    name: "ratelimit_service_config_load_success"
    match_metric_type: counter
  - match: "ratelimit.service.config_load_error"
    name: "ratelimit_service_config_load_error"
    match_metric_type: counter
"#;

/// The response time's scale line in [`UPSTREAM_DEFAULT`], which the milliseconds of
/// `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS` take away.
const SECONDS: &str = "    scale: 0.001\n";

impl Mapping {
    /// envoyproxy/ratelimit's built-in mapping (see the [module documentation](self)): the
    /// response time in seconds, or in milliseconds when `response_time_as_milliseconds`.
    pub fn upstream_default(response_time_as_milliseconds: bool) -> Mapping {
        let text = if response_time_as_milliseconds {
            UPSTREAM_DEFAULT.replacen(SECONDS, "", 1)
        } else {
            UPSTREAM_DEFAULT.to_string()
        };
        Mapping::parse(&text, "the built-in mapping")
            .expect("the built-in mapping is valid (tested)")
    }

    /// Reads the mapping file at `path`.
    pub fn load(path: &Path) -> Result<Mapping, MappingError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| MappingError::Io {
            file: file.clone(),
            error,
        })?;
        Mapping::parse(&text, &file)
    }

    /// Reads a mapping file's `text`; errors name `file`.
    pub fn parse(text: &str, file: &str) -> Result<Mapping, MappingError> {
        let invalid = |message: String| MappingError::Invalid {
            file: file.to_string(),
            message,
        };
        let parsed: File = serde_norway::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let mut mapping = Mapping {
            globs: Vec::new(),
            regexes: Vec::new(),
        };
        for (i, entry) in parsed.mappings.into_iter().enumerate() {
            match rule(entry, i).map_err(invalid)? {
                Some((true, rule)) => mapping.regexes.push(rule),
                Some((false, rule)) => mapping.globs.push(rule),
                None => {}
            }
        }
        Ok(mapping)
    }

    /// The series the statsd metric `name` of type `kind` maps to; `None` when dropped.
    pub fn map(&self, name: &str, kind: StatsdType) -> Option<Series> {
        let applies = |rule: &&Rule| rule.only.is_none_or(|only| only == kind);
        for rule in self.globs.iter().chain(&self.regexes).filter(applies) {
            let Some(captures) = rule.matcher.captures(name) else {
                continue;
            };
            if rule.drop {
                return None;
            }
            let expand = |template: &str| {
                let mut out = String::new();
                captures.expand(template, &mut out);
                out
            };
            return Some(Series {
                name: expand(&rule.name),
                labels: rule
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), expand(v)))
                    .collect(),
                scale: rule.scale,
            });
        }
        Some(Series {
            name: escaped(name),
            labels: Vec::new(),
            scale: None,
        })
    }
}

/// The rule entry `i` of a mapping file stands for, and whether its match is a regex
/// (`None`: an entry that can never apply, a gauge's); what is wrong with it otherwise.
fn rule(entry: Entry, i: usize) -> Result<Option<(bool, Rule)>, String> {
    let at = |field: &str| format!("mappings[{i}].{field}");
    let regex = match entry.match_type.as_deref() {
        None | Some("glob") | Some("") => false,
        Some("regex") => true,
        Some(other) => {
            return Err(format!(
                "{}: `{other}` is not glob or regex",
                at("match_type")
            ))
        }
    };
    let drop = match entry.action.as_deref() {
        None | Some("map") | Some("") => false,
        Some("drop") => true,
        Some(other) => return Err(format!("{}: `{other}` is not map or drop", at("action"))),
    };
    let only = match entry.match_metric_type.as_deref() {
        None | Some("") => None,
        Some("counter") => Some(StatsdType::Counter),
        Some("observer") | Some("timer") | Some("histogram") | Some("distribution") => {
            Some(StatsdType::Observer)
        }
        // No gauge goes through the mapping: such an entry can never apply.
        Some("gauge") => return Ok(None),
        Some(other) => {
            return Err(format!(
                "{}: `{other}` is not counter, gauge or observer",
                at("match_metric_type")
            ))
        }
    };
    let source = if regex {
        entry.pattern.clone()
    } else {
        glob_to_regex(&entry.pattern)
    };
    let matcher =
        Regex::new(&source).map_err(|e| format!("{}: `{}`: {e}", at("match"), entry.pattern))?;
    let captures = matcher.captures_len() - 1;
    let name = match entry.name {
        Some(name) => name,
        None if drop => String::new(),
        None => return Err(format!("{}: missing", at("name"))),
    };
    check_references(&name, captures).map_err(|n| {
        format!(
            "{}: `${n}` but the match has {captures} captures",
            at("name")
        )
    })?;
    let mut labels = Vec::new();
    for (key, value) in entry.labels {
        let (Some(key), Some(value)) = (key.as_str(), value_text(&value)) else {
            return Err(format!("{}: names and values are strings", at("labels")));
        };
        check_references(&value, captures).map_err(|n| {
            format!(
                "{}: `${n}` but the match has {captures} captures",
                at(&format!("labels.{key}"))
            )
        })?;
        labels.push((key.to_string(), value));
    }
    let rule = Rule {
        matcher,
        name,
        labels,
        drop,
        only,
        scale: entry.scale,
    };
    Ok(Some((regex, rule)))
}

/// A glob's regular expression: anchored, each `*` a group of one or more non-dots.
fn glob_to_regex(glob: &str) -> String {
    let mut out = String::from("^");
    for (i, piece) in glob.split('*').enumerate() {
        if i > 0 {
            out.push_str("([^.]+)");
        }
        out.push_str(&regex::escape(piece));
    }
    out.push('$');
    out
}

/// The first `$n` in `template` beyond `captures`, if any.
fn check_references(template: &str, captures: usize) -> Result<(), usize> {
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        rest = &rest[at + 1..];
        let digits: String = rest
            .trim_start_matches('{')
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if let Ok(n) = digits.parse::<usize>() {
            if n > captures {
                return Err(n);
            }
        }
    }
    Ok(())
}

fn value_text(value: &serde_norway::Value) -> Option<String> {
    match value {
        serde_norway::Value::String(s) => Some(s.clone()),
        serde_norway::Value::Number(n) => Some(n.to_string()),
        serde_norway::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// statsd_exporter's name for an unmapped statsd name: every character outside
/// `[A-Za-z0-9_]` written `_`.
fn escaped(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Labels as `key="value",…`, escaped, in order.
pub(super) fn label_text(labels: &[(String, String)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(k);
        out.push_str("=\"");
        out.push_str(&crate::prometheus::escape_label(v));
        out.push('"');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, labels: &[(&str, &str)]) -> Option<Series> {
        Some(Series {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            scale: None,
        })
    }

    #[test]
    fn the_default_maps_as_upstream_documents() {
        let m = Mapping::upstream_default(false);
        let counter = StatsdType::Counter;
        assert_eq!(
            m.map(
                "ratelimit.service.rate_limit.edge.path_/a.total_hits",
                counter
            ),
            series(
                "ratelimit_service_rate_limit_total_hits",
                &[("domain", "edge"), ("key1", "path_/a")]
            )
        );
        assert_eq!(
            m.map(
                "ratelimit.service.rate_limit.edge.a_1.b.c_2.over_limit",
                counter
            ),
            series(
                "ratelimit_service_rate_limit_over_limit",
                &[("domain", "edge"), ("key1", "a_1"), ("key2", "b")]
            )
        );
        assert_eq!(
            m.map(
                "ratelimit.service.rate_limit.edge.a.over_limit_with_local_cache",
                counter
            ),
            series(
                "ratelimit_service_rate_limit_edge_a_over_limit_with_local_cache",
                &[]
            )
        );
        assert_eq!(
            m.map(
                "ratelimit_server.ShouldRateLimit.response_time",
                StatsdType::Observer
            ),
            series(
                "ratelimit_service_response_time_seconds",
                &[("grpc_method", "ShouldRateLimit")]
            )
            .map(|s| Series {
                scale: Some(0.001),
                ..s
            }),
            "milliseconds scaled to seconds"
        );
        assert_eq!(
            Mapping::upstream_default(true)
                .map(
                    "ratelimit_server.ShouldRateLimit.response_time",
                    StatsdType::Observer
                )
                .unwrap()
                .scale,
            None,
            "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS: as statsd has it"
        );
        // A counter-only entry does not take an observer.
        assert_eq!(
            m.map(
                "ratelimit_server.ShouldRateLimit.total_requests",
                StatsdType::Observer
            ),
            series("ratelimit_server_ShouldRateLimit_total_requests", &[])
        );
    }

    /// A file in the form Envoy Gateway ships (`timer_type`, `match_metric_type`, globs for
    /// one key and expressions for more), written for this test.
    const GATEWAY_FORM: &str = r#"
# the statsd exporter's mapping
mappings:
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "ratelimit_service_rate_limit_total_hits"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"

  - match: "ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.near_limit"
    match_type: regex
    name: "ratelimit_service_rate_limit_near_limit"
    timer_type: "histogram"
    labels:
      domain: "$1"
      key1: "$2"
      key2: "$3"

  - match: "ratelimit.service.call.should_rate_limit.*"
    name: "ratelimit_service_should_rate_limit_error"
    match_metric_type: counter
    labels:
      err_type: "$1"
  - match: "ratelimit_server.*.response_time"
    name: "ratelimit_service_response_time_seconds"
    timer_type: histogram
    labels:
      grpc_method: "$1"
  - match: "ratelimit.service.config_load_success"
    name: "ratelimit_service_config_load_success"
    match_metric_type: counter
"#;

    #[test]
    fn a_file_in_envoy_gateways_form_maps_as_the_default() {
        // Its response time has no `scale`: milliseconds, as the built-in one's used to be.
        let theirs = Mapping::parse(GATEWAY_FORM, "conf.yaml").unwrap();
        let ours = Mapping::upstream_default(true);
        for (name, kind) in [
            (
                "ratelimit.service.rate_limit.rl.user.total_hits",
                StatsdType::Counter,
            ),
            (
                "ratelimit.service.rate_limit.rl.user_alice.path.x.near_limit",
                StatsdType::Counter,
            ),
            (
                "ratelimit.service.call.should_rate_limit.redis_error",
                StatsdType::Counter,
            ),
            (
                "ratelimit_server.ShouldRateLimit.response_time",
                StatsdType::Observer,
            ),
            ("ratelimit.service.config_load_success", StatsdType::Counter),
            ("ratelimit.service.global_shadow_mode", StatsdType::Counter),
        ] {
            assert_eq!(theirs.map(name, kind), ours.map(name, kind), "{name}");
        }
    }

    #[test]
    fn a_files_scale_is_read() {
        let m = Mapping::parse(
            "mappings:\n  - match: a.*\n    name: x\n    scale: 1e-6\n  - match: b.*\n    name: y\n    scale: 1024\n",
            "f.yaml",
        )
        .unwrap();
        assert_eq!(
            m.map("a.q", StatsdType::Observer).unwrap().scale,
            Some(1e-6)
        );
        assert_eq!(
            m.map("b.q", StatsdType::Counter).unwrap().scale,
            Some(1024.0)
        );
        assert_eq!(m.map("c.q", StatsdType::Counter).unwrap().scale, None);
    }

    #[test]
    fn drops_globs_before_regexes_and_captures_in_names() {
        let m = Mapping::parse(
            r#"
mappings:
  - match: "a\\.(.*)"
    match_type: regex
    name: "regex_$1"
  - match: "a.*"
    name: "glob_${1}_total"
    labels: {part: "$1"}
  - match: "secret.*"
    action: drop
"#,
            "f.yaml",
        )
        .unwrap();
        assert_eq!(
            m.map("a.b", StatsdType::Counter),
            series("glob_b_total", &[("part", "b")])
        );
        assert_eq!(
            m.map("a.b.c", StatsdType::Counter),
            series("regex_b.c", &[])
        );
        assert_eq!(m.map("secret.x", StatsdType::Counter), None);
    }

    #[test]
    fn bad_files_are_refused_naming_the_entry_and_field() {
        for (text, wanted) in [
            (
                "mappings:\n  - match: a.*\n    name: x_$2\n",
                "mappings[0].name: `$2` but the match has 1 captures",
            ),
            ("mappings:\n  - match: a.*\n", "mappings[0].name: missing"),
            (
                "mappings:\n  - match: a\n    name: x\n    match_type: fuzzy\n",
                "mappings[0].match_type: `fuzzy`",
            ),
            (
                "mappings:\n  - match: '('\n    match_type: regex\n    name: x\n",
                "mappings[0].match: `(`",
            ),
            ("defaults: {ttl: 1m}\nmappings: []\n", "defaults"),
            (
                "mappings:\n  - match: a.*\n    name: x\n    labels: {k: $3}\n",
                "mappings[0].labels.k",
            ),
        ] {
            let error = Mapping::parse(text, "conf.yaml").unwrap_err().to_string();
            assert!(error.starts_with("conf.yaml: "), "{error}");
            assert!(error.contains(wanted), "{wanted}: {error}");
        }
    }
}
