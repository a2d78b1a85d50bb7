//! From an algorithm and an operation to a script call: which Lua twin runs it, and the
//! arguments it takes, or a refusal before anything is sent when the twin could not be exact.

use std::time::Duration;

use super::super::ensure_supported;
use crate::algorithm::spec::AnyAlgorithm;
use crate::algorithm::Algorithm;
use crate::{Op, StoreError};

mod shapers;
mod windows;
use shapers::Smooth;

/// The largest duration (ns) and count the Lua twins take: every sum they form stays exact.
pub(super) const MAX_EXACT: u64 = 1 << 50;
/// Instants the scripts take: whole microseconds below 2⁵³.
pub(super) const MAX_MICROS: u64 = 1 << 53;

pub(super) const PRELUDE: &str = include_str!("prelude.lua");

/// Helpers only some twins use, included only in their scripts (each is built anew on every
/// call, so a script carries only what it needs).
const EXACT: &str = include_str!("exact.lua");
const SHAPING: &str = include_str!("shaping.lua");
const ALIGN: &str = include_str!("align.lua");

/// Every twin: its function's name, the file defining it, and the helper files it needs.
const TWINS: [(&str, &str, &[&str]); 8] = [
    ("gcra", include_str!("gcra.lua"), &[]),
    ("fixed_window", include_str!("fixed_window.lua"), &[ALIGN]),
    ("token_bucket", include_str!("token_bucket.lua"), &[]),
    ("leases", include_str!("leases.lua"), &[]),
    ("sliding_log", include_str!("sliding_log.lua"), &[]),
    (
        "sliding_window",
        include_str!("sliding_window.lua"),
        &[EXACT],
    ),
    ("leaky_queue", include_str!("leaky_queue.lua"), &[SHAPING]),
    ("smooth", include_str!("smooth.lua"), &[SHAPING]),
];

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

    /// The script running the twin `name` of [`TWINS`] on `KEYS[1]` with `ARGV[3..]`.
    fn twin(name: &'static str) -> Script {
        let (body, helpers) = TWINS
            .iter()
            .find(|(n, _, _)| *n == name)
            .map_or(("", &[][..]), |(_, body, helpers)| (*body, *helpers));
        let mut source = format!("{PRELUDE}\n");
        for helper in helpers {
            source.push_str(helper);
            source.push('\n');
        }
        // The arguments as a table built in one step (no loop over ARGV).
        source.push_str(&format!(
            "{body}\nreturn {name}(KEYS[1], now_us, {{select(3, unpack(ARGV))}})\n"
        ));
        Script::from_source(source, name)
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

    /// The cached store's sync script (cached.lua).
    fn cached() -> Script {
        let source = format!("{PRELUDE}\n{ALIGN}\n{}", include_str!("cached.lua"));
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
        for (_, body, _) in TWINS {
            source.push_str(body);
            source.push('\n');
        }
        source.push_str("local twins = {");
        for (name, _, _) in TWINS {
            source.push_str(&format!("{name} = {name}, "));
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
    let (name, _, _) = TWINS.iter().find(|(n, _, _)| *n == name)?;
    Some(Script::twin(name).source)
}

#[derive(Debug)]
pub(super) struct Scripts {
    gcra: Script,
    fixed_window: Script,
    token_bucket: Script,
    leases: Script,
    sliding_log: Script,
    sliding_window: Script,
    leaky_queue: Script,
    smooth: Script,
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
            gcra: Script::twin("gcra"),
            fixed_window: Script::twin("fixed_window"),
            token_bucket: Script::twin("token_bucket"),
            leases: Script::twin("leases"),
            sliding_log: Script::twin("sliding_log"),
            sliding_window: Script::twin("sliding_window"),
            leaky_queue: Script::twin("leaky_queue"),
            smooth: Script::twin("smooth"),
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
    pub(super) fn all(&self) -> [&Script; 15] {
        [
            &self.gcra,
            &self.fixed_window,
            &self.token_bucket,
            &self.leases,
            &self.sliding_log,
            &self.sliding_window,
            &self.leaky_queue,
            &self.smooth,
            &self.batch,
            &self.batch_cluster,
            &self.cached,
            &self.probe,
            &self.increment,
            &self.refund,
            &self.quota_claims,
        ]
    }

    /// The script running the twin `name` alone (`None` for a name no twin has).
    pub(super) fn twin(&self, name: &str) -> Option<&Script> {
        [
            &self.gcra,
            &self.fixed_window,
            &self.token_bucket,
            &self.leases,
            &self.sliding_log,
            &self.sliding_window,
            &self.leaky_queue,
            &self.smooth,
        ]
        .into_iter()
        .find(|script| script.twin == name)
    }

    /// Checks `op` and builds its script call, or refuses it before anything is sent.
    pub(super) fn call<'a>(
        &'a self,
        algorithm: &AnyAlgorithm,
        op: Op,
    ) -> Result<Call<'a>, StoreError> {
        ensure_supported(algorithm, op)?;
        let too_large = || not_on_redis(algorithm, "its durations or counts exceed 2^50");
        if let Some(lease) = lease_rule(algorithm) {
            return lease.call(&self.leases, op).ok_or_else(too_large);
        }
        match algorithm {
            AnyAlgorithm::SmoothBursty(b) => return Smooth::Bursty(b).call(&self.smooth, op),
            AnyAlgorithm::SmoothWarmingUp(w) => return Smooth::WarmingUp(w).call(&self.smooth, op),
            // Reserve is the same operation as check for the queue.
            AnyAlgorithm::LeakyQueue(q) => {
                return shapers::leaky_queue(&self.leaky_queue, q, op.cost())
            }
            _ => {}
        }
        // A refund or a charge goes to the same twin as a check, with a last argument saying
        // which (a refund's cost negated).
        let (cost, usage) = match op {
            Op::Check { cost } => (cost, Usage::Take),
            Op::Refund { cost } if super::RedisStore::takes_refunds(algorithm) => {
                (cost, Usage::Refund)
            }
            Op::Charge { cost } if super::RedisStore::takes_charges(algorithm) => {
                (cost, Usage::Charge)
            }
            Op::Refund { .. } | Op::Charge { .. } => {
                return Err(not_on_redis(
                    algorithm,
                    "its refunds and charges do not run on Redis",
                ))
            }
            _ => return Err(not_on_redis(algorithm, "only `check` runs on Redis yet")),
        };
        let (script, args) = match algorithm {
            AnyAlgorithm::Gcra(g) => {
                let tau = nanos(g.delay_variation_tolerance());
                if tau > MAX_EXACT {
                    return Err(too_large());
                }
                let e = nanos(g.emission_interval());
                let mut args: Vec<String> =
                    [e, tau, g.limit()].iter().map(u64::to_string).collect();
                // A charge may schedule past the limit, and a refund give back a charge: up
                // to 2^50 ns, where the twin's arithmetic is exact.
                let most = match usage {
                    Usage::Take => g.limit() + 1,
                    Usage::Refund | Usage::Charge => MAX_EXACT / e.max(1),
                };
                usage.push(&mut args, cost.min(most));
                (&self.gcra, args)
            }
            AnyAlgorithm::FixedWindow(f) => {
                let Some((w_us, w_sub)) = window_pair(f) else {
                    return Err(not_on_redis(
                        algorithm,
                        "its window exceeds 2^50 microseconds (35 years) or its limit 2^50",
                    ));
                };
                // A refund may give back more than the limit (a cached view may count more),
                // and a charge count past it.
                let most = match usage {
                    Usage::Take => f.limit() + 1,
                    Usage::Refund | Usage::Charge => MAX_EXACT,
                };
                let mut args: Vec<String> = [w_us, w_sub, f.limit()]
                    .iter()
                    .map(u64::to_string)
                    .collect();
                usage.push(&mut args, cost.min(most));
                (&self.fixed_window, args)
            }
            AnyAlgorithm::TokenBucket(t) => self
                .bucket("T", t.rate(), t.capacity(), cost, usage)
                .ok_or_else(too_large)?,
            // The meter is the token bucket counting the room left: the same script.
            AnyAlgorithm::LeakyBucket(l) => self
                .bucket("M", l.rate(), l.capacity(), cost, usage)
                .ok_or_else(too_large)?,
            AnyAlgorithm::SlidingLog(l) => return windows::sliding_log(&self.sliding_log, l, cost),
            AnyAlgorithm::SlidingWindow(w) => {
                return windows::sliding_window(&self.sliding_window, w, cost, usage)
            }
            _ => return Err(not_on_redis(algorithm, "it has no Redis script yet")),
        };
        Ok(Call { script, args })
    }

    /// The token bucket script's arguments, or `None` beyond the exact limits.
    fn bucket(
        &self,
        tag: &str,
        rate: f64,
        capacity: u64,
        cost: u64,
        usage: Usage,
    ) -> Option<(&Script, Vec<String>)> {
        let refill_ns = capacity as f64 * (1e9 / rate);
        if capacity > MAX_EXACT || refill_ns > MAX_EXACT as f64 {
            return None;
        }
        // A charge may put the bucket in debt, and a refund pay one back: up to 2^50 tokens.
        let most = match usage {
            Usage::Take => capacity + 1,
            Usage::Refund | Usage::Charge => MAX_EXACT,
        };
        // Rust prints the shortest decimal that reads back as the same f64.
        let mut args = vec![
            rate.to_string(),
            capacity.to_string(),
            usage.cost(cost.min(most)),
            tag.to_owned(),
        ];
        args.extend(usage.flag());
        Some((&self.token_bucket, args))
    }
}

