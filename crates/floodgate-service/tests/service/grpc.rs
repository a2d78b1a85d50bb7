//! Envoy's `ShouldRateLimit` over real gRPC: the service on an ephemeral port, a small real
//! backend (a fixed window per descriptor on the memory store, on a manual clock), and the
//! generated tonic client, a raw-bytes gRPC client and raw HTTP/2 requests.

use floodgate::store::LocalStore;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use floodgate::algorithm::fixed_window::{FixedWindow, FixedWindowState, Unit};
use floodgate::store::{Key, MemoryStore};
use floodgate::{ManualClock, Nanos, Op};
use floodgate_service::grpc::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use floodgate_service::grpc::proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code as ProtoCode, RateLimit,
};
use floodgate_service::grpc::{
    self, RateLimitDescriptor, RateLimitRequest, RateLimitResponse, RateLimitServiceClient,
    GrpcServing, QuotaBackend, RlsBackend,
};
use floodgate_service::rls::{Code, RlsLimit, RlsRequest, RlsResponse, RlsStatus, Undecided};
use prost::bytes::{Buf, BufMut};
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::{self, uri::PathAndQuery};
use tonic::codegen::Service;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::Channel;

const METHOD: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const LIMIT: u32 = 3;

/// At most [`LIMIT`] hits per minute for each descriptor of each domain.
struct TestBackend {
    limiter: FixedWindow,
    store: MemoryStore<Key, FixedWindowState, ManualClock>,
    calls: AtomicUsize,
}

impl TestBackend {
    /// The clock stands 15 s into a minute: windows reset 45 s later.
    fn new() -> (Arc<TestBackend>, ManualClock) {
        let clock = ManualClock::new(Nanos::from_secs(615));
        let store = MemoryStore::builder()
            .clock(clock.clone())
            .build_typed()
            .expect("valid store settings");
        let backend = TestBackend {
            limiter: FixedWindow::per_unit(u64::from(LIMIT), Unit::Minute).expect("valid limit"),
            store,
            calls: AtomicUsize::new(0),
        };
        (Arc::new(backend), clock)
    }
}

/// The listener's defaults: no TLS, no gate, always serving.
impl GrpcServing for TestBackend {}

/// No Rate Limit Quota Service: every stream refused.
impl QuotaBackend for TestBackend {}

impl RlsBackend for TestBackend {
    fn should_rate_limit(
        &self,
        request: RlsRequest,
    ) -> impl Future<Output = Result<RlsResponse, Undecided>> + Send {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let statuses: Vec<RlsStatus> = request
            .descriptors
            .iter()
            .map(|d| {
                let mut key = request.domain.clone();
                for (k, v) in &d.entries {
                    key.push_str(&format!("\0{k}={v}"));
                }
                let op = Op::Check {
                    cost: request.hits_for(d),
                };
                let decision = self
                    .store
                    .apply_now(&self.limiter, key.as_str(), op)
                    .expect("the fixed window supports checks");
                RlsStatus {
                    code: if decision.allowed {
                        Code::Ok
                    } else {
                        Code::OverLimit
                    },
                    current_limit: Some(RlsLimit {
                        name: Some("per_descriptor".into()),
                        requests_per_unit: LIMIT,
                        unit: Unit::Minute,
                    }),
                    limit_remaining: u32::try_from(decision.remaining).unwrap_or(u32::MAX),
                    duration_until_reset: Some(decision.reset_after),
                    quota_mode: false,
                }
            })
            .collect();
        let overall_code = if statuses.iter().any(|s| s.code == Code::OverLimit) {
            Code::OverLimit
        } else {
            Code::Ok
        };
        std::future::ready(Ok(RlsResponse {
            overall_code,
            statuses,
            shadow_over_limit: 0,
            dynamic_metadata: None,
            response_headers_to_add: Vec::new(),
        }))
    }
}

/// Serves `backend` on 127.0.0.1 (an ephemeral port) until the test's runtime ends.
async fn start(backend: Arc<TestBackend>) -> (RateLimitServiceClient<Channel>, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("a bound address");
    tokio::spawn(grpc::serve(
        backend,
        TcpListenerStream::new(listener),
        std::future::pending(),
    ));
    let client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    (client, addr)
}

