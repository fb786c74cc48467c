//! `cowork bench pipeline`: the raw pipeline baseline of the fleet benchmark.
//!
//! Per job it does exactly the durable work a zero-duration sim job costs the fleet, through the
//! same fabric ports and clients, and nothing else: no reducer, no executor process, no bundle,
//! no retries, no heartbeats. Keep it in step with the worker (`JobRun`) and the supervisor:
//!
//! 1. admission publishes the job with its message id, pipelined, with at most `window` jobs
//!    published and not yet finished;
//! 2. a worker's puller pulls it, as many per call as the worker has free slots;
//! 3. the worker publishes `started` and awaits its acknowledgement;
//! 4. it stores `result.json` (the simulator's result for that job), then the job record,
//!    create-if-absent;
//! 5. it publishes `finished` and awaits its acknowledgement, then double-acks the job;
//! 6. the coordinator side consumes both events;
//! 7. once every job has finished, the coordinator side reads every result back,
//!    `PARALLEL_READS` at a time, as the envelope's assembly does.
//!
//! `bench fleet` runs the same batch (the demo scenarios) through the real coordinator and
//! workers; the ratio of the two rates is the fleet's own overhead.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, anyhow};
use cowork_core::verdict::view_with_rederived_verdict;
use cowork_fabric::nats::{NatsEventLog, NatsJobQueue};
use cowork_fabric::queue::Delivery;
use cowork_fabric::{ArtifactStore, EventLog, EventSubscription, JobQueue};
use cowork_schema::event::{JobEvent, JobEventKind, JobOutcome, JobRecord};
use cowork_schema::job::{JobSpec, PROTOCOL_VERSION, Tier};
use cowork_schema::layout::{JobKey, names};
use cowork_worker::executor::sim::{SimOutcome, simulate_scenario};
use futures::StreamExt;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::connect::{connect_nats, connect_s3, nats_config, s3_config};
use crate::exit::CliError;

/// Settings of the pipeline benchmark.
pub struct PipelineBench {
    pub nats: crate::fleet_args::NatsArgs,
    pub s3: crate::fleet_args::S3Args,
    pub jobs: u64,
    pub workers: usize,
    pub slots: usize,
    pub window: usize,
    /// Fence the queue for a term and publish the jobs of that term.
    pub fenced: bool,
}

/// The coordinator term of a `--fenced` run.
const BENCH_TERM: u64 = 1;

// Result reads in flight at the end: the supervisor's envelope assembly's number.
use cowork_fabric::artifacts::PARALLEL_READS;
/// Jobs admitted per `publish_many` call at most.
const ADMIT_CHUNK: usize = 256;

/// The first failure of any task; it stops the benchmark.
#[derive(Clone, Default)]
struct Failure {
    first: Arc<Mutex<Option<String>>>,
    stop: CancellationToken,
}

impl Failure {
    fn record(&self, error: &anyhow::Error) {
        let mut first = self
            .first
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if first.is_none() {
            *first = Some(format!("{error:#}"));
        }
        self.stop.cancel();
    }

    fn message(&self) -> String {
        self.first
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| "stopped".to_owned())
    }
}

