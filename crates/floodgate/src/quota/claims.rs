//! Who claims a shared limit now: each claimant with the demand of its last report and when it
//! made it.
//!
//! **Demand.** A report says how many requests a claimant saw (allowed and denied: denied ones
//! are demand its share did not cover) over the time since its previous report.
//! [`demand_per_unit`] scales that count to the limit's unit, rounding up, over at least
//! `least_elapsed` (a report over less time, such as the first one of a claimant, sent at its
//! first request, reads as if it covered that much: one request is not a rate).
//!
//! **Leaving.** A claimant leaves when its client says so (a stream that closes) or when it has
//! not reported for `idle` ([`Claims::expire`]); either way its share is handed to the others at
//! the next division.
//!
//! **Order.** Claims are kept sorted by claimant, so that the division ([`super::divide`]) of
//! the same claims is the same on every node.

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
}

/// The claimants of one shared limit, sorted by claimant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Claims {
    claims: Vec<Claim>,
}

impl Claims {
    /// No claimant.
    pub fn new() -> Claims {
        Claims::default()
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
                };
                self.claims.insert(i, claim);
                true
            }
        }
    }

    /// Removes `claimant` (its client is gone); returns whether it was there.
    pub fn leave(&mut self, claimant: &str) -> bool {
        match self.position(claimant) {
            Ok(i) => {
                self.claims.remove(i);
                true
            }
            Err(_) => false,
        }
    }

    /// Removes every claimant whose last report is `idle` or more before `now`, and returns
    /// them, in order.
    pub fn expire(&mut self, now: Nanos, idle: Duration) -> Vec<String> {
        let mut gone = Vec::new();
        self.claims.retain(|claim| {
            let kept = now.saturating_since(claim.reported_at) < idle;
            if !kept {
                gone.push(claim.claimant.clone());
            }
            kept
        });
        gone
    }

    /// Each claimant with its share of `capacity` (see [`super::divide`]), in order.
    pub fn shares(&self, capacity: u64) -> impl Iterator<Item = (&str, u64)> {
        let demands: Vec<u64> = self.claims.iter().map(|c| c.demand).collect();
        let shares = super::divide(capacity, &demands);
        self.claims
            .iter()
            .zip(shares)
            .map(|(claim, share)| (claim.claimant.as_str(), share))
    }

    /// `claimant`'s share of `capacity`, if it claims.
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
        assert!(claims.leave("node-a/7"));
        assert!(!claims.leave("node-a/7"));
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

    proptest! {
        /// Whatever the reports, leaves and expiries, the claims stay sorted and unique, and
        /// their shares sum to the capacity.
        #[test]
        fn the_claims_stay_ordered_and_their_shares_sum_to_the_capacity(
            ops in prop::collection::vec((0u8..3, 0u8..8, 0u64..500, 0u64..30), 0..60),
            capacity in 0u64..1_000,
        ) {
            let mut claims = Claims::new();
            let mut now = Nanos::from_secs(1);
            for (op, who, demand, step) in ops {
                now = now.saturating_add(Duration::from_secs(step));
                let who = format!("claimant-{who}");
                match op {
                    0 => { claims.report(&who, demand, now); }
                    1 => { claims.leave(&who); }
                    _ => { claims.expire(now, Duration::from_secs(20)); }
                }
                let names: Vec<&str> = claims.iter().map(|c| c.claimant.as_str()).collect();
                let mut sorted = names.clone();
                sorted.sort_unstable();
                sorted.dedup();
                prop_assert_eq!(&names, &sorted);
                let total: u64 = claims.shares(capacity).map(|(_, s)| s).sum();
                prop_assert_eq!(total, if claims.is_empty() { 0 } else { capacity });
            }
        }
    }
}