fn descriptor(entries: &[(&str, &str)], hits_addend: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        is_negative_hits: false,
        entries: entries
            .iter()
            .map(|&(key, value)| Entry {
                key: key.into(),
                value: value.into(),
            })
            .collect(),
        hits_addend,
        limit: None,
    }
}

fn request(descriptors: Vec<RateLimitDescriptor>, hits_addend: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: "test".into(),
        descriptors,
        hits_addend,
    }
}

async fn call(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .expect("an answer")
        .into_inner()
}

/// `(code, limit_remaining)` of each status.
fn outcomes(response: &RateLimitResponse) -> Vec<(ProtoCode, u32)> {
    response
        .statuses
        .iter()
        .map(|s| (s.code(), s.limit_remaining))
        .collect()
}

#[tokio::test]
async fn allows_up_to_the_limit_then_refuses_until_the_window_resets() {
    let (backend, clock) = TestBackend::new();
    let (mut client, _) = start(backend).await;
    let one = || request(vec![descriptor(&[("remote_address", "10.0.0.1")], None)], 0);

    for remaining in [2, 1, 0] {
        let response = call(&mut client, one()).await;
        assert_eq!(response.overall_code(), ProtoCode::Ok);
        assert_eq!(outcomes(&response), [(ProtoCode::Ok, remaining)]);
        let status = &response.statuses[0];
        assert_eq!(
            status.current_limit,
            Some(RateLimit {
                name: "per_descriptor".into(),
                requests_per_unit: LIMIT,
                unit: 2, // MINUTE
            })
        );
        assert_eq!(
            status.duration_until_reset,
            Some(prost_types::Duration {
                seconds: 45,
                nanos: 0
            })
        );
    }
    let response = call(&mut client, one()).await;
    assert_eq!(response.overall_code(), ProtoCode::OverLimit);
    assert_eq!(outcomes(&response), [(ProtoCode::OverLimit, 0)]);

    // Another value is another counter.
    let other = request(vec![descriptor(&[("remote_address", "10.0.0.2")], None)], 0);
    let response = call(&mut client, other).await;
    assert_eq!(outcomes(&response), [(ProtoCode::Ok, 2)]);

    clock.advance(Duration::from_secs(45));
    let response = call(&mut client, one()).await;
    assert_eq!(response.overall_code(), ProtoCode::Ok);
    assert_eq!(outcomes(&response), [(ProtoCode::Ok, 2)]);
}

#[tokio::test]
async fn hits_addend_of_the_request_and_of_each_descriptor() {
    let (backend, _clock) = TestBackend::new();
    let (mut client, _) = start(backend).await;
    let d = |hits| descriptor(&[("user", "u1")], hits);

    // The request's hits_addend counts for every descriptor without its own.
    let response = call(&mut client, request(vec![d(None)], 2)).await;
    assert_eq!(outcomes(&response), [(ProtoCode::Ok, 1)]);
    // A descriptor's own hits_addend overrides the request's (2 would not fit).
    let response = call(&mut client, request(vec![d(Some(1))], 2)).await;
    assert_eq!(outcomes(&response), [(ProtoCode::Ok, 0)]);
    // A descriptor's hits_addend 0 probes without counting.
    let response = call(&mut client, request(vec![d(Some(0))], 2)).await;
    assert_eq!(outcomes(&response), [(ProtoCode::Ok, 0)]);
    // The request's hits_addend 0 means 1.
    let response = call(&mut client, request(vec![d(None)], 0)).await;
    assert_eq!(outcomes(&response), [(ProtoCode::OverLimit, 0)]);

    // A cost above the limit is refused and consumes nothing.
    let big = descriptor(&[("user", "u2")], Some(u64::from(LIMIT) + 1));
    let response = call(&mut client, request(vec![big], 0)).await;
    assert_eq!(outcomes(&response), [(ProtoCode::OverLimit, LIMIT)]);
}

