//! Who claims a shared limit now, as a store keeps it: one claim per *node*, taken on behalf of
//! all that node's clients, with their [profile](super::profile) (a few [`Group`]s), what the
//! node's clients hold in force, and what the node has been granted.
//!
//! **One step.** A node reports its groups and what its clients hold ([`ClaimStep::Report`]),
//! at most about once a second per limit and when a client joins or leaves; the store answers
//! with the node's grant and how the whole limit stands ([`Claimed`]). A node that leaves
//! ([`ClaimStep::Leave`]), or has not reported for `idle`, gives its demand back at once.
//! The cost of a step grows with the nodes (at most [`super::profile::MOST_GROUPS`] groups
//! each), not with the clients.
//!
//! **Targets and grants.** Each node's *target* is the sum of its groups' shares of the limit
//! ([`super::divide`] over every node's groups, in node order, with the reserve: half the
//! headroom is kept unassigned, room for clients that join). What it is *granted* moves
//! towards its target without the grants in force ever summing to more than the limit:
//! - a node's grant in force is the larger of what it was granted and what its clients hold
//!   (it reports that, and only grows it into a grant), until `ttl` after the step;
//! - a target at or below what the node's clients hold is granted as it is (the node shrinks
//!   them), and what they hold stays counted until the node reports less;
//! - a target above it takes only what the limit has left beside every other node's grant in
//!   force;
//! - a node whose clients just joined may ask for room beyond what they hold
//!   ([`ClaimStep::Report`]'s `wanted`): it is granted, past its target if need be, out of
//!   what the limit has left (the reserve the division keeps while the limit is not fully
//!   wanted), until its next report brings it back to its target.
//!
//! **Leaving.** A node's demand leaves with it, but what it held stays counted as in force
//! until its `ttl` passes (its clients may enforce their last grants until then), or until it
//! reports again: what it reports holding covers what it held before.
//!
//! **Order.** Claims are kept sorted by claimant, so that the division of the same claims is
//! the same on every node and in the store's Lua twin, which takes the same steps on the same
//! numbers.

use std::time::Duration;

use super::share::Group;
use crate::Nanos;

/// The largest limit, demand or hold a step takes: larger ones count as this much (2⁴⁰, about
/// 10¹² requests per unit), so that every sum the store's twin forms stays exact in a double.
pub const MOST: u64 = 1 << 40;

/// The most clients one group counts (2²⁰).
pub const MOST_CLIENTS: u64 = 1 << 20;

/// One node's claim on a shared limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// Who claims: a name stable for the node's life, unique among the limit's claimants.
    pub claimant: String,
    /// Its clients, summed up.
    pub groups: Vec<Group>,
    /// When it last reported.
    pub reported_at: Nanos,
    /// What it holds in force: the larger of its last grant and what its clients held.
    pub held: u64,
    /// Until when that is in force.
    pub until: Nanos,
}

impl Claim {
    fn in_force(&self, now: Nanos) -> u64 {
        if self.until > now {
            self.held
        } else {
            0
        }
    }
}

/// What a node that left still holds, until its time to live passes.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Retiring {
    claimant: String,
    held: u64,
    until: Nanos,
}

/// One change to a limit's claims, as a store applies it in one step ([`Claims::apply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimStep<'a> {
    /// `claimant` reports its clients' `groups` and what they `hold` in force now (requests
    /// per unit), perhaps asking for room for newcomers, and is granted its next share.
    Report {
        /// Who reports.
        claimant: &'a str,
        /// Its clients, summed up (at most [`super::profile::MOST_GROUPS`]).
        groups: &'a [Group],
        /// What its clients hold in force now, requests per unit.
        held: u64,
        /// Room it asks for beyond what they hold, for clients that just joined: granted out
        /// of what the limit has left, even past the node's target, until its next report.
        wanted: u64,
    },
    /// `claimant` leaves; what it holds stays counted until its time to live passes.
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
    /// How long a node's grant is counted as in force once made: at least as long as its
    /// clients may enforce what it hands them before its next step.
    pub ttl: Duration,
    /// A node that has not reported for this long leaves.
    pub idle: Duration,
}

/// What one step answers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Claimed {
    /// The node's grant, requests per unit (`None` for a leave).
    pub granted: Option<u64>,
    /// The sum of every client's demand, requests per unit.
    pub demand: u64,
    /// The grants in force after the step, those of nodes that left included.
    pub in_force: u64,
    /// The clients of every node after the step.
    pub clients: u64,
    /// The nodes claiming after the step.
    pub nodes: u64,
}

