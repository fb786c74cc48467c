//! The batch supervisor: admits a batch's jobs into the queue in windows and folds the batch's
//! events into the reducer until the batch is decided (brief §4, §7).
//!
//! Admission is lazy and in index order: at most `window` jobs of the batch are outstanding, so
//! an early stop (contract §6.2) or a budget stop only has to skip jobs that were never
//! published. Jobs already running when their unit is decided finish and are reported as
//! discarded (choice C4), never folded.
//!
//! The supervisor keeps no state of its own that the event log does not hold: before it admits
//! anything it folds the batch's existing events (catch-up), so a coordinator that restarts in
//! the middle of a batch knows which jobs finished and never admits them again. Jobs admitted
//! before the restart and not finished are published again; the queue deduplicates them by job
//! id within its duplicate window.
//!
//! Two tokens stop supervision, with different meanings: `cancel` cancels the batch (admission
//! stops at once, admitted jobs finish and are folded or discarded, and the result is
//! [`SuperviseEnd::Cancelled`]); `shutdown` stops the process (supervision returns
//! [`SuperviseError::Cancelled`] at once and the batch stays `running` for the next
//! coordinator to resume).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use cowork_fabric::{ArtifactError, ArtifactStore, EventError, EventLog, JobQueue, QueueError};
use cowork_schema::batch::{BatchFlags, PlanKindName, PlanSummary};
use cowork_schema::envelope::{Envelope, decorate_result};
use cowork_schema::event::{JobEvent, JobEventKind, JobOutcome};
use cowork_schema::ids::{BatchId, JobId, UnitRef};
use cowork_schema::job::JobSpec;
use cowork_schema::verdict::{Lane, view_with_rederived_verdict, with_rederived_verdict};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::plan::Plan;
use crate::reduce::{
    BatchReducer, BatchReduction, BatchShape, Judging, Offer, ShapeKind, StopRules, UnitShape,
};

/// Ports the supervisor uses.
#[derive(Clone)]
pub struct CoordinatorPorts {
    pub queue: Arc<dyn JobQueue>,
    pub events: Arc<dyn EventLog>,
    pub store: Arc<dyn ArtifactStore>,
}

/// Settings of one supervised batch.
#[derive(Clone, Debug)]
pub struct SuperviseOptions {
    /// Jobs of this batch outstanding (published, not finished) at most.
    pub window: usize,
    /// The envelope's `command` (`run`, `record`, `replay`).
    pub command: String,
}

/// The two ways to stop a supervised batch early.
#[derive(Clone, Debug, Default)]
pub struct SuperviseSignals {
    /// Process shutdown: supervision returns [`SuperviseError::Cancelled`] at once and leaves
    /// the batch for the next coordinator to resume.
    pub shutdown: CancellationToken,
    /// Batch cancel: admission stops at once, admitted jobs finish (choice C4), and
    /// supervision returns [`SuperviseEnd::Cancelled`] unless the batch was decided anyway.
    pub cancel: CancellationToken,
}

/// A live snapshot of a batch, for progress bars and status pages.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchProgress {
    /// Jobs the plan holds (before early stops).
    pub planned: u64,
    pub admitted: u64,
    pub running: u64,
    pub finished: u64,
    pub passed: u64,
    pub failed: u64,
    /// Jobs ending unanswered or in error.
    pub errored: u64,
    /// Jobs skipped because their unit was decided first (never admitted).
    pub skipped: u64,
    /// Finished jobs whose unit was already decided (overshoot, C4).
    pub discarded: u64,
    /// Finished events seen more than once for the same job (redeliveries).
    pub duplicates: u64,
    /// Attempts handed back for retry (C8).
    pub retries: u64,
    /// Spend reported by finished runs, folded or not.
    pub cost_usd: f64,
}

