//! Request extraction: who is asking, on which plan, how important the request is, and
//! which endpoint it hits.
//!
//! An [`Extractor`] turns a request's head ([`http::request::Parts`]) into a [`RequestInfo`],
//! the owned form of the pipeline's [`Request`]. The default rules, each configurable:
//!
//! - **User** (the key the per-user limiters count under), by [`KeyBy`]: by default
//!   [`KeyBy::Credential`]. The credential is the `x-api-key` header's value, else the token
//!   of an `Authorization: Bearer <token>` header (scheme case-insensitive); a credential is
//!   used only if it is visible ASCII, non-empty after trimming, and at most
//!   [`MAX_CREDENTIAL_LEN`] bytes (a longer one is ignored: no real key is that long). The
//!   user is then `key:` and 32 hex digits, a keyed hash (HMAC-SHA256) of the credential under
//!   the extractor's [`CredentialKey`]: the credential itself never reaches the store, a
//!   refusal or `Debug` output (see [`crate::credential`] for the rule, and why nodes sharing
//!   a store must share the key). Without a credential, the user is the client's address,
//!   `ip:<address>`, found by the extractor's [`ClientAddress`] (by default the connection's
//!   peer; see [`crate::address`]); IPv4-mapped IPv6 addresses count as IPv4, and other IPv6
//!   clients are keyed by their /64 network (`ip:2001:db8:1:2::/64`), since one host usually
//!   holds a whole /64. A request with neither is [`Unidentified`]: the middleware answers
//!   500 saying how to provide the address, rather than count every such client as one (only
//!   a [`ClientAddress::custom`] function that answers `None` makes a user
//!   [`ANONYMOUS`], on purpose). The prefixes keep the namespaces apart: a client cannot
//!   send another client's address as its API key to drain that client's quota. The
//!   middleware runs before authentication, so an unknown key still gets its own
//!   (default-plan) bucket. [`KeyBy::Address`] ignores credentials, [`KeyBy::Header`] keys
//!   by a header's value (hashed, as credentials are), and [`KeyBy::custom`] by any
//!   [`KeyExtractor`].
//! - **Plan.** The plan lookup closure is called with the raw credential (not the `key:`
//!   user; it must not log it); when there is no credential, no lookup, or the lookup answers
//!   `None`, the plan is the configured default plan, else the empty name, which the request
//!   rate limiter treats as unknown and answers with its own default plan.
//! - **Priority**, the first rule that matches: the path is under a critical route prefix →
//!   [`Priority::Critical`]; the request is in test mode ([`TestMode`], by default the header
//!   `x-test-mode: true`) → [`Priority::Test`]; the method is POST, PUT, PATCH or DELETE →
//!   [`Priority::Post`]; anything else → [`Priority::Get`]. A prefix matches at a segment
//!   boundary: `/v1/charges` covers `/v1/charges` and `/v1/charges/ch_1`, not `/v1/chargesx`.
//! - **Cost and endpoint.** The endpoint is the URI's path and the cost is left to the
//!   pipeline (`None`), so the request rate limiter's per-endpoint cost table applies (1 for
//!   paths it does not list).
//!
//! [`Extractor::custom`] replaces all of these rules with one closure; it may still call a
//! default extractor's [`Extractor::extract`] and adjust the result. A custom rule that keys
//! users by a secret should hash it the same way, with [`CredentialKey::user_key`].

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use floodgate::limiter::Priority;
use floodgate::pipeline::Request;
use http::header::{HeaderName, AUTHORIZATION};
use http::request::Parts;
use http::Method;

use crate::address::{ClientAddress, Unidentified};
use crate::credential::{shown_user, CredentialKey};

/// The longest credential (API key or bearer token) keyed by, in bytes; longer ones are
/// ignored.
pub const MAX_CREDENTIAL_LEN: usize = 256;

/// The user of requests that carry no credential and whose client address is unknown.
pub const ANONYMOUS: &str = "anonymous";

