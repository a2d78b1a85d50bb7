use super::guava_cases::*;
use super::*;
use proptest::prelude::*;

/// One Guava call and its result: `(t_us, op, cost, arg, want)`, see `guava_cases.rs`.
pub(super) type Step = (u64, u8, u64, u64, i64);

/// The limiter a Guava sequence ran on.
#[derive(Clone, Copy, Debug)]
pub(super) enum Alg {
    Bursty {
        rate_milli: u64,
        burst_milli: u64,
    },
    WarmingUp {
        rate_milli: u64,
        warmup_us: u64,
        cold_milli: u64,
    },
}

/// A Guava call sequence with its results.
pub(super) struct Case {
    pub(super) alg: Alg,
    pub(super) steps: &'static [Step],
}

const GUAVA_CASES: &[(&str, &Case)] = &[
    ("BURSTY_SIMPLE", &BURSTY_SIMPLE),
    ("BURSTY_BIG_THEN_SMALL", &BURSTY_BIG_THEN_SMALL),
    ("BURSTY_IDLE_THEN_BURST", &BURSTY_IDLE_THEN_BURST),
    ("BURSTY_SET_RATE", &BURSTY_SET_RATE),
    ("BURSTY_TRY_ACQUIRE", &BURSTY_TRY_ACQUIRE),
    ("BURSTY_CUSTOM_BURST", &BURSTY_CUSTOM_BURST),
    ("BURSTY_ODD_RATE", &BURSTY_ODD_RATE),
    ("BURSTY_NO_BURST", &BURSTY_NO_BURST),
    ("WARMING_GUAVA_EXAMPLE", &WARMING_GUAVA_EXAMPLE),
    ("WARMING_COLD_FACTOR_10", &WARMING_COLD_FACTOR_10),
    ("WARMING_CYCLES", &WARMING_CYCLES),
    ("WARMING_SET_RATE", &WARMING_SET_RATE),
    ("WARMING_ODD", &WARMING_ODD),
];

/// Random sequences run on Guava 31.1-jre (`GuavaCheck.java random 20240601 60`).
const GUAVA_RANDOM: &str = include_str!("../../../tests/data/guava_smooth_random.txt");

/// Either flavour, so that one test body runs on both.
#[derive(Clone, Debug)]
enum Smooth {
    B(SmoothBursty),
    W(SmoothWarmingUp),
}

impl Smooth {
    fn of(alg: Alg) -> Smooth {
        match alg {
            Alg::Bursty {
                rate_milli,
                burst_milli,
            } => Smooth::B(SmoothBursty::guava(milli(rate_milli), milli(burst_milli)).unwrap()),
            Alg::WarmingUp {
                rate_milli,
                warmup_us,
                cold_milli,
            } => Smooth::W(
                SmoothWarmingUp::new(
                    milli(rate_milli),
                    Duration::from_micros(warmup_us),
                    milli(cold_milli),
                )
                .unwrap(),
            ),
        }
    }

    fn fresh(&self, now: Nanos) -> SmoothState {
        match self {
            Smooth::B(a) => a.fresh(now),
            Smooth::W(a) => a.fresh(now),
        }
    }

    fn apply(&self, st: &mut SmoothState, now: Nanos, op: Op) -> Decision {
        match self {
            Smooth::B(a) => a.apply(st, now, op),
            Smooth::W(a) => a.apply(st, now, op),
        }
    }

    fn is_fresh(&self, st: &SmoothState, now: Nanos) -> bool {
        match self {
            Smooth::B(a) => a.is_fresh(st, now),
            Smooth::W(a) => a.is_fresh(st, now),
        }
    }

    fn rate(&self) -> f64 {
        match self {
            Smooth::B(a) => a.rate(),
            Smooth::W(a) => a.rate(),
        }
    }

    fn max_permits(&self) -> f64 {
        match self {
            Smooth::B(a) => a.max_permits(),
            Smooth::W(a) => a.max_permits(),
        }
    }
}

fn milli(m: u64) -> f64 {
    m as f64 / 1000.0
}

fn op_of(step: &Step) -> Op {
    let (_, kind, cost, arg, _) = *step;
    match kind {
        b'r' => Op::Reserve { cost },
        b't' => Op::TryAcquire {
            cost,
            timeout: Duration::from_micros(arg),
        },
        b'c' => Op::Check { cost },
        b's' => Op::SetRate { rate: milli(arg) },
        other => panic!("unknown step kind {other}"),
    }
}

