use std::sync::Arc;

use floodgate::algorithm::spec::AnyState;
use floodgate::limiter::{Lease, Priority};
use floodgate::pipeline::{Request, Verdict};
use floodgate::store::{Key, MemoryStore};
use floodgate::{ManualClock, Nanos};

use crate::config::{Config, ConfigFileError};
use crate::served::Served;

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
        let request = Request {
            cost: (next(5) == 0).then(|| next(3)),
            endpoint: (next(4) == 0).then_some("/v1/search"),
            ..Request::new(
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

/// A field a kind does not take, or a field it needs left out, is the reader's error: it
/// names the entry and its line, in `pipeline:` and in `limiters:` alike.
#[test]
fn the_reader_names_a_field_a_kind_does_not_take_with_its_line() {
    let cases = [
        (
            "pipeline:\n  - name: a\n    kind: fleet\n    capacity: 3\n    reserved_for_critical: 0.1\n    key: \"{user}\"\n",
            6,
            "pipeline[0].key: unknown field `key`, expected one of `capacity`",
        ),
        (
            "pipeline:\n  - { name: a, kind: concurrency }\n",
            2,
            "pipeline[0]: missing field `capacity`",
        ),
        (
            "limiters:\n  utilization:\n    workers: 2\n    capacity: 3\n",
            4,
            "limiters.utilization.capacity: unknown field `capacity`, expected one of `workers`",
        ),
        (
            "limiters:\n  concurrency: { capacity: 3, name: c }\n",
            2,
            "limiters.concurrency.name: unknown field `name`",
        ),
    ];
    for (yaml, line, message) in cases {
        match Config::from_yaml_str(yaml) {
            Err(ConfigFileError::Yaml {
                line: Some(l),
                message: m,
                ..
            }) => {
                assert_eq!(l, line, "{yaml}: {m}");
                assert!(m.starts_with(message), "{yaml}: `{m}` is not `{message}…`");
            }
            other => panic!("{yaml}: {other:?}"),
        }
    }
}

/// A section of `limiters:` takes what a stage of its kind takes: its own key, a `when`, or
/// for `request_rate` a limit of its own instead of the top-level plans.
#[test]
fn a_section_takes_the_schema_of_its_kind() {
    let (served, _) = served(
        "plans: {}\nlimiters:\n  request_rate:\n    key: \"{attributes.ip}\"\n    when: { endpoint: \"/login\" }\n    spec: { algorithm: fixed_window, limit: 1, window: 1m }\n",
    );
    let ask = |endpoint: &'static str, ip: &str| {
        let attributes = [("ip", ip)];
        let request = Request {
            attributes: &attributes,
            endpoint: Some(endpoint),
            ..Request::new("alice", "free", Priority::Get)
        };
        served.pipeline.evaluate_blocking(&request).allowed()
    };
    assert!(ask("/login", "10.0.0.1"));
    assert!(!ask("/login", "10.0.0.1"), "one per minute per address");
    assert!(ask("/login", "10.0.0.2"), "another address counts apart");
    assert!(
        ask("/search", "10.0.0.1"),
        "the stage applies to /login only"
    );
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
        let request = Request {
            attributes: &attributes,
            ..Request::new("alice", "free", Priority::Get)
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
