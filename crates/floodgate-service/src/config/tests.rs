use std::path::PathBuf;

use super::*;
use crate::served::Served;
use floodgate::algorithm::spec::AnyState;
use floodgate::limiter::Priority;
use floodgate::pipeline::Mode;
use floodgate::pipeline::Request;
use floodgate::store::{Key, MemoryStore};
use floodgate::{ManualClock, Nanos};
use std::sync::Arc;

fn example_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/config")
        .join(name)
}

/// Builds `config` over a throwaway store, as `check-config` does.
type TestStore = Arc<MemoryStore<Key, AnyState, ManualClock>>;

fn build(config: &Config) -> Result<Served<TestStore>, ConfigFileError> {
    let clock = ManualClock::new(Nanos::from_secs(1_000));
    let store = Arc::new(MemoryStore::builder().clock(clock.clone()).build().unwrap());
    config.build(store, Arc::new(clock))
}

fn invalid(yaml: &str) -> (String, String) {
    match Config::from_yaml_str(yaml).and_then(|c| build(&c).map(drop)) {
        Err(ConfigFileError::Invalid { path, message }) => (path, message),
        Err(ConfigFileError::InFile { error, .. }) => match *error {
            ConfigFileError::Invalid { path, message } => (path, message),
            other => panic!("expected Invalid for\n{yaml}\ngot {other:?}"),
        },
        other => panic!("expected Invalid for\n{yaml}\ngot {other:?}"),
    }
}

fn yaml_error(yaml: &str) -> String {
    match Config::from_yaml_str(yaml) {
        Err(ConfigFileError::Yaml {
            file: None,
            message,
            ..
        }) => message,
        other => panic!("expected a Yaml error for\n{yaml}\ngot {other:?}"),
    }
}

const PLANS: &str = "plans:\n  free: {algorithm: token_bucket, rate: 5, capacity: 10}\n\
                         default_plan: free\n";

#[test]
fn a_text_without_settings_is_refused_never_read_as_the_builtin_config() {
    for text in [
        "",
        "   \n",
        "# a comment\n# another\n",
        "---\n",
        "~\n",
        "{}\n",
    ] {
        let e = Config::from_yaml_str(text).unwrap_err();
        assert_eq!(e, ConfigFileError::NoSettings { file: None }, "{text:?}");
        assert!(e.to_string().starts_with("holds no settings"), "{e}");
    }
    // A file that writes one setting, and leaves the rest out, is a configuration.
    assert!(Config::from_yaml_str("store: {max_keys: 10}\n").is_ok());
}

#[test]
fn the_builtin_config_is_valid() {
    let config = Config::builtin();
    let served = build(&config).expect("valid");
    assert_eq!(config.plans().map(|p| p.len()), Ok(3));
    assert_eq!(
        served.limits.get("login").map(|l| l.algorithm().quota()),
        Some(Some((5.0, Duration::from_secs(60))))
    );
    assert!(served.rules.has_domain("example"));
    let stages: Vec<&str> = served
        .pipeline
        .stages()
        .map(|s| s.name().as_str())
        .collect();
    assert_eq!(
        stages,
        ["request_rate", "concurrency", "fleet", "utilization"]
    );
}

#[test]
fn the_native_example_is_the_builtin_config_written_out() {
    let example = Config::load(example_path("floodgate.yaml")).expect("loads");
    assert!(example.http.is_some() && example.grpc.is_some());
    assert!(!example.users.is_empty() && !example.endpoint_costs.is_empty());
    let memory = crate::config::StoreSettings::Memory(Default::default());
    assert_eq!(example.store.settings().unwrap(), memory);
    let trimmed = Config {
        http: None,
        grpc: None,
        debug: None,
        store: StoreConfig::default(),
        users: BTreeMap::new(),
        endpoint_costs: BTreeMap::new(),
        ..example
    };
    assert_eq!(trimmed, Config::builtin());
}

#[test]
fn an_envoy_file_becomes_the_only_domain_beside_the_builtin_pipeline() {
    let config = Config::load(example_path("envoy.yaml")).expect("loads");
    assert_eq!(config.domains.len(), 1);
    assert_eq!(config.domains[0].domain, "edge_proxy");
    assert_eq!(config.plans, Config::builtin().plans);
    assert_eq!(config.limiters, Config::builtin().limiters);
    // Errors in an envoy file are named as that file writes them.
    let (path, message) = invalid("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n");
    assert_eq!(path, "descriptors[0].rate_limit.unit");
    assert!(message.contains("fortnight"));
}

