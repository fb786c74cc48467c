//! What supervising one batch costs per job: peak memory and time of `supervise` — admission,
//! the reducer and the streamed envelope — for a batch of N zero-duration jobs.
//!
//! The ports keep nothing per job, so that what grows is the supervisor's own: a channel for
//! the queue, an event log that hands each event to the one subscriber and forgets it, and a
//! store that serves the same stored `result.json` for every job (read back and checked against
//! its digest, as a real envelope's results are) and hashes the envelope it is given without
//! keeping it. The envelope itself is written to a real spool file on disk.
//!
//! ```sh
//! cargo run --release -p cowork-coordinator --example supervise_bench -- 1000000
//! ```
//!
//! Numbers and the command that reproduces them go to docs/benchmarks.md.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use cowork_coordinator::supervisor::{
    CoordinatorPorts, SuperviseEnd, SuperviseOptions, SuperviseSignals, supervise,
};
use cowork_core::plan::{Plan, PlanInput, PlanKind, PlanLayout, PlanUnit};
use cowork_fabric::artifacts::{ArtifactError, ArtifactStore, PutOutcome};
use cowork_fabric::events::{EventError, EventLog, EventSubscription};
use cowork_fabric::queue::Published;
use cowork_fabric::queue::{Acker, Delivery, JobQueue, QueueError};
use cowork_schema::BatchId;
use cowork_schema::api::ProgressSnapshot;
use cowork_schema::batch::{BatchFlags, BatchMode, ExecutorKind};
use cowork_schema::event::{ArtifactRef, JobEvent, JobEventKind, JobOutcome};
use cowork_schema::ids::UnitRef;
use cowork_schema::job::{CellAxes, JobSpec, PROTOCOL_VERSION, Tier};
use cowork_schema::layout::{JobKey, names};
use cowork_schema::run_result::RunView;
use sha2::Digest;
use tokio::sync::mpsc;

/// Runs per cell: the fleet's large-sweep shape (as `cowork bench plan|fold`).
const REPEAT: u32 = 1000;
/// Jobs admitted ahead of results.
const WINDOW: usize = 64;

/// A stored result like the simulator's, with two assertions.
const RESULT: &str = r#"{"scenario":"bench","result":"success","durationMs":1200,"cost":{"usd":0.0123},"usage":{"inputTokens":1000,"outputTokens":200},"models":["claude-sonnet-4-5"],"availableSkills":["s"],"skillsInvoked":["s"],"assertions":[{"assertion":{"result":"success"},"pass":true},{"assertion":{"tool_called":"Skill"},"pass":true}],"verdict":{"pass":true,"signals":[]},"outcome":"delivered_clean","simulated":true}"#;

fn sha256_hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

fn plan(n_jobs: u64) -> Plan {
    let cells = n_jobs.div_ceil(u64::from(REPEAT)).max(1) as u32;
    let flags = BatchFlags {
        repeat: Some(REPEAT),
        min_pass_rate: 0.9,
        max_cells: cells,
        ..BatchFlags::default()
    };
    let units = (0..cells)
        .map(|cell| PlanUnit {
            unit: UnitRef::Cell(cell),
            scenario_name: "bench".into(),
            label: format!("bench [cell {cell}]"),
            axes: Some(CellAxes::default()),
            scenario_file: "bench.yaml".into(),
            tier: Tier::Replay,
            cell_error: None,
            timeout_ms: 60_000,
            arm: None,
        })
        .collect();
    let layout = PlanLayout {
        kind: PlanKind::Matrix,
        mode: BatchMode::Run,
        flags: flags.clone(),
        units,
        requested_cells: cells,
        truncated: false,
        derived_files: Vec::new(),
        forwarded_flags: Vec::new(),
    };
    Plan::new(
        layout,
        PlanInput {
            batch_id: BatchId::new("20261201-000000-be0c11").expect("a valid id"),
            flags,
            mode: BatchMode::Run,
            executor: ExecutorKind::Sim,
            sim: None,
            bundle_sha256: "00".into(),
        },
    )
}

/// The queue: a channel.
struct ChannelQueue {
    sender: mpsc::UnboundedSender<JobSpec>,
    receiver: tokio::sync::Mutex<mpsc::UnboundedReceiver<JobSpec>>,
}

struct NoAck;

