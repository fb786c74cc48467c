//! The coordinator service: the HTTP API (decisions.md#operations) over the fleet's ports, and the
//! lifecycle of every batch it supervises.
//!
//! [`run`] serves the API on a listener the caller bound, then resumes every batch the registry
//! says is not final (`planned`, `running`, `stopping`): it reads the stored spec and bundle,
//! plans them again with the stored batch id and supervises them, which catches up with their
//! events first. Each batch's supervision is a task in the service's `TaskTracker`; its progress
//! lives in a `watch` channel that the API reads. A batch record moves
//! `planned → running → done | cancelled` (`stopping` while a cancel drains) by compare-and-set
//! updates, so two replicas never overwrite each other's change unseen.
//!
//! The clock is read here (record times, batch ids), never in `plan/` or `reduce/`.

use cowork_schema::api::ProgressSnapshot;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cowork_fabric::backoff::Backoff;
use cowork_fabric::bundle::UnpackLimits;
use cowork_fabric::{
    ArtifactError, ArtifactStore, BatchRegistry, EventLog, JobQueue, PutOutcome, RegistryError,
    WorkerRegistry, error_chain,
};
use cowork_schema::BatchId;
use cowork_schema::api::BatchEnd;
use cowork_schema::batch::{BatchMode, StoredBatch};
use cowork_schema::registry::{BatchRecord, BatchState};
use serde::Deserialize;
use sha2::Digest;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::intake::submitted::plan_from_bundle;
use crate::supervisor::{
    CoordinatorPorts, SuperviseEnd, SuperviseError, SuperviseOptions, SuperviseSignals, supervise,
};
use cowork_core::plan::Plan;

/// Default largest submitted bundle: 256 MiB. A bundle holds scenarios, sessions and skill
/// trees; this is far above that and small enough to hold in memory while it is checked.
pub const DEFAULT_MAX_BUNDLE_BYTES: u64 = 256 << 20;
/// Default admission window per batch.
pub const DEFAULT_WINDOW: usize = 64;
/// How long shutdown waits for supervision tasks to return. They return as soon as they see
/// the token (they only await ports), so this bounds a stuck port call, not normal work.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Pauses before supervising a batch (or listing batches) again after a transient port
/// failure: from 1 s, doubling to 30 s, jittered. A broker or store outage usually lasts
/// seconds.
const PORT_RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
/// Compare-and-set attempts on one record before giving up; each failure means another writer
/// changed the record in between, which two replicas and one cancel make rare.
const CAS_ATTEMPTS: u32 = 8;

/// A bearer token the API accepts. `Debug` and `Display` print a redaction, so a config that
/// holds tokens can be logged.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct ApiToken(String);

impl ApiToken {
    /// Wraps a token.
    pub fn new(value: &str) -> ApiToken {
        ApiToken(value.to_owned())
    }

    /// The token itself; only the authorization check reads it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiToken(***)")
    }
}

