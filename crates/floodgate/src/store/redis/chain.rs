//! A chain ([`crate::store::chain`]) as one group of a batch (`batch.lua`, through the group
//! commit of `batching.rs`, or alone when it is off): the links' twins run in order on their
//! keys, and the all-or-nothing ones are undone when the request is refused.
//!
//! On Redis Cluster a chain's group keeps to one slot. A chain whose keys share a slot
//! (one user's stages: the keys are hash-tagged by user) is still one call; otherwise it runs
//! as one call per run of consecutive links sharing a slot, in order, each told whether the
//! request was already refused (so that its all-or-nothing links are undone too). Undoing
//! then covers every run from the refusing one on, but not the runs before it: those have
//! returned. Likewise a group of joined links ([`crate::store::Link::joins_previous`]) split
//! between two runs is undone one run at a time.

use std::sync::Arc;

use super::batching::{flags, JobLink};
use super::call::Call;
use super::keys::Tagged;
use super::link::Failed;
use super::reply::decode;
use super::Inner;
use crate::algorithm::spec::AnyAlgorithm;
use crate::store::chain;
use crate::store::{Link, Linked};
use crate::StoreError;

impl Inner {
    /// [`crate::store::Store::apply_chain`], or with `refused` its
    /// [`apply_chain_refused`](crate::store::Store::apply_chain_refused): every operation is
    /// checked before anything is sent, and the chain is guarded by its first link's master's
    /// breaker (one user's links share a slot).
    pub(super) async fn chain(
        self: &Arc<Self>,
        links: &[Link<'_, str, AnyAlgorithm>],
        refused: bool,
    ) -> Result<Vec<Linked>, StoreError> {
        let calls = links
            .iter()
            .map(|l| self.call(l.request.algorithm, l.request.op))
            .collect::<Result<Vec<_>, _>>()?;
        let now = self.now_arg_for(links.iter().map(|l| l.request.algorithm))?;
        if links.is_empty() {
            return Ok(Vec::new());
        }
        let (_, breaker) = self.route(links[0].request.key);
        self.guarded_by(&breaker, self.run_chain(links, &now, &calls, refused))
            .await
    }

    /// Runs `links` (with their `calls`) at `now`: one script call per run of consecutive
    /// links whose keys share a slot (the whole chain on a single Redis). With `refused`, the
    /// request is refused after the chain whatever its links decide, so every run undoes its
    /// all-or-nothing links.
    pub(super) async fn run_chain(
        self: &Arc<Self>,
        links: &[Link<'_, str, AnyAlgorithm>],
        now: &str,
        calls: &[Call<'_>],
        refused: bool,
    ) -> Result<Vec<Linked>, Failed> {
        let mut outcomes: Vec<Linked> = Vec::with_capacity(links.len());
        let (mut refused, mut ended) = (refused, false);
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
                    refused |= chain::refuses(link, outcome);
                    ended |= chain::ends(link, outcome);
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
        self: &Arc<Self>,
        links: &[Link<'_, str, AnyAlgorithm>],
        now: &str,
        calls: &[Call<'_>],
        refused: bool,
    ) -> Result<Vec<Linked>, Failed> {
        let group: Vec<JobLink> = links
            .iter()
            .zip(calls)
            .map(|(link, call)| JobLink {
                key: link.request.key.to_owned(),
                twin: call.script.twin,
                flags: flags(link),
                args: call.args.clone(),
            })
            .collect();
        let replies = if self.lanes.is_some() {
            let (lane, _) = self.route(links[0].request.key);
            let mut answers = self
                .batched(lane, vec![(group, now.to_owned(), refused)])
                .await;
            answers.pop().unwrap_or_else(|| {
                Err(StoreError::Protocol("a batch left a chain out".into()).into())
            })?
        } else {
            self.send_alone(&group, now, refused).await?
        };
        if replies.len() > links.len() {
            return Err(
                StoreError::Protocol("unexpected reply from the batch script".into()).into(),
            );
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
