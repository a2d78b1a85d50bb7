//! The native config's `rls` section: how the Envoy rate limit service loads its domains and
//! what it adds to its answers, as envoyproxy/ratelimit's settings do.
//!
//! ```yaml
//! rls:
//!   merge_domains: false          # envoyproxy's MERGE_DOMAIN_CONFIG (default false)
//!   response_headers:             # envoyproxy's LIMIT_RESPONSE_HEADERS_ENABLED (default off)
//!     enabled: false
//!     limit: RateLimit-Limit      # envoyproxy's LIMIT_LIMIT_HEADER
//!     remaining: RateLimit-Remaining   # LIMIT_REMAINING_HEADER
//!     reset: RateLimit-Reset      # LIMIT_RESET_HEADER
//!   on_store_error: ok            # ok (default) | over_limit | unavailable
//! ```
//!
//! The command line can turn both on over whatever the files say ([`Overrides`]:
//! `--merge-domains`/`FLOODGATE_MERGE_DOMAINS` and
//! `--response-headers`/`FLOODGATE_RESPONSE_HEADERS`); it never turns them off.
//!
//! - `merge_domains`: when a domain is defined more than once (in several files of a config
//!   directory, or twice in a native file's `domains`), the definitions' top-level descriptors
//!   are joined into one domain, in file order; a descriptor key and value defined twice is still
//!   an error, naming both places. Off: a domain defined twice is an error naming both places.
//! - `response_headers`: every `ShouldRateLimit` answer (gRPC `response_headers_to_add`, and
//!   `responseHeadersToAdd` in `POST /json`) carries three headers describing one descriptor's
//!   limit: of the statuses that report a limit, the one with the fewest requests remaining
//!   (the first such in request order on a tie). `limit` is its `requests_per_unit`,
//!   `remaining` its `limit_remaining`, `reset` the whole seconds (rounded up) until its limit
//!   resets: its `duration_until_reset`, or, when it has none (a `requests_per_unit: 0` block),
//!   the time left in the current epoch-aligned window of its unit. No status reports a limit
//!   (nothing matched, all unlimited, or the store failed and the call failed open): no headers.
//! - `on_store_error`: what a call answers when its store fails. `ok` (the default) lets the
//!   request through: every descriptor `OK`, with no limit reported. `over_limit` refuses it:
//!   every descriptor `OVER_LIMIT`. `unavailable` answers no decision at all, gRPC
//!   `UNAVAILABLE` (`POST /json`: 503 with a JSON error), so that the proxy's own failure policy
//!   applies (Envoy's `failure_mode_deny`), which is what envoyproxy/ratelimit does.

use http::HeaderName;
use serde::Deserialize;

use super::ConfigFileError;
use crate::rls::headers::ResponseHeaderNames;

/// The `rls` section (see the [module documentation](self)).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RlsConfig {
    /// Join the definitions of a domain defined more than once (default false).
    #[serde(default)]
    pub merge_domains: bool,
    /// The rate limit headers added to every answer.
    #[serde(default)]
    pub response_headers: ResponseHeadersConfig,
    /// What a call answers when the store fails: `ok` (the default: the request goes through),
    /// `over_limit` (it is refused) or `unavailable` (no answer: gRPC `UNAVAILABLE`, `/json`
    /// 503, so that Envoy's `failure_mode_deny` decides, as envoyproxy/ratelimit does).
    #[serde(default)]
    pub on_store_error: crate::rls::OnStoreError,
}

/// The `rls.response_headers` block.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResponseHeadersConfig {
    /// Whether the headers are added (default false).
    #[serde(default)]
    pub enabled: bool,
    /// The name of the header carrying the limit's requests per unit (default
    /// `RateLimit-Limit`).
    #[serde(default = "default_limit")]
    pub limit: String,
    /// The name of the header carrying the requests remaining (default `RateLimit-Remaining`).
    #[serde(default = "default_remaining")]
    pub remaining: String,
    /// The name of the header carrying the whole seconds until the limit resets (default
    /// `RateLimit-Reset`).
    #[serde(default = "default_reset")]
    pub reset: String,
}