pub async fn run(bench: PipelineBench) -> Result<i32, CliError> {
    let nats = nats_config(&bench.nats)?;
    let s3 = s3_config(&bench.s3)?;
    let prepared = super::demo_batch(bench.jobs, 0).await?;
    let mut jobs: Vec<JobSpec> = prepared.plan.jobs().collect();
    if bench.fenced {
        for job in &mut jobs {
            job.leader_term = BENCH_TERM;
        }
    }
    let n_jobs = jobs.len();
    let batch_id = prepared.plan.batch_id.clone();
    // The coordinator side has its own connections, as the coordinator process would.
    let coordinator = connect_nats(&nats).await?;
    let coordinator_store = connect_s3(&s3).await?;
    let mut subscription = coordinator
        .events
        .subscribe(&batch_id, 1)
        .await
        .map_err(|e| CliError::Failed(anyhow!(e).context("subscribing to the bench events")))?;
    if bench.fenced {
        // Refused on a NATS where a coordinator fenced a higher term: run it on servers of
        // its own.
        coordinator
            .queue
            .fence(BENCH_TERM)
            .await
            .map_err(|e| CliError::Failed(anyhow!(e).context("fencing the bench queue")))?;
    }
    let failure = Failure::default();
    let window = Arc::new(Semaphore::new(bench.window.max(1)));
    let mut workers = Vec::new();
    for index in 0..bench.workers.max(1) {
        // Each worker has its own connections, as separate processes would.
        let fabric = connect_nats(&nats).await?;
        let store = connect_s3(&s3).await?;
        workers.push(PipelineWorker {
            worker_id: format!("bench-pipeline-w{index}"),
            queue: fabric.queue,
            events: fabric.events,
            store: Arc::new(store),
            slots: bench.slots.max(1),
            sim: prepared.spec.sim.clone().unwrap_or(super::bench_sim(0)),
        });
    }

    let started = Instant::now();
    let mut tasks = Vec::new();
    for worker in workers {
        let failure = failure.clone();
        tasks.push(tokio::spawn(async move { worker.run(failure).await }));
    }
    let admission = tokio::spawn(admit(
        coordinator.queue.clone(),
        jobs,
        window.clone(),
        failure.clone(),
    ));
    let folded = fold_events(subscription.as_mut(), n_jobs, &window, &failure).await;
    let all_finished = started.elapsed();
    let read_back = match folded {
        Ok(keys) => read_results(&coordinator_store, keys).await,
        Err(error) => Err(error),
    };
    let elapsed = started.elapsed();
    failure.stop.cancel();
    let _ = admission.await;
    for task in tasks {
        let _ = task.await;
    }
    let bytes_read = read_back.map_err(CliError::Failed)?;
    println!(
        "pipeline: {n_jobs} jobs, {} workers × {} slots, window {}{}: publish → finished → read back in {:.2} s = {:.0} jobs/s (per job: 1 publish, 1 pull, 2 event publishes, 1 PUT + 1 create-if-absent PUT, 1 double ack, 2 events consumed, 1 GET; {bytes_read} result bytes read)",
        bench.workers.max(1),
        bench.slots.max(1),
        bench.window.max(1),
        if bench.fenced { ", fenced" } else { "" },
        elapsed.as_secs_f64(),
        n_jobs as f64 / elapsed.as_secs_f64()
    );
    println!(
        "timeline: publish → last finished {:.2} s ({:.0} jobs/s); read back {:.2} s",
        all_finished.as_secs_f64(),
        n_jobs as f64 / all_finished.as_secs_f64(),
        (elapsed - all_finished).as_secs_f64()
    );
    Ok(0)
}

/// Publishes `jobs` in order, pipelined, keeping at most `window` of them unfinished.
async fn admit(queue: NatsJobQueue, jobs: Vec<JobSpec>, window: Arc<Semaphore>, failure: Failure) {
    let mut next = 0;
    while next < jobs.len() {
        // Waiting for room may be abandoned at a failure: nothing is half-published.
        let first = tokio::select! {
            _ = failure.stop.cancelled() => return,
            permit = window.acquire() => permit.expect("the window semaphore is never closed"),
        };
        first.forget();
        let mut n_take = 1;
        while n_take < ADMIT_CHUNK
            && next + n_take < jobs.len()
            && let Ok(permit) = window.try_acquire()
        {
            permit.forget();
            n_take += 1;
        }
        let chunk = &jobs[next..next + n_take];
        for (job, result) in chunk.iter().zip(queue.publish_many(chunk).await) {
            if let Err(error) = result {
                failure.record(&anyhow!(error).context(format!("publishing {}", job.job_id)));
                return;
            }
        }
        next += n_take;
    }
}

/// Consumes the batch's events until every job has finished; returns the result keys in the
/// order the jobs finished. Each `finished` gives its job's room in the window back.
async fn fold_events(
    subscription: &mut dyn EventSubscription,
    n_jobs: usize,
    window: &Semaphore,
    failure: &Failure,
) -> anyhow::Result<Vec<String>> {
    let mut result_keys = Vec::with_capacity(n_jobs);
    while result_keys.len() < n_jobs {
        // Abandoning the wait at a failure leaves nothing behind: the run is over.
        let next = tokio::select! {
            _ = failure.stop.cancelled() => return Err(anyhow!(failure.message())),
            next = subscription.next() => next,
        };
        let event = match next {
            Some(Ok((_, event))) => event,
            Some(Err(error)) => return Err(anyhow!(error).context("reading the bench events")),
            None => return Err(anyhow!("the event subscription ended")),
        };
        if let JobEventKind::Finished { artifacts, .. } = event.event {
            let key = artifacts
                .into_iter()
                .map(|artifact| artifact.key)
                .find(|key| {
                    key.strip_suffix(names::RESULT)
                        .is_some_and(|dir| dir.ends_with('/'))
                })
                .ok_or_else(|| anyhow!("job {} finished without a result", event.job_id))?;
            result_keys.push(key);
            window.add_permits(1);
        }
    }
    Ok(result_keys)
}

