//! The two stores beside memory and Redis, end to end through `floodgate serve`:
//! - memcached (`memcache://`): three nodes on two `memcached` servers the test starts on free
//!   loopback ports admit exactly a fixed window's limit between them; `check-config` refuses
//!   an algorithm memcached cannot run, naming the stage, the algorithm and the store; upstream's
//!   `BACKEND_TYPE=memcache` counts in upstream's keys on the server gomemcache would pick, with
//!   the servers listed (`MEMCACHE_HOST_PORT`) or named by a DNS SRV record (`MEMCACHE_SRV`,
//!   answered by a dnsmasq of the test's own that the node's `/etc/resolv.conf` names, in a
//!   mount namespace of its own);
//! - the durable file store (`file:///dir`): a graceful stop (SIGTERM) and a start lose no
//!   count; a directory that cannot be used is refused at start-up.

use crate::common;

use std::sync::Arc;

use common::serve::{config_file, serve, serve_refused, Service, TempDir};
use common::upstream::{loopback_env, loopback_listeners, runtime_dir, serve_with, set as set_var};
use floodgate_harness::{DnsServer, MemcachedServer, SrvRecord};
use serde_json::json;
use tokio::task::JoinSet;

const WINDOW: &str = r#"
store: {timeout: 2s}
limits:
  window: {algorithm: fixed_window, limit: 25, window: 1h}
plans: {free: {algorithm: fixed_window, limit: 1000, window: 1h}}
default_plan: free
limiters:
  request_rate: {}
domains: []
"#;

