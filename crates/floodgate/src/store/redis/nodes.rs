//! On a Redis Cluster, a circuit breaker per master: one dead master opens the breaker of its
//! own slots only, and keys on the healthy masters keep their exact counting.
//!
//! Which master serves which slot comes from `CLUSTER SLOTS`, asked in the background (never
//! on a call's path): first by [`crate::store::RedisStore::probe`], which waits for it and asks
//! again until two answers agree (so a node ready to take traffic already routes by a settled
//! map), or by the first call when no probe came first; then after a call failed on the link
//! or met a `MOVED` (a master may have died, slots moved), at most once per [`REFRESH_EVERY`];
//! again after every ask whose map differed from the one before, until two in a row agree (a
//! rebalance moves slots one after another, most of them with no call on them to meet a
//! `MOVED`: without this the map would keep naming a master that was drained and stopped); and
//! at least once per [`REFRESH_AT_LEAST_EVERY`] while calls come. Until the first answer, every
//! call uses the store's one breaker. A master keeps its breaker across refreshes
//! that still list it; a replica promoted in its place is a new master with a closed breaker,
//! so its slots are used again as soon as the map shows it. The breakers' states are shown per
//! master ([`crate::store::RedisStore::node_breakers`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo, Slot};
use redis::Value;

use super::batching::Lane;
use super::connection::Handle;
use super::keys::Tagged;
use super::link::Failed;
use super::Inner;
use crate::store::breaker::{Breaker, BreakerState};
use crate::StoreError;

/// The shortest time between two asks of the slot map.
const REFRESH_EVERY: Duration = Duration::from_millis(100);

/// The longest time between two asks of the slot map while calls come, whatever happens: a
/// bound on how long a move no call noticed leaves the map out of date.
const REFRESH_AT_LEAST_EVERY: Duration = Duration::from_secs(5);

/// The most asks of the slot map the probe makes while consecutive answers differ (a first
/// map always differs from the empty one before it: two asks settle a cluster at rest).
const SETTLING_ASKS: usize = 3;

/// The masters' breakers and the slot map pointing at them.
#[derive(Debug)]
pub(super) struct Nodes {
    threshold: u32,
    cool_down: Duration,
    /// Each slot's master (its number) and that master's breaker, from the last
    /// `CLUSTER SLOTS` (empty before the first).
    slots: RwLock<HashMap<Slot, (u32, Arc<Breaker>)>>,
    /// The masters of the last map, by address (`host:port`), with their numbers (given in
    /// order of first sight, kept by a master across maps) and breakers.
    masters: RwLock<Vec<(String, u32, Arc<Breaker>)>>,
    /// The number the next master never seen before gets.
    next_number: AtomicU32,
    /// Whether a refresh is under way.
    refreshing: AtomicBool,
    /// Whether the map may be out of date (a call failed on the link since the last refresh).
    stale: AtomicBool,
    /// When the last refresh started, in nanoseconds on the breakers' clock.
    asked_at: AtomicU64,
}

impl Nodes {
    pub(super) fn new(threshold: u32, cool_down: Duration) -> Nodes {
        Nodes {
            threshold,
            cool_down,
            slots: RwLock::default(),
            masters: RwLock::default(),
            refreshing: AtomicBool::new(false),
            next_number: AtomicU32::new(0),
            stale: AtomicBool::new(true),
            asked_at: AtomicU64::new(0),
        }
    }

    /// After a call failed on the link: the next call asks for the map again.
    pub(super) fn failed(&self) {
        self.stale.store(true, Ordering::Relaxed);
    }

    /// The number and breaker of `slot`'s master, when the map is known.
    fn master(&self, slot: Slot) -> Option<(u32, Arc<Breaker>)> {
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        slots.get(&slot).cloned()
    }

    /// The address (`host:port`) of `slot`'s master in the last map, when it is known.
    pub(super) fn address(&self, slot: Slot) -> Option<String> {
        let (number, _) = self.master(slot)?;
        let masters = self.masters.read().unwrap_or_else(|e| e.into_inner());
        masters
            .iter()
            .find(|(_, n, _)| *n == number)
            .map(|(address, _, _)| address.clone())
    }

    /// Every master of the last map, with its breaker's state on `clock`.
    pub(super) fn states(&self, clock: &dyn crate::Clock) -> Vec<(String, BreakerState)> {
        let masters = self.masters.read().unwrap_or_else(|e| e.into_inner());
        masters
            .iter()
            .map(|(address, _, breaker)| (address.clone(), breaker.state(clock)))
            .collect()
    }

