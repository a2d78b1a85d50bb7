//! Sliding log: the exact sliding window, which remembers every admission of the last window.
//!
//! # Rule
//!
//! [`SlidingLog::new`]`(limit, window)`. The state is the log of admitted requests: their instants
//! and costs. An admission at instant `t` **counts at `now` while `now < t + window`**: it counts
//! from `t` included to `t + window` excluded. A request of cost `n` at `now` passes iff
//!
//! ```text
//! (sum of the costs that count at now) + n ≤ limit
//! ```
//!
//! and, when it passes with `n > 0`, is appended to the log at `now`. Entries that stopped
//! counting are dropped when the next request is admitted. Instants are nanoseconds.
//!
//! # Decision
//!
//! `limit` is `limit`; `remaining` is `limit −` what counts after this decision; `reset_after` is
//! the time until the newest counted admission stops counting (zero when nothing counts);
//! `retry_after`, when denied, is the time until enough of the oldest counted admissions stop
//! counting for the same request to pass.
//!
//! # Bound
//!
//! Exact: in any half-open interval `[a, a + window)` the admitted cost is at most `limit`
//! (equivalently, in any closed interval of length `window − 1 ns`). Proof: when the last
//! admission of such an interval happened, at `t ≤ a + window − 1`, every earlier admission of the
//! interval had an instant `≥ a > t − window`, so it counted. Two bursts of `limit` exactly
//! `window` apart both pass: the closed interval `[a, a + window]` can hold `2 × limit`.
//!
//! # State and memory
//!
//! [`SlidingLogState`] is a ring buffer of 16-byte entries (instant, cost) plus the sum of their
//! costs: `size_of::<SlidingLogState>() == 40` bytes, plus 16 bytes on the heap per entry.
//! Admissions at the same instant share one entry, and each entry has cost ≥ 1 and the counted
//! costs never exceed `limit`, so a key holds at most `min(limit, admissions in one window)`
//! entries: memory is O(`limit`) per key. The buffer only grows; once it has reached its size, a
//! decision allocates nothing.
//!
//! # Time
//!
//! Probes and denials change nothing, so the latest instant the state knows is its newest entry.
//! An instant earlier than that (a clock going backwards) counts as the newest entry's instant: no
//! time passed. Admissions are logged at that effective instant, so the bound holds over logged
//! instants, which are the given ones whenever the clock does not go backwards.
//!
//! # Edge cases
//!
//! - First request, or after an idle time of at least `window`: nothing counts, `limit` passes.
//! - Cost 0: a read-only probe; it reports the numbers above and changes nothing (it passes
//!   whenever the counted cost is at most `limit`, which is always for a state built by these
//!   parameters).
//! - Cost above `limit`: denied with `retry_after: None`, consumes nothing.
//! - Denied requests consume nothing (they are not logged).
//! - Huge values: instants near `u64::MAX` and costs up to `u64::MAX` never overflow (differences
//!   are taken before comparing; sums saturate).
//!
//! # Cost
//!
//! An admission is O(1) amortised (it drops the entries that stopped counting). A denial or a
//! probe walks the entries that stopped counting (they are only dropped by an admission) and, for
//! `retry_after`, the oldest counted ones: O(`limit`) at worst, allocation-free.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Deserialize;

use crate::algorithm::{param, Algorithm, Parameters};
use crate::duration::SpecDuration;
use crate::{ConfigError, Decision, Nanos, Op};

#[cfg(feature = "redis")]
mod twin;

/// The sliding log: at most `limit` cost in any window of length `window`, exactly. See the
/// [module documentation](self) for the exact rule.
#[derive(Debug, Clone)]
pub struct SlidingLog {
    limit: u64,
    window: Duration,
    window_ns: u64,
}

/// One key's log of admissions (instant and cost), oldest first.
#[derive(Debug, Clone, Default)]
pub struct SlidingLogState {
    entries: VecDeque<Entry>,
    /// Sum of the costs of `entries`, including any that stopped counting but were not dropped.
    total: u64,
}

