//! The NATS JetStream ports against a real `nats-server` (one server per test): queue delivery,
//! deduplication, tier routing, nak, redelivery after `ack_wait`, in-progress renewal, the tier
//! cap, the event log and its replay (also across a server restart), the registries, and the
//! start-up checks of `ensure_streams`.
//!
//! "Nothing arrives" is asserted with a pull's own server-side expiry, and "it arrives later"
//! with a bounded wait on a pull; no test sleeps to synchronize.

use std::time::Duration;

use async_nats::jetstream::stream::{self, RetentionPolicy};
use cowork_fabric::events::{EventLog, EventSubscription};
use cowork_fabric::nats::{NatsConfig, NatsError, NatsFabric, connect};
use cowork_fabric::queue::{Delivery, JobQueue};
use cowork_fabric::registry::{BatchRegistry, RegistryError, WorkerRegistry};
use cowork_schema::event::{InfraClass, JobEvent, JobEventKind};
use cowork_schema::ids::{BatchId, JobId, UnitRef};
use cowork_schema::job::{JobSpec, Tier};
use cowork_schema::registry::{BatchRecord, BatchState, WorkerInfo};
use cowork_testkit::{NatsServer, job_spec, wait_until};
use tokio_util::sync::CancellationToken;

/// How long a pull waits on the server when a test asserts that nothing is delivered.
pub(crate) const NOTHING_WITHIN: Duration = Duration::from_millis(700);
/// Upper bound for something that must happen (a redelivery, a reconnect); generous because
/// the test machine is shared.
pub(crate) const EVENTUALLY: Duration = Duration::from_secs(30);

pub(crate) fn config(server: &NatsServer) -> NatsConfig {
    let mut config = NatsConfig::new(&server.url());
    config.connect_timeout = Duration::from_secs(20);
    config
}

pub(crate) async fn fabric(config: &NatsConfig) -> NatsFabric {
    connect(config)
        .await
        .unwrap_or_else(|e| panic!("connecting to {}: {e} ({:?})", config.url, e))
}

fn batch(id: &str) -> BatchId {
    BatchId::new(id).expect("valid literal")
}

pub(crate) fn job(batch_id: &str, index: u32, tier: Tier) -> JobSpec {
    job_spec()
        .batch_id(batch(batch_id))
        .tier(tier)
        .repeat_index(index)
        .timeout_ms(1000)
        .build()
}

pub(crate) async fn publish(queue: &dyn JobQueue, job: &JobSpec) {
    queue
        .publish(job)
        .await
        .unwrap_or_else(|e| panic!("publishing {}: {e}", job.job_id));
}

/// The next delivery of `tiers`, waiting at most [`EVENTUALLY`].
pub(crate) async fn pull(queue: &dyn JobQueue, tiers: &[Tier]) -> Delivery {
    tokio::time::timeout(EVENTUALLY, queue.pull(tiers))
        .await
        .unwrap_or_else(|_| panic!("no job of {tiers:?} within {EVENTUALLY:?}"))
        .unwrap_or_else(|e| panic!("pulling {tiers:?}: {e}"))
        .unwrap_or_else(|| panic!("the queue closed while pulling {tiers:?}"))
}

/// Asserts that no job of `tiers` is delivered within [`NOTHING_WITHIN`].
pub(crate) async fn assert_nothing(fabric: &NatsFabric, tiers: &[Tier]) {
    let pulled = fabric
        .queue
        .pull_once(tiers, NOTHING_WITHIN)
        .await
        .unwrap_or_else(|e| panic!("pulling {tiers:?}: {e}"));
    if let Some(delivery) = pulled {
        panic!(
            "expected no job of {tiers:?}, got {} (attempt {})",
            delivery.job.job_id, delivery.attempt
        );
    }
}

#[tokio::test]
async fn a_published_job_is_pulled_once_and_acked() {
    let server = NatsServer::start();
    let fabric = fabric(&config(&server)).await;
    let sent = job("b1", 0, Tier::Container);
    publish(&fabric.queue, &sent).await;
    let delivery = pull(&fabric.queue, &[Tier::Container]).await;
    assert_eq!(delivery.job, sent);
    assert_eq!(delivery.attempt, 1);
    delivery.acker.ack().await.expect("ack");
    // A second ack of a settled delivery is a no-op, as in the embedded queue.
    delivery.acker.ack().await.expect("second ack");
    assert_nothing(&fabric, &[Tier::Container]).await;
}

