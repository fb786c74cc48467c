//! The fast paths of the NATS fabric against a real `nats-server`: the worker's standing pull
//! on several tiers (`JobQueue::puller`), pipelined publishing (`publish_many`), lost jobs from
//! JetStream's advisories (`lost_jobs`) and malformed events.
//!
//! As in `nats.rs`, nothing here asserts on time: where the old behaviour would have waited on
//! an empty tier, the pull expiry is set far beyond the test's bound, so waiting fails the
//! test instead of slowing it down.

use std::collections::BTreeSet;
use std::time::Duration;

use async_nats::jetstream::context::ContextBuilder;
use cowork_fabric::events::EventLog;
use cowork_fabric::nats::{NatsFabric, NatsJobQueue};
use cowork_fabric::queue::{Delivery, JobPuller, JobQueue, LostReason};
use cowork_fabric::{EventError, LostJobs, QueueError};
use cowork_schema::event::JobEventKind;
use cowork_schema::job::{JobSpec, Tier};
use cowork_testkit::{NatsServer, wait_until};
use futures::StreamExt;

use crate::nats::{EVENTUALLY, assert_nothing, config, event, fabric, job, next_event, publish};

/// A pull expiry no test waits for: a slot parked on an empty tier would hang the test.
const NEVER: Duration = Duration::from_secs(600);

async fn pull_many(puller: &mut Box<dyn JobPuller + '_>, max: usize) -> Vec<Delivery> {
    let deliveries = tokio::time::timeout(EVENTUALLY, puller.pull_many(max))
        .await
        .unwrap_or_else(|_| panic!("no job within {EVENTUALLY:?}"))
        .unwrap_or_else(|e| panic!("pulling up to {max} jobs: {e}"))
        .expect("the NATS queue never closes");
    assert!(
        (1..=max).contains(&deliveries.len()),
        "asked for up to {max} jobs, got {}",
        deliveries.len()
    );
    deliveries
}

/// Jobs the server has delivered on `tier` and not yet seen settled.
async fn ack_pending(fabric: &NatsFabric, tier: Tier) -> usize {
    let jobs = fabric
        .jetstream
        .get_stream("COWORK_JOBS")
        .await
        .expect("jobs stream");
    let info = jobs
        .consumer_info(&format!("cowork-{}", tier.as_str()))
        .await
        .expect("consumer info");
    info.num_ack_pending
}

/// Waits until every tier's consumer has a pull request waiting on the server: a puller that
/// waits on one tier at a time never gets there, and the bound fails the test.
async fn every_tier_watched(fabric: &NatsFabric) {
    let jobs = fabric
        .jetstream
        .get_stream("COWORK_JOBS")
        .await
        .expect("jobs stream");
    // Polling the server's view, bounded: there is nothing to wait on otherwise.
    wait_until("a pull request waits on every tier")
        .within(EVENTUALLY)
        .every(Duration::from_millis(10))
        .poll_async(async || {
            let mut unwatched = Vec::new();
            for tier in Tier::ALL {
                let info = jobs
                    .consumer_info(&format!("cowork-{}", tier.as_str()))
                    .await
                    .expect("consumer info");
                if info.num_waiting == 0 {
                    unwatched.push(tier.as_str());
                }
            }
            if unwatched.is_empty() {
                Ok(())
            } else {
                Err(format!("no pull request waits on tiers {unwatched:?}"))
            }
        })
        .await;
}

#[tokio::test]
async fn a_multi_tier_puller_delivers_from_a_busy_tier_while_the_others_are_empty() {
    let server = NatsServer::start();
    let mut config = config(&server);
    config.pull_expiry = NEVER;
    let fabric = fabric(&config).await;
    let mut puller = fabric.queue.puller(&Tier::ALL);
    // While the puller waits, every tier is watched at once; a job on any of them is taken
    // at once, since a long poll parked on another tier would never end in time.
    let turns = [
        Tier::Replay,
        Tier::Container,
        Tier::Protocol,
        Tier::Microvm,
        Tier::Hostloop,
        Tier::Replay,
    ];
    for (index, tier) in (0u32..).zip(turns) {
        let sent = job("b1", index, tier);
        let publish_once_watched = async {
            every_tier_watched(&fabric).await;
            publish(&fabric.queue, &sent).await;
        };
        let (pulled, ()) = tokio::join!(pull_many(&mut puller, 4), publish_once_watched);
        assert_eq!(pulled.len(), 1);
        assert_eq!(pulled[0].job, sent);
        assert_eq!(pulled[0].attempt, 1);
        pulled[0].acker.ack().await.expect("ack");
    }
    // A busy tier fills every free slot; the empty tiers never hold one back.
    for index in 100..140 {
        publish(&fabric.queue, &job("b1", index, Tier::Replay)).await;
    }
    let mut seen = BTreeSet::new();
    while seen.len() < 40 {
        for delivery in pull_many(&mut puller, 8).await {
            assert_eq!(delivery.job.tier, Tier::Replay);
            assert!(seen.insert(delivery.job.job_id.clone()), "delivered twice");
            delivery.acker.ack().await.expect("ack");
        }
    }
}

