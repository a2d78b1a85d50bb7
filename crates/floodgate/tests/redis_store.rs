//! The Redis store against real `redis-server` processes that the tests start on free loopback
//! ports and stop afterwards (never the shared Redis on 6379).
#![cfg(feature = "redis")]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::gcra::Gcra;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::store::{MemoryStore, RedisStore, Store};
use floodgate::{Clock, ManualClock, Nanos, Op, StoreError, SystemClock};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// A `redis-server` of our own, killed when dropped.
struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    fn start() -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut server = RedisServer { port, child: None };
        server.restart();
        server
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the process (again) on the same port and waits until it answers PING.
    fn restart(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        self.child = Some(child);
        for _ in 0..500 {
            if self.pong() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server on port {} did not come up", self.port);
    }

    fn pong(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    /// Kills the process and waits until the port no longer answers.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for _ in 0..500 {
            if !self.pong() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server on port {} did not go down", self.port);
    }

    /// A plain connection, to look at what the store wrote.
    async fn raw(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn check(cost: u64) -> Op {
    Op::Check { cost }
}

/// 2024-01-01T00:00:00Z, in nanoseconds: realistic instants, far beyond 2⁵³ ns.
const START: u64 = 1_704_067_200_000_000_000;

/// An algorithm that runs on Redis, with random small parameters (durations in odd
/// nanoseconds, so that instants off the microsecond grid are exercised).
fn algorithm() -> impl Strategy<Value = AnyAlgorithm> {
    prop_oneof![
        (0u64..20, 1u64..100, 1_000u64..60_000_000_000).prop_map(|(burst, count, period)| {
            Gcra::new(burst, count, Duration::from_nanos(period))
                .unwrap()
                .into()
        }),
        (1u64..30, 1_000u64..10_000_000_000).prop_map(|(limit, window)| {
            FixedWindow::new(limit, Duration::from_nanos(window))
                .unwrap()
                .into()
        }),
        (
            prop_oneof![0.5f64..1000.0, (1u32..200).prop_map(f64::from)],
            1u64..50
        )
            .prop_map(|(rate, capacity)| TokenBucket::new(rate, capacity).unwrap().into()),
    ]
}

/// Steps in whole microseconds (0, tiny, or up to 20 s) and costs (mostly small, sometimes
/// above any limit).
fn ops() -> impl Strategy<Value = Vec<(u64, u64)>> {
    let step = prop_oneof![
        2 => Just(0u64),
        3 => 0u64..2_000,
        3 => 0u64..20_000_000,
    ];
    let cost = prop_oneof![6 => 0u64..4, 1 => 0u64..60];
    proptest::collection::vec((step, cost), 1..50)
}

/// For the same non-decreasing whole-microsecond instants and costs, the Lua twin on Redis and
/// the Rust algorithm on the memory store give identical decisions.
#[test]
fn lua_twins_agree_with_the_memory_store() {
    let server = RedisServer::start();
    let rt = runtime();
    let clock = ManualClock::new(Nanos(START));
    let redis = {
        let _guard = rt.enter();
        RedisStore::builder(server.url())
            .clock(clock.clone())
            .timeout(Duration::from_secs(2))
            .min_ttl(Duration::from_secs(3600))
            .build()
            .unwrap()
    };
    let memory = MemoryStore::builder().clock(clock.clone()).build().unwrap();
    let case = std::sync::atomic::AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        cases: 32,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(
            &(algorithm(), 0u64..1_000_000_000, ops()),
            |(algorithm, offset_us, ops)| {
                let n = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let key = format!("conformance:{n}");
                let mut now = START + offset_us * 1000;
                for (i, (step_us, cost)) in ops.into_iter().enumerate() {
                    now += step_us * 1000;
                    clock.set(Nanos(now));
                    let expected = rt.block_on(memory.apply(&algorithm, key.as_str(), check(cost)));
                    let got = rt.block_on(redis.apply(&algorithm, key.as_str(), check(cost)));
                    prop_assert_eq!(
                        got.unwrap(),
                        expected.unwrap(),
                        "{:?}, op {} at {} ns, cost {}",
                        algorithm,
                        i,
                        now,
                        cost
                    );
                }
                Ok(())
            },
        )
        .unwrap();
}

/// Hand-written cases, with Redis `TIME` as the clock: the numbers the algorithms' own tests give.
#[test]
fn decides_with_redis_time() {
    let server = RedisServer::start();
    let rt = runtime();
    rt.block_on(async {
        let store = RedisStore::builder(server.url())
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let fw: AnyAlgorithm = FixedWindow::new(3, Duration::from_secs(3600))
            .unwrap()
            .into();
        let mut allowed = 0;
        for _ in 0..5 {
            let d = store.apply(&fw, "fw:alice", check(1)).await.unwrap();
            allowed += u64::from(d.allowed);
            assert_eq!(d.limit, 3);
        }
        assert_eq!(allowed, 3);
        let d = store.apply(&fw, "fw:alice", check(1)).await.unwrap();
        assert!(!d.allowed && d.remaining == 0 && d.retry_after.is_some());

        let gcra: AnyAlgorithm = Gcra::new(4, 1, Duration::from_secs(1)).unwrap().into();
        let d = store.apply(&gcra, "g:bob", check(5)).await.unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, 0);
        let d = store.apply(&gcra, "g:bob", check(6)).await.unwrap();
        assert_eq!((d.allowed, d.retry_after), (false, None));
    });
}

/// Each write's TTL is the time until the state is fresh again, rounded up to the millisecond;
/// a probe writes nothing.
#[test]
fn ttl_is_the_time_until_fresh() {
    let server = RedisServer::start();
    let rt = runtime();
    rt.block_on(async {
        let clock = ManualClock::new(Nanos(START + 123_456_000));
        let store = RedisStore::builder(server.url())
            .clock(clock.clone())
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let mut raw = server.raw().await;
        let cases: [(AnyAlgorithm, &str); 3] = [
            (
                Gcra::new(9, 10, Duration::from_secs(7)).unwrap().into(),
                "ttl:gcra",
            ),
            (
                FixedWindow::new(5, Duration::from_secs(60)).unwrap().into(),
                "ttl:fw",
            ),
            (TokenBucket::new(0.25, 8).unwrap().into(), "ttl:tb"),
        ];
        for (algorithm, key) in &cases {
            let d = store.apply(algorithm, key, check(0)).await.unwrap();
            assert!(d.allowed);
            let exists: bool = redis::cmd("EXISTS")
                .arg(*key)
                .query_async(&mut raw)
                .await
                .unwrap();
            assert!(!exists, "{key}: a probe wrote state");

            let d = store.apply(algorithm, key, check(3)).await.unwrap();
            assert!(d.allowed);
            let pttl: i64 = redis::cmd("PTTL")
                .arg(*key)
                .query_async(&mut raw)
                .await
                .unwrap();
            let ceil_ms = d.reset_after.as_nanos().div_ceil(1_000_000) as i64;
            assert!(
                pttl > 0 && pttl <= ceil_ms,
                "{key}: PTTL {pttl} ms, fresh in {ceil_ms} ms"
            );
            assert!(
                ceil_ms - pttl < 1_000,
                "{key}: PTTL {pttl} ms, fresh in {ceil_ms} ms"
            );
            let value: String = redis::cmd("GET")
                .arg(*key)
                .query_async(&mut raw)
                .await
                .unwrap();
            assert!(value.len() < 40, "{key}: {value}");
        }
    });
}

#[test]
fn another_algorithms_key_is_a_conflict_and_is_kept() {
    let server = RedisServer::start();
    let rt = runtime();
    rt.block_on(async {
        let store = RedisStore::builder(server.url())
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let gcra: AnyAlgorithm = Gcra::new(1, 1, Duration::from_secs(60)).unwrap().into();
        let fw: AnyAlgorithm = FixedWindow::new(1, Duration::from_secs(60)).unwrap().into();
        assert!(
            store
                .apply(&gcra, "shared:k", check(1))
                .await
                .unwrap()
                .allowed
        );
        let err = store.apply(&fw, "shared:k", check(1)).await.unwrap_err();
        assert!(matches!(
            err,
            StoreError::StateConflict {
                algorithm: "fixed_window",
                found: "gcra"
            }
        ));
        // The GCRA state is intact: one unit of the burst of two is left.
        let d = store.apply(&gcra, "shared:k", check(0)).await.unwrap();
        assert_eq!(d.remaining, 1);
    });
}

/// Algorithms and operations without a Redis twin are refused before anything is sent: here
/// nothing even listens on the port.
#[test]
fn unsupported_is_refused_before_touching_redis() {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let rt = runtime();
    rt.block_on(async {
        let store = RedisStore::builder(format!("redis://127.0.0.1:{port}"))
            .build()
            .unwrap();
        let log: AnyAlgorithm =
            floodgate::algorithm::sliding_log::SlidingLog::new(5, Duration::from_secs(1))
                .unwrap()
                .into();
        let err = store.apply(&log, "k", check(1)).await.unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::NotOnStore {
                    store: "redis",
                    algorithm: "sliding_log",
                    ..
                }
            ),
            "{err}"
        );
        let fw: AnyAlgorithm = FixedWindow::new(1, Duration::from_secs(1)).unwrap().into();
        let err = store
            .apply(&fw, "k", Op::Reserve { cost: 1 })
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Unsupported { .. }), "{err}");
        let huge: AnyAlgorithm = FixedWindow::new(1, Duration::from_secs(30 * 86_400))
            .unwrap()
            .into();
        let err = store.apply(&huge, "k", check(1)).await.unwrap_err();
        assert!(matches!(err, StoreError::NotOnStore { .. }), "{err}");
    });
}

