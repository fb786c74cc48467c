//! The stall watchdog on a real fleet: a batch with jobs outstanding and none started or
//! finished for its `--stall-after` is marked stalled with the reason in words (`cowork status`,
//! its JSON, `/metrics`) and told to the batch's hooks; `--on-stall cancel` cancels it with the
//! reason recorded.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use cowork_schema::BatchId;
use cowork_testkit::wait_until;
use serde_json::Value;

use crate::fleet::Fleet;
use crate::support::{Sandbox, copy_dir, fixture};

/// Generous: the machine is shared, a dead worker is named only once its heartbeat is late
/// (15 s by default), and the watchdog looks every 5 s. Only turns a hang into a failure.
const PATIENCE: Duration = Duration::from_secs(120);

/// `cowork submit <args…>` (detached) once a live worker lets the fleet take the batch: the
/// first submits can find no worker registered yet.
fn submit_when_a_worker_is_live(fleet: &Fleet, cwd: &Path, args: &[&str]) -> BatchId {
    let mut all = vec!["submit"];
    all.extend_from_slice(args);
    wait_until("a submit accepted once a worker is live")
        .within(PATIENCE)
        .every(Duration::from_millis(200))
        .context(|| fleet.logs())
        .poll(|| {
            let out = fleet.cowork(cwd, &all);
            if out.code() == 0 {
                BatchId::new(out.stdout.trim()).map_err(|e| format!("{e}: {}", out.context()))
            } else {
                Err(out.context())
            }
        })
}

/// `cowork status <batch> --output-format json`.
fn status(fleet: &Fleet, cwd: &Path, batch: &BatchId) -> Value {
    let out = fleet.cowork(cwd, &["status", batch.as_str(), "--output-format", "json"]);
    out.expect_code(0);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| out.fail(&format!("status JSON: {e}")))
}

/// Polls the batch's status until `found` finds something in it.
fn wait_status<T>(
    fleet: &Fleet,
    cwd: &Path,
    batch: &BatchId,
    what: &str,
    found: impl Fn(&Value) -> Option<T>,
) -> T {
    let mut last = Value::Null;
    wait_until(what.to_owned())
        .within(PATIENCE)
        .every(Duration::from_millis(250))
        .try_poll(|| {
            last = status(fleet, cwd, batch);
            found(&last)
        })
        .unwrap_or_else(|timed_out| panic!("{timed_out}\nlast status: {last:#}\n{}", fleet.logs()))
}

