use super::*;
use crate::algorithm::laws::{check, ns};
use proptest::prelude::*;

fn acquire(lease: u64) -> Op {
    Op::Acquire {
        lease: lease.into(),
        critical: false,
    }
}

fn critical(lease: u64) -> Op {
    Op::Acquire {
        lease: lease.into(),
        critical: true,
    }
}

fn release(lease: u64) -> Op {
    Op::Release {
        lease: lease.into(),
    }
}

/// (allowed, limit, remaining, reset_after, retry_after) in nanoseconds.
fn nums(d: Decision) -> (bool, u64, u64, u64, Option<u64>) {
    assert_eq!(d.wait, Duration::ZERO);
    (
        d.allowed,
        d.limit,
        d.remaining,
        d.reset_after.as_nanos() as u64,
        d.retry_after.map(|r| r.as_nanos() as u64),
    )
}

#[test]
fn state_size() {
    assert_eq!(std::mem::size_of::<LeaseSet>(), 120);
    assert_eq!(std::mem::size_of::<Slot>(), 48);
}

/// capacity 2, lease_ttl 100 ns: hand-derived.
#[test]
fn concurrency_hand_sequence() {
    let c = Concurrency::new(2, ns(100)).unwrap();
    let mut s = c.fresh(Nanos(0));
    let mut at = |t: u64, op: Op| nums(c.apply(&mut s, Nanos(t), op));

    assert_eq!(at(0, acquire(1)), (true, 2, 1, 100, None));
    assert_eq!(at(10, acquire(2)), (true, 2, 0, 100, None));
    // Full: lease 1 frees its place at 100 at the latest.
    assert_eq!(at(20, acquire(3)), (false, 2, 0, 90, Some(80)));
    assert_eq!(at(30, release(1)), (true, 2, 1, 80, None));
    assert_eq!(at(30, acquire(3)), (true, 2, 0, 100, None));
    // Released twice: a no-op reporting false.
    assert_eq!(at(40, release(1)), (false, 2, 0, 90, None));
    // Renewal: lease 2 now expires at 150; counts unchanged.
    assert_eq!(at(50, acquire(2)), (true, 2, 0, 100, None));
    // Earliest live lease is now 3 (130).
    assert_eq!(at(60, acquire(4)), (false, 2, 0, 90, Some(70)));
    // 130: lease 3 expired (expiry is excluded), its place is free.
    assert_eq!(at(130, acquire(4)), (true, 2, 0, 100, None));
    assert_eq!(at(130, release(3)), (false, 2, 0, 100, None));
    assert_eq!(s.in_flight(Nanos(149)), 2);
    assert_eq!(s.in_flight(Nanos(150)), 1);
    assert!(!c.is_fresh(&s, Nanos(229)));
    assert!(c.is_fresh(&s, Nanos(230)));
    // Expired leases stay in memory until the next mutating operation drops them.
    assert_eq!(s.held(), 2);
    let _ = c.apply(&mut s, Nanos(300), release(9));
    assert_eq!(s.held(), 0);
}

#[test]
fn expiry_reclaims_a_leaked_place() {
    let c = Concurrency::new(1, ns(100)).unwrap();
    let mut s = c.fresh(Nanos(0));
    assert!(c.apply(&mut s, Nanos(0), acquire(7)).allowed);
    assert_eq!(
        nums(c.apply(&mut s, Nanos(99), acquire(8))),
        (false, 1, 0, 1, Some(1))
    );
    assert_eq!(
        nums(c.apply(&mut s, Nanos(100), acquire(8))),
        (true, 1, 0, 100, None)
    );
    // The leaked lease expired: releasing it reports false and changes nothing.
    assert_eq!(
        nums(c.apply(&mut s, Nanos(100), release(7))),
        (false, 1, 0, 100, None)
    );
    assert_eq!(s.in_flight(Nanos(100)), 1);
    // An expired lease acquired again is a new lease, not a renewal.
    assert_eq!(
        nums(c.apply(&mut s, Nanos(250), acquire(7))),
        (true, 1, 0, 100, None)
    );
}

