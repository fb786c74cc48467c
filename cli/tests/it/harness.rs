//! `cowork run --executor harness` end to end against `worker/tests/fixtures/strict-harness`, which
//! behaves as the `# strict-harness: <mode>` line of each scenario in `fixtures/harness/` says: passing
//! runs, an unanswered gate, a usage error and a crash (harness-behaviour.md#outcome-classes,
//! harness-behaviour.md#repeat-loop).

use serde_json::Value;

use crate::support::{
    Output, Sandbox, array, cowork, fixture, keys, number, only_batch_dir, read_bytes, read_json,
    strict_harness,
};

/// Copies `fixtures/harness/<mode>.yaml` into the sandbox as `scenarios/<name>.yaml`.
fn add_scenario(sandbox: &Sandbox, mode: &str, name: &str) {
    sandbox.copy_in(
        &fixture(&format!("harness/{mode}.yaml")),
        &format!("scenarios/{name}.yaml"),
    );
}

/// `cowork run <target> --repeat <n> --executor harness --harness-bin strict-harness` as JSON.
fn run_harness(sandbox: &Sandbox, target: &str, repeat: &str) -> Output {
    let harness = strict_harness();
    sandbox.run_batch(&[
        target.as_ref(),
        "--repeat".as_ref(),
        repeat.as_ref(),
        "--executor".as_ref(),
        "harness".as_ref(),
        "--harness-bin".as_ref(),
        harness.as_os_str(),
        "--output-format".as_ref(),
        "json".as_ref(),
    ])
}

/// The only rollup of a one-file repeat envelope.
fn only_rollup(out: &Output, envelope: &Value) -> Value {
    match array(envelope, "rollups") {
        [one] => one.clone(),
        _ => out.fail("expected exactly one rollup"),
    }
}

#[test]
fn passing_repeat_batch_exits_0_with_the_on_disk_results() {
    let sandbox = Sandbox::empty();
    add_scenario(&sandbox, "pass", "pass");
    let out = run_harness(&sandbox, "scenarios/pass.yaml", "3");
    out.expect_code(0);
    let envelope = out.envelope();
    assert_eq!(envelope["ok"], true);
    assert_eq!(envelope["version"], "2.0.0", "the harness's own version");
    let rollup = only_rollup(&out, &envelope);
    assert_eq!(rollup["scenario"], "pass");
    assert_eq!(number(&rollup, "completed"), 3.0);
    assert_eq!(number(&rollup, "passes"), 3.0);
    if out.stderr.contains("SIMULATED") {
        out.fail("harness results are marked simulated");
    }

    // Each result is the run dir's result.json (the double marks it `doubleCopy: disk`; the stdout
    // copy says `envelope`), as stored under the job, plus the envelope's decorations.
    let batch = only_batch_dir(&sandbox.store());
    let results = array(&envelope, "results");
    assert_eq!(results.len(), 3, "{}", out.context());
    for (index, result) in results.iter().enumerate() {
        assert_eq!(result["doubleCopy"], "disk", "result {index}");
        let stored = read_json(&batch.join(format!("jobs/f0/r{index}/result.json")));
        assert_eq!(stored["doubleCopy"], "disk", "stored result {index}");
        for key in keys(&stored) {
            assert_eq!(result[key], stored[key], "result {index}, key {key}");
        }
        for key in keys(result) {
            assert!(
                stored.get(key).is_some() || key == "provenance" || key == "outcome",
                "result {index} has an unexpected key {key}"
            );
        }
    }

    // The stored batch re-judges to the same bytes, reading the runs back from result.json.
    let out_file = sandbox.path().join("rejudged.json");
    cowork(
        sandbox.path(),
        &[
            "rollup".as_ref(),
            batch.as_os_str(),
            "--rollup-out".as_ref(),
            out_file.as_os_str(),
        ],
    )
    .expect_code(0);
    assert_eq!(
        read_bytes(&out_file),
        read_bytes(&batch.join("rollup.json"))
    );
}

#[test]
fn unanswered_runs_stop_the_rollup_as_unanswered() {
    let sandbox = Sandbox::empty();
    add_scenario(&sandbox, "unanswered", "unanswered");
    let out = run_harness(&sandbox, "scenarios/unanswered.yaml", "3");
    out.expect_code(1);
    let envelope = out.envelope();
    assert_eq!(envelope["ok"], false);
    let rollup = only_rollup(&out, &envelope);
    assert_eq!(rollup["stoppedEarly"], "unanswered", "{rollup}");
    assert_eq!(number(&rollup, "completed"), 0.0, "{rollup}");
    // The salvaged partial result is diagnostic only: never folded, never in results[].
    assert_eq!(array(&envelope, "results").len(), 0, "{}", out.context());
    let stored = read_json(&only_batch_dir(&sandbox.store()).join("rollup.json"));
    assert_eq!(stored["rollups"][0]["stoppedEarly"], "unanswered");
    assert_eq!(stored["ok"], false);
}

