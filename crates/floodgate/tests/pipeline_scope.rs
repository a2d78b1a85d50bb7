//! Stages with scopes (keys from request fields, conditions, costs and plans from attributes)
//! and hierarchical limits, on the memory store and on a real Redis and Redis Cluster, where a
//! stage's levels run in one script call.

use std::sync::Arc;
use std::time::Duration;

use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::spec::{AnyAlgorithm, AnyState};
use floodgate::limiter::concurrency::ConcurrencyLimiter;
use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
use floodgate::limiter::Priority;
use floodgate::pipeline::scope::{Cost, Field, IfMissing, KeyTemplate, Pattern, When};
use floodgate::pipeline::{Mode, OnStoreError};
use floodgate::pipeline::{Pipeline, Request, Scope, Stage};
use floodgate::store::{Key, MemoryStore, Store};
use floodgate::{ManualClock, Nanos};

type Mem = MemoryStore<Key, AnyState, ManualClock>;

fn memory() -> Arc<Mem> {
    let clock = ManualClock::new(Nanos::from_secs(1_000));
    Arc::new(MemoryStore::builder().clock(clock).build_typed().unwrap())
}

fn window(limit: u64) -> AnyAlgorithm {
    FixedWindow::new(limit, Duration::from_secs(3600))
        .unwrap()
        .into()
}

fn limit<S: Store<str, AnyAlgorithm>>(name: &str, limit: u64, store: S) -> RequestRateLimiter<S> {
    RequestRateLimiter::builder()
        .namespace(name)
        .plan(Plan::limit(name, window(limit)).unwrap())
        .default_plan(name)
        .build(store)
        .unwrap()
}

fn template(text: &str) -> KeyTemplate {
    KeyTemplate::parse(text).unwrap()
}

/// Organisation `acme` may make 3 requests, each of its users 2; every request takes from
/// both, or from neither.
fn tenants<S: Store<str, AnyAlgorithm> + Clone + 'static>(store: S) -> Pipeline<S> {
    let stage = Stage::new(limit("org", 3, store.clone()))
        .scope(Scope::all().key(template("{{{attributes.org}}}")))
        .level(
            template("{{{attributes.org}}}/{user}"),
            limit("org.user", 2, store),
        );
    Pipeline::builder().stage(stage).build().unwrap()
}

fn ask<S: Store<str, AnyAlgorithm> + 'static>(
    pipeline: &Pipeline<S>,
    user: &str,
    attributes: &[(&str, &str)],
) -> (u16, Option<String>) {
    let request = Request {
        attributes,
        ..Request::new(user, "free", Priority::Get)
    };
    let verdict = pipeline.evaluate_blocking(&request);
    let message = verdict.refusal.as_ref().map(|r| r.message.clone());
    (verdict.status(), message)
}

/// The tenants pipeline's story, the same on every store.
fn hierarchical_story<S: Store<str, AnyAlgorithm> + 'static>(pipeline: &Pipeline<S>) {
    let acme = [("org", "acme")];
    assert_eq!(ask(pipeline, "alice", &acme).0, 200);
    assert_eq!(ask(pipeline, "alice", &acme).0, 200);
    // Alice's own limit refuses her third; the organisation's count is given back.
    let (status, message) = ask(pipeline, "alice", &acme);
    assert_eq!(status, 429);
    assert!(message.unwrap().contains("limit org.user allows 2"));
    // So Bob still has the organisation's third request.
    assert_eq!(ask(pipeline, "bob", &acme).0, 200);
    // The organisation is spent: Bob's second is refused by it, and takes nothing from him.
    let (status, message) = ask(pipeline, "bob", &acme);
    assert_eq!(status, 429);
    assert!(message.unwrap().contains("limit org allows 3"));
    // Another organisation is counted apart.
    assert_eq!(ask(pipeline, "bob", &[("org", "globex")]).0, 200);
    assert_eq!(ask(pipeline, "bob", &[("org", "globex")]).0, 200);
    assert_eq!(ask(pipeline, "bob", &[("org", "globex")]).0, 429);
    // No organisation: a 400 naming the stage and the attribute, and nothing counted.
    let (status, message) = ask(pipeline, "carol", &[]);
    assert_eq!(status, 400);
    assert_eq!(
        message.unwrap(),
        "stage `org` needs `attributes.org`, which the request lacks"
    );
}

