//! One delivery of a job, from pull to ack (decisions.md#wire-protocol "Worker protocol").
//!
//! The order is fixed: run → upload the attempt's artifacts → store the job's record
//! (create-if-absent) → publish `finished` and await its acknowledgement → ack the job. A
//! [`Lease`] renews the delivery from the pull to the ack, so a slow store or broker never
//! lets the queue hand a running or finished job to another worker.
//!
//! What may happen to a delivery, and why:
//! - The job speaks another protocol version: handed back for a compatible worker, never run.
//! - A redelivery whose job already has a stored record (an earlier attempt ran it): that
//!   record's `finished` event is published again and the job acked, without running it.
//! - Its batch was cancelled or is already decided: settled as `cancelled` without running.
//! - An infrastructure failure before the harness started: handed back with backoff until
//!   `max_deliver` (harness-behaviour.md#choice-c8) — nothing was spent.
//! - After the harness started, the job is never handed back: if its artifacts cannot be
//!   stored before the deadline, or the store refuses them for good, it ends as
//!   `infra_after_spend` with the run's own outcome carried in the event, and is acked.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use cowork_core::verdict::view_with_rederived_verdict;
use cowork_fabric::Delivery;
use cowork_fabric::queue::Acker;
use cowork_schema::event::{
    ErrorCategory, InfraClass, JobEvent, JobEventKind, JobOutcome, JobRecord,
};
use cowork_schema::job::{JobSpec, PROTOCOL_VERSION};
use cowork_schema::registry::{BatchRecord, BatchState};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::bundle_cache::BundleCache;
use crate::config::{WorkerConfig, WorkerPorts, WorkerStats};
use crate::executor::{Artifact, Classified, ExecOutput, JobContext};
use crate::lease::Lease;
use crate::upload::{
    AttemptKeys, RecordWrite, RetryPolicy, read_record, store_record, upload_artifacts,
};

/// Everything one job task needs.
pub(crate) struct JobRun {
    pub(crate) config: Arc<WorkerConfig>,
    pub(crate) ports: WorkerPorts,
    pub(crate) cache: Arc<BundleCache>,
    /// Specs of recent batches, for [`WorkerConfig::verify_jobs`].
    pub(crate) specs: Arc<crate::admitted::AdmittedSpecs>,
    pub(crate) stats: Arc<WorkerStats>,
    /// Cancelled when the job's batch is cancelled with `--kill-running`.
    pub(crate) kill: CancellationToken,
    /// The job's place in its slot's pack, when it shares the slot with others; taken when the
    /// job runs, given up when it is settled without running.
    pub(crate) seat: std::sync::Mutex<Option<crate::pack::Seat>>,
    /// Cancelled when the worker's drain grace passes: a run still going is cut short and
    /// handed back, not counted as an attempt.
    pub(crate) disrupt: CancellationToken,
}

/// The delivery being settled; its acker is shared with the lease.
struct Held {
    job: JobSpec,
    /// The job's attempt number: events and artifact keys carry it. A re-published job's
    /// deliveries count again from 1 on the queue, so this is `JobSpec::attempt_of` the
    /// delivery count, never a number an earlier publication's attempts used.
    attempt: u32,
    /// The queue's delivery count of this publication, which `max_deliver` bounds.
    delivery: u32,
    acker: Arc<dyn Acker>,
}

impl Held {
    fn keys(&self) -> AttemptKeys<'_> {
        AttemptKeys {
            job: &self.job.job_id,
            generation: self.job.generation,
            attempt: self.attempt,
        }
    }
}

/// A failure before the harness started: nothing was spent, the job may be handed back.
struct BeforeSpend {
    class: InfraClass,
    message: String,
}

/// What a job ended with, before it is stored.
struct Ended {
    outcome: JobOutcome,
    artifacts: Vec<Artifact>,
    /// `true` once the harness (or the simulator) started: the run may have been paid for.
    spawned: bool,
    harness_version: Option<String>,
    exit_code: Option<i32>,
    run_ms: u64,
}

impl Ended {
    /// A job settled without running.
    fn unrun(outcome: JobOutcome) -> Ended {
        Ended {
            outcome,
            artifacts: Vec::new(),
            spawned: false,
            harness_version: None,
            exit_code: None,
            run_ms: 0,
        }
    }
}

