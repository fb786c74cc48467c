//! A submitted batch, prepared on the server: the coordinator's own validation of a spec and
//! its bundle before anything is stored or admitted.
//!
//! The client validated the same batch on its machine, but a server trusts nothing it receives:
//! [`plan_from_bundle`] checks the bundle's digest and the spec's flags, unpacks the bundle with
//! the hostile-archive rules of `fabric::bundle`, re-runs `prepare` and the planner on the
//! unpacked tree, and checks that the planner's derived files are already in the bundle with the
//! same bytes. The plan it returns is the one the coordinator supervises; a restarted coordinator
//! calls it again on the stored spec and bundle and gets the same plan.
//!
//! An eval batch (`spec.eval`, decisions.md#eval-design) is checked exactly as `cowork eval` checks
//! it: the scenarios and both arm directories with `prepare_eval`, the layout with
//! `plan_eval_units`.
//!
//! This is blocking code (hashing, unpacking, reading YAML): async callers run it in
//! `spawn_blocking`, off the async runtime.

use std::path::{Path, PathBuf};

use cowork_fabric::bundle::{UnpackLimits, check_entry_path, unpack_reader};
use cowork_fabric::sha256_hex;
use cowork_schema::BatchId;
use cowork_schema::batch::{
    BATCH_SPEC_VERSION, BatchFlags, BatchMode, BatchSpec, EvalSpec, ExecutorKind,
};

use super::files::{
    ArmInput, InputError, PrepareEvalInput, PrepareInput, PreparedArm, PreparedBatch, prepare,
    prepare_eval,
};
use cowork_core::plan::eval::{EvalLayoutInput, MAX_ARMS, plan_eval_units, valid_arm_name};
use cowork_core::plan::flags::check_spec_flags;
use cowork_core::plan::{Plan, PlanInput, PlanLayout, plan_units};

/// Most resamples an eval spec may name. The field belonged to the bootstrap interval, which the
/// exact interval replaced; it is still accepted (older clients send it) and still bounded.
const MAX_EVAL_RESAMPLES: u32 = 1_000_000;

/// Validates a submitted batch and plans it under `batch_id`.
///
/// The bundle is unpacked into `scratch/<batch_id>`, which is removed again before this returns,
/// on success and on error. Every problem found is returned, each naming the spec field, the
/// bundle entry or the file (bundle-relative) it concerns.
pub fn plan_from_bundle(
    spec: &BatchSpec,
    bundle: &[u8],
    batch_id: BatchId,
    scratch: &Path,
    limits: &UnpackLimits,
) -> Result<Plan, Vec<String>> {
    plan_from_bundle_reader(spec, bundle, &sha256_hex(bundle), batch_id, scratch, limits)
}

