//! Planner tests, named after the reference test cases (harness-behaviour.md#test-cases) where
//! one applies. Everything is built
//! in memory: the planner does no IO.

use std::collections::BTreeSet;
use std::path::Path;

use cowork_schema::batch::{BatchFlags, BatchMode, ExecutorKind, OnUnanswered};
use cowork_schema::ids::{BatchId, UnitRef};
use cowork_schema::job::{JobCommand, Tier};
use cowork_schema::matrix::MatrixFile;
use cowork_schema::scenario::Scenario;
use cowork_schema::session::Session;

use super::flags::{FlagError, RawFlags, js_number, validate_flags};
use super::materialize::{normalize_rel, relative_path};
use super::*;
use crate::prepared::{PreparedBatch, PreparedMatrix, PreparedScenario, PreparedSession};

// ---------------------------------------------------------------------------------------------
// Builders

fn prepared_scenario(rel: &str, text: &str, session: Option<(&str, &str)>) -> PreparedScenario {
    let scenario = Scenario::from_yaml(text, Path::new(rel)).expect("test scenario is valid");
    let session = session.map(|(rel, text)| PreparedSession {
        rel_path: rel.to_owned(),
        session: Session::from_yaml(text, Path::new(rel)).expect("test session is valid"),
    });
    PreparedScenario {
        rel_path: rel.to_owned(),
        name: scenario.effective_name(Path::new(rel)),
        scenario,
        session,
    }
}

fn files_batch(scenarios: Vec<PreparedScenario>) -> PreparedBatch {
    let files = scenarios.iter().map(|s| s.rel_path.clone()).collect();
    PreparedBatch {
        root: "/bundle".into(),
        scenarios,
        matrix: None,
        files,
        target: ".".to_owned(),
    }
}

/// A matrix batch over one scenario; `skill_dirs` gives (declared, resolved) pairs.
fn matrix_batch(
    scenario: PreparedScenario,
    matrix_text: &str,
    skill_dirs: &[(&str, &str)],
) -> PreparedBatch {
    let file =
        MatrixFile::from_yaml(matrix_text, Path::new("m.yaml")).expect("test matrix is valid");
    let mut batch = files_batch(vec![scenario]);
    batch.files.insert("matrices/m.yaml".to_owned());
    batch.matrix = Some(PreparedMatrix {
        rel_path: "matrices/m.yaml".to_owned(),
        file,
        skill_dirs: skill_dirs
            .iter()
            .map(|(declared, resolved)| ((*declared).to_owned(), (*resolved).to_owned()))
            .collect(),
    });
    batch
}

const SCENARIO: &str = "prompt: p\nbaseline: latest\nsession: ../sessions/s.yaml\n";
const SESSION: &str = "model: m0\nplugins:\n  enabled: [k@local]\n  local_plugins:\n    - ../skills/k\nuploads: [../data/a.csv]\n";

fn simple_scenario() -> PreparedScenario {
    prepared_scenario(
        "scenarios/t.yaml",
        SCENARIO,
        Some(("sessions/s.yaml", SESSION)),
    )
}

fn flags() -> BatchFlags {
    BatchFlags::default()
}

fn lay_out(batch: &PreparedBatch, flags: &BatchFlags) -> PlanLayout {
    plan_units(batch, flags, BatchMode::Run).expect("test batch plans")
}

fn complete(layout: PlanLayout) -> Plan {
    Plan::new(
        layout.clone(),
        PlanInput {
            batch_id: BatchId::new("b1").expect("valid batch id"),
            flags: layout.flags,
            mode: layout.mode,
            executor: ExecutorKind::Sim,
            sim: None,
            bundle_sha256: "ab".repeat(32),
        },
    )
}

