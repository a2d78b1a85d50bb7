//! One request through a whole pipeline on the memory store (`Pipeline::evaluate_blocking`):
//! what the pipeline adds to the store's decisions.
//!
//! - `pipeline/stripe`: Stripe's four stages (request rate on a plan no request exceeds,
//!   concurrency, fleet, utilization at rest), every request allowed and its leases given back
//!   at once; 1,000 users in turn.
//! - `pipeline/scoped`: a configured kind of list: a limit per `attributes.ip`, the plans per
//!   `{user}`, a limit on `POST /orders*` (every other request a write), a hierarchical
//!   organisation/user limit, and a concurrency stage per user; the same users, each with an
//!   address and an organisation.
//!
//! Run with `cargo bench -p floodgate-core --bench pipeline`.

// Benchmarks time themselves with the OS clock; the rule against it is for library code.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use floodgate::algorithm::fixed_window::FixedWindow;
use floodgate::algorithm::spec::{AnyAlgorithm, AnyState};
use floodgate::algorithm::token_bucket::TokenBucket;
use floodgate::limiter::concurrency::ConcurrencyLimiter;
use floodgate::limiter::fleet::FleetShedder;
use floodgate::limiter::request_rate::{Plan, RequestRateLimiter};
use floodgate::limiter::utilization::{SettableUtilization, UtilizationShedder};
use floodgate::limiter::Priority;
use floodgate::pipeline::scope::{Field, KeyTemplate, Pattern, When};
use floodgate::pipeline::{Pipeline, Request, Scope, Stage};
use floodgate::store::{Key, MemoryStore};
use floodgate::CoarseClock;

type Mem = Arc<MemoryStore<Key, AnyState, CoarseClock>>;

const USERS: usize = 1_000;

fn store() -> Mem {
    Arc::new(MemoryStore::builder().build_typed().expect("a store"))
}

fn plenty(name: &str) -> Plan {
    Plan::new(
        name,
        AnyAlgorithm::TokenBucket(TokenBucket::new(1e9, 1_000_000_000).unwrap()),
    )
    .unwrap()
}

fn limit(namespace: &str, store: &Mem) -> RequestRateLimiter<Mem> {
    let window = FixedWindow::new(1_000_000_000, Duration::from_secs(3600)).unwrap();
    RequestRateLimiter::builder()
        .namespace(namespace)
        .plan(Plan::limit(namespace, window.into()).unwrap())
        .default_plan(namespace)
        .build(store.clone())
        .unwrap()
}

fn stripe(store: &Mem) -> Pipeline<Mem> {
    Pipeline::stripe(
        RequestRateLimiter::builder()
            .plan(plenty("free"))
            .default_plan("free")
            .build(store.clone())
            .unwrap(),
        ConcurrencyLimiter::builder()
            .capacity(1_000)
            .build(store.clone())
            .unwrap(),
        FleetShedder::builder()
            .capacity(1_000_000)
            .reserved_for_critical(0.2)
            .build(store.clone())
            .unwrap(),
        UtilizationShedder::builder()
            .source(Arc::new(SettableUtilization::new(0.0)))
            .build()
            .unwrap(),
    )
    .unwrap()
}

fn scoped(store: &Mem) -> Pipeline<Mem> {
    let template = |t: &str| KeyTemplate::parse(t).unwrap();
    let writes = When::always()
        .field(
            Field::parse("attributes.method").unwrap(),
            vec![Pattern::new("POST")],
        )
        .field(Field::Endpoint, vec![Pattern::new("/orders*")]);
    Pipeline::builder()
        .stage(
            Stage::new(limit("per_ip", store)).scope(Scope::all().key(template("{attributes.ip}"))),
        )
        .stage(
            Stage::new(
                RequestRateLimiter::builder()
                    .namespace("plans")
                    .plan(plenty("free"))
                    .default_plan("free")
                    .build(store.clone())
                    .unwrap(),
            )
            .scope(Scope::all().key(template("{user}"))),
        )
        .stage(
            Stage::new(limit("order_writes", store))
                .scope(Scope::all().when(writes).key(template("{user}"))),
        )
        .stage(
            Stage::new(limit("tenants", store))
                .scope(Scope::all().key(template("{{{attributes.org}}}")))
                .level(
                    template("{{{attributes.org}}}/{user}"),
                    limit("tenants.user", store),
                ),
        )
        .stage(
            Stage::new(
                ConcurrencyLimiter::builder()
                    .capacity(1_000)
                    .build(store.clone())
                    .unwrap(),
            )
            .scope(Scope::all().key(template("{user}"))),
        )
        .build()
        .unwrap()
}

fn bench(c: &mut Criterion) {
    let users: Vec<(String, String, String)> = (0..USERS)
        .map(|i| {
            (
                format!("user-{i}"),
                format!("10.0.{}.{}", i / 256, i % 256),
                format!("org-{}", i % 50),
            )
        })
        .collect();
    let mut group = c.benchmark_group("pipeline");
    let pipeline = stripe(&store());
    let mut n = 0;
    group.bench_function("stripe", |b| {
        b.iter(|| {
            n = (n + 1) % USERS;
            let request = Request::new(&users[n].0, "free", Priority::Get);
            black_box(pipeline.evaluate_blocking(&request).allowed())
        })
    });
    let pipeline = scoped(&store());
    let mut n = 0;
    group.bench_function("scoped", |b| {
        b.iter(|| {
            n = (n + 1) % USERS;
            let (user, ip, org) = &users[n];
            let method = if n % 2 == 0 { "POST" } else { "GET" };
            let attributes = [
                ("ip", ip.as_str()),
                ("method", method),
                ("org", org.as_str()),
            ];
            let request = Request {
                attributes: &attributes,
                endpoint: Some("/orders"),
                ..Request::new(user, "free", Priority::Get)
            };
            black_box(pipeline.evaluate_blocking(&request).allowed())
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
