//! The HTTP API's connection handling, in process on tokio's paused clock (time moves only when
//! every task waits): a client that never finishes its request head is cut off after
//! [`HEADER_READ_TIMEOUT`], and the API speaks HTTP/1.1 and HTTP/2 on the same port.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floodgate_server::config::Config;
use floodgate_server::http::{self, HEADER_READ_TIMEOUT};
use floodgate_server::service::Server;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::wrappers::TcpListenerStream;

/// Serves the built-in config's HTTP API on an ephemeral port until the test ends.
async fn start() -> std::net::SocketAddr {
    let server = Arc::new(Server::new(Config::builtin(), None, None).expect("the built-in config"));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("a bound address");
    tokio::spawn(http::serve(
        server,
        TcpListenerStream::new(listener),
        std::future::pending(),
    ));
    addr
}

#[tokio::test(start_paused = true)]
async fn a_request_head_that_never_ends_is_cut_off() {
    let addr = start().await;
    let mut slow = TcpStream::connect(addr).await.expect("connect");
    slow.write_all(b"GET /livez HTTP/1.1\r\nHost: floodgate\r\n")
        .await
        .expect("a partial head");
    let started = tokio::time::Instant::now();
    let mut answer = Vec::new();
    // The server closes the connection (with or without a 408) once the timeout passes; the
    // outer timeout only keeps a broken build from hanging the test.
    tokio::time::timeout(HEADER_READ_TIMEOUT * 4, slow.read_to_end(&mut answer))
        .await
        .expect("the server closes the connection")
        .expect("a clean close");
    let waited = started.elapsed();
    assert!(
        waited >= HEADER_READ_TIMEOUT - Duration::from_secs(1),
        "cut off after {waited:?}"
    );
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );

    // A complete request on a new connection is answered.
    let mut prompt = TcpStream::connect(addr).await.expect("connect");
    prompt
        .write_all(b"GET /livez HTTP/1.1\r\nHost: floodgate\r\nConnection: close\r\n\r\n")
        .await
        .expect("a request");
    let mut answer = Vec::new();
    prompt.read_to_end(&mut answer).await.expect("an answer");
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
}

#[tokio::test(start_paused = true)]
async fn the_api_speaks_http2_with_prior_knowledge_too() {
    let addr = start().await;
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("an HTTP/2 handshake");
    tokio::spawn(connection);
    let request = ::http::Request::get(format!("http://{addr}/livez"))
        .body(Empty::<Bytes>::new())
        .expect("a request");
    let response = sender.send_request(request).await.expect("an answer");
    assert_eq!(response.status(), 200);
    let body = response
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    assert_eq!(&body[..], b"ok");
}
