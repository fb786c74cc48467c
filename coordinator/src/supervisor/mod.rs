//! The batch supervisor: drives one batch's [`Admission`] (the pure state machine of
//! `cowork_core::admission`, which holds every rule) with the ports — it catches up with the
//! batch's event log, then publishes what admission decides and feeds it what happens, until
//! the batch is decided; then it stores `rollup.json`, `envelope.json` and `stats.json`.
//!
//! The supervisor keeps no state of its own that the event log does not hold: before it admits
//! anything it folds the batch's existing events (catch-up), so a coordinator that restarts in
//! the middle of a batch knows which jobs finished and never admits them again. Jobs admitted
//! before the restart and not finished are published again; the queue deduplicates them by
//! message id within its duplicate window. A job declared lost is folded through a `finished`
//! event the supervisor publishes, so a restart folds it the same way.
//!
//! Two tokens stop supervision, with different meanings: `cancel` cancels the batch (admission
//! stops at once, queued jobs are withdrawn, started jobs finish and are folded or discarded,
//! and the result is [`SuperviseEnd::Cancelled`]); `shutdown` stops the process (supervision
//! returns [`SuperviseError::Cancelled`] at once and the batch stays `running` for the next
//! coordinator to resume).
//!
//! A [`LiveLink`] connects a supervised batch to the people watching it: the controls of its
//! record come in (pause, resume of dispatch, adjusted limits), and its live view goes out, at
//! most every [`LIVE_EVERY`], never per event.

mod documents;
mod error;
mod gate;
mod live;
mod options;
mod outcome;

use std::collections::HashMap;
use std::sync::Arc;

use cowork_core::admission::{Admission, AdmissionConfig, Decision, End, Input, Note};
use cowork_core::plan::Plan;
use cowork_core::reduce::BatchShape;
use cowork_fabric::events::EventSubscription;
use cowork_fabric::queue::{LostJob, LostJobs};
use cowork_fabric::{ArtifactStore, EventError};
use cowork_schema::api::ProgressSnapshot;
use cowork_schema::batch::{BatchFlags, PlanKindName, PlanSummary};
use cowork_schema::event::{JobEvent, JobEventKind};
use cowork_schema::ids::{JobId, UnitRef};
use cowork_schema::layout::BatchKey;

use futures::StreamExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use cowork_core::admission::{DEFAULT_DEADLINE_GRACE, DEFAULT_SPECULATION};
pub use documents::{
    ENVELOPE_FILE, EnvelopeHead, LocateResult, StoredEnvelope, build_envelope, copy_envelope,
    decorated_result, rollup_bytes, spool_envelope, store_rollup,
};
pub use error::SuperviseError;
pub use live::{LIVE_EVERY, LiveLink, LiveSnapshotSender, UnitRunsRequest};
use options::admission_window;
pub use options::{
    CoordinatorPorts, DEFAULT_HISTORY_BATCHES, DEFAULT_USAGE_PAUSE, DEFAULT_USAGE_PAUSE_MAX,
    FairShareLink, REPLAY_MIN_WINDOW, SharedFairShare, SharedModelLimits, SuperviseOptions,
    SuperviseSignals,
};
pub use outcome::{BatchOutcome, SuperviseEnd};

/// The reducer's view of a planned batch, from its stored summary (so a live batch and a
/// re-judged stored batch are shaped by the same code).
pub fn shape_from_summary(summary: &PlanSummary, flags: &BatchFlags) -> BatchShape {
    BatchShape::from_summary(summary, flags)
}

/// The unit reference of unit `index` in a plan of `kind`.
pub fn unit_ref(kind: PlanKindName, index: u32) -> UnitRef {
    match kind {
        PlanKindName::Files => UnitRef::File(index),
        PlanKindName::Matrix => UnitRef::Cell(index),
    }
}

