//! No run paid twice, nothing spent in silence (the worker's side):
//! real nats-server, s3s-fs, coordinator and workers as processes, each test breaking one
//! thing and counting runs.
//!
//! A run is counted from the batch's events: a delivery that starts a run publishes `started`;
//! a delivery handed back before the harness started publishes `failed` with `willRetry`; a
//! redelivery that finds the job's stored record reports it without starting anything. So the
//! runs of a job are its attempts with a `started` event and no `failed` one. The stand-in
//! harness tests count its spawns in a log file instead.
//!
//! Servers are made slow with the testkit's delaying proxy, or frozen with SIGSTOP; every wait
//! is for a condition (an event, a file, a process state) under an overall deadline.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use cowork_fabric::WorkerRegistry;
use cowork_fabric::nats::NatsConfig;
use cowork_schema::BatchId;
use cowork_schema::event::{ErrorCategory, JobEvent, JobEventKind, JobOutcome, JobRecord};
use cowork_testkit::wait_until;
use cowork_testkit::{DelayProxy, Slowness};
use serde_json::Value;

use crate::faults::{EventFollower, profile_file};
use crate::fleet::{BUCKET, Fleet};
use crate::support::{Output, Sandbox, strict_harness, workspace_root};

/// The runs of every job that started one: attempts with `started` and no `failed` event,
/// per job id and generation.
pub(crate) fn runs_per_job(events: &[JobEvent]) -> BTreeMap<String, usize> {
    let attempt = |event: &JobEvent| (event.job_id.to_string(), event.generation, event.attempt);
    let handed_back: BTreeSet<_> = events
        .iter()
        .filter(|event| matches!(event.event, JobEventKind::Failed { .. }))
        .map(attempt)
        .collect();
    let mut runs = BTreeMap::new();
    for event in events {
        if matches!(event.event, JobEventKind::Started) && !handed_back.contains(&attempt(event)) {
            *runs
                .entry(format!("{}@g{}", event.job_id, event.generation))
                .or_insert(0) += 1;
        }
    }
    runs
}

/// Every one of `n_jobs` jobs ran, and none ran twice.
#[track_caller]
pub(crate) fn assert_each_ran_once(runs: &BTreeMap<String, usize>, n_jobs: usize) {
    let twice: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "jobs run more than once: {twice:?}");
    assert_eq!(runs.len(), n_jobs, "every job ran once: {runs:?}");
}

/// Polls `ready` every 50 ms until it holds, or fails naming `what` (and the fleet's logs)
/// after `limit`.
fn wait_for(fleet: &Fleet, what: &str, limit: Duration, ready: impl FnMut() -> bool) {
    wait_until(what)
        .within(limit)
        .every(Duration::from_millis(50))
        .context(|| fleet.logs())
        .poll(ready);
}