#[test]
fn concurrency_counts_critical_leases_too() {
    let c = Concurrency::new(2, ns(100)).unwrap();
    let mut s = c.fresh(Nanos(0));
    assert!(c.apply(&mut s, Nanos(0), critical(1)).allowed);
    assert!(c.apply(&mut s, Nanos(10), acquire(2)).allowed);
    // Refused, critical or not; the earliest lease of any class frees a place.
    assert_eq!(
        nums(c.apply(&mut s, Nanos(20), critical(3))),
        (false, 2, 0, 90, Some(80))
    );
    assert_eq!(
        nums(c.apply(&mut s, Nanos(20), acquire(3))),
        (false, 2, 0, 90, Some(80))
    );
    assert_eq!(s.in_flight_critical(Nanos(20)), 1);
    assert_eq!(s.in_flight_non_critical(Nanos(20)), 1);
}

/// capacity 10, reserved 0.3: the non-critical allowance is 7.
#[test]
fn fleet_hand_sequence() {
    let f = Fleet::new(10, 0.3, ns(1000)).unwrap();
    assert_eq!(f.non_critical_allowance(), 7);
    let mut s = f.fresh(Nanos(0));
    for i in 0..7 {
        assert_eq!(
            nums(f.apply(&mut s, Nanos(i), acquire(i + 1))),
            (true, 7, 6 - i, 1000, None)
        );
    }
    // At the allowance: refused until lease 1 expires at 1000.
    assert_eq!(
        nums(f.apply(&mut s, Nanos(7), acquire(8))),
        (false, 7, 0, 999, Some(993))
    );
    // Critical requests pass, beyond the reservation and beyond capacity; their limit is
    // the capacity and they count every lease.
    let mut remaining = Vec::new();
    for lease in 100..113 {
        let d = f.apply(&mut s, Nanos(8), critical(lease));
        assert!(d.allowed);
        assert_eq!(d.limit, 10);
        remaining.push(d.remaining);
    }
    assert_eq!(remaining[..4], [2, 1, 0, 0]);
    // They neither reduce nor free non-critical places.
    assert_eq!(
        nums(f.apply(&mut s, Nanos(9), acquire(8))),
        (false, 7, 0, 999, Some(991))
    );
    assert_eq!(
        nums(f.apply(&mut s, Nanos(9), check(1))),
        (false, 7, 0, 999, None)
    );
    assert_eq!(
        nums(f.apply(&mut s, Nanos(9), release(1))),
        (true, 7, 1, 999, None)
    );
    assert_eq!(
        nums(f.apply(&mut s, Nanos(9), check(1))),
        (true, 7, 1, 999, None)
    );
    assert_eq!(
        nums(f.apply(&mut s, Nanos(9), acquire(8))),
        (true, 7, 0, 1000, None)
    );
    // Releasing a critical lease reports the critical numbers.
    assert_eq!(
        nums(f.apply(&mut s, Nanos(9), release(100))),
        (true, 10, 0, 1000, None)
    );
    assert_eq!(s.in_flight_critical(Nanos(9)), 12);
    assert_eq!(s.in_flight_non_critical(Nanos(9)), 7);
    assert_eq!(s.in_flight(Nanos(9)), 19);
}

#[test]
fn fleet_retry_waits_for_a_non_critical_lease() {
    let f = Fleet::new(2, 0.5, ns(100)).unwrap();
    let mut s = f.fresh(Nanos(0));
    assert!(f.apply(&mut s, Nanos(0), critical(1)).allowed);
    assert!(f.apply(&mut s, Nanos(10), acquire(2)).allowed);
    // The critical lease expires first (100) but frees no non-critical place; lease 2 does.
    assert_eq!(
        nums(f.apply(&mut s, Nanos(20), acquire(3))),
        (false, 1, 0, 90, Some(90))
    );
}

