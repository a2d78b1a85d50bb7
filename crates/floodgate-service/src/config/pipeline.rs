//! The `pipeline` section: the stages in order, each a limiter with the requests it applies to
//! and the key it counts them by; and the `attributes` section, which bounds what requests may
//! carry and names the attributes that are secrets.
//!
//! ```yaml
//! pipeline:
//!   - name: per_ip
//!     kind: limit
//!     key: "{attributes.ip}"
//!     spec: { algorithm: token_bucket, rate: 10, capacity: 20 }
//!   - name: order_writes
//!     kind: limit
//!     key: "{user}"
//!     when: { attributes.method: POST, endpoint: "/orders*" }
//!     spec: { algorithm: fixed_window, limit: 5, window: 1m }
//! ```
//!
//! Each stage is a [`StageConfig`](super::StageConfig): the fields every stage has and those
//! of its kind. The four sections of `limiters:` are a preset of this list
//! ([`LimitersConfig::stages`](super::LimitersConfig::stages)), each section a stage of the same
//! schema named after it: a file written with them builds the same stages as the list they
//! stand for, with errors at `limiters.NAME.FIELD`. A file may have one or the other, not both.

use floodgate::algorithm::spec::AlgorithmSpec;
use serde::Deserialize;

use super::ConfigFileError;

/// One key of a hierarchical `limit` stage.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LevelConfig {
    /// The level's name: in refusal messages, and (after the first) in its namespace,
    /// `STAGE.NAME`; the first level counts in the stage's namespace.
    pub name: String,
    /// The key template.
    pub key: String,
    /// Its limit.
    pub spec: AlgorithmSpec,
}

/// One pattern or a list of them.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Patterns {
    /// One pattern.
    One(String),
    /// Any of these.
    Any(Vec<String>),
}

/// A whole-number cost, or the field that holds one.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum CostConfig {
    /// The same for every request.
    Constant(u64),
    /// A field, as `attributes.units`.
    Field(String),
}

/// `refuse` or `skip`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IfMissingConfig {
    /// A 400 naming the stage and the field.
    #[default]
    Refuse,
    /// The stage passes the request untouched.
    Skip,
}

/// The `attributes` section: what `POST /v1/evaluate` accepts in `attributes`, and which of
/// them are secrets.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttributesConfig {
    /// Attributes whose values are secrets (API keys, tokens): each value becomes `key:` and
    /// 32 hex digits of a keyed SHA-256 before any stage sees it, so that it is never a store
    /// key, a log line or a dashboard entry.
    #[serde(default)]
    pub secret: Vec<String>,
    /// The most attributes one request may carry (default 32, at most 256).
    #[serde(default = "default_max_count")]
    pub max_count: usize,
    /// The longest value, in bytes (default 256, at most 4096).
    #[serde(default = "default_max_value_bytes")]
    pub max_value_bytes: usize,
}

impl Default for AttributesConfig {
    fn default() -> Self {
        AttributesConfig {
            secret: Vec::new(),
            max_count: default_max_count(),
            max_value_bytes: default_max_value_bytes(),
        }
    }
}

fn default_max_count() -> usize {
    32
}

fn default_max_value_bytes() -> usize {
    256
}

impl AttributesConfig {
    /// Checks the bounds and the secret attributes' names.
    pub(super) fn validate(&self) -> Result<(), ConfigFileError> {
        if !(1..=256).contains(&self.max_count) {
            return Err(ConfigFileError::invalid(
                "attributes.max_count",
                format!("invalid value {} (must be 1 to 256)", self.max_count),
            ));
        }
        if !(1..=4096).contains(&self.max_value_bytes) {
            return Err(ConfigFileError::invalid(
                "attributes.max_value_bytes",
                format!("invalid value {} (must be 1 to 4096)", self.max_value_bytes),
            ));
        }
        for (i, name) in self.secret.iter().enumerate() {
            if !floodgate::pipeline::scope::valid_attribute_name(name) {
                return Err(ConfigFileError::invalid(
                    format!("attributes.secret[{i}]"),
                    format!("invalid name {name:?} (1 to 64 ASCII letters, digits and `_ - .`)"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
