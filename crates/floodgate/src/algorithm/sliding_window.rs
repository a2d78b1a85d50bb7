//! Sliding window counters: a sliding window approximated with counters instead of a log.
//!
//! [`SlidingWindow::new`]`(limit, window, buckets)` has two modes. Both align their windows and
//! buckets to the clock's epoch (`floor(now / width)`), count only admitted cost (a denied
//! request consumes nothing), and work in nanoseconds; `W` below is `window` in nanoseconds and
//! `L` is `limit`.
//!
//! # Two-window weighted estimate (`buckets: None`)
//!
//! The state counts the cost admitted in the current window `[kW, (k+1)W)` (`current`) and in the
//! one before (`previous`). At `now`, with `elapsed = now − kW`,
//!
//! ```text
//! estimate = previous × (W − elapsed) / W + current
//! a request of cost n passes iff estimate + n ≤ L
//! ```
//!
//! computed exactly in integers (`previous·(W − elapsed) + (current + n)·W ≤ L·W`, in `u128`): no
//! float, and no division to decide. `remaining` is `L − ⌈previous·(W − elapsed)/W⌉ − current`
//! (the largest `n` that would pass). `reset_after` runs to the end of the next window when
//! `current > 0`, to the end of this one when only `previous > 0`. `retry_after` is the first
//! instant at which the falling weight of `previous` (this window) or of `current` (next window)
//! lets the same request pass.
//!
//! **Bound, not exact.** The estimate assumes the previous window's traffic was spread evenly.
//! In any closed interval of length `W` the admitted cost is at most
//!
//! ```text
//! 2L − ⌈L / W⌉        (that is 2L − 1 whenever L ≤ W nanoseconds, i.e. always in practice)
//! ```
//!
//! and this is reached. Proof: an interval `[a, a + W]` meets at most two windows `k − 1` and `k`
//! (if it starts at `kW` it meets `k` and the single instant `(k+1)W`, where everything of window
//! `k` still weighs fully: at most `L`). Let `X ≤ L` be its cost in window `k − 1` (which needs
//! `a ≤ kW − 1`) and `Y` its cost in window `k`, whose last admission was at `elapsed ≤ W − 1`.
//! That admission saw a weight `m = W − elapsed ≥ 1` on `previous ≥ X`, so
//! `Y ≤ L − ⌈X·m/W⌉ ≤ L − ⌈X/W⌉`, and `X + Y ≤ L + X − ⌈X/W⌉ ≤ 2L − ⌈L/W⌉`. Equality: `L` admitted
//! at `kW − 1`, then `L − ⌈L/W⌉` at `(k+1)W − 1`. So the estimate can admit up to `L − ⌈L/W⌉`
//! (almost `L`) above `limit` in a window straddling a boundary.
//!
//! State: two counts, the window start and the latest admission instant. Deciding takes no
//! division; `remaining` takes one when `previous > 0`, and moving to a window more than one
//! window ahead takes one.
//!
//! # Sub-bucket counters (`buckets: Some(N)`)
//!
//! The window is split into `N` sub-buckets of width `b = W / N`, aligned to the epoch; bucket
//! `j` is `[j·b, (j+1)·b)`. At `now`, in bucket `J = floor(now / b)`, the counted cost is the sum
//! of buckets `J − N ..= J`: **`N + 1` buckets**, every bucket whose start is at or after the start
//! of the bucket holding `now − W`. This is the counting rule of the design's source (seed
//! `002`, "Sliding window counters"). A request of cost `n` passes iff `counted + n ≤ L`; it is
//! then added to bucket `J`.
//!
//! **Bound: exact (strict).** In any closed interval `[a, a + W]` the admitted cost is at most
//! `L`: when its last admission happened, at `t ≤ a + W` in bucket `J`, the counted buckets
//! started at `(J − N)·b ≤ t − W ≤ a`, so every admission of the interval was counted. The price
//! is that an admission keeps counting for between `W` and `W + b` (up to one extra bucket).
//!
//! **Difference from the seed.** The seed adds every request to its bucket *before* comparing
//! with the limit, so denied requests are counted too and a client that keeps retrying stays
//! locked out. Floodgate's convention holds here: a denied request consumes nothing.
//!
//! `N` must be between 1 and [`MAX_BUCKETS`] (3600), and `W` must be a whole multiple of `N`
//! nanoseconds, so that all buckets have the same whole-nanosecond width `b ≥ 1 ns` and align
//! to the epoch (`window = 60 s` with `buckets = 7` is refused; 6, 10, 12, 60 are fine).
//! State: `N + 1` counters on the heap (8 bytes each), a head index, the head bucket's start
//! and their total: O(N) per key. Deciding is O(1) while time stays in one bucket and
//! O(buckets crossed) otherwise; `retry_after` walks at most `N + 1` buckets; the counters are
//! allocated once, by [`Algorithm::fresh`], and nothing allocates afterwards.
//!
//! # Both modes
//!
//! - State size: `size_of::<SlidingWindowState>() == 40` bytes (plus `8 × (N + 1)` heap bytes in
//!   sub-bucket mode).
//! - First request, or once `2W` (weighted) or `W + b` (sub-buckets) have passed since the
//!   latest admission: nothing counts, `L` passes.
//! - Cost 0: a read-only probe, changes nothing. Cost above `L`: denied, `retry_after: None`,
//!   consumes nothing.
//! - Time: probes and denials change nothing, so the latest instant a state knows is its latest
//!   admission; an earlier instant (a clock going backwards) counts as that one: no time passed.
//!   Admissions are counted at that effective instant, so the bounds hold over effective
//!   instants (the given ones whenever the clock does not go backwards).
//! - A state built with other parameters (another mode or bucket count) is treated as fresh.
//! - Huge values: products are taken in `u128`, sums saturate; nothing overflows or panics.

