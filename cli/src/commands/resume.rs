//! `cowork resume <batch>`: a batch of the local store is finished in this process, like
//! `cowork run` would have finished it; any other batch is resumed by the coordinator.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use cowork_fabric::embedded::DirArtifactStore;
use cowork_schema::BatchId;
use cowork_schema::batch::BatchMode;
use cowork_schema::layout::{BatchKey, StoreRoot};

use crate::args::ResumeArgs;
use crate::batch_source::resolve_remote;
use crate::connect::{client, client_error};
use crate::exit::CliError;
use crate::follow::{FollowOptions, watch_to_end};

/// The store searched when `--store` is not given.
const DEFAULT_STORE: &str = ".cowork";

/// `cowork resume`: `--coordinator` typed on the command line resolves the batch on the
/// coordinator, `--store` in the local store; with neither, a batch the local store holds is
/// finished here unless the coordinator holds one by the same reference too (refused, naming
/// both), and any other is resumed by the coordinator.
pub async fn run(args: ResumeArgs) -> Result<i32, CliError> {
    if args.coordinator_on_command_line && args.store_on_command_line {
        return Err(CliError::usage(
            "--store and --coordinator both given: --store DIR finishes a batch of that local \
             store in this process, --coordinator URL has that coordinator resume its batch; \
             give one",
        ));
    }
    if args.coordinator_on_command_line {
        return resume_remote(args).await;
    }
    match local_batch(&args).await? {
        Some((store, batch_id)) => {
            if !args.store_on_command_line {
                refuse_if_the_coordinator_holds_it_too(&args, &store, &batch_id).await?;
            }
            resume_local(&args, &store, &batch_id).await
        }
        None => resume_remote(args).await,
    }
}

/// Refuses, naming both, when the coordinator (COWORK_COORDINATOR or the default) holds a
/// batch by the reference that named `batch_id` in the local `store` too. A coordinator that
/// cannot be asked (none runs there, no token) holds nothing.
async fn refuse_if_the_coordinator_holds_it_too(
    args: &ResumeArgs,
    store: &Path,
    batch_id: &BatchId,
) -> Result<(), CliError> {
    let Ok(coordinator) = client(&args.client) else {
        return Ok(());
    };
    let remote = if crate::batch_source::names_by_position_or_dir(&args.batch) {
        let source = crate::batch_source::Source::Remote(coordinator);
        match crate::batch_source::resolve(&args.batch, &source).await {
            Ok(crate::batch_source::Resolved {
                batch_id,
                source: crate::batch_source::Source::Remote(_),
            }) => Some(batch_id),
            _ => None,
        }
    } else {
        coordinator
            .status(batch_id)
            .await
            .ok()
            .map(|_| batch_id.clone())
    };
    let Some(remote) = remote else {
        return Ok(());
    };
    let url = args.client.coordinator.trim();
    let store = store.display();
    let which = if &remote == batch_id {
        format!("batch {batch_id} is both in store {store} and on the coordinator at {url}")
    } else {
        format!(
            "{} names batch {batch_id} in store {store} and batch {remote} on the coordinator \
             at {url}",
            args.batch
        )
    };
    Err(CliError::usage(format!(
        "{which}: say which to resume with --store {store} (finished in this process) or \
         --coordinator {url} (resumed by the coordinator)"
    )))
}

