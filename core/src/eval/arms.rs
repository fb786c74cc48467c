//! Evals with several arms: each candidate is compared with the control by the paired test of
//! [`eval_report`](super::eval_report), and the overall p-values are adjusted by Holm's
//! step-down method, so that the chance of calling any candidate better or worse when none
//! differs stays at alpha however many candidates there are (decisions.md#eval-design).
//!
//! Holm: sort the m p-values ascending, p(1) ≤ … ≤ p(m); the adjusted p(i) is
//! max over j ≤ i of min(1, (m − j + 1) · p(j)). It controls the family-wise error at least as
//! well as Bonferroni (m · p) and rejects at least as often, with no assumption on how the
//! comparisons depend on each other (they share the control's runs).

use cowork_schema::eval::{ControlComparison, EvalReport, NamedArm};

use super::decide_verdict;

/// Holm's adjusted p-values, in the order of `p_values`.
pub fn holm_adjusted(p_values: &[f64]) -> Vec<f64> {
    let m = p_values.len();
    let mut order: Vec<usize> = (0..m).collect();
    // Ties keep their input order, so equal p-values get equal adjusted values either way.
    order.sort_by(|&left, &right| p_values[left].total_cmp(&p_values[right]));
    let mut adjusted = vec![0.0; m];
    let mut running_max = 0.0_f64;
    for (step, &index) in order.iter().enumerate() {
        let factor = (m - step) as f64;
        running_max = running_max.max((factor * p_values[index]).min(1.0));
        adjusted[index] = running_max;
    }
    adjusted
}

/// Each candidate's comparison with the control, Holm-adjusted and ranked: the largest overall
/// B − control first (a comparison with no complete pair last), ties in arm order.
pub fn rank_against_control(
    comparisons: Vec<(NamedArm, NamedArm, EvalReport)>,
    alpha: f64,
) -> Vec<ControlComparison> {
    let p_values: Vec<f64> = comparisons
        .iter()
        .map(|(_, _, report)| report.overall.mcnemar_p)
        .collect();
    let adjusted = holm_adjusted(&p_values);
    let mut ranked: Vec<ControlComparison> = comparisons
        .into_iter()
        .zip(adjusted)
        .map(|((control, candidate, report), holm_p)| ControlComparison {
            rank: 0,
            verdict: decide_verdict(report.overall.discordant, holm_p, alpha),
            candidate,
            control,
            holm_p,
            report,
        })
        .collect();
    let estimate = |comparison: &ControlComparison| {
        comparison
            .report
            .overall
            .diff
            .map_or(f64::NEG_INFINITY, |diff| diff.estimate)
    };
    // A stable sort keeps arm order among equal differences.
    ranked.sort_by(|left, right| estimate(right).total_cmp(&estimate(left)));
    for (rank, comparison) in (1_u32..).zip(&mut ranked) {
        comparison.rank = rank;
    }
    ranked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holm_matches_a_hand_computation() {
        // Sorted: 0.01 (×3 = 0.03), 0.02 (×2 = 0.04), 0.04 (×1 = 0.04).
        let adjusted = holm_adjusted(&[0.04, 0.01, 0.02]);
        let expected = [0.04, 0.03, 0.04];
        for (got, want) in adjusted.iter().zip(expected) {
            assert!((got - want).abs() < 1e-12, "{adjusted:?}");
        }
    }

    #[test]
    fn holm_is_monotone_and_capped_at_one() {
        // Sorted: 0.03 (×3 = 0.09), 0.5 (×2 = 1.0, capped), 0.6 (×1, but the running max is 1).
        let adjusted = holm_adjusted(&[0.6, 0.03, 0.5]);
        for (got, want) in adjusted.iter().zip([1.0, 0.09, 1.0]) {
            assert!((got - want).abs() < 1e-12, "{adjusted:?}");
        }
    }

    #[test]
    fn a_single_comparison_is_not_adjusted() {
        assert_eq!(holm_adjusted(&[0.037]), [0.037]);
    }
}
