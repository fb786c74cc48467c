//! The embedded fleet: one batch run to its decision inside this process (`cowork run`,
//! `cowork eval` without `--coordinator`, and `cowork resume` of a batch in the local store).
//!
//! It wires the same parts the distributed fleet uses — the supervisor, the worker's job loop
//! and the reducer — to in-process ports: [`MemJobQueue`], [`MemEventLog`] and a
//! [`DirArtifactStore`] under the store directory (default `.cowork/`). The policy of that wiring
//! (deliveries per job, the admission window, the renewal pace, what each Ctrl-C does) is
//! named here, once.
//!
//! Money is spent by harness processes, so stopping is staged: the first Ctrl-C (or SIGTERM)
//! stops starting jobs and lets the running ones finish and be stored; the second kills their
//! process groups (the same path as `cowork cancel --kill-running`: killed runs are not
//! samples); the third exits at once. Every harness runs under a guard process
//! (`cowork_worker::executor::guard`) that kills its process group if this process dies, so
//! not even `kill -9` leaves a harness running. An interrupted batch keeps every finished
//! job's record in the store, and [`resume`] finishes it.

mod local_resume;
mod notify_end;
mod stall;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use cowork_coordinator::supervisor::{
    BatchOutcome, CoordinatorPorts, SharedModelLimits, SuperviseEnd, SuperviseError,
    SuperviseOptions, SuperviseSignals, supervise,
};
use cowork_core::limits::ModelLimit;
use cowork_core::plan::Plan;
use cowork_fabric::backoff::Backoff;
use cowork_fabric::bundle::{PackedBundle, UnpackLimits};
use cowork_fabric::embedded::{DirArtifactStore, MemBatchRegistry, MemEventLog, MemJobQueue};
use cowork_fabric::{ArtifactStore, BatchRegistry, EventLog, JobQueue, QueueError};
use cowork_schema::BatchId;
use cowork_schema::api::ProgressSnapshot;
use cowork_schema::batch::{BatchSpec, ExecutorKind, StoredBatch};
use cowork_schema::job::Tier;
use cowork_schema::layout::{BatchKey, StoreKey, StoreRoot, names};
use cowork_schema::registry::{BatchRecord, BatchState};
use cowork_worker::executor::Executor;
use cowork_worker::executor::harness::{HarnessConfig, HarnessExecutor};
use cowork_worker::executor::sim::SimExecutor;
use cowork_worker::{WorkerConfig, WorkerPorts, WorkerStats};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::args::OutputFormat;
use crate::exit::CliError;
use crate::interrupts::Interrupts;

pub use local_resume::resume;
pub use notify_end::tell_decided;

/// Recent batches of the store whose run times set the default `--stall-after`.
const STALL_HISTORY: usize = 20;

/// Deliveries of one job before an infrastructure failure before spend is final
/// (harness-behaviour.md#choice-c8): in one process a failure to start the harness rarely heals, so
/// few retries are enough.
pub const MAX_DELIVER: u32 = cowork_schema::retries::broker::EMBEDDED_MAX_DELIVER;

/// Jobs outstanding per slot when `--window` is not given: two keep every slot busy while the
/// supervisor folds a finished job and admits the next.
pub const WINDOW_PER_SLOT: usize = 2;

/// Exit code of a batch interrupted with Ctrl-C or SIGTERM, like a shell's.
const INTERRUPTED_EXIT_CODE: i32 = 130;

/// The store `cowork run` uses when `--store` is not given.
const DEFAULT_STORE: &str = ".cowork";

/// The embedded queue has no ack deadline (a job task that dies drops its delivery, which
/// puts the job back at once); this only paces the executor's in-progress calls.
const ACK_WAIT: Duration = Duration::from_secs(30);

