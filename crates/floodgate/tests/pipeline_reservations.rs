//! Reservations through a pipeline ([`Pipeline::reserve`], [`Pipeline::settle`]) on the memory
//! store and on a real Redis (a `redis-server` of the test's own): a user's token budget and a
//! tenant's, in two all-or-nothing stages (the tenant's with a per-user level), and a stage of
//! constant cost that a reservation does not hold. An estimate is held on every budget or on
//! none; the settlement charges or refunds the difference on each; a budget past its limit
//! refuses the next reservation, and nothing of it is taken from the others.

#![cfg(feature = "redis")]

use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::spec::AnyAlgorithm;
use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
use floodgate::limiter::Priority;
use floodgate::pipeline::scope::{Cost, KeyTemplate};
use floodgate::pipeline::Mode;
use floodgate::pipeline::{Pipeline, PipelineReservation, Request, Scope, Stage};
use floodgate::store::{MemoryStore, Store};
use floodgate::{ManualClock, Nanos, Op};
use floodgate_harness::RedisServer;

mod redis_common;
use redis_common::{runtime, store_on_clock, START};

const YEAR: Duration = Duration::from_secs(365 * 86_400);

fn budget<S: Store<str, AnyAlgorithm>>(
    namespace: &str,
    limit: u64,
    store: S,
) -> RequestRateLimiter<S> {
    RequestRateLimiter::builder()
        .namespace(namespace)
        .plan(Plan::limit("tokens", FixedWindow::new(limit, YEAR).unwrap().into()).unwrap())
        .default_plan("tokens")
        .build(store)
        .unwrap()
}

fn template(text: &str) -> KeyTemplate {
    KeyTemplate::parse(text).unwrap()
}

/// A user's 1,000 tokens; their tenant's 1,500, with each user's share of it at most 1,200
/// (a level); requests, 100 a year at a constant cost of 1 (not a usage budget); and a shadow
/// budget of 10, dark-launched.
fn pipeline<S: Store<str, AnyAlgorithm> + Clone + 'static>(store: S, prefix: &str) -> Pipeline<S> {
    let name = |n: &str| format!("{prefix}{n}");
    Pipeline::builder()
        .stage(
            Stage::new(budget(&name("user"), 1_000, store.clone()))
                .scope(Scope::all().key(template("{user}")))
                .all_or_nothing(true),
        )
        .stage(
            Stage::new(budget(&name("tenant"), 1_500, store.clone()))
                .scope(Scope::all().key(template("{attributes.tenant}")))
                .level(
                    template("{attributes.tenant}/{user}"),
                    budget(&name("share"), 1_200, store.clone()),
                )
                .all_or_nothing(true),
        )
        .stage(
            Stage::new(budget(&name("requests"), 100, store.clone()))
                .scope(Scope::all().key(template("{user}")).cost(Cost::Constant(1))),
        )
        .stage(
            Stage::new(budget(&name("dark"), 10, store.clone()))
                .scope(Scope::all().key(template("{user}")))
                .mode(Mode::Shadow),
        )
        .build()
        .unwrap()
}

/// What `key` of `namespace` has counted (up to the limit `limit`).
async fn counted<S: Store<str, AnyAlgorithm>>(store: &S, key: &str, limit: u64) -> u64 {
    let algorithm: AnyAlgorithm = FixedWindow::new(limit, YEAR).unwrap().into();
    limit
        - store
            .apply(&algorithm, key, Op::Check { cost: 0 })
            .await
            .unwrap()
            .remaining
}

/// A read-only probe of `key`, as the store answers it.
async fn counted_on<S: Store<str, AnyAlgorithm>>(
    store: &S,
    key: &str,
) -> Result<floodgate::Decision, floodgate::StoreError> {
    let algorithm: AnyAlgorithm = FixedWindow::new(1, YEAR).unwrap().into();
    store.apply(&algorithm, key, Op::Check { cost: 0 }).await
}

