//! How calls travel to Redis: by SHA (falling back to the script's source on `NOSCRIPT`),
//! singly or pipelined (one pipeline per cluster slot), under the store's timeout and circuit
//! breaker.

use std::future::Future;
use std::time::Duration;

use redis::{ErrorKind, RedisError, RedisResult, RetryMethod, ServerErrorKind, Value};

use super::call::{Call, Script};
use super::connection::Handle;
use super::keys::{group_by_slot, Tagged};
use super::rejections;
use super::reply::decode;
use super::Inner;
use crate::algorithm::spec::AnyAlgorithm;
use crate::store::breaker::Breaker;
use crate::store::KeyedOp;
use crate::{Decision, StoreError};

/// A failed call: the error, and whether it is a link failure (a timeout, a connection error,
/// or a sign that the topology is changing, which the breaker counts) rather than an answer
/// from Redis.
#[derive(Clone)]
pub(super) struct Failed {
    error: StoreError,
    link: bool,
}

impl Failed {
    /// A link failure (counted by the breaker).
    pub(super) fn link(error: StoreError) -> Failed {
        Failed { error, link: true }
    }
}

impl From<StoreError> for Failed {
    fn from(error: StoreError) -> Failed {
        Failed { error, link: false }
    }
}

impl From<RedisError> for Failed {
    fn from(e: RedisError) -> Failed {
        // Everything redis-rs would retry (I/O, `MOVED`/`ASK`, `TRYAGAIN`, `CLUSTERDOWN`,
        // `MASTERDOWN`, `LOADING`, `READONLY`, a lost cluster node) is about the link or the
        // topology, and so is a connection that could not be set up (refused, credentials, a
        // peer that is not Redis). Every error answer counts too (`OOM`, `MISCONF`, `BUSY`,
        // `NOPERM`, a script error, …): a server that answers but does not run the call fails
        // every decision alike, so it must open the breaker as a dead one does.
        let error = classify(&e);
        let link = e.is_io_error()
            || e.is_connection_dropped()
            || e.is_timeout()
            || e.is_unrecoverable_error()
            || !matches!(e.retry_method(), RetryMethod::NoRetry)
            || matches!(
                error,
                StoreError::Refused(_)
                    | StoreError::Auth(_)
                    | StoreError::Protocol(_)
                    | StoreError::Rejected { .. }
            );
        Failed { error, link }
    }
}

/// The store error a redis-rs error means, with a message that says what to fix. The client's
/// own response timeout is the store's: `guarded` fills in the duration.
pub(super) fn classify(e: &RedisError) -> StoreError {
    if e.is_timeout() {
        return StoreError::Timeout(Duration::ZERO);
    }
    if let Some(io) = io_error(e) {
        use std::io::ErrorKind as Io;
        let unreachable = matches!(
            io.kind(),
            Io::HostUnreachable | Io::NetworkUnreachable | Io::AddrNotAvailable
        ) || io.to_string().contains("failed to lookup address");
        if e.is_connection_refusal() || unreachable {
            return StoreError::Refused(e.to_string());
        }
        // rustls reports a certificate it does not trust, and a handshake with a peer that
        // does not speak TLS, as invalid data.
        if io.kind() == Io::InvalidData {
            let hint = if io.to_string().contains("certificate") {
                "the server's certificate is not trusted: give the CA that signed it with \
                 store.tls_ca_file"
            } else {
                "TLS against a plain port, or plain text against a TLS one?"
            };
            return StoreError::Protocol(format!("{e} ({hint})"));
        }
    }
    match e.kind() {
        ErrorKind::AuthenticationFailed => StoreError::Auth(
            "wrong user name or password (or a password was given and the server has none set)"
                .into(),
        ),
        _ if e.code() == Some("NOAUTH") => StoreError::Auth(
            "the server requires a password, and none was given (put it in the URL, \
             redis://:PASSWORD@host:port, or name the variable holding it in store.password_env)"
                .into(),
        ),
        _ if e.code() == Some("WRONGPASS") => {
            StoreError::Auth("wrong user name or password".into())
        }
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType | ErrorKind::RESP3NotSupported => {
            StoreError::Protocol(format!("{e} (is a Redis server listening there?)"))
        }
        // The connection's set-up selects the URL's database; redis-rs reports its refusal
        // only in the message.
        ErrorKind::Server(ServerErrorKind::ResponseError)
            if e.to_string().contains("refused to switch database") =>
        {
            StoreError::Protocol(format!(
                "{e} (the URL's /db names a database this server does not have)"
            ))
        }
        // A redirect still there after the store's sends: the topology is moving.
        ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask) => {
            StoreError::Unavailable(e.to_string())
        }
        // Any other error answer: the server is up but does not run the call.
        _ => match e.code() {
            Some(code) => {
                let (rejection, named) = rejections::of_code(code);
                let detail = e.detail().unwrap_or_default();
                let hint = rejections::hint(rejection);
                let message = if code != named {
                    format!("{code} {detail}; {hint}")
                } else {
                    format!("{detail}; {hint}")
                };
                StoreError::Rejected {
                    rejection,
                    code: named,
                    message,
                }
            }
            None => StoreError::Unavailable(e.to_string()),
        },
    }
}

