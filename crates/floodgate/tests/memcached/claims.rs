//! The shared limits' claims on memcached: each step answers as `Claims::apply` does for the
//! same claims at the same instant, and steps racing from several nodes lose no update.

use std::time::Duration;

use floodgate::quota::{ClaimStep, ClaimTerms, Claims, Group};
use floodgate::store::CounterIncrement;
use floodgate::StoreError;
use floodgate_harness::MemcachedServer;

use crate::{clock_at_now, runtime, store};

const TERMS: ClaimTerms = ClaimTerms {
    capacity: 100,
    ttl: Duration::from_secs(3),
    idle: Duration::from_secs(10),
};

#[test]
fn each_step_answers_as_the_rust_model() {
    let server = MemcachedServer::start();
    let rt = runtime();
    let clock = clock_at_now();
    let store = {
        let _guard = rt.enter();
        store(&[&server], &clock)
    };
    let mut model = Claims::new();
    let groups = [Group::one(40, 5), Group::one(70, 10), Group::one(5, 1)];
    let names = ["node-a", "node-b", "node c"];
    for i in 0..40usize {
        clock.advance(Duration::from_millis(if i % 7 == 6 { 4_000 } else { 400 }));
        let claimant = names[i % 3];
        let step = if i % 11 == 10 {
            ClaimStep::Leave { claimant }
        } else {
            ClaimStep::Report {
                claimant,
                groups: &groups[..1 + i % 3],
                held: (i as u64 * 7) % 30,
                wanted: if i % 5 == 0 { 10 } else { 0 },
            }
        };
        let expected = model.apply(step, &TERMS, floodgate::Clock::now(&clock));
        let got = rt.block_on(store.claim("api", step, &TERMS)).unwrap();
        assert_eq!(got, expected, "step {i}: {step:?}");
    }
}

#[test]
fn racing_nodes_lose_no_claim() {
    let (a, b) = (MemcachedServer::start(), MemcachedServer::start());
    let rt = runtime();
    let clock = clock_at_now();
    let nodes: Vec<_> = {
        let _guard = rt.enter();
        (0..3).map(|_| store(&[&a, &b], &clock)).collect()
    };
    let groups = [Group::one(10, 1)];
    let claimants = 24;
    rt.block_on(async {
        let steps = (0..claimants).map(|i| {
            let node = nodes[i % 3].clone();
            async move {
                let name = format!("node-{i}");
                let step = ClaimStep::Report {
                    claimant: &name,
                    groups: &groups,
                    held: 0,
                    wanted: 0,
                };
                node.claim("shared", step, &TERMS).await
            }
        });
        for result in futures_util::future::join_all(steps).await {
            result.unwrap();
        }
        let last = ClaimStep::Report {
            claimant: "node-last",
            groups: &groups,
            held: 0,
            wanted: 0,
        };
        let claimed = nodes[0].claim("shared", last, &TERMS).await.unwrap();
        assert_eq!(claimed.nodes, claimants as u64 + 1);
        assert_eq!(claimed.clients, claimants as u64 + 1);
    });
}

#[test]
fn a_value_that_is_no_claims_is_a_conflict() {
    let server = MemcachedServer::start();
    let rt = runtime();
    let clock = clock_at_now();
    let store = {
        let _guard = rt.enter();
        store(&[&server], &clock)
    };
    rt.block_on(async {
        let count = CounterIncrement {
            key: "floodgate.quota:taken",
            by: 3,
            refund: false,
            ttl_seconds: 60,
        };
        store.increment_counters(&[count]).await.unwrap();
        let step = ClaimStep::Leave { claimant: "n" };
        let conflict = store.claim("taken", step, &TERMS).await;
        assert!(
            matches!(conflict, Err(StoreError::StateConflict { .. })),
            "{conflict:?}"
        );
        let refused = store.claim("a b", step, &TERMS).await;
        assert!(matches!(refused, Err(StoreError::NotOnStore { .. })));
    });
}
