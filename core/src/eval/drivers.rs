//! Which scenarios drove an eval's result: the order in which reports list the scenarios'
//! B − A differences (most negative first, so where B got worse leads) and each scenario's share
//! of the overall difference.
//!
//! Every scenario's difference and interval are the report's own (the same paired interval as
//! the overall one, over that scenario's complete pairs); this module only orders and
//! apportions them. Pure.

use std::cmp::Ordering;

/// The order in which to list scenarios by their B − A difference: indices into `diffs`, most
/// negative difference first (where B got worse leads, where it got better comes last); equal
/// differences by name. A scenario without a difference (no complete pair, or not a finite
/// number) comes after every scenario with one, by name.
pub fn order_by_difference(diffs: &[(&str, Option<f64>)]) -> Vec<usize> {
    let key = |index: usize| {
        let (name, diff) = diffs[index];
        (diff.filter(|value| value.is_finite()), name)
    };
    let mut order: Vec<usize> = (0..diffs.len()).collect();
    order.sort_by(|&left, &right| {
        let ((left_diff, left_name), (right_diff, right_name)) = (key(left), key(right));
        let by_diff = match (left_diff, right_diff) {
            (Some(left), Some(right)) => left.total_cmp(&right),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        };
        by_diff.then_with(|| left_name.cmp(right_name))
    });
    order
}

/// One scenario's share of the overall B − A difference: `(c − b) / N`, with `b` the scenario's
/// pairs where only A passed, `c` those where only B passed and `N` the complete pairs of the
/// whole eval; `None` when the eval has no complete pair.
///
/// The overall difference is `(C − B) / N` over every scenario's pairs, so the shares of all
/// scenarios add up to it: a share says how many points of the overall result a scenario made.
pub fn share_of_overall(a_only_passes: u64, b_only_passes: u64, overall_pairs: u64) -> Option<f64> {
    if overall_pairs == 0 {
        return None;
    }
    let net = b_only_passes as f64 - a_only_passes as f64;
    Some(net / overall_pairs as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_b_got_worse_leads_and_scenarios_without_pairs_come_last() {
        let diffs = [
            ("alpha", Some(0.1)),
            ("beta", None),
            ("gamma", Some(-0.5)),
            ("delta", Some(0.1)),
            ("epsilon", Some(f64::NAN)),
            ("zeta", Some(-0.05)),
        ];
        let names: Vec<&str> = order_by_difference(&diffs)
            .into_iter()
            .map(|index| diffs[index].0)
            .collect();
        assert_eq!(
            names,
            ["gamma", "zeta", "alpha", "delta", "beta", "epsilon"]
        );
        assert!(order_by_difference(&[]).is_empty());
    }

    #[test]
    fn the_shares_add_up_to_the_overall_difference() {
        // Three scenarios of 10 pairs each, N = 30: (b, c) = (6, 0), (1, 3), (2, 2).
        // Shares: (0 − 6)/30 = −0.2, (3 − 1)/30 = +0.0667, 0. Overall (C − B)/N = (5 − 9)/30.
        let scenarios = [(6, 0), (1, 3), (2, 2)];
        let shares: Vec<f64> = scenarios
            .iter()
            .map(|&(b, c)| share_of_overall(b, c, 30).unwrap_or(f64::NAN))
            .collect();
        assert!((shares[0] + 0.2).abs() < 1e-12, "{shares:?}");
        assert!((shares[1] - 2.0 / 30.0).abs() < 1e-12, "{shares:?}");
        assert_eq!(shares[2], 0.0);
        let total: f64 = shares.iter().sum();
        assert!((total - (5.0 - 9.0) / 30.0).abs() < 1e-12, "{total}");
        assert_eq!(share_of_overall(1, 0, 0), None);
    }
}
