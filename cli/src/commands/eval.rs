//! `cowork eval`: an A/B batch of two skill or plugin versions, embedded like `cowork run` or,
//! with `--coordinator`, submitted to a fleet like `cowork submit`.
//!
//! The whole batch is validated first (flags, both arm directories, every scenario, the eval
//! layout); a problem exits 2 and nothing is written. Embedded, the batch then runs in this
//! process on the same supervisor, reducer and worker as `run`; its runs are paired and judged by
//! the coordinator's eval statistics ([`eval_document`]), and the report is stored as
//! `batches/<id>/eval.json`, printed on stderr and, with `--output-format json`, on stdout.
//! Submitted, the coordinator re-validates the batch (its spec carries the eval settings),
//! supervises it and stores the same `eval.json`; `--watch` follows the batch, reads that report
//! back and ends exactly like the embedded eval.

mod arms;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, anyhow};
use cowork_client::CoordinatorClient;
use cowork_coordinator::intake::{self, EvalIntake, EvalRequest};
use cowork_coordinator::notify::ReportLink;
use cowork_core::eval::words::{
    format_p, p_value_sentence, points, power_sentence, sensitivity_sentence,
};
use cowork_core::eval::{Comparison, EvalVerdict};
use cowork_core::eval::{
    EvalDocument, EvalDocumentInput, EvalGate, document_exit_code, eval_document,
    nothing_to_compare,
};
use cowork_core::plan::Plan;
use cowork_core::plan::eval::RawEvalFlags;
use cowork_fabric::ArtifactStore;
use cowork_fabric::embedded::DirArtifactStore;
use cowork_schema::BatchId;
use cowork_schema::batch::BatchMode;
use cowork_schema::layout::{BatchKey, StoreRoot, names};
use cowork_schema::registry::BatchState;

use crate::args::{EvalArgs, FailOnArg, OutputFormat};
use crate::batch_input::{current_dir, executor_and_sim, harness_preflight, take_in};
use crate::connect::{client, client_error};
use crate::embedded::remove_empty_scratch_dirs;
use crate::embedded::{EmbeddedRun, new_batch_id, run_stored, store_batch};
use crate::exit::CliError;
use crate::fleet_args::ClientArgs;
use crate::follow::follow;
use crate::text::count;

/// `cowork eval`.
pub async fn run(args: EvalArgs) -> Result<i32, CliError> {
    let started = Instant::now();
    let mut validated = validate(&args).await?;
    let notifier = hooks(&args, &mut validated)?;
    if args.dry_run {
        return dry_run(&args, &validated).await;
    }
    if let Some(coordinator) = &args.coordinator {
        return submit(&args, coordinator, validated).await;
    }
    let EvalIntake {
        plan,
        spec,
        bundle,
        settings,
        arms,
    } = validated;
    let batch_id = plan.batch_id.clone();

    // Validation is over; from here on the batch exists in the store.
    let store = Arc::new(DirArtifactStore::new(&args.store));
    if !args.quiet {
        eprintln!(
            "eval batch {batch_id}: {} with the {} executor, {}",
            arms::shape(&plan, &arms, plan.n_jobs()),
            plan.executor.as_str(),
            count(u64::from(args.slots), "slot")
        );
    }
    let embedded = EmbeddedRun {
        store: store.clone(),
        store_dir: args.store.clone(),
        harness_bin: args.harness_bin.clone(),
        harness: crate::harness_process::HarnessProcess::default(),
        slots: args.slots,
        replay_pack: cowork_worker::executor::replay_pack::DEFAULT_REPLAY_PACK,
        window: args.window,
        usage_pause: crate::connect::duration_arg("--usage-limit-pause", &args.usage_limit_pause)?,
        model_limits: Vec::new(),
        keep_work: args.keep_work,
        quiet: args.quiet,
        started,
        command: BatchMode::Eval.envelope_command(),
        ui: None,
        notifier,
    };
    crate::writable_dirs::check_writable(&crate::writable_dirs::store_dirs(
        &args.store,
        plan.executor != cowork_schema::batch::ExecutorKind::Sim,
    ))?;
    store_batch(&store, &plan, spec, bundle).await?;
    let outcome = run_stored(&embedded, &plan, "eval batch").await;
    if !args.keep_work {
        remove_empty_scratch_dirs(&args.store, &batch_id);
    }
    let outcome = outcome?;
    // The pairing needs every folded run's result: an eval batch is small enough to read its
    // stored envelope back whole.
    let envelope_bytes = store
        .get(&outcome.envelope_key)
        .await
        .with_context(|| format!("reading {}", outcome.envelope_key))?;
    let envelope: cowork_schema::envelope::Envelope = serde_json::from_slice(&envelope_bytes)
        .with_context(|| format!("reading {}", outcome.envelope_key))?;

    // The same computation as the coordinator's after it decides an eval batch; only the arm
    // labels differ (here the paths as typed, there the bundle-relative ones).
    let document = eval_document(&EvalDocumentInput {
        plan: &plan,
        settings: &settings,
        arms: &arms,
        folded: &outcome.reduction.results,
        results: &envelope.results,
        simulated_runs: outcome.reduction.simulated_runs,
    })
    .with_context(|| format!("computing the report of eval batch {batch_id}"))?;
    let document_json = document
        .to_stored_json()
        .context("serializing the eval report")?;
    let eval_key = BatchKey::new(&batch_id).eval();
    store
        .put(eval_key.as_str(), document_json.clone())
        .await
        .with_context(|| format!("storing {eval_key}"))?;
    let results_line = format!(
        "results: {}",
        StoreRoot::new(&args.store)
            .batch_dir(&batch_id)
            .path()
            .display()
    );
    let code = finish(&args, &document, &document_json, &results_line).await?;
    tell_hooks(&embedded, &plan, &outcome, &document, code).await;
    Ok(code)
}