impl Default for ResponseHeadersConfig {
    fn default() -> Self {
        ResponseHeadersConfig {
            enabled: false,
            limit: default_limit(),
            remaining: default_remaining(),
            reset: default_reset(),
        }
    }
}

fn default_limit() -> String {
    "RateLimit-Limit".to_string()
}

fn default_remaining() -> String {
    "RateLimit-Remaining".to_string()
}

fn default_reset() -> String {
    "RateLimit-Reset".to_string()
}

impl ResponseHeadersConfig {
    /// The header names when enabled (`None` when not), each checked to be a valid HTTP header
    /// name and different from the other two, ignoring case (errors at
    /// `rls.response_headers.FIELD`).
    pub fn names(&self) -> Result<Option<ResponseHeaderNames>, ConfigFileError> {
        if !self.enabled {
            return Ok(None);
        }
        let fields = [
            ("limit", &self.limit),
            ("remaining", &self.remaining),
            ("reset", &self.reset),
        ];
        for (i, (field, name)) in fields.iter().enumerate() {
            let path = format!("rls.response_headers.{field}");
            if HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(ConfigFileError::invalid(
                    path,
                    format!("`{name}` is not a valid HTTP header name"),
                ));
            }
            if let Some((other, _)) = fields[..i]
                .iter()
                .find(|(_, n)| n.eq_ignore_ascii_case(name))
            {
                return Err(ConfigFileError::invalid(
                    path,
                    format!("`{name}` is also rls.response_headers.{other}"),
                ));
            }
        }
        Ok(Some(ResponseHeaderNames {
            limit: self.limit.clone(),
            remaining: self.remaining.clone(),
            reset: self.reset.clone(),
        }))
    }
}

/// What the command line turns on over every configuration the service loads (at start and on
/// each reload). Each `true` turns its setting on whatever the files say; `false` leaves the
/// files' setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// Turns on `rls.merge_domains`.
    pub merge_domains: bool,
    /// Turns on `rls.response_headers.enabled`.
    pub response_headers: bool,
}

impl RlsConfig {
    /// Turns on what `overrides` turns on.
    pub fn apply(&mut self, overrides: &Overrides) {
        self.merge_domains |= overrides.merge_domains;
        self.response_headers.enabled |= overrides.response_headers;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_are_checked_only_when_enabled() {
        let mut headers = ResponseHeadersConfig {
            limit: "bad name".into(),
            ..ResponseHeadersConfig::default()
        };
        assert_eq!(headers.names(), Ok(None));
        headers.enabled = true;
        let err = headers.names().unwrap_err().to_string();
        assert!(err.contains("rls.response_headers.limit"), "{err}");
        assert!(err.contains("`bad name`"), "{err}");
        headers.limit = "ratelimit-reset".into();
        let err = headers.names().unwrap_err().to_string();
        assert!(err.contains("rls.response_headers.reset"), "{err}");
        headers.limit = "X-Limit".into();
        let names = headers.names().unwrap().expect("enabled");
        assert_eq!(
            (
                names.limit.as_str(),
                names.remaining.as_str(),
                names.reset.as_str()
            ),
            ("X-Limit", "RateLimit-Remaining", "RateLimit-Reset")
        );
    }

    #[test]
    fn overrides_only_turn_settings_on() {
        let mut rls = RlsConfig {
            merge_domains: true,
            ..RlsConfig::default()
        };
        rls.apply(&Overrides::default());
        assert!(rls.merge_domains && !rls.response_headers.enabled);
        rls.apply(&Overrides {
            merge_domains: false,
            response_headers: true,
        });
        assert!(rls.merge_domains && rls.response_headers.enabled);
    }
}
