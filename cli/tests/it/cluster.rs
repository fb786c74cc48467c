//! The fleet on a three-node JetStream cluster on loopback (every process given all three
//! URLs, the streams at R3 found from the cluster, no replica setting anywhere), during a
//! 120-job batch of 1-s `sim` jobs:
//!
//! - the node leading the jobs stream is killed for good mid-batch;
//! - all three nodes are restarted in turn (a rolling restart);
//! - two of the three are killed at once, so no stream has a quorum: `cowork status`,
//!   `cowork workers` and `/readyz` name the stalled streams (status with a stall dated within
//!   10 s of the fault), then the nodes come back.
//!
//! Each batch must end judged exactly as `cowork run` judges it (the rollup byte for byte, see
//! `faults::finish_and_check_of`), with 0 lost, 0 duplicates and no job started twice
//! (`faults::check_each_ran_once`; a finished job whose ack was lost may be re-acked from its
//! stored run, never run again). Faults are timed by the batch's own events and conditions
//! are awaited by bounded polling.

use std::time::Duration;

use cowork_fabric::nats::NatsConfig;
use cowork_schema::BatchId;
use cowork_testkit::wait_until;
use serde_json::Value;

use crate::faults::{EventFollower, check_each_ran_once, finish_and_check_of, submit_of};
use crate::fleet::Fleet;
use crate::support::{Output, workspace_root};

/// Runs per matrix cell: 4 cells × 30 = 120 jobs.
const REPEAT: usize = 30;
const JOBS: usize = 4 * REPEAT;
/// Simulated run length, about one second of real time.
const RUN_MS: u64 = 1000;

/// A fleet on three loopback nodes with two 4-slot `sim` workers. The ack wait stays at its
/// default (60 s), far above any outage here, so no running job is handed out twice.
fn cluster_fleet() -> Fleet {
    let mut fleet = Fleet::on_cluster(3, &[]);
    for name in ["w0", "w1"] {
        fleet.spawn_worker(name, "container", "4");
    }
    fleet
}

/// The index (0-based) of the node that leads the jobs stream now.
async fn jobs_leader(fleet: &Fleet) -> usize {
    let fabric = cowork_fabric::nats::connect(&NatsConfig::new(&fleet.nats_url))
        .await
        .expect("connecting to the cluster");
    let stream = fabric
        .jetstream
        .get_stream("COWORK_JOBS")
        .await
        .expect("the jobs stream");
    let info = stream.cached_info();
    assert_eq!(info.config.num_replicas, 3, "the jobs stream is at R3");
    let leader = info
        .cluster
        .as_ref()
        .and_then(|cluster| cluster.leader.clone())
        .expect("the jobs stream has a leader");
    leader
        .strip_prefix('n')
        .and_then(|n| n.parse::<usize>().ok())
        .map(|n| n - 1)
        .unwrap_or_else(|| panic!("a node name n<k>: {leader}"))
}

