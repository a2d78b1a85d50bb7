//! Namespaces: each limiter's own part of a shared store.
//!
//! Several limiters share one store (one memory store per process, one Redis for a fleet), and
//! two of them may well count the same key (a user limited per second by one and per hour by
//! another). Each limiter therefore writes under its own [`Namespace`]: the key the store sees
//! is `namespace:key` ([`Namespace::key`]), a plain string that a remote store can use as its
//! own key unchanged. A namespace is 1 to 64 bytes of ASCII letters, digits and `_ - . /`: no
//! `:`, so that `namespace:key` splits back unambiguously at its first `:`; no `{` or `}`, which
//! Redis Cluster reads as hash tags; no spaces or control characters, which would make keys hard
//! to read in logs and tools.
//!
//! Keys themselves may be any string. A namespaced key of up to [`INLINE_KEY_BYTES`] bytes is
//! built on the stack, so checking an existing key allocates nothing.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use crate::ConfigError;

/// The longest namespaced key ([`ScopedKey`]) built without a heap allocation, in bytes.
pub const INLINE_KEY_BYTES: usize = 96;

/// A limiter's part of a shared store: 1 to 64 bytes of ASCII letters, digits and `_ - . /`
/// (no `:`, so `namespace:key` splits at its first `:`; no `{`/`}`, which Redis Cluster reads
/// as hash tags). Cheap to clone (a reference-counted string).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(Arc<str>);

impl Namespace {
    /// Validates `name` (see [`Namespace`]); the error names the field
    /// `namespace` and the value.
    pub fn new(name: &str) -> Result<Namespace, ConfigError> {
        let valid_byte =
            |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/');
        if name.is_empty() || name.len() > 64 {
            return Err(ConfigError::invalid(
                "namespace",
                format!("{name:?}"),
                "must be 1 to 64 bytes long",
            ));
        }
        if !name.bytes().all(valid_byte) {
            return Err(ConfigError::invalid(
                "namespace",
                format!("{name:?}"),
                "may hold only ASCII letters, digits and `_ - . /`",
            ));
        }
        Ok(Namespace(Arc::from(name)))
    }

    /// The namespace's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The store key of `key` in this namespace: `namespace:key`.
    pub fn key(&self, key: &str) -> ScopedKey {
        ScopedKey::new(&self.0, key)
    }

    /// Splits a store key built by [`Namespace::key`] back into `(namespace, key)`; `None` when
    /// it holds no `:`.
    pub fn split(store_key: &str) -> Option<(&str, &str)> {
        store_key.split_once(':')
    }
}

impl PartialEq<str> for Namespace {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Namespace {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl fmt::Debug for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A namespaced store key, `namespace:key`, built on the stack when it fits in
/// [`INLINE_KEY_BYTES`] bytes. Dereferences to `str`.
#[derive(Clone)]
pub struct ScopedKey(Repr);

#[derive(Clone)]
enum Repr {
    Inline {
        len: u8,
        bytes: [u8; INLINE_KEY_BYTES],
    },
    Heap(String),
}

impl ScopedKey {
    fn new(namespace: &str, key: &str) -> ScopedKey {
        let len = namespace.len() + 1 + key.len();
        if len > INLINE_KEY_BYTES {
            let mut s = String::with_capacity(len);
            s.push_str(namespace);
            s.push(':');
            s.push_str(key);
            return ScopedKey(Repr::Heap(s));
        }
        let mut bytes = [0u8; INLINE_KEY_BYTES];
        bytes[..namespace.len()].copy_from_slice(namespace.as_bytes());
        bytes[namespace.len()] = b':';
        bytes[namespace.len() + 1..len].copy_from_slice(key.as_bytes());
        // `len ≤ INLINE_KEY_BYTES = 96` fits in a u8.
        ScopedKey(Repr::Inline {
            len: len as u8,
            bytes,
        })
    }
}

impl Deref for ScopedKey {
    type Target = str;

    fn deref(&self) -> &str {
        match &self.0 {
            // Two whole `str`s joined by an ASCII byte are valid UTF-8, so this never fails; the
            // check costs a few nanoseconds and keeps the crate's unsafe code to its lock.
            Repr::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            Repr::Heap(s) => s,
        }
    }
}

impl fmt::Debug for ScopedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl fmt::Display for ScopedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_namespace_colon_key_inline_or_not() {
        let ns = Namespace::new("request_rate").unwrap();
        assert_eq!(&*ns.key("alice"), "request_rate:alice");
        assert_eq!(&*ns.key(""), "request_rate:");
        assert_eq!(&*ns.key("a:b.c/é"), "request_rate:a:b.c/é");
        let long = "x".repeat(200);
        assert_eq!(&*ns.key(&long), format!("request_rate:{long}"));
        let edge = "y".repeat(INLINE_KEY_BYTES - "request_rate:".len());
        assert_eq!(ns.key(&edge).len(), INLINE_KEY_BYTES);
        assert!(matches!(ns.key(&edge).0, Repr::Inline { .. }));
        assert_eq!(
            Namespace::split(&ns.key("a:b")),
            Some(("request_rate", "a:b"))
        );
    }

    #[test]
    fn bad_namespaces_are_refused_with_the_value() {
        for bad in [
            "",
            "a:b",
            "{tag}",
            "with space",
            "tab\t",
            &"n".repeat(65),
            "é",
        ] {
            let e = Namespace::new(bad).unwrap_err().to_string();
            assert!(e.contains("`namespace`"), "{e}");
        }
        for good in [
            "fleet",
            "per-user.v2",
            "edge/remote_address",
            &"n".repeat(64),
        ] {
            assert_eq!(Namespace::new(good).unwrap().as_str(), good);
        }
    }
}
