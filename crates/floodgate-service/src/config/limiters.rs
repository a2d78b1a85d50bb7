//! The `limiters` section: Stripe's four limiters, each optional, each a stage of the same
//! schema as a `pipeline:` entry of its kind ([`StageConfig`]), named after its section.

use floodgate::pipeline::{Mode, OnStoreError};
use serde::de::{self, Deserializer};
use serde::Deserialize;

use super::stage::StageConfig;

/// The pipeline's limiters; `None` means not configured (not consulted at all). Each section
/// takes the fields of a stage of its kind but `name` and `kind`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitersConfig {
    /// The request rate limiter: a `limit` stage, keyed by user on the top-level plans unless
    /// it says otherwise.
    #[serde(default, deserialize_with = "request_rate")]
    pub request_rate: Option<StageConfig>,
    /// The concurrent requests limiter: a `concurrency` stage.
    #[serde(default, deserialize_with = "concurrency")]
    pub concurrency: Option<StageConfig>,
    /// The fleet usage load shedder: a `fleet` stage.
    #[serde(default, deserialize_with = "fleet")]
    pub fleet: Option<StageConfig>,
    /// The worker utilization load shedder: a `utilization` stage.
    #[serde(default, deserialize_with = "utilization")]
    pub utilization: Option<StageConfig>,
}

impl LimitersConfig {
    /// The stages the four sections stand for, in Stripe's order, each with the path of its
    /// section for errors: `request_rate`, `concurrency`, then the two shedders.
    pub fn stages(&self) -> Vec<(String, StageConfig)> {
        let sections = [
            &self.request_rate,
            &self.concurrency,
            &self.fleet,
            &self.utilization,
        ];
        sections
            .into_iter()
            .flatten()
            .map(|stage| (format!("limiters.{}", stage.name), stage.clone()))
            .collect()
    }
}

fn request_rate<'de, D: Deserializer<'de>>(d: D) -> Result<Option<StageConfig>, D::Error> {
    StageConfig::section(d, "request_rate", "limit")
}

fn concurrency<'de, D: Deserializer<'de>>(d: D) -> Result<Option<StageConfig>, D::Error> {
    StageConfig::section(d, "concurrency", "concurrency")
}

fn fleet<'de, D: Deserializer<'de>>(d: D) -> Result<Option<StageConfig>, D::Error> {
    StageConfig::section(d, "fleet", "fleet")
}

fn utilization<'de, D: Deserializer<'de>>(d: D) -> Result<Option<StageConfig>, D::Error> {
    StageConfig::section(d, "utilization", "utilization")
}

pub(super) fn mode<'de, D: Deserializer<'de>>(d: D) -> Result<Mode, D::Error> {
    let name = String::deserialize(d)?;
    Mode::from_name(&name).ok_or_else(|| {
        de::Error::custom(format!(
            "unknown mode `{name}`, expected enforce, shadow or off"
        ))
    })
}

pub(super) fn on_store_error<'de, D: Deserializer<'de>>(d: D) -> Result<OnStoreError, D::Error> {
    let name = String::deserialize(d)?;
    match name.as_str() {
        "fail_open" => Ok(OnStoreError::FailOpen),
        "fail_closed" => Ok(OnStoreError::FailClosed),
        "local" => Ok(OnStoreError::Local),
        _ => Err(de::Error::custom(format!(
            "unknown on_store_error `{name}`, expected fail_open, fail_closed or local"
        ))),
    }
}