/// A new batch id from the clock and a per-process random suffix.
pub fn new_batch_id() -> BatchId {
    use std::hash::{BuildHasher, Hasher};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    // RandomState is seeded from the OS per process; hashing the time with it gives a suffix
    // that differs between two runs started in the same second.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(now.as_nanos());
    hasher.write_u32(std::process::id());
    BatchId::from_time(now.as_secs(), hasher.finish() as u32)
}

/// Stores a validated batch: its bundle (once per digest) and `batches/<id>/spec.json`.
pub async fn store_batch(
    store: &DirArtifactStore,
    plan: &Plan,
    spec: BatchSpec,
    bundle: PackedBundle,
) -> Result<(), CliError> {
    let batch_id = &plan.batch_id;
    let bundle_key = StoreKey::bundle(&bundle.sha256);
    store
        .put_if_absent(bundle_key.as_str(), bundle.bytes)
        .await
        .with_context(|| format!("storing {bundle_key}"))?;
    let stored = StoredBatch {
        batch_id: batch_id.clone(),
        spec,
        plan: plan.summary(),
    };
    let spec_key = BatchKey::new(batch_id).spec();
    let mut spec_json = cowork_schema::json_number::to_vec_pretty(&stored)
        .with_context(|| format!("serializing {}", names::SPEC))?;
    spec_json.push(b'\n');
    store
        .put(spec_key.as_str(), spec_json)
        .await
        .with_context(|| format!("storing {spec_key}"))?;
    Ok(())
}

/// The settings of a batch run in this process (`cowork run`, embedded `cowork eval`,
/// `cowork resume` of a local batch).
#[derive(Clone)]
pub struct EmbeddedRun {
    pub store: Arc<DirArtifactStore>,
    pub store_dir: PathBuf,
    pub harness_bin: PathBuf,
    /// `--harness-grace` and `--harness-env`.
    pub harness: crate::harness_process::HarnessProcess,
    pub slots: u16,
    /// Most replay jobs one slot gives one harness process.
    pub replay_pack: usize,
    pub window: Option<usize>,
    pub usage_pause: Duration,
    pub model_limits: Vec<ModelLimit>,
    pub keep_work: bool,
    pub quiet: bool,
    pub started: Instant,
    /// The envelope's `command`.
    pub command: &'static str,
    /// `--ui`: the listener of the batch's live page, bound before the batch was stored (so a
    /// taken port changes nothing), and the page's token.
    pub ui: Option<UiListener>,
    /// Tells the batch's hooks of its end and of a budget stop (`--notify`); `None` without
    /// hooks.
    pub notifier: Option<cowork_coordinator::notify::Notifier>,
}

/// Where `cowork run --ui` serves the batch's live page, and the token the page needs.
#[derive(Clone)]
pub struct UiListener {
    pub listener: Arc<std::net::TcpListener>,
    pub token: cowork_coordinator::server::ApiToken,
}

impl UiListener {
    /// Binds `addr` and makes the page's token; the error names the address and the fix.
    pub fn bind(addr: std::net::SocketAddr) -> Result<UiListener, CliError> {
        let listener = std::net::TcpListener::bind(addr).map_err(|error| {
            CliError::usage(format!(
                "--ui: cannot listen on {addr}: {error}; give a free address with --ui=127.0.0.1:PORT, or --ui alone for any free loopback port"
            ))
        })?;
        let token = cowork_coordinator::live_ui::new_page_token()
            .map_err(|error| CliError::Failed(anyhow!("making the live page's token: {error}")))?;
        Ok(UiListener {
            listener: Arc::new(listener),
            token,
        })
    }

    /// The page's address as the user opens it: the bound port, the token in the query.
    pub fn page_url(&self, batch_id: &BatchId) -> Result<String, CliError> {
        let addr = self
            .listener
            .local_addr()
            .context("reading the live page's address")?;
        Ok(format!(
            "http://{addr}/v1/batches/{batch_id}/live.html?token={}",
            self.token.expose()
        ))
    }
}

