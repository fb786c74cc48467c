use cowork_schema::batch::{BatchMode, EvalSpec, ExecutorKind};
use cowork_schema::eval::{EvalReport, EvalVerdict};

use super::*;
use crate::eval::gate::{EXIT_NOTHING_TO_COMPARE, EvalGate, eval_exit_code, nothing_to_compare};
use crate::plan::eval::tests::{batch, eval_plan, flags, run_result};
use crate::plan::{PlanInput, plan_units};

#[test]
fn pairs_join_the_arms_by_scenario_and_repeat_index() {
    let plan = eval_plan(&["scenarios/s0.yaml"], 2, None);
    // Unit 1 (arm B) repeat 1 errored: it is absent from the folded runs.
    let folded = [(0, Some(0)), (0, Some(1)), (1, Some(0))];
    let results = [
        run_result(true, 0.5),
        run_result(false, 0.25),
        run_result(false, 1.0),
    ];
    let pairs = paired_outcomes(&plan, &folded, &results, 0, 1).expect("results pair");
    let done = |pass, cost| ArmOutcome {
        pass,
        completed: true,
        cost_usd: Some(cost),
    };
    assert_eq!(
        pairs,
        [
            PairedOutcome {
                scenario: "s0".to_owned(),
                repeat_index: 0,
                a: done(true, 0.5),
                b: done(false, 1.0),
            },
            PairedOutcome {
                scenario: "s0".to_owned(),
                repeat_index: 1,
                a: done(false, 0.25),
                b: ArmOutcome {
                    pass: false,
                    completed: false,
                    cost_usd: None,
                },
            },
        ]
    );
}

/// Arms `A` and `B` with these sources.
fn two_arms(a: &str, b: &str) -> Vec<NamedArm> {
    [("A", a), ("B", b)]
        .map(|(name, source)| NamedArm {
            name: name.to_owned(),
            source: source.to_owned(),
        })
        .to_vec()
}

fn settings() -> EvalSpec {
    EvalSpec {
        arms: vec![
            Some("skills/v1/k".to_owned()),
            Some("skills/v2/k".to_owned()),
        ],
        arm_names: Vec::new(),
        control: 0,
        model: Some("pinned-model".to_owned()),
        alpha: 0.05,
        seed: 7,
        resamples: 200,
        sequential: None,
        mde: None,
    }
}

#[test]
fn the_eval_document_labels_the_arms_and_reads_back_as_stored() {
    let plan = eval_plan(&["scenarios/s0.yaml"], 2, Some("pinned-model"));
    // A passes both runs, B fails both: two discordant pairs, too few for significance.
    let folded = [(0, Some(0)), (0, Some(1)), (1, Some(0)), (1, Some(1))];
    let results = [
        run_result(true, 0.5),
        run_result(true, 0.5),
        run_result(false, 0.25),
        run_result(false, 0.25),
    ];
    let arms = two_arms("skills/v1/k", "skills/v2/k");
    let settings = settings();
    let document = eval_document(&EvalDocumentInput {
        plan: &plan,
        settings: &settings,
        arms: &arms,
        folded: &folded,
        results: &results,
        simulated_runs: 0,
    })
    .expect("an eval plan's results give a report");
    assert_eq!(document.batch_id, "b1");
    assert_eq!(document.executor, "sim");
    assert!(
        document.simulated,
        "the sim executor always marks the report simulated"
    );
    assert_eq!(document.model.as_deref(), Some("pinned-model"));
    assert_eq!(document.runs_per_arm, 2);
    assert_eq!(document.report.alpha, 0.05);
    assert_eq!(document.report.confidence_level, 0.95);
    let overall = &document.report.overall;
    assert_eq!(overall.discordant.a_pass_b_fail, 2);
    assert_eq!(overall.arms[0].source, "skills/v1/k");
    assert_eq!(overall.arms[1].source, "skills/v2/k");
    assert_eq!(overall.verdict, EvalVerdict::NoDetectableDifference);
    assert_eq!(eval_exit_code(&document.report, EvalGate::BWorse), 0);
    assert_eq!(nothing_to_compare(&document.report), None);

    let stored = document.to_stored_json().expect("the document serializes");
    assert!(stored.ends_with(b"}\n"));
    let read_back: EvalDocument = serde_json::from_slice(&stored).expect("eval.json reads back");
    assert_eq!(read_back, document);
    assert_eq!(
        eval_document_key(&plan.batch_id),
        "batches/b1/eval.json".to_owned()
    );
}