#[async_trait]
impl Acker for NoAck {
    async fn ack(&self) -> Result<(), QueueError> {
        Ok(())
    }
    async fn nak(&self, _delay: std::time::Duration) -> Result<(), QueueError> {
        Ok(())
    }
    async fn in_progress(&self) -> Result<(), QueueError> {
        Ok(())
    }
}

#[async_trait]
impl JobQueue for ChannelQueue {
    async fn publish(&self, job: &JobSpec) -> Result<Published, QueueError> {
        self.sender
            .send(job.clone())
            .map_err(|_| QueueError::Closed)?;
        Ok(Published {
            seq: 0,
            duplicate: false,
        })
    }

    async fn pull(&self, _tiers: &[Tier]) -> Result<Option<Delivery>, QueueError> {
        Ok(self.receiver.lock().await.recv().await.map(|job| Delivery {
            job,
            attempt: 1,
            acker: Box::new(NoAck),
        }))
    }
}

/// The event log: every event goes to the one subscriber and is forgotten.
struct PassEventLog {
    sender: mpsc::UnboundedSender<(u64, JobEvent)>,
    receiver: Mutex<Option<mpsc::UnboundedReceiver<(u64, JobEvent)>>>,
    seq: std::sync::atomic::AtomicU64,
}

struct PassSubscription(mpsc::UnboundedReceiver<(u64, JobEvent)>);

#[async_trait]
impl EventSubscription for PassSubscription {
    async fn next(&mut self) -> Option<Result<(u64, JobEvent), EventError>> {
        self.0.recv().await.map(Ok)
    }
}

#[async_trait]
impl EventLog for PassEventLog {
    async fn publish(&self, event: &JobEvent) -> Result<u64, EventError> {
        // Relaxed: the counter only hands out distinct, increasing numbers.
        let seq = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        self.sender
            .send((seq, event.clone()))
            .map_err(|_| EventError::Closed)?;
        Ok(seq)
    }

    async fn subscribe(
        &self,
        _batch: &BatchId,
        _from_seq: u64,
    ) -> Result<Box<dyn EventSubscription>, EventError> {
        let receiver = self
            .receiver
            .lock()
            .expect("not poisoned")
            .take()
            .ok_or(EventError::Closed)?;
        Ok(Box::new(PassSubscription(receiver)))
    }

    async fn last_sequence(&self, _batch: &BatchId) -> Result<u64, EventError> {
        Ok(0)
    }
}

/// The store: one stored result for every job; documents are hashed and dropped.
struct OneResultStore {
    envelope_bytes: std::sync::atomic::AtomicU64,
}

fn reference(key: &str, bytes: &[u8]) -> ArtifactRef {
    ArtifactRef {
        key: key.to_owned(),
        size: bytes.len() as u64,
        sha256: sha256_hex(bytes),
    }
}

#[async_trait]
impl ArtifactStore for OneResultStore {
    async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<ArtifactRef, ArtifactError> {
        Ok(reference(key, &bytes))
    }
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<PutOutcome, ArtifactError> {
        Ok(PutOutcome::Created(reference(key, &bytes)))
    }
    async fn put_file(
        &self,
        key: &str,
        path: &std::path::Path,
    ) -> Result<ArtifactRef, ArtifactError> {
        use std::io::Read;
        let mut file = std::fs::File::open(path).map_err(|error| ArtifactError::Failed {
            key: key.to_owned(),
            message: error.to_string(),
        })?;
        let mut hasher = sha2::Sha256::new();
        let mut buffer = vec![0; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = file
                .read(&mut buffer)
                .map_err(|error| ArtifactError::Failed {
                    key: key.to_owned(),
                    message: error.to_string(),
                })?;
            if n == 0 {
                break;
            }
            hasher.update(&buffer[..n]);
            size += n as u64;
        }
        self.envelope_bytes
            .store(size, std::sync::atomic::Ordering::Relaxed);
        Ok(ArtifactRef {
            key: key.to_owned(),
            size,
            sha256: hasher
                .finalize()
                .iter()
                .map(|byte| format!("{byte:02x}"))
                .collect(),
        })
    }
    async fn get(&self, key: &str) -> Result<Vec<u8>, ArtifactError> {
        match key.ends_with(names::RESULT) {
            true => Ok(RESULT.as_bytes().to_vec()),
            false => Err(ArtifactError::NotFound {
                key: key.to_owned(),
            }),
        }
    }
    async fn exists(&self, _key: &str) -> Result<bool, ArtifactError> {
        Ok(false)
    }
    async fn list(&self, _prefix: &str) -> Result<Vec<String>, ArtifactError> {
        Ok(Vec::new())
    }
}