#[tokio::test]
async fn one_status_per_descriptor_in_order() {
    let (backend, _clock) = TestBackend::new();
    let (mut client, _) = start(backend).await;
    let both = || {
        request(
            vec![
                descriptor(&[("path", "/a")], None),
                descriptor(&[("path", "/b")], Some(3)),
                // Entries are ordered: this is not the first descriptor.
                descriptor(&[("path", "/a"), ("method", "GET")], None),
            ],
            0,
        )
    };
    let response = call(&mut client, both()).await;
    assert_eq!(response.overall_code(), ProtoCode::Ok);
    assert_eq!(
        outcomes(&response),
        [(ProtoCode::Ok, 2), (ProtoCode::Ok, 0), (ProtoCode::Ok, 2)]
    );
    let response = call(&mut client, both()).await;
    assert_eq!(response.overall_code(), ProtoCode::OverLimit);
    assert_eq!(
        outcomes(&response),
        [
            (ProtoCode::Ok, 1),
            (ProtoCode::OverLimit, 0),
            (ProtoCode::Ok, 1)
        ]
    );
}

#[tokio::test]
async fn empty_values_are_allowed() {
    let (backend, _clock) = TestBackend::new();
    let (mut client, _) = start(backend).await;
    let response = call(
        &mut client,
        request(vec![descriptor(&[("header", "")], None)], 0),
    )
    .await;
    assert_eq!(outcomes(&response), [(ProtoCode::Ok, 2)]);
}

#[tokio::test]
async fn invalid_requests_get_invalid_argument() {
    let (backend, _clock) = TestBackend::new();
    let (mut client, _) = start(backend.clone()).await;
    let cases = [
        (
            RateLimitRequest {
                domain: String::new(),
                ..request(vec![descriptor(&[("k", "v")], None)], 0)
            },
            "domain: must not be empty",
        ),
        (
            request(vec![], 0),
            "descriptors: must hold at least one descriptor",
        ),
        (
            request(vec![descriptor(&[("k", "v"), ("", "v")], None)], 0),
            "descriptors[0].entries[1].key: must not be empty",
        ),
    ];
    for (bad, message) in cases {
        let status = client.should_rate_limit(bad).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{message}");
        assert_eq!(status.message(), message);
    }
    assert_eq!(
        backend.calls.load(Ordering::SeqCst),
        0,
        "the backend is not called"
    );
    // The server keeps serving.
    let response = call(
        &mut client,
        request(vec![descriptor(&[("k", "v")], None)], 0),
    )
    .await;
    assert_eq!(response.overall_code(), ProtoCode::Ok);
}

/// Sends and receives message bytes as they are, so that anything can be sent.
#[derive(Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

/// One `ShouldRateLimit` call with `message` as the request message's bytes (tonic frames them).
async fn call_raw(addr: SocketAddr, message: Vec<u8>) -> Result<Vec<u8>, tonic::Status> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("a valid URI")
        .connect()
        .await
        .expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    grpc.unary(
        tonic::Request::new(message),
        PathAndQuery::from_static(METHOD),
        RawCodec,
    )
    .await
    .map(tonic::Response::into_inner)
}

#[tokio::test]
async fn bytes_that_are_not_a_request_get_invalid_argument() {
    let (backend, _clock) = TestBackend::new();
    let (_, addr) = start(backend.clone()).await;
    let cases: [&[u8]; 6] = [
        // Field 31, wire type 7: no such wire type.
        &[0xff, 0xff, 0xff, 0xff],
        // domain (1) says 5 bytes, 1 follows.
        &[0x0a, 0x05, b'a'],
        // domain (1) is not UTF-8.
        &[0x0a, 0x02, 0xff, 0xfe],
        // descriptors (2) holds a truncated entry.
        &[0x12, 0x03, 0x0a, 0x05, b'k'],
        // hits_addend (3) is a varint that never ends.
        &[0x18, 0x80, 0x80, 0x80],
        // domain (1) sent with the varint wire type.
        &[0x08, 0x01],
    ];
    for bytes in cases {
        let status = call_raw(addr, bytes.to_vec()).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{bytes:x?}");
        assert!(
            status.message().starts_with("malformed protobuf message"),
            "{bytes:x?}: {}",
            status.message()
        );
    }
    // An empty message decodes (every field at its default) and is refused for its domain.
    let status = call_raw(addr, Vec::new()).await.unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (tonic::Code::InvalidArgument, "domain: must not be empty")
    );
    assert_eq!(backend.calls.load(Ordering::SeqCst), 0);

    // Unknown fields (here a descriptor field numbered 15) are skipped.
    let mut with_unknown = descriptor(&[("k", "v")], None).encode_to_vec();
    with_unknown.extend([0x78, 9]); // field 15, varint 9
    let message = |descriptor: Vec<u8>| {
        let mut message = b"\x0a\x01d".to_vec();
        message.push(0x12);
        message.push(u8::try_from(descriptor.len()).expect("short"));
        message.extend(descriptor);
        message
    };
    let answer = call_raw(addr, message(with_unknown))
        .await
        .expect("an answer");
    let response = RateLimitResponse::decode(&answer[..]).expect("a response");
    assert_eq!(outcomes(&response), [(ProtoCode::Ok, 2)]);

    // Envoy's descriptor `limit` override (2) is read: one without a unit is refused.
    let mut with_override = descriptor(&[("k", "v")], None).encode_to_vec();
    with_override.extend([0x12, 2, 0x08, 9]); // limit { requests_per_unit: 9 }
    let status = call_raw(addr, message(with_override)).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().starts_with("descriptors[0].limit.unit"),
        "{}",
        status.message()
    );
}

