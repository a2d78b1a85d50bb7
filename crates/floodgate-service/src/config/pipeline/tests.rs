use std::sync::Arc;

use floodgate::algorithm::spec::AnyState;
use floodgate::limiter::{Lease, Priority};
use floodgate::pipeline::{Descriptor, Verdict};
use floodgate::store::{Key, MemoryStore};
use floodgate::{ManualClock, Nanos};

use crate::config::{Config, ConfigFileError};
use crate::snapshot::Served;

type TestStore = Arc<MemoryStore<Key, AnyState, ManualClock>>;

fn build(config: &Config, clock: &ManualClock) -> Result<Served<TestStore>, ConfigFileError> {
    let store = Arc::new(MemoryStore::builder().clock(clock.clone()).build().unwrap());
    config.build(store, Arc::new(clock.clone()))
}

fn served(yaml: &str) -> (Served<TestStore>, ManualClock) {
    let clock = ManualClock::new(Nanos::from_secs(1_000));
    let config = Config::from_yaml_str(yaml).expect("reads");
    (build(&config, &clock).expect("builds"), clock)
}

/// The path and message of the error `yaml` is refused with.
fn invalid(yaml: &str) -> (String, String) {
    let clock = ManualClock::new(Nanos::from_secs(1_000));
    let error = Config::from_yaml_str(yaml).and_then(|c| build(&c, &clock).map(drop));
    match error {
        Err(ConfigFileError::InFile { error, .. }) => match *error {
            ConfigFileError::Invalid { path, message } => (path, message),
            other => panic!("expected Invalid for\n{yaml}\ngot {other:?}"),
        },
        Err(ConfigFileError::Invalid { path, message }) => (path, message),
        Err(ConfigFileError::Yaml { message, .. }) => (String::new(), message),
        other => panic!("expected an error for\n{yaml}\ngot {other:?}"),
    }
}

const PLANS: &str = "\
plans:
  free: { algorithm: token_bucket, rate: 2, capacity: 4 }
  pro: { algorithm: sliding_window, limit: 10, window: 1s }
default_plan: free
endpoint_costs: { /v1/search: 3 }
";

const TODAY: &str = "\
limiters:
  request_rate: { all_or_nothing: true }
  concurrency: { capacity: 3, lease_ttl: 5s }
  fleet: { capacity: 8, reserved_for_critical: 0.25, lease_ttl: 5s, status: 529 }
  utilization: { workers: 4, sample_interval: 1s }
";

const AS_A_LIST: &str = "\
pipeline:
  - { name: request_rate, kind: limit, all_or_nothing: true }
  - { name: concurrency, kind: concurrency, capacity: 3, lease_ttl: 5s }
  - { name: fleet, kind: fleet, capacity: 8, reserved_for_critical: 0.25, lease_ttl: 5s, status: 529 }
  - { name: utilization, kind: utilization, workers: 4, sample_interval: 1s }
";

/// What a verdict says to a client, without its leases.
fn seen(verdict: &Verdict) -> String {
    let mut headers = verdict.headers();
    headers.sort();
    format!(
        "{} {:?} {:?} {headers:?}",
        verdict.status(),
        verdict.refusal.as_ref().map(|r| (&r.stage, &r.message)),
        verdict.shadow_refusals
    )
}

/// A file in today's format serves the very decisions of the pipeline list it stands for:
/// the same requests (users, plans, priorities, costs, endpoints, leases held and given
/// back, time passing) get the same answers, headers and messages included.
#[test]
fn todays_sections_serve_the_decisions_of_their_list() {
    let (today, today_clock) = served(&format!("{PLANS}{TODAY}"));
    let (list, list_clock) = served(&format!("{PLANS}{AS_A_LIST}"));
    let names = |s: &Served<TestStore>| {
        let stages = s.pipeline.stages();
        stages
            .map(|s| (s.name().to_string(), s.limiter().kind()))
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&today), names(&list));
    assert_eq!(today.stage_paths["fleet"], "limiters.fleet");
    assert_eq!(list.stage_paths["fleet"], "pipeline[2]");

    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let users = ["alice", "bob", "carol"];
    let plans = ["free", "pro", "gold"];
    let priorities = [
        Priority::Critical,
        Priority::Post,
        Priority::Get,
        Priority::Test,
    ];
    let mut held: Vec<(Vec<Lease>, Vec<Lease>)> = Vec::new();
    let mut refused = 0;
    for i in 0..3_000 {
        let request = Descriptor {
            cost: (next(5) == 0).then(|| next(3)),
            endpoint: (next(4) == 0).then_some("/v1/search"),
            ..Descriptor::new(
                users[next(3) as usize],
                plans[next(3) as usize],
                priorities[next(4) as usize],
            )
        };
        let a = today.pipeline.evaluate_blocking(&request);
        let b = list.pipeline.evaluate_blocking(&request);
        assert_eq!(seen(&a), seen(&b), "request {i}: {request:?}");
        refused += usize::from(!a.allowed());
        if next(2) == 0 {
            held.push((a.leases, b.leases));
        }
        if next(3) == 0 && !held.is_empty() {
            held.swap_remove(next(held.len() as u64) as usize);
        }
        let step = std::time::Duration::from_millis(next(400));
        today_clock.advance(step);
        list_clock.advance(step);
    }
    assert!(
        refused > 300 && refused < 2_700,
        "{refused} refused: both ways exercised"
    );
}

