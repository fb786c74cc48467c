//! The command line's side of batch intake: `run`, `submit`, `eval` and `bench` turn their
//! flags into a request for `cowork_coordinator::intake` (which decides), print its notes, and
//! map its refusals to exit codes. Also the executor flags and the harness pre-flight, which
//! need this process's environment.

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use cowork_coordinator::intake::{self, BatchRequest, Intake, IntakeError};
use cowork_core::plan::Plan;
use cowork_core::plan::flags::RawFlags;
use cowork_schema::batch::{BatchMode, ExecutorKind, SimProfile, SimSpec};

use crate::args::{BatchArgs, ExecutorArg, ExecutorArgs, ModeArgs};
use crate::exit::CliError;

/// Validates the whole batch and bundles it; nothing is written. Shared by `run`, `submit` and
/// `bench`.
pub async fn prepare_batch(
    target: &Path,
    batch: &BatchArgs,
    mode: BatchMode,
    executor: ExecutorKind,
    sim: Option<SimSpec>,
) -> Result<Intake, CliError> {
    let cwd = current_dir()?;
    let bundle_root = batch
        .bundle_root
        .clone()
        .unwrap_or_else(|| intake::default_bundle_root(target, &cwd));
    let quarantine = crate::quarantine::read_quarantine(&batch.quarantine, &bundle_root, &cwd)?;
    let request = BatchRequest {
        target: target.to_path_buf(),
        flags: raw_flags(batch),
        matrix: batch.matrix.clone(),
        bundle_root: batch.bundle_root.clone(),
        cwd,
        mode,
        executor,
        sim,
        batch_id: crate::embedded::new_batch_id(),
        quarantine,
    };
    take_in(move |notes| intake::batch(&request, notes)).await
}

/// Runs one of intake's (blocking) entry points off the async threads, prints the notes it
/// made, also when it refused the batch, and maps its refusal to the CLI's error.
pub async fn take_in<T: Send + 'static>(
    intake: impl FnOnce(&mut Vec<String>) -> Result<T, IntakeError> + Send + 'static,
) -> Result<T, CliError> {
    let (notes, taken) = tokio::task::spawn_blocking(move || {
        let mut notes = Vec::new();
        let taken = intake(&mut notes);
        (notes, taken)
    })
    .await
    .context("input validation task failed")?;
    print_notes(&notes);
    taken.map_err(intake_error)
}

/// Refuses (exit 2) an embedded batch whose batch budget runs a tier or model nothing prices,
/// before anything is stored; `store` is only read, for models earlier batches priced.
pub async fn refuse_unpriced(store: &Path, plan: &Plan) -> Result<(), CliError> {
    let history = cowork_fabric::embedded::DirArtifactStore::new(store);
    cowork_coordinator::pricing::check_priced(&history, plan, &Default::default())
        .await
        .map_err(CliError::Usage)
}

/// The directory relative paths are read from.
pub fn current_dir() -> Result<PathBuf, CliError> {
    Ok(std::env::current_dir().context("reading the current directory")?)
}

/// Prints intake's notes and warnings, one a line, on stderr.
pub fn print_notes(notes: &[String]) {
    for note in notes {
        eprintln!("{note}");
    }
}

/// Intake's refusal as the CLI's: bad input is a usage error (exit 2) listing every problem.
pub fn intake_error(error: IntakeError) -> CliError {
    match error {
        IntakeError::Invalid(problems) => CliError::Usage(problems),
        IntakeError::Pack(source) => {
            CliError::Failed(anyhow!(source).context("packing the bundle"))
        }
    }
}

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
        stall_after: batch.stall.stall_after.clone(),
        on_stall: batch.stall.on_stall.clone(),
        sandbox_price: batch.pricing.sandbox_price.clone(),
        model_price: batch.pricing.model_price.clone(),
        allow_unpriced: batch.pricing.allow_unpriced,
        priority: batch.priority.priority.clone(),
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
pub fn agent_preflight(executor: ExecutorKind, plan: &Plan) -> Result<(), CliError> {
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
            crate::text::count(n_protocol as u64, "unit")
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
}
