//! The first screen tells the truth: the README's `/v1/evaluate` example holds places until
//! `/v1/release` gives them back; every endpoint answers a refusal as docs/http-api.md's table says,
//! and `?http_status=decision` makes the HTTP status carry it; the operator can list and clear
//! the plans set at run time, and the dashboard and the log show them. The real binary on the
//! built-in configuration, as the README's first command serves it.

use crate::common;

use common::serve::{bare_command, start, Service};
use serde_json::{json, Value};

const TOKEN: &str = "an-admin-token-of-some-length";

fn builtin() -> Service {
    let mut command = bare_command(
        std::path::Path::new(env!("CARGO_BIN_EXE_floodgate")),
        &[("FLOODGATE_ADMIN_TOKEN", TOKEN)],
    );
    command.args(["serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"]);
    start(command)
}

async fn evaluate(node: &Service, client: &reqwest::Client, user: &str) -> Value {
    let body = json!({"user": user, "plan": "free", "priority": "get"});
    let (status, answer) = node.post(client, "/v1/evaluate", &body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

#[tokio::test]
async fn leases_hold_until_released_and_refusals_answer_as_documented() {
    let node = builtin();
    let client = reqwest::Client::new();
    // Twenty in flight is alice's most; the 21st is refused until one comes back.
    let mut held = Vec::new();
    for _ in 0..20 {
        let answer = evaluate(&node, &client, "alice").await;
        assert_eq!(answer["allowed"], true, "{answer}");
        held.push(answer["lease"].clone());
    }
    let refused = evaluate(&node, &client, "alice").await;
    assert_eq!(
        (refused["status"].as_u64(), refused["limiter"].as_str()),
        (Some(429), Some("concurrency")),
        "{refused}"
    );
    let (status, _) = node
        .post(&client, "/v1/release", &json!({"lease": held.pop()}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(evaluate(&node, &client, "alice").await["allowed"], true);

    // The status carries the decision when asked: 429 with Retry-After and RateLimit fields.
    let answer = client
        .post(format!("{}/v1/evaluate?http_status=decision", node.http))
        .json(&json!({"user": "alice", "plan": "free", "priority": "get"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 429);
    assert!(answer.headers().get("retry-after").is_some());
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["limiter"], "concurrency", "{body}");
    let allowed = client
        .post(format!("{}/v1/evaluate?http_status=decision", node.http))
        .json(&json!({"user": "bob"}))
        .send()
        .await
        .unwrap();
    assert_eq!(allowed.status().as_u16(), 200);
    assert!(allowed.headers().get("ratelimit-policy").is_some());
    let bad = client
        .post(format!("{}/v1/evaluate?http_status=yes", node.http))
        .json(&json!({"user": "bob"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);

    // /v1/check: 200 with allowed false by default, 429 with the decision in the status.
    for _ in 0..5 {
        let (status, _) = node
            .post(
                &client,
                "/v1/check",
                &json!({"limiter": "login", "key": "carol"}),
            )
            .await;
        assert_eq!(status, 200);
    }
    let (status, answer) = node
        .post(
            &client,
            "/v1/check",
            &json!({"limiter": "login", "key": "carol"}),
        )
        .await;
    assert_eq!((status, answer["allowed"].clone()), (200, json!(false)));
    let answer = client
        .post(format!("{}/v1/check?http_status=decision", node.http))
        .json(&json!({"limiter": "login", "key": "carol"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 429);
    assert!(answer.headers().get("retry-after").is_some());
    // /json: 429, upstream's contract. The limit is 10 a second in windows of the wall clock,
    // so 11 calls may straddle a second's start and all pass; 21 calls put 11 in one window
    // unless they take over a second.
    let hit = json!({"domain": "example", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]});
    let mut statuses = Vec::new();
    for _ in 0..21 {
        let status = node.post(&client, "/json", &hit).await.0;
        statuses.push(status);
        if status == 429 {
            break;
        }
    }
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    assert!(statuses.len() >= 11, "{statuses:?}");
}

#[tokio::test]
async fn plans_set_at_run_time_are_listed_cleared_shown_and_logged() {
    let node = builtin();
    let client = reqwest::Client::new();
    let admin = |method: reqwest::Method, body: Option<Value>| {
        let mut request = client
            .request(method, format!("{}/admin/plan", node.http))
            .bearer_auth(TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        async move {
            let answer = request.send().await.unwrap();
            let status = answer.status().as_u16();
            (status, answer.json::<Value>().await.unwrap())
        }
    };
    let (status, _) = admin(
        reqwest::Method::POST,
        Some(json!({"user": "alice", "plan": "pro"})),
    )
    .await;
    assert_eq!(status, 200);
    let line = node.logged("plan switched for a user").await;
    assert!(
        line.contains("user=\"alice\"") && line.contains("plan=\"pro\""),
        "{line}"
    );
    let (status, listed) = admin(reqwest::Method::GET, None).await;
    assert_eq!(status, 200);
    assert_eq!(
        listed["overrides"],
        json!([{"user": "alice", "plan": "pro", "configured": null}])
    );
    // The dashboard: how many without the token, who with it.
    let (_, data) = node.get(&client, "/v1/dashboard").await;
    let data: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(data["plan_overrides"], json!({"count": 1, "users": null}));
    let data: Value = client
        .get(format!("{}/v1/dashboard", node.http))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(data["plan_overrides"]["users"][0]["user"], "alice");

    let (status, cleared) = admin(reqwest::Method::DELETE, Some(json!({"user": "alice"}))).await;
    assert_eq!((status, cleared["cleared"].clone()), (200, json!(true)));
    let (_, again) = admin(reqwest::Method::DELETE, Some(json!({"user": "alice"}))).await;
    assert_eq!(again["cleared"], false);
    let (_, listed) = admin(reqwest::Method::GET, None).await;
    assert_eq!(listed["overrides"], json!([]));
    // Without the token: refused.
    let answer = client
        .get(format!("{}/admin/plan", node.http))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 401);
}
