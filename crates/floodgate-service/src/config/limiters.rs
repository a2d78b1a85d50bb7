//! The `limiters` section: the pipeline's four limiters, each optional, with their modes,
//! failure policies and settings.

use floodgate::algorithm::spec::SpecDuration;
use floodgate::limiter::utilization::ControllerSettings;
use floodgate::limiter::{Mode, OnStoreError};
use serde::de::{self, Deserializer};
use serde::Deserialize;
use std::time::Duration;

/// The pipeline's limiters; `None` means not configured (not consulted at all).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitersConfig {
    /// The request rate limiter (its plans are the top-level `plans`).
    #[serde(default, deserialize_with = "present")]
    pub request_rate: Option<RequestRateConfig>,
    /// The concurrent requests limiter.
    #[serde(default, deserialize_with = "present")]
    pub concurrency: Option<ConcurrencyConfig>,
    /// The fleet usage load shedder.
    #[serde(default, deserialize_with = "present")]
    pub fleet: Option<FleetConfig>,
    /// The worker utilization load shedder.
    #[serde(default, deserialize_with = "present")]
    pub utilization: Option<UtilizationConfig>,
}

/// The request rate limiter's settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestRateConfig {
    /// `enforce` (default), `shadow` or `off`.
    #[serde(default, deserialize_with = "mode")]
    pub mode: Mode,
    /// `fail_open` (default), `fail_closed` or `local` (this node's share of the limit on its
    /// own memory store, with `store.nodes` nodes).
    #[serde(default, deserialize_with = "on_store_error")]
    pub on_store_error: OnStoreError,
    /// The HTTP status of its refusals (default 429 for per-user limiters, 503 for shedders).
    #[serde(default)]
    pub status: Option<u16>,
    /// Whether a request refused by another limiter consumes nothing here (default `false`;
    /// see [`Stage::all_or_nothing`](floodgate::pipeline::Stage::all_or_nothing)).
    #[serde(default)]
    pub all_or_nothing: bool,
}

/// The concurrent requests limiter's settings.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencyConfig {
    /// The most requests in flight per user.
    pub capacity: u64,
    /// How long an unreturned lease holds its place (default 60 s).
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl: SpecDuration,
    /// `enforce` (default), `shadow` or `off`.
    #[serde(default, deserialize_with = "mode")]
    pub mode: Mode,
    /// `fail_open` (default), `fail_closed` or `local` (this node's share of the limit on its
    /// own memory store, with `store.nodes` nodes).
    #[serde(default, deserialize_with = "on_store_error")]
    pub on_store_error: OnStoreError,
    /// The HTTP status of its refusals (default 429 for per-user limiters, 503 for shedders).
    #[serde(default)]
    pub status: Option<u16>,
    /// Whether a request refused by another limiter consumes nothing here (default `false`;
    /// see [`Stage::all_or_nothing`](floodgate::pipeline::Stage::all_or_nothing)).
    #[serde(default)]
    pub all_or_nothing: bool,
}

/// The fleet usage load shedder's settings.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetConfig {
    /// Requests in flight across the fleet.
    pub capacity: u64,
    /// The fraction of `capacity` kept for critical requests (0 to 1).
    pub reserved_for_critical: f64,
    /// How long an unreturned lease holds its place (default 60 s).
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl: SpecDuration,
    /// `enforce` (default), `shadow` or `off`.
    #[serde(default, deserialize_with = "mode")]
    pub mode: Mode,
    /// `fail_open` (default), `fail_closed` or `local` (this node's share of the limit on its
    /// own memory store, with `store.nodes` nodes).
    #[serde(default, deserialize_with = "on_store_error")]
    pub on_store_error: OnStoreError,
    /// The HTTP status of its refusals (default 429 for per-user limiters, 503 for shedders).
    #[serde(default)]
    pub status: Option<u16>,
    /// Whether a request refused by another limiter consumes nothing here (default `false`;
    /// see [`Stage::all_or_nothing`](floodgate::pipeline::Stage::all_or_nothing)).
    #[serde(default)]
    pub all_or_nothing: bool,
}

/// The worker utilization load shedder's settings.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UtilizationConfig {
    /// The node's workers: utilization is busy workers divided by this (at least 1). A
    /// request admitted by `/v1/evaluate` is a busy worker until its lease token comes back
    /// with `/v1/release` (or `lease_ttl` has passed).
    pub workers: u64,
    /// How long a busy worker whose request is never released counts (default 60 s).
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl: SpecDuration,
    /// The most often the controller samples utilization (default 1 s).
    #[serde(default = "default_sample_interval")]
    pub sample_interval: SpecDuration,
    /// The seed of the random draw that sheds requests (default 0).
    #[serde(default)]
    pub seed: u64,
    /// Below this utilization the shed amount decreases (default 0.7).
    #[serde(default)]
    pub end_of_good: Option<f64>,
    /// From this utilization up the shed amount increases (default 0.8).
    #[serde(default)]
    pub start_of_bad: Option<f64>,
    /// Seconds of full overload before anything is shed (default 28).
    #[serde(default)]
    pub seconds_before_shedding: Option<f64>,
    /// Seconds of full overload to go from shedding nothing to everything (default 120).
    #[serde(default)]
    pub seconds_to_shed_all: Option<f64>,
    /// `enforce` (default), `shadow` or `off`.
    #[serde(default, deserialize_with = "mode")]
    pub mode: Mode,
    /// The HTTP status of its refusals (default 503).
    #[serde(default)]
    pub status: Option<u16>,
}

impl UtilizationConfig {
    /// The controller's constants: Stripe's, with the configured overrides.
    pub fn settings(&self) -> ControllerSettings {
        let d = ControllerSettings::default();
        ControllerSettings {
            end_of_good: self.end_of_good.unwrap_or(d.end_of_good),
            start_of_bad: self.start_of_bad.unwrap_or(d.start_of_bad),
            seconds_before_shedding: self
                .seconds_before_shedding
                .unwrap_or(d.seconds_before_shedding),
            seconds_to_shed_all: self.seconds_to_shed_all.unwrap_or(d.seconds_to_shed_all),
        }
    }
}

fn default_lease_ttl() -> SpecDuration {
    SpecDuration(Duration::from_secs(60))
}

pub(crate) fn default_sample_interval() -> SpecDuration {
    SpecDuration(Duration::from_secs(1))
}

/// A field that is present is configured, even when written with no settings (an empty
/// YAML value reads as an empty mapping).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
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
