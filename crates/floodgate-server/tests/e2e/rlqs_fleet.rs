//! The Rate Limit Quota Service across nodes, at a fleet's size: two `floodgate serve`
//! processes sharing a real `redis-server` (and a real Redis Cluster), each the server of
//! hundreds of Envoys' RLQS streams on one bucket (written in the test as Envoy's filter
//! reports: `common::rlqs::Reporter`: every 5 s, `time_elapsed` the report's window).
//!
//! 1. **Under the limit**: 200 Envoys, then 100 newcomers, each wanting 5 a second of 3,000.
//!    Every Envoy holds at least its demand and its margin, and no Envoy, newcomers
//!    included, is ever sent `DENY_ALL`.
//! 2. **Skewed, over the limit**: 100 Envoys want 2 a second, 200 want 40: each holds its
//!    max-min fair share (over the needs: a demand and its margin, `√λ`) within 5%, two
//!    reporting intervals after the change.
//! 3. **Leavers**: 100 of the greedy ones leave (half on each node); once their last
//!    assignments' time to live has passed the rest share what they held, again within 5%
//!    of their fair shares.
//!
//! Throughout, a watch reads the bucket's hash from Redis every 20 ms at Redis's own clock and
//! never sees the nodes' grants in force sum past the limit; what the Envoys hold sums to at
//! most the limit at every check; and the nodes' steps on the bucket stay below two per node
//! per second, however many Envoys report.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::rlqs::Reporter;
use common::serve::{config_file, serve};
use floodgate_harness::{RedisCluster, RedisServer};
use tokio_stream::StreamExt;

const CONFIG: &str = "\
store: {timeout: 2s}
rlqs: {assignment_ttl: 5s}
domains:
  - domain: quota
    descriptors:
      - key: name
        rate_limit: { unit: second, requests_per_unit: 3000 }
";

/// The bucket's limit, per second.
const LIMIT: f64 = 3000.0;

/// The Envoys' reporting interval: Envoy's.
const INTERVAL: Duration = Duration::from_secs(5);

/// The Redis key of the bucket `{name: shared}` in domain `quota`.
const BUCKET_KEY: &str = "floodgate.quota:{5:quota/4:name6:shared}";

/// The nodes' grants in force in a bucket's hash at Redis's clock, in thousandths: a node's
/// field is `c:NODE` = `reported until held …`, a leaver's `r:NODE` = `held until`.
const IN_FORCE: &str = "local t = redis.call('TIME') \
local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) \
local f = redis.call('HGETALL', KEYS[1]) local sum = 0 \
for i = 1, #f, 2 do \
  local w = {} for x in string.gmatch(f[i + 1], '%d+') do w[#w + 1] = tonumber(x) end \
  local held, untl = w[3], w[2] \
  if string.sub(f[i], 1, 2) == 'r:' then held, untl = w[1], w[2] end \
  if untl > now then sum = sum + held end \
end return sum";