use std::time::Duration;

use crate::algorithm::{param, Algorithm};
use crate::{ConfigError, Decision, Nanos, Op};

/// The largest accepted number of sub-buckets.
pub const MAX_BUCKETS: u32 = 3600;

/// A sliding window of `limit` per `window`, counted with the two-window weighted estimate
/// (`buckets: None`) or with `N` sub-buckets (`buckets: Some(N)`). See the
/// [module documentation](self) for the exact rules and bounds.
#[derive(Debug, Clone)]
pub struct SlidingWindow {
    limit: u64,
    window: Duration,
    window_ns: u64,
    buckets: Option<u32>,
    mode: Mode,
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    /// `budget = limit × window`.
    Weighted { budget: u128 },
    /// `slots = N + 1`, `width = W / N`, `span = W + width` (saturating).
    Buckets { slots: usize, width: u64, span: u64 },
}

/// One key's sliding-window counters.
#[derive(Debug, Clone)]
pub struct SlidingWindowState {
    repr: Repr,
}

#[derive(Debug, Clone)]
enum Repr {
    Weighted(Pair),
    Buckets(Ring),
}

/// Two-window counts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Pair {
    /// Start of the current window (a multiple of W).
    start: u64,
    previous: u64,
    current: u64,
    /// The latest admission's instant; `start ≤ last`.
    last: u64,
}

/// Sub-bucket counts, oldest after `head`, newest at `head`.
#[derive(Debug, Clone)]
struct Ring {
    /// `N + 1` counts, circular.
    counts: Box<[u64]>,
    /// The slot of the newest bucket (the latest admission's).
    head: usize,
    /// The start instant of the newest bucket (a multiple of the width).
    head_start: u64,
    /// Sum of `counts`.
    total: u64,
}

/// The sub-bucket counts as seen from an effective instant, without changing them.
struct RingView {
    /// Buckets the head would move forward by.
    shift: u64,
    /// The cost still counted.
    live: u64,
}

impl SlidingWindow {
    /// `limit` cost per `window`, with the two-window estimate (`buckets: None`) or `N`
    /// sub-buckets (`buckets: Some(N)`).
    ///
    /// Errors name the field: `limit` must be at least 1; `window` between 1 ns and 584 years;
    /// `buckets` between 1 and [`MAX_BUCKETS`] and dividing `window` into whole nanoseconds.
    pub fn new(
        limit: u64,
        window: Duration,
        buckets: Option<u32>,
    ) -> Result<SlidingWindow, ConfigError> {
        let limit = param::count("limit", limit)?;
        let window_ns = param::period("window", window)?;
        let mode = match buckets {
            None => Mode::Weighted {
                budget: u128::from(limit) * u128::from(window_ns),
            },
            Some(n) => {
                if n == 0 || n > MAX_BUCKETS {
                    return Err(ConfigError::invalid(
                        "buckets",
                        n,
                        "must be between 1 and 3600",
                    ));
                }
                if window_ns % u64::from(n) != 0 {
                    return Err(ConfigError::invalid(
                        "buckets",
                        n,
                        "must divide the window into sub-buckets of a whole number of nanoseconds",
                    ));
                }
                let width = window_ns / u64::from(n);
                Mode::Buckets {
                    slots: n as usize + 1,
                    width,
                    span: window_ns.saturating_add(width),
                }
            }
        };
        Ok(SlidingWindow {
            limit,
            window,
            window_ns,
            buckets,
            mode,
        })
    }

