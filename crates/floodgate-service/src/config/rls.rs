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
//!   shadow_mode: false            # envoyproxy's SHADOW_MODE (default false)
//!   quota_mode: false             # envoyproxy's QUOTA_MODE (default false)
//!   require_domains: false        # envoyproxy's HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
//! ```
//!
//! The command line can turn `merge_domains` and `response_headers` on over whatever the files
//! say (`--merge-domains`, `--response-headers`); it never turns them off. A setting the file
//! does not write takes its value from the environment when it names one ([`Defaults`]:
//! `FLOODGATE_MERGE_DOMAINS`, `FLOODGATE_RESPONSE_HEADERS`, then envoyproxy/ratelimit's
//! variables), else the default above.
//!
//! - `merge_domains`: when a domain is defined more than once (in several files of a config
//!   directory, or twice in a native file's `domains`), the definitions' top-level descriptors
//!   are joined into one domain, in file order; a descriptor key and value defined twice is still
//!   an error, naming both places. Off: a domain defined twice is an error naming both places.
//! - `response_headers`: every `ShouldRateLimit` answer (gRPC `response_headers_to_add`, and
//!   `responseHeadersToAdd` in `POST /json`) carries three headers describing one descriptor's
//!   limit, picked as upstream picks it: the last status that refuses the request on its own
//!   (`OVER_LIMIT` and not in quota mode), else, of the statuses that report a limit, the one
//!   with the fewest requests remaining (the first such in request order on a tie). `limit` is its `requests_per_unit`,
//!   `remaining` its `limit_remaining`, `reset` the whole seconds (rounded up) until its limit
//!   resets: its `duration_until_reset`, or, when it has none (a `requests_per_unit: 0` block),
//!   the time left in the current epoch-aligned window of its unit. No status reports a limit
//!   (nothing matched, all unlimited, or the store failed and the call failed open): no headers.
//! - `on_store_error`: what a call answers when its store fails. `ok` (the default) lets the
//!   request through: every descriptor `OK`, with no limit reported. `over_limit` refuses it:
//!   every descriptor `OVER_LIMIT`. `unavailable` answers no decision at all, gRPC
//!   `UNAVAILABLE` (`POST /json`: 503 with a JSON error), so that the proxy's own failure policy
//!   applies (Envoy's `failure_mode_deny`), which is what envoyproxy/ratelimit does.
//! - `shadow_mode`: every answer that would be `OVER_LIMIT` is answered `OK` (each descriptor's
//!   status still says `OVER_LIMIT`, and the headers are those of the decision); counted in
//!   `floodgate_rls_global_shadow_mode_total`. For trying limits out on live traffic.
//! - `quota_mode`: every descriptor (but the `unlimited` ones) is in quota mode, as if each
//!   said `quota_mode: true`: an answer is `OVER_LIMIT` only when every descriptor of the
//!   request is over its limit (see [`crate::descriptors`]'s "Quota mode"). Refused with
//!   `all_or_nothing` descriptors.
//! - `require_domains`: the service is not ready (`/readyz`, `/healthcheck`, gRPC health)
//!   while the running configuration has no domain.

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
    pub on_store_error: crate::rls::StoreFailureAnswer,
    /// Answer `OK` where the answer would be `OVER_LIMIT` (default false).
    #[serde(default)]
    pub shadow_mode: bool,
    /// Every descriptor in quota mode (default false).
    #[serde(default)]
    pub quota_mode: bool,
    /// Not ready while no domain is configured (default false).
    #[serde(default)]
    pub require_domains: bool,
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

/// What applies over every configuration the service loads (at start and on each reload): the
/// environment's values for the settings a file leaves unwritten ([`Defaults`]), then what the
/// command line turns on. Each `true` flag turns its setting on whatever the files say; `false`
/// leaves it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    /// Turns on `rls.merge_domains`.
    pub merge_domains: bool,
    /// Turns on `rls.response_headers.enabled`.
    pub response_headers: bool,
    /// The environment's values for settings the file does not write.
    pub defaults: Defaults,
    /// Under envoyproxy/ratelimit's settings: the sections a configuration leaves out
    /// (`plans`, `limiters`, `limits`, `domains`) are empty, not the built-in example's, so
    /// that the drop-in serves, and writes into upstream's Redis, only what upstream does
    /// unless a Floodgate file asks for more ([`super::Config::base`]).
    pub without_example: bool,
}

