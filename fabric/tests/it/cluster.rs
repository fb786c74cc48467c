//! The fabric on a real three-node JetStream cluster on loopback: the replica count found
//! from the cluster, an R1 stream moved to R3 in place without losing what it holds (its
//! consumers moved along), a stream without quorum reported by the health checks and reported
//! healthy again once the quorum is back, and a single server that keeps R1 with no setting.
//!
//! Conditions are awaited with bounded polling of the health checks; nothing sleeps.

use std::time::Duration;

use cowork_fabric::events::EventLog;
use cowork_fabric::nats::{NatsConfig, Replicas};
use cowork_fabric::{FabricHealth, ObjectHealth, ObjectKind, ObjectState};
use cowork_schema::event::{JobEvent, JobEventKind};
use cowork_schema::ids::BatchId;
use cowork_schema::job::Tier;
use cowork_testkit::{NatsCluster, NatsServer, wait_until};

use crate::nats::{EVENTUALLY, event, fabric, job, next_event, publish, pull};

fn cluster_config(cluster: &NatsCluster) -> NatsConfig {
    let mut config = NatsConfig::new(&cluster.url());
    config.connect_timeout = Duration::from_secs(20);
    config
}

/// Polls `health` until `wanted` holds for its answer, or panics after [`EVENTUALLY`] with the
/// last answer.
async fn until_health(
    health: &dyn FabricHealth,
    what: &str,
    wanted: impl Fn(&[ObjectHealth]) -> bool,
) -> Vec<ObjectHealth> {
    wait_until(what)
        .within(EVENTUALLY)
        .every(Duration::from_millis(200))
        .poll_async(async || {
            let checked = health.check().await;
            if wanted(&checked) {
                Ok(checked)
            } else {
                Err(format!("{checked:#?}"))
            }
        })
        .await
}

