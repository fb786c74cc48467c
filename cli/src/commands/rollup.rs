//! `cowork rollup`: re-judge stored runs with the same reducer and the same output as a batch.

use std::path::{Path, PathBuf};

use anyhow::Context;
use cowork_coordinator::catalog::{overview, stored_batch};
use cowork_coordinator::intake::quarantine::quarantine_spec;
use cowork_coordinator::rejudge::{rejudge_runs, rejudge_stored, view_of_result};
use cowork_coordinator::supervisor::{
    EnvelopeHead, StoredEnvelope, build_envelope, copy_envelope, rollup_bytes, spool_envelope,
};
use cowork_core::plan::flags::js_number;
use cowork_core::reduce::{Judging, StopRules};
use cowork_core::verdict::{Lane, with_rederived_verdict};
use cowork_schema::batch::BatchFlags;
use cowork_schema::envelope::decorate_result;
use cowork_schema::fleet::StopError;
use cowork_schema::fleet_key::{FleetKey, RejudgedMeta};
use cowork_schema::layout::{BatchDir, BatchKey, names};
use cowork_schema::quarantine::QuarantineSpec;
use cowork_schema::rollup::FoldOrder;
use cowork_schema::run_result::RunView;
use serde_json::Value;

use crate::args::{OutputFormat, RollupArgs};
use crate::batch_source::{Resolved, Source, resolve};
use crate::exit::CliError;

/// A number flag read with the CLI's `Number()` rules and checked against a range.
fn number_flag(
    name: &str,
    text: &str,
    valid: impl Fn(f64) -> bool,
    expect: &str,
) -> Result<f64, CliError> {
    match js_number(text) {
        value if value.is_finite() && valid(value) => Ok(value),
        _ => Err(CliError::usage(format!(
            "{name}: must be {expect}, got {text:?}"
        ))),
    }
}

/// The stored flags with the ones given on the command line replacing them.
fn judged_flags(args: &RollupArgs, stored: Option<&BatchFlags>) -> Result<BatchFlags, CliError> {
    let mut flags = stored.cloned().unwrap_or_default();
    if let Some(text) = &args.min_pass_rate {
        flags.min_pass_rate = number_flag(
            "--min-pass-rate",
            text,
            |v| (0.0..=1.0).contains(&v),
            "a number in [0, 1]",
        )?;
    }
    if let Some(text) = &args.max_budget_usd {
        flags.max_budget_usd = Some(number_flag(
            "--max-budget-usd",
            text,
            |v| v > 0.0,
            "a number > 0",
        )?);
    }
    flags.stop_on_diverge |= args.stop_on_diverge;
    flags.allow_budget_stop |= args.allow_budget_stop;
    flags.allow_truncated_matrix |= args.allow_truncated_matrix;
    flags.quarantine = judged_quarantine(args, flags.quarantine.take())?;
    Ok(flags)
}

/// The quarantine to judge with: the recorded one (its own entries and day) unless the flags
/// name another file (judged as of today) or none.
fn judged_quarantine(
    args: &RollupArgs,
    recorded: Option<QuarantineSpec>,
) -> Result<Option<QuarantineSpec>, CliError> {
    let given = &args.quarantine;
    if given.no_quarantine {
        return Ok(None);
    }
    if given.quarantine.is_none() && given.quarantine_ref.is_none() {
        return Ok(recorded);
    }
    let cwd = crate::batch_input::current_dir()?;
    let Some(text) = crate::quarantine::read_quarantine(given, &cwd, &cwd)? else {
        return Ok(None);
    };
    quarantine_spec(&text).map(Some).map_err(CliError::Usage)
}

