//! The rate limit headers a `ShouldRateLimit` answer can ask Envoy to add (envoyproxy/ratelimit's
//! `LIMIT_RESPONSE_HEADERS_ENABLED`), turned on by the config's `rls.response_headers` or the
//! command line, which also name them ([`ResponseHeaderNames`]).
//!
//! They describe one descriptor, picked as envoyproxy/ratelimit picks it: the last status that
//! refuses the request on its own (`OVER_LIMIT`, not in quota mode), if any; else, of the
//! statuses that report a limit, the one with the fewest requests remaining (the first in
//! request order on a tie). Three headers, in this order, each value a decimal integer:
//!
//! - the limit header (`RateLimit-Limit` by default): its `requests_per_unit`;
//! - the remaining header (`RateLimit-Remaining`): its `limit_remaining`;
//! - the reset header (`RateLimit-Reset`): whole seconds until its limit resets, rounded up:
//!   its `duration_until_reset`, or, when it has none (a `requests_per_unit: 0` block), the
//!   time left in the current window of its unit counted from the Unix epoch, which is what
//!   envoyproxy/ratelimit always reports (for a fixed window per unit the two agree).
//!
//! No status with a limit (nothing matched, all unlimited, an unknown domain, or a store
//! failure answered open): no headers.

use floodgate::Nanos;

use super::RlsStatus;

/// The checked header names of an enabled `rls.response_headers`, as the service writes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseHeaderNames {
    /// The header carrying the limit's requests per unit.
    pub limit: String,
    /// The header carrying the requests remaining.
    pub remaining: String,
    /// The header carrying the whole seconds until the limit resets.
    pub reset: String,
}

/// The rate limit headers for `statuses` (see the [module documentation](self)), `(name,
/// value)` in order; `now` is the time since the Unix epoch.
pub fn rate_limit_headers(
    statuses: &[RlsStatus],
    names: &ResponseHeaderNames,
    now: Nanos,
) -> Vec<(String, String)> {
    let mut closest: Option<&RlsStatus> = None;
    let mut refusing: Option<&RlsStatus> = None;
    for status in statuses.iter().filter(|s| s.current_limit.is_some()) {
        if closest.is_none_or(|c| status.limit_remaining < c.limit_remaining) {
            closest = Some(status);
        }
        if status.code == super::Code::OverLimit && !status.quota_mode {
            refusing = Some(status);
        }
    }
    let closest = refusing.or(closest);
    let Some(status) = closest else {
        return Vec::new();
    };
    let Some(limit) = &status.current_limit else {
        return Vec::new();
    };
    let reset = match status.duration_until_reset {
        Some(d) => d.as_secs() + u64::from(d.subsec_nanos() > 0),
        None => {
            let window = limit.unit.duration().as_secs().max(1);
            let now_secs = now.0 / 1_000_000_000;
            window - now_secs % window
        }
    };
    vec![
        (names.limit.clone(), limit.requests_per_unit.to_string()),
        (names.remaining.clone(), status.limit_remaining.to_string()),
        (names.reset.clone(), reset.to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::rls::{Code, RlsLimit};
    use floodgate::algorithm::fixed_window::Unit;

    fn names() -> ResponseHeaderNames {
        ResponseHeaderNames {
            limit: "L".into(),
            remaining: "R".into(),
            reset: "T".into(),
        }
    }

    fn status(limit: Option<(u32, Unit)>, remaining: u32, reset: Option<f64>) -> RlsStatus {
        RlsStatus {
            code: Code::Ok,
            current_limit: limit.map(|(requests_per_unit, unit)| RlsLimit {
                name: None,
                requests_per_unit,
                unit,
            }),
            limit_remaining: remaining,
            duration_until_reset: reset.map(Duration::from_secs_f64),
            quota_mode: false,
        }
    }

    fn headers(statuses: &[RlsStatus], now_secs: u64) -> Vec<(String, String)> {
        rate_limit_headers(statuses, &names(), Nanos(now_secs * 1_000_000_000))
    }

    fn expect(limit: &str, remaining: &str, reset: &str) -> Vec<(String, String)> {
        vec![
            ("L".into(), limit.into()),
            ("R".into(), remaining.into()),
            ("T".into(), reset.into()),
        ]
    }

    #[test]
    fn the_descriptor_closest_to_its_limit_is_described() {
        let statuses = [
            status(None, u32::MAX, None), // unlimited: never described
            status(Some((10, Unit::Minute)), 7, Some(44.2)),
            status(Some((3, Unit::Hour)), 2, Some(100.0)),
            status(Some((5, Unit::Day)), 2, Some(9.0)), // a tie: the first one wins
        ];
        assert_eq!(headers(&statuses, 0), expect("3", "2", "100"));
        assert_eq!(headers(&statuses[..2], 0), expect("10", "7", "45"));
    }

    #[test]
    fn the_last_status_refusing_on_its_own_is_described() {
        let over = |limit: u32, quota_mode: bool| RlsStatus {
            code: Code::OverLimit,
            quota_mode,
            ..status(Some((limit, Unit::Minute)), 0, Some(30.0))
        };
        // Exactly at its limit, a status is as close as one over it: the one over is told.
        let statuses = [
            status(Some((7, Unit::Minute)), 0, Some(30.0)),
            over(8, false),
            over(9, false),
            over(10, true),
        ];
        assert_eq!(headers(&statuses, 0), expect("9", "0", "30"));
        // Quota mode: over its limit, it is only the closest to it, the first on a tie.
        assert_eq!(
            headers(
                &[
                    status(Some((7, Unit::Minute)), 0, Some(30.0)),
                    over(10, true)
                ],
                0
            ),
            expect("7", "0", "30")
        );
    }

    #[test]
    fn no_limit_no_headers_and_a_block_resets_with_its_window() {
        assert!(headers(&[status(None, 0, None)], 0).is_empty());
        assert!(headers(&[], 0).is_empty());
        // A block has no reset of its own: the rest of its unit's window, from the epoch.
        let blocked = [status(Some((0, Unit::Minute)), 0, None)];
        assert_eq!(headers(&blocked, 60 * 1000 + 15), expect("0", "0", "45"));
        assert_eq!(headers(&blocked, 60 * 1000), expect("0", "0", "60"));
    }
}
