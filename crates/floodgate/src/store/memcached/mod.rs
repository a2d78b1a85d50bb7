//! A store on memcached, so that several nodes share one limit (behind the `memcached`
//! feature): for deployments of envoyproxy/ratelimit on memcached (`BACKEND_TYPE=memcache`).
//!
//! [`MemcachedStore`] implements [`Store`]`<str, AnyAlgorithm>` for the **fixed window** only
//! (memcached has atomic counters, `incr`/`decr`, and no scripts): every other algorithm is
//! refused with [`StoreError::NotOnStore`], and an operation the fixed window lacks with
//! [`StoreError::Unsupported`], before anything is sent. Its decisions are those of the memory
//! store at the same instants (see `window` for the commands and the decision of each op).
//!
//! # Exact, where upstream is not
//!
//! Upstream reads the counters (`GetMulti`), decides, and increments in the background, so
//! calls that overlap all read the same count and all pass. Here a check of cost `n` is an
//! atomic `incr key n` (created with `add` when absent, `incr` again when another node's `add`
//! won), and the decision is taken from the count that `incr` answered: of N calls on any
//! number of nodes, exactly as many as fit under the limit pass. A refused check gives its
//! `n` back with `decr`, so a refusal consumes nothing, as in memory. Between its `incr` and
//! its `decr`, the refused units count: a check deciding in that instant sees them, and may be
//! refused where the memory store would have admitted it. That overshoot can only
//! under-admit, never over-admit, and with unit costs it never changes a decision (a unit
//! check that finds the count at the limit is refused either way).
//!
//! # Keys, time and expiry
//!
//! A fixed window's counter is the key as given, `:`, and the window index
//! (`floor(now / window)`), on the store's own clock: memcached has no `TIME` (as upstream,
//! which uses its pods' clocks), so **the nodes' clocks must agree**; a node whose clock lags
//! counts in the window its clock says. Counters expire 5 s after their window ends (windows
//! over 30 days are given an absolute expiry, which needs a Unix-epoch clock). A key memcached
//! would refuse (over 250 bytes with its suffix, or with a space or control character) is
//! refused with [`StoreError::NotOnStore`] before anything is sent, never a panic.
//!
//! # Servers
//!
//! A key lives on one server, chosen as gomemcache chooses (CRC-32 of the key modulo the
//! number of servers, in the order given; see `selector`), so that counters written by
//! upstream's pods are found. [`MemcachedStore::from_srv`] takes the list from a DNS SRV
//! record, refreshed on an interval (upstream's `MEMCACHE_SRV`, `MEMCACHE_SRV_REFRESH`; see
//! `discovery`), and [`MemcachedStore::set_servers`] replaces it at run time. Each server has a small pool of connections, a
//! timeout on every call, and a circuit breaker of its own (see `connection`). The calls
//! waiting for one server go in one write (pipelined, see `batch`), the servers of a call at
//! once.
//!
//! # Chains and failures
//!
//! Chains run one link at a time (the trait's default), with no all-or-nothing undo. If a
//! call fails (`Err`), some of its operations may have been counted; a check that counted and
//! was over its limit still gives its units back when its server answers.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::algorithm::spec::AnyAlgorithm;
use crate::store::breaker::BreakerState;
use crate::store::{ensure_supported, KeyedOp, Store};
use crate::{Clock, Decision, Op, StoreError};

mod batch;
mod builder;
mod capabilities;
mod claims;
mod connection;
mod counters;
mod discovery;
mod job;
mod protocol;
mod selector;
mod tls;
mod window;

pub use builder::MemcachedStoreBuilder;
pub use claims::MAX_CLAIM_TRIES;
use connection::{Deadline, LinkSettings, Server};
use job::Job;
use protocol::{Command, Reply};
use window::WindowCall;
pub use window::EXPIRY_MARGIN;

/// The key [`MemcachedStore::probe`] adds and deletes.
const PROBE_KEY: &str = "floodgate:probe";

/// The store's clock (shown as such in `Debug`: clocks need not implement it).
#[derive(Clone)]
struct ExplicitClock(Arc<dyn Clock>);

impl std::fmt::Debug for ExplicitClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

/// Fixed windows in memcached, shared by every node that points at the same servers. See the
/// [module documentation](self) for the contract, keys, time and failures.
///
/// Cloning is cheap: clones share the servers' connections and breakers.
#[derive(Debug, Clone)]
pub struct MemcachedStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The servers, in the order given (the order picks a key's server).
    servers: RwLock<Arc<Vec<Arc<Server>>>>,
    link: LinkSettings,
    clock: ExplicitClock,
    namespaces: crate::store::Namespaces,
    /// Where the server list comes from, when an SRV record names it.
    discovery: Option<discovery::Discovery>,
}