impl BatchProgress {
    /// The API's wire form of this snapshot.
    pub fn to_snapshot(&self) -> cowork_schema::api::ProgressSnapshot {
        cowork_schema::api::ProgressSnapshot {
            planned: self.planned,
            admitted: self.admitted,
            running: self.running,
            finished: self.finished,
            passed: self.passed,
            failed: self.failed,
            errored: self.errored,
            skipped: self.skipped,
            discarded: self.discarded,
            duplicates: self.duplicates,
            retries: self.retries,
            cost_usd: self.cost_usd,
        }
    }
}

/// What a supervised batch produced.
#[derive(Debug)]
pub struct BatchOutcome {
    pub reduction: BatchReduction,
    /// The bytes stored as `batches/<id>/rollup.json` (deterministic).
    pub rollup_json: Vec<u8>,
    pub envelope: Envelope,
    pub exit_code: i32,
    pub progress: BatchProgress,
}

/// How supervision of a batch ended.
#[derive(Debug)]
pub enum SuperviseEnd {
    /// The batch was decided; `rollup.json` and `envelope.json` are stored.
    Decided(Box<BatchOutcome>),
    /// The batch was cancelled before it was decided; nothing was stored.
    Cancelled { progress: BatchProgress },
}

/// Why supervision stopped without a decided batch.
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    #[error("publishing job {job_id}")]
    Publish {
        job_id: String,
        #[source]
        source: QueueError,
    },
    #[error("reading the events of batch {batch_id}")]
    Events {
        batch_id: String,
        #[source]
        source: EventError,
    },
    #[error("the event log closed before batch {batch_id} was decided")]
    EventsClosed { batch_id: String },
    #[error("storing or reading {key}")]
    Store {
        key: String,
        #[source]
        source: ArtifactError,
    },
    #[error("stored result {key} is unreadable: {message}")]
    BadResult { key: String, message: String },
    #[error("the plan cannot be reduced: {message}")]
    Shape { message: String },
    #[error("batch supervision was cancelled")]
    Cancelled,
}

impl SuperviseError {
    /// `true` when supervising the batch again may succeed: supervision catches up from the
    /// event log, so a retry after a transient port failure loses nothing.
    pub fn is_transient(&self) -> bool {
        match self {
            SuperviseError::Publish { source, .. } => source.is_transient(),
            SuperviseError::Events { source, .. } => source.is_transient(),
            SuperviseError::Store { source, .. } => source.is_transient(),
            SuperviseError::EventsClosed { .. }
            | SuperviseError::BadResult { .. }
            | SuperviseError::Shape { .. }
            | SuperviseError::Cancelled => false,
        }
    }
}

/// The reducer's view of a planned batch, from its stored summary (so a live batch and a
/// re-judged stored batch are shaped by the same code).
pub fn shape_from_summary(summary: &PlanSummary, flags: &BatchFlags) -> BatchShape {
    BatchShape {
        kind: match summary.kind {
            PlanKindName::Files => ShapeKind::Files,
            PlanKindName::Matrix => ShapeKind::Matrix,
        },
        repeat: summary.repeat,
        units: summary
            .units
            .iter()
            .map(|unit| UnitShape {
                label: unit.label.clone(),
                axes: unit.axes.clone(),
                cell_error: unit.cell_error.clone(),
            })
            .collect(),
        requested_cells: summary.requested_cells,
        truncated: summary.truncated,
        rules: StopRules {
            stop_on_diverge: flags.stop_on_diverge,
            max_budget_usd: flags.max_budget_usd,
        },
        judging: judging_of(flags),
    }
}

/// The judging flags of a batch.
pub fn judging_of(flags: &BatchFlags) -> Judging {
    Judging {
        min_pass_rate: flags.min_pass_rate,
        allow_budget_stop: flags.allow_budget_stop,
        allow_truncated_matrix: flags.allow_truncated_matrix,
    }
}

/// Per-worker counters for the envelope's `fleet` key.
#[derive(Default)]
struct WorkerTally {
    jobs: u64,
    run_ms: u64,
}

