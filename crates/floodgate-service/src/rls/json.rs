//! envoyproxy/ratelimit's JSON API (`POST /json`): the protobuf JSON mapping of
//! `RateLimitRequest` and `RateLimitResponse` (camelCase fields, proto field names also accepted
//! on input, enums as names such as `"OVER_LIMIT"` and `"MINUTE"`, durations as `"60s"`, fields
//! at their default value omitted on output), read into and written from [`RlsRequest`] and
//! [`RlsResponse`].

use floodgate::algorithm::fixed_window::Unit;
use std::time::Duration;

use serde_json::{Map, Value};

use super::{Code, RlsDescriptor, RlsLimitOverride, RlsRequest, RlsResponse, RlsStatus};

/// Why a `POST /json` body is not a `RateLimitRequest`. Every variant names the field by its
/// path in the body (`descriptors[0].entries[1].key`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RlsJsonError {
    /// A field holds another JSON type than the mapping allows.
    #[error("{path}: expected {expected}, found {found}")]
    WrongType {
        /// The field (`the request` for the body itself).
        path: String,
        /// What the field must be: `a JSON object`, `an array` or `a string`.
        expected: &'static str,
        /// What it is: `a number`, `null`, ….
        found: &'static str,
    },
    /// A count is not a whole number ≥ 0 (as a JSON number or a decimal string).
    #[error("{path}: expected a non-negative integer, found {found}")]
    NotAnInteger {
        /// The field.
        path: String,
        /// The value as sent.
        found: String,
    },
    /// A count is above what the field holds.
    #[error("{path}: {value} is above {max}")]
    TooLarge {
        /// The field.
        path: String,
        /// The value as sent.
        value: u64,
        /// The largest value allowed.
        max: u64,
    },
    /// A field the mapping does not have.
    #[error("unknown field `{field}` in {within}")]
    UnknownField {
        /// The object holding it (`the request`, `descriptors[0]`, …).
        within: String,
        /// The field's name.
        field: String,
    },
    /// A descriptor's `limit` override has no `unit`.
    #[error("{path}: missing: a limit override needs a unit (SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR)")]
    MissingUnit {
        /// The override's `unit` field (`descriptors[0].limit.unit`).
        path: String,
    },
    /// A descriptor's `limit` override names a unit Envoy does not have.
    #[error("{path}: {found} is not a unit: expected SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR (or Envoy's number, 1 to 7)")]
    UnknownUnit {
        /// The override's `unit` field.
        path: String,
        /// The value as sent, in JSON.
        found: String,
    },
    /// What Envoy's API requires of every request, checked as over gRPC: a domain, at least
    /// one descriptor, each with at least one entry, every key non-empty.
    #[error(transparent)]
    Invalid(#[from] super::InvalidRequest),
}

/// Reads a `RateLimitRequest` in the protobuf JSON mapping, as envoyproxy/ratelimit's `POST
/// /json` takes it: `{"domain", "descriptors": [{"entries": [{"key", "value"}],
/// "hitsAddend"?, "isNegativeHits"?, "limit"?: {"requestsPerUnit", "unit"}}], "hitsAddend"?}`.
/// Field names may
/// also be written as in the `.proto` (`hits_addend`, `requests_per_unit`); `null` is the
/// field's default; integers may be JSON numbers or decimal strings; a `limit` override's
/// `unit` is an enum name (`"MINUTE"`, any case) or Envoy's number, and its absent
/// `requestsPerUnit` is 0. Refused ([`RlsJsonError`], naming the field): another type, an
/// unknown field, a count above its field's range (`requestsPerUnit` above `u32::MAX`), a
/// `limit` without a unit or with an unknown one, and what Envoy's API refuses over gRPC too
/// ([`RlsRequest::validate`]: an empty `domain`, no descriptors, an empty key). A descriptor
/// without `entries`, or with none, is taken (it matches nothing).
pub fn rls_request_from_json(json: &Value) -> Result<RlsRequest, RlsJsonError> {
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
                request.hits_addend = u32::try_from(n).map_err(|_| RlsJsonError::TooLarge {
                    path: "hitsAddend".to_string(),
                    value: n,
                    max: u64::from(u32::MAX),
                })?;
            }
            other => return Err(unknown_field("the request", other)),
        }
    }
    request.validate()?;
    Ok(request)
}

fn descriptor_from_json(json: &Value, i: usize) -> Result<RlsDescriptor, RlsJsonError> {
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
                            other => return Err(unknown_field(&entry_path, other)),
                        }
                    }
                    descriptor.entries.push((key, val));
                }
            }
            "hitsAddend" | "hits_addend" => {
                descriptor.hits_addend = json_u64(value, &format!("{path}.hitsAddend"))?;
            }
            "limit" => descriptor.limit = limit_from_json(value, &format!("{path}.limit"))?,
            "isNegativeHits" | "is_negative_hits" => {
                descriptor.negative_hits = match value {
                    Value::Null => false,
                    Value::Bool(b) => *b,
                    other => {
                        let path = format!("{path}.isNegativeHits");
                        return Err(wrong_type(&path, "true or false", other));
                    }
                }
            }
            other => return Err(unknown_field(&path, other)),
        }
    }
    Ok(descriptor)
}

