//! The statistics of an eval A/B: the exact McNemar test and the paired bootstrap interval.
//!
//! Everything here is a pure function of its arguments. Randomness comes from a seeded
//! generator written out in this file (xoshiro256** seeded through SplitMix64), so an interval
//! depends only on the pairs, the number of resamples, the seed and the level — never on the
//! version of a random-number crate.

use std::f64::consts::PI;

// ---------------------------------------------------------------------------------------------
// Exact McNemar test.

/// Up to this many discordant pairs the binomial tail is summed with exact integers.
/// `C(100, 50) · 51 < 2^128`, so every intermediate of the exact path fits in a `u128`.
const EXACT_TAIL_MAX_N: u128 = 100;

/// The two-sided exact McNemar p-value of paired pass/fail outcomes.
///
/// `a_pass_b_fail` is McNemar's `b` (pairs where arm A passed and arm B failed) and
/// `a_fail_b_pass` is `c`. The p-value is `min(1, 2·P[X ≤ min(b, c)])` with
/// `X ~ Binomial(b + c, 1/2)`, and exactly `1` when there is no discordant pair.
///
/// Up to 100 discordant pairs the tail is an exact integer sum divided by a power of two, so the
/// result is the correctly rounded value. Beyond that, the largest tail term comes from Loader's
/// saddle-point formula (the one R's `dbinom` uses), which stays accurate to about 1e-13
/// relative without ever forming a binomial coefficient, and the rest of the tail follows from
/// the ratio of consecutive terms. A p-value below the smallest `f64` comes out as `0`.
pub fn mcnemar_exact(a_pass_b_fail: u64, a_fail_b_pass: u64) -> f64 {
    let n_discordant = u128::from(a_pass_b_fail) + u128::from(a_fail_b_pass);
    if n_discordant == 0 {
        return 1.0;
    }
    let smaller = u128::from(a_pass_b_fail.min(a_fail_b_pass));
    let lower_tail = if n_discordant <= EXACT_TAIL_MAX_N {
        binomial_half_lower_tail_exact(smaller, n_discordant)
    } else {
        binomial_half_lower_tail_saddle_point(smaller as f64, n_discordant as f64)
    };
    (2.0 * lower_tail).min(1.0)
}

/// `P[X ≤ k]` for `X ~ Binomial(n, 1/2)`, `n ≤ 100`, as `Σ C(n, i) / 2^n` in exact integers.
pub(crate) fn binomial_half_lower_tail_exact(k: u128, n: u128) -> f64 {
    debug_assert!(
        n <= EXACT_TAIL_MAX_N && k <= n,
        "exact tail needs k <= n <= 100"
    );
    let mut coefficient: u128 = 1;
    let mut total: u128 = 1;
    for i in 0..k {
        // C(n, i+1) = C(n, i)·(n−i)/(i+1); the division is exact and the product is below
        // C(100, 50)·100 < 2^128 (see `EXACT_TAIL_MAX_N`).
        coefficient = coefficient * (n - i) / (i + 1);
        total += coefficient;
    }
    // `total as f64` rounds once to nearest; dividing by a power of two (n ≤ 100, no
    // subnormals) is exact, so the quotient is the correctly rounded tail.
    total as f64 / (n as f64).exp2()
}

/// `P[X ≤ k]` for `X ~ Binomial(n, 1/2)` with `k ≤ n/2`, for any `n` (no overflow).
///
/// The largest term of the tail is `P[X = k]` (the mode is `n/2`); it is computed directly and
/// the smaller terms follow downwards from `P[X = i−1] = P[X = i] · i / (n − i + 1)`. The sum
/// stops once a term can no longer change it.
pub(crate) fn binomial_half_lower_tail_saddle_point(k: f64, n: f64) -> f64 {
    let mut term = binomial_half_pmf(k, n);
    let mut total = term;
    // Neumaier compensation keeps the sum of thousands of terms near the mode to a few ulps.
    let mut compensation = 0.0;
    let mut i = k;
    while i > 0.0 {
        term *= i / (n - i + 1.0);
        // Terms shrink at least geometrically away from the mode; once one is below 1e-20 of
        // the total, the remaining ones together are far below an ulp of it.
        if term == 0.0 || term < total * 1e-20 {
            break;
        }
        let next = total + term;
        compensation += if total >= term {
            (total - next) + term
        } else {
            (term - next) + total
        };
        total = next;
        i -= 1.0;
    }
    total + compensation
}

