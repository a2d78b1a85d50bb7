//! Envoy AI Gateway's QuotaPolicy service run on Floodgate, end to end: the deployment
//! AI Gateway makes for it (envoyproxy/ai-gateway, `tests/e2e/testdata/backend_quota_ratelimit.yaml`:
//! `/bin/ratelimit` with its `--quotaRateLimitServiceAddr=…` argument and its environment,
//! configuration over xDS as node `envoy-ai-gateway-ratelimit`), a control plane of the test's
//! own pushing the descriptor trees AI Gateway's translator builds
//! (`internal/ratelimit/translator/translator.go`: domain `ai-gateway-quota`, `backend_name` →
//! `model_name_override` → bucket rules, every leaf in quota mode), a Redis of the test's own,
//! and the calls Envoy's rate limit filter makes for AI Gateway's routes
//! (`internal/extensionserver/quota_ratelimit.go`: the request-time check, then the stream-done
//! charge of the response's token cost). The answers and the Redis counters are the ones
//! upstream's service gives: AI Gateway's own e2e test reads the same counter
//! (`backend_quota_ratelimit_test.go`: 21 after a 20-token response, refused at the next
//! request, 22).

use crate::common;
use crate::common::xds as control_plane;

use common::serve::{Service, TempDir};
use common::upstream::{as_ratelimit, launch, loopback_listeners};
use control_plane::ControlPlane;
use floodgate_harness::RedisServer;
use floodgate_server::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use floodgate_server::grpc::{RateLimitDescriptor, RateLimitRequest, RateLimitServiceClient};
use floodgate_server::proto::ratelimit::config::ratelimit::v3 as conf;

const DOMAIN: &str = "ai-gateway-quota";
const NODE_ID: &str = "envoy-ai-gateway-ratelimit";
/// The e2e test's backend (`default/<AIServiceBackend>`) and model: 10 tokens an hour.
const BACKEND: &str = "default/envoy-ai-gateway-quota-ratelimit-testupstream";
const MODEL: &str = "quota-test-model";
/// A backend whose model has bucket rules: premium API keys (5 an hour) and the default
/// bucket (8 an hour).
const BUCKETED: &str = "default/bucketed";
const PREMIUM: &str = "rule-0-x-api-key|premium-match-0";
const DEFAULT_BUCKET: &str = "rule-1-match--1";

const OK: i32 = 1;
const OVER_LIMIT: i32 = 2;

/// A leaf as the translator writes one: `key` (and `value`, when not empty) with `limit` an
/// hour, in quota mode.
fn leaf(key: &str, value: &str, limit: u32) -> conf::RateLimitDescriptor {
    conf::RateLimitDescriptor {
        key: key.into(),
        value: value.into(),
        rate_limit: Some(conf::RateLimitPolicy {
            unit: conf::RateLimitUnit::Hour as i32,
            requests_per_unit: limit,
            ..Default::default()
        }),
        quota_mode: true,
        ..Default::default()
    }
}

fn node(
    key: &str,
    value: &str,
    children: Vec<conf::RateLimitDescriptor>,
) -> conf::RateLimitDescriptor {
    conf::RateLimitDescriptor {
        key: key.into(),
        value: value.into(),
        descriptors: children,
        ..Default::default()
    }
}

/// The one resource AI Gateway's controller serves: its QuotaPolicies' backends in domain
/// `ai-gateway-quota`. The e2e test's policy (`perModelQuotas` with a default bucket of 10
/// tokens an hour), and a policy with a bucket rule on `x-api-key: premium` (Exact, so its
/// value is the rule's key), a default bucket, and a service quota for every other model.
fn quota_policies() -> conf::RateLimitConfig {
    conf::RateLimitConfig {
        name: DOMAIN.into(),
        domain: DOMAIN.into(),
        descriptors: vec![
            node(
                "backend_name",
                BACKEND,
                vec![leaf("model_name_override", MODEL, 10)],
            ),
            node(
                "backend_name",
                BUCKETED,
                vec![
                    node(
                        "model_name_override",
                        "gpt-4",
                        vec![
                            leaf(PREMIUM, PREMIUM, 5),
                            leaf(DEFAULT_BUCKET, DEFAULT_BUCKET, 8),
                        ],
                    ),
                    leaf("model_name_override", "", 100),
                ],
            ),
        ],
    }
}

