//! `cowork eval --sequential` with the sim executor: an eval whose answer is clear early stops
//! at the deciding look, runs far fewer than the planned runs, and says where it stopped and what
//! it saved, embedded and through a fleet; `--looks` without `--sequential` or out of range is
//! refused.

use std::ffi::OsString;

use serde_json::Value;

use crate::fleet::Fleet;
use crate::support::{Output, Sandbox, cowork, number, only_batch_dir, read_json, workspace_root};

const ARM_V1: &str = "examples/demo/skills/v1/csv-report";
const ARM_WORSE: &str = "examples/demo/eval/skills/csv-report-worse/csv-report";
const SCENARIOS: &str = "examples/demo/scenarios";
/// Arm B passes 20% of its runs, arm A 95%: a difference clear long before 100 runs per arm.
const EVAL_PROFILE: &str = "examples/demo/eval/sim-profile.yaml";

/// The sequential eval of the worse variant, 100 runs per arm over the demo's 2 scenarios.
const SEQUENTIAL_EVAL: [&str; 16] = [
    "eval",
    "--a",
    ARM_V1,
    "--b",
    ARM_WORSE,
    SCENARIOS,
    "--executor",
    "sim",
    "--sim-profile",
    EVAL_PROFILE,
    "--runs",
    "100",
    "--sequential",
    "--output-format",
    "json",
    "--quiet",
];

fn embedded(sandbox: &Sandbox, extra: &[&str]) -> Output {
    let mut args: Vec<OsString> = SEQUENTIAL_EVAL.iter().map(OsString::from).collect();
    args.extend(["--store".into(), sandbox.store().into_os_string()]);
    args.extend(extra.iter().map(OsString::from));
    cowork(&workspace_root(), &args)
}

/// The report stopped at look 1 of 5 (40 of 200 pairs) with B worse, and ran far fewer runs
/// than the 400 planned.
fn check_stopped_early(out: &Output, report: &Value) {
    let sequential = &report["sequential"];
    assert_eq!(sequential["stoppedAtLook"], 1, "{}", out.context());
    assert_eq!(sequential["looksPlanned"], 5, "{}", out.context());
    assert_eq!(sequential["pairsAtLook"], 40, "{}", out.context());
    assert_eq!(sequential["plannedPairs"], 200, "{}", out.context());
    assert_eq!(sequential["reason"], "decided", "{}", out.context());
    assert_eq!(sequential["verdict"], "bWorse", "{}", out.context());
    assert_eq!(report["overall"]["verdict"], "bWorse", "{}", out.context());
    let runs = number(sequential, "runs");
    let saved = number(sequential, "runsSaved");
    assert!((80.0..400.0).contains(&runs), "{}", out.context());
    assert_eq!(runs + saved, 400.0, "{}", out.context());
    assert!(
        number(sequential, "costSavedUsd") > 0.0,
        "{}",
        out.context()
    );
    let rule = report["decisionRule"].as_str().unwrap_or_default();
    assert!(rule.contains("Sequential eval"), "{rule}");
    out.expect_stderr("sequential: stopped at look 1 of 5 after 40 of 200 pairs: B worse; saved ");
}

#[test]
fn a_sequential_eval_stops_at_the_deciding_look_and_reports_what_it_saved() {
    let sandbox = Sandbox::empty();
    let out = embedded(&sandbox, &[]);
    out.expect_code(1);
    let report = out.envelope();
    let batch_dir = only_batch_dir(&sandbox.store());
    assert_eq!(read_json(&batch_dir.join("eval.json")), report);
    check_stopped_early(&out, &report);
    let spec = read_json(&batch_dir.join("spec.json"));
    assert_eq!(
        spec["spec"]["eval"]["sequential"],
        serde_json::json!({ "looks": 5 }),
        "{}",
        out.context()
    );
    // The rollups hold only the runs that ran: the batch stopped admitting.
    let rollup = read_json(&batch_dir.join("rollup.json"));
    let completed: f64 = rollup["rollups"]
        .as_array()
        .map(|rollups| rollups.iter().map(|r| number(r, "completed")).sum())
        .unwrap_or_default();
    assert_eq!(
        completed,
        number(&report["sequential"], "runs"),
        "{}",
        out.context()
    );
}

#[test]
fn looks_without_sequential_or_out_of_range_are_refused() {
    for (extra, expect) in [
        (
            &["--runs", "10", "--looks", "3"][..],
            "--looks: only applies with --sequential",
        ),
        (
            &["--runs", "10", "--sequential", "--looks", "0"][..],
            "--looks: must be an integer from 1 to 1000",
        ),
        (
            &["--runs", "10", "--sequential", "--mde", "-5"][..],
            "--mde: must be a difference in percentage points above 0",
        ),
    ] {
        let sandbox = Sandbox::empty();
        let mut args: Vec<OsString> = [
            "eval",
            "--a",
            ARM_V1,
            "--b",
            ARM_WORSE,
            SCENARIOS,
            "--executor",
            "sim",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        args.extend(extra.iter().map(OsString::from));
        args.extend(["--store".into(), sandbox.store().into_os_string()]);
        let out = cowork(&workspace_root(), &args);
        out.expect_code(2).expect_stderr(expect);
        if sandbox.store().exists() {
            out.fail("a refused eval created the store directory");
        }
    }
}

#[test]
fn a_sequential_eval_through_the_fleet_stops_at_the_same_look() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w1", "container", "4");
    let mut args = SEQUENTIAL_EVAL.to_vec();
    args.push("--watch");
    let out = fleet.cowork(&workspace_root(), &args);
    if out.code() != 1 {
        out.fail(&format!("expected exit 1 (B worse)\n{}", fleet.logs()));
    }
    let report = out.envelope();
    check_stopped_early(&out, &report);
}
