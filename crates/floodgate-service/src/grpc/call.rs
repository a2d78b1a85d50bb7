//! gRPC over hyper's HTTP/2 server, for the methods this service has: `ShouldRateLimit`, the
//! Rate Limit Quota Service's `StreamRateLimitQuotas` (`quota.rs`), and the health checking
//! protocol's `Check` and `Watch`.
//!
//! A call is a `POST` to the method's path with `content-type: application/grpc`; its body is
//! one length-prefixed message (1 byte compressed flag, 4 bytes big-endian length, the
//! protobuf bytes). The answer is HTTP 200 with the response message in one DATA frame (a
//! stream of them, for `Watch`) and `grpc-status: 0` in the trailers, or, for a refusal, a
//! trailers-only answer: the `grpc-status` and `grpc-message` in the headers and no body
//! (gRPC's HTTP/2 protocol).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body::{Body, Frame};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use prost::Message;
use tokio_stream::Stream;

use super::{
    Backend, HealthCheckRequest, HealthCheckResponse, RateLimitRequest, RateLimitResponse,
    ServingStatus, HEALTH_SERVICE, MAX_REQUEST_BYTES,
};
use crate::connections::{KEEP_ALIVE_INTERVAL, KEEP_ALIVE_TIMEOUT};
use crate::rls::{RlsRequest, Undecided};

mod quota;

/// The rate limit method.
const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/// The health checking protocol's methods.
const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";
const HEALTH_WATCH: &str = "/grpc.health.v1.Health/Watch";

/// How often a health watch looks at the status again.
const WATCH_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The gRPC message prefix: the compressed flag and the length.
const PREFIX: usize = 5;

/// Serves `ShouldRateLimit` on every connection `connections` yields, each on its own task,
/// until `shutdown` completes; then stops taking connections, tells the open ones to go away
/// (HTTP/2 `GOAWAY`), and returns when their calls in flight have been answered.
///
/// A connection that fails (a peer that is not HTTP/2, one that resets) is closed and logged
/// at debug level; the others go on. An error from `connections` is logged and the next
/// connection is taken.
pub async fn serve<B, S, T, F>(backend: Arc<B>, connections: S, shutdown: F)
where
    B: Backend,
    S: Stream<Item = std::io::Result<T>>,
    T: Into<crate::connections::Conn>,
    F: Future<Output = ()>,
{
    // Calls in flight on one connection (`connections.max_streams`, default 4,096): Envoy
    // sends every rate-limit call of a worker over few connections, so the default is well
    // above its 1,024 requests per cluster; the bound keeps one client from holding unbounded
    // per-stream state.
    let (limits, gate) = backend.connection_limits();
    let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    // gRPC has no use for `date`; leaving it out saves a header on every answer. The pings are
    // the ones the HTTP API's HTTP/2 side sends too (see KEEP_ALIVE_INTERVAL).
    http2
        .max_concurrent_streams(limits.max_streams)
        .auto_date_header(false)
        .timer(TokioTimer::new())
        .keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT);
    let admission = crate::connections::Admission {
        gate,
        first_bytes: limits.header_read_timeout.0,
        max_age: crate::connections::MaxAge::of(&limits),
        tls: backend.tls(),
    };
    crate::connections::serve_each("grpc", connections, shutdown, admission, move |stream| {
        let calls = Calls {
            backend: backend.clone(),
        };
        http2.serve_connection(TokioIo::new(stream), calls)
    })
    .await;
}

/// The per-connection hyper service: each request is one call.
struct Calls<B> {
    backend: Arc<B>,
}

impl<B: Backend> hyper::service::Service<Request<Incoming>> for Calls<B> {
    type Response = Response<GrpcBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<GrpcBody>, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let backend = self.backend.clone();
        Box::pin(async move { Ok(answer(backend, request).await) })
    }
}

