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
//! The window is split into `N` sub-buckets aligned to the epoch. Bucket `j` (numbered from the
//! epoch, `j ≥ 0`) is `[s(j), s(j + 1))` with
//!
//! ```text
//! s(j) = ⌊j / N⌋·W + ⌊(j mod N)·W / N⌋
//! ```
//!
//! that is, window `k` (`[kW, (k+1)W)`) holds buckets `kN ..= kN + N − 1`, and its bucket `i`
//! starts `⌊i·W/N⌋` nanoseconds into it. Every bucket is `⌊W/N⌋` or `⌊W/N⌋ + 1` nanoseconds
//! wide (exactly `W mod N` of each window's buckets are the wider ones), and `s(j + N) = s(j) + W`:
//! every window starts a bucket and no rounding accumulates. When `N` divides `W` all buckets
//! have width `b = W / N` and `s(j) = j·b`. The bucket holding `t` is
//!
//! ```text
//! J(t) = ⌊t / W⌋·N + ⌊((t mod W + 1)·N − 1) / W⌋
//! ```
//!
//! (the largest `i` with `⌊i·W/N⌋ ≤ t mod W`). At `now`, in bucket `J = J(now)`, the counted
//! cost is the sum of buckets `J − N ..= J`: **`N + 1` buckets**, every bucket whose start is at or
//! after the start of the bucket holding `now − W`. This is the usual sliding-window-counter
//! rule. A request of cost `n` passes iff `counted + n ≤ L`; it is then added to bucket `J`.
//! `remaining` is `L` minus the counted cost, the request's included if it passed (at least 0).
//! A counted admission in bucket `j` stops counting at `s(j + N + 1)`: `reset_after` runs to
//! that instant for the newest bucket holding cost, and a denied request's `retry_after` runs to
//! the first such instant at which enough older buckets have stopped counting for it to pass.
//!
//! **Bound: exact (strict).** In any closed interval `[a, a + W]` the admitted cost is at most
//! `L`: when its last admission happened, at `t ≤ a + W` in bucket `J`, the counted buckets
//! started at `s(J − N) = s(J) − W ≤ t − W ≤ a`, so every admission of the interval was counted.
//! The price is that an admission keeps counting for between `W` and `W` plus its bucket's width
//! (at most `W + ⌈W/N⌉`).
//!
//! **Denials consume nothing.** A common formulation adds every request to its bucket *before*
//! comparing with the limit, so denied requests are counted too and a client that keeps
//! retrying stays locked out. Floodgate's convention holds here: a denied request consumes
//! nothing.
//!
//! `N` must be between 1 and [`MAX_BUCKETS`] (3600), and `W` at least `N` nanoseconds, so that
//! every bucket is at least 1 ns wide. Any such `N` works with any such `W`: `window = 1 s` with
//! `buckets = 6` gives buckets starting 0, 166 666 666, 333 333 333, 500 000 000, 666 666 666
//! and 833 333 333 ns into each window.
//! State: `N + 1` counters on the heap (8 bytes each), a head index, the head bucket's start
//! and their total: O(N) per key. Deciding is O(1) while time stays in one bucket and
//! O(buckets crossed) otherwise; `retry_after` walks at most `N + 1` buckets; the counters are
//! allocated once, by [`Algorithm::fresh`], and nothing allocates afterwards. When `N` divides
//! `W`, bucket arithmetic is one multiplication or division; otherwise it takes a few divisions.
//!
//! # Both modes
//!
//! - State size: `size_of::<SlidingWindowState>() == 40` bytes (plus `8 × (N + 1)` heap bytes in
//!   sub-bucket mode).
//! - First request, or once `2W` (weighted) or `W` plus the width of its bucket (sub-buckets)
//!   have passed since the start of the latest admission's window or bucket: nothing counts, `L`
//!   passes.
//! - Cost 0: a read-only probe, changes nothing. Cost above `L`: denied, `retry_after: None`,
//!   consumes nothing.
//! - Refund ([`Op::Refund`]): gives back the newest units still counted first (the current
//!   window's, then the previous one's; the head bucket's, then older ones'), never past
//!   empty; always allowed. Units that stopped counting give nothing back. A refund that gives
//!   something back moves the state to `now` as an admission does. Charges ([`Op::Charge`])
//!   are not taken: a count past the limit has no place in an estimate that already
//!   approximates.
//! - Time: probes and denials change nothing, so the latest instant a state knows is its latest
//!   admission; an earlier instant (a clock going backwards) counts as that one: no time passed.
//!   Admissions are counted at that effective instant, so the bounds hold over effective
//!   instants (the given ones whenever the clock does not go backwards).
//! - A state built with other parameters (another mode or bucket count) is treated as fresh.
//! - Huge values: products are taken in `u128`, sums saturate; nothing overflows or panics.