#[test]
fn fleet_edges() {
    // r = 0: everything is non-critical capacity; critical still never refused.
    let f = Fleet::new(3, 0.0, ns(100)).unwrap();
    let mut s = f.fresh(Nanos(0));
    for lease in 0..3 {
        assert!(f.apply(&mut s, Nanos(0), acquire(lease)).allowed);
    }
    assert_eq!(
        nums(f.apply(&mut s, Nanos(0), acquire(3))),
        (false, 3, 0, 100, Some(100))
    );
    assert_eq!(
        nums(f.apply(&mut s, Nanos(0), critical(4))),
        (true, 3, 0, 100, None)
    );
    // r = 1: no non-critical request ever passes.
    let f = Fleet::new(3, 1.0, ns(100)).unwrap();
    assert_eq!(f.non_critical_allowance(), 0);
    let mut s = f.fresh(Nanos(0));
    assert_eq!(
        nums(f.apply(&mut s, Nanos(0), acquire(1))),
        (false, 0, 0, 0, None)
    );
    assert_eq!(
        nums(f.apply(&mut s, Nanos(0), critical(2))),
        (true, 3, 2, 100, None)
    );
    assert_eq!(
        nums(f.apply(&mut s, Nanos(0), acquire(1))),
        (false, 0, 0, 100, None)
    );
    assert_eq!(
        nums(f.apply(&mut s, Nanos(0), check(0))),
        (true, 0, 0, 100, None)
    );
}

#[test]
fn allowance_rounding() {
    let a = |cap, r| Fleet::new(cap, r, ns(1)).unwrap().non_critical_allowance();
    assert_eq!(a(10, 0.9), 1);
    assert_eq!(a(10, 0.3), 7);
    assert_eq!(a(10, 0.7), 3);
    assert_eq!(a(3, 0.5), 1);
    assert_eq!(a(100, 0.01), 99);
    assert_eq!(a(100, 0.015), 98);
    assert_eq!(a(1, 0.0), 1);
    assert_eq!(a(1, 1e-12), 1);
    assert_eq!(a(u64::MAX, 0.0), u64::MAX);
    assert_eq!(a(u64::MAX, 1.0), 0);
    assert_eq!(a(u64::MAX, 1e-300), u64::MAX);
}

#[test]
fn renewal_keeps_the_class_and_moves_the_expiry() {
    let f = Fleet::new(4, 0.5, ns(100)).unwrap();
    let mut s = f.fresh(Nanos(0));
    assert!(f.apply(&mut s, Nanos(0), acquire(1)).allowed);
    assert!(f.apply(&mut s, Nanos(10), acquire(2)).allowed);
    // Renewed as "critical": still a non-critical lease, now expiring at 150.
    assert_eq!(
        nums(f.apply(&mut s, Nanos(50), critical(1))),
        (true, 2, 0, 100, None)
    );
    assert_eq!(s.in_flight_critical(Nanos(50)), 0);
    // Lease 2 (110) is now the earliest.
    assert_eq!(
        nums(f.apply(&mut s, Nanos(60), acquire(3))),
        (false, 2, 0, 90, Some(50))
    );
    assert_eq!(s.in_flight(Nanos(110)), 1);
    assert_eq!(s.in_flight(Nanos(150)), 0);
}