/// What the pipeline needs to know about one request, owned (see [`RequestInfo::as_request`]).
///
/// `Debug` shows the user as [`shown_user`] does: a hashed credential only as its fingerprint.
#[derive(Clone, PartialEq, Eq)]
pub struct RequestInfo {
    /// The per-user limiters' key: with the default rules `key:` and 32 hex digits (a
    /// credential's keyed hash), `ip:…` or `anonymous`.
    pub user: String,
    /// The user's plan; an unknown name (the empty one included) gets the request rate
    /// limiter's default plan.
    pub plan: String,
    /// How important the request is to the load shedders.
    pub priority: Priority,
    /// An explicit cost; `None` for the endpoint's configured cost (1 by default).
    pub cost: Option<u64>,
    /// The endpoint, for per-endpoint costs; the URI path with the default rules.
    pub endpoint: Option<String>,
    /// Attributes for stages with a scope (their keys, conditions, costs and plans), as
    /// `(name, value)` pairs: none by default; [`Extractor::attribute`] adds them.
    pub attributes: Vec<(String, String)>,
}

impl fmt::Debug for RequestInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestInfo")
            .field("user", &shown_user(&self.user))
            .field("plan", &self.plan)
            .field("priority", &self.priority)
            .field("cost", &self.cost)
            .field("endpoint", &self.endpoint)
            // Names only: a header's value may be a secret.
            .field(
                "attributes",
                &self.attributes.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl RequestInfo {
    /// A request by `user` on `plan` with `priority`, no explicit cost and no endpoint.
    pub fn new(user: impl Into<String>, plan: impl Into<String>, priority: Priority) -> Self {
        RequestInfo {
            user: user.into(),
            plan: plan.into(),
            priority,
            cost: None,
            endpoint: None,
            attributes: Vec::new(),
        }
    }

    /// The attributes as the borrowed pairs a [`Request`] takes
    /// (`Request { attributes: &pairs, ..info.as_request() }`).
    pub fn attribute_pairs(&self) -> Vec<(&str, &str)> {
        floodgate::pipeline::scope::borrowed(&self.attributes)
    }

    /// The pipeline's view of this request, borrowing from it, without its attributes (a
    /// pipeline request borrows them as pairs: see [`RequestInfo::attribute_pairs`]).
    pub fn as_request(&self) -> Request<'_> {
        Request {
            user: &self.user,
            plan: &self.plan,
            priority: self.priority,
            cost: self.cost,
            endpoint: self.endpoint.as_deref(),
            attributes: &[],
        }
    }
}

/// How a request says it is test-mode traffic (shed first by the utilization shedder).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TestMode {
    /// No request is in test mode.
    Off,
    /// The header is present with the value `true` or `1` (case-insensitive, trimmed).
    Header(HeaderName),
    /// The request's credential starts with this prefix, as Stripe's `sk_test_` keys do.
    KeyPrefix(String),
}

impl Default for TestMode {
    /// `TestMode::Header("x-test-mode")`.
    fn default() -> Self {
        TestMode::Header(HeaderName::from_static("x-test-mode"))
    }
}

type PlanFn = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;
type CustomFn = Box<dyn Fn(&Parts) -> Result<RequestInfo, Unidentified> + Send + Sync>;

/// Where an attribute of [`RequestInfo::attributes`] comes from ([`Extractor::attribute`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttributeSource {
    /// The HTTP method (`GET`, `POST`, …).
    Method,
    /// The client's address as the extractor reads it ([`Extractor::client_ip`]); absent
    /// when it reads none.
    ClientIp,
    /// A header's value; absent when the header is missing or not visible ASCII. A header
    /// holding a secret is seen by the stages as it is: key by it only through a hash.
    Header(HeaderName),
}

/// What the per-user limiters count a request under: its [`RequestInfo::user`].
pub enum KeyBy {
    /// The credential (API key, else bearer token), hashed; else the client's address. The
    /// default.
    Credential,
    /// The client's address alone: credentials are ignored (a per-IP limit).
    Address,
    /// The value of this header, hashed as credentials are (`key:…`); else the client's
    /// address.
    Header(HeaderName),
    /// A key of the caller's own ([`KeyBy::custom`]).
    Custom(Box<dyn KeyExtractor>),
}

impl KeyBy {
    /// Keys by `extractor`'s answer, used as given (hash a secret with
    /// [`CredentialKey::user_key`] first).
    pub fn custom(extractor: impl KeyExtractor) -> KeyBy {
        KeyBy::Custom(Box::new(extractor))
    }
}

