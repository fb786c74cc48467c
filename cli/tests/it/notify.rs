//! Notifications end to end: `cowork run --notify` tells its hook the batch was decided (and a
//! budget stop), with a signature that verifies; an eval tells its A/B verdict; a fleet batch
//! submitted with `--notify` is told by the coordinator, and a hook that refuses shows in
//! `cowork status`; a worker killed mid-job is told to the coordinator's own hooks;
//! `cowork notify-test` exits by the hook's answer. The secret is in no log line of any
//! process.

use std::time::Duration;

use cowork_core::notify::hmac_sha256;
use cowork_testkit::{HookServer, wait_until};

use crate::fleet::Fleet;
use crate::support::{Output, Sandbox, copy_dir, cowork, fixture, workspace_root};

const SECRET: &str = "whsec-cli-8d2e41c7";
/// Only turns a hang into a failure.
const PATIENCE: Duration = Duration::from_secs(60);

/// Checks a `t=…,v1=…` signature against the body, recomputed with the secret.
fn check_signature(signature: Option<&str>, body: &[u8]) {
    let signature = signature.expect("a Cowork-Signature header");
    let (t, v1) = signature
        .strip_prefix("t=")
        .and_then(|rest| rest.split_once(",v1="))
        .unwrap_or_else(|| panic!("not t=…,v1=…: {signature}"));
    let mut signed = format!("{t}.").into_bytes();
    signed.extend_from_slice(body);
    let expected: String = hmac_sha256(SECRET.as_bytes(), &signed)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    assert_eq!(v1, expected, "the signature verifies");
}

fn assert_no_secret(out: &Output) {
    assert!(
        !out.stderr.contains(SECRET) && !out.stdout.contains(SECRET),
        "the secret leaked:\n{}",
        out.context()
    );
}

