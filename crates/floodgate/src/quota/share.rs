//! How one limit is divided among the clients that share it: the rule by which a global limit
//! enforced by many clients (each Envoy of a fleet, under the Rate Limit Quota Service) is
//! split into the shares each enforces alone.
//!
//! **Groups.** The division runs over [`Group`]s: `count` clients wanting `demand` in all
//! (requests per unit of the limit), with `margin` more in all for the chance in their
//! arrivals. A node sums up its own clients into a few groups ([`super::profile`]) and the
//! store divides over every node's groups; a node divides its part over its clients, one
//! group each. Within a group every client counts alike: the group is `count` clients of
//! `demand / count` each.
//!
//! **Margin.** Requests arrive at random, and a token bucket filled at exactly a client's mean
//! rate refuses a large part of them. So a client *needs* its demand plus a margin, one
//! standard deviation of Poisson arrivals over a second (`√λ` for `λ` requests per second,
//! [`margin`]), and the division gives needs before headroom.
//!
//! **Rule**, for a limit `C`, the groups' demands summing to `D` and their needs (demand plus
//! margin) to `N`. With `reserve`, while `D < C`, half of what the demands leave, `R = (C −
//! D) / 2`, is kept unassigned: room for a client that joins (its first grant comes out of it
//! at once, without waiting for the others to shrink) and for one whose demand grows. What is
//! handed out is `A = C − R` (`A = C` without the reserve, or once `D ≥ C`):
//!
//! 1. `N ≤ A`: every group gets its need, and of what is left (`A − N`) the *headroom*
//!    (with the reserve, at most `max(N, A / 4)`: the rest stays unassigned, room for
//!    newcomers), split by count (so evenly per client).
//! 2. `D < A < N`: every group gets its demand, and `A − D` goes to the margins,
//!    water-filled: each client's margin is met up to one common level.
//! 3. `D ≥ C`: water-filling of the needs: each client gets `min(need, level)`, the level
//!    such that the shares sum to `C` (max-min fairness, over needs).
//!
//! The shares move smoothly from one case to the next as needs grow, but from 2 to 3, where a
//! client at its demand may lose part of it to the others' margins. A store divides with the
//! reserve; a node divides what the store granted it in full.
//!
//! **Bounds** (each checked by a property test below): the shares sum to at most `C` (exactly
//! `C` without the reserve while some client claims); no share is below its
//! group's demand while `D < C`, nor below its need while `N ≤ A`; and in case 3, a group
//! whose mean need is above the level gets exactly `count × level`, one below it its need.
//!
//! **Arithmetic.** Shares are `f64`, computed by the same operations in the same order as the
//! store's Lua twin, so that both give the same bits; callers take whole requests with
//! `floor`.

/// `count` clients wanting `demand` requests per unit in all, and `margin` more in all for
/// the chance in their arrivals (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Group {
    /// Clients in the group.
    pub count: u64,
    /// What they want in all, requests per unit.
    pub demand: u64,
    /// The margin for their arrivals in all, requests per unit.
    pub margin: u64,
}

impl Group {
    /// One client wanting `demand`, with `margin` more for its arrivals.
    pub fn one(demand: u64, margin: u64) -> Group {
        Group {
            count: 1,
            demand,
            margin,
        }
    }

    /// Demand and margin.
    pub fn need(&self) -> u64 {
        self.demand.saturating_add(self.margin)
    }
}

/// The margin a client wanting `demand` per unit of `unit_seconds` needs, in the same terms
/// as `demand` (`per_request` of them make one request: 1 for whole requests, 1000 for
/// thousandths), rounded up: one standard deviation of Poisson arrivals over a second, `√λ`
/// requests per second for `λ` requests per second, scaled back to the unit.
pub fn margin(demand: u64, unit_seconds: f64, per_request: u64) -> u64 {
    if demand == 0 || unit_seconds <= 0.0 || per_request == 0 {
        return 0;
    }
    let per_request = per_request as f64;
    let per_second = demand as f64 / per_request / unit_seconds;
    (per_second.sqrt() * unit_seconds * per_request).ceil() as u64
}

