//! The Rate Limit Quota Service across nodes: two `floodgate serve` processes sharing a real
//! `redis-server` (and a real Redis Cluster), each the server of four Envoys' RLQS streams
//! (written in the test as Envoy's filter reports: `common::rlqs::Reporter`), divide one
//! bucket's limit of 200 per second among all eight. Demand is equal, then skewed, then
//! changing, then two Envoys leave (one per node). Throughout:
//!
//! - the grants in force on the bucket, as the store keeps them (read from Redis itself every
//!   20 ms, at Redis's own clock), never sum past the limit;
//! - after each change every Envoy holds its max-min fair share within two of Envoy's
//!   reporting intervals (5 s each) — a leaver's share once its last assignment's time to
//!   live (5 s here) has passed — and what the Envoys hold then sums to at most the limit.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::rlqs::Reporter;
use common::serve::{config_file, serve};
use floodgate_redis_harness::{RedisCluster, RedisServer};
use tokio_stream::StreamExt;

const CONFIG: &str = "\
store: {timeout: 2s}
rlqs: {assignment_ttl: 5s}
domains:
  - domain: quota
    descriptors:
      - key: name
        rate_limit: { unit: second, requests_per_unit: 200 }
";

/// The bucket's limit, per second.
const LIMIT: u64 = 200;

/// Envoy's reporting interval.
const INTERVAL: Duration = Duration::from_secs(5);

/// The Redis key of the bucket `{name: shared}` in domain `quota`.
const BUCKET_KEY: &str = "floodgate.quota:{5:quota/4:name6:shared}";

/// The grants in force in a bucket's hash at Redis's clock: every field's value ends with
/// `granted until` (whole microseconds).
const IN_FORCE: &str = "local t = redis.call('TIME') \
local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) \
local f = redis.call('HGETALL', KEYS[1]) local sum = 0 \
for i = 2, #f, 2 do \
  local g, u = string.match(f[i], '(%d+) (%d+)$') \
  if tonumber(u) > now then sum = sum + tonumber(g) end \
end return sum";

