//! A small axum API protected by Floodgate's four limiters.
//!
//! ```text
//! cargo run -p floodgate-tower --features axum --example axum_api
//!
//! # Anonymous clients are keyed by address and get the free plan (50/s, bursts of 100):
//! curl -i http://127.0.0.1:3000/v1/things
//! # API keys are mapped to plans (sk_pro_alice is on pro, sk_std_bob on standard):
//! curl -i -H 'x-api-key: sk_pro_alice' http://127.0.0.1:3000/v1/things
//! curl -i -H 'authorization: Bearer sk_std_bob' http://127.0.0.1:3000/v1/things
//! # A refusal names a user only by a fingerprint of the key's HMAC (`key:1a2b3c4d...`).
//! # Burst past the free plan (one curl process, one connection): about 100 pass, then 429s
//! # with a JSON body, Retry-After, RateLimit-Policy and RateLimit:
//! curl -s -o /dev/null -w '%{http_code}\n' 'http://127.0.0.1:3000/v1/things?[1-120]' | sort | uniq -c
//! curl -i http://127.0.0.1:3000/v1/things
//! # Reports take 2 s; a user may have 2 requests in flight, the third gets a 429:
//! for i in 1 2 3; do curl -s -H 'x-api-key: sk_pro_alice' \
//!     http://127.0.0.1:3000/v1/reports & done; wait
//! # Charges are critical: never shed by the fleet or utilization shedders:
//! curl -i -X POST -H 'x-api-key: sk_pro_alice' http://127.0.0.1:3000/v1/charges
//! # Test-mode traffic is shed first when the workers are saturated:
//! curl -i -H 'x-test-mode: true' http://127.0.0.1:3000/v1/things
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, post};
use axum::{Json, Router};
use floodgate::limiter::utilization::WorkerGauge;
use floodgate::{
    CoarseClock, ConcurrencyLimiter, FleetShedder, MemoryStore, Pipeline, Plan, RequestRateLimiter,
    UtilizationShedder,
};
use floodgate_tower::{CredentialKey, Extractor, FloodgateLayer};
use serde_json::{json, Value};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    // One store for every limiter: each keeps its keys in its own namespace of it.
    let store = Arc::new(MemoryStore::new());
    // Longer than any request may take.
    let lease_ttl = Duration::from_secs(60);
    // The utilization shedder reads this gauge; the layer marks a worker busy per request.
    let workers = Arc::new(WorkerGauge::new(64)?);

    let pipeline = Pipeline::stripe(
        // free 50/s, standard 500/s, pro 1000/s, bursts of twice the rate; a report costs as
        // much as 10 ordinary requests.
        RequestRateLimiter::builder()
            .plans(Plan::examples())
            .default_plan("free")
            .endpoint_cost("/v1/reports", 10)
            .build(store.clone())?,
        // At most 2 requests in flight per user.
        ConcurrencyLimiter::builder()
            .capacity(2)
            .lease_ttl(lease_ttl)
            .build(store.clone())?,
        // 1,000 requests in flight in the fleet, a fifth kept for critical requests.
        FleetShedder::builder()
            .capacity(1_000)
            .reserved_for_critical(0.2)
            .lease_ttl(lease_ttl)
            .build(store)?,
        // Stripe's controller, sampled once a second.
        UtilizationShedder::builder()
            .seed(7)
            .source(workers.clone())
            .clock(Arc::new(CoarseClock::shared()))
            .build()?,
    )?;

    let plans: HashMap<&'static str, &'static str> =
        HashMap::from([("sk_pro_alice", "pro"), ("sk_std_bob", "standard")]);
    let extractor = Extractor::new()
        .plan_lookup(move |key| plans.get(key).map(|plan| plan.to_string()))
        // Clients without a key are keyed by the address axum's ConnectInfo records (the
        // crate's `axum` feature; served with into_make_service_with_connect_info below).
        .critical_route("/v1/charges")
        // Users are keyed by an HMAC of their API key, never the key itself. Nodes that share a
        // store must share this MAC key; `FLOODGATE_CREDENTIAL_KEY` (16 bytes or more) sets
        // it, else this single node keeps a random key per process.
        .credential_key(match std::env::var("FLOODGATE_CREDENTIAL_KEY") {
            Ok(secret) => CredentialKey::from_secret(secret.as_bytes())?,
            Err(_) => CredentialKey::process(),
        });
    let layer = FloodgateLayer::new(pipeline)
        .extractor(extractor)
        .worker_gauge(workers);

    let app = Router::new()
        .route("/v1/things", get(things))
        .route("/v1/reports", get(report))
        .route("/v1/charges", post(charge))
        // route_layer: requests to paths no route serves get their 404 without spending quota.
        .route_layer(layer);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://127.0.0.1:3000 (curl calls at the top of examples/axum_api.rs)");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}

async fn things() -> Json<Value> {
    Json(json!({"things": ["a", "b", "c"]}))
}

async fn report() -> Json<Value> {
    tokio::time::sleep(Duration::from_secs(2)).await;
    Json(json!({"report": "ready"}))
}

async fn charge() -> Json<Value> {
    Json(json!({"charge": "ch_1", "status": "succeeded"}))
}