use std::time::Duration;

use serde::Deserialize;

use crate::algorithm::{param, Algorithm, Parameters};
use crate::duration::SpecDuration;
use crate::{ConfigError, Decision, Nanos, Op};

#[cfg(feature = "redis")]
mod twin;

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
    /// `slots = N + 1`.
    Buckets { slots: usize, grid: Grid },
}

/// Where the sub-buckets start: `s(j) = ⌊j/N⌋·W + ⌊(j mod N)·W/N⌋` (module documentation).
#[derive(Debug, Clone, Copy)]
struct Grid {
    /// `W`, at least `n`.
    window: u64,
    /// `N`.
    n: u64,
    /// `⌊W/N⌋ ≥ 1`: the narrowest bucket's width.
    width: u64,
    /// `W mod N`: 0 when every bucket is `width` wide, which allows the cheap arithmetic.
    rem: u64,
}

impl Grid {
    /// `J(t)`, the bucket holding `t`. Never above `t` (every bucket is at least 1 ns wide).
    #[inline]
    fn index(&self, t: u64) -> u64 {
        if self.rem == 0 {
            return t / self.width;
        }
        let (k, o) = (t / self.window, t % self.window);
        // The largest i with ⌊i·W/N⌋ ≤ o, i.e. with i·W < (o + 1)·N.
        let i = match (o + 1).checked_mul(self.n) {
            Some(x) => (x - 1) / self.window,
            // < N, so it fits in u64.
            None => {
                (((u128::from(o) + 1) * u128::from(self.n) - 1) / u128::from(self.window)) as u64
            }
        };
        // k·N + i ≤ k·W + ⌊i·W/N⌋ ≤ t: no overflow.
        k * self.n + i
    }

    /// `s(j)`, in `u128` because buckets far ahead may start after `u64::MAX`.
    #[inline]
    fn start(&self, j: u64) -> u128 {
        if self.rem == 0 {
            return u128::from(j) * u128::from(self.width);
        }
        let (k, i) = (j / self.n, j % self.n);
        let into = match i.checked_mul(self.window) {
            Some(x) => x / self.n,
            // < W, so it fits in u64.
            None => (u128::from(i) * u128::from(self.window) / u128::from(self.n)) as u64,
        };
        u128::from(k) * u128::from(self.window) + u128::from(into)
    }