#[tokio::test]
async fn pull_many_returns_up_to_max_and_over_pulls_at_most_one_job_per_tier() {
    let server = NatsServer::start();
    let fabric = fabric(&config(&server)).await;
    for index in 0..10 {
        publish(&fabric.queue, &job("b1", index, Tier::Container)).await;
    }
    // A worker with 4 slots that settles its jobs only when all 4 are busy.
    let slots = 4;
    let tiers = [Tier::Container, Tier::Replay];
    let mut puller = fabric.queue.puller(&tiers);
    let mut seen = BTreeSet::new();
    while seen.len() < 10 {
        let mut running: Vec<Delivery> = Vec::new();
        while running.len() < slots && seen.len() + running.len() < 10 {
            running.extend(pull_many(&mut puller, slots - running.len()).await);
        }
        // Beyond its free slots the puller holds at most one job per tier it serves.
        let delivered = ack_pending(&fabric, Tier::Container).await;
        assert!(
            delivered <= slots + tiers.len(),
            "{delivered} jobs delivered for {slots} slots and {} tiers",
            tiers.len()
        );
        for delivery in running {
            assert_eq!(delivery.attempt, 1);
            assert!(seen.insert(delivery.job.job_id.clone()), "delivered twice");
            delivery.acker.ack().await.expect("ack");
        }
    }
    assert_nothing(&fabric, &[Tier::Container]).await;
}

#[tokio::test]
async fn a_closed_puller_hands_back_what_it_holds_at_once() {
    let server = NatsServer::start();
    let mut config = config(&server);
    // Only a nak can bring a job back within the test: ack_wait is far beyond it.
    config.ack_wait = NEVER;
    config.pull_expiry = Duration::from_secs(1);
    let fabric = fabric(&config).await;
    let container = job("b1", 0, Tier::Container);
    let replay = job("b1", 1, Tier::Replay);
    publish(&fabric.queue, &container).await;
    publish(&fabric.queue, &replay).await;
    let mut puller = fabric.queue.puller(&[Tier::Container, Tier::Replay]);
    // Both tiers are watched, so both jobs are delivered; one slot takes one of them and the
    // puller holds the other.
    let first = pull_many(&mut puller, 1).await;
    puller.close().await;
    assert!(
        matches!(puller.pull_many(1).await, Err(QueueError::Closed)),
        "a closed puller pulls nothing"
    );
    let taken = &first[0].job;
    let other = if *taken == container {
        &replay
    } else {
        &container
    };
    let again = crate::nats::pull(&fabric.queue, &[other.tier]).await;
    assert_eq!(again.job, *other);
    assert_eq!(again.attempt, 2, "the held job was naked, not expired");
    again.acker.ack().await.expect("ack");
    first[0].acker.ack().await.expect("ack");
}

fn jobs(batch: &str, n: u32) -> Vec<JobSpec> {
    (0..n)
        .map(|index| job(batch, index, Tier::Container))
        .collect()
}

#[tokio::test]
async fn publish_many_publishes_every_job_once() {
    let server = NatsServer::start();
    let fabric = fabric(&config(&server)).await;
    // More than async-nats' 5,000 unacknowledged publishes: an unbounded pipeline would hang.
    let sent = jobs("b1", 6000);
    let results = tokio::time::timeout(EVENTUALLY, fabric.queue.publish_many(&sent))
        .await
        .expect("publish_many finished");
    let first: Vec<_> = results
        .into_iter()
        .map(|result| result.expect("published"))
        .collect();
    assert!(first.iter().all(|published| !published.duplicate));
    let seqs: BTreeSet<u64> = first.iter().map(|published| published.seq).collect();
    assert_eq!(seqs.len(), sent.len(), "every job got its own message");

    // Publishing an overlapping slice again stores nothing new and names the first messages.
    let again = fabric.queue.publish_many(&sent[5990..]).await;
    for (published, original) in again.into_iter().zip(&first[5990..]) {
        let published = published.expect("published");
        assert!(published.duplicate);
        assert_eq!(published.seq, original.seq);
    }
    let mut stream = fabric
        .jetstream
        .get_stream("COWORK_JOBS")
        .await
        .expect("jobs stream");
    let stored = stream.info().await.expect("stream info").state.messages;
    assert_eq!(stored, 6000);
}

