//! What the Redis test files share: a runtime, a plain connection, a store on the test's own
//! clock, realistic instants.
#![allow(dead_code)] // each test binary uses a different part

use std::time::Duration;

use floodgate::store::redis::RedisStoreBuilder;
use floodgate::store::RedisStore;
use floodgate::{ManualClock, Op};
use floodgate_harness::RedisServer;

/// The store at `url` deciding at `clock`'s instants (not Redis `TIME`), with a timeout
/// generous enough for a loaded machine, and every key kept at least an hour, since the manual
/// clock stands still while real time passes. Built inside `rt`, which runs its connection.
pub fn store_on_clock(rt: &tokio::runtime::Runtime, url: &str, clock: &ManualClock) -> RedisStore {
    store_on_clock_with(rt, url, clock, &|b| b)
}

/// [`store_on_clock`], with `configure` applied to the builder (TLS files, say).
pub fn store_on_clock_with(
    rt: &tokio::runtime::Runtime,
    url: &str,
    clock: &ManualClock,
    configure: &dyn Fn(RedisStoreBuilder) -> RedisStoreBuilder,
) -> RedisStore {
    let _guard = rt.enter();
    configure(RedisStore::builder(url))
        .clock(clock.clone())
        .timeout(Duration::from_secs(2))
        .min_ttl(Duration::from_secs(3600))
        .build()
        .unwrap()
}

/// A plain connection to `server`, to look at what the store wrote.
pub async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A runtime of two workers, with timers and I/O.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `Op::Check` of `cost`.
pub fn check(cost: u64) -> Op {
    Op::Check { cost }
}

/// 2024-01-01T00:00:00Z, in nanoseconds: realistic instants, far beyond 2⁵³ ns.
pub const START: u64 = 1_704_067_200_000_000_000;

/// What a call bounded by a timeout may take beyond it on a busy machine (another build
/// running beside the tests): the tests check that calls come back within their bound, not
/// how fast the machine schedules them.
pub const SCHEDULING_SLACK: Duration = Duration::from_millis(500);
