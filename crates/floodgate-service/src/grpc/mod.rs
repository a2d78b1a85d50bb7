//! Envoy's rate limit service v3 over gRPC:
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, wire compatible with Envoy.
//!
//! [`serve`] answers the calls on HTTP/2 connections (cleartext, prior knowledge: what Envoy
//! and every gRPC client speak) for any [`RlsBackend`]. It only translates: the backend
//! decides. The transport is a small unary-gRPC layer written on hyper's HTTP/2 server rather
//! than tonic's server: one method needs no router, every refusal gets the status gRPC's guide
//! gives it, and the answers leave out the `date` and `content-length` headers that hyper's
//! server adds by default, worth about 6% more calls per second (BENCHMARKS.md). The generated
//! tonic client, [`RateLimitServiceClient`], is kept for callers written in Rust.
//!
//! # Mapping
//!
//! The messages are minimal copies of Envoy's (`proto/`): same packages, names and field
//! numbers; the fields Floodgate does not use are left out, so a peer's values for them are
//! skipped as unknown fields.
//!
//! - Request → [`RlsRequest`]: `domain`; each descriptor's `entries` as `(key, value)` pairs in
//!   order; the request's `hits_addend` (0 means 1); each descriptor's `hits_addend`
//!   (`UInt64Value`; when set, it overrides the request's, and may be 0, a probe); each
//!   descriptor's `limit` override (`requests_per_unit`, `unit` numbered as below) as an
//!   [`RlsLimitOverride`]. Strings are moved, not copied.
//! - [`RlsResponse`] → response: `overall_code`; one `statuses` entry per descriptor, in order,
//!   with `code`, `current_limit` (`name`, empty when the limit has none; `requests_per_unit`;
//!   `unit`: SECOND 1, MINUTE 2, HOUR 3, DAY 4, MONTH 5, YEAR 6, WEEK 7, as Envoy numbers them),
//!   `limit_remaining` and `duration_until_reset` (at most protobuf's 10,000 years);
//!   `response_headers_to_add` (field 3) from [`RlsResponse::response_headers_to_add`], in
//!   order; and `dynamic_metadata` (field 6, a `google.protobuf.Struct`) when the response has
//!   it, JSON mapped to `Struct` as protobuf maps it (numbers as doubles).
//!
//! # Refusals
//!
//! Every refusal is a gRPC status with a message naming the problem, and the backend is not
//! called:
//! - `INVALID_ARGUMENT` ([`InvalidRequest`]): bytes that are not a `RateLimitRequest`, an empty
//!   `domain`, no descriptors, an entry with an empty key, a `limit` override whose unit is
//!   UNKNOWN (0) or a number Envoy does not define. An empty value is allowed, as in Envoy's
//!   current API, and so is a descriptor without entries (OK, with no limit, as upstream).
//! - `RESOURCE_EXHAUSTED`: a message above [`MAX_REQUEST_BYTES`], refused from its 5-byte
//!   prefix, before it is read.
//! - `INTERNAL`: gRPC framing errors (a body that ends inside a message, no message, more than
//!   one message), as gRPC's status code guide says.
//! - `UNIMPLEMENTED`: another method, or a compressed message (Envoy does not compress).
//! - `UNAVAILABLE`: the service is answering `connections.max_in_flight` calls already (see
//!   `crate::connections`); the call is shed at once, once its message is read. Also a call
//!   the backend left [`Undecided`] (its store failed, `rls.on_store_error: unavailable`).
//! - Not gRPC at all: HTTP 405 for a method other than `POST`, 415 for a `content-type` other
//!   than `application/grpc[+proto]`.
//!
//! # Health
//!
//! The same port serves gRPC's health checking protocol, `grpc.health.v1.Health` (what
//! Kubernetes gRPC probes and `grpc_health_probe` ask): `Check` answers the status of a service
//! name, [`GrpcServing::serving`] (`SERVING` or `NOT_SERVING`; `NOT_FOUND` for a name the
//! backend does not know); `Watch` sends the status at once, then each change (checked every
//! second), and `SERVICE_UNKNOWN` for an unknown name; it ends, after a last status, when the
//! server shuts down ([`GrpcServing::stopping`]).
//!
//! # Benchmark body
//!
//! `bench/rls_body.bin` is one gRPC-framed `ShouldRateLimit` request (5-byte prefix: 0, then
//! the big-endian u32 length; domain `"bench"`, one descriptor `[("key", "value")]`,
//! `hits_addend` 1) for `h2load -d`. It is written by
//! `cargo test -p floodgate-service --test service -- --ignored write_bench_body`, and the test
//! `bench_body_is_current` fails if the checked-in file differs from what that would write.

