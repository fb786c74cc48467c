//! Tests of the eval statistics: McNemar's score test against independently computed values, Tango's interval and Clopper–Pearson against published worked
//! examples, the property that the verdict
//! never contradicts the interval, the sensitivity figures against hand calculations, and the
//! report on acceptance-shaped synthetic batches. The seeded generator that draws the random
//! tables and synthetic runs is written out here, checked against its published reference
//! outputs.

use serde_json::json;

use super::*;

// ---------------------------------------------------------------------------------------------
// Intervals: Tango's score interval of the paired difference, Clopper–Pearson for reference.

/// The seed of every random draw in these tests.
const SEED: u64 = 20_240_611;

/// Checks `clopper_pearson(x, n)` at 95% against published bounds, to the digits printed.
fn check_clopper_pearson(x: u64, n: u64, expected: (f64, f64), printed_digits: i32) {
    let (low, high) = clopper_pearson(x, n, 0.05);
    let tolerance = 0.5 * 10f64.powi(-printed_digits);
    assert!(
        (low - expected.0).abs() <= tolerance && (high - expected.1).abs() <= tolerance,
        "clopper_pearson({x}, {n}) = ({low}, {high}), published {expected:?}"
    );
}

#[test]
fn clopper_pearson_matches_published_worked_examples() {
    // R's own example of binom.test (Conover 1971, p. 97f; `example(binom.test)` in R):
    //     binom.test(c(682, 243), p = 3/4)
    //     95 percent confidence interval: 0.7076683 0.7654066
    check_clopper_pearson(682, 925, (0.707_668_3, 0.765_406_6), 7);
    // R's binom.test(2, 12) as printed: p-value = 0.03857,
    //     95 percent confidence interval: 0.02086253 0.48413775
    check_clopper_pearson(2, 12, (0.020_862_53, 0.484_137_75), 8);
    // 5 of 25 (Conover 1999's tables, the worked example of influentialpoints.com's
    // "Confidence intervals of proportions"): 0.068 to 0.407.
    check_clopper_pearson(5, 25, (0.068, 0.407), 3);
    // The edges: 0 of n has the closed form [0, 1 − (α/2)^(1/n)], n of n its mirror.
    let closed_form = 1.0 - 0.025_f64.powf(1.0 / 20.0);
    check_clopper_pearson(0, 20, (0.0, closed_form), 12);
    check_clopper_pearson(20, 20, (1.0 - closed_form, 1.0), 12);
}

#[test]
fn clopper_pearson_agrees_with_high_precision_inversion() {
    // Bounds from a 40-digit inversion of the exact binomial tails with Python's mpmath
    // (bisection on Σ C(n, k) π^k (1−π)^(n−k), independent of this code), to 1e-12:
    let cases = [
        (81, 263, 0.252_736_745_585_271_15, 0.367_621_922_601_351_35),
        (15, 148, 0.057_844_010_083_448_56, 0.161_650_490_349_479),
        (1, 29, 0.000_872_646_883_579_921_9, 0.177_644_295_488_722_93),
        (1, 6, 0.004_210_744_514_489_47, 0.641_234_578_997_674_9),
        (3, 10, 0.066_739_511_177_734_47, 0.652_452_850_059_997_3),
    ];
    for (x, n, low, high) in cases {
        check_clopper_pearson(x, n, (low, high), 12);
    }
}

/// Checks Tango's interval of `b` (A only) and `c` (B only) of `n` pairs at `level` against
/// `expected`, to `digits` decimals.
fn check_tango(b: u64, c: u64, n: u64, level: f64, expected: (f64, f64), digits: i32) {
    let interval = paired_difference_interval(b, c, n, 1.0 - level).expect("pairs");
    let tolerance = 0.5 * 10f64.powi(-digits);
    assert!(
        (interval.low - expected.0).abs() <= tolerance
            && (interval.high - expected.1).abs() <= tolerance,
        "b = {b}, c = {c}, n = {n} at {level}: {interval:?}, expected {expected:?}"
    );
}