/// The live page of a running embedded batch and the task serving it.
struct ServedUi {
    ui: Arc<cowork_coordinator::live_ui::LiveUi>,
    served: JoinHandle<()>,
    /// Keeps the page's table of workers (this process's slots) current.
    workers_shown: JoinHandle<()>,
}

/// How often the page's table of this process's busy slots is refreshed.
const SHOW_WORKER_EVERY: Duration = Duration::from_secs(1);

/// Shows this process's worker (its tiers, slots and busy slots) on the live page until
/// aborted.
async fn show_worker(
    ui: Arc<cowork_coordinator::live_ui::LiveUi>,
    config: WorkerConfig,
    stats: Arc<WorkerStats>,
) {
    let started_at_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64);
    let mut every = tokio::time::interval(SHOW_WORKER_EVERY);
    loop {
        every.tick().await;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64);
        // Relaxed: shown to a person only; no other memory depends on the counts.
        let busy = stats.jobs_running.load(Ordering::Relaxed);
        let finished = stats.jobs_finished.load(Ordering::Relaxed);
        ui.show_workers(vec![cowork_schema::registry::WorkerInfo {
            protocol: cowork_schema::job::PROTOCOL_VERSION,
            worker_id: config.worker_id.clone(),
            tiers: config.tiers.clone(),
            slots: u32::try_from(config.slots).unwrap_or(u32::MAX),
            busy: u32::try_from(busy).unwrap_or(u32::MAX),
            executor: String::new(),
            harness_version: None,
            os: std::env::consts::OS.to_owned(),
            arch: std::env::consts::ARCH.to_owned(),
            hostname: String::new(),
            jobs_finished: finished,
            started_at_ms,
            heartbeat_at_ms: now_ms,
            heartbeat_every_ms: SHOW_WORKER_EVERY.as_millis() as u64,
            draining: false,
            sandbox_start_failures: 0,
            backed_off_tiers: Vec::new(),
        }]);
    }
}

/// Starts serving `plan`'s live page over the run's own ports; the record it writes into
/// `registry` is what the worker reads before each job (pause, cancel, kill).
async fn serve_ui(
    embedded: &EmbeddedRun,
    listen: &UiListener,
    plan: &Plan,
    ports: &CoordinatorPorts,
    registry: &MemBatchRegistry,
    stats: &Arc<WorkerStats>,
) -> Result<ServedUi, CliError> {
    let listener = listen
        .listener
        .try_clone()
        .context("taking the live page's listener")?;
    listener
        .set_nonblocking(true)
        .context("preparing the live page's listener")?;
    let addr = listener
        .local_addr()
        .context("reading the live page's address")?;
    let listener = tokio::net::TcpListener::from_std(listener).context("serving the live page")?;
    let fleet_ports = cowork_coordinator::server::FleetPorts {
        queue: Arc::clone(&ports.queue),
        events: Arc::clone(&ports.events),
        store: Arc::clone(&ports.store),
        batches: Arc::new(registry.clone()),
        workers: Arc::new(cowork_fabric::embedded::MemWorkerRegistry::new()),
        health: None,
        lease: None,
    };
    let ui =
        cowork_coordinator::live_ui::LiveUi::new(fleet_ports, listen.token.clone(), plan, addr)
            .await
            .context("recording the batch for its live page")?;
    let served = ui.serve(listener);
    let ui = Arc::new(ui);
    // Every tier is served here; the page lists the ones the batch uses.
    let mut shown = worker_config(embedded);
    shown
        .tiers
        .retain(|tier| plan.units.iter().any(|unit| unit.tier == *tier));
    let workers_shown = tokio::spawn(show_worker(Arc::clone(&ui), shown, Arc::clone(stats)));
    Ok(ServedUi {
        ui,
        served,
        workers_shown,
    })
}

