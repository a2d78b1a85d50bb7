//! Floodgate started as envoyproxy/ratelimit's deployments start it: a runtime directory,
//! upstream's variables on loopback ports the OS chooses, the process found by its listening
//! line.

use std::path::Path;

use super::serve::{bare_command, start, Service, TempDir};

/// Domain `rl`: `limit` requests an hour per `user`, in upstream's format.
pub fn domain(limit: u32) -> String {
    format!(
        "domain: rl\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: {limit}\n"
    )
}

/// A fresh runtime directory (`RUNTIME_ROOT`) named after `name`, holding
/// `ratelimit/config/rl.yaml` with [`domain`]`(limit)`; removed when dropped.
pub fn runtime_dir(name: &str, limit: u32) -> TempDir {
    let root = std::env::temp_dir().join(format!("floodgate-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let config = root.join("ratelimit/config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("rl.yaml"), domain(limit)).unwrap();
    TempDir(root)
}

/// Upstream's variables for a runtime directory at `root` (subdirectory `ratelimit`), Redis at
/// `redis` (`host:port`, over TCP), every listener on 127.0.0.1 with a port the OS chooses,
/// statsd off.
pub fn loopback_env(root: &Path, redis: &str) -> Vec<(&'static str, String)> {
    vec![
        ("USE_STATSD", "false".into()),
        ("REDIS_SOCKET_TYPE", "tcp".into()),
        ("REDIS_URL", redis.to_string()),
        ("RUNTIME_ROOT", root.display().to_string()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        // Not a test of a slow store: see `serve::GENEROUS_STORE_TIMEOUT`.
        (
            "FLOODGATE_STORE_TIMEOUT",
            super::serve::GENEROUS_STORE_TIMEOUT.into(),
        ),
    ]
    .into_iter()
    .chain(loopback_listeners())
    .collect()
}

/// Every listener on 127.0.0.1 with a port the OS chooses, in upstream's variables.
pub fn loopback_listeners() -> Vec<(&'static str, String)> {
    vec![
        ("HOST", "127.0.0.1".into()),
        ("PORT", "0".into()),
        ("GRPC_HOST", "127.0.0.1".into()),
        ("GRPC_PORT", "0".into()),
        ("DEBUG_HOST", "127.0.0.1".into()),
        ("DEBUG_PORT", "0".into()),
    ]
}

/// `env` with `name` set to `value` (replacing it, when it is there).
pub fn set(env: &mut Vec<(&'static str, String)>, name: &'static str, value: impl Into<String>) {
    env.retain(|(k, _)| *k != name);
    env.push((name, value.into()));
}

/// Starts `program args…` with nothing but `env`, and waits for its listening line.
pub fn launch(program: &Path, args: &[&str], env: &[(&'static str, String)]) -> Service {
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut command = bare_command(program, &pairs);
    command.args(args);
    start(command)
}

/// The floodgate binary, also linked as `ratelimit` (upstream's entry point) in `dir`.
pub fn as_ratelimit(dir: &Path) -> std::path::PathBuf {
    let link = dir.join("ratelimit");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_floodgate"), &link).unwrap();
    link
}

/// `floodgate serve` with nothing but `env`.
pub fn serve_with(env: &[(&'static str, String)]) -> Service {
    launch(Path::new(env!("CARGO_BIN_EXE_floodgate")), &["serve"], env)
}

/// The status gRPC health checking gives the `ratelimit` service (upstream's probe) over
/// `channel`.
pub async fn ratelimit_health(
    channel: tonic::transport::Channel,
) -> floodgate_server::grpc::ServingStatus {
    floodgate_server::grpc::HealthClient::new(channel)
        .check(floodgate_server::grpc::HealthCheckRequest {
            service: "ratelimit".into(),
        })
        .await
        .expect("a health answer")
        .into_inner()
        .status()
}
