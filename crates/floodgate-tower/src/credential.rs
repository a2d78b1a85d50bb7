//! Credentials become limiter keys only through a keyed hash, and are never shown.
//!
//! **The rule.** A raw credential (an API key or a bearer token: whatever
//! [`Extractor::credential`](crate::Extractor::credential) returns) is never a limiter key, a
//! message or `Debug` output (other `Authorization` schemes, `Basic` included, are not read at
//! all: such a request is keyed by its address). The limiter key of a request carrying
//! credential `c` is
//!
//! ```text
//! key:<h>    h = lowercase hex of the first 16 bytes of HMAC-SHA256(MAC key, c)
//! ```
//!
//! (`key:` and 32 hex digits; 128 bits, so two credentials never share a key in practice).
//! Where a user is shown to people (refusal bodies and gRPC messages, the `Debug` of
//! [`RequestInfo`](crate::RequestInfo)), such a key appears only as its fingerprint, `key:`,
//! its first 8 hex digits and `...` (see [`shown_user`]). Identities that are not secrets,
//! the client address (`ip:…`) and `anonymous`, are keys and shown as they are, as is any user
//! a custom extractor makes, except that a `key:` user not in the hashed form is shown as
//! `key:...`, in case it holds a raw credential.
//!
//! **The MAC key.** Every node that shares a store must use the same MAC key, so that a user
//! maps to the same limiter key on every node: configure one with
//! [`Extractor::credential_key`](crate::Extractor::credential_key) and
//! [`CredentialKey::from_bytes`] or [`CredentialKey::from_secret`], read from the deployment's
//! secret store. Without one, an extractor uses [`CredentialKey::process`], a random key drawn
//! once per process: every extractor of the process agrees, but nodes sharing a store count
//! each user separately, and after a restart every user starts with fresh limiter state (the
//! old entries expire as usual). The MAC key is never printed: `Debug` shows only
//! [`CredentialKey::id`].
//!
//! The plan lookup ([`Extractor::plan_lookup`](crate::Extractor::plan_lookup)) and
//! [`TestMode::KeyPrefix`](crate::TestMode::KeyPrefix) still see the raw credential, since
//! plans are looked up by the key the customer holds; they must not log it.

use std::borrow::Cow;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

use floodgate::ConfigError;
use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The prefix of the limiter keys made from credentials.
const PREFIX: &str = "key:";

/// Hex digits of a limiter key made from a credential (16 bytes).
const KEY_HEX: usize = 32;

/// Hex digits of a fingerprint.
const FINGERPRINT_HEX: usize = 8;

/// The shortest MAC key [`CredentialKey::from_secret`] accepts, in bytes.
pub const MIN_SECRET_LEN: usize = 16;

/// The MAC key that turns credentials into limiter keys (see the
/// [module documentation](self)). Cheap to clone; `Debug` shows only its [`id`](Self::id).
#[derive(Clone)]
pub struct CredentialKey {
    /// HMAC-SHA256 keyed with the MAC key, before any message: cloned per credential, which
    /// saves hashing the key's two padded blocks every time.
    mac: Hmac<Sha256>,
}

impl CredentialKey {
    /// A MAC key of 32 bytes (as many as SHA-256 produces, the size HMAC-SHA256 recommends).
    pub fn from_bytes(key: [u8; 32]) -> Self {
        CredentialKey { mac: keyed(&key) }
    }

    /// A MAC key of any length from [`MIN_SECRET_LEN`] (16) bytes up (longer than 64 bytes, it
    /// is hashed first, as HMAC does). A shorter secret is refused, naming the field
    /// `credential_key` and giving only the secret's length.
    pub fn from_secret(secret: &[u8]) -> Result<Self, ConfigError> {
        if secret.len() < MIN_SECRET_LEN {
            return Err(ConfigError::invalid(
                "credential_key",
                format!("{} bytes", secret.len()),
                "must be at least 16 bytes",
            ));
        }
        Ok(CredentialKey { mac: keyed(secret) })
    }

    /// A new random 32-byte MAC key, from the operating system's generator.
    pub fn random() -> Self {
        Self::from_bytes(random_bytes())
    }

