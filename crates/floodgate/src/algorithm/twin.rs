//! The Lua twins: each algorithm's transition written a second time, in Lua, for a Redis store
//! to run beside the key's state in one atomic step.
//!
//! A twin lives with its algorithm: a `twin` submodule of the algorithm's module implements
//! [`LuaTwin`] (which Lua function runs it, the arguments an operation becomes, what the
//! reply leaves out), and the Lua file sits beside it (`algorithm/gcra/gcra.lua`). The Redis
//! store (`store::redis`) runs whatever twin an algorithm names and knows none of them by
//! name; [`super::spec::AnyAlgorithm`] forwards to every algorithm's twin from the one list
//! of algorithms, so an algorithm without a twin does not compile with the `redis` feature.
//! The same submodule implements [`CachedTwin`], the cached store's side: whether a node may
//! decide the algorithm on its own view, and, if it may, the Lua that adds a node's
//! admissions to the shared state (`algorithm/<name>/absorb.lua`).
//!
//! Nothing here does I/O: building a twin's arguments is a pure function of the parameters and
//! the operation, like the transition itself.

use super::Algorithm;
use crate::{Nanos, Op};

/// The largest duration (ns) and count the Lua twins take: every sum they form stays exact in
/// Lua's doubles.
pub(crate) const MAX_EXACT: u64 = 1 << 50;
/// Instants the scripts take: whole microseconds below 2⁵³.
pub(crate) const MAX_MICROS: u64 = 1 << 53;

/// A file of Lua helpers that some twins call besides the prelude every script starts with
/// (the store holds their sources, `store/redis/*.lua`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Helper {
    /// `exact.lua`: products and quotients past 2⁵³, in 26-bit limbs.
    Exact,
    /// `shaping.lua`: the waits of the shapers.
    Shaping,
    /// `align.lua`: a fixed window's start, aligned to the epoch.
    Align,
}

/// One twin's Lua: the function its file defines (`local function name(key, now_us, args)`),
/// the file's text, and the helper files it calls.
#[derive(Debug)]
pub(crate) struct Lua {
    /// The function's name, which is also how a batch names the twin to run.
    pub(crate) function: &'static str,
    /// The file's text.
    pub(crate) source: &'static str,
    /// The helpers it calls.
    pub(crate) helpers: &'static [Helper],
}

/// An algorithm's Lua twin: what a Redis store needs to run the algorithm's transition there.
///
/// The twin must decide exactly as [`super::Algorithm::apply`] does for every operation it
/// takes (the conformance suite runs both); where its doubles could not be exact it refuses
/// before anything is sent.
pub(crate) trait LuaTwin {
    /// The Lua the twin runs.
    const LUA: &'static Lua;
    /// The tags a state written by this algorithm starts with in Redis (`"T"`, …), to name
    /// the algorithm that wrote a key another one asks for.
    const TAGS: &'static [&'static str];
    /// Whether the twin takes refunds ([`Op::Refund`]).
    const REFUNDS: bool = false;
    /// Whether the twin counts charges past the limit ([`Op::Charge`]).
    const CHARGES: bool = false;

    /// The script's arguments (`ARGV[3..]`) for `op`, one the algorithm supports; or why the
    /// twin cannot run it exactly (parameters past [`MAX_EXACT`], an operation it does not
    /// take), which the store returns as `StoreError::NotOnStore`.
    fn arguments(&self, op: Op) -> Result<Vec<String>, &'static str>;

    /// The limit a reply of fewer than eight items stands for (the script leaves it out when
    /// the parameters fix it); `None` when the script always sends it.
    fn reply_limit(&self) -> Option<u64> {
        None
    }

    /// How far ahead of now, in microseconds, the twin writes an instant (a window's end, a
    /// lease's expiry): the store refuses a clock so late that it would pass [`MAX_MICROS`].
    fn horizon_us(&self) -> u64 {
        0
    }
}

/// What `cached.lua` takes for one key besides its instant and cost: the tag of the state it
/// keeps, and the algorithm's two parameters as decimal numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CachedParameters {
    /// The state's tag ([`Absorb::tag`]).
    pub(crate) tag: &'static str,
    /// The first parameter (a window's whole microseconds, a bucket's rate, an emission
    /// interval in nanoseconds).
    pub(crate) first: String,
    /// The second parameter (the window's nanoseconds beyond them, the bucket's capacity, 0).
    pub(crate) second: String,
}

/// An algorithm's part of the cached store's sync script (`cached.lua`): the tag of the states
/// it keeps in Redis, and the Lua function, in its own file beside the twin, that adds a node's
/// admissions to one: `local function name(key, p1, p2, at_us, cost)`, with `p1` and `p2`
/// the [`CachedTwin::cached_parameters`], returning the tag of another algorithm's state when
/// the key holds one (left as it is), nil otherwise.
#[derive(Debug)]
pub(crate) struct Absorb {
    /// The tag the function writes and reads (`"F"`, …): the twin's own ([`LuaTwin::TAGS`]).
    pub(crate) tag: &'static str,
    /// The function, its file and the helpers it calls.
    pub(crate) lua: &'static Lua,
}

