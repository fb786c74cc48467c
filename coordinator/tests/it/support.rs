//! Shared pieces of the coordinator's integration tests: an embedded fleet (in-process queue,
//! event log and registries, a directory store), a coordinator served on 127.0.0.1:0, batches
//! packed from temporary projects the way `cowork submit` packs them, and a fake worker.

use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use cowork_client::{ClientError, CoordinatorClient, WatchEvent};
use cowork_coordinator::intake::files::{PrepareInput, prepare};
use cowork_coordinator::server::{ApiToken, CoordinatorConfig, FleetPorts, ServerError, run};
use cowork_core::plan::plan_units;
use cowork_fabric::bundle::{UnpackLimits, pack};
use cowork_fabric::embedded::{
    DirArtifactStore, MemBatchRegistry, MemEventLog, MemJobQueue, MemWorkerRegistry,
};
use cowork_fabric::queue::{Delivery, Published};
use cowork_fabric::{ArtifactStore, EventLog, JobQueue, QueueError};
use cowork_schema::BatchId;
use cowork_schema::api::{BatchEnd, ProgressSnapshot};
use cowork_schema::batch::{BatchFlags, BatchMode, BatchSpec};
use cowork_schema::event::{JobEvent, JobEventKind, JobOutcome};
use cowork_schema::job::{JobSpec, Tier};
use cowork_schema::registry::WorkerInfo;
use cowork_schema::run_result::RunView;
use cowork_testkit::{batch_spec, wait_until};
use futures::StreamExt;
use serde_json::json;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The token every test server accepts.
pub const TOKEN: &str = "test-token-0123456789";

/// A queue that records every job id published through it, so tests can count admissions.
pub struct CountingQueue {
    pub inner: MemJobQueue,
    published: Mutex<Vec<String>>,
}

impl CountingQueue {
    /// Job ids published so far, in order.
    pub fn published(&self) -> Vec<String> {
        self.published
            .lock()
            .expect("no test panics while holding the lock")
            .clone()
    }
}

#[async_trait]
impl JobQueue for CountingQueue {
    async fn publish(&self, job: &JobSpec) -> Result<Published, QueueError> {
        self.published
            .lock()
            .expect("no test panics while holding the lock")
            .push(job.job_id.to_string());
        self.inner.publish(job).await
    }

    async fn pull(&self, tiers: &[Tier]) -> Result<Option<Delivery>, QueueError> {
        self.inner.pull(tiers).await
    }

    async fn withdraw(&self, batch: &BatchId, tier: Tier) -> Result<u64, QueueError> {
        self.inner.withdraw(batch, tier).await
    }
}

/// The embedded ports of one test, over its own temp dir.
pub struct Fleet {
    pub dir: tempfile::TempDir,
    pub queue: Arc<CountingQueue>,
    pub events: MemEventLog,
    pub store: DirArtifactStore,
    pub batches: MemBatchRegistry,
    pub workers: MemWorkerRegistry,
}

impl Fleet {
    pub fn new() -> Fleet {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = DirArtifactStore::new(&dir.path().join("store"));
        Fleet {
            dir,
            queue: Arc::new(CountingQueue {
                inner: MemJobQueue::new(),
                published: Mutex::new(Vec::new()),
            }),
            events: MemEventLog::new(),
            store,
            batches: MemBatchRegistry::new(),
            workers: MemWorkerRegistry::new(),
        }
    }

    pub fn ports(&self) -> FleetPorts {
        FleetPorts {
            queue: self.queue.clone(),
            events: Arc::new(self.events.clone()),
            store: Arc::new(self.store.clone()),
            batches: Arc::new(self.batches.clone()),
            workers: Arc::new(self.workers.clone()),
            health: None,
            lease: None,
        }
    }

    /// Every file under the store's directory (relative paths), to show nothing was stored.
    pub fn stored_files(&self) -> Vec<String> {
        let mut files = Vec::new();
        let root = self.store.root().to_path_buf();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries {
                let path = entry.expect("readable store entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    let rel = path.strip_prefix(&root).expect("under the root");
                    files.push(rel.display().to_string());
                }
            }
        }
        files.sort();
        files
    }

    /// A config for a server on this fleet.
    pub fn config(&self, coordinator_id: &str, window: usize) -> CoordinatorConfig {
        CoordinatorConfig {
            listen: "127.0.0.1:0".parse().expect("a literal address"),
            coordinator_id: coordinator_id.to_owned(),
            api_tokens: vec![ApiToken::new(TOKEN)],
            read_tokens: Vec::new(),
            allow_unauthenticated: false,
            window,
            max_bundle_bytes: 16 << 20,
            unpack_limits: UnpackLimits::default(),
            scratch_dir: self.dir.path().join("scratch"),
            usage_pause: cowork_coordinator::supervisor::DEFAULT_USAGE_PAUSE,
            usage_pause_max: cowork_coordinator::supervisor::DEFAULT_USAGE_PAUSE_MAX,
            model_limits: Vec::new(),
            http_limits: Default::default(),
            max_concurrent_submits: cowork_coordinator::server::DEFAULT_MAX_CONCURRENT_SUBMITS,
            tls: None,
            notify: Default::default(),
            k8s_worker_jobs: None,
            prices: Default::default(),
            token_policies: Vec::new(),
        }
    }
}

