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
use std::time::Duration;

use cowork_fabric::{ArtifactError, ArtifactStore, EventError, EventLog, JobQueue, QueueError};
use cowork_schema::api::ProgressSnapshot;
use cowork_schema::batch::{BatchFlags, PlanKindName, PlanSummary};
use cowork_schema::envelope::{Envelope, decorate_result};
use cowork_schema::event::{ErrorCategory, JobEvent, JobEventKind, JobOutcome};
use cowork_schema::ids::{BatchId, JobId, UnitRef};
use cowork_schema::job::{JobSpec, Tier};
use cowork_schema::verdict::{Lane, view_with_rederived_verdict, with_rederived_verdict};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use cowork_core::limits::{ModelLimit, ModelLimits};
use cowork_core::plan::Plan;
use cowork_core::reduce::{
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
    /// First dispatch pause of a tier after a `usage_limit` result (contract C9); it doubles
    /// with each further one in a row, up to `usage_pause_max`.
    pub usage_pause: Duration,
    pub usage_pause_max: Duration,
    /// Per-model admission limits, shared by every batch of this process.
    pub model_limits: Arc<SharedModelLimits>,
}

/// The model limits of one process, shared by its batches, with the wake-up of batches that
/// wait for a model's concurrency.
#[derive(Debug, Default)]
pub struct SharedModelLimits {
    limits: ModelLimits,
    released: tokio::sync::Notify,
}

impl SharedModelLimits {
    pub fn new(rules: Vec<ModelLimit>) -> SharedModelLimits {
        SharedModelLimits {
            limits: ModelLimits::new(rules),
            released: tokio::sync::Notify::new(),
        }
    }

    /// The limits and their counters.
    pub fn limits(&self) -> &ModelLimits {
        &self.limits
    }

    /// Gives back the slot of a finished (or abandoned) job of `model` and wakes the batches
    /// waiting for one.
    pub fn release(&self, model: &str) {
        self.limits.release(model);
        self.released.notify_waiters();
    }

    /// Resolves when some job is released.
    pub async fn released(&self) {
        self.released.notified().await;
    }
}

/// Default first pause after a `usage_limit` result.
pub const DEFAULT_USAGE_PAUSE: Duration = Duration::from_secs(30);
/// Default longest pause after repeated `usage_limit` results.
pub const DEFAULT_USAGE_PAUSE_MAX: Duration = Duration::from_secs(600);

impl SuperviseOptions {
    /// Options with the default pauses.
    pub fn new(window: usize, command: &str) -> SuperviseOptions {
        SuperviseOptions {
            window,
            command: command.to_owned(),
            usage_pause: DEFAULT_USAGE_PAUSE,
            usage_pause_max: DEFAULT_USAGE_PAUSE_MAX,
            model_limits: Arc::default(),
        }
    }
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

/// What a supervised batch produced.
#[derive(Debug)]
pub struct BatchOutcome {
    pub reduction: BatchReduction,
    /// The bytes stored as `batches/<id>/rollup.json` (deterministic).
    pub rollup_json: Vec<u8>,
    pub envelope: Envelope,
    pub exit_code: i32,
    pub progress: ProgressSnapshot,
}

/// How supervision of a batch ended.
#[derive(Debug)]
pub enum SuperviseEnd {
    /// The batch was decided; `rollup.json` and `envelope.json` are stored.
    Decided(Box<BatchOutcome>),
    /// The batch was cancelled before it was decided; nothing was stored.
    Cancelled { progress: ProgressSnapshot },
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
    progress: ProgressSnapshot,
    /// Jobs published by this supervisor and not finished yet.
    outstanding: HashSet<JobId>,
    started: HashSet<JobId>,
    finished: HashSet<JobId>,
    workers: BTreeMap<String, WorkerTally>,
    harness_versions: Vec<String>,
    /// The batch's resume generation: infra failures of earlier generations are run again.
    generation: u32,
    /// Tier of each unit, to pause the right tier on a `usage_limit` result.
    unit_tiers: Vec<Tier>,
    /// Outcomes of earlier generations set aside because the job runs again.
    superseded: u64,
    /// Jobs of this generation killed by `cancel --kill-running` (never folded).
    killed: u64,
    /// Finished runs that reported a cost (the batch budget's per-job estimate).
    priced_runs: u64,
    priced_cost: f64,
    /// Tiers that reported `usage_limit` since the loop last looked (consumed by it).
    usage_limited: Vec<Tier>,
    /// Tiers that reported a completed run without `usage_limit` (ends a pause streak).
    usage_cleared: Vec<Tier>,
}

impl Fold {
    /// Mean cost of the priced runs so far; `None` before the first.
    fn mean_cost(&self) -> Option<f64> {
        (self.priced_runs > 0).then(|| self.priced_cost / self.priced_runs as f64)
    }

