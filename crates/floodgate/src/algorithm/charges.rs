//! [`Op::Charge`] across the algorithms that take it (fixed window, token and leaky buckets,
//! GCRA), written once for all of them through [`AnyAlgorithm`]: a charge always counts, past
//! the limit if need be; a key charged past its limit refuses every check, one of cost 0
//! included, until its `retry_after`, and a check of cost 0 passes exactly then; a charge's
//! `allowed` is what a check of cost 0 would answer right after it. The sliding log refuses
//! charges. Test-only.

use std::time::Duration;

use proptest::prelude::*;

use super::fixed_window::FixedWindow;
use super::gcra::Gcra;
use super::laws::assert_well_formed;
use super::leaky_bucket::LeakyBucket;
use super::sliding_log::SlidingLog;
use super::spec::AnyAlgorithm;
use super::token_bucket::TokenBucket;
use super::Algorithm;
use crate::{Nanos, Op, OpKind};

/// One of each algorithm that takes charges, each admitting `limit` at once and `limit` per
/// second: a 1 s fixed window, buckets of rate `limit` and capacity `limit`, GCRA of burst
/// `limit`.
fn chargeable(limit: u64) -> Vec<AnyAlgorithm> {
    vec![
        FixedWindow::new(limit, Duration::from_secs(1))
            .unwrap()
            .into(),
        TokenBucket::new(limit as f64, limit).unwrap().into(),
        LeakyBucket::new(limit as f64, limit).unwrap().into(),
        Gcra::new(limit - 1, limit, Duration::from_secs(1))
            .unwrap()
            .into(),
    ]
}

fn probe(algorithm: &AnyAlgorithm, state: &AnyState, now: Nanos) -> crate::Decision {
    algorithm.apply(&mut state.clone(), now, Op::Check { cost: 0 })
}

type AnyState = <AnyAlgorithm as Algorithm>::State;

#[test]
fn the_algorithms_that_give_back_also_charge_and_the_sliding_log_does_neither() {
    for algorithm in chargeable(5) {
        assert!(algorithm.supports(OpKind::Charge), "{}", algorithm.name());
    }
    let log: AnyAlgorithm = SlidingLog::new(5, Duration::from_secs(1)).unwrap().into();
    assert!(!log.supports(OpKind::Charge));
}

#[test]
fn a_charge_past_the_limit_counts_in_full_and_refuses_until_paid_back() {
    // Each algorithm: 5 at once, 5 per second. A charge of 8 on a fresh key is 3 past the
    // limit: 0.6 s of refill for the buckets and GCRA, the rest of the window (the window starts
    // at 100 s) for the fixed window.
    for algorithm in chargeable(5) {
        let name = algorithm.name();
        let now = Nanos::from_secs(100);
        let mut state = algorithm.fresh(now);
        let d = algorithm.apply(&mut state, now, Op::Charge { cost: 8 });
        assert!(!d.allowed, "{name}: {d:?}");
        assert_eq!(d.remaining, 0, "{name}");
        let wait = match name {
            "fixed_window" => Duration::from_secs(1),
            _ => Duration::from_millis(600),
        };
        assert_eq!(d.retry_after, Some(wait), "{name}");
        for cost in [0, 1, 5] {
            let refused = algorithm.apply(&mut state, now, Op::Check { cost });
            assert!(!refused.allowed, "{name}: a check of {cost} passed in debt");
        }
        let just_before = Nanos(now.0 + wait.as_nanos() as u64 - 1);
        assert!(!probe(&algorithm, &state, just_before).allowed, "{name}");
        let then = Nanos(now.0 + wait.as_nanos() as u64);
        assert!(probe(&algorithm, &state, then).allowed, "{name}");
    }
}