#[test]
fn tango_interval_matches_published_worked_examples() {
    // Published paired 2×2 tables (n11, n12, n21, n22) with Tango's score interval for the
    // difference (n12 − n21)/n, as printed; here c = n12 (only the new arm passed) and
    // b = n21. The values, and which publication each comes from, as collected in the
    // published-example tests of the ratesci R package (tests/testthat/test3.R). Each was also
    // recomputed from Tango's formulas alone (Python, constrained MLE and bisection, normal
    // quantile from statistics.NormalDist), agreeing to the digits printed.
    //
    // Tango (1998), Stat Med 17:891–908, worked examples: (4, 9, 3, 16) at 95%, and
    // (43, 0, 1, 0) at 90%.
    check_tango(3, 9, 32, 0.95, (-0.027, 0.390), 3);
    check_tango(1, 0, 44, 0.90, (-0.096, 0.037), 3);
    // Fagerland, Lydersen and Laake (2014), Stat Methods Med Res 23:1–22, Table V, on the data
    // of their Table II, (1, 1, 7, 12): −0.517 to −0.026.
    check_tango(7, 1, 21, 0.95, (-0.517, -0.026), 3);
    // Agresti and Min (2005), Stat Med 24:729–740, (53, 16, 8, 9): −0.020 to 0.207.
    check_tango(8, 16, 86, 0.95, (-0.020, 0.207), 3);
    // Tang, Li and Tang (2010), (8, 3, 1, 2): −0.1670 to 0.4327.
    check_tango(1, 3, 14, 0.95, (-0.1670, 0.4327), 4);
}

#[test]
fn tango_interval_agrees_with_an_independent_computation() {
    // Bounds from the Python script described above (independent of this code), to 1e-9.
    let cases = [
        // (b, c, n, low, high)
        (
            10,
            2,
            20,
            -0.646_423_285_854_260_3,
            -0.066_307_605_784_852_87,
        ),
        (1, 0, 10, -0.404_150_026_795_238_3, 0.205_286_079_849_178_07),
        (0, 0, 10, -0.277_532_799_862_889_1, 0.277_532_799_862_889_1),
        (0, 4, 10, 0.011_454_080_191_955_191, 0.687_326_230_266_341_7),
        (
            21,
            3,
            30,
            -0.782_168_727_826_275_8,
            -0.305_843_663_046_624_86,
        ),
        (
            7,
            1,
            10,
            -0.858_858_316_789_244_4,
            -0.048_924_231_575_685_04,
        ),
    ];
    for (b, c, n, low, high) in cases {
        let interval = paired_difference_interval(b, c, n, 0.05).expect("pairs");
        assert!(
            (interval.low - low).abs() < 1e-9 && (interval.high - high).abs() < 1e-9,
            "b = {b}, c = {c}, n = {n}: {interval:?}, expected [{low}, {high}]"
        );
    }
}

#[test]
fn the_paired_interval_is_unconditional() {
    // The example: one disagreement in 10 pairs. The conditional interval was
    // [−0.1, +0.1] (the point estimate on its edge); Tango's is about [−0.40, +0.21], wide
    // enough for the 30-point drop the data allow, and the estimate lies strictly inside.
    let one = paired_difference_interval(1, 0, 10, 0.05).expect("pairs");
    assert_eq!(one.estimate, -0.1);
    assert!(one.low < -0.3 && one.high > 0.2, "{one:?}");
    // No disagreeing pair: still an interval, symmetric around 0, not the point [0, 0].
    let none = paired_difference_interval(0, 0, 7, 0.05).expect("pairs");
    assert_eq!(none.estimate, 0.0);
    assert!(none.low < -0.3 && none.high > 0.3, "{none:?}");
    assert!((none.low + none.high).abs() < 1e-12, "{none:?}");
    // Mirrored: the same interval with its sign flipped.
    let interval = paired_difference_interval(10, 2, 20, 0.05).expect("pairs");
    let mirrored = paired_difference_interval(2, 10, 20, 0.05).expect("pairs");
    assert!((mirrored.low + interval.high).abs() < 1e-12);
    assert!((mirrored.high + interval.low).abs() < 1e-12);
    // Every pair disagreeing one way: the estimate is the bound 1 itself.
    let all = paired_difference_interval(0, 10, 10, 0.05).expect("pairs");
    assert_eq!((all.estimate, all.high), (1.0, 1.0));
    assert!(all.low > 0.0 && all.low < 1.0, "{all:?}");
    assert_eq!(paired_difference_interval(0, 0, 0, 0.05), None);
}