impl std::fmt::Display for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// Settings of the coordinator service.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoordinatorConfig {
    /// Address the API listens on. The caller binds it and hands [`run`] the listener.
    pub listen: SocketAddr,
    /// Id of this replica, written as `owner` into the batch records it supervises.
    pub coordinator_id: String,
    /// Bearer tokens accepted on every `/v1/*` route. Required unless
    /// `allow_unauthenticated` is set.
    #[serde(default)]
    pub api_tokens: Vec<ApiToken>,
    /// Read-only bearer tokens: accepted on every `GET` the CLI and the pages use, refused
    /// with `403` on every request that changes a batch (submit, cancel, resume, pause,
    /// adjust). Default none.
    #[serde(default)]
    pub read_tokens: Vec<ApiToken>,
    /// Serve `/v1/*` without authentication when no token is configured (local use only).
    /// Default: false, and then [`run`] refuses to start without a token.
    #[serde(default)]
    pub allow_unauthenticated: bool,
    /// Jobs of one batch outstanding (published, not finished) at most. Default 64.
    #[serde(default = "default_window")]
    pub window: usize,
    /// Submits read and validated at once at most; more get `503` with `Retry-After`
    /// (`--max-concurrent-submits`). Default 4. Not read from a config file.
    #[serde(skip, default = "default_max_concurrent_submits")]
    pub max_concurrent_submits: usize,
    /// Largest accepted bundle, in bytes. Default 256 MiB; a larger upload gets 413.
    #[serde(default = "default_max_bundle_bytes")]
    pub max_bundle_bytes: u64,
    /// Caps applied when a submitted bundle is unpacked for validation (`cowork coordinator`
    /// sets 512 MiB, 50,000 entries, 512 MiB per file by default: `--max-unpacked-mib`,
    /// `--max-bundle-entries`). Not read from a config file.
    #[serde(skip)]
    pub unpack_limits: UnpackLimits,
    /// Directory where bundles are unpacked while they are validated; each batch uses and then
    /// removes its own subdirectory.
    pub scratch_dir: PathBuf,
    /// First dispatch pause of a tier after a `usage_limit` result
    /// (harness-behaviour.md#choice-c9); doubles up to `usage_pause_max`. Not read from a config
    /// file.
    #[serde(skip, default = "default_usage_pause")]
    pub usage_pause: Duration,
    #[serde(skip, default = "default_usage_pause_max")]
    pub usage_pause_max: Duration,
    /// Per-model admission limits shared by every batch (`--model-limit`). Not read from a
    /// config file.
    #[serde(skip)]
    pub model_limits: Vec<cowork_core::limits::ModelLimit>,
    /// Bounds on the API's connections (`--http-*`). Not read from a config file.
    #[serde(skip)]
    pub http_limits: crate::http_serve::HttpLimits,
    /// Serve the API over HTTPS with this certificate and key (`--tls-cert`, `--tls-key`).
    #[serde(skip)]
    pub tls: Option<crate::tls::TlsFiles>,
    /// A Kubernetes Job of workers for each large batch (`--k8s-worker-jobs`); `None` (the
    /// default) = off. Not read from a config file.
    #[cfg(feature = "k8s")]
    #[serde(skip)]
    pub k8s_worker_jobs: Option<crate::k8s::K8sWorkerJobs>,
}

/// Default cap on submits validated at once: each holds its body and unpacks a bundle.
pub const DEFAULT_MAX_CONCURRENT_SUBMITS: usize = 4;

fn default_max_concurrent_submits() -> usize {
    DEFAULT_MAX_CONCURRENT_SUBMITS
}

fn default_usage_pause() -> Duration {
    crate::supervisor::DEFAULT_USAGE_PAUSE
}

fn default_usage_pause_max() -> Duration {
    crate::supervisor::DEFAULT_USAGE_PAUSE_MAX
}

fn default_window() -> usize {
    DEFAULT_WINDOW
}

fn default_max_bundle_bytes() -> u64 {
    DEFAULT_MAX_BUNDLE_BYTES
}

/// The ports the coordinator service uses.
#[derive(Clone)]
pub struct FleetPorts {
    pub queue: Arc<dyn JobQueue>,
    pub events: Arc<dyn EventLog>,
    pub store: Arc<dyn ArtifactStore>,
    pub batches: Arc<dyn BatchRegistry>,
    pub workers: Arc<dyn WorkerRegistry>,
    /// Checks of the queue's streams and buckets, shown while one stalls; `None` for ports
    /// that cannot stall that way (the embedded ones).
    pub health: Option<Arc<dyn cowork_fabric::FabricHealth>>,
}

impl FleetPorts {
    /// The ports of a coordinator on NATS JetStream and an S3 bucket.
    pub fn on_nats(
        fabric: &cowork_fabric::nats::NatsFabric,
        store: Arc<dyn ArtifactStore>,
    ) -> FleetPorts {
        FleetPorts {
            queue: Arc::new(fabric.queue.clone()),
            events: Arc::new(fabric.events.clone()),
            store,
            batches: Arc::new(fabric.batches.clone()),
            workers: Arc::new(fabric.workers.clone()),
            health: Some(Arc::new(fabric.health.clone())),
        }
    }

    /// The subset the batch supervisor uses.
    pub fn coordinator_ports(&self) -> CoordinatorPorts {
        CoordinatorPorts {
            queue: Arc::clone(&self.queue),
            events: Arc::clone(&self.events),
            store: Arc::clone(&self.store),
        }
    }
}

