//! `cowork run`: the embedded mode — plan, bundle, then an in-process queue, event log, local
//! store and worker slots run the batch; the same supervisor and reducer as the fleet judge it.

use std::sync::Arc;
use std::time::Instant;

use cowork_coordinator::intake::Intake;
use cowork_coordinator::notify::ReportLink;
use cowork_fabric::embedded::DirArtifactStore;
use cowork_schema::batch::ExecutorKind;

use crate::args::RunArgs;
use crate::batch_input::{
    agent_preflight, both_checked, executor_and_sim, harness_preflight, mode_and_target,
    prepare_batch,
};
use crate::embedded::{print_local_outcome, remove_empty_scratch_dirs};
use crate::exit::CliError;
use crate::text::count;

/// `cowork run`.
pub async fn run(args: RunArgs) -> Result<i32, CliError> {
    let started = Instant::now();
    let harness = crate::harness_process::HarnessProcess::from_args(&args.harness)?;
    let (mode, target) = mode_and_target(args.target.as_deref(), &args.mode)?;
    let (executor_kind, sim) = executor_and_sim(&args.executor)?;
    let (preflight, prepared) = tokio::join!(
        harness_preflight(executor_kind, &args.harness_bin),
        prepare_batch(&target, &args.batch, mode, executor_kind, sim)
    );
    if args.dry_run {
        // A dry run plans without running: a missing harness is worth a line, not a refusal.
        let plan = prepared?.plan;
        let source = crate::batch_source::Source::Local(args.store.clone());
        let harness = (executor_kind == ExecutorKind::Harness).then_some(preflight);
        let local = crate::dry_run::LocalSlots {
            slots: args.slots,
            replay_pack: usize::from(args.replay_pack),
        };
        return crate::dry_run::print(&plan, &source, Some(local), harness).await;
    }
    let (_harness_version, prepared) = both_checked(preflight, prepared)?;
    let Intake {
        plan,
        mut spec,
        bundle,
    } = prepared;
    agent_preflight(executor_kind, &plan)?;
    crate::batch_input::refuse_unpriced(&args.store, &plan).await?;
    let batch_id = plan.batch_id.clone();

    // Checked before anything is stored: a bad hook URL or secret file changes nothing.
    let notifier = crate::notify::notifier(
        &args.notify.notify,
        args.notify.notify_secret_file.as_deref(),
        ReportLink::LocalStore(args.store.display().to_string()),
    )?;
    spec.notify = args.notify.notify.clone();
    // Bound before anything is stored: a taken port is a usage error that changes nothing.
    let ui = args.ui.map(crate::embedded::UiListener::bind).transpose()?;

    crate::writable_dirs::check_writable(&crate::writable_dirs::store_dirs(
        &args.store,
        executor_kind != ExecutorKind::Sim,
    ))?;
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

    if let Some(ui) = &ui {
        // Printed even with --quiet: the token is in it, and nothing else says it.
        eprintln!("live page: {}", ui.page_url(&batch_id)?);
    }

    let admission = crate::connect::Admission::from_args(&args.admission)?;
    let embedded = crate::embedded::EmbeddedRun {
        store,
        store_dir: args.store.clone(),
        harness_bin: args.harness_bin.clone(),
        harness,
        slots: args.slots,
        replay_pack: usize::from(args.replay_pack),
        window: args.window,
        usage_pause: admission.usage_pause,
        model_limits: admission.model_limits,
        keep_work: args.keep_work,
        quiet: args.quiet,
        started,
        command: mode.envelope_command(),
        ui,
        notifier,
    };
    let outcome = crate::embedded::run_stored(&embedded, &plan, "batch").await;
    if !args.keep_work {
        remove_empty_scratch_dirs(&args.store, &batch_id);
    }
    let outcome = outcome?;
    print_local_outcome(&outcome, &args.store, &batch_id, args.output_format).await
}
