//! The rate-limit service's request and answer, independent of transport: Envoy's
//! `ShouldRateLimit` over gRPC and envoyproxy/ratelimit's `POST /json` both map to these.
//!
//! Field meanings follow Envoy's `envoy.service.ratelimit.v3` API: a request names a `domain`
//! and one or more descriptors (ordered key/value entries); each descriptor gets a status; the
//! overall code is `OverLimit` if any status is.

use std::time::Duration;

use floodgate::algorithm::fixed_window::Unit;

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

/// One descriptor: ordered key/value entries, e.g. `[("remote_address", "10.0.0.1")]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RlsDescriptor {
    /// The entries, in order.
    pub entries: Vec<(String, String)>,
    /// This descriptor's own hits, overriding the request's.
    pub hits_addend: Option<u64>,
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
    /// The unit of time.
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
}

/// The answer to one `ShouldRateLimit` call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RlsResponse {
    /// `OverLimit` if any descriptor is over its (non-shadow) limit, else `Ok`.
    pub overall_code: Code,
    /// One status per request descriptor, in order.
    pub statuses: Vec<RlsStatus>,
}
