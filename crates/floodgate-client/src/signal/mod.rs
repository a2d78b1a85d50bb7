//! What one response says about the server's limits, read from its header fields.
//!
//! Three dialects are understood; [`Signal::read`] reads all of them from one response:
//! - IETF `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11,
//!   structured fields): [`ietf`];
//! - `X-RateLimit-Limit` / `-Remaining` / `-Reset` and their relatives (the older draft's
//!   unprefixed `RateLimit-Limit` / `-Remaining` / `-Reset`, `X-RateLimit-Reset-After`):
//!   [`x_ratelimit`];
//! - `Retry-After` (delta-seconds or HTTP-date): [`retry_after`].
//!
//! Reading never fails: a malformed or hostile field is ignored (never half-read), numbers
//! beyond what a limit can mean are clamped, and every duration is capped at [`MAX_HORIZON`],
//! so that no response can make a client wait for ever or overflow its arithmetic. When a
//! response carries IETF fields, the `X-RateLimit` ones are not read: a server speaking both
//! says the same thing twice, and the structured one is the precise one.

pub mod ietf;
pub mod retry_after;
pub mod x_ratelimit;

use std::time::Duration;

use floodgate::Nanos;
use http::HeaderMap;

/// The longest duration any header can make the client wait or remember: one day. A larger
/// `Retry-After`, reset or window is read as one day (the client's own `max_wait` bounds how
/// long a request actually waits; this bounds what the state remembers).
pub const MAX_HORIZON: Duration = Duration::from_secs(24 * 60 * 60);

/// The most quotas read from one response; more policies than this are ignored.
pub const MAX_QUOTAS: usize = 16;

/// The longest policy name or partition key kept, in bytes; longer ones make their policy
/// ignored (a partition key is an identifier, not a payload).
pub const MAX_NAME_LEN: usize = 256;

/// The limit dialect a response spoke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// IETF `RateLimit-Policy` / `RateLimit` structured fields.
    Ietf,
    /// `X-RateLimit-*` (or the older draft's unprefixed `RateLimit-Limit/-Remaining/-Reset`).
    XRateLimit,
}

impl Dialect {
    /// The dialect's name as shown in state snapshots: `ietf` or `x-ratelimit`.
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Ietf => "ietf",
            Dialect::XRateLimit => "x-ratelimit",
        }
    }
}

/// One quota the server announced: a policy (and, with IETF fields, a partition of it).
///
/// Every field is optional because every dialect leaves some out: `X-RateLimit` has no window,
/// a `RateLimit` item may come without its `RateLimit-Policy`, and so on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quota {
    /// The policy's name (`"default"` when the dialect has no names).
    pub policy: String,
    /// The IETF partition key (`pk`), raw bytes; `None` when the server sent none.
    pub partition: Option<Vec<u8>>,
    /// The quota `q`: requests allowed per window.
    pub limit: Option<u64>,
    /// The window `w` the quota is allowed over.
    pub window: Option<Duration>,
    /// The requests left (`r`), counting the request this response answers.
    pub remaining: Option<u64>,
    /// The time `t` from this response until the quota is whole again (a refused request may
    /// be sent after it).
    pub reset: Option<Duration>,
}

impl Quota {
    /// An empty quota for `policy` in `partition`.
    pub fn new(policy: impl Into<String>, partition: Option<Vec<u8>>) -> Quota {
        Quota {
            policy: policy.into(),
            partition,
            limit: None,
            window: None,
            remaining: None,
            reset: None,
        }
    }

    /// True when the quota says something a client can pace by (a remaining count, or a limit
    /// and a window).
    pub fn is_useful(&self) -> bool {
        self.remaining.is_some() || (self.limit.is_some() && self.window.is_some())
    }
}

/// Everything one response says about the limits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Signal {
    /// The limit dialect the quotas were read from; `None` when the response had no limit
    /// fields (it may still have a `Retry-After`).
    pub dialect: Option<Dialect>,
    /// The quotas, at most [`MAX_QUOTAS`].
    pub quotas: Vec<Quota>,
    /// `Retry-After`, relative to the response: no request should be sent before it passes.
    /// It takes precedence over the quotas' resets.
    pub retry_after: Option<Duration>,
}

impl Signal {
    /// Reads the limit fields of a response received at `now` (an instant of a clock whose
    /// epoch is the Unix epoch, such as [`floodgate::SystemClock`]; used for epoch resets and
    /// HTTP-dates, together with the response's `Date` field; see [`Wall`]).
    pub fn read(headers: &HeaderMap, now: Nanos) -> Signal {
        let wall = Wall::of(headers, now);
        let mut signal = Signal {
            retry_after: retry_after::read(headers, wall),
            ..Signal::default()
        };
        let ietf = ietf::read(headers);
        if !ietf.is_empty() {
            signal.dialect = Some(Dialect::Ietf);
            signal.quotas = ietf;
        } else if let Some(quota) = x_ratelimit::read(headers, wall) {
            signal.dialect = Some(Dialect::XRateLimit);
            signal.quotas = vec![quota];
        }
        signal
    }

