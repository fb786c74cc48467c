//! Batch intake: the one path from what a person gives — a target, a matrix file, eval arms
//! and flags — to a validated plan, its spec and its content-addressed bundle. Every way a
//! batch comes in goes through here:
//! - [`batch`]: `cowork run`, `cowork submit` and the benchmarks, on the machine that has the
//!   files;
//! - [`eval`]: `cowork eval`'s two arms;
//! - [`submitted::plan_from_bundle`]: the coordinator's own check of a submitted spec and
//!   bundle (it trusts nothing the client checked).
//!
//! [`files`] reads and validates the input files for all three; the flags are checked by the
//! core (`cowork_core::plan::flags`), which holds the one set of flag rules for the command
//! line's strings and for a submitted spec's values. Every problem is collected and returned
//! at once, so one run of a command lists everything to fix; nothing is written here.
//!
//! This is blocking code (reading files, hashing, packing): async callers run it in
//! `spawn_blocking`.

mod arms;
pub mod files;
pub mod quarantine;
pub mod submitted;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use cowork_core::eval::{DEFAULT_RESAMPLES, NamedArm};
use cowork_core::plan::eval::{
    EvalFlags, EvalLayoutInput, RawEvalFlags, plan_eval_units, validate_eval_flags,
};
use cowork_core::plan::flags::{RawFlags, validate_flags};
use cowork_core::plan::{Plan, PlanInput, plan_units};
use cowork_fabric::bundle::{BundleError, PackedBundle, pack};
use cowork_schema::BatchId;
use cowork_schema::batch::{
    BATCH_SPEC_VERSION, BatchMode, BatchSpec, EvalSpec, ExecutorKind, SimSpec,
};

pub use files::ArmInput;
use files::{PrepareEvalInput, PrepareInput, PreparedBatch, PreparedEval, prepare, prepare_eval};

/// Why a batch could not be taken in.
#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    /// Bad input: every problem found, each naming its flag, or its file, line and key.
    #[error("{}", .0.join("; "))]
    Invalid(Vec<String>),
    /// The inputs are valid but could not be packed into a bundle (a file vanished or cannot
    /// be read while packing).
    #[error("packing the bundle")]
    Pack(#[source] BundleError),
}

/// A batch taken in: planned, described by its spec and packed, not yet stored or dispatched.
#[derive(Debug)]
pub struct Intake {
    pub plan: Plan,
    pub spec: BatchSpec,
    pub bundle: PackedBundle,
}

/// A `run`, `record` or `replay` batch as given on the command line.
#[derive(Clone, Debug)]
pub struct BatchRequest {
    /// The scenario file or directory (the cassettes for a replay), as typed.
    pub target: PathBuf,
    /// The batch flags as typed.
    pub flags: RawFlags,
    /// `--matrix`, as typed.
    pub matrix: Option<PathBuf>,
    /// `--bundle-root`; `None` for the default ([`default_bundle_root`]).
    pub bundle_root: Option<PathBuf>,
    /// The directory relative paths are read from.
    pub cwd: PathBuf,
    pub mode: BatchMode,
    pub executor: ExecutorKind,
    /// The sim executor's seed and profile; `None` for other executors.
    pub sim: Option<SimSpec>,
    /// The id the batch will have.
    pub batch_id: BatchId,
    /// The quarantine file the verdict honours, as read by the caller.
    pub quarantine: Option<quarantine::QuarantineText>,
}

