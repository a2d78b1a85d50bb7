//! The token bucket's Lua twin (`token_bucket.lua`), which the leaky bucket shares: the meter
//! is the same bucket counting the room left, under its own tag.
//!
//! The cached store decides the token bucket on a node's view (`absorb.lua`).

use crate::algorithm::leaky_bucket::LeakyBucket;
use crate::algorithm::twin::{
    cached_int, instant_of, Absorb, CachedTwin, Lua, LuaTwin, Usage, MAX_EXACT, PAST_2_50,
};
use crate::{Nanos, Op};

use super::{TokenBucket, TokenBucketState};

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

/// `T:tokens:last_us`, the bucket filling at `rate` per second up to `capacity`.
impl CachedTwin for TokenBucket {
    const ABSORB: Option<&'static Absorb> = Some(&Absorb {
        tag: "T",
        lua: &Lua {
            function: "absorb_bucket",
            source: include_str!("absorb.lua"),
            helpers: &[],
        },
    });

    fn cached_parameters(&self) -> Option<[String; 2]> {
        self.twin_fits()
            .then(|| [self.rate().to_string(), self.capacity().to_string()])
    }

    fn cached_state<'a>(
        &self,
        fields: &mut impl Iterator<Item = &'a str>,
    ) -> Option<TokenBucketState> {
        let tokens: f64 = fields.next()?.parse().ok()?;
        let last = instant_of(cached_int(fields)?, 0);
        Some(TokenBucketState::from_parts(tokens, last))
    }

    /// The bucket is refilled up to `at` (or its last update, if later) and `cost` is taken
    /// even if that leaves it below zero: the debt is refilled before anything passes again,
    /// so the long-run rate stays exact.
    fn absorb(&self, state: &mut TokenBucketState, at: Nanos, cost: u64) {
        let last = state.last.max(at);
        let tokens = self.bucket.tokens_at(state, last) - cost as f64;
        *state = TokenBucketState { tokens, last };
    }

    /// The debt below zero, in whole units.
    fn overshoot(&self, state: &TokenBucketState, now: Nanos) -> u64 {
        let tokens = self.tokens(state, now);
        if tokens < 0.0 {
            (-tokens).ceil() as u64
        } else {
            0
        }
    }
}

/// No cached form: the cached store sends its operations to Redis exactly, one round trip each.
impl CachedTwin for LeakyBucket {}
