//! Two coordinators on one NATS and store (decisions.md#coordinator-lease): the first leads,
//! the second stands by (its `/readyz` names the leader, a change sent to it is refused with
//! the leader's URL); the leader is `kill -9`ed mid-batch and the standby takes the lease
//! once it expired, resumes the batch and decides it with the rollup of an undisturbed run,
//! nothing lost and nothing run twice; `/metrics` says who leads and counts the takeover.
//! Waits are bounded polls; no sleep synchronizes.

use std::time::Duration;

use cowork_testkit::{free_port, wait_until};

use crate::faults::{
    EventFollower, batch_args, fault_fleet, finish_and_check, profile_file, submit,
};
use crate::support::workspace_root;

/// A short lease, so the takeover comes within seconds of the kill.
const LEASE_TTL: &str = "3s";

fn metrics(port: u16) -> String {
    crate::report::http_get_raw(port, "/metrics", None).2
}

fn readyz(port: u16) -> (u16, String) {
    let (status, _, body) = crate::report::http_get_raw(port, "/readyz", None);
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_a_killed_leader_and_the_batch_ends_as_an_undisturbed_run() {
    let mut fleet = fault_fleet(&[("COWORK_LEASE_TTL", LEASE_TTL)], &[]);
    let leader_port = fleet.api_port;
    let standby_port = free_port();
    fleet.spawn_coordinator_as("standby", standby_port);
    let root = workspace_root();

    wait_until("the first coordinator leads and the second stands by")
        .within(Duration::from_secs(30))
        .every(Duration::from_millis(100))
        .context(|| fleet.logs())
        .poll(|| {
            let (leader_status, _) = readyz(leader_port);
            let (standby_status, standby_body) = readyz(standby_port);
            leader_status == 200
                && standby_status == 503
                && standby_body.contains("standby: the leader is")
                && standby_body.contains(&format!("127.0.0.1:{leader_port}"))
        });
    let standby_metrics = metrics(standby_port);
    assert!(
        standby_metrics.contains("cowork_coordinator_leading 0"),
        "{standby_metrics}"
    );
    assert!(metrics(leader_port).contains("cowork_coordinator_leading 1"));
    // A change sent to the standby is refused, naming where to send it.
    fleet.api_port = standby_port;
    let args = batch_args(&profile_file(1000, 1.0), 2);
    let mut submit_args = vec!["submit"];
    submit_args.extend(args.iter().map(String::as_str));
    let refused = fleet.cowork(&root, &submit_args);
    assert_ne!(refused.code(), 0, "{}", refused.context());
    refused.expect_stderr("this coordinator is a standby: the leader is");
    refused.expect_stderr(&format!("at http://127.0.0.1:{leader_port}"));
    fleet.api_port = leader_port;

    let batch = submit(&fleet, 1000);
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    follower.until_finished(&fleet, 40).await;
    fleet.kill("coordinator");
    // From here every client command goes to the standby, which must take over.
    fleet.api_port = standby_port;
    wait_until("the standby leads")
        .within(Duration::from_secs(30))
        .every(Duration::from_millis(100))
        .context(|| fleet.logs())
        .poll(|| readyz(standby_port).0 == 200);
    let taken_over = metrics(standby_port);
    for line in [
        "cowork_coordinator_leading 1",
        "cowork_coordinator_takeovers_total 1",
    ] {
        assert!(taken_over.contains(line), "{line}: {taken_over}");
    }
    finish_and_check(&fleet, &batch, 1000).await;
}
