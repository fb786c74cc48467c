//! Two coordinators on one NATS and store (decisions.md#coordinator-lease): the first leads,
//! the second stands by (its `/readyz` names the leader, and it forwards each request there:
//! a submit sent to it alone is the leader's); the leader is `kill -9`ed
//! mid-batch (a `cowork watch` given both follows through) and the standby takes the lease
//! once it expired, resumes the batch and decides it with the rollup of an undisturbed run,
//! nothing lost and nothing run twice; `/metrics`, `/readyz`, `cowork workers` and `cowork
//! status` say who leads, and the metrics count the takeover.
//! Waits are bounded polls; no sleep synchronizes.

use std::time::Duration;

use cowork_testkit::{free_port, wait_until};

use crate::faults::{EventFollower, fault_fleet, finish_and_check, submit};
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
            let (leader_status, leader_body) = readyz(leader_port);
            let (standby_status, standby_body) = readyz(standby_port);
            leader_status == 200
                && leader_body.starts_with("ready: leading since 20")
                && standby_status == 200
                && standby_body.contains("standby: the leader is")
                && standby_body.contains(&format!("127.0.0.1:{leader_port}"))
        });
    let standby_metrics = metrics(standby_port);
    assert!(
        standby_metrics.contains("cowork_coordinator_leading 0"),
        "{standby_metrics}"
    );
    assert!(metrics(leader_port).contains("cowork_coordinator_leading 1"));
    // The standby forwards each request: `cowork workers` asked of it is the leader's answer,
    // which says who leads, where and since when.
    fleet.api_port = standby_port;
    let workers = fleet.cowork(&root, &["workers"]);
    workers.expect_stderr(&format!(
        " at http://127.0.0.1:{leader_port} (this one), since 20"
    ));
    // A submit sent to the standby alone goes to the leader.
    let batch = submit(&fleet, 1000);
    fleet.api_port = leader_port;
    // A watch given both, leader first, follows the batch through the takeover.
    let leader_url = format!("http://127.0.0.1:{leader_port}");
    let standby_url = format!("http://127.0.0.1:{standby_port}");
    fleet.client_coordinators = Some(format!("{leader_url},{standby_url}"));
    let watcher = fleet
        .watch_command(&root, &batch)
        .spawn()
        .expect("starting cowork watch");
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    follower.until_finished(&fleet, 40).await;
    fleet.kill("coordinator");
    // From here the standby must take over.
    fleet.api_port = standby_port;
    wait_until("the standby leads")
        .within(Duration::from_secs(30))
        .every(Duration::from_millis(100))
        .context(|| fleet.logs())
        .poll(|| {
            let (status, body) = readyz(standby_port);
            status == 200 && body.starts_with("ready: leading since")
        });
    let taken_over = metrics(standby_port);
    for line in [
        "cowork_coordinator_leading 1",
        "cowork_coordinator_takeovers_total 1",
    ] {
        assert!(taken_over.contains(line), "{line}: {taken_over}");
    }
    // `cowork status` given both names the new leader, which answers itself.
    let status = fleet.cowork(&root, &["status", batch.as_str()]);
    status.expect_stdout(&format!(
        "leader   standby at http://127.0.0.1:{standby_port} (this one), since 20"
    ));
    let (_, ready) = readyz(standby_port);
    assert!(ready.starts_with("ready: leading since 20"), "{ready}");
    finish_and_check(&fleet, &batch, 1000).await;
    let watched = watcher
        .wait_with_output()
        .expect("waiting for cowork watch");
    let envelope: serde_json::Value = serde_json::from_slice(&watched.stdout).unwrap_or_else(|e| {
        panic!(
            "the watch given both coordinators prints the envelope: {e}\n{}",
            String::from_utf8_lossy(&watched.stderr)
        )
    });
    assert_eq!(
        envelope["fleet"]["jobs"]["finished"],
        envelope["fleet"]["jobs"]["planned"],
        "{}",
        String::from_utf8_lossy(&watched.stderr)
    );
}
