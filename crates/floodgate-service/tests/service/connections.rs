//! The HTTP API's connection handling, in process on tokio's paused clock (time moves only when
//! every task waits): a client that never finishes its request head is cut off after
//! [`HEADER_READ_TIMEOUT`], and the API speaks HTTP/1.1 and HTTP/2 on the same port.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use floodgate_service::config::Config;
use floodgate_service::http::{self, HEADER_READ_TIMEOUT};
use floodgate_service::service::Server;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::wrappers::TcpListenerStream;

/// Serves the built-in config's HTTP API on an ephemeral port until the test ends.
async fn start() -> std::net::SocketAddr {
    start_with(Config::builtin()).await.0
}

/// Serves `config`'s HTTP API on an ephemeral port until the test ends.
async fn start_with(config: Config) -> (std::net::SocketAddr, Arc<Server>) {
    let server = Arc::new(Server::new(config, None, None).expect("a valid config"));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("a bound address");
    tokio::spawn(http::serve(
        server.clone(),
        TcpListenerStream::new(listener),
        std::future::pending(),
    ));
    (addr, server)
}

/// Sends `GET /livez` with `Connection: close` and returns the answer's bytes.
async fn livez(addr: std::net::SocketAddr) -> Vec<u8> {
    let mut prompt = TcpStream::connect(addr).await.expect("connect");
    prompt
        .write_all(b"GET /livez HTTP/1.1\r\nHost: floodgate\r\nConnection: close\r\n\r\n")
        .await
        .expect("a request");
    let mut answer = Vec::new();
    prompt.read_to_end(&mut answer).await.expect("an answer");
    answer
}

/// Opens a connection that sends half a request head and then nothing.
async fn half_open(addr: std::net::SocketAddr) -> TcpStream {
    let mut slow = TcpStream::connect(addr).await.expect("connect");
    slow.write_all(b"GET /livez HTTP/1.1\r\nHost: floodgate\r\n")
        .await
        .expect("a partial head");
    slow
}

#[tokio::test(start_paused = true)]
async fn a_thousand_half_open_connections_leave_a_prompt_client_its_answer() {
    let (addr, server) = start_with(Config::builtin()).await;
    let mut slow = Vec::new();
    for _ in 0..1000 {
        slow.push(half_open(addr).await);
    }
    let answer = livez(addr).await;
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    // The thousand are cut off after the header read timeout, and their places come back.
    tokio::time::sleep(HEADER_READ_TIMEOUT + Duration::from_secs(1)).await;
    for mut s in slow {
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest).await;
    }
    tokio::task::yield_now().await;
    assert_eq!(server.gate().open(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_sends_nothing_is_closed_and_gives_its_place_back() {
    let (addr, server) = start_with(Config::builtin()).await;
    let mut silent = TcpStream::connect(addr).await.expect("connect");
    let mut rest = Vec::new();
    tokio::time::timeout(HEADER_READ_TIMEOUT * 4, silent.read_to_end(&mut rest))
        .await
        .expect("the server closes a silent connection")
        .expect("a clean close");
    assert!(rest.is_empty());
    tokio::task::yield_now().await;
    assert_eq!(server.gate().open(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_read_timeout() {
    let addr = start().await;
    let mut idle = TcpStream::connect(addr).await.expect("connect");
    idle.write_all(b"GET /livez HTTP/1.1\r\nHost: floodgate\r\n\r\n")
        .await
        .expect("a request");
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).await.expect("an answer");
    assert_eq!(&first, b"HTTP/1.1 200");
    // Kept alive, then idle: the server closes it (the outer timeout only keeps a broken build
    // from hanging the test).
    let mut rest = Vec::new();
    tokio::time::timeout(HEADER_READ_TIMEOUT * 4, idle.read_to_end(&mut rest))
        .await
        .expect("the server closes an idle connection")
        .expect("a clean close");
}

#[tokio::test(start_paused = true)]
async fn connections_beyond_the_limit_wait_for_a_place() {
    let mut config = Config::builtin();
    config.connections.max_connections = 2;
    let (addr, server) = start_with(config).await;
    let first = half_open(addr).await;
    let _second = half_open(addr).await;
    // The kernel completes the third's handshake, but the server does not take it up yet.
    let third = tokio::spawn(livez(addr));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!third.is_finished(), "a third connection waits");
    assert_eq!(server.gate().open(), 2);
    drop(first);
    let answer = third.await.expect("the third is served");
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
}

#[tokio::test(start_paused = true)]
async fn a_request_head_over_the_limit_is_refused() {
    let mut config = Config::builtin();
    config.connections.max_header_bytes = 8 * 1024;
    let (addr, _server) = start_with(config).await;
    let mut big = TcpStream::connect(addr).await.expect("connect");
    // Between the configured 8 KiB and the default 16 KiB: refused only if the limit is read
    // from the config.
    let filler = "a".repeat(12 * 1024);
    let head = format!("GET /livez HTTP/1.1\r\nHost: floodgate\r\nX-Filler: {filler}\r\n\r\n");
    // The server may stop reading (and close) before the whole head is written.
    let _ = big.write_all(head.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = big.read_to_end(&mut answer).await;
    assert!(
        answer.starts_with(b"HTTP/1.1 431"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_head_that_never_ends_is_cut_off() {
    let addr = start().await;
    let mut slow = half_open(addr).await;
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
    let answer = livez(addr).await;
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

#[tokio::test(start_paused = true)]
async fn a_client_that_never_reads_is_not_buffered_without_bound() {
    let addr = start().await;
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (_reader, mut writer) = stream.into_split();
    // Two million pipelined requests (80 MB), answers never read: the server answers into the
    // socket until the kernel's buffers are full (a few MB each way on loopback), then stops
    // reading requests, so the client cannot write them all.
    let request = b"GET /livez HTTP/1.1\r\nHost: floodgate\r\n\r\n";
    let mut written = 0usize;
    let total = 2_000_000 * request.len();
    let all = tokio::time::timeout(Duration::from_secs(5), async {
        while written < total {
            writer.write_all(request).await.expect("a write");
            written += request.len();
        }
    })
    .await;
    assert!(all.is_err(), "the server read everything: {written} bytes");
    assert!(written < total / 2, "{written} of {total} bytes taken");
}
