//! Fixed window: at most `limit` per window, windows aligned to the epoch.
//!
//! # Rule
//!
//! Time is cut into windows of `window` nanoseconds starting at the clock's epoch: the window of
//! `now` is `index = floor(now / window)`, covering `[index × window, (index + 1) × window)`
//! (its start belongs to it, its end to the next one). Each key counts the cost admitted in the
//! current window. A request of cost `n` passes iff `count + n ≤ limit` (inclusive: reaching the
//! limit exactly is allowed), and then `count += n`. When a new window begins the count starts
//! again from 0.
//!
//! With [`crate::SystemClock`], whose epoch is the Unix epoch, windows of a [`Unit`] line up
//! with UTC: seconds, minutes and hours on the clock, days at midnight UTC, weeks starting on
//! Thursdays at midnight UTC (1970-01-01 was a Thursday), and "months" and "years" of 30 and
//! 365 days counted from the epoch, not calendar ones. This is what envoyproxy/ratelimit does
//! (`now / unit × unit`), so its `requests_per_unit` limits count the same windows here.
//!
//! # Decision
//!
//! - `limit` = `limit`.
//! - `remaining` = `limit − count` after the decision.
//! - `reset_after` = the time until the window ends, or 0 when the count is 0 (the state is
//!   already fresh).
//! - `retry_after`, when denied with `n ≤ limit`: the time until the window ends.
//! - `wait` = 0.
//!
//! # State
//!
//! [`FixedWindowState`]: the current window's start ([`Nanos`]) and its count (`u64`), 16 bytes.
//! Keeping the start rather than the index makes a decision inside the current window a
//! subtraction and a comparison; only a new window costs a division.
//!
//! # Bound
//!
//! In any closed interval of length `T`, the admitted cost is at most
//! `limit × (ceil(T / window) + 1)`: an interval meets at most that many windows. In particular
//! it is up to **2 × limit** for any `T` from 1 ns to `window`: `limit` admitted at the very end
//! of one window and `limit` more at the start of the next, 1 ns later. This burst at the
//! boundary is the price of the fixed window's simplicity; sliding windows
//! ([`super::sliding_window`], [`super::sliding_log`]) bound it.
//!
//! # Edge cases
//!
//! - First request: an empty window.
//! - Long idle: a later window starts empty; nothing carries over.
//! - Cost 0: a read-only probe; the state is not changed. Allowed unless a charge has put the
//!   count past the limit (then denied until the window ends, as upstream answers
//!   `hits_addend: 0`).
//! - Refund ([`Op::Refund`]): lowers the count of the window of `now`, never below 0; always
//!   allowed. In a later window than the one the units were taken in, nothing comes back (they
//!   no longer count). So the cost admitted in a window is at most `limit` plus what was
//!   refunded in it.
//! - Charge ([`Op::Charge`]): adds `cost` to the window of `now` even past the limit (the
//!   units were used); allowed while the count stays within `limit`, else denied with
//!   `retry_after` = the time until the window ends. Checks are denied for the rest of that
//!   window. So the cost counted in a window is at most `limit` plus what was charged in it
//!   after a check had admitted the request.
//! - Cost above `limit`: can never pass; denied with `retry_after: None`, consumes nothing.
//! - Clock going backwards: a `now` before the current window's start counts in the current
//!   window (the window of the latest instant seen); no window is ever reopened. Times in the
//!   decision run to the window's end as an instant, so they are longer by the lag.
//! - Huge values never panic: the window's end saturates at `u64::MAX` nanoseconds (year 2554)
//!   and counts never overflow (`count ≤ limit`, or saturating at `u64::MAX` after charges).

use std::time::Duration;

use serde::Deserialize;

use super::word::WordState;
use crate::algorithm::{param, Algorithm, Parameters};
use crate::duration::SpecDuration;
use crate::{ConfigError, Decision, Nanos, Op};

#[cfg(feature = "redis")]
mod twin;

/// A fixed window limiter: at most `limit` per epoch-aligned window of `window`. See the
/// [module documentation](self) for the exact rule.
#[derive(Debug, Clone)]
pub struct FixedWindow {
    limit: u64,
    /// Window length in nanoseconds, at least 1.
    window: u64,
}

