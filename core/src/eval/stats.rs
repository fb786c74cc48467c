//! The statistics of an eval A/B: McNemar's test, Tango's score interval of the paired
//! difference, and how sensitive the test is at a number of pairs.
//!
//! The interval is the inversion of a score test whose statistic at a difference of 0 is
//! McNemar's, so a verdict never contradicts the interval shown beside it: the interval
//! excludes 0 exactly when the test is significant. The interval is unconditional: unlike the
//! exact conditional interval this module used before (Clopper–Pearson on the disagreeing
//! pairs), it counts the uncertainty in how many pairs disagree, so a handful of runs gives a
//! wide interval and no disagreement is not the point `[0, 0]`.
//!
//! The Clopper–Pearson interval stays here for reference and for readers of reports written by
//! the previous version; the verdict no longer uses it.
//!
//! Everything here is a pure, deterministic function of its arguments: no randomness, no
//! iteration count that depends on anything but the inputs.

use cowork_schema::eval::Interval;
use std::f64::consts::PI;

// ---------------------------------------------------------------------------------------------
// Binomial probabilities.

/// `P[X = x]` for `X ~ Binomial(n, p)`, integral `0 ≤ x ≤ n`, by Loader's saddle-point expansion.
///
/// C. Loader, "Fast and Accurate Computation of Binomial Probabilities" (2000):
/// `P[X = x] = exp(δ(n) − δ(x) − δ(n−x) − D(x, np) − D(n−x, nq)) · sqrt(n / (2π x (n−x)))`
/// where `δ` is the Stirling-series error ([`stirling_error`]) and `D` the deviance
/// ([`deviance_term`]). Every term is small or is the genuine size of the log-probability, so
/// nothing cancels catastrophically, unlike `ln C(n, x)` from log-factorials of `n ≈ 1e5`.
pub(crate) fn binomial_pmf(x: f64, n: f64, p: f64) -> f64 {
    let q = 1.0 - p;
    if p <= 0.0 {
        return if x == 0.0 { 1.0 } else { 0.0 };
    }
    if q <= 0.0 {
        return if x == n { 1.0 } else { 0.0 };
    }
    if x == 0.0 {
        // The deviance form keeps n·ln(q) accurate when p is tiny (Loader's `dbinom_raw`).
        let log_probability = if p < 0.1 {
            -deviance_term(n, n * q) - n * p
        } else {
            n * q.ln()
        };
        return log_probability.exp();
    }
    if x == n {
        let log_probability = if q < 0.1 {
            -deviance_term(n, n * p) - n * q
        } else {
            n * p.ln()
        };
        return log_probability.exp();
    }
    let log_core = stirling_error(n)
        - stirling_error(x)
        - stirling_error(n - x)
        - deviance_term(x, n * p)
        - deviance_term(n - x, n * q);
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
// Binomial tails for any success probability.

/// `P[X ≤ k]` for `X ~ Binomial(n, p)`, integral `k` and `n`.
///
/// The tail on the far side of the mode is summed directly, from `k` away from the mode, where
/// the terms shrink at least geometrically; the near side is one minus the far side. So the
/// small tails a confidence bound is made of are sums of small terms, never differences of
/// numbers close to one.
pub(crate) fn binomial_lower_tail(k: f64, n: f64, p: f64) -> f64 {
    if k < 0.0 {
        return 0.0;
    }
    if k >= n {
        return 1.0;
    }
    let mode = ((n + 1.0) * p).floor();
    if k < mode {
        sum_tail_downward(k, n, p)
    } else {
        1.0 - sum_tail_upward(k + 1.0, n, p)
    }
}

/// `P[X ≥ k]` for `X ~ Binomial(n, p)`, integral `k` and `n`.
pub(crate) fn binomial_upper_tail(k: f64, n: f64, p: f64) -> f64 {
    if k <= 0.0 {
        return 1.0;
    }
    if k > n {
        return 0.0;
    }
    let mode = ((n + 1.0) * p).floor();
    if k > mode {
        sum_tail_upward(k, n, p)
    } else {
        1.0 - sum_tail_downward(k - 1.0, n, p)
    }
}

/// `Σ_{i ≤ k} P[X = i]`, summed from `k` down (meant for `k` below the mode).
fn sum_tail_downward(k: f64, n: f64, p: f64) -> f64 {
    let odds = (1.0 - p) / p;
    let mut term = binomial_pmf(k, n, p);
    let mut sum = NeumaierSum::new(term);
    let mut i = k;
    while i > 0.0 {
        // P[X = i−1] = P[X = i] · i / (n − i + 1) · q / p
        term *= i / (n - i + 1.0) * odds;
        if term == 0.0 || term < sum.total() * 1e-20 {
            break;
        }
        sum.add(term);
        i -= 1.0;
    }
    sum.total()
}

/// `Σ_{i ≥ k} P[X = i]`, summed from `k` up (meant for `k` above the mode).
fn sum_tail_upward(k: f64, n: f64, p: f64) -> f64 {
    let odds = p / (1.0 - p);
    let mut term = binomial_pmf(k, n, p);
    let mut sum = NeumaierSum::new(term);
    let mut i = k;
    while i < n {
        // P[X = i+1] = P[X = i] · (n − i) / (i + 1) · p / q
        term *= (n - i) / (i + 1.0) * odds;
        if term == 0.0 || term < sum.total() * 1e-20 {
            break;
        }
        sum.add(term);
        i += 1.0;
    }
    sum.total()
}

/// Neumaier's compensated sum: keeps the sum of thousands of terms to a few ulps.
struct NeumaierSum {
    total: f64,
    compensation: f64,
}

impl NeumaierSum {
    fn new(first: f64) -> Self {
        Self {
            total: first,
            compensation: 0.0,
        }
    }

    fn add(&mut self, term: f64) {
        let next = self.total + term;
        self.compensation += if self.total.abs() >= term.abs() {
            (self.total - next) + term
        } else {
            (term - next) + self.total
        };
        self.total = next;
    }

    fn total(&self) -> f64 {
        self.total + self.compensation
    }
}

// ---------------------------------------------------------------------------------------------
// The exact conditional interval of the paired difference.

/// Which side of 1/2 a Clopper–Pearson bound lies on, decided by the binomial tail at 1/2 (see
/// [`clopper_pearson`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    /// The bound is at most 1/2.
    AtMostHalf,
    /// The bound is strictly above 1/2 (lower bound) or strictly below it (upper bound).
    BeyondHalf,
}

