//! Finishing a batch of the local store: `cowork resume <batch>` without a coordinator.
//!
//! The store holds all a resume needs. The spec and the bundle give the plan again, made by the
//! same intake a coordinator runs at start-up, so job ids and units are those of the first run.
//! Each job's record (`outcome.json`) is replayed into a fresh event log as that job's
//! `finished` event, and the batch's generation goes up by one. The supervisor's catch-up then
//! folds those events as it folds a restarted coordinator's stream: finished jobs are kept and
//! never run again, killed runs and infrastructure failures of earlier generations are set
//! aside and run again, together with the jobs that never ran. With the same outcomes, the
//! rollup is byte for byte the one of an undisturbed run.

use anyhow::{Context, anyhow};
use cowork_coordinator::supervisor::BatchOutcome;
use cowork_core::plan::Plan;
use cowork_fabric::bundle::UnpackLimits;
use cowork_fabric::embedded::{DirArtifactStore, MemEventLog};
use cowork_fabric::{ArtifactError, ArtifactStore};
use cowork_schema::batch::{StoredBatch, StoredGeneration};
use cowork_schema::event::{ArtifactRef, JobEvent, JobOutcome, JobRecord, StoredOutcome};
use cowork_schema::ids::{BatchId, JobId};
use cowork_schema::job::PROTOCOL_VERSION;
use cowork_schema::layout::{BatchKey, JobKey, StoreKey, StoreRoot, names};

use super::{EmbeddedRun, lock_batch, run_locked};
use crate::exit::CliError;

use cowork_fabric::artifacts::PARALLEL_READS;

/// Worker id of a replayed record that does not name its worker (an outcome written before
/// job records carried one).
const UNKNOWN_WORKER: &str = "unknown";

/// A local batch finished by [`resume`].
pub struct ResumedBatch {
    /// The batch's plan, at its new generation.
    pub plan: Plan,
    pub outcome: BatchOutcome,
}

/// Finishes the batch `batch_id` of the local store in this process: replans it from its spec
/// and bundle, replays its stored job records, and runs what has no final outcome. The
/// envelope's command is the stored batch's own, whatever `embedded.command` says.
pub async fn resume(embedded: &EmbeddedRun, batch_id: &BatchId) -> Result<ResumedBatch, CliError> {
    let store = embedded.store.as_ref();
    let _lock = lock_batch(store, batch_id)?;
    let stored = read_stored_batch(store, batch_id).await?;
    // The stored batch's hooks, signed with the secret of the environment (`resume` has no
    // notification flags of its own).
    let secret_file = std::env::var_os("COWORK_NOTIFY_SECRET_FILE").map(std::path::PathBuf::from);
    let notifier = match &embedded.notifier {
        None => crate::notify::notifier(
            &stored.spec.notify,
            secret_file.as_deref(),
            cowork_coordinator::notify::ReportLink::LocalStore(
                embedded.store_dir.display().to_string(),
            ),
        )?,
        given => given.clone(),
    };
    let embedded = &EmbeddedRun {
        command: stored.spec.mode.envelope_command(),
        ui: None,
        notifier,
        ..embedded.clone()
    };
    let mut plan = replan(embedded, batch_id, &stored).await?;
    let previous = read_generation(store, batch_id).await?;
    let Some(generation) = previous.checked_add(1) else {
        return Err(CliError::Failed(anyhow!(
            "batch {batch_id} was resumed {previous} times; it cannot be resumed again"
        )));
    };
    // Stored before any job runs: a resume that is interrupted in turn still used its
    // generation, so the next resume never writes the same attempt keys or records.
    write_generation(store, batch_id, generation).await?;
    plan.generation = generation;

    // The records are replayed while the supervisor folds them, never all at once: counted
    // first (the supervisor catches up to that many events before it admits a job), then
    // published at the supervisor's pace, at most `REPLAY_ROOM` held at a time. A million-job
    // batch's records held as events were ~1.5 KiB each.
    let n_records = count_records(store, &plan, previous).await?;
    if !embedded.quiet {
        eprintln!(
            "batch {batch_id}: resumed in this process (generation {generation}) from \
             {n_records} stored job outcomes of {} jobs; jobs without one, killed runs and \
             infrastructure failures run now",
            plan.n_jobs()
        );
    }
    let events = MemEventLog::pruned_after_read();
    events.expect_events(&plan.batch_id, n_records);
    let (replayed, outcome) = {
        let replay = replay_records(store, &plan, previous, n_records, &events);
        let run = run_locked(embedded, &plan, "batch", events.clone());
        tokio::pin!(replay, run);
        let mut replayed = None;
        let outcome = loop {
            tokio::select! {
                done = &mut replay, if replayed.is_none() => {
                    // A replay that fails leaves the supervisor waiting for the events it was
                    // promised: closing the log ends it before it admits anything.
                    if done.is_err() {
                        events.close();
                    }
                    replayed = Some(done);
                }
                outcome = &mut run => break outcome,
            }
        };
        (replayed, outcome)
    };
    if let Some(Err(error)) = replayed {
        return Err(error);
    }
    Ok(ResumedBatch {
        plan,
        outcome: outcome?,
    })
}

