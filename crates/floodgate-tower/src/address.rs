//! Where a request comes from: the client's address, read from the connection the server
//! accepted, or, behind proxies you trust, from the header they add.
//!
//! **From the connection** ([`ClientAddress::connection`], the default). Servers leave the
//! peer's address in the request's extensions, each its own way; the middleware reads, in this
//! order:
//! - a [`SocketAddr`] or an [`IpAddr`]: what a hyper or hyper-util server inserts when told to
//!   (hyper itself inserts nothing: `request.extensions_mut().insert(peer)` in the service
//!   that accepts the connection);
//! - axum's `ConnectInfo<SocketAddr>`, with the crate's `axum` feature: serve the router with
//!   `into_make_service_with_connect_info::<SocketAddr>()`;
//! - tonic's `TcpConnectInfo`, with the crate's `tonic` feature: tonic's server inserts it.
//!
//! A request in which none is found is **not** counted as one anonymous client (which would let
//! one abusive client block everyone): the extractor answers [`Unidentified`], and the
//! middleware answers 500 with a message that says how to provide the address. That is a
//! set-up mistake, seen on the first request.
//!
//! **Behind proxies** ([`ClientAddress::forwarded_for`], [`ClientAddress::forwarded`]). A
//! proxy puts the address it received the request from in `X-Forwarded-For` or in RFC 7239's
//! `Forwarded`, after whatever the request already carried. Anyone can write those headers, so
//! they are read only as far as they were written by proxies you trust, from the right: if the
//! connection's peer is not a trusted proxy, it is the client (the header is ignored);
//! otherwise each entry from the right is the address the previous hop received the request
//! from, and the first one that is not a trusted proxy is the client. If every entry is a
//! trusted proxy, the leftmost is the client; an entry that cannot be read (`unknown`, an
//! obfuscated name, garbage) ends the walk, and the last address read is the client. Only the
//! one header named is read: a proxy that writes `X-Forwarded-For` leaves a client's own
//! `Forwarded` untouched, so reading both would let a client pick its address.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use floodgate::ConfigError;
use http::header::HeaderName;
use http::request::Parts;

/// Why no client address, or no key, could be found for a request: a set-up mistake, which the
/// middleware answers with 500 and this message (it names no secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unidentified {
    message: String,
}

impl Unidentified {
    /// An explanation for whoever set the middleware up: what is missing and how to provide it.
    pub fn new(message: impl Into<String>) -> Self {
        Unidentified {
            message: message.into(),
        }
    }

    /// No client address in the request's extensions (see the [module documentation](self)).
    pub fn no_address() -> Self {
        Unidentified::new(
            "no client address in the request, so it cannot be limited per client: serve an \
             axum router with into_make_service_with_connect_info::<SocketAddr>() (and the \
             floodgate-tower feature `axum`), use tonic's server (feature `tonic`), insert the \
             peer's SocketAddr into the request's extensions (hyper), or tell the extractor \
             where the address is (Extractor::client_address)",
        )
    }

    /// The explanation.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Unidentified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Unidentified {}

/// The address of the connection's peer, as the server left it in the request's extensions
/// (see the [module documentation](self) for the types read and their order); `None` if none
/// is there.
pub fn connection_address(parts: &Parts) -> Option<IpAddr> {
    let extensions = &parts.extensions;
    if let Some(peer) = extensions.get::<SocketAddr>() {
        return Some(peer.ip());
    }
    if let Some(ip) = extensions.get::<IpAddr>() {
        return Some(*ip);
    }
    #[cfg(feature = "axum")]
    if let Some(info) = extensions.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(info.0.ip());
    }
    #[cfg(feature = "tonic")]
    if let Some(peer) = extensions
        .get::<tonic::transport::server::TcpConnectInfo>()
        .and_then(tonic::transport::server::TcpConnectInfo::remote_addr)
    {
        return Some(peer.ip());
    }
    None
}

/// Networks whose addresses are proxies you run, for [`ClientAddress::forwarded_for`] and
/// [`ClientAddress::forwarded`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedProxies {
    networks: Vec<(IpAddr, u8)>,
}

