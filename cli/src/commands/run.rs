//! `cowork run`: the embedded mode — plan, bundle, then an in-process queue, event log, local
//! store and worker slots run the batch; the same supervisor and reducer as the fleet judge it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use cowork_coordinator::prepare::{PrepareInput, PreparedBatch, prepare};
use cowork_core::plan::flags::{RawFlags, validate_flags};
use cowork_core::plan::{Plan, PlanInput, plan_units};
use cowork_fabric::bundle::{PackedBundle, pack};
use cowork_fabric::embedded::DirArtifactStore;
use cowork_schema::batch::{
    BATCH_SPEC_VERSION, BatchMode, BatchSpec, ExecutorKind, SimProfile, SimSpec,
};

use crate::args::{BatchArgs, ExecutorArg, ExecutorArgs, ModeArgs, OutputFormat, RunArgs};
use crate::report::CliError;

/// What the user typed, as the planner's raw flags.
pub fn raw_flags(batch: &BatchArgs) -> RawFlags {
    RawFlags {
        repeat: batch.repeat.clone(),
        min_pass_rate: batch.min_pass_rate.clone(),
        stop_on_diverge: batch.stop_on_diverge,
        max_budget_usd: batch.max_budget_usd.clone(),
        batch_budget_usd: batch.batch_budget_usd.clone(),
        allow_budget_stop: batch.allow_budget_stop,
        matrix: batch.matrix.as_ref().map(|path| path.display().to_string()),
        max_cells: batch.max_cells.clone(),
        allow_truncated_matrix: batch.allow_truncated_matrix,
        concurrency: batch.concurrency.clone(),
        decider_dir: batch.decider_dir.clone(),
        decider_cmd: batch.decider_cmd.clone(),
        ablate_skill: batch.ablate_skill,
        on_unanswered: batch.on_unanswered.clone(),
        decider_model: batch.decider_model.clone(),
        label: batch.label.clone(),
        job_timeout: batch.job_timeout.clone(),
    }
}

/// The default bundle root: the git work tree holding `target`, else the current directory.
pub fn default_bundle_root(target: &Path) -> Result<PathBuf, CliError> {
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let absolute = if target.is_absolute() {
        target.to_path_buf()
    } else {
        cwd.join(target)
    };
    let mut dir = absolute.parent();
    while let Some(candidate) = dir {
        if candidate.join(".git").exists() {
            return Ok(candidate.to_path_buf());
        }
        dir = candidate.parent();
    }
    Ok(cwd)
}

/// A validated, planned and bundled batch, not yet dispatched.
pub struct PreparedRun {
    pub plan: Plan,
    pub spec: BatchSpec,
    pub bundle: PackedBundle,
}

/// Validates the whole batch and bundles it; nothing is written. Shared by `run` and `submit`.
pub async fn prepare_batch(
    target: &Path,
    batch: &BatchArgs,
    mode: BatchMode,
    executor: ExecutorKind,
    sim: Option<SimSpec>,
) -> Result<PreparedRun, CliError> {
    // Flags and files are checked together so that one run of the command lists every problem.
    let flags = validate_flags(&raw_flags(batch));
    let bundle_root = match &batch.bundle_root {
        Some(root) => root.clone(),
        None => default_bundle_root(target)?,
    };
    let input = PrepareInput {
        target: target.to_path_buf(),
        matrix: batch.matrix.clone(),
        bundle_root,
        mode,
    };
    let prepared = tokio::task::spawn_blocking(move || prepare(&input))
        .await
        .context("input validation task failed")?;
    let (flags, prepared): (_, PreparedBatch) = match (flags, prepared) {
        (Ok(flags), Ok(prepared)) => (flags, prepared),
        (flags, prepared) => {
            let mut problems: Vec<String> = Vec::new();
            if let Err(errors) = flags {
                problems.extend(errors.iter().map(ToString::to_string));
            }
            if let Err(errors) = prepared {
                problems.extend(errors.iter().map(ToString::to_string));
            }
            return Err(CliError::Usage(problems));
        }
    };
    let layout = plan_units(&prepared, &flags, mode)
        .map_err(|errors| CliError::Usage(errors.iter().map(ToString::to_string).collect()))?;
    let derived: Vec<(String, Vec<u8>)> = layout
        .derived_files
        .iter()
        .map(|file| (file.path.clone(), file.contents.clone()))
        .collect();
    let root = prepared.root.clone();
    let files = prepared.files.clone();
    let bundle = tokio::task::spawn_blocking(move || pack(&root, &files, &derived))
        .await
        .context("bundle task failed")?
        .context("packing the bundle")?;
    let batch_id = crate::embedded::new_batch_id();
    let prepared_target = prepared.target.clone();
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
            batch_id: batch_id.clone(),
            flags: flags.clone(),
            mode,
            executor,
            sim: sim.clone(),
            bundle_sha256: bundle.sha256.clone(),
        },
    );
    let spec = BatchSpec {
        schema_version: BATCH_SPEC_VERSION,
        mode,
        target_display: target.display().to_string(),
        target: prepared_target,
        scenario_files,
        matrix_file,
        flags,
        executor,
        sim,
        bundle_sha256: bundle.sha256.clone(),
        eval: None,
    };
    Ok(PreparedRun { plan, spec, bundle })
}