/// [`plan_from_bundle`] of a bundle read from `bundle` (a submitted bundle streamed to a file,
/// never held in memory whole), whose sha256 the caller computed while it was received.
pub fn plan_from_bundle_reader(
    spec: &BatchSpec,
    bundle: impl std::io::Read,
    digest: &str,
    batch_id: BatchId,
    scratch: &Path,
    limits: &UnpackLimits,
) -> Result<Plan, Vec<String>> {
    let mut problems = check_spec(spec);
    let flags_ok = problems.is_empty();
    if digest != spec.bundle_sha256 {
        problems.push(format!(
            "bundle: sha256 is {digest}, but spec.bundleSha256 says {}",
            spec.bundle_sha256
        ));
    }
    // Paths from the spec are joined onto the unpack directory, so they are checked first.
    let paths_ok = check_spec_paths(spec, &mut problems);
    if (spec.mode == BatchMode::Eval) != spec.eval.is_some() {
        // Which inputs to prepare depends on the mode, so a spec that contradicts itself there
        // cannot be checked against its bundle; the contradiction is already listed.
        return Err(problems);
    }

    let dest = scratch.join(batch_id.as_str());
    let _cleanup = RemoveOnDrop(dest.clone());
    if let Err(error) = fresh_dir(scratch, &dest) {
        problems.push(error);
        return Err(problems);
    }
    if let Err(error) = unpack_reader(bundle, &dest, limits) {
        problems.push(format!("bundle: {error}"));
        return Err(problems);
    }
    if !paths_ok {
        return Err(problems);
    }

    let prepared = match &spec.eval {
        None => prepare_files(spec, &dest),
        Some(settings) => prepare_eval_arms(spec, settings, &dest),
    };
    let (prepared, eval_arms) = match prepared {
        Ok(prepared) => prepared,
        Err(errors) => {
            problems.extend(errors);
            return Err(problems);
        }
    };
    check_scenario_files(spec, &prepared, &mut problems);
    if !flags_ok {
        // The planner needs valid flags; the flag problems are already listed.
        return Err(problems);
    }
    let layout = match plan_layout(spec, &prepared, eval_arms.as_deref()) {
        Ok(layout) => layout,
        Err(errors) => {
            problems.extend(errors);
            return Err(problems);
        }
    };
    check_derived_files(spec, &layout, &dest, &mut problems);
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Plan::new(
        layout,
        PlanInput {
            batch_id,
            flags: spec.flags.clone(),
            mode: spec.mode,
            executor: spec.executor,
            sim: spec.sim.clone(),
            bundle_sha256: spec.bundle_sha256.clone(),
        },
    )
    .with_eval_settings(spec.eval.as_ref()))
}

/// Checks that the bundle's target holds the scenario files the spec names, in its order.
fn check_scenario_files(spec: &BatchSpec, prepared: &PreparedBatch, problems: &mut Vec<String>) {
    let scenario_files: Vec<String> = prepared
        .scenarios
        .iter()
        .map(|scenario| scenario.rel_path.clone())
        .collect();
    if scenario_files != spec.scenario_files {
        problems.push(format!(
            "bundle does not match its spec: spec.scenarioFiles is {:?}, the bundle's target holds {scenario_files:?}",
            spec.scenario_files
        ));
    }
}

/// The planner's layout of a prepared batch: an eval's arms, or a run's units.
fn plan_layout(
    spec: &BatchSpec,
    prepared: &PreparedBatch,
    eval_arms: Option<&[PreparedArm]>,
) -> Result<PlanLayout, Vec<String>> {
    match (eval_arms, &spec.eval) {
        (Some(arms), Some(settings)) => plan_eval_units(
            prepared,
            &EvalLayoutInput {
                arms,
                model: settings.model.as_deref(),
                flags: &spec.flags,
            },
        )
        .map_err(|errors| errors.iter().map(ToString::to_string).collect::<Vec<_>>()),
        _ => plan_units(prepared, &spec.flags, spec.mode)
            .map_err(|errors| errors.iter().map(ToString::to_string).collect::<Vec<_>>()),
    }
}

/// Checks that every file the planner derives is already in the unpacked bundle at `dest`,
/// with the same bytes.
fn check_derived_files(
    spec: &BatchSpec,
    layout: &PlanLayout,
    dest: &Path,
    problems: &mut Vec<String>,
) {
    // An eval's derived sessions are written from its arms and model, so a mismatch there is
    // most likely a spec.eval that differs from the one the bundle was made with.
    let derived_from = if spec.eval.is_some() {
        " (it is derived from spec.eval.arms and spec.eval.model)"
    } else {
        ""
    };
    for derived in &layout.derived_files {
        match std::fs::read(dest.join(&derived.path)) {
            Ok(bytes) if bytes == derived.contents => {}
            Ok(_) => problems.push(format!(
                "bundle does not match its spec: derived file {} differs from what the planner writes{derived_from}",
                derived.path
            )),
            Err(_) => problems.push(format!(
                "bundle does not match its spec: derived file {} is missing",
                derived.path
            )),
        }
    }
}