/// The grants in force on the bucket, asked of the Redis on `port` (`redis-cli`).
fn in_force(port: u16) -> Option<String> {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "EVAL", IN_FORCE, "1", BUCKET_KEY])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Reads the bucket's grants in force from Redis every 20 ms until stopped: the most seen, and
/// how many readings saw any.
struct Watch {
    stop: Arc<AtomicBool>,
    most: Arc<AtomicU64>,
    nonzero: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watch {
    fn start(read: impl Fn() -> Option<String> + Send + 'static) -> Watch {
        let stop = Arc::new(AtomicBool::new(false));
        let most = Arc::new(AtomicU64::new(0));
        let nonzero = Arc::new(AtomicU64::new(0));
        let (halt, high, seen) = (stop.clone(), most.clone(), nonzero.clone());
        let thread = std::thread::spawn(move || {
            while !halt.load(Ordering::Relaxed) {
                if let Some(sum) = read().and_then(|s| s.trim().parse::<u64>().ok()) {
                    high.fetch_max(sum, Ordering::Relaxed);
                    seen.fetch_add(u64::from(sum > 0), Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Watch {
            stop,
            most,
            nonzero,
            thread: Some(thread),
        }
    }

    /// Stops, and returns the most seen in force and the readings that saw any.
    fn finish(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the watch ends");
        }
        (
            self.most.load(Ordering::Relaxed),
            self.nonzero.load(Ordering::Relaxed),
        )
    }
}

/// Waits until each Envoy holds `tokens N` of `shares` (in order), at most two reporting
/// intervals; then what they hold sums to at most the limit.
async fn converge(phase: &str, envoys: &[&Reporter], shares: &[u64]) {
    let wanted: Vec<Option<String>> = shares.iter().map(|s| Some(format!("tokens {s}"))).collect();
    let deadline = tokio::time::Instant::now() + 2 * INTERVAL;
    loop {
        let held: Vec<Option<String>> = envoys.iter().map(|e| e.holds()).collect();
        if held == wanted {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{phase}: the Envoys hold {held:?}, not {wanted:?}, two reporting intervals on"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(shares.iter().sum::<u64>() <= LIMIT, "{phase}: {shares:?}");
}

/// The scenario, on the store at `url`; `read` gives the grants in force from Redis.
async fn eight_envoys_on_two_nodes(
    url: String,
    read: impl Fn() -> Option<String> + Send + 'static,
) {
    let (_dir, path) = config_file(CONFIG);
    let nodes = [serve(&path, &url, &[]), serve(&path, &url, &[])];
    let watch = Watch::start(read);
    // Eight Envoys, every other one on each node, each wanting 50 a second: 25 each.
    let mut envoys = Vec::new();
    for i in 0..8 {
        let node = &nodes[i % 2];
        envoys.push(Reporter::start(node, "quota", "shared", INTERVAL, 50).await);
    }
    let all: Vec<&Reporter> = envoys.iter().collect();
    converge("equal demand", &all, &[25; 8]).await;

    // Skewed: those wanting less than an even split get what they want; the rest share
    // what is left evenly.
    let skewed = [10, 10, 20, 20, 60, 60, 80, 80];
    for (envoy, demand) in envoys.iter().zip(skewed) {
        envoy.want(demand);
    }
    converge("skewed demand", &all, &[10, 10, 20, 20, 35, 35, 35, 35]).await;

    // Changing: the same demands, the other way round.
    for (envoy, demand) in envoys.iter().zip(skewed.iter().rev()) {
        envoy.want(*demand);
    }
    converge("changed demand", &all, &[35, 35, 35, 35, 20, 20, 10, 10]).await;

    // One Envoy of each node leaves (the first, on node 0, wanting 80; the fourth, on node 1,
    // wanting 60): once their last assignments' time to live has passed, the others' demands
    // fit, and each gets what it wants.
    let stay: Vec<Reporter> = envoys
        .into_iter()
        .enumerate()
        .filter_map(|(i, envoy)| (i != 0 && i != 3).then_some(envoy))
        .collect();
    let staying: Vec<&Reporter> = stay.iter().collect();
    converge("two Envoys gone", &staying, &[80, 60, 20, 20, 10, 10]).await;

    let (most, readings) = watch.finish();
    assert!(
        readings > 10,
        "the watch read grants in force {readings} times"
    );
    assert!(
        most <= LIMIT,
        "the grants in force reached {most}, past the limit of {LIMIT}"
    );
    assert_eq!(
        most, LIMIT,
        "the limit was handed out whole while demand exceeded it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_one_redis_divide_a_limit_fairly() {
    let redis = RedisServer::start();
    let port = redis.port();
    let read = move || in_force(port);
    eight_envoys_on_two_nodes(redis.url(), read).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_a_redis_cluster_divide_a_limit_fairly() {
    let cluster = RedisCluster::start(3, 0);
    let port = cluster.master_of(BUCKET_KEY);
    let read = move || in_force(port);
    eight_envoys_on_two_nodes(cluster.url(), read).await;
}

/// A Redis that stops answering (SIGSTOP): a report's step fails, so nothing is sent for the
/// bucket (its Envoy keeps the assignment it holds until that expires, and is never handed
/// the whole rate), and the failure is counted; once Redis answers again (SIGCONT), the
/// stream's next report is answered from the claims as they stand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_sends_nothing_until_it_answers_again() {
    let redis = RedisServer::start();
    let (_dir, path) = config_file(&CONFIG.replace("timeout: 2s", "timeout: 300ms"));
    let node = serve(&path, &redis.url(), &[]);
    let mut envoy = common::rlqs::Client::connect(&node).await;
    envoy.report("quota", "shared", 1, 0, 0).await;
    envoy
        .until_holds("shared", &format!("tokens {LIMIT}"))
        .await;

    redis.signal("STOP");
    envoy.report("quota", "shared", 50, 0, 5).await;
    let silent = tokio::time::timeout(Duration::from_secs(2), envoy.answers.next()).await;
    assert!(
        silent.is_err(),
        "an answer while the store was paused: {silent:?}"
    );
    let http = reqwest::Client::new();
    let (_, metrics) = node.get(&http, "/metrics").await;
    let failures = metrics
        .lines()
        .find_map(|l| l.strip_prefix("floodgate_rlqs_store_failures_total "))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(failures.is_some_and(|n| n >= 1), "{failures:?}");

    redis.signal("CONT");
    // The breaker may hold calls back a moment longer: report until answered.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        envoy.report("quota", "shared", 50, 0, 5).await;
        let answer = tokio::time::timeout(Duration::from_millis(500), envoy.answers.next()).await;
        if let Ok(Some(Ok(answer))) = answer {
            let told: Vec<String> = answer
                .bucket_action
                .into_iter()
                .map(|a| common::rlqs::told(a.bucket_action))
                .collect();
            assert_eq!(told, [format!("tokens {LIMIT}")]);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no answer 20 s after Redis was resumed"
        );
    }
}
