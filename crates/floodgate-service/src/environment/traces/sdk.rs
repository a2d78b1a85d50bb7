//! The OpenTelemetry SDK's own variables that change what upstream's traces carry, read as
//! upstream's SDK (opentelemetry-go) reads them:
//!
//! | variable | meaning |
//! |---|---|
//! | `OTEL_RESOURCE_ATTRIBUTES` | more attributes of the resource, `key=value,key=value`: each key and value trimmed, the value percent-decoded (kept as written when its escapes do not decode); `TRACING_SERVICE_*` win over the same keys |
//! | `OTEL_SERVICE_NAME` | `service.name` among those attributes, which `TRACING_SERVICE_NAME` (default `RateLimit`) always replaces: no effect, as upstream |
//! | `OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT` (else `OTEL_ATTRIBUTE_COUNT_LIMIT`) | the most attributes a span keeps (default 128; below 0, no limit) |
//! | `OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT` (else `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`) | the longest string value an attribute keeps, in characters (default, or below 0: no limit) |
//! | `OTEL_SPAN_EVENT_COUNT_LIMIT`, `OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT`, `OTEL_SPAN_LINK_COUNT_LIMIT`, `OTEL_LINK_ATTRIBUTE_COUNT_LIMIT` | the most events and links a span keeps, and attributes each (default 128; below 0, no limit): Floodgate's spans have none |
//!
//! Where upstream logs and ignores a value it cannot read (a limit that is not a whole number,
//! an attribute without `=`), Floodgate refuses to start, naming the variable.

use super::super::{EnvError, Environment};

/// What the SDK's variables add to the traces: the resource's attributes from the environment
/// and the span limits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SdkSettings {
    /// The resource's attributes from `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME`, in
    /// order, before `TRACING_SERVICE_*` replace theirs.
    pub resource: Vec<(String, String)>,
    /// The span limits.
    pub limits: SpanLimits,
}

/// The most a span keeps; `None`: no limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanLimits {
    /// Attributes per span.
    pub attributes: Option<u32>,
    /// Characters per string attribute value.
    pub value_length: Option<usize>,
    /// Events per span.
    pub events: Option<u32>,
    /// Attributes per event.
    pub event_attributes: Option<u32>,
    /// Links per span.
    pub links: Option<u32>,
    /// Attributes per link.
    pub link_attributes: Option<u32>,
}

impl Default for SpanLimits {
    /// The specification's defaults, upstream's: 128 of each, string values whole.
    fn default() -> SpanLimits {
        SpanLimits {
            attributes: Some(128),
            value_length: None,
            events: Some(128),
            event_attributes: Some(128),
            links: Some(128),
            link_attributes: Some(128),
        }
    }
}

impl SdkSettings {
    /// The SDK's variables in `env` (see the [module documentation](self)).
    pub fn read(env: &Environment) -> Result<SdkSettings, EnvError> {
        let defaults = SpanLimits::default();
        let count = |names: &[&str], default: Option<u32>| -> Result<Option<u32>, EnvError> {
            Ok(match first_int(env, names)? {
                None => default,
                Some(n) if n < 0 => None,
                Some(n) => Some(u32::try_from(n).unwrap_or(u32::MAX)),
            })
        };
        let limits = SpanLimits {
            attributes: count(
                &[
                    "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
                    "OTEL_ATTRIBUTE_COUNT_LIMIT",
                ],
                defaults.attributes,
            )?,
            value_length: first_int(
                env,
                &[
                    "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
                    "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
                ],
            )?
            .and_then(|n| usize::try_from(n).ok()),
            events: count(&["OTEL_SPAN_EVENT_COUNT_LIMIT"], defaults.events)?,
            event_attributes: count(
                &["OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT"],
                defaults.event_attributes,
            )?,
            links: count(&["OTEL_SPAN_LINK_COUNT_LIMIT"], defaults.links)?,
            link_attributes: count(
                &["OTEL_LINK_ATTRIBUTE_COUNT_LIMIT"],
                defaults.link_attributes,
            )?,
        };
        Ok(SdkSettings {
            resource: resource_attributes(env)?,
            limits,
        })
    }
}

