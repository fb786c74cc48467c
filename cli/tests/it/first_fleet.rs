//! A new user's first fleet (two `sim` workers started from one directory, as
//! docs/operations.md has them): a batch no live worker can run is refused at submit, a tier no
//! live worker serves is warned about and said in a pipe, `--unserved-timeout` gives up naming
//! the tier, the workers share their default cache dir without a retry, and a worker killed
//! with `kill -9` is listed as lost.

use std::path::Path;
use std::time::Duration;

use cowork_testkit::wait_until;
use serde_json::Value;

use crate::fleet::Fleet;
use crate::support::{Sandbox, copy_dir, fixture, workspace_root};

/// Polls `cowork workers` until `done` holds for its output, with a deadline (the heartbeat
/// and its expiry are the workers' own pace, not the test's).
pub(crate) fn workers_until(
    fleet: &Fleet,
    cwd: &Path,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> String {
    wait_until(format!("`cowork workers` shows {what}"))
        .within(Duration::from_secs(60))
        .every(Duration::from_millis(100))
        .context(|| fleet.logs())
        .poll(|| {
            let out = fleet.cowork(cwd, &["workers"]);
            assert_eq!(out.code(), 0, "{}\n{}", out.context(), fleet.logs());
            let text = format!("{}{}", out.stdout, out.stderr);
            if done(&text) {
                Ok(text)
            } else {
                Err(format!("\n{text}"))
            }
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_fleet_refuses_what_it_cannot_run_and_says_why_it_waits() {
    let mut fleet = Fleet::start();
    // Default cache and work dirs: both workers use `.cowork-worker/` of the fleet's dir.
    for name in ["w1", "w2"] {
        fleet.spawn(
            name,
            &[
                "worker",
                "--executor",
                "sim",
                "--tiers",
                "container,replay",
                "--slots",
                "2",
                "--worker-id",
                name,
            ],
        );
    }
    let root = workspace_root();
    workers_until(&fleet, &root, "both workers", |text| {
        text.contains("2 worker(s)")
    });

    // No token set: the error says none was sent, not that one was refused.
    let mut no_token = std::process::Command::new(env!("CARGO_BIN_EXE_cowork"));
    fleet.env(&mut no_token);
    let output = no_token
        .args(["workers", "--coordinator", &fleet.coordinator_url()])
        .env_remove("COWORK_API_TOKEN")
        .current_dir(&root)
        .output()
        .expect("running cowork workers");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.code() == Some(2)
            && stderr.contains("the coordinator asks for an API token and none was sent")
            && !stderr.contains("refused the API token"),
        "exit {:?}: {stderr}",
        output.status.code()
    );

    // Item 4: the demo without --executor sim is a harness batch; sim workers answer each of
    // its jobs with an error. Refused before anything is sent.
    let refused = fleet.cowork(
        &root,
        &[
            "submit",
            "examples/demo/scenarios/csv-report.yaml",
            "--matrix",
            "examples/demo/matrix.yaml",
            "--repeat",
            "5",
            "--watch",
        ],
    );
    refused
        .expect_code(2)
        .expect_stderr("refusing to submit: no live worker runs harness batches")
        .expect_stderr("--executor sim");
    let listed = fleet.cowork(&root, &["batches", "--format", "json"]);
    listed.expect_code(0);
    assert!(
        !listed.stdout.contains("batchId"),
        "a refused batch was submitted: {}",
        listed.stdout
    );

    // Item 6: the demo on the two workers sharing one cache dir: no retry, no redelivery.
    let out = fleet.submit(
        &root,
        &[
            "examples/demo/scenarios/csv-report.yaml",
            "--matrix",
            "examples/demo/matrix.yaml",
            "--repeat",
            "5",
            "--executor",
            "sim",
            "--sim-profile",
            "examples/demo/sim-profile.yaml",
        ],
    );
    let envelope = out.envelope();
    let jobs: &Value = &envelope["fleet"]["jobs"];
    assert_eq!(
        (
            jobs["finished"].as_u64(),
            jobs["retries"].as_u64(),
            jobs["redelivered"].as_u64()
        ),
        (Some(20), Some(0), Some(0)),
        "{jobs}\n{}",
        fleet.logs()
    );
    assert!(
        !fleet.logs().contains("Directory not empty"),
        "{}",
        fleet.logs()
    );

    // Item 5: a tier no live worker serves is warned about at submit and said as a line of
    // its own in a pipe; --unserved-timeout gives up naming it, the batch keeps running.
    let sandbox = Sandbox::empty();
    copy_dir(&fixture("routing"), sandbox.path());
    let waited = fleet.cowork(
        sandbox.path(),
        &[
            "submit",
            "scenarios",
            "--repeat",
            "2",
            "--executor",
            "sim",
            "--watch",
            "--unserved-timeout",
            "2s",
        ],
    );
    waited
        .expect_code(2)
        .expect_stderr("warning: no live worker serves tier microvm")
        .expect_stderr("waiting: no live worker serves tier microvm")
        .expect_stderr("had no live worker for 2s (--unserved-timeout");

    // Item 7: a worker killed with kill -9 is listed as lost once its heartbeat is late.
    fleet.kill("w2");
    let text = workers_until(&fleet, &root, "w2 as lost", |text| {
        text.lines()
            .any(|line| line.starts_with("w2 ") && line.contains("LOST: no heartbeat for"))
    });
    assert!(
        text.lines()
            .filter(|line| line.starts_with("w1 "))
            .all(|line| !line.contains("LOST")),
        "{text}"
    );
    assert!(text.contains("1 lost (heartbeat late"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_names_a_worker_killed_mid_batch_and_what_waits_on_it() {
    let fleet = crate::faults::fault_fleet(&[], &[]);
    let root = workspace_root();
    // Runs of about 20 s: the batch is still running when the kill is noticed.
    let batch = crate::faults::submit_of(&fleet, 10, 20_000);
    let mut watch = std::process::Command::new(env!("CARGO_BIN_EXE_cowork"));
    fleet.env(&mut watch);
    let mut watch = watch
        .args([
            "watch",
            batch.as_str(),
            "--coordinator",
            &fleet.coordinator_url(),
        ])
        .current_dir(&root)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting cowork watch");
    let stderr = watch.stderr.take().expect("piped stderr");
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    // Reaped when the watch is killed below: its stderr then ends.
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if lines_tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut fleet = fleet;
    workers_until(&fleet, &root, "w0 running jobs", |text| {
        text.lines().any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.first() == Some(&"w0") && fields.get(3).is_some_and(|busy| *busy != "0")
        })
    });
    fleet.kill("w0");
    let mut seen = Vec::new();
    let named = wait_until("the watch names the lost worker")
        .within(Duration::from_secs(60))
        .try_receive(&lines, |line| {
            if line.contains("worker w0 lost: no heartbeat since") {
                Some(line)
            } else {
                seen.push(line);
                None
            }
        });
    let named = named.unwrap_or_else(|timed_out| {
        let _ = watch.kill();
        panic!("{timed_out}\n{}\n{}", seen.join("\n"), fleet.logs());
    });
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(
        named.contains("it was running wait for redelivery"),
        "{named}"
    );
}
