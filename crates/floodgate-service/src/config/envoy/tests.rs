use super::*;
use crate::rls::entries;

fn error(yaml: &str) -> ConfigFileError {
    match compile_file(yaml) {
        Ok(_) => panic!("accepted:\n{yaml}"),
        Err(e) => e,
    }
}

fn invalid_at(yaml: &str) -> (String, String) {
    match error(yaml) {
        ConfigFileError::Invalid { path, message } => (path, message),
        other => panic!("expected an Invalid error, got {other:?}"),
    }
}

#[test]
fn validation_names_the_problem_and_the_path() {
    let cases: &[(&str, &str, &str)] = &[
        ("descriptors: []", "domain", "non-empty name"),
        ("domain: \"\"", "domain", "non-empty name"),
        (
            "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - value: x\n",
            "descriptors[0].descriptors[0].key",
            "non-empty key",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
            "descriptors[0].rate_limit.unit",
            "unknown unit `fortnight`",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n",
            "descriptors[0].rate_limit.unit",
            "missing",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n",
            "descriptors[0].rate_limit.requests_per_unit",
            "missing",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    value: b\n  - key: a\n  - key: a\n    value: b\n",
            "descriptors[2]",
            "duplicate descriptor: key `a` with value `b` is also descriptors[0]",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: b\n        value: \"\"\n",
            "descriptors[0].descriptors[1]",
            "key `b` without a value is also descriptors[0].descriptors[0]",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n",
            "descriptors[0].rate_limit.unit",
            "`unlimited` limit takes no `unit`",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, algorithm: token_bucket, rate: 1, capacity: 1}\n",
            "descriptors[0].rate_limit.algorithm",
            "takes no",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    unlimited: true\n    rate_limit: {unit: second, requests_per_unit: 3}\n",
            "descriptors[0].unlimited",
            "cannot be combined",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: me\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: other}, {name: me}]\n",
            "descriptors[0].rate_limit.replaces[1].name",
            "`me` cannot replace itself",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces: [{}]\n",
            "descriptors[0].rate_limit.replaces[0].name",
            "needs the name",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {algorithm: token_bucket, rate: 0, capacity: 2}\n",
            "descriptors[0].rate_limit.rate",
            "invalid value 0",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {algorithm: token_bucket, rate: 1, capacity: 2, unit: second}\n",
            "descriptors[0].rate_limit.unit",
            "algorithm",
        ),
    ];
    for (yaml, path, needle) in cases {
        let (got_path, message) = invalid_at(yaml);
        assert_eq!(&got_path, path, "{yaml}");
        assert!(message.contains(needle), "{message:?} lacks {needle:?}");
    }
}

#[test]
fn bad_yaml_and_unknown_fields_are_yaml_errors() {
    for (yaml, needle) in [
        ("domain: [unclosed", ""),
        ("domain: d\ndescriptor: []\n", "descriptor"),
        ("domain: d\ndescriptors:\n  - key: a\n    shadowmode: true\n", "shadowmode"),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 3}\n",
            "unknown field `burst`",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
            "requests_per_unit",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{nam: x}]}\n",
            "unknown field `nam`",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {algorithm: token_bucket, rate: 1, capacity: 2, burst: 3}\n",
            "burst",
        ),
    ] {
        match error(yaml) {
            ConfigFileError::Yaml {
                file: None,
                message,
                ..
            } => {
                assert!(message.contains(needle), "{message:?} lacks {needle:?}")
            }
            other => panic!("expected a Yaml error for {yaml:?}, got {other:?}"),
        }
    }
}

#[test]
fn numbers_as_values_and_detailed_metric_load_as_envoy_reads_them() {
    let set = compile_file(
        r#"
domain: d
descriptors:
  - key: to_number
    value: 2061234567
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1, name: 2024}
"#,
    )
    .expect("loads");
    let rule = set
        .lookup("d", &entries(&[("to_number", "2061234567")]))
        .expect("rule");
    assert_eq!(rule.name(), Some("2024"));
}

#[test]
fn duplicate_domains_are_refused() {
    let d = DomainConfig {
        domain: "x".into(),
        descriptors: Vec::new(),
    };
    match compile_domains(&[d.clone(), d]) {
        Err(ConfigFileError::Invalid { path, message }) => {
            assert_eq!(path, "domains[1].domain");
            assert!(message.contains("duplicate domain `x`"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_envoy_example_file_loads() {
    let text = include_str!("../../../../../examples/config/envoy.yaml");
    let set = compile_file(text).expect("loads");
    assert!(set.has_domain("edge_proxy"));
}

#[test]
fn quota_mode_goes_with_any_algorithm_but_not_beside_all_or_nothing() {
    let rules = compile_file(
        "domain: d\ndescriptors:\n  - key: tokens\n    quota_mode: true\n    rate_limit: {algorithm: token_bucket, rate: 10, capacity: 20}\n  - key: user\n    quota_mode: true\n    rate_limit: {unit: hour, requests_per_unit: 5}\n",
    )
    .unwrap();
    for key in ["tokens", "user"] {
        assert!(rules
            .lookup("d", &entries(&[(key, "x")]))
            .unwrap()
            .quota_mode());
    }
    let (path, message) = invalid_at(
        "domain: d\ndescriptors:\n  - key: a\n    quota_mode: true\n    rate_limit: {unit: hour, requests_per_unit: 5}\n  - key: b\n    descriptors:\n      - key: c\n        all_or_nothing: true\n        rate_limit: {unit: hour, requests_per_unit: 5}\n",
    );
    assert_eq!(path, "descriptors[1].descriptors[0].all_or_nothing");
    assert!(message.contains("descriptors[0].quota_mode"), "{message}");
}
