//! Quarantine: units listed in `quarantine.yaml` still run and are reported, but their failures
//! do not gate the verdict until their entry expires. On the simulator a profile makes
//! `csv-report` fail every run while `skill-triggers` passes, so the batch's verdict depends on
//! the quarantine alone.

use std::path::Path;
use std::process::Command;

use cowork_schema::quarantine::Date;
use serde_json::Value;

use crate::fleet::Fleet;
use crate::support::{Output, Sandbox, batch_dirs, copy_dir, cowork, workspace_root};

/// The demo's two scenarios, `csv-report` failing every run.
fn demo() -> Sandbox {
    let sandbox = Sandbox::empty();
    copy_dir(&workspace_root().join("examples/demo"), sandbox.path());
    sandbox.write(
        "fail-csv.yaml",
        "rules:\n  - scenario: ^csv-report$\n    pass_rate: 0\n  - pass_rate: 1\n",
    );
    sandbox
}

/// Today by the clock the CLI reads, `days` later.
fn day(days: i64) -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_secs() as i64)
        .unwrap_or(0);
    Date(Date::from_unix_seconds(seconds).0 + days).to_string()
}

/// A quarantine file with one entry for `scenario`, expiring `expires`.
fn quarantine(scenario: &str, expires: &str) -> String {
    format!(
        "quarantine:\n  - scenario: {scenario}\n    owner: alice@example.com\n    reason: upload step times out\n    expires: {expires}\n    link: https://example.com/issues/12\n"
    )
}

