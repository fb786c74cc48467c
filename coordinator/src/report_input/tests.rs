//! Tests of the report loader and renderers on real stored batches of the demo
//! (`tests/fixtures/report/<case>/batches/<id>/`, copied from `cowork run … --executor sim`):
//!
//! - `matrix-repeat`: the demo matrix (2 models × 2 skill versions) with `--repeat 5`;
//! - `files-repeat`: both demo scenarios with `--repeat 4 --stop-on-diverge`: one unit stops
//!   early and two runs are discarded;
//! - `matrix-plain`: the demo matrix without repeat, `--seed 3 --max-cells 3`: one failing cell
//!   and one cell cut by the cap;
//! - `eval`: `cowork eval` of the demo skill against its worse variant on both demo scenarios,
//!   `--runs 3` (per-job `envelope.json` files left out).
//!
//! Expected numbers are taken from the stored rollups and results, never from the renderers.

use std::path::{Path, PathBuf};

use cowork_fabric::embedded::DirArtifactStore;
use cowork_schema::BatchId;
use cowork_schema::ids::UnitRef;
use cowork_schema::registry::{BatchRecord, BatchState};
use cowork_schema::rollup::StopReason;
use quick_xml::events::Event;
use serde_json::Value;

use cowork_core::reduce::{Judging, rollup_passes};
use cowork_core::report::markdown::escape_md;
use cowork_core::report::*;

use super::*;

fn fixture_root(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/report")
        .join(case)
}

/// The one batch id stored under a fixture.
fn fixture_batch(root: &Path) -> BatchId {
    let batches = root.join("batches");
    let mut ids: Vec<String> = std::fs::read_dir(&batches)
        .unwrap_or_else(|e| panic!("listing {}: {e}", batches.display()))
        .map(|entry| {
            entry
                .expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    ids.sort();
    assert_eq!(ids.len(), 1, "one batch per fixture: {ids:?}");
    BatchId::new(&ids[0]).expect("fixture batch ids are valid")
}

async fn load_case(case: &str) -> ReportInput {
    let root = fixture_root(case);
    let batch = fixture_batch(&root);
    load_report_input(&DirArtifactStore::new(&root), &batch)
        .await
        .unwrap_or_else(|e| panic!("loading fixture {case}: {e}"))
}

/// Every `result.json` of a fixture, parsed, keyed by its job path (`c1/r3`).
fn raw_results(case: &str) -> Vec<(String, Value)> {
    let root = fixture_root(case);
    let batch = fixture_batch(&root);
    let jobs = root.join("batches").join(batch.as_str()).join("jobs");
    let mut found = Vec::new();
    let mut stack = vec![jobs.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("listing a fixture dir") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|name| name == "result.json") {
                let job = path
                    .parent()
                    .and_then(|parent| parent.strip_prefix(&jobs).ok())
                    .expect("a result below jobs/")
                    .to_string_lossy()
                    .into_owned();
                let text = std::fs::read_to_string(&path).expect("reading a fixture result");
                found.push((job, serde_json::from_str(&text).expect("fixture JSON")));
            }
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// The HTML report with the files named, not linked.
fn html(input: &ReportInput) -> String {
    render_html(input, &HtmlOptions::default())
}

#[track_caller]
fn assert_contains(text: &str, fragment: &str) {
    assert!(
        text.contains(fragment),
        "expected fragment not found:\n{fragment}\n--- in ---\n{text}"
    );
}

// ---------------------------------------------------------------------------------------------
// Loading.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn load_reads_every_result_in_unit_and_repeat_order() {
    let input = load_case("matrix-repeat").await;
    let order: Vec<(UnitRef, Option<u32>)> = input
        .runs
        .iter()
        .map(|run| (run.unit, run.repeat_index))
        .collect();
    let expected: Vec<(UnitRef, Option<u32>)> = (0..4)
        .flat_map(|cell| (0..5).map(move |r| (UnitRef::Cell(cell), Some(r))))
        .collect();
    assert_eq!(order, expected);
    assert!(input.runs.iter().all(|run| !run.discarded));
    assert!(input.eval.is_none());

    let input = load_case("files-repeat").await;
    let discarded: Vec<(UnitRef, Option<u32>)> = input
        .runs
        .iter()
        .filter(|run| run.discarded)
        .map(|run| (run.unit, run.repeat_index))
        .collect();
    assert_eq!(
        discarded,
        [(UnitRef::File(1), Some(2)), (UnitRef::File(1), Some(3))],
        "the envelope's fleet.discarded names f1/r2 and f1/r3"
    );
}

/// A copy of a fixture in a temp dir, to damage.
fn copied_fixture(case: &str) -> (tempfile::TempDir, BatchId) {
    let root = fixture_root(case);
    let batch = fixture_batch(&root);
    let dir = tempfile::tempdir().expect("temp dir");
    copy_tree(&root, dir.path());
    (dir, batch)
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("creating a dir");
    for entry in std::fs::read_dir(from).expect("listing a fixture dir") {
        let entry = entry.expect("a directory entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copying a fixture file");
        }
    }
}

#[tokio::test]
async fn load_errors_name_the_key() {
    let root = fixture_root("matrix-repeat");
    let unknown = BatchId::new("20000101-000000-000000").expect("valid id");
    let error = load_report_input(&DirArtifactStore::new(&root), &unknown)
        .await
        .expect_err("an unknown batch has no report");
    assert!(error.is_not_found());
    assert_eq!(
        error.to_string(),
        "batch 20000101-000000-000000 not found: batches/20000101-000000-000000/spec.json does not exist"
    );

    // A batch without a rollup is no error any more: it is judged from its stored runs (see
    // `an_interrupted_batch_is_judged_on_what_ran`).

    let (dir, batch) = copied_fixture("matrix-repeat");
    let batch_dir = dir.path().join("batches").join(batch.as_str());
    std::fs::write(batch_dir.join("jobs/c2/r3/result.json"), "{not json").expect("damaging");
    let error = load_report_input(&DirArtifactStore::new(dir.path()), &batch)
        .await
        .expect_err("a damaged result fails the load");
    assert!(matches!(error, ReportError::Malformed { .. }), "{error}");
    assert_contains(
        &error.to_string(),
        &format!("batches/{batch}/jobs/c2/r3/result.json is not a valid result"),
    );
}

// ---------------------------------------------------------------------------------------------
// Job records, interrupted batches, wall time.
// ---------------------------------------------------------------------------------------------

/// The record a worker stores for a job (`schema::event::JobRecord`), as JSON.
fn job_record(outcome: Value, artifacts: &[&str], attempt: u32, generation: u32) -> Value {
    let artifacts: Vec<Value> = artifacts
        .iter()
        .map(|key| serde_json::json!({"key": key, "size": 1, "sha256": "0".repeat(64)}))
        .collect();
    let mut record = serde_json::json!({
        "outcome": outcome,
        "artifacts": artifacts,
        "attempt": attempt,
        "workerId": "w9",
        "harnessVersion": "sim-0.1.0",
        "exitCode": 0,
        "runMs": 42,
    });
    if generation > 0 {
        record["generation"] = Value::from(generation);
    }
    record
}

fn completed_outcome(result: &Value) -> Value {
    let run = cowork_core::verdict::view_with_rederived_verdict(result).expect("a valid result");
    serde_json::to_value(cowork_schema::event::JobOutcome::Completed { run }).expect("serializable")
}

fn write_json(path: &Path, value: &Value) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("creating a directory");
    }
    std::fs::write(path, serde_json::to_vec(value).expect("serializable")).expect("writing");
}

