//! A store in Redis, so that several nodes share one limit (behind the `redis` feature).
//!
//! [`RedisStore`] implements [`Store`]`<str, AnyAlgorithm>` with the same contract as the memory
//! store: each operation is applied atomically per key, with one clock per decision, and gives
//! exactly the [`Decision`] the Rust algorithm gives for the same state, instant and operation.
//!
//! # How a decision is made
//!
//! Each algorithm has a Lua twin of its transition, declared in its own module
//! (`algorithm/<name>/<name>.lua` and `twin.rs`); every script starts with this store's
//! `prelude.lua`. One operation is one script call: the script reads the key's state,
//! applies the rule and writes the new state, and Redis runs scripts one at a time, so the
//! transition is atomic and linearizable per key. Scripts are called by their SHA-1 (`EVALSHA`);
//! when Redis answers `NOSCRIPT` (after a restart, a failover or `SCRIPT FLUSH`) the store
//! sends the call again as `EVAL` of the script's source, which runs it and leaves it in that
//! server's script cache, so later calls go by SHA again.
//!
//! # Connecting
//!
//! `redis://[user:password@]host:port[/db]`, or `rediss://…` for TLS (rustls; the server's
//! certificate is checked against the system's roots, or the CA file given with
//! [`RedisStoreBuilder::tls_ca_file`]; a client certificate is presented with
//! [`RedisStoreBuilder::tls_client_cert`]; [`RedisStoreBuilder::tls_skip_hostname_verification`]
//! checks the chain but not the name). `redis-sentinel://[user:password@]s1:p1,s2:p2/master[/db]`
//! (`rediss-sentinel://` for TLS) connects to the master the sentinels name and follows
//! failovers (see `sentinel.rs`: a call that failed on the link, or was answered `READONLY`,
//! makes the next one ask the sentinels again); the sentinels' own credentials go in the query,
//! `?sentinel_user=…&sentinel_pass=…`. A password never appears in errors or `Debug` output
//! ([`redacted`]).
//!
//! # Keys and state
//!
//! One Redis key per limiter key (no companion keys), hash-tagged so that everything of one
//! user shares one Redis Cluster slot: limiters pass `namespace:key` (namespaces never contain
//! `:`, `{` or `}`), written as `namespace:{key}`; a key without `:` is written as `{key}`
//! ([`redis_key`] gives the Redis key of a store key, for looking at state by hand). So
//! `api:alice` and `login:alice` live on the same cluster node, and a batch for one user is one
//! pipeline. The layout is the same on a single Redis and on a cluster. Two edge cases follow
//! Redis's hashing rule (the part between the first `{` and the first `}` after it, if not
//! empty): `ns:` (an empty key) is written `ns:{}`, which Redis hashes whole; a key containing
//! `}` is hashed up to it (`ns:{a}b}` hashes `a`). Either way the mapping stays one-to-one.
//!
//! Its value is one short string, the algorithm's tag and its state separated by `:`, or for
//! the algorithms whose state is a collection a sorted set (the leases, which are looked up by
//! id and by expiry) or a list (the sliding log, a queue):
//!
//! | algorithm | value |
//! |---|---|
//! | GCRA | `G:tat_us:tat_sub` (the theoretical arrival time) |
//! | fixed window | `F:start_us:start_sub:count` |
//! | token bucket | `T:tokens:last_us` (tokens printed with 17 significant digits) |
//! | leaky bucket (meter) | `M:room:last_us` (the token bucket's state: room left = `capacity − level`) |
//! | leaky queue | `Q:free_us:free_sub` (the instant the next slot is free) |
//! | sliding log | list: `S`, the total cost, then each entry's instant (whole µs) and cost as two elements, oldest first (an entry per distinct instant) |
//! | sliding window, weighted (`buckets: None`) | `W:start_us:start_sub:previous:current:last_us` |
//! | sliding window, `N` sub-buckets | `B:N:head_us:head_sub`, then `age:count` for each sub-bucket still holding cost (age 0 is the newest bucket, whose start is `head`; ages run to `N`): sparse, so a key costs what its traffic fills, not `N + 1` counters |
//! | smooth bursty, smooth warming up | `R:stored:next_free_us:seen_us` (bursty), `U:…` (warming up), and a fifth field, the rate, when `set_rate` changed it; `stored` and the rate printed with the fewest digits (15 to 17) that read back exactly |
//! | concurrency, fleet | sorted set: each lease's id (32 hex digits) scored `exp_us + 1` (non-critical) or `−(exp_us + 1)` (critical), and one marker member `C:seen_us` (concurrency) or `L:seen_us` (fleet) at score 0 |
//!
//! The sliding window's two modes (and two bucket counts) are one algorithm: as in memory, a
//! state of the other mode counts as fresh, and is replaced by the first request with a cost.
//!
//! An instant is `us × 1000 + sub` nanoseconds since the clock's epoch. A lease's expiry is
//! `exp_us × 1000 + (lease_ttl mod 1000 ns)`: every instant the lease script sees is a whole
//! microsecond, so all of one key's expiries share that sub-microsecond part. The marker keeps
//! the latest instant a mutating operation saw (a clock going backwards counts as that one), and
//! expired leases are removed by the next acquire or release (`ZREMRANGEBYSCORE`), as in
//! [`crate::algorithm::concurrency`]. A key holding another algorithm's value is refused with
//! [`StoreError::StateConflict`] and left as it is.
//!
//! # TTL
//!
//! Every write sets a TTL (`SET … PX`) equal to the time until the state is indistinguishable
//! from a fresh key's (the algorithm's
//! [`Algorithm::is_fresh`](crate::algorithm::Algorithm::is_fresh)), rounded up to whole
//! milliseconds, which is Redis's resolution: a key outlives its last useful instant by less than
//! 1 ms, so Redis memory is bounded by the keys active in the last window, burst or refill time.
//! A transition whose result is already fresh (a probe, a refused request on an empty key) writes
//! nothing; one that turns an existing state fresh (a `set_rate` back to the configured rate on
//! a smooth key at rest, a sliding window's other-mode state replaced) deletes the key. For
//! leases the TTL runs until the last lease expires (or the clock is back past the latest
//! instant seen); an acquire or release that leaves the state fresh (the last lease released)
//! deletes the key. [`RedisStoreBuilder::min_ttl`] lengthens TTLs, for an explicit clock that
//! may run slower than Redis's (a test's [`crate::ManualClock`] standing still while real time
//! passes).
//!
//! **Keys kept without a TTL.** Two smooth states are never fresh, so they are kept without a
//! TTL, exactly as the memory store keeps them (until its bound evicts them): a bursty key
//! starting empty ([`crate::algorithm::smooth::BurstyStart::Empty`], Guava's exact start) with
//! `max_burst_seconds > 0` (an idle key fills up, while a new one starts empty: see
//! [`crate::algorithm::smooth`]), which its first operation creates even when it is a probe, and
//! a smooth key whose rate `set_rate` changed. Bound those with Redis's own eviction
//! (`maxmemory` with an `allkeys-*` policy), or use the default bursty start (full), the
//! warming-up flavour or `max_burst_seconds = 0`, whose keys expire when back at rest.
//!
//! # Time
//!
//! By default `now` is Redis `TIME`, read inside the script, in microseconds: every node sharing
//! the Redis sees the same clock, however skewed their own are. [`RedisStoreBuilder::clock`]
//! takes an explicit [`Clock`] instead, whose instant (truncated to whole microseconds) is passed
//! to the script: for replaying a trace with its own times, and for tests.
//!
//! # Exactness
//!
//! Lua numbers are doubles, exact for integers below 2⁵³. The scripts keep instants in whole
//! microseconds (2⁵³ µs is 285 years after the epoch) with sub-microsecond parts as separate
//! integers, and every duration they compute in nanoseconds is below 2⁵³; token counts and the
//! smooth limiters' permits and intervals are the same `f64` operations, in the same order, as
//! the Rust algorithm's (Guava's truncating casts included). The sliding window's integer
//! products (`previous × weight` against `(limit − current − cost) × window`, up to 2¹⁰⁰) are
//! compared in two 52-bit limbs and divided by long multiplication, never rounded. So a Lua
//! twin's decision is exactly its algorithm's, within these limits, which the store checks
//! before sending anything ([`StoreError::NotOnStore`] otherwise):
//! - every duration the algorithm works with (GCRA's `τ`, the sliding and log windows, the
//!   token bucket's time to refill from empty, the leaky bucket's time to drain from full, the
//!   leaky queue's slot and `queue × slot`, a lease's `lease_ttl`) is at most 2⁵⁰ ns, about
//!   13 days; the fixed window's, at most 2⁵⁰ µs (35 years: Envoy's 30-day months and 365-day
//!   years run, its start found by an exact quotient beyond 2⁵⁰ ns); for the smooth limiters,
//!   the time to fill up from empty (`max_burst_seconds`, or the warmup) is at most 2⁵⁰ µs;
//! - counts (GCRA's limit, the windows' and the log's limits, the buckets' capacity, the queue's
//!   length, the leases' capacity) are at most 2⁵⁰, and a smooth key's most stored permits (at
//!   the configured rate, or at a `set_rate`'s) below 2⁵³;
//! - an explicit clock's instants are below 2⁵³ µs (for leases, the instant plus `lease_ttl`;
//!   for a fixed window, the instant plus the window).
//!
//! One limit depends on the state, so the script checks it: a smooth key's next free instant
//! stays below 3 × 2⁵¹ µs (the year 2184 on a Unix clock). A reservation that would push it
//! further (a debt of centuries) is refused with [`StoreError::NotOnStore`] and changes
//! nothing.
//!
//! A cost above the limit can never pass; it is sent as `limit + 1`, which gives the same
//! decision. The fleet's non-critical allowance is computed in Rust and sent as an integer.
//!
//! Conformance, which `tests/redis_conformance.rs` checks on random sequences: for the same
//! operations at the same non-decreasing instants, the memory store and this store give equal
//! decisions, and at instants going back too for the algorithms whose twins keep the latest
//! instant seen as the Rust algorithms do (all but GCRA, the fixed window and the two
//! buckets). As on the memory store, a key dropped because it was fresh (here: expired) behaves
//! as a kept one for every later instant; a clock going back before a dropped key's last instant
//! sees a fresh key.
//!
//! # Failures
//!
//! Every call is bounded by the store's timeout (50 ms by default,
//! [`RedisStoreBuilder::timeout`]) and then fails with [`StoreError::Timeout`]; a refused
//! connection is [`StoreError::Refused`], and a Redis that answers a call with an error
//! instead of running it is [`StoreError::Rejected`], naming the error ([`crate::store::Rejection`]:
//! `READONLY` from a replica, `OOM` at `maxmemory` with `noeviction`, `MISCONF` after a failed
//! save, `NOPERM`, `BUSY`, …). Such a Redis answers, but decides nothing: every one of those
//! errors is a failure of the store, counted by the breaker, and [`RedisStore::probe`] runs
//! the write path so that a store refusing writes fails it too. Setting a connection up is
//! bounded apart, by [`RedisStoreBuilder::connect_timeout`] (2 s by default), and happens in
//! the background: a call waits for it at most its own timeout. The connection (redis-rs's
//! `ConnectionManager`, one multiplexed connection that concurrent calls share) reconnects by
//! itself, so calls succeed again once Redis is back, without restarting anything. A server
//! that answers `READONLY` (a master demoted to a replica by a failover, while the connection
//! still points at it) fails that call and makes the store drop the connection: the next call
//! connects anew, to whatever the URL names now (a DNS name or proxy that follows the master),
//! unless [`RedisStoreBuilder::reconnect_on_readonly`] says to keep it.
//! A key holding a value Floodgate did not write (a string without a known tag, or another
//! Redis type than the string, list or sorted set a twin writes) is a
//! [`StoreError::StateConflict`] too, and is left as it is.
//!
//! # Group commit
//!
//! Redis runs scripts on one core, and much of a one-decision call's cost there is fixed (the
//! dispatch, `TIME`, reading the key, the reply), so the store sends decisions together
//! (see `batching.rs`). Every decision joins the queue of its *lane* (the one Redis; on a
//! cluster, its key's slot). A lane has at most [`RedisStoreBuilder::batch_in_flight`] script
//! calls in flight (2 by default): a decision that finds room is sent at once, alone (no
//! timer, no wait for company); decisions arriving while the lane's calls are in flight go
//! together in the next call, when one returns, up to [`RedisStoreBuilder::batch_max_keys`]
//! keys per call (128 by default). On a cluster a lane is a master, once the store knows the
//! slot map (see [Circuit breaker](#circuit-breaker); before, each slot is a lane): its batch
//! runs as one call of a variant of the script whose flags (`allow-cross-slot-keys`, Redis 7)
//! let it touch keys of every slot that master serves, reading them with one `MGET` per slot.
//! A batch whose keys moved to another master meanwhile (resharding, failover) is refused by
//! Redis without running, and fails like any call on a moving slot.
//!
//! A batch is one call of `batch.lua`: each request (one decision, or one request's chain on
//! one slot) is a group in it, run in queue order, atomically, at its own instant (one `TIME`
//! per call with Redis's clock; each request's own instant with an explicit clock). So each
//! decision is exactly the one it would get alone at that point of the order, and a chain's
//! all-or-nothing links are undone inside its group. The string states of every key of the
//! batch are read with one `MGET` (and the keys it found missing confirmed with one `EXISTS`),
//! each written with one `SET … PX`; a lone decision runs its twin's own, smaller script.
//! [`RedisStore::batch_stats`] counts calls, decisions and the sizes of batches.
//!
//! What a timeout means here: a request whose caller stopped waiting before its batch was sent
//! is dropped, never sent. A batch sent and then timed out may still run when Redis gets to it
//! (its callers were told [`StoreError::Timeout`] and were not counted as decided); it is never
//! sent again. Since a lane waits for its calls to return or time out before sending more,
//! while Redis does not answer each lane sends at most `batch_in_flight` batches per timeout,
//! and none once the breaker is open: at most `threshold × batch_in_flight` batches per lane
//! (plus those of each half-open probe), each of at most `batch_max_keys` decisions, can take
//! effect late. Requests in flight together carry no order between them: with two calls in
//! flight, a call that waits for the connection or is sent again after `NOSCRIPT` can be
//! overtaken by the next one, and on a cluster a key's lane changes (from its slot's to its
//! master's) when the store learns the slot map.
//!
//! # Several operations in one round trip
//!
//! [`Store::apply_many`] checks every operation first (refusing the whole batch, before
//! anything is sent, if one cannot run here), then queues each as a request of its own in its
//! lane (with group commit off: sends all their `EVALSHA` calls in one pipeline, on a cluster
//! one per slot), under one timeout and one breaker permit. Each operation is still atomic on
//! its own key; the set as a whole is not a transaction. Calls Redis answers `NOSCRIPT` (and
//! only those, so nothing runs twice) are sent again, as `EVAL` of the script's source (which
//! loads it). The first failing reply, in request order, is the error (the other calls have
//! run).
//!
//! # Redis Cluster
//!
//! A URL `redis-cluster://host1:port1,host2:port2,…` (optionally
//! `redis-cluster://user:password@host1:port1,…`; the hosts are seeds, from which the whole
//! topology is learnt; `rediss-cluster://…` for TLS, with the builder's TLS files) makes the
//! store use redis-rs's cluster client instead. Everything above
//! holds on a cluster, with these points:
//!
//! - **Routing.** Each call goes to the master serving its key's slot. The [hash-tagged
//!   keys](#keys-and-state) put every namespace's state of one user in one slot, so one user's
//!   keys live on one node.
//! - **Slots moving, and failover.** Slot migration (a master added and filled, a slot moved,
//!   a master drained) is a redirection to follow, never a failure (`redirect.rs`): a call
//!   answered `MOVED` goes to the node named, `ASK` to the target as `ASKING` and the call in
//!   one write, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN` and `LOADING` again after a short
//!   pause, up to twenty sends within the call's timeout; each followed is counted
//!   ([`RedisStore::redirect_stats`]) and none counts for the breaker. Such an answer means
//!   the call did not run; nothing else is sent twice (the client's own retries are off:
//!   after a lost connection or a timeout it would resend a call that may have run). The
//!   client refreshes its slot map after `MOVED`, `READONLY` (a demoted master) or a lost node,
//!   and the store its own (below) once per burst. Every call's keys share a slot (the hash
//!   tags), so that Redis checks them all before a call runs; the batches of several slots
//!   check theirs first and run nothing when one is moving (see **Batches**). The scripts
//!   never empty a key and write it again in one call (Redis refuses the write on a slot being
//!   moved). While a master is down and until its replica has taken over (the
//!   cluster's `cluster-node-timeout` plus an election), calls on its slots fail or time out
//!   within the store's timeout, and count towards that master's breaker; afterwards they
//!   succeed again without rebuilding the store. Calls on other masters' slots are unaffected:
//!   each master has a breaker of its own (see below).
//! - **Scripts.** `NOSCRIPT` (a new node, a promoted replica, `SCRIPT FLUSH`) is answered by
//!   `EVAL` of the source, routed by the same key, so the script is loaded on exactly the node
//!   that runs it (`SCRIPT LOAD` has no key, and would have to reach every node).
//! - **Batches.** With group commit (the default), decisions go in one script call per
//!   master (see [Group commit](#group-commit)), the masters' calls concurrently. Such a call
//!   declares one key, so before it writes anything the script asks, for each slot it
//!   touches, about a key of that slot that never exists: on a slot served elsewhere or being
//!   moved that fails (`MOVED`, `ASK`), and the batch answers that it ran nothing; a batch
//!   answered with a redirection is not followed either. Its requests then go one by one,
//!   each with its keys declared and following its redirections (counted as `split`). Without it,
//!   redis-rs sends a pipeline to one node and refuses one spanning slots, so
//!   [`Store::apply_many`] sends one pipeline per slot, all at once (concurrently), under the
//!   one timeout: a batch for one user is one round trip; a batch over many users costs the
//!   slowest of its pipelines. Calls a node answers with a redirect or `TRYAGAIN`/`CLUSTERDOWN`
//!   (they did not run) are sent again one by one, in order, through the client's redirect
//!   handling.
//! - **Atomicity.** Each call is atomic on its key, on the master serving it, exactly as on a
//!   single Redis; nothing spans keys. Replication is asynchronous: a failover after a master
//!   died can lose its last acknowledged writes (a manual `CLUSTER FAILOVER` does not), so a
//!   limit may admit a little more than its capacity once, around such a failover. A call that
//!   timed out may still run late (see [Group commit](#group-commit)), but is never sent again.
//!   Limits are exact except around such failures.
//!
//! # Circuit breaker
//!
//! A Redis that keeps failing must not cost every request the timeout. After `threshold`
//! consecutive *failures of the store* (timeouts, connection errors, and every error answer:
//! `READONLY`, `OOM`, `MISCONF`, `NOPERM`, `BUSY`, a script error, and on a cluster redirects,
//! `TRYAGAIN` or `CLUSTERDOWN` left after the store's sends; default 3) the breaker opens:
//! every call fails at once with [`StoreError::BreakerOpen`], without touching the network,
//! until the cool-down (default 1 s) has passed. Then one call probes Redis (the others still
//! fail at once): its success closes the breaker, its failure opens it for another cool-down.
//! Any success resets the count. A key's own problem (a state conflict, which the scripts
//! answer as a value, not an error) and refusals made before sending
//! ([`StoreError::NotOnStore`]) are not failures of the store. Time is the
//! store's clock: the explicit [`RedisStoreBuilder::clock`] if one is given, else a
//! [`SystemClock`](crate::SystemClock). [`RedisStoreBuilder::breaker`] sets both numbers (threshold 0 turns the
//! breaker off) and [`RedisStore::breaker_state`] shows where it stands.
//!
//! On a cluster each master has a breaker of its own (`nodes.rs`), found through the slot map
//! the store asks for (`CLUSTER SLOTS`: first by [`RedisStore::probe`], which waits for it, or
//! in the background on first use; again, in the background, after a link failure), so a dead master opens the breaker of its slots only and keys on the other
//! masters keep exact counting. [`RedisStore::node_breakers`] lists each master's state;
//! [`RedisStore::breaker_state`] is then the most closed of them. A chain is guarded by the
//! breaker of its first link's master (one user's links share a slot); until the slot map is
//! known, and for calls bound to no slot (the probe, the cached store's sync), the store's one
//! breaker counts.
//!
//! # What is refused
//!
//! Every algorithm runs on Redis, with the operations it supports (shaping operations on the
//! shapers, leases on the lease algorithms); other operations are refused with
//! [`StoreError::Unsupported`], and parameters beyond the exact limits above with
//! [`StoreError::NotOnStore`], before anything is sent.

