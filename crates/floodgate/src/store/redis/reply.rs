//! Reading a script's reply back into a [`Decision`].

use std::time::Duration;

use redis::Value;

use crate::algorithm::spec::AnyAlgorithm;
use crate::algorithm::Algorithm;
use crate::{Decision, StoreError};

/// Which algorithm a state tag belongs to, for [`StoreError::StateConflict`].
pub(super) fn tag_name(tag: &[u8]) -> &'static str {
    AnyAlgorithm::of_twin_tag(tag).unwrap_or("a value Floodgate did not write")
}

/// The script's reply: `{allowed, remaining, reset_us, reset_sub}` (no retry instant), or
/// `{allowed, remaining, reset_us, reset_sub, has_retry, retry_us, retry_sub}`, with an eighth
/// element `limit` when it depends on the operation or the state
/// (the fleet's two classes, a smooth key's own rate), then for shapers `wait_us, wait_sub`;
/// or `{-1, tag}` for a key holding another algorithm's state, or `{-2}` for an operation the
/// script refused because its result would leave the exact range (nothing was written).
pub(super) fn decode(algorithm: &AnyAlgorithm, value: Value) -> Result<Decision, StoreError> {
    let bad = || StoreError::Protocol("unexpected reply from a Floodgate script".into());
    let Value::Array(items) = value else {
        return Err(bad());
    };
    if let [Value::Int(-1), tag] = items.as_slice() {
        let found = match tag {
            Value::BulkString(t) => tag_name(t),
            _ => tag_name(b""),
        };
        return Err(StoreError::StateConflict {
            algorithm: algorithm.name(),
            found,
        });
    }
    if let [Value::Int(-2)] = items.as_slice() {
        return Err(StoreError::NotOnStore {
            store: "redis",
            algorithm: algorithm.name(),
            reason: "the result would leave the range its Lua twin keeps exact \
                     (a smooth key's next free instant past 3 × 2^51 µs)",
        });
    }
    let mut ints = [0u64; 10];
    if !(7..=10).contains(&items.len()) && items.len() != 4 || items.len() == 9 {
        return Err(bad());
    }
    for (slot, item) in ints.iter_mut().zip(&items) {
        match item {
            Value::Int(i) if *i >= 0 => *slot = *i as u64,
            _ => return Err(bad()),
        }
    }
    let [allowed, remaining, reset_us, reset_sub, has_retry, retry_us, retry_sub, limit, wait_us, wait_sub] =
        ints;
    let duration =
        |us: u64, sub: u64| Duration::from_nanos(us.saturating_mul(1000).saturating_add(sub));
    // A script leaves the limit out only when the parameters fix it; a twin that always
    // sends it and did not broke the protocol.
    let limit = match algorithm.twin_reply_limit() {
        _ if items.len() >= 8 => limit,
        Some(limit) => limit,
        None => return Err(bad()),
    };
    let reset_after = duration(reset_us, reset_sub);
    Ok(if allowed == 1 {
        Decision {
            wait: duration(wait_us, wait_sub),
            ..Decision::allow(limit, remaining, reset_after)
        }
    } else {
        let retry_after = (has_retry == 1).then(|| duration(retry_us, retry_sub));
        Decision::deny(limit, remaining, reset_after, retry_after)
    })
}