/// Sends `body` as it is (gRPC framing included) over HTTP/2 with `method`, `path` and
/// `content_type`, and returns the HTTP status and the gRPC status of the answer (a
/// trailers-only answer carries it in its headers).
async fn send_raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    body: String,
) -> (http::StatusCode, Option<tonic::Status>) {
    let mut channel = Channel::from_shared(format!("http://{addr}"))
        .expect("a valid URI")
        .connect()
        .await
        .expect("connect");
    let request = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("content-type", content_type)
        .header("te", "trailers")
        .body(tonic::body::Body::new(body))
        .expect("a request");
    std::future::poll_fn(|cx| channel.poll_ready(cx))
        .await
        .expect("ready");
    let response = channel.call(request).await.expect("an HTTP response");
    (
        response.status(),
        tonic::Status::from_header_map(response.headers()),
    )
}

/// POSTs `body` as it is to the method, as a gRPC call, and returns the gRPC status of the
/// answer when it is in the headers (a refusal).
async fn post_raw(addr: SocketAddr, body: String) -> Option<tonic::Status> {
    let (http_status, status) = send_raw(addr, "POST", METHOD, "application/grpc", body).await;
    assert_eq!(http_status, http::StatusCode::OK);
    status
}

#[tokio::test]
async fn framing_errors_get_grpc_statuses_and_the_server_keeps_serving() {
    let (backend, _clock) = TestBackend::new();
    let (mut client, addr) = start(backend.clone()).await;
    let cases = [
        // The frame announces 100 bytes; the body ends after 2.
        (
            "\0\0\0\0\x64ab",
            tonic::Code::Internal,
            "the request body ends inside the message: 100 bytes announced, 2 received",
        ),
        // No frame at all.
        (
            "",
            tonic::Code::Internal,
            "the request body holds no message",
        ),
        (
            "\0\0\0",
            tonic::Code::Internal,
            "the request body ends inside the message prefix (3 of 5 bytes)",
        ),
        // Two messages in a unary call.
        (
            "\0\0\0\0\0\0\0\0\0\0",
            tonic::Code::Internal,
            "a unary call carries exactly one message; the body holds more",
        ),
        // A message above the cap is refused from its prefix.
        (
            "\0\0\x01\0\x01",
            tonic::Code::ResourceExhausted,
            "the request message is 65537 bytes, above the limit of 65536",
        ),
        // Compressed, which Envoy never sends.
        (
            "\x01\0\0\0\x01a",
            tonic::Code::Unimplemented,
            "compressed messages are not supported; send them uncompressed (identity)",
        ),
    ];
    for (body, code, message) in cases {
        let status = post_raw(addr, body.to_string()).await.expect("a status");
        assert_eq!(
            (status.code(), status.message()),
            (code, message),
            "{body:?}"
        );
    }
    assert_eq!(backend.calls.load(Ordering::SeqCst), 0);

    let response = call(
        &mut client,
        request(vec![descriptor(&[("k", "v")], None)], 0),
    )
    .await;
    assert_eq!(response.overall_code(), ProtoCode::Ok);
}