/// How many jobs held in the event log at once while records are replayed.
const REPLAY_ROOM: usize = 1_024;

/// How many jobs of `plan` have a stored record in generations `previous` down to 0: the
/// events [`replay_records`] will publish.
async fn count_records(
    store: &DirArtifactStore,
    plan: &Plan,
    previous: u32,
) -> Result<u64, CliError> {
    use futures::StreamExt;
    let checks = plan.jobs().map(|job| async move {
        // Any generation's record counts; most jobs finished in generation 0, so it goes first.
        for generation in 0..=previous {
            let key = JobKey::new(&job.job_id).record(generation);
            if store
                .exists(key.as_str())
                .await
                .with_context(|| format!("looking for {key}"))?
            {
                return Ok::<_, CliError>(true);
            }
        }
        Ok(false)
    });
    let mut checks = futures::stream::iter(checks).buffered(PARALLEL_READS);
    let mut n_records = 0;
    while let Some(found) = checks.next().await {
        n_records += u64::from(found?);
    }
    Ok(n_records)
}

/// `batches/<id>/spec.json`.
async fn read_stored_batch(
    store: &DirArtifactStore,
    batch_id: &BatchId,
) -> Result<StoredBatch, CliError> {
    let key = BatchKey::new(batch_id).spec();
    let bytes = store
        .get(key.as_str())
        .await
        .with_context(|| format!("reading {key}"))?;
    let stored: StoredBatch =
        serde_json::from_slice(&bytes).with_context(|| format!("{key} is not a batch spec"))?;
    if stored.batch_id != *batch_id {
        return Err(CliError::Failed(anyhow!(
            "{key} describes batch {}, not {batch_id}",
            stored.batch_id
        )));
    }
    Ok(stored)
}

/// The plan of a stored batch, made again from its spec and bundle (the coordinator's intake:
/// the same checks, the same job ids).
async fn replan(
    embedded: &EmbeddedRun,
    batch_id: &BatchId,
    stored: &StoredBatch,
) -> Result<Plan, CliError> {
    let bundle_key = StoreKey::bundle(&stored.spec.bundle_sha256);
    let bundle = embedded
        .store
        .get(bundle_key.as_str())
        .await
        .with_context(|| format!("reading the bundle of batch {batch_id} ({bundle_key})"))?;
    let scratch = StoreRoot::new(&embedded.store_dir).replan_dir();
    let spec = stored.spec.clone();
    let id = batch_id.clone();
    // Unpacking and planning is blocking work, so it runs in `spawn_blocking`.
    let planned = tokio::task::spawn_blocking(move || {
        cowork_coordinator::intake::submitted::plan_from_bundle(
            &spec,
            &bundle,
            id,
            &scratch,
            &UnpackLimits::default(),
        )
    })
    .await
    .context("planning task failed")?;
    let plan = planned.map_err(|problems| {
        CliError::Failed(anyhow!(
            "batch {batch_id} cannot be planned again from its stored spec and bundle:\n  {}",
            problems.join("\n  ")
        ))
    })?;
    if plan.summary() != stored.plan {
        return Err(CliError::Failed(anyhow!(
            "batch {batch_id}: its stored spec and bundle plan other jobs than the batch ran \
             ({spec}'s plan differs); it cannot be resumed",
            spec = names::SPEC
        )));
    }
    Ok(plan)
}

/// The batch's latest resume generation: 0 for a batch never resumed.
async fn read_generation(store: &DirArtifactStore, batch_id: &BatchId) -> Result<u32, CliError> {
    let key = BatchKey::new(batch_id).generation();
    match store.get(key.as_str()).await {
        Ok(bytes) => {
            let stored: StoredGeneration = serde_json::from_slice(&bytes)
                .with_context(|| format!("{key} is not a generation record"))?;
            Ok(stored.generation)
        }
        Err(ArtifactError::NotFound { .. }) => Ok(0),
        Err(error) => Err(CliError::Failed(
            anyhow::Error::new(error).context(format!("reading {key}")),
        )),
    }
}

