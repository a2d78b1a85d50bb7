//! Who claims a shared limit now: each claimant with the demand of its last report, and what it
//! has been granted: the share it enforces until its grant's time to live passes.
//!
//! **Demand.** A report says how many requests a claimant saw (allowed and denied: denied ones
//! are demand its share did not cover) over the time since its previous report.
//! [`demand_per_unit`] scales that count to the limit's unit, rounding up, over at least
//! `least_elapsed` (a report over less time, such as the first one of a claimant, sent at its
//! first request, reads as if it covered that much: one request is not a rate).
//!
//! **Targets and grants.** Each claimant's *target* is its max-min fair share of the limit
//! ([`super::divide`] over every claimant's demand). What it is *granted* moves towards its
//! target without the grants in force ever summing to more than the limit ([`Claims::grant`]):
//! a grant that shrinks shrinks at once (the caller sends it as it is granted), and one that
//! grows takes only what the limit has left beside the other grants in force. So when shares
//! move, a claimant whose share grows waits for the others to give theirs back, each at its
//! own next grant: with demands that hold still, every claimant holds its target once every
//! claimant has been granted twice.
//!
//! **Leaving.** A claimant leaves when its client is gone (a stream that closes) or when it has
//! not reported for `idle` ([`Claims::expire`]). Its demand leaves at once, so the others'
//! targets grow at once; but its client may go on enforcing its last grant until that grant's
//! time to live passes, so what it held stays counted as in force until then, and the others'
//! grants grow into it only after.
//!
//! **Order.** Claims are kept sorted by claimant, so that the division of the same claims is
//! the same on every node.
//!
//! **One step.** A store applies [`Claims::apply`]: the claimants gone quiet expire, then one
//! [`ClaimStep`] (a report and its grant, a grant, or a leave) is taken, and the answer
//! ([`Claimed`]) says what was granted and how the whole limit stands. Memory applies it under
//! a lock; Redis runs its Lua twin, which takes the same steps on the same numbers, so that
//! the nodes sharing a Redis agree on every grant.

use std::time::Duration;

use crate::Nanos;

/// One claimant of a shared limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// Who claims: an identifier stable for the life of the client's claim (a node and a
    /// stream), unique among the limit's claimants.
    pub claimant: String,
    /// Requests it wanted per unit of the limit, at its last report.
    pub demand: u64,
    /// When it last reported.
    pub reported_at: Nanos,
    /// Requests per unit it was last granted (0 before its first grant).
    pub granted: u64,
    /// Until when that grant is in force: the instant it was granted plus its time to live.
    pub granted_until: Nanos,
}

impl Claim {
    /// What it holds in force at `now`: its grant until the grant's time to live passes.
    fn in_force(&self, now: Nanos) -> u64 {
        if self.granted_until > now {
            self.granted
        } else {
            0
        }
    }
}

/// What a claimant that left still holds: its last grant, until its time to live passes. A
/// claimant that leaves again while an earlier grant of its own is still counted holds both,
/// until the later of their ends (one entry per claimant, as the store keeps it).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Retiring {
    claimant: String,
    granted: u64,
    until: Nanos,
}

/// The largest limit, and demand, [`Claims::apply`] takes: larger ones count as this much, so
/// that every sum a store's twin forms stays exact in a double (2⁴⁰, about 10¹² requests per
/// unit).
pub const MOST: u64 = 1 << 40;

/// One change to a limit's claims, as a store applies it in one step ([`Claims::apply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimStep<'a> {
    /// `claimant` reports `demand` (requests per unit) and is granted its next share.
    Report {
        /// Who reports.
        claimant: &'a str,
        /// What it wants, requests per unit of the limit.
        demand: u64,
    },
    /// `claimant` is granted its next share without a report (nothing granted if it does not
    /// claim).
    Grant {
        /// Who is granted.
        claimant: &'a str,
    },
    /// `claimant` leaves (its client is gone); its last grant stays counted until it ends.
    Leave {
        /// Who leaves.
        claimant: &'a str,
    },
}