/// Supervises one batch to its end: catches up with the batch's stored events, admits the
/// rest, folds, and on a decision stores `rollup.json`, `envelope.json` and `stats.json`.
#[tracing::instrument(skip_all, fields(batch_id = %plan.batch_id))]
pub async fn supervise(
    ports: &CoordinatorPorts,
    plan: &Plan,
    options: &SuperviseOptions,
    progress_tx: &watch::Sender<ProgressSnapshot>,
    signals: SuperviseSignals,
) -> Result<SuperviseEnd, SuperviseError> {
    // Its seat at the fair share goes with the admission; batches waiting for their share
    // must hear of it once it is gone, so this guard is dropped after `batch`.
    let _wake_sharers = options
        .fair_share
        .as_ref()
        .map(|link| ShareWakeOnDrop(Arc::clone(&link.shared)));
    let mut batch = Supervised::start(ports, plan, options).await?;
    let mut live = live::LiveFeed::new(signals.live.clone());
    if let Some(controls) = live.controls_now() {
        batch.admission.apply(Input::Controls(controls), now());
    }
    // The strip requests of the live page are answered only by this supervision; the lock is
    // held across the whole of it (every await below), and a later supervision of the same
    // batch takes it once this one returned.
    let mut unit_requests = live.lock_unit_requests().await;
    // A dropped supervision (error, shutdown) gives its model slots back; other batches
    // waiting for one must hear of it.
    let _wake_others = WakeOnDrop(Arc::clone(&options.model_limits));
    let mut share_changes = options
        .fair_share
        .as_ref()
        .map(|link| link.shared.subscribe());
    batch.catch_up(&signals.shutdown).await?;
    live.publish(&batch.admission, now());
    let end = loop {
        if signals.cancel.is_cancelled() && !batch.cancel_seen {
            batch.cancel_seen = true;
            batch.admission.apply(Input::Cancel, now());
        }
        if let Some(changes) = share_changes.as_mut() {
            // Every change of the share from here on wakes a batch waiting for it.
            changes.borrow_and_update();
        }
        let decision = batch.admission.next(now());
        if decision.share_freed
            && let Some(link) = &options.fair_share
        {
            link.shared.notify();
        }
        if batch.carry_out(&decision).await? {
            // Queued jobs were withdrawn: decide again at once.
            continue;
        }
        if let Some(end) = decision.end {
            break end;
        }
        progress_tx.send_replace(batch.progress_now());
        live.publish_if_due(&batch.admission, now());
        let waits = Waits {
            decision: &decision,
            signals: &signals,
            live: &mut live,
            unit_requests: unit_requests.as_deref_mut(),
            share_changes: share_changes.as_mut(),
        };
        if let Some(input) = batch.next_input(waits).await? {
            let input = batch.gate_live(input).await;
            batch.fold(input);
            live.touch();
        }
    };
    progress_tx.send_replace(batch.progress_now());
    live.publish(&batch.admission, now());
    match end {
        End::Cancelled => Ok(SuperviseEnd::Cancelled {
            progress: Box::new(batch.admission.progress().clone()),
        }),
        End::Decided => {
            let end = batch.conclude().await?;
            // The reduction's count of discarded runs includes outcomes that were buffered
            // when a lower index decided their unit, which the live count could not see: the
            // last snapshot agrees with the summary.
            if let SuperviseEnd::Decided(outcome) = &end {
                progress_tx.send_replace(outcome.progress.clone());
            }
            Ok(end)
        }
    }
}

/// The supervisor's clock, on tokio's time so that tests can pause it.
fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

impl Supervised<'_> {
    /// The batch's progress with its overdue jobs named, their times on the wall clock (what
    /// status readers compare with their own).
    fn progress_now(&self) -> ProgressSnapshot {
        let mut progress = self.admission.progress().clone();
        // Wall clock: status readers compare these times with their own.
        let wall_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
        progress.overdue_jobs = self
            .admission
            .overdue_jobs(now())
            .into_iter()
            .map(|(job_id, worker_id, past)| {
                let past_ms = u64::try_from(past.as_millis()).unwrap_or(u64::MAX);
                cowork_schema::api::OverdueJob {
                    job_id: job_id.to_string(),
                    worker_id,
                    // Whole seconds: the snapshot changes only when the list does.
                    overdue_since_ms: wall_ms.saturating_sub(past_ms) / 1000 * 1000,
                }
            })
            .collect();
        progress
    }
}

