//! `cowork run` with the sim executor: the demo batch of the README (envelope shape, verdict and
//! exit code, stderr summary, deterministic `rollup.json`), plain repeats over a directory, a
//! plain single run, matrix cell errors (harness-behaviour.md#matrix-axes, TC-33) and the flag
//! forms TC-38 accepts (harness-behaviour.md#test-cases).

use std::path::Path;

use serde_json::Value;

use crate::support::{
    Output, Sandbox, array, batch_dirs, boolean, keys, number, only_batch_dir, read_bytes,
    read_json, rollup_passes, run_batch_from, workspace_root,
};

/// The README's demo batch: 2 models × 2 skill versions × 5 runs, as one JSON line.
const DEMO: &[&str] = &[
    "examples/demo/scenarios/csv-report.yaml",
    "--repeat",
    "5",
    "--matrix",
    "examples/demo/matrix.yaml",
    "--executor",
    "sim",
    "--output-format",
    "json",
];

/// Runs the demo from the workspace root (as documented) into `store`.
pub fn run_demo(store: &Path) -> Output {
    run_demo_with(store, &[])
}

/// Runs the demo with `extra` flags appended.
pub fn run_demo_with(store: &Path, extra: &[&str]) -> Output {
    let mut args = DEMO.to_vec();
    args.extend_from_slice(extra);
    run_batch_from(&workspace_root(), store, &args)
}

/// Every file below `dir` whose name starts with `prefix`.
fn files_named(dir: &Path, prefix: &str, found: &mut Vec<String>) {
    let listing =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()));
    for entry in listing {
        let entry = entry.unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()));
        let path = entry.path();
        if path.is_dir() {
            files_named(&path, prefix, found);
        } else if entry.file_name().to_string_lossy().starts_with(prefix) {
            found.push(path.display().to_string());
        }
    }
}

#[test]
fn demo_batch_prints_one_envelope_and_exits_by_its_verdict() {
    let sandbox = Sandbox::empty();
    let out = run_demo(&sandbox.store());
    let envelope = out.envelope();

    assert_eq!(
        keys(&envelope),
        [
            "tool",
            "version",
            "command",
            "ok",
            "results",
            "matrixRepeat",
            "error",
            "fleet"
        ],
        "envelope key order\n{}",
        out.context()
    );
    assert_eq!(envelope["tool"], "cowork-harness");
    assert_eq!(envelope["command"], "run");
    assert_eq!(envelope["error"], Value::Null);

    let matrix = &envelope["matrixRepeat"];
    let cells = array(matrix, "cells");
    assert_eq!(cells.len(), 4, "2 models × 2 skill dirs\n{}", out.context());
    assert_eq!(number(matrix, "requested"), 4.0);
    assert_eq!(number(matrix, "ranCells"), 4.0);
    assert!(!boolean(matrix, "truncated"));

    let results = array(&envelope, "results");
    assert_eq!(results.len(), 20, "4 cells × 5 runs\n{}", out.context());
    for result in results {
        assert_eq!(result["simulated"], true, "unmarked sim result: {result}");
    }
    // results[] is in (cell, repeat) order (harness-behaviour.md#choice-c3): each cell's five runs
    // carry its model.
    for (position, result) in results.iter().enumerate() {
        let cell = &cells[position / 5];
        assert_eq!(
            result["provenance"]["model"], cell["axes"]["model"],
            "result {position} is not from cell {}",
            cell["index"]
        );
    }

    // The verdict, recomputed from the stored pass rates (harness-behaviour.md#batch-verdict,
    // harness-behaviour.md#matrix-repeat).
    let mut any_fail = false;
    for (index, cell) in cells.iter().enumerate() {
        assert_eq!(number(cell, "index"), index as f64);
        let rollup = &cell["rollup"];
        assert_eq!(number(rollup, "requested"), 5.0, "cell {index}: {cell}");
        assert_eq!(number(rollup, "completed"), 5.0, "cell {index}: {cell}");
        any_fail |= !rollup_passes(rollup, 1.0, false);
    }
    assert_eq!(boolean(matrix, "anyFail"), any_fail, "{}", out.context());
    let ok = boolean(&envelope, "ok");
    assert_eq!(ok, !any_fail, "ok must be !matrixRepeat.anyFail");
    out.expect_code(if ok { 0 } else { 1 });

    // The progress line and the summary table go to stderr, marked simulated.
    out.expect_stderr("20/20 jobs")
        .expect_stderr("pass rate")
        .expect_stderr("SIMULATED")
        .expect_stderr(if ok {
            "verdict: PASS (exit 0)"
        } else {
            "verdict: FAIL (exit 1)"
        });
    // Each cell is named as the dry run, diff, trend and reports name it (it was `c0 …`).
    for cell in cells {
        let label = cell["rollup"]["scenario"].as_str().expect("a cell label");
        out.expect_stderr(&format!("\n{label}"));
    }
    assert_eq!(envelope["fleet"]["executor"], "sim");
    assert_eq!(envelope["fleet"]["simulated"], true);

    // The batch's own envelope.json is the envelope that was printed.
    let batch = only_batch_dir(&sandbox.store());
    assert_eq!(read_json(&batch.join("envelope.json")), envelope);

    // Cell overrides live in the bundle only: nothing is written into the source tree.
    let mut derived = Vec::new();
    files_named(
        &workspace_root().join("examples/demo"),
        ".cowork-cell-",
        &mut derived,
    );
    assert_eq!(derived, Vec::<String>::new(), "derived files in the demo");
}

