//! The sliding window's Lua twin (`sliding_window.lua`), both modes: window and limit at most
//! 2⁵⁰. The estimate's products (`previous × weight`, `limit × window`, up to 2¹⁰⁰) are
//! compared and divided exactly by the script in 26-bit limbs and by long multiplication
//! (`exact.lua`), not in doubles.

use crate::algorithm::param::nanos;
use crate::algorithm::twin::{CachedTwin, Helper, Lua, LuaTwin, Usage, BEYOND_EXACT, MAX_EXACT};
use crate::Op;

use super::SlidingWindow;

impl LuaTwin for SlidingWindow {
    const LUA: &'static Lua = &Lua {
        function: "sliding_window",
        source: include_str!("sliding_window.lua"),
        helpers: &[Helper::Exact],
    };
    // `W`: the two-window estimate; `B`: sub-buckets.
    const TAGS: &'static [&'static str] = &["W", "B"];
    const REFUNDS: bool = true;

    /// `mode, window_ns, limit, cost, buckets[, flag]`.
    fn arguments(&self, op: Op) -> Result<Vec<String>, &'static str> {
        let (cost, usage) = Usage::of::<SlidingWindow>(op)?;
        let w = nanos(self.window());
        if w > MAX_EXACT || self.limit() > MAX_EXACT {
            return Err(BEYOND_EXACT);
        }
        // A refund gives back at most what counts (two windows' worth at most), a check takes
        // at most the limit.
        let cost = match usage {
            Usage::Take => cost.min(self.limit() + 1),
            _ => cost.min(MAX_EXACT),
        };
        let (mode, buckets) = match self.buckets() {
            None => ("w", 0),
            Some(n) => ("b", n),
        };
        let mut args = vec![mode.to_owned()];
        args.extend([w, self.limit()].map(|n| n.to_string()));
        args.push(usage.cost(cost));
        args.push(u64::from(buckets).to_string());
        args.extend(usage.flag());
        Ok(args)
    }

    fn reply_limit(&self) -> Option<u64> {
        Some(self.limit())
    }
}

/// No cached form: the cached store sends its operations to Redis exactly, one round trip each.
impl CachedTwin for SlidingWindow {}
