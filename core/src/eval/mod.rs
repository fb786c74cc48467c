//! Eval A/B statistics: per-arm summaries, the paired difference with its exact interval, the
//! exact McNemar test, the test's sensitivity and a verdict, per scenario and overall (design
//! decisions.md#eval-design).
//!
//! An eval runs the same scenarios in two arms, A and B (two versions of a skill or plugin), and
//! pairs `(scenario, repeat index, arm A)` with `(scenario, repeat index, arm B)`
//! (harness-behaviour.md#eval, "Implication for the orchestrator"). [`eval_report`] turns a list of
//! such pairs into an [`EvalReport`]. The decision rule is this project's own
//! (harness-behaviour.md#eval leaves upstream's A/B decision rule UNKNOWN), so the report states
//! the rule it used in `decisionRule`.
//!
//! The interval and the test are one computation seen two ways (see [`stats`]): the interval
//! excludes 0 exactly when the verdict is not "no detectable difference".
//!
//! Modules:
//! - [`stats`]: the exact McNemar p-value, the exact conditional (Clopper–Pearson) interval of
//!   the paired difference, and the sensitivity of the test (minimum detectable difference,
//!   pairs needed for a target difference).
//! - [`words`]: the same numbers in plain words (what p means, the smallest detectable
//!   difference).
//!
//! Storing the report (`batches/<id>/eval.json`) is the coordinator's `eval` module.
//!
//! Pure: no IO, no clock, no environment, no async, no randomness.

pub mod stats;
pub mod words;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use stats::{
    Interval, TARGET_DIFFERENCE, TARGET_POWER, clopper_pearson, mcnemar_exact,
    min_detectable_difference, min_discordant_pairs, paired_difference_interval, pairs_to_detect,
};

/// The significance level used when none is given (`--alpha`).
pub const DEFAULT_ALPHA: f64 = 0.05;
/// Written into `spec.eval.resamples` by clients. The statistics no longer resample (the
/// interval is exact), but coordinators of the previous version validate the field, so a spec
/// keeps a valid value for them.
pub const DEFAULT_RESAMPLES: u32 = 10_000;

/// The decision rule, stated in every report because it is this project's own: the harness
/// defines no A/B decision rule.
pub const DECISION_RULE: &str = "cowork-fleet's own rule (the harness defines no A/B \
decision rule). Exact two-sided McNemar test on the complete pairs: b = aPassBFail (A passed, \
B failed), c = aFailBPass (A failed, B passed), p = min(1, 2·P[X ≤ min(b, c)]) with \
X ~ Binomial(b + c, 1/2), p = 1 when b + c = 0. Verdict: bWorse when p < alpha and b > c; \
bBetter when p < alpha and c > b; otherwise noDetectableDifference. Per-scenario verdicts are \
not corrected for multiple comparisons; the overall verdict pools every scenario's pairs. \
A pair where either arm did not complete (error or unanswered) is left out of the paired \
statistics and counted in excludedPairs.";

/// How the interval of the difference is computed, stated in every report.
pub const INTERVAL_METHOD: &str = "exact conditional interval: the Clopper–Pearson interval \
(as R's binom.test) of π = c/(b + c), the share of disagreeing pairs in which B passed, at \
level 1 − alpha, mapped to the difference of pass rates by Δ = (b + c)/n · (2π − 1) over the \
n complete pairs. It is the inversion of the exact McNemar test, so the interval excludes 0 \
exactly when p < alpha and the verdict is bBetter or bWorse. With no disagreeing pair the \
interval is [0, 0].";

/// How the sensitivity figures are computed, stated in every report.
pub const SENSITIVITY_METHOD: &str = "minDetectableDiff = k/n, where k = minDiscordantPairs is \
the fewest disagreeing pairs the exact test can call at alpha (all in one direction: \
2·2^−k < alpha) and n the comparison's complete pairs: a smaller observed difference cannot be \
significant, whatever the outcomes. pairsForTarget is the fewest complete pairs n with \
P[Binomial(n, targetDiff) ≥ k] ≥ targetPower: the chance of detecting a true difference of \
targetDiff in the most favourable case, where every disagreement favours the better arm; \
disagreements in both directions need more pairs.";