/// The first of `names` that is set and not empty, as a whole number (decimal, an optional
/// sign, as Go's `strconv.Atoi` reads it).
fn first_int(env: &Environment, names: &[&str]) -> Result<Option<i64>, EnvError> {
    for name in names {
        let Some(value) = env.string(name).filter(|v| !v.is_empty()) else {
            continue;
        };
        return value
            .parse::<i64>()
            .map(Some)
            .map_err(|_| EnvError::new(name, value, "a whole number"));
    }
    Ok(None)
}

/// `OTEL_RESOURCE_ATTRIBUTES`' pairs, then `service.name` from `OTEL_SERVICE_NAME` (which
/// wins over a pair of the same key, as upstream's SDK merges them).
fn resource_attributes(env: &Environment) -> Result<Vec<(String, String)>, EnvError> {
    let mut out: Vec<(String, String)> = Vec::new();
    let text = env.string("OTEL_RESOURCE_ATTRIBUTES").unwrap_or("").trim();
    if !text.is_empty() {
        for pair in text.split(',') {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(EnvError::new(
                    "OTEL_RESOURCE_ATTRIBUTES",
                    pair,
                    "key=value pairs separated by commas",
                ));
            };
            let value = value.trim();
            let value = path_unescape(value).unwrap_or_else(|| value.to_string());
            set(&mut out, key.trim(), value);
        }
    }
    let service = env.string("OTEL_SERVICE_NAME").unwrap_or("").trim();
    if !service.is_empty() {
        set(&mut out, "service.name", service.to_string());
    }
    Ok(out)
}

/// Sets `key` to `value` in `attributes`, replacing an earlier value in its place.
fn set(attributes: &mut Vec<(String, String)>, key: &str, value: String) {
    match attributes.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value,
        None => attributes.push((key.to_string(), value)),
    }
}

/// `value` percent-decoded as Go's `url.PathUnescape` decodes it: `None` when an escape is
/// not `%` and two hexadecimal digits, or the bytes are not UTF-8.
fn path_unescape(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            i += 3;
        } else {
            i += 1;
        }
    }
    percent_encoding::percent_decode_str(value)
        .decode_utf8()
        .ok()
        .map(|decoded| decoded.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&str, &str)]) -> Result<SdkSettings, EnvError> {
        SdkSettings::read(&Environment::from_pairs(pairs.iter().copied()))
    }

    #[test]
    fn resource_attributes_are_trimmed_decoded_and_named_last_wins() {
        let settings = read(&[
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                " deployment.environment = prod , team=edge%20team,bad=%zz, team=rl ",
            ),
            ("OTEL_SERVICE_NAME", "from-env"),
        ])
        .unwrap();
        assert_eq!(
            settings.resource,
            [
                ("deployment.environment".to_string(), "prod".to_string()),
                ("team".into(), "rl".into()),
                ("bad".into(), "%zz".into()),
                ("service.name".into(), "from-env".into()),
            ]
        );
        let error = read(&[("OTEL_RESOURCE_ATTRIBUTES", "a=1,b")]).unwrap_err();
        assert!(
            error.to_string().contains("OTEL_RESOURCE_ATTRIBUTES"),
            "{error}"
        );
    }

    #[test]
    fn limits_take_the_span_variable_then_the_general_one() {
        assert_eq!(read(&[]).unwrap().limits, SpanLimits::default());
        let limits = read(&[
            ("OTEL_ATTRIBUTE_COUNT_LIMIT", "5"),
            ("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "16"),
            ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "8"),
            ("OTEL_SPAN_EVENT_COUNT_LIMIT", "-1"),
            ("OTEL_LINK_ATTRIBUTE_COUNT_LIMIT", "0"),
        ])
        .unwrap()
        .limits;
        assert_eq!(limits.attributes, Some(5));
        assert_eq!(limits.value_length, Some(8));
        assert_eq!(limits.events, None, "below 0: no limit");
        assert_eq!(limits.link_attributes, Some(0));
        assert_eq!(limits.links, Some(128));
        let error = read(&[("OTEL_SPAN_LINK_COUNT_LIMIT", "many")]).unwrap_err();
        assert!(
            error.to_string().contains("OTEL_SPAN_LINK_COUNT_LIMIT"),
            "{error}"
        );
    }

    #[test]
    fn go_path_unescape() {
        assert_eq!(path_unescape("a%20b%2Cc").as_deref(), Some("a b,c"));
        assert_eq!(path_unescape("50%"), None);
        assert_eq!(path_unescape("%e2%82%ac").as_deref(), Some("€"));
        assert_eq!(path_unescape("%ff"), None, "not UTF-8");
    }
}