#[tokio::test]
async fn job_files_are_found_through_their_records() {
    let (dir, batch) = copied_fixture("matrix-repeat");
    let jobs = dir.path().join("batches").join(batch.as_str()).join("jobs");
    let prefix = format!("batches/{batch}/jobs");
    // c0/r1: the folded attempt was the second delivery, its files under g0a2/.
    let result: Value = serde_json::from_slice(
        &std::fs::read(jobs.join("c0/r1/result.json")).expect("a fixture result"),
    )
    .expect("JSON");
    std::fs::create_dir_all(jobs.join("c0/r1/g0a2")).expect("attempt dir");
    std::fs::rename(
        jobs.join("c0/r1/result.json"),
        jobs.join("c0/r1/g0a2/result.json"),
    )
    .expect("moving the result");
    let attempt_key = format!("{prefix}/c0/r1/g0a2/result.json");
    write_json(
        &jobs.join("c0/r1/outcome.json"),
        &job_record(completed_outcome(&result), &[&attempt_key], 2, 0),
    );
    // c0/r2: paid for, but its result could not be stored; the record says so.
    std::fs::remove_file(jobs.join("c0/r2/result.json")).expect("removing the result");
    let error = serde_json::json!({"kind": "error", "category": "infra_after_spend",
        "message": "uploading the result failed after 10 min: access denied"});
    write_json(
        &jobs.join("c0/r2/outcome.json"),
        &job_record(error, &[], 1, 0),
    );
    // c0/r3: resumed; the record of generation 1 wins over generation 0's.
    let result_r3: Value = serde_json::from_slice(
        &std::fs::read(jobs.join("c0/r3/result.json")).expect("a fixture result"),
    )
    .expect("JSON");
    let stale = serde_json::json!({"kind": "error", "category": "infra", "message": "bundle"});
    write_json(
        &jobs.join("c0/r3/outcome.json"),
        &job_record(stale, &[], 3, 0),
    );
    let g1_key = format!("{prefix}/c0/r3/g1a1/result.json");
    write_json(&jobs.join("c0/r3/g1a1/result.json"), &result_r3);
    write_json(
        &jobs.join("c0/r3/g1/outcome.json"),
        &job_record(completed_outcome(&result_r3), &[&g1_key], 1, 1),
    );

    let input = load_report_input(&DirArtifactStore::new(dir.path()), &batch)
        .await
        .expect("the batch loads");
    let run = |repeat: u32| {
        input
            .runs
            .iter()
            .find(|run| run.unit == UnitRef::Cell(0) && run.repeat_index == Some(repeat))
            .unwrap_or_else(|| panic!("c0/r{repeat} is loaded"))
    };
    assert_eq!(run(1).result, result);
    assert_eq!(run(1).artifacts, std::slice::from_ref(&attempt_key));
    assert_eq!(run(1).record.as_ref().map(|record| record.attempt), Some(2));
    assert_eq!(
        run(2).outcome,
        RunOutcome::Error {
            category: "infra_after_spend".to_owned(),
            message: "uploading the result failed after 10 min: access denied".to_owned()
        }
    );
    assert!(run(2).result.is_null());
    assert_eq!(run(3).artifacts, std::slice::from_ref(&g1_key));
    assert_eq!(
        run(3).record.as_ref().map(|record| record.generation),
        Some(1)
    );
    // The old shape (no record) still reads: c0/r0 has only its result.json.
    assert_eq!(run(0).artifacts, [format!("{prefix}/c0/r0/result.json")]);

    let page = render_html(
        &input,
        &HtmlOptions {
            links: ArtifactLinks::StoreRelative {
                prefix: "../store/".to_owned(),
            },
        },
    );
    assert_contains(
        &page,
        &format!(
            "<a href=\"../store/{}\" data-artifact=\"{}\">g0a2/result.json</a>",
            escape_attr(&attempt_key),
            escape_attr(&attempt_key)
        ),
    );
    assert_contains(&page, "attempt 2 · worker w9 · harness sim-0.1.0 · exit 0");
    assert_contains(
        &page,
        "<p class=\"errorbox\"><strong>error (infra_after_spend)</strong>: uploading the \
         result failed after 10 min&#58; access denied</p>",
    );
    assert_contains(
        &page,
        "<a class=\"dot error\" href=\"#run-c0-r2\" title=\"r2&#58; error (no result)\"",
    );
    // On the coordinator, the same file links to its artifact route, with the page's token.
    let page = render_html(
        &input,
        &HtmlOptions {
            links: ArtifactLinks::Coordinator {
                token: Some("t&k".to_owned()),
            },
        },
    );
    assert_contains(
        &page,
        "<a href=\"artifacts/jobs/c0/r1/g0a2/result.json?token&#61;t%26k\"",
    );
}

/// `text` as the HTML renderer escapes an attribute (`:` and `=` too).
fn escape_attr(text: &str) -> String {
    text.replace(':', "&#58;").replace('=', "&#61;")
}

