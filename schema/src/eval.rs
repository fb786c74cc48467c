//! The eval document: `batches/<id>/eval.json` and the line `cowork eval --output-format json`
//! prints — an A/B batch's arms, the paired comparison overall and per scenario, and the
//! verdict. `cowork eval` and the coordinator write it; `cowork eval --coordinator --watch` and
//! the reports read it back. Its JSON Schema is `schema/json/eval-document.schema.json`.
//!
//! The statistics that fill it are the core's (`cowork_core::eval`); these are only the types.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A point estimate with a two-sided interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Interval {
    /// The statistic on the observed pairs.
    pub estimate: f64,
    /// The lower bound.
    pub low: f64,
    /// The upper bound.
    pub high: f64,
}

/// The two arms of an eval.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum Arm {
    /// The baseline (the version before the edit).
    A,
    /// The candidate (the edited version).
    B,
}

/// The outcome of the comparison at the chosen alpha (see the report's `decisionRule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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
    /// The verdict in words, for human renderings.
    pub fn label(self) -> &'static str {
        match self {
            Self::BBetter => "B better",
            Self::BWorse => "B worse",
            Self::NoDetectableDifference => "no detectable difference",
        }
    }

    /// A candidate's verdict against the control, for ranking tables: `better`, `worse` or
    /// `no difference`.
    pub fn candidate_word(self) -> &'static str {
        match self {
            Self::BBetter => "better",
            Self::BWorse => "worse",
            Self::NoDetectableDifference => "no difference",
        }
    }
}

/// The discordant pairs: McNemar's `b` and `c`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Discordant {
    /// McNemar's `b`: complete pairs where A passed and B failed.
    pub a_pass_b_fail: u64,
    /// McNemar's `c`: complete pairs where A failed and B passed.
    pub a_fail_b_pass: u64,
}

/// One arm's label and source.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArmLabel {
    /// `"A"` or `"B"`.
    pub arm: Arm,
    /// The source the arm ran (skill directory or plugin), as given.
    pub source: String,
}

/// One arm's runs within a scenario, or over all scenarios. Counts every run of the arm,
/// including those whose partner in arm B (or A) did not complete.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    /// Sandbox spend of the arm's completed runs: each run's `durationMs` in minutes × its
    /// tier's `--sandbox-price` (decisions.md#whole-cost); absent when the eval set no price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_cost_usd: Option<f64>,
    /// The arm's whole cost: model spend (`cost.usd`, else `--model-price`) plus
    /// `sandboxCostUsd`; absent when the eval set no price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub whole_cost_usd: Option<f64>,
}

/// The comparison of the two arms over some set of pairs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    /// Arm A's summary, then arm B's.
    pub arms: [ArmSummary; 2],
    /// Complete pairs (both arms completed): the pairs the statistics below use.
    pub pairs: u64,
    /// Pairs left out because either arm did not complete.
    pub excluded_pairs: u64,
    /// Pass rate of B minus pass rate of A over the complete pairs, with its interval at
    /// the report's `confidenceLevel` (see the report's `intervalMethod`); `null` when there is no
    /// complete pair.
    pub diff: Option<Interval>,
    /// The discordant complete pairs.
    pub discordant: Discordant,
    /// The two-sided McNemar p-value of `discordant` (the method is in the report's
    /// `decisionRule`: the score test since this version, the exact test before).
    pub mcnemar_p: f64,
    /// The verdict at the report's alpha.
    pub verdict: EvalVerdict,
    /// The smallest difference of pass rates the test can detect with these pairs (see
    /// `sensitivity.method`); `null` when there are too few pairs to detect any. Absent from
    /// reports written before it existed.
    #[serde(default)]
    pub min_detectable_diff: Option<f64>,
    /// The power of the test with these pairs, when arm A passes at its observed rate (see
    /// [`PowerFigures`]); absent from reports written before it existed and when no pair is
    /// complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<PowerFigures>,
}

/// How likely the test is to detect a difference, when arm A passes at `armAPassRate` and a
/// pair's two runs are independent given the scenario: the exact power of McNemar's score test
/// at the report's alpha (the same computation as `cowork eval --dry-run`'s).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PowerFigures {
    /// Arm A's pass rate the figures assume: the observed one in a report, the history's or
    /// `--expect-pass-rate` in a dry run.
    pub arm_a_pass_rate: f64,
    /// The probability of detection the figures ask for (0.8).
    pub target_power: f64,
    /// The smallest rise of B's pass rate over A's (on a half-point grid) the test detects with
    /// `targetPower` with these pairs; `null` when none would be.
    pub detectable_diff: Option<f64>,
    /// The difference the batch was planned to detect (`--mde`, as a fraction); `null` when
    /// none was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mde: Option<f64>,
    /// The fewest complete pairs that detect `mde` with `targetPower` (for a scenario: runs per
    /// arm); `null` when `mde` is absent or would take more than 100,000 pairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pairs_for_mde: Option<u64>,
}

/// The comparison within one scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScenarioComparison {
    /// The scenario name.
    pub scenario: String,
    /// The comparison over this scenario's pairs.
    #[serde(flatten)]
    pub comparison: Comparison,
}