/// Validates the whole batch, plans it and packs its bundle. Notes for the person (subfolders
/// a directory target does not run, `--sim-profile` rules that select nothing) are pushed onto
/// `notes` as they are found, also when the batch is then refused.
pub fn batch(request: &BatchRequest, notes: &mut Vec<String>) -> Result<Intake, IntakeError> {
    // Flags and files are checked together so that one run of the command lists every problem.
    let flags = validate_flags(&request.flags);
    let quarantine = request
        .quarantine
        .as_ref()
        .map(quarantine::quarantine_spec)
        .transpose();
    let input = PrepareInput {
        target: request.target.clone(),
        matrix: request.matrix.clone(),
        bundle_root: request
            .bundle_root
            .clone()
            .unwrap_or_else(|| default_bundle_root(&request.target, &request.cwd)),
        mode: request.mode,
        executor: request.executor,
    };
    let prepared = prepare(&input);
    let (flags, prepared): (_, PreparedBatch) = match (flags, prepared, quarantine) {
        (Ok(flags), Ok(prepared), Ok(quarantine)) => (
            cowork_schema::batch::BatchFlags {
                quarantine,
                ..flags
            },
            prepared,
        ),
        (flags, prepared, quarantine) => {
            let mut problems: Vec<String> = Vec::new();
            if let Err(errors) = flags {
                problems.extend(errors.iter().map(ToString::to_string));
            }
            if let Err(errors) = prepared {
                problems.extend(errors.iter().map(ToString::to_string));
            }
            if let Err(errors) = quarantine {
                problems.extend(errors);
            }
            return Err(IntakeError::Invalid(problems));
        }
    };
    if request.mode != BatchMode::Replay {
        notes.extend(unlisted_subfolders(
            &request.target,
            &prepared.target,
            &prepared.files,
        ));
    }
    let layout = plan_units(&prepared, &flags, request.mode)
        .map_err(|errors| IntakeError::Invalid(errors.iter().map(ToString::to_string).collect()))?;
    let derived: Vec<(String, Vec<u8>)> = layout
        .derived_files
        .iter()
        .map(|file| (file.path.clone(), file.contents.clone()))
        .collect();
    let bundle = pack(&prepared.root, &prepared.files, &derived).map_err(IntakeError::Pack)?;
    let scenario_files = prepared
        .scenarios
        .iter()
        .map(|scenario| scenario.rel_path.clone())
        .collect();
    let matrix_file = prepared
        .matrix
        .as_ref()
        .map(|matrix| matrix.rel_path.clone());
    let plan = Plan::new(
        layout,
        PlanInput {
            batch_id: request.batch_id.clone(),
            flags: flags.clone(),
            mode: request.mode,
            executor: request.executor,
            sim: request.sim.clone(),
            bundle_sha256: bundle.sha256.clone(),
        },
    );
    let spec = BatchSpec {
        schema_version: BATCH_SPEC_VERSION,
        mode: request.mode,
        target_display: request.target.display().to_string(),
        target: prepared.target,
        scenario_files,
        matrix_file,
        flags,
        executor: request.executor,
        sim: request.sim.clone(),
        bundle_sha256: bundle.sha256.clone(),
        eval: None,
        notify: Vec::new(),
    };
    notes.extend(unmatched_sim_rules(&plan));
    notes.extend(quarantine::quarantine_notes(&plan));
    Ok(Intake { plan, spec, bundle })
}

/// An eval batch as given on the command line: scenarios, its arms, and its settings.
#[derive(Clone, Debug)]
pub struct EvalRequest {
    /// The scenario files or directories, as typed.
    pub targets: Vec<PathBuf>,
    /// Every arm in arm order: `--a` and `--b` (either may be the no-skill arm), or each
    /// `--arm NAME=DIR`.
    pub arms: Vec<ArmInput>,
    /// `--control NAME`: the arm every other is compared with; `None` for the first.
    pub control: Option<String>,
    /// `--bundle-root`; `None` for the default (from the first target).
    pub bundle_root: Option<PathBuf>,
    /// The directory relative paths are read from.
    pub cwd: PathBuf,
    /// `--runs`, `--alpha` and `--job-timeout`, as typed.
    pub flags: RawEvalFlags,
    /// `--model`, as typed.
    pub model: Option<String>,
    /// The executor and the sim spec, or the problems with `--executor` and `--sim-profile`.
    pub executor: Result<(ExecutorKind, Option<SimSpec>), Vec<String>>,
    /// Problems the caller found with the harness the batch needs, listed in their place.
    pub harness_problems: Vec<String>,
    /// `--seed`, stored in the eval settings.
    pub seed: u64,
    /// The id the batch will have.
    pub batch_id: BatchId,
    /// The quarantine file the arms' verdict honours, as read by the caller.
    pub quarantine: Option<quarantine::QuarantineText>,
}