impl TrustedProxies {
    /// Proxies at `networks`: addresses (`10.0.0.7`, `::1`) or networks in CIDR notation
    /// (`10.0.0.0/8`, `fd00::/8`). IPv4-mapped IPv6 addresses match as IPv4. A network that
    /// cannot be read is a [`ConfigError`] for field `trusted_proxies`, naming it.
    pub fn new<I>(networks: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let networks = networks
            .into_iter()
            .map(|n| network(n.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(TrustedProxies { networks })
    }

    /// Whether `ip` is in one of the networks.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.networks
            .iter()
            .any(|&(net, bits)| within(ip, net, bits))
    }
}

/// `text` as `(network address, prefix length)`.
fn network(text: &str) -> Result<(IpAddr, u8), ConfigError> {
    let bad = |reason| ConfigError::invalid("trusted_proxies", format!("{text:?}"), reason);
    let (address, bits) = match text.trim().split_once('/') {
        Some((address, bits)) => (address, Some(bits)),
        None => (text.trim(), None),
    };
    let ip: IpAddr = address
        .parse()
        .map_err(|_| bad("must be an IP address or a network such as 10.0.0.0/8"))?;
    let ip = ip.to_canonical();
    let most = if ip.is_ipv4() { 32 } else { 128 };
    let bits = match bits {
        None => most,
        Some(bits) => bits
            .parse::<u8>()
            .ok()
            .filter(|b| *b <= most)
            .ok_or_else(|| bad("the prefix length must be 0 to 32 (IPv4) or 0 to 128 (IPv6)"))?,
    };
    Ok((ip, bits))
}

/// Whether `ip` is in `net`/`bits` (both canonical).
fn within(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    let mask = |width: u32| -> u128 {
        if bits == 0 {
            0
        } else {
            (u128::MAX << (width - u32::from(bits))) & (u128::MAX >> (128 - width))
        }
    };
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let m = mask(32);
            u128::from(u32::from(a)) & m == u128::from(u32::from(b)) & m
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let m = mask(128);
            u128::from(a) & m == u128::from(b) & m
        }
        _ => false,
    }
}

type AddressFn = Box<dyn Fn(&Parts) -> Option<IpAddr> + Send + Sync>;

/// How an extractor finds the client's address. See the [module documentation](self).
pub struct ClientAddress {
    source: Source,
}

enum Source {
    Connection,
    Forwarded {
        header: HeaderName,
        rfc7239: bool,
        proxies: TrustedProxies,
    },
    Custom(AddressFn),
}

impl fmt::Debug for ClientAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Source::Connection => f.write_str("ClientAddress::connection"),
            Source::Forwarded {
                header, proxies, ..
            } => f
                .debug_struct("ClientAddress::forwarded")
                .field("header", header)
                .field("proxies", proxies)
                .finish(),
            Source::Custom(_) => f.write_str("ClientAddress::custom"),
        }
    }
}

impl Default for ClientAddress {
    fn default() -> Self {
        ClientAddress::connection()
    }
}

impl ClientAddress {
    /// The connection's peer ([`connection_address`]); a request without one is
    /// [`Unidentified`].
    pub fn connection() -> Self {
        ClientAddress {
            source: Source::Connection,
        }
    }

    /// The client behind `proxies`, read from `X-Forwarded-For` (see the [module
    /// documentation](self) for the walk). Needs the connection's peer as
    /// [`ClientAddress::connection`] does.
    pub fn forwarded_for(proxies: TrustedProxies) -> Self {
        ClientAddress {
            source: Source::Forwarded {
                header: HeaderName::from_static("x-forwarded-for"),
                rfc7239: false,
                proxies,
            },
        }
    }

    /// The client behind `proxies`, read from the `for=` parameters of RFC 7239's
    /// `Forwarded` (see the [module documentation](self)).
    pub fn forwarded(proxies: TrustedProxies) -> Self {
        ClientAddress {
            source: Source::Forwarded {
                header: HeaderName::from_static("forwarded"),
                rfc7239: true,
                proxies,
            },
        }
    }