/// Replays a Guava sequence on a key created at `origin_ns` (Guava's stopwatch 0), each step at
/// `origin + t µs + jitter` (jitter below 1 µs must not matter: instants are floored).
fn replay(name: &str, alg: Alg, steps: &[Step], origin_ns: u64, jitter_ns: u64) {
    let smooth = Smooth::of(alg);
    let mut st = smooth.fresh(Nanos(origin_ns));
    for (i, step) in steps.iter().enumerate() {
        let now = Nanos(origin_ns + step.0 * 1000 + jitter_ns);
        let d = smooth.apply(&mut st, now, op_of(step));
        let got = match step.1 {
            b's' => {
                assert!(d.allowed, "{name} step {i}: set_rate refused: {d:?}");
                0
            }
            _ if d.allowed => i64::try_from(d.wait.as_micros()).unwrap(),
            _ => -1,
        };
        assert_eq!(
            got, step.4,
            "{name} (origin {origin_ns} ns, jitter {jitter_ns} ns) step {i} {step:?}: {d:?}"
        );
    }
}

/// µs-aligned origins: the Guava stopwatch's 0, and a Unix-epoch-like instant.
const ORIGINS: [u64; 2] = [0, 1_700_000_000_123_456_000];

#[test]
fn waits_equal_guava_to_the_microsecond() {
    for (name, case) in GUAVA_CASES {
        for origin in ORIGINS {
            for jitter in [0, 1, 999] {
                replay(name, case.alg, case.steps, origin, jitter);
            }
        }
    }
}

fn parse_random() -> Vec<(Alg, Vec<Step>)> {
    let mut out = Vec::new();
    let mut current: Option<(Alg, Vec<Step>)> = None;
    for line in GUAVA_RANDOM.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| f[i].parse::<u64>().unwrap();
        match f.first().copied() {
            None | Some("#") => {}
            Some("bursty") => {
                let alg = Alg::Bursty {
                    rate_milli: num(1),
                    burst_milli: num(2),
                };
                current = Some((alg, Vec::new()));
            }
            Some("warming") => {
                let alg = Alg::WarmingUp {
                    rate_milli: num(1),
                    warmup_us: num(2),
                    cold_milli: num(3),
                };
                current = Some((alg, Vec::new()));
            }
            Some("end") => out.push(current.take().unwrap()),
            Some(_) => {
                let step = (
                    num(0),
                    f[1].as_bytes()[0],
                    num(2),
                    num(3),
                    f[4].parse::<i64>().unwrap(),
                );
                current.as_mut().unwrap().1.push(step);
            }
        }
    }
    out
}

#[test]
fn random_sequences_equal_guava_to_the_microsecond() {
    let cases = parse_random();
    assert_eq!(cases.len(), 60);
    let steps: usize = cases.iter().map(|c| c.1.len()).sum();
    assert!(steps > 2000, "{steps} steps");
    for (i, (alg, steps)) in cases.iter().enumerate() {
        for origin in ORIGINS {
            replay(&format!("random #{i} {alg:?}"), *alg, steps, origin, 500);
        }
    }
}

#[test]
fn state_is_32_bytes() {
    assert_eq!(std::mem::size_of::<SmoothState>(), 32);
}

