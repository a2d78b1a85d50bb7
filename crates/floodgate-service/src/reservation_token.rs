//! Reservation tokens: what `POST /v1/reserve` hands out so that `POST /v1/settle`, on any node
//! sharing the store, can settle the reservation.
//!
//! A token is signed as lease tokens are ([`LeaseTokens::seal`], the same secret), so a caller
//! can neither forge one nor change its estimate. Its shape is `r1.<payload>.<tag>`, the
//! payload holding `limit \x1f key \x1f estimate \x1f id \x1f expires`: the named limit, the
//! key, the estimate taken (cost units), a random 128-bit id (what "settled once" is
//! remembered by) and the instant after which it can no longer be settled (nanoseconds since
//! the Unix epoch). The token is opaque to clients.

use floodgate::{LeaseId, Nanos};

use crate::lease_token::{LeaseTokens, TokenError};

/// The current format.
const VERSION: &str = "r1";
const FIELD: char = '\u{1f}';

/// What a reservation token holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The named limit the estimate was taken from.
    pub limit: String,
    /// The key, without the limit's namespace.
    pub key: String,
    /// The estimate taken, in the limit's cost units.
    pub estimate: u64,
    /// The reservation's random id.
    pub id: LeaseId,
    /// The last instant it can be settled.
    pub expires: Nanos,
}

impl Held {
    /// Whether the key can travel in a token: it must not hold the separator byte.
    pub fn fits(key: &str) -> bool {
        !key.contains(FIELD)
    }

    /// The signed token; the key must [`Held::fits`].
    pub fn seal(&self, tokens: &LeaseTokens) -> String {
        let payload = [
            self.limit.clone(),
            self.key.clone(),
            self.estimate.to_string(),
            self.id.to_string(),
            self.expires.0.to_string(),
        ]
        .join(&FIELD.to_string());
        tokens.seal(VERSION, &payload)
    }

    /// What a token this service (or a node signing alike) issued holds.
    pub fn open(tokens: &LeaseTokens, token: &str) -> Result<Held, TokenError> {
        let payload = tokens.unseal(VERSION, token)?;
        let fields: Vec<&str> = payload.split(FIELD).collect();
        let [limit, key, estimate, id, expires] = fields[..] else {
            return Err(TokenError::Malformed);
        };
        let number = |text: &str| text.parse::<u64>().map_err(|_| TokenError::Malformed);
        Ok(Held {
            limit: limit.to_string(),
            key: key.to_string(),
            estimate: number(estimate)?,
            id: id.parse().map_err(|_| TokenError::Malformed)?,
            expires: Nanos(number(expires)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(key: &str) -> Held {
        Held {
            limit: "tokens".into(),
            key: key.into(),
            estimate: 4_096,
            id: LeaseId(u128::MAX - 7),
            expires: Nanos(1_800_000_000_000_000_000),
        }
    }

    #[test]
    fn tokens_round_trip_and_cannot_be_altered() {
        let tokens = LeaseTokens::new(b"secret".to_vec());
        for key in ["alice", "", "é ü/..:{}", "r1.x.y"] {
            let token = held(key).seal(&tokens);
            assert!(token.starts_with("r1."), "{token}");
            assert_eq!(Held::open(&tokens, &token).unwrap(), held(key));
        }
        let token = held("alice").seal(&tokens);
        let other = LeaseTokens::new(b"other".to_vec());
        assert_eq!(Held::open(&other, &token), Err(TokenError::BadSignature));
        // A lease token is not a reservation, nor the other way round.
        assert!(tokens.open(&token).is_err());
        let (signed, tag) = token.rsplit_once('.').unwrap();
        let forged = format!("{signed}x.{tag}");
        assert!(Held::open(&tokens, &forged).is_err());
        assert_eq!(
            Held::open(&tokens, &token.replacen("r1.", "r2.", 1)),
            Err(TokenError::UnknownVersion("r2".into()))
        );
        assert!(!Held::fits("a\u{1f}b"));
    }
}
