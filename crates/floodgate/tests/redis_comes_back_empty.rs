//! A Redis that comes back empty (restarted without persistence; a failover to a replica that
//! had not received the last writes): what each limiter does, on a real `redis-server` of the
//! test's own, restarted empty on its port while requests are in flight.
//!
//! - Request rate: every window and bucket starts again, full.
//! - Concurrency and fleet: the leases of the requests still running are forgotten, so up to
//!   `capacity` more are admitted while they run; their releases, when they end, free nothing
//!   (they are not found), and never a place of a lease taken since. Nothing is kept that a
//!   lease's expiry would not end: one `lease_ttl` after the restart, the store counts exactly
//!   the leases taken since, whatever became of the forgotten ones.
#![cfg(feature = "redis")]

use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::limiter::concurrency::ConcurrencyLimiter;
use floodgate::limiter::fleet::FleetShedder;
use floodgate::store::{RedisStore, Store};
use floodgate::{ManualClock, Nanos, Op};
use floodgate_harness::RedisServer;

mod redis_common;
use redis_common::{runtime, store_on_clock, START};

const TTL: Duration = Duration::from_secs(30);

/// Calls `store` until it answers (the connection is remade after a restart).
async fn until_answered(store: &RedisStore, algorithm: &AnyAlgorithm, key: &str) {
    for _ in 0..400 {
        if store
            .apply(algorithm, key, Op::Check { cost: 0 })
            .await
            .is_ok()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the store did not answer after the restart");
}

#[test]
fn every_limiter_starts_again_and_leases_are_exact_one_ttl_later() {
    let mut server = RedisServer::start();
    let rt = runtime();
    let clock = ManualClock::new(Nanos(START));
    let store = store_on_clock(&rt, &server.url(), &clock);
    let window: AnyAlgorithm = FixedWindow::new(3, Duration::from_secs(3600))
        .unwrap()
        .into();
    let concurrency = {
        let _guard = rt.enter();
        ConcurrencyLimiter::builder()
            .namespace("empty.conc")
            .capacity(2)
            .lease_ttl(TTL)
            .build(store.clone())
            .unwrap()
    };
    let fleet = FleetShedder::builder()
        .namespace("empty.fleet")
        .capacity(4)
        .reserved_for_critical(0.5)
        .lease_ttl(TTL)
        .build(store.clone())
        .unwrap();
    rt.block_on(async {
        // Full everywhere: the window's 3, the user's 2 places, the fleet's 2 non-critical.
        for _ in 0..3 {
            assert!(
                store
                    .apply(&window, "w:ann", Op::Check { cost: 1 })
                    .await
                    .unwrap()
                    .allowed
            );
        }
        let mut running = Vec::new();
        for _ in 0..2 {
            running.push(
                concurrency
                    .acquire("ann")
                    .await
                    .unwrap()
                    .lease
                    .expect("a place"),
            );
            running.push(fleet.acquire(false).await.unwrap().lease.expect("a place"));
        }
        assert!(
            !store
                .apply(&window, "w:ann", Op::Check { cost: 1 })
                .await
                .unwrap()
                .allowed
        );
        assert!(concurrency.acquire("ann").await.unwrap().lease.is_none());
        assert!(fleet.acquire(false).await.unwrap().lease.is_none());

        server.kill();
        server.restart();
        until_answered(&store, &window, "w:probe").await;

        // Windows start again.
        let d = store
            .apply(&window, "w:ann", Op::Check { cost: 1 })
            .await
            .unwrap();
        assert_eq!(
            (d.allowed, d.remaining),
            (true, 2),
            "the window starts again"
        );
        // The running requests' leases are forgotten: as many again are admitted, no more.
        let mut since = Vec::new();
        for _ in 0..2 {
            since.push(
                concurrency
                    .acquire("ann")
                    .await
                    .unwrap()
                    .lease
                    .expect("forgotten"),
            );
            since.push(
                fleet
                    .acquire(false)
                    .await
                    .unwrap()
                    .lease
                    .expect("forgotten"),
            );
        }
        assert!(concurrency.acquire("ann").await.unwrap().lease.is_none());
        assert!(fleet.acquire(false).await.unwrap().lease.is_none());

        // The forgotten requests end: their releases free nothing of the leases taken since.
        for lease in running.drain(..) {
            let handle = lease.keep();
            let released = match handle.limiter().as_str() {
                "empty.conc" => concurrency.release(&handle).await.unwrap(),
                _ => fleet.release(&handle).await.unwrap(),
            };
            assert!(!released, "a forgotten lease is not found");
        }
        assert!(concurrency.acquire("ann").await.unwrap().lease.is_none());
        assert!(fleet.acquire(false).await.unwrap().lease.is_none());

        // One lease TTL after the restart, only what was taken since counts: those requests
        // ended without a word (their leases expire), and the places are all free again.
        for lease in since.drain(..) {
            let _ = lease.keep();
        }
        clock.advance(TTL);
        let d = concurrency.acquire("ann").await.unwrap();
        assert_eq!((d.decision.allowed, d.decision.remaining), (true, 1));
        let f = fleet.acquire(false).await.unwrap();
        assert_eq!((f.decision.allowed, f.decision.remaining), (true, 1));
        // Critical traffic kept its reserve throughout.
        assert!(fleet.acquire(true).await.unwrap().lease.is_some());
    });
}
