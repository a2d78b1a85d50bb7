//! The middleware in front of a plain hyper service (no framework), over real HTTP/1.1 and
//! HTTP/2 connections on 127.0.0.1 with hyper's own client: refusals with their headers, and a
//! concurrency lease held while a response body streams, given back when it ends.
//!
//! The limiters run on a manual clock that never moves, so real sockets cannot make a timing
//! difference: the bucket below never refills.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::{never_refilling_pipeline, one_in_flight_pipeline, ManualStore};
use floodgate::pipeline::Pipeline;
use floodgate_tower::{shown_user, CredentialKey, FloodgateLayer};
use http::{Request, Response};
use http_body_util::channel::{Channel, Sender};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tower::Layer;

/// The protocol a test speaks.
#[derive(Clone, Copy, Debug)]
enum Protocol {
    Http1,
    Http2,
}

/// Where the handler leaves the sending half of each `/stream` response body.
type Streams = Arc<Mutex<Vec<Sender<Bytes, Infallible>>>>;

/// `/stream` answers 200 at once with a body that stays open until the test sends on it and
/// drops the sender; anything else answers "ok".
async fn handler(
    streams: Streams,
    request: Request<Incoming>,
) -> Result<Response<Channel<Bytes, Infallible>>, Infallible> {
    let (sender, body) = Channel::new(4);
    if request.uri().path() == "/stream" {
        streams.lock().expect("not poisoned").push(sender);
    } else {
        let mut sender = sender;
        // The channel has room: this does not wait.
        let _ = sender.send_data(Bytes::from_static(b"ok")).await;
    }
    Ok(Response::new(body))
}

/// Serves the limited handler on an ephemeral port with `protocol`, each connection on its
/// own task.
async fn serve(pipeline: Pipeline<ManualStore>, protocol: Protocol) -> (SocketAddr, Streams) {
    let streams = Streams::default();
    let handler_streams = streams.clone();
    let service = FloodgateLayer::new(Arc::new(pipeline)).layer(tower::service_fn(
        move |request: Request<Incoming>| handler(handler_streams.clone(), request),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("a bound address");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let io = TokioIo::new(stream);
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let _ = match protocol {
                    Protocol::Http1 => {
                        hyper::server::conn::http1::Builder::new()
                            .serve_connection(io, service)
                            .await
                    }
                    Protocol::Http2 => {
                        hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                            .serve_connection(io, service)
                            .await
                    }
                };
            });
        }
    });
    (addr, streams)
}

/// One GET of `path` by API key `key` on a new connection; the response, body unread.
async fn get(addr: SocketAddr, protocol: Protocol, path: &str, key: &str) -> Response<Incoming> {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let io = TokioIo::new(stream);
    let request = Request::get(format!("http://{addr}{path}"))
        .header("x-api-key", key)
        .body(Empty::<Bytes>::new())
        .expect("a request");
    match protocol {
        Protocol::Http1 => {
            let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
                .await
                .expect("an HTTP/1.1 handshake");
            tokio::spawn(connection);
            sender.send_request(request).await.expect("a response")
        }
        Protocol::Http2 => {
            let (mut sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .expect("an HTTP/2 handshake");
            tokio::spawn(connection);
            sender.send_request(request).await.expect("a response")
        }
    }
}

async fn text(response: Response<Incoming>) -> String {
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("the whole body")
        .to_bytes();
    String::from_utf8_lossy(&bytes).into_owned()
}

async fn refuses_over_the_rate_with_headers(protocol: Protocol) {
    let pipeline = never_refilling_pipeline();
    let (addr, _) = serve(pipeline, protocol).await;
    for remaining in ["1", "0"] {
        let ok = get(addr, protocol, "/things", "k1").await;
        assert_eq!(ok.status(), 200);
        assert_eq!(ok.headers()["ratelimit-policy"], "\"requests\";q=2;w=200");
        assert!(
            ok.headers()["ratelimit"]
                .to_str()
                .expect("ASCII")
                .contains(&format!("r={remaining}")),
            "{:?}",
            ok.headers()
        );
        assert_eq!(text(ok).await, "ok");
    }
    let refused = get(addr, protocol, "/things", "k1").await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "100");
    assert_eq!(refused.headers()["content-type"], "application/json");
    let body = text(refused).await;
    assert!(body.contains("\"type\":\"rate_limited\""), "{body}");
    assert!(
        body.contains("plan free allows 0.01 requests per second"),
        "{body}"
    );
    // Another key has its own bucket.
    assert_eq!(get(addr, protocol, "/things", "k2").await.status(), 200);
}

async fn a_lease_is_held_while_the_body_streams(protocol: Protocol) {
    let pipeline = one_in_flight_pipeline();
    let (addr, streams) = serve(pipeline, protocol).await;

    let streaming = get(addr, protocol, "/stream", "k").await;
    assert_eq!(streaming.status(), 200);
    // The handler has answered; its body is still open, so the request is still in flight.
    let refused = get(addr, protocol, "/things", "k").await;
    assert_eq!(refused.status(), 429);
    let body = text(refused).await;
    // The layer's default MAC key is this process's: the user shows as its fingerprint.
    let user = CredentialKey::process().user_key("k");
    let shown = format!(
        "user {} already has 1 requests in flight",
        shown_user(&user)
    );
    assert!(body.contains(&shown), "{body}");
    assert!(!body.contains(&user), "{body}");
    assert_eq!(get(addr, protocol, "/things", "other").await.status(), 200);

    let mut sender = streams
        .lock()
        .expect("not poisoned")
        .pop()
        .expect("the stream's sender");
    sender
        .send_data(Bytes::from_static(b"streamed"))
        .await
        .expect("the body is open");
    drop(sender);
    // The body's end is read only after the server gave the lease back.
    assert_eq!(text(streaming).await, "streamed");
    let again = get(addr, protocol, "/things", "k").await;
    assert_eq!(again.status(), 200);
    assert_eq!(text(again).await, "ok");
}

#[tokio::test]
async fn http1_refuses_over_the_rate_with_headers() {
    refuses_over_the_rate_with_headers(Protocol::Http1).await;
}

#[tokio::test]
async fn http2_refuses_over_the_rate_with_headers() {
    refuses_over_the_rate_with_headers(Protocol::Http2).await;
}

#[tokio::test]
async fn http1_holds_a_lease_while_the_body_streams() {
    a_lease_is_held_while_the_body_streams(Protocol::Http1).await;
}

#[tokio::test]
async fn http2_holds_a_lease_while_the_body_streams() {
    a_lease_is_held_while_the_body_streams(Protocol::Http2).await;
}
