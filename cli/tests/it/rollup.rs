//! `cowork rollup` on a stored demo batch: with the stored flags it reproduces `rollup.json`
//! byte for byte and exits like the batch did; with `--min-pass-rate` it re-judges every cell
//! from the stored pass rates without changing the rollups themselves.
//! (`harness.rs` re-judges a harness batch too, whose runs are read back from `result.json`.)

use serde_json::Value;

use crate::run::{run_demo, run_demo_with};
use crate::support::{
    Output, Sandbox, array, boolean, cowork, number, only_batch_dir, read_bytes, read_json,
    rollup_passes,
};

#[test]
fn rollup_of_a_stored_batch_reproduces_rollup_json_byte_for_byte() {
    let sandbox = Sandbox::empty();
    let run = run_demo(&sandbox.store());
    let batch = only_batch_dir(&sandbox.store());
    let out_file = sandbox.path().join("rejudged.json");
    let out = cowork(
        sandbox.path(),
        &[
            "rollup".as_ref(),
            batch.as_os_str(),
            "--rollup-out".as_ref(),
            out_file.as_os_str(),
        ],
    );
    out.expect_code(run.code());
    let (stored, rejudged) = (
        read_bytes(&batch.join("rollup.json")),
        read_bytes(&out_file),
    );
    if stored != rejudged {
        out.fail(&format!(
            "--rollup-out differs from the batch's rollup.json:\n{}\n---\n{}",
            String::from_utf8_lossy(&stored),
            String::from_utf8_lossy(&rejudged)
        ));
    }
}

/// The summary table row of the cell named `label` says PASS. A label too long for its row
/// has a line of its own, the row's cells on the next.
fn row_passes(out: &Output, label: &str) -> bool {
    let lines: Vec<&str> = out.stderr.lines().collect();
    let Some(at) = lines.iter().position(|line| line.starts_with(label)) else {
        out.fail(&format!("no summary row for cell {label}"));
    };
    let row = if lines[at].trim_end() == label {
        lines.get(at + 1).copied().unwrap_or_default()
    } else {
        lines[at]
    };
    row.split_whitespace().any(|word| word == "PASS")
}

#[test]
fn rollup_at_a_lower_min_pass_rate_rejudges_each_cell() {
    const RATE: f64 = 0.6;
    let sandbox = Sandbox::empty();
    // The demo's simulation profile lowers the v2 skill's pass rate, so that the cells spread
    // around the threshold and the verdicts do not depend on luck.
    run_demo_with(
        &sandbox.store(),
        &["--sim-profile", "examples/demo/sim-profile.yaml"],
    );
    let batch = only_batch_dir(&sandbox.store());
    let stored = read_json(&batch.join("rollup.json"));
    let stored_matrix = &stored["matrixRepeat"];
    let cells = array(stored_matrix, "cells");
    assert!(
        cells
            .iter()
            .any(|cell| number(&cell["rollup"], "passRate") < 1.0),
        "the profiled demo must have a cell below 100% for a lower threshold to matter: {stored}"
    );

    // Expectations from the stored pass rates (harness-behaviour.md#batch-verdict,
    // harness-behaviour.md#matrix-repeat); the demo allows neither budget stops nor truncation.
    let expected: Vec<bool> = cells
        .iter()
        .map(|cell| rollup_passes(&cell["rollup"], RATE, false))
        .collect();
    let expected_ok = expected.iter().all(|pass| *pass) && !boolean(stored_matrix, "truncated");
    let expected_code = if expected_ok { 0 } else { 1 };

    let out_file = sandbox.path().join("rejudged.json");
    let out = cowork(
        sandbox.path(),
        &[
            "rollup".as_ref(),
            batch.as_os_str(),
            "--min-pass-rate".as_ref(),
            "0.6".as_ref(),
            "--rollup-out".as_ref(),
            out_file.as_os_str(),
            "--output-format".as_ref(),
            "json".as_ref(),
        ],
    );
    out.expect_code(expected_code);

    let rejudged = read_json(&out_file);
    assert_eq!(rejudged["ok"], expected_ok, "{rejudged}");
    assert_eq!(number(&rejudged, "exitCode"), f64::from(expected_code));
    let matrix = &rejudged["matrixRepeat"];
    assert_eq!(boolean(matrix, "anyFail"), !expected_ok, "{rejudged}");
    assert_eq!(
        matrix["cells"], stored_matrix["cells"],
        "re-judging must not change the rollups"
    );
    assert_eq!(number(&rejudged["fleet"], "minPassRate"), RATE);

    let envelope = out.envelope();
    assert_eq!(envelope["ok"], expected_ok);
    assert_eq!(envelope["matrixRepeat"], rejudged["matrixRepeat"]);
    assert_eq!(array(&envelope, "results").len(), 20);
    assert_eq!(envelope["fleet"]["rejudged"], Value::Bool(true));

    for (index, pass) in expected.iter().enumerate() {
        let label = cells[index]["rollup"]["scenario"]
            .as_str()
            .expect("a cell label");
        assert_eq!(
            row_passes(&out, label),
            *pass,
            "cell {index} at --min-pass-rate {RATE}\n{}",
            out.context()
        );
    }
}
