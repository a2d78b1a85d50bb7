//! envoyproxy/ratelimit's service tests at its head (f2fb157), ported: the quota-mode and
//! dynamic-metadata cases of `test/service/ratelimit_test.go` and the cases of
//! `src/service/ratelimit_test.go`'s `TestRatelimitToMetadata`. Each test names the one it
//! ports. Upstream's tests hand the service the statuses of a mocked cache; here each
//! descriptor is first counted to the status that cache answers (a full window for
//! `OVER_LIMIT`, the count that leaves the same `limit_remaining` for `OK`), then the same
//! request is decided, and the answer compared: every status's code, limit and remaining, the
//! overall code, and the dynamic metadata. The windows run on a manual clock; the cases that
//! need the global `SHADOW_MODE`, which the service applies after the rules, run on a
//! [`Server`] over day-long windows instead of upstream's minutes, so that no window can end
//! in the middle of a case.

use floodgate::algorithm::fixed_window::Unit;
use floodgate_service::config::envoy::compile_file;
use floodgate_service::config::Config;
use floodgate_service::descriptors::RuleSet;
use floodgate_service::metrics::Endpoint;
use floodgate_service::rls::{Code, RlsRequest, RlsResponse};
use floodgate_service::service::Server;
use serde_json::{json, Value};

use crate::rules::{decide, request, store_at, TestStore};

/// Domain `quota-domain` with one descriptor per `(key, value, requests per minute,
/// quota_mode, metadata)`.
fn domain(descriptors: &[(&str, &str, u32, bool, Option<Value>)]) -> String {
    named_domain("quota-domain", descriptors)
}

/// [`domain`], named `name`.
fn named_domain(name: &str, descriptors: &[(&str, &str, u32, bool, Option<Value>)]) -> String {
    let mut yaml = format!("domain: {name}\ndescriptors:\n");
    for (key, value, limit, quota, metadata) in descriptors {
        yaml.push_str(&format!(
            "  - key: {key}\n    value: {value}\n    quota_mode: {quota}\n    rate_limit: {{unit: minute, requests_per_unit: {limit}}}\n"
        ));
        if let Some(metadata) = metadata {
            yaml.push_str(&format!("    metadata: {metadata}\n"));
        }
    }
    yaml
}

/// The rules of `yaml`, every descriptor in quota mode when `global_quota` (upstream's
/// `QUOTA_MODE`), with dynamic metadata when `metadata` (`RESPONSE_DYNAMIC_METADATA`).
fn rules(yaml: &str, global_quota: bool, metadata: bool) -> RuleSet {
    let mut set = compile_file(yaml).unwrap_or_else(|e| panic!("{e}"));
    set.set_quota_mode(global_quota);
    set.set_response_dynamic_metadata(metadata);
    set
}

/// Counts `hits` single hits of descriptor `pair` alone, as earlier requests would have.
fn fill(set: &RuleSet, store: &TestStore, pair: (&str, &str), hits: u32) {
    let one = request("quota-domain", &[&[pair]]);
    for _ in 0..hits {
        decide(set, store, &one);
    }
}

/// The request of upstream's tests: one descriptor per pair, one hit each.
fn two(a: (&str, &str), b: (&str, &str)) -> RlsRequest {
    request("quota-domain", &[&[a], &[b]])
}

/// Each status as `(code, requests_per_unit, limit_remaining)`.
fn statuses(response: &RlsResponse) -> Vec<(Code, u32, u32)> {
    response
        .statuses
        .iter()
        .map(|s| {
            let limit = s.current_limit.as_ref().expect("a limit");
            assert_eq!(limit.unit, Unit::Minute);
            (s.code, limit.requests_per_unit, s.limit_remaining)
        })
        .collect()
}

const OVER: Code = Code::OverLimit;
const OK: Code = Code::Ok;

/// Ports `TestServiceGlobalQuotaMode`: with QUOTA_MODE, both descriptors over their limits
/// is OVER_LIMIT.
#[test]
fn global_quota_mode_refuses_when_every_descriptor_is_over() {
    let set = rules(
        &domain(&[
            ("foo", "bar", 10, false, None),
            ("hello", "world", 5, false, None),
        ]),
        true,
        false,
    );
    let (store, _clock) = store_at(60_000);
    fill(&set, &store, ("foo", "bar"), 10);
    fill(&set, &store, ("hello", "world"), 5);
    let r = decide(&set, &store, &two(("foo", "bar"), ("hello", "world")));
    assert_eq!(r.overall_code, OVER);
    assert_eq!(statuses(&r), [(OVER, 10, 0), (OVER, 5, 0)]);
    assert!(r.statuses.iter().all(|s| s.quota_mode));
}