fn invalid_field(err: ConfigError) -> (&'static str, String) {
    match err {
        ConfigError::Invalid { field, value, .. } => (field, value),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn constructors_validate_every_parameter() {
    let b = |r, s| invalid_field(SmoothBursty::new(r, s).unwrap_err());
    assert_eq!(b(0.0, 1.0), ("rate", "0".into()));
    assert_eq!(b(f64::NAN, 1.0), ("rate", "NaN".into()));
    assert_eq!(b(f64::INFINITY, 1.0), ("rate", "inf".into()));
    assert_eq!(b(-2.0, 1.0), ("rate", "-2".into()));
    assert_eq!(b(1e-310, 1.0).0, "rate"); // 1e6 / rate overflows
    assert_eq!(b(2.0, -1.0), ("max_burst_seconds", "-1".into()));
    assert_eq!(b(2.0, f64::NAN), ("max_burst_seconds", "NaN".into()));
    assert_eq!(b(1e300, 1e10), ("max_burst_seconds", "10000000000".into()));
    assert!(SmoothBursty::new(2.0, 0.0).is_ok());

    let w = |r, d, c| invalid_field(SmoothWarmingUp::new(r, d, c).unwrap_err());
    let four = Duration::from_secs(4);
    assert_eq!(w(0.0, four, 3.0), ("rate", "0".into()));
    assert_eq!(w(f64::NAN, four, 3.0), ("rate", "NaN".into()));
    assert_eq!(w(2.0, Duration::ZERO, 3.0), ("warmup", "0ns".into()));
    assert_eq!(
        w(2.0, Duration::from_nanos(999), 3.0),
        ("warmup", "999ns".into())
    );
    assert_eq!(w(2.0, Duration::MAX, 3.0).0, "warmup");
    assert_eq!(w(2.0, four, 0.5), ("cold_factor", "0.5".into()));
    assert_eq!(w(2.0, four, f64::INFINITY), ("cold_factor", "inf".into()));
    assert_eq!(w(2.0, four, f64::NAN), ("cold_factor", "NaN".into()));
    // Derived values out of range: the threshold overflows, or the cold interval does.
    assert_eq!(w(1e306, Duration::from_secs(100_000), 3.0).0, "rate");
    assert_eq!(w(1.0, four, 1e308).0, "rate");
    assert!(SmoothWarmingUp::new(2.0, Duration::from_micros(1), 1.0).is_ok());
}

#[test]
fn names_accessors_and_supported_ops() {
    let b = SmoothBursty::new(5.0, SmoothBursty::DEFAULT_MAX_BURST_SECONDS).unwrap();
    assert_eq!(b.name(), "smooth_bursty");
    assert_eq!((b.rate(), b.max_burst_seconds()), (5.0, 1.0));
    assert_eq!(
        (b.max_permits(), b.stable_interval_micros()),
        (5.0, 200_000.0)
    );
    let w = SmoothWarmingUp::new(
        2.0,
        Duration::from_secs(4),
        SmoothWarmingUp::DEFAULT_COLD_FACTOR,
    )
    .unwrap();
    assert_eq!(w.name(), "smooth_warming_up");
    assert_eq!(
        (w.rate(), w.warmup(), w.cold_factor()),
        (2.0, Duration::from_secs(4), 3.0)
    );
    // Guava's doSetRate for 2/s, 4 s, 3: interval 500 000 µs, cold 1 500 000 µs,
    // threshold 0.5 × 4e6 / 5e5 = 4, max 4 + 2 × 4e6 / 2e6 = 8.
    assert_eq!((w.threshold_permits(), w.max_permits()), (4.0, 8.0));
    assert_eq!(w.stable_interval_micros(), 500_000.0);
    for kind in [
        OpKind::Check,
        OpKind::Reserve,
        OpKind::TryAcquire,
        OpKind::SetRate,
    ] {
        assert!(b.supports(kind) && w.supports(kind));
    }
}

const fn ms(n: u64) -> Nanos {
    Nanos::from_millis(n)
}

#[test]
fn bursty_decision_fields_by_hand() {
    let b = SmoothBursty::guava(5.0, 1.0).unwrap();
    let mut st = b.fresh(ms(0));
    // Fresh: empty, so reset_after is the time to fill 5 permits at 200 ms each.
    let d = b.apply(&mut st, ms(0), Op::Check { cost: 0 });
    assert_eq!(d, Decision::allow(5, 0, Duration::from_secs(1)));
    // Idle 2 s: full.
    let d = b.apply(&mut st, ms(2000), Op::Check { cost: 0 });
    assert_eq!(d, Decision::allow(5, 5, Duration::ZERO));
    // reserve(10): proceeds at once, takes the 5 stored permits and owes 5 × 200 ms.
    let d = b.apply(&mut st, ms(2000), Op::Reserve { cost: 10 });
    assert_eq!(d, Decision::allow(5, 0, Duration::from_secs(2)));
    assert_eq!(st.next_free_micros(), 3_000_000);
    assert_eq!(st.stored_permits(), 0.0);
    // The next caller pays: a check is denied until the debt is paid, 0.5 s later.
    let d = b.apply(&mut st, ms(2500), Op::Check { cost: 1 });
    let want = Decision::deny(
        5,
        0,
        Duration::from_millis(1500),
        Some(Duration::from_millis(500)),
    );
    assert_eq!(d, want);
    // A reserve waits the same 0.5 s, then owes 200 ms more.
    let mut other = st;
    let d = b.apply(&mut other, ms(2500), Op::Reserve { cost: 1 });
    assert_eq!(d.wait, Duration::from_millis(500));
    assert_eq!(other.next_free_micros(), 3_200_000);
    // At 3 s the check passes with no wait; the key is full again at 3.2 + 1 = 4.2 s.
    let d = b.apply(&mut st, ms(3000), Op::Check { cost: 1 });
    assert_eq!(d, Decision::allow(5, 0, Duration::from_millis(1200)));
    // set_rate(10) at 4.2 s: 5 permits stored, rescaled to 5 × 10 / 5 = 10.
    let d = b.apply(&mut st, ms(4200), Op::SetRate { rate: 10.0 });
    assert_eq!(d, Decision::allow(10, 10, Duration::ZERO));
    assert_eq!(st.rate(), 10.0);
}

#[test]
fn warming_up_decision_fields_by_hand() {
    let w = SmoothWarmingUp::new(2.0, Duration::from_secs(4), 3.0).unwrap();
    let mut st = w.fresh(ms(0));
    assert!(w.is_fresh(&st, ms(0)));
    let d = w.apply(&mut st, ms(0), Op::Check { cost: 0 });
    assert_eq!(d, Decision::allow(8, 8, Duration::ZERO));
    // First acquire: no wait; it costs the trapezoid above the threshold (4 permits):
    // 1 × ((5e5 + 4 × 2.5e5) + (5e5 + 3 × 2.5e5)) / 2 = 1 375 000 µs, paid by the next caller.
    let d = w.apply(&mut st, ms(0), Op::Reserve { cost: 1 });
    assert_eq!(d.wait, Duration::ZERO);
    assert_eq!(st.next_free_micros(), 1_375_000);
    // Back to cold: debt 1.375 s, then 1 permit at 4 s / 8 = 0.5 s.
    assert_eq!(
        (d.remaining, d.reset_after),
        (0, Duration::from_micros(1_875_000))
    );
    assert!(!w.is_fresh(&st, ms(1_874)));
    let d = w.apply(
        &mut st,
        ms(1_000),
        Op::TryAcquire {
            cost: 1,
            timeout: Duration::from_millis(300),
        },
    );
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(Duration::from_millis(75)));
    assert!(w.is_fresh(&st, ms(1_875)));
    assert!(w.is_fresh(&st, ms(60_000)));
}

#[test]
fn a_bursty_key_starting_full_has_its_burst_at_once_and_is_fresh_once_refilled() {
    let b = SmoothBursty::new(5.0, 1.0).unwrap();
    assert_eq!(b.start(), BurstyStart::Full);
    let mut st = b.fresh(ms(0));
    assert!(b.is_fresh(&st, ms(0)));
    // Full: 5 free permits now, as a key idle for a second or more would hold.
    let d = b.apply(&mut st, ms(0), Op::Check { cost: 0 });
    assert_eq!(d, Decision::allow(5, 5, Duration::ZERO));
    let d = b.apply(&mut st, ms(0), Op::Reserve { cost: 2 });
    assert_eq!(d, Decision::allow(5, 3, Duration::from_millis(400)));
    // Two permits refill at 200 ms each: fresh again at 400 ms, not a microsecond earlier.
    assert!(!b.is_fresh(&st, Nanos(399_999_000)));
    assert!(b.is_fresh(&st, ms(400)));
    // And then it decides exactly as a new key does, from then on.
    let mut new = b.fresh(ms(400));
    for (t, op) in [
        (ms(400), Op::Reserve { cost: 7 }),
        (ms(450), Op::Check { cost: 1 }),
        (ms(900), Op::Reserve { cost: 1 }),
    ] {
        assert_eq!(b.apply(&mut st, t, op), b.apply(&mut new, t, op));
        assert_eq!(st, new);
    }
    // Guava's limiter is the same but for the first burst.
    let g = SmoothBursty::guava(5.0, 1.0).unwrap();
    let mut st = g.fresh(ms(0));
    let d = g.apply(&mut st, ms(0), Op::Check { cost: 0 });
    assert_eq!(d, Decision::allow(5, 0, Duration::from_secs(1)));
}

#[test]
fn a_bursty_key_starting_empty_is_fresh_only_without_burst() {
    let b = SmoothBursty::guava(5.0, 1.0).unwrap();
    let st = b.fresh(ms(0));
    // A fresh bursty key that idles fills up; a re-created one would start empty.
    assert!(!b.is_fresh(&st, ms(0)));
    assert!(!b.is_fresh(&st, ms(60_000)));

    for start in [BurstyStart::Empty, BurstyStart::Full] {
        let b0 = SmoothBursty::starting(5.0, 0.0, start).unwrap();
        let mut st = b0.fresh(ms(0));
        assert!(b0.is_fresh(&st, ms(0)));
        let _ = b0.apply(&mut st, ms(0), Op::Reserve { cost: 3 });
        assert!(!b0.is_fresh(&st, ms(599)));
        assert!(b0.is_fresh(&st, ms(600)));
        // A changed rate is not fresh until set back.
        let _ = b0.apply(&mut st, ms(700), Op::SetRate { rate: 7.0 });
        assert!(!b0.is_fresh(&st, ms(800)));
        let _ = b0.apply(&mut st, ms(800), Op::SetRate { rate: 5.0 });
        assert!(b0.is_fresh(&st, ms(800)));
    }
}

#[test]
fn a_set_rate_round_trip_can_leave_an_ulp_for_one_microsecond() {
    // Found by `retry_and_reset_are_exact`: Guava's `stored × M′ / M` does not round-trip, so
    // a cold key sent to 3× its rate and back holds one ulp more than its maximum until the
    // next resync clamps it. It is not fresh until then, and `reset_after` says so.
    let w = SmoothWarmingUp::new(
        11.767338888317742,
        Duration::from_micros(783_159),
        5.849443046498628,
    )
    .unwrap();
    let mut st = w.fresh(ms(0));
    let _ = w.apply(
        &mut st,
        ms(0),
        Op::SetRate {
            rate: w.rate() * 3.0,
        },
    );
    let d = w.apply(&mut st, ms(0), Op::SetRate { rate: w.rate() });
    assert!(st.stored_permits() > w.max_permits());
    assert_eq!(d.reset_after, Duration::from_micros(1));
    assert!(!w.is_fresh(&st, Nanos(999)));
    assert!(w.is_fresh(&st, Nanos(1000)));
}

#[test]
fn cost_zero_probes_change_nothing() {
    let w = Smooth::of(Alg::WarmingUp {
        rate_milli: 2000,
        warmup_us: 4_000_000,
        cold_milli: 3000,
    });
    let b = Smooth::of(Alg::Bursty {
        rate_milli: 5000,
        burst_milli: 1000,
    });
    for smooth in [w, b] {
        let mut st = smooth.fresh(ms(0));
        let _ = smooth.apply(&mut st, ms(10), Op::Reserve { cost: 3 });
        let before = st;
        for t in [ms(10), ms(300), ms(5_000)] {
            for (probe, real) in [
                (Op::Reserve { cost: 0 }, Op::Reserve { cost: 1 }),
                (Op::Check { cost: 0 }, Op::Check { cost: 1 }),
                (
                    Op::TryAcquire {
                        cost: 0,
                        timeout: Duration::from_millis(200),
                    },
                    Op::TryAcquire {
                        cost: 1,
                        timeout: Duration::from_millis(200),
                    },
                ),
            ] {
                let d = smooth.apply(&mut st, t, probe);
                assert_eq!(st, before);
                // Same answer as the real request (whose cost only affects later callers).
                let mut copy = st;
                let r = smooth.apply(&mut copy, t, real);
                assert_eq!(
                    (d.allowed, d.wait, d.retry_after),
                    (r.allowed, r.wait, r.retry_after)
                );
            }
        }
    }
}

#[test]
fn refused_set_rate_changes_nothing() {
    let b = SmoothBursty::new(5.0, 1.0).unwrap();
    let mut st = b.fresh(ms(0));
    let _ = b.apply(&mut st, ms(0), Op::Reserve { cost: 2 });
    let before = st;
    for rate in [
        0.0,
        -1.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1e-310,
    ] {
        let d = b.apply(&mut st, ms(100), Op::SetRate { rate });
        assert!(
            !d.allowed && d.retry_after.is_none() && d.wait.is_zero(),
            "{rate}"
        );
        assert_eq!(st, before);
    }
    let w = SmoothWarmingUp::new(2.0, Duration::from_secs(100_000), 3.0).unwrap();
    let mut st = w.fresh(ms(0));
    let before = st;
    let d = w.apply(&mut st, ms(0), Op::SetRate { rate: 1e306 });
    assert!(!d.allowed);
    assert_eq!(st, before);
}

#[test]
fn huge_costs_saturate_and_never_panic() {
    let b = SmoothBursty::new(5.0, 1.0).unwrap();
    let mut st = b.fresh(ms(0));
    let d = b.apply(&mut st, ms(0), Op::Reserve { cost: u64::MAX });
    assert!(d.allowed && d.wait.is_zero());
    assert_eq!(st.next_free_micros(), i64::MAX);
    // No clock can reach that instant: denied for ever.
    let d = b.apply(&mut st, Nanos(u64::MAX), Op::Check { cost: 1 });
    assert_eq!((d.allowed, d.retry_after), (false, None));
    // A reservation still goes through, with a wait of about 292 000 years.
    let d = b.apply(&mut st, ms(1), Op::Reserve { cost: 1 });
    assert_eq!(d.wait, Duration::from_micros(i64::MAX as u64 - 1000));
    // An unbounded timeout accepts it too.
    let d = b.apply(
        &mut st,
        ms(1),
        Op::TryAcquire {
            cost: 1,
            timeout: Duration::MAX,
        },
    );
    assert!(d.allowed);
    assert!(d.reset_after > Duration::from_secs(9_000_000_000_000));
}

#[test]
fn a_clock_going_backwards_counts_as_no_time_passed() {
    let b = SmoothBursty::new(5.0, 1.0).unwrap();
    let mut st = b.fresh(ms(0));
    // 5 permits stored by 5 s; reserve(10) takes them and owes 5 more: N = 6 s.
    let _ = b.apply(&mut st, ms(5000), Op::Reserve { cost: 10 });
    let mut back = st;
    let d_back = b.apply(&mut back, ms(1000), Op::Reserve { cost: 1 });
    let d_now = b.apply(&mut st, ms(5000), Op::Reserve { cost: 1 });
    assert_eq!(d_back.wait, Duration::from_secs(1));
    assert_eq!(d_back.wait, d_now.wait);
    assert_eq!(back, st);
    // reset_after and retry_after are measured from the caller's (earlier) clock.
    assert_eq!(
        d_back.reset_after,
        d_now.reset_after + Duration::from_secs(4)
    );
}

// ---------------------------------------------------------------------------------------------
// Property tests

type RawStep = (u8, f64, u8, u64, f64);

fn smooth_alg() -> impl Strategy<Value = Smooth> {
    prop_oneof![
        (
            0.5f64..2000.0,
            prop_oneof![Just(0.0), Just(1.0), 0.0f64..3.0],
            any::<bool>(),
        )
            .prop_map(|(r, s, full)| {
                let start = if full {
                    BurstyStart::Full
                } else {
                    BurstyStart::Empty
                };
                Smooth::B(SmoothBursty::starting(r, s, start).unwrap())
            }),
        (
            0.5f64..2000.0,
            1_000u64..5_000_000,
            prop_oneof![Just(3.0), 1.0f64..10.0]
        )
            .prop_map(|(r, w, c)| {
                Smooth::W(SmoothWarmingUp::new(r, Duration::from_micros(w), c).unwrap())
            }),
    ]
}

fn raw_steps(max: usize) -> impl Strategy<Value = Vec<RawStep>> {
    prop::collection::vec(
        (0u8..100, 0.0f64..1.0, 0u8..100, 0u64..=20, 0.0f64..1.0),
        1..max,
    )
}

const ORIGIN: u64 = 1_000_000_000_000;

/// Turns raw draws into `(instant ns, op)` at non-decreasing instants, scaled to the rate.
fn realize(smooth: &Smooth, raw: &[RawStep], set_rate: bool) -> Vec<(u64, Op)> {
    let interval_ns = 1e9 / smooth.rate();
    let mut t = ORIGIN;
    raw.iter()
        .map(|&(dt_kind, dt, kind, cost, x)| {
            t += match dt_kind {
                0..=19 => 0,
                20..=89 => (dt * 3.0 * interval_ns) as u64,
                _ => (dt * 30e9) as u64,
            };
            let op = match kind {
                0..=44 => Op::Reserve { cost },
                45..=74 => Op::TryAcquire {
                    cost,
                    timeout: Duration::from_nanos((x * 4.0 * interval_ns) as u64),
                },
                75..=94 => Op::Check { cost },
                _ if set_rate => Op::SetRate {
                    rate: smooth.rate() * [0.5, 1.0, 1.0, 2.0, 3.0][(cost % 5) as usize],
                },
                _ => Op::Check { cost },
            };
            (t, op)
        })
        .collect()
}

fn run(smooth: &Smooth, mut st: SmoothState, ops: &[(u64, Op)]) -> Vec<Decision> {
    ops.iter()
        .map(|&(t, op)| smooth.apply(&mut st, Nanos(t), op))
        .collect()
}

fn cost_of(op: Op) -> u64 {
    op.cost()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The documented bound, on every run of consecutive reservation starts.
    #[test]
    fn admission_bound_holds(smooth in smooth_alg(), raw in raw_steps(60)) {
        let ops = realize(&smooth, &raw, false);
        let mut st = smooth.fresh(Nanos(ORIGIN));
        let mut starts: Vec<(i64, f64)> = Vec::new();
        for &(t, op) in &ops {
            let d = smooth.apply(&mut st, Nanos(t), op);
            if d.allowed && cost_of(op) > 0 {
                let start = (t / 1000) as i64 + d.wait.as_micros() as i64;
                starts.push((start, cost_of(op) as f64));
            }
        }
        let per_us = smooth.rate() / 1e6;
        let (stored_max, truncations) = match &smooth {
            Smooth::B(b) => (b.max_permits(), 1.0),
            Smooth::W(_) => (0.0, 3.0),
        };
        for i in 0..starts.len() {
            let mut sum = 0.0;
            for j in i..starts.len() {
                prop_assert!(starts[j].0 >= starts[i].0);
                sum += starts[j].1;
                let span = (starts[j].0 - starts[i].0) as f64;
                let bound = stored_max
                    + per_us * (span + truncations * (j - i) as f64)
                    + starts[j].1;
                prop_assert!(
                    sum <= bound * (1.0 + 1e-9) + 1e-9,
                    "starts {i}..={j}: {sum} permits > bound {bound}"
                );
            }
        }
    }

    /// Wherever `is_fresh` says so, the key can be replaced by a fresh one created then, or when
    /// it is next seen (what a store does after evicting it), without changing any decision.
    #[test]
    fn is_fresh_is_sound(smooth in smooth_alg(), raw in raw_steps(40)) {
        let ops = realize(&smooth, &raw, true);
        let mut st = smooth.fresh(Nanos(ORIGIN));
        for k in 0..=ops.len() {
            let prev = if k == 0 { ORIGIN } else { ops[k - 1].0 };
            let next = ops.get(k).map_or(prev + 10_000_000_000, |o| o.0);
            for c in [prev, prev + (next - prev) / 2, next] {
                if smooth.is_fresh(&st, Nanos(c)) {
                    let rest = &ops[k..];
                    let want = run(&smooth, st, rest);
                    prop_assert_eq!(&run(&smooth, smooth.fresh(Nanos(c)), rest), &want);
                    prop_assert_eq!(&run(&smooth, smooth.fresh(Nanos(next)), rest), &want);
                }
            }
            if let Some(&(t, op)) = ops.get(k) {
                let _ = smooth.apply(&mut st, Nanos(t), op);
            }
        }
    }

    /// `retry_after` is exact to the nanosecond, `reset_after` leads to a key at rest (back to
    /// fresh for warming up and bursty starting full), denials and probes change nothing, waits respect timeouts.
    #[test]
    fn retry_and_reset_are_exact(smooth in smooth_alg(), raw in raw_steps(40)) {
        let ops = realize(&smooth, &raw, true);
        let mut st = smooth.fresh(Nanos(ORIGIN));
        for &(t, op) in &ops {
            let before = st;
            let d = smooth.apply(&mut st, Nanos(t), op);
            if !d.allowed || (cost_of(op) == 0 && !matches!(op, Op::SetRate { .. })) {
                prop_assert_eq!(st, before);
                prop_assert!(d.allowed || d.wait.is_zero());
            }
            if let Op::TryAcquire { timeout, .. } = op {
                prop_assert!(d.wait.as_micros() <= timeout.as_micros());
            }
            if let Some(r) = d.retry_after {
                let r = r.as_nanos() as u64;
                prop_assert!(r > 0);
                let mut at = before;
                prop_assert!(smooth.apply(&mut at, Nanos(t + r), op).allowed);
                let mut early = before;
                prop_assert!(!smooth.apply(&mut early, Nanos(t + r - 1), op).allowed);
            }
            let reset = d.reset_after.as_nanos() as u64;
            let mut probe = st;
            let p = smooth.apply(&mut probe, Nanos(t + reset), Op::Check { cost: 0 });
            prop_assert_eq!(p.reset_after, Duration::ZERO);
            if reset >= 2_000 {
                let p = smooth.apply(&mut probe, Nanos(t + reset - 2_000), Op::Check { cost: 0 });
                prop_assert!(p.reset_after > Duration::ZERO);
            }
            // Back at rest is back to fresh for warming up and for bursty starting full.
            let rests_fresh = match &smooth {
                Smooth::W(w) => st.rate() == w.rate(),
                Smooth::B(b) => st.rate() == b.rate() && b.start() == BurstyStart::Full,
            };
            if rests_fresh {
                prop_assert!(smooth.is_fresh(&st, Nanos(t + reset)));
            }
        }
    }

    /// An instant before the latest one seen acts as that latest instant; the durations are
    /// measured from the caller's clock.
    #[test]
    fn backwards_instants_count_as_no_time_passed(
        smooth in smooth_alg(),
        raw in raw_steps(30),
        back in 0.0f64..1.0,
        last in raw_steps(2),
    ) {
        let ops = realize(&smooth, &raw, true);
        let mut st = smooth.fresh(Nanos(ORIGIN));
        for &(t, op) in &ops {
            let _ = smooth.apply(&mut st, Nanos(t), op);
        }
        let seen_ns = st.seen as u64 * 1000;
        let back_ns = (seen_ns as f64 * back) as u64;
        let op = realize(&smooth, &last, true)[0].1;
        let (mut a, mut b) = (st, st);
        let da = smooth.apply(&mut a, Nanos(back_ns), op);
        let db = smooth.apply(&mut b, Nanos(seen_ns), op);
        prop_assert_eq!(a, b);
        prop_assert_eq!(
            (da.allowed, da.limit, da.remaining, da.wait),
            (db.allowed, db.limit, db.remaining, db.wait)
        );
        let shift = Duration::from_nanos(seen_ns - back_ns);
        prop_assert_eq!(da.reset_after, db.reset_after + shift);
        prop_assert_eq!(da.retry_after, db.retry_after.map(|r| r + shift));
    }
}

fn wild_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        (-320.0f64..310.0).prop_map(|e| 10f64.powf(e)),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::MIN_POSITIVE),
        Just(5e-324),
        Just(f64::MAX),
        Just(0.0),
        Just(-0.0),
    ]
}