use std::sync::Arc;
use std::time::Duration;

use super::{KeyedOp, Link, Linked, Store};
use crate::algorithm::spec::AnyAlgorithm;
use crate::{Clock, Decision, Op, StoreError};

mod batching;
mod builder;
mod call;
mod capabilities;
mod chain;
mod connection;
mod counters;
mod exchange;
mod keys;
mod link;
mod nodes;
mod passwords;
mod probe;
mod quota_claims;
mod redirect;
mod rejections;
mod reply;
mod sentinel;
mod server_stats;
mod tls;
use super::breaker::Breaker;
pub use super::breaker::BreakerState;
pub use super::counters::CounterIncrement;
pub use batching::BatchStats;
use batching::{JobLink, Lanes};
pub use builder::RedisStoreBuilder;
pub use call::script_source;
use call::{not_on_redis, Call, Scripts, MAX_MICROS};
use connection::Connection;
pub(crate) use exchange::{Exchange, Exchanged};
pub use keys::redis_key;
use nodes::Nodes;
pub use passwords::redacted;
use passwords::secrets;
pub use redirect::RedirectStats;
pub use server_stats::ScriptTime;

/// The store key [`RedisStore::probe`] writes and deletes (`floodgate:{probe}` in Redis).
const PROBE_KEY: &str = "floodgate:probe";