/// The fold of a batch's events: the reducer plus the counters the progress and the envelope's
/// `fleet` key report.
struct Fold {
    reducer: BatchReducer,
    progress: BatchProgress,
    /// Jobs published by this supervisor and not finished yet.
    outstanding: HashSet<JobId>,
    started: HashSet<JobId>,
    finished: HashSet<JobId>,
    workers: BTreeMap<String, WorkerTally>,
    harness_versions: Vec<String>,
    attempts_over_one: u64,
}

impl Fold {
    /// Folds one event of the batch.
    fn apply(&mut self, event: JobEvent) {
        match event.event {
            JobEventKind::Started => {
                if !self.finished.contains(&event.job_id) && self.started.insert(event.job_id) {
                    self.progress.running += 1;
                }
            }
            JobEventKind::Failed { will_retry, .. } => {
                if will_retry {
                    self.progress.retries += 1;
                }
            }
            JobEventKind::Finished {
                outcome,
                run_ms,
                harness_version,
                ..
            } => {
                if !self.finished.insert(event.job_id.clone()) {
                    self.progress.duplicates += 1;
                    return;
                }
                self.outstanding.remove(&event.job_id);
                if self.started.contains(&event.job_id) {
                    self.progress.running = self.progress.running.saturating_sub(1);
                }
                if event.attempt > 1 {
                    self.attempts_over_one += 1;
                }
                let tally = self.workers.entry(event.worker_id.clone()).or_default();
                tally.jobs += 1;
                tally.run_ms += run_ms;
                if let Some(version) = harness_version
                    && !self.harness_versions.contains(&version)
                {
                    self.harness_versions.push(version);
                }
                let Some((_, unit, repeat_index)) = JobId::parse(event.job_id.as_str()) else {
                    tracing::warn!(job_id = %event.job_id, "finished event with a foreign job id");
                    return;
                };
                let cost = match &outcome {
                    JobOutcome::Completed { run } => {
                        if run.pass {
                            self.progress.passed += 1;
                        } else {
                            self.progress.failed += 1;
                        }
                        run.cost_usd
                    }
                    JobOutcome::Unanswered { .. } | JobOutcome::Error { .. } => {
                        self.progress.errored += 1;
                        None
                    }
                };
                self.progress.cost_usd += cost.unwrap_or(0.0);
                self.progress.finished += 1;
                match self.reducer.offer(unit.index(), repeat_index, outcome) {
                    // The live count; the final list comes from the reduction, which also
                    // discards outcomes that were buffered when a lower index decided the unit.
                    Offer::Discarded => self.progress.discarded += 1,
                    Offer::Duplicate => self.progress.duplicates += 1,
                    Offer::Unexpected => {
                        tracing::warn!(job_id = %event.job_id, "finished event for a job this batch does not have");
                    }
                    Offer::Folded | Offer::Buffered => {}
                }
            }
        }
    }

    /// The next job to admit: jobs that already finished (seen during catch-up) are passed
    /// over, and jobs the reducer no longer needs are skipped (contract §6.3).
    fn next_admissible(
        &mut self,
        jobs: &mut std::iter::Peekable<impl Iterator<Item = JobSpec>>,
    ) -> Option<JobSpec> {
        loop {
            let job = jobs.next()?;
            if self.finished.contains(&job.job_id) {
                continue;
            }
            if self
                .reducer
                .is_cancellable(job.unit.index(), job.repeat_index)
            {
                // A job started before a restart is running already: it is not skipped, its
                // outcome arrives and is discarded.
                if !self.started.contains(&job.job_id) {
                    self.progress.skipped += 1;
                }
                continue;
            }
            return Some(job);
        }
    }
}