/// The end conditions beyond `finish_and_check_of`: nothing lost, no duplicate, and every job
/// started exactly once according to the stored events (`faults::check_each_ran_once`).
async fn check_once_each(fleet: &Fleet, batch: &BatchId, fleet_key: &Value) {
    check_each_ran_once(&fleet.events(batch).await, JOBS, fleet_key);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_lost_for_good_mid_batch_costs_nothing() {
    let mut fleet = cluster_fleet();
    let batch = submit_of(&fleet, REPEAT, RUN_MS);
    let mut follower = EventFollower::new(&fleet.nats_url, &batch).await;
    follower.until_finished(&fleet, 30).await;
    let leader = jobs_leader(&fleet).await;
    fleet.nats_node(leader).kill();
    eprintln!("killed n{} (the jobs stream's leader) for good", leader + 1);
    let fleet_key = finish_and_check_of(&fleet, &batch, REPEAT, RUN_MS).await;
    check_once_each(&fleet, &batch, &fleet_key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_all_three_nodes_costs_nothing() {
    let mut fleet = cluster_fleet();
    let batch = submit_of(&fleet, REPEAT, RUN_MS);
    let mut follower = EventFollower::new(&fleet.nats_url, &batch).await;
    let mut finished = 15;
    for node in 0..3 {
        follower.until_finished(&fleet, finished).await;
        fleet.nats_node(node).kill();
        // The batch goes on while the node is down.
        finished += 10;
        follower.until_finished(&fleet, finished).await;
        fleet.nats_node(node).restart();
        fleet.wait_nats_healthy(&[0, 1, 2]);
        eprintln!("restarted n{} at {finished} finished", node + 1);
        finished += 10;
    }
    let fleet_key = finish_and_check_of(&fleet, &batch, REPEAT, RUN_MS).await;
    check_once_each(&fleet, &batch, &fleet_key).await;
}

/// How long a probe is polled for a stall before the test gives up: a guard against a hang,
/// not the bound the test checks (that one is measured from timestamps).
const STALL_GUARD: Duration = Duration::from_secs(60);

/// Polls `probe` until its output names a stall of the jobs stream; returns that output.
fn until_stall_shown(fleet: &Fleet, what: &str, probe: impl Fn() -> String) -> String {
    wait_until(format!("{what} names the stalled jobs stream"))
        .within(STALL_GUARD)
        .every(Duration::from_millis(200))
        .context(|| fleet.logs())
        .poll(|| {
            let text = probe();
            if text.contains("stream COWORK_JOBS has no")
                || text.contains("stream COWORK_JOBS does not answer")
            {
                eprintln!("{what} names the stall:\n{text}");
                Ok(text)
            } else {
                Err(format!("\n{text}"))
            }
        })
}

/// Milliseconds since the Unix epoch, the clock of a stall's `sinceMs`.
fn epoch_ms() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is past 1970");
    u64::try_from(since.as_millis()).expect("milliseconds fit in u64")
}

fn stdout_and_stderr(out: &Output) -> String {
    format!("{}{}", out.stdout, out.stderr)
}

/// `GET /readyz` on the coordinator: the status line and body.
fn readyz(fleet: &Fleet) -> String {
    use std::io::{Read, Write};
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], fleet.api_port));
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&address, Duration::from_secs(1))
    else {
        return String::new();
    };
    // A short deadline bounds one probe; the caller's loop owns the overall deadline.
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = stream.write_all(b"GET /readyz HTTP/1.0\r\nHost: coordinator\r\n\r\n");
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    reply
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_without_quorum_is_named_in_status_and_the_batch_ends_when_it_heals() {
    let mut fleet = cluster_fleet();
    let batch = submit_of(&fleet, REPEAT, RUN_MS);
    {
        let mut follower = EventFollower::new(&fleet.nats_url, &batch).await;
        follower.until_finished(&fleet, 30).await;
    }
    let cwd = workspace_root();
    // A watch that follows the batch through the stall (`submit --watch` follows the same way).
    let watcher = {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_cowork"));
        fleet.env(&mut command);
        command
            .args(["watch", batch.as_str(), "--quiet"])
            .args(["--coordinator", &fleet.coordinator_url()])
            .current_dir(&cwd)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        command.spawn().expect("starting cowork watch")
    };
    let fault_ms = epoch_ms();
    fleet.nats_node(1).kill();
    fleet.nats_node(2).kill();
    let shown = until_stall_shown(&fleet, "cowork status", || {
        stdout_and_stderr(&fleet.cowork(&cwd, &["status", batch.as_str()]))
    });
    assert!(
        shown.contains("stalled  stream COWORK_JOBS ") && shown.contains(" — since "),
        "status names the stalled stream and since when:\n{shown}"
    );
    // The acceptance bound, from timestamps: the stall status shows is dated within 10 s of
    // the quorum's loss (status shows it from the moment the coordinator dates it).
    let status = fleet.cowork(&cwd, &["status", batch.as_str(), "--output-format", "json"]);
    let status: Value = serde_json::from_str(status.stdout.trim())
        .unwrap_or_else(|e| panic!("status as JSON: {e}\n{}", status.context()));
    let since_ms = status["progress"]["fabricStalls"]
        .as_array()
        .and_then(|stalls| stalls.iter().find(|stall| stall["name"] == "COWORK_JOBS"))
        .and_then(|stall| stall["sinceMs"].as_u64())
        .unwrap_or_else(|| panic!("a dated stall of COWORK_JOBS in {status}"));
    eprintln!(
        "status shows the stall from {} ms after the fault",
        since_ms.saturating_sub(fault_ms)
    );
    assert!(
        (fault_ms..=fault_ms + 10_000).contains(&since_ms),
        "the stall is dated {since_ms}, the fault was at {fault_ms}: more than 10 s\n{status}"
    );
    until_stall_shown(&fleet, "/readyz", || readyz(&fleet));
    let during = readyz(&fleet);
    assert!(during.contains(" 503 "), "{during}");
    until_stall_shown(&fleet, "cowork workers", || {
        stdout_and_stderr(&fleet.cowork(&cwd, &["workers"]))
    });
    fleet.nats_node(1).restart();
    fleet.nats_node(2).restart();
    fleet.wait_nats_healthy(&[0, 1, 2]);
    let fleet_key = finish_and_check_of(&fleet, &batch, REPEAT, RUN_MS).await;
    check_once_each(&fleet, &batch, &fleet_key).await;
    let watched = watcher
        .wait_with_output()
        .expect("waiting for cowork watch");
    let watch_stderr = String::from_utf8_lossy(&watched.stderr);
    assert!(
        watch_stderr.contains("queue stalled: stream COWORK_JOBS ")
            && watch_stderr.contains("queue serves again: stream COWORK_JOBS"),
        "cowork watch named the stall once and its end:\n{watch_stderr}"
    );
    // Once per stall, not once per progress event (a stall that ends during the elections and
    // starts again is a new one).
    assert!(
        watch_stderr
            .matches("queue stalled: stream COWORK_JOBS")
            .count()
            <= 2,
        "{watch_stderr}"
    );
    let after = readyz(&fleet);
    assert!(
        after.contains(" 200 "),
        "ready again once the quorum is back: {after}"
    );
    // The workers said the outage once per streak of each operation, not once per retry: the
    // stall lasted seconds, over which a pull alone is retried many times.
    for worker in ["w0", "w1"] {
        let log = fleet.log(worker);
        for operation in ["pulling jobs", "publishing an event", "heartbeat"] {
            let said = log
                .lines()
                .filter(|line| line.contains("the queue fails") && line.contains(operation))
                .count();
            assert!(
                said <= 2,
                "{worker} logged the failing {operation} {said} times:\n{log}"
            );
        }
        assert!(
            !log.contains("pulling jobs failed, retrying"),
            "{worker} logged a pull retry:\n{log}"
        );
    }
}
