//! The bound of [`docs/rlqs.md`] held by a fleet of simulated Envoys on two nodes sharing one
//! store's claims: each runs
//! its filter as Envoy's source does ([`super::envoy_model`]: a bucket's first report at its first request, with that
//! request counted and `time_elapsed` 0; every bucket reported every 5 s in whole seconds;
//! assignments applied as they arrive, a token bucket kept when its burst and fill are
//! unchanged and started full otherwise; an expired assignment falling back to deny-all;
//! streams that break and reconnect keeping their assignments), with random demand changing
//! as it goes. Every window of the limit's unit, the requests the fleet admitted are at most
//! the limit, plus the bursts the Envoys held, plus the bursts of token buckets started in the
//! window, plus the requests each Envoy let through before its first assignment.

use std::sync::Arc;
use std::time::Duration;

use floodgate::Nanos;
use proptest::prelude::*;

use super::assignment::burst;
use super::envoy_model::Envoy;
use super::{Ledger, Session, Settings};
use crate::config::Config;
use crate::descriptors::RuleSet;
use crate::proto::envoy::service::rate_limit_quota::v3::BucketId;

/// The limit, per second.
const LIMIT: u64 = 100;
/// The simulation's step, in milliseconds.
const STEP_MS: u64 = 10;

fn rules() -> RuleSet {
    Config::from_yaml_str(&format!(
        "domains:\n  - domain: fleet\n    descriptors:\n      - key: name\n        rate_limit: {{ unit: second, requests_per_unit: {LIMIT} }}\n"
    ))
    .expect("reads")
    .rule_set()
    .expect("builds")
}

fn bucket() -> BucketId {
    BucketId {
        bucket: [("name".to_string(), "shared".to_string())].into(),
    }
}

/// One Envoy of the fleet (the model of [`super::envoy_model`]) and its traffic.
struct Member {
    envoy: Envoy,
    /// Requests per second it is offered now.
    demand: u64,
    /// Fractional requests carried from step to step.
    owed: f64,
    /// When a broken stream opens again.
    reconnect_ms: Option<u64>,
    claimants: u64,
}

/// What one window of the limit's unit saw.
#[derive(Debug, Default)]
struct Window {
    admitted: u64,
    /// The bursts of token buckets started in it.
    started: u64,
    /// Requests let through before an Envoy's first assignment.
    unassigned: u64,
}

impl Member {
    fn new(session: Session, phase: u64) -> Member {
        Member {
            envoy: Envoy::new(session, "fleet", bucket(), phase),
            demand: 0,
            owed: 0.0,
            reconnect_ms: None,
            claimants: 1,
        }
    }

    /// One step at `now_ms`: its requests (its demand times `spread`, around 1), its first
    /// report at its first request, its periodic report, and the server's tick each second.
    fn step(
        &mut self,
        now_ms: u64,
        spread: f64,
        rules: &RuleSet,
        settings: &Settings,
        window: &mut Window,
        totals: &mut Totals,
    ) -> Result<(), String> {
        self.owed += self.demand as f64 * STEP_MS as f64 / 1_000.0 * spread;
        while self.owed >= 1.0 {
            self.owed -= 1.0;
            let admission = self
                .envoy
                .request(now_ms, rules, settings)
                .map_err(|e| e.to_string())?;
            if admission.admitted {
                window.admitted += 1;
                totals.admitted += 1;
                window.unassigned += u64::from(admission.unassigned);
            } else {
                totals.denied += 1;
            }
            window.started += admission.started;
        }
        // Every 5 s, on its phase: the periodic report.
        window.started += self
            .envoy
            .report_if_due(now_ms, rules, settings)
            .map_err(|e| e.to_string())?;
        // The server's tick, every second.
        if now_ms.is_multiple_of(1_000) {
            window.started += self.envoy.tick(now_ms, settings);
        }
        Ok(())
    }
}