/// Bisection steps: each halves the bracket, so 200 is far more than the 53 bits of an `f64`
/// need; the loop ends as soon as the midpoint stops moving.
const BISECTION_STEPS: u32 = 200;

/// The Clopper–Pearson lower bound for `successes` of `trials` at two-sided level `1 − alpha`:
/// the `π` where `P[X ≥ successes | π] = alpha/2`, on the `side` of 1/2 given.
fn clopper_pearson_lower(successes: u64, trials: u64, alpha: f64, side: Side) -> f64 {
    if successes == 0 {
        return 0.0;
    }
    let (k, n) = (successes as f64, trials as f64);
    let target = alpha / 2.0;
    // P[X ≥ k | π] grows with π; keep tail(low) < target ≤ tail(high).
    let (mut low, mut high) = match side {
        Side::AtMostHalf => (0.0, 0.5),
        Side::BeyondHalf => (0.5, 1.0),
    };
    for _ in 0..BISECTION_STEPS {
        let mid = 0.5 * (low + high);
        if mid <= low || mid >= high {
            break;
        }
        if binomial_upper_tail(k, n, mid) >= target {
            high = mid;
        } else {
            low = mid;
        }
    }
    // `high` never reaches the end of the bracket it did not start at, so a bound beyond 1/2
    // stays strictly beyond it.
    high
}

/// The Clopper–Pearson upper bound: the `π` where `P[X ≤ successes | π] = alpha/2`.
fn clopper_pearson_upper(successes: u64, trials: u64, alpha: f64, side: Side) -> f64 {
    if successes == trials {
        return 1.0;
    }
    // The upper bound for k successes is one minus the lower bound for k failures.
    1.0 - clopper_pearson_lower(trials - successes, trials, alpha, side)
}

