//! `floodgate replay`: run a recorded trace through one limiter, one decision per event.
//!
//! Input: one JSON object per line (blank lines are skipped), in time order:
//! `t` (seconds from the trace's start, required), `key` (default `""`), `op` (default
//! `check`), `cost` (default 1), and per op: `timeout` (`try_acquire`, seconds or a duration
//! string, default 0) and `rate` (`set_rate`). Output: one JSON object per event, same order:
//! `t` (as given), `key`, `allowed`, `limit`, `remaining`, `reset_after`, `retry_after` (`null`
//! when allowed or never possible), and `wait` for shaping algorithms; times in seconds.
//!
//! The trace's time 0 is the clock's epoch, so fixed windows align to whole multiples of their
//! length from the trace's start. Input is streamed: memory grows with the number of live keys
//! (bounded by the store), never with the length of the trace. The first bad line stops the run
//! with an error naming the line and the field.

use std::io::{self, BufRead, BufWriter, Write};
use std::time::Duration;

use floodgate::algorithm::spec::{parse_duration, AlgorithmSpec, AnyAlgorithm, AnyState};
use floodgate::algorithm::Algorithm;
use floodgate::store::MemoryStore;
use floodgate::{Decision, ManualClock, Nanos, Op, OpKind};
use serde::Serialize;
use serde_json::{Map, Value};

/// Arguments of `floodgate replay`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The limiter: a JSON spec such as '{"algorithm":"token_bucket","rate":10,"capacity":20}',
    /// or the path of a YAML or JSON file holding one.
    #[arg(long, value_name = "SPEC")]
    limiter: String,
    /// Where the keys' state lives. Only `memory` (the embedded store) is available here.
    #[arg(long, value_name = "URL", default_value = "memory")]
    store: String,
    /// The most keys held at once (the embedded store's bound).
    #[arg(long, default_value_t = 1_000_000)]
    max_keys: usize,
}

/// Why a replay stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplayError {
    /// The `--limiter` spec could not be read or is invalid.
    #[error("--limiter: {0}")]
    Spec(String),
    /// The `--store` URL names a store this command cannot use.
    #[error("--store: {0}")]
    Store(String),
    /// An input line is malformed or out of order.
    #[error("line {line}: {message}")]
    Event { line: u64, message: String },
    /// Reading the trace or writing the decisions failed.
    #[error("{0}")]
    Io(#[from] io::Error),
}

impl ReplayError {
    /// 2 for bad arguments (as for usage errors), 1 for bad input or I/O.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            ReplayError::Spec(_) | ReplayError::Store(_) => 2,
            ReplayError::Event { .. } | ReplayError::Io(_) => 1,
        }
    }
}

/// Runs the replay on stdin and stdout.
pub(crate) fn run(args: &Args) -> Result<(), ReplayError> {
    let algorithm = load_spec(&args.limiter)?
        .build()
        .map_err(|e| ReplayError::Spec(e.to_string()))?;
    if !matches!(args.store.as_str(), "memory" | "memory://") {
        return Err(ReplayError::Store(format!(
            "`{}` is not available; use `memory`",
            args.store
        )));
    }
    let stdin = io::stdin().lock();
    let stdout = BufWriter::new(io::stdout().lock());
    match replay(&algorithm, args.max_keys, stdin, stdout) {
        // A closed stdout (`| head`) is the reader saying it has seen enough.
        Err(ReplayError::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Reads a spec given inline (JSON) or as a file path (YAML or JSON).
fn load_spec(arg: &str) -> Result<AlgorithmSpec, ReplayError> {
    let spec = if arg.trim_start().starts_with('{') {
        serde_json::from_str(arg).map_err(|e| e.to_string())
    } else {
        let text = std::fs::read_to_string(arg)
            .map_err(|e| ReplayError::Spec(format!("cannot read `{arg}`: {e}")))?;
        serde_norway::from_str(&text).map_err(|e| format!("{arg}: {e}"))
    };
    spec.map_err(ReplayError::Spec)
}

/// One event of the trace, validated.
struct Event {
    t: Value,
    at: Nanos,
    key: String,
    op: Op,
}

#[derive(Serialize)]
struct Output<'a> {
    t: &'a Value,
    key: &'a str,
    allowed: bool,
    limit: u64,
    remaining: u64,
    reset_after: f64,
    retry_after: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wait: Option<f64>,
}

/// Replays `input` into `output`; the core of `run`, separated for tests.
pub(crate) fn replay(
    algorithm: &AnyAlgorithm,
    max_keys: usize,
    mut input: impl BufRead,
    mut output: impl Write,
) -> Result<(), ReplayError> {
    let clock = ManualClock::new(Nanos::ZERO);
    let store: MemoryStore<String, AnyState, ManualClock> = MemoryStore::builder()
        .max_keys(max_keys)
        .clock(clock.clone())
        .build()
        .map_err(|e| ReplayError::Spec(e.to_string()))?;
    let shapes = algorithm.supports(OpKind::Reserve);
    let mut last = Nanos::ZERO;
    let mut line = String::new();
    let mut number = 0u64;
    loop {
        line.clear();
        if input.read_line(&mut line)? == 0 {
            break;
        }
        number += 1;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |message: String| ReplayError::Event {
            line: number,
            message,
        };
        let event = parse_event(&line).map_err(bad)?;
        if event.at < last {
            return Err(bad(format!(
                "field `t`: {} is earlier than the previous event's {} (events must be in time order)",
                event.t,
                last.as_secs_f64()
            )));
        }
        last = event.at;
        clock.set(event.at);
        let decision = store
            .apply_now(algorithm, event.key.as_str(), event.op)
            .map_err(|e| bad(format!("field `op`: {e}")))?;
        serde_json::to_writer(&mut output, &output_of(&event, &decision, shapes))
            .map_err(io::Error::from)?;
        output.write_all(b"\n")?;
    }
    output.flush()?;
    Ok(())
}

fn output_of<'a>(event: &'a Event, d: &Decision, shapes: bool) -> Output<'a> {
    Output {
        t: &event.t,
        key: &event.key,
        allowed: d.allowed,
        limit: d.limit,
        remaining: d.remaining,
        reset_after: d.reset_after.as_secs_f64(),
        retry_after: d.retry_after.map(|r| r.as_secs_f64()),
        wait: shapes.then_some(d.wait.as_secs_f64()),
    }
}

