//! The rate-limit service's request and answer, independent of transport: Envoy's
//! `ShouldRateLimit` over gRPC and envoyproxy/ratelimit's `POST /json` both map to these.
//!
//! Field meanings follow Envoy's `envoy.service.ratelimit.v3` API: a request names a `domain`
//! and one or more descriptors (ordered key/value entries); each descriptor gets a status; the
//! overall code is `OverLimit` if any status is, but for the descriptors in quota mode, which
//! refuse the request only all together.

use std::time::Duration;

use floodgate::algorithm::fixed_window::Unit;

pub mod headers;
pub mod json;

/// What a `ShouldRateLimit` call answers when the store fails (the config's
/// `rls.on_store_error`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreFailureAnswer {
    /// Answer `OK` for every descriptor: the request goes through (fail open; the default).
    #[default]
    Ok,
    /// Answer `OVER_LIMIT` for every descriptor: the request is refused (fail closed).
    OverLimit,
    /// Answer no decision: gRPC `UNAVAILABLE` (`/json`: 503), so that the proxy's own failure
    /// policy decides (Envoy's `failure_mode_deny`), as envoyproxy/ratelimit does.
    Unavailable,
}

impl StoreFailureAnswer {
    /// Its name in the config.
    pub fn name(self) -> &'static str {
        match self {
            StoreFailureAnswer::Ok => "ok",
            StoreFailureAnswer::OverLimit => "over_limit",
            StoreFailureAnswer::Unavailable => "unavailable",
        }
    }
}

/// A call left without a decision; the transport answers it as an error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Undecided {
    /// The store failed and `rls.on_store_error` is `unavailable` (gRPC `UNAVAILABLE`,
    /// `/json` 503).
    #[error("the rate limit store is unavailable: {0}")]
    Unavailable(String),
    /// The call asks what its limits cannot do: a refund (`is_negative_hits`) to a limit
    /// whose algorithm cannot give back (gRPC `INVALID_ARGUMENT`, `/json` 400). Nothing was
    /// counted.
    #[error("{0}")]
    Invalid(String),
}

/// One `ShouldRateLimit` call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RlsRequest {
    /// The configuration domain the descriptors are looked up in.
    pub domain: String,
    /// The descriptors to check, each counted on its own.
    pub descriptors: Vec<RlsDescriptor>,
    /// Hits to add for every descriptor without its own; 0 means 1 (Envoy's rule).
    pub hits_addend: u32,
}

/// Why a `RateLimitRequest` (over gRPC or as `/json`) is refused: what Envoy's API requires of
/// it, checked the same way whatever the transport. The message names the field, with its
/// index in the request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRequest {
    /// `domain` is empty.
    #[error("domain: must not be empty")]
    EmptyDomain,
    /// `descriptors` is empty.
    #[error("descriptors: must hold at least one descriptor")]
    NoDescriptors,
    /// An entry's key is empty.
    #[error("descriptors[{descriptor}].entries[{entry}].key: must not be empty")]
    EmptyKey {
        /// The descriptor's index in the request.
        descriptor: usize,
        /// The entry's index in the descriptor.
        entry: usize,
    },
    /// A descriptor's limit override has no unit (UNKNOWN, 0) or a number Envoy does not
    /// define (gRPC; `/json` names the unit as sent).
    #[error("descriptors[{descriptor}].limit.unit: {unit} is not a unit (SECOND 1, MINUTE 2, HOUR 3, DAY 4, MONTH 5, YEAR 6, WEEK 7)")]
    UnknownOverrideUnit {
        /// The descriptor's index in the request.
        descriptor: usize,
        /// The unit's number as sent.
        unit: i32,
    },
}

impl RlsRequest {
    /// Checks what Envoy's API requires of every request, whatever its transport: a domain,
    /// at least one descriptor, every key non-empty. A descriptor without entries is
    /// accepted, as upstream accepts it: it matches nothing, so it is OK with no limit.
    pub fn validate(&self) -> Result<(), InvalidRequest> {
        if self.domain.is_empty() {
            return Err(InvalidRequest::EmptyDomain);
        }
        if self.descriptors.is_empty() {
            return Err(InvalidRequest::NoDescriptors);
        }
        for (descriptor, d) in self.descriptors.iter().enumerate() {
            if let Some(entry) = d.entries.iter().position(|(key, _)| key.is_empty()) {
                return Err(InvalidRequest::EmptyKey { descriptor, entry });
            }
        }
        Ok(())
    }
}

/// A descriptor's entries as the log shows them, `key=value,key=value`, formatted only
/// when the line is written.
#[derive(Clone, Copy, Debug)]
pub struct Entries<'a>(pub &'a RlsDescriptor);

