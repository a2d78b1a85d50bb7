//! The worker utilization load shedder's controller: how much traffic to shed, and from whom,
//! given a stream of utilization samples.
//!
//! Stripe's rule (DESIGN.md §3), with its constants as defaults: each sample `u` (busy workers /
//! workers, clamped to 0..=1) sets a derivative
//! - `u / end_of_good − 1` below `end_of_good` (0.7): recovering, faster the idler we are;
//! - `0` in the dead zone `end_of_good..start_of_bad` (0.7–0.8): hold;
//! - `(u − start_of_bad) / (1 − start_of_bad)` from `start_of_bad` (0.8) up: shed more;
//!
//! clamped to −1..=1 and divided by `seconds_to_shed_all` (120 s). The shed amount then moves by
//! `derivative × min(seconds since the previous sample, seconds_before_shedding)` and is clamped
//! to `[resting, 1]`, where `resting = −seconds_before_shedding / seconds_to_shed_all`
//! (−28/120 ≈ −0.233): from rest, 28 s of full overload pass before anything is shed, and
//! nothing ever changes faster than 1/120 of all traffic per second, so shedding and recovery
//! are gradual and do not flap.
//!
//! The controller starts at rest; the first sample only starts its clock; each later sample
//! applies its own derivative over the time since the previous sample (a clock that went
//! backwards counts as no time). Classes are shed in order, each over a third of the range,
//! with `s = max(shed_amount, 0)`: test mode `clamp(3s, 0, 1)`, GET `clamp(3s − 1, 0, 1)`,
//! POST `clamp(3s − 2, 0, 1)`, critical never.

use std::time::Duration;

use crate::{ConfigError, Nanos};

/// How important a request is to the load shedders, least important last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Priority {
    /// Must get through (creating charges, moving money): never shed.
    Critical,
    /// Writes: shed last of the sheddable classes.
    Post,
    /// Reads: shed after test mode.
    Get,
    /// Test-mode traffic: shed first.
    Test,
}

impl Priority {
    /// The name used in specs, traces and metrics: `critical`, `post`, `get`, `test`.
    pub fn name(self) -> &'static str {
        match self {
            Priority::Critical => "critical",
            Priority::Post => "post",
            Priority::Get => "get",
            Priority::Test => "test",
        }
    }

    /// Parses [`Priority::name`]'s output (case-insensitive).
    pub fn from_name(name: &str) -> Option<Priority> {
        [
            Priority::Critical,
            Priority::Post,
            Priority::Get,
            Priority::Test,
        ]
        .into_iter()
        .find(|p| p.name().eq_ignore_ascii_case(name))
    }
}

/// The controller's constants; [`Default`] gives Stripe's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ControllerSettings {
    /// Below this utilization the shed amount decreases (default 0.7).
    pub end_of_good: f64,
    /// From this utilization up the shed amount increases (default 0.8).
    pub start_of_bad: f64,
    /// Seconds of full overload, from rest, before anything is shed; also the longest gap
    /// between samples that counts (default 28).
    pub seconds_before_shedding: f64,
    /// Seconds of full overload to go from shedding nothing to shedding all (default 120).
    pub seconds_to_shed_all: f64,
}

impl Default for ControllerSettings {
    fn default() -> Self {
        ControllerSettings {
            end_of_good: 0.7,
            start_of_bad: 0.8,
            seconds_before_shedding: 28.0,
            seconds_to_shed_all: 120.0,
        }
    }
}

impl ControllerSettings {
    /// Checks `0 < end_of_good ≤ start_of_bad < 1` and positive finite durations.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(self.end_of_good > 0.0 && self.end_of_good < 1.0) {
            return Err(ConfigError::invalid(
                "end_of_good",
                self.end_of_good,
                "must be above 0 and below 1",
            ));
        }
        if !(self.start_of_bad >= self.end_of_good && self.start_of_bad < 1.0) {
            return Err(ConfigError::invalid(
                "start_of_bad",
                self.start_of_bad,
                "must be at least end_of_good and below 1",
            ));
        }
        for (field, value) in [
            ("seconds_before_shedding", self.seconds_before_shedding),
            ("seconds_to_shed_all", self.seconds_to_shed_all),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(ConfigError::invalid(
                    field,
                    value,
                    "must be a number of seconds above 0",
                ));
            }
        }
        Ok(())
    }

    /// The amount the controller rests at: `−seconds_before_shedding / seconds_to_shed_all`.
    pub fn resting_amount(&self) -> f64 {
        -self.seconds_before_shedding / self.seconds_to_shed_all
    }
}

