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

use crate::host::Host;
use crate::settings::Settings;
pub use crate::snapshot::{Counters, HostSnapshot, PolicySnapshot};
use crate::timer::Timer;

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
