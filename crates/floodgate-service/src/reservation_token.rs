//! Reservation tokens: what `POST /v1/reserve` hands out so that `POST /v1/settle`, on any node
//! sharing the store, can settle the reservation.
//!
//! A token is signed as lease tokens are (with [`LeaseTokens`]' secret), so a caller
//! can neither forge one nor change its estimate. Its shape is `r1.<payload>.<tag>`, the
//! payload holding `limit \x1f key \x1f estimate \x1f id \x1f expires`: the named limit, the
//! key, the estimate taken (cost units), a random 128-bit id (what "settled once" is
//! remembered by) and the instant after which it can no longer be settled (nanoseconds since
//! the Unix epoch). The token is opaque to clients.
//!
//! A reservation through the pipeline ([`HeldStages`]) is `p1.<payload>.<tag>`: `id \x1f
//! expires`, then per hold `\x1e stage \x1d level \x1d plan \x1d key \x1d estimate`, the key
//! with its limiter's namespace.

use floodgate::{LeaseId, Nanos};

use crate::lease_token::{LeaseTokens, TokenError};

/// The current format.
const VERSION: &str = "r1";
/// The current format of reservations through the pipeline.
const STAGES_VERSION: &str = "p1";
const FIELD: char = '\u{1f}';
const HOLD: char = '\u{1e}';
const PART: char = '\u{1d}';

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
    /// Whether the key can travel in a token: it must not hold a separator byte (0x1D to
    /// 0x1F).
    pub fn fits(key: &str) -> bool {
        !key.contains([FIELD, HOLD, PART])
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

/// One stage's hold, as a pipeline reservation token carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageHold {
    /// The stage.
    pub stage: String,
    /// 0 for the stage's own limit, `i` for its `i`-th level.
    pub level: usize,
    /// The plan whose algorithm counted it.
    pub plan: String,
    /// The key, with its limiter's namespace.
    pub key: String,
    /// The estimate taken there.
    pub estimate: u64,
}

/// What a pipeline reservation token holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldStages {
    /// The reservation's random id.
    pub id: LeaseId,
    /// The last instant it can be settled.
    pub expires: Nanos,
    /// Where the estimate was taken.
    pub holds: Vec<StageHold>,
}

impl HeldStages {
    /// The signed token; `None` when a key or plan holds a separator byte.
    pub fn seal(&self, tokens: &LeaseTokens) -> Option<String> {
        let mut payload = format!("{}{FIELD}{}", self.id, self.expires.0);
        for h in &self.holds {
            if !Held::fits(&h.key) || !Held::fits(&h.plan) {
                return None;
            }
            payload.push(HOLD);
            payload.push_str(
                &[
                    h.stage.as_str(),
                    &h.level.to_string(),
                    &h.plan,
                    &h.key,
                    &h.estimate.to_string(),
                ]
                .join(&PART.to_string()),
            );
        }
        Some(tokens.seal(STAGES_VERSION, &payload))
    }

    /// What a token this service (or a node signing alike) issued holds.
    pub fn open(tokens: &LeaseTokens, token: &str) -> Result<HeldStages, TokenError> {
        let payload = tokens.unseal(STAGES_VERSION, token)?;
        let mut parts = payload.split(HOLD);
        let head: Vec<&str> = parts.next().unwrap_or_default().split(FIELD).collect();
        let [id, expires] = head[..] else {
            return Err(TokenError::Malformed);
        };
        let number = |text: &str| text.parse::<u64>().map_err(|_| TokenError::Malformed);
        let holds = parts
            .map(|hold| {
                let fields: Vec<&str> = hold.split(PART).collect();
                let [stage, level, plan, key, estimate] = fields[..] else {
                    return Err(TokenError::Malformed);
                };
                Ok(StageHold {
                    stage: stage.to_string(),
                    level: level.parse().map_err(|_| TokenError::Malformed)?,
                    plan: plan.to_string(),
                    key: key.to_string(),
                    estimate: number(estimate)?,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(HeldStages {
            id: id.parse().map_err(|_| TokenError::Malformed)?,
            expires: Nanos(number(expires)?),
            holds,
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

    #[test]
    fn pipeline_reservations_round_trip() {
        let tokens = LeaseTokens::new(b"secret".to_vec());
        let held = HeldStages {
            id: LeaseId(42),
            expires: Nanos(7),
            holds: vec![
                StageHold {
                    stage: "user".into(),
                    level: 0,
                    plan: "free".into(),
                    key: "user:key:ab12".into(),
                    estimate: 600,
                },
                StageHold {
                    stage: "tenant".into(),
                    level: 1,
                    plan: "".into(),
                    key: "share:acme/ann".into(),
                    estimate: 600,
                },
            ],
        };
        let token = held.seal(&tokens).unwrap();
        assert!(token.starts_with("p1."));
        assert_eq!(HeldStages::open(&tokens, &token).unwrap(), held);
        assert!(Held::open(&tokens, &token).is_err(), "not a named limit's");
        let none = HeldStages {
            holds: Vec::new(),
            ..held
        };
        assert_eq!(
            HeldStages::open(&tokens, &none.seal(&tokens).unwrap()).unwrap(),
            none
        );
    }
}
