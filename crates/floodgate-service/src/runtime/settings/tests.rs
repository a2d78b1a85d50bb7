use super::*;
use crate::environment::upstream::Redis;
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

fn args(line: &[&str]) -> ServeArgs {
    Cli::parse_from(std::iter::once("serve").chain(line.iter().copied())).serve
}

fn redis(kind: RedisKind, unix: bool, url: &str, auth: Option<&str>) -> Redis {
    Redis {
        unix,
        kind,
        url: url.into(),
        auth: auth.map(str::to_string),
        sentinel_auth: None,
        tls: false,
        pool_size: 10,
        timeout: std::time::Duration::from_secs(10),
    }
}

#[test]
fn upstreams_redis_settings_name_a_store() {
    use RedisKind::*;
    assert_eq!(
        store_url(&redis(Single, false, "redis:6379", None)),
        "redis://redis:6379"
    );
    assert_eq!(
        store_url(&redis(Single, false, "redis:6379", Some("u:p@ss"))),
        "redis://u:p%40ss@redis:6379"
    );
    assert_eq!(
        store_url(&redis(Single, false, "redis:6379", Some("secret"))),
        "redis://:secret@redis:6379"
    );
    assert_eq!(
        store_url(&redis(Single, false, "redis://a:b@h:1/2", Some("c"))),
        "redis://:c@h:1/2"
    );
    assert_eq!(
        store_url(&redis(Single, false, "redis://a:b@h:1/2", None)),
        "redis://a:b@h:1/2"
    );
    assert_eq!(
        store_url(&redis(Single, true, "/var/run/r.sock", Some("u:p"))),
        "unix:///var/run/r.sock?pass=p&user=u"
    );
    assert_eq!(
        store_url(&redis(Cluster, true, "a:1,b:2", None)),
        "redis-cluster://a:1,b:2"
    );
    let mut sentinel = redis(Sentinel, false, "mymaster,s1:26379,s2:26379", Some("p"));
    sentinel.sentinel_auth = Some("sp".into());
    sentinel.tls = true;
    assert_eq!(
        store_url(&sentinel),
        "rediss-sentinel://:p@s1:26379,s2:26379/mymaster?sentinel_pass=sp"
    );
}

#[test]
fn precedence_is_flag_config_floodgate_upstream_default() {
    let env = Environment::from_pairs([
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "upstream:6379"),
        ("PORT", "9000"),
        ("MERGE_DOMAIN_CONFIG", "true"),
    ]);
    let none = args(&[]);
    let startup = Startup::read(&none, env.clone(), false).unwrap();
    assert!(startup.upstream.is_some());
    // Upstream's runtime directory, watched.
    assert!(matches!(startup.source, ConfigSource::Runtime(_)) && startup.watch);
    let mut config = Config::default();
    startup.apply_store(none.store.url.as_deref(), &mut config);
    assert_eq!(config.store.url.as_deref(), Some("redis://upstream:6379"));
    let addresses = startup.addresses(&none, &config).unwrap();
    assert_eq!(addresses.http, "0.0.0.0:9000".parse().unwrap());
    assert_eq!(
        addresses.grpc,
        GrpcAddress::Tcp("0.0.0.0:8081".parse().unwrap())
    );
    assert_eq!(addresses.debug, Some("0.0.0.0:6070".parse().unwrap()));
    assert_eq!(startup.overrides.defaults.merge_domains, Some(true));
    assert_eq!(
        startup.overrides.defaults.on_store_error,
        Some(crate::rls::StoreFailureAnswer::Unavailable)
    );
    // FLOODGATE_* beats upstream.
    let mut both = env.clone();
    both = Environment::from_pairs(
        both.names()
            .map(|n| (n.to_string(), both.string(n).unwrap().to_string()))
            .chain([
                ("FLOODGATE_STORE".to_string(), "memory".to_string()),
                ("FLOODGATE_HTTP".to_string(), "127.0.0.1:7000".to_string()),
                ("FLOODGATE_MERGE_DOMAINS".to_string(), "false".to_string()),
                (
                    "FLOODGATE_CONFIG".to_string(),
                    "/etc/floodgate.yaml".to_string(),
                ),
            ]),
    );
    let startup = Startup::read(&none, both, false).unwrap();
    assert_eq!(
        startup.source,
        ConfigSource::Path("/etc/floodgate.yaml".into())
    );
    let mut config = Config::default();
    startup.apply_store(none.store.url.as_deref(), &mut config);
    assert_eq!(config.store.url.as_deref(), Some("memory"));
    let addresses = startup.addresses(&none, &config).unwrap();
    assert_eq!(addresses.http, "127.0.0.1:7000".parse().unwrap());
    assert_eq!(startup.overrides.defaults.merge_domains, Some(false));
    // The config beats the environment; the flag beats the config.
    let mut config = Config::from_yaml_str(
        "http: 127.0.0.1:7100\nstore: {url: 'redis://config:1'}\ndomains: []\n",
    )
    .unwrap();
    startup.apply_store(none.store.url.as_deref(), &mut config);
    assert_eq!(config.store.url.as_deref(), Some("redis://config:1"));
    assert_eq!(
        startup.addresses(&none, &config).unwrap().http,
        "127.0.0.1:7100".parse().unwrap()
    );
    let flags = args(&[
        "--http",
        "127.0.0.1:7200",
        "--store",
        "memory",
        "--config",
        "/x.yaml",
    ]);
    let startup = Startup::read(&flags, env, false).unwrap();
    assert_eq!(startup.source, ConfigSource::Path("/x.yaml".into()));
    startup.apply_store(flags.store.url.as_deref(), &mut config);
    assert_eq!(config.store.url.as_deref(), Some("memory"));
    assert_eq!(
        startup.addresses(&flags, &config).unwrap().http,
        "127.0.0.1:7200".parse().unwrap()
    );
}

