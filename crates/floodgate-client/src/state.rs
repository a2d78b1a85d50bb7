//! The layer's shared state (one [`Host`] per host and partition) and what it shows for
//! metrics: [`ClientState::snapshot`] and [`ClientState::totals`].

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use floodgate::Nanos;
use http::Request;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::sync::Notify;

use crate::config::Settings;
use crate::host::Host;
use crate::timer::Timer;

/// Counts of what the layer did, per host or in total.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Requests that reached the wire (first attempts and retries).
    pub sent: u64,
    /// Answers the server did not refuse.
    pub succeeded: u64,
    /// Answers that refused: 429 and 503 (gRPC `RESOURCE_EXHAUSTED` and `UNAVAILABLE`).
    pub throttled: u64,
    /// Attempts that failed without an answer (connection errors, timeouts, other errors).
    pub errors: u64,
    /// Retries made (each paid from the budget).
    pub retries: u64,
    /// Retries not made because the budget could not pay for them.
    pub budget_exhausted: u64,
    /// Requests (or retries) that waited locally before they were sent.
    pub local_waits: u64,
    /// Requests refused locally: by adaptive throttling, or because they would have waited
    /// longer than `max_wait`.
    pub refused_locally: u64,
}

impl Counters {
    fn add(&mut self, other: &Counters) {
        self.sent += other.sent;
        self.succeeded += other.succeeded;
        self.throttled += other.throttled;
        self.errors += other.errors;
        self.retries += other.retries;
        self.budget_exhausted += other.budget_exhausted;
        self.local_waits += other.local_waits;
        self.refused_locally += other.refused_locally;
    }
}

/// What the layer knows about one quota of a host.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicySnapshot {
    /// The policy's name.
    pub policy: String,
    /// The first bytes of its partition key in hex (never the whole key: it may be a
    /// credential).
    pub partition: Option<String>,
    /// The quota `q`.
    pub limit: Option<u64>,
    /// The window `w`, seconds.
    pub window_seconds: Option<f64>,
    /// The requests the pacer believes are left (negative while more are in flight than the
    /// server had left).
    pub left: Option<f64>,
    /// Seconds until the server said requests may pass again, while it said none may.
    pub exhausted_for_seconds: Option<f64>,
}

/// What the layer knows about one host (and partition).
#[derive(Clone, Debug, PartialEq)]
pub struct HostSnapshot {
    /// `scheme://authority`, with `#` and a hash of the partition header's value when the
    /// layer partitions by one.
    pub host: String,
    /// The dialect the host last spoke: `ietf` or `x-ratelimit`.
    pub dialect: Option<&'static str>,
    /// The quotas it announced.
    pub policies: Vec<PolicySnapshot>,
    /// Seconds left of its last `Retry-After`.
    pub blocked_for_seconds: Option<f64>,
    /// True when the host is paced adaptively (it sent no limit fields lately).
    pub adaptive: bool,
    /// The CUBIC send rate, requests per second, once a refusal has turned it on.
    pub send_rate: Option<f64>,
    /// The measured send rate, requests per second.
    pub measured_rate: f64,
    /// The probability that adaptive throttling refuses a request now.
    pub reject_probability: f64,
    /// Retry budget units left.
    pub budget_left: u32,
    /// The adaptive concurrency limit, when enabled.
    pub concurrency_limit: Option<u32>,
    /// Requests in flight, when the concurrency limit is enabled.
    pub in_flight: Option<u32>,
    /// The host's counters.
    pub counters: Counters,
}

/// One host's state and the notification its waiters park on.
pub(crate) struct HostCell {
    pub(crate) host: Mutex<Host>,
    /// Signalled when a request finishes (a concurrency slot is free again).
    pub(crate) finished: Notify,
}

impl HostCell {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Host> {
        // A panic while holding the lock cannot leave a Host half-updated in a way that
        // matters more than losing the client: keep going with what is there.
        self.host.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The state every service of one layer shares.
pub(crate) struct Shared {
    pub(crate) settings: Settings,
    pub(crate) timer: Arc<dyn Timer>,
    hosts: Mutex<HashMap<String, Arc<HostCell>>>,
    partition_hasher: RandomState,
    next_seed: AtomicU64,
}

impl Shared {
    pub(crate) fn new(settings: Settings, timer: Arc<dyn Timer>) -> Shared {
        let seed = settings.seed.unwrap_or_else(rand::random);
        Shared {
            settings,
            timer,
            hosts: Mutex::new(HashMap::new()),
            partition_hasher: RandomState::new(),
            next_seed: AtomicU64::new(seed),
        }
    }

