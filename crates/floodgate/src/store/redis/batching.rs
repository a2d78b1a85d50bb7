//! Group commit: decisions waiting for the same Redis go to it together, in one script call.
//!
//! Each *lane* (the one Redis, or on a cluster one master, once the slot map is known, and one
//! slot before) has a queue and a few script
//! calls in flight at most (two by default). A decision joins its lane's queue; if there is
//! room for another call, a task sends one at once with whatever is queued (a lone decision
//! goes alone, without waiting for company: no timer). Decisions that arrive while the calls
//! are in flight wait for one to return, then go together in the next call, up to the batch's
//! bound of keys. Under load a call carries what arrived during the previous ones, so Redis
//! pays its fixed cost per call (the dispatch, `TIME`, one `MGET`) once for many decisions;
//! the second call in flight keeps Redis busy while the first one's reply travels back. A
//! lone request finding its lane idle is sent by its own caller, without a task or a channel
//! in between, so a lightly loaded store answers as fast as without batching.
//!
//! A batch is one `batch.lua` call: each job (one decision, or one request's chain of links on
//! one slot) is a group in it, run in queue order, atomically, with its own instant when the
//! clock is explicit. A batch of one job with one plain link runs that link's own twin script,
//! which is lighter than the batch script.
//!
//! Late and lost calls: a job whose caller stopped waiting (its timeout passed, or it was
//! cancelled) before its batch was sent is dropped, never sent. A batch that was sent and then
//! timed out may still run when Redis gets to it (a paused Redis, a slow script ahead of it);
//! its callers were told [`crate::StoreError::Timeout`]. It is never sent again. A lane sends
//! a call only while it has fewer than its calls in flight, each waited for until it returns
//! or times out, so while Redis does not answer each lane sends at most that many batches (of
//! at most the bound's keys) per timeout, and none once the breaker has opened (its callers are
//! refused before they queue): at most `threshold` times the calls in flight, plus those of
//! each half-open probe, can run late per lane.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use redis::cluster_routing::Slot;
use redis::Value;
use tokio::sync::oneshot;

use super::call::Call;
use super::keys::{group_by_slot, Tagged};
use super::link::Failed;
use super::reply::decode;
use super::Inner;
use crate::algorithm::spec::AnyAlgorithm;
use crate::store::breaker::Breaker;
use crate::store::KeyedOp;
use crate::{Decision, StoreError};

/// The most keys one batch may carry: the script unpacks them onto Lua's stack (`MGET`,
/// `EXISTS`), whose limit is a few thousand.
pub(super) const MAX_BATCH_KEYS: usize = 1024;

/// Batch sizes are counted in buckets by powers of two: `1`, `2`, `3–4`, …, `513–1024`.
const SIZE_BUCKETS: usize = 11;

mod wire;
use wire::{bad_batch, Sent};

/// One link of a job: its key (the store's, not yet tagged), its twin, flags and arguments.
pub(super) struct JobLink {
    pub(super) key: String,
    pub(super) twin: &'static str,
    /// `-`, or some of `r` (a denial refuses the request), `s` (a denial ends the chain), `a`
    /// (undone if the request is refused), `f` (a state conflict refuses the request and ends
    /// the chain), `j` (one group with the link before: a denial undoes the group), in that
    /// order.
    pub(super) flags: Cow<'static, str>,
    pub(super) args: Vec<String>,
}

/// The flags of a link, as `batch.lua` takes them.
pub(super) fn flags<K: ?Sized, A>(link: &crate::store::Link<'_, K, A>) -> Cow<'static, str> {
    // Every combination, indexed by the flags' bits in their order (`r` the highest).
    const FLAGS: [&str; 16] = [
        "-", "f", "a", "af", "s", "sf", "sa", "saf", "r", "rf", "ra", "raf", "rs", "rsf", "rsa",
        "rsaf",
    ];
    let bits = usize::from(link.refuses) << 3
        | usize::from(link.stops) << 2
        | usize::from(link.all_or_nothing) << 1
        | usize::from(link.fails_closed);
    match (link.joins_previous, bits) {
        (false, _) => Cow::Borrowed(FLAGS[bits]),
        // Only a shadow limit's levels join: rare enough to spell out.
        (true, 0) => Cow::Borrowed("j"),
        (true, _) => Cow::Owned(format!("{}j", FLAGS[bits])),
    }
}

/// One request's work in a batch, and where its replies go.
struct Job {
    links: Vec<JobLink>,
    /// Its instant (whole microseconds), or empty for Redis `TIME`.
    now: String,
    /// Whether its request was already refused by an earlier part of its chain.
    refused: bool,
    answer: oneshot::Sender<Result<Vec<Value>, Failed>>,
}

/// A job as submitted: its links, its instant (empty for Redis `TIME`), and whether its
/// request was already refused.
pub(super) type Submitted = (Vec<JobLink>, String, bool);

/// A job as the script takes it.
#[derive(Clone, Copy)]
struct Group<'a> {
    links: &'a [JobLink],
    now: &'a str,
    refused: bool,
}