/// AI Gateway's deployment of the service: its environment, with the test's Redis and
/// control plane, and every listener on a loopback port the OS chooses (the deployment's
/// gRPC port is 8081, the others upstream's defaults).
fn deployment_env(redis: &RedisServer, plane: &ControlPlane) -> Vec<(&'static str, String)> {
    let mut env = vec![
        ("LOG_LEVEL", "debug".to_string()),
        ("REDIS_SOCKET_TYPE", "tcp".into()),
        ("REDIS_URL", format!("127.0.0.1:{}", redis.port())),
        ("RUNTIME_ROOT", "/data".into()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("USE_STATSD", "false".into()),
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".into()),
        ("CONFIG_GRPC_XDS_NODE_ID", NODE_ID.into()),
        ("CONFIG_GRPC_XDS_SERVER_URL", plane.address.to_string()),
        // Not a test of a slow store: see `serve::GENEROUS_STORE_TIMEOUT`.
        (
            "FLOODGATE_STORE_TIMEOUT",
            common::serve::GENEROUS_STORE_TIMEOUT.into(),
        ),
    ];
    env.extend(loopback_listeners());
    env
}

/// Starts the service as AI Gateway's manifest does, off the test's runtime (which serves
/// the control plane meanwhile).
async fn start(dir: &TempDir, env: Vec<(&'static str, String)>) -> Service {
    let program = as_ratelimit(&dir.0);
    tokio::task::spawn_blocking(move || {
        launch(
            &program,
            &["--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system"],
            &env,
        )
    })
    .await
    .unwrap()
}

/// A descriptor of a call: its entries, and its own `hits_addend` when it has one.
type Sent<'a> = (&'a [(&'a str, &'a str)], Option<u64>);

/// One `ShouldRateLimit` call of Envoy's quota filter: a descriptor per entry list, each with
/// its own `hits_addend` when given (the stream-done charge, from `quota_cost`); the overall
/// code and each status's code.
async fn call(node: &Service, descriptors: &[Sent<'_>]) -> (i32, Vec<i32>) {
    let mut client = RateLimitServiceClient::connect(node.grpc.clone())
        .await
        .unwrap();
    let request = RateLimitRequest {
        domain: DOMAIN.into(),
        descriptors: descriptors
            .iter()
            .map(|(entries, hits)| RateLimitDescriptor {
                entries: entries
                    .iter()
                    .map(|(key, value)| Entry {
                        key: key.to_string(),
                        value: value.to_string(),
                    })
                    .collect(),
                hits_addend: *hits,
                ..Default::default()
            })
            .collect(),
        hits_addend: 0,
    };
    let answer = client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner();
    (
        answer.overall_code,
        answer.statuses.iter().map(|s| s.code).collect(),
    )
}

/// The counter upstream keeps for `model` of `backend` (`ai-gateway-quota_backend_name_…`
/// and the hour's start), read as AI Gateway's e2e test reads it: the one key matching.
fn counter(redis: &RedisServer, backend: &str, model: &str, bucket: Option<&str>) -> u64 {
    let mut pattern = format!("{DOMAIN}_backend_name_{backend}_model_name_override_{model}_");
    if let Some(bucket) = bucket {
        pattern.push_str(&format!("{bucket}_{bucket}_"));
    }
    // The pattern's own `|` and `*` are not special to KEYS but `*` is; the names hold none.
    let keys = redis.cli(&["KEYS", &format!("{pattern}[0-9]*")]).unwrap();
    let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
    assert_eq!(keys.len(), 1, "one window's key for {pattern}: {keys:?}");
    redis
        .cli(&["GET", keys[0]])
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ai_gateways_quota_policy_service_runs_on_floodgate() {
    let redis = RedisServer::start();
    let plane = ControlPlane::start(None).await;
    plane.push("1", vec![quota_policies()]);
    // A directory of the test's own for the `ratelimit` link.
    let (dir, _) = common::serve::config_file("");
    let node = start(&dir, deployment_env(&redis, &plane)).await;
    assert!(
        node.started.contains("--quotaRateLimitServiceAddr=…")
            && !node.started.contains("does not support"),
        "its argument is ignored, every variable it sets supported:\n{}",
        node.started
    );
    let subscription = &plane.requests()[0];
    assert_eq!(subscription.node.as_ref().unwrap().id, NODE_ID);
    plane.wait_for_ack("1").await;

    // The e2e test: a request (1 hit at request time), its response's 20 tokens charged when
    // the stream is done, then the next request refused, counted as upstream counts it.
    let model: &[(&str, &str)] = &[("backend_name", BACKEND), ("model_name_override", MODEL)];
    assert_eq!(call(&node, &[(model, None)]).await, (OK, vec![OK]));
    assert_eq!(
        call(&node, &[(model, Some(20))]).await,
        (OVER_LIMIT, vec![OVER_LIMIT])
    );
    assert_eq!(counter(&redis, BACKEND, MODEL, None), 21);
    assert_eq!(
        call(&node, &[(model, None)]).await,
        (OVER_LIMIT, vec![OVER_LIMIT])
    );
    assert_eq!(counter(&redis, BACKEND, MODEL, None), 22);

    // Bucket rules: a premium request is checked against its rule's bucket and the default
    // bucket, both in quota mode: it goes through while either has room.
    let bucket = |b: &'static str| -> Vec<(&'static str, &'static str)> {
        vec![
            ("backend_name", BUCKETED),
            ("model_name_override", "gpt-4"),
            (b, b),
        ]
    };
    let (premium, default) = (bucket(PREMIUM), bucket(DEFAULT_BUCKET));
    let both = |hits| [(&premium[..], hits), (&default[..], hits)];
    assert_eq!(call(&node, &both(None)).await, (OK, vec![OK, OK]));
    // 6 tokens charged to each when the stream is done: the premium bucket is past its 5.
    assert_eq!(
        call(&node, &both(Some(6))).await,
        (OK, vec![OVER_LIMIT, OK])
    );
    // The default bucket still has room: OK, the premium status saying OVER_LIMIT.
    assert_eq!(call(&node, &both(None)).await, (OK, vec![OVER_LIMIT, OK]));
    assert_eq!(counter(&redis, BUCKETED, "gpt-4", Some(DEFAULT_BUCKET)), 8);
    // Both over: refused.
    assert_eq!(
        call(&node, &both(None)).await,
        (OVER_LIMIT, vec![OVER_LIMIT, OVER_LIMIT])
    );
    assert_eq!(counter(&redis, BUCKETED, "gpt-4", Some(PREMIUM)), 9);
    assert_eq!(counter(&redis, BUCKETED, "gpt-4", Some(DEFAULT_BUCKET)), 9);
    // A request without the premium key meets the default bucket alone: refused.
    assert_eq!(
        call(&node, &[(&default[..], None)]).await,
        (OVER_LIMIT, vec![OVER_LIMIT])
    );
    // Another model of that backend: the service quota.
    let other: &[(&str, &str)] = &[("backend_name", BUCKETED), ("model_name_override", "o1")];
    assert_eq!(call(&node, &[(other, None)]).await, (OK, vec![OK]));

    // The rules as upstream's debug listener lists them, each leaf in quota mode.
    let listing = node.rlconfig(&reqwest::Client::new()).await;
    assert!(
        listing.contains(&format!(
            "{DOMAIN}.backend_name_{BACKEND}.model_name_override_{MODEL}: unit=HOUR requests_per_unit=10, shadow_mode: false, quota_mode: true\n"
        )),
        "{listing}"
    );
}
