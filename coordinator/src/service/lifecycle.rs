//! A batch's life in this process: accepted and stored, claimed, supervised until final (again
//! after a transient port failure), its end recorded; and every unfinished batch resumed at
//! start-up.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use cowork_core::eval::{EvalGate, document_exit_code, document_verdict_words};
use cowork_core::notify::{NotifyEvent, Verdict};
use cowork_core::plan::Plan;
use cowork_fabric::{ArtifactError, PutOutcome, RegistryError, error_chain};
use cowork_schema::BatchId;
use cowork_schema::api::{BatchEnd, ProgressSnapshot};
use cowork_schema::batch::{BatchMode, StoredBatch};
use cowork_schema::layout::{BatchKey, StoreKey};
use cowork_schema::registry::{BatchListing, BatchRecord, BatchState};

use super::records::now_ms;
use super::{LiveBatch, PORT_RETRY, Service};
use crate::intake::submitted::plan_from_bundle;
use crate::supervisor::{
    SuperviseEnd, SuperviseError, SuperviseOptions, SuperviseSignals, supervise,
};

impl Service {
    /// Stores an accepted batch (bundle, spec, record) and starts supervising it. Nothing is
    /// stored before this is called, i.e. before validation passed. `token_name` is the token
    /// policy it was submitted under, kept in its record.
    pub(crate) async fn accept(
        self: &Arc<Self>,
        stored: StoredBatch,
        bundle: &std::path::Path,
        plan: Plan,
        token_name: Option<String>,
    ) -> Result<BatchRecord, AcceptError> {
        let batch_id = stored.batch_id.clone();
        let bundle_key = StoreKey::bundle(&stored.spec.bundle_sha256).into_string();
        // Streamed from the received file (a multipart upload past the store's threshold).
        // The key is the bundle's digest, so replacing an object already there writes the
        // same bytes.
        self.ports
            .store
            .put_file(&bundle_key, bundle)
            .await
            .map_err(|source| AcceptError::Store {
                key: bundle_key.clone(),
                source,
            })?;
        let spec_key = BatchKey::new(&batch_id).spec().into_string();
        let mut spec_json = cowork_schema::json_number::to_vec_pretty(&stored)
            .expect("a stored batch always serializes");
        spec_json.push(b'\n');
        let spec_sha256 = cowork_fabric::sha256_hex(&spec_json);
        // Create-if-absent: a batch id that collides with an existing batch (two submits in
        // the same second drawing the same suffix) must fail, never replace that batch's spec.
        let created = self
            .ports
            .store
            .put_if_absent(&spec_key, spec_json)
            .await
            .map_err(|source| AcceptError::Store {
                key: spec_key.clone(),
                source,
            })?;
        if created == PutOutcome::AlreadyExists {
            return Err(AcceptError::IdTaken {
                batch_id: batch_id.to_string(),
            });
        }
        let now = now_ms();
        let record = BatchRecord {
            batch_id: batch_id.clone(),
            state: BatchState::Planned,
            spec_sha256,
            n_jobs: plan.n_jobs(),
            created_at_ms: now,
            updated_at_ms: now,
            ok: None,
            exit_code: None,
            eval_verdict: None,
            owner: Some(self.config.coordinator_id.clone()),
            generation: 0,
            kill_running: false,
            controls: Default::default(),
            listing: BatchListing {
                target: Some(stored.spec.target_display.clone()),
                eval: stored.spec.mode == BatchMode::Eval,
                spent_usd: None,
                token_name,
            },
        };
        self.ports
            .batches
            .create(&record)
            .await
            .map_err(|source| AcceptError::Registry {
                batch_id: batch_id.to_string(),
                source,
            })?;
        tracing::info!(batch_id = %batch_id, n_jobs = record.n_jobs, "batch accepted");
        // A large batch gets a Kubernetes Job of workers. Created in a tracked task so the
        // submit does not wait on the API server; a failure is only logged.
        #[cfg(feature = "k8s")]
        if let Some(k8s) = self.config.k8s_worker_jobs.clone() {
            let (batch_id, n_jobs) = (batch_id.clone(), record.n_jobs);
            self.tracker
                .spawn(async move { k8s.batch_accepted(&batch_id, n_jobs).await });
        }
        self.notifier.watch_batch(&batch_id, &stored.spec.notify);
        self.start(plan, stored.spec.mode.envelope_command());
        Ok(record)
    }

