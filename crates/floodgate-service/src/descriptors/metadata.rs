//! The dynamic metadata of a `ShouldRateLimit` answer (envoyproxy/ratelimit's
//! `RESPONSE_DYNAMIC_METADATA`), built as upstream builds it: what the request asked, and the
//! `metadata` of every descriptor that passed, merged.
//!
//! ```json
//! {
//!   "domain": "ai-gateway-quota",
//!   "descriptors": [
//!     {"entries": ["backend_name=default/openai", "model_name_override=gpt-4"]},
//!     {"entries": ["user=alice"], "limit": "requests_per_unit:5 unit:MINUTE", "hitsAddend": 20}
//!   ],
//!   "hitsAddend": 3,
//!   "metadata": {"name": "service_1", "tier": {"a": 1, "b": 2}}
//! }
//! ```
//!
//! - `descriptors`: one object per request descriptor, in request order: `entries` (each
//!   `key=value`), `limit` when the descriptor carries its own (the override in protobuf's
//!   text form, `requests_per_unit:N unit:UNIT`, a field at its default left out; Go's text
//!   form, which upstream writes, sometimes puts two spaces between the fields — deliberately
//!   unstable there — and always one here), and `hitsAddend` when the descriptor sets its own
//!   (0 included).
//! - `hitsAddend`: the request's, when not 0.
//! - `metadata`: present when some passed descriptor has any. A descriptor passed when its
//!   status is not `OVER_LIMIT` (a shadow-mode descriptor over its limit is `OK`, so it
//!   passed; a quota-mode one over its limit did not) and it is not `unlimited`; its metadata
//!   is that of the rule that limits it — none for a descriptor carrying its own `limit`,
//!   matching nothing, or whose rule another one `replaces`. They merge in request order: a
//!   key already present keeps its first value, except that two mappings under one key are
//!   merged the same way, key by key, at any depth.
//!
//! Upstream's merge puts the first descriptor's nested mappings into the answer by reference
//! and merges later ones into them, so that they also change the rule's own metadata for
//! every later call; here each answer is built from copies.

use serde_json::{Map, Value};

use super::answer::Matched;
use crate::rls::{Code, RlsDescriptor, RlsLimitOverride, RlsRequest, RlsStatus};

/// The dynamic metadata of `request` answered with `statuses`, the rules being those
/// `matched` (`None`: the domain is unknown, so no descriptor has metadata).
pub(super) fn response_metadata(
    request: &RlsRequest,
    statuses: &[RlsStatus],
    matched: Option<&Matched<'_>>,
) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("domain".into(), request.domain.clone().into());
    let descriptors = request.descriptors.iter().map(descriptor).collect();
    out.insert("descriptors".into(), Value::Array(descriptors));
    if request.hits_addend != 0 {
        out.insert("hitsAddend".into(), request.hits_addend.into());
    }
    let mut passed = Map::new();
    if let Some(matched) = matched {
        for (i, status) in statuses.iter().enumerate() {
            if status.code == Code::OverLimit {
                continue;
            }
            if let Some(metadata) = matched.metadata_of(i) {
                merge(&mut passed, metadata);
            }
        }
    }
    if !passed.is_empty() {
        out.insert("metadata".into(), Value::Object(passed));
    }
    out
}

/// One request descriptor as the metadata describes it.
fn descriptor(d: &RlsDescriptor) -> Value {
    let entries = d
        .entries
        .iter()
        .map(|(k, v)| Value::String(format!("{k}={v}")))
        .collect();
    let mut out = Map::from_iter([("entries".to_string(), Value::Array(entries))]);
    if let Some(limit) = &d.limit {
        out.insert("limit".into(), override_text(limit).into());
    }
    if let Some(hits) = d.hits_addend {
        out.insert("hitsAddend".into(), hits.into());
    }
    Value::Object(out)
}

/// A limit override in protobuf's text form, one space between fields, a field at its
/// default (0, `UNKNOWN`) left out.
fn override_text(limit: &RlsLimitOverride) -> String {
    let mut fields = Vec::with_capacity(2);
    if limit.requests_per_unit != 0 {
        fields.push(format!("requests_per_unit:{}", limit.requests_per_unit));
    }
    fields.push(format!("unit:{}", limit.unit.envoy_name()));
    fields.join(" ")
}

/// Merges `from` into `into`: a key `into` lacks is copied; a key it has keeps its value,
/// unless both values are mappings, which merge the same way.
fn merge(into: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (key, value) in from {
        match (into.get_mut(key), value) {
            (None, _) => {
                into.insert(key.clone(), value.clone());
            }
            (Some(Value::Object(mine)), Value::Object(theirs)) => merge(mine, theirs),
            (Some(_), _) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use floodgate::algorithm::fixed_window::Unit;

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn the_first_value_wins_and_mappings_merge_at_any_depth() {
        let mut into =
            object(json!({"name": "a", "tier": {"x": 1, "deep": {"p": 1}}, "list": [1]}));
        merge(
            &mut into,
            &object(
                json!({"name": "b", "tier": {"x": 2, "y": 3, "deep": {"q": 2}}, "list": [2], "new": true}),
            ),
        );
        assert_eq!(
            Value::Object(into),
            json!({"name": "a", "tier": {"x": 1, "y": 3, "deep": {"p": 1, "q": 2}}, "list": [1], "new": true})
        );
    }

    #[test]
    fn a_mapping_and_a_scalar_under_one_key_keep_the_first() {
        let mut into = object(json!({"k": "scalar"}));
        merge(&mut into, &object(json!({"k": {"a": 1}})));
        assert_eq!(Value::Object(into), json!({"k": "scalar"}));
        let mut into = object(json!({"k": {"a": 1}}));
        merge(&mut into, &object(json!({"k": "scalar"})));
        assert_eq!(Value::Object(into), json!({"k": {"a": 1}}));
    }

    #[test]
    fn a_descriptor_shows_its_own_limit_and_hits() {
        let d = RlsDescriptor {
            entries: vec![("user".into(), "alice".into())],
            hits_addend: Some(0),
            limit: Some(RlsLimitOverride {
                requests_per_unit: 10,
                unit: Unit::Minute,
            }),
            negative_hits: false,
        };
        assert_eq!(
            descriptor(&d),
            json!({"entries": ["user=alice"], "limit": "requests_per_unit:10 unit:MINUTE", "hitsAddend": 0})
        );
        let blocked = RlsLimitOverride {
            requests_per_unit: 0,
            unit: Unit::Week,
        };
        assert_eq!(override_text(&blocked), "unit:WEEK");
    }

    #[test]
    fn without_rules_only_the_request_is_described() {
        let request = RlsRequest {
            domain: "unknown".into(),
            descriptors: vec![RlsDescriptor::default()],
            hits_addend: 2,
        };
        let statuses = vec![RlsStatus::default()];
        assert_eq!(
            Value::Object(response_metadata(&request, &statuses, None)),
            json!({"domain": "unknown", "descriptors": [{"entries": []}], "hitsAddend": 2})
        );
    }
}
