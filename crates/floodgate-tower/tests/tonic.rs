//! The middleware as a tonic server's layer (`Server::builder().layer(..)`), called by a tonic
//! client over a real HTTP/2 connection on 127.0.0.1: allowed calls reach the service, and a
//! refusal arrives as a gRPC status with its message and rate-limit metadata.
//!
//! The limiters run on a manual clock that never moves, so real sockets cannot make a timing
//! difference: the bucket below never refills.

mod common;

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use common::{never_refilling_pipeline, one_in_flight_pipeline, ManualStore};
use floodgate::pipeline::Pipeline;
use floodgate_tower::FloodgateLayer;
use http::uri::PathAndQuery;
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Status};
use tonic_prost::ProstCodec;

/// A gRPC service with one unary method, `/test.Greeter/Hello`: a string in, a string out
/// (protobuf's `StringValue` encoding), counting its calls.
#[derive(Clone, Default)]
struct Greeter {
    calls: Arc<AtomicU64>,
}

impl NamedService for Greeter {
    const NAME: &'static str = "test.Greeter";
}

const HELLO: &str = "/test.Greeter/Hello";

/// The method's handler.
struct Hello;

impl UnaryService<String> for Hello {
    type Response = String;
    type Future = Ready<Result<tonic::Response<String>, Status>>;

    fn call(&mut self, request: tonic::Request<String>) -> Self::Future {
        ready(Ok(tonic::Response::new(format!(
            "hello {}",
            request.into_inner()
        ))))
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for Greeter {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let calls = self.calls.clone();
        Box::pin(async move {
            if request.uri().path() != HELLO {
                return Ok(Status::unimplemented("no such method").into_http());
            }
            calls.fetch_add(1, Ordering::Relaxed);
            let mut grpc = Grpc::new(ProstCodec::<String, String>::default());
            Ok(grpc.unary(Hello, request).await)
        })
    }
}

/// Serves `greeter` behind the middleware on an ephemeral port; a client connected to it.
async fn serve(pipeline: Pipeline<ManualStore>, greeter: Greeter) -> Channel {
    let addr = serve_layer(FloodgateLayer::new(Arc::new(pipeline)), greeter).await;
    connect(addr, [127, 0, 0, 1]).await
}

/// Serves `greeter` behind `layer` on an ephemeral port of 127.0.0.1; its address.
async fn serve_layer<S>(layer: FloodgateLayer<S>, greeter: Greeter) -> std::net::SocketAddr
where
    S: floodgate::store::Store<str, floodgate::algorithm::spec::AnyAlgorithm> + 'static,
{
    let incoming = TcpIncoming::bind("127.0.0.1:0".parse().expect("an address")).expect("bind");
    let addr = incoming.local_addr().expect("a bound address");
    tokio::spawn(
        Server::builder()
            .layer(layer)
            .add_service(greeter)
            .serve_with_incoming(incoming),
    );
    addr
}

/// A client of `addr` connecting from the loopback address `from`.
async fn connect(addr: std::net::SocketAddr, from: [u8; 4]) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .expect("a valid URI")
        .local_address(Some(from.into()))
        .connect()
        .await
        .expect("connect")
}

/// Without a key, callers are told apart by the address tonic's server records for each
/// connection (`TcpConnectInfo`, read with the `tonic` feature), with nothing to set up.
#[cfg(feature = "tonic")]
#[tokio::test]
async fn callers_without_a_key_are_told_apart_by_their_address() {
    let layer = FloodgateLayer::per_api_key(0.001, 1).expect("a layer");
    let addr = serve_layer(layer, Greeter::default()).await;
    let one = connect(addr, [127, 0, 0, 1]).await;
    let two = connect(addr, [127, 0, 0, 2]).await;
    let anonymous = |channel: Channel| async move {
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.expect("ready");
        grpc.unary(
            tonic::Request::new("anon".to_string()),
            PathAndQuery::from_static(HELLO),
            ProstCodec::<String, String>::default(),
        )
        .await
    };
    assert!(anonymous(one.clone()).await.is_ok());
    let refused = anonymous(one).await.expect_err("refused");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(anonymous(two).await.is_ok());
}

/// One call of `Hello` with API key `key`.
async fn hello(channel: &Channel, key: &str, name: &str) -> Result<String, Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.expect("ready");
    let mut request = tonic::Request::new(name.to_string());
    request
        .metadata_mut()
        .insert("x-api-key", key.parse().expect("ASCII metadata"));
    grpc.unary(
        request,
        PathAndQuery::from_static(HELLO),
        ProstCodec::<String, String>::default(),
    )
    .await
    .map(tonic::Response::into_inner)
}

#[tokio::test]
async fn refusals_are_grpc_statuses_with_rate_limit_metadata() {
    let pipeline = never_refilling_pipeline();
    let greeter = Greeter::default();
    let channel = serve(pipeline, greeter.clone()).await;

    for name in ["ann", "bo"] {
        assert_eq!(
            hello(&channel, "k1", name).await.expect("allowed"),
            format!("hello {name}")
        );
    }
    let refused = hello(&channel, "k1", "cy").await.expect_err("refused");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused
            .message()
            .starts_with("plan free allows 0.01 requests per second"),
        "{refused:?}"
    );
    let metadata = refused.metadata();
    assert_eq!(
        metadata.get("retry-after").map(|v| v.to_str().ok()),
        Some(Some("100"))
    );
    assert_eq!(
        metadata.get("ratelimit-policy").map(|v| v.to_str().ok()),
        Some(Some("\"requests\";q=2;w=200"))
    );
    assert_eq!(
        greeter.calls.load(Ordering::Relaxed),
        2,
        "the refusal never reached it"
    );
    // Another key has its own bucket, on the same connection.
    assert_eq!(
        hello(&channel, "k2", "di").await.expect("allowed"),
        "hello di"
    );
}

#[tokio::test]
async fn leases_are_given_back_after_each_call() {
    let pipeline = one_in_flight_pipeline();
    let greeter = Greeter::default();
    let channel = serve(pipeline, greeter.clone()).await;
    // One call in flight at a time per user: sequential calls never collide, because each
    // call's place is given back when its response (message and trailers) has been sent.
    for i in 0..20 {
        let name = format!("call {i}");
        assert_eq!(
            hello(&channel, "k", &name).await.expect("allowed"),
            format!("hello {name}")
        );
    }
    assert_eq!(greeter.calls.load(Ordering::Relaxed), 20);
}