/// The Clopper–Pearson ("exact") interval of a binomial proportion at level `1 − alpha`, as
/// R's `binom.test` computes it. `trials` must be at least 1 and `successes ≤ trials`.
pub fn clopper_pearson(successes: u64, trials: u64, alpha: f64) -> (f64, f64) {
    // Without the test's help, each side follows from the tail at 1/2 itself.
    let lower_side = if successes > 0
        && binomial_upper_tail(successes as f64, trials as f64, 0.5) < alpha / 2.0
    {
        Side::BeyondHalf
    } else {
        Side::AtMostHalf
    };
    let upper_side = if successes < trials
        && binomial_lower_tail(successes as f64, trials as f64, 0.5) < alpha / 2.0
    {
        Side::BeyondHalf
    } else {
        Side::AtMostHalf
    };
    (
        clopper_pearson_lower(successes, trials, alpha, lower_side),
        clopper_pearson_upper(successes, trials, alpha, upper_side),
    )
}

/// The difference `pass rate(B) − pass rate(A)` over `pairs` complete pairs, with Tango's
/// score interval at level `1 − alpha`; `None` when there is no pair.
///
/// `a_pass_b_fail` is McNemar's `b` and `a_fail_b_pass` its `c`; the estimate is
/// `Δ = (c − b)/n`. The interval is every `Δ` that the score test of Tango (1998, "Equivalence
/// test and confidence interval for the difference in proportions for the paired-sample
/// design", Stat Med 17:891–908) does not reject: `|Z(Δ)| ≤ z` with `z` the two-sided normal
/// quantile at `alpha` and `Z` from [`tango_statistic`]. It is unconditional: it treats the
/// number of disagreeing pairs as random, so one disagreement in 10 pairs gives about
/// `[−0.21, +0.40]`, not `[−0.1, +0.1]`, and no disagreement in 10 pairs about `±0.28`, not
/// `[0, 0]`.
///
/// At `Δ = 0` Tango's statistic is McNemar's `(c − b)/√(b + c)`, so the interval excludes 0
/// exactly when [`mcnemar_score`] is below `alpha`. Which side of 0 each bound lies on is taken
/// from that p-value itself, so rounding can never split the verdict from the interval. The
/// estimate lies strictly inside unless it is −1 or 1.
pub fn paired_difference_interval(
    a_pass_b_fail: u64,
    a_fail_b_pass: u64,
    pairs: u64,
    alpha: f64,
) -> Option<Interval> {
    if pairs == 0 {
        return None;
    }
    let counts = PairedTable {
        favour_b: a_fail_b_pass as f64,
        favour_a: a_pass_b_fail as f64,
        pairs: pairs as f64,
    };
    let estimate = (counts.favour_b - counts.favour_a) / counts.pairs;
    let critical = normal_critical_value(alpha);
    let significant = mcnemar_score(a_pass_b_fail, a_fail_b_pass) < alpha;
    // Z(Δ) falls as Δ grows; the lower bound is where it comes down to +critical, the upper
    // where it reaches −critical. A bound is searched on the side of 0 the test puts it.
    let lower_bracket = if significant && estimate > 0.0 {
        (0.0, estimate)
    } else {
        (-1.0, estimate.min(0.0))
    };
    let upper_bracket = if significant && estimate < 0.0 {
        (estimate, 0.0)
    } else {
        (estimate.max(0.0), 1.0)
    };
    let low = if counts.statistic(-1.0) <= critical {
        -1.0
    } else {
        // Keeps Z(low end) > critical ≥ Z(high end) and returns the high end.
        bisect(lower_bracket, |delta| counts.statistic(delta) > critical).1
    };
    let high = if counts.statistic(1.0) >= -critical {
        1.0
    } else {
        // Keeps Z(low end) ≥ −critical > Z(high end) and returns the low end.
        bisect(upper_bracket, |delta| counts.statistic(delta) >= -critical).0
    };
    Some(Interval {
        estimate,
        low,
        high,
    })
}

/// The counts Tango's statistic needs: the disagreeing pairs each way and all complete pairs.
struct PairedTable {
    /// Pairs where only B passed (McNemar's `c`).
    favour_b: f64,
    /// Pairs where only A passed (McNemar's `b`).
    favour_a: f64,
    /// Complete pairs `n`.
    pairs: f64,
}

impl PairedTable {
    /// Tango's score statistic at the difference `delta` ([`tango_statistic`]).
    fn statistic(&self, delta: f64) -> f64 {
        tango_statistic(self.favour_b, self.favour_a, self.pairs, delta)
    }
}

