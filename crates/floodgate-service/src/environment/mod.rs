//! The process environment `floodgate serve` reads: Floodgate's own `FLOODGATE_*` variables and
//! envoyproxy/ratelimit's ([`upstream`]), so that a deployment written for upstream runs
//! unchanged.
//!
//! An [`Environment`] is a snapshot of the variables, taken once at start-up (tests build their
//! own with [`Environment::from_pairs`]); reading one never looks at the process again. Values
//! are read in the formats upstream's settings use (Go's), so that a manifest's values mean the
//! same here:
//!
//! | type | accepted | example |
//! |---|---|---|
//! | bool | `1 t T TRUE true True 0 f F FALSE false False` | `USE_STATSD=false` |
//! | integer | decimal, or `0x` hex, `0o`/leading-`0` octal, `0b` binary, with an optional sign | `PORT=8080` |
//! | float | a decimal number | `NEAR_LIMIT_RATIO=0.9` |
//! | duration | a sequence of numbers with units `ns us µs ms s m h` (`1h30m`, `1.5s`), or `0` | `REDIS_TIMEOUT=10s` |
//! | map | `k1:v1,k2:v2` (each item exactly one `:`) | `EXTRA_TAGS=team:edge` |
//!
//! A variable that is set is read, even when empty (an empty number is an error, as upstream);
//! an error names the variable, its value (never for a secret) and what was expected
//! ([`EnvError`]).

pub mod dogstatsd;
pub mod traces;
pub mod upstream;
mod variables;
pub mod xds;

/// Every `FLOODGATE_*` variable the service reads, whatever reads it (each setting's table is
/// in `runtime/settings.rs`). Deployments are checked against it: a name not here is a typo.
pub const FLOODGATE_VARIABLES: &[&str] = &[
    "FLOODGATE_ADMIN_TOKEN",
    "FLOODGATE_CONFIG",
    "FLOODGATE_DEBUG",
    "FLOODGATE_GRPC",
    "FLOODGATE_HEAVY_KEYS",
    "FLOODGATE_HTTP",
    "FLOODGATE_LEASE_SECRET",
    "FLOODGATE_MERGE_DOMAINS",
    "FLOODGATE_RESPONSE_HEADERS",
    "FLOODGATE_STORE",
    "FLOODGATE_STORE_TIMEOUT",
    "FLOODGATE_WATCH",
];

use std::collections::BTreeMap;
use std::time::Duration;

/// A snapshot of environment variables (see the [module documentation](self)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Environment {
    vars: BTreeMap<String, String>,
}

/// A variable whose value cannot be read as its setting's type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("environment variable {variable}: {shown} is not {expected}")]
pub struct EnvError {
    /// The variable's name.
    pub variable: String,
    /// Its value quoted, or `(hidden)` for a secret.
    pub shown: String,
    /// What it should be, e.g. `a duration such as 10s or 1h30m`.
    pub expected: String,
}

impl EnvError {
    fn new(variable: &str, value: &str, expected: impl Into<String>) -> EnvError {
        EnvError {
            variable: variable.to_string(),
            shown: format!("`{value}`"),
            expected: expected.into(),
        }
    }
}