    /// Whatever `f` answers. `None` is the caller's choice, not a mistake: such requests have
    /// no address, and an extractor keys them as one [`ANONYMOUS`](crate::ANONYMOUS) client.
    pub fn custom<F>(f: F) -> Self
    where
        F: Fn(&Parts) -> Option<IpAddr> + Send + Sync + 'static,
    {
        ClientAddress {
            source: Source::Custom(Box::new(f)),
        }
    }

    /// The client's address; `Ok(None)` only from a [`ClientAddress::custom`] function.
    pub fn read(&self, parts: &Parts) -> Result<Option<IpAddr>, Unidentified> {
        match &self.source {
            Source::Connection => connection_address(parts)
                .map(Some)
                .ok_or_else(Unidentified::no_address),
            Source::Forwarded {
                header,
                rfc7239,
                proxies,
            } => {
                let peer = connection_address(parts).ok_or_else(Unidentified::no_address)?;
                let values = parts
                    .headers
                    .get_all(header)
                    .iter()
                    .filter_map(|v| v.to_str().ok());
                let hops: Vec<Option<IpAddr>> = if *rfc7239 {
                    values.flat_map(forwarded_hops).collect()
                } else {
                    values
                        .flat_map(|v| v.split(','))
                        .map(|entry| hop(entry.trim()))
                        .collect()
                };
                Ok(Some(client_behind(peer, &hops, proxies)))
            }
            Source::Custom(f) => Ok(f(parts)),
        }
    }
}

/// The walk of the [module documentation](self): `hops` as written, left to right.
fn client_behind(peer: IpAddr, hops: &[Option<IpAddr>], proxies: &TrustedProxies) -> IpAddr {
    let mut client = peer;
    if !proxies.contains(peer) {
        return client;
    }
    for hop in hops.iter().rev() {
        match hop {
            Some(ip) => {
                client = *ip;
                if !proxies.contains(*ip) {
                    break;
                }
            }
            None => break,
        }
    }
    client.to_canonical()
}

/// One hop's address: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1` or `[2001:db8::1]:4711`;
/// `None` for anything else.
fn hop(text: &str) -> Option<IpAddr> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    text.strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .and_then(|inner| inner.parse().ok())
}

