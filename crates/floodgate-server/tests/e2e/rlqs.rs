//! The Rate Limit Quota Service end to end: `floodgate serve` on the memory store, and RLQS
//! clients that behave as Envoy's filter does (read from its source): one stream per domain,
//! the domain in every message, a bucket's first report sent at its first request with that
//! request counted and `time_elapsed` 0, then every bucket reported on each tick.

use crate::common;

use common::rlqs::{bucket, Client};
use common::serve::{config_file, serve};
use floodgate_server::grpc::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use floodgate_server::grpc::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use floodgate_server::grpc::proto::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

const CONFIG: &str = "\
domains:
  - domain: quota
    descriptors:
      - key: name
        rate_limit: { unit: second, requests_per_unit: 100 }
";

/// Two clients of one bucket: the second is served at once out of the room kept for
/// newcomers, both end on half when both want the whole limit, and on max-min fair shares
/// when one wants little; a client that breaks the protocol is ended alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_envoys_share_a_bucket_and_a_bad_stream_ends_alone() {
    let (_dir, path) = config_file(CONFIG);
    let service = serve(&path, "memory", &[]);
    let mut a = Client::connect(&service).await;
    a.report("quota", "alice", 1, 0, 0).await;
    a.until_rate("alice", 1.0..=100.0).await;
    let mut b = Client::connect(&service).await;
    b.report("quota", "alice", 1, 0, 0).await;
    // b's first answer is a share, not a denial: the bucket is far from its limit.
    b.until("alice", "any answer", |_| true).await;
    let first = b.held["alice"].clone();
    assert!(
        common::rlqs::rate(&first).is_some_and(|r| r > 0.0),
        "{first}"
    );
    // Both want 100 a second: 50 each.
    a.report("quota", "alice", 250, 250, 5).await;
    b.report("quota", "alice", 250, 250, 5).await;
    a.until_rate("alice", 48.0..=50.0).await;
    b.until_rate("alice", 48.0..=50.0).await;
    // Another bucket of b's is its own limit.
    b.report("", "bob", 1, 0, 0).await;
    b.until_rate("bob", 1.0..=100.0).await;

    // A stream whose first report names no domain ends with INVALID_ARGUMENT ...
    let mut bad = Client::connect(&service).await;
    bad.report("", "carol", 1, 0, 0).await;
    let status = match bad.answers.next().await {
        Some(Err(status)) => status,
        other => panic!("the stream should end: {other:?}"),
    };
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("names no domain"), "{status:?}");
    // ... and the others go on: b now wants 1 a second: it needs 2 (its demand and a margin
    // of one standard deviation), and a, wanting 100, grows to the 98 left once b has shrunk.
    b.report("quota", "alice", 5, 0, 5).await;
    b.until_rate("alice", 1.9..=2.1).await;
    a.until_rate("alice", 95.0..=98.0).await;

    // /metrics shows the streams, the assignments sent and the bucket's demand and grants.
    let client = reqwest::Client::new();
    let (status, metrics) = service.get(&client, "/metrics").await;
    assert_eq!(status, 200);
    let value = |series: &str| -> u64 {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(series))
            .unwrap_or_else(|| panic!("no {series} in /metrics"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(
        value("floodgate_rlqs_streams "),
        2,
        "a and b; the bad one ended"
    );
    assert_eq!(value("floodgate_rlqs_streams_opened_total "), 3);
    assert!(value("floodgate_rlqs_assignments_total{strategy=\"token_bucket\"}") >= 6);
    // No one was denied: b's first answer came out of the room kept for newcomers, and the
    // shares moved from one to the other without a denial.
    let denied = metrics
        .lines()
        .find(|l| l.starts_with("floodgate_rlqs_assignments_total{strategy=\"deny_all\"}"));
    assert!(denied.is_none_or(|l| l.ends_with(" 0")), "{denied:?}");
    // The bucket is named with its value hidden (a value may be a user's name, or a key).
    assert!(!metrics.contains("alice"), "{metrics}");
    let granted = metrics
        .lines()
        .find(|l| l.starts_with("floodgate_rlqs_bucket_granted{"))
        .expect("the bucket's grants");
    let labels = &granted[..granted.find('}').unwrap() + 1];
    assert!(
        labels.starts_with("floodgate_rlqs_bucket_granted{domain=\"quota\",bucket=\"name=#"),
        "{labels}"
    );
    let alice = &labels["floodgate_rlqs_bucket_granted".len()..];
    assert_eq!(value(&format!("floodgate_rlqs_bucket_claimants{alice}")), 2);
    let granted = value(&format!("floodgate_rlqs_bucket_granted{alice}"));
    assert!((95..=100).contains(&granted), "{granted}");
    assert_eq!(value(&format!("floodgate_rlqs_bucket_limit{alice}")), 100);
    assert_eq!(value(&format!("floodgate_rlqs_bucket_demand{alice}")), 101);

    // The dashboard's data shows the same.
    let (status, body) = service.get(&client, "/v1/dashboard").await;
    assert_eq!(status, 200);
    let dashboard: serde_json::Value = serde_json::from_str(&body).unwrap();
    let quotas = &dashboard["rlqs"];
    assert_eq!(quotas["streams"], 2, "{quotas}");
    assert_eq!(quotas["shared"], false, "{quotas}");
    let busiest = &quotas["busiest"][0];
    assert_eq!(
        (&busiest["limit"], &busiest["claimants"]),
        (&serde_json::json!(100), &serde_json::json!(2)),
        "{quotas}"
    );
    assert!(
        busiest["granted"]
            .as_u64()
            .is_some_and(|g| (95..=100).contains(&g)),
        "{quotas}"
    );
    assert!(!body.contains("alice"), "{body}");
}

/// Streams are bounded: past `rlqs.max_streams`, a new one is refused at once, and one that
/// ends makes room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_the_bound_are_refused() {
    let (_dir, path) = config_file(&format!("{CONFIG}rlqs: {{ max_streams: 1 }}\n"));
    let service = serve(&path, "memory", &[]);
    let mut first = Client::connect(&service).await;
    first.report("quota", "alice", 1, 0, 0).await;
    first.until_rate("alice", 1.0..=100.0).await;
    let mut client = RateLimitQuotaServiceClient::connect(service.grpc.clone())
        .await
        .expect("connects");
    let (_reports, receiver) = mpsc::channel::<RateLimitQuotaUsageReports>(1);
    let refused = client
        .stream_rate_limit_quotas(ReceiverStream::new(receiver))
        .await
        .expect_err("a second stream is one too many");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    assert!(
        refused.message().contains("rlqs.max_streams"),
        "{refused:?}"
    );
    drop(first);
    common::serve::eventually("the ended stream makes room", || {
        let grpc = service.grpc.clone();
        async move {
            let Ok(mut client) = RateLimitQuotaServiceClient::connect(grpc).await else {
                return false;
            };
            let (reports, receiver) = mpsc::channel(1);
            let usage = BucketQuotaUsage {
                bucket_id: Some(bucket("bob")),
                time_elapsed: None,
                num_requests_allowed: 1,
                num_requests_denied: 0,
            };
            let _ = reports
                .send(RateLimitQuotaUsageReports {
                    domain: "quota".to_string(),
                    bucket_quota_usages: vec![usage],
                })
                .await;
            match client
                .stream_rate_limit_quotas(ReceiverStream::new(receiver))
                .await
            {
                Ok(answers) => answers.into_inner().next().await.is_some_and(|a| a.is_ok()),
                Err(_) => false,
            }
        }
    })
    .await;
}

