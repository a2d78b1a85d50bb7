use super::*;
use proptest::prelude::*;

const SECOND: Duration = Duration::from_secs(1);

fn terms(capacity: u64) -> ClaimTerms {
    ClaimTerms {
        capacity,
        ttl: Duration::from_secs(17),
        idle: Duration::from_secs(15),
    }
}

fn alike(count: u64, each: u64) -> Group {
    Group {
        count,
        demand: count * each,
        margin: 0,
    }
}

fn report<'a>(claimant: &'a str, groups: &'a [Group], held: u64) -> ClaimStep<'a> {
    ClaimStep::Report {
        claimant,
        groups,
        held,
        wanted: 0,
    }
}

#[test]
fn the_division_is_fair_across_clients_not_nodes() {
    // Three clients on node x and one on node y, 50 each, on 100: 75 and 25 (25 a client).
    let mut claims = Claims::new();
    let at = Nanos::from_secs;
    let x = [alike(3, 50)];
    let y = [alike(1, 50)];
    // y alone: its 50 and half the 50 left.
    let first = claims.apply(report("y", &y, 0), &terms(100), at(1));
    assert_eq!(first.granted, Some(75));
    // x joins: its target is 75, but y holds 75 until it shrinks; x gets the 25 kept.
    assert_eq!(
        claims.apply(report("x", &x, 0), &terms(100), at(1)).granted,
        Some(25)
    );
    assert_eq!(
        claims
            .apply(report("y", &y, 75), &terms(100), at(2))
            .granted,
        Some(25)
    );
    assert_eq!(
        claims
            .apply(report("y", &y, 25), &terms(100), at(2))
            .granted,
        Some(25)
    );
    let second = claims.apply(report("x", &x, 0), &terms(100), at(3));
    assert_eq!(
        second,
        Claimed {
            granted: Some(75),
            demand: 200,
            in_force: 100,
            clients: 4,
            nodes: 2
        }
    );
    assert_eq!(claims.targets(100), [75, 25]);
}

#[test]
fn a_node_that_joins_is_served_out_of_what_is_kept() {
    let mut claims = Claims::new();
    let at = Nanos::from_secs;
    // One client using 2 of 100: half of the 98 left is kept, and of the 51 handed out it
    // gets its 2 and a quarter of them.
    let a = [alike(1, 2)];
    assert_eq!(
        claims.apply(report("a", &a, 0), &terms(100), at(1)).granted,
        Some(14)
    );
    // A second node's client joins: its target, out of the room kept, at once.
    let b = [alike(1, 2)];
    let joined = claims.apply(report("b", &b, 0), &terms(100), at(2));
    assert_eq!((joined.granted, joined.in_force), (Some(8), 22));
    // a reports again: shrinks to its new target; what its clients hold stays counted.
    let again = claims.apply(report("a", &a, 14), &terms(100), at(3));
    assert_eq!((again.granted, again.in_force), (Some(8), 22));
    let shrunk = claims.apply(report("a", &a, 8), &terms(100), at(4));
    assert_eq!((shrunk.granted, shrunk.in_force), (Some(8), 16));
    // b's newcomers ask for 30 more than b holds: granted past its target, out of the room.
    let asked = ClaimStep::Report {
        claimant: "b",
        groups: &b,
        held: 8,
        wanted: 30,
    };
    let room = claims.apply(asked, &terms(100), at(5));
    assert_eq!((room.granted, room.in_force), (Some(38), 46));
    // Asking for more than is left gets what is left.
    let greedy = ClaimStep::Report {
        claimant: "b",
        groups: &b,
        held: 38,
        wanted: 1_000,
    };
    assert_eq!(claims.apply(greedy, &terms(100), at(6)).granted, Some(92));
    // Its next report, asking nothing, brings it back to its target.
    assert_eq!(
        claims.apply(report("b", &b, 8), &terms(100), at(7)).granted,
        Some(8)
    );
}

#[test]
fn a_growing_node_waits_for_the_shrinking_and_a_leaver_until_its_grant_ends() {
    let mut claims = Claims::new();
    let at = Nanos::from_secs;
    let hot = [alike(1, 100)];
    assert_eq!(
        claims
            .apply(report("a", &hot, 0), &terms(100), at(0))
            .granted,
        Some(100)
    );
    // b arrives wanting 100 too: its target is 50, but a holds all 100.
    assert_eq!(
        claims
            .apply(report("b", &hot, 0), &terms(100), at(1))
            .granted,
        Some(0)
    );
    assert_eq!(
        claims
            .apply(report("a", &hot, 100), &terms(100), at(2))
            .granted,
        Some(50)
    );
    assert_eq!(
        claims
            .apply(report("a", &hot, 50), &terms(100), at(3))
            .granted,
        Some(50)
    );
    assert_eq!(
        claims
            .apply(report("b", &hot, 0), &terms(100), at(3))
            .granted,
        Some(50)
    );
    // a leaves: b's target is 100 at once, but a's 50 are in force until 3 + 17 s.
    let left = claims.apply(ClaimStep::Leave { claimant: "a" }, &terms(100), at(4));
    assert_eq!((left.granted, left.in_force, left.nodes), (None, 100, 1));
    assert_eq!(
        claims
            .apply(report("b", &hot, 50), &terms(100), at(5))
            .granted,
        Some(50)
    );
    assert_eq!(
        claims
            .apply(report("b", &hot, 50), &terms(100), at(12))
            .granted,
        Some(50)
    );
    assert_eq!(
        claims
            .apply(report("b", &hot, 50), &terms(100), at(20))
            .granted,
        Some(100)
    );
}

