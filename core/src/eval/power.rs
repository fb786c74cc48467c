//! The power of the paired comparison before and after the runs: how likely McNemar's test (the
//! report's own rule, [`mcnemar_score`] `< alpha`) is to call a true difference, the smallest
//! difference it calls 4 times in 5 with a number of pairs, and the pairs a difference needs.
//!
//! The model: arm A passes a run with probability `p_a`, arm B with `p_b`, and the two runs of
//! a pair are independent given the scenario. So a pair disagrees with "only A passed"
//! probability `p_a(1 − p_b)` and "only B passed" probability `p_b(1 − p_a)`. The number of
//! disagreeing pairs among `n` is binomial, and given `m` of them, the number where only B
//! passed is binomial with the share of the second kind. The power is the exact sum of the
//! probabilities of every outcome the test rejects: no normal approximation, so the dry run's
//! figures and the report's are one computation (`--dry-run` and `eval.json` agree for the same
//! pairs and pass rate). Runs that share more than the scenario (a flaky fixture that fails
//! both arms together) disagree less often than this model says, so real power is higher.
//!
//! Pure and deterministic; fast enough for the dry run of many scenarios: the sum skips the
//! counts of disagreeing pairs whose probability is below 1e-20, and the search for the pairs a
//! difference needs stops at [`PAIRS_CAP`].

use cowork_schema::eval::PowerFigures;

use super::stats::{
    TARGET_POWER, binomial_lower_tail, binomial_pmf, binomial_upper_tail, first_passing,
    mcnemar_score,
};

/// The most pairs [`runs_needed`] searches: beyond it the dry run says "more than".
pub const PAIRS_CAP: u64 = 100_000;

/// The grid of [`detectable_difference`]: half a point.
pub const DIFFERENCE_STEP: f64 = 0.005;

/// Counts of disagreeing pairs whose probability is below this (relative to the largest) add
/// nothing visible to a power and are skipped.
const NEGLIGIBLE: f64 = 1e-20;

/// The smallest `c ≥ m/2` with `mcnemar_score(m − c, c) < alpha`: with `m` disagreeing pairs,
/// the test rejects exactly when the pairs where only B passed number at least this, or at most
/// `m` minus it (the score is symmetric in its two counts). `None` when no split of `m` is
/// significant.
fn rejection_threshold(m: u64, alpha: f64) -> Option<u64> {
    let rejects = |c: u64| mcnemar_score(m - c, c) < alpha;
    if m == 0 || !rejects(m) {
        return None;
    }
    // The statistic |2c − m|/√m grows with c from c = m/2 on, so rejection is monotone there.
    // !rejects(m / 2) (the even split, or below it, never rejects), rejects(m).
    Some(first_passing(m / 2, m, rejects))
}

/// The probability that McNemar's two-sided score test at `alpha` rejects with `pairs` complete
/// pairs when arm A passes with probability `p_a` and arm B with `p_b`, independently within a
/// pair (see the module's model). With `p_a = p_b` it is the test's size.
pub fn mcnemar_power(pairs: u64, p_a: f64, p_b: f64, alpha: f64) -> f64 {
    let (p_a, p_b) = (p_a.clamp(0.0, 1.0), p_b.clamp(0.0, 1.0));
    let only_a = p_a * (1.0 - p_b);
    let only_b = p_b * (1.0 - p_a);
    let disagree = only_a + only_b;
    if pairs == 0 || disagree <= 0.0 || !(alpha > 0.0 && alpha < 1.0) {
        return 0.0;
    }
    let share_b = only_b / disagree;
    let n = pairs as f64;
    let rejection_given = |m: u64| -> f64 {
        rejection_threshold(m, alpha).map_or(0.0, |threshold| {
            let m_f = m as f64;
            binomial_upper_tail(threshold as f64, m_f, share_b)
                + binomial_lower_tail((m - threshold) as f64, m_f, share_b)
        })
    };
    let mode = (((n + 1.0) * disagree).floor() as u64).min(pairs);
    let peak = binomial_pmf(mode as f64, n, disagree);
    let mut power = 0.0;
    // Outward from the mode, where the binomial is unimodal: each side ends at its first
    // negligible count.
    let mut m = mode;
    loop {
        let weight = binomial_pmf(m as f64, n, disagree);
        if weight < peak * NEGLIGIBLE {
            break;
        }
        power += weight * rejection_given(m);
        if m == pairs {
            break;
        }
        m += 1;
    }
    let mut m = mode;
    while m > 0 {
        m -= 1;
        let weight = binomial_pmf(m as f64, n, disagree);
        if weight < peak * NEGLIGIBLE {
            break;
        }
        power += weight * rejection_given(m);
    }
    power.clamp(0.0, 1.0)
}