mod call;

pub use call::serve;

use floodgate::algorithm::fixed_window::Unit;
use std::future::Future;
use std::time::Duration;

use crate::rls::{
    Code, RlsDescriptor, RlsLimit, RlsLimitOverride, RlsRequest, RlsResponse, RlsStatus, Undecided,
};

/// The generated messages, under the path they had here.
pub use crate::proto;

use proto::envoy::config::core::v3::HeaderValue;
use proto::envoy::service::ratelimit::v3 as rls_v3;
use rls_v3::rate_limit_response::{self as response, rate_limit};

pub use proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
pub use proto::grpc::health::v1::health_client::HealthClient;
pub use proto::grpc::health::v1::{
    health_check_response::ServingStatus, HealthCheckRequest, HealthCheckResponse,
};
pub use rls_v3::rate_limit_service_client::RateLimitServiceClient;
pub use rls_v3::{RateLimitRequest, RateLimitResponse};

/// The largest request message accepted, in bytes (64 KiB; Envoy's requests are well under
/// 1 KiB). A larger one is refused with `RESOURCE_EXHAUSTED` before it is read.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// What answers `ShouldRateLimit` calls: the decisions, without the transport.
///
/// The request given is valid: a non-empty domain, at least one descriptor, each with at least
/// one entry, every key non-empty. The response should hold one status per descriptor, in the
/// request's order; the service sends whatever the backend returns.
pub trait RlsBackend: Send + Sync + 'static {
    /// Decides one call. A backend that cannot decide either answers for itself in the response
    /// (fails open, say), or leaves the call [`Undecided`]: the service answers `UNAVAILABLE`.
    fn should_rate_limit(
        &self,
        request: RlsRequest,
    ) -> impl Future<Output = Result<RlsResponse, Undecided>> + Send;
}

/// How the gRPC listener serves a backend's connections: their limits, TLS, the count of
/// calls in flight, and what gRPC health checking answers. Every method has a default (no TLS,
/// no gate, always serving), so a backend that needs none of this writes an empty impl.
pub trait GrpcServing: Send + Sync + 'static {
    /// The limits the gRPC connections are served with, and the gate counting them against
    /// `max_connections` (the defaults and no gate unless the backend says otherwise).
    fn connection_limits(
        &self,
    ) -> (
        crate::config::ConnectionLimits,
        Option<std::sync::Arc<crate::connections::ConnectionGate>>,
    ) {
        (crate::config::ConnectionLimits::default(), None)
    }

    /// TLS on the gRPC listener, if any (none by default).
    fn tls(&self) -> Option<std::sync::Arc<crate::connections::tls::TlsTerminator>> {
        None
    }

    /// Counts a call in once its message is read, or sheds it (answered `UNAVAILABLE` at once);
    /// `Ok(None)` when the backend does not count calls (the default).
    fn enter_call(
        &self,
    ) -> Result<Option<crate::connections::CallGuard<'_>>, crate::connections::Overloaded> {
        Ok(None)
    }

    /// The status of `service` for gRPC health checking (`grpc.health.v1.Health`): `Some(true)`
    /// serving, `Some(false)` not serving, `None` a service this server does not know. By
    /// default the server as a whole (the empty name) and `ratelimit` are always serving.
    fn serving(&self, service: &str) -> Option<bool> {
        matches!(service, "" | HEALTH_SERVICE).then_some(true)
    }

    /// Whether the server is shutting down: health watches send their last status and end, so
    /// that they do not hold the graceful shutdown (default: never).
    fn stopping(&self) -> bool {
        false
    }
}