/// The two arms of an eval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Arm {
    /// The baseline (the version before the edit).
    A,
    /// The candidate (the edited version).
    B,
}

/// What one run of one arm produced, as far as the statistics care.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ArmOutcome {
    /// The run's verdict passed. Only counted when `completed` is true.
    pub pass: bool,
    /// The run produced a result (it did not error or go unanswered).
    pub completed: bool,
    /// The run's `cost.usd`, when it reported one. Non-finite values count as unknown.
    pub cost_usd: Option<f64>,
}

/// The two runs of one scenario and repeat index, one per arm.
#[derive(Clone, Debug, PartialEq)]
pub struct PairedOutcome {
    /// The scenario name (for a matrix cell, its full name).
    pub scenario: String,
    /// The repeat index shared by both runs.
    pub repeat_index: u32,
    /// Arm A's run.
    pub a: ArmOutcome,
    /// Arm B's run.
    pub b: ArmOutcome,
}

/// Where each arm comes from, as the user named it (a skill directory or plugin).
#[derive(Clone, Debug, PartialEq)]
pub struct ArmSources {
    /// Arm A's source label (`--a`).
    pub a: String,
    /// Arm B's source label (`--b`).
    pub b: String,
}

/// The statistical settings of a report. Every field is echoed in the report.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EvalOptions {
    /// Significance level of the McNemar test, strictly between 0 and 1 (default 0.05). The
    /// interval's confidence level is `1 − alpha`, so the two always agree.
    pub alpha: f64,
}

/// Why a report cannot be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// `alpha` is not strictly between 0 and 1.
    #[error("alpha {0} is not strictly between 0 and 1")]
    AlphaOutOfRange(f64),
    /// Two pairs claim the same scenario and repeat index.
    #[error("scenario {scenario} has more than one pair with repeat index {repeat_index}")]
    DuplicatePair {
        /// The scenario.
        scenario: String,
        /// The repeated index.
        repeat_index: u32,
    },
}

/// The outcome of the comparison at the chosen alpha (see [`DECISION_RULE`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EvalVerdict {
    /// B passes significantly more often than A.
    BBetter,
    /// B passes significantly less often than A.
    BWorse,
    /// The test found no difference at this alpha (which is not evidence of equality).
    NoDetectableDifference,
}

impl EvalVerdict {
    /// Applies [`DECISION_RULE`] to the discordant counts, their McNemar p-value and alpha.
    pub fn decide(discordant: Discordant, mcnemar_p: f64, alpha: f64) -> Self {
        if mcnemar_p >= alpha {
            return Self::NoDetectableDifference;
        }
        match discordant.a_pass_b_fail.cmp(&discordant.a_fail_b_pass) {
            std::cmp::Ordering::Greater => Self::BWorse,
            std::cmp::Ordering::Less => Self::BBetter,
            // Equal counts give p = 1, so this is unreachable for any alpha < 1; it is kept
            // total rather than asserted.
            std::cmp::Ordering::Equal => Self::NoDetectableDifference,
        }
    }

    /// The verdict in words, for human renderings.
    pub fn label(self) -> &'static str {
        match self {
            Self::BBetter => "B better",
            Self::BWorse => "B worse",
            Self::NoDetectableDifference => "no detectable difference",
        }
    }
}

/// The discordant pairs: McNemar's `b` and `c`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Discordant {
    /// McNemar's `b`: complete pairs where A passed and B failed.
    pub a_pass_b_fail: u64,
    /// McNemar's `c`: complete pairs where A failed and B passed.
    pub a_fail_b_pass: u64,
}

/// One arm's label and source.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArmLabel {
    /// `"A"` or `"B"`.
    pub arm: Arm,
    /// The source the arm ran (skill directory or plugin), as given.
    pub source: String,
}