/// The nodes claiming one shared limit, sorted by claimant, with what those that left still
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

    /// Takes `step` under `terms` at `now`, after every node that has not reported for
    /// `terms.idle` has left: the transition a store applies atomically (see the [module
    /// documentation](self)).
    pub fn apply(&mut self, step: ClaimStep<'_>, terms: &ClaimTerms, now: Nanos) -> Claimed {
        self.expire(now, terms.idle);
        let capacity = terms.capacity.min(MOST);
        let granted = match step {
            ClaimStep::Report {
                claimant,
                groups,
                held,
                wanted,
            } => {
                // What the node holds covers what it held before it left.
                self.retiring.retain(|r| r.claimant != claimant);
                let i = self.report(claimant, groups, now);
                let held = held.min(MOST);
                Some(self.grant(i, held, wanted.min(MOST), capacity, now, terms.ttl))
            }
            ClaimStep::Leave { claimant } => {
                if let Ok(i) = self.position(claimant) {
                    let claim = self.claims.remove(i);
                    self.retire(claim, now);
                }
                None
            }
        };
        self.retiring.retain(|r| r.until > now);
        let groups = || self.claims.iter().flat_map(|c| c.groups.iter());
        Claimed {
            granted,
            demand: groups().map(|g| g.demand).fold(0, u64::saturating_add),
            in_force: self.in_force(now),
            clients: groups().map(|g| g.count).sum(),
            nodes: self.claims.len() as u64,
        }
    }

    /// Records `claimant`'s groups at `now` (clamped to [`MOST`] and [`MOST_CLIENTS`]), and
    /// returns its position.
    fn report(&mut self, claimant: &str, groups: &[Group], now: Nanos) -> usize {
        let groups: Vec<Group> = groups
            .iter()
            .map(|g| Group {
                count: g.count.min(MOST_CLIENTS),
                demand: g.demand.min(MOST),
                margin: g.margin.min(MOST),
            })
            .collect();
        match self.position(claimant) {
            Ok(i) => {
                self.claims[i].groups = groups;
                self.claims[i].reported_at = now;
                i
            }
            Err(i) => {
                let claim = Claim {
                    claimant: claimant.to_string(),
                    groups,
                    reported_at: now,
                    held: 0,
                    until: now,
                };
                self.claims.insert(i, claim);
                i
            }
        }
    }

    /// Grants the node at `i`, whose clients hold `held` and which asks for `wanted` more, its
    /// next share (see the [module documentation](self)).
    fn grant(
        &mut self,
        i: usize,
        held: u64,
        wanted: u64,
        capacity: u64,
        now: Nanos,
        ttl: Duration,
    ) -> u64 {
        let mut target = self.targets(capacity)[i];
        if wanted > 0 {
            target = target.max(held + wanted);
        }
        let others = self.in_force(now) - self.claims[i].in_force(now);
        let granted = if target <= held {
            target
        } else {
            target.min(capacity.saturating_sub(others)).max(held)
        };
        let claim = &mut self.claims[i];
        claim.held = granted.max(held);
        claim.until = now.saturating_add(ttl);
        granted
    }

    /// Removes every node whose last report is `idle` or more before `now`, and returns
    /// them, in order. What they held stays in force until its time to live passes.
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

    /// Each node's target, in order: the floor of its groups' shares of `capacity`
    /// ([`super::divide`] with the reserve, over every node's groups in node order).
    pub fn targets(&self, capacity: u64) -> Vec<u64> {
        let groups: Vec<Group> = self
            .claims
            .iter()
            .flat_map(|c| c.groups.iter().copied())
            .collect();
        let shares = super::divide(capacity, &groups, true);
        let mut shares = shares.into_iter();
        self.claims
            .iter()
            .map(|c| {
                let mut sum = 0.0;
                for share in shares.by_ref().take(c.groups.len()) {
                    sum += share;
                }
                sum.floor() as u64
            })
            .collect()
    }

    /// The sum of the grants in force at `now`, those of nodes that left included.
    pub fn in_force(&self, now: Nanos) -> u64 {
        let claimed: u64 = self.claims.iter().map(|c| c.in_force(now)).sum();
        let retiring: u64 = self
            .retiring
            .iter()
            .filter(|r| r.until > now)
            .map(|r| r.held)
            .sum();
        claimed + retiring
    }

    fn retire(&mut self, claim: Claim, now: Nanos) {
        // A node holds no leaving grant of its own while it claims (its report drops it), so
        // what it held replaces any that ended.
        self.retiring.retain(|r| r.claimant != claim.claimant);
        if claim.in_force(now) > 0 {
            self.retiring.push(Retiring {
                claimant: claim.claimant,
                held: claim.held,
                until: claim.until,
            });
        }
    }

    /// The claims, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Claim> {
        self.claims.iter()
    }

    /// The number of nodes claiming.
    pub fn len(&self) -> usize {
        self.claims.len()
    }

    /// Whether no node claims.
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
    }

    fn position(&self, claimant: &str) -> Result<usize, usize> {
        self.claims
            .binary_search_by(|c| c.claimant.as_str().cmp(claimant))
    }
}

/// The demand, in thousandths of a request per `unit`, of `requests` seen over `window`,
/// rounded up, saturating. A window below `least` counts as `least` (one request over no time
/// is not a rate).
pub fn demand_per_unit(requests: u64, window: Duration, unit: Duration, least: Duration) -> u64 {
    let over = window.max(least).as_nanos().max(1);
    let scaled = u128::from(requests) * unit.as_nanos() * 1000;
    u64::try_from(scaled.div_ceil(over)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
#[cfg(feature = "memcached")]
pub(crate) mod wire;