/// Values for the settings a configuration file leaves unwritten, from the environment
/// (`FLOODGATE_*` first, then envoyproxy/ratelimit's variables); `None` leaves the setting's
/// own default. A setting the file writes keeps the file's value.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Defaults {
    /// `rls.merge_domains`.
    pub merge_domains: Option<bool>,
    /// `rls.response_headers`, whole.
    pub response_headers: Option<ResponseHeadersConfig>,
    /// `rls.on_store_error`.
    pub on_store_error: Option<crate::rls::StoreFailureAnswer>,
    /// `rls.shadow_mode`.
    pub shadow_mode: Option<bool>,
    /// `rls.quota_mode`.
    pub quota_mode: Option<bool>,
    /// `rls.require_domains`.
    pub require_domains: Option<bool>,
    /// `response_dynamic_metadata`.
    pub response_dynamic_metadata: Option<bool>,
}

impl Overrides {
    /// Applies the defaults to the settings of `config` that `written` (a path such as
    /// `rls.merge_domains`) says the file does not write, then the flags.
    pub fn apply(&self, config: &mut super::Config, written: &dyn Fn(&str) -> bool) {
        fn fill<T: Clone>(
            slot: &mut T,
            value: &Option<T>,
            path: &str,
            written: &dyn Fn(&str) -> bool,
        ) {
            if let Some(value) = value {
                if !written(path) {
                    *slot = value.clone();
                }
            }
        }
        let d = &self.defaults;
        let rls = &mut config.rls;
        fill(
            &mut rls.merge_domains,
            &d.merge_domains,
            "rls.merge_domains",
            written,
        );
        fill(
            &mut rls.response_headers,
            &d.response_headers,
            "rls.response_headers",
            written,
        );
        fill(
            &mut rls.on_store_error,
            &d.on_store_error,
            "rls.on_store_error",
            written,
        );
        fill(
            &mut rls.shadow_mode,
            &d.shadow_mode,
            "rls.shadow_mode",
            written,
        );
        fill(
            &mut rls.quota_mode,
            &d.quota_mode,
            "rls.quota_mode",
            written,
        );
        fill(
            &mut rls.require_domains,
            &d.require_domains,
            "rls.require_domains",
            written,
        );
        fill(
            &mut config.response_dynamic_metadata,
            &d.response_dynamic_metadata,
            "response_dynamic_metadata",
            written,
        );
        config.rls.merge_domains |= self.merge_domains;
        config.rls.response_headers.enabled |= self.response_headers;
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
        let mut config = super::super::Config::default();
        config.rls.merge_domains = true;
        Overrides::default().apply(&mut config, &|_| false);
        assert!(config.rls.merge_domains && !config.rls.response_headers.enabled);
        Overrides {
            merge_domains: false,
            response_headers: true,
            ..Overrides::default()
        }
        .apply(&mut config, &|_| false);
        assert!(config.rls.merge_domains && config.rls.response_headers.enabled);
    }

    #[test]
    fn defaults_fill_only_what_the_file_leaves_unwritten() {
        let overrides = Overrides {
            defaults: Defaults {
                merge_domains: Some(true),
                shadow_mode: Some(true),
                on_store_error: Some(crate::rls::StoreFailureAnswer::Unavailable),
                ..Defaults::default()
            },
            ..Overrides::default()
        };
        let mut config = super::super::Config::default();
        // The file writes `rls.shadow_mode` (false): it stays.
        overrides.apply(&mut config, &|path| path == "rls.shadow_mode");
        assert!(config.rls.merge_domains);
        assert!(!config.rls.shadow_mode);
        assert_eq!(
            config.rls.on_store_error,
            crate::rls::StoreFailureAnswer::Unavailable
        );
        // The flag still turns merging on over a file that writes it off.
        let mut config = super::super::Config::default();
        Overrides {
            merge_domains: true,
            ..Overrides::default()
        }
        .apply(&mut config, &|_| true);
        assert!(config.rls.merge_domains);
    }
}