    /// This process's random MAC key: drawn once, on first use, and the same on every call
    /// after (the default of every [`Extractor`](crate::Extractor)).
    pub fn process() -> Self {
        static PROCESS: OnceLock<CredentialKey> = OnceLock::new();
        PROCESS.get_or_init(CredentialKey::random).clone()
    }

    /// The limiter key of `credential`: `key:` and 32 lowercase hex digits, the first 16
    /// bytes of HMAC-SHA256(this key, `credential`). The same credential gives the same key
    /// under the same MAC key, on every node.
    pub fn user_key(&self, credential: &str) -> String {
        let tag = self.tag(credential.as_bytes());
        let mut key = String::with_capacity(PREFIX.len() + KEY_HEX);
        key.push_str(PREFIX);
        push_hex(&mut key, &tag[..KEY_HEX / 2]);
        key
    }

    /// 8 lowercase hex digits naming this MAC key without revealing it (the start of its MAC
    /// of a fixed label): equal on nodes configured with the same key, different otherwise
    /// (but for a 2⁻³² chance), to check that nodes sharing a store agree.
    pub fn id(&self) -> String {
        let tag = self.tag(b"floodgate-tower credential key id");
        let mut id = String::with_capacity(FINGERPRINT_HEX);
        push_hex(&mut id, &tag[..FINGERPRINT_HEX / 2]);
        id
    }

    fn tag(&self, message: &[u8]) -> [u8; 32] {
        let mut mac = self.mac.clone();
        mac.update(message);
        mac.finalize().into_bytes().into()
    }
}

impl Default for CredentialKey {
    /// [`CredentialKey::process`].
    fn default() -> Self {
        CredentialKey::process()
    }
}

impl fmt::Debug for CredentialKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CredentialKey")
            .field("id", &self.id())
            .finish_non_exhaustive()
    }
}

/// How `user` is shown to people: a limiter key made from a credential (`key:` and 32 hex
/// digits) as its fingerprint, `key:` and its first 8 hex digits and `...`; any other `key:`
/// user as `key:...`; every other user (`ip:…`, `anonymous`, a custom extractor's) unchanged.
pub fn shown_user(user: &str) -> Cow<'_, str> {
    let Some(rest) = user.strip_prefix(PREFIX) else {
        return Cow::Borrowed(user);
    };
    if is_hashed(rest) {
        Cow::Owned(format!("{PREFIX}{}...", &rest[..FINGERPRINT_HEX]))
    } else {
        Cow::Borrowed("key:...")
    }
}