    /// The most cost admitted per window (exactly so with sub-buckets; see the module
    /// documentation for the estimate's bound).
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The number of sub-buckets, or `None` for the two-window estimate.
    pub fn buckets(&self) -> Option<u32> {
        self.buckets
    }

    /// The width of one sub-bucket, or `None` for the two-window estimate.
    pub fn bucket_width(&self) -> Option<Duration> {
        match self.mode {
            Mode::Weighted { .. } => None,
            Mode::Buckets { width, .. } => Some(Duration::from_nanos(width)),
        }
    }

    /// Whether `state` was built for this mode (and bucket count).
    fn matches(&self, state: &SlidingWindowState) -> bool {
        match (&state.repr, self.mode) {
            (Repr::Weighted(_), Mode::Weighted { .. }) => true,
            (Repr::Buckets(r), Mode::Buckets { slots, .. }) => {
                r.counts.len() == slots && r.head < slots
            }
            _ => false,
        }
    }

    // ----- two-window estimate -----

    /// The counts at the effective instant `now ≥ p.last`, rolled to its window.
    fn roll(&self, p: &Pair, now: u64) -> Pair {
        let w = self.window_ns;
        let delta = now.saturating_sub(p.start);
        if delta < w {
            *p
        } else if delta - w < w {
            // `p.start + w ≤ now`.
            Pair {
                start: p.start + w,
                previous: p.current,
                current: 0,
                last: p.last,
            }
        } else {
            Pair {
                start: now - now % w,
                previous: 0,
                current: 0,
                last: p.last,
            }
        }
    }

    /// `L − ⌈previous·(W − elapsed)/W⌉ − current`, at least 0.
    fn weighted_remaining(&self, previous: u64, current: u64, elapsed: u64) -> u64 {
        let w = self.window_ns;
        // ⌈previous·(W − elapsed)/W⌉ = previous − ⌊previous·elapsed/W⌋.
        let faded = if previous == 0 || elapsed == 0 {
            0
        } else {
            match previous.checked_mul(elapsed) {
                Some(x) => x / w,
                // < previous, so it fits in u64.
                None => (u128::from(previous) * u128::from(elapsed) / u128::from(w)) as u64,
            }
        };
        self.limit
            .saturating_sub(previous - faded)
            .saturating_sub(current)
    }

    fn apply_weighted(&self, p: &mut Pair, now: u64, cost: u64, budget: u128) -> Decision {
        let w = self.window_ns;
        let now_eff = now.max(p.last);
        let v = self.roll(p, now_eff);
        let elapsed = now_eff.saturating_sub(v.start);
        let weight = w - elapsed;
        let used = (u128::from(v.previous) * u128::from(weight)).saturating_add(
            (u128::from(v.current) + u128::from(cost)).saturating_mul(u128::from(w)),
        );
        let allowed = cost <= self.limit && used <= budget;
        let current = if allowed {
            v.current.saturating_add(cost)
        } else {
            v.current
        };
        if allowed && cost > 0 {
            *p = Pair {
                current,
                last: now_eff,
                ..v
            };
        }
        let start = u128::from(v.start);
        let reset_at = if current > 0 {
            start + 2 * u128::from(w)
        } else if v.previous > 0 {
            start + u128::from(w)
        } else {
            0
        };
        let remaining = self.weighted_remaining(v.previous, current, elapsed);
        let reset_after = until(reset_at, now);
        if allowed {
            return Decision::allow(self.limit, remaining, reset_after);
        }
        if cost > self.limit {
            return Decision::deny(self.limit, remaining, reset_after, None);
        }
        let (limit, w128) = (u128::from(self.limit), u128::from(w));
        let need = u128::from(v.current) + u128::from(cost);
        let retry_at = if need <= limit {
            // This window, once previous·(W − e) ≤ (L − current − n)·W.
            let slack = ((limit - need) * w128)
                .checked_div(u128::from(v.previous))
                .map_or(w128, |s| s.min(w128));
            start + w128 - slack
        } else {
            // Next window, where `current` is the previous one: current·(W − e) ≤ (L − n)·W.
            let slack = ((limit - u128::from(cost)) * w128)
                .checked_div(u128::from(v.current))
                .map_or(w128, |s| s.min(w128));
            start + 2 * w128 - slack
        };
        Decision::deny(
            self.limit,
            remaining,
            reset_after,
            Some(until(retry_at, now)),
        )
    }

    // ----- sub-buckets -----

