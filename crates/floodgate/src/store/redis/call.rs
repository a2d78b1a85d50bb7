//! From an algorithm and an operation to a script call: which Lua twin runs it, and the
//! arguments it takes, or a refusal before anything is sent when the twin could not be exact.

use super::super::ensure_supported;
use crate::algorithm::spec::AnyAlgorithm;
use crate::algorithm::twin::{Helper, Lua};
use crate::algorithm::Algorithm;
use crate::{Op, StoreError};

pub(super) use crate::algorithm::twin::MAX_MICROS;

pub(super) const PRELUDE: &str = include_str!("prelude.lua");

/// Helpers only some twins use, included only in their scripts (each is built anew on every
/// call, so a script carries only what it needs).
const EXACT: &str = include_str!("exact.lua");
const SHAPING: &str = include_str!("shaping.lua");
const ALIGN: &str = include_str!("align.lua");

/// A helper file's text.
fn helper(helper: Helper) -> &'static str {
    match helper {
        Helper::Exact => EXACT,
        Helper::Shaping => SHAPING,
        Helper::Align => ALIGN,
    }
}

/// Every twin once (two algorithms may share one), in the order of the algorithms' numbers.
fn distinct_twins() -> Vec<&'static Lua> {
    let mut twins: Vec<&'static Lua> = Vec::new();
    for lua in AnyAlgorithm::TWINS {
        if !twins.iter().any(|t| t.function == lua.function) {
            twins.push(lua);
        }
    }
    twins
}

/// One Lua script: its source, the SHA-1 Redis knows it by, and the twin it runs (empty for
/// the batch script, which runs them all).
#[derive(Debug)]
pub(super) struct Script {
    pub(super) source: String,
    pub(super) sha: String,
    pub(super) twin: &'static str,
}

impl Script {
    fn from_source(source: String, twin: &'static str) -> Script {
        let sha = sha1_smol::Sha1::from(source.as_bytes())
            .digest()
            .to_string();
        Script { source, sha, twin }
    }

    /// The start of a call of this script: `EVALSHA sha`, or `EVAL source` when `by_source`
    /// (after Redis answered `NOSCRIPT`: it runs the script and keeps it).
    pub(super) fn command(&self, by_source: bool) -> redis::Cmd {
        if by_source {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(&self.source);
            cmd
        } else {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&self.sha);
            cmd
        }
    }

    /// The script running the twin `lua` on `KEYS[1]` with `ARGV[3..]`.
    fn twin(lua: &'static Lua) -> Script {
        let mut source = format!("{PRELUDE}\n");
        for &h in lua.helpers {
            source.push_str(helper(h));
            source.push('\n');
        }
        // The arguments as a table built in one step (no loop over ARGV).
        source.push_str(&format!(
            "{}\nreturn {}(KEYS[1], now_us, {{select(3, unpack(ARGV))}})\n",
            lua.source, lua.function
        ));
        Script::from_source(source, lua.function)
    }

    /// The probe's script: writes `KEYS[1]` with a TTL of one second and deletes it again,
    /// so that a server refusing writes (a replica, out of memory, stopped after a failed
    /// save, an ACL) refuses it as it refuses decisions, and nothing is left behind.
    fn probe() -> Script {
        let source = "redis.call('SET', KEYS[1], '1', 'PX', 1000)\n\
                      redis.call('DEL', KEYS[1])\n\
                      return 1\n";
        Script::from_source(source.to_owned(), "probe")
    }

    /// The cached store's sync script (cached.lua), after the helpers and the absorbing
    /// function of every algorithm with a cached form, and `absorbs`, the table of those
    /// functions by state tag.
    fn cached() -> Script {
        let absorbs: Vec<_> = AnyAlgorithm::ABSORBS.iter().flatten().collect();
        let mut source = format!("{PRELUDE}\n");
        let mut helpers: Vec<Helper> = Vec::new();
        for absorb in &absorbs {
            for &h in absorb.lua.helpers {
                if !helpers.contains(&h) {
                    helpers.push(h);
                    source.push_str(helper(h));
                    source.push('\n');
                }
            }
        }
        for absorb in &absorbs {
            source.push_str(absorb.lua.source);
            source.push('\n');
        }
        source.push_str("local absorbs = {");
        for absorb in &absorbs {
            source.push_str(&format!("{} = {}, ", absorb.tag, absorb.lua.function));
        }
        source.push_str("}\n");
        source.push_str(include_str!("cached.lua"));
        Script::from_source(source, "cached")
    }

    /// The script running a batch of groups of twins (batch.lua): every twin, and a table of
    /// them by name.
    fn batch() -> Script {
        Script::batch_with(
            "local function batch_keys() return KEYS, #ARGV, {KEYS} end\n",
            "",
        )
    }

    /// [`Script::batch`] for a Redis Cluster: its flags (Redis 7) let it touch keys of several
    /// slots, as long as one node serves them all, so that one call carries a master's batch.
    /// Redis refuses declared keys of several slots whatever the flags, and any one command
    /// spanning slots, so only the first key is declared (it routes the call), all of them
    /// follow the groups in `ARGV`, and the keys to read together come per slot, each slot's
    /// after a key of that slot that never exists (its probe, made from one of its keys: [`super::keys::probe_key`]).
    fn batch_cluster() -> Script {
        Script::batch_with(
            "local function batch_keys()\n\
             \x20 local size, n = tonumber(ARGV[#ARGV]), tonumber(ARGV[#ARGV - 1])\n\
             \x20 local from = #ARGV - 1 - size\n\
             \x20 local keys, fetches, probes = {}, {}, {}\n\
             \x20 for i = 1, n do keys[i] = ARGV[from - n - 1 + i] end\n\
             \x20 local at = from\n\
             \x20 while at < #ARGV - 1 do\n\
             \x20   local count, fetch = tonumber(ARGV[at]), {}\n\
             \x20   probes[#probes + 1] = ARGV[at + 1]\n\
             \x20   for i = 1, count do fetch[i] = ARGV[at + 1 + i] end\n\
             \x20   fetches[#fetches + 1] = fetch\n\
             \x20   at = at + 2 + count\n\
             \x20 end\n\
             \x20 return keys, from - n - 1, fetches, probes\n\
             end\n",
            "#!lua flags=allow-cross-slot-keys\n",
        )
    }

    /// The batch script, with `keys` defining `batch_keys` and `shebang` first.
    fn batch_with(keys: &str, shebang: &str) -> Script {
        let mut source = format!("{shebang}{PRELUDE}\n{EXACT}\n{SHAPING}\n{ALIGN}\n");
        let twins = distinct_twins();
        for lua in &twins {
            source.push_str(lua.source);
            source.push('\n');
        }
        source.push_str("local twins = {");
        for lua in &twins {
            source.push_str(&format!("{0} = {0}, ", lua.function));
        }
        source.push_str("}\n");
        source.push_str(keys);
        source.push_str(include_str!("batch.lua"));
        Script::from_source(source, "")
    }
}