/// The demo's 4 matrix cells × `repeat` runs of about a second each, on the simulator.
fn demo_batch(repeat: u32, time_scale: f64) -> Vec<String> {
    [
        "examples/demo/scenarios/csv-report.yaml",
        "--matrix",
        "examples/demo/matrix.yaml",
        "--repeat",
        &repeat.to_string(),
        "--executor",
        "sim",
        "--seed",
        "31",
        "--sim-profile",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([profile_file(1000, time_scale).display().to_string()])
    .collect()
}

/// The rollup of `args` run embedded and undisturbed (no sleeping: time scale 0).
fn reference_rollup(args: &[String]) -> Vec<u8> {
    let store = tempfile::tempdir().expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_cowork"))
        .arg("run")
        .args(args)
        .args(["--quiet", "--store"])
        .arg(store.path())
        .current_dir(workspace_root())
        .output()
        .expect("running cowork run");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "reference run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let batch = std::fs::read_dir(store.path().join("batches"))
        .expect("batches dir")
        .next()
        .expect("one batch")
        .expect("an entry")
        .path();
    std::fs::read(batch.join("rollup.json")).expect("rollup.json")
}

/// Starts a `sim` worker whose connection settings are overridden by `env`.
fn spawn_worker_with_env(fleet: &mut Fleet, name: &str, slots: &str, env: &[(&str, String)]) {
    let args = Fleet::worker_args(name, "container", slots);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fleet.spawn_program_with_env(name, env!("CARGO_BIN_EXE_cowork"), &[], &args, env);
}

/// Waits until every one of `names` is in `cowork workers`.
fn wait_for_workers(fleet: &Fleet, names: &[&str]) {
    wait_for(
        fleet,
        "the workers' first heartbeats",
        Duration::from_secs(60),
        || {
            let out = fleet.cowork(&workspace_root(), &["workers", "--output-format", "json"]);
            names
                .iter()
                .all(|name| out.stdout.contains(&format!("\"{name}\"")))
        },
    );
}

/// Watches the batch to its end; checks the result count, that no job ran twice, and that the
/// rollup is that of `undisturbed` run embedded.
async fn finish_without_reruns(
    fleet: &Fleet,
    batch: &BatchId,
    undisturbed: &[String],
    n_jobs: usize,
) {
    let out = fleet.watch(&workspace_root(), batch);
    assert!(
        matches!(out.code(), 0 | 1),
        "{}\n{}",
        out.context(),
        fleet.logs()
    );
    let envelope = out.envelope();
    assert_eq!(
        envelope["results"].as_array().map(Vec::len),
        Some(n_jobs),
        "{}",
        envelope["fleet"]
    );
    let runs = runs_per_job(&fleet.events(batch).await);
    assert_each_ran_once(&runs, n_jobs);
    assert_eq!(
        String::from_utf8_lossy(&fleet.object(&format!("batches/{batch}/rollup.json"))),
        String::from_utf8_lossy(&reference_rollup(undisturbed)),
        "rollup of the slowed batch vs the undisturbed one"
    );
}

fn socket(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_store_during_bundle_fetch_and_uploads_runs_no_job_twice() {
    let mut fleet = Fleet::start_with_env(&[("COWORK_ACK_WAIT", "2s")]);
    // The workers reach S3 through a proxy that delays every answer; the coordinator does not.
    let proxy = DelayProxy::start(socket(fleet.s3.port), Slowness::Responses);
    let endpoint = format!("http://{}", proxy.address());
    for name in ["w0", "w1"] {
        spawn_worker_with_env(
            &mut fleet,
            name,
            "4",
            &[("COWORK_S3_ENDPOINT", endpoint.clone())],
        );
    }
    wait_for_workers(&fleet, &["w0", "w1"]);
    // Three ack deadlines per answer: the bundle fetch, every upload and the record each take
    // longer than the queue waits for an unrenewed delivery.
    proxy.set_delay(Duration::from_secs(6));
    let args = demo_batch(5, 1.0);
    let args_ref: Vec<&str> = args.iter().map(String::as_str).collect();
    let batch = fleet.submit_detached(&workspace_root(), &args_ref);
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    follower.until_finished(&fleet, 1).await;
    proxy.set_delay(Duration::ZERO);
    finish_without_reruns(&fleet, &batch, &demo_batch(5, 0.0), 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_event_publishes_run_no_job_twice() {
    let mut fleet = Fleet::start_with_env(&[("COWORK_ACK_WAIT", "1s")]);
    // The workers' event publishes reach NATS three ack deadlines late (below the client's
    // 5 s wait for a publish acknowledgement); deliveries, acks and renewals are not delayed.
    let proxy = DelayProxy::start(
        socket(fleet.nats.port),
        Slowness::NatsPublishes {
            subject_prefix: "cowork.events.".to_owned(),
        },
    );
    let url = format!("nats://{}", proxy.address());
    for name in ["w0", "w1"] {
        spawn_worker_with_env(&mut fleet, name, "4", &[("COWORK_NATS_URL", url.clone())]);
    }
    wait_for_workers(&fleet, &["w0", "w1"]);
    proxy.set_delay(Duration::from_secs(3));
    let args = demo_batch(5, 1.0);
    let args_ref: Vec<&str> = args.iter().map(String::as_str).collect();
    let batch = fleet.submit_detached(&workspace_root(), &args_ref);
    finish_without_reruns(&fleet, &batch, &demo_batch(5, 0.0), 20).await;
}

/// A scenario for the stand-in harness that logs its spawns to `spawn_log` and waits for its
/// release file.
fn held_scenario(spawn_log: &Path) -> String {
    format!(
        "# strict-harness: pass\n# strict-harness-spawn-log: {}\n# strict-harness-wait-release: yes\nsession: (inline)\nprompt: Say hello.\nassert:\n  - result: success\n",
        spawn_log.display()
    )
}

/// The working directories the stand-in harness logged, one per spawn.
fn spawns(spawn_log: &Path) -> Vec<PathBuf> {
    std::fs::read_to_string(spawn_log)
        .unwrap_or_default()
        .lines()
        .map(PathBuf::from)
        .collect()
}

/// The arguments of a harness-executor worker running the stand-in harness.
fn harness_worker_args(name: &str, slots: &str) -> Vec<String> {
    Fleet::worker_args(name, "container", slots)
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
async fn a_permanent_upload_failure_after_spawn_runs_the_harness_once() {
    let mut fleet = Fleet::start();
    // The worker reaches S3 through a proxy that can start refusing it (403 AccessDenied, as
    // for revoked credentials); the coordinator does not.
    let proxy = DelayProxy::start(socket(fleet.s3.port), Slowness::Responses);
    let args = harness_worker_args("wh", "2");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fleet.spawn_program_with_env(
        "wh",
        env!("CARGO_BIN_EXE_cowork"),
        &[],
        &args,
        &[("COWORK_S3_ENDPOINT", format!("http://{}", proxy.address()))],
    );
    let sandbox = Sandbox::empty();
    let spawn_log = sandbox.path().join("spawns.log");
    for name in ["a", "b"] {
        sandbox.write(
            &format!("scenarios/{name}.yaml"),
            &held_scenario(&spawn_log),
        );
    }
    // Unit f0 is a.yaml, f1 is b.yaml; both run at once on the worker's two slots.
    let batch = fleet.submit_detached(sandbox.path(), &["scenarios", "--executor", "harness"]);
    wait_for(
        &fleet,
        "both harness runs spawned",
        Duration::from_secs(60),
        || spawns(&spawn_log).len() == 2,
    );
    let cwd_of = |unit: &str| {
        spawns(&spawn_log)
            .into_iter()
            .find(|cwd| cwd.to_string_lossy().contains(&format!("/{unit}/a")))
            .unwrap_or_else(|| panic!("no spawn of {unit}: {:?}", spawns(&spawn_log)))
    };
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    // The store refuses the worker for good while f0's run is under way.
    proxy.set_refusing(true);
    std::fs::write(cwd_of("f0").join("release"), "").expect("releasing f0");
    let ended = follower
        .until(&fleet, |event| {
            event.job_id.as_str().ends_with("/f0")
                && matches!(event.event, JobEventKind::Finished { .. })
        })
        .await;
    let JobEventKind::Finished {
        outcome,
        unstored_outcome,
        artifacts,
        exit_code,
        ..
    } = &ended.event
    else {
        unreachable!("waited for a finished event");
    };
    assert!(
        matches!(outcome, JobOutcome::Error { category, .. } if *category == ErrorCategory::InfraAfterSpend),
        "{outcome:?}\n{}",
        fleet.logs()
    );
    assert!(artifacts.is_empty());
    assert_eq!(*exit_code, Some(0), "the run's exit code is kept");
    assert!(
        matches!(unstored_outcome, Some(JobOutcome::Completed { .. })),
        "the run's own result is in the event: {unstored_outcome:?}"
    );
    // The store accepts the worker again; the other run stores normally and the batch ends.
    proxy.set_refusing(false);
    std::fs::write(cwd_of("f1").join("release"), "").expect("releasing f1");
    let out = fleet.watch(sandbox.path(), &batch);
    assert_eq!(out.code(), 2, "{}\n{}", out.context(), fleet.logs());
    let envelope = out.envelope();
    assert_eq!(
        envelope["error"]["category"], "infra_after_spend",
        "{envelope}"
    );
    // Each harness ran exactly once: the failed job was never handed back.
    assert_eq!(spawns(&spawn_log).len(), 2, "{:?}", spawns(&spawn_log));
    let events = fleet.events(&batch).await;
    assert!(
        !events
            .iter()
            .any(|event| matches!(event.event, JobEventKind::Failed { .. })),
        "{events:?}"
    );
}

/// `cowork worker` (sim) with the fleet's settings and `env` on top, run to its exit.
fn worker_exit(fleet: &Fleet, cwd: &Path, args: &[String], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new("timeout");
    fleet.env(&mut command);
    for (key, value) in env {
        command.env(key, value);
    }
    // 120 s only bounds a broken worker; a refused one exits as soon as it has checked.
    command
        .args(["120", env!("CARGO_BIN_EXE_cowork")])
        .args(args)
        .current_dir(cwd);
    let out = command.output().expect("running cowork worker");
    Output::new(format!("cowork {}", args.join(" ")), cwd.to_path_buf(), out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_cannot_write_to_the_bucket_exits_2_naming_it() {
    let fleet = Fleet::start();
    let sandbox = Sandbox::empty();
    let args = Fleet::worker_args("wbad", "container", "1");
    let out = worker_exit(
        &fleet,
        sandbox.path(),
        &args,
        &[("COWORK_S3_SECRET_ACCESS_KEY", "not-the-secret")],
    );
    out.expect_code(2)
        .expect_stderr(&format!("S3 bucket {BUCKET}"))
        .expect_stderr("secret key");
    // A missing bucket is refused the same way.
    let out = worker_exit(
        &fleet,
        sandbox.path(),
        &args,
        &[("COWORK_S3_BUCKET", "no-such-bucket")],
    );
    out.expect_code(2).expect_stderr("S3 bucket no-such-bucket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_worker_without_a_harness_exits_2_before_connecting() {
    let fleet = Fleet::start();
    let sandbox = Sandbox::empty();
    let args: Vec<String> = harness_worker_args("wnone", "1")
        .into_iter()
        .map(|arg| {
            if arg.ends_with("strict-harness") {
                "/nonexistent/cowork-harness".to_owned()
            } else {
                arg
            }
        })
        .collect();
    worker_exit(&fleet, sandbox.path(), &args, &[])
        .expect_code(2)
        .expect_stderr("--harness-bin /nonexistent/cowork-harness")
        .expect_stderr("cowork-harness not found (install it, set --harness-bin / COWORK_HARNESS_BIN, or use --executor sim)");
    assert!(
        !fleet
            .object_keys()
            .iter()
            .any(|key| key.starts_with("probes/")),
        "nothing was written: {:?}",
        fleet.object_keys()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_between_upload_and_ack_is_not_run_again() {
    let mut fleet = Fleet::start_with_env(&[("COWORK_ACK_WAIT", "2s")]);
    let args = harness_worker_args("w0", "1");
    let args_ref: Vec<&str> = args.iter().map(String::as_str).collect();
    fleet.spawn("w0", &args_ref);
    let sandbox = Sandbox::empty();
    let spawn_log = sandbox.path().join("spawns.log");
    sandbox.write("scenarios/a.yaml", &held_scenario(&spawn_log));
    let batch = fleet.submit_detached(
        sandbox.path(),
        &["scenarios/a.yaml", "--executor", "harness"],
    );
    wait_for(
        &fleet,
        "the harness run spawned",
        Duration::from_secs(60),
        || spawns(&spawn_log).len() == 1,
    );
    // NATS freezes, then the run ends: the worker stores the result and the job's record, and
    // cannot publish `finished` or ack. It dies there.
    fleet.nats.pause();
    std::fs::write(spawns(&spawn_log)[0].join("release"), "").expect("releasing the run");
    let record_key = format!("batches/{batch}/jobs/f0/outcome.json");
    let record_path = fleet.s3.data_dir().join(BUCKET).join(&record_key);
    wait_for(
        &fleet,
        "the job's record stored",
        Duration::from_secs(60),
        || record_path.exists(),
    );
    fleet.kill("w0");
    fleet.nats.resume();
    // The queue delivers the job again (it was never acked), to a new worker, which reports
    // the stored run. w0's own `finished` may reach the server too: it sat in the socket when
    // NATS froze, and may even decide the batch first.
    let args = harness_worker_args("w1", "1");
    let args_ref: Vec<&str> = args.iter().map(String::as_str).collect();
    fleet.spawn("w1", &args_ref);
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    let reported = follower
        .until(&fleet, |event| {
            event.worker_id == "w1" && matches!(event.event, JobEventKind::Finished { .. })
        })
        .await;
    assert!(reported.attempt >= 2, "{reported:?}");
    let out = fleet.watch(sandbox.path(), &batch);
    assert!(
        matches!(out.code(), 0 | 1),
        "{}\n{}",
        out.context(),
        fleet.logs()
    );
    assert_eq!(out.envelope()["results"].as_array().map(Vec::len), Some(1));

    assert_eq!(spawns(&spawn_log).len(), 1, "the harness ran once");
    let events = fleet.events(&batch).await;
    assert_each_ran_once(&runs_per_job(&events), 1);
    let record: JobRecord =
        serde_json::from_slice(&fleet.object(&record_key)).expect("a job record");
    assert_eq!((record.attempt, record.worker_id.as_str()), (1, "w0"));
    // Every report of the job is w0's stored run, never a new one.
    let reported: Vec<&JobEvent> = events
        .iter()
        .filter(|event| matches!(event.event, JobEventKind::Finished { .. }))
        .collect();
    for event in &reported {
        let JobEventKind::Finished { artifacts, .. } = &event.event else {
            unreachable!("filtered to finished events");
        };
        assert_eq!(
            artifacts, &record.artifacts,
            "every report is w0's stored run"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_cancel_starts_no_job_after_it_is_recorded() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w0", "container", "2");
    let args = [
        "examples/demo/scenarios/csv-report.yaml".to_owned(),
        "--repeat".to_owned(),
        "20".to_owned(),
        "--executor".to_owned(),
        "sim".to_owned(),
        "--sim-profile".to_owned(),
        profile_file(2000, 1.0).display().to_string(),
    ];
    let args_ref: Vec<&str> = args.iter().map(String::as_str).collect();
    // Two run; the rest wait, queued (the window is 64) or, once the coordinator knows the
    // worker's 2 slots, not admitted yet (the fair share queues no more than the free slots).
    let batch = fleet.submit_detached(&workspace_root(), &args_ref);
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    for _ in 0..2 {
        follower
            .until(&fleet, |event| matches!(event.event, JobEventKind::Started))
            .await;
    }
    let out = fleet.cowork(&workspace_root(), &["cancel", batch.as_str()]);
    assert_eq!(out.code(), 0, "{}", out.context());
    // The cancel is recorded once the command returns: what started by now is all that may.
    let started_at_cancel: BTreeSet<String> = runs_per_job(&fleet.events(&batch).await)
        .into_keys()
        .collect();
    let out = fleet.watch(&workspace_root(), &batch);
    assert_eq!(out.code(), 1, "a cancelled batch\n{}", out.context());
    out.expect_stderr("cancelled");

    let events = fleet.events(&batch).await;
    let started: BTreeSet<String> = runs_per_job(&events).into_keys().collect();
    assert_eq!(started, started_at_cancel, "jobs started after the cancel");
    assert!(started.len() < 20, "{started:?}");
    let not_run = events
        .iter()
        .filter(|event| {
            matches!(&event.event, JobEventKind::Finished { outcome: JobOutcome::Error { category, message }, .. }
                if *category == ErrorCategory::Cancelled && message.contains("not run"))
        })
        .count();
    // The coordinator takes the queued jobs back from the queue (withdrawn); a job a worker had
    // already pulled is settled by that worker without running. Together they cover every job
    // that did not start.
    let out = fleet.cowork(
        &workspace_root(),
        &["status", batch.as_str(), "--output-format", "json"],
    );
    let status: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
    let withdrawn = status["progress"]["withdrawn"].as_u64().unwrap_or(0) as usize;
    let admitted = status["progress"]["admitted"].as_u64().unwrap_or(0) as usize;
    let never_admitted = 20_usize.saturating_sub(admitted);
    assert!(
        not_run + withdrawn + never_admitted >= 20 - started.len(),
        "every job that did not start was withdrawn, settled without running or never \
         admitted: {not_run} settled, {withdrawn} withdrawn, {never_admitted} never admitted, \
         {} started\n{status}",
        started.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_for_an_unserved_tier_is_named_in_status() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w0", "container", "2");
    let sandbox = Sandbox::empty();
    crate::support::copy_dir(&crate::support::fixture("routing"), sandbox.path());
    let batch = fleet.submit_detached(
        sandbox.path(),
        &[
            "scenarios/in-microvm.yaml",
            "--repeat",
            "2",
            "--executor",
            "sim",
        ],
    );
    // Within the fleet view's refresh (a few seconds, under the heartbeat TTL).
    let mut status = Value::Null;
    wait_for(
        &fleet,
        "status naming the unserved tier",
        Duration::from_secs(60),
        || {
            let out = fleet.cowork(
                sandbox.path(),
                &["status", batch.as_str(), "--output-format", "json"],
            );
            status = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
            status["progress"]["unservedTiers"].is_array()
        },
    );
    assert_eq!(
        status["progress"]["unservedTiers"],
        serde_json::json!([{"tier": "microvm", "waiting": 2}]),
        "{status}"
    );
    let out = fleet.cowork(sandbox.path(), &["status", batch.as_str()]);
    assert!(
        out.stdout
            .contains("no live worker serves tier microvm: 2 jobs waiting"),
        "{}",
        out.context()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_of_another_protocol_is_refused_by_name() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w0", "container", "1");
    wait_for_workers(&fleet, &["w0"]);
    // An older worker's heartbeat, as it writes it into the workers bucket.
    let fabric = cowork_fabric::nats::connect(&NatsConfig::new(&fleet.nats.url()))
        .await
        .expect("connecting to nats");
    let mut old: cowork_schema::registry::WorkerInfo = serde_json::from_value(
        fleet
            .cowork(&workspace_root(), &["workers", "--output-format", "json"])
            .stdout
            .trim()
            .parse::<Value>()
            .expect("workers json")[0]
            .clone(),
    )
    .expect("a worker record");
    old.worker_id = "old-worker".to_owned();
    old.protocol = cowork_schema::job::PROTOCOL_VERSION - 1;
    fabric.workers.heartbeat(&old).await.expect("a heartbeat");

    let out = fleet.cowork(&workspace_root(), &["workers"]);
    assert_eq!(out.code(), 0, "{}", out.context());
    // The table lists every worker; why one is refused is a line of its own under the table.
    assert!(
        out.stdout
            .lines()
            .any(|line| line.starts_with("old-worker ")),
        "old-worker is not listed:\n{}",
        out.stdout
    );
    let line = out
        .stdout
        .lines()
        .find(|line| line.starts_with("old-worker") && line.contains("REFUSED"))
        .unwrap_or_else(|| out.fail("old-worker is not said to be refused"));
    assert!(
        line.contains(&format!("protocol {}", old.protocol)),
        "{line}"
    );
    assert!(
        out.stdout.lines().any(|line| line.starts_with("w0 ")),
        "w0 is not listed:\n{}",
        out.stdout
    );
    assert!(
        !out.stdout
            .lines()
            .any(|line| line.starts_with("w0") && line.contains("REFUSED")),
        "{}",
        out.stdout
    );
    out.expect_stderr("1 refused");
    let json = fleet.cowork(&workspace_root(), &["workers", "--output-format", "json"]);
    assert!(json.stdout.contains("\"refused\":"), "{}", json.context());
    wait_for(
        &fleet,
        "the coordinator's log naming the refused worker",
        Duration::from_secs(60),
        || fleet.log("coordinator").contains("old-worker"),
    );
    assert!(fleet.log("coordinator").contains("worker refused"));
}