/// How long setting a connection up may take by default
/// ([`RedisStoreBuilder::connect_timeout`]).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// An explicit clock (shown as such in `Debug`: clocks need not implement it).
#[derive(Clone)]
struct ExplicitClock(Arc<dyn Clock>);

impl std::fmt::Debug for ExplicitClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExplicitClock")
    }
}

/// Keyed state in Redis, shared by every node that points at the same Redis. See the [module
/// documentation](self) for the contract, the key layout, TTLs, time and failures.
///
/// Cloning is cheap: clones share one connection.
#[derive(Debug, Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    connection: Connection,
    timeout: Duration,
    /// The bound on setting a connection up (see [`RedisStoreBuilder::connect_timeout`]).
    connect_timeout: Duration,
    /// Whether `READONLY` from a single Redis remakes the connection.
    reconnect_on_readonly: bool,
    min_ttl_ms: u64,
    clock: Option<ExplicitClock>,
    scripts: Scripts,
    /// The breaker of a single Redis; on a cluster, of calls not bound to a slot (and of all
    /// calls until the slot map is known).
    breaker: Arc<Breaker>,
    /// The breaker of the shared limits' claims ([`RedisStore::claim`]), apart from the
    /// decisions': a claims step has a budget of its own, and no request waits on it, so
    /// decisions or probes timing out must not fail it, nor it them.
    claims_breaker: Breaker,
    /// On a cluster: a breaker per master.
    nodes: Option<Nodes>,
    /// The breaker's time: the explicit clock, else a [`SystemClock`](crate::SystemClock).
    breaker_clock: ExplicitClock,
    /// The URL's password, as written and percent-decoded: scrubbed from every error message
    /// the client gives, so that it cannot reach a log or a response.
    secrets: Vec<String>,
    /// The group commit's queues, unless it is off.
    lanes: Option<Lanes>,
    /// The namespaces of the limiters on this store (and on cached stores over it).
    namespaces: super::Namespaces,
    /// The cluster's redirections followed so far.
    redirects: redirect::RedirectCounts,
}

