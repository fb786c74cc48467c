//! The embedded fleet: one batch run to its decision inside this process (`cowork run`, and
//! `cowork eval` without `--coordinator`).
//!
//! It wires the same parts the distributed fleet uses — the supervisor, the worker's job loop
//! and the reducer — to in-process ports: [`MemJobQueue`], [`MemEventLog`] and a
//! [`DirArtifactStore`] under the store directory (default `.cowork/`). The policy of that wiring
//! (deliveries per job, the admission window, the renewal pace) is named here, once.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use cowork_coordinator::supervisor::{
    BatchOutcome, CoordinatorPorts, SharedModelLimits, SuperviseEnd, SuperviseError,
    SuperviseOptions, SuperviseSignals, supervise,
};
use cowork_core::limits::ModelLimit;
use cowork_core::plan::Plan;
use cowork_fabric::backoff::Backoff;
use cowork_fabric::bundle::{PackedBundle, UnpackLimits};
use cowork_fabric::embedded::{DirArtifactStore, MemEventLog, MemJobQueue};
use cowork_fabric::{ArtifactStore, EventLog, JobQueue};
use cowork_schema::BatchId;
use cowork_schema::api::ProgressSnapshot;
use cowork_schema::batch::{BatchSpec, ExecutorKind, StoredBatch};
use cowork_schema::job::Tier;
use cowork_worker::executor::Executor;
use cowork_worker::executor::harness::{HarnessConfig, HarnessExecutor};
use cowork_worker::executor::sim::SimExecutor;
use cowork_worker::{WorkerConfig, WorkerPorts, WorkerStats};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::report::CliError;

/// Deliveries of one job before an infrastructure failure before spend is final (choice C8):
/// in one process a failure to start the harness rarely heals, so few retries are enough.
pub const MAX_DELIVER: u32 = 3;

/// Jobs outstanding per slot when `--window` is not given: two keep every slot busy while the
/// supervisor folds a finished job and admits the next.
pub const WINDOW_PER_SLOT: usize = 2;

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

/// Stores a validated batch: its bundle (once per digest) and `batches/<id>/spec.json`. From
/// here on the batch exists in the store.
pub async fn store_batch(
    store: &DirArtifactStore,
    plan: &Plan,
    spec: BatchSpec,
    bundle: PackedBundle,
) -> Result<(), CliError> {
    let batch_id = &plan.batch_id;
    let bundle_key = format!("bundles/{}.tar.zst", bundle.sha256);
    store
        .put_if_absent(&bundle_key, bundle.bytes)
        .await
        .with_context(|| format!("storing {bundle_key}"))?;
    let stored = StoredBatch {
        batch_id: batch_id.clone(),
        spec,
        plan: plan.summary(),
    };
    let spec_key = format!("batches/{batch_id}/spec.json");
    let mut spec_json = serde_json::to_vec_pretty(&stored).context("serializing spec.json")?;
    spec_json.push(b'\n');
    store
        .put(&spec_key, spec_json)
        .await
        .with_context(|| format!("storing {spec_key}"))?;
    Ok(())
}

/// The settings of a batch run in this process (`cowork run`, embedded `cowork eval`).
pub struct EmbeddedRun {
    pub store: Arc<DirArtifactStore>,
    pub store_dir: PathBuf,
    pub harness_bin: PathBuf,
    pub slots: u16,
    pub window: Option<usize>,
    pub usage_pause: Duration,
    pub model_limits: Vec<ModelLimit>,
    pub keep_work: bool,
    pub quiet: bool,
    pub started: Instant,
    /// The envelope's `command`.
    pub command: &'static str,
}

/// Runs a stored batch in this process to its decision: an embedded queue and event log, the
/// worker loop on `slots` slots, and the supervisor. `what` names the batch in errors.
pub async fn run_stored(
    embedded: &EmbeddedRun,
    plan: &Plan,
    what: &str,
) -> Result<BatchOutcome, CliError> {
    let queue = MemJobQueue::new();
    let events = MemEventLog::new();
    let executor: Arc<dyn Executor> = match plan.executor {
        ExecutorKind::Sim => Arc::new(SimExecutor::new()),
        _ => Arc::new(HarnessExecutor::new(HarnessConfig::new(
            &embedded.harness_bin,
        ))),
    };
    let worker_config = WorkerConfig {
        worker_id: format!("embedded-{}", std::process::id()),
        tiers: Tier::ALL.to_vec(),
        slots: usize::from(embedded.slots),
        ack_wait: ACK_WAIT,
        max_deliver: MAX_DELIVER,
        cache_dir: embedded.store_dir.join("cache").join("bundles"),
        work_dir: embedded.store_dir.join("work"),
        keep_work_dirs: embedded.keep_work,
        unpack_limits: UnpackLimits::default(),
        backoff: Backoff::default(),
        renew_every: None,
        store_deadline: cowork_worker::DEFAULT_STORE_DEADLINE,
    };
    let worker_ports = WorkerPorts {
        queue: Arc::new(queue.clone()) as Arc<dyn JobQueue>,
        events: Arc::new(events.clone()) as Arc<dyn EventLog>,
        store: embedded.store.clone() as Arc<dyn ArtifactStore>,
        executor,
        batches: None,
    };
    let shutdown = CancellationToken::new();
    // Reaped below: the worker ends once the queue is closed.
    let worker = tokio::spawn(cowork_worker::run(
        worker_config,
        worker_ports,
        Arc::new(WorkerStats::default()),
        shutdown.child_token(),
    ));

    let (progress_tx, progress_rx) = watch::channel(ProgressSnapshot::default());
    let renderer = (!embedded.quiet)
        .then(|| tokio::spawn(crate::progress::render(progress_rx, embedded.started)));
    let ports = CoordinatorPorts {
        queue: Arc::new(queue.clone()),
        events: Arc::new(events.clone()),
        store: embedded.store.clone(),
    };
    let window = embedded
        .window
        .unwrap_or(usize::from(embedded.slots) * WINDOW_PER_SLOT);
    let options = SuperviseOptions {
        usage_pause: embedded.usage_pause,
        model_limits: Arc::new(SharedModelLimits::new(embedded.model_limits.clone())),
        ..SuperviseOptions::new(window, embedded.command)
    };
    let ctrl_c = shutdown.clone();
    // Ctrl-C cancels the batch; the watcher is detached and ends with the process.
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            ctrl_c.cancel();
        }
    });
    // The embedded run has no batch cancel of its own: Ctrl-C ends the process (shutdown).
    let signals = SuperviseSignals {
        shutdown: shutdown.child_token(),
        ..SuperviseSignals::default()
    };
    let outcome = supervise(&ports, plan, &options, &progress_tx, signals).await;
    drop(progress_tx);
    if let Some(renderer) = renderer {
        let _ = renderer.await;
    }
    queue.close();
    let _ = worker.await;
    match outcome {
        Ok(SuperviseEnd::Decided(outcome)) => Ok(*outcome),
        Ok(SuperviseEnd::Cancelled { .. }) | Err(SuperviseError::Cancelled) => {
            Err(CliError::Cancelled)
        }
        Err(error) => Err(CliError::Failed(
            anyhow::Error::new(error).context(format!("running {what} {}", plan.batch_id)),
        )),
    }
}