impl Job {
    fn group(&self) -> Group<'_> {
        Group {
            links: &self.links,
            now: &self.now,
            refused: self.refused,
        }
    }
}

/// A lane: where its calls go, one at a time or a few in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Lane {
    /// The one Redis (single or found through sentinels).
    Single,
    /// A cluster master, by its number in the slot map: a batch may span its slots (the
    /// cluster batch script may touch keys of several slots of one node).
    Master(u32),
    /// A cluster slot, while the slot map is not known yet.
    Slot(Slot),
}

/// The queues, one per lane (kept in shards by the lane's hash, created on first use), and what
/// they have sent.
pub(super) struct Lanes {
    shards: Box<[Mutex<HashMap<Lane, Queue>>]>,
    max_keys: usize,
    in_flight: usize,
    calls: AtomicU64,
    decisions: AtomicU64,
    sizes: [AtomicU64; SIZE_BUCKETS],
}

impl std::fmt::Debug for Lanes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lanes")
            .field("shards", &self.shards.len())
            .field("max_keys", &self.max_keys)
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Whether a task is sending this lane's batches.
    running: bool,
    /// Whether a caller is sending its lone request itself (one of the calls in flight).
    inline: bool,
    /// The sending task, when it waits for jobs, or for room for another call in flight.
    waker: Option<Waker>,
}

/// What a lane's task does next.
enum Next {
    /// Send this batch.
    Send(Vec<Job>),
    /// Wait: for a call to return, for jobs, or for room (a caller's own call in flight).
    Wait,
    /// Stop: nothing queued, nothing in flight; the lane is marked idle.
    Stop,
}

/// What the batches have carried so far, from [`crate::store::RedisStore::batch_stats`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BatchStats {
    /// Script calls made for decisions (batches, a lone decision included).
    pub calls: u64,
    /// Decisions (links) they carried.
    pub decisions: u64,
    /// How many calls carried each number of decisions: `(at_most, calls)` for the buckets
    /// `1`, `2`, `3–4`, `5–8`, … (each bucket's largest size, and its count), empty buckets
    /// left out.
    pub sizes: Vec<(u64, u64)>,
}

impl BatchStats {
    /// What was sent between `earlier` (a reading of the same store) and this reading.
    pub fn since(&self, earlier: &BatchStats) -> BatchStats {
        let before = |at_most: u64| {
            earlier
                .sizes
                .iter()
                .find(|(b, _)| *b == at_most)
                .map_or(0, |(_, n)| *n)
        };
        BatchStats {
            calls: self.calls.saturating_sub(earlier.calls),
            decisions: self.decisions.saturating_sub(earlier.decisions),
            sizes: self
                .sizes
                .iter()
                .map(|&(at_most, n)| (at_most, n.saturating_sub(before(at_most))))
                .filter(|(_, n)| *n > 0)
                .collect(),
        }
    }

    /// Decisions per call (0 before the first call).
    pub fn mean_size(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.decisions as f64 / self.calls as f64
        }
    }
}

impl Lanes {
    /// Queues in `shards` shards, each lane sending at most `max_keys` keys per call, with at
    /// most `in_flight` calls in flight.
    pub(super) fn new(shards: usize, max_keys: usize, in_flight: usize) -> Lanes {
        Lanes {
            shards: (0..shards.max(1)).map(|_| Mutex::default()).collect(),
            max_keys,
            in_flight: in_flight.max(1),
            calls: AtomicU64::new(0),
            decisions: AtomicU64::new(0),
            sizes: Default::default(),
        }
    }

    pub(super) fn stats(&self) -> BatchStats {
        BatchStats {
            calls: self.calls.load(Ordering::Relaxed),
            decisions: self.decisions.load(Ordering::Relaxed),
            sizes: self
                .sizes
                .iter()
                .enumerate()
                .map(|(i, n)| (1u64 << i, n.load(Ordering::Relaxed)))
                .filter(|(_, n)| *n > 0)
                .collect(),
        }
    }