#[test]
fn a_native_config_reads_every_section() {
    let config = Config::from_yaml_str(
        r#"
http: 127.0.0.1:9000
grpc: "[::1]:9001"
store: {max_keys: 10}
plans:
  free: {algorithm: token_bucket, rate: 5, capacity: 10}
  gold: {algorithm: gcra, max_burst: 9, count: 100, period: 1s}
default_plan: free
endpoint_costs: {/v1/search: 5}
users: {alice: gold}
limiters:
  request_rate:
  concurrency: {capacity: 2, mode: shadow, on_store_error: fail_closed, all_or_nothing: true}
  fleet: {capacity: 10, reserved_for_critical: 0.5, lease_ttl: 500ms, mode: "off"}
  utilization: {workers: 4, sample_interval: 2s, seed: 9, start_of_bad: 0.9}
limits:
  login: {algorithm: sliding_log, limit: 5, window: 1m}
domains:
  - domain: a
    descriptors:
      - key: k
        rate_limit: {unit: hour, requests_per_unit: 3}
  - domain: b
"#,
    )
    .expect("valid");
    assert_eq!(config.http.map(|a| a.port()), Some(9000));
    let crate::config::StoreSettings::Memory(memory) = config.store.settings().unwrap() else {
        panic!("the memory store");
    };
    assert_eq!(memory.bound.max_keys, 10);
    assert_eq!(config.endpoint_costs.get("/v1/search"), Some(&5));
    let l = &config.limiters;
    assert_eq!(
        l.request_rate,
        Some(StageConfig::new(
            "request_rate",
            StageKind::Limit(LimitStage::default())
        ))
    );
    let c = l.concurrency.as_ref().expect("configured");
    let StageKind::Concurrency(concurrency) = &c.kind else {
        panic!("{c:?}")
    };
    assert_eq!(
        (c.mode, concurrency.on_store_error),
        (Mode::Shadow, OnStoreError::FailClosed)
    );
    assert_eq!(concurrency.lease_ttl, SpecDuration(Duration::from_secs(60)));
    assert!(concurrency.all_or_nothing);
    let served = build(&config).expect("builds");
    let stage = served.pipeline.stage("concurrency").expect("a stage");
    assert!(stage.is_all_or_nothing());
    let f = l.fleet.as_ref().expect("configured");
    let StageKind::Fleet(fleet) = &f.kind else {
        panic!("{f:?}")
    };
    assert!(!fleet.all_or_nothing);
    assert_eq!(
        (f.mode, fleet.lease_ttl.0),
        (Mode::Off, Duration::from_millis(500))
    );
    let u = l.utilization.as_ref().expect("configured");
    let StageKind::Utilization(utilization) = &u.kind else {
        panic!("{u:?}")
    };
    assert_eq!(utilization.settings().start_of_bad, 0.9);
    assert_eq!(utilization.settings().end_of_good, 0.7);
    assert_eq!(config.rule_set().expect("valid").domains().count(), 2);
}

/// One rule for every file: a section it leaves out (`plans` with `default_plan`, `limiters`,
/// `limits`, `domains`) is the built-in configuration's; written empty, it is none.
#[test]
fn sections_left_out_are_the_builtin_ones_and_empty_ones_are_none() {
    let builtin = Config::builtin();
    let config = Config::from_yaml_str(
        "store: {url: memory}\nlimits:\n  x: {algorithm: fixed_window, limit: 1, window: 1}\n",
    )
    .expect("valid");
    assert_eq!(config.limiters, builtin.limiters);
    assert_eq!(
        (&config.plans, &config.default_plan),
        (&builtin.plans, &builtin.default_plan)
    );
    assert_eq!(config.domains, builtin.domains);
    assert_eq!(config.limits.keys().collect::<Vec<_>>(), ["x"]);
    // A file holding only the store serves exactly what `--store` serves without a file.
    let store_only = Config::from_yaml_str("store: {url: memory}\n").expect("valid");
    assert_eq!(store_only.store.url.as_deref(), Some("memory"));
    assert_eq!(
        Config {
            store: StoreConfig::default(),
            ..store_only
        },
        builtin
    );
    // A text with no settings at all is refused, not read as all sections left out (see
    // `a_text_without_settings_is_refused_never_read_as_the_builtin_config`).
    assert!(Config::from_yaml_str("").is_err());
    let none =
        Config::from_yaml_str("plans: {}\nlimiters: {}\nlimits: {}\ndomains: []\n").expect("valid");
    assert_eq!(none.limiters, LimitersConfig::default());
    assert!(none.plans.is_empty() && none.limits.is_empty() && none.domains.is_empty());
    assert_eq!(none.default_plan, None);
    // Plans given without a default plan: the file's plans, and no default.
    let plans =
        Config::from_yaml_str(PLANS.replace("default_plan: free\n", "").as_str()).expect("reads");
    assert_eq!(plans.default_plan, None);
}

