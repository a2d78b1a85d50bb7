//! The cached store's round trip (`store/cached`): what each key's node admitted on its own
//! goes to Redis, which adds it to the shared state without deciding anything, and the state
//! after it comes back (`cached.lua`).

use std::time::Duration;

use redis::Value;

use super::keys::{group_by_slot, Tagged};
use super::link::Failed;
use super::reply::tag_name;
use super::RedisStore;
use crate::algorithm::spec::{AnyAlgorithm, AnyState};
use crate::algorithm::Algorithm;
use crate::{Nanos, StoreError};

/// Keys sent in one script call at most: a call runs alone in Redis, so a long one would hold
/// every other client back.
const KEYS_PER_CALL: usize = 256;

/// One key's part of a sync: the cost admitted on this node since the last sync, and the
/// instant of the first of those admissions (a cost of 0 only reads the state).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Exchange<'a> {
    pub(crate) key: &'a str,
    pub(crate) algorithm: &'a AnyAlgorithm,
    pub(crate) at: Nanos,
    pub(crate) cost: u64,
}

/// Redis's answer for one key: its clock when it ran the call, and the key's state after it
/// (`None`: the key holds nothing, a fresh state).
#[derive(Debug, Clone)]
pub(crate) struct Exchanged {
    pub(crate) now: Nanos,
    pub(crate) state: Option<AnyState>,
}

/// Reads a value `cached.lua` returned back into `algorithm`'s state.
fn state_of(algorithm: &AnyAlgorithm, value: &[u8]) -> Result<Option<AnyState>, StoreError> {
    if value.is_empty() {
        return Ok(None);
    }
    let conflict = |tag: &[u8]| StoreError::StateConflict {
        algorithm: algorithm.name(),
        found: tag_name(tag),
    };
    if let Some(tag) = value.strip_prefix(b"!") {
        return Err(conflict(tag));
    }
    let bad = || StoreError::Protocol("unexpected state in Redis for a cached key".into());
    let text = std::str::from_utf8(value).map_err(|_| bad())?;
    let mut fields = text.split(':');
    let tag = fields.next().unwrap_or("");
    if algorithm.cached_tag() != Some(tag) {
        return Err(conflict(tag.as_bytes()));
    }
    algorithm
        .cached_state(&mut fields)
        .map(Some)
        .ok_or_else(bad)
}

impl RedisStore {
    /// Whether the cached store can decide `algorithm` locally and sync it through this store:
    /// a fixed window, a token bucket or GCRA, within the Lua twins' exact range.
    pub(crate) fn exchanges(algorithm: &AnyAlgorithm) -> bool {
        algorithm.cached_parameters().is_some()
    }

