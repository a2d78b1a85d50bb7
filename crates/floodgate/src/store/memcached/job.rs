//! One key's conversation with its server, a few commands long, each sent after the reply to
//! the one before: the store drives every job of a call together, one round at a time (see
//! `rounds`), so that the commands of one round for one server go in one write.
//!
//! - **Count** (`incr`, then `add` when the key is absent, then `incr` again when another
//!   caller's `add` won the race): the count after adding, exactly, as memcached's `incr` is
//!   atomic. A key that keeps vanishing between the steps (evicted, expired) fails the job
//!   after three rounds of the dance rather than looping.
//! - **Give back** (`decr`, never below 0; an absent key counts 0).
//! - **Read** (`get`; an absent key counts 0).
//!
//! A check is a count that gives its units back (`decr`) when the count it got is over the
//! limit: the refusal consumes nothing, once the `decr` lands.

use super::protocol::{Command, Reply};
use crate::store::Rejection;
use crate::StoreError;

/// How many times the `incr`/`add` dance may start over.
const MAX_TRIES: u8 = 3;

/// One job; see the [module documentation](self).
#[derive(Debug)]
pub(crate) struct Job {
    /// The memcached key.
    pub(crate) key: String,
    phase: Phase,
    /// A check's limit: a count past it is given back.
    undo_over: Option<u64>,
    tries: u8,
    /// The count the deciding command answered, once it has.
    pub(crate) count: Option<u64>,
    /// Set when the job's server failed: it sends nothing more.
    pub(crate) failed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Incr { by: u64, exptime: u32 },
    Add { by: u64, exptime: u32 },
    Get,
    Decr { by: u64 },
    Undo { by: u64 },
    Done,
}

impl Job {
    /// Adds `by`, creating the key with `exptime` when it is absent.
    pub(crate) fn count(key: String, by: u64, exptime: u32) -> Job {
        Job::new(key, Phase::Incr { by, exptime })
    }

    /// Adds `by` and takes it back again when the count passes `limit`.
    pub(crate) fn check(key: String, by: u64, exptime: u32, limit: u64) -> Job {
        Job {
            undo_over: Some(limit),
            ..Job::count(key, by, exptime)
        }
    }

    /// Takes `by` away (never below 0).
    pub(crate) fn give_back(key: String, by: u64) -> Job {
        Job::new(key, Phase::Decr { by })
    }

    /// Reads the count.
    pub(crate) fn read(key: String) -> Job {
        Job::new(key, Phase::Get)
    }

    fn new(key: String, phase: Phase) -> Job {
        Job {
            key,
            phase,
            undo_over: None,
            tries: 0,
            count: None,
            failed: false,
        }
    }

    /// The command to send next, or `None` when the job is done (or failed).
    pub(crate) fn next(&self) -> Option<Command> {
        if self.failed {
            return None;
        }
        let key = self.key.clone();
        Some(match self.phase {
            Phase::Incr { by, .. } => Command::Incr { key, by },
            Phase::Add { by, exptime } => Command::Add {
                key,
                value: by.to_string().into_bytes(),
                exptime,
            },
            Phase::Get => Command::Get { key },
            Phase::Decr { by } | Phase::Undo { by } => Command::Decr { key, by },
            Phase::Done => return None,
        })
    }

    /// Takes the reply to the command [`Job::next`] gave.
    pub(crate) fn feed(&mut self, reply: Reply) -> Result<(), StoreError> {
        if let Reply::Error(line) = &reply {
            return Err(refused(line));
        }
        self.phase = match (self.phase, reply) {
            (Phase::Incr { by, exptime }, Reply::NotFound) => Phase::Add { by, exptime },
            (Phase::Incr { by, .. }, Reply::Number(n)) => self.counted(n, by),
            (Phase::Add { by, .. }, Reply::Stored) => self.counted(by, by),
            (Phase::Add { by, exptime }, Reply::NotStored) => {
                self.tries += 1;
                if self.tries >= MAX_TRIES {
                    return Err(StoreError::Unavailable(format!(
                        "memcached key {} vanished between incr and add {MAX_TRIES} times (evicted?)",
                        self.key
                    )));
                }
                Phase::Incr { by, exptime }
            }
            (Phase::Get, Reply::Value(value)) => {
                self.count = Some(match value {
                    None => 0,
                    Some((bytes, _)) => parse_count(&bytes)?,
                });
                Phase::Done
            }
            (Phase::Decr { .. }, Reply::Number(n)) => {
                self.count = Some(n);
                Phase::Done
            }
            (Phase::Decr { .. }, Reply::NotFound) => {
                self.count = Some(0);
                Phase::Done
            }
            (Phase::Undo { .. }, Reply::Number(_) | Reply::NotFound) => Phase::Done,
            (phase, reply) => {
                return Err(StoreError::Protocol(format!(
                    "memcached answered {reply:?} in step {phase:?} of key {}",
                    self.key
                )))
            }
        };
        Ok(())
    }