    /// True when the response said nothing about limits at all.
    pub fn is_empty(&self) -> bool {
        self.dialect.is_none() && self.retry_after.is_none()
    }
}

/// The wall-clock time a response is read at, in Unix seconds, for fields that name an
/// absolute time (epoch resets, HTTP-dates).
///
/// The local clock is used unless the response's `Date` field disagrees with it by more than
/// [`Wall::MAX_SKEW`]: then the server's own time is used, so that a client with a wrong clock
/// still reads "reset at 12:00:05" as "in 5 s" when the server says it is 12:00:00. (`Date`
/// has whole-second precision, which is why a close local clock is preferred.)
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Wall {
    /// Seconds since the Unix epoch.
    pub unix_secs: f64,
}

impl Wall {
    /// The largest disagreement between the local clock and `Date` that is put down to
    /// `Date`'s rounding rather than to a wrong clock.
    pub const MAX_SKEW: Duration = Duration::from_secs(2);

    /// The time to read `headers` at, given the local clock's `now`.
    pub fn of(headers: &HeaderMap, now: Nanos) -> Wall {
        let local = now.as_secs_f64();
        let date = headers
            .get(http::header::DATE)
            .and_then(|v| v.to_str().ok())
            .and_then(|s| httpdate::parse_http_date(s).ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs_f64());
        match date {
            Some(date) if (date - local).abs() > Self::MAX_SKEW.as_secs_f64() => {
                Wall { unix_secs: date }
            }
            _ => Wall { unix_secs: local },
        }
    }

    /// The time from now until the Unix instant `at_secs`: zero when it has passed, at most
    /// [`MAX_HORIZON`].
    pub fn until(self, at_secs: f64) -> Duration {
        seconds(at_secs - self.unix_secs)
    }
}

/// `secs` as a duration: zero for negative or NaN input, at most [`MAX_HORIZON`].
pub fn seconds(secs: f64) -> Duration {
    if secs.is_nan() || secs <= 0.0 {
        Duration::ZERO
    } else if secs >= MAX_HORIZON.as_secs_f64() {
        MAX_HORIZON
    } else {
        Duration::from_secs_f64(secs)
    }
}

/// The field's values joined by `, ` (how a field sent on several lines is read), or `None`
/// when it is absent or a line is not visible ASCII.
pub(crate) fn joined(headers: &HeaderMap, name: &str) -> Option<String> {
    let mut out: Option<String> = None;
    for value in headers.get_all(name) {
        let line = value.to_str().ok()?;
        match &mut out {
            Some(s) => {
                s.push_str(", ");
                s.push_str(line);
            }
            None => out = Some(line.to_string()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, HeaderValue::from_str(v).unwrap());
        }
        map
    }

    #[test]
    fn ietf_wins_over_x_ratelimit() {
        let h = headers(&[
            ("ratelimit-policy", "\"default\";q=50;w=1"),
            ("ratelimit", "\"default\";r=7;t=1"),
            ("x-ratelimit-limit", "10"),
            ("x-ratelimit-remaining", "1"),
        ]);
        let s = Signal::read(&h, Nanos::from_secs(1_700_000_000));
        assert_eq!(s.dialect, Some(Dialect::Ietf));
        assert_eq!(s.quotas.len(), 1);
        assert_eq!(s.quotas[0].remaining, Some(7));
        assert_eq!(s.quotas[0].limit, Some(50));
    }

    #[test]
    fn malformed_ietf_falls_back_to_x_ratelimit() {
        let h = headers(&[
            ("ratelimit", "\"default\";r=\"seven\""),
            ("x-ratelimit-limit", "10"),
            ("x-ratelimit-remaining", "1"),
        ]);
        let s = Signal::read(&h, Nanos::from_secs(1_700_000_000));
        assert_eq!(s.dialect, Some(Dialect::XRateLimit));
        assert_eq!(s.quotas[0].remaining, Some(1));
    }

    #[test]
    fn nothing_to_read() {
        let s = Signal::read(&headers(&[("content-type", "text/plain")]), Nanos::ZERO);
        assert!(s.is_empty());
    }

    #[test]
    fn wall_prefers_the_local_clock_unless_date_is_far() {
        let now = Nanos::from_secs(1_700_000_000);
        let date =
            httpdate::fmt_http_date(std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_001));
        let h = headers(&[("date", &date)]);
        assert_eq!(Wall::of(&h, now).unix_secs, 1_700_000_000.0);
        let far =
            httpdate::fmt_http_date(std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_100));
        let h = headers(&[("date", &far)]);
        assert_eq!(Wall::of(&h, now).unix_secs, 1_700_000_100.0);
    }

    #[test]
    fn seconds_clamps() {
        assert_eq!(seconds(-1.0), Duration::ZERO);
        assert_eq!(seconds(f64::NAN), Duration::ZERO);
        assert_eq!(seconds(f64::INFINITY), MAX_HORIZON);
        assert_eq!(seconds(1e300), MAX_HORIZON);
        assert_eq!(seconds(1.5), Duration::from_millis(1500));
    }
}
