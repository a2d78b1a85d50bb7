//! envoyproxy/ratelimit's descriptor rules, from a config file's text to decisions: matching
//! (exact, wildcard, key-only, nesting), fixed windows per unit, `replaces`, `shadow_mode`,
//! `unlimited`, hits per request and per descriptor, and the `/json` mapping around a decision.
//! The store runs on a manual clock.

use floodgate::algorithm::fixed_window::Unit;
use floodgate::store::LocalStore;
use std::time::Duration;

use floodgate::algorithm::Algorithm;
use floodgate::Nanos;
use floodgate_service::config::envoy::compile_file;
use floodgate_service::descriptors::{Rule, RuleSet};
use floodgate_service::rls::json::{rls_request_from_json, rls_response_to_json};
use floodgate_service::rls::{Code, RlsLimit, RlsResponse, RlsStatus};
use serde_json::json;

use crate::rules::{decide, entries, request, store_at};

fn rules(yaml: &str) -> RuleSet {
    match compile_file(yaml) {
        Ok(set) => set,
        Err(e) => panic!("{e}"),
    }
}

fn codes(response: &RlsResponse) -> Vec<Code> {
    response.statuses.iter().map(|s| s.code).collect()
}

const MESSAGING: &str = r#"
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: DAY
      requests_per_unit: 100
"#;

#[test]
fn nested_descriptors_match_level_by_level() {
    let set = rules(MESSAGING);
    let nested = set
        .lookup(
            "messaging",
            &entries(&[("message_type", "marketing"), ("to_number", "2061111111")]),
        )
        .expect("nested rule");
    assert_eq!(nested.quota(), Some((5, Unit::Day)));
    assert_eq!(
        nested.full_key(),
        "messaging.message_type_marketing.to_number"
    );
    let top = set
        .lookup("messaging", &entries(&[("to_number", "2061111111")]))
        .expect("top rule");
    assert_eq!(top.quota(), Some((100, Unit::Day)));
    // The placeholder level has no limit of its own, and depth must match.
    assert!(set
        .lookup("messaging", &entries(&[("message_type", "marketing")]))
        .is_none());
    assert!(set
        .lookup(
            "messaging",
            &entries(&[("to_number", "1"), ("to_number", "2")])
        )
        .is_none());
    assert!(set
        .lookup(
            "messaging",
            &entries(&[("message_type", "transactional"), ("to_number", "1")])
        )
        .is_none());
    assert!(set.lookup("messaging", &[]).is_none());
    assert!(set
        .lookup("other", &entries(&[("to_number", "1")]))
        .is_none());
}

#[test]
fn exact_then_wildcard_then_key_only() {
    let set = rules(
        r#"
domain: d
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /api/v1*
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: path
    value: /api/login
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: path
    value: a*b
    rate_limit: {unit: second, requests_per_unit: 5}
"#,
    );
    let rpu = |value: &str| {
        set.lookup("d", &entries(&[("path", value)]))
            .and_then(Rule::quota)
            .map(|q| q.0)
    };
    assert_eq!(rpu("/api/login"), Some(4));
    // Wildcards in file order: `/api/*` comes first and also covers `/api/v1…`.
    assert_eq!(rpu("/api/v1/users"), Some(2));
    assert_eq!(rpu("/api/"), Some(2));
    assert_eq!(rpu("/other"), Some(1));
    // A `*` inside a value is a wildcard too, over the whole value.
    assert_eq!(rpu("a*b"), Some(5));
    assert_eq!(rpu("axxb"), Some(5));
    assert_eq!(rpu("ab"), Some(5));
    assert_eq!(rpu("axxbc"), Some(1));
}

#[test]
fn a_lone_star_matches_every_value_and_each_value_counts_apart() {
    let set = rules(
        r#"
domain: d
descriptors:
  - key: user
    value: "*"
    rate_limit: {unit: minute, requests_per_unit: 2}
"#,
    );
    let (store, _clock) = store_at(120);
    let alice = request("d", &[&[("user", "alice")]]);
    let bob = request("d", &[&[("user", "bob")]]);
    for _ in 0..2 {
        assert_eq!(decide(&set, &store, &alice).overall_code, Code::Ok);
    }
    assert_eq!(decide(&set, &store, &alice).overall_code, Code::OverLimit);
    assert_eq!(decide(&set, &store, &bob).overall_code, Code::Ok);
}

