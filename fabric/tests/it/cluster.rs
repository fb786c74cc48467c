//! The fabric on a real three-node JetStream cluster on loopback: the replica count found
//! from the cluster, an R1 stream moved to R3 in place without losing what it holds (its
//! consumers moved along), a stream without quorum reported by the health checks and reported
//! healthy again once the quorum is back, and a single server that keeps R1 with no setting.
//!
//! Conditions are awaited with bounded polling of the health checks; nothing sleeps.

use std::time::{Duration, Instant};

use cowork_fabric::nats::{NatsConfig, Replicas};
use cowork_fabric::{FabricHealth, ObjectHealth, ObjectKind, ObjectState};
use cowork_schema::job::Tier;
use cowork_testkit::{NatsCluster, NatsServer};

use crate::nats::{EVENTUALLY, fabric, job, publish, pull};

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
    let deadline = Instant::now() + EVENTUALLY;
    loop {
        let checked = health.check().await;
        if wanted(&checked) {
            return checked;
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {EVENTUALLY:?}; last check: {checked:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
    let deadline = Instant::now() + EVENTUALLY;
    loop {
        let consumer = jobs
            .consumer_info(cowork_fabric::nats::consumer_name(Tier::Container))
            .await
            .expect("the container tier's consumer");
        let peers = consumer
            .cluster
            .as_ref()
            .map(|cluster| cluster.replicas.len() + 1);
        if peers == Some(3) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the consumer did not move with its stream: {consumer:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