/// A coordinator served on 127.0.0.1:0.
pub struct Server {
    pub url: String,
    pub shutdown: CancellationToken,
    handle: tokio::task::JoinHandle<Result<(), ServerError>>,
}

impl Server {
    /// Starts a server with `config` on `ports` and waits until `/readyz` answers 200.
    pub async fn start(config: CoordinatorConfig, ports: FleetPorts) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding 127.0.0.1:0");
        let url = format!("http://{}", listener.local_addr().expect("bound address"));
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(run(config, ports, listener, shutdown.clone()));
        let server = Server {
            url,
            shutdown,
            handle,
        };
        server.wait_ready().await;
        server
    }

    /// Polls `/readyz` (bounded) until it answers 200.
    async fn wait_ready(&self) {
        let http = reqwest::Client::new();
        wait_until(format!("the coordinator at {} is ready", self.url))
            .within(std::time::Duration::from_secs(5))
            .every(std::time::Duration::from_millis(10))
            .poll_async(
                async || match http.get(format!("{}/readyz", self.url)).send().await {
                    Ok(response) if response.status() == 200 => Ok(()),
                    Ok(response) => Err(format!("status {}", response.status())),
                    Err(error) => Err(error.to_string()),
                },
            )
            .await;
    }

    pub fn client(&self) -> CoordinatorClient {
        CoordinatorClient::new(&self.url, Some(TOKEN.to_owned())).expect("a valid url")
    }

    /// Cancels the server's token and waits for `run` to return.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.handle
            .await
            .expect("the server task did not panic")
            .expect("the server stopped cleanly");
    }
}

const SCENARIO: &str = "prompt: p\nsession: ../sessions/s.yaml\nassert:\n  - result: success\n";
const SESSION: &str = "model: m\n";

/// A project with one scenario and its session.
pub fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (rel, contents) in [("scenarios/s.yaml", SCENARIO), ("sessions/s.yaml", SESSION)] {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("fixture paths have a parent"))
            .expect("create fixture dir");
        std::fs::write(path, contents).expect("write fixture");
    }
    dir
}

/// A spec and bundle as `cowork submit` sends them (prepare → plan_units → pack).
pub struct Packed {
    pub spec: BatchSpec,
    pub bundle: Vec<u8>,
}

pub fn packed(root: &Path, flags: BatchFlags) -> Packed {
    let prepared = prepare(&PrepareInput {
        target: root.join("scenarios/s.yaml"),
        matrix: None,
        bundle_root: root.to_path_buf(),
        mode: BatchMode::Run,
        executor: cowork_schema::batch::ExecutorKind::Harness,
    })
    .unwrap_or_else(|errors| panic!("fixture project is valid: {errors:?}"));
    let layout = plan_units(&prepared, &flags, BatchMode::Run)
        .unwrap_or_else(|errors| panic!("fixture project plans: {errors:?}"));
    let bundle = pack(
        &prepared.root,
        &prepared.files,
        &layout.derived_for_bundle(),
    )
    .expect("pack the fixture");
    let spec = batch_spec()
        .target("scenarios/s.yaml", prepared.target.clone())
        .scenario_files(
            prepared
                .scenarios
                .iter()
                .map(|scenario| scenario.rel_path.clone()),
        )
        .flags(flags)
        .bundle_sha256(bundle.sha256.clone())
        .build();
    Packed {
        spec,
        bundle: bundle.bytes,
    }
}

pub fn repeat(n: u32) -> BatchFlags {
    BatchFlags {
        repeat: Some(n),
        ..BatchFlags::default()
    }
}

/// Which runs pass: a job id → verdict function.
pub type Verdicts = Arc<dyn Fn(&JobSpec) -> bool + Send + Sync>;

