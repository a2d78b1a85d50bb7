//! The fixed window's Lua twin (`fixed_window.lua`): the window as whole microseconds and the
//! nanoseconds beyond them, its start aligned to the epoch (`align.lua`).

use crate::algorithm::param::nanos;
use crate::algorithm::twin::{Helper, Lua, LuaTwin, Usage, MAX_EXACT};
use crate::Op;

use super::FixedWindow;

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
