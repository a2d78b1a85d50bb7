//! Max-min fair division of one limit among the clients that share it: the rule by which a
//! global limit enforced by many clients (each Envoy of a fleet, under the Rate Limit Quota
//! Service) is split into the shares each enforces alone.
//!
//! **Rule.** `capacity` (whole requests per unit of time) is divided among claimants with
//! `demands` (in the same unit) in two rounds:
//!
//! 1. *Water-filling.* Each claimant gets `min(demand, level)`, where `level` is the largest
//!    whole number with `Σ min(demandᵢ, level) ≤ capacity`: a claimant wanting less than an even
//!    split of what is left gets what it wants, and the rest is split evenly among the others.
//!    What integer division leaves over goes, one request each, to the claimants short of their
//!    demand, lowest index first.
//! 2. *Headroom.* What no demand took is split evenly among every claimant (the remainder, one
//!    each, lowest index first), so that a client whose traffic grows between two reports is not
//!    held to what it used before.
//!
//! **Bounds** (each checked by a property test below):
//! - the shares sum to exactly `capacity` when there is at least one claimant (never more);
//! - every claimant gets at least `min(demand, capacity / n)`: no one is starved by a greedy
//!   neighbour, and when the demands fit (`Σ demand ≤ capacity`) everyone gets its demand;
//! - max-min fairness: a claimant short of its demand gets, within one request, at least as
//!   much as any other claimant's demand-capped share (`shareᵢ + 1 ≥ min(shareⱼ, demandⱼ)`).
//!
//! The division is deterministic (it depends only on the order of `demands`), so two nodes that
//! read the same demands hand out the same shares; its Lua twin divides the same way inside
//! the store's script.

/// The shares of `capacity` for claimants with `demands`, in their order (see the [module
/// documentation](self)): empty for no claimant. Runs in `O(n log n)`.
pub fn divide(capacity: u64, demands: &[u64]) -> Vec<u64> {
    let n = demands.len();
    let mut shares = vec![0u64; n];
    if n == 0 {
        return shares;
    }
    // Water-filling, smallest demand first: a claimant wanting no more than an even split of
    // what is left takes its demand; once one wants more, so do all the rest (they come later
    // in the order), and each of them gets the even split, the remainder one each by index.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (demands[i], i));
    let mut left = capacity;
    for (taken, &i) in order.iter().enumerate() {
        let claimants = (n - taken) as u64;
        let even = left / claimants;
        if demands[i] <= even {
            shares[i] = demands[i];
            left -= demands[i];
            continue;
        }
        let mut short = order[taken..].to_vec();
        short.sort_unstable();
        let remainder = (left % claimants) as usize;
        for (rank, &j) in short.iter().enumerate() {
            shares[j] = even + u64::from(rank < remainder);
        }
        left = 0;
        break;
    }
    // Headroom: what no demand took, split evenly among all.
    let each = left / n as u64;
    let rest = (left % n as u64) as usize;
    for (i, share) in shares.iter_mut().enumerate() {
        *share += each + u64::from(i < rest);
    }
    shares
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn demands_that_fit_are_met_and_the_rest_is_split_evenly() {
        // 100 among wants of 10, 20 and 30: each gets its want, and 40 more split evenly.
        assert_eq!(divide(100, &[10, 20, 30]), [24, 33, 43]);
    }

    #[test]
    fn a_small_demand_is_met_and_the_others_share_what_is_left() {
        // 100 among wants of 10, 500 and 500: 10, then 45 each.
        assert_eq!(divide(100, &[10, 500, 500]), [10, 45, 45]);
        // Equal wants above an even split: an even split, the remainder to the first.
        assert_eq!(divide(100, &[90, 90, 90]), [34, 33, 33]);
    }

    #[test]
    fn no_demand_at_all_is_an_even_split_and_no_claimant_nothing() {
        assert_eq!(divide(10, &[0, 0, 0]), [4, 3, 3]);
        assert_eq!(divide(10, &[]), Vec::<u64>::new());
        assert_eq!(divide(0, &[5, 5]), [0, 0]);
    }

    fn claimants() -> impl Strategy<Value = (u64, Vec<u64>)> {
        (
            0u64..10_000,
            prop::collection::vec(
                prop_oneof![0u64..10, 0u64..1_000, 0u64..100_000, Just(u64::MAX / 4)],
                0..40,
            ),
        )
    }

    proptest! {
        #[test]
        fn the_shares_sum_to_the_capacity((capacity, demands) in claimants()) {
            let shares = divide(capacity, &demands);
            prop_assert_eq!(shares.len(), demands.len());
            let total: u64 = shares.iter().sum();
            if demands.is_empty() {
                prop_assert_eq!(total, 0);
            } else {
                prop_assert_eq!(total, capacity);
            }
        }

        #[test]
        fn no_claimant_gets_less_than_its_demand_or_an_even_split(
            (capacity, demands) in claimants()
        ) {
            let shares = divide(capacity, &demands);
            let even = capacity / demands.len().max(1) as u64;
            for (share, demand) in shares.iter().zip(&demands) {
                prop_assert!(*share >= (*demand).min(even), "{shares:?} for {demands:?}");
            }
            if demands.iter().map(|d| u128::from(*d)).sum::<u128>() <= u128::from(capacity) {
                for (share, demand) in shares.iter().zip(&demands) {
                    prop_assert!(share >= demand);
                }
            }
        }

        #[test]
        fn a_claimant_short_of_its_demand_is_within_one_of_every_other(
            (capacity, demands) in claimants()
        ) {
            let shares = divide(capacity, &demands);
            for (i, (&share, &demand)) in shares.iter().zip(&demands).enumerate() {
                if share >= demand {
                    continue;
                }
                for (j, (&other, &wanted)) in shares.iter().zip(&demands).enumerate() {
                    prop_assert!(
                        share + 1 >= other.min(wanted),
                        "claimant {i} short at {share} while {j} holds {other}: {shares:?} for {demands:?}"
                    );
                }
            }
        }
    }
}
