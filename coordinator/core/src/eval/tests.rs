//! Tests of the eval statistics: McNemar against hand-computed and independently computed
//! values, the bootstrap on cases small enough to reason about, the generator against its
//! published reference outputs, and the report on acceptance-shaped synthetic batches.

use serde_json::json;

use super::stats::{
    SplitMix64, Xoshiro256StarStar, binomial_half_lower_tail_exact,
    binomial_half_lower_tail_saddle_point, interpolated_quantile,
};
use super::*;

// ---------------------------------------------------------------------------------------------
// McNemar.

/// Checks `mcnemar_exact(b, c)` and `mcnemar_exact(c, b)` (the test is symmetric) against
/// `expected` within `relative_tolerance` (0 means bit-exact).
fn check_mcnemar(b: u64, c: u64, expected: f64, relative_tolerance: f64) {
    for (first, second) in [(b, c), (c, b)] {
        let actual = mcnemar_exact(first, second);
        let error = if expected == 0.0 {
            actual.abs()
        } else {
            ((actual - expected) / expected).abs()
        };
        assert!(
            error <= relative_tolerance,
            "mcnemar_exact({first}, {second}) = {actual:e}, expected {expected:e} \
             (relative error {error:e} > {relative_tolerance:e})"
        );
    }
}

#[test]
fn mcnemar_matches_hand_computed_values() {
    // p = min(1, 2·Σ_{i ≤ min(b,c)} C(n, i) / 2^n), n = b + c, worked by hand:
    let cases = [
        // No discordant pair: nothing to test, p = 1 by definition.
        (0, 0, 1.0),
        // n = 1: 2·1/2 = 1.
        (0, 1, 1.0),
        // n = 5: 2·1/32.
        (0, 5, 0.0625),
        // n = 10: 2·(1 + 10)/1024 = 22/1024.
        (1, 9, 0.021_484_375),
        // n = 10: 2·(1 + 10 + 45)/1024 = 112/1024.
        (2, 8, 0.109_375),
        // n = 10: 2·(1 + 10 + 45 + 120 + 210 + 252)/1024 = 1276/1024, capped at 1.
        (5, 5, 1.0),
        // n = 10: 2·1/1024.
        (0, 10, 0.001_953_125),
        // n = 8: 2·(1 + 8)/256 = 18/256.
        (1, 7, 0.070_312_5),
        // n = 6: 2·1/64 (one scenario of the acceptance batch below).
        (0, 6, 0.031_25),
        // n = 18: 2·1/2^18.
        (0, 18, 7.629_394_531_25e-6),
        // n = 24: 2·(1 + 24 + 276 + 2024)/2^24 = 4650/16777216.
        (3, 21, 2.771_615_982_055_664e-4),
    ];
    for (b, c, expected) in cases {
        check_mcnemar(b, c, expected, 0.0);
    }
}

#[test]
fn mcnemar_matches_exact_rational_values_at_large_n() {
    // Reference values from exact rational arithmetic in Python 3.11 (independent of this code):
    //
    //     from fractions import Fraction
    //     def p_exact(b, c):
    //         n, k = b + c, min(b, c)
    //         term = total = 1                        # C(n, 0)
    //         for i in range(k):
    //             term = term * (n - i) // (i + 1)    # C(n, i + 1), exact integers
    //             total += term
    //         return float(min(Fraction(1), Fraction(2 * total, 2 ** n)))  # correctly rounded
    //
    // Up to n = 100 the implementation sums exact integers too, so it must agree to the bit;
    // above, it uses Loader's saddle-point term and must agree to 1e-12 relative.
    let exact_path = [(45, 55, 0.368_201_617_326_696_26)];
    for (b, c, expected) in exact_path {
        check_mcnemar(b, c, expected, 0.0);
    }
    let saddle_point_path = [
        (40, 61, 0.046_044_066_929_342_806),
        (0, 101, 7.888_609_052_210_118e-31),
        (150, 210, 0.001_834_007_417_096_487_5),
        (480, 600, 0.000_289_572_902_935_826_5),
        (10, 1000, 5.359_574_874_624_727e-281),
        (4900, 5100, 0.046_585_527_704_947_39),
        (49_800, 50_200, 0.207_038_971_764_224_84),
        (49_000, 51_000, 2.588_716_038_346_898e-10),
        (50_000, 50_000, 1.0),
        // 2·2^−100000 is below the smallest f64: Python's float() gives 0.0 as well.
        (0, 100_000, 0.0),
    ];
    for (b, c, expected) in saddle_point_path {
        check_mcnemar(b, c, expected, 1e-12);
    }
}