    /// Starts (or restarts) supervising `plan` in a tracked task.
    pub(super) fn start(self: &Arc<Self>, plan: Plan, command: &str) {
        let live = {
            let mut map = self.lock_live();
            Arc::clone(map.entry(plan.batch_id.clone()).or_insert_with(|| {
                Arc::new(LiveBatch::new(
                    ProgressSnapshot {
                        planned: plan.n_jobs(),
                        ..ProgressSnapshot::default()
                    },
                    plan.units.iter().map(|unit| unit.tier).collect(),
                    crate::service::StallPolicy::of(&plan.flags),
                ))
            }))
        };
        let service = Arc::clone(self);
        let command = command.to_owned();
        self.tracker
            .spawn(async move { service.run_batch(plan, command, live).await });
    }

    /// Runs one batch to a final state: claims its record, supervises it and records how it
    /// ended.
    #[tracing::instrument(skip_all, fields(batch_id = %plan.batch_id))]
    async fn run_batch(self: Arc<Self>, mut plan: Plan, command: String, live: Arc<LiveBatch>) {
        // The term this supervision belongs to: when it ends (this coordinator lost the
        // lease), the supervision stops and the next leader resumes the batch.
        let term = self.leadership.term_token();
        if term.is_cancelled() {
            return;
        }
        let Some(record) = self.claim(&plan.batch_id, &live).await else {
            return;
        };
        plan.generation = record.generation;
        let token = record.listing.token_name.clone();
        self.refresh_live_slots().await;
        let Some(end) = self
            .supervise_until_final(&plan, &command, &live, token, &term)
            .await
        else {
            return;
        };
        self.record_end(&plan, &live, end).await;
    }

    /// Claims the batch's record for this coordinator (`planned`/`running` → `running`); `None`
    /// when it is final already or cannot be claimed. A `stopping` batch is claimed and its
    /// cancel passed on.
    async fn claim(&self, batch_id: &BatchId, live: &LiveBatch) -> Option<BatchRecord> {
        let owner = self.config.coordinator_id.clone();
        let claimed =
            self.transition_until_written(batch_id, "claiming the batch's record", |record| {
                match record.state {
                    BatchState::Planned | BatchState::Running => {
                        record.state = BatchState::Running;
                        record.owner = Some(owner.clone());
                        true
                    }
                    BatchState::Stopping => {
                        record.owner = Some(owner.clone());
                        true
                    }
                    BatchState::Done | BatchState::Cancelled => false,
                }
            })
            .await;
        let record = match claimed {
            Ok(record) => record,
            Err(error) => {
                // The shutdown path also lands here when the registry is gone; either way the
                // record still says what it said, and the next start resumes it.
                tracing::error!(error = %error, "batch not started: its record could not be claimed");
                return None;
            }
        };
        if record.state.is_final() {
            live.end.send_replace(Some(end_of(&record, None)));
            return None;
        }
        if record.state == BatchState::Stopping {
            live.cancel.cancel();
        }
        // A paused batch stays paused across a restart: its controls are in its record.
        live.controls.send_replace(record.controls.clone());
        Some(record)
    }

