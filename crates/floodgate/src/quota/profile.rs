//! A node's clients of one shared limit summed up in a few [`Group`]s: what the node sends
//! the store on their behalf, so that the store divides the limit max-min fairly across every
//! client of every node while reading a handful of numbers per node, whatever the number of
//! clients.
//!
//! **Bins.** Clients are binned by their need (demand plus margin, in thousandths of a request
//! per unit): a bin spans a factor of `2^(1/4)` (about 19%), so the clients of one bin want
//! nearly alike and the store, which reads a group as `count` clients of its mean, divides as
//! it would over the clients one by one. A profile keeps its bins as clients come, change and
//! go ([`Profile::add`], [`Profile::remove`]), each change `O(log bins)`.
//!
//! **Groups.** [`Profile::groups`] gives at most [`MOST_GROUPS`] groups: the bins, with the two
//! neighbours nearest in mean need merged while there are more, in the terms they were added
//! in (the service adds thousandths of a request per unit, and claims in thousandths).

use std::collections::BTreeMap;

use super::share::Group;

/// The most groups a profile gives (so that the store reads at most this many per node).
pub const MOST_GROUPS: usize = 16;

/// A node's clients of one limit, binned by need (see the [module documentation](self)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Profile {
    /// By bin: clients, their demands and their margins in all.
    bins: BTreeMap<u32, (u64, u64, u64)>,
}

impl Profile {
    /// No client.
    pub fn new() -> Profile {
        Profile::default()
    }

    /// A client wanting `demand` with `margin` (in the profile's terms, such as thousandths
    /// of a request per unit) joins.
    pub fn add(&mut self, demand: u64, margin: u64) {
        let bin = self.bins.entry(bin(demand, margin)).or_default();
        bin.0 += 1;
        bin.1 = bin.1.saturating_add(demand);
        bin.2 = bin.2.saturating_add(margin);
    }

    /// A client added with `demand` and `margin` leaves.
    pub fn remove(&mut self, demand: u64, margin: u64) {
        let key = bin(demand, margin);
        if let Some(bin) = self.bins.get_mut(&key) {
            bin.0 = bin.0.saturating_sub(1);
            bin.1 = bin.1.saturating_sub(demand);
            bin.2 = bin.2.saturating_sub(margin);
            if bin.0 == 0 {
                self.bins.remove(&key);
            }
        }
    }

    /// The clients.
    pub fn clients(&self) -> u64 {
        self.bins.values().map(|b| b.0).sum()
    }

    /// At most [`MOST_GROUPS`] groups, least need first (see the [module
    /// documentation](self)).
    pub fn groups(&self) -> Vec<Group> {
        let mut merged: Vec<(u64, u64, u64)> = self.bins.values().copied().collect();
        while merged.len() > MOST_GROUPS {
            // Merge the neighbours whose mean needs are nearest, by ratio.
            let mean = |b: &(u64, u64, u64)| (b.1 + b.2) as f64 / b.0.max(1) as f64 + 1.0;
            let nearest = (0..merged.len() - 1)
                .min_by(|&i, &j| {
                    let ri = mean(&merged[i + 1]) / mean(&merged[i]);
                    let rj = mean(&merged[j + 1]) / mean(&merged[j]);
                    ri.partial_cmp(&rj).unwrap_or(std::cmp::Ordering::Equal)
                })
                .unwrap_or(0);
            let next = merged.remove(nearest + 1);
            let into = &mut merged[nearest];
            *into = (
                into.0 + next.0,
                into.1.saturating_add(next.1),
                into.2.saturating_add(next.2),
            );
        }
        merged
            .into_iter()
            .map(|(count, demand, margin)| Group {
                count,
                demand,
                margin,
            })
            .collect()
    }
}

/// The bin of a need: four per doubling.
fn bin(demand: u64, margin: u64) -> u32 {
    let need = demand.saturating_add(margin).saturating_add(1) as f64;
    (need.log2() * 4.0).floor() as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn clients_alike_are_one_group_and_leave_as_they_came() {
        let mut profile = Profile::new();
        for _ in 0..3 {
            profile.add(50_000, 7_100);
        }
        profile.add(2_000, 1_500);
        assert_eq!(profile.clients(), 4);
        assert_eq!(
            profile.groups(),
            [
                Group {
                    count: 1,
                    demand: 2_000,
                    margin: 1_500
                },
                Group {
                    count: 3,
                    demand: 150_000,
                    margin: 21_300
                },
            ]
        );
        profile.remove(2_000, 1_500);
        profile.remove(50_000, 7_100);
        assert_eq!(profile.groups().len(), 1);
        assert_eq!(profile.clients(), 2);
    }

    proptest! {
        /// However many clients and however spread, at most MOST_GROUPS groups holding every
        /// client and all their demand.
        #[test]
        fn groups_are_few_and_lose_no_client_nor_demand(
            clients in prop::collection::vec((0u64..10_000_000, 0u64..100_000), 0..300),
        ) {
            let mut profile = Profile::new();
            for (demand, margin) in &clients {
                profile.add(*demand, *margin);
            }
            let groups = profile.groups();
            prop_assert!(groups.len() <= MOST_GROUPS);
            prop_assert_eq!(groups.iter().map(|g| g.count).sum::<u64>(), clients.len() as u64);
            let demand: u64 = clients.iter().map(|c| c.0).sum();
            prop_assert_eq!(groups.iter().map(|g| g.demand).sum::<u64>(), demand);
        }
    }
}