/// Supervises one batch to its end: catches up with the batch's stored events, admits the
/// rest, folds, and on a decision stores `rollup.json` and `envelope.json`.
#[tracing::instrument(skip_all, fields(batch_id = %plan.batch_id))]
pub async fn supervise(
    ports: &CoordinatorPorts,
    plan: &Plan,
    options: &SuperviseOptions,
    progress_tx: &watch::Sender<BatchProgress>,
    signals: SuperviseSignals,
) -> Result<SuperviseEnd, SuperviseError> {
    let batch_id = plan.batch_id.to_string();
    let summary = plan.summary();
    let events_error = |source| SuperviseError::Events {
        batch_id: batch_id.clone(),
        source,
    };
    let reducer =
        BatchReducer::new(shape_from_summary(&summary, &plan.flags)).map_err(|error| {
            SuperviseError::Shape {
                message: error.to_string(),
            }
        })?;
    let mut fold = Fold {
        reducer,
        progress: BatchProgress {
            planned: plan.n_jobs(),
            ..BatchProgress::default()
        },
        outstanding: HashSet::new(),
        started: HashSet::new(),
        finished: HashSet::new(),
        workers: BTreeMap::new(),
        harness_versions: Vec::new(),
        attempts_over_one: 0,
    };
    let caught_up_to = ports
        .events
        .last_sequence(&plan.batch_id)
        .await
        .map_err(events_error)?;
    let mut subscription = ports
        .events
        .subscribe(&plan.batch_id, 1)
        .await
        .map_err(events_error)?;

    // Catch-up: fold what the log already holds before admitting anything, so a restarted
    // coordinator never admits a finished job again.
    let mut seen_seq = 0;
    while seen_seq < caught_up_to {
        // Abandoning the wait is safe: nothing was admitted yet, and a later supervisor
        // replays from sequence 1.
        let next = tokio::select! {
            biased;
            _ = signals.shutdown.cancelled() => return Err(SuperviseError::Cancelled),
            next = subscription.next() => next,
        };
        let (seq, event) = match next {
            Some(Ok(item)) => item,
            Some(Err(source)) => return Err(events_error(source)),
            None => {
                return Err(SuperviseError::EventsClosed {
                    batch_id: batch_id.clone(),
                });
            }
        };
        seen_seq = seq;
        fold.apply(event);
    }
    // Jobs with an event were admitted by an earlier coordinator.
    fold.progress.admitted = fold.started.union(&fold.finished).count() as u64;
    if caught_up_to > 0 {
        tracing::info!(
            finished = fold.progress.finished,
            running = fold.progress.running,
            "caught up with the batch's events"
        );
    }

    let mut jobs = plan.jobs().peekable();
    let window = options.window.max(1);
    let mut cancelling = signals.cancel.is_cancelled();
    loop {
        // Checked before every admission round, so a cancel that raced an event is never
        // followed by one more admission.
        cancelling |= signals.cancel.is_cancelled();
        while !cancelling && fold.outstanding.len() < window {
            let Some(job) = fold.next_admissible(&mut jobs) else {
                break;
            };
            ports
                .queue
                .publish(&job)
                .await
                .map_err(|source| SuperviseError::Publish {
                    job_id: job.job_id.to_string(),
                    source,
                })?;
            // A job that started before a restart was counted as admitted during catch-up;
            // publishing it again is deduplicated by the queue.
            if !fold.started.contains(&job.job_id) {
                fold.progress.admitted += 1;
            }
            fold.outstanding.insert(job.job_id);
        }
        let admission_over = cancelling || jobs.peek().is_none();
        if fold.outstanding.is_empty() && admission_over {
            break;
        }
        progress_tx.send_replace(fold.progress.clone());

        // Waiting for the next event may be abandoned: the subscription's position is only
        // advanced by events it returned, and a later supervisor replays from sequence 1. A
        // cancel only ends admission; the loop goes on folding until the admitted jobs finish.
        // Biased: shutdown wins over a cancel, and a cancel over an event that arrived at the
        // same time.
        let next = tokio::select! {
            biased;
            _ = signals.shutdown.cancelled() => return Err(SuperviseError::Cancelled),
            _ = signals.cancel.cancelled(), if !cancelling => {
                tracing::info!(outstanding = fold.outstanding.len(), "batch cancelled, admission stopped");
                cancelling = true;
                continue;
            }
            next = subscription.next() => next,
        };
        let (_seq, event) = match next {
            Some(Ok(item)) => item,
            Some(Err(source)) => return Err(events_error(source)),
            None => {
                return Err(SuperviseError::EventsClosed {
                    batch_id: batch_id.clone(),
                });
            }
        };
        fold.apply(event);
    }
    progress_tx.send_replace(fold.progress.clone());
    // A cancel that came after every needed outcome arrived changes nothing: the batch is
    // decided and is reported as such.
    if cancelling && !fold.reducer.is_complete() {
        return Ok(SuperviseEnd::Cancelled {
            progress: fold.progress,
        });
    }

    let Fold {
        reducer,
        mut progress,
        workers,
        harness_versions,
        attempts_over_one,
        ..
    } = fold;
    let reduction = reducer.finish().map_err(|_| SuperviseError::EventsClosed {
        batch_id: batch_id.clone(),
    })?;
    let rollup_json = store_rollup(
        ports.store.as_ref(),
        &plan.batch_id,
        &reduction,
        &options.command,
    )
    .await?;
    let results = collect_results(
        ports.store.as_ref(),
        &plan.batch_id,
        summary.kind,
        &reduction,
    )
    .await?;
    let version = match harness_versions.as_slice() {
        [one] => one.clone(),
        [] => "unknown".to_owned(),
        _ => "mixed".to_owned(),
    };
    progress.discarded = reduction.discarded.len() as u64;
    let discarded: Vec<Value> = reduction
        .discarded
        .iter()
        .map(|job| {
            let job_id = JobId::new(
                &plan.batch_id,
                unit_ref(summary.kind, job.unit),
                job.repeat_index,
            );
            let mut entry = json!({ "job": job_id.as_str(), "completed": job.completed });
            if let Some(cost) = job.cost_usd {
                entry["costUsd"] = cowork_schema::json_number::to_value(cost);
            }
            entry
        })
        .collect();
    let fleet = json!({
        "batchId": batch_id,
        "minPassRate": cowork_schema::json_number::to_value(plan.flags.min_pass_rate),
        "allowBudgetStop": plan.flags.allow_budget_stop,
        "allowTruncatedMatrix": plan.flags.allow_truncated_matrix,
        "exitCode": reduction.exit_code,
        "foldOrder": "index",
        "resultsOrder": "index",
        "executor": plan.executor.as_str(),
        "simulated": reduction.simulated_runs > 0,
        "simulatedRuns": reduction.simulated_runs,
        "harnessVersions": harness_versions,
        "jobs": {
            "planned": progress.planned,
            "admitted": progress.admitted,
            "finished": progress.finished,
            "skipped": progress.skipped,
            "retries": progress.retries,
            "redelivered": attempts_over_one,
            "duplicates": progress.duplicates,
        },
        "discarded": discarded,
        "workers": workers
            .iter()
            .map(|(id, tally)| (id.clone(), json!({ "jobs": tally.jobs, "runMs": tally.run_ms })))
            .collect::<serde_json::Map<String, Value>>(),
    });
    let envelope = build_envelope(&reduction, &version, &options.command, results, fleet);
    store_envelope(ports.store.as_ref(), &plan.batch_id, &envelope).await?;
    let exit_code = reduction.exit_code;
    Ok(SuperviseEnd::Decided(Box::new(BatchOutcome {
        reduction,
        rollup_json,
        envelope,
        exit_code,
        progress,
    })))
}

