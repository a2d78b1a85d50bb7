//! `floodgate serve` end to end: the real binary, started by the one launcher in
//! `common/serve.rs` on ports the OS chooses, with the Redis servers, clusters, memcached,
//! control planes, collectors and browsers of the tests' own, and the offline commands
//! (`check-config`, `replay`, `simulate`, `bench`) run as a user runs them. One binary, a
//! module per feature, so that it links once; the service library's own tests, in process,
//! are floodgate-service's.

mod common;

mod ai_gateway;
mod bench;
mod browser;
mod cached_nodes;
mod cli;
mod cluster_reshaping;
mod cluster_warm_start;
mod config_dir;
mod deploy;
mod docs;
mod dogstatsd;
mod empty_config;
mod envoy_schema;
mod first_screen;
mod image;
mod listener_tls;
mod logs;
mod migration;
mod multi_node;
mod new_stores;
mod pipelines;
mod probes;
mod quota_mode;
mod readme;
mod redis_store;
mod reloads;
mod replay;
mod replay_store;
mod reservations;
mod rlqs;
mod rlqs_fleet;
mod rls_store_failure;
mod server;
mod signals_under_load;
mod simulate;
mod statsd;
mod store_faults;
mod store_refusals;
mod store_startup;
mod token_budgets;
mod traces;
mod upstream_env;
mod upstream_redis;
mod upstream_surface;
mod upstream_swap;
mod utilization;
mod validation;
mod watch;
mod xds;