/// `text` with every user key in it shown as [`shown_user`] shows it: a `key:` not preceded by
/// a letter, digit, `_` or `-`, through the next whitespace or `,;)]}"'` character.
pub(crate) fn redact(text: &str) -> Cow<'_, str> {
    if !text.contains(PREFIX) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(PREFIX) {
        let starts_word = rest[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '-'));
        let after = &rest[at + PREFIX.len()..];
        let end = after
            .find(|c: char| c.is_whitespace() || ",;)]}\"'".contains(c))
            .unwrap_or(after.len());
        out.push_str(&rest[..at]);
        if starts_word {
            out.push_str(&shown_user(&rest[at..at + PREFIX.len() + end]));
            rest = &after[end..];
        } else {
            out.push_str(PREFIX);
            rest = after;
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// HMAC-SHA256 keyed with `secret`.
fn keyed(secret: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of every length (hashing long ones, padding short ones): no error.
    <Hmac<Sha256> as KeyInit>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"))
}

/// Whether `rest` (after `key:`) is a hashed credential: exactly 32 lowercase hex digits.
fn is_hashed(rest: &str) -> bool {
    rest.len() == KEY_HEX && rest.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
}

/// 32 bytes from the operating system's generator. Should it fail (it does not on supported
/// platforms), the bytes come from the standard library's per-process random hash keys
/// instead: a weaker but still unpredictable key is better than refusing to build the
/// middleware, which must never become the outage.
fn random_bytes() -> [u8; 32] {
    let mut bytes = [0u8; 32];
    if getrandom::fill(&mut bytes).is_err() {
        for (i, chunk) in bytes.chunks_mut(8).enumerate() {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_usize(i);
            chunk.copy_from_slice(&h.finish().to_le_bytes());
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> CredentialKey {
        CredentialKey::from_bytes([byte; 32])
    }

    #[test]
    fn the_same_credential_gives_the_same_key_under_the_same_mac_key_only() {
        let a = key(1).user_key("sk_live_secret");
        assert_eq!(a, key(1).user_key("sk_live_secret"));
        assert_eq!(a, key(1).clone().user_key("sk_live_secret"));
        assert_ne!(a, key(2).user_key("sk_live_secret"));
        assert_ne!(a, key(1).user_key("sk_live_secreT"));
        assert_ne!(a, CredentialKey::random().user_key("sk_live_secret"));
        assert!(
            a.starts_with("key:") && a.len() == 36 && is_hashed(&a[4..]),
            "{a}"
        );
        assert!(!a.contains("sk_live"));
        // The process key is one key.
        let p = CredentialKey::process().user_key("sk_live_secret");
        assert_eq!(p, CredentialKey::default().user_key("sk_live_secret"));
    }

    #[test]
    fn keys_are_hmac_sha256_truncated_to_16_bytes() {
        // RFC 4231, test case 2: key "Jefe", data "what do ya want for nothing?". The key is
        // below the accepted minimum, so it is padded the way HMAC pads it (with zero bytes
        // to the block size), which gives the same MAC.
        let mut jefe = [0u8; 64];
        jefe[..4].copy_from_slice(b"Jefe");
        let k = CredentialKey::from_secret(&jefe).unwrap();
        assert_eq!(
            k.user_key("what do ya want for nothing?"),
            "key:5bdcc146bf60754e6a042426089575c7"
        );
    }

    #[test]
    fn short_secrets_are_refused_without_printing_them() {
        let e = CredentialKey::from_secret(b"hunter2").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("credential_key") && text.contains("7 bytes"),
            "{text}"
        );
        assert!(!text.contains("hunter2"), "{text}");
        assert!(CredentialKey::from_secret(&[7; MIN_SECRET_LEN]).is_ok());
    }

    #[test]
    fn debug_shows_an_id_never_the_key() {
        let secret = *b"correct horse battery staple!!!!";
        let k = CredentialKey::from_bytes(secret);
        let shown = format!("{k:?}");
        assert_eq!(shown, format!("CredentialKey {{ id: {:?}, .. }}", k.id()));
        assert!(!shown.contains("correct"));
        let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
        assert!(!shown.contains(&hex[..8]));
        assert_eq!(k.id().len(), 8);
        assert_eq!(k.id(), CredentialKey::from_bytes(secret).id());
        assert_ne!(k.id(), key(1).id());
    }

    #[test]
    fn users_are_shown_as_fingerprints_or_as_they_are() {
        let user = key(1).user_key("sk_live_secret");
        assert_eq!(shown_user(&user), format!("{}...", &user[..12]));
        assert_eq!(shown_user("ip:10.0.0.1"), "ip:10.0.0.1");
        assert_eq!(shown_user("anonymous"), "anonymous");
        assert_eq!(shown_user("alice"), "alice");
        assert_eq!(shown_user("key:sk_live_secret"), "key:...");
        assert_eq!(
            shown_user("key:ABCDEF0123456789ABCDEF0123456789"),
            "key:..."
        );
    }

    #[test]
    fn redaction_rewrites_every_key_in_a_message() {
        let user = key(1).user_key("sk_live_secret");
        let message = format!("user {user} already has 1 requests in flight; ({user}), {user}");
        let short = &user[..12];
        assert_eq!(
            redact(&message),
            format!("user {short}... already has 1 requests in flight; ({short}...), {short}...")
        );
        assert_eq!(redact("user key:sk_x, then"), "user key:..., then");
        assert_eq!(redact("monkey:business"), "monkey:business");
        assert_eq!(redact("plan free allows 5"), "plan free allows 5");
        assert_eq!(redact("key:"), "key:...");
    }
}