/// The I/O error behind `e`, if it is one. redis-rs keeps it behind an `Arc` that is itself
/// the error's source.
fn io_error(e: &RedisError) -> Option<&std::io::Error> {
    use std::error::Error;
    let source = e.source()?;
    source.downcast_ref::<std::io::Error>().or_else(|| {
        source
            .downcast_ref::<std::sync::Arc<dyn Error + Send + Sync>>()
            .and_then(|inner| inner.downcast_ref::<std::io::Error>())
    })
}

pub(super) fn is(e: &RedisError, kind: ServerErrorKind) -> bool {
    e.kind() == ErrorKind::Server(kind)
}

/// A reply saying the call did not run and may simply be sent again: the script is unknown
/// there, or (on a cluster) the key's slot is elsewhere or moving.
fn did_not_run(reply: &RedisResult<Value>, cluster: bool) -> bool {
    use ServerErrorKind::*;
    let Err(e) = reply else { return false };
    is(e, NoScript)
        || cluster
            && [
                Moved,
                Ask,
                TryAgain,
                ClusterDown,
                MasterDown,
                BusyLoading,
                ReadOnly,
            ]
            .into_iter()
            .any(|kind| is(e, kind))
}

/// One call of a batch: its key, instant argument and script call.
struct Item<'r> {
    key: Tagged<'r>,
    now: &'r str,
    call: &'r Call<'r>,
}

impl Inner {
    /// Runs `call` on `key`: by SHA, then once by source if Redis does not know the script.
    pub(super) async fn run(
        &self,
        algorithm: &AnyAlgorithm,
        key: &str,
        now: &str,
        call: &Call<'_>,
    ) -> Result<Decision, Failed> {
        let mut handle = self.connection.handle();
        let value = self.run_one(&mut handle, Tagged(key), now, call).await?;
        Ok(decode(algorithm, value)?)
    }

    /// `EVALSHA`, and `EVAL` of the source after `NOSCRIPT`. `EVAL` goes where `EVALSHA` went
    /// (it is routed by the same key), runs the script and leaves it in that node's script
    /// cache: one round trip, on exactly the node that lacked the script.
    async fn run_one(
        &self,
        handle: &mut Handle,
        key: Tagged<'_>,
        now: &str,
        call: &Call<'_>,
    ) -> RedisResult<Value> {
        self.send_script(handle, |by_source| self.script(by_source, key, now, call))
            .await
    }