/// Redis killed: every call fails within the timeout; Redis restarted (empty, without the
/// scripts): calls succeed again by themselves, the scripts reloaded after `NOSCRIPT`.
#[test]
fn a_dead_redis_fails_fast_and_a_restarted_one_is_used_again() {
    let mut server = RedisServer::start();
    let rt = runtime();
    let timeout = Duration::from_millis(50);
    let wall = SystemClock::new();
    rt.block_on(async {
        let store = RedisStore::builder(server.url())
            .timeout(timeout)
            .build()
            .unwrap();
        let tb: AnyAlgorithm = TokenBucket::new(10.0, 100).unwrap().into();
        // The first call connects and loads the script: give it a few tries.
        let mut ok = false;
        for _ in 0..100 {
            if store.apply(&tb, "fault:k", check(1)).await.is_ok() {
                ok = true;
                break;
            }
        }
        assert!(ok, "the store never answered");

        server.kill();
        for _ in 0..5 {
            let start = wall.now();
            let result = store.apply(&tb, "fault:k", check(1)).await;
            let took = wall.now().saturating_since(start);
            let err = result.expect_err("Redis is down");
            assert!(err.is_transient(), "{err}");
            assert!(took < timeout + Duration::from_millis(25), "took {took:?}");
        }

        server.restart();
        // Waits (boundedly) for the connection to be remade.
        let mut back = None;
        for _ in 0..200 {
            match store.apply(&tb, "fault:k", check(1)).await {
                Ok(d) => {
                    back = Some(d);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(25)).await,
            }
        }
        let d = back.expect("the store works again after the restart");
        // A new, empty Redis: a full bucket minus this request.
        assert_eq!((d.allowed, d.remaining), (true, 99));
    });
}