/// A prepared batch, and for an eval its arms.
type Prepared = (PreparedBatch, Option<Vec<PreparedArm>>);

/// Prepares a run, record or replay batch from the unpacked bundle: the target and matrix of
/// the spec, as `cowork run` prepared them.
fn prepare_files(spec: &BatchSpec, dest: &Path) -> Result<Prepared, Vec<String>> {
    let input = PrepareInput {
        target: if spec.target == "." {
            dest.to_path_buf()
        } else {
            dest.join(&spec.target)
        },
        matrix: spec.matrix_file.as_ref().map(|matrix| dest.join(matrix)),
        bundle_root: dest.to_path_buf(),
        mode: spec.mode,
        executor: spec.executor,
    };
    match prepare(&input) {
        Ok(prepared) => Ok((prepared, None)),
        Err(errors) => Err(errors
            .into_iter()
            .map(|error| relative_error(error, dest))
            .collect()),
    }
}

/// Prepares an eval batch from the unpacked bundle as `cowork eval` prepared it: each of
/// `spec.scenarioFiles` (in order) and both arm directories of `spec.eval.arms`. Problems with
/// an arm name its spec field; the arms keep their bundle-relative paths as labels.
fn prepare_eval_arms(
    spec: &BatchSpec,
    settings: &EvalSpec,
    dest: &Path,
) -> Result<Prepared, Vec<String>> {
    let input = PrepareEvalInput {
        targets: spec
            .scenario_files
            .iter()
            .map(|file| dest.join(file))
            .collect(),
        arms: (0..settings.arms.len())
            .map(|index| ArmInput {
                name: cowork_core::plan::eval::spec_arm_name(settings, index),
                flag: format!("spec.eval.arms[{index}]"),
                dir: settings.arms[index].as_ref().map(|dir| dest.join(dir)),
            })
            .collect(),
        control: settings.control as usize,
        bundle_root: dest.to_path_buf(),
    };
    match prepare_eval(&input) {
        Ok(prepared) => {
            let mut arms = prepared.arms;
            for (arm, declared) in arms.iter_mut().zip(&settings.arms) {
                // `declared` is the scratch path here; messages and labels use the spec's.
                if let Some(declared) = declared {
                    arm.declared = declared.clone();
                }
            }
            Ok((prepared.batch, Some(arms)))
        }
        Err(errors) => Err(errors
            .into_iter()
            .map(|error| relative_error(error, dest))
            .collect()),
    }
}

/// Checks the spec's version, executor settings and flags (the ranges of
/// harness-behaviour.md#repeat-flags and harness-behaviour.md#matrix-flags with the fleet's bounds,
/// and the "needs --repeat" / "needs --matrix" rules).
fn check_spec(spec: &BatchSpec) -> Vec<String> {
    let mut problems = Vec::new();
    if spec.schema_version != BATCH_SPEC_VERSION {
        problems.push(format!(
            "spec.schemaVersion: must be {BATCH_SPEC_VERSION}, got {}",
            spec.schema_version
        ));
    }
    if spec.sim.is_some() && spec.executor != ExecutorKind::Sim {
        problems.push(format!(
            "spec.sim: only the sim executor takes simulation settings, the executor is {}",
            spec.executor.as_str()
        ));
    }
    // Shown as typed in every listing, so held to the same rule as scenario names.
    problems.extend(cowork_core::safe_text::unsafe_text_problem(
        "spec.targetDisplay",
        &spec.target_display,
    ));
    problems.extend(check_spec_flags(&spec.flags, spec.matrix_file.is_some()));
    if let Some(quarantine) = &spec.flags.quarantine {
        problems.extend(super::quarantine::check_submitted(quarantine));
    }
    problems.extend(
        spec.notify
            .iter()
            .filter_map(|url| crate::notify::check_hook_url(url).err())
            .map(|problem| format!("spec.notify: {problem}")),
    );
    match (&spec.eval, spec.mode) {
        (Some(settings), BatchMode::Eval) => check_eval(spec, settings, &mut problems),
        (None, BatchMode::Eval) => {
            problems.push("spec.eval: an eval batch (mode eval) needs its eval settings".to_owned())
        }
        (Some(_), mode) => problems.push(format!(
            "spec.eval: only an eval batch takes eval settings, the mode is {}",
            serde_json::to_value(mode)
                .ok()
                .and_then(|value| value.as_str().map(str::to_owned))
                .unwrap_or_default()
        )),
        (None, _) => {}
    }
    problems
}