#[test]
fn only_an_eval_plan_has_an_eval_document() {
    let flags = flags(2);
    let layout = plan_units(&batch(&["scenarios/s0.yaml"]), &flags, BatchMode::Run)
        .expect("test batch plans");
    let plan = Plan::new(
        layout,
        PlanInput {
            batch_id: BatchId::new("b1").expect("valid batch id"),
            flags,
            mode: BatchMode::Run,
            executor: ExecutorKind::Sim,
            sim: None,
            bundle_sha256: "ab".repeat(32),
        },
    );
    let error = eval_document(&EvalDocumentInput {
        plan: &plan,
        settings: &settings(),
        arms: &two_arms("a", "b"),
        folded: &[],
        results: &[],
        simulated_runs: 0,
    })
    .expect_err("a run batch is no eval");
    assert_eq!(error.to_string(), "batch b1 is a run batch, not an eval");
}

#[test]
fn pairing_refuses_mismatched_results() {
    let plan = eval_plan(&["scenarios/s0.yaml"], 2, None);
    assert_eq!(
        paired_outcomes(&plan, &[(0, Some(0))], &[], 0, 1),
        Err(EvalPairingError::ResultCount {
            folded: 1,
            results: 0
        })
    );
}

/// A report whose overall comparison has the given pairs and verdict.
fn report_with(pairs: u64, verdict: EvalVerdict) -> EvalReport {
    let sources = ArmSources {
        a: "a".to_owned(),
        b: "b".to_owned(),
    };
    let mut report = eval_report(
        &sources,
        &[],
        &EvalOptions {
            alpha: 0.05,
            mde: None,
        },
    )
    .expect("an empty report is valid");
    report.overall.pairs = pairs;
    report.overall.verdict = verdict;
    report
}

#[test]
fn the_exit_code_follows_the_gate_and_nothing_to_compare_is_an_error() {
    use EvalVerdict::{BBetter, BWorse, NoDetectableDifference};
    let cases = [
        (EvalGate::BWorse, BWorse, 1),
        (EvalGate::BWorse, BBetter, 0),
        (EvalGate::BWorse, NoDetectableDifference, 0),
        (EvalGate::AnyDifference, BWorse, 1),
        (EvalGate::AnyDifference, BBetter, 1),
        (EvalGate::AnyDifference, NoDetectableDifference, 0),
        (EvalGate::Never, BWorse, 0),
        (EvalGate::Never, BBetter, 0),
    ];
    for (gate, verdict, expected) in cases {
        assert_eq!(
            eval_exit_code(&report_with(10, verdict), gate),
            expected,
            "{gate:?} {verdict:?}"
        );
    }
    for gate in [EvalGate::Never, EvalGate::BWorse, EvalGate::AnyDifference] {
        let empty = report_with(0, NoDetectableDifference);
        assert_eq!(eval_exit_code(&empty, gate), EXIT_NOTHING_TO_COMPARE);
        let message = nothing_to_compare(&empty).expect("no pair completed");
        assert!(message.starts_with("nothing to compare: "), "{message}");
    }
}

/// An eval plan of one scenario with `arms` (name, directory; `None` for no skill).
fn plan_with_arms(arms: &[(&str, Option<&str>)], runs: u32) -> Plan {
    use crate::prepared::{NO_SKILL, PreparedArm};
    let arms: Vec<PreparedArm> = arms
        .iter()
        .map(|&(name, dir)| PreparedArm {
            name: name.to_owned(),
            declared: dir.unwrap_or(NO_SKILL).to_owned(),
            rel_path: dir.map(str::to_owned),
        })
        .collect();
    crate::plan::eval::tests::plan_of_arms(&arms, &["scenarios/s0.yaml"], runs, None)
}

