//! An eval batch after it is decided: [`paired_outcomes`] pairs `(scenario, repeat index, arm
//! A)` with `(scenario, repeat index, arm B)` (harness-behaviour.md#eval) for
//! [`eval_report`](super::eval_report), and [`eval_document`] turns the decided batch into its
//! `eval.json` ([`EvalDocument`]) — the one code path of `cowork eval` and of the coordinator.

use std::collections::BTreeMap;

use cowork_schema::batch::{BatchMode, EvalSpec, ExecutorKind};
use cowork_schema::eval::{EvalDocument, NamedArm};
use cowork_schema::ids::BatchId;
use cowork_schema::layout;
use serde_json::Value;

use super::sequential::{SEQUENTIAL_RULE, SequentialSettings, sequential_summary};
use super::{ArmOutcome, ArmSources, EvalError, EvalOptions, PairedOutcome, eval_report};
use crate::plan::{Plan, PlanUnit};
use crate::verdict::view_with_rederived_verdict;

/// Why the results of an eval batch cannot be paired.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalPairingError {
    /// The plan is not an eval plan (units are not one per arm per scenario, in arm order).
    #[error("unit {unit} is not laid out as an eval arm")]
    NotAnEvalPlan { unit: u32 },
    /// The folded runs and their results differ in number.
    #[error("{folded} folded runs but {results} results")]
    ResultCount { folded: usize, results: usize },
    /// The eval settings name an arm the plan or the labels do not have.
    #[error("arm {arm} is not one of the eval's arms")]
    NoSuchArm { arm: u32 },
    /// A stored result cannot be read as a run.
    #[error("the result of unit {unit}, repeat {repeat_index:?} is unreadable: {message}")]
    BadResult {
        unit: u32,
        repeat_index: Option<u32>,
        message: String,
    },
}

/// Pairs the runs of an eval plan: one [`PairedOutcome`] per scenario and repeat index, arm A
/// being the `control` arm's run and arm B the `candidate` arm's (arm indices of the plan: 0
/// and 1 in the two-arm form).
///
/// `folded` is the reduction's `(unit index, repeat index)` of every completed run and
/// `results` the envelope's results in the same order (harness-behaviour.md#choice-c3). A run
/// missing from `folded` (an error, or never run) counts as not completed, so its pair is left out
/// of the paired statistics and counted as excluded.
pub fn paired_outcomes(
    plan: &Plan,
    folded: &[(u32, Option<u32>)],
    results: &[Value],
    control: u32,
    candidate: u32,
) -> Result<Vec<PairedOutcome>, EvalPairingError> {
    let completed = completed_runs(folded, results)?;
    let not_completed = ArmOutcome {
        pass: false,
        completed: false,
        cost_usd: None,
    };
    let n_arms = arm_count(plan);
    let mut pairs = Vec::new();
    for arm_units in plan.units.chunks(n_arms) {
        let arm_unit = |index: u32| {
            arm_units
                .get(index as usize)
                .filter(|unit| unit.arm.is_some_and(|arm| arm.index == index))
        };
        let (Some(unit_a), Some(unit_b)) = (arm_unit(control), arm_unit(candidate)) else {
            return Err(EvalPairingError::NotAnEvalPlan {
                unit: arm_units[0].unit.index(),
            });
        };
        for run in 0..plan.runs_per_unit() {
            let repeat_index = plan.repeat.map(|_| run);
            let outcome_of = |unit: &PlanUnit| {
                completed
                    .get(&(unit.unit.index(), repeat_index))
                    .copied()
                    .unwrap_or(not_completed)
            };
            pairs.push(PairedOutcome {
                scenario: unit_a.scenario_name.clone(),
                repeat_index: run,
                a: outcome_of(unit_a),
                b: outcome_of(unit_b),
            });
        }
    }
    Ok(pairs)
}

/// The number of arms of an eval plan: one more than its highest arm index (at least 1, so
/// that a plan that is not an eval's is refused unit by unit).
pub fn arm_count(plan: &Plan) -> usize {
    plan.units
        .iter()
        .filter_map(|unit| unit.arm)
        .map(|arm| arm.index as usize + 1)
        .max()
        .unwrap_or(1)
}

/// Every completed run's outcome, by `(unit index, repeat index)`.
fn completed_runs(
    folded: &[(u32, Option<u32>)],
    results: &[Value],
) -> Result<BTreeMap<(u32, Option<u32>), ArmOutcome>, EvalPairingError> {
    if folded.len() != results.len() {
        return Err(EvalPairingError::ResultCount {
            folded: folded.len(),
            results: results.len(),
        });
    }
    let mut completed = BTreeMap::new();
    for (&(unit, repeat_index), result) in folded.iter().zip(results) {
        let view =
            view_with_rederived_verdict(result).map_err(|error| EvalPairingError::BadResult {
                unit,
                repeat_index,
                message: error.to_string(),
            })?;
        completed.insert(
            (unit, repeat_index),
            ArmOutcome {
                pass: view.pass,
                completed: true,
                cost_usd: view.cost_usd,
            },
        );
    }
    Ok(completed)
}

/// The file name of an eval batch's report in its batch directory: `batches/<id>/eval.json`.
pub const EVAL_DOCUMENT_FILE: &str = layout::names::EVAL;

