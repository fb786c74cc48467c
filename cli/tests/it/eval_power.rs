//! `cowork eval --dry-run` says how small a difference the planned runs detect 4 times in 5 and,
//! with `--mde`, how many runs a difference needs, from arm A's pass rate in history (or
//! `--expect-pass-rate`, or an assumed 50%); the report after the runs gives the same figures,
//! computed by the same function, for the same runs and pass rate. Bad `--mde` and
//! `--expect-pass-rate` values exit 2 naming the flag.

use std::ffi::OsString;
use std::path::Path;

use serde_json::Value;

use crate::support::{Output, Sandbox, array, cowork, workspace_root};

const ARM_V1: &str = "examples/demo/skills/v1/csv-report";
const ARM_WORSE: &str = "examples/demo/eval/skills/csv-report-worse/csv-report";
const SCENARIOS: &str = "examples/demo/scenarios";

/// Arm A passes about 60% of its runs, so the figures are neither at the edge nor trivial.
const PROFILE: &str = "rules:\n  - arm: a\n    pass_rate: 0.6\n    cost_usd: 0.05\n    duration_ms: 30000\n  - pass_rate: 0.7\n    cost_usd: 0.04\n    duration_ms: 20000\n";

/// `cowork eval` of the demo's arms with the sim executor and the sandbox's profile, plus `extra`.
fn eval(sandbox: &Sandbox, extra: &[&str]) -> Output {
    let profile = sandbox.path().join("sim-profile.yaml");
    if !profile.exists() {
        sandbox.write("sim-profile.yaml", PROFILE);
    }
    let mut args: Vec<OsString> = [
        "eval",
        "--a",
        ARM_V1,
        "--b",
        ARM_WORSE,
        SCENARIOS,
        "--executor",
        "sim",
        "--seed",
        "7",
        "--quiet",
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    args.extend([
        "--sim-profile".into(),
        profile.into_os_string(),
        "--store".into(),
        sandbox.store().into_os_string(),
    ]);
    args.extend(extra.iter().map(OsString::from));
    cowork(&workspace_root(), &args)
}

/// A difference on the half-point grid as the dry run prints it (`23.5 points`, `15 points`).
fn half_points(difference: f64) -> String {
    let halves = (difference * 200.0).round();
    if halves % 2.0 == 0.0 {
        format!("{:.0} points", halves / 2.0)
    } else {
        format!("{:.1} points", halves / 2.0)
    }
}

/// The dry run's power row of `scenario` (the line that starts with it after the power header).
fn power_row<'a>(out: &'a Output, scenario: &str) -> &'a str {
    let Some((_, section)) = out.stdout.split_once("power: McNemar's test") else {
        out.fail("the dry run printed no power section");
    };
    section
        .lines()
        .find(|line| line.starts_with(scenario))
        .unwrap_or_else(|| out.fail(&format!("no power row for {scenario}")))
}

#[test]
fn the_dry_run_and_the_report_give_the_same_power_for_the_same_runs_and_pass_rate() {
    let sandbox = Sandbox::empty();
    let first = eval(
        &sandbox,
        &["--runs", "12", "--mde", "15", "--output-format", "json"],
    );
    let report = first.envelope();
    first.expect_stderr("power: 4 times in 5 these 24 pairs detect B passing");
    first.expect_stderr("for --mde 15:");
    let scenarios = array(&report, "scenarios");
    assert_eq!(scenarios.len(), 2, "{}", first.context());

    // The dry run reads arm A's pass rate from the first eval's history.
    let dry = eval(&sandbox, &["--runs", "12", "--mde", "15", "--dry-run"]);
    dry.expect_code(0);
    for scenario in scenarios {
        let name = scenario["scenario"].as_str().unwrap_or("?");
        let power: &Value = &scenario["power"];
        let rate = power["armAPassRate"].as_f64().unwrap_or(f64::NAN);
        let arm_a = &array(scenario, "arms")[0];
        assert_eq!(
            Some(rate),
            arm_a["passRate"].as_f64(),
            "the report's rate is arm A's observed one\n{}",
            first.context()
        );
        let row = power_row(&dry, name);
        let expected_rate = format!("{:.0}% (history, 12 runs)", rate * 100.0);
        assert!(
            row.contains(&expected_rate),
            "{row:?} lacks {expected_rate:?}\n{}",
            dry.context()
        );
        let detectable = power["detectableDiff"]
            .as_f64()
            .map_or_else(|| "nothing".to_owned(), half_points);
        assert!(
            row.contains(&detectable),
            "{row:?} lacks {detectable:?}\n{}",
            dry.context()
        );
        let needed = power["pairsForMde"]
            .as_u64()
            .map_or_else(|| "out of reach".to_owned(), |runs| runs.to_string());
        assert!(
            row.trim_end().ends_with(&needed),
            "{row:?} does not end with {needed:?}\n{}",
            dry.context()
        );
        assert_eq!(power["mde"].as_f64(), Some(0.15), "{}", first.context());
    }
    // The overall row pools the planned pairs; the mde line prices the runs it needs.
    let overall = power_row(&dry, "overall");
    assert!(overall.contains("24"), "{overall:?}");
    if !dry.stdout.contains("--mde 15: --runs ") {
        dry.fail("no runs line for --mde");
    }
    if !dry.stdout.contains("est. cost $") {
        dry.fail("the runs for --mde are not priced from history");
    }
}

#[test]
fn without_history_the_dry_run_uses_the_expected_pass_rate_or_assumes_half() {
    let sandbox = Sandbox::empty();
    let expected = eval(
        &sandbox,
        &["--runs", "10", "--expect-pass-rate", "0.8", "--dry-run"],
    );
    expected.expect_code(0);
    let row = power_row(&expected, "csv-report");
    assert!(row.contains("80% (--expect-pass-rate)"), "{row:?}");
    let assumed = eval(&sandbox, &["--runs", "10", "--dry-run"]);
    let row = power_row(&assumed, "csv-report");
    assert!(row.contains("50% (assumed: no history)"), "{row:?}");
    if sandbox.store().exists() {
        expected.fail("a dry run created the store");
    }
}

#[test]
fn bad_mde_and_expect_pass_rate_exit_2_naming_the_flags() {
    let sandbox = Sandbox::empty();
    let out = eval(&sandbox, &["--mde", "0", "--expect-pass-rate", "1.5"]);
    out.expect_code(2)
        .expect_stderr("--mde: must be a difference in percentage points above 0 and at most 100")
        .expect_stderr("--expect-pass-rate: must be a pass rate from 0 to 1");
    if !out.stdout.is_empty() {
        out.fail("a refused eval printed on stdout");
    }
    if Path::new(&sandbox.store()).exists() {
        out.fail("a refused eval created the store directory");
    }
    let out = eval(&sandbox, &["--mde", "fifteen", "--dry-run"]);
    out.expect_code(2).expect_stderr("--mde: must be");
}
