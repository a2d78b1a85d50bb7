//! Which requests may be sent again, and how they are copied.
//!
//! A request is **safe to retry** after a refusal or a timeout when its method is idempotent
//! (RFC 9110 §9.2.2: GET, HEAD, OPTIONS, TRACE, PUT, DELETE), or when it is marked: it carries
//! the [`Retryable`] extension, or an `Idempotency-Key` field (the server deduplicates it).
//! A request whose **connection could not be made** never reached the server and is retried
//! whatever its method.
//!
//! Retrying needs a copy of the request made before it is sent; a [`Replay`] makes it.
//! [`CloneBody`] (the default) copies bodies that are `Clone` (`String`, `Bytes`,
//! `http_body_util::Full`, `Empty`); [`NeverReplay`] copies nothing, for streaming bodies such
//! as tonic's: such requests are paced but never retried.

use http::{Method, Request};

/// Marks a request as safe to retry whatever its method (insert it into the request's
/// extensions): for example a POST the server deduplicates by some other means.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retryable;

/// The `Idempotency-Key` field name.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// True when `request` may be sent again after a refusal or a timeout.
pub fn is_safe_to_retry<B>(request: &Request<B>) -> bool {
    matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    ) || request.extensions().get::<Retryable>().is_some()
        || request.headers().contains_key(IDEMPOTENCY_KEY)
}

/// Copies requests for retries.
pub trait Replay<B>: Clone + Send + Sync + 'static {
    /// A copy of `request` to send, or `None` when it cannot be copied.
    fn replay(&self, request: &Request<B>) -> Option<Request<B>>;
}

/// Copies the method, URI, version, header fields, extensions and a clone of the body.
#[derive(Clone, Copy, Debug, Default)]
pub struct CloneBody;

impl<B: Clone> Replay<B> for CloneBody {
    fn replay(&self, request: &Request<B>) -> Option<Request<B>> {
        let mut copy = Request::new(request.body().clone());
        *copy.method_mut() = request.method().clone();
        *copy.uri_mut() = request.uri().clone();
        *copy.version_mut() = request.version();
        *copy.headers_mut() = request.headers().clone();
        *copy.extensions_mut() = request.extensions().clone();
        Some(copy)
    }
}

/// Copies nothing: requests are never retried.
#[derive(Clone, Copy, Debug, Default)]
pub struct NeverReplay;

impl<B> Replay<B> for NeverReplay {
    fn replay(&self, _: &Request<B>) -> Option<Request<B>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safety_by_method_and_marks() {
        let req = |m: Method| Request::builder().method(m).body(()).unwrap();
        assert!(is_safe_to_retry(&req(Method::GET)));
        assert!(is_safe_to_retry(&req(Method::PUT)));
        assert!(!is_safe_to_retry(&req(Method::POST)));
        assert!(!is_safe_to_retry(&req(Method::PATCH)));
        let mut post = req(Method::POST);
        post.extensions_mut().insert(Retryable);
        assert!(is_safe_to_retry(&post));
        let keyed = Request::post("/")
            .header("Idempotency-Key", "k1")
            .body(())
            .unwrap();
        assert!(is_safe_to_retry(&keyed));
    }

    #[test]
    fn clone_body_copies_everything() {
        let mut req = Request::post("http://h/x?y=1")
            .header("a", "b")
            .body(String::from("body"))
            .unwrap();
        req.extensions_mut().insert(Retryable);
        let copy = CloneBody.replay(&req).unwrap();
        assert_eq!(copy.method(), Method::POST);
        assert_eq!(copy.uri(), req.uri());
        assert_eq!(copy.headers(), req.headers());
        assert_eq!(copy.body(), "body");
        assert!(copy.extensions().get::<Retryable>().is_some());
        assert!(NeverReplay.replay(&req).is_none());
    }
}
