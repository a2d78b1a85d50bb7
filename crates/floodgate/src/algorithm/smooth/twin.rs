//! Guava's smooth limiters' Lua twin (`smooth.lua`, with the shapers' `shaping.lua`), one
//! script for both, told apart by their tag.

use crate::algorithm::twin::{
    CachedTwin, Helper, Lua, LuaTwin, BEYOND_EXACT, MAX_EXACT, MAX_MICROS,
};
use crate::Op;

use super::{BurstyStart, SmoothBursty, SmoothWarmingUp};

/// `smooth.lua`, for both limiters.
const SMOOTH: &Lua = &Lua {
    function: "smooth",
    source: include_str!("smooth.lua"),
    helpers: &[Helper::Shaping],
};

impl LuaTwin for SmoothBursty {
    const LUA: &'static Lua = SMOOTH;
    const TAGS: &'static [&'static str] = &["R"];

    fn arguments(&self, op: Op) -> Result<Vec<String>, &'static str> {
        Smooth::Bursty(self).arguments(op)
    }
}

impl LuaTwin for SmoothWarmingUp {
    const LUA: &'static Lua = SMOOTH;
    const TAGS: &'static [&'static str] = &["U"];

    fn arguments(&self, op: Op) -> Result<Vec<String>, &'static str> {
        Smooth::WarmingUp(self).arguments(op)
    }
}

/// The most permits a smooth key may store on Redis: its `limit` and `remaining` are integers
/// below 2⁵³.
const MAX_PERMITS: f64 = 9_007_199_254_740_992.0;

/// Either smooth limiter, as `smooth.lua` takes it.
enum Smooth<'s> {
    Bursty(&'s SmoothBursty),
    WarmingUp(&'s SmoothWarmingUp),
}

impl Smooth<'_> {
    /// The most permits stored at `rate`, or `None` if the limiter refuses that rate.
    fn max_permits(&self, rate: f64) -> Option<f64> {
        match self {
            Smooth::Bursty(b) => SmoothBursty::starting(rate, b.max_burst_seconds(), b.start())
                .ok()
                .map(|b| b.max_permits()),
            Smooth::WarmingUp(w) => SmoothWarmingUp::new(rate, w.warmup(), w.cold_factor())
                .ok()
                .map(|w| w.max_permits()),
        }
    }

    /// `smooth.lua`'s arguments for `op`:
    /// `tag, rate, p1, p2, kind, cost, timeout_us, new_rate`. Refused: a time to fill up from empty above 2⁵⁰ µs (a
    /// burst of `max_burst_seconds`, or the warmup), and a maximum of stored permits, at the
    /// configured rate or a `set_rate`'s, of 2⁵³ or more.
    fn arguments(&self, op: Op) -> Result<Vec<String>, &'static str> {
        let (tag, rate, p1, p2) = match self {
            Smooth::Bursty(b) => {
                if b.max_burst_seconds() * 1e6 > MAX_EXACT as f64 {
                    return Err(BEYOND_EXACT);
                }
                let full = u8::from(b.start() == BurstyStart::Full);
                (
                    "R",
                    b.rate(),
                    b.max_burst_seconds().to_string(),
                    full.to_string(),
                )
            }
            Smooth::WarmingUp(w) => {
                let micros = u64::try_from(w.warmup().as_micros()).unwrap_or(u64::MAX);
                if micros > MAX_EXACT {
                    return Err(BEYOND_EXACT);
                }
                (
                    "U",
                    w.rate(),
                    micros.to_string(),
                    w.cold_factor().to_string(),
                )
            }
        };
        if self.max_permits(rate).is_none_or(|m| m >= MAX_PERMITS) {
            return Err(BEYOND_EXACT);
        }
        let (kind, cost, timeout, new_rate) = match op {
            Op::Check { cost } => ("c", cost, 0, "0".to_owned()),
            Op::Reserve { cost } => ("r", cost, 0, "0".to_owned()),
            Op::TryAcquire { cost, timeout } => {
                let micros = u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX);
                ("t", cost, micros.min(MAX_MICROS), "0".to_owned())
            }
            Op::SetRate { rate } => match self.max_permits(rate) {
                Some(m) if m >= MAX_PERMITS => return Err(BEYOND_EXACT),
                // A rate the limiter refuses is sent as 0, which the script refuses too.
                Some(_) => ("s", 0, 0, rate.to_string()),
                None => ("s", 0, 0, "0".to_owned()),
            },
            // Not supported by the smooth limiters: `ensure_supported` refused them already.
            Op::Acquire { .. } | Op::Release { .. } | Op::Refund { .. } | Op::Charge { .. } => {
                ("c", 0, 0, "0".to_owned())
            }
        };
        let args = vec![
            tag.to_owned(),
            rate.to_string(),
            p1,
            p2,
            kind.to_owned(),
            cost.to_string(),
            timeout.to_string(),
            new_rate,
        ];
        Ok(args)
    }
}

/// No cached form: the cached store sends its operations to Redis exactly, one round trip each.
impl CachedTwin for SmoothBursty {}

/// No cached form: the cached store sends its operations to Redis exactly, one round trip each.
impl CachedTwin for SmoothWarmingUp {}