/// (baseline, model, skill_dir) of every cell, `-` for no override.
fn cell_axes(layout: &PlanLayout) -> Vec<String> {
    layout
        .units
        .iter()
        .map(|unit| {
            let axes = unit.axes.as_ref().expect("matrix units have axes");
            let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
            format!(
                "{} {},{},{}",
                unit.unit.index(),
                show(&axes.baseline),
                show(&axes.model),
                show(&axes.skill_dir)
            )
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Matrix expansion

#[test]
fn tc_30_matrix_ordering() {
    let batch = matrix_batch(
        simple_scenario(),
        "{baselines: [a, b], models: [x, y]}",
        &[],
    );
    let layout = lay_out(&batch, &flags());
    assert_eq!(
        cell_axes(&layout),
        ["0 a,x,-", "1 a,y,-", "2 b,x,-", "3 b,y,-"]
    );
    assert_eq!(layout.units[1].label, "t [baseline=a, model=y]");
    assert_eq!(layout.units[3].unit, UnitRef::Cell(3));

    let batch = matrix_batch(
        simple_scenario(),
        "{baselines: [a], models: [x, y], skill_dirs: [p, q]}",
        &[("p", "variants/p/k"), ("q", "variants/q/k")],
    );
    let layout = lay_out(&batch, &flags());
    assert_eq!(
        cell_axes(&layout),
        ["0 a,x,p", "1 a,x,q", "2 a,y,p", "3 a,y,q"]
    );
    assert_eq!(
        layout.units[2].label,
        "t [baseline=a, model=y, skill_dir=p]"
    );
    assert!(layout.units.iter().all(|unit| unit.cell_error.is_none()));
}

#[test]
fn tc_31_empty_axes() {
    for text in ["{}", "{baselines: []}"] {
        let batch = matrix_batch(simple_scenario(), text, &[]);
        let layout = lay_out(&batch, &flags());
        assert_eq!(layout.kind, PlanKind::Matrix);
        assert_eq!(layout.units.len(), 1, "{text}");
        let axes = layout.units[0]
            .axes
            .as_ref()
            .expect("matrix units have axes");
        assert_eq!(serde_json::to_string(axes).expect("axes serialize"), "{}");
        assert_eq!(axes.label(), "(no axes)");
        assert_eq!(layout.units[0].label, "t [(no axes)]");
        assert_eq!(layout.requested_cells, 1);
        assert!(!layout.truncated);
        // A cell without overrides runs the original scenario.
        assert_eq!(layout.units[0].scenario_file, "scenarios/t.yaml");
        assert!(layout.derived_files.is_empty());
    }
}

#[test]
fn tc_32_cap_and_truncation_expansion() {
    let batch = matrix_batch(
        simple_scenario(),
        "{baselines: [a, b, c], models: [x, y, z]}",
        &[],
    );
    let capped = BatchFlags {
        max_cells: 4,
        ..flags()
    };
    let layout = lay_out(&batch, &capped);
    assert_eq!(
        cell_axes(&layout),
        ["0 a,x,-", "1 a,y,-", "2 a,z,-", "3 b,x,-"]
    );
    assert_eq!(layout.requested_cells, 9);
    assert!(layout.truncated);
    let summary = complete(layout).summary();
    assert_eq!(
        (
            summary.requested_cells,
            summary.units.len(),
            summary.truncated
        ),
        (9, 4, true)
    );

    // Exactly at the cap is not truncated.
    let batch = matrix_batch(simple_scenario(), "{models: [x, y]}", &[]);
    let at_cap = BatchFlags {
        max_cells: 2,
        ..flags()
    };
    let layout = lay_out(&batch, &at_cap);
    assert_eq!(
        (layout.units.len(), layout.requested_cells, layout.truncated),
        (2, 2, false)
    );

    // Duplicate values are allowed and give duplicate cells
    // (harness-behaviour.md#matrix-validation).
    let batch = matrix_batch(simple_scenario(), "{models: [a, a]}", &[]);
    assert_eq!(cell_axes(&layout_of(&batch)), ["0 -,a,-", "1 -,a,-"]);
}

fn layout_of(batch: &PreparedBatch) -> PlanLayout {
    lay_out(batch, &flags())
}

#[test]
fn tc_35_matrix_file_validation() {
    // The file-content cases are in cowork-schema (`matrix::tests`) and the IO cases (missing
    // file, two scenario files, missing candidate, local_plugins count) in `intake::files` tests.
    // Here: a plan never expands a matrix over more than one scenario.
    let mut batch = matrix_batch(simple_scenario(), "{models: [x]}", &[]);
    batch
        .scenarios
        .push(prepared_scenario("scenarios/u.yaml", "prompt: p\n", None));
    let errors = plan_units(&batch, &flags(), BatchMode::Run).expect_err("two scenarios");
    assert_eq!(errors, [PlanError::MatrixNeedsOneScenario { n_files: 2 }]);
    let batch = matrix_batch(simple_scenario(), "{models: [x]}", &[]);
    let errors = plan_units(&batch, &flags(), BatchMode::Replay).expect_err("replay matrix");
    assert_eq!(errors, [PlanError::MatrixInReplay]);
}

// ---------------------------------------------------------------------------------------------
// Materialization

fn derived_json(layout: &PlanLayout, path: &str) -> serde_json::Value {
    let file = layout
        .derived_files
        .iter()
        .find(|file| file.path == path)
        .unwrap_or_else(|| panic!("no derived file {path}; have {:?}", paths(layout)));
    serde_json::from_slice(&file.contents).expect("derived files are JSON")
}

fn paths(layout: &PlanLayout) -> Vec<&str> {
    layout
        .derived_files
        .iter()
        .map(|file| file.path.as_str())
        .collect()
}

#[test]
fn derived_scenario_keeps_name_and_relative_paths() {
    let batch = matrix_batch(
        simple_scenario(),
        "{baselines: [desktop-1], models: [m1], skill_dirs: [../variants/v2/k]}",
        &[("../variants/v2/k", "variants/v2/k")],
    );
    let layout = layout_of(&batch);
    assert_eq!(
        paths(&layout),
        [
            "scenarios/.cowork-cell-0-t.yaml",
            "sessions/.cowork-cell-0-s.yaml"
        ]
    );
    let unit = &layout.units[0];
    assert_eq!(unit.scenario_file, "scenarios/.cowork-cell-0-t.yaml");

    let scenario = derived_json(&layout, "scenarios/.cowork-cell-0-t.yaml");
    // The effective name is written explicitly (harness-behaviour.md#scenario-name), first, and the
    // rest keeps its order.
    let keys: Vec<&String> = scenario.as_object().expect("object").keys().collect();
    assert_eq!(keys, ["name", "prompt", "baseline", "session"]);
    assert_eq!(scenario["name"], "t");
    assert_eq!(scenario["baseline"], "desktop-1");
    let session_value = scenario["session"].as_str().expect("session is a string");
    assert_eq!(session_value, "../sessions/.cowork-cell-0-s.yaml");
    // The derived session is reached from the scenario's directory.
    assert_eq!(
        normalize_rel("scenarios", session_value).as_deref(),
        Some("sessions/.cowork-cell-0-s.yaml")
    );
    // The derived scenario reloads with the same effective name.
    let reloaded = Scenario::from_yaml(
        std::str::from_utf8(&layout.derived_files[0].contents).expect("utf-8"),
        Path::new("scenarios/.cowork-cell-0-t.yaml"),
    )
    .expect("the derived scenario is a valid scenario");
    assert_eq!(
        reloaded.effective_name(Path::new(".cowork-cell-0-t.yaml")),
        "t"
    );

    let session = derived_json(&layout, "sessions/.cowork-cell-0-s.yaml");
    assert_eq!(session["model"], "m1");
    let plugin = session["plugins"]["local_plugins"][0]
        .as_str()
        .expect("string");
    assert_eq!(plugin, "../variants/v2/k");
    // The replaced entry, joined with the session's directory, is the candidate.
    assert_eq!(
        normalize_rel("sessions", plugin).as_deref(),
        Some("variants/v2/k")
    );
    // Untouched keys stay as authored, so their relative paths still resolve.
    assert_eq!(session["uploads"][0], "../data/a.csv");
    assert_eq!(session["plugins"]["enabled"][0], "k@local");
}

#[test]
fn baseline_only_cells_keep_the_original_session() {
    let batch = matrix_batch(simple_scenario(), "{baselines: [b1, b2]}", &[]);
    let layout = layout_of(&batch);
    assert_eq!(
        paths(&layout),
        [
            "scenarios/.cowork-cell-0-t.yaml",
            "scenarios/.cowork-cell-1-t.yaml"
        ]
    );
    let scenario = derived_json(&layout, "scenarios/.cowork-cell-1-t.yaml");
    assert_eq!(scenario["baseline"], "b2");
    assert_eq!(scenario["session"], "../sessions/s.yaml");
}

#[test]
fn an_effort_the_cell_model_does_not_take_is_a_cell_error() {
    let session =
        "model: claude-sonnet-4-5\neffort: high\nplugins:\n  local_plugins:\n    - ../skills/k\n";
    let scenario = prepared_scenario(
        "scenarios/t.yaml",
        SCENARIO,
        Some(("sessions/s.yaml", session)),
    );
    let batch = matrix_batch(
        scenario,
        "{models: [claude-sonnet-4-5, claude-opus-4-8]}",
        &[],
    );
    let layout = layout_of(&batch);
    assert_eq!(
        layout.units[0].cell_error.as_deref(),
        Some(
            "sessions/s.yaml:2:1: effort: model \"claude-sonnet-4-5\" has no effort selector — omit \
             `effort:` (real Cowork always runs it at the medium fallback, with no UI picker)"
        )
    );
    assert_eq!(layout.units[1].cell_error, None);
    // A baseline axis from before the harness knew selectors takes the effort.
    let scenario = prepared_scenario(
        "scenarios/t.yaml",
        SCENARIO,
        Some(("sessions/s.yaml", session)),
    );
    let batch = matrix_batch(scenario, "{baselines: [desktop-1.18286.2, latest]}", &[]);
    let layout = layout_of(&batch);
    assert_eq!(layout.units[0].cell_error, None);
    assert!(layout.units[1].cell_error.is_some());
}

#[test]
fn basename_mismatch_is_a_cell_error() {
    let batch = matrix_batch(
        simple_scenario(),
        "{skill_dirs: [v1/k, v2/other]}",
        &[("v1/k", "matrices/v1/k"), ("v2/other", "matrices/v2/other")],
    );
    let layout = layout_of(&batch);
    assert_eq!(layout.units[0].cell_error, None);
    let error = layout.units[1].cell_error.as_deref().expect("cell 1 fails");
    assert!(
        error.starts_with("skill_dirs candidate \"v2/other\" has basename \"other\""),
        "{error}"
    );
    assert!(
        error.contains("entry \"../skills/k\" with basename \"k\""),
        "{error}"
    );
    // No derived files for the failing cell; it runs nothing.
    assert_eq!(
        paths(&layout),
        [
            "scenarios/.cowork-cell-0-t.yaml",
            "sessions/.cowork-cell-0-s.yaml"
        ]
    );
    assert_eq!(layout.units[1].scenario_file, "scenarios/t.yaml");
    let plan = complete(layout);
    assert_eq!(plan.n_jobs(), 1);
    let ids: Vec<String> = plan.jobs().map(|job| job.job_id.to_string()).collect();
    assert_eq!(ids, ["b1/c0"]);
}

#[test]
fn inline_session_with_a_model_axis() {
    let scenario = prepared_scenario("t.yaml", "prompt: p\n", None);
    let batch = matrix_batch(scenario, "{models: [m1]}", &[]);
    let layout = layout_of(&batch);
    assert_eq!(
        paths(&layout),
        [".cowork-cell-0-t.yaml", ".cowork-cell-0-session.yaml"]
    );
    assert_eq!(
        derived_json(&layout, ".cowork-cell-0-session.yaml"),
        serde_json::json!({"model": "m1"})
    );
    let scenario = derived_json(&layout, ".cowork-cell-0-t.yaml");
    assert_eq!(scenario["session"], ".cowork-cell-0-session.yaml");
    assert_eq!(scenario["name"], "t");
}

#[test]
fn derived_path_collision_is_an_error() {
    let mut batch = matrix_batch(simple_scenario(), "{models: [m1]}", &[]);
    batch
        .files
        .insert("sessions/.cowork-cell-0-s.yaml".to_owned());
    let errors = plan_units(&batch, &flags(), BatchMode::Run).expect_err("collision");
    assert_eq!(
        errors,
        [PlanError::DerivedPathCollision {
            path: "sessions/.cowork-cell-0-s.yaml".to_owned()
        }]
    );
}

#[test]
fn relative_paths_between_bundle_dirs() {
    let check = |from: &str, to: &str, expect: &str| {
        let got = relative_path(from, to);
        assert_eq!(got, expect, "{from} -> {to}");
        assert_eq!(
            normalize_rel(from, &got).as_deref(),
            Some(to),
            "{from} -> {to} round trip"
        );
    };
    check("sessions", "variants/v1/k", "../variants/v1/k");
    check("", "a/b", "a/b");
    check("a/b", "a/c", "../c");
    check("a/b", "a/b/c", "c");
    check("a", "a", ".");
    check("a/b/c", "", "../../..");
    assert_eq!(normalize_rel("a", "../../x"), None);
    assert_eq!(normalize_rel("a", "./b//c/"), Some("a/b/c".to_owned()));
}

// ---------------------------------------------------------------------------------------------
// Jobs

#[test]
fn job_ids_and_counts() {
    let batch = files_batch(vec![
        prepared_scenario("s/a.yaml", "prompt: p\n", None),
        prepared_scenario(
            "s/b.yml",
            "prompt: p\nname: named\nfidelity: protocol\n",
            None,
        ),
    ]);
    let plan = complete(lay_out(&batch, &flags()));
    assert_eq!(plan.kind, PlanKind::Files);
    assert_eq!(plan.requested_cells, 2);
    assert_eq!(plan.n_jobs(), 2);
    let jobs: Vec<_> = plan.jobs().collect();
    assert_eq!(jobs[0].job_id.as_str(), "b1/f0");
    assert_eq!(jobs[1].job_id.as_str(), "b1/f1");
    assert_eq!(jobs[1].scenario_name, "named");
    assert_eq!(jobs[0].scenario_name, "a");
    assert_eq!(
        (jobs[0].tier, jobs[1].tier),
        (Tier::Container, Tier::Protocol)
    );
    assert_eq!(jobs[0].repeat_index, None);
    assert_eq!(jobs[0].command, JobCommand::Run);
    assert_eq!(jobs[0].bundle_sha256, "ab".repeat(32));

    let repeated = BatchFlags {
        repeat: Some(3),
        ..flags()
    };
    let plan = complete(lay_out(&batch, &repeated));
    assert_eq!(plan.n_jobs(), 6);
    let ids: Vec<String> = plan.jobs().map(|job| job.job_id.to_string()).collect();
    assert_eq!(
        ids,
        [
            "b1/f0/r0", "b1/f0/r1", "b1/f0/r2", "b1/f1/r0", "b1/f1/r1", "b1/f1/r2"
        ]
    );
    assert_eq!(plan.summary().n_jobs, 6);
}

#[test]
fn a_million_jobs_are_planned_lazily() {
    let scenarios = (0..100)
        .map(|i| prepared_scenario(&format!("s/{i:03}.yaml"), "prompt: p\n", None))
        .collect();
    let batch = files_batch(scenarios);
    let repeated = BatchFlags {
        repeat: Some(10_000),
        ..flags()
    };
    let plan = complete(lay_out(&batch, &repeated));
    assert_eq!(plan.n_jobs(), 1_000_000);
    // Building every spec in a debug test would be slow; walk the first and last ones.
    let first = plan.jobs().next().expect("jobs exist");
    assert_eq!(first.job_id.as_str(), "b1/f0/r0");
    let last_unit = plan.units.last().expect("units exist");
    assert_eq!(
        plan.job(last_unit, Some(9_999)).job_id.as_str(),
        "b1/f99/r9999"
    );
    assert_eq!(plan.jobs().skip(999_990).count(), 10);
}

#[test]
fn forwarded_flags_follow_contract_1_3() {
    let batch = files_batch(vec![prepared_scenario("a.yaml", "prompt: p\n", None)]);
    let all = BatchFlags {
        repeat: Some(2),
        min_pass_rate: 0.5,
        stop_on_diverge: true,
        max_budget_usd: Some(1.0),
        allow_budget_stop: true,
        on_unanswered: Some(OnUnanswered::First),
        decider_model: Some("claude-x".to_owned()),
        ablate_skill: true,
        label: Some("nightly run".to_owned()),
        ..flags()
    };
    let layout = lay_out(&batch, &all);
    // Batch flags (repeat, min pass rate, budget, …) are never forwarded.
    assert_eq!(
        layout.forwarded_flags,
        [
            "--on-unanswered",
            "first",
            "--decider-model",
            "claude-x",
            "--ablate-skill",
            "--label",
            "nightly run"
        ]
    );
    let errors =
        plan_units(&batch, &all, BatchMode::Replay).expect_err("replay takes no run flags");
    assert_eq!(
        errors,
        [PlanError::FlagNotForReplay {
            flag: "--on-unanswered"
        }]
    );
    // `record` refuses what the CLI's `record` refuses, each flag named; it keeps
    // `--on-unanswered`, which `record` takes.
    let errors = plan_units(&batch, &all, BatchMode::Record).expect_err("record refuses them");
    let refused: Vec<&str> = errors
        .iter()
        .map(|error| match error {
            PlanError::FlagNotForRecord { flag, .. } => *flag,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(refused, ["--label", "--ablate-skill", "--decider-model"]);
    let on_unanswered_only = BatchFlags {
        on_unanswered: Some(OnUnanswered::First),
        ..flags()
    };
    let layout = plan_units(&batch, &on_unanswered_only, BatchMode::Record).expect("plans");
    assert_eq!(layout.forwarded_flags, ["--on-unanswered", "first"]);
}

#[test]
fn modes_choose_command_and_tier() {
    let batch = files_batch(vec![prepared_scenario(
        "c.json",
        "prompt: p\nfidelity: hostloop\n",
        None,
    )]);
    let check = |mode: BatchMode, command: JobCommand, tier: Tier| {
        let layout = plan_units(&batch, &flags(), mode).expect("plans");
        let plan = complete(layout);
        let job = plan.jobs().next().expect("one job");
        assert_eq!((job.command, job.tier), (command, tier), "{mode:?}");
    };
    check(BatchMode::Run, JobCommand::Run, Tier::Hostloop);
    check(BatchMode::Record, JobCommand::Record, Tier::Hostloop);
    check(BatchMode::Replay, JobCommand::Replay, Tier::Replay);
    check(BatchMode::Eval, JobCommand::Run, Tier::Hostloop);
}

#[test]
fn job_timeout_follows_c13() {
    let with_timeout = prepared_scenario("a.yaml", "prompt: p\ntimeout_ms: 600000\n", None);
    let without = prepared_scenario("b.yaml", "prompt: p\n", None);
    let batch = files_batch(vec![with_timeout, without]);
    let layout_default = lay_out(&batch, &flags());
    let timeouts: Vec<u64> = layout_default
        .units
        .iter()
        .map(|unit| unit.timeout_ms)
        .collect();
    assert_eq!(
        timeouts,
        [600_000 + JOB_TIMEOUT_MARGIN_MS, DEFAULT_JOB_TIMEOUT_MS]
    );

    let explicit = BatchFlags {
        job_timeout_ms: Some(900_000),
        ..flags()
    };
    let timeouts: Vec<u64> = lay_out(&batch, &explicit)
        .units
        .iter()
        .map(|unit| unit.timeout_ms)
        .collect();
    assert_eq!(timeouts, [900_000, 900_000]);

    let too_short = BatchFlags {
        job_timeout_ms: Some(600_000),
        ..flags()
    };
    let errors = plan_units(&batch, &too_short, BatchMode::Run).expect_err("not above timeout_ms");
    assert_eq!(
        errors[0].to_string(),
        "a.yaml: timeout_ms: the job timeout of 600000 ms must exceed the scenario's timeout_ms of 600000 ms, so that the harness's own timeout fires first"
    );
}

#[test]
fn derived_files_are_ready_for_the_bundle() {
    let batch = matrix_batch(simple_scenario(), "{models: [m1]}", &[]);
    let layout = layout_of(&batch);
    let pairs = layout.derived_for_bundle();
    let names: BTreeSet<&str> = pairs.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "scenarios/.cowork-cell-0-t.yaml",
            "sessions/.cowork-cell-0-s.yaml"
        ])
    );
    let plan = complete(layout);
    let job = plan.jobs().next().expect("one job");
    assert_eq!(job.scenario_file, "scenarios/.cowork-cell-0-t.yaml");
    assert_eq!(job.axes.and_then(|axes| axes.model).as_deref(), Some("m1"));
}

// ---------------------------------------------------------------------------------------------
// Flags

/// Validates `raw` and compares the result: `ok` or the errors joined by `; `.
fn check_flags(raw: RawFlags, expect: &str) {
    let got = match validate_flags(&raw) {
        Ok(_) => "ok".to_owned(),
        Err(errors) => errors
            .iter()
            .map(FlagError::to_string)
            .collect::<Vec<_>>()
            .join("; "),
    };
    assert_eq!(got, expect, "{raw:?}");
}

fn some(text: &str) -> Option<String> {
    Some(text.to_owned())
}

#[test]
fn tc_38_flag_validation() {
    let repeat = |n: &str| RawFlags {
        repeat: some(n),
        ..RawFlags::default()
    };
    check_flags(
        repeat("1"),
        "--repeat: must be an integer from 2 to 10000, got \"1\"; for a single run leave --repeat out",
    );
    // Fleet deviation: the CLI caps --repeat at 100; the fleet accepts up to REPEAT_MAX.
    check_flags(repeat("101"), "ok");
    check_flags(
        repeat("10001"),
        "--repeat: must be an integer from 2 to 10000, got \"10001\"",
    );
    check_flags(
        repeat("2.5"),
        "--repeat: must be an integer from 2 to 10000, got \"2.5\"",
    );
    check_flags(
        repeat("abc"),
        "--repeat: must be an integer from 2 to 10000, got \"abc\"",
    );
    check_flags(
        repeat("101x"),
        "--repeat: must be an integer from 2 to 10000, got \"101x\"",
    );
    // `--repeat` with no value reads as the empty string, which Number() makes 0.
    check_flags(
        repeat(""),
        "--repeat: must be an integer from 2 to 10000, got \"\"",
    );
    check_flags(
        RawFlags {
            min_pass_rate: some("1.5"),
            ..repeat("3")
        },
        "--min-pass-rate: must be a number from 0 to 1, got \"1.5\"",
    );
    check_flags(
        RawFlags {
            max_budget_usd: some("0"),
            ..RawFlags::default()
        },
        "--max-budget-usd: must be a number greater than 0, got \"0\"",
    );
    check_flags(
        RawFlags {
            stop_on_diverge: true,
            ..RawFlags::default()
        },
        "--stop-on-diverge: needs --repeat",
    );
    check_flags(
        RawFlags {
            min_pass_rate: some("0.5"),
            ..RawFlags::default()
        },
        "--min-pass-rate: needs --repeat",
    );
    check_flags(
        RawFlags {
            allow_budget_stop: true,
            ..RawFlags::default()
        },
        "--allow-budget-stop: needs --repeat",
    );
    check_flags(
        RawFlags {
            max_cells: some("4"),
            ..RawFlags::default()
        },
        "--max-cells: needs --matrix",
    );
    check_flags(
        RawFlags {
            concurrency: some("2"),
            ..RawFlags::default()
        },
        "--concurrency: needs --matrix",
    );
    check_flags(
        RawFlags {
            allow_truncated_matrix: true,
            ..RawFlags::default()
        },
        "--allow-truncated-matrix: needs --matrix",
    );
    check_flags(
        RawFlags {
            concurrency: some("9"),
            matrix: some("m.yaml"),
            ..RawFlags::default()
        },
        "--concurrency: must be an integer from 1 to 8, got \"9\"",
    );
    check_flags(
        RawFlags {
            max_cells: some("0"),
            matrix: some("m.yaml"),
            ..RawFlags::default()
        },
        "--max-cells: must be an integer from 1 to 100000, got \"0\"",
    );
    let c11 =
        "external deciders answer interactively, one run at a time, so fleet batches refuse them";
    check_flags(
        RawFlags {
            decider_dir: some("d"),
            ..repeat("3")
        },
        &format!("--decider-dir: {c11}"),
    );
    check_flags(
        RawFlags {
            decider_cmd: some("c"),
            ..repeat("3")
        },
        &format!("--decider-cmd: {c11}"),
    );
    check_flags(
        RawFlags {
            matrix: some("m.yaml"),
            concurrency: some("2"),
            decider_dir: some("d"),
            ..RawFlags::default()
        },
        &format!("--decider-dir: {c11}"),
    );

    // Accepted.
    check_flags(
        RawFlags {
            max_budget_usd: some("1"),
            ..RawFlags::default()
        },
        "ok",
    );
    check_flags(repeat("3"), "ok");
    check_flags(
        RawFlags {
            matrix: some("m.yaml"),
            ..repeat("2")
        },
        "ok",
    );
    // Fleet deviation (harness-behaviour.md#choice-c11): the CLI accepts `--matrix … --decider-dir
    // …` at concurrency 1; the fleet refuses every external decider.
    check_flags(
        RawFlags {
            matrix: some("m.yaml"),
            decider_dir: some("d"),
            ..RawFlags::default()
        },
        &format!("--decider-dir: {c11}"),
    );
    // "Needs" checks compare with the default (harness-behaviour.md#default-compare).
    check_flags(
        RawFlags {
            min_pass_rate: some("1"),
            max_cells: some("16"),
            concurrency: some("1"),
            ..RawFlags::default()
        },
        "ok",
    );
    // Every problem is reported.
    check_flags(
        RawFlags {
            repeat: some("x"),
            max_budget_usd: some("-1"),
            matrix: some("-m"),
            on_unanswered: some("prompt"),
            label: some("a\nb"),
            ..RawFlags::default()
        },
        "--repeat: must be an integer from 2 to 10000, got \"x\"; --max-budget-usd: must be a number greater than 0, \
         got \"-1\"; --matrix: needs a matrix file path, got \"-m\"; --on-unanswered: `prompt` is interactive and is \
         refused by run; --label: must be a single line",
    );
}

#[test]
fn validated_flags_carry_values() {
    let raw = RawFlags {
        repeat: some(" 0x3 "),
        min_pass_rate: some(""),
        max_budget_usd: some("2.5e-1"),
        matrix: some("m.yaml"),
        max_cells: some("1e2"),
        on_unanswered: some("fail"),
        decider_model: some("claude-x"),
        label: some(&"é".repeat(200)),
        job_timeout: some("30m"),
        ablate_skill: true,
        ..RawFlags::default()
    };
    let flags = validate_flags(&raw).expect("valid flags");
    assert_eq!(flags.repeat, Some(3));
    // `--min-pass-rate=` reads as 0 (harness-behaviour.md#js-number-flags).
    assert_eq!(flags.min_pass_rate, 0.0);
    assert_eq!(flags.max_budget_usd, Some(0.25));
    assert_eq!(flags.max_cells, 100);
    assert_eq!(flags.on_unanswered, Some(OnUnanswered::Fail));
    assert_eq!(flags.job_timeout_ms, Some(1_800_000));
    assert!(flags.ablate_skill);
    check_flags(
        RawFlags {
            label: some(&"x".repeat(201)),
            ..RawFlags::default()
        },
        "--label: must be at most 200 characters, got 201",
    );
}

#[test]
fn js_number_matches_javascript() {
    let check = |text: &str, expect: f64| {
        let got = js_number(text);
        assert!(
            got == expect || (got.is_nan() && expect.is_nan()),
            "Number({text:?}) = {got}, expected {expect}"
        );
    };
    check("", 0.0);
    check("   ", 0.0);
    check(" 12 ", 12.0);
    check("\t\n3\u{feff}", 3.0);
    check("0x1F", 31.0);
    check("0X1f", 31.0);
    check("0o17", 15.0);
    check("0b101", 5.0);
    check("-0x1", f64::NAN);
    check("0x", f64::NAN);
    check("1e3", 1000.0);
    check("1E-2", 0.01);
    check("1.", 1.0);
    check(".5", 0.5);
    check("+.5", 0.5);
    check("-2", -2.0);
    check(".", f64::NAN);
    check("1e", f64::NAN);
    check("e5", f64::NAN);
    check("abc", f64::NAN);
    check("101x", f64::NAN);
    check("1_000", f64::NAN);
    check("Infinity", f64::INFINITY);
    check("-Infinity", f64::NEG_INFINITY);
    check("inf", f64::NAN);
    check("NaN", f64::NAN);
    check("\u{85}1", f64::NAN);
}

#[test]
fn priority_is_one_of_the_classes() {
    use cowork_schema::share::Priority;
    let priority = |text: &str| RawFlags {
        priority: some(text),
        ..RawFlags::default()
    };
    assert_eq!(
        validate_flags(&RawFlags::default()).map(|flags| flags.priority),
        Ok(Priority::Normal)
    );
    for (text, class) in [
        ("urgent", Priority::Urgent),
        ("normal", Priority::Normal),
        (" batch ", Priority::Batch),
    ] {
        assert_eq!(
            validate_flags(&priority(text)).map(|flags| flags.priority),
            Ok(class)
        );
    }
    check_flags(
        priority("high"),
        "--priority: must be urgent, normal or batch, got \"high\"",
    );
}