    /// Sends `command(false)` (an `EVALSHA`), and `command(true)` (the same call as `EVAL` of
    /// the source) after `NOSCRIPT`; a `READONLY` answer replaces a single Redis's connection.
    ///
    /// On a cluster, a call answered with a redirection (`MOVED`, `ASK`, `TRYAGAIN`,
    /// `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`) did not run, and is sent where it says (see
    /// module `redirect`), at most [`SENDS`] times in all, within the call's timeout; each
    /// redirection followed is counted, and a `MOVED` marks the store's slot map stale. Nothing
    /// else is ever sent twice: the cluster client's own retries are off, since after a lost
    /// connection or a timeout it would send again a call that may have run.
    pub(super) async fn send_script(
        &self,
        handle: &mut Handle,
        command: impl Fn(bool) -> redis::Cmd,
    ) -> RedisResult<Value> {
        self.send_following(handle, command, true).await
    }

    /// After a `READONLY` answer on `handle`: the connection is made anew (unless the store
    /// keeps it: [`super::RedisStoreBuilder::reconnect_on_readonly`]), and the sentinels asked
    /// again.
    pub(super) fn read_only_answered(&self, handle: &Handle) {
        if self.reconnect_on_readonly || self.connection.is_sentinel() {
            self.connection.replace_if_readonly(handle);
        }
    }

    /// `EVALSHA sha 1 key now min_ttl args…`, or `EVAL source 1 …` when `by_source`.
    fn script(&self, by_source: bool, key: Tagged<'_>, now: &str, call: &Call<'_>) -> redis::Cmd {
        let mut cmd = call.script.command(by_source);
        cmd.arg(1)
            .arg(key)
            .arg(now)
            .arg(self.min_ttl_ms)
            .arg(&call.args);
        cmd
    }

