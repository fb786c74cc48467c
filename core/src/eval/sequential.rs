//! The sequential design of an eval (`cowork eval --sequential`, decisions.md#eval-sequential):
//! looks at planned numbers of pairs, an always-valid test on the discordant pairs, and a
//! futility stop.
//!
//! **The test.** Under "no difference" (marginal homogeneity), each discordant pair is "only B
//! passed" with probability 1/2, independently of the others. The evidence after `b` pairs where
//! only A passed and `c` where only B passed is the mixture likelihood ratio with a uniform prior
//! on that probability θ:
//!
//! ```text
//! E(b, c) = ∫ θ^c (1 − θ)^b dθ / (1/2)^(b + c) = 2^(b + c) · b! c! / (b + c + 1)!
//! ```
//!
//! Under the null, `E` over the discordant pairs is a nonnegative martingale starting at 1 (a
//! test martingale), so by Ville's inequality `P[E ever reaches 1/alpha] ≤ alpha`, however many
//! times and whenever it is looked at. Concordant pairs leave `E` unchanged. The prior is
//! symmetric, so the test is two-sided; `E(b, b) < 1`, so a tie never rejects.
//!
//! **The looks.** Look `k` of `K` is taken once the first `⌈k · N / K⌉` pairs in admission order
//! (repeat-major, scenario order: the order the jobs are admitted in) have both runs finished.
//! Which pairs a look holds does not depend on when runs finish, so the decision at each look is a
//! function of the outcomes alone: the coordinator, a restarted coordinator and the report all
//! reach the same look.
//!
//! **Futility.** At a look with `r` planned pairs left, the eval stops as futile when even the most
//! favourable remaining outcomes could not make `E` reach `1/alpha` by the last pair: `r` further
//! discordant pairs all in one direction, or with `--mde d` only `⌈r · d⌉` of them (a true
//! difference of `d` adds `r · d` to `c − b` in expectation; all of them in one direction is its
//! most favourable case). Stopping for futility never rejects, so it cannot raise the type I
//! error (it is non-binding).
//!
//! Pure: no IO, no clock, no randomness.

use cowork_schema::eval::{Discordant, EvalVerdict, SequentialReason, SequentialSummary};

use super::PairedOutcome;
pub use crate::plan::sequential::{
    DEFAULT_LOOKS, LOOKS_MAX, SequentialSettings, validate_sequential_flags,
};

/// The sequential test and its stopping rules, stated in every sequential report.
pub const SEQUENTIAL_METHOD: &str = "Always-valid test on the discordant pairs: with b pairs \
where only A passed and c where only B passed, the evidence against no difference is the \
mixture likelihood ratio E = 2^(b+c) · b! c! / (b+c+1)! (a uniform prior on the share of \
disagreements B wins). It is a test martingale under no difference, so rejecting when E ≥ \
1/alpha keeps the type I error at most alpha however many looks are taken (Ville's inequality). \
Look k of K is taken once the first ⌈k·N/K⌉ of the N planned pairs, in admission order, have \
both runs finished; the eval stops at the first look where E ≥ 1/alpha (verdict bBetter when \
c > b, bWorse when b > c), or where E could no longer reach 1/alpha by the last planned pair \
(futile: even with every remaining pair discordant in one direction, or with mde given only \
⌈remaining · mde⌉ of them), with the verdict noDetectableDifference. Runs already running \
when it stops still finish and are reported, but the verdict is the decision at the stopping \
look.";

/// The sentence appended to a sequential report's `decisionRule`.
pub const SEQUENTIAL_RULE: &str = " Sequential eval (--sequential): the overall verdict is the \
sequential test's decision at the look it stopped at (see sequential.method), not the fixed \
McNemar test above; the interval and p-value above are computed over every complete pair as \
if the number of pairs had been fixed, so they are descriptive only.";

/// What the test says at one look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SequentialDecision {
    /// Take the next look.
    Continue,
    /// The evidence reached `1/alpha`: `verdict` is bBetter or bWorse.
    Decided { verdict: EvalVerdict },
    /// The evidence can no longer reach `1/alpha` by the last planned pair.
    Futile,
}

/// The pairs at which each of `looks` looks is taken: `⌈k · planned / looks⌉` for `k = 1..=looks`,
/// without repeats (more looks than pairs give a look per pair). Empty when nothing is planned.
pub fn look_points(planned_pairs: u64, looks: u32) -> Vec<u64> {
    let looks = u64::from(looks.max(1));
    let mut points: Vec<u64> = (1..=looks)
        .map(|k| (k * planned_pairs).div_ceil(looks))
        .filter(|&pairs| pairs > 0)
        .collect();
    points.dedup();
    points
}

