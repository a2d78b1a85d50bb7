//! The rules of a running configuration as envoyproxy/ratelimit's debug endpoint `/rlconfig`
//! lists them, one line a rule.

use super::RuleSet;

impl RuleSet {
    /// One line per rule, sorted by its statistics key (so a rule comes before those nested
    /// under it), as envoyproxy/ratelimit's `/rlconfig` writes them:
    ///
    /// ```text
    /// rl.foo.bar: unit=MINUTE requests_per_unit=3, shadow_mode: false, quota_mode: false
    /// ```
    ///
    /// The unit and count are what a status reports as the current limit (a Floodgate
    /// algorithm's quota in Envoy's terms); an `unlimited` rule lists `unit=UNKNOWN
    /// requests_per_unit=0`, as upstream does. `quota_mode` is the rule's own (the global
    /// `QUOTA_MODE` is not listed, as upstream does not list it).
    pub fn listing(&self) -> String {
        let mut lines: Vec<(&str, String)> = self
            .rules()
            .into_iter()
            .map(|(_, rule)| {
                let (unit, requests) = match rule.rls_limit() {
                    Some(limit) => (limit.unit.name().to_ascii_uppercase(), limit.requests_per_unit),
                    None => ("UNKNOWN".to_string(), 0),
                };
                let key = rule.full_key();
                let line = format!(
                    "{key}: unit={unit} requests_per_unit={requests}, shadow_mode: {}, quota_mode: {}\n",
                    rule.shadow_mode(),
                    rule.quota_mode()
                );
                (key, line)
            })
            .collect();
        // Sorting by the key alone, not the whole line: "rl.foo:" must come before
        // "rl.foo.bar:" although ':' sorts after '.'.
        lines.sort_unstable();
        lines.into_iter().map(|(_, line)| line).collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::config::envoy::compile_file;

    #[test]
    fn rules_are_listed_as_upstream_lists_them() {
        let rules = compile_file(
            "domain: rl\ndescriptors:\n  - key: foo\n    rate_limit: {unit: minute, requests_per_unit: 2}\n    descriptors:\n      - key: bar\n        value: banned\n        rate_limit: {unit: minute, requests_per_unit: 0}\n      - key: baz\n        value: shady\n        shadow_mode: true\n        rate_limit: {unit: second, requests_per_unit: 3}\n      - key: quota\n        quota_mode: true\n        rate_limit: {unit: hour, requests_per_unit: 9}\n  - key: qux\n    rate_limit: {unlimited: true}\n  - key: source_cluster\n    value: proxy\n    descriptors:\n      - key: destination_cluster\n        rate_limit: {unit: hour, requests_per_unit: 7}\n",
        )
        .unwrap();
        assert_eq!(
            rules.listing(),
            "rl.foo: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false\n\
             rl.foo.bar_banned: unit=MINUTE requests_per_unit=0, shadow_mode: false, quota_mode: false\n\
             rl.foo.baz_shady: unit=SECOND requests_per_unit=3, shadow_mode: true, quota_mode: false\n\
             rl.foo.quota: unit=HOUR requests_per_unit=9, shadow_mode: false, quota_mode: true\n\
             rl.qux: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n\
             rl.source_cluster_proxy.destination_cluster: unit=HOUR requests_per_unit=7, shadow_mode: false, quota_mode: false\n"
        );
    }
}
