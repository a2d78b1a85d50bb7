//! Mogrifiers: upstream's renamings of a statistic for DogStatsD. Each has a regular
//! expression, a name template and tag templates; the first whose expression is found in a
//! statistic's name gives it its new name and its tags, and a name none matches is sent as
//! it is, without tags of theirs.
//!
//! A template's `$n` (a `$` and decimal digits) stands for the `n`th group of the match, `$0`
//! for the whole match; a group that took no part stands for nothing, and an `n` beyond the
//! groups (or too large to read) leaves `$n` as written. Nothing else is special: `$` without
//! digits, `${1}` and `$$` are kept as they are.

use regex::Regex;

use crate::config::MogrifierConfig;

/// The mogrifiers of `stats.dogstatsd.mogrifiers`, compiled, in order.
#[derive(Debug, Default)]
pub struct Mogrifiers(Vec<Mogrifier>);

#[derive(Debug)]
struct Mogrifier {
    matcher: Regex,
    name: String,
    tags: Vec<(String, String)>,
}

impl Mogrifiers {
    /// Compiles `configs` (checked when read: see `MogrifierConfig::check`); an error is the
    /// first pattern that does not compile.
    pub fn new(configs: &[MogrifierConfig]) -> Result<Mogrifiers, regex::Error> {
        configs
            .iter()
            .map(|config| {
                Ok(Mogrifier {
                    matcher: Regex::new(&config.pattern)?,
                    name: config.name.clone(),
                    tags: config
                        .tags
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                })
            })
            .collect::<Result<_, _>>()
            .map(Mogrifiers)
    }

    /// The new name of `name` and the tags (`key:value`) the first mogrifier that matches it
    /// adds; `None` when none matches.
    pub fn apply(&self, name: &str) -> Option<(String, Vec<String>)> {
        self.0.iter().find_map(|mogrifier| {
            let captures = mogrifier.matcher.captures(name)?;
            let groups: Vec<&str> = (0..captures.len())
                .map(|i| captures.get(i).map_or("", |m| m.as_str()))
                .collect();
            let tags = mogrifier
                .tags
                .iter()
                .map(|(key, value)| format!("{key}:{}", expand(value, &groups)))
                .collect();
            Some((expand(&mogrifier.name, &groups), tags))
        })
    }
}

/// `template` with each `$n` replaced by `groups[n]` (see the [module documentation](self)).
fn expand(template: &str, groups: &[&str]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let group = after[..digits]
            .parse::<usize>()
            .ok()
            .and_then(|n| groups.get(n));
        match group {
            Some(text) if digits > 0 => out.push_str(text),
            _ => out.push_str(&rest[at..at + 1 + digits]),
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A mogrifier's pattern, name and tags.
    type Spec<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

    fn mogrifiers(specs: &[Spec<'_>]) -> Mogrifiers {
        let configs: Vec<_> = specs
            .iter()
            .map(|(pattern, name, tags)| MogrifierConfig {
                pattern: pattern.to_string(),
                name: name.to_string(),
                tags: tags
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            })
            .collect();
        Mogrifiers::new(&configs).unwrap()
    }

    const ANY_DESCRIPTOR: &str = r"^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)$";

    #[test]
    fn the_first_match_renames_and_tags() {
        let m = mogrifiers(&[
            (
                r"^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.foo$",
                "custom.foo",
                &[("domain", "$1"), ("descriptor", "$2")],
            ),
            (
                ANY_DESCRIPTOR,
                "ratelimit.service.rate_limit.$3",
                &[("domain", "$1"), ("descriptor", "$2")],
            ),
        ]);
        let tags = |v: &[&str]| v.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        assert_eq!(
            m.apply("ratelimit.service.rate_limit.mongo_cps.database_users.foo"),
            Some((
                "custom.foo".to_string(),
                tags(&["descriptor:database_users", "domain:mongo_cps"])
            ))
        );
        assert_eq!(
            m.apply("ratelimit.service.rate_limit.mongo_cps.database_users.within_limit"),
            Some((
                "ratelimit.service.rate_limit.within_limit".to_string(),
                tags(&["descriptor:database_users", "domain:mongo_cps"])
            ))
        );
        assert_eq!(m.apply("some.unmatched.metric"), None);
        assert_eq!(Mogrifiers::default().apply("anything"), None);
    }

    #[test]
    fn templates_as_upstream_expands_them() {
        let groups = ["whole", "a", "", "c"];
        assert_eq!(expand("x.$1.$3", &groups), "x.a.c");
        assert_eq!(expand("$0", &groups), "whole");
        assert_eq!(
            expand("$2|$5|$", &groups),
            "|$5|$",
            "empty group; beyond; bare"
        );
        assert_eq!(expand("${1}$$1", &groups), "${1}$a");
        assert_eq!(
            expand("$01", &groups),
            "a",
            "leading zeros read as Go reads them"
        );
        assert_eq!(
            expand("$99999999999999999999999", &groups),
            "$99999999999999999999999"
        );
        // An unanchored pattern is searched for, not matched whole.
        let m = mogrifiers(&[(r"\.(\w+)$", "l.$1", &[])]);
        assert_eq!(
            m.apply("ratelimit.service.rate_limit.d.k.total_hits")
                .map(|r| r.0),
            Some("l.total_hits".to_string())
        );
    }
}