/// The limit a step is taken under, and its times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClaimTerms {
    /// The limit shared, requests per unit (at most [`MOST`]).
    pub capacity: u64,
    /// How long a grant is counted as in force once made: at least as long as the client
    /// enforces it.
    pub ttl: Duration,
    /// A claimant that has not reported for this long leaves.
    pub idle: Duration,
}

/// What one step answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claimed {
    /// The claimant's grant, requests per unit (`None` for a leave, or a grant to a claimant
    /// that does not claim).
    pub granted: Option<u64>,
    /// The sum of every claimant's demand, each at most [`MOST`], saturating.
    pub demand: u64,
    /// The grants in force after the step, those of claimants that left included.
    pub in_force: u64,
    /// The claimants after the step.
    pub claimants: u64,
}

/// The claimants of one shared limit, sorted by claimant, with what those that left still
/// hold in force.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Claims {
    claims: Vec<Claim>,
    retiring: Vec<Retiring>,
}

impl Claims {
    /// No claimant.
    pub fn new() -> Claims {
        Claims::default()
    }

    /// Takes `step` under `terms` at `now`, after every claimant that has not reported for
    /// `terms.idle` has left: the transition a store applies atomically (see the [module
    /// documentation](self)). Capacity and demand are taken as at most [`MOST`].
    pub fn apply(&mut self, step: ClaimStep<'_>, terms: &ClaimTerms, now: Nanos) -> Claimed {
        self.expire(now, terms.idle);
        let capacity = terms.capacity.min(MOST);
        let granted = match step {
            ClaimStep::Report { claimant, demand } => {
                self.report(claimant, demand.min(MOST), now);
                self.grant(claimant, capacity, now, terms.ttl)
            }
            ClaimStep::Grant { claimant } => self.grant(claimant, capacity, now, terms.ttl),
            ClaimStep::Leave { claimant } => {
                self.leave(claimant, now);
                None
            }
        };
        self.retiring.retain(|r| r.until > now);
        Claimed {
            granted,
            demand: self
                .claims
                .iter()
                .map(|c| c.demand)
                .fold(0, u64::saturating_add),
            in_force: self.in_force(now),
            claimants: self.claims.len() as u64,
        }
    }

    /// Records `claimant`'s report of `demand` (requests per unit) at `now`: a new claimant
    /// joins, a known one's demand is replaced. Returns whether it is new.
    pub fn report(&mut self, claimant: &str, demand: u64, now: Nanos) -> bool {
        match self.position(claimant) {
            Ok(i) => {
                let claim = &mut self.claims[i];
                claim.demand = demand;
                claim.reported_at = now;
                false
            }
            Err(i) => {
                let claim = Claim {
                    claimant: claimant.to_string(),
                    demand,
                    reported_at: now,
                    granted: 0,
                    granted_until: now,
                };
                self.claims.insert(i, claim);
                true
            }
        }
    }

    /// Removes `claimant` (its client is gone) at `now`; returns whether it was there. What it
    /// was granted stays in force until its time to live passes.
    pub fn leave(&mut self, claimant: &str, now: Nanos) -> bool {
        match self.position(claimant) {
            Ok(i) => {
                let claim = self.claims.remove(i);
                self.retire(claim, now);
                true
            }
            Err(_) => false,
        }
    }

    /// Removes every claimant whose last report is `idle` or more before `now`, and returns
    /// them, in order. What they were granted stays in force until its time to live passes.
    pub fn expire(&mut self, now: Nanos, idle: Duration) -> Vec<String> {
        let (gone, kept): (Vec<Claim>, Vec<Claim>) = std::mem::take(&mut self.claims)
            .into_iter()
            .partition(|claim| now.saturating_since(claim.reported_at) >= idle);
        self.claims = kept;
        gone.into_iter()
            .map(|claim| {
                let name = claim.claimant.clone();
                self.retire(claim, now);
                name
            })
            .collect()
    }

