//! Tests of the report loader and renderers on real stored batches of the demo
//! (`tests/fixtures/report/<case>/batches/<id>/`, copied from `cowork run … --executor sim`):
//!
//! - `matrix-repeat`: the demo matrix (2 models × 2 skill versions) with `--repeat 5`;
//! - `files-repeat`: both demo scenarios with `--repeat 4 --stop-on-diverge`: one unit stops
//!   early and two runs are discarded;
//! - `matrix-plain`: the demo matrix without repeat, `--seed 3 --max-cells 3`: one failing cell
//!   and one cell cut by the cap.
//!
//! Expected numbers are taken from the stored rollups and results, never from the renderers.

use std::path::{Path, PathBuf};

use cowork_fabric::embedded::DirArtifactStore;
use cowork_schema::BatchId;
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

    let (dir, batch) = copied_fixture("matrix-repeat");
    let batch_dir = dir.path().join("batches").join(batch.as_str());
    std::fs::remove_file(batch_dir.join("rollup.json")).expect("removing the rollup");
    let error = load_report_input(&DirArtifactStore::new(dir.path()), &batch)
        .await
        .expect_err("a batch without rollup is not decided");
    assert!(matches!(error, ReportError::NotDecided { .. }), "{error}");
    assert_contains(&error.to_string(), &format!("batches/{batch}/rollup.json"));

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
// HTML.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn html_heatmap_cells_show_each_cells_rollup() {
    let input = load_case("matrix-repeat").await;
    let html = render_html(&input);
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
        let flaky = rollup.passes > 0 && rollup.passes < rollup.completed;
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
    // The first cell in full: color from its pass rate (0.8 → hue 96), label escaped.
    assert_contains(
        &html,
        "<td class=\"cell fail\" data-cell=\"c0\" data-state=\"fail\" data-pass-rate=\"0.8\" \
         data-passes=\"4\" data-completed=\"5\" data-flaky=\"true\" \
         style=\"background-color:hsl(96,72%,80%)\" title=\"csv-report [model&#61;claude-sonnet-4-5, \
         skill_dir&#61;skills/v1/csv-report]\"><span class=\"frac\">4/5</span>\
         <span class=\"rate\">80%</span><span class=\"mini\">FAIL</span>\
         <span class=\"tag flaky\">flaky</span></td>",
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
    for case in ["matrix-repeat", "files-repeat", "matrix-plain"] {
        let html = render_html(&load_case(case).await);
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
    let html = render_html(&input);
    assert_contains(
        &html,
        "<div class=\"banner simulated\" id=\"simulated\" role=\"alert\">SIMULATED — 20 of 20 \
         folded run(s) came from the sim executor, not from cowork-harness&#58; these are not real \
         results</div>",
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
            "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>",
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
    input.envelope.fleet = Value::Null;
    for run in &mut input.runs {
        if let Some(object) = run.result.as_object_mut() {
            object.remove("simulated");
        }
    }
    let html = render_html(&input);
    assert!(!html.contains("SIMULATED"), "{html}");
    assert!(!render_markdown(&input).contains("SIMULATED"));
    assert!(render_junit(&input).contains("<property name=\"simulated\" value=\"false\"/>"));
}

#[tokio::test]
async fn html_files_batch_has_a_row_per_scenario_and_its_stops() {
    let input = load_case("files-repeat").await;
    let html = render_html(&input);
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
         data-passes=\"1\" data-completed=\"2\" data-flaky=\"true\"",
    );
    assert_contains(
        &html,
        "<span class=\"tag flaky\">flaky</span><span class=\"tag stop\">stopped: diverged</span></td>",
    );
    assert_contains(
        &html,
        "<li data-scope=\"f1\">skill-triggers&#58; stopped early (diverged) after 2/4 runs</li>",
    );
    // The two discarded runs are disclosed with their spend (from the stored envelope).
    let spend: f64 = input.envelope.fleet["discarded"]
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
    let html = render_html(&input);
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
    for case in ["matrix-repeat", "files-repeat", "matrix-plain"] {
        let input = load_case(case).await;
        assert_eq!(render_html(&input), render_html(&input), "{case}");
        assert_eq!(render_junit(&input), render_junit(&input), "{case}");
        assert_eq!(render_markdown(&input), render_markdown(&input), "{case}");
        assert_eq!(render_json(&input), render_json(&input), "{case}");
        // A second load gives the same bytes too.
        assert_eq!(render_html(&load_case(case).await), render_html(&input));
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
        "## ❌ cowork batch `{}`: FAIL (exit 1)\n\n> [!WARNING]\n> **SIMULATED — 20 of 20 folded run(s)",
        input.stored.batch_id
    )));
    let cell = &input.rollup.matrix_repeat.as_ref().expect("matrix").cells[1];
    let rollup = cell.rollup.as_ref().expect("ran");
    assert_contains(
        &markdown,
        &format!(
            "| `c1` {} | {}/{} | {}% (flaky) | {} | FAIL |\n",
            escape_md(&rollup.scenario),
            rollup.completed,
            rollup.requested,
            (rollup.pass_rate * 100.0).round(),
            usd(rollup.total_cost_usd)
        ),
    );
    assert_contains(
        &markdown,
        "| `c1` csv-report \\[model=claude-sonnet-4-5, skill\\_dir=skills/v2/csv-report\\] | 5/5 | 20% (flaky) |",
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
    assert_eq!(units[1]["flaky"], true);
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
    };
    EvalSection {
        arm_a: "skills/v1/csv-report".to_owned(),
        arm_b: "skills/v2/csv-report".to_owned(),
        alpha: 0.05,
        confidence: 0.95,
        decision_rule: "B worse when p < alpha and A-only > B-only".to_owned(),
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
        }],
    }
}

#[tokio::test]
async fn eval_section_is_rendered_from_the_hook() {
    let mut input = load_case("matrix-repeat").await;
    assert!(!render_html(&input).contains("id=\"eval\""));
    input.eval = Some(eval_section());
    let html = render_html(&input);
    assert_contains(
        &html,
        "<tr data-scope=\"overall\"><td>overall</td><td class=\"num\">90% (27/30)</td>\
         <td class=\"num\">30% (9/30)</td><td class=\"num\">-0.600</td>\
         <td class=\"num\">[-0.800, -0.400]</td><td class=\"num\">18 / 0</td>\
         <td class=\"num\">0.0000</td><td><strong>B worse</strong></td>",
    );
    let summary: Value = serde_json::from_str(&render_json(&input)).expect("valid JSON");
    assert_eq!(summary["eval"]["rows"][0]["verdict"], "B worse");
    assert_eq!(summary["eval"]["rows"][0]["aOnlyPasses"], 18);
    assert_contains(
        &render_markdown(&input),
        "### Eval A/B\n\nA = skills/v1/csv-report, B = skills/v2/csv-report: B worse (B − A = -0.600",
    );
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
