//! The layer under a tonic client: a `Channel` wrapped with `never_replay` (gRPC bodies are
//! streams) against an HTTP/2 server on loopback that refuses with a trailers-only gRPC status
//! and a `Retry-After`. The refusal is recognised from `grpc-status`, and the next call fails
//! fast instead of being sent.

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floodgate::{ManualClock, Nanos};
use floodgate_client::{LocalRefusal, ManualTimer, PoliteLayer};
use http::{Request, Response};
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tonic::transport::Endpoint;
use tonic::Code;
use tonic_prost::ProstCodec;
use tower::Layer;

/// Answers every call with `RESOURCE_EXHAUSTED` in a trailers-only response, counting calls.
async fn refusing_grpc_server(calls: Arc<AtomicU64>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let calls = calls.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |_req: Request<hyper::body::Incoming>| {
                        calls.fetch_add(1, Ordering::Relaxed);
                        async {
                            let response = Response::builder()
                                .header("content-type", "application/grpc")
                                .header("grpc-status", "8")
                                .header("grpc-message", "slow down")
                                .header("retry-after", "30")
                                .body(Full::new(Bytes::new()))
                                .unwrap();
                            Ok::<_, Infallible>(response)
                        }
                    });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_tonic_channel_is_paced_by_grpc_refusals() {
    let calls = Arc::new(AtomicU64::new(0));
    let addr = refusing_grpc_server(calls.clone()).await;
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let clock = ManualClock::new(Nanos::from_secs(1_700_000_000));
    let layer = PoliteLayer::builder()
        .timer(Arc::new(ManualTimer::new(clock.clone())))
        .max_wait(Duration::from_secs(1))
        .build()
        .unwrap();
    let state = layer.state();
    let mut grpc = tonic::client::Grpc::new(layer.never_replay().layer(channel));
    let path = http::uri::PathAndQuery::from_static("/test.Greeter/Hello");

    grpc.ready().await.unwrap();
    let status = grpc
        .unary::<String, String, _>(
            tonic::Request::new("a".into()),
            path.clone(),
            ProstCodec::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted);
    let totals = state.totals();
    assert_eq!((totals.sent, totals.throttled, totals.retries), (1, 1, 0));

    // Retry-After: 30 is longer than max_wait: the next call is refused locally, unsent.
    grpc.ready().await.unwrap();
    let status = grpc
        .unary::<String, String, _>(tonic::Request::new("b".into()), path, ProstCodec::default())
        .await
        .unwrap_err();
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    let source = std::error::Error::source(&status)
        .and_then(|e| e.downcast_ref::<floodgate_client::PoliteError>())
        .and_then(|e| e.refusal().cloned());
    assert!(
        matches!(source, Some(LocalRefusal::WouldWait { .. })),
        "{status:?}"
    );
    assert_eq!(
        state.snapshot()[0].blocked_for_seconds.map(|s| s.round()),
        Some(30.0)
    );
}
