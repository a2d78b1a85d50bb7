//! A server killed under load, and a server paused: calls fail with `Err` within their bound
//! (never hang), the breaker opens, and the server is used again once it is back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::store::{BreakerState, MemcachedStore, Store};
use floodgate::StoreError;
use floodgate_harness::MemcachedServer;

use crate::{check, clock_at_now, runtime};

/// A bound no call may reach: a call still running after it has hung.
const HANG: Duration = Duration::from_secs(5);

/// Waits (polling every ms, at most 10 s) until `done` holds: for another task's progress.
fn wait_for(done: impl Fn() -> bool) {
    for _ in 0..10_000 {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the load did not get there in 10 s");
}

#[test]
fn a_killed_server_fails_calls_opens_the_breaker_and_is_used_again_after_restart() {
    let mut server = MemcachedServer::start();
    let rt = runtime();
    let clock = clock_at_now();
    let store = {
        let _guard = rt.enter();
        MemcachedStore::builder(vec![server.address()])
            .timeout(Duration::from_millis(200))
            .breaker(3, Duration::from_secs(1))
            .clock(clock.clone())
            .build()
            .unwrap()
    };
    let fw = Arc::new(AnyAlgorithm::from(
        FixedWindow::new(1_000_000, Duration::from_secs(3600)).unwrap(),
    ));
    let (ok, failed, hung) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let load: Vec<_> = (0..4)
        .map(|t| {
            let (store, fw) = (store.clone(), fw.clone());
            let (ok, failed, hung, stop) = (ok.clone(), failed.clone(), hung.clone(), stop.clone());
            rt.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("load:{t}");
                    match tokio::time::timeout(HANG, store.apply(&fw, &key, check(1))).await {
                        Ok(Ok(_)) => ok.fetch_add(1, Ordering::Relaxed),
                        Ok(Err(_)) => failed.fetch_add(1, Ordering::Relaxed),
                        Err(_) => hung.fetch_add(1, Ordering::Relaxed),
                    };
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    wait_for(|| ok.load(Ordering::Relaxed) >= 50);
    server.kill();
    wait_for(|| failed.load(Ordering::Relaxed) >= 20);
    stop.store(true, Ordering::Relaxed);
    rt.block_on(async {
        for task in load {
            task.await.unwrap();
        }
    });
    assert_eq!(hung.load(Ordering::Relaxed), 0);
    assert_eq!(store.breaker_state(), BreakerState::Open);
    let refused = rt.block_on(store.apply(&fw, "after", check(1)));
    assert!(
        matches!(refused, Err(StoreError::BreakerOpen { failures: 3 })),
        "{refused:?}"
    );

    server.restart();
    clock.advance(Duration::from_secs(1));
    assert_eq!(store.breaker_state(), BreakerState::HalfOpen);
    let d = rt.block_on(store.apply(&fw, "after", check(1))).unwrap();
    assert!(d.allowed);
    assert_eq!(store.breaker_state(), BreakerState::Closed);
    rt.block_on(store.probe()).unwrap();
}

#[test]
fn a_paused_server_times_out_and_answers_again_after_it_resumes() {
    let server = MemcachedServer::start();
    let rt = runtime();
    let clock = clock_at_now();
    let timeout = Duration::from_millis(100);
    let store = {
        let _guard = rt.enter();
        MemcachedStore::builder(vec![server.address()])
            .timeout(timeout)
            .connect_timeout(Duration::from_millis(500))
            .breaker(0, Duration::from_secs(1))
            .clock(clock.clone())
            .build()
            .unwrap()
    };
    let fw: AnyAlgorithm = FixedWindow::new(100, Duration::from_secs(3600))
        .unwrap()
        .into();
    rt.block_on(async {
        assert!(store.apply(&fw, "paused", check(1)).await.unwrap().allowed);
        server.pause();
        for _ in 0..3 {
            let late = tokio::time::timeout(HANG, store.apply(&fw, "paused", check(1))).await;
            assert!(
                matches!(late, Ok(Err(StoreError::Timeout(t))) if t == timeout),
                "{late:?}"
            );
            let late = tokio::time::timeout(HANG, store.probe()).await;
            assert!(matches!(late, Ok(Err(StoreError::Timeout(_)))), "{late:?}");
        }
        server.resume();
        assert!(store.apply(&fw, "paused", check(1)).await.unwrap().allowed);
        store.probe().await.unwrap();
    });
}

/// One server of two down: its keys fail, the other's are still counted, and the breakers
/// say which is which.
#[test]
fn one_server_down_fails_only_its_keys() {
    let mut a = MemcachedServer::start();
    let b = MemcachedServer::start();
    let rt = runtime();
    let clock = clock_at_now();
    let store = {
        let _guard = rt.enter();
        MemcachedStore::builder(vec![a.address(), b.address()])
            .timeout(Duration::from_millis(200))
            .breaker(1, Duration::from_secs(1))
            .clock(clock.clone())
            .build()
            .unwrap()
    };
    a.kill();
    let fw: AnyAlgorithm = FixedWindow::new(5, Duration::from_secs(3600))
        .unwrap()
        .into();
    // Keys "x:N:<index>" spread over both servers; find one of each.
    rt.block_on(async {
        let (mut up, mut down) = (0, 0);
        for i in 0..20 {
            match store.apply(&fw, &format!("x:{i}"), check(1)).await {
                Ok(d) => up += u64::from(d.allowed),
                Err(StoreError::Refused(_) | StoreError::BreakerOpen { .. }) => down += 1,
                Err(other) => panic!("{other:?}"),
            }
        }
        assert!(up > 0 && down > 0, "up {up}, down {down}");
    });
    let states = store.server_breakers();
    assert_eq!(states[0], (a.address(), BreakerState::Open));
    assert_eq!(states[1], (b.address(), BreakerState::Closed));
    assert_eq!(store.breaker_state(), BreakerState::Open);
}

/// A server restarted while the store keeps idle connections to its old process: the first
/// call after it is back succeeds (the closed connections are dropped, not used).
#[test]
fn a_restarted_server_is_used_at_once() {
    let mut server = MemcachedServer::start();
    let rt = runtime();
    let clock = clock_at_now();
    let store = {
        let _guard = rt.enter();
        MemcachedStore::builder(vec![server.address()])
            .timeout(Duration::from_secs(2))
            .max_idle(4)
            .clock(clock.clone())
            .build()
            .unwrap()
    };
    let fw: AnyAlgorithm = FixedWindow::new(100, Duration::from_secs(3600))
        .unwrap()
        .into();
    rt.block_on(async {
        // Four calls at once leave four idle connections.
        let calls = (0..4).map(|i| store.apply(&fw, ["a", "b", "c", "d"][i], check(1)));
        for d in futures_util::future::join_all(calls).await {
            assert!(d.unwrap().allowed);
        }
    });
    server.kill();
    server.restart();
    rt.block_on(async {
        for _ in 0..4 {
            let d = store.apply(&fw, "a", check(1)).await.unwrap();
            // The restarted server is empty: the count starts again.
            assert_eq!(d.remaining, 99);
            let back = store
                .apply(&fw, "a", floodgate::Op::Refund { cost: 1 })
                .await;
            assert!(back.unwrap().allowed);
        }
    });
    assert_eq!(store.breaker_state(), BreakerState::Closed);
}
