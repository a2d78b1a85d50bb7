//! GCRA's Lua twin (`gcra.lua`): the theoretical arrival time in whole microseconds and the
//! nanoseconds beyond them.
//!
//! The cached store decides it on a node's view (`absorb.lua`).

use crate::algorithm::param::nanos;
use crate::algorithm::twin::{
    cached_int, instant_of, Absorb, CachedTwin, Lua, LuaTwin, Usage, MAX_EXACT, PAST_2_50,
};
use crate::{Nanos, Op};

use super::{Gcra, GcraState};

impl Gcra {
    /// Whether the twin's arithmetic is exact for this GCRA: τ at most 2⁵⁰ ns.
    pub(crate) fn twin_fits(&self) -> bool {
        nanos(self.delay_variation_tolerance()) <= MAX_EXACT
    }

    /// The most cost one call may add to a key past its limit (a charge, a refund): `cost × e`
    /// stays within 2⁵⁰ ns, a schedule 13 days ahead, far past any refusal it could cause.
    pub(crate) fn twin_most_cost(&self) -> u64 {
        MAX_EXACT / nanos(self.emission_interval()).max(1)
    }
}

impl LuaTwin for Gcra {
    const LUA: &'static Lua = &Lua {
        function: "gcra",
        source: include_str!("gcra.lua"),
        helpers: &[],
    };
    const TAGS: &'static [&'static str] = &["G"];
    const REFUNDS: bool = true;
    const CHARGES: bool = true;

    /// `e, τ, limit, cost[, flag]`; τ at most 2⁵⁰ ns.
    fn arguments(&self, op: Op) -> Result<Vec<String>, &'static str> {
        let (cost, usage) = Usage::of::<Gcra>(op)?;
        if !self.twin_fits() {
            return Err(PAST_2_50);
        }
        let tau = nanos(self.delay_variation_tolerance());
        let e = nanos(self.emission_interval());
        let mut args: Vec<String> = [e, tau, self.limit()].iter().map(u64::to_string).collect();
        // A charge may schedule past the limit, and a refund give back a charge: up to 2^50
        // ns, where the twin's arithmetic is exact.
        let most = match usage {
            Usage::Take => self.limit() + 1,
            Usage::Refund | Usage::Charge => self.twin_most_cost(),
        };
        usage.push(&mut args, cost.min(most));
        Ok(args)
    }

    fn reply_limit(&self) -> Option<u64> {
        Some(self.limit())
    }
}

/// `G:tat_us:tat_sub`, the schedule advancing by the emission interval (ns) per unit.
impl CachedTwin for Gcra {
    const ABSORB: Option<&'static Absorb> = Some(&Absorb {
        tag: "G",
        lua: &Lua {
            function: "absorb_gcra",
            source: include_str!("absorb.lua"),
            helpers: &[],
        },
    });

    fn cached_parameters(&self) -> Option<[String; 2]> {
        self.twin_fits()
            .then(|| [nanos(self.emission_interval()).to_string(), "0".into()])
    }

    /// As a charge is bounded ([`Gcra::twin_most_cost`]).
    fn cached_cost(&self, cost: u64) -> u64 {
        cost.min(self.twin_most_cost())
    }

    fn cached_state<'a>(&self, fields: &mut impl Iterator<Item = &'a str>) -> Option<GcraState> {
        let (us, sub) = (cached_int(fields)?, cached_int(fields)?);
        Some(GcraState::from_tat(instant_of(us, sub)))
    }

    /// The schedule's own absorb, which a charge also uses.
    fn absorb(&self, state: &mut GcraState, at: Nanos, cost: u64) {
        Gcra::absorb(self, state, at, cost);
    }

    /// The units the schedule runs beyond `τ`, rounded up.
    fn overshoot(&self, state: &GcraState, now: Nanos) -> u64 {
        let beyond = state
            .tat()
            .0
            .saturating_sub(now.0)
            .saturating_sub(nanos(self.delay_variation_tolerance()));
        beyond.div_ceil(nanos(self.emission_interval()).max(1))
    }
}