struct WakeOnDrop(Arc<SharedModelLimits>);

impl Drop for WakeOnDrop {
    fn drop(&mut self) {
        self.0.notify_released();
    }
}

struct ShareWakeOnDrop(Arc<SharedFairShare>);

impl Drop for ShareWakeOnDrop {
    fn drop(&mut self) {
        self.0.notify();
    }
}

/// What [`Supervised::next_input`] waits on.
struct Waits<'w> {
    decision: &'w Decision,
    signals: &'w SuperviseSignals,
    live: &'w mut live::LiveFeed,
    unit_requests: Option<&'w mut tokio::sync::mpsc::Receiver<UnitRunsRequest>>,
    share_changes: Option<&'w mut watch::Receiver<u64>>,
}

/// One batch under supervision.
struct Supervised<'a> {
    ports: &'a CoordinatorPorts,
    plan: &'a Plan,
    options: &'a SuperviseOptions,
    admission: Admission,
    subscription: Box<dyn EventSubscription>,
    /// Events in the log when supervision started: folded before anything is admitted.
    caught_up_to: u64,
    cancel_seen: bool,
    /// Trace context of each admitted, unfinished job, for the span of its fold.
    traceparents: HashMap<JobId, String>,
    /// Jobs the queue gave up on (JetStream's max-deliveries and terminated advisories);
    /// `None` once the queue closed the stream.
    lost: Option<LostJobs>,
    /// The queue sequence of each admitted, unfinished job, and back: an advisory about a
    /// message that is gone names the job only by its sequence. Bounded by the window.
    published: PublishedJobs,
    /// Which events are folded (forged or misrouted ones are refused).
    gate: gate::EventGate,
}

/// Queue sequence ↔ job of the admitted, unfinished jobs.
#[derive(Default)]
struct PublishedJobs {
    job_at: HashMap<u64, JobId>,
    seq_of: HashMap<JobId, u64>,
}

impl PublishedJobs {
    fn insert(&mut self, seq: u64, job_id: JobId) {
        if let Some(old) = self.seq_of.insert(job_id.clone(), seq) {
            self.job_at.remove(&old);
        }
        self.job_at.insert(seq, job_id);
    }

    fn finished(&mut self, job_id: &JobId) {
        if let Some(seq) = self.seq_of.remove(job_id) {
            self.job_at.remove(&seq);
        }
    }
}

