//! One delivery from pull to ack, on the embedded ports with a paused clock: the lease is
//! renewed while a store outage holds the uploads, a run is never paid for twice (a paid run
//! whose artifacts cannot be stored ends as `infra_after_spend`; a redelivered job with a
//! stored record is reported, not run), and jobs of cancelled batches or of another protocol
//! version never run.
//!
//! The store and the queue are the embedded ones behind thin wrappers that can fail writes
//! and log every settlement; the executor counts its runs. Waiting is done on the paused tokio
//! clock (it advances only when every task is idle), so the times below are exact and cost no
//! real time.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use cowork_fabric::backoff::Backoff;
use cowork_fabric::bundle::UnpackLimits;
use cowork_fabric::embedded::{DirArtifactStore, MemBatchRegistry, MemEventLog, MemJobQueue};
use cowork_fabric::queue::Acker;
use cowork_fabric::queue::Published;
use cowork_fabric::{
    ArtifactError, ArtifactStore, BatchRegistry, Delivery, EventError, EventLog, EventSubscription,
    JobQueue, PutOutcome, QueueError,
};
use cowork_schema::BatchId;
use cowork_schema::batch::ExecutorKind;
use cowork_schema::event::{
    ArtifactRef, ErrorCategory, InfraClass, JobEvent, JobEventKind, JobOutcome, JobRecord,
};
use cowork_schema::job::{JobCommand, JobSpec, PROTOCOL_VERSION, Tier};
use cowork_schema::layout;
use cowork_schema::registry::{BatchRecord, BatchState};
use cowork_testkit::{batch_spec, wait_until};
use cowork_worker::executor::{
    Artifact, ArtifactSource, Classified, ExecOutput, Executor, JobContext,
};
use cowork_worker::{WorkerConfig, WorkerPorts, WorkerStats};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

use crate::support::{fixture_json, job};

const ACK_WAIT: Duration = Duration::from_secs(30);

/// How the store answers writes and reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StoreMode {
    Up,
    /// Every call fails as a store that cannot be reached (retryable).
    Down,
    /// Every call is refused for good (wrong credentials, a deleted bucket).
    Refusing,
}

/// A directory store whose calls can be made to fail.
struct FlakyStore {
    inner: DirArtifactStore,
    mode: Mutex<StoreMode>,
}

impl FlakyStore {
    fn set(&self, mode: StoreMode) {
        *self.mode.lock().expect("no test panics holding the lock") = mode;
    }

    fn check(&self, key: &str) -> Result<(), ArtifactError> {
        match *self.mode.lock().expect("no test panics holding the lock") {
            StoreMode::Up => Ok(()),
            StoreMode::Down => Err(ArtifactError::Transient {
                key: key.to_owned(),
                message: "connection refused".to_owned(),
            }),
            StoreMode::Refusing => Err(ArtifactError::Failed {
                key: key.to_owned(),
                message: "AccessDenied".to_owned(),
            }),
        }
    }
}