impl RedisStore {
    /// A builder for a store at `url`: `redis://host:port[/db]` for one Redis,
    /// `redis-cluster://host:port,host:port,…` for a Redis Cluster.
    pub fn builder(url: impl Into<String>) -> RedisStoreBuilder {
        RedisStoreBuilder {
            url: url.into(),
            timeout: Duration::from_millis(50),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            reconnect_on_readonly: true,
            min_ttl: Duration::ZERO,
            clock: None,
            breaker_threshold: 3,
            breaker_cool_down: Duration::from_secs(1),
            tls_ca_file: None,
            tls_client: None,
            tls_skip_hostname_verification: false,
            batch_max_keys: 128,
            batch_in_flight: 2,
        }
    }

    /// The Redis Cluster's redirections this store has followed so far, by kind (all zero on
    /// one Redis): calls sent on to where a slot now lives, never failures.
    pub fn redirect_stats(&self) -> RedirectStats {
        self.inner.redirects.stats()
    }

    /// What the group commit has sent so far: script calls made for decisions, the decisions
    /// they carried, and how many calls carried how many (all zero when it is off).
    pub fn batch_stats(&self) -> BatchStats {
        self.inner
            .lanes
            .as_ref()
            .map(Lanes::stats)
            .unwrap_or_default()
    }

