//! The power against a direct enumeration of every outcome, its size at no difference, its
//! growth with pairs and difference, and the two searches built on it.

use super::*;

const ALPHA: f64 = 0.05;

/// `n! / (b! c! (n − b − c)!) · p10^b · p01^c · pconc^(n − b − c)`, from log-factorials summed
/// term by term: slow and plain, which is the point.
fn multinomial(n: u64, b: u64, c: u64, probabilities: (f64, f64, f64)) -> f64 {
    let ln_factorial = |k: u64| (1..=k).map(|i| (i as f64).ln()).sum::<f64>();
    let (p10, p01, concordant) = probabilities;
    let rest = n - b - c;
    let ln_count = ln_factorial(n) - ln_factorial(b) - ln_factorial(c) - ln_factorial(rest);
    let term = |count: u64, p: f64| {
        if count == 0 {
            0.0
        } else {
            count as f64 * p.ln()
        }
    };
    (ln_count + term(b, p10) + term(c, p01) + term(rest, concordant)).exp()
}

/// The power by listing every table `(b, c)` of `n` pairs and applying the report's rule.
fn enumerated_power(n: u64, p_a: f64, p_b: f64, alpha: f64) -> f64 {
    let p10 = p_a * (1.0 - p_b);
    let p01 = p_b * (1.0 - p_a);
    let probabilities = (p10, p01, 1.0 - p10 - p01);
    let mut power = 0.0;
    for b in 0..=n {
        for c in 0..=(n - b) {
            if mcnemar_score(b, c) < alpha {
                power += multinomial(n, b, c, probabilities);
            }
        }
    }
    power
}

#[test]
fn the_power_equals_a_direct_enumeration_of_every_outcome() {
    for (n, p_a, p_b) in [
        (10, 0.5, 0.5),
        (12, 0.6, 0.9),
        (25, 0.9, 0.6),
        (30, 0.3, 0.55),
        (40, 0.95, 0.99),
        (7, 0.1, 0.8),
    ] {
        let exact = mcnemar_power(n, p_a, p_b, ALPHA);
        let listed = enumerated_power(n, p_a, p_b, ALPHA);
        assert!(
            (exact - listed).abs() < 1e-10,
            "n {n}, pA {p_a}, pB {p_b}: {exact} vs {listed}"
        );
    }
}

#[test]
fn with_no_difference_the_power_is_the_size_of_the_test() {
    // The score test's size stays near alpha; it never calls a difference that is not there
    // much more often than alpha says.
    for n in [10, 20, 50, 100, 400] {
        for p in [0.2, 0.5, 0.9] {
            let size = mcnemar_power(n, p, p, ALPHA);
            assert!(size <= ALPHA * 1.25, "n {n}, p {p}: size {size}");
        }
    }
    // Arms that never disagree are never told apart.
    assert_eq!(mcnemar_power(100, 1.0, 1.0, ALPHA), 0.0);
    assert_eq!(mcnemar_power(100, 0.0, 0.0, ALPHA), 0.0);
    assert_eq!(mcnemar_power(0, 0.2, 0.9, ALPHA), 0.0);
}

#[test]
fn an_arm_that_always_fails_against_one_that_always_passes_is_told_apart_from_four_pairs() {
    // Every pair is "only B passed": z = √n, significant at 0.05 from n = 4 (2 > 1.96).
    assert_eq!(mcnemar_power(3, 0.0, 1.0, ALPHA), 0.0);
    assert!((mcnemar_power(4, 0.0, 1.0, ALPHA) - 1.0).abs() < 1e-12);
    assert_eq!(runs_needed(1.0, 0.0, ALPHA, 0.8), Some(4));
    // With A never passing, 4 pairs detect B only when all 4 B runs pass: pB⁴ ≥ 0.8 from
    // pB = 0.95 (0.8145), not at 0.945 (0.7975).
    let all_four = |p_b: f64| p_b.powi(4);
    assert!((mcnemar_power(4, 0.0, 0.95, ALPHA) - all_four(0.95)).abs() < 1e-12);
    let d = detectable_difference(4, 0.0, ALPHA, 0.8).expect("detectable");
    assert!((d - 0.95).abs() < 1e-12, "{d}");
}

#[test]
fn the_power_grows_with_the_pairs_and_the_difference() {
    let mut last = 0.0;
    for n in [20, 40, 80, 160, 320] {
        let power = mcnemar_power(n, 0.7, 0.85, ALPHA);
        assert!(power > last, "n {n}: {power} after {last}");
        last = power;
    }
    let mut last = 0.0;
    for p_b in [0.75, 0.8, 0.85, 0.9, 0.95] {
        let power = mcnemar_power(60, 0.7, p_b, ALPHA);
        assert!(power > last, "pB {p_b}: {power} after {last}");
        last = power;
    }
}