    /// Supervises the batch until it is decided, cancelled or fails for good, supervising it
    /// again after a transient port failure; `None` when this process shuts down first (the
    /// batch stays for the next coordinator).
    async fn supervise_until_final(
        &self,
        plan: &Plan,
        command: &str,
        live: &LiveBatch,
        token: Option<String>,
        term: &tokio_util::sync::CancellationToken,
    ) -> Option<FinalState> {
        let ports = self.ports.coordinator_ports();
        let options = SuperviseOptions {
            fair_share: Some(crate::supervisor::FairShareLink {
                shared: Arc::clone(&self.fair_share),
                token,
            }),
            usage_pause: self.config.usage_pause,
            usage_pause_max: self.config.usage_pause_max,
            model_limits: Arc::clone(&self.model_limits),
            history: Arc::clone(&self.history),
            notifier: Some(self.notifier.clone()),
            prices: self.config.prices.clone(),
            lease_term: Some(Arc::clone(&self.leadership.clock)),
            leader_term: self.leadership.term_revision(),
            ..SuperviseOptions::new(self.config.window, command)
        };
        let mut failures = 0u32;
        loop {
            let signals = SuperviseSignals {
                shutdown: term.child_token(),
                cancel: live.cancel.clone(),
                live: live.link(),
            };
            match supervise(&ports, plan, &options, &live.progress, signals).await {
                Ok(SuperviseEnd::Decided(outcome)) => {
                    let end = if plan.mode == BatchMode::Eval {
                        self.eval_end(ports.store.as_ref(), plan, &outcome, term)
                            .await?
                    } else {
                        FinalState {
                            state: BatchState::Done,
                            ok: Some(outcome.reduction.ok),
                            exit_code: Some(outcome.exit_code),
                            eval_verdict: None,
                            message: None,
                            notice: None,
                        }
                    };
                    return Some(self.with_decided_notice(plan, &outcome, end, live).await);
                }
                Ok(SuperviseEnd::Cancelled { .. }) => {
                    let cost_usd = live.progress.borrow().cost_usd;
                    return Some(FinalState {
                        state: BatchState::Cancelled,
                        ok: None,
                        exit_code: None,
                        eval_verdict: None,
                        message: None,
                        notice: Some(NotifyEvent::Cancelled {
                            batch_id: plan.batch_id.clone(),
                            cost_usd,
                        }),
                    });
                }
                Err(SuperviseError::Cancelled) => return None,
                Err(error) if error.is_fenced() => {
                    tracing::warn!(error = %error, "the queue refused this coordinator's publish: a later leader leads");
                    self.leadership.fenced(options.leader_term);
                    return None;
                }
                Err(error) if error.is_transient() => {
                    failures += 1;
                    let pause = PORT_RETRY.delay(failures);
                    tracing::warn!(error = %error, pause_s = pause.as_secs_f64(), "batch supervision interrupted, retrying");
                    if !pause_in_term(term, pause).await {
                        return None;
                    }
                }
                Err(error) => {
                    // A permanent failure (a result that cannot be read, a plan the reducer
                    // refuses) cannot heal by waiting: the batch ends as a runtime error
                    // (exit 2, harness-behaviour.md#exit-codes) without an envelope.
                    tracing::error!(error = %error, "batch supervision failed");
                    return Some(FinalState {
                        state: BatchState::Done,
                        ok: Some(false),
                        exit_code: Some(2),
                        eval_verdict: None,
                        message: Some(error_chain(&error)),
                        notice: None,
                    });
                }
            }
        }
    }

    /// How a decided eval batch ended: its A/B report is stored as `eval.json` before the
    /// record says Done (whoever sees the end can read it), and the batch is judged by it as
    /// `cowork eval` judges it (its default gate), not by its arms' pass rates. Storing is
    /// retried while the store fails transiently; a report that cannot be made ends the batch
    /// as a runtime error (exit 2). `None` when this process shuts down first.
    async fn eval_end(
        &self,
        store: &dyn cowork_fabric::ArtifactStore,
        plan: &Plan,
        outcome: &crate::supervisor::BatchOutcome,
        term: &tokio_util::sync::CancellationToken,
    ) -> Option<FinalState> {
        let mut failures = 0u32;
        let error = loop {
            match crate::eval::store_eval_document(store, plan, outcome).await {
                Ok(document) => {
                    let code = document_exit_code(&document, EvalGate::default());
                    return Some(FinalState {
                        state: BatchState::Done,
                        ok: Some(code == 0),
                        exit_code: Some(code),
                        eval_verdict: Some(document_verdict_words(&document)),
                        message: None,
                        notice: None,
                    });
                }
                Err(error) if error.is_transient() => {
                    failures += 1;
                    let pause = PORT_RETRY.delay(failures);
                    tracing::warn!(error = %error_chain(&error), pause_s = pause.as_secs_f64(), "eval report not stored, retrying");
                    if !pause_in_term(term, pause).await {
                        return None;
                    }
                }
                Err(error) => break error,
            }
        };
        tracing::error!(error = %error_chain(&error), "eval report not stored");
        Some(FinalState {
            state: BatchState::Done,
            ok: Some(false),
            exit_code: Some(2),
            eval_verdict: None,
            message: Some(format!(
                "the eval's A/B report ({}) was not stored, so the eval has no verdict: {}; \
                 `cowork report {}` shows the stored runs of both arms",
                BatchKey::new(&plan.batch_id).eval().as_str(),
                error_chain(&error),
                plan.batch_id
            )),
            notice: None,
        })
    }

    /// `end` with the notification of its decided batch: the verdict the record will hold,
    /// the failing units, and the ones that passed in the most recent earlier batch.
    async fn with_decided_notice(
        &self,
        plan: &Plan,
        outcome: &crate::supervisor::BatchOutcome,
        mut end: FinalState,
        live: &LiveBatch,
    ) -> FinalState {
        let history = self
            .history
            .recent(
                self.ports.store.as_ref(),
                crate::supervisor::DEFAULT_HISTORY_BATCHES,
                Some(&plan.batch_id),
            )
            .await;
        let verdict = Verdict {
            verdict: match (&end.eval_verdict, end.ok) {
                (Some(words), _) => words.clone(),
                (None, Some(true)) => "PASS".to_owned(),
                (None, _) => "FAIL".to_owned(),
            },
            exit_code: end.exit_code.unwrap_or(outcome.exit_code),
            cost_usd: live.progress.borrow().cost_usd,
        };
        end.notice = Some(crate::notify::decided_event(
            &outcome.stats,
            &outcome.reduction,
            &history,
            verdict,
        ));
        end
    }