#[test]
fn fixed_windows_count_per_unit_and_reset_at_the_boundary() {
    let set = rules(MESSAGING);
    // 10 s into a day.
    let (store, clock) = store_at(86_400 * 100 + 10);
    let req = request("messaging", &[&[("to_number", "2061111111")]]);
    for left in (0..100).rev() {
        let r = decide(&set, &store, &req);
        assert_eq!(r.overall_code, Code::Ok);
        assert_eq!(r.statuses[0].limit_remaining, left);
    }
    let over = decide(&set, &store, &req);
    assert_eq!(over.overall_code, Code::OverLimit);
    let status = &over.statuses[0];
    assert_eq!(status.code, Code::OverLimit);
    assert_eq!(
        status.current_limit,
        Some(RlsLimit {
            name: None,
            requests_per_unit: 100,
            unit: Unit::Day
        })
    );
    assert_eq!(
        status.duration_until_reset,
        Some(Duration::from_secs(86_400 - 10))
    );
    clock.advance(Duration::from_secs(86_400 - 10));
    assert_eq!(decide(&set, &store, &req).overall_code, Code::Ok);
}

#[test]
fn each_descriptor_gets_a_status_and_any_over_limit_wins() {
    let set = rules(MESSAGING);
    let (store, _clock) = store_at(0);
    let both = request(
        "messaging",
        &[
            &[("message_type", "marketing"), ("to_number", "1")],
            &[("to_number", "1")],
            &[("unknown", "x")],
        ],
    );
    for _ in 0..5 {
        let r = decide(&set, &store, &both);
        assert_eq!(r.overall_code, Code::Ok);
    }
    let r = decide(&set, &store, &both);
    assert_eq!(r.overall_code, Code::OverLimit);
    assert_eq!(codes(&r), [Code::OverLimit, Code::Ok, Code::Ok]);
    assert_eq!(r.statuses[1].limit_remaining, 94);
    assert_eq!(
        r.statuses[2],
        RlsStatus {
            code: Code::Ok,
            ..RlsStatus::default()
        }
    );
}

#[test]
fn an_unknown_domain_is_allowed_without_limits() {
    let set = rules(MESSAGING);
    let (store, _clock) = store_at(0);
    let r = decide(
        &set,
        &store,
        &request("nope", &[&[("to_number", "1")], &[]]),
    );
    assert_eq!(r.overall_code, Code::Ok);
    assert_eq!(codes(&r), [Code::Ok, Code::Ok]);
    assert!(r.statuses.iter().all(|s| s.current_limit.is_none()));
    assert_eq!(store.stats().keys, 0);
}

const EXAMPLE7: &str = r#"
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
"#;

#[test]
fn replaces_skips_the_named_limit_for_that_request_only() {
    let set = rules(EXAMPLE7);
    let (store, _clock) = store_at(50);
    let first = &[("key_1", "value_1"), ("user", "bkthomps")][..];
    let second = &[("key_2", "value_2"), ("user", "bkthomps")][..];
    let both = request("example7", &[first, second]);
    for _ in 0..10 {
        let r = decide(&set, &store, &both);
        assert_eq!(r.overall_code, Code::Ok);
        // The replaced limit is neither checked nor reported.
        assert_eq!(r.statuses[0].code, Code::Ok);
        assert!(r.statuses[0].current_limit.is_none());
        assert_eq!(
            r.statuses[1]
                .current_limit
                .as_ref()
                .map(|l| l.requests_per_unit),
            Some(10)
        );
    }
    assert_eq!(decide(&set, &store, &both).overall_code, Code::OverLimit);
    // Alone, the first descriptor's own 5/s limit was never touched.
    let alone = request("example7", &[first]);
    for _ in 0..5 {
        assert_eq!(decide(&set, &store, &alone).overall_code, Code::Ok);
    }
    assert_eq!(decide(&set, &store, &alone).overall_code, Code::OverLimit);
}

