use super::*;
use crate::config::Config;
use crate::proto::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use crate::rlqs::envoy_model::at_once;

const RULES: &str = "\
domains:
  - domain: quota
    descriptors:
      - key: name
        rate_limit: { unit: second, requests_per_unit: 100 }
      - key: open
        rate_limit: { unlimited: true }
      - key: closed
        rate_limit: { unit: minute, requests_per_unit: 0 }
";

fn rules() -> RuleSet {
    Config::from_yaml_str(RULES)
        .expect("reads")
        .rule_set()
        .expect("builds")
}

fn session(ledger: &Arc<Ledger>, claimant: &str) -> Session {
    Session::new(ledger.clone(), claimant.to_string())
}

fn id(pairs: &[(&str, &str)]) -> BucketId {
    BucketId {
        bucket: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn usage(pairs: &[(&str, &str)], allowed: u64, denied: u64, secs: i64) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(id(pairs)),
        time_elapsed: Some(prost_types::Duration {
            seconds: secs,
            nanos: 0,
        }),
        num_requests_allowed: allowed,
        num_requests_denied: denied,
    }
}

fn reports(domain: &str, usages: Vec<BucketQuotaUsage>) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: domain.to_string(),
        bucket_quota_usages: usages,
    }
}

/// What an action tells the client: `"allow"`, `"deny"`, `"abandon"` or `"tokens N/Us"`.
fn told(action: &BucketAction) -> String {
    match &action.bucket_action {
        Some(Action::AbandonAction(_)) => "abandon".to_string(),
        Some(Action::QuotaAssignmentAction(a)) => {
            match a
                .rate_limit_strategy
                .as_ref()
                .and_then(|s| s.strategy.as_ref())
            {
                Some(Strategy::BlanketRule(r)) if *r == BlanketRule::AllowAll as i32 => {
                    "allow".to_string()
                }
                Some(Strategy::BlanketRule(_)) => "deny".to_string(),
                Some(Strategy::TokenBucket(tb)) => format!(
                    "tokens {}/{}s",
                    tb.tokens_per_fill.unwrap_or_default(),
                    tb.fill_interval.as_ref().map_or(0, |d| d.seconds)
                ),
                Some(Strategy::RequestsPerTimeUnit(_)) | None => "none".to_string(),
            }
        }
        None => "none".to_string(),
    }
}

fn at(secs: u64) -> Nanos {
    Nanos::from_secs(secs)
}

/// What `s` is told for its report of `usages` in `quota` at `secs`, under the default
/// settings.
fn said(s: &mut Session, rules: &RuleSet, usages: Vec<BucketQuotaUsage>, secs: u64) -> Vec<String> {
    let settings = Settings::default();
    let report = s.report(reports("quota", usages), rules, &settings, at(secs));
    let actions = at_once(report).unwrap();
    actions.iter().map(told).collect()
}

/// What `s` is told at its tick at `secs`, under the default settings.
fn ticked(s: &mut Session, secs: u64) -> Vec<String> {
    let actions = at_once(s.tick(&Settings::default(), at(secs)));
    actions.iter().map(told).collect()
}

#[test]
fn two_clients_of_one_bucket_end_on_half_each_and_never_hold_more_than_the_limit() {
    let rules = rules();
    let ledger = Arc::new(Ledger::in_memory());
    let (mut a, mut b) = (session(&ledger, "node/1"), session(&ledger, "node/2"));
    let alice = [("name", "alice")];
    // a subscribes first: its need (one request over 5 s, and a margin) and a quarter of what
    // is handed out (the limit less half of what the demands leave); the rest kept for
    // newcomers.
    let told_a = said(&mut a, &rules, vec![usage(&alice, 1, 0, 0)], 1);
    assert_eq!(told_a, ["tokens 13173/1000s"]);
    // It wants 500 a second: it holds all 100.
    let told_a = said(&mut a, &rules, vec![usage(&alice, 100, 2_400, 5)], 6);
    assert_eq!(told_a, ["tokens 100000/1000s"]);
    // b subscribes wanting as much: its target is 50, but a holds 100 until it shrinks, and
    // the limit is wanted whole: nothing is kept for newcomers.
    assert_eq!(
        said(&mut b, &rules, vec![usage(&alice, 0, 2_500, 5)], 7),
        ["deny"]
    );
    assert!(ledger.busiest(1)[0].granted <= 100);
    // a's tick shrinks it at once; b, holding nothing, takes the room it leaves at its tick.
    assert_eq!(ticked(&mut a, 8), ["tokens 50000/1000s"]);
    assert_eq!(ticked(&mut b, 8), ["tokens 50000/1000s"]);
    assert!(ticked(&mut b, 9).is_empty());
    assert!(
        ticked(&mut a, 9).is_empty(),
        "nothing changed, nothing sent"
    );
    // a's stream ends: b's target is all 100, and it gets it once a's last assignment is
    // over (sent at 8 s for 15 s, counted a second longer for its way there).
    at_once(a.close(&Settings::default(), at(10)));
    assert!(ticked(&mut b, 11).is_empty());
    let told_b = said(&mut b, &rules, vec![usage(&alice, 500, 0, 5)], 20);
    assert_eq!(told_b, ["tokens 50000/1000s"]);
    assert!(ticked(&mut b, 23).is_empty());
    assert_eq!(ticked(&mut b, 24), ["tokens 100000/1000s"]);
}