    fn record(&self, decisions: usize) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.decisions
            .fetch_add(decisions as u64, Ordering::Relaxed);
        let bucket = decisions.max(1).next_power_of_two().trailing_zeros() as usize;
        self.sizes[bucket.min(SIZE_BUCKETS - 1)].fetch_add(1, Ordering::Relaxed);
    }

    /// Runs `f` on `lane`'s queue, under its shard's lock.
    fn with<T>(&self, lane: Lane, f: impl FnOnce(&mut Queue) -> T) -> T {
        let shard = if self.shards.len() == 1 {
            0
        } else {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            lane.hash(&mut hasher);
            (hasher.finish() % self.shards.len() as u64) as usize
        };
        let mut queues = self.shards[shard].lock().unwrap_or_else(|e| e.into_inner());
        f(queues.entry(lane).or_default())
    }

    /// What `lane`'s task, with `flying` calls of its own in flight, does next: send the queued
    /// jobs in order, up to `max_keys` keys (at least one job), skipping those whose caller
    /// stopped waiting, when there is room for a call; stop when nothing is queued or in
    /// flight (marking the lane idle under the same lock, so a job queued after this starts a
    /// task); else wait.
    fn next(&self, lane: Lane, flying: usize) -> Next {
        self.with(lane, |queue| {
            if flying + usize::from(queue.inline) >= self.in_flight {
                return Next::Wait;
            }
            let batch = self.take(queue);
            if !batch.is_empty() {
                Next::Send(batch)
            } else if flying == 0 {
                queue.running = false;
                Next::Stop
            } else {
                Next::Wait
            }
        })
    }

    /// Whether `lane`'s task, with `flying` calls in flight, has jobs to send and room for
    /// them; if not, `waker` is woken when jobs arrive or a caller's own call returns.
    fn ready(&self, lane: Lane, flying: usize, waker: &Waker) -> bool {
        self.with(lane, |queue| {
            let room = flying + usize::from(queue.inline) < self.in_flight;
            if room && !queue.jobs.is_empty() {
                true
            } else {
                queue.waker = Some(waker.clone());
                false
            }
        })
    }

    fn take(&self, queue: &mut Queue) -> Vec<Job> {
        let mut batch = Vec::new();
        let mut keys = 0;
        while let Some(job) = queue.jobs.front() {
            if job.answer.is_closed() {
                queue.jobs.pop_front();
                continue;
            }
            if !batch.is_empty() && keys + job.links.len() > self.max_keys {
                break;
            }
            keys += job.links.len();
            batch.extend(queue.jobs.pop_front());
        }
        batch
    }
}

/// Marks a lane idle if its task ends without emptying it (the runtime shut down while a
/// call was in flight): its queued jobs are dropped, so their callers hear at once that the
/// call was lost, and the next job starts a task again.
struct Draining<'a> {
    lanes: &'a Lanes,
    lane: Lane,
    finished: bool,
}

impl Drop for Draining<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.lanes.with(self.lane, |queue| {
                queue.jobs.clear();
                queue.running = false;
                queue.waker = None;
            });
        }
    }
}

/// A caller sending its lone request on an idle lane: one of the lane's calls in flight until
/// it is done (or dropped: its caller gave up). Requests arriving meanwhile start a task, which
/// sends them in the room left.
struct Leading<'a> {
    lanes: &'a Lanes,
    lane: Lane,
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        let waker = self.lanes.with(self.lane, |queue| {
            queue.inline = false;
            queue.waker.take()
        });
        // The lane's task, if one started meanwhile, may send into the room this frees.
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

fn lost() -> Failed {
    Failed::link(StoreError::Unavailable(
        "the call was lost: the runtime sending it stopped".into(),
    ))
}