/// Stores `batches/<id>/rollup.json` and returns its bytes.
pub async fn store_rollup(
    store: &dyn ArtifactStore,
    batch_id: &BatchId,
    reduction: &BatchReduction,
    command: &str,
) -> Result<Vec<u8>, SuperviseError> {
    let rollup_json = rollup_bytes(reduction, command);
    let key = format!("batches/{batch_id}/rollup.json");
    store
        .put(&key, rollup_json.clone())
        .await
        .map_err(|source| SuperviseError::Store { key, source })?;
    Ok(rollup_json)
}

/// The bytes of a batch's `rollup.json`: pretty JSON and a final newline.
pub fn rollup_bytes(reduction: &BatchReduction, command: &str) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(&reduction.to_rollup_doc(command))
        .expect("a rollup document always serializes");
    bytes.push(b'\n');
    bytes
}

/// Stores `batches/<id>/envelope.json` (one line, like the CLI's stdout).
pub async fn store_envelope(
    store: &dyn ArtifactStore,
    batch_id: &BatchId,
    envelope: &Envelope,
) -> Result<(), SuperviseError> {
    let key = format!("batches/{batch_id}/envelope.json");
    let mut bytes = envelope.to_line().into_bytes();
    bytes.push(b'\n');
    store
        .put(&key, bytes)
        .await
        .map_err(|source| SuperviseError::Store { key, source })?;
    Ok(())
}