#[tokio::test]
async fn publish_many_keeps_at_most_its_window_in_flight() {
    let server = NatsServer::start();
    let config = config(&server);
    let _setup = fabric(&config).await;
    // A connection that refuses a publish at once when `window` acknowledgements are
    // outstanding: a pipeline that sent more would get an error, not a slowdown.
    let window = 16;
    let client = async_nats::connect(server.url()).await.expect("connect");
    let strict = ContextBuilder::new()
        .max_ack_inflight(window)
        .backpressure_on_inflight(false)
        .build(client);
    let queue = NatsJobQueue::open(&strict, &config)
        .await
        .expect("open queue")
        .with_publish_window(window);
    let sent = jobs("b1", 200);
    for result in queue.publish_many(&sent).await {
        result.expect("published within the window");
    }
    // The check can fail: the same connection with a wider window runs out of permits.
    let wider = queue.with_publish_window(window * 2);
    let results = wider.publish_many(&jobs("b2", 200)).await;
    let n_failed = results.iter().filter(|result| result.is_err()).count();
    assert!(
        n_failed > 0,
        "a window beyond the connection's limit went through"
    );
    assert!(
        results
            .iter()
            .filter_map(|r| r.as_ref().err())
            .all(|e| e.is_transient())
    );
}

async fn next_lost(lost: &mut LostJobs) -> cowork_fabric::LostJob {
    tokio::time::timeout(EVENTUALLY, lost.next())
        .await
        .unwrap_or_else(|_| panic!("no lost job within {EVENTUALLY:?}"))
        .expect("the lost-job stream ended")
}

#[tokio::test]
async fn a_job_naked_past_max_deliver_is_reported_lost() {
    let server = NatsServer::start();
    let mut config = config(&server);
    config.max_deliver = 2;
    let fabric = fabric(&config).await;
    let mut lost = fabric.queue.lost_jobs().await.expect("follow advisories");
    let sent = job("b1", 0, Tier::Microvm);
    let published = fabric.queue.publish(&sent).await.expect("publish");
    for attempt in 1..=2 {
        let delivery = crate::nats::pull(&fabric.queue, &[Tier::Microvm]).await;
        assert_eq!(delivery.attempt, attempt);
        delivery.acker.nak(Duration::ZERO).await.expect("nak");
    }
    // The server notices the exhausted job when a pull asks for the next one.
    assert_nothing(&fabric, &[Tier::Microvm]).await;
    let reported = next_lost(&mut lost).await;
    assert_eq!(reported.tier, Tier::Microvm);
    assert_eq!(reported.stream_seq, published.seq);
    assert_eq!(reported.reason, LostReason::MaxDeliveries { deliveries: 2 });
    assert_eq!(reported.job, Some(sent));
    // The message stays in the work queue, where its consumer never offers it again.
    let mut jobs = fabric
        .jetstream
        .get_stream("COWORK_JOBS")
        .await
        .expect("jobs stream");
    assert_eq!(jobs.info().await.expect("stream info").state.messages, 1);
    assert_nothing(&fabric, &[Tier::Microvm]).await;
}

#[tokio::test]
async fn a_terminated_job_is_reported_lost_by_its_sequence() {
    let server = NatsServer::start();
    let fabric = fabric(&config(&server)).await;
    let mut lost = fabric.queue.lost_jobs().await.expect("follow advisories");
    // A body no worker can decode: the queue terminates it as such a worker would.
    let garbage = fabric
        .jetstream
        .publish("cowork.jobs.replay.b1", "not a job".into())
        .await
        .expect("publish")
        .await
        .expect("stored");
    let sent = job("b1", 1, Tier::Replay);
    publish(&fabric.queue, &sent).await;
    let delivery = crate::nats::pull(&fabric.queue, &[Tier::Replay]).await;
    assert_eq!(delivery.job, sent);
    delivery.acker.ack().await.expect("ack");
    let reported = next_lost(&mut lost).await;
    assert_eq!(reported.tier, Tier::Replay);
    assert_eq!(reported.stream_seq, garbage.sequence);
    assert!(
        matches!(reported.reason, LostReason::Terminated { .. }),
        "{:?}",
        reported.reason
    );
    assert_eq!(
        reported.job, None,
        "a terminated message leaves the work queue"
    );
}

#[tokio::test]
async fn a_malformed_event_is_an_error_and_the_next_event_still_arrives() {
    let server = NatsServer::start();
    let fabric = fabric(&config(&server)).await;
    let garbage = fabric
        .jetstream
        .publish("cowork.events.b1", "{\"not\": \"an event\"}".into())
        .await
        .expect("publish")
        .await
        .expect("stored");
    let valid = event("b1", 0, 1, JobEventKind::Started);
    let valid_seq = fabric.events.publish(&valid).await.expect("publish");
    let batch = cowork_schema::BatchId::new("b1").expect("valid literal");
    let mut subscription = fabric.events.subscribe(&batch, 1).await.expect("subscribe");
    let first = tokio::time::timeout(EVENTUALLY, subscription.next())
        .await
        .expect("an item within the bound")
        .expect("the subscription goes on");
    match first {
        Err(EventError::Malformed { seq, .. }) => assert_eq!(seq, garbage.sequence),
        other => panic!("expected the malformed event first, got {other:?}"),
    }
    assert_eq!(next_event(&mut subscription).await, (valid_seq, valid));
}
