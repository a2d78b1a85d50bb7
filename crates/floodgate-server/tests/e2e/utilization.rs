//! Stripe's fourth limiter in the service: a request admitted by `/v1/evaluate` is one of the
//! caller's busy workers until its lease token comes back with `/v1/release`, so the
//! utilization stage sees the gateway's load. With every worker held, it sheds test-mode
//! traffic first, then GET, then POST, never critical; released, it recovers. The real
//! binary, with the controller's clock shortened so that the story takes seconds.

use crate::common;

use common::cli::metric;
use common::serve::{config_file, eventually, serve, Service};
use serde_json::{json, Value};

const CONFIG: &str = r#"
pipeline:
  - name: shedder
    kind: utilization
    workers: 4
    lease_ttl: 1h
    sample_interval: 50ms
    seconds_before_shedding: 0.2
    seconds_to_shed_all: 3
"#;

async fn evaluate(node: &Service, client: &reqwest::Client, priority: &str) -> Value {
    let body = json!({"user": "gateway", "priority": priority});
    let (status, answer) = node.post(client, "/v1/evaluate", &body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

async fn release(node: &Service, client: &reqwest::Client, answer: &Value) {
    if answer["lease"].is_string() {
        let body = json!({"lease": answer["lease"]});
        let (status, released) = node.post(client, "/v1/release", &body).await;
        assert_eq!(status, 200, "{released}");
    }
}

async fn busy_workers(node: &Service, client: &reqwest::Client) -> f64 {
    let (_, text) = node.get(client, "/metrics").await;
    metric(&text, "floodgate_in_flight{limiter=\"workers\"}").unwrap_or(-1.0)
}

/// Whether the shedder refused `answer`.
fn shed(answer: &Value) -> bool {
    answer["status"] == 503 && answer["limiter"] == "shedder"
}

#[tokio::test]
async fn rising_utilization_sheds_test_then_get_then_post_never_critical() {
    let (_dir, path) = config_file(CONFIG);
    let node = serve(&path, "memory", &[]);
    let client = reqwest::Client::new();

    // Requests between evaluate and release are busy workers; released ones are not.
    let one = evaluate(&node, &client, "get").await;
    assert_eq!(busy_workers(&node, &client).await, 1.0);
    release(&node, &client, &one).await;
    assert_eq!(busy_workers(&node, &client).await, 0.0);

    // Every worker busy with a critical request (never shed), held.
    let mut held = Vec::new();
    for _ in 0..4 {
        let answer = evaluate(&node, &client, "critical").await;
        assert_eq!(answer["allowed"], true, "{answer}");
        held.push(answer);
    }
    assert_eq!(busy_workers(&node, &client).await, 4.0);

    // Rounds of one request per class, the most important shed last first: the shed amount
    // only grows while every worker is busy, so a class shed in a round means every less
    // important class is shed in that round too.
    let classes = ["post", "get", "test", "critical"];
    let mut first_shed: [Option<usize>; 4] = [None; 4];
    let mut round = 0;
    while first_shed[0].is_none() {
        assert!(round < 400, "POST never shed: {first_shed:?}");
        let mut shed_now = [false; 4];
        for (i, class) in classes.iter().enumerate() {
            let answer = evaluate(&node, &client, class).await;
            shed_now[i] = shed(&answer);
            release(&node, &client, &answer).await;
        }
        assert!(!shed_now[3], "a critical request was shed in round {round}");
        for i in 0..2 {
            assert!(
                !shed_now[i] || shed_now[i + 1],
                "round {round}: {} shed but not {}",
                classes[i],
                classes[i + 1]
            );
        }
        for i in 0..3 {
            if shed_now[i] && first_shed[i].is_none() {
                first_shed[i] = Some(round);
            }
        }
        round += 1;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let [post, get, test] =
        [first_shed[0], first_shed[1], first_shed[2]].map(|r| r.expect("every class was shed"));
    assert!(
        test <= get && get <= post,
        "first shed in rounds: {first_shed:?}"
    );

    // The workers come back: shedding recedes, test-mode traffic last.
    for answer in &held {
        release(&node, &client, answer).await;
    }
    assert_eq!(busy_workers(&node, &client).await, 0.0);
    eventually("test-mode traffic admitted again", || async {
        let answer = evaluate(&node, &client, "test").await;
        release(&node, &client, &answer).await;
        !shed(&answer)
    })
    .await;
}
