//! `cowork eval` beyond two versions of a skill: the skill against no skill at all
//! (`--without-skill`), whose arm A runs are ablated and paired with arm B run by run, and
//! several arms (`--arm NAME=DIR`), each compared with the control with Holm-adjusted p-values,
//! embedded and through a fleet alike.

use serde_json::Value;

use crate::fleet::Fleet;
use crate::support::{Sandbox, array, cowork, only_batch_dir, read_json, workspace_root};

const ARM_V1: &str = "examples/demo/skills/v1/csv-report";
const ARM_V2: &str = "examples/demo/skills/v2/csv-report";
const ARM_WORSE: &str = "examples/demo/eval/skills/csv-report-worse/csv-report";
const SCENARIOS: &str = "examples/demo/scenarios";

/// Arm `b` (the second arm) always passes, every other arm passes a third of the time.
const WINNER_PROFILE: &str = "rules:\n  - arm: b\n    pass_rate: 1.0\n    cost_usd: 0.01\n  \
                              - pass_rate: 0.35\n    cost_usd: 0.01\n";

/// A JSON number, or NaN when the value is none (the assertion then fails and shows it).
fn num(value: &Value) -> f64 {
    value.as_f64().unwrap_or(f64::NAN)
}

fn write_profile(sandbox: &Sandbox) -> String {
    let path = sandbox.path().join("winner.yaml");
    std::fs::write(&path, WINNER_PROFILE).expect("write the sim profile");
    path.display().to_string()
}

#[test]
fn the_skill_against_no_skill_ablates_arm_a_and_pairs_it_with_arm_b() {
    let sandbox = Sandbox::empty();
    let profile = write_profile(&sandbox);
    let store = sandbox.store();
    let out = cowork(
        &workspace_root(),
        &[
            "eval",
            "--without-skill",
            "--b",
            ARM_V1,
            SCENARIOS,
            "--runs",
            "6",
            "--executor",
            "sim",
            "--sim-profile",
            &profile,
            "--output-format",
            "json",
            "--quiet",
            "--fail-on",
            "never",
            "--store",
            &store.display().to_string(),
        ],
    );
    out.expect_code(0)
        .expect_stderr("arm A = no skill")
        .expect_stderr(&format!("arm B = {ARM_V1}"));
    let report = out.envelope();
    assert_eq!(report["arms"][0]["source"], "no skill", "{}", out.context());
    assert_eq!(report["arms"][1]["source"], ARM_V1, "{}", out.context());
    // Every run of arm A (and none of arm B) is ablated: 2 scenarios × 6 runs each.
    let envelope = read_json(&only_batch_dir(&store).join("envelope.json"));
    let mut ablated = [0_u32; 2];
    for (result, rollup_label) in array(&envelope, "results").iter().map(|result| {
        let label = result["provenance"]["ablated"].clone();
        (result, label)
    }) {
        let arm_a = result["ablated"] == Value::Bool(true);
        assert_eq!(
            rollup_label,
            Value::Bool(arm_a),
            "provenance agrees with the run"
        );
        ablated[usize::from(!arm_a)] += 1;
    }
    assert_eq!(ablated, [12, 12], "{}", out.context());
    let rollups = array(&envelope, "rollups");
    for rollup in rollups {
        let label = rollup["scenario"].as_str().unwrap_or("?");
        let ablated_runs = num(&rollup["provenance"]["ablatedRuns"]);
        let expected = if label.ends_with("[arm=A]") { 6.0 } else { 0.0 };
        assert_eq!(ablated_runs, expected, "{label}: {}", out.context());
    }
    // Paired run by run: 12 complete pairs, arm B (always passing) ahead.
    assert_eq!(num(&report["overall"]["pairs"]), 12.0, "{}", out.context());
    assert_eq!(
        num(&report["overall"]["arms"][1]["passes"]),
        12.0,
        "{}",
        out.context()
    );
}