#[test]
fn the_readme_demo_interval_agrees_with_its_verdict() {
    // The eval demo's csv-report scenario: A passed 8 of 10, B 3 of 10, with 6 pairs where only
    // A passed and 1 where only B did. z = −5/√7, p = 0.0588 ≥ 0.05, and the interval spans 0.
    let interval = paired_difference_interval(6, 1, 10, 0.05).expect("pairs");
    assert!((mcnemar_score(6, 1) - 0.058_781_721_355_358_91).abs() < 1e-12);
    assert_eq!(interval.estimate, -0.5);
    assert!(interval.low < 0.0 && interval.high > 0.0, "{interval:?}");
}

#[test]
fn mcnemar_score_matches_the_normal_tail() {
    // p = erfc(|c − b|/√(2(b + c))), from Python's math.erfc (independent of this code).
    let cases = [
        (0, 0, 1.0),
        (0, 4, 0.045_500_263_896_358_44),
        (0, 6, 0.014_305_878_435_429_655),
        (10, 2, 0.020_921_335_337_794_028),
        (7, 1, 0.033_894_853_524_689_3),
        (21, 3, 0.000_238_563_454_028_709_8),
        (1, 0, 0.317_310_507_862_914_15),
        (5, 5, 1.0),
    ];
    for (b, c, expected) in cases {
        for (first, second) in [(b, c), (c, b)] {
            let actual = mcnemar_score(first, second);
            assert!(
                ((actual - expected) / expected).abs() < 1e-12,
                "mcnemar_score({first}, {second}) = {actual:e}, expected {expected:e}"
            );
        }
    }
    // The critical values against Python's statistics.NormalDist().inv_cdf(alpha / 2), negated
    // (the lower tail, so that 1 − alpha/2 does not round away the digits of a small alpha).
    for (alpha, expected) in [
        (0.05, 1.959_963_984_540_053_6),
        (0.01, 2.575_829_303_548_9),
        (1e-10, 6.466_951_087_240_515),
    ] {
        let actual = stats::normal_critical_value(alpha);
        assert!((actual - expected).abs() < 1e-10, "z({alpha}) = {actual}");
    }
}

#[test]
fn the_verdict_never_contradicts_the_interval_on_random_tables() {
    // 20 000 random 2×2 tables of paired outcomes (seeded): the interval excludes 0 exactly when
    // the verdict is a difference, on the side the verdict names; each bound is a root of
    // Tango's statistic at ±z (or an end of [−1, 1]); the estimate lies strictly inside unless
    // it is an end of [−1, 1]; no interval is a single point.
    let mut generator = Xoshiro256StarStar::from_seed(SEED);
    let alphas = [0.05, 0.01, 0.1, 0.2, 0.001, 0.5];
    for case in 0..20_000 {
        let n_pairs = 1 + generator.below(if case % 10 == 0 { 3000 } else { 60 });
        let n_discordant = generator.below(n_pairs + 1);
        let a_fail_b_pass = generator.below(n_discordant + 1);
        let a_pass_b_fail = n_discordant - a_fail_b_pass;
        let alpha = alphas[generator.below(alphas.len() as u64) as usize];
        let discordant = Discordant {
            a_pass_b_fail,
            a_fail_b_pass,
        };
        let p = mcnemar_score(a_pass_b_fail, a_fail_b_pass);
        let verdict = decide_verdict(discordant, p, alpha);
        let interval = paired_difference_interval(a_pass_b_fail, a_fail_b_pass, n_pairs, alpha)
            .expect("at least one pair");
        let context = format!(
            "b = {a_pass_b_fail}, c = {a_fail_b_pass}, n = {n_pairs}, alpha = {alpha}, \
             p = {p}, {verdict:?}, {interval:?}"
        );
        match verdict {
            EvalVerdict::BBetter => assert!(interval.low > 0.0, "{context}"),
            EvalVerdict::BWorse => assert!(interval.high < 0.0, "{context}"),
            EvalVerdict::NoDetectableDifference => {
                assert!(interval.low <= 0.0 && interval.high >= 0.0, "{context}");
            }
        }
        let estimate = interval.estimate;
        assert!(
            (interval.low < estimate || estimate == -1.0)
                && (estimate < interval.high || estimate == 1.0),
            "{context}"
        );
        assert!(interval.low < interval.high, "{context}");
        let critical = stats::normal_critical_value(alpha);
        let statistic = |delta: f64| {
            stats::tango_statistic(
                a_fail_b_pass as f64,
                a_pass_b_fail as f64,
                n_pairs as f64,
                delta,
            )
        };
        if interval.low > -1.0 {
            let at_low = statistic(interval.low);
            assert!(
                (at_low - critical).abs() < 1e-6,
                "Z(low) = {at_low}: {context}"
            );
        }
        if interval.high < 1.0 {
            let at_high = statistic(interval.high);
            assert!(
                (at_high + critical).abs() < 1e-6,
                "Z(high) = {at_high}: {context}"
            );
        }
    }
}