/// The unit reference of unit `index` in a plan of `kind`.
pub fn unit_ref(kind: PlanKindName, index: u32) -> UnitRef {
    match kind {
        PlanKindName::Files => UnitRef::File(index),
        PlanKindName::Matrix => UnitRef::Cell(index),
    }
}

/// Reads the stored `result.json` of every folded run, decorated for the envelope, in the
/// reduction's results order (choice C3).
pub async fn collect_results(
    store: &dyn ArtifactStore,
    batch_id: &BatchId,
    kind: PlanKindName,
    reduction: &BatchReduction,
) -> Result<Vec<Value>, SuperviseError> {
    use futures::StreamExt;
    // Reads overlap: a large batch holds thousands of results and each read is a round trip to
    // the store. `buffered` keeps the results in the reduction's order (choice C3).
    const PARALLEL_READS: usize = 32;
    let keys: Vec<String> = reduction
        .results
        .iter()
        .map(|(unit_idx, repeat_index)| {
            let job_id = JobId::new(batch_id, unit_ref(kind, *unit_idx), *repeat_index);
            format!(
                "batches/{batch_id}/jobs/{}/result.json",
                job_id.local_part()
            )
        })
        .collect();
    let reads = keys.into_iter().map(|key| {
        async move {
            let bytes = store
                .get(&key)
                .await
                .map_err(|source| SuperviseError::Store {
                    key: key.clone(),
                    source,
                })?;
            let value: Value =
                serde_json::from_slice(&bytes).map_err(|e| SuperviseError::BadResult {
                    key: key.clone(),
                    message: e.to_string(),
                })?;
            let view =
                view_with_rederived_verdict(&value).map_err(|e| SuperviseError::BadResult {
                    key: key.clone(),
                    message: e.to_string(),
                })?;
            // A legacy result without a persisted verdict gets the re-derived one (contract §3.7).
            let value = with_rederived_verdict(value, Lane::Live);
            Ok::<Value, SuperviseError>(decorate_result(value, &view))
        }
    });
    let mut stream = futures::stream::iter(reads).buffered(PARALLEL_READS);
    let mut results = Vec::with_capacity(reduction.results.len());
    while let Some(result) = stream.next().await {
        results.push(result?);
    }
    Ok(results)
}

/// The batch envelope (contract §7 plus the `fleet` key, C15).
pub fn build_envelope(
    reduction: &BatchReduction,
    version: &str,
    command: &str,
    results: Vec<Value>,
    fleet: Value,
) -> Envelope {
    let mut envelope = Envelope::new(version, command);
    envelope.ok = reduction.ok;
    envelope.results = results;
    envelope.rollups = reduction.rollups.clone();
    envelope.matrix = reduction.matrix.clone();
    envelope.matrix_repeat = reduction.matrix_repeat.clone();
    envelope.error = reduction.error.clone();
    envelope.fleet = fleet;
    envelope
}
