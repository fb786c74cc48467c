//! Replay packs are cut from the queue as it is while a batch is still being published: a
//! worker that wakes on a batch's first job tops its pack up until it holds its share of
//! everything queued by then (harness-behaviour.md#replay-packs), so a corpus that arrives in
//! parts still runs as one harness process per slot instead of one per part.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use cowork_fabric::backoff::Backoff;
use cowork_fabric::bundle::UnpackLimits;
use cowork_fabric::embedded::{
    DirArtifactStore, MemBatchRegistry, MemEventLog, MemJobQueue, MemWorkerRegistry,
};
use cowork_fabric::queue::{Delivery, JobPuller, Published, QueueError};
use cowork_fabric::{ArtifactStore, BatchRegistry, EventLog, JobQueue, WorkerRegistry};
use cowork_schema::batch::ExecutorKind;
use cowork_schema::ids::UnitRef;
use cowork_schema::job::{JobCommand, JobSpec, Tier};
use cowork_schema::registry::{BatchState, WorkerInfo};
use cowork_worker::executor::{Classified, ExecOutput, Executor, JobContext};
use cowork_worker::{WorkerConfig, WorkerPorts, WorkerStats};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::support::job_builder;

/// A queue whose batch is published in parts while the worker looks at it: every look at the
/// queue's depth first publishes the next part, as a coordinator still publishing would. With
/// `rival`, another worker takes every odd-numbered job of each part before this one looks
/// (JetStream's depth then leaves them out, as it leaves out whatever other workers hold).
struct PublishedInParts {
    queue: MemJobQueue,
    parts: Mutex<Vec<Vec<JobSpec>>>,
    rival: bool,
}

#[async_trait]
impl JobQueue for PublishedInParts {
    async fn publish(&self, job: &JobSpec) -> Result<Published, QueueError> {
        self.queue.publish(job).await
    }

    async fn pull(&self, tiers: &[Tier]) -> Result<Option<Delivery>, QueueError> {
        self.queue.pull(tiers).await
    }

    fn puller(&self, tiers: &[Tier]) -> Box<dyn JobPuller + '_> {
        self.queue.puller(tiers)
    }

    async fn pending(&self) -> Result<Vec<(Tier, u64)>, QueueError> {
        let next = {
            let mut parts = self.parts.lock().expect("the parts lock");
            (!parts.is_empty()).then(|| parts.remove(0))
        };
        if let Some(mut part) = next {
            if self.rival {
                part.retain(|job| matches!(job.unit, UnitRef::File(index) if index % 2 == 0));
            }
            for result in self.queue.publish_many(&part).await {
                result.expect("publishing a part of the batch");
            }
        }
        self.queue.pending().await
    }
}

/// Runs nothing; reports the size of every executor call.
struct CountingExecutor {
    calls: mpsc::UnboundedSender<usize>,
}

fn output() -> ExecOutput {
    ExecOutput {
        classified: Classified::error("test".into(), "not run by the test".to_owned()),
        exit_code: Some(1),
        harness_version: None,
        spawned: true,
        artifacts: Vec::new(),
        run_ms: 0,
    }
}

#[async_trait]
impl Executor for CountingExecutor {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::Harness
    }

    async fn execute(&self, _ctx: &JobContext, _cancel: CancellationToken) -> ExecOutput {
        let _ = self.calls.send(1);
        output()
    }

    async fn execute_many(&self, jobs: &[(JobContext, CancellationToken)]) -> Vec<ExecOutput> {
        let _ = self.calls.send(jobs.len());
        jobs.iter().map(|_| output()).collect()
    }
}

fn replay_job(index: u32) -> JobSpec {
    job_builder(
        JobCommand::Replay,
        &format!("corpus/c{index:03}.cassette.json"),
        ExecutorKind::Harness,
    )
    .tier(Tier::Replay)
    .unit(UnitRef::File(index))
    .build()
}

fn config(dir: &std::path::Path) -> WorkerConfig {
    WorkerConfig {
        worker_id: "packs-test".to_owned(),
        tiers: vec![Tier::Replay],
        slots: 1,
        replay_pack: 256,
        ack_wait: Duration::from_secs(30),
        max_deliver: 3,
        cache_dir: dir.join("cache"),
        cache_max_bytes: None,
        work_dir: dir.join("work"),
        keep_work_dirs: false,
        unpack_limits: UnpackLimits::default(),
        backoff: Backoff::default(),
        renew_every: None,
        verify_jobs: false,
        store_deadline: cowork_worker::DEFAULT_STORE_DEADLINE,
        drain_grace: None,
    }
}