/// `REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR` means what it means upstream when set (true:
/// drop the connection on `READONLY`; false: keep it); unset, ours drops it. `REDIS_TIMEOUT`
/// bounds setting a connection up, as upstream's dial timeout. The file beats both.
#[test]
fn upstreams_readonly_and_timeout_settings_reach_the_store() {
    let read = |pairs: &[(&str, &str)], yaml: &str| {
        let env = Environment::from_pairs(
            [("REDIS_SOCKET_TYPE", "tcp"), ("REDIS_URL", "upstream:6379")]
                .into_iter()
                .chain(pairs.iter().copied()),
        );
        let startup = Startup::read(&args(&[]), env, false).unwrap();
        let mut config = Config::from_yaml_str(yaml).unwrap();
        startup.apply_store(None, &mut config);
        match config.store.settings() {
            Ok(crate::config::StoreSettings::Redis(redis)) => redis,
            other => panic!("a Redis store: {other:?}"),
        }
    };
    let close = "REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR";
    assert!(read(&[], "domains: []\n").redis.reconnect_on_readonly);
    assert!(
        read(&[(close, "true")], "domains: []\n")
            .redis
            .reconnect_on_readonly
    );
    assert!(
        !read(&[(close, "false")], "domains: []\n")
            .redis
            .reconnect_on_readonly
    );
    let file = "store: {reconnect_on_readonly: true}\ndomains: []\n";
    assert!(read(&[(close, "false")], file).redis.reconnect_on_readonly);
    let store = read(&[("REDIS_TIMEOUT", "5s")], "domains: []\n");
    assert_eq!(
        store.link.connect_timeout.map(|d| d.0),
        Some(std::time::Duration::from_secs(5))
    );
}

#[test]
fn logging_reads_rust_log_then_log_level() {
    let read = |pairs: &[(&str, &str)], present| {
        Logging::read(&Environment::from_pairs(pairs.iter().copied()), present)
    };
    assert_eq!(
        read(&[], false).unwrap().filter,
        format!("info,{QUIET_AT_WARN}")
    );
    assert_eq!(read(&[], true).unwrap().filter, "warn");
    // A level: Floodgate's lines at that level, HTTP/2, TLS and the rest at warn.
    assert_eq!(
        read(&[("LOG_LEVEL", "DEBUG")], true).unwrap().filter,
        format!("debug,{QUIET_AT_WARN}")
    );
    assert!(QUIET_AT_WARN.contains("h2=warn,hyper=warn"));
    assert!(QUIET_AT_WARN.contains("tonic=warn") && QUIET_AT_WARN.contains("rustls=warn"));
    assert_eq!(
        read(&[("LOG_LEVEL", "fatal")], true).unwrap().filter,
        "error"
    );
    assert_eq!(
        read(
            &[("LOG_LEVEL", "debug"), ("RUST_LOG", "floodgate=trace")],
            true
        )
        .unwrap()
        .filter,
        "floodgate=trace"
    );
    assert!(read(&[("LOG_FORMAT", "JSON")], true).unwrap().json);
    assert!(!read(&[("LOG_FORMAT", "text")], true).unwrap().json);
    let e = read(&[("LOG_LEVEL", "loud")], true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("LOG_LEVEL") && e.contains("loud"), "{e}");
}

