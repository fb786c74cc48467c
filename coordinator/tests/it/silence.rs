//! Nothing waits in silence: a job whose worker died with its last delivery is named overdue
//! with its worker, published once more and then folded as an infrastructure error (on tokio's paused clock: the deadline passes
//! without the test sleeping), and a garbage item on a real NATS event log is counted and
//! skipped while a `finished` event carrying a field this build does not know is folded.

use std::sync::{Arc, Mutex};

use cowork_coordinator::supervisor::{
    CoordinatorPorts, SuperviseEnd, SuperviseOptions, SuperviseSignals, supervise,
};
use cowork_fabric::embedded::{DirArtifactStore, MemEventLog, MemJobQueue};
use cowork_fabric::nats::{NatsConfig, connect, events_subject};
use cowork_fabric::{EventLog, JobQueue};
use cowork_schema::api::ProgressSnapshot;
use cowork_schema::event::{ErrorCategory, JobEvent, JobEventKind};
use cowork_schema::job::Tier;
use cowork_testkit::NatsServer;
use tokio::sync::watch;

use crate::support::{finished_event, planned, project, repeat};

fn decided(end: SuperviseEnd) -> Box<cowork_coordinator::supervisor::BatchOutcome> {
    match end {
        SuperviseEnd::Decided(outcome) => outcome,
        SuperviseEnd::Cancelled { progress } => panic!("the batch was cancelled: {progress:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_job_whose_worker_died_on_its_last_delivery_ends_as_an_infra_error() {
    let dir = project();
    let plan = planned(dir.path(), repeat(2));
    let queue = MemJobQueue::new();
    let events = MemEventLog::new();
    let store = DirArtifactStore::new(&dir.path().join("store"));
    let ports = CoordinatorPorts {
        queue: Arc::new(queue.clone()),
        events: Arc::new(events.clone()),
        store: Arc::new(store.clone()),
    };
    // The worker runs r1; r0 it starts and then dies with the delivery, which the queue will
    // not make again (its last), every time it is delivered.
    let deliveries: Arc<Mutex<Vec<(String, u32)>>> = Arc::default();
    let seen = Arc::clone(&deliveries);
    let worker = tokio::spawn(async move {
        while let Ok(Some(delivery)) = queue.pull(&Tier::ALL).await {
            let job = delivery.job.clone();
            seen.lock()
                .expect("not poisoned")
                .push((job.message_id(), job.republished));
            let started = JobEvent {
                protocol: cowork_schema::job::PROTOCOL_VERSION,
                batch_id: job.batch_id.clone(),
                job_id: job.job_id.clone(),
                attempt: delivery.attempt,
                generation: 0,
                worker_id: "w".into(),
                event: JobEventKind::Started,
            };
            events.publish(&started).await.expect("started");
            if job.repeat_index == Some(0) {
                // Gone without a word: never settled, never redelivered.
                std::mem::forget(delivery);
                continue;
            }
            let finished = finished_event(&store, &job, delivery.attempt).await;
            events.publish(&finished).await.expect("finished");
            delivery.acker.ack().await.expect("ack");
        }
    });
    let (progress_tx, mut progress_rx) = watch::channel(ProgressSnapshot::default());
    // Every job the progress named overdue, as (job id, worker).
    let overdue: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let named = Arc::clone(&overdue);
    let reader = tokio::spawn(async move {
        while progress_rx.changed().await.is_ok() {
            let progress = progress_rx.borrow_and_update().clone();
            let mut named = named.lock().expect("not poisoned");
            for job in progress.overdue_jobs {
                named.push((job.job_id, job.worker_id));
            }
        }
    });
    let end = supervise(
        &ports,
        &plan,
        &SuperviseOptions::new(2, "run"),
        &progress_tx,
        SuperviseSignals::default(),
    )
    .await
    .expect("the batch is supervised to its end");
    worker.abort();
    drop(progress_tx);
    reader
        .await
        .expect("the progress reader ends with the channel");
    let outcome = decided(end);
    // Past its first deadline, r0 was named overdue with the worker that started it.
    let overdue = overdue.lock().expect("not poisoned").clone();
    assert!(
        overdue
            .iter()
            .any(|(job, worker)| job.ends_with("/f0/r0") && worker == "w"),
        "{overdue:?}"
    );
    assert!(
        overdue.iter().all(|(job, _)| job.ends_with("/f0/r0")),
        "only the silent job: {overdue:?}"
    );

    let deliveries = deliveries.lock().expect("not poisoned").clone();
    let r0: Vec<&(String, u32)> = deliveries
        .iter()
        .filter(|(id, _)| id.contains("/f0/r0"))
        .collect();
    assert_eq!(r0.len(), 2, "r0 was published once more: {deliveries:?}");
    assert_eq!(r0[1].1, 1, "under a new message id: {deliveries:?}");
    assert_ne!(r0[0].0, r0[1].0);
    assert_eq!(
        (outcome.fleet.jobs.republished, outcome.fleet.jobs.lost),
        (1, 1)
    );
    let rollup: serde_json::Value =
        serde_json::from_slice(&outcome.rollup_json).expect("rollup json");
    assert_eq!(rollup["rollups"][0]["stoppedEarly"], "error", "{rollup}");
    assert_eq!(rollup["rollups"][0]["completed"], 0, "{rollup}");
    assert_eq!(outcome.exit_code, 1);
    // The infrastructure error is in the log, so a restarted coordinator folds it too.
    let mut subscription = ports
        .events
        .subscribe(&plan.batch_id, 1)
        .await
        .expect("subscribe");
    let lost = loop {
        let (_, event) = subscription
            .next()
            .await
            .expect("an event")
            .expect("a readable event");
        if event.worker_id == cowork_core::admission::LOST_JOB_WORKER {
            break event;
        }
    };
    let JobEventKind::Finished {
        outcome: cowork_schema::event::JobOutcome::Error { category, message },
        ..
    } = lost.event
    else {
        panic!("an error outcome: {lost:?}");
    };
    assert_eq!(category, ErrorCategory::Infra);
    assert!(message.contains("never reported back"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_event_is_counted_and_skipped_and_an_unknown_field_is_folded() {
    let server = NatsServer::start();
    let mut config = NatsConfig::new(&server.url());
    config.connect_timeout = std::time::Duration::from_secs(20);
    let fabric = connect(&config).await.expect("connecting to nats");
    let dir = project();
    let plan = planned(dir.path(), repeat(2));
    let store = DirArtifactStore::new(&dir.path().join("store"));
    let ports = CoordinatorPorts {
        queue: Arc::new(MemJobQueue::new()),
        events: Arc::new(fabric.events.clone()),
        store: Arc::new(store.clone()),
    };
    let subject = events_subject(&plan.batch_id);
    // Before supervision starts, so catch-up reads them: garbage, then r0's `finished` from a
    // newer worker that adds a field at the top and inside the event.
    let publish_raw = |payload: Vec<u8>| {
        let jetstream = fabric.jetstream.clone();
        let subject = subject.clone();
        async move {
            jetstream
                .publish(subject, payload.into())
                .await
                .expect("publish")
                .await
                .expect("stored");
        }
    };
    publish_raw(b"{ not an event".to_vec()).await;
    let mut jobs = plan.jobs();
    let r0 = jobs.next().expect("r0");
    let mut newer =
        serde_json::to_value(finished_event(&store, &r0, 1).await).expect("an event as json");
    newer["addedByANewerWorker"] = serde_json::json!({"any": "thing"});
    newer["event"]["addedInside"] = serde_json::json!(1);
    publish_raw(serde_json::to_vec(&newer).expect("json")).await;
    // r1 arrives while the batch is supervised.
    let r1 = jobs.next().expect("r1");
    let events = fabric.events.clone();
    let r1_store = store.clone();
    let late = tokio::spawn(async move {
        let finished = finished_event(&r1_store, &r1, 1).await;
        events.publish(&finished).await.expect("publish");
    });
    let (progress_tx, _progress_rx) = watch::channel(ProgressSnapshot::default());
    let end = supervise(
        &ports,
        &plan,
        &SuperviseOptions::new(2, "run"),
        &progress_tx,
        SuperviseSignals::default(),
    )
    .await
    .expect("one garbage event does not end the batch");
    late.await.expect("r1 published");
    let outcome = decided(end);
    assert_eq!(outcome.fleet.jobs.malformed_events, 1);
    assert_eq!(outcome.progress.malformed_events, 1);
    let rollup: serde_json::Value =
        serde_json::from_slice(&outcome.rollup_json).expect("rollup json");
    assert_eq!(rollup["rollups"][0]["completed"], 2, "{rollup}");
    assert_eq!(outcome.exit_code, 0);
}

/// The coordinator's queue, except that one job's message reaches the stream as bytes no
/// worker can decode (a corrupted or foreign body): workers terminate it, and only
/// JetStream's advisory says the job will never run.
struct CorruptingQueue {
    inner: cowork_fabric::nats::NatsJobQueue,
    jetstream: async_nats::jetstream::Context,
    corrupt: cowork_schema::ids::JobId,
}

#[async_trait::async_trait]
impl JobQueue for CorruptingQueue {
    async fn publish(
        &self,
        job: &cowork_schema::job::JobSpec,
    ) -> Result<cowork_fabric::queue::Published, cowork_fabric::QueueError> {
        if job.job_id != self.corrupt {
            return self.inner.publish(job).await;
        }
        let subject = cowork_fabric::nats::jobs_subject(job.tier, &job.batch_id);
        let ack = self
            .jetstream
            .publish(subject, "not a job".into())
            .await
            .expect("publish")
            .await
            .expect("stored");
        Ok(cowork_fabric::queue::Published {
            seq: ack.sequence,
            duplicate: false,
        })
    }

    async fn pull(
        &self,
        tiers: &[Tier],
    ) -> Result<Option<cowork_fabric::Delivery>, cowork_fabric::QueueError> {
        self.inner.pull(tiers).await
    }

    async fn lost_jobs(&self) -> Result<cowork_fabric::queue::LostJobs, cowork_fabric::QueueError> {
        self.inner.lost_jobs().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_terminated_as_undecodable_ends_its_batch_as_an_infra_error() {
    let server = NatsServer::start();
    let mut config = NatsConfig::new(&server.url());
    config.connect_timeout = std::time::Duration::from_secs(20);
    let fabric = connect(&config).await.expect("connecting to nats");
    let dir = project();
    let plan = planned(dir.path(), repeat(2));
    let tier = plan.units[0].tier;
    let mut jobs = plan.jobs();
    let (r0, r1) = (jobs.next().expect("r0"), jobs.next().expect("r1"));
    let store = DirArtifactStore::new(&dir.path().join("store"));
    let ports = CoordinatorPorts {
        queue: Arc::new(CorruptingQueue {
            inner: fabric.queue.clone(),
            jetstream: fabric.jetstream.clone(),
            corrupt: r1.job_id.clone(),
        }),
        events: Arc::new(fabric.events.clone()),
        store: Arc::new(store.clone()),
    };
    let supervision = {
        let plan = plan.clone();
        tokio::spawn(async move {
            let (progress_tx, _progress_rx) = watch::channel(ProgressSnapshot::default());
            supervise(
                &ports,
                &plan,
                &SuperviseOptions::new(2, "run"),
                &progress_tx,
                SuperviseSignals::default(),
            )
            .await
        })
    };
    // The test is the worker: it runs r0 and, like every worker, terminates the message it
    // cannot decode (the queue's puller does that before handing anything out).
    // The puller borrows its queue; a queue that lives as long as the test's tasks lends it.
    let worker_queue: &'static cowork_fabric::nats::NatsJobQueue =
        Box::leak(Box::new(fabric.queue.clone()));
    let mut puller = worker_queue.puller(&[tier]);
    let delivered = tokio::time::timeout(std::time::Duration::from_secs(60), puller.pull_many(2))
        .await
        .expect("r0 is delivered")
        .expect("pulling")
        .expect("the queue is open");
    assert_eq!(delivered.len(), 1, "only r0 decodes");
    assert_eq!(delivered[0].job.job_id, r0.job_id);
    fabric
        .events
        .publish(&finished_event(&store, &r0, 1).await)
        .await
        .expect("publishing r0's finished event");
    delivered[0].acker.ack().await.expect("ack");
    // A worker goes on pulling: the next pull meets r1's undecodable message and terminates it.
    let pulling = tokio::spawn(async move {
        let _more = puller.pull_many(2).await;
    });
    let end = tokio::time::timeout(std::time::Duration::from_secs(60), supervision)
        .await
        .expect("the batch ends without waiting for the lost job's deadline")
        .expect("the supervision task")
        .expect("supervision");
    pulling.abort();
    let outcome = decided(end);
    assert_eq!(outcome.fleet.jobs.lost, 1, "{:?}", outcome.fleet.jobs);
    let rollup: serde_json::Value =
        serde_json::from_slice(&outcome.rollup_json).expect("rollup json");
    assert_eq!(rollup["rollups"][0]["completed"], 1, "{rollup}");
    assert_eq!(rollup["rollups"][0]["stoppedEarly"], "error", "{rollup}");
    let events = fabric.events.clone();
    let last = events
        .last_sequence(&plan.batch_id)
        .await
        .expect("last sequence");
    let mut subscription = events
        .subscribe(&plan.batch_id, 1)
        .await
        .expect("subscribe");
    let mut folded_as_infra = false;
    let mut seen = 0;
    while seen < last {
        let (seq, event) = subscription
            .next()
            .await
            .expect("the log holds `last` events")
            .expect("a readable event");
        seen = seq;
        if event.job_id == r1.job_id
            && let JobEventKind::Finished {
                outcome: cowork_schema::event::JobOutcome::Error { category, .. },
                ..
            } = &event.event
        {
            folded_as_infra = *category == ErrorCategory::Infra;
        }
    }
    assert!(
        folded_as_infra,
        "r1 ends as an infrastructure error in the event log"
    );
}
