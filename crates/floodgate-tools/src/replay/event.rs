//! One line of a replay trace: its JSON read and checked into an [`Event`], or refused with
//! an [`EventError`] naming the field.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use floodgate::duration::parse_duration;
use floodgate::limiter::Priority;
use floodgate::{LeaseId, Nanos, Op, OpKind, StoreError};
use serde_json::{Map, Value};

/// Why one line of the trace was refused.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// The line is not a JSON object.
    #[error("not a JSON object: {0}")]
    NotJson(#[source] serde_json::Error),
    /// A field an event does not have (a misspelling, say): refused rather than ignored, so
    /// that `kye` never silently becomes the key `""`.
    #[error("unknown field `{field}` (an event's fields are {})", FIELDS.join(", "))]
    UnknownField {
        /// The field as written.
        field: String,
    },
    /// A required field is absent.
    #[error("missing field `{field}` ({why})")]
    Missing {
        /// The field.
        field: &'static str,
        /// What needs it.
        why: &'static str,
    },
    /// A field's value has the wrong type or is out of range.
    #[error("field `{field}`: expected {expected}, got {got}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What the field takes.
        expected: &'static str,
        /// The value as given.
        got: Value,
    },
    /// A duration field that does not read.
    #[error("field `{field}`: {got}: {reason}")]
    Duration {
        /// The field.
        field: &'static str,
        /// The value as given.
        got: Value,
        /// Why it does not read.
        reason: String,
    },
    /// `priority` is not one of the four classes.
    #[error("field `priority`: `{priority}` is not one of critical, post, get, test")]
    UnknownPriority {
        /// The priority as given.
        priority: String,
    },
    /// `op` is not an operation.
    #[error(
        "field `op`: unknown operation `{op}` (check, reserve, try_acquire, set_rate, acquire, \
         release)"
    )]
    UnknownOp {
        /// The operation as given.
        op: String,
    },
    /// `t` goes back in time.
    #[error(
        "field `t`: {t} is earlier than the previous event's {previous} (events must be in time \
         order)"
    )]
    OutOfOrder {
        /// The event's time as given.
        t: Value,
        /// The previous event's time, in seconds.
        previous: f64,
    },
    /// The limiter does not take the event's operation.
    #[error("field `op`: {0}")]
    Unsupported(#[source] StoreError),
    /// The store failed (Redis unreachable or too slow).
    #[error("{0}")]
    Store(#[source] StoreError),
    /// The utilization shedder takes only `check`.
    #[error("field `op`: the utilization shedder only takes `check`, got `{op}`")]
    NotACheck {
        /// The operation given.
        op: OpKind,
    },
    /// The adaptive concurrency limiter takes only `acquire` and `release`.
    #[error("field `op`: the adaptive concurrency limiter only takes `acquire` and `release`, got `{op}`")]
    NotALease {
        /// The operation given.
        op: OpKind,
    },
}

/// One event of the trace, validated.
#[derive(Clone, Debug)]
pub(crate) struct Event {
    pub(crate) t: Value,
    pub(crate) at: Nanos,
    pub(crate) key: String,
    pub(crate) op: Op,
    /// The lease as the trace names it (`acquire`, `release`).
    pub(crate) lease: Option<String>,
    pub(crate) priority: Priority,
    pub(crate) utilization: Option<f64>,
}

/// The fields an event may have.
const FIELDS: [&str; 9] = [
    "t",
    "key",
    "op",
    "cost",
    "lease",
    "priority",
    "utilization",
    "timeout",
    "rate",
];

/// Reads one line of the trace into an [`Event`]: its fields checked one by one in the order
/// of [`FIELDS`] (the first bad one is the error), then the operation they make.
pub(crate) fn parse_event(line: &str) -> Result<Event, EventError> {
    let mut fields: Map<String, Value> = serde_json::from_str(line).map_err(EventError::NotJson)?;
    if let Some(field) = fields.keys().find(|f| !FIELDS.contains(&f.as_str())) {
        return Err(EventError::UnknownField {
            field: field.clone(),
        });
    }
    let t = fields.remove("t").ok_or(EventError::Missing {
        field: "t",
        why: "seconds from the trace's start",
    })?;
    let at = match t.as_f64() {
        Some(secs) if secs.is_finite() && secs >= 0.0 => Nanos::from_secs_f64(secs),
        _ => return Err(invalid("t", "a number of seconds ≥ 0", &t)),
    };
    let key = key_field(&fields)?;
    let op_name = op_name_field(&fields)?;
    let cost = cost_field(&fields)?;
    let lease = lease_field(&fields)?;
    let priority = priority_field(&fields)?;
    let utilization = utilization_field(&fields)?;
    let op = operation(op_name, cost, &fields, lease.as_deref(), priority)?;
    Ok(Event {
        t,
        at,
        key,
        op,
        lease,
        priority,
        utilization,
    })
}

/// A field whose value has the wrong type or is out of range.
fn invalid(field: &'static str, expected: &'static str, got: &Value) -> EventError {
    EventError::Invalid {
        field,
        expected,
        got: got.clone(),
    }
}

/// `key`: a string, `""` when absent.
fn key_field(fields: &Map<String, Value>) -> Result<String, EventError> {
    match fields.get("key") {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(invalid("key", "a string", other)),
    }
}

/// `op`'s name, `check` when absent (checked against the operations by [`operation`]).
fn op_name_field(fields: &Map<String, Value>) -> Result<&str, EventError> {
    match fields.get("op") {
        None => Ok("check"),
        Some(Value::String(s)) => Ok(s.as_str()),
        Some(other) => Err(invalid("op", "a string", other)),
    }
}

/// `cost`: a whole number, 1 when absent.
fn cost_field(fields: &Map<String, Value>) -> Result<u64, EventError> {
    match fields.get("cost") {
        None => Ok(1),
        Some(v) => v
            .as_u64()
            .ok_or_else(|| invalid("cost", "a whole number ≥ 0", v)),
    }
}

/// `lease`: the trace's name for it, a string or a number.
fn lease_field(fields: &Map<String, Value>) -> Result<Option<String>, EventError> {
    match fields.get("lease") {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(other) => Err(invalid("lease", "a string", other)),
    }
}

/// `priority`: one of the four classes, `get` when absent.
fn priority_field(fields: &Map<String, Value>) -> Result<Priority, EventError> {
    match fields.get("priority") {
        None => Ok(Priority::Get),
        Some(Value::String(s)) => {
            Priority::from_name(s).ok_or_else(|| EventError::UnknownPriority {
                priority: s.clone(),
            })
        }
        Some(other) => Err(invalid("priority", "a string", other)),
    }
}

/// `utilization`: a number in 0..1, for the utilization shedder.
fn utilization_field(fields: &Map<String, Value>) -> Result<Option<f64>, EventError> {
    match fields.get("utilization") {
        None => Ok(None),
        Some(v) => match v.as_f64() {
            Some(u) if (0.0..=1.0).contains(&u) => Ok(Some(u)),
            _ => Err(invalid("utilization", "a number in 0..1", v)),
        },
    }
}

/// The operation `op_name` names, with the fields it takes (`timeout` for `try_acquire`,
/// `rate` for `set_rate`, the lease's name for `release`).
fn operation(
    op_name: &str,
    cost: u64,
    fields: &Map<String, Value>,
    lease: Option<&str>,
    priority: Priority,
) -> Result<Op, EventError> {
    let op = match op_name {
        "check" => Op::Check { cost },

        "reserve" => Op::Reserve { cost },
        "try_acquire" => Op::TryAcquire {
            cost,
            timeout: match fields.get("timeout") {
                None => Duration::ZERO,
                Some(v) => duration_field("timeout", v)?,
            },
        },
        "set_rate" => {
            let rate = fields.get("rate").ok_or(EventError::Missing {
                field: "rate",
                why: "needed by `set_rate`",
            })?;
            match rate.as_f64() {
                Some(r) if r.is_finite() && r > 0.0 => Op::SetRate { rate: r },
                _ => return Err(invalid("rate", "a number above 0", rate)),
            }
        }
        "acquire" => Op::Acquire {
            lease: LeaseId(0), // named (or made up) by the caller
            critical: priority == Priority::Critical,
        },
        "release" => {
            let Some(name) = lease else {
                return Err(EventError::Missing {
                    field: "lease",
                    why: "needed by `release`",
                });
            };
            Op::Release {
                lease: lease_id(name),
            }
        }
        other => {
            return Err(EventError::UnknownOp {
                op: other.to_string(),
            })
        }
    };
    Ok(op)
}

fn duration_field(field: &'static str, value: &Value) -> Result<Duration, EventError> {
    let parsed = match value {
        Value::Number(n) => n
            .as_f64()
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .ok_or_else(|| "must be a number of seconds ≥ 0".to_string()),
        Value::String(s) => parse_duration(s).map_err(|e| e.to_string()),
        _ => Err("expected seconds or a duration string".to_string()),
    };
    parsed.map_err(|reason| EventError::Duration {
        field,
        got: value.clone(),
        reason,
    })
}

/// The events of a trace, in order, each with its 1-based line number: blank lines are
/// skipped; a line that does not parse, or goes back in time, is an error naming the line.
pub(crate) struct Trace<R> {
    input: R,
    line: String,
    number: u64,
    last: Nanos,
}

impl<R: std::io::BufRead> Trace<R> {
    pub(crate) fn new(input: R) -> Trace<R> {
        Trace {
            input,
            line: String::new(),
            number: 0,
            last: Nanos::ZERO,
        }
    }
}

impl<R: std::io::BufRead> Iterator for Trace<R> {
    type Item = Result<(u64, Event), super::ReplayError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            self.line.clear();
            match self.input.read_line(&mut self.line) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => return Some(Err(e.into())),
            }
            self.number += 1;
            if self.line.trim().is_empty() {
                continue;
            }
            let line = self.number;
            let bad = |source| super::ReplayError::Event { line, source };
            let event = match parse_event(&self.line) {
                Ok(event) => event,
                Err(e) => return Some(Err(bad(e))),
            };
            if event.at < self.last {
                return Some(Err(bad(EventError::OutOfOrder {
                    t: event.t.clone(),
                    previous: self.last.as_secs_f64(),
                })));
            }
            self.last = event.at;
            return Some(Ok((line, event)));
        }
    }
}

/// A lease id as the algorithms take it: a stable hash of the trace's name for it.
pub(crate) fn lease_id(name: &str) -> LeaseId {
    let mut h = DefaultHasher::new();
    name.hash(&mut h);
    LeaseId::from(h.finish())
}