/// The cached store's side of a twin (`store::cached`, `cached.lua`): a node decides the
/// algorithm on its own view of the shared state, and a sync adds what it admitted to that
/// state in Redis without deciding anything (the store's module documentation gives each
/// algorithm's rule and bound).
///
/// Every algorithm implements it in its `twin` module, most of them with the defaults, which
/// say the cached store does not decide it locally: it then sends every decision to the
/// algorithm's exact twin ([`LuaTwin`]), and says so at start-up.
pub(crate) trait CachedTwin: Algorithm {
    /// The Lua that absorbs admissions in Redis; `None` (the default): no cached form.
    const ABSORB: Option<&'static Absorb> = None;

    /// The two parameters [`Self::ABSORB`] takes for these parameters; `None` when they are
    /// beyond its exact range (or there is no cached form, the default).
    fn cached_parameters(&self) -> Option<[String; 2]> {
        None
    }

    /// The most of `cost` one sync adds to a key (at most [`MAX_EXACT`]).
    fn cached_cost(&self, cost: u64) -> u64 {
        cost.min(MAX_EXACT)
    }

    /// The state `cached.lua` returned, from the `:`-separated fields after its tag; `None`
    /// when they are not a state of this algorithm.
    fn cached_state<'a>(&self, _fields: &mut impl Iterator<Item = &'a str>) -> Option<Self::State> {
        None
    }

    /// Adds `cost`, admitted at `at` by some node, to `state` without deciding anything: the
    /// Rust side of `cached.lua`'s rule, which a node applies to its view.
    fn absorb(&self, _state: &mut Self::State, _at: Nanos, _cost: u64) {}

    /// How many units `state` holds beyond the limit at `now` (0 within it): what the nodes
    /// admitted together past it, for the sync's report.
    fn overshoot(&self, _state: &Self::State, _now: Nanos) -> u64 {
        0
    }
}

/// The next `:`-separated field of a state `cached.lua` returned, as a whole number; `None`
/// when there is none or it is not one ([`CachedTwin::cached_state`]).
pub(crate) fn cached_int<'a>(fields: &mut impl Iterator<Item = &'a str>) -> Option<u64> {
    fields.next()?.parse().ok()
}

/// An instant the Lua twins write as whole microseconds and the nanoseconds beyond them.
pub(crate) fn instant_of(us: u64, sub: u64) -> Nanos {
    Nanos(us.saturating_mul(1000).saturating_add(sub))
}

/// The refusal of parameters past the twins' exact range.
pub(crate) const BEYOND_EXACT: &str = "its durations or counts exceed the exact limits";
/// The refusal of parameters past [`MAX_EXACT`], for the twins that compare with it alone.
pub(crate) const PAST_2_50: &str = "its durations or counts exceed 2^50";

/// What a check, refund or charge does with its cost, as the twins that take refunds and
/// charges read it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Usage {
    /// Takes the cost if it fits ([`Op::Check`]): the cost as it is.
    Take,
    /// Gives the cost back ([`Op::Refund`]): the cost negated, and a last argument -1.
    Refund,
    /// Counts the cost even past the limit ([`Op::Charge`]): the cost, and a last argument 1.
    Charge,
}

impl Usage {
    /// The cost and usage of `op` for a twin of type `T`, or why `T` cannot run it.
    pub(crate) fn of<T: LuaTwin>(op: Op) -> Result<(u64, Usage), &'static str> {
        match op {
            Op::Check { cost } => Ok((cost, Usage::Take)),
            Op::Refund { cost } if T::REFUNDS => Ok((cost, Usage::Refund)),
            Op::Charge { cost } if T::CHARGES => Ok((cost, Usage::Charge)),
            Op::Refund { .. } | Op::Charge { .. } => {
                Err("its refunds and charges do not run on Redis")
            }
            Op::Acquire { .. }
            | Op::Release { .. }
            | Op::Reserve { .. }
            | Op::TryAcquire { .. }
            | Op::SetRate { .. } => Err("only `check` runs on Redis yet"),
        }
    }

    /// The cost's argument: negative for a refund.
    pub(crate) fn cost(self, cost: u64) -> String {
        match self {
            Usage::Refund => format!("-{cost}"),
            Usage::Take | Usage::Charge => cost.to_string(),
        }
    }

    /// The twin's last argument: 1 for a charge, -1 for a refund (whose cost, negated, may be
    /// -0: the sign alone cannot tell).
    pub(crate) fn flag(self) -> Option<String> {
        match self {
            Usage::Take => None,
            Usage::Refund => Some("-1".to_owned()),
            Usage::Charge => Some("1".to_owned()),
        }
    }

    /// Appends the cost's arguments to `args`.
    pub(crate) fn push(self, args: &mut Vec<String>, cost: u64) {
        args.push(self.cost(cost));
        args.extend(self.flag());
    }
}