#[test]
fn a_charge_within_the_limit_is_allowed_and_takes_what_a_check_would() {
    for algorithm in chargeable(5) {
        let now = Nanos::from_secs(100);
        let mut charged = algorithm.fresh(now);
        let mut checked = algorithm.fresh(now);
        let a = algorithm.apply(&mut charged, now, Op::Charge { cost: 3 });
        let b = algorithm.apply(&mut checked, now, Op::Check { cost: 3 });
        assert_eq!(a, b, "{}", algorithm.name());
        // The same state: every later check answers alike.
        for cost in 0..=5 {
            let later = Nanos(now.0 + 150_000_000);
            assert_eq!(
                algorithm.apply(&mut charged.clone(), later, Op::Check { cost }),
                algorithm.apply(&mut checked.clone(), later, Op::Check { cost }),
                "{}",
                algorithm.name()
            );
        }
    }
}

#[test]
fn a_refund_pays_back_a_charge_past_the_limit() {
    for algorithm in chargeable(5) {
        let now = Nanos::from_secs(100);
        let mut state = algorithm.fresh(now);
        let _ = algorithm.apply(&mut state, now, Op::Charge { cost: 9 });
        let d = algorithm.apply(&mut state, now, Op::Refund { cost: 4 });
        assert!(d.allowed);
        assert_eq!(d.remaining, 0, "{}: exactly at the limit", algorithm.name());
        assert!(
            probe(&algorithm, &state, now).allowed,
            "{}",
            algorithm.name()
        );
        let one = algorithm.apply(&mut state, now, Op::Check { cost: 1 });
        assert!(!one.allowed, "{}", algorithm.name());
    }
}

/// An operation of a random sequence: a check, a refund or a charge, the charges sometimes far
/// past the limit.
fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..=4).prop_map(|cost| Op::Check { cost }),
        1 => (0u64..=4).prop_map(|cost| Op::Refund { cost }),
        2 => prop_oneof![0u64..=4, 0u64..=40].prop_map(|cost| Op::Charge { cost }),
    ]
}

proptest! {
    #[test]
    fn a_charge_says_what_a_probe_after_it_says_and_debt_refuses_until_its_retry(
        ops in prop::collection::vec((op(), 0u64..=300_000_000), 1..60),
    ) {
        for algorithm in chargeable(4) {
            let name = algorithm.name();
            let mut now = Nanos::from_secs(10);
            let mut state = algorithm.fresh(now);
            for (op, dt) in &ops {
                now = Nanos(now.0 + dt);
                let d = algorithm.apply(&mut state, now, *op);
                assert_well_formed(&d, false);
                let after = probe(&algorithm, &state, now);
                if let Op::Charge { .. } = op {
                    prop_assert_eq!(d.allowed, after.allowed, "{}: {:?}", name, d);
                    prop_assert_eq!(d.remaining, after.remaining, "{}", name);
                }
                if let Some(retry) = after.retry_after.filter(|_| !after.allowed) {
                    // Refused up to its retry instant, by checks of every cost; a probe passes
                    // exactly then (the buckets: to within a nanosecond either way, as their
                    // refill from an older update is summed in two f64 steps).
                    let slack = u64::from(name.ends_with("bucket"));
                    let retry = retry.as_nanos() as u64;
                    let before = Nanos(now.0 + retry - 1 - slack);
                    prop_assert!(!probe(&algorithm, &state, before).allowed, "{}", name);
                    let one = algorithm.apply(&mut state.clone(), before, Op::Check { cost: 1 });
                    prop_assert!(!one.allowed, "{}", name);
                    let then = Nanos(now.0 + retry + slack);
                    prop_assert!(probe(&algorithm, &state, then).allowed, "{}", name);
                }
            }
        }
    }

    #[test]
    fn a_fixed_window_counts_every_charge(
        ops in prop::collection::vec(op(), 1..80),
    ) {
        // One window: the count is what the checks admitted and the charges added, less the
        // refunds (never below 0).
        let fw = FixedWindow::new(6, Duration::from_secs(1)).unwrap();
        let now = Nanos::from_secs(10);
        let mut state = fw.fresh(now);
        let mut model = 0u64;
        for op in &ops {
            let d = fw.apply(&mut state, now, *op);
            match *op {
                Op::Check { cost } if d.allowed => model += cost,
                Op::Charge { cost } => model += cost,
                Op::Refund { cost } => model = model.saturating_sub(cost),
                _ => {}
            }
            prop_assert_eq!(fw.count(&state, now), model);
        }
    }
}