/// Runs one 1-slot worker on `queue` until its executor has been handed `n_jobs` jobs; returns
/// the size of every executor call.
async fn run_until(
    dir: &std::path::Path,
    queue: PublishedInParts,
    batches: Option<Arc<dyn BatchRegistry>>,
    workers: Option<Arc<dyn WorkerRegistry>>,
    n_jobs: usize,
) -> Vec<usize> {
    let (calls, mut sizes) = mpsc::unbounded_channel();
    let ports = WorkerPorts {
        queue: Arc::new(queue) as Arc<dyn JobQueue>,
        events: Arc::new(MemEventLog::new()) as Arc<dyn EventLog>,
        store: Arc::new(DirArtifactStore::new(&dir.join("store"))) as Arc<dyn ArtifactStore>,
        executor: Arc::new(CountingExecutor { calls }),
        batches,
        workers,
    };
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(cowork_worker::run(
        config(dir),
        ports,
        Arc::new(WorkerStats::default()),
        shutdown.clone(),
    ));
    let mut seen = Vec::new();
    while seen.iter().sum::<usize>() < n_jobs {
        seen.push(sizes.recv().await.expect("the executor reports every call"));
    }
    shutdown.cancel();
    worker
        .await
        .expect("the worker task")
        .expect("a drained worker is a success");
    seen
}

/// A cache dir holding the test jobs' bundle: the jobs go straight to the executor.
fn cache_bundle(dir: &std::path::Path) {
    std::fs::create_dir_all(dir.join("cache").join(&replay_job(0).bundle_sha256))
        .expect("creating the cached bundle dir");
}

#[tokio::test]
async fn a_batch_published_in_parts_runs_as_one_pack_per_slot() {
    let dir = tempfile::tempdir().expect("a temp dir");
    cache_bundle(dir.path());
    let queue = MemJobQueue::new();
    queue
        .publish(&replay_job(0))
        .await
        .expect("publishing a job");
    // The worker's look before its first pull finds the first job only; its top-up looks then
    // find 40 more, and then 100 more.
    let parts = vec![
        Vec::new(),
        (1..41).map(replay_job).collect(),
        (41..141).map(replay_job).collect(),
    ];
    let n_jobs = 141;
    let in_parts = PublishedInParts {
        queue: queue.clone(),
        parts: Mutex::new(parts),
        rival: false,
    };
    let seen = run_until(dir.path(), in_parts, None, None, n_jobs).await;
    assert_eq!(
        seen,
        vec![n_jobs],
        "one harness call for the whole batch on the one slot, not one per part published"
    );
    assert_eq!(queue.n_ready(), 0);
}

fn heartbeat(worker_id: &str) -> WorkerInfo {
    WorkerInfo {
        protocol: cowork_schema::job::PROTOCOL_VERSION,
        worker_id: worker_id.to_owned(),
        tiers: vec![Tier::Replay],
        slots: 1,
        busy: 0,
        executor: "harness".to_owned(),
        harness_version: None,
        os: "linux".to_owned(),
        arch: "x86_64".to_owned(),
        hostname: "test".to_owned(),
        jobs_finished: 0,
        started_at_ms: 0,
        heartbeat_at_ms: 0,
        heartbeat_every_ms: 0,
        draining: false,
        sandbox_start_failures: 0,
        backed_off_tiers: Vec::new(),
    }
}

/// Two 1-slot workers share a 300-job batch that is still being published; the other worker
/// takes half of every part, so the queue's depth never shows more than this worker's half of
/// what is out. The first pack is still this worker's share of the whole batch (150), read
/// from the batch's record, not the 32s the shrinking depth would cut.
#[tokio::test]
async fn the_first_pack_of_a_batch_shared_with_another_worker_is_its_share_of_the_batch() {
    let dir = tempfile::tempdir().expect("a temp dir");
    cache_bundle(dir.path());
    let queue = MemJobQueue::new();
    let first = replay_job(0);
    queue.publish(&first).await.expect("publishing a job");
    let parts = vec![
        Vec::new(),
        (1..41).map(replay_job).collect(),
        (41..141).map(replay_job).collect(),
        (141..300).map(replay_job).collect(),
    ];
    let batches = MemBatchRegistry::new();
    batches
        .create(&crate::support::batch_record(
            first.batch_id.clone(),
            BatchState::Running,
            String::new(),
            300,
        ))
        .await
        .expect("creating the record");
    let workers = MemWorkerRegistry::new();
    for worker_id in ["packs-test", "rival"] {
        workers
            .heartbeat(&heartbeat(worker_id))
            .await
            .expect("a heartbeat");
    }
    let in_parts = PublishedInParts {
        queue: queue.clone(),
        parts: Mutex::new(parts),
        rival: true,
    };
    let seen = run_until(
        dir.path(),
        in_parts,
        Some(Arc::new(batches)),
        Some(Arc::new(workers)),
        150,
    )
    .await;
    assert_eq!(
        seen,
        vec![150],
        "one pack of this worker's share of the batch, however the depth shrank meanwhile"
    );
    assert_eq!(queue.n_ready(), 0);
}
