//! The calls waiting for one server, sent together (group commit, as the Redis store does).
//!
//! At most `max_idle` batches (at least one) are on the wire to a server at once, each on a
//! connection of its own. A call that finds them all busy waits in the server's queue; when a
//! batch lands, the next takes every call waiting (up to [`MAX_CALLS`]), writes their commands
//! in one write and reads the replies in order, answering each call as soon as its own are
//! read. N overlapping calls then cost one round trip instead of N, and no more than
//! `max_idle` connections are open to a server, where a connection per overlapping call was
//! opened (and closed again) before.
//!
//! Each call keeps its own deadline: a call still waiting when its deadline passes is answered
//! [`StoreError::Timeout`] then, and its batch sends nothing for it; one whose replies have not
//! come by then is answered `Timeout` too (its commands may be applied: as for any timed-out
//! call, the caller cannot know). The time a batch takes to open its connection is not taken
//! from its calls' budgets. A batch that times out, or whose connection fails, answers every call it still
//! holds with that failure and closes the connection (see `connection`).

use std::collections::VecDeque;
use std::sync::{Arc, PoisonError};

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::connection::{Deadline, LinkSettings, Server};
use super::protocol::{read_reply, Command, ReadError, Reply};
use crate::StoreError;

/// The most calls one batch carries.
pub(crate) const MAX_CALLS: usize = 256;

/// What a call is answered.
type Answer = Result<Vec<Reply>, StoreError>;

/// One call waiting for a batch: its commands, its deadline, and where its answer goes.
pub(crate) struct Call {
    commands: Vec<Command>,
    deadline: Deadline,
    answer: oneshot::Sender<Answer>,
}

impl Call {
    /// A call of `commands` due by `deadline`, and the receiver of its answer.
    pub(crate) fn new(
        commands: Vec<Command>,
        deadline: Deadline,
    ) -> (Call, oneshot::Receiver<Answer>) {
        let (answer, answered) = oneshot::channel();
        let call = Call {
            commands,
            deadline,
            answer,
        };
        (call, answered)
    }

    fn answer(self, answer: Answer) {
        // A caller that stopped waiting (dropped its future) needs no answer.
        let _ = self.answer.send(answer);
    }

    fn time_out(self) {
        let budget = self.deadline.budget;
        self.answer(Err(StoreError::Timeout(budget)));
    }
}

/// A server's waiting calls and how many batches are on the wire to it.
#[derive(Default)]
pub(crate) struct Queue {
    waiting: VecDeque<Call>,
    flying: usize,
}

/// One batch on the wire: counted in [`Queue::flying`] until it has taken the last call, or
/// is dropped (a panic, a runtime shutting down) so that the count never leaks.
struct Flying<'a> {
    server: &'a Server,
    landed: bool,
}

impl Flying<'_> {
    /// The next calls to send, or `None` (and the batch lands) when none waits. Under the
    /// queue's lock, so that a call queued meanwhile either is taken or starts a batch.
    fn take(&mut self) -> Option<VecDeque<Call>> {
        let mut queue = self.server.queue();
        if queue.waiting.is_empty() {
            queue.flying -= 1;
            self.landed = true;
            return None;
        }
        let n = queue.waiting.len().min(MAX_CALLS);
        Some(queue.waiting.drain(..n).collect())
    }
}

impl Drop for Flying<'_> {
    fn drop(&mut self) {
        if !self.landed {
            self.server.queue().flying -= 1;
        }
    }
}

impl Server {
    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `call`; `true` when the caller must start a batch (see [`Server::drain`]),
    /// because fewer than `max_idle` (at least one) are on the wire.
    pub(crate) fn enqueue(&self, call: Call, settings: &LinkSettings) -> bool {
        let mut queue = self.queue();
        queue.waiting.push_back(call);
        let start = queue.flying < settings.max_idle.max(1);
        if start {
            queue.flying += 1;
        }
        start
    }

    /// Sends batches until no call waits (one task per batch on the wire).
    pub(crate) async fn drain(self: Arc<Self>, settings: LinkSettings) {
        let mut flying = Flying {
            server: &self,
            landed: false,
        };
        while let Some(calls) = flying.take() {
            self.send(calls, &settings).await;
        }
    }

    /// Sends one batch and answers each of its calls.
    async fn send(&self, calls: VecDeque<Call>, settings: &LinkSettings) {
        let now = Instant::now();
        let (late, mut pending): (VecDeque<Call>, VecDeque<Call>) =
            calls.into_iter().partition(|call| call.deadline.at <= now);
        late.into_iter().for_each(Call::time_out);
        let Some(last) = pending.iter().map(|call| call.deadline.at).max() else {
            return;
        };
        let (mut conn, connecting) = match self.connection(settings).await {
            Ok(opened) => opened,
            Err(e) => {
                pending
                    .into_iter()
                    .for_each(|call| call.answer(Err(e.clone())));
                return;
            }
        };
        let mut bytes = Vec::new();
        for command in pending.iter().flat_map(|call| &call.commands) {
            command.encode(&mut bytes);
        }
        let talk = async {
            conn.write(&bytes).await?;
            while let Some(call) = pending.front() {
                let mut replies = Vec::with_capacity(call.commands.len());
                for command in &call.commands {
                    replies.push(read_reply(&mut conn, command).await?);
                }
                let Some(call) = pending.pop_front() else {
                    break;
                };
                if Instant::now() > call.deadline.at + connecting {
                    call.time_out();
                } else {
                    call.answer(Ok(replies));
                }
            }
            Ok::<_, ReadError>(())
        };
        let failure = match tokio::time::timeout_at(last + connecting, talk).await {
            Ok(Ok(())) => {
                self.keep(conn, settings);
                return;
            }
            Err(_) => {
                self.close_idle();
                pending.into_iter().for_each(Call::time_out);
                return;
            }
            Ok(Err(ReadError::Link(e))) => {
                self.close_idle();
                self.lost(&e)
            }
            // The stream is out of step: the connection is dropped with the rest of its replies.
            Ok(Err(ReadError::Protocol(e))) => e,
        };
        for call in pending {
            call.answer(Err(failure.clone()));
        }
    }
}