#[tokio::test]
async fn an_interrupted_batch_is_judged_on_what_ran() {
    let decided = load_case("matrix-repeat").await;
    let (dir, batch) = copied_fixture("matrix-repeat");
    let batch_dir = dir.path().join("batches").join(batch.as_str());
    // Interrupted: no rollup, no envelope, and four jobs never finished.
    for file in ["rollup.json", "envelope.json"] {
        std::fs::remove_file(batch_dir.join(file)).expect("removing a decided document");
    }
    for job in ["c1/r2", "c1/r3", "c1/r4", "c3/r4"] {
        std::fs::remove_dir_all(batch_dir.join("jobs").join(job)).expect("removing a job");
    }
    let input = load_report_input(&DirArtifactStore::new(dir.path()), &batch)
        .await
        .expect("an interrupted batch still has a report");
    let incomplete = input.incomplete.as_ref().expect("marked incomplete");
    assert_eq!(incomplete.never_ran, ["c1/r2", "c1/r3", "c1/r4", "c3/r4"]);
    // Units that finished are judged exactly as the decided batch judged them.
    let cells = |input: &ReportInput| {
        input
            .rollup
            .matrix_repeat
            .clone()
            .expect("a matrix + repeat batch")
            .cells
    };
    let (now, then) = (cells(&input), cells(&decided));
    assert_eq!(now[0], then[0]);
    assert_eq!(now[2], then[2]);
    // c1 is judged on its first two runs.
    let c1 = now[1].rollup.as_ref().expect("c1 ran");
    assert_eq!((c1.completed, c1.requested), (2, 5));

    let page = html(&input);
    assert_contains(
        &page,
        "<span class=\"verdict incomplete\">INCOMPLETE</span>",
    );
    assert_contains(
        &page,
        "<div class=\"banner incomplete\" id=\"incomplete\" role=\"alert\">",
    );
    assert_contains(
        &page,
        "<p id=\"never-ran\">Never ran: <code>c1/r2</code> <code>c1/r3</code> \
         <code>c1/r4</code> <code>c3/r4</code></p>",
    );
    assert_contains(&page, "data-cell=\"c1\" data-state=\"incomplete\"");
    assert_contains(
        &page,
        "<span class=\"dot not-run\" title=\"r2&#58; not run\"></span>",
    );
    let summary: Value = serde_json::from_str(&render_json(&input)).expect("valid JSON");
    assert_eq!(
        summary["incomplete"]["neverRan"],
        serde_json::json!(["c1/r2", "c1/r3", "c1/r4", "c3/r4"])
    );
    assert_eq!(summary["units"][1]["status"], "incomplete");
    let xml = render_junit(&input);
    assert_eq!(xml.matches("type=\"incomplete\"").count(), 2, "{xml}");
    assert_contains(
        &render_markdown(&input),
        "INCOMPLETE — no rollup was stored",
    );

    // All jobs finished, only the rollup is missing: the judgment equals the stored one.
    let (dir, batch) = copied_fixture("matrix-repeat");
    let batch_dir = dir.path().join("batches").join(batch.as_str());
    std::fs::remove_file(batch_dir.join("rollup.json")).expect("removing the rollup");
    let input = load_report_input(&DirArtifactStore::new(dir.path()), &batch)
        .await
        .expect("loads");
    assert_eq!(
        input.incomplete.as_ref().map(|i| i.never_ran.len()),
        Some(0)
    );
    assert_eq!(input.rollup.matrix_repeat, decided.rollup.matrix_repeat);
    assert_eq!(input.rollup.ok, decided.rollup.ok);
}

#[tokio::test]
async fn wall_time_and_summed_run_time_are_labelled_apart() {
    let input = load_case("matrix-repeat").await;
    let page = html(&input);
    assert_contains(
        &page,
        "<div><dt>wall time</dt><dd>unknown (not recorded for this batch)</dd></div>",
    );
    let summed: f64 = raw_results("matrix-repeat")
        .iter()
        .map(|(_, result)| result["durationMs"].as_f64().expect("a duration"))
        .sum();
    assert_contains(
        &page,
        &format!(
            "<div><dt>summed run time</dt><dd>{} over 20 run(s)</dd></div>",
            seconds(Some(summed))
        ),
    );
    assert!(!page.contains("total run time"), "the old, ambiguous label");
    let xml = render_junit(&input);
    assert_contains(
        &xml,
        &format!(
            "<property name=\"summed_run_time_s\" value=\"{:.3}\"/>",
            summed / 1000.0
        ),
    );
    assert_contains(&xml, "<property name=\"wall_time_s\" value=\"unknown\"/>");

    // With the batch's stats.json, the wall time is known, and it is the suite's time.
    let (dir, batch) = copied_fixture("matrix-repeat");
    let batch_dir = dir.path().join("batches").join(batch.as_str());
    write_json(
        &batch_dir.join("stats.json"),
        &serde_json::json!({"batchId": batch.as_str(), "decidedAtMs": 1, "wallMs": 1234,
            "units": []}),
    );
    let input = load_report_input(&DirArtifactStore::new(dir.path()), &batch)
        .await
        .expect("loads");
    assert_eq!(input.wall_ms, Some(1234));
    assert_contains(&html(&input), "<div><dt>wall time</dt><dd>1.2 s</dd></div>");
    let xml = render_junit(&input);
    assert_contains(
        &xml,
        "failures=\"4\" errors=\"0\" skipped=\"0\" time=\"1.234\">",
    );
    assert_contains(&xml, "<property name=\"wall_time_s\" value=\"1.234\"/>");
}

#[tokio::test]
async fn discarded_runs_and_their_cost_are_shown_in_either_envelope_shape() {
    let input = load_case("files-repeat").await;
    let entries = fleet_value(&input)["discarded"]
        .as_array()
        .expect("discarded entries")
        .clone();
    let spend: f64 = entries
        .iter()
        .map(|entry| entry["costUsd"].as_f64().expect("a cost"))
        .sum();
    let page = html(&input);
    assert_contains(
        &page,
        &format!(
            "<div><dt>discarded runs</dt><dd>2 (spend {}, not in any verdict)</dd></div>",
            usd(Some(spend))
        ),
    );
    let summary: Value = serde_json::from_str(&render_json(&input)).expect("valid JSON");
    assert_eq!(summary["totals"]["discardedRuns"], 2);
    // The shape with a total: `{runs: [...], costUsd}`.
    let mut input = input;
    let mut fleet = fleet_value(&input);
    fleet["discarded"] = serde_json::json!({"runs": entries, "costUsd": 0.5});
    input.envelope.fleet = Some(serde_json::from_value(fleet).expect("any object is a fleet key"));
    assert_contains(
        &html(&input),
        "<div><dt>discarded runs</dt><dd>2 (spend $0.5000, not in any verdict)</dd></div>",
    );
    assert_contains(
        &render_markdown(&input),
        "2 discarded run(s) (spend $0.5000)",
    );
}