impl SlidingLogState {
    /// How many entries the log holds (admissions at distinct instants, including any that
    /// stopped counting and will be dropped at the next admission).
    pub fn entries(&self) -> usize {
        self.entries.len()
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    at: u64,
    cost: u64,
}

/// What counts at an effective instant, computed without changing the state.
struct View {
    /// The effective instant: `max(now, newest entry)`.
    now: u64,
    /// Entries at the front that stopped counting.
    expired: usize,
    /// Their summed cost.
    expired_cost: u64,
    /// The cost that counts.
    live: u64,
}

impl SlidingLog {
    /// At most `limit` cost in any window of length `window`.
    ///
    /// Errors name the field: `limit` must be at least 1, `window` between 1 ns and 584 years.
    pub fn new(limit: u64, window: Duration) -> Result<SlidingLog, ConfigError> {
        Ok(SlidingLog {
            limit: param::count("limit", limit)?,
            window,
            window_ns: param::period("window", window)?,
        })
    }

    /// The most cost admitted in any window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window length.
    pub fn window(&self) -> Duration {
        self.window
    }

    fn view(&self, state: &SlidingLogState, now: u64) -> View {
        let now = state.entries.back().map_or(now, |e| e.at.max(now));
        let mut expired = 0;
        let mut expired_cost = 0u64;
        for e in &state.entries {
            // `e.at ≤ now`: the difference cannot underflow.
            if now - e.at < self.window_ns {
                break;
            }
            expired += 1;
            expired_cost = expired_cost.saturating_add(e.cost);
        }
        View {
            now,
            expired,
            expired_cost,
            live: state.total.saturating_sub(expired_cost),
        }
    }

    /// The instant at which an entry at `at` stops counting (saturating at the end of time).
    fn expiry(&self, at: u64) -> u64 {
        at.saturating_add(self.window_ns)
    }

    /// The time from `now` until the newest entry stops counting, if anything counts.
    fn reset_after(&self, state: &SlidingLogState, live: u64, now: u64) -> Duration {
        match state.entries.back() {
            Some(e) if live > 0 => Duration::from_nanos(self.expiry(e.at).saturating_sub(now)),
            _ => Duration::ZERO,
        }
    }

    /// When denied: the time until enough of the oldest counted entries stop counting.
    fn retry_after(&self, state: &SlidingLogState, view: &View, now: u64, cost: u64) -> Duration {
        // `cost ≤ limit`, so `need ≤ live` and the walk below reaches it.
        let need = u128::from(view.live) + u128::from(cost) - u128::from(self.limit);
        let mut freed = 0u128;
        for e in state.entries.iter().skip(view.expired) {
            freed += u128::from(e.cost);
            if freed >= need {
                return Duration::from_nanos(self.expiry(e.at).saturating_sub(now));
            }
        }
        // Unreachable for a state built by this limiter; a state whose `total` disagrees with
        // its entries waits for the whole log to expire.
        self.reset_after(state, view.live, now)
    }
}

impl Algorithm for SlidingLog {
    type State = SlidingLogState;

    fn name(&self) -> &'static str {
        "sliding_log"
    }

    fn fresh(&self, _now: Nanos) -> SlidingLogState {
        SlidingLogState::default()
    }