impl<'a> Supervised<'a> {
    async fn start(
        ports: &'a CoordinatorPorts,
        plan: &'a Plan,
        options: &'a SuperviseOptions,
    ) -> Result<Supervised<'a>, SuperviseError> {
        let events_error = |source| SuperviseError::Events {
            batch_id: plan.batch_id.to_string(),
            source,
        };
        let config = AdmissionConfig {
            window: admission_window(options),
            speculation: options.speculation,
            usage_pause: options.usage_pause,
            usage_pause_max: options.usage_pause_max,
            deadline_grace: options.deadline_grace,
            model_limits: Arc::clone(&options.model_limits.limits),
            expected_run_ms: expected_run_ms(ports.store.as_ref(), plan, options).await,
            fair_share: options.fair_share.as_ref().map(|seat| seat.claim()),
        };
        let mut admission =
            Admission::new(plan, config).map_err(|error| SuperviseError::Shape {
                message: error.to_string(),
            })?;
        admission.use_fleet_prices(&options.prices);
        let caught_up_to = ports
            .events
            .last_sequence(&plan.batch_id)
            .await
            .map_err(events_error)?;
        let subscription = ports
            .events
            .subscribe(&plan.batch_id, 1)
            .await
            .map_err(events_error)?;
        // Subscribed before the first publish: an advisory sent before it would be missed (the
        // job's deadline would still catch it, only later).
        let lost = ports
            .queue
            .lost_jobs()
            .await
            .map_err(|source| SuperviseError::Publish {
                job_id: format!("{} (subscribing to lost-job advisories)", plan.batch_id),
                source,
            })?;
        Ok(Supervised {
            ports,
            plan,
            options,
            admission,
            subscription,
            caught_up_to,
            cancel_seen: false,
            traceparents: HashMap::new(),
            lost: Some(lost),
            published: PublishedJobs::default(),
            gate: gate::EventGate::new(caught_up_to),
        })
    }

    /// Folds what the log already holds before admitting anything, so a restarted
    /// coordinator never admits a finished job again.
    async fn catch_up(&mut self, shutdown: &CancellationToken) -> Result<(), SuperviseError> {
        let mut seen_seq = 0;
        while seen_seq < self.caught_up_to {
            // Abandoning the wait is safe: nothing was admitted yet, and a later supervisor
            // replays from sequence 1.
            let next = tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Err(SuperviseError::Cancelled),
                next = self.subscription.next() => next,
            };
            let (seq, input) = self.read(next)?;
            seen_seq = seq.max(seen_seq);
            let input = match input {
                Input::Event(event) => {
                    let refused = gate::refuses_anywhere(&self.plan.batch_id, &event);
                    self.refuse_or_fold(event, refused)
                }
                other => other,
            };
            self.fold(input);
        }
        self.admission.end_catch_up();
        if self.caught_up_to > 0 {
            let progress = self.admission.progress();
            tracing::info!(
                finished = progress.finished,
                running = progress.running,
                "caught up with the batch's events"
            );
        }
        Ok(())
    }

    /// An item of the subscription as an input, with its sequence number (0 when unknown).
    fn read(
        &self,
        next: Option<Result<(u64, JobEvent), EventError>>,
    ) -> Result<(u64, Input), SuperviseError> {
        match next {
            Some(Ok((seq, event))) => Ok((seq, Input::Event(event))),
            Some(Err(EventError::Malformed { seq, message })) => {
                // One undecodable event (a newer peer's, a stray publish) must not end the
                // batch: it is counted and skipped.
                tracing::warn!(seq, error = %message, "malformed event skipped");
                Ok((seq, Input::MalformedEvent))
            }
            Some(Err(source)) => Err(SuperviseError::Events {
                batch_id: self.plan.batch_id.to_string(),
                source,
            }),
            None => Err(SuperviseError::EventsClosed {
                batch_id: self.plan.batch_id.to_string(),
            }),
        }
    }

    /// A live input as the gate lets it through: an event it refuses becomes
    /// [`Input::RefusedEvent`].
    async fn gate_live(&mut self, input: Input) -> Input {
        let Input::Event(event) = input else {
            return input;
        };
        let refused = self
            .gate
            .refuses_live(
                self.ports.queue.as_ref(),
                &self.admission,
                &self.plan.batch_id,
                &event,
            )
            .await;
        self.refuse_or_fold(event, refused)
    }

    /// `event` as an input: refused (logged with the worker id it claims) or to be folded.
    fn refuse_or_fold(&self, event: JobEvent, refused: Option<String>) -> Input {
        match refused {
            None => Input::Event(event),
            Some(reason) => {
                tracing::warn!(
                    job_id = %event.job_id,
                    worker_id = %cowork_core::safe_text::for_terminal(&event.worker_id),
                    attempt = event.attempt,
                    reason = %reason,
                    "event refused: not folded"
                );
                Input::RefusedEvent
            }
        }
    }

    /// Feeds an input to admission; the fold of a job's outcome closes its trace (admit →
    /// pull → run → upload → fold).
    fn fold(&mut self, input: Input) {
        let finished_job = match &input {
            Input::Event(event) if matches!(event.event, JobEventKind::Finished { .. }) => {
                Some(event.job_id.clone())
            }
            _ => None,
        };
        let traceparent = finished_job.as_ref().and_then(|job_id| {
            self.published.finished(job_id);
            self.traceparents.remove(job_id)
        });
        let span = match (&input, traceparent) {
            (Input::Event(event), Some(traceparent)) => {
                let span = tracing::info_span!(
                    "fold",
                    job_id = %event.job_id,
                    batch_id = %event.batch_id,
                    attempt = event.attempt
                );
                cowork_fabric::trace_context::continue_trace(&span, Some(&traceparent));
                span
            }
            _ => tracing::Span::none(),
        };
        span.in_scope(|| self.admission.apply(input, now()));
        if let Some(job_id) = finished_job
            && self.admission.has_events_of(&job_id)
        {
            self.gate.finished(&job_id);
        }
    }

    /// Carries out a decision: logs its notes, publishes its jobs and lost-job events, and
    /// withdraws queued jobs. Returns `true` when it withdrew (admission must decide again).
    async fn carry_out(&mut self, decision: &Decision) -> Result<bool, SuperviseError> {
        for note in &decision.notes {
            log_note(note);
            self.notify_of(note);
        }
        if decision.released_slots {
            self.options.model_limits.notify_released();
        }
        let jobs: Vec<_> = decision
            .publish
            .iter()
            .map(|publish| {
                let unit = &self.plan.units[publish.job.unit as usize];
                let mut job = self.plan.job(unit, publish.job.repeat_index);
                job.republished = publish.republished;
                job.dispatch_epoch = self.admission.dispatch_epoch();
                job.leader_term = self.options.leader_term;
                cowork_fabric::trace_context::admit_traced(job)
            })
            .collect();
        // A coordinator whose term as leader ran out (its lease may be another's now)
        // publishes nothing more: it stops as at a shutdown, the leader resumes the batch.
        if !jobs.is_empty()
            && let Some(term) = &self.options.lease_term
            && !term.leads_now()
        {
            tracing::warn!("this coordinator's term as leader ended: supervision stops");
            return Err(SuperviseError::Cancelled);
        }
        if !jobs.is_empty() {
            hold_before_publish().await;
        }
        // Pipelined: the queue keeps a bounded number of publishes in flight and answers
        // each in order.
        let published = self.ports.queue.publish_many(&jobs).await;
        for (job, result) in jobs.iter().zip(published) {
            let published = result.map_err(|source| SuperviseError::Publish {
                job_id: job.job_id.to_string(),
                source,
            })?;
            if let Some(traceparent) = &job.traceparent {
                self.traceparents
                    .insert(job.job_id.clone(), traceparent.clone());
            }
            self.published.insert(published.seq, job.job_id.clone());
            self.gate.published(&job.job_id, job.tier, published.seq);
        }
        for event in &decision.lost {
            self.gate.writes_lost(&event.job_id);
            self.ports
                .events
                .publish(event)
                .await
                .map_err(|source| SuperviseError::Events {
                    batch_id: self.plan.batch_id.to_string(),
                    source,
                })?;
        }
        let mut withdrawn = 0;
        for tier in &decision.withdraw {
            withdrawn += self
                .ports
                .queue
                .withdraw(&self.plan.batch_id, *tier)
                .await
                .map_err(|source| SuperviseError::Withdraw {
                    batch_id: self.plan.batch_id.to_string(),
                    tier: tier.as_str(),
                    source,
                })?;
        }
        if decision.withdraw.is_empty() {
            return Ok(false);
        }
        tracing::info!(
            jobs = withdrawn,
            "queued jobs of the batch withdrawn (a cancel, a pause or a lowered cap)"
        );
        self.admission
            .apply(Input::Withdrawn { jobs: withdrawn }, now());
        Ok(true)
    }

    /// Waits for what comes next: an event, a cancel, a lost job, a released model slot, the
    /// decision's wake-up, a change of the controls, a strip request or the live view's
    /// next turn (`None`: decide again).
    async fn next_input(&mut self, waits: Waits<'_>) -> Result<Option<Input>, SuperviseError> {
        let Waits {
            decision,
            signals,
            live,
            unit_requests,
            share_changes,
        } = waits;
        let share_changed = async {
            let changed = match share_changes {
                Some(changes) => changes.changed().await.is_ok(),
                None => false,
            };
            // A closed channel (the process is shutting down) must not spin the loop.
            if !changed {
                std::future::pending::<()>().await;
            }
        };
        let live_due = live.due_at();
        let controls_changed = live.controls_changed();
        let unit_request = async {
            match unit_requests {
                Some(requests) => requests.recv().await,
                None => std::future::pending().await,
            }
        };
        let wake_at = decision.wake_at.map(tokio::time::Instant::from_std);
        let lost = async {
            match self.lost.as_mut() {
                Some(lost) => lost.next().await,
                None => std::future::pending().await,
            }
        };
        // Waiting may be abandoned: the subscription's position is only advanced by events
        // it returned, and a later supervisor replays from sequence 1. Biased: shutdown wins
        // over a cancel, and a cancel over an event that arrived at the same time.
        tokio::select! {
            biased;
            _ = signals.shutdown.cancelled() => Err(SuperviseError::Cancelled),
            _ = signals.cancel.cancelled(), if !self.cancel_seen => {
                tracing::info!("batch cancelled, admission stopped");
                self.cancel_seen = true;
                Ok(Some(Input::Cancel))
            }
            // A pause, a rate window or a deadline is over: decide again.
            _ = tokio::time::sleep_until(wake_at.unwrap_or_else(tokio::time::Instant::now)), if wake_at.is_some() => Ok(None),
            // Another batch's job of a held model finished: look again.
            _ = self.options.model_limits.released(), if decision.wait_for_release => Ok(None),
            // Another batch freed slots of a tier, or the live slots changed: look again.
            _ = share_changed, if decision.wait_for_share => Ok(None),
            lost = lost => Ok(self.lost_job(lost)),
            next = self.subscription.next() => self.read(next).map(|(_, input)| Some(input)),
            // People changed the batch's controls: admission takes them at once.
            controls = controls_changed => Ok(controls.map(Input::Controls)),
            // The live page asks for one unit's runs.
            request = unit_request => {
                if let Some(request) = request {
                    request.answer(&self.admission);
                }
                Ok(None)
            }
            // Outcomes arrived since the live view was last sent: its turn came.
            _ = tokio::time::sleep_until(live_due.unwrap_or_else(tokio::time::Instant::now)), if live_due.is_some() => Ok(None),
        }
    }

    /// A job the queue gave up on, as an input when it is one of this batch's current jobs
    /// (`None`: another batch's, an earlier generation's, or the queue closed the stream).
    fn lost_job(&mut self, lost: Option<LostJob>) -> Option<Input> {
        let Some(lost) = lost else {
            self.lost = None;
            return None;
        };
        let job_id = match &lost.job {
            Some(job)
                if job.batch_id == self.plan.batch_id && job.generation == self.plan.generation =>
            {
                job.job_id.clone()
            }
            Some(_) => return None,
            None => self.published.job_at.get(&lost.stream_seq)?.clone(),
        };
        tracing::warn!(job_id = %job_id, reason = ?lost.reason, "the queue gave up on a job: folding it as an infrastructure error");
        Some(Input::JobLost(job_id))
    }

    /// Stores the decided batch's documents.
    async fn conclude(self) -> Result<SuperviseEnd, SuperviseError> {
        let store = self.ports.store.as_ref();
        let batch_id = &self.plan.batch_id;
        let reduction = self
            .admission
            .finish()
            .map_err(|_| SuperviseError::Incomplete {
                batch_id: batch_id.to_string(),
            })?;
        let rollup_json = store_rollup(store, batch_id, &reduction, &self.options.command).await?;
        let fleet = self.admission.fleet_meta(&reduction);
        let envelope = documents::store_envelope(
            &self.ports.store,
            &self.admission,
            &reduction,
            &self.options.command,
            &fleet,
        )
        .await?;
        let stats = documents::store_stats(store, &self.admission, &reduction, batch_id).await;
        let mut progress = self.admission.progress().clone();
        progress.discarded = reduction.discarded.len() as u64;
        progress.held_by = None;
        progress.paused_tiers.clear();
        Ok(SuperviseEnd::Decided(Box::new(BatchOutcome {
            exit_code: reduction.exit_code,
            reduction,
            rollup_json,
            fleet,
            envelope_head: envelope.head,
            envelope_key: BatchKey::new(batch_id).envelope().into_string(),
            progress,
            stats,
            envelope_spool: envelope.spool,
        })))
    }
}