// ---------------------------------------------------------------------------------------------
// HTML.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn html_heatmap_cells_show_each_cells_rollup() {
    let input = load_case("matrix-repeat").await;
    let html = html(&input);
    let cells = &input
        .rollup
        .matrix_repeat
        .as_ref()
        .expect("the demo is a matrix + repeat batch")
        .cells;
    assert_eq!(cells.len(), 4);
    let judging = Judging {
        min_pass_rate: input.rollup.fleet.min_pass_rate,
        allow_budget_stop: input.rollup.fleet.allow_budget_stop,
        allow_truncated_matrix: input.rollup.fleet.allow_truncated_matrix,
    };
    for cell in cells {
        let rollup = cell.rollup.as_ref().expect("every demo cell ran");
        let state = if rollup_passes(rollup, &judging) {
            "pass"
        } else {
            "fail"
        };
        // Flaky within one batch: mixed runs whose pass rate straddles the bar (at the demo's
        // bar of 100% no unit is: a failed run puts it below the bar for sure).
        let flaky =
            cowork_core::trend::flaky(rollup.passes, rollup.completed, judging.min_pass_rate);
        assert_contains(
            &html,
            &format!(
                "data-cell=\"c{}\" data-state=\"{state}\" data-pass-rate=\"{}\" data-passes=\"{}\" \
                 data-completed=\"{}\" data-flaky=\"{flaky}\"",
                cell.index,
                serde_json::to_value(rollup.pass_rate).expect("a number"),
                rollup.passes,
                rollup.completed
            ),
        );
        assert_contains(
            &html,
            &format!(
                "<span class=\"frac\">{}/{}</span><span class=\"rate\">{}%</span>",
                rollup.passes,
                rollup.completed,
                (rollup.pass_rate * 100.0).round()
            ),
        );
    }
    assert_eq!(html.matches("data-cell=").count(), 4);
    // The first cell in full: coloured by its verdict (a failing cell is red, here a light red
    // for 4 of 5 passing: lightness 72% + 18% × 0.8), label escaped, linking to its unit's
    // section, its runs as a strip in index order, each linking to its run's section.
    assert_contains(
        &html,
        "<td class=\"cell fail\" data-cell=\"c0\" data-state=\"fail\" data-pass-rate=\"0.8\" \
         data-passes=\"4\" data-completed=\"5\" data-flaky=\"false\" \
         style=\"background-color:hsl(356,78%,86%)\" title=\"csv-report [model&#61;claude-sonnet-4-5, \
         skill_dir&#61;skills/v1/csv-report]\"><a class=\"cellink\" href=\"#unit-c0\">\
         <span class=\"frac\">4/5</span><span class=\"rate\">80%</span><span class=\"mini\">FAIL</span>\
         </a><span class=\"strip\" data-strip=\"c0\">",
    );
    let c0 = &input.rollup.matrix_repeat.as_ref().expect("matrix").cells[0];
    let c0_runs = raw_results("matrix-repeat");
    for index in 0..5 {
        let passed = c0_runs
            .iter()
            .find(|(job, _)| job == &format!("c0/r{index}"))
            .map(|(_, result)| result["verdict"]["pass"] == true)
            .expect("every run of c0 is stored");
        let state = if passed { "pass" } else { "fail" };
        assert_contains(
            &html,
            &format!(
                "<a class=\"dot {state}\" href=\"#run-c0-r{index}\" title=\"r{index}&#58; {state}\" \
                 data-run=\"c0/r{index}\"></a>"
            ),
        );
        assert_contains(
            &html,
            &format!(
                "<article class=\"run {state}\" id=\"run-c0-r{index}\" data-run=\"c0/r{index}\">"
            ),
        );
    }
    assert_eq!(c0.rollup.as_ref().expect("ran").passes, 4);
    assert_contains(
        &html,
        "<section class=\"unit\" id=\"unit-c0\" data-unit=\"c0\">",
    );
    // Rows are baseline × model, columns the skill dirs.
    assert_contains(
        &html,
        "<th>skill_dir&#61;skills/v1/csv-report</th><th>skill_dir&#61;skills/v2/csv-report</th>",
    );
    assert_contains(
        &html,
        "<tr><th class=\"row\">model&#61;claude-sonnet-4-5</th><td class=\"cell fail\" data-cell=\"c0\"",
    );
    assert_contains(
        &html,
        "<tr><th class=\"row\">model&#61;claude-opus-4-8</th><td class=\"cell fail\" data-cell=\"c2\"",
    );
}

#[tokio::test]
async fn html_is_self_contained() {
    for case in ["matrix-repeat", "files-repeat", "matrix-plain", "eval"] {
        let html = html(&load_case(case).await);
        for forbidden in [
            "http://", "https://", "src=", "<script", "url(", "<link", "@import",
        ] {
            assert!(
                !html.to_ascii_lowercase().contains(forbidden),
                "{case}: the report holds {forbidden:?}"
            );
        }
        assert!(html.starts_with("<!DOCTYPE html>\n"), "{case}");
        assert!(html.ends_with("</html>\n"), "{case}");
    }
}

