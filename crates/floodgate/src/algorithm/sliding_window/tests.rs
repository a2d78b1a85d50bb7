use super::*;
use crate::algorithm::laws;
use crate::algorithm::laws::{check, ns};
use crate::OpKind;
use proptest::prelude::*;

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

const SEC: u64 = 1_000_000_000;

/// The bucket starts `s(j)` of the module documentation, straight from the formula.
fn s_of(window: u64, n: u64, j: u64) -> u128 {
    let (w, n, j) = (u128::from(window), u128::from(n), u128::from(j));
    j / n * w + j % n * w / n
}

/// The bucket holding `t`, found by walking the starts from the window's first bucket.
fn bucket_of(window: u64, n: u64, t: u64) -> u64 {
    let mut j = t / window * n;
    while s_of(window, n, j + 1) <= u128::from(t) {
        j += 1;
    }
    j
}

fn grid_of(sw: &SlidingWindow) -> Grid {
    match sw.mode {
        Mode::Buckets { grid, .. } => grid,
        Mode::Weighted { .. } => unreachable!(),
    }
}

/// The grid agrees with the documented starts, in every window, at both ends of each bucket.
#[test]
fn bucket_starts_follow_the_rule() {
    let cases = [
        (SEC, 3, &[0, 333_333_333, 666_666_666][..]),
        (
            SEC,
            6,
            &[
                0,
                166_666_666,
                333_333_333,
                500_000_000,
                666_666_666,
                833_333_333,
            ][..],
        ),
        (
            SEC,
            7,
            &[
                0,
                142_857_142,
                285_714_285,
                428_571_428,
                571_428_571,
                714_285_714,
                857_142_857,
            ][..],
        ),
        (
            10_000_000,
            7,
            &[
                0, 1_428_571, 2_857_142, 4_285_714, 5_714_285, 7_142_857, 8_571_428,
            ][..],
        ),
        (100, 4, &[0, 25, 50, 75][..]),
    ];
    for (w, n, starts) in cases {
        let grid = grid_of(&bucketed(1, w, n as u32));
        for k in [0u64, 1, 5, 1_000_000] {
            for (i, &into) in starts.iter().enumerate() {
                let j = k * n + i as u64;
                let at = k * w + into;
                assert_eq!(grid.start(j), u128::from(at), "s({j}) for W={w} N={n}");
                assert_eq!(grid.index(at), j);
                assert_eq!(grid.index(at - u64::from(at > 0)), j - u64::from(j > 0));
                assert_eq!(grid.after(at, n + 1), grid.start(j + n + 1));
            }
        }
    }
}

/// limit 3, 1 s in 3 buckets starting 0, 333 333 333 and 666 666 666 ns into each second.
#[test]
fn three_buckets_per_second() {
    let sw = bucketed(3, SEC, 3);
    assert_eq!(sw.bucket_width(), Some(ns(333_333_333)));
    let mut s = sw.fresh(Nanos(0));
    let mut at = |t: u64, cost: u64| sw.apply(&mut s, Nanos(t), check(cost));
    // Last ns of bucket 15 = [5 s, 5.333333333 s): counts until s(19) = 6.333333333 s.
    let d = at(5_333_333_332, 1);
    assert!(d.allowed);
    assert_eq!((d.remaining, d.reset_after), (2, ns(1_000_000_001)));
    // First ns of bucket 16: until s(20) = 6.666666666 s.
    let d = at(5_333_333_333, 1);
    assert!(d.allowed);
    assert_eq!((d.remaining, d.reset_after), (1, ns(1_333_333_333)));
    // Last ns of the wide bucket 17 = [5.666666666 s, 6 s): until s(21) = 7 s.
    let d = at(5_999_999_999, 1);
    assert!(d.allowed);
    assert_eq!((d.remaining, d.reset_after), (0, ns(1_000_000_001)));
    // Bucket 18 counts 15..=18: full; bucket 15 drops 1 ns later.
    let d = at(6_333_333_332, 1);
    assert!(!d.allowed);
    assert_eq!(
        (d.remaining, d.reset_after, d.retry_after),
        (0, ns(666_666_668), Some(ns(1)))
    );
    // Bucket 19 counts 16..=19.
    let d = at(6_333_333_333, 1);
    assert!(d.allowed);
    assert_eq!((d.remaining, d.reset_after), (0, ns(1_333_333_333)));
    // Two more need buckets 16 and 17 gone: at s(21) = 7 s.
    let d = at(6_333_333_333, 2);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(ns(666_666_667)));
    assert!(!at(6_999_999_999, 2).allowed);
    assert!(at(7_000_000_000, 2).allowed);
}

