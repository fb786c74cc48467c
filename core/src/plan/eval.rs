//! Eval batches (decisions.md#eval-design): the flags and the layout of an A/B batch. What
//! happens after the batch is decided (pairing, the report document, the exit gate) is the
//! `eval` module's.
//!
//! An eval batch is a files plan whose units are scenario × arm: with `n` arms, unit `nk + i`
//! runs scenario `k` with arm `i` (unit `2k` arm A and `2k + 1` arm B in the two-arm form). Each
//! unit's scenario is materialized exactly like a
//! matrix cell with a `skill_dirs` (and, with `--model`, a `models`) override
//! (harness-behaviour.md#choice-c1, strategy A, see [`materialize`](super::materialize)), so the
//! arm's directory replaces the session's single `plugins.local_plugins` entry and the pinned model
//! replaces its `model`. The no-skill arm keeps the scenario as it is and its jobs pass
//! `--ablate-skill`, which empties the session's plugins (harness-behaviour.md#provenance).
//! Units are labelled `<scenario> [arm=A]` / `[arm=B]` (or the arm's name), so no output can read
//! a one-armed batch as a comparison (harness-behaviour.md#provenance). [`Plan::new`](super::Plan::new) sets
//! [`Plan::interleave`](super::Plan::interleave) for eval plans, so jobs are admitted repeat-major (`s0A s0B s1A s1B …` for
//! repeat 0, then repeat 1, …) and both arms meet the same fleet conditions.
//!
//! Pure: no IO, no clock, no environment.

use std::collections::{BTreeMap, BTreeSet};

use cowork_schema::batch::{BatchFlags, BatchMode, REPEAT_MAX, REPEAT_MIN};
use cowork_schema::ids::UnitRef;
use cowork_schema::job::CellAxes;

use super::flags::{FlagError, RawFlags, js_number, validate_flags};
use super::materialize::materialize_cell;
use super::{PlanError, PlanKind, PlanLayout, PlanUnit, plan_units};
use crate::prepared::{PreparedArm, PreparedBatch};

/// The most arms an eval takes: every candidate is compared with the control, and each
/// comparison costs its own runs.
pub const MAX_ARMS: usize = 8;

/// The arm an eval unit runs: its place in the eval's arms and whether its runs pass
/// `--ablate-skill` (the no-skill arm).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnitArm {
    /// The arm's index in arm order: 0 is arm A, 1 arm B, and so on.
    pub index: u32,
    /// The arm runs without the skill: its jobs pass `--ablate-skill`.
    pub ablated: bool,
}

/// The arm as jobs and simulation profiles name it (`JobSpec.arm`, `SimRule.arm`): `a`, `b`,
/// `c`, … by arm index.
pub fn arm_wire_name(index: u32) -> String {
    char::from_u32(u32::from(b'a') + index)
        .filter(char::is_ascii_lowercase)
        .map_or_else(|| format!("arm{index}"), String::from)
}

/// The unit label of a scenario's arm: `<scenario> [arm=A]` (harness-behaviour.md#provenance: arms
/// are always labelled).
pub fn arm_unit_label(scenario_name: &str, arm_name: &str) -> String {
    format!("{scenario_name} [arm={arm_name}]")
}

/// The name of the arm at `index` of an eval spec: its `armNames` entry, else `A`, `B`, … in
/// the two-arm form.
pub fn spec_arm_name(settings: &cowork_schema::batch::EvalSpec, index: usize) -> String {
    settings
        .arm_names
        .get(index)
        .cloned()
        .unwrap_or_else(|| arm_wire_name(u32::try_from(index).unwrap_or(u32::MAX)).to_uppercase())
}