#[async_trait]
impl ArtifactStore for FlakyStore {
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<ArtifactRef, ArtifactError> {
        self.check(key)?;
        self.inner.put(key, bytes).await
    }
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<PutOutcome, ArtifactError> {
        self.check(key)?;
        self.inner.put_if_absent(key, bytes).await
    }
    async fn get(&self, key: &str) -> Result<Vec<u8>, ArtifactError> {
        self.check(key)?;
        self.inner.get(key).await
    }
    async fn exists(&self, key: &str) -> Result<bool, ArtifactError> {
        self.check(key)?;
        self.inner.exists(key).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<String>, ArtifactError> {
        self.check(prefix)?;
        self.inner.list(prefix).await
    }
}

/// An event log whose `finished` publishes can be made to fail (a broker that is down).
struct FlakyEvents {
    inner: MemEventLog,
    finished_down: Mutex<bool>,
}

#[async_trait]
impl EventLog for FlakyEvents {
    async fn publish(&self, event: &JobEvent) -> Result<u64, EventError> {
        let down = *self
            .finished_down
            .lock()
            .expect("no test panics holding the lock");
        if down && matches!(event.event, JobEventKind::Finished { .. }) {
            return Err(EventError::Transient {
                message: "no responders".to_owned(),
            });
        }
        self.inner.publish(event).await
    }
    async fn subscribe(
        &self,
        batch: &BatchId,
        from_seq: u64,
    ) -> Result<Box<dyn EventSubscription>, EventError> {
        self.inner.subscribe(batch, from_seq).await
    }
    async fn last_sequence(&self, batch: &BatchId) -> Result<u64, EventError> {
        self.inner.last_sequence(batch).await
    }
}

/// What happened to the deliveries of a [`LoggingQueue`].
#[derive(Default)]
struct Settlements {
    /// `ack`, `nak` in the order they happened, with the delivery's attempt.
    log: Mutex<Vec<(&'static str, u32)>>,
    renewals: AtomicU32,
}

impl Settlements {
    fn log(&self) -> Vec<(&'static str, u32)> {
        self.log
            .lock()
            .expect("no test panics holding the lock")
            .clone()
    }
}

/// The embedded queue, with every settlement of its deliveries logged.
struct LoggingQueue {
    inner: MemJobQueue,
    settlements: Arc<Settlements>,
}

struct LoggingAcker {
    inner: Box<dyn Acker>,
    attempt: u32,
    settlements: Arc<Settlements>,
}

#[async_trait]
impl Acker for LoggingAcker {
    async fn ack(&self) -> Result<(), QueueError> {
        self.settlements
            .log
            .lock()
            .expect("no test panics holding the lock")
            .push(("ack", self.attempt));
        self.inner.ack().await
    }
    async fn nak(&self, delay: Duration) -> Result<(), QueueError> {
        self.settlements
            .log
            .lock()
            .expect("no test panics holding the lock")
            .push(("nak", self.attempt));
        self.inner.nak(delay).await
    }
    async fn in_progress(&self) -> Result<(), QueueError> {
        self.settlements.renewals.fetch_add(1, Ordering::SeqCst);
        self.inner.in_progress().await
    }
}

#[async_trait]
impl JobQueue for LoggingQueue {
    async fn publish(&self, job: &JobSpec) -> Result<Published, QueueError> {
        self.inner.publish(job).await
    }
    async fn pull(&self, tiers: &[Tier]) -> Result<Option<Delivery>, QueueError> {
        let Some(delivery) = self.inner.pull(tiers).await? else {
            return Ok(None);
        };
        let Delivery {
            job,
            attempt,
            acker,
        } = delivery;
        Ok(Some(Delivery {
            job,
            attempt,
            acker: Box::new(LoggingAcker {
                inner: acker,
                attempt,
                settlements: Arc::clone(&self.settlements),
            }),
        }))
    }
}

/// Completes every job with the sample result (cost $0.21535425) and counts its runs.
struct CountingExecutor {
    runs: AtomicU32,
}

#[async_trait]
impl Executor for CountingExecutor {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::Sim
    }

    async fn execute(&self, _ctx: &JobContext, _cancel: CancellationToken) -> ExecOutput {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let result = fixture_json("sample-run-result.json");
        let bytes = serde_json::to_vec(&result).expect("a json value serializes");
        ExecOutput {
            classified: Classified::Completed { result },
            exit_code: Some(0),
            harness_version: Some("2.0.0".to_owned()),
            spawned: true,
            artifacts: vec![Artifact {
                name: "result.json".to_owned(),
                source: ArtifactSource::Bytes(bytes),
            }],
            run_ms: 1234,
        }
    }
}

/// A worker's ports and config around the test doubles.
struct Fixture {
    dir: TempDir,
    queue: MemJobQueue,
    settlements: Arc<Settlements>,
    events: Arc<FlakyEvents>,
    store: Arc<FlakyStore>,
    executor: Arc<CountingExecutor>,
    batches: Option<MemBatchRegistry>,
    /// `WorkerConfig::verify_jobs` of the worker started.
    verify_jobs: bool,
    store_deadline: Duration,
    /// The counters of the worker started.
    stats: Arc<WorkerStats>,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("a temp dir");
        let store = Arc::new(FlakyStore {
            inner: DirArtifactStore::new(&dir.path().join("store")),
            mode: Mutex::new(StoreMode::Up),
        });
        Fixture {
            queue: MemJobQueue::new(),
            settlements: Arc::default(),
            events: Arc::new(FlakyEvents {
                inner: MemEventLog::new(),
                finished_down: Mutex::new(false),
            }),
            store,
            executor: Arc::new(CountingExecutor {
                runs: AtomicU32::new(0),
            }),
            batches: None,
            verify_jobs: false,
            store_deadline: Duration::from_secs(600),
            stats: Arc::default(),
            dir,
        }
    }

