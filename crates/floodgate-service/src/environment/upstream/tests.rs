//! Upstream's settings read from environments written as its deployments write them.

use super::*;

#[test]
fn absent_unless_a_distinctive_variable_or_the_entry_point() {
    let generic = Environment::from_pairs([("PORT", "3000"), ("LOG_LEVEL", "debug")]);
    assert!(!Upstream::present(&generic, false));
    assert!(Upstream::present(&generic, true));
    assert!(Upstream::present(
        &Environment::from_pairs([("REDIS_URL", "r:6379")]),
        false
    ));
    assert!(Upstream::present(
        &Environment::from_pairs([("MEMCACHE_HOST_PORT", "m:1")]),
        false
    ));
    // Generic variables still move the listeners, on Floodgate's safer host.
    assert_eq!(
        listener_addresses(&generic, false).unwrap(),
        [Some("127.0.0.1:3000".to_string()), None, None]
    );
}

#[test]
fn defaults_are_upstreams() {
    let up = Upstream::read(&Environment::default(), true)
        .unwrap()
        .unwrap();
    assert_eq!(up.listeners.http, "0.0.0.0:8080");
    assert_eq!(up.listeners.grpc, "0.0.0.0:8081");
    assert_eq!(up.listeners.debug, "0.0.0.0:6070");
    assert_eq!(up.listeners.max_connection_age, Duration::from_secs(86400));
    assert_eq!(up.runtime.root, PathBuf::from("/srv/runtime_data/current"));
    assert_eq!(up.runtime.appdirectory, "config");
    assert!(up.runtime.watch_root && !up.runtime.ignore_dotfiles);
    assert!(up.redis.unix);
    assert_eq!(up.redis.kind, RedisKind::Single);
    assert_eq!(up.redis.url, "/var/run/nutcracker/ratelimit.sock");
    assert_eq!(up.redis.timeout, Duration::from_secs(10));
    assert!(up.per_second.is_none());
    assert_eq!(up.startup.max_elapsed, None);
    assert_eq!(up.behaviour.near_limit_ratio, 0.8f32);
    assert_eq!(up.behaviour.expiration_jitter_max_seconds, 300);
    assert!(up.stats.statsd && !up.stats.statsd_udp);
    assert_eq!(up.stats.statsd_address, "localhost:8125");
    assert_eq!(up.stats.flush_interval, Duration::from_secs(10));
    assert!(up.grpc_tls.is_none() && up.unsupported.is_empty());
}

#[test]
fn an_integration_environment_reads_as_upstream_reads_it() {
    let env = Environment::from_pairs([
        ("USE_STATSD", "true"),
        ("STATSD_HOST", "statsd"),
        ("STATSD_PORT", "9125"),
        ("LOG_LEVEL", "debug"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "redis:6379"),
        ("RUNTIME_ROOT", "/data"),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("MEMCACHE_HOST_PORT", "memcached:11211"),
        ("REDIS_PERSECOND", "true"),
        ("REDIS_PERSECOND_SOCKET_TYPE", "tcp"),
        ("REDIS_PERSECOND_URL", "redis-ps:6380"),
        ("REDIS_AUTH", "user:pa:ss"),
        ("EXTRA_TAGS", "foo:bar,a:b"),
        ("CACHE_KEY_PREFIX", "prefix:"),
        ("GRPC_PORT", "18081"),
    ]);
    let up = Upstream::read(&env, false).unwrap().unwrap();
    assert_eq!(up.stats.statsd_address, "statsd:9125");
    assert!(!up.redis.unix);
    assert_eq!(up.redis.url, "redis:6379");
    assert_eq!(up.redis.auth.as_deref(), Some("user:pa:ss"));
    assert!(
        !format!("{up:?}").contains("pa:ss"),
        "secrets are never shown"
    );
    assert_eq!(up.per_second.as_ref().unwrap().url, "redis-ps:6380");
    assert!(!up.runtime.watch_root);
    assert_eq!(up.behaviour.cache_key_prefix, "prefix:");
    assert_eq!(up.listeners.grpc, "0.0.0.0:18081");
    assert_eq!(up.stats.extra_tags.len(), 2);
    assert!(up.unsupported.is_empty(), "{:?}", up.unsupported);
    assert_eq!(up.memcache, None, "BACKEND_TYPE is redis");
}

