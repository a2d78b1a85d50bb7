//! Calls for the window counters that keep more than one number: the sliding log and both
//! modes of the sliding window.

use super::{beyond_exact, nanos, Call, Script, Usage, MAX_EXACT};
use crate::algorithm::sliding_log::SlidingLog;
use crate::algorithm::sliding_window::SlidingWindow;
use crate::StoreError;

/// `sliding_log.lua`: window and limit at most 2⁵⁰ (every instant difference it compares and
/// every sum of costs stays exact).
pub(super) fn sliding_log<'a>(
    script: &'a Script,
    log: &SlidingLog,
    cost: u64,
) -> Result<Call<'a>, StoreError> {
    let window = nanos(log.window());
    if window > MAX_EXACT || log.limit() > MAX_EXACT {
        return Err(beyond_exact("sliding_log"));
    }
    let cost = cost.min(log.limit() + 1);
    let args = [window, log.limit(), cost].map(|n| n.to_string()).to_vec();
    Ok(Call { script, args })
}

/// `sliding_window.lua`: window and limit at most 2⁵⁰. The estimate's products
/// (`previous × weight`, `limit × window`, up to 2¹⁰⁰) are compared and divided exactly by the
/// script in 26-bit limbs and by long multiplication, not in doubles.
pub(super) fn sliding_window<'a>(
    script: &'a Script,
    window: &SlidingWindow,
    cost: u64,
    usage: Usage,
) -> Result<Call<'a>, StoreError> {
    let w = nanos(window.window());
    if w > MAX_EXACT || window.limit() > MAX_EXACT {
        return Err(beyond_exact("sliding_window"));
    }
    // A refund gives back at most what counts (two windows' worth at most), a check takes at
    // most the limit.
    let cost = match usage {
        Usage::Take => cost.min(window.limit() + 1),
        _ => cost.min(MAX_EXACT),
    };
    let (mode, buckets) = match window.buckets() {
        None => ("w", 0),
        Some(n) => ("b", n),
    };
    let mut args = vec![mode.to_owned()];
    args.extend([w, window.limit()].map(|n| n.to_string()));
    args.push(usage.cost(cost));
    args.push(u64::from(buckets).to_string());
    args.extend(usage.flag());
    Ok(Call { script, args })
}