impl fmt::Debug for KeyBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyBy::Credential => f.write_str("Credential"),
            KeyBy::Address => f.write_str("Address"),
            KeyBy::Header(name) => f.debug_tuple("Header").field(name).finish(),
            KeyBy::Custom(_) => f.write_str("Custom"),
        }
    }
}

/// Finds the key a request is counted under, as [`KeyBy::custom`] takes it. Closures
/// `Fn(&Parts) -> Result<String, Unidentified>` are key extractors.
///
/// ```
/// use floodgate_tower::{Extractor, KeyBy, Unidentified};
/// use http::request::Parts;
///
/// // One bucket per tenant, named in a header that a gateway in front already checked.
/// let by_tenant = |parts: &Parts| {
///     parts
///         .headers
///         .get("x-tenant")
///         .and_then(|v| v.to_str().ok())
///         .map(|tenant| format!("tenant:{tenant}"))
///         .ok_or_else(|| Unidentified::new("the gateway sets x-tenant on every request"))
/// };
/// let extractor = Extractor::new().key_by(KeyBy::custom(by_tenant));
/// let request = http::Request::get("/").header("x-tenant", "acme").body(()).unwrap();
/// assert_eq!(extractor.extract(&request.into_parts().0)?.user, "tenant:acme");
/// # Ok::<(), Unidentified>(())
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key `request` is counted under, or why there is none (the middleware answers 500
    /// with that message).
    fn key(&self, request: &Parts) -> Result<String, Unidentified>;
}

impl<F> KeyExtractor for F
where
    F: Fn(&Parts) -> Result<String, Unidentified> + Send + Sync + 'static,
{
    fn key(&self, request: &Parts) -> Result<String, Unidentified> {
        self(request)
    }
}

/// Builds each request's [`RequestInfo`]. See the [module documentation](self) for the rules.
pub struct Extractor {
    key_by: KeyBy,
    api_key_header: Option<HeaderName>,
    bearer_token: bool,
    credential_key: CredentialKey,
    address: ClientAddress,
    plan_of: Option<PlanFn>,
    default_plan: Option<String>,
    critical_prefixes: Vec<String>,
    test_mode: TestMode,
    custom: Option<CustomFn>,
    attributes: Vec<(String, AttributeSource)>,
}

impl Default for Extractor {
    fn default() -> Self {
        Extractor::new()
    }
}

impl fmt::Debug for Extractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extractor")
            .field("key_by", &self.key_by)
            .field("address", &self.address)
            .field("api_key_header", &self.api_key_header)
            .field("bearer_token", &self.bearer_token)
            .field("credential_key", &self.credential_key)
            .field("plan_lookup", &self.plan_of.is_some())
            .field("default_plan", &self.default_plan)
            .field("critical_prefixes", &self.critical_prefixes)
            .field("test_mode", &self.test_mode)
            .field("custom", &self.custom.is_some())
            .field("attributes", &self.attributes)
            .finish_non_exhaustive()
    }
}

impl Extractor {
    /// The default rules: `x-api-key`, then `Authorization: Bearer`, then the connection's
    /// peer address ([`Unidentified`] without one); credentials hashed under this process's
    /// random key ([`CredentialKey::process`]); no plan lookup (every user gets the request
    /// rate limiter's default plan); no critical routes; test mode by the `x-test-mode: true`
    /// header.
    ///
    /// ```
    /// use floodgate_tower::Extractor;
    /// use std::net::SocketAddr;
    ///
    /// let extractor = Extractor::new();
    /// let mut request = http::Request::get("/v1/charges").body(()).unwrap();
    /// // What axum's ConnectInfo, tonic's server or your hyper accept loop provides.
    /// request.extensions_mut().insert(SocketAddr::from(([203, 0, 113, 9], 50123)));
    /// let info = extractor.extract(&request.into_parts().0)?;
    /// assert_eq!(info.user, "ip:203.0.113.9");
    ///
    /// let keyed = http::Request::get("/").header("x-api-key", "sk_live_1").body(()).unwrap();
    /// let info = extractor.extract(&keyed.into_parts().0)?;
    /// assert!(info.user.starts_with("key:")); // a keyed hash, never the key itself
    ///
    /// // Neither: a set-up mistake, said plainly, rather than one shared bucket.
    /// let unknown = http::Request::get("/").body(()).unwrap();
    /// assert!(extractor.extract(&unknown.into_parts().0).is_err());
    /// # Ok::<(), floodgate_tower::Unidentified>(())
    /// ```
    pub fn new() -> Self {
        Extractor {
            key_by: KeyBy::Credential,
            api_key_header: Some(HeaderName::from_static("x-api-key")),
            bearer_token: true,
            credential_key: CredentialKey::process(),
            address: ClientAddress::connection(),
            plan_of: None,
            default_plan: None,
            critical_prefixes: Vec::new(),
            test_mode: TestMode::default(),
            custom: None,
            attributes: Vec::new(),
        }
    }