/// The stall's message in a status, when the batch is stalled.
fn stall_message(status: &Value) -> Option<String> {
    status["progress"]["stall"]["message"]
        .as_str()
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_for_a_tier_no_worker_serves_is_stalled_and_says_so() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w1", "container", "1");
    let sandbox = Sandbox::empty();
    copy_dir(&fixture("routing"), sandbox.path());
    let batch = submit_when_a_worker_is_live(
        &fleet,
        sandbox.path(),
        &[
            "scenarios/in-microvm.yaml",
            "--executor",
            "sim",
            "--stall-after",
            "2s",
        ],
    );
    let message = wait_status(&fleet, sandbox.path(), &batch, "the batch stalled", |s| {
        stall_message(s)
    });
    assert_eq!(
        message,
        "no worker serves tier microvm: no live worker of that tier",
        "{}",
        fleet.logs()
    );
    let status = status(&fleet, sandbox.path(), &batch);
    assert_eq!(status["record"]["state"], "running", "{status:#}");
    assert_eq!(
        status["progress"]["stall"]["reason"],
        serde_json::json!({"kind": "noWorker", "tiers": ["microvm"]}),
        "{status:#}"
    );
    assert_eq!(status["progress"]["stall"]["stallAfterMs"], 2000);
    assert!(status["progress"]["stall"].get("cancelled").is_none());
    // Said to people too, and counted.
    let human = fleet.cowork(sandbox.path(), &["status", batch.as_str()]);
    human.expect_code(0);
    assert!(
        human.stdout.contains(
            "stalled  no worker serves tier microvm: no live worker of that tier — no job started or finished for "
        ),
        "{}",
        human.context()
    );
    let metrics = fleet.api_get("/metrics");
    assert!(
        metrics
            .lines()
            .any(|line| line == "cowork_batches_stalled 1"),
        "{metrics}"
    );
    // `cowork watch` says it on a line of its own.
    let mut watch = fleet
        .watch_command(sandbox.path(), &batch)
        .spawn()
        .expect("starting cowork watch");
    let stderr = watch.stderr.take().expect("stderr is piped");
    let (sender, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    let mut said = Vec::new();
    let line = wait_until("cowork watch says the batch is stalled")
        .within(PATIENCE)
        .try_receive(&lines, |line| {
            said.push(line.clone());
            line.starts_with("stalled: no worker serves tier microvm")
                .then_some(line)
        });
    let _ = watch.kill();
    let _ = watch.wait();
    let line = line.unwrap_or_else(|timed_out| panic!("{timed_out}\n{}", said.join("\n")));
    assert!(line.contains("(stall after 2s)"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_only_worker_dies_is_stalled_for_want_of_a_live_worker() {
    let hook = cowork_testkit::HookServer::start(&[]).await;
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w1", "container", "1");
    let sandbox = Sandbox::empty();
    copy_dir(&fixture("routing"), sandbox.path());
    // Runs that take ten minutes: the batch stays mid-run until its worker is killed.
    sandbox.write(
        "slow.yaml",
        "rules:\n  - duration_ms: 600000\n    time_scale: 1.0\n",
    );
    let batch = submit_when_a_worker_is_live(
        &fleet,
        sandbox.path(),
        &[
            "scenarios/in-container.yaml",
            "--repeat",
            "2",
            "--executor",
            "sim",
            "--sim-profile",
            "slow.yaml",
            "--stall-after",
            "2s",
            "--notify",
            &hook.url,
        ],
    );
    wait_status(&fleet, sandbox.path(), &batch, "a job running", |s| {
        (s["progress"]["running"].as_u64() >= Some(1)).then_some(())
    });
    fleet.kill("w1");
    let message = wait_status(
        &fleet,
        sandbox.path(),
        &batch,
        "the batch stalled for want of a live worker",
        |s| stall_message(s).filter(|message| message.contains("no live worker")),
    );
    assert_eq!(
        message,
        "no worker serves tier container: no live worker of that tier"
    );
    // The batch's hook is told, with the same reason (a stall seen before the worker's
    // heartbeat was late had no cause in sight: a new reason is a new event).
    let stalled = wait_until("the hook told of the stall")
        .within(PATIENCE)
        .poll_async(async || {
            hook.received()
                .iter()
                .map(|event| event.json())
                .find(|body| body["kind"] == "stalled" && body["reason"] == message.as_str())
        })
        .await;
    assert_eq!(stalled["batchId"], batch.as_str(), "{stalled}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_stall_cancel_cancels_the_batch_with_the_reason_recorded() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w1", "container", "1");
    let sandbox = Sandbox::empty();
    copy_dir(&fixture("routing"), sandbox.path());
    let batch = submit_when_a_worker_is_live(
        &fleet,
        sandbox.path(),
        &[
            "scenarios/in-microvm.yaml",
            "--executor",
            "sim",
            "--stall-after",
            "2s",
            "--on-stall",
            "cancel",
        ],
    );
    let status = wait_status(&fleet, sandbox.path(), &batch, "the batch cancelled", |s| {
        (s["record"]["state"] == "cancelled").then(|| s.clone())
    });
    let changes = status["record"]["controls"]["changes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let change = changes
        .iter()
        .find(|change| change["control"] == "on-stall")
        .unwrap_or_else(|| panic!("no on-stall change recorded: {status:#}"));
    assert_eq!(change["by"], "stall watchdog", "{status:#}");
    assert_eq!(
        change["new"], "cancelled: no worker serves tier microvm: no live worker of that tier",
        "{status:#}"
    );
    assert_eq!(status["progress"]["stall"]["cancelled"], true, "{status:#}");
}

#[test]
fn stall_flags_are_checked_before_anything_is_sent() {
    let sandbox = Sandbox::empty();
    copy_dir(&fixture("routing"), sandbox.path());
    for (flag, value, expected) in [
        ("--stall-after", "0s", "--stall-after: must be above 0"),
        ("--stall-after", "soon", "--stall-after: "),
        (
            "--on-stall",
            "retry",
            "--on-stall: must be cancel or none, got \"retry\"",
        ),
    ] {
        let out = crate::support::cowork(
            sandbox.path(),
            &[
                "submit",
                "scenarios/in-microvm.yaml",
                "--executor",
                "sim",
                flag,
                value,
                "--coordinator",
                "http://127.0.0.1:9",
            ],
        );
        out.expect_code(2).expect_stderr(expected);
    }
}

#[test]
fn cowork_run_says_when_its_batch_stalls() {
    let sandbox = Sandbox::empty();
    copy_dir(&fixture("routing"), sandbox.path());
    // One run of ten seconds against a threshold of one: the batch stalls while it runs.
    sandbox.write(
        "slow.yaml",
        "rules:\n  - duration_ms: 10000\n    time_scale: 1.0\n    pass_rate: 1.0\n",
    );
    let out = sandbox.run_batch(&[
        "scenarios/in-container.yaml",
        "--executor",
        "sim",
        "--sim-profile",
        "slow.yaml",
        "--stall-after",
        "1s",
    ]);
    out.expect_code(0)
        .expect_stderr("stalled: no cause the fleet can see — no job started or finished for ");
}
