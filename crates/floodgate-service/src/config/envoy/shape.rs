//! The first check of an envoyproxy/ratelimit file, on its YAML tree before it is read into
//! [`DomainConfig`](super::DomainConfig), as envoyproxy/ratelimit checks it: every mapping key
//! is a string, and every list entry is a mapping (both checked everywhere but inside a
//! `metadata` block, which is free-form). Unknown keys are refused when the file is read, with
//! the key's name, path, line and column.

use serde_norway::Value;

use crate::config::ConfigFileError;

/// Checks the tree of a whole file; the first problem is returned as
/// [`ConfigFileError::Invalid`] at its path (`descriptors[0].descriptors[2]`; a key that is not
/// a string at its own path, `descriptors[0].7`).
pub(super) fn check(root: &Value) -> Result<(), ConfigFileError> {
    walk(root, "")
}

fn walk(value: &Value, path: &str) -> Result<(), ConfigFileError> {
    match value {
        Value::Mapping(map) => {
            for (key, child) in map {
                let Some(name) = key.as_str() else {
                    return Err(ConfigFileError::invalid(
                        crate::config::source::join(path, &scalar(key)),
                        format!(
                            "a key must be a string, found `{}`; every key of an \
                             envoyproxy/ratelimit file is a name such as `domain`, `key` or \
                             `rate_limit`",
                            scalar(key)
                        ),
                    ));
                };
                if name == "metadata" {
                    continue;
                }
                let child_path = if path.is_empty() {
                    name.to_string()
                } else {
                    format!("{path}.{name}")
                };
                walk(child, &child_path)?;
            }
            Ok(())
        }
        Value::Sequence(items) => {
            for (i, item) in items.iter().enumerate() {
                let item_path = format!("{path}[{i}]");
                if !item.is_mapping() {
                    return Err(ConfigFileError::invalid(
                        item_path,
                        format!(
                            "a list entry must be a mapping (`key: …`), found `{}`",
                            scalar(item)
                        ),
                    ));
                }
                walk(item, &item_path)?;
            }
            Ok(())
        }
        Value::Tagged(tagged) => walk(&tagged.value, path),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => Ok(()),
    }
}

/// A YAML value as the file writes it, on one line.
fn scalar(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".to_string(),
        other => serde_norway::to_string(other)
            .map(|s| s.trim().replace('\n', " "))
            .unwrap_or_else(|_| "…".to_string()),
    }
}