/// Why the service could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(
        "no api token is configured: set at least one, or allow unauthenticated access explicitly"
    )]
    NoApiTokens,
    #[error("coordinator api tls")]
    Tls(#[from] crate::tls::TlsError),
    #[error("serving the http api on {addr}")]
    Serve {
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

/// Serves the coordinator API on `listener` and supervises batches until `shutdown` is
/// cancelled. On shutdown the API stops accepting requests, open event streams end, and every
/// supervised batch is left as it is for the next coordinator to resume.
#[tracing::instrument(skip_all, fields(coordinator_id = %config.coordinator_id))]
pub async fn run(
    config: CoordinatorConfig,
    ports: FleetPorts,
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> Result<(), ServerError> {
    if config.api_tokens.is_empty()
        && config.read_tokens.is_empty()
        && !config.allow_unauthenticated
    {
        return Err(ServerError::NoApiTokens);
    }
    // Read before anything starts, so a bad certificate stops start-up with the file named.
    let tls = config
        .tls
        .as_ref()
        .map(crate::tls::server_config)
        .transpose()?;
    let addr = listener
        .local_addr()
        .map_or_else(|_| config.listen.to_string(), |addr| addr.to_string());
    let service = Arc::new(Service::new(config, ports, shutdown.clone()));
    let router = crate::api::router(Arc::clone(&service));
    let resumer = Arc::clone(&service);
    service
        .tracker
        .spawn(async move { resumer.resume_all().await });
    let fleet_view = Arc::clone(&service);
    service
        .tracker
        .spawn(async move { crate::fleet_view::watch_fleet(fleet_view).await });
    let batch_counts = Arc::clone(&service);
    service
        .tracker
        .spawn(async move { crate::batch_counts::watch_batch_counts(batch_counts).await });
    let fabric_view = Arc::clone(&service);
    service
        .tracker
        .spawn(async move { crate::fabric_view::watch_fabric(fabric_view).await });
    tracing::info!(%addr, tls = tls.is_some(), "coordinator api listening");
    let limits = service.config.http_limits;
    let served = crate::http_serve::serve(listener, router, tls, limits, shutdown.clone()).await;
    // Whatever ended serving, the supervisors must stop too before `run` returns.
    shutdown.cancel();
    service.tracker.close();
    if tokio::time::timeout(DRAIN_TIMEOUT, service.tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            timeout_s = DRAIN_TIMEOUT.as_secs(),
            "supervision tasks still running at the end of the drain timeout"
        );
    }
    served.map_err(|source| ServerError::Serve { addr, source })
}

/// One batch supervised by this process: what the API reads and how it cancels.
pub(crate) struct LiveBatch {
    pub(crate) progress: watch::Sender<ProgressSnapshot>,
    /// The tiers of the batch's jobs (for the fleet view).
    pub(crate) tiers: Vec<cowork_schema::job::Tier>,
    /// Tiers of the batch with waiting jobs and no live worker, kept by the fleet view and
    /// merged into the progress the API serves (the supervisor owns the rest of it).
    pub(crate) unserved: watch::Sender<Vec<cowork_schema::api::UnservedTier>>,
    /// `Some` once the batch reached a final state (set after the record was updated).
    pub(crate) end: watch::Sender<Option<BatchEnd>>,
    pub(crate) cancel: CancellationToken,
    /// The batch's controls as its record says them (sent after each change is stored).
    pub(crate) controls: watch::Sender<cowork_schema::registry::BatchControls>,
    /// The supervisor's latest live view (at most every `LIVE_EVERY`).
    pub(crate) snapshot: Arc<crate::supervisor::LiveSnapshotSender>,
    /// Strip requests of the live page, answered by the supervisor.
    pub(crate) unit_requests: tokio::sync::mpsc::Sender<crate::supervisor::UnitRunsRequest>,
    unit_receiver:
        Arc<tokio::sync::Mutex<tokio::sync::mpsc::Receiver<crate::supervisor::UnitRunsRequest>>>,
}

impl LiveBatch {
    pub(crate) fn new(
        progress: ProgressSnapshot,
        tiers: Vec<cowork_schema::job::Tier>,
    ) -> LiveBatch {
        // A few strip requests queue at most; more wait in the API (each page asks for one
        // strip at a time).
        let (unit_requests, unit_receiver) = tokio::sync::mpsc::channel(16);
        LiveBatch {
            progress: watch::Sender::new(progress),
            tiers,
            unserved: watch::Sender::new(Vec::new()),
            end: watch::Sender::new(None),
            cancel: CancellationToken::new(),
            controls: watch::Sender::new(Default::default()),
            snapshot: Arc::new(watch::Sender::new(None)),
            unit_requests,
            unit_receiver: Arc::new(tokio::sync::Mutex::new(unit_receiver)),
        }
    }

    /// What connects the batch's supervisor to its live page.
    pub(crate) fn link(&self) -> crate::supervisor::LiveLink {
        crate::supervisor::LiveLink {
            controls: Some(self.controls.subscribe()),
            snapshot: Some(Arc::clone(&self.snapshot)),
            unit_requests: Some(Arc::clone(&self.unit_receiver)),
        }
    }
}

/// The state the API handlers share.
pub(crate) struct Service {
    pub(crate) config: CoordinatorConfig,
    pub(crate) ports: FleetPorts,
    pub(crate) shutdown: CancellationToken,
    pub(crate) tracker: TaskTracker,
    live: Mutex<HashMap<BatchId, Arc<LiveBatch>>>,
    /// Set once the batches found at start-up have been resumed.
    resumed: AtomicBool,
    /// The queue's streams and buckets as last checked (`fabric_view`): what stalls, since
    /// when, and what runs short of replicas.
    pub(crate) fabric: watch::Sender<cowork_schema::api::FabricStatus>,
    /// Workers whose heartbeat is late while they ran jobs (`fleet_view`), merged into every
    /// batch's progress like the stalls.
    pub(crate) lost_workers: watch::Sender<Vec<cowork_schema::api::LostWorker>>,
    /// The workers registry as the fleet view last read it (the live pages show it).
    pub(crate) workers_seen: watch::Sender<Vec<cowork_schema::registry::WorkerInfo>>,
    /// Per-model admission limits, shared by every batch this process supervises.
    model_limits: Arc<crate::supervisor::SharedModelLimits>,
    /// Batches per state, kept current from the registry's change stream (`batch_counts`);
    /// `None` while the registry cannot be watched. `/metrics` reads it instead of the registry.
    pub(crate) batch_counts: watch::Sender<Option<Vec<(BatchState, u64)>>>,
    /// The recent batches' stats, read once and shared by every batch start (`history`).
    pub(crate) history: Arc<crate::history::HistoryCache>,
    /// One permit per submit being read and validated (`max_concurrent_submits`).
    pub(crate) submit_slots: Arc<tokio::sync::Semaphore>,
    /// One permit per report being loaded and rendered
    /// ([`crate::api::pages::REPORT_RENDERS_AT_ONCE`]); more wait their turn.
    pub(crate) report_renders: Arc<tokio::sync::Semaphore>,
    /// sha256 of each accepted token: comparing fixed-size digests in constant time reveals
    /// neither a token's bytes nor its length.
    token_digests: Vec<[u8; 32]>,
    /// Whether a decided batch's live view links its report: not on the page of a
    /// `cowork run --ui`, whose server closes with the run.
    pub(crate) links_reports: bool,
    /// sha256 of each read-only token, compared the same way.
    read_token_digests: Vec<[u8; 32]>,
}

/// What a request's token lets it do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Everything: read, submit and steer batches.
    Full,
    /// `GET` only: status, reports, artifacts, workers, the pages.
    Read,
}

impl Service {
    pub(crate) fn new(
        config: CoordinatorConfig,
        ports: FleetPorts,
        shutdown: CancellationToken,
    ) -> Service {
        let model_limits = Arc::new(crate::supervisor::SharedModelLimits::new(
            config.model_limits.clone(),
        ));
        let submit_slots = Arc::new(tokio::sync::Semaphore::new(
            config.max_concurrent_submits.max(1),
        ));
        let token_digests = config
            .api_tokens
            .iter()
            .map(|token| digest(token.expose().as_bytes()))
            .collect();
        let read_token_digests = config
            .read_tokens
            .iter()
            .map(|token| digest(token.expose().as_bytes()))
            .collect();
        Service {
            config,
            ports,
            shutdown,
            tracker: TaskTracker::new(),
            live: Mutex::new(HashMap::new()),
            resumed: AtomicBool::new(false),
            fabric: watch::Sender::new(cowork_schema::api::FabricStatus::default()),
            lost_workers: watch::Sender::new(Vec::new()),
            workers_seen: watch::Sender::new(Vec::new()),
            model_limits,
            batch_counts: watch::Sender::new(None),
            history: Arc::new(crate::history::HistoryCache::default()),
            submit_slots,
            report_renders: Arc::new(tokio::sync::Semaphore::new(
                crate::api::pages::REPORT_RENDERS_AT_ONCE,
            )),
            token_digests,
            links_reports: true,
            read_token_digests,
        }
    }

    /// What `presented` (the bearer token of a request, if any) may do on `/v1/*`; `None`
    /// when it is missing or matches no configured token.
    pub(crate) fn access(&self, presented: Option<&str>) -> Option<Access> {
        if self.token_digests.is_empty() && self.read_token_digests.is_empty() {
            return self.config.allow_unauthenticated.then_some(Access::Full);
        }
        let presented = digest(presented?.as_bytes());
        // Every configured token of both kinds is compared, so the time taken says neither
        // which one matched nor of which kind it is.
        let full = any_matches(&self.token_digests, &presented);
        let read = any_matches(&self.read_token_digests, &presented);
        if full {
            Some(Access::Full)
        } else if read {
            Some(Access::Read)
        } else {
            None
        }
    }

    /// `true` once start-up resumed the batches it found.
    pub(crate) fn is_resumed(&self) -> bool {
        // Acquire pairs with the Release store in `resume_all`, so a ready probe that sees
        // `true` also sees the batches registered in the live map.
        self.resumed.load(Ordering::Acquire)
    }

    /// The live batch `batch_id`, if this process supervises (or supervised) it.
    pub(crate) fn live(&self, batch_id: &BatchId) -> Option<Arc<LiveBatch>> {
        self.lock_live().get(batch_id).cloned()
    }

    /// Serves `live` as the live view of `batch_id`, for a batch this process runs itself
    /// (`cowork run --ui`, see [`crate::live_ui`]).
    pub(crate) fn host_live(&self, batch_id: BatchId, live: Arc<LiveBatch>) {
        self.lock_live().insert(batch_id, live);
    }

    /// Every batch this process supervises or supervised since it started.
    pub(crate) fn live_batches(&self) -> Vec<Arc<LiveBatch>> {
        self.lock_live().values().cloned().collect()
    }

    fn lock_live(&self) -> std::sync::MutexGuard<'_, HashMap<BatchId, Arc<LiveBatch>>> {
        // The map is only inserted into and read; a panic elsewhere cannot leave it half
        // updated, so a poisoned lock is still consistent.
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stores an accepted batch (bundle, spec, record) and starts supervising it. Nothing is
    /// stored before this is called, i.e. before validation passed.
    pub(crate) async fn accept(
        self: &Arc<Self>,
        stored: StoredBatch,
        bundle: &std::path::Path,
        plan: Plan,
    ) -> Result<BatchRecord, AcceptError> {
        let batch_id = stored.batch_id.clone();
        let bundle_key = format!("bundles/{}.tar.zst", stored.spec.bundle_sha256);
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
        let spec_key = format!("batches/{batch_id}/spec.json");
        let mut spec_json =
            serde_json::to_vec_pretty(&stored).expect("a stored batch always serializes");
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
            owner: Some(self.config.coordinator_id.clone()),
            generation: 0,
            kill_running: false,
            controls: Default::default(),
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
        self.start(plan, stored.spec.mode.envelope_command());
        Ok(record)
    }

    /// Starts (or restarts) supervising `plan` in a tracked task.
    fn start(self: &Arc<Self>, plan: Plan, command: &str) {
        let live = {
            let mut map = self.lock_live();
            Arc::clone(map.entry(plan.batch_id.clone()).or_insert_with(|| {
                Arc::new(LiveBatch::new(
                    ProgressSnapshot {
                        planned: plan.n_jobs(),
                        ..ProgressSnapshot::default()
                    },
                    plan.units.iter().map(|unit| unit.tier).collect(),
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
        let Some(record) = self.claim(&plan.batch_id, &live).await else {
            return;
        };
        plan.generation = record.generation;
        let Some(end) = self.supervise_until_final(&plan, &command, &live).await else {
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
    ) -> Option<FinalState> {
        let ports = self.ports.coordinator_ports();
        let options = SuperviseOptions {
            usage_pause: self.config.usage_pause,
            usage_pause_max: self.config.usage_pause_max,
            model_limits: Arc::clone(&self.model_limits),
            history: Arc::clone(&self.history),
            ..SuperviseOptions::new(self.config.window, command)
        };
        let mut failures = 0u32;
        loop {
            let signals = SuperviseSignals {
                shutdown: self.shutdown.child_token(),
                cancel: live.cancel.clone(),
                live: live.link(),
            };
            match supervise(&ports, plan, &options, &live.progress, signals).await {
                Ok(SuperviseEnd::Decided(outcome)) => {
                    // Eval batches: store the A/B report as `eval.json` before the
                    // record says Done, so whoever sees the end can read it. The batch's
                    // verdict stands without it, so a failure is logged, not fatal.
                    if plan.mode == BatchMode::Eval
                        && let Err(error) =
                            crate::eval::store_eval_document(ports.store.as_ref(), plan, &outcome)
                                .await
                    {
                        tracing::error!(error = %error_chain(&error), "eval report not stored");
                    }
                    return Some(FinalState {
                        state: BatchState::Done,
                        ok: Some(outcome.reduction.ok),
                        exit_code: Some(outcome.exit_code),
                        message: None,
                    });
                }
                Ok(SuperviseEnd::Cancelled { .. }) => {
                    return Some(FinalState {
                        state: BatchState::Cancelled,
                        ok: None,
                        exit_code: None,
                        message: None,
                    });
                }
                Err(SuperviseError::Cancelled) => return None,
                Err(error) if error.is_transient() => {
                    failures += 1;
                    let pause = PORT_RETRY.delay(failures);
                    tracing::warn!(error = %error, pause_s = pause.as_secs_f64(), "batch supervision interrupted, retrying");
                    // Racing the pause against shutdown is safe: nothing is held across it.
                    tokio::select! {
                        _ = self.shutdown.cancelled() => return None,
                        _ = tokio::time::sleep(pause) => {}
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
                        message: Some(error_chain(&error)),
                    });
                }
            }
        }
    }

    /// Records how the batch ended (unless another process finalized it meanwhile) and tells
    /// the batch's followers.
    async fn record_end(&self, plan: &Plan, live: &LiveBatch, end: FinalState) {
        let batch_id = &plan.batch_id;
        // Followers wait for the record, so a decided batch must not stay running in it.
        let ended = self
            .transition_until_written(batch_id, "recording the batch's end", |record| {
                if record.state.is_final() {
                    return false;
                }
                record.state = end.state;
                record.ok = end.ok;
                record.exit_code = end.exit_code;
                true
            })
            .await;
        match ended {
            Ok(record) => {
                tracing::info!(state = record.state.as_str(), ok = ?record.ok, "batch ended");
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

    /// Cancels a batch: the record goes to `stopping` and, when this process supervises the
    /// batch, admission stops. Returns the updated record; `Ok(None)` if there is no such batch.
    pub(crate) async fn cancel(
        &self,
        batch_id: &BatchId,
        kill_running: bool,
    ) -> Result<Option<BatchRecord>, CancelError> {
        let Some((record, _)) = self
            .ports
            .batches
            .get(batch_id)
            .await
            .map_err(CancelError::Registry)?
        else {
            return Ok(None);
        };
        if record.state.is_final() {
            return Err(CancelError::Final(record.state));
        }
        let record = self
            .transition(batch_id, |record| {
                if record.state.is_final() {
                    return false;
                }
                record.state = BatchState::Stopping;
                // Workers follow the registry and kill the batch's running jobs.
                record.kill_running |= kill_running;
                true
            })
            .await
            .map_err(CancelError::Registry)?;
        if record.state.is_final() {
            return Err(CancelError::Final(record.state));
        }
        if let Some(live) = self.live(batch_id) {
            live.cancel.cancel();
        }
        tracing::info!(batch_id = %batch_id, kill_running, "batch cancel requested");
        Ok(Some(record))
    }

    /// Changes a running batch's controls (`cowork pause`, `resume-dispatch`, `adjust`): the
    /// change is checked against the record, stored in it by compare-and-set with who asked and
    /// when, and passed to the batch's supervisor when it runs here. Returns the updated record;
    /// `Ok(None)` if there is no such batch. Nothing changes when the change is refused.
    pub(crate) async fn control(
        &self,
        batch_id: &BatchId,
        change: &ControlAsk,
        by: &str,
    ) -> Result<Option<BatchRecord>, ControlError> {
        let Some((record, _)) = self
            .ports
            .batches
            .get(batch_id)
            .await
            .map_err(ControlError::Registry)?
        else {
            return Ok(None);
        };
        let at_ms = now_ms();
        let submitted = self.submitted_budget_usd(batch_id).await;
        // Checked once before the write, so a refusal names the record as it was read; the
        // compare-and-set below checks again against whatever it finds.
        cowork_core::controls::apply(&mut record.clone(), change, by, at_ms, submitted)
            .map_err(ControlError::Refused)?;
        let refused = std::sync::Mutex::new(None);
        let record = self
            .transition(batch_id, |record| {
                match cowork_core::controls::apply(record, change, by, at_ms, submitted) {
                    Ok(()) => true,
                    Err(refusal) => {
                        *refused
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(refusal);
                        false
                    }
                }
            })
            .await
            .map_err(ControlError::Registry)?;
        if let Some(refusal) = refused
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            return Err(ControlError::Refused(refusal));
        }
        if let Some(live) = self.live(batch_id) {
            live.controls.send_replace(record.controls.clone());
        }
        tracing::info!(batch_id = %batch_id, change = ?change, by, "batch controls changed");
        Ok(Some(record))
    }

    /// The batch budget a batch was submitted with, from its stored spec (`None` when it had
    /// none, or the spec cannot be read: the change record then says `none`).
    async fn submitted_budget_usd(&self, batch_id: &BatchId) -> Option<f64> {
        let key = format!("batches/{batch_id}/spec.json");
        let bytes = self.ports.store.get(&key).await.ok()?;
        let stored: StoredBatch = serde_json::from_slice(&bytes).ok()?;
        stored.spec.flags.batch_budget_usd
    }

    /// Resumes a final batch (`cowork resume`): its generation goes up by one, and supervision
    /// starts again from the event log. Jobs with a result stay as they are; jobs that ended in
    /// an infrastructure failure or were killed, and jobs never run, are admitted again.
    /// Returns the updated record; `Ok(None)` if there is no such batch.
    pub(crate) async fn resume(
        self: &Arc<Self>,
        batch_id: &BatchId,
    ) -> Result<Option<BatchRecord>, ResumeError> {
        let Some((record, _)) = self
            .ports
            .batches
            .get(batch_id)
            .await
            .map_err(ResumeError::Registry)?
        else {
            return Ok(None);
        };
        if !record.state.is_final() {
            return Err(ResumeError::NotFinal(record.state));
        }
        // Planned again before the record changes: a batch that cannot be planned any more
        // stays final and untouched.
        let (plan, mode) = self.load(batch_id).await.map_err(ResumeError::Load)?;
        let generation = record.generation + 1;
        let record = self
            .transition(batch_id, |record| {
                if !record.state.is_final() || record.generation >= generation {
                    // Another resume (or a second replica) won the race.
                    return false;
                }
                record.state = BatchState::Planned;
                record.generation = generation;
                record.kill_running = false;
                record.ok = None;
                record.exit_code = None;
                record.owner = Some(self.config.coordinator_id.clone());
                true
            })
            .await
            .map_err(ResumeError::Registry)?;
        if record.generation != generation || record.state != BatchState::Planned {
            return Err(ResumeError::NotFinal(record.state));
        }
        // A fresh live entry: the old one holds the previous end and cancel token.
        self.lock_live().remove(batch_id);
        tracing::info!(batch_id = %batch_id, generation, "batch resumed");
        self.start(plan, mode.envelope_command());
        Ok(Some(record))
    }

    /// [`Service::transition`], retried after a transient registry failure until it is written or
    /// the service shuts down: a registry briefly unavailable (a NATS node restarting, a stream
    /// electing its leader) must neither leave a submitted batch unstarted nor a decided one
    /// running in its record. `what` names the change in the log.
    async fn transition_until_written(
        &self,
        batch_id: &BatchId,
        what: &str,
        change: impl Fn(&mut BatchRecord) -> bool,
    ) -> Result<BatchRecord, RegistryError> {
        let mut failures = 0u32;
        loop {
            match self.transition(batch_id, &change).await {
                Err(error) if error.is_transient() => {
                    failures += 1;
                    let pause = PORT_RETRY.delay(failures);
                    tracing::warn!(error = %error, pause_s = pause.as_secs_f64(), "{what} failed, retrying");
                    // Nothing is held across the pause; the record says what it said.
                    tokio::select! {
                        _ = self.shutdown.cancelled() => return Err(error),
                        _ = tokio::time::sleep(pause) => {}
                    }
                }
                other => return other,
            }
        }
    }

    /// Applies `change` to a batch's record by compare-and-set, re-reading on conflict. `change`
    /// returns `false` to leave the record as it is. Returns the record as stored afterwards.
    pub(crate) async fn transition(
        &self,
        batch_id: &BatchId,
        change: impl Fn(&mut BatchRecord) -> bool,
    ) -> Result<BatchRecord, RegistryError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let Some((mut record, revision)) = self.ports.batches.get(batch_id).await? else {
                return Err(RegistryError::Failed {
                    message: format!("batch {batch_id} has no record"),
                });
            };
            if !change(&mut record) {
                return Ok(record);
            }
            record.updated_at_ms = now_ms();
            match self.ports.batches.update(&record, revision).await {
                Ok(_) => return Ok(record),
                Err(RegistryError::Conflict { .. }) if attempt < CAS_ATTEMPTS => continue,
                Err(error) => return Err(error),
            }
        }
    }

    /// Resumes every batch the registry lists as not final, then marks the service ready.
    /// Listing is retried until it succeeds or the service shuts down.
    async fn resume_all(self: Arc<Self>) {
        let mut failures = 0u32;
        let records = loop {
            match self.ports.batches.list().await {
                Ok(records) => break records,
                Err(error) => {
                    failures += 1;
                    let pause = PORT_RETRY.delay(failures);
                    tracing::warn!(error = %error, pause_s = pause.as_secs_f64(), "listing batches to resume failed, retrying");
                    // Nothing is held across the pause; abandoning it on shutdown is safe.
                    tokio::select! {
                        _ = self.shutdown.cancelled() => return,
                        _ = tokio::time::sleep(pause) => {}
                    }
                }
            }
        };
        for record in records.iter().filter(|record| !record.state.is_final()) {
            if self.shutdown.is_cancelled() {
                return;
            }
            match self.load(&record.batch_id).await {
                Ok((plan, mode)) => {
                    tracing::info!(batch_id = %record.batch_id, state = record.state.as_str(), "resuming batch");
                    self.start(plan, mode.envelope_command());
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
    async fn load(&self, batch_id: &BatchId) -> Result<(Plan, BatchMode), String> {
        let spec_key = format!("batches/{batch_id}/spec.json");
        let spec_json = self
            .ports
            .store
            .get(&spec_key)
            .await
            .map_err(|e| format!("reading {spec_key}: {e}"))?;
        let stored: StoredBatch = serde_json::from_slice(&spec_json)
            .map_err(|e| format!("{spec_key} is unreadable: {e}"))?;
        let bundle_key = format!("bundles/{}.tar.zst", stored.spec.bundle_sha256);
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

/// Why a resume was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResumeError {
    #[error("the batch is {}; only a done or cancelled batch can be resumed (a running one resumes by itself when its coordinator restarts)", .0.as_str())]
    NotFinal(BatchState),
    #[error("the batch cannot be planned again: {0}")]
    Load(String),
    #[error("batch registry")]
    Registry(#[source] RegistryError),
}

/// A change of a running batch's controls, as asked.
pub(crate) use cowork_core::controls::ControlAsk;

/// Why a change of the controls was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ControlError {
    #[error("{0}")]
    Refused(cowork_core::controls::ControlRefusal),
    #[error("batch registry")]
    Registry(#[source] RegistryError),
}

/// Why a cancel was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CancelError {
    #[error("the batch is already {}", .0.as_str())]
    Final(BatchState),
    #[error("batch registry")]
    Registry(#[source] RegistryError),
}

/// How a supervised batch ended, for its record.
struct FinalState {
    state: BatchState,
    ok: Option<bool>,
    exit_code: Option<i32>,
    /// Why it failed for good, when it did.
    message: Option<String>,
}

/// The `end` event of a final record.
pub(crate) fn end_of(record: &BatchRecord, message: Option<String>) -> BatchEnd {
    BatchEnd {
        state: record.state,
        ok: record.ok,
        exit_code: record.exit_code,
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

/// Milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

/// `true` when any of `accepted` equals `presented`, comparing all of them in constant time.
fn any_matches(accepted: &[[u8; 32]], presented: &[u8; 32]) -> bool {
    use subtle::ConstantTimeEq;
    let mut matched = subtle::Choice::from(0);
    for digest in accepted {
        matched |= digest.ct_eq(presented);
    }
    bool::from(matched)
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(bytes).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_never_print() {
        let token = ApiToken::new("s3cr3t");
        assert_eq!(format!("{token}"), "***");
        assert_eq!(format!("{token:?}"), "ApiToken(***)");
        let config: CoordinatorConfig = serde_json::from_str(
            r#"{"listen":"127.0.0.1:0","coordinator_id":"c1","api_tokens":["s3cr3t"],"scratch_dir":"/tmp/x"}"#,
        )
        .expect("a minimal config parses");
        assert!(!format!("{config:?}").contains("s3cr3t"));
        assert_eq!(config.window, DEFAULT_WINDOW);
        assert_eq!(config.max_bundle_bytes, DEFAULT_MAX_BUNDLE_BYTES);
        assert!(!config.allow_unauthenticated);
    }

    #[test]
    fn unknown_config_keys_are_refused() {
        let parsed: Result<CoordinatorConfig, _> = serde_json::from_str(
            r#"{"listen":"127.0.0.1:0","coordinator_id":"c1","scratch_dir":"/tmp/x","windwo":3}"#,
        );
        assert!(parsed.is_err());
    }
}