    fn config(&self) -> WorkerConfig {
        WorkerConfig {
            // One job per process, as these tests count processes and deliveries per job.
            replay_pack: 1,
            worker_id: "w-test".to_owned(),
            tiers: vec![Tier::Protocol],
            slots: 1,
            ack_wait: ACK_WAIT,
            max_deliver: 3,
            cache_dir: self.dir.path().join("cache"),
            cache_max_bytes: None,
            work_dir: self.dir.path().join("work"),
            keep_work_dirs: false,
            unpack_limits: UnpackLimits::default(),
            backoff: Backoff::default(),
            renew_every: None,
            verify_jobs: self.verify_jobs,
            store_deadline: self.store_deadline,
            drain_grace: None,
        }
    }

    /// The job, its bundle already in the worker's cache so it goes straight to the executor.
    fn job(&self) -> JobSpec {
        let job = job(JobCommand::Run, "s.yaml", ExecutorKind::Sim);
        std::fs::create_dir_all(self.config().cache_dir.join(&job.bundle_sha256))
            .expect("creating the cached bundle dir");
        job
    }

    /// Starts a worker; it drains when the returned token is cancelled.
    fn start(&self) -> (tokio::task::JoinHandle<()>, CancellationToken) {
        let ports = WorkerPorts {
            queue: Arc::new(LoggingQueue {
                inner: self.queue.clone(),
                settlements: Arc::clone(&self.settlements),
            }) as Arc<dyn JobQueue>,
            events: self.events.clone() as Arc<dyn EventLog>,
            store: self.store.clone() as Arc<dyn ArtifactStore>,
            executor: self.executor.clone(),
            batches: self
                .batches
                .clone()
                .map(|registry| Arc::new(registry) as Arc<dyn BatchRegistry>),
            workers: None,
        };
        let shutdown = CancellationToken::new();
        let worker = tokio::spawn({
            let config = self.config();
            let shutdown = shutdown.clone();
            let stats = Arc::clone(&self.stats);
            async move {
                cowork_worker::run(config, ports, stats, shutdown)
                    .await
                    .expect("the embedded queue never fails");
            }
        });
        (worker, shutdown)
    }

    fn runs(&self) -> u32 {
        self.executor.runs.load(Ordering::SeqCst)
    }

    /// Waits (in paused time) until the log holds `n` settlements, or fails after an hour.
    async fn until_settled(&self, n: usize) -> Vec<(&'static str, u32)> {
        wait_until(format!("the log holds {n} settlements (paused time)"))
            .within(Duration::from_secs(3600))
            .every(Duration::from_millis(100))
            .poll_async(async || {
                let log = self.settlements.log();
                if log.len() < n {
                    Err(format!("{log:?}"))
                } else {
                    Ok(())
                }
            })
            .await;
        self.settlements.log()
    }

    /// Every event of the batch so far.
    async fn events(&self, batch: &BatchId) -> Vec<JobEvent> {
        let last = self.events.last_sequence(batch).await.expect("in memory");
        let mut events = Vec::new();
        if last == 0 {
            return events;
        }
        let mut subscription = self.events.subscribe(batch, 1).await.expect("in memory");
        while let Some(item) = subscription.next().await {
            let (seq, event) = item.expect("an event");
            events.push(event);
            if seq >= last {
                break;
            }
        }
        events
    }

    fn stored(&self, key: &str) -> Option<Vec<u8>> {
        std::fs::read(self.dir.path().join("store").join(key)).ok()
    }
}