#[test]
fn a_quiet_node_expires_and_its_grant_ends_later() {
    let mut claims = Claims::new();
    let at = Nanos::from_secs;
    let g = [alike(2, 30)];
    claims.apply(report("quiet", &g, 0), &terms(100), at(0));
    claims.apply(report("busy", &g, 0), &terms(100), at(10));
    let alone = claims.apply(report("busy", &g, 0), &terms(100), at(16));
    assert_eq!((alone.nodes, alone.clients), (1, 2));
    assert_eq!(
        claims
            .iter()
            .map(|c| c.claimant.as_str())
            .collect::<Vec<_>>(),
        ["busy"]
    );
}

#[test]
fn a_report_is_read_over_its_window_and_no_less_than_the_least() {
    let least = Duration::from_millis(100);
    // 50 requests over 5 s: 10 a second, 600 a minute (in thousandths).
    assert_eq!(demand_per_unit(50, 5 * SECOND, SECOND, least), 10_000);
    assert_eq!(demand_per_unit(50, 5 * SECOND, 60 * SECOND, least), 600_000);
    // Over 1 s, 90 is 90 a second.
    assert_eq!(demand_per_unit(90, SECOND, SECOND, least), 90_000);
    // Over 10 ms, read over 100 ms.
    assert_eq!(
        demand_per_unit(1, Duration::from_millis(10), SECOND, least),
        10_000
    );
    assert_eq!(demand_per_unit(0, SECOND, SECOND, least), 0);
    assert_eq!(
        demand_per_unit(
            u64::MAX,
            Duration::from_nanos(1),
            86_400 * SECOND,
            Duration::ZERO
        ),
        u64::MAX
    );
}

/// Nodes reporting, shrinking and growing honestly (what their clients hold is never more
/// than their last grant, or what they held before it), leaving and going quiet, in any order
/// and at any times.
fn history() -> impl Strategy<Value = Vec<(u8, u8, u64, u64, u64)>> {
    prop::collection::vec((0u8..4, 0u8..5, 1u64..40, 0u64..500, 0u64..6), 0..80)
}

proptest! {
    /// Whatever happens, the claims stay sorted and unique and the grants in force never sum
    /// to more than the capacity.
    #[test]
    fn the_grants_in_force_never_sum_to_more_than_the_capacity(
        history in history(),
        capacity in 0u64..1_000,
    ) {
        let terms = terms(capacity);
        let mut claims = Claims::new();
        // What each node's clients hold, and until when: at most the larger of its last grant
        // and what they held when it was made, for the grant's time to live; a node that
        // leaves still holds it.
        let mut held = [(0u64, Nanos::ZERO); 5];
        let holds = |(amount, until): (u64, Nanos), now: Nanos| if until > now { amount } else { 0 };
        let mut now = Nanos::from_secs(1);
        for (op, who, count, each, step) in history {
            now = now.saturating_add(Duration::from_secs(step));
            let name = format!("node-{who}");
            match op {
                0..=2 => {
                    let groups = [alike(count, each)];
                    let had = holds(held[who as usize], now);
                    // Now and then the node asks for room for newcomers.
                    let wanted = if op == 2 { each } else { 0 };
                    let step = ClaimStep::Report { claimant: &name, groups: &groups, held: had, wanted };
                    let got = claims.apply(step, &terms, now);
                    let granted = got.granted.unwrap_or(0);
                    held[who as usize] = (granted.max(had), now.saturating_add(terms.ttl));
                }
                _ => {
                    claims.apply(ClaimStep::Leave { claimant: &name }, &terms, now);
                }
            }
            let names: Vec<&str> = claims.iter().map(|c| c.claimant.as_str()).collect();
            let mut sorted = names.clone();
            sorted.sort_unstable();
            sorted.dedup();
            prop_assert_eq!(&names, &sorted);
            prop_assert!(claims.in_force(now) <= capacity, "{} of {capacity}", claims.in_force(now));
        }
    }

    /// Once demands hold still, three reports each, in any order, bring every node to its
    /// target, starting from the grants of other demands.
    #[test]
    fn three_reports_each_bring_every_node_to_its_target(
        demands in prop::collection::vec((1u64..20, 0u64..300, 0u64..300), 1..6),
        capacity in 0u64..1_000,
        order in prop::collection::vec(0usize..6, 0..30),
    ) {
        let terms = terms(capacity);
        let mut claims = Claims::new();
        let now = Nanos::from_secs(1);
        let name = |i: usize| format!("node-{i}");
        let n = demands.len();
        let mut held = vec![0u64; n];
        for (i, (count, before, _)) in demands.iter().enumerate() {
            let got = claims.apply(report(&name(i), &[alike(*count, *before)], 0), &terms, now);
            held[i] = got.granted.unwrap_or(0);
        }
        // The first round changes the demands; three more follow.
        for _ in 0..4 {
            let mut round: Vec<usize> = (0..n).collect();
            for (k, swap) in order.iter().enumerate() {
                round.swap(k % n, swap % n);
            }
            for i in round {
                let (count, _, after) = demands[i];
                let got = claims.apply(report(&name(i), &[alike(count, after)], held[i]), &terms, now);
                held[i] = got.granted.unwrap_or(0);
            }
        }
        prop_assert_eq!(held, claims.targets(capacity));
    }
}