#[test]
fn demo_rollup_json_is_byte_identical_across_runs() {
    let sandbox = Sandbox::empty();
    let first = run_demo(&sandbox.store());
    let second = run_demo(&sandbox.store());
    assert_eq!(first.code(), second.code());

    let dirs = batch_dirs(&sandbox.store());
    let [one, two] = dirs.as_slice() else {
        panic!("expected two batches, found {dirs:?}");
    };
    let (bytes_one, bytes_two) = (
        read_bytes(&one.join("rollup.json")),
        read_bytes(&two.join("rollup.json")),
    );
    assert!(
        bytes_one == bytes_two,
        "rollup.json differs between two runs of the same batch:\n{}\n---\n{}",
        String::from_utf8_lossy(&bytes_one),
        String::from_utf8_lossy(&bytes_two)
    );

    // Only the fleet key (batch id, timings, workers) may differ between the two envelopes.
    let without_fleet = |output: &Output| {
        let mut envelope = output.envelope();
        if let Some(object) = envelope.as_object_mut() {
            object.remove("fleet");
        }
        envelope
    };
    assert_eq!(without_fleet(&first), without_fleet(&second));
}

/// The scenario names of a directory target: its `*.yaml` / `*.yml` files, sorted by UTF-16
/// code units like the CLI, extension removed (harness-behaviour.md#scenario-name; the files set no
/// `name:`).
fn scenario_names(dir: &Path) -> Vec<String> {
    let listing =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()));
    let mut names: Vec<String> = listing
        .map(|entry| {
            entry
                .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".yaml") || name.ends_with(".yml"))
        .collect();
    names.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
    names
        .iter()
        .map(|name| {
            name.trim_end_matches(".yaml")
                .trim_end_matches(".yml")
                .to_owned()
        })
        .collect()
}

/// Checks a repeat batch over a directory: one rollup per file, in `expected` order, `ok` and
/// the exit code from the rollups (harness-behaviour.md#batch-verdict,
/// harness-behaviour.md#envelope-success).
fn check_directory_repeat(out: &Output, expected: &[String], repeat: f64) {
    let envelope = out.envelope();
    assert_eq!(
        keys(&envelope),
        [
            "tool", "version", "command", "ok", "results", "rollups", "error", "fleet"
        ],
        "{}",
        out.context()
    );
    let rollups = array(&envelope, "rollups");
    let names: Vec<&str> = rollups
        .iter()
        .map(|rollup| rollup["scenario"].as_str().unwrap_or("(not a string)"))
        .collect();
    assert_eq!(names, expected, "{}", out.context());
    let mut completed = 0.0;
    for rollup in rollups {
        assert_eq!(number(rollup, "requested"), repeat, "{rollup}");
        completed += number(rollup, "completed");
    }
    assert_eq!(array(&envelope, "results").len() as f64, completed);
    let ok = rollups
        .iter()
        .all(|rollup| rollup_passes(rollup, 1.0, false));
    assert_eq!(boolean(&envelope, "ok"), ok, "{}", out.context());
    out.expect_code(if ok { 0 } else { 1 });
}

#[test]
fn repeat_over_the_demo_directory_rolls_up_each_file_in_sorted_order() {
    let sandbox = Sandbox::empty();
    let out = run_batch_from(
        &workspace_root(),
        &sandbox.store(),
        &[
            "examples/demo/scenarios",
            "--repeat",
            "3",
            "--executor",
            "sim",
            "--output-format",
            "json",
        ],
    );
    let expected = scenario_names(&workspace_root().join("examples/demo/scenarios"));
    assert!(expected.len() >= 2, "the demo holds several scenarios");
    check_directory_repeat(&out, &expected, 3.0);
}