/// Tells the eval's hooks it was decided, with its A/B verdict and exit code.
async fn tell_hooks(
    embedded: &EmbeddedRun,
    plan: &Plan,
    outcome: &cowork_coordinator::supervisor::BatchOutcome,
    document: &EvalDocument,
    exit_code: i32,
) {
    let verdict = cowork_core::notify::Verdict {
        verdict: cowork_core::eval::document_verdict_words(document),
        exit_code,
        cost_usd: outcome.progress.cost_usd,
    };
    crate::embedded::tell_decided(embedded, plan, outcome, verdict).await;
}

/// `cowork eval --dry-run`: the plan of both arms and the estimate from the history of the
/// local store, or of the coordinator with `--coordinator`.
async fn dry_run(args: &EvalArgs, validated: &EvalIntake) -> Result<i32, CliError> {
    use crate::batch_source::Source;
    let plan = &validated.plan;
    let power = Some(crate::dry_run::power::EvalPower {
        alpha: validated.settings.alpha,
        mde: validated.settings.mde,
        // Validated with the other flags (`validate`), so it reads as a number here.
        expect_pass_rate: args
            .expect_pass_rate
            .as_deref()
            .map(cowork_core::plan::flags::js_number),
    });
    match &args.coordinator {
        Some(coordinator) => {
            let client = client(&ClientArgs {
                coordinator: coordinator.clone(),
                token_file: args.token_file.clone(),
                coordinator_ca: std::env::var_os("COWORK_COORDINATOR_CA")
                    .map(std::path::PathBuf::from),
            })?;
            crate::dry_run::print_with(plan, &Source::Remote(client), None, None, power).await
        }
        None => {
            let harness = harness_preflight(plan.executor, &args.harness_bin).await;
            let harness =
                (plan.executor == cowork_schema::batch::ExecutorKind::Harness).then_some(harness);
            let source = Source::Local(args.store.clone());
            let local = crate::dry_run::LocalSlots {
                slots: args.slots,
                replay_pack: cowork_worker::executor::replay_pack::DEFAULT_REPLAY_PACK,
            };
            crate::dry_run::print_with(plan, &source, Some(local), harness, power).await
        }
    }
}