/// On a gRPC port with mutual TLS, RLQS streams are held to it as `ShouldRateLimit` calls are:
/// the named client is served, a client without a certificate is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_over_mutual_tls() {
    let ca = floodgate_harness::TestCa::new();
    let server = ca.issue("server", "IP:127.0.0.1,DNS:localhost");
    let envoy = ca.issue("envoy", "DNS:envoy.internal");
    let (_dir, path) = config_file(&format!(
        "{CONFIG}tls:\n  grpc:\n    cert_file: {cert}\n    key_file: {key}\n    client_ca_file: {ca}\n    client_san: envoy.internal\n",
        cert = server.cert.display(),
        key = server.key.display(),
        ca = ca.ca_file().display(),
    ));
    let service = serve(&path, "memory", &[]);
    let channel = common::tls::tls_channel(&service.grpc, &ca.ca_file(), Some(&envoy))
        .await
        .expect("a TLS channel");
    let mut named = Client::open(RateLimitQuotaServiceClient::new(channel)).await;
    named.report("quota", "alice", 1, 0, 0).await;
    named.until_rate("alice", 1.0..=100.0).await;
    let refused = match common::tls::tls_channel(&service.grpc, &ca.ca_file(), None).await {
        Err(_) => true,
        Ok(channel) => {
            let mut client = RateLimitQuotaServiceClient::new(channel);
            let (_reports, receiver) = mpsc::channel::<RateLimitQuotaUsageReports>(1);
            client
                .stream_rate_limit_quotas(ReceiverStream::new(receiver))
                .await
                .is_err()
        }
    };
    assert!(refused, "a client without a certificate was served");
}