/// One arm's runs within a scenario, or over all scenarios. Counts every run of the arm,
/// including those whose partner in arm B (or A) did not complete.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArmSummary {
    /// `"A"` or `"B"`.
    pub arm: Arm,
    /// The source the arm ran, as given.
    pub source: String,
    /// Runs of this arm, completed or not.
    pub runs: u64,
    /// Runs that produced a result.
    pub completed: u64,
    /// Completed runs whose verdict passed.
    pub passes: u64,
    /// `passes / completed`, exactly 0 when nothing completed (as a rollup's `passRate`,
    /// harness-behaviour.md#repeat-rollup).
    pub pass_rate: f64,
    /// Sum of the known `cost.usd` values (within a scenario in repeat-index order, then over
    /// scenarios in name order); `null` when no run reported a cost. A partial sum is flagged by
    /// `costUnknownRuns > 0`.
    pub cost_usd: Option<f64>,
    /// Runs that reported a cost.
    pub cost_known_runs: u64,
    /// Runs that did not report a (finite) cost.
    pub cost_unknown_runs: u64,
}

/// The comparison of the two arms over some set of pairs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    /// Arm A's summary, then arm B's.
    pub arms: [ArmSummary; 2],
    /// Complete pairs (both arms completed): the pairs the statistics below use.
    pub pairs: u64,
    /// Pairs left out because either arm did not complete.
    pub excluded_pairs: u64,
    /// Pass rate of B minus pass rate of A over the complete pairs, with its exact interval at
    /// the report's `confidenceLevel` (see [`INTERVAL_METHOD`]); `null` when there is no
    /// complete pair.
    pub diff: Option<Interval>,
    /// The discordant complete pairs.
    pub discordant: Discordant,
    /// The exact two-sided McNemar p-value of `discordant`.
    pub mcnemar_p: f64,
    /// The verdict at the report's alpha.
    pub verdict: EvalVerdict,
    /// The smallest difference of pass rates the test can detect with these pairs (see
    /// [`SENSITIVITY_METHOD`]); `null` when there are too few pairs to detect any. Absent from
    /// reports written before it existed.
    #[serde(default)]
    pub min_detectable_diff: Option<f64>,
}

/// The comparison within one scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScenarioComparison {
    /// The scenario name.
    pub scenario: String,
    /// The comparison over this scenario's pairs.
    #[serde(flatten)]
    pub comparison: Comparison,
}

/// How sensitive the test is at the report's alpha (see [`SENSITIVITY_METHOD`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sensitivity {
    /// [`SENSITIVITY_METHOD`].
    pub method: String,
    /// The fewest disagreeing pairs the test can call at alpha.
    pub min_discordant_pairs: u64,
    /// The difference `pairsForTarget` is computed for (0.2: 20 points).
    pub target_diff: f64,
    /// The probability of detecting it that `pairsForTarget` asks for (0.8).
    pub target_power: f64,
    /// The fewest complete pairs that detect `targetDiff` with `targetPower`, at best.
    pub pairs_for_target: u64,
}

impl Sensitivity {
    /// The sensitivity of the exact test at `alpha`.
    pub fn at(alpha: f64) -> Self {
        Self {
            method: SENSITIVITY_METHOD.to_owned(),
            min_discordant_pairs: min_discordant_pairs(alpha),
            target_diff: TARGET_DIFFERENCE,
            target_power: TARGET_POWER,
            pairs_for_target: pairs_to_detect(TARGET_DIFFERENCE, TARGET_POWER, alpha),
        }
    }
}