#[test]
fn hierarchical_limits_take_from_every_level_or_none_on_memory() {
    hierarchical_story(&tenants(memory()));
}

#[test]
fn conditions_costs_and_plans_come_from_attributes() {
    let store = memory();
    let writes = RequestRateLimiter::builder()
        .plan(Plan::new("free", window(5)).unwrap())
        .plan(Plan::new("pro", window(50)).unwrap())
        .default_plan("free")
        .build(store.clone())
        .unwrap();
    let writes = Stage::new(writes).scope(
        Scope::all()
            .when(
                When::always()
                    .field(
                        Field::parse("attributes.method").unwrap(),
                        vec![Pattern::new("POST")],
                    )
                    .field(Field::Endpoint, vec![Pattern::new("/orders*")]),
            )
            .key(template("{user}"))
            .cost(Cost::Field(Field::parse("attributes.units").unwrap()))
            .plan_from(Field::parse("attributes.tier").unwrap()),
    );
    let pipeline = Pipeline::builder().stage(writes).build().unwrap();
    let ask = |method: &str, endpoint: &str, units: &str, tier: &str| {
        let attributes = [("method", method), ("units", units), ("tier", tier)];
        let request = Request {
            attributes: &attributes,
            endpoint: Some(endpoint),
            ..Request::new("alice", "free", Priority::Post)
        };
        pipeline.evaluate_blocking(&request).status()
    };
    // GETs and other endpoints pass untouched, even with a cost that is no number.
    for _ in 0..10 {
        assert_eq!(ask("GET", "/orders", "1", "free"), 200);
        assert_eq!(ask("POST", "/users", "x", "free"), 200);
    }
    assert_eq!(ask("POST", "/orders/1", "4", "free"), 200);
    assert_eq!(ask("POST", "/orders/2", "2", "free"), 429, "4 + 2 > 5");
    assert_eq!(ask("POST", "/orders/2", "1", "free"), 200);
    // The tier attribute picks the plan (the user's count carries over).
    assert_eq!(ask("POST", "/orders/3", "40", "pro"), 200);
    assert_eq!(ask("POST", "/orders/3", "x", "pro"), 400);
    let stats = pipeline.stats();
    assert_eq!(
        stats[0].decided, 4,
        "the stage decided only what it applies to"
    );
}

#[test]
fn stages_may_skip_requests_that_lack_a_field() {
    let store = memory();
    let per_ip = Stage::new(limit("per_ip", 1, store.clone())).scope(
        Scope::all()
            .key(template("{attributes.ip}"))
            .if_missing(IfMissing::Skip),
    );
    let pipeline = Pipeline::builder().stage(per_ip).build().unwrap();
    assert_eq!(ask(&pipeline, "a", &[("ip", "10.0.0.1")]).0, 200);
    assert_eq!(ask(&pipeline, "b", &[("ip", "10.0.0.1")]).0, 429);
    assert_eq!(ask(&pipeline, "c", &[]).0, 200);
    assert_eq!(ask(&pipeline, "c", &[]).0, 200);
    assert!(pipeline
        .missing_field(&Request::new("c", "free", Priority::Get))
        .is_none());
}

#[test]
fn concurrency_stages_count_leases_by_template() {
    let store = memory();
    let per_ip = ConcurrencyLimiter::builder()
        .capacity(1)
        .build(store)
        .unwrap();
    let stage = Stage::new(per_ip).scope(Scope::all().key(template("ip/{attributes.ip}")));
    let pipeline = Pipeline::builder().stage(stage).build().unwrap();
    let request = |user, ip| {
        let attributes = [("ip", ip)];
        let request = Request {
            attributes: &attributes,
            ..Request::new(user, "free", Priority::Get)
        };
        pipeline.evaluate_blocking(&request)
    };
    let first = request("alice", "10.0.0.1");
    assert!(first.allowed());
    let second = request("bob", "10.0.0.1");
    assert_eq!(second.status(), 429);
    assert!(second
        .refusal
        .unwrap()
        .message
        .contains("with this ip/{attributes.ip} are already in flight"));
    assert!(request("bob", "10.0.0.2").allowed());
    drop(first);
    assert!(request("bob", "10.0.0.1").allowed());
}