    /// Whether this store gives back units ([`Op::Refund`]) under `algorithm`: every
    /// algorithm that takes refunds (the fixed window, the token and leaky buckets, GCRA, the
    /// sliding window counter), each in its Lua twin. The others' refunds are refused with
    /// [`StoreError::Unsupported`].
    pub fn takes_refunds(algorithm: &AnyAlgorithm) -> bool {
        algorithm.twin_takes_refunds()
    }

    /// Whether this store counts units past the limit ([`Op::Charge`]) under `algorithm`: the
    /// fixed window, the token and leaky buckets and GCRA, each in its Lua twin.
    pub fn takes_charges(algorithm: &AnyAlgorithm) -> bool {
        algorithm.twin_takes_charges()
    }

    /// Whether this store can run `algorithm` with its parameters (its `check`, at least):
    /// `false` when every call with it would be refused with [`StoreError::NotOnStore`] (its
    /// parameters are beyond the exact limits of its Lua twin). For refusing such a
    /// configuration at start-up.
    pub fn supports(&self, algorithm: &AnyAlgorithm) -> bool {
        self.runs(algorithm).is_ok()
    }

    /// [`RedisStore::supports`], with the refusal that says why not
    /// ([`StoreError::NotOnStore`], naming the limit exceeded).
    pub fn runs(&self, algorithm: &AnyAlgorithm) -> Result<(), StoreError> {
        self.inner.call(algorithm, Op::Check { cost: 1 }).map(drop)
    }