impl std::fmt::Display for Entries<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (key, value)) in self.0.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{key}={value}")?;
        }
        Ok(())
    }
}

/// One descriptor: ordered key/value entries, e.g. `[("remote_address", "10.0.0.1")]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RlsDescriptor {
    /// The entries, in order.
    pub entries: Vec<(String, String)>,
    /// This descriptor's own hits, overriding the request's.
    pub hits_addend: Option<u64>,
    /// Envoy's `is_negative_hits`: the hits are given back rather than added (a request that
    /// cost less than was charged). The count is lowered, never below zero, and the
    /// descriptor is never over its limit; a limit whose algorithm cannot give back (the
    /// sliding log) refuses the call as invalid, naming the descriptor.
    pub negative_hits: bool,
    /// A limit for this request only, replacing the configured one (see [`RlsLimitOverride`]).
    pub limit: Option<RlsLimitOverride>,
}

/// A request descriptor's own limit (Envoy's `RateLimitDescriptor.limit`), as
/// envoyproxy/ratelimit applies it: in a configured domain, it replaces whatever the
/// descriptor would match (even nothing, or `unlimited`), with no name, no `replaces` and no
/// shadow mode; in an unknown domain nothing applies. It is a fixed window of
/// `requests_per_unit` per `unit` aligned to the epoch, counted per descriptor and unit, apart
/// from the configured limits' counters (see [`crate::descriptors`]); `requests_per_unit` 0
/// refuses every request and counts nothing. Statuses report it as the current limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RlsLimitOverride {
    /// Requests allowed per unit.
    pub requests_per_unit: u32,
    /// The unit of time.
    pub unit: Unit,
}

impl RlsRequest {
    /// The hits a descriptor adds: its own `hits_addend`, else the request's, else 1.
    pub fn hits_for(&self, descriptor: &RlsDescriptor) -> u64 {
        descriptor.hits_addend.unwrap_or(if self.hits_addend == 0 {
            1
        } else {
            u64::from(self.hits_addend)
        })
    }
}

/// Envoy's response code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Code {
    /// No limit applies, or the answer is unknown.
    #[default]
    Unknown,
    /// Under the limit.
    Ok,
    /// Over the limit.
    OverLimit,
}

/// The limit that applied to a descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RlsLimit {
    /// The limit's name from the config, if it has one.
    pub name: Option<String>,
    /// Requests allowed per unit.
    pub requests_per_unit: u32,
    /// The unit of time, any of Envoy's.
    pub unit: Unit,
}

/// The status of one descriptor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RlsStatus {
    /// `Ok` or `OverLimit`; `Ok` with no limit when nothing in the config matched (or the
    /// match is `unlimited`).
    pub code: Code,
    /// The limit that applied, if any.
    pub current_limit: Option<RlsLimit>,
    /// What is left of the limit after this request.
    pub limit_remaining: u32,
    /// Time until the limit's window resets.
    pub duration_until_reset: Option<Duration>,
    /// Whether the descriptor is in quota mode (its rule's `quota_mode`, or every descriptor
    /// but the `unlimited` ones under the global `QUOTA_MODE`): over its limit, it refuses
    /// the request only when every quota-mode descriptor of the request is over (see
    /// [`crate::descriptors`]'s "Quota mode"). Not sent on the wire; the rate limit headers'
    /// choice of descriptor reads it ([`headers`]).
    pub quota_mode: bool,
}

/// The answer to one `ShouldRateLimit` call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RlsResponse {
    /// `OverLimit` if a descriptor not in quota mode is over its (non-shadow) limit, or every
    /// quota-mode descriptor is (there being at least one), else `Ok`.
    pub overall_code: Code,
    /// One status per request descriptor, in order.
    pub statuses: Vec<RlsStatus>,
    /// How many descriptors were over a shadow-mode limit: answered `Ok`, as
    /// envoyproxy/ratelimit answers them, and counted here for the service's metrics. Not sent
    /// on the wire.
    pub shadow_over_limit: u32,
    /// The response's dynamic metadata (Envoy's `dynamic_metadata` Struct, `dynamicMetadata` in
    /// JSON), when the rule set has it enabled: see [`crate::descriptors`]'s "Deciding".
    pub dynamic_metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// Headers for Envoy to add to its response, `(name, value)` in order: the rate limit
    /// headers when they are turned on ([`headers`]), else none.
    pub response_headers_to_add: Vec<(String, String)>,
}

/// Descriptor entries from `(key, value)` pairs, for tests.
#[cfg(test)]
pub(crate) fn entries(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
