//! What Redis itself counts of the store's work: the calls of scripts and the time it spent
//! running them (`INFO commandstats`), for measuring the cost of a decision where it is paid.

use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::Value;

use super::connection::Handle;
use super::{RedisStore, StoreError};

/// Script calls (`EVALSHA` and `EVAL`) a Redis has run since its start or its last
/// `CONFIG RESETSTAT`, and the time it spent in them: from every client, so take the
/// difference of two readings around a run that is alone on the server. On a cluster, the sum
/// over its masters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ScriptTime {
    /// Script calls run.
    pub calls: u64,
    /// Microseconds spent running them, as Redis measures it (`usec`).
    pub usec: u64,
}

impl ScriptTime {
    /// What happened between `earlier` and this reading.
    pub fn since(self, earlier: ScriptTime) -> ScriptTime {
        ScriptTime {
            calls: self.calls.saturating_sub(earlier.calls),
            usec: self.usec.saturating_sub(earlier.usec),
        }
    }
}

impl RedisStore {
    /// Reads `INFO commandstats` (on every master of a cluster) under the store's timeout and
    /// breaker, and sums the script commands' calls and time.
    pub async fn script_time(&self) -> Result<ScriptTime, StoreError> {
        let inner = &self.inner;
        inner
            .guarded(async {
                let mut command = redis::cmd("INFO");
                command.arg("commandstats");
                let mut handle = inner.connection.handle();
                let value = match &mut handle {
                    Handle::Cluster(cluster) => {
                        let all =
                            RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                        cluster.route_command(command, all).await?
                    }
                    _ => command.query_async(&mut handle).await?,
                };
                let mut time = ScriptTime::default();
                add_script_lines(&value, &mut time);
                Ok(time)
            })
            .await
    }
}

/// Adds the `cmdstat_evalsha` and `cmdstat_eval` lines of every `INFO` text in `value` (one
/// reply, or a cluster's map or array of them) to `time`.
fn add_script_lines(value: &Value, time: &mut ScriptTime) {
    match value {
        Value::BulkString(bytes) => add_from_text(&String::from_utf8_lossy(bytes), time),
        Value::VerbatimString { text, .. } | Value::SimpleString(text) => add_from_text(text, time),
        Value::Array(items) | Value::Set(items) => {
            items.iter().for_each(|item| add_script_lines(item, time))
        }
        Value::Map(pairs) => pairs
            .iter()
            .for_each(|(_, item)| add_script_lines(item, time)),
        _ => {}
    }
}

fn add_from_text(text: &str, time: &mut ScriptTime) {
    for line in text.lines() {
        let Some(fields) = line
            .strip_prefix("cmdstat_evalsha:")
            .or_else(|| line.strip_prefix("cmdstat_eval:"))
        else {
            continue;
        };
        for field in fields.split(',') {
            match field.split_once('=') {
                Some(("calls", n)) => time.calls += n.trim().parse::<u64>().unwrap_or(0),
                Some(("usec", n)) => time.usec += n.trim().parse::<u64>().unwrap_or(0),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_lines_are_summed_over_nodes() {
        let node = |calls: u64, usec: u64| {
            Value::BulkString(
                format!(
                    "# Commandstats\r\ncmdstat_get:calls=9,usec=9,usec_per_call=1.00\r\n\
                     cmdstat_evalsha:calls={calls},usec={usec},usec_per_call=2.00,rejected_calls=0\r\n\
                     cmdstat_eval:calls=1,usec=5,usec_per_call=5.00\r\n"
                )
                .into_bytes(),
            )
        };
        let mut time = ScriptTime::default();
        add_script_lines(
            &Value::Map(vec![
                (Value::SimpleString("a".into()), node(10, 20)),
                (Value::SimpleString("b".into()), node(30, 40)),
            ]),
            &mut time,
        );
        assert_eq!(
            time,
            ScriptTime {
                calls: 42,
                usec: 70
            }
        );
        assert_eq!(
            time.since(ScriptTime { calls: 2, usec: 10 }),
            ScriptTime {
                calls: 40,
                usec: 60
            }
        );
    }
}