#[test]
fn without_upstreams_settings_floodgates_defaults_stay() {
    let none = args(&[]);
    let startup = Startup::read(&none, Environment::default(), false).unwrap();
    assert!(startup.upstream.is_none());
    assert_eq!(startup.source, ConfigSource::Builtin);
    let mut config = Config::default();
    startup.apply_store(none.store.url.as_deref(), &mut config);
    assert_eq!(config.store.url, None);
    let addresses = startup.addresses(&none, &config).unwrap();
    assert_eq!(addresses.http, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(addresses.debug, None);
    assert_eq!(startup.overrides.defaults, Defaults::default());
    // The generic PORT alone moves the port, on Floodgate's host.
    let startup = Startup::read(&none, Environment::from_pairs([("PORT", "9000")]), false).unwrap();
    assert!(startup.upstream.is_none());
    let addresses = startup.addresses(&none, &config).unwrap();
    assert_eq!(addresses.http, "127.0.0.1:9000".parse().unwrap());
    // GRPC_UDS with upstream's settings: a unix socket.
    let env = Environment::from_pairs([("GRPC_UDS", "/tmp/rl.sock"), ("USE_STATSD", "false")]);
    let startup = Startup::read(&none, env, false).unwrap();
    assert_eq!(
        startup.addresses(&none, &config).unwrap().grpc,
        GrpcAddress::Unix("/tmp/rl.sock".into())
    );
    let bad = Startup::read(
        &none,
        Environment::from_pairs([("FLOODGATE_HTTP", "nowhere")]),
        false,
    )
    .unwrap()
    .addresses(&none, &config)
    .unwrap_err()
    .to_string();
    assert!(bad.contains("FLOODGATE_HTTP"), "{bad}");
}

#[test]
fn upstreams_memcache_backend_is_the_memcached_store_in_upstreams_layout() {
    let env = Environment::from_pairs([
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_HOST_PORT", "mc1:11211, mc2:11211"),
        ("MEMCACHE_MAX_IDLE_CONNS", "5"),
        ("MEMCACHE_TLS", "true"),
        ("MEMCACHE_TLS_CACERT", "/etc/ca.pem"),
        ("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "true"),
        ("REDIS_PERSECOND", "true"),
        ("REDIS_PERSECOND_URL", "ps:6380"),
    ]);
    let none = args(&[]);
    let startup = Startup::read(&none, env, false).unwrap();
    let mut config = Config::default();
    startup.apply_store(none.store.url.as_deref(), &mut config);
    assert_eq!(
        config.store.url.as_deref(),
        Some("memcache://mc1:11211,mc2:11211")
    );
    let crate::config::StoreSettings::Memcached(store) = config.store.settings().unwrap() else {
        panic!("a memcached store");
    };
    assert_eq!(store.max_idle_connections, Some(5));
    assert!(store.tls && store.tls_files.tls_skip_hostname_verification);
    assert_eq!(
        store.tls_files.tls_ca_file.as_deref(),
        Some(std::path::Path::new("/etc/ca.pem"))
    );
    assert_eq!(store.layout.layout, crate::config::StoreLayout::Envoyproxy);
    // Upstream's memcache backend has no per-second store (a memcached store has no such
    // setting: nothing was filled in).
    assert!(!config.store.writes("per_second_url"));
}

#[test]
fn upstreams_memcache_srv_is_the_memcached_store_on_that_record() {
    let env = Environment::from_pairs([
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_SRV", "_memcache._tcp.cache.example.org"),
        ("MEMCACHE_SRV_REFRESH", "30s"),
    ]);
    let none = args(&[]);
    let startup = Startup::read(&none, env, false).unwrap();
    let mut config = Config::default();
    startup.apply_store(none.store.url.as_deref(), &mut config);
    assert_eq!(
        config.store.url.as_deref(),
        Some("memcache+srv://_memcache._tcp.cache.example.org")
    );
    let crate::config::StoreSettings::Memcached(store) = config.store.settings().unwrap() else {
        panic!("a memcached store");
    };
    assert_eq!(
        store.srv_refresh.map(|d| d.0),
        Some(std::time::Duration::from_secs(30))
    );
    // Upstream's default, 0: looked up only at start.
    let env = Environment::from_pairs([
        ("BACKEND_TYPE", "memcache"),
        ("MEMCACHE_SRV", "_memcache._tcp.cache.example.org"),
    ]);
    let startup = Startup::read(&none, env, false).unwrap();
    let mut config = Config::default();
    startup.apply_store(none.store.url.as_deref(), &mut config);
    assert!(!config.store.writes("srv_refresh"));
}