/// The batch's executor, and the sim executor's spec from `--seed` and `--sim-profile` (`None`
/// for other executors).
pub fn executor_and_sim(args: &ExecutorArgs) -> Result<(ExecutorKind, Option<SimSpec>), CliError> {
    if args.executor != ExecutorArg::Sim {
        if args.sim_profile.is_some() {
            return Err(CliError::usage("--sim-profile: needs --executor sim"));
        }
        return Ok((ExecutorKind::Harness, None));
    }
    let rules = match &args.sim_profile {
        None => Vec::new(),
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                CliError::usage(format!(
                    "{}: cannot read simulation profile: {e}",
                    path.display()
                ))
            })?;
            let profile: SimProfile = cowork_schema::load::parse_strict(&text, path)
                .map_err(|e| CliError::usage(e.to_string()))?;
            profile.rules
        }
    };
    Ok((
        ExecutorKind::Sim,
        Some(SimSpec {
            seed: args.seed,
            rules,
        }),
    ))
}

/// The batch mode and target from `--record` / `--replay` and the positional target.
pub fn mode_and_target(
    target: Option<&Path>,
    mode: &ModeArgs,
) -> Result<(BatchMode, PathBuf), CliError> {
    match (&mode.replay, target) {
        (Some(cassettes), None) => Ok((BatchMode::Replay, cassettes.clone())),
        (Some(_), Some(_)) => Err(CliError::usage(
            "--replay: takes the cassettes instead of a scenario target; give one or the other",
        )),
        (None, Some(target)) => Ok((mode.batch_mode(), target.to_path_buf())),
        (None, None) => Err(CliError::usage(
            "a scenario file or directory is required (or --replay <cassettes>)",
        )),
    }
}

/// `cowork run`.
pub async fn run(args: RunArgs) -> Result<i32, CliError> {
    let started = Instant::now();
    let (mode, target) = mode_and_target(args.target.as_deref(), &args.mode)?;
    let (executor_kind, sim) = executor_and_sim(&args.executor)?;
    let prepared = prepare_batch(&target, &args.batch, mode, executor_kind, sim).await?;
    let PreparedRun { plan, spec, bundle } = prepared;
    let batch_id = plan.batch_id.clone();

    // Validation is over; from here on the batch exists in the store.
    let store = Arc::new(DirArtifactStore::new(&args.store));
    crate::embedded::store_batch(&store, &plan, spec, bundle).await?;

    if !args.quiet {
        eprintln!(
            "batch {batch_id}: {} jobs in {} {}{} with the {} executor, {} slots",
            plan.n_jobs(),
            plan.units.len(),
            if plan.summary().kind == cowork_schema::batch::PlanKindName::Matrix {
                "cells"
            } else {
                "files"
            },
            plan.flags
                .repeat
                .map(|n| format!(" × {n} runs"))
                .unwrap_or_default(),
            executor_kind.as_str(),
            args.slots
        );
    }

    let embedded = crate::embedded::EmbeddedRun {
        store,
        store_dir: args.store.clone(),
        harness_bin: args.harness_bin.clone(),
        slots: args.slots,
        window: args.window,
        usage_pause: crate::connect::duration_arg(
            "--usage-limit-pause",
            &args.admission.usage_limit_pause,
        )?,
        model_limits: crate::connect::model_limits(&args.admission.model_limit)?,
        keep_work: args.keep_work,
        quiet: args.quiet,
        started,
        command: mode.envelope_command(),
    };
    let outcome = crate::embedded::run_stored(&embedded, &plan, "batch").await?;

    eprint!(
        "{}",
        crate::summary::render(&crate::summary::Summary::new(
            &outcome.envelope_head,
            outcome.exit_code
        ))
    );
    eprintln!(
        "results: {}",
        args.store.join("batches").join(batch_id.as_str()).display()
    );
    if args.output_format == OutputFormat::Json {
        outcome
            .copy_envelope_to(&mut std::io::stdout().lock())
            .context("printing the envelope")?;
    }
    Ok(outcome.exit_code)
}
