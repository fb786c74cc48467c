//! Unit tests of the simulator: the generator, rule matching and the internal consistency of
//! simulated results. Schema validation and the executor itself are tested in `tests/it/`.

use cowork_schema::batch::{ExecutorKind, SimRule, SimSpec};
use cowork_schema::ids::{BatchId, JobId, UnitRef};
use cowork_schema::job::{CellAxes, JobCommand, JobSpec, Tier};
use serde_json::Value;

use super::profile::{DEFAULT_DURATION_MS, DEFAULT_DURATION_SPREAD};
use super::stream::{Fnv1a, SplitMix64, job_stream};
use super::*;

fn job(scenario: &str, unit: UnitRef, repeat_index: Option<u32>) -> JobSpec {
    let batch_id = BatchId::new("b1").expect("valid literal");
    JobSpec {
        protocol: cowork_schema::job::PROTOCOL_VERSION,
        job_id: JobId::new(&batch_id, unit, repeat_index),
        batch_id,
        command: JobCommand::Run,
        tier: Tier::Container,
        unit,
        repeat_index,
        scenario_file: format!("{scenario}.yaml"),
        scenario_name: scenario.to_owned(),
        axes: None,
        arm: None,
        forwarded_flags: Vec::new(),
        bundle_sha256: "0".repeat(64),
        timeout_ms: 600_000,
        executor: ExecutorKind::Sim,
        sim: None,
        generation: 0,
        traceparent: None,
        republished: 0,
        dispatch_epoch: 0,
        leader_term: 0,
    }
}

fn spec(seed: u64, rules: Vec<SimRule>) -> SimSpec {
    SimSpec { seed, rules }
}

#[test]
fn generators_match_their_reference_values() {
    let mut stream = SplitMix64(0);
    assert_eq!(stream.next_u64(), 0xe220_a839_7b1d_cdaf);
    assert_eq!(stream.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    let mut hash = Fnv1a::new();
    hash.write(b"a");
    assert_eq!(hash.0, 0xaf63_dc4c_8601_ec8c);
    let mut stream = SplitMix64(42);
    for _ in 0..1000 {
        let draw = stream.next_f64();
        assert!((0.0..1.0).contains(&draw), "{draw}");
    }
}

fn check_pattern(pattern: &str, name: &str, expect: bool) {
    assert_eq!(
        scenario_matches(pattern, name),
        expect,
        "{pattern:?} on {name:?}"
    );
}

#[test]
fn scenario_patterns_are_substrings_with_anchors() {
    check_pattern("csv", "csv-metrics", true);
    check_pattern("metrics", "csv-metrics", true);
    check_pattern("^csv", "csv-metrics", true);
    check_pattern("^metrics", "csv-metrics", false);
    check_pattern("metrics$", "csv-metrics", true);
    check_pattern("csv$", "csv-metrics", false);
    check_pattern("^csv-metrics$", "csv-metrics", true);
    check_pattern("^csv$", "csv-metrics", false);
    check_pattern("", "anything", true);
    // Regex syntax is literal text.
    check_pattern("csv.*", "csv-metrics", false);
    check_pattern("a.b", "xa.by", true);
}

#[test]
fn first_matching_rule_wins_per_field() {
    let rules = vec![
        SimRule {
            scenario: Some("^other$".to_owned()),
            pass_rate: Some(0.1),
            ..SimRule::default()
        },
        SimRule {
            scenario: Some("csv".to_owned()),
            cost_usd: Some(0.5),
            ..SimRule::default()
        },
        SimRule {
            model: Some("claude-x".to_owned()),
            pass_rate: Some(0.2),
            ..SimRule::default()
        },
        SimRule {
            pass_rate: Some(0.3),
            cost_usd: Some(9.0),
            unanswered_rate: Some(7.0),
            missing_telemetry_rate: Some(f64::NAN),
            time_scale: Some(-1.0),
            ..SimRule::default()
        },
    ];
    let mut csv = job("csv-metrics", UnitRef::Cell(0), None);
    let profile = resolve_profile(&csv, &rules);
    assert_eq!(
        profile,
        ResolvedProfile {
            pass_rate: 0.3,
            cost_usd: 0.5,
            duration_ms: DEFAULT_DURATION_MS,
            duration_spread: DEFAULT_DURATION_SPREAD,
            missing_telemetry_rate: 0.0,
            non_deterministic_rate: 0.0,
            unanswered_rate: 1.0,
            time_scale: 0.0,
            infra_failures: 0,
            infra_after_spend_rate: 0.0,
            usage_limit_rate: 0.0,
        }
    );
    csv.axes = Some(CellAxes {
        model: Some("claude-x".to_owned()),
        ..CellAxes::default()
    });
    assert_eq!(resolve_profile(&csv, &rules).pass_rate, 0.2);
    let other = job("other", UnitRef::File(0), None);
    let profile = resolve_profile(&other, &rules);
    assert_eq!((profile.pass_rate, profile.cost_usd), (0.1, 9.0));
    let defaults = resolve_profile(&other, &[]);
    assert_eq!(
        (defaults.pass_rate, defaults.cost_usd, defaults.duration_ms),
        (0.9, 0.05, 45_000)
    );
    let arm_rule = vec![SimRule {
        arm: Some("b".to_owned()),
        pass_rate: Some(0.0),
        ..SimRule::default()
    }];
    let mut arm_b = job("x", UnitRef::File(0), None);
    assert_eq!(resolve_profile(&arm_b, &arm_rule).pass_rate, 0.9);
    arm_b.arm = Some("b".to_owned());
    assert_eq!(resolve_profile(&arm_b, &arm_rule).pass_rate, 0.0);
}

#[test]
fn outcome_ignores_batch_and_job_ids() {
    let spec = spec(7, Vec::new());
    let first = job("s", UnitRef::File(2), Some(3));
    let mut other_batch = first.clone();
    other_batch.batch_id = BatchId::new("another-batch").expect("valid literal");
    other_batch.job_id = JobId::new(&other_batch.batch_id, UnitRef::File(2), Some(3));
    other_batch.timeout_ms = 1;
    assert_eq!(simulate(&first, &spec), simulate(&other_batch, &spec));
}

#[test]
fn every_outcome_input_changes_the_stream() {
    let base = job("s", UnitRef::File(0), Some(0));
    let mut variants = vec![base.clone()];
    let mut with = |edit: &dyn Fn(&mut JobSpec)| {
        let mut variant = base.clone();
        edit(&mut variant);
        variants.push(variant);
    };
    with(&|job| job.scenario_name = "t".to_owned());
    with(&|job| job.unit = UnitRef::Cell(0));
    with(&|job| job.unit = UnitRef::File(1));
    with(&|job| job.repeat_index = Some(1));
    with(&|job| job.repeat_index = None);
    with(&|job| job.arm = Some("a".to_owned()));
    with(&|job| {
        job.axes = Some(CellAxes {
            baseline: Some(String::new()),
            ..CellAxes::default()
        })
    });
    with(&|job| {
        job.axes = Some(CellAxes {
            model: Some(String::new()),
            ..CellAxes::default()
        })
    });
    let mut firsts: Vec<u64> = variants
        .iter()
        .map(|variant| job_stream(1, variant).next_u64())
        .collect();
    firsts.push(job_stream(2, &base).next_u64());
    let n_total = firsts.len();
    firsts.sort_unstable();
    firsts.dedup();
    assert_eq!(firsts.len(), n_total, "every variant has its own stream");
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("missing string at {pointer} in {value}"))
}

