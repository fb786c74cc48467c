//! What a worker is given and what it counts: its settings ([`WorkerConfig`]), the ports it
//! talks to ([`WorkerPorts`]) and its counters ([`WorkerStats`]), shared by the job loop and
//! every job it runs.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use cowork_fabric::backoff::Backoff;
use cowork_fabric::bundle::UnpackLimits;
use cowork_fabric::{ArtifactStore, BatchRegistry, EventLog, JobQueue, WorkerRegistry};
use cowork_schema::job::Tier;

use crate::executor::Executor;

/// Settings of one worker.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Unique id of this worker, shown in events and `cowork workers`.
    pub worker_id: String,
    /// Tiers this worker pulls; it never sees jobs of other tiers.
    pub tiers: Vec<Tier>,
    /// Jobs run at once (default 1; the CLI's own local cap is 8,
    /// harness-behaviour.md#matrix-concurrency).
    pub slots: usize,
    /// Most replay jobs one slot runs with one harness process (harness-behaviour.md#replay-packs);
    /// 1 runs every job alone. Default [`crate::executor::replay_pack::DEFAULT_REPLAY_PACK`].
    pub replay_pack: usize,
    /// The queue's ack deadline; an in-progress ack is sent every third of it.
    pub ack_wait: Duration,
    /// Deliveries of one job before an infrastructure failure is final
    /// (harness-behaviour.md#choice-c8).
    pub max_deliver: u32,
    /// Where bundles are unpacked, by digest.
    pub cache_dir: PathBuf,
    /// Most bytes of unpacked bundles the cache keeps (least recently used ones no running
    /// job holds are evicted past it); `None` = unbounded.
    pub cache_max_bytes: Option<u64>,
    /// Where each job gets its scratch directory.
    pub work_dir: PathBuf,
    /// Keep each job's scratch directory after it is stored (for debugging).
    pub keep_work_dirs: bool,
    pub unpack_limits: UnpackLimits,
    /// Backoff for uploads, event publishing and naks.
    pub backoff: Backoff,
    /// Interval of in-progress acks; `None` = a third of `ack_wait`. Only fault tests set it
    /// longer than `ack_wait`, to force redeliveries of running jobs.
    pub renew_every: Option<Duration>,
    /// Run only jobs the coordinator admitted (`crate::admitted`): a job's batch must have a
    /// record, and its bundle, executor and forwarded flags must be the batch's stored spec's.
    /// On for fleet workers (`cowork worker`); off for `cowork run`, whose in-process queue no
    /// one else can publish on, and for tools that publish their own jobs.
    pub verify_jobs: bool,
    /// How long one store or broker operation of a job (its uploads, its record, one event
    /// publish) is retried before the worker gives up on it ([`DEFAULT_STORE_DEADLINE`]). The
    /// job's lease is renewed meanwhile, so a long outage costs time, not a second run.
    pub store_deadline: Duration,
    /// How long a drain (SIGTERM: a node drain, a spot reclaim) waits for the running jobs
    /// before it cuts them short and hands them back for another worker, not counted as
    /// attempts; `None` waits until they finish (`cowork worker --drain-grace`).
    pub drain_grace: Option<Duration>,
}

/// Default of [`WorkerConfig::store_deadline`]: ten minutes outlast a store or broker restart
/// and most outages, and still end a job whose artifacts can never be stored.
pub const DEFAULT_STORE_DEADLINE: Duration = cowork_schema::retries::worker::STORE_DEADLINE;

/// The ports a worker uses.
#[derive(Clone)]
pub struct WorkerPorts {
    pub queue: Arc<dyn JobQueue>,
    pub events: Arc<dyn EventLog>,
    pub store: Arc<dyn ArtifactStore>,
    pub executor: Arc<dyn Executor>,
    /// The batch registry, followed for `cancel --kill-running`; `None` = never kill.
    pub batches: Option<Arc<dyn BatchRegistry>>,
    /// The workers registry, read for the fleet's replay slots when replay packs are sized;
    /// `None` = this worker is the whole fleet (`cowork run`).
    pub workers: Option<Arc<dyn WorkerRegistry>>,
}

/// Counters of one worker, readable while it runs.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Jobs running now.
    pub jobs_running: AtomicU64,
    pub jobs_finished: AtomicU64,
    pub jobs_retried: AtomicU64,
    pub jobs_failed_infra: AtomicU64,
    /// Jobs killed or skipped because their batch was cancelled with `--kill-running`.
    pub jobs_killed: AtomicU64,
    /// Executor time of every run, in milliseconds, and how many runs that sums.
    pub job_run_ms_total: AtomicU64,
    pub jobs_timed: AtomicU64,
    /// Jobs that ended in error, by class other than `infra` (the error category, or
    /// `unanswered`).
    pub failed_by_class: std::sync::Mutex<std::collections::BTreeMap<String, u64>>,
    /// Failure streaks of the queue under way, each logged once (`outage`).
    pub outages: crate::outage::Outages,
    /// Sandbox start failures in a row, and the tiers backed off after them.
    pub sandbox_starts: crate::sandbox_starts::SandboxStarts,
}

impl WorkerStats {
    /// Counts a job that ended in error of `class` (infra failures have their own counter).
    pub(crate) fn count_failure(&self, class: &str) {
        let mut classes = self
            .failed_by_class
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *classes.entry(class.to_owned()).or_insert(0) += 1;
    }
}