#[tokio::test]
async fn other_methods_and_other_protocols_are_refused() {
    let (backend, _clock) = TestBackend::new();
    let (_, addr) = start(backend.clone()).await;
    let body = || String::from_utf8(bench_body()).expect("ASCII");
    let path = "/envoy.service.ratelimit.v3.RateLimitService/Other";
    let (http_status, status) = send_raw(addr, "POST", path, "application/grpc", body()).await;
    let status = status.expect("a gRPC status");
    assert_eq!(http_status, http::StatusCode::OK);
    assert_eq!(status.code(), tonic::Code::Unimplemented);
    assert!(status
        .message()
        .starts_with("unknown method /envoy.service.ratelimit.v3.RateLimitService/Other"));

    let (http_status, _) = send_raw(addr, "GET", METHOD, "application/grpc", String::new()).await;
    assert_eq!(http_status, http::StatusCode::METHOD_NOT_ALLOWED);
    let (http_status, _) = send_raw(addr, "POST", METHOD, "application/json", body()).await;
    assert_eq!(http_status, http::StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // The `+proto` form is gRPC too.
    let (http_status, status) =
        send_raw(addr, "POST", METHOD, "application/grpc+proto", body()).await;
    assert_eq!(
        (http_status, status.map(|s| s.code())),
        (http::StatusCode::OK, None)
    );
    assert_eq!(backend.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn shutdown_answers_calls_in_flight_then_returns() {
    let (backend, _clock) = TestBackend::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("a bound address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(grpc::serve(
        backend,
        TcpListenerStream::new(listener),
        async move {
            let _ = stopped.await;
        },
    ));
    let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    let first = call(
        &mut client,
        request(vec![descriptor(&[("k", "v")], None)], 0),
    )
    .await;
    assert_eq!(first.overall_code(), ProtoCode::Ok);
    stop.send(()).expect("the server is running");
    tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("serve returns once its connections are done")
        .expect("serve does not panic");
    assert!(
        RateLimitServiceClient::connect(format!("http://{addr}"))
            .await
            .is_err()
            || client
                .should_rate_limit(request(vec![descriptor(&[("k", "v")], None)], 0))
                .await
                .is_err(),
        "no more calls are answered"
    );
}

// The benchmark body: see the `floodgate_service::grpc` module documentation.

fn bench_body_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bench/rls_body.bin")
}

/// One gRPC-framed request: 0 (not compressed), the message's length (big-endian u32), the
/// message: domain "bench", one descriptor [("key", "value")], hits_addend 1.
fn bench_body() -> Vec<u8> {
    let message = RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![descriptor(&[("key", "value")], None)],
        hits_addend: 1,
    }
    .encode_to_vec();
    let length = u32::try_from(message.len()).expect("a short message");
    let mut framed = vec![0];
    framed.extend(length.to_be_bytes());
    framed.extend(message);
    framed
}

/// Writes `bench/rls_body.bin`:
/// `cargo test -p floodgate-service --test service -- --ignored write_bench_body`.
#[test]
#[ignore = "writes bench/rls_body.bin; run on purpose"]
fn write_bench_body() {
    std::fs::write(bench_body_path(), bench_body()).expect("bench/rls_body.bin is written");
}

#[test]
fn bench_body_is_current() {
    let on_disk = std::fs::read(bench_body_path()).expect("bench/rls_body.bin exists");
    assert_eq!(
        on_disk,
        bench_body(),
        "regenerate: cargo test -p floodgate-service --test service -- --ignored write_bench_body"
    );
}

#[tokio::test]
async fn bench_body_gets_an_answer() {
    let (backend, _clock) = TestBackend::new();
    let (_, addr) = start(backend).await;
    let body = bench_body();
    // The checked-in bytes, as h2load sends them (all ASCII, so a String body carries them).
    let status = post_raw(addr, String::from_utf8(body.clone()).expect("ASCII")).await;
    assert!(status.is_none(), "no error status: {status:?}");
    let answer = call_raw(addr, body[5..].to_vec()).await.expect("an answer");
    let response = RateLimitResponse::decode(&answer[..]).expect("a response");
    assert_eq!(response.overall_code(), ProtoCode::Ok);
    assert_eq!(outcomes(&response), [(ProtoCode::Ok, 1)], "the second hit");
}
