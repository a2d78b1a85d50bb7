//! Lease tokens: what `POST /v1/evaluate` hands out so that `POST /v1/release` can give the
//! request's leases back.
//!
//! A token carries the request's [`LeaseHandle`]s (the stage that issued each lease, its key and
//! its 128-bit id) and is signed, so the service never guesses a lease's limiter from the shape
//! of a key, and a caller can neither forge a token nor alter one to release someone else's
//! lease. Its shape is `v1.<payload>.<tag>`:
//! - `v1`: the format's version; another version is refused by name;
//! - `payload`: base64url (no padding) of the leases, each `stage \x1f key \x1f id` (id as 32 hex
//!   digits), separated by `\x1e`; stage names cannot hold either byte, keys are refused if
//!   they do;
//! - `tag`: base64url of the first 16 bytes of HMAC-SHA256(secret, `v1.` + payload).
//!
//! The token is opaque to clients: only its issuer reads it. The secret is the service's:
//! `FLOODGATE_LEASE_SECRET` (at least [`MIN_SECRET_BYTES`]), else one that the nodes sharing a
//! Redis store share through it, else a random one per process; nodes behind one load balancer
//! must sign alike, so that any of them accepts another's tokens. A secret can be replaced by
//! another ([`LeaseTokens::adopt`]); tokens signed with the one before are still accepted.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use floodgate::limiter::LeaseHandle;
use floodgate::store::Namespace;
use floodgate::LeaseId;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The current token format.
const VERSION: &str = "v1";
/// The shortest secret `FLOODGATE_LEASE_SECRET` may hold: 128 bits.
pub const MIN_SECRET_BYTES: usize = 16;
/// Bytes of the HMAC kept in a token: 128 bits, as much as a lease id.
const TAG_BYTES: usize = 16;
const FIELD: char = '\u{1f}';
const LEASE: char = '\u{1e}';

/// Why a token was refused. Every variant is the client's fault: a 400, never a 5xx.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// Not a token of any version this service knows.
    #[error("not a lease token from /v1/evaluate")]
    Malformed,
    /// A token of another format version.
    #[error("lease tokens of version `{0}` are not supported (this service issues v1)")]
    UnknownVersion(String),
    /// The signature does not match: the token was altered, or issued with another secret.
    #[error("the lease token was altered, or issued by a node that signs with another secret (nodes behind one load balancer sign alike when they share a Redis store, or when every one has the same FLOODGATE_LEASE_SECRET)")]
    BadSignature,
}

/// Issues and opens lease tokens under one secret, and the one it replaced. Its `Debug` output
/// never shows a secret. Clones share their secrets.
#[derive(Clone)]
pub struct LeaseTokens {
    secrets: std::sync::Arc<arc_swap::ArcSwap<Secrets>>,
}

/// The secret that signs, and the one it replaced, which still opens tokens.
struct Secrets {
    current: Vec<u8>,
    previous: Option<Vec<u8>>,
}

impl std::fmt::Debug for LeaseTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseTokens").finish_non_exhaustive()
    }
}

impl LeaseTokens {
    /// Tokens signed with `secret` (any bytes; 32 random bytes or more is right).
    pub fn new(secret: impl Into<Vec<u8>>) -> LeaseTokens {
        LeaseTokens {
            secrets: std::sync::Arc::new(arc_swap::ArcSwap::from_pointee(Secrets {
                current: secret.into(),
                previous: None,
            })),
        }
    }

    /// Tokens signed with 32 random bytes: valid only in this process.
    pub fn random() -> LeaseTokens {
        LeaseTokens::new(rand::random::<[u8; 32]>().to_vec())
    }

    /// Signs with `secret` from now on, and still opens the tokens of the secret signing until
    /// now; `false` (and nothing changes) when `secret` is the one signing already.
    pub fn adopt(&self, secret: &[u8]) -> bool {
        let now = self.secrets.load();
        if constant_time_eq(&now.current, secret) {
            return false;
        }
        self.secrets.store(std::sync::Arc::new(Secrets {
            current: secret.to_vec(),
            previous: Some(now.current.clone()),
        }));
        true
    }

    fn tag(secret: &[u8], signed: &str) -> [u8; TAG_BYTES] {
        // HMAC accepts keys of any length; this cannot fail.
        let mut mac = <Hmac<Sha256>>::new_from_slice(secret)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(signed.as_bytes());
        let full = mac.finalize().into_bytes();
        let mut tag = [0u8; TAG_BYTES];
        tag.copy_from_slice(&full[..TAG_BYTES]);
        tag
    }

    /// The token for `leases`; `None` when there are none, or a key holds a separator byte
    /// (such a lease is not handed out: it expires after its TTL).
    pub fn issue(&self, leases: &[LeaseHandle]) -> Option<String> {
        if leases.is_empty() || leases.iter().any(|l| l.key().contains([FIELD, LEASE])) {
            return None;
        }
        let payload: Vec<String> = leases
            .iter()
            .map(|l| format!("{}{FIELD}{}{FIELD}{}", l.limiter(), l.key(), l.id()))
            .collect();
        Some(self.seal(VERSION, &payload.join(&LEASE.to_string())))
    }

    /// The leases of a token this service issued.
    pub fn open(&self, token: &str) -> Result<Vec<LeaseHandle>, TokenError> {
        let payload = self.unseal(VERSION, token)?;
        payload
            .split(LEASE)
            .map(|lease| {
                let mut fields = lease.split(FIELD);
                let (Some(stage), Some(key), Some(id), None) =
                    (fields.next(), fields.next(), fields.next(), fields.next())
                else {
                    return Err(TokenError::Malformed);
                };
                let stage = Namespace::new(stage).map_err(|_| TokenError::Malformed)?;
                let id: LeaseId = id.parse().map_err(|_| TokenError::Malformed)?;
                Ok(LeaseHandle::new(stage, key, id))
            })
            .collect()
    }