/// `ln n!`, exactly summed for small `n` and by Stirling's series beyond.
fn ln_factorial(n: u64) -> f64 {
    if n < 32 {
        return (2..=n).map(|k| (k as f64).ln()).sum();
    }
    let x = n as f64 + 1.0;
    // ln Γ(x) by Stirling's series to the x⁻⁵ term: the next term, 1/(1680 x⁷), is below
    // 1e-13 for x ≥ 33.
    (x - 0.5) * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI).ln() + 1.0 / (12.0 * x)
        - 1.0 / (360.0 * x.powi(3))
        + 1.0 / (1260.0 * x.powi(5))
}

/// `ln E(b, c)`: the log of the mixture likelihood ratio of `b` pairs where only A passed and
/// `c` where only B passed (see the module's documentation).
pub fn log_evidence(a_pass_b_fail: u64, a_fail_b_pass: u64) -> f64 {
    let discordant = a_pass_b_fail + a_fail_b_pass;
    discordant as f64 * std::f64::consts::LN_2
        + ln_factorial(a_pass_b_fail)
        + ln_factorial(a_fail_b_pass)
        - ln_factorial(discordant + 1)
}

/// Whether the evidence of `(b, c)` reaches `1/alpha`.
pub fn rejects(a_pass_b_fail: u64, a_fail_b_pass: u64, alpha: f64) -> bool {
    // A hair of slack so that a ratio equal to 1/alpha in exact arithmetic is not lost to
    // rounding.
    log_evidence(a_pass_b_fail, a_fail_b_pass) >= -alpha.ln() - 1e-12
}

/// The decision at a look: `b` and `c` the discordant complete pairs among the look's `pairs`,
/// of `planned_pairs`, at `alpha`, with the smallest difference worth detecting `mde` (a
/// fraction). Takes one comparison's counts, so several comparisons can each use it.
pub fn decide_at_look(
    (a_pass_b_fail, a_fail_b_pass): (u64, u64),
    pairs: u64,
    planned_pairs: u64,
    alpha: f64,
    mde: Option<f64>,
) -> SequentialDecision {
    if rejects(a_pass_b_fail, a_fail_b_pass, alpha) {
        return match a_fail_b_pass.cmp(&a_pass_b_fail) {
            std::cmp::Ordering::Greater => SequentialDecision::Decided {
                verdict: EvalVerdict::BBetter,
            },
            std::cmp::Ordering::Less => SequentialDecision::Decided {
                verdict: EvalVerdict::BWorse,
            },
            // E(b, b) < 1 never reaches 1/alpha; kept total rather than asserted.
            std::cmp::Ordering::Equal => SequentialDecision::Continue,
        };
    }
    let remaining = planned_pairs.saturating_sub(pairs);
    let reachable = match mde {
        // `as` saturates; the product is at most `remaining`.
        Some(mde) => ((remaining as f64 * mde.clamp(0.0, 1.0)).ceil() as u64).min(remaining),
        None => remaining,
    };
    let can_reject = rejects(a_pass_b_fail + reachable, a_fail_b_pass, alpha)
        || rejects(a_pass_b_fail, a_fail_b_pass + reachable, alpha);
    if can_reject {
        SequentialDecision::Continue
    } else {
        SequentialDecision::Futile
    }
}

/// Where the looks over outcomes in admission order stop: the first look whose decision is not
/// [`SequentialDecision::Continue`] (the last look always decides: nothing remains).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LookStop {
    /// From 1.
    pub look: u32,
    /// The pairs of that look.
    pub pairs: u64,
    pub discordant: Discordant,
    pub decision: SequentialDecision,
    /// The look is the last planned one.
    pub last: bool,
}

/// Walks the looks over `ordered` pair outcomes (`(a passed, b passed)`, `None` for a pair that
/// is not complete), in admission order, up to the pairs present; `None` while no look is
/// reached or every reached look says continue.
pub fn first_stop(
    ordered: &[Option<(bool, bool)>],
    planned_pairs: u64,
    settings: &SequentialSettings,
) -> Option<LookStop> {
    let points = look_points(planned_pairs, settings.looks);
    let mut discordant = Discordant::default();
    let mut counted = 0_usize;
    for (index, &pairs) in points.iter().enumerate() {
        let Ok(upto) = usize::try_from(pairs) else {
            return None;
        };
        if upto > ordered.len() {
            return None;
        }
        for pair in &ordered[counted..upto] {
            match pair {
                Some((true, false)) => discordant.a_pass_b_fail += 1,
                Some((false, true)) => discordant.a_fail_b_pass += 1,
                _ => {}
            }
        }
        counted = upto;
        let decision = decide_at_look(
            (discordant.a_pass_b_fail, discordant.a_fail_b_pass),
            pairs,
            planned_pairs,
            settings.alpha,
            settings.mde,
        );
        if decision != SequentialDecision::Continue {
            return Some(LookStop {
                look: u32::try_from(index + 1).unwrap_or(u32::MAX),
                pairs,
                discordant,
                decision,
                last: index + 1 == points.len(),
            });
        }
    }
    None
}