fn all_whole(checked: &[ObjectHealth], replicas: usize) -> bool {
    checked.len() == 4
        && checked.iter().all(|object| {
            object.state
                == ObjectState::Serving {
                    replicas,
                    unavailable: Vec::new(),
                }
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_gets_three_replicas_and_r1_streams_move_up_in_place() {
    let cluster = NatsCluster::start(3);
    // First as a fleet of the old default: one replica everywhere, and a queued job.
    let mut config = cluster_config(&cluster);
    config.replicas = Some(1);
    let old = fabric(&config).await;
    assert_eq!(
        old.replicas,
        Replicas {
            count: 1,
            explicit: true
        }
    );
    publish(&old.queue, &job("b1", 0, Tier::Container)).await;
    let checked = old.health.check().await;
    assert!(all_whole(&checked, 1), "{checked:#?}");

    // Then with no setting: the cluster's three nodes give R3, and every stream is moved.
    let new = fabric(&cluster_config(&cluster)).await;
    assert_eq!(
        new.replicas,
        Replicas {
            count: 3,
            explicit: false
        }
    );
    assert!(new.setup.short_of_replicas.is_empty(), "{:?}", new.setup);
    until_health(
        &new.health,
        "every stream and bucket whole at R3",
        |checked| all_whole(checked, 3),
    )
    .await;
    // JetStream moves the consumers after their stream, by itself.
    let jobs = new
        .jetstream
        .get_stream("COWORK_JOBS")
        .await
        .expect("the jobs stream");
    wait_until("the consumer moved with its stream")
        .within(EVENTUALLY)
        .every(Duration::from_millis(200))
        .poll_async(async || {
            let consumer = jobs
                .consumer_info(cowork_fabric::nats::consumer_name(Tier::Container))
                .await
                .expect("the container tier's consumer");
            let peers = consumer
                .cluster
                .as_ref()
                .map(|cluster| cluster.replicas.len() + 1);
            if peers == Some(3) {
                Ok(())
            } else {
                Err(format!("{consumer:?}"))
            }
        })
        .await;
    // The job queued at R1 is still there.
    let delivery = pull(&new.queue, &[Tier::Container]).await;
    assert_eq!(delivery.job.job_id, job("b1", 0, Tier::Container).job_id);

    // A process started with no setting never scales a stream down, even if it counts fewer
    // nodes; an explicit setting does.
    let mut two = cluster_config(&cluster);
    two.replicas = Some(2);
    let shrunk = fabric(&two).await;
    until_health(&shrunk.health, "every stream at R2", |checked| {
        all_whole(checked, 2)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_without_quorum_is_reported_until_the_quorum_is_back() {
    let mut cluster = NatsCluster::start(3);
    // The client knows only the node that stays up.
    let survivor_url = cluster.node(0).url();
    let live = fabric(&cluster_config(&cluster)).await;
    until_health(&live.health, "every stream whole at R3", |checked| {
        all_whole(checked, 3)
    })
    .await;
    let mut survivor_config = NatsConfig::new(&survivor_url);
    survivor_config.connect_timeout = Duration::from_secs(20);
    let watcher = fabric(&survivor_config).await;

    cluster.node(1).kill();
    cluster.node(2).kill();
    let checked = until_health(&watcher.health, "the jobs stream stalls", |checked| {
        checked.iter().any(|object| {
            object.kind == ObjectKind::Stream
                && object.name == "COWORK_JOBS"
                && object.stall().is_some()
        })
    })
    .await;
    eprintln!(
        "while two of three nodes are down: {:?}",
        checked.iter().map(ObjectHealth::stall).collect::<Vec<_>>()
    );

    cluster.node(1).restart();
    cluster.node(2).restart();
    cluster.wait_healthy(&[0, 1, 2]);
    until_health(&watcher.health, "every stream whole again", |checked| {
        all_whole(checked, 3)
    })
    .await;
}

#[tokio::test]
async fn a_single_server_keeps_one_replica_and_reports_a_count_it_cannot_have() {
    let server = NatsServer::start();
    let config = crate::nats::config(&server);
    let single = fabric(&config).await;
    assert_eq!(
        single.replicas,
        Replicas {
            count: 1,
            explicit: false
        }
    );
    let checked = single.health.check().await;
    assert!(all_whole(&checked, 1), "{checked:#?}");
    assert!(checked.iter().all(|object| object.shortfall().is_none()));

    // Asking three of a single server: the streams stay at one and each is reported.
    let mut three = config.clone();
    three.replicas = Some(3);
    let short = fabric(&three).await;
    assert_eq!(short.setup.short_of_replicas.len(), 4, "{:?}", short.setup);
    assert!(
        short.setup.short_of_replicas[0].starts_with("stream COWORK_JOBS has 1 replica, 3 asked"),
        "{:?}",
        short.setup
    );
    let checked = short.health.check().await;
    assert_eq!(
        checked[0].shortfall().as_deref(),
        Some("has 1 replica, 3 asked"),
        "{checked:#?}"
    );
}

/// The node (0-based index) that leads `stream` now, by its server name `n<idx + 1>`.
async fn stream_leader(jetstream: &async_nats::jetstream::Context, stream: &str) -> usize {
    wait_until(format!("{stream} has a leader"))
        .within(EVENTUALLY)
        .every(Duration::from_millis(200))
        .poll_async(async || {
            let leader = match jetstream.get_stream(stream).await {
                Ok(mut handle) => handle
                    .info()
                    .await
                    .ok()
                    .and_then(|info| info.cluster.as_ref().and_then(|c| c.leader.clone())),
                Err(_) => None,
            };
            leader
                .as_deref()
                .and_then(|name| name.strip_prefix('n'))
                .and_then(|number| number.parse::<usize>().ok())
                .map(|number| number - 1)
                .ok_or_else(|| format!("leader {leader:?}"))
        })
        .await
}

/// Publishes `event` until the cluster stores it (a new leader may still be being elected),
/// for at most [`EVENTUALLY`]; returns its stream sequence.
async fn publish_event(events: &dyn EventLog, event: &JobEvent) -> u64 {
    wait_until(format!("the cluster stored an event of {}", event.job_id))
        .within(EVENTUALLY)
        .every(Duration::from_millis(200))
        .poll_async(async || events.publish(event).await)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_subscription_delivers_again_after_its_stream_leader_is_killed() {
    let mut cluster = NatsCluster::start(3);
    let subscriber = fabric(&cluster_config(&cluster)).await;
    until_health(&subscriber.health, "every stream whole at R3", |checked| {
        all_whole(checked, 3)
    })
    .await;
    // An event from before the subscription's start, which no recovery may hand out.
    let before = event("b1", 100, 1, JobEventKind::Started);
    let before_seq = publish_event(&subscriber.events, &before).await;
    let mut subscription = subscriber
        .events
        .subscribe(&BatchId::new("b1").expect("valid literal"), before_seq + 1)
        .await
        .expect("subscribe");

    // Twice in a row: the second kill hits the leader elected after the first, with the first
    // node back (a rolling restart), and each time the client may lose its own node too. The
    // first kill comes before the subscription delivered anything, when a recovery that
    // forgets where the subscription started would replay the batch from its first event.
    for round in 1..=2u32 {
        let leader = stream_leader(&subscriber.jetstream, "COWORK_EVENTS").await;
        // The publisher knows only the nodes that stay up, and connects (its set-up reads
        // every stream) before the leader goes.
        let survivors: Vec<String> = (0..cluster.len())
            .filter(|idx| *idx != leader)
            .map(|idx| cluster.node(idx).url())
            .collect();
        let mut publisher_config = NatsConfig::new(&survivors.join(","));
        publisher_config.connect_timeout = Duration::from_secs(20);
        let publisher = fabric(&publisher_config).await;
        cluster.node(leader).kill();
        let after = event("b1", round, 1, JobEventKind::Started);
        let seq = publish_event(&publisher.events, &after).await;
        assert_eq!(
            next_event(&mut subscription).await,
            (seq, after),
            "round {round}: the event published after leader n{} was killed",
            leader + 1
        );
        cluster.node(leader).restart();
        let every: Vec<usize> = (0..cluster.len()).collect();
        cluster.wait_healthy(&every);
    }
}