#[test]
fn repeat_over_a_directory_sorts_by_code_unit_and_skips_other_files() {
    let sandbox = Sandbox::with_project();
    let scenario = sandbox.read("scenarios/report.yaml");
    sandbox.remove("scenarios/report.yaml");
    // Upper case sorts before lower case; `.yml` counts; `.txt` and `.YAML` do not (step 1 of
    // harness-behaviour.md#job-expansion).
    for name in ["b.yaml", "a.yml", "Z.yaml"] {
        sandbox.write(&format!("scenarios/{name}"), &scenario);
    }
    sandbox.write("scenarios/notes.txt", "not a scenario\n");
    sandbox.write("scenarios/SHOUT.YAML", "not: [a scenario\n");
    let out = sandbox.run_batch(&[
        "scenarios",
        "--repeat",
        "2",
        "--executor",
        "sim",
        "--output-format",
        "json",
    ]);
    check_directory_repeat(&out, &["Z".into(), "a".into(), "b".into()], 2.0);
}

#[test]
fn plain_run_has_no_batch_key_and_ok_means_every_result_passes() {
    let sandbox = Sandbox::with_project();
    let out = sandbox.run_batch(&[
        "scenarios/report.yaml",
        "--executor",
        "sim",
        "--output-format",
        "json",
    ]);
    let envelope = out.envelope();
    assert_eq!(
        keys(&envelope),
        [
            "tool", "version", "command", "ok", "results", "error", "fleet"
        ],
        "{}",
        out.context()
    );
    let results = array(&envelope, "results");
    assert_eq!(results.len(), 1, "{}", out.context());
    let ok = results
        .iter()
        .all(|result| result["verdict"]["pass"] == true);
    assert_eq!(boolean(&envelope, "ok"), ok, "{}", out.context());
    out.expect_code(if ok { 0 } else { 1 });
}

/// The project's matrix with its second skill dir swapped for one whose basename (`summary`)
/// differs from the session's local plugin (`report`): cells 1 and 3 cannot be applied.
fn sandbox_with_basename_mismatch() -> Sandbox {
    let sandbox = Sandbox::with_project();
    sandbox.replace("matrix.yaml", "skills/v2/report", "skills/v3/summary");
    sandbox
}

/// The cell error names both basenames.
fn check_cell_error(cell: &Value) {
    let error = cell["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("summary") && error.contains("report"),
        "the cell error must name both basenames: {cell}"
    );
}

#[test]
fn matrix_repeat_basename_mismatch_is_a_cell_error_and_other_cells_run() {
    let sandbox = sandbox_with_basename_mismatch();
    let out = sandbox.run_batch(&[
        "scenarios/report.yaml",
        "--repeat",
        "2",
        "--matrix",
        "matrix.yaml",
        "--executor",
        "sim",
        "--output-format",
        "json",
    ]);
    out.expect_code(1);
    let envelope = out.envelope();
    let matrix = &envelope["matrixRepeat"];
    let cells = array(matrix, "cells");
    assert_eq!(cells.len(), 4, "{}", out.context());
    for cell in cells {
        let index = number(cell, "index");
        if index == 1.0 || index == 3.0 {
            assert_eq!(keys(cell), ["index", "axes", "error"], "{cell}");
            check_cell_error(cell);
        } else {
            assert_eq!(keys(cell), ["index", "axes", "rollup"], "{cell}");
            assert_eq!(number(&cell["rollup"], "completed"), 2.0, "{cell}");
        }
    }
    assert!(boolean(matrix, "anyFail"));
    assert!(!boolean(&envelope, "ok"));
    // Only the two applicable cells ran: 2 cells × 2 runs.
    assert_eq!(array(&envelope, "results").len(), 4, "{}", out.context());
    out.expect_stderr("ERROR: ");
    let batch = only_batch_dir(&sandbox.store());
    assert!(batch.join("rollup.json").is_file());
}

