//! `cowork run`: the embedded mode — plan, bundle, then an in-process queue, event log, local
//! store and worker slots run the batch; the same supervisor and reducer as the fleet judge it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use cowork_coordinator::prepare::{PrepareInput, PreparedBatch, prepare};
use cowork_coordinator::supervisor::BatchOutcome;
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
    if mode != BatchMode::Replay {
        note_unlisted_subfolders(target, &prepared.target, &prepared.files);
    }
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
    warn_unmatched_sim_rules(&plan);
    Ok(PreparedRun { plan, spec, bundle })
}

/// Directory entries looked at below a directory target, at most, for the note about its
/// subfolders: a note is not worth a walk of a huge tree.
const SUBFOLDER_SCAN_LIMIT: usize = 10_000;

/// Says which subfolders of a directory target hold YAML files that the batch does not use. A
/// directory target runs only the files directly inside it, as the harness CLI does; scenarios
/// kept in subfolders would otherwise be skipped without a word. Files the batch ships (a
/// session kept in a subfolder, say) are not counted.
pub fn note_unlisted_subfolders(target: &Path, target_rel: &str, shipped: &BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(target) else {
        return;
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
    for (name, unused) in subfolders {
        eprintln!(
            "note: {}: subfolder {name}/ holds {} that this batch does not run (a directory \
             target runs only the files directly in it, like the harness CLI); give {} as its \
             own target to run them",
            target.display(),
            count(unused as u64, "YAML file"),
            target.join(&name).display()
        );
    }
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

/// Warns about each `--sim-profile` rule that selects no job of the plan: it changes nothing,
/// which is almost always a misspelt scenario name, model or skill dir.
pub fn warn_unmatched_sim_rules(plan: &Plan) {
    let Some(sim) = plan.sim.as_ref().filter(|sim| !sim.rules.is_empty()) else {
        return;
    };
    let first_index = plan.repeat.map(|_| 0);
    let jobs: Vec<_> = plan
        .units
        .iter()
        .filter(|unit| unit.cell_error.is_none())
        .map(|unit| plan.job(unit, first_index))
        .collect();
    for position in cowork_worker::executor::sim::rules_matching_nothing(&sim.rules, &jobs) {
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
        eprintln!(
            "warning: --sim-profile: rule {} ({}) matches no job of this batch, so it changes \
             nothing; check its selectors against the scenario names and matrix axes",
            position + 1,
            selectors.join(", ")
        );
    }
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

/// Removes the empty directories a batch leaves under `<store>/work/<batch id>` (each job's
/// scratch dir is removed after its artifacts are stored, but not the unit directories above
/// it), then `<store>/work` itself if nothing else is in it. Files are never touched; failures
/// are ignored, since only tidiness is at stake. Not called with `--keep-work`, which keeps
/// every scratch dir as the job left it.
pub fn remove_empty_scratch_dirs(store: &Path, batch_id: &cowork_schema::BatchId) {
    let work = store.join("work");
    remove_empty_dirs(&work.join(batch_id.as_str()));
    let _ = std::fs::remove_dir(&work);
}

/// Removes `dir` and every directory below it that holds no file, deepest first.
fn remove_empty_dirs(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            remove_empty_dirs(&entry.path());
        }
    }
    // Fails, as it should, when a file or a non-empty directory is left.
    let _ = std::fs::remove_dir(dir);
}

/// `1 job`, `2 jobs`: a count with its noun in the right number (regular plurals).
pub fn count(n: u64, noun: &str) -> String {
    count_of(n, noun, &format!("{noun}s"))
}

/// `1 batch`, `2 batches`: a count with the singular or the plural given.
pub fn count_of(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

/// What to do when the harness a batch needs is missing or does not answer like one.
const HARNESS_FIX: &str =
    "install it, set --harness-bin / COWORK_HARNESS_BIN, or use --executor sim";

/// Asks the harness for its version before anything is written, so that a missing harness is
/// one plain error (exit 2) instead of a batch whose every job fails to start. `Ok(None)` when
/// the executor runs no harness.
pub async fn harness_preflight(
    executor: ExecutorKind,
    harness_bin: &Path,
) -> Result<Option<String>, CliError> {
    if executor != ExecutorKind::Harness {
        return Ok(None);
    }
    let config = cowork_worker::capabilities::ProbeConfig {
        limactl_bin: None,
        docker_bin: None,
        ..cowork_worker::capabilities::ProbeConfig::for_executor(executor, harness_bin)
    };
    let probe = cowork_worker::capabilities::probe(&config).await;
    match probe.harness {
        cowork_worker::capabilities::Tool::Ready { version } if looks_like_version(&version) => {
            Ok(Some(version))
        }
        cowork_worker::capabilities::Tool::Ready { version } => Err(CliError::usage(format!(
            "{} does not look like cowork-harness: `--version` printed {version:?}, which holds \
             no version number ({HARNESS_FIX})",
            harness_bin.display()
        ))),
        cowork_worker::capabilities::Tool::Unavailable { reason } => Err(CliError::usage(format!(
            "cowork-harness not found: {reason} ({HARNESS_FIX})"
        ))),
        cowork_worker::capabilities::Tool::NotProbed => Ok(None),
    }
}

/// Refuses a batch with `protocol` jobs when the agent binary the harness spawns for them is
/// not on the `PATH` it gets (this process's): the CLI does not report a missing agent, it
/// kills its own process group, so every such job would fail after its harness started.
fn agent_preflight(executor: ExecutorKind, plan: &Plan) -> Result<(), CliError> {
    use cowork_worker::capabilities::{Tool, probe_agent};
    let n_protocol = plan
        .units
        .iter()
        .filter(|unit| unit.tier == cowork_schema::job::Tier::Protocol)
        .count();
    if executor != ExecutorKind::Harness || n_protocol == 0 {
        return Ok(());
    }
    match probe_agent(std::env::var_os("PATH").as_deref()) {
        Tool::Unavailable { reason } => Err(CliError::usage(format!(
            "the protocol tier is not served: {reason}; cowork-harness spawns the agent binary \
             `claude` from PATH for each of the batch's {} at fidelity protocol (install Claude \
             Code, or put `claude` on PATH)",
            count(n_protocol as u64, "unit")
        ))),
        Tool::Ready { .. } | Tool::NotProbed => Ok(()),
    }
}

/// `true` when `text` holds a dotted version number such as `4.4.0`.
fn looks_like_version(text: &str) -> bool {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .any(|word| {
            let parts: Vec<&str> = word.split('.').collect();
            parts.len() >= 2 && parts.iter().all(|part| !part.is_empty())
        })
}

/// Both checks' problems in one list: the user fixes everything in one go.
pub fn both_checked<T>(
    preflight: Result<Option<String>, CliError>,
    prepared: Result<T, CliError>,
) -> Result<(Option<String>, T), CliError> {
    match (preflight, prepared) {
        (Ok(version), Ok(prepared)) => Ok((version, prepared)),
        (Err(CliError::Usage(mut first)), Err(CliError::Usage(rest))) => {
            first.extend(rest);
            Err(CliError::Usage(first))
        }
        (Err(error), _) | (_, Err(error)) => Err(error),
    }
}

/// `cowork run`.
pub async fn run(args: RunArgs) -> Result<i32, CliError> {
    let started = Instant::now();
    let (mode, target) = mode_and_target(args.target.as_deref(), &args.mode)?;
    let (executor_kind, sim) = executor_and_sim(&args.executor)?;
    let (preflight, prepared) = tokio::join!(
        harness_preflight(executor_kind, &args.harness_bin),
        prepare_batch(&target, &args.batch, mode, executor_kind, sim)
    );
    if args.dry_run {
        // A dry run plans without running: a missing harness is worth a line, not a refusal.
        let plan = prepared?.plan;
        let source = crate::commands::batches::Source::Local(args.store.clone());
        let harness = (executor_kind == ExecutorKind::Harness).then_some(preflight);
        return crate::commands::dry_run::print(&plan, &source, Some(args.slots), harness).await;
    }
    let (_harness_version, prepared) = both_checked(preflight, prepared)?;
    let PreparedRun { plan, spec, bundle } = prepared;
    agent_preflight(executor_kind, &plan)?;
    let batch_id = plan.batch_id.clone();

    // Validation is over; from here on the batch exists in the store.
    let store = Arc::new(DirArtifactStore::new(&args.store));
    crate::embedded::store_batch(&store, &plan, spec, bundle).await?;

    if !args.quiet {
        let unit_noun = if plan.summary().kind == cowork_schema::batch::PlanKindName::Matrix {
            "cell"
        } else {
            "file"
        };
        eprintln!(
            "batch {batch_id}: {} in {}{} with the {} executor, {}",
            count(plan.n_jobs(), "job"),
            count(plan.units.len() as u64, unit_noun),
            plan.flags
                .repeat
                .map(|n| format!(" × {}", count(u64::from(n), "run")))
                .unwrap_or_default(),
            executor_kind.as_str(),
            count(u64::from(args.slots), "slot")
        );
    }

    let admission = crate::connect::Admission::from_args(&args.admission)?;
    let embedded = crate::embedded::EmbeddedRun {
        store,
        store_dir: args.store.clone(),
        harness_bin: args.harness_bin.clone(),
        slots: args.slots,
        window: args.window,
        usage_pause: admission.usage_pause,
        model_limits: admission.model_limits,
        keep_work: args.keep_work,
        quiet: args.quiet,
        started,
        command: mode.envelope_command(),
    };
    let outcome = crate::embedded::run_stored(&embedded, &plan, "batch").await;
    if !args.keep_work {
        remove_empty_scratch_dirs(&args.store, &batch_id);
    }
    let outcome = outcome?;
    print_local_outcome(&outcome, &args.store, &batch_id, args.output_format)
}

/// The end of a batch run in this process (`cowork run`, a local `cowork resume`): the summary
/// table and where the results are on stderr, the envelope on stdout under
/// `--output-format json`; returns the exit code.
pub(crate) fn print_local_outcome(
    outcome: &BatchOutcome,
    store_dir: &Path,
    batch_id: &cowork_schema::BatchId,
    output_format: OutputFormat,
) -> Result<i32, CliError> {
    eprint!(
        "{}",
        crate::summary::render(&crate::summary::Summary::new(
            &outcome.envelope_head,
            outcome.exit_code
        ))
    );
    eprintln!(
        "results: {}",
        store_dir.join("batches").join(batch_id.as_str()).display()
    );
    if output_format == OutputFormat::Json {
        outcome
            .copy_envelope_to(&mut std::io::stdout().lock())
            .context("printing the envelope")?;
    }
    Ok(outcome.exit_code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_harness_version_holds_a_dotted_number() {
        for (text, expect) in [
            ("4.4.0", true),
            ("cowork-harness 2.0.0", true),
            ("v10.1", true),
            ("hello", false),
            ("4", false),
            ("1..2", false),
            ("", false),
        ] {
            assert_eq!(looks_like_version(text), expect, "{text:?}");
        }
    }

    #[test]
    fn counts_read_right() {
        assert_eq!(count(1, "job"), "1 job");
        assert_eq!(count(0, "file"), "0 files");
        assert_eq!(count_of(2, "batch", "batches"), "2 batches");
    }
}