/// A unit of time for [`FixedWindow::per_unit`]: Envoy's rate limit units
/// (`envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit`), each a fixed number of
/// seconds counted from the Unix epoch, as envoyproxy/ratelimit counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// 1 second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3 600 seconds.
    Hour,
    /// 86 400 seconds (days start at midnight UTC on a Unix-epoch clock).
    Day,
    /// 604 800 seconds (weeks start on Thursdays at midnight UTC on a Unix-epoch clock).
    Week,
    /// 2 592 000 seconds (30 days), not a calendar month.
    Month,
    /// 31 536 000 seconds (365 days), not a calendar year.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// Parses a unit name, ignoring case: `"minute"`, `"Minute"` and Envoy's `"MINUTE"` are the
    /// same unit. An unknown name is a [`ConfigError`] for field `unit`.
    pub fn from_name(name: &str) -> Result<Unit, ConfigError> {
        Unit::ALL
            .into_iter()
            .find(|unit| unit.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                ConfigError::invalid(
                    "unit",
                    name,
                    "must be one of second, minute, hour, day, week, month, year",
                )
            })
    }

    /// The unit's name in lower case, as [`Unit::from_name`] reads it and config files write it.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// The name of Envoy's enum value (`"MINUTE"`), as the protobuf's JSON mapping writes it.
    pub fn envoy_name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    /// The unit of Envoy's enum number (SECOND 1, MINUTE 2, HOUR 3, DAY 4, MONTH 5, YEAR 6,
    /// WEEK 7); `None` for UNKNOWN (0) and numbers Envoy does not define.
    pub fn from_envoy_number(number: i32) -> Option<Unit> {
        Some(match number {
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            7 => Unit::Week,
            _ => return None,
        })
    }

    /// Envoy's enum number for the unit ([`Unit::from_envoy_number`] reads it back).
    pub fn envoy_number(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The unit's length.
    pub fn duration(self) -> Duration {
        const DAY: u64 = 86_400;
        Duration::from_secs(match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => DAY,
            Unit::Week => 7 * DAY,
            Unit::Month => 30 * DAY,
            Unit::Year => 365 * DAY,
        })
    }
}

impl std::str::FromStr for Unit {
    type Err = ConfigError;

    fn from_str(name: &str) -> Result<Unit, ConfigError> {
        Unit::from_name(name)
    }
}

impl std::fmt::Display for Unit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl FixedWindow {
    /// At most `limit` per window of `window`.
    ///
    /// `limit` must be at least 1 (field `limit`); `window` between 1 ns and 584 years (field
    /// `window`).
    pub fn new(limit: u64, window: Duration) -> Result<FixedWindow, ConfigError> {
        Ok(FixedWindow {
            limit: param::count("limit", limit)?,
            window: param::period("window", window)?,
        })
    }

    /// At most `limit` per calendar `unit` (Envoy's `requests_per_unit`).
    pub fn per_unit(limit: u64, unit: Unit) -> Result<FixedWindow, ConfigError> {
        FixedWindow::new(limit, unit.duration())
    }

    /// The most cost admitted per window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The window's length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }

    /// The cost `state` has admitted in the window that counts at `now`.
    pub fn count(&self, state: &FixedWindowState, now: Nanos) -> u64 {
        self.current(state, now).1
    }

    /// The start and count of the window that counts at `now`: the state's own, unless `now` is
    /// past its end (a `now` before its start still counts in it).
    #[inline]
    fn current(&self, state: &FixedWindowState, now: Nanos) -> (u64, u64) {
        match now.0.checked_sub(state.start.0) {
            Some(into) if into >= self.window => (now.0 - now.0 % self.window, 0),
            _ => (state.start.0, state.count),
        }
    }

    #[inline]
    fn count_in(
        &self,
        state: &mut FixedWindowState,
        now: Nanos,
        cost: u64,
        commit: bool,
    ) -> Decision {
        let (start, count) = self.current(state, now);
        let to_end = Duration::from_nanos(start.saturating_add(self.window).saturating_sub(now.0));
        let reset = |count: u64| if count == 0 { Duration::ZERO } else { to_end };
        // count ≤ limit, except in a cached store's view, which may hold more than the limit
        // (what several nodes admitted between two syncs): then nothing is free.
        let free = self.limit.saturating_sub(count);
        if cost == 0 {
            // A probe is denied only past the limit (a charge put it there): as upstream's
            // `hits_addend: 0`, over only when the count already is.
            return if count <= self.limit {
                Decision::allow(self.limit, free, reset(count))
            } else {
                Decision::deny(self.limit, 0, to_end, Some(to_end))
            };
        }
        let allowed = cost <= free;
        let count = if allowed { count + cost } else { count };
        if commit {
            *state = FixedWindowState {
                start: Nanos(start),
                count,
            };
        }
        if allowed {
            Decision::allow(self.limit, free - cost, to_end)
        } else {
            let retry_after = (cost <= self.limit).then_some(to_end);
            Decision::deny(self.limit, free, reset(count), retry_after)
        }
    }
}

