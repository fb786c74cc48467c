//! Eval batches (brief §8): the layout of an A/B batch, the pairing of its results and
//! the document `cowork eval` stores and prints.
//!
//! An eval batch is a files plan whose units are scenario × arm: unit `2k` runs scenario `k` with
//! arm A, unit `2k + 1` runs it with arm B. Each unit's scenario is materialized exactly like a
//! matrix cell with a `skill_dirs` (and, with `--model`, a `models`) override (choice C1,
//! strategy A, see [`materialize`](super::materialize)), so the arm's directory replaces the
//! session's single `plugins.local_plugins` entry and the pinned model replaces its `model`.
//! Units are labelled `<scenario> [arm=A]` / `[arm=B]`, so no output can read a one-armed batch
//! as a comparison (contract §4.4). [`Plan::new`] sets [`Plan::interleave`] for eval plans, so
//! jobs are admitted repeat-major (`s0A s0B s1A s1B …` for repeat 0, then repeat 1, …) and both
//! arms meet the same fleet conditions.
//!
//! After the batch, [`paired_outcomes`] pairs `(scenario, repeat index, arm A)` with
//! `(scenario, repeat index, arm B)` (contract §8) for [`eval_report`](crate::eval::eval_report),
//! and [`eval_document`] turns a decided batch into its `eval.json` ([`EvalDocument`]), for
//! `cowork eval` and the coordinator alike.
//!
//! Pure: no IO, no clock, no environment.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::verdict::view_with_rederived_verdict;
use cowork_schema::batch::{BatchFlags, BatchMode, EvalSpec, ExecutorKind, REPEAT_MAX, REPEAT_MIN};
use cowork_schema::ids::{BatchId, UnitRef};
use cowork_schema::job::CellAxes;

use super::flags::{FlagError, RawFlags, js_number, validate_flags};
use super::materialize::materialize_cell;
use super::{Plan, PlanError, PlanKind, PlanLayout, PlanUnit, plan_units};
use crate::eval::{
    Arm, ArmOutcome, ArmSources, EvalError, EvalOptions, EvalReport, EvalVerdict, PairedOutcome,
    eval_report,
};
use crate::prepared::{PreparedArm, PreparedBatch};

/// The arms in unit order: arm A is unit `2k`, arm B unit `2k + 1`.
pub const ARMS: [Arm; 2] = [Arm::A, Arm::B];

/// Exit code of `cowork eval` when the gate fails (by default: the overall verdict is "B worse").
pub const EXIT_B_WORSE: i32 = 1;
/// Exit code of `cowork eval` when no pair of runs completed in both arms: there is nothing to
/// compare, and a CI gate must not read that as a pass.
pub const EXIT_NOTHING_TO_COMPARE: i32 = 2;

/// Which overall verdicts make `cowork eval` exit 1 (`--fail-on`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EvalGate {
    /// Never: the eval exits 0 whatever the verdict (it still exits 2 with nothing to compare).
    Never,
    /// "B worse" (the default).
    #[default]
    BWorse,
    /// Any detectable difference, better or worse: B must behave like A.
    AnyDifference,
}

/// The arm as jobs and simulation profiles name it (`JobSpec.arm`, `SimRule.arm`): `a` or `b`.
pub fn arm_wire_name(arm: Arm) -> &'static str {
    match arm {
        Arm::A => "a",
        Arm::B => "b",
    }
}

/// The arm as people read it: `A` or `B`.
pub fn arm_display_name(arm: Arm) -> &'static str {
    match arm {
        Arm::A => "A",
        Arm::B => "B",
    }
}

/// The unit label of a scenario's arm: `<scenario> [arm=A]` (contract §4.4: arms are always
/// labelled).
pub fn arm_unit_label(scenario_name: &str, arm: Arm) -> String {
    format!("{scenario_name} [arm={}]", arm_display_name(arm))
}

/// The eval flags as typed (`cowork eval`); numbers are read like the batch flags' (JavaScript
/// `Number()`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawEvalFlags {
    /// `--runs N`: runs per arm per scenario.
    pub runs: String,
    /// `--alpha`: significance level of the verdicts.
    pub alpha: String,
    /// `--job-timeout`, as the batch flag.
    pub job_timeout: Option<String>,
}

