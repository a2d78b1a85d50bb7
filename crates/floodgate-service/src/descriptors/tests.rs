use floodgate::algorithm::fixed_window::Unit;
use floodgate::algorithm::spec::AlgorithmSpec;

use super::*;
use crate::rls::entries;

#[test]
fn envoy_quota_picks_the_shortest_unit_with_one_request() {
    let quota = |spec: &str| {
        let spec: AlgorithmSpec = serde_json::from_str(spec).expect("spec");
        envoy_quota(&spec.build().expect("valid"))
    };
    assert_eq!(
        quota(r#"{"algorithm":"gcra","max_burst":1,"count":30,"period":60}"#),
        (30, Unit::Minute)
    );
    assert_eq!(
        quota(r#"{"algorithm":"fixed_window","limit":1,"window":90}"#),
        (40, Unit::Hour)
    );
    assert_eq!(
        quota(r#"{"algorithm":"smooth_bursty","rate":0.5}"#),
        (30, Unit::Minute)
    );
}

#[test]
fn counter_keys_are_unambiguous() {
    let d = |pairs: &[(&str, &str)]| RlsDescriptor {
        negative_hits: false,
        entries: entries(pairs),
        hits_addend: None,
        limit: None,
    };
    assert_ne!(
        counter_key("a", &d(&[("b:c", "d")]), &[]),
        counter_key("a", &d(&[("b", "c:d")]), &[])
    );
    assert_ne!(
        counter_key("a1:", &d(&[("b", "")]), &[]),
        counter_key("a", &d(&[("1:b", "")]), &[])
    );
    // A value sent as is never collides with a shared wildcard's pattern.
    assert_ne!(
        counter_key("a", &d(&[("b", "c*")]), &[]),
        counter_key("a", &d(&[("b", "cd")]), &[(0, "c*")])
    );
    // Values sharing a pattern share the key; other entries keep theirs.
    let shared = |v: &str, w: &str| counter_key("a", &d(&[("b", v), ("u", w)]), &[(0, "c*")]);
    assert_eq!(shared("c1", "x"), shared("c2", "x"));
    assert_ne!(shared("c1", "x"), shared("c1", "y"));
}