    /// Records how the batch ended (unless another process finalized it meanwhile) and tells
    /// the batch's followers.
    async fn record_end(&self, plan: &Plan, live: &LiveBatch, end: FinalState) {
        let batch_id = &plan.batch_id;
        // An ended batch waits for nothing: the fleet view stops refreshing it, so what it
        // last said about unserved tiers would stand forever.
        live.unserved.send_replace(Vec::new());
        // Nor is it stalled, unless the watchdog cancelled it for a stall: that stays said.
        live.stall
            .send_if_modified(|stall| stall.take_if(|stall| !stall.cancelled).is_some());
        // What its runs reported spending, folded or discarded: kept in the record because a
        // cancelled batch has no stats to read it from.
        let spent_usd = live.progress.borrow().cost_usd;
        // Followers wait for the record, so a decided batch must not stay running in it.
        let ended = self
            .transition_until_written(batch_id, "recording the batch's end", |record| {
                if record.state.is_final() {
                    return false;
                }
                record.state = end.state;
                record.ok = end.ok;
                record.exit_code = end.exit_code;
                record.eval_verdict = end.eval_verdict.clone();
                record.listing.spent_usd = Some(spent_usd);
                true
            })
            .await;
        match ended {
            Ok(record) => {
                tracing::info!(state = record.state.as_str(), ok = ?record.ok, "batch ended");
                if let Some(notice) = end.notice.clone() {
                    self.notifier.send(notice);
                }
                live.end
                    .send_replace(Some(end_of(&record, end.message.clone())));
                // The batch's Kubernetes Job of workers (if any) goes with it.
                #[cfg(feature = "k8s")]
                if let Some(k8s) = &self.config.k8s_worker_jobs {
                    k8s.batch_ended(batch_id, plan.n_jobs()).await;
                }
            }
            Err(error) => {
                tracing::error!(error = %error, "batch ended but its record could not be updated");
            }
        }
    }

    /// Fences the queue for term `revision`, retrying while the queue fails transiently;
    /// `false` when the term ended first or a later leader had fenced already.
    async fn fence_queue(&self, revision: u64, term: &tokio_util::sync::CancellationToken) -> bool {
        let mut failures = 0u32;
        loop {
            match self.ports.queue.fence(revision).await {
                Ok(()) => return true,
                Err(cowork_fabric::queue::QueueError::Fenced { message }) => {
                    tracing::warn!(%message, "a later leader fenced the queue before this term could");
                    self.leadership.fenced(revision);
                    return false;
                }
                Err(error) => {
                    failures += 1;
                    let pause = PORT_RETRY.delay(failures);
                    tracing::warn!(error = %error, pause_s = pause.as_secs_f64(), "fencing the queue for this term failed, retrying");
                    if !pause_in_term(term, pause).await {
                        return false;
                    }
                }
            }
        }
    }

    /// Fences the queue for this term, then resumes every batch the registry lists as not
    /// final and marks the service ready.
    /// Listing is retried until it succeeds or the service shuts down. After a takeover
    /// (`taken_over`: the previous leader and the new term's fencing token), each resumed
    /// batch's hooks are told.
    pub(crate) async fn resume_all(self: Arc<Self>, taken_over: Option<(String, u64)>) {
        let term = self.leadership.term_token();
        let revision = self.leadership.term_revision();
        // Fenced first, then read: whatever an earlier leader stored is seen below, and
        // whatever it tries from now on is refused (decisions.md#coordinator-lease).
        if revision != 0 && !self.fence_queue(revision, &term).await {
            return;
        }
        let mut failures = 0u32;
        let records = loop {
            match self.ports.batches.list().await {
                Ok(records) => break records,
                Err(error) => {
                    failures += 1;
                    let pause = PORT_RETRY.delay(failures);
                    tracing::warn!(error = %error, pause_s = pause.as_secs_f64(), "listing batches to resume failed, retrying");
                    if !pause_in_term(&term, pause).await {
                        return;
                    }
                }
            }
        };
        for record in records.iter().filter(|record| !record.state.is_final()) {
            if term.is_cancelled() {
                return;
            }
            match self.load(&record.batch_id).await {
                Ok((plan, mode)) => {
                    tracing::info!(batch_id = %record.batch_id, state = record.state.as_str(), "resuming batch");
                    self.start(plan, mode.envelope_command());
                    if let Some((previous, revision)) = &taken_over {
                        self.notifier.send(NotifyEvent::TakenOver {
                            batch_id: record.batch_id.clone(),
                            leader: self.config.coordinator_id.clone(),
                            previous: previous.clone(),
                            revision: *revision,
                        });
                    }
                }
                Err(error) => {
                    // The batch cannot be planned again (its spec or bundle is gone or no
                    // longer valid); it stays as it is and is reported, not guessed at.
                    tracing::error!(batch_id = %record.batch_id, error = %error, "batch cannot be resumed");
                }
            }
        }
        // Release pairs with the Acquire load in `is_resumed`.
        self.resumed.store(true, Ordering::Release);
    }