/// Whether `name` can name an arm (`--arm NAME=DIR`): 1 to 32 letters, digits, `.`, `_` or `-`,
/// so that it reads plainly in unit labels and report tables.
pub fn valid_arm_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'))
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
    /// `--stall-after` and `--on-stall`, as the batch flags.
    pub stall_after: Option<String>,
    pub on_stall: Option<String>,
    /// `--sequential`, `--looks K` and `--mde POINTS` (see
    /// [`validate_sequential_flags`](super::sequential::validate_sequential_flags)).
    pub sequential: bool,
    pub looks: Option<String>,
    /// `--mde POINTS`: the difference the eval should detect, in percentage points.
    pub mde: Option<String>,
    /// `--expect-pass-rate P`: arm A's pass rate a dry run assumes without history.
    pub expect_pass_rate: Option<String>,
    /// `--batch-budget-usd`, `--sandbox-price`, `--model-price` and `--allow-unpriced`, as the
    /// batch flags (decisions.md#whole-cost).
    pub batch_budget_usd: Option<String>,
    pub sandbox_price: Vec<String>,
    pub model_price: Vec<String>,
    pub allow_unpriced: bool,
    /// `--priority`, as the batch flag.
    pub priority: Option<String>,
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
    /// The sequential design (`--sequential`); `None` runs every planned pair.
    pub sequential: Option<cowork_schema::batch::SequentialSpec>,
    /// `--mde` as a fraction (`--mde 15` is 0.15), above 0 and at most 1.
    pub mde: Option<f64>,
    /// `--expect-pass-rate`, from 0 to 1.
    pub expect_pass_rate: Option<f64>,
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
    let (mde, expect_pass_rate) = validate_power_flags(raw, &mut errors);
    let sequential =
        super::sequential::validate_sequential_flags(raw.sequential, raw.looks.as_deref(), mde)
            .unwrap_or_else(|flag_errors| {
                errors.extend(flag_errors);
                None
            });
    let batch = validate_flags(&RawFlags {
        job_timeout: raw.job_timeout.clone(),
        stall_after: raw.stall_after.clone(),
        on_stall: raw.on_stall.clone(),
        batch_budget_usd: raw.batch_budget_usd.clone(),
        // The runs per arm are the repeat (checked above); a budget only asks that there is one.
        repeat: raw
            .batch_budget_usd
            .as_ref()
            .map(|_| REPEAT_MIN.to_string()),
        sandbox_price: raw.sandbox_price.clone(),
        model_price: raw.model_price.clone(),
        allow_unpriced: raw.allow_unpriced,
        priority: raw.priority.clone(),
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
            sequential,
            mde,
            expect_pass_rate,
        }),
        Ok(_) => Err(errors),
        Err(flag_errors) => {
            errors.extend(flag_errors);
            Err(errors)
        }
    }
}

/// `--mde` (percentage points, above 0 and at most 100, returned as a fraction) and
/// `--expect-pass-rate` (0 to 1); a bad value is pushed onto `errors`.
fn validate_power_flags(
    raw: &RawEvalFlags,
    errors: &mut Vec<FlagError>,
) -> (Option<f64>, Option<f64>) {
    let mde = raw.mde.as_deref().and_then(|text| {
        let points = js_number(text);
        if points > 0.0 && points <= 100.0 {
            Some(points / 100.0)
        } else {
            errors.push(FlagError {
                flag: "--mde",
                message: format!(
                    "must be a difference in percentage points above 0 and at most 100 (15 for \
                     15 points), got {text:?}"
                ),
            });
            None
        }
    });
    let expect_pass_rate = raw.expect_pass_rate.as_deref().and_then(|text| {
        let rate = js_number(text);
        if (0.0..=1.0).contains(&rate) {
            Some(rate)
        } else {
            errors.push(FlagError {
                flag: "--expect-pass-rate",
                message: format!("must be a pass rate from 0 to 1 (0.9 for 90%), got {text:?}"),
            });
            None
        }
    });
    (mde, expect_pass_rate)
}