/// Tango's (1998) score statistic for the paired difference `Δ = (x − y)/n`, where `x` pairs
/// favour one arm, `y` the other, of `n`: `Z(Δ) = (x − y − nΔ) / √(n·(2q + Δ(1 − Δ)))`, with
/// `q` the maximum-likelihood share of `y`-pairs under the constraint `Δ`, the positive root of
/// `2n·q² + (−x − y + (2n − x + y)Δ)·q − yΔ(1 − Δ) = 0` (Tango's equation (6)). Where the
/// variance vanishes (at `Δ = ±1`), the statistic is the sign of its numerator times infinity,
/// or 0 when the numerator is 0 too.
pub(crate) fn tango_statistic(x: f64, y: f64, n: f64, delta: f64) -> f64 {
    let quadratic = 2.0 * n;
    let linear = -x - y + (2.0 * n - x + y) * delta;
    let constant = -y * delta * (1.0 - delta);
    let discriminant = (linear * linear - 4.0 * quadratic * constant).max(0.0);
    let share = (discriminant.sqrt() - linear) / (2.0 * quadratic);
    let numerator = x - y - n * delta;
    let variance = n * (2.0 * share + delta * (1.0 - delta));
    if variance <= 0.0 {
        return if numerator > 0.0 {
            f64::INFINITY
        } else if numerator < 0.0 {
            f64::NEG_INFINITY
        } else {
            0.0
        };
    }
    numerator / variance.sqrt()
}

/// Bisects `(low, high)` where `below(low)` holds and `below(high)` does not, until the
/// midpoint stops moving; returns the final bracket, whose ends keep those properties.
fn bisect(bracket: (f64, f64), below: impl Fn(f64) -> bool) -> (f64, f64) {
    let (mut low, mut high) = bracket;
    for _ in 0..BISECTION_STEPS {
        let mid = 0.5 * (low + high);
        if mid <= low || mid >= high {
            break;
        }
        if below(mid) {
            low = mid;
        } else {
            high = mid;
        }
    }
    (low, high)
}

// ---------------------------------------------------------------------------------------------
// McNemar's score test and the normal distribution.

/// The two-sided p-value of McNemar's test (the score test, without continuity correction):
/// `P[|N(0, 1)| ≥ |c − b|/√(b + c)]`, and exactly `1` with no discordant pair.
///
/// `a_pass_b_fail` is `b`, `a_fail_b_pass` is `c`. This is the test Tango's interval inverts
/// ([`paired_difference_interval`]), so `p < alpha` exactly when the interval excludes 0.
pub fn mcnemar_score(a_pass_b_fail: u64, a_fail_b_pass: u64) -> f64 {
    let n_discordant = a_pass_b_fail + a_fail_b_pass;
    if n_discordant == 0 {
        return 1.0;
    }
    let difference = a_fail_b_pass as f64 - a_pass_b_fail as f64;
    normal_two_sided_p(difference / (n_discordant as f64).sqrt())
}

/// `P[|N(0, 1)| ≥ |z|] = erfc(|z|/√2)`.
pub(crate) fn normal_two_sided_p(z: f64) -> f64 {
    erfc(z.abs() / std::f64::consts::SQRT_2)
}

/// The `z` with `P[|N(0, 1)| ≥ z] = alpha`, by bisection on [`normal_two_sided_p`] itself, so
/// the critical value and the p-value can never disagree about which side of it a statistic
/// lies. `alpha` is strictly between 0 and 1.
pub(crate) fn normal_critical_value(alpha: f64) -> f64 {
    // erfc(40/√2) is about 1e-349, below every f64 alpha: the root is inside [0, 40].
    bisect((0.0, 40.0), |z| normal_two_sided_p(z) > alpha).1
}