/// The shed controller's state: a pure function of its samples (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct ShedController {
    settings: ControllerSettings,
    shed_amount: f64,
    last_sample: Option<Nanos>,
}

impl ShedController {
    /// A controller at rest.
    pub fn new(settings: ControllerSettings) -> Result<ShedController, ConfigError> {
        settings.validate()?;
        Ok(ShedController {
            shed_amount: settings.resting_amount(),
            settings,
            last_sample: None,
        })
    }

    /// The constants in use.
    pub fn settings(&self) -> &ControllerSettings {
        &self.settings
    }

    /// The derivative (shed amount per second) a utilization sample sets.
    pub fn derivative(&self, utilization: f64) -> f64 {
        let s = &self.settings;
        let u = clamp_utilization(utilization);
        let amount = if u < s.end_of_good {
            u / s.end_of_good - 1.0
        } else if u < s.start_of_bad {
            0.0
        } else {
            (u - s.start_of_bad) / (1.0 - s.start_of_bad)
        };
        amount.clamp(-1.0, 1.0) / s.seconds_to_shed_all
    }

    /// Takes a utilization sample at `now` and returns the new shed amount. Utilization is
    /// clamped to 0..=1; a NaN sample counts as 1 (a broken gauge must not hide overload).
    pub fn sample(&mut self, utilization: f64, now: Nanos) -> f64 {
        if let Some(last) = self.last_sample {
            let cap = Duration::from_secs_f64(self.settings.seconds_before_shedding);
            let elapsed = now.saturating_since(last).min(cap).as_secs_f64();
            let moved = self.shed_amount + self.derivative(utilization) * elapsed;
            self.shed_amount = moved.clamp(self.settings.resting_amount(), 1.0);
        }
        // Keep the latest instant seen, so that a clock going backwards adds no time later.
        self.last_sample = Some(self.last_sample.map_or(now, |last| last.max(now)));
        self.shed_amount
    }

    /// The current shed amount, in `[resting, 1]`.
    pub fn shed_amount(&self) -> f64 {
        self.shed_amount
    }

    /// The instant of the latest sample, if any.
    pub fn last_sample(&self) -> Option<Nanos> {
        self.last_sample
    }

    /// The probability that a request of `priority` is shed at the current amount.
    pub fn drop_probability(&self, priority: Priority) -> f64 {
        let s = self.shed_amount.max(0.0) * 3.0;
        let offset = match priority {
            Priority::Critical => return 0.0,
            Priority::Test => 0.0,
            Priority::Get => 1.0,
            Priority::Post => 2.0,
        };
        (s - offset).clamp(0.0, 1.0)
    }
}