/// Prints the report (the table on stderr, the JSON line on stdout with `--output-format
/// json`), writes the `-o` file and returns the eval's exit code: the one ending of an embedded
/// and a watched eval. With no pair to compare the report is still printed and stored, then
/// the eval says why and exits 2, so that a CI gate never reads "nothing ran" as a pass.
async fn finish(
    args: &EvalArgs,
    document: &EvalDocument,
    document_json: &[u8],
    results_line: &str,
) -> Result<i32, CliError> {
    eprint!("{}", render_human(document));
    eprintln!("{results_line}");
    if let Some(path) = &args.output {
        tokio::fs::write(path, document_json)
            .await
            .with_context(|| format!("writing the eval report to {}", path.display()))?;
    }
    if args.output_format == OutputFormat::Json {
        let line = cowork_schema::json_number::to_string(document)
            .context("serializing the eval report")?;
        println!("{line}");
    }
    let no_pairs = std::iter::once(&document.report).chain(
        document
            .comparisons
            .iter()
            .map(|comparison| &comparison.report),
    );
    if let Some(message) = no_pairs.filter_map(nothing_to_compare).next() {
        eprintln!("error: {message}");
    }
    let gate = match args.fail_on {
        FailOnArg::BWorse => EvalGate::BWorse,
        FailOnArg::AnyDifference => EvalGate::AnyDifference,
        FailOnArg::Never => EvalGate::Never,
    };
    Ok(document_exit_code(document, gate))
}

/// `cowork eval --coordinator URL [--watch]`: submits the validated batch (its spec carries the
/// eval settings, so the coordinator re-plans the arms and stores `eval.json` once it decides
/// the batch). Without `--watch` prints the batch id; with it, follows the batch to its end and
/// ends like the embedded eval.
async fn submit(
    args: &EvalArgs,
    coordinator: &str,
    validated: EvalIntake,
) -> Result<i32, CliError> {
    let client = client(&ClientArgs {
        coordinator: coordinator.to_owned(),
        token_file: args.token_file.clone(),
        // This command takes no --coordinator-ca flag; the variable still applies.
        coordinator_ca: std::env::var_os("COWORK_COORDINATOR_CA").map(std::path::PathBuf::from),
    })?;
    let EvalIntake {
        plan,
        spec,
        bundle,
        arms,
        ..
    } = validated;
    let bundle_sha256 = spec.bundle_sha256.clone();
    let response = client
        .submit(&spec, bundle.bytes)
        .await
        .map_err(|e| client_error(e, "submitting the eval batch"))?;
    let batch_id = response.batch_id;
    eprintln!(
        "submitted eval batch {batch_id} to {coordinator}: {} (bundle {})",
        arms::shape(&plan, &arms, response.n_jobs),
        &bundle_sha256[..12.min(bundle_sha256.len())]
    );
    if !args.watch {
        println!("{batch_id}");
        return Ok(0);
    }
    follow_to_end(&client, &batch_id, args.quiet).await?;
    let bytes = client
        .artifact(&batch_id, names::EVAL)
        .await
        .map_err(|e| client_error(e, "fetching the batch's eval report"))?;
    let document: EvalDocument = serde_json::from_slice(&bytes)
        .with_context(|| format!("reading the eval report of batch {batch_id}"))?;
    finish(
        args,
        &document,
        &bytes,
        &format!("results: cowork results {batch_id}"),
    )
    .await
}

/// Follows a submitted batch until it ends; `Ok` only when it was decided (its `eval.json` is
/// then stored: the coordinator stores it before it records the end).
async fn follow_to_end(
    client: &CoordinatorClient,
    batch: &BatchId,
    quiet: bool,
) -> Result<(), CliError> {
    let options = crate::follow::FollowOptions {
        quiet,
        unserved_timeout: None,
    };
    let end = follow(client, batch, options).await?;
    match end.state {
        BatchState::Done if end.message.is_none() => Ok(()),
        BatchState::Cancelled => Err(CliError::Failed(anyhow!(
            "eval batch {batch} was cancelled before it was decided; no verdict"
        ))),
        other => Err(CliError::Failed(anyhow!(
            "eval batch {batch} ended in state {}{}",
            other.as_str(),
            end.message.map(|m| format!(": {m}")).unwrap_or_default()
        ))),
    }
}