impl FixedWindow {
    /// [`Op::Refund`]: lowers the count of the window of `now` by `cost`, to 0 at least. A
    /// refund in a later window than the state's finds a new, empty window: what it would
    /// give back no longer counts.
    fn give_back(&self, state: &mut FixedWindowState, now: Nanos, cost: u64) -> Decision {
        let (start, count) = self.current(state, now);
        let count = count.saturating_sub(cost);
        if count != state.count || start != state.start.0 {
            *state = FixedWindowState {
                start: Nanos(start),
                count,
            };
        }
        let to_end = Duration::from_nanos(start.saturating_add(self.window).saturating_sub(now.0));
        let reset = if count == 0 { Duration::ZERO } else { to_end };
        Decision::allow(self.limit, self.limit.saturating_sub(count), reset)
    }

    /// [`Op::Charge`]: adds `cost` to the window of `now`, past the limit if need be; allowed
    /// while the count stays within the limit.
    fn charge(&self, state: &mut FixedWindowState, now: Nanos, cost: u64) -> Decision {
        let (start, count) = self.current(state, now);
        let count = count.saturating_add(cost);
        if cost > 0 {
            *state = FixedWindowState {
                start: Nanos(start),
                count,
            };
        }
        let to_end = Duration::from_nanos(start.saturating_add(self.window).saturating_sub(now.0));
        let reset = if count == 0 { Duration::ZERO } else { to_end };
        let remaining = self.limit.saturating_sub(count);
        if count <= self.limit {
            Decision::allow(self.limit, remaining, reset)
        } else {
            Decision::deny(self.limit, remaining, reset, Some(to_end))
        }
    }
}

/// One key's window: where the current window starts, and the cost admitted in it. 16 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedWindowState {
    start: Nanos,
    count: u64,
}

impl FixedWindowState {
    /// The start of the latest window this key was counted in.
    pub fn window_start(&self) -> Nanos {
        self.start
    }

    /// A state from its parts, as a store wrote them down elsewhere (the cached store reads
    /// Redis's state back).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // used by the cached store
    pub(crate) fn from_parts(start: Nanos, count: u64) -> FixedWindowState {
        FixedWindowState { start, count }
    }
}

/// The word store keeps a fixed window as one 16-byte word: the window's start in the high
/// half, its count in the low half. The one state that would be all ones, a count of
/// `u64::MAX` in the window starting at `u64::MAX` nanoseconds (a limit of 2^64 − 1 reached in
/// the last nanosecond of year 2554), is kept with a count of one less.
impl WordState for FixedWindowState {
    type Word = u128;

    fn to_word(self) -> u128 {
        (u128::from(self.start.0) << 64 | u128::from(self.count)).min(u128::MAX - 1)
    }

    fn from_word(word: u128) -> FixedWindowState {
        FixedWindowState {
            start: Nanos((word >> 64) as u64),
            count: word as u64,
        }
    }
}

impl Algorithm for FixedWindow {
    type State = FixedWindowState;

    fn name(&self) -> &'static str {
        "fixed_window"
    }

    fn fresh(&self, now: Nanos) -> FixedWindowState {
        FixedWindowState {
            start: Nanos(now.0 - now.0 % self.window),
            count: 0,
        }
    }

    #[inline]
    fn apply(&self, state: &mut FixedWindowState, now: Nanos, op: Op) -> Decision {
        match op {
            Op::Check { cost } => self.count_in(state, now, cost, true),
            Op::Refund { cost } => self.give_back(state, now, cost),
            Op::Charge { cost } => self.charge(state, now, cost),
            // Not supported: answer as a read-only probe of the same cost.
            other => self.count_in(state, now, other.cost(), false),
        }
    }

    fn supports(&self, op: crate::OpKind) -> bool {
        matches!(
            op,
            crate::OpKind::Check | crate::OpKind::Refund | crate::OpKind::Charge
        )
    }

    /// Nothing counted in the window of `now`, and `now` not before the state's window (whose
    /// start a fresh state would not keep). Sound for later operations from `now` on.
    fn is_fresh(&self, state: &FixedWindowState, now: Nanos) -> bool {
        match now.0.checked_sub(state.start.0) {
            Some(into) => state.count == 0 || into >= self.window,
            None => false,
        }
    }
}