#[test]
fn unlimited_and_zero_limits_and_unmatched_buckets_are_blanket_rules() {
    let rules = rules();
    let ledger = Arc::new(Ledger::in_memory());
    let mut s = session(&ledger, "node/1");
    let usages = vec![
        usage(&[("open", "x")], 1, 0, 0),
        usage(&[("closed", "x")], 1, 0, 0),
        usage(&[("other", "x")], 1, 0, 0),
    ];
    assert_eq!(said(&mut s, &rules, usages, 1), ["allow", "deny", "allow"]);
    assert_eq!(ledger.buckets(), 1, "only the limited bucket is claimed");
}

#[test]
fn an_idle_bucket_is_abandoned_and_its_claim_leaves() {
    let rules = rules();
    let ledger = Arc::new(Ledger::in_memory());
    let mut s = session(&ledger, "node/1");
    let bob = [("name", "bob")];
    let first = said(&mut s, &rules, vec![usage(&bob, 1, 0, 0)], 1);
    assert!(first[0].starts_with("tokens "), "{first:?}");
    // No request: still a share (never a denial while the bucket is under its limit), the
    // same one report after report.
    let quiet = said(&mut s, &rules, vec![usage(&bob, 0, 0, 5)], 6);
    assert!(quiet[0].starts_with("tokens "), "{quiet:?}");
    for t in (11..60).step_by(5) {
        assert_eq!(said(&mut s, &rules, vec![usage(&bob, 0, 0, 5)], t), quiet);
    }
    assert_eq!(
        said(&mut s, &rules, vec![usage(&bob, 0, 0, 5)], 61),
        ["abandon"]
    );
    assert_eq!(s.buckets(), 0);
}

#[test]
fn bad_reports_end_the_stream_with_a_reason() {
    let rules = rules();
    let ledger = Arc::new(Ledger::in_memory());
    // Why a report of `usages` in `domain` at `secs` ends the stream.
    let invalid = |s: &mut Session, domain: &str, usages, secs| {
        let reports = reports(domain, usages);
        match at_once(s.report(reports, &rules, &Settings::default(), at(secs))) {
            Err(SessionError::Invalid(why)) => why,
            other => panic!("{other:?}"),
        }
    };
    let mut s = session(&ledger, "node/1");
    let why = invalid(&mut s, "", vec![usage(&[("name", "x")], 1, 0, 0)], 1);
    assert!(why.contains("names no domain"), "{why}");
    let mut s = session(&ledger, "node/2");
    let why = invalid(&mut s, "quota", vec![usage(&[], 1, 0, 0)], 1);
    assert!(why.contains("without pairs"), "{why}");
    // A good bucket beside a bad one: the message is refused whole, nothing of it claimed.
    let mut s = session(&ledger, "node/5");
    let good_and_bad = vec![usage(&[("name", "good")], 1, 0, 0), usage(&[], 1, 0, 0)];
    let why = invalid(&mut s, "quota", good_and_bad, 1);
    assert!(why.contains("without pairs"), "{why}");
    assert_eq!(
        ledger.buckets(),
        0,
        "nothing of the refused message is claimed"
    );
    let mut s = session(&ledger, "node/3");
    said(&mut s, &rules, vec![usage(&[("name", "x")], 1, 0, 0)], 1);
    let why = invalid(&mut s, "other", vec![], 2);
    assert!(why.contains("domain is `quota`"), "{why}");
    // The domain repeated, or left out after the first report, is the stream's.
    let repeated = reports("", vec![usage(&[("name", "x")], 0, 0, 5)]);
    at_once(s.report(repeated, &rules, &Settings::default(), at(6))).unwrap();
    let mut s = session(&ledger, "node/4");
    let two = Settings {
        max_buckets_per_stream: 2,
        ..Settings::default()
    };
    let three = (0..3)
        .map(|i| usage(&[("name", ["a", "b", "c"][i])], 1, 0, 0))
        .collect();
    assert!(matches!(
        at_once(s.report(reports("quota", three), &rules, &two, at(1))),
        Err(SessionError::TooMany(_))
    ));
}
