//! The coordinator service: what the HTTP API and the background views share — its config and
//! ports, who may do what, the batches it supervises and their lifecycle.
//!
//! At start-up the service resumes every batch the registry says is not final (`planned`,
//! `running`, `stopping`): it reads the stored spec and bundle, plans them again with the stored
//! batch id and supervises them, which catches up with their events first. Each batch's
//! supervision is a task in the service's `TaskTracker`; its progress lives in a `watch` channel
//! that the API reads. A batch record moves `planned → running → done | cancelled` (`stopping`
//! while a cancel drains) by compare-and-set updates, so two replicas never overwrite each
//! other's change unseen.
//!
//! The clock is read here (record times, batch ids), never in `plan/` or `reduce/`.

mod access;
mod config;
mod controls;
mod leading;
mod lifecycle;
mod live_batch;
mod records;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cowork_fabric::backoff::Backoff;
use cowork_schema::BatchId;
use cowork_schema::registry::BatchState;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub(crate) use access::Access;
use access::TokenDigests;
pub use config::{
    ApiToken, CoordinatorConfig, DEFAULT_MAX_BUNDLE_BYTES, DEFAULT_MAX_CONCURRENT_SUBMITS,
    DEFAULT_WINDOW, FleetPorts, LeasePort, TokenPolicy,
};
pub(crate) use controls::{CancelError, ControlError, ResumeError};
pub(crate) use leading::{claim_lease, lead_alone};
pub(crate) use lifecycle::{end_of, new_batch_id};
pub(crate) use live_batch::{LiveBatch, StallPolicy};

/// Reports loaded and rendered at once; further requests wait for a turn. A report reads the
/// batch flat, but not for free: at 100,000 runs one render peaks at ~140 MiB (a brief of each
/// run and the runs the page details, benchmarks.md), so browser tabs opened on big batches
/// must not add up to more than the coordinator can hold. A waiting request costs only its
/// connection, which the HTTP limits bound.
pub(crate) const REPORT_RENDERS_AT_ONCE: usize = 2;

/// Pauses before supervising a batch (or listing batches) again after a transient port
/// failure: from 1 s, doubling to 30 s, jittered. A broker or store outage usually lasts
/// seconds.
const PORT_RETRY: Backoff = Backoff::of(cowork_schema::retries::coordinator::SUPERVISION);

/// What the background views last saw, each in a channel they write and the API reads.
pub(crate) struct FleetViews {
    /// The queue's streams and buckets as last checked (`fabric_view`): what stalls, since
    /// when, and what runs short of replicas.
    pub(crate) fabric: watch::Sender<cowork_schema::api::FabricStatus>,
    /// Workers whose heartbeat is late while they ran jobs (`fleet_view`), merged into every
    /// batch's progress like the stalls.
    pub(crate) lost_workers: watch::Sender<Vec<cowork_schema::api::LostWorker>>,
    /// The workers registry as the fleet view last read it (the live pages show it).
    pub(crate) workers_seen: watch::Sender<Vec<cowork_schema::registry::WorkerInfo>>,
    /// Batches per state, kept current from the registry's change stream (`batch_counts`);
    /// `None` while the registry cannot be watched. `/metrics` reads it instead of the registry.
    pub(crate) batch_counts: watch::Sender<Option<Vec<(BatchState, u64)>>>,
}

impl Default for FleetViews {
    fn default() -> FleetViews {
        FleetViews {
            fabric: watch::Sender::new(cowork_schema::api::FabricStatus::default()),
            lost_workers: watch::Sender::new(Vec::new()),
            workers_seen: watch::Sender::new(Vec::new()),
            batch_counts: watch::Sender::new(None),
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
    /// What the background views last saw of the fabric, the workers and the batches.
    pub(crate) views: FleetViews,
    /// Per-model admission limits, shared by every batch this process supervises.
    model_limits: Arc<crate::supervisor::SharedModelLimits>,
    /// The division of the fleet's slots between the batches this process supervises.
    pub(crate) fair_share: Arc<crate::supervisor::SharedFairShare>,
    /// The recent batches' stats, read once and shared by every batch start (`history`).
    pub(crate) history: Arc<crate::history::HistoryCache>,
    /// One permit per submit being read and validated (`max_concurrent_submits`).
    pub(crate) submit_slots: Arc<tokio::sync::Semaphore>,
    /// One permit per report being loaded and rendered
    /// ([`REPORT_RENDERS_AT_ONCE`]); more wait their turn.
    pub(crate) report_renders: Arc<tokio::sync::Semaphore>,
    /// The configured tokens, as [`Service::access`] compares them.
    tokens: TokenDigests,
    /// Whether a decided batch's live view links its report: not on the page of a
    /// `cowork run --ui`, whose server closes with the run.
    pub(crate) links_reports: bool,
    /// Tells each batch's hooks of its moments (decided, cancelled, budget stop, lost worker).
    pub(crate) notifier: crate::notify::Notifier,
    /// Whether this coordinator leads, and the token its supervisions stop on.
    pub(crate) leadership: crate::leadership::Leadership,
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
        let tokens = TokenDigests::of(&config);
        let fair_share = Arc::new(crate::supervisor::SharedFairShare::default());
        fair_share.share().set_quotas(config.token_quotas());
        let notifier = crate::notify::Notifier::new(config.notify.clone());
        Service {
            config,
            ports,
            shutdown,
            tracker: TaskTracker::new(),
            live: Mutex::new(HashMap::new()),
            resumed: AtomicBool::new(false),
            views: FleetViews::default(),
            model_limits,
            fair_share,
            history: Arc::new(crate::history::HistoryCache::default()),
            submit_slots,
            report_renders: Arc::new(tokio::sync::Semaphore::new(REPORT_RENDERS_AT_ONCE)),
            leadership: crate::leadership::Leadership::new(),
            tokens,
            links_reports: true,
            notifier,
        }
    }

    /// `true` once start-up resumed the batches it found.
    pub(crate) fn is_resumed(&self) -> bool {
        // Acquire pairs with the Release store in `resume_all`, so a ready probe that sees
        // `true` also sees the batches registered in the live map.
        self.resumed.load(Ordering::Acquire)
    }

    /// The term as leader ended: the batches are resumed again at the next term's start.
    pub(crate) fn forget_resumed(&self) {
        self.resumed.store(false, Ordering::Release);
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

    /// Every batch this process supervises or supervised since it started, with its id.
    pub(crate) fn live_batches_by_id(&self) -> Vec<(BatchId, Arc<LiveBatch>)> {
        self.lock_live()
            .iter()
            .map(|(id, live)| (id.clone(), Arc::clone(live)))
            .collect()
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
}

impl Service {
    /// Gives the fair share the live slots per tier of `workers` (heartbeats read at
    /// `now_ms`).
    pub(crate) fn share_live_slots(
        &self,
        workers: &[cowork_schema::registry::WorkerInfo],
        now_ms: u64,
    ) {
        self.fair_share.set_slots(cowork_core::fleet::live_slots(
            workers,
            cowork_schema::job::PROTOCOL_VERSION,
            now_ms,
        ));
    }

    /// Reads the workers registry once for the fair share: a batch that starts right after
    /// its workers came up is shared from its first admission, not from the next refresh of
    /// the fleet view. A failed read keeps the slots as they were.
    pub(crate) async fn refresh_live_slots(&self) {
        match self.ports.workers.list().await {
            Ok(workers) => self.share_live_slots(&workers, records::now_ms()),
            Err(error) => {
                tracing::debug!(error = %error, "listing workers for the fair share failed");
            }
        }
    }
}