#[test]
fn saddle_point_tail_agrees_with_exact_integer_tail() {
    // Both tail algorithms on every (k ≤ n/2, n ≤ 100): the saddle-point path is the one used
    // for large n, so this checks it where exact answers are cheap.
    for n in 1_u32..=100 {
        for k in 0..=n / 2 {
            let exact = binomial_half_lower_tail_exact(u128::from(k), u128::from(n));
            let saddle = binomial_half_lower_tail_saddle_point(f64::from(k), f64::from(n));
            let error = ((saddle - exact) / exact).abs();
            assert!(
                error < 1e-12,
                "P[X <= {k}] for n = {n}: exact {exact:e}, saddle point {saddle:e}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Bootstrap.

const SEED: u64 = 20_240_611;

/// `count` copies of a pair.
fn repeat_pair(pair: (bool, bool), count: usize) -> Vec<(bool, bool)> {
    vec![pair; count]
}

#[test]
fn bootstrap_of_all_equal_pairs_is_zero() {
    let mut pairs = repeat_pair((true, true), 7);
    pairs.extend(repeat_pair((false, false), 5));
    let interval =
        paired_bootstrap_diff(&pairs, 2000, SEED, 0.95).expect("pairs and options are valid");
    assert_eq!(
        interval,
        Interval {
            estimate: 0.0,
            low: 0.0,
            high: 0.0
        }
    );
}

#[test]
fn bootstrap_estimate_is_the_exact_paired_difference() {
    // 3 pairs where only B passed, 1 where only A passed, 6 where both passed:
    // pass rate B − pass rate A = (9 − 7)/10.
    let mut pairs = repeat_pair((false, true), 3);
    pairs.extend(repeat_pair((true, false), 1));
    pairs.extend(repeat_pair((true, true), 6));
    let interval =
        paired_bootstrap_diff(&pairs, 2000, SEED, 0.95).expect("pairs and options are valid");
    assert_eq!(interval.estimate, 2.0 / 10.0);
}

#[test]
fn bootstrap_interval_contains_the_estimate() {
    let cases: [(&str, Vec<(bool, bool)>); 3] = [
        ("B mostly better", {
            let mut pairs = repeat_pair((false, true), 4);
            pairs.extend(repeat_pair((true, true), 5));
            pairs.extend(repeat_pair((true, false), 1));
            pairs
        }),
        ("B mostly worse", {
            let mut pairs = repeat_pair((true, false), 6);
            pairs.extend(repeat_pair((false, false), 4));
            pairs
        }),
        ("balanced", {
            let mut pairs = repeat_pair((true, false), 3);
            pairs.extend(repeat_pair((false, true), 3));
            pairs.extend(repeat_pair((true, true), 4));
            pairs
        }),
    ];
    for (name, pairs) in cases {
        let interval =
            paired_bootstrap_diff(&pairs, 4000, SEED, 0.95).expect("pairs and options are valid");
        assert!(
            interval.low <= interval.estimate && interval.estimate <= interval.high,
            "{name}: {interval:?}"
        );
        assert!(
            interval.low < interval.high,
            "{name}: a spread of outcomes gives a spread"
        );
    }
}

#[test]
fn bootstrap_is_deterministic_for_a_seed() {
    let mut pairs = repeat_pair((false, true), 4);
    pairs.extend(repeat_pair((true, false), 3));
    pairs.extend(repeat_pair((true, true), 3));
    let first = paired_bootstrap_diff(&pairs, 3000, SEED, 0.95).expect("valid");
    let second = paired_bootstrap_diff(&pairs, 3000, SEED, 0.95).expect("valid");
    assert_eq!(first, second);
    // A narrower level can only narrow the same resamples' interval.
    let narrower = paired_bootstrap_diff(&pairs, 3000, SEED, 0.5).expect("valid");
    assert!(narrower.low >= first.low && narrower.high <= first.high);
}

#[test]
fn bootstrap_of_one_discordant_pair_is_certain() {
    // Every resample of a single pair is that pair.
    let interval = paired_bootstrap_diff(&[(false, true)], 500, SEED, 0.95).expect("valid");
    assert_eq!(
        interval,
        Interval {
            estimate: 1.0,
            low: 1.0,
            high: 1.0
        }
    );
}

#[test]
fn bootstrap_of_two_pairs_spans_the_possible_differences() {
    // Pairs (A fail, B pass) and (both pass): a resample's difference is 0, 1/2 or 1 with
    // probabilities 1/4, 1/2, 1/4. The 2.5% and 97.5% quantiles fall inside the masses at 0 and
    // 1, so the 95% interval is exactly [0, 1] around the estimate 1/2.
    let pairs = [(false, true), (true, true)];
    let interval = paired_bootstrap_diff(&pairs, 10_000, SEED, 0.95).expect("valid");
    assert_eq!(
        interval,
        Interval {
            estimate: 0.5,
            low: 0.0,
            high: 1.0
        }
    );
    // At 40% the quantiles are the 30th and 70th percentiles, both inside the mass at 1/2.
    let interval = paired_bootstrap_diff(&pairs, 10_000, SEED, 0.4).expect("valid");
    assert_eq!((interval.low, interval.high), (0.5, 0.5));
}

#[test]
fn stratified_bootstrap_keeps_each_scenario_whole() {
    // Scenario 1: both arms always pass; scenario 2: only B ever passes. Resampling within each
    // scenario always draws 5 pairs of each, so every resample's difference is exactly 5/10.
    // Pooling without strata lets the mix vary, so the plain interval is wider.
    let always_equal = repeat_pair((true, true), 5);
    let only_b = repeat_pair((false, true), 5);
    let stratified =
        stratified_bootstrap_diff(&[&always_equal, &only_b], 2000, SEED, 0.95).expect("valid");
    assert_eq!(
        stratified,
        Interval {
            estimate: 0.5,
            low: 0.5,
            high: 0.5
        }
    );
    let pooled: Vec<(bool, bool)> = [always_equal, only_b].concat();
    let plain = paired_bootstrap_diff(&pooled, 2000, SEED, 0.95).expect("valid");
    assert_eq!(plain.estimate, 0.5);
    assert!(plain.low < 0.5 && plain.high > 0.5, "{plain:?}");
}

#[test]
fn bootstrap_rejects_what_it_cannot_compute() {
    assert_eq!(
        paired_bootstrap_diff(&[], 100, SEED, 0.95),
        Err(BootstrapError::NoPairs)
    );
    assert_eq!(
        stratified_bootstrap_diff(&[&[], &[]], 100, SEED, 0.95),
        Err(BootstrapError::NoPairs)
    );
    assert_eq!(
        paired_bootstrap_diff(&[(true, true)], 0, SEED, 0.95),
        Err(BootstrapError::NoResamples)
    );
    for level in [0.0, 1.0, -0.5, 95.0, f64::NAN] {
        assert!(
            matches!(
                paired_bootstrap_diff(&[(true, true)], 100, SEED, level),
                Err(BootstrapError::LevelOutOfRange(_))
            ),
            "level {level} is refused"
        );
    }
}

#[test]
fn quantiles_interpolate_between_order_statistics() {
    // Type 7: position (len − 1)·q, linear between its neighbours (numpy.percentile's default).
    let cases: [(&[i64], f64, f64); 5] = [
        (&[0, 10], 0.25, 2.5),
        (&[1, 2, 3, 4], 0.025, 1.075),
        (&[1, 2, 3, 4], 0.975, 3.925),
        (&[5], 0.5, 5.0),
        (&[-3, -1, 0, 2], 1.0, 2.0),
    ];
    for (sorted, quantile, expected) in cases {
        let actual = interpolated_quantile(sorted, quantile);
        assert!(
            (actual - expected).abs() < 1e-12,
            "quantile {quantile} of {sorted:?}: {actual}, expected {expected}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The generator.

#[test]
fn splitmix64_matches_its_reference_output() {
    // The first ten outputs for seed 1477776061723855037, as published with rand_xoshiro's
    // `splitmix64.rs` test, which took them from Vigna's reference `splitmix64.c`.
    let expected: [u64; 10] = [
        1_985_237_415_132_408_290,
        2_979_275_885_539_914_483,
        13_511_426_838_097_143_398,
        8_488_337_342_461_049_707,
        15_141_737_807_933_549_159,
        17_093_170_987_380_407_015,
        16_389_528_042_912_955_399,
        13_177_319_091_862_933_652,
        10_841_969_400_225_389_492,
        17_094_824_097_954_834_098,
    ];
    let mut generator = SplitMix64::new(1_477_776_061_723_855_037);
    let actual: Vec<u64> = (0..10).map(|_| generator.next_u64()).collect();
    assert_eq!(actual, expected);
}

#[test]
fn xoshiro256starstar_matches_its_reference_output() {
    // The first ten outputs from state [1, 2, 3, 4] of the reference `xoshiro256starstar.c`
    // (as used by rand_xoshiro's and Vigna's C++ tests).
    let expected: [u64; 10] = [
        11_520,
        0,
        1_509_978_240,
        1_215_971_899_390_074_240,
        1_216_172_134_540_287_360,
        607_988_272_756_665_600,
        16_172_922_978_634_559_625,
        8_476_171_486_693_032_832,
        10_595_114_339_597_558_777,
        2_904_607_092_377_533_576,
    ];
    let mut generator = Xoshiro256StarStar::from_state([1, 2, 3, 4]);
    let actual: Vec<u64> = (0..10).map(|_| generator.next_u64()).collect();
    assert_eq!(actual, expected);
}

#[test]
fn bounded_draws_stay_in_range_and_are_even() {
    let mut generator = Xoshiro256StarStar::from_seed(SEED);
    for bound in [1_u64, 2, 3, 7, 1 << 40, u64::MAX] {
        for _ in 0..1000 {
            assert!(generator.below(bound) < bound, "draw below {bound}");
        }
    }
    // 60 000 draws below 6: each face expects 10 000 with a standard deviation of about 91;
    // ±500 is more than 5 standard deviations, and the seed fixes the outcome.
    let mut faces = [0_u32; 6];
    for _ in 0..60_000 {
        faces[generator.below(6) as usize] += 1;
    }
    for (face, count) in faces.iter().enumerate() {
        assert!((9_500..=10_500).contains(count), "face {face}: {count}");
    }
}

// ---------------------------------------------------------------------------------------------
// The report.

fn sources() -> ArmSources {
    ArmSources {
        a: "skills/answer-v1".into(),
        b: "skills/answer-v2".into(),
    }
}

fn options() -> EvalOptions {
    EvalOptions {
        alpha: DEFAULT_ALPHA,
        confidence_level: DEFAULT_CONFIDENCE_LEVEL,
        resamples: 2000,
        seed: SEED,
    }
}

fn run(pass: bool) -> ArmOutcome {
    ArmOutcome {
        pass,
        completed: true,
        cost_usd: Some(0.25),
    }
}

fn unanswered() -> ArmOutcome {
    ArmOutcome {
        pass: false,
        completed: false,
        cost_usd: None,
    }
}

/// One scenario's pairs, repeat index `i` pairing `a_runs[i]` with `b_runs[i]`.
fn scenario_pairs(
    scenario: &str,
    a_runs: &[ArmOutcome],
    b_runs: &[ArmOutcome],
) -> Vec<PairedOutcome> {
    assert_eq!(
        a_runs.len(),
        b_runs.len(),
        "arms have the same number of runs"
    );
    a_runs
        .iter()
        .zip(b_runs)
        .enumerate()
        .map(|(repeat_idx, (a, b))| PairedOutcome {
            scenario: scenario.to_owned(),
            repeat_index: u32::try_from(repeat_idx).expect("few repeats"),
            a: *a,
            b: *b,
        })
        .collect()
}

/// Runs that pass exactly at the given repeat indices, out of `n_runs`.
fn passing_at(n_runs: usize, passing: &[usize]) -> Vec<ArmOutcome> {
    (0..n_runs).map(|idx| run(passing.contains(&idx))).collect()
}

fn report(outcomes: &[PairedOutcome]) -> EvalReport {
    eval_report(&sources(), outcomes, &options()).expect("outcomes and options are valid")
}

#[test]
fn acceptance_b_made_worse_is_reported_worse() {
    // 3 scenarios × 10 runs per arm; A passes 9 of 10, B 3 of 10. B's passes fall on repeats
    // 7–9 and A's failure on repeat 9, so each scenario has b = 7 (A pass, B fail on 0–6) and
    // c = 1 (repeat 9): p = 18/256 per scenario, too few pairs to call. Pooled, b = 21 and
    // c = 3: p = 4650/2^24 ≈ 2.8e-4, so B is worse overall.
    let a_runs = passing_at(10, &[0, 1, 2, 3, 4, 5, 6, 7, 8]);
    let b_runs = passing_at(10, &[7, 8, 9]);
    let outcomes: Vec<PairedOutcome> = ["alpha", "beta", "gamma"]
        .iter()
        .flat_map(|scenario| scenario_pairs(scenario, &a_runs, &b_runs))
        .collect();
    let report = report(&outcomes);

    let overall = &report.overall;
    assert_eq!(overall.verdict, EvalVerdict::BWorse);
    assert!(overall.mcnemar_p < 0.05);
    assert_eq!(overall.mcnemar_p, 4650.0 / 16_777_216.0);
    assert_eq!(
        overall.discordant,
        Discordant {
            a_pass_b_fail: 21,
            a_fail_b_pass: 3
        }
    );
    assert_eq!(
        (overall.arms[0].pass_rate, overall.arms[1].pass_rate),
        (0.9, 0.3)
    );
    let diff = overall.diff.expect("there are complete pairs");
    assert_eq!(diff.estimate, -18.0 / 30.0);
    assert!(diff.high < 0.0, "the interval excludes 0: {diff:?}");

    assert_eq!(report.scenarios.len(), 3);
    for scenario in &report.scenarios {
        assert_eq!(
            scenario.comparison.mcnemar_p,
            18.0 / 256.0,
            "{}",
            scenario.scenario
        );
        assert_eq!(
            scenario.comparison.verdict,
            EvalVerdict::NoDetectableDifference,
            "{}",
            scenario.scenario
        );
    }
}

#[test]
fn acceptance_b_made_worse_with_random_synthetic_runs() {
    // The same shape with independent random runs: A passes with probability 0.9, B with 0.3,
    // drawn from the seeded generator. The expected split is b ≈ 19, c ≈ 1 over 30 pairs.
    let mut generator = Xoshiro256StarStar::from_seed(7);
    let mut draw = |pass_in_ten: u64| run(generator.below(10) < pass_in_ten);
    let mut outcomes = Vec::new();
    for scenario in ["alpha", "beta", "gamma"] {
        for repeat_index in 0..10 {
            outcomes.push(PairedOutcome {
                scenario: scenario.to_owned(),
                repeat_index,
                a: draw(9),
                b: draw(3),
            });
        }
    }
    let report = report(&outcomes);
    assert_eq!(report.overall.verdict, EvalVerdict::BWorse, "{report:#?}");
    assert!(report.overall.mcnemar_p < 0.05);
    assert!(report.overall.diff.expect("pairs").high < 0.0);
}

#[test]
fn acceptance_identical_arms_show_no_difference() {
    // Both arms run the same variant: every pair agrees, whatever the pass rate.
    let runs = passing_at(10, &[0, 2, 3, 5, 6, 8, 9]);
    let outcomes: Vec<PairedOutcome> = ["alpha", "beta", "gamma"]
        .iter()
        .flat_map(|scenario| scenario_pairs(scenario, &runs, &runs))
        .collect();
    let report = report(&outcomes);
    let comparisons =
        std::iter::once(&report.overall).chain(report.scenarios.iter().map(|s| &s.comparison));
    for comparison in comparisons {
        assert_eq!(comparison.verdict, EvalVerdict::NoDetectableDifference);
        assert_eq!(comparison.mcnemar_p, 1.0);
        assert_eq!(comparison.discordant, Discordant::default());
        assert_eq!(
            comparison.diff,
            Some(Interval {
                estimate: 0.0,
                low: 0.0,
                high: 0.0
            })
        );
    }
}

#[test]
fn b_made_better_is_reported_better() {
    // Mirror image of the worse case, in one scenario: b = 0, c = 6, p = 2/64.
    let a_runs = passing_at(10, &[0, 1, 2]);
    let b_runs = passing_at(10, &[0, 1, 2, 3, 4, 5, 6, 7, 8]);
    let report = report(&scenario_pairs("alpha", &a_runs, &b_runs));
    assert_eq!(report.overall.verdict, EvalVerdict::BBetter);
    assert_eq!(report.overall.mcnemar_p, 0.031_25);
    assert!(report.overall.diff.expect("pairs").low > 0.0);
}

#[test]
fn verdict_follows_the_decision_rule() {
    let check = |b: u64, c: u64, p: f64, alpha: f64, expected: EvalVerdict| {
        let discordant = Discordant {
            a_pass_b_fail: b,
            a_fail_b_pass: c,
        };
        assert_eq!(
            EvalVerdict::decide(discordant, p, alpha),
            expected,
            "b = {b}, c = {c}, p = {p}, alpha = {alpha}"
        );
    };
    check(6, 0, 0.031_25, 0.05, EvalVerdict::BWorse);
    check(0, 6, 0.031_25, 0.05, EvalVerdict::BBetter);
    // Not significant at a stricter alpha.
    check(6, 0, 0.031_25, 0.01, EvalVerdict::NoDetectableDifference);
    // p equal to alpha is not below it.
    check(6, 0, 0.05, 0.05, EvalVerdict::NoDetectableDifference);
    check(3, 3, 1.0, 0.05, EvalVerdict::NoDetectableDifference);
}

#[test]
fn pairs_with_an_incomplete_arm_are_excluded_from_paired_statistics() {
    // Repeat 0: both pass. Repeat 1: A passes, B unanswered. Repeat 2: A errored, B passes.
    // Repeat 3: A passes, B fails. Only repeats 0 and 3 are complete pairs.
    let outcomes = scenario_pairs(
        "alpha",
        &[run(true), run(true), unanswered(), run(true)],
        &[run(true), unanswered(), run(true), run(false)],
    );
    let report = report(&outcomes);
    let overall = &report.overall;
    assert_eq!((overall.pairs, overall.excluded_pairs), (2, 2));
    assert_eq!(
        overall.discordant,
        Discordant {
            a_pass_b_fail: 1,
            a_fail_b_pass: 0
        }
    );
    assert_eq!(overall.diff.expect("two complete pairs").estimate, -0.5);
    // Arm summaries still count every run of the arm.
    let [arm_a, arm_b] = &overall.arms;
    assert_eq!((arm_a.runs, arm_a.completed, arm_a.passes), (4, 3, 3));
    assert_eq!((arm_b.runs, arm_b.completed, arm_b.passes), (4, 3, 2));
    assert_eq!(arm_a.pass_rate, 1.0);
    assert_eq!(arm_b.pass_rate, 2.0 / 3.0);
}

#[test]
fn a_scenario_without_complete_pairs_has_no_difference() {
    let outcomes = scenario_pairs(
        "alpha",
        &[unanswered(), run(true)],
        &[run(true), unanswered()],
    );
    let report = report(&outcomes);
    assert_eq!(report.overall.pairs, 0);
    assert_eq!(report.overall.excluded_pairs, 2);
    assert_eq!(report.overall.diff, None);
    assert_eq!(report.overall.mcnemar_p, 1.0);
    assert_eq!(report.overall.verdict, EvalVerdict::NoDetectableDifference);
}

#[test]
fn empty_eval_reports_nothing_to_compare() {
    let report = report(&[]);
    assert!(report.scenarios.is_empty());
    assert_eq!(report.overall.pairs, 0);
    assert_eq!(report.overall.diff, None);
    assert_eq!(report.overall.arms[0].pass_rate, 0.0);
    assert_eq!(report.overall.arms[0].cost_usd, None);
}

#[test]
fn costs_are_summed_per_arm_with_unknowns_counted() {
    let priced = |pass: bool, cost_usd: Option<f64>| ArmOutcome {
        pass,
        completed: true,
        cost_usd,
    };
    let mut outcomes = scenario_pairs(
        "alpha",
        &[priced(true, Some(0.5)), priced(true, None)],
        &[priced(true, Some(1.5)), priced(false, Some(f64::NAN))],
    );
    outcomes.extend(scenario_pairs(
        "beta",
        &[priced(true, Some(0.25)), unanswered()],
        &[priced(true, None), priced(true, None)],
    ));
    let report = report(&outcomes);
    let [arm_a, arm_b] = &report.overall.arms;
    assert_eq!(arm_a.cost_usd, Some(0.75));
    assert_eq!((arm_a.cost_known_runs, arm_a.cost_unknown_runs), (2, 2));
    assert_eq!(arm_b.cost_usd, Some(1.5));
    // A NaN cost is no cost.
    assert_eq!((arm_b.cost_known_runs, arm_b.cost_unknown_runs), (1, 3));
    let beta_b = &report.scenarios[1].comparison.arms[1];
    assert_eq!(beta_b.cost_usd, None, "no run of B in beta reported a cost");
}

#[test]
fn report_is_independent_of_arrival_order() {
    let a_runs = passing_at(10, &[0, 1, 2, 3, 4, 5, 6, 7]);
    let b_runs = passing_at(10, &[1, 4, 8, 9]);
    let outcomes: Vec<PairedOutcome> = ["gamma", "alpha", "beta"]
        .iter()
        .flat_map(|scenario| scenario_pairs(scenario, &a_runs, &b_runs))
        .collect();
    let mut shuffled = outcomes.clone();
    shuffled.reverse();
    shuffled.rotate_left(7);
    let in_order = serde_json::to_string(&report(&outcomes)).expect("serializable");
    let out_of_order = serde_json::to_string(&report(&shuffled)).expect("serializable");
    assert_eq!(in_order, out_of_order);
    let names: Vec<String> = report(&shuffled)
        .scenarios
        .into_iter()
        .map(|scenario| scenario.scenario)
        .collect();
    assert_eq!(
        names,
        ["alpha", "beta", "gamma"],
        "scenarios sorted by name"
    );
}

#[test]
fn invalid_input_is_refused() {
    let duplicate = [
        scenario_pairs("alpha", &[run(true)], &[run(true)]),
        scenario_pairs("alpha", &[run(false)], &[run(true)]),
    ]
    .concat();
    assert_eq!(
        eval_report(&sources(), &duplicate, &options()),
        Err(EvalError::DuplicatePair {
            scenario: "alpha".into(),
            repeat_index: 0
        })
    );
    let with = |change: fn(&mut EvalOptions)| {
        let mut options = options();
        change(&mut options);
        eval_report(&sources(), &[], &options)
    };
    assert_eq!(
        with(|o| o.alpha = 0.0),
        Err(EvalError::AlphaOutOfRange(0.0))
    );
    assert_eq!(
        with(|o| o.alpha = 1.0),
        Err(EvalError::AlphaOutOfRange(1.0))
    );
    assert!(matches!(
        with(|o| o.alpha = f64::NAN),
        Err(EvalError::AlphaOutOfRange(_))
    ));
    assert_eq!(
        with(|o| o.confidence_level = 1.0),
        Err(EvalError::ConfidenceLevelOutOfRange(1.0))
    );
    assert_eq!(with(|o| o.resamples = 0), Err(EvalError::NoResamples));
}

#[test]
fn report_json_has_labelled_arms_and_a_fixed_shape() {
    // One scenario, two repeats: (A pass, B fail) and (both pass).
    let outcomes = scenario_pairs("alpha", &[run(true), run(true)], &[run(false), run(true)]);
    let actual = serde_json::to_value(report(&outcomes)).expect("serializable");
    let diff = actual["overall"]["diff"].clone();
    let arms = json!([
        {"arm": "A", "source": "skills/answer-v1", "runs": 2, "completed": 2, "passes": 2,
         "passRate": 1.0, "costUsd": 0.5, "costKnownRuns": 2, "costUnknownRuns": 0},
        {"arm": "B", "source": "skills/answer-v2", "runs": 2, "completed": 2, "passes": 1,
         "passRate": 0.5, "costUsd": 0.5, "costKnownRuns": 2, "costUnknownRuns": 0},
    ]);
    let comparison_fields = json!({
        "pairs": 2,
        "excludedPairs": 0,
        "diff": diff,
        "discordant": {"aPassBFail": 1, "aFailBPass": 0},
        "mcnemarP": 1.0,
        "verdict": "noDetectableDifference",
    });
    let mut overall = json!({"arms": arms});
    let mut scenario = json!({"scenario": "alpha", "arms": arms});
    for (key, value) in comparison_fields.as_object().expect("object") {
        overall[key] = value.clone();
        scenario[key] = value.clone();
    }
    let expected = json!({
        "decisionRule": DECISION_RULE,
        "intervalMethod": INTERVAL_METHOD,
        "alpha": 0.05,
        "confidenceLevel": 0.95,
        "resamples": 2000,
        "seed": SEED,
        "arms": [
            {"arm": "A", "source": "skills/answer-v1"},
            {"arm": "B", "source": "skills/answer-v2"},
        ],
        "overall": overall,
        "scenarios": [scenario],
    });
    assert_eq!(actual, expected);
    // Key order is part of the format (serde_json preserves it here): compare the texts too.
    assert_eq!(
        serde_json::to_string(&actual).expect("serializable"),
        serde_json::to_string(&expected).expect("serializable")
    );
    assert_eq!(diff["estimate"], json!(-0.5));
    assert!(
        DECISION_RULE.contains("UNKNOWN"),
        "the rule says it is ours"
    );
}
