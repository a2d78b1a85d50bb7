//! A chain ([`crate::store::chain`]) in one script call: `chain.lua` runs the links' twins in
//! order on their keys and undoes the all-or-nothing ones when the request is refused.
//!
//! On Redis Cluster a script may only touch keys of one slot. A chain whose keys share a slot
//! (one user's stages: the keys are hash-tagged by user) is still one call; otherwise it runs
//! as one call per run of consecutive links sharing a slot, in order, each told whether the
//! request was already refused (so that its all-or-nothing links are undone too). Undoing
//! then covers every run from the refusing one on, but not the runs before it: those have
//! returned.

use redis::Value;

use super::call::Call;
use super::keys::Tagged;
use super::link::Failed;
use super::reply::decode;
use super::Inner;
use crate::algorithm::spec::AnyAlgorithm;
use crate::store::chain::denied;
use crate::store::{Link, Linked};
use crate::StoreError;

impl Inner {
    /// Runs `links` (with their `calls`) at `now`: one script call per run of consecutive
    /// links whose keys share a slot (the whole chain on a single Redis).
    pub(super) async fn run_chain(
        &self,
        links: &[Link<'_, str, AnyAlgorithm>],
        now: &str,
        calls: &[Call<'_>],
    ) -> Result<Vec<Linked>, Failed> {
        let mut outcomes: Vec<Linked> = Vec::with_capacity(links.len());
        let (mut refused, mut ended) = (false, false);
        let mut start = 0;
        while start < links.len() {
            let mut end = start + 1;
            if self.connection.is_cluster() {
                let slot = Tagged(links[start].request.key).slot();
                while end < links.len() && Tagged(links[end].request.key).slot() == slot {
                    end += 1;
                }
            } else {
                end = links.len();
            }
            if ended {
                outcomes.extend((start..end).map(|_| Linked::NotReached));
            } else {
                let run = self
                    .run_links(&links[start..end], now, &calls[start..end], refused)
                    .await?;
                for (link, outcome) in links[start..end].iter().zip(&run) {
                    refused |= link.refuses && denied(outcome);
                    ended |= link.stops && denied(outcome);
                }
                outcomes.extend(run);
            }
            start = end;
        }
        Ok(outcomes)
    }

    /// `EVALSHA chain n keys… now min_ttl n refused (twin flags count args…)…` for links
    /// whose keys share a slot.
    async fn run_links(
        &self,
        links: &[Link<'_, str, AnyAlgorithm>],
        now: &str,
        calls: &[Call<'_>],
        refused: bool,
    ) -> Result<Vec<Linked>, Failed> {
        let chain = &self.scripts.chain;
        let command = |by_source: bool| {
            let mut cmd = chain.command(by_source);
            cmd.arg(links.len());
            for link in links {
                cmd.arg(Tagged(link.request.key));
            }
            cmd.arg(now)
                .arg(self.min_ttl_ms)
                .arg(links.len())
                .arg(u8::from(refused));
            for (link, call) in links.iter().zip(calls) {
                let flags: String = [
                    (link.refuses, 'r'),
                    (link.stops, 's'),
                    (link.all_or_nothing, 'a'),
                ]
                .iter()
                .filter(|(on, _)| *on)
                .map(|(_, flag)| *flag)
                .collect();
                let flags = if flags.is_empty() {
                    "-".to_owned()
                } else {
                    flags
                };
                cmd.arg(call.script.twin)
                    .arg(flags)
                    .arg(call.args.len())
                    .arg(&call.args);
            }
            cmd
        };
        let mut handle = self.connection.handle();
        let bad = || {
            Failed::from(StoreError::Unavailable(
                "unexpected reply from the chain script".into(),
            ))
        };
        let Value::Array(replies) = self.send_script(&mut handle, command).await? else {
            return Err(bad());
        };
        if replies.len() > links.len() {
            return Err(bad());
        }
        let mut replies = replies.into_iter();
        Ok(links
            .iter()
            .map(|link| match replies.next() {
                Some(reply) => match decode(link.request.algorithm, reply) {
                    Ok(decision) => Linked::Decided(decision),
                    Err(e) => Linked::Failed(e),
                },
                None => Linked::NotReached,
            })
            .collect())
    }
}