    #[inline]
    fn apply(&self, state: &mut SlidingLogState, now: Nanos, op: Op) -> Decision {
        let cost = match op {
            Op::Check { cost } => cost,
            // Unsupported: a read-only probe.
            _ => 0,
        };
        let now = now.0;
        let view = self.view(state, now);
        if cost > self.limit {
            return Decision::deny(
                self.limit,
                self.limit.saturating_sub(view.live),
                self.reset_after(state, view.live, now),
                None,
            );
        }
        if u128::from(view.live) + u128::from(cost) > u128::from(self.limit) {
            return Decision::deny(
                self.limit,
                self.limit.saturating_sub(view.live),
                self.reset_after(state, view.live, now),
                Some(self.retry_after(state, &view, now, cost)),
            );
        }
        if cost == 0 {
            return Decision::allow(
                self.limit,
                self.limit - view.live,
                self.reset_after(state, view.live, now),
            );
        }
        state.entries.drain(..view.expired);
        state.total = state.total.saturating_sub(view.expired_cost);
        match state.entries.back_mut() {
            Some(e) if e.at == view.now => e.cost += cost,
            _ => state.entries.push_back(Entry { at: view.now, cost }),
        }
        state.total = state.total.saturating_add(cost);
        let live = view.live + cost;
        Decision::allow(
            self.limit,
            self.limit - live,
            Duration::from_nanos(self.expiry(view.now).saturating_sub(now)),
        )
    }

    /// True when nothing counts at `now` and no entry is later than `now`. Sound for every later
    /// operation at an instant `≥ now`.
    fn is_fresh(&self, state: &SlidingLogState, now: Nanos) -> bool {
        match state.entries.back() {
            None => true,
            Some(newest) => newest.at <= now.0 && now.0 - newest.at >= self.window_ns,
        }
    }
}

/// A sliding log as a user writes it: `{"algorithm": "sliding_log", "limit": 10,
/// "window": 60}` ([`crate::algorithm::spec::AlgorithmSpec`]).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlidingLogSpec {
    /// Cost allowed in any window, at least 1.
    pub limit: u64,
    /// Window length: seconds, or a string with a unit.
    pub window: SpecDuration,
}

impl SlidingLogSpec {
    /// Validates the parameters and builds the log ([`SlidingLog::new`]).
    pub fn build(&self) -> Result<SlidingLog, ConfigError> {
        SlidingLog::new(self.limit, self.window.0)
    }
}

impl Parameters for SlidingLog {
    fn fingerprint(&self) -> [u64; 2] {
        [self.limit(), param::nanos(self.window())]
    }

    /// `limit` per `window`.
    fn quota(&self) -> Option<(f64, Duration)> {
        Some((self.limit() as f64, self.window()))
    }

    fn share(&self, nodes: u32) -> Result<SlidingLog, ConfigError> {
        SlidingLog::new(param::part(self.limit(), nodes), self.window())
    }
}