/// Runs a stored batch in this process to its decision: an embedded queue and event log, the
/// worker loop on `slots` slots, and the supervisor. `what` names the batch in errors.
pub async fn run_stored(
    embedded: &EmbeddedRun,
    plan: &Plan,
    what: &str,
) -> Result<BatchOutcome, CliError> {
    let _lock = lock_batch(&embedded.store, &plan.batch_id)?;
    run_locked(embedded, plan, what, MemEventLog::pruned_after_read()).await
}

/// Holds a stored batch for this process: an exclusive lock on its `spec.json`, released when
/// the returned file is dropped or the process ends (even by SIGKILL). Two processes running
/// the same batch — a `cowork resume` while the interrupted run is still draining — would run
/// its jobs twice.
fn lock_batch(store: &DirArtifactStore, batch_id: &BatchId) -> Result<std::fs::File, CliError> {
    let key = BatchKey::new(batch_id).spec();
    let path = store
        .path_of(key.as_str())
        .with_context(|| format!("locking batch {batch_id}"))?;
    let file = std::fs::File::open(&path)
        .with_context(|| format!("opening {} to lock batch {batch_id}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(CliError::Failed(anyhow!(
            "batch {batch_id} is being run by another cowork process (it holds the lock on {}); \
             wait for that process to end, or stop it with Ctrl-C",
            path.display()
        ))),
        Err(std::fs::TryLockError::Error(error)) => Err(CliError::Failed(
            anyhow::Error::new(error).context(format!("locking {}", path.display())),
        )),
    }
}

/// The executor of `plan`'s jobs. The harness runs under this binary's guard, so that no
/// harness outlives this process.
fn executor_for(embedded: &EmbeddedRun, plan: &Plan) -> Result<Arc<dyn Executor>, CliError> {
    if plan.executor == ExecutorKind::Sim {
        return Ok(Arc::new(SimExecutor::new()));
    }
    let guard = std::env::current_exe()
        .context("finding the cowork executable, which guards every harness process")?;
    Ok(Arc::new(HarnessExecutor::new(embedded.harness.apply(
        HarnessConfig {
            guard: Some(guard),
            ..HarnessConfig::new(&embedded.harness_bin)
        },
    ))))
}

/// The worker of an embedded run: every tier, `slots` slots, scratch space under the store.
fn worker_config(embedded: &EmbeddedRun) -> WorkerConfig {
    WorkerConfig {
        worker_id: format!("embedded-{}", std::process::id()),
        tiers: Tier::ALL.to_vec(),
        slots: usize::from(embedded.slots),
        replay_pack: embedded.replay_pack,
        ack_wait: ACK_WAIT,
        max_deliver: MAX_DELIVER,
        cache_dir: StoreRoot::new(&embedded.store_dir).bundle_cache_dir(),
        cache_max_bytes: None,
        work_dir: StoreRoot::new(&embedded.store_dir).work_dir(),
        keep_work_dirs: embedded.keep_work,
        unpack_limits: UnpackLimits::default(),
        backoff: Backoff::default(),
        renew_every: None,
        verify_jobs: false,
        store_deadline: cowork_worker::DEFAULT_STORE_DEADLINE,
        drain_grace: None,
    }
}

/// The supervisor's settings of an embedded run: the window defaults to
/// [`WINDOW_PER_SLOT`] jobs per slot.
fn supervise_options(embedded: &EmbeddedRun) -> SuperviseOptions {
    let window = embedded
        .window
        .unwrap_or(usize::from(embedded.slots) * WINDOW_PER_SLOT);
    SuperviseOptions {
        usage_pause: embedded.usage_pause,
        model_limits: Arc::new(SharedModelLimits::new(embedded.model_limits.clone())),
        notifier: embedded.notifier.clone(),
        ..SuperviseOptions::new(window, embedded.command)
    }
}

/// What the embedded runner holds to stop a batch in stages.
struct Stopper<'a> {
    plan: &'a Plan,
    /// Supervision: `cancel` stops admission, `shutdown` ends supervision at once.
    signals: SuperviseSignals,
    /// The worker's shutdown: it stops pulling and lets running jobs finish and be stored.
    stop_pulling: CancellationToken,
    /// The worker follows this registry for kills, as a fleet worker follows the batches
    /// bucket for `cancel --kill-running`.
    kills: MemBatchRegistry,
    stats: Arc<WorkerStats>,
}