    /// Folds one event of the batch.
    fn apply(&mut self, event: JobEvent) {
        match event.event {
            JobEventKind::Started => {
                // A start of an earlier generation says nothing about this one: the job is
                // either finished (its event follows) or runs again.
                if event.generation < self.generation {
                    return;
                }
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
                if event.generation < self.generation && is_rerun_on_resume(&outcome) {
                    // `cowork resume` runs this job again: its earlier infra failure (or
                    // kill) is not a result.
                    self.superseded += 1;
                    return;
                }
                if is_killed(&outcome) {
                    // Killed by `cancel --kill-running`: the run was cut short by us, so it is
                    // not a sample; the batch ends cancelled and `resume` runs the job again.
                    if self.finished.insert(event.job_id.clone()) {
                        self.outstanding.remove(&event.job_id);
                        if self.started.remove(&event.job_id) {
                            self.progress.running = self.progress.running.saturating_sub(1);
                        }
                        self.progress.errored += 1;
                        self.killed += 1;
                    }
                    return;
                }
                if !self.finished.insert(event.job_id.clone()) {
                    self.progress.duplicates += 1;
                    return;
                }
                self.outstanding.remove(&event.job_id);
                if self.started.contains(&event.job_id) {
                    self.progress.running = self.progress.running.saturating_sub(1);
                }
                if event.attempt > 1 {
                    self.progress.redelivered += 1;
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
                let tier = self.unit_tiers.get(unit.index() as usize).copied();
                let cost = match &outcome {
                    JobOutcome::Completed { run } => {
                        let usage_limited = run
                            .signals
                            .iter()
                            .any(|signal| signal.code == "usage_limit");
                        match (tier, usage_limited) {
                            (Some(tier), true) => self.usage_limited.push(tier),
                            (Some(tier), false) => self.usage_cleared.push(tier),
                            (None, _) => {}
                        }
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
                if let Some(cost) = cost {
                    self.priced_runs += 1;
                    self.priced_cost += cost;
                }
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
    progress_tx: &watch::Sender<ProgressSnapshot>,
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
        progress: ProgressSnapshot {
            planned: plan.n_jobs(),
            generation: plan.generation,
            batch_budget_usd: plan.flags.batch_budget_usd,
            ..ProgressSnapshot::default()
        },
        outstanding: HashSet::new(),
        started: HashSet::new(),
        finished: HashSet::new(),
        workers: BTreeMap::new(),
        harness_versions: Vec::new(),
        generation: plan.generation,
        unit_tiers: plan.units.iter().map(|unit| unit.tier).collect(),
        superseded: 0,
        killed: 0,
        priced_runs: 0,
        priced_cost: 0.0,
        usage_limited: Vec::new(),
        usage_cleared: Vec::new(),
    };
    let mut pauses = TierPauses::new(options.usage_pause, options.usage_pause_max);
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
    // Usage limits reported before a restart are history: the pause they caused is over or
    // nearly so, and pausing again on catch-up would only delay the batch.
    fold.usage_limited.clear();
    fold.usage_cleared.clear();
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
    // Jobs passed over because their tier is paused or their model is at its limit, in index
    // order; they go first once they can.
    let mut deferred: std::collections::VecDeque<JobSpec> = std::collections::VecDeque::new();
    let mut slots = LimitSlots {
        limits: Arc::clone(&options.model_limits),
        held: std::collections::HashMap::new(),
        delayed: BTreeMap::new(),
    };
    // Set once the batch budget cannot fit one more job: every open unit stopped as a budget
    // stop, and nothing more is admitted.
    let mut budget_stopped: Option<Vec<String>> = None;
    // Trace context of each admitted, unfinished job, for the span of its fold.
    let mut traceparents: std::collections::HashMap<JobId, String> =
        std::collections::HashMap::new();
    loop {
        // Checked before every admission round, so a cancel that raced an event is never
        // followed by one more admission. Workers kill jobs only for a batch cancelled with
        // `--kill-running`, and they may see that in the registry before this process's cancel
        // signal arrives: a killed job is a cancel too.
        cancelling |= signals.cancel.is_cancelled() || fold.killed > 0;
        let now = tokio::time::Instant::now();
        for tier in fold.usage_limited.drain(..) {
            let pause = pauses.pause(tier, now);
            tracing::warn!(
                tier = tier.as_str(),
                pause_ms = pause.as_millis() as u64,
                "usage limit reported: pausing the tier's dispatch"
            );
        }
        for tier in fold.usage_cleared.drain(..) {
            pauses.clear_streak(tier);
        }
        slots.settle(&fold.outstanding);
        // Why admission waits, and until when (None = until the next event or a release).
        let mut held_by: Option<String> = None;
        let mut wake_at: Option<tokio::time::Instant> = None;
        let mut wait_for_release = false;
        // Drop deferred jobs that became unnecessary (their unit was decided meanwhile).
        deferred.retain(|job| {
            let needed = !fold
                .reducer
                .is_cancellable(job.unit.index(), job.repeat_index);
            if !needed {
                fold.progress.skipped += 1;
            }
            needed
        });
        'admit: while !cancelling && budget_stopped.is_none() && fold.outstanding.len() < window {
            if let Some(cap) = plan.flags.batch_budget_usd {
                // C5 across the whole batch: known spend plus the in-flight estimate (the mean
                // priced run so far) stays within the cap. Until a run reports a price, jobs
                // go one at a time.
                let in_flight = fold.outstanding.len() as f64;
                let fits = match fold.mean_cost() {
                    None => fold.outstanding.is_empty(),
                    Some(mean) => fold.progress.cost_usd + (in_flight + 1.0) * mean <= cap,
                };
                if !fits {
                    if fold.outstanding.is_empty() {
                        // Is a job still needed? The iterator may hold only jobs of units that
                        // are decided already; then admission simply ends.
                        if deferred.is_empty()
                            && let Some(job) = fold.next_admissible(&mut jobs)
                        {
                            deferred.push_front(job);
                        }
                        if !deferred.is_empty() {
                            let stopped = fold.reducer.stop_for_batch_budget();
                            tracing::warn!(
                                cap_usd = cap,
                                spent_usd = fold.progress.cost_usd,
                                units = stopped.len(),
                                "batch budget reached: open units stop as budget stops"
                            );
                            deferred.clear();
                            budget_stopped = Some(stopped);
                        }
                    } else if !deferred.is_empty() || jobs.peek().is_some() {
                        held_by = Some("batch budget".to_owned());
                    }
                    break;
                }
            }
            // The first deferred job that may go now, else the next job in index order.
            // Jobs whose tier is paused or whose model is at its limit are passed over (the
            // reducer folds in index order whatever the admission order, contract §6.3), up
            // to `window` of them.
            let mut chosen: Option<(usize, Option<String>)> = None;
            for (position, job) in deferred.iter().enumerate() {
                match gate(job, &pauses, options.model_limits.limits(), now) {
                    Gate::Go(model) => {
                        chosen = Some((position, model));
                        break;
                    }
                    Gate::Wait(why) => {
                        note_wait(why, &mut held_by, &mut wake_at, &mut wait_for_release, None);
                    }
                }
            }
            let (job, model) = match chosen {
                Some((position, model)) => match deferred.remove(position) {
                    Some(job) => (job, model),
                    None => break,
                },
                None => loop {
                    if deferred.len() >= window {
                        break 'admit;
                    }
                    let Some(job) = fold.next_admissible(&mut jobs) else {
                        break 'admit;
                    };
                    match gate(&job, &pauses, options.model_limits.limits(), now) {
                        Gate::Go(model) => break (job, model),
                        Gate::Wait(why) => {
                            // Counted once per job, when it is first passed over.
                            note_wait(
                                why,
                                &mut held_by,
                                &mut wake_at,
                                &mut wait_for_release,
                                Some(&mut slots.delayed),
                            );
                            deferred.push_back(job);
                        }
                    }
                },
            };
            if let Some(model) = model {
                slots.held.insert(job.job_id.clone(), model);
            }
            let job = cowork_fabric::trace_context::admit_traced(job);
            if let Some(traceparent) = &job.traceparent {
                traceparents.insert(job.job_id.clone(), traceparent.clone());
            }
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
        let admission_over = cancelling
            || budget_stopped.is_some()
            || (deferred.is_empty() && jobs.peek().is_none());
        if fold.outstanding.is_empty() && admission_over {
            break;
        }
        let (resume_at, wait_for_release) = if cancelling || budget_stopped.is_some() {
            (None, false)
        } else {
            (wake_at, wait_for_release)
        };
        fold.progress.held_by = held_by;
        fold.progress.pauses = pauses.count;
        fold.progress.paused_tiers = pauses.paused_tiers(now);
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
            // The pause (or the model's rate window) of the held job is over: admit again.
            _ = tokio::time::sleep_until(resume_at.unwrap_or(now)), if resume_at.is_some() => continue,
            // Another batch's job of the held job's model finished: look again.
            _ = options.model_limits.released(), if wait_for_release => continue,
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
        // The fold of a job's outcome closes its trace (admit → pull → run → upload → fold).
        let traceparent = match event.event {
            JobEventKind::Finished { .. } => traceparents.remove(&event.job_id),
            _ => None,
        };
        let fold_span = match traceparent {
            Some(traceparent) => {
                let span = tracing::info_span!(
                    "fold",
                    job_id = %event.job_id,
                    batch_id = %event.batch_id,
                    attempt = event.attempt
                );
                cowork_fabric::trace_context::continue_trace(&span, Some(&traceparent));
                span
            }
            None => tracing::Span::none(),
        };
        fold_span.in_scope(|| fold.apply(event));
    }
    progress_tx.send_replace(fold.progress.clone());
    // A cancel that came after every needed outcome arrived changes nothing: the batch is
    // decided and is reported as such.
    if cancelling && !fold.reducer.is_complete() {
        return Ok(SuperviseEnd::Cancelled {
            progress: fold.progress,
        });
    }

    fold.progress.pauses = pauses.count;
    fold.progress.paused_tiers.clear();
    fold.progress.held_by = None;
    slots.settle(&fold.outstanding);
    let Fold {
        reducer,
        mut progress,
        workers,
        harness_versions,
        superseded,
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
            "redelivered": progress.redelivered,
            "duplicates": progress.duplicates,
            "rerunOnResume": superseded,
        },
        "generation": plan.generation,
        "batchBudget": match plan.flags.batch_budget_usd {
            None => Value::Null,
            Some(cap) => json!({
                "capUsd": cowork_schema::json_number::to_value(cap),
                "spentUsd": cowork_schema::json_number::to_value(progress.cost_usd),
                "overshootUsd": cowork_schema::json_number::to_value((progress.cost_usd - cap).max(0.0)),
                "stopped": budget_stopped.is_some(),
                "stoppedUnits": budget_stopped.clone().unwrap_or_default(),
                "scope": "batch (all cells; a fleet feature beside the CLI's per-cell --max-budget-usd, contract C6)",
            }),
        },
        "modelLimits": options
            .model_limits
            .limits()
            .snapshot()
            .into_iter()
            .map(|(rule, _, max_in_flight)| {
                let delayed = slots.delayed.get(&rule).copied().unwrap_or(0);
                (rule, json!({ "maxInFlight": max_in_flight, "delayedAdmissions": delayed }))
            })
            .collect::<serde_json::Map<String, Value>>(),
        "usageLimitPauses": {
            "count": pauses.count,
            "totalMs": pauses.total.as_millis() as u64,
            "byTier": pauses
                .by_tier
                .iter()
                .map(|(tier, n)| (tier.as_str().to_owned(), json!(n)))
                .collect::<serde_json::Map<String, Value>>(),
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

/// Whether a job may be admitted now.
enum Gate {
    /// Yes; `Some(model)` when it took a model-limit slot.
    Go(Option<String>),
    Wait(Wait),
}

/// Why a job waits.
enum Wait {
    /// Its tier's dispatch is paused until then (C9).
    Paused(Tier, tokio::time::Instant),
    /// Its model's concurrency is used up (the rule's text).
    Concurrency(String),
    /// Its model's start rate is used up until then.
    Rate(String, tokio::time::Instant),
}

/// Checks a job against the tier pauses and the model limits, taking a model slot if it may go.
fn gate(
    job: &JobSpec,
    pauses: &TierPauses,
    limits: &ModelLimits,
    now: tokio::time::Instant,
) -> Gate {
    if let Some(until) = pauses.paused_until(job.tier, now) {
        return Gate::Wait(Wait::Paused(job.tier, until));
    }
    let model = cowork_core::limits::model_of(job);
    let Some(rule) = limits.rule_of(&model) else {
        return Gate::Go(None);
    };
    match limits.try_acquire(&model, now.into_std()) {
        Ok(()) => Gate::Go(Some(model)),
        Err(cowork_core::limits::Held::Concurrency) => {
            Gate::Wait(Wait::Concurrency(limits.rules()[rule].to_string()))
        }
        Err(cowork_core::limits::Held::RateUntil(until)) => Gate::Wait(Wait::Rate(
            limits.rules()[rule].to_string(),
            tokio::time::Instant::from_std(until),
        )),
    }
}

/// Records why admission waits: the progress text, the earliest timed wake-up, whether a
/// released model slot may unblock it, and the per-rule count of delayed admissions.
fn note_wait(
    why: Wait,
    held_by: &mut Option<String>,
    wake_at: &mut Option<tokio::time::Instant>,
    wait_for_release: &mut bool,
    delayed: Option<&mut BTreeMap<String, u64>>,
) {
    let mut wake = |at: tokio::time::Instant| {
        *wake_at = Some(wake_at.map_or(at, |current| current.min(at)));
    };
    let text = match why {
        Wait::Paused(tier, until) => {
            wake(until);
            format!("usage-limit pause ({})", tier.as_str())
        }
        Wait::Concurrency(rule) => {
            *wait_for_release = true;
            if let Some(delayed) = delayed {
                *delayed.entry(rule.clone()).or_insert(0) += 1;
            }
            format!("model limit {rule}")
        }
        Wait::Rate(rule, until) => {
            wake(until);
            if let Some(delayed) = delayed {
                *delayed.entry(rule.clone()).or_insert(0) += 1;
            }
            format!("model limit {rule}")
        }
    };
    if held_by.is_none() {
        *held_by = Some(text);
    }
}

/// Model-limit slots held by this batch's outstanding jobs; every slot still held is given back
/// when supervision ends, however it ends.
struct LimitSlots {
    limits: Arc<SharedModelLimits>,
    held: std::collections::HashMap<JobId, String>,
    /// Admissions that waited for a model limit, per rule.
    delayed: BTreeMap<String, u64>,
}

impl LimitSlots {
    /// Gives back the slots of jobs that are no longer outstanding.
    fn settle(&mut self, outstanding: &HashSet<JobId>) {
        // No shortcut on equal sizes: `held` covers only limited models, so a finished limited
        // job and an unlimited one in flight can leave the sizes equal with a slot to give back.
        let limits = &self.limits;
        self.held.retain(|job_id, model| {
            let keep = outstanding.contains(job_id);
            if !keep {
                limits.release(model);
            }
            keep
        });
    }
}

impl Drop for LimitSlots {
    fn drop(&mut self) {
        for model in self.held.values() {
            self.limits.release(model);
        }
    }
}

/// `true` for an outcome that `cowork resume` runs again: an infrastructure failure or a
/// job killed by `cancel --kill-running` (neither left a result).
fn is_rerun_on_resume(outcome: &JobOutcome) -> bool {
    matches!(
        outcome,
        JobOutcome::Error {
            category: ErrorCategory::Infra,
            ..
        }
    ) || is_killed(outcome)
}

/// `true` for a job a worker killed (or skipped) for `cancel --kill-running`.
fn is_killed(outcome: &JobOutcome) -> bool {
    matches!(
        outcome,
        JobOutcome::Error {
            category: ErrorCategory::Cancelled,
            ..
        }
    )
}

/// Dispatch pauses per tier after `usage_limit` results (contract C9): the first pause is
/// `base`, each further one in a row doubles it up to `max`; a completed run without a usage
/// limit ends the streak. Pausing changes when jobs start, never how they are counted.
struct TierPauses {
    base: Duration,
    max: Duration,
    until: BTreeMap<Tier, tokio::time::Instant>,
    streak: BTreeMap<Tier, u32>,
    count: u64,
    total: Duration,
    by_tier: BTreeMap<Tier, u64>,
}

impl TierPauses {
    fn new(base: Duration, max: Duration) -> TierPauses {
        TierPauses {
            base,
            max: max.max(base),
            until: BTreeMap::new(),
            streak: BTreeMap::new(),
            count: 0,
            total: Duration::ZERO,
            by_tier: BTreeMap::new(),
        }
    }

    /// Pauses `tier` from `now`; returns the pause. A usage limit reported while the tier is
    /// paused already (jobs admitted before the pause) extends nothing.
    fn pause(&mut self, tier: Tier, now: tokio::time::Instant) -> Duration {
        if let Some(until) = self.paused_until(tier, now) {
            return until - now;
        }
        let streak = self.streak.entry(tier).or_insert(0);
        let pause = self
            .base
            .saturating_mul(1u32 << (*streak).min(16))
            .min(self.max);
        *streak += 1;
        self.until.insert(tier, now + pause);
        self.count += 1;
        self.total += pause;
        *self.by_tier.entry(tier).or_insert(0) += 1;
        pause
    }

    fn clear_streak(&mut self, tier: Tier) {
        self.streak.remove(&tier);
    }

    /// When `tier`'s pause ends, if it is paused at `now`.
    fn paused_until(&self, tier: Tier, now: tokio::time::Instant) -> Option<tokio::time::Instant> {
        self.until.get(&tier).copied().filter(|until| *until > now)
    }

    fn paused_tiers(&self, now: tokio::time::Instant) -> Vec<Tier> {
        self.until
            .iter()
            .filter(|(_, until)| **until > now)
            .map(|(tier, _)| *tier)
            .collect()
    }
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
    let jobs: Vec<JobId> = reduction
        .results
        .iter()
        .map(|(unit_idx, repeat_index)| {
            JobId::new(batch_id, unit_ref(kind, *unit_idx), *repeat_index)
        })
        .collect();
    let reads = jobs.into_iter().map(|job_id| {
        async move {
            // Through the job's record: attempts store their files under their own keys.
            let (key, bytes) = crate::stored_job::read_result(store, &job_id).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn job(batch: &BatchId, index: u32) -> JobId {
        JobId::new(batch, UnitRef::File(0), Some(index))
    }

    #[test]
    fn settling_gives_back_a_finished_jobs_slot_when_the_sizes_happen_to_match() {
        let limits = Arc::new(SharedModelLimits::new(vec![
            ModelLimit::parse("m=1").expect("a valid rule"),
        ]));
        let now = std::time::Instant::now();
        let batch = BatchId::new("20261130-000000-a0b1c2").expect("a valid id");
        let (limited, unlimited) = (job(&batch, 0), job(&batch, 1));
        assert_eq!(limits.limits().try_acquire("m", now), Ok(()));
        let mut slots = LimitSlots {
            limits: Arc::clone(&limits),
            held: std::collections::HashMap::from([(limited, "m".to_owned())]),
            delayed: BTreeMap::new(),
        };
        // The limited job finished; an unlimited one is in flight: one of each, sizes equal.
        slots.settle(&HashSet::from([unlimited]));
        assert!(slots.held.is_empty());
        assert_eq!(
            limits.limits().try_acquire("m", now),
            Ok(()),
            "the slot was given back"
        );
    }
}