/// A descriptor's `limit` override: `{"requestsPerUnit", "unit"}`; `null` is none. As in
/// protobuf, an absent `requestsPerUnit` is 0 (every request refused); the unit is required,
/// as an enum name (any case) or Envoy's number.
fn limit_from_json(json: &Value, path: &str) -> Result<Option<RlsLimitOverride>, RlsJsonError> {
    if json.is_null() {
        return Ok(None);
    }
    let mut requests_per_unit = 0;
    let mut unit = None;
    for (field, value) in as_object(json, path)? {
        match field.as_str() {
            "requestsPerUnit" | "requests_per_unit" => {
                let field_path = format!("{path}.requestsPerUnit");
                let n = json_u64(value, &field_path)?.unwrap_or(0);
                requests_per_unit = u32::try_from(n).map_err(|_| RlsJsonError::TooLarge {
                    path: field_path,
                    value: n,
                    max: u64::from(u32::MAX),
                })?;
            }
            "unit" => {
                let unit_path = format!("{path}.unit");
                unit = match value {
                    Value::Null => None,
                    Value::String(name) => Some(Unit::from_name(name).ok()),
                    Value::Number(n) => Some(
                        n.as_i64()
                            .and_then(|n| i32::try_from(n).ok())
                            .and_then(Unit::from_envoy_number),
                    ),
                    other => return Err(wrong_type(&unit_path, "a string", other)),
                }
                .map(|u| {
                    u.ok_or_else(|| RlsJsonError::UnknownUnit {
                        path: unit_path,
                        found: value.to_string(),
                    })
                })
                .transpose()?;
            }
            other => return Err(unknown_field(path, other)),
        }
    }
    let unit = unit.ok_or_else(|| RlsJsonError::MissingUnit {
        path: format!("{path}.unit"),
    })?;
    Ok(Some(RlsLimitOverride {
        requests_per_unit,
        unit,
    }))
}

fn unknown_field(within: &str, field: &str) -> RlsJsonError {
    RlsJsonError::UnknownField {
        within: within.to_string(),
        field: field.to_string(),
    }
}

fn wrong_type(path: &str, expected: &'static str, found: &Value) -> RlsJsonError {
    RlsJsonError::WrongType {
        path: path.to_string(),
        expected,
        found: kind(found),
    }
}

fn as_object<'a>(json: &'a Value, path: &str) -> Result<&'a Map<String, Value>, RlsJsonError> {
    json.as_object()
        .ok_or_else(|| wrong_type(path, "a JSON object", json))
}

fn json_array<'a>(json: &'a Value, path: &str) -> Result<&'a [Value], RlsJsonError> {
    match json {
        Value::Null => Ok(&[]),
        Value::Array(items) => Ok(items),
        other => Err(wrong_type(path, "an array", other)),
    }
}

fn json_string(json: &Value, path: &str) -> Result<String, RlsJsonError> {
    match json {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        other => Err(wrong_type(path, "a string", other)),
    }
}