/// The Rate Limit Quota Service's side of a backend: one session per stream, its usage
/// reports answered with bucket actions. The defaults refuse every stream (`NOT_SERVED`).
pub trait QuotaBackend: Send + Sync + 'static {
    /// A new Rate Limit Quota Service stream's session: `Err` with the reason when the call
    /// is refused (the default: this backend does not serve RLQS).
    fn quota_stream(&self) -> Result<crate::rlqs::Session, QuotaRefused> {
        Err(QuotaRefused::NotServed)
    }

    /// Takes one message of usage reports on `session`, under the limits in force now, and
    /// returns the bucket actions to send (see [`crate::rlqs::session`]).
    fn quota_report(
        &self,
        session: &mut crate::rlqs::Session,
        reports: crate::proto::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports,
    ) -> impl Future<Output = Result<Vec<QuotaAction>, crate::rlqs::SessionError>> + Send {
        let _ = (session, reports);
        std::future::ready(Ok(Vec::new()))
    }

    /// `session`'s grants taken again now: the assignments that changed.
    fn quota_tick(
        &self,
        session: &mut crate::rlqs::Session,
    ) -> impl Future<Output = Vec<QuotaAction>> + Send {
        let _ = session;
        std::future::ready(Vec::new())
    }

    /// `session`'s stream ended.
    fn quota_close(&self, session: crate::rlqs::Session) -> impl Future<Output = ()> + Send {
        drop(session);
        std::future::ready(())
    }
}

/// Everything the gRPC server needs of its backend: the three traits above together (any type
/// implementing them is one).
pub trait Backend: RlsBackend + GrpcServing + QuotaBackend {}

impl<T: RlsBackend + GrpcServing + QuotaBackend> Backend for T {}

/// Why a Rate Limit Quota Service stream is refused before it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaRefused {
    /// This backend does not serve RLQS (`UNIMPLEMENTED`).
    NotServed,
    /// `rlqs.max_streams` are open already (`RESOURCE_EXHAUSTED`).
    TooManyStreams,
}

/// One bucket's action in a Rate Limit Quota Service answer.
pub type QuotaAction =
    crate::proto::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;

/// The service name under which `grpc.health.v1.Health` reports the rate limit service, as
/// envoyproxy/ratelimit names it.
pub const HEALTH_SERVICE: &str = "ratelimit";

pub use crate::rls::InvalidRequest;

/// The limit overrides' units, which only the protobuf form can get wrong (the rest of
/// Envoy's requirements are [`RlsRequest::validate`]'s, shared with `/json`).
fn check_units(request: &RateLimitRequest) -> Result<(), InvalidRequest> {
    for (descriptor, d) in request.descriptors.iter().enumerate() {
        if let Some(limit) = &d.limit {
            if Unit::from_envoy_number(limit.unit).is_none() {
                return Err(InvalidRequest::UnknownOverrideUnit {
                    descriptor,
                    unit: limit.unit,
                });
            }
        }
    }
    Ok(())
}

impl TryFrom<RateLimitRequest> for RlsRequest {
    type Error = InvalidRequest;

    /// Validates `request` and moves its strings into an [`RlsRequest`]. The vectors are
    /// rebuilt with `into_iter().map().collect()` over same-sized elements, which the standard
    /// library does in place: no allocation beyond what decoding made.
    fn try_from(request: RateLimitRequest) -> Result<RlsRequest, InvalidRequest> {
        check_units(&request)?;
        let request = RlsRequest {
            domain: request.domain,
            descriptors: request
                .descriptors
                .into_iter()
                .map(|d| RlsDescriptor {
                    entries: d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
                    hits_addend: d.hits_addend,
                    negative_hits: d.is_negative_hits,
                    // Every unit was checked by `check_units`.
                    limit: d.limit.and_then(|l| {
                        Some(RlsLimitOverride {
                            requests_per_unit: l.requests_per_unit,
                            unit: Unit::from_envoy_number(l.unit)?,
                        })
                    }),
                })
                .collect(),
            hits_addend: request.hits_addend,
        };
        request.validate()?;
        Ok(request)
    }
}

impl From<RlsResponse> for RateLimitResponse {
    fn from(response: RlsResponse) -> RateLimitResponse {
        RateLimitResponse {
            overall_code: code_to_proto(response.overall_code) as i32,
            statuses: response.statuses.into_iter().map(status_to_proto).collect(),
            dynamic_metadata: response.dynamic_metadata.map(struct_to_proto),
            response_headers_to_add: response
                .response_headers_to_add
                .into_iter()
                .map(|(key, value)| HeaderValue { key, value })
                .collect(),
        }
    }
}

fn code_to_proto(code: Code) -> response::Code {
    match code {
        Code::Unknown => response::Code::Unknown,
        Code::Ok => response::Code::Ok,
        Code::OverLimit => response::Code::OverLimit,
    }
}