#[tokio::test]
async fn a_job_published_twice_is_delivered_once() {
    let server = NatsServer::start();
    let fabric = fabric(&config(&server)).await;
    let sent = job("b1", 0, Tier::Container);
    publish(&fabric.queue, &sent).await;
    publish(&fabric.queue, &sent).await;
    let delivery = pull(&fabric.queue, &[Tier::Container]).await;
    assert_eq!(delivery.job.job_id, sent.job_id);
    delivery.acker.ack().await.expect("ack");
    assert_nothing(&fabric, &[Tier::Container]).await;
    // Inside the duplicate window even a publish after the ack is dropped: a restarted
    // coordinator that re-publishes what it had admitted runs nothing twice.
    publish(&fabric.queue, &sent).await;
    assert_nothing(&fabric, &[Tier::Container]).await;
}

#[tokio::test]
async fn a_withdrawal_takes_back_one_batchs_queued_jobs_of_one_tier() {
    let server = NatsServer::start();
    let fabric = fabric(&config(&server)).await;
    for sent in [
        job("b1", 0, Tier::Microvm),
        job("b1", 1, Tier::Microvm),
        job("b1", 2, Tier::Container),
        job("b2", 0, Tier::Microvm),
    ] {
        publish(&fabric.queue, &sent).await;
    }
    let withdrawn = fabric
        .queue
        .withdraw(&batch("b1"), Tier::Microvm)
        .await
        .expect("withdraw");
    assert_eq!(withdrawn, 2);
    // The other batch's job and the other tier's job are still there.
    let other = pull(&fabric.queue, &[Tier::Microvm]).await;
    assert_eq!(other.job.batch_id, batch("b2"));
    other.acker.ack().await.expect("ack");
    let kept = pull(&fabric.queue, &[Tier::Container]).await;
    assert_eq!(kept.job.batch_id, batch("b1"));
    kept.acker.ack().await.expect("ack");
    assert_nothing(&fabric, &[Tier::Microvm, Tier::Container]).await;
}

#[tokio::test]
async fn jobs_reach_only_pullers_of_their_tier() {
    let server = NatsServer::start();
    let fabric = fabric(&config(&server)).await;
    publish(&fabric.queue, &job("b1", 0, Tier::Microvm)).await;
    publish(&fabric.queue, &job("b1", 1, Tier::Replay)).await;
    publish(&fabric.queue, &job("b2", 2, Tier::Container)).await;

    let container = pull(&fabric.queue, &[Tier::Container]).await;
    assert_eq!(container.job.tier, Tier::Container);
    container.acker.ack().await.expect("ack");
    assert_nothing(&fabric, &[Tier::Container]).await;
    assert_nothing(&fabric, &[Tier::Container, Tier::Hostloop, Tier::Protocol]).await;

    let microvm = pull(&fabric.queue, &[Tier::Hostloop, Tier::Microvm]).await;
    assert_eq!(microvm.job.tier, Tier::Microvm);
    microvm.acker.ack().await.expect("ack");
    assert_nothing(&fabric, &[Tier::Hostloop, Tier::Microvm]).await;

    let replay = pull(&fabric.queue, &[Tier::Replay]).await;
    assert_eq!(replay.job.tier, Tier::Replay);
    assert_eq!(replay.job.job_id.as_str(), "b1/f0/r1");
    replay.acker.ack().await.expect("ack");
}

#[tokio::test]
async fn a_naked_job_comes_back_with_attempt_two() {
    let server = NatsServer::start();
    let fabric = fabric(&config(&server)).await;
    publish(&fabric.queue, &job("b1", 0, Tier::Container)).await;
    let first = pull(&fabric.queue, &[Tier::Container]).await;
    assert_eq!(first.attempt, 1);
    first.acker.nak(Duration::ZERO).await.expect("nak");
    let second = pull(&fabric.queue, &[Tier::Container]).await;
    assert_eq!(second.job.job_id, first.job.job_id);
    assert_eq!(second.attempt, 2);
    second.acker.ack().await.expect("ack");
}