impl Inner {
    /// Queues `groups` (each a job's links, all on `lane`'s slot, with its instant and whether
    /// its request was already refused) and waits for their replies: per group, one twin reply
    /// per link run. The replies come in the order given.
    pub(super) async fn batched(
        self: &Arc<Self>,
        lane: Lane,
        groups: Vec<Submitted>,
    ) -> Vec<Result<Vec<Value>, Failed>> {
        let Some(lanes) = &self.lanes else {
            return groups
                .into_iter()
                .map(|_| Err(Failed::from(StoreError::Unavailable("no lanes".into()))))
                .collect();
        };
        // A lone request on an idle lane is sent by its caller, without a task or a channel in
        // between (the light-load path); requests arriving meanwhile queue, and are sent by a
        // task when it returns (or is dropped: its caller gave up).
        let alone = groups.len() == 1
            && lanes.with(lane, |queue| {
                let idle = !queue.running && !queue.inline && queue.jobs.is_empty();
                queue.inline |= idle;
                idle
            });
        if alone {
            let _leading = Leading { lanes, lane };
            let (links, now, refused) = &groups[0];
            lanes.record(links.len());
            return vec![self.send_alone(links, now, *refused).await];
        }
        let mut waiting = Vec::with_capacity(groups.len());
        let (start, waker) = lanes.with(lane, |queue| {
            for (links, now, refused) in groups {
                let (answer, reply) = oneshot::channel();
                queue.jobs.push_back(Job {
                    links,
                    now,
                    refused,
                    answer,
                });
                waiting.push(reply);
            }
            (
                !std::mem::replace(&mut queue.running, true),
                queue.waker.take(),
            )
        });
        if start {
            tokio::spawn(self.clone().drain(lane));
        }
        if let Some(waker) = waker {
            waker.wake();
        }
        let mut replies = Vec::with_capacity(waiting.len());
        for reply in waiting {
            replies.push(reply.await.unwrap_or_else(|_| Err(lost())));
        }
        replies
    }

    /// One decision (a plain link) through `lane` (its key's, from [`Inner::route`]): the
    /// twin's reply.
    pub(super) async fn decided(
        self: &Arc<Self>,
        lane: Lane,
        link: JobLink,
        now: String,
    ) -> Result<Value, Failed> {
        let mut replies = self.batched(lane, vec![(vec![link], now, false)]).await;
        replies
            .pop()
            .unwrap_or_else(|| Err(lost()))?
            .pop()
            .ok_or_else(|| StoreError::Protocol("a batch left a decision out".into()).into())
    }