/// Validated eval flags.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalFlags {
    /// The batch flags of the eval: `repeat` is the runs per arm, `job_timeout_ms` as given;
    /// everything else at its default (an eval has no early stop and no budget stop, so every
    /// pair is complete unless a run errors).
    pub batch: BatchFlags,
    /// Significance level, strictly between 0 and 1.
    pub alpha: f64,
}

/// Validates the eval flags, reporting every problem (`--runs` in 2..=10000, `--alpha` strictly
/// between 0 and 1, `--job-timeout` as for `run`).
pub fn validate_eval_flags(raw: &RawEvalFlags) -> Result<EvalFlags, Vec<FlagError>> {
    let mut errors = Vec::new();
    let runs = js_number(&raw.runs);
    let runs_ok = runs.is_finite()
        && runs.fract() == 0.0
        && (f64::from(REPEAT_MIN)..=f64::from(REPEAT_MAX)).contains(&runs);
    if !runs_ok {
        errors.push(FlagError {
            flag: "--runs",
            message: format!(
                "must be an integer from {REPEAT_MIN} to {REPEAT_MAX}, got {:?}",
                raw.runs
            ),
        });
    }
    let alpha = js_number(&raw.alpha);
    if !(alpha > 0.0 && alpha < 1.0) {
        errors.push(FlagError {
            flag: "--alpha",
            message: format!(
                "must be a number strictly between 0 and 1, got {:?}",
                raw.alpha
            ),
        });
    }
    let batch = validate_flags(&RawFlags {
        job_timeout: raw.job_timeout.clone(),
        ..RawFlags::default()
    });
    match batch {
        Ok(batch) if errors.is_empty() => Ok(EvalFlags {
            batch: BatchFlags {
                // In range: checked above.
                repeat: Some(runs as u32),
                ..batch
            },
            alpha,
        }),
        Ok(_) => Err(errors),
        Err(flag_errors) => {
            errors.extend(flag_errors);
            Err(errors)
        }
    }
}

/// What an eval layout needs besides the prepared scenarios.
#[derive(Clone, Copy, Debug)]
pub struct EvalLayoutInput<'a> {
    /// Arm A's directory, then arm B's.
    pub arms: &'a [PreparedArm; 2],
    /// `--model`: the model both arms run; `None` keeps the session's own (equal in both arms).
    pub model: Option<&'a str>,
    /// The validated batch flags; `repeat` is the number of runs per arm per scenario.
    pub flags: &'a BatchFlags,
}

/// Why an eval batch cannot be laid out.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalPlanError {
    /// The scenarios cannot be planned as a files batch.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The arm's directory cannot replace the scenario session's skill (the matrix's
    /// `skill_dirs` preconditions, contract §5.4): in an eval this is a usage error, because a
    /// comparison with one arm missing means nothing.
    #[error("{file}: arm {arm} ({arm_dir}) cannot be applied: {message}")]
    ArmNotApplicable {
        file: String,
        arm: &'static str,
        arm_dir: String,
        message: String,
    },
    /// Runs are paired by scenario name, so two scenarios may not share one.
    #[error(
        "{first} and {second}: both scenarios are named {name:?}; an eval pairs runs by scenario name"
    )]
    DuplicateScenarioName {
        name: String,
        first: String,
        second: String,
    },
    /// Pairing needs at least two runs per arm (`--runs`).
    #[error("an eval needs at least 2 runs per arm and scenario")]
    TooFewRuns,
    /// An eval takes no matrix.
    #[error("an eval takes no matrix")]
    Matrix,
}