/// A worker that finishes every job at once with the stored result.
async fn work(queue: Arc<ChannelQueue>, events: Arc<PassEventLog>) {
    let result: serde_json::Value = serde_json::from_str(RESULT).expect("valid json");
    let view = RunView::from_result(&result).expect("a readable result");
    let sha256 = sha256_hex(RESULT.as_bytes());
    while let Ok(Some(delivery)) = queue.pull(&[Tier::Replay]).await {
        let job = delivery.job;
        let key = JobKey::new(&job.job_id)
            .attempt(0, 1)
            .result()
            .into_string();
        let event = JobEvent {
            protocol: PROTOCOL_VERSION,
            batch_id: job.batch_id.clone(),
            job_id: job.job_id.clone(),
            attempt: 1,
            generation: 0,
            worker_id: "bench-worker".into(),
            event: JobEventKind::Finished {
                outcome: JobOutcome::Completed { run: view.clone() },
                artifacts: vec![ArtifactRef {
                    key,
                    size: RESULT.len() as u64,
                    sha256: sha256.clone(),
                }],
                harness_version: Some("2.0.0".into()),
                exit_code: Some(0),
                run_ms: 1200,
                unstored_outcome: None,
                from_record_of_attempt: None,
            },
        };
        if events.publish(&event).await.is_err() {
            return;
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n_jobs: u64 = std::env::args()
        .nth(1)
        .and_then(|arg| arg.parse().ok())
        .unwrap_or(100_000);
    let plan = plan(n_jobs);
    let (job_tx, job_rx) = mpsc::unbounded_channel();
    let (event_tx, event_rx) = mpsc::unbounded_channel();
    let queue = Arc::new(ChannelQueue {
        sender: job_tx,
        receiver: tokio::sync::Mutex::new(job_rx),
    });
    let events = Arc::new(PassEventLog {
        sender: event_tx,
        receiver: Mutex::new(Some(event_rx)),
        seq: Default::default(),
    });
    let store = Arc::new(OneResultStore {
        envelope_bytes: Default::default(),
    });
    let ports = CoordinatorPorts {
        queue: queue.clone(),
        events: events.clone(),
        store: store.clone(),
    };
    // Reaped when main returns: the worker only waits on the queue.
    tokio::spawn(work(queue, events));
    let (progress_tx, mut progress_rx) = tokio::sync::watch::channel(ProgressSnapshot::default());
    let started = Instant::now();
    // When the last outcome is folded: the rest is storing the documents (the envelope).
    let total = plan.n_jobs();
    let folded_at = tokio::spawn(async move {
        while progress_rx.changed().await.is_ok() {
            if progress_rx.borrow().finished >= total {
                return Some(started.elapsed());
            }
        }
        None
    });
    let end = supervise(
        &ports,
        &plan,
        &SuperviseOptions::new(WINDOW, "run"),
        &progress_tx,
        SuperviseSignals::default(),
    )
    .await
    .expect("the batch is supervised to its end");
    let elapsed = started.elapsed();
    let SuperviseEnd::Decided(outcome) = end else {
        panic!("the batch was not decided");
    };
    let folded = folded_at
        .await
        .ok()
        .flatten()
        .map_or(f64::NAN, |at| at.as_secs_f64());
    let envelope_mib = store
        .envelope_bytes
        .load(std::sync::atomic::Ordering::Relaxed) as f64
        / (1 << 20) as f64;
    println!(
        "supervise: {} jobs ({} cells × {REPEAT}), window {WINDOW}: {:.2} s ({:.0} jobs/s; admitted and folded in {folded:.2} s, then the documents), {} results in a {envelope_mib:.0} MiB envelope, exit {}; peak RSS {:.1} MiB",
        plan.n_jobs(),
        plan.units.len(),
        elapsed.as_secs_f64(),
        plan.n_jobs() as f64 / elapsed.as_secs_f64(),
        outcome.reduction.results.len(),
        outcome.exit_code,
        peak_rss_mib()
    );
}