#[test]
fn check_is_a_read_only_probe() {
    let c = Concurrency::new(3, ns(100)).unwrap();
    let mut s = c.fresh(Nanos(0));
    let _ = c.apply(&mut s, Nanos(0), acquire(1));
    let _ = c.apply(&mut s, Nanos(50), acquire(2));
    assert_eq!(
        nums(c.apply(&mut s, Nanos(60), check(1))),
        (true, 3, 1, 90, None)
    );
    assert_eq!(
        nums(c.apply(&mut s, Nanos(60), check(2))),
        (false, 3, 1, 90, None)
    );
    assert_eq!(
        nums(c.apply(&mut s, Nanos(60), check(0))),
        (true, 3, 1, 90, None)
    );
    // Above the limit: never; still no retry_after.
    assert_eq!(
        nums(c.apply(&mut s, Nanos(60), check(4))),
        (false, 3, 1, 90, None)
    );
    // Lease 1 expired at 100: the probe sees it, but does not drop it.
    assert_eq!(
        nums(c.apply(&mut s, Nanos(100), check(2))),
        (true, 3, 2, 50, None)
    );
    assert_eq!(s.held(), 2);
    assert_eq!(s.seen, 50);
}

#[test]
fn backwards_clock_counts_as_no_time_passed() {
    let c = Concurrency::new(1, ns(100)).unwrap();
    let mut s = c.fresh(Nanos(0));
    assert!(c.apply(&mut s, Nanos(500), acquire(1)).allowed);
    // 450 counts as 500: the lease was taken "now", durations measured from 450.
    assert_eq!(
        nums(c.apply(&mut s, Nanos(450), acquire(2))),
        (false, 1, 0, 150, Some(150))
    );
    assert_eq!(s.in_flight(Nanos(0)), 1);
    // A lease expired at the latest instant seen does not come back to life.
    assert!(c.apply(&mut s, Nanos(600), acquire(2)).allowed);
    assert!(!c.apply(&mut s, Nanos(550), release(1)).allowed);
    // Renewed at 550, which counts as 600: expiry 700, never earlier than one held.
    assert_eq!(
        nums(c.apply(&mut s, Nanos(550), acquire(2))),
        (true, 1, 0, 150, None)
    );
    // Released everything at an instant behind the clock: not fresh until the clock is
    // back at 600.
    assert!(c.apply(&mut s, Nanos(10), release(2)).allowed);
    let d = c.apply(&mut s, Nanos(10), check(0));
    assert_eq!(d.reset_after, ns(590));
    assert!(!c.is_fresh(&s, Nanos(599)));
    assert!(c.is_fresh(&s, Nanos(600)));
}

#[test]
fn constructors_validate_and_name_fields() {
    let field = |e: ConfigError| match e {
        ConfigError::Invalid { field, .. } => field,
        ConfigError::Missing { field } => field,
        other => panic!("{other}"),
    };
    let ttl = Duration::from_secs(1);
    assert_eq!(field(Concurrency::new(0, ttl).unwrap_err()), "capacity");
    assert_eq!(
        field(Concurrency::new(1, Duration::ZERO).unwrap_err()),
        "lease_ttl"
    );
    assert_eq!(field(Fleet::new(0, 0.5, ttl).unwrap_err()), "capacity");
    for r in [-0.1, 1.1, f64::NAN, f64::INFINITY, -0.0 - 1e-300] {
        let e = Fleet::new(1, r, ttl).unwrap_err();
        assert_eq!(field(e.clone()), "reserved_for_critical");
        assert!(e.to_string().contains(&r.to_string()), "{e}");
    }
    assert_eq!(
        field(Fleet::new(1, 0.5, Duration::MAX).unwrap_err()),
        "lease_ttl"
    );
    let c = Concurrency::new(5, ttl).unwrap();
    assert_eq!(
        (c.capacity(), c.lease_ttl(), c.name()),
        (5, ttl, "concurrency")
    );
    let f = Fleet::new(8, 0.25, ttl).unwrap();
    assert_eq!(
        (
            f.capacity(),
            f.reserved_for_critical(),
            f.lease_ttl(),
            f.name()
        ),
        (8, 0.25, ttl, "fleet")
    );
    assert_eq!(f.non_critical_allowance(), 6);
}