    /// Gives every request the attribute `name` read from `source`, for pipeline stages keyed
    /// or conditioned on `attributes.NAME` (for example `.attribute("method",
    /// AttributeSource::Method)` for a stage `when: {attributes.method: POST}`). A request
    /// whose source is absent lacks the attribute.
    pub fn attribute(mut self, name: impl Into<String>, source: AttributeSource) -> Self {
        self.attributes.push((name.into(), source));
        self
    }

    /// What the per-user limiters count requests under (default [`KeyBy::Credential`]).
    pub fn key_by(mut self, key_by: KeyBy) -> Self {
        self.key_by = key_by;
        self
    }

    /// An extractor that calls `f` for every request and nothing else (its user is used as
    /// given: see [`CredentialKey::user_key`] for keying by a secret). `f` may still call a
    /// default extractor's [`Extractor::extract`], and answers [`Unidentified`] for requests
    /// it cannot place.
    pub fn custom<F>(f: F) -> Self
    where
        F: Fn(&Parts) -> Result<RequestInfo, Unidentified> + Send + Sync + 'static,
    {
        Extractor {
            custom: Some(Box::new(f)),
            ..Extractor::new()
        }
    }

    /// Reads the API key from `header` (whole value) instead of `x-api-key`.
    pub fn api_key_header(mut self, header: HeaderName) -> Self {
        self.api_key_header = Some(header);
        self
    }

    /// Reads no API key header (bearer tokens are still read unless turned off).
    pub fn without_api_key_header(mut self) -> Self {
        self.api_key_header = None;
        self
    }

    /// Whether `Authorization: Bearer <token>` counts as a credential (default `true`).
    pub fn bearer_token(mut self, enabled: bool) -> Self {
        self.bearer_token = enabled;
        self
    }

    /// Hashes credentials into user keys under `key` instead of this process's random key.
    /// Every node that shares a store must use the same key, so that a user maps to the same
    /// limiter key on every node (and across restarts).
    pub fn credential_key(mut self, key: CredentialKey) -> Self {
        self.credential_key = key;
        self
    }

    /// Finds the client's address with `address` instead of the connection's peer: behind
    /// proxies, [`ClientAddress::forwarded_for`] (see [`crate::address`]).
    pub fn client_address(mut self, address: ClientAddress) -> Self {
        self.address = address;
        self
    }

    /// Reads the client's address with `f` ([`ClientAddress::custom`]). `|_| None` turns
    /// per-address keys off on purpose: requests without a credential are then one
    /// [`ANONYMOUS`] client.
    pub fn client_ip<F>(self, f: F) -> Self
    where
        F: Fn(&Parts) -> Option<IpAddr> + Send + Sync + 'static,
    {
        self.client_address(ClientAddress::custom(f))
    }

    /// Looks plans up by credential: `f(api_key)` names the key's plan, `None` for the
    /// default plan.
    pub fn plan_lookup<F>(mut self, f: F) -> Self
    where
        F: Fn(&str) -> Option<String> + Send + Sync + 'static,
    {
        self.plan_of = Some(Box::new(f));
        self
    }

    /// The plan of users the lookup does not place (default: the request rate limiter's own
    /// default plan).
    pub fn default_plan(mut self, plan: impl Into<String>) -> Self {
        self.default_plan = Some(plan.into());
        self
    }