/// Answers one HTTP request: the call's response, or the reason it was refused.
async fn answer<B: Backend>(backend: Arc<B>, request: Request<Incoming>) -> Response<GrpcBody> {
    if request.method() != Method::POST {
        let mut response = http_refusal(StatusCode::METHOD_NOT_ALLOWED);
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return response;
    }
    if !is_grpc(request.headers()) {
        return http_refusal(StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }
    let answered = match request.uri().path() {
        PATH => {
            let (head, body) = request.into_parts();
            let answered = crate::traces::within(
                || crate::traces::rls_call(true, &head.headers),
                || call(&*backend, body),
                |span, answered| {
                    if let Err(refusal) = answered {
                        crate::traces::refused(span, refusal.code as i64);
                    }
                },
            )
            .await;
            answered.map(|response| message_response(&response))
        }
        quota::PATH => quota::stream(backend, request.into_body()).await,
        HEALTH_CHECK => check(&*backend, request.into_body()).await,
        HEALTH_WATCH => watch(backend, request.into_body()).await,
        other => Err(GrpcStatus::new(
            GrpcCode::Unimplemented,
            format!(
                "unknown method {other}; this service has {PATH}, {}, {HEALTH_CHECK} and {HEALTH_WATCH}",
                quota::PATH
            ),
        )),
    };
    answered.unwrap_or_else(GrpcStatus::into_response)
}

/// The service name a health call asks about.
async fn health_request(body: Incoming) -> Result<String, GrpcStatus> {
    let message = read_message(body).await?;
    HealthCheckRequest::decode(message)
        .map(|request| request.service)
        .map_err(|e| {
            GrpcStatus::new(
                GrpcCode::InvalidArgument,
                format!("malformed protobuf message: {e}"),
            )
        })
}

fn status_of(serving: Option<bool>) -> ServingStatus {
    match serving {
        Some(true) => ServingStatus::Serving,
        Some(false) => ServingStatus::NotServing,
        None => ServingStatus::ServiceUnknown,
    }
}

/// `grpc.health.v1.Health/Check`: the service's status now; `NOT_FOUND` for an unknown one.
async fn check<B: Backend>(backend: &B, body: Incoming) -> Result<Response<GrpcBody>, GrpcStatus> {
    let service = health_request(body).await?;
    let Some(serving) = backend.serving(&service) else {
        return Err(GrpcStatus::new(
            GrpcCode::NotFound,
            format!("unknown service `{service}`; this server reports `` and `{HEALTH_SERVICE}`"),
        ));
    };
    let response = HealthCheckResponse {
        status: status_of(Some(serving)) as i32,
    };
    Ok(message_response(&response))
}

/// `grpc.health.v1.Health/Watch`: the service's status now, then each change, until the call
/// ends or the server shuts down (after a last status).
async fn watch<B: Backend>(
    backend: Arc<B>,
    body: Incoming,
) -> Result<Response<GrpcBody>, GrpcStatus> {
    let service = health_request(body).await?;
    let mut interval = tokio::time::interval(WATCH_EVERY);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let watch = Watch {
        backend,
        service,
        interval,
        sent: None,
        ended: false,
    };
    let mut response = Response::new(GrpcBody::stream(Box::pin(watch)));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, grpc_content_type());
    Ok(response)
}

/// A health watch: a stream of framed `HealthCheckResponse`s, each status once.
struct Watch<B> {
    backend: Arc<B>,
    service: String,
    interval: tokio::time::Interval,
    /// The status last sent.
    sent: Option<ServingStatus>,
    ended: bool,
}

impl<B: Backend> Stream for Watch<B> {
    type Item = Result<Bytes, GrpcStatus>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if self.ended {
                return Poll::Ready(None);
            }
            // The first tick is at once: the first status goes out without waiting.
            if self.interval.poll_tick(cx).is_pending() {
                return Poll::Pending;
            }
            let stopping = self.backend.stopping();
            let status = if stopping {
                ServingStatus::NotServing
            } else {
                status_of(self.backend.serving(&self.service))
            };
            self.ended = stopping;
            if self.sent != Some(status) {
                self.sent = Some(status);
                let response = HealthCheckResponse {
                    status: status as i32,
                };
                return Poll::Ready(Some(Ok(framed(&response))));
            }
        }
    }
}

