//! What the Redis test files share: a runtime, a plain connection, realistic instants.
#![allow(dead_code)] // each test binary uses a different part

use floodgate::Op;
use floodgate_redis_harness::RedisServer;

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