    /// Makes every path under `prefix` (at a segment boundary) critical: never shed.
    pub fn critical_route(mut self, prefix: impl Into<String>) -> Self {
        self.critical_prefixes.push(prefix.into());
        self
    }

    /// How test-mode requests are recognised (default: header `x-test-mode: true`).
    pub fn test_mode(mut self, rule: TestMode) -> Self {
        self.test_mode = rule;
        self
    }

    /// What the pipeline needs of the request under this extractor's rules; [`Unidentified`] when its user
    /// cannot be found (no credential and no client address: see the [module
    /// documentation](self)).
    pub fn extract(&self, parts: &Parts) -> Result<RequestInfo, Unidentified> {
        self.extract_with(parts, true)
    }

    /// [`Extractor::extract`]; with `needs_user == false` (no stage counts by user), a
    /// request without a client address is [`ANONYMOUS`] rather than unidentified. A key
    /// extractor's own refusal stands either way.
    pub(crate) fn extract_with(
        &self,
        parts: &Parts,
        needs_user: bool,
    ) -> Result<RequestInfo, Unidentified> {
        if let Some(custom) = &self.custom {
            return custom(parts);
        }
        let credential = self.credential(parts);
        let by_address = || match self.address_key(parts) {
            Err(_) if !needs_user => Ok(ANONYMOUS.to_string()),
            other => other,
        };
        let user = match &self.key_by {
            KeyBy::Credential => match credential {
                Some(secret) => self.credential_key.user_key(secret),
                None => by_address()?,
            },
            KeyBy::Address => by_address()?,
            KeyBy::Header(name) => {
                match parts
                    .headers
                    .get(name)
                    .and_then(|v| usable(v.to_str().ok()?))
                {
                    Some(value) => self.credential_key.user_key(value),
                    None => by_address()?,
                }
            }
            KeyBy::Custom(extractor) => extractor.key(parts)?,
        };
        let plan = credential
            .and_then(|key| self.plan_of.as_ref().and_then(|lookup| lookup(key)))
            .or_else(|| self.default_plan.clone())
            .unwrap_or_default();
        let attributes = self
            .attributes
            .iter()
            .filter_map(|(name, source)| {
                let value = match source {
                    AttributeSource::Method => parts.method.as_str().to_string(),
                    AttributeSource::ClientIp => {
                        self.address.read(parts).ok().flatten()?.to_string()
                    }
                    AttributeSource::Header(header) => {
                        parts.headers.get(header)?.to_str().ok()?.to_string()
                    }
                };
                Some((name.clone(), value))
            })
            .collect();
        Ok(RequestInfo {
            user,
            plan,
            priority: self.priority_with(parts, credential),
            cost: None,
            endpoint: Some(parts.uri.path().to_string()),
            attributes,
        })
    }

    /// `ip:<address>` of the client, `anonymous` when a custom address reader answers none.
    fn address_key(&self, parts: &Parts) -> Result<String, Unidentified> {
        Ok(match self.address.read(parts)? {
            Some(ip) => ip_key(ip),
            None => ANONYMOUS.to_string(),
        })
    }

    /// The request's raw credential: the API key header's value, else a bearer token; `None`
    /// if neither is present and usable (see the [module documentation](self)). This is the
    /// secret itself: hash it with [`CredentialKey::user_key`] before keying, logging or
    /// showing anything by it.
    pub fn credential<'p>(&self, parts: &'p Parts) -> Option<&'p str> {
        let from_key = self
            .api_key_header
            .as_ref()
            .and_then(|name| usable(parts.headers.get(name)?.to_str().ok()?));
        from_key.or_else(|| {
            if !self.bearer_token {
                return None;
            }
            let value = parts.headers.get(AUTHORIZATION)?.to_str().ok()?.trim();
            let (scheme, token) = value.split_once(' ')?;
            if scheme.eq_ignore_ascii_case("bearer") {
                usable(token)
            } else {
                None
            }
        })
    }

    /// The request's priority under this extractor's rules.
    pub fn priority(&self, parts: &Parts) -> Priority {
        self.priority_with(parts, self.credential(parts))
    }

    fn priority_with(&self, parts: &Parts, credential: Option<&str>) -> Priority {
        let path = parts.uri.path();
        if self.critical_prefixes.iter().any(|p| under(path, p)) {
            return Priority::Critical;
        }
        let test = match &self.test_mode {
            TestMode::Off => false,
            TestMode::Header(name) => parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1"),
            TestMode::KeyPrefix(prefix) => credential.is_some_and(|c| c.starts_with(prefix)),
        };
        if test {
            return Priority::Test;
        }
        match parts.method {
            Method::POST | Method::PUT | Method::PATCH | Method::DELETE => Priority::Post,
            _ => Priority::Get,
        }
    }
}

