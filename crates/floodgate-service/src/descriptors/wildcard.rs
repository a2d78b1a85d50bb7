//! Wildcard descriptor values, as envoyproxy/ratelimit matches them: a configured value holding
//! one or more `*` matches every request value in which each `*` stands for any run of
//! characters (possibly empty) and everything else is matched literally, over the whole value.
//!
//! `foo*` matches `foo`, `foo1` and `foobar`; `bar*b` matches `barb` and `barab` but not
//! `barbx`; `svc*ep*rpc` matches `svc-ep-rpc` and `svcEPeprpc`; `*` alone matches every value,
//! the empty one included. There is no escape: a `*` in a configured value is always a
//! wildcard.

/// A configured value with at least one `*`, split once into its literal parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wildcard {
    pattern: String,
    /// The literal runs between the `*`s: one more than there are `*`s; the first must start
    /// the value and the last must end it.
    parts: Vec<String>,
}

impl Wildcard {
    /// The wildcard written as `pattern`, or `None` if `pattern` holds no `*` (an exact value).
    pub fn parse(pattern: &str) -> Option<Wildcard> {
        if !pattern.contains('*') {
            return None;
        }
        Some(Wildcard {
            pattern: pattern.to_string(),
            parts: pattern.split('*').map(str::to_string).collect(),
        })
    }

    /// The value as configured, `*`s included.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Whether `value` matches: it starts with the first literal part, ends with the last, and
    /// holds the middle ones in order between them without overlap. Taking each middle part at
    /// its leftmost place is enough: a later place never leaves more room for the rest.
    pub fn matches(&self, value: &str) -> bool {
        let (first, rest) = match self.parts.split_first() {
            Some(split) => split,
            None => return false,
        };
        let (last, middle) = match rest.split_last() {
            Some(split) => split,
            None => return value == first,
        };
        let fixed: usize = self.parts.iter().map(String::len).sum();
        if value.len() < fixed
            || !value.starts_with(first.as_str())
            || !value.ends_with(last.as_str())
        {
            return false;
        }
        let mut between = &value[first.len()..value.len() - last.len()];
        for part in middle {
            match between.find(part.as_str()) {
                Some(at) => between = &between[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::Wildcard;

    fn matches(pattern: &str, value: &str) -> bool {
        Wildcard::parse(pattern).expect("a wildcard").matches(value)
    }

    #[test]
    fn stars_match_any_run_over_the_whole_value() {
        assert!(Wildcard::parse("plain").is_none());
        for (pattern, value, expected) in [
            ("foo*", "foo", true),
            ("foo*", "foo1", true),
            ("foo*", "fo", false),
            ("foo*", "xfoo", false),
            ("*", "", true),
            ("*", "anything", true),
            ("*.example.com", "a.example.com", true),
            ("*.example.com", "example.com", false),
            ("bar*b", "barb", true),
            ("bar*b", "barab", true),
            ("bar*b", "barbx", false),
            ("bar*b", "bab", false),
            ("svc*ep*rpc", "svc-ep-rpc", true),
            ("svc*ep*rpc", "svceprpc", true),
            ("svc*ep*rpc", "svc-rpc", false),
            ("a*ab", "aab", true),
            ("a*ab", "ab", false),
            ("x**y", "xy", true),
            ("x*a*a*y", "xaay", true),
            ("x*a*a*y", "xay", false),
        ] {
            assert_eq!(matches(pattern, value), expected, "{pattern} ~ {value}");
        }
    }
}