/// Natural order for paths: digit runs compare as numbers, so `r2` sorts before `r10`.
fn natural_key(path: &Path) -> Vec<(String, u64)> {
    let text = path.to_string_lossy();
    let mut key = Vec::new();
    let mut chars = text.chars().peekable();
    while chars.peek().is_some() {
        let mut word = String::new();
        while let Some(c) = chars.peek().filter(|c| !c.is_ascii_digit()) {
            word.push(*c);
            chars.next();
        }
        let mut number = 0u64;
        while let Some(digit) = chars.peek().and_then(|c| c.to_digit(10)) {
            number = number.saturating_mul(10).saturating_add(u64::from(digit));
            chars.next();
        }
        key.push((word, number));
    }
    key
}

fn find_results(dir: &Path, found: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            find_results(&path, found)?;
        } else if entry.file_name() == names::RESULT {
            found.push(path);
        }
    }
    Ok(())
}

/// The stored batch a single `rollup` argument names, if it names one: a batch dir, or (when
/// no such file or directory exists) a batch id, `latest` or `latest~N` in `--store`.
async fn stored_batch_named(path: &Path, store: &Path) -> Result<Option<Resolved>, CliError> {
    let local = Source::Local(store.to_path_buf());
    let Some(text) = path.to_str() else {
        return Ok(None);
    };
    if BatchDir::new(path).spec_file().is_file() || !path.exists() {
        return resolve(text, &local).await.map(Some);
    }
    Ok(None)
}

/// `cowork rollup`.
pub async fn run(args: RollupArgs) -> Result<i32, CliError> {
    if let [only] = args.paths.as_slice()
        && let Some(batch) = stored_batch_named(only, &args.store).await?
    {
        return rollup_stored_batch(&args, batch).await;
    }
    let mut files = Vec::new();
    for path in &args.paths {
        if path.is_dir() {
            let mut found = Vec::new();
            find_results(path, &mut found)
                .with_context(|| format!("listing {}", path.display()))?;
            found.sort_by_key(|p| natural_key(p));
            files.extend(found);
        } else if path.is_file() {
            files.push(path.clone());
        } else {
            return Err(CliError::usage(format!(
                "{}: no such file or directory",
                path.display()
            )));
        }
    }
    if files.is_empty() {
        return Err(CliError::usage(format!(
            "no {} files found in the given paths",
            names::RESULT
        )));
    }
    // The files are the CLI's `result.json`s: kept as JSON values (their keys and order are
    // written back untouched) and read by key (`scenario`, `harnessVersion`), their shape
    // being the CLI's, open across its versions.
    let mut groups: Vec<(String, Vec<RunView>)> = Vec::new();
    let mut values = Vec::new();
    for file in &files {
        let text = std::fs::read(file)
            .map_err(|e| CliError::usage(format!("{}: cannot read: {e}", file.display())))?;
        let value: Value = serde_json::from_slice(&text)
            .map_err(|e| CliError::usage(format!("{}: not JSON: {e}", file.display())))?;
        let view = view_of_result(&value)
            .map_err(|e| CliError::usage(format!("{}: {e}", file.display())))?;
        let scenario = value
            .get("scenario")
            .and_then(Value::as_str)
            .unwrap_or("(unnamed)")
            .to_owned();
        match groups.iter_mut().find(|(name, _)| *name == scenario) {
            Some((_, runs)) => runs.push(view.clone()),
            None => groups.push((scenario, vec![view.clone()])),
        }
        values.push((value, view));
    }
    let flags = judged_flags(&args, None)?;
    if flags.quarantine.is_some() {
        return Err(CliError::usage(
            "--quarantine: applies to a stored batch, whose units it can match; loose result \
             files have none (drop the flag, or give the batch)",
        ));
    }
    let rules = StopRules {
        stop_on_diverge: flags.stop_on_diverge,
        max_budget_usd: flags.max_budget_usd,
    };
    let judging = Judging {
        min_pass_rate: flags.min_pass_rate,
        allow_budget_stop: flags.allow_budget_stop,
        allow_truncated_matrix: flags.allow_truncated_matrix,
    };
    let reduction =
        rejudge_runs(groups.clone(), rules, judging).map_err(|e| CliError::Failed(e.into()))?;
    let results = results_in_fold_order(&reduction, &groups, &values);
    let version = values
        .first()
        .and_then(|(v, _)| v.get("harnessVersion"))
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_owned();
    let fleet = RejudgedMeta {
        files: Some(files.len() as u64),
        ..RejudgedMeta::new(flags.min_pass_rate, flags.allow_budget_stop)
    };
    let envelope = build_envelope(
        &reduction,
        &version,
        "run",
        results,
        Some(FleetKey::Rejudged(fleet)),
    );
    finish(&args, &reduction, &envelope)
}

