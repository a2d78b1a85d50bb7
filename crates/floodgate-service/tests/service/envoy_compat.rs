//! envoyproxy/ratelimit compatibility: the cases of upstream's configuration tests (which files
//! load or are refused, with which error; which descriptor gets which limit; wildcard
//! precedence; `share_threshold` counters; shadow mode; `replaces`; `unlimited`; `metadata`),
//! run on Floodgate's own fixtures in `tests/fixtures/envoy/`. The store runs on a manual
//! clock.

use floodgate::algorithm::fixed_window::Unit;
use std::path::PathBuf;

use floodgate_service::config::{Config, ConfigFileError};
use floodgate_service::descriptors::{Rule, RuleSet};
use floodgate_service::rls::json::rls_response_to_json;
use floodgate_service::rls::{Code, RlsDescriptor};
use serde_json::json;

use crate::rules::{decide, entries, request, store_at};

fn store() -> crate::rules::TestStore {
    store_at(1_000).0
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/envoy")).join(name)
}

fn load(name: &str) -> Result<RuleSet, ConfigFileError> {
    Config::load(fixture(name))?.rule_set()
}

fn rules(name: &str) -> RuleSet {
    load(name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The limit a descriptor gets, as `(requests_per_unit, unit)`.
fn limit(set: &RuleSet, domain: &str, pairs: &[(&str, &str)]) -> Option<(u32, Unit)> {
    set.lookup(domain, &entries(pairs)).and_then(Rule::quota)
}

/// The counter a descriptor is counted in (`None` if no rule applies).
fn counter(set: &RuleSet, domain: &str, pairs: &[(&str, &str)]) -> Option<String> {
    let descriptor = RlsDescriptor {
        negative_hits: false,
        entries: entries(pairs),
        hits_addend: None,
        limit: None,
    };
    let found = set.lookup_match(domain, &descriptor.entries)?;
    Some(found.counter_key(domain, &descriptor))
}

#[test]
fn every_accepted_fixture_loads() {
    for name in [
        "basic.yaml",
        "shadow_mode.yaml",
        "wildcard.yaml",
        "share_threshold.yaml",
        "metadata.yaml",
        "replaces.yaml",
    ] {
        rules(name);
    }
}

#[test]
fn refused_fixtures_name_the_problem() {
    // (file, the error's path or `None` for a YAML error, what the message says)
    let cases: &[(&str, Option<&str>, &str)] = &[
        (
            "bad_unit.yaml",
            Some("descriptors[0].rate_limit.unit"),
            "unknown unit `fortnight`",
        ),
        (
            "bad_yaml.yaml",
            None,
            "bad_yaml.yaml:3: invalid configuration: not YAML",
        ),
        ("empty_domain.yaml", Some("domain"), "non-empty name"),
        (
            "empty_key.yaml",
            Some("descriptors[0].key"),
            "non-empty key",
        ),
        (
            "duplicate_key.yaml",
            Some("descriptors[1]"),
            "key `client` with value `partner` is also descriptors[0]",
        ),
        (
            "misspelled_descriptor_key.yaml",
            None,
            "unknown field `ratelimits`",
        ),
        (
            "misspelled_rate_limit_key.yaml",
            None,
            "unknown field `requests_per_hour`",
        ),
        (
            "non_map_list.yaml",
            Some("descriptors[0]"),
            "a list entry must be a mapping (`key: …`), found `client`",
        ),
        (
            "non_string_key.yaml",
            Some("7"),
            "a key must be a string, found `7`",
        ),
        (
            "replaces_empty.yaml",
            Some("descriptors[0].rate_limit.replaces[0].name"),
            "needs the name",
        ),
        (
            "replaces_self.yaml",
            Some("descriptors[0].rate_limit.replaces[0].name"),
            "`mine` cannot replace itself",
        ),
        (
            "unlimited_with_unit.yaml",
            Some("descriptors[0].rate_limit.unit"),
            "an `unlimited` limit takes no `unit`",
        ),
        (
            "share_threshold_without_wildcard.yaml",
            Some("descriptors[0].share_threshold"),
            "only applies to a wildcard value",
        ),
    ];
    for (file, path, needle) in cases {
        let error = match load(&format!("refused/{file}")) {
            Ok(_) => panic!("{file} loaded"),
            Err(e) => e,
        };
        // A value's error is placed in the file, at its line when the file has the entry.
        let inner = match &error {
            ConfigFileError::InFile {
                file: Some(f),
                line,
                error,
            } => {
                assert_eq!(
                    line.is_some(),
                    *file != "empty_domain.yaml",
                    "{file}: {error}"
                );
                assert!(f.ends_with(file), "{file}: {f:?}");
                error.as_ref()
            }
            other => other,
        };
        match (inner, path) {
            (ConfigFileError::Invalid { path: got, message }, Some(path)) => {
                assert_eq!(got, path, "{file}: {error}");
                assert!(
                    message.contains(needle),
                    "{file}: {message:?} lacks {needle:?}"
                );
            }
            (
                ConfigFileError::Yaml {
                    file: Some(f),
                    line: Some(_),
                    ..
                },
                None,
            ) => {
                assert!(f.ends_with(file), "{file}: {f:?}");
                // What it says, after the file and the line (`file:3: …`).
                let said = error.to_string();
                assert!(said.contains(needle), "{file}: {said:?} lacks {needle:?}");
            }
            _ => panic!("{file}: unexpected error {error:?}"),
        }
    }
    // Every refused fixture is covered above.
    let on_disk = std::fs::read_dir(fixture("refused"))
        .expect("the refused fixtures")
        .count();
    assert_eq!(on_disk, cases.len());
}

#[test]
fn basic_limits_follow_the_match_rules() {
    let set = rules("basic.yaml");
    let d = "shop";
    assert_eq!(limit(&set, "elsewhere", &[("client", "x")]), None);
    assert_eq!(limit(&set, d, &[]), None);
    // A value with no limit of its own; a value not configured under a key without default.
    assert_eq!(limit(&set, d, &[("tenant", "acme")]), None);
    assert_eq!(limit(&set, d, &[("tenant", "other")]), None);
    // Children: the key-only default and the specific value.
    assert_eq!(
        limit(&set, d, &[("tenant", "acme"), ("route", "home")]),
        Some((4, Unit::Second))
    );
    assert_eq!(
        limit(&set, d, &[("tenant", "acme"), ("route", "checkout")]),
        Some((8, Unit::Second))
    );
    // More entries than the configured depth match nothing.
    assert_eq!(
        limit(&set, d, &[("client", "partner"), ("route", "x")]),
        None
    );
    assert_eq!(
        limit(&set, d, &[("plan", "gold"), ("feature", "other")]),
        None
    );
    assert_eq!(
        limit(&set, d, &[("plan", "gold"), ("feature", "export")]),
        Some((30, Unit::Day))
    );
    assert_eq!(limit(&set, d, &[("plan", "gold")]), Some((12, Unit::Day)));
    // Key-only default, a specific value, and a value listed without a limit.
    assert_eq!(
        limit(&set, d, &[("client", "anyone")]),
        Some((40, Unit::Minute))
    );
    assert_eq!(
        limit(&set, d, &[("client", "partner")]),
        Some((90, Unit::Minute))
    );
    assert!(set.lookup(d, &entries(&[("client", "internal")])).is_none());
    assert_eq!(limit(&set, d, &[("region", "eu")]), Some((3, Unit::Hour)));
    let named = set.lookup(d, &entries(&[("account", "a1")])).expect("rule");
    assert_eq!(named.name(), Some("per_account_daily"));
    assert_eq!(named.quota(), Some((2, Unit::Day)));
    let unlimited = set
        .lookup(d, &entries(&[("healthcheck", "lb")]))
        .expect("rule");
    assert!(unlimited.is_unlimited());
    // detailed_metric changes nothing but statistics: one limit, a counter per value.
    assert_eq!(
        limit(&set, d, &[("device", "phone")]),
        Some((55, Unit::Minute))
    );
    assert_eq!(
        limit(&set, d, &[("device", "tablet")]),
        Some((55, Unit::Minute))
    );
    assert_ne!(
        counter(&set, d, &[("device", "phone")]),
        counter(&set, d, &[("device", "tablet")])
    );
    // Units are case-insensitive, month and year included.
    assert_eq!(
        limit(&set, d, &[("session", "s")]),
        Some((1000, Unit::Month))
    );
    assert_eq!(limit(&set, d, &[("license", "l")]), Some((5, Unit::Year)));
}

/// Upstream's `TestBasicConfig`, `TestDomainMerge` and `TestMetadata` ask for the limit of a
/// descriptor without entries, in a known domain and an unknown one: none. The same request
/// through a whole decision (gRPC's validation, `/json`'s reading) is OK with no limit, and
/// counts `domain_not_found` only for the unknown domain, as upstream's statistics do.
#[test]
fn a_descriptor_without_entries_has_no_limit_in_any_domain() {
    use floodgate_service::descriptors::stats::DescriptorStats;
    use floodgate_service::rls::json::rls_request_from_json;
    let set = rules("basic.yaml");
    let store = store();
    for domain in ["shop", "elsewhere"] {
        let request =
            rls_request_from_json(&json!({"domain": domain, "descriptors": [{"entries": []}, {}]}))
                .expect("a descriptor without entries is taken");
        request.validate().expect("and valid");
        let stats = DescriptorStats::new(100, 0.8);
        let response =
            floodgate::blocking::block_on(set.matched(&request).decide(&store, Some(&stats)))
                .unwrap();
        assert_eq!(response.overall_code, Code::Ok, "{domain}");
        assert!(response
            .statuses
            .iter()
            .all(|s| s.code == Code::Ok && s.current_limit.is_none()));
        let not_found: u64 = stats
            .domains_not_found_snapshot()
            .iter()
            .map(|(_, n)| n)
            .sum();
        assert_eq!(not_found, if domain == "shop" { 0 } else { 2 }, "{domain}");
    }
}

#[test]
fn unlimited_is_ok_and_uncounted() {
    let set = rules("basic.yaml");
    let store = store();
    for _ in 0..3 {
        let response = decide(&set, &store, &request("shop", &[&[("healthcheck", "lb")]]));
        assert_eq!(response.overall_code, Code::Ok);
        assert_eq!(response.statuses[0].current_limit, None);
        assert_eq!(response.statuses[0].limit_remaining, u32::MAX);
    }
}

#[test]
fn shadow_mode_counts_but_answers_ok() {
    let set = rules("shadow_mode.yaml");
    for (pairs, shadow) in [
        (&[("tenant", "acme"), ("route", "home")][..], false),
        (&[("tenant", "acme"), ("route", "search")][..], true),
        (&[("client", "anyone")][..], true),
        (&[("client", "partner")][..], false),
    ] {
        let rule = set.lookup("shop", &entries(pairs)).expect("rule");
        assert_eq!(rule.shadow_mode(), shadow, "{pairs:?}");
    }
    let store = store();
    let shadowed = request("shop", &[&[("client", "anyone")]]);
    assert_eq!(decide(&set, &store, &shadowed).shadow_over_limit, 0);
    let over = decide(&set, &store, &shadowed);
    assert_eq!(over.overall_code, Code::Ok);
    assert_eq!(over.statuses[0].code, Code::Ok);
    assert_eq!(over.statuses[0].limit_remaining, 0);
    assert_eq!(over.shadow_over_limit, 1);
    let enforced = request("shop", &[&[("client", "partner")]]);
    decide(&set, &store, &enforced);
    assert_eq!(
        decide(&set, &store, &enforced).overall_code,
        Code::OverLimit
    );
}

#[test]
fn wildcards_match_anywhere_after_exact_values_and_before_key_only() {
    let set = rules("wildcard.yaml");
    let d = "files";
    let six = Some((6, Unit::Minute));
    // A trailing `*`: every value with the prefix gets the same limit, each its own counter.
    assert_eq!(limit(&set, d, &[("bucket", "logs-1")]), six);
    assert_eq!(limit(&set, d, &[("bucket", "logs-")]), six);
    assert_eq!(limit(&set, d, &[("bucket", "metrics")]), None);
    assert_ne!(
        counter(&set, d, &[("bucket", "logs-1")]),
        counter(&set, d, &[("bucket", "logs-2")])
    );
    // A plain value is not a prefix; a key-only descriptor takes every value.
    assert_eq!(limit(&set, d, &[("exactname", "logs1")]), None);
    assert_eq!(limit(&set, d, &[("exactname", "logs")]), six);
    assert_eq!(limit(&set, d, &[("anyname", "a")]), six);
    assert_eq!(
        set.lookup(d, &entries(&[("anyname", "a")]))
            .map(Rule::full_key),
        set.lookup(d, &entries(&[("anyname", "b")]))
            .map(Rule::full_key)
    );
    // A `*` in the middle, and several.
    assert_eq!(limit(&set, d, &[("object", "img01.png")]), six);
    assert_eq!(limit(&set, d, &[("object", "img.png")]), six);
    assert_eq!(limit(&set, d, &[("object", "img01.jpg")]), None);
    let three = Some((3, Unit::Minute));
    assert_eq!(limit(&set, d, &[("route", "v1/users/list")]), three);
    assert_eq!(limit(&set, d, &[("route", "vusers-list")]), three);
    assert_eq!(limit(&set, d, &[("route", "v1/list")]), None);
    assert_eq!(limit(&set, d, &[("route", "v1/users/lists")]), None);
    // Wildcards nested under a value.
    assert_eq!(
        limit(&set, d, &[("team", "core"), ("bucket", "tmp-9")]),
        six
    );
    assert_eq!(
        limit(&set, d, &[("team", "core"), ("bucket", "logs-9")]),
        None
    );
    assert_eq!(
        limit(&set, d, &[("team", "edge"), ("bucket", "tmp-9")]),
        None
    );
}

#[test]
fn share_threshold_values_share_one_counter() {
    let set = rules("share_threshold.yaml");
    let d = "files";
    let same = |a: &[(&str, &str)], b: &[(&str, &str)]| {
        let (a, b) = (counter(&set, d, a), counter(&set, d, b));
        assert!(a.is_some(), "no rule");
        a == b
    };
    assert!(same(&[("doc", "reports/q1")], &[("doc", "reports/q2")]));
    assert_eq!(
        limit(&set, d, &[("doc", "reports/q1")]),
        Some((3, Unit::Minute))
    );
    // Nested under a value.
    assert!(same(
        &[("org", "north"), ("doc", "drafts/a")],
        &[("org", "north"), ("doc", "drafts/b")]
    ));
    // The same key at two levels, both shared.
    assert!(same(
        &[("doc", "archive/x"), ("doc", "year-2020")],
        &[("doc", "archive/y"), ("doc", "year-2021")]
    ));
    // A shared wildcard above a key-only limit: the wildcard's values share, the key-only
    // entry keeps its own value.
    assert!(same(
        &[("api", "v2/a"), ("verb", "GET")],
        &[("api", "v2/b"), ("verb", "GET")]
    ));
    assert!(!same(
        &[("api", "v2/a"), ("verb", "GET")],
        &[("api", "v2/a"), ("verb", "PUT")]
    ));
    assert!(same(
        &[("tenant", "t-1"), ("op", "read")],
        &[("tenant", "t-2"), ("op", "read")]
    ));
    // Shared above, not shared below.
    assert!(same(
        &[("dir", "home/a"), ("file", "notes-1"), ("kind", "k")],
        &[("dir", "home/b"), ("file", "notes-1"), ("kind", "k")]
    ));
    assert!(!same(
        &[("dir", "home/a"), ("file", "notes-1"), ("kind", "k")],
        &[("dir", "home/a"), ("file", "notes-2"), ("kind", "k")]
    ));
    // An exact value wins and keeps its own counter and limit.
    assert_eq!(
        limit(&set, d, &[("sku", "basic1")]),
        Some((2, Unit::Minute))
    );
    assert_eq!(
        limit(&set, d, &[("sku", "basic2")]),
        Some((9, Unit::Minute))
    );
    assert!(same(&[("sku", "basic2")], &[("sku", "basic3")]));
    assert!(!same(&[("sku", "basic1")], &[("sku", "basic2")]));
    // `*` in the middle, and several.
    assert!(same(&[("path", "/v1/items")], &[("path", "/v22/items")]));
    assert_eq!(counter(&set, d, &[("path", "/v1/other")]), None);
    assert!(same(&[("rpc", "pkgAsvcBcall")], &[("rpc", "pkg.svc.call")]));
}

#[test]
fn a_shared_counter_refuses_across_values() {
    let set = rules("share_threshold.yaml");
    let store = store();
    for value in ["reports/a", "reports/b", "reports/c"] {
        let response = decide(&set, &store, &request("files", &[&[("doc", value)]]));
        assert_eq!(response.overall_code, Code::Ok, "{value}");
    }
    let fourth = decide(&set, &store, &request("files", &[&[("doc", "reports/d")]]));
    assert_eq!(fourth.overall_code, Code::OverLimit);
    // The exact value beside a shared wildcard counts apart.
    let exact = decide(&set, &store, &request("files", &[&[("sku", "basic1")]]));
    assert_eq!(exact.statuses[0].limit_remaining, 1);
}

#[test]
fn replaces_drops_the_replaced_limit() {
    let set = rules("replaces.yaml");
    let store = store();
    let both: &[&[(&str, &str)]] = &[&[("user", "u1")], &[("endpoint", "upload"), ("user", "u1")]];
    for _ in 0..3 {
        let response = decide(&set, &store, &request("shop", both));
        assert_eq!(response.overall_code, Code::Ok);
        assert_eq!(response.statuses[0].current_limit, None);
        assert_eq!(
            response.statuses[1]
                .current_limit
                .as_ref()
                .map(|l| l.requests_per_unit),
            Some(5)
        );
    }
    // Alone, the replaced limit applies (one per minute).
    let alone = request("shop", &[&[("user", "u2")]]);
    decide(&set, &store, &alone);
    assert_eq!(decide(&set, &store, &alone).overall_code, Code::OverLimit);
}

#[test]
fn metadata_is_returned_only_when_enabled() {
    let mut set = rules("metadata.yaml");
    let store = store();
    let home = request("shop", &[&[("tenant", "acme"), ("route", "home")]]);
    assert_eq!(decide(&set, &store, &home).dynamic_metadata, None);
    let rule = set
        .lookup("shop", &entries(&[("client", "c")]))
        .expect("rule");
    assert_eq!(
        rule.metadata().map(|m| json!(m)),
        Some(json!({"billing": {"tier": ["standard", "monthly"]}}))
    );

    set.set_response_dynamic_metadata(true);
    // The first limit (1 per second) was used above: the descriptor is over, so its metadata
    // is not offered; the second descriptor's is.
    let mut req = request(
        "shop",
        &[&[("tenant", "acme"), ("route", "home")], &[("client", "c")]],
    );
    req.hits_addend = 1;
    let response = decide(&set, &store, &req);
    let expected = json!({
        "domain": "shop",
        "descriptors": [
            {"entries": ["tenant=acme", "route=home"]},
            {"entries": ["client=c"]}
        ],
        "hitsAddend": 1,
        "metadata": {"billing": {"tier": ["standard", "monthly"]}}
    });
    assert_eq!(
        response.dynamic_metadata.clone().map(|m| json!(m)),
        Some(expected.clone())
    );
    assert_eq!(rls_response_to_json(&response)["dynamicMetadata"], expected);

    // A descriptor without metadata adds none.
    let checkout = request("shop", &[&[("tenant", "acme"), ("route", "checkout")]]);
    let response = decide(&set, &store, &checkout);
    assert_eq!(
        response.dynamic_metadata.map(|m| json!(m)),
        Some(json!({
            "domain": "shop",
            "descriptors": [{"entries": ["tenant=acme", "route=checkout"]}]
        }))
    );
}

#[test]
fn the_native_format_enables_dynamic_metadata() {
    let config = Config::from_yaml_str(
        "response_dynamic_metadata: true\ndomains:\n  - domain: d\n    descriptors:\n      - key: k\n        metadata: {a: 1}\n        rate_limit: {unit: second, requests_per_unit: 1}\n",
    )
    .expect("valid");
    assert!(config
        .rule_set()
        .expect("valid")
        .response_dynamic_metadata());
    let envoy = Config::load(fixture("metadata.yaml")).expect("valid");
    assert!(!envoy.rule_set().expect("valid").response_dynamic_metadata());
}