/// The shares of `capacity` for `groups`, in their order (see the [module
/// documentation](self)): with `reserve`, half of the headroom is kept unassigned. Empty for
/// no group. Runs in `O(n log n)`.
pub fn divide(capacity: u64, groups: &[Group], reserve: bool) -> Vec<f64> {
    let c = capacity as f64;
    let mut demand = 0.0;
    let mut need = 0.0;
    let mut count = 0.0;
    for g in groups {
        demand += g.demand as f64;
        need += g.need() as f64;
        count += g.count as f64;
    }
    // With the reserve, half of what the demands leave is kept: what is handed out is the
    // rest, so that the shares grow smoothly with the needs until the demands pass the limit.
    let kept = if reserve && demand < c {
        (c - demand) / 2.0
    } else {
        0.0
    };
    let available = c - kept;
    if need <= available {
        // With the reserve, the headroom handed out is at most the needs again, or a quarter
        // of what is handed out if that is more: a client may grow so much between two
        // reports, and the rest stays unassigned, room for newcomers.
        let mut extra = available - need;
        if reserve {
            extra = extra.min(need.max(available / 4.0));
        }
        return groups
            .iter()
            .map(|g| match count > 0.0 {
                true => g.need() as f64 + extra * g.count as f64 / count,
                false => 0.0,
            })
            .collect();
    }
    if demand < available {
        let margins: Vec<(u64, f64)> = groups.iter().map(|g| (g.count, g.margin as f64)).collect();
        let met = fill(available - demand, &margins);
        return groups
            .iter()
            .zip(met)
            .map(|(g, m)| g.demand as f64 + m)
            .collect();
    }
    let needs: Vec<(u64, f64)> = groups.iter().map(|g| (g.count, g.need() as f64)).collect();
    fill(c, &needs)
}