/// What a job's batch record says about starting it.
enum BatchSays {
    Run,
    /// Settle it as not run (`finished` with a cancelled outcome).
    Skip(&'static str),
    /// Do not start it and report nothing ([`dispatch_hold`]).
    Hold(&'static str),
    /// Not a job the coordinator admitted (`crate::admitted`): never run it, report nothing.
    Refuse(String),
    /// Whether it was admitted cannot be read now: hand it back.
    Unknown(String),
}

/// Why a job of `generation` must not run, judging by its batch's record; `None` when it may.
/// A decided batch needs no more runs; a cancelled one (plain or `--kill-running`) runs
/// nothing new of the generation that was cancelled — a later `cowork resume` publishes its
/// jobs again under the next generation.
pub(crate) fn skip_reason(record: &BatchRecord, generation: u32) -> Option<&'static str> {
    match record.state {
        BatchState::Done => Some("its batch was already decided when the job was pulled"),
        BatchState::Stopping | BatchState::Cancelled if record.generation == generation => {
            Some("its batch was cancelled before the job started")
        }
        BatchState::Planned
        | BatchState::Running
        | BatchState::Stopping
        | BatchState::Cancelled => None,
    }
}

/// Why a job must not start now although its batch runs: its dispatch is paused, or the job
/// is a publication a pause or a lowered `--max-running` took back (the coordinator publishes
/// it again under a later dispatch epoch). Such a delivery is acked without any event: the coordinator counts the
/// job as not started and admits it again.
pub(crate) fn dispatch_hold(record: &BatchRecord, job: &JobSpec) -> Option<&'static str> {
    if record.generation != job.generation || record.state.is_final() {
        return None;
    }
    if record.controls.paused {
        Some("its batch's dispatch is paused")
    } else if job.dispatch_epoch < record.controls.dispatch_epoch {
        Some("a pause or a lowered cap took this publication back; the job is published again")
    } else {
        None
    }
}

impl JobRun {
    /// Settles one delivery: the lease is held from here until the delivery is acked or
    /// handed back.
    pub(crate) async fn run(self, delivery: Delivery) {
        let Delivery {
            job,
            attempt,
            acker,
        } = delivery;
        let acker: Arc<dyn Acker> = Arc::from(acker);
        let lease = Lease::hold(Arc::clone(&acker), self.renew_every());
        let held = Held {
            attempt: job.attempt_of(attempt),
            delivery: attempt,
            job,
            acker,
        };
        self.settle(&held).await;
        drop(lease);
    }

