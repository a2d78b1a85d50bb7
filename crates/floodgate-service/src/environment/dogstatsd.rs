//! envoyproxy/ratelimit's DogStatsD settings, read as upstream reads them:
//!
//! | variable | meaning |
//! |---|---|
//! | `USE_DOG_STATSD` | push to a DogStatsD agent at `STATSD_HOST:STATSD_PORT` over UDP (upstream's other sinks off: [`super::upstream`] refuses it beside `USE_STATSD` or `USE_PROMETHEUS`) |
//! | `USE_DOG_STATSD_MOGRIFIERS` | the mogrifiers' names, comma-separated, in the order they are tried |
//! | `DOG_STATSD_MOGRIFIER_<NAME>_PATTERN` | a regular expression searched for in each statistic's name (required) |
//! | `DOG_STATSD_MOGRIFIER_<NAME>_NAME` | the name a matching statistic takes, `$0`… for the match and its groups (required) |
//! | `DOG_STATSD_MOGRIFIER_<NAME>_TAGS` | tags it adds, `k1:v1,k2:v2`, values with `$n` too (each key and value not empty) |
//!
//! `<NAME>` is upper-cased, as upstream's settings library upper-cases the whole variable
//! name; and, as that library does, an unset `…_PATTERN`, `…_NAME` or `…_TAGS` falls back to
//! a variable named plainly `PATTERN`, `NAME` or `TAGS` (one set but empty does not). A
//! mogrifier that cannot be used refuses start-up naming its variable, where upstream panics.
//!
//! The DogStatsD client upstream uses also adds, to every line, `dd.internal.entity_id:…`,
//! `env:…`, `service:…` and `version:…` from `DD_ENTITY_ID`, `DD_ENV`, `DD_SERVICE` and
//! `DD_VERSION` when they are set and not empty ([`datadog_tags`]).

use std::collections::BTreeMap;

use super::{EnvError, Environment};

/// One mogrifier, as its variables give it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mogrifier {
    /// `<NAME>` as `USE_DOG_STATSD_MOGRIFIERS` lists it.
    pub label: String,
    /// `…_PATTERN`: a regular expression that compiles.
    pub pattern: String,
    /// `…_NAME`: the new name, not empty.
    pub name: String,
    /// `…_TAGS`: the tags added (a key written twice keeps its last value).
    pub tags: BTreeMap<String, String>,
}

/// The mogrifiers `USE_DOG_STATSD_MOGRIFIERS` lists, in its order; an error names the first
/// variable that cannot be used.
pub fn mogrifiers(env: &Environment) -> Result<Vec<Mogrifier>, EnvError> {
    let listed = env.string("USE_DOG_STATSD_MOGRIFIERS").unwrap_or_default();
    if listed.trim().is_empty() {
        return Ok(Vec::new());
    }
    listed
        .split(',')
        .map(|label| mogrifier(env, label))
        .collect()
}

/// The mogrifier `label` names.
fn mogrifier(env: &Environment, label: &str) -> Result<Mogrifier, EnvError> {
    let variable = |field: &str| format!("DOG_STATSD_MOGRIFIER_{label}_{field}").to_uppercase();
    // The settings library's fallback: the field's own name, when the full one is unset.
    let read = |field: &str| -> (String, Option<&str>) {
        let full = variable(field);
        let value = env.string(&full).or_else(|| env.string(field));
        (full, value)
    };
    let (tags_variable, tags_text) = read("TAGS");
    let tags = match tags_text {
        Some(text) => super::map_items(&tags_variable, text)?
            .into_iter()
            .collect(),
        None => BTreeMap::new(),
    };
    let (pattern_variable, pattern) = read("PATTERN");
    let pattern = pattern.unwrap_or_default();
    let (name_variable, name) = read("NAME");
    let name = name.unwrap_or_default();
    let refused = |variable: String, value: &str, expected: String| EnvError {
        variable,
        shown: if value.is_empty() {
            "unset or empty".into()
        } else {
            format!("`{value}`")
        },
        expected,
    };
    if pattern.is_empty() {
        let why = format!("a regular expression: mogrifier {label} needs a PATTERN");
        return Err(refused(pattern_variable, pattern, why));
    }
    if let Err(e) = regex::Regex::new(pattern) {
        return Err(refused(
            pattern_variable,
            pattern,
            format!("a regular expression ({e})"),
        ));
    }
    if name.is_empty() {
        let why = format!("a name: mogrifier {label} needs a NAME");
        return Err(refused(name_variable, name, why));
    }
    if let Some((key, value)) = tags.iter().find(|(k, v)| k.is_empty() || v.is_empty()) {
        let why = if key.is_empty() { "a key" } else { "a value" };
        let text = tags_text.unwrap_or_default();
        return Err(refused(
            tags_variable,
            text,
            format!("tags each with {why} (`{key}:{value}`)"),
        ));
    }
    Ok(Mogrifier {
        label: label.to_string(),
        pattern: pattern.to_string(),
        name: name.to_string(),
        tags,
    })
}