#[test]
fn three_arms_find_the_planted_winner_with_holm_adjusted_p() {
    let runs = 20;
    let plan = plan_with_arms(
        &[
            ("base", Some("skills/v1/k")),
            ("v2", Some("skills/v2/k")),
            ("v3", Some("skills/v3/k")),
        ],
        runs,
    );
    // base and v3 pass every even run, v2 passes every run: v2 wins 10 pairs, v3 none.
    let passes = |unit: u32, run: u32| unit == 1 || run.is_multiple_of(2);
    let mut folded = Vec::new();
    let mut results = Vec::new();
    for unit in 0..3 {
        for run in 0..runs {
            folded.push((unit, Some(run)));
            results.push(run_result(passes(unit, run), 0.1));
        }
    }
    let arms: Vec<NamedArm> = ["base", "v2", "v3"]
        .map(|name| NamedArm {
            name: name.to_owned(),
            source: format!("skills/{name}/k"),
        })
        .to_vec();
    let settings = EvalSpec {
        arms: vec![Some("skills/v1/k".to_owned()); 3],
        arm_names: vec!["base".into(), "v2".into(), "v3".into()],
        ..settings()
    };
    let document = eval_document(&EvalDocumentInput {
        plan: &plan,
        settings: &settings,
        arms: &arms,
        folded: &folded,
        results: &results,
        simulated_runs: 0,
    })
    .expect("a three-arm eval gives a report");
    let ranked: Vec<(&str, u32)> = document
        .comparisons
        .iter()
        .map(|comparison| (comparison.candidate.name.as_str(), comparison.rank))
        .collect();
    assert_eq!(ranked, [("v2", 1), ("v3", 2)]);
    let (best, other) = (&document.comparisons[0], &document.comparisons[1]);
    // By hand: v2's p = P[|N(0,1)| ≥ √10] (b = 0, c = 10), v3's p = 1. Holm: the smaller times
    // 2 comparisons; the larger min(1, 1 × 1), kept monotone.
    let p_v2 = crate::eval::mcnemar_score(0, 10);
    assert_eq!(best.report.overall.mcnemar_p, p_v2);
    assert!((best.holm_p - 2.0 * p_v2).abs() < 1e-15);
    assert_eq!(other.holm_p, 1.0);
    assert_eq!(best.verdict, EvalVerdict::BBetter);
    assert_eq!(other.verdict, EvalVerdict::NoDetectableDifference);
    assert_eq!(best.control.name, "base");
    assert_eq!(
        document.report, best.report,
        "the report is the best candidate's"
    );
    assert_eq!(
        crate::eval::document_verdict_words(&document),
        "v2 better than base"
    );
    assert_eq!(
        crate::eval::document_exit_code(&document, EvalGate::BWorse),
        0
    );
    assert_eq!(
        crate::eval::document_exit_code(&document, EvalGate::AnyDifference),
        1
    );
    let stored = document.to_stored_json().expect("the document serializes");
    let read_back: EvalDocument = serde_json::from_slice(&stored).expect("eval.json reads back");
    assert_eq!(read_back, document);
}

#[test]
fn the_no_skill_arm_keeps_the_scenario_and_passes_ablate_skill() {
    let plan = plan_with_arms(&[("A", None), ("B", Some("skills/v2/k"))], 2);
    let jobs: Vec<_> = plan.jobs().collect();
    let (no_skill, with_skill) = (&jobs[0], &jobs[1]);
    assert_eq!(no_skill.arm.as_deref(), Some("a"));
    assert_eq!(no_skill.forwarded_flags, ["--ablate-skill"]);
    assert_eq!(no_skill.scenario_file, "scenarios/s0.yaml");
    assert_eq!(with_skill.arm.as_deref(), Some("b"));
    assert!(with_skill.forwarded_flags.is_empty());
    assert_ne!(with_skill.scenario_file, "scenarios/s0.yaml");
    assert_eq!(plan.units[0].label, "s0 [arm=A]");
}