/// The example file written for the four sections still loads, unchanged, as Stripe's four.
#[test]
fn the_example_file_of_four_sections_loads_unchanged() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/config/floodgate.yaml");
    let config = Config::load(&path).expect("reads");
    let clock = ManualClock::new(Nanos::from_secs(1_000));
    let built = build(&config, &clock).expect("builds");
    let names: Vec<_> = built
        .pipeline
        .stages()
        .map(|s| s.name().to_string())
        .collect();
    assert_eq!(
        names,
        ["request_rate", "concurrency", "fleet", "utilization"]
    );
}

#[test]
fn errors_name_the_stage_and_the_field() {
    let cases = [
        (
            "pipeline:\n  - { name: a, kind: limit, spec: { algorithm: fixed_window, limit: 0, window: 1s } }\n",
            "pipeline[0].spec.limit",
            "stage `a`: ",
        ),
        (
            "pipeline:\n  - { name: a, kind: limit, key: \"{attributes.ip\", spec: { algorithm: fixed_window, limit: 1, window: 1s } }\n",
            "pipeline[0].key",
            "stage `a`: invalid value for `key`",
        ),
        (
            "pipeline:\n  - { name: a, kind: fleet, capacity: 3, reserved_for_critical: 0.1, key: \"{user}\" }\n",
            "pipeline[0].key",
            "stage `a`: a fleet stage has no `key`",
        ),
        (
            "pipeline:\n  - { name: a, kind: concurrency }\n",
            "pipeline[0].capacity",
            "stage `a`: missing",
        ),
        (
            "pipeline:\n  - { name: a, kind: concurrency, capacity: 1 }\n  - { name: a, kind: concurrency, capacity: 1 }\n",
            "pipeline[1].name",
            "stage `a`: another stage has this name",
        ),
        (
            "pipeline:\n  - { name: a, kind: limit, when: { attributes: x }, spec: { algorithm: fixed_window, limit: 1, window: 1s } }\n",
            "pipeline[0].when.attributes",
            "stage `a`: unknown field `attributes`: the fields are user, plan",
        ),
        (
            "pipeline:\n  - name: a\n    kind: limit\n    all_or_nothing: false\n    keys:\n      - { name: org, key: \"{attributes.org}\", spec: { algorithm: fixed_window, limit: 1, window: 1s } }\n      - { name: user, key: \"{user}\", spec: { algorithm: fixed_window, limit: 1, window: 1s } }\n",
            "pipeline[0].all_or_nothing",
            "always all or nothing",
        ),
        (
            "pipeline:\n  - name: a\n    kind: limit\n    keys:\n      - { name: org, key: \"{attributes.org}\", spec: { algorithm: fixed_window, limit: 1, window: 1s } }\n      - { name: user, key: \"{user\", spec: { algorithm: fixed_window, limit: 1, window: 1s } }\n",
            "pipeline[0].keys[1].key",
            "stage `a`: ",
        ),
        (
            "pipeline:\n  - { name: a, kind: limit, plans: { gold: { algorithm: fixed_window, limit: 1, window: 1s } } }\n",
            "pipeline[0].default_plan",
            "stage `a`: missing",
        ),
        (
            "pipeline:\n  - { name: a, kind: utilization, workers: 2 }\n  - { name: b, kind: utilization, workers: 2 }\n",
            "pipeline[1].kind",
            "at most one utilization stage",
        ),
        (
            "pipeline:\n  - { name: a, kind: concurrency, capacity: 1 }\nlimiters:\n  concurrency: { capacity: 1 }\n",
            "pipeline",
            "not both",
        ),
        (
            "attributes: { max_count: 0 }\n",
            "attributes.max_count",
            "invalid value 0",
        ),
    ];
    for (yaml, path, message) in cases {
        let (p, m) = invalid(yaml);
        assert_eq!(p, path, "{yaml}: {m}");
        assert!(m.contains(message), "{yaml}: `{m}` lacks `{message}`");
    }
    let (_, message) = invalid("pipeline:\n  - { name: a, kind: adaptive, capacity: 1 }\n");
    assert!(message.contains("unknown variant `adaptive`"), "{message}");
}

/// Without `limiters`, a file with a `pipeline` runs only its stages (the built-in four are
/// not added), and a `limit` stage with no limit of its own runs the top-level plans, chosen
/// by `plan_from`.
#[test]
fn a_list_replaces_the_builtin_stages() {
    let (served, _) = served(&format!(
        "{PLANS}pipeline:\n  - {{ name: plans, kind: limit, plan_from: attributes.tier }}\n"
    ));
    let names: Vec<_> = served
        .pipeline
        .stages()
        .map(|s| s.name().to_string())
        .collect();
    assert_eq!(names, ["plans"]);
    let ask = |tier: &str| {
        let attributes = [("tier", tier)];
        let request = Descriptor {
            attributes: &attributes,
            ..Descriptor::new("alice", "free", Priority::Get)
        };
        served.pipeline.evaluate_blocking(&request)
    };
    for _ in 0..10 {
        assert!(ask("pro").allowed(), "pro allows 10 per second");
    }
    let over = ask("pro");
    assert_eq!(over.status(), 429);
    assert!(over
        .refusal
        .unwrap()
        .message
        .starts_with("plan pro allows 10"));
}