/// A fake worker: pulls every tier from the fleet's queue, publishes `started`, waits for a
/// permit of its gate, stores a simple `result.json`, publishes `finished` with a `Completed`
/// run, then acks.
pub struct FakeWorker {
    gate: Arc<Semaphore>,
    /// Job ids finished, in order.
    finished: Arc<Mutex<Vec<String>>>,
    _tasks: JoinSet<()>,
}

impl FakeWorker {
    /// A worker that finishes every job at once.
    pub fn eager(fleet: &Fleet, verdicts: Verdicts) -> FakeWorker {
        FakeWorker::spawn(fleet, Semaphore::MAX_PERMITS, verdicts)
    }

    /// A worker that holds every job after `started` until [`FakeWorker::release`].
    pub fn holding(fleet: &Fleet) -> FakeWorker {
        FakeWorker::spawn(fleet, 0, Arc::new(|_: &JobSpec| true))
    }

    fn spawn(fleet: &Fleet, permits: usize, verdicts: Verdicts) -> FakeWorker {
        let gate = Arc::new(Semaphore::new(permits));
        let finished = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = JoinSet::new();
        let queue = fleet.queue.inner.clone();
        let events = fleet.events.clone();
        let store = fleet.store.clone();
        let job_gate = Arc::clone(&gate);
        let job_finished = Arc::clone(&finished);
        tasks.spawn(async move {
            let mut jobs = JoinSet::new();
            while let Ok(Some(delivery)) = queue.pull(&Tier::ALL).await {
                jobs.spawn(run_job(
                    delivery,
                    events.clone(),
                    store.clone(),
                    Arc::clone(&job_gate),
                    Arc::clone(&verdicts),
                    Arc::clone(&job_finished),
                ));
            }
            while jobs.join_next().await.is_some() {}
        });
        FakeWorker {
            gate,
            finished,
            _tasks: tasks,
        }
    }

    /// Lets `n` held jobs finish.
    pub fn release(&self, n: usize) {
        self.gate.add_permits(n);
    }

    pub fn finished(&self) -> Vec<String> {
        self.finished
            .lock()
            .expect("no test panics while holding the lock")
            .clone()
    }
}

async fn run_job(
    delivery: Delivery,
    events: MemEventLog,
    store: DirArtifactStore,
    gate: Arc<Semaphore>,
    verdicts: Verdicts,
    finished: Arc<Mutex<Vec<String>>>,
) {
    let job = delivery.job.clone();
    let event = |kind: JobEventKind| JobEvent {
        protocol: cowork_schema::job::PROTOCOL_VERSION,
        batch_id: job.batch_id.clone(),
        job_id: job.job_id.clone(),
        attempt: delivery.attempt,
        generation: 0,
        worker_id: "fake-1".into(),
        event: kind,
    };
    events
        .publish(&event(JobEventKind::Started))
        .await
        .expect("publishing started");
    gate.acquire()
        .await
        .expect("the gate is never closed")
        .forget();
    let pass = verdicts(&job);
    let result = json!({
        "scenario": job.scenario_name,
        "result": if pass { "success" } else { "failure" },
        "cost": { "usd": 0.25 },
        "assertions": [ { "assertion": { "result": "success" }, "pass": pass } ],
        "verdict": { "pass": pass, "signals": [] },
    });
    let view = RunView::from_result(&result).expect("the fake result is readable");
    let key = format!(
        "batches/{}/jobs/{}/result.json",
        job.batch_id,
        job.job_id.local_part()
    );
    let stored = store
        .put(&key, serde_json::to_vec(&result).expect("json"))
        .await
        .expect("storing result.json");
    events
        .publish(&event(JobEventKind::Finished {
            outcome: JobOutcome::Completed { run: view },
            artifacts: vec![stored],
            harness_version: Some("9.9.9".into()),
            exit_code: Some(i32::from(!pass)),
            run_ms: 5,
            unstored_outcome: None,
            from_record_of_attempt: None,
        }))
        .await
        .expect("publishing finished");
    finished
        .lock()
        .expect("no test panics while holding the lock")
        .push(job.job_id.to_string());
    delivery.acker.ack().await.expect("ack");
}

/// A heartbeat of the fake worker in the worker registry.
pub fn worker_info() -> WorkerInfo {
    WorkerInfo {
        protocol: cowork_schema::job::PROTOCOL_VERSION,
        worker_id: "fake-1".into(),
        tiers: Tier::ALL.to_vec(),
        slots: 4,
        busy: 0,
        executor: "sim".into(),
        harness_version: None,
        os: "linux".into(),
        arch: "x86_64".into(),
        hostname: "test".into(),
        jobs_finished: 0,
        started_at_ms: 1,
        heartbeat_at_ms: 2,
        heartbeat_every_ms: 0,
        draining: false,
        sandbox_start_failures: 0,
        backed_off_tiers: Vec::new(),
    }
}

