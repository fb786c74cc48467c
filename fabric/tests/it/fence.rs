//! The queue's fence on a real nats-server, alone and as a three-node cluster: a term's
//! publishes pass while it is the latest fenced one, and once a later term has fenced the
//! queue, every publish of the earlier term is refused by the server (in another process's
//! connection, so no local state can be what refuses it), an earlier term cannot fence again,
//! and nothing it tried is queued. On the cluster this also shows that pipelined fenced
//! publishes are not refused for being in flight together (each holds a lane of its own).

use cowork_fabric::nats::NatsConfig;
use cowork_fabric::queue::{JobQueue, QueueError};
use cowork_schema::job::{JobSpec, Tier};
use cowork_testkit::{NatsCluster, NatsServer};

use crate::nats::{config, fabric, job};

fn of_term(batch: &str, count: u32, term: u64) -> Vec<JobSpec> {
    (0..count)
        .map(|index| {
            let mut job = job(batch, index, Tier::Container);
            job.leader_term = term;
            job
        })
        .collect()
}

async fn queued(queue: &dyn JobQueue) -> u64 {
    queue
        .pending()
        .await
        .expect("pending")
        .into_iter()
        .filter(|(tier, _)| *tier == Tier::Container)
        .map(|(_, count)| count)
        .sum()
}

async fn a_later_term_fences_off_an_earlier_one(config: &NatsConfig) {
    let old = fabric(config).await;
    let new = fabric(config).await;

    old.queue.fence(5).await.expect("term 5 fences");
    // More publishes than lanes, pipelined.
    for result in old.queue.publish_many(&of_term("b-old", 300, 5)).await {
        result.expect("term 5 publishes while it is the latest");
    }

    new.queue.fence(6).await.expect("term 6 fences");
    let refused = old.queue.publish(&of_term("b-late", 1, 5)[0]).await;
    assert!(
        matches!(refused, Err(QueueError::Fenced { .. })),
        "{refused:?}"
    );
    let refused_many = old.queue.publish_many(&of_term("b-late2", 20, 5)).await;
    assert!(
        refused_many
            .iter()
            .all(|result| matches!(result, Err(QueueError::Fenced { .. }))),
        "{refused_many:?}"
    );
    // An old leader that resumes in the middle of fencing cannot fence again.
    let refence = old.queue.fence(5).await;
    assert!(
        matches!(refence, Err(QueueError::Fenced { .. })),
        "{refence:?}"
    );

    for result in new.queue.publish_many(&of_term("b-new", 300, 6)).await {
        result.expect("term 6 publishes after fencing");
    }
    // Jobs of no term (tools, a coordinator without a lease) are not checked.
    for result in old.queue.publish_many(&of_term("b-none", 3, 0)).await {
        result.expect("a job of no term is not fenced");
    }
    assert_eq!(queued(&new.queue).await, 300 + 300 + 3);
}

#[tokio::test]
async fn a_later_term_fences_off_an_earlier_one_on_a_single_server() {
    let server = NatsServer::start();
    a_later_term_fences_off_an_earlier_one(&config(&server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_term_fences_off_an_earlier_one_on_a_cluster() {
    let cluster = NatsCluster::start(3);
    let mut config = NatsConfig::new(&cluster.url());
    config.connect_timeout = std::time::Duration::from_secs(20);
    a_later_term_fences_off_an_earlier_one(&config).await;
}