impl Stopper<'_> {
    /// Writes the batch's record as `stopping` with kill-running, which the worker follows:
    /// a new record, or (under `--ui`, which keeps one) the record changed.
    async fn ask_kill(&self) -> Result<(), cowork_fabric::RegistryError> {
        if let Some((mut record, revision)) = self.kills.get(&self.plan.batch_id).await? {
            record.state = BatchState::Stopping;
            record.kill_running = true;
            self.kills.update(&record, revision).await?;
            return Ok(());
        }
        let record = BatchRecord {
            batch_id: self.plan.batch_id.clone(),
            state: BatchState::Stopping,
            spec_sha256: String::new(),
            n_jobs: self.plan.n_jobs(),
            created_at_ms: 0,
            updated_at_ms: 0,
            ok: None,
            exit_code: None,
            eval_verdict: None,
            owner: None,
            generation: self.plan.generation,
            kill_running: true,
            controls: Default::default(),
            listing: Default::default(),
        };
        self.kills.create(&record).await.map(|_| ())
    }

    /// Acts on the `received`-th Ctrl-C or SIGTERM.
    async fn escalate(&self, received: u32) {
        // Relaxed: the count is only shown to the user; no other memory depends on it.
        let running = self.stats.jobs_running.load(Ordering::Relaxed);
        let jobs = if running == 1 { "job" } else { "jobs" };
        match received {
            1 => {
                self.signals.cancel.cancel();
                self.stop_pulling.cancel();
                crate::progress::note(&format!(
                    "stopping: waiting for {running} running {jobs} (Ctrl-C again to kill them)"
                ));
            }
            2 => {
                // The in-process registry cannot fail to store a record.
                if let Err(error) = self.ask_kill().await {
                    tracing::error!(error = %error, "killing the running jobs failed");
                }
                crate::progress::note(&format!(
                    "killing {running} running {jobs} (Ctrl-C again to exit at once)"
                ));
            }
            _ => {
                // Exiting closes every guard's pipe, and each guard kills its job's process
                // group: nothing keeps running, but the killed jobs leave no record.
                crate::progress::note("exiting at once");
                std::process::exit(INTERRUPTED_EXIT_CODE);
            }
        }
    }
}

/// Runs `plan` with this process's worker and supervisor, `events` holding the batch's history
/// so far (empty for a new batch). The caller holds the batch's lock.
async fn run_locked(
    embedded: &EmbeddedRun,
    plan: &Plan,
    what: &str,
    events: MemEventLog,
) -> Result<BatchOutcome, CliError> {
    let mut interrupts =
        Interrupts::install().context("taking over Ctrl-C and SIGTERM for the batch")?;
    let queue = MemJobQueue::new();
    let ports = CoordinatorPorts {
        queue: Arc::new(queue.clone()),
        events: Arc::new(events.clone()),
        store: embedded.store.clone(),
    };
    let kills = MemBatchRegistry::new();
    let stats = Arc::new(WorkerStats::default());
    let ui = match &embedded.ui {
        Some(listen) => Some(serve_ui(embedded, listen, plan, &ports, &kills, &stats).await?),
        None => None,
    };
    let stopper = Stopper {
        plan,
        signals: supervise_signals(ui.as_ref()),
        stop_pulling: CancellationToken::new(),
        kills,
        stats,
    };
    // Reaped below, in every case: the worker ends once the queue is closed or it was told to
    // stop pulling, and only after its running jobs are stored.
    let mut worker = spawn_worker(embedded, plan, &queue, &events, &stopper)?;
    let mut worker_end = None;
    let mut stall_cancel = None;
    let end = supervise_with_interrupts(
        embedded,
        &ports,
        &stopper,
        &mut interrupts,
        &mut worker,
        (&mut worker_end, &mut stall_cancel),
    )
    .await;
    queue.close();
    let worker_end = match worker_end {
        Some(worker_end) => worker_end,
        None => drain_worker(&mut worker, &mut interrupts, &stopper).await,
    };
    if !embedded.keep_work {
        remove_work_dirs(embedded, &plan.batch_id).await;
    }
    let interrupted = interrupts.received() > 0;
    notify_end::notify_end(embedded, plan, &end).await;
    if let Some(ui) = ui {
        close_ui(ui, &end, interrupted, embedded, plan).await?;
    }
    if let (Ok(SuperviseEnd::Cancelled { .. }), Some(reason)) = (&end, stall_cancel) {
        return Err(CliError::Failed(anyhow!(
            "{what} {} cancelled by --on-stall cancel: stalled: {reason}",
            plan.batch_id
        )));
    }
    batch_outcome(end, interrupted, worker_end, embedded, plan, what)
}