#[test]
fn scopes_that_cannot_apply_are_refused_when_built() {
    let store = memory();
    let fleet = floodgate::limiter::fleet::FleetShedder::builder()
        .capacity(10)
        .build(store.clone())
        .unwrap();
    let keyed_fleet = Stage::new(fleet).scope(Scope::all().key(template("{user}")));
    let err = Pipeline::builder().stage(keyed_fleet).build().unwrap_err();
    assert!(err.to_string().contains("key"), "{err}");

    let clash = Stage::new(limit("org", 3, store.clone()))
        .level(template("{user}"), limit("org", 2, store.clone()));
    let err = Pipeline::builder().stage(clash).build().unwrap_err();
    assert!(err.to_string().contains("org"), "{err}");

    let local = Stage::new(limit("org", 3, store.clone()))
        .on_store_error(OnStoreError::Local)
        .level(template("{user}"), limit("org.user", 2, store.clone()));
    let err = Pipeline::builder().stage(local).build().unwrap_err();
    assert!(err.to_string().contains("on_store_error"), "{err}");

    let other_store = Stage::new(limit("org", 3, store))
        .level(template("{user}"), limit("org.user", 2, memory()));
    let err = Pipeline::builder().stage(other_store).build().unwrap_err();
    assert!(err.to_string().contains("store"), "{err}");
}

#[test]
fn a_stage_switched_off_needs_no_field() {
    let pipeline = tenants(memory());
    pipeline.set_mode("org", Mode::Off);
    assert_eq!(ask(&pipeline, "carol", &[]).0, 200);
}

/// An adaptive concurrency stage in a pipeline: it admits below its learned limit, a later
/// stage's refusal gives its place back without a sample, and releases teach it latencies.
#[test]
fn an_adaptive_stage_admits_below_its_limit_and_learns_from_releases() {
    use floodgate::limiter::adaptive::{Adaptive, AdaptiveConcurrencyLimiter, Gradient2};
    let clock = ManualClock::new(Nanos::from_secs(1_000));
    let adaptive = AdaptiveConcurrencyLimiter::builder()
        .algorithm(Adaptive::Gradient2(Gradient2 {
            initial_limit: 2.0,
            min_limit: 2.0,
            ..Gradient2::default()
        }))
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap();
    let store = memory();
    let pipeline = Pipeline::builder()
        .limiter(adaptive)
        .stage(Stage::new(limit("per_user", 2, store)).scope(Scope::all().key(template("{user}"))))
        .build()
        .unwrap();
    let ask = |user| pipeline.evaluate_blocking(&Request::new(user, "free", Priority::Get));
    let a = ask("a");
    let b = ask("b");
    assert!(a.allowed() && b.allowed());
    let third = ask("c");
    assert_eq!(third.status(), 503);
    let refusal = third.refusal.unwrap();
    assert_eq!(refusal.stage, "adaptive_concurrency");
    assert!(refusal
        .message
        .contains("learned from its latency (2 requests in flight)"));
    // Released by handle, with the latency the caller measured.
    let handle = a.leases.into_iter().next().unwrap().keep();
    let released = pipeline.release_after(&handle, Some(Duration::from_millis(40)));
    assert!(floodgate::blocking::block_on(released).unwrap());
    let stage = pipeline.stage("adaptive_concurrency").unwrap();
    let estimate = || match floodgate::blocking::block_on(stage.snapshot()).state {
        floodgate::pipeline::LimiterState::AdaptiveConcurrency {
            samples,
            last_rtt,
            in_flight,
            ..
        } => (samples, last_rtt, in_flight),
        other => panic!("{other:?}"),
    };
    assert_eq!(estimate(), (1, Duration::from_millis(40), 1));
    // A request refused by the later stage gives its place back and teaches nothing.
    drop(b);
    assert!(ask("d").allowed());
    assert!(ask("d").allowed());
    let refused = ask("d");
    assert_eq!(refused.refusal.unwrap().stage, "per_user");
    assert_eq!(estimate().0, 1);
}