/// An eval batch taken in.
#[derive(Debug)]
pub struct EvalIntake {
    pub plan: Plan,
    pub spec: BatchSpec,
    pub bundle: PackedBundle,
    /// The eval settings, as stored in `spec.eval`.
    pub settings: EvalSpec,
    /// The arms as typed, in arm order: the labels of a report made on this machine.
    pub arms: Vec<NamedArm>,
}

/// Validates the whole eval batch, plans both arms and packs the bundle. A warning that both
/// arms are one directory is pushed onto `notes`.
pub fn eval(request: &EvalRequest, notes: &mut Vec<String>) -> Result<EvalIntake, IntakeError> {
    let quarantine = request
        .quarantine
        .as_ref()
        .map(quarantine::quarantine_spec)
        .transpose()
        .map_err(IntakeError::Invalid)?;
    let CheckedEval {
        mut flags,
        executor,
        sim,
        prepared,
    } = check_eval(request, notes)?;
    flags.batch.quarantine = quarantine;
    let layout = plan_eval_units(
        &prepared.batch,
        &EvalLayoutInput {
            arms: &prepared.arms,
            model: request.model.as_deref(),
            flags: &flags.batch,
        },
    )
    .map_err(|errors| IntakeError::Invalid(errors.iter().map(ToString::to_string).collect()))?;
    let derived = layout.derived_for_bundle();
    let bundle =
        pack(&prepared.batch.root, &prepared.batch.files, &derived).map_err(IntakeError::Pack)?;
    let settings = eval_settings(request, &prepared, &flags);
    let plan = Plan::new(
        layout,
        PlanInput {
            batch_id: request.batch_id.clone(),
            flags: flags.batch.clone(),
            mode: BatchMode::Eval,
            executor,
            sim: sim.clone(),
            bundle_sha256: bundle.sha256.clone(),
        },
    )
    .with_eval_settings(Some(&settings));
    notes.extend(unmatched_sim_rules(&plan));
    notes.extend(quarantine::quarantine_notes(&plan));
    let spec = BatchSpec {
        schema_version: BATCH_SPEC_VERSION,
        mode: BatchMode::Eval,
        target_display: request
            .targets
            .iter()
            .map(|target| target.display().to_string())
            .collect::<Vec<_>>()
            .join(" "),
        target: prepared.batch.target.clone(),
        scenario_files: prepared
            .batch
            .scenarios
            .iter()
            .map(|scenario| scenario.rel_path.clone())
            .collect(),
        matrix_file: None,
        flags: flags.batch,
        executor,
        sim,
        bundle_sha256: bundle.sha256.clone(),
        eval: Some(settings.clone()),
        notify: Vec::new(),
    };
    Ok(EvalIntake {
        plan,
        spec,
        bundle,
        settings,
        arms: prepared
            .arms
            .iter()
            .map(|arm| NamedArm {
                name: arm.name.clone(),
                source: arm.declared.clone(),
            })
            .collect(),
    })
}