#[tokio::test]
async fn a_delivery_dropped_unsettled_comes_back_after_ack_wait() {
    let server = NatsServer::start();
    let mut config = config(&server);
    config.ack_wait = Duration::from_secs(1);
    let fabric = fabric(&config).await;
    publish(&fabric.queue, &job("b1", 0, Tier::Container)).await;
    let first = pull(&fabric.queue, &[Tier::Container]).await;
    assert_eq!(first.attempt, 1);
    let job_id = first.job.job_id.clone();
    drop(first);
    let again = pull(&fabric.queue, &[Tier::Container]).await;
    assert_eq!(again.job.job_id, job_id);
    assert_eq!(again.attempt, 2);
    again.acker.ack().await.expect("ack");
}

#[tokio::test]
async fn in_progress_keeps_a_job_owned_beyond_ack_wait() {
    let server = NatsServer::start();
    let mut config = config(&server);
    config.ack_wait = Duration::from_secs(1);
    let fabric = fabric(&config).await;
    publish(&fabric.queue, &job("b1", 0, Tier::Container)).await;
    let delivery = pull(&fabric.queue, &[Tier::Container]).await;

    // Renew well inside ack_wait, as the worker does (every ack_wait/3), while another pull
    // waits three times ack_wait for a redelivery that must not come.
    let stop = CancellationToken::new();
    let renewals = async {
        let mut every = tokio::time::interval(Duration::from_millis(250));
        let mut n_renewals = 0u32;
        loop {
            tokio::select! {
                // Stopping between renewals leaves nothing half-done.
                _ = stop.cancelled() => return n_renewals,
                _ = every.tick() => {
                    delivery.acker.in_progress().await.expect("in-progress ack");
                    n_renewals += 1;
                }
            }
        }
    };
    let waiting = async {
        let pulled = fabric
            .queue
            .pull_once(&[Tier::Container], Duration::from_secs(3))
            .await
            .expect("pull");
        stop.cancel();
        pulled
    };
    let (n_renewals, pulled) = tokio::join!(renewals, waiting);
    assert!(n_renewals >= 4, "only {n_renewals} renewals");
    if let Some(stolen) = pulled {
        panic!(
            "the renewed job was delivered again (attempt {})",
            stolen.attempt
        );
    }
    delivery.acker.ack().await.expect("ack");
    assert_nothing(&fabric, &[Tier::Container]).await;
}

#[tokio::test]
async fn the_tier_cap_holds_back_a_second_job_until_the_first_is_acked() {
    let server = NatsServer::start();
    let mut config = config(&server);
    config.tier_caps.insert(Tier::Container, 1);
    let fabric = fabric(&config).await;
    publish(&fabric.queue, &job("b1", 0, Tier::Container)).await;
    publish(&fabric.queue, &job("b1", 1, Tier::Container)).await;
    // A job of another tier is not held back by the container cap.
    publish(&fabric.queue, &job("b1", 2, Tier::Hostloop)).await;

    let first = pull(&fabric.queue, &[Tier::Container]).await;
    assert_nothing(&fabric, &[Tier::Container]).await;
    let other = pull(&fabric.queue, &[Tier::Container, Tier::Hostloop]).await;
    assert_eq!(other.job.tier, Tier::Hostloop);
    other.acker.ack().await.expect("ack");

    first.acker.ack().await.expect("ack");
    let second = pull(&fabric.queue, &[Tier::Container]).await;
    assert_ne!(second.job.job_id, first.job.job_id);
    assert_eq!(second.attempt, 1);
    second.acker.ack().await.expect("ack");
}