/// The envelope's results, decorated, in the reduction's (group, index) order.
fn results_in_fold_order(
    reduction: &cowork_core::reduce::BatchReduction,
    groups: &[(String, Vec<RunView>)],
    values: &[(Value, RunView)],
) -> Vec<Value> {
    let mut by_group: Vec<Vec<Value>> = vec![Vec::new(); groups.len()];
    for (value, _) in values {
        let scenario = value
            .get("scenario")
            .and_then(Value::as_str)
            .unwrap_or("(unnamed)");
        if let Some(idx) = groups.iter().position(|(name, _)| name == scenario) {
            by_group[idx].push(value.clone());
        }
    }
    reduction
        .results
        .iter()
        .filter_map(|(unit, repeat)| {
            let value = by_group
                .get(*unit as usize)?
                .get(repeat.unwrap_or(0) as usize)?
                .clone();
            let view = view_of_result(&value).ok()?;
            let value = with_rederived_verdict(value, Lane::Live);
            Some(decorate_result(value, &view))
        })
        .collect()
}

async fn rollup_stored_batch(args: &RollupArgs, batch: Resolved) -> Result<i32, CliError> {
    let Resolved { batch_id, source } = batch;
    let store = source.store_of(&batch_id);
    let stored = stored_batch(store.as_ref(), &batch_id)
        .await
        .map_err(|e| CliError::usage(format!("{e} (in {})", source.describe())))?;
    let flags = judged_flags(args, Some(&stored.spec.flags))?;
    let rejudged = rejudge_stored(store.as_ref(), &stored, &flags)
        .await
        .map_err(|e| CliError::Failed(e.into()))?;
    let never_ran = &rejudged.never_ran;
    let fleet = RejudgedMeta {
        batch_id: Some(stored.batch_id.to_string()),
        results_order: Some(FoldOrder::Index),
        stop_errors: rejudged
            .reduction
            .stop_errors
            .iter()
            .map(|(unit, category, message)| StopError {
                unit: unit.clone(),
                message: message.clone(),
                category: category.clone(),
            })
            .collect(),
        incomplete: !never_ran.is_empty(),
        never_ran: never_ran
            .iter()
            .map(|job| job.as_str().to_owned())
            .collect(),
        ..RejudgedMeta::new(flags.min_pass_rate, flags.allow_budget_stop)
    };
    let command = stored.spec.mode.envelope_command();
    // The version the batch's envelope names, by the same rule, from the job records rather
    // than from the stored envelope, which holds every result; a batch that never stored an
    // envelope (it was interrupted) names none.
    let has_envelope = store
        .exists(BatchKey::new(&batch_id).envelope().as_str())
        .await
        .unwrap_or(false);
    let version = if has_envelope {
        rejudged.envelope_version()
    } else {
        "unknown".to_owned()
    };
    let locate = |job| rejudged.result_location(&stored, job);
    let envelope = spool_envelope(
        &store,
        &locate,
        &rejudged.reduction,
        EnvelopeHead {
            version: &version,
            command,
            fleet: Some(FleetKey::Rejudged(fleet)),
        },
    )
    .await
    .map_err(|e| CliError::Failed(e.into()))?;
    // An eval batch is re-judged as an eval: its verdict and exit are its A/B comparison's
    // (stored as eval.json when it was decided), not its arms' rollup, which judges arm B at
    // the min pass rate.
    let eval_verdict = if stored.spec.mode == cowork_schema::batch::BatchMode::Eval {
        let batch = overview(store.as_ref(), &batch_id)
            .await
            .map_err(|e| CliError::Failed(e.into()))?;
        match batch.verdict() {
            Some((word, code)) => Some((format!("{word} (eval, A/B comparison)"), code)),
            None => {
                eprintln!(
                    "note: eval batch {batch_id} has no eval.json (it never finished): the \
                     verdict below is its arms' rollup, not an A/B comparison"
                );
                None
            }
        }
    } else {
        None
    };
    // Why runs failed, read from the stored runs (the same reasons `cowork report` lists).
    let reasons = match &source {
        Source::Local(root) if rejudged.reduction.exit_code != 0 => {
            crate::summary_reasons::local(root, &batch_id, &envelope.head).await
        }
        _ => String::new(),
    };
    let code = finish_spooled(args, &rejudged.reduction, &envelope, eval_verdict, reasons)?;
    if !never_ran.is_empty() {
        eprint!("{}", incomplete_note(stored.plan.n_jobs, never_ran));
    }
    Ok(code)
}

