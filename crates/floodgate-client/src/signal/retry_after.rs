//! `Retry-After` (RFC 9110 §10.2.3): delta-seconds or an HTTP-date.
//!
//! Read exactly: a non-negative integer is seconds; a decimal (`1.5`), which some servers send,
//! is accepted as seconds too; otherwise the value must be an HTTP-date (IMF-fixdate, or the
//! obsolete RFC 850 and asctime forms), taken relative to the response's wall time
//! ([`super::Wall`]). A date in the past means "now" (zero); anything beyond
//! [`MAX_HORIZON`](super::MAX_HORIZON) is capped to it; anything else (negative numbers,
//! garbage, several values) is ignored.

use std::time::Duration;

use http::HeaderMap;

use super::{seconds, Wall};

/// The delay a response's `Retry-After` asks for, if it has a valid one.
pub fn read(headers: &HeaderMap, wall: Wall) -> Option<Duration> {
    let mut values = headers.get_all(http::header::RETRY_AFTER).iter();
    let value = values.next()?.to_str().ok()?.trim();
    if values.next().is_some() {
        return None; // several values contradict each other: trust none
    }
    if !value.is_empty()
        && value.len() <= 32
        && value.bytes().all(|b| b.is_ascii_digit() || b == b'.')
    {
        let secs: f64 = value.parse().ok()?;
        return Some(seconds(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let unix = match at.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(_) => return Some(Duration::ZERO),
    };
    Some(wall.until(unix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signal::MAX_HORIZON;
    use http::HeaderValue;

    const NOW: f64 = 1_700_000_000.0;

    fn read_values(values: &[&str]) -> Option<Duration> {
        let mut map = HeaderMap::new();
        for v in values {
            map.append("retry-after", HeaderValue::from_str(v).unwrap());
        }
        read(&map, Wall { unix_secs: NOW })
    }

    fn date(unix: u64) -> String {
        httpdate::fmt_http_date(std::time::UNIX_EPOCH + Duration::from_secs(unix))
    }

    #[test]
    fn delta_seconds() {
        assert_eq!(read_values(&["3"]), Some(Duration::from_secs(3)));
        assert_eq!(read_values(&["0"]), Some(Duration::ZERO));
        assert_eq!(read_values(&["0.5"]), Some(Duration::from_millis(500)));
        assert_eq!(read_values(&[" 7 "]), Some(Duration::from_secs(7)));
    }

    #[test]
    fn http_dates() {
        assert_eq!(
            read_values(&[&date(1_700_000_010)]),
            Some(Duration::from_secs(10))
        );
        assert_eq!(read_values(&[&date(1_600_000_000)]), Some(Duration::ZERO));
        assert_eq!(read_values(&[&date(4_000_000_000)]), Some(MAX_HORIZON));
        // RFC 850 form.
        assert!(read_values(&["Sunday, 06-Nov-94 08:49:37 GMT"]).is_some());
    }

    #[test]
    fn hostile_values() {
        assert_eq!(read_values(&["-1"]), None);
        assert_eq!(read_values(&["soon"]), None);
        assert_eq!(read_values(&[""]), None);
        assert_eq!(
            read_values(&["99999999999999999999999999999"]),
            Some(MAX_HORIZON)
        );
        assert_eq!(read_values(&["1", "2"]), None);
        assert_eq!(read_values(&["1.2.3"]), None);
    }
}