    /// `version.payload.tag`: `payload` in base64url (no padding), signed with the current
    /// secret. Any format of signed token the service hands out (leases, reservations).
    pub(crate) fn seal(&self, version: &str, payload: &str) -> String {
        let signed = format!("{version}.{}", URL_SAFE_NO_PAD.encode(payload));
        let tag = URL_SAFE_NO_PAD.encode(Self::tag(&self.secrets.load().current, &signed));
        format!("{signed}.{tag}")
    }

    /// The payload of a token [`LeaseTokens::seal`] made under `version` with the current
    /// secret or the one before. Another version of the same letter is refused by name.
    pub(crate) fn unseal(&self, version: &str, token: &str) -> Result<String, TokenError> {
        let mut parts = token.split('.');
        let (Some(found), Some(payload), Some(tag), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        if found != version {
            let letter = &version[..1];
            let known_shape = found.len() <= 8
                && found.starts_with(letter)
                && found[1..].bytes().all(|b| b.is_ascii_digit());
            return Err(if known_shape {
                TokenError::UnknownVersion(found.to_string())
            } else {
                TokenError::Malformed
            });
        }
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| TokenError::Malformed)?;
        let signed = format!("{version}.{payload}");
        let secrets = self.secrets.load();
        let signed_by = |secret: &[u8]| constant_time_eq(&tag, &Self::tag(secret, &signed));
        if !signed_by(&secrets.current) && !secrets.previous.as_deref().is_some_and(signed_by) {
            return Err(TokenError::BadSignature);
        }
        // Signed by us: from here on a failure would be our own bug, but it is still a 400.
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| TokenError::Malformed)?;
        String::from_utf8(payload).map_err(|_| TokenError::Malformed)
    }
}

/// Compares secrets without an early exit on the first differing byte.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(stage: &str, key: &str, id: u128) -> LeaseHandle {
        LeaseHandle::new(Namespace::new(stage).unwrap(), key, LeaseId(id))
    }

    #[test]
    fn tokens_round_trip_for_any_key() {
        let tokens = LeaseTokens::new(b"secret".to_vec());
        for key in ["alice", "fleet", "a.b.c", "é ü/..:{}", "", "v1.x.y"] {
            let leases = [
                handle("concurrency", key, 0xdead_beef),
                handle("fleet", "fleet", u128::MAX),
            ];
            let token = tokens.issue(&leases).unwrap();
            assert!(token.starts_with("v1."), "{token}");
            assert_eq!(tokens.open(&token).unwrap(), leases, "{key:?}");
        }
        assert_eq!(tokens.issue(&[]), None);
        assert_eq!(tokens.issue(&[handle("concurrency", "a\u{1f}b", 1)]), None);
    }

    #[test]
    fn altered_forged_and_foreign_tokens_are_refused() {
        let tokens = LeaseTokens::new(b"secret".to_vec());
        let token = tokens.issue(&[handle("concurrency", "alice", 7)]).unwrap();
        // Change one character of the payload, then of the tag.
        let (signed, tag) = token.rsplit_once('.').unwrap();
        let mut altered = signed.to_string().into_bytes();
        let i = altered.len() - 1;
        altered[i] = if altered[i] == b'A' { b'B' } else { b'A' };
        let altered = format!("{}.{tag}", String::from_utf8(altered).unwrap());
        assert_eq!(tokens.open(&altered), Err(TokenError::BadSignature));
        let mut bad_tag = tag.to_string();
        bad_tag.replace_range(0..1, if tag.starts_with('A') { "B" } else { "A" });
        assert_eq!(
            tokens.open(&format!("{signed}.{bad_tag}")),
            Err(TokenError::BadSignature)
        );
        // Issued under another secret.
        let other = LeaseTokens::new(b"other".to_vec());
        assert_eq!(other.open(&token), Err(TokenError::BadSignature));
        // Not a token, or of another version.
        for garbage in ["", "nope", "ff.a.user", "v1..", "v1.!!.!!", "a.b.c.d"] {
            assert!(tokens.open(garbage).is_err(), "{garbage:?}");
        }
        assert_eq!(
            tokens.open(&token.replacen("v1.", "v2.", 1)),
            Err(TokenError::UnknownVersion("v2".into()))
        );
        assert!(!format!("{tokens:?}").contains("secret"));
    }

    #[test]
    fn an_adopted_secret_signs_and_the_one_before_still_opens() {
        let tokens = LeaseTokens::new(b"first".to_vec());
        let old = tokens.issue(&[handle("concurrency", "alice", 7)]).unwrap();
        assert!(!tokens.adopt(b"first"));
        assert!(tokens.adopt(b"second"));
        let new = tokens.issue(&[handle("concurrency", "bob", 8)]).unwrap();
        assert!(tokens.open(&old).is_ok() && tokens.open(&new).is_ok());
        let second = LeaseTokens::new(b"second".to_vec());
        assert!(second.open(&new).is_ok());
        assert_eq!(second.open(&old), Err(TokenError::BadSignature));
        // Two changes later, the first secret opens nothing.
        assert!(tokens.adopt(b"third"));
        assert_eq!(tokens.open(&old), Err(TokenError::BadSignature));
    }

    #[test]
    fn secrets_compare_exactly() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        assert!(!constant_time_eq(b"s3cret", b"s3creT"));
        assert!(!constant_time_eq(b"s3cret", b"s3cre"));
    }
}