/// The result of an eval: settings, arms, and the comparison overall and per scenario.
///
/// Serialized in camelCase with the field order below; scenarios are sorted by name and pairs by
/// repeat index, so the same outcomes give the same bytes whatever order they arrived in.
/// Reports written by earlier versions (a bootstrap interval, `resamples` and `seed`, no
/// sensitivity) still read back; their extra fields are ignored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvalReport {
    /// [`DECISION_RULE`]: what the verdicts mean and that the rule is ours. Owned, so that a
    /// stored report reads back as it was written.
    pub decision_rule: String,
    /// [`INTERVAL_METHOD`]: how `diff` intervals are computed.
    pub interval_method: String,
    /// Significance level of the verdicts.
    pub alpha: f64,
    /// Confidence level of the `diff` intervals: `1 − alpha`.
    pub confidence_level: f64,
    /// How sensitive the test is at this alpha; absent from reports written before it existed.
    #[serde(default)]
    pub sensitivity: Option<Sensitivity>,
    /// Arm A's label and source, then arm B's.
    pub arms: [ArmLabel; 2],
    /// All scenarios pooled.
    pub overall: Comparison,
    /// One comparison per scenario, sorted by name.
    pub scenarios: Vec<ScenarioComparison>,
}

/// Builds the eval report from paired outcomes.
///
/// Fails on invalid options or on two pairs with the same scenario and repeat index; an empty
/// list gives a report with no scenarios and an overall comparison with no pairs.
pub fn eval_report(
    sources: &ArmSources,
    outcomes: &[PairedOutcome],
    options: &EvalOptions,
) -> Result<EvalReport, EvalError> {
    if !(options.alpha > 0.0 && options.alpha < 1.0) {
        return Err(EvalError::AlphaOutOfRange(options.alpha));
    }

    // Sorting makes the cost sums (floating-point, so order matters) and the scenario order
    // independent of the order in which outcomes arrived.
    let mut by_scenario: BTreeMap<&str, BTreeMap<u32, &PairedOutcome>> = BTreeMap::new();
    for outcome in outcomes {
        let scenario_pairs = by_scenario.entry(outcome.scenario.as_str()).or_default();
        if scenario_pairs
            .insert(outcome.repeat_index, outcome)
            .is_some()
        {
            return Err(EvalError::DuplicatePair {
                scenario: outcome.scenario.clone(),
                repeat_index: outcome.repeat_index,
            });
        }
    }

    let context = ComparisonContext { sources, options };
    let mut scenarios = Vec::with_capacity(by_scenario.len());
    let mut all_tallies = [ArmTally::default(), ArmTally::default()];
    let mut all_complete: Vec<(bool, bool)> = Vec::new();
    let mut all_excluded = 0_u64;
    for (scenario, pairs) in &by_scenario {
        let ordered: Vec<&PairedOutcome> = pairs.values().copied().collect();
        let paired = PairedCounts::of(&ordered);
        let tallies = [
            ArmTally::of(&ordered, Arm::A),
            ArmTally::of(&ordered, Arm::B),
        ];
        scenarios.push(ScenarioComparison {
            scenario: (*scenario).to_owned(),
            comparison: context.compare(&tallies, &paired),
        });
        for (total, tally) in all_tallies.iter_mut().zip(&tallies) {
            total.add(tally);
        }
        all_excluded += paired.excluded;
        all_complete.extend(paired.complete);
    }

    let overall_paired = PairedCounts {
        complete: all_complete,
        excluded: all_excluded,
    };
    let overall = context.compare(&all_tallies, &overall_paired);

    Ok(EvalReport {
        decision_rule: DECISION_RULE.to_owned(),
        interval_method: INTERVAL_METHOD.to_owned(),
        alpha: options.alpha,
        confidence_level: 1.0 - options.alpha,
        sensitivity: Some(Sensitivity::at(options.alpha)),
        arms: [
            ArmLabel {
                arm: Arm::A,
                source: sources.a.clone(),
            },
            ArmLabel {
                arm: Arm::B,
                source: sources.b.clone(),
            },
        ],
        overall,
        scenarios,
    })
}

/// What every comparison of one report shares.
struct ComparisonContext<'a> {
    sources: &'a ArmSources,
    options: &'a EvalOptions,
}

