//! [`RedisStore::probe`](super::RedisStore::probe): whether the store can be used now, on the
//! path decisions take, and, once it says so, that path warm: no decision after a successful
//! probe waits for something the probe could have made ready.
//!
//! What a successful probe leaves behind:
//! - **One Redis** (plain, TLS, or found through sentinels): the connection decisions use, set
//!   up (the probe waits for it); a script that writes and removes `floodgate:{probe}` run
//!   over that connection; then every script the store calls loaded on the server
//!   (`SCRIPT EXISTS`, then one pipeline of `SCRIPT LOAD` for those it lacks).
//! - **A Redis Cluster**: the store's slot map asked for now (`CLUSTER SLOTS`), installed and
//!   asked again until two answers agree, then marked fresh, so that the first decisions route
//!   by it (each master's lane and breaker) without starting a refresh of their own. Then, for
//!   every master of that map, concurrently and each under its own breaker: the store's own
//!   connection to it opened (the one decisions are sent on: neither a connection of the
//!   probe's own nor the cluster client's), a key of one of its slots (`floodgate:{probe-N}`)
//!   written and removed by a script sent along the decisions' route (the master the store's
//!   map names, over that connection), and the scripts loaded over it.
//!
//! The write comes before the scripts are loaded: its failure is the one a decision would
//! meet (a server refusing writes, credentials missing), and a server that has not
//! authenticated us drops a connection that sends it a long command.
//!
//! Each step is bounded by the connect timeout plus the call timeout (2.05 s by default):
//! setting connections up is what takes long, and the probe is the caller that may wait for
//! it. The first failure is the answer, with the errors a decision would get.
//!
//! Why warm before ready, rather than let a cold first call wait for its connection: a node
//! that says ready takes its share of traffic at once (a rolling deploy's new pod), and each
//! of its first calls that waits for a slot map, a connection or a script load past the call
//! timeout (50 ms by default) fails open: a request let through unlimited. A first call
//! allowed the connect timeout instead would hold requests for up to seconds on a node that
//! claimed to be ready. The probe is the one caller nobody waits on, so it pays.
//!
//! Loading the scripts is an optimisation only: a server that answers `SCRIPT` with an error
//! (an ACL without it) leaves the scripts to the calls, which send a script's source after
//! `NOSCRIPT` as after a restart; only a failure of the link fails the probe there. A later
//! restart or failover empties a server's script cache again: the calls' fallback covers
//! that, and the next probe loads what is missing.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{RedisError, Value};

use super::keys::Tagged;
use super::link::Failed;
use super::{Inner, PROBE_KEY};
use crate::StoreError;

impl Inner {
    /// [`super::RedisStore::probe`].
    pub(super) async fn probe(self: &Arc<Self>) -> Result<(), StoreError> {
        let bound = self.timeout.saturating_add(self.connect_timeout);
        if self.nodes.is_some() {
            return self.probe_cluster(bound).await;
        }
        self.guarded_for(bound, async {
            // The write first: its failure is the one decisions would meet, and a server
            // refusing us (no password given) may drop a connection that sends it more.
            self.write_probe(PROBE_KEY).await?;
            self.load_scripts(&mut self.connection.handle()).await
        })
        .await
    }

    /// The probe on a cluster: the slot map settled, then every master warmed and written.
    async fn probe_cluster(self: &Arc<Self>, bound: Duration) -> Result<(), StoreError> {
        self.guarded_for(bound, self.settle_slot_map(bound)).await?;
        let masters = match &self.nodes {
            Some(nodes) => nodes.probe_keys(),
            None => Vec::new(),
        };
        if masters.is_empty() {
            return Err(StoreError::Unavailable(
                "the cluster's slot map names no master".into(),
            ));
        }
        let probes = masters.iter().map(|(address, key, breaker)| {
            self.guarded_within(breaker, bound, self.warm_master(address, key))
        });
        futures_util::future::join_all(probes)
            .await
            .into_iter()
            .collect()
    }

    /// The store's own connection to the master at `address` opened (now, if it was not),
    /// `key` (one of its slots') written and removed through the decisions' route, which the
    /// open connection now carries, and the scripts loaded over it.
    async fn warm_master(&self, address: &str, key: &str) -> Result<(), Failed> {
        let Some(connections) = self.connection.nodes() else {
            return Err(StoreError::Unavailable("not a cluster".into()).into());
        };
        let mut node = connections.to(address).await?;
        self.write_probe(key).await?;
        self.load_scripts(&mut node).await
    }

    /// Loads on the server behind `connection` every script the store calls that it lacks: one
    /// `SCRIPT EXISTS`, then one pipeline of `SCRIPT LOAD`s (none when all are there). An error
    /// answer leaves the scripts to the calls' `NOSCRIPT` fallback; a link failure fails.
    async fn load_scripts(&self, connection: &mut impl ConnectionLike) -> Result<(), Failed> {
        let scripts = self.scripts.all();
        let mut exists = redis::cmd("SCRIPT");
        exists.arg("EXISTS");
        for script in &scripts {
            exists.arg(&script.sha);
        }
        let known: Vec<bool> = match exists.query_async(connection).await {
            Ok(known) => known,
            Err(e) => return left_to_calls(e),
        };
        let mut load = redis::pipe();
        let mut missing = 0;
        for (script, _) in scripts.iter().zip(&known).filter(|(_, known)| !**known) {
            load.cmd("SCRIPT").arg("LOAD").arg(&script.source).ignore();
            missing += 1;
        }
        if missing == 0 {
            return Ok(());
        }
        match load.query_async::<()>(connection).await {
            Ok(()) => Ok(()),
            Err(e) => left_to_calls(e),
        }
    }

    /// The probe's script call on `key`, along the route decisions take.
    async fn write_probe(&self, key: &str) -> Result<(), Failed> {
        let mut handle = self.connection.handle();
        let script = &self.scripts.probe;
        let answer = self
            .send_script(&mut handle, |by_source| {
                let mut cmd = script.command(by_source);
                cmd.arg(1).arg(Tagged(key));
                cmd
            })
            .await?;
        match answer {
            Value::Int(1) => Ok(()),
            other => Err(StoreError::Protocol(format!(
                "the probe's script answered {other:?}, not 1 (is a Redis server listening there?)"
            ))
            .into()),
        }
    }
}

/// After `SCRIPT` failed with `e`: fine when the server answered with an error (the calls load
/// the scripts themselves), a failure of the probe when the link failed.
fn left_to_calls(e: RedisError) -> Result<(), Failed> {
    if e.code().is_some() {
        tracing::debug!(error = %e, "scripts not loaded ahead; calls load them on NOSCRIPT");
        Ok(())
    } else {
        Err(e.into())
    }
}