    /// Independent decisions, each a job of its own in its key's lane. The lanes' calls go
    /// concurrently, each under its own timeout and its master's breaker: their decisions in
    /// request order, or the first failure in that order.
    pub(super) async fn decided_many(
        self: &Arc<Self>,
        requests: &[KeyedOp<'_, str, AnyAlgorithm>],
        nows: Vec<String>,
        calls: Vec<Call<'_>>,
    ) -> Result<Vec<Decision>, StoreError> {
        // Per lane: its breaker, the requests it carries (their indexes) and their jobs.
        type LaneWork = (Lane, Arc<Breaker>, Vec<usize>, Vec<Submitted>);
        let mut lanes: Vec<LaneWork> = Vec::new();
        for (i, ((request, now), call)) in requests.iter().zip(nows).zip(calls).enumerate() {
            let (lane, breaker) = self.route(request.key);
            let link = JobLink {
                key: request.key.to_owned(),
                twin: call.script.twin,
                flags: Cow::Borrowed("-"),
                args: call.args,
            };
            let at = match lanes.iter().position(|(l, _, _, _)| *l == lane) {
                Some(at) => at,
                None => {
                    lanes.push((lane, breaker, Vec::new(), Vec::new()));
                    lanes.len() - 1
                }
            };
            lanes[at].2.push(i);
            lanes[at].3.push((vec![link], now, false));
        }
        let mut lane_of_request = vec![(0, 0); requests.len()];
        let mut sent = Vec::with_capacity(lanes.len());
        for (at, (lane, breaker, indexes, groups)) in lanes.into_iter().enumerate() {
            for (position, &i) in indexes.iter().enumerate() {
                lane_of_request[i] = (at, position);
            }
            sent.push(async move {
                self.guarded_by(&breaker, async {
                    let answers = self.batched(lane, groups).await;
                    answers.into_iter().collect::<Result<Vec<_>, Failed>>()
                })
                .await
            });
        }
        let mut answers = futures_util::future::join_all(sent).await;
        let mut decisions = Vec::with_capacity(requests.len());
        for (request, &(at, position)) in requests.iter().zip(&lane_of_request) {
            let group = match &mut answers[at] {
                Ok(groups) => std::mem::take(&mut groups[position]),
                Err(e) => return Err(e.clone()),
            };
            let value = group
                .into_iter()
                .next()
                .ok_or_else(|| StoreError::Protocol("a batch left a decision out".into()))?;
            decisions.push(decode(request.algorithm, value)?);
        }
        Ok(decisions)
    }

    /// Sends `lane`'s batches until its queue is empty, with up to `in_flight` calls in
    /// flight.
    async fn drain(self: Arc<Self>, lane: Lane) {
        let Some(lanes) = &self.lanes else { return };
        let mut draining = Draining {
            lanes,
            lane,
            finished: false,
        };
        let mut flights: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> =
            Vec::with_capacity(lanes.in_flight);
        loop {
            while flights.len() < lanes.in_flight {
                let batch = match lanes.next(lane, flights.len()) {
                    Next::Send(batch) => batch,
                    Next::Wait => break,
                    Next::Stop => {
                        draining.finished = true;
                        return;
                    }
                };
                lanes.record(batch.iter().map(|job| job.links.len()).sum());
                let mut flight = Box::pin(self.answer(batch));
                // Its first poll hands the call to the connection before any later batch's, so
                // batches normally reach Redis in queue order (not always: a call that waits
                // for the connection to be made, or is sent again after NOSCRIPT, can be
                // overtaken by the next one; those requests were in flight together).
                let first = std::future::poll_fn(|cx| Poll::Ready(flight.as_mut().poll(cx)));
                if first.await.is_pending() {
                    flights.push(flight);
                }
            }
            // Until a call returns, or jobs can be sent.
            std::future::poll_fn(|cx| {
                let before = flights.len();
                flights.retain_mut(|flight| flight.as_mut().poll(cx).is_pending());
                if flights.len() < before || lanes.ready(lane, flights.len(), cx.waker()) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            })
            .await;
        }
    }

    /// Sends `batch` (bounded by the store's timeout) and gives each job its replies, or the
    /// call's failure.
    async fn answer(&self, batch: Vec<Job>) {
        let sent = {
            let groups: Vec<Group<'_>> = batch.iter().map(Job::group).collect();
            tokio::time::timeout(self.timeout, self.run_batch(&groups))
                .await
                .unwrap_or_else(|_| Err(Failed::link(StoreError::Timeout(self.timeout))))
        };
        match sent {
            Ok(groups) => {
                for (job, group) in batch.into_iter().zip(groups) {
                    let _ = job.answer.send(group);
                }
            }
            Err(failed) => {
                for job in batch {
                    let _ = job.answer.send(Err(failed.clone()));
                }
            }
        }
    }

    /// Runs `batch` in one call; on a cluster whose slots it touches are not all served by
    /// one node, or are moving (the script answered `unstable` and wrote nothing), each job
    /// on its own: those of one slot in order, the slots concurrently, each call following
    /// the cluster's redirections. Each job's replies, or the one failure of the call.
    async fn run_batch(
        &self,
        batch: &[Group<'_>],
    ) -> Result<Vec<Result<Vec<Value>, Failed>>, Failed> {
        match self.send_batch(batch).await? {
            Sent::Ran(groups) => Ok(groups.into_iter().map(Ok).collect()),
            Sent::Unstable => {
                self.redirects.split();
                if let Some(nodes) = &self.nodes {
                    nodes.failed();
                }
                let by_slot = group_by_slot(
                    batch.iter().map(|job| Tagged(&job.links[0].key).slot()),
                    usize::MAX,
                );
                let slots = by_slot.iter().map(|(_, members)| async move {
                    let mut replies = Vec::with_capacity(members.len());
                    for &i in members {
                        let reply = match self.send_batch(&batch[i..=i]).await {
                            Ok(Sent::Ran(mut groups)) => groups.pop().ok_or_else(bad_batch),
                            Ok(Sent::Unstable) => Err(bad_batch()),
                            Err(e) => Err(e),
                        };
                        replies.push((i, reply));
                    }
                    replies
                });
                let mut answers: Vec<Option<Result<Vec<Value>, Failed>>> = vec![None; batch.len()];
                for replies in futures_util::future::join_all(slots).await {
                    for (i, reply) in replies {
                        answers[i] = Some(reply);
                    }
                }
                Ok(answers
                    .into_iter()
                    .map(|a| a.unwrap_or_else(|| Err(lost())))
                    .collect())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BatchStats;

    #[test]
    fn stats_since_an_earlier_reading_keep_what_was_sent_between() {
        let earlier = BatchStats {
            calls: 3,
            decisions: 10,
            sizes: vec![(1, 1), (8, 2)],
        };
        let later = BatchStats {
            calls: 6,
            decisions: 25,
            sizes: vec![(1, 1), (4, 1), (8, 4)],
        };
        let between = later.since(&earlier);
        assert_eq!(
            between,
            BatchStats {
                calls: 3,
                decisions: 15,
                sizes: vec![(4, 1), (8, 2)],
            }
        );
        assert_eq!(between.mean_size(), 5.0);
        assert_eq!(BatchStats::default().mean_size(), 0.0);
    }
}