    /// Sends every item in as few script calls as possible (one per cluster slot, at most
    /// [`KEYS_PER_CALL`] keys each, all sent at once over the multiplexed connection) under one
    /// `timeout` and one breaker permit, and returns each key's answer in order. `Err` when
    /// nothing got through; a call that failed alone fails only its keys.
    pub(crate) async fn exchange(
        &self,
        items: &[Exchange<'_>],
        timeout: Duration,
    ) -> Result<Vec<Result<Exchanged, StoreError>>, StoreError> {
        let inner = &self.inner;
        let mut args = Vec::with_capacity(items.len());
        for item in items {
            let Some(parameters) = item.algorithm.cached_parameters() else {
                return Err(StoreError::NotOnStore {
                    store: "cached",
                    algorithm: item.algorithm.name(),
                    reason: "the cached store decides only fixed windows, token buckets and GCRA locally",
                });
            };
            args.push(parameters);
        }
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let now = inner.now_arg_for(items.iter().map(|i| i.algorithm))?;
        // Groups of indices by slot (one group on a single Redis), cut to KEYS_PER_CALL.
        let cluster = inner.connection.is_cluster();
        let groups = group_by_slot(
            items
                .iter()
                .map(|item| cluster.then(|| Tagged(item.key).slot())),
            KEYS_PER_CALL,
        );
        let script = &inner.scripts.cached;
        let command = |group: &[usize], by_source: bool| {
            let mut cmd = script.command(by_source);
            cmd.arg(group.len());
            for &i in group {
                cmd.arg(Tagged(items[i].key));
            }
            cmd.arg(&now).arg(inner.min_ttl_ms);
            for &i in group {
                let item = &items[i];
                let parameters = &args[i];
                cmd.arg(parameters.tag)
                    .arg(&parameters.first)
                    .arg(&parameters.second);
                cmd.arg(item.at.0 / 1000)
                    .arg(item.algorithm.cached_cost(item.cost));
            }
            cmd
        };
        let calls = groups.iter().map(|(_, group)| {
            let mut handle = inner.connection.handle();
            let command = &command;
            async move {
                inner
                    .send_script(&mut handle, |by_source| command(group, by_source))
                    .await
            }
        });
        let sent = async {
            let replies = futures_util::future::join_all(calls).await;
            if replies.iter().all(Result::is_err) {
                // Nothing got through: the first failure is the sync's (and the breaker's).
                let first = replies.into_iter().find_map(Result::err);
                return Err(first.map_or_else(
                    || Failed::from(StoreError::Unavailable(String::new())),
                    Failed::from,
                ));
            }
            Ok(replies)
        };
        let replies = inner.guarded_for(timeout, sent).await?;
        let mut answers: Vec<Option<Result<Exchanged, StoreError>>> = vec![None; items.len()];
        for ((_, group), reply) in groups.iter().zip(replies) {
            let decoded = reply
                .map_err(|e| inner.reported(Failed::from(e), timeout))
                .and_then(|value| decode(value, group.len()));
            match decoded {
                Ok((now, values)) => {
                    for (&i, value) in group.iter().zip(values) {
                        answers[i] = Some(
                            state_of(items[i].algorithm, &value)
                                .map(|state| Exchanged { now, state }),
                        );
                    }
                }
                Err(e) => {
                    for &i in group {
                        answers[i] = Some(Err(e.clone()));
                    }
                }
            }
        }
        Ok(answers.into_iter().flatten().collect())
    }
}

/// `{now_us, value, …}` with `keys` values.
fn decode(value: Value, keys: usize) -> Result<(Nanos, Vec<Vec<u8>>), StoreError> {
    let bad = || StoreError::Protocol("unexpected reply from the cached store's sync".into());
    let Value::Array(items) = value else {
        return Err(bad());
    };
    let mut items = items.into_iter();
    let Some(Value::Int(now_us)) = items.next() else {
        return Err(bad());
    };
    let now = Nanos(
        u64::try_from(now_us)
            .map_err(|_| bad())?
            .saturating_mul(1000),
    );
    let values: Vec<Vec<u8>> = items
        .map(|v| match v {
            Value::BulkString(bytes) => Ok(bytes),
            Value::SimpleString(text) => Ok(text.into_bytes()),
            _ => Err(bad()),
        })
        .collect::<Result<_, _>>()?;
    if values.len() != keys {
        return Err(bad());
    }
    Ok((now, values))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::fixed_window::{FixedWindow, FixedWindowState};
    use crate::algorithm::gcra::Gcra;
    use crate::algorithm::sliding_log::SlidingLog;
    use crate::algorithm::spec::StateKind;
    use crate::algorithm::token_bucket::{TokenBucket, TokenBucketState};

    #[test]
    fn values_read_back_into_states() {
        let fw: AnyAlgorithm = FixedWindow::new(10, Duration::from_secs(1)).unwrap().into();
        let state = state_of(&fw, b"F:1000000:0:12").unwrap().unwrap();
        let StateKind::FixedWindow(s) = state.kind else {
            panic!("a fixed window")
        };
        assert_eq!(s, FixedWindowState::from_parts(Nanos::from_secs(1), 12));
        let g: AnyAlgorithm = Gcra::new(4, 10, Duration::from_secs(1)).unwrap().into();
        let StateKind::Gcra(s) = state_of(&g, b"G:5:7").unwrap().unwrap().kind else {
            panic!("a GCRA state")
        };
        assert_eq!(s.tat(), Nanos(5007));
        let t: AnyAlgorithm = TokenBucket::new(1.0, 5).unwrap().into();
        let StateKind::TokenBucket(s) = state_of(&t, b"T:-2.5:3").unwrap().unwrap().kind else {
            panic!("a token bucket")
        };
        assert_eq!(s, TokenBucketState::from_parts(-2.5, Nanos(3000)));
        assert!(state_of(&t, b"").unwrap().is_none());
        assert!(matches!(
            state_of(&t, b"!G"),
            Err(StoreError::StateConflict { found: "gcra", .. })
        ));
        assert!(matches!(
            state_of(&t, b"F:1:2:3"),
            Err(StoreError::StateConflict {
                found: "fixed_window",
                ..
            })
        ));
        assert!(matches!(
            state_of(&fw, b"F:x"),
            Err(StoreError::Protocol(_))
        ));
        // An algorithm with no cached form reads no cached state back.
        let log: AnyAlgorithm = SlidingLog::new(3, Duration::from_secs(1)).unwrap().into();
        assert!(!RedisStore::exchanges(&log));
        assert!(matches!(
            state_of(&log, b"F:1:2:3"),
            Err(StoreError::StateConflict { .. })
        ));
    }

    /// `cached.lua` finds each function by its state's tag, and a conflict names the
    /// algorithm by it: each tag must be its own twin's, and no two alike.
    #[test]
    fn every_cached_form_keeps_its_own_twins_tag() {
        let mut tags = Vec::new();
        for (i, absorb) in AnyAlgorithm::ABSORBS.iter().enumerate() {
            let Some(absorb) = absorb else { continue };
            assert_eq!(
                AnyAlgorithm::of_twin_tag(absorb.tag.as_bytes()),
                Some(AnyAlgorithm::NAMES[i])
            );
            assert!(!tags.contains(&absorb.tag), "{} twice", absorb.tag);
            tags.push(absorb.tag);
        }
        assert_eq!(tags, ["T", "F", "G"]);
        let source = crate::store::redis::script_source("cached").unwrap();
        assert!(source
            .contains("local absorbs = {T = absorb_bucket, F = absorb_window, G = absorb_gcra, }"));
    }
}