fn parse_event(line: &str) -> Result<Event, String> {
    let mut fields: Map<String, Value> =
        serde_json::from_str(line).map_err(|e| format!("not a JSON object: {e}"))?;
    let t = fields
        .remove("t")
        .ok_or_else(|| "missing field `t` (seconds from the trace's start)".to_string())?;
    let at = match t.as_f64() {
        Some(secs) if secs.is_finite() && secs >= 0.0 => Nanos::from_secs_f64(secs),
        _ => {
            return Err(format!(
                "field `t`: expected a number of seconds ≥ 0, got {t}"
            ))
        }
    };
    let key = match fields.get("key") {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(format!("field `key`: expected a string, got {other}")),
    };
    let op_name = match fields.get("op") {
        None => "check",
        Some(Value::String(s)) => s.as_str(),
        Some(other) => return Err(format!("field `op`: expected a string, got {other}")),
    };
    let cost = match fields.get("cost") {
        None => 1,
        Some(v) => v
            .as_u64()
            .ok_or_else(|| format!("field `cost`: expected a whole number ≥ 0, got {v}"))?,
    };
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
            let rate = fields
                .get("rate")
                .ok_or_else(|| "missing field `rate` (needed by `set_rate`)".to_string())?;
            match rate.as_f64() {
                Some(r) if r.is_finite() && r > 0.0 => Op::SetRate { rate: r },
                _ => {
                    return Err(format!(
                        "field `rate`: expected a number above 0, got {rate}"
                    ))
                }
            }
        }
        "acquire" | "release" => {
            return Err(format!(
                "field `op`: `{op_name}` needs a concurrency or fleet limiter, not an algorithm"
            ))
        }
        other => {
            return Err(format!(
                "field `op`: unknown operation `{other}` (check, reserve, try_acquire, set_rate)"
            ))
        }
    };
    Ok(Event { t, at, key, op })
}

fn duration_field(name: &str, value: &Value) -> Result<Duration, String> {
    let parsed = match value {
        Value::Number(n) => n
            .as_f64()
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .ok_or_else(|| "must be a number of seconds ≥ 0".to_string()),
        Value::String(s) => parse_duration(s),
        _ => Err("expected seconds or a duration string".to_string()),
    };
    parsed.map_err(|e| format!("field `{name}`: {value}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_trace(spec: &str, trace: &str) -> Result<Vec<Value>, ReplayError> {
        let alg = serde_json::from_str::<AlgorithmSpec>(spec)
            .unwrap()
            .build()
            .unwrap();
        let mut out = Vec::new();
        replay(&alg, 1000, trace.as_bytes(), &mut out)?;
        Ok(String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect())
    }

    const TB: &str = r#"{"algorithm":"token_bucket","rate":1,"capacity":2}"#;

    #[test]
    fn decisions_come_out_in_order_with_their_numbers() {
        let out = run_trace(TB, "{\"t\":0,\"key\":\"a\"}\n\n{\"t\":0,\"key\":\"a\"}\n{\"t\":0,\"key\":\"a\"}\n{\"t\":1.5,\"key\":\"a\"}\n").unwrap();
        let allowed: Vec<bool> = out
            .iter()
            .map(|o| o["allowed"].as_bool().unwrap())
            .collect();
        assert_eq!(allowed, [true, true, false, true]);
        assert_eq!(out[2]["retry_after"], 1.0);
        assert_eq!(out[0]["retry_after"], Value::Null);
        assert_eq!(out[3]["t"], 1.5);
        assert!(out[0].get("wait").is_none());
    }

    #[test]
    fn bad_lines_name_the_line_and_the_field() {
        let cases = [
            ("{\"t\":0}\nnot json\n", 2, "JSON"),
            ("{\"key\":\"a\"}\n", 1, "`t`"),
            ("{\"t\":0,\"cost\":-1}\n", 1, "`cost`"),
            ("{\"t\":5}\n{\"t\":4}\n", 2, "`t`"),
            ("{\"t\":0,\"op\":\"jump\"}\n", 1, "`op`"),
            ("{\"t\":0,\"op\":\"reserve\"}\n", 1, "`op`"),
            ("{\"t\":0,\"key\":7}\n", 1, "`key`"),
        ];
        for (trace, line, field) in cases {
            match run_trace(TB, trace) {
                Err(ReplayError::Event { line: l, message }) => {
                    assert_eq!(l, line, "{trace}");
                    assert!(message.contains(field), "{message}");
                }
                other => panic!("{trace}: {other:?}"),
            }
        }
    }
}