/// Validates the whole eval batch and bundles it; nothing is written. Every problem found is
/// reported at once.
async fn validate(args: &EvalArgs) -> Result<EvalIntake, CliError> {
    let executor = match executor_and_sim(&args.executor) {
        Ok(executor) => Ok(executor),
        Err(CliError::Usage(errors)) => Err(errors),
        Err(other) => return Err(other),
    };
    // A submitted eval runs the harness on the workers, which probe it themselves; a dry run
    // reports the probe instead of refusing.
    let mut harness_problems = Vec::new();
    if let (None, Ok((kind, _)), false) = (&args.coordinator, &executor, args.dry_run) {
        match harness_preflight(*kind, &args.harness_bin).await {
            Ok(_) => {}
            Err(CliError::Usage(errors)) => harness_problems = errors,
            Err(other) => return Err(other),
        }
    }
    let cwd = current_dir()?;
    let bundle_root = match (&args.bundle_root, args.scenarios.first()) {
        (Some(root), _) => root.clone(),
        (None, Some(first)) => cowork_coordinator::intake::default_bundle_root(first, &cwd),
        (None, None) => cwd.clone(),
    };
    let quarantine = crate::quarantine::read_quarantine(&args.quarantine, &bundle_root, &cwd)?;
    let request = EvalRequest {
        targets: args.scenarios.clone(),
        arms: arms::arm_inputs(args)?,
        control: args.control.clone(),
        bundle_root: args.bundle_root.clone(),
        cwd,
        flags: RawEvalFlags {
            runs: args.runs.clone(),
            alpha: args.alpha.clone(),
            job_timeout: args.job_timeout.clone(),
            stall_after: args.stall.stall_after.clone(),
            on_stall: args.stall.on_stall.clone(),
            sequential: args.sequential,
            looks: args.looks.clone(),
            mde: args.mde.clone(),
            expect_pass_rate: args.expect_pass_rate.clone(),
            batch_budget_usd: args.batch_budget_usd.clone(),
            sandbox_price: args.pricing.sandbox_price.clone(),
            model_price: args.pricing.model_price.clone(),
            allow_unpriced: args.pricing.allow_unpriced,
            priority: args.priority.priority.clone(),
        },
        model: args.model.clone(),
        executor,
        harness_problems,
        seed: args.executor.seed,
        batch_id: new_batch_id(),
        quarantine,
    };
    let validated = take_in(move |notes| intake::eval(&request, notes)).await?;
    // Embedded, an unpriced batch budget is refused here; a coordinator refuses it at submit,
    // with its own prices.
    if args.coordinator.is_none() && !args.dry_run {
        crate::batch_input::refuse_unpriced(&args.store, &validated.plan).await?;
    }
    Ok(validated)
}