    /// Reads a stored batch's spec and bundle and plans it again under its own id.
    pub(super) async fn load(&self, batch_id: &BatchId) -> Result<(Plan, BatchMode), String> {
        let spec_key = BatchKey::new(batch_id).spec().into_string();
        let spec_json = self
            .ports
            .store
            .get(&spec_key)
            .await
            .map_err(|e| format!("reading {spec_key}: {e}"))?;
        let stored: StoredBatch = serde_json::from_slice(&spec_json)
            .map_err(|e| format!("{spec_key} is unreadable: {e}"))?;
        self.notifier.watch_batch(batch_id, &stored.spec.notify);
        let bundle_key = StoreKey::bundle(&stored.spec.bundle_sha256).into_string();
        let bundle = self
            .ports
            .store
            .get(&bundle_key)
            .await
            .map_err(|e| format!("reading {bundle_key}: {e}"))?;
        let scratch = self.config.scratch_dir.clone();
        let limits = self.config.unpack_limits;
        let batch_id = batch_id.clone();
        let mode = stored.spec.mode;
        let plan = tokio::task::spawn_blocking(move || {
            plan_from_bundle(&stored.spec, &bundle, batch_id, &scratch, &limits)
        })
        .await
        .map_err(|e| format!("validation task failed: {e}"))?
        .map_err(|problems| format!("stored batch is invalid: {}", problems.join("; ")))?;
        Ok((plan, mode))
    }
}

/// Why an accepted batch could not be stored.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AcceptError {
    #[error("storing {key}")]
    Store {
        key: String,
        #[source]
        source: ArtifactError,
    },
    #[error("creating the record of batch {batch_id}")]
    Registry {
        batch_id: String,
        #[source]
        source: RegistryError,
    },
    /// The drawn batch id is already in use; submitting again draws another.
    #[error("batch id {batch_id} is already in use")]
    IdTaken { batch_id: String },
}

impl AcceptError {
    /// `true` when submitting the same batch again may succeed.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            AcceptError::Store { source, .. } => source.is_transient(),
            AcceptError::Registry { source, .. } => source.is_transient(),
            AcceptError::IdTaken { .. } => true,
        }
    }
}

/// How a supervised batch ended, for its record.
struct FinalState {
    state: BatchState,
    ok: Option<bool>,
    exit_code: Option<i32>,
    /// An eval batch's A/B verdict in words, once its report is stored.
    eval_verdict: Option<String>,
    /// Why it failed for good, when it did.
    message: Option<String>,
    /// What the batch's hooks are told once the record says it ended.
    notice: Option<NotifyEvent>,
}

/// The `end` event of a final record.
pub(crate) fn end_of(record: &BatchRecord, message: Option<String>) -> BatchEnd {
    BatchEnd {
        state: record.state,
        ok: record.ok,
        exit_code: record.exit_code,
        eval_verdict: record.eval_verdict.clone(),
        message,
    }
}

/// A new batch id from the clock and a random suffix.
pub(crate) fn new_batch_id() -> BatchId {
    use std::hash::{BuildHasher, Hasher};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    // RandomState is seeded from the OS per process and per instance; hashing the time with
    // it gives suffixes that differ between batches submitted in the same second.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(now.as_nanos());
    BatchId::from_time(now.as_secs(), hasher.finish() as u32)
}

/// Waits `pause` before a port is tried again; `false` when the term (or the process) ended
/// first. Nothing is held across the pause, so abandoning it is safe.
async fn pause_in_term(
    term: &tokio_util::sync::CancellationToken,
    pause: std::time::Duration,
) -> bool {
    tokio::select! {
        _ = term.cancelled() => false,
        _ = tokio::time::sleep(pause) => true,
    }
}
