//! The coordinator lease on a real nats-server: one claimer leads, a second stands by and
//! takes the lease once the first stops renewing (the bucket's `max_age` expires it), the
//! fencing token grows with every holder, the old holder's renewal is refused, a release
//! frees the lease at once, and coordinators that disagree on the ttl are refused at start.
//! Expiry is awaited with a bounded poll; no test sleeps to synchronize.

use std::time::Duration;

use cowork_fabric::lease::{CoordinatorLease, LeaseHolder, LeaseState};
use cowork_fabric::nats::{NatsError, NatsLease};
use cowork_testkit::{NatsServer, wait_until};

use crate::nats::{EVENTUALLY, config, fabric};

const TTL: Duration = Duration::from_secs(2);

fn holder(id: &str) -> LeaseHolder {
    LeaseHolder {
        coordinator_id: id.to_owned(),
        url: format!("http://{id}.example:8080"),
        since_ms: 1_000,
    }
}

#[tokio::test]
async fn a_standby_takes_the_lease_once_the_leader_stops_renewing_and_the_old_leader_is_fenced() {
    let server = NatsServer::start();
    let fleet = fabric(&config(&server)).await;
    let lease_a = NatsLease::open(&fleet.jetstream, "TEST_LEADER", TTL, 1)
        .await
        .expect("open");
    let lease_b = NatsLease::open(&fleet.jetstream, "TEST_LEADER", TTL, 1)
        .await
        .expect("open again");
    let (a, b) = (holder("coord-a"), holder("coord-b"));

    let Ok(LeaseState::Leading {
        revision: taken,
        since_ms,
    }) = lease_a.claim(&a).await
    else {
        panic!("the first claim takes a free lease");
    };
    assert_eq!(since_ms, 1_000);
    match lease_b.claim(&b).await.expect("claim") {
        LeaseState::Standby { leader, revision } => {
            assert_eq!(leader, a);
            assert_eq!(revision, taken);
        }
        other => panic!("a second claimer must stand by, got {other:?}"),
    }
    let renewer = LeaseHolder {
        since_ms: 9_999,
        ..a.clone()
    };
    let Ok(LeaseState::Leading {
        revision: renewed,
        since_ms,
    }) = lease_a.claim(&renewer).await
    else {
        panic!("the holder renews");
    };
    assert!(renewed > taken);
    assert_eq!(since_ms, 1_000, "a renewal keeps when the lease was taken");

    // a stops renewing: b takes the lease once the server expired it.
    let won = wait_until("the standby took the expired lease")
        .within(EVENTUALLY)
        .every(Duration::from_millis(200))
        .poll_async(async || match lease_b.claim(&b).await {
            Ok(LeaseState::Leading { revision, .. }) => Some(revision),
            _ => None,
        })
        .await;
    assert!(
        won > renewed,
        "the fencing token grows: {won} after {renewed}"
    );
    match lease_a.claim(&a).await.expect("claim") {
        LeaseState::Standby { leader, revision } => {
            assert_eq!(leader.coordinator_id, "coord-b");
            assert_eq!(revision, won);
        }
        other => panic!("the old leader must find itself a standby, got {other:?}"),
    }
    assert!(
        !lease_a.release(&a, renewed).await.expect("release"),
        "a lease lost is not released"
    );

    // A clean shutdown frees the lease at once, without waiting for the ttl.
    assert!(lease_b.release(&b, won).await.expect("release"));
    assert!(matches!(
        lease_a.claim(&a).await,
        Ok(LeaseState::Leading { revision, .. }) if revision > won
    ));
}

#[tokio::test]
async fn coordinators_that_disagree_on_the_ttl_are_refused() {
    let server = NatsServer::start();
    let fleet = fabric(&config(&server)).await;
    NatsLease::open(&fleet.jetstream, "TEST_LEADER", TTL, 1)
        .await
        .expect("open");
    let Err(error) = NatsLease::open(&fleet.jetstream, "TEST_LEADER", TTL * 5, 1).await else {
        panic!("a second ttl must be refused");
    };
    assert!(matches!(error, NatsError::Mismatch(_)), "{error:?}");
    let text = error.to_string();
    assert!(
        text.contains("TEST_LEADER") && text.contains("max_age"),
        "{text}"
    );
}