    /// A key on each master of the last map, with that master's address and breaker (empty
    /// before the map is known): what [`RedisStore::probe`](crate::store::RedisStore::probe)
    /// writes, so that it tries every master. Keys are `probe-N:{…}`-shaped store keys, found
    /// by counting `N` up until every master has one.
    pub(super) fn probe_keys(&self) -> Vec<(String, String, Arc<Breaker>)> {
        let masters = self
            .masters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        let mut keys: Vec<Option<String>> = vec![None; masters.len()];
        let mut missing = masters.len();
        // 16384 slots: far fewer tries than this find every master.
        for n in 0..1_000_000u32 {
            if missing == 0 {
                break;
            }
            let key = format!("{}-{n}", super::PROBE_KEY);
            let Some((number, _)) = slots.get(&Tagged(&key).slot()) else {
                continue;
            };
            let Some(at) = masters.iter().position(|(_, m, _)| m == number) else {
                continue;
            };
            if keys[at].is_none() {
                keys[at] = Some(key);
                missing -= 1;
            }
        }
        masters
            .into_iter()
            .zip(keys)
            .filter_map(|((address, _, breaker), key)| Some((address, key?, breaker)))
            .collect()
    }

    /// After the map was asked for and installed at `now` (ns on the breakers' clock) by a
    /// caller waiting for it (the probe): no refresh is due before the usual bound, unless
    /// `changed` says the map may be changing still.
    fn asked(&self, now: u64, changed: bool) {
        self.asked_at.store(now, Ordering::Relaxed);
        self.stale.store(changed, Ordering::Relaxed);
    }

    /// Installs the map `ranges` (first slot, last slot, master's address): known masters keep
    /// their breakers, new ones get closed breakers. Whether any slot changed master.
    fn install(&self, ranges: &[(u16, u16, String)]) -> bool {
        let old = self
            .masters
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut masters: Vec<(String, u32, Arc<Breaker>)> = Vec::new();
        let mut slots = HashMap::with_capacity(16384);
        for (first, last, address) in ranges {
            let master = match masters.iter().find(|(a, _, _)| a == address) {
                Some((_, number, breaker)) => (*number, breaker.clone()),
                None => {
                    let (number, breaker) = old
                        .iter()
                        .find(|(a, _, _)| a == address)
                        .map(|(_, number, breaker)| (*number, breaker.clone()))
                        .unwrap_or_else(|| {
                            (
                                self.next_number.fetch_add(1, Ordering::Relaxed),
                                Arc::new(Breaker::new(self.threshold, self.cool_down)),
                            )
                        });
                    masters.push((address.clone(), number, breaker.clone()));
                    (number, breaker)
                }
            };
            for slot in (*first..=*last).filter_map(Slot::new) {
                slots.insert(slot, master.clone());
            }
        }
        masters.sort_by(|a, b| a.0.cmp(&b.0));
        let mut old_slots = self.slots.write().unwrap_or_else(|e| e.into_inner());
        let changed = old_slots.len() != slots.len()
            || slots
                .iter()
                .any(|(slot, (number, _))| old_slots.get(slot).map(|(n, _)| n) != Some(number));
        *old_slots = slots;
        drop(old_slots);
        *self.masters.write().unwrap_or_else(|e| e.into_inner()) = masters;
        changed
    }
}