    /// Runs every call, in one pipeline on a single Redis, and in one pipeline per slot on a
    /// cluster (sent concurrently). The first failing reply, in request order, is the batch's
    /// error.
    pub(super) async fn run_many(
        &self,
        requests: &[KeyedOp<'_, str, AnyAlgorithm>],
        nows: &[String],
        calls: &[Call<'_>],
    ) -> Result<Vec<Decision>, Failed> {
        let items: Vec<Item<'_>> = requests
            .iter()
            .zip(nows)
            .zip(calls)
            .map(|((request, now), call)| Item {
                key: Tagged(request.key),
                now,
                call,
            })
            .collect();
        let handle = self.connection.handle();
        let replies = if self.connection.is_cluster() {
            let groups = group_by_slot(items.iter().map(|item| item.key.slot()), usize::MAX);
            let sent = futures_util::future::join_all(
                groups
                    .iter()
                    .map(|(_, group)| self.run_group(handle.clone(), &items, group, true)),
            )
            .await;
            let mut replies: Vec<Option<RedisResult<Value>>> = vec![None; items.len()];
            for ((_, group), result) in groups.iter().zip(sent) {
                match result {
                    Ok(values) => {
                        for (&i, value) in group.iter().zip(values) {
                            replies[i] = Some(value);
                        }
                    }
                    // The whole group failed: each of its calls carries the error.
                    Err(e) => {
                        for &i in group {
                            replies[i] = Some(Err(e.clone()));
                        }
                    }
                }
            }
            replies.into_iter().flatten().collect()
        } else {
            let all: Vec<usize> = (0..items.len()).collect();
            self.run_group(handle, &items, &all, false).await?
        };
        requests
            .iter()
            .zip(replies)
            .map(|(request, reply)| Ok(decode(request.algorithm, reply?)?))
            .collect()
    }

    /// Runs `items[group]` in one pipeline (one round trip). The calls that did not run (and
    /// only those, so nothing runs twice) are sent again: in a second pipeline when Redis only
    /// lacked scripts (`EVAL` for each script's first call, which loads it, `EVALSHA` for the
    /// others), else one by one in order, where the cluster client follows redirects and
    /// refreshes its slot map.
    async fn run_group(
        &self,
        mut handle: Handle,
        items: &[Item<'_>],
        group: &[usize],
        cluster: bool,
    ) -> RedisResult<Vec<RedisResult<Value>>> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for &i in group {
            let item = &items[i];
            pipe.add_command(self.script(false, item.key, item.now, item.call));
        }
        let mut node = self.group_master(items, group, cluster);
        let mut replies: Vec<RedisResult<Value>> = match &mut node {
            Some(node) => pipe.query_async(node).await?,
            None => pipe.query_async(&mut handle).await?,
        };
        if replies.len() != group.len() {
            return Err(wrong_length());
        }
        if replies
            .iter()
            .any(|r| matches!(r, Err(e) if is(e, ServerErrorKind::ReadOnly)))
        {
            self.read_only_answered(&handle);
        }
        let missing: Vec<usize> = (0..replies.len())
            .filter(|&j| did_not_run(&replies[j], cluster))
            .collect();
        if missing.is_empty() {
            return Ok(replies);
        }
        let only_scripts = missing
            .iter()
            .all(|&j| matches!(&replies[j], Err(e) if is(e, ServerErrorKind::NoScript)));
        if only_scripts {
            let mut again = redis::pipe();
            again.ignore_errors();
            let mut loaded: Vec<&Script> = Vec::new();
            for &j in &missing {
                let item = &items[group[j]];
                let first = !loaded.iter().any(|s| std::ptr::eq(*s, item.call.script));
                if first {
                    loaded.push(item.call.script);
                }
                again.add_command(self.script(first, item.key, item.now, item.call));
            }
            let answers: Vec<RedisResult<Value>> = match &mut node {
                Some(node) => again.query_async(node).await?,
                None => again.query_async(&mut handle).await?,
            };
            if answers.len() != missing.len() {
                return Err(wrong_length());
            }
            for (&j, answer) in missing.iter().zip(answers) {
                replies[j] = answer;
            }
        } else {
            for &j in &missing {
                let item = &items[group[j]];
                replies[j] = self
                    .run_one(&mut handle, item.key, item.now, item.call)
                    .await;
            }
        }
        Ok(replies)
    }

    /// On a cluster, the connection to the master of `items[group]`'s slot in the store's map,
    /// as for one call; `None` on one Redis, or when that connection is not open yet (it is
    /// then made in the background, and the group goes through the cluster client).
    fn group_master(
        &self,
        items: &[Item<'_>],
        group: &[usize],
        cluster: bool,
    ) -> Option<redis::aio::ConnectionManager> {
        let &first = group.first()?;
        let address = self.slot_master(items[first].key.slot())?;
        if !cluster {
            return None;
        }
        let nodes = self.connection.nodes()?;
        let node = nodes.opened(&address);
        if node.is_none() {
            nodes.open_in_background(std::iter::once(address.as_str()));
        }
        node
    }

    /// Runs `calls` under the breaker and the timeout: refused at once while the breaker is
    /// open; a link failure counts towards opening it, a success closes it.
    pub(super) async fn guarded<T>(
        &self,
        calls: impl Future<Output = Result<T, Failed>>,
    ) -> Result<T, StoreError> {
        self.guarded_for(self.timeout, calls).await
    }

    /// [`Inner::guarded`] with another bound than the store's timeout (a sync of many keys).
    pub(super) async fn guarded_for<T>(
        &self,
        timeout: Duration,
        calls: impl Future<Output = Result<T, Failed>>,
    ) -> Result<T, StoreError> {
        self.guarded_within(&self.breaker, timeout, calls).await
    }

    /// [`Inner::guarded`] under `breaker` (a cluster master's) instead of the store's.
    pub(super) async fn guarded_by<T>(
        &self,
        breaker: &Breaker,
        calls: impl Future<Output = Result<T, Failed>>,
    ) -> Result<T, StoreError> {
        self.guarded_within(breaker, self.timeout, calls).await
    }

    /// [`Inner::guarded`] under `breaker` and within `timeout`.
    pub(super) async fn guarded_within<T>(
        &self,
        breaker: &Breaker,
        timeout: Duration,
        calls: impl Future<Output = Result<T, Failed>>,
    ) -> Result<T, StoreError> {
        let clock = &*self.breaker_clock.0;
        let permit = breaker.admit(clock)?;
        let result = tokio::time::timeout(timeout, calls)
            .await
            .unwrap_or(Err(Failed::link(StoreError::Timeout(timeout))));
        let link_failed = matches!(&result, Err(f) if f.link);
        if link_failed {
            self.connection.link_failed();
            if let Some(nodes) = &self.nodes {
                nodes.failed();
            }
        }
        permit.record(link_failed, clock);
        result.map_err(|f| self.reported(f, timeout))
    }

    /// The error a caller sees for `failed`: a timeout of `timeout`, or the message with the
    /// URL's password scrubbed.
    pub(super) fn reported(&self, failed: Failed, timeout: Duration) -> StoreError {
        match failed.error {
            StoreError::Timeout(_) => StoreError::Timeout(timeout),
            StoreError::Unavailable(message) => StoreError::Unavailable(self.scrubbed(message)),
            StoreError::Refused(message) => StoreError::Refused(self.scrubbed(message)),
            StoreError::Auth(message) => StoreError::Auth(self.scrubbed(message)),
            StoreError::Protocol(message) => StoreError::Protocol(self.scrubbed(message)),
            StoreError::Rejected {
                rejection,
                code,
                message,
            } => StoreError::Rejected {
                rejection,
                code,
                message: self.scrubbed(message),
            },
            other => other,
        }
    }

    /// `message` with the URL's password replaced by `***` where a URL carries it: as the
    /// user information (`:PASSWORD@`) or a query parameter's value (`=PASSWORD`). Only there:
    /// the same text elsewhere in a message is the server's own words (a password `wrong`
    /// must not turn "wrong user name or password" into "*** user name or password").
    fn scrubbed(&self, mut message: String) -> String {
        for secret in &self.secrets {
            for (form, masked) in [
                (format!(":{secret}@"), ":***@"),
                (format!("={secret}"), "=***"),
            ] {
                if message.contains(&form) {
                    message = message.replace(&form, masked);
                }
            }
        }
        message
    }
}

fn wrong_length() -> RedisError {
    RedisError::from((ErrorKind::Client, "a pipeline reply of the wrong length"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(code: &str, detail: &str) -> RedisError {
        redis::make_extension_error(code.to_string(), Some(detail.to_string()))
    }

    #[test]
    fn every_error_answer_is_a_rejection_named_by_its_code_and_counted_by_the_breaker() {
        use crate::store::Rejection;
        for (code, rejection) in [
            ("READONLY", Rejection::ReadOnly),
            ("OOM", Rejection::OutOfMemory),
            ("MISCONF", Rejection::WritesStopped),
            ("NOPERM", Rejection::NoPermission),
            ("BUSY", Rejection::Busy),
            ("CROSSSLOT", Rejection::CrossSlot),
            ("NOSCRIPT", Rejection::NoScript),
            ("LOADING", Rejection::Loading),
            ("ERR", Rejection::Other),
            ("SOMETHINGNEW", Rejection::Other),
        ] {
            let failed = Failed::from(answered(code, "the server's words"));
            assert!(failed.link, "{code}: the breaker counts it");
            match &failed.error {
                StoreError::Rejected {
                    rejection: r,
                    code: named,
                    message,
                } => {
                    assert_eq!(*r, rejection, "{code}");
                    let hint = rejections::hint(rejection);
                    let expected = if code == "SOMETHINGNEW" {
                        assert_eq!(*named, "ERR");
                        format!("SOMETHINGNEW the server's words; {hint}")
                    } else {
                        assert_eq!(*named, code);
                        format!("the server's words; {hint}")
                    };
                    assert_eq!(message, &expected);
                }
                other => panic!("{code}: {other}"),
            }
            assert!(failed.error.is_store_failure(), "{code}");
        }
        // Credentials stay credentials.
        assert!(matches!(
            classify(&answered("WRONGPASS", "invalid username-password pair")),
            StoreError::Auth(_)
        ));
    }
}