#[test]
fn shadow_mode_counts_and_reports_but_never_refuses() {
    let set = rules(
        r#"
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit: {requests_per_unit: 1, unit: second}
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit: {requests_per_unit: 1, unit: second}
"#,
    );
    let (store, _clock) = store_at(0);
    let a = request("example6", &[&[("service", "auth"), ("user", "user-a")]]);
    assert_eq!(codes(&decide(&set, &store, &a)), [Code::Ok]);
    let r = decide(&set, &store, &a);
    assert_eq!(r.overall_code, Code::Ok);
    // Over, and answered OK as envoyproxy/ratelimit answers; counted for the metrics.
    assert_eq!(codes(&r), [Code::Ok]);
    assert_eq!(r.statuses[0].limit_remaining, 0);
    assert_eq!(r.shadow_over_limit, 1);
    assert_eq!(decide(&set, &store, &a).shadow_over_limit, 1);
    let b = request("example6", &[&[("service", "auth"), ("user", "user-b")]]);
    decide(&set, &store, &b);
    assert_eq!(decide(&set, &store, &b).overall_code, Code::OverLimit);
}

#[test]
fn unlimited_is_ok_and_never_counted() {
    let set = rules(
        r#"
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    unlimited: true
  - key: other
    rate_limit: {unit: minute, requests_per_unit: 1}
"#,
    );
    let (store, _clock) = store_at(0);
    let req = request("internal", &[&[("ldap", "x")], &[("azure", "y")]]);
    for _ in 0..3 {
        let r = decide(&set, &store, &req);
        assert_eq!(r.overall_code, Code::Ok);
        for s in &r.statuses {
            assert_eq!(s.code, Code::Ok);
            assert_eq!(s.limit_remaining, u32::MAX);
            assert!(s.current_limit.is_none());
        }
    }
    assert_eq!(store.stats().keys, 0);
    assert!(set
        .lookup("internal", &entries(&[("ldap", "x")]))
        .is_some_and(Rule::is_unlimited));
}

#[test]
fn an_unlimited_limit_can_replace_another() {
    let set = rules(
        r#"
domain: d
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: second, requests_per_unit: 1}
  - key: vip
    rate_limit:
      unlimited: true
      replaces: [{name: per_user}]
"#,
    );
    let (store, _clock) = store_at(0);
    let req = request("d", &[&[("user", "u")], &[("vip", "yes")]]);
    for _ in 0..3 {
        assert_eq!(decide(&set, &store, &req).overall_code, Code::Ok);
    }
}

#[test]
fn hits_addend_per_request_and_per_descriptor() {
    let set = rules(MESSAGING);
    let (store, _clock) = store_at(0);
    let mut req = request("messaging", &[&[("to_number", "1")], &[("to_number", "2")]]);
    req.hits_addend = 40;
    req.descriptors[1].hits_addend = Some(60);
    let r = decide(&set, &store, &req);
    assert_eq!(
        r.statuses
            .iter()
            .map(|s| s.limit_remaining)
            .collect::<Vec<_>>(),
        [60, 40]
    );
    // A zero per-descriptor addend reads without counting.
    req.descriptors[1].hits_addend = Some(0);
    let r = decide(&set, &store, &req);
    assert_eq!(
        r.statuses
            .iter()
            .map(|s| s.limit_remaining)
            .collect::<Vec<_>>(),
        [20, 40]
    );
    // Over the limit: nothing is taken, what is left is reported.
    req.hits_addend = 21;
    let r = decide(&set, &store, &req);
    assert_eq!(codes(&r), [Code::OverLimit, Code::Ok]);
    assert_eq!(r.statuses[0].limit_remaining, 20);
    assert_eq!(r.overall_code, Code::OverLimit);
}

#[test]
fn month_and_year_are_30_and_365_day_epoch_windows() {
    let set = rules(
        r#"
domain: d
descriptors:
  - key: m
    rate_limit: {unit: Month, requests_per_unit: 2}
  - key: y
    rate_limit: {unit: YEAR, requests_per_unit: 1}
"#,
    );
    let month = 30 * 86_400;
    let m = set.lookup("d", &entries(&[("m", "x")])).expect("rule");
    assert_eq!(m.quota(), Some((2, Unit::Month)));
    assert_eq!(
        m.rls_limit().map(|l| (l.requests_per_unit, l.unit)),
        Some((2, Unit::Month))
    );
    let (store, clock) = store_at(month * 7 + 5);
    let req = request("d", &[&[("m", "x")]]);
    assert_eq!(decide(&set, &store, &req).overall_code, Code::Ok);
    let r = decide(&set, &store, &req);
    assert_eq!(r.overall_code, Code::Ok);
    assert_eq!(
        r.statuses[0].duration_until_reset,
        Some(Duration::from_secs(month - 5))
    );
    assert_eq!(decide(&set, &store, &req).overall_code, Code::OverLimit);
    clock.set(Nanos::from_secs(month * 8));
    assert_eq!(decide(&set, &store, &req).overall_code, Code::Ok);
    let y = set.lookup("d", &entries(&[("y", "x")])).expect("rule");
    assert_eq!(
        y.algorithm().map(|a| a.quota()),
        Some(Some((1.0, Duration::from_secs(365 * 86_400))))
    );
    assert_eq!(Unit::from_name("WeEk").ok(), Some(Unit::Week));
    assert_eq!(
        Unit::Week.duration(),
        floodgate::algorithm::fixed_window::Unit::Week.duration()
    );
}

