//! Calls for the shapers, whose decisions carry a wait: the leaky queue and Guava's smooth
//! limiters.

use super::{beyond_exact, nanos, Call, Script, MAX_EXACT, MAX_MICROS};
use crate::algorithm::leaky_queue::LeakyQueue;
use crate::algorithm::smooth::{BurstyStart, SmoothBursty, SmoothWarmingUp};
use crate::{Op, StoreError};

/// `leaky_queue.lua`: the slot and the queue's length in time (`queue × slot`) at most 2⁵⁰ ns.
pub(super) fn leaky_queue<'a>(
    script: &'a Script,
    queue: &LeakyQueue,
    cost: u64,
) -> Result<Call<'a>, StoreError> {
    let slot = nanos(queue.slot());
    let horizon = queue.queue().saturating_mul(slot);
    if slot > MAX_EXACT || horizon > MAX_EXACT {
        return Err(beyond_exact("leaky_queue"));
    }
    let cost = cost.min(queue.queue() + 2);
    let args = [slot, queue.queue(), cost].map(|n| n.to_string()).to_vec();
    Ok(Call { script, args })
}

/// The most permits a smooth key may store on Redis: its `limit` and `remaining` are integers
/// below 2⁵³.
const MAX_PERMITS: f64 = 9_007_199_254_740_992.0;

/// Either smooth limiter, as `smooth.lua` takes it.
pub(super) enum Smooth<'s> {
    Bursty(&'s SmoothBursty),
    WarmingUp(&'s SmoothWarmingUp),
}

impl Smooth<'_> {
    fn name(&self) -> &'static str {
        match self {
            Smooth::Bursty(_) => "smooth_bursty",
            Smooth::WarmingUp(_) => "smooth_warming_up",
        }
    }

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

    /// `smooth.lua`'s call for `op`. Refused: a time to fill up from empty above 2⁵⁰ µs (a
    /// burst of `max_burst_seconds`, or the warmup), and a maximum of stored permits, at the
    /// configured rate or a `set_rate`'s, of 2⁵³ or more.
    pub(super) fn call<'a>(&self, script: &'a Script, op: Op) -> Result<Call<'a>, StoreError> {
        let (tag, rate, p1, p2) = match self {
            Smooth::Bursty(b) => {
                if b.max_burst_seconds() * 1e6 > MAX_EXACT as f64 {
                    return Err(beyond_exact(self.name()));
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
                    return Err(beyond_exact(self.name()));
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
            return Err(beyond_exact(self.name()));
        }
        let (kind, cost, timeout, new_rate) = match op {
            Op::Check { cost } => ("c", cost, 0, "0".to_owned()),
            Op::Reserve { cost } => ("r", cost, 0, "0".to_owned()),
            Op::TryAcquire { cost, timeout } => {
                let micros = u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX);
                ("t", cost, micros.min(MAX_MICROS), "0".to_owned())
            }
            Op::SetRate { rate } => match self.max_permits(rate) {
                Some(m) if m >= MAX_PERMITS => return Err(beyond_exact(self.name())),
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
        Ok(Call { script, args })
    }
}
