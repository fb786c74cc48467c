//! Cancel, resume and retry: `cancel --kill-running` leaves no harness
//! process behind, `cowork resume` runs only what has no result, and infrastructure failures
//! are retried only before spend (harness-behaviour.md#choice-c8), with attempts and retries
//! reported.

use cowork_schema::event::ErrorCategory;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use cowork_schema::event::{JobEventKind, JobOutcome};
use cowork_testkit::wait_until;
use serde_json::Value;

use crate::faults::{EventFollower, profile_file};
use crate::fleet::Fleet;
use crate::support::{Output, Sandbox, workspace_root};

/// Processes whose working directory lies under `dir` (the harness runs in its job's work dir,
/// and its children inherit it). Zombies and vanished processes have no cwd and are skipped.
fn processes_under(dir: &Path) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) else {
            continue;
        };
        if cwd.starts_with(dir) {
            let cmdline = std::fs::read(entry.path().join("cmdline"))
                .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
                .unwrap_or_default();
            found.push((pid, cmdline));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_kill_running_kills_every_harness_process_and_ends_the_batch_cancelled() {
    let mut fleet = Fleet::start();
    let harness = crate::support::strict_harness().display().to_string();
    let args: Vec<String> = Fleet::worker_args("wh", "container", "2")
        .into_iter()
        .map(|arg| {
            if arg == "sim" {
                "harness".to_owned()
            } else {
                arg
            }
        })
        .chain(["--harness-bin".to_owned(), harness])
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // The stand-in harness's `hang` behaviour starts a grandchild `sleep 1000` and never ends.
    fleet.spawn("wh", &args);
    let sandbox = Sandbox::empty();
    sandbox.write(
        "hang.yaml",
        "# strict-harness: hang\nsession: (inline)\nprompt: Say hello.\nassert:\n  - result: success\n",
    );
    let batch = fleet.submit_detached(
        sandbox.path(),
        &["hang.yaml", "--repeat", "4", "--executor", "harness"],
    );
    let work = fleet.dir.path().join("wh/work");
    // Both slots run a harness (and its grandchild): wait for their processes to appear.
    wait_until("two hanging harness runs started")
        .within(std::time::Duration::from_secs(60))
        .every(std::time::Duration::from_millis(50))
        .context(|| fleet.logs())
        .poll(|| {
            let processes = processes_under(&work);
            if processes.len() < 4 {
                Err(format!("{processes:?}"))
            } else {
                Ok(())
            }
        });

    let out = fleet.cowork(
        sandbox.path(),
        &["cancel", batch.as_str(), "--kill-running"],
    );
    assert_eq!(out.code(), 0, "{}", out.context());
    out.expect_stderr("kill its running jobs");
    let out = fleet.watch(sandbox.path(), &batch);
    assert_ne!(out.code(), 0, "{}", out.context());
    out.expect_stderr("cancelled");

    let left = processes_under(&work);
    assert!(
        left.is_empty(),
        "harness processes outlived --kill-running: {left:?}"
    );
    let status = fleet.cowork(
        sandbox.path(),
        &["status", batch.as_str(), "--output-format", "json"],
    );
    assert!(
        status.stdout.contains("\"cancelled\""),
        "{}",
        status.context()
    );
    // Every admitted job settled with a stored outcome: killed runs and skipped queued ones.
    let events = fleet.events(&batch).await;
    let killed = events
        .iter()
        .filter(|event| {
            matches!(&event.event, JobEventKind::Finished { outcome: JobOutcome::Error { category, .. }, .. } if *category == ErrorCategory::Cancelled)
        })
        .count();
    assert!(
        killed >= 2,
        "the two running jobs ended cancelled: {events:?}"
    );
}

/// `cowork run` of `args` from the workspace root with a fresh store: (exit code, rollup.json,
/// envelope).
fn embedded(args: &[String]) -> (i32, Vec<u8>, Value) {
    let store = tempfile::tempdir().expect("temp dir");
    let mut all = vec!["run".to_owned()];
    all.extend_from_slice(args);
    all.extend([
        "--store".to_owned(),
        store.path().display().to_string(),
        "--quiet".to_owned(),
        "--output-format".to_owned(),
        "json".to_owned(),
    ]);
    let out = Command::new(env!("CARGO_BIN_EXE_cowork"))
        .args(&all)
        .current_dir(workspace_root())
        .output()
        .expect("running cowork run");
    let out = Output::new(format!("cowork {}", all.join(" ")), workspace_root(), out);
    let batches: Vec<PathBuf> = std::fs::read_dir(store.path().join("batches"))
        .map(|dir| dir.map(|e| e.expect("entry").path()).collect())
        .unwrap_or_default();
    assert_eq!(batches.len(), 1, "{}", out.context());
    let rollup = std::fs::read(batches[0].join("rollup.json")).expect("rollup.json");
    (out.code(), rollup, out.envelope())
}

fn resume_args(profile: &Path) -> Vec<String> {
    [
        "examples/demo/scenarios/csv-report.yaml",
        "--repeat",
        "20",
        "--executor",
        "sim",
        "--seed",
        "77",
        "--sim-profile",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([profile.display().to_string()])
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_runs_only_the_jobs_without_a_result() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w0", "container", "2");
    fleet.spawn_worker("w1", "container", "2");
    let args = resume_args(&profile_file(1000, 1.0));
    let args_ref: Vec<&str> = args.iter().map(String::as_str).collect();
    let batch = fleet.submit_detached(&workspace_root(), &args_ref);
    let mut follower = EventFollower::new(&fleet.nats.url(), &batch).await;
    follower.until_finished(&fleet, 6).await;
    let out = fleet.cowork(
        &workspace_root(),
        &["cancel", batch.as_str(), "--kill-running"],
    );
    assert_eq!(out.code(), 0, "{}", out.context());
    let out = fleet.watch(&workspace_root(), &batch);
    assert_eq!(out.code(), 1, "a cancelled batch: {}", out.context());

    // What the first generation finished with a result.
    let first = fleet.events(&batch).await;
    let with_result: BTreeSet<String> = first
        .iter()
        .filter(|event| {
            matches!(
                &event.event,
                JobEventKind::Finished {
                    outcome: JobOutcome::Completed { .. },
                    ..
                }
            )
        })
        .map(|event| event.job_id.to_string())
        .collect();
    assert!(
        with_result.len() >= 6 && with_result.len() < 20,
        "{with_result:?}"
    );

    let out = fleet.cowork(
        &workspace_root(),
        &[
            "resume",
            batch.as_str(),
            "--watch",
            "--output-format",
            "json",
            "--quiet",
        ],
    );
    assert!(
        matches!(out.code(), 0 | 1),
        "{}\n{}",
        out.context(),
        fleet.logs()
    );
    let envelope = out.envelope();
    assert_eq!(envelope["results"].as_array().map(Vec::len), Some(20));
    assert_eq!(envelope["fleet"]["generation"], 1, "{}", envelope["fleet"]);

    // Executions: generation 1 started exactly the jobs without a result, each once.
    let all = fleet.events(&batch).await;
    let rerun: Vec<String> = all
        .iter()
        .filter(|event| event.generation == 1 && matches!(event.event, JobEventKind::Started))
        .map(|event| event.job_id.to_string())
        .collect();
    let rerun_set: BTreeSet<String> = rerun.iter().cloned().collect();
    assert_eq!(
        rerun.len(),
        rerun_set.len(),
        "each missing job ran once: {rerun:?}"
    );
    assert_eq!(
        rerun_set.len(),
        20 - with_result.len(),
        "only the jobs without a result ran again"
    );
    assert!(
        rerun_set.is_disjoint(&with_result),
        "a finished job ran again: {:?}",
        rerun_set.intersection(&with_result).collect::<Vec<_>>()
    );
    // And the result is the undisturbed batch's.
    let (_, reference, _) = embedded(&resume_args(&profile_file(1000, 0.0)));
    let rollup = fleet.object(&format!("batches/{batch}/rollup.json"));
    assert_eq!(
        String::from_utf8_lossy(&rollup),
        String::from_utf8_lossy(&reference)
    );
}

/// A sim profile with one fault rule over the demo's `skill-triggers` scenario.
fn fault_profile(sandbox: &Sandbox, rule: &str) -> PathBuf {
    sandbox.write(
        "profile.yaml",
        &format!("rules:\n  - {rule}\n  - pass_rate: 0.9\n"),
    );
    sandbox.path().join("profile.yaml")
}

fn retry_args(profile: &Path) -> Vec<String> {
    [
        "examples/demo/scenarios/skill-triggers.yaml",
        "--repeat",
        "3",
        "--executor",
        "sim",
        "--sim-profile",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([profile.display().to_string()])
    .collect()
}

#[test]
fn infra_failures_before_spend_are_retried_and_reported() {
    let sandbox = Sandbox::empty();
    let clean = fault_profile(&sandbox, "pass_rate: 0.9");
    let (clean_code, clean_rollup, _) = embedded(&retry_args(&clean));
    // The first two deliveries of every job fail to start; `cowork run` allows 3.
    let faulty = fault_profile(&sandbox, "infra_failures: 2");
    let (code, rollup, envelope) = embedded(&retry_args(&faulty));
    assert_eq!(code, clean_code);
    assert_eq!(
        String::from_utf8_lossy(&rollup),
        String::from_utf8_lossy(&clean_rollup),
        "retried runs give the same rollup"
    );
    let jobs = &envelope["fleet"]["jobs"];
    assert_eq!(jobs["retries"], 6, "two retries per job: {jobs}");
    assert_eq!(
        jobs["redelivered"], 3,
        "every job needed a third delivery: {jobs}"
    );
}

#[test]
fn infra_failures_past_max_deliver_end_the_job_in_error() {
    let sandbox = Sandbox::empty();
    let faulty = fault_profile(&sandbox, "infra_failures: 9");
    let (code, _, envelope) = embedded(&retry_args(&faulty));
    assert_eq!(code, 1, "{envelope}");
    assert_eq!(
        envelope["rollups"][0]["stoppedEarly"], "error",
        "{envelope}"
    );
    let retries = envelope["fleet"]["jobs"]["retries"]
        .as_u64()
        .expect("retries");
    assert!(
        retries >= 2,
        "r0 was retried up to max_deliver: {}",
        envelope["fleet"]
    );
}

#[test]
fn infra_failures_after_spend_are_reported_and_never_retried() {
    let sandbox = Sandbox::empty();
    let faulty = fault_profile(&sandbox, "infra_after_spend_rate: 1.0");
    let (code, _, envelope) = embedded(&retry_args(&faulty));
    assert_eq!(code, 1, "{envelope}");
    assert_eq!(
        envelope["rollups"][0]["stoppedEarly"], "error",
        "{envelope}"
    );
    assert_eq!(
        envelope["fleet"]["jobs"]["retries"], 0,
        "{}",
        envelope["fleet"]
    );
    assert_eq!(
        envelope["fleet"]["jobs"]["redelivered"], 0,
        "{}",
        envelope["fleet"]
    );
}