#[tokio::test]
async fn a_message_that_is_not_a_job_is_terminated_not_delivered() {
    let server = NatsServer::start();
    let fabric = fabric(&config(&server)).await;
    fabric
        .jetstream
        .publish("cowork.jobs.container.b1", "not json".into())
        .await
        .expect("publish")
        .await
        .expect("stored");
    let sent = job("b1", 0, Tier::Container);
    publish(&fabric.queue, &sent).await;
    let delivery = pull(&fabric.queue, &[Tier::Container]).await;
    assert_eq!(delivery.job, sent);
    delivery.acker.ack().await.expect("ack");
    assert_nothing(&fabric, &[Tier::Container]).await;
    // Terminated and acked messages both leave the work queue.
    let mut jobs = fabric
        .jetstream
        .get_stream("COWORK_JOBS")
        .await
        .expect("jobs stream");
    assert_eq!(jobs.info().await.expect("stream info").state.messages, 0);
}

pub(crate) fn event(batch_id: &str, index: u32, attempt: u32, kind: JobEventKind) -> JobEvent {
    let batch = batch(batch_id);
    JobEvent {
        protocol: cowork_schema::job::PROTOCOL_VERSION,
        job_id: JobId::new(&batch, UnitRef::File(0), Some(index)),
        batch_id: batch,
        attempt,
        generation: 0,
        worker_id: "w1".into(),
        event: kind,
    }
}

fn failed() -> JobEventKind {
    JobEventKind::Failed {
        class: InfraClass::Spawn,
        message: "no sandbox".into(),
        will_retry: true,
    }
}

pub(crate) async fn next_event(subscription: &mut Box<dyn EventSubscription>) -> (u64, JobEvent) {
    tokio::time::timeout(EVENTUALLY, subscription.next())
        .await
        .unwrap_or_else(|_| panic!("no event within {EVENTUALLY:?}"))
        .expect("the subscription ended")
        .unwrap_or_else(|e| panic!("reading an event: {e}"))
}

#[tokio::test]
async fn a_malformed_event_is_reported_and_the_subscription_goes_on() {
    let server = NatsServer::start();
    let fabric = fabric(&config(&server)).await;
    let subject = cowork_fabric::nats::events_subject(&batch("b1"));
    fabric
        .jetstream
        .publish(subject, "not an event".into())
        .await
        .expect("publish")
        .await
        .expect("stored");
    let sent = event("b1", 0, 1, JobEventKind::Started);
    fabric.events.publish(&sent).await.expect("publish");
    let mut subscription = fabric
        .events
        .subscribe(&batch("b1"), 1)
        .await
        .expect("subscribe");
    let first = tokio::time::timeout(EVENTUALLY, subscription.next())
        .await
        .expect("an item within the wait")
        .expect("the subscription is open");
    assert!(
        matches!(
            first,
            Err(cowork_fabric::events::EventError::Malformed { seq: 1, .. })
        ),
        "{first:?}"
    );
    let (seq, event) = next_event(&mut subscription).await;
    assert_eq!((seq, event), (2, sent));
}

#[tokio::test]
async fn events_replay_from_any_sequence_per_batch() {
    let server = NatsServer::start();
    let fabric = fabric(&config(&server)).await;
    let log = &fabric.events;
    let sent = [
        event("b1", 0, 1, JobEventKind::Started),
        event("b2", 0, 1, JobEventKind::Started),
        event("b1", 0, 1, failed()),
        event("b1", 0, 2, JobEventKind::Started),
    ];
    let mut seqs = Vec::new();
    for event in &sent {
        seqs.push(log.publish(event).await.expect("publish"));
    }
    assert_eq!(seqs, vec![1, 2, 3, 4]);
    // A retried publish of the same event (same job, attempt and type) is stored once.
    assert_eq!(log.publish(&sent[2]).await.expect("publish"), 3);

    let b1 = batch("b1");
    assert_eq!(log.last_sequence(&b1).await.expect("last"), 4);
    assert_eq!(log.last_sequence(&batch("b2")).await.expect("last"), 2);
    assert_eq!(log.last_sequence(&batch("b3")).await.expect("last"), 0);

    let mut from_one = log.subscribe(&b1, 1).await.expect("subscribe");
    for (seq, expected) in [(1, &sent[0]), (3, &sent[2]), (4, &sent[3])] {
        assert_eq!(next_event(&mut from_one).await, (seq, expected.clone()));
    }
    let mut from_two = log.subscribe(&b1, 2).await.expect("subscribe");
    assert_eq!(next_event(&mut from_two).await, (3, sent[2].clone()));
    assert_eq!(next_event(&mut from_two).await, (4, sent[3].clone()));

    // A live subscription also sees what is published after it started.
    let later = event("b1", 1, 1, JobEventKind::Started);
    assert_eq!(log.publish(&later).await.expect("publish"), 5);
    assert_eq!(next_event(&mut from_one).await, (5, later.clone()));
    assert_eq!(next_event(&mut from_two).await, (5, later));
    // Subscribing past the end waits for the next event.
    let mut past_end = log.subscribe(&b1, 6).await.expect("subscribe");
    let last = event("b1", 2, 1, JobEventKind::Started);
    assert_eq!(log.publish(&last).await.expect("publish"), 6);
    assert_eq!(next_event(&mut past_end).await, (6, last));
}

