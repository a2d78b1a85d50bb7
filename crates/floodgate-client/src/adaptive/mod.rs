//! What the layer does when the server sends no limit fields: it learns from refusals alone.
//!
//! - [`throttle::AdaptiveThrottle`]: Google SRE's client-side adaptive throttling. When the
//!   server accepts fewer than `1/K` of the requests, the client refuses the surplus itself,
//!   so a drowning server stops paying for requests it would refuse anyway.
//! - [`cubic::CubicRate`]: a send rate found by CUBIC (the AWS SDKs' adaptive retry mode):
//!   cut to β = 0.7 of the measured rate on a refusal, grown back along a cubic curve that
//!   is flat near the last rate that was refused and steep far from it.
//! - [`concurrency::AimdLimit`]: an optional cap on requests in flight per host, additive
//!   increase while the limit is used, multiplicative decrease on refusals and timeouts
//!   (Netflix concurrency-limits' AIMD).

pub mod concurrency;
pub mod cubic;
pub mod throttle;