/// `P[X = x]` for `X ~ Binomial(n, 1/2)`, by Loader's saddle-point expansion.
///
/// C. Loader, "Fast and Accurate Computation of Binomial Probabilities" (2000):
/// `P[X = x] = exp(δ(n) − δ(x) − δ(n−x) − D(x, n/2) − D(n−x, n/2)) · sqrt(n / (2π x (n−x)))`
/// where `δ` is the Stirling-series error ([`stirling_error`]) and `D` the deviance
/// ([`deviance_term`]). Every term is small or is the genuine size of the log-probability, so
/// nothing cancels catastrophically, unlike `ln C(n, x)` from log-factorials of `n ≈ 1e5`.
fn binomial_half_pmf(x: f64, n: f64) -> f64 {
    if x == 0.0 || x == n {
        // 2^−n, exact for integral n (and 0 once it underflows).
        return (-n).exp2();
    }
    let half_n = n / 2.0;
    let log_core = stirling_error(n)
        - stirling_error(x)
        - stirling_error(n - x)
        - deviance_term(x, half_n)
        - deviance_term(n - x, half_n);
    let log_scale = (2.0 * PI).ln() + x.ln() + (-x / n).ln_1p();
    (log_core - 0.5 * log_scale).exp()
}

/// `δ(n) = ln(n!) − ((n + 1/2)·ln n − n + ln(2π)/2)` for an integral `n ≥ 1`.
///
/// Tabulated up to 15: the nearest `f64`s to values computed to 25 digits from exact factorials
/// and a 60-digit π (Python `decimal`). Above, the Stirling series with as many terms as the size
/// of `n` needs (Loader's cut-offs).
fn stirling_error(n: f64) -> f64 {
    const TABLE: [f64; 16] = [
        0.0, // δ(0) is never used: x = 0 and x = n are handled before.
        0.081_061_466_795_327_26,
        0.041_340_695_955_409_3,
        0.027_677_925_684_998_34,
        0.020_790_672_103_765_093,
        0.016_644_691_189_821_193,
        0.013_876_128_823_070_748,
        0.011_896_709_945_891_77,
        0.010_411_265_261_972_096,
        0.009_255_462_182_712_733,
        0.008_330_563_433_362_87,
        0.007_573_675_487_951_841,
        0.006_942_840_107_209_53,
        0.006_408_994_188_004_207,
        0.005_951_370_112_758_847_5,
        0.005_554_733_551_962_801,
    ];
    const S0: f64 = 1.0 / 12.0;
    const S1: f64 = 1.0 / 360.0;
    const S2: f64 = 1.0 / 1260.0;
    const S3: f64 = 1.0 / 1680.0;
    const S4: f64 = 1.0 / 1188.0;
    if n <= 15.0 {
        // `n` is a small non-negative integer here, so the cast is exact.
        return TABLE[n as usize];
    }
    let n_squared = n * n;
    if n > 500.0 {
        return (S0 - S1 / n_squared) / n;
    }
    if n > 80.0 {
        return (S0 - (S1 - S2 / n_squared) / n_squared) / n;
    }
    if n > 35.0 {
        return (S0 - (S1 - (S2 - S3 / n_squared) / n_squared) / n_squared) / n;
    }
    (S0 - (S1 - (S2 - (S3 - S4 / n_squared) / n_squared) / n_squared) / n_squared) / n
}

/// The deviance term `D(x, m) = x·ln(x/m) + m − x`, computed without cancellation when `x ≈ m`
/// through the series `Σ 2x·v^(2j+1)/(2j+1) − (x−m)·v`, `v = (x−m)/(x+m)` (Loader's `bd0`).
fn deviance_term(x: f64, mean: f64) -> f64 {
    if (x - mean).abs() < 0.1 * (x + mean) {
        let mut ratio = (x - mean) / (x + mean);
        let mut sum = (x - mean) * ratio;
        if sum.abs() < f64::MIN_POSITIVE {
            return sum;
        }
        let mut power_term = 2.0 * x * ratio;
        ratio *= ratio;
        // |ratio| < 0.01 here, so the series converges to full precision within a few dozen
        // terms; the bound only guards against a non-terminating loop.
        for j in 1..1000_u32 {
            power_term *= ratio;
            let next = sum + power_term / f64::from(2 * j + 1);
            if next == sum {
                return next;
            }
            sum = next;
        }
    }
    x * (x / mean).ln() + mean - x
}

// ---------------------------------------------------------------------------------------------
// Paired bootstrap.

/// A point estimate with a two-sided percentile interval.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interval {
    /// The statistic on the observed pairs.
    pub estimate: f64,
    /// The lower percentile of the bootstrap distribution.
    pub low: f64,
    /// The upper percentile of the bootstrap distribution.
    pub high: f64,
}

/// Why a bootstrap interval cannot be computed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BootstrapError {
    /// There is no pair to resample (for example, every pair had an arm that did not complete).
    #[error("no pairs to resample")]
    NoPairs,
    /// Zero resamples were asked for.
    #[error("the number of resamples must be at least 1")]
    NoResamples,
    /// The confidence level is not strictly between 0 and 1.
    #[error("confidence level {0} is not strictly between 0 and 1")]
    LevelOutOfRange(f64),
}