/// The sequential summary of an eval's paired outcomes (every planned pair, as
/// [`paired_outcomes`](super::paired_outcomes) gives them, in any order): replays the looks in
/// admission order (repeat-major, then scenario order) and prices the runs it saved.
pub fn sequential_summary(
    pairs: &[PairedOutcome],
    scenario_order: &[String],
    settings: &SequentialSettings,
) -> SequentialSummary {
    let position = |scenario: &str| {
        scenario_order
            .iter()
            .position(|name| name == scenario)
            .unwrap_or(usize::MAX)
    };
    let mut ordered: Vec<&PairedOutcome> = pairs.iter().collect();
    ordered.sort_by_key(|pair| (pair.repeat_index, position(&pair.scenario)));
    let outcomes: Vec<Option<(bool, bool)>> = ordered
        .iter()
        .map(|pair| (pair.a.completed && pair.b.completed).then_some((pair.a.pass, pair.b.pass)))
        .collect();
    let planned_pairs = pairs.len() as u64;
    let stop = first_stop(&outcomes, planned_pairs, settings).unwrap_or(LookStop {
        look: u32::try_from(look_points(planned_pairs, settings.looks).len()).unwrap_or(u32::MAX),
        pairs: planned_pairs,
        discordant: Discordant::default(),
        decision: SequentialDecision::Futile,
        last: true,
    });
    let (reason, verdict) = match stop.decision {
        SequentialDecision::Decided { verdict } if !stop.last => {
            (SequentialReason::Decided, verdict)
        }
        SequentialDecision::Decided { verdict } => (SequentialReason::RanToEnd, verdict),
        _ if stop.last => (
            SequentialReason::RanToEnd,
            EvalVerdict::NoDetectableDifference,
        ),
        _ => (
            SequentialReason::Futile,
            EvalVerdict::NoDetectableDifference,
        ),
    };
    let costs = RunCosts::of(pairs);
    let planned_runs = 2 * planned_pairs;
    let runs_saved = if stop.last {
        0
    } else {
        planned_runs.saturating_sub(costs.runs)
    };
    SequentialSummary {
        method: SEQUENTIAL_METHOD.to_owned(),
        looks_planned: settings.looks,
        look_pairs: look_points(planned_pairs, settings.looks),
        stopped_at_look: stop.look,
        pairs_at_look: stop.pairs,
        planned_pairs,
        discordant_at_look: stop.discordant,
        evidence: log_evidence(stop.discordant.a_pass_b_fail, stop.discordant.a_fail_b_pass).exp(),
        threshold: 1.0 / settings.alpha,
        mde: settings.mde,
        reason,
        verdict,
        planned_runs,
        runs: costs.runs,
        runs_saved,
        cost_saved_usd: costs.mean().map(|mean| mean * runs_saved as f64),
    }
}

/// Runs that produced a result and the costs they reported.
struct RunCosts {
    runs: u64,
    priced: u64,
    total_usd: f64,
}

impl RunCosts {
    fn of(pairs: &[PairedOutcome]) -> RunCosts {
        let mut costs = RunCosts {
            runs: 0,
            priced: 0,
            total_usd: 0.0,
        };
        for run in pairs.iter().flat_map(|pair| [&pair.a, &pair.b]) {
            costs.runs += u64::from(run.completed);
            if let Some(cost) = run.cost_usd.filter(|cost| cost.is_finite()) {
                costs.priced += 1;
                costs.total_usd += cost;
            }
        }
        costs
    }

    fn mean(&self) -> Option<f64> {
        (self.priced > 0).then(|| self.total_usd / self.priced as f64)
    }
}

/// The summary in one line, as `cowork eval` prints it: `stopped at look 2 of 5 after 40 of 200
/// pairs: B better; saved 320 runs (~$1.20)`.
pub fn summary_line(summary: &SequentialSummary) -> String {
    let what = match summary.reason {
        SequentialReason::Decided => summary.verdict.label().to_owned(),
        SequentialReason::Futile => "futile, no detectable difference".to_owned(),
        SequentialReason::RanToEnd => format!("ran to the end, {}", summary.verdict.label()),
    };
    let mut line = format!(
        "stopped at look {} of {} after {} of {} pairs: {what}",
        summary.stopped_at_look,
        summary.look_pairs.len(),
        summary.pairs_at_look,
        summary.planned_pairs,
    );
    if summary.runs_saved > 0 {
        line.push_str(&format!("; saved {} runs", summary.runs_saved));
        if let Some(usd) = summary.cost_saved_usd {
            line.push_str(&format!(" (~${usd:.2})"));
        }
    }
    line
}

#[cfg(test)]
mod tests;