/// The Lua source of the script running the twin `name` (`"token_bucket"`, `"gcra"`, …; see
/// the [module documentation](super)) on one key, exactly as the store loads it, or of the
/// batch script (several requests' decisions, chains included, in one call) for `"batch"`, or of the cached store's sync script for `"cached"`
/// (`store/cached`): for tools that inspect or benchmark the scripts (`SCRIPT LOAD`
/// it, then `EVALSHA sha 1 key now min_ttl args…`). `None` for an unknown name.
pub fn script_source(name: &str) -> Option<String> {
    if name == "batch" {
        return Some(Script::batch().source);
    }
    if name == "cached" {
        return Some(Script::cached().source);
    }
    let lua = AnyAlgorithm::TWINS
        .iter()
        .find(|lua| lua.function == name)?;
    Some(Script::twin(lua).source)
}

#[derive(Debug)]
pub(super) struct Scripts {
    /// Each algorithm's twin, at its number - 1 ([`AnyAlgorithm::number`]); algorithms sharing
    /// a twin have equal scripts.
    twins: Vec<Script>,
    pub(super) batch: Script,
    /// The batch script allowed keys of several slots (of one node) on a cluster.
    pub(super) batch_cluster: Script,
    pub(super) cached: Script,
    pub(super) probe: Script,
    /// envoyproxy/ratelimit's `INCRBY` and `EXPIRE` of a counter, as one script (on a cluster).
    pub(super) increment: Script,
    /// A counter's refund (`DECRBY`, removed at zero), as one script.
    pub(super) refund: Script,
    /// The claims on a shared limit (quota_claims.lua).
    pub(super) quota_claims: Script,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        Scripts {
            twins: AnyAlgorithm::TWINS
                .iter()
                .map(|lua| Script::twin(lua))
                .collect(),
            batch: Script::batch(),
            batch_cluster: Script::batch_cluster(),
            cached: Script::cached(),
            probe: Script::probe(),
            increment: Script::from_source(super::counters::INCREMENT.to_owned(), "increment"),
            refund: Script::from_source(super::counters::REFUND.to_owned(), "refund"),
            quota_claims: Script::from_source(super::quota_claims::script_source(), "quota_claims"),
        }
    }

    /// Every script the store calls, each once: what the probe loads on each server before it
    /// says the store is usable, so that no call meets `NOSCRIPT` on a server at rest.
    pub(super) fn all(&self) -> Vec<&Script> {
        let mut all: Vec<&Script> = Vec::new();
        for script in &self.twins {
            if !all.iter().any(|s| s.sha == script.sha) {
                all.push(script);
            }
        }
        all.extend([
            &self.batch,
            &self.batch_cluster,
            &self.cached,
            &self.probe,
            &self.increment,
            &self.refund,
            &self.quota_claims,
        ]);
        all
    }

    /// The script running the twin `name` alone (`None` for a name no twin has).
    pub(super) fn twin(&self, name: &str) -> Option<&Script> {
        self.twins.iter().find(|script| script.twin == name)
    }

    /// Checks `op` and builds its script call, or refuses it before anything is sent.
    pub(super) fn call<'a>(
        &'a self,
        algorithm: &AnyAlgorithm,
        op: Op,
    ) -> Result<Call<'a>, StoreError> {
        ensure_supported(algorithm, op)?;
        let args = algorithm
            .twin_arguments(op)
            .map_err(|reason| not_on_redis(algorithm, reason))?;
        // Built from the same list, one per number: never out of range.
        let script = &self.twins[algorithm.number() as usize - 1];
        Ok(Call { script, args })
    }
}

/// One operation, ready to send: the script and its algorithm arguments (`ARGV[3..]`).
pub(super) struct Call<'a> {
    pub(super) script: &'a Script,
    pub(super) args: Vec<String>,
}

pub(super) fn not_on_redis(algorithm: &AnyAlgorithm, reason: &'static str) -> StoreError {
    StoreError::NotOnStore {
        store: "redis",
        algorithm: algorithm.name(),
        reason,
    }
}