/// What the coordinator re-plans the arms from and computes the report with; the same
/// settings drive a report made on this machine, so both ways give the same statistics.
fn eval_settings(request: &EvalRequest, prepared: &PreparedEval, flags: &EvalFlags) -> EvalSpec {
    let named = request.arms.iter().any(|arm| arm.flag == "--arm");
    EvalSpec {
        arms: prepared
            .arms
            .iter()
            .map(|arm| arm.rel_path.clone())
            .collect(),
        arm_names: if named {
            prepared.arms.iter().map(|arm| arm.name.clone()).collect()
        } else {
            Vec::new()
        },
        control: u32::try_from(prepared.control).unwrap_or(0),
        model: request.model.clone(),
        alpha: flags.alpha,
        seed: request.seed,
        resamples: DEFAULT_RESAMPLES,
        sequential: flags.sequential,
        mde: flags.mde,
    }
}

/// An eval request whose flags, executor, model and inputs all passed their checks.
struct CheckedEval {
    flags: EvalFlags,
    executor: ExecutorKind,
    sim: Option<SimSpec>,
    prepared: PreparedEval,
}

/// Checks an eval request's flags, executor, harness and model, and prepares its scenarios
/// and arms; every problem found is returned at once.
fn check_eval(request: &EvalRequest, notes: &mut Vec<String>) -> Result<CheckedEval, IntakeError> {
    let mut problems: Vec<String> = Vec::new();
    let flags = match validate_eval_flags(&request.flags) {
        Ok(flags) => Some(flags),
        Err(errors) => {
            problems.extend(errors.iter().map(ToString::to_string));
            None
        }
    };
    let executor = match &request.executor {
        Ok(executor) => Some(executor.clone()),
        Err(errors) => {
            problems.extend(errors.iter().cloned());
            None
        }
    };
    problems.extend(request.harness_problems.iter().cloned());
    let control = match arms::check_arms(&request.arms, request.control.as_deref()) {
        Ok(control) => control,
        Err(arm_problems) => {
            problems.extend(arm_problems);
            0
        }
    };
    notes.extend(arms::same_arm_warnings(&request.arms));
    if request.flags.sequential && (request.arms.len() != 2 || control != 0) {
        problems.push(
            "--sequential: the sequential design compares two arms: give --a and --b, or two \
             --arm with the control first"
                .to_owned(),
        );
    }
    if let Some(model) = &request.model
        && (model.trim().is_empty() || model.starts_with('-'))
    {
        problems.push(format!("--model: needs a model id, got {model:?}"));
    }
    let Some(first_target) = request.targets.first() else {
        return Err(IntakeError::Invalid(vec![
            "at least one scenario file or directory is required".to_owned(),
        ]));
    };
    let input = PrepareEvalInput {
        targets: request.targets.clone(),
        arms: request.arms.clone(),
        control,
        bundle_root: request
            .bundle_root
            .clone()
            .unwrap_or_else(|| default_bundle_root(first_target, &request.cwd)),
    };
    let prepared = match prepare_eval(&input) {
        Ok(prepared) => Some(prepared),
        Err(errors) => {
            problems.extend(errors.iter().map(ToString::to_string));
            None
        }
    };
    let (Some(flags), Some((executor, sim)), Some(prepared), true) =
        (flags, executor, prepared, problems.is_empty())
    else {
        return Err(IntakeError::Invalid(problems));
    };
    Ok(CheckedEval {
        flags,
        executor,
        sim,
        prepared,
    })
}

/// The default bundle root: the git work tree holding `target`, else `cwd`. A batch ships the
/// files it needs relative to this root, so a scenario can reach sessions and skills anywhere
/// in its repository.
pub fn default_bundle_root(target: &Path, cwd: &Path) -> PathBuf {
    let absolute = if target.is_absolute() {
        target.to_path_buf()
    } else {
        cwd.join(target)
    };
    let mut dir = absolute.parent();
    while let Some(candidate) = dir {
        if candidate.join(".git").exists() {
            return candidate.to_path_buf();
        }
        dir = candidate.parent();
    }
    cwd.to_path_buf()
}