/// limit 2, 1 s in 6 buckets: widths 166 666 666 or 166 666 667 ns.
#[test]
fn six_buckets_per_second() {
    let sw = bucketed(2, SEC, 6);
    assert_eq!(sw.bucket_width(), Some(ns(166_666_666)));
    let mut s = sw.fresh(Nanos(0));
    let mut at = |t: u64, cost: u64| sw.apply(&mut s, Nanos(t), check(cost));
    // Last ns of bucket 0: counts until s(7) = 1.166666666 s.
    let d = at(166_666_665, 2);
    assert!(d.allowed);
    assert_eq!((d.remaining, d.reset_after), (0, ns(1_000_000_001)));
    let d = at(500_000_000, 0);
    assert_eq!((d.remaining, d.reset_after), (0, ns(666_666_666)));
    // Bucket 6 = [1 s, 1.166666666 s) still counts bucket 0.
    let d = at(1_166_666_665, 1);
    assert!(!d.allowed);
    assert_eq!((d.remaining, d.retry_after), (0, Some(ns(1))));
    // Bucket 7 does not; the admission counts until s(14) = 2.333333333 s.
    let d = at(1_166_666_666, 1);
    assert!(d.allowed);
    assert_eq!((d.remaining, d.reset_after), (1, ns(1_166_666_667)));
    assert!(sw.is_fresh(&s, Nanos(2_333_333_333)));
    assert!(!sw.is_fresh(&s, Nanos(2_333_333_332)));
}

/// limit 7, 1 s in 7 buckets: the first 142 857 142 ns wide, the other six 142 857 143.
#[test]
fn seven_buckets_per_second() {
    let sw = bucketed(7, SEC, 7);
    assert_eq!(sw.bucket_width(), Some(ns(142_857_142)));
    let starts = [
        0,
        142_857_142,
        285_714_285,
        428_571_428,
        571_428_571,
        714_285_714,
        857_142_857,
        SEC,
        SEC + 142_857_142,
        SEC + 285_714_285,
    ];
    let mut s = sw.fresh(Nanos(0));
    let mut at = |t: u64, cost: u64| sw.apply(&mut s, Nanos(t), check(cost));
    // One at the first ns of each bucket of the first second; each counts until s(i + 8).
    for i in 0..7 {
        let d = at(starts[i], 1);
        assert!(d.allowed);
        assert_eq!(d.remaining, 6 - i as u64);
        assert_eq!(d.reset_after, ns(starts[i + 1] + SEC - starts[i]));
    }
    // The last ns of bucket 6 counts 0..=6: full. Bucket 0 drops at s(8).
    let d = at(999_999_999, 1);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(ns(142_857_143)));
    // Three need buckets 0, 1 and 2 gone: s(10) = 1 s + s(3).
    let d = at(SEC, 3);
    assert_eq!(d.retry_after, Some(ns(428_571_428)));
    let d = at(starts[8] - 1, 1);
    assert_eq!((d.allowed, d.retry_after), (false, Some(ns(1))));
    let d = at(starts[8], 1);
    assert!(d.allowed);
    // Counts until s(16) = 2 s + s(2).
    assert_eq!(
        (d.remaining, d.reset_after),
        (0, ns(2 * SEC + 285_714_285 - starts[8]))
    );
    let d = at(starts[9], 0);
    assert_eq!(d.remaining, 1);
}