    /// Grants `claimant` its next share of `capacity` at `now`, in force for `ttl`, and returns
    /// it; `None` if it does not claim. The grant is its target when that is no more than what
    /// it holds (a share that shrinks shrinks at once), else as much of its target as
    /// `capacity` has left beside every other grant in force: the grants in force never sum to
    /// more than `capacity` (see the [module documentation](self)).
    pub fn grant(
        &mut self,
        claimant: &str,
        capacity: u64,
        now: Nanos,
        ttl: Duration,
    ) -> Option<u64> {
        let i = self.position(claimant).ok()?;
        self.retiring.retain(|r| r.until > now);
        let target = self.target_at(i, capacity);
        let held = self.claims[i].in_force(now);
        let granted = if target <= held {
            target
        } else {
            let others = self.in_force(now) - held;
            target.min(capacity.saturating_sub(others)).max(held)
        };
        let claim = &mut self.claims[i];
        claim.granted = granted;
        claim.granted_until = now.saturating_add(ttl);
        Some(granted)
    }

    /// The sum of the grants in force at `now`, those of claimants that left included.
    pub fn in_force(&self, now: Nanos) -> u64 {
        let claimed: u64 = self.claims.iter().map(|c| c.in_force(now)).sum();
        let retiring: u64 = self
            .retiring
            .iter()
            .filter(|r| r.until > now)
            .map(|r| r.granted)
            .sum();
        claimed + retiring
    }

    fn retire(&mut self, claim: Claim, now: Nanos) {
        if claim.in_force(now) == 0 {
            return;
        }
        let earlier = self
            .retiring
            .iter_mut()
            .find(|r| r.claimant == claim.claimant && r.until > now);
        match earlier {
            Some(earlier) => {
                earlier.granted = earlier.granted.saturating_add(claim.granted);
                earlier.until = earlier.until.max(claim.granted_until);
            }
            None => {
                self.retiring.retain(|r| r.claimant != claim.claimant);
                self.retiring.push(Retiring {
                    claimant: claim.claimant,
                    granted: claim.granted,
                    until: claim.granted_until,
                });
            }
        }
    }

    fn target_at(&self, i: usize, capacity: u64) -> u64 {
        self.shares(capacity).nth(i).map_or(0, |(_, share)| share)
    }

    /// Each claimant with its target: its share of `capacity` by [`super::divide`], in order.
    pub fn shares(&self, capacity: u64) -> impl Iterator<Item = (&str, u64)> {
        let demands: Vec<u64> = self.claims.iter().map(|c| c.demand).collect();
        let shares = super::divide(capacity, &demands);
        self.claims
            .iter()
            .zip(shares)
            .map(|(claim, share)| (claim.claimant.as_str(), share))
    }

    /// `claimant`'s target share of `capacity`, if it claims.
    pub fn share_of(&self, claimant: &str, capacity: u64) -> Option<u64> {
        let i = self.position(claimant).ok()?;
        self.shares(capacity).nth(i).map(|(_, share)| share)
    }

    /// The claims, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Claim> {
        self.claims.iter()
    }

    /// The number of claimants.
    pub fn len(&self) -> usize {
        self.claims.len()
    }

    /// Whether no one claims.
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
    }

    fn position(&self, claimant: &str) -> Result<usize, usize> {
        self.claims
            .binary_search_by(|c| c.claimant.as_str().cmp(claimant))
    }
}

