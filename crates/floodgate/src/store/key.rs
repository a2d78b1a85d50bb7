//! The keys the memory store keeps: what it stores for a key it is asked about by reference.
//!
//! A decision looks a key up by its borrowed form (`&str`, `&u64`) and copies it only when the
//! key is new. For string keys the copy is a [`Key`]: up to 24 bytes (on 64-bit targets) are
//! kept inline, in the table's own entry, so checking a held key reads no memory beyond the
//! entry (a `String` would send every key comparison to a heap buffer of its own, one more
//! cache miss per decision at a million keys) and a new short key costs no allocation of its
//! own. A store of `Key`s is looked up with `&str` (`key.as_str()` for a `String` in hand).

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use compact_str::CompactString;

/// An owned string key as the memory store keeps it: the bytes of a key that fits in the size
/// of a `String` (24 bytes on 64-bit targets) inline, a longer one on the heap. Hashes, compares and borrows as
/// the `str` it holds, so a store of `Key`s is looked up with `&str`.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key(CompactString);

impl Key {
    /// A key holding a copy of `key`.
    pub fn new(key: &str) -> Key {
        Key(CompactString::new(key))
    }

    /// The key as a string slice.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As the `str` it borrows as: the store hashes the borrowed form to find it.
        self.as_str().hash(state)
    }
}

impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl Deref for Key {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<&str> for Key {
    fn from(key: &str) -> Key {
        Key::new(key)
    }
}

impl From<String> for Key {
    fn from(key: String) -> Key {
        Key(CompactString::from(key))
    }
}

impl PartialEq<str> for Key {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Key {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An owned key type the memory store can keep for keys it is given as `&Q`: it borrows as
/// `Q` (and must hash and compare as `Q` does, as `Borrow` requires) and is made from a `&Q`
/// when the key is first stored.
///
/// Implemented for every `Clone` type as its own owned form (`u64` looked up with `&u64`), and
/// for [`Key`], `String` and `Box<str>` looked up with `&str`, `Vec<u8>` and `Box<[u8]>` with
/// `&[u8]`.
pub trait OwnedKey<Q: ?Sized>: Borrow<Q> {
    /// The copy of `key` the store keeps.
    fn from_borrowed(key: &Q) -> Self;
}

impl<K: Clone> OwnedKey<K> for K {
    fn from_borrowed(key: &K) -> K {
        key.clone()
    }
}

impl OwnedKey<str> for Key {
    fn from_borrowed(key: &str) -> Key {
        Key::new(key)
    }
}

impl OwnedKey<str> for String {
    fn from_borrowed(key: &str) -> String {
        key.to_owned()
    }
}

impl OwnedKey<str> for Box<str> {
    fn from_borrowed(key: &str) -> Box<str> {
        key.into()
    }
}

impl OwnedKey<[u8]> for Vec<u8> {
    fn from_borrowed(key: &[u8]) -> Vec<u8> {
        key.to_vec()
    }
}

impl OwnedKey<[u8]> for Box<[u8]> {
    fn from_borrowed(key: &[u8]) -> Box<[u8]> {
        key.into()
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn hashes_and_compares_as_its_str() {
        let hasher = foldhash::fast::RandomState::default();
        for s in [
            "",
            "a",
            "user-123456",
            "a key longer than twenty-four bytes, on the heap",
        ] {
            let key = Key::new(s);
            assert_eq!(hasher.hash_one(&key), hasher.hash_one(s));
            assert_eq!(key, *s);
            assert_eq!(key.as_str(), s);
            assert_eq!(Key::from(s.to_string()), key);
            assert_eq!(<Key as OwnedKey<str>>::from_borrowed(s), key);
            assert_eq!(format!("{key}"), s);
            assert_eq!(format!("{key:?}"), format!("{s:?}"));
        }
    }

    #[test]
    fn short_keys_need_no_allocation_of_their_own() {
        let inline = size_of::<String>();
        assert_eq!(size_of::<Key>(), inline);
        let fits = "k".repeat(inline);
        assert!(!Key::new(&fits).0.is_heap_allocated());
        assert!(Key::new(&(fits + "k")).0.is_heap_allocated());
    }
}
