//! The token bucket's Lua twin (`token_bucket.lua`), which the leaky bucket shares: the meter
//! is the same bucket counting the room left, under its own tag.

use crate::algorithm::leaky_bucket::LeakyBucket;
use crate::algorithm::twin::{Lua, LuaTwin, Usage, MAX_EXACT, PAST_2_50};
use crate::Op;

use super::TokenBucket;

/// `token_bucket.lua`, for both buckets.
const BUCKET: &Lua = &Lua {
    function: "token_bucket",
    source: include_str!("token_bucket.lua"),
    helpers: &[],
};

/// Whether the twin's arithmetic is exact for a bucket of `capacity` filling at `rate` per
/// second: the capacity, and the time to refill it in nanoseconds, at most 2⁵⁰.
fn bucket_fits(rate: f64, capacity: u64) -> bool {
    capacity <= MAX_EXACT && capacity as f64 * (1e9 / rate) <= MAX_EXACT as f64
}

impl TokenBucket {
    /// Whether the twin's arithmetic is exact for this bucket ([`bucket_fits`]).
    pub(crate) fn twin_fits(&self) -> bool {
        bucket_fits(self.rate(), self.capacity())
    }
}

/// `rate, capacity, cost, tag[, flag]` for a bucket of `capacity` filling at `rate` per
/// second; refused when the capacity, or the time to refill it, passes 2⁵⁰ (ns).
fn bucket<T: LuaTwin>(
    tag: &str,
    rate: f64,
    capacity: u64,
    op: Op,
) -> Result<Vec<String>, &'static str> {
    let (cost, usage) = Usage::of::<T>(op)?;
    if !bucket_fits(rate, capacity) {
        return Err(PAST_2_50);
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
    Ok(args)
}

impl LuaTwin for TokenBucket {
    const LUA: &'static Lua = BUCKET;
    const TAGS: &'static [&'static str] = &["T"];
    const REFUNDS: bool = true;
    const CHARGES: bool = true;

    fn arguments(&self, op: Op) -> Result<Vec<String>, &'static str> {
        bucket::<TokenBucket>("T", self.rate(), self.capacity(), op)
    }

    fn reply_limit(&self) -> Option<u64> {
        Some(self.capacity())
    }
}

impl LuaTwin for LeakyBucket {
    const LUA: &'static Lua = BUCKET;
    const TAGS: &'static [&'static str] = &["M"];
    const REFUNDS: bool = true;
    const CHARGES: bool = true;

    fn arguments(&self, op: Op) -> Result<Vec<String>, &'static str> {
        bucket::<LeakyBucket>("M", self.rate(), self.capacity(), op)
    }

    fn reply_limit(&self) -> Option<u64> {
        Some(self.capacity())
    }
}