    fn take_seat(&self) -> Option<crate::pack::Seat> {
        // Only a take happens under the lock; a poisoned one still holds a valid option.
        self.seat
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    fn renew_every(&self) -> Duration {
        self.config
            .renew_every
            .unwrap_or((self.config.ack_wait / 3).max(Duration::from_millis(100)))
    }

    /// Retries of store and broker operations started now give up at this policy's deadline.
    fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            backoff: self.config.backoff,
            deadline: tokio::time::Instant::now() + self.config.store_deadline,
        }
    }

    async fn settle(&self, held: &Held) {
        if held.job.protocol != PROTOCOL_VERSION {
            self.refuse_protocol(held).await;
            return;
        }
        if held.attempt > 1 && self.republish_stored(held).await {
            return;
        }
        // A queued job of a killed, cancelled or decided batch is settled without running: it
        // still ends with a `finished` event, so it counts once.
        let skip = if self.kill.is_cancelled() {
            Some("the batch was cancelled with --kill-running before this job started".to_owned())
        } else {
            match self.batch_skip_reason(held).await {
                BatchSays::Run => None,
                BatchSays::Skip(reason) => Some(format!("not run: {reason}")),
                BatchSays::Hold(reason) => {
                    tracing::info!(
                        reason,
                        "not starting the job: dispatch of its batch is held"
                    );
                    // The queue may have purged it already (then the ack is refused, which
                    // changes nothing).
                    let _ = held.acker.ack().await;
                    return;
                }
                BatchSays::Refuse(reason) => {
                    // No event: the batch (if there is one) never admitted this job, so there
                    // is nothing of it to count; acked, so it is never delivered again.
                    tracing::warn!(reason = %reason, "refusing a job the coordinator did not admit: not run");
                    let _ = held.acker.ack().await;
                    return;
                }
                BatchSays::Unknown(reason) => {
                    if let Some(outcome) = self
                        .hand_back(
                            held,
                            InfraClass::Bundle,
                            format!("checking the job against its batch: {reason}"),
                        )
                        .await
                    {
                        self.store_and_report(held, Ended::unrun(outcome)).await;
                    }
                    return;
                }
            }
        };
        if let Some(message) = skip {
            self.stats.jobs_killed.fetch_add(1, Ordering::Relaxed);
            tracing::info!(reason = %message, "settling the job without running it");
            let outcome = JobOutcome::Error {
                category: ErrorCategory::Cancelled,
                message,
            };
            self.store_and_report(held, Ended::unrun(outcome)).await;
            return;
        }
        // `started` is published while the bundle is fetched and the job runs: nothing waits
        // for its acknowledgement, and joining it here keeps it ahead of `finished` in the log.
        let started = self.publish(held, JobEventKind::Started);
        let (_, ran) = tokio::join!(started, self.execute(held));
        match ran {
            Err(failure) => {
                self.stats
                    .sandbox_starts
                    .count(held.job.tier, Some(failure.class));
                if let Some(outcome) = self.hand_back(held, failure.class, failure.message).await {
                    self.store_and_report(held, Ended::unrun(outcome)).await;
                }
            }
            Ok((output, work_dir)) => {
                self.finish(held, output).await;
                if !self.config.keep_work_dirs {
                    let batch_dir = self.config.work_dir.join(held.job.batch_id.as_str());
                    remove_work_dir(&batch_dir, &work_dir).await;
                }
            }
        }
    }

    /// Fetches the bundle, prepares the work dir and runs the executor.
    async fn execute(&self, held: &Held) -> Result<(ExecOutput, PathBuf), BeforeSpend> {
        let job = &held.job;
        // Held until this returns (the run is over): the cache does not evict it meanwhile.
        let bundle = self
            .cache
            .ensure(&job.bundle_sha256)
            .instrument(tracing::info_span!("pull"))
            .await
            .map_err(|error| BeforeSpend {
                class: InfraClass::Bundle,
                message: error.to_string(),
            })?;
        let work_dir = self
            .config
            .work_dir
            .join(job.batch_id.as_str())
            .join(job.job_id.local_part())
            .join(format!("a{}", held.attempt));
        if let Err(error) = create_work_dir(&work_dir).await {
            return Err(BeforeSpend {
                class: InfraClass::SandboxStart,
                message: format!("creating {}: {error}", work_dir.display()),
            });
        }
        let context = JobContext {
            job: job.clone(),
            bundle_dir: bundle.path().to_path_buf(),
            work_dir: work_dir.clone(),
            attempt: held.attempt,
        };
        // Stopped by a kill of its batch or by the end of the drain grace.
        let cancel = self.kill.child_token();
        let run_cancel = cancel.clone();
        let run = async move {
            match self.take_seat() {
                Some(seat) => seat.execute(context, run_cancel).await,
                None => self.ports.executor.execute(&context, run_cancel).await,
            }
        }
        .instrument(tracing::info_span!("run"));
        tokio::pin!(run);
        let output = tokio::select! {
            output = &mut run => output,
            _ = self.disrupt.cancelled() => {
                cancel.cancel();
                run.await
            }
        };
        self.stats
            .job_run_ms_total
            .fetch_add(output.run_ms, Ordering::Relaxed);
        self.stats.jobs_timed.fetch_add(1, Ordering::Relaxed);
        if self.kill.is_cancelled() {
            self.stats.jobs_killed.fetch_add(1, Ordering::Relaxed);
        }
        Ok((output, work_dir))
    }

    /// Whether the run ended because the drain grace passed (not because its batch was
    /// killed): it has no result, and it runs again elsewhere.
    fn cut_short(&self, output: &ExecOutput) -> bool {
        self.disrupt.is_cancelled()
            && !self.kill.is_cancelled()
            && matches!(
                &output.classified,
                Classified::Error {
                    category: ErrorCategory::Cancelled,
                    ..
                }
            )
    }

    /// Turns the executor's output into the job's outcome and stores and reports it.
    async fn finish(&self, held: &Held, output: ExecOutput) {
        if self.cut_short(&output) {
            let message = "the worker was stopped (SIGTERM) and its drain grace passed: the run was cut short and handed back for another worker".to_owned();
            if let Some(outcome) = self.hand_back(held, InfraClass::WorkerLost, message).await {
                self.store_and_report(held, Ended::unrun(outcome)).await;
            }
            return;
        }
        let starts = &self.stats.sandbox_starts;
        match &output.classified {
            _ if output.spawned => starts.count(held.job.tier, None),
            Classified::Infra { class, .. } => starts.count(held.job.tier, Some(*class)),
            _ => {}
        }
        let outcome = match output.classified {
            Classified::Infra { class, message } => {
                if !output.spawned {
                    if let Some(outcome) = self.hand_back(held, class, message).await {
                        self.store_and_report(held, Ended::unrun(outcome)).await;
                    }
                    return;
                }
                self.stats.jobs_failed_infra.fetch_add(1, Ordering::Relaxed);
                // Choice C8 (harness-behaviour.md#choice-c8): after spend, an infrastructure
                // failure is an error outcome of the job, reported and never silently retried.
                JobOutcome::Error {
                    category: ErrorCategory::Infra,
                    message,
                }
            }
            Classified::Completed { result } => match view_with_rederived_verdict(&result) {
                // A replay spends nothing: the result's cost is the recorded run's, which
                // stays in `result.json`; progress, budgets and history count $0.
                Ok(mut run) if held.job.command == cowork_schema::job::JobCommand::Replay => {
                    run.cost_usd = run.cost_usd.map(|_| 0.0);
                    JobOutcome::Completed { run }
                }
                Ok(run) => JobOutcome::Completed { run },
                Err(error) => JobOutcome::Error {
                    category: ErrorCategory::Internal,
                    message: format!("unreadable result.json: {error}"),
                },
            },
            Classified::Unanswered { message, hint } => {
                self.stats.count_failure("unanswered");
                JobOutcome::Unanswered { message, hint }
            }
            Classified::Error { category, message } => {
                self.stats.count_failure(category.as_str());
                JobOutcome::Error { category, message }
            }
        };
        let ended = Ended {
            outcome,
            artifacts: output.artifacts,
            spawned: output.spawned,
            harness_version: output.harness_version,
            exit_code: output.exit_code,
            run_ms: output.run_ms,
        };
        self.store_and_report(held, ended).await;
    }

    /// Stores the attempt's artifacts and the job's record, publishes `finished`, then acks —
    /// in that order. The first attempt whose record is stored owns the job: a later one
    /// publishes that record instead of its own.
    async fn store_and_report(&self, held: &Held, ended: Ended) {
        // A job settled without running frees its pack to run without it.
        drop(self.take_seat());
        let store = self.ports.store.as_ref();
        let policy = self.retry_policy();
        let keys = held.keys();
        let stored = match upload_artifacts(store, keys, &ended.artifacts, policy)
            .instrument(tracing::info_span!("upload"))
            .await
        {
            Ok(stored) => stored,
            Err(error) => {
                self.unstored(held, ended, error.to_string()).await;
                return;
            }
        };
        let record = JobRecord {
            outcome: ended.outcome,
            artifacts: stored,
            attempt: held.attempt,
            generation: held.job.generation,
            worker_id: self.config.worker_id.clone(),
            harness_version: ended.harness_version,
            exit_code: ended.exit_code,
            run_ms: ended.run_ms,
        };
        let record = match store_record(store, &keys.record(), &record, policy).await {
            Ok(RecordWrite::Created) => record,
            Ok(RecordWrite::Taken(first)) => {
                tracing::info!(
                    stored_attempt = first.attempt,
                    stored_worker_id = %first.worker_id,
                    "another attempt stored this job's record first: reporting that one"
                );
                *first
            }
            Err(error) => {
                let ended = Ended {
                    outcome: record.outcome,
                    artifacts: Vec::new(),
                    spawned: ended.spawned,
                    harness_version: record.harness_version,
                    exit_code: record.exit_code,
                    run_ms: record.run_ms,
                };
                self.unstored(held, ended, error.to_string()).await;
                return;
            }
        };
        self.report_record(held, record.finished_event()).await;
    }

    /// Publishes the `finished` event of a stored record (`JobRecord::finished_event`, or
    /// `reported_again_event` from a delivery that did not run the job), then acks. When the
    /// event cannot be published, the delivery is left to expire: the next one finds the
    /// record and publishes it without running the job again.
    async fn report_record(&self, held: &Held, event: JobEventKind) {
        if !self.publish(held, event).await {
            tracing::error!(
                "the finished event could not be published; the job's record is stored, so its next delivery reports it without running it"
            );
            return;
        }
        self.ack(held).await;
        self.stats.jobs_finished.fetch_add(1, Ordering::Relaxed);
    }

    /// The job's outcome could not be stored. Nothing spent: hand the job back while deliveries
    /// remain. Spent: report the paid run as `infra_after_spend`, its own outcome inline, and
    /// ack — running it again would pay for it twice.
    async fn unstored(&self, held: &Held, ended: Ended, error: String) {
        if !ended.spawned {
            if held.delivery < self.config.max_deliver {
                let message = format!("storing the job's outcome: {error}");
                let handed_back = self.hand_back(held, InfraClass::Upload, message).await;
                debug_assert!(
                    handed_back.is_none(),
                    "deliveries remain, so the job is handed back"
                );
            } else {
                // Out of deliveries with the store still failing: the outcome is reported in
                // the event alone.
                tracing::warn!(error = %error, "the job's outcome could not be stored; reporting it in its event alone");
                self.report_unrecorded(held, ended.outcome).await;
            }
            return;
        }
        self.stats
            .count_failure(ErrorCategory::InfraAfterSpend.as_str());
        tracing::error!(error = %error, "the run's artifacts could not be stored; reporting the paid run without them");
        let outcome = JobOutcome::Error {
            category: ErrorCategory::InfraAfterSpend,
            message: format!(
                "the run ended but its artifacts could not be stored ({error}); it was paid for, so it is not run again"
            ),
        };
        let event = JobEventKind::Finished {
            outcome,
            artifacts: Vec::new(),
            harness_version: ended.harness_version,
            exit_code: ended.exit_code,
            run_ms: ended.run_ms,
            unstored_outcome: Some(ended.outcome),
            from_record_of_attempt: None,
        };
        if self.publish(held, event).await {
            self.ack(held).await;
            self.stats.jobs_finished.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Publishes `finished` for an unrun job whose record could not be stored, then acks.
    async fn report_unrecorded(&self, held: &Held, outcome: JobOutcome) {
        let event = JobEventKind::Finished {
            outcome,
            artifacts: Vec::new(),
            harness_version: None,
            exit_code: None,
            run_ms: 0,
            unstored_outcome: None,
            from_record_of_attempt: None,
        };
        if self.publish(held, event).await {
            self.ack(held).await;
        }
    }

    /// Reports an infrastructure failure before anything was spent. While deliveries remain
    /// the job is handed back with backoff and `None` is returned; on the last one the job's
    /// final outcome (an `infra` error) is returned for the caller to store and report.
    async fn hand_back(
        &self,
        held: &Held,
        class: InfraClass,
        message: String,
    ) -> Option<JobOutcome> {
        let will_retry = held.delivery < self.config.max_deliver;
        tracing::warn!(class = ?class, will_retry, message = %message, "job infrastructure failure");
        self.publish(
            held,
            JobEventKind::Failed {
                class,
                message: message.clone(),
                will_retry,
            },
        )
        .await;
        if will_retry {
            self.stats.jobs_retried.fetch_add(1, Ordering::Relaxed);
            self.nak(held, self.config.backoff.delay(held.delivery))
                .await;
            return None;
        }
        self.stats.jobs_failed_infra.fetch_add(1, Ordering::Relaxed);
        Some(JobOutcome::Error {
            category: ErrorCategory::Infra,
            message,
        })
    }

    /// A job of another protocol version is not run: this worker may misread it. It goes back
    /// to the queue for a worker that speaks its version; on the last delivery it ends as an
    /// infrastructure error, so its batch does not wait for it forever.
    async fn refuse_protocol(&self, held: &Held) {
        tracing::warn!(
            job_protocol = held.job.protocol,
            worker_protocol = PROTOCOL_VERSION,
            "job of another protocol version: handing it back for a worker that speaks it"
        );
        if held.delivery < self.config.max_deliver {
            // At least the ack deadline: a compatible worker has time to pull it meanwhile.
            let delay = self
                .config
                .backoff
                .delay(held.delivery)
                .max(self.config.ack_wait);
            self.nak(held, delay).await;
            return;
        }
        let outcome = JobOutcome::Error {
            category: ErrorCategory::Infra,
            message: format!(
                "the job speaks protocol {} and no worker of that version took it in {} deliveries (the last one speaks protocol {PROTOCOL_VERSION}); run workers of the coordinator's version",
                held.job.protocol, self.config.max_deliver
            ),
        };
        self.store_and_report(held, Ended::unrun(outcome)).await;
    }

    /// On a redelivery: when an earlier attempt stored the job's record, publishes its
    /// `finished` event again and acks, instead of running the job a second time. Returns
    /// `true` when the delivery was settled here.
    async fn republish_stored(&self, held: &Held) -> bool {
        let key = held.keys().record();
        match read_record(self.ports.store.as_ref(), &key, self.retry_policy()).await {
            Ok(Some(record)) => {
                tracing::info!(
                    stored_attempt = record.attempt,
                    stored_worker_id = %record.worker_id,
                    "an earlier attempt already stored this job: reporting it without running it again"
                );
                // Marked, so that a fold which holds this run already (the earlier attempt's
                // ack was lost, not its event) counts a re-ack rather than a duplicate.
                self.report_record(held, record.reported_again_event())
                    .await;
                true
            }
            Ok(None) => false,
            Err(error) => {
                // Not knowing whether the job already ran, running it could pay twice; nothing
                // was spent yet, so handing it back costs only time.
                let message = format!("reading the job's record {key}: {error}");
                if let Some(outcome) = self.hand_back(held, InfraClass::Upload, message).await {
                    self.report_unrecorded(held, outcome).await;
                }
                true
            }
        }
    }

    /// Why the job's batch says not to run it, read from the batch record right before the
    /// job starts. A direct read (not a cached watch) so that a cancel recorded before this
    /// moment is always seen. With [`WorkerConfig::verify_jobs`] the job must also be one its
    /// batch admitted (`crate::admitted`), and a record that cannot be read hands it back;
    /// without it (`cowork run`, whose queue no one else reaches) an unreadable record does not
    /// stop the job.
    async fn batch_skip_reason(&self, held: &Held) -> BatchSays {
        let Some(batches) = self.ports.batches.as_ref() else {
            return BatchSays::Run;
        };
        let verify = self.config.verify_jobs;
        match batches.get(&held.job.batch_id).await {
            Ok(Some((record, _))) => {
                if let Some(reason) = skip_reason(&record, held.job.generation) {
                    return BatchSays::Skip(reason);
                }
                if let Some(reason) = dispatch_hold(&record, &held.job) {
                    return BatchSays::Hold(reason);
                }
                if !verify {
                    return BatchSays::Run;
                }
                match self
                    .specs
                    .check(self.ports.store.as_ref(), &record, &held.job)
                    .await
                {
                    crate::admitted::Checked::Admitted => BatchSays::Run,
                    crate::admitted::Checked::Refused(reason) => BatchSays::Refuse(reason),
                    crate::admitted::Checked::Unknown(reason) => BatchSays::Unknown(reason),
                }
            }
            Ok(None) if verify => BatchSays::Refuse(format!(
                "its batch {} has no record: the coordinator never accepted it",
                held.job.batch_id
            )),
            Ok(None) => BatchSays::Run,
            Err(error) if verify => {
                BatchSays::Unknown(format!("reading the batch record: {error}"))
            }
            Err(error) => {
                tracing::warn!(error = %error, "reading the batch record failed; running the job");
                BatchSays::Run
            }
        }
    }

    async fn ack(&self, held: &Held) {
        // An ack lost to a leader election of the queue would bring the job back after
        // `ack_wait`, to be reported a second time: it is retried, with the lease still
        // renewing, for at most one `ack_wait` (an ack is idempotent).
        let policy = RetryPolicy {
            backoff: self.config.backoff,
            deadline: tokio::time::Instant::now() + self.config.ack_wait,
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let error = match held.acker.ack().await {
                Ok(()) => {
                    self.stats.outages.succeeded("acking a job");
                    return;
                }
                Err(error) => error,
            };
            match policy.next_wait(attempt) {
                Some(wait) if error.is_transient() => {
                    self.stats.outages.failed("acking a job", &error);
                    tokio::time::sleep(wait).await;
                }
                _ => {
                    // The outcome is durable; a redelivery finds the record (or the event) and
                    // reports it again without running the job.
                    tracing::warn!(error = %error, attempt, "ack failed after the finished event was stored");
                    return;
                }
            }
        }
    }

    async fn nak(&self, held: &Held, delay: Duration) {
        if let Err(error) = held.acker.nak(delay).await {
            tracing::warn!(error = %error, "nak failed; the job comes back after ack_wait");
        }
    }

    /// Publishes an event, retrying transient failures until the store deadline; `false` when
    /// it is not durable.
    async fn publish(&self, held: &Held, event: JobEventKind) -> bool {
        let event = JobEvent {
            protocol: PROTOCOL_VERSION,
            batch_id: held.job.batch_id.clone(),
            job_id: held.job.job_id.clone(),
            attempt: held.attempt,
            generation: held.job.generation,
            worker_id: self.config.worker_id.clone(),
            event,
        };
        let policy = self.retry_policy();
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.ports.events.publish(&event).await {
                Ok(_) => {
                    self.stats.outages.succeeded("publishing an event");
                    return true;
                }
                Err(error) if error.is_transient() => {
                    let Some(wait) = policy.next_wait(attempt) else {
                        tracing::error!(error = %error, attempt, "publishing an event failed until the deadline");
                        return false;
                    };
                    self.stats.outages.failed("publishing an event", &error);
                    tokio::time::sleep(wait).await;
                }
                Err(error) => {
                    tracing::error!(error = %error, "publishing an event failed for good");
                    return false;
                }
            }
        }
    }
}

