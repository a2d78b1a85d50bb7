//! The claims on a shared limit ([`crate::quota`]) kept in memcached, so that the nodes sharing
//! the servers divide each limit among every client of every node: one value per limit, under
//! `floodgate.quota:LIMIT` (on the server gomemcache picks for that key), holding the limit's
//! [`Claims`] as text (`quota::claims::wire`).
//!
//! A step is [`Claims::apply`] in Rust, made atomic by compare-and-swap: `gets` the value and
//! its cas unique, apply the step at the store's clock's now, `cas` the result back; when
//! another node wrote in between (`EXISTS`) or the value vanished (`NOT_FOUND`), start over, at
//! most [`MAX_CLAIM_TRIES`] times; a limit with no value yet is created with `add` (`NOT_STORED`:
//! another node created it first, start over). Each try reads `now` again, so the step applied
//! is the one [`Claims::apply`] gives for the claims it read at that instant. The value expires
//! a second after nothing in it matters any more (the last claimant's idle time, the last
//! grant's end), at most 30 days on.
//!
//! A limit whose name memcached cannot take in a key (a space, a control character, over 250
//! bytes with the prefix) is refused with [`StoreError::NotOnStore`] before anything is sent.
//!
//! Under a breaker of the claims' own on each server (set like the decisions'), within half a
//! second or the store's timeout if longer, as the Redis store's claims.

use std::time::Duration;

use super::connection::Deadline;
use super::protocol::{Command, Reply};
use super::{no_servers, selector, MemcachedStore};
use crate::quota::claims::wire;
use crate::quota::{ClaimStep, ClaimTerms, Claimed, Claims};
use crate::StoreError;

/// How many times a step starts over after losing a race (within the step's budget of half a
/// second, which bounds it first when the server is slow).
pub const MAX_CLAIM_TRIES: usize = 64;

/// A claims step's budget, as the Redis store's: no request waits on it.
const CLAIM_TIMEOUT: Duration = Duration::from_millis(500);

/// The most memcached keeps a value for by a relative expiry.
const MAX_EXPIRY_SECS: u64 = 30 * 86_400;

impl MemcachedStore {
    /// Takes `step` on the claims of the shared limit `bucket` under `terms`, atomically
    /// (compare-and-swap, see the module documentation), and answers as
    /// [`Claims::apply`] does for the same claims at the same instant on the store's clock.
    ///
    /// A value under that key that is not claims is [`StoreError::StateConflict`]; a step that
    /// loses the race [`MAX_CLAIM_TRIES`] times in a row is [`StoreError::Unavailable`] (the caller
    /// steps again later).
    pub async fn claim(
        &self,
        bucket: &str,
        step: ClaimStep<'_>,
        terms: &ClaimTerms,
    ) -> Result<Claimed, StoreError> {
        let key = format!("floodgate.quota:{bucket}");
        super::protocol::check_key(&key)?;
        let servers = self.inner.servers();
        let server = selector::pick(&key, servers.len())
            .map(|i| servers[i].clone())
            .ok_or_else(no_servers)?;
        let deadline = Deadline::after(CLAIM_TIMEOUT.max(self.inner.link.timeout));
        let exchange = |commands: Vec<Command>| {
            let server = server.clone();
            async move {
                server
                    .exchange_under(
                        &server.claims_breaker,
                        &commands,
                        &self.inner.link,
                        deadline,
                        &*self.inner.clock.0,
                    )
                    .await
                    .map(|mut replies| replies.pop())
            }
        };
        for tries in 0..MAX_CLAIM_TRIES {
            if tries > 0 {
                // A lost race: wait a little, longer after each loss and different for each
                // claimant, so that n racers on one limit do not all read again at once and
                // each round lets one of them through.
                let spread = claimant_spread(&step, tries);
                tokio::time::sleep(Duration::from_micros(spread)).await;
            }
            let read = exchange(vec![Command::Gets { key: key.clone() }]).await?;
            let (mut claims, unique) = match read {
                Some(Reply::Value(None)) => (Claims::new(), None),
                Some(Reply::Value(Some((bytes, unique)))) => (parse(&bytes)?, Some(unique)),
                Some(Reply::Error(line)) => return Err(super::job::refused(&line)),
                other => return Err(unexpected(other)),
            };
            let now = self.inner.clock.0.now();
            let claimed = claims.apply(step, terms, now);
            let value = wire::encode(&claims).into_bytes();
            let until = wire::matters_until(&claims, terms.idle);
            let secs = until.saturating_since(now).as_secs().saturating_add(2);
            let exptime = u32::try_from(secs.min(MAX_EXPIRY_SECS)).unwrap_or(u32::MAX);
            let write = match unique {
                None => Command::Add {
                    key: key.clone(),
                    value,
                    exptime,
                },
                Some(unique) => Command::Cas {
                    key: key.clone(),
                    value,
                    exptime,
                    unique,
                },
            };
            match exchange(vec![write]).await? {
                Some(Reply::Stored) => return Ok(claimed),
                // Another node wrote first, or the value went: read again.
                Some(Reply::Exists | Reply::NotStored | Reply::NotFound) => continue,
                Some(Reply::Error(line)) => return Err(super::job::refused(&line)),
                other => return Err(unexpected(other)),
            }
        }
        Err(StoreError::Unavailable(format!(
            "the claims of {bucket} changed under every one of {MAX_CLAIM_TRIES} tries"
        )))
    }
}

fn parse(bytes: &[u8]) -> Result<Claims, StoreError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(wire::decode)
        .ok_or(StoreError::StateConflict {
            algorithm: "shared limit claims",
            found: "another value than claims",
        })
}

fn unexpected(reply: Option<Reply>) -> StoreError {
    StoreError::Protocol(format!(
        "memcached answered {reply:?} to a shared limit's claims step"
    ))
}

/// A wait in microseconds before try `tries` of `step`: up to 100 µs per lost race so far,
/// spread over claimants by a hash of the claimant's name and the try.
fn claimant_spread(step: &ClaimStep<'_>, tries: usize) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut hasher = foldhash::fast::FixedState::with_seed(0x9e37_79b9).build_hasher();
    format!("{step:?}").hash(&mut hasher);
    tries.hash(&mut hasher);
    hasher.finish() % (100 * tries as u64 + 1)
}