impl Supervised<'_> {
    /// Tells the batch's hooks of a budget stop.
    fn notify_of(&self, note: &Note) {
        if let (
            Note::BudgetStopped {
                spent_usd,
                cap_usd,
                units,
            },
            Some(notifier),
        ) = (note, &self.options.notifier)
        {
            notifier.send(cowork_core::notify::NotifyEvent::BudgetStop {
                batch_id: self.plan.batch_id.clone(),
                spent_usd: *spent_usd,
                cap_usd: *cap_usd,
                units: *units as u64,
            });
        }
    }
}

/// Logs what admission noted.
fn log_note(note: &Note) {
    match note {
        Note::Paused { tier, pause } => tracing::warn!(
            tier = tier.as_str(),
            pause_ms = pause.as_millis() as u64,
            "usage limit reported: pausing the tier's dispatch"
        ),
        Note::BudgetStopped {
            spent_usd,
            cap_usd,
            units,
        } => tracing::warn!(
            cap_usd,
            spent_usd,
            units,
            "batch budget reached: open units stop as budget stops"
        ),
        Note::Republished { job_id } => tracing::warn!(
            job_id = %job_id,
            "job did not report back within its deadline: published again"
        ),
        Note::Lost { job_id } => tracing::error!(
            job_id = %job_id,
            "job never reported back: folded as an infrastructure error"
        ),
        Note::ForeignJob { job_id } => {
            tracing::warn!(job_id = %job_id, "event for a job this batch does not have, ignored");
        }
        Note::SequentialStopped(stop) => tracing::info!(
            look = stop.look,
            looks = stop.looks,
            pairs = stop.pairs,
            planned_pairs = stop.planned_pairs,
            "decided early by the sequential test: nothing more is admitted"
        ),
    }
}