/// Envoy's number for each unit (WEEK, added last, is 7).
fn unit_to_proto(unit: Unit) -> rate_limit::Unit {
    match unit {
        Unit::Second => rate_limit::Unit::Second,
        Unit::Minute => rate_limit::Unit::Minute,
        Unit::Hour => rate_limit::Unit::Hour,
        Unit::Day => rate_limit::Unit::Day,
        Unit::Week => rate_limit::Unit::Week,
        Unit::Month => rate_limit::Unit::Month,
        Unit::Year => rate_limit::Unit::Year,
    }
}

/// The longest duration protobuf's `Duration` holds: 10,000 years, in seconds.
const MAX_PROTO_DURATION_SECS: u64 = 315_576_000_000;

/// `d` as a protobuf `Duration`, saturating at protobuf's 10,000 years.
fn duration_to_proto(d: Duration) -> prost_types::Duration {
    if d.as_secs() > MAX_PROTO_DURATION_SECS {
        return prost_types::Duration {
            seconds: MAX_PROTO_DURATION_SECS as i64,
            nanos: 0,
        };
    }
    prost_types::Duration {
        // Both fit: seconds ≤ 315,576,000,000 and nanoseconds < 1,000,000,000.
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// A JSON object as a protobuf `Struct`.
fn struct_to_proto(map: serde_json::Map<String, serde_json::Value>) -> prost_types::Struct {
    prost_types::Struct {
        fields: map
            .into_iter()
            .map(|(k, v)| (k, value_to_proto(v)))
            .collect(),
    }
}

/// A JSON value as a protobuf `Value` (every number as a double, as protobuf's JSON mapping
/// reads it).
fn value_to_proto(value: serde_json::Value) -> prost_types::Value {
    use prost_types::value::Kind;
    use serde_json::Value as J;
    let kind = match value {
        J::Null => Kind::NullValue(prost_types::NullValue::NullValue as i32),
        J::Bool(b) => Kind::BoolValue(b),
        J::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        J::String(s) => Kind::StringValue(s),
        J::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.into_iter().map(value_to_proto).collect(),
        }),
        J::Object(map) => Kind::StructValue(struct_to_proto(map)),
    };
    prost_types::Value { kind: Some(kind) }
}