/// Runs `cowork <args>` off the async runtime, so the hook keeps answering meanwhile.
async fn cowork_blocking(cwd: std::path::PathBuf, args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
    tokio::task::spawn_blocking(move || cowork(&cwd, &args))
        .await
        .expect("the cowork process ran")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_tells_its_hook_it_was_decided_signed_and_logs_no_secret() {
    let hook = HookServer::start(&[]).await;
    let sandbox = Sandbox::with_project();
    sandbox.write("notify-secret", &format!("{SECRET}\n"));
    let store = sandbox.store();
    let out = cowork_blocking(
        sandbox.path().to_path_buf(),
        &[
            "--log",
            "trace",
            "run",
            "scenarios/report.yaml",
            "--repeat",
            "2",
            "--executor",
            "sim",
            "--notify",
            &hook.url,
            "--notify-secret-file",
            "notify-secret",
            "--store",
            &store.display().to_string(),
        ],
    )
    .await;
    assert!(matches!(out.code(), 0 | 1), "{}", out.context());
    assert_no_secret(&out);
    // The run waits for its deliveries before it exits: the event is there already.
    let received = hook.received();
    assert_eq!(received.len(), 1, "{received:?}\n{}", out.context());
    let event = &received[0];
    check_signature(event.signature.as_deref(), &event.body);
    let body = event.json();
    assert_eq!(body["kind"], "decided", "{body}");
    assert_eq!(event.event_id.as_deref(), body["id"].as_str());
    assert_eq!(body["unitsTotal"], 1, "{body}");
    assert_eq!(body["quarantined"], serde_json::json!([]), "{body}");
    let verdict = body["verdict"].as_str().expect("a verdict");
    assert!(verdict == "PASS" || verdict == "FAIL", "{body}");
    let text = body["text"].as_str().expect("a text");
    assert!(
        text.starts_with(&format!(
            "cowork: batch {} {verdict} — ",
            body["batchId"].as_str().unwrap_or_default()
        )),
        "{text}"
    );
    assert!(text.contains("cowork report "), "{text}");
}

/// The decided event names the units a quarantine in force covered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decided_event_names_the_quarantined_units() {
    let hook = HookServer::start(&[]).await;
    let sandbox = Sandbox::with_project();
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_secs() as i64)
        .unwrap_or(0);
    let expires = cowork_schema::quarantine::Date(
        cowork_schema::quarantine::Date::from_unix_seconds(seconds).0 + 5,
    );
    sandbox.write(
        "quarantine.yaml",
        &format!(
            "quarantine:\n  - scenario: report\n    owner: alice@example.com\n    reason: flaky\n    expires: {expires}\n"
        ),
    );
    let store = sandbox.store();
    let out = cowork_blocking(
        sandbox.path().to_path_buf(),
        &[
            "run",
            "scenarios/report.yaml",
            "--executor",
            "sim",
            "--quarantine",
            "quarantine.yaml",
            "--notify",
            &hook.url,
            "--store",
            &store.display().to_string(),
        ],
    )
    .await;
    assert!(matches!(out.code(), 0 | 1), "{}", out.context());
    let received = hook.received();
    assert_eq!(received.len(), 1, "{received:?}\n{}", out.context());
    let body = received[0].json();
    assert_eq!(body["kind"], "decided", "{body}");
    assert_eq!(body["quarantined"], serde_json::json!(["report"]), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_reaches_its_batch_budget_tells_the_stop_and_the_decision() {
    let hook = HookServer::start(&[]).await;
    let sandbox = Sandbox::with_project();
    sandbox.write("notify-secret", SECRET);
    sandbox.write(
        "priced.yaml",
        "rules:\n  - pass_rate: 1\n    cost_usd: 0.05\n",
    );
    let store = sandbox.store();
    let out = cowork_blocking(
        sandbox.path().to_path_buf(),
        &[
            "run",
            "scenarios/report.yaml",
            "--repeat",
            "40",
            "--executor",
            "sim",
            "--sim-profile",
            "priced.yaml",
            "--batch-budget-usd",
            "0.2",
            "--allow-unpriced",
            "--slots",
            "1",
            "--notify",
            &hook.url,
            "--notify-secret-file",
            "notify-secret",
            "--store",
            &store.display().to_string(),
        ],
    )
    .await;
    assert!(matches!(out.code(), 0 | 1), "{}", out.context());
    let received = hook.received();
    // Two deliveries run apart: their order is not promised.
    let mut kinds: Vec<String> = received
        .iter()
        .map(|request| {
            request.json()["kind"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    kinds.sort();
    assert_eq!(kinds, ["budget_stop", "decided"], "{}", out.context());
    let stop = received
        .iter()
        .map(|request| request.json())
        .find(|body| body["kind"] == "budget_stop")
        .expect("a budget stop");
    assert_eq!(stop["budgetUsd"], 0.2, "{stop}");
    assert!(
        stop["text"]
            .as_str()
            .is_some_and(|text| text.contains("stopped at its budget")),
        "{stop}"
    );
    for request in &received {
        check_signature(request.signature.as_deref(), &request.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eval_tells_its_hook_its_ab_verdict() {
    let hook = HookServer::start(&[]).await;
    let sandbox = Sandbox::empty();
    let store = sandbox.store();
    let out = cowork_blocking(
        workspace_root(),
        &[
            "eval",
            "--a",
            "examples/demo/skills/v1/csv-report",
            "--b",
            "examples/demo/eval/skills/csv-report-worse/csv-report",
            "examples/demo/scenarios",
            "--runs",
            "10",
            "--executor",
            "sim",
            "--sim-profile",
            "examples/demo/eval/sim-profile.yaml",
            "--quiet",
            "--notify",
            &hook.url,
            "--store",
            &store.display().to_string(),
        ],
    )
    .await;
    out.expect_code(1);
    let received = hook.received();
    assert_eq!(received.len(), 1, "{}", out.context());
    assert_eq!(received[0].signature, None, "no secret: unsigned");
    let body = received[0].json();
    assert_eq!(body["kind"], "decided", "{body}");
    assert_eq!(
        body["verdict"], "B worse",
        "the A/B verdict, not the runs' {body}"
    );
    assert_eq!(body["exitCode"], 1, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_test_exits_by_the_hooks_answer() {
    let sandbox = Sandbox::empty();
    sandbox.write("notify-secret", SECRET);
    for (script, code) in [(200u16, 0), (500, 1)] {
        let hook = HookServer::start(&[script]).await;
        let out = cowork_blocking(
            sandbox.path().to_path_buf(),
            &[
                "--log",
                "trace",
                "notify-test",
                &hook.url,
                "--notify-secret-file",
                "notify-secret",
            ],
        )
        .await;
        out.expect_code(code);
        assert!(
            out.stdout.contains(&format!("answered {script}")),
            "{}",
            out.context()
        );
        assert_no_secret(&out);
        let received = hook.received();
        assert_eq!(received.len(), 1, "sent once, never retried");
        check_signature(received[0].signature.as_deref(), &received[0].body);
        assert_eq!(received[0].json()["kind"], "test");
    }
    let bad = cowork(sandbox.path(), &["notify-test", "ftp://example.com/x"]);
    bad.expect_code(2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_batch_is_told_decided_and_a_refusing_hook_shows_in_status() {
    let hook = HookServer::start(&[]).await;
    let refusing = HookServer::start(&[404]).await;
    let fleet = tokio::task::spawn_blocking(|| {
        let mut fleet =
            Fleet::start_with_env(&[("COWORK_NOTIFY_SECRET", SECRET), ("COWORK_LOG", "debug")]);
        fleet.spawn_worker("w1", "container", "2");
        fleet
    })
    .await
    .expect("the fleet started");
    let sandbox = Sandbox::empty();
    copy_dir(&fixture("routing"), sandbox.path());
    sandbox.write("pass.yaml", "rules:\n  - pass_rate: 1.0\n");
    let cwd = sandbox.path().to_path_buf();
    let (hook_url, refusing_url) = (hook.url.clone(), refusing.url.clone());
    let (fleet, out) = tokio::task::spawn_blocking(move || {
        let out = fleet.submit_until_code(
            &cwd,
            &[
                "scenarios/in-container.yaml",
                "--repeat",
                "2",
                "--executor",
                "sim",
                "--sim-profile",
                "pass.yaml",
                "--notify",
                &hook_url,
                "--notify",
                &refusing_url,
            ],
            0,
        );
        (fleet, out)
    })
    .await
    .expect("the submit ran");
    let received = hook.wait_for(1, PATIENCE).await;
    let event = &received[0];
    check_signature(event.signature.as_deref(), &event.body);
    let body = event.json();
    assert_eq!(body["kind"], "decided", "{body}");
    assert_eq!(body["verdict"], "PASS", "{body}");
    let batch = body["batchId"].as_str().expect("a batch id").to_owned();
    assert_eq!(
        crate::fleet::batch_of(&out.envelope()).as_str(),
        batch,
        "{}",
        out.context()
    );
    refusing.wait_for(1, PATIENCE).await;
    let cwd = sandbox.path().to_path_buf();
    let fleet = tokio::task::spawn_blocking(move || {
        wait_until("cowork status shows the refusing hook")
            .within(PATIENCE)
            .every(Duration::from_millis(100))
            .context(|| fleet.logs())
            .poll(|| {
                let status = fleet.cowork(&cwd, &["status", &batch]);
                if status.stdout.contains("notify   hook http://127.0.0.1:")
                    && status.stdout.contains("answered 404")
                {
                    Ok(())
                } else {
                    Err(status.context())
                }
            });
        fleet
    })
    .await
    .expect("status was read");
    let logs = fleet.logs();
    assert!(
        logs.contains("notification delivered"),
        "the coordinator logs at debug"
    );
    assert!(!logs.contains(SECRET), "the secret is in no log line");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_job_is_told_to_the_coordinators_hooks() {
    let hook = HookServer::start(&[]).await;
    let url = hook.url.clone();
    // The coordinator's own hook (COWORK_NOTIFY), unsigned: it tells of every batch.
    let (fleet, batch) = tokio::task::spawn_blocking(move || {
        let mut fleet = crate::faults::fault_fleet(&[("COWORK_NOTIFY", &url)], &[]);
        // Runs of about 20 s: the batch is still running when the kill is noticed.
        let batch = crate::faults::submit_of(&fleet, 10, 20_000);
        crate::first_fleet::workers_until(&fleet, &workspace_root(), "w0 running jobs", |text| {
            text.lines().any(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.first() == Some(&"w0") && fields.get(3).is_some_and(|busy| *busy != "0")
            })
        });
        fleet.kill("w0");
        (fleet, batch)
    })
    .await
    .expect("the fleet ran");
    let received = hook.wait_for(1, PATIENCE).await;
    let body = received[0].json();
    assert_eq!(body["kind"], "worker_lost", "{body}\n{}", fleet.logs());
    assert_eq!(body["batchId"], batch.as_str(), "{body}");
    assert_eq!(body["workerId"], "w0", "{body}");
    assert!(
        body["jobsHeld"].as_u64().is_some_and(|held| held > 0),
        "{body}"
    );
    assert_eq!(received[0].signature, None, "no secret: unsigned");
}