#[test]
fn a_floodgate_algorithm_with_a_burst_replaces_the_fixed_window() {
    let set = rules(
        r#"
domain: d
descriptors:
  - key: api_key
    rate_limit:
      name: keyed
      algorithm: token_bucket
      rate: 2
      capacity: 4
  - key: login
    rate_limit: {algorithm: sliding_log, limit: 5, window: 1m}
"#,
    );
    let rule = set
        .lookup("d", &entries(&[("api_key", "k")]))
        .expect("rule");
    assert_eq!(rule.algorithm().map(Algorithm::name), Some("token_bucket"));
    assert_eq!(rule.quota(), Some((2, Unit::Second)));
    assert_eq!(rule.name(), Some("keyed"));
    let login = set.lookup("d", &entries(&[("login", "u")])).expect("rule");
    assert_eq!(login.quota(), Some((5, Unit::Minute)));
    let (store, clock) = store_at(0);
    let req = request("d", &[&[("api_key", "k")]]);
    for _ in 0..4 {
        assert_eq!(decide(&set, &store, &req).overall_code, Code::Ok);
    }
    assert_eq!(decide(&set, &store, &req).overall_code, Code::OverLimit);
    clock.advance(Duration::from_millis(500));
    assert_eq!(decide(&set, &store, &req).overall_code, Code::Ok);
}

#[test]
fn json_round_trip_through_a_decision() {
    let set = rules(MESSAGING);
    let (store, _clock) = store_at(86_400 * 3);
    let req = rls_request_from_json(&json!({
        "domain": "messaging",
        "descriptors": [{"entries": [{"key": "to_number", "value": "5"}]}],
        "hitsAddend": 100
    }))
    .expect("valid");
    let answer = rls_response_to_json(&decide(&set, &store, &req));
    assert_eq!(
        answer,
        json!({"overallCode": "OK", "statuses": [{
            "code": "OK",
            "currentLimit": {"requestsPerUnit": 100, "unit": "DAY"},
            "durationUntilReset": "86400s"
        }]})
    );
}

/// envoyproxy/ratelimit counts a request against every descriptor's limit, even when another
/// descriptor refuses it; `all_or_nothing: true` makes a refused request count nothing there,
/// including when a `requests_per_unit: 0` descriptor blocks it.
#[test]
fn all_or_nothing_descriptors_count_nothing_for_refused_requests() {
    let yaml = |all_or_nothing: bool| {
        format!(
            r#"
domain: api
descriptors:
  - key: user
    all_or_nothing: {all_or_nothing}
    rate_limit: {{ unit: hour, requests_per_unit: 10 }}
  - key: path
    value: /search
    rate_limit: {{ unit: hour, requests_per_unit: 1 }}
  - key: path
    value: /blocked
    rate_limit: {{ unit: hour, requests_per_unit: 0 }}
"#
        )
    };
    for all_or_nothing in [false, true] {
        let set = rules(&yaml(all_or_nothing));
        let (store, _clock) = store_at(0);
        let search = request("api", &[&[("user", "alice")], &[("path", "/search")]]);
        let blocked = request("api", &[&[("user", "alice")], &[("path", "/blocked")]]);
        let alone = request("api", &[&[("user", "alice")]]);
        assert_eq!(decide(&set, &store, &search).overall_code, Code::Ok);
        let refused = decide(&set, &store, &search);
        assert_eq!(codes(&refused), [Code::Ok, Code::OverLimit]);
        let refused = decide(&set, &store, &blocked);
        assert_eq!(codes(&refused), [Code::Ok, Code::OverLimit]);
        // alice used 1 of 10 (the allowed request), plus the two refused ones without
        // all_or_nothing; this request takes one more.
        let left = decide(&set, &store, &alone).statuses[0].limit_remaining;
        assert_eq!(left, if all_or_nothing { 8 } else { 6 }, "{all_or_nothing}");
    }
}