/// `n` concurrent checks of `limiter` on `key`, dealt round-robin to `nodes`: how many were
/// admitted (no call may fail open).
async fn admitted(nodes: &Arc<Vec<Service>>, limiter: &str, key: &str, n: usize) -> usize {
    let client = reqwest::Client::new();
    let mut calls = JoinSet::new();
    for i in 0..n {
        let (nodes, client) = (nodes.clone(), client.clone());
        let body = json!({"limiter": limiter, "key": key});
        calls.spawn(async move {
            nodes[i % nodes.len()]
                .post(&client, "/v1/check", &body)
                .await
        });
    }
    let mut allowed = 0;
    while let Some(answer) = calls.join_next().await {
        let (status, d) = answer.expect("the call task ends");
        assert_eq!(status, 200, "{d}");
        assert!(d.get("failed_open").is_none(), "{d}");
        if d["allowed"] == json!(true) {
            allowed += 1;
        }
    }
    allowed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_on_memcached_admit_exactly_the_limit() {
    let servers = [MemcachedServer::start(), MemcachedServer::start()];
    let url = format!(
        "memcache://{},{}",
        servers[0].address(),
        servers[1].address()
    );
    let (_dir, path) = config_file(WINDOW);
    let nodes = Arc::new((0..3).map(|_| serve(&path, &url, &[])).collect::<Vec<_>>());
    for key in ["alice", "bob", "carol"] {
        assert_eq!(admitted(&nodes, "window", key, 90).await, 25, "{key}");
    }
    let ready = reqwest::get(format!("{}/readyz", nodes[0].http))
        .await
        .unwrap();
    let status = ready.status();
    let body = ready.text().await.unwrap();
    assert!(
        status == 200 && body.contains("memcached"),
        "{status}: {body}"
    );
}

#[test]
fn check_config_refuses_what_memcached_cannot_run() {
    let (_dir, path) = config_file(
        "store: {url: 'memcache://127.0.0.1:1'}\n\
         plans: {free: {algorithm: token_bucket, rate: 10, capacity: 10}}\n\
         default_plan: free\n\
         limiters: {request_rate: {}}\n\
         limits: {}\n\
         domains: []\n",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .arg("check-config")
        .arg(&path)
        .env_clear()
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("plans.free")
            && stderr.contains("memcached")
            && stderr.contains("token_bucket"),
        "{stderr}"
    );
    // A fixed window passes.
    let (_dir, path) = config_file(
        "store: {url: 'memcache://127.0.0.1:1'}\n\
         plans: {free: {algorithm: fixed_window, limit: 10, window: 1m}}\n\
         default_plan: free\n\
         limiters: {request_rate: {}}\n\
         limits: {}\n\
         domains: []\n",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floodgate"))
        .arg("check-config")
        .arg(&path)
        .env_clear()
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_memcache_backend_counts_in_upstreams_keys() {
    let servers = [MemcachedServer::start(), MemcachedServer::start()];
    let root = runtime_dir("new-stores-memcache", 3);
    let mut env = loopback_env(&root.0, "unused:6379");
    env.extend(loopback_listeners());
    set_var(&mut env, "BACKEND_TYPE", "memcache");
    set_var(
        &mut env,
        "MEMCACHE_HOST_PORT",
        format!("{},{}", servers[0].address(), servers[1].address()),
    );
    let node = serve_with(&env);
    counts_as_upstream(&node, &servers).await;
}

/// `MEMCACHE_SRV`: the node finds the servers through its system resolver (a
/// `/etc/resolv.conf` naming the test's dnsmasq, bind-mounted over the machine's in a mount
/// namespace of the node's own: `unshare -m`, as root), lists them as upstream does (sorted
/// `target:port`) and counts where upstream's pods would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_memcache_srv_finds_the_servers_through_dns() {
    let servers = [MemcachedServer::start(), MemcachedServer::start()];
    let record = "_memcache._tcp.floodgate.test";
    let records: Vec<SrvRecord> = servers
        .iter()
        .map(|s| SrvRecord {
            name: record.into(),
            target: "localhost".into(),
            port: s.port(),
        })
        .collect();
    // A loopback address of this test's own for port 53 (resolv.conf names no port).
    let suffix = rand_suffix();
    let ip = std::net::Ipv4Addr::new(127, 53, (suffix >> 8) as u8, (suffix as u8).max(2));
    let _dns = DnsServer::start_on_port_53(ip, &records);
    let root = runtime_dir("new-stores-memcache-srv", 3);
    let resolv = root.0.join("resolv.conf");
    std::fs::write(&resolv, format!("nameserver {ip}\n")).unwrap();
    let mut env = loopback_env(&root.0, "unused:6379");
    env.extend(loopback_listeners());
    set_var(&mut env, "BACKEND_TYPE", "memcache");
    set_var(&mut env, "MEMCACHE_SRV", record);
    set_var(&mut env, "MEMCACHE_SRV_REFRESH", "1s");
    let script = format!(
        "/usr/bin/mount --bind {} /etc/resolv.conf && exec \"$0\" serve",
        resolv.display()
    );
    let node = common::upstream::launch(
        std::path::Path::new("/usr/bin/unshare"),
        &[
            "-m",
            "/usr/bin/sh",
            "-c",
            &script,
            env!("CARGO_BIN_EXE_floodgate"),
        ],
        &env,
    );
    let client = reqwest::Client::new();
    let (status, ready) = node.get(&client, "/readyz").await;
    assert!(
        status == 200 && ready.contains("memcached"),
        "{status}: {ready}"
    );
    counts_as_upstream(&node, &servers).await;
}

/// Five hits of upstream's `rl.user` (3 an hour) on `node`: two over, counted in upstream's
/// key on the one server of `servers` gomemcache picks.
async fn counts_as_upstream(node: &Service, servers: &[MemcachedServer; 2]) {
    let client = reqwest::Client::new();
    let mut over = 0;
    for _ in 0..5 {
        let body = json!({"domain": "rl", "descriptors": [{"entries": [{"key": "user", "value": "alice"}]}]});
        let (status, answer) = node.post(&client, "/json", &body).await;
        assert!(status == 200 || status == 429, "{status}: {answer}");
        over += usize::from(status == 429);
    }
    assert_eq!(over, 2, "3 an hour");
    // Upstream's key (domain _ key _ value _ window start), counted as upstream counts it
    // (every hit), on the server gomemcache picks: crc32 of the key modulo the servers.
    // The node reads the system clock as upstream does; so does the test, once.
    let hour =
        floodgate::Clock::now(&floodgate::SystemClock::new()).0 / 1_000_000_000 / 3600 * 3600;
    let key = format!("rl_user_alice_{hour}");
    let on: Vec<_> = servers.iter().map(|s| s.get(&key)).collect();
    assert_eq!(
        on.iter().flatten().collect::<Vec<_>>(),
        ["5"],
        "on one server only: {on:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_file_store_keeps_its_counts_across_a_graceful_restart() {
    let dir = TempDir(std::env::temp_dir().join(format!(
        "floodgate-file-store-{}-{}",
        std::process::id(),
        rand_suffix()
    )));
    let url = format!("file://{}", dir.0.display());
    // The file store takes no link settings: written for it, the file leaves them out, and a
    // file that writes one is refused naming it.
    let (_config, written_for_memcached) = config_file(WINDOW);
    let (code, stderr) = serve_refused(&written_for_memcached, &url, &[]);
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("store.timeout") && stderr.contains("the file store does not take it"),
        "{stderr}"
    );
    let (_config, path) = config_file(&WINDOW.replace("store: {timeout: 2s}\n", ""));
    let node = Arc::new(vec![serve(&path, &url, &[])]);
    assert_eq!(admitted(&node, "window", "alice", 10).await, 10);
    let mut service = Arc::try_unwrap(node).ok().unwrap().pop().unwrap();
    service.signal("TERM");
    common::serve::eventually("the node stops on SIGTERM", || {
        let stopped = service.exited().is_some();
        async move { stopped }
    })
    .await;
    // Started again on the same directory: the 10 are still counted.
    let node = Arc::new(vec![serve(&path, &url, &[])]);
    assert_eq!(admitted(&node, "window", "alice", 30).await, 15);
    // A second process may not share the directory.
    let (code, stderr) = serve_refused(&path, &url, &[]);
    assert_ne!(code, Some(0));
    assert!(stderr.contains(&dir.0.display().to_string()), "{stderr}");
    drop(node);
    // A directory under a file cannot be made.
    let file = dir.0.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let (code, stderr) = serve_refused(&path, &format!("file://{}/sub", file.display()), &[]);
    assert_ne!(code, Some(0));
    assert!(stderr.contains("a-file"), "{stderr}");
}