    fn ring_view(&self, r: &Ring, now_eff: u64, slots: usize, width: u64) -> RingView {
        let delta = now_eff - r.head_start;
        let shift = if delta < width {
            0
        } else if delta - width < width {
            1
        } else {
            delta / width
        };
        let live = if r.total == 0 || shift == 0 {
            r.total
        } else if shift >= slots as u64 {
            0
        } else {
            let mut expired = 0u64;
            let mut slot = r.head;
            for _ in 0..shift {
                slot = next_slot(slot, slots);
                expired = expired.saturating_add(r.counts[slot]);
            }
            r.total.saturating_sub(expired)
        };
        RingView { shift, live }
    }

    fn apply_buckets(
        &self,
        r: &mut Ring,
        now: u64,
        cost: u64,
        (slots, width, span): (usize, u64, u64),
    ) -> Decision {
        let now_eff = now.max(r.head_start);
        let v = self.ring_view(r, now_eff, slots, width);
        let fits = u128::from(v.live) + u128::from(cost) <= u128::from(self.limit);
        if fits && cost > 0 {
            if v.shift >= slots as u64 {
                if r.total > 0 {
                    r.counts.fill(0);
                }
                r.total = 0;
            } else {
                for _ in 0..v.shift {
                    r.head = next_slot(r.head, slots);
                    r.total = r.total.saturating_sub(r.counts[r.head]);
                    r.counts[r.head] = 0;
                }
            }
            // `shift × width ≤ now_eff − head_start`.
            r.head_start += v.shift * width;
            r.counts[r.head] = r.counts[r.head].saturating_add(cost);
            r.total = r.total.saturating_add(cost);
        }
        let live = if fits { v.live + cost } else { v.live };
        let remaining = self.limit - live.min(self.limit);
        let reset_after = if live > 0 {
            // The head bucket is the newest with a count: it stops counting N + 1 buckets on.
            until(u128::from(r.head_start) + u128::from(span), now)
        } else {
            Duration::ZERO
        };
        if fits {
            return Decision::allow(self.limit, remaining, reset_after);
        }
        if cost > self.limit {
            return Decision::deny(self.limit, remaining, reset_after, None);
        }
        // Drop buckets oldest first until `need` is freed; bucket j (0 = oldest of the ring)
        // stops counting when the head has moved j + 1 buckets on.
        let need = u128::from(v.live) + u128::from(cost) - u128::from(self.limit);
        let mut freed = 0u128;
        let mut slot = r.head;
        for _ in 0..v.shift {
            slot = next_slot(slot, slots);
        }
        let mut retry_at = u128::from(r.head_start) + u128::from(span);
        for j in v.shift..slots as u64 {
            slot = next_slot(slot, slots);
            freed += u128::from(r.counts[slot]);
            if freed >= need {
                retry_at = u128::from(r.head_start) + u128::from(j + 1) * u128::from(width);
                break;
            }
        }
        Decision::deny(
            self.limit,
            remaining,
            reset_after,
            Some(until(retry_at, now)),
        )
    }
}

/// The slot after `slot` in a ring of `slots`.
#[inline]
fn next_slot(slot: usize, slots: usize) -> usize {
    if slot + 1 == slots {
        0
    } else {
        slot + 1
    }
}

/// The time from `now` to the instant `at` (zero if past, saturating at `u64::MAX` ns).
fn until(at: u128, now: u64) -> Duration {
    let d = at.saturating_sub(u128::from(now));
    Duration::from_nanos(u64::try_from(d).unwrap_or(u64::MAX))
}

impl Algorithm for SlidingWindow {
    type State = SlidingWindowState;