#[test]
fn invalid_values_are_refused_with_their_path() {
    let cases: Vec<(String, &str, &str)> = vec![
            (
                "plans:\n  free: {algorithm: token_bucket, rate: 0, capacity: 10}\ndefault_plan: free\n".into(),
                "plans.free.rate",
                "invalid value 0",
            ),
            (
                "plans:\n  free: {algorithm: sliding_window, limit: 0, window: 1s}\ndefault_plan: free\n".into(),
                "plans.free.limit",
                "at least 1",
            ),
            (
                "plans:\n  free: {algorithm: token_bucket, rate: 1, capacity: 1}\n".into(),
                "default_plan",
                "missing",
            ),
            (format!("{PLANS}default_plan: gold\n").replace("default_plan: free\n", ""), "default_plan", "unknown plan `gold`: plans are free"),
            (format!("{PLANS}users:\n  bob: gold\n"), "users.bob", "unknown plan `gold`"),
            (format!("{PLANS}endpoint_costs:\n  /v1/x: 0\n"), "endpoint_costs[\"/v1/x\"]", "at least 1"),
            ("plans: {}\nlimiters:\n  request_rate: {}\n".into(), "plans", "at least one plan"),
            (
                format!("{PLANS}limiters:\n  concurrency: {{capacity: 0}}\n"),
                "limiters.concurrency.capacity",
                "invalid value 0",
            ),
            (
                format!("{PLANS}limiters:\n  fleet: {{capacity: 10, reserved_for_critical: 1.5}}\n"),
                "limiters.fleet.reserved_for_critical",
                "1.5",
            ),
            (
                format!("{PLANS}limiters:\n  utilization: {{workers: 0}}\n"),
                "limiters.utilization.workers",
                "invalid value 0",
            ),
            (
                format!("{PLANS}limiters:\n  utilization: {{workers: 4, end_of_good: 0.9, start_of_bad: 0.5}}\n"),
                "limiters.utilization.start_of_bad",
                "0.5",
            ),
            (
                "limits:\n  login: {algorithm: gcra, max_burst: 1, count: 0, period: 1}\n".into(),
                "limits.login.count",
                "invalid value 0",
            ),
            ("store: {max_keys: 0}\n".into(), "store.max_keys", "at least 1"),
            ("http: 127.0.0.1:80\ngrpc: 127.0.0.1:80\n".into(), "grpc", "also the http address"),
            ("grpc: 127.0.0.1:81\ndebug: 127.0.0.1:81\n".into(), "debug", "also the grpc address"),
            (
                "domains:\n  - domain: a\n  - domain: a\n".into(),
                "domains[1].domain",
                "duplicate domain",
            ),
            (
                "domains:\n  - descriptors: []\n".into(),
                "domains[0].domain",
                "non-empty",
            ),
            (
                "domains:\n  - domain: a\n    descriptors:\n      - key: k\n        rate_limit: {algorithm: fixed_window, limit: 3, window: 0}\n".into(),
                "domains[0].descriptors[0].rate_limit.window",
                "invalid value 0ns",
            ),
        ];
    for (yaml, path, needle) in cases {
        let (got, message) = invalid(&yaml);
        assert_eq!(got, path, "{yaml}");
        assert!(message.contains(needle), "{message:?} lacks {needle:?}");
    }
}