/// An unsigned integer as protobuf JSON writes it: a number or a decimal string; `None` for
/// `null`.
fn json_u64(json: &Value, path: &str) -> Result<Option<u64>, RlsJsonError> {
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
    parsed.map(Some).ok_or_else(|| RlsJsonError::NotAnInteger {
        path: path.to_string(),
        found: json.to_string(),
    })
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
/// "requestsPerUnit", "unit"}, "limitRemaining", "durationUntilReset": "12s"}],
/// "responseHeadersToAdd": [{"key", "value"}], "dynamicMetadata": {…}}`. As protobuf JSON
/// does, fields at their default value (code `UNKNOWN`, 0, an empty name or list, no limit,
/// duration or metadata) are left out.
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
    if let Some(metadata) = &response.dynamic_metadata {
        out.insert("dynamicMetadata".into(), Value::Object(metadata.clone()));
    }
    if !response.response_headers_to_add.is_empty() {
        let headers = response
            .response_headers_to_add
            .iter()
            .map(|(key, value)| serde_json::json!({"key": key, "value": value}))
            .collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
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
        l.insert("unit".into(), limit.unit.envoy_name().into());
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
    use crate::rls::{entries, RlsLimit};
    use serde_json::json;

    #[test]
    fn json_requests_read_the_protobuf_mapping() {
        let req = rls_request_from_json(&json!({
            "domain": "d",
            "descriptors": [
                {"entries": [{"key": "a", "value": "1"}, {"key": "b"}], "hitsAddend": "7"},
                {"entries": [{"key": "c", "value": "2"}], "hits_addend": 0},
                {"entries": [{"key": "d"}], "hitsAddend": null, "limit": null}
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
        assert_eq!(req.descriptors[2].limit, None);
        let overrides = rls_request_from_json(&json!({
            "domain": "d",
            "descriptors": [
                {"entries": [{"key": "k"}], "limit": {"requestsPerUnit": 5, "unit": "MINUTE"}},
                {"entries": [{"key": "k"}], "limit": {"requests_per_unit": "4294967295", "unit": "week"}},
                {"entries": [{"key": "k"}], "limit": {"unit": 7}}
            ]
        }))
        .expect("valid");
        let limits: Vec<_> = overrides.descriptors.iter().map(|d| d.limit).collect();
        let limit = |requests_per_unit, unit| {
            Some(RlsLimitOverride {
                requests_per_unit,
                unit,
            })
        };
        assert_eq!(
            limits,
            [
                limit(5, Unit::Minute),
                limit(u32::MAX, Unit::Week),
                limit(0, Unit::Week)
            ]
        );
    }

    #[test]
    fn bad_json_requests_name_the_field() {
        let cases = [
            (json!([]), "the request"),
            (
                json!({"domain": 5, "descriptors": []}),
                "domain: expected a string",
            ),
            (
                json!({"domain": "d"}),
                "descriptors: must hold at least one descriptor",
            ),
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
                "descriptors[0].limit.unit: missing",
            ),
            (
                json!({"domain": "d", "descriptors": [{"limit": {"requestsPerUnit": 1, "unit": "FORTNIGHT"}}]}),
                "descriptors[0].limit.unit: \"FORTNIGHT\" is not a unit",
            ),
            (
                json!({"domain": "d", "descriptors": [{"limit": {"requestsPerUnit": 1, "unit": 0}}]}),
                "descriptors[0].limit.unit: 0 is not a unit",
            ),
            (
                json!({"domain": "d", "descriptors": [{"limit": {"requestsPerUnit": -1, "unit": "SECOND"}}]}),
                "descriptors[0].limit.requestsPerUnit",
            ),
            (
                json!({"domain": "d", "descriptors": [{"limit": {"unit": "SECOND", "burst": 1}}]}),
                "unknown field `burst` in descriptors[0].limit",
            ),
            (
                json!({"domain": "d", "descriptors": [{}], "extra": 1}),
                "`extra`",
            ),
        ];
        for (json, needle) in cases {
            let err = rls_request_from_json(&json)
                .expect_err("must be refused")
                .to_string();
            assert!(err.contains(needle), "{err:?} lacks {needle:?}");
        }
        assert_eq!(
            rls_request_from_json(&json!({"domain": "d", "descriptors": [{"limit": {}}]})),
            Err(RlsJsonError::MissingUnit {
                path: "descriptors[0].limit.unit".into()
            })
        );
        assert_eq!(
            rls_request_from_json(&json!({"domain": "d", "descriptors": [
                {"limit": {"requestsPerUnit": "4294967296", "unit": "SECOND"}}
            ]})),
            Err(RlsJsonError::TooLarge {
                path: "descriptors[0].limit.requestsPerUnit".into(),
                value: 4_294_967_296,
                max: u64::from(u32::MAX)
            })
        );
        assert_eq!(
            rls_request_from_json(
                &json!({"domain": "d", "descriptors": [{}], "hitsAddend": "5000000000"})
            ),
            Err(RlsJsonError::TooLarge {
                path: "hitsAddend".into(),
                value: 5_000_000_000,
                max: u64::from(u32::MAX)
            })
        );
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
                        unit: Unit::Minute,
                    }),
                    limit_remaining: 0,
                    duration_until_reset: Some(Duration::from_secs(60)),
                    quota_mode: false,
                },
                RlsStatus {
                    code: Code::Ok,
                    current_limit: Some(RlsLimit {
                        name: Some("per_user".into()),
                        requests_per_unit: 2,
                        unit: Unit::Week,
                    }),
                    limit_remaining: 1,
                    duration_until_reset: Some(Duration::from_millis(1500)),
                    quota_mode: false,
                },
                RlsStatus {
                    code: Code::Ok,
                    ..RlsStatus::default()
                },
            ],
            shadow_over_limit: 0,
            dynamic_metadata: Some(Map::from_iter([("domain".to_string(), json!("d"))])),
            response_headers_to_add: vec![("RateLimit-Limit".into(), "1".into())],
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
                ],
                "dynamicMetadata": {"domain": "d"},
                "responseHeadersToAdd": [{"key": "RateLimit-Limit", "value": "1"}]
            })
        );
        assert_eq!(rls_response_to_json(&RlsResponse::default()), json!({}));
        assert_eq!(json_duration(Duration::from_micros(1)), "0.000001s");
        assert_eq!(json_duration(Duration::from_nanos(5)), "0.000000005s");
    }
}