    fn name(&self) -> &'static str {
        "sliding_window"
    }

    fn fresh(&self, _now: Nanos) -> SlidingWindowState {
        let repr = match self.mode {
            Mode::Weighted { .. } => Repr::Weighted(Pair::default()),
            Mode::Buckets { slots, .. } => Repr::Buckets(Ring {
                counts: vec![0; slots].into_boxed_slice(),
                head: 0,
                head_start: 0,
                total: 0,
            }),
        };
        SlidingWindowState { repr }
    }

    #[inline]
    fn apply(&self, state: &mut SlidingWindowState, now: Nanos, op: Op) -> Decision {
        let cost = match op {
            Op::Check { cost } => cost,
            // Unsupported: a read-only probe.
            _ => 0,
        };
        if !self.matches(state) {
            // Built with other parameters: decide as for a fresh key, without touching the state
            // for a probe.
            if cost == 0 {
                return self.apply(&mut self.fresh(now), now, op);
            }
            *state = self.fresh(now);
        }
        match (&mut state.repr, self.mode) {
            (Repr::Weighted(p), Mode::Weighted { budget }) => {
                self.apply_weighted(p, now.0, cost, budget)
            }
            (Repr::Buckets(r), Mode::Buckets { slots, width, span }) => {
                self.apply_buckets(r, now.0, cost, (slots, width, span))
            }
            // `matches` made the state's shape agree with the mode.
            _ => Decision::deny(self.limit, 0, Duration::ZERO, None),
        }
    }

    /// True when nothing counts any more at `now` and the state knows no later instant (and for
    /// a state built with other parameters, which `apply` treats as fresh). Sound for every later
    /// operation at an instant `≥ now`.
    fn is_fresh(&self, state: &SlidingWindowState, now: Nanos) -> bool {
        if !self.matches(state) {
            return true;
        }
        match (&state.repr, self.mode) {
            (Repr::Weighted(p), _) => {
                let v = self.roll(p, now.0);
                p.last <= now.0 && v.previous == 0 && v.current == 0
            }
            (Repr::Buckets(r), Mode::Buckets { slots, width, .. }) => {
                r.head_start <= now.0 && self.ring_view(r, now.0, slots, width).live == 0
            }
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::laws;
    use crate::OpKind;
    use proptest::prelude::*;

    fn check(cost: u64) -> Op {
        Op::Check { cost }
    }

    fn ns(n: u64) -> Duration {
        Duration::from_nanos(n)
    }

    fn weighted(limit: u64, window: u64) -> SlidingWindow {
        SlidingWindow::new(limit, ns(window), None).unwrap()
    }

    fn bucketed(limit: u64, window: u64, n: u32) -> SlidingWindow {
        SlidingWindow::new(limit, ns(window), Some(n)).unwrap()
    }

    #[test]
    fn state_size() {
        assert_eq!(std::mem::size_of::<SlidingWindowState>(), 40);
    }

    /// limit 10, window 100: hand-derived.
    #[test]
    fn weighted_hand_sequence() {
        let sw = weighted(10, 100);
        let mut s = sw.fresh(Nanos(0));
        let mut at = |t: u64, cost: u64| sw.apply(&mut s, Nanos(t), check(cost));
        // Window [1000, 1100): 8 at 1050.
        let d = at(1050, 8);
        assert!(d.allowed);
        assert_eq!((d.remaining, d.reset_after), (2, ns(150)));
        // 3 more: 11 > 10; the current window's 8 weigh fully until the next window, where
        // 8·(100 − e)/100 + 3 ≤ 10 ⇔ e ≥ 12.5 → 1113.
        let d = at(1060, 3);
        assert!(!d.allowed);
        assert_eq!((d.remaining, d.retry_after), (2, Some(ns(53))));
        // 1112: 8·88/100 = 7.04 + 3 > 10. 1113: 8·87/100 = 6.96 + 3 ≤ 10.
        assert!(!at(1112, 3).allowed);
        let d = at(1113, 3);
        assert!(d.allowed);
        // remaining = 10 − ⌈6.96⌉ − 3 = 0; reset at the end of [1200, 1300).
        assert_eq!((d.remaining, d.reset_after), (0, ns(187)));
        // 1150: 8·50/100 = 4 + 3 = 7: remaining 3.
        let d = at(1150, 0);
        assert_eq!((d.allowed, d.remaining), (true, 3));
        // Cost above the limit: never.
        let d = at(1150, 11);
        assert_eq!((d.allowed, d.retry_after), (false, None));
        // 1150, cost 4: 8·50/100 + 3 + 4 = 11 > 10; need 8·(100 − e) ≤ 3·100 → e ≥ 62.5 → 1163.
        let d = at(1150, 4);
        assert_eq!(d.retry_after, Some(ns(13)));
        // Window [1200, 1300): previous = 3.
        let d = at(1200, 0);
        assert_eq!((d.remaining, d.reset_after), (7, ns(100)));
        // Long idle: everything forgotten.
        let d = at(5000, 0);
        assert_eq!((d.remaining, d.reset_after), (10, Duration::ZERO));
        assert!(sw.is_fresh(&s, Nanos(5000)));
    }

    /// limit 5, window 100 in 4 buckets of 25: hand-derived.
    #[test]
    fn bucket_hand_sequence() {
        let sw = bucketed(5, 100, 4);
        assert_eq!(sw.bucket_width(), Some(ns(25)));
        let mut s = sw.fresh(Nanos(0));
        let mut at = |t: u64, cost: u64| sw.apply(&mut s, Nanos(t), check(cost));
        // Bucket 40 = [1000, 1025).
        let d = at(1010, 2);
        assert!(d.allowed);
        // Counts in buckets 40..=44 then stops: at 1125.
        assert_eq!((d.remaining, d.reset_after), (3, ns(115)));
        // Bucket 42 = [1050, 1075).
        let d = at(1060, 3);
        assert!(d.allowed);
        assert_eq!((d.remaining, d.reset_after), (0, ns(115)));
        // Bucket 44 = [1100, 1125) counts 40..=44: still full, although 1010 is more than a
        // window ago (the N + 1 rule). Bucket 40 drops at 1125; bucket 42 at 1175.
        let d = at(1110, 1);
        assert!(!d.allowed);
        assert_eq!((d.remaining, d.retry_after), (0, Some(ns(15))));
        let d = at(1110, 3);
        assert_eq!(d.retry_after, Some(ns(65)));
        let d = at(1110, 6);
        assert_eq!(d.retry_after, None);
        assert!(!at(1124, 2).allowed);
        let d = at(1125, 2);
        assert!(d.allowed);
        assert_eq!((d.remaining, d.reset_after), (0, ns(125)));
        // Denials were not counted: at 1175 bucket 42 drops, 3 free.
        let d = at(1175, 0);
        assert_eq!((d.remaining, d.reset_after), (3, ns(75)));
        let d = at(1250, 0);
        assert_eq!((d.remaining, d.reset_after), (5, Duration::ZERO));
        assert!(sw.is_fresh(&s, Nanos(1250)));
        assert!(!sw.is_fresh(&s, Nanos(1249)));
    }

    #[test]
    fn weighted_bound_is_reached() {
        // L = 10, W = 100: 2L − ⌈L/W⌉ = 19 in [99, 199].
        let sw = weighted(10, 100);
        let mut s = sw.fresh(Nanos(0));
        assert!(sw.apply(&mut s, Nanos(99), check(10)).allowed);
        assert!(sw.apply(&mut s, Nanos(199), check(9)).allowed);
        assert!(!sw.apply(&mut s, Nanos(199), check(1)).allowed);
        // L > W: 2·250 − ⌈250/100⌉ = 497.
        let sw = weighted(250, 100);
        let mut s = sw.fresh(Nanos(0));
        assert!(sw.apply(&mut s, Nanos(99), check(250)).allowed);
        assert!(sw.apply(&mut s, Nanos(199), check(247)).allowed);
        assert!(!sw.apply(&mut s, Nanos(199), check(1)).allowed);
    }

    #[test]
    fn backwards_clock_counts_as_no_time_passed() {
        for sw in [weighted(4, 100), bucketed(4, 100, 4)] {
            let mut s = sw.fresh(Nanos(0));
            assert!(sw.apply(&mut s, Nanos(1_000), check(4)).allowed);
            let later = sw.apply(&mut s.clone(), Nanos(1_000), check(1));
            let d = sw.apply(&mut s, Nanos(10), check(1));
            assert_eq!(d.allowed, later.allowed);
            assert_eq!(d.remaining, later.remaining);
            let shift = Duration::from_nanos(990);
            assert_eq!(d.retry_after, later.retry_after.map(|r| r + shift));
        }
    }

    #[test]
    fn constructor_validates_and_names_fields() {
        let field = |r: Result<SlidingWindow, ConfigError>| match r {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("expected an error, got {other:?}"),
        };
        let minute = Duration::from_secs(60);
        assert_eq!(field(SlidingWindow::new(0, minute, None)), "limit");
        assert_eq!(field(SlidingWindow::new(1, Duration::ZERO, None)), "window");
        assert_eq!(field(SlidingWindow::new(1, minute, Some(0))), "buckets");
        assert_eq!(field(SlidingWindow::new(1, minute, Some(3601))), "buckets");
        assert_eq!(field(SlidingWindow::new(1, minute, Some(7))), "buckets");
        assert_eq!(field(SlidingWindow::new(1, ns(5), Some(10))), "buckets");
        let e = SlidingWindow::new(1, minute, Some(7))
            .unwrap_err()
            .to_string();
        assert!(e.contains("buckets") && e.contains('7'), "{e}");
        let hour = Duration::from_secs(3600);
        let sw = SlidingWindow::new(3, hour, Some(3600)).unwrap();
        assert_eq!(sw.bucket_width(), Some(Duration::from_secs(1)));
        assert_eq!(
            (sw.limit(), sw.window(), sw.buckets()),
            (3, hour, Some(3600))
        );
        assert_eq!(field(SlidingWindow::new(1, minute, Some(3600))), "buckets");
        assert!(SlidingWindow::new(1, minute, Some(60)).is_ok());
        let sw = SlidingWindow::new(3, ns(1), Some(1)).unwrap();
        assert_eq!(sw.bucket_width(), Some(ns(1)));
        assert_eq!(weighted(1, 5).bucket_width(), None);
    }

    #[test]
    fn unsupported_ops_are_probes_and_foreign_states_are_fresh() {
        for sw in [weighted(3, 10), bucketed(3, 10, 2)] {
            let mut s = sw.fresh(Nanos(0));
            sw.apply(&mut s, Nanos(5), check(2));
            let before = format!("{s:?}");
            for op in [
                Op::Reserve { cost: 1 },
                Op::TryAcquire {
                    cost: 1,
                    timeout: Duration::ZERO,
                },
                Op::SetRate { rate: 1.0 },
            ] {
                assert!(!sw.supports(op.kind()));
                let d = sw.apply(&mut s, Nanos(6), op);
                assert_eq!(d, sw.apply(&mut s, Nanos(6), check(0)));
                assert_eq!(format!("{s:?}"), before);
            }
            assert!(sw.supports(OpKind::Check));
            assert_eq!(sw.name(), "sliding_window");
        }
        // A state from another mode or bucket count decides as a fresh one.
        let other = bucketed(3, 10, 5).fresh(Nanos(0));
        for sw in [weighted(3, 10), bucketed(3, 10, 2)] {
            assert!(sw.is_fresh(&other, Nanos(0)));
            let mut s = other.clone();
            let d = sw.apply(&mut s, Nanos(7), check(0));
            assert_eq!(d, sw.apply(&mut sw.fresh(Nanos(7)), Nanos(7), check(0)));
            assert_eq!(format!("{s:?}"), format!("{other:?}"));
            let d = sw.apply(&mut s, Nanos(7), check(2));
            assert_eq!((d.allowed, d.remaining), (true, 1));
        }
    }

    #[test]
    fn steady_state_does_not_reallocate_buckets() {
        let sw = bucketed(100, 1_000, 10);
        let mut s = sw.fresh(Nanos(0));
        let Repr::Buckets(r) = &s.repr else {
            unreachable!()
        };
        let ptr = r.counts.as_ptr();
        for t in 0..5_000u64 {
            sw.apply(&mut s, Nanos(t * 37), check(1 + t % 3));
        }
        let Repr::Buckets(r) = &s.repr else {
            unreachable!()
        };
        assert_eq!(r.counts.as_ptr(), ptr);
    }

    #[test]
    fn extremes() {
        for sw in [
            SlidingWindow::new(u64::MAX, ns(u64::MAX), None).unwrap(),
            SlidingWindow::new(u64::MAX, ns(u64::MAX - u64::MAX % 3600), Some(3600)).unwrap(),
            SlidingWindow::new(u64::MAX, ns(u64::MAX), Some(1)).unwrap(),
        ] {
            let mut s = sw.fresh(Nanos(0));
            assert!(sw.apply(&mut s, Nanos(u64::MAX), check(u64::MAX)).allowed);
            let d = sw.apply(&mut s, Nanos(0), check(1));
            assert!(!d.allowed);
            assert!(d.retry_after.is_some());
            assert!(!sw.is_fresh(&s, Nanos(u64::MAX)));
        }
    }

    /// Sums of admitted cost over every closed interval [a, a + w] starting at an admission.
    fn max_in_closed_windows(admitted: &[(u64, u64)], w: u64) -> u64 {
        admitted
            .iter()
            .map(|&(a, _)| {
                admitted
                    .iter()
                    .filter(|(t, _)| *t >= a && *t <= a + w)
                    .map(|(_, c)| c)
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0)
    }

    fn run(sw: &SlidingWindow, steps: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let mut s = sw.fresh(Nanos(0));
        let mut now = 0u64;
        let mut admitted = Vec::new();
        for &(dt, cost) in steps {
            now += dt;
            if sw.apply(&mut s, Nanos(now), check(cost)).allowed && cost > 0 {
                admitted.push((now, cost));
            }
        }
        admitted
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Weighted: any closed interval of length W holds at most 2L − ⌈L/W⌉.
        #[test]
        fn weighted_bound(
            limit in 1u64..8,
            window in 1u64..30,
            steps in prop::collection::vec((0u64..12, 0u64..9), 1..150),
        ) {
            let sw = weighted(limit, window);
            let admitted = run(&sw, &steps);
            let bound = 2 * limit - limit.div_ceil(window);
            let most = max_in_closed_windows(&admitted, window);
            prop_assert!(most <= bound, "{} > {}", most, bound);
        }

        /// Sub-buckets: any closed interval of length W holds at most L.
        #[test]
        fn bucket_bound(
            limit in 1u64..8,
            n in 1u32..6,
            width in 1u64..8,
            steps in prop::collection::vec((0u64..12, 0u64..9), 1..150),
        ) {
            let window = width * u64::from(n);
            let sw = bucketed(limit, window, n);
            let admitted = run(&sw, &steps);
            let most = max_in_closed_windows(&admitted, window);
            prop_assert!(most <= limit, "{} > {}", most, limit);
        }

        /// retry_after and reset_after are exact in both modes.
        #[test]
        fn retry_and_reset_are_exact(
            limit in 1u64..8,
            n in prop_oneof![Just(None), (1u32..6).prop_map(Some)],
            width in 1u64..8,
            steps in prop::collection::vec((0u64..12, 1u64..9), 1..60),
        ) {
            let window = width * u64::from(n.unwrap_or(3));
            let sw = SlidingWindow::new(limit, ns(window), n).unwrap();
            let mut s = sw.fresh(Nanos(0));
            let mut now = 0u64;
            for (dt, cost) in steps {
                now += dt;
                let d = sw.apply(&mut s, Nanos(now), check(cost));
                if let Some(r) = d.retry_after {
                    let r = r.as_nanos() as u64;
                    prop_assert!(r > 0);
                    prop_assert!(!sw.apply(&mut s.clone(), Nanos(now + r - 1), check(cost)).allowed);
                    prop_assert!(sw.apply(&mut s.clone(), Nanos(now + r), check(cost)).allowed);
                }
                prop_assert_eq!(d.retry_after.is_none(), d.allowed || cost > limit);
                let probe = sw.apply(&mut s.clone(), Nanos(now), check(0));
                prop_assert_eq!(probe.remaining, d.remaining);
                if d.remaining > 0 {
                    prop_assert!(sw.apply(&mut s.clone(), Nanos(now), check(d.remaining)).allowed);
                }
                prop_assert!(!sw.apply(&mut s.clone(), Nanos(now), check(d.remaining + 1)).allowed);
                let reset = d.reset_after.as_nanos() as u64;
                prop_assert!(sw.is_fresh(&s, Nanos(now + reset)));
                if reset > 0 {
                    prop_assert!(!sw.is_fresh(&s, Nanos(now + reset - 1)));
                }
            }
        }

        /// Once `is_fresh`, the state and a fresh one decide alike at every later instant ≥ now.
        #[test]
        fn is_fresh_is_sound(
            limit in 1u64..6,
            n in prop_oneof![Just(None), (1u32..5).prop_map(Some)],
            width in 1u64..8,
            before in prop::collection::vec((0u64..12, 0u64..7), 0..40),
            after in prop::collection::vec((0u64..12, 0u64..7), 1..40),
        ) {
            let window = width * u64::from(n.unwrap_or(3));
            let sw = SlidingWindow::new(limit, ns(window), n).unwrap();
            let ops = |v: Vec<(u64, u64)>| v.into_iter().map(|(dt, c)| (dt, check(c))).collect::<Vec<_>>();
            laws::assert_fresh_after_idle(&sw, &ops(before), &ops(after), 1);
        }

        /// No input panics: extreme parameters, costs and instants, backwards included.
        #[test]
        fn never_panics(
            limit in prop_oneof![Just(1u64), Just(u64::MAX), any::<u64>(), 1u64..10],
            window in prop_oneof![Just(1u64), Just(u64::MAX), any::<u64>(), 1u64..100],
            n in prop_oneof![Just(None), Just(Some(1u32)), Just(Some(3600)), (1u32..10).prop_map(Some)],
            ops in prop::collection::vec(
                (prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>(), 0u64..1000],
                 prop_oneof![Just(0u64), Just(1u64), Just(u64::MAX), any::<u64>()]),
                1..40,
            ),
        ) {
            let window = match n {
                Some(n) => (window / u64::from(n)).max(1) * u64::from(n),
                None => window,
            };
            let Ok(sw) = SlidingWindow::new(limit, ns(window), n) else {
                return Ok(());
            };
            let mut s = sw.fresh(Nanos(0));
            for (now, cost) in ops {
                let d = sw.apply(&mut s, Nanos(now), check(cost));
                prop_assert!(d.remaining <= limit);
                sw.is_fresh(&s, Nanos(now));
            }
        }
    }
}