#[test]
fn the_detectable_difference_is_the_first_half_point_that_reaches_the_power() {
    for (pairs, p_a) in [(10, 0.5), (30, 0.7), (100, 0.9), (20, 0.0)] {
        let d = detectable_difference(pairs, p_a, ALPHA, 0.8).expect("detectable");
        let steps = d / DIFFERENCE_STEP;
        assert!((steps - steps.round()).abs() < 1e-9, "{d} is on the grid");
        assert!(mcnemar_power(pairs, p_a, (p_a + d).min(1.0), ALPHA) >= 0.8);
        assert!(mcnemar_power(pairs, p_a, p_a + d - DIFFERENCE_STEP, ALPHA) < 0.8);
    }
    // More pairs detect smaller differences.
    let small = detectable_difference(40, 0.6, ALPHA, 0.8).expect("40 pairs");
    let large = detectable_difference(400, 0.6, ALPHA, 0.8).expect("400 pairs");
    assert!(large < small, "{large} < {small}");
    // Nothing to rise to, no pair, or too few pairs for B always passing.
    assert_eq!(detectable_difference(100, 1.0, ALPHA, 0.8), None);
    assert_eq!(detectable_difference(0, 0.5, ALPHA, 0.8), None);
    assert_eq!(detectable_difference(3, 0.5, ALPHA, 0.8), None);
}

#[test]
fn the_runs_needed_are_the_pairs_where_the_power_first_reaches_the_target() {
    for (mde, p_a) in [(0.15, 0.8), (0.3, 0.5), (0.05, 0.9)] {
        let n = runs_needed(mde, p_a, ALPHA, 0.8).expect("reachable");
        assert!(
            mcnemar_power(n, p_a, p_a + mde, ALPHA) >= 0.8,
            "{mde} {p_a}: {n}"
        );
        assert!(
            mcnemar_power(n - 1, p_a, p_a + mde, ALPHA) < 0.8,
            "{mde} {p_a}: {n}"
        );
        // The detectable difference at that size is at most the mde.
        let d = detectable_difference(n, p_a, ALPHA, 0.8).expect("detectable");
        assert!(d <= mde + 1e-9, "{d} at {n} pairs for {mde}");
    }
    assert_eq!(runs_needed(0.2, 0.9, ALPHA, 0.8), None, "95% + 20 points");
    assert_eq!(runs_needed(0.0, 0.5, ALPHA, 0.8), None);
}

#[test]
fn the_figures_carry_the_rate_the_target_and_the_mde() {
    let figures = power_figures(10, 0.95, ALPHA, Some(0.04));
    assert_eq!(figures.arm_a_pass_rate, 0.95);
    assert_eq!(figures.target_power, 0.8);
    assert_eq!(figures.mde, Some(0.04));
    assert_eq!(
        figures.pairs_for_mde,
        runs_needed(0.04, 0.95, ALPHA, 0.8),
        "the same search"
    );
    assert_eq!(power_figures(10, 0.95, ALPHA, None).pairs_for_mde, None);
}

#[test]
fn every_comparison_of_a_report_carries_the_figures_of_its_pairs_and_arm_a_rate() {
    use crate::eval::{ArmOutcome, ArmSources, EvalOptions, PairedOutcome, eval_report, words};
    let run = |pass: bool| ArmOutcome {
        pass,
        completed: true,
        cost_usd: None,
    };
    // Two scenarios of 12 pairs: A passes 6 of 12 in "one" and 9 of 12 in "two".
    let mut outcomes = Vec::new();
    for (scenario, a_passes) in [("one", 6), ("two", 9)] {
        for repeat_index in 0..12 {
            outcomes.push(PairedOutcome {
                scenario: scenario.to_owned(),
                repeat_index,
                a: run(repeat_index < a_passes),
                b: run(repeat_index % 2 == 0),
            });
        }
    }
    let sources = ArmSources {
        a: "a".to_owned(),
        b: "b".to_owned(),
    };
    let options = EvalOptions {
        alpha: ALPHA,
        mde: Some(0.15),
    };
    let report = eval_report(&sources, &outcomes, &options).expect("valid");
    let figures = |comparison: &crate::eval::Comparison| comparison.power.clone();
    assert_eq!(
        figures(&report.scenarios[0].comparison),
        Some(power_figures(12, 0.5, ALPHA, Some(0.15)))
    );
    assert_eq!(
        figures(&report.scenarios[1].comparison),
        Some(power_figures(12, 0.75, ALPHA, Some(0.15)))
    );
    assert_eq!(
        figures(&report.overall),
        Some(power_figures(24, 0.625, ALPHA, Some(0.15)))
    );
    let sentence = words::power_sentence(&report).expect("figures");
    assert!(
        sentence.starts_with("power: 4 times in 5 these 24 pairs detect B passing"),
        "{sentence}"
    );
    assert!(sentence.contains("A's 62%"), "{sentence}");
    assert!(sentence.contains("for --mde 15: ~"), "{sentence}");
    // No complete pair, no figures.
    let empty = eval_report(&sources, &[], &options).expect("valid");
    assert_eq!(empty.overall.power, None);
    assert_eq!(words::power_sentence(&empty), None);
}