/// Water-filling: `amount` over groups of `(count, wanted in all)`, each getting
/// `min(wanted, count × level)` for the level at which the shares sum to `amount` (everything
/// wanted, if it sums to less). Groups are taken by their mean want, least first (ties by
/// position), as the twin takes them.
fn fill(amount: f64, groups: &[(u64, f64)]) -> Vec<f64> {
    let mut shares = vec![0.0; groups.len()];
    let mut order: Vec<usize> = (0..groups.len()).filter(|&i| groups[i].0 > 0).collect();
    // Mean want a/ca against b/cb, compared as a·cb against b·ca (no division to round).
    order.sort_by(|&i, &j| {
        let (ci, wi) = groups[i];
        let (cj, wj) = groups[j];
        (wi * cj as f64)
            .partial_cmp(&(wj * ci as f64))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(i.cmp(&j))
    });
    let mut left = amount;
    let mut clients: f64 = order.iter().map(|&i| groups[i].0 as f64).sum();
    for (k, &i) in order.iter().enumerate() {
        let (count, wanted) = groups[i];
        if wanted * clients <= left * count as f64 {
            shares[i] = wanted;
            left -= wanted;
            clients -= count as f64;
            continue;
        }
        let level = left / clients;
        for &j in &order[k..] {
            shares[j] = groups[j].0 as f64 * level;
        }
        break;
    }
    shares
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ones(demands: &[u64]) -> Vec<Group> {
        demands.iter().map(|&d| Group::one(d, 0)).collect()
    }

    fn floors(shares: &[f64]) -> Vec<u64> {
        shares.iter().map(|s| s.floor() as u64).collect()
    }

    #[test]
    fn demands_that_fit_are_met_and_the_rest_is_split_evenly() {
        // 100 among wants of 10, 20 and 30: each gets its want, and 40 more split evenly.
        assert_eq!(
            floors(&divide(100, &ones(&[10, 20, 30]), false)),
            [23, 33, 43]
        );
        // With the reserve, half of the 40 is kept.
        assert_eq!(
            floors(&divide(100, &ones(&[10, 20, 30]), true)),
            [16, 26, 36]
        );
    }

    #[test]
    fn a_small_demand_is_met_and_the_others_share_what_is_left() {
        assert_eq!(
            floors(&divide(100, &ones(&[10, 500, 500]), true)),
            [10, 45, 45]
        );
        assert_eq!(
            floors(&divide(100, &ones(&[90, 90, 90]), true)),
            [33, 33, 33]
        );
    }

    #[test]
    fn groups_of_several_clients_count_each_client() {
        // Three clients of node X and one of node Y, 50 each on 100: 25 each, not 50 a node.
        let x = Group {
            count: 3,
            demand: 150,
            margin: 0,
        };
        let y = Group::one(50, 0);
        assert_eq!(floors(&divide(100, &[x, y], true)), [75, 25]);
    }

    #[test]
    fn margins_are_met_before_headroom_and_from_headroom_when_needs_do_not_fit() {
        let unit = 1.0;
        let with = |d: u64| Group::one(d, margin(d, unit, 1));
        assert_eq!(margin(10, 1.0, 1), 4);
        assert_eq!(margin(600, 60.0, 1), 190);
        assert_eq!(margin(10_000, 1.0, 1000), 3163);
        // Needs fit: 14 and 6 of 100. Of the 86 the demands leave, 43 are kept; of the 57
        // handed out, 37 are left past the needs, of which the needs again (20) are handed
        // out, 10 each.
        assert_eq!(floors(&divide(100, &[with(10), with(4)], true)), [24, 16]);
        // Without the reserve, all of it: 14 + 40 and 6 + 40.
        assert_eq!(floors(&divide(100, &[with(10), with(4)], false)), [54, 46]);
        // Demands fit, needs do not: demands met, half the headroom water-fills the margins.
        let shares = divide(100, &[with(90), with(3), with(3), with(3)], true);
        assert_eq!(floors(&shares), [90, 3, 3, 3]);
        assert!(shares.iter().sum::<f64>() <= 99.5 + 1e-9);
        // Demands past the limit: the needs water-filled; the small ones get theirs.
        let shares = floors(&divide(100, &[with(10), with(90), with(90)], true));
        assert_eq!(shares, [14, 43, 43]);
    }

    #[test]
    fn no_demand_at_all_is_an_even_split_and_no_group_nothing() {
        assert_eq!(floors(&divide(10, &ones(&[0, 0, 0]), false)), [3, 3, 3]);
        assert!(divide(10, &[], true).is_empty());
        assert_eq!(floors(&divide(0, &ones(&[5, 5]), true)), [0, 0]);
    }

    fn groups() -> impl Strategy<Value = (u64, Vec<Group>, bool)> {
        let group = (
            1u64..50,
            prop_oneof![0u64..10, 0u64..1_000, 0u64..100_000, Just(1u64 << 40)],
            0u64..1_000,
        )
            .prop_map(|(count, demand, margin)| Group {
                count,
                demand,
                margin,
            });
        (
            0u64..100_000,
            prop::collection::vec(group, 0..40),
            any::<bool>(),
        )
    }

    proptest! {
        #[test]
        fn the_shares_sum_to_at_most_the_capacity((capacity, groups, reserve) in groups()) {
            let shares = divide(capacity, &groups, reserve);
            prop_assert_eq!(shares.len(), groups.len());
            let whole: u64 = floors(&shares).iter().sum();
            prop_assert!(whole <= capacity, "{whole} of {capacity}: {shares:?}");
            let total: f64 = shares.iter().sum();
            let c = capacity as f64;
            if !groups.is_empty() && !reserve {
                prop_assert!((total - c).abs() <= 1e-6 * c + 1e-6, "{total} for {c}");
            }
        }

        #[test]
        fn demands_that_fit_are_met_and_needs_that_fit_too((capacity, groups, reserve) in groups()) {
            let shares = divide(capacity, &groups, reserve);
            let demand: u64 = groups.iter().map(|g| g.demand).sum();
            let need: u64 = groups.iter().map(|g| g.need()).sum();
            let available = match reserve && demand < capacity {
                true => capacity as f64 - (capacity - demand) as f64 / 2.0,
                false => capacity as f64,
            };
            for (share, g) in shares.iter().zip(&groups) {
                if need as f64 <= available {
                    prop_assert!(*share >= g.need() as f64);
                } else if demand < capacity {
                    prop_assert!(*share >= g.demand as f64);
                }
            }
        }

        #[test]
        fn past_the_limit_each_client_gets_its_need_or_the_common_level(
            (capacity, groups, reserve) in groups()
        ) {
            let demand: u64 = groups.iter().map(|g| g.demand).sum();
            prop_assume!(demand >= capacity && !groups.is_empty());
            let shares = divide(capacity, &groups, reserve);
            // The level: the most any client short of its need gets.
            let level = shares
                .iter()
                .zip(&groups)
                .filter(|(s, g)| **s + 1e-6 < g.need() as f64)
                .map(|(s, g)| s / g.count as f64)
                .fold(0.0f64, f64::max);
            for (share, g) in shares.iter().zip(&groups) {
                let each = share / g.count as f64;
                let wanted = g.need() as f64 / g.count as f64;
                prop_assert!(
                    (each - wanted).abs() <= 1e-6 * wanted.max(1.0)
                        || (each - level).abs() <= 1e-6 * level.max(1.0),
                    "{each} each, wanting {wanted}, level {level}"
                );
                prop_assert!(each <= wanted * (1.0 + 1e-9) + 1e-9);
            }
        }
    }
}
