//! How calls travel to Redis: by SHA with a reload on `NOSCRIPT`, singly or pipelined, under the
//! store's timeout and circuit breaker.

use std::future::Future;
use std::time::Duration;

use redis::Value;

use super::call::{Call, Script};
use super::reply::decode;
use super::Inner;
use crate::algorithm::spec::AnyAlgorithm;
use crate::store::Request;
use crate::{Decision, StoreError};

/// A failed call: the error, and whether it is a link failure (a timeout or a connection
/// error, which the breaker counts) rather than an answer from Redis.
pub(super) struct Failed {
    error: StoreError,
    link: bool,
}

impl From<StoreError> for Failed {
    fn from(error: StoreError) -> Failed {
        Failed { error, link: false }
    }
}

impl From<redis::RedisError> for Failed {
    fn from(e: redis::RedisError) -> Failed {
        let link = e.is_io_error()
            || e.is_connection_dropped()
            || e.is_timeout()
            || e.is_unrecoverable_error();
        // The client's own response timeout is the store's: `guarded` fills in the duration.
        let error = if e.is_timeout() {
            StoreError::Timeout(Duration::ZERO)
        } else {
            unavailable(e)
        };
        Failed { error, link }
    }
}

fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

impl Inner {
    /// Runs `call` on `key` by SHA, loading the script once if Redis does not know it.
    pub(super) async fn run(
        &self,
        algorithm: &AnyAlgorithm,
        key: &str,
        now: &str,
        call: &Call<'_>,
    ) -> Result<Decision, Failed> {
        let value = self
            .invoke(&self.evalsha(key, now, call), call.script)
            .await?;
        Ok(decode(algorithm, value)?)
    }

    /// Sends `evalsha` (an `EVALSHA` of `script`); on `NOSCRIPT`, loads `script` and sends it
    /// once more.
    pub(super) async fn invoke(
        &self,
        evalsha: &redis::Cmd,
        script: &Script,
    ) -> Result<Value, Failed> {
        let mut connection = self.connection.clone();
        Ok(match evalsha.query_async::<Value>(&mut connection).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                let loaded: String = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(&script.source)
                    .query_async(&mut connection)
                    .await?;
                debug_assert_eq!(loaded, script.sha);
                evalsha.query_async::<Value>(&mut connection).await
            }
            other => other,
        }?)
    }

    /// `EVALSHA sha 1 key now min_ttl args…`.
    fn evalsha(&self, key: &str, now: &str, call: &Call<'_>) -> redis::Cmd {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha
            .arg(&call.script.sha)
            .arg(1)
            .arg(key)
            .arg(now)
            .arg(self.min_ttl_ms)
            .arg(&call.args);
        evalsha
    }

    /// Runs every call in one pipeline (one round trip). The calls Redis answers `NOSCRIPT`
    /// (and only those: the others have run) are sent again in a second pipeline, after
    /// `SCRIPT LOAD` of their scripts.
    pub(super) async fn run_many(
        &self,
        requests: &[Request<'_, str, AnyAlgorithm>],
        nows: &[String],
        calls: &[Call<'_>],
    ) -> Result<Vec<Decision>, Failed> {
        let mut connection = self.connection.clone();
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for ((request, now), call) in requests.iter().zip(nows).zip(calls) {
            pipe.add_command(self.evalsha(request.key, now, call));
        }
        let mut replies: Vec<redis::RedisResult<Value>> = pipe.query_async(&mut connection).await?;
        if replies.len() != calls.len() {
            return Err(
                StoreError::Unavailable("a pipeline reply of the wrong length".into()).into(),
            );
        }
        let no_script = |r: &redis::RedisResult<Value>| matches!(r, Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript));
        let missing: Vec<usize> = (0..replies.len())
            .filter(|&i| no_script(&replies[i]))
            .collect();
        if !missing.is_empty() {
            let mut scripts: Vec<&Script> = Vec::new();
            for &i in &missing {
                if !scripts.iter().any(|s| std::ptr::eq(*s, calls[i].script)) {
                    scripts.push(calls[i].script);
                }
            }
            let mut again = redis::pipe();
            again.ignore_errors();
            for script in &scripts {
                again.cmd("SCRIPT").arg("LOAD").arg(&script.source);
            }
            for &i in &missing {
                again.add_command(self.evalsha(requests[i].key, &nows[i], &calls[i]));
            }
            let answers: Vec<redis::RedisResult<Value>> =
                again.query_async(&mut connection).await?;
            if answers.len() != scripts.len() + missing.len() {
                return Err(
                    StoreError::Unavailable("a pipeline reply of the wrong length".into()).into(),
                );
            }
            let mut answers = answers.into_iter();
            for loaded in answers.by_ref().take(scripts.len()) {
                loaded?;
            }
            for (&i, answer) in missing.iter().zip(answers) {
                replies[i] = answer;
            }
        }
        requests
            .iter()
            .zip(replies)
            .map(|(request, reply)| Ok(decode(request.algorithm, reply?)?))
            .collect()
    }

    /// Runs `calls` under the breaker and the timeout: refused at once while the breaker is
    /// open; a timeout or a connection error counts towards opening it, a success closes it.
    pub(super) async fn guarded<T>(
        &self,
        calls: impl Future<Output = Result<T, Failed>>,
    ) -> Result<T, StoreError> {
        let clock = &*self.breaker_clock.0;
        let permit = self.breaker.admit(clock)?;
        let result = tokio::time::timeout(self.timeout, calls)
            .await
            .unwrap_or(Err(Failed {
                error: StoreError::Timeout(self.timeout),
                link: true,
            }));
        permit.record(matches!(&result, Err(f) if f.link), clock);
        result.map_err(|f| match f.error {
            StoreError::Timeout(_) => StoreError::Timeout(self.timeout),
            other => other,
        })
    }
}