#[cfg(feature = "file")]
mod parts;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::laws;
    use crate::algorithm::laws::check;
    use crate::OpKind;
    use proptest::prelude::*;

    fn log(limit: u64, window_ns: u64) -> SlidingLog {
        SlidingLog::new(limit, Duration::from_nanos(window_ns)).unwrap()
    }

    #[test]
    fn state_size() {
        assert_eq!(std::mem::size_of::<SlidingLogState>(), 40);
    }

    /// limit 3, window 10: hand-derived.
    #[test]
    fn hand_sequence() {
        let l = log(3, 10);
        let mut s = l.fresh(Nanos(0));
        let mut at = |t: u64, cost: u64| l.apply(&mut s, Nanos(t), check(cost));
        let ns = Duration::from_nanos;

        let d = at(100, 1);
        assert!(d.allowed);
        assert_eq!((d.remaining, d.reset_after), (2, ns(10)));
        let d = at(104, 2);
        assert!(d.allowed);
        assert_eq!((d.remaining, d.reset_after), (0, ns(10)));
        // Full: 1 frees at 110, 2 more at 114.
        let d = at(105, 1);
        assert!(!d.allowed);
        assert_eq!(
            (d.remaining, d.reset_after, d.retry_after),
            (0, ns(9), Some(ns(5)))
        );
        let d = at(105, 3);
        assert_eq!(d.retry_after, Some(ns(9)));
        // Cost above the limit: never.
        let d = at(105, 4);
        assert_eq!((d.allowed, d.retry_after), (false, None));
        // 109: the entry at 100 still counts (109 < 110).
        assert!(!at(109, 1).allowed);
        // 110: it stopped counting (110 = 100 + 10 is excluded).
        let d = at(110, 1);
        assert!(d.allowed);
        assert_eq!((d.remaining, d.reset_after), (0, ns(10)));
        // Probe: nothing changes.
        let d = at(113, 0);
        assert_eq!((d.allowed, d.remaining, d.reset_after), (true, 0, ns(7)));
        let d = at(114, 0);
        assert_eq!((d.allowed, d.remaining, d.reset_after), (true, 2, ns(6)));
        // Same instant merges into one entry.
        assert!(at(114, 1).allowed);
        assert!(at(114, 1).allowed);
        let d = at(200, 0);
        assert_eq!((d.remaining, d.reset_after), (3, Duration::ZERO));
        assert_eq!(s.entries(), 2);
    }

    #[test]
    fn backwards_clock_counts_as_no_time_passed() {
        let l = log(2, 10);
        let mut s = l.fresh(Nanos(0));
        assert!(l.apply(&mut s, Nanos(100), check(2)).allowed);
        // 50 counts as 100.
        let d = l.apply(&mut s, Nanos(50), check(1));
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Duration::from_nanos(60)));
        assert_eq!(d.reset_after, Duration::from_nanos(60));
        assert!(l.apply(&mut s, Nanos(110), check(2)).allowed);
    }

    #[test]
    fn steady_state_does_not_allocate() {
        let l = log(50, 1_000);
        let mut s = l.fresh(Nanos(0));
        let mut now = 0;
        for _ in 0..2_000 {
            now += 7;
            let _ = l.apply(&mut s, Nanos(now), check(1));
        }
        let cap = s.entries.capacity();
        assert!(s.entries() <= 50);
        for _ in 0..10_000 {
            now += 7;
            let _ = l.apply(&mut s, Nanos(now), check(1));
            assert_eq!(s.entries.capacity(), cap);
        }
    }

    #[test]
    fn constructor_validates_and_names_fields() {
        let e = SlidingLog::new(0, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(e, ConfigError::Invalid { field: "limit", .. }));
        let e = SlidingLog::new(1, Duration::ZERO).unwrap_err();
        assert!(matches!(
            e,
            ConfigError::Invalid {
                field: "window",
                ..
            }
        ));
        let l = SlidingLog::new(7, Duration::from_secs(3)).unwrap();
        assert_eq!((l.limit(), l.window()), (7, Duration::from_secs(3)));
    }

    #[test]
    fn unsupported_ops_are_probes() {
        let l = log(3, 10);
        let mut s = l.fresh(Nanos(0));
        let _ = l.apply(&mut s, Nanos(5), check(2));
        for op in [
            Op::Reserve { cost: 1 },
            Op::TryAcquire {
                cost: 1,
                timeout: Duration::ZERO,
            },
            Op::SetRate { rate: 1.0 },
        ] {
            assert!(!l.supports(op.kind()));
            let d = l.apply(&mut s, Nanos(6), op);
            assert_eq!(d, l.apply(&mut s, Nanos(6), check(0)));
            assert_eq!((s.entries(), s.total), (1, 2));
        }
        assert!(l.supports(OpKind::Check));
        assert_eq!(l.name(), "sliding_log");
    }

    #[test]
    fn extremes() {
        let l = SlidingLog::new(u64::MAX, Duration::from_nanos(u64::MAX)).unwrap();
        let mut s = l.fresh(Nanos(0));
        assert!(l.apply(&mut s, Nanos(u64::MAX), check(u64::MAX)).allowed);
        let d = l.apply(&mut s, Nanos(0), check(1));
        assert!(!d.allowed);
        // The entry counts until the end of time.
        assert_eq!(d.retry_after, Some(Duration::from_nanos(u64::MAX)));
        assert_eq!(d.reset_after, Duration::from_nanos(u64::MAX));
        assert!(!l.is_fresh(&s, Nanos(u64::MAX)));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any half-open interval [a, a + window) holds at most `limit`.
        #[test]
        fn admission_bound(
            limit in 1u64..6,
            window in 1u64..40,
            steps in prop::collection::vec((0u64..15, 0u64..8), 1..150),
        ) {
            let l = log(limit, window);
            let mut s = l.fresh(Nanos(0));
            let mut now = 0u64;
            let mut admitted = Vec::new();
            for (dt, cost) in steps {
                now += dt;
                let d = l.apply(&mut s, Nanos(now), check(cost));
                if d.allowed && cost > 0 {
                    admitted.push((now, cost));
                }
                prop_assert!(s.entries() as u64 <= limit);
            }
            for &(a, _) in &admitted {
                let sum: u64 = admitted
                    .iter()
                    .filter(|(t, _)| *t >= a && *t < a + window)
                    .map(|(_, c)| c)
                    .sum();
                prop_assert!(sum <= limit, "[{}, {}): {} > {}", a, a + window, sum, limit);
            }
        }

        /// retry_after is exact: the same request is denied just before it and passes at it.
        #[test]
        fn retry_after_is_exact(
            limit in 1u64..6,
            window in 1u64..40,
            steps in prop::collection::vec((0u64..15, 1u64..8), 1..60),
        ) {
            let l = log(limit, window);
            let mut s = l.fresh(Nanos(0));
            let mut now = 0u64;
            for (dt, cost) in steps {
                now += dt;
                let d = l.apply(&mut s, Nanos(now), check(cost));
                if let Some(r) = d.retry_after {
                    let r = r.as_nanos() as u64;
                    prop_assert!(r > 0);
                    prop_assert!(!l.apply(&mut s.clone(), Nanos(now + r - 1), check(cost)).allowed);
                    prop_assert!(l.apply(&mut s.clone(), Nanos(now + r), check(cost)).allowed);
                }
                if !d.allowed && cost <= limit {
                    prop_assert!(d.retry_after.is_some());
                }
                // reset_after is when everything stopped counting.
                let reset = d.reset_after.as_nanos() as u64;
                prop_assert!(l.is_fresh(&s, Nanos(now + reset)));
                if reset > 0 {
                    prop_assert!(!l.is_fresh(&s, Nanos(now + reset - 1)));
                }
            }
        }

        /// Once `is_fresh`, the state and a fresh one decide alike at every later instant ≥ now.
        #[test]
        fn is_fresh_is_sound(
            limit in 1u64..5,
            window in 1u64..30,
            before in prop::collection::vec((0u64..15, 0u64..6), 0..40),
            after in prop::collection::vec((0u64..15, 0u64..6), 1..40),
        ) {
            let l = log(limit, window);
            let ops = |v: Vec<(u64, u64)>| v.into_iter().map(|(dt, c)| (dt, check(c))).collect::<Vec<_>>();
            laws::assert_fresh_after_idle(&l, &ops(before), &ops(after), 1);
        }

        /// No input panics: extreme windows, costs and instants, backwards included.
        #[test]
        fn never_panics(
            limit in prop_oneof![Just(1u64), Just(u64::MAX), any::<u64>(), 1u64..10],
            window in prop_oneof![Just(1u64), Just(u64::MAX), any::<u64>()],
            ops in prop::collection::vec(
                (prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()],
                 prop_oneof![Just(0u64), Just(1u64), Just(u64::MAX), any::<u64>()]),
                1..40,
            ),
        ) {
            let Ok(l) = SlidingLog::new(limit, Duration::from_nanos(window)) else {
                return Ok(());
            };
            let mut s = l.fresh(Nanos(0));
            for (now, cost) in ops {
                let d = l.apply(&mut s, Nanos(now), check(cost));
                prop_assert!(d.remaining <= limit);
                l.is_fresh(&s, Nanos(now));
            }
        }
    }
}
