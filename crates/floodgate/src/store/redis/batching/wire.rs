//! A batch on the wire: the one script call it becomes (the batch script, or a lone link's
//! own twin), and the reply split back per job.

use std::collections::HashMap;

use redis::cluster_routing::Slot;
use redis::Value;

use super::super::call::Script;
use super::super::keys::{group_by_slot, probe_key, Tagged};
use super::super::link::Failed;
use super::super::redirect::Redirect;
use super::super::Inner;
use super::{Group, JobLink};
use crate::StoreError;

impl Inner {
    /// One group sent now in a call of its own, without queueing (coalescing is off, or the
    /// lane is idle): its replies.
    pub(in crate::store::redis) async fn send_alone(
        &self,
        links: &[JobLink],
        now: &str,
        refused: bool,
    ) -> Result<Vec<Value>, Failed> {
        let group = Group {
            links,
            now,
            refused,
        };
        match self.send_batch(&[group]).await? {
            Sent::Ran(mut replies) => replies
                .pop()
                .ok_or_else(|| StoreError::Protocol("a batch left a chain out".into()).into()),
            Sent::Unstable => Err(bad_batch()),
        }
    }

    /// One script call for `batch`: the batch script, or a lone plain link's own twin. The
    /// replies, per group; or, on a cluster, the batch script's word that a slot it touches is
    /// not served by the node it ran on, or is being moved (nothing written).
    ///
    /// On a cluster, one job (one slot) goes as the batch script with every key declared, so
    /// that Redis itself checks them all before the script runs and answers a redirection
    /// that is followed ([`Inner::send_script`]); several go as the cluster variant, which
    /// declares one key and checks every slot itself.
    pub(super) async fn send_batch(&self, batch: &[Group<'_>]) -> Result<Sent, Failed> {
        let mut handle = self.connection.handle();
        if let Some((script, link, now)) = self.lone_twin(batch) {
            let command = |by_source: bool| {
                let mut cmd = script.command(by_source);
                cmd.arg(1)
                    .arg(Tagged(&link.key))
                    .arg(now)
                    .arg(self.min_ttl_ms)
                    .arg(&link.args);
                cmd
            };
            let value = self.send_script(&mut handle, command).await?;
            return Ok(Sent::Ran(vec![vec![value]]));
        }
        // One job's keys share a slot: declared, Redis checks them all before the script runs.
        let cluster = self.connection.is_cluster() && batch.len() > 1;
        let script = if cluster {
            &self.scripts.batch_cluster
        } else {
            &self.scripts.batch
        };
        let call = BatchCall::new(batch, cluster);
        let command = |by_source: bool| call.command(script, by_source, self.min_ttl_ms);
        let bad = || {
            Failed::from(StoreError::Protocol(
                "unexpected reply from the batch script".into(),
            ))
        };
        // A batch over several slots is never sent on where a redirection names: there (a
        // slot being moved in, reached by `ASKING`) its other slots' keys may not be served.
        // It goes request by request instead, each request following the redirection.
        let sent = self.send_following(&mut handle, command, !cluster).await;
        let sent = match sent {
            Err(e) if cluster && Redirect::of(&e).is_some() => return Ok(Sent::Unstable),
            other => other?,
        };
        let Value::Array(flat) = sent else {
            return Err(bad());
        };
        if let [Value::BulkString(word)] = flat.as_slice() {
            if word == b"unstable" {
                return Ok(Sent::Unstable);
            }
        }
        unflatten(flat, batch).map(Sent::Ran).ok_or_else(bad)
    }

    /// The twin script, link and instant of a batch that is one plain link of a request not
    /// yet refused: it runs as that twin alone, which is lighter than the batch script.
    fn lone_twin<'b>(&self, batch: &[Group<'b>]) -> Option<(&Script, &'b JobLink, &'b str)> {
        let [job] = batch else { return None };
        let ([link], false) = (job.links, job.refused) else {
            return None;
        };
        let script = self.scripts.twin(link.twin).filter(|_| link.flags == "-")?;
        Some((script, link, job.now))
    }
}

/// A batch as the batch script takes it, worked out once for every attempt at sending it (a
/// `NOSCRIPT` answer, a redirection): its keys, the distinct specs (twin and arguments) its
/// links share, and on a cluster its keys per slot.
struct BatchCall<'b> {
    batch: &'b [Group<'b>],
    cluster: bool,
    links: Vec<&'b JobLink>,
    /// Links with the same twin and arguments (most of a batch: one limit, cost 1) share one
    /// spec, sent once.
    specs: Vec<&'b JobLink>,
    /// Each link's spec, numbered from 1 as the script takes them.
    spec_of: Vec<usize>,
    /// On a cluster, the keys to read together, per slot (positions in `links`).
    by_slot: Vec<(Slot, Vec<usize>)>,
}