impl MemcachedStore {
    /// A builder for a store on `servers`, each `host:port` (upstream's `MEMCACHE_HOST_PORT`),
    /// in the order that picks a key's server. Defaults: timeout 50 ms, connect timeout 2 s,
    /// breaker 3 failures and 1 s, 2 idle connections per server, [`crate::SystemClock`], no TLS.
    pub fn builder(servers: Vec<String>) -> MemcachedStoreBuilder {
        MemcachedStoreBuilder {
            servers,
            timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_secs(2),
            breaker: (3, Duration::from_secs(1)),
            max_idle: 2,
            clock: None,
            tls: tls::TlsSettings::default(),
            discovery: None,
        }
    }

    /// A builder for a store on the servers a DNS SRV record names (upstream's
    /// `MEMCACHE_SRV`), `_service._proto.domain`: each record's `target:port`, sorted, as
    /// upstream lists them (so keys land on the same servers), looked up when the store is
    /// built and again every [`MemcachedStoreBuilder::srv_refresh`]. A lookup that fails or
    /// finds nothing keeps the list as it was. Defaults as [`MemcachedStore::builder`].
    pub fn from_srv(record: impl Into<String>) -> MemcachedStoreBuilder {
        MemcachedStoreBuilder {
            discovery: Some(discovery::Discovery {
                record: record.into(),
                refresh: None,
                nameserver: None,
            }),
            ..MemcachedStore::builder(Vec::new())
        }
    }

    /// Looks the SRV record up now and, when it names servers, makes them the list (as
    /// [`MemcachedStore::set_servers`]); the list it set. A failed lookup, or one that
    /// finds no record, changes nothing and is the `Err` ([`StoreError::Unavailable`]). A
    /// store given its servers has no record: the list as it is.
    pub async fn refresh_servers(&self) -> Result<Vec<String>, StoreError> {
        let Some(discovery) = &self.inner.discovery else {
            return Ok(self.servers());
        };
        let servers = discovery.servers().await?;
        if servers != self.servers() {
            tracing::info!(record = %discovery.record, ?servers, "memcached servers from SRV");
            self.set_servers(servers.clone());
        }
        Ok(servers)
    }

    /// With an SRV record and a Tokio runtime: looks it up at once and then every refresh
    /// interval, for as long as the store (any clone of it) lives.
    fn start_discovering(&self) {
        let Some(discovery) = &self.inner.discovery else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (record, every) = (discovery.record.clone(), discovery.refresh);
        let store = Arc::downgrade(&self.inner);
        runtime.spawn(async move {
            loop {
                let Some(inner) = store.upgrade() else {
                    return;
                };
                if let Err(e) = (MemcachedStore { inner }).refresh_servers().await {
                    tracing::warn!(%record, error = %e, "memcached servers not refreshed; the list stays as it was");
                }
                let Some(every) = every else {
                    return;
                };
                tokio::time::sleep(every).await;
            }
        });
    }

    /// `Ok` when this store runs `algorithm` (the fixed window, any parameters); else the
    /// [`StoreError::NotOnStore`] every call with it gets. For refusing a configuration at
    /// start-up.
    pub fn runs(&self, algorithm: &AnyAlgorithm) -> Result<(), StoreError> {
        match algorithm {
            AnyAlgorithm::FixedWindow(_) => Ok(()),
            other => Err(StoreError::NotOnStore {
                store: "memcached",
                algorithm: crate::algorithm::Algorithm::name(other),
                reason: "memcached runs only the fixed window (atomic counters, no scripts)",
            }),
        }
    }

    /// Whether this store gives units back ([`Op::Refund`]) under `algorithm`: the fixed
    /// window does (`decr`); nothing else runs here.
    pub fn takes_refunds(&self, algorithm: &AnyAlgorithm) -> bool {
        matches!(algorithm, AnyAlgorithm::FixedWindow(_))
    }

    /// Whether this store counts units past the limit ([`Op::Charge`]) under `algorithm`: the
    /// fixed window does (`incr` with nothing given back); nothing else runs here.
    pub fn takes_charges(&self, algorithm: &AnyAlgorithm) -> bool {
        matches!(algorithm, AnyAlgorithm::FixedWindow(_))
    }

    /// Whether this store can run `algorithm` at all: [`MemcachedStore::runs`] as a `bool`.
    pub fn supports(&self, algorithm: &AnyAlgorithm) -> bool {
        self.runs(algorithm).is_ok()
    }

    /// Each server (`host:port`, in order) and where its breaker stands.
    pub fn server_breakers(&self) -> Vec<(String, BreakerState)> {
        let clock = &*self.inner.clock.0;
        self.inner
            .servers()
            .iter()
            .map(|s| (s.address.clone(), s.breaker.state(clock)))
            .collect()
    }