#[test]
fn typos_and_bad_yaml_are_refused() {
    for (yaml, needle) in [
        (
            "plan:\n  free: {algorithm: token_bucket, rate: 1, capacity: 1}\n",
            "unknown field `plan`",
        ),
        (
            "plans:\n  free: {algorithm: token_bucket, rate: 1, capacity: 1, burst: 2}\n",
            "burst",
        ),
        ("limiters:\n  concurency: {capacity: 1}\n", "concurency"),
        (
            "limiters:\n  concurrency: {capacity: 1, mode: enforcing}\n",
            "unknown mode `enforcing`",
        ),
        (
            "limiters:\n  fleet: {capacity: 1, reserved_for_critical: 0.1, on_store_error: open}\n",
            "unknown on_store_error `open`",
        ),
        ("limiters:\n  concurrency: {lease_ttl: 5s}\n", "capacity"),
        (
            "limiters:\n  concurrency: {capacity: 1, lease_ttl: 5 fortnights}\n",
            "fortnights",
        ),
        (
            "users:\n  a: free\n  a: pro\n",
            "duplicate key `a` (first at line 2)",
        ),
        ("http: not-an-address\n", "http"),
        ("plans: [1, 2]\n", "plans"),
        ("plans:\n  free: {algorithm: token_bucket\n", ""),
        (
            "domains:\n  - domain: a\n    descriptors:\n      - key: k\n        rate_limits: {}\n",
            "rate_limits",
        ),
    ] {
        let message = yaml_error(yaml);
        assert!(message.contains(needle), "{message:?} lacks {needle:?}");
    }
}

#[test]
fn load_names_the_file() {
    let missing = example_path("does-not-exist.yaml");
    match Config::load(&missing) {
        Err(ConfigFileError::Io { file, message }) => {
            assert_eq!(file, missing);
            assert!(!message.is_empty());
        }
        other => panic!("{other:?}"),
    }
    let err = ConfigFileError::Yaml {
        file: Some(PathBuf::from("f.yaml")),
        line: None,
        message: "bad".into(),
    };
    assert_eq!(err.to_string(), "f.yaml: invalid configuration: bad");
    let err = ConfigFileError::Invalid {
        path: "plans.free.rate".into(),
        message: "invalid value 0".into(),
    };
    assert_eq!(err.to_string(), "`plans.free.rate`: invalid value 0");
}