/// The metadata's `metadata` field.
fn passed_metadata(response: &RlsResponse) -> Value {
    response
        .dynamic_metadata
        .as_ref()
        .expect("dynamic metadata")
        .get("metadata")
        .cloned()
        .unwrap_or(Value::Null)
}

/// Ports `TestMetadataReturnedForPassedDescriptors`: the descriptor over its limit gives
/// no metadata; the one that passed does.
#[test]
fn metadata_comes_from_the_descriptors_that_passed() {
    let set = rules(
        &domain(&[
            (
                "regular",
                "limit",
                10,
                false,
                Some(json!({"name": "service_1"})),
            ),
            (
                "quota",
                "limit",
                5,
                true,
                Some(json!({"name": "service_2"})),
            ),
        ]),
        true,
        true,
    );
    let (store, _clock) = store_at(60_000);
    fill(&set, &store, ("regular", "limit"), 4);
    fill(&set, &store, ("quota", "limit"), 5);
    let r = decide(&set, &store, &two(("regular", "limit"), ("quota", "limit")));
    assert_eq!(r.overall_code, OK);
    assert_eq!(statuses(&r), [(OK, 10, 5), (OVER, 5, 0)]);
    assert_eq!(passed_metadata(&r), json!({"name": "service_1"}));
}

/// Ports `TestMetadataReturnedForAllPassedDescriptors`: every passed descriptor's metadata,
/// merged. (Upstream's mocked cache answers 6 remaining of a limit of 5, which no count
/// can give; the second descriptor has 4 left here.)
#[test]
fn metadata_of_every_passed_descriptor_is_merged() {
    let set = rules(
        &domain(&[
            (
                "regular",
                "limit",
                10,
                true,
                Some(json!({"name": "service_1"})),
            ),
            (
                "quota",
                "limit",
                5,
                true,
                Some(json!({"some_other_name": "service_2"})),
            ),
        ]),
        true,
        true,
    );
    let (store, _clock) = store_at(60_000);
    fill(&set, &store, ("regular", "limit"), 4);
    let r = decide(&set, &store, &two(("regular", "limit"), ("quota", "limit")));
    assert_eq!(r.overall_code, OK);
    assert_eq!(statuses(&r), [(OK, 10, 5), (OK, 5, 4)]);
    assert_eq!(
        passed_metadata(&r),
        json!({"name": "service_1", "some_other_name": "service_2"})
    );
}

/// Ports `TestOverlappingMetadataReturnsTheFirstValue`: on a shared key the first
/// descriptor's value wins.
#[test]
fn overlapping_metadata_keeps_the_first_value() {
    let set = rules(
        &domain(&[
            (
                "regular",
                "limit",
                10,
                true,
                Some(json!({"name": "service_1"})),
            ),
            (
                "quota",
                "limit",
                5,
                true,
                Some(json!({"name": "service_2"})),
            ),
        ]),
        true,
        true,
    );
    let (store, _clock) = store_at(60_000);
    let r = decide(&set, &store, &two(("regular", "limit"), ("quota", "limit")));
    assert_eq!(r.overall_code, OK);
    assert_eq!(passed_metadata(&r), json!({"name": "service_1"}));
}

/// Two descriptors `key=limit`, each `(key, requests a minute, quota_mode)`, filled to
/// `fill_to` hits before the request of both: the answer to that request.
fn after_filling(descriptors: [(&str, u32, bool); 2], fill_to: (u32, u32)) -> RlsResponse {
    let [(a, a_limit, a_quota), (b, b_limit, b_quota)] = descriptors;
    let set = rules(
        &domain(&[
            (a, "limit", a_limit, a_quota, None),
            (b, "limit", b_limit, b_quota, None),
        ]),
        false,
        false,
    );
    let (store, _clock) = store_at(60_000);
    fill(&set, &store, (a, "limit"), fill_to.0);
    fill(&set, &store, (b, "limit"), fill_to.1);
    decide(&set, &store, &two((a, "limit"), (b, "limit")))
}