async fn call<B: Backend>(backend: &B, body: Incoming) -> Result<RateLimitResponse, GrpcStatus> {
    let message = read_message(body).await?;
    // Counted once its message is in (a peer that never sends one holds no place), then shed
    // at once if the service is answering `max_in_flight` calls already.
    let _call = backend
        .enter_call()
        .map_err(|e| GrpcStatus::new(GrpcCode::Unavailable, e.to_string()))?;
    let request = RateLimitRequest::decode(message).map_err(|e| {
        GrpcStatus::new(
            GrpcCode::InvalidArgument,
            format!("malformed protobuf message: {e}"),
        )
    })?;
    let request = RlsRequest::try_from(request).map_err(|e| {
        tracing::debug!(error = %e, "ShouldRateLimit: invalid request");
        GrpcStatus::new(GrpcCode::InvalidArgument, e.to_string())
    })?;
    match backend.should_rate_limit(request).await {
        Ok(response) => Ok(response.into()),
        Err(unavailable @ Undecided::Unavailable(_)) => Err(GrpcStatus::new(
            GrpcCode::Unavailable,
            unavailable.to_string(),
        )),
        Err(Undecided::Invalid(why)) => Err(GrpcStatus::new(GrpcCode::InvalidArgument, why)),
    }
}

/// `application/grpc`, or one of its `+format` / `;parameter` forms.
fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("application/grpc"))
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('+') || rest.starts_with(';'))
}

/// Reads the request body and returns the one message in it, without its prefix. A body that
/// arrives in one DATA frame, as Envoy's do, is not copied.
async fn read_message(mut body: Incoming) -> Result<Bytes, GrpcStatus> {
    let mut received = Received::Nothing;
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame.map_err(|e| {
            GrpcStatus::new(GrpcCode::Internal, format!("the request body failed: {e}"))
        })?;
        // Request trailers carry nothing for a unary call.
        let Ok(data) = frame.into_data() else {
            continue;
        };
        received.push(data);
        if let Some(length) = received.announced()? {
            if received.len() > PREFIX + length {
                return Err(GrpcStatus::new(
                    GrpcCode::Internal,
                    "a unary call carries exactly one message; the body holds more",
                ));
            }
        }
    }
    let Some(length) = received.announced()? else {
        let message = if received.len() == 0 {
            "the request body holds no message".to_string()
        } else {
            format!(
                "the request body ends inside the message prefix ({} of 5 bytes)",
                received.len()
            )
        };
        return Err(GrpcStatus::new(GrpcCode::Internal, message));
    };
    if received.len() < PREFIX + length {
        return Err(GrpcStatus::new(
            GrpcCode::Internal,
            format!(
                "the request body ends inside the message: {length} bytes announced, {} received",
                received.len() - PREFIX
            ),
        ));
    }
    Ok(received.into_bytes().slice(PREFIX..))
}

/// The request body so far: most bodies are one chunk, kept as it is.
enum Received {
    Nothing,
    One(Bytes),
    Many(BytesMut),
}

impl Received {
    fn push(&mut self, data: Bytes) {
        *self = match std::mem::replace(self, Received::Nothing) {
            Received::Nothing => Received::One(data),
            Received::One(first) => {
                let mut all = BytesMut::with_capacity(first.len() + data.len());
                all.put(first);
                all.put(data);
                Received::Many(all)
            }
            Received::Many(mut all) => {
                all.put(data);
                Received::Many(all)
            }
        };
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Received::Nothing => &[],
            Received::One(b) => b,
            Received::Many(b) => b,
        }
    }

    fn len(&self) -> usize {
        self.bytes().len()
    }

    /// The message length its prefix announces, once the prefix is in (see [`announced`]).
    fn announced(&self) -> Result<Option<usize>, GrpcStatus> {
        announced(self.bytes())
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Received::Nothing => Bytes::new(),
            Received::One(b) => b,
            Received::Many(b) => b.freeze(),
        }
    }
}

