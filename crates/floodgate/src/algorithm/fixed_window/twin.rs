//! The fixed window's Lua twin (`fixed_window.lua`): the window as whole microseconds and the
//! nanoseconds beyond them, its start aligned to the epoch (`align.lua`).
//!
//! The cached store decides it on a node's view (`absorb.lua`).

use crate::algorithm::param::nanos;
use crate::algorithm::twin::{
    cached_int, instant_of, Absorb, CachedTwin, Helper, Lua, LuaTwin, Usage, MAX_EXACT,
};
use crate::{Nanos, Op};

use super::{FixedWindow, FixedWindowState};

impl FixedWindow {
    /// The window as the twins take it: whole microseconds and the nanoseconds beyond them;
    /// `None` beyond the exact range (a window over 2^50 µs, or a limit over 2^50).
    pub(crate) fn twin_window(&self) -> Option<(u64, u64)> {
        let w = nanos(self.window());
        let (w_us, w_sub) = (w / 1000, w % 1000);
        (w_us <= MAX_EXACT && self.limit() <= MAX_EXACT).then_some((w_us, w_sub))
    }
}

impl LuaTwin for FixedWindow {
    const LUA: &'static Lua = &Lua {
        function: "fixed_window",
        source: include_str!("fixed_window.lua"),
        helpers: &[Helper::Align],
    };
    const TAGS: &'static [&'static str] = &["F"];
    const REFUNDS: bool = true;
    const CHARGES: bool = true;

    /// `window_us, window_sub, limit, cost[, flag]`.
    fn arguments(&self, op: Op) -> Result<Vec<String>, &'static str> {
        let (cost, usage) = Usage::of::<FixedWindow>(op)?;
        let Some((w_us, w_sub)) = self.twin_window() else {
            return Err("its window exceeds 2^50 microseconds (35 years) or its limit 2^50");
        };
        // A refund may give back more than the limit (a cached view may count more), and a
        // charge count past it.
        let most = match usage {
            Usage::Take => self.limit() + 1,
            Usage::Refund | Usage::Charge => MAX_EXACT,
        };
        let mut args: Vec<String> = [w_us, w_sub, self.limit()]
            .iter()
            .map(u64::to_string)
            .collect();
        usage.push(&mut args, cost.min(most));
        Ok(args)
    }

    fn reply_limit(&self) -> Option<u64> {
        Some(self.limit())
    }

    /// The window's end.
    fn horizon_us(&self) -> u64 {
        nanos(self.window()) / 1000 + 1
    }
}

/// `F:start_us:start_sub:count`, the window `window_us` µs and `window_sub` ns long.
impl CachedTwin for FixedWindow {
    const ABSORB: Option<&'static Absorb> = Some(&Absorb {
        tag: "F",
        lua: &Lua {
            function: "absorb_window",
            source: include_str!("absorb.lua"),
            helpers: &[Helper::Align],
        },
    });

    fn cached_parameters(&self) -> Option<[String; 2]> {
        let (w_us, w_sub) = self.twin_window()?;
        Some([w_us.to_string(), w_sub.to_string()])
    }

    fn cached_state<'a>(
        &self,
        fields: &mut impl Iterator<Item = &'a str>,
    ) -> Option<FixedWindowState> {
        let (us, sub) = (cached_int(fields)?, cached_int(fields)?);
        let count = cached_int(fields)?;
        Some(FixedWindowState::from_parts(instant_of(us, sub), count))
    }

    /// The cost counts in the window of `at` when that is the state's window; a later window
    /// starts with it; a cost from an earlier window than the state's is dropped (it can no
    /// longer change a decision). The count may exceed the limit (saturating at `u64::MAX`).
    fn absorb(&self, state: &mut FixedWindowState, at: Nanos, cost: u64) {
        let start = at.0 - at.0 % self.window;
        if start == state.start.0 {
            state.count = state.count.saturating_add(cost);
        } else if start > state.start.0 {
            *state = FixedWindowState {
                start: Nanos(start),
                count: cost,
            };
        }
    }

    /// The count past the limit.
    fn overshoot(&self, state: &FixedWindowState, now: Nanos) -> u64 {
        self.count(state, now).saturating_sub(self.limit())
    }
}