#[test]
fn unsupported_ops_are_probes() {
    let c = Concurrency::new(2, ns(100)).unwrap();
    let mut s = c.fresh(Nanos(0));
    let _ = c.apply(&mut s, Nanos(5), acquire(1));
    for op in [
        Op::Reserve { cost: 1 },
        Op::TryAcquire {
            cost: 2,
            timeout: Duration::ZERO,
        },
        Op::SetRate { rate: 1.0 },
    ] {
        assert!(!c.supports(op.kind()));
        let d = c.apply(&mut s, Nanos(6), op);
        assert_eq!(d, c.apply(&mut s, Nanos(6), check(op.cost())));
        assert_eq!((s.held(), s.seen), (1, 5));
    }
    for kind in [OpKind::Check, OpKind::Acquire, OpKind::Release] {
        assert!(c.supports(kind));
        assert!(Fleet::new(1, 0.5, ns(1)).unwrap().supports(kind));
    }
}

#[test]
fn steady_state_does_not_allocate() {
    let c = Concurrency::new(64, ns(1_000)).unwrap();
    let mut s = c.fresh(Nanos(0));
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let mut now = 0;
    let mut run = |s: &mut LeaseSet, steps: usize, caps: &mut (usize, usize)| {
        for _ in 0..steps {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            now += x % 7;
            let lease = x % 96;
            let op = if x.is_multiple_of(3) {
                release(lease)
            } else {
                Op::Acquire {
                    lease: lease.into(),
                    critical: x.is_multiple_of(5),
                }
            };
            let _ = c.apply(s, Nanos(now), op);
            caps.0 = caps.0.max(s.slots.capacity());
            caps.1 = caps.1.max(s.index.capacity());
        }
    };
    let mut warm = (0, 0);
    run(&mut s, 20_000, &mut warm);
    let mut steady = warm;
    run(&mut s, 50_000, &mut steady);
    assert_eq!(steady, warm);
}

// ---- Property tests against a naive model ----

/// The rule written the obvious way: a list of (lease, expiry, critical), scanned each time.
#[derive(Debug, Clone, Default)]
struct Model {
    leases: Vec<(LeaseId, u64, bool)>,
    seen: u64,
}

struct Params {
    capacity: u64,
    allowance: u64,
    shed: bool,
    ttl: u64,
}

impl Params {
    /// Whether a lease of class `lease` counts against the limit of an operation of class
    /// `op`: always, except critical leases for a non-critical fleet operation.
    fn counts_against(&self, op: bool, lease: bool) -> bool {
        !(self.shed && !op && lease)
    }
}

impl Model {
    fn apply(&mut self, p: &Params, now: u64, op: Op) -> Decision {
        let at = now.max(self.seen);
        if matches!(op, Op::Acquire { .. } | Op::Release { .. }) {
            self.seen = at;
            self.leases.retain(|l| l.1 > at);
        }
        let live: Vec<(LeaseId, u64, bool)> =
            self.leases.iter().copied().filter(|l| l.1 > at).collect();
        let counts = |crit: bool| -> u64 {
            live.iter().filter(|l| p.counts_against(crit, l.2)).count() as u64
        };
        let limit = |crit: bool| {
            if p.shed && crit {
                p.capacity
            } else {
                p.allowance
            }
        };
        let (allowed, class, retry) = match op {
            Op::Acquire { lease, critical } => {
                if let Some(l) = self.leases.iter_mut().find(|l| l.0 == lease) {
                    l.1 = at.saturating_add(p.ttl);
                    (true, l.2, None)
                } else if (p.shed && critical) || counts(critical) < limit(critical) {
                    self.leases
                        .push((lease, at.saturating_add(p.ttl), critical));
                    (true, critical, None)
                } else {
                    let retry = live.iter().filter(|l| !p.shed || !l.2).map(|l| l.1).min();
                    (false, critical, retry)
                }
            }
            Op::Release { lease } => match self.leases.iter().position(|l| l.0 == lease) {
                Some(i) => (true, self.leases.remove(i).2, None),
                None => (false, false, None),
            },
            other => (
                counts(false).saturating_add(other.cost()) <= limit(false),
                false,
                None,
            ),
        };
        let live: Vec<(LeaseId, u64, bool)> =
            self.leases.iter().copied().filter(|l| l.1 > at).collect();
        let counted = live.iter().filter(|l| p.counts_against(class, l.2)).count() as u64;
        let last = live.iter().map(|l| l.1).max().unwrap_or(0).max(self.seen);
        Decision {
            allowed,
            limit: limit(class),
            remaining: limit(class).saturating_sub(counted),
            reset_after: ns(last.saturating_sub(now)),
            retry_after: retry.map(|t| ns(t - now)),
            wait: Duration::ZERO,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Acquire(u64, bool),
    Release(u64),
    Check(u64),
}

impl Step {
    fn op(self) -> Op {
        match self {
            Step::Acquire(lease, critical) => Op::Acquire {
                lease: lease.into(),
                critical,
            },
            Step::Release(lease) => Op::Release {
                lease: lease.into(),
            },
            Step::Check(cost) => Op::Check { cost },
        }
    }
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u64..8, any::<bool>()).prop_map(|(l, c)| Step::Acquire(l, c)),
        2 => (0u64..8).prop_map(Step::Release),
        1 => (0u64..5).prop_map(Step::Check),
    ]
}