/// The difference `pass_rate(B) − pass_rate(A)` over paired outcomes `(a_passed, b_passed)`, with
/// a percentile bootstrap interval at `level` (e.g. 0.95).
///
/// Pair `i` is the same scenario and repeat index run in arm A and in arm B. Each of `resamples`
/// resamples draws as many pairs as there are, uniformly with replacement, so the pairing is kept.
/// The bounds are the `(1 − level)/2` and `(1 + level)/2` quantiles of the resampled differences,
/// linearly interpolated between order statistics (numpy's default, "type 7"). The result is a
/// pure function of the arguments: the same pairs, resamples, seed and level give the same
/// interval on every platform.
pub fn paired_bootstrap_diff(
    pairs: &[(bool, bool)],
    resamples: u32,
    seed: u64,
    level: f64,
) -> Result<Interval, BootstrapError> {
    stratified_bootstrap_diff(&[pairs], resamples, seed, level)
}

/// [`paired_bootstrap_diff`] over several strata (one per scenario), pooled.
///
/// Each resample draws, within every stratum, as many pairs as that stratum has, with
/// replacement, and pools them, so every resample keeps each scenario's weight. The estimate is
/// the pooled difference over all pairs. Strata are visited in the order given, which is part of
/// what the seed reproduces.
pub fn stratified_bootstrap_diff(
    strata: &[&[(bool, bool)]],
    resamples: u32,
    seed: u64,
    level: f64,
) -> Result<Interval, BootstrapError> {
    if !(level > 0.0 && level < 1.0) {
        return Err(BootstrapError::LevelOutOfRange(level));
    }
    if resamples == 0 {
        return Err(BootstrapError::NoResamples);
    }
    // Each pair reduces to its contribution to `passes(B) − passes(A)`: −1, 0 or +1.
    let contributions: Vec<Vec<i64>> = strata
        .iter()
        .map(|pairs| pairs.iter().map(|&pair| pair_contribution(pair)).collect())
        .collect();
    let n_pairs: usize = contributions.iter().map(Vec::len).sum();
    if n_pairs == 0 {
        return Err(BootstrapError::NoPairs);
    }
    let n_pairs_f64 = n_pairs as f64;
    let observed: i64 = contributions.iter().flatten().sum();

    let mut rng = Xoshiro256StarStar::from_seed(seed);
    let mut resampled_sums: Vec<i64> = Vec::with_capacity(resamples as usize);
    for _ in 0..resamples {
        let mut sum = 0_i64;
        for stratum in &contributions {
            let stratum_len = stratum.len() as u64;
            for _ in 0..stratum.len() {
                // `below` returns a value < stratum_len, which is a valid index.
                sum += stratum[rng.below(stratum_len) as usize];
            }
        }
        resampled_sums.push(sum);
    }
    resampled_sums.sort_unstable();

    let tail = (1.0 - level) / 2.0;
    Ok(Interval {
        estimate: observed as f64 / n_pairs_f64,
        low: interpolated_quantile(&resampled_sums, tail) / n_pairs_f64,
        high: interpolated_quantile(&resampled_sums, 1.0 - tail) / n_pairs_f64,
    })
}

/// A pair's contribution to `passes(B) − passes(A)`.
fn pair_contribution((a_passed, b_passed): (bool, bool)) -> i64 {
    i64::from(b_passed) - i64::from(a_passed)
}

/// The `quantile` of non-empty sorted values, interpolating linearly between the order
/// statistics at `(len − 1)·quantile` (Hyndman–Fan type 7).
pub(crate) fn interpolated_quantile(sorted: &[i64], quantile: f64) -> f64 {
    let position = (sorted.len() - 1) as f64 * quantile;
    let below = position.floor();
    let fraction = position - below;
    // `position` lies in [0, len − 1], so both indices are in bounds.
    let below_idx = below as usize;
    let above_idx = (below_idx + 1).min(sorted.len() - 1);
    let low_value = sorted[below_idx] as f64;
    let high_value = sorted[above_idx] as f64;
    low_value + fraction * (high_value - low_value)
}

// ---------------------------------------------------------------------------------------------
// The seeded generator.

/// SplitMix64 (Steele, Lea and Flood; Vigna's `splitmix64.c`): a 64-bit counter advanced by the
/// golden-ratio increment and passed through a bijective mixer. Used only to expand one `u64`
/// seed into the xoshiro state, as the xoshiro authors recommend.
#[derive(Clone, Debug)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
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
pub(crate) struct Xoshiro256StarStar {
    state: [u64; 4],
}

impl Xoshiro256StarStar {
    /// The generator whose state is the first four SplitMix64 outputs for `seed`. Four
    /// consecutive outputs of SplitMix64's bijective mixer are never all zero, so the state is
    /// always valid.
    pub(crate) fn from_seed(seed: u64) -> Self {
        let mut expander = SplitMix64::new(seed);
        Self::from_state([
            expander.next_u64(),
            expander.next_u64(),
            expander.next_u64(),
            expander.next_u64(),
        ])
    }

    pub(crate) fn from_state(state: [u64; 4]) -> Self {
        Self { state }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
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
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
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
