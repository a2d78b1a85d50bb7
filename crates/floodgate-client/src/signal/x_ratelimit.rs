//! `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`, and their relatives.
//!
//! The fields every API invented before the IETF draft, with one quota and no window:
//! - `X-RateLimit-Limit`: the quota. A leading integer is read; a value such as
//!   `100, 100;w=60` (the draft-06 style, which appends policies) also gives the window `w`.
//! - `X-RateLimit-Remaining`: the requests left.
//! - `X-RateLimit-Reset`: when the quota is whole again. Servers disagree on its unit; the
//!   value (an integer or a decimal) is read as
//!   - **epoch milliseconds** when it is at least 10¹² (Sept 2001 in ms; no delay is that long),
//!   - **epoch seconds** when it is at least 10⁹ (Sept 2001 in s; 31 years as a delay),
//!   - **delta seconds** otherwise (decimals allowed: `0.25` is 250 ms).
//!
//!   Epoch values are taken relative to the response's wall time ([`super::Wall`]: the local
//!   clock, or the `Date` field when they disagree). A delay in milliseconds cannot be told
//!   from one in seconds by its value and is read as seconds, the longer and safer reading.
//! - `X-RateLimit-Reset-After` (delta seconds, as Discord sends it) is preferred to
//!   `X-RateLimit-Reset` when both are present.
//!
//! The older IETF draft's unprefixed `RateLimit-Limit` / `RateLimit-Remaining` /
//! `RateLimit-Reset` (always delta seconds) are read the same way when no `X-` field is present.
//! A field whose value is negative, not a number or beyond 2⁶³ is ignored.

use http::HeaderMap;

use super::{seconds, Quota, Wall};

/// The policy name given to the one quota these fields describe.
pub const POLICY_NAME: &str = "default";

/// Epoch-milliseconds threshold: values at least this large are epoch milliseconds.
const EPOCH_MILLIS: f64 = 1e12;
/// Epoch-seconds threshold: values at least this large are epoch seconds.
const EPOCH_SECS: f64 = 1e9;

/// The quota these fields describe, or `None` when neither a limit nor a remaining count is
/// present and valid.
pub fn read(headers: &HeaderMap, wall: Wall) -> Option<Quota> {
    read_family(headers, wall, "x-ratelimit-", true)
        .or_else(|| read_family(headers, wall, "ratelimit-", false))
}

fn read_family(headers: &HeaderMap, wall: Wall, prefix: &str, epochs: bool) -> Option<Quota> {
    let field = |suffix: &str| {
        headers
            .get(format!("{prefix}{suffix}"))
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let mut quota = Quota::new(POLICY_NAME, None);
    if let Some(limit) = field("limit") {
        let (q, w) = limit_and_window(limit);
        quota.limit = q;
        quota.window = w.map(|w| seconds(w as f64));
    }
    quota.remaining = field("remaining").and_then(whole);
    let after = field("reset-after").and_then(number).map(seconds);
    quota.reset = after.or_else(|| {
        let v = field("reset").and_then(number)?;
        Some(if !epochs {
            seconds(v)
        } else if v >= EPOCH_MILLIS {
            wall.until(v / 1000.0)
        } else if v >= EPOCH_SECS {
            wall.until(v)
        } else {
            seconds(v)
        })
    });
    (quota.limit.is_some() || quota.remaining.is_some()).then_some(quota)
}

/// A limit value's leading integer and, draft-06 style, the `w` of the policy that follows.
fn limit_and_window(value: &str) -> (Option<u64>, Option<u64>) {
    let mut parts = value.split(',');
    let q = parts.next().and_then(whole);
    let w = parts
        .flat_map(|policy| policy.split(';').skip(1))
        .find_map(|param| param.trim().strip_prefix("w=").and_then(whole))
        .filter(|&w| w > 0);
    (q, w)
}

/// A non-negative whole number below 2⁶³.
fn whole(s: &str) -> Option<u64> {
    let n: u64 = s.trim().parse().ok()?;
    (n <= i64::MAX as u64).then_some(n)
}

/// A non-negative finite number (integer or decimal).
fn number(s: &str) -> Option<f64> {
    let s = s.trim();
    if s.is_empty() || s.len() > 32 || !s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    s.parse::<f64>().ok().filter(|v| v.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signal::MAX_HORIZON;
    use http::HeaderValue;
    use std::time::Duration;

    const NOW: f64 = 1_700_000_000.0;

    fn read_pairs(pairs: &[(&'static str, &str)]) -> Option<Quota> {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, HeaderValue::from_str(v).unwrap());
        }
        read(&map, Wall { unix_secs: NOW })
    }

    #[test]
    fn github_style_epoch_seconds() {
        let q = read_pairs(&[
            ("x-ratelimit-limit", "5000"),
            ("x-ratelimit-remaining", "4999"),
            ("x-ratelimit-reset", "1700000030"),
        ])
        .unwrap();
        assert_eq!(q.limit, Some(5000));
        assert_eq!(q.remaining, Some(4999));
        assert_eq!(q.reset, Some(Duration::from_secs(30)));
        assert_eq!(q.window, None);
    }

    #[test]
    fn reset_units_are_detected() {
        let reset = |v: &str| {
            read_pairs(&[("x-ratelimit-remaining", "1"), ("x-ratelimit-reset", v)])
                .unwrap()
                .reset
        };
        assert_eq!(reset("1700000000500"), Some(Duration::from_millis(500)));
        assert_eq!(reset("1700000002"), Some(Duration::from_secs(2)));
        assert_eq!(reset("2"), Some(Duration::from_secs(2)));
        assert_eq!(reset("0.25"), Some(Duration::from_millis(250)));
        // In the past: whole again already.
        assert_eq!(reset("1600000000"), Some(Duration::ZERO));
        // Far future: capped.
        assert_eq!(reset("99999999999999999"), Some(MAX_HORIZON));
        // Garbage: ignored.
        assert_eq!(reset("-5"), None);
        assert_eq!(reset("soon"), None);
        assert_eq!(reset("1e3"), None);
    }

    #[test]
    fn reset_after_is_preferred() {
        let q = read_pairs(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1700000100"),
            ("x-ratelimit-reset-after", "1.5"),
        ])
        .unwrap();
        assert_eq!(q.reset, Some(Duration::from_millis(1500)));
    }

    #[test]
    fn draft_06_limit_with_policy() {
        let q = read_pairs(&[
            ("ratelimit-limit", "100, 100;w=60"),
            ("ratelimit-reset", "7"),
        ])
        .unwrap();
        assert_eq!(q.limit, Some(100));
        assert_eq!(q.window, Some(Duration::from_secs(60)));
        // Unprefixed reset is always delta seconds.
        assert_eq!(q.reset, Some(Duration::from_secs(7)));
    }

    #[test]
    fn hostile_values_are_ignored() {
        assert!(read_pairs(&[("x-ratelimit-limit", "-1")]).is_none());
        assert!(read_pairs(&[("x-ratelimit-remaining", "99999999999999999999999")]).is_none());
        assert!(read_pairs(&[("x-ratelimit-limit", "")]).is_none());
        let q = read_pairs(&[
            ("x-ratelimit-limit", "10"),
            ("x-ratelimit-remaining", "NaN"),
        ])
        .unwrap();
        assert_eq!(q.remaining, None);
    }
}