/// The human report: a header naming both arms, a SIMULATED banner for simulated runs, one row
/// per scenario and an overall row, then the verdict with its p-value in words and how small a
/// difference these runs can detect.
fn render_human(document: &EvalDocument) -> String {
    let report = &document.report;
    let mut out = arms::render_ranking(document);
    let [arm_a, arm_b] = &report.arms;
    let _ = writeln!(
        out,
        "eval {}: arm A = {} · arm B = {} · {} runs per arm per scenario · model {}",
        document.batch_id,
        arm_a.source,
        arm_b.source,
        document.runs_per_arm,
        document.model.as_deref().unwrap_or("(the session's own)")
    );
    if document.simulated {
        let _ = writeln!(
            out,
            "SIMULATED: these runs were made by the sim executor; they say nothing about the real skill"
        );
    }
    let interval_header = format!(
        "B-A points [{}% CI]",
        // Rounded to a millionth of a percent so 1 - 0.05 prints as 95, not 94.99999999999999.
        (report.confidence_level * 100.0 * 1e6).round() / 1e6
    );
    // Nine columns of an eval were ~150 characters wide: the costs go on a line of their own
    // (JSON has them per scenario) and the verdict is said briefly, so the table fits 100.
    let header = [
        "scenario",
        "arm A pass",
        "arm B pass",
        interval_header.as_str(),
        "p",
        "detects ≥",
        "verdict",
    ];
    let mut rows: Vec<Vec<String>> = Vec::with_capacity(report.scenarios.len() + 1);
    for scenario in &report.scenarios {
        rows.push(row(&scenario.scenario, &scenario.comparison));
    }
    rows.push(row("overall", &report.overall));
    out.push_str(&crate::text::table(
        &header,
        &rows,
        &[],
        crate::args::TableFormat::Text,
    ));
    let [arm_a, arm_b] = &report.overall.arms;
    let cost = |cost: Option<f64>| cost.map_or("unknown".to_owned(), |usd| format!("${usd:.2}"));
    let _ = writeln!(
        out,
        "cost: arm A {}, arm B {}",
        cost(arm_a.cost_usd),
        cost(arm_b.cost_usd)
    );
    if let (Some(a), Some(b)) = (arm_a.whole_cost_usd, arm_b.whole_cost_usd) {
        let sandbox = |usd: Option<f64>| usd.map_or("$0.00".to_owned(), |usd| format!("${usd:.2}"));
        let _ = writeln!(
            out,
            "whole cost (model + sandbox): arm A ${a:.2} (sandbox {}), arm B ${b:.2} (sandbox {})",
            sandbox(arm_a.sandbox_cost_usd),
            sandbox(arm_b.sandbox_cost_usd)
        );
    }
    let excluded = report.overall.excluded_pairs;
    if excluded > 0 {
        let _ = writeln!(
            out,
            "{excluded} pairs left out: an arm's run did not complete (error or unanswered)"
        );
    }
    let verdict = cowork_core::eval::verdict_words(report);
    let _ = writeln!(out, "verdict (overall, alpha {}): {verdict}", report.alpha);
    let _ = writeln!(out, "  {}", p_value_sentence(&report.overall));
    if let Some(sentence) = sensitivity_sentence(report, document.runs_per_arm) {
        let _ = writeln!(out, "  {sentence}");
    }
    if let Some(sentence) = power_sentence(report) {
        let _ = writeln!(out, "  {sentence}");
    }
    if let Some(summary) = &document.sequential {
        let _ = writeln!(
            out,
            "sequential: {}",
            cowork_core::eval::sequential::summary_line(summary)
        );
    }
    out
}

/// One table row: pass counts and rates per arm, the difference and its interval in points,
/// p, the smallest detectable difference and the verdict in brief.
fn row(scope: &str, comparison: &Comparison) -> Vec<String> {
    let [a, b] = &comparison.arms;
    let pass = |passes: u64, completed: u64, rate: f64| {
        format!("{passes}/{completed} ({})", percent(rate))
    };
    let diff = match &comparison.diff {
        Some(interval) => format!(
            "{} [{}, {}]",
            signed_points(interval.estimate),
            signed_points(interval.low),
            signed_points(interval.high)
        ),
        None => "n/a (no complete pair)".to_owned(),
    };
    let detects = comparison
        .min_detectable_diff
        .map_or_else(|| "nothing".to_owned(), points);
    let verdict = match comparison.verdict {
        EvalVerdict::NoDetectableDifference => "no difference",
        EvalVerdict::BWorse => "B worse",
        EvalVerdict::BBetter => "B better",
    };
    vec![
        scope.to_owned(),
        pass(a.passes, a.completed, a.pass_rate),
        pass(b.passes, b.completed, b.pass_rate),
        diff,
        format_p(comparison.mcnemar_p),
        detects,
        verdict.to_owned(),
    ]
}

fn percent(rate: f64) -> String {
    format!("{:.0}%", rate * 100.0)
}

/// A difference of pass rates in signed whole points: `-50`, `+11`, `0`.
fn signed_points(value: f64) -> String {
    let rounded = (value * 100.0).round();
    if rounded == 0.0 {
        "0".to_owned()
    } else {
        format!("{rounded:+.0}")
    }
}

/// The eval's hooks, checked before anything is stored or submitted (a bad hook URL or secret
/// file changes nothing) and stored with the batch: what tells them of an eval run here. A
/// submitted eval's events are signed with the coordinator's secret.
fn hooks(
    args: &EvalArgs,
    validated: &mut EvalIntake,
) -> Result<Option<cowork_coordinator::notify::Notifier>, CliError> {
    let notifier = crate::notify::notifier(
        &args.notify.notify,
        args.notify.notify_secret_file.as_deref(),
        ReportLink::LocalStore(args.store.display().to_string()),
    )?;
    validated.spec.notify = args.notify.notify.clone();
    Ok(notifier)
}