#[tokio::test]
async fn html_shows_simulated_banner_cost_duration_and_failure_reasons() {
    let input = load_case("matrix-repeat").await;
    let html = html(&input);
    assert_contains(
        &html,
        "<div class=\"banner simulated\" id=\"simulated\" role=\"alert\">SIMULATED — 20 of 20 \
         run(s) came from the sim executor, not from cowork-harness (20 folded into the verdicts)\
         &#58; these are not real results</div>",
    );
    // Cost and duration per cell: the rollup's total cost, the results' summed durations.
    let results = raw_results("matrix-repeat");
    let c1_duration: f64 = results
        .iter()
        .filter(|(job, _)| job.starts_with("c1/"))
        .map(|(_, result)| {
            result["durationMs"]
                .as_f64()
                .expect("sim results have durations")
        })
        .sum();
    let c1_cost = input.rollup.matrix_repeat.as_ref().expect("matrix").cells[1]
        .rollup
        .as_ref()
        .expect("ran")
        .total_cost_usd
        .expect("sim results have costs");
    assert_contains(
        &html,
        &format!(
            "<td class=\"num\">{}</td><td class=\"num opt\">{}</td><td class=\"num opt\">{}</td><td class=\"num\">{}</td>",
            usd(Some(c1_cost)),
            usd(Some(c1_cost / 5.0)),
            seconds(Some(c1_duration / 5.0)),
            seconds(Some(c1_duration)),
        ),
    );
    // Failure reasons: counted here from the raw results.
    let count = |key: &str| {
        results
            .iter()
            .flat_map(|(_, result)| result["assertions"].as_array().cloned().unwrap_or_default())
            .filter(|entry| entry["pass"] == false && entry["assertion"].get(key).is_some())
            .count()
    };
    let transcript = count("transcript_matches");
    assert!(
        transcript > 0,
        "the demo has failing transcript_matches runs"
    );
    assert_contains(
        &html,
        &format!(
            "<tr data-reason=\"assertion:transcript_matches\"><td>assertion</td>\
             <td><code>transcript_matches</code></td><td>fail</td><td class=\"num\">{transcript}</td>"
        ),
    );
    let result_errors = results
        .iter()
        .flat_map(|(_, result)| {
            result["verdict"]["signals"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|signal| signal["code"] == "result_error")
        .count();
    assert_contains(
        &html,
        &format!(
            "<tr data-reason=\"signal:result_error\"><td>signal</td><td><code>result_error</code></td>\
             <td>fail</td><td class=\"num\">{result_errors}</td>"
        ),
    );
    assert_contains(
        &html,
        "<p class=\"muted\">No early stop, cell error, truncation or discarded run.</p>",
    );
}

#[tokio::test]
async fn html_without_simulated_runs_has_no_banner() {
    let mut input = load_case("matrix-plain").await;
    input.stored.spec.executor = cowork_schema::batch::ExecutorKind::Harness;
    input.rollup.fleet.simulated_runs = 0;
    input.envelope.fleet = None;
    for run in &mut input.runs {
        if let Some(object) = run.result.as_object_mut() {
            object.remove("simulated");
        }
    }
    // The briefs were made from the results as loaded: made again from the edited ones.
    input.briefs = Default::default();
    let html = html(&input);
    assert!(!html.contains("SIMULATED"), "{html}");
    assert!(!render_markdown(&input).contains("SIMULATED"));
    assert!(render_junit(&input).contains("<property name=\"simulated\" value=\"false\"/>"));
}

#[tokio::test]
async fn html_files_batch_has_a_row_per_scenario_and_its_stops() {
    let input = load_case("files-repeat").await;
    let html = html(&input);
    let rollups = input
        .rollup
        .rollups
        .as_ref()
        .expect("a files + repeat batch");
    assert_eq!(rollups[1].stopped_early, Some(StopReason::Diverged));
    assert_contains(
        &html,
        "<tr><th class=\"row\">skill-triggers</th><td><code>examples/demo/scenarios/skill-triggers.yaml</code></td>\
         <td class=\"cell fail\" data-cell=\"f1\" data-state=\"fail\" data-pass-rate=\"0.5\" \
         data-passes=\"1\" data-completed=\"2\" data-flaky=\"false\"",
    );
    // The strip shows the two folded runs and the two discarded ones, in index order.
    assert_contains(
        &html,
        "<span class=\"tag stop\">stopped: diverged</span>\
         <span class=\"strip\" data-strip=\"f1\"><a class=\"dot pass\" href=\"#run-f1-r0\" \
         title=\"r0&#58; pass\" data-run=\"f1/r0\"></a><a class=\"dot fail\" href=\"#run-f1-r1\" \
         title=\"r1&#58; fail\" data-run=\"f1/r1\"></a><a class=\"dot discarded\" \
         href=\"#run-f1-r2\" title=\"r2&#58; discarded (finished after the unit was decided)\" \
         data-run=\"f1/r2\"></a><a class=\"dot discarded\" href=\"#run-f1-r3\"",
    );
    assert_contains(
        &html,
        "<article class=\"run discarded\" id=\"run-f1-r3\" data-run=\"f1/r3\">",
    );
    assert_contains(
        &html,
        "<li data-scope=\"f1\">skill-triggers&#58; stopped early (diverged) after 2/4 runs</li>",
    );
    // The two discarded runs are disclosed with their spend (from the stored envelope).
    let spend: f64 = fleet_value(&input)["discarded"]
        .as_array()
        .expect("discarded entries")
        .iter()
        .map(|entry| entry["costUsd"].as_f64().expect("a cost"))
        .sum();
    assert_contains(
        &html,
        &format!(
            "<li data-scope=\"batch\">2 run(s) finished after their unit was decided and were \
             discarded (not folded; spend {})</li>",
            usd(Some(spend))
        ),
    );
}

#[tokio::test]
async fn html_plain_matrix_shows_pass_fail_cells_and_the_cut_cell() {
    let input = load_case("matrix-plain").await;
    let html = html(&input);
    let matrix = input.rollup.matrix.as_ref().expect("a plain matrix");
    assert!(matrix.truncated);
    for cell in &matrix.cells {
        let (state, rate) = if cell.pass { ("pass", 1) } else { ("fail", 0) };
        assert_contains(
            &html,
            &format!(
                "data-cell=\"c{}\" data-state=\"{state}\" data-pass-rate=\"{rate}\" \
                 data-passes=\"{rate}\" data-completed=\"1\" data-flaky=\"false\"",
                cell.index
            ),
        );
    }
    // The fourth combination was cut by --max-cells 3: an empty slot, no data-cell.
    assert_eq!(html.matches("data-cell=").count(), 3);
    assert_contains(
        &html,
        "<td class=\"cell empty\" data-state=\"empty\"><span class=\"frac\">—</span></td>",
    );
    assert_contains(
        &html,
        "<li data-scope=\"batch\">matrix truncated by --max-cells&#58; ran 3 of 4 cells, 1 not run; \
         the batch fails because of it</li>",
    );
}

#[tokio::test]
async fn renderers_are_deterministic() {
    for case in ["matrix-repeat", "files-repeat", "matrix-plain", "eval"] {
        let input = load_case(case).await;
        assert_eq!(html(&input), html(&input), "{case}");
        assert_eq!(render_junit(&input), render_junit(&input), "{case}");
        assert_eq!(render_markdown(&input), render_markdown(&input), "{case}");
        assert_eq!(render_json(&input), render_json(&input), "{case}");
        // A second load gives the same bytes too.
        assert_eq!(html(&load_case(case).await), html(&input));
    }
}

// ---------------------------------------------------------------------------------------------
// JUnit.
// ---------------------------------------------------------------------------------------------

/// An element of a parsed XML document.
#[derive(Debug, Default)]
struct XmlElement {
    name: String,
    attributes: Vec<(String, String)>,
    children: Vec<XmlElement>,
    text: String,
}

impl XmlElement {
    fn attribute(&self, name: &str) -> &str {
        self.attributes
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
            .unwrap_or_else(|| panic!("<{}> has no attribute {name}: {self:?}", self.name))
    }

    fn children_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a XmlElement> {
        self.children.iter().filter(move |child| child.name == name)
    }
}

fn element_of(start: &quick_xml::events::BytesStart<'_>) -> XmlElement {
    let attributes = start
        .attributes()
        .map(|attribute| {
            let attribute = attribute.expect("a well-formed attribute");
            let value = attribute
                .normalized_value(quick_xml::XmlVersion::Explicit1_0)
                .expect("an attribute value with valid references");
            (
                String::from_utf8_lossy(attribute.key.as_ref()).into_owned(),
                value.into_owned(),
            )
        })
        .collect();
    XmlElement {
        name: String::from_utf8_lossy(start.name().as_ref()).into_owned(),
        attributes,
        ..XmlElement::default()
    }
}

/// Parses `xml` with a real XML parser: it must be well-formed (matching end tags, one root,
/// valid references) or this panics.
fn parse_xml(xml: &str) -> XmlElement {
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut stack: Vec<XmlElement> = Vec::new();
    let mut root: Option<XmlElement> = None;
    loop {
        let event = reader.read_event().unwrap_or_else(|e| {
            panic!(
                "not well-formed at {}: {e}\n{xml}",
                reader.buffer_position()
            )
        });
        match event {
            Event::Start(start) => stack.push(element_of(&start)),
            Event::Empty(start) => {
                let element = element_of(&start);
                match stack.last_mut() {
                    Some(parent) => parent.children.push(element),
                    None => assert!(root.replace(element).is_none(), "two roots"),
                }
            }
            Event::End(_) => {
                let element = stack.pop().expect("an end tag closes an open element");
                match stack.last_mut() {
                    Some(parent) => parent.children.push(element),
                    None => assert!(root.replace(element).is_none(), "two roots"),
                }
            }
            Event::Text(text) => {
                if let Some(open) = stack.last_mut() {
                    open.text.push_str(&text.decode().expect("utf-8 text"));
                }
            }
            Event::GeneralRef(reference) => {
                let resolved = match reference.resolve_char_ref().expect("a valid char ref") {
                    Some(c) => c.to_string(),
                    None => {
                        let name = reference.decode().expect("utf-8 name");
                        quick_xml::escape::resolve_predefined_entity(&name)
                            .unwrap_or_else(|| panic!("unknown entity &{name};"))
                            .to_owned()
                    }
                };
                if let Some(open) = stack.last_mut() {
                    open.text.push_str(&resolved);
                }
            }
            Event::Eof => break,
            Event::Decl(_)
            | Event::Comment(_)
            | Event::CData(_)
            | Event::PI(_)
            | Event::DocType(_) => {}
        }
    }
    assert!(stack.is_empty(), "unclosed elements: {stack:?}");
    root.expect("a root element")
}

#[tokio::test]
async fn junit_has_one_testcase_per_cell_with_failing_messages() {
    let input = load_case("matrix-repeat").await;
    let xml = render_junit(&input);
    let root = parse_xml(&xml);
    assert_eq!(root.name, "testsuites");
    let suites: Vec<&XmlElement> = root.children_named("testsuite").collect();
    assert_eq!(suites.len(), 1, "one testsuite per batch");
    let suite = suites[0];
    assert_eq!(
        suite.attribute("name"),
        format!("cowork batch {} [SIMULATED]", input.stored.batch_id)
    );
    let cases: Vec<&XmlElement> = suite.children_named("testcase").collect();
    let plan_labels: Vec<&str> = input
        .stored
        .plan
        .units
        .iter()
        .map(|unit| unit.label.as_str())
        .collect();
    let case_names: Vec<&str> = cases.iter().map(|case| case.attribute("name")).collect();
    assert_eq!(case_names, plan_labels);
    let results = raw_results("matrix-repeat");
    let judging = Judging {
        min_pass_rate: input.rollup.fleet.min_pass_rate,
        allow_budget_stop: false,
        allow_truncated_matrix: false,
    };
    let mut n_failing = 0;
    for (case, cell) in cases
        .iter()
        .zip(&input.rollup.matrix_repeat.as_ref().expect("matrix").cells)
    {
        let rollup = cell.rollup.as_ref().expect("ran");
        // Time: the cell's summed durations, in seconds.
        let duration: f64 = results
            .iter()
            .filter(|(job, _)| job.starts_with(&format!("c{}/", cell.index)))
            .map(|(_, result)| result["durationMs"].as_f64().expect("a duration"))
            .sum();
        assert_eq!(case.attribute("time"), format!("{:.3}", duration / 1000.0));
        let failures: Vec<&XmlElement> = case.children_named("failure").collect();
        if rollup_passes(rollup, &judging) {
            assert!(failures.is_empty());
            continue;
        }
        n_failing += 1;
        assert_eq!(failures.len(), 1);
        let message = failures[0].attribute("message");
        // Every failing assertion message of the cell's runs is carried.
        for (job, result) in &results {
            if !job.starts_with(&format!("c{}/", cell.index)) {
                continue;
            }
            for entry in result["assertions"].as_array().expect("assertions") {
                if entry["pass"] == false {
                    let text = entry["message"].as_str().expect("sim messages");
                    assert!(message.contains(text), "{message:?} lacks {text:?}");
                    assert!(failures[0].text.contains(text));
                }
            }
        }
        assert!(message.starts_with(&format!(
            "{}/{} run(s) passed",
            rollup.passes, rollup.completed
        )));
    }
    assert_eq!(suite.attribute("tests"), "4");
    assert_eq!(suite.attribute("failures"), n_failing.to_string());
    assert_eq!(suite.attribute("errors"), "0");
    assert_eq!(suite.attribute("skipped"), "0");
}

#[tokio::test]
async fn junit_skips_cut_cells_and_escapes_every_message() {
    let mut input = load_case("matrix-plain").await;
    // A hostile message: markup, quotes, a newline and a control character.
    let hostile = "bad <tag> & \"quotes\" 'single'\nline two \u{1b}[31m";
    let failing = input
        .runs
        .iter_mut()
        .find(|run| run.result["verdict"]["pass"] == false)
        .expect("the fixture has a failing cell");
    failing.result["verdict"]["failures"][0]["message"] = Value::from(hostile);
    input.briefs = Default::default();
    let xml = render_junit(&input);
    let root = parse_xml(&xml);
    let suite = root.children_named("testsuite").next().expect("a suite");
    assert_eq!(suite.attribute("tests"), "4");
    assert_eq!(suite.attribute("failures"), "1");
    assert_eq!(suite.attribute("skipped"), "1");
    let cut = suite
        .children_named("testcase")
        .find(|case| case.attribute("name") == "cell 3 (not run)")
        .expect("the cut cell is a testcase");
    assert_eq!(
        cut.children_named("skipped")
            .next()
            .expect("skipped")
            .attribute("message"),
        "matrix truncated by --max-cells"
    );
    let failure = suite
        .children_named("testcase")
        .flat_map(|case| case.children_named("failure"))
        .next()
        .expect("a failure");
    let expected = hostile.replace('\u{1b}', "\u{FFFD}");
    assert!(
        failure.attribute("message").contains(&expected),
        "{:?}",
        failure.attribute("message")
    );
    assert!(failure.text.contains(&expected), "{:?}", failure.text);
}

#[tokio::test]
async fn junit_files_batch_fails_the_stopped_unit() {
    let input = load_case("files-repeat").await;
    let root = parse_xml(&render_junit(&input));
    let suite = root.children_named("testsuite").next().expect("a suite");
    let cases: Vec<&XmlElement> = suite.children_named("testcase").collect();
    assert_eq!(cases.len(), 2);
    assert!(cases[0].children.is_empty(), "csv-report passed 4/4");
    let failure = cases[1]
        .children_named("failure")
        .next()
        .expect("a failure");
    assert!(
        failure
            .attribute("message")
            .starts_with("1/2 run(s) passed (50%, min 100%); stopped early: diverged: "),
        "{}",
        failure.attribute("message")
    );
}

// ---------------------------------------------------------------------------------------------
// Markdown and JSON.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn markdown_has_verdict_warning_units_and_reasons() {
    let input = load_case("matrix-repeat").await;
    let markdown = render_markdown(&input);
    assert!(markdown.starts_with(&format!(
        "## ❌ cowork batch `{}`: FAIL (exit 1)\n\n> [!WARNING]\n> **SIMULATED — 20 of 20 run(s) \
         came from the sim executor, not from cowork-harness (20 folded into the verdicts)",
        input.stored.batch_id
    )));
    let cell = &input.rollup.matrix_repeat.as_ref().expect("matrix").cells[1];
    let rollup = cell.rollup.as_ref().expect("ran");
    assert_contains(
        &markdown,
        &format!(
            "| `c1` {} | {}/{} | {}% | {} | FAIL |\n",
            escape_md(&rollup.scenario),
            rollup.completed,
            rollup.requested,
            (rollup.pass_rate * 100.0).round(),
            usd(rollup.total_cost_usd)
        ),
    );
    assert_contains(
        &markdown,
        "| `c1` csv-report \\[model=claude-sonnet-4-5, skill\\_dir=skills/v2/csv-report\\] | 5/5 | 20% |",
    );
    assert_contains(
        &markdown,
        "### Top failure reasons\n\n| reason | severity | occurrences | runs | units | example |\n",
    );
    assert_contains(&markdown, "| assertion transcript\\_matches | fail |");
}

#[tokio::test]
async fn json_summary_matches_the_rollups() {
    let input = load_case("files-repeat").await;
    let text = render_json(&input);
    assert!(
        text.ends_with('\n') && !text.trim_end().contains('\n'),
        "one line"
    );
    let summary: Value = serde_json::from_str(&text).expect("valid JSON");
    assert_eq!(summary["batchId"], input.stored.batch_id.as_str());
    assert_eq!(summary["simulated"], true);
    assert_eq!(summary["ok"], false);
    assert_eq!(summary["exitCode"], 1);
    assert_eq!(summary["unitKind"], "scenario");
    let units = summary["units"].as_array().expect("units");
    let rollups = input.rollup.rollups.as_ref().expect("rollups");
    assert_eq!(units.len(), rollups.len());
    for (unit, rollup) in units.iter().zip(rollups) {
        assert_eq!(unit["label"], rollup.scenario.as_str());
        assert_eq!(unit["completed"], rollup.completed);
        assert_eq!(unit["passes"], rollup.passes);
        assert_eq!(unit["passRate"].as_f64(), Some(rollup.pass_rate));
        assert_eq!(
            unit["costUsd"].as_f64(),
            rollup.total_cost_usd,
            "{}",
            rollup.scenario
        );
    }
    assert_eq!(units[1]["stoppedEarly"], "diverged");
    // 1 of 2 runs passed: below a bar of 100% for sure, not flaky; against a bar of 50% the
    // two runs cannot tell, flaky.
    assert_eq!(units[1]["flaky"], false);
    let mut lowered = load_case("files-repeat").await;
    lowered.rollup.fleet.min_pass_rate = 0.5;
    let summary: Value = serde_json::from_str(&render_json(&lowered)).expect("valid JSON");
    assert_eq!(summary["units"][1]["flaky"], true);
    // Discarded runs are not folded: 4 + 2 runs, not 8.
    assert_eq!(summary["totals"]["runs"], 6);
    let reasons = summary["failureReasons"].as_array().expect("reasons");
    assert_eq!(reasons[0]["kind"], "assertion");
    assert_eq!(reasons[0]["key"], "tool_called");
    assert_eq!(reasons[0]["occurrences"], 1);
    assert_eq!(reasons[0]["units"], serde_json::json!(["f1"]));
}

// ---------------------------------------------------------------------------------------------
// Eval hook and batch list.
// ---------------------------------------------------------------------------------------------

fn eval_section() -> EvalSection {
    let arm = |passes: u64, completed: u64, cost: f64| EvalArm {
        passes,
        completed,
        pass_rate: passes as f64 / completed as f64,
        cost_usd: Some(cost),
        whole_cost_usd: None,
    };
    EvalSection {
        arm_a: "skills/v1/csv-report".to_owned(),
        arm_b: "skills/v2/csv-report".to_owned(),
        alpha: 0.05,
        confidence: 0.95,
        decision_rule: "B worse when p < alpha and A-only > B-only".to_owned(),
        interval_method: "exact conditional interval".to_owned(),
        p_sentence: "p < 0.0001: a difference at least this large would appear by chance less \
                     than 0.01% of the time if A and B passed equally often"
            .to_owned(),
        sensitivity_sentence: Some(
            "with 10 runs per arm a difference under 60 points cannot be told from noise"
                .to_owned(),
        ),
        power_sentence: None,
        verdict_words: "B worse".to_owned(),
        rows: vec![EvalRow {
            scope: "overall".to_owned(),
            arm_a: arm(27, 30, 1.5),
            arm_b: arm(9, 30, 1.25),
            diff: -0.6,
            ci_low: -0.8,
            ci_high: -0.4,
            a_only_passes: 18,
            b_only_passes: 0,
            p_value: 0.0000076,
            verdict: "B worse".to_owned(),
            excluded_pairs: 0,
            pairs: 30,
            min_detectable_diff: Some(0.2),
        }],
        ranking: Vec::new(),
    }
}

#[tokio::test]
async fn eval_section_is_rendered_from_the_hook() {
    let mut input = load_case("matrix-repeat").await;
    assert!(!html(&input).contains("id=\"eval\""));
    input.eval = Some(eval_section());
    let html = html(&input);
    assert_contains(
        &html,
        "<tr data-scope=\"overall\"><td>overall</td><td class=\"num\">90% (27/30)</td>\
         <td class=\"num\">30% (9/30)</td><td class=\"num\">-60</td>\
         <td class=\"num\">[-80, -40]</td><td class=\"num opt\">18 / 0</td>\
         <td class=\"num\">&lt; 0.0001</td><td class=\"num opt\">20 points</td>\
         <td><strong>B worse</strong></td>",
    );
    // The A/B result leads: before the facts and the heatmap, with p and the sensitivity in
    // words.
    let lead = html.find("<section id=\"eval\"").expect("the A/B section");
    assert!(lead < html.find("<dl class=\"facts\">").expect("facts"));
    assert!(lead < html.find("<section id=\"heatmap\">").expect("heatmap"));
    assert_contains(
        &html,
        "<h2>A/B result: <span class=\"verdict b-worse\">B worse</span></h2>",
    );
    assert_contains(
        &html,
        "<p class=\"headline\">B − A = <strong>-60 points</strong> [-80, -40] over 30 \
         complete pairs",
    );
    assert_contains(
        &html,
        "less than 0.01% of the time if A and B passed equally often",
    );
    assert_contains(
        &html,
        "a difference under 60 points cannot be told from noise",
    );
    let summary: Value = serde_json::from_str(&render_json(&input)).expect("valid JSON");
    assert_eq!(summary["eval"]["rows"][0]["verdict"], "B worse");
    assert_eq!(summary["eval"]["rows"][0]["aOnlyPasses"], 18);
    let markdown = render_markdown(&input);
    assert_contains(
        &markdown,
        "### Eval A/B\n\nA = skills/v1/csv-report, B = skills/v2/csv-report: B worse (B − A = -60 \
         points, interval [-80, -40], p = < 0.0001, alpha 0.05)",
    );
    assert_contains(
        &render_junit(&input),
        "<testcase name=\"A/B: skills/v2/csv-report vs skills/v1/csv-report\" classname=\"cowork.eval\"",
    );
}

#[tokio::test]
async fn an_eval_report_leads_with_the_ab_result_and_judges_arms_as_arms() {
    let input = load_case("eval").await;
    let eval = input
        .eval
        .as_ref()
        .expect("the eval batch's eval.json is loaded");
    let overall = eval.rows.last().expect("an overall row");
    let page = html(&input);
    // The title and header name the eval and its A/B verdict, not the arms' min-pass-rate FAIL.
    assert_contains(
        &page,
        &format!(
            "<h1>cowork eval <code>{}</code> <span class=\"verdict {}\">{}</span></h1>",
            input.stored.batch_id,
            match overall.verdict.as_str() {
                "B worse" => "b-worse",
                "B better" => "b-better",
                _ => "no-difference",
            },
            overall.verdict
        ),
    );
    assert!(
        !page.contains("COMMAND"),
        "no `command run` fact for an eval"
    );
    let lead = page.find("<section id=\"eval\"").expect("the A/B section");
    assert!(lead < page.find("<section id=\"heatmap\">").expect("heatmap"));
    // Each scenario's row names its own file; both arms sit side by side, as arms.
    let files = &input.stored.spec.scenario_files;
    assert_eq!(files.len(), 2);
    for (scenario, file) in ["csv-report", "skill-triggers"].iter().zip(files) {
        assert_contains(
            &page,
            &format!(
                "<tr><th class=\"row\">{scenario}</th><td><code>{}</code></td><td class=\"cell arm\"",
                escape_attr(file)
            ),
        );
    }
    assert!(file_of_row(&page, "csv-report").ends_with("csv-report.yaml"));
    assert!(file_of_row(&page, "skill-triggers").ends_with("skill-triggers.yaml"));
    assert_eq!(page.matches("data-state=\"arm\"").count(), 4);
    assert!(
        !page.contains("<span class=\"mini\">FAIL"),
        "arms carry no FAIL badge"
    );
    // JUnit: the arms pass as testcases; the A/B verdict is its own testcase.
    let xml = render_junit(&input);
    let root = parse_xml(&xml);
    let suite = root.children_named("testsuite").next().expect("a suite");
    let cases: Vec<&XmlElement> = suite.children_named("testcase").collect();
    assert_eq!(cases.len(), 5, "four arms and the A/B verdict");
    let ab = cases.last().expect("the A/B testcase");
    assert_eq!(ab.attribute("classname"), "cowork.eval");
    let failing = cases
        .iter()
        .filter(|case| case.children_named("failure").next().is_some())
        .count();
    assert_eq!(failing, usize::from(overall.verdict == "B worse"));
    // Markdown: two scenarios in two arms are two scenarios (it said "4 scenario(s)"), and the
    // arms are not judged at a min pass rate.
    let markdown = render_markdown(&input);
    let runs = input.stored.plan.repeat.unwrap_or(1);
    assert_contains(
        &markdown,
        &format!(" · 2 scenario(s) × 2 arms × {runs} run(s) · "),
    );
    assert!(!markdown.contains("min pass rate"), "{markdown}");
}

/// The file cell of a heatmap row of an eval report.
fn file_of_row<'a>(page: &'a str, scenario: &str) -> &'a str {
    let row = format!("<tr><th class=\"row\">{scenario}</th><td><code>");
    let start = page.find(&row).expect("the row") + row.len();
    let end = page[start..].find("</code>").expect("the file cell") + start;
    &page[start..end]
}

