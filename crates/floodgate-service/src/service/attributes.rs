//! The `attributes` of a `POST /v1/evaluate` request: checked against the configuration's
//! bounds, and secret ones replaced by their digest before any stage sees them.
//!
//! A secret attribute's value `v` (an API key, a token) becomes `key:` and the first 16 bytes,
//! in lowercase hex, of SHA-256 over `floodgate attribute`, a zero byte, the attribute's name,
//! a zero byte and `v`. Every node computes the same digest without sharing a secret, so
//! nodes sharing a store count a key together; secrets are long random strings, which a
//! digest cannot be turned back into. The value is never kept, logged or echoed in errors.

use std::collections::BTreeMap;
use std::fmt::Write;

use floodgate::pipeline::scope::valid_attribute_name;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::EvaluateError;
use crate::config::AttributesConfig;

/// The request's attributes as `(name, value)` pairs, values as strings (numbers and booleans
/// as JSON writes them), secret ones digested; `Err` names the first attribute at fault.
pub(super) fn read(
    raw: &BTreeMap<String, Value>,
    config: &AttributesConfig,
) -> Result<Vec<(String, String)>, EvaluateError> {
    if raw.len() > config.max_count {
        return Err(EvaluateError::Attribute {
            name: None,
            problem: format!(
                "{} attributes, more than the {} allowed (attributes.max_count)",
                raw.len(),
                config.max_count
            ),
        });
    }
    let mut read = Vec::with_capacity(raw.len());
    for (name, value) in raw {
        let fault = |problem: String| EvaluateError::Attribute {
            name: valid_attribute_name(name).then(|| name.clone()),
            problem,
        };
        if !valid_attribute_name(name) {
            return Err(fault(
                "a name must be 1 to 64 ASCII letters, digits and `_ - .`".to_string(),
            ));
        }
        let value = match value {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => {
                return Err(fault(
                    "the value must be a string, a number or a boolean".into(),
                ))
            }
        };
        if value.len() > config.max_value_bytes {
            return Err(fault(format!(
                "the value is {} bytes, more than the {} allowed (attributes.max_value_bytes)",
                value.len(),
                config.max_value_bytes
            )));
        }
        let value = if config.secret.contains(name) {
            digest(name, &value)
        } else {
            value
        };
        read.push((name.clone(), value));
    }
    Ok(read)
}

/// `key:` and 32 hex digits of the secret `value`'s digest (see the module documentation).
fn digest(name: &str, value: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"floodgate attribute\0");
    hash.update(name.as_bytes());
    hash.update(b"\0");
    hash.update(value.as_bytes());
    let digest = hash.finalize();
    let mut key = String::with_capacity(36);
    key.push_str("key:");
    for byte in &digest[..16] {
        // Writing to a String cannot fail.
        let _ = write!(key, "{byte:02x}");
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attributes(value: Value) -> BTreeMap<String, Value> {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn values_are_read_as_strings_and_secrets_digested() {
        let config = AttributesConfig {
            secret: vec!["api_key".into()],
            ..AttributesConfig::default()
        };
        let raw = attributes(
            json!({"ip": "10.0.0.1", "units": 3, "beta": true, "api_key": "sk_live_abc"}),
        );
        let read = read(&raw, &config).unwrap();
        let get = |n: &str| read.iter().find(|(k, _)| k == n).unwrap().1.clone();
        assert_eq!(get("ip"), "10.0.0.1");
        assert_eq!(get("units"), "3");
        assert_eq!(get("beta"), "true");
        let key = get("api_key");
        assert!(key.starts_with("key:") && key.len() == 36, "{key}");
        assert!(!key.contains("sk_live"));
        assert_eq!(
            key,
            digest("api_key", "sk_live_abc"),
            "the same on every node"
        );
        assert_ne!(key, digest("token", "sk_live_abc"));
    }

    #[test]
    fn bounds_are_enforced_naming_the_attribute_and_never_the_value() {
        let config = AttributesConfig {
            max_count: 2,
            max_value_bytes: 8,
            secret: vec!["api_key".into()],
        };
        let err = read(&attributes(json!({"a": 1, "b": 2, "c": 3})), &config).unwrap_err();
        assert!(err.to_string().contains("3 attributes"), "{err}");
        let err = read(
            &attributes(json!({"api_key": "sk_live_0123456789"})),
            &config,
        )
        .unwrap_err();
        assert!(err.to_string().contains("attributes.api_key"), "{err}");
        assert!(!err.to_string().contains("sk_live"), "{err}");
        let err = read(&attributes(json!({"bad name": "x"})), &config).unwrap_err();
        assert!(err.to_string().contains("1 to 64"), "{err}");
        let err = read(&attributes(json!({"o": {"x": 1}})), &config).unwrap_err();
        assert!(err.to_string().contains("attributes.o"), "{err}");
    }
}