fn finished(events: &[JobEvent]) -> Vec<&JobEvent> {
    events
        .iter()
        .filter(|event| matches!(event.event, JobEventKind::Finished { .. }))
        .collect()
}

fn started(events: &[JobEvent]) -> usize {
    events
        .iter()
        .filter(|event| matches!(event.event, JobEventKind::Started))
        .count()
}

#[tokio::test(start_paused = true)]
async fn the_lease_is_renewed_while_a_store_outage_holds_the_uploads() {
    let fixture = Fixture::new();
    let job = fixture.job();
    fixture.store.set(StoreMode::Down);
    fixture.queue.publish(&job).await.expect("publishing");
    let (worker, shutdown) = fixture.start();

    // Five minutes of outage: ten times the ack deadline, with no settlement yet.
    tokio::time::sleep(Duration::from_secs(300)).await;
    let renewals = fixture.settlements.renewals.load(Ordering::SeqCst);
    assert!(
        renewals >= 29,
        "renewed every ack_wait/3 (10 s) through the outage: {renewals} renewals in 300 s"
    );
    assert_eq!(fixture.settlements.log(), vec![]);
    assert_eq!(fixture.runs(), 1);

    fixture.store.set(StoreMode::Up);
    assert_eq!(fixture.until_settled(1).await, vec![("ack", 1)]);
    shutdown.cancel();
    worker.await.expect("the worker task");
    let events = fixture.events(&job.batch_id).await;
    assert_eq!(started(&events), 1);
    let finished = finished(&events);
    assert_eq!(finished.len(), 1, "{events:?}");
    let JobEventKind::Finished {
        outcome, artifacts, ..
    } = &finished[0].event
    else {
        unreachable!("filtered to finished events");
    };
    assert!(
        matches!(outcome, JobOutcome::Completed { .. }),
        "{outcome:?}"
    );
    // Attempt 1 of generation 0 keeps the short path; the record is written beside it.
    assert_eq!(artifacts.len(), 1);
    assert_eq!(artifacts[0].key, "batches/b1/jobs/f0/result.json");
    let record: JobRecord = serde_json::from_slice(
        &fixture
            .stored(&layout::job_record_key(&job.job_id, 0))
            .expect("the job's record is stored"),
    )
    .expect("a job record");
    assert_eq!(&record.artifacts, artifacts);
    assert_eq!((record.attempt, record.run_ms), (1, 1234));
    // One object per artifact plus the record: nothing else is stored for the job.
    let dir = fixture.dir.path().join("store/batches/b1/jobs/f0");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("the job's directory")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    assert_eq!(names, ["outcome.json", "result.json"]);
}