/// The demand, in requests per `unit`, of `requests` seen over `elapsed`, counted over at least
/// `least_elapsed` (see the [module documentation](self)); rounded up, saturating.
pub fn demand_per_unit(
    requests: u64,
    elapsed: Duration,
    unit: Duration,
    least_elapsed: Duration,
) -> u64 {
    let over = elapsed.max(least_elapsed).as_nanos().max(1);
    let scaled = u128::from(requests) * unit.as_nanos();
    let demand = scaled.div_ceil(over);
    u64::try_from(demand).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn claimants_join_report_and_leave_in_one_order() {
        let mut claims = Claims::new();
        assert!(claims.report("node-b/1", 30, Nanos::from_secs(1)));
        assert!(claims.report("node-a/7", 90, Nanos::from_secs(1)));
        assert!(!claims.report("node-b/1", 10, Nanos::from_secs(2)));
        let order: Vec<&str> = claims.iter().map(|c| c.claimant.as_str()).collect();
        assert_eq!(order, ["node-a/7", "node-b/1"]);
        // 100 per unit, wanted exactly: each gets its demand.
        let shares: Vec<(&str, u64)> = claims.shares(100).collect();
        assert_eq!(shares, [("node-a/7", 90), ("node-b/1", 10)]);
        assert_eq!(claims.share_of("node-b/1", 100), Some(10));
        assert!(claims.leave("node-a/7", Nanos::from_secs(3)));
        assert!(!claims.leave("node-a/7", Nanos::from_secs(3)));
        assert_eq!(claims.share_of("node-b/1", 100), Some(100));
        assert_eq!(claims.share_of("node-a/7", 100), None);
    }

    #[test]
    fn a_claimant_that_stops_reporting_expires() {
        let mut claims = Claims::new();
        claims.report("quiet", 50, Nanos::from_secs(10));
        claims.report("busy", 50, Nanos::from_secs(10));
        claims.report("busy", 50, Nanos::from_secs(24));
        assert!(claims
            .expire(Nanos::from_secs(24), Duration::from_secs(15))
            .is_empty());
        let gone = claims.expire(Nanos::from_secs(25), Duration::from_secs(15));
        assert_eq!(gone, ["quiet"]);
        assert_eq!(claims.share_of("busy", 100), Some(100));
    }

    #[test]
    fn a_report_over_less_than_the_least_time_counts_over_that_time() {
        let five = Duration::from_secs(5);
        // The first report of a claimant: one request, no time.
        assert_eq!(demand_per_unit(1, Duration::ZERO, SECOND, five), 1);
        assert_eq!(
            demand_per_unit(1, Duration::ZERO, Duration::from_secs(60), five),
            12
        );
        // 50 requests over 5 s: 10 per second, 600 per minute.
        assert_eq!(demand_per_unit(50, five, SECOND, five), 10);
        assert_eq!(
            demand_per_unit(50, five, Duration::from_secs(60), five),
            600
        );
        // 51 over 5 s rounds up.
        assert_eq!(demand_per_unit(51, five, SECOND, five), 11);
        assert_eq!(demand_per_unit(0, five, SECOND, five), 0);
        assert_eq!(
            demand_per_unit(
                u64::MAX,
                Duration::from_nanos(1),
                Duration::from_secs(86_400),
                Duration::ZERO
            ),
            u64::MAX
        );
    }

    #[test]
    fn a_growing_share_waits_for_the_shrinking_ones_and_a_leaver_until_its_grant_ends() {
        let ttl = Duration::from_secs(15);
        let at = Nanos::from_secs;
        let mut claims = Claims::new();
        claims.report("a", 100, at(0));
        assert_eq!(claims.grant("a", 100, at(0), ttl), Some(100));
        // b arrives wanting 100 too: its target is 50, but a holds all 100 until it is
        // granted again.
        claims.report("b", 100, at(1));
        assert_eq!(claims.share_of("b", 100), Some(50));
        assert_eq!(claims.grant("b", 100, at(1), ttl), Some(0));
        assert_eq!(claims.grant("a", 100, at(2), ttl), Some(50));
        assert_eq!(claims.grant("b", 100, at(3), ttl), Some(50));
        assert_eq!(claims.in_force(at(3)), 100);
        // a leaves: b's target is all 100 at once, but a's last grant is in force until 17 s.
        assert!(claims.leave("a", at(4)));
        assert_eq!(claims.share_of("b", 100), Some(100));
        assert_eq!(claims.grant("b", 100, at(5), ttl), Some(50));
        assert_eq!(claims.grant("b", 100, at(17), ttl), Some(100));
        assert_eq!(claims.grant("a", 100, at(17), ttl), None);
    }

    #[test]
    fn one_step_expires_the_quiet_then_answers_for_the_whole_limit() {
        let terms = ClaimTerms {
            capacity: 100,
            ttl: Duration::from_secs(10),
            idle: Duration::from_secs(15),
        };
        let at = Nanos::from_secs;
        let mut claims = Claims::new();
        let report = |claimant, demand| ClaimStep::Report { claimant, demand };
        let first = claims.apply(report("quiet", 30), &terms, at(0));
        assert_eq!(first.granted, Some(100));
        // A demand past MOST counts as MOST.
        let greedy = claims.apply(report("greedy", u64::MAX), &terms, at(5));
        assert_eq!((greedy.granted, greedy.demand), (Some(0), 30 + MOST));
        assert_eq!((greedy.in_force, greedy.claimants), (100, 2));
        // At 15 s "quiet" has not reported for 15 s: it leaves before the step, and its
        // grant (made at 0 s, for 10 s) is over, so "greedy" takes the whole limit.
        let alone = claims.apply(ClaimStep::Grant { claimant: "greedy" }, &terms, at(15));
        assert_eq!((alone.granted, alone.claimants), (Some(100), 1));
        let left = claims.apply(ClaimStep::Leave { claimant: "greedy" }, &terms, at(16));
        assert_eq!(
            left,
            Claimed {
                granted: None,
                demand: 0,
                in_force: 100,
                claimants: 0
            }
        );
        assert_eq!(
            claims
                .apply(ClaimStep::Grant { claimant: "greedy" }, &terms, at(26))
                .in_force,
            0
        );
    }

    /// Reports, grants, leaves and expiries in any order and at any times.
    fn history() -> impl Strategy<Value = Vec<(u8, u8, u64, u64)>> {
        prop::collection::vec((0u8..4, 0u8..6, 0u64..500, 0u64..8), 0..80)
    }

    proptest! {
        /// Whatever happens, the claims stay sorted and unique, their targets sum to the
        /// capacity, and the grants in force never sum to more than it.
        #[test]
        fn the_grants_in_force_never_sum_to_more_than_the_capacity(
            history in history(),
            capacity in 0u64..1_000,
            ttl in 1u64..20,
        ) {
            let mut claims = Claims::new();
            let mut now = Nanos::from_secs(1);
            for (op, who, demand, step) in history {
                now = now.saturating_add(Duration::from_secs(step));
                let who = format!("claimant-{who}");
                match op {
                    0 => { claims.report(&who, demand, now); }
                    1 => { claims.grant(&who, capacity, now, Duration::from_secs(ttl)); }
                    2 => { claims.leave(&who, now); }
                    _ => { claims.expire(now, Duration::from_secs(20)); }
                }
                let names: Vec<&str> = claims.iter().map(|c| c.claimant.as_str()).collect();
                let mut sorted = names.clone();
                sorted.sort_unstable();
                sorted.dedup();
                prop_assert_eq!(&names, &sorted);
                let total: u64 = claims.shares(capacity).map(|(_, s)| s).sum();
                prop_assert_eq!(total, if claims.is_empty() { 0 } else { capacity });
                prop_assert!(claims.in_force(now) <= capacity);
            }
        }

        /// With demands that hold still and no one leaving, two grants each, in any order,
        /// bring every claimant to its target, starting from the grants of other demands.
        #[test]
        fn two_grants_each_bring_every_claimant_to_its_target(
            demands in prop::collection::vec((0u64..300, 0u64..300), 1..8),
            capacity in 0u64..1_000,
            order in prop::collection::vec(0usize..8, 0..40),
        ) {
            let ttl = Duration::from_secs(60);
            let mut claims = Claims::new();
            let mut now = Nanos::from_secs(1);
            let name = |i: usize| format!("claimant-{i}");
            let n = demands.len();
            // Grants made for earlier demands, still in force when the demands change.
            for (i, (before, _)) in demands.iter().enumerate() {
                claims.report(&name(i), *before, now);
            }
            for i in 0..n {
                claims.grant(&name(i), capacity, now, ttl);
            }
            now = now.saturating_add(Duration::from_secs(1));
            for (i, (_, after)) in demands.iter().enumerate() {
                claims.report(&name(i), *after, now);
            }
            // Two rounds, each claimant granted once per round, in a shuffled order.
            for _ in 0..2 {
                let mut round: Vec<usize> = (0..n).collect();
                for (k, swap) in order.iter().enumerate() {
                    round.swap(k % n, swap % n);
                }
                for i in round {
                    claims.grant(&name(i), capacity, now, ttl);
                }
            }
            let targets: Vec<u64> = claims.shares(capacity).map(|(_, s)| s).collect();
            let granted: Vec<u64> = claims.iter().map(|c| c.granted).collect();
            prop_assert_eq!(granted, targets);
        }
    }
}
