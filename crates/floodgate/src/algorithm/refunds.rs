//! [`Op::Refund`] across the algorithms that take it (fixed window, token and leaky buckets,
//! GCRA, the sliding window counter in both modes), written once for all of them through [`AnyAlgorithm`]: a refund never refuses and
//! never takes anything; what it gives back is at most what still counts (never past empty,
//! never past full); a check of `c` followed at once by a refund of `c` leaves a key that
//! answers every later check as if neither had happened; and with refunds, what a key admits
//! in one window is at most its limit plus what was refunded in that window. The sliding log
//! refuses refunds. Test-only.

use std::time::Duration;

use proptest::prelude::*;

use super::fixed_window::FixedWindow;
use super::gcra::Gcra;
use super::laws::{assert_well_formed, step, timeline};
use super::leaky_bucket::LeakyBucket;
use super::sliding_log::SlidingLog;
use super::sliding_window::SlidingWindow;
use super::spec::AnyAlgorithm;
use super::token_bucket::TokenBucket;
use super::Algorithm;
use crate::{Nanos, Op, OpKind};

/// One of each refundable algorithm, of a small limit.
fn refundable(limit: u64) -> Vec<AnyAlgorithm> {
    vec![
        FixedWindow::new(limit, Duration::from_secs(1))
            .unwrap()
            .into(),
        TokenBucket::new(limit as f64, limit).unwrap().into(),
        LeakyBucket::new(limit as f64, limit).unwrap().into(),
        Gcra::new(limit - 1, limit, Duration::from_secs(1))
            .unwrap()
            .into(),
        SlidingWindow::new(limit, Duration::from_secs(1), None)
            .unwrap()
            .into(),
        SlidingWindow::new(limit, Duration::from_secs(1), Some(4))
            .unwrap()
            .into(),
    ]
}

#[test]
fn the_algorithms_that_can_give_back_say_so_and_the_sliding_log_does_not() {
    for algorithm in refundable(5) {
        assert!(algorithm.supports(OpKind::Refund), "{}", algorithm.name());
    }
    let log: AnyAlgorithm = SlidingLog::new(5, Duration::from_secs(1)).unwrap().into();
    assert!(!log.supports(OpKind::Refund));
}

#[test]
fn a_refund_gives_back_what_was_taken_and_no_more() {
    for algorithm in refundable(5) {
        let now = Nanos::from_secs(100);
        let mut state = algorithm.fresh(now);
        assert!(
            algorithm
                .apply(&mut state, now, Op::Check { cost: 5 })
                .allowed
        );
        assert!(
            !algorithm
                .apply(&mut state, now, Op::Check { cost: 1 })
                .allowed
        );
        let d = algorithm.apply(&mut state, now, Op::Refund { cost: 2 });
        assert!(d.allowed, "{}", algorithm.name());
        assert_eq!(d.remaining, 2, "{}", algorithm.name());
        // A refund larger than what is taken empties the key, and no more.
        let d = algorithm.apply(&mut state, now, Op::Refund { cost: 1_000 });
        assert_eq!(d.remaining, 5, "{}", algorithm.name());
        assert!(
            algorithm
                .apply(&mut state, now, Op::Check { cost: 5 })
                .allowed
        );
        assert!(
            !algorithm
                .apply(&mut state, now, Op::Check { cost: 1 })
                .allowed
        );
    }
}

#[test]
fn a_fixed_window_refund_after_the_window_gives_nothing_back() {
    let fw = FixedWindow::new(5, Duration::from_secs(1)).unwrap();
    let mut state = fw.fresh(Nanos::ZERO);
    assert!(
        fw.apply(&mut state, Nanos::from_millis(900), Op::Check { cost: 5 })
            .allowed
    );
    // In the next window: nothing of the last one counts, so nothing comes back to spend.
    let later = Nanos::from_millis(1_100);
    let d = fw.apply(&mut state, later, Op::Refund { cost: 5 });
    assert_eq!(d.remaining, 5);
    assert!(fw.apply(&mut state, later, Op::Check { cost: 5 }).allowed);
    assert!(!fw.apply(&mut state, later, Op::Check { cost: 1 }).allowed);
}

/// An operation of a random sequence: a check or a refund of a small cost.
fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..=4).prop_map(|cost| Op::Check { cost }),
        1 => (0u64..=4).prop_map(|cost| Op::Refund { cost }),
    ]
}

proptest! {
    #[test]
    fn refunds_never_refuse_and_never_go_past_empty(
        ops in prop::collection::vec(op(), 1..60),
        steps in prop::collection::vec(step(200_000_000), 60),
    ) {
        for algorithm in refundable(4) {
            let times = timeline(10_000_000_000, &steps);
            let mut state = algorithm.fresh(times[0]);
            for (op, now) in ops.iter().zip(&times) {
                let d = algorithm.apply(&mut state, *now, *op);
                assert_well_formed(&d, false);
                prop_assert!(d.remaining <= d.limit, "{}: {d:?}", algorithm.name());
                if let Op::Refund { .. } = op {
                    prop_assert!(d.allowed, "{}: a refund refused", algorithm.name());
                }
            }
        }
    }

    #[test]
    fn a_check_refunded_at_once_leaves_no_trace(
        before in prop::collection::vec(op(), 0..20),
        cost in 1u64..=4,
        after in prop::collection::vec((0u64..=4, 0u64..=300_000_000), 1..20),
    ) {
        for algorithm in refundable(4) {
            let start = Nanos::from_secs(10);
            let mut state = algorithm.fresh(start);
            for op in &before {
                let _ = algorithm.apply(&mut state, start, *op);
            }
            let mut untouched = state.clone();
            let mut refunded = state.clone();
            let taken = algorithm.apply(&mut refunded, start, Op::Check { cost });
            if !taken.allowed {
                continue;
            }
            let _ = algorithm.apply(&mut refunded, start, Op::Refund { cost });
            let mut now = start;
            for (c, dt) in &after {
                now = Nanos(now.0 + dt);
                let a = algorithm.apply(&mut untouched, now, Op::Check { cost: *c });
                let b = algorithm.apply(&mut refunded, now, Op::Check { cost: *c });
                prop_assert_eq!(a.allowed, b.allowed, "{}", algorithm.name());
                prop_assert_eq!(a.remaining, b.remaining, "{}", algorithm.name());
            }
        }
    }

    #[test]
    fn a_fixed_window_admits_its_limit_plus_what_was_refunded(
        ops in prop::collection::vec(op(), 1..80),
        steps in prop::collection::vec(0u64..=100_000_000, 80),
    ) {
        let limit = 6;
        let fw = FixedWindow::new(limit, Duration::from_secs(1)).unwrap();
        let mut now = Nanos::from_secs(10);
        let mut state = fw.fresh(now);
        // Per window: admitted and refunded.
        let mut windows = std::collections::BTreeMap::<u64, (u64, u64)>::new();
        for (op, dt) in ops.iter().zip(&steps) {
            now = Nanos(now.0 + dt);
            let d = fw.apply(&mut state, now, *op);
            let entry = windows.entry(now.0 / 1_000_000_000).or_default();
            match op {
                Op::Check { cost } if d.allowed => entry.0 += cost,
                Op::Refund { cost } => entry.1 += cost,
                _ => {}
            }
        }
        for (window, (admitted, refunded)) in windows {
            prop_assert!(admitted <= limit + refunded, "window {window}: {admitted} > {limit} + {refunded}");
        }
    }
}