/// Runs one job against a store in `mode` that never recovers; returns the events, the
/// settlements and how long the job took.
async fn run_against_a_broken_store(
    mode: StoreMode,
) -> (Vec<JobEvent>, Vec<(&'static str, u32)>, Duration, u32) {
    let mut fixture = Fixture::new();
    fixture.store_deadline = Duration::from_secs(120);
    let job = fixture.job();
    fixture.store.set(mode);
    fixture.queue.publish(&job).await.expect("publishing");
    let began = tokio::time::Instant::now();
    let (worker, shutdown) = fixture.start();
    let log = fixture.until_settled(1).await;
    let took = began.elapsed();
    shutdown.cancel();
    worker.await.expect("the worker task");
    (
        fixture.events(&job.batch_id).await,
        log,
        took,
        fixture.runs(),
    )
}

fn assert_paid_run_reported(events: &[JobEvent]) {
    let finished = finished(events);
    assert_eq!(finished.len(), 1, "{events:?}");
    let JobEventKind::Finished {
        outcome,
        artifacts,
        exit_code,
        run_ms,
        unstored_outcome,
        ..
    } = &finished[0].event
    else {
        unreachable!("filtered to finished events");
    };
    let JobOutcome::Error { category, message } = outcome else {
        panic!("an error outcome: {outcome:?}");
    };
    assert_eq!(*category, ErrorCategory::InfraAfterSpend);
    assert!(message.contains("not run again"), "{message}");
    assert!(artifacts.is_empty());
    // What the run learned and spent is in the event itself.
    assert_eq!((*exit_code, *run_ms), (Some(0), 1234));
    let Some(JobOutcome::Completed { run }) = unstored_outcome else {
        panic!("the run's own outcome is carried inline: {unstored_outcome:?}");
    };
    assert_eq!(run.cost_usd, Some(0.21535425));
    assert!(run.pass);
}

#[tokio::test(start_paused = true)]
async fn a_store_down_past_the_deadline_ends_the_paid_run_as_infra_after_spend() {
    let (events, log, took, runs) = run_against_a_broken_store(StoreMode::Down).await;
    assert_eq!(runs, 1, "the harness ran exactly once");
    assert_eq!(log, vec![("ack", 1)], "acked, never handed back");
    assert!(
        took >= Duration::from_secs(60) && took <= Duration::from_secs(130),
        "uploads were retried until the 120 s deadline: {took:?}"
    );
    assert_paid_run_reported(&events);
}

#[tokio::test(start_paused = true)]
async fn a_store_refusing_writes_ends_the_paid_run_at_once() {
    let (events, log, took, runs) = run_against_a_broken_store(StoreMode::Refusing).await;
    assert_eq!(runs, 1);
    assert_eq!(log, vec![("ack", 1)]);
    assert!(
        took < Duration::from_secs(1),
        "a refusal is not retried: {took:?}"
    );
    assert_paid_run_reported(&events);
}

#[tokio::test(start_paused = true)]
async fn a_finished_event_that_cannot_be_published_is_reported_by_the_next_delivery() {
    let mut fixture = Fixture::new();
    fixture.store_deadline = Duration::from_secs(60);
    let job = fixture.job();
    *fixture.events.finished_down.lock().expect("no panic") = true;
    fixture.queue.publish(&job).await.expect("publishing");
    let (worker, shutdown) = fixture.start();
    // The first delivery stores its record, gives up publishing at the deadline and leaves the
    // delivery unsettled; the queue hands it out again, and that delivery finds the record.
    wait_until("the job ran")
        .within(Duration::from_secs(3600))
        .every(Duration::from_millis(100))
        .poll_async(async || {
            fixture.runs() > 0 && started(&fixture.events(&job.batch_id).await) > 0
        })
        .await;
    tokio::time::sleep(Duration::from_secs(90)).await;
    *fixture.events.finished_down.lock().expect("no panic") = false;
    let log = fixture.until_settled(1).await;
    shutdown.cancel();
    worker.await.expect("the worker task");
    assert_eq!(
        fixture.runs(),
        1,
        "the redelivery did not run the job again"
    );
    let (kind, attempt) = log[0];
    assert_eq!(kind, "ack");
    assert!(attempt >= 2, "settled by a later delivery: {log:?}");
    let events = fixture.events(&job.batch_id).await;
    assert_eq!(started(&events), 1);
    let finished = finished(&events);
    assert_eq!(finished.len(), 1);
    let JobEventKind::Finished { artifacts, .. } = &finished[0].event else {
        unreachable!("filtered to finished events");
    };
    assert_eq!(artifacts[0].key, "batches/b1/jobs/f0/result.json");
}

#[tokio::test(start_paused = true)]
async fn a_redelivered_job_whose_record_is_stored_is_reported_without_running() {
    let fixture = Fixture::new();
    let job = fixture.job();
    fixture.queue.publish(&job).await.expect("publishing");
    let (worker, shutdown) = fixture.start();
    fixture.until_settled(1).await;
    // The same job sent again after its first delivery was acked: the coordinator re-publishes
    // a job that did not report back in time under a new message id (`republished`), and the
    // queue delivers that publication from attempt 1. Its attempts are the job's next ones
    // (`JobSpec::attempt_of`), so the worker looks for the stored record first.
    let mut again = job.clone();
    again.republished = 1;
    fixture
        .queue
        .publish(&again)
        .await
        .expect("publishing again");
    let log = fixture.until_settled(2).await;
    shutdown.cancel();
    worker.await.expect("the worker task");
    assert_eq!(log, vec![("ack", 1), ("ack", 1)]);
    assert_eq!(fixture.runs(), 1);
    let events = fixture.events(&job.batch_id).await;
    assert_eq!(started(&events), 1, "only the first delivery started a run");
    let finished = finished(&events);
    assert_eq!(finished.len(), 2);
    // The second is the stored record, marked as reported again from attempt 1's record, so
    // a fold that holds attempt 1's run counts it as a re-ack and not as a duplicate.
    let mut reported_again = finished[0].event.clone();
    let JobEventKind::Finished {
        from_record_of_attempt,
        ..
    } = &mut reported_again
    else {
        unreachable!("filtered to finished events");
    };
    assert_eq!(
        *from_record_of_attempt, None,
        "the first delivery ran the job"
    );
    *from_record_of_attempt = Some(1);
    assert_eq!(finished[1].event, reported_again);
    assert_eq!(
        finished[1].attempt,
        again.attempt_of(1),
        "the job's next attempt"
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_that_finds_another_attempts_record_reports_that_one() {
    let fixture = Fixture::new();
    let job = fixture.job();
    // Another delivery of this job (one whose lease was lost) stored its record first.
    let theirs = ArtifactRef {
        key: layout::artifact_key(&job.job_id, 0, 2, "result.json"),
        size: 2,
        sha256: "ab".repeat(32),
    };
    let first = JobRecord {
        outcome: JobOutcome::Completed {
            run: cowork_core::verdict::view_with_rederived_verdict(&fixture_json(
                "sample-run-result.json",
            ))
            .expect("a valid result"),
        },
        artifacts: vec![theirs.clone()],
        attempt: 2,
        generation: 0,
        worker_id: "w-other".to_owned(),
        harness_version: None,
        exit_code: Some(0),
        run_ms: 7,
    };
    fixture
        .store
        .put(
            &layout::job_record_key(&job.job_id, 0),
            serde_json::to_vec(&first).expect("serializes"),
        )
        .await
        .expect("storing the other attempt's record");
    fixture.queue.publish(&job).await.expect("publishing");
    let (worker, shutdown) = fixture.start();
    assert_eq!(fixture.until_settled(1).await, vec![("ack", 1)]);
    shutdown.cancel();
    worker.await.expect("the worker task");
    let events = fixture.events(&job.batch_id).await;
    let finished = finished(&events);
    let JobEventKind::Finished {
        artifacts,
        run_ms,
        from_record_of_attempt,
        ..
    } = &finished[0].event
    else {
        unreachable!("filtered to finished events");
    };
    assert_eq!(artifacts, &vec![theirs], "the first stored record wins");
    assert_eq!(*run_ms, 7);
    // This delivery ran the job too: its report is not a re-ack, so a fold holding the
    // other attempt's report counts it as a duplicate.
    assert_eq!(*from_record_of_attempt, None);
    // This attempt's own artifacts stay, unreferenced.
    assert!(fixture.stored("batches/b1/jobs/f0/result.json").is_some());
}

#[tokio::test(start_paused = true)]
async fn a_job_of_another_protocol_is_handed_back_and_never_run() {
    let fixture = Fixture::new();
    let mut job = fixture.job();
    job.protocol = PROTOCOL_VERSION + 1;
    fixture.queue.publish(&job).await.expect("publishing");
    let (worker, shutdown) = fixture.start();
    let log = fixture.until_settled(3).await;
    shutdown.cancel();
    worker.await.expect("the worker task");
    assert_eq!(log, vec![("nak", 1), ("nak", 2), ("ack", 3)]);
    assert_eq!(fixture.runs(), 0);
    let events = fixture.events(&job.batch_id).await;
    assert_eq!(started(&events), 0);
    let finished = finished(&events);
    let JobEventKind::Finished { outcome, .. } = &finished[0].event else {
        unreachable!("filtered to finished events");
    };
    let JobOutcome::Error { category, message } = outcome else {
        panic!("an error: {outcome:?}");
    };
    assert_eq!(*category, ErrorCategory::Infra);
    assert!(
        message.contains(&format!("protocol {}", PROTOCOL_VERSION + 1)),
        "{message}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_work_dir_that_cannot_be_created_is_a_sandbox_start_failure_handed_back() {
    let fixture = Fixture::new();
    let job = fixture.job();
    // A file where the work dir should be: creating any job's dir fails, as on a full disk.
    std::fs::write(fixture.config().work_dir, "not a dir").expect("writing the blocking file");
    fixture.queue.publish(&job).await.expect("publishing");
    let (worker, shutdown) = fixture.start();
    let log = fixture.until_settled(3).await;
    shutdown.cancel();
    worker.await.expect("the worker task");
    assert_eq!(log, vec![("nak", 1), ("nak", 2), ("ack", 3)]);
    assert_eq!(fixture.runs(), 0);
    let events = fixture.events(&job.batch_id).await;
    let handed_back: Vec<(InfraClass, bool)> = events
        .iter()
        .filter_map(|event| match &event.event {
            JobEventKind::Failed {
                class, will_retry, ..
            } => Some((*class, *will_retry)),
            _ => None,
        })
        .collect();
    assert_eq!(
        handed_back,
        vec![
            (InfraClass::SandboxStart, true),
            (InfraClass::SandboxStart, true),
            (InfraClass::SandboxStart, false)
        ]
    );
    // Three in a row: the worker stops taking the tier for a while.
    assert_eq!(fixture.stats.sandbox_starts.in_a_row(), 3);
    let backed_off = fixture.stats.sandbox_starts.backed_off();
    assert_eq!(backed_off.len(), 1, "{backed_off:?}");
    assert_eq!(backed_off[0].tier, Tier::Protocol);
}

#[tokio::test(start_paused = true)]
async fn a_job_of_a_cancelled_batch_is_settled_without_starting() {
    let mut fixture = Fixture::new();
    let registry = MemBatchRegistry::new();
    let job = fixture.job();
    registry
        .create(&crate::support::batch_record(
            job.batch_id.clone(),
            BatchState::Stopping,
            String::new(),
            1,
        ))
        .await
        .expect("creating the record");
    fixture.batches = Some(registry);
    fixture.queue.publish(&job).await.expect("publishing");
    let (worker, shutdown) = fixture.start();
    assert_eq!(fixture.until_settled(1).await, vec![("ack", 1)]);
    shutdown.cancel();
    worker.await.expect("the worker task");
    assert_eq!(fixture.runs(), 0);
    let events = fixture.events(&job.batch_id).await;
    assert_eq!(started(&events), 0, "{events:?}");
    let finished = finished(&events);
    let JobEventKind::Finished { outcome, .. } = &finished[0].event else {
        unreachable!("filtered to finished events");
    };
    assert!(
        matches!(outcome, JobOutcome::Error { category, .. } if *category == ErrorCategory::Cancelled),
        "{outcome:?}"
    );
}

/// A stored spec of `job`'s batch (as the coordinator stores it before it writes the record)
/// and the record naming its digest.
async fn admitted_batch(fixture: &Fixture, job: &JobSpec, spec_bundle: &str) -> BatchRecord {
    let spec = batch_spec().bundle_sha256(spec_bundle).build();
    let stored = cowork_schema::batch::StoredBatch {
        batch_id: job.batch_id.clone(),
        spec,
        plan: cowork_schema::batch::PlanSummary {
            kind: cowork_schema::batch::PlanKindName::Files,
            repeat: None,
            requested_cells: 1,
            truncated: false,
            n_jobs: 1,
            units: Vec::new(),
        },
    };
    let bytes = serde_json::to_vec(&stored).expect("encoding the spec");
    fixture
        .store
        .put(
            &layout::batch_key(&job.batch_id, "spec.json"),
            bytes.clone(),
        )
        .await
        .expect("storing the spec");
    crate::support::batch_record(
        job.batch_id.clone(),
        BatchState::Running,
        cowork_fabric::sha256_hex(&bytes),
        1,
    )
}

/// Starts a verifying worker on `fixture` with one published `job`; returns its settlements
/// once there are `n`, and the job's events.
async fn run_verified(
    fixture: &mut Fixture,
    job: &JobSpec,
    n: usize,
) -> (Vec<(&'static str, u32)>, Vec<JobEvent>) {
    fixture.verify_jobs = true;
    fixture.queue.publish(job).await.expect("publishing");
    let (worker, shutdown) = fixture.start();
    let settled = fixture.until_settled(n).await;
    shutdown.cancel();
    worker.await.expect("the worker task");
    let events = fixture.events(&job.batch_id).await;
    (settled, events)
}

#[tokio::test(start_paused = true)]
async fn a_job_of_a_batch_without_a_record_is_never_run() {
    let mut fixture = Fixture::new();
    fixture.batches = Some(MemBatchRegistry::new());
    let job = fixture.job();
    let (settled, events) = run_verified(&mut fixture, &job, 1).await;
    assert_eq!(
        settled,
        vec![("ack", 1)],
        "acked away, never delivered again"
    );
    assert_eq!(fixture.runs(), 0);
    assert!(events.is_empty(), "nothing reported: {events:?}");
}

#[tokio::test(start_paused = true)]
async fn a_job_whose_bundle_or_flags_are_not_its_batchs_is_never_run() {
    for forged in ["bundle", "flags"] {
        let mut fixture = Fixture::new();
        let registry = MemBatchRegistry::new();
        let mut job = fixture.job();
        let record = admitted_batch(&fixture, &job, &job.bundle_sha256.clone()).await;
        registry.create(&record).await.expect("creating the record");
        fixture.batches = Some(registry);
        match forged {
            "bundle" => {
                job.bundle_sha256 = "ab".repeat(32);
                std::fs::create_dir_all(fixture.config().cache_dir.join(&job.bundle_sha256))
                    .expect("caching the forged bundle");
            }
            _ => job.forwarded_flags = vec!["--label".into(), "$(curl evil)".into()],
        }
        let (settled, events) = run_verified(&mut fixture, &job, 1).await;
        assert_eq!(settled, vec![("ack", 1)], "{forged}");
        assert_eq!(fixture.runs(), 0, "{forged}");
        assert!(events.is_empty(), "{forged}: {events:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_job_of_its_batch_runs_when_verified() {
    let mut fixture = Fixture::new();
    let registry = MemBatchRegistry::new();
    let job = fixture.job();
    let record = admitted_batch(&fixture, &job, &job.bundle_sha256.clone()).await;
    registry.create(&record).await.expect("creating the record");
    fixture.batches = Some(registry);
    let (settled, events) = run_verified(&mut fixture, &job, 1).await;
    assert_eq!(settled, vec![("ack", 1)]);
    assert_eq!(fixture.runs(), 1);
    assert_eq!(finished(&events).len(), 1);
    // The attempt's dir is removed, and so are the job's and cell's dirs it left empty: a
    // million-job sweep leaves no million empty dirs behind.
    let batch_dir = fixture.config().work_dir.join(job.batch_id.as_str());
    let left: Vec<_> = std::fs::read_dir(&batch_dir)
        .map(|entries| entries.flatten().map(|entry| entry.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{} holds {left:?}", batch_dir.display());
}

#[tokio::test(start_paused = true)]
async fn a_job_whose_batch_spec_cannot_be_read_is_handed_back_not_dropped() {
    let mut fixture = Fixture::new();
    let registry = MemBatchRegistry::new();
    let job = fixture.job();
    let record = admitted_batch(&fixture, &job, &job.bundle_sha256.clone()).await;
    registry.create(&record).await.expect("creating the record");
    fixture.batches = Some(registry);
    // The store is out while the worker checks the job: it is handed back, not run and not
    // acked; once the store is back, the next delivery runs it.
    fixture.store.set(StoreMode::Down);
    fixture.verify_jobs = true;
    fixture.queue.publish(&job).await.expect("publishing");
    let (worker, shutdown) = fixture.start();
    assert_eq!(fixture.until_settled(1).await, vec![("nak", 1)]);
    assert_eq!(fixture.runs(), 0);
    fixture.store.set(StoreMode::Up);
    assert_eq!(fixture.until_settled(2).await, vec![("nak", 1), ("ack", 2)]);
    shutdown.cancel();
    worker.await.expect("the worker task");
    assert_eq!(fixture.runs(), 1);
}