/// The store key of `batch_id`'s eval report.
pub fn eval_document_key(batch_id: &BatchId) -> String {
    layout::BatchKey::new(batch_id).eval().into_string()
}

/// What the report of a decided eval batch is computed from.
#[derive(Clone, Copy, Debug)]
pub struct EvalDocumentInput<'a> {
    /// The batch's eval plan (units arm A, arm B per scenario).
    pub plan: &'a Plan,
    /// The eval settings of the batch's spec (model and alpha).
    pub settings: &'a EvalSpec,
    /// How the report labels the arms, in arm order: `cowork eval` uses the paths as typed,
    /// the coordinator the bundle-relative arm directories of the spec.
    pub arms: &'a [NamedArm],
    /// The reduction's `(unit index, repeat index)` of every folded run
    /// (harness-behaviour.md#choice-c3).
    pub folded: &'a [(u32, Option<u32>)],
    /// The envelope's results, in the order of `folded`.
    pub results: &'a [Value],
    /// Folded runs the sim executor made.
    pub simulated_runs: u64,
}

/// Why the report of a decided eval batch cannot be computed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EvalDocumentError {
    /// The batch is not an eval batch.
    #[error("batch {batch_id} is a {mode} batch, not an eval")]
    NotAnEval {
        batch_id: String,
        mode: &'static str,
    },
    /// The runs cannot be paired.
    #[error("pairing the runs")]
    Pairing(#[from] EvalPairingError),
    /// The statistics refuse their settings.
    #[error("computing the statistics")]
    Report(#[from] EvalError),
}

/// Builds the eval report of a decided eval batch: pairs its runs and computes the statistics
/// with the spec's settings. The one code path of `cowork eval` and of the coordinator.
pub fn eval_document(input: &EvalDocumentInput<'_>) -> Result<EvalDocument, EvalDocumentError> {
    let plan = input.plan;
    if plan.mode != BatchMode::Eval {
        return Err(EvalDocumentError::NotAnEval {
            batch_id: plan.batch_id.to_string(),
            mode: mode_name(plan.mode),
        });
    }
    // `settings.seed` and `settings.resamples` belonged to the bootstrap interval; Tango's
    // interval needs neither (the seed still drives the sim executor).
    let options = EvalOptions {
        alpha: input.settings.alpha,
        mde: input.settings.mde,
    };
    let control = input.settings.control;
    let candidates: Vec<u32> = (0_u32..)
        .take(input.arms.len())
        .filter(|&arm| arm != control)
        .collect();
    let mut comparisons = Vec::with_capacity(candidates.len());
    let mut sequential = None;
    for &candidate in &candidates {
        let pairs = paired_outcomes(plan, input.folded, input.results, control, candidate)?;
        let label = |arm: u32| {
            input
                .arms
                .get(arm as usize)
                .ok_or(EvalPairingError::NoSuchArm { arm })
        };
        let (control_arm, candidate_arm) = (label(control)?, label(candidate)?);
        let sources = ArmSources {
            a: control_arm.source.clone(),
            b: candidate_arm.source.clone(),
        };
        let mut report = eval_report(&sources, &pairs, &options)?;
        super::whole_cost::add_whole_costs(
            &mut report,
            plan,
            input.folded,
            input.results,
            (control, candidate),
        );
        // The sequential design watches two arms (intake refuses it with more).
        if let (Some(spec), 1) = (&input.settings.sequential, candidates.len()) {
            let settings = SequentialSettings::of(spec, input.settings.alpha);
            let scenario_order: Vec<String> = plan
                .units
                .chunks(arm_count(plan))
                .map(|arms| arms[0].scenario_name.clone())
                .collect();
            let summary = sequential_summary(&pairs, &scenario_order, &settings);
            // The fixed test's verdict over every pair would ignore that the eval looked
            // before it stopped; the verdict is the sequential test's
            // (decisions.md#eval-sequential).
            report.overall.verdict = summary.verdict;
            report.decision_rule.push_str(SEQUENTIAL_RULE);
            sequential = Some(summary);
        }
        comparisons.push((control_arm.clone(), candidate_arm.clone(), report));
    }
    let mut ranked = super::arms::rank_against_control(comparisons, options.alpha);
    let report = match ranked.first() {
        Some(best) => best.report.clone(),
        None => return Err(EvalPairingError::NoSuchArm { arm: control }.into()),
    };
    if ranked.len() == 1 {
        // The two-arm form: its report is the comparison, and it has no adjustment to show.
        ranked.clear();
    }
    Ok(EvalDocument {
        batch_id: plan.batch_id.to_string(),
        executor: plan.executor.as_str().to_owned(),
        simulated: input.simulated_runs > 0 || plan.executor == ExecutorKind::Sim,
        model: input.settings.model.clone(),
        runs_per_arm: plan.runs_per_unit(),
        report,
        comparisons: ranked,
        sequential,
    })
}

fn mode_name(mode: BatchMode) -> &'static str {
    match mode {
        BatchMode::Run => "run",
        BatchMode::Record => "record",
        BatchMode::Replay => "replay",
        BatchMode::Eval => "eval",
    }
}

#[cfg(test)]
mod tests;