    /// The count `n` after adding `by`: done, or (a check over its limit) give `by` back.
    fn counted(&mut self, n: u64, by: u64) -> Phase {
        self.count = Some(n);
        match self.undo_over {
            Some(limit) if n > limit => Phase::Undo { by },
            _ => Phase::Done,
        }
    }
}

/// A stored count: decimal digits, as `incr` and `add` leave them (memcached may pad a
/// shrunk number with spaces).
pub(crate) fn parse_count(bytes: &[u8]) -> Result<u64, StoreError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.trim_end().parse().ok())
        .ok_or(StoreError::StateConflict {
            algorithm: "fixed_window",
            found: "a value that is not a count",
        })
}

/// What an error answer means: a key holding something else than a number is that key's
/// conflict; anything else is the server refusing the call.
pub(crate) fn refused(line: &str) -> StoreError {
    if line.contains("non-numeric value") {
        return StoreError::StateConflict {
            algorithm: "fixed_window",
            found: "a value that is not a count",
        };
    }
    // memcached names its errors by a prefix (SERVER_ERROR, CLIENT_ERROR, ERROR) and the
    // words after it; only "out of memory" has a kind of its own.
    let code = ["SERVER_ERROR", "CLIENT_ERROR"]
        .into_iter()
        .find(|prefix| line.starts_with(prefix))
        .unwrap_or("ERROR");
    let (rejection, hint) = if line.contains("out of memory") {
        (
            Rejection::OutOfMemory,
            "the server is out of memory and cannot evict: raise its -m or let it evict (no -M)",
        )
    } else {
        (Rejection::Other, "the server answered an error")
    };
    let words = line.strip_prefix(code).unwrap_or(line).trim();
    StoreError::Rejected {
        rejection,
        code,
        message: format!("{words}; {hint}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_dance_retries_a_lost_add_race_and_gives_back_over_the_limit() {
        let mut job = Job::check("k".into(), 2, 60, 3);
        assert!(matches!(job.next(), Some(Command::Incr { by: 2, .. })));
        job.feed(Reply::NotFound).unwrap();
        assert!(matches!(job.next(), Some(Command::Add { exptime: 60, .. })));
        job.feed(Reply::NotStored).unwrap();
        assert!(matches!(job.next(), Some(Command::Incr { .. })));
        job.feed(Reply::Number(4)).unwrap();
        assert_eq!(job.count, Some(4));
        assert!(matches!(job.next(), Some(Command::Decr { by: 2, .. })));
        job.feed(Reply::Number(2)).unwrap();
        assert_eq!((job.next(), job.count), (None, Some(4)));
    }

    #[test]
    fn a_vanishing_key_fails_after_a_few_tries() {
        let mut job = Job::count("k".into(), 1, 60);
        let mut result = Ok(());
        for _ in 0..10 {
            result = job
                .feed(Reply::NotFound)
                .and_then(|()| job.feed(Reply::NotStored));
            if result.is_err() {
                break;
            }
        }
        assert!(matches!(result, Err(StoreError::Unavailable(_))));
    }

    #[test]
    fn error_answers_are_classified() {
        assert!(matches!(
            refused("CLIENT_ERROR cannot increment or decrement non-numeric value"),
            StoreError::StateConflict { .. }
        ));
        assert!(matches!(
            refused("SERVER_ERROR out of memory storing object"),
            StoreError::Rejected {
                rejection: Rejection::OutOfMemory,
                code: "SERVER_ERROR",
                ..
            }
        ));
        assert_eq!(parse_count(b"12  "), Ok(12));
        assert!(parse_count(b"x").is_err());
    }
}
