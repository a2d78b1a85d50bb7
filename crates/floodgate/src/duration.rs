//! Durations as users write them, the same in every command, flag and file: seconds as a
//! number (`1.5`), or a string with a unit (`"250us"`, `"500ms"`, `"1.5s"`, `"2m"`, `"1h"`,
//! `"1d"`, `"1w"`), or several such parts from the largest unit down (`"1h30m"`, `"1m30s"`,
//! `"2d12h"`). [`parse_duration`] reads them, [`format_duration`] writes them back, and
//! [`SpecDuration`] is the form serde reads from a file.

use std::time::Duration;

use serde::Deserialize;

/// A duration as users write it: seconds as a number, or a string with a unit (see the
/// [module documentation](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "DurationRepr")]
pub struct SpecDuration(pub Duration);

#[derive(Deserialize)]
#[serde(untagged)]
enum DurationRepr {
    Seconds(f64),
    Text(String),
}

impl TryFrom<DurationRepr> for SpecDuration {
    type Error = DurationError;
    fn try_from(repr: DurationRepr) -> Result<Self, DurationError> {
        match repr {
            DurationRepr::Seconds(s) => seconds_to_duration(s, || s.to_string()),
            DurationRepr::Text(t) => parse_duration(&t),
        }
        .map(SpecDuration)
    }
}

/// Why a duration was refused; each variant carries the text as written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DurationError {
    /// No number where one was expected.
    #[error("`{0}` is not a duration such as \"500ms\", \"1s\" or \"1h\"")]
    NotANumber(String),
    /// A unit that is not one of ns, us, ms, s, m, h, d, w.
    #[error("`{text}` has an unknown unit `{unit}` (use ns, us, ms, s, m, h, d or w)")]
    UnknownUnit {
        /// The duration as written.
        text: String,
        /// The unit as written.
        unit: String,
    },
    /// Negative, not finite, or too large for a `Duration`.
    #[error("`{0}` is not a duration: expected a non-negative number of seconds")]
    OutOfRange(String),
    /// Several parts whose units do not go from the largest down (`"30m1h"`, `"1m1m"`).
    #[error("`{0}` is not a duration: write its parts from the largest unit down, each unit once, e.g. \"1h30m\"")]
    OutOfOrder(String),
}

fn seconds_to_duration(
    secs: f64,
    text: impl FnOnce() -> String,
) -> Result<Duration, DurationError> {
    Duration::try_from_secs_f64(secs).map_err(|_| DurationError::OutOfRange(text()))
}

/// Parses a duration as users write it, the same in every command, flag and file: a bare
/// number of seconds (`"1.5"`), a number with a unit (`"10ns"`, `"250us"`, `"500ms"`,
/// `"1.5s"`, `"2m"`, `"1h"`, `"1d"`, `"1w"`; `µs` and `min` too), or several of those from the
/// largest unit down, with no space between them (`"1h30m"`, `"1m30s"`, `"2d12h"`,
/// `"1s500ms"`), which add up. Negative, non-finite and out-of-range values are refused, and
/// so is a part whose unit is not smaller than the one before it (`"30m1h"`, `"1m1m"`).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(DurationError::NotANumber(text.to_string()));
    }
    let mut rest = t;
    let mut total = 0.0;
    // The last part's unit, as seconds: each part's must be smaller.
    let mut previous = f64::INFINITY;
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(split);
        let value: f64 = number
            .parse()
            .map_err(|_| DurationError::NotANumber(text.to_string()))?;
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let unit_secs = match unit.trim() {
            // A bare number is seconds, alone only.
            "" if total == 0.0 && previous.is_infinite() => 1.0,
            "s" => 1.0,
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            "d" => 86_400.0,
            "w" => 604_800.0,
            other => {
                return Err(DurationError::UnknownUnit {
                    text: text.to_string(),
                    unit: other.to_string(),
                })
            }
        };
        if unit_secs >= previous {
            return Err(DurationError::OutOfOrder(text.to_string()));
        }
        previous = unit_secs;
        total += value * unit_secs;
        rest = next;
    }
    seconds_to_duration(total, || text.to_string())
}

/// `d` as [`parse_duration`] reads it back, in the largest units that write it exactly:
/// `"1h30m"`, `"2d"`, `"1m30s"`, `"1.5s"`, `"500ms"`, `"250us"`, `"10ns"`, `"0s"`. For
/// messages that quote a duration as a config would write it.
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    let nanos = d.subsec_nanos();
    if secs == 0 {
        return match nanos {
            0 => "0s".to_string(),
            n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
            n if n % 1_000 == 0 => format!("{}us", n / 1_000),
            n => format!("{n}ns"),
        };
    }
    let mut out = String::new();
    let mut left = secs;
    for (unit, size) in [("w", 604_800), ("d", 86_400), ("h", 3_600), ("m", 60)] {
        if left >= size {
            out.push_str(&format!("{}{unit}", left / size));
            left %= size;
        }
    }
    if left > 0 || nanos > 0 {
        out.push_str(&left.to_string());
        if nanos > 0 {
            let fraction = format!("{nanos:09}");
            out.push('.');
            out.push_str(fraction.trim_end_matches('0'));
        }
        out.push('s');
    }
    out
}

impl std::fmt::Display for SpecDuration {
    /// As [`format_duration`] writes it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_accept_numbers_and_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1w"), Ok(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert!(parse_duration("1 fortnight")
            .unwrap_err()
            .to_string()
            .contains("unknown unit"));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn durations_of_several_parts_add_up_from_the_largest_unit_down() {
        let secs = Duration::from_secs;
        assert_eq!(parse_duration("1h30m"), Ok(secs(5400)));
        assert_eq!(parse_duration("1m30s"), Ok(secs(90)));
        assert_eq!(parse_duration("2d12h"), Ok(secs(216_000)));
        assert_eq!(parse_duration("1h 30m"), Ok(secs(5400)));
        assert_eq!(parse_duration("1s500ms"), Ok(Duration::from_millis(1500)));
        for bad in ["30m1h", "1m1m", "1h30", "1h-5m", "h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_duration("30m1h")
            .unwrap_err()
            .to_string()
            .contains("largest unit down"));
    }

    #[test]
    fn durations_are_written_as_they_are_read() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(10), "10ns"),
            (Duration::from_micros(250), "250us"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(5400), "1h30m"),
            (Duration::from_secs(86_400 * 30), "4w2d"),
            (Duration::from_secs(86_400 * 365), "52w1d"),
            (Duration::from_nanos(90_000_000_001), "1m30.000000001s"),
        ];
        for (d, text) in cases {
            assert_eq!(format_duration(d), text);
            assert_eq!(SpecDuration(d).to_string(), text);
            assert_eq!(parse_duration(text), Ok(d), "{text}");
        }
    }
}