/// The per-descriptor cases: upstream's regular limit (5 a minute) and quota-mode one (3 a
/// minute), filled to `(regular, quota)`.
fn per_descriptor(fill_to: (u32, u32)) -> RlsResponse {
    after_filling([("regular", 5, false), ("quota", 3, true)], fill_to)
}

/// Ports `TestServicePerDescriptorQuotaMode`: a regular limit over refuses, whatever the
/// quota-mode one says.
#[test]
fn a_regular_limit_over_refuses_beside_a_quota_within() {
    let r = per_descriptor((5, 2));
    assert_eq!(statuses(&r), [(OVER, 5, 0), (OK, 3, 0)]);
    assert_eq!(r.overall_code, OVER);
    assert_eq!(
        r.statuses.iter().map(|s| s.quota_mode).collect::<Vec<_>>(),
        [false, true]
    );
}

/// Ports `TestServiceMixedPerDescriptorModes`: the only quota-mode descriptor over its
/// limit is every quota-mode descriptor over: OVER_LIMIT.
#[test]
fn every_quota_descriptor_over_refuses() {
    let r = per_descriptor((4, 3));
    assert_eq!(statuses(&r), [(OK, 5, 0), (OVER, 3, 0)]);
    assert_eq!(r.overall_code, OVER);
}

/// Ports `TestServiceMixedPerDescriptorModesUnderLimit`.
#[test]
fn nothing_over_is_ok() {
    let r = per_descriptor((4, 2));
    assert_eq!(statuses(&r), [(OK, 5, 0), (OK, 3, 0)]);
    assert_eq!(r.overall_code, OK);
}

/// The quota-only cases: two quota-mode limits (5 and 3 a minute), filled to `fill_to`.
fn quota_only(fill_to: (u32, u32)) -> RlsResponse {
    after_filling([("quota1", 5, true), ("quota2", 3, true)], fill_to)
}

/// Ports `TestServiceQuotaModeOnlyAllOverTheLimit`.
#[test]
fn all_quota_descriptors_over_refuse() {
    let r = quota_only((5, 3));
    assert_eq!(statuses(&r), [(OVER, 5, 0), (OVER, 3, 0)]);
    assert_eq!(r.overall_code, OVER);
}

/// Ports `TestServiceQuotaModeOnlySomeOverTheLimit`: one quota with room lets it through,
/// the other's status still saying OVER_LIMIT.
#[test]
fn one_quota_with_room_lets_the_request_through() {
    let r = quota_only((5, 2));
    assert_eq!(statuses(&r), [(OVER, 5, 0), (OK, 3, 0)]);
    assert_eq!(r.overall_code, OK);
}

/// The global shadow mode cases, on a server (the service turns the answer `OK`): limits 5
/// and 3 a day, the first in quota mode when `regular_is_quota`, the second always, both
/// filled past their limit; the answer and the `global_shadow_mode` count.
fn under_global_shadow_mode(regular_is_quota: bool) -> (RlsResponse, u64) {
    let yaml = format!(
        "rls: {{shadow_mode: true}}\ndomains:\n  - domain: quota-domain\n    descriptors:\n      - key: regular\n        value: limit\n        quota_mode: {regular_is_quota}\n        rate_limit: {{unit: day, requests_per_unit: 5}}\n      - key: quota\n        value: limit\n        quota_mode: true\n        rate_limit: {{unit: day, requests_per_unit: 3}}\n"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let server = Server::new(Config::from_yaml_str(&yaml).unwrap(), None, None).unwrap();
        for (pair, hits) in [(("regular", "limit"), 5), (("quota", "limit"), 3)] {
            let one = request("quota-domain", &[&[pair]]);
            for _ in 0..hits {
                server
                    .should_rate_limit(&one, Endpoint::Grpc)
                    .await
                    .unwrap();
            }
        }
        let r = server
            .should_rate_limit(
                &two(("regular", "limit"), ("quota", "limit")),
                Endpoint::Grpc,
            )
            .await
            .unwrap();
        (r, server.metrics().rls_totals().global_shadow_mode)
    })
}