impl Environment {
    /// The process's variables now (a value that is not UTF-8 is read lossily).
    pub fn from_process() -> Environment {
        Environment::from_pairs(std::env::vars_os().map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        }))
    }

    /// The variables `pairs` name (a later pair replaces an earlier one of the same name).
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Environment {
        Environment {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// The same variables with `name` set to `value` (for a command line flag that stands
    /// for a variable, as `check-config --upstream DIR` for `RUNTIME_ROOT`).
    pub fn with(mut self, name: &str, value: &str) -> Environment {
        self.vars.insert(name.to_string(), value.to_string());
        self
    }

    /// Whether `name` is set (even to the empty string).
    pub fn is_set(&self, name: &str) -> bool {
        self.vars.contains_key(name)
    }

    /// The names of the variables set, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.vars.keys().map(String::as_str)
    }

    /// `name`'s value as written, if set.
    pub fn string(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// `name`'s value, or `default` when unset.
    pub fn string_or(&self, name: &str, default: &str) -> String {
        self.string(name).unwrap_or(default).to_string()
    }

    /// `name` as a Go bool.
    pub fn bool(&self, name: &str) -> Result<Option<bool>, EnvError> {
        self.read(name, |v| {
            go_bool(v).ok_or("a bool (true, false, 1, 0, t, f)")
        })
    }

    /// `name` as a Go bool, `default` when unset.
    pub fn bool_or(&self, name: &str, default: bool) -> Result<bool, EnvError> {
        Ok(self.bool(name)?.unwrap_or(default))
    }

    /// `name` as a Go integer that fits in `T`.
    pub fn int<T: TryFrom<i128>>(&self, name: &str) -> Result<Option<T>, EnvError> {
        self.read(name, |v| {
            go_int(v)
                .and_then(|n| T::try_from(n).ok())
                .ok_or("a whole number in range")
        })
    }

    /// `name` as a Go integer, `default` when unset.
    pub fn int_or<T: TryFrom<i128>>(&self, name: &str, default: T) -> Result<T, EnvError> {
        Ok(self.int(name)?.unwrap_or(default))
    }

    /// `name` as a finite decimal number.
    pub fn float(&self, name: &str) -> Result<Option<f64>, EnvError> {
        self.read(name, |v| {
            v.parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .ok_or("a number")
        })
    }

    /// `name` as a Go duration (a negative one is refused: no setting here takes one).
    pub fn duration(&self, name: &str) -> Result<Option<Duration>, EnvError> {
        self.read(name, |v| {
            go_duration(v).ok_or("a duration such as 10s, 1h30m or 150ms")
        })
    }

    /// `name` as a Go duration, `default` when unset.
    pub fn duration_or(&self, name: &str, default: Duration) -> Result<Duration, EnvError> {
        Ok(self.duration(name)?.unwrap_or(default))
    }

    /// `name` as a map `k1:v1,k2:v2`, in written order; empty when unset or empty.
    pub fn map(&self, name: &str) -> Result<Vec<(String, String)>, EnvError> {
        match self.string(name) {
            Some(value) => map_items(name, value),
            None => Ok(Vec::new()),
        }
    }

    fn read<T>(
        &self,
        name: &str,
        parse: impl FnOnce(&str) -> Result<T, &'static str>,
    ) -> Result<Option<T>, EnvError> {
        match self.string(name) {
            None => Ok(None),
            Some(value) => parse(value)
                .map(Some)
                .map_err(|expected| EnvError::new(name, value, expected)),
        }
    }
}

/// The items of `value`, a map `k1:v1,k2:v2` in variable `name`, as upstream's settings
/// library reads one: nothing when it is blank; each item exactly one key and one value.
fn map_items(name: &str, value: &str) -> Result<Vec<(String, String)>, EnvError> {
    if value.trim().is_empty() {
        return Ok(Vec::new());
    }
    value
        .split(',')
        .map(|item| match item.split(':').collect::<Vec<_>>()[..] {
            [k, v] => Ok((k.to_string(), v.to_string())),
            _ => Err(EnvError::new(
                name,
                value,
                "a map k1:v1,k2:v2 (each item one key and one value)",
            )),
        })
        .collect()
}

/// Go's `strconv.ParseBool`.
fn go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `strconv.ParseInt(text, 0, 128)`: a sign, then a base prefix (`0x`, `0o` or a leading
/// `0`, `0b`) or decimal; underscores only between digits after a prefix.
fn go_int(text: &str) -> Option<i128> {
    let (negative, digits) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = digits.to_ascii_lowercase();
    let (radix, body, prefixed) = if let Some(rest) = lower.strip_prefix("0x") {
        (16, rest.to_string(), true)
    } else if let Some(rest) = lower.strip_prefix("0b") {
        (2, rest.to_string(), true)
    } else if let Some(rest) = lower.strip_prefix("0o") {
        (8, rest.to_string(), true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower[1..].to_string(), true)
    } else {
        (10, lower, false)
    };
    if body.is_empty() || body.starts_with('_') || body.ends_with('_') || body.contains("__") {
        return None;
    }
    if body.contains('_') && !prefixed {
        return None;
    }
    let magnitude = i128::from_str_radix(&body.replace('_', ""), radix).ok()?;
    Some(if negative { -magnitude } else { magnitude })
}

/// Go's `time.ParseDuration`, refusing negative values: `0`, or one or more decimal numbers each
/// followed by a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`).
fn go_duration(text: &str) -> Option<Duration> {
    let text = text.strip_prefix('+').unwrap_or(text);
    if text == "0" {
        return Some(Duration::ZERO);
    }
    if text.is_empty() {
        return None;
    }
    let mut rest = text;
    let mut nanos = 0f64;
    while !rest.is_empty() {
        let split = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let (number, after) = rest.split_at(split);
        if number.is_empty() || number == "." {
            return None;
        }
        let value: f64 = number.parse().ok()?;
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        nanos += value * scale;
        rest = next;
    }
    // Go's durations are i64 nanoseconds.
    (nanos.is_finite() && nanos <= i64::MAX as f64).then(|| Duration::from_nanos(nanos as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_as_go_reads_them() {
        let env = Environment::from_pairs([
            ("B1", "True"),
            ("B2", "0"),
            ("B3", "yes"),
            ("I1", "0x10"),
            ("I2", "010"),
            ("I3", "-42"),
            ("I4", ""),
            ("I5", "1_000"),
            ("I6", "0x1_000"),
            ("D1", "1h30m"),
            ("D2", "150us"),
            ("D3", "0"),
            ("D4", "10"),
            ("D5", "1.5s"),
            ("D6", "-1s"),
            ("M1", "a:b,foo:bar"),
            ("M2", "a:b:c"),
            ("F1", "0.9"),
        ]);
        assert_eq!(env.bool("B1"), Ok(Some(true)));
        assert_eq!(env.bool("B2"), Ok(Some(false)));
        assert_eq!(env.bool("UNSET"), Ok(None));
        let e = env.bool("B3").unwrap_err();
        assert_eq!(
            e.to_string(),
            "environment variable B3: `yes` is not a bool (true, false, 1, 0, t, f)"
        );
        assert_eq!(env.int::<u16>("I1"), Ok(Some(16)));
        assert_eq!(env.int::<u16>("I2"), Ok(Some(8)));
        assert_eq!(env.int::<i64>("I3"), Ok(Some(-42)));
        assert!(env.int::<u16>("I3").is_err(), "out of range");
        assert!(env.int::<u16>("I4").is_err(), "empty");
        assert!(env.int::<u16>("I5").is_err(), "underscores need a prefix");
        assert_eq!(env.int::<u16>("I6"), Ok(Some(4096)));
        assert_eq!(env.duration("D1"), Ok(Some(Duration::from_secs(5400))));
        assert_eq!(env.duration("D2"), Ok(Some(Duration::from_micros(150))));
        assert_eq!(env.duration("D3"), Ok(Some(Duration::ZERO)));
        assert!(env.duration("D4").is_err(), "a bare number other than 0");
        assert_eq!(env.duration("D5"), Ok(Some(Duration::from_millis(1500))));
        assert!(env.duration("D6").is_err());
        assert_eq!(
            env.map("M1"),
            Ok(vec![("a".into(), "b".into()), ("foo".into(), "bar".into())])
        );
        assert!(env.map("M2").is_err());
        assert_eq!(env.map("UNSET"), Ok(Vec::new()));
        assert_eq!(env.float("F1"), Ok(Some(0.9)));
    }
}