/// The length the message prefix at the start of `received` announces, once the prefix is
/// in; refuses a compressed message and one above [`MAX_REQUEST_BYTES`] before any more of it
/// is read. For a unary call's body and for each message of a stream alike.
fn announced(received: &[u8]) -> Result<Option<usize>, GrpcStatus> {
    let Some(mut prefix) = received.get(..PREFIX) else {
        return Ok(None);
    };
    if prefix.get_u8() != 0 {
        return Err(GrpcStatus::new(
            GrpcCode::Unimplemented,
            "compressed messages are not supported; send them uncompressed (identity)",
        ));
    }
    let length = prefix.get_u32();
    match usize::try_from(length) {
        Ok(length) if length <= MAX_REQUEST_BYTES => Ok(Some(length)),
        _ => Err(GrpcStatus::new(
            GrpcCode::ResourceExhausted,
            format!(
                "the request message is {length} bytes, above the limit of {MAX_REQUEST_BYTES}"
            ),
        )),
    }
}

/// The gRPC status codes this service answers with.
#[derive(Clone, Copy, Debug)]
enum GrpcCode {
    InvalidArgument = 3,
    NotFound = 5,
    ResourceExhausted = 8,
    Unavailable = 14,
    Unimplemented = 12,
    Internal = 13,
}

/// A call refused with a gRPC status.
#[derive(Debug)]
struct GrpcStatus {
    code: GrpcCode,
    message: String,
}

impl GrpcStatus {
    fn new(code: GrpcCode, message: impl Into<String>) -> GrpcStatus {
        GrpcStatus {
            code,
            message: message.into(),
        }
    }

    /// A trailers-only answer: HTTP 200, the status in the headers, no body.
    fn into_response(self) -> Response<GrpcBody> {
        let mut response = Response::new(GrpcBody::empty());
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, grpc_content_type());
        self.write(headers);
        response
    }

    /// The status and message as header fields (of a trailers-only answer, or the trailers
    /// ending a stream).
    fn write(self, headers: &mut HeaderMap) {
        headers.insert("grpc-status", HeaderValue::from(self.code as u16));
        if let Ok(message) = HeaderValue::try_from(percent_encode(&self.message)) {
            headers.insert("grpc-message", message);
        }
        if matches!(self.code, GrpcCode::Unimplemented) {
            headers.insert("grpc-accept-encoding", HeaderValue::from_static("identity"));
        }
    }
}

fn grpc_content_type() -> HeaderValue {
    HeaderValue::from_static("application/grpc")
}

/// gRPC's percent-encoding of `grpc-message`: bytes outside printable ASCII, and `%`, as `%XX`.
fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for byte in message.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Not a gRPC call at all: a plain HTTP status, no body.
fn http_refusal(status: StatusCode) -> Response<GrpcBody> {
    let mut response = Response::new(GrpcBody::empty());
    *response.status_mut() = status;
    response
}

/// The answer to a call: the message, then `grpc-status: 0`.
fn message_response(message: &impl Message) -> Response<GrpcBody> {
    if u32::try_from(message.encoded_len()).is_err() {
        return GrpcStatus::new(GrpcCode::Internal, "the response is too large to send")
            .into_response();
    }
    let mut response = Response::new(GrpcBody::message(framed(message)));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, grpc_content_type());
    response
}

/// `message` with its gRPC prefix (a message of 4 GiB or more has a wrong length: callers
/// check first).
fn framed(message: &impl Message) -> Bytes {
    let length = message.encoded_len();
    // A Vec, not a BytesMut: prost writes varints a byte at a time, which a Vec takes as a
    // push and a BytesMut as a slice copy.
    let mut bytes = Vec::with_capacity(PREFIX + length);
    bytes.push(0);
    bytes.extend_from_slice(&u32::try_from(length).unwrap_or(u32::MAX).to_be_bytes());
    message.encode_raw(&mut bytes);
    Bytes::from(bytes)
}

/// A gRPC response body: one message (or a stream of them), then the OK trailers; or nothing,
/// when the status went in the headers.
/// A response's messages as they come, until one that ends the call with a status of its own.
type Messages = Pin<Box<dyn Stream<Item = Result<Bytes, GrpcStatus>> + Send>>;

struct GrpcBody {
    message: Option<Bytes>,
    stream: Option<Messages>,
    trailers: bool,
    /// The status the stream ended the call with (`OK` if none).
    ended: Option<GrpcStatus>,
}

impl std::fmt::Debug for GrpcBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcBody")
            .field("message", &self.message)
            .field("stream", &self.stream.is_some())
            .field("trailers", &self.trailers)
            .finish()
    }
}