/// Lays out an eval batch: two units per scenario (arm A, arm B), each running its materialized
/// scenario, in mode [`BatchMode::Eval`]. Returns every problem found.
pub fn plan_eval_units(
    batch: &PreparedBatch,
    input: &EvalLayoutInput<'_>,
) -> Result<PlanLayout, Vec<EvalPlanError>> {
    let mut errors = Vec::new();
    if batch.matrix.is_some() {
        errors.push(EvalPlanError::Matrix);
    }
    if input.flags.repeat.is_none_or(|runs| runs < 2) {
        errors.push(EvalPlanError::TooFewRuns);
    }
    let mut names: BTreeMap<&str, &str> = BTreeMap::new();
    for scenario in &batch.scenarios {
        if let Some(first) = names.insert(&scenario.name, &scenario.rel_path) {
            errors.push(EvalPlanError::DuplicateScenarioName {
                name: scenario.name.clone(),
                first: first.to_owned(),
                second: scenario.rel_path.clone(),
            });
        }
    }
    let files_layout = match plan_units(batch, input.flags, BatchMode::Eval) {
        Ok(layout) => layout,
        Err(plan_errors) => {
            errors.extend(plan_errors.into_iter().map(EvalPlanError::from));
            return Err(errors);
        }
    };

    let mut units = Vec::with_capacity(files_layout.units.len() * 2);
    let mut derived_files = Vec::new();
    for (scenario_idx, file_unit) in files_layout.units.iter().enumerate() {
        // A files layout without errors has one unit per scenario, in scenario order.
        let scenario = &batch.scenarios[scenario_idx];
        for (arm, prepared_arm) in ARMS.into_iter().zip(input.arms) {
            let unit_idx = scenario_idx as u32 * 2 + arm_offset(arm);
            let axes = CellAxes {
                baseline: None,
                model: input.model.map(str::to_owned),
                skill_dir: Some(prepared_arm.declared.clone()),
            };
            match materialize_cell(unit_idx, &axes, Some(&prepared_arm.rel_path), scenario) {
                Ok(materialized) => {
                    derived_files.extend(materialized.derived);
                    units.push(PlanUnit {
                        unit: UnitRef::File(unit_idx),
                        scenario_name: scenario.name.clone(),
                        label: arm_unit_label(&scenario.name, arm),
                        axes: None,
                        scenario_file: materialized.scenario_file,
                        tier: file_unit.tier,
                        cell_error: None,
                        timeout_ms: file_unit.timeout_ms,
                        arm: Some(arm),
                    });
                }
                Err(message) => errors.push(EvalPlanError::ArmNotApplicable {
                    file: scenario.rel_path.clone(),
                    arm: arm_display_name(arm),
                    arm_dir: prepared_arm.declared.clone(),
                    message,
                }),
            }
        }
    }
    let mut derived_paths = BTreeSet::new();
    for file in &derived_files {
        if batch.files.contains(&file.path) || !derived_paths.insert(file.path.as_str()) {
            errors.push(EvalPlanError::Plan(PlanError::DerivedPathCollision {
                path: file.path.clone(),
            }));
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let n_units = u32::try_from(units.len()).unwrap_or(u32::MAX);
    Ok(PlanLayout {
        kind: PlanKind::Files,
        mode: BatchMode::Eval,
        flags: files_layout.flags,
        units,
        requested_cells: n_units,
        truncated: false,
        derived_files,
        forwarded_flags: files_layout.forwarded_flags,
    })
}

fn arm_offset(arm: Arm) -> u32 {
    match arm {
        Arm::A => 0,
        Arm::B => 1,
    }
}

/// Why the results of an eval batch cannot be paired.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalPairingError {
    /// The plan is not an eval plan (units are not arm A, arm B per scenario).
    #[error("unit {unit} is not laid out as an eval arm")]
    NotAnEvalPlan { unit: u32 },
    /// The folded runs and their results differ in number.
    #[error("{folded} folded runs but {results} results")]
    ResultCount { folded: usize, results: usize },
    /// A stored result cannot be read as a run.
    #[error("the result of unit {unit}, repeat {repeat_index:?} is unreadable: {message}")]
    BadResult {
        unit: u32,
        repeat_index: Option<u32>,
        message: String,
    },
}

/// Pairs the runs of an eval plan: one [`PairedOutcome`] per scenario and repeat index.
///
/// `folded` is the reduction's `(unit index, repeat index)` of every completed run and
/// `results` the envelope's results in the same order (choice C3). A run missing from `folded`
/// (an error, or never run) counts as not completed, so its pair is left out of the paired
/// statistics and counted as excluded.
pub fn paired_outcomes(
    plan: &Plan,
    folded: &[(u32, Option<u32>)],
    results: &[Value],
) -> Result<Vec<PairedOutcome>, EvalPairingError> {
    if folded.len() != results.len() {
        return Err(EvalPairingError::ResultCount {
            folded: folded.len(),
            results: results.len(),
        });
    }
    let mut completed: BTreeMap<(u32, Option<u32>), ArmOutcome> = BTreeMap::new();
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
    let not_completed = ArmOutcome {
        pass: false,
        completed: false,
        cost_usd: None,
    };
    let mut pairs = Vec::new();
    for arm_units in plan.units.chunks(2) {
        let [unit_a, unit_b] = arm_units else {
            return Err(EvalPairingError::NotAnEvalPlan {
                unit: arm_units[0].unit.index(),
            });
        };
        for (unit, arm) in [(unit_a, Arm::A), (unit_b, Arm::B)] {
            if unit.arm != Some(arm) {
                return Err(EvalPairingError::NotAnEvalPlan {
                    unit: unit.unit.index(),
                });
            }
        }
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

/// The exit code of an eval: [`EXIT_NOTHING_TO_COMPARE`] when no pair completed, else
/// [`EXIT_B_WORSE`] when the overall verdict fails the `gate`, else 0. Per-scenario verdicts do
/// not count: they are not corrected for multiple comparisons.
pub fn eval_exit_code(report: &EvalReport, gate: EvalGate) -> i32 {
    if report.overall.pairs == 0 {
        return EXIT_NOTHING_TO_COMPARE;
    }
    let fails = match (gate, report.overall.verdict) {
        (EvalGate::Never, _) | (_, EvalVerdict::NoDetectableDifference) => false,
        (EvalGate::BWorse, verdict) => verdict == EvalVerdict::BWorse,
        (EvalGate::AnyDifference, _) => true,
    };
    if fails { EXIT_B_WORSE } else { 0 }
}

/// Why there is nothing to compare, when no pair of runs completed in both arms; `None` when
/// some pair did.
pub fn nothing_to_compare(report: &EvalReport) -> Option<String> {
    let overall = &report.overall;
    if overall.pairs > 0 {
        return None;
    }
    let [arm_a, arm_b] = &overall.arms;
    Some(format!(
        "nothing to compare: no run completed in both arms ({} pairs left out; arm A completed \
         {} of {} runs, arm B {} of {}: the others errored or stopped at an unanswered gate)",
        overall.excluded_pairs, arm_a.completed, arm_a.runs, arm_b.completed, arm_b.runs
    ))
}

/// The file name of an eval batch's report in its batch directory: `batches/<id>/eval.json`.
pub const EVAL_DOCUMENT_FILE: &str = "eval.json";

/// The store key of `batch_id`'s eval report.
pub fn eval_document_key(batch_id: &BatchId) -> String {
    format!("batches/{batch_id}/{EVAL_DOCUMENT_FILE}")
}

/// `batches/<id>/eval.json` and the `--output-format json` line: the report, with the batch it
/// came from and whether its runs were simulated (brief §6: simulated results are never
/// presented as real). Written by `cowork eval` and by the coordinator, read back by
/// `cowork eval --coordinator --watch` and by reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
}

impl EvalDocument {
    /// The bytes stored as `eval.json`: pretty JSON and a final newline.
    pub fn to_stored_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut bytes = serde_json::to_vec_pretty(self)?;
        bytes.push(b'\n');
        Ok(bytes)
    }
}

/// What the report of a decided eval batch is computed from.
#[derive(Clone, Copy, Debug)]
pub struct EvalDocumentInput<'a> {
    /// The batch's eval plan (units arm A, arm B per scenario).
    pub plan: &'a Plan,
    /// The eval settings of the batch's spec (model and alpha).
    pub settings: &'a EvalSpec,
    /// How the report labels the arms: `cowork eval` uses the paths as typed, the coordinator
    /// the bundle-relative arm directories of the spec.
    pub sources: &'a ArmSources,
    /// The reduction's `(unit index, repeat index)` of every folded run (choice C3).
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
    let pairs = paired_outcomes(plan, input.folded, input.results)?;
    // `settings.seed` and `settings.resamples` belonged to the bootstrap interval; the exact
    // interval needs neither (the seed still drives the sim executor).
    let options = EvalOptions {
        alpha: input.settings.alpha,
    };
    let report = eval_report(input.sources, &pairs, &options)?;
    Ok(EvalDocument {
        batch_id: plan.batch_id.to_string(),
        executor: plan.executor.as_str().to_owned(),
        simulated: input.simulated_runs > 0 || plan.executor == ExecutorKind::Sim,
        model: input.settings.model.clone(),
        runs_per_arm: plan.runs_per_unit(),
        report,
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
mod tests {
    use std::path::Path;

    use cowork_schema::batch::ExecutorKind;
    use cowork_schema::ids::BatchId;
    use cowork_schema::scenario::Scenario;
    use cowork_schema::session::Session;
    use serde_json::json;

    use super::*;
    use crate::plan::PlanInput;
    use crate::prepared::{PreparedScenario, PreparedSession};

    const SESSION: &str = "model: m0\nplugins:\n  local_plugins:\n    - ../skills/v1/k\n";

    fn scenario(rel: &str) -> PreparedScenario {
        let text = "prompt: p\nsession: ../sessions/s.yaml\n";
        let scenario = Scenario::from_yaml(text, Path::new(rel)).expect("test scenario is valid");
        PreparedScenario {
            rel_path: rel.to_owned(),
            name: scenario.effective_name(Path::new(rel)),
            scenario,
            session: Some(PreparedSession {
                rel_path: "sessions/s.yaml".to_owned(),
                session: Session::from_yaml(SESSION, Path::new("sessions/s.yaml"))
                    .expect("test session is valid"),
            }),
        }
    }

    fn batch(rels: &[&str]) -> PreparedBatch {
        let scenarios: Vec<PreparedScenario> = rels.iter().map(|rel| scenario(rel)).collect();
        let mut files: BTreeSet<String> = scenarios.iter().map(|s| s.rel_path.clone()).collect();
        files.insert("sessions/s.yaml".to_owned());
        PreparedBatch {
            root: "/bundle".into(),
            scenarios,
            matrix: None,
            files,
            target: "scenarios".to_owned(),
        }
    }

    fn arms(a: &str, b: &str) -> [PreparedArm; 2] {
        [a, b].map(|rel| PreparedArm {
            declared: rel.to_owned(),
            rel_path: rel.to_owned(),
        })
    }

    fn flags(runs: u32) -> BatchFlags {
        BatchFlags {
            repeat: Some(runs),
            ..BatchFlags::default()
        }
    }

    fn eval_plan(rels: &[&str], runs: u32, model: Option<&str>) -> Plan {
        let arms = arms("skills/v1/k", "skills/v2/k");
        let flags = flags(runs);
        let layout = plan_eval_units(
            &batch(rels),
            &EvalLayoutInput {
                arms: &arms,
                model,
                flags: &flags,
            },
        )
        .expect("test eval plans");
        Plan::new(
            layout,
            PlanInput {
                batch_id: BatchId::new("b1").expect("valid batch id"),
                flags,
                mode: BatchMode::Eval,
                executor: ExecutorKind::Sim,
                sim: None,
                bundle_sha256: "ab".repeat(32),
            },
        )
    }

    /// `<job id local part> <arm>` of every job, in admission order.
    fn admission_order(plan: &Plan) -> Vec<String> {
        plan.jobs()
            .map(|job| {
                format!(
                    "{} {}",
                    job.job_id.local_part(),
                    job.arm.as_deref().unwrap_or("-")
                )
            })
            .collect()
    }

    #[test]
    fn eval_jobs_are_admitted_repeat_major_with_arms_interleaved() {
        let plan = eval_plan(&["scenarios/s0.yaml", "scenarios/s1.yaml"], 2, None);
        assert!(plan.interleave);
        assert_eq!(plan.n_jobs(), 8);
        assert_eq!(
            admission_order(&plan),
            [
                "f0/r0 a", "f1/r0 b", "f2/r0 a", "f3/r0 b", "f0/r1 a", "f1/r1 b", "f2/r1 a",
                "f3/r1 b",
            ]
        );
    }

    #[test]
    fn plans_of_other_modes_keep_unit_major_order() {
        let flags = flags(2);
        let layout = plan_units(
            &batch(&["scenarios/s0.yaml", "scenarios/s1.yaml"]),
            &flags,
            BatchMode::Run,
        )
        .expect("test batch plans");
        let plan = Plan::new(
            layout,
            PlanInput {
                batch_id: BatchId::new("b1").expect("valid batch id"),
                flags,
                mode: BatchMode::Run,
                executor: ExecutorKind::Sim,
                sim: None,
                bundle_sha256: "ab".repeat(32),
            },
        );
        assert!(!plan.interleave);
        assert_eq!(
            admission_order(&plan),
            ["f0/r0 -", "f0/r1 -", "f1/r0 -", "f1/r1 -"]
        );
    }

    #[test]
    fn every_unit_is_labelled_with_its_arm_and_runs_its_arm_dir() {
        let plan = eval_plan(&["scenarios/s0.yaml"], 3, Some("pinned-model"));
        let labels: Vec<&str> = plan.units.iter().map(|unit| unit.label.as_str()).collect();
        assert_eq!(labels, ["s0 [arm=A]", "s0 [arm=B]"]);
        assert_eq!(plan.summary().units[1].label, "s0 [arm=B]");
        for (unit, (dir, arm)) in plan
            .units
            .iter()
            .zip([("../skills/v1/k", Arm::A), ("../skills/v2/k", Arm::B)])
        {
            assert_eq!(unit.arm, Some(arm));
            let session = plan
                .derived_files
                .iter()
                .find(|file| {
                    file.path == format!("sessions/.cowork-cell-{}-s.yaml", unit.unit.index())
                })
                .expect("each arm has its derived session");
            let session: Value =
                serde_json::from_slice(&session.contents).expect("derived session is JSON");
            assert_eq!(session["plugins"]["local_plugins"], json!([dir]));
            assert_eq!(session["model"], "pinned-model");
        }
    }

    #[test]
    fn an_arm_whose_basename_differs_is_a_usage_error_naming_the_arm() {
        let arms = arms("skills/v1/k", "skills/other/kk");
        let flags = flags(2);
        let errors = plan_eval_units(
            &batch(&["scenarios/s0.yaml"]),
            &EvalLayoutInput {
                arms: &arms,
                model: None,
                flags: &flags,
            },
        )
        .expect_err("basename kk cannot replace k");
        assert_eq!(errors.len(), 1, "{errors:?}");
        let message = errors[0].to_string();
        assert!(
            message.starts_with("scenarios/s0.yaml: arm B (skills/other/kk) cannot be applied"),
            "{message}"
        );
    }

    #[test]
    fn duplicate_scenario_names_and_single_runs_are_refused() {
        let arms = arms("skills/v1/k", "skills/v2/k");
        let flags = BatchFlags::default();
        let errors = plan_eval_units(
            &batch(&["a/s0.yaml", "b/s0.yaml"]),
            &EvalLayoutInput {
                arms: &arms,
                model: None,
                flags: &flags,
            },
        )
        .expect_err("two scenarios named s0 and no repeat");
        assert!(errors.contains(&EvalPlanError::TooFewRuns), "{errors:?}");
        assert!(
            errors.contains(&EvalPlanError::DuplicateScenarioName {
                name: "s0".to_owned(),
                first: "a/s0.yaml".to_owned(),
                second: "b/s0.yaml".to_owned(),
            }),
            "{errors:?}"
        );
    }

    fn run_result(pass: bool, cost: f64) -> Value {
        json!({
            "verdict": { "pass": pass, "signals": [] },
            "cost": { "usd": cost },
        })
    }

    #[test]
    fn pairs_join_the_arms_by_scenario_and_repeat_index() {
        let plan = eval_plan(&["scenarios/s0.yaml"], 2, None);
        // Unit 1 (arm B) repeat 1 errored: it is absent from the folded runs.
        let folded = [(0, Some(0)), (0, Some(1)), (1, Some(0))];
        let results = [
            run_result(true, 0.5),
            run_result(false, 0.25),
            run_result(false, 1.0),
        ];
        let pairs = paired_outcomes(&plan, &folded, &results).expect("results pair");
        let done = |pass, cost| ArmOutcome {
            pass,
            completed: true,
            cost_usd: Some(cost),
        };
        assert_eq!(
            pairs,
            [
                PairedOutcome {
                    scenario: "s0".to_owned(),
                    repeat_index: 0,
                    a: done(true, 0.5),
                    b: done(false, 1.0),
                },
                PairedOutcome {
                    scenario: "s0".to_owned(),
                    repeat_index: 1,
                    a: done(false, 0.25),
                    b: ArmOutcome {
                        pass: false,
                        completed: false,
                        cost_usd: None,
                    },
                },
            ]
        );
    }

    #[test]
    fn eval_flags_are_validated_together() {
        let raw = |runs: &str, alpha: &str| RawEvalFlags {
            runs: runs.to_owned(),
            alpha: alpha.to_owned(),
            job_timeout: None,
        };
        let flags = validate_eval_flags(&raw("10", "0.05")).expect("defaults are valid");
        assert_eq!(flags.batch.repeat, Some(10));
        assert_eq!(flags.alpha, 0.05);
        for (runs, alpha, expected) in [
            ("1", "0.05", vec!["--runs"]),
            ("10001", "0.05", vec!["--runs"]),
            ("2.5", "0.05", vec!["--runs"]),
            ("10", "0", vec!["--alpha"]),
            ("10", "1", vec!["--alpha"]),
            ("abc", "nan", vec!["--runs", "--alpha"]),
        ] {
            let errors = validate_eval_flags(&raw(runs, alpha)).expect_err("refused");
            let flags: Vec<&str> = errors.iter().map(|error| error.flag).collect();
            assert_eq!(flags, expected, "--runs {runs} --alpha {alpha}");
        }
        let errors = validate_eval_flags(&RawEvalFlags {
            job_timeout: Some("soon".to_owned()),
            ..raw("10", "0.05")
        })
        .expect_err("bad job timeout");
        assert_eq!(errors[0].flag, "--job-timeout");
    }

    fn settings() -> EvalSpec {
        EvalSpec {
            arms: ["skills/v1/k".to_owned(), "skills/v2/k".to_owned()],
            model: Some("pinned-model".to_owned()),
            alpha: 0.05,
            seed: 7,
            resamples: 200,
        }
    }

    #[test]
    fn the_eval_document_labels_the_arms_and_reads_back_as_stored() {
        let plan = eval_plan(&["scenarios/s0.yaml"], 2, Some("pinned-model"));
        // A passes both runs, B fails both: two discordant pairs, too few for significance.
        let folded = [(0, Some(0)), (0, Some(1)), (1, Some(0)), (1, Some(1))];
        let results = [
            run_result(true, 0.5),
            run_result(true, 0.5),
            run_result(false, 0.25),
            run_result(false, 0.25),
        ];
        let sources = ArmSources {
            a: "skills/v1/k".to_owned(),
            b: "skills/v2/k".to_owned(),
        };
        let settings = settings();
        let document = eval_document(&EvalDocumentInput {
            plan: &plan,
            settings: &settings,
            sources: &sources,
            folded: &folded,
            results: &results,
            simulated_runs: 0,
        })
        .expect("an eval plan's results give a report");
        assert_eq!(document.batch_id, "b1");
        assert_eq!(document.executor, "sim");
        assert!(
            document.simulated,
            "the sim executor always marks the report simulated"
        );
        assert_eq!(document.model.as_deref(), Some("pinned-model"));
        assert_eq!(document.runs_per_arm, 2);
        assert_eq!(document.report.alpha, 0.05);
        assert_eq!(document.report.confidence_level, 0.95);
        let overall = &document.report.overall;
        assert_eq!(overall.discordant.a_pass_b_fail, 2);
        assert_eq!(overall.arms[0].source, "skills/v1/k");
        assert_eq!(overall.arms[1].source, "skills/v2/k");
        assert_eq!(overall.verdict, EvalVerdict::NoDetectableDifference);
        assert_eq!(eval_exit_code(&document.report, EvalGate::BWorse), 0);
        assert_eq!(nothing_to_compare(&document.report), None);

        let stored = document.to_stored_json().expect("the document serializes");
        assert!(stored.ends_with(b"}\n"));
        let read_back: EvalDocument =
            serde_json::from_slice(&stored).expect("eval.json reads back");
        assert_eq!(read_back, document);
        assert_eq!(
            eval_document_key(&plan.batch_id),
            "batches/b1/eval.json".to_owned()
        );
    }

    #[test]
    fn only_an_eval_plan_has_an_eval_document() {
        let flags = flags(2);
        let layout = plan_units(&batch(&["scenarios/s0.yaml"]), &flags, BatchMode::Run)
            .expect("test batch plans");
        let plan = Plan::new(
            layout,
            PlanInput {
                batch_id: BatchId::new("b1").expect("valid batch id"),
                flags,
                mode: BatchMode::Run,
                executor: ExecutorKind::Sim,
                sim: None,
                bundle_sha256: "ab".repeat(32),
            },
        );
        let error = eval_document(&EvalDocumentInput {
            plan: &plan,
            settings: &settings(),
            sources: &ArmSources {
                a: "a".to_owned(),
                b: "b".to_owned(),
            },
            folded: &[],
            results: &[],
            simulated_runs: 0,
        })
        .expect_err("a run batch is no eval");
        assert_eq!(error.to_string(), "batch b1 is a run batch, not an eval");
    }

    #[test]
    fn pairing_refuses_mismatched_results() {
        let plan = eval_plan(&["scenarios/s0.yaml"], 2, None);
        assert_eq!(
            paired_outcomes(&plan, &[(0, Some(0))], &[]),
            Err(EvalPairingError::ResultCount {
                folded: 1,
                results: 0
            })
        );
    }

    /// A report whose overall comparison has the given pairs and verdict.
    fn report_with(pairs: u64, verdict: EvalVerdict) -> EvalReport {
        let sources = ArmSources {
            a: "a".to_owned(),
            b: "b".to_owned(),
        };
        let mut report = eval_report(&sources, &[], &EvalOptions { alpha: 0.05 })
            .expect("an empty report is valid");
        report.overall.pairs = pairs;
        report.overall.verdict = verdict;
        report
    }

    #[test]
    fn the_exit_code_follows_the_gate_and_nothing_to_compare_is_an_error() {
        use EvalVerdict::{BBetter, BWorse, NoDetectableDifference};
        let cases = [
            (EvalGate::BWorse, BWorse, 1),
            (EvalGate::BWorse, BBetter, 0),
            (EvalGate::BWorse, NoDetectableDifference, 0),
            (EvalGate::AnyDifference, BWorse, 1),
            (EvalGate::AnyDifference, BBetter, 1),
            (EvalGate::AnyDifference, NoDetectableDifference, 0),
            (EvalGate::Never, BWorse, 0),
            (EvalGate::Never, BBetter, 0),
        ];
        for (gate, verdict, expected) in cases {
            assert_eq!(
                eval_exit_code(&report_with(10, verdict), gate),
                expected,
                "{gate:?} {verdict:?}"
            );
        }
        for gate in [EvalGate::Never, EvalGate::BWorse, EvalGate::AnyDifference] {
            let empty = report_with(0, NoDetectableDifference);
            assert_eq!(eval_exit_code(&empty, gate), EXIT_NOTHING_TO_COMPARE);
            let message = nothing_to_compare(&empty).expect("no pair completed");
            assert!(message.starts_with("nothing to compare: "), "{message}");
        }
    }
}