/// The `for=` addresses of one `Forwarded` value, left to right: each element (split at commas
/// outside quotes) gives its `for` parameter, unquoted; an element without one, or with a value
/// that is not an address (`unknown`, `_hidden`), gives `None`.
fn forwarded_hops(value: &str) -> Vec<Option<IpAddr>> {
    let mut elements = Vec::new();
    let mut quoted = false;
    let mut start = 0;
    for (i, c) in value.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                elements.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    elements.push(&value[start..]);
    elements
        .into_iter()
        .map(|element| {
            element.split(';').find_map(|pair| {
                let (name, value) = pair.trim().split_once('=')?;
                if !name.trim().eq_ignore_ascii_case("for") {
                    return None;
                }
                let value = value.trim();
                let value = value
                    .strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap_or(value);
                hop(value)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    fn parts(peer: Option<&str>, headers: &[(&str, &str)]) -> Parts {
        let mut builder = Request::builder().uri("/");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let mut parts = builder.body(()).unwrap().into_parts().0;
        if let Some(peer) = peer {
            parts
                .extensions
                .insert(SocketAddr::new(peer.parse().unwrap(), 4711));
        }
        parts
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn proxies() -> TrustedProxies {
        TrustedProxies::new(["10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.7"]).unwrap()
    }

    #[test]
    fn the_connection_is_read_and_its_absence_is_a_mistake_not_anonymous() {
        let by_connection = ClientAddress::connection();
        assert_eq!(
            by_connection.read(&parts(Some("203.0.113.9"), &[])),
            Ok(Some(ip("203.0.113.9")))
        );
        let e = by_connection.read(&parts(None, &[])).unwrap_err();
        assert!(e.message().contains("into_make_service_with_connect_info"));
        // A custom reader may answer none, on purpose.
        let none = ClientAddress::custom(|_| None);
        assert_eq!(none.read(&parts(None, &[])), Ok(None));
    }

    #[cfg(feature = "axum")]
    #[test]
    fn axums_connect_info_is_read() {
        let mut p = parts(None, &[]);
        p.extensions
            .insert(axum::extract::ConnectInfo(SocketAddr::new(
                ip("198.51.100.4"),
                1,
            )));
        assert_eq!(connection_address(&p), Some(ip("198.51.100.4")));
    }

    #[test]
    fn networks_are_read_and_matched() {
        let p = proxies();
        for inside in [
            "10.1.2.3",
            "::ffff:10.9.9.9",
            "2001:db8:ffff:1::1",
            "192.0.2.7",
        ] {
            assert!(p.contains(ip(inside)), "{inside}");
        }
        for outside in ["11.0.0.1", "192.0.2.8", "2001:db8:fffe::1"] {
            assert!(!p.contains(ip(outside)), "{outside}");
        }
        assert!(TrustedProxies::new(["0.0.0.0/0"])
            .unwrap()
            .contains(ip("1.2.3.4")));
        for bad in ["10.0.0.0/33", "ten", "::/129", "10.0.0.0/x"] {
            let e = TrustedProxies::new([bad]).unwrap_err().to_string();
            assert!(e.contains("`trusted_proxies`") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn x_forwarded_for_is_read_only_as_far_as_trusted_proxies_wrote_it() {
        let behind = ClientAddress::forwarded_for(proxies());
        let read = |peer, xff: &[&str]| {
            let headers: Vec<(&str, &str)> = xff.iter().map(|v| ("x-forwarded-for", *v)).collect();
            behind.read(&parts(Some(peer), &headers)).unwrap().unwrap()
        };
        // A client that talks to us directly cannot pick its address.
        assert_eq!(read("203.0.113.9", &["1.1.1.1"]), ip("203.0.113.9"));
        // Through one trusted proxy: the address it received the request from.
        assert_eq!(read("10.0.0.2", &["203.0.113.9"]), ip("203.0.113.9"));
        // A client's made-up entries are left of the real one, and never reached.
        assert_eq!(
            read("10.0.0.2", &["1.1.1.1, 2.2.2.2", "203.0.113.9, 10.0.0.3"]),
            ip("203.0.113.9")
        );
        // Ports and brackets, as some proxies write them.
        assert_eq!(read("10.0.0.2", &["[2001:db8::5]:443"]), ip("2001:db8::5"));
        assert_eq!(read("10.0.0.2", &["198.51.100.1:8080"]), ip("198.51.100.1"));
        // All trusted: the leftmost. None at all: the proxy itself.
        assert_eq!(read("10.0.0.2", &["10.0.0.5, 10.0.0.6"]), ip("10.0.0.5"));
        assert_eq!(read("10.0.0.2", &[]), ip("10.0.0.2"));
        // Garbage ends the walk at the last address read.
        assert_eq!(
            read("10.0.0.2", &["1.1.1.1, nonsense, 10.0.0.4"]),
            ip("10.0.0.4")
        );
        // No peer: a set-up mistake, as without proxies.
        assert!(behind
            .read(&parts(None, &[("x-forwarded-for", "1.1.1.1")]))
            .is_err());
    }

    #[test]
    fn forwarded_for_parameters_are_read_the_same_way() {
        let behind = ClientAddress::forwarded(proxies());
        let read = |value: &str| {
            behind
                .read(&parts(Some("10.0.0.2"), &[("forwarded", value)]))
                .unwrap()
                .unwrap()
        };
        assert_eq!(read("for=203.0.113.9;proto=https"), ip("203.0.113.9"));
        assert_eq!(
            read(r#"for=1.1.1.1, for="[2001:db8::17]:4711";by=10.0.0.2, for=10.0.0.9"#),
            ip("2001:db8::17")
        );
        assert_eq!(read("For=\"198.51.100.3:80\""), ip("198.51.100.3"));
        // An obfuscated hop ends the walk.
        assert_eq!(
            read("for=1.1.1.1, for=_hidden, for=10.0.0.9"),
            ip("10.0.0.9")
        );
        // X-Forwarded-For is not read by the Forwarded reader.
        assert_eq!(
            behind
                .read(&parts(Some("10.0.0.2"), &[("x-forwarded-for", "1.1.1.1")]))
                .unwrap(),
            Some(ip("10.0.0.2"))
        );
    }
}