fn clamp_utilization(u: f64) -> f64 {
    if u.is_nan() {
        1.0
    } else {
        u.clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at_rest() -> ShedController {
        ShedController::new(ControllerSettings::default()).unwrap()
    }

    /// Samples `u` once a second from `from` to `to` (inclusive) seconds.
    fn hold(c: &mut ShedController, u: f64, from: u64, to: u64) {
        for t in from..=to {
            c.sample(u, Nanos::from_secs(t));
        }
    }

    #[test]
    fn full_overload_sheds_nothing_for_28_s_then_test_then_get_then_post() {
        let mut c = at_rest();
        hold(&mut c, 1.0, 0, 28);
        assert!((c.shed_amount() - 0.0).abs() < 1e-12, "{}", c.shed_amount());
        assert_eq!(c.drop_probability(Priority::Test), 0.0);
        hold(&mut c, 1.0, 29, 48); // 20 s into shedding: test mode half shed
        assert!((c.drop_probability(Priority::Test) - 0.5).abs() < 1e-9);
        assert_eq!(c.drop_probability(Priority::Get), 0.0);
        hold(&mut c, 1.0, 49, 68); // 40 s: test mode fully shed
        assert!((c.drop_probability(Priority::Test) - 1.0).abs() < 1e-9);
        assert!(c.drop_probability(Priority::Get) < 1e-9);
        hold(&mut c, 1.0, 69, 108); // 80 s: GET fully shed
        assert!((c.drop_probability(Priority::Get) - 1.0).abs() < 1e-9);
        assert!(c.drop_probability(Priority::Post) < 1e-9);
        hold(&mut c, 1.0, 109, 147);
        assert!(c.drop_probability(Priority::Post) < 1.0);
        hold(&mut c, 1.0, 148, 148); // 148 s: everything but critical
        assert!((c.drop_probability(Priority::Post) - 1.0).abs() < 1e-9);
        assert_eq!(c.drop_probability(Priority::Critical), 0.0);
        hold(&mut c, 1.0, 149, 400);
        assert_eq!(c.shed_amount(), 1.0);
    }

    #[test]
    fn the_dead_zone_holds_and_recovery_is_gradual() {
        let mut c = at_rest();
        hold(&mut c, 1.0, 0, 88); // 60 s of shedding: amount 0.5
        let amount = c.shed_amount();
        assert!((amount - 0.5).abs() < 1e-9);
        hold(&mut c, 0.75, 89, 200);
        assert_eq!(c.shed_amount(), amount);
        // Idle workers (u = 0) recover at 1/120 per second: never at once.
        let mut previous = c.shed_amount();
        for t in 201..=300 {
            let now = c.sample(0.0, Nanos::from_secs(t));
            assert!(previous - now <= 1.0 / 120.0 + 1e-12);
            previous = now;
        }
        assert!((c.shed_amount() - c.settings().resting_amount()).abs() < 1e-9);
    }

    #[test]
    fn the_first_sample_only_starts_the_clock_and_long_gaps_count_28_s() {
        let mut c = at_rest();
        c.sample(1.0, Nanos::from_secs(1_000));
        assert_eq!(c.shed_amount(), c.settings().resting_amount());
        // A gap of an hour counts as 28 s.
        c.sample(1.0, Nanos::from_secs(4_600));
        assert!(c.shed_amount().abs() < 1e-12);
        // Backwards: no time passes.
        c.sample(1.0, Nanos::from_secs(10));
        assert!(c.shed_amount().abs() < 1e-12);
        c.sample(1.0, Nanos::from_secs(4_606));
        assert!((c.shed_amount() - 6.0 / 120.0).abs() < 1e-12);
    }

    #[test]
    fn derivative_follows_the_three_zones() {
        let c = at_rest();
        assert!((c.derivative(0.35) - (-0.5 / 120.0)).abs() < 1e-15);
        assert_eq!(c.derivative(0.7), 0.0);
        assert_eq!(c.derivative(0.79), 0.0);
        assert!((c.derivative(0.9) - 0.5 / 120.0).abs() < 1e-15);
        assert_eq!(c.derivative(7.0), 1.0 / 120.0);
        assert_eq!(c.derivative(f64::NAN), 1.0 / 120.0);
    }

    #[test]
    fn invalid_settings_name_the_field() {
        let bad = ControllerSettings {
            start_of_bad: 0.5,
            ..Default::default()
        };
        assert!(ShedController::new(bad)
            .unwrap_err()
            .to_string()
            .contains("start_of_bad"));
        let bad = ControllerSettings {
            seconds_to_shed_all: 0.0,
            ..Default::default()
        };
        assert!(ShedController::new(bad)
            .unwrap_err()
            .to_string()
            .contains("seconds_to_shed_all"));
    }

    proptest! {
        #[test]
        fn critical_is_never_shed_and_the_amount_stays_in_range(
            samples in proptest::collection::vec((0.0f64..1.5, 0u64..60_000), 1..200)
        ) {
            let mut c = at_rest();
            let mut t = 0u64;
            for (u, step_ms) in samples {
                t += step_ms;
                let before = c.shed_amount();
                let after = c.sample(u, Nanos::from_millis(t));
                prop_assert_eq!(c.drop_probability(Priority::Critical), 0.0);
                prop_assert!(after >= c.settings().resting_amount() - 1e-12 && after <= 1.0);
                // Never faster than 1/120 per second, over at most 28 s.
                prop_assert!((after - before).abs() <= 28.0 / 120.0 + 1e-9);
                let (p_test, p_get, p_post) = (
                    c.drop_probability(Priority::Test),
                    c.drop_probability(Priority::Get),
                    c.drop_probability(Priority::Post),
                );
                prop_assert!(p_test >= p_get && p_get >= p_post);
            }
        }
    }
}