/// What an eval layout needs besides the prepared scenarios.
#[derive(Clone, Copy, Debug)]
pub struct EvalLayoutInput<'a> {
    /// Every arm in arm order (arm A, then arm B in the two-arm form).
    pub arms: &'a [PreparedArm],
    /// `--model`: the model every arm runs; `None` keeps the session's own (equal in every arm).
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
    /// `skill_dirs` preconditions, harness-behaviour.md#matrix-axes): in an eval this is a usage
    /// error, because a comparison with one arm missing means nothing.
    #[error("{file}: arm {arm} ({arm_dir}) cannot be applied: {message}")]
    ArmNotApplicable {
        file: String,
        arm: String,
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
    /// Fewer than two arms, or more than [`MAX_ARMS`].
    #[error("an eval compares 2 to {MAX_ARMS} arms, got {0}")]
    ArmCount(usize),
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

    let n_arms = input.arms.len();
    if !(2..=MAX_ARMS).contains(&n_arms) {
        errors.push(EvalPlanError::ArmCount(n_arms));
        return Err(errors);
    }
    let mut units = Vec::with_capacity(files_layout.units.len() * n_arms);
    let mut derived_files = Vec::new();
    for (scenario_idx, file_unit) in files_layout.units.iter().enumerate() {
        // A files layout without errors has one unit per scenario, in scenario order.
        let scenario = &batch.scenarios[scenario_idx];
        for (arm_idx, prepared_arm) in (0_u32..).zip(input.arms) {
            let unit_idx = scenario_idx as u32 * n_arms as u32 + arm_idx;
            let axes = CellAxes {
                baseline: None,
                model: input.model.map(str::to_owned),
                skill_dir: prepared_arm
                    .rel_path
                    .as_ref()
                    .map(|_| prepared_arm.declared.clone()),
            };
            match materialize_cell(unit_idx, &axes, prepared_arm.rel_path.as_deref(), scenario) {
                Ok(materialized) => {
                    derived_files.extend(materialized.derived);
                    units.push(PlanUnit {
                        unit: UnitRef::File(unit_idx),
                        scenario_name: scenario.name.clone(),
                        label: arm_unit_label(&scenario.name, &prepared_arm.name),
                        axes: None,
                        scenario_file: materialized.scenario_file,
                        tier: file_unit.tier,
                        cell_error: None,
                        timeout_ms: file_unit.timeout_ms,
                        arm: Some(UnitArm {
                            index: arm_idx,
                            ablated: prepared_arm.rel_path.is_none(),
                        }),
                    });
                }
                Err(message) => errors.push(EvalPlanError::ArmNotApplicable {
                    file: scenario.rel_path.clone(),
                    arm: prepared_arm.name.clone(),
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

#[cfg(test)]
pub(crate) mod tests {
    use std::path::Path;

    use cowork_schema::batch::ExecutorKind;
    use cowork_schema::ids::BatchId;
    use cowork_schema::scenario::Scenario;
    use cowork_schema::session::Session;
    use serde_json::{Value, json};

    use super::*;
    use crate::plan::{Plan, PlanInput};
    use crate::prepared::{PreparedScenario, PreparedSession};

    const SESSION: &str = "model: m0\nplugins:\n  local_plugins:\n    - ../skills/v1/k\n";

    pub(crate) fn scenario(rel: &str) -> PreparedScenario {
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

    pub(crate) fn batch(rels: &[&str]) -> PreparedBatch {
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

    pub(crate) fn arms(a: &str, b: &str) -> Vec<PreparedArm> {
        [("A", a), ("B", b)]
            .map(|(name, rel)| PreparedArm {
                name: name.to_owned(),
                declared: rel.to_owned(),
                rel_path: Some(rel.to_owned()),
            })
            .to_vec()
    }

    pub(crate) fn flags(runs: u32) -> BatchFlags {
        BatchFlags {
            repeat: Some(runs),
            ..BatchFlags::default()
        }
    }

    pub(crate) fn eval_plan(rels: &[&str], runs: u32, model: Option<&str>) -> Plan {
        plan_of_arms(&arms("skills/v1/k", "skills/v2/k"), rels, runs, model)
    }

    /// The eval plan of `rels` with `arms`.
    pub(crate) fn plan_of_arms(
        arms: &[PreparedArm],
        rels: &[&str],
        runs: u32,
        model: Option<&str>,
    ) -> Plan {
        let flags = flags(runs);
        let layout = plan_eval_units(
            &batch(rels),
            &EvalLayoutInput {
                arms,
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
            .zip([("../skills/v1/k", 0), ("../skills/v2/k", 1)])
        {
            assert_eq!(
                unit.arm,
                Some(UnitArm {
                    index: arm,
                    ablated: false
                })
            );
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

    pub(crate) fn run_result(pass: bool, cost: f64) -> Value {
        json!({
            "verdict": { "pass": pass, "signals": [] },
            "cost": { "usd": cost },
        })
    }

    #[test]
    fn eval_flags_are_validated_together() {
        let raw = |runs: &str, alpha: &str| RawEvalFlags {
            runs: runs.to_owned(),
            alpha: alpha.to_owned(),
            job_timeout: None,
            stall_after: None,
            on_stall: None,
            ..RawEvalFlags::default()
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

    #[test]
    fn mde_and_expect_pass_rate_are_validated_with_the_other_flags() {
        let raw = |mde: Option<&str>, rate: Option<&str>| RawEvalFlags {
            runs: "10".to_owned(),
            alpha: "0.05".to_owned(),
            mde: mde.map(str::to_owned),
            expect_pass_rate: rate.map(str::to_owned),
            ..RawEvalFlags::default()
        };
        let flags = validate_eval_flags(&raw(Some("15"), Some("0.9"))).expect("valid");
        assert_eq!((flags.mde, flags.expect_pass_rate), (Some(0.15), Some(0.9)));
        let flags = validate_eval_flags(&raw(None, None)).expect("valid");
        assert_eq!((flags.mde, flags.expect_pass_rate), (None, None));
        for (mde, rate, expected) in [
            (Some("0"), None, vec!["--mde"]),
            (Some("101"), None, vec!["--mde"]),
            (Some("0.15x"), None, vec!["--mde"]),
            (None, Some("1.5"), vec!["--expect-pass-rate"]),
            (
                Some("-3"),
                Some("-0.1"),
                vec!["--mde", "--expect-pass-rate"],
            ),
        ] {
            let errors = validate_eval_flags(&raw(mde, rate)).expect_err("refused");
            let flags: Vec<&str> = errors.iter().map(|error| error.flag).collect();
            assert_eq!(flags, expected, "--mde {mde:?} --expect-pass-rate {rate:?}");
        }
    }
}
