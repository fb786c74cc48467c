//! `cowork eval` with the sim executor: the demo skill against a worse variant reports B worse
//! with a significant McNemar p and an interval that agrees with it, the demo skill against
//! itself reports no detectable difference, the arms are labelled in every output, an eval with
//! no complete pair exits 2, `--fail-on` picks the verdicts that exit 1, and a refused eval
//! exits 2 having written nothing. Through a fleet (`--coordinator … --watch`) the same eval
//! gives the same report, stored by the coordinator; `cowork report` of an eval batch leads with
//! its A/B result.

use std::ffi::OsString;
use std::path::Path;

use serde_json::Value;

use crate::fleet::{Fleet, TOKEN};
use crate::support::{
    Output, Sandbox, array, copy_dir, cowork, number, only_batch_dir, read_json, workspace_root,
};

const ARM_V1: &str = "examples/demo/skills/v1/csv-report";
const ARM_WORSE: &str = "examples/demo/eval/skills/csv-report-worse/csv-report";
const SCENARIOS: &str = "examples/demo/scenarios";
const EVAL_PROFILE: &str = "examples/demo/eval/sim-profile.yaml";
/// The demo's general profile: it has no `arm` rule, so both arms are simulated alike.
const DEMO_PROFILE: &str = "examples/demo/sim-profile.yaml";

