//! What a handler learns about the admission of its request: [`Admitted`], in the request's
//! extensions.
//!
//! ```
//! use axum::Extension;
//! use floodgate_tower::Admitted;
//!
//! async fn handler(Extension(admitted): Extension<Admitted>) -> String {
//!     match &admitted.rate_limit {
//!         Some(quota) => format!("{} has {} requests left", admitted.key, quota.left),
//!         None => format!("{} is not limited by a quota", admitted.key),
//!     }
//! }
//! # let _ = handler;
//! ```

use floodgate::limiter::RateLimitHeaders;
use floodgate::pipeline::Verdict;

use crate::credential::shown_user;

/// The admission of the request being handled, put in its extensions by the middleware before
/// the inner service is called. A request the middleware let through because it failed itself
/// (see [`FloodgateLayer::fail_opens`](crate::FloodgateLayer::fail_opens)) carries none.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Admitted {
    /// The caller's key as the limiters counted it, safe to log and show: `ip:…` for an
    /// address, and for a credential only its fingerprint, `key:1a2b3c4d...` (see
    /// [`shown_user`]).
    pub key: String,
    /// The quota of the request rate stage with the least left, as the `RateLimit-Policy` and
    /// `RateLimit` fields give it (`left` is the number); `None` where no quota applies.
    pub rate_limit: Option<RateLimitHeaders>,
    /// Stages in shadow mode that would have refused the request.
    pub shadow_refusals: Vec<String>,
    /// Stages whose store failed, and that let the request through.
    pub fail_opens: Vec<String>,
}

impl Admitted {
    /// The admission `verdict` gave `user`.
    pub(crate) fn new(user: &str, verdict: &Verdict) -> Admitted {
        Admitted {
            key: shown_user(user).into_owned(),
            rate_limit: verdict.rate_limit.clone(),
            shadow_refusals: verdict
                .shadow_refusals
                .iter()
                .map(|s| s.to_string())
                .collect(),
            fail_opens: verdict.fail_opens.iter().map(|s| s.to_string()).collect(),
        }
    }
}