/// Checks an eval's arms: 2 to 8 of them, names for each or none, a control among them.
fn check_eval_arms(settings: &EvalSpec, problems: &mut Vec<String>) {
    let n_arms = settings.arms.len();
    if !(2..=MAX_ARMS).contains(&n_arms) {
        problems.push(format!(
            "spec.eval.arms: an eval compares 2 to {MAX_ARMS} arms, got {n_arms}"
        ));
    }
    if !settings.arm_names.is_empty() {
        if settings.arm_names.len() != n_arms {
            problems.push(format!(
                "spec.eval.armNames: {} names for {n_arms} arms",
                settings.arm_names.len()
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for name in &settings.arm_names {
            if !valid_arm_name(name) || !seen.insert(name) {
                problems.push(format!(
                    "spec.eval.armNames: {name:?} is not a valid, distinct arm name"
                ));
            }
        }
    }
    if settings.control as usize >= n_arms {
        problems.push(format!(
            "spec.eval.control: arm {} does not exist ({n_arms} arms)",
            settings.control
        ));
    }
}

/// Checks an eval's settings and the flags it allows: what `cowork eval` validates (`--runs`,
/// `--alpha`, `--model`, `--job-timeout`; no matrix and no other batch flag).
fn check_eval(spec: &BatchSpec, settings: &EvalSpec, problems: &mut Vec<String>) {
    if !(settings.alpha > 0.0 && settings.alpha < 1.0) {
        problems.push(format!(
            "spec.eval.alpha: must be a number strictly between 0 and 1, got {}",
            settings.alpha
        ));
    }
    if !(1..=MAX_EVAL_RESAMPLES).contains(&settings.resamples) {
        problems.push(format!(
            "spec.eval.resamples: must be an integer from 1 to {MAX_EVAL_RESAMPLES}, got {}",
            settings.resamples
        ));
    }
    if let Some(mde) = settings.mde
        && !(mde > 0.0 && mde <= 1.0)
    {
        problems.push(format!(
            "spec.eval.mde: must be a number above 0 and at most 1, got {mde}"
        ));
    }
    if let Some(model) = &settings.model
        && (model.trim().is_empty() || model.starts_with('-'))
    {
        problems.push(format!("spec.eval.model: needs a model id, got {model:?}"));
    }
    check_eval_arms(settings, problems);
    if let Some(sequential) = &settings.sequential {
        if settings.arms.len() != 2 || settings.control != 0 {
            problems.push(
                "spec.eval.sequential: the sequential design compares two arms, the control \
                 first"
                    .to_owned(),
            );
        }
        let max = cowork_core::eval::sequential::LOOKS_MAX;
        if !(1..=max).contains(&sequential.looks) {
            problems.push(format!(
                "spec.eval.sequential.looks: must be an integer from 1 to {max}, got {}",
                sequential.looks
            ));
        }
        if let Some(mde) = sequential.mde
            && !(mde > 0.0 && mde <= 1.0)
        {
            problems.push(format!(
                "spec.eval.sequential.mde: must be a fraction above 0 and at most 1, got {mde}"
            ));
        }
    }
    if spec.matrix_file.is_some() {
        problems.push("spec.matrixFile: an eval takes no matrix".to_owned());
    }
    if spec.flags.repeat.is_none() {
        problems.push("spec.flags.repeat: an eval needs the runs per arm (at least 2)".to_owned());
    }
    // Every pair must be complete unless a run errors or the batch budget stops the eval, so an
    // eval has no early stop and no pass-rate threshold: only the runs, the job timeout and the
    // batch budget with its prices are settable.
    let allowed = BatchFlags {
        repeat: spec.flags.repeat,
        job_timeout_ms: spec.flags.job_timeout_ms,
        quarantine: spec.flags.quarantine.clone(),
        stall_after_ms: spec.flags.stall_after_ms,
        on_stall: spec.flags.on_stall,
        batch_budget_usd: spec.flags.batch_budget_usd,
        pricing: spec.flags.pricing.clone(),
        priority: spec.flags.priority,
        ..BatchFlags::default()
    };
    if spec.flags != allowed {
        problems.push(
            "spec.flags: an eval takes only repeat, jobTimeoutMs, quarantine, stallAfterMs, onStall and priority, and batchBudgetUsd with its pricing; every other flag must keep its default"
                .to_owned(),
        );
    }
}

/// Checks that every path of the spec is a plain bundle-relative path; `false` if one is not.
fn check_spec_paths(spec: &BatchSpec, problems: &mut Vec<String>) -> bool {
    let before = problems.len();
    if spec.target != "."
        && let Err(reason) = check_entry_path(&spec.target)
    {
        problems.push(format!("spec.target: {:?}: {reason}", spec.target));
    }
    if let Some(matrix) = &spec.matrix_file
        && let Err(reason) = check_entry_path(matrix)
    {
        problems.push(format!("spec.matrixFile: {matrix:?}: {reason}"));
    }
    for (file_idx, file) in spec.scenario_files.iter().enumerate() {
        if let Err(reason) = check_entry_path(file) {
            problems.push(format!(
                "spec.scenarioFiles[{file_idx}]: {file:?}: {reason}"
            ));
        }
    }
    if let Some(settings) = &spec.eval {
        for (arm_idx, arm) in settings.arms.iter().enumerate() {
            // `null` is the no-skill arm: no directory to check.
            let Some(arm) = arm else { continue };
            if let Err(reason) = check_entry_path(arm) {
                problems.push(format!("spec.eval.arms[{arm_idx}]: {arm:?}: {reason}"));
            }
        }
    }
    problems.len() == before
}

/// Creates `scratch` and an empty `dest` inside it (removing a leftover from a crashed run).
fn fresh_dir(scratch: &Path, dest: &Path) -> Result<(), String> {
    std::fs::create_dir_all(scratch)
        .map_err(|e| format!("scratch directory {}: {e}", scratch.display()))?;
    match std::fs::remove_dir_all(dest) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("scratch directory {}: {e}", dest.display())),
    }
    Ok(())
}

/// An input error with the unpack directory stripped, so it names the bundle-relative file the
/// client knows (and not the server's scratch path).
fn relative_error(mut error: InputError, dest: &Path) -> String {
    if let Ok(rel) = error.file.strip_prefix(dest) {
        error.file = if rel.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            rel.to_path_buf()
        };
    }
    // A hint naming the unpack directory (e.g. "every input must lie inside the bundle root
    // <dest>") speaks of the server's scratch space, which the client neither knows nor controls.
    let root = dest.display().to_string();
    if error
        .hint
        .as_deref()
        .is_some_and(|hint| hint.contains(&root))
    {
        error.hint = None;
    }
    let text = error.to_string();
    // Messages may name resolved paths too (a symlink's target, a missing upload), or the
    // unpack directory itself, which is the bundle's root: `.`.
    text.replace(&format!("{root}/"), "").replace(&root, ".")
}

/// Removes a directory tree when dropped, so every return path cleans the scratch space.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        match std::fs::remove_dir_all(&self.0) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %self.0.display(), error = %e, "scratch directory not removed");
            }
        }
    }
}

#[cfg(test)]
mod eval_tests;
#[cfg(test)]
mod tests;