/// The expected run time of each unit from earlier batches' stats, when history is on and
/// the batch has no batch budget (whose stop depends on the admission order). Unreadable
/// history is no history. The history is the process's shared read, not one per start.
async fn expected_run_ms(
    store: &dyn ArtifactStore,
    plan: &Plan,
    options: &SuperviseOptions,
) -> Vec<Option<u64>> {
    if options.history_batches == 0 || plan.flags.batch_budget_usd.is_some() || plan.interleave {
        return Vec::new();
    }
    let history = options
        .history
        .recent(store, options.history_batches, Some(&plan.batch_id))
        .await;
    let estimates = cowork_core::history::estimates(&history);
    plan.units
        .iter()
        .map(|unit| {
            estimates
                .get(&unit.label)
                .and_then(|estimate| estimate.run_ms)
        })
        .collect()
}

/// A fault-test hook, off unless `COWORK_TEST_HOLD_BEFORE_PUBLISH` names a directory: the
/// first supervision that finds `<dir>/hold` renames it to `<dir>/held` and waits, after its
/// term check and before its publish, until `<dir>/release` exists. It pauses a leader exactly
/// between the two, which no signal's timing can do, so a test can show the queue's fence
/// refusing what the term check let through (decisions.md#coordinator-lease).
async fn hold_before_publish() {
    static DIR: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let Some(dir) = DIR.get_or_init(|| {
        std::env::var_os("COWORK_TEST_HOLD_BEFORE_PUBLISH").map(std::path::PathBuf::from)
    }) else {
        return;
    };
    // The rename is atomic: one supervision of one process holds, the others go on.
    if std::fs::rename(dir.join("hold"), dir.join("held")).is_err() {
        return;
    }
    tracing::warn!(dir = %dir.display(), "held before a publish (COWORK_TEST_HOLD_BEFORE_PUBLISH)");
    while !dir.join("release").exists() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