/// The smallest rise of B's pass rate over `p_a`, on a half-point grid, that McNemar's test at
/// `alpha` detects with probability at least `power` from `pairs` complete pairs (B better:
/// `p_b = p_a + d`). Found by bisection on the grid, as the power grows with the difference.
/// `None` when even B always passing would not be detected that often. The time grows about
/// linearly with `pairs` (a few milliseconds at 10,000 in a release build).
pub fn detectable_difference(pairs: u64, p_a: f64, alpha: f64, power: f64) -> Option<f64> {
    if pairs == 0 || !(0.0..=1.0).contains(&p_a) {
        return None;
    }
    // The last grid point at or below 1 − p_a (the tolerance keeps 0.05/0.005 at 10 steps).
    let steps = ((1.0 - p_a) / DIFFERENCE_STEP + 1e-9).floor() as u64;
    let difference = |step: u64| step as f64 * DIFFERENCE_STEP;
    let detects =
        |step: u64| mcnemar_power(pairs, p_a, (p_a + difference(step)).min(1.0), alpha) >= power;
    if steps == 0 || !detects(steps) {
        return None;
    }
    // !detects(0) (step 0 is no difference), detects(steps).
    Some(difference(first_passing(0, steps, detects)))
}

/// The fewest complete pairs with which McNemar's test at `alpha` detects a rise of `mde` over
/// `p_a` (B better) with probability at least `power`: doubling, then bisection on the pairs.
/// The power of a discrete test saw-tooths slightly with the pairs, so this is the first size
/// the bisection finds, the same in the dry run and the report. `None` when `p_a + mde` is above
/// 1, `mde` is not positive, or more than [`PAIRS_CAP`] pairs would be needed.
pub fn runs_needed(mde: f64, p_a: f64, alpha: f64, power: f64) -> Option<u64> {
    let p_b = p_a + mde;
    if !(mde > 0.0 && (0.0..=1.0).contains(&p_a) && p_b <= 1.0 + 1e-9) {
        return None;
    }
    let detects = |pairs: u64| mcnemar_power(pairs, p_a, p_b.min(1.0), alpha) >= power;
    // Invariant: !detects(low) (0 pairs detect nothing), detects(high) once the loop ends.
    let (mut low, mut high) = (0, 1);
    while !detects(high) {
        if high >= PAIRS_CAP {
            return None;
        }
        low = high;
        high = (high * 2).min(PAIRS_CAP);
    }
    Some(first_passing(low, high, detects))
}

/// The power figures of one comparison: the detectable difference with `pairs` pairs when arm A
/// passes at `p_a`, and the pairs `mde` needs, at `alpha` and [`TARGET_POWER`]. The report's
/// `power` of each comparison and the dry run's rows are this one function.
pub fn power_figures(pairs: u64, p_a: f64, alpha: f64, mde: Option<f64>) -> PowerFigures {
    PowerFigures {
        arm_a_pass_rate: p_a,
        target_power: TARGET_POWER,
        detectable_diff: detectable_difference(pairs, p_a, alpha, TARGET_POWER),
        mde,
        pairs_for_mde: mde.and_then(|mde| runs_needed(mde, p_a, alpha, TARGET_POWER)),
    }
}

#[cfg(test)]
mod tests;