/// Mostly forward, sometimes backwards, time steps.
fn dt() -> impl Strategy<Value = i64> {
    prop_oneof![4 => 0i64..12, 1 => -15i64..0]
}

/// Either algorithm, as the property tests drive them.
enum Subject {
    Concurrency(Concurrency),
    Fleet(Fleet),
}

impl Subject {
    fn new(fleet: bool, capacity: u64, reserved: f64, ttl: u64) -> Subject {
        if fleet {
            Subject::Fleet(Fleet::new(capacity, reserved, ns(ttl)).unwrap())
        } else {
            Subject::Concurrency(Concurrency::new(capacity, ns(ttl)).unwrap())
        }
    }

    fn apply(&self, s: &mut LeaseSet, now: u64, op: Op) -> Decision {
        match self {
            Subject::Concurrency(c) => c.apply(s, Nanos(now), op),
            Subject::Fleet(f) => f.apply(s, Nanos(now), op),
        }
    }

    fn is_fresh(&self, s: &LeaseSet, now: u64) -> bool {
        match self {
            Subject::Concurrency(c) => c.is_fresh(s, Nanos(now)),
            Subject::Fleet(f) => f.is_fresh(s, Nanos(now)),
        }
    }

    /// The parameters, for the model.
    fn params(&self) -> Params {
        match self {
            Subject::Concurrency(c) => Params {
                capacity: c.capacity(),
                allowance: c.capacity(),
                shed: false,
                ttl: c.lease_ttl().as_nanos() as u64,
            },
            Subject::Fleet(f) => Params {
                capacity: f.capacity(),
                allowance: f.non_critical_allowance(),
                shed: true,
                ttl: f.lease_ttl().as_nanos() as u64,
            },
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every decision equals the naive model's; in-flight never exceeds the limit; the
    /// accessors agree with the model; retry_after and reset_after are exact.
    #[test]
    fn matches_naive_model_and_bound(
        fleet in any::<bool>(),
        capacity in 1u64..6,
        reserved in prop_oneof![Just(0.0), Just(0.5), Just(1.0), 0.0f64..=1.0],
        ttl in 1u64..40,
        steps in prop::collection::vec((dt(), step()), 1..150),
    ) {
        let alg = Subject::new(fleet, capacity, reserved, ttl);
        let p = alg.params();
        let mut s = LeaseSet::new();
        let mut m = Model::default();
        let mut now = 100u64;
        for (dt, step) in steps {
            now = now.saturating_add_signed(dt);
            let op = step.op();
            let d = alg.apply(&mut s, now, op);
            prop_assert_eq!(d, m.apply(&p, now, op), "{:?} at {}", op, now);

            let at = now.max(m.seen);
            let live = |crit: bool| {
                m.leases.iter().filter(|l| l.1 > at && l.2 == crit).count() as u64
            };
            prop_assert_eq!(s.in_flight_critical(Nanos(now)), live(true));
            prop_assert_eq!(s.in_flight_non_critical(Nanos(now)), live(false));
            prop_assert_eq!(s.in_flight(Nanos(now)), live(true) + live(false));
            if fleet {
                prop_assert!(live(false) <= p.allowance);
            } else {
                prop_assert!(live(true) + live(false) <= capacity);
            }
            prop_assert_eq!(s.held(), m.leases.len());

            if let (Op::Acquire { .. }, Some(r)) = (op, d.retry_after) {
                let r = r.as_nanos() as u64;
                prop_assert!(r > 0);
                prop_assert!(!alg.apply(&mut s.clone(), now + r - 1, op).allowed);
                prop_assert!(alg.apply(&mut s.clone(), now + r, op).allowed);
            }
            let reset = d.reset_after.as_nanos() as u64;
            prop_assert!(alg.is_fresh(&s, now + reset));
            if reset > 0 {
                prop_assert!(!alg.is_fresh(&s, now + reset - 1));
            }
        }
    }

    /// Once `is_fresh`, the state and a fresh one decide alike at every later instant ≥ now.
    #[test]
    fn is_fresh_is_sound(
        fleet in any::<bool>(),
        capacity in 1u64..5,
        reserved in 0.0f64..=1.0,
        ttl in 1u64..30,
        before in prop::collection::vec((dt(), step()), 0..60),
        after in prop::collection::vec((0i64..12, step()), 1..60),
    ) {
        let alg = Subject::new(fleet, capacity, reserved, ttl);
        let mut s = LeaseSet::new();
        let mut now = 100u64;
        for (dt, step) in before {
            now = now.saturating_add_signed(dt);
            let _ = alg.apply(&mut s, now, step.op());
        }
        while !alg.is_fresh(&s, now) {
            now += 1;
        }
        let mut f = LeaseSet::new();
        for (dt, step) in after {
            now += dt as u64;
            prop_assert_eq!(alg.apply(&mut s, now, step.op()), alg.apply(&mut f, now, step.op()));
        }
    }

    /// No input panics: extreme capacities, lease ttls, lease ids, costs and instants.
    #[test]
    fn never_panics(
        fleet in any::<bool>(),
        capacity in prop_oneof![Just(1u64), Just(u64::MAX), any::<u64>(), 1u64..10],
        reserved in prop_oneof![Just(0.0), Just(1.0), Just(1e-300), 0.0f64..=1.0],
        ttl in prop_oneof![Just(1u64), Just(u64::MAX), any::<u64>()],
        ops in prop::collection::vec(
            (prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>(), 0u64..50],
             prop_oneof![Just(0u64), Just(u64::MAX), 0u64..4, any::<u64>()],
             0u8..3,
             any::<bool>()),
            1..60,
        ),
    ) {
        let Ok(c) = Concurrency::new(capacity, ns(ttl)) else { return Ok(()); };
        let Ok(f) = Fleet::new(capacity, reserved, ns(ttl)) else { return Ok(()); };
        let alg: &dyn Fn(&mut LeaseSet, Nanos, Op) -> Decision = if fleet {
            &|s, t, op| f.apply(s, t, op)
        } else {
            &|s, t, op| c.apply(s, t, op)
        };
        let mut s = LeaseSet::new();
        for (now, x, kind, crit) in ops {
            let op = match kind {
                0 => Op::Acquire { lease: x.into(), critical: crit },
                1 => Op::Release { lease: x.into() },
                _ => Op::Check { cost: x },
            };
            let d = alg(&mut s, Nanos(now), op);
            prop_assert!(d.remaining <= d.limit);
            s.in_flight(Nanos(now));
            c.is_fresh(&s, Nanos(now));
        }
    }
}