    /// Where the breakers stand, as one: `Open` when any server's breaker is open (its keys
    /// cannot be counted, so the store cannot decide for everyone), else `HalfOpen` when any
    /// is half open, else `Closed`; see [`MemcachedStore::server_breakers`] for each.
    pub fn breaker_state(&self) -> BreakerState {
        let states = self.server_breakers();
        let any = |s: BreakerState| states.iter().any(|(_, b)| *b == s);
        if any(BreakerState::Open) {
            BreakerState::Open
        } else if any(BreakerState::HalfOpen) {
            BreakerState::HalfOpen
        } else {
            BreakerState::Closed
        }
    }

    /// The servers, `host:port`, in the order that picks a key's server.
    pub fn servers(&self) -> Vec<String> {
        self.inner
            .servers()
            .iter()
            .map(|s| s.address.clone())
            .collect()
    }

    /// Replaces the server list (upstream's `MEMCACHE_SRV` refresh), in the order given:
    /// servers already in the list keep their connections and breakers, the others' idle
    /// connections are closed. Calls under way finish on the list they started with. An entry
    /// that is not `host:port` stays in the list (it picks keys as upstream's would) and its
    /// calls fail ([`StoreError::Refused`]); an empty list fails every call
    /// ([`StoreError::Unavailable`]) until servers are set again.
    pub fn set_servers(&self, servers: Vec<String>) {
        let old = self.inner.servers();
        let new: Vec<Arc<Server>> = servers
            .into_iter()
            .map(|address| {
                old.iter()
                    .find(|s| s.address == address)
                    .cloned()
                    .unwrap_or_else(|| Arc::new(Server::new(address, &self.inner.link)))
            })
            .collect();
        for gone in old
            .iter()
            .filter(|s| !new.iter().any(|n| Arc::ptr_eq(n, s)))
        {
            gone.close_idle();
        }
        if let Ok(mut list) = self.inner.servers.write() {
            *list = Arc::new(new);
        }
    }

    /// The bound on every call's commands, once connected.
    pub fn timeout(&self) -> Duration {
        self.inner.link.timeout
    }

    /// Checks that every server can be used now: on each, at once, an `add` of a probe key
    /// (`floodgate:probe`, 1 s expiry) and its `delete`, in one write, under the server's
    /// breaker and the connect timeout plus the call timeout. A write, not `version`, so that a
    /// server out of memory fails it as it fails decisions. The first failure is the answer.
    /// A store on an SRV record whose list is still empty looks the record up first.
    pub async fn probe(&self) -> Result<(), StoreError> {
        if self.inner.servers().is_empty() && self.inner.discovery.is_some() {
            self.refresh_servers().await?;
        }
        let servers = self.inner.servers();
        if servers.is_empty() {
            return Err(no_servers());
        }
        let commands = [
            Command::Add {
                key: PROBE_KEY.to_owned(),
                value: b"1".to_vec(),
                exptime: 1,
            },
            Command::Delete {
                key: PROBE_KEY.to_owned(),
            },
        ];
        let deadline = self.inner.deadline();
        let calls = servers
            .iter()
            .map(|s| s.exchange(&commands, &self.inner.link, deadline, &*self.inner.clock.0));
        for replies in futures_util::future::join_all(calls).await {
            for reply in replies? {
                if let Reply::Error(line) = reply {
                    return Err(job::refused(&line));
                }
            }
        }
        Ok(())
    }

    /// The value under the memcached key `key`, which this call stores first when the key holds
    /// nothing (`add` with no expiry, then `get`: of several nodes racing, every one gets the
    /// value of the first `add`). The key is written as given. For a setting the nodes must
    /// agree on, such as the secret that signs lease tokens. memcached may evict it under
    /// memory pressure (then the next call stores its own value): give it memory to spare.
    pub async fn get_or_set(&self, key: &str, value: &str) -> Result<String, StoreError> {
        protocol::check_key(key)?;
        let commands = [
            Command::Add {
                key: key.to_owned(),
                value: value.as_bytes().to_vec(),
                exptime: 0,
            },
            Command::Get {
                key: key.to_owned(),
            },
        ];
        let replies = self.inner.exchange_for(key, &commands).await?;
        match replies.as_slice() {
            [Reply::Error(line), _] | [_, Reply::Error(line)] => Err(job::refused(line)),
            [_, Reply::Value(Some((bytes, _)))] => String::from_utf8(bytes.clone()).map_err(|_| {
                StoreError::Protocol(format!("the key {key} holds bytes that are not text"))
            }),
            // Evicted between the two commands: what this node stored is gone too.
            [_, Reply::Value(None)] => Err(StoreError::Unavailable(format!(
                "memcached dropped the key {key} as soon as it was stored"
            ))),
            other => Err(StoreError::Protocol(format!(
                "memcached answered {other:?} to add and get"
            ))),
        }
    }
}