    /// The key of the state a request belongs to: `scheme://authority` (or the `Host` field
    /// for requests whose URI has no authority, as tonic's have above its channel), plus the
    /// partition header's hash when configured.
    pub(crate) fn key_of<B>(&self, request: &Request<B>) -> String {
        let uri = request.uri();
        let mut key = match uri.authority() {
            Some(authority) => format!("{}://{}", uri.scheme_str().unwrap_or("http"), authority),
            None => request
                .headers()
                .get(http::header::HOST)
                .and_then(|h| h.to_str().ok())
                .map_or_else(|| "default".to_string(), |h| h.to_ascii_lowercase()),
        };
        if let Some(name) = &self.settings.partition_header {
            let value = request.headers().get(name).map(|v| v.as_bytes());
            let hash = self.partition_hasher.hash_one(value);
            key.push_str(&format!("#{:08x}", hash >> 32));
        }
        key
    }

    /// The state of host `key`, created on first use (forgetting the least recently used host
    /// that no request holds beyond `max_hosts`).
    pub(crate) fn host(&self, key: &str, now: Nanos) -> Arc<HostCell> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cell) = hosts.get(key) {
            return cell.clone();
        }
        if hosts.len() >= self.settings.max_hosts {
            // Only a host no request holds (none in flight or waiting) is forgotten: another
            // cell for a host in use would split its queue, its in-flight count and its
            // Retry-After. While every host is in use the map grows past `max_hosts`, by at
            // most the number of requests under way.
            let oldest = hosts
                .iter()
                .filter(|(_, cell)| Arc::strong_count(cell) == 1)
                .min_by_key(|(_, cell)| cell.lock().last_used())
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                hosts.remove(&oldest);
            }
        }
        let seed = self
            .next_seed
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
        let cell = Arc::new(HostCell {
            host: Mutex::new(Host::new(
                key.to_string(),
                &self.settings,
                SmallRng::seed_from_u64(seed),
                now,
            )),
            finished: Notify::new(),
        });
        hosts.insert(key.to_string(), cell.clone());
        cell
    }

    fn cells(&self) -> Vec<Arc<HostCell>> {
        let hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        hosts.values().cloned().collect()
    }
}

/// A handle on a layer's state, for metrics and dashboards. Cheap to clone.
#[derive(Clone)]
pub struct ClientState {
    pub(crate) shared: Arc<Shared>,
}

impl ClientState {
    /// What the layer knows about every host it has talked to, sorted by host.
    pub fn snapshot(&self) -> Vec<HostSnapshot> {
        let now = self.shared.timer.now();
        let headroom = self.shared.settings.headroom;
        let mut hosts: Vec<HostSnapshot> = self
            .shared
            .cells()
            .iter()
            .map(|cell| cell.lock().snapshot(now, headroom))
            .collect();
        hosts.sort_by(|a, b| a.host.cmp(&b.host));
        hosts
    }

    /// The counters summed over every host.
    pub fn totals(&self) -> Counters {
        let mut total = Counters::default();
        for cell in self.shared.cells() {
            total.add(cell.lock().counters());
        }
        total
    }
}

impl fmt::Debug for ClientState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientState")
            .field("totals", &self.totals())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ManualTimer, PoliteLayer};
    use floodgate::{Clock, ManualClock};
    use std::time::Duration;

    #[test]
    fn a_host_in_use_is_never_forgotten() {
        let clock = ManualClock::new(Nanos::from_secs(1));
        let layer = PoliteLayer::builder()
            .timer(Arc::new(ManualTimer::new(clock.clone())))
            .max_hosts(1)
            .build()
            .unwrap();
        let shared = &layer.shared;
        // A request to "a" is under way (it holds the cell) when "b" is first used.
        let a = shared.host("a", clock.now());
        clock.advance(Duration::from_secs(1));
        let _b = shared.host("b", clock.now());
        assert!(
            Arc::ptr_eq(&a, &shared.host("a", clock.now())),
            "a was kept"
        );
        // Once nothing holds "a", it is the one forgotten for "c".
        drop(a);
        clock.advance(Duration::from_secs(1));
        drop(_b);
        let _c = shared.host("c", clock.now());
        let hosts = shared.hosts.lock().unwrap();
        assert_eq!(hosts.len(), 2);
        assert!(hosts.contains_key("c"));
    }
}