/// Asks the Redis on `port` (`redis-cli`).
fn redis_cli(port: u16, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The grants in force on the bucket, thousandths of a request per second.
fn in_force(port: u16) -> Option<String> {
    redis_cli(port, &["EVAL", IN_FORCE, "1", BUCKET_KEY])
}

/// The script calls the Redis on `port` has run since start.
fn script_calls(port: u16) -> u64 {
    let stats = redis_cli(port, &["INFO", "commandstats"]).unwrap_or_default();
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
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

/// Waits, at most `within`, until every Envoy holds a rate `good` for its fair share; then
/// what they hold sums to at most the limit.
async fn converge(
    phase: &str,
    envoys: &[&Reporter],
    fair: &[f64],
    within: Duration,
    good: impl Fn(f64, f64) -> bool,
) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let rates: Vec<Option<f64>> = envoys.iter().map(|e| e.rate()).collect();
        let off: Vec<(usize, Option<f64>, f64)> = rates
            .iter()
            .zip(fair)
            .enumerate()
            .filter(|(_, (r, f))| !r.is_some_and(|r| good(r, **f)))
            .map(|(i, (r, f))| (i, *r, *f))
            .collect();
        if off.is_empty() {
            let sum: f64 = rates.iter().flatten().sum();
            assert!(
                sum <= LIMIT * 1.001,
                "{phase}: the Envoys hold {sum} of {LIMIT}"
            );
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{phase}: {} Envoys off their shares (index, holds, fair), e.g. {:?}; the first was told {:?}",
            off.len(),
            &off[..off.len().min(5)],
            envoys[off[0].0].told()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Within 5% of `fair`.
fn near(rate: f64, fair: f64) -> bool {
    (rate - fair).abs() <= 0.05 * fair
}

/// A need: demand and margin (one standard deviation of Poisson arrivals over a second).
fn need(per_second: f64) -> f64 {
    per_second + per_second.sqrt()
}

/// The scenario, on the store at `url`; `read` gives the grants in force from Redis, `calls`
/// the script calls Redis has run.
async fn a_fleet_on_two_nodes(
    url: String,
    read: impl Fn() -> Option<String> + Send + 'static,
    calls: impl Fn() -> u64,
) {
    let (_dir, path) = config_file(CONFIG);
    let nodes = [serve(&path, &url, &[]), serve(&path, &url, &[])];
    let watch = Watch::start(read);
    let calls_before = calls();
    let started = tokio::time::Instant::now();
    let start = |i: usize, demand: u64| {
        let node = &nodes[i % 2];
        async move { Reporter::start(node, "quota", "shared", INTERVAL, demand).await }
    };
    // 1. Under the limit: 200 Envoys wanting 5 a second, then 100 newcomers.
    let mut envoys = Vec::new();
    for i in 0..200 {
        envoys.push(start(i, 5).await);
    }
    let all: Vec<&Reporter> = envoys.iter().collect();
    let needs = vec![need(5.0); all.len()];
    let at_least = |r: f64, f: f64| r >= 0.95 * f;
    converge("under the limit", &all, &needs, 2 * INTERVAL, at_least).await;
    for i in 200..300 {
        envoys.push(start(i, 5).await);
    }
    let all: Vec<&Reporter> = envoys.iter().collect();
    let needs = vec![need(5.0); all.len()];
    converge("newcomers", &all, &needs, 2 * INTERVAL, at_least).await;
    for (i, envoy) in envoys.iter().enumerate() {
        let told = envoy.told();
        assert!(!told.is_empty(), "Envoy {i} was never answered");
        assert!(
            told.iter().all(|t| t.starts_with("tokens ")),
            "Envoy {i} was told {told:?} while the bucket's demand was under its limit"
        );
    }

    // 2. Skewed, over the limit: every third Envoy wants 2, the others 40.
    let demand = |i: usize| if i.is_multiple_of(3) { 2 } else { 40 };
    for (i, envoy) in envoys.iter().enumerate() {
        envoy.want(demand(i));
    }
    let small = need(2.0);
    let greedy = (LIMIT - 100.0 * small) / 200.0;
    let fair: Vec<f64> = (0..300)
        .map(|i| if demand(i) == 2 { small } else { greedy })
        .collect();
    converge("skewed", &all, &fair, 2 * INTERVAL, near).await;

    // 3. Half the greedy Envoys leave, as many of each node: once their last assignments
    // have expired (5 s, and a second on their way), the rest share what they held.
    let leaves = |i: usize| demand(i) == 40 && (i / 3).is_multiple_of(2);
    let stay: Vec<Reporter> = envoys
        .into_iter()
        .enumerate()
        .filter_map(|(i, envoy)| (!leaves(i)).then_some(envoy))
        .collect();
    let kept: Vec<usize> = (0..300).filter(|&i| !leaves(i)).collect();
    let greedy_left = kept.iter().filter(|&&i| demand(i) == 40).count() as f64;
    let greedy = (LIMIT - 100.0 * small) / greedy_left;
    let fair: Vec<f64> = kept
        .iter()
        .map(|&i| {
            if demand(i) == 2 {
                small
            } else {
                greedy.min(need(40.0))
            }
        })
        .collect();
    let staying: Vec<&Reporter> = stay.iter().collect();
    let within = Duration::from_secs(6) + 2 * INTERVAL;
    converge("leavers gone", &staying, &fair, within, near).await;

    let seconds = started.elapsed().as_secs_f64();
    let steps = calls().saturating_sub(calls_before) as f64;
    let (most, readings) = watch.finish();
    assert!(
        readings > 10,
        "the watch read grants in force {readings} times"
    );
    assert!(
        most as f64 <= LIMIT * 1000.0,
        "the grants in force reached {most} thousandths, past the limit of {LIMIT}"
    );
    // Two nodes on one bucket: at most about one step a second each, whatever the Envoys
    // (the watch's own script calls aside: one each 20 ms).
    let watch_calls = seconds * 50.0 * 1.2;
    let per_second = (steps - watch_calls).max(0.0) / seconds;
    assert!(
        per_second < 2.0 * 2.0,
        "{per_second} store steps a second for one bucket on two nodes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_one_redis_divide_a_limit_among_hundreds_of_envoys() {
    let redis = RedisServer::start();
    let port = redis.port();
    let read = move || in_force(port);
    a_fleet_on_two_nodes(redis.url(), read, || script_calls(port)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_on_a_redis_cluster_divide_a_limit_among_hundreds_of_envoys() {
    let cluster = RedisCluster::start(3, 0);
    let port = cluster.master_of(BUCKET_KEY);
    let read = move || in_force(port);
    a_fleet_on_two_nodes(cluster.url(), read, || script_calls(port)).await;
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
    envoy.until_rate("shared", 1.0..=LIMIT).await;

    redis.signal("STOP");
    // A second later the node is due to step: the report's answer waits on the store.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
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
            assert!(
                told.iter()
                    .all(|t| common::rlqs::rate(t).is_some_and(|r| r > 0.0)),
                "{told:?}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no answer 20 s after Redis was resumed"
        );
    }
}
