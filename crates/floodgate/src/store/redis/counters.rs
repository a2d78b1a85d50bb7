//! Plain counters in Redis, as envoyproxy/ratelimit keeps its fixed windows (`INCRBY` and
//! `EXPIRE` on keys it names itself), so that a service sharing the Redis with upstream's pods
//! counts in the same keys ([`RedisStore::increment_counters`]). Nothing here is one of the
//! algorithms' twins: the keys are written as given (no namespace, no hash tag) and hold bare
//! integers.

use super::{Inner, RedisStore};
use crate::store::CounterIncrement;
use crate::StoreError;

impl RedisStore {
    /// For each increment, in order, `INCRBY` then `EXPIRE` (the TTL set on every call, as
    /// envoyproxy/ratelimit sets it): one pipeline on a single Redis, and on a cluster one
    /// script call per key doing both, all sent at once, each following the cluster's
    /// redirections while slots move (see module `redirect`). Under the store's timeout and
    /// circuit breaker. The counts after each `INCRBY`, in order.
    ///
    /// A pipeline is not a transaction: each key's count is exact (`INCRBY` is atomic), but a
    /// failure part-way may leave some keys counted. A key that holds something other than an
    /// integer is refused by Redis ([`StoreError::StateConflict`]).
    pub async fn increment_counters(
        &self,
        increments: &[CounterIncrement<'_>],
    ) -> Result<Vec<u64>, StoreError> {
        if increments.is_empty() {
            return Ok(Vec::new());
        }
        let inner = &self.inner;
        inner
            .guarded(async {
                let answers = if inner.connection.is_cluster() {
                    per_key(
                        inner,
                        increments.iter().map(|i| {
                            let script = if i.refund {
                                &inner.scripts.refund
                            } else {
                                &inner.scripts.increment
                            };
                            move |by_source: bool| {
                                let mut cmd = script.command(by_source);
                                cmd.arg(1).arg(i.key).arg(i.by).arg(i.ttl_seconds.max(1));
                                cmd
                            }
                        }),
                    )
                    .await?
                } else {
                    run(inner, vec![pipeline(increments)]).await?
                };
                answers
                    .into_iter()
                    .map(|answer| count(&answer).map_err(Into::into))
                    .collect()
            })
            .await
    }

    /// The counts under `keys` (0 for a key that holds nothing), read with `GET` in one
    /// pipeline (on a cluster, one `GET` per key, all at once, following redirections), under
    /// the store's timeout and circuit breaker.
    pub async fn read_counters(&self, keys: &[&str]) -> Result<Vec<u64>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let inner = &self.inner;
        inner
            .guarded(async {
                let get = |keys: &[&str]| {
                    let mut pipe = redis::pipe();
                    for key in keys {
                        pipe.cmd("GET").arg(*key);
                    }
                    pipe
                };
                let answers = if inner.connection.is_cluster() {
                    per_key(
                        inner,
                        keys.iter().map(|key| {
                            move |_: bool| {
                                let mut cmd = redis::cmd("GET");
                                cmd.arg(*key);
                                cmd
                            }
                        }),
                    )
                    .await?
                } else {
                    run(inner, vec![get(keys)]).await?
                };
                answers
                    .into_iter()
                    .map(|answer| match answer {
                        redis::Value::Nil => Ok(0),
                        other => count(&other).map_err(Into::into),
                    })
                    .collect()
            })
            .await
    }
}

/// A refund: `DECRBY`, and the key removed when that leaves nothing (or less) to count.
pub(super) const REFUND: &str = "local n = redis.call('DECRBY', KEYS[1], ARGV[1]) \
if n <= 0 then redis.call('DEL', KEYS[1]) return 0 end return n";

/// An increment as one script, for a cluster: `INCRBY`, then `EXPIRE` (`ARGV[2]` seconds).
pub(super) const INCREMENT: &str = "local n = redis.call('INCRBY', KEYS[1], ARGV[1]) \
redis.call('EXPIRE', KEYS[1], ARGV[2]) return n";

/// `INCRBY` + `EXPIRE` of each, the `EXPIRE` answers ignored; a refund's script.
fn pipeline(increments: &[CounterIncrement<'_>]) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for i in increments {
        if i.refund {
            pipe.cmd("EVAL").arg(REFUND).arg(1).arg(i.key).arg(i.by);
            continue;
        }
        pipe.cmd("INCRBY").arg(i.key).arg(i.by);
        pipe.cmd("EXPIRE")
            .arg(i.key)
            .arg(i.ttl_seconds.max(1))
            .ignore();
    }
    pipe
}

/// Sends each call (one key's, built by `command` from whether to send a script's source) at
/// once, each following the cluster's redirections; their answers, in order.
async fn per_key<F: Fn(bool) -> redis::Cmd>(
    inner: &Inner,
    commands: impl Iterator<Item = F>,
) -> Result<Vec<redis::Value>, super::link::Failed> {
    let sent = commands.map(|command| {
        let mut handle = inner.connection.handle();
        async move { inner.send_script(&mut handle, command).await }
    });
    futures_util::future::join_all(sent)
        .await
        .into_iter()
        .map(|answer| match answer {
            Err(e) if holds_no_count(&e) => Err(not_a_counter().into()),
            other => other.map_err(Into::into),
        })
        .collect()
}

/// Sends every pipeline at once; their answers, concatenated in order.
async fn run(
    inner: &Inner,
    pipelines: Vec<redis::Pipeline>,
) -> Result<Vec<redis::Value>, super::link::Failed> {
    let sent = pipelines.into_iter().map(|pipe| {
        let mut handle = inner.connection.handle();
        async move { pipe.query_async::<Vec<redis::Value>>(&mut handle).await }
    });
    let mut answers = Vec::new();
    for answer in futures_util::future::join_all(sent).await {
        match answer {
            Ok(values) => answers.extend(values),
            // A key holding another type, or a string that is no integer, is that key's
            // problem, not the store's: every other key still counts.
            Err(e) if holds_no_count(&e) => return Err(not_a_counter().into()),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(answers)
}

/// Whether Redis refused `INCRBY` because of what the key holds.
fn holds_no_count(e: &redis::RedisError) -> bool {
    e.code() == Some("WRONGTYPE")
        || e.code() == Some("ERR") && e.detail().is_some_and(|d| d.contains("not an integer"))
}

/// A count Redis answered (an integer, or a bulk string holding one).
fn count(answer: &redis::Value) -> Result<u64, StoreError> {
    match answer {
        redis::Value::Int(n) => u64::try_from(*n).map_err(|_| not_a_counter()),
        redis::Value::BulkString(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(not_a_counter),
        other => Err(StoreError::Protocol(format!(
            "a counter's answer is {other:?}, not a whole number"
        ))),
    }
}

/// A key holding something else than a count of 0 or more.
fn not_a_counter() -> StoreError {
    StoreError::StateConflict {
        algorithm: "envoyproxy/ratelimit counter",
        found: "another value than a count",
    }
}