#[tokio::test]
async fn an_event_with_other_content_is_not_dropped_as_a_duplicate() {
    let server = NatsServer::start();
    let fabric = fabric(&config(&server)).await;
    let log = &fabric.events;
    // Same job, attempt and type; other content (a forged report published first must not
    // make the real one vanish as its duplicate).
    let forged = event("b1", 0, 1, failed());
    let real = event(
        "b1",
        0,
        1,
        JobEventKind::Failed {
            class: InfraClass::Bundle,
            message: "bundle fetch failed".into(),
            will_retry: true,
        },
    );
    assert_eq!(log.publish(&forged).await.expect("publish"), 1);
    assert_eq!(log.publish(&real).await.expect("publish"), 2);
    // The same content again is still a duplicate: a retried publish is stored once.
    assert_eq!(log.publish(&real).await.expect("publish"), 2);
    let mut subscription = log.subscribe(&batch("b1"), 1).await.expect("subscribe");
    assert_eq!(next_event(&mut subscription).await, (1, forged));
    assert_eq!(next_event(&mut subscription).await, (2, real));
}

#[tokio::test]
async fn a_job_on_another_tiers_or_batchs_subject_is_terminated_not_delivered() {
    let server = NatsServer::start();
    let fabric = fabric(&config(&server)).await;
    // A microvm job put on the container subject, and a job of b2 on b1's subject.
    let microvm = job("b1", 0, Tier::Microvm);
    let other_batch = job("b2", 1, Tier::Container);
    for (subject, job) in [
        ("cowork.jobs.container.b1", &microvm),
        ("cowork.jobs.container.b1", &other_batch),
    ] {
        fabric
            .jetstream
            .publish(subject, serde_json::to_vec(job).expect("encode").into())
            .await
            .expect("publish")
            .await
            .expect("stored");
    }
    assert_nothing(&fabric, &[Tier::Container, Tier::Microvm]).await;
    let mut jobs = fabric
        .jetstream
        .get_stream("COWORK_JOBS")
        .await
        .expect("jobs stream");
    assert_eq!(jobs.info().await.expect("stream info").state.messages, 0);
}

#[tokio::test]
async fn delivered_through_follows_the_tier_consumers_deliveries() {
    let server = NatsServer::start();
    let fabric = fabric(&config(&server)).await;
    let queue: &dyn JobQueue = &fabric.queue;
    assert_eq!(
        queue
            .delivered_through(Tier::Container)
            .await
            .expect("info"),
        Some(0)
    );
    let first = queue
        .publish(&job("b1", 0, Tier::Container))
        .await
        .expect("publish");
    let second = queue
        .publish(&job("b1", 1, Tier::Container))
        .await
        .expect("publish");
    assert_eq!(
        queue
            .delivered_through(Tier::Container)
            .await
            .expect("info"),
        Some(0),
        "nothing delivered yet"
    );
    let delivery = pull(queue, &[Tier::Container]).await;
    assert_eq!(
        queue
            .delivered_through(Tier::Container)
            .await
            .expect("info"),
        Some(first.seq)
    );
    assert!(second.seq > first.seq);
    delivery.acker.ack().await.expect("ack");
}

