//! Failures of a worker, not of a job: real nats-server, s3s-fs, coordinator and workers as
//! processes.
//!
//! - A worker whose sandboxes cannot start (its container image is gone from the engine, as
//!   after a prune) hands each job back at once; another worker runs it. The hand-backs are
//!   counted apart (`fleet.jobs.sandboxStartRetries`), not as retries or redeliveries, and
//!   after three in a row the broken worker stops taking the tier, which `cowork workers`
//!   says. The broken worker's container executor talks to this machine's Docker engine; the
//!   healthy worker runs the harness CLI's strict double as a process, a host with nothing of
//!   its own to start.
//! - A worker given SIGTERM mid-job (a node drain, a spot reclaim) with a short
//!   `--drain-grace` stops its runs when the grace passes and hands them back; another worker
//!   runs them. They are counted as `disrupted`, not as retries or redeliveries, and the
//!   batch's rollup is an undisturbed run's, byte for byte.
//!
//! Every wait is for a condition (an event, a line of `cowork workers`, a process exit) under an
//! overall deadline.

use std::process::Command;
use std::time::Duration;

use cowork_schema::event::{InfraClass, JobEvent, JobEventKind};
use cowork_testkit::wait_until;
use serde_json::Value;

use crate::faults::{EventFollower, finish_and_check_of, submit_of};
use crate::fleet::Fleet;
use crate::support::{Sandbox, strict_harness, workspace_root};

/// Polls `ready` every 100 ms until it holds, or fails naming `what` (and the fleet's logs).
fn wait_for(fleet: &Fleet, what: &str, ready: impl FnMut() -> bool) {
    wait_until(what)
        .within(Duration::from_secs(120))
        .every(Duration::from_millis(100))
        .context(|| fleet.logs())
        .poll(ready);
}

fn run_checked(command: &mut Command) {
    let out = command
        .output()
        .unwrap_or_else(|err| panic!("cannot run {command:?}: {err}"));
    assert!(
        out.status.success(),
        "{command:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An image the container executor's start-up probe accepts (`cowork-harness --version`
/// answers): `FROM scratch` holding the static `nats-server` binary under that name, which
/// prints a version line. Built locally with the classic builder; nothing is pulled.
fn probe_only_image(tag: &str) {
    let nats_server = which("nats-server");
    let context = tempfile::tempdir().expect("a build context dir");
    std::fs::copy(&nats_server, context.path().join("cowork-harness"))
        .expect("copying nats-server into the build context");
    std::fs::write(
        context.path().join("Dockerfile"),
        "FROM scratch\nCOPY cowork-harness /usr/local/bin/cowork-harness\n",
    )
    .expect("writing the Dockerfile");
    run_checked(
        Command::new("docker")
            .env("DOCKER_BUILDKIT", "0")
            .args(["build", "--quiet", "--tag", tag])
            .arg(context.path()),
    );
}

fn which(program: &str) -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| panic!("{program} is not on PATH"))
}

/// Removes the test's image when the test ends, also when it fails.
struct RemoveImage(String);

impl Drop for RemoveImage {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rmi", "--force", &self.0])
            .output();
    }
}

/// The `cowork workers --output-format json` entry of `worker_id`, if it is listed.
fn worker_entry(fleet: &Fleet, worker_id: &str) -> Option<Value> {
    let out = fleet.cowork(&workspace_root(), &["workers", "--output-format", "json"]);
    let workers: Value = serde_json::from_str(out.stdout.trim()).ok()?;
    workers
        .as_array()?
        .iter()
        .find(|worker| worker["workerId"] == worker_id)
        .cloned()
}

fn failed_events(events: &[JobEvent]) -> Vec<(InfraClass, &str, bool)> {
    events
        .iter()
        .filter_map(|event| match &event.event {
            JobEventKind::Failed {
                class, will_retry, ..
            } => Some((*class, event.worker_id.as_str(), *will_retry)),
            _ => None,
        })
        .collect()
}

fn jobs_counter(fleet_key: &Value, name: &str) -> u64 {
    fleet_key["jobs"][name].as_u64().unwrap_or(0)
}