/// A fixed window as a user writes it: `{"algorithm": "fixed_window", "limit": 10,
/// "window": "1m"}` ([`crate::algorithm::spec::AlgorithmSpec`]).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixedWindowSpec {
    /// Cost allowed per window, at least 1.
    pub limit: u64,
    /// Window length: seconds, or a string with a unit.
    pub window: SpecDuration,
}

impl FixedWindowSpec {
    /// Validates the parameters and builds the window ([`FixedWindow::new`]).
    pub fn build(&self) -> Result<FixedWindow, ConfigError> {
        FixedWindow::new(self.limit, self.window.0)
    }
}

impl Parameters for FixedWindow {
    fn fingerprint(&self) -> [u64; 2] {
        [self.limit(), param::nanos(self.window())]
    }

    /// `limit` per `window`.
    fn quota(&self) -> Option<(f64, Duration)> {
        Some((self.limit() as f64, self.window()))
    }

    fn share(&self, nodes: u32) -> Result<FixedWindow, ConfigError> {
        FixedWindow::new(param::part(self.limit(), nodes), self.window())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::laws::{self, cost};
    use crate::algorithm::laws::{check, ms};
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn state_is_16_bytes() {
        assert_eq!(std::mem::size_of::<FixedWindowState>(), 16);
    }

    #[test]
    fn constructor_validates() {
        let err = FixedWindow::new(0, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(&err, ConfigError::Invalid { field: "limit", value, .. } if value == "0"));
        let err = FixedWindow::new(1, Duration::ZERO).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::Invalid {
                field: "window",
                ..
            }
        ));
        let err = FixedWindow::new(1, Duration::MAX).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::Invalid {
                field: "window",
                ..
            }
        ));
        let fw = FixedWindow::per_unit(10, Unit::Minute).unwrap();
        assert_eq!(
            (fw.limit(), fw.window(), fw.name()),
            (10, Duration::from_secs(60), "fixed_window")
        );
        assert!(!fw.supports(crate::OpKind::Reserve));
    }

    #[test]
    fn units_parse_like_envoy() {
        for (name, unit, secs) in [
            ("second", Unit::Second, 1),
            ("MINUTE", Unit::Minute, 60),
            ("Hour", Unit::Hour, 3_600),
            ("day", Unit::Day, 86_400),
            ("WEEK", Unit::Week, 604_800),
            ("Month", Unit::Month, 2_592_000),
            ("YEAR", Unit::Year, 31_536_000),
        ] {
            assert_eq!(Unit::from_name(name), Ok(unit));
            assert_eq!(name.parse::<Unit>(), Ok(unit));
            assert_eq!(unit.duration(), Duration::from_secs(secs));
            assert_eq!(Unit::from_name(&unit.to_string()), Ok(unit));
            assert_eq!(Unit::from_name(unit.envoy_name()), Ok(unit));
            assert_eq!(Unit::from_envoy_number(unit.envoy_number()), Some(unit));
        }
        assert_eq!(Unit::from_envoy_number(0), None);
        assert_eq!(Unit::from_envoy_number(8), None);
        for bad in ["", "minutes", "fortnight", "quarter", " second"] {
            let err = Unit::from_name(bad).unwrap_err();
            assert!(
                matches!(&err, ConfigError::Invalid { field: "unit", value, .. } if value == bad)
            );
        }
    }

    /// 3 per second.
    #[test]
    fn hand_computed_sequence() {
        let fw = FixedWindow::new(3, Duration::from_secs(1)).unwrap();
        let t = |millis: u64| Nanos::from_millis(10_000 + millis);
        let mut s = fw.fresh(t(100));
        assert_eq!(s.window_start(), t(0));
        for left in [2, 1, 0] {
            assert_eq!(
                fw.apply(&mut s, t(100), check(1)),
                Decision::allow(3, left, ms(900))
            );
        }
        assert_eq!(
            fw.apply(&mut s, t(400), check(1)),
            Decision::deny(3, 0, ms(600), Some(ms(600)))
        );
        assert_eq!(
            fw.apply(&mut s, t(400), check(4)),
            Decision::deny(3, 0, ms(600), None)
        );
        let d = fw.apply(&mut s, Nanos(t(1000).0 - 1), check(1));
        assert_eq!(d.retry_after, Some(Duration::from_nanos(1)));
        assert_eq!(fw.count(&s, t(999)), 3);

        // The boundary belongs to the next window, which starts empty.
        assert!(fw.is_fresh(&s, t(1000)));
        assert_eq!(
            fw.apply(&mut s, t(1000), check(0)),
            Decision::allow(3, 3, Duration::ZERO)
        );
        assert_eq!(s.window_start(), t(0));
        assert_eq!(
            fw.apply(&mut s, t(1000), check(2)),
            Decision::allow(3, 1, ms(1000))
        );
        assert_eq!(
            fw.apply(&mut s, t(1500), check(2)),
            Decision::deny(3, 1, ms(500), Some(ms(500)))
        );
        assert_eq!(s.window_start(), t(1000));
        assert!(!fw.is_fresh(&s, t(1999)));

        // Long idle: nothing carries over.
        assert_eq!(
            fw.apply(&mut s, t(60_250), check(3)),
            Decision::allow(3, 0, ms(750))
        );
    }

    #[test]
    fn twice_the_limit_across_a_boundary() {
        let fw = FixedWindow::new(5, Duration::from_secs(1)).unwrap();
        let mut s = fw.fresh(Nanos::ZERO);
        let end = Nanos::from_secs(1);
        assert!(fw.apply(&mut s, Nanos(end.0 - 1), check(5)).allowed);
        assert!(fw.apply(&mut s, end, check(5)).allowed);
    }

    #[test]
    fn windows_are_aligned_to_the_epoch() {
        // 2024-01-01T00:00:30Z, a Monday.
        let now = Nanos::from_secs(1_704_067_230);
        let cases = [
            (Unit::Second, 1_704_067_230, 1),
            (Unit::Minute, 1_704_067_200, 30),
            (Unit::Hour, 1_704_067_200, 3_570),
            (Unit::Day, 1_704_067_200, 86_370),
            // The week started on Thursday 2023-12-28 and ends on Thursday 2024-01-04.
            (Unit::Week, 1_703_721_600, 3 * 86_400 - 30),
        ];
        for (unit, start, to_end) in cases {
            let fw = FixedWindow::per_unit(10, unit).unwrap();
            let mut s = fw.fresh(now);
            let d = fw.apply(&mut s, now, check(1));
            assert_eq!(s.window_start(), Nanos::from_secs(start), "{unit}");
            assert_eq!(d.reset_after, Duration::from_secs(to_end), "{unit}");
        }
    }

    #[test]
    fn clock_going_backwards_counts_in_the_current_window() {
        let fw = FixedWindow::new(2, Duration::from_secs(10)).unwrap();
        let mut s = fw.fresh(Nanos::from_secs(25));
        assert!(fw.apply(&mut s, Nanos::from_secs(25), check(2)).allowed);
        // 15 s is in an earlier window; it counts in the current one, which ends at 30 s.
        let d = fw.apply(&mut s, Nanos::from_secs(15), check(1));
        assert_eq!(
            d,
            Decision::deny(2, 0, Duration::from_secs(15), Some(Duration::from_secs(15)))
        );
        assert_eq!(s.window_start(), Nanos::from_secs(20));
        assert!(!fw.is_fresh(&fw.fresh(Nanos::from_secs(25)), Nanos::from_secs(15)));
    }

    #[test]
    fn unsupported_ops_probe_without_changing_state() {
        let fw = FixedWindow::new(2, Duration::from_secs(1)).unwrap();
        let mut s = fw.fresh(Nanos::ZERO);
        let d = fw.apply(&mut s, Nanos::ZERO, Op::Reserve { cost: 2 });
        assert_eq!(d, Decision::allow(2, 0, Duration::from_secs(1)));
        let d = fw.apply(&mut s, Nanos::ZERO, Op::SetRate { rate: 1.0 });
        assert_eq!(d, Decision::allow(2, 2, Duration::ZERO));
        assert_eq!(s, fw.fresh(Nanos::ZERO));
    }

    #[test]
    fn extremes_do_not_panic() {
        for (limit, window) in [
            (1, 1),
            (u64::MAX, u64::MAX),
            (u64::MAX, 1),
            (1, u64::MAX - 1),
        ] {
            let fw = FixedWindow::new(limit, Duration::from_nanos(window)).unwrap();
            let mut s = fw.fresh(Nanos(u64::MAX));
            for (t, c) in [
                (u64::MAX, u64::MAX),
                (0, 1),
                (u64::MAX, 1),
                (0, u64::MAX),
                (1, 0),
            ] {
                laws::assert_well_formed(&fw.apply(&mut s, Nanos(t), check(c)), false);
            }
        }
    }

    fn events(steps: &[i128], costs: &[u64]) -> Vec<(Nanos, Op)> {
        laws::timeline(3_000_000_000, steps)
            .into_iter()
            .zip(costs)
            .map(|(t, &c)| (t, check(c)))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Against a plain model: one counter per window index of the instant the algorithm
        /// sees (the latest instant of a state-changing operation so far, or of the probe).
        #[test]
        fn matches_a_counter_per_window(
            limit in 1u64..10,
            window in 1u64..2_000_000_000,
            steps in proptest::collection::vec(laws::step(300_000_000), 1..80),
            costs in proptest::collection::vec(0u64..12, 80),
        ) {
            let fw = FixedWindow::new(limit, Duration::from_nanos(window)).unwrap();
            let events = events(&steps, &costs);
            let start = Nanos(3_000_000_000);
            let mut s = fw.fresh(start);
            let mut counts: HashMap<u64, u64> = HashMap::new();
            for ((t, op), eff) in events.iter().zip(laws::effective(start, &events)) {
                // A probe does not move the state, but sees a later window if it is in one.
                let eff = eff.max(t.0);
                let n = cost(op);
                let counted = counts.entry(eff / window).or_default();
                let pass = *counted + n <= limit;
                let d = fw.apply(&mut s, *t, *op);
                prop_assert_eq!(d.allowed, pass);
                if pass {
                    *counted += n;
                }
                prop_assert_eq!(d.remaining, limit - *counted);
                let end = (eff / window + 1) * window;
                let to_end = Duration::from_nanos(end - t.0);
                prop_assert_eq!(d.retry_after, (!pass && n <= limit).then_some(to_end));
                prop_assert_eq!(d.reset_after, if *counted == 0 { Duration::ZERO } else { to_end });
            }
        }

        #[test]
        fn admits_at_most_limit_per_window_met(
            limit in 1u64..10,
            window in 1u64..2_000_000_000,
            steps in proptest::collection::vec(laws::step(300_000_000), 1..80),
            costs in proptest::collection::vec(0u64..12, 80),
        ) {
            let fw = FixedWindow::new(limit, Duration::from_nanos(window)).unwrap();
            let events = events(&steps, &costs);
            let start = Nanos(3_000_000_000);
            let decisions = laws::run(&fw, &mut fw.fresh(start), &events, false);
            let admitted = decisions.iter().zip(&events).zip(laws::effective(start, &events))
                .filter(|((d, _), _)| d.allowed)
                .map(|((_, e), t)| (t, cost(&e.1)))
                .collect();
            laws::assert_bound(admitted, |span| (limit * (span.div_ceil(window) + 1)) as f64);
        }

        #[test]
        fn is_fresh_is_sound(
            limit in 1u64..10,
            window in 1u64..2_000_000_000,
            steps in proptest::collection::vec(laws::step(300_000_000), 1..60),
            costs in proptest::collection::vec(0u64..12, 60),
        ) {
            let fw = FixedWindow::new(limit, Duration::from_nanos(window)).unwrap();
            laws::assert_fresh_is_sound(&fw, Nanos(3_000_000_000), &events(&steps, &costs));
        }

        #[test]
        fn no_input_panics(
            limit in prop_oneof![1u64..10, Just(u64::MAX), any::<u64>().prop_map(|l| l.max(1))],
            window in prop_oneof![1u64..10, Just(u64::MAX), any::<u64>().prop_map(|w| w.max(1))],
            events in proptest::collection::vec(
                (any::<u64>(), prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>(), 0u64..10], 0u8..4),
                1..40,
            ),
        ) {
            let fw = FixedWindow::new(limit, Duration::from_nanos(window)).unwrap();
            let mut s = fw.fresh(Nanos(events[0].0));
            for (t, c, kind) in events {
                let op = match kind {
                    0 => Op::Check { cost: c },
                    1 => Op::Reserve { cost: c },
                    2 => Op::TryAcquire { cost: c, timeout: Duration::MAX },
                    _ => Op::SetRate { rate: 0.0 },
                };
                laws::assert_well_formed(&fw.apply(&mut s, Nanos(t), op), false);
                prop_assert!(fw.count(&s, Nanos(t)) <= limit);
            }
        }
    }
}
