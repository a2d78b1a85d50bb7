//! Lease tokens through the service, in process: any user gets their places back, and a token
//! that was altered, forged, or names a stage that a reload removed is refused with a clear
//! error and releases nothing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use floodgate_service::config::Config;
use floodgate_service::lease_token::TokenError;
use floodgate_service::service::{EvaluateRequest, ReleaseTokenError, Server};

const ONE_IN_FLIGHT: &str = "plans: {free: {algorithm: token_bucket, rate: 1000, capacity: 1000}}\n\
default_plan: free\n\
limiters:\n  concurrency: {capacity: 1, lease_ttl: 1h}\n  fleet: {capacity: 100, reserved_for_critical: 0.1}\n";

/// A config file of its own for each test.
fn config_file(text: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "floodgate-leases-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("floodgate.yaml");
    std::fs::write(&path, text).expect("writes");
    path
}

fn server(path: &PathBuf) -> Server {
    let config = Config::load(path).expect("reads");
    Server::new(config, Some(path.clone()), None).expect("builds")
}

fn request(user: &str) -> EvaluateRequest {
    serde_json::from_value(serde_json::json!({ "user": user })).expect("a request")
}

#[tokio::test]
async fn any_user_takes_and_returns_leases() {
    let path = config_file(ONE_IN_FLIGHT);
    let s = server(&path);
    for user in [
        "fleet",
        "a.b.c",
        "alice",
        "é ü/..:{}",
        "v1.x.y",
        "concurrency:bob",
    ] {
        let first = s.evaluate(&request(user)).await.expect("valid");
        assert!(first.allowed, "{user:?}");
        let token = first.lease.expect("a lease token");
        assert!(!token.contains(user) || user.len() < 3, "opaque: {token}");
        // One in flight per user: the second is refused until the first is released.
        let second = s.evaluate(&request(user)).await.expect("valid");
        assert_eq!((second.allowed, second.status), (false, 429), "{user:?}");
        assert_eq!(second.limiter.as_deref(), Some("concurrency"));
        assert!(
            s.release(&token).await.expect("a genuine token"),
            "{user:?}"
        );
        assert!(
            !s.release(&token).await.expect("still genuine"),
            "released twice"
        );
        let third = s.evaluate(&request(user)).await.expect("valid");
        assert!(third.allowed, "{user:?}: the place came back");
        s.release(&third.lease.unwrap()).await.expect("genuine");
    }
}

#[tokio::test]
async fn altered_forged_and_orphaned_tokens_are_refused_and_release_nothing() {
    let path = config_file(ONE_IN_FLIGHT);
    let s = server(&path);
    let held = s.evaluate(&request("victim")).await.expect("valid");
    let token = held.lease.expect("a lease token");

    // Altered: flip one character of the payload.
    let mut altered: Vec<char> = token.chars().collect();
    let i = token.find('.').unwrap() + 2;
    altered[i] = if altered[i] == 'A' { 'B' } else { 'A' };
    let altered: String = altered.into_iter().collect();
    assert!(matches!(
        s.release(&altered).await,
        Err(ReleaseTokenError::Token(TokenError::BadSignature))
    ));
    // Forged: a genuine token of another service with another secret.
    let other = server(&path).with_lease_secret(b"another secret".to_vec());
    let foreign = other
        .evaluate(&request("victim"))
        .await
        .unwrap()
        .lease
        .unwrap();
    assert!(matches!(
        s.release(&foreign).await,
        Err(ReleaseTokenError::Token(TokenError::BadSignature))
    ));
    // Garbage.
    assert!(matches!(
        s.release("nope").await,
        Err(ReleaseTokenError::Token(TokenError::Malformed))
    ));
    // None of them released the victim's place.
    assert!(!s.evaluate(&request("victim")).await.unwrap().allowed);

    // Services that share a secret accept each other's tokens.
    let twin_a = server(&path).with_lease_secret(b"shared".to_vec());
    let twin_b = server(&path).with_lease_secret(b"shared".to_vec());
    let from_a = twin_a.evaluate(&request("u")).await.unwrap().lease.unwrap();
    assert!(
        matches!(twin_b.release(&from_a).await, Ok(false)),
        "its own store"
    );

    // A reload removes the concurrency limiter: its tokens name a stage that is gone.
    std::fs::write(
        &path,
        "plans: {free: {algorithm: token_bucket, rate: 1, capacity: 1}}\ndefault_plan: free\n\
         limiters: {request_rate: {}}\n",
    )
    .unwrap();
    s.reload(floodgate_service::service::Trigger::Admin)
        .expect("a valid config");
    match s.release(&token).await {
        Err(ReleaseTokenError::UnknownLimiter(stage)) => assert_eq!(stage.as_str(), "concurrency"),
        other => panic!("expected UnknownLimiter, got {other:?}"),
    }
}

#[tokio::test]
async fn check_config_and_serve_build_the_same_value_once() {
    // A bad value deep in a limiter is found when the config is built, with its path.
    let bad = "limiters: {concurrency: {capacity: 0}}\n";
    let config = Config::from_yaml_str(bad).expect("parses");
    let e = Server::new(config, None, None).unwrap_err();
    assert!(
        e.to_string().contains("limiters.concurrency.capacity"),
        "{e}"
    );
}

/// Nodes on one Redis share their tokens' secret through it, with no setting; when the store
/// loses it and a new node makes another, a node still on the old one takes the new one up at
/// the first token it cannot open, and keeps opening its own earlier tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_on_one_redis_share_the_secret_and_follow_a_new_one() {
    let redis = floodgate_harness::RedisServer::start();
    let text = format!(
        "store: {{url: \"{}\", timeout: 2s}}\n{ONE_IN_FLIGHT}",
        redis.url()
    );
    let path = config_file(&text);
    let node = || async {
        let s = server(&path);
        assert!(s.share_lease_secret().await.expect("the store answers"));
        s
    };
    let (a, b) = (node().await, node().await);
    let from_a = a.evaluate(&request("ann")).await.unwrap().lease.unwrap();
    assert!(b.release(&from_a).await.expect("b opens a's token"));
    let stored = redis.cli(&["GET", "floodgate:lease-secret"]).unwrap();
    assert_eq!(stored.trim().len(), 64, "32 bytes, hex: {stored}");
    // The store loses the secret; a new node makes another.
    let old_token = a.evaluate(&request("bea")).await.unwrap().lease.unwrap();
    redis.cli(&["DEL", "floodgate:lease-secret"]).unwrap();
    let c = node().await;
    assert_ne!(
        redis.cli(&["GET", "floodgate:lease-secret"]).unwrap(),
        stored
    );
    let from_c = c.evaluate(&request("cal")).await.unwrap().lease.unwrap();
    assert!(a.release(&from_c).await.expect("a takes up the new secret"));
    assert!(a
        .release(&old_token)
        .await
        .expect("and still opens its own"));
    // A memory store shares nothing.
    let alone = server(&config_file(ONE_IN_FLIGHT));
    assert!(!alone.share_lease_secret().await.unwrap());
}
