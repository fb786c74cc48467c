//! The capability probe of `cowork worker`: a worker serves only the tiers its
//! host can run, advertises only those, and never starts a job of a tier it refused. These tests
//! run on a Linux host, where the harness executor refuses `microvm` (Lima's `limactl` on macOS),
//! and need the Docker engine to answer, since the harness executor's `container` tier needs it.

use std::path::Path;
use std::process::Command;

use cowork_fabric::nats::NatsConfig;
use cowork_schema::event::JobEventKind;
use cowork_testkit::wait_until;
use serde_json::Value;

use crate::faults::EventFollower;
use crate::fleet::Fleet;
use crate::support::{Output, Sandbox, copy_dir, fixture, strict_harness};

/// The arguments of a harness-executor worker named `name` serving `tiers`.
fn harness_worker_args(name: &str, tiers: &str) -> Vec<String> {
    let harness = strict_harness().display().to_string();
    Fleet::worker_args(name, tiers, "2")
        .into_iter()
        .map(|arg| {
            if arg == "sim" {
                "harness".to_owned()
            } else {
                arg
            }
        })
        .chain(["--harness-bin".to_owned(), harness])
        .collect()
}

/// `cowork workers --output-format json`: the worker `name`'s record, once it has sent its
/// first heartbeat.
fn worker_record(fleet: &Fleet, cwd: &Path, name: &str) -> Value {
    // The heartbeat is the worker's first act after connecting; poll for it with a deadline.
    wait_until(format!("worker {name} is listed"))
        .within(std::time::Duration::from_secs(60))
        .every(std::time::Duration::from_millis(50))
        .context(|| fleet.logs())
        .poll(|| {
            let out = fleet.cowork(cwd, &["workers", "--output-format", "json"]);
            assert_eq!(out.code(), 0, "{}\n{}", out.context(), fleet.logs());
            let workers: Value = serde_json::from_str(out.stdout.trim())
                .unwrap_or_else(|e| out.fail(&format!("workers is not JSON: {e}")));
            let found = workers
                .as_array()
                .and_then(|all| all.iter().find(|worker| worker["workerId"] == name));
            found.cloned().ok_or(workers)
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_without_limactl_never_starts_a_microvm_job() {
    let mut fleet = Fleet::start();
    let args = harness_worker_args("wh", "container,microvm");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fleet.spawn("wh", &args);
    let sandbox = Sandbox::empty();
    copy_dir(&fixture("capabilities"), sandbox.path());
    // Unit f0 is a-microvm.yaml and f1 is b-container.yaml (sorted listing); admission
    // publishes in index order, so the microvm job is queued before the container job.
    let batch = fleet.submit_detached(sandbox.path(), &["scenarios", "--executor", "harness"]);
    // Job ids are `<batch>/f<unit>` without --repeat.
    let is_microvm_job = |job_id: &str| job_id.split('/').nth(1) == Some("f0");
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    let container_finished = follower
        .until(&fleet, |event| {
            matches!(event.event, JobEventKind::Finished { .. })
                && !is_microvm_job(event.job_id.as_str())
        })
        .await;
    assert_eq!(container_finished.worker_id, "wh", "{}", fleet.logs());

    // The worker advertises only the tier it serves, and says why it dropped the other.
    let record = worker_record(&fleet, sandbox.path(), "wh");
    assert_eq!(
        record["tiers"],
        serde_json::json!(["container"]),
        "{record}"
    );
    assert_eq!(record["executor"], "harness", "{record}");
    assert_eq!(record["os"], std::env::consts::OS, "{record}");
    let log = fleet.log("wh");
    assert!(
        log.contains("tier refused") && log.contains("limactl"),
        "the worker's log names the refused tier and limactl:\n{log}"
    );

    // The microvm job has no event at all, and sits undelivered in its tier's consumer.
    let events = fleet.events(&batch).await;
    let microvm_events: Vec<_> = events
        .iter()
        .filter(|event| is_microvm_job(event.job_id.as_str()))
        .collect();
    assert!(
        microvm_events.is_empty(),
        "the microvm job has events: {microvm_events:?}"
    );
    let fabric = cowork_fabric::nats::connect(&NatsConfig::new(&fleet.nats.url()))
        .await
        .expect("connecting to nats");
    let jobs = fabric
        .jetstream
        .get_stream("COWORK_JOBS")
        .await
        .expect("the jobs stream");
    let microvm = jobs
        .consumer_info("cowork-microvm")
        .await
        .expect("the microvm consumer")
        .clone();
    assert_eq!(
        (
            microvm.num_pending,
            microvm.num_ack_pending,
            microvm.delivered.consumer_sequence
        ),
        (1, 0, 0),
        "the microvm job is queued and was never delivered: {microvm:?}"
    );

    // A worker whose operator vouches for microvm takes it. (A `sim` worker would take it too,
    // but it answers a harness batch's job with "carries no sim spec", which fails the batch.)
    let mut args = harness_worker_args("wa", "microvm");
    args.extend(["--assume-tiers".to_owned(), "microvm".to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fleet.spawn("wa", &args);
    let microvm_finished = follower
        .until(&fleet, |event| {
            matches!(event.event, JobEventKind::Finished { .. })
                && is_microvm_job(event.job_id.as_str())
        })
        .await;
    assert_eq!(microvm_finished.worker_id, "wa", "{}", fleet.logs());
    let out = fleet.watch(sandbox.path(), &batch);
    let envelope = out.envelope();
    assert_eq!(out.code(), 0, "{}\n{}", out.context(), fleet.logs());
    assert_eq!(
        envelope["results"].as_array().map(Vec::len),
        Some(2),
        "{}",
        out.context()
    );
    assert_eq!(
        (
            &envelope["fleet"]["workers"]["wh"]["jobs"],
            &envelope["fleet"]["workers"]["wa"]["jobs"]
        ),
        (&serde_json::json!(1), &serde_json::json!(1)),
        "{}",
        out.context()
    );
    let events = fleet.events(&batch).await;
    let microvm_workers: Vec<&str> = events
        .iter()
        .filter(|event| is_microvm_job(event.job_id.as_str()))
        .map(|event| event.worker_id.as_str())
        .collect();
    assert!(
        !microvm_workers.is_empty() && microvm_workers.iter().all(|worker| *worker == "wa"),
        "every event of the microvm job comes from wa: {microvm_workers:?}"
    );
}

/// `cowork worker <args>` with the fleet's settings pointing nowhere: a worker that passes its
/// probe would retry its connection to NATS forever, so `timeout` ends it with 124 instead of
/// the 2 the tests expect. `path_prefix` is put in front of PATH.
fn start_worker_alone(sandbox: &Sandbox, args: &[String], path_prefix: Option<&Path>) -> Output {
    let mut command = Command::new("timeout");
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("COWORK_") {
            command.env_remove(key);
        }
    }
    if let Some(prefix) = path_prefix {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![prefix.to_path_buf()];
        dirs.extend(std::env::split_paths(&path));
        command.env("PATH", std::env::join_paths(dirs).expect("a valid PATH"));
    }
    // 120 s only bounds a broken worker; a passing run exits as soon as it has probed.
    command
        .args(["120", env!("CARGO_BIN_EXE_cowork")])
        .args(args)
        .env("COWORK_NATS_URL", "nats://127.0.0.1:9")
        .env("COWORK_S3_ENDPOINT", "http://127.0.0.1:9")
        .env("COWORK_S3_BUCKET", "cowork-nowhere")
        .env("COWORK_S3_ACCESS_KEY_ID", "nobody")
        .env("COWORK_S3_SECRET_ACCESS_KEY", "nothing")
        .env("COWORK_LOG", "warn")
        .current_dir(sandbox.path());
    let out = command.output().expect("running timeout cowork worker");
    Output::new(
        format!("timeout 120 cowork {}", args.join(" ")),
        sandbox.path().to_path_buf(),
        out,
    )
}

#[test]
fn a_harness_worker_with_only_microvm_on_linux_exits_2_naming_limactl() {
    let sandbox = Sandbox::empty();
    let out = start_worker_alone(&sandbox, &harness_worker_args("wm", "microvm"), None);
    out.expect_code(2)
        .expect_stderr("--tiers microvm: microvm needs limactl on a macOS host")
        .expect_stderr("no tier left to serve");
    if std::env::consts::OS != "macos" {
        out.expect_stderr(&format!("this host runs {}", std::env::consts::OS));
    }
}

/// A directory holding a stand-in `limactl` that answers `--version`, to put in front of PATH.
fn fake_lima(sandbox: &Sandbox) -> std::path::PathBuf {
    let bin = sandbox.path().join("bin");
    std::fs::create_dir_all(&bin).expect("creating bin/");
    let limactl = bin.join("limactl");
    std::fs::write(&limactl, "#!/bin/sh\necho 'limactl version 9.9.9'\n").expect("fake limactl");
    let mut permissions = std::fs::metadata(&limactl)
        .expect("fake limactl metadata")
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&limactl, permissions).expect("making limactl executable");
    bin
}

#[test]
fn a_found_limactl_is_probed_and_the_os_still_decides() {
    let sandbox = Sandbox::empty();
    let bin = fake_lima(&sandbox);
    let out = start_worker_alone(&sandbox, &harness_worker_args("wm", "microvm"), Some(&bin));
    out.expect_code(2)
        .expect_stderr("limactl limactl version 9.9.9")
        .expect_stderr("not macOS")
        .expect_stderr("--allow-microvm-off-macos");
    if out.stderr.contains("is not on PATH") {
        out.fail("the fake limactl on PATH was not found");
    }
}

#[test]
fn assume_tiers_must_name_requested_tiers() {
    let sandbox = Sandbox::empty();
    let mut args = harness_worker_args("wm", "container");
    args.extend(["--assume-tiers".to_owned(), "microvm".to_owned()]);
    start_worker_alone(&sandbox, &args, None)
        .expect_code(2)
        .expect_stderr("--assume-tiers: microvm is not one of --tiers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_microvm_off_macos_serves_microvm_where_limactl_answers() {
    let mut fleet = Fleet::start();
    let sandbox = Sandbox::empty();
    let bin = fake_lima(&sandbox);
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![bin];
    dirs.extend(std::env::split_paths(&path));
    let path = std::env::join_paths(dirs)
        .expect("a valid PATH")
        .to_string_lossy()
        .into_owned();
    // limactl answers and the OS condition is lifted: microvm is served next to replay.
    let mut args = harness_worker_args("wl", "microvm,replay");
    args.push("--allow-microvm-off-macos".to_owned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fleet.spawn_program_with_env(
        "wl",
        env!("CARGO_BIN_EXE_cowork"),
        &[],
        &args,
        &[("PATH", path)],
    );
    let lima = worker_record(&fleet, sandbox.path(), "wl");
    assert_eq!(
        lima["tiers"],
        serde_json::json!(["microvm", "replay"]),
        "{lima}"
    );
    assert!(
        fleet.log("wl").contains("limactl limactl version 9.9.9"),
        "the probe found the fake limactl:\n{}",
        fleet.log("wl")
    );
}