#[test]
fn plain_matrix_basename_mismatch_is_a_cell_error_without_run_fields() {
    let sandbox = sandbox_with_basename_mismatch();
    let out = sandbox.run_batch(&[
        "scenarios/report.yaml",
        "--matrix",
        "matrix.yaml",
        "--executor",
        "sim",
        "--output-format",
        "json",
    ]);
    out.expect_code(1);
    let envelope = out.envelope();
    let matrix = &envelope["matrix"];
    let cells = array(matrix, "cells");
    assert_eq!(cells.len(), 4, "{}", out.context());
    for index in [1, 3] {
        let cell = &cells[index];
        // TC-33: pass false, no assertions or signals, no cost, duration, fidelity or outDir.
        assert_eq!(
            keys(cell),
            [
                "index",
                "axes",
                "pass",
                "failedAssertions",
                "signals",
                "error"
            ],
            "{cell}"
        );
        assert_eq!(cell["pass"], false);
        assert_eq!(cell["failedAssertions"], Value::Array(Vec::new()));
        assert_eq!(cell["signals"], Value::Array(Vec::new()));
        check_cell_error(cell);
    }
    for index in [0, 2] {
        assert!(cells[index].get("outDir").is_some(), "{}", cells[index]);
    }
    assert!(boolean(matrix, "anyFail"));
    assert_eq!(array(&envelope, "results").len(), 2, "{}", out.context());
}

#[test]
fn flag_forms_the_contract_accepts_run_the_batch() {
    // TC-38's accepted forms. The verdict of a sim batch may be either way; exit 2 may not.
    let check = |args: &[&str]| {
        let sandbox = Sandbox::with_project();
        let mut all = vec!["scenarios/report.yaml", "--executor", "sim"];
        all.extend_from_slice(args);
        let out = sandbox.run_batch(&all);
        if !matches!(out.code, Some(0 | 1)) {
            out.fail("an accepted flag form was refused");
        }
        only_batch_dir(&sandbox.store());
    };
    check(&["--max-budget-usd", "1"]);
    check(&["--repeat=3"]);
    check(&["--repeat", "2", "--matrix", "matrix.yaml"]);
    check(&["--matrix", "matrix.yaml", "--max-cells", "16"]);
    check(&["--matrix", "matrix.yaml", "--concurrency", "2"]);
    check(&["--min-pass-rate", "1"]);
    check(&["--repeat", "2", "--min-pass-rate=-0"]);
    check(&["--repeat", " 0x2 "]);
    // The fleet's documented deviation: the CLI caps --repeat at 100, the fleet at 10000.
    check(&["--repeat", "101"]);
}

/// `cowork resume latest --store DIR` finds the newest batch of the store, as `report` and
/// `rollup` do (it used to read `latest` as a batch id and say the store held no such batch).
/// A record the resume cannot read stops it, naming the file and the fix (the supervisor,
/// waiting for the records it was promised, is ended rather than left waiting);
/// the batch's rollup is left as it was. (The records are replayed while the supervisor folds
/// them, so this is the replay failing under a running supervisor.)
#[test]
fn a_resume_that_meets_an_unreadable_record_stops_and_leaves_the_batch_as_it_was() {
    let sandbox = Sandbox::empty();
    run_demo(&sandbox.store());
    let batches = sandbox.store().join("batches");
    let mut records = Vec::new();
    files_named(&batches, "outcome.json", &mut records);
    records.sort();
    let broken = records.last().expect("the demo stored job records");
    std::fs::write(broken, "not json").expect("breaking a record");
    let mut rollups = Vec::new();
    files_named(&batches, "rollup.json", &mut rollups);
    let rollup = rollups.first().expect("the demo stored its rollup").clone();
    let before = std::fs::read(&rollup).expect("reading the rollup");
    let store = sandbox.store();
    let store = store.to_str().expect("a UTF-8 temp path");
    let out = crate::support::cowork(
        &crate::support::workspace_root(),
        &["resume", "latest", "--store", store, "--quiet"],
    );
    out.expect_code(2)
        .expect_stderr("is neither a job record nor a job outcome; remove it to run job");
    assert_eq!(
        std::fs::read(&rollup).expect("reading the rollup"),
        before,
        "the rollup is untouched"
    );
}

#[test]
fn resume_latest_of_a_local_store_finishes_its_newest_batch() {
    let sandbox = Sandbox::empty();
    let first = run_demo(&sandbox.store());
    let store = sandbox.store();
    let store = store.to_str().expect("a UTF-8 temp path");
    let out = crate::support::cowork(
        &crate::support::workspace_root(),
        &[
            "resume",
            "latest",
            "--store",
            store,
            "--output-format",
            "json",
            "--quiet",
        ],
    );
    assert_eq!(out.code(), first.code(), "{}", out.context());
    assert_eq!(
        out.envelope()["matrixRepeat"],
        first.envelope()["matrixRepeat"],
        "nothing was left to run: the same rollup"
    );
}
