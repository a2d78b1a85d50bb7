//! A chain ([`crate::store::chain`]) in one script call: `chain.lua` runs the links' twins in
//! order on their keys and undoes the all-or-nothing ones when a denial ends the chain.

use redis::Value;

use super::call::Call;
use super::link::Failed;
use super::reply::decode;
use super::Inner;
use crate::algorithm::spec::AnyAlgorithm;
use crate::store::{Link, Linked};
use crate::StoreError;

impl Inner {
    /// `EVALSHA chain n keys… now min_ttl n (twin flags count args…)…`, and the links'
    /// outcomes.
    pub(super) async fn run_chain(
        &self,
        links: &[Link<'_, str, AnyAlgorithm>],
        now: &str,
        calls: &[Call<'_>],
    ) -> Result<Vec<Linked>, Failed> {
        let chain = &self.scripts.chain;
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(&chain.sha).arg(links.len());
        for link in links {
            evalsha.arg(link.request.key);
        }
        evalsha.arg(now).arg(self.min_ttl_ms).arg(links.len());
        for (link, call) in links.iter().zip(calls) {
            let flags = [
                (link.refuses, 'r'),
                (link.stops, 's'),
                (link.all_or_nothing, 'a'),
            ]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, flag)| *flag)
            .collect::<String>();
            let flags = if flags.is_empty() {
                "-".to_owned()
            } else {
                flags
            };
            evalsha
                .arg(call.script.twin)
                .arg(flags)
                .arg(call.args.len())
                .arg(&call.args);
        }
        let Value::Array(replies) = self.invoke(&evalsha, chain).await? else {
            return Err(
                StoreError::Unavailable("unexpected reply from the chain script".into()).into(),
            );
        };
        if replies.len() > links.len() {
            return Err(
                StoreError::Unavailable("unexpected reply from the chain script".into()).into(),
            );
        }
        let mut replies = replies.into_iter();
        Ok(links
            .iter()
            .map(|link| match replies.next() {
                Some(reply) => match decode(link.request.algorithm, reply) {
                    Ok(decision) => Linked::Decided(decision),
                    Err(e) => Linked::Failed(e),
                },
                None => Linked::NotReached,
            })
            .collect())
    }
}