/// Removes an attempt's work dir, then the job's and the cell's directories above it that this
/// left empty, up to the batch's: a million-job sweep would otherwise leave a million empty
/// directories for the end of the batch to remove (longer than the sweep itself took).
async fn remove_work_dir(batch_dir: &Path, work_dir: &Path) {
    let _ = tokio::fs::remove_dir_all(work_dir).await;
    let mut dir = work_dir.parent();
    while let Some(parent) = dir.filter(|dir| dir.starts_with(batch_dir) && *dir != batch_dir) {
        // Fails (and stops) at the first directory another job still uses.
        if tokio::fs::remove_dir(parent).await.is_err() {
            break;
        }
        dir = parent.parent();
    }
}

/// Creates an attempt's work dir and its parents. Another job ending on this worker may
/// remove an emptied parent between the two (`remove_work_dir`); the creation is then tried
/// again rather than failing the job.
async fn create_work_dir(work_dir: &Path) -> std::io::Result<()> {
    let mut tries = 0;
    loop {
        match tokio::fs::create_dir_all(work_dir).await {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && tries < 3 => tries += 1,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cowork_schema::BatchId;

    fn record(state: BatchState, generation: u32) -> BatchRecord {
        BatchRecord {
            batch_id: BatchId::new("b1").expect("valid literal"),
            state,
            spec_sha256: String::new(),
            n_jobs: 1,
            created_at_ms: 0,
            updated_at_ms: 0,
            ok: None,
            exit_code: None,
            eval_verdict: None,
            owner: None,
            generation,
            kill_running: false,
            controls: Default::default(),
            listing: Default::default(),
        }
    }

    #[test]
    fn jobs_of_cancelled_or_decided_batches_are_not_run() {
        let check = |state, record_generation, job_generation, runs: bool| {
            let reason = skip_reason(&record(state, record_generation), job_generation);
            assert_eq!(
                reason.is_none(),
                runs,
                "{state:?} gen {record_generation}, job gen {job_generation}: {reason:?}"
            );
        };
        check(BatchState::Planned, 0, 0, true);
        check(BatchState::Running, 0, 0, true);
        check(BatchState::Stopping, 0, 0, false);
        check(BatchState::Cancelled, 0, 0, false);
        check(BatchState::Done, 0, 0, false);
        // A cancel of generation 0 says nothing about the jobs `resume` publishes as
        // generation 1, and a resumed batch runs the late jobs of generation 0 it still gets.
        check(BatchState::Stopping, 0, 1, true);
        check(BatchState::Running, 1, 0, true);
        check(BatchState::Done, 1, 0, false);
    }
}