#[tokio::test]
async fn events_survive_a_server_restart() {
    let mut server = NatsServer::start();
    let config = config(&server);
    let before = fabric(&config).await;
    let b1 = batch("b1");
    let sent: Vec<JobEvent> = (0..3)
        .map(|index| event("b1", index, 1, JobEventKind::Started))
        .collect();
    for event in &sent {
        before.events.publish(event).await.expect("publish");
    }
    let mut live = before.events.subscribe(&b1, 1).await.expect("subscribe");
    for (seq, expected) in (1..).zip(&sent) {
        assert_eq!(next_event(&mut live).await, (seq, expected.clone()));
    }

    server.restart();

    let after = fabric(&config).await;
    assert_eq!(after.events.last_sequence(&b1).await.expect("last"), 3);
    let mut replay = after.events.subscribe(&b1, 1).await.expect("subscribe");
    for (seq, expected) in (1..).zip(&sent) {
        assert_eq!(next_event(&mut replay).await, (seq, expected.clone()));
    }
    // The subscription made before the restart carries on once its client has reconnected.
    let fourth = event("b1", 3, 1, JobEventKind::Started);
    assert_eq!(after.events.publish(&fourth).await.expect("publish"), 4);
    assert_eq!(next_event(&mut live).await, (4, fourth.clone()));
    assert_eq!(next_event(&mut replay).await, (4, fourth));
}

fn record(batch_id: &str, state: BatchState) -> BatchRecord {
    BatchRecord {
        batch_id: batch(batch_id),
        state,
        spec_sha256: "00".into(),
        n_jobs: 3,
        created_at_ms: 1,
        updated_at_ms: 1,
        ok: None,
        exit_code: None,
        eval_verdict: None,
        owner: None,
        generation: 0,
        kill_running: false,
        controls: Default::default(),
        listing: Default::default(),
    }
}

fn worker(worker_id: &str) -> WorkerInfo {
    WorkerInfo {
        protocol: cowork_schema::job::PROTOCOL_VERSION,
        worker_id: worker_id.into(),
        tiers: vec![Tier::Container],
        slots: 2,
        busy: 0,
        executor: "sim".into(),
        harness_version: None,
        os: "linux".into(),
        arch: "x86_64".into(),
        hostname: "h".into(),
        jobs_finished: 0,
        started_at_ms: 1,
        heartbeat_at_ms: 1,
        heartbeat_every_ms: 0,
        draining: false,
        sandbox_start_failures: 0,
        backed_off_tiers: Vec::new(),
    }
}

#[tokio::test]
async fn batch_records_are_compare_and_set() {
    let server = NatsServer::start();
    let fabric = fabric(&config(&server)).await;
    let batches = &fabric.batches;
    let planned = record("b2", BatchState::Planned);
    let revision = batches.create(&planned).await.expect("create");
    assert!(matches!(
        batches.create(&planned).await,
        Err(RegistryError::AlreadyExists { batch_id }) if batch_id == "b2"
    ));
    assert_eq!(
        batches.get(&batch("b2")).await.expect("get"),
        Some((planned.clone(), revision))
    );
    assert_eq!(batches.get(&batch("b9")).await.expect("get"), None);

    let running = record("b2", BatchState::Running);
    let next = batches.update(&running, revision).await.expect("update");
    assert!(next > revision);
    let stale = record("b2", BatchState::Cancelled);
    assert!(matches!(
        batches.update(&stale, revision).await,
        Err(RegistryError::Conflict { expected, .. }) if expected == revision
    ));
    assert!(matches!(
        batches.update(&record("b7", BatchState::Running), 1).await,
        Err(RegistryError::Conflict { .. })
    ));
    batches
        .create(&record("b1", BatchState::Done))
        .await
        .expect("create");
    let listed: Vec<String> = batches
        .list()
        .await
        .expect("list")
        .into_iter()
        .map(|record| format!("{}={}", record.batch_id, record.state.as_str()))
        .collect();
    assert_eq!(listed, vec!["b1=done", "b2=running"]);
}