impl GrpcBody {
    fn message(bytes: Bytes) -> GrpcBody {
        GrpcBody {
            message: Some(bytes),
            stream: None,
            trailers: true,
            ended: None,
        }
    }

    fn stream(messages: Messages) -> GrpcBody {
        GrpcBody {
            message: None,
            stream: Some(messages),
            trailers: true,
            ended: None,
        }
    }

    fn empty() -> GrpcBody {
        GrpcBody {
            message: None,
            stream: None,
            trailers: false,
            ended: None,
        }
    }
}

impl Body for GrpcBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(message) = self.message.take() {
            return Poll::Ready(Some(Ok(Frame::data(message))));
        }
        if let Some(stream) = self.stream.as_mut() {
            match stream.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(message))) => {
                    return Poll::Ready(Some(Ok(Frame::data(message))))
                }
                Poll::Ready(Some(Err(refusal))) => {
                    self.stream = None;
                    self.ended = Some(refusal);
                }
                Poll::Ready(None) => self.stream = None,
                Poll::Pending => return Poll::Pending,
            }
        }
        if std::mem::take(&mut self.trailers) {
            let mut trailers = HeaderMap::with_capacity(2);
            match self.ended.take() {
                None => {
                    trailers.insert("grpc-status", HeaderValue::from_static("0"));
                }
                Some(refusal) => refusal.write(&mut trailers),
            }
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.message.is_none() && self.stream.is_none() && !self.trailers
    }

    // No exact size hint: hyper would turn it into a `content-length` header, which gRPC does
    // not use, on every answer.
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_content_types() {
        let with = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(value));
            is_grpc(&headers)
        };
        assert!(with("application/grpc"));
        assert!(with("application/grpc+proto"));
        assert!(with("application/grpc;charset=utf-8"));
        assert!(!with("application/grpc-web"));
        assert!(!with("application/json"));
        assert!(!is_grpc(&HeaderMap::new()));
    }

    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(
            percent_encode("domain: must not be empty"),
            "domain: must not be empty"
        );
        assert_eq!(percent_encode("100% é\n"), "100%25 %C3%A9%0A");
    }

    #[test]
    fn the_prefix_is_checked_as_soon_as_it_is_in() {
        let mut received = Received::Nothing;
        received.push(Bytes::from_static(&[0, 0, 0]));
        assert!(matches!(received.announced(), Ok(None)));
        received.push(Bytes::from_static(&[0, 7, b'x']));
        assert!(matches!(received.announced(), Ok(Some(7))));
        assert_eq!(received.len(), 6);

        let mut compressed = Received::Nothing;
        compressed.push(Bytes::from_static(&[1, 0, 0, 0, 1, 0]));
        let refusal = compressed.announced().unwrap_err();
        assert!(matches!(refusal.code, GrpcCode::Unimplemented));

        let mut huge = Received::Nothing;
        huge.push(Bytes::from_static(&[0, 0, 1, 0, 1]));
        let refusal = huge.announced().unwrap_err();
        assert!(matches!(refusal.code, GrpcCode::ResourceExhausted));
        assert_eq!(
            refusal.message,
            "the request message is 65537 bytes, above the limit of 65536"
        );
    }

    #[test]
    fn the_body_is_the_message_then_the_ok_trailers() {
        let mut body = GrpcBody::message(Bytes::from_static(b"abc"));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let Poll::Ready(Some(Ok(frame))) = Pin::new(&mut body).poll_frame(&mut cx) else {
            panic!("a data frame");
        };
        assert_eq!(frame.into_data().ok(), Some(Bytes::from_static(b"abc")));
        let Poll::Ready(Some(Ok(frame))) = Pin::new(&mut body).poll_frame(&mut cx) else {
            panic!("a trailers frame");
        };
        let Ok(trailers) = frame.into_trailers() else {
            panic!("trailers after the message");
        };
        assert_eq!(
            trailers.get("grpc-status").map(|v| v.as_bytes()),
            Some(&b"0"[..])
        );
        assert!(body.is_end_stream());
        assert!(matches!(
            Pin::new(&mut body).poll_frame(&mut cx),
            Poll::Ready(None)
        ));
        assert!(GrpcBody::empty().is_end_stream());
    }
}