/// The tags the DogStatsD client adds to every line from `DD_ENTITY_ID`, `DD_ENV`,
/// `DD_SERVICE` and `DD_VERSION`, in that order, for those set and not empty.
pub fn datadog_tags(env: &Environment) -> Vec<String> {
    [
        ("DD_ENTITY_ID", "dd.internal.entity_id"),
        ("DD_ENV", "env"),
        ("DD_SERVICE", "service"),
        ("DD_VERSION", "version"),
    ]
    .into_iter()
    .filter_map(|(variable, tag)| {
        env.string(variable)
            .filter(|v| !v.is_empty())
            .map(|v| format!("{tag}:{v}"))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&str, &str)]) -> Result<Vec<Mogrifier>, EnvError> {
        mogrifiers(&Environment::from_pairs(pairs.iter().copied()))
    }

    const PATTERN: &str = r"^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)$";

    #[test]
    fn mogrifiers_are_read_in_the_listed_order() {
        let got = read(&[
            ("USE_DOG_STATSD_MOGRIFIERS", "specific,wildcard"),
            ("DOG_STATSD_MOGRIFIER_SPECIFIC_PATTERN", r"\.foo$"),
            ("DOG_STATSD_MOGRIFIER_SPECIFIC_NAME", "custom.foo"),
            ("DOG_STATSD_MOGRIFIER_WILDCARD_PATTERN", PATTERN),
            (
                "DOG_STATSD_MOGRIFIER_WILDCARD_NAME",
                "ratelimit.service.rate_limit.$3",
            ),
            (
                "DOG_STATSD_MOGRIFIER_WILDCARD_TAGS",
                "domain:$1,descriptor:$2,domain:$9",
            ),
        ])
        .unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].label, "specific");
        assert!(got[0].tags.is_empty());
        assert_eq!(got[1].name, "ratelimit.service.rate_limit.$3");
        assert_eq!(
            got[1].tags,
            BTreeMap::from([
                ("descriptor".to_string(), "$2".to_string()),
                ("domain".to_string(), "$9".to_string()),
            ]),
            "a key written twice keeps its last value"
        );
        assert_eq!(read(&[]).unwrap(), []);
        assert_eq!(read(&[("USE_DOG_STATSD_MOGRIFIERS", " ")]).unwrap(), []);
    }

    #[test]
    fn an_unset_field_falls_back_to_its_plain_name_as_upstreams_library_does() {
        let got = read(&[
            ("USE_DOG_STATSD_MOGRIFIERS", "a"),
            ("PATTERN", "^x"),
            ("NAME", "y"),
            ("DOG_STATSD_MOGRIFIER_A_TAGS", ""),
        ])
        .unwrap();
        assert_eq!((got[0].pattern.as_str(), got[0].name.as_str()), ("^x", "y"));
        // Set but empty: no fallback.
        let e = read(&[
            ("USE_DOG_STATSD_MOGRIFIERS", "a"),
            ("DOG_STATSD_MOGRIFIER_A_PATTERN", ""),
            ("PATTERN", "^x"),
            ("NAME", "y"),
        ])
        .unwrap_err();
        assert_eq!(e.variable, "DOG_STATSD_MOGRIFIER_A_PATTERN");
    }

    #[test]
    fn a_mogrifier_that_cannot_be_used_is_refused_naming_its_variable() {
        let full = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = vec![
                ("USE_DOG_STATSD_MOGRIFIERS", "tag"),
                ("DOG_STATSD_MOGRIFIER_TAG_PATTERN", PATTERN),
                ("DOG_STATSD_MOGRIFIER_TAG_NAME", "x.$3"),
            ];
            for (k, v) in extra {
                pairs.retain(|(name, _)| name != k);
                pairs.push((k, v));
            }
            read(&pairs).unwrap_err()
        };
        for (extra, variable, said) in [
            (
                vec![("DOG_STATSD_MOGRIFIER_TAG_PATTERN", "")],
                "DOG_STATSD_MOGRIFIER_TAG_PATTERN",
                "needs a PATTERN",
            ),
            (
                vec![("DOG_STATSD_MOGRIFIER_TAG_PATTERN", "(")],
                "DOG_STATSD_MOGRIFIER_TAG_PATTERN",
                "`(`",
            ),
            (
                vec![("DOG_STATSD_MOGRIFIER_TAG_NAME", "")],
                "DOG_STATSD_MOGRIFIER_TAG_NAME",
                "needs a NAME",
            ),
            (
                vec![("DOG_STATSD_MOGRIFIER_TAG_TAGS", ":5")],
                "DOG_STATSD_MOGRIFIER_TAG_TAGS",
                "a key",
            ),
            (
                vec![("DOG_STATSD_MOGRIFIER_TAG_TAGS", "domain:$1,descriptor:")],
                "DOG_STATSD_MOGRIFIER_TAG_TAGS",
                "a value",
            ),
            (
                vec![("DOG_STATSD_MOGRIFIER_TAG_TAGS", "domain")],
                "DOG_STATSD_MOGRIFIER_TAG_TAGS",
                "k1:v1",
            ),
        ] {
            let e = full(&extra);
            assert_eq!(e.variable, variable, "{extra:?}: {e}");
            assert!(e.to_string().contains(said), "{extra:?}: {e}");
        }
        let e = read(&[("USE_DOG_STATSD_MOGRIFIERS", "missing")]).unwrap_err();
        assert_eq!(e.variable, "DOG_STATSD_MOGRIFIER_MISSING_PATTERN");
    }

    #[test]
    fn the_clients_own_tags_come_from_dd_variables() {
        let env = Environment::from_pairs([
            ("DD_VERSION", "1.2"),
            ("DD_ENV", "prod"),
            ("DD_SERVICE", ""),
            ("DD_ENTITY_ID", "pod-uid"),
        ]);
        assert_eq!(
            datadog_tags(&env),
            ["dd.internal.entity_id:pod-uid", "env:prod", "version:1.2"]
        );
    }
}