/// Every error names the file, the entry's path and its line: the entry at fault, not the
/// start of its section, whether the YAML reader or a later check finds it.
#[test]
fn errors_name_the_file_the_path_and_the_line() {
    let dir = std::env::temp_dir().join(format!("floodgate-config-lines-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let head =
        "plans:\n  free: {algorithm: token_bucket, rate: 5, capacity: 10}\ndefault_plan: free\n";
    let cases = [
        (
            format!("{head}limits:\n  a: {{algorithm: fixed_window, limit: 5, window: 1m}}\nusers: {{}}\nlimits:\n  b: {{}}\n"),
            ":7: invalid configuration: limits: duplicate key `limits` (first at line 4)",
        ),
        (
            format!("{head}limits:\n  a: {{algorithm: fixed_window, limit: 5, window: 1m}}\n  b:\n    algorithm: fixed_window\n    limit: 5\n    window: \"1 fortnight\"\n"),
            ":9: invalid configuration: limits.b.window: `1 fortnight` has an unknown unit",
        ),
        (
            format!("{head}limiters:\n  concurrency:\n    capacity: 3\n    lease_ttl: -5\n"),
            ":7: invalid configuration: limiters.concurrency.lease_ttl: `-5` is not a duration",
        ),
        (
            "plans:\n  free: {algorithm: token_bucket, rate: 5, capacity: 10}\n\ndefault_plan: fre\n".to_string(),
            ":4: `default_plan`: unknown plan `fre`: plans are free",
        ),
        (
            format!("{head}limits:\n  x: {{algorithm: gcra, max_burst: 1, count: 1, period: 1, kye: 3}}\n"),
            ":5: invalid configuration: limits.x.kye: unknown field `kye`",
        ),
        (
            format!("{head}limiters:\n  fleet:\n    capacity: 10\n    reserved_for_critical: 1.5\n"),
            ":7: `limiters.fleet.reserved_for_critical`: invalid value 1.5",
        ),
    ];
    for (i, (text, expected)) in cases.iter().enumerate() {
        let path = dir.join(format!("case{i}.yaml"));
        std::fs::write(&path, text).unwrap();
        let error = Config::load(&path)
            .and_then(|c| build(&c).map(drop))
            .expect_err(expected);
        let said = error.to_string();
        assert_eq!(
            said.strip_prefix(&path.display().to_string())
                .map(|rest| rest.starts_with(expected)),
            Some(true),
            "case {i}: {said}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_builtin_pipeline_runs_stripes_example() {
    let built = build(&Config::builtin()).expect("builds");
    assert!(built.workers.is_some());
    let pipeline = &built.pipeline;
    assert!(pipeline.stages().all(|s| s.current_mode() == Mode::Enforce));
    // The free plan bursts to 100; each verdict's leases are dropped at once.
    for _ in 0..100 {
        let verdict = pipeline.evaluate_blocking(&Request::new("bob", "free", Priority::Get));
        assert!(verdict.allowed());
    }
    let over = pipeline.evaluate_blocking(&Request::new("bob", "free", Priority::Get));
    assert_eq!(over.status(), 429);

    let shadow = Config::from_yaml_str(&format!(
        "{PLANS}limiters:\n  request_rate: {{mode: shadow, status: 403}}\n"
    ))
    .expect("valid");
    let shadow = build(&shadow).expect("builds");
    assert_eq!(shadow.pipeline.mode("request_rate"), Some(Mode::Shadow));
    assert_eq!(
        shadow
            .pipeline
            .stage("request_rate")
            .map(|s| s.refusal_status()),
        Some(403)
    );
    assert_eq!(shadow.pipeline.mode("concurrency"), None);
    assert!(shadow.workers.is_none());
}

/// A named limit's name is its namespace in the one store: it must be a valid namespace and
/// may not be a pipeline stage's or the Envoy rules'.
#[test]
fn named_limits_get_namespaces_of_their_own() {
    for taken in ["request_rate", "concurrency", "rls"] {
        let yaml = format!(
            "{PLANS}limiters: {{request_rate: {{}}, concurrency: {{capacity: 1}}}}\n\
             limits:\n  {taken}: {{algorithm: fixed_window, limit: 1, window: 1}}\n"
        );
        let (path, message) = invalid(&yaml);
        assert_eq!(path, format!("limits.{taken}"));
        assert!(message.contains("taken"), "{message}");
    }
    let (path, message) =
        invalid("limits:\n  \"a:b\": {algorithm: fixed_window, limit: 1, window: 1}\n");
    assert_eq!(path, "limits[\"a:b\"].namespace");
    assert!(message.contains("a:b"), "{message}");
}

/// The store section: every setting read, defaults where absent, unknown fields refused.
#[test]
fn the_store_section_reads_its_settings_and_defaults() {
    let config = Config::from_yaml_str(
        "store:\n  url: redis-cluster://h1:7000,h2:7001\n  timeout: 20ms\n  \
         breaker: {threshold: 5, cool_down: 2s}\n  password_env: REDIS_PASSWORD\n  nodes: 3\n",
    )
    .unwrap();
    assert_eq!(
        config.store.url.as_deref(),
        Some("redis-cluster://h1:7000,h2:7001")
    );
    let crate::config::StoreSettings::Redis(store) = config.store.settings().unwrap() else {
        panic!("a Redis store");
    };
    assert_eq!(
        store.link.timeout,
        Some(SpecDuration(Duration::from_millis(20)))
    );
    assert_eq!(
        store.link.breaker,
        Some(BreakerConfig {
            threshold: 5,
            cool_down: SpecDuration(Duration::from_secs(2)),
        })
    );
    assert_eq!(store.redis.password_env.as_deref(), Some("REDIS_PASSWORD"));
    assert_eq!(store.nodes, 3);
    let config =
        Config::from_yaml_str("store: {url: 'redis://h:1', breaker: {threshold: 0}}\n").unwrap();
    let crate::config::StoreSettings::Redis(store) = config.store.settings().unwrap() else {
        panic!("a Redis store");
    };
    assert_eq!(store.nodes, 1);
    assert_eq!(
        store.link.breaker.unwrap().cool_down,
        SpecDuration(Duration::from_secs(1))
    );
    for (bad, field, says) in [
        ("store: {breaker: {treshold: 1}}\n", "store.breaker", "treshold"),
        ("store: {max_keys: -1}\n", "store.max_keys", "-1"),
        ("store: {max_keys: 0}\n", "store.max_keys", "at least 1"),
        ("store: {nodes: -1}\n", "store.nodes", "-1"),
        ("store: {password: x}\n", "store.password", "no store takes it"),
        (
            "store: {url: memory, timeout: 20ms}\n",
            "store.timeout",
            "the memory store does not take it (taken by a Redis store, cached mode (store.mode: cached), a memcached store)",
        ),
        (
            "store: {url: 'redis://h:1', tls: true}\n",
            "store.tls",
            "a Redis store does not take it (taken by a memcached store)",
        ),
        (
            "store: {url: 'memcache://h:1', password_env: PW}\n",
            "store.password_env",
            "a memcached store does not take it",
        ),
        (
            "store: {url: 'redis://h:1', sync_interval: 1s}\n",
            "store.sync_interval",
            "a Redis store does not take it (taken by the file store, cached mode",
        ),
    ] {
        let e = Config::from_yaml_str(bad).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains(says), "{bad}: {e}");
    }
    // Without a URL the store is not known yet (`--store` may name it): each field must be
    // one some store takes, with a value of its type.
    let later = Config::from_yaml_str("store: {timeout: 20ms, max_keys: 5}\n").unwrap();
    assert!(later.store.settings().is_err());
    let mut on_redis = later.store.clone();
    on_redis.url = Some("redis://h:1".into());
    assert!(
        on_redis.settings().is_err(),
        "max_keys is not a Redis store's"
    );
}

#[test]
fn dogstatsd_in_a_file_and_its_mogrifiers_checked_by_field() {
    let config = Config::from_yaml_str(
        "stats:\n  dogstatsd:\n    address: agent:8125\n    extra_tags: {team: edge}\n    mogrifiers:\n      - {pattern: '^ratelimit\\.(.*)$', name: 'rl.$1', tags: {kind: '$1'}}\n",
    )
    .unwrap();
    let dog = config.stats.dogstatsd.as_ref().unwrap();
    assert_eq!(dog.mogrifiers[0].name, "rl.$1");
    assert!(dog.datadog_tags.is_empty(), "not a file setting");
    for (mogrifier, path) in [
        ("{pattern: '(', name: x}", "mogrifiers[0].pattern"),
        ("{pattern: '', name: x}", "mogrifiers[0].pattern"),
        ("{pattern: 'a', name: ''}", "mogrifiers[0].name"),
        (
            "{pattern: 'a', name: x, tags: {k: ''}}",
            "mogrifiers[0].tags",
        ),
    ] {
        let (at, _) = invalid(&format!(
            "stats:\n  dogstatsd:\n    address: agent:8125\n    mogrifiers:\n      - {mogrifier}\n"
        ));
        assert_eq!(at, format!("stats.dogstatsd.{path}"), "{mogrifier}");
    }
    let (at, _) = invalid("stats:\n  dogstatsd: {address: agent}\n");
    assert_eq!(at, "stats.dogstatsd.address");
}

#[test]
fn quota_mode_for_every_descriptor_is_refused_beside_all_or_nothing() {
    let config = |quota: bool| {
        Config::from_yaml_str(&format!(
            "rls: {{quota_mode: {quota}}}\ndomains:\n  - domain: d\n    descriptors:\n      - key: user\n        all_or_nothing: true\n        rate_limit: {{unit: hour, requests_per_unit: 5}}\n"
        ))
    };
    assert!(config(false).unwrap().rule_set().is_ok());
    let error = config(true)
        .and_then(|c| c.rule_set())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("rls.quota_mode") && error.contains("d.user"),
        "{error}"
    );
    // Without all_or_nothing, every descriptor is put in quota mode.
    let rules = Config::from_yaml_str(
        "rls: {quota_mode: true}\ndomains:\n  - domain: d\n    descriptors:\n      - key: user\n        rate_limit: {unit: hour, requests_per_unit: 5}\n",
    )
    .unwrap()
    .rule_set()
    .unwrap();
    assert!(rules.quota_mode());
}

/// The `rlqs` section: its settings as the service reads them, and each bound refused with
/// the field's path.
#[test]
fn the_rlqs_section_is_read_and_bounded() {
    let config = Config::from_yaml_str(
        "rlqs:\n  assignment_ttl: 30s\n  unmatched: { requests_per_unit: 5, unit: minute }\n",
    )
    .expect("valid");
    let settings = crate::rlqs::Settings::from(&config.rlqs);
    assert_eq!(settings.assignment_ttl, Duration::from_secs(30));
    assert_eq!(
        settings.unmatched,
        crate::rlqs::Limit::PerUnit {
            requests: 5,
            unit: Duration::from_secs(60)
        }
    );
    assert_eq!(
        crate::rlqs::Settings::from(&Config::builtin().rlqs),
        crate::rlqs::Settings::default()
    );
    for (yaml, path) in [
        ("rlqs: { assignment_ttl: 0s }\n", "rlqs.assignment_ttl"),
        ("rlqs: { unreported_after: 1s }\n", "rlqs.unreported_after"),
        ("rlqs: { max_pairs: 0 }\n", "rlqs.max_pairs"),
        (
            "rlqs: { unmatched: { requests_per_unit: 1, unit: fortnight } }\n",
            "rlqs.unmatched.unit",
        ),
    ] {
        let (p, _) = invalid(yaml);
        assert_eq!(p, path, "{yaml}");
    }
}

/// A URL from outside the file (`--store`, `FLOODGATE_STORE`, upstream's variables) drops the
/// settings the file wrote for its own store that the store named does not take; what the
/// file's own store does not take either stays, to be refused.
#[test]
fn a_url_from_outside_the_file_drops_what_was_written_for_the_files_store() {
    let file = |yaml: &str| Config::from_yaml_str(yaml).unwrap().store;
    let mut redis =
        file("store: {url: 'redis://h:1', timeout: 20ms, tls_ca_file: ca.pem, nodes: 2}\n");
    let dropped = redis.replace_url("memory".into());
    assert_eq!(dropped, ["nodes", "timeout", "tls_ca_file"]);
    assert_eq!(
        redis.settings().unwrap(),
        crate::config::StoreSettings::Memory(Default::default())
    );
    // The example file, written for the memory store, runs on a Redis named by `--store`.
    let mut memory = file("store: {max_keys: 10, overflow: refuse_new}\n");
    assert_eq!(
        memory.replace_url("redis://h:1".into()),
        ["max_keys", "overflow"]
    );
    assert!(matches!(
        memory.settings(),
        Ok(crate::config::StoreSettings::Redis(_))
    ));
    // Written for no store the file names: kept, and refused by the memory store.
    let mut odd = file("store: {timeout: 20ms}\n");
    assert!(odd.replace_url("memory".into()).is_empty());
    let e = odd.settings().unwrap_err().to_string();
    assert!(e.contains("store.timeout"), "{e}");
    // ...and taken by the Redis it was written for.
    let mut later = file("store: {timeout: 20ms}\n");
    assert!(later.replace_url("redis://h:1".into()).is_empty());
    assert!(later.settings().is_ok());
    let mut cached = file("store: {url: 'redis://h:1', mode: cached, load_budget: 1ms}\n");
    assert_eq!(cached.replace_url("memory".into()), ["mode", "load_budget"]);
    assert!(cached.settings().is_ok());
}

/// Every `store:` block the docs show is one its store takes.
#[test]
fn the_docs_store_blocks_are_taken_by_their_stores() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    let mut seen = 0;
    for page in ["configuration.md", "running-several-nodes.md"] {
        let text = std::fs::read_to_string(docs.join(page)).unwrap();
        for block in text.split("```yaml\n").skip(1) {
            let block = block.split("```").next().unwrap_or_default();
            if !block.starts_with("store:") {
                continue;
            }
            let config =
                Config::from_yaml_str(block).unwrap_or_else(|e| panic!("{page}: {e}\n{block}"));
            config
                .store
                .settings()
                .unwrap_or_else(|e| panic!("{page}: {e}\n{block}"));
            seen += 1;
        }
    }
    assert!(seen >= 3, "{seen} blocks");
}