impl ComparisonContext<'_> {
    /// The comparison of the arms' `tallies` and `paired` outcomes.
    fn compare(&self, tallies: &[ArmTally; 2], paired: &PairedCounts) -> Comparison {
        let discordant = paired.discordant();
        let mcnemar_p = mcnemar_exact(discordant.a_pass_b_fail, discordant.a_fail_b_pass);
        let n_pairs = paired.complete.len() as u64;
        let diff = paired_difference_interval(
            discordant.a_pass_b_fail,
            discordant.a_fail_b_pass,
            n_pairs,
            self.options.alpha,
        );
        Comparison {
            arms: [
                tallies[0].summary(Arm::A, &self.sources.a),
                tallies[1].summary(Arm::B, &self.sources.b),
            ],
            pairs: n_pairs,
            excluded_pairs: paired.excluded,
            diff,
            discordant,
            mcnemar_p,
            verdict: EvalVerdict::decide(discordant, mcnemar_p, self.options.alpha),
            min_detectable_diff: min_detectable_difference(n_pairs, self.options.alpha),
        }
    }
}

/// The complete pairs `(a_passed, b_passed)` in repeat-index order, and how many were excluded.
struct PairedCounts {
    complete: Vec<(bool, bool)>,
    excluded: u64,
}

impl PairedCounts {
    fn of(ordered: &[&PairedOutcome]) -> Self {
        let mut complete = Vec::with_capacity(ordered.len());
        let mut excluded = 0;
        for outcome in ordered {
            if outcome.a.completed && outcome.b.completed {
                complete.push((outcome.a.pass, outcome.b.pass));
            } else {
                excluded += 1;
            }
        }
        Self { complete, excluded }
    }

    fn discordant(&self) -> Discordant {
        let mut discordant = Discordant::default();
        for &(a_passed, b_passed) in &self.complete {
            match (a_passed, b_passed) {
                (true, false) => discordant.a_pass_b_fail += 1,
                (false, true) => discordant.a_fail_b_pass += 1,
                _ => {}
            }
        }
        discordant
    }
}

/// Running per-arm counts; becomes an [`ArmSummary`].
#[derive(Default)]
struct ArmTally {
    runs: u64,
    completed: u64,
    passes: u64,
    cost_usd: Option<f64>,
    cost_known_runs: u64,
    cost_unknown_runs: u64,
}

impl ArmTally {
    fn of(ordered: &[&PairedOutcome], arm: Arm) -> Self {
        let mut tally = Self::default();
        for outcome in ordered {
            let run = match arm {
                Arm::A => &outcome.a,
                Arm::B => &outcome.b,
            };
            tally.runs += 1;
            if run.completed {
                tally.completed += 1;
                if run.pass {
                    tally.passes += 1;
                }
            }
            match run.cost_usd {
                Some(cost) if cost.is_finite() => {
                    tally.cost_usd = Some(tally.cost_usd.unwrap_or(0.0) + cost);
                    tally.cost_known_runs += 1;
                }
                _ => tally.cost_unknown_runs += 1,
            }
        }
        tally
    }

    /// Adds another scenario's counts (scenarios are added in name order).
    fn add(&mut self, other: &Self) {
        self.runs += other.runs;
        self.completed += other.completed;
        self.passes += other.passes;
        self.cost_usd = match (self.cost_usd, other.cost_usd) {
            (Some(sum), Some(more)) => Some(sum + more),
            (sum, more) => sum.or(more),
        };
        self.cost_known_runs += other.cost_known_runs;
        self.cost_unknown_runs += other.cost_unknown_runs;
    }

    fn summary(&self, arm: Arm, source: &str) -> ArmSummary {
        ArmSummary {
            arm,
            source: source.to_owned(),
            runs: self.runs,
            completed: self.completed,
            passes: self.passes,
            pass_rate: if self.completed == 0 {
                0.0
            } else {
                self.passes as f64 / self.completed as f64
            },
            cost_usd: self.cost_usd,
            cost_known_runs: self.cost_known_runs,
            cost_unknown_runs: self.cost_unknown_runs,
        }
    }
}