    /// Where the circuit breaker stands now (on the store's clock). On a cluster, with a
    /// breaker per master: the most closed of them (`Open` only when every master's breaker
    /// is open, so that the store as a whole is unusable), or the store's one until the slot
    /// map is known.
    pub fn breaker_state(&self) -> BreakerState {
        let clock = &*self.inner.breaker_clock.0;
        let whole = self.inner.breaker.state(clock);
        let nodes = self.node_breakers();
        let rank = |s: &BreakerState| match s {
            BreakerState::Closed => 0,
            BreakerState::HalfOpen => 1,
            BreakerState::Open => 2,
        };
        nodes
            .into_iter()
            .map(|(_, s)| s)
            .min_by_key(rank)
            .unwrap_or(whole)
    }

    /// On a Redis Cluster, each master (`host:port`, from the last slot map) and where its
    /// breaker stands; empty for a single Redis and before the map is known.
    pub fn node_breakers(&self) -> Vec<(String, BreakerState)> {
        match &self.inner.nodes {
            Some(nodes) => nodes.states(&*self.inner.breaker_clock.0),
            None => Vec::new(),
        }
    }

    /// The bound on every call.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// The value stored under the Redis key `key`, which this call stores first when the key
    /// holds nothing (atomically, in one script: of several nodes racing, every one gets the
    /// first one's `value`). The key is written as given (no namespace, no hash tag) and never
    /// expires. For a setting the nodes sharing this store must agree on, such as the secret
    /// that signs lease tokens; under the store's timeout and breaker.
    pub async fn get_or_set(&self, key: &str, value: &str) -> Result<String, StoreError> {
        const SCRIPT: &str = "local v = redis.call('GET', KEYS[1]) \
            if v then return v end \
            redis.call('SET', KEYS[1], ARGV[1]) return ARGV[1]";
        let inner = &self.inner;
        inner
            .guarded(async {
                let mut handle = inner.connection.handle();
                let answer = inner
                    .send_script(&mut handle, |_| {
                        let mut eval = redis::cmd("EVAL");
                        eval.arg(SCRIPT).arg(1).arg(key).arg(value);
                        eval
                    })
                    .await?;
                match answer {
                    redis::Value::BulkString(bytes) => String::from_utf8(bytes).map_err(|_| {
                        StoreError::Protocol(format!("the key {key} holds bytes that are not text"))
                            .into()
                    }),
                    other => Err(StoreError::Protocol(format!(
                        "the key {key} holds {other:?}, not a string"
                    ))
                    .into()),
                }
            })
            .await
    }