/// Ports `TestServiceQuotaModeWithShadowMode`: every quota-mode descriptor over, and the
/// global shadow mode answers OK, counted once.
#[test]
fn global_shadow_mode_answers_ok_over_the_quota_rule() {
    let (r, shadowed) = under_global_shadow_mode(true);
    assert_eq!(
        r.statuses.iter().map(|s| s.code).collect::<Vec<_>>(),
        [OVER, OVER]
    );
    assert_eq!(r.overall_code, OK);
    assert_eq!(shadowed, 1);
}

/// Ports `TestServiceMixedModeWithShadowMode`.
#[test]
fn global_shadow_mode_answers_ok_over_a_regular_limit_too() {
    let (r, shadowed) = under_global_shadow_mode(false);
    assert_eq!(
        r.statuses.iter().map(|s| s.code).collect::<Vec<_>>(),
        [OVER, OVER]
    );
    assert_eq!(r.overall_code, OK);
    assert_eq!(shadowed, 1);
}

/// Ports the four cases of `TestRatelimitToMetadata` (src/service/ratelimit_test.go): the
/// whole dynamic metadata of an answer.
#[test]
fn the_whole_dynamic_metadata_is_as_upstream_writes_it() {
    let metadata = |r: RlsResponse| Value::Object(r.dynamic_metadata.expect("metadata"));
    let (store, _clock) = store_at(60_000);

    // "Single descriptor with single entry, no quota violations": nothing matched.
    let set = rules(&named_domain("quota-domain", &[]), false, true);
    let r = decide(
        &set,
        &store,
        &request("fake-domain", &[&[("key1", "val1")]]),
    );
    assert_eq!(
        metadata(r),
        json!({"domain": "fake-domain", "descriptors": [{"entries": ["key1=val1"]}]})
    );

    // "Single descriptor with quota mode violation": it passed, with its metadata.
    let one = [(
        "quota_key",
        "quota_val",
        10,
        true,
        Some(json!({"name": "service_1"})),
    )];
    let set = rules(&named_domain("quota-domain", &one), false, true);
    let r = decide(
        &set,
        &store,
        &request("quota-domain", &[&[("quota_key", "quota_val")]]),
    );
    assert_eq!(
        metadata(r),
        json!({
            "domain": "quota-domain",
            "descriptors": [{"entries": ["quota_key=quota_val"]}],
            "metadata": {"name": "service_1"}
        })
    );

    // "Multiple descriptors with mixed quota violations": the regular one is over (not
    // passed), the two quota-mode ones passed; the first of them wins.
    let mixed = [
        (
            "regular_key",
            "regular_val",
            1,
            false,
            Some(json!({"name": "service_1"})),
        ),
        (
            "quota_key",
            "quota_val",
            10,
            true,
            Some(json!({"name": "service_2"})),
        ),
        (
            "another_quota",
            "another_val",
            10,
            true,
            Some(json!({"name": "service_3"})),
        ),
    ];
    let set = rules(&named_domain("mixed-domain", &mixed), false, true);
    let one = request("mixed-domain", &[&[("regular_key", "regular_val")]]);
    decide(&set, &store, &one);
    let r = decide(
        &set,
        &store,
        &request(
            "mixed-domain",
            &[
                &[("regular_key", "regular_val")],
                &[("quota_key", "quota_val")],
                &[("another_quota", "another_val")],
            ],
        ),
    );
    assert_eq!(r.overall_code, OVER);
    assert_eq!(
        metadata(r),
        json!({
            "domain": "mixed-domain",
            "descriptors": [
                {"entries": ["regular_key=regular_val"]},
                {"entries": ["quota_key=quota_val"]},
                {"entries": ["another_quota=another_val"]}
            ],
            "metadata": {"name": "service_2"}
        })
    );

    // "Request with hits addend": the request's hitsAddend, no metadata to merge.
    let set = rules(
        &named_domain("addend-domain", &[("test_key", "test_val", 10, true, None)]),
        false,
        true,
    );
    let mut addend = request("addend-domain", &[&[("test_key", "test_val")]]);
    addend.hits_addend = 5;
    let r = decide(&set, &store, &addend);
    assert_eq!(
        metadata(r),
        json!({
            "domain": "addend-domain",
            "descriptors": [{"entries": ["test_key=test_val"]}],
            "hitsAddend": 5
        })
    );
}
