//! Properties every algorithm must have, written once for all of them: well-formed
//! decisions, the admission bound over every interval, and sound `is_fresh`; and the small
//! helpers every algorithm's tests use. Test-only.

use crate::algorithm::Algorithm;
use crate::{Decision, Nanos, Op};
use proptest::prelude::*;

/// `Op::Check { cost }`: the operation most tests apply.
pub(crate) fn check(cost: u64) -> Op {
    Op::Check { cost }
}

/// `n` milliseconds.
pub(crate) const fn ms(n: u64) -> std::time::Duration {
    std::time::Duration::from_millis(n)
}

/// `n` nanoseconds.
pub(crate) const fn ns(n: u64) -> std::time::Duration {
    std::time::Duration::from_nanos(n)
}

/// The cost an operation asks for (0 for `set_rate`).
pub(crate) fn cost(op: &Op) -> u64 {
    op.cost()
}

/// A time step: mostly small forward steps up to `scale` ns, some repeats of the same
/// instant, some long idle gaps (up to `50 × scale`) and some steps backwards.
pub(crate) fn step(scale: u64) -> impl Strategy<Value = i128> {
    let scale = scale as i128;
    prop_oneof![
        6 => 0..=scale,
        2 => Just(0i128),
        1 => scale..=scale * 50,
        1 => -scale..0,
    ]
}

/// Instants from `start` by `steps`, clamped to `u64`.
pub(crate) fn timeline(start: u64, steps: &[i128]) -> Vec<Nanos> {
    let mut t = start as i128;
    steps
        .iter()
        .map(|s| {
            t = (t + s).clamp(0, u64::MAX as i128);
            Nanos(t as u64)
        })
        .collect()
}

/// Runs `events` on `state`, checking every decision is well formed.
pub(crate) fn run<A: Algorithm>(
    alg: &A,
    state: &mut A::State,
    events: &[(Nanos, Op)],
    shaper: bool,
) -> Vec<Decision> {
    events
        .iter()
        .map(|&(now, op)| {
            let d = alg.apply(state, now, op);
            assert_well_formed(&d, shaper);
            d
        })
        .collect()
}

/// What every decision must satisfy whatever the algorithm.
pub(crate) fn assert_well_formed(d: &Decision, shaper: bool) {
    assert!(d.remaining <= d.limit, "remaining above limit: {d:?}");
    if d.allowed {
        assert_eq!(d.retry_after, None, "allowed with a retry: {d:?}");
    } else {
        assert_eq!(
            d.wait,
            std::time::Duration::ZERO,
            "denied with a wait: {d:?}"
        );
    }
    if !shaper {
        assert_eq!(d.wait, std::time::Duration::ZERO, "a policer waits: {d:?}");
    }
}

/// The instants as the algorithm sees them: the running maximum over operations that change
/// state (cost above 0), from the instant the key was first seen.
pub(crate) fn effective(start: Nanos, events: &[(Nanos, Op)]) -> Vec<u64> {
    running_max(start, events.iter().map(|(t, op)| (t.0, cost(op) > 0)))
}

/// [`effective`] for algorithms that record only admissions (the buckets): the running maximum
/// over admitted operations of cost above 0, from the instant the key was first seen.
pub(crate) fn effective_admitted(
    start: Nanos,
    events: &[(Nanos, Op)],
    decisions: &[Decision],
) -> Vec<u64> {
    let recorded = events.iter().zip(decisions);
    running_max(
        start,
        recorded.map(|((t, op), d)| (t.0, cost(op) > 0 && d.allowed)),
    )
}

/// For each `(instant, recorded)`, the latest recorded instant so far (`start` before any).
fn running_max(start: Nanos, instants: impl Iterator<Item = (u64, bool)>) -> Vec<u64> {
    let mut max = start.0;
    instants
        .map(|(t, recorded)| {
            if recorded {
                max = max.max(t);
            }
            max
        })
        .collect()
}

/// For every closed interval `[t_i, t_j]` spanned by the admitted `(instant, cost)` pairs,
/// the admitted cost is within `bound(t_j − t_i)`.
pub(crate) fn assert_bound(mut admitted: Vec<(u64, u64)>, bound: impl Fn(u64) -> f64) {
    admitted.sort_by_key(|&(t, _)| t);
    for i in 0..admitted.len() {
        let mut sum = 0u128;
        for j in i..admitted.len() {
            sum += admitted[j].1 as u128;
            let span = admitted[j].0 - admitted[i].0;
            assert!(
                sum as f64 <= bound(span),
                "admitted {sum} within {span} ns, bound {}",
                bound(span)
            );
        }
    }
}

/// At each event `k` where `is_fresh(state, t_k)` holds and no later event is earlier than
/// `t_k`, going on from the state and going on from `fresh(t_k)` must decide the same.
/// Returns how many such points were compared.
pub(crate) fn assert_fresh_is_sound<A: Algorithm>(
    alg: &A,
    first: Nanos,
    events: &[(Nanos, Op)],
) -> usize {
    let mut state = alg.fresh(first);
    let mut compared = 0;
    for k in 0..events.len() {
        let now = events[k].0;
        let rest = &events[k..];
        if alg.is_fresh(&state, now) && rest.iter().all(|&(t, _)| t >= now) {
            let kept = run(alg, &mut state.clone(), rest, true);
            let renewed = run(alg, &mut alg.fresh(now), rest, true);
            assert_eq!(kept, renewed, "is_fresh was wrong at event {k}");
            compared += 1;
        }
        let _ = alg.apply(&mut state, now, events[k].1);
    }
    compared
}

/// Runs `before` from a fresh state, then moves on `idle_step` nanoseconds at a time until the
/// state is fresh, then requires the state and `fresh(now)` to decide `after` alike. Events
/// are `(nanoseconds forward, operation)`.
pub(crate) fn assert_fresh_after_idle<A: Algorithm>(
    alg: &A,
    before: &[(u64, Op)],
    after: &[(u64, Op)],
    idle_step: u64,
) {
    let mut state = alg.fresh(Nanos(0));
    let mut now = 0u64;
    for &(dt, op) in before {
        now += dt;
        let _ = alg.apply(&mut state, Nanos(now), op);
    }
    while !alg.is_fresh(&state, Nanos(now)) {
        now += idle_step;
    }
    let mut renewed = alg.fresh(Nanos(now));
    for &(dt, op) in after {
        now += dt;
        assert_eq!(
            alg.apply(&mut state, Nanos(now), op),
            alg.apply(&mut renewed, Nanos(now), op),
            "is_fresh was wrong at {now} ns"
        );
    }
}