    /// Checks that the store can be used now, on the path decisions take: a script call (by
    /// SHA, by source when Redis lacks it) that writes a key and removes it again, under the
    /// store's circuit breaker, bounded by the connect timeout plus the call timeout. It
    /// connects if there is no connection yet (with the URL's credentials and database). A
    /// server that answers but refuses writes (a replica, out of memory, writes stopped after a
    /// failed save, an ACL without `SET`) fails it as it fails decisions: a probe that only
    /// connected, or ran a script that writes nothing, would call such a store healthy. On a
    /// Redis Cluster it writes on every master, each under its own breaker; the first failure
    /// is the answer. Nothing is left behind: the probe key (`floodgate:{probe}`, on a cluster
    /// `floodgate:{probe-N}`) is deleted in the same script that writes it.
    ///
    /// A success also means the decisions' path is warm, so that the first decisions after it
    /// wait for nothing set up lazily (see `store/redis/probe.rs`): every script the store
    /// calls is loaded on each server, and on a cluster the slot map is asked for now (until
    /// two answers agree) and is the one decisions route by, and the store's own connection to
    /// every master of it (the one decisions are sent on) is open and has carried that
    /// master's probe write.
    ///
    /// For checking a store at start-up, and for finding out that a failing store is back
    /// while no traffic comes. The error says what is wrong ([`StoreError::Refused`],
    /// [`StoreError::Auth`], [`StoreError::Protocol`], [`StoreError::Rejected`],
    /// [`StoreError::Timeout`], [`StoreError::Unavailable`]), the URL's password scrubbed from
    /// it.
    pub async fn probe(&self) -> Result<(), StoreError> {
        self.inner.probe().await
    }
}