/// limit 10, 10 ms in 7 buckets: widths 1 428 571 or 1 428 572 ns.
#[test]
fn seven_buckets_per_ten_milliseconds() {
    let sw = bucketed(10, 10_000_000, 7);
    assert_eq!(sw.bucket_width(), Some(ns(1_428_571)));
    let mut s = sw.fresh(Nanos(0));
    let mut at = |t: u64, cost: u64| sw.apply(&mut s, Nanos(t), check(cost));
    // Last ns of bucket 2 = [2 857 142, 4 285 714): until s(10) = 14 285 714.
    let d = at(4_285_713, 4);
    assert!(d.allowed);
    assert_eq!((d.remaining, d.reset_after), (6, ns(10_000_001)));
    // First ns of bucket 3: until s(11) = 15 714 285.
    let d = at(4_285_714, 6);
    assert!(d.allowed);
    assert_eq!((d.remaining, d.reset_after), (0, ns(11_428_571)));
    // Last ns of bucket 9 counts 2..=9.
    let d = at(14_285_713, 1);
    assert!(!d.allowed);
    assert_eq!(
        (d.remaining, d.reset_after, d.retry_after),
        (0, ns(1_428_572), Some(ns(1)))
    );
    // Five need bucket 3 gone too: s(11).
    let d = at(14_285_713, 5);
    assert_eq!(d.retry_after, Some(ns(1_428_572)));
    // Bucket 10: 6 still count; until s(18) = 25 714 285.
    let d = at(14_285_714, 4);
    assert!(d.allowed);
    assert_eq!((d.remaining, d.reset_after), (0, ns(11_428_571)));
    let d = at(15_714_284, 0);
    assert_eq!(d.remaining, 0);
    let d = at(15_714_285, 0);
    assert_eq!((d.remaining, d.reset_after), (6, ns(10_000_000)));
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
    // Fewer nanoseconds than buckets: a bucket would be empty.
    assert_eq!(field(SlidingWindow::new(1, ns(5), Some(10))), "buckets");
    assert_eq!(field(SlidingWindow::new(1, ns(6), Some(7))), "buckets");
    let e = SlidingWindow::new(1, ns(6), Some(7))
        .unwrap_err()
        .to_string();
    assert!(e.contains("buckets") && e.contains('7'), "{e}");
    // Buckets that do not divide the window are fine.
    let sw = SlidingWindow::new(1, minute, Some(7)).unwrap();
    assert_eq!(sw.bucket_width(), Some(ns(8_571_428_571)));
    assert_eq!(bucketed(1, 7, 7).bucket_width(), Some(ns(1)));
    let hour = Duration::from_secs(3600);
    let sw = SlidingWindow::new(3, hour, Some(3600)).unwrap();
    assert_eq!(sw.bucket_width(), Some(Duration::from_secs(1)));
    assert_eq!(
        (sw.limit(), sw.window(), sw.buckets()),
        (3, hour, Some(3600))
    );
    // 16 666 666.67 ns: now accepted.
    let sw = SlidingWindow::new(1, minute, Some(3600)).unwrap();
    assert_eq!(sw.bucket_width(), Some(ns(16_666_666)));
    assert!(SlidingWindow::new(1, minute, Some(60)).is_ok());
    let sw = SlidingWindow::new(3, ns(1), Some(1)).unwrap();
    assert_eq!(sw.bucket_width(), Some(ns(1)));
    assert_eq!(weighted(1, 5).bucket_width(), None);
}