/// How sensitive the test is at the report's alpha (see `sensitivity.method`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Sensitivity {
    /// `sensitivity.method`.
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

/// The result of an eval: settings, arms, and the comparison overall and per scenario.
///
/// Serialized in camelCase with the field order below; scenarios are sorted by name and pairs by
/// repeat index, so the same outcomes give the same bytes whatever order they arrived in.
/// Reports written by earlier versions (a bootstrap interval, `resamples` and `seed`, no
/// sensitivity) still read back; their extra fields are ignored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvalReport {
    /// the report's `decisionRule`: what the verdicts mean and that the rule is ours. Owned, so that a
    /// stored report reads back as it was written.
    pub decision_rule: String,
    /// the report's `intervalMethod`: how `diff` intervals are computed.
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

/// `batches/<id>/eval.json` and the `--output-format json` line: the report, with the batch it
/// came from and whether its runs were simulated (decisions.md#executors: simulated results are
/// never presented as real). Written by `cowork eval` and by the coordinator, read back by `cowork
/// eval --coordinator --watch` and by reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EvalDocument {
    pub batch_id: String,
    /// The executor of every job (`sim` or `harness`).
    pub executor: String,
    /// `true` when any run was made by the sim executor.
    pub simulated: bool,
    /// The pinned model (`--model`); `null` when the session's own model ran in both arms.
    pub model: Option<String>,
    /// Runs per arm per scenario (`--runs`).
    pub runs_per_arm: u32,
    #[serde(flatten)]
    pub report: EvalReport,
    /// With three or more arms (`--arm`): every candidate against the control, best first
    /// (ranked by the overall B − control). `report` above is then the first of them, the
    /// best candidate, unadjusted; these entries carry the Holm-adjusted verdicts that the
    /// exit gate reads. Empty (and absent) for the two-arm form.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub comparisons: Vec<ControlComparison>,
    /// How the sequential design (`--sequential`) ended the eval; absent for an eval that ran
    /// every planned pair by design.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential: Option<SequentialSummary>,
}

/// An arm of an eval with several arms: the name the user gave it and what it ran.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamedArm {
    /// `--arm NAME=DIR`'s NAME.
    pub name: String,
    /// The skill directory or plugin, as given; `no skill` for an arm run with the skill
    /// ablated.
    pub source: String,
}

/// One candidate arm against the control arm, in an eval with three or more arms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlComparison {
    /// 1 for the candidate with the largest overall B − control, then down.
    pub rank: u32,
    /// The candidate (arm B of `report`).
    pub candidate: NamedArm,
    /// The control (arm A of `report`).
    pub control: NamedArm,
    /// The overall McNemar p-value adjusted by Holm's step-down method over every comparison
    /// of the eval, so that the chance of any false "better" or "worse" stays at alpha.
    pub holm_p: f64,
    /// The verdict at alpha on `holmP`: what the exit gate reads.
    pub verdict: EvalVerdict,
    /// The comparison itself, overall and per scenario, with unadjusted p-values.
    pub report: EvalReport,
}

/// Why a sequential eval stopped where it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SequentialReason {
    /// The test rejected "no difference" at a look before the last.
    Decided,
    /// The test could no longer reject by the last look (see `futilityRule`).
    Futile,
    /// The eval reached its last look.
    RanToEnd,
}

/// The sequential design of an eval and where it stopped (decisions.md#eval-sequential).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SequentialSummary {
    /// The test and its stopping rules, in words.
    pub method: String,
    /// Looks planned (`--looks`).
    pub looks_planned: u32,
    /// The pairs each planned look is taken at, in order (the first pairs in admission order).
    pub look_pairs: Vec<u64>,
    /// The look it stopped at, from 1.
    pub stopped_at_look: u32,
    /// The pairs of that look.
    pub pairs_at_look: u64,
    /// Pairs planned (scenarios × runs per arm).
    pub planned_pairs: u64,
    /// The discordant complete pairs among the pairs of that look.
    pub discordant_at_look: Discordant,
    /// The evidence against "no difference" at that look: the mixture likelihood ratio; the
    /// test rejects when it reaches `threshold`.
    pub evidence: f64,
    /// `1 / alpha`.
    pub threshold: f64,
    /// `--mde` as a fraction, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mde: Option<f64>,
    pub reason: SequentialReason,
    /// The sequential test's decision at that look: the eval's verdict.
    pub verdict: EvalVerdict,
    /// Runs planned (2 × planned pairs).
    pub planned_runs: u64,
    /// Runs that produced a result (a run that errored counts as not run).
    pub runs: u64,
    /// `plannedRuns − runs` when it stopped before its last look, else 0.
    pub runs_saved: u64,
    /// `runsSaved` × the mean cost of a run that reported one; `null` when none did.
    pub cost_saved_usd: Option<f64>,
}

impl EvalDocument {
    /// The bytes stored as `eval.json`: pretty JSON and a final newline, its numbers written
    /// as the `--output-format json` line writes them ([`crate::json_number`]).
    pub fn to_stored_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut bytes = crate::json_number::to_vec_pretty(self)?;
        bytes.push(b'\n');
        Ok(bytes)
    }
}