async fn a_reservation_is_held_on_every_budget_or_none<S>(store: S, prefix: &str)
where
    S: Store<str, AnyAlgorithm> + Clone + 'static,
{
    let pipeline = pipeline(store.clone(), prefix);
    let attributes = [("tenant", "acme")];
    let request = |user| Request {
        user,
        plan: "",
        priority: Priority::Post,
        cost: None,
        endpoint: None,
        attributes: &attributes,
    };
    let user = format!("{prefix}user:ann");
    let tenant = format!("{prefix}tenant:acme");
    let share = format!("{prefix}share:acme/ann");
    let requests = format!("{prefix}requests:ann");
    let counts = || async {
        (
            counted(&store, &user, 1_000).await,
            counted(&store, &tenant, 1_500).await,
            counted(&store, &share, 1_200).await,
            counted(&store, &requests, 100).await,
        )
    };

    let (verdict, held) = pipeline.reserve(&request("ann"), 600).await;
    assert!(verdict.allowed(), "{verdict:?}");
    let held = held.expect("admitted: a reservation");
    // The usage budgets and the level hold it; the constant-cost stage took its 1; the shadow
    // stage, over its 10, took nothing and holds nothing.
    let stages: Vec<&str> = held.holds().iter().map(|h| h.stage().as_str()).collect();
    assert_eq!(stages.len(), 3, "{stages:?}");
    assert_eq!(counts().await, (600, 600, 600, 1));
    assert_eq!(verdict.shadow_refusals.len(), 1);

    // Used 250: 350 comes back everywhere it was held; settled from the holds as a service
    // rebuilds them from a token.
    let rebuilt = held
        .holds()
        .iter()
        .map(|h| {
            let stage = h.stage().as_str();
            pipeline
                .rebuild_hold(stage, h.level(), h.plan(), h.key(), h.estimate())
                .expect("the same pipeline rebuilds its holds")
        })
        .collect();
    assert!(pipeline
        .rebuild_hold("nope", 0, "tokens", &user, 1)
        .is_none());
    assert!(pipeline
        .rebuild_hold(&format!("{prefix}user"), 0, "tokens", "x:ann", 1)
        .is_none());
    let settled = pipeline
        .settle(PipelineReservation::from_holds(rebuilt), 250)
        .await
        .unwrap();
    assert!(settled.iter().all(|(_, d)| d.allowed), "{settled:?}");
    assert_eq!(counts().await, (250, 250, 250, 1));

    // Used more than estimated: charged on every budget, up to the user's limit exactly.
    let (_, held) = pipeline.reserve(&request("ann"), 700).await;
    let settled = pipeline.settle(held.unwrap(), 750).await.unwrap();
    assert_eq!(counts().await, (1_000, 1_000, 1_000, 2));
    let within: Vec<bool> = settled.iter().map(|(_, d)| d.allowed).collect();
    assert_eq!(within, [true, true, true], "at their limits, not past them");
    // A check of 0 still passes at the limit; its response costs 200, past the user's budget.
    // The dark-launched budget admitted the 0 too, so it holds it and counts the 200, as it
    // would if it enforced.
    let (_, held) = pipeline.reserve(&request("ann"), 0).await;
    let settled = pipeline.settle(held.unwrap(), 200).await.unwrap();
    let within: Vec<bool> = settled.iter().map(|(_, d)| d.allowed).collect();
    assert_eq!(
        within,
        [false, true, true, false],
        "past the user's budget and the dark one"
    );
    assert_eq!(counts().await, (1_000, 1_200, 1_200, 3));

    // Past the user's budget: refused, and with all-or-nothing the tenant's budget is not
    // touched by the refused estimate.
    let (verdict, held) = pipeline.reserve(&request("ann"), 50).await;
    assert!(!verdict.allowed());
    assert!(held.is_none());
    assert_eq!(counts().await, (1_000, 1_200, 1_200, 3), "nothing taken");

    // Another user of the tenant: 300 fit in the tenant's 1,500, 301 do not, and the refused
    // estimate takes nothing from bob's own budget either.
    let bob = format!("{prefix}user:bob");
    let (verdict, held) = pipeline.reserve(&request("bob"), 301).await;
    assert!(!verdict.allowed(), "over the tenant's budget");
    assert!(held.is_none());
    assert_eq!(counted(&store, &bob, 1_000).await, 0);
    let (verdict, held) = pipeline.reserve(&request("bob"), 300).await;
    assert!(verdict.allowed());
    assert_eq!(counts().await.1, 1_500);
    let settled = pipeline.settle(held.unwrap(), 0).await.unwrap();
    assert_eq!(settled.len(), 3);
    assert_eq!(counts().await.1, 1_200, "all 300 given back");
    assert_eq!(counted(&store, &bob, 1_000).await, 0);
}