/// `cowork eval` of the demo scenarios with arms base (v1), v2 and worse, 20 runs each, on the
/// sim executor with `profile`, plus `extra`.
fn three_arms(profile: &str, store: &std::path::Path, extra: &[&str]) -> crate::support::Output {
    let arms = [
        format!("base={ARM_V1}"),
        format!("v2={ARM_V2}"),
        format!("worse={ARM_WORSE}"),
    ];
    let store = store.display().to_string();
    let mut args = vec![
        "eval",
        "--arm",
        &arms[0],
        "--arm",
        &arms[1],
        "--arm",
        &arms[2],
        SCENARIOS,
        "--runs",
        "20",
        "--executor",
        "sim",
        "--sim-profile",
        profile,
        "--quiet",
        "--store",
        &store,
    ];
    args.extend(extra);
    cowork(&workspace_root(), &args)
}

#[test]
fn three_arms_are_each_compared_with_the_control_and_ranked() {
    let sandbox = Sandbox::empty();
    let profile = write_profile(&sandbox);
    let store = sandbox.store();
    let out = three_arms(&profile, &store, &["--output-format", "json"]);
    out.expect_code(0)
        .expect_stderr("candidates against the control base")
        .expect_stderr("Holm p")
        .expect_stderr("v2 better than base");
    let report = out.envelope();
    let comparisons = array(&report, "comparisons");
    let ranked: Vec<(&str, f64)> = comparisons
        .iter()
        .map(|comparison| {
            (
                comparison["candidate"]["name"].as_str().unwrap_or("?"),
                num(&comparison["rank"]),
            )
        })
        .collect();
    assert_eq!(ranked[0], ("v2", 1.0), "{}", out.context());
    assert_eq!(comparisons[0]["verdict"], "bBetter", "{}", out.context());
    // Holm by hand over the two overall p-values.
    let p: Vec<f64> = comparisons
        .iter()
        .map(|comparison| num(&comparison["report"]["overall"]["mcnemarP"]))
        .collect();
    let (low, high) = if p[0] <= p[1] { (0, 1) } else { (1, 0) };
    let holm_low = (2.0 * p[low]).min(1.0);
    let holm_high = holm_low.max(p[high].min(1.0));
    let holm = |index: usize| num(&comparisons[index]["holmP"]);
    assert!((holm(low) - holm_low).abs() < 1e-12, "{}", out.context());
    assert!((holm(high) - holm_high).abs() < 1e-12, "{}", out.context());
    // Units are labelled with the arm names; the spec keeps them for the coordinator.
    let batch_dir = only_batch_dir(&store);
    let rollup = read_json(&batch_dir.join("rollup.json"));
    let labels: Vec<&str> = array(&rollup, "rollups")
        .iter()
        .map(|rollup| rollup["scenario"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        labels[..3],
        [
            "csv-report [arm=base]",
            "csv-report [arm=v2]",
            "csv-report [arm=worse]"
        ],
        "{}",
        out.context()
    );
    let spec = read_json(&batch_dir.join("spec.json"));
    assert_eq!(
        spec["spec"]["eval"]["armNames"],
        serde_json::json!(["base", "v2", "worse"])
    );
    // The reports lead with every comparison's verdict and the ranking, one heatmap column
    // per arm.
    let batch = batch_dir
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or("?")
        .to_owned();
    let store_arg = store.display().to_string();
    let markdown = cowork(
        &workspace_root(),
        &[
            "report", &batch, "--store", &store_arg, "--format", "markdown",
        ],
    );
    markdown
        .expect_code(0)
        .expect_stdout(&format!("## ✅ cowork eval `{batch}`: v2 better than base"))
        .expect_stdout("| 1 | v2 (")
        .expect_stdout("2 scenario(s) × 3 arms × 20 run(s)");
    let html_file = store.join("report.html");
    let html_arg = html_file.display().to_string();
    cowork(
        &workspace_root(),
        &[
            "report", &batch, "--store", &store_arg, "--format", "html", "-o", &html_arg,
        ],
    )
    .expect_code(0);
    let html = std::fs::read_to_string(&html_file).expect("the html report is written");
    for expected in [
        "<th>arm base</th><th>arm v2</th><th>arm worse</th>",
        "Every candidate against the control",
        "v2 better than base",
    ] {
        assert!(html.contains(expected), "{expected} not in the HTML report");
    }
    // --fail-on any-difference fails on the winner.
    let again = three_arms(&profile, &store, &["--fail-on", "any-difference"]);
    again.expect_code(1);
}

#[test]
fn bad_arms_are_refused_before_anything_runs() {
    let sandbox = Sandbox::empty();
    let store = sandbox.store();
    let store_arg = store.display().to_string();
    for (args, expected) in [
        (
            vec!["--arm", "only=examples/demo/skills/v1/csv-report"],
            "an eval compares 2 to 8 arms, got 1",
        ),
        (
            vec![
                "--arm",
                "x=examples/demo/skills/v1/csv-report",
                "--arm",
                "x=none",
            ],
            "two arms are named \"x\"",
        ),
        (
            vec![
                "--arm",
                "a=examples/demo/skills/v1/csv-report",
                "--arm",
                "b=examples/demo/skills/v2/csv-report",
                "--control",
                "c",
            ],
            "--control: no arm is named \"c\"; the arms are a, b",
        ),
        (vec!["--arm", "novalue"], "--arm: expected NAME=DIR"),
        (
            vec!["--a", "none", "--b", "none"],
            "--b none: the candidate must be a skill dir or plugin",
        ),
    ] {
        let mut full = vec!["eval"];
        full.extend(args.iter().copied());
        full.extend([SCENARIOS, "--executor", "sim", "--store", &store_arg]);
        let out = cowork(&workspace_root(), &full);
        out.expect_code(2).expect_stderr(expected);
        assert!(!store.join("batches").exists(), "{}", out.context());
    }
}

#[test]
fn a_fleet_runs_a_no_skill_eval_and_a_three_arm_eval_like_this_machine() {
    let sandbox = Sandbox::empty();
    let profile = write_profile(&sandbox);
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w1", "container", "4");
    for arms in [
        vec![
            "--without-skill".to_owned(),
            "--b".to_owned(),
            ARM_V1.to_owned(),
        ],
        vec![
            "--arm".to_owned(),
            format!("base={ARM_V1}"),
            "--arm".to_owned(),
            format!("v2={ARM_V2}"),
            "--arm".to_owned(),
            "none=none".to_owned(),
        ],
    ] {
        let mut args: Vec<String> = vec!["eval".into()];
        args.extend(arms.iter().cloned());
        args.extend(
            [
                SCENARIOS,
                "--runs",
                "4",
                "--executor",
                "sim",
                "--sim-profile",
                &profile,
                "--output-format",
                "json",
                "--quiet",
                "--fail-on",
                "never",
                "--watch",
            ]
            .map(str::to_owned),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = fleet.cowork(&workspace_root(), &args);
        if out.code() != 0 {
            out.fail(&format!("expected exit 0\n{}", fleet.logs()));
        }
        let report = out.envelope();
        if arms[0] == "--without-skill" {
            assert_eq!(report["arms"][0]["source"], "no skill", "{}", out.context());
            assert_eq!(num(&report["overall"]["pairs"]), 8.0, "{}", out.context());
        } else {
            let comparisons = array(&report, "comparisons");
            assert_eq!(comparisons.len(), 2, "{}", out.context());
            let sources: Vec<&str> = comparisons
                .iter()
                .map(|comparison| comparison["candidate"]["source"].as_str().unwrap_or("?"))
                .collect();
            assert!(sources.contains(&"no skill"), "{}", out.context());
        }
    }
}