impl Inner {
    /// Checks `op` and builds its script call, or refuses it before anything is sent.
    fn call<'a>(&'a self, algorithm: &AnyAlgorithm, op: Op) -> Result<Call<'a>, StoreError> {
        self.scripts.call(algorithm, op)
    }

    /// `ARGV[1]`: the explicit clock's instant in whole microseconds, or empty for Redis `TIME`.
    fn now_arg(&self, algorithm: &AnyAlgorithm) -> Result<String, StoreError> {
        self.now_arg_for(std::slice::from_ref(algorithm).iter())
    }

    /// [`Inner::now_arg`] for one call running several algorithms: the clock is read once.
    fn now_arg_for<'a>(
        &self,
        algorithms: impl Iterator<Item = &'a AnyAlgorithm>,
    ) -> Result<String, StoreError> {
        let Some(ExplicitClock(clock)) = &self.clock else {
            return Ok(String::new());
        };
        let micros = clock.now().0 / 1000;
        for algorithm in algorithms {
            // A lease's expiry (in microseconds, plus 1), and a fixed window's end, must stay
            // below 2^53 too.
            let ahead = algorithm.twin_horizon_us();
            if micros.saturating_add(ahead) >= MAX_MICROS {
                return Err(not_on_redis(
                    algorithm,
                    "the clock is past 2^53 microseconds",
                ));
            }
        }
        Ok(micros.to_string())
    }
}

impl Store<str, AnyAlgorithm> for RedisStore {
    async fn apply(
        &self,
        algorithm: &AnyAlgorithm,
        key: &str,
        op: Op,
    ) -> Result<Decision, StoreError> {
        let inner = &self.inner;
        let call = inner.call(algorithm, op)?;
        let now = inner.now_arg(algorithm)?;
        let (lane, breaker) = inner.route(key);
        if inner.lanes.is_none() {
            return inner
                .guarded_by(&breaker, inner.run(algorithm, key, &now, &call))
                .await;
        }
        let link = JobLink {
            key: key.to_owned(),
            twin: call.script.twin,
            flags: std::borrow::Cow::Borrowed("-"),
            args: call.args,
        };
        inner
            .guarded_by(&breaker, async {
                let value = inner.decided(lane, link, now).await?;
                Ok(reply::decode(algorithm, value)?)
            })
            .await
    }

    async fn apply_many(
        &self,
        requests: &[KeyedOp<'_, str, AnyAlgorithm>],
    ) -> Result<Vec<Decision>, StoreError> {
        let inner = &self.inner;
        // Refuse the batch before sending anything if any operation cannot run here.
        let calls = requests
            .iter()
            .map(|r| inner.call(r.algorithm, r.op))
            .collect::<Result<Vec<_>, _>>()?;
        let nows = requests
            .iter()
            .map(|r| inner.now_arg(r.algorithm))
            .collect::<Result<Vec<_>, _>>()?;
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        if inner.lanes.is_none() {
            return inner.guarded(inner.run_many(requests, &nows, &calls)).await;
        }
        inner.decided_many(requests, nows, calls).await
    }

    async fn apply_chain(
        &self,
        links: &[Link<'_, str, AnyAlgorithm>],
    ) -> Result<Vec<Linked>, StoreError> {
        self.inner.chain(links, false).await
    }

    async fn apply_chain_refused(
        &self,
        links: &[Link<'_, str, AnyAlgorithm>],
    ) -> Result<Vec<Linked>, StoreError> {
        self.inner.chain(links, true).await
    }

    fn same_store(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    fn namespaces(&self) -> Option<&super::Namespaces> {
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

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn the_builder_never_shows_a_password() {
        let builder = super::RedisStore::builder("redis://u:s3cret@h:1");
        assert!(!format!("{builder:?}").contains("s3cret"));
    }

    #[tokio::test]
    async fn cluster_urls() {
        use super::RedisStore;
        assert_eq!(
            redacted("redis-cluster://u:s3cret@h:1,h:2"),
            "redis-cluster://u:***@h:1,h:2"
        );
        for url in [
            "redis-cluster://127.0.0.1:7000,127.0.0.1:7001",
            "redis-cluster://u:s3cret@127.0.0.1:7000,127.0.0.1:7001/",
            "redis-cluster://:s3cret@localhost:7000",
        ] {
            assert!(RedisStore::builder(url).build().is_ok(), "{url}");
        }
        for url in [
            "redis-cluster://",
            "redis-cluster://u:s3cret@",
            "redis-cluster://u:s3cret@h:1,,h:2",
            "redis-cluster://u:s3cret@h:1/2",
            "redis-cluster://u:s3cret@h:notaport",
        ] {
            let err = RedisStore::builder(url).build().unwrap_err().to_string();
            assert!(
                err.contains("url") && !err.contains("s3cret"),
                "{url}: {err}"
            );
        }
    }
}
