//! Eval A/B statistics: per-arm summaries, the paired difference with Tango's score interval,
//! McNemar's test, the test's sensitivity and a verdict, per scenario and overall (design
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
//! - [`stats`]: McNemar's p-value, Tango's unconditional score interval of the paired
//!   difference, and the sensitivity of the test (minimum detectable difference,
//!   pairs needed for a target difference).
//! - [`arms`]: evals with several arms: every candidate against the control, Holm-adjusted and
//!   ranked.
//! - [`power`]: the exact power of the test for given pass rates (the dry run's and the
//!   report's detectable difference at 80% power and runs needed for `--mde`).
//! - [`drivers`]: which scenarios drove the result (scenarios by B − A, each one's share of
//!   the overall difference).
//! - [`sequential`]: the sequential design of `--sequential` (looks, an always-valid test on
//!   the discordant pairs, futility) and the report's summary of where it stopped.
//! - [`words`]: the same numbers in plain words (what p means, the smallest detectable
//!   difference).
//!
//! Storing the report (`batches/<id>/eval.json`) is the coordinator's `eval` module.
//!
//! Pure: no IO, no clock, no environment, no async, no randomness.

pub mod arms;
pub mod document;
pub mod drivers;
pub mod gate;
pub mod plan_power;
pub mod power;
pub mod sequential;
pub mod stats;
mod whole_cost;
pub mod words;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use cowork_schema::eval::{
    Arm, ArmLabel, ArmSummary, Comparison, ControlComparison, Discordant, EvalDocument, EvalReport,
    EvalVerdict, Interval, NamedArm, PowerFigures, ScenarioComparison, Sensitivity,
};
pub use document::{
    EVAL_DOCUMENT_FILE, EvalDocumentError, EvalDocumentInput, EvalPairingError, eval_document,
    eval_document_key, paired_outcomes,
};
pub use gate::{
    EXIT_B_WORSE, EXIT_NOTHING_TO_COMPARE, EvalGate, document_exit_code, document_verdict_words,
    eval_exit_code, nothing_to_compare, verdict_words,
};
pub use stats::{
    TARGET_DIFFERENCE, TARGET_POWER, clopper_pearson, mcnemar_score, min_detectable_difference,
    min_discordant_pairs, paired_difference_interval, pairs_to_detect,
};

/// The significance level used when none is given (`--alpha`).
pub const DEFAULT_ALPHA: f64 = 0.05;
/// Written into `spec.eval.resamples` by clients. The statistics no longer resample (the
/// interval is Tango's score interval), but coordinators of the previous version validate the field, so a spec
/// keeps a valid value for them.
pub const DEFAULT_RESAMPLES: u32 = 10_000;

/// The decision rule, stated in every report because it is this project's own: the harness
/// defines no A/B decision rule.
pub const DECISION_RULE: &str = "cowork-fleet's own rule (the harness defines no A/B \
decision rule). Two-sided McNemar test (the score test, no continuity correction) on the \
complete pairs: b = aPassBFail (A passed, B failed), c = aFailBPass (A failed, B passed), \
z = (c − b)/√(b + c), p = P[|N(0, 1)| ≥ |z|], p = 1 when b + c = 0. It is the test the interval \
inverts, so the verdict and the interval always agree. Verdict: bWorse when p < alpha and b > c; \
bBetter when p < alpha and c > b; otherwise noDetectableDifference. Per-scenario verdicts are \
not corrected for multiple comparisons; the overall verdict pools every scenario's pairs. \
A pair where either arm did not complete (error or unanswered) is left out of the paired \
statistics and counted in excludedPairs.";

/// How the interval of the difference is computed, stated in every report.
pub const INTERVAL_METHOD: &str = "Tango's score interval (Tango 1998, Statistics in \
Medicine 17:891–908) of Δ = (c − b)/n, the pass rate of B minus that of A over the n complete \
pairs, at level 1 − alpha: every Δ whose score statistic Z(Δ) = (c − b − nΔ)/√(n(2q + \
Δ(1 − Δ))), q the constrained maximum-likelihood share of pairs where only A passed, lies \
within ±z(1 − alpha/2). It is unconditional (the number of disagreeing pairs is random too), \
and at Δ = 0 the statistic is McNemar's, so the interval excludes 0 exactly when p < alpha and \
the verdict is bBetter or bWorse. With no disagreeing pair it is not [0, 0].";

/// How the sensitivity figures are computed, stated in every report.
pub const SENSITIVITY_METHOD: &str = "minDetectableDiff = k/n, where k = minDiscordantPairs is \
the fewest disagreeing pairs McNemar's test can call at alpha (all in one direction: \
p at z = √k below alpha) and n the comparison's complete pairs: a smaller observed difference cannot be \
significant, whatever the outcomes. pairsForTarget is the fewest complete pairs n with \
P[Binomial(n, targetDiff) ≥ k] ≥ targetPower: the chance of detecting a true difference of \
targetDiff in the most favourable case, where every disagreement favours the better arm; \
disagreements in both directions need more pairs.";

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

/// Applies [`DECISION_RULE`] to the discordant counts, their McNemar p-value and alpha.
pub fn decide_verdict(discordant: Discordant, mcnemar_p: f64, alpha: f64) -> EvalVerdict {
    if mcnemar_p >= alpha {
        return EvalVerdict::NoDetectableDifference;
    }
    match discordant.a_pass_b_fail.cmp(&discordant.a_fail_b_pass) {
        std::cmp::Ordering::Greater => EvalVerdict::BWorse,
        std::cmp::Ordering::Less => EvalVerdict::BBetter,
        // Equal counts give p = 1, so this is unreachable for any alpha < 1; it is kept
        // total rather than asserted.
        std::cmp::Ordering::Equal => EvalVerdict::NoDetectableDifference,
    }
}

/// The sensitivity of McNemar's test at `alpha` (see [`SENSITIVITY_METHOD`]).
pub fn sensitivity_at(alpha: f64) -> Sensitivity {
    Sensitivity {
        method: SENSITIVITY_METHOD.to_owned(),
        min_discordant_pairs: min_discordant_pairs(alpha),
        target_diff: TARGET_DIFFERENCE,
        target_power: TARGET_POWER,
        pairs_for_target: pairs_to_detect(TARGET_DIFFERENCE, TARGET_POWER, alpha),
    }
}

/// The statistical settings of a report. Every field is echoed in the report.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EvalOptions {
    /// Significance level of the McNemar test, strictly between 0 and 1 (default 0.05). The
    /// interval's confidence level is `1 − alpha`, so the two always agree.
    pub alpha: f64,
    /// `--mde` as a fraction: each comparison's power figures give the pairs it needs.
    pub mde: Option<f64>,
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
        sensitivity: Some(sensitivity_at(options.alpha)),
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
        let mcnemar_p = mcnemar_score(discordant.a_pass_b_fail, discordant.a_fail_b_pass);
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
            verdict: decide_verdict(discordant, mcnemar_p, self.options.alpha),
            min_detectable_diff: min_detectable_difference(n_pairs, self.options.alpha),
            // Arm A's observed pass rate stands in for the true one (the dry run uses the
            // history's), so the two figures agree for the same pairs and rate.
            power: (n_pairs > 0).then(|| {
                power::power_figures(
                    n_pairs,
                    tallies[0].summary(Arm::A, &self.sources.a).pass_rate,
                    self.options.alpha,
                    self.options.mde,
                )
            }),
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
            // Filled from the plan's prices by `whole_cost`, when it has any.
            sandbox_cost_usd: None,
            whole_cost_usd: None,
        }
    }
}