async fn write_generation(
    store: &DirArtifactStore,
    batch_id: &BatchId,
    generation: u32,
) -> Result<(), CliError> {
    let key = BatchKey::new(batch_id).generation();
    let mut bytes = cowork_schema::json_number::to_vec_pretty(&StoredGeneration { generation })
        .context("serializing the generation record")?;
    bytes.push(b'\n');
    store
        .put(key.as_str(), bytes)
        .await
        .with_context(|| format!("storing {key}"))?;
    Ok(())
}

/// Publishes the newest stored record of every job of `plan` (generations `previous` down to
/// 0) as its `finished` event, exactly the `n_counted` that [`count_records`] found. Jobs are
/// read in index order, a few at a time, and the event log holds at most [`REPLAY_ROOM`] of
/// them. A record beyond the count is refused before it is published: the supervisor stops
/// catching up at the count and would have admitted that job again.
async fn replay_records(
    store: &DirArtifactStore,
    plan: &Plan,
    previous: u32,
    n_counted: u64,
    events: &MemEventLog,
) -> Result<(), CliError> {
    let changed = |n_read: &str| {
        CliError::Failed(anyhow!(
            "batch {}: {n_read} job records were read, {n_counted} were counted a moment \
             before; was the store changed meanwhile? Run the resume again",
            plan.batch_id
        ))
    };
    use futures::StreamExt;
    let reads = plan.jobs().map(|job| async move {
        let record = newest_record(store, &job.job_id, previous).await;
        (job.job_id, record)
    });
    let mut records = futures::stream::iter(reads).buffered(PARALLEL_READS);
    let mut n_replayed = 0;
    while let Some((job_id, record)) = records.next().await {
        let Some(record) = record? else {
            continue;
        };
        if n_replayed == n_counted {
            return Err(changed("more"));
        }
        let event = finished_event(&plan.batch_id, job_id, record);
        events
            .publish_with_room(&event, REPLAY_ROOM)
            .await
            .context("replaying the stored job records")?;
        n_replayed += 1;
    }
    if n_replayed != n_counted {
        return Err(changed(&n_replayed.to_string()));
    }
    Ok(())
}

/// The record of `job_id` from the newest generation that stored one, if any.
async fn newest_record(
    store: &DirArtifactStore,
    job_id: &JobId,
    previous: u32,
) -> Result<Option<JobRecord>, CliError> {
    for generation in (0..=previous).rev() {
        let key = JobKey::new(job_id).record(generation);
        let bytes = match store.get(key.as_str()).await {
            Ok(bytes) => bytes,
            Err(ArtifactError::NotFound { .. }) => continue,
            Err(error) => {
                return Err(CliError::Failed(
                    anyhow::Error::new(error).context(format!("reading {key}")),
                ));
            }
        };
        let record = match StoredOutcome::parse(&bytes).ok() {
            Some(StoredOutcome::Record(record)) => record,
            Some(StoredOutcome::Bare(outcome)) => bare_record(store, job_id, outcome).await?,
            None => {
                return Err(CliError::Failed(anyhow!(
                    "{key} is neither a job record nor a job outcome; remove it to run job \
                     {job_id} again"
                )));
            }
        };
        return Ok(Some(record));
    }
    Ok(None)
}

/// A record for a bare outcome: attempt 1 of generation 0 at the job's flat path, with the
/// reference of its `result.json` when the run completed.
async fn bare_record(
    store: &DirArtifactStore,
    job_id: &JobId,
    outcome: JobOutcome,
) -> Result<JobRecord, CliError> {
    let mut artifacts = Vec::new();
    if matches!(outcome, JobOutcome::Completed { .. }) {
        let key = JobKey::new(job_id).attempt(0, 1).result();
        let bytes = store
            .get(key.as_str())
            .await
            .with_context(|| format!("reading {key}, the result of a completed job"))?;
        artifacts.push(ArtifactRef {
            size: bytes.len() as u64,
            sha256: cowork_fabric::sha256_hex(&bytes),
            key: key.into_string(),
        });
    }
    Ok(JobRecord {
        outcome,
        artifacts,
        attempt: 1,
        generation: 0,
        worker_id: UNKNOWN_WORKER.to_owned(),
        harness_version: None,
        exit_code: None,
        run_ms: 0,
    })
}

/// The `finished` event a stored record stands for.
fn finished_event(batch_id: &BatchId, job_id: JobId, record: JobRecord) -> JobEvent {
    JobEvent {
        protocol: PROTOCOL_VERSION,
        batch_id: batch_id.clone(),
        job_id,
        attempt: record.attempt.max(1),
        generation: record.generation,
        event: record.finished_event(),
        worker_id: record.worker_id,
    }
}