/// Checks the invariants of harness-behaviour.md#verdict on one simulated result.
fn check_consistent(result: &Value, exit_code: i32) {
    let verdict = &result["verdict"];
    let signals = verdict["signals"].as_array().expect("signals array");
    let has_fail = signals.iter().any(|signal| signal["severity"] == "fail");
    let pass = verdict["pass"].as_bool().expect("pass bool");
    assert_eq!(pass, !has_fail, "{result}");
    assert_eq!(verdict["exitCode"], i64::from(!pass), "{result}");
    assert_eq!(exit_code, i32::from(!pass), "{result}");
    let assertions = result["assertions"].as_array().expect("assertions array");
    assert!((2..=4).contains(&assertions.len()), "{result}");
    let failing: Vec<&Value> = assertions.iter().filter(|a| a["pass"] == false).collect();
    let assertion_signals: Vec<&Value> = signals
        .iter()
        .filter(|s| s["code"] == "assertion")
        .collect();
    assert_eq!(failing.len(), assertion_signals.len(), "{result}");
    assert!(
        signals[..failing.len()]
            .iter()
            .all(|s| s["code"] == "assertion"),
        "assertion signals come first: {result}"
    );
    let failures = verdict["failures"].as_array().expect("failures array");
    let n_fail_signals = signals.iter().filter(|s| s["severity"] == "fail").count();
    assert_eq!(failures.len(), n_fail_signals, "{result}");
    if pass {
        assert!(failures.is_empty(), "{result}");
    }
    let result_error = str_at(result, "/result") == "error";
    assert_eq!(
        assertions[0]["pass"] == false,
        result_error,
        "result assertion follows result: {result}"
    );
    let expect_outcome = if result_error {
        "errored"
    } else if pass {
        "delivered_clean"
    } else {
        "delivered_with_verdict_fail"
    };
    assert_eq!(str_at(result, "/outcome"), expect_outcome, "{result}");
    let guards = verdict["guards"].as_array().expect("guards array");
    let names: Vec<&str> = guards
        .iter()
        .map(|g| g["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        names,
        [
            "capability-use",
            "permissive-auto-allow",
            "host-path",
            "outputs-delete"
        ]
    );
    let scan_warned = signals.iter().any(|s| s["code"] == "scan_unavailable");
    assert_eq!(scan_warned, result.get("scan").is_none(), "{result}");
    assert_eq!(
        str_at(result, "/verdict/guards/2/status"),
        if scan_warned { "unverified" } else { "ok" }
    );
    let non_deterministic = result["nonDeterministic"] == true;
    assert_eq!(
        non_deterministic,
        signals.iter().any(|s| s["code"] == "non_deterministic"),
        "{result}"
    );
    let skill_failed = assertions.iter().any(|a| {
        a["pass"] == false
            && a["assertion"]
                .as_object()
                .is_some_and(|o| o.contains_key("tool_called") || o.contains_key("skill_triggered"))
    });
    let invoked = result["skillsInvoked"]
        .as_array()
        .expect("skillsInvoked array");
    assert_eq!(invoked.is_empty(), skill_failed, "{result}");
    assert_eq!(result["simulated"], true);
    assert_eq!(result["generator"], SIM_GENERATOR);
}

#[test]
fn durations_spread_as_the_profile_says() {
    let durations = |spread: Option<f64>| -> Vec<u64> {
        let spec = spec(
            5,
            vec![SimRule {
                duration_ms: Some(2000),
                duration_spread: spread,
                ..SimRule::default()
            }],
        );
        (0..50)
            .map(|index| simulate(&job("s", UnitRef::File(0), Some(index)), &spec).duration_ms)
            .collect()
    };
    assert!(durations(Some(0.0)).iter().all(|ms| *ms == 2000));
    let default = durations(None);
    assert!(
        default.iter().all(|ms| (1000..=3000).contains(ms)),
        "{default:?}"
    );
    assert!(default.iter().any(|ms| *ms != 2000));
    assert_eq!(default, durations(Some(0.5)), "the default spread is ±50%");
    let narrow = durations(Some(0.1));
    assert!(
        narrow.iter().all(|ms| (1800..=2200).contains(ms)),
        "{narrow:?}"
    );
}

#[test]
fn simulated_results_are_internally_consistent() {
    let spec = spec(
        11,
        vec![SimRule {
            pass_rate: Some(0.5),
            non_deterministic_rate: Some(0.3),
            missing_telemetry_rate: Some(0.3),
            unanswered_rate: Some(0.1),
            ..SimRule::default()
        }],
    );
    let (mut n_completed, mut n_unanswered, mut n_pass) = (0, 0, 0);
    for repeat_index in 0..600 {
        let run = simulate(&job("s", UnitRef::File(0), Some(repeat_index)), &spec);
        assert_eq!(run.envelope["simulated"], true);
        assert_eq!(run.envelope["tool"], "cowork-harness");
        match &run.outcome {
            SimOutcome::Completed { result } => {
                n_completed += 1;
                check_consistent(result, run.exit_code);
                n_pass += usize::from(result["verdict"]["pass"] == true);
                assert_eq!(result.get("cost").is_some(), result.get("usage").is_some());
                let entry = &run.envelope["results"][0];
                assert_eq!(entry["verdict"], result["verdict"]);
                assert!(entry["provenance"].is_object(), "{entry}");
                assert_eq!(
                    str_at(result, "/outDir"),
                    format!("sim://s/f0/{repeat_index}")
                );
            }
            SimOutcome::Unanswered {
                message,
                partial_result,
                ..
            } => {
                n_unanswered += 1;
                assert_eq!(run.exit_code, 2);
                assert_eq!(partial_result["partial"], true);
                assert_eq!(str_at(partial_result, "/unansweredGate/message"), message);
                assert_eq!(run.envelope["error"]["category"], "unanswered");
            }
        }
    }
    // Wide bounds: the seed is fixed, so these are exact facts of this stream, not estimates.
    assert!((20..=100).contains(&n_unanswered), "{n_unanswered}");
    assert!(
        n_pass > 150 && n_pass < n_completed - 150,
        "{n_pass}/{n_completed}"
    );
}

#[test]
fn cell_axes_and_flags_show_in_the_result() {
    let mut cell = job("s", UnitRef::Cell(4), None);
    cell.axes = Some(CellAxes {
        baseline: Some("desktop-1.2".to_owned()),
        model: Some("claude-opus-5".to_owned()),
        skill_dir: Some("skills/pdf-v2/".to_owned()),
    });
    cell.forwarded_flags = vec!["--label".to_owned(), "nightly".to_owned()];
    cell.tier = Tier::Protocol;
    let run = simulate(
        &cell,
        &spec(
            1,
            vec![SimRule {
                pass_rate: Some(1.0),
                ..SimRule::default()
            }],
        ),
    );
    let SimOutcome::Completed { result } = &run.outcome else {
        panic!("no unanswered rate, so the run completes");
    };
    assert_eq!(result["models"], serde_json::json!(["claude-opus-5"]));
    assert_eq!(str_at(result, "/baseline"), "desktop-1.2");
    assert_eq!(str_at(result, "/fidelity"), "protocol");
    assert_eq!(str_at(result, "/context/availableSkills/0/id"), "pdf-v2");
    assert_eq!(result["skillsInvoked"], serde_json::json!(["pdf-v2"]));
    assert_eq!(str_at(result, "/runLabel"), "nightly");
    assert_eq!(str_at(result, "/outDir"), "sim://s/c4/0");
    assert_eq!(
        str_at(&run.envelope, "/results/0/provenance/skill"),
        "offered,invoked"
    );
    assert!(result.get("ablated").is_none());

    cell.forwarded_flags = vec!["--ablate-skill".to_owned()];
    let run = simulate(&cell, &spec(1, Vec::new()));
    let SimOutcome::Completed { result } = &run.outcome else {
        panic!("no unanswered rate, so the run completes");
    };
    assert_eq!(result["ablated"], true);
    assert_eq!(result["context"]["availableSkills"], serde_json::json!([]));
    assert_eq!(
        str_at(&run.envelope, "/results/0/provenance/skill"),
        "not-offered"
    );
}

#[test]
fn authored_assertions_follow_the_schema_key_order() {
    let scenario = serde_json::json!({
        "prompt": "p",
        "assert": [
            {"result": "success"},
            {"result": "success", "tool_called": "Skill"},
            {"user_visible_artifact": "outputs/report.md"},
        ],
    });
    let authored = authored_assertions(&scenario).expect("a list of objects");
    let keys: Vec<&str> = authored.iter().map(|(key, _)| key.as_str()).collect();
    // The CLI stores assertion objects in schema declaration order
    // (harness-behaviour.md#repeat-rollup, harness-behaviour.md#stored-key-order).
    assert_eq!(keys, ["result", "tool_called", "user_visible_artifact"]);
    let stored: Vec<&String> = authored[1].1.keys().collect();
    assert_eq!(stored, ["tool_called", "result"]);
    assert!(authored_assertions(&serde_json::json!({"prompt": "p"})).is_none());
}

#[test]
fn simulated_runs_report_the_authored_assertions() {
    let scenario = serde_json::json!({"assert": [
        {"result": "success"},
        {"tool_called": "Skill"},
        {"transcript_matches": "report"},
    ]});
    let spec = spec(
        5,
        vec![SimRule {
            pass_rate: Some(0.5),
            ..SimRule::default()
        }],
    );
    let mut n_failed = 0;
    for repeat_index in 0..200 {
        let job = job("s", UnitRef::File(0), Some(repeat_index));
        let run = simulate_scenario(&job, &spec, authored_assertions(&scenario));
        let SimOutcome::Completed { result } = &run.outcome else {
            panic!("no unanswered rate, so the run completes");
        };
        check_consistent(result, run.exit_code);
        let keys: Vec<&str> = result["assertions"]
            .as_array()
            .expect("assertions is an array")
            .iter()
            .map(|entry| {
                entry["assertion"]
                    .as_object()
                    .and_then(|object| object.keys().next())
                    .map_or("", String::as_str)
            })
            .collect();
        assert_eq!(keys, ["result", "tool_called", "transcript_matches"]);
        if result["verdict"]["pass"] == false {
            n_failed += 1;
            let failing = result["assertions"]
                .as_array()
                .expect("assertions is an array")
                .iter()
                .filter(|entry| entry["pass"] == false)
                .count();
            assert!(
                failing >= 1,
                "a failed run names at least one failing assertion"
            );
        }
    }
    assert!(n_failed > 50, "{n_failed}");
}

#[test]
fn rules_that_select_no_job_are_found() {
    let rules = vec![
        SimRule {
            scenario: Some("csv".to_owned()),
            ..SimRule::default()
        },
        SimRule {
            skill_dir: Some("skills/v3/csv-report".to_owned()),
            ..SimRule::default()
        },
        SimRule {
            pass_rate: Some(0.5),
            ..SimRule::default()
        },
        SimRule {
            scenario: Some("^report$".to_owned()),
            ..SimRule::default()
        },
    ];
    let jobs = [
        job("csv-report", UnitRef::File(0), None),
        job("triggers", UnitRef::File(1), None),
    ];
    assert_eq!(rules_matching_nothing(&rules, &jobs), [1, 3]);
    assert_eq!(rules_matching_nothing(&rules, &[]), [0, 1, 2, 3]);
}