fn status_to_proto(status: RlsStatus) -> response::DescriptorStatus {
    response::DescriptorStatus {
        code: code_to_proto(status.code) as i32,
        current_limit: status
            .current_limit
            .map(|limit: RlsLimit| response::RateLimit {
                name: limit.name.unwrap_or_default(),
                requests_per_unit: limit.requests_per_unit,
                unit: unit_to_proto(limit.unit) as i32,
            }),
        limit_remaining: status.limit_remaining,
        duration_until_reset: status.duration_until_reset.map(duration_to_proto),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
        Entry, RateLimitOverride,
    };

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

    #[test]
    fn request_maps_every_field() {
        let request = RateLimitRequest {
            domain: "edge".into(),
            descriptors: vec![
                descriptor(&[("remote_address", "10.0.0.1"), ("path", "")], None),
                descriptor(&[("user", "u1")], Some(0)),
            ],
            hits_addend: 4,
        };
        let rls = RlsRequest::try_from(request).unwrap();
        assert_eq!(
            rls,
            RlsRequest {
                domain: "edge".into(),
                descriptors: vec![
                    RlsDescriptor {
                        negative_hits: false,
                        entries: vec![
                            ("remote_address".into(), "10.0.0.1".into()),
                            ("path".into(), "".into())
                        ],
                        hits_addend: None,
                        limit: None,
                    },
                    RlsDescriptor {
                        negative_hits: false,
                        entries: vec![("user".into(), "u1".into())],
                        hits_addend: Some(0),
                        limit: None,
                    },
                ],
                hits_addend: 4,
            }
        );
        assert_eq!(rls.hits_for(&rls.descriptors[0]), 4);
        assert_eq!(rls.hits_for(&rls.descriptors[1]), 0);
    }

    #[test]
    fn invalid_requests_name_the_field() {
        let ok = || RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![descriptor(&[("k", "v")], None)],
            hits_addend: 0,
        };
        let cases = [
            (
                RateLimitRequest {
                    domain: String::new(),
                    ..ok()
                },
                InvalidRequest::EmptyDomain,
                "domain: must not be empty",
            ),
            (
                RateLimitRequest {
                    descriptors: vec![],
                    ..ok()
                },
                InvalidRequest::NoDescriptors,
                "descriptors: must hold at least one descriptor",
            ),
            (
                RateLimitRequest {
                    descriptors: vec![descriptor(&[("k", "v"), ("", "v")], None)],
                    ..ok()
                },
                InvalidRequest::EmptyKey {
                    descriptor: 0,
                    entry: 1,
                },
                "descriptors[0].entries[1].key: must not be empty",
            ),
            (
                RateLimitRequest {
                    descriptors: vec![RateLimitDescriptor {
                        limit: Some(RateLimitOverride {
                            requests_per_unit: 1,
                            unit: 0,
                        }),
                        ..descriptor(&[("k", "v")], None)
                    }],
                    ..ok()
                },
                InvalidRequest::UnknownOverrideUnit {
                    descriptor: 0,
                    unit: 0,
                },
                "descriptors[0].limit.unit: 0 is not a unit (SECOND 1, MINUTE 2, HOUR 3, DAY 4, MONTH 5, YEAR 6, WEEK 7)",
            ),
        ];
        for (request, error, message) in cases {
            let e = RlsRequest::try_from(request).unwrap_err();
            assert_eq!(e, error);
            assert_eq!(e.to_string(), message);
        }
        assert!(RlsRequest::try_from(ok()).is_ok());
        // Every defined unit maps to its own.
        for (number, unit) in [(1, Unit::Second), (5, Unit::Month), (7, Unit::Week)] {
            let request = RateLimitRequest {
                descriptors: vec![RateLimitDescriptor {
                    limit: Some(RateLimitOverride {
                        requests_per_unit: 9,
                        unit: number,
                    }),
                    ..descriptor(&[("k", "v")], None)
                }],
                ..ok()
            };
            let rls = RlsRequest::try_from(request).unwrap();
            assert_eq!(
                rls.descriptors[0].limit,
                Some(RlsLimitOverride {
                    requests_per_unit: 9,
                    unit
                })
            );
        }
    }

    #[test]
    fn response_maps_every_field() {
        let limit = |name: Option<&str>, unit| RlsLimit {
            name: name.map(Into::into),
            requests_per_unit: 10,
            unit,
        };
        let response = RlsResponse {
            overall_code: Code::OverLimit,
            statuses: vec![
                RlsStatus {
                    code: Code::Ok,
                    current_limit: Some(limit(Some("per-ip"), Unit::Minute)),
                    limit_remaining: 9,
                    duration_until_reset: Some(Duration::from_millis(1_500)),
                    quota_mode: false,
                },
                RlsStatus {
                    code: Code::OverLimit,
                    current_limit: Some(limit(None, Unit::Week)),
                    limit_remaining: 0,
                    duration_until_reset: Some(Duration::MAX),
                    quota_mode: false,
                },
                RlsStatus::default(),
            ],
            shadow_over_limit: 0,
            dynamic_metadata: None,
            response_headers_to_add: vec![
                ("RateLimit-Limit".into(), "10".into()),
                ("RateLimit-Remaining".into(), "0".into()),
            ],
        };
        let proto = RateLimitResponse::from(response);
        assert_eq!(proto.overall_code, 2);
        assert_eq!(
            proto.response_headers_to_add,
            [
                HeaderValue {
                    key: "RateLimit-Limit".into(),
                    value: "10".into()
                },
                HeaderValue {
                    key: "RateLimit-Remaining".into(),
                    value: "0".into()
                }
            ]
        );
        let s = &proto.statuses;
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].code, 1);
        assert_eq!(
            s[0].current_limit,
            Some(response::RateLimit {
                name: "per-ip".into(),
                requests_per_unit: 10,
                unit: 2,
            })
        );
        assert_eq!(s[0].limit_remaining, 9);
        assert_eq!(
            s[0].duration_until_reset,
            Some(prost_types::Duration {
                seconds: 1,
                nanos: 500_000_000
            })
        );
        assert_eq!(s[1].code, 2);
        let week = s[1].current_limit.as_ref().unwrap();
        assert_eq!((week.name.as_str(), week.unit), ("", 7));
        assert_eq!(
            s[1].duration_until_reset.unwrap().seconds,
            315_576_000_000,
            "saturates at protobuf's maximum"
        );
        assert_eq!(s[2], response::DescriptorStatus::default());
        assert_eq!(proto.dynamic_metadata, None);
    }

    #[test]
    fn dynamic_metadata_maps_to_a_struct() {
        use prost_types::value::Kind;
        let metadata =
            serde_json::json!({"domain": "d", "n": 2, "list": [true, null], "o": {"a": "b"}});
        let serde_json::Value::Object(map) = metadata else {
            unreachable!()
        };
        let proto = RateLimitResponse::from(RlsResponse {
            dynamic_metadata: Some(map),
            ..RlsResponse::default()
        });
        let fields = proto.dynamic_metadata.expect("metadata").fields;
        let kind = |k: &str| fields[k].kind.clone().expect("a kind");
        assert_eq!(kind("domain"), Kind::StringValue("d".into()));
        assert_eq!(kind("n"), Kind::NumberValue(2.0));
        let Kind::ListValue(list) = kind("list") else {
            panic!("a list")
        };
        assert_eq!(list.values[0].kind, Some(Kind::BoolValue(true)));
        assert_eq!(list.values[1].kind, Some(Kind::NullValue(0)));
        let Kind::StructValue(o) = kind("o") else {
            panic!("a struct")
        };
        assert_eq!(o.fields["a"].kind, Some(Kind::StringValue("b".into())));
        // Field 6, length-delimited: tag 0x32.
        let bytes = RateLimitResponse {
            dynamic_metadata: Some(prost_types::Struct::default()),
            ..RateLimitResponse::default()
        }
        .encode_to_vec();
        assert_eq!(bytes, [0x32, 0]);
    }

    #[test]
    fn units_have_envoys_numbers() {
        for (unit, number) in [
            (Unit::Second, 1),
            (Unit::Minute, 2),
            (Unit::Hour, 3),
            (Unit::Day, 4),
            (Unit::Month, 5),
            (Unit::Year, 6),
            (Unit::Week, 7),
        ] {
            assert_eq!(unit_to_proto(unit) as i32, number, "{unit}");
            assert_eq!(unit.envoy_number(), number, "{unit}");
        }
        assert_eq!(
            (
                code_to_proto(Code::Unknown) as i32,
                code_to_proto(Code::Ok) as i32,
                code_to_proto(Code::OverLimit) as i32
            ),
            (0, 1, 2)
        );
    }

    /// Field numbers checked against hand-encoded bytes, independent of the generated code.
    #[test]
    fn wire_format_is_envoys() {
        // domain (1) "d"; descriptors (2) { entries (1) { key (1) "k", value (2) "v" },
        // hits_addend (3) { value (1) 5 } }; hits_addend (3) 2.
        let bytes = [
            0x0a, 1, b'd', //
            0x12, 12, //
            0x0a, 6, 0x0a, 1, b'k', 0x12, 1, b'v', //
            0x1a, 2, 0x08, 5, //
            0x18, 2,
        ];
        let request = RateLimitRequest::decode(&bytes[..]).unwrap();
        assert_eq!(request.domain, "d");
        assert_eq!(request.hits_addend, 2);
        assert_eq!(request.descriptors[0].hits_addend, Some(5));
        assert_eq!(request.descriptors[0].entries[0].key, "k");
        assert_eq!(request.descriptors[0].entries[0].value, "v");

        let response = RateLimitResponse {
            overall_code: 1,
            statuses: vec![response::DescriptorStatus {
                code: 1,
                current_limit: Some(response::RateLimit {
                    name: "n".into(),
                    requests_per_unit: 3,
                    unit: 7,
                }),
                limit_remaining: 2,
                duration_until_reset: Some(prost_types::Duration {
                    seconds: 4,
                    nanos: 0,
                }),
            }],
            dynamic_metadata: None,
            response_headers_to_add: vec![HeaderValue {
                key: "k".into(),
                value: "9".into(),
            }],
        };
        // overall_code (1) 1; statuses (2) { code (1) 1, current_limit (2) { requests_per_unit
        // (1) 3, unit (2) 7, name (3) "n" }, limit_remaining (3) 2, duration_until_reset (4)
        // { seconds (1) 4 } }; response_headers_to_add (3) { key (1) "k", value (2) "9" }.
        let expected = [
            0x08, 1, //
            0x12, 17, //
            0x08, 1, //
            0x12, 7, 0x08, 3, 0x10, 7, 0x1a, 1, b'n', //
            0x18, 2, //
            0x22, 2, 0x08, 4, //
            0x1a, 6, 0x0a, 1, b'k', 0x12, 1, b'9',
        ];
        assert_eq!(response.encode_to_vec(), expected);
    }
}