impl Inner {
    fn servers(&self) -> Arc<Vec<Arc<Server>>> {
        match self.servers.read() {
            Ok(list) => list.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn deadline(&self) -> Deadline {
        Deadline::after(self.link.timeout)
    }

    /// `commands` to the server that holds `key`, in one write.
    async fn exchange_for(
        &self,
        key: &str,
        commands: &[Command],
    ) -> Result<Vec<Reply>, StoreError> {
        let servers = self.servers();
        let server = selector::pick(key, servers.len())
            .map(|i| &servers[i])
            .ok_or_else(no_servers)?;
        server
            .exchange(commands, &self.link, self.deadline(), &*self.clock.0)
            .await
    }

    /// Runs every job to its end, a round at a time: each round, every job's next command,
    /// grouped by server, each group in one write, the servers at once. A server that fails
    /// fails its jobs; the others' run on (a check over its limit still gives back), and the
    /// first failure is the answer.
    async fn run(&self, jobs: &mut [&mut Job]) -> Result<(), StoreError> {
        let servers = self.servers();
        if servers.is_empty() {
            return Err(no_servers());
        }
        let deadline = self.deadline();
        let mut failure = None;
        loop {
            let mut groups: Vec<(Vec<usize>, Vec<Command>)> =
                vec![Default::default(); servers.len()];
            for (i, job) in jobs.iter().enumerate() {
                if let Some(command) = job.next() {
                    let s = selector::pick(&job.key, servers.len()).unwrap_or(0);
                    groups[s].0.push(i);
                    groups[s].1.push(command);
                }
            }
            if groups.iter().all(|(ids, _)| ids.is_empty()) {
                break;
            }
            let sent =
                groups
                    .iter()
                    .zip(servers.iter())
                    .map(|((ids, commands), server)| async move {
                        if ids.is_empty() {
                            return Ok(Vec::new());
                        }
                        server
                            .exchange(commands, &self.link, deadline, &*self.clock.0)
                            .await
                    });
            let answers = futures_util::future::join_all(sent).await;
            for ((ids, _), answer) in groups.iter().zip(answers) {
                let outcome = answer.and_then(|replies| {
                    ids.iter()
                        .zip(replies)
                        .try_for_each(|(&i, reply)| jobs[i].feed(reply))
                });
                if let Err(e) = outcome {
                    ids.iter().for_each(|&i| jobs[i].failed = true);
                    failure.get_or_insert(e);
                }
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// The fixed-window calls of `requests`, all refused before anything is sent if any is
    /// not for this store; `now` read once.
    fn calls(
        &self,
        requests: &[KeyedOp<'_, str, AnyAlgorithm>],
    ) -> Result<Vec<WindowCall>, StoreError> {
        let now = self.clock.0.now();
        requests
            .iter()
            .map(|r| {
                let AnyAlgorithm::FixedWindow(fw) = r.algorithm else {
                    return Err(StoreError::NotOnStore {
                        store: "memcached",
                        algorithm: crate::algorithm::Algorithm::name(r.algorithm),
                        reason:
                            "memcached runs only the fixed window (atomic counters, no scripts)",
                    });
                };
                ensure_supported(r.algorithm, r.op)?;
                WindowCall::new(fw, r.key, now, r.op)
            })
            .collect()
    }
}

fn no_servers() -> StoreError {
    StoreError::Unavailable("no memcached servers are set".to_owned())
}

impl Store<str, AnyAlgorithm> for MemcachedStore {
    async fn apply(
        &self,
        algorithm: &AnyAlgorithm,
        key: &str,
        op: Op,
    ) -> Result<Decision, StoreError> {
        let request = KeyedOp { algorithm, key, op };
        let mut decisions = self.apply_many(std::slice::from_ref(&request)).await?;
        decisions
            .pop()
            .ok_or_else(|| StoreError::Protocol("no decision came back".to_owned()))
    }

    async fn apply_many(
        &self,
        requests: &[KeyedOp<'_, str, AnyAlgorithm>],
    ) -> Result<Vec<Decision>, StoreError> {
        let mut calls = self.inner.calls(requests)?;
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let mut jobs: Vec<&mut Job> = calls.iter_mut().map(|c| &mut c.job).collect();
        self.inner.run(&mut jobs).await?;
        calls.iter().map(WindowCall::decide).collect()
    }

    fn same_store(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn namespaces(&self) -> Option<&crate::store::Namespaces> {
        Some(&self.inner.namespaces)
    }

    fn apply_detached(&self, algorithm: &AnyAlgorithm, key: &str, op: Op) {
        // Sent in the background when a Tokio runtime is at hand; failures are not reported.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let store = self.clone();
            let (algorithm, key) = (algorithm.clone(), key.to_owned());
            handle.spawn(async move {
                let _ = store.apply(&algorithm, &key, op).await;
            });
        }
    }
}
