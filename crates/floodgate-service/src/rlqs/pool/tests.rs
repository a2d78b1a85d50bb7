use std::time::Duration;

use floodgate::quota::share::margin;
use floodgate::quota::{ClaimStep, ClaimTerms, Claims};
use proptest::prelude::*;

use super::*;

const TTL: Duration = Duration::from_secs(15);

fn terms(capacity: u64) -> ClaimTerms {
    ClaimTerms {
        capacity: capacity * 1000,
        ttl: TTL + Duration::from_secs(2),
        idle: Duration::from_secs(15),
    }
}

/// A node's step, as the ledger takes it, on claims kept in memory.
fn step(pool: &mut Pool, claims: &mut Claims, node: &str, capacity: u64, now: Nanos, all: bool) {
    pool.expire(now, terms(capacity).idle);
    let (groups, held, wanted) = pool.claim(now, !all);
    let step = match groups.is_empty() {
        true => ClaimStep::Leave { claimant: node },
        false => ClaimStep::Report {
            claimant: node,
            groups: &groups,
            held,
            wanted,
        },
    };
    let claimed = claims.apply(step, &terms(capacity), now);
    pool.stepped(Some(claimed), now, all);
}

/// A stream's report of `per_second` (thousandths), answered as the ledger answers it.
fn ask(
    pool: &mut Pool,
    claims: &mut Claims,
    node: &str,
    stream: &str,
    per_second: u64,
    now: Nanos,
) -> Option<u64> {
    pool.report(stream, per_second, margin(per_second, 1.0, 1000), now);
    if pool.due(now) {
        step(pool, claims, node, 100, now, true);
    }
    if pool.wants_room(stream, now) && pool.fresh(now) {
        step(pool, claims, node, 100, now, false);
    }
    pool.send(stream, now, TTL, false)
}

#[test]
fn streams_of_two_nodes_share_as_streams_not_as_nodes() {
    // Three streams on node x and one on node y, 50 a second each, on 100: 25 each.
    let mut claims = Claims::new();
    let (mut x, mut y) = (Pool::new(), Pool::new());
    let mut got = Vec::new();
    for second in 0..6 {
        let now = Nanos::from_secs(second);
        got.clear();
        for s in ["x1", "x2", "x3"] {
            got.push(ask(&mut x, &mut claims, "x", s, 50_000, now));
        }
        got.push(ask(&mut y, &mut claims, "y", "y1", 50_000, now));
    }
    assert_eq!(got, [Some(25_000); 4]);
    assert_eq!(x.grant() + y.grant(), 100_000);
}

#[test]
fn newcomers_on_a_bucket_under_its_limit_are_never_denied() {
    // 320 streams join one bucket of 100 a second, one every 10 ms, each with its first
    // report (one request over 5 s, so 64 a second in all), while those that joined tick
    // every second as the service's streams do: each is assigned at once, none nothing. (The
    // reserve, half of what the demands leave, holds the 20 a second of new demand that
    // each second brings while the demands are at most 60.)
    let mut claims = Claims::new();
    let mut pool = Pool::new();
    let start = Nanos::from_secs(1);
    let mut joined: Vec<String> = Vec::new();
    for i in 0..320u64 {
        let now = start.saturating_add(Duration::from_millis(10 * i));
        if i % 100 == 99 {
            for stream in &joined {
                if pool.due(now) {
                    step(&mut pool, &mut claims, "x", 100, now, true);
                }
                let told = pool.send(stream, now, TTL, true);
                assert!(told != Some(0), "{stream} told to deny at {now:?}");
            }
        }
        let stream = format!("s{i}");
        let got = ask(&mut pool, &mut claims, "x", &stream, 200, now);
        assert!(got.is_some_and(|g| g > 0), "stream {i}: {got:?}");
        joined.push(stream);
        assert!(pool.in_force(now) <= 100_000);
    }
}

#[test]
fn a_newcomer_beside_a_quiet_stream_gets_its_demand_at_once() {
    // Limit 100, one stream using 2 a second; a second joins: not 0, at least its demand.
    let mut claims = Claims::new();
    let mut pool = Pool::new();
    for second in 0..3 {
        ask(
            &mut pool,
            &mut claims,
            "x",
            "old",
            2_000,
            Nanos::from_secs(second),
        );
    }
    let now = Nanos::from_millis(3_500);
    let got = ask(&mut pool, &mut claims, "x", "new", 200, now).expect("sent");
    // At least its need: its demand and a margin.
    assert!(got >= 200 + margin(200, 1.0, 1000), "{got}");
}

/// Streams on three nodes reporting, joining, leaving and ticking at random.
fn history() -> impl Strategy<Value = Vec<(u8, u8, u8, u64, u64)>> {
    prop::collection::vec(
        (
            0u8..4,
            0u8..3,
            0u8..6,
            prop_oneof![0u64..500, 0u64..300_000],
            0u64..1_500,
        ),
        1..200,
    )
}