impl<'b> BatchCall<'b> {
    fn new(batch: &'b [Group<'b>], cluster: bool) -> BatchCall<'b> {
        let links: Vec<&JobLink> = batch.iter().flat_map(|job| job.links).collect();
        let mut specs: Vec<&JobLink> = Vec::new();
        let mut index: HashMap<(&str, &[String]), usize> = HashMap::new();
        let spec_of: Vec<usize> = links
            .iter()
            .map(|link| {
                *index
                    .entry((link.twin, link.args.as_slice()))
                    .or_insert_with(|| {
                        specs.push(link);
                        specs.len()
                    })
            })
            .collect();
        let by_slot = if cluster {
            group_by_slot(
                links.iter().map(|link| Tagged(&link.key).slot()),
                usize::MAX,
            )
        } else {
            Vec::new()
        };
        BatchCall {
            batch,
            cluster,
            links,
            specs,
            spec_of,
            by_slot,
        }
    }

    /// The call of `script` (by SHA, or by source): keys, the batch's instant and TTL floor,
    /// the specs, then each job (a lone plain link as its spec alone, any other as a group with
    /// its instant if it differs, whether it was refused, and its links' specs and flags), and
    /// on a cluster every key again, then the keys per slot after each slot's probe key.
    fn command(&self, script: &Script, by_source: bool, min_ttl_ms: u64) -> redis::Cmd {
        let (batch, links) = (self.batch, &self.links);
        let mut cmd = script.command(by_source);
        if self.cluster {
            // Only the first key is declared: it routes the call (the keys follow).
            cmd.arg(1).arg(links.first().map(|link| Tagged(&link.key)));
        } else {
            cmd.arg(links.len());
            for link in links {
                cmd.arg(Tagged(&link.key));
            }
        }
        cmd.arg(batch[0].now).arg(min_ttl_ms).arg(self.specs.len());
        for spec in &self.specs {
            cmd.arg(spec.twin).arg(spec.args.len()).arg(&spec.args);
        }
        let mut spec_of = self.spec_of.iter();
        for job in batch {
            let lone = job.links.len() == 1
                && job.links[0].flags == "-"
                && !job.refused
                && job.now == batch[0].now;
            if lone {
                cmd.arg(spec_of.next());
                continue;
            }
            let now = if job.now == batch[0].now { "" } else { job.now };
            cmd.arg("g")
                .arg(now)
                .arg(u8::from(job.refused))
                .arg(job.links.len());
            for link in job.links {
                cmd.arg(spec_of.next()).arg(&*link.flags);
            }
        }
        if self.cluster {
            for link in links {
                cmd.arg(Tagged(&link.key));
            }
            let mut size = 0;
            for (_, members) in &self.by_slot {
                cmd.arg(members.len())
                    .arg(&*probe_key(&links[members[0]].key));
                for &i in members {
                    cmd.arg(Tagged(&links[i].key));
                }
                size += 2 + members.len();
            }
            cmd.arg(links.len()).arg(size);
        }
        cmd
    }
}

/// What one batch call came back with.
pub(super) enum Sent {
    /// The replies, per group.
    Ran(Vec<Vec<Value>>),
    /// Nothing ran: a slot of the batch is served elsewhere or is being moved.
    Unstable,
}

/// A batch whose reply left a job out.
pub(super) fn bad_batch() -> Failed {
    Failed::from(StoreError::Protocol(
        "a batch left a job out, or answered 'unstable' for one slot".into(),
    ))
}

/// The batch script's flat reply, per group: its links' twin replies, each checked against the
/// group's link count. `None` for a reply of another shape.
fn unflatten(flat: Vec<Value>, batch: &[Group<'_>]) -> Option<Vec<Vec<Value>>> {
    let mut items = flat.into_iter();
    let count = |items: &mut std::vec::IntoIter<Value>| match items.next() {
        Some(Value::Int(n)) => usize::try_from(n).ok(),
        _ => None,
    };
    let mut groups = Vec::with_capacity(batch.len());
    for job in batch {
        let ran = count(&mut items)?;
        if ran > job.links.len() {
            return None;
        }
        let mut replies = Vec::with_capacity(ran);
        for _ in 0..ran {
            let len = count(&mut items)?;
            let reply: Vec<Value> = items.by_ref().take(len).collect();
            if reply.len() != len {
                return None;
            }
            replies.push(Value::Array(reply));
        }
        groups.push(replies);
    }
    items.next().is_none().then_some(groups)
}