/// The lines that say a re-judged batch is incomplete and which jobs never ran (the first few,
/// then a count).
fn incomplete_note(n_jobs: u64, never_ran: &[cowork_schema::ids::JobId]) -> String {
    /// Job ids named one by one; a huge interrupted batch would otherwise print thousands.
    const NAMED: usize = 20;
    let mut names: Vec<&str> = never_ran
        .iter()
        .take(NAMED)
        .map(|job| job.local_part())
        .collect();
    if never_ran.len() > NAMED {
        names.push("…");
    }
    format!(
        "INCOMPLETE: {} of {n_jobs} never ran (the batch was interrupted, or stopped early under \
         other flags); the verdict above judges only the runs that exist and counts as FAIL\n\
         never ran: {}\n",
        crate::text::count(never_ran.len() as u64, "job"),
        names.join(" ")
    )
}

/// [`finish`] for an envelope spooled to a file: the summary from its head, the whole
/// envelope copied from the spool.
fn finish_spooled(
    args: &RollupArgs,
    reduction: &cowork_core::reduce::BatchReduction,
    envelope: &StoredEnvelope,
    judged_as: Option<(String, i32)>,
    reasons: String,
) -> Result<i32, CliError> {
    write_rollup(args, reduction, &envelope.head.command)?;
    // The summary counts simulated runs from the fleet key, or else from the results, which
    // the head does not hold: the reduction's count of folded simulated runs is that count.
    let mut head = envelope.head.clone();
    if let Some(FleetKey::Rejudged(fleet)) = &mut head.fleet
        && fleet.simulated_runs.is_none()
    {
        fleet.simulated_runs = Some(reduction.simulated_runs);
    }
    let summary = crate::summary::Summary::new(&head, reduction.exit_code).with_reasons(reasons);
    let (summary, code) = match judged_as {
        Some((verdict, code)) => (summary.judged_as(verdict, code), code),
        None => (summary, reduction.exit_code),
    };
    crate::summary::print(&summary);
    if args.output_format == OutputFormat::Json {
        let stdout = std::io::stdout();
        copy_envelope(&envelope.spool, &mut stdout.lock()).context("writing the envelope")?;
    }
    Ok(code)
}

fn write_rollup(
    args: &RollupArgs,
    reduction: &cowork_core::reduce::BatchReduction,
    command: &str,
) -> Result<(), CliError> {
    if let Some(out) = &args.rollup_out {
        std::fs::write(out, rollup_bytes(reduction, command))
            .with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}

fn finish(
    args: &RollupArgs,
    reduction: &cowork_core::reduce::BatchReduction,
    envelope: &cowork_schema::envelope::Envelope,
) -> Result<i32, CliError> {
    write_rollup(args, reduction, &envelope.command)?;
    crate::summary::print(&crate::summary::Summary::new(envelope, reduction.exit_code));
    if args.output_format == OutputFormat::Json {
        println!("{}", envelope.to_line());
    }
    Ok(reduction.exit_code)
}
