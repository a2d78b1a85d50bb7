//! The claims on a shared limit ([`crate::quota`]) kept in Redis, so that the nodes sharing a
//! Redis (or a Redis Cluster) divide each limit among every client of every node: one hash per
//! limit, changed by one script call per step, the Lua twin of [`Claims::apply`].
//!
//! The hash is `floodgate.quota:{LIMIT}` (the limit's name, as the caller gives it, is the
//! hash tag, so that one limit lives in one slot); it holds a field per node claiming (its
//! groups, what it holds, until when) and one per node that left while what it held is still
//! counted. A step reads the hash, a field per node, and writes only the fields it changes: its
//! cost grows with the nodes, not with their clients. The hash expires a second after
//! nothing in it matters any more (or after the store's least TTL,
//! [`super::RedisStoreBuilder::min_ttl`], if that is longer). Instants come from Redis `TIME`, or from the store's
//! explicit clock ([`super::RedisStoreBuilder::clock`]) in whole microseconds; durations are
//! taken in whole microseconds, rounded up.
//!
//! [`Claims::apply`]: crate::quota::Claims::apply

use std::time::Duration;

use crate::quota::claims::{ClaimStep, ClaimTerms, Claimed, MOST, MOST_CLIENTS};
use crate::StoreError;

use super::{RedisStore, MAX_MICROS};

/// The twin: the prelude (for `now_us` and `divmod`) and the claims' script.
pub(super) fn script_source() -> String {
    format!(
        "{}\n{}\nreturn quota_claims(KEYS[1], now_us, {{select(3, unpack(ARGV))}})\n",
        super::call::PRELUDE,
        include_str!("quota_claims.lua")
    )
}

impl RedisStore {
    /// Takes `step` on the claims of the shared limit `limit` under `terms`, atomically, and
    /// answers as [`Claims::apply`](crate::quota::Claims::apply) does for the same claims at
    /// the same instant (Redis `TIME`, or the explicit clock). Under a circuit breaker of the
    /// claims' own (set like the store's, apart from the decisions'), within half a second
    /// (or the store's timeout, if longer: no request waits on a step); on a cluster,
    /// following redirections while slots move.
    ///
    /// A key under that name holding something else is [`StoreError::StateConflict`].
    pub async fn claim(
        &self,
        limit: &str,
        step: ClaimStep<'_>,
        terms: &ClaimTerms,
    ) -> Result<Claimed, StoreError> {
        let inner = &self.inner;
        let now = match &inner.clock {
            None => String::new(),
            Some(clock) => {
                let micros = clock.0.now().0 / 1000;
                if micros >= MAX_MICROS / 2 {
                    return Err(StoreError::Protocol(
                        "the explicit clock is past 2^52 microseconds".into(),
                    ));
                }
                micros.to_string()
            }
        };
        let key = format!("floodgate.quota:{{{limit}}}");
        let (kind, claimant, groups, held, wanted) = match step {
            ClaimStep::Report {
                claimant,
                groups,
                held,
                wanted,
            } => ("r", claimant, groups, held.min(MOST), wanted.min(MOST)),
            ClaimStep::Leave { claimant } => ("l", claimant, &[][..], 0, 0),
        };
        let capacity = terms.capacity.min(MOST);
        let ttl = micros(terms.ttl);
        let idle = micros(terms.idle);
        let script = &inner.scripts.quota_claims;
        // Routed as any call (which keeps a cluster's slot map fresh), but under the claims'
        // own breaker.
        let _ = inner.route(&key);
        let breaker = &inner.claims_breaker;
        inner
            .guarded_within(breaker, CLAIM_TIMEOUT.max(inner.timeout), async {
                let mut handle = inner.connection.handle();
                let answer = inner
                    .send_script(&mut handle, |by_source| {
                        let mut cmd = script.command(by_source);
                        cmd.arg(1).arg(&key).arg(&now).arg(inner.min_ttl_ms);
                        cmd.arg(kind).arg(claimant).arg(capacity);
                        cmd.arg(ttl).arg(idle).arg(held).arg(wanted);
                        for g in groups {
                            cmd.arg(g.count.min(MOST_CLIENTS));
                            cmd.arg(g.demand.min(MOST)).arg(g.margin.min(MOST));
                        }
                        cmd
                    })
                    .await;
                match answer {
                    Ok(value) => Ok(claimed(value)?),
                    Err(e) if e.code() == Some("WRONGTYPE") => Err(StoreError::StateConflict {
                        algorithm: "shared limit claims",
                        found: "another value than a hash of claims",
                    }
                    .into()),
                    Err(e) => Err(e.into()),
                }
            })
            .await
    }
}

/// How long a claims step may take: no request waits on it (the clients enforce what they
/// hold meanwhile), and a node steps about once a second, so a step is given most of that
/// second, not a decision's budget: a Redis slowed for a moment delays an assignment instead
/// of failing it (and opening the breaker for every decision).
const CLAIM_TIMEOUT: Duration = Duration::from_millis(500);

/// A duration in whole microseconds, rounded up, at most 2⁵⁰.
fn micros(d: Duration) -> u64 {
    let us = d.as_nanos().div_ceil(1000);
    u64::try_from(us).unwrap_or(u64::MAX).min(1 << 50)
}

/// The script's answer: `{granted or -1, demand, in force, clients, nodes}`.
fn claimed(value: redis::Value) -> Result<Claimed, StoreError> {
    let bad = || StoreError::Protocol("unexpected reply from the shared limit's script".into());
    let redis::Value::Array(items) = value else {
        return Err(bad());
    };
    let ints: Vec<i64> = items
        .iter()
        .map(|item| match item {
            redis::Value::Int(n) => Ok(*n),
            _ => Err(bad()),
        })
        .collect::<Result<_, _>>()?;
    let [granted, demand, in_force, clients, nodes] = ints[..] else {
        return Err(bad());
    };
    let whole = |n: i64| u64::try_from(n).map_err(|_| bad());
    Ok(Claimed {
        granted: (granted >= 0).then_some(granted as u64),
        demand: whole(demand)?,
        in_force: whole(in_force)?,
        clients: whole(clients)?,
        nodes: whole(nodes)?,
    })
}