/// A reload (a pipeline built counting on from the one it replaces) keeps what an unchanged
/// adaptive stage learned and the leases it holds; a changed one starts afresh.
#[test]
fn a_reload_keeps_an_unchanged_adaptive_stage() {
    use floodgate::limiter::adaptive::{Adaptive, AdaptiveConcurrencyLimiter, Vegas};
    let clock = ManualClock::new(Nanos::from_secs(1_000));
    let build = |initial: f64, previous: Option<&Pipeline<Arc<Mem>>>| {
        let adaptive = AdaptiveConcurrencyLimiter::builder()
            .algorithm(Adaptive::Vegas(Vegas {
                initial_limit: initial,
                ..Vegas::default()
            }))
            .clock(Arc::new(clock.clone()))
            .build()
            .unwrap();
        let mut builder = Pipeline::<Arc<Mem>>::builder().limiter(adaptive);
        if let Some(previous) = previous {
            builder = builder.counting_on_from(previous);
        }
        builder.build().unwrap()
    };
    let estimate = |p: &Pipeline<Arc<Mem>>| match p.stages().next().unwrap().limiter() {
        floodgate::pipeline::Limiter::AdaptiveConcurrency(l) => l.estimate(),
        other => panic!("{other:?}"),
    };
    let first = build(20.0, None);
    let request = Request::new("a", "free", Priority::Get);
    let done = first.evaluate_blocking(&request).leases.pop().unwrap();
    done.complete(Duration::from_millis(10));
    let running = first
        .evaluate_blocking(&request)
        .leases
        .pop()
        .unwrap()
        .keep();
    assert_eq!(
        (estimate(&first).samples, estimate(&first).in_flight),
        (1, 1)
    );

    let same = build(20.0, Some(&first));
    assert_eq!((estimate(&same).samples, estimate(&same).in_flight), (1, 1));
    let released = floodgate::blocking::block_on(same.release(&running)).unwrap();
    assert!(
        released,
        "a lease taken before the reload comes back after it"
    );

    let changed = build(30.0, Some(&same));
    assert_eq!(
        (estimate(&changed).samples, estimate(&changed).limit),
        (0, 30.0)
    );
}

#[cfg(feature = "redis")]
mod redis_common;

#[cfg(feature = "redis")]
mod redis {
    use super::redis_common::{runtime, store_on_clock};
    use super::*;
    use floodgate::store::RedisStore;
    use floodgate_harness::{RedisCluster, RedisServer};

    /// The story on `store`, asked from a blocking thread of the runtime that runs its
    /// connection, as a synchronous caller would.
    fn story_on(rt: &tokio::runtime::Runtime, store: RedisStore) {
        let pipeline = tenants(store);
        let story = move || {
            hierarchical_story(&pipeline);
            assert_eq!(pipeline.stats()[0].fail_open, 0, "every call reached Redis");
        };
        rt.block_on(async { tokio::task::spawn_blocking(story).await })
            .unwrap();
    }

    #[test]
    fn hierarchical_limits_take_from_every_level_or_none_on_redis() {
        let server = RedisServer::start();
        let rt = runtime();
        story_on(
            &rt,
            store_on_clock(
                &rt,
                &server.url(),
                &ManualClock::new(Nanos::from_secs(1_000)),
            ),
        );
    }

    /// The levels' keys share the organisation's hash tag, so the stage is one call to one
    /// master.
    #[test]
    fn hierarchical_limits_share_a_slot_on_redis_cluster() {
        let cluster = RedisCluster::start(3, 0);
        let rt = runtime();
        story_on(
            &rt,
            store_on_clock(
                &rt,
                &cluster.url(),
                &ManualClock::new(Nanos::from_secs(1_000)),
            ),
        );
    }
}