/// This process's worker, running.
type WorkerTask = JoinHandle<Result<(), QueueError>>;
/// How this process's worker ended.
type WorkerEnd = Result<Result<(), QueueError>, tokio::task::JoinError>;

/// Supervision's signals: with a live page, its cancel and controls reach supervision as a
/// fleet's do.
fn supervise_signals(ui: Option<&ServedUi>) -> SuperviseSignals {
    match ui {
        Some(served) => SuperviseSignals {
            cancel: served.ui.cancel(),
            live: served.ui.link(),
            ..SuperviseSignals::default()
        },
        None => SuperviseSignals::default(),
    }
}

/// Starts this process's worker on the in-process queue and event log.
fn spawn_worker(
    embedded: &EmbeddedRun,
    plan: &Plan,
    queue: &MemJobQueue,
    events: &MemEventLog,
    stopper: &Stopper<'_>,
) -> Result<WorkerTask, CliError> {
    let worker_ports = WorkerPorts {
        queue: Arc::new(queue.clone()) as Arc<dyn JobQueue>,
        events: Arc::new(events.clone()) as Arc<dyn EventLog>,
        store: embedded.store.clone() as Arc<dyn ArtifactStore>,
        executor: executor_for(embedded, plan)?,
        batches: Some(Arc::new(stopper.kills.clone()) as Arc<dyn BatchRegistry>),
        workers: None,
    };
    Ok(tokio::spawn(cowork_worker::run(
        worker_config(embedded),
        worker_ports,
        stopper.stats.clone(),
        stopper.stop_pulling.clone(),
    )))
}

/// Supervises the batch to its end with the progress line drawn, acting on every Ctrl-C
/// meanwhile. A worker that ends first is reaped into `worker_end` and ends supervision; a
/// stall is said, and with `--on-stall cancel` cancels the batch (its reason in
/// `stall_cancel`).
async fn supervise_with_interrupts(
    embedded: &EmbeddedRun,
    ports: &CoordinatorPorts,
    stopper: &Stopper<'_>,
    interrupts: &mut Interrupts,
    worker: &mut WorkerTask,
    (worker_end, stall_cancel): (&mut Option<WorkerEnd>, &mut Option<String>),
) -> Result<SuperviseEnd, SuperviseError> {
    let (progress_tx, progress_rx) = watch::channel(ProgressSnapshot::default());
    let history = match stopper.plan.flags.stall_after_ms {
        Some(_) => Vec::new(),
        None => cowork_coordinator::history::recent_stats(
            embedded.store.as_ref(),
            STALL_HISTORY,
            Some(&stopper.plan.batch_id),
        )
        .await
        .unwrap_or_default(),
    };
    let mut stalls = stall::StallWatch::new(
        &stopper.plan.flags,
        &history,
        progress_rx.clone(),
        stopper.signals.live.controls.clone(),
    );
    let renderer = (!embedded.quiet)
        .then(|| tokio::spawn(crate::progress::render(progress_rx, embedded.started)));
    let options = supervise_options(embedded);
    let end = {
        let supervision = supervise(
            ports,
            stopper.plan,
            &options,
            &progress_tx,
            stopper.signals.clone(),
        );
        tokio::pin!(supervision);
        loop {
            // Biased: an interrupt is acted on before anything else that is ready. Polling the
            // pinned supervision and the join handle again later loses nothing.
            tokio::select! {
                biased;
                received = interrupts.next() => stopper.escalate(received).await,
                joined = &mut *worker, if worker_end.is_none() => {
                    // Without a worker nothing would ever finish: supervision ends too.
                    *worker_end = Some(joined);
                    stopper.signals.shutdown.cancel();
                }
                end = &mut supervision => break end,
                stall = stalls.next(), if stall_cancel.is_none() => {
                    stall::tell(&stall, &stopper.plan.batch_id, embedded.notifier.as_ref());
                    if stall.cancelled {
                        stopper.signals.cancel.cancel();
                        *stall_cancel = Some(stall.message);
                    }
                }
            }
        }
    };
    drop(progress_tx);
    if let Some(renderer) = renderer {
        let _ = renderer.await;
    }
    end
}

