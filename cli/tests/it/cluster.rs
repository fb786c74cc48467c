//! The fleet on a three-node JetStream cluster on loopback (every process given all three
//! URLs, the streams at R3 found from the cluster, no replica setting anywhere), during a
//! 120-job batch of 1-s `sim` jobs:
//!
//! - the node leading the jobs stream is killed for good mid-batch;
//! - all three nodes are restarted in turn (a rolling restart);
//! - two of the three are killed at once, so no stream has a quorum: `cowork status`,
//!   `cowork workers` and `/readyz` name the stalled streams (status within 10 s), then the
//!   nodes come back.
//!
//! Each batch must end judged exactly as `cowork run` judges it (the rollup byte for byte, see
//! `faults::finish_and_check_of`), with 0 lost, 0 duplicates and no job started twice. Faults
//! are timed by the batch's own events and conditions are awaited by bounded polling.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cowork_fabric::nats::NatsConfig;
use cowork_schema::BatchId;
use cowork_schema::event::JobEventKind;
use serde_json::Value;

use crate::faults::{EventFollower, finish_and_check_of, submit_of};
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

/// The end conditions beyond `finish_and_check_of`: nothing lost, and every job started exactly
/// once according to the stored events. A job may be *reported* again: when a consumer's
/// leader changes, JetStream can lose an ack and deliver a finished job once more; that
/// delivery finds the job's stored record and reports the same stored run without running it
/// (docs/operations.md, "NATS topology"). Such a report must repeat the first one's artifacts
/// exactly, and the fold counts at most those as duplicates.
async fn check_once_each(fleet: &Fleet, batch: &BatchId, fleet_key: &Value) {
    assert_eq!(fleet_key["jobs"]["lost"], 0, "{fleet_key}");
    let mut started: BTreeMap<String, usize> = BTreeMap::new();
    let mut first_report: BTreeMap<String, Vec<cowork_schema::event::ArtifactRef>> =
        BTreeMap::new();
    let mut reported_again = 0u64;
    for event in fleet.events(batch).await {
        match &event.event {
            JobEventKind::Started => {
                *started.entry(event.job_id.to_string()).or_default() += 1;
            }
            JobEventKind::Finished { artifacts, .. } => {
                match first_report.get(event.job_id.as_str()) {
                    None => {
                        first_report.insert(event.job_id.to_string(), artifacts.clone());
                    }
                    Some(first) => {
                        assert_eq!(
                            first, artifacts,
                            "a later report of {} is another run, not the stored one",
                            event.job_id
                        );
                        reported_again += 1;
                    }
                }
            }
            _ => {}
        }
    }
    let twice: Vec<_> = started.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "jobs started more than once: {twice:?}");
    assert_eq!(started.len(), JOBS, "every job started");
    assert_eq!(first_report.len(), JOBS, "every job finished");
    let duplicates = fleet_key["jobs"]["duplicates"].as_u64().unwrap_or(u64::MAX);
    assert!(
        duplicates <= reported_again,
        "the fold's duplicates are re-reports of stored runs ({reported_again}): {fleet_key}"
    );
    if reported_again > 0 {
        eprintln!("{reported_again} job(s) reported again from their stored runs");
    }
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

/// Polls `probe` until its output names a stall of the jobs stream, or fails after `limit`.
fn until_stall_shown(fleet: &Fleet, what: &str, limit: Duration, probe: impl Fn() -> String) {
    let deadline = Instant::now() + limit;
    loop {
        let text = probe();
        if text.contains("stream COWORK_JOBS has no")
            || text.contains("stream COWORK_JOBS does not answer")
        {
            eprintln!("{what} names the stall:\n{text}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not name the stalled jobs stream within {limit:?}; last output:\n{text}\n{}",
            fleet.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
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
    fleet.nats_node(1).kill();
    fleet.nats_node(2).kill();
    // The acceptance bound: status names the stall within 10 s of the quorum's loss.
    until_stall_shown(&fleet, "cowork status", Duration::from_secs(10), || {
        stdout_and_stderr(&fleet.cowork(&cwd, &["status", batch.as_str()]))
    });
    until_stall_shown(&fleet, "/readyz", Duration::from_secs(10), || {
        readyz(&fleet)
    });
    let during = readyz(&fleet);
    assert!(during.contains(" 503 "), "{during}");
    until_stall_shown(&fleet, "cowork workers", Duration::from_secs(10), || {
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