fn wild_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        Just(0),
        Just(1),
        Just(u64::MAX),
        0u64..100,
        Just(i64::MAX as u64)
    ]
}

fn wild_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        wild_u64().prop_map(Duration::from_nanos),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

fn wild_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        wild_u64().prop_map(|cost| Op::Check { cost }),
        wild_u64().prop_map(|cost| Op::Reserve { cost }),
        (wild_u64(), wild_duration()).prop_map(|(cost, timeout)| Op::TryAcquire { cost, timeout }),
        wild_f64().prop_map(|rate| Op::SetRate { rate }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// No parameters, instants (backwards included), costs, timeouts or rates panic.
    #[test]
    fn no_input_panics(
        bursty in any::<bool>(),
        rate in wild_f64(),
        x in wild_f64(),
        warmup in wild_duration(),
        steps in prop::collection::vec((wild_u64(), wild_op()), 1..40),
    ) {
        let smooth = if bursty {
            SmoothBursty::new(rate, x).map(Smooth::B)
        } else {
            SmoothWarmingUp::new(rate, warmup, x).map(Smooth::W)
        };
        let Ok(smooth) = smooth else { return Ok(()) };
        let mut st = smooth.fresh(Nanos(steps[0].0));
        for (t, op) in steps {
            let before = st;
            let d = smooth.apply(&mut st, Nanos(t), op);
            smooth.is_fresh(&st, Nanos(t));
            if !d.allowed {
                prop_assert_eq!(st, before);
                prop_assert!(d.wait.is_zero());
            }
            prop_assert!(!st.stored.is_nan());
            prop_assert!(st.seen <= st.next_free);
        }
        let _ = smooth.max_permits();
    }
}