/// The arguments of a harness-executor worker running the strict double of the harness CLI:
/// a host whose runs need no container of the worker's own.
fn harness_worker_args(name: &str) -> Vec<String> {
    Fleet::worker_args(name, "container", "2")
        .into_iter()
        .map(|arg| {
            if arg == "sim" {
                "harness".to_owned()
            } else {
                arg
            }
        })
        .chain([
            "--harness-bin".to_owned(),
            strict_harness().display().to_string(),
        ])
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_that_cannot_start_is_retried_on_another_worker_and_counted_apart() {
    crate::multihost::require_docker();
    let tag = format!("cowork-test-sandbox-{}:0", std::process::id());
    probe_only_image(&tag);
    let image = RemoveImage(tag.clone());
    let mut fleet = Fleet::start();
    let owner = format!("cowork-test-sandbox-{}", std::process::id());
    fleet.spawn(
        "broken",
        &[
            "worker",
            "--executor",
            "container",
            "--container-image",
            &tag,
            "--container-owner",
            &owner,
            "--tiers",
            "container",
            "--slots",
            "1",
            "--worker-id",
            "broken",
            "--cache-dir",
            "broken/cache",
            "--work-dir",
            "broken/work",
        ],
    );
    wait_for(&fleet, "the broken worker's first heartbeat", || {
        worker_entry(&fleet, "broken").is_some()
    });
    // The image goes away after the worker checked it, as a prune of the engine would do: every
    // container of this worker now fails at create.
    drop(image);

    let sandbox = Sandbox::empty();
    sandbox.write(
        "scenarios/a.yaml",
        "# strict-harness: pass\nsession: (inline)\nprompt: Say hello.\nassert:\n  - result: success\n",
    );
    let batch = fleet.submit_detached(
        sandbox.path(),
        &["scenarios/a.yaml", "--repeat", "4", "--executor", "harness"],
    );
    wait_for(
        &fleet,
        "the broken worker backing off tier container",
        || {
            worker_entry(&fleet, "broken").is_some_and(|worker| {
                worker["sandboxStartFailures"] == 3
                    && worker["backedOffTiers"][0]["tier"] == "container"
            })
        },
    );
    let listed = fleet.cowork(&workspace_root(), &["workers"]);
    assert!(
        listed.stdout.contains(
            "broken  BACKED OFF tier container: 3 sandbox start failures in a row; takes it again in"
        ),
        "{}",
        listed.context()
    );

    let args = harness_worker_args("healthy");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fleet.spawn("healthy", &args);
    let watched = fleet.cowork(
        sandbox.path(),
        &["watch", batch.as_str(), "--output-format", "json"],
    );
    assert_eq!(watched.code(), 0, "{}\n{}", watched.context(), fleet.logs());
    let envelope = watched.envelope();
    assert_eq!(envelope["results"].as_array().map(Vec::len), Some(4));
    let fleet_key = &envelope["fleet"];
    let events = fleet.events(&batch).await;
    assert_eq!(
        failed_events(&events),
        vec![(InfraClass::SandboxStart, "broken", true); 3],
        "three hand-backs by the broken worker, then it took no more\n{}",
        fleet.logs()
    );
    let finished: Vec<&JobEvent> = events
        .iter()
        .filter(|event| matches!(event.event, JobEventKind::Finished { .. }))
        .collect();
    assert_eq!(finished.len(), 4, "each job finished once");
    for event in finished {
        assert_eq!(event.worker_id, "healthy", "{event:?}");
    }
    assert_eq!(
        jobs_counter(fleet_key, "sandboxStartRetries"),
        3,
        "{fleet_key}"
    );
    assert_eq!(jobs_counter(fleet_key, "retries"), 0, "{fleet_key}");
    assert_eq!(jobs_counter(fleet_key, "redelivered"), 0, "{fleet_key}");
    // The end-of-run summary says it in words.
    assert!(
        watched.stderr.contains(
            "3 sandbox start failure(s) retried as infrastructure on another worker (not attempts, nothing spent)"
        ),
        "{}",
        watched.context()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_mid_job_hands_its_runs_back_without_counting_an_attempt() {
    // Runs of 5 to 15 s of real time: the drained worker is mid-job when its grace of 1 s
    // passes.
    const RUN_MS: u64 = 10_000;
    let mut fleet = Fleet::start();
    fleet.spawn_worker_with("drained", "container", "4", &["--drain-grace", "1s"]);
    let batch = submit_of(&fleet, 2, RUN_MS);
    let mut follower = EventFollower::new(&fleet.nats_url, &batch).await;
    let mut started = 0;
    while started < 4 {
        follower
            .until(&fleet, |event| matches!(event.event, JobEventKind::Started))
            .await;
        started += 1;
    }
    fleet.terminate("drained");
    assert!(
        fleet
            .log("drained")
            .contains("the drain grace passed: stopping the running jobs and handing them back"),
        "{}",
        fleet.log("drained")
    );

    fleet.spawn_worker("replacement", "container", "4");
    let fleet_key = finish_and_check_of(&fleet, &batch, 2, RUN_MS).await;
    let events = fleet.events(&batch).await;
    assert_eq!(
        failed_events(&events),
        vec![(InfraClass::WorkerLost, "drained", true); 4],
        "each cut-short run was handed back once\n{}",
        fleet.logs()
    );
    for event in &events {
        if matches!(event.event, JobEventKind::Finished { .. }) {
            assert_eq!(event.worker_id, "replacement", "{event:?}");
        }
    }
    assert_eq!(jobs_counter(&fleet_key, "disrupted"), 4, "{fleet_key}");
    assert_eq!(jobs_counter(&fleet_key, "retries"), 0, "{fleet_key}");
    assert_eq!(jobs_counter(&fleet_key, "redelivered"), 0, "{fleet_key}");
    assert_eq!(jobs_counter(&fleet_key, "lost"), 0, "{fleet_key}");
}
