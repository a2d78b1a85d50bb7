//! `StreamRateLimitQuotas`: the Rate Limit Quota Service's one method, a stream each way.
//!
//! The call's task reads the client's messages as they come (each a length-prefixed message
//! of the body, as in a unary call) and, about every second, ticks the stream's session; what
//! either brings is sent at once, one `RateLimitQuotaResponse` per batch of actions. The call
//! ends with `OK` when the client ends its side, and with the status of the first thing that
//! ends it otherwise: a message that is not a report (`INVALID_ARGUMENT`, as is a report the
//! session refuses: see [`crate::rlqs::session`]), more buckets than a stream may hold
//! (`RESOURCE_EXHAUSTED`), or the server shutting down (`UNAVAILABLE`: Envoy's client opens
//! another stream at its next report). Whatever ends it, the stream's claims leave.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{header, Response};
use http_body::Body;
use hyper::body::Incoming;
use prost::Message;
use tokio::sync::mpsc;

use super::{announced, framed, grpc_content_type, GrpcBody, GrpcCode, GrpcStatus, PREFIX};
use crate::grpc::{Backend, QuotaAction, QuotaRefused};
use crate::proto::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use crate::rlqs::{Session, SessionError};

/// The method's path.
pub(super) const PATH: &str =
    "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";

/// How often a stream's grants are taken again.
const TICK: Duration = Duration::from_secs(1);

/// Answers one `StreamRateLimitQuotas` call: the response's messages come from the call's own
/// task.
pub(super) async fn stream<B: Backend>(
    backend: Arc<B>,
    body: Incoming,
) -> Result<Response<GrpcBody>, GrpcStatus> {
    let session = match backend.quota_stream() {
        Ok(session) => session,
        Err(QuotaRefused::NotServed) => {
            return Err(GrpcStatus::new(
                GrpcCode::Unimplemented,
                "this server does not serve the Rate Limit Quota Service",
            ))
        }
        Err(QuotaRefused::TooManyStreams) => {
            return Err(GrpcStatus::new(
                GrpcCode::ResourceExhausted,
                "rlqs.max_streams Rate Limit Quota Service streams are open already",
            ))
        }
    };
    // Room for a few answers: a client that reads none holds the task, not memory.
    let (sender, receiver) = mpsc::channel(8);
    tokio::spawn(run(backend, session, Messages::new(body), sender));
    let answers = tokio_stream::wrappers::ReceiverStream::new(receiver);
    let mut response = Response::new(GrpcBody::stream(Box::pin(answers)));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, grpc_content_type());
    Ok(response)
}

type Answers = mpsc::Sender<Result<Bytes, GrpcStatus>>;

/// The call's task: reports and ticks until something ends the call; then the claims leave.
async fn run<B: Backend>(
    backend: Arc<B>,
    mut session: Session,
    mut messages: Messages,
    answers: Answers,
) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let ended = loop {
        tokio::select! {
            message = messages.next() => match message {
                None => break None,
                Some(Err(refusal)) => break Some(refusal),
                Some(Ok(bytes)) => {
                    let reports = match RateLimitQuotaUsageReports::decode(bytes) {
                        Ok(reports) => reports,
                        Err(e) => break Some(GrpcStatus::new(
                            GrpcCode::InvalidArgument,
                            format!("malformed protobuf message: {e}"),
                        )),
                    };
                    match backend.quota_report(&mut session, reports).await {
                        Ok(actions) => {
                            if send(&answers, actions).await.is_err() {
                                break None;
                            }
                        }
                        Err(e) => break Some(refusal_of(e)),
                    }
                }
            },
            _ = tick.tick() => {
                if backend.stopping() {
                    break Some(GrpcStatus::new(GrpcCode::Unavailable, "the server is shutting down"));
                }
                let actions = backend.quota_tick(&mut session).await;
                if send(&answers, actions).await.is_err() {
                    break None;
                }
            }
            _ = answers.closed() => break None,
        }
    };
    if let Some(refusal) = &ended {
        tracing::debug!(code = refusal.code as i32, message = %refusal.message, "RLQS stream ended");
    }
    backend.quota_close(session).await;
    if let Some(refusal) = ended {
        let _ = answers.send(Err(refusal)).await;
    }
}

/// Sends `actions` as one response, if there are any; `Err` once the client is gone.
async fn send(answers: &Answers, actions: Vec<QuotaAction>) -> Result<(), ()> {
    if actions.is_empty() {
        return Ok(());
    }
    let response = RateLimitQuotaResponse {
        bucket_action: actions,
    };
    answers.send(Ok(framed(&response))).await.map_err(drop)
}

fn refusal_of(error: SessionError) -> GrpcStatus {
    let code = match error {
        SessionError::Invalid(_) => GrpcCode::InvalidArgument,
        SessionError::TooMany(_) => GrpcCode::ResourceExhausted,
    };
    GrpcStatus::new(code, error.to_string())
}

/// The messages of a request body that streams them, one at a time.
struct Messages {
    body: Incoming,
    buffer: BytesMut,
    ended: bool,
}

impl Messages {
    fn new(body: Incoming) -> Messages {
        Messages {
            body,
            buffer: BytesMut::new(),
            ended: false,
        }
    }

    /// The next message, without its prefix; `None` once the client has ended its side.
    /// Cancel-safe: what was read stays in the buffer.
    async fn next(&mut self) -> Option<Result<Bytes, GrpcStatus>> {
        loop {
            match announced(&self.buffer) {
                Err(refusal) => return Some(Err(refusal)),
                Ok(Some(length)) if self.buffer.len() >= PREFIX + length => {
                    let message = self.buffer.split_to(PREFIX + length).freeze();
                    return Some(Ok(message.slice(PREFIX..)));
                }
                Ok(_) => {}
            }
            if self.ended {
                return (!self.buffer.is_empty()).then(|| {
                    Err(GrpcStatus::new(
                        GrpcCode::Internal,
                        "the request body ends inside a message",
                    ))
                });
            }
            let body = &mut self.body;
            match std::future::poll_fn(|cx| std::pin::Pin::new(&mut *body).poll_frame(cx)).await {
                None => self.ended = true,
                Some(Err(e)) => {
                    return Some(Err(GrpcStatus::new(
                        GrpcCode::Internal,
                        format!("the request body failed: {e}"),
                    )))
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
            }
        }
    }
}