/// Tells the batch's live page how it ended and stops serving it; a batch cancelled from the
/// page (not by Ctrl-C) ends here as cancelled.
async fn close_ui(
    served_ui: ServedUi,
    end: &Result<SuperviseEnd, SuperviseError>,
    interrupted: bool,
    embedded: &EmbeddedRun,
    plan: &Plan,
) -> Result<(), CliError> {
    let ServedUi {
        ui,
        served,
        workers_shown,
    } = served_ui;
    workers_shown.abort();
    match end {
        Ok(SuperviseEnd::Decided(outcome)) => {
            let ok = Some(outcome.reduction.ok);
            ui.finish(served, BatchState::Done, ok, Some(outcome.exit_code))
                .await;
        }
        Ok(SuperviseEnd::Cancelled { .. }) if !interrupted => {
            ui.finish(served, BatchState::Cancelled, None, None).await;
            crate::progress::note(&format!(
                "cancelled from its live page; {}",
                interrupted_hint(embedded, &plan.batch_id)
            ));
            return Err(CliError::Cancelled);
        }
        _ => ui.abandon(served).await,
    }
    Ok(())
}

/// The outcome of a decided batch, or why it has none: interrupted, or its worker ended first.
fn batch_outcome(
    end: Result<SuperviseEnd, SuperviseError>,
    interrupted: bool,
    worker_end: WorkerEnd,
    embedded: &EmbeddedRun,
    plan: &Plan,
    what: &str,
) -> Result<BatchOutcome, CliError> {
    match end {
        Ok(SuperviseEnd::Decided(outcome)) => Ok(*outcome),
        Ok(SuperviseEnd::Cancelled { .. }) | Err(SuperviseError::Cancelled) if interrupted => {
            crate::progress::note(&interrupted_hint(embedded, &plan.batch_id));
            Err(CliError::Cancelled)
        }
        Ok(SuperviseEnd::Cancelled { .. }) | Err(SuperviseError::Cancelled) => {
            Err(CliError::Failed(
                worker_ended_early(worker_end).context(format!("running {what} {}", plan.batch_id)),
            ))
        }
        Err(error) => Err(CliError::Failed(
            anyhow::Error::new(error).context(format!("running {what} {}", plan.batch_id)),
        )),
    }
}

/// Removes the batch's scratch tree under `<store>/work`. The worker removes each job's
/// attempt dir as the job ends, and the job and cell dirs it empties; what is left here is
/// what a killed job or `--keep-work` left, and the batch's own dir.
async fn remove_work_dirs(embedded: &EmbeddedRun, batch_id: &BatchId) {
    let dir = StoreRoot::new(&embedded.store_dir).batch_work_dir(batch_id);
    // A big tree is blocking work, so it runs in `spawn_blocking`; a leftover dir is only disk, so
    // a failure is logged, not fatal.
    let removed = tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&dir) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err((dir, error)),
        _ => Ok(()),
    })
    .await;
    if let Ok(Err((dir, error))) = removed {
        tracing::warn!(dir = %dir.display(), error = %error, "removing the batch's scratch dirs failed");
    }
}

