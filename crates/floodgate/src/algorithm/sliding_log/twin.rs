//! The sliding log's Lua twin (`sliding_log.lua`): window and limit at most 2⁵⁰, so that every
//! instant difference it compares and every sum of costs stays exact.

use crate::algorithm::param::nanos;
use crate::algorithm::twin::{CachedTwin, Lua, LuaTwin, Usage, BEYOND_EXACT, MAX_EXACT};
use crate::Op;

use super::SlidingLog;

impl LuaTwin for SlidingLog {
    const LUA: &'static Lua = &Lua {
        function: "sliding_log",
        source: include_str!("sliding_log.lua"),
        helpers: &[],
    };
    const TAGS: &'static [&'static str] = &["S"];

    /// `window_ns, limit, cost`.
    fn arguments(&self, op: Op) -> Result<Vec<String>, &'static str> {
        let (cost, _) = Usage::of::<SlidingLog>(op)?;
        let window = nanos(self.window());
        if window > MAX_EXACT || self.limit() > MAX_EXACT {
            return Err(BEYOND_EXACT);
        }
        let cost = cost.min(self.limit() + 1);
        Ok([window, self.limit(), cost].map(|n| n.to_string()).to_vec())
    }

    fn reply_limit(&self) -> Option<u64> {
        Some(self.limit())
    }
}

/// No cached form: the cached store sends its operations to Redis exactly, one round trip each.
impl CachedTwin for SlidingLog {}