#[test]
fn usage_errors_and_crashes_stop_the_rollup_as_error_and_the_batch_finishes() {
    let check = |mode: &str| {
        let sandbox = Sandbox::empty();
        add_scenario(&sandbox, mode, mode);
        let out = run_harness(&sandbox, &format!("scenarios/{mode}.yaml"), "3");
        out.expect_code(1);
        let envelope = out.envelope();
        let rollup = only_rollup(&out, &envelope);
        assert_eq!(rollup["stoppedEarly"], "error", "{mode}: {rollup}");
        assert_eq!(number(&rollup, "completed"), 0.0, "{mode}: {rollup}");
        assert_eq!(envelope["ok"], false, "{mode}");
        let batch = only_batch_dir(&sandbox.store());
        for file in ["rollup.json", "envelope.json"] {
            assert!(batch.join(file).is_file(), "{mode}: no {file}");
        }
        out.expect_stderr("verdict: FAIL (exit 1)");
        // Why it stopped reaches the summary and the envelope, not only the job's outcome.
        out.expect_stderr(&format!("stopped by an error ({mode}): "));
        let reason = &envelope["fleet"]["stopErrors"][0];
        assert_eq!(reason["unit"], mode, "{mode}: {}", envelope["fleet"]);
        assert!(
            reason["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{mode}: {reason}"
        );
    };
    check("usage");
    check("crash");
}

#[test]
fn a_crashing_file_does_not_stop_the_other_files() {
    let sandbox = Sandbox::empty();
    add_scenario(&sandbox, "crash", "a-crash");
    add_scenario(&sandbox, "pass", "b-pass");
    let out = run_harness(&sandbox, "scenarios", "2");
    out.expect_code(1);
    let envelope = out.envelope();
    let rollups = array(&envelope, "rollups");
    assert_eq!(rollups.len(), 2, "{}", out.context());
    assert_eq!(rollups[0]["scenario"], "a-crash");
    assert_eq!(rollups[0]["stoppedEarly"], "error");
    assert_eq!(rollups[1]["scenario"], "b-pass");
    assert_eq!(number(&rollups[1], "passes"), 2.0, "{}", rollups[1]);
    assert_eq!(array(&envelope, "results").len(), 2);
}

#[test]
fn summary_spend_of_discarded_error_runs_is_not_negative_zero() {
    // All three jobs are admitted at once; the first one's error decides the unit, so the two
    // others are discarded without any cost. Summing no costs must print $0.0000, not $-0.0000.
    let sandbox = Sandbox::empty();
    add_scenario(&sandbox, "usage", "usage");
    let out = run_harness(&sandbox, "scenarios/usage.yaml", "3");
    out.expect_code(1).expect_stderr("discarded");
    if out.stderr.contains("$-0") {
        out.fail("the summary prints a negative zero spend");
    }
}

#[test]
fn a_failed_batch_says_why_its_runs_failed_and_which_job_to_open() {
    let sandbox = Sandbox::empty();
    add_scenario(&sandbox, "fail", "fail");
    let out = run_harness(&sandbox, "scenarios/fail.yaml", "2");
    out.expect_code(1);
    let batch = only_batch_dir(&sandbox.store());
    // Under the table: the reason with its count and first line, and one job's own dir.
    out.expect_stderr("why runs failed (most frequent first):");
    out.expect_stderr("2 runs: [transcript_contains] transcript_contains: \"Audit\" not found");
    out.expect_stderr(&format!("look in {}/", batch.join("jobs/f0/r0").display()));
    let reasons_at = out.stderr.find("why runs failed").unwrap_or_default();
    let verdict_at = out.stderr.find("verdict: FAIL").unwrap_or_default();
    assert!(reasons_at < verdict_at, "{}", out.context());
    // A passing batch has nothing to explain.
    let sandbox = Sandbox::empty();
    add_scenario(&sandbox, "pass", "pass");
    let out = run_harness(&sandbox, "scenarios/pass.yaml", "2");
    out.expect_code(0);
    if out.stderr.contains("why runs failed") {
        out.fail("a passing batch lists failure reasons");
    }
}