/// A record as the registry stores it (read from JSON, so optional fields keep their defaults).
fn record(id: &str, state: BatchState, ok: Option<bool>) -> BatchRecord {
    let mut value = serde_json::json!({
        "batchId": id,
        "state": state,
        "specSha256": "0".repeat(64),
        "nJobs": 20,
        "createdAtMs": 0,
        "updatedAtMs": 0,
    });
    if let Some(ok) = ok {
        value["ok"] = Value::from(ok);
        value["exitCode"] = Value::from(if ok { 0 } else { 1 });
    }
    serde_json::from_value(value).expect("a valid batch record")
}

#[test]
fn batch_list_links_each_done_batch_to_its_reports() {
    let records = [
        record("20261130-010101-aaaaaa", BatchState::Done, Some(false)),
        record("20261130-020202-bbbbbb", BatchState::Running, None),
    ];
    let page = render_batch_list(&records, Some("t o&k=n"));
    // Newest first.
    let running = page
        .find("data-batch=\"20261130-020202-bbbbbb\"")
        .expect("listed");
    let done = page
        .find("data-batch=\"20261130-010101-aaaaaa\"")
        .expect("listed");
    assert!(running < done);
    assert_contains(
        &page,
        "<a href=\"batches/20261130-010101-aaaaaa/report?format&#61;html&amp;token&#61;t%20o%26k%3Dn\" \
         data-format=\"html\">html</a>",
    );
    assert_contains(
        &page,
        "<td>done</td><td><span class=\"verdict fail\">FAIL</span> exit 1</td>",
    );
    assert_contains(
        &page,
        "<td>running</td><td><span class=\"muted\">-</span></td>",
    );
    assert!(!page.contains("http"), "{page}");
    let without_token = render_batch_list(&records, None);
    assert_contains(
        &without_token,
        "href=\"batches/20261130-010101-aaaaaa/report?format&#61;junit\"",
    );
}

/// The envelope's `fleet` key as JSON, for tests that edit or index it.
fn fleet_value(input: &ReportInput) -> Value {
    serde_json::to_value(&input.envelope.fleet).expect("a fleet key serializes")
}