proptest! {
    /// Whatever the streams do, what every Envoy of every node holds in force never sums to
    /// more than the limit (thousandths of a request per unit).
    #[test]
    fn what_the_envoys_hold_never_sums_past_the_limit(history in history(), capacity in 1u64..300) {
        let mut claims = Claims::new();
        let mut pools = [Pool::new(), Pool::new(), Pool::new()];
        let nodes = ["a", "b", "c"];
        let mut now = Nanos::from_secs(1);
        for (op, node, stream, demand, after_ms) in history {
            now = now.saturating_add(Duration::from_millis(after_ms));
            let n = usize::from(node);
            let pool = &mut pools[n];
            let stream = format!("s{stream}");
            match op {
                0 | 1 => {
                    pool.report(&stream, demand, margin(demand, 1.0, 1000), now);
                    if pool.due(now) {
                        step(pool, &mut claims, nodes[n], capacity, now, true);
                    }
                    if pool.wants_room(&stream, now) && pool.fresh(now) {
                        step(pool, &mut claims, nodes[n], capacity, now, false);
                    }
                    pool.send(&stream, now, TTL, false);
                }
                2 => {
                    if pool.due(now) {
                        step(pool, &mut claims, nodes[n], capacity, now, true);
                    }
                    pool.send(&stream, now, TTL, true);
                }
                _ => {
                    pool.leave(&stream, now);
                    if pool.is_empty() {
                        step(pool, &mut claims, nodes[n], capacity, now, true);
                    }
                }
            }
            let held: u64 = pools.iter().map(|p| p.in_force(now)).sum();
            prop_assert!(held <= capacity * 1000, "{held} held of {capacity}");
        }
    }
}

/// Streams on two nodes that report every 5 s and tick every second, as Envoy's and the
/// service's do:
/// `demand(i, second)` thousandths a second for stream `i`; returns what each holds (what it
/// was last sent) at the end of `seconds`.
fn fleet(
    capacity: u64,
    streams: usize,
    seconds: u64,
    demand: impl Fn(usize, u64) -> u64,
) -> Vec<u64> {
    let mut claims = Claims::new();
    let mut pools = [Pool::new(), Pool::new()];
    let nodes = ["a", "b"];
    let mut held = vec![0u64; streams];
    let mut joined = vec![false; streams];
    for ms in (0..seconds * 1000).step_by(100) {
        let now = Nanos::from_millis(1_000 + ms);
        let second = ms / 1000;
        for (i, held) in held.iter_mut().enumerate() {
            let n = i % 2;
            let mut d = demand(i, second);
            let pool = &mut pools[n];
            if d == 0 {
                // Gone (or not come yet): a stream that was there leaves.
                if std::mem::take(&mut joined[i]) {
                    pool.leave(&format!("s{i}"), now);
                    *held = 0;
                }
                continue;
            }
            let phase = (i as u64 * 37) % 50 * 100;
            let name = format!("s{i}");
            // A stream's first report counts its first request over 5 s.
            let first = !joined[i];
            if first {
                joined[i] = true;
                d = 200;
            }
            let told = if first || ms % 5_000 == phase {
                pool.report(&name, d, margin(d, 1.0, 1000), now);
                if pool.due(now) {
                    step(pool, &mut claims, nodes[n], capacity, now, true);
                }
                if pool.wants_room(&name, now) && pool.fresh(now) {
                    step(pool, &mut claims, nodes[n], capacity, now, false);
                }
                pool.send(&name, now, TTL, false)
            } else if ms % 1_000 == phase % 1_000 {
                if pool.due(now) {
                    step(pool, &mut claims, nodes[n], capacity, now, true);
                }
                pool.send(&name, now, TTL, true)
            } else {
                None
            };
            if let Some(t) = told {
                *held = t;
            }
        }
        let sum: u64 = pools.iter().map(|p| p.in_force(now)).sum();
        assert!(sum <= capacity * 1000, "{sum} held at {ms} ms");
    }
    held
}

#[test]
fn hundreds_of_streams_on_two_nodes_hold_their_needs_under_the_limit() {
    // 200 streams wanting 5 a second on 3,000, 100 more from the 10th second: every one holds
    // at least its need (5 and √5) by the 20th (two of Envoy's reporting intervals).
    let held = fleet(3_000, 300, 20, |i, s| match i < 200 || s >= 10 {
        true => 5_000,
        false => 0,
    });
    let need = 5_000 + margin(5_000, 1.0, 1000);
    let short: Vec<(usize, u64)> = held
        .iter()
        .enumerate()
        .filter(|(_, h)| **h * 100 < need * 95)
        .map(|(i, h)| (i, *h))
        .collect();
    assert!(
        short.is_empty(),
        "{} short of {need}: {:?}",
        short.len(),
        &short[..short.len().min(8)]
    );
}

#[test]
fn when_half_the_greedy_streams_leave_the_rest_share_what_they_held() {
    // 100 streams wanting 2 a second and 200 wanting 40, on 3,000; from the 10th second half
    // the greedy ones are gone. By the 26th (their last assignments expired, 6 s, and two
    // reporting intervals), every greedy one left holds within 5% of the new level.
    let demand =
        |i: usize, s: u64| match (i.is_multiple_of(3), (i / 3).is_multiple_of(2) && s >= 10) {
            (true, _) => 2_000,
            (false, true) => 0,
            (false, false) => 40_000,
        };
    let held = fleet(3_000, 300, 26, demand);
    let small = 2_000 + margin(2_000, 1.0, 1000);
    let greedy = (3_000_000 - 100 * small) / 100;
    for (i, h) in held.iter().enumerate() {
        let fair = match demand(i, 26) {
            0 => continue,
            2_000 => small,
            _ => greedy,
        };
        assert!(
            h.abs_diff(fair) * 20 <= fair,
            "stream {i} holds {h}, fair {fair}"
        );
    }
}