/// `cowork eval --a <a> --b <b> <scenarios> --executor sim --sim-profile <profile>
/// --output-format json -o <sandbox>/eval-out.json --store <sandbox store>`, from the workspace
/// root as the docs show it, plus `extra`.
fn eval(sandbox: &Sandbox, arms: (&str, &str), profile: &str, extra: &[&str]) -> Output {
    let output_file = sandbox.path().join("eval-out.json");
    let store = sandbox.store();
    let mut args: Vec<OsString> = [
        "eval",
        "--a",
        arms.0,
        "--b",
        arms.1,
        SCENARIOS,
        "--executor",
        "sim",
        "--sim-profile",
        profile,
        "--output-format",
        "json",
        "--quiet",
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    args.extend([
        "-o".into(),
        output_file.into(),
        "--store".into(),
        store.into(),
    ]);
    args.extend(extra.iter().map(OsString::from));
    cowork(&workspace_root(), &args)
}

/// The JSON line on stdout, checked to equal the stored `eval.json` and the `-o` file.
fn report_everywhere(sandbox: &Sandbox, out: &Output) -> Value {
    let line = out.envelope();
    let batch_dir = only_batch_dir(&sandbox.store());
    let stored = read_json(&batch_dir.join("eval.json"));
    if stored != line {
        out.fail("eval.json differs from the JSON line");
    }
    let written = read_json(&sandbox.path().join("eval-out.json"));
    if written != line {
        out.fail("the -o file differs from the JSON line");
    }
    assert_eq!(
        line["batchId"].as_str(),
        batch_dir.file_name().and_then(|name| name.to_str()),
        "{}",
        out.context()
    );
    line
}

/// Both arms are named, with their sources, in the report, in every comparison and on stderr;
/// the stored rollups and envelope label every unit with its arm.
fn check_arm_labels(sandbox: &Sandbox, out: &Output, report: &Value, sources: (&str, &str)) {
    let expected_arms = serde_json::json!([
        { "arm": "A", "source": sources.0 },
        { "arm": "B", "source": sources.1 },
    ]);
    assert_eq!(report["arms"], expected_arms, "{}", out.context());
    let comparisons = std::iter::once(&report["overall"]).chain(array(report, "scenarios"));
    for comparison in comparisons {
        let arms: Vec<&str> = array(comparison, "arms")
            .iter()
            .map(|arm| arm["arm"].as_str().unwrap_or("?"))
            .collect();
        assert_eq!(arms, ["A", "B"], "{}", out.context());
    }
    out.expect_stderr(&format!("arm A = {}", sources.0))
        .expect_stderr(&format!("arm B = {}", sources.1))
        .expect_stderr("arm A pass")
        .expect_stderr("arm B pass");

    let batch_dir = only_batch_dir(&sandbox.store());
    let expected_labels = [
        "csv-report [arm=A]",
        "csv-report [arm=B]",
        "skill-triggers [arm=A]",
        "skill-triggers [arm=B]",
    ];
    for document in ["rollup.json", "envelope.json"] {
        let value = read_json(&batch_dir.join(document));
        let labels: Vec<&str> = array(&value, "rollups")
            .iter()
            .map(|rollup| rollup["scenario"].as_str().unwrap_or("?"))
            .collect();
        assert_eq!(labels, expected_labels, "{document}\n{}", out.context());
    }
    let spec = read_json(&batch_dir.join("spec.json"));
    assert_eq!(spec["spec"]["mode"], "eval", "{}", out.context());
}

/// The report and stderr say the runs were simulated (decisions.md#executors).
fn simulated_banner(out: &Output, report: &Value) {
    assert_eq!(report["simulated"], true, "{}", out.context());
    assert_eq!(report["executor"], "sim", "{}", out.context());
    out.expect_stderr("SIMULATED");
}

#[test]
fn the_demo_skill_against_a_worse_variant_reports_b_worse() {
    let sandbox = Sandbox::empty();
    let out = eval(
        &sandbox,
        (ARM_V1, ARM_WORSE),
        EVAL_PROFILE,
        &["--runs", "10"],
    );
    out.expect_code(1);
    let report = report_everywhere(&sandbox, &out);

    let overall = &report["overall"];
    assert_eq!(overall["verdict"], "bWorse", "{}", out.context());
    let p = number(overall, "mcnemarP");
    assert!(
        p < 0.05,
        "McNemar p {p} is not significant\n{}",
        out.context()
    );
    assert_eq!(number(overall, "pairs"), 20.0, "{}", out.context());
    assert_eq!(report["runsPerArm"], 10);
    let [arm_a, arm_b] = [&overall["arms"][0], &overall["arms"][1]];
    assert!(
        number(arm_b, "passRate") < number(arm_a, "passRate"),
        "{}",
        out.context()
    );
    let diff_high = number(&overall["diff"], "high");
    assert!(
        diff_high < 0.0,
        "the interval of B - A must lie below 0\n{}",
        out.context()
    );
    let scenarios: Vec<&str> = array(&report, "scenarios")
        .iter()
        .map(|scenario| scenario["scenario"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(scenarios, ["csv-report", "skill-triggers"]);

    check_arm_labels(&sandbox, &out, &report, (ARM_V1, ARM_WORSE));
    simulated_banner(&out, &report);
    out.expect_stderr("verdict (overall, alpha 0.05): B worse")
        .expect_stderr("a difference at least this large would appear by chance")
        .expect_stderr(
            "with 10 runs per arm a difference under 40 points cannot be told from noise",
        )
        .expect_stderr("at least ~27 runs per arm would detect 20 points");
    check_interval_agrees_with_verdict(&out, &report);
}

/// In every comparison the interval excludes 0 exactly when the verdict names a difference,
/// on the side it names; the method is stated in the JSON and cites nothing a user cannot read.
fn check_interval_agrees_with_verdict(out: &Output, report: &Value) {
    let comparisons = std::iter::once(&report["overall"]).chain(array(report, "scenarios"));
    for comparison in comparisons {
        let diff = &comparison["diff"];
        let (low, high) = (number(diff, "low"), number(diff, "high"));
        let agrees = match comparison["verdict"].as_str() {
            Some("bWorse") => high < 0.0,
            Some("bBetter") => low > 0.0,
            Some("noDetectableDifference") => low <= 0.0 && high >= 0.0,
            other => out.fail(&format!("unknown verdict {other:?}")),
        };
        if !agrees {
            out.fail(&format!(
                "the interval contradicts the verdict: {comparison}"
            ));
        }
    }
    let method = report["intervalMethod"].as_str().unwrap_or_default();
    assert!(method.contains("Tango's score interval"), "{method}");
    for text in [&report["decisionRule"], &report["intervalMethod"]] {
        let text = text.as_str().unwrap_or_default();
        assert!(
            !text.contains('\u{a7}') && !text.contains("contract"),
            "user-facing text cites a document: {text}"
        );
    }
    assert_eq!(report["sensitivity"]["minDiscordantPairs"], 4);
}

#[test]
fn the_demo_skill_against_itself_reports_no_detectable_difference() {
    let sandbox = Sandbox::empty();
    let out = eval(
        &sandbox,
        (ARM_V1, ARM_V1),
        DEMO_PROFILE,
        &["--runs", "10", "--model", "claude-opus-4-8"],
    );
    out.expect_code(0);
    let report = report_everywhere(&sandbox, &out);

    assert_eq!(
        report["overall"]["verdict"],
        "noDetectableDifference",
        "{}",
        out.context()
    );
    for scenario in array(&report, "scenarios") {
        assert_eq!(
            scenario["verdict"],
            "noDetectableDifference",
            "{}",
            out.context()
        );
    }
    assert_eq!(report["model"], "claude-opus-4-8");
    check_arm_labels(&sandbox, &out, &report, (ARM_V1, ARM_V1));
    simulated_banner(&out, &report);

    // 2 scenarios × 2 arms × 10 runs, every one completed.
    let batch_dir = only_batch_dir(&sandbox.store());
    let results = array(&read_json(&batch_dir.join("envelope.json")), "results").len();
    assert_eq!(results, 40, "{}", out.context());

    // The eval exited 0, and every other view judges the batch as the eval it is: `batches`
    // listed it `FAIL (1)` and `rollup` said `FAIL (exit 1)` (arm B judged at a 100% bar), and
    // `trend` mixed its arm rows with ordinary runs.
    let store = sandbox.store();
    let store_arg = store.to_str().expect("a UTF-8 temp path");
    let listed = cowork(
        &workspace_root(),
        &["batches", "--format", "json", "--store", store_arg],
    );
    listed.expect_code(0);
    let listed: Value = serde_json::from_str(&listed.stdout)
        .unwrap_or_else(|e| listed.fail(&format!("stdout is not JSON: {e}")));
    assert_eq!(
        listed["batches"][0]["verdict"], "no difference",
        "{listed:#}"
    );
    let rollup = cowork(
        &workspace_root(),
        &["rollup", "latest", "--store", store_arg],
    );
    rollup
        .expect_code(0)
        .expect_stderr("verdict: no difference (eval, A/B comparison) (exit 0)");
    let trend = cowork(
        &workspace_root(),
        &["trend", SCENARIOS, "--format", "json", "--store", store_arg],
    );
    trend.expect_code(0).expect_stderr("no decided batch in");
    if trend.stdout.contains("arm=") {
        trend.fail("trend shows an eval's arm rows");
    }
}

#[test]
fn an_eval_with_no_complete_pair_exits_2_saying_there_is_nothing_to_compare() {
    // Every run of arm B stops at an unanswered gate: no pair completes in both arms.
    let sandbox = Sandbox::empty();
    let profile = sandbox.path().join("b-never-answers.yaml");
    std::fs::write(
        &profile,
        "rules:\n  - arm: b\n    unanswered_rate: 1.0\n  - pass_rate: 0.9\n",
    )
    .expect("writing the profile");
    let profile = profile.display().to_string();
    for fail_on in ["b-worse", "never", "any-difference"] {
        let sandbox = Sandbox::empty();
        let out = eval(
            &sandbox,
            (ARM_V1, ARM_WORSE),
            &profile,
            &["--runs", "3", "--fail-on", fail_on],
        );
        out.expect_code(2)
            .expect_stderr("error: nothing to compare: no run completed in both arms")
            .expect_stderr("verdict (overall, alpha 0.05): nothing to compare");
        // The report is still written: it is the record of what ran.
        let report = report_everywhere(&sandbox, &out);
        assert_eq!(report["overall"]["pairs"], 0, "{}", out.context());
        assert_eq!(report["overall"]["excludedPairs"], 6, "{}", out.context());
        if fail_on == "never" {
            // Where the difference comes from: each scenario says it has no interval.
            let batch_dir = only_batch_dir(&sandbox.store()).display().to_string();
            for format in ["html", "markdown"] {
                let page = cowork(sandbox.path(), &["report", &batch_dir, "--format", format]);
                page.expect_code(0);
                let rows = page.stdout.matches("no complete pair, no interval").count();
                assert_eq!(rows, 2, "{format}: {}", page.stdout);
            }
        }
    }
}

#[test]
fn fail_on_picks_the_verdicts_that_exit_1() {
    // B worse: exits 1 under b-worse and any-difference, 0 under never.
    for (fail_on, expected) in [("b-worse", 1), ("any-difference", 1), ("never", 0)] {
        let sandbox = Sandbox::empty();
        let out = eval(
            &sandbox,
            (ARM_V1, ARM_WORSE),
            EVAL_PROFILE,
            &["--runs", "10", "--fail-on", fail_on],
        );
        out.expect_code(expected)
            .expect_stderr("verdict (overall, alpha 0.05): B worse");
    }
    // B better (a profile that makes arm A the weak one): only any-difference fails.
    let profile_dir = Sandbox::empty();
    let profile = profile_dir.path().join("a-weaker.yaml");
    std::fs::write(
        &profile,
        "rules:\n  - arm: a\n    pass_rate: 0.2\n  - pass_rate: 0.95\n",
    )
    .expect("writing the profile");
    let profile = profile.display().to_string();
    for (fail_on, expected) in [("b-worse", 0), ("any-difference", 1), ("never", 0)] {
        let sandbox = Sandbox::empty();
        let out = eval(
            &sandbox,
            (ARM_WORSE, ARM_V1),
            &profile,
            &["--runs", "10", "--fail-on", fail_on],
        );
        out.expect_code(expected)
            .expect_stderr("verdict (overall, alpha 0.05): B better");
    }
    check_refused(
        (ARM_V1, ARM_WORSE),
        &["--fail-on", "b-better"],
        &["--fail-on"],
    );
}

/// Runs an eval that must be refused: exit 2, every fragment on stderr, nothing on stdout and no
/// store, no `-o` file.
fn check_refused(arms: (&str, &str), extra: &[&str], expect: &[&str]) {
    let sandbox = Sandbox::empty();
    let out = eval(&sandbox, arms, EVAL_PROFILE, extra);
    out.expect_code(2);
    for fragment in expect {
        out.expect_stderr(fragment);
    }
    if !out.stdout.is_empty() {
        out.fail("a refused eval printed on stdout");
    }
    if sandbox.store().exists() {
        out.fail("a refused eval created the store directory");
    }
    if Path::new(&sandbox.path().join("eval-out.json")).exists() {
        out.fail("a refused eval wrote the -o file");
    }
}

#[test]
fn a_missing_arm_directory_exits_2_naming_the_flag_and_writes_nothing() {
    check_refused(
        ("examples/demo/skills/v9/csv-report", ARM_V1),
        &[],
        &["examples/demo/skills/v9/csv-report: --a: does not exist"],
    );
}

#[test]
fn an_arm_that_is_no_skill_or_plugin_exits_2() {
    check_refused(
        (ARM_V1, "examples/demo/data"),
        &[],
        &["examples/demo/data: --b: is neither a plugin"],
    );
}

#[test]
fn an_arm_with_another_basename_cannot_replace_the_sessions_plugin() {
    // A copy of the demo, so that the renamed plugin lives in this test's own directory (the
    // bundle root: the sandbox holds no git work tree).
    let sandbox = Sandbox::empty();
    copy_dir(
        &workspace_root().join("examples/demo"),
        &sandbox.path().join("demo"),
    );
    copy_dir(
        &sandbox.path().join("demo/skills/v1/csv-report"),
        &sandbox.path().join("demo/skills/v3/report"),
    );
    let store = sandbox.store();
    let out = cowork(
        sandbox.path(),
        &[
            "eval".as_ref(),
            "--a".as_ref(),
            "demo/skills/v1/csv-report".as_ref(),
            "--b".as_ref(),
            "demo/skills/v3/report".as_ref(),
            "demo/scenarios/csv-report.yaml".as_ref(),
            "--executor".as_ref(),
            "sim".as_ref(),
            "--store".as_ref(),
            store.as_os_str(),
        ],
    );
    out.expect_code(2)
        .expect_stderr(
            "demo/scenarios/csv-report.yaml: arm B (demo/skills/v3/report) cannot be applied",
        )
        .expect_stderr("basename");
    if store.exists() {
        out.fail("a refused eval created the store directory");
    }
}

#[test]
fn bad_runs_and_alpha_are_reported_together() {
    check_refused(
        (ARM_V1, ARM_WORSE),
        &["--runs", "1", "--alpha", "1.5"],
        &[
            "--runs: must be an integer from 2 to 10000",
            "--alpha: must be a number strictly between 0 and 1",
        ],
    );
}

#[test]
fn eval_help_documents_the_flags_and_exit_codes() {
    let sandbox = Sandbox::empty();
    let out = cowork(sandbox.path(), &["eval", "--help"]);
    out.expect_code(0);
    for fragment in [
        "--a <DIR>",
        "--b <DIR>",
        "--runs",
        "--model",
        "--alpha",
        "--seed",
        "--executor",
        "--sim-profile",
        "--output-format",
        "--output <FILE>",
        "Exit codes: 0",
        "--fail-on",
        "b-worse",
        "any-difference",
        "2 nothing to compare",
        "cowork eval --a",
        "Tango's score interval",
        "McNemar's score test",
    ] {
        if !out.stdout.contains(fragment) {
            out.fail(&format!("eval --help does not mention {fragment:?}"));
        }
    }
    // The statistics are score statistics (core/src/eval/stats.rs), not exact ones.
    for wrong in ["exact 95%", "exact McNemar", "exact interval"] {
        if out.stdout.contains(wrong) {
            out.fail(&format!("eval --help still says {wrong:?}"));
        }
    }
}

/// The numbers of the last progress line on stderr: (finished, planned, skipped, pass, fail,
/// error, discarded).
fn last_progress(out: &Output) -> [u64; 7] {
    let line = out
        .stderr
        .lines()
        .rev()
        .find(|line| line.starts_with('[') && line.contains(" jobs"))
        .unwrap_or_else(|| out.fail("no progress line"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let after = |word: &str| -> u64 {
        words
            .iter()
            .position(|w| *w == word)
            .and_then(|at| words.get(at + 1))
            .map_or(0, |n| {
                n.trim_matches(|c: char| !c.is_ascii_digit())
                    .parse()
                    .unwrap_or(0)
            })
    };
    let (done, planned) = words[1]
        .split_once('/')
        .unwrap_or_else(|| out.fail(&format!("no done/planned in {line:?}")));
    let number = |text: &str| -> u64 {
        text.parse()
            .unwrap_or_else(|_| out.fail(&format!("not a number {text:?} in {line:?}")))
    };
    let skipped = words
        .iter()
        .position(|w| *w == "skipped)")
        .map_or(0, |at| number(words[at - 1].trim_start_matches('(')));
    [
        number(done),
        number(planned),
        skipped,
        after("pass"),
        after("fail"),
        after("error"),
        after("discarded"),
    ]
}

#[test]
fn the_progress_of_an_eval_whose_arm_stops_adds_up_to_the_planned_jobs() {
    // Arm B stops at its first run (unanswered): its other runs are skipped, or discarded when
    // they finished first. The line said "9/9 jobs … discarded 7" for 10 planned.
    let sandbox = Sandbox::empty();
    let profile = sandbox.path().join("b-never-answers.yaml");
    std::fs::write(&profile, "rules:\n  - arm: b\n    unanswered_rate: 1.0\n")
        .expect("writing the profile");
    for slots in ["1", "4"] {
        let store = sandbox.path().join(format!("store-{slots}"));
        let args: Vec<OsString> = [
            "eval",
            "--a",
            ARM_V1,
            "--b",
            ARM_WORSE,
            "examples/demo/scenarios/csv-report.yaml",
            "--executor",
            "sim",
            "--sim-profile",
        ]
        .into_iter()
        .map(OsString::from)
        .chain([profile.clone().into_os_string()])
        .chain(["--runs", "5", "--slots", slots, "--store"].map(OsString::from))
        .chain([store.clone().into_os_string()])
        .collect();
        let out = cowork(&workspace_root(), &args);
        out.expect_code(2);
        let [done, planned, skipped, pass, fail, error, discarded] = last_progress(&out);
        if planned != 10 || done + skipped != planned {
            out.fail("the last progress line does not add up to the 10 planned jobs");
        }
        if pass + fail + error != done || discarded > done {
            out.fail("pass, fail and error are not the finished jobs, discarded among them");
        }
        // What the stored batch says was discarded and skipped, the line says too.
        let envelope = read_json(&only_batch_dir(&store).join("envelope.json"));
        let fleet = &envelope["fleet"];
        assert_eq!(
            (discarded, skipped),
            (
                number(&fleet["discardedTotal"], "runs") as u64,
                number(&fleet["jobs"], "skipped") as u64
            ),
            "{}",
            out.context()
        );
    }
}

/// The arguments of the demo eval (B made worse) with a JSON line on stdout and no progress.
const WORSE_EVAL: &[&str] = &[
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
    "10",
    "--output-format",
    "json",
    "--quiet",
];

#[test]
fn an_eval_through_the_fleet_reports_b_worse_like_the_embedded_one() {
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w1", "container", "4");
    fleet.spawn_worker("w2", "container", "4");
    let sandbox = Sandbox::empty();
    let output_file = sandbox.path().join("fleet-eval.json");
    let output_arg = output_file.display().to_string();
    let mut args = WORSE_EVAL.to_vec();
    args.extend(["--watch", "-o", &output_arg]);
    let out = fleet.cowork(&workspace_root(), &args);
    if out.code() != 1 {
        out.fail(&format!("expected exit 1 (B worse)\n{}", fleet.logs()));
    }
    let report = out.envelope();
    let batch = report["batchId"]
        .as_str()
        .unwrap_or_else(|| out.fail("the report names no batch"))
        .to_owned();
    out.expect_stderr("verdict (overall, alpha 0.05): B worse")
        .expect_stderr(&format!("submitted eval batch {batch}"))
        .expect_stderr(&format!("arm A = {ARM_V1}"))
        .expect_stderr(&format!("arm B = {ARM_WORSE}"));

    // The coordinator stored the report the CLI printed, and the -o file holds it too.
    let stored: Value =
        serde_json::from_slice(&fleet.object(&format!("batches/{batch}/eval.json")))
            .expect("the coordinator's eval.json is JSON");
    assert_eq!(stored, report, "{}", out.context());
    assert_eq!(read_json(&output_file), report, "{}", out.context());
    let spec: Value = serde_json::from_slice(&fleet.object(&format!("batches/{batch}/spec.json")))
        .expect("spec.json is JSON");
    assert_eq!(spec["spec"]["mode"], "eval");
    assert_eq!(
        spec["spec"]["eval"]["arms"],
        serde_json::json!([ARM_V1, ARM_WORSE])
    );

    let overall = &report["overall"];
    assert_eq!(overall["verdict"], "bWorse", "{}", out.context());
    let p = number(overall, "mcnemarP");
    assert!(
        p < 0.05,
        "McNemar p {p} is not significant\n{}",
        out.context()
    );
    assert_eq!(number(overall, "pairs"), 20.0, "{}", out.context());
    assert_eq!(
        report["arms"],
        serde_json::json!([
            { "arm": "A", "source": ARM_V1 },
            { "arm": "B", "source": ARM_WORSE },
        ])
    );
    simulated_banner(&out, &report);

    // The embedded eval of the same batch: same seed, same runs, so the same statistics.
    let embedded_sandbox = Sandbox::empty();
    let embedded = eval(
        &embedded_sandbox,
        (ARM_V1, ARM_WORSE),
        EVAL_PROFILE,
        &["--runs", "10"],
    );
    embedded.expect_code(1);
    let embedded_report = report_everywhere(&embedded_sandbox, &embedded);
    assert_eq!(
        embedded_report["overall"],
        report["overall"],
        "the fleet and the embedded eval disagree\n{}",
        out.context()
    );
    assert_eq!(embedded_report["scenarios"], report["scenarios"]);
}

#[test]
fn an_eval_without_watch_prints_its_batch_id_and_a_refused_one_exits_2() {
    let fleet = Fleet::start();
    let mut args: Vec<&str> = WORSE_EVAL.to_vec();
    args.retain(|arg| !matches!(*arg, "--output-format" | "json"));
    let out = fleet.cowork(&workspace_root(), &args);
    out.expect_code(0);
    let batch = cowork_schema::BatchId::new(out.stdout.trim())
        .unwrap_or_else(|e| out.fail(&format!("stdout is no batch id: {e}")));
    let spec: Value = serde_json::from_slice(&fleet.object(&format!("batches/{batch}/spec.json")))
        .expect("spec.json is JSON");
    assert_eq!(spec["spec"]["eval"]["alpha"], 0.05);

    // The client validates first: a missing arm never reaches the coordinator.
    let refused = fleet.cowork(
        &workspace_root(),
        &[
            "eval",
            "--a",
            "examples/demo/skills/v9/csv-report",
            "--b",
            ARM_V1,
            SCENARIOS,
            "--executor",
            "sim",
            "--watch",
        ],
    );
    refused
        .expect_code(2)
        .expect_stderr("examples/demo/skills/v9/csv-report: --a: does not exist");
}

#[test]
fn watch_needs_a_coordinator() {
    let sandbox = Sandbox::empty();
    let out = eval(&sandbox, (ARM_V1, ARM_WORSE), EVAL_PROFILE, &["--watch"]);
    out.expect_code(2).expect_stderr("--coordinator");
}

#[test]
fn the_report_of_an_eval_batch_shows_the_ab_table_with_labelled_arms() {
    let sandbox = Sandbox::empty();
    let out = eval(
        &sandbox,
        (ARM_V1, ARM_WORSE),
        EVAL_PROFILE,
        &["--runs", "10"],
    );
    out.expect_code(1);
    let eval_report = report_everywhere(&sandbox, &out);
    let batch_dir = only_batch_dir(&sandbox.store()).display().to_string();

    let html = cowork(sandbox.path(), &["report", &batch_dir, "--format", "html"]);
    html.expect_code(0);
    let page = &html.stdout;
    for fragment in [
        "<section id=\"eval\" class=\"ab\">",
        "<h2>A/B result: <span class=\"verdict b-worse\">B worse</span></h2>",
        &format!("arm A = <code>{ARM_V1}</code>"),
        &format!("arm B = <code>{ARM_WORSE}</code>"),
        "<th class=\"num\">interval</th>",
        "<tr data-scope=\"csv-report\">",
        "<tr data-scope=\"skill-triggers\">",
        "<tr data-scope=\"overall\">",
    ] {
        if !page.contains(fragment) {
            html.fail(&format!("the html report lacks {fragment:?}"));
        }
    }
    // The overall row shows the stored interval and verdict.
    let overall_row = page
        .split("<tr data-scope=\"overall\">")
        .nth(1)
        .and_then(|rest| rest.split("</tr>").next())
        .unwrap_or_else(|| html.fail("no overall row"));
    let diff = &eval_report["overall"]["diff"];
    let interval = format!(
        "[{:+.0}, {:+.0}]",
        (number(diff, "low") * 100.0).round(),
        (number(diff, "high") * 100.0).round()
    );
    for fragment in [interval.as_str(), "<strong>B worse</strong>"] {
        assert!(
            overall_row.contains(fragment),
            "the overall row {overall_row:?} lacks {fragment:?}"
        );
    }

    let markdown = cowork(
        sandbox.path(),
        &["report", &batch_dir, "--format", "markdown"],
    );
    markdown.expect_code(0);
    for fragment in [
        "### Eval A/B".to_owned(),
        format!("A = {ARM_V1}, B = {ARM_WORSE}: B worse"),
    ] {
        if !markdown.stdout.contains(&fragment) {
            markdown.fail(&format!("the markdown report lacks {fragment:?}"));
        }
    }

    let json = cowork(sandbox.path(), &["report", &batch_dir, "--format", "json"]);
    json.expect_code(0);
    let summary = json.envelope();
    let rows = array(&summary["eval"], "rows");
    let scopes: Vec<&str> = rows
        .iter()
        .map(|row| row["scope"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(scopes, ["csv-report", "skill-triggers", "overall"]);
    assert_eq!(summary["eval"]["armA"], ARM_V1);
    assert_eq!(summary["eval"]["armB"], ARM_WORSE);
    assert_eq!(rows[2]["verdict"], "B worse");
    assert_eq!(
        number(&rows[2], "pValue"),
        number(&eval_report["overall"], "mcnemarP")
    );
}

#[test]
fn an_eval_on_a_coordinator_is_judged_as_an_eval_in_its_list_pages_and_reports() {
    // Both arms run the same skill under a profile without an `arm` rule: no difference.
    let mut fleet = Fleet::start();
    fleet.spawn_worker("w1", "container", "4");
    let out = fleet.cowork(
        &workspace_root(),
        &[
            "eval",
            "--a",
            ARM_V1,
            "--b",
            ARM_V1,
            SCENARIOS,
            "--executor",
            "sim",
            "--sim-profile",
            DEMO_PROFILE,
            "--runs",
            "4",
            "--output-format",
            "json",
            "--quiet",
            "--watch",
        ],
    );
    if out.code() != 0 {
        out.fail(&format!(
            "expected exit 0 (no difference)\n{}",
            fleet.logs()
        ));
    }
    let report = out.envelope();
    assert_eq!(report["overall"]["verdict"], "noDetectableDifference");
    let batch = report["batchId"]
        .as_str()
        .unwrap_or_else(|| out.fail("the report names no batch"))
        .to_owned();
    let get = |target: &str| fleet.api_get(target);

    // The list API judges it by its A/B verdict, with `cowork eval`'s exit code.
    let listed: Value = serde_json::from_str(&get("/v1/batches")).expect("a JSON list");
    let record = listed
        .as_array()
        .unwrap_or_else(|| panic!("GET /v1/batches is no list: {listed:#}"))
        .iter()
        .find(|record| record["batchId"] == batch.as_str())
        .unwrap_or_else(|| panic!("batch {batch} is not listed: {listed:#}"));
    assert_eq!(record["ok"], true, "{record:#}");
    assert_eq!(record["exitCode"], 0, "{record:#}");
    assert_eq!(
        record["evalVerdict"], "no detectable difference",
        "{record:#}"
    );
    let status: Value =
        serde_json::from_str(&get(&format!("/v1/batches/{batch}"))).expect("a JSON status");
    assert_eq!(status["record"], *record, "{status:#}");

    // Watching the decided batch ends as the eval ended.
    let batch_id = cowork_schema::BatchId::new(&batch).expect("a batch id");
    fleet
        .watch(&workspace_root(), &batch_id)
        .expect_code(0)
        .expect_stderr("verdict: no detectable difference (eval, A/B comparison) (exit 0)");

    // The batch list page shows an eval and its verdict, not FAIL.
    let page = get(&format!("/v1/ui?token={TOKEN}"));
    let row = crate::fleet::list_page_row(&page, &batch);
    for fragment in [
        "data-mode=\"eval\"",
        "eval&#58; no detectable difference",
        "exit 0",
    ] {
        assert!(row.contains(fragment), "the row lacks {fragment:?}: {row}");
    }
    assert!(!row.contains("FAIL"), "the row judges the eval: {row}");

    // The live view's verdict is the eval's.
    let live: Value =
        serde_json::from_str(&get(&format!("/v1/batches/{batch}/live"))).expect("a JSON snapshot");
    assert_eq!(live["verdict"]["ok"], true, "{live:#}");
    assert_eq!(live["verdict"]["exitCode"], 0, "{live:#}");
    assert_eq!(
        live["verdict"]["evalVerdict"], "no detectable difference",
        "{live:#}"
    );

    // The Markdown report says eval and lists the arms without judging them one by one.
    let markdown = get(&format!("/v1/batches/{batch}/report?format=markdown"));
    for fragment in [
        "cowork eval `",
        "mode `eval`",
        "| arm | runs | pass rate | cost |",
        "csv-report \\[arm=A\\]",
    ] {
        assert!(
            markdown.contains(fragment),
            "the markdown lacks {fragment:?}:\n{markdown}"
        );
    }
    for wrong in ["command `run`", "PASS", "FAIL", "min pass rate"] {
        assert!(
            !markdown.contains(wrong),
            "the markdown says {wrong:?}:\n{markdown}"
        );
    }
}

#[test]
fn the_eval_report_lists_the_scenario_where_b_got_worse_first() {
    // Only skill-triggers is worse under B; csv-report (first by name) passes alike in both arms.
    let sandbox = Sandbox::empty();
    let profile = sandbox.path().join("skill-triggers-worse.yaml");
    std::fs::write(
        &profile,
        "rules:\n  - arm: b\n    scenario: skill-triggers\n    pass_rate: 0.05\n  - pass_rate: 0.95\n",
    )
    .expect("writing the profile");
    let profile = profile.display().to_string();
    let out = eval(&sandbox, (ARM_V1, ARM_WORSE), &profile, &["--runs", "12"]);
    out.expect_code(1);
    let eval_report = report_everywhere(&sandbox, &out);
    let scenarios = array(&eval_report, "scenarios");
    let diff_of = |name: &str| {
        scenarios
            .iter()
            .find(|scenario| scenario["scenario"] == name)
            .map(|scenario| number(&scenario["diff"], "estimate"))
            .unwrap_or_else(|| out.fail(&format!("eval.json has no scenario {name}")))
    };
    assert!(
        diff_of("skill-triggers") < diff_of("csv-report"),
        "{}",
        out.context()
    );
    let batch_dir = only_batch_dir(&sandbox.store()).display().to_string();

    let html = cowork(sandbox.path(), &["report", &batch_dir, "--format", "html"]);
    html.expect_code(0);
    let drivers = html
        .stdout
        .split("<h3>Where the difference comes from</h3>")
        .nth(1)
        .and_then(|rest| rest.split("</table>").next())
        .unwrap_or_else(|| {
            html.fail("the html report has no table of where the difference comes from")
        });
    let html_order: Vec<&str> = drivers
        .split("<tr data-driver=\"")
        .skip(1)
        .filter_map(|row| row.split('"').next())
        .collect();
    assert_eq!(html_order, ["skill-triggers", "csv-report"], "{drivers}");

    let markdown = cowork(
        sandbox.path(),
        &["report", &batch_dir, "--format", "markdown"],
    );
    markdown.expect_code(0);
    let table = markdown
        .stdout
        .split("Where the difference comes from")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").nth(1))
        .unwrap_or_else(|| {
            markdown.fail("the markdown report has no table of where the difference comes from")
        });
    let markdown_order: Vec<&str> = table
        .lines()
        .skip(2)
        .filter_map(|line| line.split('|').nth(1).map(str::trim))
        .collect();
    assert_eq!(markdown_order, ["skill-triggers", "csv-report"], "{table}");

    // The JSON summary gives the same order and each scenario's share, which add up to the
    // overall difference.
    let json = cowork(sandbox.path(), &["report", &batch_dir, "--format", "json"]);
    json.expect_code(0);
    let summary = json.envelope();
    assert_eq!(
        summary["eval"]["scenariosByDifference"],
        serde_json::json!(["skill-triggers", "csv-report"])
    );
    let rows = array(&summary["eval"], "rows");
    let shares: f64 = rows[..2]
        .iter()
        .map(|row| number(row, "shareOfOverall"))
        .sum();
    let overall = number(&eval_report["overall"]["diff"], "estimate");
    assert!((shares - overall).abs() < 1e-9, "{shares} vs {overall}");
    assert_eq!(rows[2]["shareOfOverall"], Value::Null);
}