/// Reads every result back and returns the bytes read.
async fn read_results(store: &dyn ArtifactStore, keys: Vec<String>) -> anyhow::Result<u64> {
    let reads = keys.into_iter().map(|key| async move {
        store
            .get(&key)
            .await
            .with_context(|| format!("reading {key}"))
    });
    let mut reads = futures::stream::iter(reads).buffer_unordered(PARALLEL_READS);
    let mut bytes = 0u64;
    while let Some(read) = reads.next().await {
        bytes += read?.len() as u64;
    }
    Ok(bytes)
}

/// One worker of the pipeline: its own connections and slots, and only the durable steps.
struct PipelineWorker {
    worker_id: String,
    queue: NatsJobQueue,
    events: NatsEventLog,
    store: Arc<dyn ArtifactStore>,
    slots: usize,
    sim: cowork_schema::batch::SimSpec,
}

impl PipelineWorker {
    async fn run(self, failure: Failure) {
        let this = Arc::new(self);
        let slots = Arc::new(Semaphore::new(this.slots));
        let tracker = TaskTracker::new();
        let mut puller = this.queue.puller(&[Tier::Container]);
        loop {
            // Waiting for a slot or a job may be abandoned at the end: nothing is held yet.
            let first = tokio::select! {
                _ = failure.stop.cancelled() => break,
                permit = slots.clone().acquire_owned() => permit.expect("the slot semaphore is never closed"),
            };
            let mut permits = vec![first];
            while let Ok(permit) = slots.clone().try_acquire_owned() {
                permits.push(permit);
            }
            let pulled = tokio::select! {
                _ = failure.stop.cancelled() => break,
                pulled = puller.pull_many(permits.len()) => pulled,
            };
            let deliveries = match pulled {
                Ok(Some(deliveries)) => deliveries,
                Ok(None) => break,
                Err(error) => {
                    failure.record(&anyhow!(error).context("pulling jobs"));
                    break;
                }
            };
            for (delivery, permit) in deliveries.into_iter().zip(permits) {
                let worker = this.clone();
                let failure = failure.clone();
                tracker.spawn(async move {
                    if let Err(error) = worker.run_job(&delivery).await {
                        failure.record(&error.context(format!("job {}", delivery.job.job_id)));
                    }
                    drop(permit);
                });
            }
        }
        puller.close().await;
        tracker.close();
        tracker.wait().await;
    }

    async fn run_job(&self, delivery: &Delivery) -> anyhow::Result<()> {
        let job = &delivery.job;
        self.publish(delivery, JobEventKind::Started).await?;
        let simulated = simulate_scenario(job, &self.sim, None);
        let result = match simulated.outcome {
            SimOutcome::Completed { result } => result,
            SimOutcome::Unanswered { partial_result, .. } => partial_result,
        };
        let outcome = match view_with_rederived_verdict(&result) {
            Ok(run) => JobOutcome::Completed { run },
            Err(error) => return Err(anyhow!("the simulated result is unreadable: {error}")),
        };
        let result_key = JobKey::new(&job.job_id)
            .attempt(job.generation, delivery.attempt)
            .result();
        let result_ref = self
            .store
            .put(
                result_key.as_str(),
                cowork_schema::json_number::to_vec(&result)?,
            )
            .await
            .with_context(|| format!("storing {result_key}"))?;
        let record = JobRecord {
            outcome: outcome.clone(),
            artifacts: vec![result_ref.clone()],
            attempt: delivery.attempt,
            generation: job.generation,
            worker_id: self.worker_id.clone(),
            harness_version: None,
            exit_code: Some(simulated.exit_code),
            run_ms: 0,
        };
        let record_key = JobKey::new(&job.job_id).record(job.generation);
        self.store
            .put_if_absent(
                record_key.as_str(),
                cowork_schema::json_number::to_vec(&record)?,
            )
            .await
            .with_context(|| format!("storing {record_key}"))?;
        self.publish(
            delivery,
            JobEventKind::Finished {
                outcome,
                artifacts: vec![result_ref],
                harness_version: None,
                exit_code: Some(simulated.exit_code),
                run_ms: 0,
                unstored_outcome: None,
                from_record_of_attempt: None,
            },
        )
        .await?;
        delivery.acker.ack().await.context("acking")?;
        Ok(())
    }

    async fn publish(&self, delivery: &Delivery, event: JobEventKind) -> anyhow::Result<()> {
        let event = JobEvent {
            protocol: PROTOCOL_VERSION,
            batch_id: delivery.job.batch_id.clone(),
            job_id: delivery.job.job_id.clone(),
            attempt: delivery.attempt,
            generation: delivery.job.generation,
            worker_id: self.worker_id.clone(),
            event,
        };
        self.events
            .publish(&event)
            .await
            .context("publishing an event")?;
        Ok(())
    }
}