/// The local store and batch to resume, or `None` when the coordinator should resume it: with
/// `--store`, the batch must be in that store; without it, the batch is local when `.cowork`
/// holds it. `latest`, `latest~N` and a batch dir are found as every command finds them
/// (`batch_source::resolve`).
async fn local_batch(args: &ResumeArgs) -> Result<Option<(PathBuf, BatchId)>, CliError> {
    let (store, explicit) = match &args.store {
        Some(store) => (store.clone(), true),
        None => (PathBuf::from(DEFAULT_STORE), false),
    };
    if crate::batch_source::names_by_position_or_dir(&args.batch)
        && (explicit
            || StoreRoot::new(&store).batches_dir().is_dir()
            || Path::new(&args.batch).is_dir())
    {
        let local = crate::batch_source::Source::Local(store);
        return match crate::batch_source::resolve(&args.batch, &local).await {
            Ok(crate::batch_source::Resolved {
                batch_id,
                source: crate::batch_source::Source::Local(dir),
            }) => Ok(Some((dir, batch_id))),
            Ok(_) => Ok(None),
            Err(error) if explicit => Err(error),
            Err(_) => Ok(None),
        };
    }
    let batch_id =
        BatchId::new(&args.batch).map_err(|error| CliError::usage(format!("batch id: {error}")))?;
    if holds_batch(&store, &batch_id) {
        return Ok(Some((store, batch_id)));
    }
    if explicit {
        return Err(CliError::usage(format!(
            "--store: {} holds no batch {batch_id} (no {}); give the store the batch was run with",
            store.display(),
            BatchKey::new(&batch_id).spec()
        )));
    }
    Ok(None)
}

fn holds_batch(store: &Path, batch_id: &BatchId) -> bool {
    StoreRoot::new(store)
        .batch_dir(batch_id)
        .spec_file()
        .is_file()
}

/// Finishes a batch of the local store and ends like `cowork run`: the summary on stderr, the
/// envelope on stdout with `--output-format json`, the verdict's exit code.
async fn resume_local(
    args: &ResumeArgs,
    store_dir: &Path,
    batch_id: &BatchId,
) -> Result<i32, CliError> {
    let store = Arc::new(DirArtifactStore::new(store_dir));
    let admission = crate::connect::Admission::from_args(&args.admission)?;
    let embedded = crate::embedded::EmbeddedRun {
        store: store.clone(),
        store_dir: store_dir.to_path_buf(),
        harness_bin: args.harness_bin.clone(),
        harness: crate::harness_process::HarnessProcess::from_args(&args.harness)?,
        slots: args.slots,
        replay_pack: cowork_worker::executor::replay_pack::DEFAULT_REPLAY_PACK,
        window: args.window,
        usage_pause: admission.usage_pause,
        model_limits: admission.model_limits,
        keep_work: args.keep_work,
        quiet: args.quiet,
        started: Instant::now(),
        // `resume` uses the stored batch's own command (`run`, `record`, `replay`, `eval`).
        command: BatchMode::Run.envelope_command(),
        ui: None,
        // The stored batch's own hooks, signed with COWORK_NOTIFY_SECRET (`embedded::resume`).
        notifier: None,
    };
    // The stored batch's executor is read later: the temp dir a harness needs is checked too.
    crate::writable_dirs::check_writable(&crate::writable_dirs::store_dirs(store_dir, true))?;
    let resumed = crate::embedded::resume(&embedded, batch_id).await?;
    let outcome = resumed.outcome;
    if resumed.plan.mode == BatchMode::Eval {
        // The eval report of an eval batch, as the coordinator stores it when it decides one.
        cowork_coordinator::eval::store_eval_document(store.as_ref(), &resumed.plan, &outcome)
            .await
            .with_context(|| format!("storing the eval report of batch {batch_id}"))?;
    }
    crate::embedded::print_local_outcome(&outcome, store_dir, batch_id, args.output_format).await
}

/// `cowork resume <batch> [--watch]` of a fleet batch: the coordinator runs again what has no
/// result.
async fn resume_remote(args: ResumeArgs) -> Result<i32, CliError> {
    let client = client(&args.client)?;
    let batch = resolve_remote(&args.batch, &client).await?;
    let record = client
        .resume(&batch)
        .await
        .map_err(|e| client_error(e, "resuming the batch"))?;
    eprintln!(
        "batch {}: resumed (generation {}) — jobs without a result run again",
        record.batch_id, record.generation
    );
    if args.watch {
        let options = FollowOptions {
            quiet: args.quiet,
            unserved_timeout: None,
        };
        return watch_to_end(&client, &batch, args.output_format, options).await;
    }
    println!("{}", record.batch_id);
    Ok(0)
}
