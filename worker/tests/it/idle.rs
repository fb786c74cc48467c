//! `cowork worker --exit-when-idle`: the job loop ends once nothing has been pulled and nothing
//! has run for the idle time. The embedded queue and a paused tokio clock make the times exact.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use cowork_fabric::backoff::Backoff;
use cowork_fabric::bundle::UnpackLimits;
use cowork_fabric::embedded::{DirArtifactStore, MemEventLog, MemJobQueue};
use cowork_fabric::{ArtifactStore, EventLog, JobQueue};
use cowork_schema::batch::ExecutorKind;
use cowork_schema::ids::{JobId, UnitRef};
use cowork_schema::job::{JobCommand, Tier};
use cowork_worker::executor::{Classified, ExecOutput, Executor, JobContext};
use cowork_worker::{WorkerConfig, WorkerPorts, WorkerStats};
use tempfile::TempDir;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::support::job;

const IDLE_EXIT: Duration = Duration::from_secs(30);

/// An executor whose job runs until the test releases it.
struct HeldExecutor {
    started: Notify,
    release: Notify,
}

#[async_trait]
impl Executor for HeldExecutor {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::Sim
    }

    async fn execute(&self, _ctx: &JobContext, _cancel: CancellationToken) -> ExecOutput {
        self.started.notify_one();
        self.release.notified().await;
        ExecOutput {
            classified: Classified::error("test".into(), "released by the test".to_owned()),
            exit_code: None,
            harness_version: None,
            spawned: true,
            artifacts: Vec::new(),
            run_ms: 0,
        }
    }
}

struct Fixture {
    dir: TempDir,
    queue: MemJobQueue,
    executor: Arc<HeldExecutor>,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            dir: tempfile::tempdir().expect("a temp dir"),
            queue: MemJobQueue::new(),
            executor: Arc::new(HeldExecutor {
                started: Notify::new(),
                release: Notify::new(),
            }),
        }
    }

    fn config(&self) -> WorkerConfig {
        WorkerConfig {
            // One job per process, as these tests count processes and deliveries per job.
            replay_pack: 1,
            worker_id: "idle-test".to_owned(),
            tiers: vec![Tier::Protocol],
            slots: 2,
            ack_wait: Duration::from_secs(30),
            max_deliver: 3,
            cache_dir: self.dir.path().join("cache"),
            cache_max_bytes: None,
            work_dir: self.dir.path().join("work"),
            keep_work_dirs: false,
            unpack_limits: UnpackLimits::default(),
            backoff: Backoff::default(),
            renew_every: None,
            verify_jobs: false,
            store_deadline: cowork_worker::DEFAULT_STORE_DEADLINE,
            drain_grace: None,
        }
    }

    fn ports(&self) -> WorkerPorts {
        WorkerPorts {
            queue: Arc::new(self.queue.clone()) as Arc<dyn JobQueue>,
            events: Arc::new(MemEventLog::new()) as Arc<dyn EventLog>,
            store: Arc::new(DirArtifactStore::new(&self.dir.path().join("store")))
                as Arc<dyn ArtifactStore>,
            executor: self.executor.clone(),
            batches: None,
            workers: None,
        }
    }
}

#[tokio::test(start_paused = true)]
async fn idle_worker_exits_after_the_idle_time() {
    let fixture = Fixture::new();
    let started = Instant::now();
    let worker = tokio::spawn(cowork_worker::run_until_idle(
        fixture.config(),
        fixture.ports(),
        Arc::new(WorkerStats::default()),
        CancellationToken::new(),
        IDLE_EXIT,
    ));

    tokio::time::sleep(IDLE_EXIT - Duration::from_secs(1)).await;
    assert!(
        !worker.is_finished(),
        "the worker left before the idle time"
    );

    worker
        .await
        .expect("the worker task")
        .expect("an idle exit is a success");
    assert!(started.elapsed() >= IDLE_EXIT, "{:?}", started.elapsed());
}

#[tokio::test(start_paused = true)]
async fn idle_clock_stops_while_a_job_runs_and_restarts_when_it_ends() {
    let fixture = Fixture::new();
    let first = job(JobCommand::Replay, "s.yaml", ExecutorKind::Sim);
    let mut second = first.clone();
    second.unit = UnitRef::File(1);
    second.job_id = JobId::new(&second.batch_id, UnitRef::File(1), None);
    // A bundle already in the cache: the jobs go straight to the executor.
    std::fs::create_dir_all(fixture.config().cache_dir.join(&first.bundle_sha256))
        .expect("creating the cached bundle dir");
    fixture
        .queue
        .publish(&first)
        .await
        .expect("publishing a job");
    let stats = Arc::new(WorkerStats::default());
    let worker = tokio::spawn(cowork_worker::run_until_idle(
        fixture.config(),
        fixture.ports(),
        stats.clone(),
        CancellationToken::new(),
        IDLE_EXIT,
    ));
    fixture.executor.started.notified().await;

    // Far longer than the idle time, but a job is running: the worker still pulls.
    tokio::time::sleep(IDLE_EXIT * 10).await;
    fixture
        .queue
        .publish(&second)
        .await
        .expect("publishing a job");
    // A bound in paused time, so a worker that stopped pulling fails instead of hanging.
    tokio::time::timeout(IDLE_EXIT * 100, fixture.executor.started.notified())
        .await
        .expect("the worker stopped pulling while a job was running");

    fixture.executor.release.notify_waiters();
    let released = Instant::now();
    worker
        .await
        .expect("the worker task")
        .expect("an idle exit is a success");
    assert!(released.elapsed() >= IDLE_EXIT, "{:?}", released.elapsed());
    assert_eq!(
        stats
            .jobs_finished
            .load(std::sync::atomic::Ordering::Relaxed),
        2,
        "both jobs were finished before the worker left"
    );
    assert_eq!(fixture.queue.n_ready(), 0);
}

#[tokio::test(start_paused = true)]
async fn idle_exit_is_off_without_the_flag() {
    let fixture = Fixture::new();
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(cowork_worker::run(
        fixture.config(),
        fixture.ports(),
        Arc::new(WorkerStats::default()),
        shutdown.clone(),
    ));

    tokio::time::sleep(IDLE_EXIT * 100).await;
    assert!(!worker.is_finished(), "plain `run` never leaves when idle");

    shutdown.cancel();
    worker
        .await
        .expect("the worker task")
        .expect("a drained worker is a success");
}