impl Inner {
    /// Where a call on `key` goes: its lane and the breaker guarding it. On a cluster whose
    /// map is known, its master's (one lane per master: a batch may span its slots); before,
    /// its slot's lane and the store's breaker; on a single Redis, the one lane and breaker.
    /// Starts a refresh of the map when it is due.
    pub(super) fn route(self: &Arc<Self>, key: &str) -> (Lane, Arc<Breaker>) {
        let Some(nodes) = &self.nodes else {
            return (Lane::Single, self.breaker.clone());
        };
        let slot = Tagged(key).slot();
        let now = self.breaker_clock.0.now().0;
        let since = now.saturating_sub(nodes.asked_at.load(Ordering::Relaxed));
        let stale = nodes.stale.load(Ordering::Relaxed);
        if stale || since >= REFRESH_AT_LEAST_EVERY.as_nanos() as u64 {
            let due = since >= REFRESH_EVERY.as_nanos() as u64;
            if due
                && tokio::runtime::Handle::try_current().is_ok()
                && nodes
                    .refreshing
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                nodes.asked_at.store(now, Ordering::Relaxed);
                nodes.stale.store(false, Ordering::Relaxed);
                tokio::spawn(self.clone().refresh_nodes());
            }
        }
        match nodes.master(slot) {
            Some((number, breaker)) => (Lane::Master(number), breaker),
            None => (Lane::Slot(slot), self.breaker.clone()),
        }
    }

    /// Asks a node for the slot map (`CLUSTER SLOTS`) and installs it; on failure the map is
    /// left as it was and asked again by a later call. Connections to the map's masters are
    /// opened in the background.
    pub(super) async fn refresh_nodes(self: Arc<Self>) {
        let Some(nodes) = &self.nodes else { return };
        match self.ask_slot_map(self.timeout).await {
            Ok(ranges) => {
                if self.take_map(nodes, &ranges) {
                    // The map changed: it may be changing still (a rebalance under way).
                    nodes.stale.store(true, Ordering::Relaxed);
                }
                if let Some(connections) = self.connection.nodes() {
                    connections.open_in_background(ranges.iter().map(|(_, _, a)| a.as_str()));
                }
            }
            Err(_) => nodes.stale.store(true, Ordering::Relaxed),
        }
        nodes.refreshing.store(false, Ordering::Release);
    }

    /// For the probe: the slot map asked for now, within `timeout` per ask, and installed,
    /// asked again until two asks in a row agree (at most [`SETTLING_ASKS`] asks), so that
    /// the first decisions route by it without starting a refresh of their own. A map still
    /// changing after that is left marked stale, for the calls' refreshes to follow. The
    /// connections to its masters are not opened here: the probe opens them itself.
    pub(super) async fn settle_slot_map(&self, timeout: Duration) -> Result<(), Failed> {
        let Some(nodes) = &self.nodes else {
            return Ok(());
        };
        let mut changed = true;
        for _ in 0..SETTLING_ASKS {
            let ranges = self.ask_slot_map(timeout).await?;
            changed = self.take_map(nodes, &ranges);
            if !changed {
                break;
            }
        }
        nodes.asked(self.breaker_clock.0.now().0, changed);
        Ok(())
    }

    /// `CLUSTER SLOTS`, asked of any node through the cluster client within `timeout`: its
    /// ranges (first slot, last slot, master's `host:port`).
    async fn ask_slot_map(&self, timeout: Duration) -> Result<Vec<(u16, u16, String)>, Failed> {
        let Handle::Cluster(mut cluster) = self.connection.handle() else {
            return Err(StoreError::Unavailable("not a cluster".into()).into());
        };
        let mut command = redis::cmd("CLUSTER");
        command.arg("SLOTS");
        let random = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
        let value = tokio::time::timeout(timeout, cluster.route_command(command, random))
            .await
            .map_err(|_| Failed::link(StoreError::Timeout(timeout)))??;
        slot_ranges(&value).ok_or_else(|| {
            Failed::from(StoreError::Protocol(format!(
                "CLUSTER SLOTS answered {value:?}, not a slot map"
            )))
        })
    }

    /// Installs `ranges` in `nodes` and closes the store's connections to nodes no longer
    /// masters. Whether any slot changed master.
    fn take_map(&self, nodes: &Nodes, ranges: &[(u16, u16, String)]) -> bool {
        let changed = nodes.install(ranges);
        if let Some(connections) = self.connection.nodes() {
            connections.keep_only(ranges.iter().map(|(_, _, address)| address.as_str()));
        }
        changed
    }
}

/// `CLUSTER SLOTS`'s ranges: first slot, last slot and the master's `host:port`; `None` for a
/// reply of another shape.
fn slot_ranges(value: &Value) -> Option<Vec<(u16, u16, String)>> {
    let Value::Array(ranges) = value else {
        return None;
    };
    let int = |v: &Value| match v {
        Value::Int(i) => u16::try_from(*i).ok(),
        _ => None,
    };
    let text = |v: &Value| match v {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    ranges
        .iter()
        .map(|range| {
            let Value::Array(parts) = range else {
                return None;
            };
            let (first, last) = (int(parts.first()?)?, int(parts.get(1)?)?);
            let Value::Array(master) = parts.get(2)? else {
                return None;
            };
            let host = text(master.first()?)?;
            let port = int(master.get(1)?)?;
            Some((first, last, format!("{host}:{port}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ManualClock, Nanos};

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn the_map_names_each_ranges_master_and_keeps_known_breakers() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                node("10.0.0.2", 7001),
                node("10.0.0.3", 7002),
            ]),
        ]);
        let ranges = slot_ranges(&reply).unwrap();
        assert_eq!(
            ranges,
            [
                (0, 5460, "10.0.0.1:7000".to_string()),
                (5461, 16383, "10.0.0.2:7001".to_string())
            ]
        );
        assert_eq!(slot_ranges(&Value::Int(1)), None);

        let clock = ManualClock::new(Nanos(1));
        let nodes = Nodes::new(1, Duration::from_secs(1));
        assert!(nodes.install(&ranges), "a first map is a change");
        let (_, first) = nodes.master(Slot::new(0).unwrap()).unwrap();
        first.admit(&clock).unwrap().record(true, &clock);
        let open = [
            ("10.0.0.1:7000".to_string(), BreakerState::Open),
            ("10.0.0.2:7001".to_string(), BreakerState::Closed),
        ];
        assert_eq!(nodes.states(&clock), open);
        // The same master keeps its (open) breaker; a promoted replica starts closed.
        assert!(!nodes.install(&ranges), "the same map again is no change");
        assert_eq!(nodes.states(&clock), open);
        assert!(nodes.install(&[
            (0, 5460, "10.0.0.4:7003".to_string()),
            (5461, 16383, "10.0.0.2:7001".to_string()),
        ]));
        let (number, breaker) = nodes.master(Slot::new(5460).unwrap()).unwrap();
        assert_eq!(breaker.state(&clock), BreakerState::Closed);
        // The promoted replica is a new master with a number of its own.
        assert_eq!(number, 2);
        assert_eq!(nodes.master(Slot::new(5461).unwrap()).unwrap().0, 1);
        assert_eq!(nodes.states(&clock).len(), 2);
    }
}
