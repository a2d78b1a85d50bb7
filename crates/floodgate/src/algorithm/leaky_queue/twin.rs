//! The leaky queue's Lua twin (`leaky_queue.lua`, with the shapers' `shaping.lua`): the slot,
//! and the queue's length in time (`queue × slot`), at most 2⁵⁰ ns.

use crate::algorithm::param::nanos;
use crate::algorithm::twin::{CachedTwin, Helper, Lua, LuaTwin, BEYOND_EXACT, MAX_EXACT};
use crate::Op;

use super::LeakyQueue;

impl LuaTwin for LeakyQueue {
    const LUA: &'static Lua = &Lua {
        function: "leaky_queue",
        source: include_str!("leaky_queue.lua"),
        helpers: &[Helper::Shaping],
    };
    const TAGS: &'static [&'static str] = &["Q"];

    /// `slot_ns, queue, cost`: a reserve is the same operation as a check for the queue.
    fn arguments(&self, op: Op) -> Result<Vec<String>, &'static str> {
        let slot = nanos(self.slot());
        let horizon = self.queue().saturating_mul(slot);
        if slot > MAX_EXACT || horizon > MAX_EXACT {
            return Err(BEYOND_EXACT);
        }
        let cost = op.cost().min(self.queue() + 2);
        Ok([slot, self.queue(), cost].map(|n| n.to_string()).to_vec())
    }
}

/// No cached form: the cached store sends its operations to Redis exactly, one round trip each.
impl CachedTwin for LeakyQueue {}