#[test]
fn what_cannot_be_honoured_is_refused_naming_the_variable() {
    for (pairs, variable, expected) in [
        (
            vec![("BACKEND_TYPE", "memcache")],
            "MEMCACHE_HOST_PORT",
            "needs the servers",
        ),
        (
            vec![
                ("BACKEND_TYPE", "memcache"),
                ("MEMCACHE_SRV", "_mc._tcp.example"),
                ("MEMCACHE_HOST_PORT", "m:11211"),
            ],
            "MEMCACHE_SRV",
            "both MEMCACHE_HOST_PORT and MEMCACHE_SRV",
        ),
        (
            vec![("BACKEND_TYPE", "cassandra")],
            "BACKEND_TYPE",
            "redis or memcache",
        ),
        (
            vec![("CONFIG_TYPE", "GRPC_XDS_DELTA")],
            "CONFIG_TYPE",
            "GRPC_XDS_SOTW",
        ),
        (vec![("REDIS_TYPE", "ring")], "REDIS_TYPE", "ring"),
        (
            vec![("REDIS_TYPE", "sentinel"), ("REDIS_URL", "h:1")],
            "REDIS_URL",
            "master",
        ),
        (
            vec![("USE_PROMETHEUS", "true")],
            "USE_PROMETHEUS",
            "USE_STATSD=false",
        ),
        (
            vec![("USE_DOG_STATSD", "true")],
            "USE_DOG_STATSD",
            "USE_STATSD=false",
        ),
        (
            vec![
                ("USE_DOG_STATSD", "true"),
                ("USE_STATSD", "false"),
                ("USE_PROMETHEUS", "true"),
            ],
            "USE_DOG_STATSD",
            "USE_PROMETHEUS",
        ),
        (
            vec![
                ("USE_DOG_STATSD", "true"),
                ("USE_STATSD", "false"),
                ("USE_DOG_STATSD_MOGRIFIERS", "x"),
            ],
            "DOG_STATSD_MOGRIFIER_X_PATTERN",
            "PATTERN",
        ),
        (
            vec![("GRPC_SERVER_USE_TLS", "true")],
            "GRPC_SERVER_USE_TLS",
            "GRPC_SERVER_TLS_CERT",
        ),
        (
            vec![("NEAR_LIMIT_RATIO", "2")],
            "NEAR_LIMIT_RATIO",
            "between 0 and 1",
        ),
        (vec![("PORT", "http")], "PORT", "`http`"),
        (
            vec![("REDIS_POOL_SIZE", "0")],
            "REDIS_POOL_SIZE",
            "at least 1",
        ),
        // Upstream's client panics on these at start-up.
        (
            vec![("REDIS_POOL_ON_EMPTY_BEHAVIOR", "create")],
            "REDIS_POOL_ON_EMPTY_BEHAVIOR",
            "CREATE is not supported",
        ),
        (
            vec![
                ("REDIS_PERSECOND", "true"),
                ("REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "ERROR"),
            ],
            "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
            "ERROR is not supported",
        ),
        (
            vec![("REDIS_CLUSTER_PIPELINE_PARALLELISM", "-1")],
            "REDIS_CLUSTER_PIPELINE_PARALLELISM",
            "below 0",
        ),
        (
            vec![("REDIS_PIPELINE_WINDOW", "150")],
            "REDIS_PIPELINE_WINDOW",
            "duration",
        ),
        (
            vec![("REDIS_PIPELINE_LIMIT", "many")],
            "REDIS_PIPELINE_LIMIT",
            "many",
        ),
    ] {
        let env = Environment::from_pairs(pairs.clone());
        let e = Upstream::read(&env, true).unwrap_err().to_string();
        assert!(
            e.contains(variable) && e.contains(expected),
            "{pairs:?}: {e}"
        );
    }
}

#[test]
fn the_pools_tuning_is_read_and_named_nowhere_as_unsupported() {
    let env = Environment::from_pairs([
        ("REDIS_PIPELINE_WINDOW", "150us"),
        ("REDIS_PIPELINE_LIMIT", "8"),
        ("REDIS_CLUSTER_PIPELINE_PARALLELISM", "0"),
        ("REDIS_POOL_ON_EMPTY_BEHAVIOR", "wait"),
    ]);
    let up = Upstream::read(&env, true).unwrap().unwrap();
    assert!(up.unsupported.is_empty(), "{:?}", up.unsupported);
}

#[test]
fn every_variable_is_listed_once() {
    let mut names: Vec<_> = VARIABLES.iter().map(|v| v.name).collect();
    names.sort_unstable();
    let len = names.len();
    names.dedup();
    assert_eq!(names.len(), len);
    for v in VARIABLES {
        assert_eq!(
            v.support == Support::Honoured,
            v.note.is_empty(),
            "{}",
            v.name
        );
    }
}

#[test]
fn ignored_arguments_are_named_without_their_values() {
    let args: Vec<std::ffi::OsString> = [
        "--quotaRateLimitServiceAddr=rl.ns",
        "-v",
        "--password",
        "hunter2",
    ]
    .into_iter()
    .map(Into::into)
    .collect();
    assert_eq!(
        ignored_argument_names(&args),
        ["--quotaRateLimitServiceAddr=…", "-v", "--password", "…"]
    );
}

#[test]
fn dogstatsd_alone_or_under_disable_stats() {
    let env = Environment::from_pairs([
        ("USE_DOG_STATSD", "true"),
        ("USE_STATSD", "false"),
        ("STATSD_HOST", "datadog-agent"),
        ("USE_DOG_STATSD_MOGRIFIERS", "m"),
        ("DOG_STATSD_MOGRIFIER_M_PATTERN", "^ratelimit"),
        ("DOG_STATSD_MOGRIFIER_M_NAME", "rl"),
    ]);
    let up = Upstream::read(&env, false).unwrap().unwrap();
    assert!(!up.stats.statsd && up.stats.prometheus.is_none());
    assert_eq!(up.stats.statsd_address, "datadog-agent:8125");
    assert_eq!(up.stats.dogstatsd.as_ref().map(Vec::len), Some(1));
    // DISABLE_STATS wins before the sinks are compared, as in upstream's runner.
    let env = Environment::from_pairs([
        ("USE_DOG_STATSD", "true"),
        ("DISABLE_STATS", "true"),
        ("USE_DOG_STATSD_MOGRIFIERS", "broken"),
    ]);
    let up = Upstream::read(&env, false).unwrap().unwrap();
    assert!(up.stats.dogstatsd.is_none() && !up.stats.statsd);
}