/// One simulated run: `demands[i][k]` is Envoy `i`'s demand during the `k`-th 10 s; `breaks`
/// are (Envoy, second) at which a stream breaks, to reopen 2 s later.
fn run(
    demands: &[Vec<u64>],
    phases: &[u64],
    breaks: &[(usize, u64)],
    seed: u64,
) -> Result<Totals, String> {
    let rules = rules();
    let settings = Settings::default();
    // Two nodes on one store's claims: Envoys alternate between them.
    let first = Ledger::in_memory();
    let ledgers = [Arc::new(first.beside()), Arc::new(first)];
    let mut random = seed | 1;
    let mut next = move || {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        (random % 1_000) as f64 / 1_000.0
    };
    let session = |n: usize, k: u64| Session::new(ledgers[n % 2].clone(), format!("envoy-{n}/{k}"));
    let mut envoys: Vec<Member> = phases
        .iter()
        .enumerate()
        .map(|(i, phase)| Member::new(session(i, 0), *phase))
        .collect();
    let seconds = demands[0].len() as u64 * 10;
    let mut bursts = vec![0u64; envoys.len()];
    let mut window = Window::default();
    let mut totals = Totals::default();
    for step in 0..seconds * 1_000 / STEP_MS {
        let now_ms = step * STEP_MS;
        let now = Nanos(now_ms * 1_000_000);
        for (i, envoy) in envoys.iter_mut().enumerate() {
            envoy.demand = demands[i][(now_ms / 10_000) as usize];
            if breaks.iter().any(|&(b, at)| b == i && at * 1_000 == now_ms) {
                envoy.envoy.disconnect(now_ms, &settings);
                envoy.reconnect_ms = Some(now_ms + 2_000);
            }
            if envoy.reconnect_ms == Some(now_ms) {
                envoy.reconnect_ms = None;
                let stream = session(i, envoy.claimants);
                envoy.claimants += 1;
                // A new stream's first message reports every bucket the Envoy holds.
                window.started += envoy
                    .envoy
                    .reconnect(stream, now_ms, &rules, &settings)
                    .map_err(|e| e.to_string())?;
            }
            let spread = 0.5 + next();
            envoy.step(now_ms, spread, &rules, &settings, &mut window, &mut totals)?;
            bursts[i] = bursts[i].max(envoy.envoy.burst());
        }
        for ledger in &ledgers {
            ledger.expire_due(now, settings.unreported_after);
        }
        // The end of a one-second window: the bound.
        if (now_ms + STEP_MS).is_multiple_of(1_000) {
            let Window {
                admitted,
                started,
                unassigned,
            } = std::mem::take(&mut window);
            let bound = LIMIT + bursts.iter().sum::<u64>() + started + unassigned;
            if admitted > bound {
                return Err(format!(
                    "{admitted} admitted in the second ending at {} ms, bound {bound} (bursts {bursts:?}, started {started}, first {unassigned})",
                    now_ms + STEP_MS
                ));
            }
            totals.busiest = totals.busiest.max(admitted);
            for (b, envoy) in bursts.iter_mut().zip(&envoys) {
                *b = envoy.envoy.burst();
            }
        }
    }
    Ok(totals)
}

/// What a run did, to see that it did something.
#[derive(Debug, Default)]
struct Totals {
    admitted: u64,
    denied: u64,
    /// The most admitted in one window.
    busiest: u64,
}

/// Each Envoy's demand per 10 s, its report phase, the streams that break, and a seed.
type Fleet = (Vec<Vec<u64>>, Vec<u64>, Vec<(usize, u64)>, u64);

fn fleet() -> impl Strategy<Value = Fleet> {
    (2usize..6).prop_flat_map(|n| {
        (
            prop::collection::vec(prop::collection::vec(0u64..300, 4), n),
            prop::collection::vec(0u64..5_000, n)
                .prop_map(|p| p.into_iter().map(|x| x / 10 * 10).collect()),
            prop::collection::vec((0..n, 1u64..38), 0..3),
            any::<u64>(),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_fleet_admits_at_most_the_limit_and_its_bursts_per_window(
        (demands, phases, breaks, seed) in fleet()
    ) {
        let offered: u64 = demands.iter().map(|d| d.iter().sum::<u64>()).sum();
        match run(&demands, &phases, &breaks, seed) {
            Err(e) => prop_assert!(false, "{e}"),
            Ok(totals) => prop_assert!(offered < 10 || totals.admitted + totals.denied > 0, "{totals:?}"),
        }
    }
}

/// Three Envoys each offered twice the limit end on a third each, and the fleet admits about
/// the limit: never much less (the shares are used), never more than the bound.
#[test]
fn a_fleet_over_its_limit_is_held_to_it() {
    let demands = vec![vec![2 * LIMIT; 4]; 3];
    let totals = run(&demands, &[0, 1_500, 3_000], &[], 7).expect("the bound holds");
    let per_second = totals.admitted / 40;
    assert!(
        (90..=LIMIT + 3 * burst(LIMIT * 1000 / 3, SECOND) + 3).contains(&per_second),
        "{totals:?}"
    );
    assert!(
        totals.busiest <= LIMIT + 3 * burst(LIMIT * 1000, SECOND) + 3,
        "{totals:?}"
    );
}

const SECOND: Duration = Duration::from_secs(1);