#[test]
fn reservations_hold_every_budget_or_none_in_memory_and_on_redis() {
    let rt = runtime();
    let clock = ManualClock::new(Nanos(START));
    let memory = MemoryStore::builder().clock(clock.clone()).build().unwrap();
    let memory = std::sync::Arc::new(memory);
    rt.block_on(a_reservation_is_held_on_every_budget_or_none(memory, "m"));
    let server = RedisServer::start();
    let redis = store_on_clock(&rt, &server.url(), &clock);
    rt.block_on(a_reservation_is_held_on_every_budget_or_none(redis, "r"));
}

/// A reservation held on two stores (two `redis-server`s of the test's own), one of which
/// fails while it is settled (paused with SIGSTOP until its breaker opens, so that the
/// settlement is refused before anything is sent): what the other holds is settled, the error
/// holds the rest, and settling that once the store answers again finishes the reservation,
/// each hold exactly once.
#[test]
fn a_settlement_a_store_failure_interrupts_is_finished_by_a_retry_once() {
    let rt = runtime();
    let clock = ManualClock::new(Nanos(START));
    let (first, second) = (RedisServer::start(), RedisServer::start());
    let user_store = store_on_clock(&rt, &first.url(), &clock);
    let tenant_store = {
        let _guard = rt.enter();
        floodgate::store::RedisStore::builder(second.url())
            .clock(clock.clone())
            .timeout(Duration::from_millis(300))
            .breaker(1, Duration::from_secs(10))
            .min_ttl(Duration::from_secs(3600))
            .build()
            .unwrap()
    };
    let pipeline = Pipeline::builder()
        .stage(
            Stage::new(budget("user", 1_000, user_store.clone()))
                .scope(Scope::all().key(template("{user}"))),
        )
        .stage(
            Stage::new(budget("tenant", 1_500, tenant_store.clone()))
                .scope(Scope::all().key(template("{attributes.tenant}"))),
        )
        .build()
        .unwrap();
    let attributes = [("tenant", "acme")];
    let request = Request {
        user: "ann",
        plan: "",
        priority: Priority::Post,
        cost: None,
        endpoint: None,
        attributes: &attributes,
    };
    rt.block_on(async {
        let counts = || async {
            (
                counted(&user_store, "user:ann", 1_000).await,
                counted(&tenant_store, "tenant:acme", 1_500).await,
            )
        };
        let (verdict, held) = pipeline.reserve(&request, 600).await;
        assert!(verdict.allowed(), "{verdict:?}");
        assert_eq!(counts().await, (600, 600));

        second.signal("STOP");
        let probe = counted_on(&tenant_store, "tenant:probe").await;
        assert!(
            probe.is_err(),
            "a paused Redis times out, which opens the breaker"
        );
        let failed = pipeline
            .settle(held.expect("admitted"), 250)
            .await
            .expect_err("the tenant's store does not answer");
        second.signal("CONT");
        // The breaker lets a call through again after its cool-down.
        clock.advance(Duration::from_secs(10));
        assert_eq!(failed.unsettled_at, [1], "{failed}");
        let settled: Vec<(usize, &str)> = failed
            .settled
            .iter()
            .map(|(at, stage, _)| (*at, stage.as_str()))
            .collect();
        assert_eq!(settled, [(0, "user")]);
        assert_eq!(counts().await, (250, 600), "half settled, and said so");

        let rest = pipeline.settle(failed.unsettled, 250).await.unwrap();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].0.as_str(), "tenant");
        assert_eq!(counts().await, (250, 250), "each hold settled once");
    });
}