/// Watches a batch to its end and returns every event (the last one is the end).
pub async fn watch_to_end(
    client: &CoordinatorClient,
    batch_id: &BatchId,
) -> (Vec<ProgressSnapshot>, BatchEnd) {
    let stream = client.watch(batch_id).await.expect("watching the batch");
    futures::pin_mut!(stream);
    let mut progress = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(WatchEvent::Progress(snapshot)) => progress.push(snapshot),
            Ok(WatchEvent::End(end)) => {
                assert!(stream.next().await.is_none(), "the stream closes after end");
                return (progress, end);
            }
            Err(error) => panic!("watching {batch_id}: {error}; progress so far: {progress:#?}"),
        }
    }
    panic!("the watch of {batch_id} ended without an end event; progress: {progress:#?}");
}

/// Watches a batch until a progress snapshot satisfies `done`; returns it.
pub async fn wait_progress(
    client: &CoordinatorClient,
    batch_id: &BatchId,
    what: &str,
    done: impl Fn(&ProgressSnapshot) -> bool,
) -> ProgressSnapshot {
    let stream = client.watch(batch_id).await.expect("watching the batch");
    futures::pin_mut!(stream);
    let mut seen = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(WatchEvent::Progress(snapshot)) if done(&snapshot) => return snapshot,
            Ok(WatchEvent::Progress(snapshot)) => seen.push(snapshot),
            Ok(WatchEvent::End(end)) => {
                panic!("batch {batch_id} ended ({end:?}) before {what}; progress: {seen:#?}")
            }
            Err(error) => panic!("watching {batch_id} for {what}: {error}; progress: {seen:#?}"),
        }
    }
    panic!("the watch of {batch_id} closed before {what}; progress: {seen:#?}");
}

/// `ClientError` as a short name, for assertions that print the error on mismatch.
pub fn kind(error: &ClientError) -> &'static str {
    match error {
        ClientError::Unauthorized { .. } => "unauthorized",
        ClientError::Forbidden { .. } => "forbidden",
        ClientError::BadRequest { .. } => "bad-request",
        ClientError::NotFound { .. } => "not-found",
        ClientError::Conflict { .. } => "conflict",
        ClientError::Unavailable { .. } => "unavailable",
        ClientError::CannotServe { .. } => "cannot-serve",
        ClientError::Server { .. } => "server",
        ClientError::Protocol { .. } => "protocol",
        ClientError::InvalidUrl { .. } => "invalid-url",
        ClientError::Local { .. } => "local",
    }
}

/// The plan of a packed batch, as a coordinator makes it from the spec and bundle.
pub fn planned(dir: &Path, flags: BatchFlags) -> cowork_core::plan::Plan {
    let batch = packed(dir, flags);
    cowork_coordinator::intake::submitted::plan_from_bundle(
        &batch.spec,
        &batch.bundle,
        BatchId::new("20261130-000000-a0b1c2").expect("a valid id"),
        &dir.join("scratch"),
        &UnpackLimits::default(),
    )
    .expect("the fixture plans")
}

/// A passing `result.json` of `job`, stored where the worker stores it, and the `finished`
/// event that reports it.
pub async fn finished_event(store: &dyn ArtifactStore, job: &JobSpec, attempt: u32) -> JobEvent {
    let result = json!({
        "scenario": job.scenario_name,
        "result": "success",
        "cost": { "usd": 0.1 },
        "assertions": [ { "assertion": { "result": "success" }, "pass": true } ],
        "verdict": { "pass": true, "signals": [] },
    });
    let view = RunView::from_result(&result).expect("a readable result");
    let key =
        cowork_schema::layout::artifact_key(&job.job_id, job.generation, attempt, "result.json");
    let stored = store
        .put(&key, serde_json::to_vec(&result).expect("json"))
        .await
        .expect("storing the result");
    JobEvent {
        protocol: cowork_schema::job::PROTOCOL_VERSION,
        batch_id: job.batch_id.clone(),
        job_id: job.job_id.clone(),
        attempt,
        generation: job.generation,
        worker_id: "w".into(),
        event: JobEventKind::Finished {
            outcome: JobOutcome::Completed { run: view },
            artifacts: vec![stored],
            harness_version: Some("9.9.9".into()),
            exit_code: Some(0),
            run_ms: 1,
            unstored_outcome: None,
            from_record_of_attempt: None,
        },
    }
}
