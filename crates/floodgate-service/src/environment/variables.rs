//! Every one of envoyproxy/ratelimit's variables, with what Floodgate does with it: the list
//! start-up's warnings and the table in docs/envoyproxy-ratelimit.md come from.

/// What Floodgate does with one of upstream's variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    /// Read and honoured as upstream honours it.
    Honoured,
    /// Read and honoured, with a difference the note states.
    Differs,
    /// Not supported: named in a warning at start-up when set.
    Unsupported,
    /// Read and checked as upstream reads it, where it has no effect either (the note says
    /// why).
    NoEffect,
}

/// One of upstream's variables (see [`VARIABLES`]).
#[derive(Clone, Copy, Debug)]
pub struct Variable {
    /// Its name; a trailing `*` stands for every variable with that prefix.
    pub name: &'static str,
    /// What Floodgate does with it.
    pub support: Support,
    /// Why, for the difference or the refusal.
    pub note: &'static str,
}

const fn honoured(name: &'static str) -> Variable {
    Variable {
        name,
        support: Support::Honoured,
        note: "",
    }
}

const fn differs(name: &'static str, note: &'static str) -> Variable {
    Variable {
        name,
        support: Support::Differs,
        note,
    }
}

const fn no_effect(name: &'static str, note: &'static str) -> Variable {
    Variable {
        name,
        support: Support::NoEffect,
        note,
    }
}

/// The variables that only count as upstream's settings being present along with another.
const GENERIC: [&str; 4] = ["HOST", "PORT", "LOG_LEVEL", "LOG_FORMAT"];