#[tokio::test]
async fn workers_beat_leave_and_expire() {
    let server = NatsServer::start();
    let mut config = config(&server);
    config.worker_ttl = Duration::from_secs(1);
    let fabric = fabric(&config).await;
    let workers = &fabric.workers;
    workers.heartbeat(&worker("w2")).await.expect("beat");
    workers
        .heartbeat(&worker("host.example-1"))
        .await
        .expect("beat");
    let mut busy = worker("w2");
    busy.busy = 2;
    workers.heartbeat(&busy).await.expect("beat");
    let listed = workers.list().await.expect("list");
    assert_eq!(listed, vec![worker("host.example-1"), busy]);
    workers.remove("host.example-1").await.expect("remove");
    assert_eq!(workers.list().await.expect("list").len(), 1);

    let error = workers
        .heartbeat(&worker("bad id"))
        .await
        .expect_err("a space is not a key character");
    assert!(error.to_string().contains("\"bad id\""), "{error}");

    // Without heartbeats the entry expires (max_age = worker_ttl): poll, bounded.
    wait_until("the silent worker expired")
        .within(EVENTUALLY)
        .every(Duration::from_millis(200))
        .poll_async(async || workers.list().await.expect("list").is_empty())
        .await;
}

#[tokio::test]
async fn ensure_streams_is_idempotent_and_tunes_consumers_in_place() {
    let server = NatsServer::start();
    let mut config = config(&server);
    let first = fabric(&config).await;
    publish(&first.queue, &job("b1", 0, Tier::Container)).await;
    let _second = fabric(&config).await;

    config.ack_wait = Duration::from_secs(42);
    config.max_deliver = 3;
    config.tier_caps.insert(Tier::Microvm, 7);
    let tuned = fabric(&config).await;
    let jobs = tuned
        .jetstream
        .get_stream("COWORK_JOBS")
        .await
        .expect("jobs stream");
    let microvm = jobs
        .consumer_info("cowork-microvm")
        .await
        .expect("microvm consumer");
    assert_eq!(microvm.config.ack_wait, Duration::from_secs(42));
    assert_eq!(microvm.config.max_deliver, 3);
    assert_eq!(microvm.config.max_ack_pending, 7);
    let container = jobs
        .consumer_info("cowork-container")
        .await
        .expect("container consumer");
    assert_eq!(container.config.max_ack_pending, 1000);
    // Re-running the set-up kept the queued job.
    let delivery = pull(&tuned.queue, &[Tier::Container]).await;
    assert_eq!(delivery.job.job_id.as_str(), "b1/f0/r0");
    delivery.acker.ack().await.expect("ack");
}

#[tokio::test]
async fn a_jobs_stream_with_the_wrong_retention_is_refused_with_the_fix() {
    let server = NatsServer::start();
    let client = async_nats::connect(server.url()).await.expect("connect");
    let jetstream = async_nats::jetstream::new(client);
    jetstream
        .create_stream(stream::Config {
            name: "COWORK_JOBS".into(),
            subjects: vec!["cowork.jobs.>".into()],
            retention: RetentionPolicy::Limits,
            ..stream::Config::default()
        })
        .await
        .expect("create a foreign stream");
    let error = match connect(&config(&server)).await {
        Ok(_) => panic!("a limits-retention jobs stream was accepted"),
        Err(error) => error,
    };
    assert!(
        matches!(
            &error,
            NatsError::Mismatch(mismatch) if mismatch.field == "retention"
        ),
        "{error:?}"
    );
    assert!(!error.is_transient());
    assert_eq!(
        error.to_string(),
        "stream COWORK_JOBS has retention limits but cowork needs workqueue; delete it \
         (nats stream rm COWORK_JOBS, which drops its queued jobs) or set jobs_stream to another name"
    );
}

#[tokio::test]
async fn an_unreachable_server_fails_after_the_connect_timeout() {
    let mut config = NatsConfig::new(&format!(
        "nats://fleet:hunter2@127.0.0.1:{}",
        cowork_testkit::free_port()
    ));
    config.connect_timeout = Duration::from_millis(300);
    let error = match connect(&config).await {
        Ok(_) => panic!("connected to a port nobody listens on"),
        Err(error) => error,
    };
    assert!(matches!(error, NatsError::Connect { .. }), "{error:?}");
    assert!(error.is_transient());
    let shown = format!("{error} {error:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
}