#[test]
fn binomial_tails_agree_with_exact_sums() {
    // Both tails at a few probabilities against exact rational sums in Python
    // (`fractions`, independent of this code), to 1e-12 relative.
    let cases = [
        // (k, n, p, P[X ≤ k], P[X ≥ k])
        (3.0, 10.0, 0.3, 0.649_610_718_4, 0.617_217_213_6),
        (0.0, 5.0, 0.2, 0.327_68, 1.0),
        (5.0, 5.0, 0.2, 1.0, 0.000_32),
        (
            12.0,
            40.0,
            0.5,
            0.008_294_501_687_487_355,
            0.996_786_711_952_154_3,
        ),
    ];
    for (k, n, p, lower, upper) in cases {
        let actual_lower = stats::binomial_lower_tail(k, n, p);
        let actual_upper = stats::binomial_upper_tail(k, n, p);
        assert!(
            ((actual_lower - lower) / lower).abs() < 1e-9,
            "P[X ≤ {k}] for n = {n}, p = {p}: {actual_lower}, expected {lower}"
        );
        assert!(
            ((actual_upper - upper) / upper).abs() < 1e-9,
            "P[X ≥ {k}] for n = {n}, p = {p}: {actual_upper}, expected {upper}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Sensitivity.

#[test]
fn the_minimum_detectable_difference_matches_the_hand_calculation() {
    // With every disagreement one way, z = √k: p(0, 3) = 0.083 ≥ 0.05 and p(0, 4) = 0.0455 <
    // 0.05 (Python's math.erfc), so 4 disagreeing pairs is the floor at alpha 0.05.
    assert_eq!(min_discordant_pairs(0.05), 4);
    // alpha 0.01: p(0, 6) = 0.0143 ≥ 0.01 > p(0, 7) = 0.0082, so k = 7.
    assert_eq!(min_discordant_pairs(0.01), 7);
    // alpha 0.1: p(0, 2) = 0.157 ≥ 0.1 > p(0, 3) = 0.083, so k = 3.
    assert_eq!(min_discordant_pairs(0.1), 3);
    // 10 runs per arm: 4/10 = 40 points; 20 pairs: 20 points; 3 pairs: never.
    assert_eq!(min_detectable_difference(10, 0.05), Some(0.4));
    assert_eq!(min_detectable_difference(20, 0.05), Some(0.2));
    assert_eq!(min_detectable_difference(3, 0.05), None);
    assert_eq!(min_detectable_difference(0, 0.05), None);
}

#[test]
fn the_minimum_detectable_difference_is_where_the_interval_leaves_zero() {
    // "Detects ≥ N points" and the interval say the same: at k = minDiscordantPairs
    // disagreements all one way the interval excludes 0, at k − 1 it does not, and no split
    // of fewer disagreements excludes it either, for every n up to 120.
    for alpha in [0.05, 0.01, 0.1] {
        let k = min_discordant_pairs(alpha);
        for n in 1..=120_u64 {
            if k <= n {
                let at_floor = paired_difference_interval(0, k, n, alpha).expect("pairs");
                assert!(at_floor.low > 0.0, "k = {k}, n = {n}: {at_floor:?}");
            }
            for n_discordant in 0..k.min(n + 1) {
                for c in 0..=n_discordant {
                    let interval =
                        paired_difference_interval(n_discordant - c, c, n, alpha).expect("pairs");
                    assert!(
                        interval.low <= 0.0 && interval.high >= 0.0,
                        "{n_discordant} disagreements ({c} for B) of {n} at {alpha}: {interval:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn the_pairs_needed_for_20_points_match_the_hand_calculation() {
    // The most favourable case: disagreements in 20% of pairs, all one way, so the test calls
    // it once there are 4 of them (alpha 0.05). P[Binomial(n, 0.2) ≥ 4], by exact sums
    // (Python `fractions`): n = 26 gives 0.7932…, n = 27 gives 0.8177…: 27 pairs.
    assert_eq!(pairs_to_detect(0.2, 0.8, 0.05), 27);
    // alpha 0.01 needs 7 of them: n = 43 gives 0.7842…, n = 44 gives 0.8044…: 44 pairs.
    assert_eq!(pairs_to_detect(0.2, 0.8, 0.01), 44);
    let sensitivity = sensitivity_at(0.05);
    assert_eq!(sensitivity.min_discordant_pairs, 4);
    assert_eq!(sensitivity.pairs_for_target, 27);
    assert_eq!(
        (sensitivity.target_diff, sensitivity.target_power),
        (0.2, 0.8)
    );
}

#[test]
fn p_values_and_sensitivity_read_in_plain_words() {
    assert_eq!(words::format_p(0.125), "0.125");
    assert_eq!(words::format_p(0.031_25), "0.031");
    assert_eq!(words::format_p(1.0), "1");
    assert_eq!(words::format_p(0.000_277), "0.00028");
    assert_eq!(words::format_p(0.003_4), "0.0034");
    assert_eq!(words::format_p(1e-9), "< 0.0001");
    // The demo's csv-report scenario.
    let a_runs = passing_at(10, &[0, 1, 2, 3, 4, 5, 6, 8]);
    let b_runs = passing_at(10, &[6, 7, 8]);
    let report = report(&scenario_pairs("csv-report", &a_runs, &b_runs));
    let overall = &report.overall;
    assert_eq!(
        (
            overall.discordant.a_pass_b_fail,
            overall.discordant.a_fail_b_pass
        ),
        (6, 1)
    );
    assert_eq!(
        words::p_value_sentence(overall),
        "p = 0.059: a difference at least this large would appear by chance 5.9% of the time \
         if A and B passed equally often"
    );
    assert_eq!(
        words::sensitivity_sentence(&report, 10).as_deref(),
        Some(
            "with 10 runs per arm a difference under 40 points cannot be told from noise in one \
             scenario; at least ~27 runs per arm would detect 20 points 4 times in 5"
        )
    );
}

// ---------------------------------------------------------------------------------------------
// The generator.

/// SplitMix64 (Steele, Lea and Flood; Vigna's `splitmix64.c`): a 64-bit counter advanced by the
/// golden-ratio increment and passed through a bijective mixer. Used only to expand one `u64`
/// seed into the xoshiro state, as the xoshiro authors recommend.
#[derive(Clone, Debug)]
struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// xoshiro256** 1.0 (Blackman and Vigna, `xoshiro256starstar.c`): 256 bits of state, period
/// 2^256 − 1, and no statistical weakness a bootstrap could notice.
#[derive(Clone, Debug)]
struct Xoshiro256StarStar {
    state: [u64; 4],
}

impl Xoshiro256StarStar {
    /// The generator whose state is the first four SplitMix64 outputs for `seed`. Four
    /// consecutive outputs of SplitMix64's bijective mixer are never all zero, so the state is
    /// always valid.
    fn from_seed(seed: u64) -> Self {
        let mut expander = SplitMix64::new(seed);
        Self::from_state([
            expander.next_u64(),
            expander.next_u64(),
            expander.next_u64(),
            expander.next_u64(),
        ])
    }

    fn from_state(state: [u64; 4]) -> Self {
        Self { state }
    }

    fn next_u64(&mut self) -> u64 {
        let [s0, s1, s2, s3] = &mut self.state;
        let result = s1.wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let shifted = *s1 << 17;
        *s2 ^= *s0;
        *s3 ^= *s1;
        *s1 ^= *s2;
        *s0 ^= *s3;
        *s2 ^= shifted;
        *s3 = s3.rotate_left(45);
        result
    }

    /// A uniform integer in `[0, bound)`, `bound ≥ 1`, without modulo bias: Lemire's
    /// multiply-and-reject ("Fast Random Integer Generation in an Interval", 2019).
    fn below(&mut self, bound: u64) -> u64 {
        debug_assert!(bound > 0, "below needs a positive bound");
        let mut product = u128::from(self.next_u64()) * u128::from(bound);
        if (product as u64) < bound {
            // Low words below 2^64 mod bound would over-represent some results: redraw them.
            let threshold = bound.wrapping_neg() % bound;
            while (product as u64) < threshold {
                product = u128::from(self.next_u64()) * u128::from(bound);
            }
        }
        (product >> 64) as u64
    }
}

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
        mde: None,
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
    // c = 1 (repeat 9): z = −6/√8, p = 0.0339 per scenario. Pooled, b = 21 and c = 3:
    // z = −18/√24, p ≈ 2.4e-4, so B is worse overall (p from Python's math.erfc).
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
    assert!((overall.mcnemar_p - 0.000_238_563_454_028_709_8).abs() < 1e-15);
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
        assert!(
            (scenario.comparison.mcnemar_p - 0.033_894_853_524_689_3).abs() < 1e-14,
            "{}",
            scenario.scenario
        );
        assert_eq!(
            scenario.comparison.verdict,
            EvalVerdict::BWorse,
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
        let diff = comparison.diff.expect("pairs");
        assert_eq!(diff.estimate, 0.0);
        assert!(
            diff.low < 0.0 && diff.high > 0.0,
            "not the point 0: {diff:?}"
        );
    }
}

#[test]
fn b_made_better_is_reported_better() {
    // Mirror image of the worse case, in one scenario: b = 0, c = 6, z = √6, p = 0.0143.
    let a_runs = passing_at(10, &[0, 1, 2]);
    let b_runs = passing_at(10, &[0, 1, 2, 3, 4, 5, 6, 7, 8]);
    let report = report(&scenario_pairs("alpha", &a_runs, &b_runs));
    assert_eq!(report.overall.verdict, EvalVerdict::BBetter);
    assert!((report.overall.mcnemar_p - 0.014_305_878_435_429_655).abs() < 1e-15);
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
            decide_verdict(discordant, p, alpha),
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
        "mcnemarP": actual["overall"]["mcnemarP"].clone(),
        "verdict": "noDetectableDifference",
        // 4 disagreeing pairs are the least alpha 0.05 can call; 2 pairs cannot hold them.
        "minDetectableDiff": null,
        // A passed every run, so B cannot pass more often: nothing to detect.
        "power": {"armAPassRate": 1.0, "targetPower": 0.8, "detectableDiff": null},
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
        "sensitivity": {
            "method": SENSITIVITY_METHOD,
            "minDiscordantPairs": 4,
            "targetDiff": 0.2,
            "targetPower": 0.8,
            "pairsForTarget": 27,
        },
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
        DECISION_RULE.contains("own rule"),
        "the rule says it is ours"
    );
    // Nothing a user reads points at documents they cannot open.
    for text in [DECISION_RULE, INTERVAL_METHOD, SENSITIVITY_METHOD] {
        for reference in ["\u{a7}", "contract", "brief", "C9"] {
            assert!(!text.contains(reference), "{reference:?} in {text:?}");
        }
    }
}

#[test]
fn reports_written_with_the_bootstrap_interval_still_read_back() {
    // eval.json of the previous version: a bootstrap interval, its resamples and seed, no
    // sensitivity and no minimum detectable difference.
    let comparison = json!({
        "arms": [
            {"arm": "A", "source": "a", "runs": 2, "completed": 2, "passes": 2, "passRate": 1.0,
             "costUsd": null, "costKnownRuns": 0, "costUnknownRuns": 2},
            {"arm": "B", "source": "b", "runs": 2, "completed": 2, "passes": 1, "passRate": 0.5,
             "costUsd": null, "costKnownRuns": 0, "costUnknownRuns": 2},
        ],
        "pairs": 2, "excludedPairs": 0,
        "diff": {"estimate": -0.5, "low": -1.0, "high": 0.0},
        "discordant": {"aPassBFail": 1, "aFailBPass": 0},
        "mcnemarP": 1.0, "verdict": "noDetectableDifference",
    });
    let old = json!({
        "decisionRule": "old rule", "intervalMethod": "percentile bootstrap",
        "alpha": 0.05, "confidenceLevel": 0.95, "resamples": 2000, "seed": 7,
        "arms": [{"arm": "A", "source": "a"}, {"arm": "B", "source": "b"}],
        "overall": comparison.clone(),
        "scenarios": [],
    });
    let report: EvalReport = serde_json::from_value(old).expect("an old report reads back");
    assert_eq!(report.sensitivity, None);
    assert_eq!(report.overall.min_detectable_diff, None);
    assert_eq!(report.overall.diff.expect("stored").low, -1.0);
}

#[test]
fn each_scenario_gets_the_paired_interval_of_its_own_pairs_checked_by_hand() {
    // Tango's interval has a closed form in two cases, which pins the per-scenario intervals.
    // With x = c (B only), y = b (A only), the constrained MLE q of the A-only share solves
    // 2n·q² + (−x − y + (2n − x + y)Δ)·q − yΔ(1 − Δ) = 0, and Z(Δ) = (x − y − nΔ)/√(n(2q +
    // Δ(1 − Δ))). With z = 1.959964 (95%), z² = 3.841459:
    // - "steady": 10 concordant pairs (x = y = 0). q = max(0, −Δ), so Z(Δ)² = n|Δ|/(1 − |Δ|)
    //   and |Z| = z at Δ = ±z²/(n + z²) = ±3.841459/13.841459 = ±0.27753.
    // - "broken": 4 pairs, A passed and B failed in all (y = 4, x = 0), so Δ = −1. By symmetry
    //   with x = n, y = 0 (where q = (1 − Δ)/2, 2q + Δ(1 − Δ) = (1 − Δ)(1 + Δ) and Z(Δ)² =
    //   n(1 − Δ)/(1 + Δ)), the interval is [−1, −(n − z²)/(n + z²)] = [−1, −0.158541/7.841459]
    //   = [−1, −0.020218]: four losses out of four pairs only just exclude 0.
    // Overall: 14 pairs, b = 4, c = 0, so the scenarios' shares are 0 and −4/14.
    let mut outcomes = scenario_pairs(
        "steady",
        &passing_at(10, &[0, 1, 2, 3, 4]),
        &passing_at(10, &[0, 1, 2, 3, 4]),
    );
    outcomes.extend(scenario_pairs(
        "broken",
        &passing_at(4, &[0, 1, 2, 3]),
        &passing_at(4, &[]),
    ));
    let report = report(&outcomes);
    let by_name = |name: &str| {
        report
            .scenarios
            .iter()
            .find(|scenario| scenario.scenario == name)
            .map(|scenario| scenario.comparison.clone())
            .unwrap_or_else(|| panic!("no scenario {name}"))
    };
    let steady = by_name("steady").diff.expect("steady has pairs");
    assert_eq!(steady.estimate, 0.0);
    assert!((steady.low + 0.27753).abs() < 5e-5, "{steady:?}");
    assert!((steady.high - 0.27753).abs() < 5e-5, "{steady:?}");
    let broken_comparison = by_name("broken");
    let broken = broken_comparison.diff.expect("broken has pairs");
    assert_eq!(broken.estimate, -1.0);
    assert_eq!(broken.low, -1.0);
    assert!((broken.high + 0.020218).abs() < 5e-6, "{broken:?}");

    // Listed by difference, "broken" (where B got worse) leads although "steady" sorts first by
    // name in the report.
    let diffs: Vec<(&str, Option<f64>)> = report
        .scenarios
        .iter()
        .map(|scenario| {
            let diff = scenario.comparison.diff.map(|interval| interval.estimate);
            (scenario.scenario.as_str(), diff)
        })
        .collect();
    let order = drivers::order_by_difference(&diffs);
    assert_eq!(diffs[order[0]].0, "broken");
    let share = drivers::share_of_overall(
        broken_comparison.discordant.a_pass_b_fail,
        broken_comparison.discordant.a_fail_b_pass,
        report.overall.pairs,
    );
    assert_eq!(share, report.overall.diff.map(|interval| interval.estimate));
}