/// Waits for the worker to finish its running jobs, still acting on Ctrl-C meanwhile.
async fn drain_worker(
    worker: &mut WorkerTask,
    interrupts: &mut Interrupts,
    stopper: &Stopper<'_>,
) -> WorkerEnd {
    loop {
        // Biased as above; the join handle may be polled again after an interrupt.
        tokio::select! {
            biased;
            received = interrupts.next() => stopper.escalate(received).await,
            joined = &mut *worker => return joined,
        }
    }
}

/// Why supervision ended without an interrupt: the worker loop stopped first.
fn worker_ended_early(worker_end: WorkerEnd) -> anyhow::Error {
    match worker_end {
        Ok(Ok(())) => anyhow!("the job loop ended before the batch was decided"),
        Ok(Err(error)) => anyhow::Error::new(error).context("the job loop failed"),
        Err(error) => anyhow::Error::new(error).context("the job loop stopped"),
    }
}

/// What an interrupted batch tells its user.
fn interrupted_hint(embedded: &EmbeddedRun, batch_id: &BatchId) -> String {
    let store = if embedded.store_dir == std::path::Path::new(DEFAULT_STORE) {
        String::new()
    } else {
        format!(" --store {}", embedded.store_dir.display())
    };
    format!(
        "batch {batch_id} interrupted: the finished jobs are stored; \
         `cowork resume {batch_id}{store}` runs the others"
    )
}

/// The end of a batch run in this process (`cowork run`, a local `cowork resume`): the summary
/// table and where the results are on stderr, the envelope on stdout under
/// `--output-format json`; returns the exit code.
pub async fn print_local_outcome(
    outcome: &BatchOutcome,
    store_dir: &Path,
    batch_id: &cowork_schema::BatchId,
    output_format: OutputFormat,
) -> Result<i32, CliError> {
    // Why runs failed, read back from the stored runs: only a failed batch pays for it.
    let reasons = if outcome.envelope_head.ok {
        String::new()
    } else {
        crate::summary_reasons::local(store_dir, batch_id, &outcome.envelope_head).await
    };
    crate::summary::print(
        &crate::summary::Summary::new(&outcome.envelope_head, outcome.exit_code)
            .with_reasons(reasons),
    );
    eprintln!(
        "results: {}",
        StoreRoot::new(store_dir)
            .batch_dir(batch_id)
            .path()
            .display()
    );
    if output_format == OutputFormat::Json {
        outcome
            .copy_envelope_to(&mut std::io::stdout().lock())
            .context("printing the envelope")?;
    }
    Ok(outcome.exit_code)
}

/// Removes the empty directories a batch leaves under `<store>/work/<batch id>` (each job's
/// scratch dir is removed after its artifacts are stored, but not the unit directories above
/// it), then `<store>/work` itself if nothing else is in it. Files are never touched; failures
/// are ignored, since only tidiness is at stake. Not called with `--keep-work`, which keeps
/// every scratch dir as the job left it.
pub fn remove_empty_scratch_dirs(store: &Path, batch_id: &cowork_schema::BatchId) {
    let root = StoreRoot::new(store);
    let work = root.work_dir();
    remove_empty_dirs(&root.batch_work_dir(batch_id));
    let _ = std::fs::remove_dir(&work);
}

/// Removes `dir` and every directory below it that holds no file, deepest first.
fn remove_empty_dirs(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            remove_empty_dirs(&entry.path());
        }
    }
    // Fails, as it should, when a file or a non-empty directory is left.
    let _ = std::fs::remove_dir(dir);
}