/// What a check, refund or charge does with its cost, as the twins take it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Usage {
    /// Takes the cost if it fits ([`Op::Check`]): the cost as it is.
    Take,
    /// Gives the cost back ([`Op::Refund`]): the cost negated, and a last argument -1.
    Refund,
    /// Counts the cost even past the limit ([`Op::Charge`]): the cost, and a last argument 1.
    Charge,
}

impl Usage {
    /// The cost's argument: negative for a refund.
    pub(super) fn cost(self, cost: u64) -> String {
        match self {
            Usage::Refund => format!("-{cost}"),
            Usage::Take | Usage::Charge => cost.to_string(),
        }
    }

    /// The twin's last argument: 1 for a charge, -1 for a refund (whose cost, negated, may be
    /// -0: the sign alone cannot tell).
    pub(super) fn flag(self) -> Option<String> {
        match self {
            Usage::Take => None,
            Usage::Refund => Some("-1".to_owned()),
            Usage::Charge => Some("1".to_owned()),
        }
    }

    /// Appends the cost's arguments to `args`.
    fn push(self, args: &mut Vec<String>, cost: u64) {
        args.push(self.cost(cost));
        args.extend(self.flag());
    }
}

/// A fixed window's window as the twin takes it: whole microseconds and the nanoseconds
/// beyond them; `None` beyond the exact range (a window over 2^50 µs, or a limit over 2^50).
pub(super) fn window_pair(f: &crate::algorithm::fixed_window::FixedWindow) -> Option<(u64, u64)> {
    let w = nanos(f.window());
    let (w_us, w_sub) = (w / 1000, w % 1000);
    (w_us <= MAX_EXACT && f.limit() <= MAX_EXACT).then_some((w_us, w_sub))
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

/// The refusal of parameters beyond the exact limits, for `algorithm` (its name).
pub(super) fn beyond_exact(algorithm: &'static str) -> StoreError {
    StoreError::NotOnStore {
        store: "redis",
        algorithm,
        reason: "its durations or counts exceed the exact limits",
    }
}

pub(super) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The parameters `leases.lua` takes, for the `concurrency` and `fleet` algorithms.
pub(super) struct LeaseRule {
    tag: &'static str,
    capacity: u64,
    allowance: u64,
    shed: bool,
    pub(super) ttl_ns: u64,
}

pub(super) fn lease_rule(algorithm: &AnyAlgorithm) -> Option<LeaseRule> {
    match algorithm {
        AnyAlgorithm::Concurrency(c) => Some(LeaseRule {
            tag: "C",
            capacity: c.capacity(),
            allowance: c.capacity(),
            shed: false,
            ttl_ns: nanos(c.lease_ttl()),
        }),
        AnyAlgorithm::Fleet(f) => Some(LeaseRule {
            tag: "L",
            capacity: f.capacity(),
            allowance: f.non_critical_allowance(),
            shed: true,
            ttl_ns: nanos(f.lease_ttl()),
        }),
        _ => None,
    }
}

impl LeaseRule {
    /// The call for `op` (an op the algorithm supports), or `None` beyond the exact limits.
    fn call<'a>(&self, script: &'a Script, op: Op) -> Option<Call<'a>> {
        if self.ttl_ns > MAX_EXACT || self.capacity > MAX_EXACT {
            return None;
        }
        let (kind, lease, critical, cost) = match op {
            Op::Acquire { lease, critical } => ("a", lease.to_string(), critical, 0),
            Op::Release { lease } => ("r", lease.to_string(), false, 0),
            other => (
                "c",
                String::new(),
                false,
                other.cost().min(self.allowance + 1),
            ),
        };
        let args = vec![
            self.tag.to_owned(),
            self.capacity.to_string(),
            self.allowance.to_string(),
            u8::from(self.shed).to_string(),
            (self.ttl_ns / 1000).to_string(),
            (self.ttl_ns % 1000).to_string(),
            kind.to_owned(),
            lease,
            u8::from(critical).to_string(),
            cost.to_string(),
        ];
        Some(Call { script, args })
    }
}