/// The complementary error function for `x ≥ 0`, to about 1e-13 relative: below 2 as
/// `1 − erf(x)` from the all-positive series `erf(x) = 2x/√π · e^(−x²) · Σ (2x²)^k / (2k+1)!!`
/// (no cancellation inside the sum), from 2 up by the continued fraction
/// `erfc(x) = e^(−x²)/√π · 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + …))))`, evaluated by Lentz's
/// method (both Abramowitz and Stegun 7.1.6 and 7.1.14).
fn erfc(x: f64) -> f64 {
    if x < 2.0 {
        let x_squared = x * x;
        let mut term = 1.0;
        let mut sum = NeumaierSum::new(1.0);
        // The terms grow until k ≈ x² (at most 4 here) and then fall faster than 2x²/(2k+1);
        // 200 terms are far more than the 60 the worst case x = 2 needs.
        for k in 1..200_u32 {
            term *= 2.0 * x_squared / f64::from(2 * k + 1);
            sum.add(term);
            if term < sum.total() * 1e-17 {
                break;
            }
        }
        let erf = 2.0 * x / PI.sqrt() * (-x_squared).exp() * sum.total();
        return 1.0 - erf;
    }
    // Lentz's method for b0 + a1/(b1 + a2/(b2 + …)) with b_k = x and a_k = k/2.
    let tiny = 1e-300;
    let mut fraction = x;
    let mut c = x;
    let mut d = 0.0;
    // At x ≥ 2 the fraction converges to 1e-16 within about 60 terms; the bound only guards
    // against a non-terminating loop.
    for k in 1..500_u32 {
        let a = f64::from(k) / 2.0;
        d = x + a * d;
        if d.abs() < tiny {
            d = tiny;
        }
        c = x + a / c;
        if c.abs() < tiny {
            c = tiny;
        }
        d = 1.0 / d;
        let step = c * d;
        fraction *= step;
        if (step - 1.0).abs() < 1e-16 {
            break;
        }
    }
    (-x * x).exp() / PI.sqrt() / fraction
}

// ---------------------------------------------------------------------------------------------
// Sensitivity.

/// The difference whose sample size [`pairs_to_detect`] reports by default: 20 points.
pub const TARGET_DIFFERENCE: f64 = 0.2;
/// The probability of detecting it that [`pairs_to_detect`] asks for: 4 times in 5.
pub const TARGET_POWER: f64 = 0.8;

/// The fewest disagreeing pairs McNemar's test can call significant at `alpha`: the smallest
/// `k` with `p(0, k) < alpha`, where every disagreement goes the same way and the statistic is
/// `√k`. Fewer disagreements can never be significant, whatever their direction (`|c − b|/√(b
/// + c)` is at most `√(b + c)`), and the count does not depend on the number of pairs.
pub fn min_discordant_pairs(alpha: f64) -> u64 {
    let mut k = 1_u64;
    // p(0, k) falls with every k and reaches 0 below the smallest f64 (k ≈ 1500), so the loop
    // ends for any alpha > 0; the bound only guards a NaN.
    while k < 4000 && mcnemar_score(0, k) >= alpha {
        k += 1;
    }
    k
}

/// The smallest difference of pass rates McNemar's test can detect at `alpha` with `pairs`
/// complete pairs: [`min_discordant_pairs`] over `pairs`. A smaller observed difference cannot
/// be told from noise. `None` when even a difference of 100 points could not be detected.
pub fn min_detectable_difference(pairs: u64, alpha: f64) -> Option<f64> {
    let k = min_discordant_pairs(alpha);
    (pairs > 0 && k <= pairs).then(|| k as f64 / pairs as f64)
}

/// The fewest pairs with which McNemar's test detects a true difference `difference` with
/// probability `power`, in the most favourable case: every disagreement favours the better
/// arm, so disagreements occur in a share `difference` of the pairs and the test calls it once
/// there are [`min_discordant_pairs`] of them. The probability of that,
/// `P[Binomial(n, difference) ≥ k]`, grows with `n`; the answer is the smallest `n` where it
/// reaches `power`. When the arms also disagree the other way, more pairs are needed.
pub fn pairs_to_detect(difference: f64, power: f64, alpha: f64) -> u64 {
    let k = min_discordant_pairs(alpha);
    let detects = |n: u64| binomial_upper_tail(k as f64, n as f64, difference) >= power;
    // Double until detected, then bisect: the probability is increasing in n.
    let mut high = k.max(1);
    while !detects(high) {
        if high > u64::MAX / 4 {
            return high;
        }
        high *= 2;
    }
    // !detects(high / 2) (or it is below k, where detection is impossible), detects(high).
    first_passing(high / 2, high, detects)
}

/// The smallest `n` in `(low, high]` for which the monotone `passes` holds, by bisection, given
/// that it fails at `low` and holds at `high`.
pub(crate) fn first_passing(mut low: u64, mut high: u64, passes: impl Fn(u64) -> bool) -> u64 {
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if passes(mid) {
            high = mid;
        } else {
            low = mid;
        }
    }
    high
}