#[test]
fn unsupported_ops_are_probes_and_foreign_states_are_fresh() {
    for sw in [weighted(3, 10), bucketed(3, 10, 2)] {
        let mut s = sw.fresh(Nanos(0));
        let _ = sw.apply(&mut s, Nanos(5), check(2));
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
        let _ = sw.apply(&mut s, Nanos(t * 37), check(1 + t % 3));
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
        // Not dividing: the u128 fallbacks of the bucket arithmetic.
        SlidingWindow::new(u64::MAX, ns(u64::MAX), Some(3600)).unwrap(),
        SlidingWindow::new(u64::MAX, ns(u64::MAX), Some(7)).unwrap(),
        SlidingWindow::new(u64::MAX, ns(3601), Some(3600)).unwrap(),
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

    /// Sub-buckets: any closed interval of length W holds at most L, whether N divides W or
    /// not.
    #[test]
    fn bucket_bound(
        limit in 1u64..8,
        n in 1u32..8,
        width in 1u64..8,
        extra in 0u64..8,
        steps in prop::collection::vec((0u64..12, 0u64..9), 1..150),
    ) {
        let window = width * u64::from(n) + extra % u64::from(n);
        let sw = bucketed(limit, window, n);
        let admitted = run(&sw, &steps);
        let most = max_in_closed_windows(&admitted, window);
        prop_assert!(most <= limit, "{} > {}", most, limit);
    }

    /// retry_after and reset_after are exact in both modes, whether N divides W or not.
    #[test]
    fn retry_and_reset_are_exact(
        limit in 1u64..8,
        n in prop_oneof![Just(None), (1u32..8).prop_map(Some)],
        width in 1u64..8,
        extra in 0u64..8,
        steps in prop::collection::vec((0u64..12, 1u64..9), 1..60),
    ) {
        let n3 = u64::from(n.unwrap_or(3));
        let window = width * n3 + extra % n3;
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
        n in prop_oneof![Just(None), (1u32..8).prop_map(Some)],
        width in 1u64..8,
        extra in 0u64..8,
        before in prop::collection::vec((0u64..12, 0u64..7), 0..40),
        after in prop::collection::vec((0u64..12, 0u64..7), 1..40),
    ) {
        let n3 = u64::from(n.unwrap_or(3));
        let window = width * n3 + extra % n3;
        let sw = SlidingWindow::new(limit, ns(window), n).unwrap();
        let ops = |v: Vec<(u64, u64)>| v.into_iter().map(|(dt, c)| (dt, check(c))).collect::<Vec<_>>();
        laws::assert_fresh_after_idle(&sw, &ops(before), &ops(after), 1);
    }

    /// No input panics: extreme parameters, costs and instants, backwards included.
    #[test]
    fn never_panics(
        limit in prop_oneof![Just(1u64), Just(u64::MAX), any::<u64>(), 1u64..10],
        window in prop_oneof![Just(1u64), Just(u64::MAX), any::<u64>(), 1u64..100],
        n in prop_oneof![
            Just(None),
            Just(Some(1u32)),
            Just(Some(3600)),
            (1u32..10).prop_map(Some),
            (1u32..=3600).prop_map(Some),
        ],
        ops in prop::collection::vec(
            (prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>(), 0u64..1000],
             prop_oneof![Just(0u64), Just(1u64), Just(u64::MAX), any::<u64>()]),
            1..40,
        ),
    ) {
        // Dividing or not; only windows shorter than N ns are refused.
        let window = match n {
            Some(n) => window.max(u64::from(n)),
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

    /// Sub-buckets against a direct model of the documented rule (every admission kept with
    /// its bucket `J(t)`, found by walking the starts `s(j)`): the same decisions, whether
    /// N divides W or not, so dividing counts keep their former behaviour.
    #[test]
    fn buckets_match_the_model(
        limit in 1u64..10,
        n in 1u32..10,
        window in 1u64..60,
        steps in prop::collection::vec((0u64..25, 0u64..6), 1..120),
    ) {
        let (n64, window) = (u64::from(n), window.max(u64::from(n)));
        let sw = bucketed(limit, window, n);
        let grid = grid_of(&sw);
        let mut s = sw.fresh(Nanos(0));
        let mut kept: Vec<(u64, u64)> = Vec::new();
        let mut now = 0u64;
        for (dt, cost) in steps {
            now += dt;
            let j = bucket_of(window, n64, now);
            prop_assert_eq!(grid.index(now), j);
            prop_assert_eq!(grid.start(j), s_of(window, n64, j));
            let counted: u64 = kept.iter().filter(|k| k.0 + n64 >= j).map(|k| k.1).sum();
            let pass = counted + cost <= limit;
            if pass && cost > 0 {
                kept.push((j, cost));
            }
            let live = counted + if pass { cost } else { 0 };
            let d = sw.apply(&mut s, Nanos(now), check(cost));
            prop_assert_eq!(d.allowed, pass, "t={} cost={}", now, cost);
            prop_assert_eq!(d.remaining, limit - live.min(limit));
            let newest = kept.iter().filter(|k| k.0 + n64 >= j).map(|k| k.0).max();
            let reset = newest.map_or(0, |h| s_of(window, n64, h + n64 + 1) - u128::from(now));
            prop_assert_eq!(u128::from(d.reset_after.as_nanos() as u64), reset);
        }
    }

    /// The shared laws over timelines that also step backwards: well-formed decisions, at
    /// most `L` per closed interval of length `W` (so `L·⌈span/W⌉` over longer ones) at the
    /// effective instants, and sound `is_fresh`; N dividing W or not.
    #[test]
    fn bucket_laws(
        limit in 1u64..8,
        n in 1u32..8,
        window in 1u64..100,
        steps in prop::collection::vec(laws::step(20), 1..100),
        costs in prop::collection::vec(0u64..5, 100),
    ) {
        let window = window.max(u64::from(n));
        let sw = bucketed(limit, window, n);
        let start = Nanos(1_000);
        let times = laws::timeline(start.0, &steps);
        let events: Vec<_> = times.iter().zip(&costs).map(|(&t, &c)| (t, check(c))).collect();
        let decisions = laws::run(&sw, &mut sw.fresh(start), &events, false);
        // Here only admissions move a state's time on (denials consume nothing), so the
        // effective instant is the running maximum over admissions, not `laws::effective`.
        let mut latest = 0u64;
        let admitted = decisions.iter().zip(&events)
            .filter(|(d, e)| d.allowed && laws::cost(&e.1) > 0)
            .map(|(_, e)| {
                latest = latest.max(e.0 .0);
                (latest, laws::cost(&e.1))
            })
            .collect();
        laws::assert_bound(admitted, |span| (limit * span.div_ceil(window).max(1)) as f64);
        laws::assert_fresh_is_sound(&sw, start, &events);
    }

    /// The grid at any size: `J(s(j)) = j`, `J(s(j) − 1) = j − 1`, `s(j + N) = s(j) + W`,
    /// widths `⌊W/N⌋` or `⌊W/N⌋ + 1`, and `s(j) = j·W/N` when N divides W.
    #[test]
    fn grid_is_consistent(
        n in prop_oneof![1u32..10, 1u32..=3600],
        window in prop_oneof![1u64..1_000, any::<u64>(), Just(u64::MAX)],
        j in any::<u64>(),
    ) {
        let window = window.max(u64::from(n));
        let grid = grid_of(&bucketed(1, window, n));
        let n64 = u64::from(n);
        // Buckets that start within u64.
        let j = j % (grid.index(u64::MAX) - n64 + 1).max(1);
        let at = u64::try_from(grid.start(j)).unwrap();
        prop_assert_eq!(grid.start(j), s_of(window, n64, j));
        prop_assert_eq!(grid.index(at), j);
        if j > 0 {
            prop_assert_eq!(grid.index(at - 1), j - 1);
        }
        prop_assert_eq!(grid.start(j + n64), grid.start(j) + u128::from(window));
        let width = grid.start(j + 1) - grid.start(j);
        let q = u128::from(window / n64);
        prop_assert!(width == q || width == q + 1);
        if window % n64 == 0 {
            prop_assert_eq!(grid.start(j), u128::from(j) * q);
        }
        prop_assert_eq!(grid.after(at, n64 + 1), grid.start(j + n64 + 1));
    }
}