fn run(sandbox: &Sandbox, extra: &[&str]) -> Output {
    let mut args = vec![
        "scenarios",
        "--executor",
        "sim",
        "--seed",
        "7",
        "--sim-profile",
        "fail-csv.yaml",
        "--output-format",
        "json",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    sandbox.run_batch(&args)
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_quarantined_failure_does_not_gate_until_its_entry_expires() {
    let sandbox = demo();
    // Without a quarantine the failing unit fails the batch.
    run(&sandbox, &[]).expect_code(1);

    sandbox.write("quarantine.yaml", &quarantine("csv-report", &day(0)));
    let out = run(&sandbox, &[]);
    out.expect_code(0);
    let envelope = out.envelope();
    assert_eq!(envelope["ok"], true, "{}", out.context());
    let record = &envelope["quarantine"];
    assert_eq!(strings(&record["applied"]), ["csv-report"]);
    assert_eq!(strings(&record["quarantined"]), ["csv-report"]);
    assert_eq!(record["today"], day(0));
    assert_eq!(record["sha256"].as_str().map(str::len), Some(64));
    // The unit's own verdict stands: its result still fails.
    let csv = envelope["results"]
        .as_array()
        .and_then(|results| results.iter().find(|r| r["scenario"] == "csv-report"))
        .unwrap_or_else(|| out.fail("no csv-report result"));
    assert_eq!(csv["verdict"]["pass"], false);
    out.expect_stderr("FAIL (quarantined)")
        .expect_stderr("failures set aside, not gating the verdict: csv-report");

    // --no-quarantine ignores the file.
    run(&sandbox, &["--no-quarantine"]).expect_code(1);

    // Expired yesterday: the unit gates again, and it is said loudly.
    sandbox.write("quarantine.yaml", &quarantine("csv-report", &day(-1)));
    let out = run(&sandbox, &[]);
    out.expect_code(1)
        .expect_stderr("the quarantine of csv-report has EXPIRED")
        .expect_stderr("FAIL (quarantine EXPIRED)");
    assert_eq!(
        strings(&out.envelope()["quarantine"]["expired"]),
        ["csv-report"]
    );

    // An entry that matches no unit is a warning, not an error.
    sandbox.write("quarantine.yaml", &quarantine("no-such-scenario", &day(3)));
    let out = run(&sandbox, &[]);
    out.expect_code(1)
        .expect_stderr("no-such-scenario matches no unit of this batch");
}

#[test]
fn a_bad_quarantine_file_names_file_line_and_fix_and_nothing_runs() {
    let sandbox = demo();
    let text = format!(
        "quarantine:\n  - scenario: csv-report\n    owner: ''\n    reason: flaky\n    expires: {}\n",
        day(200)
    );
    sandbox.write("quarantine.yaml", &text);
    let out = run(&sandbox, &[]);
    out.expect_code(2)
        .expect_stderr("quarantine.yaml:3:12: quarantine[0].owner: must not be empty")
        .expect_stderr("quarantine.yaml:5:14: quarantine[0].expires:")
        .expect_stderr(&format!("write {} or earlier", day(90)));
    assert!(
        !sandbox.store().join("batches").exists(),
        "a refused batch stores nothing\n{}",
        out.context()
    );
    // A named file that does not exist is refused too.
    run(&sandbox, &["--quarantine", "missing.yaml"])
        .expect_code(2)
        .expect_stderr("missing.yaml");
}

#[test]
fn every_report_format_marks_the_quarantined_unit() {
    let sandbox = demo();
    sandbox.write("quarantine.yaml", &quarantine("csv-report", &day(5)));
    let out = run(&sandbox, &[]);
    out.expect_code(0);
    let batch = out.envelope()["fleet"]["batchId"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| out.fail("no batch id in the envelope"));
    let report = |format: &str| {
        let out = cowork(
            sandbox.path(),
            &["report", &batch, "--format", format, "--store", ".cowork"],
        );
        out.expect_code(0);
        out.stdout
    };
    let junit = report("junit");
    assert!(
        junit.contains("<skipped message=\"quarantined until")
            && junit.contains("upload step times out")
            && junit.contains("its own verdict: FAIL"),
        "{junit}"
    );
    assert!(
        junit.contains("name=\"quarantine_set_aside\" value=\"csv-report\""),
        "{junit}"
    );
    let markdown = report("markdown");
    assert!(markdown.contains("quarantined until"), "{markdown}");
    assert!(markdown.contains("failures set aside"), "{markdown}");
    let html = report("html");
    assert!(html.contains("id=\"quarantine\""), "html banner");
    assert!(
        html.contains("data-quarantine=\"quarantined\""),
        "html unit mark"
    );
    let json: Value = serde_json::from_str(report("json").trim()).expect("one line of JSON");
    assert_eq!(strings(&json["quarantine"]["applied"]), ["csv-report"]);
    let unit = json["units"]
        .as_array()
        .and_then(|units| units.iter().find(|u| u["label"] == "csv-report"))
        .expect("the csv-report unit");
    assert_eq!(unit["status"], "fail");
    assert_eq!(unit["quarantine"]["state"], "quarantined");
}

#[test]
fn rollup_reproduces_the_verdict_from_the_record_and_rejudges_with_another_file() {
    let sandbox = demo();
    sandbox.write("quarantine.yaml", &quarantine("csv-report", &day(5)));
    let out = run(&sandbox, &[]);
    out.expect_code(0);
    let first = out.envelope();
    let batch = first["fleet"]["batchId"]
        .as_str()
        .expect("batch id")
        .to_owned();
    // The working tree's file changes; the stored batch keeps the quarantine it applied.
    sandbox.write("quarantine.yaml", "quarantine: []\n");
    let rollup = |extra: &[&str]| {
        let mut args = vec![
            "rollup",
            batch.as_str(),
            "--store",
            ".cowork",
            "--output-format",
            "json",
        ];
        args.extend_from_slice(extra);
        cowork(sandbox.path(), &args)
    };
    let again = rollup(&[]);
    again.expect_code(0);
    assert_eq!(again.envelope()["quarantine"], first["quarantine"]);
    assert_eq!(again.envelope()["ok"], true);
    // Another file re-judges: the empty one sets nothing aside.
    rollup(&["--quarantine", "quarantine.yaml"])
        .expect_code(1)
        .expect_stderr("no failure set aside");
    rollup(&["--no-quarantine"]).expect_code(1);
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .expect("running git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_base_refs_file_wins_over_the_working_trees() {
    let sandbox = demo();
    git(sandbox.path(), &["init", "-q", "-b", "main"]);
    // The base quarantines nothing that fails.
    sandbox.write("quarantine.yaml", &quarantine("skill-triggers", &day(5)));
    git(sandbox.path(), &["add", "-A"]);
    git(sandbox.path(), &["commit", "-q", "-m", "base"]);
    // A change quarantines its own failing unit in the working tree.
    sandbox.write("quarantine.yaml", &quarantine("csv-report", &day(5)));
    run(&sandbox, &[]).expect_code(0);
    let out = run(&sandbox, &["--quarantine-ref", "main"]);
    out.expect_code(1);
    let record = &out.envelope()["quarantine"];
    assert_eq!(record["source"], "main:quarantine.yaml");
    assert_eq!(strings(&record["quarantined"]), ["skill-triggers"]);
    assert!(strings(&record["applied"]).is_empty());
    // A ref that does not exist is a usage error that runs nothing.
    let before = batch_dirs(&sandbox.store()).len();
    run(&sandbox, &["--quarantine-ref", "no-such-ref"])
        .expect_code(2)
        .expect_stderr("--quarantine-ref");
    assert_eq!(batch_dirs(&sandbox.store()).len(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_batch_honours_its_quarantine_on_the_fleet() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w1", "container", "2");
    let sandbox = demo();
    sandbox.write("quarantine.yaml", &quarantine("csv-report", &day(5)));
    let args = [
        "scenarios",
        "--executor",
        "sim",
        "--seed",
        "7",
        "--sim-profile",
        "fail-csv.yaml",
    ];
    let out = fleet.submit_until_code(sandbox.path(), &args, 0);
    let envelope = out.envelope();
    assert_eq!(envelope["ok"], true);
    assert_eq!(strings(&envelope["quarantine"]["applied"]), ["csv-report"]);
    let mut without = args.to_vec();
    without.push("--no-quarantine");
    let out = fleet.submit(sandbox.path(), &without);
    out.expect_code(1);
    assert!(out.envelope().get("quarantine").is_none_or(Value::is_null));
}