/// A trimmed credential if it is non-empty and short enough (header values are already
/// visible ASCII once `to_str` accepted them).
fn usable(value: &str) -> Option<&str> {
    let value = value.trim();
    (!value.is_empty() && value.len() <= MAX_CREDENTIAL_LEN).then_some(value)
}

/// `ip:<v4>` or `ip:<v6 /64 network>/64`.
fn ip_key(ip: IpAddr) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => format!("ip:{v4}"),
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let network = Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0);
            format!("ip:{network}/64")
        }
    }
}

/// Whether `path` is `prefix` or below it at a segment boundary.
fn under(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with('/') || prefix.ends_with('/'),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;
    use std::net::SocketAddr;

    /// The extraction of a request that has a user.
    trait ExtractOk {
        fn extract_ok(&self, parts: &Parts) -> RequestInfo;
    }

    impl ExtractOk for Extractor {
        fn extract_ok(&self, parts: &Parts) -> RequestInfo {
            self.extract(parts).unwrap()
        }
    }

    /// A request with a peer address, for tests that do not look at the user.
    fn from_peer(mut parts: Parts) -> Parts {
        parts
            .extensions
            .insert(SocketAddr::from(([192, 0, 2, 1], 1)));
        parts
    }

    fn parts(method: Method, uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut builder = Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap().into_parts().0
    }

    fn get(uri: &str, headers: &[(&str, &str)]) -> Parts {
        parts(Method::GET, uri, headers)
    }

    fn mac_key(byte: u8) -> CredentialKey {
        CredentialKey::from_bytes([byte; 32])
    }

    /// The user key of `credential` under the process key, the extractors' default.
    fn hashed(credential: &str) -> String {
        CredentialKey::process().user_key(credential)
    }

    #[test]
    fn the_user_is_the_api_key_then_the_bearer_token_then_the_address_else_unidentified() {
        let e = Extractor::new();
        let both = get(
            "/",
            &[("x-api-key", " sk_1 "), ("authorization", "Bearer tok")],
        );
        assert_eq!(e.extract_ok(&both).user, hashed("sk_1"));
        let bearer = get("/", &[("authorization", "bEaReR   tok_2")]);
        assert_eq!(e.extract_ok(&bearer).user, hashed("tok_2"));
        let basic = get("/", &[("authorization", "Basic dXNlcg==")]);
        // Not a credential, and no address: a set-up mistake, never `anonymous`.
        assert!(e.extract(&basic).is_err());

        let mut by_addr = get("/", &[("x-api-key", "   ")]);
        by_addr
            .extensions
            .insert(SocketAddr::from(([203, 0, 113, 7], 4711)));
        assert_eq!(e.extract_ok(&by_addr).user, "ip:203.0.113.7");
        let mut by_ip = get("/", &[]);
        by_ip.extensions.insert(IpAddr::from([10, 0, 0, 1]));
        assert_eq!(e.extract_ok(&by_ip).user, "ip:10.0.0.1");

        let long = "k".repeat(MAX_CREDENTIAL_LEN + 1);
        assert!(e.extract(&get("/", &[("x-api-key", &long)])).is_err());
        let longest = "k".repeat(MAX_CREDENTIAL_LEN);
        assert_eq!(
            e.extract_ok(&get("/", &[("x-api-key", &longest)])).user,
            hashed(&longest)
        );
    }

    #[test]
    fn credentials_are_hashed_never_kept_or_shown() {
        let secret = "sk_live_secret";
        let e = Extractor::new().credential_key(mac_key(1));
        for header in [
            ("authorization", "Bearer sk_live_secret"),
            ("x-api-key", secret),
        ] {
            let info = e.extract_ok(&get("/", &[header]));
            assert_eq!(info.user, mac_key(1).user_key(secret));
            assert!(info.user.starts_with("key:") && info.user.len() == 36);
            assert!(!info.user.contains(secret));
            let shown = format!("{info:?}");
            assert!(!shown.contains(secret), "{shown}");
            assert!(!shown.contains(&info.user), "{shown}");
            assert!(shown.contains(&format!("user: \"{}...\"", &info.user[..12])));
        }
        // The same credential, another MAC key: another user.
        let other = Extractor::new().credential_key(mac_key(2));
        let a = e.extract_ok(&get("/", &[("x-api-key", secret)])).user;
        let b = other.extract_ok(&get("/", &[("x-api-key", secret)])).user;
        assert_ne!(a, b);
        // Non-secret identities are unchanged, in the key and in Debug.
        let mut by_addr = get("/", &[]);
        by_addr.extensions.insert(IpAddr::from([10, 0, 0, 1]));
        let info = e.extract_ok(&by_addr);
        assert_eq!(info.user, "ip:10.0.0.1");
        assert!(format!("{info:?}").contains("user: \"ip:10.0.0.1\""));
    }

    #[test]
    fn debug_of_the_extractor_and_layer_never_prints_the_mac_key() {
        let secret = *b"0123456789abcdef0123456789abcdef";
        let key = CredentialKey::from_bytes(secret);
        let id = key.id();
        let e = Extractor::new().credential_key(key);
        let shown = format!("{e:?}");
        assert!(shown.contains(&format!("credential_key: CredentialKey {{ id: \"{id}\"")));
        assert!(!shown.contains("0123456789abcdef"), "{shown}");
        let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        assert!(!shown.contains(&hex[..16]), "{shown}");
    }

    #[test]
    fn ipv6_clients_are_keyed_by_their_64_and_mapped_v4_as_v4() {
        let v6: IpAddr = "2001:db8:1:2:aaaa:bbbb:cccc:dddd".parse().unwrap();
        assert_eq!(ip_key(v6), "ip:2001:db8:1:2::/64");
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(ip_key(mapped), "ip:192.0.2.1");
    }

    #[test]
    fn key_sources_are_configurable() {
        let e = Extractor::new()
            .api_key_header(HeaderName::from_static("x-key"))
            .bearer_token(false)
            .client_ip(|_| None);
        let mut p = get(
            "/",
            &[
                ("x-api-key", "ignored"),
                ("x-key", "mine"),
                ("authorization", "Bearer t"),
            ],
        );
        assert_eq!(e.extract_ok(&p).user, hashed("mine"));
        p.headers.remove("x-key");
        p.extensions.insert(SocketAddr::from(([127, 0, 0, 1], 1)));
        assert_eq!(e.extract_ok(&p).user, ANONYMOUS);
        let no_key = Extractor::new()
            .without_api_key_header()
            .client_ip(|_| None);
        assert_eq!(
            no_key.extract_ok(&get("/", &[("x-api-key", "k")])).user,
            ANONYMOUS
        );
    }

    #[test]
    fn plans_come_from_the_lookup_else_the_default() {
        let e = Extractor::new()
            .plan_lookup(|key| (key == "sk_pro").then(|| "pro".to_string()))
            .default_plan("free");
        assert_eq!(
            e.extract_ok(&get("/", &[("x-api-key", "sk_pro")])).plan,
            "pro"
        );
        assert_eq!(
            e.extract_ok(&get("/", &[("x-api-key", "sk_other")])).plan,
            "free"
        );
        assert_eq!(e.extract_ok(&from_peer(get("/", &[]))).plan, "free");
        // Without a default plan, the limiter's own default applies (an unknown name).
        assert_eq!(
            Extractor::new().extract_ok(&from_peer(get("/", &[]))).plan,
            ""
        );
    }

    #[test]
    fn priority_critical_then_test_then_method() {
        let e = Extractor::new().critical_route("/v1/charges");
        let post = |uri, headers| e.priority(&parts(Method::POST, uri, headers));
        assert_eq!(post("/v1/charges", &[]), Priority::Critical);
        assert_eq!(post("/v1/charges/ch_1", &[]), Priority::Critical);
        assert_eq!(
            post("/v1/charges", &[("x-test-mode", "true")]),
            Priority::Critical
        );
        assert_eq!(post("/v1/chargesx", &[]), Priority::Post);
        assert_eq!(
            post("/v1/refunds", &[("x-test-mode", "TRUE")]),
            Priority::Test
        );
        assert_eq!(post("/v1/refunds", &[("x-test-mode", "1")]), Priority::Test);
        assert_eq!(
            post("/v1/refunds", &[("x-test-mode", "no")]),
            Priority::Post
        );
        for m in [Method::PUT, Method::PATCH, Method::DELETE] {
            assert_eq!(e.priority(&parts(m, "/x", &[])), Priority::Post);
        }
        for m in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert_eq!(e.priority(&parts(m, "/x", &[])), Priority::Get);
        }
        assert!(under("/a/b", "/a/"));
        assert!(!under("/", "/a"));
    }

    #[test]
    fn test_mode_by_key_prefix_or_off() {
        let e = Extractor::new().test_mode(TestMode::KeyPrefix("sk_test_".into()));
        assert_eq!(
            e.priority(&get("/", &[("x-api-key", "sk_test_1")])),
            Priority::Test
        );
        assert_eq!(
            e.priority(&get(
                "/",
                &[("x-api-key", "sk_live_1"), ("x-test-mode", "true")]
            )),
            Priority::Get
        );
        let off = Extractor::new().test_mode(TestMode::Off);
        assert_eq!(
            off.priority(&get("/", &[("x-test-mode", "true")])),
            Priority::Get
        );
    }

    #[test]
    fn the_endpoint_is_the_path_and_cost_is_left_to_the_pipeline() {
        let info = Extractor::new().extract_ok(&from_peer(get("/v1/search?q=x", &[])));
        assert_eq!(info.endpoint.as_deref(), Some("/v1/search"));
        assert_eq!(info.cost, None);
        let d = info.as_request();
        assert_eq!((d.user, d.endpoint), ("ip:192.0.2.1", Some("/v1/search")));
    }

    #[test]
    fn a_custom_extractor_replaces_the_rules_and_can_reuse_them() {
        let base = Extractor::new();
        let e = Extractor::custom(move |p| {
            Ok(RequestInfo {
                cost: Some(5),
                ..base.extract(p)?
            })
        });
        let info = e.extract_ok(&get("/r", &[("x-api-key", "a")]));
        assert_eq!((info.user, info.cost), (hashed("a"), Some(5)));
        assert!(format!("{e:?}").contains("custom: true"));
    }

    #[test]
    fn keys_by_address_alone_by_a_header_or_by_a_function() {
        let with_key = |parts: Parts| {
            let mut p = from_peer(parts);
            p.headers.insert("x-api-key", "sk_1".parse().unwrap());
            p
        };
        let by_address = Extractor::new().key_by(KeyBy::Address);
        assert_eq!(
            by_address.extract_ok(&with_key(get("/", &[]))).user,
            "ip:192.0.2.1"
        );
        let by_tenant = Extractor::new()
            .credential_key(mac_key(3))
            .key_by(KeyBy::Header(HeaderName::from_static("x-tenant")));
        assert_eq!(
            by_tenant
                .extract_ok(&with_key(get("/", &[("x-tenant", "acme")])))
                .user,
            mac_key(3).user_key("acme")
        );
        // Without the header: the address, as without a credential.
        assert_eq!(
            by_tenant.extract_ok(&with_key(get("/", &[]))).user,
            "ip:192.0.2.1"
        );
        let custom = Extractor::new().key_by(KeyBy::custom(|p: &Parts| {
            Ok(format!("path:{}", p.uri.path()))
        }));
        assert_eq!(custom.extract_ok(&get("/a", &[])).user, "path:/a");
        let refusing = Extractor::new().key_by(KeyBy::custom(|_: &Parts| {
            Err(Unidentified::new("nothing to key by"))
        }));
        assert_eq!(
            refusing.extract(&get("/a", &[])).unwrap_err().message(),
            "nothing to key by"
        );
    }
}