/// A warning for each `--sim-profile` rule that selects no job of the plan: it changes
/// nothing, which is almost always a misspelt scenario name, model or skill dir.
fn unmatched_sim_rules(plan: &Plan) -> Vec<String> {
    let Some(sim) = plan.sim.as_ref().filter(|sim| !sim.rules.is_empty()) else {
        return Vec::new();
    };
    let first_index = plan.repeat.map(|_| 0);
    let jobs: Vec<_> = plan
        .units
        .iter()
        .filter(|unit| unit.cell_error.is_none())
        .map(|unit| plan.job(unit, first_index))
        .collect();
    cowork_core::sim_rules::rules_matching_nothing(&sim.rules, &jobs)
        .into_iter()
        .map(|position| {
            let rule = &sim.rules[position];
            let selectors: Vec<String> = [
                ("scenario", &rule.scenario),
                ("baseline", &rule.baseline),
                ("model", &rule.model),
                ("skill_dir", &rule.skill_dir),
                ("arm", &rule.arm),
            ]
            .into_iter()
            .filter_map(|(key, value)| value.as_ref().map(|value| format!("{key}: {value}")))
            .collect();
            format!(
                "warning: --sim-profile: rule {} ({}) matches no job of this batch, so it \
                 changes nothing; check its selectors against the scenario names and matrix axes",
                position + 1,
                selectors.join(", ")
            )
        })
        .collect()
}

/// Directory entries looked at below a directory target, at most, for the note about its
/// subfolders: a note is not worth a walk of a huge tree.
const SUBFOLDER_SCAN_LIMIT: usize = 10_000;

/// A note for each subfolder of a directory target that holds YAML files the batch does not
/// use. A directory target runs only the files directly inside it, as the harness CLI does;
/// scenarios kept in subfolders would otherwise be skipped without a word. Files the batch
/// ships (a session kept in a subfolder, say) are not counted.
fn unlisted_subfolders(target: &Path, target_rel: &str, shipped: &BTreeSet<String>) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(target) else {
        return Vec::new();
    };
    let mut budget = SUBFOLDER_SCAN_LIMIT;
    let mut subfolders: Vec<(String, usize)> = Vec::new();
    for entry in entries.flatten() {
        if !entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            continue;
        }
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let mut found = Vec::new();
        yaml_files_below(&entry.path(), &name, &mut found, &mut budget);
        let unused = found
            .iter()
            .filter(|rel| !shipped.contains(&join_bundle_rel(target_rel, rel)))
            .count();
        if unused > 0 {
            subfolders.push((name, unused));
        }
    }
    subfolders.sort();
    subfolders
        .into_iter()
        .map(|(name, unused)| {
            let files = if unused == 1 {
                "1 YAML file".to_owned()
            } else {
                format!("{unused} YAML files")
            };
            format!(
                "note: {}: subfolder {name}/ holds {files} that this batch does not run (a \
                 directory target runs only the files directly in it, like the harness CLI); \
                 give {} as its own target to run them",
                target.display(),
                target.join(&name).display()
            )
        })
        .collect()
}

/// `<target rel>/<rel>`, or `rel` alone when the target is the bundle root.
fn join_bundle_rel(target_rel: &str, rel: &str) -> String {
    if target_rel.is_empty() {
        rel.to_owned()
    } else {
        format!("{target_rel}/{rel}")
    }
}

/// Collects the `*.yaml` / `*.yml` files below `dir` as `/`-separated paths starting with
/// `prefix`, spending at most `budget` directory entries.
fn yaml_files_below(dir: &Path, prefix: &str, found: &mut Vec<String>, budget: &mut usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let rel = format!("{prefix}/{name}");
        match entry.file_type() {
            Ok(kind) if kind.is_dir() && !name.starts_with('.') => {
                yaml_files_below(&entry.path(), &rel, found, budget);
            }
            Ok(kind) if kind.is_file() && (name.ends_with(".yaml") || name.ends_with(".yml")) => {
                found.push(rel);
            }
            _ => {}
        }
    }
}