    /// `s(J + ahead)` for the bucket `J` starting at `bucket_start`.
    #[inline]
    fn after(&self, bucket_start: u64, ahead: u64) -> u128 {
        if self.rem == 0 {
            // Whole widths added to the start itself, as this mode has always done, even for a
            // start off this grid (a state built with another window).
            u128::from(bucket_start) + u128::from(ahead) * u128::from(self.width)
        } else {
            // s(J) > J·W/N − 1 gives J < (bucket_start + 1)·N/(N + 1) when W > N: adding
            // `ahead ≤ N + 1 ≤ 3601` stays far below u64::MAX, so this never saturates.
            self.start(self.index(bucket_start).saturating_add(ahead))
        }
    }
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
    /// `buckets` between 1 and [`MAX_BUCKETS`] and at most `window` in nanoseconds (every
    /// sub-bucket at least 1 ns wide; it need not divide `window`).
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
                let n64 = u64::from(n);
                if window_ns < n64 {
                    return Err(ConfigError::invalid(
                        "buckets",
                        n,
                        "must be at most the window in nanoseconds (each sub-bucket at least 1 ns)",
                    ));
                }
                Mode::Buckets {
                    slots: n as usize + 1,
                    grid: Grid {
                        window: window_ns,
                        n: n64,
                        width: window_ns / n64,
                        rem: window_ns % n64,
                    },
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

    /// The narrowest sub-bucket's width, `⌊window / N⌋` nanoseconds, or `None` for the
    /// two-window estimate. When `N` divides the window every sub-bucket has this width;
    /// otherwise `window mod N` of each window's `N` sub-buckets are 1 ns wider (see the
    /// [module documentation](self) for where each starts).
    pub fn bucket_width(&self) -> Option<Duration> {
        match self.mode {
            Mode::Weighted { .. } => None,
            Mode::Buckets { grid, .. } => Some(Duration::from_nanos(grid.width)),
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

    /// [`Op::Refund`], two-window estimate: the newest units first, from `current`, then
    /// from `previous`; written (with `now_eff` as the latest instant) when anything comes back.
    fn give_back_weighted(&self, p: &mut Pair, now: u64, cost: u64) -> Decision {
        let w = u128::from(self.window_ns);
        let now_eff = now.max(p.last);
        let v = self.roll(p, now_eff);
        let from_current = cost.min(v.current);
        let from_previous = (cost - from_current).min(v.previous);
        let (previous, current) = (v.previous - from_previous, v.current - from_current);
        if from_current + from_previous > 0 {
            *p = if previous == 0 && current == 0 {
                // Nothing counts: the key is fresh again (as the script deletes it).
                Pair::default()
            } else {
                Pair {
                    previous,
                    current,
                    last: now_eff,
                    ..v
                }
            };
        }
        let start = u128::from(v.start);
        let reset_at = if current > 0 {
            start + 2 * w
        } else if previous > 0 {
            start + w
        } else {
            0
        };
        let elapsed = now_eff.saturating_sub(v.start);
        let remaining = self.weighted_remaining(previous, current, elapsed);
        Decision::allow(self.limit, remaining, until(reset_at, now))
    }

    // ----- sub-buckets -----

    /// Moves the head `v.shift` buckets on, to the bucket holding `now_eff`: the buckets that
    /// left are emptied.
    fn advance(&self, r: &mut Ring, v: &RingView, slots: usize, grid: Grid) {
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
        if v.shift > 0 {
            // The start of the bucket holding `now_eff`: at most `now_eff`, so it fits.
            r.head_start = grid.after(r.head_start, v.shift) as u64;
        }
    }

    /// [`Op::Refund`], sub-buckets: the newest units first, from the head bucket back, once
    /// the head is at `now_eff`'s bucket (as an admission would move it).
    fn give_back_buckets(
        &self,
        r: &mut Ring,
        now: u64,
        cost: u64,
        slots: usize,
        grid: Grid,
    ) -> Decision {
        let now_eff = now.max(r.head_start);
        let v = self.ring_view(r, now_eff, slots, grid);
        let back = cost.min(v.live);
        if back > 0 {
            self.advance(r, &v, slots, grid);
            let mut left = back;
            let mut slot = r.head;
            while left > 0 {
                let take = left.min(r.counts[slot]);
                r.counts[slot] -= take;
                left -= take;
                slot = if slot == 0 { slots - 1 } else { slot - 1 };
            }
            r.total -= back;
        }
        let live = v.live - back;
        if live == 0 && back > 0 {
            // Nothing counts: the key is fresh again (as the script deletes it).
            r.counts.fill(0);
            (r.head, r.head_start, r.total) = (0, 0, 0);
        }
        let remaining = self.limit - live.min(self.limit);
        // The newest bucket still holding cost stops counting N + 1 buckets after its start.
        let reset_after = match (0..slots).find(|age| r.counts[(r.head + slots - age) % slots] > 0)
        {
            Some(age) if live > 0 => until(grid.after(r.head_start, (slots - age) as u64), now),
            _ => Duration::ZERO,
        };
        Decision::allow(self.limit, remaining, reset_after)
    }

    fn ring_view(&self, r: &Ring, now_eff: u64, slots: usize, grid: Grid) -> RingView {
        let delta = now_eff - r.head_start;
        let width = grid.width;
        // No bucket is narrower than `width`: below it, time is still in the head bucket.
        let shift = if delta < width {
            0
        } else if grid.rem != 0 {
            grid.index(now_eff) - grid.index(r.head_start)
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
        slots: usize,
        grid: Grid,
    ) -> Decision {
        let now_eff = now.max(r.head_start);
        let v = self.ring_view(r, now_eff, slots, grid);
        let fits = u128::from(v.live) + u128::from(cost) <= u128::from(self.limit);
        if fits && cost > 0 {
            self.advance(r, &v, slots, grid);
            r.counts[r.head] = r.counts[r.head].saturating_add(cost);
            r.total = r.total.saturating_add(cost);
        }
        let live = if fits { v.live + cost } else { v.live };
        let remaining = self.limit - live.min(self.limit);
        let reset_after = if live > 0 {
            // The head bucket is the newest with a count: it stops counting N + 1 buckets on.
            until(grid.after(r.head_start, slots as u64), now)
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
        let mut retry_at = grid.after(r.head_start, slots as u64);
        for j in v.shift..slots as u64 {
            slot = next_slot(slot, slots);
            freed += u128::from(r.counts[slot]);
            if freed >= need {
                retry_at = grid.after(r.head_start, j + 1);
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

    fn supports(&self, op: crate::OpKind) -> bool {
        matches!(op, crate::OpKind::Check | crate::OpKind::Refund)
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
            Op::Refund { cost } => {
                if !self.matches(state) {
                    // Built with other parameters: nothing of this limit's to give back.
                    return self.apply(&mut self.fresh(now), now, Op::Check { cost: 0 });
                }
                return match (&mut state.repr, self.mode) {
                    (Repr::Weighted(p), Mode::Weighted { .. }) => {
                        self.give_back_weighted(p, now.0, cost)
                    }
                    (Repr::Buckets(r), Mode::Buckets { slots, grid }) => {
                        self.give_back_buckets(r, now.0, cost, slots, grid)
                    }
                    _ => Decision::deny(self.limit, 0, Duration::ZERO, None),
                };
            }
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
            (Repr::Buckets(r), Mode::Buckets { slots, grid }) => {
                self.apply_buckets(r, now.0, cost, slots, grid)
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
            (Repr::Buckets(r), Mode::Buckets { slots, grid }) => {
                r.head_start <= now.0 && self.ring_view(r, now.0, slots, grid).live == 0
            }
            _ => true,
        }
    }
}

#[cfg(feature = "file")]
pub(crate) mod parts;

/// A sliding window as a user writes it: `{"algorithm": "sliding_window", "limit": 10,
/// "window": "1m", "buckets": 6}` ([`crate::algorithm::spec::AlgorithmSpec`]).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlidingWindowSpec {
    /// Cost allowed per window, at least 1.
    pub limit: u64,
    /// Window length: seconds, or a string with a unit.
    pub window: SpecDuration,
    /// Sub-buckets; absent for the two-window weighted estimate.
    #[serde(default)]
    pub buckets: Option<u32>,
}

impl SlidingWindowSpec {
    /// Validates the parameters and builds the window ([`SlidingWindow::new`]).
    pub fn build(&self) -> Result<SlidingWindow, ConfigError> {
        SlidingWindow::new(self.limit, self.window.0, self.buckets)
    }
}

impl Parameters for SlidingWindow {
    fn fingerprint(&self) -> [u64; 2] {
        let buckets = self.buckets().map_or(0, |b| u64::from(b) + 1);
        [
            self.limit(),
            param::mix(param::nanos(self.window()), buckets),
        ]
    }

    /// `limit` per `window`.
    fn quota(&self) -> Option<(f64, Duration)> {
        Some((self.limit() as f64, self.window()))
    }

    fn share(&self, nodes: u32) -> Result<SlidingWindow, ConfigError> {
        SlidingWindow::new(
            param::part(self.limit(), nodes),
            self.window(),
            self.buckets(),
        )
    }
}

#[cfg(test)]
mod tests;