/// Every variable of upstream's `settings.go` (and the few read elsewhere, `STATSD_PROTOCOL`),
/// with what Floodgate does with it.
pub const VARIABLES: &[Variable] = &[
    honoured("HOST"),
    honoured("PORT"),
    honoured("GRPC_HOST"),
    honoured("GRPC_PORT"),
    honoured("DEBUG_HOST"),
    honoured("DEBUG_PORT"),
    honoured("GRPC_UDS"),
    honoured("GRPC_MAX_CONNECTION_AGE"),
    honoured("GRPC_MAX_CONNECTION_AGE_GRACE"),
    honoured("GRPC_SERVER_USE_TLS"),
    honoured("GRPC_SERVER_TLS_CERT"),
    honoured("GRPC_SERVER_TLS_KEY"),
    differs("GRPC_CLIENT_TLS_CACERT", "client certificates are checked against this file's CAs only, not also the system's roots"),
    honoured("GRPC_CLIENT_TLS_SAN"),
    differs("LOG_LEVEL", "read when RUST_LOG is not set; `trace`, `debug`, `info`, `warn`/`warning`, `error`, and `fatal`/`panic` as `error`"),
    differs("LOG_FORMAT", "`json` writes one JSON object a line with Floodgate's field names (`timestamp`, `level`, `fields.message`), not logrus's `@timestamp`/`@message`"),
    honoured("CONFIG_TYPE"),
    honoured("CONFIG_GRPC_XDS_SERVER_URL"),
    honoured("CONFIG_GRPC_XDS_NODE_ID"),
    differs("CONFIG_GRPC_XDS_NODE_METADATA", "an item without `=` is refused at start-up, naming it, where upstream drops it silently"),
    differs("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "bounds each attempt to connect; the wait between attempts is XDS_CLIENT_BACKOFF_*'s"),
    honoured("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"),
    honoured("CONFIG_GRPC_XDS_SERVER_USE_TLS"),
    honoured("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"),
    honoured("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"),
    honoured("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"),
    honoured("CONFIG_GRPC_XDS_SERVER_TLS_SAN"),
    honoured("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"),
    honoured("XDS_CLIENT_BACKOFF_MAX_INTERVAL"),
    honoured("XDS_CLIENT_BACKOFF_RANDOM_FACTOR"),
    honoured("XDS_CLIENT_BACKOFF_JITTER"),
    honoured("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"),
    honoured("FORCE_START_WITHOUT_INITIAL_CONFIG"),
    honoured("RUNTIME_ROOT"),
    honoured("RUNTIME_SUBDIRECTORY"),
    honoured("RUNTIME_APPDIRECTORY"),
    honoured("RUNTIME_IGNOREDOTFILES"),
    differs("RUNTIME_WATCH_ROOT", "changes are debounced (250 ms) and also seen inside the tree, so a burst of writes is one reload"),
    honoured("MERGE_DOMAIN_CONFIG"),
    honoured("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED"),
    differs("BACKEND_TYPE", "`redis` and `memcache`; on memcached every hit is counted with atomic `incr` and decided from the count it returns, so concurrent calls never over-admit (upstream reads, decides, then increments in the background)"),
    honoured("SHADOW_MODE"),
    honoured("QUOTA_MODE"),
    honoured("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"),
    honoured("NEAR_LIMIT_RATIO"),
    honoured("CACHE_KEY_PREFIX"),
    honoured("EXPIRATION_JITTER_MAX_SECONDS"),
    differs("LOCAL_CACHE_SIZE_IN_BYTES", "a bounded map of over-limit keys until their window ends, not freecache: no 512 KiB minimum, and no `ratelimit.localcache.*` gauges"),
    honoured("RESPONSE_DYNAMIC_METADATA"),
    honoured("LIMIT_RESPONSE_HEADERS_ENABLED"),
    honoured("LIMIT_LIMIT_HEADER"),
    honoured("LIMIT_REMAINING_HEADER"),
    honoured("LIMIT_RESET_HEADER"),
    honoured("REDIS_SOCKET_TYPE"),
    honoured("REDIS_TYPE"),
    honoured("REDIS_URL"),
    differs("REDIS_POOL_SIZE", "read and checked; Floodgate pipelines every call on one multiplexed connection per server, which needs no pool"),
    honoured("REDIS_AUTH"),
    honoured("REDIS_TLS"),
    honoured("REDIS_TLS_CLIENT_CERT"),
    honoured("REDIS_TLS_CLIENT_KEY"),
    honoured("REDIS_TLS_CACERT"),
    honoured("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"),
    differs("REDIS_PIPELINE_WINDOW", "read and checked (a duration); there is no flush window to wait for: calls that queue while two are in flight go to Redis together in one script call (group commit), so writes are batched under load without a wait"),
    no_effect("REDIS_PIPELINE_LIMIT", "read and checked (a whole number), as upstream, where it does nothing either"),
    differs("REDIS_CLUSTER_PIPELINE_PARALLELISM", "read and checked (below 0 stops start-up, as upstream); a call's pipelines to a cluster's masters always go out at once, unbounded"),
    honoured("REDIS_PERSECOND"),
    honoured("REDIS_PERSECOND_SOCKET_TYPE"),
    honoured("REDIS_PERSECOND_TYPE"),
    honoured("REDIS_PERSECOND_URL"),
    differs("REDIS_PERSECOND_POOL_SIZE", "as REDIS_POOL_SIZE"),
    honoured("REDIS_PERSECOND_AUTH"),
    honoured("REDIS_PERSECOND_TLS"),
    honoured("REDIS_SENTINEL_AUTH"),
    honoured("REDIS_PERSECOND_SENTINEL_AUTH"),
    differs("REDIS_PERSECOND_PIPELINE_WINDOW", "as REDIS_PIPELINE_WINDOW"),
    no_effect("REDIS_PERSECOND_PIPELINE_LIMIT", "as REDIS_PIPELINE_LIMIT"),
    differs("REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "as REDIS_CLUSTER_PIPELINE_PARALLELISM"),
    differs("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "health follows the decisions: the last call that wrote or failed, and a probe on the write path every second while it fails and no call tells"),
    differs("REDIS_TIMEOUT", "bounds connecting (store.connect_timeout), as upstream; each call is also bounded by store.timeout (50 ms by default), which upstream does not have"),
    differs("REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR", "true and false as that setting would; unset, a READONLY answer drops the connection (upstream keeps it, and fails until restarted after a failover behind a DNS name). Upstream does not have this variable at f2fb157: it exists only in upstream's open pull request #1191, read here so that a deployment written for it works"),
    differs("REDIS_PERSECOND_TIMEOUT", "as REDIS_TIMEOUT"),
    differs("REDIS_POOL_ON_EMPTY_BEHAVIOR", "WAIT, upstream's one working value, is taken; CREATE and ERROR stop start-up naming it, as upstream panics on them; with no pool, a call never waits for a connection, only for its answer (store.timeout)"),
    differs("REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "as REDIS_POOL_ON_EMPTY_BEHAVIOR"),
    differs("REDIS_STARTUP_INITIAL_INTERVAL", "the first retry's wait; later waits double up to REDIS_STARTUP_MAX_INTERVAL, without jitter"),
    honoured("REDIS_STARTUP_MAX_INTERVAL"),
    differs("REDIS_STARTUP_MAX_ELAPSED_TIME", "past it, start-up stops with an error naming the store (upstream panics); 0 retries for ever, as upstream"),
    honoured("MEMCACHE_HOST_PORT"),
    differs("MEMCACHE_MAX_IDLE_CONNS", "the connections kept per server, each carrying one batch of calls at a time; calls that overlap wait for the next batch (one write for all) rather than open connections of their own, as upstream's do"),
    differs("MEMCACHE_SRV", "the servers the SRV record names, sorted as upstream sorts them; a lookup that fails at start-up is retried as any store's start-up is (upstream panics)"),
    honoured("MEMCACHE_SRV_REFRESH"),
    honoured("MEMCACHE_TLS"),
    honoured("MEMCACHE_TLS_CACERT"),
    honoured("MEMCACHE_TLS_CLIENT_CERT"),
    honoured("MEMCACHE_TLS_CLIENT_KEY"),
    honoured("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION"),
    honoured("USE_STATSD"),
    honoured("STATSD_HOST"),
    honoured("STATSD_PORT"),
    honoured("STATSD_PROTOCOL"),
    honoured("EXTRA_TAGS"),
    honoured("STATS_FLUSH_INTERVAL"),
    differs("DISABLE_STATS", "turns statsd and the Prometheus listener off; the HTTP port's /metrics keeps counting"),
    differs("USE_DOG_STATSD", "datadog-go's own telemetry (`datadog.dogstatsd.client.*`) and its container-ID field are not sent; the response time goes at each flush, a sample of at most 512 calls with its sample rate, not as each call ends; an address that does not resolve is tried again at each push, where upstream stops at start-up"),
    honoured("USE_DOG_STATSD_MOGRIFIERS"),
    differs("DOG_STATSD_MOGRIFIER_*", "patterns are read by Rust's regex crate: RE2's syntax, but `\\d`, `\\w`, `\\s` and `\\b` also match non-ASCII digits, letters and spaces, where Go's match ASCII only"),
    differs("USE_PROMETHEUS", "PROMETHEUS_ADDR serves upstream's series as its default statsd_exporter mapping names them (the response-time histogram with Floodgate's bucket bounds) after Floodgate's own, which the HTTP port's /metrics always serves"),
    honoured("PROMETHEUS_ADDR"),
    honoured("PROMETHEUS_PATH"),
    differs("PROMETHEUS_MAPPER_YAML", "read at start-up; its globs, expressions, labels, drop actions, match_metric_type and scale apply, while timer_type, buckets, quantiles and ttl are accepted and not used (the response time keeps Floodgate's bucket bounds)"),
    honoured("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS"),
    honoured("TRACING_ENABLED"),
    honoured("TRACING_SERVICE_NAME"),
    honoured("TRACING_SERVICE_NAMESPACE"),
    honoured("TRACING_SERVICE_INSTANCE_ID"),
    honoured("TRACING_SAMPLING_RATE"),
    honoured("TRACING_EXPORTER_PROTOCOL"),
    honoured("OTEL_EXPORTER_OTLP_ENDPOINT"),
    honoured("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
    honoured("OTEL_EXPORTER_OTLP_INSECURE"),
    honoured("OTEL_EXPORTER_OTLP_TRACES_INSECURE"),
    honoured("OTEL_EXPORTER_OTLP_CERTIFICATE"),
    honoured("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"),
    honoured("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"),
    honoured("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE"),
    honoured("OTEL_EXPORTER_OTLP_CLIENT_KEY"),
    honoured("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY"),
    honoured("OTEL_EXPORTER_OTLP_HEADERS"),
    honoured("OTEL_EXPORTER_OTLP_TRACES_HEADERS"),
    honoured("OTEL_EXPORTER_OTLP_TIMEOUT"),
    honoured("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"),
    honoured("OTEL_EXPORTER_OTLP_COMPRESSION"),
    honoured("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"),
    honoured("OTEL_BSP_*"),
    differs("OTEL_RESOURCE_ATTRIBUTES", "a pair without `=` stops start-up naming it, where upstream logs it and keeps the others"),
    no_effect("OTEL_SERVICE_NAME", "as upstream, where TRACING_SERVICE_NAME (default RateLimit) always names the service"),
    differs("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "a value that is not a whole number stops start-up naming it, where upstream ignores it"),
    differs("OTEL_ATTRIBUTE_COUNT_LIMIT", "as OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT"),
    differs("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "as OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT"),
    differs("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "as OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT"),
    differs("OTEL_SPAN_EVENT_COUNT_LIMIT", "Floodgate's spans carry no events or links (upstream's gRPC instrumentation adds an event per message), so there is nothing to limit"),
    differs("OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", "as OTEL_SPAN_EVENT_COUNT_LIMIT"),
    differs("OTEL_SPAN_LINK_COUNT_LIMIT", "as OTEL_SPAN_EVENT_COUNT_LIMIT"),
    differs("OTEL_LINK_ATTRIBUTE_COUNT_LIMIT", "as OTEL_SPAN_EVENT_COUNT_LIMIT"),
    no_effect("OTEL_TRACES_SAMPLER", "as upstream, whose sampler follows the caller and keeps TRACING_SAMPLING_RATE of its own traces"),
    no_effect("OTEL_TRACES_SAMPLER_ARG", "as OTEL_TRACES_SAMPLER"),
    no_effect("OTEL_PROPAGATORS", "as upstream: W3C trace context, B3 and baggage, always"),
    no_effect("OTEL_*", "as upstream, which exports traces alone and reads no other OTEL_ variable (the protocol is TRACING_EXPORTER_PROTOCOL's)"),
];

/// Whether `name` only counts as upstream's settings being present along with another: the
/// [`GENERIC`] ones, and the trace settings, which a `floodgate serve` of any kind reads.
pub(super) fn is_generic(name: &str) -> bool {
    GENERIC.contains(&name) || name.starts_with("TRACING_") || name.starts_with("OTEL_")
}
